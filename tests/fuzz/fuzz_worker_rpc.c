/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the worker-RPC codecs (proto/include/space/worker_rpc.h): the
 * request schemas, which the worker applies to every request it is sent, and
 * the answer schemas, which its callers apply to every answer. The input is
 * JSON, decoded with every schema. A refusal is SP_E_INVALID; a decoded
 * message re-encodes to one that decodes again and encodes the same, and an
 * answer's array elements decode with their own schema. ImportSandbox's
 * check of its `from` runs on every request its schema takes.
 */
#include <stdint.h>

#include "fuzz_msg.h"

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
                fuzz_msg_one(s, o);
        }
        /* ImportSandbox's rule beyond its schema, on what the schema took. */
        pr_wk_import_sandbox q;
        if (pr_msg_decode(&pr_wk_import_sandbox_schema, o, &q, NULL) == 0)
                (void)pr_wk_import_sandbox_check(&q, NULL);
        json_object_put(o);
        return 0;
}
