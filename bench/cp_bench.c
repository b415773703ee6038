/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-bench-cp: create latency and throughput at the public API, on a
 * whole cluster this program starts with the test harness (a throw-away
 * PostgreSQL, one space-controlplane and 1-3 space-worker daemons with the
 * jail backend, all on loopback in a temporary directory) and removes again.
 *
 *   space-bench-cp [--workers N] [--samples N] [--concurrency N] [--creates N] [--quick] [--json]
 *
 * Figures (milliseconds, p50/p90/p99):
 *   - create → running, sequential: POST /v1/sandboxes (202 and an
 *     operation), then GET /v1/operations/{id}?wait=30 until it succeeded;
 *     each sandbox deleted before the next create;
 *   - the same latency with --concurrency clients (processes) creating at
 *     once, --creates in all, each client deleting (without waiting) the
 *     sandbox it made once it runs, so that the deletes load the cluster too
 *     and the number of sandboxes stays bounded;
 *   - the sustained rate: creates per second from the first POST to the
 *     last sandbox running;
 *   - the floor, in the same run: GET /v1/sandboxes/{id} of a running
 *     sandbox (an authenticated API round trip with one database read).
 * Every sandbox it makes is deleted. A failed create or delete is an error
 * (exit 1); speed is never judged. Needs root and PostgreSQL: exits 77
 * (skipped) without them. It runs inside a Check runner (no fork, silent) so
 * that the harness's asserting helpers report a failure with its message and
 * the cluster is torn down whatever happens.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "stats.h"

#define BODY "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"

static struct {
        int workers, samples, concurrency, creates;
        bool json;
} opt = {2, 30, 4, 0, false};

static sp_test_space S;
static char key[256];

/* One HTTP call with the tenant's key; 0 and the parsed body (may be NULL), or
 * -1 with a message on stderr when it fails or answers another status. */
static int call(const char *method, const char *path, const char *body, int want, json_object **ret)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        const char *headers[] = {auth, NULL};
        sp_test_http_response r;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_test_http(S.api, method, path, headers, body, 60000, &r, &e) < 0) {
                fprintf(stderr, "space-bench-cp: %s %s: %s\n", method, path, e->message);
                return -1;
        }
        int rc = 0;
        if (r.status != want) {
                fprintf(stderr, "space-bench-cp: %s %s: status %d: %s\n", method, path, r.status, r.body);
                rc = -1;
        } else if (ret) {
                *ret = sp_test_http_json(&r);
        }
        sp_test_http_response_free(&r);
        return rc;
}

/* Long-polls an operation until it has finished; 0 if it succeeded. */
static int wait_op(const char *op)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s?wait=30", op);
        for (int i = 0; i < 10; i++) {
                _cleanup_json_ json_object *o = NULL;
                if (call("GET", path, NULL, 200, &o) < 0)
                        return -1;
                const char *st = sp_test_jstr(o, "state");
                if (st && strcmp(st, "succeeded") == 0)
                        return 0;
                if (st && strcmp(st, "failed") == 0) {
                        fprintf(stderr, "space-bench-cp: operation %s failed: %s\n", op, json_object_to_json_string(o));
                        return -1;
                }
        }
        fprintf(stderr, "space-bench-cp: operation %s did not finish in 300 s\n", op);
        return -1;
}

/* Milliseconds of one GET /v1/sandboxes/{id}. */
static int get_timed(const char *id, double *ms)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        int64_t t0 = sp_now_mono_us();
        if (call("GET", path, NULL, 200, NULL) < 0)
                return -1;
        *ms = (double)(sp_now_mono_us() - t0) / 1000.0;
        return 0;
}

/* Creates a sandbox and waits until it runs: its id and the milliseconds
 * from the POST to the operation's success. */
static int create_timed(char id[static 64], double *ms)
{
        int64_t t0 = sp_now_mono_us();
        _cleanup_json_ json_object *r = NULL;
        if (call("POST", "/v1/sandboxes", BODY, 202, &r) < 0 || !sp_test_jstr(r, "operation.id") ||
            !sp_test_jstr(r, "sandbox.id"))
                return -1;
        snprintf(id, 64, "%s", sp_test_jstr(r, "sandbox.id"));
        if (wait_op(sp_test_jstr(r, "operation.id")) < 0)
                return -1;
        *ms = (double)(sp_now_mono_us() - t0) / 1000.0;
        return 0;
}

static int delete_async(const char *id, char op[static 64])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *r = NULL;
        if (call("DELETE", path, NULL, 202, &r) < 0 || !sp_test_jstr(r, "operation.id"))
                return -1;
        snprintf(op, 64, "%s", sp_test_jstr(r, "operation.id"));
        return 0;
}

static int delete_wait(const char *id)
{
        char op[64];
        return delete_async(id, op) < 0 ? -1 : wait_op(op);
}

/* What a client process reports for each create. */
typedef struct result {
        double ms;
        int ok;
        char id[64];
        char delete_op[64]; /* "" if the delete was not accepted */
} result;

/* Client k of the concurrent phase: creates k, k+C, k+2C ... after the
 * start signal, deletes each once it runs, and reports each on out. */
static void client(int k, int start_fd, int out_fd)
{
        char c;
        if (read(start_fd, &c, 1) < 0)
                _exit(1);
        for (int i = k; i < opt.creates; i += opt.concurrency) {
                result r = {0};
                r.ok = create_timed(r.id, &r.ms) == 0;
                if (r.id[0])
                        (void)delete_async(r.id, r.delete_op);
                if (write(out_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
                        _exit(1);
        }
        _exit(0);
}

/* Runs the concurrent phase: latencies into lat[], the wall time in *wall_s;
 * returns how many creates or deletes failed, once every delete is done. */
static int concurrent(double *lat, double *wall_s)
{
        int start[2], out[2];
        ck_assert_msg(pipe(start) == 0 && pipe(out) == 0, "pipe: %m");
        pid_t kids[64];
        for (int k = 0; k < opt.concurrency; k++) {
                kids[k] = fork();
                ck_assert_msg(kids[k] >= 0, "fork: %m");
                if (kids[k] == 0) {
                        close(start[1]);
                        close(out[0]);
                        client(k, start[0], out[1]);
                }
        }
        close(start[0]);
        close(out[1]);
        result *rs = calloc((size_t)opt.creates, sizeof(*rs));
        ck_assert_ptr_nonnull(rs);
        int64_t t0 = sp_now_mono_us(), t1 = t0;
        close(start[1]); /* go */
        int n = 0, failed = 0;
        result r;
        ssize_t got;
        while (n < opt.creates && (got = read(out[0], &r, sizeof(r))) != 0) {
                if (got < 0 && errno == EINTR)
                        continue;
                ck_assert_msg(got == (ssize_t)sizeof(r), "a client's report was cut short");
                t1 = sp_now_mono_us();
                rs[n++] = r;
        }
        close(out[0]);
        for (int k = 0; k < opt.concurrency; k++) {
                int st = 0;
                waitpid(kids[k], &st, 0);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        failed++;
        }
        *wall_s = (double)(t1 - t0) / 1e6;
        int nlat = 0;
        for (int i = 0; i < n; i++) {
                if (rs[i].ok)
                        lat[nlat++] = rs[i].ms;
                else
                        failed++;
                if (rs[i].id[0] && (!rs[i].delete_op[0] || wait_op(rs[i].delete_op) < 0))
                        failed++;
        }
        failed += opt.creates - n;
        free(rs);
        return failed;
}

static void print_row(const char *name, bn_stats s, double floor_p50)
{
        printf("| %-40s | %5d | %8.2f | %8.2f | %8.2f | %9.1f |\n", name, s.n, s.p50, s.p90, s.p99,
               floor_p50 > 0 ? s.p50 / floor_p50 : 0.0);
}

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = opt.workers};
        sp_test_space_up(&S, &o);
        sp_test_new_tenant(&S, "bench", key);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

START_TEST(bench)
{
        double *seq = calloc((size_t)opt.samples, sizeof(double));
        double *conc = calloc((size_t)opt.creates, sizeof(double));
        double *floor_ms = calloc((size_t)opt.samples, sizeof(double));
        ck_assert(seq && conc && floor_ms);
        /* Warm-up (first connections, caches), then one create at a time. */
        for (int i = -2; i < opt.samples; i++) {
                char id[64];
                double ms = 0;
                ck_assert_msg(create_timed(id, &ms) == 0, "a sequential create failed");
                if (i >= 0)
                        seq[i] = ms;
                ck_assert_msg(get_timed(id, &ms) == 0, "a get failed");
                if (i >= 0)
                        floor_ms[i] = ms;
                ck_assert_msg(delete_wait(id) == 0, "a delete failed");
        }
        double wall_s = 0;
        int failed = concurrent(conc, &wall_s);
        ck_assert_msg(failed == 0, "%d of the concurrent creates or their deletes failed", failed);
        bn_stats ss = bn_stats_of(seq, opt.samples), sc = bn_stats_of(conc, opt.creates),
                 sf = bn_stats_of(floor_ms, opt.samples);
        double rate = wall_s > 0 ? opt.creates / wall_s : 0;
        if (opt.json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "workers", json_object_new_int(opt.workers));
                json_object_object_add(o, "samples", json_object_new_int(opt.samples));
                json_object_object_add(o, "concurrency", json_object_new_int(opt.concurrency));
                json_object_object_add(o, "creates", json_object_new_int(opt.creates));
                bn_stats_json(o, "create_sequential", ss);
                bn_stats_json(o, "create_concurrent", sc);
                bn_stats_json(o, "floor_get", sf);
                json_object_object_add(o, "creates_per_s", json_object_new_double(rate));
                json_object_object_add(o, "concurrent_wall_s", json_object_new_double(wall_s));
                printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
        } else {
                char name[64];
                printf("| figure (ms)                              |     n |      p50 |      p90 |      p99 | "
                       "p50/floor |\n");
                printf("|------------------------------------------|------:|---------:|---------:|---------:|----------"
                       ":|\n");
                print_row("API create to running, one at a time", ss, sf.p50);
                snprintf(name, sizeof(name), "API create to running, %d clients", opt.concurrency);
                print_row(name, sc, sf.p50);
                print_row("floor: GET /v1/sandboxes/{id}", sf, sf.p50);
                printf("\nsustained: %.1f creates/s (%d creates by %d clients in %.2f s, %d workers; each sandbox "
                       "deleted once it ran)\n",
                       rate, opt.creates, opt.concurrency, wall_s, opt.workers);
        }
        free(seq);
        free(conc);
        free(floor_ms);
}
END_TEST

static int arg_int(const char *name, const char *v, int lo, int hi)
{
        char *end = NULL;
        errno = 0;
        long n = v ? strtol(v, &end, 10) : 0;
        if (!v || errno || *end || n < lo || n > hi) {
                fprintf(stderr, "space-bench-cp: %s must be an integer from %d to %d\n", name, lo, hi);
                exit(2);
        }
        return (int)n;
}

/* SPACE_BINARY_DIR (where bin/ is) for the harness: the build tree this
 * program was built in, unless set. */
static void find_binaries(void)
{
        if (getenv("SPACE_BINARY_DIR"))
                return;
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
                return;
        self[n] = '\0';
        for (int up = 0; up < 2; up++) {
                char *slash = strrchr(self, '/');
                if (slash)
                        *slash = '\0';
        }
        setenv("SPACE_BINARY_DIR", self, 0);
}

int main(int argc, char **argv)
{
        bool quick = false;
        int samples = -1;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (strcmp(a, "--json") == 0)
                        opt.json = true;
                else if (strcmp(a, "--quick") == 0)
                        quick = true;
                else if (strcmp(a, "--workers") == 0 && ++i)
                        opt.workers = arg_int(a, v, 1, 3);
                else if (strcmp(a, "--samples") == 0 && ++i)
                        samples = arg_int(a, v, 1, 10000);
                else if (strcmp(a, "--concurrency") == 0 && ++i)
                        opt.concurrency = arg_int(a, v, 1, 64);
                else if (strcmp(a, "--creates") == 0 && ++i)
                        opt.creates = arg_int(a, v, 1, 10000);
                else {
                        fprintf(stderr, "usage: space-bench-cp [--workers 1-3] [--samples N] [--concurrency N] "
                                        "[--creates N] [--quick] [--json]\n");
                        return 2;
                }
        }
        opt.samples = samples > 0 ? samples : quick ? 10 : 30;
        if (!opt.creates)
                opt.creates = quick ? 40 : 200;
        if (opt.concurrency > opt.creates)
                opt.concurrency = opt.creates;
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        find_binaries();

        Suite *s = suite_create("cp_bench");
        TCase *tc = tcase_create("bench");
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, bench);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_SILENT);
        int failed = srunner_ntests_failed(sr);
        if (failed) {
                TestResult **tr = srunner_failures(sr);
                for (int i = 0; i < failed; i++)
                        fprintf(stderr, "space-bench-cp: %s:%d: %s\n", tr_lfile(tr[i]), tr_lno(tr[i]), tr_msg(tr[i]));
                free(tr);
        }
        srunner_free(sr);
        return failed ? 1 : 0;
}
