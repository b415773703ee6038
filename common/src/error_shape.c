/* SPDX-License-Identifier: Apache-2.0 */
/* The error shape's encoder and decoder (see space/error_shape.h). */
#include "space/error_shape.h"

#include <stdlib.h>
#include <string.h>

#include "space/json.h"

int sp_error_shape_encode(sp_buf *out, sp_errc code, const char *message, sp_error **err)
{
        _cleanup_json_ json_object *root = json_object_new_object();
        json_object *inner = json_object_new_object();
        if (!root || !inner) {
                json_object_put(inner);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        json_object_object_add(root, "error", inner);
        json_object_object_add(inner, "code", json_object_new_string(sp_errc_name(code)));
        json_object_object_add(inner, "message", json_object_new_string(message ? message : ""));
        return sp_buf_append_str(out, sp_json_str(root), err);
}

int sp_error_shape_get(json_object *root, sp_errc *ret_code, const char **ret_message, sp_error **err)
{
        json_object *inner = NULL;
        const char *code = NULL, *message = NULL;
        if (sp_json_get_object(root, "error", true, &inner, err) < 0 ||
            sp_json_get_string(inner, "code", true, SP_ERROR_SHAPE_MAX_CODE, &code, err) < 0 ||
            sp_json_get_string(inner, "message", true, SP_ERROR_SHAPE_MAX_MESSAGE, &message, err) < 0)
                return -SP_E_INVALID;
        sp_errc c = sp_errc_from_name(code);
        *ret_code = c == SP_E__MAX ? SP_E_INTERNAL : c;
        *ret_message = message;
        return 0;
}

int sp_error_shape_decode(const char *body, size_t len, sp_errc *ret_code, char **ret_message, sp_error **err)
{
        _cleanup_json_ json_object *root = NULL;
        sp_errc code;
        const char *message;
        if (sp_json_parse(body, len, &root, err) < 0 || sp_error_shape_get(root, &code, &message, err) < 0)
                return sp_error_wrap(err, "error body");
        char *m = strdup(message);
        if (!m)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *ret_code = code;
        *ret_message = m;
        return 0;
}

int sp_error_from_answer(const void *body, size_t len, int http_status, sp_error **err)
{
        _cleanup_json_ json_object *root = NULL;
        sp_errc code;
        const char *message;
        if (len > 0 && sp_json_parse(body, len, &root, NULL) == 0 &&
            sp_error_shape_get(root, &code, &message, NULL) == 0)
                return sp_error_set(err, code, "%s", message);
        return sp_error_set(err, sp_errc_from_http_status(http_status), "HTTP status %d", http_status);
}
