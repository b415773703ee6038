/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: strict JSON parsing and the field getters. Whatever parses must
 * serialise and parse again; getters must never crash on any shape. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        json_object *o = NULL;
        sp_error *e = NULL;
        if (sp_json_parse((const char *)data, size, &o, &e) < 0) {
                if (!e || o)
                        abort();
                sp_error_free(e);
                return 0;
        }
        const char *text = sp_json_str(o);
        json_object *again = NULL;
        if (sp_json_parse(text, strlen(text), &again, NULL) < 0)
                abort();
        json_object_put(again);

        if (json_object_is_type(o, json_type_object)) {
                json_object_object_foreach (o, key, val) {
                        (void)val;
                        const char *s;
                        int64_t n;
                        bool b;
                        json_object *m;
                        char **v = NULL;
                        sp_error_free(e), e = NULL;
                        sp_json_get_string(o, key, true, 16, &s, &e);
                        sp_error_free(e), e = NULL;
                        sp_json_get_int(o, key, false, -5, 5, &n, &e);
                        sp_error_free(e), e = NULL;
                        sp_json_get_bool(o, key, true, &b, &e);
                        sp_error_free(e), e = NULL;
                        sp_json_get_string_map(o, key, true, 4, 8, 8, &m, &e);
                        sp_error_free(e), e = NULL;
                        if (sp_json_get_strv(o, key, true, 4, 8, &v, &e) == 0)
                                sp_strv_freep(&v);
                        sp_error_free(e), e = NULL;
                }
                static const char *const allowed[] = {"a", "b", NULL};
                sp_json_check_fields(o, allowed, &e);
                sp_error_free(e);
        }
        json_object_put(o);
        return 0;
}
