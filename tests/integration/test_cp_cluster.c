/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A whole cluster on one host: a real PostgreSQL, the space-controlplane
 * daemon and three real space-worker daemons (each its own state, storage,
 * ports, cgroup parent and uid range) that join with a bootstrap token and
 * talk mTLS. Driven through the public API: the sandbox lifecycle, placement
 * across workers and around a cordoned one, idempotent retries, bad input,
 * and tenant isolation. Needs root (workers), btrfs and PostgreSQL.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
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

static sp_test_space S;
static sp_test_proc *const cp = &S.cp[0];
static sp_test_proc cp2;

static json_object *api(const char *key, const char *method, const char *path, int want_status, const char *body,
                        const char *extra_header)
{
        return sp_test_api(&S, key, method, path, want_status, body, extra_header);
}

static json_object *wait_op(const char *key, const char *op_id, bool want_success)
{
        return sp_test_wait_op(&S, key, op_id, want_success);
}

/* Creates a sandbox and waits for it: returns its id (static buffer rotation). */
static const char *create_sandbox(const char *key, const char *body)
{
        static char ids[8][64];
        static int n;
        char *id = ids[n++ % 8];
        sp_test_create_sandbox(&S, key, body, id);
        return id;
}

static const char *action(const char *key, const char *id, const char *verb)
{
        static char state[32];
        sp_test_sandbox_action(&S, key, id, verb, state);
        return state;
}

/* The verb's operation, once it succeeded. */
static json_object *action_op(const char *key, const char *id, const char *verb)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
        _cleanup_json_ json_object *r = api(key, "POST", path, 202, NULL, NULL);
        return wait_op(key, sp_test_jstr(r, "operation.id"), true);
}

static void new_tenant(const char *name, char key[static 256])
{
        sp_test_new_tenant(&S, name, key);
}

static void cluster_up(void)
{
        /* Jails checkpointed with CRIU (opt-in: scripts/criu installs it, scripts/deps runs that). */
        static const char *const args[] = {"--criu=auto", NULL};
        sp_test_space_opts o = {.workers = 3, .worker_args = args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* ---- tests ---- */

START_TEST(lifecycle_through_the_api)
{
        char key[256];
        new_tenant("life", key);
        const char *id = create_sandbox(key, "{\"template\":\"base\",\"resources\":{\"memory_mb\":64},"
                                             "\"metadata\":{\"owner\":\"t1\"}}");
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *s = api(key, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(s, "state"), "running");
        ck_assert_str_eq(sp_test_jstr(s, "metadata.owner"), "t1");
        ck_assert_ptr_nonnull(sp_test_jstr(s, "worker_id"));
        ck_assert_str_eq(action(key, id, "pause"), "paused");
        ck_assert_str_eq(action(key, id, "resume"), "running");
        /* A jail's suspend keeps its processes (its workers have CRIU: scripts/criu), its stop its files only;
         * each operation's result says what was kept. */
        _cleanup_json_ json_object *sus = action_op(key, id, "suspend");
        ck_assert_str_eq(sp_test_jstr(sus, "result.state"), "suspended");
        ck_assert_msg(sp_test_jstr(sus, "result.suspend.memory") &&
                              strcmp(sp_test_jstr(sus, "result.suspend.memory"), "true") == 0,
                      "%s", json_object_to_json_string(sus));
        /* A checkpoint that cannot be restored (damaged here): the wake starts it from its files, and its
         * operation and the sandbox say so and why. */
        char core[1200];
        bool found = false;
        for (int i = 0; i < 3 && !found; i++) {
                snprintf(core, sizeof(core), "%s/w%d/storage/sandboxes/%s/checkpoint/core-1.img", S.dir, i, id);
                found = access(core, F_OK) == 0;
        }
        ck_assert_msg(found, "no checkpoint of %s on any worker", id);
        ck_assert_int_eq(truncate(core, 10), 0);
        _cleanup_json_ json_object *wk = action_op(key, id, "wake");
        ck_assert_str_eq(sp_test_jstr(wk, "result.state"), "running");
        ck_assert_msg(sp_test_jstr(wk, "message") && strstr(sp_test_jstr(wk, "message"), "woken with its files only") &&
                              sp_test_jstr(wk, "result.restore.why") &&
                              strstr(sp_test_jstr(wk, "result.restore.why"), "the restore from its checkpoint failed"),
                      "%s", json_object_to_json_string(wk));
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *woke = api(key, "GET", path, 200, NULL, NULL);
        ck_assert_msg(strstr(sp_test_jstr(woke, "status_message"), "woken with its files only"), "%s",
                      json_object_to_json_string(woke));
        _cleanup_json_ json_object *stop = action_op(key, id, "stop");
        ck_assert_str_eq(sp_test_jstr(stop, "result.state"), "stopped");
        ck_assert_msg(sp_test_jstr(stop, "result.suspend.memory") &&
                              strcmp(sp_test_jstr(stop, "result.suspend.memory"), "false") == 0 &&
                              strstr(sp_test_jstr(stop, "result.suspend.why"), "stopped"),
                      "%s", json_object_to_json_string(stop));
        ck_assert_str_eq(action(key, id, "start"), "running");
        /* A state that does not allow it. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/resume", id);
        json_object_put(api(key, "POST", path, 409, NULL, NULL));
        /* Delete, and it is gone. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *d = api(key, "DELETE", path, 202, NULL, NULL);
        json_object_put(wait_op(key, sp_test_jstr(d, "operation.id"), true));
        json_object_put(api(key, "GET", path, 404, NULL, NULL));
}
END_TEST

START_TEST(placement_spreads_and_avoids_cordoned)
{
        char key[256];
        new_tenant("place", key);
        _cleanup_json_ json_object *ws = api(S.admin_key, "GET", "/v1/workers", 200, NULL, NULL);
        json_object *arr = NULL;
        json_object_object_get_ex(ws, "workers", &arr);
        char cordoned[64], path[160];
        snprintf(cordoned, sizeof(cordoned), "%s", sp_test_jstr(json_object_array_get_idx(arr, 0), "id"));
        snprintf(path, sizeof(path), "/v1/workers/%s/cordon", cordoned);
        _cleanup_json_ json_object *w = api(S.admin_key, "POST", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(w, "state"), "cordoned");
        /* Tenants may not cordon. */
        json_object_put(api(key, "POST", path, 403, NULL, NULL));
        char used[4][64];
        for (int i = 0; i < 4; i++) {
                const char *id = create_sandbox(key, "{\"template\":\"base\",\"resources\":{\"memory_mb\":64}}");
                snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
                _cleanup_json_ json_object *s = api(key, "GET", path, 200, NULL, NULL);
                snprintf(used[i], sizeof(used[i]), "%s", sp_test_jstr(s, "worker_id"));
                ck_assert_str_ne(used[i], cordoned);
        }
        /* Spread: both uncordoned workers got some. */
        ck_assert_msg(strcmp(used[0], used[1]) != 0 || strcmp(used[1], used[2]) != 0 || strcmp(used[2], used[3]) != 0,
                      "every sandbox landed on %s", used[0]);
        snprintf(path, sizeof(path), "/v1/workers/%s/uncordon", cordoned);
        json_object_put(api(S.admin_key, "POST", path, 200, NULL, NULL));
        /* The list, paginated. */
        _cleanup_json_ json_object *p1 = api(key, "GET", "/v1/sandboxes?limit=3", 200, NULL, NULL);
        json_object *a1 = NULL;
        json_object_object_get_ex(p1, "sandboxes", &a1);
        ck_assert_int_eq(json_object_array_length(a1), 3);
        snprintf(path, sizeof(path), "/v1/sandboxes?limit=3&cursor=%s", sp_test_jstr(p1, "next_cursor"));
        _cleanup_json_ json_object *p2 = api(key, "GET", path, 200, NULL, NULL);
        json_object *a2 = NULL;
        json_object_object_get_ex(p2, "sandboxes", &a2);
        ck_assert_int_eq(json_object_array_length(a2), 1);
        ck_assert_ptr_null(sp_test_jstr(p2, "next_cursor"));
}
END_TEST

START_TEST(idempotent_retries_and_bad_input)
{
        char key[256];
        new_tenant("idem", key);
        const char *body = "{\"template\":\"base\",\"resources\":{\"memory_mb\":64}}";
        char hdr[] = "Idempotency-Key: create-once-1";
        _cleanup_json_ json_object *a = api(key, "POST", "/v1/sandboxes", 202, body, hdr);
        _cleanup_json_ json_object *b = api(key, "POST", "/v1/sandboxes", 202, body, hdr);
        ck_assert_str_eq(sp_test_jstr(a, "sandbox.id"), sp_test_jstr(b, "sandbox.id"));
        ck_assert_str_eq(sp_test_jstr(a, "operation.id"), sp_test_jstr(b, "operation.id"));
        json_object_put(api(key, "POST", "/v1/sandboxes", 409, "{\"template\":\"base\"}", hdr));
        _cleanup_json_ json_object *list = api(key, "GET", "/v1/sandboxes", 200, NULL, NULL);
        json_object *arr = NULL;
        json_object_object_get_ex(list, "sandboxes", &arr);
        ck_assert_int_eq(json_object_array_length(arr), 1);
        json_object_put(wait_op(key, sp_test_jstr(a, "operation.id"), true));

        /* Bad input: each names the problem, none creates anything. */
        _cleanup_json_ json_object *e1 = api(key, "POST", "/v1/sandboxes", 400, "{\"template\":", NULL);
        ck_assert_str_eq(sp_test_jstr(e1, "error.code"), "invalid_argument");
        _cleanup_json_ json_object *e2 =
                api(key, "POST", "/v1/sandboxes", 400, "{\"template\":\"base\",\"x\":1}", NULL);
        ck_assert_ptr_nonnull(strstr(sp_test_jstr(e2, "error.message"), "x"));
        _cleanup_json_ json_object *e3 =
                api(key, "POST", "/v1/sandboxes", 400, "{\"template\":\"base\",\"resources\":{\"memory_mb\":1}}", NULL);
        ck_assert_ptr_nonnull(strstr(sp_test_jstr(e3, "error.message"), "memory_mb"));
        _cleanup_json_ json_object *e4 = api(key, "POST", "/v1/sandboxes", 404, "{\"template\":\"nope\"}", NULL);
        ck_assert_ptr_nonnull(strstr(sp_test_jstr(e4, "error.message"), "nope"));
        json_object_put(api(NULL, "GET", "/v1/sandboxes", 401, NULL, NULL));
        json_object_put(api("spk_key_0000000000000000000_bogus", "GET", "/v1/sandboxes", 401, NULL, NULL));
        json_object_put(api(key, "GET", "/v1/workers", 403, NULL, NULL));
        _cleanup_json_ json_object *list2 = api(key, "GET", "/v1/sandboxes", 200, NULL, NULL);
        json_object_object_get_ex(list2, "sandboxes", &arr);
        ck_assert_int_eq(json_object_array_length(arr), 1);
}
END_TEST

START_TEST(tenants_cannot_touch_each_other)
{
        char a[256], b[256];
        new_tenant("ta", a);
        new_tenant("tb", b);
        const char *id = create_sandbox(a, "{\"template\":\"base\",\"resources\":{\"memory_mb\":64}}");
        char path[160];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *foreign = api(b, "GET", path, 404, NULL, NULL);
        char missing[160];
        snprintf(missing, sizeof(missing), "/v1/sandboxes/sbx_00000000000000000000");
        _cleanup_json_ json_object *absent = api(b, "GET", missing, 404, NULL, NULL);
        /* A foreign id answers exactly like a missing one (but for the id itself). */
        ck_assert_str_eq(sp_test_jstr(foreign, "error.code"), sp_test_jstr(absent, "error.code"));
        json_object_put(api(b, "DELETE", path, 404, NULL, NULL));
        static const char *const verbs[] = {"pause", "resume", "suspend", "restore", "wake", "stop", "start", NULL};
        for (int i = 0; verbs[i]; i++) {
                snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verbs[i]);
                json_object_put(api(b, "POST", path, 404, NULL, NULL));
        }
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/timeout", id);
        json_object_put(api(b, "POST", path, 404, "{\"timeout_s\":60}", NULL));
        _cleanup_json_ json_object *lb = api(b, "GET", "/v1/sandboxes", 200, NULL, NULL);
        json_object *arr = NULL;
        json_object_object_get_ex(lb, "sandboxes", &arr);
        ck_assert_int_eq(json_object_array_length(arr), 0);
        /* Tenant b cannot read tenant a's operations either. */
        _cleanup_json_ json_object *r = api(a, "POST", "/v1/sandboxes", 202, "{\"template\":\"base\"}", NULL);
        snprintf(path, sizeof(path), "/v1/operations/%s", sp_test_jstr(r, "operation.id"));
        json_object_put(api(b, "GET", path, 404, NULL, NULL));
        /* Still a's, and still running. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *s = api(a, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(s, "state"), "running");
}
END_TEST

/* The control plane SIGKILLed while creates are arriving: clients retrying
 * with their Idempotency-Key end with exactly one sandbox each, every one
 * running, and no worker holds a sandbox the database does not know. */
START_TEST(controlplane_killed_during_creates)
{
        enum { N = 12 };
        char key[256];
        new_tenant("crash", key);
        char hdr[N][64];
        for (int i = 0; i < N; i++)
                snprintf(hdr[i], sizeof(hdr[i]), "Idempotency-Key: crash-%d-%d", (int)getpid(), i);
        const char *body = "{\"template\":\"base\",\"resources\":{\"memory_mb\":32,\"cpu_millis\":10}}";
        pid_t kid = fork();
        if (kid == 0) {
                /* The client: fires the creates; some are cut off. */
                char auth[300];
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
                for (int i = 0; i < N; i++) {
                        const char *headers[] = {auth, hdr[i], NULL};
                        sp_test_http_response r;
                        if (sp_test_http(S.api, "POST", "/v1/sandboxes", headers, body, 5000, &r, NULL) == 0)
                                sp_test_http_response_free(&r);
                }
                _exit(0);
        }
        usleep(15 * 1000);
        ck_assert_int_eq(kill(-cp->pgid, SIGKILL), 0);
        int st;
        waitpid(kid, &st, 0);
        /* A new control plane on the same database and ports. */
        sp_error *e = NULL;
        sp_test_proc_opts opts = {.log_path = cp->log_path};
        sp_test_ok(sp_test_proc_start(&cp2, "controlplane", (const char *const *)cp->argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&cp2, "127.0.0.1", S.api, "/healthz", 30000, &e), &e);
        /* Every client retries with its key. */
        char ids[N][64];
        for (int i = 0; i < N; i++) {
                _cleanup_json_ json_object *r = api(key, "POST", "/v1/sandboxes", 202, body, hdr[i]);
                snprintf(ids[i], sizeof(ids[i]), "%s", sp_test_jstr(r, "sandbox.id"));
                json_object_put(wait_op(key, sp_test_jstr(r, "operation.id"), true));
                for (int j = 0; j < i; j++)
                        ck_assert_str_ne(ids[i], ids[j]);
        }
        _cleanup_json_ json_object *list = api(key, "GET", "/v1/sandboxes?limit=100", 200, NULL, NULL);
        json_object *arr = NULL;
        json_object_object_get_ex(list, "sandboxes", &arr);
        ck_assert_int_eq(json_object_array_length(arr), N);
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(arr, i), "state"), "running");
        /* No orphans: after reconciliation, the workers together hold exactly
         * the sandboxes the database places on them (all tenants). */
        int64_t deadline = sp_now_mono_us() + 30 * 1000000LL;
        for (;;) {
                _cleanup_json_ json_object *ws = api(S.admin_key, "GET", "/v1/workers", 200, NULL, NULL);
                json_object *wa = NULL;
                json_object_object_get_ex(ws, "workers", &wa);
                size_t held = 0, placed = 0;
                for (size_t i = 0; i < json_object_array_length(wa); i++) {
                        json_object *w = json_object_array_get_idx(wa, i), *obs, *sb, *used, *slots;
                        if (json_object_object_get_ex(w, "observed", &obs) &&
                            json_object_object_get_ex(obs, "sandboxes", &sb))
                                held += json_object_array_length(sb);
                        if (json_object_object_get_ex(w, "used", &used) &&
                            json_object_object_get_ex(used, "slots", &slots))
                                placed += (size_t)json_object_get_int64(slots);
                }
                if (held == placed)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "workers hold %zu sandboxes, the database places %zu", held,
                              placed);
                usleep(200 * 1000);
        }
        sp_test_proc_stop(&cp2, 10000, NULL);
        sp_test_proc_free(&cp2);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_cluster");
        TCase *tc = tcase_create("cluster");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, lifecycle_through_the_api);
        tcase_add_test(tc, placement_spreads_and_avoids_cordoned);
        tcase_add_test(tc, idempotent_retries_and_bad_input);
        tcase_add_test(tc, tenants_cannot_touch_each_other);
        tcase_add_test(tc, controlplane_killed_during_creates); /* last: it replaces the control plane */
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
