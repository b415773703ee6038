/* SPDX-License-Identifier: Apache-2.0 */
/* Declarative message codecs (see msg.h). */
#include <string.h>

#include "space/json.h"
#include "space/msg.h"

#define AT(p, f, type) ((type *)(void *)((char *)(p) + (f)->offset))
#define FLAG(p, f) ((bool *)(void *)((char *)(p) + (f)->flag_offset))
#define CFLAG(p, f) ((bool const *)(const void *)((const char *)(p) + (f)->flag_offset))
#define CAT(p, f, type) ((type const *)(const void *)((const char *)(p) + (f)->offset))

const pr_field *pr_msg_field(const pr_schema *s, const char *name)
{
        for (size_t i = 0; i < s->nfields; i++)
                if (strcmp(s->fields[i].name, name) == 0)
                        return &s->fields[i];
        return NULL;
}

void pr_msg_init(const pr_schema *s, void *out)
{
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                switch (f->kind) {
                case PR_STRING:
                        *AT(out, f, const char *) = NULL;
                        break;
                case PR_INT:
                        *AT(out, f, int64_t) = f->def;
                        break;
                case PR_BOOL:
                        *AT(out, f, bool) = f->def != 0;
                        break;
                case PR_STRING_MAP:
                case PR_JSON:
                case PR_ARRAY:
                case PR_STRING_ARRAY:
                case PR_INT_MAP:
                        *AT(out, f, json_object *) = NULL;
                        break;
                case PR_OBJECT:
                        pr_msg_init(f->sub, AT(out, f, char));
                        if (f->flagged)
                                *FLAG(out, f) = false;
                        break;
                }
        }
}

/* The elements of the array a (field f) each a message of f->sub. */
static int check_array(const pr_field *f, json_object *a, sp_error **err)
{
        size_t n = json_object_array_length(a);
        for (size_t i = 0; i < n; i++) {
                if (pr_msg_decode(f->sub, json_object_array_get_idx(a, i), NULL, err) < 0)
                        return sp_error_wrap(err, "field '%s[%zu]'", f->name, i);
        }
        return 0;
}

static int check_string_array(const pr_field *f, json_object *a, sp_error **err)
{
        size_t n = json_object_array_length(a);
        for (size_t i = 0; i < n; i++) {
                json_object *el = json_object_array_get_idx(a, i);
                if (!el || !json_object_is_type(el, json_type_string))
                        return sp_error_set(err, SP_E_INVALID, "field '%s[%zu]' must be a string", f->name, i);
                size_t len = (size_t)json_object_get_string_len(el);
                if (len > f->value_max)
                        return sp_error_set(err, SP_E_INVALID, "field '%s[%zu]' is longer than %zu bytes", f->name, i,
                                            f->value_max);
        }
        return 0;
}

static int check_int_map(const pr_field *f, json_object *map, sp_error **err)
{
        if ((size_t)json_object_object_length(map) > f->items)
                return sp_error_set(err, SP_E_INVALID, "field '%s' has more than %zu entries", f->name, f->items);
        json_object_object_foreach (map, key, val) {
                size_t kl = strlen(key);
                if (kl == 0 || kl > f->key_max)
                        return sp_error_set(err, SP_E_INVALID, "field '%s' has a key of %zu bytes (1 to %zu allowed)",
                                            f->name, kl, f->key_max);
                if (!val || !json_object_is_type(val, json_type_int) || json_object_get_int64(val) < f->min ||
                    json_object_get_int64(val) > f->max)
                        return sp_error_set(err, SP_E_INVALID,
                                            "field '%s.%.100s' must be an integer between %lld and %lld", f->name, key,
                                            (long long)f->min, (long long)f->max);
        }
        return 0;
}

static int decode_field(const pr_field *f, json_object *obj, void *out, sp_error **err)
{
        int r = -SP_E_INVALID;
        switch (f->kind) {
        case PR_STRING: {
                const char *v = NULL;
                r = sp_json_get_string(obj, f->name, f->required, (size_t)f->max, &v, err);
                if (r == 0 && out && v)
                        *AT(out, f, const char *) = v;
                return r;
        }
        case PR_INT: {
                int64_t v = f->def;
                r = sp_json_get_int(obj, f->name, f->required, f->min, f->max, &v, err);
                if (r == 0 && out)
                        *AT(out, f, int64_t) = v;
                return r;
        }
        case PR_BOOL: {
                bool v = f->def != 0;
                r = sp_json_get_bool(obj, f->name, f->required, &v, err);
                if (r == 0 && out)
                        *AT(out, f, bool) = v;
                return r;
        }
        case PR_STRING_MAP: {
                json_object *v = NULL;
                r = sp_json_get_string_map(obj, f->name, f->required, (size_t)f->max, f->key_max, f->value_max, &v,
                                           err);
                if (r == 0 && out)
                        *AT(out, f, json_object *) = v;
                return r;
        }
        case PR_JSON: {
                json_object *v = NULL;
                if (!json_object_object_get_ex(obj, f->name, &v) || !v) {
                        if (f->required)
                                return sp_error_set(err, SP_E_INVALID, "missing required field '%s'", f->name);
                        return 0;
                }
                if (out)
                        *AT(out, f, json_object *) = v;
                return 0;
        }
        case PR_ARRAY:
        case PR_STRING_ARRAY: {
                json_object *a = NULL;
                if (sp_json_get_array(obj, f->name, f->required, f->items, &a, err) < 0)
                        return -SP_E_INVALID;
                if (a && (f->kind == PR_ARRAY ? check_array(f, a, err) : check_string_array(f, a, err)) < 0)
                        return -SP_E_INVALID;
                if (out)
                        *AT(out, f, json_object *) = a;
                return 0;
        }
        case PR_INT_MAP: {
                json_object *m = NULL;
                if (sp_json_get_object(obj, f->name, f->required, &m, err) < 0)
                        return -SP_E_INVALID;
                if (m && check_int_map(f, m, err) < 0)
                        return -SP_E_INVALID;
                if (out)
                        *AT(out, f, json_object *) = m;
                return 0;
        }
        case PR_OBJECT: {
                json_object *sub = NULL;
                if (sp_json_get_object(obj, f->name, f->required, &sub, err) < 0)
                        return -SP_E_INVALID;
                if (sub && pr_msg_decode(f->sub, sub, out ? AT(out, f, char) : NULL, err) < 0)
                        return sp_error_wrap(err, "field '%s'", f->name);
                if (sub && out && f->flagged)
                        *FLAG(out, f) = true;
                return 0;
        }
        }
        return sp_error_set(err, SP_E_INTERNAL, "field '%s' of an unknown kind", f->name);
}

int pr_msg_decode(const pr_schema *s, json_object *obj, void *out, sp_error **err)
{
        if (out)
                pr_msg_init(s, out);
        if (!obj || !json_object_is_type(obj, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "expected a JSON object");
        json_object_object_foreach (obj, key, val) {
                (void)val;
                if (!s->open && !pr_msg_field(s, key))
                        return sp_error_set(err, SP_E_INVALID, "unknown field '%.100s'", key);
        }
        for (size_t i = 0; i < s->nfields; i++)
                if (decode_field(&s->fields[i], obj, out, err) < 0)
                        return -SP_E_INVALID;
        return 0;
}

/* True if every field of the message in is absent. */
static bool all_absent(const pr_schema *s, const void *in)
{
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                switch (f->kind) {
                case PR_STRING:
                        if (*CAT(in, f, const char *))
                                return false;
                        break;
                case PR_INT:
                        if (*CAT(in, f, int64_t) != f->def)
                                return false;
                        break;
                case PR_BOOL:
                        if (*CAT(in, f, bool) != (f->def != 0))
                                return false;
                        break;
                case PR_STRING_MAP:
                case PR_JSON:
                case PR_ARRAY:
                case PR_STRING_ARRAY:
                case PR_INT_MAP:
                        if (*CAT(in, f, json_object *))
                                return false;
                        break;
                case PR_OBJECT:
                        if (f->flagged ? *CFLAG(in, f) : !all_absent(f->sub, CAT(in, f, char)))
                                return false;
                        break;
                }
        }
        return true;
}

json_object *pr_msg_encode(const pr_schema *s, const void *in)
{
        json_object *o = json_object_new_object();
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                json_object *v = NULL;
                switch (f->kind) {
                case PR_STRING: {
                        const char *str = *CAT(in, f, const char *);
                        if (str)
                                v = json_object_new_string(str);
                        break;
                }
                case PR_INT: {
                        int64_t n = *CAT(in, f, int64_t);
                        if (f->required || n != f->def)
                                v = json_object_new_int64(n);
                        break;
                }
                case PR_BOOL: {
                        bool b = *CAT(in, f, bool);
                        if (f->required || b != (f->def != 0))
                                v = json_object_new_boolean(b);
                        break;
                }
                case PR_STRING_MAP:
                case PR_JSON:
                case PR_ARRAY:
                case PR_STRING_ARRAY:
                case PR_INT_MAP: {
                        json_object *j = *CAT(in, f, json_object *);
                        if (j)
                                v = json_object_deep_copy(j, &v, NULL) == 0 ? v : NULL;
                        break;
                }
                case PR_OBJECT:
                        if (f->required || (f->flagged ? *CFLAG(in, f) : !all_absent(f->sub, CAT(in, f, char))))
                                v = pr_msg_encode(f->sub, CAT(in, f, char));
                        break;
                }
                if (v)
                        json_object_object_add(o, f->name, v);
        }
        return o;
}
