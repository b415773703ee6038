/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the incremental HTTP/1.1 request parser (no sockets). */
#include <string.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/http_parser.h"

typedef struct result {
        sp_http_parser *p;
        int status; /* 0 complete, -1 incomplete, else the error status */
        size_t consumed;
        sp_buf body;
        int heads;
} result;

static void result_free(result *r)
{
        sp_http_parser_free(r->p);
        sp_buf_free(&r->body);
}
#define _cleanup_result_ __attribute__((cleanup(result_free)))

/* Parses s, fed in pieces of step bytes (0: at once), until DONE or ERROR. */
static result parse_lim(const char *s, size_t len, size_t step, const sp_http_limits *lim)
{
        result r = {.p = sp_http_parser_new(lim), .status = -1};
        size_t off = 0;
        for (int guard = 0; guard < 1000000; guard++) {
                size_t n = step && len - off > step ? step : len - off;
                size_t used, blen;
                const char *body;
                sp_http_parse_event ev = sp_http_parser_feed(r.p, s + off, n, &used, &body, &blen);
                ck_assert_uint_le(used, n);
                off += used;
                if (ev == SP_HTTP_PARSE_ERROR) {
                        r.status = sp_http_parser_error(r.p, NULL, NULL);
                        break;
                }
                if (ev == SP_HTTP_PARSE_HEAD)
                        r.heads++;
                if (ev == SP_HTTP_PARSE_BODY) {
                        ck_assert_ptr_eq(body + blen, s + off);
                        sp_buf_append(&r.body, body, blen, NULL);
                }
                if (ev == SP_HTTP_PARSE_DONE) {
                        r.status = 0;
                        break;
                }
                if (ev == SP_HTTP_PARSE_AGAIN && off == len)
                        break;
        }
        r.consumed = off;
        return r;
}

static result parse(const char *s, size_t step)
{
        return parse_lim(s, strlen(s), step, NULL);
}

static int status_of(const char *s)
{
        /* every split must agree */
        int status = 0;
        size_t steps[] = {0, 1, 2, 7};
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
                _cleanup_result_ result r = parse(s, steps[i]);
                if (i == 0)
                        status = r.status;
                ck_assert_int_eq(r.status, status);
        }
        return status;
}

START_TEST(simple_get)
{
        const char *req = "GET /v1/a%20b/c?x=1&y=two+words&flag&e=%26%3D HTTP/1.1\r\n"
                          "Host: example\r\n"
                          "X-Thing:   padded value  \r\n"
                          "x-thing: second\r\n"
                          "\r\n";
        size_t steps[] = {0, 1, 3};
        for (size_t i = 0; i < 3; i++) {
                _cleanup_result_ result r = parse(req, steps[i]);
                ck_assert_int_eq(r.status, 0);
                ck_assert_int_eq(r.heads, 1);
                ck_assert_uint_eq(r.consumed, strlen(req));
                ck_assert_str_eq(sp_http_parser_method(r.p), "GET");
                ck_assert_str_eq(sp_http_parser_path(r.p), "/v1/a b/c");
                ck_assert_str_eq(sp_http_parser_raw_path(r.p), "/v1/a%20b/c");
                ck_assert_str_eq(sp_http_parser_query(r.p, "x"), "1");
                ck_assert_str_eq(sp_http_parser_query(r.p, "y"), "two words");
                ck_assert_str_eq(sp_http_parser_query(r.p, "flag"), "");
                ck_assert_str_eq(sp_http_parser_query(r.p, "e"), "&=");
                ck_assert_ptr_null(sp_http_parser_query(r.p, "z"));
                ck_assert_uint_eq(sp_http_parser_query_count(r.p), 4);
                ck_assert_str_eq(sp_http_parser_header(r.p, "X-THING"), "padded value");
                ck_assert_uint_eq(sp_http_parser_header_count(r.p), 3);
                const char *n, *v;
                ck_assert(sp_http_parser_header_at(r.p, 2, &n, &v));
                ck_assert_str_eq(v, "second");
                ck_assert(!sp_http_parser_header_at(r.p, 3, &n, &v));
                ck_assert(sp_http_parser_keep_alive(r.p));
                ck_assert_int_eq(sp_http_parser_version_minor(r.p), 1);
                ck_assert_int_eq(sp_http_parser_content_length(r.p), 0);
                ck_assert(sp_http_parser_done(r.p));
        }
}
END_TEST

START_TEST(keep_alive_rules)
{
        _cleanup_result_ result a = parse("GET / HTTP/1.0\r\n\r\n", 0);
        ck_assert_int_eq(a.status, 0);
        ck_assert(!sp_http_parser_keep_alive(a.p));
        _cleanup_result_ result b = parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", 0);
        ck_assert(sp_http_parser_keep_alive(b.p));
        _cleanup_result_ result c = parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: foo, close\r\n\r\n", 0);
        ck_assert(!sp_http_parser_keep_alive(c.p));
        _cleanup_result_ result d = parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\n\r\n", 0);
        ck_assert(sp_http_parser_keep_alive(d.p));
        /* blank lines before the request line are tolerated */
        _cleanup_result_ result e = parse("\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n", 1);
        ck_assert_int_eq(e.status, 0);
        ck_assert_str_eq(sp_http_parser_method(e.p), "GET");
}
END_TEST

START_TEST(content_length_body_and_pipelining)
{
        const char *two =
                "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /y HTTP/1.1\r\nHost: h\r\n\r\n";
        for (size_t step = 0; step < 4; step++) {
                _cleanup_result_ result r = parse(two, step);
                ck_assert_int_eq(r.status, 0);
                ck_assert_str_eq(r.body.data, "hello");
                /* stops exactly at the end of the first message */
                ck_assert_str_eq(two + r.consumed, "GET /y HTTP/1.1\r\nHost: h\r\n\r\n");
                ck_assert_uint_eq(sp_http_parser_body_received(r.p), 5);
        }
        /* identical duplicate Content-Length is accepted */
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"),
                         0);
}
END_TEST

START_TEST(chunked_body_with_trailers)
{
        const char *req = "POST /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5\r\nhello\r\n"
                          "6;name=value\r\n world\r\n"
                          "A \t;x\r\n0123456789\r\n"
                          "0\r\n"
                          "Checksum: abc\r\n"
                          "\r\n"
                          "NEXT";
        for (size_t step = 0; step < 5; step++) {
                _cleanup_result_ result r = parse(req, step);
                ck_assert_int_eq(r.status, 0);
                ck_assert(sp_http_parser_chunked(r.p));
                ck_assert_int_eq(sp_http_parser_content_length(r.p), -1);
                ck_assert_str_eq(r.body.data, "hello world0123456789");
                ck_assert_str_eq(req + r.consumed, "NEXT");
                /* trailers do not become headers */
                ck_assert_ptr_null(sp_http_parser_header(r.p, "checksum"));
        }
        /* malformed chunk framing */
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nZ\r\n"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nab\r\n"),
                         400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   "1000000000000000\r\n"),
                         400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\nab\r\n"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   "0\r\nbad trailer\r\n\r\n"),
                         400);
}
END_TEST

START_TEST(smuggling_rejected)
{
        /* CL + TE, in both orders and with case games */
        ck_assert_int_eq(
                status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "0\r\n\r\n"),
                400);
        ck_assert_int_eq(
                status_of("POST / HTTP/1.1\r\nHost: h\r\ntransfer-encoding: CHUNKED\r\ncontent-length: 0\r\n\r\n"),
                400);
        /* differing duplicate Content-Length, lists, signs, spaces */
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"),
                         400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 1\r\n\r\na"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\na"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1 2\r\n\r\na"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 99999999999999999999\r\n\r\n"), 400);
        /* transfer codings other than a single chunked */
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n"),
                         400);
        ck_assert_int_eq(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), 400);
        /* obs-fold, whitespace before the colon, bare CR / LF, NUL */
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n b\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding : chunked\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\n Host: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/1.1\nHost: h\n\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nHost: h\r\nX: a\001b\r\n\r\n"), 400);
        static const char nul[] = "GET / HTTP/1.1\r\nHost: h\0\r\n\r\n";
        _cleanup_result_ result r = parse_lim(nul, sizeof(nul) - 1, 0, NULL);
        ck_assert_int_eq(r.status, 400);
        /* Host: exactly one on HTTP/1.1 */
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
}
END_TEST

START_TEST(malformed_request_lines)
{
        ck_assert_int_eq(status_of("GET\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET  / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/1.1 \r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("G(T / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTX/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET / HTTP/2.0\r\nHost: h\r\n\r\n"), 505);
        ck_assert_int_eq(status_of("GET http://h/ HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET * HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /\x80 HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        /* percent-encoding and dot segments */
        ck_assert_int_eq(status_of("GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a%2 HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a%00b HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a?x=%00 HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a/../b HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a/%2e%2E/b HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a/. HTTP/1.1\r\nHost: h\r\n\r\n"), 400);
        ck_assert_int_eq(status_of("GET /a/..b/.c HTTP/1.1\r\nHost: h\r\n\r\n"), 0);
        /* expectations */
        ck_assert_int_eq(status_of("GET / HTTP/1.1\r\nHost: h\r\nExpect: teapot\r\n\r\n"), 417);
        _cleanup_result_ result e =
                parse("PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nx", 0);
        ck_assert_int_eq(e.status, 0);
        ck_assert(sp_http_parser_expect_continue(e.p));
}
END_TEST

static char *repeat(char c, size_t n)
{
        char *s = malloc(n + 1);
        memset(s, c, n);
        s[n] = '\0';
        return s;
}

START_TEST(limits)
{
        sp_http_limits lim = {.max_head_bytes = 1024,
                              .max_headers = 4,
                              .max_uri = 256,
                              .max_body = 10,
                              .max_chunk_line = 16,
                              .max_query_params = 3};
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_free_ char *longpath = repeat('a', 300);
        _cleanup_free_ char *longval = repeat('v', 2000);

        sp_buf_appendf(&b, NULL, "GET /%s HTTP/1.1\r\nHost: h\r\n\r\n", longpath);
        for (size_t step = 0; step < 2; step++) {
                _cleanup_result_ result r = parse_lim(b.data, b.len, step, &lim);
                ck_assert_int_eq(r.status, 414);
        }
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "GET / HTTP/1.1\r\nHost: h\r\nX: %s\r\n\r\n", longval);
        {
                _cleanup_result_ result r = parse_lim(b.data, b.len, 0, &lim);
                ck_assert_int_eq(r.status, 431);
                sp_errc code;
                const char *msg;
                ck_assert_int_eq(sp_http_parser_error(r.p, &code, &msg), 431);
                ck_assert_int_eq(code, SP_E_TOO_LARGE);
                ck_assert_ptr_nonnull(msg);
        }
        const char *many = "GET / HTTP/1.1\r\nHost: h\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
        {
                _cleanup_result_ result r = parse_lim(many, strlen(many), 0, &lim);
                ck_assert_int_eq(r.status, 431);
        }
        const char *q = "GET /?a&b&c&d HTTP/1.1\r\nHost: h\r\n\r\n";
        {
                _cleanup_result_ result r = parse_lim(q, strlen(q), 0, &lim);
                ck_assert_int_eq(r.status, 400);
        }
        const char *big = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n";
        {
                _cleanup_result_ result r = parse_lim(big, strlen(big), 0, &lim);
                ck_assert_int_eq(r.status, 413);
        }
        const char *bigc = "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\naaaaa\r\n6\r\n";
        {
                _cleanup_result_ result r = parse_lim(bigc, strlen(bigc), 1, &lim);
                ck_assert_int_eq(r.status, 413);
                ck_assert_str_eq(r.body.data, "aaaaa");
        }
        const char *chunkline =
                "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;aaaaaaaaaaaaaaaaaaaa\r\n";
        {
                _cleanup_result_ result r = parse_lim(chunkline, strlen(chunkline), 0, &lim);
                ck_assert_int_eq(r.status, 400);
        }
        /* the route's limit, set after HEAD */
        const char *body = "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 8\r\n\r\n12345678";
        sp_http_parser *p = sp_http_parser_new(&lim);
        size_t used, blen;
        const char *bp;
        ck_assert_int_eq(sp_http_parser_feed(p, body, strlen(body), &used, &bp, &blen), SP_HTTP_PARSE_HEAD);
        ck_assert_int_eq(sp_http_parser_set_max_body(p, 7), -SP_E_TOO_LARGE);
        ck_assert_int_eq(sp_http_parser_feed(p, body + used, strlen(body) - used, &used, &bp, &blen),
                         SP_HTTP_PARSE_ERROR);
        ck_assert_int_eq(sp_http_parser_error(p, NULL, NULL), 413);
        sp_http_parser_free(p);
}
END_TEST

START_TEST(empty_feeds_and_accessors_before_head)
{
        sp_http_parser *p = sp_http_parser_new(NULL);
        size_t used, blen;
        const char *bp;
        ck_assert_int_eq(sp_http_parser_feed(p, NULL, 0, &used, &bp, &blen), SP_HTTP_PARSE_AGAIN);
        ck_assert_uint_eq(used, 0);
        ck_assert_ptr_null(sp_http_parser_method(p));
        ck_assert_ptr_null(sp_http_parser_header(p, "host"));
        ck_assert_ptr_null(sp_http_parser_query(p, "x"));
        ck_assert_uint_eq(sp_http_parser_bytes_seen(p), 0);
        ck_assert_int_eq(sp_http_parser_error(p, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_parser_feed(p, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, &used, &bp, &blen),
                         SP_HTTP_PARSE_HEAD);
        ck_assert_uint_eq(used, 27);
        ck_assert_int_eq(sp_http_parser_feed(p, NULL, 0, &used, &bp, &blen), SP_HTTP_PARSE_DONE);
        ck_assert_int_eq(sp_http_parser_feed(p, "more", 4, &used, &bp, &blen), SP_HTTP_PARSE_DONE);
        ck_assert_uint_eq(used, 0);
        sp_http_parser_free(p);
}
END_TEST

START_TEST(percent_decode_helper)
{
        char out[32];
        size_t n;
        ck_assert_int_eq(sp_http_percent_decode("a%41+b", 6, false, out, &n), 0);
        ck_assert_str_eq(out, "aA+b");
        ck_assert_int_eq(sp_http_percent_decode("a%41+b", 6, true, out, &n), 0);
        ck_assert_str_eq(out, "aA b");
        ck_assert_uint_eq(n, 4);
        ck_assert_int_lt(sp_http_percent_decode("%4", 2, false, out, &n), 0);
        ck_assert_int_lt(sp_http_percent_decode("%00", 3, false, out, &n), 0);
        ck_assert(sp_http_strcaseeq("Content-Length", "content-LENGTH"));
        ck_assert(!sp_http_strcaseeq("Content-Length", "content-lengt"));
        ck_assert(sp_http_token_valid("X-Foo_bar", 9));
        ck_assert(!sp_http_token_valid("X Foo", 5));
        ck_assert(!sp_http_token_valid("", 0));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("http_parser");
        TCase *tc = tcase_create("parser");
        tcase_add_test(tc, simple_get);
        tcase_add_test(tc, keep_alive_rules);
        tcase_add_test(tc, content_length_body_and_pipelining);
        tcase_add_test(tc, chunked_body_with_trailers);
        tcase_add_test(tc, smuggling_rejected);
        tcase_add_test(tc, malformed_request_lines);
        tcase_add_test(tc, limits);
        tcase_add_test(tc, empty_feeds_and_accessors_before_head);
        tcase_add_test(tc, percent_decode_helper);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
