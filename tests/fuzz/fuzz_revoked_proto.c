/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the RevokedKeys codec (proto/include/space/revoked_proto.h),
 * which a data plane applies to what the control plane answers. The input
 * is JSON, decoded as an answer and as a request. A decoded answer holds
 * well-formed ids within their bounds and re-encodes to an answer that
 * decodes to the same keys and templates; a refusal leaves the output untouched.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/json.h"
#include "space/revoked_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_object *o = NULL;
        if (sp_json_parse((const char *)data, size, &o, NULL) < 0)
                return 0;
        pr_revoked_keys r = {.n = 7};
        sp_error *e = NULL;
        if (pr_revoked_resp_decode(o, &r, &e) == 0) {
                if (r.n > PR_REVOKED_MAX || r.cursor_us < 0)
                        abort();
                for (size_t i = 0; i < r.n; i++)
                        if (!r.keys[i].id[0] || strlen(r.keys[i].id) > PR_REVOKED_ID_MAX || r.keys[i].revoked_at_us < 0)
                                abort();
                if (r.ntemplates > PR_REVOKED_MAX || (!r.has_templates && r.ntemplates))
                        abort();
                for (size_t i = 0; i < r.ntemplates; i++)
                        if (!r.templates[i].id[0] || strlen(r.templates[i].id) > PR_REVOKED_ID_MAX ||
                            r.templates[i].revoked_at_us < 0)
                                abort();
                json_object *again = pr_revoked_resp_encode(&r);
                pr_revoked_keys r2 = {0};
                if (pr_revoked_resp_decode(again, &r2, NULL) < 0 || r2.n != r.n || r2.cursor_us != r.cursor_us ||
                    r2.more != r.more || r2.has_templates != r.has_templates || r2.ntemplates != r.ntemplates)
                        abort();
                for (size_t i = 0; i < r.n; i++)
                        if (strcmp(r.keys[i].id, r2.keys[i].id) != 0 ||
                            r.keys[i].revoked_at_us != r2.keys[i].revoked_at_us)
                                abort();
                for (size_t i = 0; i < r.ntemplates; i++)
                        if (strcmp(r.templates[i].id, r2.templates[i].id) != 0 ||
                            r.templates[i].revoked_at_us != r2.templates[i].revoked_at_us)
                                abort();
                pr_revoked_keys_free(&r2);
                json_object_put(again);
                pr_revoked_keys_free(&r);
        } else if (r.n != 7 || !e || e->code != SP_E_INVALID) {
                abort();
        }
        sp_error_free(e);
        int64_t since = -1;
        bool templates = false;
        if (pr_revoked_req_decode(o, &since, &templates, NULL) == 0 && since < 0)
                abort();
        json_object_put(o);
        return 0;
}
