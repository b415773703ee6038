/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: space-e2b's control-plane REST requests (compat/e2b/
 * request.h). Bodies are JSON objects (empty: {}); create maps E2B's
 * fields onto the public API's (the default template for "base", a
 * timeout of 0 to 30 days defaulting to 300 s, autoPause as suspend);
 * timeouts are bounded, required for POST …/timeout and optional for
 * connect; the list query bounds its limit (1 to 1000), metadata pairs (8)
 * and states, and every value lands percent-encoded in the API's target;
 * the logs query takes start in milliseconds and a limit of 1 to its bound.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "request.h"
#include "space/cleanup.h"
#include "space/json.h"

static json_object *body_ok(const char *s)
{
        json_object *o = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(e2b_request_body(s, strlen(s), &o, &e) == 0, "%s: %s", s, e ? e->message : "");
        return o;
}

static const char *str(json_object *o)
{
        return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

START_TEST(bodies)
{
        _cleanup_json_ json_object *o = body_ok("");
        ck_assert_str_eq(str(o), "{}");
        sp_json_putp(&o);
        o = body_ok(" {\"timeout\": 5}\r\n");
        ck_assert_str_eq(str(o), "{\"timeout\":5}");
        sp_json_putp(&o);
        struct {
                const char *body, *message;
        } bad[] = {
                {"[]", "the body is not a JSON object"},
                {"\"x\"", "the body is not a JSON object"},
                {"null", "the body is not a JSON object"},
                {"{", "malformed JSON"},
                {"{} {}", "malformed JSON"},
                {"{\"a\":NaN}", "malformed JSON"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(e2b_request_body(bad[i].body, strlen(bad[i].body), &o, &e) < 0, "%s", bad[i].body);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                ck_assert_msg(strstr(e->message, bad[i].message), "%s: %s", bad[i].body, e->message);
                ck_assert_ptr_null(o);
        }
}
END_TEST

START_TEST(creates)
{
        struct {
                const char *in, *out;
        } cases[] = {
                {"{}", "{\"template\":\"tpl\",\"timeout_s\":300,\"end_action\":\"kill\"}"},
                {"{\"templateID\":\"base\"}", "{\"template\":\"tpl\",\"timeout_s\":300,\"end_action\":\"kill\"}"},
                {"{\"templateID\":\"\"}", "{\"template\":\"tpl\",\"timeout_s\":300,\"end_action\":\"kill\"}"},
                {"{\"templateID\":7}", "{\"template\":\"tpl\",\"timeout_s\":300,\"end_action\":\"kill\"}"},
                {"{\"templateID\":\"python\",\"timeout\":0,\"autoPause\":true,\"metadata\":{\"a\":\"b\"},"
                 "\"envVars\":{\"X\":\"1\"}}",
                 "{\"template\":\"python\",\"metadata\":{\"a\":\"b\"},\"env\":{\"X\":\"1\"},\"timeout_s\":0,"
                 "\"end_action\":\"suspend\"}"},
                {"{\"timeout\":2592000,\"autoPause\":false,\"metadata\":null}",
                 "{\"template\":\"tpl\",\"timeout_s\":2592000,\"end_action\":\"kill\"}"},
                /* Not an integer: the default (the public API checks metadata and env). */
                {"{\"timeout\":\"60\",\"metadata\":[1]}",
                 "{\"template\":\"tpl\",\"metadata\":[1],\"timeout_s\":300,\"end_action\":\"kill\"}"},
                /* lifecycle.autoResume: traffic wakes it (auto_resume). */
                {"{\"autoPause\":true,\"autoResume\":{\"enabled\":true}}",
                 "{\"template\":\"tpl\",\"timeout_s\":300,\"end_action\":\"suspend\",\"auto_resume\":true}"},
                {"{\"autoResume\":{\"enabled\":false}}",
                 "{\"template\":\"tpl\",\"timeout_s\":300,\"end_action\":\"kill\",\"auto_resume\":false}"},
                {"{\"autoResume\":null}", "{\"template\":\"tpl\",\"timeout_s\":300,\"end_action\":\"kill\"}"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_json_ json_object *in = body_ok(cases[i].in), *out = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(e2b_request_create(in, "tpl", &out, &e) == 0, "%s", cases[i].in);
                ck_assert_str_eq(str(out), cases[i].out);
        }
        /* A list of defaults: the create asks for the first (rest.c tries the others after it). */
        const char *lists[][2] = {
                {"{}", "debian"}, {"{\"templateID\":\"base\"}", "debian"}, {"{\"templateID\":\"py\"}", "py"}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(lists); i++) {
                _cleanup_json_ json_object *in = body_ok(lists[i][0]), *out = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_eq(e2b_request_create(in, "debian,base", &out, &e), 0);
                ck_assert_str_eq(sp_json_member_str(out, "template"), lists[i][1]);
        }
        const char *bad[] = {"{\"timeout\":2592001}", "{\"timeout\":-1}", "{\"timeout\":-9223372036854775808}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *in = body_ok(bad[i]), *out = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(e2b_request_create(in, "tpl", &out, &e) < 0, "%s accepted", bad[i]);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                ck_assert_str_eq(e->message, "timeout must be 0 to 2592000 seconds");
                ck_assert_ptr_null(out);
        }
        const char *bad_resume[] = {"{\"autoResume\":true}", "{\"autoResume\":{}}", "{\"autoResume\":{\"enabled\":1}}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_resume); i++) {
                _cleanup_json_ json_object *in = body_ok(bad_resume[i]), *out = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(e2b_request_create(in, "tpl", &out, &e) < 0, "%s accepted", bad_resume[i]);
                ck_assert_str_eq(e->message, "autoResume must be {\"enabled\": true|false}");
                ck_assert_ptr_null(out);
        }
}
END_TEST

/* E2B's network options as our egress (docs/e2b.md). */
START_TEST(network_options_become_egress)
{
        struct {
                const char *in, *out; /* out: the create body's egress, "-" when it has none */
        } cases[] = {
                {"{}", "-"},
                {"{\"allow_internet_access\":true}", "\"public\""},
                {"{\"allow_internet_access\":false}", "\"none\""},
                {"{\"network\":{\"denyOut\":[\"0.0.0.0/0\"]}}", "\"none\""},
                {"{\"network\":{\"allowOut\":[\"pypi.org\"]}}", "\"public\""},
                {"{\"allow_internet_access\":false,\"network\":{\"allowOut\":[\"pypi.org\",\"*.b.example\","
                 "\"8.8.8.8\",\"10.1.0.0/16\"]}}",
                 "{\"name\":\"e2b-allow-out\",\"domains\":[\"pypi.org\",\"*.b.example\"],\"cidrs\":[\"8.8.8.8/32\","
                 "\"10.1.0.0/16\"]}"},
                {"{\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"a.example\"]}}",
                 "{\"name\":\"e2b-allow-out\",\"domains\":[\"a.example\"],\"cidrs\":[]}"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_json_ json_object *in = body_ok(cases[i].in), *out = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(e2b_request_create(in, "tpl", &out, &e) == 0, "%s", cases[i].in);
                json_object *eg = NULL;
                const char *got = json_object_object_get_ex(out, "egress", &eg)
                                          ? json_object_to_json_string_ext(eg, JSON_C_TO_STRING_PLAIN |
                                                                                       JSON_C_TO_STRING_NOSLASHESCAPE)
                                          : "-";
                ck_assert_msg(strcmp(got, cases[i].out) == 0, "%s: %s", cases[i].in, got);
        }
        const char *bad[][2] = {
                {"{\"network\":{\"denyOut\":[\"8.8.8.8\"]}}", "only 0.0.0.0/0"},
                {"{\"network\":{\"allowOut\":\"x\"}}", "must be arrays"},
                {"{\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[7]}}", "allowOut[0]"},
                {"{\"allow_internet_access\":\"yes\"}", "boolean"},
                {"{\"network\":[]}", "network must be an object"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *in = body_ok(bad[i][0]), *out = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(e2b_request_create(in, "tpl", &out, &e) < 0, "%s accepted", bad[i][0]);
                ck_assert_msg(strstr(e->message, bad[i][1]), "%s: %s", bad[i][0], e->message);
                ck_assert_ptr_null(out);
        }
        /* An update says it all: nothing said is none. */
        _cleanup_json_ json_object *empty = body_ok("{}"), *upd = body_ok("{\"allowOut\":[\"a.example\"],"
                                                                          "\"denyOut\":[\"0.0.0.0/0\"]}");
        _cleanup_json_ json_object *e1 = NULL, *e2 = NULL;
        ck_assert_int_eq(e2b_request_egress(empty, true, &e1, NULL), 0);
        ck_assert_str_eq(json_object_get_string(e1), "none");
        ck_assert_int_eq(e2b_request_egress(upd, true, &e2, NULL), 0);
        ck_assert_str_eq(json_object_to_json_string_ext(e2, JSON_C_TO_STRING_PLAIN),
                         "{\"name\":\"e2b-allow-out\",\"domains\":[\"a.example\"],\"cidrs\":[]}");
}
END_TEST

START_TEST(timeouts)
{
        struct {
                const char *in;
                bool required;
                int64_t want; /* -2: refused */
        } cases[] = {
                {"{\"timeout\":0}", true, 0},
                {"{\"timeout\":2592000}", true, 2592000},
                {"{\"timeout\":2592001}", true, -2},
                {"{\"timeout\":-1}", true, -2},
                {"{}", true, -2},
                {"{\"timeout\":\"5\"}", true, -2},
                {"{}", false, -1},
                {"{\"timeout\":-5}", false, -1},
                {"{\"timeout\":60}", false, 60},
                {"{\"timeout\":2592001}", false, -2},
                {"{\"timeout\":1.5}", false, -1},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_json_ json_object *in = body_ok(cases[i].in);
                _cleanup_error_ sp_error *e = NULL;
                int64_t t = 99;
                int rc = e2b_request_timeout(in, cases[i].required, &t, &e);
                if (cases[i].want == -2) {
                        ck_assert_msg(rc < 0, "case %zu accepted", i);
                        ck_assert_str_eq(e->message, "timeout must be 0 to 2592000 seconds");
                        ck_assert_int_eq(t, 99);
                } else {
                        ck_assert_msg(rc == 0, "case %zu: %s", i, e ? e->message : "");
                        ck_assert_int_eq(t, cases[i].want);
                }
        }
}
END_TEST

START_TEST(lists)
{
        struct {
                const char *limit, *next, *metadata, *state;
                const char *target; /* NULL: refused */
                bool running, paused;
                const char *message;
        } cases[] = {
                {NULL, NULL, NULL, NULL, "/v1/sandboxes?limit=100", true, true, NULL},
                {"1", "", "", "", "/v1/sandboxes?limit=1", true, true, NULL},
                {"1000", "c/+ &x", NULL, "running", "/v1/sandboxes?limit=1000&cursor=c/%2B%20%26x", true, false, NULL},
                {"5", NULL, "user=alice&env=prod%20one&&", "paused",
                 "/v1/sandboxes?limit=5&metadata.user=alice&metadata.env=prod%20one", false, true, NULL},
                {NULL, NULL, "k%3D1=v%26&a+b=%zz%4", "running,paused,",
                 "/v1/sandboxes?limit=100&metadata.k%3D1=v%26&metadata.a%2Bb=%25zz%254", true, true, NULL},
                {NULL, NULL, "a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8", NULL,
                 "/v1/sandboxes?limit=100&metadata.a=1&metadata.b=2&metadata.c=3&metadata.d=4&metadata.e=5"
                 "&metadata.f=6&metadata.g=7&metadata.h=8",
                 true, true, NULL},
                {NULL, NULL, "=v&k=", NULL, "/v1/sandboxes?limit=100&metadata.=v&metadata.k=", true, true, NULL},
                {"0", NULL, NULL, NULL, NULL, false, false, "limit must be 1 to 1000"},
                {"1001", NULL, NULL, NULL, NULL, false, false, "limit must be 1 to 1000"},
                {"", NULL, NULL, NULL, NULL, false, false, "limit must be 1 to 1000"},
                {"5x", NULL, NULL, NULL, NULL, false, false, "limit must be 1 to 1000"},
                {"99999999999999999999999", NULL, NULL, NULL, NULL, false, false, "limit must be 1 to 1000"},
                {NULL, NULL, "a=1&b=2&c=3&d=4&e=5&f=6&g=7&h=8&i=9", NULL, NULL, false, false, "at most 8 pairs"},
                {NULL, NULL, "novalue", NULL, NULL, false, false, "expected key=value"},
                {NULL, NULL, NULL, "stopped", NULL, false, false, "state must be running or paused"},
                {NULL, NULL, NULL, "running,,paused", NULL, false, false, "state must be running or paused"},
                {NULL, NULL, NULL, "Running", NULL, false, false, "state must be running or paused"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_buf_ sp_buf target = SP_BUF_INIT;
                _cleanup_error_ sp_error *e = NULL;
                bool running = false, paused = false;
                int rc = e2b_request_list(cases[i].limit, cases[i].next, cases[i].metadata, cases[i].state, &target,
                                          &running, &paused, &e);
                if (cases[i].target) {
                        ck_assert_msg(rc == 0, "case %zu: %s", i, e ? e->message : "");
                        ck_assert_str_eq(target.data, cases[i].target);
                        ck_assert_int_eq(running, cases[i].running);
                        ck_assert_int_eq(paused, cases[i].paused);
                } else {
                        ck_assert_msg(rc < 0, "case %zu accepted", i);
                        ck_assert_int_eq(e->code, SP_E_INVALID);
                        ck_assert_msg(strstr(e->message, cases[i].message), "case %zu: %s", i, e->message);
                }
        }
}
END_TEST

/* allowPublicTraffic → our ingress mode; the public API's ingress URL → E2B's domain. */
START_TEST(ports)
{
        static const struct {
                const char *body, *mode; /* mode NULL: refused */
        } cases[] = {
                {"{}", "public"},
                {"{\"network\":{}}", "public"},
                {"{\"network\":{\"allowPublicTraffic\":true}}", "public"},
                {"{\"network\":{\"allowPublicTraffic\":null}}", "public"},
                {"{\"network\":{\"allowPublicTraffic\":false}}", "token"},
                {"{\"network\":{\"allowPublicTraffic\":\"no\"}}", NULL},
                {"{\"network\":[]}", NULL},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                _cleanup_json_ json_object *in = body_ok(cases[i].body);
                const char *mode = NULL;
                _cleanup_error_ sp_error *e = NULL;
                int rc = e2b_request_ingress(in, &mode, &e);
                if (cases[i].mode) {
                        ck_assert_msg(rc == 0, "case %zu: %s", i, e ? e->message : "");
                        ck_assert_str_eq(mode, cases[i].mode);
                } else {
                        ck_assert_msg(rc < 0 && e && e->code == SP_E_INVALID, "case %zu accepted", i);
                }
        }
        char d[E2B_DOMAIN_MAX];
        ck_assert(e2b_ingress_domain("http://{port}-sbx-0123456789abcdefghjk.localhost:7071/", d, sizeof(d)));
        ck_assert_str_eq(d, "localhost:7071");
        ck_assert(e2b_ingress_domain("https://{port}-sbx-0123456789abcdefghjk.sandboxes.example.com/", d, sizeof(d)));
        ck_assert_str_eq(d, "sandboxes.example.com");
        static const char *const bad[] = {"", "localhost", "http://localhost:7071/", "http:///x", "{port}-a.b"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                ck_assert_msg(!e2b_ingress_domain(bad[i], d, sizeof(d)), "%s accepted", bad[i]);
                ck_assert_str_eq(d, "");
        }
        char small[8];
        ck_assert(!e2b_ingress_domain("http://{port}-sbx-0123456789abcdefghjk.localhost:7071/", small, sizeof(small)));
}
END_TEST

START_TEST(logs_query)
{
        static const struct {
                const char *start, *limit;
                int64_t want_start;
                size_t want_limit; /* 0: refused */
        } cases[] = {
                {NULL, NULL, 0, 1000},
                {"", "", 0, 1000},
                {"1764763658038", NULL, 1764763658038, 1000},
                {"0", "1", 0, 1},
                {NULL, "1000", 0, 1000},
                {NULL, "1001", 0, 0},
                {NULL, "0", 0, 0},
                {NULL, "-1", 0, 0},
                {NULL, " 5", 0, 0},
                {NULL, "5x", 0, 0},
                {"-5", NULL, 0, 0},
                {"1.5", NULL, 0, 0},
                {"soon", NULL, 0, 0},
                {"1234567890123456", NULL, 0, 0}, /* past the year 33000 */
                {NULL, "99999999999999999999", 0, 0},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int64_t start = -7;
                size_t limit = 7;
                _cleanup_error_ sp_error *e = NULL;
                int rc = e2b_request_logs(cases[i].start, cases[i].limit, 1000, &start, &limit, &e);
                if (cases[i].want_limit) {
                        ck_assert_msg(rc == 0, "case %zu: %s", i, e ? e->message : "");
                        ck_assert_int_eq(start, cases[i].want_start);
                        ck_assert_uint_eq(limit, cases[i].want_limit);
                } else {
                        ck_assert_msg(rc < 0 && e && e->code == SP_E_INVALID, "case %zu accepted", i);
                        ck_assert_int_eq(start, -7);
                        ck_assert_uint_eq(limit, 7);
                }
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_rest");
        TCase *tc = tcase_create("rest");
        tcase_add_test(tc, bodies);
        tcase_add_test(tc, creates);
        tcase_add_test(tc, network_options_become_egress);
        tcase_add_test(tc, timeouts);
        tcase_add_test(tc, lists);
        tcase_add_test(tc, ports);
        tcase_add_test(tc, logs_query);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
