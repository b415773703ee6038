/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where a sandbox is, for ingress: ResolveSandbox on the control plane
 * (proto/spec/controlplane-rpc.md) — its tenant, state, worker and ingress
 * mode — with a small cache, so that a page's hundred requests ask once.
 *
 * An answer is kept DP_RESOLVE_TTL_MS (a "not found" DP_RESOLVE_MISS_TTL_MS),
 * so a sandbox that moves, pauses or changes its mode is seen within that
 * time; lookups of one sandbox while one is in flight wait for it instead of
 * asking again. At most DP_RESOLVE_CACHE entries are kept (the oldest goes).
 *
 * A wake (dp_resolver_wake) is asked on its own, never from the cache: the
 * control plane wakes a paused or suspended sandbox whose auto_resume is set
 * (ResolveSandbox "wake") and answers where it is now; the answer also
 * refreshes the cache. dp_resolver_lookup_fresh() then polls for it coming
 * back, one question in flight however many requests wait.
 * Not thread-safe (the daemon's event loop).
 */
#ifndef DP_CLUSTER_RESOLVE_H
#define DP_CLUSTER_RESOLVE_H

#include <stdbool.h>

#include "auth/token.h"
#include "space/error.h"
#include "space/rpc.h"

#define DP_RESOLVE_TTL_MS 2000
#define DP_RESOLVE_MISS_TTL_MS 1000
#define DP_RESOLVE_CACHE 4096
#define DP_RESOLVE_TIMEOUT_MS 5000

typedef struct dp_sandbox_info {
        char sandbox[DP_CLAIM_ID_MAX + 1];
        char tenant[DP_CLAIM_ID_MAX + 1];
        char state[32];
        char worker[DP_CLAIM_WORKER_MAX + 1]; /* "" when it has none */
        char worker_name[64]; /* its name (certificate); "" when unknown */
        bool public_; /* ingress "public" (else "token") */
        bool auto_resume; /* a request for its ports wakes it */
        bool waking; /* asked back to running, not there yet */
} dp_sandbox_info;

typedef struct dp_resolver dp_resolver;
typedef struct dp_resolve dp_resolve;

/* info is borrowed for the call; err is the control plane's answer
 * (SP_E_NOT_FOUND for no such sandbox) or why it could not be asked. */
typedef void (*dp_resolve_cb)(const dp_sandbox_info *info, const sp_error *err, void *userdata);

struct event_base;

/* A resolver on base asking over cli (borrowed: the cluster's client to the
 * control plane). */
dp_resolver *dp_resolver_new(struct event_base *base, sp_rpc_client *cli, sp_error **err);
/* Frees the resolver: lookups waiting never get their callbacks. Free it
 * after the client (dp_cluster_free), whose calls in flight end first. Accepts NULL. */
void dp_resolver_free(dp_resolver *r);

/* Looks sandbox up; cb runs later, from the loop, exactly once unless the
 * lookup is cancelled first. Returns the handle, or NULL (SP_E_LIMIT: out of
 * memory) when cb will not run. */
dp_resolve *dp_resolver_lookup(dp_resolver *r, const char *sandbox, dp_resolve_cb cb, void *userdata, sp_error **err);
/* As dp_resolver_lookup, but an answer older than max_age_ms is not taken:
 * the control plane is asked again. */
dp_resolve *dp_resolver_lookup_fresh(dp_resolver *r, const char *sandbox, int64_t max_age_ms, dp_resolve_cb cb,
                                     void *userdata, sp_error **err);
/* Asks the control plane to wake sandbox (see above) and answers as a
 * lookup does, from that question's answer. anonymous: the request came
 * without a token (public mode let it through: the control plane wakes only
 * a sandbox that is public now); key_id: its token's API key, for the audit
 * record. While a wake of the sandbox is in flight, another waits on its
 * answer instead of asking again. */
dp_resolve *dp_resolver_wake(dp_resolver *r, const char *sandbox, bool anonymous, const char *key_id, dp_resolve_cb cb,
                             void *userdata, sp_error **err);
/* Drops a lookup whose callback has not run: it never will. */
void dp_resolve_cancel(dp_resolve *q);

/* Forgets what is known of sandbox (e.g. its worker said it is not there). */
void dp_resolver_forget(dp_resolver *r, const char *sandbox);

#endif
