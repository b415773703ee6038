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
#include "launcher.h"
#include "pg.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define NWORKERS 3

static sp_test_pg pg;
static char *top, cgparent[64];
static sp_test_proc cp, cp2, workers[NWORKERS];
static int api_port, rpc_port;
static char admin_key[256];

/* ---- the API ---- */

static json_object *api(const char *key, const char *method, const char *path, int want_status, const char *body,
                        const char *extra_header)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key ? key : "");
        const char *headers[] = {key ? auth : extra_header, key ? extra_header : NULL, NULL};
        sp_test_http_response r;
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(api_port, method, path, headers, body, 60000, &r, &e), &e);
        ck_assert_msg(r.status == want_status, "%s %s: status %d, wanted %d: %s", method, path, r.status, want_status,
                      r.body);
        json_object *o = r.body_len ? sp_test_http_json(&r) : NULL;
        sp_test_http_response_free(&r);
        return o;
}

static const char *str(json_object *o, const char *path)
{
        /* "a.b" walks objects. */
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", path);
        json_object *cur = o;
        for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save))
                if (!cur || !json_object_object_get_ex(cur, tok, &cur))
                        return NULL;
        return cur ? json_object_get_string(cur) : NULL;
}

/* Waits for an operation to finish and returns it; fails the test if it failed. */
static json_object *wait_op(const char *key, const char *op_id, bool want_success)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s?wait=30", op_id);
        for (int i = 0; i < 8; i++) {
                json_object *op = api(key, "GET", path, 200, NULL, NULL);
                const char *st = str(op, "state");
                if (strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0) {
                        ck_assert_msg(strcmp(st, want_success ? "succeeded" : "failed") == 0, "operation %s: %s", op_id,
                                      json_object_to_json_string(op));
                        return op;
                }
                json_object_put(op);
        }
        ck_abort_msg("operation %s did not finish", op_id);
        return NULL;
}

/* Creates a sandbox and waits for it: returns its id (static buffer rotation). */
static const char *create_sandbox(const char *key, const char *body)
{
        static char ids[8][64];
        static int n;
        _cleanup_json_ json_object *r = api(key, "POST", "/v1/sandboxes", 202, body, NULL);
        ck_assert_str_eq(str(r, "operation.kind"), "create");
        ck_assert_str_eq(str(r, "sandbox.state"), "creating");
        _cleanup_json_ json_object *op = wait_op(key, str(r, "operation.id"), true);
        ck_assert_str_eq(str(op, "result.state"), "running");
        char *id = ids[n++ % 8];
        snprintf(id, 64, "%s", str(r, "sandbox.id"));
        return id;
}

static const char *action(const char *key, const char *id, const char *verb)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
        _cleanup_json_ json_object *r = api(key, "POST", path, 202, NULL, NULL);
        _cleanup_json_ json_object *op = wait_op(key, str(r, "operation.id"), true);
        static char state[32];
        snprintf(state, sizeof(state), "%s", str(op, "result.state"));
        return state;
}

/* ---- the cluster (once per test case, in the parent) ---- */

static void start_worker(int i, const char *token)
{
        char bin[1024], d[600], state[700], storage[700], image[700], logp[700], ca[700], listen[80], http[80], cg[128],
                cpaddr[80], tok[300], uid[64], node[64];
        snprintf(d, sizeof(d), "%s/w%d", top, i);
        mkdir(d, 0700);
        snprintf(bin, sizeof(bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(state, sizeof(state), "--state-dir=%s/state", d);
        snprintf(storage, sizeof(storage), "--storage-dir=%s/storage", d);
        snprintf(image, sizeof(image), "--storage-image=%s/storage.img", d);
        snprintf(logp, sizeof(logp), "%s/worker.log", d);
        snprintf(ca, sizeof(ca), "--tls-ca=%s/ca.pem", top);
        sp_error *e = NULL;
        int port = sp_test_free_port(&e), hport = sp_test_free_port(&e);
        sp_test_ok(port > 0 && hport > 0 ? 0 : -1, &e);
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(http, sizeof(http), "--http-listen=127.0.0.1:%d", hport);
        snprintf(cg, sizeof(cg), "--cgroup-parent=%s-w%d", cgparent, i);
        snprintf(cpaddr, sizeof(cpaddr), "--control-plane=127.0.0.1:%d", rpc_port);
        snprintf(tok, sizeof(tok), "--join-token=%s", token);
        snprintf(uid, sizeof(uid), "--uid-base=%d", 0x10000000 + i * 0x02000000);
        snprintf(node, sizeof(node), "--node-id=node-%d", i);
        const char *argv[] = {bin,
                              state,
                              storage,
                              image,
                              "--storage-size=2G",
                              listen,
                              http,
                              ca,
                              cpaddr,
                              tok,
                              "--slots=16",
                              "--memory=2G",
                              "--cpu-millis=8000",
                              "--log-format=text",
                              cg,
                              uid,
                              node,
                              NULL};
        sp_test_proc_opts opts = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&workers[i], "worker", argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&workers[i], "worker ready", 180000, &e), &e);
}

static void cleanup_sandboxes(void)
{
        char cmd[4096];
        snprintf(cmd, sizeof(cmd),
                 "for d in /sys/fs/cgroup/*/%s-w* /sys/fs/cgroup/%s-w*; do [ -d \"$d\" ] || continue; "
                 "for p in $(cat $d/*/cgroup.procs 2>/dev/null); do kill -9 $p 2>/dev/null; done; done; "
                 "sleep 0.3; for d in /sys/fs/cgroup/*/%s-w* /sys/fs/cgroup/%s-w*; do [ -d \"$d\" ] && "
                 "rmdir $d/* $d 2>/dev/null; done; for m in $(awk '$5 ~ \"^%s/\" {print $5}' /proc/self/mountinfo "
                 "| sort -r); do umount -l $m; done; true",
                 cgparent, cgparent, cgparent, cgparent, top);
        if (system(cmd) != 0)
                fprintf(stderr, "cleanup script failed\n");
}

static void cluster_up(void)
{
        sp_error *e = NULL;
        top = sp_test_tmpdir("cluster");
        snprintf(cgparent, sizeof(cgparent), "space-cl-%d", (int)getpid());
        memset(&pg, 0, sizeof(pg));
        sp_test_ok(sp_test_pg_start(&pg, &e), &e);
        char *conninfo = NULL;
        sp_test_ok(sp_test_pg_create_database(&pg, &conninfo, &e), &e);
        api_port = sp_test_free_port(&e);
        rpc_port = sp_test_free_port(&e);
        sp_test_ok(api_port > 0 && rpc_port > 0 ? 0 : -1, &e);
        char bin[1024], db[1200], listen[80], rpc[80], keyf[700], caf[700], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-controlplane", sp_test_binary_dir());
        snprintf(db, sizeof(db), "--database=%s", conninfo);
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", api_port);
        snprintf(rpc, sizeof(rpc), "--rpc-listen=127.0.0.1:%d", rpc_port);
        snprintf(keyf, sizeof(keyf), "--admin-key-file=%s/admin.key", top);
        snprintf(caf, sizeof(caf), "--ca-out=%s/ca.pem", top);
        snprintf(logp, sizeof(logp), "%s/controlplane.log", top);
        free(conninfo);
        const char *argv[] = {
                bin, db, listen, rpc, keyf, caf, "--heartbeat-ms=500", "--tick-ms=200", "--log-format=text", NULL};
        sp_test_proc_opts opts = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&cp, "controlplane", argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&cp, "127.0.0.1", api_port, "/healthz", 30000, &e), &e);
        char path[700];
        snprintf(path, sizeof(path), "%s/admin.key", top);
        FILE *f = fopen(path, "r");
        ck_assert_msg(f && fgets(admin_key, sizeof(admin_key), f), "no admin key file");
        fclose(f);
        admin_key[strcspn(admin_key, "\n")] = '\0';
        _cleanup_json_ json_object *tok =
                api(admin_key, "POST", "/v1/join-tokens", 201, "{\"description\":\"test\",\"uses\":0}", NULL);
        for (int i = 0; i < NWORKERS; i++)
                start_worker(i, str(tok, "token"));
        /* Every worker has joined and reported the base template. */
        int64_t deadline = sp_now_mono_us() + 60 * 1000000LL;
        for (;;) {
                _cleanup_json_ json_object *ws = api(admin_key, "GET", "/v1/workers", 200, NULL, NULL);
                json_object *arr = NULL;
                json_object_object_get_ex(ws, "workers", &arr);
                int ready = 0;
                for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
                        json_object *w = json_object_array_get_idx(arr, i);
                        const char *t = json_object_to_json_string(w);
                        if (strcmp(str(w, "state"), "ready") == 0 && strstr(t, "\"base\""))
                                ready++;
                }
                if (ready == NWORKERS)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "workers did not become ready: %s",
                              json_object_to_json_string(ws));
                usleep(200 * 1000);
        }
}

static void cluster_down(void)
{
        /* A control plane a test started in its place (even if the test failed). */
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "pkill -KILL -f -- '[-]-listen=127.0.0.1:%d' ; true", api_port);
        if (system(cmd) != 0)
                fprintf(stderr, "pkill failed\n");
        sp_test_proc_stop(&cp, 10000, NULL);
        for (int i = 0; i < NWORKERS; i++) {
                sp_test_proc_stop(&workers[i], 10000, NULL);
                sp_test_proc_free(&workers[i]);
        }
        sp_test_proc_free(&cp);
        cleanup_sandboxes();
        sp_test_pg_stop(&pg);
        sp_test_tmpdir_remove(top);
        free(top);
}

/* A new tenant and its key. */
static void new_tenant(const char *name, char key[static 256])
{
        char body[200];
        snprintf(body, sizeof(body), "{\"name\":\"%s-%d\"}", name, (int)getpid());
        _cleanup_json_ json_object *t = api(admin_key, "POST", "/v1/tenants", 201, body, NULL);
        snprintf(body, sizeof(body), "{\"name\":\"k\",\"tenant_id\":\"%s\"}", str(t, "id"));
        _cleanup_json_ json_object *k = api(admin_key, "POST", "/v1/keys", 201, body, NULL);
        snprintf(key, 256, "%s", str(k, "secret"));
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
        ck_assert_str_eq(str(s, "state"), "running");
        ck_assert_str_eq(str(s, "metadata.owner"), "t1");
        ck_assert_ptr_nonnull(str(s, "worker_id"));
        ck_assert_str_eq(action(key, id, "pause"), "paused");
        ck_assert_str_eq(action(key, id, "resume"), "running");
        ck_assert_str_eq(action(key, id, "suspend"), "suspended");
        ck_assert_str_eq(action(key, id, "wake"), "running");
        ck_assert_str_eq(action(key, id, "stop"), "stopped");
        ck_assert_str_eq(action(key, id, "start"), "running");
        /* A state that does not allow it. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/resume", id);
        json_object_put(api(key, "POST", path, 409, NULL, NULL));
        /* Delete, and it is gone. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *d = api(key, "DELETE", path, 202, NULL, NULL);
        json_object_put(wait_op(key, str(d, "operation.id"), true));
        json_object_put(api(key, "GET", path, 404, NULL, NULL));
}
END_TEST

START_TEST(placement_spreads_and_avoids_cordoned)
{
        char key[256];
        new_tenant("place", key);
        _cleanup_json_ json_object *ws = api(admin_key, "GET", "/v1/workers", 200, NULL, NULL);
        json_object *arr = NULL;
        json_object_object_get_ex(ws, "workers", &arr);
        char cordoned[64], path[160];
        snprintf(cordoned, sizeof(cordoned), "%s", str(json_object_array_get_idx(arr, 0), "id"));
        snprintf(path, sizeof(path), "/v1/workers/%s/cordon", cordoned);
        _cleanup_json_ json_object *w = api(admin_key, "POST", path, 200, NULL, NULL);
        ck_assert_str_eq(str(w, "state"), "cordoned");
        /* Tenants may not cordon. */
        json_object_put(api(key, "POST", path, 403, NULL, NULL));
        char used[4][64];
        for (int i = 0; i < 4; i++) {
                const char *id = create_sandbox(key, "{\"template\":\"base\",\"resources\":{\"memory_mb\":64}}");
                snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
                _cleanup_json_ json_object *s = api(key, "GET", path, 200, NULL, NULL);
                snprintf(used[i], sizeof(used[i]), "%s", str(s, "worker_id"));
                ck_assert_str_ne(used[i], cordoned);
        }
        /* Spread: both uncordoned workers got some. */
        ck_assert_msg(strcmp(used[0], used[1]) != 0 || strcmp(used[1], used[2]) != 0 || strcmp(used[2], used[3]) != 0,
                      "every sandbox landed on %s", used[0]);
        snprintf(path, sizeof(path), "/v1/workers/%s/uncordon", cordoned);
        json_object_put(api(admin_key, "POST", path, 200, NULL, NULL));
        /* The list, paginated. */
        _cleanup_json_ json_object *p1 = api(key, "GET", "/v1/sandboxes?limit=3", 200, NULL, NULL);
        json_object *a1 = NULL;
        json_object_object_get_ex(p1, "sandboxes", &a1);
        ck_assert_int_eq(json_object_array_length(a1), 3);
        snprintf(path, sizeof(path), "/v1/sandboxes?limit=3&cursor=%s", str(p1, "next_cursor"));
        _cleanup_json_ json_object *p2 = api(key, "GET", path, 200, NULL, NULL);
        json_object *a2 = NULL;
        json_object_object_get_ex(p2, "sandboxes", &a2);
        ck_assert_int_eq(json_object_array_length(a2), 1);
        ck_assert_ptr_null(str(p2, "next_cursor"));
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
        ck_assert_str_eq(str(a, "sandbox.id"), str(b, "sandbox.id"));
        ck_assert_str_eq(str(a, "operation.id"), str(b, "operation.id"));
        json_object_put(api(key, "POST", "/v1/sandboxes", 409, "{\"template\":\"base\"}", hdr));
        _cleanup_json_ json_object *list = api(key, "GET", "/v1/sandboxes", 200, NULL, NULL);
        json_object *arr = NULL;
        json_object_object_get_ex(list, "sandboxes", &arr);
        ck_assert_int_eq(json_object_array_length(arr), 1);
        json_object_put(wait_op(key, str(a, "operation.id"), true));

        /* Bad input: each names the problem, none creates anything. */
        _cleanup_json_ json_object *e1 = api(key, "POST", "/v1/sandboxes", 400, "{\"template\":", NULL);
        ck_assert_str_eq(str(e1, "error.code"), "invalid_argument");
        _cleanup_json_ json_object *e2 =
                api(key, "POST", "/v1/sandboxes", 400, "{\"template\":\"base\",\"x\":1}", NULL);
        ck_assert_ptr_nonnull(strstr(str(e2, "error.message"), "x"));
        _cleanup_json_ json_object *e3 =
                api(key, "POST", "/v1/sandboxes", 400, "{\"template\":\"base\",\"resources\":{\"memory_mb\":1}}", NULL);
        ck_assert_ptr_nonnull(strstr(str(e3, "error.message"), "memory_mb"));
        _cleanup_json_ json_object *e4 = api(key, "POST", "/v1/sandboxes", 404, "{\"template\":\"nope\"}", NULL);
        ck_assert_ptr_nonnull(strstr(str(e4, "error.message"), "nope"));
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
        ck_assert_str_eq(str(foreign, "error.code"), str(absent, "error.code"));
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
        snprintf(path, sizeof(path), "/v1/operations/%s", str(r, "operation.id"));
        json_object_put(api(b, "GET", path, 404, NULL, NULL));
        /* Still a's, and still running. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *s = api(a, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(str(s, "state"), "running");
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
                        if (sp_test_http(api_port, "POST", "/v1/sandboxes", headers, body, 5000, &r, NULL) == 0)
                                sp_test_http_response_free(&r);
                }
                _exit(0);
        }
        usleep(15 * 1000);
        ck_assert_int_eq(kill(-cp.pgid, SIGKILL), 0);
        int st;
        waitpid(kid, &st, 0);
        /* A new control plane on the same database and ports. */
        sp_error *e = NULL;
        sp_test_proc_opts opts = {.log_path = cp.log_path};
        sp_test_ok(sp_test_proc_start(&cp2, "controlplane", (const char *const *)cp.argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&cp2, "127.0.0.1", api_port, "/healthz", 30000, &e), &e);
        /* Every client retries with its key. */
        char ids[N][64];
        for (int i = 0; i < N; i++) {
                _cleanup_json_ json_object *r = api(key, "POST", "/v1/sandboxes", 202, body, hdr[i]);
                snprintf(ids[i], sizeof(ids[i]), "%s", str(r, "sandbox.id"));
                json_object_put(wait_op(key, str(r, "operation.id"), true));
                for (int j = 0; j < i; j++)
                        ck_assert_str_ne(ids[i], ids[j]);
        }
        _cleanup_json_ json_object *list = api(key, "GET", "/v1/sandboxes?limit=100", 200, NULL, NULL);
        json_object *arr = NULL;
        json_object_object_get_ex(list, "sandboxes", &arr);
        ck_assert_int_eq(json_object_array_length(arr), N);
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                ck_assert_str_eq(str(json_object_array_get_idx(arr, i), "state"), "running");
        /* No orphans: after reconciliation, the workers together hold exactly
         * the sandboxes the database places on them (all tenants). */
        int64_t deadline = sp_now_mono_us() + 30 * 1000000LL;
        for (;;) {
                _cleanup_json_ json_object *ws = api(admin_key, "GET", "/v1/workers", 200, NULL, NULL);
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
