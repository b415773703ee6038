/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Joining the cluster (proto/spec/controlplane-rpc.md, Join): how a node that
 * gets its certificate from the control plane — a worker, a data-plane
 * replica — comes by its credentials and keeps them.
 *
 * A node without a certificate makes a key and a CSR (its role, its name)
 * and calls Join with a bootstrap token, over TLS that verifies the control
 * plane against the cluster CA (the node has no certificate yet). It keeps
 *   <state>/tls/<role>.key   its private key (0600)
 *   <state>/tls/<role>.crt   its certificate, signed by the cluster CA (0600)
 *   <state>/tls/ca.crt       the cluster CA (0644)
 * where <role> is sp_role_name() of its role, and a later start uses them
 * without joining again (the token is needed once).
 *
 * The caller names everything role-specific in sp_join_config: the role, the
 * words and flags its messages use, and the members its Join request adds;
 * what its role reads from the answer it reads itself, between
 * sp_join_credentials() and sp_join_save(). Nothing here calls back into a
 * component. Blocking (the join waits for the control plane); no shared state.
 */
#ifndef SPACE_JOIN_H
#define SPACE_JOIN_H

#include <json-c/json.h>
#include <stdbool.h>

#include "space/error.h"
#include "space/pki.h"

#define SP_JOIN_NAME_MAX 63
#define SP_JOIN_TOKEN_MAX 200

typedef struct sp_join_config {
        sp_role role; /* the certificate's role: SP_ROLE_WORKER or SP_ROLE_DATAPLANE */
        const char *noun; /* the role in messages: "worker", "data plane" */
        const char *control_plane; /* "HOST:PORT" of the control plane's internal RPC */
        const char *name; /* this node's name: [a-z0-9][a-z0-9.-]{0,62} */
        const char *state_dir; /* where tls/ lives */
        json_object *request; /* members the Join request adds to token, name and csr (borrowed), or NULL */
        /* The daemon's flags, named in messages: */
        const char *name_flag; /* "--node-id" */
        const char *ca_flag; /* "--tls-ca" */
        const char *cert_flag, *key_flag; /* "--tls-cert", "--tls-key" */
} sp_join_config;

/* What a node presents and trusts: PEM strings, owned. */
typedef struct sp_join_creds {
        char *ca_pem, *cert_pem, *key_pem;
} sp_join_creds;

/* Frees the strings (the key is wiped first) and zeroes *c. */
void sp_join_creds_free(sp_join_creds *c);

/* True if s is a name the control plane accepts for a node. */
bool sp_join_name_ok(const char *s);

/* Reads a join token from a file: its first line, surrounding white space
 * removed. *ret is malloc'd. SP_E_INVALID for an empty or over-long token. */
int sp_join_read_token(const char *path, char **ret, sp_error **err);

/* The node's credentials. ca_pem is the cluster CA to trust (from the CA
 * flag), or NULL for the one saved by an earlier join. The saved certificate
 * is used when it verifies against that CA, names this node with cfg's role
 * and matches the saved key; then *ret_answer is NULL. Otherwise, with a
 * token, the node joins (blocking; while the control plane is unreachable it
 * retries, backing off up to 30 s): *ret holds the new credentials and
 * *ret_answer the control plane's answer (a reference the caller puts), whose
 * "certificate" and "ca" are checked — nothing is saved until
 * sp_join_save(). Without a token it fails, saying why.
 * Errors: SP_E_INVALID (bad name, no state directory, no CA, no usable
 * certificate and no token), the control plane's answer to Join
 * (unauthenticated for a bad token), SP_E_IO reading the saved files. */
int sp_join_credentials(const sp_join_config *cfg, const char *ca_pem, const char *token, sp_join_creds *ret,
                        json_object **ret_answer, sp_error **err);

/* Saves what a join brought (creds and answer from sp_join_credentials())
 * under cfg->state_dir, the certificate last: its presence says the set is
 * complete. SP_E_IO when a file cannot be written. */
int sp_join_save(const sp_join_config *cfg, const sp_join_creds *creds, json_object *answer, sp_error **err);

#endif
