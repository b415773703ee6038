/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Signed file URLs: envd's `signature=` on GET and POST /files.
 *
 * The SDK's uploadUrl() and downloadUrl() sign a path, an operation and a
 * user with the sandbox's envd access token, in the client, without a call:
 *   "v1_" + base64(sha256("path:operation:user:token[:expiration]")), unpadded
 * (the user "" when the URL names none; expiration in Unix seconds). The URL
 * carries neither the token nor the sandbox (with E2B_SANDBOX_URL every
 * sandbox has the same host), so a signature can only be checked against
 * the tokens the daemon knows: the signers, a bounded table of the tokens it
 * minted (create, connect) or opened on an envd call since it started. A
 * signature that matches none of them, or its sandbox's when the request
 * names one (E2b-Sandbox-Id), is refused; so is one whose expiration has
 * passed (envd's rule: refused when expiration < now). A match gives the
 * token and its sandbox, and the call then acts as one with that token in
 * X-Access-Token, for that path, operation and user only.
 *
 * Thread-safe: the table has a lock of its own.
 */
#ifndef E2B_SIGN_H
#define E2B_SIGN_H

#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define E2B_SIGN_LEN 46 /* "v1_" and 43 characters of base64 */
#define E2B_SIGNERS_MAX 8192 /* tokens remembered in all */
#define E2B_SIGNERS_PER_SANDBOX 16 /* of them, the newest of one sandbox */

/* The signature of path, operation ("read" or "write"), user ("" for none)
 * and token, with the expiration when exp is not NULL, into out. */
void e2b_sign_compute(const char *path, const char *operation, const char *user, const char *token, const int64_t *exp,
                      char out[static E2B_SIGN_LEN + 1]);

/* Parses signature_expiration: a decimal integer (an optional sign, 1 to 19
 * digits) that fits in 64 bits, as envd's. Errors: SP_E_INVALID. */
int e2b_sign_expiration(const char *s, int64_t *ret, sp_error **err);

typedef struct e2b_signers e2b_signers;

/* A table of at most max tokens, per_sandbox of one sandbox. NULL when out
 * of memory. Free with e2b_signers_free() (accepts NULL; wipes the tokens). */
e2b_signers *e2b_signers_new(size_t max, size_t per_sandbox);
void e2b_signers_free(e2b_signers *s);

/* Remembers token as sandbox_id's (copies both), for the API key that made or
 * used it (only a hash of it is kept). A token already there is made the
 * newest (and the key's); beyond per_sandbox the sandbox's oldest is
 * forgotten; in a full table, the oldest entry of the key that holds the most,
 * so that no key pushes out the entries of one that holds fewer. Ignores
 * NULL, empty or oversized values. */
void e2b_signers_remember(e2b_signers *s, const char *sandbox_id, const char *token, const char *api_key);

/* Finds the token that signed (path, operation, user, expiration) as
 * signature, among sandbox_id's when it is not NULL, else among all; the
 * signatures are compared in constant time. expiration is the query's text
 * or NULL; now is the time in Unix seconds. On success *ret_sandbox and
 * *ret_token are malloc'd copies. Errors: SP_E_INVALID (expiration not a
 * number), SP_E_UNAUTHENTICATED "invalid signature" (no token signed it) or
 * "signature is already expired" (one did, but expiration < now). */
int e2b_signers_check(e2b_signers *s, const char *sandbox_id, const char *path, const char *operation, const char *user,
                      const char *signature, const char *expiration, int64_t now, char **ret_sandbox, char **ret_token,
                      sp_error **err);

#endif
