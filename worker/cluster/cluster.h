/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker's side of the cluster (proto/spec/controlplane-rpc.md): joining
 * with a bootstrap token, and heartbeats.
 *
 * Join (wk_cluster_credentials): a worker without a certificate creates a key
 * and a CSR (role worker, its node name), presents them with a join token to
 * the control plane — over TLS that verifies the control plane against the
 * cluster CA, the worker having no certificate yet — and keeps what it gets:
 *   <state>/tls/worker.key   its private key (0600)
 *   <state>/tls/worker.crt   its certificate, signed by the cluster CA (0600)
 *   <state>/tls/ca.crt       the cluster CA (0644)
 * A later start finds them and joins no more (the token is needed once).
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
#include <stdbool.h>
#include <stdint.h>

#include "node/node.h"
#include "space/error.h"

struct event_base;

#define WK_CLUSTER_NAME_MAX 63
#define WK_CLUSTER_LABELS_MAX 64
#define WK_CLUSTER_TOKEN_MAX 200

typedef struct wk_cluster_config {
        const char *control_plane; /* "HOST:PORT" of the control plane's internal RPC */
        const char *name; /* this worker's name: [a-z0-9][a-z0-9.-]{0,62} */
        const char *advertise; /* "HOST:PORT" the control plane dials for the worker RPC */
        const char *backend; /* "jail", ... */
        json_object *labels; /* string map (wk_cluster_parse_labels), or NULL */
        const char *state_dir; /* where tls/ lives */
} wk_cluster_config;

/* What the worker presents and trusts: PEM strings, owned. */
typedef struct wk_cluster_creds {
        char *ca_pem, *cert_pem, *key_pem;
} wk_cluster_creds;

/* Frees the strings (the key is wiped first) and zeroes *c. */
void wk_cluster_creds_free(wk_cluster_creds *c);

/* Parses "k=v,k=v" (--labels) into a new string map: at most
 * WK_CLUSTER_LABELS_MAX labels, keys of [A-Za-z0-9._/-] (1..128 bytes),
 * values of printable ASCII without ',' (0..256 bytes), no key twice.
 * "" gives an empty map. SP_E_INVALID names the bad label. */
int wk_cluster_parse_labels(const char *s, json_object **ret, sp_error **err);

/* Reads a join token from a file: its first line, surrounding white space
 * removed. *ret is malloc'd. SP_E_INVALID for an empty or over-long token. */
int wk_cluster_read_token(const char *path, char **ret, sp_error **err);

/* True if s is a name the control plane accepts for a worker. */
bool wk_cluster_name_ok(const char *s);

/* The worker's credentials for cfg. ca_pem is the cluster CA to trust (from
 * --tls-ca), or NULL for the one saved by an earlier join. The saved
 * certificate is used when it verifies against that CA, names this worker
 * and matches the saved key; otherwise, with a token, the worker joins
 * (blocking; while the control plane is unreachable it retries, backing off
 * up to 30 s) and saves the result; without a token it fails, saying why.
 * Errors: SP_E_INVALID (bad name, no CA, no usable certificate and no token),
 * the control plane's answer to Join (unauthenticated for a bad token),
 * SP_E_IO saving the files. */
int wk_cluster_credentials(const wk_cluster_config *cfg, const char *ca_pem, const char *token, wk_cluster_creds *ret,
                           sp_error **err);

typedef struct wk_cluster wk_cluster;

/* Starts heartbeats of node to cfg->control_plane on base with creds (the
 * worker's certificate; the control plane must present role controlplane).
 * cfg and its strings are copied; node and base are borrowed and must outlive
 * the returned handle. Fails with SP_E_INVALID for bad credentials. */
int wk_cluster_start(struct event_base *base, wk_node *node, const wk_cluster_config *cfg,
                     const wk_cluster_creds *creds, wk_cluster **ret, sp_error **err);

/* True once the last heartbeat was accepted. */
bool wk_cluster_connected(const wk_cluster *c);

/* Stops heartbeats (a call in flight is abandoned) and frees; accepts NULL. */
void wk_cluster_free(wk_cluster *c);

#endif
