/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Envd access tokens (see token.h).
 */
#include "token.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"

#define PREFIX "e2b1."
#define NONCE_LEN 12
#define TAG_LEN 16
#define MAX_KEY_LEN 512 /* the API key inside */

int e2b_token_key_load(const char *path, e2b_token_key *ret, sp_error **err)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(path, 4096, &b, NULL) == 0) {
                if (b.len != E2B_TOKEN_KEY_LEN)
                        return sp_error_set(err, SP_E_INVALID, "%s: a secret key file holds exactly %d bytes", path,
                                            E2B_TOKEN_KEY_LEN);
                memcpy(ret->k, b.data, E2B_TOKEN_KEY_LEN);
                return 0;
        }
        if (access(path, F_OK) == 0)
                return sp_error_set(err, SP_E_IO, "cannot read %s", path);
        e2b_token_key k;
        if (RAND_bytes(k.k, sizeof(k.k)) != 1)
                return sp_error_set(err, SP_E_INTERNAL, "no random bytes");
        if (sp_file_write_atomic(path, (const char *)k.k, sizeof(k.k), 0600, err) < 0)
                return sp_error_wrap(err, "creating the secret key");
        *ret = k;
        return 0;
}

char *e2b_token_seal(const e2b_token_key *key, const char *sandbox_id, const char *api_key, sp_error **err)
{
        size_t n = strlen(api_key);
        if (n == 0 || n > MAX_KEY_LEN) {
                sp_error_set(err, SP_E_UNAUTHENTICATED, "unusable API key");
                return NULL;
        }
        uint8_t raw[NONCE_LEN + MAX_KEY_LEN + TAG_LEN];
        if (RAND_bytes(raw, NONCE_LEN) != 1) {
                sp_error_set(err, SP_E_INTERNAL, "no random bytes");
                return NULL;
        }
        EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
        int len = 0,
            ok = cx && EVP_EncryptInit_ex(cx, EVP_aes_256_gcm(), NULL, key->k, raw) == 1 &&
                 EVP_EncryptUpdate(cx, NULL, &len, (const uint8_t *)sandbox_id, (int)strlen(sandbox_id)) == 1 &&
                 EVP_EncryptUpdate(cx, raw + NONCE_LEN, &len, (const uint8_t *)api_key, (int)n) == 1 &&
                 EVP_EncryptFinal_ex(cx, raw + NONCE_LEN + len, &len) == 1 &&
                 EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_GET_TAG, TAG_LEN, raw + NONCE_LEN + n) == 1;
        EVP_CIPHER_CTX_free(cx);
        if (!ok) {
                sp_error_set(err, SP_E_INTERNAL, "sealing the access token failed");
                return NULL;
        }
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        if (sp_buf_append_str(&out, PREFIX, err) < 0 ||
            sp_base64_encode(&out, raw, NONCE_LEN + n + TAG_LEN, 1, err) < 0)
                return NULL;
        return sp_buf_steal(&out);
}

char *e2b_token_open(const e2b_token_key *key, const char *sandbox_id, const char *token, sp_error **err)
{
        size_t tl = token ? strlen(token) : 0;
        if (!sandbox_id || tl <= strlen(PREFIX) || tl > E2B_TOKEN_MAX_LEN ||
            strncmp(token, PREFIX, strlen(PREFIX)) != 0) {
                sp_error_set(err, SP_E_UNAUTHENTICATED, "invalid access token");
                return NULL;
        }
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT;
        if (sp_base64_decode(&raw, token + strlen(PREFIX), tl - strlen(PREFIX), 1, NULL) < 0 ||
            raw.len <= NONCE_LEN + TAG_LEN || raw.len > NONCE_LEN + MAX_KEY_LEN + TAG_LEN) {
                sp_error_set(err, SP_E_UNAUTHENTICATED, "invalid access token");
                return NULL;
        }
        size_t n = raw.len - NONCE_LEN - TAG_LEN;
        uint8_t *p = (uint8_t *)raw.data;
        char *plain = calloc(1, n + 1);
        if (!plain)
                abort();
        EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
        int len = 0,
            ok = cx && EVP_DecryptInit_ex(cx, EVP_aes_256_gcm(), NULL, key->k, p) == 1 &&
                 EVP_DecryptUpdate(cx, NULL, &len, (const uint8_t *)sandbox_id, (int)strlen(sandbox_id)) == 1 &&
                 EVP_DecryptUpdate(cx, (uint8_t *)plain, &len, p + NONCE_LEN, (int)n) == 1 &&
                 EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_SET_TAG, TAG_LEN, p + NONCE_LEN + n) == 1 &&
                 EVP_DecryptFinal_ex(cx, (uint8_t *)plain + len, &len) == 1;
        EVP_CIPHER_CTX_free(cx);
        if (!ok || strlen(plain) != n) {
                sp_explicit_bzero(plain, n);
                free(plain);
                sp_error_set(err, SP_E_UNAUTHENTICATED, "invalid access token");
                return NULL;
        }
        return plain;
}
