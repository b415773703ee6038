/* SPDX-License-Identifier: Apache-2.0 */
/* Command-session methods: Exec, Get/List, signals, AttachSession (output as
 * a stream, following the session live) and WriteStdin (a stream in). */
#include <stdlib.h>
#include <string.h>

#include "rpc/service_internal.h"
#include "session/session.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

#define ATTACH_CHUNK (64u << 10)

/* Decodes req with schema into out, whose member *id names the session returned. */
static wk_session *need_session(const pr_schema *schema, json_object *req, void *out, const char *const *id,
                                sp_error **err)
{
        if (pr_msg_decode(schema, req, out, err) < 0)
                return NULL;
        wk_session *s = wk_node_session_find(wk__svc.node, *id);
        if (!s)
                sp_error_set(err, SP_E_NOT_FOUND, "session %s not found", *id);
        return s;
}

/* --- Exec: answers once the command started (or could not) ---
 * --- ExecStream: a Session frame once accepted, another once started --- */

typedef struct {
        sp_rpc_call *call;
        wk_session *session; /* NULL once answered or gone */
        wk_session_watch watch;
        bool streaming; /* ExecStream */
} exec_wait;

/* Sends the session as it is now as one JSON frame of an ExecStream. */
static int exec_send(exec_wait *w, wk_session *s)
{
        _cleanup_json_ json_object *o = wk_session_to_json(s);
        return sp_rpc_call_send_json(w->call, o, NULL) < 0 ? -1 : 0;
}

/* Answers once; the wait itself is freed by on_close, which always follows. */
static void exec_finish(exec_wait *w)
{
        if (!w->session)
                return;
        wk_session *s = w->session;
        w->session = NULL;
        wk_session_watch_remove(s, &w->watch);
        if (w->streaming) {
                /* The start report (running, exited, or failed with why). */
                if (exec_send(w, s) == 0)
                        sp_rpc_call_end(w->call, NULL, NULL);
        } else if (wk_session_get_state(s) == WK_SESSION_FAILED) {
                sp_rpc_call_failf(w->call, SP_E_INVALID, "%s",
                                  wk_session_failure(s) ? wk_session_failure(s) : "exec failed");
        } else {
                _cleanup_json_ json_object *o = wk_session_to_json(s);
                sp_rpc_call_reply(w->call, o, NULL);
        }
}

static void exec_on_state(wk_session *s, void *ud)
{
        exec_wait *w = ud;
        if (wk_session_get_state(s) != WK_SESSION_STARTING)
                exec_finish(w);
}

static void exec_on_gone(wk_session *s, void *ud)
{
        (void)s;
        exec_wait *w = ud;
        w->session = NULL;
        sp_rpc_call_failf(w->call, SP_E_NOT_FOUND, "the session was deleted before it started");
}

static void exec_on_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        exec_wait *w = ud;
        /* If the caller left first, the command runs on; only the wait ends. */
        if (w->session)
                wk_session_watch_remove(w->session, &w->watch);
        sp_rpc_call_unref(w->call);
        free(w);
}

/* Exec (userdata NULL) and ExecStream (userdata non-NULL). A refusal before
 * the session exists (bad request, no such sandbox, no agent, too many
 * sessions, a session of that id already) is the call's error either way. */
void wk__h_exec(sp_rpc_call *call, json_object *req, void *ud)
{
        sp_error *e = NULL;
        pr_wk_exec q = {0};
        if (pr_msg_decode(&pr_wk_exec_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        /* The agent validates argv, env, cwd, user, pty and stdin itself. */
        _cleanup_json_ json_object *exec = json_object_new_object();
        const struct {
                const char *name;
                json_object *v;
        } pass[] = {{"argv", q.argv}, {"env", q.env}, {"cwd", q.cwd},
                    {"user", q.user}, {"pty", q.pty}, {"stdin", q.stdin_open}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(pass); i++)
                if (pass[i].v)
                        json_object_object_add(exec, pass[i].name, json_object_get(pass[i].v));
        wk_session *s;
        if (wk_node_exec(wk__svc.node, q.sandbox_id, q.session_id, exec, q.timeout_ms, &s, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        exec_wait *w = calloc(1, sizeof(*w));
        if (!w) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        w->call = sp_rpc_call_ref(call);
        w->session = s;
        w->streaming = ud != NULL;
        w->watch.on_state = exec_on_state;
        w->watch.on_gone = exec_on_gone;
        w->watch.userdata = w;
        static const sp_rpc_call_ops ops = {.on_close = exec_on_close};
        sp_rpc_call_set_ops(call, &ops, w);
        wk_session_watch_add(s, &w->watch);
        /* The acceptance: the session is recorded here and its exec is on its way to the agent. */
        if (w->streaming && exec_send(w, s) < 0)
                return; /* the caller left: on_close frees the wait; the command runs on */
        if (wk_session_get_state(s) != WK_SESSION_STARTING)
                exec_finish(w);
}

void wk__h_get_session(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_session_ref q = {0};
        wk_session *s = need_session(&pr_wk_session_ref_schema, req, &q, &q.session_id, &e);
        if (!s) {
                wk__fail(call, e);
                return;
        }
        _cleanup_json_ json_object *o = wk_session_to_json(s);
        sp_rpc_call_reply(call, o, NULL);
}

void wk__h_list_sessions(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_list_sessions q = {0};
        if (pr_msg_decode(&pr_wk_list_sessions_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        if (!wk_node_sandbox_find(wk__svc.node, q.sandbox_id)) {
                sp_rpc_call_failf(call, SP_E_NOT_FOUND, "sandbox %s not found", q.sandbox_id);
                return;
        }
        _cleanup_json_ json_object *o = wk_node_sessions_json(wk__svc.node, q.sandbox_id);
        sp_rpc_call_reply(call, o, NULL);
}

void wk__h_signal(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_signal_session q = {0};
        wk_session *s = need_session(&pr_wk_signal_session_schema, req, &q, &q.session_id, &e);
        if (!s || wk_session_signal(s, (int)q.signal, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

void wk__h_kill(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_session_ref q = {0};
        wk_session *s = need_session(&pr_wk_session_ref_schema, req, &q, &q.session_id, &e);
        if (!s || wk_session_kill(s, "killed", &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

void wk__h_resize(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_resize_session q = {0};
        wk_session *s = need_session(&pr_wk_resize_session_schema, req, &q, &q.session_id, &e);
        if (!s || wk_session_resize(s, (int)q.rows, (int)q.cols, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

void wk__h_close_stdin(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_session_ref q = {0};
        wk_session *s = need_session(&pr_wk_session_ref_schema, req, &q, &q.session_id, &e);
        if (!s || wk_session_close_stdin(s, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

/* --- AttachSession --- */

typedef struct {
        sp_rpc_call *call;
        wk_session *session;
        wk_session_watch watch;
        uint64_t offset;
        bool started_sent, ended, blocked;
} attach_state;

static void attach_pump(attach_state *a);

static void exit_event(attach_state *a)
{
        _cleanup_json_ json_object *o = NULL;
        const wk_session_exit *x = wk_session_get_exit(a->session);
        if (x) {
                pr_wk_exit_event ev = {.event = "exit",
                                       .code = x->code,
                                       .signal = x->signal,
                                       .oom = x->oom,
                                       .killed = x->killed,
                                       .reason = x->reason[0] ? x->reason : NULL};
                o = pr_msg_encode(&pr_wk_exit_event_schema, &ev);
        } else {
                const char *msg = wk_session_failure(a->session);
                o = pr_msg_encode(&pr_wk_error_event_schema,
                                  &(pr_wk_message_event){"error", msg ? msg : "the session failed"});
        }
        sp_rpc_call_send_json(a->call, o, NULL);
        sp_rpc_call_end(a->call, NULL, NULL);
        a->ended = true;
}

static void attach_pump(attach_state *a)
{
        if (a->ended || a->blocked || !a->session)
                return;
        wk_session *s = a->session;
        wk_session_state st = wk_session_get_state(s);
        if (!a->started_sent && st != WK_SESSION_STARTING && wk_session_pid(s) > 0) {
                _cleanup_json_ json_object *o =
                        pr_msg_encode(&pr_wk_start_event_schema, &(pr_wk_start_event){"start", wk_session_pid(s)});
                sp_rpc_call_send_json(a->call, o, NULL);
                a->started_sent = true;
        }
        static uint8_t buf[9 + ATTACH_CHUNK];
        while (a->offset < wk_session_output_end(s)) {
                uint8_t stream;
                size_t n;
                _cleanup_error_ sp_error *e = NULL;
                if (wk_session_read(s, a->offset, buf + 9, ATTACH_CHUNK, &stream, &n, &e) < 0) {
                        sp_rpc_call_fail(a->call, e);
                        a->ended = true;
                        return;
                }
                buf[0] = stream;
                for (int i = 0; i < 8; i++)
                        buf[1 + i] = (uint8_t)(a->offset >> (56 - 8 * i));
                int r = sp_rpc_call_send(a->call, SP_RPC_FRAME_DATA, buf, 9 + n, NULL);
                if (r < 0)
                        return; /* the call is over; on_close cleans up */
                a->offset += n;
                /* What is still in flight toward the client stays in the log: a client that reconnects
                 * resumes from its own offset, not ours. */
                wk_session_mark_sent(s, a->offset);
                if (r == 1) {
                        a->blocked = true;
                        return;
                }
        }
        if (wk_session_output_complete(s))
                exit_event(a);
}

static void attach_on_output(wk_session *s, void *ud)
{
        (void)s;
        attach_pump(ud);
}

static void attach_on_writable(sp_rpc_call *call, void *ud)
{
        (void)call;
        attach_state *a = ud;
        a->blocked = false;
        attach_pump(a);
}

static void attach_on_gone(wk_session *s, void *ud)
{
        (void)s;
        attach_state *a = ud;
        a->session = NULL;
        if (!a->ended) {
                a->ended = true;
                sp_rpc_call_failf(a->call, SP_E_NOT_FOUND, "the session was deleted");
        }
}

static void attach_on_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        attach_state *a = ud;
        if (a->session)
                wk_session_watch_remove(a->session, &a->watch);
        sp_rpc_call_unref(a->call);
        free(a);
}

void wk__h_attach(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_attach_session q = {0};
        wk_session *s = need_session(&pr_wk_attach_session_schema, req, &q, &q.session_id, &e);
        if (!s) {
                wk__fail(call, e);
                return;
        }
        int64_t offset = q.offset;
        if ((uint64_t)offset < wk_session_output_start(s) && wk_session_reclaimed(s)) {
                sp_rpc_call_failf(call, SP_E_NOT_FOUND, WK_SESSION_RECLAIMED_FMT, wk_session_id(s));
                return;
        }
        if ((uint64_t)offset < wk_session_output_start(s)) {
                sp_rpc_call_failf(call, SP_E_NOT_FOUND, "offset %lld is no longer retained (output starts at %llu)",
                                  (long long)offset, (unsigned long long)wk_session_output_start(s));
                return;
        }
        if ((uint64_t)offset > wk_session_output_end(s)) {
                sp_rpc_call_failf(call, SP_E_INVALID, "offset %lld is past the end of the output (%llu)",
                                  (long long)offset, (unsigned long long)wk_session_output_end(s));
                return;
        }
        attach_state *a = calloc(1, sizeof(*a));
        if (!a) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        a->call = sp_rpc_call_ref(call);
        a->session = s;
        a->offset = (uint64_t)offset;
        a->watch.on_output = attach_on_output;
        a->watch.on_state = attach_on_output;
        a->watch.on_gone = attach_on_gone;
        a->watch.userdata = a;
        static const sp_rpc_call_ops ops = {.on_writable = attach_on_writable, .on_close = attach_on_close};
        sp_rpc_call_set_ops(call, &ops, a);
        wk_session_watch_add(s, &a->watch);
        attach_pump(a);
}

/* --- WriteStdin --- */

typedef struct {
        sp_rpc_call *call;
        wk_session *session;
        wk_session_watch watch;
        sp_buf pending;
        uint64_t written;
        bool close_after, input_ended, paused, finished;
} stdin_state;

static void stdin_finish(stdin_state *st)
{
        if (st->finished)
                return;
        st->finished = true;
        if (st->close_after)
                wk_session_close_stdin(st->session, NULL);
        _cleanup_json_ json_object *o = pr_msg_encode(
                &pr_wk_written_trailer_schema, &(pr_wk_written_trailer){.ok = true, .written = (int64_t)st->written});
        sp_rpc_call_end(st->call, o, NULL);
}

static void stdin_flush(stdin_state *st)
{
        if (!st->session || st->finished)
                return;
        if (st->pending.len) {
                size_t n = wk_session_write_stdin(st->session, st->pending.data, st->pending.len);
                sp_buf_consume(&st->pending, n);
                st->written += n;
        }
        if (st->pending.len == 0) {
                if (st->paused) {
                        st->paused = false;
                        sp_rpc_call_resume(st->call);
                }
                if (st->input_ended)
                        stdin_finish(st);
        } else if (!st->paused) {
                st->paused = true;
                sp_rpc_call_pause(st->call);
        }
        wk_session_state s = wk_session_get_state(st->session);
        if (st->pending.len && (s == WK_SESSION_EXITED || s == WK_SESSION_FAILED) && !st->finished) {
                st->finished = true;
                sp_rpc_call_failf(st->call, SP_E_CONFLICT, "the session ended before its input was written");
        }
}

static void stdin_on_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)call;
        stdin_state *st = ud;
        if (type != SP_RPC_FRAME_DATA || st->finished)
                return;
        sp_buf_append(&st->pending, p, n, NULL);
        stdin_flush(st);
}

static void stdin_on_end(sp_rpc_call *call, void *ud)
{
        (void)call;
        stdin_state *st = ud;
        st->input_ended = true;
        stdin_flush(st);
}

static void stdin_on_credit(wk_session *s, void *ud)
{
        (void)s;
        stdin_flush(ud);
}

static void stdin_on_gone(wk_session *s, void *ud)
{
        (void)s;
        stdin_state *st = ud;
        st->session = NULL;
        if (!st->finished) {
                st->finished = true;
                sp_rpc_call_failf(st->call, SP_E_NOT_FOUND, "the session was deleted");
        }
}

static void stdin_on_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        stdin_state *st = ud;
        if (st->session)
                wk_session_watch_remove(st->session, &st->watch);
        sp_buf_free(&st->pending);
        sp_rpc_call_unref(st->call);
        free(st);
}

void wk__h_write_stdin(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_write_stdin q = {0};
        wk_session *s = need_session(&pr_wk_write_stdin_schema, req, &q, &q.session_id, &e);
        if (!s) {
                wk__fail(call, e);
                return;
        }
        stdin_state *st = calloc(1, sizeof(*st));
        if (!st) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        st->call = sp_rpc_call_ref(call);
        st->session = s;
        st->close_after = q.close;
        st->pending.limit = 8u << 20;
        st->watch.on_stdin_credit = stdin_on_credit;
        st->watch.on_state = stdin_on_credit;
        st->watch.on_gone = stdin_on_gone;
        st->watch.userdata = st;
        static const sp_rpc_call_ops ops = {
                .on_frame = stdin_on_frame, .on_input_end = stdin_on_end, .on_close = stdin_on_close};
        sp_rpc_call_set_ops(call, &ops, st);
        wk_session_watch_add(s, &st->watch);
}
