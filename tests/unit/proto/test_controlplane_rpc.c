/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the control-plane RPC codecs (space/controlplane_rpc.h,
 * space/revoked_proto.h). Every request and answer round-trips; decoding
 * refuses an unknown field (requests, and RevokedKeys's answer), a wrong
 * type, a value out of bounds and a missing required field, naming it; the
 * other answers take a field they do not know; and
 * proto/spec/controlplane-rpc.md's request tables name exactly the codecs'
 * fields, for every method of the table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msg_check.h"
#include "space/controlplane_rpc.h"
#include "space/revoked_proto.h"

/* The messages no method names at the top: array elements and nested objects. */
static const struct {
        const char *name;
        const pr_schema *schema;
        size_t size;
} parts[] = {
        {"Resources", &pr_cp_resources_schema, sizeof(pr_cp_resources)},
        {"Sandbox", &pr_cp_sandbox_schema, sizeof(pr_cp_sandbox)},
        {"Revoked", &pr_cp_revoked_entry_schema, sizeof(pr_cp_revoked_entry)},
};

START_TEST(every_message_round_trips)
{
        ck_assert_uint_eq(pr_controlplane_nmethods, 7);
        for (size_t m = 0; m < pr_controlplane_nmethods; m++) {
                const pr_cp_method *pm = &pr_controlplane_methods[m];
                ck_assert_ptr_eq(pr_controlplane_method(pm->name, pm->variant), pm);
                msg_check_round_trip(pm->request->name, pm->request, pm->request_size);
                msg_check_round_trip(pm->response->name, pm->response, pm->response_size);
                ck_assert_msg(!pm->request->open, "%s: a request is closed", pm->name);
                bool strict = strcmp(pm->name, "RevokedKeys") == 0;
                ck_assert_msg(pm->response->open == !strict, "%s: its answer's openness", pm->name);
        }
        for (size_t i = 0; i < SP_ARRAY_SIZE(parts); i++)
                msg_check_round_trip(parts[i].name, parts[i].schema, parts[i].size);
        ck_assert_ptr_eq(pr_controlplane_method("Join", NULL)->request, &pr_cp_join_worker_schema);
        ck_assert_ptr_eq(pr_controlplane_method("Join", "dataplane")->request, &pr_cp_join_dataplane_schema);
        ck_assert_ptr_null(pr_controlplane_method("Heartbeat", "dataplane"));
        ck_assert_ptr_null(pr_controlplane_method("Nope", NULL));
}
END_TEST

START_TEST(every_message_refuses_what_it_should)
{
        for (size_t m = 0; m < pr_controlplane_nmethods; m++) {
                const pr_cp_method *pm = &pr_controlplane_methods[m];
                msg_check_refusals(pm->request->name, pm->request);
                msg_check_refusals(pm->response->name, pm->response);
        }
        for (size_t i = 0; i < SP_ARRAY_SIZE(parts); i++)
                msg_check_refusals(parts[i].name, parts[i].schema);
}
END_TEST

static json_object *parse(const char *s)
{
        json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse(s, strlen(s), &o, NULL), 0);
        return o;
}

#define HB_FMT \
        "{\"address\":\"10.0.0.1:7071\",\"backend\":\"jail\"," \
        "\"capacity\":{\"cpu_millis\":4000,\"memory_mb\":8192,\"slots\":16}," \
        "\"used\":{\"cpu_millis\":0,\"memory_mb\":0,\"slots\":0,\"disk_mb\":3}%s}"

START_TEST(messages_name_the_field)
{
        static const struct {
                const pr_schema *schema;
                const char *json, *error;
        } bad[] = {
                {&pr_cp_heartbeat_schema,
                 "{\"address\":\"a:1\",\"backend\":\"jail\",\"capacity\":{\"cpu_millis\":-1,\"memory_mb\":0,"
                 "\"slots\":0},\"used\":{\"cpu_millis\":0,\"memory_mb\":0,\"slots\":0}}",
                 "field 'capacity': field 'cpu_millis' must be an integer between 0 and 1099511627776"},
                {&pr_cp_heartbeat_schema, "{\"address\":\"a:1\",\"backend\":\"jail\",\"capacity\":{}}",
                 "field 'capacity': missing required field 'cpu_millis'"},
                {&pr_cp_heartbeat_schema,
                 "{\"address\":\"a:1\",\"backend\":\"jail\",\"capacity\":{\"cpu_millis\":0,\"memory_mb\":0,"
                 "\"slots\":0}}",
                 "missing required field 'used'"},
                {&pr_cp_join_dataplane_schema,
                 "{\"role\":\"dataplane\",\"token\":\"t\",\"name\":\"n\",\"csr\":\"c\",\"address\":\"a:1\"}",
                 "unknown field 'address'"},
                {&pr_cp_join_worker_schema, "{\"token\":\"t\",\"name\":\"n\",\"csr\":\"c\",\"address\":\"a:1\"}",
                 "missing required field 'backend'"},
                {&pr_cp_empty_schema, "{\"x\":1}", "unknown field 'x'"},
                {&pr_cp_revoked_req_schema, "{\"since_us\":-1}",
                 "field 'since_us' must be an integer between 0 and 9223372036854775807"},
                {&pr_cp_revoked_resp_schema, "{\"keys\":[],\"cursor_us\":1,\"more\":false,\"later\":1}",
                 "unknown field 'later'"},
                {&pr_cp_revoked_resp_schema, "{\"keys\":[{\"id\":\"key_1\"}],\"cursor_us\":1,\"more\":false}",
                 "field 'keys[0]': missing required field 'revoked_at_us'"},
                {&pr_cp_heartbeat_resp_schema,
                 "{\"worker_id\":\"wkr_1\",\"state\":\"ready\",\"admin_state\":\"active\","
                 "\"heartbeat_ms\":50}",
                 "field 'heartbeat_ms' must be an integer between 100 and 600000"},
                {&pr_cp_resolve_sandbox_schema, "{}", "missing required field 'sandbox_id'"},
                {&pr_cp_resolve_sandbox_schema, "{\"sandbox_id\":\"sbx_1\",\"worker\":\"a:1\"}",
                 "unknown field 'worker'"},
                {&pr_cp_resolve_sandbox_schema, "{\"sandbox_id\":7}", "field 'sandbox_id' must be a string"},
                {&pr_cp_resolve_sandbox_resp_schema,
                 "{\"sandbox_id\":\"sbx_1\",\"tenant_id\":\"ten_1\",\"state\":\"running\"}",
                 "missing required field 'ingress'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *o = parse(bad[i].json);
                msgbuf out;
                sp_error *e = NULL;
                ck_assert_msg(pr_msg_decode(bad[i].schema, o, out.b, &e) < 0, "bad %zu decoded", i);
                ck_assert_msg(strcmp(e->message, bad[i].error) == 0, "bad %zu: '%s'", i, e->message);
                sp_error_free(e);
        }
        /* Heartbeat's arrays and maps, with their bounds. */
        static const struct {
                const char *extra, *error;
        } hb[] = {
                {",\"templates\":[7]", "field 'templates[0]' must be a string"},
                {",\"warm\":{\"base\":100001}", "field 'warm.base' must be an integer between 0 and 100000"},
                {",\"artifacts\":{\"t\":1125899906842625}",
                 "field 'artifacts.t' must be an integer between 0 and 1125899906842624"},
                {",\"sandboxes\":[{\"id\":\"s\",\"state\":\"running\",\"template\":\"b\",\"pid\":1}]",
                 "field 'sandboxes[0]': unknown field 'pid'"},
                {",\"labels\":{\"k\":7}", "field 'labels.k' must be a string"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(hb); i++) {
                char body[512];
                snprintf(body, sizeof(body), HB_FMT, hb[i].extra);
                _cleanup_json_ json_object *o = parse(body);
                pr_cp_heartbeat m;
                sp_error *e = NULL;
                ck_assert_msg(pr_msg_decode(&pr_cp_heartbeat_schema, o, &m, &e) < 0, "hb %zu decoded", i);
                ck_assert_msg(strstr(e->message, hb[i].error), "hb %zu: '%s'", i, e->message);
                sp_error_free(e);
        }
        /* A good one: disk_mb absent is -1 and stays absent; used's is kept. */
        char body[512];
        snprintf(
                body, sizeof(body), HB_FMT,
                ",\"templates\":[\"base\"],\"sandboxes\":[{\"id\":\"s\",\"state\":\"running\",\"template\":\"base\"}]");
        _cleanup_json_ json_object *o = parse(body);
        pr_cp_heartbeat m;
        ck_assert_int_eq(pr_msg_decode(&pr_cp_heartbeat_schema, o, &m, NULL), 0);
        ck_assert_int_eq(m.capacity.disk_mb, -1);
        ck_assert_int_eq(m.used.disk_mb, 3);
        ck_assert_int_eq(m.capacity.slots, 16);
        ck_assert_ptr_null(m.warm);
        _cleanup_json_ json_object *cap = pr_msg_encode(&pr_cp_resources_schema, &m.capacity);
        ck_assert_str_eq(sp_json_str(cap), "{\"cpu_millis\":4000,\"memory_mb\":8192,\"slots\":16}");
        pr_cp_sandbox sb;
        ck_assert_int_eq(pr_msg_decode(&pr_cp_sandbox_schema, json_object_array_get_idx(m.sandboxes, 0), &sb, NULL), 0);
        ck_assert_str_eq(sb.template_name, "base");
        _cleanup_json_ json_object *again = pr_msg_encode(&pr_cp_heartbeat_schema, &m);
        ck_assert(json_object_equal(again, o));
}
END_TEST

START_TEST(answers_are_open_but_revoked_keys)
{
        _cleanup_json_ json_object *hb =
                parse("{\"worker_id\":\"wkr_1\",\"state\":\"ready\",\"admin_state\":\"active\","
                      "\"heartbeat_ms\":2000,\"later\":{\"x\":1}}");
        pr_cp_heartbeat_resp r;
        ck_assert_int_eq(pr_msg_decode(&pr_cp_heartbeat_resp_schema, hb, &r, NULL), 0);
        ck_assert_str_eq(r.admin_state, "active");
        ck_assert_int_eq(r.heartbeat_ms, 2000);
        /* ResolveSandbox's: worker is optional (a sandbox not placed has none). */
        _cleanup_json_ json_object *rs = parse("{\"sandbox_id\":\"sbx_1\",\"tenant_id\":\"ten_1\",\"state\":"
                                               "\"creating\",\"ingress\":\"token\",\"later\":1}");
        pr_cp_resolve_sandbox_resp rr;
        ck_assert_int_eq(pr_msg_decode(&pr_cp_resolve_sandbox_resp_schema, rs, &rr, NULL), 0);
        ck_assert_ptr_null(rr.worker);
        ck_assert_str_eq(rr.ingress, "token");
        ck_assert(!rr.auto_resume && !rr.waking); /* absent: false (a control plane before them) */
        _cleanup_json_ json_object *rs2 = parse("{\"sandbox_id\":\"sbx_1\",\"tenant_id\":\"ten_1\",\"state\":"
                                                "\"paused\",\"ingress\":\"public\",\"auto_resume\":true,"
                                                "\"waking\":true}");
        ck_assert_int_eq(pr_msg_decode(&pr_cp_resolve_sandbox_resp_schema, rs2, &rr, NULL), 0);
        ck_assert(rr.auto_resume && rr.waking);
        /* The request's wake is left out when false, so older control planes
         * (whose request schema is closed) still take it. */
        _cleanup_json_ json_object *q0 =
                pr_msg_encode(&pr_cp_resolve_sandbox_schema, &(pr_cp_resolve_sandbox){.sandbox_id = "sbx_1"});
        ck_assert_str_eq(sp_json_str(q0), "{\"sandbox_id\":\"sbx_1\"}");
        _cleanup_json_ json_object *q1 = pr_msg_encode(&pr_cp_resolve_sandbox_schema,
                                                       &(pr_cp_resolve_sandbox){.sandbox_id = "sbx_1", .wake = true});
        ck_assert_str_eq(sp_json_str(q1), "{\"sandbox_id\":\"sbx_1\",\"wake\":true}");
        _cleanup_json_ json_object *tk = parse("{\"token_keys\":[\"PEM\"],\"later\":1}");
        pr_cp_token_keys_resp k;
        ck_assert_int_eq(pr_msg_decode(&pr_cp_token_keys_resp_schema, tk, &k, NULL), 0);
        ck_assert_int_eq(json_object_array_length(k.token_keys), 1);
        /* RevokedKeys's answer is strict both ways; so is its codec's API. */
        _cleanup_json_ json_object *rk = parse("{\"keys\":[],\"cursor_us\":5,\"more\":false,\"later\":1}");
        pr_revoked_keys out = {0};
        sp_error *e = NULL;
        ck_assert_int_lt(pr_revoked_resp_decode(rk, &out, &e), 0);
        ck_assert_str_eq(e->message, "unknown field 'later'");
        sp_error_free(e);
}
END_TEST

START_TEST(revoked_proto_is_the_schemas)
{
        _cleanup_json_ json_object *none = pr_revoked_req_encode(-3, false);
        ck_assert_str_eq(sp_json_str(none), "{}");
        _cleanup_json_ json_object *req = pr_revoked_req_encode(42, true);
        ck_assert_str_eq(sp_json_str(req), "{\"since_us\":42,\"templates\":true}");
        int64_t since = 0;
        bool templates = false;
        ck_assert_int_eq(pr_revoked_req_decode(req, &since, &templates, NULL), 0);
        ck_assert_int_eq(since, 42);
        ck_assert(templates);
        pr_cp_revoked_req m;
        ck_assert_int_eq(pr_msg_decode(&pr_cp_revoked_req_schema, req, &m, NULL), 0);

        pr_revoked_key keys[] = {{"key_a", 1}, {"key_b", 2}}, tpls[] = {{"tpl_1", 3}};
        pr_revoked_keys r = {.keys = keys,
                             .n = 2,
                             .cursor_us = 9,
                             .more = true,
                             .has_templates = true,
                             .templates = tpls,
                             .ntemplates = 1};
        _cleanup_json_ json_object *enc = pr_revoked_resp_encode(&r);
        ck_assert_str_eq(sp_json_str(enc), "{\"keys\":[{\"id\":\"key_a\",\"revoked_at_us\":1},{\"id\":\"key_b\","
                                           "\"revoked_at_us\":2}],\"cursor_us\":9,\"more\":true,\"templates\":[{"
                                           "\"id\":\"tpl_1\",\"revoked_at_us\":3}]}");
        ck_assert_int_eq(pr_msg_decode(&pr_cp_revoked_resp_schema, enc, NULL, NULL), 0);
        pr_revoked_keys back = {0};
        ck_assert_int_eq(pr_revoked_resp_decode(enc, &back, NULL), 0);
        ck_assert_uint_eq(back.n, 2);
        ck_assert_str_eq(back.keys[1].id, "key_b");
        ck_assert(back.more && back.has_templates);
        ck_assert_uint_eq(back.ntemplates, 1);
        ck_assert_int_eq(back.templates[0].revoked_at_us, 3);
        pr_revoked_keys_free(&back);
        /* Without templates, "more" false: still sent (required), templates left out. */
        r.has_templates = false;
        r.more = false;
        _cleanup_json_ json_object *enc2 = pr_revoked_resp_encode(&r);
        ck_assert(json_object_object_get_ex(enc2, "more", NULL));
        ck_assert(!json_object_object_get_ex(enc2, "templates", NULL));
        /* What the schema cannot say: an id's characters. */
        _cleanup_json_ json_object *bad =
                parse("{\"keys\":[{\"id\":\"key-1\",\"revoked_at_us\":1}],\"cursor_us\":1,\"more\":false}");
        sp_error *e = NULL;
        ck_assert_int_lt(pr_revoked_resp_decode(bad, &back, &e), 0);
        ck_assert_str_eq(e->message, "field 'keys[0]': 'id' is not an id");
        sp_error_free(e);
}
END_TEST

/* ---- the spec's tables ---- */

/* The method a heading names ("## Join", "### Join, role `dataplane`"), or NULL. */
static const pr_cp_method *heading_method(const char *line)
{
        const char *p = line + strspn(line, "#");
        p += strspn(p, " ");
        char word[64];
        size_t n = strcspn(p, " ,\n");
        if (n >= sizeof(word))
                return NULL;
        memcpy(word, p, n);
        word[n] = '\0';
        return pr_controlplane_method(word, strstr(p, "`dataplane`") ? "dataplane" : NULL);
}

START_TEST(spec_and_codecs_agree)
{
        FILE *fp = open_spec("controlplane-rpc.md");
        bool seen[16] = {false};
        ck_assert_uint_le(pr_controlplane_nmethods, SP_ARRAY_SIZE(seen));
        const pr_cp_method *pm = NULL; /* of the last heading */
        char heading[256] = "";
        bool in_table = false, is_request = false;
        char fields[MAX_NAMES][256];
        size_t nf = 0;
        char line[16384];
        for (bool more = true; more;) {
                more = fgets(line, sizeof(line), fp) != NULL;
                if (!more || line[0] != '|') {
                        if (in_table && is_request) { /* the table ended: compare */
                                ck_assert_msg(pm, "a request table under '%s', which names no method", heading);
                                const pr_schema *s = pm->request;
                                for (size_t i = 0; i < s->nfields; i++) {
                                        bool found = false;
                                        for (size_t j = 0; j < nf; j++)
                                                found |= strcmp(fields[j], s->fields[i].name) == 0;
                                        ck_assert_msg(found, "%s: the codec's field '%s' is not in the spec", s->name,
                                                      s->fields[i].name);
                                }
                                ck_assert_msg(nf == s->nfields, "%s: the spec names %zu fields, the codec %zu", s->name,
                                              nf, s->nfields);
                                seen[pm - pr_controlplane_methods] = true;
                        }
                        in_table = is_request = false;
                        nf = 0;
                        if (more && line[0] == '#') {
                                snprintf(heading, sizeof(heading), "%.200s", line);
                                pm = heading_method(line);
                        }
                        continue;
                }
                char *cells[16];
                size_t nc = split_cells(line, cells, SP_ARRAY_SIZE(cells));
                if (nc == 0 || strncmp(cells[0], "---", 3) == 0)
                        continue;
                if (!in_table) { /* the header */
                        in_table = true;
                        is_request = strcmp(cells[0], "request field") == 0;
                        ck_assert_msg(!(is_request && pm && seen[pm - pr_controlplane_methods]),
                                      "%s: two request tables", heading);
                        continue;
                }
                if (!is_request || strcmp(cells[0], "—") == 0) /* "—": no field */
                        continue;
                char names[4][256];
                ck_assert_msg(spans(cells[0], names, 4) == 1, "%s: a row without one field: %s", heading, cells[0]);
                ck_assert_msg(pm, "a request table under '%s', which names no method", heading);
                const pr_field *f = pr_msg_field(pm->request, names[0]);
                ck_assert_msg(f, "%s: the spec's field '%s' is not the codec's", pm->request->name, names[0]);
                ck_assert_uint_lt(nf, MAX_NAMES);
                snprintf(fields[nf++], 256, "%s", names[0]);
                ck_assert_msg(nc >= 2 && strstr(cells[1], f->required ? "required" : "optional"),
                              "%s.%s: the spec says '%s'", pm->request->name, f->name, nc >= 2 ? cells[1] : "");
                if (f->kind == PR_OBJECT || f->kind == PR_ARRAY) {
                        /* its fields: the first {…} span of the description */
                        char desc[MAX_NAMES][256];
                        size_t nd = nc >= 3 ? spans(cells[2], desc, MAX_NAMES) : 0, k = 0;
                        while (k < nd && desc[k][0] != '{')
                                k++;
                        ck_assert_msg(k < nd, "%s.%s: the spec does not name its fields", pm->request->name, f->name);
                        check_nested(pm->request->name, f->name, desc[k], f->sub);
                }
        }
        fclose(fp);
        for (size_t m = 0; m < pr_controlplane_nmethods; m++)
                ck_assert_msg(seen[m], "the codec's %s%s%s has no request table in the spec",
                              pr_controlplane_methods[m].name, pr_controlplane_methods[m].variant ? " " : "",
                              pr_controlplane_methods[m].variant ? pr_controlplane_methods[m].variant : "");
}
END_TEST

int main(void)
{
        Suite *s = suite_create("controlplane_rpc");
        TCase *tc = tcase_create("all");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, every_message_round_trips);
        tcase_add_test(tc, every_message_refuses_what_it_should);
        tcase_add_test(tc, messages_name_the_field);
        tcase_add_test(tc, answers_are_open_but_revoked_keys);
        tcase_add_test(tc, revoked_proto_is_the_schemas);
        tcase_add_test(tc, spec_and_codecs_agree);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
