/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One level of sustained load (load.h). The clients report over one pipe in
 * records of a fixed size, each written at once (at most PIPE_BUF, so never
 * interleaved): ready, a sandbox made (before its create is waited for, so
 * that a client killed at the hard deadline leaves nothing unknown behind),
 * and an operation done. The parent gathers them with a deadline, and after
 * the level deletes what the clients made and did not delete.
 */
#include "load.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/time.h"
#include "stats.h"

/* How long the clients may take to connect and warm up, and the least time
 * operations may run on after the time bound before their clients are killed. */
#define READY_TIMEOUT_S 60
#define GRACE_MIN_S 30

enum { REC_READY, REC_CREATED, REC_DONE };

typedef struct record {
        int type;
        int index; /* the operation's number in the level; -1 for an exec client's warm-up */
        int ok; /* REC_DONE: it succeeded */
        double ms; /* REC_DONE, ok: its latency */
        char id[BN_ID_MAX]; /* REC_CREATED: the sandbox */
        char delete_op[BN_ID_MAX]; /* REC_DONE of a create: its delete's operation, "" when none */
        char error[256]; /* REC_DONE, not ok: why */
} record;

_Static_assert(sizeof(record) <= PIPE_BUF, "a record is written at once");

/* A sandbox a create level made, and its delete's operation ("" when none). */
typedef struct made {
        char id[BN_ID_MAX];
        char delete_op[BN_ID_MAX];
} made;

static void send_record(int fd, const record *r)
{
        if (write(fd, r, sizeof(*r)) != (ssize_t)sizeof(*r))
                _exit(1);
}

/* Client k of clients: operations k, k + clients, … below cfg->ops, until
 * the time bound; each reported on fd (a child). */
static void client(bn_load_kind kind, const bn_load_config *cfg, int k, int clients, int start_fd, int fd)
        __attribute__((noreturn));
static void client(bn_load_kind kind, const bn_load_config *cfg, int k, int clients, int start_fd, int fd)
{
        bn_api a;
        if (bn_api_init(&a, cfg->api, cfg->key, NULL) < 0)
                _exit(1);
        if (kind == BN_LOAD_EXEC) {
                bn_session s;
                _cleanup_error_ sp_error *e = NULL;
                if (bn_api_run(&a, cfg->sandboxes[k], "[\"true\"]", &s, &e) < 0 || s.exit_code != 0) {
                        record w = {.type = REC_DONE, .index = -1};
                        snprintf(w.error, sizeof(w.error), "warm-up session: %s",
                                 e ? e->message : "`true` exited non-zero");
                        send_record(fd, &w);
                }
        }
        send_record(fd, &(record){.type = REC_READY});
        char c;
        if (read(start_fd, &c, 1) != 0)
                _exit(1); /* the parent closes it to start; anything else is not a start */
        int64_t stop = sp_now_mono_us() + (int64_t)cfg->seconds * 1000000;
        for (int i = k; i < cfg->ops && sp_now_mono_us() < stop; i += clients) {
                record d = {.type = REC_DONE, .index = i};
                _cleanup_error_ sp_error *e = NULL;
                int64_t t0 = sp_now_mono_us();
                if (kind == BN_LOAD_CREATE) {
                        record m = {.type = REC_CREATED, .index = i};
                        char op[BN_ID_MAX];
                        if (bn_api_create(&a, cfg->create_body, m.id, op, &e) == 0) {
                                send_record(fd, &m);
                                d.ok = bn_api_wait_op(&a, op, cfg->op_timeout_s, &e) == 0;
                                d.ms = bn_ms_since(t0);
                                /* A refused delete is left to the parent, which tries again. */
                                if (bn_api_delete(&a, m.id, d.delete_op, NULL) < 0)
                                        d.delete_op[0] = '\0';
                        }
                } else {
                        bn_session s;
                        d.ok = bn_api_run(&a, cfg->sandboxes[k], "[\"true\"]", &s, &e) == 0 && s.exit_code == 0;
                        d.ms = (double)(s.exit_seen - t0) / 1000.0;
                }
                if (!d.ok)
                        snprintf(d.error, sizeof(d.error), "%s", e ? e->message : "`true` exited non-zero");
                send_record(fd, &d);
        }
        bn_api_done(&a);
        _exit(0);
}

typedef struct level_state {
        bn_load_level *lv;
        made *made; /* by operation number (create levels), else NULL */
        int ops;
        int ready, done; /* clients ready; operations done (ok or not, warm-ups aside) */
        int64_t t0, last; /* the start; the last operation's end */
} level_state;

static void note_error(bn_load_level *lv, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note_error(bn_load_level *lv, const char *fmt, ...)
{
        if (lv->error[0])
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(lv->error, sizeof(lv->error), fmt, ap);
        va_end(ap);
}

static void take(level_state *st, const record *r)
{
        bool numbered = r->index >= 0 && r->index < st->ops;
        switch (r->type) {
        case REC_READY:
                st->ready++;
                break;
        case REC_CREATED:
                if (numbered && st->made)
                        memcpy(st->made[r->index].id, r->id, BN_ID_MAX);
                break;
        case REC_DONE:
                if (numbered) {
                        st->done++;
                        st->last = sp_now_mono_us();
                        if (st->made)
                                memcpy(st->made[r->index].delete_op, r->delete_op, BN_ID_MAX);
                }
                if (r->ok && numbered) {
                        st->lv->ms[st->lv->ok++] = r->ms;
                } else if (!r->ok) {
                        st->lv->failed++;
                        note_error(st->lv, "%.*s", (int)sizeof(r->error), r->error);
                }
                break;
        default:
                break;
        }
}

/* Takes records from fd until until_ready clients are ready (when > 0), the
 * end of the stream (every client has ended), or the deadline: 0, 1 or -1. */
static int gather(level_state *st, int fd, int64_t deadline, int until_ready)
{
        for (;;) {
                if (until_ready > 0 && st->ready >= until_ready)
                        return 0;
                int64_t left = deadline - sp_now_mono_us();
                if (left <= 0)
                        return -1;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int n = poll(&p, 1, left > 1000000 ? 1000 : (int)((left + 999) / 1000));
                if (n < 0 && errno != EINTR) {
                        note_error(st->lv, "poll: %s", strerror(errno));
                        return -1;
                }
                if (n <= 0)
                        continue;
                record r;
                ssize_t got = read(fd, &r, sizeof(r));
                if (got < 0 && errno == EINTR)
                        continue;
                if (got == 0)
                        return 1;
                if (got != (ssize_t)sizeof(r)) {
                        note_error(st->lv, "a client's report was cut short");
                        return 1;
                }
                take(st, &r);
        }
}

/* Deletes what a create level made and its clients did not delete, then
 * waits for every delete. */
static void delete_made(bn_api *a, level_state *st, int timeout_s)
{
        for (int i = 0; i < st->ops; i++) {
                made *m = &st->made[i];
                _cleanup_error_ sp_error *e = NULL;
                if (m->id[0] && !m->delete_op[0] && bn_api_delete(a, m->id, m->delete_op, &e) < 0) {
                        m->delete_op[0] = '\0';
                        note_error(st->lv, "deleting %s after the level: %s", m->id, e->message);
                }
        }
        for (int i = 0; i < st->ops; i++) {
                made *m = &st->made[i];
                _cleanup_error_ sp_error *e = NULL;
                if (m->delete_op[0] && bn_api_wait_op(a, m->delete_op, timeout_s, &e) < 0)
                        note_error(st->lv, "a delete after the level: %s", e->message);
        }
}

void bn_load_run(bn_api *a, bn_load_kind kind, const bn_load_config *cfg, int clients, bn_load_level *ret)
{
        *ret = (bn_load_level){.clients = clients};
        if (clients < 1 || clients > BN_LOAD_MAX_CLIENTS) {
                note_error(ret, "%d clients: from 1 to %d", clients, BN_LOAD_MAX_CLIENTS);
                return;
        }
        level_state st = {.lv = ret, .ops = cfg->ops};
        ret->ms = calloc((size_t)(cfg->ops > 0 ? cfg->ops : 1), sizeof(double));
        if (kind == BN_LOAD_CREATE)
                st.made = calloc((size_t)(cfg->ops > 0 ? cfg->ops : 1), sizeof(made));
        if (!ret->ms || (kind == BN_LOAD_CREATE && !st.made)) {
                note_error(ret, "out of memory");
                free(st.made);
                return;
        }
        int start[2] = {-1, -1}, res[2] = {-1, -1};
        if (pipe2(start, O_CLOEXEC) < 0 || pipe2(res, O_CLOEXEC) < 0) {
                note_error(ret, "pipe: %s", strerror(errno));
                for (int i = 0; i < 2; i++) {
                        sp_close(start[i]);
                        sp_close(res[i]);
                }
                free(st.made);
                return;
        }
        pid_t kids[BN_LOAD_MAX_CLIENTS];
        int forked = 0;
        for (; forked < clients; forked++) {
                kids[forked] = fork();
                if (kids[forked] < 0) {
                        note_error(ret, "fork: %s", strerror(errno));
                        break;
                }
                if (kids[forked] == 0) {
                        close(start[1]);
                        close(res[0]);
                        client(kind, cfg, forked, clients, start[0], res[1]);
                }
        }
        close(start[0]);
        close(res[1]);
        bool started = false, killed = false;
        if (forked == clients) {
                int r = gather(&st, res[0], sp_now_mono_us() + (int64_t)READY_TIMEOUT_S * 1000000, clients);
                if (r == 0) {
                        st.t0 = st.last = sp_now_mono_us();
                        close(start[1]); /* go */
                        start[1] = -1;
                        started = true;
                        int grace = cfg->seconds > GRACE_MIN_S ? cfg->seconds : GRACE_MIN_S;
                        int64_t hard = st.t0 + (int64_t)(cfg->seconds + grace) * 1000000;
                        if (gather(&st, res[0], hard, 0) < 0) {
                                ret->timed_out = true;
                                note_error(ret, "operations still running %d s after the %d s time bound", grace,
                                           cfg->seconds);
                        }
                } else {
                        note_error(ret,
                                   r < 0 ? "the clients were not all ready in %d s"
                                         : "the clients ended before they were ready (bound %d s)",
                                   READY_TIMEOUT_S);
                }
        }
        if (!started || ret->timed_out) {
                /* Killed before the start is closed, so that none of them begins. */
                for (int k = 0; k < forked; k++)
                        kill(kids[k], SIGKILL);
                killed = true;
        }
        start[1] = sp_close(start[1]);
        for (int k = 0; k < forked; k++) {
                int status = 0;
                while (waitpid(kids[k], &status, 0) < 0 && errno == EINTR)
                        ;
                if (!killed && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
                        note_error(ret, "a client ended with status 0x%x", (unsigned)status);
        }
        /* Every writer has ended: what is left in the pipe comes without waiting
         * (the sandboxes made by clients killed meanwhile, above all). */
        gather(&st, res[0], INT64_MAX, 0);
        close(res[0]);
        if (started) {
                ret->seconds = (double)(st.last - st.t0) / 1e6;
                ret->time_bound = st.done < cfg->ops && !ret->error[0];
        }
        if (st.made)
                delete_made(a, &st, cfg->op_timeout_s);
        free(st.made);
}

void bn_load_level_done(bn_load_level *lv)
{
        free(lv->ms);
        lv->ms = NULL;
}
