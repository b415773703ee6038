/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's process.Process service on command sessions.
 *
 * Start creates a session (argv, env, cwd, user, stdin, PTY; the
 * Connect-Timeout-Ms header becomes its timeout) and relays its data-plane
 * attach stream as ProcessEvents: start{pid} (from the stream's start event:
 * the API answers before the command has started), data{stdout|stderr|pty}
 * (the data plane's base64 passes through untouched), keepalive, end. A pid
 * names the session through the API: the sandbox's newest session with that
 * pid (unfinished ones first), a tag the newest running session with that
 * tag (the session's tag, kept by the public API). Connect relays only the
 * output produced after it. Nothing is kept here.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "attach.h"
#include "connect.h"
#include "request.h"
#include "space/cleanup.h"
#include "space/json.h"

#define SESSION_PAGES 20 /* pages of 1000 sessions searched for a pid */

static void target_for(sp_buf *b, const char *prefix, const char *id, const char *suffix)
{
        sp_buf_append_str(b, prefix, NULL);
        e2b_url_escape(b, id);
        sp_buf_append_str(b, suffix, NULL);
}

/* ---- relaying the attach stream ---- */

typedef struct relay {
        e2b_call *call;
        bool pty;
        bool ended;
        bool start_sent; /* envd's start{pid} went out */
        sp_error *stream_error;
} relay;

static int send_event(relay *r, json_object *ev)
{
        _cleanup_json_ json_object *msg = json_object_new_object();
        json_object_object_add(msg, "event", ev);
        return e2b_connect_stream_send(r->call, msg);
}

static int send_start(e2b_call *call, int64_t pid)
{
        relay r = {.call = call};
        json_object *ev = json_object_new_object(), *st = json_object_new_object();
        json_object_object_add(st, "pid", json_object_new_int64(pid));
        json_object_object_add(ev, "start", st);
        return send_event(&r, ev);
}

/* One server-sent event or comment: relayed as envd's ProcessEvent. */
static int on_event(const char *event, const char *data, size_t len, void *userdata)
{
        relay *r = userdata;
        json_object *ev = NULL;
        int64_t pid = 0;
        if (!r->start_sent && e2b_attach_start_pid(event, data, len, &pid)) {
                r->start_sent = true;
                return send_start(r->call, pid) < 0 ? -1 : 0;
        }
        /* envd's first event is start: the SDK (2.51) refuses a stream that begins with anything else,
         * and a command can take longer than the data plane's keep-alive interval to start (a VM just
         * woken from its memory under TCG, seen at 15 s) */
        if (!r->start_sent && !event)
                return 0;
        if (e2b_attach_event(event, data, len, r->pty, &ev, &r->ended, &r->stream_error) < 0) {
                /* A session that failed before its start event never ran (a program,
                 * cwd or user the sandbox lacks): envd refuses such a start as an
                 * invalid argument, not as a sandbox gone. */
                if (!r->start_sent && r->stream_error && e2b_attach_session_failed(event, data, len))
                        r->stream_error->code = SP_E_INVALID;
                return -1;
        }
        if (ev && send_event(r, ev) < 0)
                return -1;
        return r->ended;
}

/* Attaches to the session and relays until its end, the client's
 * departure or a broken stream (start_sent: envd's start event went out
 * already). Then ends the Connect stream. */
static void relay_session(e2b_call *call, const e2b_ctx *ctx, const char *url, const char *token, bool pty,
                          bool start_sent)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_http_client *c = NULL;
        const char *h[] = {"Accept: text/event-stream", NULL};
        int status = e2b_dp_send(ctx, url, "GET", token, h, NULL, 0, NULL, NULL, &c, &e);
        if (status >= 0 && status != 200)
                e2b_dp_error(c, status, &e);
        if (status != 200) {
                sp_http_client_free(c);
                e2b_connect_stream_end(call, e);
                return;
        }
        relay r = {.call = call, .pty = pty, .start_sent = start_sent};
        e2b_attach sse = E2B_ATTACH_INIT;
        char buf[16384];
        int rc = 0;
        while (rc == 0) {
                ssize_t n = sp_http_client_read(c, buf, sizeof(buf), -1, &e);
                if (n <= 0) {
                        if (n == 0)
                                sp_error_set(&e, SP_E_UNAVAILABLE, "the output stream ended early");
                        break;
                }
                rc = e2b_attach_feed(&sse, buf, (size_t)n, on_event, &r, &e);
        }
        sp_http_client_free(c);
        e2b_attach_free(&sse);
        if (r.ended && !r.stream_error)
                e2b_connect_stream_end(call, NULL);
        else
                e2b_connect_stream_end(call, r.stream_error ? r.stream_error : e);
        sp_error_free(r.stream_error);
}

/* ---- finding a session by pid or tag ---- */

/* The sandbox's session for a selector (pid > 0, or tag): for a pid the
 * newest unfinished session with it, else (when unfinished_only is false)
 * the newest; for a tag the newest unfinished session with that tag that
 * has a pid (envd keeps a process by its tag from its start to its end).
 * *ret is the Session object. */
static int find_session(e2b_envd *ev, int64_t pid, const char *tag, bool unfinished_only, json_object **ret,
                        sp_error **err)
{
        *ret = NULL;
        _cleanup_json_ json_object *best = NULL;
        bool best_live = false;
        _cleanup_free_ char *cursor = NULL;
        for (int page = 0; page < SESSION_PAGES; page++) {
                _cleanup_buf_ sp_buf t = SP_BUF_INIT;
                target_for(&t, "/v1/sandboxes/", ev->sandbox_id, "/sessions?limit=1000");
                if (tag) {
                        sp_buf_append_str(&t, "&tag=", NULL);
                        e2b_url_escape(&t, tag);
                }
                if (cursor) {
                        sp_buf_append_str(&t, "&cursor=", NULL);
                        e2b_url_escape(&t, cursor);
                }
                _cleanup_json_ json_object *list = NULL;
                json_object *items = NULL, *next = NULL;
                if (e2b_api_json(&ev->api, "GET", t.data, NULL, &list, err) < 0)
                        return -1;
                if (!json_object_object_get_ex(list, "sessions", &items))
                        return sp_error_set(err, SP_E_INTERNAL, "the public API answered no session list");
                for (size_t i = 0; i < json_object_array_length(items); i++) {
                        json_object *s = json_object_array_get_idx(items, i), *p = NULL;
                        if (!json_object_object_get_ex(s, "pid", &p) || !json_object_is_type(p, json_type_int) ||
                            (tag ? json_object_get_int64(p) <= 0 : json_object_get_int64(p) != pid))
                                continue;
                        const char *st = sp_json_member_str(s, "state");
                        bool live = st && (strcmp(st, "running") == 0 || strcmp(st, "starting") == 0);
                        if (tag && !live)
                                continue;
                        if (live || !best_live) { /* later entries are newer */
                                json_object_put(best);
                                best = json_object_get(s);
                                best_live = live;
                        }
                }
                free(cursor);
                cursor = NULL;
                if (!json_object_object_get_ex(list, "next_cursor", &next) ||
                    !json_object_is_type(next, json_type_string))
                        break;
                if (!(cursor = strdup(json_object_get_string(next))))
                        abort();
        }
        if (!best || (unfinished_only && !best_live)) {
                if (tag)
                        return sp_error_set(err, SP_E_NOT_FOUND, "process with tag %s not found", tag);
                return sp_error_set(err, SP_E_NOT_FOUND, "process with pid %lld not found", (long long)pid);
        }
        *ret = TAKE_PTR(best);
        return 0;
}

/* The session a selector names (unfinished only), as find_session(). */
static int select_session(e2b_envd *ev, json_object *req, json_object **ret, sp_error **err)
{
        int64_t pid = 0;
        const char *tag = NULL;
        *ret = NULL;
        if (e2b_request_selector(req, &pid, &tag, err) < 0)
                return -1;
        return find_session(ev, pid, tag, true, ret, err);
}

/* Mints a write token for session id; *ret_base is its data-plane URL
 * without the trailing "/attach". */
static int write_token(e2b_envd *ev, const char *id, char **ret_base, char **ret_token, sp_error **err)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, "/v1/sessions/", id, "/token");
        _cleanup_json_ json_object *body = json_object_new_object(), *out = NULL;
        json_object_object_add(body, "scope", json_object_new_string("write"));
        json_object_object_add(body, "ttl_s", json_object_new_int(60));
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, err) < 0)
                return -1;
        const char *url = sp_json_member_str(out, "attach_url"), *tok = sp_json_member_str(out, "attach_token");
        size_t ul = url ? strlen(url) : 0;
        if (!tok || ul < 7 || strcmp(url + ul - 7, "/attach") != 0)
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered a malformed token");
        if (!(*ret_base = strndup(url, ul - 7)) || !(*ret_token = strdup(tok)))
                abort();
        return 0;
}

/* POSTs body to the session's data-plane route (stdin, close-stdin, resize). */
static int dp_post(e2b_envd *ev, const char *session, const char *route, const char *content_type, const void *body,
                   size_t len, sp_error **err)
{
        _cleanup_free_ char *base = NULL, *token = NULL, *url = NULL;
        if (write_token(ev, session, &base, &token, err) < 0)
                return -1;
        if (asprintf(&url, "%s/%s", base, route) < 0)
                abort();
        char ct[128];
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        const char *h[] = {ct, NULL};
        sp_http_client *c = NULL;
        int status = e2b_dp_send(ev->api.ctx, url, "POST", token, h, body, len, NULL, NULL, &c, err);
        if (status >= 0 && (status < 200 || status > 299))
                status = e2b_dp_error(c, status, err);
        sp_http_client_free(c);
        return status < 0 ? -1 : 0;
}

/* ---- the methods ---- */

typedef void (*envd_method)(e2b_call *call, e2b_envd *ev, json_object *req);

/* Authenticates and parses, then runs a unary method (stream false) or a
 * server stream (stream true: errors before the method go in the stream's
 * end). */
static void run(e2b_call *call, const e2b_ctx *ctx, bool stream, envd_method m)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *req = NULL;
        e2b_envd ev;
        if (e2b_envd_open(call, ctx, &ev, &e) < 0 || e2b_connect_request(call, stream, &req, &e) < 0) {
                if (stream && e2b_connect_stream_begin(call) == 0)
                        e2b_connect_stream_end(call, e);
                else if (!stream)
                        e2b_connect_error(call, e);
                e2b_envd_close(&ev); /* harmless after a failed open */
                return;
        }
        m(call, &ev, req);
        e2b_envd_close(&ev);
}

static void start(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        if (e2b_connect_stream_begin(call) < 0)
                return;
        _cleanup_json_ json_object *body = NULL;
        bool is_pty = false;
        if (e2b_request_start(req, ev->user, e2b_call_req(call)->connect_timeout_ms, &body, &is_pty, &e) < 0) {
                e2b_connect_stream_end(call, e);
                return;
        }
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, "/v1/sandboxes/", ev->sandbox_id, "/sessions");
        _cleanup_json_ json_object *out = NULL;
        json_object *session = NULL, *pid = NULL;
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0 ||
            !json_object_object_get_ex(out, "session", &session) || !sp_json_member_str(out, "attach_url") ||
            !sp_json_member_str(out, "attach_token")) {
                if (!e)
                        sp_error_set(&e, SP_E_INTERNAL, "the public API answered no session");
                e2b_connect_stream_end(call, e);
                return;
        }
        /* The answer has the pid only when the session had started (a retry's): else it comes with the stream. */
        bool started = json_object_object_get_ex(session, "pid", &pid) && json_object_is_type(pid, json_type_int) &&
                       json_object_get_int64(pid) > 0;
        if (started && send_start(call, json_object_get_int64(pid)) < 0)
                return;
        relay_session(call, ev->api.ctx, sp_json_member_str(out, "attach_url"), sp_json_member_str(out, "attach_token"),
                      is_pty, started);
}

/* Connect: envd's start{pid}, then only the output produced after it —
 * the attach starts at the session's output end as its worker reports it
 * (GET /v1/sessions/{id}, asked before the start event goes out). */
static void connect_process(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        if (e2b_connect_stream_begin(call) < 0)
                return;
        _cleanup_json_ json_object *found = NULL, *s = NULL, *out = NULL;
        _cleanup_buf_ sp_buf t = SP_BUF_INIT, g = SP_BUF_INIT;
        if (select_session(ev, req, &found, &e) < 0) {
                e2b_connect_stream_end(call, e);
                return;
        }
        /* Where the output is now: a session that has ended meanwhile is gone, as envd's. */
        const char *id = sp_json_member_str(found, "id");
        target_for(&g, "/v1/sessions/", id, "");
        json_object *end = NULL, *pid = NULL, *found_pid = NULL;
        const char *st = NULL;
        if (e2b_api_json(&ev->api, "GET", g.data, NULL, &s, &e) < 0) {
                e2b_connect_stream_end(call, e);
                return;
        }
        st = sp_json_member_str(s, "state");
        if (!st || (strcmp(st, "running") != 0 && strcmp(st, "starting") != 0) ||
            !json_object_object_get_ex(s, "pid", &pid) || !json_object_is_type(pid, json_type_int)) {
                json_object_object_get_ex(found, "pid", &found_pid);
                sp_error_set(&e, SP_E_NOT_FOUND, "process with pid %lld not found",
                             (long long)json_object_get_int64(found_pid));
                e2b_connect_stream_end(call, e);
                return;
        }
        if (!json_object_object_get_ex(s, "output_end", &end) || !json_object_is_type(end, json_type_int) ||
            json_object_get_int64(end) < 0) {
                sp_error_set(&e, SP_E_UNAVAILABLE, "the session's worker did not say where its output ends");
                e2b_connect_stream_end(call, e);
                return;
        }
        target_for(&t, "/v1/sessions/", id, "/token");
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "scope", json_object_new_string("read"));
        json_object *pty = NULL;
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0 || !sp_json_member_str(out, "attach_url") ||
            !sp_json_member_str(out, "attach_token")) {
                if (!e)
                        sp_error_set(&e, SP_E_INTERNAL, "the public API answered no token");
                e2b_connect_stream_end(call, e);
                return;
        }
        _cleanup_free_ char *url = NULL;
        if (asprintf(&url, "%s?offset=%lld", sp_json_member_str(out, "attach_url"),
                     (long long)json_object_get_int64(end)) < 0)
                abort();
        if (send_start(call, json_object_get_int64(pid)) < 0)
                return;
        bool is_pty = json_object_object_get_ex(s, "pty", &pty) && pty && json_object_is_type(pty, json_type_object);
        relay_session(call, ev->api.ctx, url, sp_json_member_str(out, "attach_token"), is_pty, true);
}

static void list(e2b_call *call, e2b_envd *ev, json_object *req)
{
        (void)req;
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object *procs = json_object_new_array();
        json_object_object_add(out, "processes", procs);
        _cleanup_free_ char *cursor = NULL;
        for (int page = 0; page < SESSION_PAGES; page++) {
                _cleanup_buf_ sp_buf t = SP_BUF_INIT;
                target_for(&t, "/v1/sandboxes/", ev->sandbox_id, "/sessions?limit=1000");
                if (cursor) {
                        sp_buf_append_str(&t, "&cursor=", NULL);
                        e2b_url_escape(&t, cursor);
                }
                _cleanup_json_ json_object *l = NULL;
                json_object *items = NULL, *next = NULL;
                if (e2b_api_json(&ev->api, "GET", t.data, NULL, &l, &e) < 0) {
                        e2b_connect_error(call, e);
                        return;
                }
                json_object_object_get_ex(l, "sessions", &items);
                for (size_t i = 0; items && i < json_object_array_length(items); i++) {
                        json_object *s = json_object_array_get_idx(items, i), *argv = NULL, *pid = NULL;
                        const char *st = sp_json_member_str(s, "state");
                        if (!st || (strcmp(st, "running") != 0 && strcmp(st, "starting") != 0) ||
                            !json_object_object_get_ex(s, "pid", &pid) || !json_object_is_type(pid, json_type_int) ||
                            !json_object_object_get_ex(s, "argv", &argv) || json_object_array_length(argv) == 0)
                                continue;
                        json_object *p = json_object_new_object(), *cfg = json_object_new_object(),
                                    *args = json_object_new_array();
                        json_object_object_add(cfg, "cmd", json_object_get(json_object_array_get_idx(argv, 0)));
                        for (size_t k = 1; k < json_object_array_length(argv); k++)
                                json_object_array_add(args, json_object_get(json_object_array_get_idx(argv, k)));
                        json_object_object_add(cfg, "args", args);
                        json_object_object_add(cfg, "envs", json_object_new_object());
                        /* The home Start put in for a Start without cwd is no cwd of the caller's. */
                        const char *cwd = sp_json_member_str(s, "cwd");
                        if (cwd && strcmp(cwd, E2B_REQUEST_DEFAULT_CWD) != 0)
                                json_object_object_add(cfg, "cwd", json_object_new_string(cwd));
                        json_object_object_add(p, "config", cfg);
                        json_object_object_add(p, "pid", json_object_get(pid));
                        const char *tag = sp_json_member_str(s, "tag");
                        if (tag)
                                json_object_object_add(p, "tag", json_object_new_string(tag));
                        json_object_array_add(procs, p);
                }
                free(cursor);
                cursor = NULL;
                if (!json_object_object_get_ex(l, "next_cursor", &next) || !json_object_is_type(next, json_type_string))
                        break;
                if (!(cursor = strdup(json_object_get_string(next))))
                        abort();
        }
        e2b_connect_reply(call, out);
}

/* Finds the unfinished session a unary method acts on, or answers. */
static json_object *target_session(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        json_object *s = NULL;
        if (select_session(ev, req, &s, &e) < 0) {
                e2b_connect_error(call, e);
                return NULL;
        }
        return s;
}

/* A session that ended between the lookup and the action is not found. */
static void action_error(e2b_call *call, sp_error *e)
{
        if (e->code == SP_E_CONFLICT)
                e->code = SP_E_NOT_FOUND;
        e2b_connect_error(call, e);
}

static void send_input(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_buf_ sp_buf bytes = SP_BUF_INIT;
        if (e2b_request_input(req, &bytes, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        _cleanup_json_ json_object *s = target_session(call, ev, req);
        if (!s)
                return;
        if (dp_post(ev, sp_json_member_str(s, "id"), "stdin", "application/octet-stream", bytes.data ? bytes.data : "",
                    bytes.len, &e) < 0) {
                action_error(call, e);
                return;
        }
        e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
}

static void close_stdin(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *s = target_session(call, ev, req);
        if (!s)
                return;
        if (dp_post(ev, sp_json_member_str(s, "id"), "close-stdin", "application/json", "", 0, &e) < 0) {
                action_error(call, e);
                return;
        }
        e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
}

static void update(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        int64_t rows = 0, cols = 0;
        if (!e2b_request_resize(req, &rows, &cols)) {
                e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
                return;
        }
        _cleanup_json_ json_object *s = target_session(call, ev, req);
        if (!s)
                return;
        char body[96];
        int n = snprintf(body, sizeof(body), "{\"rows\":%lld,\"cols\":%lld}", (long long)rows, (long long)cols);
        if (dp_post(ev, sp_json_member_str(s, "id"), "resize", "application/json", body, (size_t)n, &e) < 0) {
                action_error(call, e);
                return;
        }
        e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
}

static void send_signal(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *sig = NULL;
        if (e2b_request_signal(req, &sig, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        _cleanup_json_ json_object *s = target_session(call, ev, req);
        if (!s)
                return;
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        _cleanup_json_ json_object *body = NULL, *out = NULL;
        if (strcmp(sig, "KILL") == 0) {
                target_for(&t, "/v1/sessions/", sp_json_member_str(s, "id"), "/kill");
        } else {
                target_for(&t, "/v1/sessions/", sp_json_member_str(s, "id"), "/signal");
                body = json_object_new_object();
                json_object_object_add(body, "signal", json_object_new_string(sig));
        }
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0) {
                action_error(call, e);
                return;
        }
        e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
}

#define METHOD(name, stream, fn) \
        static void name(e2b_call *call, void *userdata) \
        { \
                run(call, userdata, stream, fn); \
        }
METHOD(rpc_start, true, start)
METHOD(rpc_connect, true, connect_process)
METHOD(rpc_list, false, list)
METHOD(rpc_send_input, false, send_input)
METHOD(rpc_close_stdin, false, close_stdin)
METHOD(rpc_update, false, update)
METHOD(rpc_send_signal, false, send_signal)

static const e2b_route routes[] = {
        {"POST", "/process.Process/Start", rpc_start, false, E2B_REQUEST_MAX_START},
        {"POST", "/process.Process/Connect", rpc_connect, false, 0},
        {"POST", "/process.Process/List", rpc_list, false, 0},
        {"POST", "/process.Process/SendInput", rpc_send_input, false, 24 * 1024 * 1024},
        {"POST", "/process.Process/CloseStdin", rpc_close_stdin, false, 0},
        {"POST", "/process.Process/Update", rpc_update, false, 0},
        {"POST", "/process.Process/SendSignal", rpc_send_signal, false, 0},
};

int e2b_process_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err)
{
        return e2b_routes_add(ctx, srv, routes, SP_ARRAY_SIZE(routes), false, err);
}
