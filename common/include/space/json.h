/* SPDX-License-Identifier: Apache-2.0 */
/*
 * JSON helpers over json-c.
 *
 * Parsing is strict (RFC 8259: no comments, no trailing garbage, no NaN),
 * depth-limited, and rejects strings with embedded NUL bytes. The getters
 * validate one field of an object and, on failure, return an SP_E_INVALID
 * error whose message names the field, e.g.
 *   "field 'timeout' must be an integer between 1 and 86400"
 * Absent optional fields leave *ret untouched and return 0; a JSON null counts
 * as absent. Returned strings and objects are borrowed from the parent object.
 */
#ifndef SPACE_JSON_H
#define SPACE_JSON_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

#define SP_JSON_MAX_DEPTH 32

static inline void sp_json_putp(json_object **o)
{
        if (*o)
                json_object_put(*o);
        *o = NULL;
}
#define _cleanup_json_ __attribute__((cleanup(sp_json_putp)))

/* Parses exactly len bytes into a new reference in *ret. Besides malformed
 * JSON (SP_E_INVALID "malformed JSON at byte N"), refuses an object key that
 * holds a NUL ("NUL character (\u0000) in a key in env") and a key repeated
 * in one object ("duplicate key \"x\" in metadata"), naming the path of
 * keys and [index]es down to it (cut at 160 bytes). Linear in len, plus the
 * sorting of each object's keys. */
int sp_json_parse(const char *s, size_t len, json_object **ret, sp_error **err);

/* Compact serialisation (borrowed from obj, valid until obj changes). */
const char *sp_json_str(json_object *obj);

/* The string member key of obj (borrowed), or NULL when obj is not an
 * object, has no such member, or it is not a string. For reading answers
 * leniently; the sp_json_get_* below check and say why. */
const char *sp_json_member_str(json_object *obj, const char *key);

int sp_json_get_string(json_object *obj, const char *field, bool required, size_t max_len, const char **ret,
                       sp_error **err);
int sp_json_get_int(json_object *obj, const char *field, bool required, int64_t min, int64_t max, int64_t *ret,
                    sp_error **err);
int sp_json_get_bool(json_object *obj, const char *field, bool required, bool *ret, sp_error **err);
int sp_json_get_object(json_object *obj, const char *field, bool required, json_object **ret, sp_error **err);
int sp_json_get_array(json_object *obj, const char *field, bool required, size_t max_items, json_object **ret,
                      sp_error **err);
/* An array of at most max_items strings of at most max_len bytes each; *ret is
 * a new NULL-terminated, malloc'd vector (free with sp_strv_freep). */
int sp_json_get_strv(json_object *obj, const char *field, bool required, size_t max_items, size_t max_len, char ***ret,
                     sp_error **err);
/* An object whose values are all strings (env, metadata, labels): at most
 * max_items entries, keys up to max_key bytes, values up to max_value bytes. */
int sp_json_get_string_map(json_object *obj, const char *field, bool required, size_t max_items, size_t max_key,
                           size_t max_value, json_object **ret, sp_error **err);
/* Rejects any key of obj not in the NULL-terminated allowed list:
 * "unknown field 'x'". */
int sp_json_check_fields(json_object *obj, const char *const *allowed, sp_error **err);

/* Whether the len bytes at s are well-formed UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF) — what PostgreSQL takes as text. */
bool sp_utf8_valid(const char *s, size_t len);

#endif
