/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker fleet's side of the control plane: the cluster CA, bootstrap
 * join tokens, and the RPC methods workers and data planes call
 * (proto/spec/controlplane-rpc.md):
 *   Join      (no client certificate; the bootstrap token authenticates):
 *             signs the worker's CSR with the cluster CA and records the
 *             worker; with "role":"dataplane", signs a data plane's CSR and
 *             answers the attachment-token public keys too;
 *   Heartbeat (role worker; the certificate's name is the worker's name):
 *             records capacity and observed state, marks it reachable again;
 *   TokenKeys (roles worker, dataplane): the attachment-token public keys
 *             (store/tokenkeys.h), created first if there are none;
 *   RevokedKeys (roles worker, dataplane): API keys revoked, templates deleted;
 *   ResolveSandbox (role dataplane): a sandbox's tenant, state, ingress mode
 *             and worker, for ingress.
 *
 * Threading: everything runs on the caller's loop/thread; db is used with
 * blocking calls and must not be shared with another thread.
 */
#ifndef CP_FLEET_H
#define CP_FLEET_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"
#include "space/id.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/tls.h"
#include "store/db.h"

/* Loads the cluster CA from the database, creating it first if no replica has
 * yet (two replicas starting together end with the same CA: the insert is
 * ON CONFLICT DO NOTHING and every replica loads the row that won). *ret is
 * new. Errors: the database's, SP_E_INVALID if the stored CA does not load. */
int cp_fleet_cluster_ca(cp_db *db, sp_pki_ca **ret, sp_error **err);

/* Creates a join token for `role` ("worker" or "dataplane"; NULL: either, as
 * tokens made before roles were) valid for ttl_s seconds (1 s to 366 days)
 * and `uses` joins (0: unlimited until expiry; at most 1000000). description: at most
 * 256 printable bytes, may be NULL. *ret_token (malloc'd, "spj_<id>_<secret>")
 * is the only copy; the database keeps a SHA-256 of it. SP_E_INVALID for
 * values out of range. */
int cp_jointoken_create(cp_db *db, const char *role, const char *description, int64_t ttl_s, int64_t uses,
                        char **ret_token, char ret_id[static SP_ID_MAX], sp_error **err);
/* Revokes a token; SP_E_NOT_FOUND if unknown or already revoked. */
int cp_jointoken_revoke(cp_db *db, const char *id, sp_error **err);
/* Deletes a token, whatever its state (an active one can no longer be used,
 * like a revoked one); its audit records stay. SP_E_NOT_FOUND if unknown. */
int cp_jointoken_delete(cp_db *db, const char *id, sp_error **err);
/* Every token as a new array of {"id","description","uses_left":N|null,
 * "role":"worker"|"dataplane"|"any",
 * "state":"active"|"expired"|"used"|"revoked","expires_at","created_at",
 * "revoked_at":RFC 3339|null}, oldest first; never the secret. */
int cp_jointoken_list(cp_db *db, json_object **ret, sp_error **err);

/* The TLS contexts of a control-plane replica named `name`, both with a new
 * controlplane certificate issued from ca for `days` naming `sans` (DNS names
 * and IP addresses, NULL-terminated; may be NULL): *ret_server for its
 * internal RPC server (ALPN h2; clients of every role, and clients without a
 * certificate, which may call Join only — pair it with cp_fleet_identity) and
 * *ret_client for calling workers (the server must be a worker). Either
 * output may be NULL. On failure nothing is returned. */
int cp_fleet_tls(const sp_pki_ca *ca, const char *name, const char *const *sans, int days, SSL_CTX **ret_server,
                 SSL_CTX **ret_client, sp_error **err);

/* The identity hook (sp_rpc_identity_fn) of the control plane's RPC server:
 * a peer with a verified certificate gets its role and name, a peer without
 * one gets role 0 and no name. userdata is unused. */
int cp_fleet_identity(SSL *ssl, void *userdata, unsigned *ret_role, char **ret_name, sp_error **err);

/* The control plane's check of a worker it dials (sp_rpc_pool_set_verify;
 * userdata: a cp_db *): the certificate that answers must name the worker
 * whose id is key and be that worker's latest (its serial the one its last
 * join got), so that whoever answers at a worker's address with another
 * worker's certificate — a node that joined under another name, or one whose
 * name was taken over since — is not sent that worker's sandboxes or their
 * secrets. SP_E_PERMISSION when it is not; the database's error when the row
 * cannot be read. */
int cp_fleet_verify_worker(SSL *ssl, const char *key, void *userdata, sp_error **err);

/* The pool key of a worker: "<id>/<cert serial>", so that a join under its
 * name (a new serial) makes a new, checked connection rather than reusing one
 * made to the old certificate. -1 (and the id alone) when the row cannot be
 * read. cp_fleet_verify_worker takes either form. */
#define CP_FLEET_WORKER_KEY_MAX (SP_ID_MAX + 48)
int cp_fleet_worker_key(cp_db *db, const char *worker_id, char out[static CP_FLEET_WORKER_KEY_MAX]);
/* The same from the row's cert_serial read already (NULL or "" when it has none). */
void cp_fleet_worker_key_of(const char *worker_id, const char *cert_serial, char out[static CP_FLEET_WORKER_KEY_MAX]);

/* "host:port" the control plane can dial: a DNS name or IPv4 literal, or an
 * [IPv6] literal, and a port 1..65535; not a wildcard address. */
bool cp_fleet_address_ok(const char *s);

/* Workers with an RPC client at once, in each pool of them (space/rpc_pool.h). */
#define CP_FLEET_MAX_WORKER_CLIENTS 1024

typedef struct cp_fleet cp_fleet;

typedef struct cp_fleet_config {
        int64_t cert_days; /* validity of worker certificates [365] */
        int64_t heartbeat_ms; /* interval told to workers [2000] */
        int64_t operation_deadline_s; /* of the operation a wake on ingress records [600] */
        /* The cluster's default quotas (cp_quota_defaults_json(), borrowed: it
         * outlives the fleet): a wake on ingress that would take the tenant
         * past one does not happen. NULL: tenants' own quotas only. */
        const char *quota_defaults;
} cp_fleet_config;

/* A fleet over db and ca (both borrowed, must outlive it). cfg may be NULL;
 * its zero fields take the defaults. SP_E_INVALID for values out of range
 * (cert_days 1..SP_PKI_MAX_DAYS, heartbeat_ms 100..600000). */
cp_fleet *cp_fleet_new(cp_db *db, const sp_pki_ca *ca, const cp_fleet_config *cfg, sp_error **err);
/* Frees the fleet; accepts NULL; returns NULL. Unregister first (free the server). */
cp_fleet *cp_fleet_free(cp_fleet *f);

/* Registers Join, Heartbeat, TokenKeys, RevokedKeys and ResolveSandbox on
 * srv (the control plane's internal RPC server), with f as their userdata:
 * f must outlive srv. */
int cp_fleet_register(cp_fleet *f, sp_rpc_server *srv, sp_error **err);

#endif
