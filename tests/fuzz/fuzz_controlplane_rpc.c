/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the control-plane RPC codecs (proto/include/space/controlplane_rpc.h),
 * which the control plane applies to every request a worker or a data plane
 * sends, and they to every answer. The input is JSON, decoded with every
 * method's request and answer schema and with the schemas of array elements.
 * A refusal is SP_E_INVALID; a decoded message re-encodes to one that
 * decodes again and encodes the same, and an array's elements decode.
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "space/controlplane_rpc.h"
#include "space/json.h"
#include "space/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
        alignas(max_align_t) unsigned char b[1024];
} buf;

static void one(const pr_schema *s, json_object *o)
{
        buf a, b;
        sp_error *e = NULL;
        if (pr_msg_decode(s, o, a.b, &e) < 0) {
                if (!e || e->code != SP_E_INVALID)
                        abort();
                sp_error_free(e);
                return;
        }
        /* a decoded array's elements decode with its schema */
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                json_object *arr = f->kind == PR_ARRAY ? *(json_object **)(void *)(a.b + f->offset) : NULL;
                for (size_t k = 0; arr && k < json_object_array_length(arr); k++) {
                        buf el;
                        if (pr_msg_decode(f->sub, json_object_array_get_idx(arr, k), el.b, NULL) < 0)
                                abort();
                }
        }
        json_object *enc = pr_msg_encode(s, a.b);
        if (pr_msg_decode(s, enc, b.b, NULL) < 0)
                abort();
        json_object *again = pr_msg_encode(s, b.b);
        if (!json_object_equal(enc, again))
                abort();
        json_object_put(again);
        json_object_put(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_object *o = NULL;
        if (sp_json_parse((const char *)data, size, &o, NULL) < 0)
                return 0;
        for (size_t m = 0; m < pr_controlplane_nmethods; m++) {
                one(pr_controlplane_methods[m].request, o);
                one(pr_controlplane_methods[m].response, o);
        }
        one(&pr_cp_resources_schema, o);
        one(&pr_cp_sandbox_schema, o);
        one(&pr_cp_revoked_entry_schema, o);
        json_object_put(o);
        return 0;
}
