/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The API keys the control plane revoked (RevokedKeys,
 * proto/spec/controlplane-rpc.md): a token whose "akey" claim names one of
 * them is refused, whatever its expiry says. The set holds key ids with the
 * time they were revoked, and forgets a key PR_REVOKED_WINDOW_S after its
 * revocation (no token it minted before can live that long). At most
 * DP_REVOKED_MAX keys; beyond, the oldest are forgotten first.
 * Owned by main, filled by cluster/ on the event loop, read by the routes on
 * the same loop: not thread-safe.
 */
#ifndef DP_AUTH_REVOKED_H
#define DP_AUTH_REVOKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/revoked_proto.h"

#define DP_REVOKED_MAX 100000

typedef struct dp_revoked dp_revoked;

/* A new, empty set (NULL only when out of memory). */
dp_revoked *dp_revoked_new(void);
/* Frees the set; accepts NULL. */
void dp_revoked_free(dp_revoked *r);

/* Adds the keys of an answer (ids already held keep their first time) and
 * forgets those revoked more than PR_REVOKED_WINDOW_S before now_us.
 * Returns how many were new, or -1 when out of memory (some keys may be
 * missing: the caller asks again from its old cursor). */
int dp_revoked_add(dp_revoked *r, const pr_revoked_keys *keys, int64_t now_us);

/* True if key_id ("" is never revoked) is in the set. */
bool dp_revoked_has(const dp_revoked *r, const char *key_id);

/* Keys held. */
size_t dp_revoked_count(const dp_revoked *r);

#endif
