/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Envd access tokens: the caller's API key sealed to one sandbox.
 *
 * The E2B SDK sends envd calls with the sandbox's access token only, never
 * its API key; space-e2b needs the key to call the public API on the
 * caller's behalf. So the token is the key itself, encrypted and
 * authenticated (AES-256-GCM) under the daemon's secret, with the sandbox id
 * as associated data: "e2b1." + base64url(nonce || ciphertext || tag). Any
 * replica holding the secret opens it; a token for another sandbox, or any
 * other change, fails to open. Nothing is stored. Revoking the API key
 * revokes every token made from it.
 *
 * Thread-safe (no shared state besides the read-only key).
 */
#ifndef E2B_TOKEN_H
#define E2B_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define E2B_TOKEN_KEY_LEN 32
#define E2B_TOKEN_MAX_LEN 1024

typedef struct e2b_token_key {
        uint8_t k[E2B_TOKEN_KEY_LEN];
} e2b_token_key;

/* Loads the secret from path, or creates one there (mode 0600) when the
 * file does not exist. Errors: SP_E_IO, SP_E_INVALID (not 32 bytes). */
int e2b_token_key_load(const char *path, e2b_token_key *ret, sp_error **err);

/* Seals api_key for sandbox_id; returns a malloc'd token or NULL. */
char *e2b_token_seal(const e2b_token_key *key, const char *sandbox_id, const char *api_key, sp_error **err);

/* Opens token for sandbox_id; returns the malloc'd API key or NULL with
 * SP_E_UNAUTHENTICATED. */
char *e2b_token_open(const e2b_token_key *key, const char *sandbox_id, const char *token, sp_error **err);

#endif
