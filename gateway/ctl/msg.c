/* SPDX-License-Identifier: Apache-2.0 */
/* The gateway's control messages (see msg.h). */
#include "ctl/msg.h"

#include <string.h>

#define R gw_ctl_req
static const pr_field req_fields[] = {
        PR_F_STRING(R, "op", op, true, 16),
        PR_F_INT(R, "seq", seq, false, 0, INT64_MAX, 0),
        PR_F_STRING(R, "address", address, false, 15),
        PR_F_STRING(R, "sandbox_id", sandbox_id, false, 64),
        PR_F_STRING(R, "tenant_id", tenant_id, false, 64),
        PR_F_JSON(R, "profile", profile, false),
        PR_F_JSON(R, "secrets", secrets, false),
        PR_F_STRING(R, "ca_cert", ca_cert, false, 16384),
        PR_F_STRING(R, "ca_key", ca_key, false, 16384),
};
#undef R
const pr_schema gw_ctl_req_schema = PR_SCHEMA("GatewayControl", req_fields);

int gw_ctl_req_decode(json_object *o, gw_ctl_req *ret, sp_error **err)
{
        if (pr_msg_decode(&gw_ctl_req_schema, o, ret, err) < 0)
                return -SP_E_INVALID;
        if (strcmp(ret->op, "set") == 0) {
                if (!ret->address || !ret->sandbox_id || !ret->profile)
                        return sp_error_set(err, SP_E_INVALID, "set needs address, sandbox_id and profile");
                bool has_secrets = ret->secrets && json_object_is_type(ret->secrets, json_type_array) &&
                                   json_object_array_length(ret->secrets) > 0;
                if (has_secrets && (!ret->ca_cert || !ret->ca_key))
                        return sp_error_set(err, SP_E_INVALID, "set with secrets needs ca_cert and ca_key");
        } else if (strcmp(ret->op, "del") == 0) {
                if (!ret->address)
                        return sp_error_set(err, SP_E_INVALID, "del needs address");
        } else if (strcmp(ret->op, "sync_begin") != 0 && strcmp(ret->op, "sync_end") != 0 &&
                   strcmp(ret->op, "ping") != 0) {
                return sp_error_set(err, SP_E_INVALID, "unknown op '%s'", ret->op);
        }
        return 0;
}
