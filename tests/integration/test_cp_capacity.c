/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Creates that wait for a slot (docs/controlplane.md "Creates"), through a
 * real cluster: PostgreSQL, space-controlplane and one space-worker with one
 * slot. A create that finds no free slot waits ("cannot place", tried again
 * every 2 s); when a sandbox is deleted it is placed at once — woken by the
 * delete, not by its back-off: the test moves its next attempt an hour away
 * before the delete, so that only the wake can place it.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "pg.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define HANG_GUARD_MS 60000 /* only against a hang (an hour's wait): no test asserts a duration */

static sp_test_space S;
static const char *worker_args[] = {"--slots=1", NULL};

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1, .worker_args = worker_args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* Waits until the operation has ended; its state ("succeeded", "failed") and the sandbox's state. */
static void wait_op(const char *op, char state[static 32], char result[static 32])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s?wait=10", op);
        int64_t until = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;
        for (;;) {
                _cleanup_json_ json_object *o = sp_test_api(&S, S.admin_key, "GET", path, 200, NULL, NULL);
                const char *st = sp_test_jstr(o, "state");
                if (st && (strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0)) {
                        const char *r = sp_test_jstr(o, "result.state");
                        snprintf(state, 32, "%s", st);
                        snprintf(result, 32, "%s", r ? r : "");
                        return;
                }
                ck_assert_msg(sp_now_mono_us() < until, "operation %s still %s: %s", op, st,
                              json_object_to_json_string(o));
        }
}

START_TEST(a_freed_slot_places_a_waiting_create_at_once)
{
        char a[64];
        sp_test_create_sandbox(&S, S.admin_key, SANDBOX, a);

        /* The only slot is taken: the next create waits for one. */
        _cleanup_json_ json_object *r = sp_test_api(&S, S.admin_key, "POST", "/v1/sandboxes", 202, SANDBOX, NULL);
        const char *b = sp_test_jstr(r, "sandbox.id"), *b_op = sp_test_jstr(r, "operation.id");
        ck_assert(b && b_op);
        const char *p[] = {b_op};
        for (int64_t until = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;;) {
                _cleanup_free_ char *m = sp_test_space_sql(&S, "SELECT message FROM operations WHERE id = $1", 1, p);
                if (strncmp(m, "cannot place", 12) == 0)
                        break;
                ck_assert_msg(sp_now_mono_us() < until, "the second create never waited for a slot: '%s'", m);
                usleep(100 * 1000);
        }
        /* Its next attempt an hour away (again, should an attempt under way have set it back to 2 s). */
        bool far = false;
        for (int i = 0; i < 5 && !far; i++) {
                _cleanup_free_ char *u =
                        sp_test_space_sql(&S,
                                          "UPDATE operations SET next_attempt_at = now() + interval '1 hour' "
                                          "WHERE id = $1 AND state = 'pending' RETURNING id",
                                          1, p);
                ck_assert_str_eq(u, b_op);
                usleep(2500 * 1000);
                _cleanup_free_ char *f = sp_test_space_sql(&S,
                                                           "SELECT next_attempt_at > now() + interval '30 minutes' AND "
                                                           "state = 'pending' FROM operations WHERE id = $1",
                                                           1, p);
                far = strcmp(f, "t") == 0;
        }
        ck_assert_msg(far, "the waiting create's next attempt could not be moved away");

        /* The first sandbox goes: the waiting create is placed now, not in an hour. */
        char path[128], state[32], result[32];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", a);
        _cleanup_json_ json_object *d = sp_test_api(&S, S.admin_key, "DELETE", path, 202, NULL, NULL);
        wait_op(sp_test_jstr(d, "operation.id"), state, result);
        ck_assert_str_eq(state, "succeeded");
        wait_op(b_op, state, result);
        ck_assert_str_eq(state, "succeeded");
        ck_assert_str_eq(result, "running");
        _cleanup_free_ char *woken = sp_test_space_sql(&S,
                                                       "SELECT next_attempt_at < now() + interval '30 minutes' "
                                                       "FROM operations WHERE id = $1",
                                                       1, p);
        ck_assert_str_eq(woken, "t");

        snprintf(path, sizeof(path), "/v1/sandboxes/%s", b);
        _cleanup_json_ json_object *d2 = sp_test_api(&S, S.admin_key, "DELETE", path, 202, NULL, NULL);
        wait_op(sp_test_jstr(d2, "operation.id"), state, result);
        ck_assert_str_eq(state, "succeeded");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_capacity");
        TCase *tc = tcase_create("capacity");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, a_freed_slot_places_a_waiting_create_at_once);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
