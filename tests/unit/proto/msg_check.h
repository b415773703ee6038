/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks every message codec (space/msg.h) takes: a filled message
 * round-trips; decoding refuses an unknown field (closed schemas), a wrong
 * type, a value out of bounds and a missing required field, naming it; and
 * the helpers that read a spec's markdown tables. Included by the codec
 * tests of proto/ (static functions: one copy per test program).
 */
#ifndef SPACE_TEST_MSG_CHECK_H
#define SPACE_TEST_MSG_CHECK_H

#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/msg.h"

typedef struct {
        alignas(max_align_t) unsigned char b[1024];
} msgbuf;

/* A valid value, not the field's default, for every field of s. */
static void fill(const pr_schema *s, void *out, json_object *keep)
{
        pr_msg_init(s, out);
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                void *p = (char *)out + f->offset;
                switch (f->kind) {
                case PR_STRING:
                        *(const char **)p = f->max >= 5 ? "val-1" : "v";
                        break;
                case PR_INT: {
                        int64_t v = f->min;
                        if (v == f->def)
                                v = f->max;
                        *(int64_t *)p = v;
                        break;
                }
                case PR_BOOL:
                        *(bool *)p = !f->def;
                        break;
                case PR_STRING_MAP: {
                        json_object *m = json_object_new_object();
                        json_object_object_add(m, "KEY", json_object_new_string("value"));
                        json_object_array_add(keep, m);
                        *(json_object **)p = m;
                        break;
                }
                case PR_JSON: {
                        json_object *j = json_object_new_array();
                        json_object_array_add(j, json_object_new_string("any"));
                        json_object_array_add(keep, j);
                        *(json_object **)p = j;
                        break;
                }
                case PR_ARRAY: {
                        /* one element: the sub-message filled, as JSON */
                        msgbuf el;
                        fill(f->sub, el.b, keep);
                        json_object *a = json_object_new_array();
                        json_object_array_add(a, pr_msg_encode(f->sub, el.b));
                        json_object_array_add(keep, a);
                        *(json_object **)p = a;
                        break;
                }
                case PR_STRING_ARRAY: {
                        json_object *a = json_object_new_array();
                        json_object_array_add(a, json_object_new_string("v"));
                        json_object_array_add(keep, a);
                        *(json_object **)p = a;
                        break;
                }
                case PR_INT_MAP: {
                        json_object *m = json_object_new_object();
                        json_object_object_add(m, "k", json_object_new_int64(f->min));
                        json_object_array_add(keep, m);
                        *(json_object **)p = m;
                        break;
                }
                case PR_OBJECT:
                        fill(f->sub, p, keep);
                        if (f->flagged)
                                *(bool *)((char *)out + f->flag_offset) = true;
                        break;
                }
        }
}

static void assert_equal(const char *method, const pr_schema *s, const void *a, const void *b)
{
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                const void *pa = (const char *)a + f->offset, *pb = (const char *)b + f->offset;
                switch (f->kind) {
                case PR_STRING: {
                        const char *x = *(const char *const *)pa, *y = *(const char *const *)pb;
                        ck_assert_msg(x && y && strcmp(x, y) == 0, "%s.%s", method, f->name);
                        break;
                }
                case PR_INT:
                        ck_assert_msg(*(const int64_t *)pa == *(const int64_t *)pb, "%s.%s", method, f->name);
                        break;
                case PR_BOOL:
                        ck_assert_msg(*(const bool *)pa == *(const bool *)pb, "%s.%s", method, f->name);
                        break;
                case PR_STRING_MAP:
                case PR_JSON:
                case PR_ARRAY:
                case PR_STRING_ARRAY:
                case PR_INT_MAP:
                        ck_assert_msg(json_object_equal(*(json_object *const *)pa, *(json_object *const *)pb), "%s.%s",
                                      method, f->name);
                        break;
                case PR_OBJECT:
                        if (f->flagged)
                                ck_assert_msg(*(const bool *)((const char *)a + f->flag_offset) ==
                                                      *(const bool *)((const char *)b + f->flag_offset),
                                              "%s.%s (present)", method, f->name);
                        assert_equal(method, f->sub, pa, pb);
                        break;
                }
        }
}

/* Decoding o with s fails, naming want. */
static void assert_refused(const char *method, const pr_schema *s, json_object *o, const char *want)
{
        msgbuf out;
        sp_error *e = NULL;
        ck_assert_msg(pr_msg_decode(s, o, out.b, &e) < 0, "%s took %s", method, sp_json_str(o));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert_msg(strstr(e->message, want), "%s: '%s' does not name %s", method, e->message, want);
        sp_error_free(e);
}

/* A copy of the encoding with field replaced by v (or removed if v is NULL). */
static json_object *with(json_object *enc, const char *field, json_object *v)
{
        json_object *o = NULL;
        ck_assert_int_eq(json_object_deep_copy(enc, &o, NULL), 0);
        json_object_object_del(o, field);
        if (v)
                json_object_object_add(o, field, v);
        return o;
}

static json_object *long_string(size_t n)
{
        char *s = malloc(n + 1);
        memset(s, 'a', n);
        s[n] = '\0';
        json_object *o = json_object_new_string(s);
        free(s);
        return o;
}

/* The message of s filled with valid values round-trips through its JSON;
 * an empty one encodes to nothing but its required fields. */
static void msg_check_round_trip(const char *name, const pr_schema *s, size_t size)
{
        ck_assert_uint_le(size, sizeof(msgbuf));
        _cleanup_json_ json_object *keep = json_object_new_array();
        msgbuf in, out;
        fill(s, in.b, keep);
        _cleanup_json_ json_object *enc = pr_msg_encode(s, in.b);
        sp_error *e = NULL;
        ck_assert_msg(pr_msg_decode(s, enc, out.b, &e) == 0, "%s: %s", name, e ? e->message : "?");
        assert_equal(name, s, in.b, out.b);
        ck_assert_msg(pr_msg_decode(s, enc, NULL, NULL) == 0, "%s: checking alone refused it", name);
        pr_msg_init(s, in.b);
        _cleanup_json_ json_object *none = pr_msg_encode(s, in.b);
        bool any_required = false;
        for (size_t i = 0; i < s->nfields; i++)
                any_required |= s->fields[i].required;
        if (!any_required)
                ck_assert_int_eq(json_object_object_length(none), 0);
}

/* A value of f's kind that breaks its bounds, or NULL when it has none. */
static json_object *out_of_bounds(const pr_field *f)
{
        switch (f->kind) {
        case PR_STRING:
                return long_string((size_t)f->max + 1);
        case PR_INT:
                return json_object_new_int64(f->max < INT64_MAX ? f->max + 1 : f->min - 1);
        case PR_STRING_MAP:
        case PR_INT_MAP: {
                json_object *bad = json_object_new_object();
                int64_t n = f->kind == PR_STRING_MAP ? f->max : (int64_t)f->items;
                for (int64_t k = 0; k <= n; k++) {
                        char key[32];
                        snprintf(key, sizeof(key), "K%lld", (long long)k);
                        json_object_object_add(bad, key,
                                               f->kind == PR_STRING_MAP ? json_object_new_string("")
                                                                        : json_object_new_int64(f->min));
                }
                return bad;
        }
        case PR_ARRAY:
        case PR_STRING_ARRAY: {
                json_object *bad = json_object_new_array();
                for (size_t k = 0; k <= f->items; k++)
                        json_object_array_add(bad, f->kind == PR_ARRAY ? json_object_new_object()
                                                                       : json_object_new_string(""));
                return bad;
        }
        case PR_BOOL:
        case PR_JSON:
        case PR_OBJECT:
                break;
        }
        return NULL;
}

/* A value of f's shape with one bad element inside, or NULL. */
static json_object *bad_element(const pr_field *f)
{
        json_object *bad = NULL;
        switch (f->kind) {
        case PR_ARRAY:
                bad = json_object_new_array();
                json_object_array_add(bad, json_object_new_int(5));
                break;
        case PR_STRING_ARRAY:
                bad = json_object_new_array();
                json_object_array_add(bad, json_object_new_int(5));
                break;
        case PR_INT_MAP:
                bad = json_object_new_object();
                json_object_object_add(bad, "k", json_object_new_string("5"));
                break;
        default:
                break;
        }
        return bad;
}

/* Decoding refuses, naming the field: an unknown field (unless s is open),
 * a non-object, every field of the wrong type, out of its bounds, with a bad
 * element, and every required field missing or null. */
static void msg_check_refusals(const char *name, const pr_schema *s)
{
        _cleanup_json_ json_object *keep = json_object_new_array();
        msgbuf in;
        fill(s, in.b, keep);
        _cleanup_json_ json_object *enc = pr_msg_encode(s, in.b);
        json_object *o = with(enc, "bogus", json_object_new_int(1));
        if (s->open)
                ck_assert_msg(pr_msg_decode(s, o, NULL, NULL) == 0, "%s (open) refused an unknown field", name);
        else
                assert_refused(name, s, o, "unknown field 'bogus'");
        json_object_put(o);
        _cleanup_json_ json_object *arr = json_object_new_array();
        assert_refused(name, s, arr, "expected a JSON object");
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                char fname[80];
                snprintf(fname, sizeof(fname), "'%s", f->name); /* "'x'" or "'x.key'" */
                json_object *bad = f->kind == PR_JSON                                  ? NULL
                                   : f->kind == PR_INT || f->kind == PR_BOOL           ? json_object_new_string("5")
                                   : f->kind == PR_ARRAY || f->kind == PR_STRING_ARRAY ? json_object_new_object()
                                                                                       : json_object_new_int(5);
                json_object *cases[3] = {bad, out_of_bounds(f), bad_element(f)};
                for (size_t c = 0; c < 3; c++) {
                        if (!cases[c])
                                continue;
                        o = with(enc, f->name, cases[c]);
                        assert_refused(name, s, o, fname);
                        json_object_put(o);
                }
                if (f->required) {
                        char want[100];
                        snprintf(want, sizeof(want), "missing required field '%s'", f->name);
                        o = with(enc, f->name, NULL);
                        assert_refused(name, s, o, want);
                        json_object_put(o);
                        o = with(enc, f->name, NULL);
                        json_object_object_add(o, f->name, NULL);
                        assert_refused(name, s, o, want);
                        json_object_put(o);
                }
        }
}

/* ---- the spec's tables ---- */

/* proto/spec/<name> of the source tree, open for reading. */
static FILE *open_spec(const char *name)
{
        const char *src = getenv("SPACE_SOURCE_DIR");
        ck_assert_msg(src, "SPACE_SOURCE_DIR is not set");
        char path[4096];
        snprintf(path, sizeof(path), "%s/proto/spec/%s", src, name);
        FILE *fp = fopen(path, "r");
        ck_assert_msg(fp, "open %s", path);
        return fp;
}

#define MAX_NAMES 64

typedef struct {
        char method[64];
        char fields[MAX_NAMES][64];
        char nested[MAX_NAMES][256]; /* "{a, b}" after fields[i], or "" */
        size_t n;
} spec_row;

/* The cells of a table line, trimmed; returns how many. */
static size_t split_cells(char *line, char **cells, size_t max)
{
        size_t n = 0;
        char *p = line + 1; /* past the first '|' */
        while (n < max) {
                char *bar = strchr(p, '|');
                if (!bar)
                        break;
                *bar = '\0';
                while (*p == ' ')
                        p++;
                char *end = bar;
                while (end > p && end[-1] == ' ')
                        *--end = '\0';
                cells[n++] = p;
                p = bar + 1;
        }
        return n;
}

/* The `code` spans of s outside parentheses, in order. */
static size_t spans(const char *s, char out[][256], size_t max)
{
        size_t n = 0;
        int depth = 0;
        for (const char *p = s; *p; p++) {
                if (*p == '`') {
                        const char *end = strchr(p + 1, '`');
                        if (!end)
                                break;
                        if (depth == 0 && n < max)
                                snprintf(out[n++], 256, "%.*s", (int)(end - p - 1), p + 1);
                        p = end;
                } else if (*p == '(') {
                        depth++;
                } else if (*p == ')' && depth > 0) {
                        depth--;
                }
        }
        return n;
}

/* Compares the nested field list "{a, b, c?}" with schema sub ("c?": c is optional). */
static void check_nested(const char *method, const char *field, const char *list, const pr_schema *sub)
{
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", list + 1);
        char *close = strchr(buf, '}');
        ck_assert_msg(close, "%s.%s: unclosed %s", method, field, list);
        *close = '\0';
        size_t n = 0;
        char *save = NULL;
        for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
                size_t len = strlen(t);
                bool optional = len > 0 && t[len - 1] == '?'; /* "c?": an optional field */
                if (optional)
                        t[len - 1] = '\0';
                const pr_field *f = pr_msg_field(sub, t);
                ck_assert_msg(f, "%s.%s: the spec's %s has no codec field", method, field, t);
                ck_assert_msg(!optional || !f->required, "%s.%s: the spec's %s? is required in the codec", method,
                              field, t);
                n++;
        }
        ck_assert_msg(n == sub->nfields, "%s.%s: the spec names %zu fields, the codec %zu", method, field, n,
                      sub->nfields);
}

#endif
