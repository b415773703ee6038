/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: space-e2b's envd access tokens (compat/e2b/token.h). A token
 * opens to the API key it seals, for its sandbox and secret only; any
 * change, truncation, foreign encoding or out-of-bounds size is refused
 * with SP_E_UNAUTHENTICATED, including tokens crafted with the right secret
 * around keys the daemon would never seal (empty, too long, with a NUL).
 * Tokens carry no expiry by design (docs/e2b.md): revoking the API key
 * revokes them. The secret file is created 0600 and must hold 32 bytes.
 */
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "token.h"

#define SBX "sbx_0123456789abcdef"

static e2b_token_key key_of(char c)
{
        e2b_token_key k;
        memset(k.k, c, sizeof(k.k));
        return k;
}

/* A token sealed by hand: nonce zero, plain[0..n) under key for sandbox. */
static char *craft(const e2b_token_key *key, const char *sandbox, const void *plain, size_t n)
{
        uint8_t raw[12 + 2048 + 16] = {0};
        ck_assert_uint_le(n, 2048);
        EVP_CIPHER_CTX *cx = EVP_CIPHER_CTX_new();
        int len = 0;
        ck_assert_int_eq(EVP_EncryptInit_ex(cx, EVP_aes_256_gcm(), NULL, key->k, raw), 1);
        ck_assert_int_eq(EVP_EncryptUpdate(cx, NULL, &len, (const uint8_t *)sandbox, (int)strlen(sandbox)), 1);
        if (n)
                ck_assert_int_eq(EVP_EncryptUpdate(cx, raw + 12, &len, plain, (int)n), 1);
        ck_assert_int_eq(EVP_EncryptFinal_ex(cx, raw + 12 + n, &len), 1);
        ck_assert_int_eq(EVP_CIPHER_CTX_ctrl(cx, EVP_CTRL_GCM_GET_TAG, 16, raw + 12 + n), 1);
        EVP_CIPHER_CTX_free(cx);
        sp_buf out = SP_BUF_INIT;
        sp_buf_append_str(&out, "e2b1.", NULL);
        sp_base64_encode(&out, raw, 12 + n + 16, 1, NULL);
        return sp_buf_steal(&out);
}

static void refused(const e2b_token_key *key, const char *sandbox, const char *token, const char *what)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_free_ char *k = e2b_token_open(key, sandbox, token, &e);
        ck_assert_msg(k == NULL, "%s: opened", what);
        ck_assert_msg(e && e->code == SP_E_UNAUTHENTICATED, "%s: wrong error", what);
        ck_assert_str_eq(e->message, "invalid access token");
}

static char *opened(const e2b_token_key *key, const char *sandbox, const char *token)
{
        _cleanup_error_ sp_error *e = NULL;
        char *k = e2b_token_open(key, sandbox, token, &e);
        ck_assert_msg(k != NULL, "refused: %s", e ? e->message : "");
        ck_assert_ptr_null(e);
        return k;
}

START_TEST(seal_and_open)
{
        e2b_token_key key = key_of(7);
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_free_ char *t = e2b_token_seal(&key, SBX, "sk_test_key", &e);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(strncmp(t, "e2b1.", 5), 0);
        /* base64url without padding: safe in a header as it is. */
        ck_assert_uint_eq(strspn(t + 5, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
                          strlen(t + 5));
        _cleanup_free_ char *k = opened(&key, SBX, t);
        ck_assert_str_eq(k, "sk_test_key");
        /* A fresh nonce each time: two seals differ, both open. */
        _cleanup_free_ char *t2 = e2b_token_seal(&key, SBX, "sk_test_key", &e);
        ck_assert_str_ne(t, t2);
        _cleanup_free_ char *k2 = opened(&key, SBX, t2);
        ck_assert_str_eq(k2, "sk_test_key");
}
END_TEST

START_TEST(other_sandbox_or_secret)
{
        e2b_token_key key = key_of(7), other = key_of(8);
        _cleanup_free_ char *t = e2b_token_seal(&key, SBX, "sk_test_key", NULL);
        refused(&key, "sbx_0123456789abcdee", t, "other sandbox");
        refused(&key, SBX "0", t, "longer sandbox id");
        refused(&key, "", t, "empty sandbox id");
        refused(&key, NULL, t, "no sandbox id");
        refused(&other, SBX, t, "other secret");
        refused(&key, SBX, NULL, "no token");
}
END_TEST

START_TEST(every_change_refused)
{
        e2b_token_key key = key_of(7);
        _cleanup_free_ char *t = e2b_token_seal(&key, SBX, "sk_test_key", NULL);
        size_t n = strlen(t);
        for (size_t i = 0; i < n; i++) {
                for (const char *c = "Aa0-_.=+/ "; *c; c++) {
                        if (*c == t[i])
                                continue;
                        _cleanup_free_ char *bad = strdup(t);
                        bad[i] = *c;
                        char what[64];
                        snprintf(what, sizeof(what), "'%c' at %zu", *c, i);
                        refused(&key, SBX, bad, what);
                }
                /* Every truncation. */
                _cleanup_free_ char *cut = strndup(t, i);
                refused(&key, SBX, cut, "truncated");
        }
        /* Anything appended (but padding, which base64 allows). */
        _cleanup_free_ char *longer = NULL;
        ck_assert_int_ge(asprintf(&longer, "%sA", t), 0);
        refused(&key, SBX, longer, "appended");
}
END_TEST

START_TEST(malformed_tokens)
{
        e2b_token_key key = key_of(7);
        refused(&key, SBX, "", "empty");
        refused(&key, SBX, "e2b1.", "prefix only");
        refused(&key, SBX, "e2b2.AAAA", "other version");
        refused(&key, SBX, "E2B1.AAAA", "prefix case");
        refused(&key, SBX, "e2b1.A", "base64 of 1 char");
        refused(&key, SBX, "e2b1.AA$A", "bad base64 character");
        refused(&key, SBX, "e2b1.AA+/", "standard alphabet");
        refused(&key, SBX, "e2b1.AAB", "non-canonical trailing bits");
        /* Decodes, but shorter than nonce and tag. */
        refused(&key, SBX, "e2b1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "28 bytes");
}
END_TEST

START_TEST(key_and_token_bounds)
{
        e2b_token_key key = key_of(7);
        _cleanup_error_ sp_error *e = NULL;
        /* API keys of 1 and 512 bytes are sealed; 0 and 513 are not. */
        char big[514];
        memset(big, 'k', sizeof(big));
        big[512] = '\0';
        _cleanup_free_ char *t512 = e2b_token_seal(&key, SBX, big, &e);
        ck_assert_ptr_nonnull(t512);
        ck_assert_uint_le(strlen(t512), E2B_TOKEN_MAX_LEN);
        _cleanup_free_ char *k512 = opened(&key, SBX, t512);
        ck_assert_str_eq(k512, big);
        _cleanup_free_ char *t1 = e2b_token_seal(&key, SBX, "k", &e);
        _cleanup_free_ char *k1 = opened(&key, SBX, t1);
        ck_assert_str_eq(k1, "k");
        ck_assert_ptr_null(e2b_token_seal(&key, SBX, "", &e));
        ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);
        sp_error_free(TAKE_PTR(e));
        big[512] = 'k';
        big[513] = '\0';
        ck_assert_ptr_null(e2b_token_seal(&key, SBX, big, &e));
        ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);

        /* Crafted with the right secret around what seal refuses. */
        _cleanup_free_ char *c513 = craft(&key, SBX, big, 513);
        refused(&key, SBX, c513, "513-byte key");
        _cleanup_free_ char *c512 = craft(&key, SBX, big, 512);
        _cleanup_free_ char *k = opened(&key, SBX, c512);
        ck_assert_uint_eq(strlen(k), 512);
        _cleanup_free_ char *c0 = craft(&key, SBX, "", 0);
        refused(&key, SBX, c0, "empty key");
        _cleanup_free_ char *cnul = craft(&key, SBX, "sk\0tail", 7);
        refused(&key, SBX, cnul, "key with a NUL");

        /* The token's length: E2B_TOKEN_MAX_LEN at most, checked before decoding. */
        char tok[E2B_TOKEN_MAX_LEN + 2];
        memcpy(tok, "e2b1.", 5);
        memset(tok + 5, 'A', sizeof(tok) - 6);
        tok[E2B_TOKEN_MAX_LEN + 1] = '\0';
        refused(&key, SBX, tok, "1025 characters");
        tok[E2B_TOKEN_MAX_LEN] = '\0';
        refused(&key, SBX, tok, "1024 characters (too many bytes inside)");
}
END_TEST

START_TEST(secret_file)
{
        _cleanup_free_ char *dir = sp_test_tmpdir("e2b-token");
        _cleanup_free_ char *path = NULL;
        ck_assert_int_ge(asprintf(&path, "%s/secret.key", dir), 0);
        _cleanup_error_ sp_error *e = NULL;
        e2b_token_key a, b;
        sp_test_ok(e2b_token_key_load(path, &a, &e), &e);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        ck_assert_int_eq(st.st_size, E2B_TOKEN_KEY_LEN);
        /* Loaded again: the same secret, so tokens survive a restart. */
        sp_test_ok(e2b_token_key_load(path, &b, &e), &e);
        ck_assert_int_eq(memcmp(a.k, b.k, sizeof(a.k)), 0);
        _cleanup_free_ char *t = e2b_token_seal(&a, SBX, "sk", NULL);
        _cleanup_free_ char *k = opened(&b, SBX, t);
        ck_assert_str_eq(k, "sk");

        /* A file of another size is refused, and left alone. */
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs("short", f);
        fclose(f);
        ck_assert_int_lt(e2b_token_key_load(path, &a, &e), 0);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_free(TAKE_PTR(e));
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_size, 5);
        /* Something there that cannot be read is not replaced. */
        ck_assert_int_lt(e2b_token_key_load(dir, &a, &e), 0);
        ck_assert_int_eq(e->code, SP_E_IO);
        sp_test_tmpdir_remove(dir);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_token");
        TCase *tc = tcase_create("token");
        tcase_add_test(tc, seal_and_open);
        tcase_add_test(tc, other_sandbox_or_secret);
        tcase_add_test(tc, every_change_refused);
        tcase_add_test(tc, malformed_tokens);
        tcase_add_test(tc, key_and_token_bounds);
        tcase_add_test(tc, secret_file);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
