/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Envelope encryption of secrets' values (docs/secrets.md), with OpenSSL's
 * AES-256-GCM:
 *
 *   ciphertext  = the value under a random data key of its own; its
 *                 additional data binds it to the secret's id and tenant, so
 *                 that a ciphertext moved to another row does not open;
 *   wrapped key = that data key under a cluster key (store/keyring.h); its
 *                 additional data binds it to the secret's id and the key's id.
 *
 * Both are stored as: a version byte (1), a 12-byte random nonce, the
 * encrypted bytes, the 16-byte tag. A rewrap opens the wrapped key with the
 * key that wrapped it and wraps it again under the primary; the ciphertext
 * does not change.
 *
 * Pure functions over bytes and a key ring: no I/O, no logging. Errors never
 * hold a value or key material: SP_E_NOT_FOUND when the cluster key named is
 * not in the ring, SP_E_INVALID when something does not open (a wrong key, a
 * wrong secret or tenant, tampered bytes), SP_E_INTERNAL when OpenSSL fails.
 * Thread-safe for distinct outputs.
 */
#ifndef CP_STORE_ENVELOPE_H
#define CP_STORE_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"
#include "store/keyring.h"

#define CP_ENVELOPE_VERSION 1
#define CP_ENVELOPE_NONCE 12
#define CP_ENVELOPE_TAG 16
#define CP_ENVELOPE_OVERHEAD (1 + CP_ENVELOPE_NONCE + CP_ENVELOPE_TAG)
#define CP_ENVELOPE_VALUE_MAX (64 * 1024)

/* A sealed value: what a secret's row keeps. Clear it with cp_sealed_clear(). */
typedef struct cp_sealed {
        char key_id[CP_KEY_ID_MAX + 1]; /* the cluster key that wraps the data key */
        sp_buf wrapped; /* the data key, wrapped */
        sp_buf ciphertext; /* the value */
} cp_sealed;

void cp_sealed_clear(cp_sealed *s);

/* Seals value (len 1..CP_ENVELOPE_VALUE_MAX bytes) for secret_id of
 * tenant_id under a new data key wrapped with the primary key of k. *ret is
 * filled (cleared first). */
int cp_envelope_seal(const cp_keyring *k, const char *secret_id, const char *tenant_id, const void *value, size_t len,
                     cp_sealed *ret, sp_error **err);

/* Opens a sealed value of secret_id of tenant_id whose data key key_id
 * wraps: *ret_value gets a new NUL-terminated copy of it (len in *ret_len),
 * which the caller frees with cp_envelope_value_free(). */
int cp_envelope_open(const cp_keyring *k, const char *secret_id, const char *tenant_id, const char *key_id,
                     const void *wrapped, size_t wrapped_len, const void *ciphertext, size_t ciphertext_len,
                     char **ret_value, size_t *ret_len, sp_error **err);

/* Wipes and frees a value from cp_envelope_open(); accepts NULL. */
void cp_envelope_value_free(char *value, size_t len);

/* Wraps secret_id's data key (wrapped under key_id) again under the primary
 * key of k: ret->key_id and ret->wrapped are filled (ret->ciphertext stays
 * empty). Wrapping under the key that already wraps it makes a new nonce. */
int cp_envelope_rewrap(const cp_keyring *k, const char *secret_id, const char *key_id, const void *wrapped,
                       size_t wrapped_len, cp_sealed *ret, sp_error **err);

#endif
