/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public keys that verify attachment tokens, from two sources that may
 * be used together: files given with --token-public-key (re-read on SIGHUP)
 * and the control plane (Join and TokenKeys, see cluster/cluster.h). Each
 * source's set is replaced whole when it changes, so a key the control plane
 * retired stops verifying; the verifier holds their union (at most
 * SP_TOKEN_MAX_KEYS keys).
 * Not thread-safe (the daemon's event loop).
 */
#ifndef DP_AUTH_KEYS_H
#define DP_AUTH_KEYS_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

typedef enum dp_key_source { DP_KEYS_FILES, DP_KEYS_CONTROL_PLANE, DP_KEYS__SOURCES } dp_key_source;

typedef struct dp_keys dp_keys;

/* An empty key set (NULL only when out of memory). */
dp_keys *dp_keys_new(void);
/* Frees the set; accepts NULL. */
void dp_keys_free(dp_keys *k);

/* Replaces the keys of one source with the n PEM public keys in pems
 * (copied). Errors (the set is then unchanged): SP_E_INVALID for a PEM that
 * is not an Ed25519 public key (naming its position), SP_E_LIMIT when the
 * union would hold more than SP_TOKEN_MAX_KEYS distinct keys. */
int dp_keys_set(dp_keys *k, dp_key_source source, const char *const *pems, size_t n, sp_error **err);

/* Reads each file (a PEM public key, at most 64 KiB) and replaces the
 * source's keys with them. Errors name the file. */
int dp_keys_load_files(dp_keys *k, dp_key_source source, char *const *paths, sp_error **err);

/* Keys held, all sources together (a key in both counts twice). */
size_t dp_keys_count(const dp_keys *k);

/* sp_token_verify() against the union: a new claims reference or NULL with
 * its SP_E_UNAUTHENTICATED error. */
json_object *dp_keys_verify(const dp_keys *k, const char *token, int64_t now_s, sp_error **err);

#endif
