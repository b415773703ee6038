/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the data plane's request parsing (route/request.h) — where an
 * attach starts (Last-Event-ID over ?offset=), the query parameters of each
 * route, a template upload's Content-Length against its token's bound,
 * resize and signal bodies — and where a token is found
 * (auth/token.h: header, query parameter, both, neither).
 */
#include <signal.h>
#include <string.h>

#include "auth/token.h"
#include "harness.h"
#include "route/request.h"
#include "space/cleanup.h"
#include "space/http_parser.h"

/* Parses a request head (target and extra header lines). */
static sp_http_parser *head(const char *target, const char *headers)
{
        char text[16384];
        snprintf(text, sizeof(text), "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", target, headers ? headers : "");
        sp_http_parser *p = sp_http_parser_new(NULL);
        size_t used = 0, blen = 0;
        const char *body = NULL;
        ck_assert_int_eq(sp_http_parser_feed(p, text, strlen(text), &used, &body, &blen), SP_HTTP_PARSE_HEAD);
        return p;
}

SP_DEFINE_CLEANUP(sp_http_parser *, sp_http_parser_free)

START_TEST(attach_start_offsets)
{
        struct {
                const char *target, *headers;
                int ok;
                bool given;
                uint64_t offset;
                const char *message;
                bool raw;
        } cases[] = {
                {"/a", NULL, 1, false, 0, NULL, false},
                {"/a?format=raw", NULL, 1, false, 0, NULL, true},
                {"/a?format=sse&offset=5", NULL, 1, true, 5, NULL, false},
                {"/a?offset=5&format=raw", "Last-Event-ID: 6\r\n", 1, true, 6, NULL, true},
                {"/a?format=RAW", NULL, 0, false, 0, "'format' must be sse or raw", false},
                {"/a?format=", NULL, 0, false, 0, "'format' must be sse or raw", false},
                {"/a?format=raw&format=raw", NULL, 0, false, 0, "given twice", false},
                {"/a?offset=42", NULL, 1, true, 42, NULL, false},
                {"/a?offset=0", NULL, 1, true, 0, NULL, false},
                {"/a", "Last-Event-ID: 7\r\n", 1, true, 7, NULL, false},
                {"/a?offset=42", "Last-Event-ID: 7\r\n", 1, true, 7, NULL, false},
                {"/a?offset=9223372036854775807", NULL, 1, true, INT64_MAX, NULL, false},
                {"/a?offset=9223372036854775808", NULL, 0, false, 0, "'offset'", false},
                {"/a?offset=-1", NULL, 0, false, 0, "'offset'", false},
                {"/a?offset=+1", NULL, 0, false, 0, "'offset'", false},
                {"/a?offset=1e3", NULL, 0, false, 0, "'offset'", false},
                {"/a?offset=", NULL, 0, false, 0, "'offset'", false},
                {"/a", "Last-Event-ID: x\r\n", 0, false, 0, "Last-Event-ID", false},
                {"/a?offset=1", "Last-Event-ID: \r\n", 0, false, 0, "Last-Event-ID", false},
                {"/a?offset=1&offset=2", NULL, 0, false, 0, "given twice", false},
                {"/a?since=1", NULL, 0, false, 0, "unknown query parameter 'since'", false},
                {"/a?token=abc&offset=3", NULL, 1, true, 3, NULL, false},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_(sp_http_parser_freep) sp_http_parser *p = head(cases[i].target, cases[i].headers);
                bool given = true, raw = !cases[i].raw;
                uint64_t off = 99;
                _cleanup_error_ sp_error *e = NULL;
                int r = dp_request_attach(p, &given, &off, &raw, &e);
                if (cases[i].ok) {
                        ck_assert_msg(r == 0, "%s: %s", cases[i].target, e ? e->message : "");
                        ck_assert_int_eq(given, cases[i].given);
                        ck_assert_uint_eq(off, cases[i].offset);
                        ck_assert_int_eq(raw, cases[i].raw);
                } else {
                        ck_assert_msg(r < 0 && e->code == SP_E_INVALID, "%s accepted", cases[i].target);
                        ck_assert_msg(strstr(e->message, cases[i].message), "%s: %s", cases[i].target, e->message);
                }
        }
}
END_TEST

START_TEST(stdin_and_files_queries)
{
        bool close = true;
        _cleanup_(sp_http_parser_freep) sp_http_parser *p1 = head("/s", NULL);
        ck_assert_int_eq(dp_request_stdin(p1, &close, NULL), 0);
        ck_assert(!close);
        _cleanup_(sp_http_parser_freep) sp_http_parser *p2 = head("/s?close=true", NULL);
        ck_assert_int_eq(dp_request_stdin(p2, &close, NULL), 0);
        ck_assert(close);
        _cleanup_(sp_http_parser_freep) sp_http_parser *p3 = head("/s?close=1", NULL);
        ck_assert_int_lt(dp_request_stdin(p3, &close, NULL), 0);

        dp_file_request f;
        _cleanup_(sp_http_parser_freep) sp_http_parser *g = head("/f?path=%2Ftmp%2Fa%20b&offset=5&length=10", NULL);
        ck_assert_int_eq(dp_request_file_get(g, &f, NULL), 0);
        ck_assert_str_eq(f.path, "/tmp/a b");
        ck_assert_uint_eq(f.offset, 5);
        ck_assert(f.has_length);
        ck_assert_uint_eq(f.length, 10);
        _cleanup_(sp_http_parser_freep) sp_http_parser *u = head("/f?path=x&mode=0600&append=true", NULL);
        ck_assert_int_eq(dp_request_file_put(u, &f, NULL), 0);
        ck_assert_uint_eq(f.mode, 0600);
        ck_assert(f.append);
        ck_assert(!f.parents);
        _cleanup_(sp_http_parser_freep) sp_http_parser *d = head("/f?path=x", NULL);
        ck_assert_int_eq(dp_request_file_put(d, &f, NULL), 0);
        ck_assert_uint_eq(f.mode, 0644);
        ck_assert(!f.append);
        ck_assert(!f.parents);
        _cleanup_(sp_http_parser_freep) sp_http_parser *pa = head("/f?path=a%2Fb%2Fc&parents=true", NULL);
        ck_assert_int_eq(dp_request_file_put(pa, &f, NULL), 0);
        ck_assert_str_eq(f.path, "a/b/c");
        ck_assert(f.parents);
        ck_assert_ptr_null(f.owner);
        _cleanup_(sp_http_parser_freep) sp_http_parser *ow = head("/f?path=%2Fetc%2Fx&parents=true&owner=user", NULL);
        ck_assert_int_eq(dp_request_file_put(ow, &f, NULL), 0);
        ck_assert_str_eq(f.owner, "user");
        _cleanup_(sp_http_parser_freep) sp_http_parser *og = head("/f?path=x&owner=1000", NULL);
        ck_assert_int_eq(dp_request_file_get(og, &f, NULL), 0);
        ck_assert_str_eq(f.owner, "1000");
        const char *bad_get[] = {"/f",
                                 "/f?path=",
                                 "/f?path=x&mode=0644",
                                 "/f?path=x&offset=-1",
                                 "/f?path=x&length=a",
                                 "/f?path=x&path=y",
                                 "/f?path=x&owner=",
                                 "/f?path=x&owner=a%20b",
                                 "/f?path=x&owner=a:b",
                                 "/f?path=x&owner=u&owner=v"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_get); i++) {
                _cleanup_(sp_http_parser_freep) sp_http_parser *p = head(bad_get[i], NULL);
                ck_assert_msg(dp_request_file_get(p, &f, NULL) < 0, "GET %s accepted", bad_get[i]);
        }
        const char *bad_put[] = {"/f?path=x&mode=8",    "/f?path=x&mode=17777", "/f?path=x&mode=",
                                 "/f?path=x&append=no", "/f?path=x&offset=1",   "/f?path=x&parents=yes"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_put); i++) {
                _cleanup_(sp_http_parser_freep) sp_http_parser *p = head(bad_put[i], NULL);
                ck_assert_msg(dp_request_file_put(p, &f, NULL) < 0, "PUT %s accepted", bad_put[i]);
        }
}
END_TEST

START_TEST(template_put_query_and_length)
{
        const struct {
                const char *target, *headers;
                sp_errc code; /* SP_OK: accepted */
        } cases[] = {
                {"/t", NULL, SP_OK},
                {"/t?token=abc", "Content-Length: 10\r\n", SP_OK},
                {"/t", "Content-Length: 0\r\n", SP_OK},
                {"/t", "Transfer-Encoding: chunked\r\n", SP_OK}, /* the worker bounds it */
                {"/t", "Content-Length: 11\r\n", SP_E_TOO_LARGE},
                {"/t?token=abc", "Content-Length: 99999999999999999\r\n", SP_E_TOO_LARGE},
                {"/t?format=tar", NULL, SP_E_INVALID},
                {"/t?token=a&token=b", NULL, SP_E_INVALID},
                {"/t?x", "Content-Length: 11\r\n", SP_E_INVALID}, /* the query first */
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_(sp_http_parser_freep) sp_http_parser *p = head(cases[i].target, cases[i].headers);
                _cleanup_error_ sp_error *e = NULL;
                int r = dp_request_template_put(p, 10, &e);
                if (cases[i].code == SP_OK) {
                        ck_assert_msg(r == 0, "case %zu: %s", i, e ? e->message : "");
                } else {
                        ck_assert_msg(r < 0, "case %zu accepted", i);
                        ck_assert_int_eq(e->code, cases[i].code);
                }
        }
        _cleanup_(sp_http_parser_freep) sp_http_parser *p = head("/t", "Content-Length: 11\r\n");
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(dp_request_template_put(p, 10, &e), 0);
        ck_assert_str_eq(e->message, "the upload is larger than its 10 bytes (Content-Length 11)");
}
END_TEST

START_TEST(resize_and_signal_bodies)
{
        int rows = 0, cols = 0;
        ck_assert_int_eq(dp_request_resize("{\"rows\":33,\"cols\":101}", 22, &rows, &cols, NULL), 0);
        ck_assert_int_eq(rows, 33);
        ck_assert_int_eq(cols, 101);
        const char *bad_resize[] = {"{\"rows\":0,\"cols\":1}",
                                    "{\"rows\":1,\"cols\":10001}",
                                    "{\"rows\":1}",
                                    "{\"rows\":1,\"cols\":1,\"x\":0}",
                                    "[1,2]",
                                    "{\"rows\":\"1\",\"cols\":1}",
                                    ""};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_resize); i++) {
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(dp_request_resize(bad_resize[i], strlen(bad_resize[i]), &rows, &cols, &e) < 0 &&
                                      e->code == SP_E_INVALID,
                              "resize %s accepted", bad_resize[i]);
        }
        struct {
                const char *body;
                int sig;
        } good[] = {
                {"{\"signal\":\"TERM\"}", SIGTERM},
                {"{\"signal\":\"SIGKILL\"}", SIGKILL},
                {"{\"signal\":\"int\"}", SIGINT},
                {"{\"signal\":\"sigWinch\"}", SIGWINCH},
                {"{\"signal\":9}", 9},
                {"{\"signal\":64}", 64},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(good); i++) {
                int sig = 0;
                ck_assert_msg(dp_request_signal(good[i].body, strlen(good[i].body), &sig, NULL) == 0, "%s",
                              good[i].body);
                ck_assert_int_eq(sig, good[i].sig);
        }
        const char *bad[] = {"{\"signal\":\"SEGV\"}", "{\"signal\":0}",
                             "{\"signal\":65}",       "{\"signal\":\"SIG\"}",
                             "{\"signal\":null}",     "{}",
                             "{\"signal\":1.5}",      "{\"signal\":\"TERM\",\"x\":1}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                int sig = 0;
                ck_assert_msg(dp_request_signal(bad[i], strlen(bad[i]), &sig, NULL) < 0, "signal %s accepted", bad[i]);
        }
}
END_TEST

START_TEST(where_the_token_is)
{
        struct {
                const char *target, *headers;
                int ok;
                const char *token;
                dp_refusal reason;
                sp_errc code;
        } cases[] = {
                {"/a", "Authorization: Bearer v1.x.y\r\n", 1, "v1.x.y", 0, 0},
                {"/a", "Authorization: bearer   v1.x.y\r\n", 1, "v1.x.y", 0, 0},
                {"/a?token=v1.q.r", NULL, 1, "v1.q.r", 0, 0},
                {"/a", NULL, 0, NULL, DP_REFUSE_MISSING, SP_E_UNAUTHENTICATED},
                {"/a", "Authorization: Basic abc\r\n", 0, NULL, DP_REFUSE_MALFORMED, SP_E_UNAUTHENTICATED},
                {"/a", "Authorization: Bearer\r\n", 0, NULL, DP_REFUSE_MALFORMED, SP_E_UNAUTHENTICATED},
                {"/a", "Authorization: Bearer a b\r\n", 0, NULL, DP_REFUSE_MALFORMED, SP_E_UNAUTHENTICATED},
                {"/a?token=", NULL, 0, NULL, DP_REFUSE_MALFORMED, SP_E_UNAUTHENTICATED},
                {"/a?token=v1.q.r", "Authorization: Bearer v1.x.y\r\n", 0, NULL, DP_REFUSE_AMBIGUOUS, SP_E_INVALID},
                {"/a?token=a&token=b", NULL, 0, NULL, DP_REFUSE_AMBIGUOUS, SP_E_INVALID},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_(sp_http_parser_freep) sp_http_parser *p = head(cases[i].target, cases[i].headers);
                const char *tok = NULL;
                dp_refusal reason = DP_REFUSE__MAX;
                _cleanup_error_ sp_error *e = NULL;
                int r = dp_token_find(p, &tok, &reason, &e);
                if (cases[i].ok) {
                        ck_assert_msg(r == 0, "case %zu: %s", i, e ? e->message : "");
                        ck_assert_str_eq(tok, cases[i].token);
                } else {
                        ck_assert_msg(r < 0, "case %zu accepted", i);
                        ck_assert_int_eq(reason, cases[i].reason);
                        ck_assert_int_eq(e->code, cases[i].code);
                }
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("dp_request");
        TCase *tc = tcase_create("request");
        tcase_add_test(tc, attach_start_offsets);
        tcase_add_test(tc, stdin_and_files_queries);
        tcase_add_test(tc, template_put_query_and_length);
        tcase_add_test(tc, resize_and_signal_bodies);
        tcase_add_test(tc, where_the_token_is);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
