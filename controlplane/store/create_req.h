/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CreateSandbox request (proto/spec/worker-rpc.md) for a recorded
 * sandbox: its template, resources and environment from its spec
 * (api/sandboxes.c), its whole egress profile, and its secrets with their
 * values as the profile grants them now (store/secrets.h), warm allowed.
 * Shared by the controller's create and the API's one-hop create, so that a
 * worker gets the same request whichever sends it. Blocking; not
 * thread-safe (the cp_db is not).
 */
#ifndef CP_STORE_CREATE_REQ_H
#define CP_STORE_CREATE_REQ_H

#include <json-c/json.h>
#include <stdint.h>

#include "space/error.h"
#include "store/db.h"
#include "store/keyring.h"

/* The request for sandbox sbx_id into *ret (new reference; it holds secrets'
 * values: never log it) and the egress generation it carries into
 * *ret_egress_generation. SP_E_NOT_FOUND for a missing sandbox; the store's
 * and the secrets' errors otherwise. Nothing is set on failure. */
int cp_sandbox_create_request(cp_db *db, cp_keyring *k, const char *sbx_id, json_object **ret,
                              int64_t *ret_egress_generation, sp_error **err);

#endif
