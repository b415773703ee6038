/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attacks on the worker's session logs (issue #13):
 *
 * - a session killed (or ending by itself) while nobody read its output
 *   stayed `running` in the API until someone attached: the agent reported
 *   the exit only once all output was out, and a full log takes none. Here
 *   `sleep 1000` killed, `exit 3`, `yes` killed and a shell that exits 3
 *   leaving unread output behind all reach GET /v1/sessions/{id} as ended
 *   within seconds (bounded polls), never attached;
 * - session logs filled the host disk (64 MiB per session, 1024 sessions per
 *   sandbox, outside any quota). With --session-log-size=1M and
 *   --session-log-budget=4M: eight ended sessions of 700 kB each leave at
 *   most 4 MiB of log segments on the worker's disk (the oldest are
 *   reclaimed) and still report their exit; then running `yes` sessions,
 *   never read, fill the budget: a new session is refused with 429
 *   resource_exhausted naming the budget, and the logs stay within it.
 *
 * - a sandbox with a 1 TiB disk quota was placed on a 20 GiB pool: the worker
 *   now reports its storage pool and the scheduler keeps the sum of the disk
 *   quotas on a worker within it.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define BUDGET (4u << 20)

static sp_test_space S;
static const char *worker_args[] = {"--session-log-size=1M", "--session-log-budget=4M", NULL};

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1, .worker_args = worker_args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

#define API(key, method, path, status, body) sp_test_api(&S, (key), (method), (path), (status), (body), NULL)

static const char *path_of(const char *fmt, const char *a)
{
        static char bufs[4][512];
        static int n;
        char *p = bufs[n++ % 4];
        snprintf(p, 512, fmt, a);
        return p;
}

static void new_sandbox(const char *name, char key[static 256], char sbx[static 64])
{
        sp_test_new_tenant(&S, name, key);
        sp_test_create_sandbox(&S, key, SANDBOX, sbx);
}

/* Starts a session running command; returns its id in id. */
static void start(const char *key, const char *sbx, const char *command, char id[static 64])
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "command", json_object_new_string(command));
        _cleanup_json_ json_object *r =
                API(key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201, json_object_to_json_string(body));
        snprintf(id, 64, "%s", sp_test_jstr(r, "session.id"));
}

/* GETs the session until it has ended, for at most limit_s seconds. */
static json_object *wait_ended(const char *key, const char *id, int limit_s)
{
        int64_t deadline = sp_now_mono_us() + (int64_t)limit_s * SP_USEC_PER_SEC;
        for (;;) {
                json_object *s = API(key, "GET", path_of("/v1/sessions/%s", id), 200, NULL);
                const char *st = sp_test_jstr(s, "state");
                if (strcmp(st, "exited") == 0 || strcmp(st, "failed") == 0)
                        return s;
                ck_assert_msg(sp_now_mono_us() < deadline, "session %s has not ended after %d s: %s", id, limit_s,
                              json_object_to_json_string(s));
                json_object_put(s);
                usleep(100 * 1000);
        }
}

static int64_t jint(json_object *o, const char *path)
{
        const char *s = sp_test_jstr(o, path);
        ck_assert_msg(s, "no %s in %s", path, json_object_to_json_string(o));
        return strtoll(s, NULL, 10);
}

START_TEST(sessions_end_in_the_api_without_a_reader)
{
        char key[256], sbx[64], id[64];
        new_sandbox("logs-end", key, sbx);

        start(key, sbx, "sleep 1000", id);
        json_object_put(API(key, "POST", path_of("/v1/sessions/%s/kill", id), 200, NULL));
        _cleanup_json_ json_object *k = wait_ended(key, id, 10);
        ck_assert_str_eq(sp_test_jstr(k, "state"), "exited");
        ck_assert_int_eq(jint(k, "exit.signal"), SIGKILL);
        ck_assert_str_eq(sp_test_jstr(k, "exit.killed"), "true");

        start(key, sbx, "exit 3", id);
        _cleanup_json_ json_object *x = wait_ended(key, id, 10);
        ck_assert_int_eq(jint(x, "exit.code"), 3);

        /* Output nobody reads fills the log and the agent's buffers; the kill still ends it. */
        start(key, sbx, "yes", id);
        usleep(1500 * 1000);
        json_object_put(API(key, "POST", path_of("/v1/sessions/%s/kill", id), 200, NULL));
        _cleanup_json_ json_object *y = wait_ended(key, id, 10);
        ck_assert_str_eq(sp_test_jstr(y, "state"), "exited");
        ck_assert_int_eq(jint(y, "exit.signal"), SIGKILL);
        ck_assert_str_eq(sp_test_jstr(y, "exit.killed"), "true");

        /* A command that exits by itself leaving more output than the log takes. */
        start(key, sbx, "yes & sleep 1; exit 3", id);
        _cleanup_json_ json_object *z = wait_ended(key, id, 10);
        ck_assert_str_eq(sp_test_jstr(z, "state"), "exited");
        ck_assert_int_eq(jint(z, "exit.code"), 3);
}
END_TEST

static uint64_t seg_bytes;

static int add_seg(const char *path, const struct stat *st, int type, struct FTW *f)
{
        (void)f;
        size_t n = strlen(path);
        if (type == FTW_F && n > 4 && strcmp(path + n - 4, ".seg") == 0)
                seg_bytes += (uint64_t)st->st_size;
        return 0;
}

/* Bytes of session log segments under the worker's state directory for sbx. */
static uint64_t log_bytes(const char *sbx)
{
        char dir[1024];
        snprintf(dir, sizeof(dir), "%s/w0/state/sandboxes/%s/sessions", S.dir, sbx);
        seg_bytes = 0;
        ck_assert_int_eq(nftw(dir, add_seg, 16, FTW_PHYS), 0);
        return seg_bytes;
}

START_TEST(session_logs_stay_within_the_sandbox_budget)
{
        char key[256], sbx[64], ids[8][64];
        new_sandbox("logs-budget", key, sbx);

        /* Ended sessions: the oldest logs are reclaimed, their records stay. */
        for (int i = 0; i < 8; i++) {
                start(key, sbx, "head -c 700000 /dev/zero", ids[i]);
                _cleanup_json_ json_object *s = wait_ended(key, ids[i], 30);
                ck_assert_int_eq(jint(s, "exit.code"), 0);
        }
        uint64_t held = log_bytes(sbx);
        ck_assert_msg(held <= BUDGET, "ended sessions hold %llu bytes of logs, over the %u budget",
                      (unsigned long long)held, BUDGET);
        ck_assert_msg(held >= 2 * 700000, "only %llu bytes of logs kept", (unsigned long long)held);
        for (int i = 0; i < 8; i++) {
                _cleanup_json_ json_object *s = API(key, "GET", path_of("/v1/sessions/%s", ids[i]), 200, NULL);
                ck_assert_str_eq(sp_test_jstr(s, "state"), "exited");
                ck_assert_int_eq(jint(s, "exit.code"), 0);
        }

        /* Running sessions nobody reads: they are held back, and at the budget new ones are refused. */
        char live[10][64];
        int nlive = 0;
        bool refused = false;
        for (int i = 0; i < 10 && !refused; i++) {
                _cleanup_json_ json_object *body = json_object_new_object();
                json_object_object_add(body, "command", json_object_new_string("yes"));
                sp_test_http_response r;
                sp_error *e = NULL;
                char url[128];
                snprintf(url, sizeof(url), "/v1/sandboxes/%s/sessions", sbx);
                char auth[300];
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
                const char *headers[] = {auth, "Content-Type: application/json", NULL};
                sp_test_ok(sp_test_http(S.api_port[0], "POST", url, headers, json_object_to_json_string(body), 30000,
                                        &r, &e),
                           &e);
                if (r.status == 201) {
                        _cleanup_json_ json_object *o = sp_test_http_json(&r);
                        ck_assert_ptr_nonnull(o);
                        snprintf(live[nlive++], 64, "%s", sp_test_jstr(o, "session.id"));
                        usleep(1000 * 1000); /* let it fill what it may */
                } else {
                        ck_assert_msg(r.status == 429, "create answered %d: %s", r.status, r.body);
                        ck_assert_msg(strstr(r.body, "resource_exhausted") && strstr(r.body, "--session-log-budget"),
                                      "%s", r.body);
                        refused = true;
                }
                sp_test_http_response_free(&r);
        }
        ck_assert_msg(refused, "%d unread running sessions and no refusal", nlive);
        ck_assert_int_ge(nlive, 2);
        held = log_bytes(sbx);
        ck_assert_msg(held <= BUDGET, "running sessions hold %llu bytes of logs, over the %u budget",
                      (unsigned long long)held, BUDGET);
        for (int i = 0; i < nlive; i++) {
                json_object_put(API(key, "POST", path_of("/v1/sessions/%s/kill", live[i]), 200, NULL));
                _cleanup_json_ json_object *s = wait_ended(key, live[i], 10);
                ck_assert_str_eq(sp_test_jstr(s, "exit.killed"), "true");
        }
}
END_TEST

/* A sandbox's disk quota is promised from its worker's storage pool (2 GiB
 * here): one whose quota exceeds the pool is never placed there — the
 * operation waits and says why — while one that fits still is. */
START_TEST(placement_respects_the_storage_pool)
{
        char key[256], sbx[64];
        sp_test_new_tenant(&S, "disk", key);
        /* The worker reports its pool (in its heartbeat, within seconds of joining). */
        int64_t deadline = sp_now_mono_us() + 20 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *ws = API(S.admin_key, "GET", "/v1/workers", 200, NULL);
                const char *d =
                        sp_test_jstr(json_object_array_get_idx(sp_test_jarr(ws, "workers"), 0), "capacity.disk_mb");
                if (d && strtoll(d, NULL, 10) > 1024 && strtoll(d, NULL, 10) <= 2048)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "the worker reports no storage pool: %s",
                              json_object_to_json_string(ws));
                usleep(200 * 1000);
        }
        _cleanup_json_ json_object *r =
                API(key, "POST", "/v1/sandboxes", 202, "{\"template\":\"base\",\"resources\":{\"disk_mb\":1048576}}");
        const char *op = sp_test_jstr(r, "operation.id");
        deadline = sp_now_mono_us() + 20 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *o = API(key, "GET", path_of("/v1/operations/%s", op), 200, NULL);
                ck_assert_str_ne(sp_test_jstr(o, "state"), "succeeded");
                const char *m = sp_test_jstr(o, "message");
                if (m && strstr(m, "needs 1048576 MiB of disk, its storage pool has"))
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "the 1 TiB sandbox is not refused for its disk: %s",
                              json_object_to_json_string(o));
                usleep(200 * 1000);
        }
        /* A quota that fits is placed as before. */
        sp_test_create_sandbox(&S, key, "{\"template\":\"base\",\"resources\":{\"disk_mb\":256,\"cpu_millis\":100}}",
                               sbx);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_logs");
        TCase *tc = tcase_create("logs");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, sessions_end_in_the_api_without_a_reader);
        tcase_add_test(tc, session_logs_stay_within_the_sandbox_budget);
        tcase_add_test(tc, placement_respects_the_storage_pool);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
