/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command sessions, files and attachment tokens through the public API of a
 * real cluster (a real PostgreSQL, space-controlplane and a space-worker
 * running jail sandboxes):
 *
 * - a session runs `sh -c 'echo hi; exit 3'`, its token verifies with the
 *   key --token-public-key-out wrote and carries the claims of
 *   proto/spec/dataplane.md, and GET follows it to exit code 3; the record
 *   and its audit rows are in PostgreSQL;
 * - signals and whole-tree kills; stat, list, mkdir, move, remove and file
 *   tokens; a sandbox that is not running answers 409;
 * - every new route answers a foreign id exactly like a missing one (404);
 * - bad input (unknown fields, bad signals, empty or oversized argv and env)
 *   is a 400 that names the problem and leaves nothing; a program, cwd or
 *   user the sandbox lacks makes the session `failed` with the agent's
 *   message; Idempotency-Key retries answer the same session with a fresh
 *   token;
 * - an admin rotates the signing key: new tokens name the new key, old ones
 *   still verify with the published keys;
 * - a worker that stops answering makes calls end at the deadline (504), one
 *   marked unreachable is refused at once (503), and a create whose outcome
 *   was unknown runs exactly once when retried with its key.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space/token.h"
#include "space_cluster.h"
#include "store/db.h"

#define DEADLINE_MS 3000
#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define DP_URL "https://dp.example.test:7071"

static sp_test_space S;
static char *keydir;
static char keyfile[700], keyarg[760];
static const char *cp_args[] = {keyarg, "--attach-token-ttl-s=600", "--worker-call-timeout-ms=3000",
                                "--dataplane-url=" DP_URL "/", NULL};

static void cluster_up(void)
{
        keydir = sp_test_tmpdir("seskeys");
        snprintf(keyfile, sizeof(keyfile), "%s/token-keys.pem", keydir);
        snprintf(keyarg, sizeof(keyarg), "--token-public-key-out=%s", keyfile);
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        /* A test that failed with the worker stopped must not leave it so. */
        if (S.workers[0].pid > 0)
                kill(S.workers[0].pid, SIGCONT);
        sp_test_space_down(&S);
        sp_test_tmpdir_remove(keydir);
        free(keydir);
}

/* ---- helpers ---- */

#define API(key, method, path, status, body) sp_test_api(&S, (key), (method), (path), (status), (body), NULL)

typedef struct tenant {
        char id[64];
        char key[256];
} tenant;

static void new_tenant(const char *name, tenant *t)
{
        char body[200];
        snprintf(body, sizeof(body), "{\"name\":\"%s-%d\"}", name, (int)getpid());
        _cleanup_json_ json_object *r = API(S.admin_key, "POST", "/v1/tenants", 201, body);
        snprintf(t->id, sizeof(t->id), "%s", sp_test_jstr(r, "id"));
        snprintf(body, sizeof(body), "{\"name\":\"k\",\"tenant_id\":\"%s\"}", t->id);
        _cleanup_json_ json_object *k = API(S.admin_key, "POST", "/v1/keys", 201, body);
        snprintf(t->key, sizeof(t->key), "%s", sp_test_jstr(k, "secret"));
}

static const char *path_of(const char *fmt, const char *a, const char *b)
{
        static char bufs[4][512];
        static int n;
        char *p = bufs[n++ % 4];
        snprintf(p, 512, fmt, a, b ? b : "");
        return p;
}

static int64_t jint(json_object *o, const char *path)
{
        const char *s = sp_test_jstr(o, path);
        ck_assert_msg(s, "no %s in %s", path, json_object_to_json_string(o));
        return strtoll(s, NULL, 10);
}

/* A verifier over the PEM blocks of text (one or more public keys). */
static sp_token_verifier *verifier_from_pems(const char *text)
{
        sp_token_verifier *v = sp_token_verifier_new();
        const char *end_marker = "-----END PUBLIC KEY-----";
        for (const char *p = text; p && *p;) {
                const char *end = strstr(p, end_marker);
                if (!end)
                        break;
                end += strlen(end_marker);
                _cleanup_free_ char *one = strndup(p, (size_t)(end - p));
                sp_error *e = NULL;
                sp_test_ok(sp_token_verifier_add_key(v, one, &e), &e);
                p = end;
        }
        return v;
}

static sp_token_verifier *verifier_from_file(void)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(keyfile, 1 << 20, &b, &e), &e);
        return verifier_from_pems(b.data);
}

/* The claims of token, verified with v now; fails the test otherwise. */
static json_object *claims_of(sp_token_verifier *v, const char *token)
{
        sp_error *e = NULL;
        ck_assert_ptr_nonnull(token);
        json_object *c = sp_token_verify(v, token, sp_now_real_us() / SP_USEC_PER_SEC, &e);
        sp_test_ok(c ? 0 : -1, &e);
        return c;
}

/* The RPC address of the worker that runs sandbox sbx. */
static void worker_address(const tenant *t, const char *sbx, char out[static 300])
{
        char wid[64];
        sp_test_sandbox_worker(&S, t->key, sbx, wid);
        _cleanup_json_ json_object *w = API(S.admin_key, "GET", path_of("/v1/workers/%s", wid, NULL), 200, NULL);
        snprintf(out, 300, "%s", sp_test_jstr(w, "address"));
}

/* Creates a session (body) in sbx; returns the answer (201). */
static json_object *start(const tenant *t, const char *sbx, const char *body)
{
        return API(t->key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx, NULL), 201, body);
}

/* GETs session id until its state is want (or the test times out); returns it. */
static json_object *wait_state(const tenant *t, const char *id, const char *want)
{
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (;;) {
                json_object *s = API(t->key, "GET", path_of("/v1/sessions/%s", id, NULL), 200, NULL);
                if (strcmp(sp_test_jstr(s, "state"), want) == 0)
                        return s;
                ck_assert_msg(sp_now_mono_us() < deadline, "session %s never %s: %s", id, want,
                              json_object_to_json_string(s));
                json_object_put(s);
                usleep(100 * 1000);
        }
}

/* Runs command in sbx and returns its exit code. */
static int run(const tenant *t, const char *sbx, const char *command)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "command", json_object_new_string(command));
        _cleanup_json_ json_object *r = start(t, sbx, json_object_to_json_string(body));
        _cleanup_json_ json_object *s = wait_state(t, sp_test_jstr(r, "session.id"), "exited");
        return (int)jint(s, "exit.code");
}

/* Rows of audit_log with action for target. */
static int audits(const char *action, const char *target)
{
        cp_db *db = NULL;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(S.conninfo, &db, &e), &e);
        const char *params[] = {action, target};
        _cleanup_pgresult_ PGresult *r = NULL;
        sp_test_ok(cp_db_exec(db, "SELECT count(*) FROM audit_log WHERE action = $1 AND target = $2 AND outcome = 'ok'",
                              2, params, &r, &e),
                   &e);
        int n = atoi(PQgetvalue(r, 0, 0));
        cp_db_close(db);
        return n;
}

/* A raw call: status, body and headers, no assertion. */
static void raw(const char *key, const char *method, const char *path, const char *body, const char *header,
                sp_test_http_response *r)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        const char *headers[] = {auth, header, NULL};
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api, method, path, headers, body, 60000, r, &e), &e);
}

/* Expects status and an error message containing want. */
static void expect_error(const char *key, const char *method, const char *path, const char *body, int status,
                         const char *want)
{
        _cleanup_json_ json_object *r = API(key, method, path, status, body);
        const char *msg = sp_test_jstr(r, "error.message");
        ck_assert_msg(msg && strstr(msg, want), "%s %s: '%s' lacks '%s'", method, path, msg ? msg : "(none)", want);
}

/* ---- tests ---- */

START_TEST(session_runs_and_reports_its_exit)
{
        tenant t;
        new_tenant("ses", &t);
        char sbx[64], wkr[300];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        worker_address(&t, sbx, wkr);

        _cleanup_json_ json_object *r = start(&t, sbx, "{\"command\":\"echo hi; exit 3\"}");
        const char *id = sp_test_jstr(r, "session.id");
        ck_assert_msg(id && strncmp(id, "ses_", 4) == 0, "%s", json_object_to_json_string(r));
        ck_assert_str_eq(sp_test_jstr(r, "session.sandbox_id"), sbx);
        /* Answered once the worker accepted it: the start (pid) comes later. */
        ck_assert_str_eq(sp_test_jstr(r, "session.state"), "starting");
        ck_assert_ptr_null(sp_test_jstr(r, "session.pid"));
        json_object *argv = sp_test_jarr(json_object_object_get(r, "session"), "argv");
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 0)), "/bin/sh");
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 2)), "echo hi; exit 3");
        char url[256];
        snprintf(url, sizeof(url), DP_URL "/v1/sessions/%s/attach", id);
        ck_assert_str_eq(sp_test_jstr(r, "attach_url"), url);
        ck_assert_ptr_nonnull(sp_test_jstr(r, "token_expires_at"));

        /* The token verifies with what --token-public-key-out wrote, and says exactly this. */
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_from_file();
        _cleanup_json_ json_object *c = claims_of(v, sp_test_jstr(r, "attach_token"));
        ck_assert_str_eq(sp_test_jstr(c, "typ"), "session");
        ck_assert_str_eq(sp_test_jstr(c, "ten"), t.id);
        ck_assert_str_eq(sp_test_jstr(c, "sbx"), sbx);
        ck_assert_str_eq(sp_test_jstr(c, "ses"), id);
        ck_assert_str_eq(sp_test_jstr(c, "wkr"), wkr);
        ck_assert_str_eq(sp_test_jstr(c, "scope"), "read"); /* no stdin, no PTY */
        ck_assert_ptr_null(sp_test_jstr(c, "path"));
        ck_assert_int_eq(jint(c, "exp") - jint(c, "iat"), 600);
        int64_t told = 0;
        sp_error *e = NULL;
        sp_test_ok(sp_time_parse_rfc3339(sp_test_jstr(r, "token_expires_at"), &told, &e), &e);
        ck_assert_int_le(told / SP_USEC_PER_SEC, jint(c, "exp"));
        ck_assert_int_ge(told / SP_USEC_PER_SEC, jint(c, "exp") - 1);

        /* GET follows it to its end. */
        _cleanup_json_ json_object *done = wait_state(&t, id, "exited");
        ck_assert_int_eq(jint(done, "exit.code"), 3);
        ck_assert_int_eq(jint(done, "exit.signal"), 0);
        ck_assert_str_eq(sp_test_jstr(done, "exit.killed"), "false");
        ck_assert_int_gt(jint(done, "pid"), 0);
        ck_assert_ptr_nonnull(sp_test_jstr(done, "started_at"));
        ck_assert_ptr_nonnull(sp_test_jstr(done, "ended_at"));
        ck_assert_ptr_null(sp_test_jstr(done, "error"));
        ck_assert_int_eq(audits("session.create", id), 1);

        /* Stdin or a PTY make the token writable; a new token may ask for a scope and a lifetime. */
        _cleanup_json_ json_object *w = start(&t, sbx, "{\"argv\":[\"cat\"],\"stdin\":true}");
        _cleanup_json_ json_object *wc = claims_of(v, sp_test_jstr(w, "attach_token"));
        ck_assert_str_eq(sp_test_jstr(wc, "scope"), "write");
        _cleanup_json_ json_object *p = start(&t, sbx, "{\"argv\":[\"true\"],\"pty\":{\"rows\":40,\"cols\":100}}");
        _cleanup_json_ json_object *pc = claims_of(v, sp_test_jstr(p, "attach_token"));
        ck_assert_str_eq(sp_test_jstr(pc, "scope"), "write");
        ck_assert_str_eq(sp_test_jstr(p, "session.pty.rows"), "40");
        char tok_path[128];
        snprintf(tok_path, sizeof(tok_path), "/v1/sessions/%s/token", id);
        _cleanup_json_ json_object *n = API(t.key, "POST", tok_path, 200, "{\"scope\":\"write\",\"ttl_s\":60}");
        _cleanup_json_ json_object *nc = claims_of(v, sp_test_jstr(n, "attach_token"));
        ck_assert_str_eq(sp_test_jstr(nc, "scope"), "write");
        ck_assert_str_eq(sp_test_jstr(nc, "ses"), id);
        ck_assert_int_eq(jint(nc, "exp") - jint(nc, "iat"), 60);
        ck_assert_str_eq(sp_test_jstr(n, "attach_url"), url);
        _cleanup_json_ json_object *d = API(t.key, "POST", tok_path, 200, NULL);
        _cleanup_json_ json_object *dc = claims_of(v, sp_test_jstr(d, "attach_token"));
        ck_assert_str_eq(sp_test_jstr(dc, "scope"), "read");
        ck_assert_int_eq(jint(dc, "exp") - jint(dc, "iat"), 600);
        ck_assert_int_eq(audits("session.token", id), 2);
        expect_error(t.key, "POST", tok_path, "{\"scope\":\"root\"}", 400, "'scope' must be read or write");
        expect_error(t.key, "POST", tok_path, "{\"ttl_s\":86401}", 400, "ttl_s");

        /* The list, paginated, oldest first. */
        _cleanup_json_ json_object *p1 =
                API(t.key, "GET", path_of("/v1/sandboxes/%s/sessions?limit=2", sbx, NULL), 200, NULL);
        json_object *a1 = sp_test_jarr(p1, "sessions");
        ck_assert_uint_eq(json_object_array_length(a1), 2);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(a1, 0), "id"), id);
        ck_assert_ptr_nonnull(sp_test_jstr(p1, "next_cursor"));
        _cleanup_json_ json_object *p2 =
                API(t.key, "GET",
                    path_of("/v1/sandboxes/%s/sessions?limit=2&cursor=%s", sbx, sp_test_jstr(p1, "next_cursor")), 200,
                    NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(p2, "sessions")), 1);
        ck_assert_ptr_null(sp_test_jstr(p2, "next_cursor"));
        expect_error(t.key, "GET", path_of("/v1/sandboxes/%s/sessions?cursor=garbage", sbx, NULL), NULL, 400,
                     "cursor is malformed");

        /* Metrics count it. */
        sp_test_http_response m;
        raw(t.key, "GET", "/metrics", NULL, NULL, &m);
        ck_assert_int_eq(m.status, 200);
        const char *line = strstr(m.body, "\nspace_sessions_created_total ");
        ck_assert_msg(line && atoi(line + strlen("\nspace_sessions_created_total ")) >= 3, "%s", m.body);
        sp_test_http_response_free(&m);
}
END_TEST

START_TEST(signals_and_kills)
{
        tenant t;
        new_tenant("sig", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);

        _cleanup_json_ json_object *a = start(&t, sbx, "{\"argv\":[\"sleep\",\"1000\"]}");
        const char *id = sp_test_jstr(a, "session.id");
        ck_assert_str_eq(sp_test_jstr(a, "session.state"), "starting"); /* answered at the worker's acceptance */
        _cleanup_json_ json_object *sent =
                API(t.key, "POST", path_of("/v1/sessions/%s/signal", id, NULL), 200, "{\"signal\":\"SIGTERM\"}");
        ck_assert_str_eq(sp_test_jstr(sent, "id"), id);
        _cleanup_json_ json_object *ended = wait_state(&t, id, "exited");
        ck_assert_int_eq(jint(ended, "exit.signal"), SIGTERM);
        ck_assert_int_eq(audits("session.signal", id), 1);
        /* An ended session takes no more signals. */
        expect_error(t.key, "POST", path_of("/v1/sessions/%s/signal", id, NULL), "{\"signal\":9}", 409, "has exited");
        expect_error(t.key, "POST", path_of("/v1/sessions/%s/kill", id, NULL), NULL, 409, "has exited");

        /* A signal by number, and bad ones named. */
        _cleanup_json_ json_object *b = start(&t, sbx, "{\"argv\":[\"sleep\",\"1001\"]}");
        const char *bid = sp_test_jstr(b, "session.id");
        char sigpath[128];
        snprintf(sigpath, sizeof(sigpath), "/v1/sessions/%s/signal", bid);
        expect_error(t.key, "POST", sigpath, "{\"signal\":\"SIGBOGUS\"}", 400, "signal 'SIGBOGUS' must be");
        expect_error(t.key, "POST", sigpath, "{\"signal\":0}", 400, "between 1 and 64");
        expect_error(t.key, "POST", sigpath, "{}", 400, "missing required field 'signal'");
        expect_error(t.key, "POST", sigpath, "{\"signal\":9,\"pid\":1}", 400, "unknown field 'pid'");
        json_object_put(API(t.key, "POST", sigpath, 200, "{\"signal\":9}"));
        _cleanup_json_ json_object *bend = wait_state(&t, bid, "exited");
        ck_assert_int_eq(jint(bend, "exit.signal"), SIGKILL);

        /* Kill takes the whole process tree: the shell and both of its children. */
        _cleanup_json_ json_object *k = start(&t, sbx,
                                              "{\"command\":\"echo $$ > /tmp/pids; sleep 1234 & echo $! >> /tmp/pids; "
                                              "sleep 1234 & echo $! >> /tmp/pids; wait\"}");
        const char *kid = sp_test_jstr(k, "session.id");
        /* (The exit codes say which check failed.) */
        static const char alive[] = "[ -r /proc/$p/status ] && ! grep -q '^State:.*Z' /proc/$p/status";
        char check[512];
        snprintf(check, sizeof(check),
                 "for i in $(seq 100); do [ -r /tmp/pids ] && [ $(wc -l < /tmp/pids) -eq 3 ] && break; sleep 0.1; "
                 "done; [ $(wc -l < /tmp/pids) -eq 3 ] || exit 2; for p in $(cat /tmp/pids); do %s || exit 3; done",
                 alive);
        ck_assert_int_eq(run(&t, sbx, check), 0);
        expect_error(t.key, "POST", path_of("/v1/sessions/%s/kill", kid, NULL), "{\"hard\":true}", 400,
                     "unknown field 'hard'");
        json_object_put(API(t.key, "POST", path_of("/v1/sessions/%s/kill", kid, NULL), 200, NULL));
        _cleanup_json_ json_object *kend = wait_state(&t, kid, "exited");
        ck_assert_str_eq(sp_test_jstr(kend, "exit.killed"), "true");
        snprintf(check, sizeof(check),
                 "for i in $(seq 100); do n=0; for p in $(cat /tmp/pids); do if %s; then n=$((n+1)); fi; done; "
                 "[ $n -eq 0 ] && exit 0; sleep 0.1; done; exit $((10 + n))",
                 alive);
        ck_assert_int_eq(run(&t, sbx, check), 0);
        ck_assert_int_eq(audits("session.kill", kid), 1);
}
END_TEST

START_TEST(files_and_file_tokens)
{
        tenant t;
        new_tenant("files", &t);
        char sbx[64], wkr[300];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        worker_address(&t, sbx, wkr);
        char base[128];
        snprintf(base, sizeof(base), "/v1/sandboxes/%s/files", sbx);
        char fp[160], tp[160];
        snprintf(fp, sizeof(fp), "%s/mkdir", base);
        snprintf(tp, sizeof(tp), "%s/token", base);

        json_object_put(API(t.key, "POST", fp, 200, "{\"path\":\"/tmp/t/a/b\",\"parents\":true,\"mode\":\"0750\"}"));
        json_object_put(API(t.key, "POST", fp, 200, "{\"path\":\"/tmp/t/a/z\"}"));
        expect_error(t.key, "POST", fp, "{\"path\":\"/tmp/t/a/b\"}", 409, "mkdir /tmp/t/a/b");
        expect_error(t.key, "POST", fp, "{\"path\":\"/tmp/no/such\"}", 404, "/tmp/no/such");
        _cleanup_json_ json_object *st = API(t.key, "GET", path_of("%s/stat?path=%s", base, "/tmp/t/a/b"), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(st, "type"), "dir");
        ck_assert_int_eq(jint(st, "mode"), 0750);
        ck_assert_str_eq(sp_test_jstr(st, "name"), "b");
        _cleanup_json_ json_object *ls = API(t.key, "GET", path_of("%s/list?path=%s", base, "/tmp/t/a"), 200, NULL);
        json_object *entries = sp_test_jarr(ls, "entries");
        ck_assert_uint_eq(json_object_array_length(entries), 2);
        ck_assert_str_eq(sp_test_jstr(ls, "truncated"), "false");
        _cleanup_json_ json_object *one =
                API(t.key, "GET", path_of("%s/list?path=%s&limit=1", base, "/tmp/t/a"), 200, NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(one, "entries")), 1);
        ck_assert_str_eq(sp_test_jstr(one, "truncated"), "true");

        json_object_put(API(t.key, "POST", path_of("%s/%s", base, "move"), 200,
                            "{\"from\":\"/tmp/t/a/b\",\"to\":\"/tmp/t/a/c\"}"));
        json_object_put(API(t.key, "GET", path_of("%s/stat?path=%s", base, "/tmp/t/a/b"), 404, NULL));
        json_object_put(API(t.key, "GET", path_of("%s/stat?path=%s", base, "/tmp/t/a/c"), 200, NULL));
        expect_error(t.key, "POST", path_of("%s/%s", base, "remove"), "{\"path\":\"/tmp/t\"}", 409, "/tmp/t");
        json_object_put(
                API(t.key, "POST", path_of("%s/%s", base, "remove"), 200, "{\"path\":\"/tmp/t\",\"recursive\":true}"));
        json_object_put(API(t.key, "GET", path_of("%s/stat?path=%s", base, "/tmp/t"), 404, NULL));
        /* A relative path is from the user's home (root's: /root). */
        json_object_put(API(t.key, "POST", fp, 200, "{\"path\":\"rel\"}"));
        ck_assert_int_eq(run(&t, sbx, "[ -d /root/rel ]"), 0);
        ck_assert_int_eq(audits("files.mkdir", sbx), 3);
        ck_assert_int_eq(audits("files.move", sbx), 1);
        ck_assert_int_eq(audits("files.remove", sbx), 1);

        /* Bad input, named. */
        expect_error(t.key, "GET", path_of("%s/stat", base, NULL), NULL, 400, "'path' is required");
        expect_error(t.key, "GET", path_of("%s/list?path=/&limit=0", base, NULL), NULL, 400, "limit must be between");
        expect_error(t.key, "POST", fp, "{}", 400, "missing required field 'path'");
        expect_error(t.key, "POST", fp, "{\"path\":\"/x\",\"mode\":\"999\"}", 400, "'mode' must be octal");
        expect_error(t.key, "POST", path_of("%s/%s", base, "move"), "{\"from\":\"/x\"}", 400,
                     "missing required field 'to'");
        expect_error(t.key, "POST", path_of("%s/%s", base, "remove"), "{\"path\":\"/x\",\"force\":true}", 400,
                     "unknown field 'force'");

        /* File tokens: read by default, one path or the whole sandbox. */
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_from_file();
        _cleanup_json_ json_object *w =
                API(t.key, "POST", tp, 200, "{\"path\":\"/tmp/x\",\"scope\":\"write\",\"ttl_s\":120}");
        char url[256];
        snprintf(url, sizeof(url), DP_URL "/v1/sandboxes/%s/files", sbx);
        ck_assert_str_eq(sp_test_jstr(w, "url"), url);
        ck_assert_ptr_nonnull(sp_test_jstr(w, "expires_at"));
        _cleanup_json_ json_object *wc = claims_of(v, sp_test_jstr(w, "token"));
        ck_assert_str_eq(sp_test_jstr(wc, "typ"), "files");
        ck_assert_str_eq(sp_test_jstr(wc, "ten"), t.id);
        ck_assert_str_eq(sp_test_jstr(wc, "sbx"), sbx);
        ck_assert_str_eq(sp_test_jstr(wc, "wkr"), wkr);
        ck_assert_str_eq(sp_test_jstr(wc, "scope"), "write");
        ck_assert_str_eq(sp_test_jstr(wc, "path"), "/tmp/x");
        ck_assert_ptr_null(sp_test_jstr(wc, "ses"));
        ck_assert_int_eq(jint(wc, "exp") - jint(wc, "iat"), 120);
        _cleanup_json_ json_object *rd = API(t.key, "POST", tp, 200, NULL);
        _cleanup_json_ json_object *rc = claims_of(v, sp_test_jstr(rd, "token"));
        ck_assert_str_eq(sp_test_jstr(rc, "scope"), "read");
        ck_assert_ptr_null(sp_test_jstr(rc, "path"));
        ck_assert_int_eq(audits("files.token", sbx), 2);
        expect_error(t.key, "POST", tp, "{\"scope\":\"all\"}", 400, "'scope' must be read or write");
        expect_error(t.key, "POST", tp, "{\"path\":\"\"}", 400, "'path' must not be empty");
}
END_TEST

START_TEST(a_sandbox_not_running_is_a_conflict)
{
        tenant t;
        new_tenant("paused", &t);
        char sbx[64], state[32];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        _cleanup_json_ json_object *a = start(&t, sbx, "{\"argv\":[\"sleep\",\"1000\"]}");
        const char *id = sp_test_jstr(a, "session.id");
        sp_test_sandbox_action(&S, t.key, sbx, "pause", state);
        ck_assert_str_eq(state, "paused");
        expect_error(t.key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx, NULL), "{\"argv\":[\"true\"]}", 409,
                     "is paused, not running");
        expect_error(t.key, "GET", path_of("/v1/sandboxes/%s/files/stat?path=/", sbx, NULL), NULL, 409,
                     "is paused, not running");
        expect_error(t.key, "POST", path_of("/v1/sandboxes/%s/files/mkdir", sbx, NULL), "{\"path\":\"/x\"}", 409,
                     "is paused, not running");
        expect_error(t.key, "POST", path_of("/v1/sandboxes/%s/files/token", sbx, NULL), NULL, 409,
                     "is paused, not running");
        expect_error(t.key, "POST", path_of("/v1/sessions/%s/signal", id, NULL), "{\"signal\":\"TERM\"}", 409,
                     "is not running");
        /* Its sessions still read, and a token for one can still be had (its output is kept). */
        _cleanup_json_ json_object *s = API(t.key, "GET", path_of("/v1/sessions/%s", id, NULL), 200, NULL);
        /* The create answered before the command started, so the pause may have frozen the agent
         * before its start report: the session starts when the sandbox resumes. */
        const char *st = sp_test_jstr(s, "state");
        ck_assert_msg(strcmp(st, "running") == 0 || strcmp(st, "starting") == 0, "state %s", st);
        json_object_put(API(t.key, "POST", path_of("/v1/sessions/%s/token", id, NULL), 200, NULL));
        sp_test_sandbox_action(&S, t.key, sbx, "resume", state);
        ck_assert_str_eq(state, "running");
        json_object_put(API(t.key, "POST", path_of("/v1/sessions/%s/kill", id, NULL), 200, NULL));
        json_object_put(wait_state(&t, id, "exited"));
        ck_assert_int_eq(run(&t, sbx, "exit 0"), 0);
}
END_TEST

/* A sandbox stopped and started again: its old sessions are settled, not shown running forever. */
START_TEST(sessions_of_a_restarted_sandbox_settle)
{
        tenant t;
        new_tenant("restart", &t);
        char sbx[64], state[32];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        _cleanup_json_ json_object *a = start(&t, sbx, "{\"argv\":[\"sleep\",\"1000\"]}");
        char id[64];
        snprintf(id, sizeof(id), "%s", sp_test_jstr(a, "session.id"));
        sp_test_sandbox_action(&S, t.key, sbx, "stop", state);
        ck_assert_str_eq(state, "stopped");
        sp_test_sandbox_action(&S, t.key, sbx, "start", state);
        ck_assert_str_eq(state, "running");
        _cleanup_json_ json_object *l = API(t.key, "GET", path_of("/v1/sandboxes/%s/sessions", sbx, NULL), 200, NULL);
        json_object *arr = sp_test_jarr(l, "sessions");
        ck_assert_uint_eq(json_object_array_length(arr), 1);
        const char *listed = sp_test_jstr(json_object_array_get_idx(arr, 0), "state");
        ck_assert_msg(strcmp(listed, "exited") == 0 || strcmp(listed, "failed") == 0, "listed %s", listed);
        _cleanup_json_ json_object *g = API(t.key, "GET", path_of("/v1/sessions/%s", id, NULL), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(g, "state"), listed);
        expect_error(t.key, "POST", path_of("/v1/sessions/%s/kill", id, NULL), NULL, 409, "has");
}
END_TEST

START_TEST(tenants_cannot_touch_each_others_sessions)
{
        tenant a, b;
        new_tenant("ia", &a);
        new_tenant("ib", &b);
        char sbx[64];
        sp_test_create_sandbox(&S, a.key, SANDBOX, sbx);
        _cleanup_json_ json_object *r = start(&a, sbx, "{\"argv\":[\"sleep\",\"1000\"]}");
        char ses[64];
        snprintf(ses, sizeof(ses), "%s", sp_test_jstr(r, "session.id"));
        static const char *const missing_sbx = "sbx_00000000000000000000", *const missing_ses =
                                                                                   "ses_00000000000000000000";
        static const struct {
                const char *method, *fmt, *body;
                bool session;
        } routes[] = {
                {"POST", "/v1/sandboxes/%s/sessions", "{\"argv\":[\"true\"]}", false},
                {"GET", "/v1/sandboxes/%s/sessions", NULL, false},
                {"GET", "/v1/sandboxes/%s/files/stat?path=/", NULL, false},
                {"GET", "/v1/sandboxes/%s/files/list?path=/", NULL, false},
                {"POST", "/v1/sandboxes/%s/files/mkdir", "{\"path\":\"/owned\"}", false},
                {"POST", "/v1/sandboxes/%s/files/move", "{\"from\":\"/etc\",\"to\":\"/etc2\"}", false},
                {"POST", "/v1/sandboxes/%s/files/remove", "{\"path\":\"/etc\",\"recursive\":true}", false},
                {"POST", "/v1/sandboxes/%s/files/token", NULL, false},
                {"GET", "/v1/sessions/%s", NULL, true},
                {"POST", "/v1/sessions/%s/signal", "{\"signal\":\"KILL\"}", true},
                {"POST", "/v1/sessions/%s/kill", NULL, true},
                {"POST", "/v1/sessions/%s/token", NULL, true},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(routes); i++) {
                const char *own = routes[i].session ? ses : sbx,
                           *absent = routes[i].session ? missing_ses : missing_sbx;
                _cleanup_json_ json_object *foreign =
                        API(b.key, routes[i].method, path_of(routes[i].fmt, own, NULL), 404, routes[i].body);
                _cleanup_json_ json_object *none =
                        API(b.key, routes[i].method, path_of(routes[i].fmt, absent, NULL), 404, routes[i].body);
                ck_assert_str_eq(sp_test_jstr(foreign, "error.code"), "not_found");
                ck_assert_str_eq(sp_test_jstr(none, "error.code"), "not_found");
                /* The same words, but for the id itself. */
                char want[256];
                snprintf(want, sizeof(want), "%s", sp_test_jstr(none, "error.message"));
                char *at = strstr(want, absent);
                ck_assert_ptr_nonnull(at);
                memcpy(at, own, strlen(own));
                ck_assert_str_eq(sp_test_jstr(foreign, "error.message"), want);
        }
        /* Nothing of it happened: a's session still runs, /etc is still there, nothing was made. */
        _cleanup_json_ json_object *s = API(a.key, "GET", path_of("/v1/sessions/%s", ses, NULL), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(s, "state"), "running");
        ck_assert_int_eq(run(&a, sbx, "[ -d /etc ] && [ ! -e /owned ] && [ ! -e /etc2 ]"), 0);
        _cleanup_json_ json_object *l = API(a.key, "GET", path_of("/v1/sandboxes/%s/sessions", sbx, NULL), 200, NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(l, "sessions")), 2);
        json_object_put(API(a.key, "POST", path_of("/v1/sessions/%s/kill", ses, NULL), 200, NULL));
}
END_TEST

/* The number of sessions the sandbox has. */
static size_t nsessions(const tenant *t, const char *sbx)
{
        _cleanup_json_ json_object *l =
                API(t->key, "GET", path_of("/v1/sandboxes/%s/sessions?limit=1000", sbx, NULL), 200, NULL);
        return json_object_array_length(sp_test_jarr(l, "sessions"));
}

START_TEST(bad_input_is_named_and_leaves_nothing)
{
        tenant t;
        new_tenant("bad", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        char sp[128];
        snprintf(sp, sizeof(sp), "/v1/sandboxes/%s/sessions", sbx);
        expect_error(t.key, "POST", sp, "{\"argv\":[\"ls\"],\"shell\":true}", 400, "unknown field 'shell'");
        expect_error(t.key, "POST", sp, "{\"argv\":[]}", 400, "'argv' must name a program");
        expect_error(t.key, "POST", sp, "{}", 400, "argv or command is required");
        expect_error(t.key, "POST", sp, "{\"argv\":[\"ls\"],\"command\":\"ls\"}", 400, "not both");
        expect_error(t.key, "POST", sp, "{\"argv\":[\"ls\"],\"env\":{\"1X\":\"y\"}}", 400, "name '1X'");
        expect_error(t.key, "POST", sp, "{\"argv\":[\"ls\"],\"pty\":{\"rows\":0}}", 400, "rows");
        _cleanup_buf_ sp_buf big = SP_BUF_INIT;
        _cleanup_free_ char *chunk = malloc(100001);
        memset(chunk, 'a', 100000);
        chunk[100000] = '\0';
        sp_buf_appendf(&big, NULL, "{\"argv\":[\"echo\",\"%s\",\"%s\",\"%s\"]}", chunk, chunk, chunk);
        expect_error(t.key, "POST", sp, big.data, 400, "'argv' is longer than 262144 bytes in all");
        sp_buf_clear(&big);
        sp_buf_appendf(&big, NULL, "{\"argv\":[\"env\"],\"env\":{");
        for (int i = 0; i < 21; i++) /* 2.1 MB: a body over 1 MiB is taken, the env is not */
                sp_buf_appendf(&big, NULL, "%s\"E%d\":\"%s\"", i ? "," : "", i, chunk);
        sp_buf_appendf(&big, NULL, "}}");
        expect_error(t.key, "POST", sp, big.data, 400, "'env' is longer than 2097152 bytes in all");
        sp_buf_clear(&big);
        sp_buf_appendf(&big, NULL, "{\"argv\":[\"x\"");
        for (int i = 0; i < 4096; i++)
                sp_buf_appendf(&big, NULL, ",\"a\"");
        sp_buf_appendf(&big, NULL, "]}");
        expect_error(t.key, "POST", sp, big.data, 400, "'argv' has more than 4096 items");
        sp_buf_clear(&big);
        for (int i = 0; i < 85; i++) /* a body over the route's 8 MiB */
                sp_buf_appendf(&big, NULL, "%s", chunk);
        _cleanup_free_ char *huge = NULL;
        ck_assert_int_ge(asprintf(&huge, "{\"command\":\"%s\"}", big.data), 0);
        json_object_put(API(t.key, "POST", sp, 413, huge));

        /* What only the sandbox knows comes after the answer (the worker accepted the
         * Exec): the session fails with the agent's message and nothing runs. */
        const char *lacks[][2] = {{"{\"argv\":[\"/no/such/program\"]}", "/no/such/program"},
                                  {"{\"argv\":[\"ls\"],\"cwd\":\"/no/such/dir\"}", "/no/such/dir"},
                                  {"{\"argv\":[\"ls\"],\"user\":\"ghost\"}", "ghost"}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(lacks); i++) {
                _cleanup_json_ json_object *a = start(&t, sbx, lacks[i][0]);
                ck_assert_str_eq(sp_test_jstr(a, "session.state"), "starting");
                _cleanup_json_ json_object *f = wait_state(&t, sp_test_jstr(a, "session.id"), "failed");
                ck_assert_msg(strstr(sp_test_jstr(f, "error"), lacks[i][1]), "%s", json_object_to_json_string(f));
                ck_assert_ptr_null(sp_test_jstr(f, "pid"));
        }
        ck_assert_uint_eq(nsessions(&t, sbx), 3);
        /* A user the sandbox has works. */
        _cleanup_json_ json_object *u =
                start(&t, sbx,
                      "{\"command\":\"[ $(id -u) -eq 1000 ] && [ $(pwd) = /tmp ]\",\"user\":\"user\","
                      "\"cwd\":\"/tmp\",\"env\":{\"GREETING\":\"hi\"}}");
        _cleanup_json_ json_object *ue = wait_state(&t, sp_test_jstr(u, "session.id"), "exited");
        ck_assert_int_eq(jint(ue, "exit.code"), 0);
        ck_assert_str_eq(sp_test_jstr(ue, "user"), "user");
        ck_assert_str_eq(sp_test_jstr(ue, "cwd"), "/tmp");
        ck_assert_ptr_null(strstr(json_object_to_json_string(ue), "GREETING")); /* env is not kept */
        /* And the environment reached the command. */
        ck_assert_int_eq(run(&t, sbx, "exit 0"), 0);
        _cleanup_json_ json_object *env =
                start(&t, sbx, "{\"command\":\"[ \\\"$GREETING\\\" = hi ]\",\"env\":{\"GREETING\":\"hi\"}}");
        _cleanup_json_ json_object *envend = wait_state(&t, sp_test_jstr(env, "session.id"), "exited");
        ck_assert_int_eq(jint(envend, "exit.code"), 0);
}
END_TEST

static json_object *all_pages(const char *key, const char *path, const char *field);

/* A session's tag: kept with it, answered with it, filtered on by the list;
 * a bad tag is a 400 that creates nothing. A live GET says where the output
 * ends. */
START_TEST(tags_label_sessions_and_filter_lists)
{
        tenant t;
        new_tenant("tag", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        char sp[128];
        snprintf(sp, sizeof(sp), "/v1/sandboxes/%s/sessions", sbx);
        _cleanup_free_ char *t257 = malloc(258);
        memset(t257, 't', 257);
        t257[257] = '\0';
        _cleanup_free_ char *long_tag = NULL;
        ck_assert_int_ge(asprintf(&long_tag, "{\"argv\":[\"true\"],\"tag\":\"%s\"}", t257), 0);
        expect_error(t.key, "POST", sp, long_tag, 400, "'tag' is longer than 256 bytes");
        expect_error(t.key, "POST", sp, "{\"argv\":[\"true\"],\"tag\":\"\"}", 400,
                     "'tag' must be 1 to 256 bytes of UTF-8 without control characters");
        expect_error(t.key, "POST", sp, "{\"argv\":[\"true\"],\"tag\":\"a\\tb\"}", 400, "'tag' must be");
        expect_error(t.key, "POST", sp, "{\"argv\":[\"true\"],\"tag\":1}", 400, "'tag' must be a string");
        ck_assert_uint_eq(nsessions(&t, sbx), 0);

        _cleanup_json_ json_object *w1 =
                start(&t, sbx, "{\"command\":\"printf abc; sleep 600\",\"tag\":\"web server\"}");
        _cleanup_json_ json_object *w2 = start(&t, sbx, "{\"argv\":[\"true\"],\"tag\":\"web server\"}");
        _cleanup_json_ json_object *d = start(&t, sbx, "{\"argv\":[\"true\"],\"tag\":\"db\"}");
        _cleanup_json_ json_object *none = start(&t, sbx, "{\"argv\":[\"true\"]}");
        ck_assert_str_eq(sp_test_jstr(w1, "session.tag"), "web server");
        ck_assert_str_eq(sp_test_jstr(d, "session.tag"), "db");
        ck_assert_ptr_null(sp_test_jstr(none, "session.tag"));
        ck_assert_uint_eq(nsessions(&t, sbx), 4);

        /* The list by tag, oldest first; a tag no session has lists nothing. */
        _cleanup_json_ json_object *web = API(t.key, "GET", path_of("%s?tag=web%%20server", sp, NULL), 200, NULL);
        json_object *wa = sp_test_jarr(web, "sessions");
        ck_assert_uint_eq(json_object_array_length(wa), 2);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(wa, 0), "id"), sp_test_jstr(w1, "session.id"));
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(wa, 1), "id"), sp_test_jstr(w2, "session.id"));
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(wa, 1), "tag"), "web server");
        _cleanup_json_ json_object *paged = all_pages(t.key, path_of("%s?tag=web%%20server", sp, NULL), "sessions");
        ck_assert_uint_eq(json_object_array_length(paged), 2);
        _cleanup_json_ json_object *db = API(t.key, "GET", path_of("%s?tag=db", sp, NULL), 200, NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(db, "sessions")), 1);
        _cleanup_json_ json_object *no = API(t.key, "GET", path_of("%s?tag=nothing", sp, NULL), 200, NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(no, "sessions")), 0);
        expect_error(t.key, "GET", path_of("%s?tag=", sp, NULL), NULL, 400,
                     "query parameter 'tag' must be 1 to 256 bytes of UTF-8 without control characters");

        /* A finished session keeps its tag; a running one's GET says where its output ends. */
        json_object_put(wait_state(&t, sp_test_jstr(d, "session.id"), "exited"));
        /* The GET that saw it end may have asked the worker (and says where
         * the output ends); the record is finished now, and the next is not. */
        _cleanup_json_ json_object *de =
                API(t.key, "GET", path_of("/v1/sessions/%s", sp_test_jstr(d, "session.id"), NULL), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(de, "state"), "exited");
        ck_assert_str_eq(sp_test_jstr(de, "tag"), "db");
        ck_assert_ptr_null(sp_test_jstr(de, "output_end")); /* not asked of the worker once ended */
        const char *wid = sp_test_jstr(w1, "session.id");
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *g = API(t.key, "GET", path_of("/v1/sessions/%s", wid, NULL), 200, NULL);
                ck_assert_str_eq(sp_test_jstr(g, "tag"), "web server");
                if (sp_test_jstr(g, "output_end") && jint(g, "output_end") == 3)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "output_end never 3: %s", json_object_to_json_string(g));
                usleep(100 * 1000);
        }
        json_object_put(API(t.key, "POST", path_of("/v1/sessions/%s/kill", wid, NULL), 200, NULL));
}
END_TEST

START_TEST(idempotent_retries_answer_the_same_session)
{
        tenant t;
        new_tenant("idem", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        char sp[128];
        snprintf(sp, sizeof(sp), "/v1/sandboxes/%s/sessions", sbx);
        const char *body = "{\"command\":\"echo once >> /tmp/runs; exit 5\"}";
        sp_test_http_response a, b, c;
        raw(t.key, "POST", sp, body, "Idempotency-Key: run-once-1", &a);
        ck_assert_msg(a.status == 201, "%d %s", a.status, a.body);
        raw(t.key, "POST", sp, body, "Idempotency-Key: run-once-1", &b);
        ck_assert_msg(b.status == 201, "%d %s", b.status, b.body);
        ck_assert_ptr_nonnull(strcasestr(b.headers, "Idempotent-Replayed: true"));
        _cleanup_json_ json_object *ja = sp_test_http_json(&a), *jb = sp_test_http_json(&b);
        ck_assert_str_eq(sp_test_jstr(ja, "session.id"), sp_test_jstr(jb, "session.id"));
        /* A fresh token for the same session. */
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_from_file();
        _cleanup_json_ json_object *cb = claims_of(v, sp_test_jstr(jb, "attach_token"));
        ck_assert_str_eq(sp_test_jstr(cb, "ses"), sp_test_jstr(ja, "session.id"));
        /* The same key for another request is a conflict. */
        raw(t.key, "POST", sp, "{\"command\":\"exit 6\"}", "Idempotency-Key: run-once-1", &c);
        ck_assert_int_eq(c.status, 409);
        ck_assert_ptr_nonnull(strstr(c.body, "already used for a different request"));
        sp_test_http_response_free(&a);
        sp_test_http_response_free(&b);
        sp_test_http_response_free(&c);
        _cleanup_json_ json_object *end = wait_state(&t, sp_test_jstr(ja, "session.id"), "exited");
        ck_assert_int_eq(jint(end, "exit.code"), 5);
        ck_assert_int_eq(run(&t, sbx, "[ $(wc -l < /tmp/runs) -eq 1 ]"), 0);
        ck_assert_uint_eq(nsessions(&t, sbx), 2);
}
END_TEST

START_TEST(rotated_keys_sign_new_tokens_and_old_ones_verify)
{
        tenant t;
        new_tenant("rot", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        _cleanup_json_ json_object *before = start(&t, sbx, "{\"argv\":[\"true\"]}");
        _cleanup_json_ json_object *k0 = API(S.admin_key, "GET", "/v1/token-keys", 200, NULL);
        json_object *keys0 = sp_test_jarr(k0, "keys");
        ck_assert_uint_ge(json_object_array_length(keys0), 1);
        char old_kid[32];
        snprintf(old_kid, sizeof(old_kid), "%s", sp_test_jstr(json_object_array_get_idx(keys0, 0), "kid"));
        json_object_put(API(t.key, "GET", "/v1/token-keys", 403, NULL));
        json_object_put(API(t.key, "POST", "/v1/token-keys/rotate", 403, NULL));

        _cleanup_json_ json_object *k1 = API(S.admin_key, "POST", "/v1/token-keys/rotate", 200, NULL);
        json_object *keys1 = sp_test_jarr(k1, "keys");
        ck_assert_uint_eq(json_object_array_length(keys1), json_object_array_length(keys0) + 1);
        json_object *cur = json_object_array_get_idx(keys1, 0);
        ck_assert_str_eq(sp_test_jstr(cur, "current"), "true");
        ck_assert_str_ne(sp_test_jstr(cur, "kid"), old_kid);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(keys1, 1), "kid"), old_kid);
        ck_assert_ptr_nonnull(sp_test_jstr(json_object_array_get_idx(keys1, 1), "retired_at"));
        ck_assert_int_eq(audits("token_key.rotate", sp_test_jstr(cur, "kid")), 1);

        /* This replica signs with the new key at once; the published keys verify old and new. */
        _cleanup_json_ json_object *after = start(&t, sbx, "{\"argv\":[\"true\"]}");
        _cleanup_buf_ sp_buf pems = SP_BUF_INIT;
        for (size_t i = 0; i < json_object_array_length(keys1); i++)
                sp_buf_appendf(&pems, NULL, "%s", sp_test_jstr(json_object_array_get_idx(keys1, i), "public_key"));
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_from_pems(pems.data);
        _cleanup_json_ json_object *c_old = claims_of(v, sp_test_jstr(before, "attach_token"));
        _cleanup_json_ json_object *c_new = claims_of(v, sp_test_jstr(after, "attach_token"));
        ck_assert_str_eq(sp_test_jstr(c_old, "kid"), old_kid);
        ck_assert_str_eq(sp_test_jstr(c_new, "kid"), sp_test_jstr(cur, "kid"));
        /* A data plane configured from the file written at start does not know the new key. */
        _cleanup_token_verifier_ sp_token_verifier *stale = verifier_from_file();
        sp_error *e = NULL;
        ck_assert_ptr_null(
                sp_token_verify(stale, sp_test_jstr(after, "attach_token"), sp_now_real_us() / SP_USEC_PER_SEC, &e));
        ck_assert_str_eq(e->message, "unknown signing key");
        sp_error_free(e);
}
END_TEST

/* A request in a child, so that several can wait on a stopped worker at once. */
static pid_t raw_in_child(const char *key, const char *method, const char *path, const char *body, int want)
{
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                sp_test_http_response r;
                raw(key, method, path, body, NULL, &r);
                bool ok = r.status == want && strstr(r.body, "did not answer");
                if (!ok)
                        fprintf(stderr, "%s %s: %d %s\n", method, path, r.status, r.body);
                _exit(ok ? 0 : 1);
        }
        return pid;
}

START_TEST(a_silent_worker_meets_the_deadline)
{
        tenant t;
        new_tenant("stop", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        char sp[128];
        snprintf(sp, sizeof(sp), "/v1/sandboxes/%s/sessions", sbx);
        const char *body = "{\"command\":\"echo run >> /tmp/late; exit 7\"}";
        pid_t worker = S.workers[0].pid;
        ck_assert_int_gt(worker, 0);

        /* The worker stops answering: calls end at the deadline with 504. */
        ck_assert_int_eq(kill(worker, SIGSTOP), 0);
        int64_t t0 = sp_now_mono_us();
        pid_t stat_kid =
                raw_in_child(t.key, "GET", path_of("/v1/sandboxes/%s/files/stat?path=/", sbx, NULL), NULL, 504);
        sp_test_http_response r;
        raw(t.key, "POST", sp, body, "Idempotency-Key: late-1", &r);
        int64_t took_ms = (sp_now_mono_us() - t0) / 1000;
        ck_assert_msg(r.status == 504, "%d %s", r.status, r.body);
        ck_assert_msg(took_ms >= DEADLINE_MS - 100 && took_ms < DEADLINE_MS + 20000, "answered after %lld ms",
                      (long long)took_ms);
        _cleanup_json_ json_object *err = sp_test_http_json(&r);
        ck_assert_str_eq(sp_test_jstr(err, "error.code"), "timeout");
        const char *msg = sp_test_jstr(err, "error.message");
        ck_assert_msg(strstr(msg, "did not answer ExecStream within 3000 ms") && strstr(msg, "may have started"), "%s",
                      msg);
        const char *ses = strstr(msg, "ses_");
        ck_assert_ptr_nonnull(ses);
        char id[32];
        snprintf(id, sizeof(id), "%.24s", ses);
        sp_test_http_response_free(&r);
        int st = 0;
        ck_assert_int_eq(waitpid(stat_kid, &st, 0), stat_kid);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stat did not end with 504");

        /* Once the worker is marked unreachable, calls are refused at once; records still read. */
        int64_t deadline = sp_now_mono_us() + 30 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *sb = API(t.key, "GET", path_of("/v1/sandboxes/%s", sbx, NULL), 200, NULL);
                if (strcmp(sp_test_jstr(sb, "worker_reachable"), "false") == 0)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "the stopped worker never became unreachable");
                usleep(100 * 1000);
        }
        expect_error(t.key, "GET", path_of("/v1/sandboxes/%s/files/stat?path=/", sbx, NULL), NULL, 503,
                     "is unreachable");
        expect_error(t.key, "POST", sp, "{\"argv\":[\"true\"]}", 503, "is unreachable");
        expect_error(t.key, "GET", path_of("/v1/sandboxes/%s/stats", sbx, NULL), NULL, 503, "is unreachable");
        _cleanup_json_ json_object *rec = API(t.key, "GET", path_of("/v1/sessions/%s", id, NULL), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(rec, "state"), "starting");
        ck_assert_ptr_nonnull(strstr(sp_test_jstr(rec, "error"), "did not answer"));

        /* Back: the retry with its key runs the session exactly once, whether the worker got the first ask or not. */
        ck_assert_int_eq(kill(worker, SIGCONT), 0);
        sp_test_space_wait_workers(&S, 1, 60000);
        deadline = sp_now_mono_us() + 30 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *sb = API(t.key, "GET", path_of("/v1/sandboxes/%s", sbx, NULL), 200, NULL);
                if (strcmp(sp_test_jstr(sb, "worker_reachable"), "true") == 0)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "the worker never became reachable again");
                usleep(100 * 1000);
        }
        raw(t.key, "POST", sp, body, "Idempotency-Key: late-1", &r);
        ck_assert_msg(r.status == 201, "%d %s", r.status, r.body);
        _cleanup_json_ json_object *again = sp_test_http_json(&r);
        sp_test_http_response_free(&r);
        ck_assert_str_eq(sp_test_jstr(again, "session.id"), id);
        _cleanup_json_ json_object *end = wait_state(&t, id, "exited");
        ck_assert_int_eq(jint(end, "exit.code"), 7);
        ck_assert_int_eq(run(&t, sbx, "[ $(wc -l < /tmp/late) -eq 1 ]"), 0);

        sp_test_http_response m;
        raw(t.key, "GET", "/metrics", NULL, NULL, &m);
        const char *line = strstr(m.body, "space_api_worker_call_failures_total{reason=\"timeout\"} ");
        ck_assert_msg(line && atoi(strchr(line, '}') + 2) >= 2, "%s", m.body);
        sp_test_http_response_free(&m);
}
END_TEST

/* Every item of every page of an admin listing (?limit=1 pages one at a time), as a new array. */
static json_object *all_pages(const char *key, const char *path, const char *field)
{
        json_object *all = json_object_new_array();
        char cursor[256] = "";
        for (int page = 0; page < 10000; page++) {
                char target[600];
                snprintf(target, sizeof(target), "%s%slimit=1%s%s", path, strchr(path, '?') ? "&" : "?",
                         cursor[0] ? "&cursor=" : "", cursor);
                _cleanup_json_ json_object *r = API(key, "GET", target, 200, NULL);
                json_object *items = sp_test_jarr(r, field);
                ck_assert_uint_le(json_object_array_length(items), 1);
                for (size_t i = 0; i < json_object_array_length(items); i++)
                        json_object_array_add(all, json_object_get(json_object_array_get_idx(items, i)));
                const char *next = sp_test_jstr(r, "next_cursor");
                if (!next)
                        return all;
                snprintf(cursor, sizeof(cursor), "%s", next);
        }
        ck_abort_msg("%s never ended", path);
        return NULL;
}

/* How many items of list have field equal to value. */
static int count_with(json_object *list, const char *field, const char *value)
{
        int n = 0;
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                const char *v = sp_test_jstr(json_object_array_get_idx(list, i), field);
                n += v && strcmp(v, value) == 0;
        }
        return n;
}

/* GET /v1/tenants, /v1/keys, /v1/join-tokens and /v1/sandboxes/{id}/stats:
 * paged, never a secret, admin-only where they should be, tenant-scoped. */
START_TEST(read_routes_list_scope_and_sample)
{
        tenant a, b;
        new_tenant("ra", &a);
        new_tenant("rb", &b);

        /* Tenants: every one exactly once across pages, the system tenant too; admins only. */
        _cleanup_json_ json_object *tenants = all_pages(S.admin_key, "/v1/tenants", "tenants");
        ck_assert_int_eq(count_with(tenants, "id", a.id), 1);
        ck_assert_int_eq(count_with(tenants, "id", b.id), 1);
        ck_assert_int_eq(count_with(tenants, "id", "ten_system"), 1);
        expect_error(a.key, "GET", "/v1/tenants", NULL, 403, "admin");
        expect_error(S.admin_key, "GET", "/v1/tenants?cursor=bm9wZQ", NULL, 400, "cursor is malformed");
        expect_error(S.admin_key, "GET", "/v1/tenants?limit=0", NULL, 400, "limit");

        /* Keys: a tenant sees its own only (revoked ones marked); never a secret or its hash. */
        _cleanup_json_ json_object *k2 = API(a.key, "POST", "/v1/keys", 201, "{\"name\":\"second\"}");
        char k2id[64];
        snprintf(k2id, sizeof(k2id), "%s", sp_test_jstr(k2, "id"));
        json_object_put(API(a.key, "DELETE", path_of("/v1/keys/%s", k2id, NULL), 204, NULL));
        _cleanup_json_ json_object *mine = all_pages(a.key, "/v1/keys", "keys");
        ck_assert_uint_eq(json_object_array_length(mine), 2);
        ck_assert_int_eq(count_with(mine, "tenant_id", a.id), 2);
        ck_assert_int_eq(count_with(mine, "id", k2id), 1);
        for (size_t i = 0; i < 2; i++) {
                json_object *k = json_object_array_get_idx(mine, i);
                bool is_k2 = strcmp(sp_test_jstr(k, "id"), k2id) == 0;
                ck_assert_str_eq(sp_test_jstr(k, "revoked"), is_k2 ? "true" : "false");
                ck_assert_int_eq(sp_test_jstr(k, "revoked_at") != NULL, is_k2);
                ck_assert_ptr_nonnull(sp_test_jstr(k, "created_at"));
                ck_assert(!json_object_object_get_ex(k, "secret", NULL));
                ck_assert(!json_object_object_get_ex(k, "secret_hash", NULL));
        }
        ck_assert_ptr_null(strstr(json_object_to_json_string(mine), a.key));
        ck_assert_ptr_null(strstr(json_object_to_json_string(mine), sp_test_jstr(k2, "secret")));
        expect_error(a.key, "GET", path_of("/v1/keys?tenant_id=%s", b.id, NULL), NULL, 403, "another tenant");
        _cleanup_json_ json_object *own = all_pages(a.key, path_of("/v1/keys?tenant_id=%s", a.id, NULL), "keys");
        ck_assert_uint_eq(json_object_array_length(own), 2);
        /* An admin: one tenant's keys with ?tenant_id=, every key without. */
        _cleanup_json_ json_object *theirs =
                all_pages(S.admin_key, path_of("/v1/keys?tenant_id=%s", b.id, NULL), "keys");
        ck_assert_uint_eq(json_object_array_length(theirs), 1);
        ck_assert_int_eq(count_with(theirs, "tenant_id", b.id), 1);
        _cleanup_json_ json_object *every = all_pages(S.admin_key, "/v1/keys", "keys");
        ck_assert_int_eq(count_with(every, "tenant_id", a.id), 2);
        ck_assert_int_eq(count_with(every, "tenant_id", b.id), 1);
        expect_error(S.admin_key, "GET", "/v1/keys?tenant_id=ten_nosuchtenant", NULL, 404, "not found");

        /* Join tokens: listed with their state, never the token; admins only. */
        _cleanup_json_ json_object *jt = API(S.admin_key, "POST", "/v1/join-tokens", 201, "{\"description\":\"rr\"}");
        _cleanup_json_ json_object *tokens = all_pages(S.admin_key, "/v1/join-tokens", "join_tokens");
        ck_assert_int_eq(count_with(tokens, "id", sp_test_jstr(jt, "id")), 1);
        for (size_t i = 0; i < json_object_array_length(tokens); i++) {
                json_object *t = json_object_array_get_idx(tokens, i);
                ck_assert(!json_object_object_get_ex(t, "token", NULL));
                if (strcmp(sp_test_jstr(t, "id"), sp_test_jstr(jt, "id")) == 0) {
                        ck_assert_str_eq(sp_test_jstr(t, "state"), "active");
                        ck_assert_str_eq(sp_test_jstr(t, "description"), "rr");
                }
        }
        ck_assert_ptr_null(strstr(json_object_to_json_string(tokens), sp_test_jstr(jt, "token")));
        expect_error(a.key, "GET", "/v1/join-tokens", NULL, 403, "admin");

        /* Stats: a sample from the worker for its own tenant; 404 for another; 409 once off its worker. */
        char sbx[64], state[32];
        sp_test_create_sandbox(&S, a.key, SANDBOX, sbx);
        _cleanup_json_ json_object *st = API(a.key, "GET", path_of("/v1/sandboxes/%s/stats", sbx, NULL), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(st, "sandbox_id"), sbx);
        ck_assert_int_eq(jint(st, "resources.memory_mb"), 64);
        ck_assert_int_gt(jint(st, "memory_bytes"), 0);
        ck_assert_int_gt(jint(st, "pids"), 0);
        ck_assert_int_ge(jint(st, "cpu_ns"), 0);
        ck_assert_ptr_nonnull(sp_test_jstr(st, "sampled_at"));
        expect_error(b.key, "GET", path_of("/v1/sandboxes/%s/stats", sbx, NULL), NULL, 404, "not found");
        expect_error(a.key, "GET", "/v1/sandboxes/sbx_nosuchsandbox/stats", NULL, 404, "not found");
        sp_test_sandbox_action(&S, a.key, sbx, "pause", state);
        ck_assert_str_eq(state, "paused");
        json_object_put(API(a.key, "GET", path_of("/v1/sandboxes/%s/stats", sbx, NULL), 200, NULL));
        sp_test_sandbox_action(&S, a.key, sbx, "stop", state);
        ck_assert_str_eq(state, "stopped");
        expect_error(a.key, "GET", path_of("/v1/sandboxes/%s/stats", sbx, NULL), NULL, 409, "is stopped");
}
END_TEST

/* The control plane stopped while a call to a (stopped) worker is open: it
 * fails that call, frees everything and exits without a sanitizer report. */
START_TEST(the_control_plane_stops_clean)
{
        tenant t;
        new_tenant("bye", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX, sbx);
        pid_t worker = S.workers[0].pid, cp = S.cp[0].pid;
        ck_assert_int_eq(kill(worker, SIGSTOP), 0);
        pid_t kid = fork();
        ck_assert_int_ge(kid, 0);
        if (kid == 0) {
                sp_test_http_response r;
                raw(t.key, "GET", path_of("/v1/sandboxes/%s/files/stat?path=/", sbx, NULL), NULL, NULL, &r);
                _exit(0);
        }
        usleep(500 * 1000);
        ck_assert_int_eq(kill(cp, SIGTERM), 0);
        ck_assert_msg(sp_test_pid_wait_gone(cp, 30000) == 0, "the control plane did not exit");
        ck_assert_int_eq(kill(worker, SIGCONT), 0);
        int st = 0;
        ck_assert_int_eq(waitpid(kid, &st, 0), kid);
        _cleanup_free_ char *tail = sp_test_file_tail(S.cp[0].log_path, 200);
        ck_assert_ptr_nonnull(tail);
        ck_assert_msg(!strstr(tail, "Sanitizer") && !strstr(tail, "runtime error"), "%s", tail);
        ck_assert_msg(strstr(tail, "stopping"), "no clean stop in the log: %s", tail);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_sessions");
        TCase *tc = tcase_create("sessions");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, session_runs_and_reports_its_exit);
        tcase_add_test(tc, signals_and_kills);
        tcase_add_test(tc, files_and_file_tokens);
        tcase_add_test(tc, a_sandbox_not_running_is_a_conflict);
        tcase_add_test(tc, sessions_of_a_restarted_sandbox_settle);
        tcase_add_test(tc, tenants_cannot_touch_each_others_sessions);
        tcase_add_test(tc, bad_input_is_named_and_leaves_nothing);
        tcase_add_test(tc, tags_label_sessions_and_filter_lists);
        tcase_add_test(tc, idempotent_retries_answer_the_same_session);
        tcase_add_test(tc, read_routes_list_scope_and_sample);
        tcase_add_test(tc, rotated_keys_sign_new_tokens_and_old_ones_verify); /* after the tests using the key file */
        tcase_add_test(tc, a_silent_worker_meets_the_deadline); /* it stops the worker for a while */
        tcase_add_test(tc, the_control_plane_stops_clean); /* last: it stops the control plane */
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
