/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The API keys the control plane revoked and the uploaded templates it
 * deleted (RevokedKeys, proto/spec/controlplane-rpc.md): a token whose
 * "akey" claim names such a key, or a template token whose "tpl" names such
 * a template, is refused, whatever its expiry says. The set holds ids with
 * the time they were revoked, and forgets one PR_REVOKED_WINDOW_S after its
 * revocation (no token minted before can live that long). At most
 * DP_REVOKED_MAX keys and as many templates; beyond, the oldest are
 * forgotten first.
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

/* Adds the keys and templates of an answer (ids already held keep their
 * first time) and forgets those revoked more than PR_REVOKED_WINDOW_S
 * before now_us. Returns how many keys were new (*ret_templates: how many
 * templates; may be NULL), or -1 when out of memory (some may be missing:
 * the caller asks again from its old cursor). */
int dp_revoked_add(dp_revoked *r, const pr_revoked_keys *keys, int64_t now_us, int *ret_templates);

/* True if key_id ("" is never revoked) is in the set. */
bool dp_revoked_has(const dp_revoked *r, const char *key_id);
/* True if template_id ("" is never revoked) was deleted. */
bool dp_revoked_has_template(const dp_revoked *r, const char *template_id);

/* Keys and templates held. */
size_t dp_revoked_count(const dp_revoked *r);
size_t dp_revoked_templates(const dp_revoked *r);

#endif
