/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the files of fleet/: the fleet object, the checks that
 * Join and Heartbeat apply to what workers send, and the join-token check
 * (jointoken.c) that Join runs inside its transaction.
 */
#ifndef CP_FLEET_INTERNAL_H
#define CP_FLEET_INTERNAL_H

#include <json-c/json.h>
#include <stdbool.h>

#include "fleet/fleet.h"
#include "space/controlplane_rpc.h"

/* Bounds on what a worker may send (proto/spec/controlplane-rpc.md): the
 * codecs' (space/controlplane_rpc.h), which check them when decoding. */
#define CP_FLEET_NAME_MAX PR_CP_NAME_MAX
#define CP_FLEET_ADDRESS_MAX PR_CP_ADDRESS_MAX
#define CP_FLEET_TOKEN_MAX 200
#define CP_FLEET_OBJECT_NAME_MAX PR_CP_OBJECT_NAME_MAX /* sandbox ids and template names as the worker knows them */

/* The NOTIFY channel the controllers LISTEN on; payloads "worker:<id>". */
#define CP_FLEET_CHANNEL "space_work"

struct cp_fleet {
        cp_db *db;
        const sp_pki_ca *ca;
        char *ca_pem;
        cp_fleet_config cfg;
};

/* [a-z0-9][a-z0-9.-]{0,62}: a worker's name, also its certificate's common name. */
bool cp__fleet_name_ok(const char *s);
/* "jail", "qemu" or "firecracker". */
bool cp__fleet_backend_ok(const char *s);
/* [A-Za-z0-9._-], 1..CP_FLEET_OBJECT_NAME_MAX bytes. */
bool cp__fleet_object_name_ok(const char *s);
/* True (with *err SP_E_PERMISSION) when the worker `name`'s certificate of
 * serial `presented` is not the one its last join got (`current`, NULL when
 * none is recorded): a later join under the name superseded it. */
bool cp__fleet_cert_superseded(const char *name, const char *current, const char *presented, sp_error **err);
/* What the codec cannot check of decoded labels (a string map within the
 * bounds, or NULL): keys of [A-Za-z0-9._/-], values of printable ASCII. */
int cp__fleet_check_labels(json_object *labels, sp_error **err);

/* Checks a presented join token against join_tokens and consumes one use, in
 * the caller's open transaction. Every failure (malformed, unknown, wrong
 * secret, expired, revoked, used up) is the same SP_E_UNAUTHENTICATED error;
 * a good token made for another role than `role` is SP_E_PERMISSION; database
 * trouble is its own code. ret_id receives the token's id. */
int cp__jointoken_consume(cp_db *db, const char *token, const char *role, char ret_id[static SP_ID_MAX],
                          sp_error **err);

/* Join with "role":"dataplane" (dataplane.c): *ret is the new answer. */
int cp__fleet_join_dataplane(cp_fleet *f, json_object *req, json_object **ret, sp_error **err);

/* The RPC handlers. */
void cp__fleet_join(sp_rpc_call *call, json_object *req, void *userdata);
void cp__fleet_heartbeat(sp_rpc_call *call, json_object *req, void *userdata);
void cp__fleet_token_keys(sp_rpc_call *call, json_object *req, void *userdata);
/* DrainSelf (role worker): the worker's own drain, its undoing, its progress. */
void cp__fleet_drain_self(sp_rpc_call *call, json_object *req, void *userdata);
/* RevokedKeys (roles dataplane, worker): the API keys revoked recently. */
void cp__fleet_revoked_keys(sp_rpc_call *call, json_object *req, void *userdata);
/* ResolveSandbox (role dataplane): a sandbox's tenant, state, ingress mode
 * and worker address, for the data plane's ingress. */
void cp__fleet_resolve_sandbox(sp_rpc_call *call, json_object *req, void *userdata);

#endif
