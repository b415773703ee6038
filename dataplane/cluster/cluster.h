/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data plane's side of the cluster (proto/spec/controlplane-rpc.md,
 * "Data-plane replicas"): joining with a bootstrap token, and keeping the
 * token keys current.
 *
 * Join (dp_cluster_credentials): space/join.h with role dataplane, the
 * request saying "role":"dataplane" and the answer bringing the token keys.
 * A replica keeps
 *   <state>/tls/dataplane.key   its private key (0600)
 *   <state>/tls/dataplane.crt   its certificate (0600)
 *   <state>/tls/ca.crt          the cluster CA (0644)
 *   <state>/token-keys.json     the last token keys it was given (0644)
 * and a later start uses them without joining again (so it serves tokens at
 * once, even while the control plane is down).
 *
 * Token keys (dp_cluster_start): the saved keys at once, then TokenKeys on
 * the daemon's event loop every
 * DP_CLUSTER_KEYS_PERIOD_MS, and on demand when a token names a key the set
 * lacks (dp_cluster_refresh), at most once every DP_CLUSTER_KEYS_MIN_GAP_MS.
 * The control plane's answer replaces the DP_KEYS_CONTROL_PLANE source of the
 * key set; a failure keeps the keys held and is logged once per outage.
 */
#ifndef DP_CLUSTER_H
#define DP_CLUSTER_H

#include <stdbool.h>

#include "auth/keys.h"
#include "auth/revoked.h"
#include "space/error.h"
#include "space/join.h"
#include "space/rpc.h"

struct event_base;
typedef struct ssl_ctx_st SSL_CTX;

#define DP_CLUSTER_KEYS_PERIOD_MS 60000
#define DP_CLUSTER_KEYS_MIN_GAP_MS 5000

typedef struct dp_cluster_config {
        const char *control_plane; /* "HOST:PORT" of the control plane's internal RPC */
        const char *name; /* this replica's name: [a-z0-9][a-z0-9.-]{0,62} (sp_join_name_ok) */
        const char *state_dir; /* where tls/ and token-keys.json live; NULL: nothing is saved */
} dp_cluster_config;

/* The replica's credentials (sp_join_credentials() with role dataplane;
 * ca_pem from --rpc-ca, or NULL for the saved CA): the saved ones, or those
 * of a new join (blocking), saved with the token keys it brings, which are
 * also added to keys (dp_cluster_start() adds the saved ones).
 * Errors as sp_join_credentials() (SP_E_INVALID also without a state
 * directory), and SP_E_IO saving the files. */
int dp_cluster_credentials(const dp_cluster_config *cfg, const char *ca_pem, const char *token, dp_keys *keys,
                           sp_join_creds *ret, sp_error **err);

typedef struct dp_cluster dp_cluster;

/* Starts fetching the token keys into keys (borrowed, must outlive the
 * handle) on base, over ctx (a client context presenting this replica's
 * certificate and accepting role controlplane; the handle takes a
 * reference). The first fetch runs at once. cfg's strings are copied. */
int dp_cluster_start(struct event_base *base, const dp_cluster_config *cfg, SSL_CTX *ctx, dp_keys *keys,
                     dp_cluster **ret, sp_error **err);

/* A token named a key the set lacks: fetch now, unless a fetch is running or
 * one started less than DP_CLUSTER_KEYS_MIN_GAP_MS ago. */
void dp_cluster_refresh(dp_cluster *c);

/* Polls RevokedKeys every period_ms (and at once) into revoked (borrowed,
 * must outlive the handle): the API keys revoked and the uploaded templates
 * deleted since the last answer, from a cursor that overlaps the last one by
 * PR_REVOKED_SLACK_S. A control plane that refuses to answer templates (an
 * older one) is asked for keys only, and for templates again a minute
 * later. A failure
 * keeps the keys held and is logged once per outage. SP_E_LIMIT when out of
 * memory. */
int dp_cluster_watch_revoked(dp_cluster *c, dp_revoked *revoked, int64_t period_ms, sp_error **err);

/* True once a RevokedKeys poll succeeded (or none is configured). */
bool dp_cluster_revoked_fetched(const dp_cluster *c);

/* True once a fetch succeeded. */
bool dp_cluster_keys_fetched(const dp_cluster *c);

/* The client to the control plane (borrowed: valid until dp_cluster_free()),
 * for other calls than the cluster's own (cluster/resolve.h). */
sp_rpc_client *dp_cluster_client(dp_cluster *c);

/* Stops (a call in flight is abandoned) and frees; accepts NULL. */
void dp_cluster_free(dp_cluster *c);

#endif
