/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Concurrent load on one worker (issue 18's correctness half): a real
 * cluster — PostgreSQL, the control plane, one worker, a data plane — and
 * CLIENTS processes that at once each create a sandbox, run a command in it,
 * read its whole output through the data plane, and delete it; then as many
 * execs again, all at once, in sandboxes that stay. Proves that every create
 * and every exec succeeds under that load, that each client reads its own
 * output and exit code and nobody else's, and that nothing is lost or left
 * behind: the cluster records exactly the sandboxes and sessions made, and
 * the worker holds none of the deleted ones. Timing is never judged (bench/
 * measures it). Needs root, btrfs and PostgreSQL.
 */
#include <dirent.h>
#include <libpq-fe.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

#define CLIENTS 16
#define SANDBOX \
        "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100},\"metadata\":{\"load\":\"%s\"}}"

static sp_test_space S;
static sp_test_proc dp;
static int dp_port;
static char dp_url_arg[128];
static const char *cp_args[] = {dp_url_arg, NULL};
static char key[256];

static void cluster_up(void)
{
        sp_error *err = NULL;
        dp_port = sp_test_free_port(&err);
        sp_test_ok(dp_port, &err);
        snprintf(dp_url_arg, sizeof(dp_url_arg), "--dataplane-url=http://127.0.0.1:%d", dp_port);
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        sp_test_space_start_dataplane(&S, &dp, dp_port, "dp-load", NULL);
        sp_test_new_tenant(&S, "load", key);
}

static void cluster_down(void)
{
        if (dp.argv) {
                sp_test_proc_stop(&dp, 10000, NULL);
                sp_test_proc_free(&dp);
        }
        sp_test_space_down(&S);
}

/* ---- in the client processes: no assertions, a message and exit 1 ---- */

static void die(int k, const char *what, const sp_test_http_response *r)
{
        fprintf(stderr, "client %d: %s (status %d: %.300s)\n", k, what, r ? r->status : 0, r && r->body ? r->body : "");
        _exit(1);
}

/* method path on the API with the tenant's key; the answer's JSON when it is want. */
static json_object *api(int k, const char *method, const char *path, const char *body, int want)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        const char *h[] = {auth, "Content-Type: application/json", NULL};
        sp_test_http_response r = {0};
        sp_error *e = NULL;
        if (sp_test_http(S.api, method, path, h, body, 120000, &r, &e) < 0) {
                fprintf(stderr, "client %d: %s %s: %s\n", k, method, path, e ? e->message : "?");
                _exit(1);
        }
        if (r.status != want)
                die(k, path, &r);
        json_object *o = sp_test_http_json(&r);
        sp_test_http_response_free(&r);
        return o;
}

/* Waits for an operation to succeed. */
static void wait_op(int k, const char *op)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s?wait=30", op);
        for (int64_t deadline = sp_now_mono_us() + 300 * SP_USEC_PER_SEC; sp_now_mono_us() < deadline;) {
                _cleanup_json_ json_object *o = api(k, "GET", path, NULL, 200);
                const char *st = sp_test_jstr(o, "state");
                if (st && strcmp(st, "succeeded") == 0)
                        return;
                if (st && strcmp(st, "failed") == 0) {
                        fprintf(stderr, "client %d: operation %s failed: %s\n", k, op, json_object_to_json_string(o));
                        _exit(1);
                }
        }
        fprintf(stderr, "client %d: operation %s did not finish in 300 s\n", k, op);
        _exit(1);
}

/* Runs `echo load-<k>-<round>; exit <k % 7>` in sbx and reads the whole
 * output through the data plane; exits 1 unless it is exactly that. */
static void exec_and_read(int k, int round, const char *sbx)
{
        char path[128], body[256], line[64];
        snprintf(line, sizeof(line), "load-%d-%d\n", k, round);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", sbx);
        snprintf(body, sizeof(body), "{\"argv\":[\"sh\",\"-c\",\"echo load-%d-%d; exit %d\"]}", k, round, k % 7);
        _cleanup_json_ json_object *s = api(k, "POST", path, body, 201);
        const char *url = sp_test_jstr(s, "attach_url"), *token = sp_test_jstr(s, "attach_token");
        const char *rest = url ? strstr(url, "/v1/") : NULL;
        if (!rest || !token)
                die(k, "no attach_url or attach_token", NULL);
        char auth[4200];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        const char *h[] = {auth, NULL};
        sp_test_http_response r = {0};
        sp_error *e = NULL;
        if (sp_test_http(dp_port, "GET", rest, h, NULL, 120000, &r, &e) < 0 || r.status != 200)
                die(k, e ? e->message : "attach", &r);
        /* The SSE stream: stdout events (base64) then exit. */
        char want[128], code[64];
        EVP_EncodeBlock((unsigned char *)want, (const unsigned char *)line, (int)strlen(line));
        snprintf(code, sizeof(code), "\"code\":%d,", k % 7);
        if (!strstr(r.body, want) || !strstr(r.body, "event: exit") || !strstr(r.body, code))
                die(k, "the output is not this client's", &r);
        /* Exactly one stdout event: nothing repeated, nothing of another session. */
        const char *first = strstr(r.body, "event: stdout");
        if (!first || strstr(first + 1, "event: stdout"))
                die(k, "not exactly one stdout event", &r);
        sp_test_http_response_free(&r);
}

static void create_exec_delete(int k)
{
        char body[256];
        snprintf(body, sizeof(body), SANDBOX, "churn");
        _cleanup_json_ json_object *c = api(k, "POST", "/v1/sandboxes", body, 202);
        char sbx[64], path[128];
        snprintf(sbx, sizeof(sbx), "%s", sp_test_jstr(c, "sandbox.id"));
        wait_op(k, sp_test_jstr(c, "operation.id"));
        exec_and_read(k, 0, sbx);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx);
        _cleanup_json_ json_object *d = api(k, "DELETE", path, NULL, 202);
        wait_op(k, sp_test_jstr(d, "operation.id"));
        _exit(0);
}

/* Starts CLIENTS processes running fn(k, arg) at once; asserts that all exit 0. */
static void run_clients(void (*fn)(int, const char *), char ids[][64])
{
        pid_t pids[CLIENTS];
        for (int k = 0; k < CLIENTS; k++) {
                pids[k] = fork();
                ck_assert_int_ge(pids[k], 0);
                if (pids[k] == 0)
                        fn(k, ids ? ids[k] : NULL);
        }
        int failed = 0;
        for (int k = 0; k < CLIENTS; k++) {
                int st = 0;
                ck_assert_int_eq(waitpid(pids[k], &st, 0), pids[k]);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        failed++;
        }
        ck_assert_msg(failed == 0, "%d of %d clients failed (their messages are above)", failed, CLIENTS);
}

static void churn_client(int k, const char *unused)
{
        (void)unused;
        create_exec_delete(k);
}

static void exec_client(int k, const char *sbx)
{
        for (int round = 1; round <= 3; round++)
                exec_and_read(k, round, sbx);
        _exit(0);
}

static int64_t db_count(const char *sql)
{
        PGconn *db = PQconnectdb(S.conninfo);
        ck_assert_msg(PQstatus(db) == CONNECTION_OK, "%s", PQerrorMessage(db));
        PGresult *res = PQexec(db, sql);
        ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s", PQerrorMessage(db));
        int64_t n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        PQfinish(db);
        return n;
}

START_TEST(concurrent_creates_and_execs_on_one_worker)
{
        /* Sixteen at once: create, exec, read, delete. */
        run_clients(churn_client, NULL);
        ck_assert_int_eq(db_count("SELECT count(*) FROM sandboxes WHERE metadata->>'load' = 'churn'"), CLIENTS);
        ck_assert_int_eq(db_count("SELECT count(*) FROM sandboxes WHERE metadata->>'load' = 'churn' "
                                  "AND observed_state <> 'deleted'"),
                         0);
        ck_assert_int_eq(db_count("SELECT count(*) FROM operations o JOIN sandboxes s ON s.id = o.target_id "
                                  "WHERE s.metadata->>'load' = 'churn' AND o.state <> 'succeeded'"),
                         0);

        /* Sixteen sandboxes made one after another, then three execs in each
         * from sixteen clients at once. */
        char ids[CLIENTS][64];
        for (int k = 0; k < CLIENTS; k++) {
                char body[256];
                snprintf(body, sizeof(body), SANDBOX, "exec");
                sp_test_create_sandbox(&S, key, body, ids[k]);
        }
        run_clients(exec_client, ids);
        /* Each client read its exit through the data plane; the API recorded
         * every session (it learns their end when asked). */
        ck_assert_int_eq(db_count("SELECT count(*) FROM sessions x JOIN sandboxes s ON s.id = x.sandbox_id "
                                  "WHERE s.metadata->>'load' = 'exec'"),
                         CLIENTS * 3);

        /* Nothing left behind: the API lists no churned sandbox, and the
         * worker's own records hold none of them, and every one that stays. */
        _cleanup_json_ json_object *left =
                sp_test_api(&S, key, "GET", "/v1/sandboxes?metadata.load=churn&limit=100", 200, NULL, NULL);
        ck_assert_int_eq(json_object_array_length(sp_test_jarr(left, "sandboxes")), 0);
        PGconn *db = PQconnectdb(S.conninfo);
        ck_assert_msg(PQstatus(db) == CONNECTION_OK, "%s", PQerrorMessage(db));
        PGresult *churned = PQexec(db, "SELECT id FROM sandboxes WHERE metadata->>'load' = 'churn'");
        ck_assert_int_eq(PQresultStatus(churned), PGRES_TUPLES_OK);
        char dir[700];
        snprintf(dir, sizeof(dir), "%s/w0/state/sandboxes", S.dir);
        DIR *d = opendir(dir);
        ck_assert_msg(d, "%s", dir);
        int stay = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                char f[1000];
                snprintf(f, sizeof(f), "%s/%s/sandbox.json", dir, de->d_name);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                if (sp_file_read(f, 1 << 20, &b, NULL) < 0)
                        continue;
                for (int i = 0; i < PQntuples(churned); i++)
                        ck_assert_msg(!strstr(b.data, PQgetvalue(churned, i, 0)), "the worker still holds %s",
                                      PQgetvalue(churned, i, 0));
                for (int k = 0; k < CLIENTS; k++)
                        if (strstr(b.data, ids[k]))
                                stay++;
        }
        closedir(d);
        PQclear(churned);
        PQfinish(db);
        ck_assert_int_eq(stay, CLIENTS);
}
END_TEST

int main(void)
{
        sp_test_require_root("a cluster: btrfs, namespaces, cgroups");
        sp_test_pg_require();
        Suite *s = suite_create("load");
        TCase *tc = tcase_create("load");
        tcase_set_timeout(tc, 900);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, concurrent_creates_and_execs_on_one_worker);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
