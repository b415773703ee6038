/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-hop creates (issue #18, docs/controlplane.md "Creates") through a real
 * cluster (PostgreSQL, space-controlplane, a space-worker running jail
 * sandboxes):
 *
 * - with a warm pool, the create's answer already says `running` and its
 *   operation `succeeded` after one attempt, and the sandbox runs a command;
 * - a replica started with --no-create-fast-path answers `pending` as before
 *   and the controller makes it;
 * - a worker that does not answer the call (SIGSTOPped) hands the create
 *   back to the controller: it ends running, once, and the worker holds
 *   exactly the sandboxes the database places there (no duplicate, no
 *   orphan);
 * - without a warm sandbox the controller's path is taken (metric
 *   `fallback`) and works;
 * - a replica killed after recording a one-hop create and before its
 *   worker answered: the lease runs out, the controller sends the create
 *   again, the worker's "already exists" counts as done, and the worker
 *   holds the sandbox once.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "pg.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define HANG_GUARD_MS 120000 /* only against a hang: no test asserts a duration */

static sp_test_space S;
static const char *cp_args[] = {"--worker-call-timeout-ms=3000", NULL};
static const char *cp_args_off[] = {"--worker-call-timeout-ms=3000", "--no-create-fast-path", NULL};

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

#define API(key, method, path, status, body) sp_test_api(&S, key, method, path, status, body, NULL)

static const char *path_of(const char *fmt, const char *a)
{
        static char p[4][512];
        static int i;
        i = (i + 1) % 4;
        snprintf(p[i], sizeof(p[i]), fmt, a);
        return p[i];
}

static int64_t jint(json_object *o, const char *path)
{
        const char *s = sp_test_jstr(o, path);
        ck_assert_msg(s, "no %s in %s", path, json_object_to_json_string(o));
        return strtoll(s, NULL, 10);
}

/* The counter space_controlplane_create_fast_total{result} on API port. */
static int64_t fast_metric(int port, const char *result)
{
        sp_test_http_response m;
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(port, "GET", "/metrics", NULL, NULL, 10000, &m, &e), &e);
        ck_assert_int_eq(m.status, 200);
        char needle[128];
        snprintf(needle, sizeof(needle), "space_controlplane_create_fast_total{result=\"%s\"} ", result);
        const char *at = strstr(m.body, needle);
        ck_assert_msg(at, "no %s in /metrics", needle);
        int64_t v = strtoll(at + strlen(needle), NULL, 10);
        sp_test_http_response_free(&m);
        return v;
}

/* Sets the base template's warm pool and waits until the worker's heartbeat
 * reports at least (want > 0) or exactly (want == 0) that many. */
static void warm_pool(int64_t want)
{
        char body[64];
        snprintf(body, sizeof(body), "{\"warm\":%lld}", (long long)want);
        _cleanup_json_ json_object *t = API(S.admin_key, "POST", "/v1/templates/base/warm", 200, body);
        const char *p[] = {sp_test_jstr(t, "id")};
        ck_assert_ptr_nonnull(p[0]);
        int64_t until = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;
        for (;;) {
                _cleanup_free_ char *v = sp_test_space_sql(
                        &S, "SELECT coalesce((observed->'warm'->>$1)::bigint, 0) FROM workers LIMIT 1", 1, p);
                int64_t have = strtoll(v, NULL, 10);
                if (want > 0 ? have >= want : have == 0)
                        return;
                ck_assert_msg(sp_now_mono_us() < until, "the warm pool never reached %lld (has %lld)", (long long)want,
                              (long long)have);
                usleep(100 * 1000);
        }
}

/* Runs `true` in the sandbox through the API and waits for its exit code. */
static void runs_a_command(const char *key, const char *sbx)
{
        _cleanup_json_ json_object *r = API(key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201,
                                            "{\"argv\":[\"sh\",\"-c\",\"exit 3\"]}");
        const char *id = sp_test_jstr(r, "session.id");
        ck_assert_ptr_nonnull(id);
        int64_t until = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;
        for (;;) {
                _cleanup_json_ json_object *s = API(key, "GET", path_of("/v1/sessions/%s", id), 200, NULL);
                const char *st = sp_test_jstr(s, "state");
                if (st && strcmp(st, "exited") == 0) {
                        ck_assert_int_eq(jint(s, "exit.code"), 3);
                        return;
                }
                ck_assert_msg(!st || strcmp(st, "failed") != 0, "%s", json_object_to_json_string(s));
                ck_assert_msg(sp_now_mono_us() < until, "the command never ended");
                usleep(50 * 1000);
        }
}

/* Waits until the worker's heartbeat lists exactly the sandboxes (not warm)
 * that the database places on it and has not deleted, sbx among them once. */
static void worker_holds_exactly_the_database(const char *sbx)
{
        const char *p[] = {sbx};
        int64_t until = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;
        for (;;) {
                _cleanup_free_ char *v = sp_test_space_sql(
                        &S,
                        "WITH w AS (SELECT id, observed FROM workers LIMIT 1), "
                        "on_worker AS (SELECT o->>'id' id FROM w, jsonb_array_elements(coalesce(w.observed->"
                        "'sandboxes', '[]'::jsonb)) o WHERE NOT coalesce((o->>'warm')::boolean, false)), "
                        "in_db AS (SELECT s.id FROM sandboxes s, w WHERE s.worker_id = w.id AND s.deleted_at IS NULL) "
                        "SELECT ((SELECT count(*) FROM on_worker WHERE id = $1) = 1 "
                        "AND NOT EXISTS (SELECT id FROM on_worker EXCEPT SELECT id FROM in_db) "
                        "AND NOT EXISTS (SELECT id FROM in_db EXCEPT SELECT id FROM on_worker))::text",
                        1, p);
                if (strcmp(v, "true") == 0)
                        return;
                ck_assert_msg(sp_now_mono_us() < until, "the worker's sandboxes never matched the database's");
                usleep(200 * 1000);
        }
}

START_TEST(a_warm_create_answers_running)
{
        char key[256];
        sp_test_new_tenant(&S, "warm", key);
        warm_pool(2);
        int64_t claimed = fast_metric(S.api, "claimed");
        _cleanup_json_ json_object *r = API(key, "POST", "/v1/sandboxes", 202, SANDBOX);
        ck_assert_str_eq(sp_test_jstr(r, "operation.state"), "succeeded");
        ck_assert_str_eq(sp_test_jstr(r, "sandbox.state"), "running");
        ck_assert_int_eq(jint(r, "operation.attempts"), 1);
        ck_assert_int_eq(fast_metric(S.api, "claimed"), claimed + 1);
        const char *sbx = sp_test_jstr(r, "sandbox.id");
        _cleanup_json_ json_object *op =
                API(key, "GET", path_of("/v1/operations/%s", sp_test_jstr(r, "operation.id")), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(op, "state"), "succeeded");
        runs_a_command(key, sbx);
        worker_holds_exactly_the_database(sbx);
        /* The controller never sent it again: still one attempt. */
        _cleanup_json_ json_object *again =
                API(key, "GET", path_of("/v1/operations/%s", sp_test_jstr(r, "operation.id")), 200, NULL);
        ck_assert_int_eq(jint(again, "attempts"), 1);
}
END_TEST

START_TEST(turned_off_the_controller_creates_it)
{
        char key[256];
        sp_test_new_tenant(&S, "off", key);
        warm_pool(1);
        /* A second replica with the path off, talked to alone. */
        sp_error *err = NULL;
        S.opts.cp_args = cp_args_off;
        sp_test_ok(sp_test_space_start_cp(&S, 1, &err), &err);
        S.api = S.api_port[1];
        _cleanup_json_ json_object *r = API(key, "POST", "/v1/sandboxes", 202, SANDBOX);
        ck_assert_str_eq(sp_test_jstr(r, "operation.state"), "pending");
        ck_assert_str_eq(sp_test_jstr(r, "sandbox.state"), "creating");
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(r, "operation.id"), true));
        ck_assert_int_eq(fast_metric(S.api, "claimed") + fast_metric(S.api, "fallback") + fast_metric(S.api, "error"),
                         0);
        runs_a_command(key, sp_test_jstr(r, "sandbox.id"));
        sp_test_ok(sp_test_proc_stop(&S.cp[1], 10000, &err), &err);
}
END_TEST

START_TEST(a_worker_that_fails_the_call_hands_it_to_the_controller)
{
        char key[256];
        sp_test_new_tenant(&S, "stopped", key);
        warm_pool(1);
        int64_t errors = fast_metric(S.api, "error");
        ck_assert_int_eq(kill(S.workers[0].pid, SIGSTOP), 0);
        sp_test_http_response resp;
        sp_error *err = NULL;
        const char *hdr[] = {NULL, NULL};
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        hdr[0] = auth;
        int rc = sp_test_http(S.api, "POST", "/v1/sandboxes", hdr, SANDBOX, HANG_GUARD_MS, &resp, &err);
        ck_assert_int_eq(kill(S.workers[0].pid, SIGCONT), 0);
        sp_test_ok(rc, &err);
        ck_assert_int_eq(resp.status, 202);
        _cleanup_json_ json_object *r = sp_test_http_json(&resp);
        sp_test_http_response_free(&resp);
        ck_assert_ptr_nonnull(r);
        ck_assert_str_eq(sp_test_jstr(r, "operation.state"), "pending");
        ck_assert_int_eq(fast_metric(S.api, "error"), errors + 1);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(r, "operation.id"), true));
        const char *sbx = sp_test_jstr(r, "sandbox.id");
        _cleanup_json_ json_object *s = API(key, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(s, "state"), "running");
        runs_a_command(key, sbx);
        worker_holds_exactly_the_database(sbx);
}
END_TEST

START_TEST(without_a_warm_sandbox_the_controller_creates_it)
{
        char key[256];
        sp_test_new_tenant(&S, "cold", key);
        warm_pool(0);
        int64_t fallback = fast_metric(S.api, "fallback"), claimed = fast_metric(S.api, "claimed");
        _cleanup_json_ json_object *r = API(key, "POST", "/v1/sandboxes", 202, SANDBOX);
        ck_assert_str_eq(sp_test_jstr(r, "operation.state"), "pending");
        ck_assert_int_eq(fast_metric(S.api, "fallback"), fallback + 1);
        ck_assert_int_eq(fast_metric(S.api, "claimed"), claimed);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(r, "operation.id"), true));
        runs_a_command(key, sp_test_jstr(r, "sandbox.id"));
        worker_holds_exactly_the_database(sp_test_jstr(r, "sandbox.id"));
}
END_TEST

START_TEST(a_replica_killed_mid_create_leaves_it_to_the_controller)
{
        char key[256];
        sp_test_new_tenant(&S, "crash", key);
        warm_pool(1);
        /* The worker holds the call unanswered while the replica dies. */
        ck_assert_int_eq(kill(S.workers[0].pid, SIGSTOP), 0);
        sp_error *err = NULL;
        int fd = sp_test_dial(S.api, &err);
        sp_test_ok(fd, &err);
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "POST /v1/sandboxes HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                         "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         key, strlen(SANDBOX), SANDBOX);
        ck_assert_int_eq(write(fd, req, (size_t)n), n);
        _cleanup_free_ char *op = NULL;
        int64_t until = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;
        while (!op || !*op) {
                free(op);
                op = sp_test_space_sql(&S,
                                       "SELECT id FROM operations WHERE kind = 'create' AND state = 'running' "
                                       "AND message LIKE '%one hop%'",
                                       0, NULL);
                ck_assert_msg(sp_now_mono_us() < until, "the create was never recorded");
                if (!*op)
                        usleep(20 * 1000);
        }
        sp_test_ok(sp_test_proc_kill(&S.cp[0], &err), &err);
        close(fd);
        ck_assert_int_eq(kill(S.workers[0].pid, SIGCONT), 0);
        sp_test_ok(sp_test_space_start_cp(&S, 0, &err), &err);
        _cleanup_json_ json_object *done = sp_test_wait_op(&S, key, op, true);
        /* The controller sent it again once the lease ran out. */
        ck_assert_int_ge(jint(done, "attempts"), 2);
        const char *sbx = sp_test_jstr(done, "target_id");
        ck_assert_ptr_nonnull(sbx);
        _cleanup_json_ json_object *s = API(key, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(s, "state"), "running");
        runs_a_command(key, sbx);
        worker_holds_exactly_the_database(sbx);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_create_fast");
        TCase *tc = tcase_create("creates");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, a_warm_create_answers_running);
        tcase_add_test(tc, turned_off_the_controller_creates_it);
        tcase_add_test(tc, a_worker_that_fails_the_call_hands_it_to_the_controller);
        tcase_add_test(tc, without_a_warm_sandbox_the_controller_creates_it);
        tcase_add_test(tc, a_replica_killed_mid_create_leaves_it_to_the_controller); /* last: it restarts the replica */
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
