/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-dataplane's front door, without a worker (no root needed): every kind
 * of bad token is refused with the spec's status, code and message, before
 * anything reaches a worker, and no token is ever echoed or logged; bad
 * requests under a good token are refused clearly; template tokens grant
 * their one upload only, within their max; /healthz, /readyz and
 * /metrics; key rotation through the key files and SIGHUP; settings that
 * cannot work stop the daemon with a clear message; and the cluster path —
 * Join with role dataplane, TokenKeys and RevokedKeys, against a stand-in control plane
 * that follows proto/spec/controlplane-rpc.md — including a key rotated at
 * the control plane and a restart that uses the saved certificate and keys
 * while the control plane is down.
 */
#include <event2/event.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dataplane/env.h"
#include "harness.h"
#include "launcher.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/time.h"
#include "space/tls.h"

/* A worker address nothing listens on: a request that passes the token check fails there, fast. */
#define NO_WORKER "127.0.0.1:1"
#define SES "ses_test0000000000000001"
#define SBX "sbx_test0000000000000001"
#define TPL "tpl_test0000000000000001"

static dpt_env env;
static sp_test_proc dp;
static int port;

static void case_setup(void)
{
        dpt_env_up(&env, false, 0);
        static const char *const extra[] = {"--keepalive-ms=1000", NULL};
        port = dpt_dataplane_start(&env, &dp, "dataplane", extra);
}

static void case_teardown(void)
{
        bool clean = dpt_dataplane_stop(&dp);
        dpt_env_down(&env);
        ck_assert_msg(clean, "the data plane did not stop cleanly");
}

/* Signs arbitrary claims (iat, exp and kid included) with key1's private key. */
static char *sign_raw(json_object *claims)
{
        char path[700];
        snprintf(path, sizeof(path), "%s/key1.key", env.dir);
        _cleanup_fclose_ FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        EVP_PKEY *key = PEM_read_PrivateKey(f, NULL, NULL, NULL);
        ck_assert_ptr_nonnull(key);
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        sp_buf_append_str(&t, "v1.", NULL);
        const char *text = sp_json_str(claims);
        sp_base64_encode(&t, text, strlen(text), 1, NULL);
        unsigned char sig[64];
        size_t siglen = sizeof(sig);
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        ck_assert_int_eq(EVP_DigestSignInit(md, NULL, NULL, NULL, key), 1);
        ck_assert_int_eq(EVP_DigestSign(md, sig, &siglen, (const unsigned char *)t.data, t.len), 1);
        EVP_MD_CTX_free(md);
        EVP_PKEY_free(key);
        sp_buf_append_str(&t, ".", NULL);
        sp_base64_encode(&t, sig, siglen, 1, NULL);
        return sp_buf_steal(&t);
}

static char *session_token(const char *ses, const char *scope)
{
        return dpt_token(env.signer, "session", SBX, ses, NO_WORKER, scope, NULL, 300);
}

static char *files_token(const char *sbx, const char *scope, const char *path)
{
        return dpt_token(env.signer, "files", sbx, NULL, NO_WORKER, scope, path, 300);
}

typedef struct refusal {
        const char *name; /* what the case shows */
        const char *method, *target;
        const char *header; /* one extra header line, or NULL */
        const char *body;
        int status;
        const char *code, *message; /* the error shape's code and (a part of) its message */
} refusal;

/* Sends c and checks status, code and message; the answer never carries a token. */
static void expect(const refusal *c, const char *const *tokens)
{
        const char *headers[] = {c->header, NULL};
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        int status = dpt_http(port, c->method, c->target, headers, c->body, c->body ? strlen(c->body) : 0, &body);
        ck_assert_msg(status == c->status, "%s: status %d, wanted %d: %s", c->name, status, c->status, body.data);
        _cleanup_json_ json_object *o = NULL;
        ck_assert_msg(sp_json_parse(body.data, body.len, &o, NULL) == 0, "%s: not JSON: %s", c->name, body.data);
        json_object *err = NULL, *code = NULL, *msg = NULL;
        ck_assert_msg(json_object_object_get_ex(o, "error", &err) && json_object_object_get_ex(err, "code", &code) &&
                              json_object_object_get_ex(err, "message", &msg),
                      "%s: not the error shape: %s", c->name, body.data);
        ck_assert_msg(strcmp(json_object_get_string(code), c->code) == 0, "%s: code %s, wanted %s", c->name,
                      json_object_get_string(code), c->code);
        ck_assert_msg(strstr(json_object_get_string(msg), c->message), "%s: message '%s' lacks '%s'", c->name,
                      json_object_get_string(msg), c->message);
        for (size_t i = 0; tokens[i]; i++)
                ck_assert_msg(!strstr(body.data, tokens[i]), "%s: the answer echoes a token", c->name);
}

START_TEST(every_bad_token_is_refused_with_the_right_answer)
{
        _cleanup_free_ char *good = session_token(SES, "read");
        _cleanup_free_ char *write = session_token(SES, "write");
        _cleanup_free_ char *other_ses = session_token("ses_test0000000000000002", "write");
        _cleanup_free_ char *unknown = dpt_token(env.signer2, "session", SBX, SES, NO_WORKER, "read", NULL, 300);
        _cleanup_free_ char *files = files_token(SBX, "write", NULL);
        _cleanup_free_ char *files_ro = files_token(SBX, "read", NULL);
        _cleanup_free_ char *other_sbx = files_token("sbx_test0000000000000002", "write", NULL);
        _cleanup_free_ char *one_path = files_token(SBX, "write", "/etc/hostname");
        _cleanup_free_ char *bad_sig = strdup(good);
        char *last = bad_sig + strlen(bad_sig) - 2; /* a signature character, not the padding bits */
        *last = *last == 'A' ? 'B' : 'A';
        _cleanup_free_ char *bad_typ = dpt_token(env.signer, "console", SBX, SES, NO_WORKER, "read", NULL, 300);
        _cleanup_free_ char *no_wkr = dpt_token(env.signer, "session", SBX, SES, "not an address", "read", NULL, 300);
        int64_t now = sp_now_real_us() / SP_USEC_PER_SEC;
        _cleanup_json_ json_object *future = json_object_new_object();
        json_object_object_add(future, "typ", json_object_new_string("session"));
        json_object_object_add(future, "sbx", json_object_new_string(SBX));
        json_object_object_add(future, "ses", json_object_new_string(SES));
        json_object_object_add(future, "wkr", json_object_new_string(NO_WORKER));
        json_object_object_add(future, "scope", json_object_new_string("read"));
        json_object_object_add(future, "iat", json_object_new_int64(now + 3600));
        json_object_object_add(future, "exp", json_object_new_int64(now + 7200));
        json_object_object_add(future, "kid", json_object_new_string(sp_token_signer_kid(env.signer)));
        _cleanup_free_ char *not_yet = sign_raw(future);
        /* One second of life, then expired. */
        _cleanup_free_ char *expired = dpt_token(env.signer, "session", SBX, SES, NO_WORKER, "read", NULL, 1);
        sleep(2);

        char h_good[4200], h_bad_sig[4200], h_unknown[4200], h_expired[4200], h_not_yet[4200], h_other_ses[4200],
                h_files[4200], h_files_ro[4200], h_other_sbx[4200], h_one_path[4200], h_write[4200], h_bad_typ[4200],
                h_no_wkr[4200], q_good[4200], q_twice[8400];
#define BEARER(buf, tok) snprintf(buf, sizeof(buf), "Authorization: Bearer %s", tok)
        BEARER(h_good, good);
        BEARER(h_bad_sig, bad_sig);
        BEARER(h_unknown, unknown);
        BEARER(h_expired, expired);
        BEARER(h_not_yet, not_yet);
        BEARER(h_other_ses, other_ses);
        BEARER(h_files, files);
        BEARER(h_files_ro, files_ro);
        BEARER(h_other_sbx, other_sbx);
        BEARER(h_one_path, one_path);
        BEARER(h_write, write);
        BEARER(h_bad_typ, bad_typ);
        BEARER(h_no_wkr, no_wkr);
        snprintf(q_good, sizeof(q_good), "/v1/sessions/" SES "/attach?token=%s", good);
        snprintf(q_twice, sizeof(q_twice), "/v1/sessions/" SES "/attach?token=%s&token=%s", good, good);
        const char *attach = "/v1/sessions/" SES "/attach";
        const char *stdin_ = "/v1/sessions/" SES "/stdin";
        const char *file = "/v1/sandboxes/" SBX "/files?path=/etc/hostname";
        const refusal cases[] = {
                {"no token", "GET", attach, NULL, NULL, 401, "unauthenticated", "missing token"},
                {"not a bearer token", "GET", attach, "Authorization: Basic dXNlcjpwdw==", NULL, 401, "unauthenticated",
                 "malformed token"},
                {"malformed", "GET", attach, "Authorization: Bearer v1.nope", NULL, 401, "unauthenticated",
                 "malformed token"},
                {"empty bearer", "GET", attach, "Authorization: Bearer ", NULL, 401, "unauthenticated",
                 "malformed token"},
                {"bad signature", "GET", attach, h_bad_sig, NULL, 401, "unauthenticated", "bad signature"},
                {"unknown key", "GET", attach, h_unknown, NULL, 401, "unauthenticated", "unknown signing key"},
                {"expired", "GET", attach, h_expired, NULL, 401, "unauthenticated", "token expired"},
                {"not yet valid", "GET", attach, h_not_yet, NULL, 401, "unauthenticated", "token not yet valid"},
                {"claims of another kind", "GET", attach, h_bad_typ, NULL, 401, "unauthenticated",
                 "malformed token claims"},
                {"no worker address", "GET", attach, h_no_wkr, NULL, 401, "unauthenticated", "'wkr'"},
                {"other session", "GET", attach, h_other_ses, NULL, 403, "permission_denied",
                 "token does not grant this session"},
                {"files token on a session route", "GET", attach, h_files, NULL, 403, "permission_denied",
                 "token does not grant this route"},
                {"session token on a files route", "GET", file, h_write, NULL, 403, "permission_denied",
                 "token does not grant this route"},
                {"other sandbox", "GET", file, h_other_sbx, NULL, 403, "permission_denied",
                 "token does not grant this sandbox"},
                {"other path", "GET", "/v1/sandboxes/" SBX "/files?path=/etc/passwd", h_one_path, NULL, 403,
                 "permission_denied", "token does not grant this path"},
                {"no path for a one-path token", "GET", "/v1/sandboxes/" SBX "/files", h_one_path, NULL, 403,
                 "permission_denied", "token does not grant this path"},
                {"read-only on stdin", "POST", stdin_, h_good, "x", 403, "permission_denied", "token is read-only"},
                {"read-only on signal", "POST", "/v1/sessions/" SES "/signal", h_good, "{\"signal\":\"TERM\"}", 403,
                 "permission_denied", "token is read-only"},
                {"read-only on a file write", "PUT", file, h_files_ro, "data", 403, "permission_denied",
                 "token is read-only"},
                {"header and query", "GET", q_good, h_good, NULL, 400, "invalid_argument", "not both"},
                {"query twice", "GET", q_twice, NULL, NULL, 400, "invalid_argument", "given twice"},
        };
        const char *tokens[] = {good,     write,   other_ses, unknown, files,   files_ro, other_sbx,
                                one_path, bad_sig, bad_typ,   no_wkr,  not_yet, expired,  NULL};
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++)
                expect(&cases[i], tokens);

        /* The same tokens where they are good pass the check and fail only at the (missing) worker. */
        const refusal passes[] = {
                {"good, as a header", "GET", attach, h_good, NULL, 503, "unavailable", "cannot be reached"},
                {"good, as a query parameter", "GET", q_good, NULL, NULL, 503, "unavailable", "cannot be reached"},
                {"write token on stdin", "POST", stdin_, h_write, "x", 503, "unavailable", "cannot be reached"},
                {"files token", "GET", file, h_files_ro, NULL, 503, "unavailable", "cannot be reached"},
                {"one-path token on its path", "PUT", file, h_one_path, "data", 503, "unavailable",
                 "cannot be reached"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(passes); i++)
                expect(&passes[i], tokens);

        /* Nothing logged a token; the refusals name their reason and the key. */
        _cleanup_free_ char *log = dpt_log(&dp);
        for (size_t i = 0; tokens[i]; i++) {
                const char *sig = strrchr(tokens[i], '.');
                ck_assert_msg(!strstr(log, tokens[i]) && !strstr(log, sig), "the log holds a token");
        }
        ck_assert_msg(strstr(log, "\"refusal\":\"expired\""), "no refusal reason logged");
        char kid[64];
        snprintf(kid, sizeof(kid), "\"kid\":\"%s\"", sp_token_signer_kid(env.signer));
        ck_assert_msg(strstr(log, kid), "the key id is not logged");
}
END_TEST

START_TEST(bad_requests_under_a_good_token_are_refused_clearly)
{
        _cleanup_free_ char *ses = session_token(SES, "write");
        _cleanup_free_ char *fil = files_token(SBX, "write", NULL);
        char hs[4200], hf[4200];
        BEARER(hs, ses);
        BEARER(hf, fil);
        const char *tokens[] = {ses, fil, NULL};
        const char *attach = "/v1/sessions/" SES "/attach";
        const refusal cases[] = {
                {"offset not a number", "GET", "/v1/sessions/" SES "/attach?offset=ten", hs, NULL, 400,
                 "invalid_argument", "'offset'"},
                {"negative offset", "GET", "/v1/sessions/" SES "/attach?offset=-1", hs, NULL, 400, "invalid_argument",
                 "'offset'"},
                {"unknown parameter", "GET", "/v1/sessions/" SES "/attach?from=1", hs, NULL, 400, "invalid_argument",
                 "unknown query parameter 'from'"},
                {"stdin close not a boolean", "POST", "/v1/sessions/" SES "/stdin?close=yes", hs, "x", 400,
                 "invalid_argument", "'close'"},
                {"resize out of range", "POST", "/v1/sessions/" SES "/resize", hs, "{\"rows\":0,\"cols\":80}", 400,
                 "invalid_argument", "'rows'"},
                {"resize unknown field", "POST", "/v1/sessions/" SES "/resize", hs, "{\"rows\":10,\"cols\":80,\"x\":1}",
                 400, "invalid_argument", "unknown field 'x'"},
                {"resize not JSON", "POST", "/v1/sessions/" SES "/resize", hs, "rows=10", 400, "invalid_argument",
                 "body"},
                {"unknown signal", "POST", "/v1/sessions/" SES "/signal", hs, "{\"signal\":\"SIGFOO\"}", 400,
                 "invalid_argument", "'signal'"},
                {"signal number out of range", "POST", "/v1/sessions/" SES "/signal", hs, "{\"signal\":65}", 400,
                 "invalid_argument", "'signal'"},
                {"file without a path", "GET", "/v1/sandboxes/" SBX "/files", hf, NULL, 400, "invalid_argument",
                 "'path'"},
                {"file mode not octal", "PUT", "/v1/sandboxes/" SBX "/files?path=/x&mode=0999", hf, "x", 400,
                 "invalid_argument", "'mode'"},
                {"file length not a number", "GET", "/v1/sandboxes/" SBX "/files?path=/x&length=1e3", hf, NULL, 400,
                 "invalid_argument", "'length'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++)
                expect(&cases[i], tokens);
        /* Last-Event-ID must be an offset too. */
        const char *headers[] = {hs, "Last-Event-ID: abc", NULL};
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port, "GET", attach, headers, NULL, 0, &body), 400);
        ck_assert_msg(strstr(body.data, "Last-Event-ID"), "%s", body.data);
}
END_TEST

/* Template tokens: refused off their route and template, their claims
 * checked, a Content-Length past their max refused before the worker. */
START_TEST(template_tokens_grant_one_upload_only)
{
        const char *tpl = "/v1/templates/" TPL "/upload";
        _cleanup_free_ char *good = dpt_template_token(env.signer, TPL, "tar", 5, NO_WORKER, "write", 300);
        _cleanup_free_ char *ro = dpt_template_token(env.signer, TPL, "oci", 5, NO_WORKER, "read", 300);
        _cleanup_free_ char *other =
                dpt_template_token(env.signer, "tpl_test0000000000000002", "tar", 5, NO_WORKER, "write", 300);
        _cleanup_free_ char *ses = session_token(SES, "write");
        _cleanup_free_ char *fil = files_token(SBX, "write", NULL);
        int64_t now = sp_now_real_us() / SP_USEC_PER_SEC;
        _cleanup_json_ json_object *c = json_object_new_object();
        json_object_object_add(c, "typ", json_object_new_string("template"));
        json_object_object_add(c, "tpl", json_object_new_string(TPL));
        json_object_object_add(c, "fmt", json_object_new_string("tar"));
        json_object_object_add(c, "wkr", json_object_new_string(NO_WORKER));
        json_object_object_add(c, "scope", json_object_new_string("write"));
        json_object_object_add(c, "iat", json_object_new_int64(now));
        json_object_object_add(c, "exp", json_object_new_int64(now + 300));
        json_object_object_add(c, "kid", json_object_new_string(sp_token_signer_kid(env.signer)));
        _cleanup_free_ char *no_max = sign_raw(c);
        json_object_object_add(c, "max", json_object_new_int64(5));
        json_object_object_add(c, "sbx", json_object_new_string(SBX));
        _cleanup_free_ char *with_sbx = sign_raw(c);

        char h_good[4200], h_ro[4200], h_other[4200], h_ses[4200], h_fil[4200], h_no_max[4200], h_sbx[4200];
        BEARER(h_good, good);
        BEARER(h_ro, ro);
        BEARER(h_other, other);
        BEARER(h_ses, ses);
        BEARER(h_fil, fil);
        BEARER(h_no_max, no_max);
        BEARER(h_sbx, with_sbx);
        const refusal cases[] = {
                {"no max", "PUT", tpl, h_no_max, "x", 401, "unauthenticated", "'max'"},
                {"a sandbox on a template token", "PUT", tpl, h_sbx, "x", 401, "unauthenticated", "'sbx'"},
                {"another template", "PUT", "/v1/templates/tpl_test0000000000000002/upload", h_good, "x", 403,
                 "permission_denied", "token does not grant this template"},
                {"another template's token", "PUT", tpl, h_other, "x", 403, "permission_denied",
                 "token does not grant this template"},
                {"read-only", "PUT", tpl, h_ro, "x", 403, "permission_denied", "token is read-only"},
                {"session token on the template route", "PUT", tpl, h_ses, "x", 403, "permission_denied",
                 "token does not grant this route"},
                {"files token on the template route", "PUT", tpl, h_fil, "x", 403, "permission_denied",
                 "token does not grant this route"},
                {"template token on a session route", "GET", "/v1/sessions/" SES "/attach", h_good, NULL, 403,
                 "permission_denied", "token does not grant this route"},
                {"template token on a files route", "PUT", "/v1/sandboxes/" SBX "/files?path=/x", h_good, "x", 403,
                 "permission_denied", "token does not grant this route"},
                {"a query parameter", "PUT", "/v1/templates/" TPL "/upload?format=oci", h_good, "x", 400,
                 "invalid_argument", "unknown query parameter 'format'"},
                {"past the token's max", "PUT", tpl, h_good, "123456", 413, "too_large", "larger than its 5 bytes"},
                /* Within it, the request passes and fails only at the (missing) worker. */
                {"within max", "PUT", tpl, h_good, "12345", 503, "unavailable", "the template's worker cannot be"},
        };
        const char *tokens[] = {good, ro, other, ses, fil, no_max, with_sbx, NULL};
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++)
                expect(&cases[i], tokens);

        _cleanup_free_ char *log = dpt_log(&dp);
        for (size_t i = 0; tokens[i]; i++)
                ck_assert_msg(!strstr(log, tokens[i]) && !strstr(log, strrchr(tokens[i], '.')),
                              "the log holds a token");
        ck_assert_msg(strstr(log, "\"template_id\":\"" TPL "\""), "the template is not logged");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port, "GET", "/metrics", NULL, NULL, 0, &b), 200);
        ck_assert_msg(strstr(b.data, "space_dataplane_token_refusals_total{reason=\"template\"} 2\n"), "%s", b.data);
        ck_assert_msg(strstr(b.data, "space_dataplane_requests_total{route=\"template_put\",status=\"413\"} 1\n"), "%s",
                      b.data);
}
END_TEST

START_TEST(health_readiness_and_metrics)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port, "GET", "/healthz", NULL, NULL, 0, &b), 200);
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "GET", "/readyz", NULL, NULL, 0, &b), 200);
        /* a refusal of each of two kinds, then the counters */
        _cleanup_free_ char *ro = session_token(SES, "read");
        char h[4200];
        BEARER(h, ro);
        const char *hs[] = {h, NULL};
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "GET", "/v1/sessions/" SES "/attach", NULL, NULL, 0, &b), 401);
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "POST", "/v1/sessions/" SES "/close-stdin", hs, "", 0, &b), 403);
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "GET", "/metrics", NULL, NULL, 0, &b), 200);
        const char *want[] = {
                "space_dataplane_token_refusals_total{reason=\"missing\"} ",
                "space_dataplane_token_refusals_total{reason=\"read_only\"} ",
                "space_dataplane_requests_total{route=\"attach\",status=\"401\"} ",
                "space_dataplane_requests_total{route=\"close_stdin\",status=\"403\"} ",
                "space_dataplane_attach_streams 0\n",
                "space_dataplane_output_bytes_total{stream=\"stdout\"} ",
                "space_dataplane_file_bytes_total{direction=\"in\"} ",
                "space_dataplane_stdin_bytes_total ",
                "space_dataplane_worker_errors_total ",
                "space_dataplane_token_keys 1\n",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(want); i++)
                ck_assert_msg(strstr(b.data, want[i]), "metrics lack %s:\n%s", want[i], b.data);
        ck_assert_msg(!strstr(b.data, "token_refusals_total{reason=\"missing\"} 0\n"), "the refusal was not counted");
        /* unknown paths and methods answer in the error shape */
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "GET", "/v1/nope", NULL, NULL, 0, &b), 404);
        ck_assert_msg(strstr(b.data, "\"not_found\""), "%s", b.data);
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "DELETE", "/v1/sessions/" SES "/attach", NULL, NULL, 0, &b), 405);
}
END_TEST

/* Waits until a request with the header line h answers something else than 401; returns the status. */
static int status_of(int p, const char *h)
{
        const char *hs[] = {h, NULL};
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        return dpt_http(p, "GET", "/v1/sessions/" SES "/attach", hs, NULL, 0, &b);
}

START_TEST(key_files_rotate_on_sighup)
{
        char keyfile[700], key2[700], arg[800];
        snprintf(keyfile, sizeof(keyfile), "%s/rotating.pub", env.dir);
        snprintf(key2, sizeof(key2), "%s/key2.pub", env.dir);
        _cleanup_buf_ sp_buf pem2 = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(key2, 65536, &pem2, NULL), 0);
        /* This replica trusts key1 (from the fixture's flags) and whatever rotating.pub holds: key2 later. */
        _cleanup_buf_ sp_buf pem1 = SP_BUF_INIT;
        char key1[700];
        snprintf(key1, sizeof(key1), "%s/key1.pub", env.dir);
        ck_assert_int_eq(sp_file_read(key1, 65536, &pem1, NULL), 0);
        ck_assert_int_eq(sp_file_write_atomic(keyfile, pem1.data, pem1.len, 0644, NULL), 0);
        snprintf(arg, sizeof(arg), "--token-public-key=%s", keyfile);
        const char *extra[] = {arg, NULL};
        sp_test_proc mine = {0};
        int p = dpt_dataplane_start(&env, &mine, "dataplane-rotate", extra);

        _cleanup_free_ char *t2 = dpt_token(env.signer2, "session", SBX, SES, NO_WORKER, "read", NULL, 300);
        char h2[4200];
        BEARER(h2, t2);
        ck_assert_int_eq(status_of(p, h2), 401);
        /* Rotated: the file holds two keys, the current one (key1) first, as the control plane's
         * --token-public-key-out writes them; the second one verifies too. */
        _cleanup_buf_ sp_buf both = SP_BUF_INIT;
        ck_assert_int_eq(sp_buf_append(&both, pem1.data, pem1.len, NULL), 0);
        ck_assert_int_eq(sp_buf_append(&both, pem2.data, pem2.len, NULL), 0);
        ck_assert_int_eq(sp_file_write_atomic(keyfile, both.data, both.len, 0644, NULL), 0);
        kill(mine.pid, SIGHUP);
        int st = 401;
        for (int i = 0; i < 100 && st == 401; i++) {
                usleep(50000);
                st = status_of(p, h2);
        }
        ck_assert_int_eq(st, 503); /* past the token check, on to the missing worker */

        /* A key file that does not parse keeps the keys held. */
        ck_assert_int_eq(sp_file_write_atomic(keyfile, "garbage", 7, 0644, NULL), 0);
        kill(mine.pid, SIGHUP);
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_wait_log(&mine, "keeping the token keys held", 10000, &e), &e);
        ck_assert_int_eq(status_of(p, h2), 503);
        ck_assert(dpt_dataplane_stop(&mine));
}
END_TEST

/* Runs space-dataplane with args and expects it to stop at once with status 2 (or 1) and the message in its log. */
static void refused_start(const char *const *args, int want_status, const char *message)
{
        char bin[1024], logp[800];
        snprintf(bin, sizeof(bin), "%s/bin/space-dataplane", sp_test_binary_dir());
        snprintf(logp, sizeof(logp), "%s/refused.log", env.dir);
        unlink(logp);
        const char *argv[32] = {bin};
        size_t n = 1;
        for (size_t i = 0; args[i] && n < 31; i++)
                argv[n++] = args[i];
        argv[n] = NULL;
        sp_test_proc p = {0};
        sp_test_proc_opts o = {.log_path = logp};
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_start(&p, "refused", argv, &o, &e), &e);
        int status = 0;
        sp_test_ok(sp_test_proc_wait_exit(&p, 10000, &status, &e), &e);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == want_status, "exit status %d for %s", status,
                      message);
        _cleanup_free_ char *log = dpt_log(&p);
        ck_assert_msg(strstr(log, message), "log lacks '%s': %s", message, log);
        sp_test_proc_free(&p);
}

START_TEST(settings_that_cannot_work_are_refused)
{
        char ca[700], cert[700], key[700], tok[700], bad_tok[700];
        snprintf(ca, sizeof(ca), "--rpc-ca=%s/ca.pem", env.dir);
        snprintf(cert, sizeof(cert), "--rpc-cert=%s/dataplane.crt", env.dir);
        snprintf(key, sizeof(key), "--rpc-key=%s/dataplane.key", env.dir);
        snprintf(tok, sizeof(tok), "--token-public-key=%s/key1.pub", env.dir);
        snprintf(bad_tok, sizeof(bad_tok), "--token-public-key=%s/ca.pem", env.dir);
        const char *no_keys[] = {ca, cert, key, "--listen=127.0.0.1:0", NULL};
        refused_start(no_keys, 2, "no token keys");
        const char *no_cert[] = {tok, "--listen=127.0.0.1:0", NULL};
        refused_start(no_cert, 2, "no cluster certificate");
        const char *no_ca[] = {cert, key, tok, "--listen=127.0.0.1:0", NULL};
        refused_start(no_ca, 2, "--rpc-cert needs --rpc-ca");
        const char *public_plain[] = {ca, cert, key, tok, "--listen=0.0.0.0:0", NULL};
        refused_start(public_plain, 2, "is not loopback");
        const char *not_a_key[] = {ca, cert, key, bad_tok, "--listen=127.0.0.1:0", NULL};
        refused_start(not_a_key, 1, "token key 1");
        const char *both_tokens[] = {"--control-plane=127.0.0.1:1", "--join-token=a",
                                     "--join-token-file=/x",        tok,
                                     "--listen=127.0.0.1:0",        NULL};
        refused_start(both_tokens, 2, "not both");
        char wc[700], wk[700];
        snprintf(wc, sizeof(wc), "--rpc-cert=%s/worker.crt", env.dir);
        snprintf(wk, sizeof(wk), "--rpc-key=%s/dataplane.key", env.dir);
        const char *mismatched[] = {ca, wc, wk, tok, "--listen=127.0.0.1:0", NULL};
        refused_start(mismatched, 1, "tls:");
}
END_TEST

/* ---- a stand-in control plane: Join with role dataplane, TokenKeys ---- */

typedef struct fake_cp {
        pthread_t thread;
        int stop_fd;
        int port;
        char *ca_pem, *cert_pem, *key_pem;
        sp_pki_ca *ca;
        pthread_mutex_t mu;
        char *keys[4]; /* PEMs TokenKeys answers, under mu */
        int joins, fetches; /* under mu */
        char join_body[8192]; /* the last Join request, under mu */
        bool ready;
} fake_cp;

static void fake_set_keys(fake_cp *f, const char *a, const char *b)
{
        pthread_mutex_lock(&f->mu);
        for (int i = 0; i < 4; i++) {
                free(f->keys[i]);
                f->keys[i] = NULL;
        }
        f->keys[0] = a ? strdup(a) : NULL;
        f->keys[1] = b && a ? strdup(b) : NULL;
        pthread_mutex_unlock(&f->mu);
}

static json_object *fake_keys_json(fake_cp *f)
{
        json_object *arr = json_object_new_array();
        pthread_mutex_lock(&f->mu);
        for (int i = 0; i < 4 && f->keys[i]; i++)
                json_object_array_add(arr, json_object_new_string(f->keys[i]));
        pthread_mutex_unlock(&f->mu);
        return arr;
}

static void fake_join(sp_rpc_call *call, json_object *req, void *userdata)
{
        fake_cp *f = userdata;
        pthread_mutex_lock(&f->mu);
        f->joins++;
        snprintf(f->join_body, sizeof(f->join_body), "%s", sp_json_str(req));
        pthread_mutex_unlock(&f->mu);
        static const char *const fields[] = {"role", "token", "name", "csr", NULL};
        const char *role = NULL, *token = NULL, *name = NULL, *csr = NULL;
        sp_error *e = NULL;
        if (sp_json_check_fields(req, fields, &e) < 0 || sp_json_get_string(req, "role", true, 16, &role, &e) < 0 ||
            sp_json_get_string(req, "token", true, 200, &token, &e) < 0 ||
            sp_json_get_string(req, "name", true, 63, &name, &e) < 0 ||
            sp_json_get_string(req, "csr", true, 65536, &csr, &e) < 0) {
                sp_rpc_call_fail(call, e);
                sp_error_free(e);
                return;
        }
        if (strcmp(token, "spj_test_secret") != 0 || strcmp(role, "dataplane") != 0) {
                sp_rpc_call_failf(call, SP_E_UNAUTHENTICATED, "invalid join token");
                return;
        }
        sp_pki_cert_info info;
        _cleanup_free_ char *cert = sp_pki_csr_sign(f->ca, csr, SP_ROLE_DATAPLANE, 30, &info, &e);
        if (!cert || strcmp(info.name, name) != 0) {
                sp_rpc_call_failf(call, SP_E_INVALID, "bad CSR");
                sp_error_free(e);
                return;
        }
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "certificate", json_object_new_string(cert));
        json_object_object_add(resp, "ca", json_object_new_string(f->ca_pem));
        json_object_object_add(resp, "token_keys", fake_keys_json(f));
        sp_rpc_call_reply(call, resp, NULL);
}

static void fake_token_keys(sp_rpc_call *call, json_object *req, void *userdata)
{
        fake_cp *f = userdata;
        pthread_mutex_lock(&f->mu);
        f->fetches++;
        pthread_mutex_unlock(&f->mu);
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "token_keys", fake_keys_json(f));
        sp_rpc_call_reply(call, resp, NULL);
}

/* No key was ever revoked: the data plane's /readyz waits for this first answer. */
static void fake_revoked_keys(sp_rpc_call *call, json_object *req, void *userdata)
{
        (void)req;
        (void)userdata;
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "keys", json_object_new_array());
        json_object_object_add(resp, "cursor_us", json_object_new_int64(sp_now_real_us()));
        json_object_object_add(resp, "more", json_object_new_boolean(false));
        sp_rpc_call_reply(call, resp, NULL);
}

static int fake_identity(SSL *ssl, void *userdata, unsigned *ret_role, char **ret_name, sp_error **err)
{
        if (!SSL_get0_peer_certificate(ssl)) {
                *ret_role = 0;
                *ret_name = NULL;
                return 0;
        }
        sp_role role;
        if (sp_tls_peer_identity(ssl, &role, ret_name, err) < 0)
                return -SP_E_UNAUTHENTICATED;
        *ret_role = (unsigned)role;
        return 0;
}

static void fake_stop(evutil_socket_t fd, short what, void *userdata)
{
        event_base_loopbreak(userdata);
}

static void *fake_main(void *userdata)
{
        fake_cp *f = userdata;
        struct event_base *base = event_base_new();
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {.ca_pem = f->ca_pem,
                            .cert_pem = f->cert_pem,
                            .key_pem = f->key_pem,
                            .peer_roles = SP_ROLE_DATAPLANE,
                            .peer_optional = true,
                            .alpn = alpn};
        SSL_CTX *ctx = sp_tls_server_ctx_new(&tc, NULL);
        sp_rpc_server *srv = ctx ? sp_rpc_server_new(base, ctx, NULL) : NULL;
        SSL_CTX_free(ctx);
        if (!srv)
                abort();
        sp_rpc_server_set_identity_fn(srv, fake_identity, NULL);
        const sp_rpc_method join = {
                .name = "Join", .roles = SP_RPC_UNAUTHENTICATED, .handler = fake_join, .userdata = f};
        const sp_rpc_method keys = {
                .name = "TokenKeys", .roles = SP_ROLE_DATAPLANE, .handler = fake_token_keys, .userdata = f};
        const sp_rpc_method revoked = {
                .name = "RevokedKeys", .roles = SP_ROLE_DATAPLANE, .handler = fake_revoked_keys, .userdata = f};
        if (sp_rpc_server_register(srv, &join, NULL) < 0 || sp_rpc_server_register(srv, &keys, NULL) < 0 ||
            sp_rpc_server_register(srv, &revoked, NULL) < 0 || sp_rpc_server_listen(srv, "127.0.0.1:0", NULL) < 0)
                abort();
        struct event *stop = event_new(base, f->stop_fd, EV_READ, fake_stop, base);
        event_add(stop, NULL);
        pthread_mutex_lock(&f->mu);
        f->port = sp_rpc_server_port(srv);
        f->ready = true;
        pthread_mutex_unlock(&f->mu);
        event_base_dispatch(base);
        event_free(stop);
        sp_rpc_server_free(srv);
        event_base_free(base);
        return NULL;
}

static void fake_start(fake_cp *f)
{
        memset(f, 0, sizeof(*f));
        pthread_mutex_init(&f->mu, NULL);
        sp_error *e = NULL;
        /* The stand-in signs with a CA of its own whose certificate the data plane gets as --rpc-ca. */
        sp_test_ok(sp_pki_ca_create("fake-cp-ca", 30, &f->ca, &e), &e);
        f->ca_pem = sp_pki_ca_cert_pem(f->ca, &e);
        ck_assert_ptr_nonnull(f->ca_pem);
        sp_test_ok(sp_pki_issue(f->ca, SP_ROLE_CONTROLPLANE, "fake-cp", NULL, 30, &f->cert_pem, &f->key_pem, &e), &e);
        f->stop_fd = eventfd(0, EFD_CLOEXEC);
        ck_assert_int_ge(f->stop_fd, 0);
        ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
        for (int i = 0; i < 200; i++) {
                pthread_mutex_lock(&f->mu);
                bool ready = f->ready;
                pthread_mutex_unlock(&f->mu);
                if (ready)
                        break;
                usleep(10000);
        }
        ck_assert_int_gt(f->port, 0);
}

static void fake_stop_and_free(fake_cp *f)
{
        uint64_t one = 1;
        ck_assert_int_eq(write(f->stop_fd, &one, sizeof(one)), (int)sizeof(one));
        pthread_join(f->thread, NULL);
        close(f->stop_fd);
        fake_set_keys(f, NULL, NULL);
        sp_pki_ca_free(f->ca);
        free(f->ca_pem);
        free(f->cert_pem);
        free(f->key_pem);
        pthread_mutex_destroy(&f->mu);
}

static int fake_count(fake_cp *f, int *which)
{
        pthread_mutex_lock(&f->mu);
        int n = *which;
        pthread_mutex_unlock(&f->mu);
        return n;
}

START_TEST(join_and_token_keys_from_the_control_plane)
{
        fake_cp f;
        fake_start(&f);
        _cleanup_buf_ sp_buf k1 = SP_BUF_INIT, k2 = SP_BUF_INIT;
        char p[700];
        snprintf(p, sizeof(p), "%s/key1.pub", env.dir);
        ck_assert_int_eq(sp_file_read(p, 65536, &k1, NULL), 0);
        snprintf(p, sizeof(p), "%s/key2.pub", env.dir);
        ck_assert_int_eq(sp_file_read(p, 65536, &k2, NULL), 0);
        fake_set_keys(&f, k1.data, NULL);

        char cafile[700], ca[800], cp[64], state[800], bin[1024], listen[64], logp[800];
        snprintf(cafile, sizeof(cafile), "%s/fake-ca.pem", env.dir);
        ck_assert_int_eq(sp_file_write_atomic(cafile, f.ca_pem, strlen(f.ca_pem), 0644, NULL), 0);
        snprintf(ca, sizeof(ca), "--rpc-ca=%s", cafile);
        snprintf(cp, sizeof(cp), "--control-plane=127.0.0.1:%d", f.port);
        snprintf(state, sizeof(state), "--state-dir=%s/dpstate", env.dir);
        snprintf(bin, sizeof(bin), "%s/bin/space-dataplane", sp_test_binary_dir());
        sp_error *e = NULL;
        int dport = sp_test_free_port(&e);
        sp_test_ok(dport, &e);
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", dport);
        snprintf(logp, sizeof(logp), "%s/dataplane-join.log", env.dir);
        const char *argv[] = {
                bin, listen, ca, cp, state, "--name=dp-test-1", "--join-token=spj_test_secret", "--log-format=json",
                NULL};
        sp_test_proc mine = {0};
        sp_test_proc_opts o = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&mine, "dataplane-join", argv, &o, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&mine, "127.0.0.1", dport, "/readyz", 20000, &e), &e);

        /* It joined once, as a data plane, and kept what it got. */
        ck_assert_int_eq(fake_count(&f, &f.joins), 1);
        pthread_mutex_lock(&f.mu);
        ck_assert_msg(strstr(f.join_body, "\"role\":\"dataplane\"") && strstr(f.join_body, "\"name\":\"dp-test-1\""),
                      "%s", f.join_body);
        pthread_mutex_unlock(&f.mu);
        const char *saved[] = {"dpstate/tls/dataplane.crt", "dpstate/tls/dataplane.key", "dpstate/tls/ca.crt",
                               "dpstate/token-keys.json"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(saved); i++) {
                snprintf(p, sizeof(p), "%s/%s", env.dir, saved[i]);
                ck_assert_msg(access(p, R_OK) == 0, "%s is missing", saved[i]);
        }

        /* key1 verifies; key2 does not, until the control plane rotates to it. */
        _cleanup_free_ char *t1 = dpt_token(env.signer, "session", SBX, SES, NO_WORKER, "read", NULL, 300);
        _cleanup_free_ char *t2 = dpt_token(env.signer2, "session", SBX, SES, NO_WORKER, "read", NULL, 300);
        char h1[4200], h2[4200];
        BEARER(h1, t1);
        BEARER(h2, t2);
        ck_assert_int_eq(status_of(dport, h1), 503);
        ck_assert_int_eq(status_of(dport, h2), 401);
        int fetches_before = fake_count(&f, &f.fetches);
        fake_set_keys(&f, k2.data, NULL);
        /* An unknown key makes the data plane ask again (at most every 5 s): retry until it has. */
        int st = 401;
        for (int i = 0; i < 150 && st == 401; i++) {
                usleep(100000);
                st = status_of(dport, h2);
        }
        ck_assert_int_eq(st, 503);
        ck_assert_int_gt(fake_count(&f, &f.fetches), fetches_before); /* it asked again */
        ck_assert_int_eq(status_of(dport, h1), 401); /* retired at the control plane */

        /* A restart uses the saved certificate and keys: no second join, and it serves while the control plane is down. */
        sp_test_proc_stop(&mine, 5000, NULL);
        fake_stop_and_free(&f);
        sp_test_ok(sp_test_proc_restart(&mine, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&mine, "127.0.0.1", dport, "/readyz", 20000, &e), &e);
        ck_assert_int_eq(status_of(dport, h2), 503);
        sp_test_ok(sp_test_proc_wait_log(&mine, "cannot fetch the token keys", 10000, &e), &e);
        _cleanup_free_ char *log = dpt_log(&mine);
        ck_assert_msg(!strstr(log, "spj_test_secret"), "the join token was logged");
        ck_assert_msg(!strstr(log, strrchr(t1, '.')) && !strstr(log, strrchr(t2, '.')), "a token was logged");
        ck_assert_msg(strstr(log, "already joined"), "the restart joined again");
        ck_assert(dpt_dataplane_stop(&mine));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("dataplane_tokens");
        TCase *tc = tcase_create("tokens");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_test(tc, every_bad_token_is_refused_with_the_right_answer);
        tcase_add_test(tc, bad_requests_under_a_good_token_are_refused_clearly);
        tcase_add_test(tc, template_tokens_grant_one_upload_only);
        tcase_add_test(tc, health_readiness_and_metrics);
        tcase_add_test(tc, key_files_rotate_on_sighup);
        tcase_add_test(tc, settings_that_cannot_work_are_refused);
        tcase_add_test(tc, join_and_token_keys_from_the_control_plane);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
