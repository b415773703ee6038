/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the worker-RPC request codecs (space/worker_rpc.h, space/msg.h).
 * Every registered request round-trips, and decoding refuses an unknown
 * field, a wrong type, a value out of bounds and a missing required field,
 * naming it; and proto/spec/worker-rpc.md names exactly the registered
 * methods with exactly their fields.
 */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/msg.h"
#include "space/worker_rpc.h"

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
                case PR_OBJECT:
                        fill(f->sub, p, keep);
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
                        ck_assert_msg(json_object_equal(*(json_object *const *)pa, *(json_object *const *)pb), "%s.%s",
                                      method, f->name);
                        break;
                case PR_OBJECT:
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

START_TEST(every_request_round_trips)
{
        ck_assert_int_ge(pr_worker_nmethods, 30);
        for (size_t m = 0; m < pr_worker_nmethods; m++) {
                const pr_method *pm = &pr_worker_methods[m];
                ck_assert_ptr_eq(pr_worker_method(pm->name), pm);
                ck_assert_uint_le(pm->request_size, sizeof(msgbuf));
                _cleanup_json_ json_object *keep = json_object_new_array();
                msgbuf in, out;
                fill(pm->request, in.b, keep);
                _cleanup_json_ json_object *enc = pr_msg_encode(pm->request, in.b);
                sp_error *e = NULL;
                ck_assert_msg(pr_msg_decode(pm->request, enc, out.b, &e) == 0, "%s: %s", pm->name,
                              e ? e->message : "?");
                assert_equal(pm->name, pm->request, in.b, out.b);
                /* an empty struct encodes to what decodes to it (required fields aside) */
                pr_msg_init(pm->request, in.b);
                _cleanup_json_ json_object *none = pr_msg_encode(pm->request, in.b);
                bool any_required = false;
                for (size_t i = 0; i < pm->request->nfields; i++)
                        any_required |= pm->request->fields[i].required;
                if (!any_required)
                        ck_assert_int_eq(json_object_object_length(none), 0);
        }
}
END_TEST

START_TEST(every_request_refuses_what_it_does_not_know)
{
        for (size_t m = 0; m < pr_worker_nmethods; m++) {
                const pr_method *pm = &pr_worker_methods[m];
                const pr_schema *s = pm->request;
                _cleanup_json_ json_object *keep = json_object_new_array();
                msgbuf in;
                fill(s, in.b, keep);
                _cleanup_json_ json_object *enc = pr_msg_encode(s, in.b);
                json_object *o = with(enc, "bogus", json_object_new_int(1));
                assert_refused(pm->name, s, o, "unknown field 'bogus'");
                json_object_put(o);
                _cleanup_json_ json_object *arr = json_object_new_array();
                assert_refused(pm->name, s, arr, "expected a JSON object");
                for (size_t i = 0; i < s->nfields; i++) {
                        const pr_field *f = &s->fields[i];
                        char name[80];
                        snprintf(name, sizeof(name), "'%s'", f->name);
                        /* a wrong type */
                        json_object *bad = f->kind == PR_STRING || f->kind == PR_STRING_MAP || f->kind == PR_OBJECT
                                                   ? json_object_new_int(5)
                                           : f->kind == PR_JSON ? NULL
                                                                : json_object_new_string("5");
                        if (bad) {
                                o = with(enc, f->name, bad);
                                assert_refused(pm->name, s, o, name);
                                json_object_put(o);
                        }
                        /* out of bounds */
                        bad = NULL;
                        if (f->kind == PR_STRING)
                                bad = long_string((size_t)f->max + 1);
                        else if (f->kind == PR_INT && f->max < INT64_MAX)
                                bad = json_object_new_int64(f->max + 1);
                        else if (f->kind == PR_INT)
                                bad = json_object_new_int64(f->min - 1);
                        else if (f->kind == PR_STRING_MAP) {
                                bad = json_object_new_object();
                                for (int64_t k = 0; k <= f->max; k++) {
                                        char key[32];
                                        snprintf(key, sizeof(key), "K%lld", (long long)k);
                                        json_object_object_add(bad, key, json_object_new_string(""));
                                }
                        }
                        if (bad) {
                                o = with(enc, f->name, bad);
                                assert_refused(pm->name, s, o, name);
                                json_object_put(o);
                        }
                        /* missing, or null */
                        if (f->required) {
                                char want[100];
                                snprintf(want, sizeof(want), "missing required field '%s'", f->name);
                                o = with(enc, f->name, NULL);
                                assert_refused(pm->name, s, o, want);
                                json_object_put(o);
                                o = with(enc, f->name, NULL);
                                json_object_object_add(o, f->name, NULL);
                                assert_refused(pm->name, s, o, want);
                                json_object_put(o);
                        }
                }
        }
}
END_TEST

START_TEST(nested_errors_name_the_outer_field)
{
        _cleanup_json_ json_object *o = NULL;
        const char *s = "{\"id\":\"sbx_1\",\"template\":\"base\",\"resources\":{\"pids\":-1}}";
        ck_assert_int_eq(sp_json_parse(s, strlen(s), &o, NULL), 0);
        pr_wk_create_sandbox r;
        sp_error *e = NULL;
        ck_assert_int_lt(pr_msg_decode(&pr_wk_create_sandbox_schema, o, &r, &e), 0);
        ck_assert_str_eq(e->message, "field 'resources': field 'pids' must be an integer between 0 and 4194304");
        sp_error_free(e);
        /* defaults: warm true, file length -1 */
        _cleanup_json_ json_object *o2 = NULL;
        s = "{\"id\":\"sbx_1\",\"template\":\"base\"}";
        ck_assert_int_eq(sp_json_parse(s, strlen(s), &o2, NULL), 0);
        ck_assert_int_eq(pr_msg_decode(&pr_wk_create_sandbox_schema, o2, &r, NULL), 0);
        ck_assert(r.warm);
        ck_assert_ptr_null(r.env);
        ck_assert_int_eq(r.resources.memory_mb, 0);
        pr_wk_file f;
        _cleanup_json_ json_object *o3 = NULL;
        s = "{\"sandbox_id\":\"sbx_1\",\"path\":\"/a\"}";
        ck_assert_int_eq(sp_json_parse(s, strlen(s), &o3, NULL), 0);
        ck_assert_int_eq(pr_msg_decode(&pr_wk_read_file_schema, o3, &f, NULL), 0);
        ck_assert_int_eq(f.length, -1);
        ck_assert_str_eq(f.path, "/a");
}
END_TEST

/* ---- the spec's tables ---- */

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

/* Compares the nested field list "{a, b}" with schema sub. */
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
                ck_assert_msg(pr_msg_field(sub, t), "%s.%s: the spec's %s has no codec field", method, field, t);
                n++;
        }
        ck_assert_msg(n == sub->nfields, "%s.%s: the spec names %zu fields, the codec %zu", method, field, n,
                      sub->nfields);
}

START_TEST(spec_and_codecs_agree)
{
        const char *src = getenv("SPACE_SOURCE_DIR");
        ck_assert_msg(src, "SPACE_SOURCE_DIR is not set");
        char path[4096];
        snprintf(path, sizeof(path), "%s/proto/spec/worker-rpc.md", src);
        FILE *fp = fopen(path, "r");
        ck_assert_msg(fp, "open %s", path);
        bool seen[128] = {false};
        ck_assert_uint_le(pr_worker_nmethods, SP_ARRAY_SIZE(seen));
        int method_col = -1, request_col = -1;
        size_t rows = 0;
        char line[16384];
        while (fgets(line, sizeof(line), fp)) {
                if (line[0] != '|') {
                        method_col = request_col = -1;
                        continue;
                }
                char *cells[16];
                size_t nc = split_cells(line, cells, SP_ARRAY_SIZE(cells));
                if (nc == 0 || strncmp(cells[0], "---", 3) == 0)
                        continue;
                if (method_col < 0) { /* the header */
                        for (size_t i = 0; i < nc; i++) {
                                if (strcmp(cells[i], "method") == 0)
                                        method_col = (int)i;
                                if (strcmp(cells[i], "request") == 0)
                                        request_col = (int)i;
                        }
                        ck_assert_msg(method_col >= 0 && request_col >= 0, "a table without method and request");
                        continue;
                }
                ck_assert_int_gt(nc, (size_t)request_col);
                char names[8][256], fields[MAX_NAMES][256];
                size_t nn = spans(cells[method_col], names, 8);
                size_t nf = strcmp(cells[request_col], "—") == 0 ? 0 : spans(cells[request_col], fields, MAX_NAMES);
                ck_assert_msg(nn > 0, "a row without a method: %s", cells[method_col]);
                for (size_t k = 0; k < nn; k++) {
                        const pr_method *pm = pr_worker_method(names[k]);
                        ck_assert_msg(pm, "the spec's %s has no codec", names[k]);
                        seen[pm - pr_worker_methods] = true;
                        rows++;
                        const pr_schema *s = pm->request;
                        size_t count = 0;
                        for (size_t i = 0; i < nf; i++) {
                                if (fields[i][0] == '{') {
                                        ck_assert_msg(i > 0, "%s: a field list before any field", pm->name);
                                        const pr_field *f = pr_msg_field(s, fields[i - 1]);
                                        if (f->kind == PR_OBJECT)
                                                check_nested(pm->name, f->name, fields[i], f->sub);
                                        else
                                                ck_assert_msg(f->kind == PR_JSON, "%s.%s: not an object", pm->name,
                                                              f->name);
                                        continue;
                                }
                                const pr_field *f = pr_msg_field(s, fields[i]);
                                ck_assert_msg(f, "%s: the spec's field '%s' is not the codec's", pm->name, fields[i]);
                                if (f->kind == PR_OBJECT)
                                        ck_assert_msg(i + 1 < nf && fields[i + 1][0] == '{',
                                                      "%s.%s: the spec does not name its fields", pm->name, f->name);
                                count++;
                        }
                        for (size_t i = 0; i < s->nfields; i++) {
                                bool found = false;
                                for (size_t j = 0; j < nf; j++)
                                        found |= strcmp(fields[j], s->fields[i].name) == 0;
                                ck_assert_msg(found, "%s: the codec's field '%s' is not in the spec", pm->name,
                                              s->fields[i].name);
                        }
                        ck_assert_msg(count == s->nfields, "%s: the spec names %zu fields, the codec %zu", pm->name,
                                      count, s->nfields);
                }
        }
        fclose(fp);
        ck_assert_uint_ge(rows, pr_worker_nmethods);
        for (size_t m = 0; m < pr_worker_nmethods; m++)
                ck_assert_msg(seen[m], "the codec's %s is not in the spec", pr_worker_methods[m].name);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("worker_rpc");
        TCase *tc = tcase_create("all");
        tcase_add_test(tc, every_request_round_trips);
        tcase_add_test(tc, every_request_refuses_what_it_does_not_know);
        tcase_add_test(tc, nested_errors_name_the_outer_field);
        tcase_add_test(tc, spec_and_codecs_agree);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
