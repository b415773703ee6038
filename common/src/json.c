/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"

#define PATH_MAX_LEN 160 /* of the field path named in messages; longer ones are cut */

/* json-c's strict mode still accepts single-quoted keys, "1." and raw control
 * characters in strings, keeps an object key only up to a NUL (\u0000) and
 * lets a repeated key replace the first; this scanner enforces RFC 8259 and
 * refuses those keys first, naming the field they are in. */
typedef struct {
        const char *s;
        size_t n, i;
        char path[PATH_MAX_LEN + 1]; /* the keys (and [index]es) down to the current value */
        sp_error *why; /* a refusal that is not a syntax error (set once) */
} scan;

static void ws(scan *c)
{
        while (c->i < c->n && strchr(" \t\r\n", c->s[c->i]) && c->s[c->i])
                c->i++;
}

static bool lit(scan *c, const char *w)
{
        size_t l = strlen(w);
        if (c->n - c->i < l || memcmp(c->s + c->i, w, l) != 0)
                return false;
        c->i += l;
        return true;
}

static bool digits1(scan *c)
{
        size_t start = c->i;
        while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
                c->i++;
        return c->i > start;
}

static bool number(scan *c)
{
        if (c->i < c->n && c->s[c->i] == '-')
                c->i++;
        if (c->i < c->n && c->s[c->i] == '0')
                c->i++;
        else if (!digits1(c))
                return false;
        if (c->i < c->n && c->s[c->i] == '.') {
                c->i++;
                if (!digits1(c))
                        return false;
        }
        if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
                c->i++;
                if (c->i < c->n && (c->s[c->i] == '+' || c->s[c->i] == '-'))
                        c->i++;
                if (!digits1(c))
                        return false;
        }
        return true;
}

static bool string(scan *c)
{
        if (c->i >= c->n || c->s[c->i] != '"')
                return false;
        c->i++;
        while (c->i < c->n) {
                unsigned char ch = (unsigned char)c->s[c->i++];
                if (ch == '"')
                        return true;
                if (ch < 0x20)
                        return false;
                if (ch == '\\') {
                        if (c->i >= c->n)
                                return false;
                        char e = c->s[c->i++];
                        if (e == 'u') {
                                for (int k = 0; k < 4; k++, c->i++)
                                        if (c->i >= c->n || !strchr("0123456789abcdefABCDEF", c->s[c->i]) ||
                                            !c->s[c->i])
                                                return false;
                        } else if (!strchr("\"\\/bfnrt", e) || !e) {
                                return false;
                        }
                }
        }
        return false;
}

static int hexval(char h)
{
        return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h - 'A' + 10;
}

static unsigned hex4(const char *p)
{
        return (unsigned)(hexval(p[0]) << 12 | hexval(p[1]) << 8 | hexval(p[2]) << 4 | hexval(p[3]));
}

/* Decodes the string token s[a..b) (quotes included, already scanned) into a
 * new C string, UTF-8 for \u escapes (lone surrogates encoded as they are, so
 * that equal tokens decode alike). Returns NULL when it holds a NUL, or on
 * allocation failure (*nul tells which). */
static char *decode_key(const char *s, size_t a, size_t b, bool *nul)
{
        *nul = false;
        char *out = malloc(b - a); /* never longer than the token */
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = a + 1; i + 1 < b;) {
                char ch = s[i++];
                if (ch != '\\') {
                        if (!ch) {
                                *nul = true;
                                free(out);
                                return NULL;
                        }
                        out[o++] = ch;
                        continue;
                }
                char e = s[i++];
                if (e != 'u') {
                        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
                        out[o++] = to[strchr(from, e) - from];
                        continue;
                }
                unsigned cp = hex4(s + i);
                i += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= b - 1 && s[i] == '\\' && s[i + 1] == 'u') {
                        unsigned lo = hex4(s + i + 2);
                        if (lo >= 0xDC00 && lo < 0xE000) {
                                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                                i += 6;
                        }
                }
                if (cp == 0) {
                        *nul = true;
                        free(out);
                        return NULL;
                }
                if (cp < 0x80) {
                        out[o++] = (char)cp;
                } else if (cp < 0x800) {
                        out[o++] = (char)(0xC0 | cp >> 6);
                        out[o++] = (char)(0x80 | (cp & 0x3F));
                } else if (cp < 0x10000) {
                        out[o++] = (char)(0xE0 | cp >> 12);
                        out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
                        out[o++] = (char)(0x80 | (cp & 0x3F));
                } else {
                        out[o++] = (char)(0xF0 | cp >> 18);
                        out[o++] = (char)(0x80 | (cp >> 12 & 0x3F));
                        out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
                        out[o++] = (char)(0x80 | (cp & 0x3F));
                }
        }
        out[o] = '\0';
        return out;
}

/* s for a message: printable ASCII kept, other bytes as \xNN, cut at 64. */
static void quote(const char *s, char out[static 280])
{
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;
        for (size_t i = 0; s[i]; i++) {
                if (i >= 64) {
                        memcpy(out + o, "...", 3);
                        o += 3;
                        break;
                }
                unsigned char ch = (unsigned char)s[i];
                if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
                        out[o++] = (char)ch;
                } else {
                        out[o++] = '\\';
                        out[o++] = 'x';
                        out[o++] = hex[ch >> 4];
                        out[o++] = hex[ch & 15];
                }
        }
        out[o] = '\0';
}

/* " in <path>" for messages, or "" at the top. */
static void where(const scan *c, char out[static PATH_MAX_LEN + 8])
{
        out[0] = '\0';
        if (c->path[0])
                snprintf(out, PATH_MAX_LEN + 8, " in %s", c->path);
}

/* Sets the refusal of a repeated key (once) and returns false. */
static bool refuse_duplicate(scan *c, const char *key)
{
        if (!c->why) {
                char q[280], w[PATH_MAX_LEN + 8];
                quote(key, q);
                where(c, w);
                sp_error_set(&c->why, SP_E_INVALID, "duplicate key \"%s\"%s", q, w);
        }
        return false;
}

/* Sets the refusal of a key holding a NUL (once) and returns false. */
static bool refuse_nul(scan *c)
{
        if (!c->why) {
                char w[PATH_MAX_LEN + 8];
                where(c, w);
                sp_error_set(&c->why, SP_E_INVALID, "NUL character (\\u0000) in a key%s", w);
        }
        return false;
}

/* Appends ".key", "key" or "[i]" to the path; returns the old length to restore. */
static size_t path_push(scan *c, const char *key, size_t index)
{
        size_t len = strlen(c->path);
        if (len >= PATH_MAX_LEN)
                return len;
        char part[300];
        if (key) {
                char q[280];
                quote(key, q);
                part[0] = '.';
                memcpy(part + 1, q, strlen(q) + 1);
        } else {
                snprintf(part, sizeof(part), "[%zu]", index);
        }
        const char *p = key && !len ? part + 1 : part;
        size_t n = strlen(p);
        if (n > PATH_MAX_LEN - len)
                n = PATH_MAX_LEN - len; /* cut: the start says where */
        memcpy(c->path + len, p, n);
        c->path[len + n] = '\0';
        return len;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static void keys_free(char **keys, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(keys[i]);
        free(keys);
}

/* Refuses an object whose keys repeat (sorted, so O(k log k) per object). */
static bool keys_unique(scan *c, char **keys, size_t n)
{
        if (n < 2)
                return true;
        qsort(keys, n, sizeof(*keys), cmp_str);
        for (size_t i = 1; i < n; i++)
                if (strcmp(keys[i - 1], keys[i]) == 0)
                        return refuse_duplicate(c, keys[i]);
        return true;
}

static bool value(scan *c, int depth);

static bool object(scan *c, int depth)
{
        c->i++; /* '{' */
        ws(c);
        if (c->i < c->n && c->s[c->i] == '}') {
                c->i++;
                return true;
        }
        char **keys = NULL;
        size_t nkeys = 0, cap = 0;
        bool ok = false;
        for (;;) {
                ws(c);
                size_t a = c->i;
                if (!string(c))
                        goto out;
                bool nul = false;
                char *k = decode_key(c->s, a, c->i, &nul);
                if (!k) {
                        if (nul)
                                refuse_nul(c);
                        else
                                sp_error_set(&c->why, SP_E_LIMIT, "out of memory");
                        goto out;
                }
                if (nkeys == cap) {
                        size_t ncap = cap ? cap * 2 : 8;
                        char **nk = realloc(keys, ncap * sizeof(*keys));
                        if (!nk) {
                                free(k);
                                sp_error_set(&c->why, SP_E_LIMIT, "out of memory");
                                goto out;
                        }
                        keys = nk;
                        cap = ncap;
                }
                keys[nkeys++] = k;
                ws(c);
                if (c->i >= c->n || c->s[c->i++] != ':')
                        goto out;
                size_t saved = path_push(c, k, 0);
                bool vok = value(c, depth + 1);
                c->path[saved] = '\0';
                if (!vok)
                        goto out;
                ws(c);
                if (c->i >= c->n)
                        goto out;
                if (c->s[c->i] == '}') {
                        c->i++;
                        ok = keys_unique(c, keys, nkeys);
                        goto out;
                }
                if (c->s[c->i++] != ',')
                        goto out;
        }
out:
        keys_free(keys, nkeys);
        return ok;
}

static bool value(scan *c, int depth)
{
        if (depth > SP_JSON_MAX_DEPTH)
                return false;
        ws(c);
        if (c->i >= c->n)
                return false;
        char ch = c->s[c->i];
        if (ch == '{')
                return object(c, depth);
        if (ch == '[') {
                c->i++;
                ws(c);
                if (c->i < c->n && c->s[c->i] == ']') {
                        c->i++;
                        return true;
                }
                for (size_t idx = 0;; idx++) {
                        size_t saved = path_push(c, NULL, idx);
                        bool vok = value(c, depth + 1);
                        c->path[saved] = '\0';
                        if (!vok)
                                return false;
                        ws(c);
                        if (c->i >= c->n)
                                return false;
                        if (c->s[c->i] == ']') {
                                c->i++;
                                return true;
                        }
                        if (c->s[c->i++] != ',')
                                return false;
                }
        }
        if (ch == '"')
                return string(c);
        if (ch == '-' || (ch >= '0' && ch <= '9'))
                return number(c);
        return lit(c, "true") || lit(c, "false") || lit(c, "null");
}

int sp_json_parse(const char *s, size_t len, json_object **ret, sp_error **err)
{
        if (len > INT32_MAX)
                return sp_error_set(err, SP_E_TOO_LARGE, "JSON document too large");
        scan c = {.s = s ? s : "", .n = s ? len : 0, .i = 0};
        bool ok = value(&c, 1);
        if (c.why) {
                int code = (int)c.why->code;
                sp_error_move(err, &c.why);
                sp_error_free(c.why);
                return -code;
        }
        ws(&c);
        if (!ok || c.i != c.n)
                return sp_error_set(err, SP_E_INVALID, "malformed JSON at byte %zu", c.i);

        json_tokener *tok = json_tokener_new_ex(SP_JSON_MAX_DEPTH + 1);
        if (!tok)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        json_object *obj = json_tokener_parse_ex(tok, s ? s : "", (int)len);
        enum json_tokener_error jerr = json_tokener_get_error(tok);
        size_t consumed = json_tokener_get_parse_end(tok);
        if (!obj && jerr == json_tokener_continue) {
                /* A top-level number needs an end marker: feed one NUL. */
                obj = json_tokener_parse_ex(tok, "", 1);
                jerr = json_tokener_get_error(tok);
                consumed = len;
        }
        if (!obj && jerr == json_tokener_continue)
                jerr = json_tokener_error_parse_eof;
        json_tokener_free(tok);
        if (jerr != json_tokener_success) {
                if (obj)
                        json_object_put(obj);
                return sp_error_set(err, SP_E_INVALID, "malformed JSON at byte %zu: %s", consumed,
                                    json_tokener_error_desc(jerr));
        }
        /* Anything but whitespace after the value is an error. */
        for (size_t i = consumed; i < len; i++)
                if (!strchr(" \t\r\n", s[i])) {
                        json_object_put(obj);
                        return sp_error_set(err, SP_E_INVALID, "malformed JSON: trailing data at byte %zu", i);
                }
        *ret = obj;
        return 0;
}

const char *sp_json_str(json_object *obj)
{
        return json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

const char *sp_json_member_str(json_object *obj, const char *key)
{
        json_object *v = NULL;
        return json_object_is_type(obj, json_type_object) && json_object_object_get_ex(obj, key, &v) &&
                               json_object_is_type(v, json_type_string)
                       ? json_object_get_string(v)
                       : NULL;
}

/* Looks the field up; returns 1 if present (and not null), 0 if absent, <0 on error. */
static int lookup(json_object *obj, const char *field, bool required, json_object **ret, sp_error **err)
{
        json_object *v = NULL;
        if (!obj || !json_object_is_type(obj, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "expected a JSON object");
        if (!json_object_object_get_ex(obj, field, &v) || v == NULL) {
                if (required)
                        return sp_error_set(err, SP_E_INVALID, "missing required field '%s'", field);
                return 0;
        }
        *ret = v;
        return 1;
}

static int check_string(json_object *v, const char *what, const char *field, size_t max_len, sp_error **err)
{
        if (!json_object_is_type(v, json_type_string))
                return sp_error_set(err, SP_E_INVALID, "%s '%s' must be a string", what, field);
        size_t n = (size_t)json_object_get_string_len(v);
        if (n > max_len)
                return sp_error_set(err, SP_E_INVALID, "%s '%s' is longer than %zu bytes", what, field, max_len);
        if (memchr(json_object_get_string(v), '\0', n))
                return sp_error_set(err, SP_E_INVALID, "%s '%s' contains a NUL character", what, field);
        return 0;
}

int sp_json_get_string(json_object *obj, const char *field, bool required, size_t max_len, const char **ret,
                       sp_error **err)
{
        json_object *v;
        int r = lookup(obj, field, required, &v, err);
        if (r <= 0)
                return r;
        if (check_string(v, "field", field, max_len, err) < 0)
                return -SP_E_INVALID;
        *ret = json_object_get_string(v);
        return 0;
}

int sp_json_get_int(json_object *obj, const char *field, bool required, int64_t min, int64_t max, int64_t *ret,
                    sp_error **err)
{
        json_object *v;
        int r = lookup(obj, field, required, &v, err);
        if (r <= 0)
                return r;
        bool ok = json_object_is_type(v, json_type_int);
        int64_t n = 0;
        if (ok) {
                errno = 0;
                n = json_object_get_int64(v);
                /* json-c saturates out-of-range numbers and flags them with errno. */
                if (errno == ERANGE)
                        ok = false;
                if (json_object_get_uint64(v) > (uint64_t)INT64_MAX)
                        ok = false;
        }
        if (!ok || n < min || n > max)
                return sp_error_set(err, SP_E_INVALID, "field '%s' must be an integer between %lld and %lld", field,
                                    (long long)min, (long long)max);
        *ret = n;
        return 0;
}

int sp_json_get_bool(json_object *obj, const char *field, bool required, bool *ret, sp_error **err)
{
        json_object *v;
        int r = lookup(obj, field, required, &v, err);
        if (r <= 0)
                return r;
        if (!json_object_is_type(v, json_type_boolean))
                return sp_error_set(err, SP_E_INVALID, "field '%s' must be true or false", field);
        *ret = json_object_get_boolean(v);
        return 0;
}

int sp_json_get_object(json_object *obj, const char *field, bool required, json_object **ret, sp_error **err)
{
        json_object *v;
        int r = lookup(obj, field, required, &v, err);
        if (r <= 0)
                return r;
        if (!json_object_is_type(v, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "field '%s' must be an object", field);
        *ret = v;
        return 0;
}

int sp_json_get_array(json_object *obj, const char *field, bool required, size_t max_items, json_object **ret,
                      sp_error **err)
{
        json_object *v;
        int r = lookup(obj, field, required, &v, err);
        if (r <= 0)
                return r;
        if (!json_object_is_type(v, json_type_array))
                return sp_error_set(err, SP_E_INVALID, "field '%s' must be an array", field);
        if (json_object_array_length(v) > max_items)
                return sp_error_set(err, SP_E_INVALID, "field '%s' has more than %zu items", field, max_items);
        *ret = v;
        return 0;
}

int sp_json_get_strv(json_object *obj, const char *field, bool required, size_t max_items, size_t max_len, char ***ret,
                     sp_error **err)
{
        json_object *arr = NULL;
        int r = sp_json_get_array(obj, field, required, max_items, &arr, err);
        if (r < 0 || !arr)
                return r;
        size_t n = json_object_array_length(arr);
        _cleanup_strv_free_ char **v = calloc(n + 1, sizeof(char *));
        if (!v)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                json_object *item = json_object_array_get_idx(arr, i);
                char name[256];
                snprintf(name, sizeof(name), "%s[%zu]", field, i);
                if (!item || check_string(item, "field", name, max_len, err) < 0)
                        return item ? -SP_E_INVALID
                                    : sp_error_set(err, SP_E_INVALID, "field '%s' must be a string", name);
                v[i] = strdup(json_object_get_string(item));
                if (!v[i])
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        *ret = TAKE_PTR(v);
        return 0;
}

int sp_json_get_string_map(json_object *obj, const char *field, bool required, size_t max_items, size_t max_key,
                           size_t max_value, json_object **ret, sp_error **err)
{
        json_object *map = NULL;
        int r = sp_json_get_object(obj, field, required, &map, err);
        if (r < 0 || !map)
                return r;
        if ((size_t)json_object_object_length(map) > max_items)
                return sp_error_set(err, SP_E_INVALID, "field '%s' has more than %zu entries", field, max_items);
        json_object_object_foreach (map, key, val) {
                size_t kl = strlen(key);
                if (kl == 0 || kl > max_key)
                        return sp_error_set(err, SP_E_INVALID, "field '%s' has a key of %zu bytes (1 to %zu allowed)",
                                            field, kl, max_key);
                char name[300];
                snprintf(name, sizeof(name), "%s.%.*s", field, (int)(kl > 200 ? 200 : kl), key);
                if (!val)
                        return sp_error_set(err, SP_E_INVALID, "field '%s' must be a string", name);
                if (check_string(val, "field", name, max_value, err) < 0)
                        return -SP_E_INVALID;
        }
        *ret = map;
        return 0;
}

int sp_json_check_fields(json_object *obj, const char *const *allowed, sp_error **err)
{
        if (!obj || !json_object_is_type(obj, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "expected a JSON object");
        json_object_object_foreach (obj, key, val) {
                (void)val;
                bool ok = false;
                for (size_t i = 0; allowed && allowed[i]; i++)
                        if (strcmp(allowed[i], key) == 0) {
                                ok = true;
                                break;
                        }
                if (!ok)
                        return sp_error_set(err, SP_E_INVALID, "unknown field '%.100s'", key);
        }
        return 0;
}

bool sp_utf8_valid(const char *str, size_t len)
{
        const unsigned char *s = (const unsigned char *)str, *end = s + len;
        while (s < end) {
                unsigned c = *s, need, min;
                if (c < 0x80) {
                        s++;
                        continue;
                }
                if ((c & 0xe0) == 0xc0)
                        need = 1, min = 0x80, c &= 0x1f;
                else if ((c & 0xf0) == 0xe0)
                        need = 2, min = 0x800, c &= 0x0f;
                else if ((c & 0xf8) == 0xf0)
                        need = 3, min = 0x10000, c &= 0x07;
                else
                        return false;
                if ((size_t)(end - s) <= need)
                        return false;
                for (unsigned i = 1; i <= need; i++) {
                        if ((s[i] & 0xc0) != 0x80)
                                return false;
                        c = c << 6 | (s[i] & 0x3f);
                }
                if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
                        return false;
                s += need + 1;
        }
        return true;
}
