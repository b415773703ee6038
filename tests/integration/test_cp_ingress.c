/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingress on the control plane's side, against a real cluster (PostgreSQL,
 * space-controlplane with --dataplane-url and --ingress-domain of its own,
 * one space-worker running jail sandboxes):
 *
 * - a sandbox is created with ingress "public" or, by default, "token";
 *   every answer that holds it (create, get, list, the operation, timeout,
 *   PUT ingress) shows {mode, url, path_url} with the exact URL templates for
 *   its id; a bad mode is a 400 naming the field and makes nothing; the mode
 *   is part of an Idempotency-Key's request; PUT /v1/sandboxes/{id}/ingress
 *   flips it, audited;
 * - ingress tokens verify with the published token keys and carry exactly
 *   typ ingress, scope read, sbx, ten, akey (the asking key) — no wkr — and
 *   live ttl_s (60..86400, 3600 by default); a bad ttl_s or another field is
 *   a 400; minting is audited without the token;
 * - another tenant's sandbox, a missing one and a deleted one are the same
 *   404 for both routes, and change nothing;
 * - ResolveSandbox with a data-plane certificate answers the sandbox's
 *   tenant, state, mode and its worker's RPC address (none while it has no
 *   worker); a missing or deleted sandbox is not_found; a worker's
 *   certificate, or none, is permission_denied; an unknown field or a
 *   malformed id is invalid_argument naming it; a wake by ingress that would
 *   take the tenant past a quota does not happen (nothing recorded, the
 *   sandbox's status_message names the quota) until there is room;
 * - the defaults (http://{port}-<id>.localhost:7071/) and a data plane URL
 *   with a path and no port, on a second replica; a bad --ingress-domain
 *   stops the control plane at start-up.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleet/fleet.h"
#include "harness.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space/token.h"
#include "space_cluster.h"
#include "store/db.h"
#include "store/tokenkeys.h"

#define DP_URL "https://dp.example.test:7443"
#define DOMAIN "apps.example.test"
#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}"
#define SANDBOX_END "}"

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

static sp_test_space S;

static void cluster_up(void)
{
        static const char *const cp_args[] = {"--dataplane-url=" DP_URL "/", "--ingress-domain=" DOMAIN, NULL};
        sp_test_space_opts o = {.workers = 1, .no_network = true, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/controlplane0.log", S.dir);
        sp_test_dump_file_tail("control plane", logp, 30);
        sp_test_space_down(&S);
}

/* ---- helpers ---- */

#define API(key, method, path, status, body) sp_test_api(&S, (key), (method), (path), (status), (body), NULL)

typedef struct tenant {
        char id[64];
        char key_id[64];
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
        snprintf(t->key_id, sizeof(t->key_id), "%s", sp_test_jstr(k, "id"));
        snprintf(t->key, sizeof(t->key), "%s", sp_test_jstr(k, "secret"));
}

static const char *path_of(const char *fmt, const char *a)
{
        static char bufs[4][512];
        static int n;
        char *p = bufs[n++ % 4];
        snprintf(p, 512, fmt, a);
        return p;
}

static int64_t jint(json_object *o, const char *path)
{
        const char *s = sp_test_jstr(o, path);
        ck_assert_msg(s, "no %s in %s", path, json_object_to_json_string(o));
        return strtoll(s, NULL, 10);
}

/* The URL templates of sandbox id under a data plane URL and a domain (as
 * written here, independently of the control plane's code). */
static void want_urls(const char *scheme, const char *host_port, const char *dp_url, const char *domain, const char *id,
                      char url[static 512], char path_url[static 512])
{
        char hid[64];
        snprintf(hid, sizeof(hid), "%s", id);
        ck_assert_msg(strncmp(hid, "sbx_", 4) == 0, "%s", id);
        hid[3] = '-';
        ck_assert_ptr_null(strchr(hid, '_'));
        snprintf(url, 512, "%s://{port}-%s.%s%s/", scheme, hid, domain, host_port);
        snprintf(path_url, 512, "%s/v1/sandboxes/%s/ports/{port}/", dp_url, id);
}

/* Asserts that o (a sandbox) has ingress {mode, auto_resume (false), url,
 * path_url} as this cluster makes them. */
static void expect_ingress(json_object *o, const char *mode)
{
        const char *id = sp_test_jstr(o, "id");
        ck_assert_msg(id, "no id in %s", json_object_to_json_string(o));
        char url[512], path_url[512];
        want_urls("https", ":7443", DP_URL, DOMAIN, id, url, path_url);
        json_object *ing = NULL;
        ck_assert_msg(json_object_object_get_ex(o, "ingress", &ing) && json_object_is_type(ing, json_type_object) &&
                              json_object_object_length(ing) == 4,
                      "ingress of %s", json_object_to_json_string(o));
        ck_assert_str_eq(sp_test_jstr(ing, "mode"), mode);
        json_object *ar = NULL;
        ck_assert(json_object_object_get_ex(ing, "auto_resume", &ar) && json_object_is_type(ar, json_type_boolean) &&
                  !json_object_get_boolean(ar));
        ck_assert_str_eq(sp_test_jstr(ing, "url"), url);
        ck_assert_str_eq(sp_test_jstr(ing, "path_url"), path_url);
}

/* Expects status with error code code and a message containing want. */
static void expect_error(const char *key, const char *method, const char *path, const char *body, int status,
                         const char *code, const char *want)
{
        _cleanup_json_ json_object *r = API(key, method, path, status, body);
        ck_assert_str_eq(sp_test_jstr(r, "error.code"), code);
        const char *msg = sp_test_jstr(r, "error.message");
        ck_assert_msg(msg && strstr(msg, want), "%s %s %s: '%s' lacks '%s'", method, path, body ? body : "",
                      msg ? msg : "(none)", want);
}

static size_t count_sandboxes(const tenant *t)
{
        _cleanup_json_ json_object *l = API(t->key, "GET", "/v1/sandboxes?limit=1000", 200, NULL);
        return json_object_array_length(sp_test_jarr(l, "sandboxes"));
}

/* The sandbox id in the list of t, or NULL. Borrowed from l. */
static json_object *listed(json_object *l, const char *id)
{
        json_object *arr = sp_test_jarr(l, "sandboxes");
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                json_object *s = json_object_array_get_idx(arr, i);
                if (strcmp(sp_test_jstr(s, "id"), id) == 0)
                        return s;
        }
        return NULL;
}

static char *query1(const char *sql, const char *a, const char *b)
{
        cp_db *db = NULL;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(S.conninfo, &db, &e), &e);
        const char *params[] = {a, b};
        _cleanup_pgresult_ PGresult *r = NULL;
        sp_test_ok(cp_db_exec(db, sql, b ? 2 : 1, params, &r, &e), &e);
        ck_assert_msg(PQntuples(r) == 1, "%s: %d rows", sql, PQntuples(r));
        char *v = strdup(PQgetisnull(r, 0, 0) ? "(null)" : PQgetvalue(r, 0, 0));
        cp_db_close(db);
        return v;
}

static int audits(const char *action, const char *target)
{
        _cleanup_free_ char *n = query1(
                "SELECT count(*) FROM audit_log WHERE action = $1 AND target = $2 AND outcome = 'ok'", action, target);
        return atoi(n);
}

/* Deletes sandbox id and waits until it is gone. */
static void delete_sandbox(const tenant *t, const char *id)
{
        _cleanup_json_ json_object *r = API(t->key, "DELETE", path_of("/v1/sandboxes/%s", id), 202, NULL);
        json_object_put(sp_test_wait_op(&S, t->key, sp_test_jstr(r, "operation.id"), true));
}

/* A sandbox id that no sandbox has. */
#define ABSENT "sbx_0000000000000000000z"

/* ---- ingress modes and URLs ---- */

START_TEST(modes_and_url_templates)
{
        tenant t;
        new_tenant("modes", &t);

        /* Created public: the create's answer, its operation, get and list say so. */
        _cleanup_json_ json_object *c1 =
                API(t.key, "POST", "/v1/sandboxes", 202, SANDBOX ",\"ingress\":\"public\"" SANDBOX_END);
        json_object *sb1 = json_object_object_get(c1, "sandbox");
        expect_ingress(sb1, "public");
        char pub[64];
        snprintf(pub, sizeof(pub), "%s", sp_test_jstr(sb1, "id"));
        _cleanup_json_ json_object *op = sp_test_wait_op(&S, t.key, sp_test_jstr(c1, "operation.id"), true);
        expect_ingress(json_object_object_get(op, "result"), "public");
        _cleanup_json_ json_object *g1 = API(t.key, "GET", path_of("/v1/sandboxes/%s", pub), 200, NULL);
        expect_ingress(g1, "public");
        _cleanup_free_ char *stored = query1("SELECT ingress FROM sandboxes WHERE id = $1", pub, NULL);
        ck_assert_str_eq(stored, "public");

        /* By default: token. */
        _cleanup_json_ json_object *c2 = API(t.key, "POST", "/v1/sandboxes", 202, SANDBOX SANDBOX_END);
        json_object *sb2 = json_object_object_get(c2, "sandbox");
        expect_ingress(sb2, "token");
        char tok[64];
        snprintf(tok, sizeof(tok), "%s", sp_test_jstr(sb2, "id"));
        _cleanup_json_ json_object *l = API(t.key, "GET", "/v1/sandboxes", 200, NULL);
        ck_assert_ptr_nonnull(listed(l, pub));
        ck_assert_ptr_nonnull(listed(l, tok));
        expect_ingress(listed(l, pub), "public");
        expect_ingress(listed(l, tok), "token");

        /* A bad mode is a 400 naming the field, and makes nothing. */
        size_t before = count_sandboxes(&t);
        expect_error(t.key, "POST", "/v1/sandboxes", SANDBOX ",\"ingress\":\"open\"" SANDBOX_END, 400,
                     "invalid_argument", "ingress must be token or public");
        expect_error(t.key, "POST", "/v1/sandboxes", SANDBOX ",\"ingress\":true" SANDBOX_END, 400, "invalid_argument",
                     "ingress must be a string");
        expect_error(t.key, "POST", "/v1/sandboxes", SANDBOX ",\"ingress\":{\"mode\":\"public\"}" SANDBOX_END, 400,
                     "invalid_argument", "ingress");
        ck_assert_uint_eq(count_sandboxes(&t), before);

        /* The mode is part of what an Idempotency-Key stands for. */
        const char *key_hdr = "Idempotency-Key: ingress-1";
        _cleanup_json_ json_object *i1 = sp_test_api(&S, t.key, "POST", "/v1/sandboxes", 202,
                                                     SANDBOX ",\"ingress\":\"public\"" SANDBOX_END, key_hdr);
        _cleanup_json_ json_object *i2 = sp_test_api(&S, t.key, "POST", "/v1/sandboxes", 202,
                                                     SANDBOX ",\"ingress\":\"public\"" SANDBOX_END, key_hdr);
        ck_assert_str_eq(sp_test_jstr(i1, "sandbox.id"), sp_test_jstr(i2, "sandbox.id"));
        expect_ingress(json_object_object_get(i2, "sandbox"), "public");
        _cleanup_json_ json_object *i3 =
                sp_test_api(&S, t.key, "POST", "/v1/sandboxes", 409, SANDBOX SANDBOX_END, key_hdr);
        ck_assert_str_eq(sp_test_jstr(i3, "error.code"), "conflict");
        _cleanup_json_ json_object *i4 = sp_test_api(&S, t.key, "POST", "/v1/sandboxes", 409,
                                                     SANDBOX ",\"ingress\":\"token\"" SANDBOX_END, key_hdr);
        ck_assert_str_eq(sp_test_jstr(i4, "error.code"), "conflict");
        ck_assert_uint_eq(count_sandboxes(&t), before + 1);

        /* PUT flips it; the answer, get and the audit log say so. */
        _cleanup_json_ json_object *p1 =
                API(t.key, "PUT", path_of("/v1/sandboxes/%s/ingress", pub), 200, "{\"mode\":\"token\"}");
        expect_ingress(p1, "token");
        ck_assert_str_eq(sp_test_jstr(p1, "id"), pub);
        _cleanup_json_ json_object *g2 = API(t.key, "GET", path_of("/v1/sandboxes/%s", pub), 200, NULL);
        expect_ingress(g2, "token");
        _cleanup_json_ json_object *p2 =
                API(t.key, "PUT", path_of("/v1/sandboxes/%s/ingress", tok), 200, "{\"mode\":\"public\"}");
        expect_ingress(p2, "public");
        ck_assert_int_eq(audits("sandbox.ingress", pub), 1);
        ck_assert_int_eq(audits("sandbox.ingress", tok), 1);
        _cleanup_free_ char *detail = query1(
                "SELECT detail->>'mode' FROM audit_log WHERE action = 'sandbox.ingress' AND target = $1", tok, NULL);
        ck_assert_str_eq(detail, "public");
        /* Other routes that answer the sandbox show it too. */
        _cleanup_json_ json_object *to =
                API(t.key, "POST", path_of("/v1/sandboxes/%s/timeout", tok), 200, "{\"timeout_s\":3600}");
        expect_ingress(to, "public");

        /* A bad PUT is a 400 naming the field, and changes nothing. */
        const char *ipath = path_of("/v1/sandboxes/%s/ingress", tok);
        expect_error(t.key, "PUT", ipath, "{\"mode\":\"private\"}", 400, "invalid_argument",
                     "mode must be token or public");
        expect_error(t.key, "PUT", ipath, "{}", 400, "invalid_argument", "mode or auto_resume is required");
        expect_error(t.key, "PUT", ipath, "{\"mode\":\"token\",\"ttl_s\":60}", 400, "invalid_argument",
                     "unknown field 'ttl_s'");
        expect_error(t.key, "PUT", ipath, "{\"mode\":null}", 400, "invalid_argument",
                     "mode or auto_resume is required");
        _cleanup_json_ json_object *g3 = API(t.key, "GET", path_of("/v1/sandboxes/%s", tok), 200, NULL);
        expect_ingress(g3, "public");
        ck_assert_int_eq(audits("sandbox.ingress", tok), 1);
}
END_TEST

/* ---- foreign, missing and deleted ---- */

START_TEST(foreign_missing_and_deleted_are_not_found)
{
        tenant a, b;
        new_tenant("owner", &a);
        new_tenant("other", &b);
        char own[64];
        sp_test_create_sandbox(&S, a.key, SANDBOX SANDBOX_END, own);
        static const struct {
                const char *method, *fmt, *body;
        } routes[] = {
                {"PUT", "/v1/sandboxes/%s/ingress", "{\"mode\":\"public\"}"},
                {"POST", "/v1/sandboxes/%s/ingress/tokens", NULL},
                {"POST", "/v1/sandboxes/%s/ingress/tokens", "{\"ttl_s\":60}"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(routes); i++) {
                _cleanup_json_ json_object *foreign =
                        API(b.key, routes[i].method, path_of(routes[i].fmt, own), 404, routes[i].body);
                _cleanup_json_ json_object *none =
                        API(b.key, routes[i].method, path_of(routes[i].fmt, ABSENT), 404, routes[i].body);
                ck_assert_str_eq(sp_test_jstr(foreign, "error.code"), "not_found");
                ck_assert_str_eq(sp_test_jstr(none, "error.code"), "not_found");
                /* The same words, but for the id itself. */
                char want[256];
                snprintf(want, sizeof(want), "sandbox %s not found", ABSENT);
                ck_assert_str_eq(sp_test_jstr(none, "error.message"), want);
                snprintf(want, sizeof(want), "sandbox %s not found", own);
                ck_assert_str_eq(sp_test_jstr(foreign, "error.message"), want);
        }
        /* Nothing of it happened. */
        _cleanup_json_ json_object *g = API(a.key, "GET", path_of("/v1/sandboxes/%s", own), 200, NULL);
        expect_ingress(g, "token");
        ck_assert_int_eq(audits("sandbox.ingress", own), 0);
        ck_assert_int_eq(audits("sandbox.ingress_token", own), 0);

        /* Deleted: gone for its owner too. */
        delete_sandbox(&a, own);
        for (size_t i = 0; i < SP_ARRAY_SIZE(routes); i++) {
                _cleanup_json_ json_object *gone =
                        API(a.key, routes[i].method, path_of(routes[i].fmt, own), 404, routes[i].body);
                ck_assert_str_eq(sp_test_jstr(gone, "error.code"), "not_found");
        }
        _cleanup_free_ char *stored = query1("SELECT ingress FROM sandboxes WHERE id = $1", own, NULL);
        ck_assert_str_eq(stored, "token");
}
END_TEST

/* ---- ingress tokens ---- */

static sp_token_verifier *published_keys(void)
{
        cp_db *db = NULL;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(S.conninfo, &db, &e), &e);
        _cleanup_json_ json_object *keys = NULL;
        sp_test_ok(cp_token_keys_public(db, &keys, &e), &e);
        cp_db_close(db);
        sp_token_verifier *v = sp_token_verifier_new();
        for (size_t i = 0; i < json_object_array_length(keys); i++)
                sp_test_ok(sp_token_verifier_add_key(v, json_object_get_string(json_object_array_get_idx(keys, i)), &e),
                           &e);
        return v;
}

/* Mints a token for sbx with body; checks the answer and every claim; returns ttl seen. */
static void mint_and_check(const tenant *t, const char *sbx, const char *body, int64_t want_ttl)
{
        _cleanup_json_ json_object *r = API(t->key, "POST", path_of("/v1/sandboxes/%s/ingress/tokens", sbx), 201, body);
        ck_assert_int_eq(json_object_object_length(r), 4);
        char url[512], path_url[512];
        want_urls("https", ":7443", DP_URL, DOMAIN, sbx, url, path_url);
        ck_assert_str_eq(sp_test_jstr(r, "url"), url);
        ck_assert_str_eq(sp_test_jstr(r, "path_url"), path_url);
        const char *token = sp_test_jstr(r, "token");
        ck_assert_ptr_nonnull(token);

        _cleanup_token_verifier_ sp_token_verifier *v = published_keys();
        sp_error *e = NULL;
        int64_t now = sp_now_real_us() / SP_USEC_PER_SEC;
        _cleanup_json_ json_object *c = sp_token_verify(v, token, now, &e);
        sp_test_ok(c ? 0 : -1, &e);
        ck_assert_str_eq(sp_test_jstr(c, "typ"), "ingress");
        ck_assert_str_eq(sp_test_jstr(c, "scope"), "read");
        ck_assert_str_eq(sp_test_jstr(c, "sbx"), sbx);
        ck_assert_str_eq(sp_test_jstr(c, "ten"), t->id);
        ck_assert_str_eq(sp_test_jstr(c, "akey"), t->key_id);
        ck_assert_ptr_null(sp_test_jstr(c, "wkr"));
        /* Exactly these claims: the data plane resolves the worker itself. */
        static const char *const allowed[] = {"typ", "scope", "sbx", "ten", "akey", "kid", "iat", "exp", NULL};
        json_object_object_foreach (c, k, val) {
                (void)val;
                bool ok = false;
                for (size_t i = 0; allowed[i]; i++)
                        ok |= strcmp(k, allowed[i]) == 0;
                ck_assert_msg(ok, "unexpected claim '%s' in %s", k, json_object_to_json_string(c));
        }
        ck_assert_int_eq(jint(c, "exp") - jint(c, "iat"), want_ttl);
        ck_assert_int_le(llabs(jint(c, "exp") - (now + want_ttl)), 5);
        int64_t told = 0;
        sp_test_ok(sp_time_parse_rfc3339(sp_test_jstr(r, "expires_at"), &told, &e), &e);
        ck_assert_int_le(told / SP_USEC_PER_SEC, jint(c, "exp"));
        ck_assert_int_ge(told / SP_USEC_PER_SEC, jint(c, "exp") - 1);

        /* Audited, never with the token. */
        _cleanup_free_ char *detail = query1("SELECT string_agg(detail::text, ' ') FROM audit_log "
                                             "WHERE action = 'sandbox.ingress_token' AND target = $1",
                                             sbx, NULL);
        ck_assert_ptr_null(strstr(detail, token));
        char ttl[64];
        snprintf(ttl, sizeof(ttl), "\"ttl_s\": %lld", (long long)want_ttl);
        ck_assert_msg(strstr(detail, ttl), "%s lacks %s", detail, ttl);
}

START_TEST(ingress_tokens_carry_exactly_their_claims)
{
        tenant t;
        new_tenant("tokens", &t);
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX SANDBOX_END, sbx);
        mint_and_check(&t, sbx, NULL, 3600);
        mint_and_check(&t, sbx, "{}", 3600);
        mint_and_check(&t, sbx, "{\"ttl_s\":60}", 60);
        mint_and_check(&t, sbx, "{\"ttl_s\":86400}", 86400);
        ck_assert_int_eq(audits("sandbox.ingress_token", sbx), 4);
        /* A public sandbox may still be given tokens (a client need not know its mode). */
        json_object_put(API(t.key, "PUT", path_of("/v1/sandboxes/%s/ingress", sbx), 200, "{\"mode\":\"public\"}"));
        mint_and_check(&t, sbx, "{\"ttl_s\":120}", 120);

        /* Bounds and fields: 400 naming them, and nothing minted. */
        const char *p = path_of("/v1/sandboxes/%s/ingress/tokens", sbx);
        expect_error(t.key, "POST", p, "{\"ttl_s\":59}", 400, "invalid_argument", "ttl_s must be between 60 and 86400");
        expect_error(t.key, "POST", p, "{\"ttl_s\":86401}", 400, "invalid_argument",
                     "ttl_s must be between 60 and 86400");
        expect_error(t.key, "POST", p, "{\"ttl_s\":0}", 400, "invalid_argument", "ttl_s must be between 60 and 86400");
        expect_error(t.key, "POST", p, "{\"ttl_s\":\"60\"}", 400, "invalid_argument", "ttl_s must be an integer");
        expect_error(t.key, "POST", p, "{\"scope\":\"write\"}", 400, "invalid_argument", "unknown field 'scope'");
        expect_error(t.key, "POST", p, "[]", 400, "invalid_argument", "JSON object");
        ck_assert_int_eq(audits("sandbox.ingress_token", sbx), 5);
}
END_TEST

/* ---- ResolveSandbox ---- */

/* A client of the control plane's RPC with a certificate of role (none when role is 0). */
static SSL_CTX *rpc_client(sp_role role, const char *name)
{
        cp_db *db = NULL;
        sp_error *e = NULL;
        sp_pki_ca *ca = NULL;
        sp_test_ok(cp_db_open(S.conninfo, &db, &e), &e);
        sp_test_ok(cp_fleet_cluster_ca(db, &ca, &e), &e);
        cp_db_close(db);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, &e);
        sp_test_ok(ca_pem ? 0 : -1, &e);
        _cleanup_free_ char *cert = NULL, *key = NULL;
        if (role)
                sp_test_ok(sp_pki_issue(ca, role, name, NULL, 1, &cert, &key, &e), &e);
        sp_pki_ca_free(ca);
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = ca_pem, .cert_pem = cert, .key_pem = key, .peer_roles = SP_ROLE_CONTROLPLANE, .alpn = alpn};
        SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, &e);
        sp_test_ok(ctx ? 0 : -1, &e);
        return ctx;
}

/* Calls ResolveSandbox with req (JSON text); the answer, or NULL with *err. */
static json_object *resolve(SSL_CTX *ctx, const char *req, sp_error **err)
{
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", S.rpc_port[0]);
        _cleanup_json_ json_object *r = NULL;
        ck_assert_int_eq(sp_json_parse(req, strlen(req), &r, NULL), 0);
        json_object *resp = NULL;
        if (sp_rpc_call_sync(addr, ctx, "ResolveSandbox", r, 30000, &resp, err) < 0)
                return NULL;
        return resp;
}

static json_object *resolve_ok(SSL_CTX *ctx, const char *sbx)
{
        char req[128];
        snprintf(req, sizeof(req), "{\"sandbox_id\":\"%s\"}", sbx);
        sp_error *e = NULL;
        json_object *r = resolve(ctx, req, &e);
        ck_assert_msg(r, "ResolveSandbox %s: %s", sbx, e ? e->message : "?");
        return r;
}

static void resolve_fails(SSL_CTX *ctx, const char *req, sp_errc code, const char *want)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *r = resolve(ctx, req, &e);
        ck_assert_msg(!r, "%s: answered %s", req, r ? json_object_to_json_string(r) : "");
        ck_assert_msg(e->code == code && (!want || strstr(e->message, want)), "%s: %s (%s), wanted %s '%s'", req,
                      e->message, sp_errc_name(e->code), sp_errc_name(code), want ? want : "");
        sp_error_free(e);
}

START_TEST(resolve_sandbox_for_data_planes)
{
        tenant t;
        new_tenant("resolve", &t);
        char sbx[64], wid[64];
        sp_test_create_sandbox(&S, t.key, SANDBOX SANDBOX_END, sbx);
        sp_test_sandbox_worker(&S, t.key, sbx, wid);
        _cleanup_json_ json_object *w = API(S.admin_key, "GET", path_of("/v1/workers/%s", wid), 200, NULL);
        const char *address = sp_test_jstr(w, "address");
        ck_assert_ptr_nonnull(address);

        _cleanup_(SSL_CTX_freep) SSL_CTX *dp = rpc_client(SP_ROLE_DATAPLANE, "dp-ingress");
        _cleanup_json_ json_object *r = resolve_ok(dp, sbx);
        ck_assert_int_eq(json_object_object_length(r), 6);
        ck_assert_str_eq(sp_test_jstr(r, "sandbox_id"), sbx);
        ck_assert_str_eq(sp_test_jstr(r, "tenant_id"), t.id);
        ck_assert_str_eq(sp_test_jstr(r, "state"), "running");
        ck_assert_str_eq(sp_test_jstr(r, "ingress"), "token");
        ck_assert_str_eq(sp_test_jstr(r, "worker"), address);
        ck_assert_str_eq(sp_test_jstr(r, "worker_name"), sp_test_jstr(w, "name")); /* checked against its certificate */

        /* The mode as it is now; the state by its public name. */
        json_object_put(API(t.key, "PUT", path_of("/v1/sandboxes/%s/ingress", sbx), 200, "{\"mode\":\"public\"}"));
        char state[32];
        sp_test_sandbox_action(&S, t.key, sbx, "pause", state);
        ck_assert_str_eq(state, "paused");
        _cleanup_json_ json_object *r2 = resolve_ok(dp, sbx);
        ck_assert_str_eq(sp_test_jstr(r2, "ingress"), "public");
        ck_assert_str_eq(sp_test_jstr(r2, "state"), "paused");
        ck_assert_str_eq(sp_test_jstr(r2, "worker"), address);

        /* A sandbox no worker can take (its labels match none) has no worker yet. */
        _cleanup_json_ json_object *c =
                API(t.key, "POST", "/v1/sandboxes", 202, SANDBOX ",\"labels\":{\"zone\":\"nowhere\"}" SANDBOX_END);
        const char *unplaced = sp_test_jstr(c, "sandbox.id");
        _cleanup_json_ json_object *r3 = resolve_ok(dp, unplaced);
        ck_assert_str_eq(sp_test_jstr(r3, "state"), "creating");
        ck_assert_str_eq(sp_test_jstr(r3, "tenant_id"), t.id);
        ck_assert_ptr_null(sp_test_jstr(r3, "worker"));
        json_object *waking = json_object_object_get(r3, "waking"); /* on its way to running */
        ck_assert(waking && json_object_get_boolean(waking));
        ck_assert_int_eq(json_object_object_length(r3), 5);

        /* A wake asked of a paused sandbox without auto_resume changes nothing. */
        char wake_req[128];
        snprintf(wake_req, sizeof(wake_req), "{\"sandbox_id\":\"%s\",\"wake\":true}", sbx);
        sp_error *we = NULL;
        _cleanup_json_ json_object *r4 = resolve(dp, wake_req, &we);
        ck_assert_msg(r4, "%s", we ? we->message : "");
        ck_assert_str_eq(sp_test_jstr(r4, "state"), "paused");
        ck_assert_ptr_null(json_object_object_get(r4, "waking"));
        ck_assert_ptr_null(json_object_object_get(r4, "auto_resume"));
        _cleanup_json_ json_object *still = API(t.key, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(still, "desired_state"), "paused");
        /* With auto_resume: asked back to running, and the answer says it is coming. */
        _cleanup_json_ json_object *ar =
                API(t.key, "PUT", path_of("/v1/sandboxes/%s/ingress", sbx), 200, "{\"auto_resume\":true}");
        ck_assert_str_eq(sp_test_jstr(ar, "ingress.mode"), "public"); /* left as it was */
        json_object *arv = NULL;
        ck_assert(json_object_object_get_ex(json_object_object_get(ar, "ingress"), "auto_resume", &arv) &&
                  json_object_get_boolean(arv));
        _cleanup_json_ json_object *r5 = resolve(dp, wake_req, &we);
        ck_assert_msg(r5, "%s", we ? we->message : "");
        ck_assert(json_object_get_boolean(json_object_object_get(r5, "auto_resume")));
        ck_assert(json_object_get_boolean(json_object_object_get(r5, "waking")));
        for (int i = 0; i < 300; i++) {
                _cleanup_json_ json_object *now = API(t.key, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
                snprintf(state, sizeof(state), "%s", sp_test_jstr(now, "state"));
                if (strcmp(state, "running") == 0)
                        break;
                usleep(100000);
        }
        ck_assert_str_eq(state, "running");
        _cleanup_json_ json_object *r6 = resolve(dp, wake_req, &we); /* running: nothing more to do */
        ck_assert_msg(r6, "%s", we ? we->message : "");
        ck_assert_str_eq(sp_test_jstr(r6, "state"), "running");
        ck_assert_ptr_null(json_object_object_get(r6, "waking"));
        ck_assert_int_eq(audits("sandbox.wake", sbx), 1);

        /* Not woken: a request without a token for a sandbox that is not
         * public (the data plane's view may be old); a sandbox whose timeout
         * passed and that is to be deleted then; one whose wake failed in
         * the last seconds. Each writes nothing. */
        char s2[64], wr[256];
        sp_test_create_sandbox(&S, t.key, SANDBOX SANDBOX_END, s2);
        json_object_put(API(t.key, "PUT", path_of("/v1/sandboxes/%s/ingress", s2), 200, "{\"auto_resume\":true}"));
        sp_test_sandbox_action(&S, t.key, s2, "suspend", state);
        ck_assert_str_eq(state, "suspended");
        snprintf(wr, sizeof(wr), "{\"sandbox_id\":\"%s\",\"wake\":true,\"anonymous\":true}", s2);
        _cleanup_json_ json_object *n1 = resolve(dp, wr, &we);
        ck_assert_msg(n1, "%s", we ? we->message : "");
        ck_assert_ptr_null(json_object_object_get(n1, "waking"));
        free(query1("UPDATE sandboxes SET end_action = 'kill', end_at = now() - interval '1 second' WHERE id = $1 "
                    "RETURNING id",
                    s2, NULL));
        snprintf(wr, sizeof(wr), "{\"sandbox_id\":\"%s\",\"wake\":true,\"key_id\":\"key_wakes\"}", s2);
        _cleanup_json_ json_object *n2 = resolve(dp, wr, &we);
        ck_assert_msg(n2, "%s", we ? we->message : "");
        ck_assert_ptr_null(json_object_object_get(n2, "waking"));
        free(query1("UPDATE sandboxes SET end_action = 'suspend' WHERE id = $1 RETURNING id", s2, NULL));
        free(query1("INSERT INTO operations (id, tenant_id, kind, target_id, state) "
                    "VALUES ('op_failedwake00000000000', $2, 'restore', $1, 'failed') RETURNING id",
                    s2, t.id));
        _cleanup_json_ json_object *n3 = resolve(dp, wr, &we);
        ck_assert_msg(n3, "%s", we ? we->message : "");
        ck_assert_ptr_null(json_object_object_get(n3, "waking"));
        ck_assert_int_eq(audits("sandbox.wake", s2), 0);
        /* Ten seconds after the failed wake, a request wakes it again; its
         * timeout, which had passed, starts again; the record names the key. */
        free(query1("UPDATE operations SET updated_at = now() - interval '11 seconds' WHERE id = $1 RETURNING id",
                    "op_failedwake00000000000", NULL));
        free(query1("UPDATE sandboxes SET timeout_s = 600 WHERE id = $1 RETURNING id", s2, NULL));
        _cleanup_json_ json_object *n4 = resolve(dp, wr, &we);
        ck_assert_msg(n4, "%s", we ? we->message : "");
        ck_assert(json_object_get_boolean(json_object_object_get(n4, "waking")));
        ck_assert_int_eq(audits("sandbox.wake", s2), 1);
        _cleanup_free_ char *who =
                query1("SELECT key_id || ' ' || (detail->>'anonymous') || ' ' || (detail->>'was') FROM audit_log "
                       "WHERE action = 'sandbox.wake' AND target = $1",
                       s2, NULL);
        ck_assert_str_eq(who, "key_wakes false suspended");
        _cleanup_free_ char *later =
                query1("SELECT (end_at > now() + interval '500 seconds')::text FROM sandboxes WHERE id = $1", s2, NULL);
        ck_assert_str_eq(later, "true");

        /* Missing and deleted: not_found, naming the sandbox. */
        resolve_fails(dp, "{\"sandbox_id\":\"" ABSENT "\"}", SP_E_NOT_FOUND, "sandbox " ABSENT " not found");
        delete_sandbox(&t, unplaced);
        char req[128], want[96];
        snprintf(req, sizeof(req), "{\"sandbox_id\":\"%s\"}", unplaced);
        snprintf(want, sizeof(want), "sandbox %s not found", unplaced);
        resolve_fails(dp, req, SP_E_NOT_FOUND, want);
        delete_sandbox(&t, sbx);
        snprintf(req, sizeof(req), "{\"sandbox_id\":\"%s\"}", sbx);
        snprintf(want, sizeof(want), "sandbox %s not found", sbx);
        resolve_fails(dp, req, SP_E_NOT_FOUND, want);

        /* Bad requests name the field. */
        resolve_fails(dp, "{\"sandbox_id\":\"" ABSENT "\",\"tenant_id\":\"ten_x\"}", SP_E_INVALID,
                      "unknown field 'tenant_id'");
        resolve_fails(dp, "{}", SP_E_INVALID, "missing required field 'sandbox_id'");
        resolve_fails(dp, "{\"sandbox_id\":\"sbx_nope\"}", SP_E_INVALID, "sandbox_id");
        resolve_fails(dp, "{\"sandbox_id\":\"ses_0000000000000000000z\"}", SP_E_INVALID, "sandbox_id");
        resolve_fails(dp, "{\"sandbox_id\":7}", SP_E_INVALID, "sandbox_id");

        /* Data planes only. */
        _cleanup_(SSL_CTX_freep) SSL_CTX *worker = rpc_client(SP_ROLE_WORKER, "node-x");
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = rpc_client(0, NULL);
        resolve_fails(worker, "{\"sandbox_id\":\"" ABSENT "\"}", SP_E_PERMISSION, NULL);
        sp_error *e = NULL;
        ck_assert_ptr_null(resolve(anon, "{\"sandbox_id\":\"" ABSENT "\"}", &e));
        ck_assert_msg(e->code == SP_E_PERMISSION || e->code == SP_E_UNAUTHENTICATED, "%s", e->message);
        sp_error_free(e);
}
END_TEST

START_TEST(an_ingress_wake_over_a_quota_waits_for_room)
{
        tenant t;
        new_tenant("wake-quota", &t);
        char body[96];
        snprintf(body, sizeof(body), "{\"running_sandboxes\":1}");
        json_object_put(API(S.admin_key, "PUT", path_of("/v1/tenants/%s/quotas", t.id), 200, body));
        char s1[64], s2[64], state[32];
        sp_test_create_sandbox(&S, t.key, SANDBOX SANDBOX_END, s1);
        json_object_put(API(t.key, "PUT", path_of("/v1/sandboxes/%s/ingress", s1), 200, "{\"auto_resume\":true}"));
        sp_test_sandbox_action(&S, t.key, s1, "suspend", state);
        ck_assert_str_eq(state, "suspended");
        sp_test_create_sandbox(&S, t.key, SANDBOX SANDBOX_END, s2); /* the only slot */

        _cleanup_(SSL_CTX_freep) SSL_CTX *dp = rpc_client(SP_ROLE_DATAPLANE, "dp-quota");
        char wr[160];
        snprintf(wr, sizeof(wr), "{\"sandbox_id\":\"%s\",\"wake\":true,\"key_id\":\"key_quota\"}", s1);
        sp_error *we = NULL;
        _cleanup_json_ json_object *n = resolve(dp, wr, &we);
        ck_assert_msg(n, "%s", we ? we->message : "");
        ck_assert_ptr_null(json_object_object_get(n, "waking"));
        _cleanup_json_ json_object *still = API(t.key, "GET", path_of("/v1/sandboxes/%s", s1), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(still, "desired_state"), "suspended");
        const char *why = sp_test_jstr(still, "status_message");
        ck_assert_msg(why && strstr(why, "tenant quota exceeded: running_sandboxes limit 1, in use 1, requested 1"),
                      "%s", why ? why : "(none)");
        ck_assert_int_eq(audits("sandbox.wake", s1), 0);
        _cleanup_free_ char *ops =
                query1("SELECT count(*)::text FROM operations WHERE target_id = $1 AND kind = 'restore'", s1, NULL);
        ck_assert_str_eq(ops, "0");

        /* Room again: the next request wakes it. */
        delete_sandbox(&t, s2);
        _cleanup_json_ json_object *w = resolve(dp, wr, &we);
        ck_assert_msg(w, "%s", we ? we->message : "");
        ck_assert(json_object_get_boolean(json_object_object_get(w, "waking")));
        ck_assert_int_eq(audits("sandbox.wake", s1), 1);
}
END_TEST

/* ---- configuration ---- */

/* Starts a control-plane replica on replica 1's ports (the harness stops
 * whatever is left there) with S's database, extra options and environment
 * (both NULL-terminated; env may be NULL), each start with a log of its own. */
static int start_replica(sp_test_proc *p, const char *const *extra, const char *const *env, bool wait, sp_error **err)
{
        static int starts;
        char bin[1024], db[1200], listen[80], rpc[80], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-controlplane", sp_test_binary_dir());
        snprintf(db, sizeof(db), "--database=%s", S.conninfo);
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", S.api_port[1]);
        snprintf(rpc, sizeof(rpc), "--rpc-listen=127.0.0.1:%d", S.rpc_port[1]);
        snprintf(logp, sizeof(logp), "%s/controlplane-ingress-%d.log", S.dir, starts++);
        const char *argv[16] = {bin, db, listen, rpc, "--name=cp-ingress", "--log-format=text"};
        size_t n = 6;
        for (size_t i = 0; extra[i] && n < 15; i++)
                argv[n++] = extra[i];
        argv[n] = NULL;
        memset(p, 0, sizeof(*p));
        sp_test_proc_opts o = {.env = env, .log_path = logp};
        if (sp_test_proc_start(p, "controlplane-ingress", argv, &o, err) < 0)
                return -1;
        return wait ? sp_test_proc_wait_http(p, "127.0.0.1", S.api_port[1], "/healthz", 30000, err) : 0;
}

/* GETs sandbox id through replica 1 as t, checks its URL templates. */
static void expect_urls_from_replica(const tenant *t, const char *id, const char *url, const char *path_url)
{
        int main_port = S.api;
        S.api = S.api_port[1];
        _cleanup_json_ json_object *g = API(t->key, "GET", path_of("/v1/sandboxes/%s", id), 200, NULL);
        _cleanup_json_ json_object *tk =
                API(t->key, "POST", path_of("/v1/sandboxes/%s/ingress/tokens", id), 201, "{\"ttl_s\":60}");
        S.api = main_port;
        ck_assert_str_eq(sp_test_jstr(g, "ingress.url"), url);
        ck_assert_str_eq(sp_test_jstr(g, "ingress.path_url"), path_url);
        ck_assert_str_eq(sp_test_jstr(tk, "url"), url);
        ck_assert_str_eq(sp_test_jstr(tk, "path_url"), path_url);
}

START_TEST(defaults_and_the_ingress_domain_setting)
{
        tenant t;
        new_tenant("config", &t);
        _cleanup_json_ json_object *c = API(t.key, "POST", "/v1/sandboxes", 202, SANDBOX SANDBOX_END);
        const char *id = sp_test_jstr(c, "sandbox.id");
        sp_error *e = NULL;
        char url[512], path_url[512];

        /* The defaults: the data plane at http://127.0.0.1:7071, *.localhost. */
        sp_test_proc p;
        static const char *const none[] = {NULL};
        sp_test_ok(start_replica(&p, none, NULL, true, &e), &e);
        want_urls("http", ":7071", "http://127.0.0.1:7071", "localhost", id, url, path_url);
        expect_urls_from_replica(&t, id, url, path_url);
        sp_test_ok(sp_test_proc_stop(&p, 10000, &e), &e);
        sp_test_proc_free(&p);

        /* A data plane URL with a path and no port; the domain from the environment. */
        static const char *const dp_path[] = {"--dataplane-url=https://dp.example.test/space//", NULL};
        static const char *const domain_env[] = {"SPACE_CONTROLPLANE_INGRESS_DOMAIN=sbx.example-1.test", NULL};
        sp_test_ok(start_replica(&p, dp_path, domain_env, true, &e), &e);
        want_urls("https", "", "https://dp.example.test/space", "sbx.example-1.test", id, url, path_url);
        expect_urls_from_replica(&t, id, url, path_url);
        sp_test_ok(sp_test_proc_stop(&p, 10000, &e), &e);
        sp_test_proc_free(&p);

        /* A domain that is no DNS name, or not lowercase, or too long: refused at start-up. */
        char long_domain[260];
        memset(long_domain, 'a', sizeof(long_domain));
        for (size_t i = 50; i < 250; i += 51)
                long_domain[i] = '.';
        snprintf(long_domain + 201, sizeof(long_domain) - 201, ".test");
        const char *bad[] = {"Apps.example.test",
                             "apps..example.test",
                             "-apps.example.test",
                             "apps-.example.test",
                             "apps.example.test.",
                             "apps_1.example.test",
                             "",
                             long_domain};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                char arg[300];
                snprintf(arg, sizeof(arg), "--ingress-domain=%s", bad[i]);
                const char *extra[] = {arg, NULL};
                sp_test_ok(start_replica(&p, extra, NULL, false, &e), &e);
                int status = 0;
                sp_test_ok(sp_test_proc_wait_exit(&p, 30000, &status, &e), &e);
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2, "'%s': status %d", bad[i], status);
                _cleanup_buf_ sp_buf log = SP_BUF_INIT;
                sp_test_ok(sp_file_read(p.log_path, 1 << 20, &log, &e), &e);
                ck_assert_msg(log.data && strstr(log.data, "--ingress-domain must be a DNS name"), "'%s': %s", bad[i],
                              log.data ? log.data : "");
                sp_test_proc_free(&p);
        }
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_ingress");
        TCase *tc = tcase_create("ingress");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, modes_and_url_templates);
        tcase_add_test(tc, foreign_missing_and_deleted_are_not_found);
        tcase_add_test(tc, ingress_tokens_carry_exactly_their_claims);
        tcase_add_test(tc, resolve_sandbox_for_data_planes);
        tcase_add_test(tc, an_ingress_wake_over_a_quota_waits_for_room);
        tcase_add_test(tc, defaults_and_the_ingress_domain_setting);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
