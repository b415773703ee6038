/* SPDX-License-Identifier: Apache-2.0 */
/* Sandboxes: create (or claim a warm one), lifecycle, persistence, re-adoption. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "net/net.h"
#include "node/node_internal.h"
#include "policy/secret.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "space/worker_rpc.h"

#define SANDBOX_JSON_MAX (1 << 20)

const char *wk_sandbox_state_name(wk_sandbox_state st)
{
        static const char *const names[] = {"creating", "running", "paused", "suspended", "failed"};
        return st <= WK_SB_FAILED ? names[st] : "unknown";
}

wk_sandbox_state wk_sandbox_get_state(const wk_sandbox *sb)
{
        return sb->state;
}

wk_sandbox *wk_node_sandbox_find(wk_node *n, const char *id)
{
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                if (!sb->warm && strcmp(sb->id, id) == 0)
                        return sb;
        return NULL;
}

static void spec_of(const wk_sandbox *sb, wk_box_spec *spec, char *rootfs, char *runtime, size_t n)
{
        _cleanup_free_ char *r = wk_storage_sandbox_rootfs(sb->node->storage, sb->key, NULL);
        wk__path(rootfs, n, "%s", r ? r : "");
        wk__path(runtime, n, "%s/sandboxes/%s/run", sb->node->state_dir, sb->key);
        *spec = (wk_box_spec){
                .id = sb->key,
                .rootfs = rootfs,
                .runtime_dir = runtime,
                .hostname = sb->hostname,
                .cpu_millis = sb->cpu_millis,
                .memory_bytes = sb->memory_bytes,
                .pids_max = sb->pids_max,
                .id_slot = sb->slot,
                .disk_bytes = (uint64_t)sb->disk_bytes,
        };
}

/* The Sandbox answer (worker-rpc.md), which sandbox.json holds too with the
 * fields of wk__sandbox_persist beside it. */
json_object *wk_sandbox_to_json(const wk_sandbox *sb)
{
        char ts[32];
        sp_time_format_rfc3339(sb->created_us, ts);
        pr_wk_sandbox a = {
                .id = sb->id,
                .template_name = sb->template_name,
                .state = wk_sandbox_state_name(sb->state),
                .backend = sb->backend->ops->name,
                .hostname = sb->hostname,
                .created_at = ts,
                .resources = {.cpu_millis = sb->cpu_millis,
                              .memory_mb = sb->memory_bytes >> 20,
                              .pids = sb->pids_max,
                              .disk_mb = sb->disk_bytes >> 20},
                .has_suspend = sb->state == WK_SB_SUSPENDED,
                .suspend = {.memory = sb->suspended.memory,
                            .filesystem = sb->suspended.filesystem,
                            .why = sb->suspended.why[0] ? sb->suspended.why : NULL},
                .error = sb->failure,
                .restore_why = sb->restore_lost.why[0] ? sb->restore_lost.why : NULL,
                .agent_connected = wk_agent_link_ready(sb->link),
                .stored = sb->stored && sb->state == WK_SB_SUSPENDED,
                .stored_bytes = sb->stored && sb->state == WK_SB_SUSPENDED ? sb->stored_bytes : 0,
        };
        return pr_msg_encode(&pr_wk_sandbox_schema, &a);
}

json_object *wk__sandbox_record(const wk_sandbox *sb)
{
        json_object *o = wk_sandbox_to_json(sb);
        json_object_object_add(o, "key", json_object_new_string(sb->key));
        json_object_object_add(o, "warm", json_object_new_boolean(sb->warm));
        json_object_object_add(o, "slot", json_object_new_int64(sb->slot));
        json_object_object_add(o, "created_us", json_object_new_int64(sb->created_us));
        json_object_object_add(o, "memory_bytes", json_object_new_int64(sb->memory_bytes));
        json_object_object_add(o, "disk_bytes", json_object_new_int64(sb->disk_bytes));
        if (sb->env)
                json_object_object_add(o, "env", json_object_get(sb->env));
        if (sb->tenant_id[0])
                json_object_object_add(o, "tenant_id", json_object_new_string(sb->tenant_id));
        if (sb->egress)
                json_object_object_add(o, "egress", json_object_get(sb->egress));
        /* The bindings without their values: those never touch the disk. */
        if (sb->secrets)
                json_object_object_add(o, "secrets", gw_secrets_strip_values(sb->secrets));
        if (sb->egress_generation)
                json_object_object_add(o, "egress_generation", json_object_new_int64(sb->egress_generation));
        if (sb->export_to[0])
                json_object_object_add(o, "export_to", json_object_new_string(sb->export_to));
        if (sb->box && sb->backend->ops->save)
                json_object_object_add(o, "box", sb->backend->ops->save(sb->box));
        return o;
}

int wk__sandbox_persist(wk_sandbox *sb, sp_error **err)
{
        _cleanup_json_ json_object *o = wk__sandbox_record(sb);
        const char *text = sp_json_str(o);
        char path[PATH_MAX];
        wk__path(path, sizeof(path), "%s/sandboxes/%s/sandbox.json", sb->node->state_dir, sb->key);
        return sp_file_write_atomic(path, text, strlen(text), 0600, err);
}

static void set_failed(wk_sandbox *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_failed(wk_sandbox *sb, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        free(sb->failure);
        if (vasprintf(&sb->failure, fmt, ap) < 0)
                sb->failure = NULL;
        va_end(ap);
        sb->state = WK_SB_FAILED;
        sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "sandbox failed: %s", sb->failure ? sb->failure : "?");
        (void)wk__sandbox_persist(sb, NULL);
}

/* --- the agent connection --- */

static void link_closed(wk_agent_link *link, const sp_error *e, void *ud);
static void link_overrun(wk_agent_link *link, const sp_error *e, void *ud);
static const wk_agent_link_ops link_ops = {.on_closed = link_closed, .on_overrun = link_overrun};

static void reconnect_cb(evutil_socket_t fd, short what, void *ud);
static void connect_job_start(wk_sandbox *sb);

/* A connection that lasts this long resets the back-off of the next. */
#define LINK_STEADY_US (5 * SP_USEC_PER_SEC)

/* Tries to connect to its agent again after a while (the timer goes with the sandbox). */
static void reconnect_later(wk_sandbox *sb, long sec, long usec)
{
        if (!sb->reconnect)
                sb->reconnect = evtimer_new(sb->node->base, reconnect_cb, sb);
        struct timeval tv = {sec, usec};
        if (sb->reconnect)
                evtimer_add(sb->reconnect, &tv);
}

static void reconnect_cb(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_sandbox *sb = ud;
        if (sb->link || sb->busy || (sb->state != WK_SB_RUNNING && sb->state != WK_SB_PAUSED))
                return;
        /* A connection that takes more than a connect (a VM's port waits for the
         * agent's answer) is made on a job thread, never on the loop. */
        if (sb->backend->ops->agent_connect) {
                connect_job_start(sb);
                return;
        }
        _cleanup_error_ sp_error *e = NULL;
        if (wk__sandbox_connect_agent(sb, &e) < 0) {
                if (sb->box && !sb->backend->ops->alive(sb->box)) {
                        set_failed(sb, "the sandbox's init exited");
                        wk__sessions_lose(sb, "the sandbox's init exited");
                        return;
                }
                reconnect_later(sb, 1, 0);
        }
}

static void link_closed(wk_agent_link *link, const sp_error *e, void *ud)
{
        wk_sandbox *sb = ud;
        (void)link;
        sp_log_info_kv(SP_KV("sandbox_id", sb->id), "agent connection closed: %s", e ? e->message : "");
        sb->link = NULL;
        /* The link frees itself after this callback returns. */
        wk__sessions_detach(sb);
        /* An agent that keeps breaking its connections (a hostile sandbox can
         * write garbage on its port) is reconnected ever more slowly: 0.1 s,
         * doubling up to 25.6 s. */
        if (sp_now_mono_us() - sb->link_since_us < LINK_STEADY_US) {
                if (sb->link_failures < 8)
                        sb->link_failures++;
        } else {
                sb->link_failures = 0;
        }
        long us = 100000L << sb->link_failures;
        reconnect_later(sb, us / 1000000, us % 1000000);
}

/* The agent broke flow control on one channel: a genuine agent never does,
 * so the sandbox's root has likely replaced it (the link closed that channel). */
static void link_overrun(wk_agent_link *link, const sp_error *e, void *ud)
{
        wk_sandbox *sb = ud;
        (void)link;
        sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "its agent broke flow control: %s", e->message);
}

/* --- the agent's own log --- */

#define AGENT_LOG_WINDOW_MS 10000
#define AGENT_LOG_LINES_PER_WINDOW 100
#define AGENT_LOG_LINE_MAX 1024

static void agent_log_line(wk_sandbox *sb, const char *line, size_t n)
{
        int64_t now = sp_now_mono_us() / 1000;
        if (now - sb->agent_log_window_ms >= AGENT_LOG_WINDOW_MS) {
                if (sb->agent_log_dropped)
                        sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "agent: %u log lines dropped (over %d in %d s)",
                                       sb->agent_log_dropped, AGENT_LOG_LINES_PER_WINDOW, AGENT_LOG_WINDOW_MS / 1000);
                sb->agent_log_window_ms = now;
                sb->agent_log_lines = sb->agent_log_dropped = 0;
        }
        if (++sb->agent_log_lines > AGENT_LOG_LINES_PER_WINDOW) {
                sb->agent_log_dropped++;
                return;
        }
        sp_log_info_kv(SP_KV("sandbox_id", sb->id), "agent: %.*s",
                       (int)(n > AGENT_LOG_LINE_MAX ? AGENT_LOG_LINE_MAX : n), line);
}

/* Lines come whole from a jail's agent (one write each, atomic on a pipe) but a few bytes at a time
 * from a VM's serial console: a line is logged once its end comes, or once it fills
 * AGENT_LOG_LINE_MAX (the rest of it is a line of its own), or when every writer is gone. */
static void agent_log_flush(wk_sandbox *sb)
{
        if (sb->agent_log_part_len)
                agent_log_line(sb, sb->agent_log_part, sb->agent_log_part_len);
        sb->agent_log_part_len = 0;
}

static void agent_log_piece(wk_sandbox *sb, const char *p, size_t len, bool ended)
{
        if (!sb->agent_log_part && !(sb->agent_log_part = malloc(AGENT_LOG_LINE_MAX)))
                return;
        while (len) {
                size_t room = AGENT_LOG_LINE_MAX - sb->agent_log_part_len, k = len < room ? len : room;
                memcpy(sb->agent_log_part + sb->agent_log_part_len, p, k);
                sb->agent_log_part_len += k;
                p += k;
                len -= k;
                if (sb->agent_log_part_len == AGENT_LOG_LINE_MAX)
                        agent_log_flush(sb);
        }
        if (ended)
                agent_log_flush(sb);
}

static void agent_log_cb(evutil_socket_t fd, short what, void *ud)
{
        (void)what;
        wk_sandbox *sb = ud;
        char buf[16384];
        for (int i = 0; i < 4; i++) { /* bounded per turn of the loop */
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n == 0) {
                        /* Every writer is gone (the agent exited): wait for the next start. */
                        agent_log_flush(sb);
                        event_del(sb->agent_log);
                        return;
                }
                if (n < 0)
                        return;
                for (char *p = buf, *end = buf + n; p < end;) {
                        char *nl = memchr(p, '\n', (size_t)(end - p));
                        size_t len = (size_t)((nl ? nl : end) - p);
                        /* a carriage return before the end is the console's */
                        agent_log_piece(sb, p, nl && len && p[len - 1] == '\r' ? len - 1 : len, nl != NULL);
                        p += len + 1;
                }
        }
}

static void agent_log_watch(wk_sandbox *sb)
{
        wk_backend *b = sb->backend;
        int fd = b->ops->log_fd && sb->box ? b->ops->log_fd(sb->box) : -1;
        if (fd < 0)
                return;
        if (!sb->agent_log)
                sb->agent_log = event_new(sb->node->base, fd, EV_READ | EV_PERSIST, agent_log_cb, sb);
        if (sb->agent_log && !event_pending(sb->agent_log, EV_READ, NULL))
                event_add(sb->agent_log, NULL);
}

static void agent_log_unwatch(wk_sandbox *sb)
{
        if (sb->agent_log)
                event_free(sb->agent_log);
        sb->agent_log = NULL;
        agent_log_flush(sb);
        free(sb->agent_log_part);
        sb->agent_log_part = NULL;
}

static int connect_unix(const char *path, int *ret, sp_error **err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (!path || strlen(path) >= sizeof(sa.sun_path))
                return sp_error_set(err, SP_E_INTERNAL, "agent socket path too long");
        strcpy(sa.sun_path, path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;
                sp_close(fd);
                return sp_error_set_errno(err, SP_E_UNAVAILABLE, e, "connect to the agent");
        }
        *ret = fd;
        return 0;
}

/* A connection to box's agent: the backend's own way where it has one. */
static int box_connect_agent(wk_backend *b, wk_box *box, int *ret, sp_error **err)
{
        if (b->ops->agent_connect)
                return b->ops->agent_connect(box, ret, err);
        return connect_unix(b->ops->agent_socket(box), ret, err);
}

static void clock_answer(json_object *result, void *ud)
{
        static const char *const checks[] = {"clock_set", "hostname_set", "reseeded"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(checks); i++) {
                json_object *v = NULL;
                if (!json_object_object_get_ex(result, checks[i], &v) || !json_object_get_boolean(v))
                        sp_log_warn_kv(SP_KV("sandbox_id", (const char *)ud), "its agent answered no %s", checks[i]);
        }
        free(ud);
}

static void clock_lost(const sp_error *e, void *ud)
{
        (void)e;
        free(ud);
}

/* A VM restored from memory: its clock stood still while it was saved, and a
 * copy of a base snapshot holds another VM's host name and random state. The
 * agent sets its clock, its host name, and reseeds its kernel's generator
 * with bytes from ours (proto/spec/agent.md, ping) before anything else it
 * is sent. */
void wk__sandbox_refresh(wk_sandbox *sb)
{
        sb->clock_stale = false;
        _cleanup_json_ json_object *req = json_object_new_object();
        json_object_object_add(req, "op", json_object_new_string("ping"));
        json_object_object_add(req, "time_ns", json_object_new_int64(sp_now_real_us() * 1000));
        json_object_object_add(req, "hostname", json_object_new_string(sb->hostname));
        uint8_t seed[32];
        _cleanup_buf_ sp_buf b64 = SP_BUF_INIT;
        if (getrandom(seed, sizeof(seed), 0) == (ssize_t)sizeof(seed) &&
            sp_base64_encode(&b64, seed, sizeof(seed), 0, NULL) == 0)
                json_object_object_add(req, "seed", json_object_new_string(b64.data));
        explicit_bzero(seed, sizeof(seed));
        static const wk_agent_channel_ops ops = {.on_exit = clock_answer, .on_lost = clock_lost};
        char *id = strdup(sb->id);
        if (id && wk_agent_open(sb->link, req, &ops, id, NULL) == 0)
                free(id);
}

/* The agent's connection over fd (taken), its sessions attached to it. */
static int agent_adopt_fd(wk_sandbox *sb, int fd, sp_error **err)
{
        /* A backend's own connection (a VM's port) comes with HELLO exchanged: its probe. */
        sb->link = sb->backend->ops->agent_connect ? wk_agent_link_new_greeted(sb->node->base, fd, &link_ops, sb, err)
                                                   : wk_agent_link_new_fd(sb->node->base, fd, &link_ops, sb, err);
        if (!sb->link)
                return -SP_E_UNAVAILABLE;
        sb->link_since_us = sp_now_mono_us();
        if (sb->clock_stale)
                wk__sandbox_refresh(sb);
        wk__sessions_attach(sb);
        return 0;
}

/* After a job started the box and connected (fd): watch its log, take the
 * connection, or try again soon. */
static void agent_adopt_or_retry(wk_sandbox *sb, int fd)
{
        agent_log_watch(sb);
        _cleanup_error_ sp_error *e = NULL;
        if (agent_adopt_fd(sb, fd, &e) < 0) {
                sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "its agent: %s", e->message);
                reconnect_later(sb, 0, 200000);
        }
}

int wk__sandbox_connect_agent(wk_sandbox *sb, sp_error **err)
{
        agent_log_watch(sb);
        int fd = -1;
        if (box_connect_agent(sb->backend, sb->box, &fd, err) < 0)
                return sp_error_wrap(err, "sandbox %s", sb->id);
        return agent_adopt_fd(sb, fd, err);
}

/* --- creation --- */

static int alloc_slot(wk_node *n, uint32_t *ret, sp_error **err)
{
        size_t cap = wk__slot_capacity(n);
        for (size_t i = 0; i < cap; i++)
                if (!n->slots_used[i]) {
                        n->slots_used[i] = 1;
                        *ret = (uint32_t)i;
                        return 0;
                }
        return sp_error_set(err, SP_E_LIMIT, "no free sandbox slot on this node");
}

/* What a sandbox leaves on disk, removed (any thread). */
static void release_files(const char *state_dir, const struct wk_storage *storage, const char *key)
{
        _cleanup_error_ sp_error *e = NULL;
        if (wk_storage_sandbox_delete(storage, key, &e) < 0)
                sp_log_error_kv(SP_KV("sandbox_id", key), "cannot remove the root filesystem: %s", e->message);
        static const char *const files[] = {"sandbox.json", "egress.log", "egress.log.1"};
        /* sessions/ holds at most a spare session directory by now (exec.c). */
        static const char *const spare[] = {"sessions/" WK_SESSION_SPARE "/session.json",
                                            "sessions/" WK_SESSION_SPARE_TMP "/session.json",
                                            "sessions/" WK_SESSION_SPARE, "sessions/" WK_SESSION_SPARE_TMP};
        char sp[PATH_MAX];
        for (size_t i = 0; i < SP_ARRAY_SIZE(spare); i++) {
                wk__path(sp, sizeof(sp), "%s/sandboxes/%s/%s", state_dir, key, spare[i]);
                if (unlink(sp) < 0)
                        rmdir(sp);
        }
        static const char *const dirs[] = {"run/root", "run", "sessions"};
        char path[PATH_MAX];
        for (size_t i = 0; i < SP_ARRAY_SIZE(dirs); i++) {
                wk__path(path, sizeof(path), "%s/sandboxes/%s/%s", state_dir, key, dirs[i]);
                rmdir(path);
        }
        for (size_t i = 0; i < SP_ARRAY_SIZE(files); i++) {
                wk__path(path, sizeof(path), "%s/sandboxes/%s/%s", state_dir, key, files[i]);
                unlink(path);
        }
        wk__path(path, sizeof(path), "%s/sandboxes/%s", state_dir, key);
        rmdir(path);
}

static void release_slot(wk_sandbox *sb)
{
        wk_node *n = sb->node;
        if (sb->slot < wk__slot_capacity(n))
                n->slots_used[sb->slot] = 0;
}

static void release(wk_sandbox *sb)
{
        release_files(sb->node->state_dir, sb->node->storage, sb->key);
        release_slot(sb);
}

static void unlink_sandbox(wk_sandbox *sb)
{
        for (wk_sandbox **p = &sb->node->sandboxes; *p; p = &(*p)->next)
                if (*p == sb) {
                        *p = sb->next;
                        break;
                }
}

/* --- per-sandbox order: calls wait for its job --- */

bool wk_node_sandbox_busy(wk_node *n, const char *id)
{
        wk_sandbox *sb = wk__sandbox_find_any(n, id);
        return sb && sb->busy;
}

int wk_node_sandbox_after(wk_node *n, const char *id, void (*fn)(void *ud), void *ud)
{
        wk_sandbox *sb = wk__sandbox_find_any(n, id);
        if (!sb || !sb->busy)
                return -1;
        wk_waiter *w = calloc(1, sizeof(*w));
        if (!w)
                return -1;
        w->fn = fn;
        w->ud = ud;
        if (!sb->waiters_tail)
                sb->waiters_tail = &sb->waiters;
        *sb->waiters_tail = w;
        sb->waiters_tail = &w->next;
        return 0;
}

static wk_waiter *take_waiters(wk_sandbox *sb)
{
        wk_waiter *w = sb->waiters;
        sb->waiters = NULL;
        sb->waiters_tail = &sb->waiters;
        return w;
}

/* In order; each one checks again (the first may have started another job). */
static void run_waiters(wk_waiter *w)
{
        while (w) {
                wk_waiter *next = w->next;
                w->fn(w->ud);
                free(w);
                w = next;
        }
}

void wk__sandbox_unbusy(wk_sandbox *sb)
{
        sb->busy = false;
        run_waiters(take_waiters(sb));
}

int wk__slot_take(wk_node *n, uint32_t *ret, sp_error **err)
{
        return alloc_slot(n, ret, err);
}

void wk__slot_give_back(wk_node *n, uint32_t slot)
{
        if (slot < wk__slot_capacity(n))
                n->slots_used[slot] = 0;
}

void wk__hostname_of(const char *hostname, const char *id, char out[static 64])
{
        snprintf(out, 64, "%.63s", hostname && *hostname ? hostname : id);
        for (char *c = out; *c; c++)
                if (*c == '_')
                        *c = '-';
}

wk_sandbox *wk__sandbox_make(wk_node *n, const char *template_name, sp_error **err)
{
        wk_sandbox *sb = calloc(1, sizeof(*sb));
        if (!sb) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        sb->node = n;
        sb->backend = n->backend;
        snprintf(sb->template_name, sizeof(sb->template_name), "%s", template_name);
        sb->created_us = sp_now_real_us();
        sb->state = WK_SB_CREATING;
        sb->waiters_tail = &sb->waiters;
        return sb;
}

/* --- creation: the blocking steps on a job thread (jobs.h) --- */

typedef struct make_job {
        wk_job job;
        wk_sandbox *sb; /* the loop's: the thread never touches it */
        wk_node_sandbox_done_fn done;
        void *ud;
        /* the thread's copies */
        const char *state_dir;
        const struct wk_storage *storage;
        wk_backend *backend;
        char key[WK_NAME_MAX + 1], id[WK_NAME_MAX + 1], template_name[WK_NAME_MAX + 1], hostname[64];
        char rootfs[PATH_MAX], runtime[PATH_MAX];
        char template_dir[PATH_MAX]; /* "": the backend makes the disk from rootfs (it was written to) */
        wk_box_spec spec;
        uint64_t disk_bytes;
        uint64_t files_bytes; /* the quota of its directory (a VM's disk and memory), 0: none */
        char nameserver[16]; /* "": no network */
        bool ca;
        char *record; /* sandbox.json while it is being made */
        /* what the thread made */
        wk_box *box;
        int agent_fd;
        sp_error *err;
} make_job;

static int write_record(const char *state_dir, const char *key, const char *text, sp_error **err)
{
        char path[PATH_MAX];
        wk__path(path, sizeof(path), "%s/sandboxes/%s/sandbox.json", state_dir, key);
        return sp_file_write_atomic(path, text, strlen(text), 0600, err);
}

/* The record once running: the one written before, with its state and box. */
static int write_running_record(make_job *m, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        if (sp_json_parse(m->record, strlen(m->record), &o, err) < 0)
                return -SP_E_INTERNAL;
        json_object_object_add(o, "state", json_object_new_string(wk_sandbox_state_name(WK_SB_RUNNING)));
        if (m->backend->ops->save)
                json_object_object_add(o, "box", m->backend->ops->save(m->box));
        return write_record(m->state_dir, m->key, sp_json_str(o), err);
}

static void make_run(wk_job *j)
{
        make_job *m = (make_job *)j;
        sp_error **err = &m->err;
        char dir[PATH_MAX];
        wk__path(dir, sizeof(dir), "%s/sandboxes/%s/sessions", m->state_dir, m->key);
        if (sp_mkdir_p(dir, 0700, err) < 0 ||
            wk_storage_sandbox_create(m->storage, m->template_name, m->key, m->disk_bytes, m->files_bytes, NULL, err) <
                    0 ||
            (m->nameserver[0] && wk__resolv_conf_write(m->rootfs, m->nameserver, err) < 0) ||
            (m->ca && wk__secrets_make_ca(m->state_dir, m->key, m->id, m->rootfs, err) < 0) ||
            write_record(m->state_dir, m->key, m->record, err) < 0 || sp_mkdir_p(m->runtime, 0700, err) < 0)
                goto fail;
        if (m->backend->ops->create(m->backend, &m->spec, &m->box, err) < 0) {
                m->box = NULL;
                goto fail;
        }
        if (box_connect_agent(m->backend, m->box, &m->agent_fd, err) < 0 || write_running_record(m, err) < 0)
                goto fail;
        return;
fail:
        sp_close(m->agent_fd);
        m->agent_fd = -1;
        if (m->box) {
                m->backend->ops->destroy(m->box, NULL);
                m->box = NULL;
        }
        release_files(m->state_dir, m->storage, m->key);
        sp_error_wrap(err, "create sandbox %s", m->id);
}

static void make_done(wk_job *j)
{
        make_job *m = (make_job *)j;
        wk_sandbox *sb = m->sb;
        free(m->record);
        if (j->cancelled && !m->err)
                sp_error_set(&m->err, SP_E_UNAVAILABLE, "create sandbox %s: the worker is shutting down", m->id);
        sb->busy = false;
        if (m->err) {
                release_slot(sb);
                unlink_sandbox(sb);
                wk_waiter *w = take_waiters(sb);
                if (m->done)
                        m->done(NULL, m->err, m->ud);
                wk__sandbox_free(sb);
                sp_error_free(m->err);
                free(m);
                run_waiters(w);
                return;
        }
        sb->box = m->box;
        if (m->backend->ops->from_base) {
                /* A VM: a copy of its template's base snapshot needs its own clock, name and
                 * randomness; one that booted asks for that snapshot to be made. */
                bool from_base = m->backend->ops->from_base(m->box);
                sb->clock_stale = from_base;
                if (from_base)
                        sb->node->vm_creates_from_base++;
                else
                        sb->node->vm_creates_booted++;
                if (!from_base && m->template_dir[0])
                        wk__vm_base_want(sb->node, sb);
        }
        agent_adopt_or_retry(sb, m->agent_fd);
        sb->state = WK_SB_RUNNING;
        wk__egress_apply(sb, NULL, NULL);
        if (!sb->warm) {
                sp_log_info_kv(SP_KV("sandbox_id", sb->id, "template", sb->template_name), "sandbox running");
                wk__warm_schedule(sb->node); /* the pool gives back a slot this create took, if it did */
        }
        wk_waiter *w = take_waiters(sb);
        if (m->done)
                m->done(sb, NULL, m->ud);
        free(m);
        run_waiters(w);
}

/* Starts making sb (linked into the node, busy until done). */
static int make_start(wk_node *n, wk_sandbox *sb, bool background, wk_node_sandbox_done_fn done, void *ud,
                      sp_error **err)
{
        /* Warm pool members never keep a request out: the pool gives way (warm.c trims it back under
         * the slots), or any tenant's pool could fill the node for every other tenant. Members being
         * made or trimmed count as little as ready ones (the slot table has room for the pool beyond
         * the live slots): counting them let a create fail while the pool was still giving way. */
        size_t held = wk__live_count(n) - (background ? 0 : wk__warm_live_count(n));
        if (held >= (size_t)n->cfg.slots)
                return sp_error_set(err, SP_E_LIMIT, "node %s is full (%lld sandboxes)", n->node_id,
                                    (long long)n->cfg.slots);
        make_job *m = calloc(1, sizeof(*m));
        if (!m)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        _cleanup_free_ char *rootfs = wk_storage_sandbox_rootfs(n->storage, sb->key, err);
        if (!rootfs || alloc_slot(n, &sb->slot, err) < 0) {
                free(m);
                return -SP_E_LIMIT;
        }
        m->job = (wk_job){
                .kind = background ? "warm" : "create", .run = make_run, .done = make_done, .background = background};
        m->sb = sb;
        m->done = done;
        m->ud = ud;
        m->state_dir = n->state_dir;
        m->storage = n->storage;
        m->backend = sb->backend;
        m->agent_fd = -1;
        snprintf(m->key, sizeof(m->key), "%s", sb->key);
        snprintf(m->id, sizeof(m->id), "%s", sb->id);
        snprintf(m->template_name, sizeof(m->template_name), "%s", sb->template_name);
        snprintf(m->hostname, sizeof(m->hostname), "%s", sb->hostname);
        wk__path(m->rootfs, sizeof(m->rootfs), "%s", rootfs);
        wk__path(m->runtime, sizeof(m->runtime), "%s/sandboxes/%s/run", n->state_dir, sb->key);
        m->spec = (wk_box_spec){
                .id = m->key,
                .rootfs = m->rootfs,
                .runtime_dir = m->runtime,
                .hostname = m->hostname,
                .cpu_millis = sb->cpu_millis,
                .memory_bytes = sb->memory_bytes,
                .pids_max = sb->pids_max,
                .id_slot = sb->slot,
                .disk_bytes = (uint64_t)sb->disk_bytes,
        };
        m->disk_bytes = (uint64_t)sb->disk_bytes;
        m->files_bytes = sb->backend->ops->files_bytes ? sb->backend->ops->files_bytes(&m->spec) : 0;
        if (n->cfg.net && !sb->backend->ops->own_resolver)
                wk_net_host_address(n->cfg.net, sb->slot, m->nameserver);
        m->ca = wk__secrets_any(sb);
        if (m->ca)
                wk__secrets_env(sb);
        if (sb->backend->ops->prepare && !m->nameserver[0] && !m->ca) {
                /* Nothing is written into its rootfs: the backend may start it from the template's own. */
                _cleanup_free_ char *tdir = wk_storage_template_dir(n->storage, sb->template_name, NULL);
                if (tdir) {
                        wk__path(m->template_dir, sizeof(m->template_dir), "%s", tdir);
                        m->spec.template_dir = m->template_dir;
                }
        }
        _cleanup_json_ json_object *rec = wk__sandbox_record(sb);
        m->record = strdup(sp_json_str(rec));
        if (!m->record) {
                release_slot(sb);
                free(m);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        sb->busy = true;
        sb->next = n->sandboxes;
        n->sandboxes = sb;
        wk_jobs_submit(n->jobs, &m->job);
        return 0;
}

static void request_free(wk_sandbox *sb)
{
        if (sb->env)
                json_object_put(sb->env);
        if (sb->egress)
                json_object_put(sb->egress);
        json_object_put(sb->secrets);
        free(sb);
}

int wk_node_sandbox_create(wk_node *n, const wk_sandbox_request *req, wk_node_sandbox_done_fn done, void *ud,
                           wk_sandbox **ret, sp_error **err)
{
        if (!sp_id_valid(req->id, NULL) || strlen(req->id) > WK_NAME_MAX)
                return sp_error_set(err, SP_E_INVALID, "invalid sandbox id '%.64s'", req->id);
        if (wk_node_sandbox_find(n, req->id))
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s already exists", req->id);
        if (!wk__template_find(n, req->template_name))
                return sp_error_set(err, SP_E_NOT_FOUND, "template %.64s not found on this node", req->template_name);
        if (req->hostname && (strlen(req->hostname) == 0 || strlen(req->hostname) > 63))
                return sp_error_set(err, SP_E_INVALID, "invalid hostname");
        wk_backend *backend = req->backend && *req->backend ? wk__backend_named(n, req->backend) : n->backend;
        if (!backend)
                return sp_error_set(err, SP_E_PRECONDITION, "this worker does not run the %.16s backend", req->backend);

        _cleanup_(gw_secrets_unrefp) gw_secrets *check = NULL;
        if (gw_secrets_parse(req->secrets, &check, err) < 0)
                return sp_error_wrap(err, "field 'secrets'");
        wk_box_spec want = {.cpu_millis = req->cpu_millis,
                            .memory_bytes = req->memory_bytes,
                            .pids_max = req->pids_max,
                            .disk_bytes = (uint64_t)req->disk_bytes};
        wk_template *t = wk__template_find(n, req->template_name);
        t->warm_cpu_millis = req->cpu_millis;
        t->warm_memory_bytes = req->memory_bytes;
        t->warm_pids_max = req->pids_max;
        t->warm_disk_bytes = req->disk_bytes;
        /* The warm pool is the default backend's. */
        wk_sandbox *sb = req->allow_warm && backend == n->backend ? wk__warm_claim(n, req->template_name, &want) : NULL;
        if (sb) {
                /* A warm sandbox takes the caller's identity in one step; a VM also its host
                 * name (a jail's is fixed when its namespace is made). */
                snprintf(sb->id, sizeof(sb->id), "%s", req->id);
                sb->warm = false;
                if (sb->backend->ops->from_base) {
                        wk__hostname_of(req->hostname, req->id, sb->hostname);
                        wk__sandbox_refresh(sb);
                }
        } else {
                sb = wk__sandbox_make(n, req->template_name, err);
                if (!sb)
                        return -SP_E_LIMIT;
                snprintf(sb->id, sizeof(sb->id), "%s", req->id);
                snprintf(sb->key, sizeof(sb->key), "%s", req->id);
                wk__hostname_of(req->hostname, req->id, sb->hostname);
                sb->backend = backend;
        }
        sb->cpu_millis = req->cpu_millis;
        sb->memory_bytes = req->memory_bytes;
        sb->pids_max = req->pids_max;
        sb->disk_bytes = req->disk_bytes;
        if (sb->env)
                json_object_put(sb->env);
        sb->env = req->env ? json_object_get(req->env) : NULL;
        snprintf(sb->tenant_id, sizeof(sb->tenant_id), "%s", req->tenant_id ? req->tenant_id : "");
        if (sb->egress)
                json_object_put(sb->egress);
        sb->egress = req->egress ? json_object_get(req->egress) : NULL;
        json_object_put(sb->secrets);
        sb->secrets = check ? json_object_get(req->secrets) : NULL;
        sb->egress_generation = req->egress_generation;

        if (sb->box) {
                if (sb->backend->ops->update) {
                        wk_box_spec spec;
                        char rootfs[PATH_MAX], runtime[PATH_MAX];
                        spec_of(sb, &spec, rootfs, runtime, sizeof(rootfs));
                        if (sb->backend->ops->update(sb->box, &spec, err) < 0) {
                                wk_node_sandbox_delete(n, sb->id, NULL, NULL, NULL);
                                return sp_error_wrap(err, "claim a warm sandbox for %s", req->id);
                        }
                }
                if (wk__secrets_ready(sb, err) < 0 || wk__sandbox_persist(sb, err) < 0) {
                        wk_node_sandbox_delete(n, sb->id, NULL, NULL, NULL);
                        return -SP_E_IO;
                }
                wk__egress_apply(sb, NULL, NULL);
                sp_log_info_kv(SP_KV("sandbox_id", sb->id, "template", sb->template_name), "claimed warm sandbox %s",
                               sb->key);
                wk__warm_schedule(n);
                *ret = sb;
                return 0;
        }
        if (make_start(n, sb, false, done, ud, err) < 0) {
                request_free(sb);
                return sp_error_wrap(err, "create sandbox %s", req->id);
        }
        *ret = NULL;
        return 1;
}

/* Creates a pool member (warm.c): linked into the node at once, made in the
 * background; done follows. */
int wk__warm_make(wk_node *n, const char *template_name, wk_node_sandbox_done_fn done, void *ud, sp_error **err)
{
        wk_sandbox *sb = wk__sandbox_make(n, template_name, err);
        if (!sb)
                return -SP_E_LIMIT;
        char id[SP_ID_MAX];
        if (sp_id_new("wrm", id, err) < 0) {
                free(sb);
                return -SP_E_IO;
        }
        snprintf(sb->id, sizeof(sb->id), "%s", id);
        snprintf(sb->key, sizeof(sb->key), "%s", id);
        wk__hostname_of(NULL, id, sb->hostname);
        sb->warm = true;
        wk_template *t = wk__template_find(n, template_name);
        if (t) {
                /* Made as the template's latest create asked (a VM cannot change its machine when claimed). */
                sb->cpu_millis = t->warm_cpu_millis;
                sb->memory_bytes = t->warm_memory_bytes;
                sb->pids_max = t->warm_pids_max;
                sb->disk_bytes = t->warm_disk_bytes;
        }
        if (make_start(n, sb, true, done, ud, err) < 0) {
                free(sb);
                return -SP_E_INTERNAL;
        }
        return 0;
}

void wk__sandbox_free(wk_sandbox *sb)
{
        if (!sb)
                return;
        for (size_t i = 0; i < sb->nexecs; i++) {
                wk_exec_slot *x = sb->execs[i];
                wk__session_unindex(x);
                if (x->timeout)
                        event_free(x->timeout);
                wk_session_watch_remove(x->session, &x->watch);
                wk_session_free(x->session);
                free(x);
        }
        free(sb->execs);
        if (sb->log_budget_kick)
                event_free(sb->log_budget_kick);
        if (sb->spare_timer)
                event_free(sb->spare_timer);
        if (sb->reconnect)
                event_free(sb->reconnect);
        agent_log_unwatch(sb);
        if (sb->link)
                wk_agent_link_free(sb->link);
        if (sb->box && sb->backend->ops->forget)
                sb->backend->ops->forget(sb->box);
        for (wk_waiter *w = sb->waiters, *next; w; w = next) {
                next = w->next;
                free(w);
        }
        if (sb->env)
                json_object_put(sb->env);
        if (sb->egress)
                json_object_put(sb->egress);
        json_object_put(sb->secrets);
        free(sb->failure);
        free(sb->export_refused);
        free(sb);
}

wk_sandbox *wk__sandbox_find_any(wk_node *n, const char *id)
{
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                if (strcmp(sb->id, id) == 0)
                        return sb;
        return NULL;
}

/* --- deletion: the blocking steps on a job thread --- */

typedef struct delete_job {
        wk_job job;
        wk_sandbox *sb;
        wk_node_done_fn done;
        void *ud;
        const char *state_dir;
        const struct wk_storage *storage;
        wk_backend *backend;
        wk_box *box;
        char key[WK_NAME_MAX + 1], id[WK_NAME_MAX + 1];
        sp_error *err;
} delete_job;

static void delete_run(wk_job *j)
{
        delete_job *d = (delete_job *)j;
        if (d->box && d->backend->ops->destroy(d->box, &d->err) < 0)
                return; /* the record stays, so that a retry (or reconciliation) finishes the job */
        d->box = NULL;
        release_files(d->state_dir, d->storage, d->key);
}

static void delete_done(wk_job *j)
{
        delete_job *d = (delete_job *)j;
        wk_sandbox *sb = d->sb;
        wk_node *n = sb->node;
        sb->busy = sb->deleting = false;
        if (j->cancelled) {
                /* Never started: the sandbox stays as it was (a restart re-adopts it). */
                sb->box = d->box;
                sp_error_set(&d->err, SP_E_UNAVAILABLE, "delete sandbox %s: the worker is shutting down", d->id);
        } else if (d->err) {
                set_failed(sb, "delete: %s", d->err->message);
                sp_error_wrap(&d->err, "delete sandbox %s", d->id);
        }
        wk_waiter *w = take_waiters(sb);
        if (d->err) {
                if (d->done)
                        d->done(d->err, d->ud);
                sp_error_free(d->err);
                free(d);
                run_waiters(w);
                return;
        }
        release_slot(sb);
        unlink_sandbox(sb);
        if (!sb->warm)
                sp_log_info_kv(SP_KV("sandbox_id", d->id), "sandbox deleted");
        wk__sandbox_free(sb);
        if (d->done)
                d->done(NULL, d->ud);
        free(d);
        run_waiters(w);
        wk__warm_schedule(n);
}

typedef struct delete_later {
        wk_node *n;
        char id[WK_NAME_MAX + 1];
        wk_node_done_fn done;
        void *ud;
} delete_later;

static void delete_again(void *ud)
{
        delete_later *l = ud;
        _cleanup_error_ sp_error *e = NULL;
        int r = wk_node_sandbox_delete(l->n, l->id, l->done, l->ud, &e);
        if (r < 0 && l->done)
                l->done(e->code == SP_E_NOT_FOUND ? NULL : e, l->ud);
        free(l);
}

int wk_node_sandbox_delete(wk_node *n, const char *id, wk_node_done_fn done, void *ud, sp_error **err)
{
        wk_sandbox *sb = wk__sandbox_find_any(n, id);
        if (!sb)
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s not found", id);
        if (sb->busy) {
                /* After the job under way (a delete under way: it is gone then). */
                delete_later *l = calloc(1, sizeof(*l));
                if (!l)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                *l = (delete_later){.n = n, .done = done, .ud = ud};
                snprintf(l->id, sizeof(l->id), "%s", id);
                if (wk_node_sandbox_after(n, id, delete_again, l) < 0) {
                        free(l);
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                }
                return 1;
        }
        delete_job *d = calloc(1, sizeof(*d));
        if (!d)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        wk__store_drop(sb);
        wk__sessions_remove_all(sb);
        wk__egress_forget(sb);
        if (sb->link) {
                wk_agent_link_free(sb->link);
                sb->link = NULL;
        }
        agent_log_unwatch(sb);
        *d = (delete_job){.job = {.kind = "delete", .run = delete_run, .done = delete_done, .background = sb->warm},
                          .sb = sb,
                          .done = done,
                          .ud = ud,
                          .state_dir = n->state_dir,
                          .storage = n->storage,
                          .backend = sb->backend,
                          .box = sb->box};
        snprintf(d->key, sizeof(d->key), "%s", sb->key);
        snprintf(d->id, sizeof(d->id), "%s", sb->id);
        sb->box = NULL;
        sb->busy = sb->deleting = true;
        wk_jobs_submit(n->jobs, &d->job);
        return 1;
}

static wk_sandbox *need(wk_node *n, const char *id, sp_error **err)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        if (!sb)
                sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s not found", id);
        return sb;
}

/* --- suspend and restore: the box's stop and start on a job thread --- */

typedef struct box_job {
        wk_job job;
        wk_sandbox *sb;
        wk_node_done_fn done;
        void *ud;
        wk_backend *backend;
        wk_box *box; /* the thread's while the job runs */
        const char *state_dir;
        char key[WK_NAME_MAX + 1], id[WK_NAME_MAX + 1];
        char *record; /* restore: sandbox.json once running, without its box */
        wk_suspend_info info; /* suspend: what it kept */
        wk_restore_info lost; /* restore: what it lost */
        bool files_only; /* suspend: a stop */
        int agent_fd;
        sp_error *err;
} box_job;

static box_job *box_job_new(wk_sandbox *sb, const char *kind, void (*run)(wk_job *), void (*done)(wk_job *),
                            wk_node_done_fn cb, void *ud)
{
        box_job *b = calloc(1, sizeof(*b));
        if (!b)
                return NULL;
        *b = (box_job){.job = {.kind = kind, .run = run, .done = done},
                       .sb = sb,
                       .done = cb,
                       .ud = ud,
                       .backend = sb->backend,
                       .box = sb->box,
                       .state_dir = sb->node->state_dir,
                       .agent_fd = -1};
        snprintf(b->key, sizeof(b->key), "%s", sb->key);
        snprintf(b->id, sizeof(b->id), "%s", sb->id);
        return b;
}

static void box_job_end(box_job *b)
{
        wk_sandbox *sb = b->sb;
        sb->busy = false;
        wk_waiter *w = take_waiters(sb);
        if (b->done)
                b->done(b->err, b->ud);
        sp_error_free(b->err);
        free(b->record);
        free(b);
        run_waiters(w);
}

/* Reconnecting to an agent whose backend connects slowly (agent_connect). */
static void connect_run(wk_job *j)
{
        box_job *b = (box_job *)j;
        if (b->backend->ops->agent_connect(b->box, &b->agent_fd, &b->err) < 0)
                sp_error_wrap(&b->err, "sandbox %s: its agent", b->id);
}

static void connect_done(wk_job *j)
{
        box_job *b = (box_job *)j;
        wk_sandbox *sb = b->sb;
        int fd = b->agent_fd;
        b->agent_fd = -1;
        if (!j->cancelled) {
                if (!b->err && !sb->link && (sb->state == WK_SB_RUNNING || sb->state == WK_SB_PAUSED)) {
                        agent_adopt_or_retry(sb, fd);
                        fd = -1;
                } else if (b->err) {
                        if (sb->box && !b->backend->ops->alive(sb->box)) {
                                set_failed(sb, "the sandbox's init exited");
                                wk__sessions_lose(sb, "the sandbox's init exited");
                        } else {
                                /* The same back-off as for connections that break: an agent that
                                 * never answers (a hostile guest can stop its own) holds a job
                                 * thread for each attempt. */
                                sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "%s", b->err->message);
                                if (sb->link_failures < 8)
                                        sb->link_failures++;
                                long us = 100000L << sb->link_failures;
                                reconnect_later(sb, us / 1000000, us % 1000000);
                        }
                }
        }
        sp_close(fd);
        sp_error_free(b->err);
        b->err = NULL; /* not the waiters' business */
        box_job_end(b);
}

static void connect_job_start(wk_sandbox *sb)
{
        box_job *b = box_job_new(sb, "connect", connect_run, connect_done, NULL, NULL);
        if (!b) {
                reconnect_later(sb, 1, 0);
                return;
        }
        agent_log_watch(sb);
        sb->busy = true;
        wk_jobs_submit(sb->node->jobs, &b->job);
}

/* --- pause and resume: the box's freeze and thaw on a job thread --- */

/* A VM's pause and resume are QMP commands that wait up to 10 s for QEMU's
 * answer, and a jail's waits as long for its cgroup to be frozen: a QEMU
 * that answers slowly, or a process slow to freeze, holds a job thread, not
 * the loop. The sandbox is busy meanwhile, so calls on it wait
 * (wk_node_sandbox_after) and see it paused or running, never between. */
static void pause_run(wk_job *j)
{
        box_job *b = (box_job *)j;
        if (b->backend->ops->pause(b->box, &b->err) < 0)
                sp_error_wrap(&b->err, "pause %s", b->id);
}

static void resume_run(wk_job *j)
{
        box_job *b = (box_job *)j;
        if (b->backend->ops->resume(b->box, &b->err) < 0)
                sp_error_wrap(&b->err, "resume %s", b->id);
}

static void pause_resume_done(wk_job *j)
{
        box_job *b = (box_job *)j;
        wk_sandbox *sb = b->sb;
        bool pause = j->run == pause_run;
        wk_sandbox_state from = pause ? WK_SB_RUNNING : WK_SB_PAUSED;
        if (j->cancelled)
                sp_error_set(&b->err, SP_E_UNAVAILABLE, "%s %s: the worker is shutting down", j->kind, b->id);
        else if (!b->err && sb->state != from)
                sp_error_set(&b->err, SP_E_CONFLICT, "%s %s: it became %s meanwhile", j->kind, b->id,
                             wk_sandbox_state_name(sb->state));
        if (!b->err) {
                sb->state = pause ? WK_SB_PAUSED : WK_SB_RUNNING;
                wk__sandbox_persist(sb, &b->err);
        }
        /* A connection lost while the job ran was not retried (reconnect_cb
         * waits for a sandbox that is not busy). */
        if (!j->cancelled && !sb->link && (sb->state == WK_SB_RUNNING || sb->state == WK_SB_PAUSED))
                reconnect_later(sb, 0, 100000);
        box_job_end(b);
}

static int pause_resume_start(wk_node *n, const char *id, bool pause, wk_node_done_fn done, void *ud, sp_error **err)
{
        wk_sandbox *sb = need(n, id, err);
        if (!sb)
                return -SP_E_NOT_FOUND;
        wk_sandbox_state from = pause ? WK_SB_RUNNING : WK_SB_PAUSED, to = pause ? WK_SB_PAUSED : WK_SB_RUNNING;
        if (sb->state == to)
                return 0;
        if (sb->state != from)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is %s", id, wk_sandbox_state_name(sb->state));
        box_job *b = box_job_new(sb, pause ? "pause" : "resume", pause ? pause_run : resume_run, pause_resume_done,
                                 done, ud);
        if (!b)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        sb->busy = true;
        wk_jobs_submit(n->jobs, &b->job);
        return 1;
}

int wk_node_sandbox_pause(wk_node *n, const char *id, wk_node_done_fn done, void *ud, sp_error **err)
{
        return pause_resume_start(n, id, true, done, ud, err);
}

int wk_node_sandbox_resume(wk_node *n, const char *id, wk_node_done_fn done, void *ud, sp_error **err)
{
        return pause_resume_start(n, id, false, done, ud, err);
}

static void suspend_run(wk_job *j)
{
        box_job *b = (box_job *)j;
        if (b->backend->ops->suspend(b->box, !b->files_only, &b->info, &b->err) < 0)
                sp_error_wrap(&b->err, "suspend %s", b->id);
}

static void suspend_done(wk_job *j)
{
        box_job *b = (box_job *)j;
        wk_sandbox *sb = b->sb;
        if (j->cancelled)
                sp_error_set(&b->err, SP_E_UNAVAILABLE, "suspend %s: the worker is shutting down", b->id);
        if (!b->err) {
                sb->suspended = b->info;
                sb->restore_lost.why[0] = '\0';
                if (!sb->suspended.memory)
                        wk__sessions_lose(sb, "the sandbox was stopped");
                sb->state = WK_SB_SUSPENDED;
                wk__sandbox_persist(sb, &b->err);
                wk__store_want(sb->node);
        } else if (!j->cancelled) {
                /* Its agent connection went with the attempt: connect again (reconnect_cb). */
                reconnect_later(sb, 0, 100000);
        }
        box_job_end(b);
}

/* How long a suspend waits for the agent to sync its filesystems. */
#define SUSPEND_SYNC_WAIT_MS 10000

typedef struct suspend_sync {
        box_job *b;
        struct event *timer;
        bool gone;
} suspend_sync;

/* The suspend proper: the agent's connection goes, the job runs the backend's. */
static void suspend_submit(box_job *b)
{
        wk_sandbox *sb = b->sb;
        if (sb->link) {
                wk_agent_link_free(sb->link);
                sb->link = NULL;
        }
        wk__egress_forget(sb);
        wk_jobs_submit(sb->node->jobs, &b->job);
}

/* Once: the agent answered, its connection was lost, or the wait is over.
 * Freeing the link ends the channel (its on_lost comes here again, ignored). */
static void suspend_go(suspend_sync *ss)
{
        if (ss->gone)
                return;
        ss->gone = true;
        if (ss->timer)
                event_free(ss->timer);
        suspend_submit(ss->b);
        free(ss);
}

static void suspend_synced(json_object *result, void *ud)
{
        (void)result;
        suspend_go(ud);
}

static void suspend_sync_lost(const sp_error *e, void *ud)
{
        (void)e;
        suspend_go(ud);
}

static void suspend_sync_timeout(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        suspend_sync *ss = ud;
        sp_log_warn_kv(SP_KV("sandbox_id", ss->b->id), "its agent did not sync its filesystems within %d ms",
                       SUSPEND_SYNC_WAIT_MS);
        suspend_go(ss);
}

static int suspend_start(wk_node *n, const char *id, bool files_only, wk_node_done_fn done, void *ud, sp_error **err)
{
        wk_sandbox *sb = need(n, id, err);
        if (!sb)
                return -SP_E_NOT_FOUND;
        if (sb->state == WK_SB_SUSPENDED)
                return 0;
        if (sb->state != WK_SB_RUNNING && sb->state != WK_SB_PAUSED)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is %s", id, wk_sandbox_state_name(sb->state));
        box_job *b = box_job_new(sb, "suspend", suspend_run, suspend_done, done, ud);
        if (!b)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        b->files_only = files_only;
        sb->busy = true;
        suspend_sync *ss = calloc(1, sizeof(*ss));
        if (ss && sb->link && wk_agent_link_ready(sb->link) && sb->backend->ops->sync_before_suspend) {
                /* The agent syncs first: a VM's page cache dies with it. */
                ss->b = b;
                ss->timer = evtimer_new(n->base, suspend_sync_timeout, ss);
                struct timeval tv = {SUSPEND_SYNC_WAIT_MS / 1000, (SUSPEND_SYNC_WAIT_MS % 1000) * 1000};
                _cleanup_json_ json_object *req = json_object_new_object();
                json_object_object_add(req, "op", json_object_new_string("ping"));
                json_object_object_add(req, "sync", json_object_new_boolean(true));
                static const wk_agent_channel_ops sync_ops = {.on_exit = suspend_synced, .on_lost = suspend_sync_lost};
                if (ss->timer && evtimer_add(ss->timer, &tv) == 0 &&
                    wk_agent_open(sb->link, req, &sync_ops, ss, NULL) != 0)
                        return 1;
                if (ss->timer)
                        event_free(ss->timer);
                ss->timer = NULL;
        }
        if (ss) {
                ss->b = b;
                suspend_go(ss);
        } else {
                suspend_submit(b);
        }
        return 1;
}

int wk_node_sandbox_suspend(wk_node *n, const char *id, wk_node_done_fn done, void *ud, sp_error **err)
{
        return suspend_start(n, id, false, done, ud, err);
}

int wk_node_sandbox_stop(wk_node *n, const char *id, wk_node_done_fn done, void *ud, sp_error **err)
{
        return suspend_start(n, id, true, done, ud, err);
}

static void restore_run(wk_job *j)
{
        box_job *b = (box_job *)j;
        if (b->backend->ops->restore(b->box, &b->lost, &b->err) < 0) {
                sp_error_wrap(&b->err, "restore %s", b->id);
                return;
        }
        _cleanup_json_ json_object *o = NULL;
        if (box_connect_agent(b->backend, b->box, &b->agent_fd, &b->err) < 0 ||
            sp_json_parse(b->record, strlen(b->record), &o, &b->err) < 0) {
                sp_error_wrap(&b->err, "restore %s", b->id);
                return;
        }
        if (b->backend->ops->save)
                json_object_object_add(o, "box", b->backend->ops->save(b->box));
        /* A failed write leaves the record suspended: a restart starts it again from there. */
        _cleanup_error_ sp_error *e = NULL;
        if (write_record(b->state_dir, b->key, sp_json_str(o), &e) < 0)
                sp_log_warn_kv(SP_KV("sandbox_id", b->id), "its record: %s", e->message);
}

static void restore_done(wk_job *j)
{
        box_job *b = (box_job *)j;
        wk_sandbox *sb = b->sb;
        if (j->cancelled)
                sp_error_set(&b->err, SP_E_UNAVAILABLE, "restore %s: the worker is shutting down", b->id);
        if (b->err) {
                sp_close(b->agent_fd);
                box_job_end(b);
                return;
        }
        /* Set before the link is taken, which sends it. */
        sb->clock_stale = sb->suspended.memory;
        agent_adopt_or_retry(sb, b->agent_fd);
        sb->state = WK_SB_RUNNING;
        memset(&sb->suspended, 0, sizeof(sb->suspended));
        sb->restore_lost = b->lost;
        /* Running again: an export is out of date (its files change now). */
        if (sb->export_to[0]) {
                sb->export_to[0] = '\0';
                (void)wk__sandbox_persist(sb, NULL);
        }
        wk__artifacts_drop(sb->node, sb->key);
        free(sb->export_refused);
        sb->export_refused = NULL;
        _cleanup_error_ sp_error *ca = NULL;
        if (wk__secrets_ready(sb, &ca) < 0)
                sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "its secrets cannot be used: %s", ca->message);
        wk__egress_apply(sb, NULL, NULL);
        box_job_end(b);
}

int wk_node_sandbox_restore(wk_node *n, const char *id, wk_node_done_fn done, void *ud, sp_error **err)
{
        wk_sandbox *sb = need(n, id, err);
        if (!sb)
                return -SP_E_NOT_FOUND;
        if (sb->state == WK_SB_RUNNING)
                return 0;
        if (sb->state != WK_SB_SUSPENDED)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is %s", id, wk_sandbox_state_name(sb->state));
        if (wk__live_count(n) >= (size_t)n->cfg.slots)
                return sp_error_set(err, SP_E_LIMIT, "node %s is full", n->node_id);
        box_job *b = box_job_new(sb, "restore", restore_run, restore_done, done, ud);
        if (!b)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        /* Its copy in the artifact store is stale from now on (its files and memory change). */
        wk__store_drop(sb);
        /* The record it will have once running (its box added by the thread). */
        sb->state = WK_SB_RUNNING;
        wk_box *box = sb->box;
        sb->box = NULL;
        _cleanup_json_ json_object *rec = wk__sandbox_record(sb);
        sb->box = box;
        sb->state = WK_SB_SUSPENDED;
        json_object_object_del(rec, "suspend");
        b->record = strdup(sp_json_str(rec));
        if (!b->record) {
                free(b);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        sb->busy = true;
        wk_jobs_submit(n->jobs, &b->job);
        return 1;
}

void wk_node_sandbox_count_ports(wk_node *n, const char *id, int64_t connections, int64_t bytes_in, int64_t bytes_out)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        if (!sb)
                return;
        sb->port_connections += connections;
        /* A connection is counted when it opens (1) and its bytes when it ends (0). */
        if (connections > 0)
                sb->ports_open++;
        else if (sb->ports_open > 0)
                sb->ports_open--;
        sb->port_bytes_in += bytes_in;
        sb->port_bytes_out += bytes_out;
}

int wk_node_sandbox_stats(wk_node *n, const char *id, json_object **ret, sp_error **err)
{
        wk_sandbox *sb = need(n, id, err);
        if (!sb)
                return -SP_E_NOT_FOUND;
        wk_box_stats st = {0};
        if (sb->box && sb->state != WK_SB_SUSPENDED && sb->backend->ops->stats(sb->box, &st, err) < 0)
                return sp_error_wrap(err, "stats of %s", id);
        pr_wk_sandbox_stats a = {.cpu_ns = (int64_t)st.cpu_ns,
                                 .memory_bytes = (int64_t)st.memory_bytes,
                                 .memory_peak_bytes = (int64_t)st.memory_peak_bytes,
                                 .pids = (int64_t)st.pids,
                                 .oom_kills = (int64_t)st.oom_kills,
                                 .port_connections = sb->port_connections,
                                 .port_bytes_in = sb->port_bytes_in,
                                 .port_bytes_out = sb->port_bytes_out};
        *ret = pr_msg_encode(&pr_wk_sandbox_stats_schema, &a);
        return 0;
}

json_object *wk_node_sandboxes_json(wk_node *n)
{
        json_object *arr = json_object_new_array();
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                if (!sb->warm)
                        json_object_array_add(arr, wk_sandbox_to_json(sb));
        _cleanup_json_ json_object *list = arr;
        return pr_msg_encode(&pr_wk_sandbox_list_schema, &(pr_wk_sandbox_list){.sandboxes = list});
}

wk_agent_link *wk_node_agent(wk_node *n, const char *sandbox_id, sp_error **err)
{
        wk_sandbox *sb = need(n, sandbox_id, err);
        if (!sb)
                return NULL;
        if (sb->state != WK_SB_RUNNING) {
                sp_error_set(err, SP_E_CONFLICT, "sandbox %s is %s", sandbox_id, wk_sandbox_state_name(sb->state));
                return NULL;
        }
        if (!wk_agent_link_ready(sb->link)) {
                sp_error_set(err, SP_E_UNAVAILABLE, "the agent of sandbox %s is not connected", sandbox_id);
                return NULL;
        }
        return sb->link;
}

/* --- loading after a restart --- */

int wk__sandbox_load_one(wk_node *n, const char *key, sp_error **err)
{
        char path[PATH_MAX];
        wk__path(path, sizeof(path), "%s/sandboxes/%s/sandbox.json", n->state_dir, key);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        _cleanup_json_ json_object *o = NULL;
        if (sp_file_read(path, SANDBOX_JSON_MAX, &text, err) < 0 || sp_json_parse(text.data, text.len, &o, err) < 0)
                return -SP_E_IO;
        const char *id = NULL, *tpl = NULL, *state = NULL, *host = NULL, *failure = NULL, *tenant = NULL,
                   *export_to = NULL;
        int64_t slot = 0;
        bool warm = false;
        json_object *box = NULL, *env = NULL, *res = NULL, *susp = NULL, *egress = NULL, *secrets = NULL;
        bool stored = false;
        int64_t stored_bytes = 0;
        const char *backend_name = NULL;
        wk_sandbox *sb = wk__sandbox_make(n, "", err);
        if (!sb)
                return -SP_E_LIMIT;
        if (sp_json_get_string(o, "id", true, WK_NAME_MAX, &id, err) < 0 ||
            sp_json_get_string(o, "template", true, WK_NAME_MAX, &tpl, err) < 0 ||
            sp_json_get_string(o, "state", true, 16, &state, err) < 0 ||
            sp_json_get_string(o, "hostname", true, 63, &host, err) < 0 ||
            sp_json_get_string(o, "error", false, 4096, &failure, err) < 0 ||
            sp_json_get_int(o, "slot", true, 0, UINT32_MAX, &slot, err) < 0 ||
            sp_json_get_bool(o, "warm", false, &warm, err) < 0 ||
            sp_json_get_int(o, "created_us", false, 0, INT64_MAX, &sb->created_us, err) < 0 ||
            sp_json_get_int(o, "memory_bytes", false, 0, INT64_MAX, &sb->memory_bytes, err) < 0 ||
            sp_json_get_int(o, "disk_bytes", false, 0, INT64_MAX, &sb->disk_bytes, err) < 0 ||
            sp_json_get_object(o, "resources", false, &res, err) < 0 ||
            sp_json_get_object(o, "env", false, &env, err) < 0 ||
            sp_json_get_object(o, "suspend", false, &susp, err) < 0 ||
            sp_json_get_string(o, "tenant_id", false, WK_NAME_MAX, &tenant, err) < 0 ||
            sp_json_get_object(o, "egress", false, &egress, err) < 0 ||
            sp_json_get_array(o, "secrets", false, GW_SECRETS_MAX, &secrets, err) < 0 ||
            sp_json_get_int(o, "egress_generation", false, 0, INT64_MAX, &sb->egress_generation, err) < 0 ||
            sp_json_get_string(o, "export_to", false, WK_NAME_MAX, &export_to, err) < 0 ||
            sp_json_get_bool(o, "stored", false, &stored, err) < 0 ||
            sp_json_get_int(o, "stored_bytes", false, 0, INT64_MAX, &stored_bytes, err) < 0 ||
            sp_json_get_object(o, "box", false, &box, err) < 0 ||
            sp_json_get_string(o, "backend", false, 16, &backend_name, err) < 0) {
                free(sb);
                return -SP_E_INVALID;
        }
        /* A record without one is from a worker of one backend: its default then. */
        wk_backend *named = backend_name ? wk__backend_named(n, backend_name) : n->backend;
        bool known_backend = named != NULL;
        sb->backend = named ? named : n->backend;
        snprintf(sb->key, sizeof(sb->key), "%s", key);
        snprintf(sb->id, sizeof(sb->id), "%s", id);
        snprintf(sb->template_name, sizeof(sb->template_name), "%s", tpl);
        snprintf(sb->hostname, sizeof(sb->hostname), "%s", host);
        sb->slot = (uint32_t)slot;
        sb->warm = warm;
        if (res) {
                sp_json_get_int(res, "cpu_millis", false, 0, INT64_MAX, &sb->cpu_millis, NULL);
                sp_json_get_int(res, "pids", false, 0, INT64_MAX, &sb->pids_max, NULL);
        }
        if (susp) {
                sp_json_get_bool(susp, "memory", false, &sb->suspended.memory, NULL);
                sp_json_get_bool(susp, "filesystem", false, &sb->suspended.filesystem, NULL);
                const char *why = NULL;
                if (sp_json_get_string(susp, "why", false, sizeof(sb->suspended.why) - 1, &why, NULL) == 0 && why)
                        snprintf(sb->suspended.why, sizeof(sb->suspended.why), "%s", why);
        }
        sb->env = env ? json_object_get(env) : NULL;
        sb->egress = egress ? json_object_get(egress) : NULL;
        sb->secrets = secrets ? json_object_get(secrets) : NULL;
        snprintf(sb->tenant_id, sizeof(sb->tenant_id), "%s", tenant ? tenant : "");
        snprintf(sb->export_to, sizeof(sb->export_to), "%s", export_to ? export_to : "");
        /* Stored as long as it stays suspended here, and this worker still has its store. */
        sb->stored = stored && stored_bytes > 0 && n->store_dir && strcmp(state, "suspended") == 0;
        sb->stored_bytes = sb->stored ? stored_bytes : 0;
        if (failure)
                sb->failure = strdup(failure);
        size_t cap = wk__slot_capacity(n);
        if (sb->slot < cap)
                n->slots_used[sb->slot] = 1;
        sb->state = strcmp(state, "running") == 0     ? WK_SB_RUNNING
                    : strcmp(state, "paused") == 0    ? WK_SB_PAUSED
                    : strcmp(state, "suspended") == 0 ? WK_SB_SUSPENDED
                                                      : WK_SB_FAILED;
        if (strcmp(state, "creating") == 0) {
                /* A create the daemon did not finish: undo it. */
                release(sb);
                wk__sandbox_free(sb);
                return 0;
        }
        sb->next = n->sandboxes;
        n->sandboxes = sb;

        wk_box_spec spec;
        char rootfs[PATH_MAX], runtime[PATH_MAX];
        spec_of(sb, &spec, rootfs, runtime, sizeof(rootfs));
        if (box) {
                _cleanup_error_ sp_error *e = NULL;
                if (!known_backend) {
                        sb->box = NULL;
                        if (sb->state != WK_SB_FAILED)
                                set_failed(sb, "its backend %s is not one this worker runs now", backend_name);
                } else if (sb->backend->ops->adopt(sb->backend, &spec, box, &sb->box, &e) < 0) {
                        sb->box = NULL;
                        if (sb->state == WK_SB_RUNNING || sb->state == WK_SB_PAUSED)
                                set_failed(sb, "lost while the worker was down: %s", e->message);
                }
        }
        wk__sessions_load(sb);
        if (sb->box && (sb->state == WK_SB_RUNNING || sb->state == WK_SB_PAUSED)) {
                if (!sb->backend->ops->alive(sb->box)) {
                        /* The init died while we were away (a host restart): start it again from its filesystem. */
                        _cleanup_error_ sp_error *e = NULL;
                        agent_log_unwatch(sb);
                        sb->backend->ops->forget(sb->box);
                        sb->box = NULL;
                        wk__sessions_lose(sb, "the sandbox was restarted after its worker was down");
                        if (sp_mkdir_p(runtime, 0700, &e) < 0 ||
                            sb->backend->ops->create(sb->backend, &spec, &sb->box, &e) < 0) {
                                set_failed(sb, "restart after the worker was down: %s", e->message);
                                return 0;
                        }
                        sb->state = WK_SB_RUNNING;
                        (void)wk__sandbox_persist(sb, NULL);
                }
                _cleanup_error_ sp_error *e = NULL;
                if (sb->backend->ops->agent_connect)
                        reconnect_later(sb, 0, 0); /* on a job thread (reconnect_cb) */
                else if (wk__sandbox_connect_agent(sb, &e) < 0)
                        reconnect_later(sb, 0, 200000);
                wk__egress_apply(sb, NULL, NULL);
        }
        sp_log_info_kv(SP_KV("sandbox_id", sb->id), "re-adopted sandbox (%s)", wk_sandbox_state_name(sb->state));
        return 0;
}

int wk__sandbox_load_all(wk_node *n, sp_error **err)
{
        char dir[PATH_MAX];
        wk__path(dir, sizeof(dir), "%s/sandboxes", n->state_dir);
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                _cleanup_error_ sp_error *e = NULL;
                if (wk__sandbox_load_one(n, de->d_name, &e) < 0)
                        sp_log_error_kv(SP_KV("sandbox_id", de->d_name), "cannot load sandbox state: %s",
                                        e ? e->message : "?");
        }
        return 0;
}
