/* SPDX-License-Identifier: Apache-2.0 */
/* Envelope encryption of secrets' values (envelope.h). */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#include "store/envelope.h"

/* What the additional data starts with, per kind of box: a box of one kind
 * never opens as the other. */
#define AAD_VALUE "space/secret-value/v1"
#define AAD_KEY "space/secret-key/v1"

static void evp_ctx_freep(EVP_CIPHER_CTX **c)
{
        EVP_CIPHER_CTX_free(*c);
        *c = NULL;
}

/* "<kind>\0<a>\0<b>" into aad (at most cap bytes). */
static size_t make_aad(char *aad, size_t cap, const char *kind, const char *a, const char *b)
{
        size_t kl = strlen(kind) + 1, al = strlen(a) + 1, bl = strlen(b);
        if (kl + al + bl > cap)
                return 0;
        memcpy(aad, kind, kl);
        memcpy(aad + kl, a, al);
        memcpy(aad + kl + al, b, bl);
        return kl + al + bl;
}

/* Seals plain[0..n) under key with aad into out: version | nonce | ciphertext | tag. */
static int seal(const uint8_t key[CP_KEY_LEN], const char *aad, size_t aad_len, const void *plain, size_t n,
                sp_buf *out, sp_error **err)
{
        __attribute__((cleanup(evp_ctx_freep))) EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
        uint8_t nonce[CP_ENVELOPE_NONCE], tag[CP_ENVELOPE_TAG];
        if (n > INT32_MAX || aad_len > INT32_MAX)
                return sp_error_set(err, SP_E_INVALID, "too large to seal");
        if (!c || RAND_bytes(nonce, sizeof(nonce)) != 1)
                return sp_error_set(err, SP_E_INTERNAL, "secrets: no cipher context or random bytes");
        sp_buf_clear(out);
        if (sp_buf_reserve(out, CP_ENVELOPE_OVERHEAD + n, err) < 0)
                return -SP_E_LIMIT;
        uint8_t *p = (uint8_t *)out->data;
        p[0] = CP_ENVELOPE_VERSION;
        memcpy(p + 1, nonce, sizeof(nonce));
        int len = 0, fin = 0;
        if (EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, CP_ENVELOPE_NONCE, NULL) != 1 ||
            EVP_EncryptInit_ex(c, NULL, NULL, key, nonce) != 1 ||
            EVP_EncryptUpdate(c, NULL, &len, (const uint8_t *)aad, (int)aad_len) != 1 ||
            EVP_EncryptUpdate(c, p + 1 + CP_ENVELOPE_NONCE, &len, plain, (int)n) != 1 ||
            EVP_EncryptFinal_ex(c, p + 1 + CP_ENVELOPE_NONCE + len, &fin) != 1 ||
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, CP_ENVELOPE_TAG, tag) != 1) {
                OPENSSL_cleanse(out->data, out->cap);
                sp_buf_clear(out);
                return sp_error_set(err, SP_E_INTERNAL, "secrets: encryption failed");
        }
        memcpy(p + 1 + CP_ENVELOPE_NONCE + len + fin, tag, sizeof(tag));
        out->len = CP_ENVELOPE_OVERHEAD + (size_t)len + (size_t)fin;
        out->data[out->len] = '\0';
        return 0;
}

/* Opens box[0..n) (as seal() wrote it) under key with aad into plain (at
 * least n bytes); *ret_len gets its length. */
static int open_box(const uint8_t key[CP_KEY_LEN], const char *aad, size_t aad_len, const uint8_t *box, size_t n,
                    uint8_t *plain, size_t *ret_len, const char *what, sp_error **err)
{
        if (n < CP_ENVELOPE_OVERHEAD || n > INT32_MAX || box[0] != CP_ENVELOPE_VERSION)
                return sp_error_set(err, SP_E_INVALID, "%s is not a sealed box of version %d", what,
                                    CP_ENVELOPE_VERSION);
        __attribute__((cleanup(evp_ctx_freep))) EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
        if (!c)
                return sp_error_set(err, SP_E_INTERNAL, "secrets: no cipher context");
        const uint8_t *nonce = box + 1, *ct = box + 1 + CP_ENVELOPE_NONCE;
        size_t ctlen = n - CP_ENVELOPE_OVERHEAD;
        uint8_t tag[CP_ENVELOPE_TAG];
        memcpy(tag, ct + ctlen, sizeof(tag));
        int len = 0, fin = 0;
        if (EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) != 1 ||
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, CP_ENVELOPE_NONCE, NULL) != 1 ||
            EVP_DecryptInit_ex(c, NULL, NULL, key, nonce) != 1 ||
            EVP_DecryptUpdate(c, NULL, &len, (const uint8_t *)aad, (int)aad_len) != 1 ||
            EVP_DecryptUpdate(c, plain, &len, ct, (int)ctlen) != 1 ||
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, CP_ENVELOPE_TAG, tag) != 1 ||
            EVP_DecryptFinal_ex(c, plain + len, &fin) != 1) {
                OPENSSL_cleanse(plain, ctlen);
                return sp_error_set(err, SP_E_INVALID,
                                    "%s does not open: another key, another secret, or changed bytes", what);
        }
        *ret_len = (size_t)len + (size_t)fin;
        return 0;
}

void cp_sealed_clear(cp_sealed *s)
{
        if (!s)
                return;
        if (s->wrapped.data)
                OPENSSL_cleanse(s->wrapped.data, s->wrapped.cap);
        if (s->ciphertext.data)
                OPENSSL_cleanse(s->ciphertext.data, s->ciphertext.cap);
        sp_buf_free(&s->wrapped);
        sp_buf_free(&s->ciphertext);
        memset(s, 0, sizeof(*s));
}

/* Wraps data_key for secret_id under the primary key into ret (key_id, wrapped). */
static int wrap(const cp_keyring *k, const char *secret_id, const uint8_t data_key[CP_KEY_LEN], cp_sealed *ret,
                sp_error **err)
{
        const char *kid = cp_keyring_primary(k);
        const uint8_t *ck = cp_keyring_key(k, kid);
        char aad[256];
        size_t aad_len = make_aad(aad, sizeof(aad), AAD_KEY, secret_id, kid);
        if (!ck || !aad_len)
                return sp_error_set(err, SP_E_INVALID, "secrets: no primary key, or an id too long");
        if (seal(ck, aad, aad_len, data_key, CP_KEY_LEN, &ret->wrapped, err) < 0)
                return -SP_E_INTERNAL;
        snprintf(ret->key_id, sizeof(ret->key_id), "%s", kid);
        return 0;
}

/* Opens secret_id's data key wrapped under key_id into data_key. */
static int unwrap(const cp_keyring *k, const char *secret_id, const char *key_id, const void *wrapped,
                  size_t wrapped_len, uint8_t data_key[CP_KEY_LEN], sp_error **err)
{
        const uint8_t *ck = cp_keyring_key(k, key_id);
        if (!ck)
                return sp_error_set(err, SP_E_NOT_FOUND,
                                    "secret %.64s: its data key is wrapped under cluster key '%.64s', which is not in "
                                    "the key file",
                                    secret_id, key_id);
        char aad[256];
        size_t aad_len = make_aad(aad, sizeof(aad), AAD_KEY, secret_id, key_id);
        if (!aad_len)
                return sp_error_set(err, SP_E_INVALID, "secrets: an id too long");
        if (wrapped_len != CP_ENVELOPE_OVERHEAD + CP_KEY_LEN)
                return sp_error_set(err, SP_E_INVALID, "secret %.64s: its wrapped data key is malformed", secret_id);
        uint8_t plain[CP_KEY_LEN];
        size_t n = 0;
        char what[128];
        snprintf(what, sizeof(what), "secret %.64s: its wrapped data key", secret_id);
        if (open_box(ck, aad, aad_len, wrapped, wrapped_len, plain, &n, what, err) < 0)
                return -SP_E_INVALID;
        memcpy(data_key, plain, CP_KEY_LEN);
        OPENSSL_cleanse(plain, sizeof(plain));
        return 0;
}

int cp_envelope_seal(const cp_keyring *k, const char *secret_id, const char *tenant_id, const void *value, size_t len,
                     cp_sealed *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        if (len < 1 || len > CP_ENVELOPE_VALUE_MAX)
                return sp_error_set(err, SP_E_INVALID, "a secret's value must hold 1 to %d bytes",
                                    CP_ENVELOPE_VALUE_MAX);
        uint8_t data_key[CP_KEY_LEN];
        char aad[256];
        size_t aad_len = make_aad(aad, sizeof(aad), AAD_VALUE, secret_id, tenant_id);
        if (!aad_len)
                return sp_error_set(err, SP_E_INVALID, "secrets: an id too long");
        if (RAND_priv_bytes(data_key, sizeof(data_key)) != 1)
                return sp_error_set(err, SP_E_INTERNAL, "secrets: no random bytes for a data key");
        int r = seal(data_key, aad, aad_len, value, len, &ret->ciphertext, err);
        if (r == 0)
                r = wrap(k, secret_id, data_key, ret, err);
        OPENSSL_cleanse(data_key, sizeof(data_key));
        if (r < 0)
                cp_sealed_clear(ret);
        return r;
}

int cp_envelope_open(const cp_keyring *k, const char *secret_id, const char *tenant_id, const char *key_id,
                     const void *wrapped, size_t wrapped_len, const void *ciphertext, size_t ciphertext_len,
                     char **ret_value, size_t *ret_len, sp_error **err)
{
        *ret_value = NULL;
        *ret_len = 0;
        uint8_t data_key[CP_KEY_LEN];
        int u = unwrap(k, secret_id, key_id, wrapped, wrapped_len, data_key, err);
        if (u < 0)
                return u;
        char aad[256];
        size_t aad_len = make_aad(aad, sizeof(aad), AAD_VALUE, secret_id, tenant_id);
        char *plain =
                ciphertext_len <= CP_ENVELOPE_OVERHEAD + CP_ENVELOPE_VALUE_MAX ? malloc(ciphertext_len + 1) : NULL;
        size_t n = 0;
        char what[128];
        snprintf(what, sizeof(what), "secret %.64s: its value", secret_id);
        int r = !aad_len ? sp_error_set(err, SP_E_INVALID, "secrets: an id too long")
                : !plain
                        ? sp_error_set(err, SP_E_INVALID, "secret %.64s: its ciphertext is malformed", secret_id)
                        : open_box(data_key, aad, aad_len, ciphertext, ciphertext_len, (uint8_t *)plain, &n, what, err);
        OPENSSL_cleanse(data_key, sizeof(data_key));
        if (r < 0) {
                free(plain);
                return -SP_E_INVALID;
        }
        plain[n] = '\0';
        *ret_value = plain;
        *ret_len = n;
        return 0;
}

void cp_envelope_value_free(char *value, size_t len)
{
        if (!value)
                return;
        OPENSSL_cleanse(value, len);
        free(value);
}

int cp_envelope_rewrap(const cp_keyring *k, const char *secret_id, const char *key_id, const void *wrapped,
                       size_t wrapped_len, cp_sealed *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        uint8_t data_key[CP_KEY_LEN];
        int u = unwrap(k, secret_id, key_id, wrapped, wrapped_len, data_key, err);
        if (u < 0)
                return u;
        int r = wrap(k, secret_id, data_key, ret, err);
        OPENSSL_cleanse(data_key, sizeof(data_key));
        if (r < 0)
                cp_sealed_clear(ret);
        return r;
}
