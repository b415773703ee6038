/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: space-e2b's envd access tokens (compat/e2b/token.h). An
 * input starting with "e2b1." is a token, opened with a fixed secret for a
 * fixed sandbox: it opens to an API key of 1 to 512 bytes without a NUL, or
 * fails with SP_E_UNAUTHENTICATED. Any other input is an API key: sealed,
 * it must open to itself for its sandbox only, and fail to open once any one
 * of its characters is changed (the position and the change come from the
 * input).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The corpus tokens are sealed under this secret (set on the first run) for SANDBOX. */
#define SECRET "0123456789abcdef0123456789abcdef"
static e2b_token_key key;
#define SANDBOX "sbx_fuzz"

static void must_fail(const char *sandbox, const char *token)
{
        sp_error *e = NULL;
        char *k = e2b_token_open(&key, sandbox, token, &e);
        if (k || !e || e->code != SP_E_UNAUTHENTICATED)
                abort();
        sp_error_free(e);
}

static void open_token(const char *text)
{
        sp_error *e = NULL;
        char *k = e2b_token_open(&key, SANDBOX, text, &e);
        if (k) {
                if (e || strlen(k) == 0 || strlen(k) > 512)
                        abort();
                /* Sealed anew it opens again: a token is never all there is to a key. */
                char *t = e2b_token_seal(&key, SANDBOX, k, &e);
                char *k2 = t ? e2b_token_open(&key, SANDBOX, t, &e) : NULL;
                if (!k2 || strcmp(k, k2) != 0)
                        abort();
                free(t);
                free(k2);
                free(k);
        } else if (!e || e->code != SP_E_UNAUTHENTICATED) {
                abort();
        }
        sp_error_free(e);
}

static void round_trip(const char *api_key, const uint8_t *data, size_t size)
{
        sp_error *e = NULL;
        char *t = e2b_token_seal(&key, SANDBOX, api_key, &e);
        size_t n = strlen(api_key);
        if (!t) {
                if (n != 0 && n <= 512)
                        abort();
                if (!e || e->code != SP_E_UNAUTHENTICATED)
                        abort();
                sp_error_free(e);
                return;
        }
        if (e || strlen(t) > E2B_TOKEN_MAX_LEN || strncmp(t, "e2b1.", 5) != 0)
                abort();
        char *k = e2b_token_open(&key, SANDBOX, t, &e);
        if (!k || strcmp(k, api_key) != 0)
                abort();
        free(k);
        must_fail("sbx_other", t);
        must_fail("sbx_fuzz ", t);
        /* Change one character to another printable one. */
        size_t tl = strlen(t), at = size >= 2 ? ((size_t)data[0] << 8 | data[1]) % tl : 0;
        char c = (char)(size >= 3 ? 33 + data[2] % 94 : '!');
        if (c == t[at])
                c = c == '!' ? '"' : '!';
        t[at] = c;
        must_fail(SANDBOX, t);
        free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        memcpy(key.k, SECRET, sizeof(key.k));
        if (size > 2 * E2B_TOKEN_MAX_LEN)
                return 0;
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        if (size >= 5 && memcmp(text, "e2b1.", 5) == 0)
                open_token(text);
        else
                round_trip(text, data, size);
        free(text);
        return 0;
}
