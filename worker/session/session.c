/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "session/log.h"
#include "session/session.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/agent_proto.h"
#include "space/json.h"
#include "space/time.h"
#include "space/worker_rpc.h"

/* Credit granted to the agent per stream: at most this much unstored output in flight. */
#define SESSION_WINDOW (256u << 10)

struct wk_session {
        char *dir;
        char id[65];
        char sandbox[65];
        json_object *request; /* the exec request, persisted */
        wk_session_state state;
        int pid;
        wk_session_exit exit;
        char *failure;
        int64_t created_us, started_us, ended_us;
        wk_log *log;
        wk_agent_link *link;
        uint32_t channel;
        uint32_t pending_ack[3]; /* stored but not yet acknowledged, per stream (log was full) */
        bool eof[3];
        uint64_t stdin_credit;
        char kill_reason[16];
        /* Exited (the agent said how) while output it holds is not stored yet:
         * the channel stays open until the agent's EXIT. */
        bool draining;
        bool reclaimed; /* its log was discarded for the sandbox's budget */
        bool recorded; /* session.json holds its first record: later ones are appended */
        uint64_t journal_bytes; /* session.json's size, as written or read */
        wk_session_budget *budget;
        uint64_t charged; /* what this session counts in budget->used */
        wk_session_watch *watches;
};

static const wk_agent_channel_ops channel_ops;

const char *wk_session_state_name(wk_session_state st)
{
        static const char *const names[] = {"starting", "running", "exited", "failed"};
        return st <= WK_SESSION_FAILED ? names[st] : "unknown";
}

const char *wk_session_id(const wk_session *s)
{
        return s->id;
}
const char *wk_session_sandbox(const wk_session *s)
{
        return s->sandbox;
}
wk_session_state wk_session_get_state(const wk_session *s)
{
        return s->state;
}
const wk_session_exit *wk_session_get_exit(const wk_session *s)
{
        return s->state == WK_SESSION_EXITED ? &s->exit : NULL;
}
const char *wk_session_failure(const wk_session *s)
{
        return s->failure;
}
int wk_session_pid(const wk_session *s)
{
        return s->pid;
}
uint64_t wk_session_output_start(const wk_session *s)
{
        return wk_log_start(s->log);
}
uint64_t wk_session_output_end(const wk_session *s)
{
        return wk_log_end(s->log);
}

/* The Session answer (worker-rpc.md); persist() keeps it in session.json
 * with the fields a restart needs and without the log's offsets. */
json_object *wk_session_to_json(const wk_session *s)
{
        char created[32], started[32], ended[32];
        sp_time_format_rfc3339(s->created_us, created);
        if (s->started_us)
                sp_time_format_rfc3339(s->started_us, started);
        if (s->ended_us)
                sp_time_format_rfc3339(s->ended_us, ended);
        pr_wk_session a = {
                .id = s->id,
                .sandbox_id = s->sandbox,
                .state = wk_session_state_name(s->state),
                .pid = s->pid,
                .created_at = created,
                .started_at = s->started_us ? started : NULL,
                .ended_at = s->ended_us ? ended : NULL,
                .has_exit = s->state == WK_SESSION_EXITED,
                .exit = {.code = s->exit.code,
                         .signal = s->exit.signal,
                         .oom = s->exit.oom,
                         .killed = s->exit.killed,
                         .reason = s->exit.reason[0] ? s->exit.reason : NULL},
                .error = s->failure,
                .output_reclaimed = s->reclaimed,
                .output_start = s->log ? (int64_t)wk_log_start(s->log) : -1,
                .output_end = s->log ? (int64_t)wk_log_end(s->log) : -1,
        };
        return pr_msg_encode(&pr_wk_session_schema, &a);
}

uint64_t wk_session_charge(const wk_session *s)
{
        uint64_t c = s->log ? wk_log_disk_bytes(s->log) : 0;
        /* Credit the agent holds may still arrive and be stored. */
        if (s->channel)
                for (int st = 1; st <= 2; st++)
                        c += s->pending_ack[st] < SESSION_WINDOW ? SESSION_WINDOW - s->pending_ack[st] : 0;
        return c;
}

/* Brings the budget up to date with what the session charges now. */
static void recharge(wk_session *s)
{
        wk_session_budget *b = s->budget;
        if (!b)
                return;
        uint64_t now = wk_session_charge(s), before = s->charged;
        b->used = b->used - before + now;
        s->charged = now;
        if (now < before && b->freed)
                b->freed(b, b->userdata);
}

/* Whether the budget can take more bytes, after trimming what readers passed
 * in this log and asking the owner to reclaim ended sessions' logs. */
static bool budget_allows(wk_session *s, uint64_t more)
{
        wk_session_budget *b = s->budget;
        if (!b || !b->limit || b->used + more <= b->limit)
                return true;
        if (s->log) {
                wk_log_trim(s->log);
                recharge(s);
        }
        if (b->used + more > b->limit && b->reclaim)
                b->reclaim(b, b->used + more - b->limit, s, b->userdata);
        return b->used + more <= b->limit;
}

/* session.json is a journal: the first line is the whole record with the
 * exec request, each later line the record again without it (a state
 * change), and the last line that parses is the state. Appending costs no
 * new file: a replace (write a temporary, rename it over) made two inodes per
 * change, and on ext4 the allocator's search past recently deleted inodes
 * was most of the worker's CPU on an exec (docs/performance.md). Not
 * synced, like the output log: the record must outlive the worker's crash,
 * which the page cache does; a host's crash ends the session's process
 * anyway (it is then lost, and said so). A line torn by a full disk is
 * skipped when the journal is read; past JOURNAL_COMPACT bytes it is
 * rewritten as one line. */
#define JOURNAL_COMPACT (64 * 1024)

static int persist(wk_session *s, sp_error **err)
{
        _cleanup_json_ json_object *o = wk_session_to_json(s);
        json_object_object_del(o, "output_start");
        json_object_object_del(o, "output_reclaimed");
        if (s->reclaimed)
                json_object_object_add(o, "reclaimed", json_object_new_boolean(true));
        json_object_object_add(o, "created_us", json_object_new_int64(s->created_us));
        json_object_object_add(o, "started_us", json_object_new_int64(s->started_us));
        json_object_object_add(o, "ended_us", json_object_new_int64(s->ended_us));
        if (s->draining)
                json_object_object_add(o, "draining", json_object_new_boolean(true));
        json_object_object_del(o, "output_end");
        char path[4096];
        snprintf(path, sizeof(path), "%s/session.json", s->dir);
        bool first = !s->recorded || s->journal_bytes > JOURNAL_COMPACT;
        if (first)
                json_object_object_add(o, "request", json_object_get(s->request));
        _cleanup_buf_ sp_buf line = SP_BUF_INIT;
        if (sp_buf_appendf(&line, err, "%s\n", sp_json_str(o)) < 0)
                return -SP_E_LIMIT;
        if (first && s->recorded) {
                /* Compacted: the whole record, as one line, replacing the journal. */
                if (sp_file_replace(path, line.data, line.len, 0600, err) < 0)
                        return -SP_E_IO;
                s->journal_bytes = line.len;
                return 0;
        }
        /* A new session's record is written where it stays: until its first
         * line is whole nothing has reached the agent, and a record that does
         * not parse is not loaded. */
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (first ? O_TRUNC : 0), 0600);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open %s", path);
        for (size_t off = 0; off < line.len;) {
                ssize_t n = write(fd, line.data + off, line.len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return sp_error_set_errno(err, sp_errc_from_errno(errno ? errno : EIO), errno ? errno : EIO,
                                                  "write %s", path);
                off += (size_t)n;
        }
        s->journal_bytes = (first ? 0 : s->journal_bytes) + line.len;
        s->recorded = true;
        return 0;
}

static void notify(wk_session *s, int what)
{
        /* A watcher may remove itself (or others) from its callback: walk a snapshot. */
        wk_session_watch *snapshot[64];
        size_t n = 0;
        for (wk_session_watch *w = s->watches; w && n < SP_ARRAY_SIZE(snapshot); w = w->next)
                snapshot[n++] = w;
        for (size_t i = 0; i < n; i++) {
                bool still = false;
                for (wk_session_watch *w = s->watches; w; w = w->next)
                        if (w == snapshot[i])
                                still = true;
                if (!still)
                        continue;
                wk_session_watch *w = snapshot[i];
                if (what == 0 && w->on_output)
                        w->on_output(s, w->userdata);
                else if (what == 1 && w->on_state)
                        w->on_state(s, w->userdata);
                else if (what == 2 && w->on_stdin_credit)
                        w->on_stdin_credit(s, w->userdata);
        }
        /* No more output: the log's in-memory copies of its newest records go. */
        if (what == 1 && s->log && wk_session_output_complete(s))
                wk_log_release_tail(s->log);
}

void wk_session_watch_add(wk_session *s, wk_session_watch *w)
{
        /* Appended: the session's owner, which watches first, hears first. */
        w->next = NULL;
        wk_session_watch **p = &s->watches;
        while (*p)
                p = &(*p)->next;
        *p = w;
}

int wk_session_set_exit_reason(wk_session *s, const char *reason, bool oom, sp_error **err)
{
        if (s->state != WK_SESSION_EXITED)
                return sp_error_set(err, SP_E_CONFLICT, "session %s has not exited", s->id);
        snprintf(s->exit.reason, sizeof(s->exit.reason), "%s", reason ? reason : "");
        s->exit.oom = s->exit.oom || oom;
        return persist(s, err);
}

size_t wk_session_watch_count(const wk_session *s)
{
        size_t n = 0;
        for (const wk_session_watch *w = s->watches; w; w = w->next)
                n++;
        return n;
}

void wk_session_watch_remove(wk_session *s, wk_session_watch *w)
{
        for (wk_session_watch **p = &s->watches; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        return;
                }
}

static void set_failed(wk_session *s, const char *message)
{
        free(s->failure);
        s->failure = strdup(message ? message : "failed");
        s->state = WK_SESSION_FAILED;
        s->ended_us = sp_now_real_us();
        (void)persist(s, NULL);
        notify(s, 1);
}

/* Acknowledges stored output while the log has room for another window. */
static void release_acks(wk_session *s)
{
        if (!s->link || !s->channel)
                return;
        for (uint8_t st = 1; st <= 2; st++) {
                uint32_t n = s->pending_ack[st];
                if (!n || wk_log_room(s->log) < (uint64_t)SESSION_WINDOW * 2 || !budget_allows(s, n))
                        continue;
                if (wk_agent_ack(s->link, s->channel, st, n, NULL) == 0) {
                        s->pending_ack[st] = 0;
                        recharge(s);
                }
        }
}

/* Takes how the command ended from an agent's exit status (not persisted yet). */
static void take_exit(wk_session *s, json_object *result)
{
        json_object *v;
        if (json_object_object_get_ex(result, "code", &v))
                s->exit.code = json_object_get_int(v);
        if (json_object_object_get_ex(result, "signal", &v))
                s->exit.signal = json_object_get_int(v);
        if (json_object_object_get_ex(result, "oom", &v))
                s->exit.oom = json_object_get_boolean(v);
        if (json_object_object_get_ex(result, "killed", &v))
                s->exit.killed = json_object_get_boolean(v);
        if (s->kill_reason[0])
                snprintf(s->exit.reason, sizeof(s->exit.reason), "%s", s->kill_reason);
        else if (s->exit.oom)
                snprintf(s->exit.reason, sizeof(s->exit.reason), "memory");
        s->state = WK_SESSION_EXITED;
        s->ended_us = sp_now_real_us();
}

static void on_reply(json_object *reply, void *ud)
{
        wk_session *s = ud;
        json_object *pid, *ended;
        if (json_object_object_get_ex(reply, "pid", &pid))
                s->pid = json_object_get_int(pid);
        if (s->state == WK_SESSION_STARTING) {
                s->state = WK_SESSION_RUNNING;
                s->started_us = sp_now_real_us();
                (void)persist(s, NULL);
                notify(s, 1);
        }
        /* The process ended while the agent still holds output we have no room
         * for: the session has ended (the API must know without a reader); the
         * rest of its output follows as readers make room, then EXIT. */
        if (json_object_object_get_ex(reply, "ended", &ended) && json_object_is_type(ended, json_type_object) &&
            s->state == WK_SESSION_RUNNING) {
                s->draining = true;
                take_exit(s, ended);
                (void)persist(s, NULL);
                notify(s, 1);
        }
}

static void on_data(uint8_t stream, const void *p, size_t n, void *ud)
{
        wk_session *s = ud;
        if (stream != 1 && stream != 2)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (wk_log_append(s->log, stream, p, n, &e) < 0) {
                /* Only a full disk gets here (the agent sends within its credit, which
                 * the log has room for): the command cannot be served any more. */
                wk_session_kill(s, "disk", NULL);
                return;
        }
        s->pending_ack[stream] += (uint32_t)n;
        recharge(s);
        release_acks(s);
        notify(s, 0);
}

static void on_eof(uint8_t stream, void *ud)
{
        wk_session *s = ud;
        if (stream <= 2)
                s->eof[stream] = true;
}

static void on_window(uint8_t stream, uint32_t credit, void *ud)
{
        wk_session *s = ud;
        if (stream == 0) {
                s->stdin_credit += credit;
                notify(s, 2);
        }
}

static void on_exit_(json_object *result, void *ud)
{
        wk_session *s = ud;
        s->channel = 0;
        recharge(s);
        json_object *err;
        if (json_object_object_get_ex(result, "error", &err)) {
                json_object *msg;
                set_failed(s, json_object_object_get_ex(err, "message", &msg) ? json_object_get_string(msg)
                                                                              : "the command could not start");
                return;
        }
        /* Already ended (REPLY "ended"): this only says the output is complete. */
        if (!s->draining || s->state != WK_SESSION_EXITED)
                take_exit(s, result);
        s->draining = false;
        (void)persist(s, NULL);
        /* The exit is stored: the agent may forget the session. */
        if (s->link) {
                _cleanup_json_ json_object *rel = json_object_new_object();
                json_object_object_add(rel, "op", json_object_new_string("release"));
                json_object_object_add(rel, "session", json_object_new_string(s->id));
                static const wk_agent_channel_ops none = {0};
                wk_agent_open(s->link, rel, &none, NULL, NULL);
        }
        notify(s, 1);
}

static void on_lost(const sp_error *e, void *ud)
{
        wk_session *s = ud;
        (void)e;
        /* The command keeps running in the sandbox; wait for a new connection. */
        s->channel = 0;
        s->link = NULL;
        s->stdin_credit = 0;
        recharge(s);
}

static const wk_agent_channel_ops channel_ops = {
        .on_reply = on_reply,
        .on_data = on_data,
        .on_eof = on_eof,
        .on_window = on_window,
        .on_exit = on_exit_,
        .on_lost = on_lost,
};

static wk_session *session_new(const char *dir, sp_error **err)
{
        wk_session *s = calloc(1, sizeof(*s));
        if (!s || !(s->dir = strdup(dir))) {
                free(s);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        return s;
}

static int open_channel(wk_session *s, json_object *req, sp_error **err)
{
        uint32_t ch = wk_agent_open(s->link, req, &channel_ops, s, err);
        if (!ch)
                return -SP_E_UNAVAILABLE;
        s->channel = ch;
        recharge(s);
        return 0;
}

int wk_session_start(wk_agent_link *link, const char *dir, const char *id, const char *sandbox_id,
                     json_object *exec_request, uint64_t log_capacity, wk_session_budget *budget, wk_session **ret,
                     sp_error **err)
{
        if (strlen(id) > 64 || strlen(sandbox_id) > 64)
                return sp_error_set(err, SP_E_INVALID, "session or sandbox id too long");
        /* The agent may send a window per stream before we store anything. */
        uint64_t need = 2 * (uint64_t)SESSION_WINDOW;
        if (budget && budget->limit && budget->used + need > budget->limit && budget->reclaim)
                budget->reclaim(budget, budget->used + need - budget->limit, NULL, budget->userdata);
        if (budget && budget->limit && budget->used + need > budget->limit)
                return sp_error_set(err, SP_E_LIMIT,
                                    "the output logs of sandbox %s's sessions fill its budget (%llu of %llu bytes, "
                                    "--session-log-budget) and no ended session's log is left to reclaim: read or "
                                    "end a running session first",
                                    sandbox_id, (unsigned long long)budget->used, (unsigned long long)budget->limit);
        wk_session *s = session_new(dir, err);
        if (!s)
                return -SP_E_LIMIT;
        s->budget = budget;
        snprintf(s->id, sizeof(s->id), "%s", id);
        snprintf(s->sandbox, sizeof(s->sandbox), "%s", sandbox_id);
        s->request = json_object_get(exec_request);
        json_object_object_add(s->request, "op", json_object_new_string("exec"));
        json_object_object_add(s->request, "session", json_object_new_string(id));
        json_object_object_add(s->request, "window", json_object_new_int64(SESSION_WINDOW));
        s->created_us = sp_now_real_us();
        /* The output log's segments sit beside session.json (sessions from
         * before kept them in log/, which a load still reads): one directory
         * fewer to make per command. */
        if (sp_mkdir_p(dir, 0700, err) < 0 || wk_log_open(dir, log_capacity, true, &s->log, err) < 0 ||
            persist(s, err) < 0)
                goto fail;
        s->link = link;
        if (open_channel(s, s->request, err) < 0)
                goto fail;
        *ret = s;
        return 0;
fail:
        wk_session_remove(s, NULL);
        return -SP_E_IO;
}

/* The record a journal (persist()) holds: its last line that parses, with
 * the first line's request. A record from before the journal is one line. */
static int journal_read(const char *text, size_t len, json_object **ret, sp_error **err)
{
        const char *nl = memchr(text, '\n', len);
        size_t first_len = nl ? (size_t)(nl - text) : len;
        _cleanup_json_ json_object *first = NULL;
        if (sp_json_parse(text, first_len, &first, err) < 0)
                return -SP_E_INVALID;
        json_object *req = NULL;
        if (!json_object_object_get_ex(first, "request", &req))
                return sp_error_set(err, SP_E_INVALID, "the session's first record has no request");
        json_object *last = NULL;
        for (const char *p = nl ? nl + 1 : text + len; p < text + len;) {
                const char *e = memchr(p, '\n', (size_t)(text + len - p));
                if (!e) /* torn: its write did not end */
                        break;
                json_object *o = NULL;
                if ((size_t)(e - p) > 0 && sp_json_parse(p, (size_t)(e - p), &o, NULL) == 0) {
                        sp_json_putp(&last);
                        last = o;
                }
                p = e + 1;
        }
        if (last) {
                json_object_object_add(last, "request", json_object_get(req));
                *ret = last;
        } else {
                *ret = json_object_get(first);
        }
        return 0;
}

int wk_session_load(const char *dir, uint64_t log_capacity, wk_session_budget *budget, wk_session **ret, sp_error **err)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/session.json", dir);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        _cleanup_json_ json_object *o = NULL;
        /* The record holds the exec request, up to an agent message, and its state. */
        if (sp_file_read(path, 2 * PR_AGENT_MAX_PAYLOAD + JOURNAL_COMPACT, &text, err) < 0 ||
            journal_read(text.data, text.len, &o, err) < 0)
                return sp_error_wrap(err, "load session %s", dir);
        wk_session *s = session_new(dir, err);
        if (!s)
                return -SP_E_LIMIT;
        s->recorded = true;
        s->journal_bytes = text.len;
        const char *id = NULL, *sb = NULL, *state = NULL, *error = NULL;
        json_object *req = NULL, *ex = NULL;
        int64_t pid = 0;
        if (sp_json_get_string(o, "id", true, 64, &id, err) < 0 ||
            sp_json_get_string(o, "sandbox_id", true, 64, &sb, err) < 0 ||
            sp_json_get_string(o, "state", true, 16, &state, err) < 0 ||
            sp_json_get_object(o, "request", true, &req, err) < 0 ||
            sp_json_get_int(o, "pid", false, 0, INT32_MAX, &pid, err) < 0 ||
            sp_json_get_int(o, "created_us", false, 0, INT64_MAX, &s->created_us, err) < 0 ||
            sp_json_get_int(o, "started_us", false, 0, INT64_MAX, &s->started_us, err) < 0 ||
            sp_json_get_int(o, "ended_us", false, 0, INT64_MAX, &s->ended_us, err) < 0 ||
            sp_json_get_string(o, "error", false, 4096, &error, err) < 0 ||
            sp_json_get_object(o, "exit", false, &ex, err) < 0 ||
            sp_json_get_bool(o, "draining", false, &s->draining, err) < 0 ||
            sp_json_get_bool(o, "reclaimed", false, &s->reclaimed, err) < 0) {
                wk_session_free(s);
                return sp_error_wrap(err, "load session %s", dir);
        }
        snprintf(s->id, sizeof(s->id), "%s", id);
        snprintf(s->sandbox, sizeof(s->sandbox), "%s", sb);
        s->request = json_object_get(req);
        s->pid = (int)pid;
        s->state = strcmp(state, "exited") == 0    ? WK_SESSION_EXITED
                   : strcmp(state, "failed") == 0  ? WK_SESSION_FAILED
                   : strcmp(state, "running") == 0 ? WK_SESSION_RUNNING
                                                   : WK_SESSION_STARTING;
        if (error)
                s->failure = strdup(error);
        if (ex) {
                int64_t v = 0;
                bool b = false;
                const char *reason = NULL;
                sp_json_get_int(ex, "code", false, INT32_MIN, INT32_MAX, &v, NULL);
                s->exit.code = (int)v;
                v = 0;
                sp_json_get_int(ex, "signal", false, 0, 128, &v, NULL);
                s->exit.signal = (int)v;
                sp_json_get_bool(ex, "oom", false, &b, NULL);
                s->exit.oom = b;
                b = false;
                sp_json_get_bool(ex, "killed", false, &b, NULL);
                s->exit.killed = b;
                if (sp_json_get_string(ex, "reason", false, 15, &reason, NULL) == 0 && reason)
                        snprintf(s->exit.reason, sizeof(s->exit.reason), "%s", reason);
        }
        char logdir[4096];
        struct stat st;
        snprintf(logdir, sizeof(logdir), "%s/log", dir);
        if (stat(logdir, &st) < 0 || !S_ISDIR(st.st_mode))
                snprintf(logdir, sizeof(logdir), "%s", dir);
        if (wk_log_open(logdir, log_capacity, false, &s->log, err) < 0) {
                wk_session_free(s);
                return sp_error_wrap(err, "load session %s", dir);
        }
        s->budget = budget;
        recharge(s);
        *ret = s;
        return 0;
}

bool wk_session_output_complete(const wk_session *s)
{
        return (s->state == WK_SESSION_EXITED && !s->draining) || s->state == WK_SESSION_FAILED;
}

int wk_session_attach_agent(wk_session *s, wk_agent_link *link, sp_error **err)
{
        if (wk_session_output_complete(s))
                return 0;
        s->link = link;
        memset(s->pending_ack, 0, sizeof(s->pending_ack));
        _cleanup_json_ json_object *req = json_object_new_object();
        json_object_object_add(req, "op", json_object_new_string("attach"));
        json_object_object_add(req, "session", json_object_new_string(s->id));
        json_object_object_add(req, "stdout_offset", json_object_new_int64((int64_t)wk_log_stream_total(s->log, 1)));
        json_object_object_add(req, "stderr_offset", json_object_new_int64((int64_t)wk_log_stream_total(s->log, 2)));
        json_object_object_add(req, "window", json_object_new_int64(SESSION_WINDOW));
        return open_channel(s, req, err);
}

void wk_session_detach_agent(wk_session *s)
{
        if (s->link && s->channel)
                wk_agent_cancel(s->link, s->channel);
        s->link = NULL;
        s->channel = 0;
        s->stdin_credit = 0;
}

void wk_session_lose(wk_session *s, const char *why)
{
        wk_session_detach_agent(s);
        if (s->state == WK_SESSION_STARTING || s->state == WK_SESSION_RUNNING) {
                set_failed(s, why);
        } else if (s->draining) {
                s->draining = false;
                (void)persist(s, NULL);
                notify(s, 1);
        }
}

void wk_session_free(wk_session *s)
{
        if (!s)
                return;
        while (s->watches) {
                wk_session_watch *w = s->watches;
                s->watches = w->next;
                if (w->on_gone)
                        w->on_gone(s, w->userdata);
        }
        wk_session_detach_agent(s);
        if (s->budget)
                s->budget->used -= s->charged;
        wk_log_close(s->log);
        if (s->request)
                json_object_put(s->request);
        free(s->failure);
        free(s->dir);
        free(s);
}

int wk_session_remove(wk_session *s, sp_error **err)
{
        if (!s)
                return 0;
        if (s->link && (s->state == WK_SESSION_RUNNING || s->state == WK_SESSION_STARTING))
                wk_session_kill(s, "killed", NULL);
        char path[4096];
        wk_log_close(s->log);
        s->log = NULL;
        snprintf(path, sizeof(path), "%s/log", s->dir);
        int r = wk_log_remove(path, err);
        /* The log's segments (if not in log/), session.json and the directory. */
        if (r == 0)
                r = wk_log_remove(s->dir, err);
        wk_session_free(s);
        return r;
}

int wk_session_read(wk_session *s, uint64_t offset, void *buf, size_t cap, uint8_t *ret_stream, size_t *ret_n,
                    sp_error **err)
{
        if (s->reclaimed && offset < wk_log_start(s->log))
                return sp_error_set(err, SP_E_NOT_FOUND, WK_SESSION_RECLAIMED_FMT, s->id);
        return wk_log_read(s->log, offset, buf, cap, ret_stream, ret_n, err);
}

void wk_session_mark_read(wk_session *s, uint64_t offset)
{
        wk_log_mark_read(s->log, offset);
        release_acks(s);
}

void wk_session_mark_sent(wk_session *s, uint64_t offset)
{
        wk_log_mark_sent(s->log, offset);
        release_acks(s);
}

void wk_session_kick(wk_session *s)
{
        release_acks(s);
}

bool wk_session_reclaimed(const wk_session *s)
{
        return s->reclaimed;
}

int wk_session_reclaim(wk_session *s, sp_error **err)
{
        if (!wk_session_output_complete(s))
                return sp_error_set(err, SP_E_CONFLICT, "session %s has not ended", s->id);
        if (s->reclaimed || !s->log)
                return 0;
        wk_log_discard(s->log);
        s->reclaimed = true;
        recharge(s);
        return persist(s, err);
}

static int require_running(const wk_session *s, sp_error **err)
{
        if (s->state != WK_SESSION_RUNNING && s->state != WK_SESSION_STARTING)
                return sp_error_set(err, SP_E_CONFLICT, "session %s is %s", s->id, wk_session_state_name(s->state));
        if (!s->link || !s->channel)
                return sp_error_set(err, SP_E_UNAVAILABLE, "session %s: the sandbox's agent is not connected", s->id);
        return 0;
}

size_t wk_session_stdin_credit(const wk_session *s)
{
        return s->link && s->channel ? s->stdin_credit : 0;
}

size_t wk_session_write_stdin(wk_session *s, const void *p, size_t n)
{
        if (require_running(s, NULL) < 0)
                return 0;
        if (n > s->stdin_credit)
                n = (size_t)s->stdin_credit;
        size_t done = 0;
        while (done < n) {
                size_t chunk = n - done > 65536 ? 65536 : n - done;
                if (wk_agent_send(s->link, s->channel, PR_AGENT_DATA, PR_STREAM_STDIN, (const char *)p + done, chunk,
                                  NULL) < 0)
                        break;
                done += chunk;
        }
        s->stdin_credit -= done;
        return done;
}

int wk_session_close_stdin(wk_session *s, sp_error **err)
{
        if (require_running(s, err) < 0)
                return -SP_E_CONFLICT;
        return wk_agent_send(s->link, s->channel, PR_AGENT_EOF, PR_STREAM_STDIN, NULL, 0, err);
}

/* Sends a CONTROL message; takes ownership of c. */
static int control(wk_session *s, json_object *c, sp_error **err)
{
        int r = require_running(s, err) < 0 ? -SP_E_CONFLICT : wk_agent_control(s->link, s->channel, c, err);
        json_object_put(c);
        return r;
}

int wk_session_signal(wk_session *s, int sig, sp_error **err)
{
        if (sig < 1 || sig > SIGRTMAX)
                return sp_error_set(err, SP_E_INVALID, "invalid signal %d", sig);
        json_object *c = json_object_new_object();
        json_object_object_add(c, "signal", json_object_new_int(sig));
        return control(s, c, err);
}

int wk_session_kill(wk_session *s, const char *reason, sp_error **err)
{
        snprintf(s->kill_reason, sizeof(s->kill_reason), "%s", reason ? reason : "killed");
        json_object *c = json_object_new_object();
        json_object_object_add(c, "kill", json_object_new_boolean(true));
        return control(s, c, err);
}

int wk_session_resize(wk_session *s, int rows, int cols, sp_error **err)
{
        if (rows < 1 || rows > 65535 || cols < 1 || cols > 65535)
                return sp_error_set(err, SP_E_INVALID, "invalid window size %dx%d", rows, cols);
        json_object *c = json_object_new_object();
        json_object *r = json_object_new_object();
        json_object_object_add(r, "rows", json_object_new_int(rows));
        json_object_object_add(r, "cols", json_object_new_int(cols));
        json_object_object_add(c, "resize", r);
        return control(s, c, err);
}
