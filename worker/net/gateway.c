/* SPDX-License-Identifier: Apache-2.0 */
/* The worker's side of the egress gateway (see gateway.h). */
#include "net/gateway.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define RETRY_MS 250
#define LINE_MAX_BYTES (1 << 20)
/* A gateway that keeps dying is started at most this often. */
#define RESTART_MIN_MS 1000

typedef struct entry {
        char addr[16];
        char *sandbox_id, *tenant_id;
        json_object *profile;
        json_object *secrets; /* {"secrets":[…],"ca_cert":…,"ca_key":…} or NULL */
        int missing; /* secrets without a value, as the gateway last said; -1: not said yet */
} entry;

typedef struct waiter {
        int64_t seq;
        char addr[16]; /* of a set */
        wk_gw_done done;
        void *ud;
        struct waiter *next;
} waiter;

struct wk_gw {
        struct event_base *base;
        char *program, *socket_path, *pid_path;
        char **args;
        void (*on_audit)(json_object *rec, void *ud);
        void *ud;
        struct bufferevent *bev; /* NULL: not connected */
        struct event *timer;
        struct event *kick; /* the first connection */
        pid_t child;
        int64_t last_start_us;
        unsigned starts;
        int64_t seq;
        entry *v;
        size_t n, cap;
        waiter *waiters;
};

static struct entry *find(wk_gw *g, const char *addr);

static void send_obj(wk_gw *g, json_object *o)
{
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        struct evbuffer *out = bufferevent_get_output(g->bev);
        evbuffer_add(out, s, strlen(s));
        evbuffer_add(out, "\n", 1);
}

static int64_t send_op(wk_gw *g, const char *op, const entry *e)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        int64_t seq = ++g->seq;
        json_object_object_add(o, "op", json_object_new_string(op));
        json_object_object_add(o, "seq", json_object_new_int64(seq));
        if (e) {
                json_object_object_add(o, "address", json_object_new_string(e->addr));
                if (strcmp(op, "set") == 0) {
                        json_object_object_add(o, "sandbox_id", json_object_new_string(e->sandbox_id));
                        if (e->tenant_id && *e->tenant_id)
                                json_object_object_add(o, "tenant_id", json_object_new_string(e->tenant_id));
                        json_object_object_add(o, "profile", json_object_get(e->profile));
                        if (e->secrets) {
                                json_object_object_foreach (e->secrets, k, v)
                                        json_object_object_add(o, k, json_object_get(v));
                        }
                }
        }
        send_obj(g, o);
        return seq;
}

static void fail_waiters(wk_gw *g, const char *why)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_UNAVAILABLE, "the egress gateway %s", why);
        while (g->waiters) {
                waiter *w = g->waiters;
                g->waiters = w->next;
                if (w->done)
                        w->done(e, w->ud);
                free(w);
        }
}

static void disconnect(wk_gw *g, const char *why)
{
        if (g->bev) {
                bufferevent_free(g->bev);
                g->bev = NULL;
                sp_log_warn("egress gateway: %s", why);
        }
        fail_waiters(g, why);
}

static void on_line(wk_gw *g, const char *line, size_t len)
{
        _cleanup_json_ json_object *o = NULL;
        if (sp_json_parse(line, len, &o, NULL) < 0 || !json_object_is_type(o, json_type_object))
                return;
        json_object *op = NULL, *seq = NULL, *msg = NULL;
        json_object_object_get_ex(o, "op", &op);
        const char *ops = op ? json_object_get_string(op) : "";
        if (strcmp(ops, "audit") == 0) {
                if (g->on_audit)
                        g->on_audit(o, g->ud);
                return;
        }
        if (strcmp(ops, "ok") != 0 && strcmp(ops, "error") != 0)
                return;
        int64_t s = json_object_object_get_ex(o, "seq", &seq) ? json_object_get_int64(seq) : -1;
        _cleanup_error_ sp_error *e = NULL;
        if (strcmp(ops, "error") == 0) {
                json_object_object_get_ex(o, "error", &msg);
                sp_error_set(&e, SP_E_INVALID, "the egress gateway refused: %s",
                             msg ? json_object_get_string(msg) : "");
                sp_log_warn("%s", e->message);
        }
        json_object *missing = NULL;
        json_object_object_get_ex(o, "secrets_missing", &missing);
        for (waiter **pw = &g->waiters; *pw; pw = &(*pw)->next)
                if ((*pw)->seq == s) {
                        waiter *w = *pw;
                        *pw = w->next;
                        entry *x = w->addr[0] ? find(g, w->addr) : NULL;
                        if (x && missing)
                                x->missing = (int)json_object_get_int64(missing);
                        if (w->done)
                                w->done(e, w->ud);
                        free(w);
                        return;
                }
}

static void on_read(struct bufferevent *bev, void *ud)
{
        wk_gw *g = ud;
        struct evbuffer *in = bufferevent_get_input(bev);
        for (;;) {
                size_t len = 0;
                char *line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF);
                if (!line) {
                        if (evbuffer_get_length(in) > LINE_MAX_BYTES)
                                disconnect(g, "sent a line too long");
                        return;
                }
                on_line(g, line, len);
                free(line);
                if (!g->bev)
                        return;
        }
}

static void on_event(struct bufferevent *bev, short what, void *ud)
{
        (void)bev;
        wk_gw *g = ud;
        if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
                disconnect(g, "went away; starting or reconnecting");
}

/* ---- starting it ---- */

static void spawn(wk_gw *g)
{
        if (!g->program)
                return;
        int64_t now = sp_now_mono_us();
        if (g->last_start_us && now - g->last_start_us < RESTART_MIN_MS * 1000)
                return;
        g->last_start_us = now;
        size_t n = 0;
        while (g->args && g->args[n])
                n++;
        char **argv = calloc(n + 4, sizeof(char *));
        char sock[600];
        if (!argv)
                return;
        snprintf(sock, sizeof(sock), "--control-socket=%s", g->socket_path);
        argv[0] = g->program;
        argv[1] = sock;
        for (size_t i = 0; i < n; i++)
                argv[2 + i] = g->args[i];
        pid_t pid = fork();
        if (pid == 0) {
                /* Not a sandbox: none of the worker's descriptors but 0-2; and not
                 * tied to the worker, which may restart under it. */
                for (int fd = 3; fd < 65536; fd++)
                        close(fd);
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                execv(argv[0], argv);
                fprintf(stderr, "space-worker: cannot run %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        free(argv);
        if (pid < 0) {
                sp_log_warn("egress gateway: cannot start %s: %s", g->program, strerror(errno));
                return;
        }
        g->child = pid;
        g->starts++;
        sp_log_info("egress gateway started (pid %d)", (int)pid);
        if (g->pid_path) {
                char s[32];
                int l = snprintf(s, sizeof(s), "%d\n", (int)pid);
                _cleanup_error_ sp_error *e = NULL;
                if (sp_file_write_atomic(g->pid_path, s, (size_t)l, 0600, &e) < 0)
                        sp_log_warn("egress gateway: %s", e->message);
        }
}

static void try_connect(wk_gw *g)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g->socket_path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                close(fd);
                /* Nobody there: start one, unless ours is still coming up. */
                if (g->child <= 0 || waitpid(g->child, NULL, WNOHANG) == g->child || kill(g->child, 0) < 0) {
                        g->child = 0;
                        spawn(g);
                }
                return;
        }
        evutil_make_socket_nonblocking(fd);
        g->bev = bufferevent_socket_new(g->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!g->bev) {
                close(fd);
                return;
        }
        bufferevent_setcb(g->bev, on_read, NULL, on_event, g);
        bufferevent_enable(g->bev, EV_READ | EV_WRITE);
        /* Everything, again: what it had and is no longer here is forgotten. */
        send_op(g, "sync_begin", NULL);
        for (size_t i = 0; i < g->n; i++) {
                int64_t seq = send_op(g, "set", &g->v[i]);
                /* Its answer says which secrets' values the gateway still has. */
                waiter *w = calloc(1, sizeof(*w));
                if (w) {
                        *w = (waiter){.seq = seq, .next = g->waiters};
                        snprintf(w->addr, sizeof(w->addr), "%s", g->v[i].addr);
                        g->waiters = w;
                }
        }
        send_op(g, "sync_end", NULL);
        sp_log_info("egress gateway connected: %zu sandboxes sent", g->n);
}

static void on_timer(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_gw *g = ud;
        /* Reap our gateway if it died (only it: the jails reap their own). */
        if (g->child > 0 && waitpid(g->child, NULL, WNOHANG) == g->child) {
                sp_log_warn("egress gateway (pid %d) exited", (int)g->child);
                g->child = 0;
        }
        if (!g->bev)
                try_connect(g);
}

static void first_connect(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_gw *g = ud;
        if (!g->bev)
                try_connect(g);
}

int wk_gw_new(struct event_base *base, const wk_gw_config *cfg, wk_gw **ret, sp_error **err)
{
        wk_gw *g = calloc(1, sizeof(*g));
        if (!g)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        g->base = base;
        g->program = cfg->program ? strdup(cfg->program) : NULL;
        g->socket_path = strdup(cfg->socket_path);
        g->pid_path = cfg->pid_path ? strdup(cfg->pid_path) : NULL;
        g->on_audit = cfg->on_audit;
        g->ud = cfg->ud;
        size_t n = 0;
        while (cfg->args && cfg->args[n])
                n++;
        g->args = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; g->args && i < n; i++)
                g->args[i] = strdup(cfg->args[i]);
        g->timer = event_new(base, -1, EV_PERSIST, on_timer, g);
        struct timeval tv = {.tv_sec = 0, .tv_usec = RETRY_MS * 1000};
        if (!g->socket_path || !g->args || !g->timer || event_add(g->timer, &tv) < 0) {
                wk_gw_free(g);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        /* Adopt a gateway left running by a previous worker, if any. */
        if (g->pid_path) {
                _cleanup_buf_ sp_buf s = SP_BUF_INIT;
                int pid = sp_file_read(g->pid_path, 64, &s, NULL) == 0 && s.data ? atoi(s.data) : 0;
                /* Not ours to reap: only watched through its socket. */
                g->child = pid > 1 && kill(pid, 0) == 0 ? -1 : 0;
        }
        /* Not now: once the loop runs, after the worker has read its
         * sandboxes — a resync before that would tell the gateway there are
         * none, and it would forget them (and their secrets' values). */
        struct timeval now = {0};
        if (!(g->kick = evtimer_new(base, first_connect, g)) || evtimer_add(g->kick, &now) < 0) {
                wk_gw_free(g);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        *ret = g;
        return 0;
}

void wk_gw_free(wk_gw *g)
{
        if (!g)
                return;
        disconnect(g, "the worker is stopping");
        if (g->timer)
                event_free(g->timer);
        if (g->kick)
                event_free(g->kick);
        for (size_t i = 0; i < g->n; i++) {
                free(g->v[i].sandbox_id);
                free(g->v[i].tenant_id);
                json_object_put(g->v[i].profile);
                json_object_put(g->v[i].secrets);
        }
        free(g->v);
        for (size_t i = 0; g->args && g->args[i]; i++)
                free(g->args[i]);
        free(g->args);
        free(g->program);
        free(g->socket_path);
        free(g->pid_path);
        free(g);
}

static struct entry *find(wk_gw *g, const char *addr)
{
        for (size_t i = 0; i < g->n; i++)
                if (strcmp(g->v[i].addr, addr) == 0)
                        return &g->v[i];
        return NULL;
}

void wk_gw_set(wk_gw *g, const char *addr, const char *sandbox_id, const char *tenant_id, json_object *profile,
               json_object *secrets, wk_gw_done done, void *ud)
{
        _cleanup_error_ sp_error *e = NULL;
        entry *x = find(g, addr);
        if (!x) {
                if (g->n == g->cap) {
                        size_t cap = g->cap ? g->cap * 2 : 64;
                        entry *v = realloc(g->v, cap * sizeof(*v));
                        if (!v) {
                                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                                if (done)
                                        done(e, ud);
                                return;
                        }
                        g->v = v;
                        g->cap = cap;
                }
                x = &g->v[g->n++];
                memset(x, 0, sizeof(*x));
                snprintf(x->addr, sizeof(x->addr), "%s", addr);
        }
        free(x->sandbox_id);
        free(x->tenant_id);
        json_object_put(x->profile);
        json_object_put(x->secrets);
        x->secrets = NULL;
        if (secrets)
                json_object_deep_copy(secrets, &x->secrets, NULL);
        x->missing = -1;
        x->sandbox_id = strdup(sandbox_id);
        x->tenant_id = strdup(tenant_id ? tenant_id : "");
        _cleanup_json_ json_object *copy = NULL;
        const char *text = json_object_to_json_string_ext(profile, JSON_C_TO_STRING_PLAIN);
        sp_json_parse(text, strlen(text), &copy, NULL);
        x->profile = TAKE_PTR(copy);
        if (!g->bev) {
                sp_error_set(&e, SP_E_UNAVAILABLE, "the egress gateway is not running yet");
                if (done)
                        done(e, ud);
                return;
        }
        int64_t seq = send_op(g, "set", x);
        waiter *w = calloc(1, sizeof(*w));
        if (!w) {
                if (done) {
                        sp_error_set(&e, SP_E_LIMIT, "out of memory");
                        done(e, ud);
                }
                return;
        }
        *w = (waiter){.seq = seq, .done = done, .ud = ud, .next = g->waiters};
        snprintf(w->addr, sizeof(w->addr), "%s", addr);
        g->waiters = w;
}

void wk_gw_del(wk_gw *g, const char *addr)
{
        entry *x = find(g, addr);
        if (!x)
                return;
        if (g->bev)
                send_op(g, "del", x);
        free(x->sandbox_id);
        free(x->tenant_id);
        json_object_put(x->profile);
        json_object_put(x->secrets);
        *x = g->v[--g->n];
}

int wk_gw_secrets_missing(wk_gw *g, const char *addr)
{
        entry *x = find(g, addr);
        return x ? x->missing : -1;
}

bool wk_gw_connected(const wk_gw *g)
{
        return g->bev != NULL;
}

unsigned wk_gw_starts(const wk_gw *g)
{
        return g->starts;
}

int wk_gw_kill(const char *pid_path, sp_error **err)
{
        _cleanup_buf_ sp_buf s = SP_BUF_INIT;
        if (sp_file_read(pid_path, 64, &s, NULL) < 0 || !s.data)
                return 0;
        int pid = atoi(s.data);
        if (pid > 1 && kill(pid, SIGKILL) < 0 && errno != ESRCH)
                return sp_error_set_errno(err, SP_E_IO, errno, "stop the egress gateway (pid %d)", pid);
        unlink(pid_path);
        return 0;
}
