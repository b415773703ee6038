/* SPDX-License-Identifier: Apache-2.0 */
/* Declarative message codecs (see msg.h). */
#include <string.h>

#include "space/json.h"
#include "space/msg.h"

#define AT(p, f, type) ((type *)(void *)((char *)(p) + (f)->offset))
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
                        *AT(out, f, json_object *) = NULL;
                        break;
                case PR_OBJECT:
                        pr_msg_init(f->sub, AT(out, f, char));
                        break;
                }
        }
}

static int decode_field(const pr_field *f, json_object *obj, void *out, sp_error **err)
{
        switch (f->kind) {
        case PR_STRING:
                return sp_json_get_string(obj, f->name, f->required, (size_t)f->max, AT(out, f, const char *), err);
        case PR_INT:
                return sp_json_get_int(obj, f->name, f->required, f->min, f->max, AT(out, f, int64_t), err);
        case PR_BOOL:
                return sp_json_get_bool(obj, f->name, f->required, AT(out, f, bool), err);
        case PR_STRING_MAP:
                return sp_json_get_string_map(obj, f->name, f->required, (size_t)f->max, f->key_max, f->value_max,
                                              AT(out, f, json_object *), err);
        case PR_JSON: {
                json_object *v = NULL;
                if (!json_object_object_get_ex(obj, f->name, &v) || !v) {
                        if (f->required)
                                return sp_error_set(err, SP_E_INVALID, "missing required field '%s'", f->name);
                        return 0;
                }
                *AT(out, f, json_object *) = v;
                return 0;
        }
        case PR_OBJECT: {
                json_object *sub = NULL;
                if (sp_json_get_object(obj, f->name, f->required, &sub, err) < 0)
                        return -SP_E_INVALID;
                if (sub && pr_msg_decode(f->sub, sub, AT(out, f, char), err) < 0)
                        return sp_error_wrap(err, "field '%s'", f->name);
                return 0;
        }
        }
        return sp_error_set(err, SP_E_INTERNAL, "field '%s' of an unknown kind", f->name);
}

int pr_msg_decode(const pr_schema *s, json_object *obj, void *out, sp_error **err)
{
        pr_msg_init(s, out);
        if (!obj || !json_object_is_type(obj, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "expected a JSON object");
        json_object_object_foreach (obj, key, val) {
                (void)val;
                if (!pr_msg_field(s, key))
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
                        if (*CAT(in, f, json_object *))
                                return false;
                        break;
                case PR_OBJECT:
                        if (!all_absent(f->sub, CAT(in, f, char)))
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
                case PR_JSON: {
                        json_object *j = *CAT(in, f, json_object *);
                        if (j)
                                v = json_object_deep_copy(j, &v, NULL) == 0 ? v : NULL;
                        break;
                }
                case PR_OBJECT:
                        if (f->required || !all_absent(f->sub, CAT(in, f, char)))
                                v = pr_msg_encode(f->sub, CAT(in, f, char));
                        break;
                }
                if (v)
                        json_object_object_add(o, f->name, v);
        }
        return o;
}
