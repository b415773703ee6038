/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the worker-RPC request codecs (space/worker_rpc.h, space/msg.h).
 * Every registered request round-trips, and decoding refuses an unknown
 * field, a wrong type, a value out of bounds and a missing required field,
 * naming it; every answer round-trips and refuses what is out of its bounds,
 * and ignores a field it does not know; and proto/spec/worker-rpc.md names
 * exactly the registered methods with exactly their request fields, their
 * answers' shapes and the fields of Sandbox, Session and Template.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "msg_check.h"
#include "space/worker_rpc.h"

START_TEST(every_request_round_trips)
{
        ck_assert_int_ge(pr_worker_nmethods, 30);
        for (size_t m = 0; m < pr_worker_nmethods; m++) {
                const pr_method *pm = &pr_worker_methods[m];
                ck_assert_ptr_eq(pr_worker_method(pm->name), pm);
                msg_check_round_trip(pm->name, pm->request, pm->request_size);
        }
}
END_TEST

START_TEST(every_request_refuses_what_it_does_not_know)
{
        for (size_t m = 0; m < pr_worker_nmethods; m++)
                msg_check_refusals(pr_worker_methods[m].name, pr_worker_methods[m].request);
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

START_TEST(every_answer_round_trips_and_refuses)
{
        ck_assert_int_ge(pr_worker_nanswers, 18);
        for (size_t i = 0; i < pr_worker_nanswers; i++) {
                const pr_schema *s = pr_worker_answers[i].schema;
                ck_assert_msg(s->open, "the answer %s is not open", s->name);
                msg_check_round_trip(s->name, s, pr_worker_answers[i].size);
                msg_check_refusals(s->name, s);
        }
        /* Every method's answer is one of them, with its size. */
        size_t with = 0;
        for (size_t m = 0; m < pr_worker_nmethods; m++) {
                const pr_method *pm = &pr_worker_methods[m];
                if (!pm->response)
                        continue;
                bool found = false;
                for (size_t i = 0; i < pr_worker_nanswers; i++)
                        found |= pr_worker_answers[i].schema == pm->response &&
                                 pr_worker_answers[i].size == pm->response_size;
                ck_assert_msg(found, "%s: its answer is not listed", pm->name);
                with++;
        }
        ck_assert_uint_ge(with, 19);
}
END_TEST

/* What the worker sends decodes and encodes back as it was: fields at zero or
 * false that it always sends stay (an exit of code 0, a suspend without
 * memory, resources of 0), optional ones it leaves out stay out. */
START_TEST(answers_encode_what_the_worker_sends)
{
        static const struct {
                const pr_schema *s;
                const char *json;
        } cases[] = {
                {&pr_wk_session_schema,
                 "{\"id\":\"ses_1\",\"sandbox_id\":\"sbx_1\",\"state\":\"exited\",\"pid\":7,"
                 "\"created_at\":\"2024-01-02T03:04:05.000006Z\",\"started_at\":\"2024-01-02T03:04:05.000007Z\","
                 "\"ended_at\":\"2024-01-02T03:04:06Z\",\"exit\":{\"code\":0,\"signal\":0,\"oom\":false,"
                 "\"killed\":false},\"output_start\":0,\"output_end\":0}"},
                {&pr_wk_session_schema, "{\"id\":\"ses_1\",\"sandbox_id\":\"sbx_1\",\"state\":\"starting\","
                                        "\"created_at\":\"2024-01-02T03:04:05Z\",\"output_reclaimed\":true}"},
                {&pr_wk_sandbox_schema,
                 "{\"id\":\"sbx_1\",\"template\":\"base\",\"state\":\"suspended\",\"backend\":\"jail\","
                 "\"hostname\":\"h\",\"created_at\":\"2024-01-02T03:04:05Z\",\"resources\":{\"cpu_millis\":0,"
                 "\"memory_mb\":0,\"pids\":0,\"disk_mb\":0},\"suspend\":{\"memory\":false,\"filesystem\":true},"
                 "\"agent_connected\":false}"},
                {&pr_wk_node_info_schema,
                 "{\"id\":\"n\",\"backend\":\"jail\",\"capacity\":{\"cpu_millis\":0,\"memory_bytes\":0,"
                 "\"slots\":0},\"used\":{\"cpu_millis\":0,\"memory_bytes\":0,\"slots\":0,\"disk_bytes\":0},"
                 "\"warm\":{},\"templates\":[]}"},
                {&pr_wk_template_schema, "{\"name\":\"base\",\"source\":\"base\",\"created_at\":\"x\","
                                         "\"workdir\":\"/\",\"user\":\"root\",\"bytes\":0}"},
                {&pr_wk_exit_event_schema, "{\"event\":\"exit\",\"code\":0,\"signal\":0,\"oom\":false,"
                                           "\"killed\":false}"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_json_ json_object *o = NULL;
                ck_assert_int_eq(sp_json_parse(cases[i].json, strlen(cases[i].json), &o, NULL), 0);
                msgbuf b;
                sp_error *e = NULL;
                ck_assert_msg(pr_msg_decode(cases[i].s, o, b.b, &e) == 0, "%zu: %s", i, e ? e->message : "?");
                _cleanup_json_ json_object *enc = pr_msg_encode(cases[i].s, b.b);
                ck_assert_msg(json_object_equal(o, enc), "%zu: %s", i, sp_json_str(enc));
        }
        /* A session without a log has no output offsets; one without exit has no exit. */
        pr_wk_session ses;
        pr_msg_init(&pr_wk_session_schema, &ses);
        ck_assert_int_eq(ses.output_start, -1);
        ck_assert(!ses.has_exit);
}
END_TEST

/* The kinds no worker request uses yet: arrays of messages, string arrays,
 * integer maps, and an open schema (an answer's) that ignores what it does not name. */
typedef struct item {
        const char *id;
        int64_t n;
} item;
static const pr_field item_fields[] = {PR_F_STRING(item, "id", id, true, 8), PR_F_INT(item, "n", n, false, 0, 9, 0)};
static const pr_schema item_schema = PR_SCHEMA("item", item_fields);
typedef struct bag {
        json_object *items, *names, *counts;
} bag;
static const pr_field bag_fields[] = {
        PR_F_ARRAY(bag, "items", items, true, 3, &item_schema),
        PR_F_STRING_ARRAY(bag, "names", names, false, 2, 4),
        PR_F_INT_MAP(bag, "counts", counts, false, 2, 6, 0, 100),
};
static const pr_schema bag_schema = PR_SCHEMA("bag", bag_fields);
static const pr_schema open_bag_schema = PR_SCHEMA_OPEN("open bag", bag_fields);

START_TEST(arrays_maps_and_open_schemas)
{
        msg_check_round_trip("bag", &bag_schema, sizeof(bag));
        msg_check_refusals("bag", &bag_schema);
        msg_check_round_trip("open bag", &open_bag_schema, sizeof(bag));
        msg_check_refusals("open bag", &open_bag_schema);
        static const struct {
                const char *json, *error;
        } bad[] = {
                {"{\"items\":[{\"id\":\"a\"},{\"n\":1}]}", "field 'items[1]': missing required field 'id'"},
                {"{\"items\":[{\"id\":\"a\",\"x\":1}]}", "field 'items[0]': unknown field 'x'"},
                {"{\"items\":[],\"names\":[\"abcde\"]}", "field 'names[0]' is longer than 4 bytes"},
                {"{\"items\":[],\"counts\":{\"k\":101}}", "field 'counts.k' must be an integer between 0 and 100"},
                {"{\"items\":[],\"counts\":{\"kkkkkkk\":1}}", "field 'counts' has a key of 7 bytes (1 to 6 allowed)"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *o = NULL;
                ck_assert_int_eq(sp_json_parse(bad[i].json, strlen(bad[i].json), &o, NULL), 0);
                bag b;
                sp_error *e = NULL;
                ck_assert_int_lt(pr_msg_decode(&bag_schema, o, &b, &e), 0);
                ck_assert_str_eq(e->message, bad[i].error);
                sp_error_free(e);
        }
        /* A decoded array's elements decode with the sub-schema. */
        const char *ok = "{\"items\":[{\"id\":\"a\",\"n\":2},{\"id\":\"b\"}],\"later\":true}";
        _cleanup_json_ json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse(ok, strlen(ok), &o, NULL), 0);
        bag b;
        ck_assert_int_lt(pr_msg_decode(&bag_schema, o, &b, NULL), 0);
        ck_assert_int_eq(pr_msg_decode(&open_bag_schema, o, &b, NULL), 0);
        ck_assert_int_eq(json_object_array_length(b.items), 2);
        item it;
        ck_assert_int_eq(pr_msg_decode(&item_schema, json_object_array_get_idx(b.items, 1), &it, NULL), 0);
        ck_assert_str_eq(it.id, "b");
        ck_assert_int_eq(it.n, 0);
}
END_TEST

/* ---- the spec's tables ---- */

/* The answer schema named name (a shape the spec defines), or NULL. */
static const pr_schema *answer_named(const char *name)
{
        for (size_t i = 0; i < pr_worker_nanswers; i++)
                if (strcmp(pr_worker_answers[i].schema->name, name) == 0)
                        return pr_worker_answers[i].schema;
        return NULL;
}

/* The leading [A-Za-z_0-9] characters of p into out. */
static const char *word(const char *p, char *out, size_t cap)
{
        size_t n = 0;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_') {
                if (n + 1 < cap)
                        out[n++] = *p;
                p++;
        }
        out[n] = '\0';
        return p;
}

/* Checks the spec's field list p[0..n) ("{a, b?, c:{x, y}, d:Shape, "e":[Shape…], f:v}")
 * against s: it names every field of s and no other; a nested message's own
 * list or shape, an array's element shape. */
static void check_shape(const char *where, const char *p, size_t n, const pr_schema *s)
{
        ck_assert_msg(n >= 2 && p[0] == '{' && p[n - 1] == '}', "%s: '%.*s' is not a field list", where, (int)n, p);
        size_t count = 0, i = 1;
        while (i < n - 1) {
                size_t start = i;
                int depth = 0;
                while (i < n - 1 && (depth > 0 || p[i] != ',')) {
                        depth += p[i] == '{' || p[i] == '[';
                        depth -= p[i] == '}' || p[i] == ']';
                        i++;
                }
                const char *q = p + start, *end = p + i;
                i++; /* past the comma */
                while (q < end && (*q == ' ' || *q == '"'))
                        q++;
                char name[64];
                q = word(q, name, sizeof(name));
                ck_assert_msg(name[0], "%s: an item without a name in '%.*s'", where, (int)n, p);
                const pr_field *f = pr_msg_field(s, name);
                ck_assert_msg(f, "%s: the spec's field '%s' is not the codec's %s", where, name, s->name);
                count++;
                while (q < end && (*q == '"' || *q == '?' || *q == ' '))
                        q++;
                if (q == end || *q != ':') {
                        ck_assert_msg(f->kind != PR_OBJECT && f->kind != PR_ARRAY,
                                      "%s: the spec does not name the fields of %s.%s", where, s->name, name);
                        continue;
                }
                q++;
                while (q < end && *q == ' ')
                        q++;
                char sub_where[256], shape[64];
                snprintf(sub_where, sizeof(sub_where), "%s.%s", where, name);
                if (*q == '{') {
                        if (f->kind == PR_OBJECT)
                                check_shape(sub_where, q, (size_t)(end - q), f->sub);
                        else
                                ck_assert_msg(f->kind == PR_INT_MAP || f->kind == PR_STRING_MAP || f->kind == PR_JSON,
                                              "%s: not an object", sub_where);
                } else if (*q == '[') {
                        word(q + 1, shape, sizeof(shape));
                        ck_assert_msg(f->kind == PR_ARRAY && strcmp(f->sub->name, shape) == 0, "%s: not an array of %s",
                                      sub_where, shape);
                } else if (word(q, shape, sizeof(shape)) && answer_named(shape)) {
                        ck_assert_msg(f->kind == PR_OBJECT && strcmp(f->sub->name, shape) == 0, "%s: not a %s",
                                      sub_where, shape);
                } else { /* a value: true, N, … */
                        ck_assert_msg(f->kind != PR_OBJECT && f->kind != PR_ARRAY, "%s: a value for a message",
                                      sub_where);
                }
        }
        ck_assert_msg(count == s->nfields, "%s: the spec names %zu fields, the codec's %s %zu", where, count, s->name,
                      s->nfields);
}

/* A row's response cell against the method's answer: a streaming method's
 * is the span after "trailer", a unary one's its first span; a field list or
 * a shape's name, anything else ({}, the agent's results, frames) none. */
static void check_response(const pr_method *pm, const char *cell)
{
        char span[1024] = "";
        const char *p = NULL;
        if (pm->streaming) {
                for (const char *t = cell; *t && !p; t++)
                        if (strncasecmp(t, "trailer `", 9) == 0)
                                p = t + 8;
        } else {
                char first[1][256];
                if (spans(cell, first, 1) == 1)
                        snprintf(span, sizeof(span), "%s", first[0]);
        }
        if (p) {
                const char *end = strchr(p + 1, '`');
                ck_assert_msg(end, "%s: an unclosed trailer", pm->name);
                snprintf(span, sizeof(span), "%.*s", (int)(end - p - 1), p + 1);
        }
        if (span[0] == '{' && strcmp(span, "{}") != 0) {
                ck_assert_msg(pm->response, "%s: the spec gives its answer, the codec has none", pm->name);
                check_shape(pm->name, span, strlen(span), pm->response);
        } else if (answer_named(span)) {
                ck_assert_msg(pm->response && strcmp(pm->response->name, span) == 0, "%s: its answer is not a %s",
                              pm->name, span);
        } else {
                ck_assert_msg(!pm->response, "%s: the codec has an answer (%s) the spec does not give", pm->name,
                              pm->response->name);
        }
}

/* The spec's shape definitions, "`Name`: `{…}`" at a line's start. */
static size_t check_definition(const char *line)
{
        char name[64];
        if (line[0] != '`')
                return 0;
        const char *p = word(line + 1, name, sizeof(name));
        if (strncmp(p, "`: `{", 5) != 0)
                return 0;
        const pr_schema *s = answer_named(name);
        ck_assert_msg(s, "the spec's %s has no codec", name);
        const char *end = strchr(p + 4, '`');
        ck_assert_msg(end, "%s: an unclosed definition", name);
        check_shape(name, p + 4, (size_t)(end - p - 4), s);
        return 1;
}

START_TEST(spec_and_codecs_agree)
{
        FILE *fp = open_spec("worker-rpc.md");
        bool seen[128] = {false};
        ck_assert_uint_le(pr_worker_nmethods, SP_ARRAY_SIZE(seen));
        int method_col = -1, request_col = -1, response_col = -1;
        size_t rows = 0, definitions = 0;
        char line[16384];
        while (fgets(line, sizeof(line), fp)) {
                if (line[0] != '|') {
                        method_col = request_col = response_col = -1;
                        definitions += check_definition(line);
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
                                if (strcmp(cells[i], "response") == 0)
                                        response_col = (int)i;
                        }
                        ck_assert_msg(method_col >= 0 && request_col >= 0 && response_col >= 0,
                                      "a table without method, request and response");
                        continue;
                }
                ck_assert_int_gt(nc, (size_t)request_col);
                ck_assert_msg(nc > (size_t)response_col, "a row without a response: %s", cells[method_col]);
                char names[8][256], fields[MAX_NAMES][256];
                size_t nn = spans(cells[method_col], names, 8);
                size_t nf = strcmp(cells[request_col], "—") == 0 ? 0 : spans(cells[request_col], fields, MAX_NAMES);
                ck_assert_msg(nn > 0, "a row without a method: %s", cells[method_col]);
                for (size_t k = 0; k < nn; k++) {
                        const pr_method *pm = pr_worker_method(names[k]);
                        ck_assert_msg(pm, "the spec's %s has no codec", names[k]);
                        seen[pm - pr_worker_methods] = true;
                        rows++;
                        check_response(pm, cells[response_col]);
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
        ck_assert_uint_eq(definitions, 6); /* EgressRecord, Sandbox, Session, Template, Manifest, ArtifactFile */
        for (size_t m = 0; m < pr_worker_nmethods; m++)
                ck_assert_msg(seen[m], "the codec's %s is not in the spec", pr_worker_methods[m].name);
}
END_TEST

/* The file methods' shared struct: PR_WK_FILE_INIT and pr_wk_file_init() set
 * every member to the absent value of every file schema that names it, and
 * pr_wk_file_decode() leaves the members a method does not take absent,
 * whatever the struct held before. */
START_TEST(file_requests_start_and_decode_absent)
{
        static const pr_schema *const files[] = {
                &pr_wk_stat_file_schema,   &pr_wk_list_dir_schema,   &pr_wk_make_dir_schema,  &pr_wk_move_path_schema,
                &pr_wk_remove_path_schema, &pr_wk_chmod_path_schema, &pr_wk_read_file_schema, &pr_wk_write_file_schema};
        const size_t nfiles = sizeof(files) / sizeof(files[0]);
        const pr_wk_file init = PR_WK_FILE_INIT;
        pr_wk_file fn;
        memset(&fn, 0x5a, sizeof(fn));
        pr_wk_file_init(&fn);
        size_t named = 0; /* members some file schema names */
        for (size_t off = 0; off < sizeof(pr_wk_file); off++) {
                bool seen = false;
                for (size_t k = 0; k < nfiles; k++) {
                        for (size_t i = 0; i < files[k]->nfields; i++) {
                                const pr_field *f = &files[k]->fields[i];
                                if (f->offset != off)
                                        continue;
                                pr_wk_file z;
                                memset(&z, 0xa5, sizeof(z));
                                pr_msg_init(files[k], &z);
                                const char *a = (const char *)&init + off, *b = (const char *)&fn + off,
                                           *c = (const char *)&z + off;
                                size_t n = f->kind == PR_STRING ? sizeof(const char *)
                                           : f->kind == PR_INT  ? sizeof(int64_t)
                                                                : sizeof(bool);
                                ck_assert_msg(memcmp(a, c, n) == 0 && memcmp(b, c, n) == 0,
                                              "%s: '%s' does not start absent", files[k]->name, f->name);
                                seen = true;
                        }
                }
                named += seen;
        }
        ck_assert_uint_eq(named, 15); /* every member of pr_wk_file */

        /* Each method's request from PR_WK_FILE_INIT sends only what was set
         * (and ChmodPath's mode, required: -1 there is refused, not absent). */
        for (size_t k = 0; k < nfiles; k++) {
                pr_wk_file q = PR_WK_FILE_INIT;
                _cleanup_json_ json_object *o = pr_msg_encode(files[k], &q);
                json_object_object_foreach (o, key, val) {
                        (void)val;
                        ck_assert_msg(pr_msg_field(files[k], key)->required, "%s: %s", files[k]->name, sp_json_str(o));
                }
        }

        /* A struct that held a WriteFile request decodes a StatFile one: what
         * StatFile does not take is absent again, not as it was. */
        _cleanup_json_ json_object *wr = json_tokener_parse(
                "{\"sandbox_id\":\"sbx_1\",\"path\":\"/a\",\"mode\":384,\"append\":true,\"user\":\"u\"}");
        _cleanup_json_ json_object *st =
                json_tokener_parse("{\"sandbox_id\":\"sbx_2\",\"path\":\"/b\",\"follow\":true}");
        ck_assert_ptr_nonnull(wr);
        ck_assert_ptr_nonnull(st);
        pr_wk_file q;
        memset(&q, 0, sizeof(q));
        sp_error *e = NULL;
        ck_assert_int_eq(pr_wk_file_decode(&pr_wk_write_file_schema, wr, &q, &e), 0);
        ck_assert_int_eq(q.mode, 0600);
        ck_assert(q.append);
        ck_assert_int_eq(q.length, -1); /* not WriteFile's: absent, though the struct was zeroed */
        q.limit = 7;
        q.window = 8192;
        q.offset = 9;
        q.length = 0;
        q.from = q.to = "x";
        q.parents = q.recursive = true;
        ck_assert_int_eq(pr_wk_file_decode(&pr_wk_stat_file_schema, st, &q, &e), 0);
        ck_assert_ptr_null(e);
        ck_assert_str_eq(q.sandbox_id, "sbx_2");
        ck_assert_str_eq(q.path, "/b");
        ck_assert(q.follow);
        ck_assert_ptr_null(q.user);
        ck_assert_ptr_null(q.owner);
        ck_assert_ptr_null(q.from);
        ck_assert_ptr_null(q.to);
        ck_assert_int_eq(q.mode, -1);
        ck_assert_int_eq(q.length, -1);
        ck_assert_int_eq(q.limit, 0);
        ck_assert_int_eq(q.offset, 0);
        ck_assert_int_eq(q.window, 0);
        ck_assert(!q.append && !q.parents && !q.recursive);
        /* So a WriteFile encoded from it sends no mode. */
        _cleanup_json_ json_object *back = pr_msg_encode(&pr_wk_write_file_schema, &q);
        ck_assert(!json_object_object_get_ex(back, "mode", NULL));

        /* A refused request still leaves the struct absent, never half old. */
        _cleanup_json_ json_object *bad = json_tokener_parse("{\"sandbox_id\":\"s\",\"path\":\"/c\",\"mode\":-2}");
        ck_assert_ptr_nonnull(bad);
        q.limit = 5;
        ck_assert_int_lt(pr_wk_file_decode(&pr_wk_chmod_path_schema, bad, &q, &e), 0);
        ck_assert_ptr_nonnull(e);
        sp_error_free(e);
        ck_assert_int_eq(q.limit, 0);
        e = NULL;

        /* owner (E2B's semantics: root's rights, created things given to it)
         * goes through every file method, never with user. */
        _cleanup_json_ json_object *own =
                json_tokener_parse("{\"sandbox_id\":\"s\",\"path\":\"a\",\"owner\":\"user\",\"parents\":true}");
        _cleanup_json_ json_object *both =
                json_tokener_parse("{\"sandbox_id\":\"s\",\"path\":\"a\",\"owner\":\"user\",\"user\":\"user\"}");
        ck_assert_int_eq(pr_wk_file_decode(&pr_wk_write_file_schema, own, &q, &e), 0);
        ck_assert_str_eq(q.owner, "user");
        ck_assert_ptr_null(q.user);
        _cleanup_json_ json_object *own_back = pr_msg_encode(&pr_wk_write_file_schema, &q);
        ck_assert_str_eq(sp_json_str(own_back), sp_json_str(own));
        for (size_t k = 0; k < nfiles; k++) {
                if (files[k] == &pr_wk_move_path_schema)
                        continue;
                _cleanup_json_ json_object *b = json_tokener_parse(sp_json_str(both));
                if (files[k] == &pr_wk_chmod_path_schema)
                        json_object_object_add(b, "mode", json_object_new_int(0644));
                ck_assert_int_lt(pr_wk_file_decode(files[k], b, &q, &e), 0);
                ck_assert_msg(strstr(e->message, "mutually exclusive"), "%s: %s", files[k]->name, e->message);
                sp_error_free(e);
                e = NULL;
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("worker_rpc");
        TCase *tc = tcase_create("all");
        tcase_add_test(tc, every_request_round_trips);
        tcase_add_test(tc, every_request_refuses_what_it_does_not_know);
        tcase_add_test(tc, nested_errors_name_the_outer_field);
        tcase_add_test(tc, every_answer_round_trips_and_refuses);
        tcase_add_test(tc, answers_encode_what_the_worker_sends);
        tcase_add_test(tc, arrays_maps_and_open_schemas);
        tcase_add_test(tc, spec_and_codecs_agree);
        tcase_add_test(tc, file_requests_start_and_decode_absent);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
