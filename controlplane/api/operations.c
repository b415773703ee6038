/* SPDX-License-Identifier: Apache-2.0 */
/* GET /v1/operations/{id}, with ?wait=SECONDS long-polling. */
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

void cp__h_operation_get(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        int64_t wait_ms = 0;
        if (cp_req_wait(sp_http_request_query(c->req, "wait"), &wait_ms, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        char msg[128];
        snprintf(msg, sizeof(msg), "operation %.64s not found", id);
        const char *params[] = {id, c->who.tenant_id};
        _cleanup_json_ json_object *op = NULL;
        if (cp__query_json(c->api, "SELECT api_operation(o) FROM operations o WHERE o.id = $1 AND o.tenant_id = $2", 2,
                           params, msg, &op, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__operation_ingress_urls(c->api, op);
        json_object *st = NULL;
        const char *state = json_object_object_get_ex(op, "state", &st) ? json_object_get_string(st) : "";
        bool done = strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0;
        /* A tenant at its share of long-polls gets the operation as it is now. */
        if (done || wait_ms == 0 || cp__wait_operation(c, id, sp_now_mono_us() + wait_ms * 1000) < 0)
                cp__reply(c, 200, op);
}
