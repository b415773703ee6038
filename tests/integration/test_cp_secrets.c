/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Secrets (docs/secrets.md) through the public API of a real cluster
 * (PostgreSQL, space-controlplane with a key file from the harness, one
 * space-worker):
 *
 * - a secret is a tenant's: created, listed, read and revoked; its value
 *   is never in an answer, a list, an error (a bad value is refused without
 *   being quoted), the control plane's log (at debug level) or /metrics;
 *   malformed ones are a 400 naming the field and make nothing; a name is
 *   taken once (409) and free again once revoked; another tenant sees,
 *   uses and deletes none of it (404 exactly like a missing one);
 * - the value is not in PostgreSQL in the clear: not in the secrets table
 *   and nowhere in a pg_dump of the database; what is there opens with the
 *   key file (store/envelope.h), bound to the secret;
 * - without a key file a control plane answers the secrets routes 503
 *   naming --secrets-key-file, and the rest of its API works;
 * - sandboxes are given secrets their profile grants: each variable holds a
 *   placeholder of the sandbox's own, never the value; one not granted,
 *   unknown, another tenant's, expired or whose variable is taken is a 400
 *   naming it and makes nothing; the bindings the worker is sent hold the
 *   value for what the current profile grants only; revoking answers 200
 *   once the worker has the change, 202 while it is away (SIGSTOP) and the
 *   controller follows; a profile that drops a grant takes it at once; a
 *   worker whose heartbeat says secrets_missing is sent them again;
 * - usage: the records of kind secret in the sandboxes' egress logs (put
 *   there as the gateway would), this secret's only, counted per sandbox;
 * - spacectl secret create reads the value from stdin or a file and refuses
 *   one on its command line; ls, get, usage, rm, rewrap; sandbox create
 *   --secret VAR=NAME;
 * - key rotation: a new key on top of the file, POST
 *   /v1/admin/secrets/rewrap (admin only; idempotent), the old key dropped,
 *   the control plane restarted: every value still opens, under the new key,
 *   and a sandbox's bindings are built with it.
 *
 * The end-to-end path to the gateway (the value in the bound header) is the
 * worker side's test; here the bindings a worker would be sent are built
 * with the control plane's own function against this test's database.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <dirent.h>
#include <libpq-fe.h>
#include <signal.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "store/envelope.h"
#include "store/keyring.h"
#include "store/secrets.h"
#include "test_spacectl_util.h"

static sp_test_space S;
static char value_tag[64]; /* in every value this test sends, and nowhere it must not be */

static void cluster_up(void)
{
        snprintf(value_tag, sizeof(value_tag), "XYZZY%dQ%lld", (int)getpid(), (long long)(sp_now_mono_us() % 100000));
        static const char *const cp_args[] = {"--log-level=debug", NULL};
        sp_test_space_opts o = {.workers = 1, .no_network = true, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        snprintf(ctl_home, sizeof(ctl_home), "%s", S.dir);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/spacectl.json", S.dir);
}

static void cluster_down(void)
{
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/controlplane0.log", S.dir);
        sp_test_dump_file_tail("control plane", logp, 60);
        snprintf(logp, sizeof(logp), "%s/w0/worker.log", S.dir);
        sp_test_dump_file_tail("worker", logp, 30);
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

/* A value of this test: "sk-<tag>-<which>". */
static const char *value_of(const char *which)
{
        static char bufs[4][128];
        static int n;
        char *p = bufs[n++ % 4];
        snprintf(p, 128, "sk-%s-%s", value_tag, which);
        return p;
}

/* Calls the API and asserts the status, and that the answer does not hold
 * any value of this test. Returns the body: put it. */
static json_object *call(const char *key, const char *method, const char *path, int status, const char *body)
{
        json_object *o = API(key, method, path, status, body);
        const char *text = o ? json_object_to_json_string(o) : "";
        ck_assert_msg(!strstr(text, value_tag), "%s %s answered a value: %s", method, path, text);
        return o;
}

static void expect_error(const char *key, const char *method, const char *path, const char *body, int status,
                         const char *want)
{
        _cleanup_json_ json_object *r = call(key, method, path, status, body);
        const char *msg = sp_test_jstr(r, "error.message");
        ck_assert_msg(msg && strstr(msg, want), "%s %s %s: '%s' lacks '%s'", method, path, body ? body : "",
                      msg ? msg : "(none)", want);
}

/* The body of a secret named name with value v (and extra fields, "" or ",..."). */
static char *secret_body(const char *name, const char *v, const char *extra)
{
        sp_buf b = SP_BUF_INIT;
        sp_buf_appendf(&b, NULL,
                       "{\"name\":\"%s\",\"value\":\"%s\",\"hosts\":[\"api.example.test\"],"
                       "\"inject\":{\"header\":\"Authorization\",\"format\":\"Bearer {{secret}}\"}%s}",
                       name, v, extra);
        return sp_buf_steal(&b);
}

static size_t count_secrets(const char *key)
{
        _cleanup_json_ json_object *l = call(key, "GET", "/v1/secrets", 200, NULL);
        return json_object_array_length(sp_test_jarr(l, "secrets"));
}

static PGconn *db_connect(void)
{
        PGconn *c = PQconnectdb(S.conninfo);
        ck_assert_msg(PQstatus(c) == CONNECTION_OK, "database: %s", PQerrorMessage(c));
        return c;
}

/* The value of the live secret id, opened from its row with the key file. */
static char *open_value(PGconn *db, const char *id)
{
        const char *p[] = {id};
        PGresult *res =
                PQexecParams(db,
                             "SELECT tenant_id, key_id, encode(wrapped_key, 'base64'), encode(ciphertext, 'base64') "
                             "FROM secrets WHERE id = $1",
                             1, NULL, p, NULL, NULL, 0);
        ck_assert_int_eq(PQresultStatus(res), PGRES_TUPLES_OK);
        ck_assert_int_eq(PQntuples(res), 1);
        _cleanup_(cp_keyring_freep) cp_keyring *k = NULL;
        sp_error *e = NULL;
        sp_test_ok(cp_keyring_load(S.secrets_key_file, &k, &e), &e);
        _cleanup_buf_ sp_buf w = SP_BUF_INIT, ct = SP_BUF_INIT;
        /* PostgreSQL's base64 breaks lines: drop the breaks. */
        for (int col = 2; col <= 3; col++) {
                char *t = PQgetvalue(res, 0, col), *o = t;
                for (char *i = t; *i; i++)
                        if (*i != '\n')
                                *o++ = *i;
                *o = '\0';
                sp_test_ok(sp_base64_decode(col == 2 ? &w : &ct, t, strlen(t), 0, &e), &e);
        }
        char *v = NULL;
        size_t n = 0;
        sp_test_ok(cp_envelope_open(k, id, PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), w.data, w.len, ct.data, ct.len,
                                    &v, &n, &e),
                   &e);
        PQclear(res);
        return v;
}

/* The text of a whole file (at most 64 MiB): free it. */
static char *slurp(const char *path)
{
        sp_buf b = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(path, 64u << 20, &b, &e), &e);
        return b.data ? sp_buf_steal(&b) : strdup("");
}

/* Runs command in sbx through a session (tenant key) and returns its exit code. */
static int run(const char *key, const char *sbx, const char *command)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "command", json_object_new_string(command));
        _cleanup_json_ json_object *r =
                call(key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201, json_object_to_json_string(body));
        const char *sid = sp_test_jstr(r, "session.id");
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *st = call(key, "GET", path_of("/v1/sessions/%s", sid), 200, NULL);
                if (strcmp(sp_test_jstr(st, "state"), "exited") == 0)
                        return atoi(sp_test_jstr(st, "exit.code"));
                ck_assert_msg(sp_now_mono_us() < deadline, "session %s did not end", sid);
                usleep(100 * 1000);
        }
}

/* The bindings the control plane sends sandbox sbx's worker now, built by
 * its own function (store/secrets.h) against this test's database with the
 * key file, for the profile its row holds. with_keys false: without a key
 * ring. */
static json_object *bindings_of(const char *sbx, bool with_keys)
{
        sp_error *e = NULL;
        cp_db *db = NULL;
        sp_test_ok(cp_db_open(S.conninfo, &db, &e), &e);
        _cleanup_(cp_keyring_freep) cp_keyring *k = NULL;
        if (with_keys)
                sp_test_ok(cp_keyring_load(S.secrets_key_file, &k, &e), &e);
        PGresult *res = NULL;
        const char *p[] = {sbx};
        sp_test_ok(cp_db_exec(db,
                              "SELECT coalesce(spec->'egress_profile', '{\"name\":\"none\"}')::text FROM sandboxes "
                              "WHERE id = $1",
                              1, p, &res, &e),
                   &e);
        ck_assert_int_eq(PQntuples(res), 1);
        _cleanup_json_ json_object *profile = json_tokener_parse(PQgetvalue(res, 0, 0));
        PQclear(res);
        json_object *out = NULL;
        sp_test_ok(cp_sandbox_secret_bindings(db, k, sbx, profile, &out, &e), &e);
        cp_db_close(db);
        return out;
}

/* The sandbox's secret named name as its JSON shows it ({name, env, placeholder, revoked}), or NULL. */
static json_object *sandbox_secret(json_object *sandbox, const char *name)
{
        json_object *arr = sp_test_jarr(sandbox, "secrets");
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                if (strcmp(sp_test_jstr(json_object_array_get_idx(arr, i), "name"), name) == 0)
                        return json_object_array_get_idx(arr, i);
        return NULL;
}

static void wait_applied(const char *key, const char *sbx, int64_t seconds)
{
        int64_t deadline = sp_now_mono_us() + seconds * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *sb = call(key, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
                if (strcmp(sp_test_jstr(sb, "egress_applied"), "true") == 0)
                        return;
                ck_assert_msg(sp_now_mono_us() < deadline, "the change never reached sandbox %s's worker", sbx);
                usleep(200 * 1000);
        }
}

static size_t count_sandboxes(const char *key)
{
        _cleanup_json_ json_object *l = call(key, "GET", "/v1/sandboxes", 200, NULL);
        return json_object_array_length(sp_test_jarr(l, "sandboxes"));
}

static int64_t db_count(const char *sql, const char *param)
{
        PGconn *db = db_connect();
        const char *p[] = {param};
        PGresult *res = PQexecParams(db, sql, param ? 1 : 0, NULL, p, NULL, NULL, 0);
        ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s", PQerrorMessage(db));
        int64_t n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        PQfinish(db);
        return n;
}

START_TEST(secrets_are_a_tenants_and_write_only)
{
        char a[256], b[256];
        sp_test_new_tenant(&S, "sec-a", a);
        sp_test_new_tenant(&S, "sec-b", b);
        ck_assert_uint_eq(count_secrets(a), 0);

        /* Made: the answer has everything but the value. */
        _cleanup_free_ char *body = secret_body("openai", value_of("openai"), ",\"rate_per_min\":60");
        _cleanup_json_ json_object *made = call(a, "POST", "/v1/secrets", 201, body);
        ck_assert_str_eq(sp_test_jstr(made, "name"), "openai");
        ck_assert_str_eq(sp_test_jstr(made, "env"), "OPENAI");
        ck_assert_str_eq(sp_test_jstr(made, "rate_per_min"), "60");
        ck_assert_str_eq(sp_test_jstr(made, "sandboxes"), "0");
        ck_assert_ptr_null(sp_test_jstr(made, "value"));
        ck_assert_ptr_null(sp_test_jstr(made, "revoked_at"));
        ck_assert_int_eq(strncmp(sp_test_jstr(made, "id"), "sec_", 4), 0);
        ck_assert_str_eq(json_object_to_json_string_ext(sp_test_jarr(made, "hosts"), JSON_C_TO_STRING_PLAIN),
                         "[\"api.example.test\"]");
        _cleanup_json_ json_object *got = call(a, "GET", "/v1/secrets/openai", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(got, "id"), sp_test_jstr(made, "id"));
        _cleanup_json_ json_object *gho = call(
                a, "POST", "/v1/secrets", 201,
                path_of("{\"name\":\"gh-token\",\"value\":\"%s\",\"hosts\":[\"*.GitHub.test\"],\"inject\":{\"basic\":"
                        "{\"username\":\"x-access-token\"}},\"env\":\"GH_TOKEN\",\"expires_at\":\"2099-01-01T00:00:"
                        "00Z\"}",
                        value_of("gh")));
        ck_assert_str_eq(sp_test_jstr(gho, "env"), "GH_TOKEN");
        ck_assert_str_eq(sp_test_jstr(gho, "expires_at"), "2099-01-01T00:00:00.000000Z");
        ck_assert_str_eq(json_object_to_json_string_ext(sp_test_jarr(gho, "hosts"), JSON_C_TO_STRING_PLAIN),
                         "[\"*.github.test\"]");
        ck_assert_uint_eq(count_secrets(a), 2);

        /* Taken once. */
        _cleanup_free_ char *again = secret_body("openai", value_of("again"), "");
        expect_error(a, "POST", "/v1/secrets", again, 409, "secret 'openai' exists");

        /* Malformed: 400 naming the field, nothing made, the value never quoted. */
        const char *const bad[][2] = {
                {",\"hosts\":[]", "duplicate key"},
                {",\"surprise\":1", "unknown field 'surprise'"},
                {",\"env\":\"1BAD\"", "env must be 1 to 128"},
                {",\"rate_per_min\":-1", "rate_per_min must be between"},
                {",\"expires_at\":\"2000-01-01T00:00:00Z\"", "expires_at is in the past"},
                {",\"expires_at\":\"soon\"", "expires_at must be"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_free_ char *bb = secret_body("bad", value_of("bad"), bad[i][0]);
                expect_error(a, "POST", "/v1/secrets", bb, 400, bad[i][1]);
        }
        const char *const bad_whole[][2] = {
                {"{\"name\":\"bad\",\"value\":\"%s\",\"hosts\":[\"a b\"],\"inject\":{\"header\":\"X\"}}",
                 "field 'hosts[0]'"},
                {"{\"name\":\"bad\",\"value\":\"%s\",\"hosts\":[\"*\"],\"inject\":{\"header\":\"X\"}}",
                 "field 'hosts[0]'"},
                {"{\"name\":\"bad\",\"value\":\"%s\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"Host\"}}",
                 "field 'inject.header'"},
                {"{\"name\":\"bad\",\"value\":\"%s\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X\",\"format\":"
                 "\"x\"}}",
                 "field 'inject.format'"},
                {"{\"name\":\"bad\",\"value\":\"%s\",\"hosts\":[\"a.test\"],\"inject\":{}}", "field 'inject'"},
                {"{\"name\":\"Bad\",\"value\":\"%s\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X\"}}",
                 "name must be"},
                {"{\"name\":\"bad\",\"value\":\"%s\\n\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X\"}}",
                 "field 'value' must be printable ASCII"},
                {"{\"name\":\"bad\",\"value\":\"%s\\u00e9\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X\"}}",
                 "field 'value' must be printable ASCII"},
                {"{\"name\":\"bad\",\"value\":[\"%s\"],\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X\"}}",
                 "field 'value' must be a string"},
                {"{\"name\":\"bad\",\"value\":\"%s\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"X\"},}",
                 "malformed JSON"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_whole); i++)
                expect_error(a, "POST", "/v1/secrets", path_of(bad_whole[i][0], value_of("bad")), 400, bad_whole[i][1]);
        ck_assert_uint_eq(count_secrets(a), 2);
        expect_error(a, "GET", "/v1/secrets/bad", NULL, 404, "secret 'bad' not found");

        /* Another tenant: sees none, touches none, exactly like a missing one; may use the name. */
        ck_assert_uint_eq(count_secrets(b), 0);
        expect_error(b, "GET", "/v1/secrets/openai", NULL, 404, "secret 'openai' not found");
        expect_error(b, "DELETE", "/v1/secrets/openai", NULL, 404, "secret 'openai' not found");
        expect_error(b, "GET", "/v1/secrets/missing", NULL, 404, "secret 'missing' not found");
        _cleanup_free_ char *bs = secret_body("openai", value_of("b"), "");
        json_object_put(call(b, "POST", "/v1/secrets", 201, bs));
        _cleanup_json_ json_object *still = call(a, "GET", "/v1/secrets/openai", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(still, "id"), sp_test_jstr(made, "id"));

        /* Revoked: gone from the list, its value erased, its name free again. */
        _cleanup_json_ json_object *del = call(a, "DELETE", "/v1/secrets/openai", 200, NULL);
        ck_assert_ptr_nonnull(sp_test_jstr(del, "revoked_at"));
        ck_assert_str_eq(sp_test_jstr(del, "sandboxes_updating"), "0");
        expect_error(a, "GET", "/v1/secrets/openai", NULL, 404, "not found");
        expect_error(a, "DELETE", "/v1/secrets/openai", NULL, 404, "not found");
        ck_assert_uint_eq(count_secrets(a), 1);
        ck_assert_uint_eq(count_secrets(b), 1);
        PGconn *db = db_connect();
        const char *p[] = {sp_test_jstr(made, "id")};
        PGresult *res = PQexecParams(db,
                                     "SELECT ciphertext IS NULL AND wrapped_key IS NULL AND deleted_at IS NOT NULL "
                                     "FROM secrets WHERE id = $1",
                                     1, NULL, p, NULL, NULL, 0);
        ck_assert_str_eq(PQgetvalue(res, 0, 0), "t");
        PQclear(res);
        PQfinish(db);
        _cleanup_json_ json_object *remade = call(a, "POST", "/v1/secrets", 201, again);
        ck_assert_str_ne(sp_test_jstr(remade, "id"), sp_test_jstr(made, "id"));

        /* Admin routes stay an admin's. */
        expect_error(a, "POST", "/v1/admin/secrets/rewrap", NULL, 403, "admin");
}
END_TEST

START_TEST(values_are_sealed_at_rest)
{
        char t[256];
        sp_test_new_tenant(&S, "sec-rest", t);
        _cleanup_free_ char *body = secret_body("at-rest", value_of("rest"), "");
        _cleanup_json_ json_object *made = call(t, "POST", "/v1/secrets", 201, body);
        const char *id = sp_test_jstr(made, "id");

        /* Not in the row: its columns hold bytes that are not the value. */
        PGconn *db = db_connect();
        const char *p[] = {id, value_of("rest")};
        PGresult *res = PQexecParams(db,
                                     "SELECT position(convert_to($2, 'UTF8') in ciphertext), "
                                     "position(convert_to($2, 'UTF8') in wrapped_key), "
                                     "s::text LIKE '%' || $2 || '%', key_id, length(ciphertext) FROM secrets s "
                                     "WHERE id = $1",
                                     2, NULL, p, NULL, NULL, 0);
        ck_assert_int_eq(PQntuples(res), 1);
        ck_assert_str_eq(PQgetvalue(res, 0, 0), "0");
        ck_assert_str_eq(PQgetvalue(res, 0, 1), "0");
        ck_assert_str_eq(PQgetvalue(res, 0, 2), "f");
        ck_assert_str_eq(PQgetvalue(res, 0, 3), "k1");
        ck_assert_int_eq(atoi(PQgetvalue(res, 0, 4)), (int)(CP_ENVELOPE_OVERHEAD + strlen(value_of("rest"))));
        PQclear(res);
        /* What is there opens with the key file, for this secret. */
        char *v = open_value(db, id);
        ck_assert_str_eq(v, value_of("rest"));
        cp_envelope_value_free(v, strlen(v));
        PQfinish(db);

        /* Created under an Idempotency-Key (as spacectl does): the digest kept for a day is keyed
         * (HMAC under a key from the key file), not a plain SHA-256 that confirms guessed values. */
        _cleanup_free_ char *ibody = secret_body("at-rest-idem", value_of("idem"), "");
        json_object_put(sp_test_api(&S, t, "POST", "/v1/secrets", 201, ibody, "Idempotency-Key: rest-idem-1"));
        json_object_put(sp_test_api(&S, t, "POST", "/v1/secrets", 201, ibody, "Idempotency-Key: rest-idem-1"));
        unsigned char md[32];
        unsigned int ml = 0;
        _cleanup_buf_ sp_buf plain = SP_BUF_INIT;
        sp_buf_append(&plain, "POST\0/v1/secrets\0", 18, NULL);
        sp_buf_append(&plain, ibody, strlen(ibody), NULL);
        ck_assert(EVP_Digest(plain.data, plain.len, md, &ml, EVP_sha256(), NULL) == 1);
        char hex[65];
        for (int i = 0; i < 32; i++)
                snprintf(hex + 2 * i, 3, "%02x", md[i]);
        db = db_connect();
        const char *ip[] = {"rest-idem-1"};
        res = PQexecParams(db, "SELECT encode(request_hash, 'hex') FROM idempotency_keys WHERE key = $1", 1, NULL, ip,
                           NULL, NULL, 0);
        ck_assert_int_eq(PQntuples(res), 1);
        ck_assert_int_eq(strlen(PQgetvalue(res, 0, 0)), 64);
        ck_assert_str_ne(PQgetvalue(res, 0, 0), hex);
        PQclear(res);
        PQfinish(db);

        /* Nowhere in a dump of the whole database (audit records and idempotency records included). */
        char dump[900], cmd[2000];
        snprintf(dump, sizeof(dump), "%s/dump.sql", S.dir);
        snprintf(cmd, sizeof(cmd), "'%s/pg_dump' -d '%s' -f '%s'", S.pg.bindir, S.conninfo, dump);
        ck_assert_int_eq(system(cmd), 0);
        _cleanup_free_ char *text = slurp(dump);
        ck_assert_ptr_nonnull(strstr(text, "CREATE TABLE public.secrets"));
        ck_assert_ptr_nonnull(strstr(text, id));
        ck_assert_msg(!strstr(text, value_tag), "a value is in the database dump");
        unlink(dump);

        /* Nor in /metrics, nor in the control plane's log (at debug level). */
        sp_test_http_response m;
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api, "GET", "/metrics", NULL, NULL, 10000, &m, &e), &e);
        ck_assert_int_eq(m.status, 200);
        ck_assert_ptr_null(strstr(m.body, value_tag));
        sp_test_http_response_free(&m);
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/controlplane0.log", S.dir);
        _cleanup_free_ char *log = slurp(logp);
        ck_assert_ptr_nonnull(strstr(log, "POST /v1/secrets"));
        ck_assert_msg(!strstr(log, value_tag), "a value is in the control plane's log");
}
END_TEST

/* A control plane without a key file: 503 naming the flag, the rest works. */
START_TEST(without_a_key_file_secrets_are_unavailable)
{
        char t[256];
        sp_test_new_tenant(&S, "sec-nokey", t);
        sp_error *e = NULL;
        int api = sp_test_free_port(&e), rpc = sp_test_free_port(&e);
        ck_assert_int_gt(api, 0);
        ck_assert_int_gt(rpc, 0);
        char bin[1024], db[1200], listen[80], rpcl[80], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-controlplane", sp_test_binary_dir());
        snprintf(db, sizeof(db), "--database=%s", S.conninfo);
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", api);
        snprintf(rpcl, sizeof(rpcl), "--rpc-listen=127.0.0.1:%d", rpc);
        snprintf(logp, sizeof(logp), "%s/controlplane-nokey.log", S.dir);
        const char *argv[] = {bin, db, listen, rpcl, "--name=nokey", "--log-format=text", NULL};
        sp_test_proc p = {0};
        sp_test_proc_opts o = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&p, "controlplane-nokey", argv, &o, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&p, "127.0.0.1", api, "/healthz", 30000, &e), &e);
        int mine = S.api;
        S.api = api;
        _cleanup_free_ char *body = secret_body("nokey", value_of("nokey"), "");
        expect_error(t, "GET", "/v1/secrets", NULL, 503, "--secrets-key-file");
        expect_error(t, "POST", "/v1/secrets", body, 503, "--secrets-key-file");
        expect_error(t, "GET", "/v1/secrets/x", NULL, 503, "--secrets-key-file");
        expect_error(t, "DELETE", "/v1/secrets/x", NULL, 503, "--secrets-key-file");
        expect_error(S.admin_key, "POST", "/v1/admin/secrets/rewrap", NULL, 503, "--secrets-key-file");
        json_object_put(call(t, "GET", "/v1/sandboxes", 200, NULL));
        json_object_put(call(t, "GET", "/v1/egress-profiles", 200, NULL));
        S.api = mine;
        sp_test_proc_stop(&p, 10000, NULL);
        _cleanup_free_ char *log = slurp(logp);
        ck_assert_ptr_nonnull(strstr(log, "no --secrets-key-file"));
        sp_test_proc_free(&p);
        ck_assert_uint_eq(count_secrets(t), 0);
}
END_TEST

/* A binding as the worker gets it: every field, the value opened. */
static void check_binding(json_object *b, const char *name, const char *placeholder, const char *value)
{
        ck_assert_str_eq(sp_test_jstr(b, "name"), name);
        ck_assert_str_eq(sp_test_jstr(b, "placeholder"), placeholder);
        ck_assert_str_eq(sp_test_jstr(b, "value"), value);
        ck_assert_int_eq(strncmp(sp_test_jstr(b, "id"), "sec_", 4), 0);
        ck_assert_ptr_nonnull(sp_test_jstr(b, "hosts"));
        ck_assert_ptr_nonnull(sp_test_jstr(b, "inject"));
        ck_assert_ptr_nonnull(sp_test_jstr(b, "rate_per_min"));
        ck_assert_ptr_nonnull(sp_test_jstr(b, "expires_at"));
        ck_assert_int_eq(json_object_object_length(b), 8);
}

START_TEST(sandboxes_are_given_placeholders)
{
        char t[256], o[256];
        sp_test_new_tenant(&S, "sec-sbx", t);
        sp_test_new_tenant(&S, "sec-sbx-other", o);
        _cleanup_free_ char *b1 = secret_body("openai", value_of("sbx-openai"), ",\"rate_per_min\":30");
        _cleanup_free_ char *b2 = secret_body("gh", value_of("sbx-gh"), ",\"env\":\"GH_TOKEN\"");
        _cleanup_free_ char *b3 = secret_body("other", value_of("sbx-other"), "");
        char soon[64];
        time_t at = time(NULL) + 2;
        strftime(soon, sizeof(soon), ",\"expires_at\":\"%Y-%m-%dT%H:%M:%SZ\"", gmtime(&at));
        _cleanup_free_ char *b4 = secret_body("brief", value_of("sbx-brief"), soon);
        _cleanup_free_ char *b5 = secret_body("same-env", value_of("sbx-same"), ",\"env\":\"OPENAI\"");
        json_object_put(call(t, "POST", "/v1/secrets", 201, b5));
        json_object_put(call(t, "POST", "/v1/secrets", 201, b1));
        json_object_put(call(t, "POST", "/v1/secrets", 201, b2));
        json_object_put(call(t, "POST", "/v1/secrets", 201, b3));
        json_object_put(call(t, "POST", "/v1/secrets", 201, b4));
        json_object_put(
                call(t, "POST", "/v1/egress-profiles", 201,
                     "{\"name\":\"agent\",\"secrets\":[\"openai\",\"gh\",\"brief\",\"not-yet\",\"same-env\"]}"));

        /* Refused, naming the secret, and nothing made. */
        size_t before = count_sandboxes(t);
        int64_t rows = db_count("SELECT count(*) FROM sandbox_secrets", NULL);
        expect_error(t, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":[\"other\"]}",
                     400, "secret 'other' is not granted by the sandbox's egress profile 'agent'");
        expect_error(t, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"secrets\":[\"openai\"]}", 400,
                     "egress profile 'none'");
        expect_error(t, "POST", "/v1/sandboxes",
                     "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":[\"openai\",\"not-yet\"]}", 400,
                     "secret 'not-yet' not found");
        expect_error(t, "POST", "/v1/sandboxes",
                     "{\"template\":\"base\",\"egress\":\"agent\",\"env\":{\"OPENAI\":\"x\"},\"secrets\":[\"openai\"]}",
                     400, "the variable OPENAI of secret 'openai' is already set");
        expect_error(t, "POST", "/v1/sandboxes",
                     "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":[\"openai\",\"same-env\"]}", 400,
                     "the variable OPENAI of secret 'same-env' is already set");
        expect_error(t, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":[\"Bad\"]}",
                     400, "secrets[0]");
        sleep(3);
        expect_error(t, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":[\"brief\"]}",
                     400, "secret 'brief' expired at");
        /* Another tenant's secret: not found, as if it did not exist. */
        json_object_put(call(o, "POST", "/v1/egress-profiles", 201, "{\"name\":\"agent\",\"secrets\":[\"openai\"]}"));
        expect_error(o, "POST", "/v1/sandboxes",
                     "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":[\"openai\"]}", 400,
                     "secret 'openai' not found");
        ck_assert_uint_eq(count_sandboxes(t), before);
        ck_assert_uint_eq(count_sandboxes(o), 0);
        ck_assert_int_eq(db_count("SELECT count(*) FROM sandbox_secrets", NULL), rows);

        /* Given: the variable holds a placeholder of the sandbox's own, never the value. */
        char s1[64], s2[64], s3[64];
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":[\"openai\"]}", s1);
        sp_test_create_sandbox(
                &S, t, "{\"template\":\"base\",\"egress\":\"agent\",\"secrets\":{\"MY_KEY\":\"openai\",\"GH\":\"gh\"}}",
                s2);
        sp_test_create_sandbox(
                &S, t,
                "{\"template\":\"base\",\"egress\":{\"name\":\"own\",\"secrets\":[\"gh\"]},\"secrets\":[\"gh\"]}", s3);
        _cleanup_json_ json_object *sb1 = call(t, "GET", path_of("/v1/sandboxes/%s", s1), 200, NULL);
        _cleanup_json_ json_object *sb2 = call(t, "GET", path_of("/v1/sandboxes/%s", s2), 200, NULL);
        json_object *x1 = sandbox_secret(sb1, "openai"), *x2 = sandbox_secret(sb2, "openai"),
                    *g2 = sandbox_secret(sb2, "gh");
        ck_assert_ptr_nonnull(x1);
        ck_assert_ptr_nonnull(x2);
        ck_assert_ptr_nonnull(g2);
        ck_assert_str_eq(sp_test_jstr(x1, "env"), "OPENAI");
        ck_assert_str_eq(sp_test_jstr(x2, "env"), "MY_KEY");
        ck_assert_str_eq(sp_test_jstr(g2, "env"), "GH");
        ck_assert_str_eq(sp_test_jstr(x1, "revoked"), "false");
        const char *p1 = sp_test_jstr(x1, "placeholder"), *p2 = sp_test_jstr(x2, "placeholder"),
                   *pg = sp_test_jstr(g2, "placeholder");
        ck_assert_int_eq(strncmp(p1, "space-secret-", 13), 0);
        ck_assert_uint_eq(strlen(p1), 45);
        ck_assert_str_ne(p1, p2);
        ck_assert_str_ne(p2, pg);
        char cmd[600];
        /* (the tag split in two, so that the command itself does not hold it) */
        snprintf(cmd, sizeof(cmd), "test \"$OPENAI\" = '%s' && ! env | grep -q '%.3s''%s'", p1, value_tag,
                 value_tag + 3);
        ck_assert_int_eq(run(t, s1, cmd), 0);
        snprintf(cmd, sizeof(cmd), "test \"$MY_KEY\" = '%s' && test \"$GH\" = '%s' && test -z \"$OPENAI\"", p2, pg);
        ck_assert_int_eq(run(t, s2, cmd), 0);
        _cleanup_json_ json_object *made = call(t, "GET", "/v1/secrets/openai", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(made, "sandboxes"), "2");

        /* What the worker is sent: each granted secret with its value and this sandbox's placeholder. */
        _cleanup_json_ json_object *bn1 = bindings_of(s1, true), *bn2 = bindings_of(s2, true),
                                   *bn3 = bindings_of(s3, true);
        ck_assert_uint_eq(json_object_array_length(bn1), 1);
        check_binding(json_object_array_get_idx(bn1, 0), "openai", p1, value_of("sbx-openai"));
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(bn1, 0), "rate_per_min"), "30");
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(bn1, 0), "expires_at"), "0");
        ck_assert_uint_eq(json_object_array_length(bn2), 2);
        check_binding(json_object_array_get_idx(bn2, 0), "gh", pg, value_of("sbx-gh"));
        check_binding(json_object_array_get_idx(bn2, 1), "openai", p2, value_of("sbx-openai"));
        ck_assert_uint_eq(json_object_array_length(bn3), 1);
        /* Without the key file: none of them, nothing else broken. */
        _cleanup_json_ json_object *nokey = bindings_of(s2, false);
        ck_assert_uint_eq(json_object_array_length(nokey), 0);

        /* A profile that does not grant them: the sandbox keeps its placeholder, the worker gets no value. */
        _cleanup_json_ json_object *none =
                call(t, "PUT", path_of("/v1/sandboxes/%s/egress", s1), 200, "{\"egress\":\"none\"}");
        ck_assert_str_eq(sp_test_jstr(none, "egress_applied"), "true");
        _cleanup_json_ json_object *bn1n = bindings_of(s1, true);
        ck_assert_uint_eq(json_object_array_length(bn1n), 0);
        json_object_put(call(t, "PUT", path_of("/v1/sandboxes/%s/egress", s1), 200, "{\"egress\":\"agent\"}"));
        _cleanup_json_ json_object *bn1a = bindings_of(s1, true);
        ck_assert_uint_eq(json_object_array_length(bn1a), 1);

        /* Revoked: the sandboxes that had it lose it; the answer waits for their worker. */
        _cleanup_json_ json_object *rev = call(t, "DELETE", "/v1/secrets/gh", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(rev, "sandboxes_updating"), "2");
        ck_assert_ptr_null(sp_test_jstr(rev, "message"));
        _cleanup_json_ json_object *sb2r = call(t, "GET", path_of("/v1/sandboxes/%s", s2), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(sb2r, "egress_applied"), "true");
        ck_assert_str_eq(sp_test_jstr(sandbox_secret(sb2r, "gh"), "revoked"), "true");
        _cleanup_json_ json_object *bn2r = bindings_of(s2, true), *bn3r = bindings_of(s3, true);
        ck_assert_uint_eq(json_object_array_length(bn2r), 1);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(bn2r, 0), "name"), "openai");
        ck_assert_uint_eq(json_object_array_length(bn3r), 0);
        /* A new secret of the same name is not the revoked one: the sandbox does not get it. */
        json_object_put(call(t, "POST", "/v1/secrets", 201, b2));
        _cleanup_json_ json_object *bn2n = bindings_of(s2, true);
        ck_assert_uint_eq(json_object_array_length(bn2n), 1);

        /* The profile no longer grants openai: taken from both sandboxes at once; granted again, back. */
        _cleanup_json_ json_object *upd =
                call(t, "PUT", "/v1/egress-profiles/agent", 200, "{\"secrets\":[\"gh\",\"brief\"]}");
        ck_assert_str_eq(sp_test_jstr(upd, "sandboxes_updating"), "2");
        _cleanup_json_ json_object *sb1u = call(t, "GET", path_of("/v1/sandboxes/%s", s1), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(sb1u, "egress_applied"), "true");
        _cleanup_json_ json_object *bn1u = bindings_of(s1, true), *bn2u = bindings_of(s2, true);
        ck_assert_uint_eq(json_object_array_length(bn1u), 0);
        ck_assert_uint_eq(json_object_array_length(bn2u), 0);
        json_object_put(call(t, "PUT", "/v1/egress-profiles/agent", 200, "{\"secrets\":[\"openai\"]}"));
        wait_applied(t, s1, 30);
        _cleanup_json_ json_object *bn1b = bindings_of(s1, true);
        ck_assert_uint_eq(json_object_array_length(bn1b), 1);

        for (int i = 0; i < 3; i++) {
                const char *id = i == 0 ? s1 : i == 1 ? s2 : s3;
                _cleanup_json_ json_object *del = call(t, "DELETE", path_of("/v1/sandboxes/%s", id), 202, NULL);
                json_object_put(sp_test_wait_op(&S, t, sp_test_jstr(del, "operation.id"), true));
        }
        _cleanup_json_ json_object *after = call(t, "GET", "/v1/secrets/openai", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(after, "sandboxes"), "0");
}
END_TEST

/* Appends records (JSON lines) to sandbox sbx's egress log on worker 0, as
 * its gateway would: the file in its state directory whose sandbox.json
 * names it. */
static void log_records(const char *sbx, const char *lines)
{
        char dir[800];
        snprintf(dir, sizeof(dir), "%s/w0/state/sandboxes", S.dir);
        DIR *d = opendir(dir);
        ck_assert_ptr_nonnull(d);
        struct dirent *de;
        char want[80], path[1200];
        snprintf(want, sizeof(want), "\"%s\"", sbx);
        bool done = false;
        while (!done && (de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s/sandbox.json", dir, de->d_name);
                if (access(path, R_OK) != 0)
                        continue;
                _cleanup_free_ char *json = slurp(path);
                if (!strstr(json, want))
                        continue;
                snprintf(path, sizeof(path), "%s/%s/egress.log", dir, de->d_name);
                FILE *f = fopen(path, "a");
                ck_assert_ptr_nonnull(f);
                fputs(lines, f);
                fclose(f);
                done = true;
        }
        closedir(d);
        ck_assert_msg(done, "no state directory of %s on the worker", sbx);
}

/* A secret record line for the egress log. */
static const char *record(int64_t t, const char *sbx, const char *secret_id, const char *secret, const char *decision,
                          const char *rule)
{
        static char bufs[8][600];
        static int n;
        char *p = bufs[n++ % 8];
        snprintf(p, 600,
                 "{\"time_us\":%lld,\"kind\":\"secret\",\"decision\":\"%s\",\"rule\":\"%s\",\"sandbox_id\":\"%s\","
                 "\"secret_id\":\"%s\",\"secret\":\"%s\",\"host\":\"api.example.test\"}\n",
                 (long long)t, decision, rule, sbx, secret_id, secret);
        return p;
}

START_TEST(usage_comes_from_the_sandboxes_egress_logs)
{
        char t[256], o[256];
        sp_test_new_tenant(&S, "sec-usage", t);
        sp_test_new_tenant(&S, "sec-usage-o", o);
        _cleanup_free_ char *b1 = secret_body("used", value_of("used"), "");
        _cleanup_free_ char *b2 = secret_body("unused", value_of("unused"), "");
        _cleanup_json_ json_object *s1 = call(t, "POST", "/v1/secrets", 201, b1);
        _cleanup_json_ json_object *s2 = call(t, "POST", "/v1/secrets", 201, b2);
        const char *id1 = sp_test_jstr(s1, "id"), *id2 = sp_test_jstr(s2, "id");
        json_object_put(
                call(t, "POST", "/v1/egress-profiles", 201, "{\"name\":\"u\",\"secrets\":[\"used\",\"unused\"]}"));
        /* No sandbox has it yet: nothing to ask. */
        _cleanup_json_ json_object *empty = call(t, "GET", "/v1/secrets/used/usage", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(empty, "sandboxes_total"), "0");
        ck_assert_str_eq(sp_test_jstr(empty, "complete"), "true");
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(empty, "records")), 0);

        char a[64], b[64], c[64];
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"u\",\"secrets\":[\"used\",\"unused\"]}", a);
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"u\",\"secrets\":[\"used\"]}", b);
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"u\",\"secrets\":[\"unused\"]}", c);
        int64_t now = sp_now_real_us();
        _cleanup_buf_ sp_buf la = SP_BUF_INIT, lb = SP_BUF_INIT, lc = SP_BUF_INIT;
        sp_buf_append_str(&la, record(now + 1, a, id1, "used", "allowed", "injected"), NULL);
        sp_buf_append_str(&la, record(now + 4, a, id1, "used", "allowed", "injected"), NULL);
        sp_buf_append_str(&la, record(now + 5, a, id2, "unused", "allowed", "injected"), NULL);
        sp_buf_append_str(&la, record(now + 6, a, id1, "used", "refused", "rate-limit"), NULL);
        sp_buf_appendf(&la, NULL,
                       "{\"time_us\":%lld,\"kind\":\"tcp\",\"decision\":\"allowed\",\"rule\":\"name\","
                       "\"secret_id\":\"%s\"}\n",
                       (long long)now + 2, id1);
        sp_buf_append_str(&lb, record(now + 3, b, id1, "used", "refused", "placeholder-elsewhere"), NULL);
        sp_buf_append_str(&lc, record(now + 7, c, id2, "unused", "allowed", "injected"), NULL);
        log_records(a, la.data);
        log_records(b, lb.data);
        log_records(c, lc.data);

        _cleanup_json_ json_object *u = call(t, "GET", "/v1/secrets/used/usage", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(u, "id"), id1);
        ck_assert_str_eq(sp_test_jstr(u, "name"), "used");
        ck_assert_str_eq(sp_test_jstr(u, "sandboxes_total"), "2");
        ck_assert_str_eq(sp_test_jstr(u, "complete"), "true");
        json_object *sbs = sp_test_jarr(u, "sandboxes"), *recs = sp_test_jarr(u, "records");
        ck_assert_uint_eq(json_object_array_length(sbs), 2);
        for (size_t i = 0; i < 2; i++) {
                json_object *e = json_object_array_get_idx(sbs, i);
                bool is_a = strcmp(sp_test_jstr(e, "sandbox_id"), a) == 0;
                ck_assert_msg(is_a || strcmp(sp_test_jstr(e, "sandbox_id"), b) == 0, "%s",
                              json_object_to_json_string(e));
                ck_assert_str_eq(sp_test_jstr(e, "uses"), is_a ? "3" : "1");
                ck_assert_str_eq(sp_test_jstr(e, "state"), "running");
                if (is_a) {
                        ck_assert_str_eq(sp_test_jstr(e, "by_rule.injected"), "2");
                        ck_assert_str_eq(sp_test_jstr(e, "by_rule.rate-limit"), "1");
                } else {
                        ck_assert_str_eq(sp_test_jstr(e, "by_rule.placeholder-elsewhere"), "1");
                }
                ck_assert_ptr_null(sp_test_jstr(e, "error"));
        }
        /* This secret's only, of kind secret only, oldest first, each naming its sandbox. */
        ck_assert_uint_eq(json_object_array_length(recs), 4);
        const char *const rules[] = {"injected", "placeholder-elsewhere", "injected", "rate-limit"};
        for (size_t i = 0; i < 4; i++) {
                json_object *r = json_object_array_get_idx(recs, i);
                ck_assert_str_eq(sp_test_jstr(r, "rule"), rules[i]);
                ck_assert_str_eq(sp_test_jstr(r, "secret_id"), id1);
                ck_assert_str_eq(sp_test_jstr(r, "sandbox_id"), i == 1 ? b : a);
        }
        /* Fewer records asked of each sandbox: the last one of a's secret records only. */
        _cleanup_json_ json_object *one = call(t, "GET", "/v1/secrets/used/usage?limit=1", 200, NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(one, "records")), 2);
        expect_error(t, "GET", "/v1/secrets/used/usage?limit=0", NULL, 400, "limit must be between 1 and 100");
        expect_error(t, "GET", "/v1/secrets/used/usage?limit=101", NULL, 400, "limit");
        expect_error(t, "GET", "/v1/secrets/nope/usage", NULL, 404, "secret 'nope' not found");
        expect_error(o, "GET", "/v1/secrets/used/usage", NULL, 404, "secret 'used' not found");

        /* Revoked, it still shows where it was used; a deleted sandbox's log is gone with it. */
        json_object_put(call(t, "DELETE", "/v1/secrets/used", 200, NULL));
        _cleanup_json_ json_object *del = call(t, "DELETE", path_of("/v1/sandboxes/%s", b), 202, NULL);
        json_object_put(sp_test_wait_op(&S, t, sp_test_jstr(del, "operation.id"), true));
        _cleanup_json_ json_object *r2 = call(t, "GET", "/v1/secrets/used/usage", 200, NULL);
        ck_assert_ptr_nonnull(sp_test_jstr(r2, "revoked_at"));
        ck_assert_str_eq(sp_test_jstr(r2, "sandboxes_total"), "1");
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(r2, "records")), 3);
        for (int i = 0; i < 2; i++) {
                _cleanup_json_ json_object *d = call(t, "DELETE", path_of("/v1/sandboxes/%s", i ? c : a), 202, NULL);
                json_object_put(sp_test_wait_op(&S, t, sp_test_jstr(d, "operation.id"), true));
        }
}
END_TEST

START_TEST(spacectl_drives_secrets)
{
        char t[256];
        sp_test_new_tenant(&S, "sec-ctl", t);
        char ep[80], key[300], admin[300];
        snprintf(ep, sizeof(ep), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api);
        snprintf(key, sizeof(key), "SPACE_API_KEY=%s", t);
        snprintf(admin, sizeof(admin), "SPACE_API_KEY=%s", S.admin_key);
        const char *env[] = {ep, key, NULL}, *admin_env[] = {ep, admin, NULL};
        char input[200];
        snprintf(input, sizeof(input), "%s\n", value_of("ctl"));
        {
                /* The value from stdin (one trailing newline dropped). */
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, input, "secret", "create", "ctl-key", "--host",
                                                            "api.example.test", "--rate-per-min", "5", NULL);
                ctl_assert_code(r, 0);
                ck_assert_str_eq(ctl_line(&r), "ctl-key (sandboxes given it hold a placeholder in $CTL_KEY)");
        }
        {
                /* Never from the command line: refused before anything is sent, the value not repeated. */
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "secret", "create", "argv-key", "--host",
                                                            "api.example.test", "--value", value_of("argv"), NULL);
                ctl_assert_code(r, 2);
                ck_assert_ptr_nonnull(strstr(r.err.data, "never given on the command line"));
                ck_assert_ptr_null(strstr(r.err.data, value_tag));
                _cleanup_ctl_result_ ctl_result p =
                        ctl_run(env, NULL, "secret", "create", "argv-key", value_of("argv"), "--host", "a.test", NULL);
                ctl_assert_code(p, 2);
                ck_assert_ptr_null(strstr(p.err.data, value_tag));
                _cleanup_ctl_result_ ctl_result none =
                        ctl_run(env, "", "secret", "create", "argv-key", "--host", "a.test", NULL);
                ctl_assert_code(none, 2);
                ck_assert_ptr_nonnull(strstr(none.err.data, "no value"));
                expect_error(t, "GET", "/v1/secrets/argv-key", NULL, 404, "not found");
        }
        {
                /* From a file, with basic authentication; a bad value: the API's message, not the value. */
                char file[800];
                snprintf(file, sizeof(file), "%s/ctl-value", S.dir);
                ck_assert_int_eq(sp_file_write_atomic(file, value_of("file"), strlen(value_of("file")), 0600, NULL), 0);
                _cleanup_ctl_result_ ctl_result r =
                        ctl_run(env, NULL, "--json", "secret", "create", "ctl-basic", "--host", "*.example.test",
                                "--basic", "--username", "x-access-token", "--from-file", file, NULL);
                ctl_assert_code(r, 0);
                _cleanup_json_ json_object *o = ctl_json(&r);
                ck_assert_str_eq(sp_test_jstr(o, "inject.basic.username"), "x-access-token");
                ck_assert_ptr_null(strstr(r.out.data, value_tag));
                snprintf(input, sizeof(input), "%s\tok\x01\n", value_of("bad"));
                _cleanup_ctl_result_ ctl_result bad =
                        ctl_run(env, input, "secret", "create", "ctl-bad", "--host", "a.test", NULL);
                ctl_assert_code(bad, 1);
                ck_assert_ptr_nonnull(strstr(bad.err.data, "field 'value' must be printable ASCII"));
                ck_assert_ptr_null(strstr(bad.err.data, value_tag));
        }
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "secret", "ls", NULL);
                ctl_assert_code(r, 0);
                ck_assert_msg(strstr(r.out.data, "ctl-key") && strstr(r.out.data, "CTL_KEY") &&
                                      strstr(r.out.data, "Authorization: Bearer {{secret}}") &&
                                      strstr(r.out.data, "basic x-access-token") && !strstr(r.out.data, value_tag),
                              "%s", r.out.data);
                _cleanup_ctl_result_ ctl_result g = ctl_run(env, NULL, "secret", "get", "ctl-key", NULL);
                ctl_assert_code(g, 0);
                ck_assert_msg(strstr(g.out.data, "rate_per_min: 5") && !strstr(g.out.data, value_tag), "%s",
                              g.out.data);
        }
        {
                _cleanup_ctl_result_ ctl_result r =
                        ctl_run(env, NULL, "egress", "create", "ctl", "--secret", "ctl-key", NULL);
                ctl_assert_code(r, 0);
                _cleanup_json_ json_object *p = call(t, "GET", "/v1/egress-profiles/ctl", 200, NULL);
                ck_assert_str_eq(json_object_to_json_string(sp_test_jarr(p, "secrets")), "[ \"ctl-key\" ]");
        }
        char sbx[64];
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "sandbox", "create", "--template", "base",
                                                            "--egress", "ctl", "--secret", "MINE=ctl-key", NULL);
                ctl_assert_code(r, 0);
                snprintf(sbx, sizeof(sbx), "%s", ctl_line(&r));
                _cleanup_ctl_result_ ctl_result mixed =
                        ctl_run(env, NULL, "sandbox", "create", "--template", "base", "--egress", "ctl", "--secret",
                                "MINE=ctl-key", "--secret", "ctl-key", NULL);
                ctl_assert_code(mixed, 2);
        }
        ck_assert_int_eq(run(t, sbx, "test -n \"$MINE\" && test \"${MINE#space-secret-}\" != \"$MINE\""), 0);
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "secret", "usage", "ctl-key", NULL);
                ctl_assert_code(r, 0);
                ck_assert_msg(strstr(r.out.data, sbx) && strstr(r.out.data, "USES"), "%s", r.out.data);
                _cleanup_ctl_result_ ctl_result j = ctl_run(env, NULL, "--json", "secret", "usage", "ctl-key", NULL);
                ctl_assert_code(j, 0);
                _cleanup_json_ json_object *o = ctl_json(&j);
                ck_assert_str_eq(sp_test_jstr(o, "sandboxes_total"), "1");
        }
        {
                _cleanup_ctl_result_ ctl_result no = ctl_run(env, NULL, "secret", "rewrap", NULL);
                ctl_assert_code(no, 1);
                _cleanup_ctl_result_ ctl_result r = ctl_run(admin_env, NULL, "secret", "rewrap", "--max", "10", NULL);
                ctl_assert_code(r, 0);
                ck_assert_str_eq(ctl_line(&r), "0 data keys wrapped again under 'k1'; 0 still under other keys");
        }
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "secret", "rm", "ctl-key", NULL);
                ctl_assert_code(r, 0);
                ck_assert_str_eq(ctl_line(&r), "ctl-key revoked (1 sandboxes lose it)");
                _cleanup_ctl_result_ ctl_result gone = ctl_run(env, NULL, "secret", "get", "ctl-key", NULL);
                ctl_assert_code(gone, 1);
                _cleanup_ctl_result_ ctl_result rm = ctl_run(env, NULL, "sandbox", "rm", sbx, NULL);
                ctl_assert_code(rm, 0);
        }
}
END_TEST

/* The worker's process, stopped (SIGSTOP) until the admin API says it is unreachable. */
static void worker_freeze(void)
{
        ck_assert_int_eq(kill(S.workers[0].pid, SIGSTOP), 0);
        int64_t deadline = sp_now_mono_us() + 30 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *ws = API(S.admin_key, "GET", "/v1/workers", 200, NULL);
                if (strstr(json_object_to_json_string(ws), "\"unreachable\""))
                        return;
                ck_assert_msg(sp_now_mono_us() < deadline, "the stopped worker never became unreachable");
                usleep(200 * 1000);
        }
}

START_TEST(revocation_reaches_a_worker_that_was_away)
{
        char t[256];
        sp_test_new_tenant(&S, "sec-away", t);
        _cleanup_free_ char *b1 = secret_body("away", value_of("away"), "");
        json_object_put(call(t, "POST", "/v1/secrets", 201, b1));
        json_object_put(call(t, "POST", "/v1/egress-profiles", 201, "{\"name\":\"p\",\"secrets\":[\"away\"]}"));
        char sbx[64];
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"p\",\"secrets\":[\"away\"]}", sbx);

        /* Its worker away: the revoke is recorded and answered 202; the controller sends it once the worker is back. */
        worker_freeze();
        _cleanup_json_ json_object *rev = call(t, "DELETE", "/v1/secrets/away", 202, NULL);
        ck_assert_ptr_nonnull(strstr(sp_test_jstr(rev, "message"), "1 running sandboxes get the change from the "
                                                                   "controller"));
        _cleanup_json_ json_object *sb = call(t, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(sb, "egress_applied"), "false");
        ck_assert_int_eq(kill(S.workers[0].pid, SIGCONT), 0);
        wait_applied(t, sbx, 60);
        _cleanup_json_ json_object *bn = bindings_of(sbx, true);
        ck_assert_uint_eq(json_object_array_length(bn), 0);

        /* A worker that says it lost the values (Heartbeat's secrets_missing) is sent them again,
         * though it has the current generation: its heartbeat is made to say so while it is
         * stopped, and the SetEgress it gets is answered once it runs again. */
        _cleanup_free_ char *b2 = secret_body("again", value_of("again"), "");
        json_object_put(call(t, "POST", "/v1/secrets", 201, b2));
        json_object_put(call(t, "PUT", "/v1/egress-profiles/p", 200, "{\"secrets\":[\"again\"]}"));
        char sbx2[64];
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"p\",\"secrets\":[\"again\"]}", sbx2);
        wait_applied(t, sbx2, 30);
        ck_assert_int_eq(db_count("SELECT count(*) FROM sandboxes WHERE id = $1 AND secrets_sent_at IS NOT NULL", sbx2),
                         0);
        int64_t seen = sp_now_mono_us() + 30 * SP_USEC_PER_SEC;
        while (db_count("SELECT count(*) FROM workers w, sandboxes s WHERE s.id = $1 AND w.id = s.worker_id "
                        "AND w.observed->'sandboxes' @> jsonb_build_array(jsonb_build_object('id', s.id))",
                        sbx2) == 0) {
                ck_assert_msg(sp_now_mono_us() < seen, "the worker's heartbeat never listed %s", sbx2);
                usleep(100 * 1000);
        }
        ck_assert_int_eq(kill(S.workers[0].pid, SIGSTOP), 0);
        PGconn *db = db_connect();
        const char *p[] = {sbx2};
        PGresult *res = PQexecParams(
                db,
                "UPDATE workers w SET state = 'ready', last_heartbeat = now() + interval '5 seconds', "
                "observed = jsonb_set(w.observed, "
                "'{sandboxes}', (SELECT coalesce(jsonb_agg(CASE WHEN e->>'id' = $1 THEN e || "
                "'{\"secrets_missing\":true}'::jsonb ELSE e END), '[]'::jsonb) FROM jsonb_array_elements("
                "w.observed->'sandboxes') e)) WHERE w.id = (SELECT worker_id FROM sandboxes WHERE id = $1) "
                "RETURNING observed::text",
                1, NULL, p, NULL, NULL, 0);
        ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1, "%s", PQerrorMessage(db));
        ck_assert_ptr_nonnull(strstr(PQgetvalue(res, 0, 0), "\"secrets_missing\": true"));
        PQclear(res);
        PQclear(PQexec(db, "NOTIFY space_work, 'worker:secrets-test'")); /* the controllers look now */
        PQfinish(db);
        usleep(1500 * 1000); /* and at least once more on their own (every 5 ticks of 200 ms here) */
        ck_assert_int_eq(kill(S.workers[0].pid, SIGCONT), 0);
        int64_t deadline = sp_now_mono_us() + 30 * SP_USEC_PER_SEC;
        while (db_count("SELECT count(*) FROM sandboxes WHERE id = $1 AND secrets_sent_at IS NOT NULL", sbx2) == 0) {
                ck_assert_msg(sp_now_mono_us() < deadline, "the bindings were not sent again");
                usleep(200 * 1000);
        }
        for (int i = 0; i < 2; i++) {
                _cleanup_json_ json_object *del =
                        call(t, "DELETE", path_of("/v1/sandboxes/%s", i ? sbx2 : sbx), 202, NULL);
                json_object_put(sp_test_wait_op(&S, t, sp_test_jstr(del, "operation.id"), true));
        }
}
END_TEST

/* Last in its case: it restarts the control plane (the fixture's replica
 * then runs as this test's child, and ends with it). */
/* A revoke reaches a suspended sandbox's worker at once: woken, it must not
 * have the value again until the controller's next pass. */
START_TEST(a_revoke_reaches_a_suspended_sandbox)
{
        char t[256], sbx[64], state[32];
        sp_test_new_tenant(&S, "sec-susp", t);
        _cleanup_free_ char *b = secret_body("susp", value_of("susp"), "");
        json_object_put(call(t, "POST", "/v1/secrets", 201, b));
        json_object_put(call(t, "POST", "/v1/egress-profiles", 201, "{\"name\":\"sp\",\"secrets\":[\"susp\"]}"));
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"sp\",\"secrets\":[\"susp\"]}", sbx);
        sp_test_sandbox_action(&S, t, sbx, "suspend", state);
        ck_assert_str_eq(state, "suspended");
        _cleanup_json_ json_object *del = call(t, "DELETE", "/v1/secrets/susp", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(del, "sandboxes_updating"), "1");
        /* Its worker confirmed the change before the answer (not the controller later). */
        _cleanup_json_ json_object *sb = call(t, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(sb, "egress_applied"), "true");
        _cleanup_json_ json_object *d = call(t, "DELETE", path_of("/v1/sandboxes/%s", sbx), 202, NULL);
        json_object_put(sp_test_wait_op(&S, t, sp_test_jstr(d, "operation.id"), true));
}
END_TEST

/* A revoke retried with its Idempotency-Key after the name was taken again
 * answers with the secret it revoked, and leaves the new one alone. */
START_TEST(a_retried_revoke_names_what_it_revoked)
{
        char t[256];
        sp_test_new_tenant(&S, "sec-retry", t);
        _cleanup_free_ char *b1 = secret_body("again", value_of("again1"), "");
        _cleanup_json_ json_object *first = call(t, "POST", "/v1/secrets", 201, b1);
        _cleanup_json_ json_object *del =
                sp_test_api(&S, t, "DELETE", "/v1/secrets/again", 200, NULL, "Idempotency-Key: del-again-1");
        ck_assert_str_eq(sp_test_jstr(del, "id"), sp_test_jstr(first, "id"));
        _cleanup_free_ char *b2 = secret_body("again", value_of("again2"), "");
        _cleanup_json_ json_object *second = call(t, "POST", "/v1/secrets", 201, b2);
        _cleanup_json_ json_object *replay =
                sp_test_api(&S, t, "DELETE", "/v1/secrets/again", 200, NULL, "Idempotency-Key: del-again-1");
        ck_assert_str_eq(sp_test_jstr(replay, "id"), sp_test_jstr(first, "id"));
        ck_assert_ptr_nonnull(sp_test_jstr(replay, "revoked_at"));
        _cleanup_json_ json_object *now = call(t, "GET", "/v1/secrets/again", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(now, "id"), sp_test_jstr(second, "id"));
        ck_assert_ptr_null(sp_test_jstr(now, "revoked_at"));
}
END_TEST

/* A key id names one key: a file whose k1 is other bytes (a lost key file made again under the
 * same id) is not taken at run time (cluster_key_rotation checks that the control plane does not
 * start with such a file). */
START_TEST(a_key_id_names_one_key)
{
        char t[256];
        sp_test_new_tenant(&S, "sec-check", t);
        _cleanup_free_ char *body = secret_body("chk-a", value_of("chk-a"), "");
        json_object_put(call(t, "POST", "/v1/secrets", 201, body));
        _cleanup_free_ char *old = slurp(S.secrets_key_file);
        ck_assert_ptr_nonnull(strstr(old, "k1 "));
        sp_error *e = NULL;
        char other[sizeof(S.secrets_key_file) + 8];
        snprintf(other, sizeof(other), "%s.other", S.secrets_key_file);
        sp_test_ok(sp_test_secrets_key_write(other, "k1", NULL, &e), &e);
        _cleanup_free_ char *forged = slurp(other);
        ck_assert_str_ne(forged, old);
        ck_assert_int_eq(sp_file_write_atomic(S.secrets_key_file, forged, strlen(forged), 0600, NULL), 0);
        /* At run time: refused, the keys read before still seal and open. */
        expect_error(S.admin_key, "POST", "/v1/admin/secrets/rewrap", "{}", 409, "is not the key 'k1'");
        _cleanup_free_ char *body2 = secret_body("chk-b", value_of("chk-b"), "");
        _cleanup_json_ json_object *b = call(t, "POST", "/v1/secrets", 201, body2);
        /* The right file back: taken at the next use. */
        ck_assert_int_eq(sp_file_write_atomic(S.secrets_key_file, old, strlen(old), 0600, NULL), 0);
        _cleanup_json_ json_object *ok = call(S.admin_key, "POST", "/v1/admin/secrets/rewrap", 200, "{}");
        ck_assert_str_eq(sp_test_jstr(ok, "primary"), "k1");
        ck_assert_str_eq(sp_test_jstr(ok, "failed"), "0");
        /* What was sealed while the forged file lay there opens with the right key. */
        PGconn *db = db_connect();
        char *v = open_value(db, sp_test_jstr(b, "id"));
        ck_assert_str_eq(v, value_of("chk-b"));
        cp_envelope_value_free(v, strlen(v));
        PQfinish(db);
}
END_TEST

START_TEST(cluster_key_rotation)
{
        char t[256];
        sp_test_new_tenant(&S, "sec-rot", t);
        char ids[3][64];
        const char *names[] = {"rot-a", "rot-b", "rot-c"};
        for (int i = 0; i < 3; i++) {
                _cleanup_free_ char *body = secret_body(names[i], value_of(names[i]), "");
                _cleanup_json_ json_object *m = call(t, "POST", "/v1/secrets", 201, body);
                snprintf(ids[i], sizeof(ids[i]), "%s", sp_test_jstr(m, "id"));
        }
        /* A sandbox given one of them: its bindings must still be built after the rotation. */
        json_object_put(call(t, "POST", "/v1/egress-profiles", 201, "{\"name\":\"rot\",\"secrets\":[\"rot-b\"]}"));
        char sbx[64];
        sp_test_create_sandbox(&S, t, "{\"template\":\"base\",\"egress\":\"rot\",\"secrets\":[\"rot-b\"]}", sbx);
        /* Nothing to do while k1 is the only key. */
        _cleanup_json_ json_object *none = call(S.admin_key, "POST", "/v1/admin/secrets/rewrap", 200, "{}");
        ck_assert_str_eq(sp_test_jstr(none, "primary"), "k1");
        ck_assert_str_eq(sp_test_jstr(none, "rewrapped"), "0");
        ck_assert_str_eq(sp_test_jstr(none, "remaining"), "0");

        /* A new line that does not load (a key of 16 bytes): the file is not taken, and rewrap says so
         * rather than answer as if the rotation were done. */
        _cleanup_free_ char *old = slurp(S.secrets_key_file);
        _cleanup_free_ char *bad = NULL;
        ck_assert_int_ge(asprintf(&bad, "k9 AAAAAAAAAAAAAAAAAAAAAA==\n%s", old), 0);
        ck_assert_int_eq(sp_file_write_atomic(S.secrets_key_file, bad, strlen(bad), 0600, NULL), 0);
        expect_error(S.admin_key, "POST", "/v1/admin/secrets/rewrap", "{}", 409, "fix the key file before rewrapping");
        ck_assert_int_eq(sp_file_write_atomic(S.secrets_key_file, old, strlen(old), 0600, NULL), 0);
        _cleanup_json_ json_object *again = call(S.admin_key, "POST", "/v1/admin/secrets/rewrap", 200, "{}");
        ck_assert_str_eq(sp_test_jstr(again, "primary"), "k1");

        /* 1. A new key on top of the file; k1 stays. The control plane sees it at its next use. */
        sp_error *e = NULL;
        sp_test_ok(sp_test_secrets_key_write(S.secrets_key_file, "k2", old, &e), &e);
        _cleanup_free_ char *body = secret_body("rot-new", value_of("rot-new"), "");
        json_object_put(call(t, "POST", "/v1/secrets", 201, body));

        /* 2. Rewrap, in batches of at most 2 here: until nothing remains; then again finds nothing. */
        int64_t total = 0;
        for (int round = 0; round < 20; round++) {
                _cleanup_json_ json_object *r =
                        call(S.admin_key, "POST", "/v1/admin/secrets/rewrap", 200, "{\"max\":2}");
                ck_assert_str_eq(sp_test_jstr(r, "primary"), "k2");
                ck_assert_str_eq(sp_test_jstr(r, "failed"), "0");
                ck_assert_str_eq(json_object_to_json_string(sp_test_jarr(r, "missing_keys")), "[ ]");
                int64_t n = strtoll(sp_test_jstr(r, "rewrapped"), NULL, 10);
                ck_assert_int_le(n, 2);
                total += n;
                if (strcmp(sp_test_jstr(r, "remaining"), "0") == 0)
                        break;
        }
        ck_assert_int_ge(total, 3);
        _cleanup_json_ json_object *idem = call(S.admin_key, "POST", "/v1/admin/secrets/rewrap", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(idem, "rewrapped"), "0");
        ck_assert_str_eq(sp_test_jstr(idem, "remaining"), "0");
        ck_assert_ptr_null(sp_test_jstr(idem, "by_key.k1"));

        /* 3. The old key dropped, 4. the control plane restarted: everything still opens. */
        _cleanup_free_ char *now = slurp(S.secrets_key_file);
        now[strcspn(now, "\n") + 1] = '\0';
        ck_assert_ptr_null(strstr(now, "k1 "));
        sp_test_ok(sp_test_proc_stop(&S.cp[0], 10000, &e) < 0 ? -1 : 0, &e);
        /* A file whose k2 is other bytes (a lost key file made again): the control plane does not
         * start, and says why (a_key_id_names_one_key: nor is it taken at run time). */
        char other[sizeof(S.secrets_key_file) + 8];
        snprintf(other, sizeof(other), "%s.other", S.secrets_key_file);
        sp_test_ok(sp_test_secrets_key_write(other, "k2", NULL, &e), &e);
        _cleanup_free_ char *forged = slurp(other);
        ck_assert_int_eq(sp_file_write_atomic(S.secrets_key_file, forged, strlen(forged), 0600, NULL), 0);
        ck_assert_int_lt(sp_test_space_start_cp(&S, 0, &e), 0);
        e = sp_error_free(e);
        char logp[1024];
        snprintf(logp, sizeof(logp), "%s/controlplane0.log", S.dir);
        _cleanup_free_ char *log = slurp(logp);
        ck_assert_msg(strstr(log, "is not the key 'k2' this cluster has used"), "%s", log);
        sp_test_proc_stop(&S.cp[0], 10000, NULL);
        ck_assert_int_eq(sp_file_write_atomic(S.secrets_key_file, now, strlen(now), 0600, NULL), 0);
        sp_test_ok(sp_test_space_start_cp(&S, 0, &e), &e);
        PGconn *db = db_connect();
        for (int i = 0; i < 3; i++) {
                char *v = open_value(db, ids[i]);
                ck_assert_str_eq(v, value_of(names[i]));
                cp_envelope_value_free(v, strlen(v));
        }
        _cleanup_json_ json_object *bn = bindings_of(sbx, true);
        ck_assert_uint_eq(json_object_array_length(bn), 1);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(bn, 0), "value"), value_of("rot-b"));
        PGresult *res = PQexec(db, "SELECT count(*) FROM secrets WHERE deleted_at IS NULL AND key_id <> 'k2'");
        ck_assert_str_eq(PQgetvalue(res, 0, 0), "0");
        PQclear(res);
        PQfinish(db);
        _cleanup_json_ json_object *after = call(t, "GET", "/v1/secrets/rot-a", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(after, "id"), ids[0]);
        _cleanup_free_ char *later = secret_body("rot-later", value_of("rot-later"), "");
        json_object_put(call(t, "POST", "/v1/secrets", 201, later));
        _cleanup_json_ json_object *k2 = call(S.admin_key, "POST", "/v1/admin/secrets/rewrap", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(k2, "rewrapped"), "0");
        ck_assert_str_eq(sp_test_jstr(k2, "remaining"), "0");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_secrets");
        TCase *tc = tcase_create("secrets");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, secrets_are_a_tenants_and_write_only);
        tcase_add_test(tc, values_are_sealed_at_rest);
        tcase_add_test(tc, without_a_key_file_secrets_are_unavailable);
        tcase_add_test(tc, sandboxes_are_given_placeholders);
        tcase_add_test(tc, usage_comes_from_the_sandboxes_egress_logs);
        tcase_add_test(tc, spacectl_drives_secrets);
        tcase_add_test(tc, revocation_reaches_a_worker_that_was_away);
        tcase_add_test(tc, a_retried_revoke_names_what_it_revoked);
        tcase_add_test(tc, a_revoke_reaches_a_suspended_sandbox);
        tcase_add_test(tc, a_key_id_names_one_key);
        tcase_add_test(tc, cluster_key_rotation); /* last: it restarts the control plane */
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
