/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the input, as a token string, through sp_token_verify() with
 * a fixed verifier (two Ed25519 public keys) and a fixed clock. It must never
 * crash, leak or hang; it returns claims only as a JSON object and without an
 * error, and otherwise exactly an SP_E_UNAUTHENTICATED error with one of the
 * documented messages. The corpus holds tokens signed with the first key's
 * private half (valid, expired, not yet valid) and malformed ones.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* kid 44f28b3ab8970011 */
static const char key1[] = "-----BEGIN PUBLIC KEY-----\n"
                           "MCowBQYDK2VwAyEARCUB9mFWi0uhluTwk1McHEuM5ewCZIQnPaEMPvS/N1w=\n"
                           "-----END PUBLIC KEY-----\n";
static const char key2[] = "-----BEGIN PUBLIC KEY-----\n"
                           "MCowBQYDK2VwAyEAFsjbvI1DZOR8u65WY2XKK5HsiOBBajfITyUoPXEnXwA=\n"
                           "-----END PUBLIC KEY-----\n";
/* Inside the corpus tokens' validity (iat 1700000000, exp 1700003600). */
#define FUZZ_NOW INT64_C(1700000100)

static sp_token_verifier *verifier;

static const char *const messages[] = {"malformed token", "unknown signing key", "bad signature", "token expired",
                                       "token not yet valid"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (!verifier) {
                verifier = sp_token_verifier_new();
                if (!verifier || sp_token_verifier_add_key(verifier, key1, NULL) < 0 ||
                    sp_token_verifier_add_key(verifier, key2, NULL) < 0)
                        abort();
        }
        /* Past twice the bound every input is the same early rejection. */
        if (size > 2 * SP_TOKEN_MAX_LEN)
                return 0;
        char *token = malloc(size + 1);
        if (!token)
                return 0;
        memcpy(token, data, size);
        token[size] = '\0';

        sp_error *e = NULL;
        json_object *claims = sp_token_verify(verifier, token, FUZZ_NOW, &e);
        if (claims) {
                if (e || !json_object_is_type(claims, json_type_object))
                        abort();
                json_object_put(claims);
        } else {
                if (!e || e->code != SP_E_UNAUTHENTICATED)
                        abort();
                size_t i = 0;
                while (i < sizeof(messages) / sizeof(messages[0]) && strcmp(e->message, messages[i]) != 0)
                        i++;
                if (i == sizeof(messages) / sizeof(messages[0]))
                        abort();
        }
        sp_error_free(e);
        free(token);
        return 0;
}
