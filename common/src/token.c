/* SPDX-License-Identifier: Apache-2.0 */
/* Ed25519-signed tokens carrying small JSON claim sets. */
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <string.h>

#include "pki_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space/token.h"

#define PREFIX "v1."
#define PREFIX_LEN (sizeof(PREFIX) - 1)
#define SIG_LEN 64 /* Ed25519 */
#define SIG_B64_LEN 86 /* 64 bytes in unpadded base64 */
#define RAW_KEY_LEN 32
/* iat and exp must lie between 0 and this (year 33658), so that sums of them
 * with the skew or a ttl never overflow. */
#define MAX_TIME INT64_C(1000000000000)

typedef struct token_key {
        EVP_PKEY *key;
        unsigned char raw[RAW_KEY_LEN];
        char kid[SP_TOKEN_KID_LEN + 1];
} token_key;

struct sp_token_signer {
        token_key k;
};

struct sp_token_verifier {
        token_key keys[SP_TOKEN_MAX_KEYS];
        size_t count;
};

SP_DEFINE_CLEANUP(EVP_PKEY *, EVP_PKEY_free)
SP_DEFINE_CLEANUP(EVP_MD_CTX *, EVP_MD_CTX_free)
SP_DEFINE_CLEANUP(BIO *, BIO_free)

/* Fills raw and kid from an Ed25519 key (private or public). */
static int key_identify(token_key *k, EVP_PKEY *key, sp_error **err)
{
        size_t n = sizeof(k->raw);
        unsigned char digest[32];
        unsigned dlen = 0;
        if (!EVP_PKEY_is_a(key, "ED25519"))
                return sp_error_set(err, SP_E_INVALID, "not an Ed25519 key");
        if (EVP_PKEY_get_raw_public_key(key, k->raw, &n) != 1 || n != RAW_KEY_LEN ||
            EVP_Digest(k->raw, n, digest, &dlen, EVP_sha256(), NULL) != 1)
                return sp__pki_ossl_error(err, SP_E_INVALID, "Ed25519 public key");
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < SP_TOKEN_KID_LEN / 2; i++) {
                k->kid[2 * i] = hex[digest[i] >> 4];
                k->kid[2 * i + 1] = hex[digest[i] & 15];
        }
        k->kid[SP_TOKEN_KID_LEN] = '\0';
        k->key = key;
        return 0;
}

int sp_token_keygen(char **ret_private_pem, char **ret_public_pem, sp_error **err)
{
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
        if (!key)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "generate Ed25519 key");
        /* A secure-memory BIO clears the key text when it is freed. */
        _cleanup_(BIO_freep) BIO *priv = BIO_new(BIO_s_secmem());
        _cleanup_(BIO_freep) BIO *pub = BIO_new(BIO_s_mem());
        if (!priv || !pub || !PEM_write_bio_PrivateKey(priv, key, NULL, NULL, 0, NULL, NULL) ||
            !PEM_write_bio_PUBKEY(pub, key))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "write Ed25519 key");
        char *priv_pem = NULL, *pub_pem = NULL;
        int r = sp__pki_bio_string(priv, &priv_pem, err);
        if (r < 0)
                return r;
        if ((r = sp__pki_bio_string(pub, &pub_pem, err)) < 0) {
                sp_explicit_bzero(priv_pem, strlen(priv_pem));
                free(priv_pem);
                return r;
        }
        *ret_private_pem = priv_pem;
        *ret_public_pem = pub_pem;
        return 0;
}

int sp_token_signer_new(const char *private_pem, sp_token_signer **ret, sp_error **err)
{
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = NULL;
        int r = sp__pki_key_parse(private_pem, "token signing key", &key, err);
        if (r < 0)
                return r;
        sp_token_signer *s = calloc(1, sizeof(*s));
        if (!s)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if ((r = key_identify(&s->k, key, err)) < 0) {
                free(s);
                sp_error_wrap(err, "token signing key");
                return r;
        }
        TAKE_PTR(key);
        *ret = s;
        return 0;
}

const char *sp_token_signer_kid(const sp_token_signer *s)
{
        return s->k.kid;
}

char *sp_token_signer_public_pem(const sp_token_signer *s, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_mem());
        char *pem = NULL;
        if (!b || !PEM_write_bio_PUBKEY(b, s->k.key))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "write public key"), NULL;
        return sp__pki_bio_string(b, &pem, err) < 0 ? NULL : pem;
}

sp_token_signer *sp_token_signer_free(sp_token_signer *s)
{
        if (s) {
                EVP_PKEY_free(s->k.key);
                free(s);
        }
        return NULL;
}

char *sp_token_sign(const sp_token_signer *s, json_object *claims, int64_t ttl_s, sp_error **err)
{
        static const char *const reserved[] = {"iat", "exp", "kid"};
        if (!claims || !json_object_is_type(claims, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "token claims must be a JSON object"), NULL;
        for (size_t i = 0; i < SP_ARRAY_SIZE(reserved); i++)
                if (json_object_object_get_ex(claims, reserved[i], NULL))
                        return sp_error_set(err, SP_E_INVALID, "claim '%s' is set by the signer", reserved[i]), NULL;
        if (ttl_s < 1 || ttl_s > SP_TOKEN_MAX_TTL)
                return sp_error_set(err, SP_E_INVALID, "token lifetime must be between 1 and %d seconds",
                                    SP_TOKEN_MAX_TTL),
                       NULL;

        _cleanup_json_ json_object *copy = NULL;
        if (json_object_deep_copy(claims, &copy, NULL) != 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        int64_t now = sp_now_real_us() / SP_USEC_PER_SEC;
        if (json_object_object_add(copy, "iat", json_object_new_int64(now)) != 0 ||
            json_object_object_add(copy, "exp", json_object_new_int64(now + ttl_s)) != 0 ||
            json_object_object_add(copy, "kid", json_object_new_string(s->k.kid)) != 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        const char *json = sp_json_str(copy);
        size_t json_len = strlen(json);
        if (json_len > SP_TOKEN_MAX_LEN)
                return sp_error_set(err, SP_E_TOO_LARGE, "token claims too large"), NULL;
        /* Whatever we sign must verify: refuse claims the strict parser
         * would not read back (NaN, too deep). */
        _cleanup_json_ json_object *check = NULL;
        if (sp_json_parse(json, json_len, &check, err) < 0) {
                sp_error_wrap(err, "token claims");
                return NULL;
        }

        _cleanup_buf_ sp_buf tok = {.limit = SP_TOKEN_MAX_LEN};
        unsigned char sig[SIG_LEN];
        size_t sig_len = sizeof(sig);
        _cleanup_(EVP_MD_CTX_freep) EVP_MD_CTX *md = EVP_MD_CTX_new();
        if (!md)
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        if (sp_buf_append(&tok, PREFIX, PREFIX_LEN, err) < 0 || sp_base64_encode(&tok, json, json_len, 1, err) < 0) {
                sp_error_wrap(err, "token longer than %d bytes", SP_TOKEN_MAX_LEN);
                return NULL;
        }
        if (EVP_DigestSignInit(md, NULL, NULL, NULL, s->k.key) != 1 ||
            EVP_DigestSign(md, sig, &sig_len, (const unsigned char *)tok.data, tok.len) != 1 || sig_len != SIG_LEN)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "sign token"), NULL;
        if (sp_buf_append(&tok, ".", 1, err) < 0 || sp_base64_encode(&tok, sig, sig_len, 1, err) < 0) {
                sp_error_wrap(err, "token longer than %d bytes", SP_TOKEN_MAX_LEN);
                return NULL;
        }
        return sp_buf_steal(&tok);
}

sp_token_verifier *sp_token_verifier_new(void)
{
        return calloc(1, sizeof(sp_token_verifier));
}

int sp_token_verifier_add_key(sp_token_verifier *v, const char *public_pem, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = NULL;
        int r = sp__pki_pem_bio(public_pem, "token public key", &b, err);
        if (r < 0)
                return r;
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = PEM_read_bio_PUBKEY(b, NULL, NULL, NULL);
        if (!key)
                return sp__pki_ossl_error(err, SP_E_INVALID, "token public key");
        token_key k;
        if ((r = key_identify(&k, key, err)) < 0) {
                sp_error_wrap(err, "token public key");
                return r;
        }
        for (size_t i = 0; i < v->count; i++) {
                if (memcmp(v->keys[i].raw, k.raw, RAW_KEY_LEN) == 0)
                        return 0;
                if (strcmp(v->keys[i].kid, k.kid) == 0)
                        return sp_error_set(err, SP_E_CONFLICT, "two token keys share the key id %s", k.kid);
        }
        if (v->count >= SP_TOKEN_MAX_KEYS)
                return sp_error_set(err, SP_E_LIMIT, "more than %d token keys", SP_TOKEN_MAX_KEYS);
        TAKE_PTR(key);
        v->keys[v->count++] = k;
        return 0;
}

sp_token_verifier *sp_token_verifier_free(sp_token_verifier *v)
{
        if (v) {
                for (size_t i = 0; i < v->count; i++)
                        EVP_PKEY_free(v->keys[i].key);
                free(v);
        }
        return NULL;
}

static json_object *reject(sp_error **err, const char *why)
{
        sp_error_set(err, SP_E_UNAUTHENTICATED, "%s", why);
        return NULL;
}

static bool b64url_only(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                      c == '_'))
                        return false;
        }
        return true;
}

static const token_key *key_find(const sp_token_verifier *v, const char *kid)
{
        const token_key *found = NULL;
        /* Every key is compared, in constant time, so that the time taken
         * does not tell which key ids exist. */
        for (size_t i = 0; i < v->count; i++)
                if (CRYPTO_memcmp(v->keys[i].kid, kid, SP_TOKEN_KID_LEN) == 0)
                        found = &v->keys[i];
        return found;
}

json_object *sp_token_verify(const sp_token_verifier *v, const char *token, int64_t now_s, sp_error **err)
{
        if (!v || !token)
                return reject(err, "malformed token");
        size_t n = strnlen(token, SP_TOKEN_MAX_LEN + 1);
        if (n > SP_TOKEN_MAX_LEN || n < PREFIX_LEN || memcmp(token, PREFIX, PREFIX_LEN) != 0)
                return reject(err, "malformed token");
        const char *claims_b64 = token + PREFIX_LEN;
        const char *dot = memchr(claims_b64, '.', n - PREFIX_LEN);
        if (!dot)
                return reject(err, "malformed token");
        size_t claims_len = (size_t)(dot - claims_b64);
        const char *sig_b64 = dot + 1;
        size_t sig_b64_len = n - (size_t)(sig_b64 - token);
        /* The alphabet check also refuses padding and a third part. */
        if (claims_len == 0 || sig_b64_len != SIG_B64_LEN || !b64url_only(claims_b64, claims_len) ||
            !b64url_only(sig_b64, sig_b64_len))
                return reject(err, "malformed token");

        _cleanup_buf_ sp_buf claims_raw = {.limit = SP_TOKEN_MAX_LEN};
        _cleanup_buf_ sp_buf sig = {.limit = SP_TOKEN_MAX_LEN};
        if (sp_base64_decode(&claims_raw, claims_b64, claims_len, 1, NULL) < 0 ||
            sp_base64_decode(&sig, sig_b64, sig_b64_len, 1, NULL) < 0 || sig.len != SIG_LEN)
                return reject(err, "malformed token");
        _cleanup_json_ json_object *claims = NULL;
        const char *kid = NULL;
        int64_t iat = 0, exp = 0;
        if (sp_json_parse(claims_raw.data, claims_raw.len, &claims, NULL) < 0 ||
            !json_object_is_type(claims, json_type_object) ||
            sp_json_get_string(claims, "kid", true, SP_TOKEN_KID_LEN, &kid, NULL) < 0 ||
            strlen(kid) != SP_TOKEN_KID_LEN || sp_json_get_int(claims, "iat", true, 0, MAX_TIME, &iat, NULL) < 0 ||
            sp_json_get_int(claims, "exp", true, 0, MAX_TIME, &exp, NULL) < 0)
                return reject(err, "malformed token");

        const token_key *k = key_find(v, kid);
        if (!k)
                return reject(err, "unknown signing key");
        _cleanup_(EVP_MD_CTX_freep) EVP_MD_CTX *md = EVP_MD_CTX_new();
        int ok = md && EVP_DigestVerifyInit(md, NULL, NULL, NULL, k->key) == 1 &&
                 EVP_DigestVerify(md, (const unsigned char *)sig.data, sig.len, (const unsigned char *)token,
                                  PREFIX_LEN + claims_len) == 1;
        ERR_clear_error();
        if (!ok)
                return reject(err, "bad signature");
        if (now_s >= exp)
                return reject(err, "token expired");
        if (iat - SP_TOKEN_CLOCK_SKEW > now_s)
                return reject(err, "token not yet valid");
        return TAKE_PTR(claims);
}
