/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the incremental HTTP/1.1 response parser of the client (no
 * sockets) — framing, interim responses, keep-alive, end of stream, limits and
 * malformed input, each fed at once and byte by byte. */
#include <string.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/http_client.h"

typedef struct result {
        sp_http_response_parser *p;
        int outcome; /* 0 complete, -1 incomplete, 1 error */
        size_t consumed;
        sp_buf body;
        int heads;
} result;

static void result_free(result *r)
{
        sp_http_response_parser_free(r->p);
        sp_buf_free(&r->body);
}
#define _cleanup_result_ __attribute__((cleanup(result_free)))

/* Parses len bytes of s in pieces of step bytes (0: at once) until DONE or
 * ERROR; with eof, then tells the parser the connection ended. */
static result parse_ex(const char *method, const char *s, size_t len, size_t step, bool eof,
                       const sp_http_response_limits *lim)
{
        result r = {.p = sp_http_response_parser_new(method, lim), .outcome = -1};
        size_t off = 0;
        for (int guard = 0; guard < 1000000; guard++) {
                size_t n = step && len - off > step ? step : len - off;
                size_t used, blen;
                const char *body;
                sp_http_parse_event ev = sp_http_response_parser_feed(r.p, s + off, n, &used, &body, &blen);
                ck_assert_uint_le(used, n);
                off += used;
                if (ev == SP_HTTP_PARSE_ERROR) {
                        r.outcome = 1;
                        break;
                }
                if (ev == SP_HTTP_PARSE_HEAD)
                        r.heads++;
                if (ev == SP_HTTP_PARSE_BODY) {
                        ck_assert_ptr_eq(body + blen, s + off);
                        ck_assert_uint_gt(blen, 0);
                        sp_buf_append(&r.body, body, blen, NULL);
                }
                if (ev == SP_HTTP_PARSE_DONE) {
                        r.outcome = 0;
                        break;
                }
                if (ev == SP_HTTP_PARSE_AGAIN && off == len)
                        break;
        }
        if (r.outcome == -1 && eof)
                r.outcome = sp_http_response_parser_eof(r.p) == SP_HTTP_PARSE_DONE ? 0 : 1;
        r.consumed = off;
        return r;
}

static result parse(const char *s, size_t step)
{
        return parse_ex("GET", s, strlen(s), step, false, NULL);
}

/* The outcome is the same fed at once and byte by byte. */
static int outcome_both(const char *method, const char *s, bool eof)
{
        _cleanup_result_ result a = parse_ex(method, s, strlen(s), 0, eof, NULL);
        _cleanup_result_ result b = parse_ex(method, s, strlen(s), 1, eof, NULL);
        ck_assert_int_eq(a.outcome, b.outcome);
        ck_assert_uint_eq(a.consumed, b.consumed);
        ck_assert_uint_eq(a.body.len, b.body.len);
        if (a.body.len)
                ck_assert_mem_eq(a.body.data, b.body.data, a.body.len);
        return a.outcome;
}

START_TEST(content_length_response)
{
        const char *s = "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nX-A:  spaced \t\r\n"
                        "Content-Length: 7\r\n\r\n{\"a\":1}HTTP/1.1 200 OK\r\n";
        for (size_t step = 0; step < 4; step++) {
                _cleanup_result_ result r = parse(s, step);
                ck_assert_int_eq(r.outcome, 0);
                ck_assert_int_eq(r.heads, 1);
                ck_assert_str_eq(r.body.data, "{\"a\":1}");
                /* The next response is not consumed. */
                ck_assert_str_eq(s + r.consumed, "HTTP/1.1 200 OK\r\n");
                ck_assert_int_eq(sp_http_response_parser_status(r.p), 201);
                ck_assert_str_eq(sp_http_response_parser_reason(r.p), "Created");
                ck_assert_int_eq(sp_http_response_parser_version_minor(r.p), 1);
                ck_assert_str_eq(sp_http_response_parser_header(r.p, "x-a"), "spaced");
                ck_assert_str_eq(sp_http_response_parser_header(r.p, "CONTENT-TYPE"), "application/json");
                ck_assert_ptr_null(sp_http_response_parser_header(r.p, "missing"));
                ck_assert_uint_eq(sp_http_response_parser_header_count(r.p), 3);
                const char *n, *v;
                ck_assert(sp_http_response_parser_header_at(r.p, 1, &n, &v));
                ck_assert_str_eq(n, "X-A");
                ck_assert(!sp_http_response_parser_header_at(r.p, 3, &n, &v));
                ck_assert_int_eq(sp_http_response_parser_content_length(r.p), 7);
                ck_assert(sp_http_response_parser_keep_alive(r.p));
                ck_assert(sp_http_response_parser_done(r.p));
                ck_assert_uint_eq(sp_http_response_parser_body_received(r.p), 7);
        }
        /* An empty reason phrase, with or without its space. */
        _cleanup_result_ result e1 = parse("HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n", 0);
        ck_assert_int_eq(e1.outcome, 0);
        ck_assert_str_eq(sp_http_response_parser_reason(e1.p), "");
        _cleanup_result_ result e2 = parse("HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", 0);
        ck_assert_int_eq(e2.outcome, 0);
        ck_assert_int_eq(sp_http_response_parser_status(e2.p), 404);
}
END_TEST

START_TEST(chunked_response_with_extensions_and_trailers)
{
        const char *s = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "5\r\nhello\r\n1;ext=1\r\n \r\nA \t;x\r\n0123456789\r\n0\r\nTrailer-A: 1\r\n\r\nXYZ";
        for (size_t step = 0; step < 5; step++) {
                _cleanup_result_ result r = parse(s, step);
                ck_assert_int_eq(r.outcome, 0);
                ck_assert_str_eq(r.body.data, "hello 0123456789");
                ck_assert_str_eq(s + r.consumed, "XYZ");
                ck_assert(sp_http_response_parser_chunked(r.p));
                ck_assert_int_eq(sp_http_response_parser_content_length(r.p), -1);
                ck_assert(sp_http_response_parser_keep_alive(r.p));
        }
        const char *bad[] = {
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nx\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5 \r\nhello\r\n0\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloX\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nbad trailer\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA:\x01\r\n\r\n",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++)
                ck_assert_msg(outcome_both("GET", bad[i], false) == 1, "accepted: %s", bad[i]);
}
END_TEST

START_TEST(body_until_close)
{
        const char *s = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nall of this";
        _cleanup_result_ result r = parse_ex("GET", s, strlen(s), 3, true, NULL);
        ck_assert_int_eq(r.outcome, 0);
        ck_assert_str_eq(r.body.data, "all of this");
        ck_assert(!sp_http_response_parser_keep_alive(r.p));
        ck_assert_int_eq(sp_http_response_parser_content_length(r.p), -1);
        ck_assert(!sp_http_response_parser_chunked(r.p));
        /* Without the end of the stream it is not complete. */
        _cleanup_result_ result open = parse(s, 0);
        ck_assert_int_eq(open.outcome, -1);
        ck_assert(!sp_http_response_parser_done(open.p));
}
END_TEST

START_TEST(responses_without_a_body)
{
        /* HEAD: the Content-Length is the resource's, not a body. */
        const char *h = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
        _cleanup_result_ result r = parse_ex("HEAD", h, strlen(h), 0, false, NULL);
        ck_assert_int_eq(r.outcome, 0);
        ck_assert_uint_eq(r.body.len, 0);
        ck_assert_int_eq(sp_http_response_parser_content_length(r.p), 0);
        const char *none[] = {"HTTP/1.1 204 No Content\r\n\r\n",
                              "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
                              "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(none); i++) {
                _cleanup_result_ result n = parse(none[i], 0);
                ck_assert_msg(n.outcome == 0 && n.body.len == 0, "%s", none[i]);
                ck_assert_uint_eq(n.consumed, strlen(none[i]));
                ck_assert(sp_http_response_parser_keep_alive(n.p));
        }
}
END_TEST

START_TEST(interim_responses_skipped)
{
        const char *s = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 102 Processing\r\nX-Step: 1\r\n\r\n"
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        for (size_t step = 0; step < 3; step++) {
                _cleanup_result_ result r = parse(s, step);
                ck_assert_int_eq(r.outcome, 0);
                ck_assert_int_eq(r.heads, 1);
                ck_assert_int_eq(sp_http_response_parser_status(r.p), 200);
                ck_assert_ptr_null(sp_http_response_parser_header(r.p, "x-step"));
                ck_assert_str_eq(r.body.data, "ok");
        }
        /* No upgrade was asked for. */
        ck_assert_int_eq(outcome_both("GET", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", false), 1);
        /* An endless stream of interim responses is refused. */
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        for (int i = 0; i <= SP_HTTP_RESPONSE_MAX_INTERIM; i++)
                sp_buf_append_str(&many, "HTTP/1.1 100 Continue\r\n\r\n", NULL);
        ck_assert_int_eq(outcome_both("GET", many.data, false), 1);
}
END_TEST

/* A relay that asked to switch protocols: 101 is the answer, with no body,
 * and what follows it is left for the new protocol. */
START_TEST(upgrade_is_final_when_allowed)
{
        static const char s[] =
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\n\r\n\x81\x02hi";
        size_t head = strlen(s) - 4;
        for (size_t step = 1; step <= sizeof(s); step += 7) {
                sp_http_response_parser *p = sp_http_response_parser_new("GET", NULL);
                sp_http_response_parser_allow_upgrade(p);
                size_t off = 0, used, blen;
                const char *body;
                sp_http_parse_event ev = SP_HTTP_PARSE_AGAIN;
                while (ev == SP_HTTP_PARSE_AGAIN && off < sizeof(s) - 1) {
                        size_t n = sizeof(s) - 1 - off < step ? sizeof(s) - 1 - off : step;
                        ev = sp_http_response_parser_feed(p, s + off, n, &used, &body, &blen);
                        off += used;
                }
                ck_assert_int_eq(ev, SP_HTTP_PARSE_HEAD);
                ck_assert_uint_eq(off, head);
                ck_assert_int_eq(sp_http_response_parser_status(p), 101);
                ck_assert_int_eq(sp_http_response_parser_content_length(p), 0);
                ck_assert(!sp_http_response_parser_keep_alive(p));
                ck_assert_str_eq(sp_http_response_parser_header(p, "upgrade"), "websocket");
                ck_assert_int_eq(sp_http_response_parser_feed(p, s + off, sizeof(s) - 1 - off, &used, &body, &blen),
                                 SP_HTTP_PARSE_DONE);
                ck_assert_uint_eq(used, 0);
                sp_http_response_parser_free(p);
        }
}
END_TEST

START_TEST(keep_alive_rules)
{
        struct {
                const char *head;
                bool keep;
        } cases[] = {
                {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
                {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false},
                {"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n", false},
                {"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false},
                {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_result_ result r = parse(cases[i].head, 0);
                ck_assert_int_eq(r.outcome, 0);
                ck_assert_msg(sp_http_response_parser_keep_alive(r.p) == cases[i].keep, "%s", cases[i].head);
        }
}
END_TEST

START_TEST(framing_conflicts_and_malformed_heads)
{
        const char *bad[] = {
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                "HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\n",
                "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n",
                "HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n",
                "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
                "HTTP/2.0 200 OK\r\n\r\n",
                "HTTP/1.1 20 OK\r\n\r\n",
                "HTTP/1.1 600 Odd\r\n\r\n",
                "HTTP/1.1 099 Odd\r\n\r\n",
                "HTTP/1.1 2000 OK\r\n\r\n",
                "HTTP/1.1  200 OK\r\n\r\n",
                "http/1.1 200 OK\r\n\r\n",
                "ICY 200 OK\r\n\r\n",
                "\r\nHTTP/1.1 200 OK\r\n\r\n",
                "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
                "HTTP/1.1 200 OK\r\nA: b\rc\r\n\r\n",
                "HTTP/1.1 200 OK\r\nA : b\r\n\r\n",
                "HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
                "HTTP/1.1 200 OK\r\nNo colon\r\n\r\n",
                "HTTP/1.1 200 OK\r\nA: b\x01\r\n\r\n",
                "HTTP/1.1 200 OK\r\nA\x7f: b\r\n\r\n",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_msg(outcome_both("GET", bad[i], false) == 1, "accepted: %s", bad[i]);
                _cleanup_result_ result r = parse(bad[i], 0);
                ck_assert_ptr_nonnull(sp_http_response_parser_error(r.p));
                ck_assert_int_eq(sp_http_response_parser_status(r.p), 0);
        }
        /* NUL inside the head. */
        const char nul[] = "HTTP/1.1 200 OK\r\nA: \0b\r\n\r\n";
        _cleanup_result_ result r = parse_ex("GET", nul, sizeof(nul) - 1, 0, false, NULL);
        ck_assert_int_eq(r.outcome, 1);
        /* The same Content-Length twice is fine. */
        ck_assert_int_eq(
                outcome_both("GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab", false), 0);
        /* Once failed, it stays failed. */
        size_t used, blen;
        const char *body;
        ck_assert_int_eq(sp_http_response_parser_feed(r.p, "x", 1, &used, &body, &blen), SP_HTTP_PARSE_ERROR);
        ck_assert_int_eq(sp_http_response_parser_eof(r.p), SP_HTTP_PARSE_ERROR);
}
END_TEST

START_TEST(end_of_stream)
{
        struct {
                const char *s;
                int outcome;
                const char *message;
        } cases[] = {
                {"", 1, "connection closed before the response"},
                {"HTTP/1.1 200 OK\r\nContent-", 1, "connection closed in the response head"},
                {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", 1, "connection closed before the end of the body"},
                {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", 1,
                 "connection closed before the end of the body"},
                {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 0, NULL},
                {"HTTP/1.1 200 OK\r\n\r\n", 0, NULL},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_result_ result r = parse_ex("GET", cases[i].s, strlen(cases[i].s), 0, true, NULL);
                ck_assert_msg(r.outcome == cases[i].outcome, "%s", cases[i].s);
                if (cases[i].message)
                        ck_assert_str_eq(sp_http_response_parser_error(r.p), cases[i].message);
        }
        /* A head without a body framed by the end of the stream completes at EOF
         * even before the parser was fed again after HEAD. */
        const char *s = "HTTP/1.1 200 OK\r\n\r\n";
        sp_http_response_parser *p = sp_http_response_parser_new("GET", NULL);
        size_t used, blen;
        const char *body;
        ck_assert_int_eq(sp_http_response_parser_feed(p, s, strlen(s), &used, &body, &blen), SP_HTTP_PARSE_HEAD);
        ck_assert_int_eq(sp_http_response_parser_eof(p), SP_HTTP_PARSE_DONE);
        sp_http_response_parser_free(p);
}
END_TEST

START_TEST(limits)
{
        sp_http_response_limits lim = {.max_head_bytes = 64, .max_headers = 2, .max_chunk_line = 8};
        const char *fits = "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nContent-Length: 0\r\n\r\n";
        _cleanup_result_ result r1 = parse_ex("GET", fits, strlen(fits), 0, false, &lim);
        ck_assert_int_eq(r1.outcome, 1); /* three fields */
        ck_assert_str_eq(sp_http_response_parser_error(r1.p), "too many header fields");
        const char *two = "HTTP/1.1 200 OK\r\nA: 1\r\nContent-Length: 0\r\n\r\n";
        _cleanup_result_ result r2 = parse_ex("GET", two, strlen(two), 1, false, &lim);
        ck_assert_int_eq(r2.outcome, 0);
        const char *big = "HTTP/1.1 200 OK\r\nA: 0123456789012345678901234567890123456789012345678\r\n\r\n";
        _cleanup_result_ result r3 = parse_ex("GET", big, strlen(big), 1, false, &lim);
        ck_assert_int_eq(r3.outcome, 1);
        ck_assert_str_eq(sp_http_response_parser_error(r3.p), "response head too large");
        const char *chunk = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;abcdefgh\r\nx\r\n0\r\n\r\n";
        _cleanup_result_ result r4 = parse_ex("GET", chunk, strlen(chunk), 0, false, &lim);
        ck_assert_int_eq(r4.outcome, 1);
        const char *trailers = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        _cleanup_result_ result r5 = parse_ex("GET", trailers, strlen(trailers), 0, false, &lim);
        ck_assert_int_eq(r5.outcome, 1);
        ck_assert_str_eq(sp_http_response_parser_error(r5.p), "too many trailer fields");
}
END_TEST

START_TEST(accessors_before_head)
{
        sp_http_response_parser *p = sp_http_response_parser_new(NULL, NULL);
        ck_assert_int_eq(sp_http_response_parser_status(p), 0);
        ck_assert_ptr_null(sp_http_response_parser_reason(p));
        ck_assert_ptr_null(sp_http_response_parser_header(p, "a"));
        ck_assert_uint_eq(sp_http_response_parser_header_count(p), 0);
        ck_assert(!sp_http_response_parser_keep_alive(p));
        ck_assert_ptr_null(sp_http_response_parser_error(p));
        size_t used, blen;
        const char *body;
        ck_assert_int_eq(sp_http_response_parser_feed(p, NULL, 0, &used, &body, &blen), SP_HTTP_PARSE_AGAIN);
        ck_assert_uint_eq(sp_http_response_parser_bytes_seen(p), 0);
        ck_assert_int_eq(sp_http_response_parser_feed(p, "HTTP/1.1 2", 10, &used, &body, &blen), SP_HTTP_PARSE_AGAIN);
        ck_assert_uint_eq(sp_http_response_parser_bytes_seen(p), 10);
        ck_assert_int_eq(sp_http_response_parser_status(p), 0);
        sp_http_response_parser_free(p);
        ck_assert_ptr_null(sp_http_response_parser_free(NULL));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("http_response");
        TCase *tc = tcase_create("parser");
        tcase_add_test(tc, content_length_response);
        tcase_add_test(tc, chunked_response_with_extensions_and_trailers);
        tcase_add_test(tc, body_until_close);
        tcase_add_test(tc, responses_without_a_body);
        tcase_add_test(tc, interim_responses_skipped);
        tcase_add_test(tc, upgrade_is_final_when_allowed);
        tcase_add_test(tc, keep_alive_rules);
        tcase_add_test(tc, framing_conflicts_and_malformed_heads);
        tcase_add_test(tc, end_of_stream);
        tcase_add_test(tc, limits);
        tcase_add_test(tc, accessors_before_head);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
