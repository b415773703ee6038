/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's control protocol (docs/networking.md): JSON objects, one per
 * line, over a unix stream socket from the worker. The worker says which
 * sandbox has which address and profile; the gateway answers each request
 * and sends its audit records.
 *
 *   -> {"op":"set","seq":7,"address":"10.250.0.3","sandbox_id":"sbx_…","tenant_id":"ten_…","profile":{…},
 *       "secrets":[…],"ca_cert":"PEM","ca_key":"PEM"}
 *      (secrets: its credential bindings, policy/secret.h, with the sandbox's
 *      CA, tls/tls.h; the answer says how many have no value:
 *      {"op":"ok","seq":7,"secrets_missing":1})
 *   -> {"op":"del","seq":8,"address":"10.250.0.3"}
 *   -> {"op":"sync_begin","seq":1}  … sets …  {"op":"sync_end","seq":9}
 *      (after a reconnect: sandboxes not set in between are forgotten)
 *   -> {"op":"ping","seq":10}
 *   <- {"op":"ok","seq":7} | {"op":"error","seq":7,"error":"…"}
 *   <- {"op":"audit", …}   (gw.h: gw_audit)
 *
 * A profile is {"name":"none"}, {"name":"public"} or a whole profile
 * (policy/profile.h). Lines are at most GW_CTL_LINE_MAX bytes.
 */
#ifndef SPACE_GATEWAY_CTL_MSG_H
#define SPACE_GATEWAY_CTL_MSG_H

#include <json-c/json.h>
#include <stdint.h>

#include "space/error.h"
#include "space/msg.h"

#define GW_CTL_LINE_MAX (1 << 20)

typedef struct gw_ctl_req {
        const char *op;
        int64_t seq;
        const char *address;
        const char *sandbox_id;
        const char *tenant_id;
        json_object *profile;
        json_object *secrets;
        const char *ca_cert, *ca_key;
} gw_ctl_req;

extern const pr_schema gw_ctl_req_schema;

/* Checks op and the fields it needs (set: address, sandbox_id, profile, and
 * the CA with secrets; del: address), on top of the schema. */
int gw_ctl_req_decode(json_object *o, gw_ctl_req *ret, sp_error **err);

#endif
