/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Control-plane high availability against the real daemons (issue #4):
 *
 * - two replicas on one database both serve the API, exactly one leads (the
 *   space_controlplane_leader gauge), and when the leader is SIGKILLed the
 *   other takes over and finishes what was pending and what comes after;
 *   the killed one, restarted, stands by;
 * - PostgreSQL killed and started again while a client creates and lists:
 *   fast 503s while it is down (never a hang), /readyz not ready and /healthz
 *   up, and afterwards, without restarting anything, every acknowledged
 *   create runs, no refused one left a trace, and the controllers run again;
 * - two replicas starting at the same moment on a fresh database apply the
 *   schema, the CA and the first admin key exactly once.
 *
 * The workers reach the control plane's RPC through a small TCP balancer (as
 * they would through a load balancer in production), so their heartbeats
 * survive the loss of one replica. Needs root (workers), btrfs and PostgreSQL.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "store/db.h"

#define SANDBOX_BODY "{\"template\":\"base\",\"resources\":{\"memory_mb\":32,\"cpu_millis\":10}}"
/* Correctness bounds ("no hang", "takes over at all"), not speed targets. */
#define CALL_TIMEOUT_MS 10000
#define TAKEOVER_BOUND_S 20

static sp_test_space S;

/* ---- a TCP balancer in front of the replicas' RPC ports ---- */

static pid_t lb_pid;
static int lb_port;
static char lb_arg[64];
static const char *lb_worker_args[] = {lb_arg, NULL};

static int write_all(int fd, const char *p, size_t n)
{
        while (n) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -1;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Copies bytes both ways until either side closes. */
static void lb_relay(int a, int b)
{
        struct pollfd p[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
        char buf[16384];
        for (;;) {
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return;
                }
                for (int i = 0; i < 2; i++) {
                        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        ssize_t n = read(p[i].fd, buf, sizeof(buf));
                        if (n <= 0 || write_all(p[1 - i].fd, buf, (size_t)n) < 0)
                                return;
                }
        }
}

/* One accepted connection: to the first replica that accepts, like a balancer
 * whose health check skips a dead backend. */
static void lb_serve(int client)
{
        for (int i = 0; i < SP_TEST_SPACE_MAX_CP; i++) {
                int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)S.rpc_port[i])};
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof(a)) == 0) {
                        lb_relay(client, s);
                        return;
                }
                if (s >= 0)
                        close(s);
        }
}

/* Starts the balancer (its own process group, killed with the runner). */
static void lb_start(void)
{
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        ck_assert_msg(l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 64) == 0 &&
                              getsockname(l, (struct sockaddr *)&a, &len) == 0,
                      "balancer socket: %s", strerror(errno));
        lb_port = ntohs(a.sin_port);
        snprintf(lb_arg, sizeof(lb_arg), "--control-plane=127.0.0.1:%d", lb_port);
        pid_t parent = getpid();
        lb_pid = fork();
        ck_assert_int_ge(lb_pid, 0);
        if (lb_pid == 0) {
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent || setpgid(0, 0) < 0)
                        _exit(1);
                signal(SIGCHLD, SIG_IGN); /* relays are reaped by the kernel */
                pid_t me = getpid();
                for (;;) {
                        int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
                        if (c < 0)
                                continue;
                        pid_t r = fork();
                        if (r == 0) {
                                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != me)
                                        _exit(1);
                                close(l);
                                lb_serve(c);
                                _exit(0);
                        }
                        close(c);
                }
        }
        setpgid(lb_pid, lb_pid); /* also here: no race with the kill below */
        close(l);
}

static void lb_stop(void)
{
        if (lb_pid <= 0)
                return;
        kill(-lb_pid, SIGKILL);
        kill(lb_pid, SIGKILL);
        waitpid(lb_pid, NULL, 0);
        lb_pid = 0;
}

/* ---- helpers ---- */

/* The API helpers on replica i. */
static json_object *api_on(int i, const char *key, const char *method, const char *path, int want_status,
                           const char *body)
{
        S.api = S.api_port[i];
        return sp_test_api(&S, key, method, path, want_status, body, NULL);
}

static json_object *wait_op_on(int i, const char *key, const char *op_id)
{
        S.api = S.api_port[i];
        return sp_test_wait_op(&S, key, op_id, true);
}

/* space_controlplane_leader of replica i: 0 or 1; -1 if it does not answer or
 * lacks the gauge. */
static int leader_gauge(int i)
{
        static const char name[] = "\nspace_controlplane_leader ";
        sp_test_http_response r;
        sp_error *e = NULL;
        if (sp_test_http(S.api_port[i], "GET", "/metrics", NULL, NULL, CALL_TIMEOUT_MS, &r, &e) < 0) {
                sp_error_free(e);
                return -1;
        }
        const char *m = r.status == 200 ? strstr(r.body, name) : NULL;
        int v = m ? atoi(m + strlen(name)) : -1;
        sp_test_http_response_free(&r);
        return v;
}

/* Waits (bounded) until exactly one of the replicas in `live` (a bit mask)
 * leads, then checks over a few samples that it stays exactly one and the
 * same. Returns the leader. */
static int one_leader(unsigned live)
{
        int64_t deadline = sp_now_mono_us() + TAKEOVER_BOUND_S * SP_USEC_PER_SEC;
        int leader = -1;
        for (int stable = 0; stable < 5;) {
                int n = 0, who = -1;
                char seen[64] = "";
                for (int i = 0; i < SP_TEST_SPACE_MAX_CP; i++) {
                        if (!(live & (1u << i)))
                                continue;
                        int g = leader_gauge(i);
                        ck_assert_msg(g == 0 || g == 1, "replica %d: no space_controlplane_leader gauge (%d)", i, g);
                        snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), " cp%d=%d", i, g);
                        n += g;
                        if (g)
                                who = i;
                }
                ck_assert_msg(n <= 1, "two leaders at once:%s", seen);
                if (n == 1 && (leader < 0 || who == leader)) {
                        leader = who;
                        stable++;
                } else {
                        ck_assert_msg(leader < 0, "leadership moved from cp%d with nothing killed:%s", leader, seen);
                        ck_assert_msg(sp_now_mono_us() < deadline, "no leader within %d s:%s", TAKEOVER_BOUND_S, seen);
                }
                usleep(100 * 1000);
        }
        return leader;
}

static const char *op_state(int i, const char *key, const char *op_id)
{
        static char state[32];
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s", op_id);
        _cleanup_json_ json_object *op = api_on(i, key, "GET", path, 200, NULL);
        snprintf(state, sizeof(state), "%s", sp_test_jstr(op, "state"));
        return state;
}

/* Asserts that the operation ends succeeded and the sandbox in state. */
static void finishes(int i, const char *key, const char *op_id, const char *state)
{
        _cleanup_json_ json_object *op = wait_op_on(i, key, op_id);
        const char *got = sp_test_jstr(op, "result.state");
        ck_assert_msg(got && strcmp(got, state) == 0, "operation %s: %s", op_id, json_object_to_json_string(op));
}

/* ---- two replicas, one leader, hand-over ---- */

static void replicas_up(void)
{
        sp_error *e = NULL;
        sp_test_space_opts o = {.workers = 0};
        sp_test_space_up(&S, &o);
        lb_start();
        S.opts.worker_args = lb_worker_args;
        sp_test_ok(sp_test_space_start_cp(&S, 1, &e), &e);
        sp_test_ok(sp_test_space_start_worker(&S, 0, &e), &e);
        sp_test_space_wait_workers(&S, 1, 60000);
}

static void replicas_down(void)
{
        sp_test_space_down(&S);
        lb_stop();
}

START_TEST(two_replicas_one_leader_and_hand_over)
{
        /* Replica 0 started first and leads; replica 1 stands by. */
        ck_assert_int_eq(one_leader(3), 0);
        char key[256];
        S.api = S.api_port[0];
        sp_test_new_tenant(&S, "ha", key);

        /* Both serve: create on one, long-poll, read and act on the other. */
        _cleanup_json_ json_object *c = api_on(0, key, "POST", "/v1/sandboxes", 202, SANDBOX_BODY);
        const char *id = sp_test_jstr(c, "sandbox.id");
        finishes(1, key, sp_test_jstr(c, "operation.id"), "running");
        char path[160];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *got = api_on(1, key, "GET", path, 200, NULL);
        ck_assert_str_eq(sp_test_jstr(got, "state"), "running");
        _cleanup_json_ json_object *list = api_on(1, key, "GET", "/v1/sandboxes", 200, NULL);
        ck_assert_int_eq(json_object_array_length(sp_test_jarr(list, "sandboxes")), 1);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/pause", id);
        _cleanup_json_ json_object *p = api_on(1, key, "POST", path, 202, NULL);
        finishes(0, key, sp_test_jstr(p, "operation.id"), "paused");

        /* Freeze the leader: what the standby now acknowledges is still
         * pending when the leader dies. */
        ck_assert_int_eq(kill(-S.cp[0].pgid, SIGSTOP), 0);
        enum { BEFORE = 3, AFTER = 2 };
        char ops[BEFORE + AFTER][64];
        for (int i = 0; i < BEFORE; i++) {
                _cleanup_json_ json_object *r = api_on(1, key, "POST", "/v1/sandboxes", 202, SANDBOX_BODY);
                snprintf(ops[i], sizeof(ops[i]), "%s", sp_test_jstr(r, "operation.id"));
        }
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/resume", id);
        _cleanup_json_ json_object *res = api_on(1, key, "POST", path, 202, NULL);
        const char *resume_op = sp_test_jstr(res, "operation.id");
        for (int i = 0; i < BEFORE; i++)
                ck_assert_str_eq(op_state(1, key, ops[i]), "pending");
        ck_assert_str_eq(op_state(1, key, resume_op), "pending");

        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&S.cp[0], &e), &e);
        /* The standby takes over (its lock attempt succeeds once the dead
         * leader's session is gone), and finishes everything. */
        ck_assert_int_eq(one_leader(2), 1);
        for (int i = BEFORE; i < BEFORE + AFTER; i++) {
                _cleanup_json_ json_object *r = api_on(1, key, "POST", "/v1/sandboxes", 202, SANDBOX_BODY);
                snprintf(ops[i], sizeof(ops[i]), "%s", sp_test_jstr(r, "operation.id"));
        }
        for (int i = 0; i < BEFORE + AFTER; i++)
                finishes(1, key, ops[i], "running");
        finishes(1, key, resume_op, "running");

        /* The killed replica, restarted, stands by and serves. */
        sp_test_ok(sp_test_space_start_cp(&S, 0, &e), &e);
        ck_assert_int_eq(one_leader(3), 1);
        _cleanup_json_ json_object *r = api_on(0, key, "POST", "/v1/sandboxes", 202, SANDBOX_BODY);
        finishes(0, key, sp_test_jstr(r, "operation.id"), "running");
        _cleanup_json_ json_object *all = api_on(0, key, "GET", "/v1/sandboxes?limit=100", 200, NULL);
        json_object *arr = sp_test_jarr(all, "sandboxes");
        ck_assert_int_eq(json_object_array_length(arr), 1 + BEFORE + AFTER + 1);
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(arr, i), "state"), "running");
}
END_TEST

/* ---- PostgreSQL restarted under load ---- */

static void pg_cluster_up(void)
{
        sp_error *e = NULL;
        sp_test_space_opts o = {.workers = 1};
        sp_test_space_up(&S, &o);
        /* A second replica that nobody calls while the database is away. Its
         * controllers try for the lock only once a minute, so that it is the
         * leader, replica 0, that must take its lock again. */
        static const char *const slow_tick[] = {"--tick-ms=60000", NULL};
        S.opts.cp_args = slow_tick;
        sp_test_ok(sp_test_space_start_cp(&S, 1, &e), &e);
        S.opts.cp_args = NULL;
}

static void pg_cluster_down(void)
{
        sp_test_space_down(&S);
}

/* One call of the client loop, as it reports it through a pipe (one write,
 * shorter than PIPE_BUF: atomic). */
typedef struct call_rec {
        char what; /* 'c' create, 'l' list */
        int status; /* the HTTP status; 0 when there was no answer within CALL_TIMEOUT_MS */
        char code[32]; /* error.code of an error answer */
        char sandbox[64], op[64]; /* of an acknowledged create */
} call_rec;

#define CLIENT_MAX_CALLS 400
#define CLIENT_MAX_ACKED 12
#define CLIENT_MAX_S 120

/* The client: alternately creates a sandbox and lists them, every call with
 * CALL_TIMEOUT_MS, until it has seen the database go away (a 503) and come
 * back (three acknowledged creates after the last 503) — or its bounds. */
static void client_loop(const char *key, int out)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        const char *headers[] = {auth, NULL};
        int64_t end = sp_now_mono_us() + CLIENT_MAX_S * SP_USEC_PER_SEC;
        int acked = 0, since_outage = 0;
        bool outage = false;
        for (int i = 0; i < CLIENT_MAX_CALLS && sp_now_mono_us() < end; i++) {
                call_rec rec = {.what = i % 2 == 0 && acked < CLIENT_MAX_ACKED ? 'c' : 'l'};
                sp_test_http_response r;
                sp_error *e = NULL;
                int got = rec.what == 'c' ? sp_test_http(S.api_port[0], "POST", "/v1/sandboxes", headers, SANDBOX_BODY,
                                                         CALL_TIMEOUT_MS, &r, &e)
                                          : sp_test_http(S.api_port[0], "GET", "/v1/sandboxes?limit=100", headers, NULL,
                                                         CALL_TIMEOUT_MS, &r, &e);
                if (got < 0) {
                        sp_error_free(e);
                } else {
                        rec.status = r.status;
                        json_object *o = sp_test_http_json(&r);
                        const char *code = sp_test_jstr(o, "error.code");
                        snprintf(rec.code, sizeof(rec.code), "%s", code ? code : "");
                        if (rec.what == 'c' && r.status == 202) {
                                const char *sbx = sp_test_jstr(o, "sandbox.id"), *op = sp_test_jstr(o, "operation.id");
                                snprintf(rec.sandbox, sizeof(rec.sandbox), "%s", sbx ? sbx : "");
                                snprintf(rec.op, sizeof(rec.op), "%s", op ? op : "");
                                acked++;
                                since_outage++;
                        }
                        if (o)
                                json_object_put(o);
                        sp_test_http_response_free(&r);
                }
                if (write_all(out, (const char *)&rec, sizeof(rec)) < 0)
                        return;
                if (rec.status == 503) {
                        outage = true;
                        since_outage = 0;
                }
                if (outage && since_outage >= 3)
                        return;
                usleep(50 * 1000);
        }
}

typedef struct tally {
        call_rec recs[CLIENT_MAX_CALLS];
        int n;
        int acked, create_503, list_503;
        bool done;
} tally;

/* Reads the client's records until pred holds or it finished, at most
 * timeout_s. */
static void read_until(tally *t, int fd, bool (*pred)(const tally *), int timeout_s, const char *what)
{
        int64_t deadline = sp_now_mono_us() + timeout_s * SP_USEC_PER_SEC;
        while (!t->done && !(pred && pred(t))) {
                int64_t left_ms = (deadline - sp_now_mono_us()) / 1000;
                ck_assert_msg(left_ms > 0, "client: %s did not happen within %d s (%d calls)", what, timeout_s, t->n);
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int r = poll(&p, 1, (int)left_ms);
                if (r < 0 && errno == EINTR)
                        continue;
                ck_assert_int_ge(r, 0);
                if (r == 0)
                        continue;
                call_rec rec;
                ssize_t got = read(fd, &rec, sizeof(rec));
                if (got == 0) {
                        t->done = true;
                        break;
                }
                ck_assert_int_eq(got, (ssize_t)sizeof(rec));
                ck_assert_int_lt(t->n, CLIENT_MAX_CALLS);
                t->recs[t->n++] = rec;
                t->acked += rec.what == 'c' && rec.status == 202;
                t->create_503 += rec.what == 'c' && rec.status == 503;
                t->list_503 += rec.what == 'l' && rec.status == 503;
        }
}

static bool some_acked(const tally *t)
{
        return t->acked >= 3;
}

static bool refused_while_down(const tally *t)
{
        return t->create_503 >= 2 && t->list_503 >= 1;
}

/* Asserts a 503 `unavailable` answer on port within the client timeout. */
static void unavailable(int port, const char *key, const char *method, const char *path, const char *body)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key ? key : "");
        const char *headers[] = {key ? auth : NULL, NULL};
        sp_test_http_response r;
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(port, method, path, headers, body, CALL_TIMEOUT_MS, &r, &e), &e);
        _cleanup_json_ json_object *o = sp_test_http_json(&r);
        ck_assert_msg(r.status == 503 && sp_test_jstr(o, "error.code") &&
                              strcmp(sp_test_jstr(o, "error.code"), "unavailable") == 0 &&
                              sp_test_jstr(o, "error.message"),
                      "%s %s while the database is down: %d %s", method, path, r.status, r.body);
        sp_test_http_response_free(&r);
}

START_TEST(postgres_restarted_under_load)
{
        ck_assert_int_eq(one_leader(3), 0);
        char key[256];
        S.api = S.api_port[0];
        sp_test_new_tenant(&S, "pgdown", key);
        int fds[2];
        ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
        pid_t parent = getpid();
        pid_t kid = fork();
        ck_assert_int_ge(kid, 0);
        if (kid == 0) {
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                        _exit(1);
                close(fds[0]);
                client_loop(key, fds[1]);
                _exit(0);
        }
        close(fds[1]);
        static tally t;
        memset(&t, 0, sizeof(t));
        read_until(&t, fds[0], some_acked, 60, "three acknowledged creates");

        sp_error *e = NULL;
        sp_test_ok(sp_test_pg_kill(&S.pg, &e), &e);
        /* Down: fast 503s, not ready, but alive (replica 1 only says it is
         * alive: /healthz does not touch the database). */
        for (int i = 0; i < SP_TEST_SPACE_MAX_CP; i++) {
                S.api = S.api_port[i];
                json_object_put(sp_test_api(&S, NULL, "GET", "/healthz", 200, NULL, NULL));
        }
        unavailable(S.api_port[0], NULL, "GET", "/readyz", NULL);
        unavailable(S.api_port[0], key, "GET", "/v1/sandboxes", NULL);
        unavailable(S.api_port[0], key, "POST", "/v1/sandboxes", SANDBOX_BODY);
        ck_assert_int_eq(leader_gauge(0), 0);
        read_until(&t, fds[0], refused_while_down, 60, "503s while the database is down");

        sp_test_ok(sp_test_pg_restart(&S.pg, &e), &e);
        /* Back, without restarting the control plane: the replica that sat
         * idle through the outage answers its very first request. */
        S.api = S.api_port[1];
        json_object_put(sp_test_api(&S, key, "GET", "/v1/sandboxes?limit=100", 200, NULL, NULL));
        json_object_put(sp_test_api(&S, NULL, "GET", "/readyz", 200, NULL, NULL));
        read_until(&t, fds[0], NULL, CLIENT_MAX_S + 30, "the client's end");
        close(fds[0]);
        int st = 0;
        ck_assert_int_eq(waitpid(kid, &st, 0), kid);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);

        /* Every call answered in time; every refusal was a clean 503. */
        int last_503 = -1;
        for (int i = 0; i < t.n; i++) {
                const call_rec *c = &t.recs[i];
                ck_assert_msg(c->status != 0, "call %d (%c) got no answer within %d ms", i, c->what, CALL_TIMEOUT_MS);
                if (c->status == 503) {
                        ck_assert_str_eq(c->code, "unavailable");
                        last_503 = i;
                } else {
                        ck_assert_int_eq(c->status, c->what == 'c' ? 202 : 200);
                        ck_assert_msg(c->what == 'l' || (c->sandbox[0] && c->op[0]), "call %d: a 202 without ids", i);
                }
        }
        int acked_after = 0;
        for (int i = last_503 + 1; i < t.n; i++)
                acked_after += t.recs[i].what == 'c' && t.recs[i].status == 202;
        ck_assert_msg(acked_after >= 3, "only %d creates acknowledged after the outage", acked_after);

        /* The controllers run again: the leader took its lock again, and a
         * create made now runs. */
        ck_assert_int_eq(one_leader(3), 0);
        _cleanup_json_ json_object *r = api_on(0, key, "POST", "/v1/sandboxes", 202, SANDBOX_BODY);
        finishes(0, key, sp_test_jstr(r, "operation.id"), "running");
        /* Nothing acknowledged is lost, nothing refused is left behind: the
         * tenant holds exactly the acknowledged sandboxes, all running. */
        for (int i = 0; i < t.n; i++)
                if (t.recs[i].what == 'c' && t.recs[i].status == 202)
                        finishes(0, key, t.recs[i].op, "running");
        _cleanup_json_ json_object *all = api_on(0, key, "GET", "/v1/sandboxes?limit=100", 200, NULL);
        json_object *arr = sp_test_jarr(all, "sandboxes");
        ck_assert_int_eq(json_object_array_length(arr), t.acked + 1);
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                json_object *sb = json_object_array_get_idx(arr, i);
                const char *id = sp_test_jstr(sb, "id");
                ck_assert_ptr_nonnull(id);
                bool known = strcmp(id, sp_test_jstr(r, "sandbox.id")) == 0;
                for (int j = 0; j < t.n && !known; j++)
                        known = t.recs[j].status == 202 && strcmp(t.recs[j].sandbox, id) == 0;
                ck_assert_msg(known, "sandbox %s was never acknowledged", id);
                ck_assert_str_eq(sp_test_jstr(sb, "state"), "running");
        }
}
END_TEST

/* ---- two replicas starting together on a fresh database ---- */

static sp_test_pg pg;
static char *boot_dir; /* the rounds' logs, CA files and admin keys */

static void pg_up(void)
{
        sp_error *e = NULL;
        boot_dir = sp_test_tmpdir("ha-boot");
        sp_test_ok(sp_test_pg_start(&pg, &e), &e);
}

static void pg_down(void)
{
        sp_test_pg_stop(&pg);
        sp_test_tmpdir_remove(boot_dir);
        free(boot_dir);
}

static char *slurp(const char *path)
{
        FILE *f = fopen(path, "r");
        ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
        char *s = calloc(1, 1 << 20);
        ck_assert_ptr_nonnull(s);
        size_t n = fread(s, 1, (1 << 20) - 1, f);
        s[n] = '\0';
        fclose(f);
        return s;
}

static long count(PGconn *c, const char *sql)
{
        _cleanup_pgresult_ PGresult *r = PQexec(c, sql);
        ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
        return atol(PQgetvalue(r, 0, 0));
}

START_TEST(replicas_starting_together_bootstrap_once)
{
        int nmigrations = 0;
        while (cp_migrations[nmigrations].version)
                nmigrations++;
        for (int round = 0; round < 3; round++) {
                sp_error *e = NULL;
                _cleanup_free_ char *conninfo = NULL;
                sp_test_ok(sp_test_pg_create_database(&pg, &conninfo, &e), &e);
                char dir[600];
                snprintf(dir, sizeof(dir), "%s/r%d", boot_dir, round);
                ck_assert_int_eq(mkdir(dir, 0700), 0);
                sp_test_proc cp[2] = {0};
                int port[2];
                char bin[1024], db[1200], listen[2][80], rpc[2][80], keyf[700], caf[2][700], logp[2][700];
                snprintf(bin, sizeof(bin), "%s/bin/space-controlplane", sp_test_binary_dir());
                snprintf(db, sizeof(db), "--database=%s", conninfo);
                snprintf(keyf, sizeof(keyf), "--admin-key-file=%s/admin.key", dir);
                for (int i = 0; i < 2; i++) {
                        port[i] = sp_test_free_port(&e);
                        sp_test_ok(port[i], &e);
                        int rport = sp_test_free_port(&e);
                        sp_test_ok(rport, &e);
                        snprintf(listen[i], sizeof(listen[i]), "--listen=127.0.0.1:%d", port[i]);
                        snprintf(rpc[i], sizeof(rpc[i]), "--rpc-listen=127.0.0.1:%d", rport);
                        snprintf(caf[i], sizeof(caf[i]), "--ca-out=%s/ca%d.pem", dir, i);
                        snprintf(logp[i], sizeof(logp[i]), "%s/controlplane%d.log", dir, i);
                }
                /* Both at once. */
                for (int i = 0; i < 2; i++) {
                        const char *argv[] = {bin, db, listen[i], rpc[i], keyf, caf[i], "--log-format=text", NULL};
                        sp_test_proc_opts o = {.log_path = logp[i]};
                        sp_test_ok(sp_test_proc_start(&cp[i], "controlplane", argv, &o, &e), &e);
                }
                for (int i = 0; i < 2; i++)
                        sp_test_ok(sp_test_proc_wait_http(&cp[i], "127.0.0.1", port[i], "/healthz", 30000, &e), &e);

                /* One schema, one CA, one admin key, which both replicas accept. */
                PGconn *c = PQconnectdb(conninfo);
                ck_assert_msg(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
                ck_assert_int_eq(count(c, "SELECT count(*) FROM schema_migrations"), nmigrations);
                ck_assert_int_eq(count(c, "SELECT count(*) FROM cluster_ca"), 1);
                ck_assert_int_eq(count(c, "SELECT count(*) FROM api_keys WHERE admin"), 1);
                PQfinish(c);
                char path[800];
                snprintf(path, sizeof(path), "%s/admin.key", dir);
                _cleanup_free_ char *admin = slurp(path);
                admin[strcspn(admin, "\n")] = '\0';
                _cleanup_free_ char *ca0 = NULL, *ca1 = NULL;
                snprintf(path, sizeof(path), "%s/ca0.pem", dir);
                ca0 = slurp(path);
                snprintf(path, sizeof(path), "%s/ca1.pem", dir);
                ca1 = slurp(path);
                ck_assert_str_eq(ca0, ca1);
                int applied = 0;
                for (int i = 0; i < 2; i++) {
                        char auth[300];
                        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", admin);
                        const char *headers[] = {auth, NULL};
                        sp_test_http_response r;
                        sp_test_ok(sp_test_http(port[i], "GET", "/v1/workers", headers, NULL, CALL_TIMEOUT_MS, &r, &e),
                                   &e);
                        ck_assert_msg(r.status == 200, "replica %d refuses the admin key: %d %s", i, r.status, r.body);
                        sp_test_http_response_free(&r);
                        sp_test_proc_stop(&cp[i], 10000, NULL);
                        _cleanup_free_ char *log = slurp(logp[i]);
                        applied += strstr(log, "database: applied") != NULL;
                        sp_test_proc_free(&cp[i]);
                }
                ck_assert_int_eq(applied, 1);
        }
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_ha");
        TCase *tc = tcase_create("replicas");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, replicas_up, replicas_down);
        tcase_add_test(tc, two_replicas_one_leader_and_hand_over);
        suite_add_tcase(s, tc);
        tc = tcase_create("postgres");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, pg_cluster_up, pg_cluster_down);
        tcase_add_test(tc, postgres_restarted_under_load);
        suite_add_tcase(s, tc);
        tc = tcase_create("bootstrap");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, pg_up, pg_down);
        tcase_add_test(tc, replicas_starting_together_bootstrap_once);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
