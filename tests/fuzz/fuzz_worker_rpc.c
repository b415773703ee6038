/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the worker-RPC request codecs (proto/include/space/worker_rpc.h),
 * which the worker applies to every request it is sent. The input is JSON,
 * decoded with every method's request schema. A refusal is SP_E_INVALID; a
 * decoded request re-encodes to one that decodes again and encodes the same.
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "space/json.h"
#include "space/msg.h"
#include "space/worker_rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_object *o = NULL;
        if (sp_json_parse((const char *)data, size, &o, NULL) < 0)
                return 0;
        for (size_t m = 0; m < pr_worker_nmethods; m++) {
                const pr_schema *s = pr_worker_methods[m].request;
                struct {
                        alignas(max_align_t) unsigned char b[1024];
                } a, b;
                sp_error *e = NULL;
                if (pr_msg_decode(s, o, a.b, &e) < 0) {
                        if (!e || e->code != SP_E_INVALID)
                                abort();
                        sp_error_free(e);
                        continue;
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
        json_object_put(o);
        return 0;
}
