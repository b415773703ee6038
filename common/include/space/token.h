/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Signed tokens: small JSON claim sets with an expiry, signed with Ed25519.
 *
 *   v1.<base64url(claims JSON)>.<base64url(signature)>
 *
 * without padding, where the signature covers the ASCII bytes "v1." followed
 * by the base64url claims part. The signer adds "iat" and "exp" (unix
 * seconds) and "kid" (the first 16 hex digits of SHA-256 over the raw 32-byte
 * public key), by which a verifier holding several public keys (rotation)
 * picks the one to check with.
 *
 * A rejected token gives SP_E_UNAUTHENTICATED with one of the messages
 * "malformed token", "unknown signing key", "bad signature", "token expired",
 * "token not yet valid" — never the token itself. Nothing here logs a token.
 */
#ifndef SPACE_TOKEN_H
#define SPACE_TOKEN_H

#include <json-c/json.h>
#include <stdint.h>

#include "space/error.h"

#define SP_TOKEN_MAX_LEN 4096 /* bytes of a whole token */
#define SP_TOKEN_MAX_TTL (30 * 24 * 3600) /* seconds */
#define SP_TOKEN_MAX_KEYS 16 /* public keys in one verifier */
#define SP_TOKEN_KID_LEN 16 /* hex digits of a key id */
#define SP_TOKEN_CLOCK_SKEW 60 /* seconds an "iat" may lie in the future */

/* Generates an Ed25519 key pair as new PEM strings (PKCS#8 private key,
 * SubjectPublicKeyInfo public key). The private key is secret: callers
 * should sp_explicit_bzero() it before free(). Outputs untouched on failure. */
int sp_token_keygen(char **ret_private_pem, char **ret_public_pem, sp_error **err);

/* A signer: one Ed25519 private key and its kid. Immutable once created;
 * sp_token_sign() may be called from several threads at once. */
typedef struct sp_token_signer sp_token_signer;

/* Loads a signer from an Ed25519 private key PEM (SP_E_INVALID otherwise). */
int sp_token_signer_new(const char *private_pem, sp_token_signer **ret, sp_error **err);
/* The signer's key id (SP_TOKEN_KID_LEN hex digits), borrowed. */
const char *sp_token_signer_kid(const sp_token_signer *s);
/* The matching public key as a new PEM string, for verifiers. */
char *sp_token_signer_public_pem(const sp_token_signer *s, sp_error **err);
/* Frees the signer; accepts NULL; returns NULL. */
sp_token_signer *sp_token_signer_free(sp_token_signer *s);
static inline void sp_token_signer_freep(sp_token_signer **s)
{
        *s = sp_token_signer_free(*s);
}
#define _cleanup_token_signer_ __attribute__((cleanup(sp_token_signer_freep)))

/* Signs a copy of claims (a JSON object, not modified, which must not set
 * "iat", "exp" or "kid") with iat = now, exp = now + ttl_s (1 to
 * SP_TOKEN_MAX_TTL) and the signer's kid. Returns a new token string.
 * Errors: SP_E_INVALID for bad claims or ttl, SP_E_TOO_LARGE when the token
 * would exceed SP_TOKEN_MAX_LEN. */
char *sp_token_sign(const sp_token_signer *s, json_object *claims, int64_t ttl_s, sp_error **err);

/* A verifier: up to SP_TOKEN_MAX_KEYS Ed25519 public keys. Add keys before
 * sharing it; sp_token_verify() may then be called from several threads. */
typedef struct sp_token_verifier sp_token_verifier;

/* A new, empty verifier (NULL only when out of memory). */
sp_token_verifier *sp_token_verifier_new(void);
/* Adds an Ed25519 public key PEM. Adding a key already present is a no-op.
 * Errors: SP_E_INVALID (not an Ed25519 public key), SP_E_LIMIT (full). */
int sp_token_verifier_add_key(sp_token_verifier *v, const char *public_pem, sp_error **err);
/* Frees the verifier; accepts NULL; returns NULL. */
sp_token_verifier *sp_token_verifier_free(sp_token_verifier *v);
static inline void sp_token_verifier_freep(sp_token_verifier **v)
{
        *v = sp_token_verifier_free(*v);
}
#define _cleanup_token_verifier_ __attribute__((cleanup(sp_token_verifier_freep)))

/* Verifies token (a C string) at time now_s (unix seconds) and returns its
 * claims as a new json_object reference (release with json_object_put()),
 * "iat", "exp" and "kid" included. On rejection returns NULL with an
 * SP_E_UNAUTHENTICATED error carrying one of the messages listed above. */
json_object *sp_token_verify(const sp_token_verifier *v, const char *token, int64_t now_s, sp_error **err);

#endif
