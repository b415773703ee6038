/* SPDX-License-Identifier: Apache-2.0 */
/* RevokedKeys: the request and the answer (see revoked_proto.h). */
#include <stdlib.h>
#include <string.h>

#include "space/json.h"
#include "space/revoked_proto.h"

json_object *pr_revoked_req_encode(int64_t since_us, bool templates)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "since_us", json_object_new_int64(since_us < 0 ? 0 : since_us));
        /* Only when asked for: an older control plane refuses the field. */
        if (templates)
                json_object_object_add(o, "templates", json_object_new_boolean(true));
        return o;
}

int pr_revoked_req_decode(json_object *req, int64_t *ret_since_us, bool *ret_templates, sp_error **err)
{
        static const char *const fields[] = {"since_us", "templates", NULL};
        int64_t since = 0;
        bool templates = false;
        if (!json_object_is_type(req, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "the request must be an object");
        if (sp_json_check_fields(req, fields, err) < 0 ||
            sp_json_get_int(req, "since_us", false, 0, INT64_MAX, &since, err) < 0 ||
            sp_json_get_bool(req, "templates", false, &templates, err) < 0)
                return -SP_E_INVALID;
        *ret_since_us = since;
        *ret_templates = templates;
        return 0;
}

static json_object *list_encode(const pr_revoked_key *v, size_t n)
{
        json_object *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
                json_object *k = json_object_new_object();
                json_object_object_add(k, "id", json_object_new_string(v[i].id));
                json_object_object_add(k, "revoked_at_us", json_object_new_int64(v[i].revoked_at_us));
                json_object_array_add(arr, k);
        }
        return arr;
}

json_object *pr_revoked_resp_encode(const pr_revoked_keys *r)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "keys", list_encode(r->keys, r->n));
        json_object_object_add(o, "cursor_us", json_object_new_int64(r->cursor_us));
        json_object_object_add(o, "more", json_object_new_boolean(r->more));
        if (r->has_templates)
                json_object_object_add(o, "templates", list_encode(r->templates, r->ntemplates));
        return o;
}

static bool id_ok(const char *s)
{
        size_t n = strlen(s);
        return n > 0 && n <= PR_REVOKED_ID_MAX &&
               strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == n;
}

/* Reads the list field (keys or templates) of an answer from arr into a new
 * array (*ret NULL and *ret_n 0 when empty). */
static int list_decode(json_object *arr, const char *field, pr_revoked_key **ret, size_t *ret_n, sp_error **err)
{
        static const char *const entry_fields[] = {"id", "revoked_at_us", NULL};
        size_t n = json_object_array_length(arr);
        pr_revoked_key *v = NULL;
        if (n && !(v = calloc(n, sizeof(*v))))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                json_object *k = json_object_array_get_idx(arr, i);
                const char *id = NULL;
                if (!json_object_is_type(k, json_type_object)) {
                        sp_error_set(err, SP_E_INVALID, "%s[%zu] must be an object", field, i);
                        goto fail;
                }
                if (sp_json_check_fields(k, entry_fields, err) < 0 ||
                    sp_json_get_string(k, "id", true, PR_REVOKED_ID_MAX, &id, err) < 0 ||
                    sp_json_get_int(k, "revoked_at_us", true, 0, INT64_MAX, &v[i].revoked_at_us, err) < 0) {
                        sp_error_wrap(err, "%s[%zu]", field, i);
                        goto fail;
                }
                if (!id_ok(id)) {
                        sp_error_set(err, SP_E_INVALID, "%s[%zu]: 'id' is not an id", field, i);
                        goto fail;
                }
                memcpy(v[i].id, id, strlen(id) + 1);
        }
        *ret = v;
        *ret_n = n;
        return 0;
fail:
        free(v);
        return -SP_E_INVALID;
}

int pr_revoked_resp_decode(json_object *resp, pr_revoked_keys *ret, sp_error **err)
{
        static const char *const fields[] = {"keys", "cursor_us", "more", "templates", NULL};
        json_object *arr = NULL, *tarr = NULL;
        pr_revoked_keys r = {0};
        if (!json_object_is_type(resp, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "the answer must be an object");
        if (sp_json_check_fields(resp, fields, err) < 0 ||
            sp_json_get_array(resp, "keys", true, PR_REVOKED_MAX, &arr, err) < 0 ||
            sp_json_get_array(resp, "templates", false, PR_REVOKED_MAX, &tarr, err) < 0 ||
            sp_json_get_int(resp, "cursor_us", true, 0, INT64_MAX, &r.cursor_us, err) < 0 ||
            sp_json_get_bool(resp, "more", true, &r.more, err) < 0)
                return -SP_E_INVALID;
        if (list_decode(arr, "keys", &r.keys, &r.n, err) < 0)
                return -SP_E_INVALID;
        if (tarr) {
                r.has_templates = true;
                if (list_decode(tarr, "templates", &r.templates, &r.ntemplates, err) < 0) {
                        free(r.keys);
                        return -SP_E_INVALID;
                }
        }
        *ret = r;
        return 0;
}

void pr_revoked_keys_free(pr_revoked_keys *r)
{
        free(r->keys);
        free(r->templates);
        memset(r, 0, sizeof(*r));
}
