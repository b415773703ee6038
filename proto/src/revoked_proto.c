/* SPDX-License-Identifier: Apache-2.0 */
/* RevokedKeys: the request and the answer (see revoked_proto.h), with the
 * schemas of controlplane_rpc.h. */
#include <stdlib.h>
#include <string.h>

#include "space/controlplane_rpc.h"
#include "space/json.h"
#include "space/revoked_proto.h"

json_object *pr_revoked_req_encode(int64_t since_us, bool templates)
{
        /* templates only when asked for (it is left out at its default):
         * an older control plane refuses the field. */
        pr_cp_revoked_req m = {.since_us = since_us < 0 ? 0 : since_us, .templates = templates};
        return pr_msg_encode(&pr_cp_revoked_req_schema, &m);
}

int pr_revoked_req_decode(json_object *req, int64_t *ret_since_us, bool *ret_templates, sp_error **err)
{
        pr_cp_revoked_req m;
        if (pr_msg_decode(&pr_cp_revoked_req_schema, req, &m, err) < 0)
                return -SP_E_INVALID;
        *ret_since_us = m.since_us;
        *ret_templates = m.templates;
        return 0;
}

static json_object *list_encode(const pr_revoked_key *v, size_t n)
{
        json_object *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
                pr_cp_revoked_entry e = {.id = v[i].id, .revoked_at_us = v[i].revoked_at_us};
                json_object_array_add(arr, pr_msg_encode(&pr_cp_revoked_entry_schema, &e));
        }
        return arr;
}

json_object *pr_revoked_resp_encode(const pr_revoked_keys *r)
{
        _cleanup_json_ json_object *keys = list_encode(r->keys, r->n);
        _cleanup_json_ json_object *templates = r->has_templates ? list_encode(r->templates, r->ntemplates) : NULL;
        pr_cp_revoked_resp m = {.keys = keys, .cursor_us = r->cursor_us, .more = r->more, .templates = templates};
        return pr_msg_encode(&pr_cp_revoked_resp_schema, &m);
}

static bool id_ok(const char *s)
{
        size_t n = strlen(s);
        return n > 0 && n <= PR_REVOKED_ID_MAX &&
               strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == n;
}

/* The entries of arr (keys or templates, decoded with the answer's schema)
 * into a new array (*ret NULL and *ret_n 0 when empty). */
static int list_decode(json_object *arr, const char *field, pr_revoked_key **ret, size_t *ret_n, sp_error **err)
{
        size_t n = json_object_array_length(arr);
        pr_revoked_key *v = NULL;
        if (n && !(v = calloc(n, sizeof(*v))))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                pr_cp_revoked_entry e;
                /* cannot fail: the answer's decoding checked every element */
                if (pr_msg_decode(&pr_cp_revoked_entry_schema, json_object_array_get_idx(arr, i), &e, err) < 0) {
                        free(v);
                        return sp_error_wrap(err, "field '%s[%zu]'", field, i);
                }
                if (!id_ok(e.id)) {
                        free(v);
                        return sp_error_set(err, SP_E_INVALID, "field '%s[%zu]': 'id' is not an id", field, i);
                }
                memcpy(v[i].id, e.id, strlen(e.id) + 1);
                v[i].revoked_at_us = e.revoked_at_us;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int pr_revoked_resp_decode(json_object *resp, pr_revoked_keys *ret, sp_error **err)
{
        pr_cp_revoked_resp m;
        pr_revoked_keys r = {0};
        if (pr_msg_decode(&pr_cp_revoked_resp_schema, resp, &m, err) < 0)
                return -SP_E_INVALID;
        r.cursor_us = m.cursor_us;
        r.more = m.more;
        if (list_decode(m.keys, "keys", &r.keys, &r.n, err) < 0)
                return -SP_E_INVALID;
        if (m.templates) {
                r.has_templates = true;
                if (list_decode(m.templates, "templates", &r.templates, &r.ntemplates, err) < 0) {
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
