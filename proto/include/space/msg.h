/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Declarative message codecs: a message is a static table of fields, each
 * naming its JSON key, its kind, whether it is required, its bounds and
 * where it lives in a C struct. One decoder and one encoder serve every
 * table, so both ends of a method read and write the same fields.
 *
 * Decoding is strict and worded as the sp_json_* getters (json.h) word it:
 * a key the table does not name is "unknown field 'x'", a missing required
 * one "missing required field 'x'", a wrong type or a value out of bounds
 * names the field ("field 'x' must be an integer between 1 and 64"); a
 * nested message's errors are prefixed "field 'x': ", an array element's
 * "field 'x[i]'" (an integer map's entry is "field 'x.key'"). A JSON null counts as
 * absent. An absent optional field takes the field's default (def).
 *
 * A schema marked open (PR_SCHEMA_OPEN) ignores fields it does not name:
 * answers are open, so that a newer server may add a field without breaking
 * an older client; requests are closed.
 *
 * Arrays and integer maps are checked whole when decoded and kept as the
 * JSON value (borrowed): a PR_ARRAY's elements then decode with its sub
 * schema without failing, so a caller walks them with pr_msg_decode.
 *
 * Ownership: decoded strings and JSON values are borrowed from the object
 * that was decoded and live as long as it does; nothing is allocated, so a
 * decoded struct needs no freeing. Encoding copies: the result is a new
 * object independent of the struct.
 *
 * Pure: no I/O, no logging; any input is safe (fuzzed).
 */
#ifndef SPACE_MSG_H
#define SPACE_MSG_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

typedef enum pr_kind {
        PR_STRING, /* const char *, NULL when absent; at most max bytes */
        PR_INT, /* int64_t, min to max; def when absent */
        PR_BOOL, /* bool; def (0 or 1) when absent */
        PR_STRING_MAP, /* json_object * of strings: at most max entries, keys up to key_max bytes, values up to
                          value_max bytes; NULL when absent */
        PR_OBJECT, /* a nested message (sub) held in the struct at offset */
        PR_JSON, /* json_object * of any JSON value, NULL when absent: checked by whoever it is passed on to */
        PR_ARRAY, /* json_object * array of at most items objects, each a message of sub; NULL when absent */
        PR_STRING_ARRAY, /* json_object * array of at most items strings of up to value_max bytes; NULL when absent */
        PR_INT_MAP, /* json_object * object of at most items entries, keys up to key_max bytes, integer values
                       min to max; NULL when absent */
} pr_kind;

typedef struct pr_schema pr_schema;

typedef struct pr_field {
        const char *name;
        pr_kind kind;
        bool required;
        int64_t min, max; /* PR_INT: the range; PR_STRING: max bytes; PR_STRING_MAP: max entries */
        int64_t def; /* PR_INT, PR_BOOL: the value when absent (and left out when encoding) */
        size_t key_max, value_max; /* PR_STRING_MAP, PR_INT_MAP (keys), PR_STRING_ARRAY (values) */
        size_t items; /* PR_ARRAY, PR_STRING_ARRAY, PR_INT_MAP: the most entries */
        size_t offset; /* of the member in the struct */
        const pr_schema *sub; /* PR_OBJECT, PR_ARRAY */
        bool flagged; /* PR_OBJECT: a bool member at flag_offset says whether the message is present */
        size_t flag_offset;
} pr_field;

struct pr_schema {
        const char *name; /* for messages about the schema itself */
        const pr_field *fields;
        size_t nfields;
        bool open; /* fields it does not name are ignored (answers), not refused (requests) */
};

/* Field-table helpers: F is the struct type, m the member. */
#define PR_F_STRING(F, json, m, req, maxlen) \
        { \
                .name = (json), .kind = PR_STRING, .required = (req), .max = (maxlen), .offset = offsetof(F, m) \
        }
#define PR_F_INT(F, json, m, req, lo, hi, dflt) \
        { \
                .name = (json), .kind = PR_INT, .required = (req), .min = (lo), .max = (hi), .def = (dflt), \
                .offset = offsetof(F, m) \
        }
#define PR_F_BOOL(F, json, m, dflt) \
        { \
                .name = (json), .kind = PR_BOOL, .def = (dflt), .offset = offsetof(F, m) \
        }
#define PR_F_STRING_MAP(F, json, m, items, keymax, valmax) \
        { \
                .name = (json), .kind = PR_STRING_MAP, .max = (items), .key_max = (keymax), .value_max = (valmax), \
                .offset = offsetof(F, m) \
        }
#define PR_F_OBJECT(F, json, m, schema) \
        { \
                .name = (json), .kind = PR_OBJECT, .offset = offsetof(F, m), .sub = (schema) \
        }
/* A required nested message: always encoded, even when its fields are all absent. */
#define PR_F_OBJECT_REQ(F, json, m, schema) \
        { \
                .name = (json), .kind = PR_OBJECT, .required = true, .offset = offsetof(F, m), .sub = (schema) \
        }
/* An optional nested message whose presence is the bool member has: decoding
 * sets it, encoding writes the message when it is set (whatever its fields). */
#define PR_F_OBJECT_OPT(F, json, m, has, schema) \
        { \
                .name = (json), .kind = PR_OBJECT, .offset = offsetof(F, m), .sub = (schema), .flagged = true, \
                .flag_offset = offsetof(F, has) \
        }
/* A required bool: always encoded, even at false. */
#define PR_F_BOOL_REQ(F, json, m) \
        { \
                .name = (json), .kind = PR_BOOL, .required = true, .offset = offsetof(F, m) \
        }
#define PR_F_JSON(F, json, m, req) \
        { \
                .name = (json), .kind = PR_JSON, .required = (req), .offset = offsetof(F, m) \
        }
#define PR_F_ARRAY(F, json, m, req, n, schema) \
        { \
                .name = (json), .kind = PR_ARRAY, .required = (req), .items = (n), .offset = offsetof(F, m), \
                .sub = (schema) \
        }
#define PR_F_STRING_ARRAY(F, json, m, req, n, valmax) \
        { \
                .name = (json), .kind = PR_STRING_ARRAY, .required = (req), .items = (n), .value_max = (valmax), \
                .offset = offsetof(F, m) \
        }
#define PR_F_INT_MAP(F, json, m, req, n, keymax, lo, hi) \
        { \
                .name = (json), .kind = PR_INT_MAP, .required = (req), .items = (n), .key_max = (keymax), .min = (lo), \
                .max = (hi), .offset = offsetof(F, m) \
        }
#define PR_SCHEMA_OPEN(id, fieldtab) \
        { \
                .name = (id), .fields = (fieldtab), .nfields = sizeof(fieldtab) / sizeof((fieldtab)[0]), .open = true \
        }
#define PR_SCHEMA(id, fieldtab) \
        { \
                .name = (id), .fields = (fieldtab), .nfields = sizeof(fieldtab) / sizeof((fieldtab)[0]) \
        }

/* Sets every field of out (the schema's struct) to its absent value. */
void pr_msg_init(const pr_schema *s, void *out);

/* Decodes obj into out (the schema's struct); out NULL only checks. On failure returns
 * -SP_E_INVALID with the error naming the field; out is then partly
 * written (and still needs no freeing). */
int pr_msg_decode(const pr_schema *s, json_object *obj, void *out, sp_error **err);

/* The message in as a new object. Absent fields (NULL, or an int or bool at
 * its default, or a nested message whose fields are all absent or whose
 * presence flag is unset) are left out; required ints, bools and nested
 * messages are always written. */
json_object *pr_msg_encode(const pr_schema *s, const void *in);

/* The field of s named name, or NULL. */
const pr_field *pr_msg_field(const pr_schema *s, const char *name);

#endif
