/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the worker-RPC codecs (proto/include/space/worker_rpc.h): the
 * request schemas, which the worker applies to every request it is sent, and
 * the answer schemas, which its callers apply to every answer. The input is
 * JSON, decoded with every schema. A refusal is SP_E_INVALID; a decoded
 * message re-encodes to one that decodes again and encodes the same, and an
 * answer's array elements decode with their own schema.
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
        for (size_t m = 0; m < pr_worker_nmethods + pr_worker_nanswers; m++) {
                const pr_schema *s = m < pr_worker_nmethods ? pr_worker_methods[m].request
                                                            : pr_worker_answers[m - pr_worker_nmethods].schema;
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
                /* An answer's arrays of messages: each element decodes with its sub-schema. */
                for (size_t i = 0; i < s->nfields; i++) {
                        const pr_field *f = &s->fields[i];
                        json_object *arr = f->kind == PR_ARRAY ? *(json_object **)(void *)(a.b + f->offset) : NULL;
                        for (size_t k = 0; arr && k < json_object_array_length(arr); k++)
                                if (pr_msg_decode(f->sub, json_object_array_get_idx(arr, k), b.b, NULL) < 0)
                                        abort();
                }
                json_object_put(again);
                json_object_put(enc);
        }
        json_object_put(o);
        return 0;
}
