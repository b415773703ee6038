/* SPDX-License-Identifier: Apache-2.0 */
#include <json-c/json.h>
#include <string.h>

#include "space/json.h"
#include "space/proto_error.h"

int pr_error_encode(sp_buf *out, sp_errc code, const char *message, sp_error **err)
{
        _cleanup_json_ json_object *inner = json_object_new_object();
        json_object_object_add(inner, "code", json_object_new_string(sp_errc_name(code)));
        json_object_object_add(inner, "message", json_object_new_string(message ? message : ""));
        _cleanup_json_ json_object *root = json_object_new_object();
        json_object_object_add(root, "error", json_object_get(inner));
        return sp_buf_append_str(out, json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN), err);
}

sp_errc pr_errc_from_name(const char *name)
{
        for (int c = SP_E_INVALID; c < SP_E__MAX; c++)
                if (strcmp(sp_errc_name((sp_errc)c), name) == 0)
                        return (sp_errc)c;
        return SP_E__MAX;
}

int pr_error_decode(const char *body, size_t len, sp_errc *ret_code, char **ret_message, sp_error **err)
{
        _cleanup_json_ json_object *root = NULL;
        if (sp_json_parse(body, len, &root, err) < 0)
                return sp_error_wrap(err, "error body");
        json_object *inner = NULL;
        if (sp_json_get_object(root, "error", true, &inner, err) < 0)
                return sp_error_wrap(err, "error body");
        const char *code = NULL, *message = NULL;
        if (sp_json_get_string(inner, "code", true, 64, &code, err) < 0 ||
            sp_json_get_string(inner, "message", true, 64 * 1024, &message, err) < 0)
                return sp_error_wrap(err, "error body");
        char *m = strdup(message);
        if (!m)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        sp_errc c = pr_errc_from_name(code);
        *ret_code = c == SP_E__MAX ? SP_E_INTERNAL : c;
        *ret_message = m;
        return 0;
}
