/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker's side of the cluster (proto/spec/controlplane-rpc.md): joining
 * with a bootstrap token, and heartbeats.
 *
 * Join (wk_cluster_credentials): space/join.h with role worker, keeping
 *   <state>/tls/worker.key   its private key (0600)
 *   <state>/tls/worker.crt   its certificate, signed by the cluster CA (0600)
 *   <state>/tls/ca.crt       the cluster CA (0644)
 * A worker's Join also says where the control plane dials it (address), its
 * backend and labels, and is answered with its worker id. A later start
 * finds the files and joins no more (the token is needed once).
 *
 * Heartbeats (wk_cluster_start): on the daemon's event loop, right after start
 * and then every heartbeat_ms (the control plane says how often), the node's
 * capacity, use, templates, upload artifacts, warm pools and sandboxes go to
 * the control plane over mTLS — and at once whenever a template was added or
 * deleted (the node's templates-changed hook, which the cluster holds while
 * it runs). A control plane that is down or refuses is retried at the same
 * pace without ever blocking the loop; each change between reachable and not
 * is logged once.
 */
#ifndef WK_CLUSTER_H
#define WK_CLUSTER_H

#include <json-c/json.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>

#include "node/node.h"
#include "space/error.h"
#include "space/join.h"

struct event_base;

#define WK_CLUSTER_LABELS_MAX 64

typedef struct wk_cluster_config {
        const char *control_plane; /* "HOST:PORT" of the control plane's internal RPC */
        const char *name; /* this worker's name: [a-z0-9][a-z0-9.-]{0,62} */
        const char *advertise; /* "HOST:PORT" the control plane dials for the worker RPC */
        const char *backend; /* "jail", ... */
        json_object *labels; /* string map (wk_cluster_parse_labels), or NULL */
        const char *state_dir; /* where tls/ lives */
} wk_cluster_config;

/* The worker's client TLS context toward the control plane (its certificate,
 * the cluster CA, a server of role controlplane, h2); NULL with *err. */
SSL_CTX *wk__cluster_tls(const sp_join_creds *creds, sp_error **err);

/* --drain-self (drain true) and --uncordon-self: asks the control plane, with
 * creds (the worker's own certificate), to drain this worker and waits until
 * it is drained, logging how many sandboxes are left as that changes; or to
 * undo a drain of the worker's own (an operator's cordon or drain is logged
 * and left: 0). Retries while the control plane cannot be reached, for up to
 * timeout_us. Errors: SP_E_TIMEOUT (not drained in time), SP_E_CONFLICT (an
 * operator lifted the drain meanwhile), the control plane's. */
int wk_cluster_self_admin(const wk_cluster_config *cfg, const sp_join_creds *creds, bool drain, int64_t timeout_us,
                          sp_error **err);

/* Parses "k=v,k=v" (--labels) into a new string map: at most
 * WK_CLUSTER_LABELS_MAX labels, keys of [A-Za-z0-9._/-] (1..128 bytes),
 * values of printable ASCII without ',' (0..256 bytes), no key twice.
 * "" gives an empty map. SP_E_INVALID names the bad label. */
int wk_cluster_parse_labels(const char *s, json_object **ret, sp_error **err);

/* The worker's credentials for cfg (sp_join_credentials() with role
 * worker; ca_pem from --tls-ca, or NULL for the saved CA): the saved ones, or
 * those of a new join (blocking), which are saved once the answer names the
 * worker's id. Errors as sp_join_credentials(), and SP_E_IO saving. */
int wk_cluster_credentials(const wk_cluster_config *cfg, const char *ca_pem, const char *token, sp_join_creds *ret,
                           sp_error **err);

typedef struct wk_cluster wk_cluster;

/* Starts heartbeats of node to cfg->control_plane on base with creds (the
 * worker's certificate; the control plane must present role controlplane).
 * cfg and its strings are copied; node and base are borrowed and must outlive
 * the returned handle. Fails with SP_E_INVALID for bad credentials. */
int wk_cluster_start(struct event_base *base, wk_node *node, const wk_cluster_config *cfg, const sp_join_creds *creds,
                     wk_cluster **ret, sp_error **err);

/* True once the last heartbeat was accepted. */
bool wk_cluster_connected(const wk_cluster *c);

/* Stops heartbeats (a call in flight is abandoned) and frees; accepts NULL. */
void wk_cluster_free(wk_cluster *c);

#endif
