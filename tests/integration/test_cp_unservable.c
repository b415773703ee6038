/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Creates the cluster cannot serve, against a real control plane and one
 * jail worker:
 *
 *   - a backend no worker runs is refused in the request (400
 *     failed_precondition naming the backends the cluster has), at once and
 *     with nothing recorded — not a pending create that times out;
 *   - a create that cannot be placed yet (its only worker cordoned) waits,
 *     and deleting the sandbox cancels it: the delete finishes at once and
 *     the create fails as cancelled.
 *
 * Needs root, btrfs and PostgreSQL.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"

static sp_test_space S;

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

START_TEST(a_backend_no_worker_runs_is_refused_in_the_request)
{
        char key[256];
        sp_test_new_tenant(&S, "backends", key);
        int64_t t0 = mono_ms();
        _cleanup_json_ json_object *r = sp_test_api(&S, key, "POST", "/v1/sandboxes", 400,
                                                    "{\"template\":\"base\",\"backend\":\"firecracker\"}", NULL);
        ck_assert_str_eq(sp_test_jstr(r, "error.code"), "failed_precondition");
        ck_assert_str_eq(sp_test_jstr(r, "error.message"),
                         "no worker of this cluster runs backend firecracker (it has: jail)");
        ck_assert_msg(mono_ms() - t0 < 30000, "the refusal took %lld ms", (long long)(mono_ms() - t0));
        _cleanup_json_ json_object *list = sp_test_api(&S, key, "GET", "/v1/sandboxes", 200, NULL, NULL);
        ck_assert_int_eq((int)json_object_array_length(sp_test_jarr(list, "sandboxes")), 0);
        /* The backend the cluster has is served. */
        char id[64];
        sp_test_create_sandbox(&S, key, "{\"template\":\"base\",\"backend\":\"jail\"}", id);
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
}
END_TEST

START_TEST(deleting_a_create_that_waits_for_room_cancels_it)
{
        char key[256], wid[64], path[160];
        sp_test_new_tenant(&S, "cancel", key);
        {
                _cleanup_json_ json_object *ws = sp_test_api(&S, S.admin_key, "GET", "/v1/workers", 200, NULL, NULL);
                snprintf(wid, sizeof(wid), "%s",
                         sp_test_jstr(json_object_array_get_idx(sp_test_jarr(ws, "workers"), 0), "id"));
        }
        snprintf(path, sizeof(path), "/v1/workers/%s/cordon", wid);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 200, NULL, NULL));

        _cleanup_json_ json_object *cr =
                sp_test_api(&S, key, "POST", "/v1/sandboxes", 202, "{\"template\":\"base\"}", NULL);
        const char *sbx = sp_test_jstr(cr, "sandbox.id");
        /* It waits: still pending a while later. */
        snprintf(path, sizeof(path), "/v1/operations/%s?wait=2", sp_test_jstr(cr, "operation.id"));
        {
                _cleanup_json_ json_object *op = sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
                ck_assert_msg(strcmp(sp_test_jstr(op, "state"), "pending") == 0 ||
                                      strcmp(sp_test_jstr(op, "state"), "running") == 0,
                              "%s", json_object_to_json_string(op));
        }
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx);
        int64_t t0 = mono_ms();
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        ck_assert_msg(mono_ms() - t0 < 60000, "the delete took %lld ms", (long long)(mono_ms() - t0));
        _cleanup_json_ json_object *cop = sp_test_wait_op(&S, key, sp_test_jstr(cr, "operation.id"), false);
        ck_assert_msg(strstr(sp_test_jstr(cop, "error.message"), "cancelled"), "%s", json_object_to_json_string(cop));
        json_object_put(sp_test_api(&S, key, "GET", path, 404, NULL, NULL));

        snprintf(path, sizeof(path), "/v1/workers/%s/uncordon", wid);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 200, NULL, NULL));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_unservable");
        TCase *tc = tcase_create("unservable");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, a_backend_no_worker_runs_is_refused_in_the_request);
        tcase_add_test(tc, deleting_a_create_that_waits_for_room_cancels_it);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
