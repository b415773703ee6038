/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Idleness that tells the truth (docs/controlplane.md "Idle sandboxes"),
 * against a real control plane and a jail worker: with no API call for
 * longer than its idle timeout,
 *
 *   - a sandbox running a command (`sleep 300`) stays running, its activity
 *     saying "session";
 *   - one whose session ended but left a process spinning on the CPU stays
 *     running, its activity saying "cpu";
 *   - one with nothing running is suspended.
 *
 * The smallest idle timeout is 60 s; instead of waiting a minute, the test
 * moves each sandbox's last API activity 50 s into the past (as if 50 s had
 * gone by without a call) and waits for the rest. The worker's heartbeat
 * (every 0.5 s here) is what keeps the busy ones from reaching it. Needs
 * root, btrfs and PostgreSQL.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1, .no_network = true};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* Starts cmd under sh -c in sandbox id and does not wait for it. */
static void start(const char *key, const char *id, const char *cmd)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "command", json_object_new_string(cmd));
        char path[160];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", id);
        json_object_put(sp_test_api(&S, key, "POST", path, 201, json_object_to_json_string(body), NULL));
}

static json_object *get(const char *key, const char *id)
{
        char path[160];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        return sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
}

/* Whether sandbox id's activity lists reason now. */
static bool busy_with(const char *key, const char *id, const char *reason)
{
        _cleanup_json_ json_object *o = get(key, id);
        json_object *act = NULL, *busy = NULL;
        if (!json_object_object_get_ex(o, "activity", &act) || !json_object_object_get_ex(act, "busy", &busy))
                return false;
        for (size_t i = 0; i < json_object_array_length(busy); i++)
                if (strcmp(json_object_get_string(json_object_array_get_idx(busy, i)), reason) == 0)
                        return true;
        return false;
}

static void state_of(const char *key, const char *id, char *out, size_t n)
{
        _cleanup_json_ json_object *o = get(key, id);
        snprintf(out, n, "%s", sp_test_jstr(o, "state"));
}

START_TEST(only_a_sandbox_with_nothing_going_on_is_suspended_when_idle)
{
        char key[256], sleeper[64], spinner[64], quiet[64];
        sp_test_new_tenant(&S, "idle", key);
        const char *body = "{\"template\":\"base\",\"idle_timeout_s\":60,\"resources\":{\"cpu_millis\":500}}";
        sp_test_create_sandbox(&S, key, body, sleeper);
        sp_test_create_sandbox(&S, key, body, spinner);
        sp_test_create_sandbox(&S, key, body, quiet);
        start(key, sleeper, "sleep 300");
        /* The session ends at once; what it left behind keeps a CPU busy. */
        start(key, spinner, "setsid sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &");

        /* Each reason shows up in the sandbox's activity within a few heartbeats. */
        int64_t deadline = sp_now_mono_us() + 30 * 1000000LL;
        while (!(busy_with(key, sleeper, "session") && busy_with(key, spinner, "cpu")) && sp_now_mono_us() < deadline)
                usleep(250000);
        ck_assert_msg(busy_with(key, sleeper, "session"), "a running sleep does not make its sandbox busy");
        ck_assert_msg(busy_with(key, spinner, "cpu"), "a process spinning does not make its sandbox busy");
        ck_assert_msg(!busy_with(key, spinner, "session"), "the spinner's session should have ended");

        /* 50 s without an API call, as far as the control plane knows. */
        const char *ids[] = {sleeper, spinner, quiet};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ids); i++) {
                const char *p[] = {ids[i]};
                free(sp_test_space_sql(&S,
                                       "UPDATE sandboxes SET last_active_at = now() - interval '50 seconds' "
                                       "WHERE id = $1 RETURNING id",
                                       1, p));
        }
        char st[32] = "";
        deadline = sp_now_mono_us() + 60 * 1000000LL;
        do {
                usleep(500000);
                state_of(key, quiet, st, sizeof(st));
        } while (strcmp(st, "suspended") != 0 && sp_now_mono_us() < deadline);
        ck_assert_msg(strcmp(st, "suspended") == 0, "the quiet sandbox was not suspended (%s)", st);
        /* Well past the idle timeout for all three now: the busy ones still run. */
        sleep(3);
        state_of(key, sleeper, st, sizeof(st));
        ck_assert_msg(strcmp(st, "running") == 0, "the sandbox running sleep is %s", st);
        state_of(key, spinner, st, sizeof(st));
        ck_assert_msg(strcmp(st, "running") == 0, "the sandbox spinning on a CPU is %s", st);
        _cleanup_json_ json_object *o = get(key, quiet);
        json_object *act = NULL, *busy = NULL;
        ck_assert(json_object_object_get_ex(o, "activity", &act) && json_object_object_get_ex(act, "busy", &busy));
        ck_assert_int_eq(json_object_array_length(busy), 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_idle");
        TCase *tc = tcase_create("idle");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, only_a_sandbox_with_nothing_going_on_is_suspended_when_idle);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
