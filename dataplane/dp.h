/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The state one space-dataplane process shares between its routes: the
 * settings that bound them, the token keys, the worker connections and the
 * counters. It holds nothing a restart could lose: every request carries its
 * token, every byte offset comes from the client or the worker.
 * Owned by main; the routes borrow it. Not thread-safe (one event loop).
 */
#ifndef DP_DP_H
#define DP_DP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "auth/keys.h"
#include "auth/revoked.h"
#include "cluster/resolve.h"
#include "space/shares.h"
#include "metrics/metrics.h"
#include "workers/pool.h"

struct event_base;

typedef struct dp_limits {
        size_t max_streams; /* attach streams and file or stdin transfers at once; more get 503 */
        size_t max_streams_per_tenant; /* of those, what one tenant (the token's "ten") may hold; more get 429 */
        int64_t rpc_timeout_ms; /* unary worker calls (GetSession, StatFile, signals ...) */
        uint64_t max_upload; /* bytes of one PUT body (413 beyond) */
        int64_t keepalive_ms; /* an SSE comment after this much silence on an attach stream */
        int64_t ingress_answer_ms; /* ingress: from the request sent to the server's head (504 past it) */
        int64_t ingress_wake_ms; /* ingress: how long a request waits for its sandbox to wake (504 past it) */
} dp_limits;

typedef struct dp {
        struct event_base *base;
        dp_limits limits;
        dp_keys *keys; /* borrowed */
        dp_revoked *revoked; /* borrowed: API keys whose tokens are refused */
        dp_pool *pool; /* borrowed */
        dp_metrics metrics;
        sp_shares *streams; /* owned by main: the max_streams slots, shared out per tenant */
        bool has_client_cert; /* /readyz: there is a certificate to dial workers with */
        /* Ingress (ingress/ingress.h): where sandboxes are (NULL without a
         * control plane: ingress answers 503), and the domain of the host form. */
        dp_resolver *resolver; /* borrowed */
        char ingress_domain[201];
        /* Called when a token names a key the set does not hold (main asks
         * the control plane for its keys, rate limited); may be NULL. */
        void (*unknown_key)(void *userdata);
        void *unknown_key_userdata;
} dp;

#endif
