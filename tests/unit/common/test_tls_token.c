/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: Ed25519 signed tokens — round trip, expiry, tampering, keys, rotation, garbage. */
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/token.h"

SP_DEFINE_CLEANUP(EVP_PKEY *, EVP_PKEY_free)
SP_DEFINE_CLEANUP(EVP_MD_CTX *, EVP_MD_CTX_free)
SP_DEFINE_CLEANUP(BIO *, BIO_free)

typedef struct keypair {
        char *priv, *pub;
        sp_token_signer *signer;
} keypair;

static keypair ka, kb;

static void keypair_make(keypair *k)
{
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_token_keygen(&k->priv, &k->pub, &e), 0);
        ck_assert_int_eq(sp_token_signer_new(k->priv, &k->signer, &e), 0);
}

static void keypair_free(keypair *k)
{
        free(k->priv);
        free(k->pub);
        sp_token_signer_free(k->signer);
        memset(k, 0, sizeof(*k));
}

static void setup(void)
{
        keypair_make(&ka);
        keypair_make(&kb);
}

static void teardown(void)
{
        keypair_free(&ka);
        keypair_free(&kb);
}

static sp_token_verifier *verifier_of(const keypair *a, const keypair *b)
{
        sp_token_verifier *v = sp_token_verifier_new();
        ck_assert_ptr_nonnull(v);
        if (a)
                ck_assert_int_eq(sp_token_verifier_add_key(v, a->pub, NULL), 0);
        if (b)
                ck_assert_int_eq(sp_token_verifier_add_key(v, b->pub, NULL), 0);
        return v;
}

static json_object *claims_new(const char *json)
{
        json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse(json, strlen(json), &o, NULL), 0);
        return o;
}

static char *sign(const keypair *k, const char *claims_json, int64_t ttl)
{
        _cleanup_json_ json_object *c = claims_new(claims_json);
        _cleanup_error_ sp_error *e = NULL;
        char *t = sp_token_sign(k->signer, c, ttl, &e);
        ck_assert_msg(t != NULL, "%s", e ? e->message : "");
        return t;
}

static int64_t now(void)
{
        return (int64_t)time(NULL);
}

/* Verifies and expects a rejection with exactly this message. */
static void expect_reject(const sp_token_verifier *v, const char *token, int64_t at, const char *why)
{
        _cleanup_error_ sp_error *e = NULL;
        json_object *c = sp_token_verify(v, token, at, &e);
        ck_assert_msg(c == NULL, "accepted a token that should fail with '%s'", why);
        ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);
        ck_assert_str_eq(e->message, why);
}

/* Builds a token outside the module: "v1." + b64url(claims) signed with
 * the given private key, so tests can sign claims the signer would not. */
static char *craft(const char *priv_pem, const char *claims_json)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        ck_assert_int_eq(sp_buf_append_str(&t, "v1.", NULL), 0);
        ck_assert_int_eq(sp_base64_encode(&t, claims_json, strlen(claims_json), 1, NULL), 0);
        _cleanup_(BIO_freep) BIO *b = BIO_new_mem_buf(priv_pem, -1);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
        ck_assert_ptr_nonnull(k);
        _cleanup_(EVP_MD_CTX_freep) EVP_MD_CTX *md = EVP_MD_CTX_new();
        unsigned char sig[64];
        size_t n = sizeof(sig);
        ck_assert_int_eq(EVP_DigestSignInit(md, NULL, NULL, NULL, k), 1);
        ck_assert_int_eq(EVP_DigestSign(md, sig, &n, (const unsigned char *)t.data, t.len), 1);
        ck_assert_int_eq(sp_buf_append_str(&t, ".", NULL), 0);
        ck_assert_int_eq(sp_base64_encode(&t, sig, n, 1, NULL), 0);
        return sp_buf_steal(&t);
}

START_TEST(keygen_and_kid)
{
        ck_assert(strstr(ka.priv, "-----BEGIN PRIVATE KEY-----") != NULL);
        ck_assert(strstr(ka.pub, "-----BEGIN PUBLIC KEY-----") != NULL);
        const char *kid = sp_token_signer_kid(ka.signer);
        ck_assert_uint_eq(strlen(kid), SP_TOKEN_KID_LEN);
        ck_assert_str_ne(kid, sp_token_signer_kid(kb.signer));

        /* kid = first 16 hex digits of SHA-256 over the raw public key. */
        _cleanup_(BIO_freep) BIO *b = BIO_new_mem_buf(ka.pub, -1);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *pub = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
        unsigned char raw[32], d[32];
        size_t rn = sizeof(raw);
        ck_assert_int_eq(EVP_PKEY_get_raw_public_key(pub, raw, &rn), 1);
        ck_assert_int_eq(EVP_Digest(raw, rn, d, NULL, EVP_sha256(), NULL), 1);
        _cleanup_buf_ sp_buf hex = SP_BUF_INIT;
        sp_hex_encode(&hex, d, 8, NULL);
        ck_assert_str_eq(kid, hex.data);

        _cleanup_free_ char *pub2 = sp_token_signer_public_pem(ka.signer, NULL);
        ck_assert_str_eq(pub2, ka.pub);

        /* Only Ed25519 private keys make signers. */
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *ec = EVP_EC_gen("P-256");
        _cleanup_(BIO_freep) BIO *out = BIO_new(BIO_s_mem());
        ck_assert(PEM_write_bio_PrivateKey(out, ec, NULL, NULL, 0, NULL, NULL));
        BIO_write(out, "", 1);
        char *ec_pem = NULL;
        BIO_get_mem_data(out, &ec_pem);
        sp_token_signer *s = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_token_signer_new(ec_pem, &s, &e), -SP_E_INVALID);
        ck_assert_ptr_null(s);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_token_signer_new(ka.pub, &s, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_token_signer_new("garbage", &s, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        /* ...and only Ed25519 public keys go into verifiers. */
        _cleanup_(BIO_freep) BIO *out2 = BIO_new(BIO_s_mem());
        ck_assert(PEM_write_bio_PUBKEY(out2, ec));
        BIO_write(out2, "", 1);
        char *ec_pub = NULL;
        BIO_get_mem_data(out2, &ec_pub);
        _cleanup_token_verifier_ sp_token_verifier *v = sp_token_verifier_new();
        ck_assert_int_eq(sp_token_verifier_add_key(v, ec_pub, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_token_verifier_add_key(v, ka.priv, &e), -SP_E_INVALID);
}
END_TEST

START_TEST(sign_verify_roundtrip)
{
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(&ka, NULL);
        _cleanup_json_ json_object *in = claims_new("{\"session\":\"ses_1\",\"scope\":\"read\",\"n\":[1,2]}");
        _cleanup_error_ sp_error *e = NULL;
        int64_t before = now();
        _cleanup_free_ char *t = sp_token_sign(ka.signer, in, 300, &e);
        ck_assert_ptr_nonnull(t);
        /* The caller's claims are not modified. */
        ck_assert(!json_object_object_get_ex(in, "exp", NULL));

        /* Format: v1.<b64url>.<b64url>, no padding. */
        ck_assert(strncmp(t, "v1.", 3) == 0);
        ck_assert_ptr_null(strchr(t, '='));
        const char *dot = strchr(t + 3, '.');
        ck_assert_ptr_nonnull(dot);
        ck_assert_ptr_null(strchr(dot + 1, '.'));
        ck_assert_uint_eq(strlen(dot + 1), 86);

        _cleanup_json_ json_object *c = sp_token_verify(v, t, now(), &e);
        ck_assert_msg(c != NULL, "%s", e ? e->message : "");
        const char *s = NULL;
        int64_t iat = 0, exp = 0;
        ck_assert_int_eq(sp_json_get_string(c, "session", true, 64, &s, NULL), 0);
        ck_assert_str_eq(s, "ses_1");
        ck_assert_int_eq(sp_json_get_string(c, "kid", true, 64, &s, NULL), 0);
        ck_assert_str_eq(s, sp_token_signer_kid(ka.signer));
        ck_assert_int_eq(sp_json_get_int(c, "iat", true, 0, INT64_MAX, &iat, NULL), 0);
        ck_assert_int_eq(sp_json_get_int(c, "exp", true, 0, INT64_MAX, &exp, NULL), 0);
        ck_assert_int_ge(iat, before);
        ck_assert_int_le(iat, now());
        ck_assert_int_eq(exp, iat + 300);
        /* The claims part is exactly the signed JSON. */
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT;
        ck_assert_int_eq(sp_base64_decode(&raw, t + 3, (size_t)(dot - t - 3), 1, NULL), 0);
        ck_assert(strstr(raw.data, "\"scope\":\"read\"") != NULL);
}
END_TEST

START_TEST(expiry_and_not_yet_valid)
{
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(&ka, NULL);
        /* iat/exp fixed by crafting, so the boundaries are exact. */
        char claims[128];
        snprintf(claims, sizeof(claims), "{\"kid\":\"%s\",\"iat\":1000000,\"exp\":1000060}",
                 sp_token_signer_kid(ka.signer));
        _cleanup_free_ char *t = craft(ka.priv, claims);
        json_object *c = sp_token_verify(v, t, 1000059, NULL);
        ck_assert_ptr_nonnull(c);
        json_object_put(c);
        expect_reject(v, t, 1000060, "token expired");
        expect_reject(v, t, 2000000, "token expired");
        /* An iat up to 60 s ahead is clock skew; beyond it, not yet valid. */
        c = sp_token_verify(v, t, 1000000 - 60, NULL);
        ck_assert_ptr_nonnull(c);
        json_object_put(c);
        expect_reject(v, t, 1000000 - 61, "token not yet valid");

        /* A real token expires after its ttl. */
        _cleanup_free_ char *t2 = sign(&ka, "{}", 5);
        c = sp_token_verify(v, t2, now(), NULL);
        ck_assert_ptr_nonnull(c);
        json_object_put(c);
        expect_reject(v, t2, now() + 6, "token expired");
}
END_TEST

START_TEST(tampered_claims_refused)
{
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(&ka, NULL);
        _cleanup_free_ char *t = sign(&ka, "{\"scope\":\"read\"}", 60);
        char *dot = strchr(t + 3, '.');
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT, forged = SP_BUF_INIT;
        ck_assert_int_eq(sp_base64_decode(&raw, t + 3, (size_t)(dot - t - 3), 1, NULL), 0);
        char *scope = strstr(raw.data, "\"read\"");
        ck_assert_ptr_nonnull(scope);
        memcpy(scope, "\"rw!!\"", 6);
        sp_buf_append_str(&forged, "v1.", NULL);
        sp_base64_encode(&forged, raw.data, raw.len, 1, NULL);
        sp_buf_append_str(&forged, dot, NULL);
        expect_reject(v, forged.data, now(), "bad signature");

        /* Claims of another valid token under this one's signature. */
        _cleanup_free_ char *t2 = sign(&ka, "{\"scope\":\"write\"}", 60);
        char *dot2 = strchr(t2 + 3, '.');
        _cleanup_buf_ sp_buf spliced = SP_BUF_INIT;
        sp_buf_append(&spliced, t2, (size_t)(dot2 - t2), NULL);
        sp_buf_append_str(&spliced, dot, NULL);
        expect_reject(v, spliced.data, now(), "bad signature");
}
END_TEST

START_TEST(tampered_signature_refused)
{
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(&ka, NULL);
        _cleanup_free_ char *t = sign(&ka, "{\"scope\":\"read\"}", 60);
        char *sig = strchr(t + 3, '.') + 1;
        for (size_t i = 0; i < 85; i += 7) {
                char saved = sig[i];
                sig[i] = saved == 'A' ? 'B' : 'A';
                expect_reject(v, t, now(), "bad signature");
                sig[i] = saved;
        }
        json_object *c = sp_token_verify(v, t, now(), NULL);
        ck_assert_ptr_nonnull(c);
        json_object_put(c);
}
END_TEST

START_TEST(wrong_key_and_unknown_kid)
{
        _cleanup_token_verifier_ sp_token_verifier *vb = verifier_of(&kb, NULL);
        _cleanup_free_ char *t = sign(&ka, "{}", 60);
        expect_reject(vb, t, now(), "unknown signing key");

        /* Signed by A but naming B's kid. */
        char claims[128];
        snprintf(claims, sizeof(claims), "{\"kid\":\"%s\",\"iat\":%lld,\"exp\":%lld}", sp_token_signer_kid(kb.signer),
                 (long long)now(), (long long)now() + 60);
        _cleanup_free_ char *forged = craft(ka.priv, claims);
        expect_reject(vb, forged, now(), "bad signature");

        snprintf(claims, sizeof(claims), "{\"kid\":\"0000000000000000\",\"iat\":%lld,\"exp\":%lld}", (long long)now(),
                 (long long)now() + 60);
        _cleanup_free_ char *unknown = craft(kb.priv, claims);
        expect_reject(vb, unknown, now(), "unknown signing key");

        /* An empty verifier knows no key. */
        _cleanup_token_verifier_ sp_token_verifier *empty = verifier_of(NULL, NULL);
        expect_reject(empty, t, now(), "unknown signing key");
}
END_TEST

START_TEST(rotation_two_keys)
{
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(&ka, &kb);
        _cleanup_free_ char *ta = sign(&ka, "{\"who\":\"a\"}", 60);
        _cleanup_free_ char *tb = sign(&kb, "{\"who\":\"b\"}", 60);
        const char *who = NULL;
        _cleanup_json_ json_object *ca = sp_token_verify(v, ta, now(), NULL);
        _cleanup_json_ json_object *cb = sp_token_verify(v, tb, now(), NULL);
        ck_assert_ptr_nonnull(ca);
        ck_assert_ptr_nonnull(cb);
        ck_assert_int_eq(sp_json_get_string(ca, "who", true, 8, &who, NULL), 0);
        ck_assert_str_eq(who, "a");
        ck_assert_int_eq(sp_json_get_string(cb, "who", true, 8, &who, NULL), 0);
        ck_assert_str_eq(who, "b");

        /* Re-adding a key is a no-op; the verifier is bounded. */
        ck_assert_int_eq(sp_token_verifier_add_key(v, ka.pub, NULL), 0);
        _cleanup_error_ sp_error *e = NULL;
        int r = 0;
        for (int i = 0; i < SP_TOKEN_MAX_KEYS && r == 0; i++) {
                _cleanup_free_ char *priv = NULL, *pub = NULL;
                ck_assert_int_eq(sp_token_keygen(&priv, &pub, NULL), 0);
                r = sp_token_verifier_add_key(v, pub, &e);
        }
        ck_assert_int_eq(r, -SP_E_LIMIT);
        /* The old keys still work. */
        _cleanup_json_ json_object *again = sp_token_verify(v, ta, now(), NULL);
        ck_assert_ptr_nonnull(again);
}
END_TEST

START_TEST(garbage_refused)
{
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(&ka, NULL);
        _cleanup_free_ char *good = sign(&ka, "{\"a\":1}", 60);
        char *dot = strchr(good + 3, '.');
        size_t claims_len = (size_t)(dot - good - 3);
        char buf[512];
        static const char *const junk[] = {
                "",
                "v1",
                "v1.",
                "v1..",
                "v1...",
                "v2.e30.AAAA",
                "V1.e30.AAAA",
                "v1.e30",
                "v1.e30.",
                "v1.e30.AAAA",
                " v1.e30.AAAA",
                "Bearer v1.e30.AAAA",
                "v1.e3 0.AAAA",
                "v1.e30=.AAAA",
                "\xff\xfe",
                "v1.%%%.AAAA",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(junk); i++)
                expect_reject(v, junk[i], now(), "malformed token");
        expect_reject(v, NULL, now(), "malformed token");

        /* Padding, a trailing part, standard-alphabet characters, a truncated signature. */
        snprintf(buf, sizeof(buf), "%s=", good);
        expect_reject(v, buf, now(), "malformed token");
        snprintf(buf, sizeof(buf), "%s.x", good);
        expect_reject(v, buf, now(), "malformed token");
        snprintf(buf, sizeof(buf), "%s", good);
        buf[strlen(buf) - 1] = '\0';
        expect_reject(v, buf, now(), "malformed token");
        snprintf(buf, sizeof(buf), "%s", good);
        buf[3] = '+';
        expect_reject(v, buf, now(), "malformed token");
        snprintf(buf, sizeof(buf), "%.*s==%s", (int)(3 + claims_len), good, dot);
        expect_reject(v, buf, now(), "malformed token");

        /* Correctly signed, but not a claim set we accept. */
        char claims[160];
        const char *kid = sp_token_signer_kid(ka.signer);
        static const char *const bodies[] = {
                "null",
                "[1]",
                "\"x\"",
                "{\"kid\":\"%s\",\"iat\":1}",
                "{\"kid\":\"%s\",\"exp\":99999999999}",
                "{\"kid\":\"%s\",\"iat\":\"1\",\"exp\":99999999999}",
                "{\"kid\":\"%s\",\"iat\":-5,\"exp\":99999999999}",
                "{\"kid\":\"%s\",\"iat\":1,\"exp\":1e30}",
                "{\"kid\":\"%s\",\"iat\":1,\"exp\":99999999999999999999999}",
                "{\"kid\":\"%sx\",\"iat\":1,\"exp\":99999999999}",
                "{\"kid\":1,\"iat\":1,\"exp\":99999999999}",
                "{\"kid\":\"%s\",\"iat\":1,\"exp\":99999999999",
                "{\"kid\":\"%s\",\"iat\":1,\"exp\":99999999999} x",
                "{'kid':'%s','iat':1,'exp':99999999999}",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bodies); i++) {
                snprintf(claims, sizeof(claims), bodies[i], kid);
                _cleanup_free_ char *t = craft(ka.priv, claims);
                expect_reject(v, t, 1000, "malformed token");
        }
        /* The same crafting with sound claims verifies, so the cases above fail for their claims. */
        snprintf(claims, sizeof(claims), "{\"kid\":\"%s\",\"iat\":1,\"exp\":99999999999}", kid);
        _cleanup_free_ char *ok = craft(ka.priv, claims);
        json_object *c = sp_token_verify(v, ok, 1000, NULL);
        ck_assert_ptr_nonnull(c);
        json_object_put(c);
}
END_TEST

START_TEST(length_bounds)
{
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(&ka, NULL);
        /* A validly signed token just over the limit is refused unread. */
        _cleanup_buf_ sp_buf claims = SP_BUF_INIT;
        sp_buf_appendf(&claims, NULL, "{\"kid\":\"%s\",\"iat\":1,\"exp\":99999999999,\"pad\":\"",
                       sp_token_signer_kid(ka.signer));
        while (claims.len < 3100)
                sp_buf_append_str(&claims, "x", NULL);
        sp_buf_append_str(&claims, "\"}", NULL);
        _cleanup_free_ char *big = craft(ka.priv, claims.data);
        ck_assert_uint_gt(strlen(big), SP_TOKEN_MAX_LEN);
        expect_reject(v, big, 1000, "malformed token");

        /* A long run of characters without a terminating part. */
        _cleanup_free_ char *huge = malloc(1 << 20);
        memset(huge, 'A', (1 << 20) - 1);
        memcpy(huge, "v1.", 3);
        huge[(1 << 20) - 1] = '\0';
        expect_reject(v, huge, 1000, "malformed token");

        /* The signer refuses to make a token over the limit. */
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "pad", json_object_new_string(claims.data));
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_ptr_null(sp_token_sign(ka.signer, o, 60, &e));
        ck_assert_int_eq(e->code, SP_E_TOO_LARGE);
}
END_TEST

START_TEST(sign_rejects_bad_input)
{
        _cleanup_error_ sp_error *e = NULL;
        static const char *const reserved[] = {"{\"exp\":1}", "{\"iat\":1}", "{\"kid\":\"x\"}", "[]", "1"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(reserved); i++) {
                _cleanup_json_ json_object *c = claims_new(reserved[i]);
                ck_assert_ptr_null(sp_token_sign(ka.signer, c, 60, &e));
                ck_assert_int_eq(e->code, SP_E_INVALID);
                sp_error_freep(&e);
        }
        _cleanup_json_ json_object *c = claims_new("{}");
        ck_assert_ptr_null(sp_token_sign(ka.signer, c, 0, &e));
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_token_sign(ka.signer, c, SP_TOKEN_MAX_TTL + 1, &e));
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_token_sign(ka.signer, NULL, 60, &e));
        sp_error_freep(&e);
        /* NaN cannot be read back by the strict parser, so it is not signed. */
        json_object_object_add(c, "x", json_object_new_double(NAN));
        ck_assert_ptr_null(sp_token_sign(ka.signer, c, 60, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("tls_token");
        TCase *tc = tcase_create("token");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, keygen_and_kid);
        tcase_add_test(tc, sign_verify_roundtrip);
        tcase_add_test(tc, expiry_and_not_yet_valid);
        tcase_add_test(tc, tampered_claims_refused);
        tcase_add_test(tc, tampered_signature_refused);
        tcase_add_test(tc, wrong_key_and_unknown_kid);
        tcase_add_test(tc, rotation_two_keys);
        tcase_add_test(tc, garbage_refused);
        tcase_add_test(tc, length_bounds);
        tcase_add_test(tc, sign_rejects_bad_input);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
