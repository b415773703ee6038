/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the control-plane RPC codecs (proto/include/space/controlplane_rpc.h),
 * which the control plane applies to every request a worker or a data plane
 * sends, and they to every answer. The input is JSON, decoded with every
 * method's request and answer schema and with the schemas of array elements.
 * A refusal is SP_E_INVALID; a decoded message re-encodes to one that
 * decodes again and encodes the same, and an array's elements decode.
 */
#include <stdint.h>

#include "fuzz_msg.h"

#include "space/controlplane_rpc.h"
#include "space/json.h"
#include "space/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_object *o = NULL;
        if (sp_json_parse((const char *)data, size, &o, NULL) < 0)
                return 0;
        for (size_t m = 0; m < pr_controlplane_nmethods; m++) {
                fuzz_msg_one(pr_controlplane_methods[m].request, o);
                fuzz_msg_one(pr_controlplane_methods[m].response, o);
        }
        fuzz_msg_one(&pr_cp_resources_schema, o);
        fuzz_msg_one(&pr_cp_sandbox_schema, o);
        fuzz_msg_one(&pr_cp_revoked_entry_schema, o);
        json_object_put(o);
        return 0;
}
