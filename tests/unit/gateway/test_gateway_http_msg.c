/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the request framing of the egress gateway (gateway/wire/
 * http_msg.h): header fields and the request line of accepted heads; each
 * framing rule and every refusal (Transfer-Encoding with Content-Length,
 * codings other than chunked, repeated or listed Content-Length, signs and
 * spaces, HTTP/1.0, upgrades with a body); chunked bodies fed whole, byte by
 * byte and split at every offset, well-formed and malformed; the streaming
 * search across splits and with self-overlapping needles. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/http_host.h"
#include "wire/http_msg.h"
#include "harness.h"
#include "space/cleanup.h"

/* An exact-size copy, so that a read past the end is caught. */
static uint8_t *copy_of(const char *s, size_t n)
{
        uint8_t *copy = malloc(n ? n : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, s, n);
        return copy;
}

/* ---- fields ---- */

typedef struct collected {
        int count, stop_at;
        char names[8][32], values[8][64], lines[8][96];
} collected;

static int collect(const gw_http_field *f, void *ud)
{
        collected *c = ud;
        ck_assert_int_lt(c->count, 8);
        snprintf(c->names[c->count], sizeof(c->names[0]), "%.*s", (int)f->name_len, f->name);
        snprintf(c->values[c->count], sizeof(c->values[0]), "%.*s", (int)f->value_len, f->value);
        snprintf(c->lines[c->count], sizeof(c->lines[0]), "%.*s", (int)f->line_len, f->line);
        c->count++;
        return c->count == c->stop_at ? 7 : 0;
}

static int fields_n(const char *s, size_t n, collected *c)
{
        uint8_t *copy = copy_of(s, n);
        int r = gw_http_fields_each(copy, n, collect, c);
        free(copy);
        return r;
}

START_TEST(fields)
{
        const char *s = "POST /up?x=1 HTTP/1.1\r\nHost: example.com\r\nX-Empty:\r\nX-Pad: \t a b \t\r\n"
                        "content-length:5\r\n\r\nhello";
        gw_http_request req;
        ck_assert_int_eq(gw_http_host_parse((const uint8_t *)s, strlen(s), 0, &req), GW_HTTP_OK);
        ck_assert_uint_eq(req.head_len, strlen(s) - 5);

        collected c = {0};
        ck_assert_int_eq(fields_n(s, req.head_len, &c), 0);
        ck_assert_int_eq(c.count, 4);
        ck_assert_str_eq(c.names[0], "Host");
        ck_assert_str_eq(c.values[0], "example.com");
        ck_assert_str_eq(c.lines[0], "Host: example.com\r\n");
        ck_assert_str_eq(c.names[1], "X-Empty");
        ck_assert_str_eq(c.values[1], "");
        ck_assert_str_eq(c.lines[1], "X-Empty:\r\n");
        ck_assert_str_eq(c.names[2], "X-Pad");
        ck_assert_str_eq(c.values[2], "a b");
        ck_assert_str_eq(c.lines[2], "X-Pad: \t a b \t\r\n");
        ck_assert_str_eq(c.names[3], "content-length");
        ck_assert_str_eq(c.values[3], "5");

        /* fn's value stops the walk and is returned. */
        collected stop = {.stop_at = 2};
        ck_assert_int_eq(fields_n(s, req.head_len, &stop), 7);
        ck_assert_int_eq(stop.count, 2);

        /* A head without fields (not one gw_http_host_parse() accepts, but
         * well-formed). */
        collected none = {0};
        ck_assert_int_eq(fields_n("GET / HTTP/1.1\r\n\r\n", 18, &none), 0);
        ck_assert_int_eq(none.count, 0);

        const char *target;
        size_t target_len;
        uint8_t *copy = copy_of(s, req.head_len);
        ck_assert_int_eq(gw_http_request_line(copy, req.head_len, &target, &target_len), 0);
        ck_assert_uint_eq(target_len, 7);
        ck_assert(memcmp(target, "/up?x=1", 7) == 0);
        ck_assert_ptr_eq(target, (const char *)copy + 5);
        free(copy);
}
END_TEST

START_TEST(fields_not_a_head)
{
        /* Bytes that gw_http_host_parse() would not accept: -1, after the
         * fields before the bad line, never reading past the end. */
        static const char *bad[] = {
                "GET / HTTP/1.1\r\nX: y\r\n",
                "GET / HTTP/1.1\r\nX: y\r\n\r",
                "GET / HTTP/1.1\r\nX: y\r\nZ\r\n\r\n",
                "GET / HTTP/1.1\r\nX: y\r\n: z\r\n\r\n",
                "GET / HTTP/1.1\r\nX: y\nZ: w\r\n\r\n",
                "GET / HTTP/1.1\n\r\n",
                "GET / HTTP/1.1",
                "",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                collected c = {0};
                int r = fields_n(bad[i], strlen(bad[i]), &c);
                if (r != -1)
                        ck_abort_msg("\"%s\": %d", bad[i], r);
                ck_assert_int_le(c.count, 1);
        }

        static const char *bad_lines[] = {
                "GET /\r\n\r\n",
                "GET / \r\n\r\n",
                "GET  HTTP/1.1\r\n\r\n",
                " / HTTP/1.1\r\n\r\n",
                "GET / HTTP/1.1\n\r\n",
                "GET / HTTP/1.1",
                "",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_lines); i++) {
                const char *target = NULL;
                size_t target_len = 0;
                size_t n = strlen(bad_lines[i]);
                uint8_t *copy = copy_of(bad_lines[i], n);
                int r = gw_http_request_line(copy, n, &target, &target_len);
                free(copy);
                if (r != -1 || target)
                        ck_abort_msg("\"%s\": %d", bad_lines[i], r);
        }
}
END_TEST

/* ---- framing ---- */

/* The framing of the request at the start of s, whose head
 * gw_http_host_parse() must accept. */
static int framing(const char *s, gw_http_framing *fr)
{
        gw_http_request req;
        gw_http_result r = gw_http_host_parse((const uint8_t *)s, strlen(s), 0, &req);
        if (r != GW_HTTP_OK)
                ck_abort_msg("\"%s\": %s (%s)", s, gw_http_result_name(r), req.reason);
        uint8_t *copy = copy_of(s, req.head_len);
        int ret = gw_http_framing_of(copy, req.head_len, req.minor_version, fr);
        free(copy);
        return ret;
}

static void check_framing(const char *s, gw_http_body_kind kind, uint64_t length, bool close)
{
        gw_http_framing fr;
        if (framing(s, &fr) != 0)
                ck_abort_msg("\"%s\": refused (%s)", s, fr.reason);
        if (fr.kind != kind || fr.length != length || fr.close != close)
                ck_abort_msg("\"%s\": kind %d length %llu close %d", s, (int)fr.kind, (unsigned long long)fr.length,
                             fr.close);
        ck_assert_ptr_null(fr.reason);
}

static void check_refused(const char *s, const char *reason)
{
        gw_http_framing fr;
        if (framing(s, &fr) != -1)
                ck_abort_msg("\"%s\": accepted (kind %d)", s, (int)fr.kind);
        ck_assert_ptr_nonnull(fr.reason);
        if (strcmp(fr.reason, reason) != 0)
                ck_abort_msg("\"%s\": \"%s\", wanted \"%s\"", s, fr.reason, reason);
        ck_assert_int_eq(fr.kind, GW_HTTP_BODY_NONE);
        ck_assert_uint_eq(fr.length, 0);
}

#define H11 "POST / HTTP/1.1\r\nHost: example.com\r\n"
#define H10 "POST / HTTP/1.0\r\nHost: example.com\r\n"

START_TEST(framing_accepted)
{
        check_framing("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", GW_HTTP_BODY_NONE, 0, false);
        check_framing(H11 "Content-Length: 5\r\n\r\nhello", GW_HTTP_BODY_LENGTH, 5, false);
        check_framing(H11 "content-length:0\r\n\r\n", GW_HTTP_BODY_LENGTH, 0, false);
        check_framing(H11 "Content-Length: \t007 \t\r\n\r\n", GW_HTTP_BODY_LENGTH, 7, false);
        check_framing(H11 "Content-Length: 999999999999999999\r\n\r\n", GW_HTTP_BODY_LENGTH, 999999999999999999ull,
                      false);
        check_framing(H11 "Transfer-Encoding: chunked\r\n\r\n", GW_HTTP_BODY_CHUNKED, 0, false);
        check_framing(H11 "transfer-encoding:  ChUnKeD \r\n\r\n", GW_HTTP_BODY_CHUNKED, 0, false);
        /* Fields that only look alike are not framing fields. */
        check_framing(H11 "Content-Lengths: 5\r\nX-Content-Length: 5\r\nTE: gzip\r\n\r\n", GW_HTTP_BODY_NONE, 0, false);

        /* close */
        check_framing(H11 "Connection: close\r\n\r\n", GW_HTTP_BODY_NONE, 0, true);
        check_framing(H11 "Connection: Keep-Alive, CLOSE\r\n\r\n", GW_HTTP_BODY_NONE, 0, true);
        check_framing(H11 "Connection: keep-alive\r\nConnection: ,close,\r\n\r\n", GW_HTTP_BODY_NONE, 0, true);
        check_framing(H11 "Connection: closed\r\n\r\n", GW_HTTP_BODY_NONE, 0, false);
        check_framing(H10 "\r\n", GW_HTTP_BODY_NONE, 0, true);
        check_framing(H10 "Content-Length: 2\r\n\r\nhi", GW_HTTP_BODY_LENGTH, 2, true);
        check_framing(H10 "Connection: keep-alive\r\n\r\n", GW_HTTP_BODY_NONE, 0, false);
        check_framing(H10 "Connection: Keep-Alive, close\r\n\r\n", GW_HTTP_BODY_NONE, 0, true);

        /* Upgrade with "upgrade" in Connection asks to switch protocols. */
        check_framing("GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: keep-alive, Upgrade\r\n"
                      "Upgrade: websocket\r\n\r\n",
                      GW_HTTP_BODY_TUNNEL, 0, false);
        check_framing("GET /ws HTTP/1.1\r\nHost: example.com\r\nupgrade: h2c\r\nCONNECTION: UPGRADE\r\n"
                      "Content-Length: 0\r\n\r\n",
                      GW_HTTP_BODY_TUNNEL, 0, false);
        check_framing(
                "GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade, close\r\nUpgrade: websocket\r\n\r\n",
                GW_HTTP_BODY_TUNNEL, 0, true);
        /* Either alone does not. */
        check_framing("GET /ws HTTP/1.1\r\nHost: example.com\r\nUpgrade: websocket\r\n\r\n", GW_HTTP_BODY_NONE, 0,
                      false);
        check_framing("GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: upgrade\r\n\r\n", GW_HTTP_BODY_NONE, 0,
                      false);
        check_framing("GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: upgrade\r\nUpgrade:\r\n\r\n",
                      GW_HTTP_BODY_NONE, 0, false);
        check_framing("GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: upgrades\r\nUpgrade: h2c\r\n\r\n",
                      GW_HTTP_BODY_NONE, 0, false);
        check_framing(H11 "Connection: upgrade\r\nUpgrade: h2c\r\n\r\n", GW_HTTP_BODY_TUNNEL, 0, false);
        check_framing(H11 "Connection: upgrade\r\nContent-Length: 3\r\n\r\n", GW_HTTP_BODY_LENGTH, 3, false);
}
END_TEST

START_TEST(framing_refused)
{
        check_refused(H11 "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
                      "both Transfer-Encoding and Content-Length");
        check_refused(H11 "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
                      "both Transfer-Encoding and Content-Length");
        check_refused(H11 "Transfer-Encoding: gzip, chunked\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding: chunked, chunked\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding: chunked,\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding: identity\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding: \"chunked\"\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding: chunked;q=1\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding: xchunked\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding:\r\n\r\n", "Transfer-Encoding other than chunked");
        check_refused(H11 "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                      "more than one Transfer-Encoding");
        check_refused(H11 "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
                      "more than one Transfer-Encoding");
        check_refused(H10 "Transfer-Encoding: chunked\r\n\r\n", "Transfer-Encoding in an HTTP/1.0 request");

        check_refused(H11 "Content-Length: 5, 5\r\n\r\n", "Content-Length is a list");
        check_refused(H11 "Content-Length: 5,\r\n\r\n", "Content-Length is a list");
        check_refused(H11 "Content-Length: 5\r\nContent-Length: 5\r\n\r\n", "more than one Content-Length");
        check_refused(H11 "Content-Length: 5\r\ncontent-length: 6\r\n\r\n", "more than one Content-Length");
        check_refused(H11 "Content-Length: x\r\nContent-Length: 5\r\n\r\n", "more than one Content-Length");
        check_refused(H11 "Content-Length: +5\r\n\r\n", "Content-Length is not digits only");
        check_refused(H11 "Content-Length: -5\r\n\r\n", "Content-Length is not digits only");
        check_refused(H11 "Content-Length: 5 5\r\n\r\n", "Content-Length is not digits only");
        check_refused(H11 "Content-Length: 5\t0\r\n\r\n", "Content-Length is not digits only");
        check_refused(H11 "Content-Length: 0x5\r\n\r\n", "Content-Length is not digits only");
        check_refused(H11 "Content-Length: 5.0\r\n\r\n", "Content-Length is not digits only");
        check_refused(H11 "Content-Length: \xd9\xa5\r\n\r\n", "Content-Length is not digits only");
        check_refused(H11 "Content-Length:\r\n\r\n", "empty Content-Length");
        check_refused(H11 "Content-Length: 1000000000000000000\r\n\r\n", "Content-Length longer than 18 digits");

        check_refused(H11 "Content_Length: 5\r\n\r\n", "Content_Length or Transfer_Encoding field");
        check_refused(H11 "TRANSFER_ENCODING: chunked\r\n\r\n", "Content_Length or Transfer_Encoding field");

        check_refused("GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                      "Content-Length: 1\r\n\r\nx",
                      "Upgrade request with a body");
        check_refused("GET /ws HTTP/1.1\r\nHost: example.com\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
                      "Transfer-Encoding: chunked\r\n\r\n",
                      "Upgrade request with a body");

        /* Not a head: refused rather than read as one without fields. */
        gw_http_framing fr;
        ck_assert_int_eq(gw_http_framing_of((const uint8_t *)"GET / HTTP/1.1\r\nX: y\r\n", 22, 1, &fr), -1);
        ck_assert_str_eq(fr.reason, "malformed request head");
}
END_TEST

/* ---- chunked bodies ---- */

typedef struct outcome {
        int r;
        size_t used; /* of the whole input */
        const char *reason;
} outcome;

/* Feeds s[0..n) in pieces that end at cuts[0..ncuts) and at n, each piece
 * an exact-size copy, until the reader decides. */
static outcome feed_pieces(const char *s, size_t n, const size_t *cuts, size_t ncuts)
{
        gw_http_chunked c;
        gw_http_chunked_init(&c);
        outcome o = {0};
        size_t start = 0;
        for (size_t k = 0; k <= ncuts; k++) {
                size_t end = k < ncuts ? cuts[k] : n;
                uint8_t *piece = copy_of(s + start, end - start);
                size_t used = SIZE_MAX;
                const char *reason = NULL;
                o.r = gw_http_chunked_feed(&c, piece, end - start, &used, &reason);
                free(piece);
                ck_assert_uint_le(used, end - start);
                o.used = start + used;
                o.reason = reason;
                if (o.r == 0)
                        ck_assert_uint_eq(used, end - start);
                if (o.r != 0)
                        break;
                start = end;
        }
        /* The reader keeps its answer. */
        size_t used = SIZE_MAX;
        const char *reason = NULL;
        if (o.r != 0) {
                ck_assert_int_eq(gw_http_chunked_feed(&c, (const uint8_t *)"0\r\n\r\n", 5, &used, &reason), o.r);
                ck_assert_uint_eq(used, 0);
                if (o.r < 0)
                        ck_assert_str_eq(reason, o.reason);
        }
        return o;
}

/* s read whole, byte by byte and split at every offset gives r, used and
 * (with -1) reason. */
static void check_chunked_n(const char *s, size_t n, int r, size_t used, const char *reason)
{
        outcome o = feed_pieces(s, n, NULL, 0);
        if (o.r != r || o.used != used || (r < 0 && strcmp(o.reason, reason) != 0))
                ck_abort_msg("\"%.*s\": %d used %zu (%s), wanted %d used %zu (%s)", (int)(n > 80 ? 80 : n), s, o.r,
                             o.used, o.r < 0 ? o.reason : "", r, used, reason ? reason : "");
        size_t *all = calloc(n ? n : 1, sizeof(*all));
        ck_assert_ptr_nonnull(all);
        for (size_t i = 0; i < n; i++)
                all[i] = i;
        o = feed_pieces(s, n, n ? all + 1 : all, n ? n - 1 : 0);
        free(all);
        if (o.r != r || o.used != used || (r < 0 && strcmp(o.reason, reason) != 0))
                ck_abort_msg("\"%.*s\" byte by byte: %d used %zu", (int)(n > 80 ? 80 : n), s, o.r, o.used);
        for (size_t cut = 0; cut <= n; cut++) {
                o = feed_pieces(s, n, &cut, 1);
                if (o.r != r || o.used != used || (r < 0 && strcmp(o.reason, reason) != 0))
                        ck_abort_msg("\"%.*s\" split at %zu: %d used %zu", (int)(n > 80 ? 80 : n), s, cut, o.r, o.used);
        }
}

static void check_chunked(const char *s, int r, size_t used, const char *reason)
{
        check_chunked_n(s, strlen(s), r, used, reason);
}

static void check_body(const char *body)
{
        check_chunked(body, 1, strlen(body), NULL);
}

/* s is the start of a body that has not ended. */
static void check_more(const char *s)
{
        check_chunked(s, 0, strlen(s), NULL);
}

START_TEST(chunked_ok)
{
        check_body("5\r\nhello\r\n0\r\n\r\n");
        check_body("0\r\n\r\n");
        check_body("1\r\na\r\n2\r\nbc\r\nA\r\n0123456789\r\n0\r\n\r\n");
        check_body("1f\r\n0123456789abcdef0123456789abcde\r\n1F\r\n0123456789abcdef0123456789abcde\r\n0\r\n\r\n");
        check_body("000000000000005\r\nhello\r\n000000000000000\r\n\r\n");
        /* Chunk data is opaque: CRLFs, NULs and "0\r\n\r\n" inside it. */
        check_chunked_n("8\r\n0\r\n\r\n\0\r\n\r\n0\r\n\r\n", 18, 1, 18, NULL);
        /* Extensions. */
        check_body("5;name=value\r\nhello\r\n0;last\r\n\r\n");
        check_body("5;a=\"x y\";b;c=\t1\r\nhello\r\n0\r\n\r\n");
        check_body("5;\r\nhello\r\n0\r\n\r\n");
        /* Trailers. */
        check_body("5\r\nhello\r\n0\r\nX-Sum: abc\r\nX-Empty:\r\nx-tab:\ta\tb\t\r\n\r\n");
        check_body("0\r\nX: caf\xc3\xa9\r\n\r\n");
        /* The next request follows the body, and is not part of it. */
        const char *body = "5\r\nhello\r\n0\r\nX: y\r\n\r\n";
        char both[256];
        snprintf(both, sizeof(both), "%sGET / HTTP/1.1\r\nHost: example.com\r\n\r\n", body);
        check_chunked(both, 1, strlen(body), NULL);
        snprintf(both, sizeof(both), "0\r\n\r\n0\r\n\r\n");
        check_chunked(both, 1, 5, NULL);
        /* Not ended yet. */
        check_more("5\r\nhel");
        check_more("5\r\nhello\r");
        check_more("5\r\nhello\r\n0\r\n\r");
        check_more("5\r\nhello\r\n0\r\nX: y\r\n");
        check_more("5;a=b");
        check_more("fffffffffffffff\r\nabc");
        check_more("");

        /* A large chunk, in pieces. */
        gw_http_chunked c;
        gw_http_chunked_init(&c);
        size_t used;
        const char *reason = NULL;
        static uint8_t data[65536];
        ck_assert_int_eq(gw_http_chunked_feed(&c, (const uint8_t *)"30000\r\n", 7, &used, &reason), 0);
        for (int i = 0; i < 3; i++) {
                ck_assert_int_eq(gw_http_chunked_feed(&c, data, sizeof(data), &used, &reason), 0);
                ck_assert_uint_eq(used, sizeof(data));
        }
        ck_assert_int_eq(gw_http_chunked_feed(&c, NULL, 0, &used, &reason), 0);
        ck_assert_int_eq(gw_http_chunked_feed(&c, (const uint8_t *)"\r\n0\r\n\r\nGET", 10, &used, &reason), 1);
        ck_assert_uint_eq(used, 7);
        ck_assert_ptr_null(reason);
}
END_TEST

START_TEST(chunked_malformed)
{
        check_chunked("5\nhello\r\n0\r\n\r\n", -1, 1, "line not ended by CRLF");
        check_chunked("5\rhello\r\n0\r\n\r\n", -1, 2, "CR not followed by LF");
        check_chunked("5;a\nb\r\nhello\r\n0\r\n\r\n", -1, 3, "line not ended by CRLF");
        check_chunked("5;a\rb\r\nhello\r\n0\r\n\r\n", -1, 4, "CR not followed by LF");
        check_chunked("5\r\nhello\n0\r\n\r\n", -1, 8, "chunk data not followed by CRLF");
        check_chunked("5\r\nhelloX\r\n0\r\n\r\n", -1, 8, "chunk data not followed by CRLF");
        check_chunked("5\r\nhello\r0\r\n\r\n", -1, 9, "chunk data not followed by CRLF");
        check_chunked("5\r\nhello world\r\n0\r\n\r\n", -1, 8, "chunk data not followed by CRLF");
        check_chunked("5\r\nhel\r\n0\r\n\r\n", -1, 8, "chunk data not followed by CRLF");
        check_chunked("1000000000000000\r\n", -1, 15, "chunk size longer than 15 hex digits");
        check_chunked("0000000000000000\r\n\r\n", -1, 15, "chunk size longer than 15 hex digits");
        check_chunked("\r\n", -1, 0, "malformed chunk size");
        check_chunked(";a\r\n", -1, 0, "malformed chunk size");
        check_chunked(" 5\r\nhello\r\n0\r\n\r\n", -1, 0, "malformed chunk size");
        check_chunked("5 \r\nhello\r\n0\r\n\r\n", -1, 1, "malformed chunk size");
        check_chunked("5 ;a\r\nhello\r\n0\r\n\r\n", -1, 1, "malformed chunk size");
        check_chunked("5\t;a\r\nhello\r\n0\r\n\r\n", -1, 1, "malformed chunk size");
        check_chunked("+5\r\nhello\r\n0\r\n\r\n", -1, 0, "malformed chunk size");
        check_chunked("-5\r\nhello\r\n0\r\n\r\n", -1, 0, "malformed chunk size");
        check_chunked("0x5\r\nhello\r\n0\r\n\r\n", -1, 1, "malformed chunk size");
        check_chunked("5g\r\n", -1, 1, "malformed chunk size");
        check_chunked("\n", -1, 0, "line not ended by CRLF");
        check_chunked("5;\x01\r\n", -1, 2, "malformed chunk extension");
        check_chunked("5;\x7f\r\n", -1, 2, "malformed chunk extension");
        check_chunked("5;\xc3\xa9\r\n", -1, 2, "malformed chunk extension");
        check_chunked_n("5;\0\r\n", 5, -1, 2, "malformed chunk extension");
        check_chunked_n("5\0\r\n", 4, -1, 1, "malformed chunk size");
        /* The end: an empty line after the last chunk and its trailers. */
        check_chunked("0\r\n\n", -1, 3, "line not ended by CRLF");
        check_chunked("0\r\n\rX", -1, 4, "CR not followed by LF");
        check_chunked("0\r\n\r\r\n", -1, 4, "CR not followed by LF");
        check_chunked("0\r\n X: y\r\n\r\n", -1, 3, "obs-fold or whitespace before a trailer field name");
        check_chunked("0\r\nX: y\r\n\tz\r\n\r\n", -1, 9, "obs-fold or whitespace before a trailer field name");
        check_chunked("0\r\nX : y\r\n\r\n", -1, 4, "malformed trailer field");
        check_chunked("0\r\nX\r\n\r\n", -1, 4, "malformed trailer field");
        check_chunked("0\r\n: y\r\n\r\n", -1, 3, "malformed trailer field");
        check_chunked("0\r\nX(: y\r\n\r\n", -1, 4, "malformed trailer field");
        check_chunked("0\r\nX: a\x01\r\n\r\n", -1, 7, "control byte in a trailer field");
        check_chunked("0\r\nX: a\x7f\r\n\r\n", -1, 7, "control byte in a trailer field");
        check_chunked_n("0\r\nX: a\0b\r\n\r\n", 12, -1, 7, "control byte in a trailer field");
        check_chunked("0\r\nX: a\nY: b\r\n\r\n", -1, 7, "line not ended by CRLF");
        check_chunked("0\r\nX: a\rY: b\r\n\r\n", -1, 8, "CR not followed by LF");
}
END_TEST

START_TEST(chunked_bounds)
{
        static char buf[2 * GW_HTTP_CHUNK_LINE_MAX + 4096];
        /* A chunk-size line of exactly GW_HTTP_CHUNK_LINE_MAX bytes, CRLF
         * included, then one byte longer. */
        size_t ext = GW_HTTP_CHUNK_LINE_MAX - 4;
        buf[0] = '1';
        buf[1] = ';';
        memset(buf + 2, 'a', ext);
        memcpy(buf + 2 + ext, "\r\nx\r\n0\r\n\r\n", 11);
        check_body(buf);
        memset(buf + 2, 'a', ext + 1);
        memcpy(buf + 3 + ext, "\r\nx\r\n0\r\n\r\n", 11);
        check_chunked(buf, -1, GW_HTTP_CHUNK_LINE_MAX - 2, "chunk-size line longer than 4096 bytes");

        /* The same for a trailer line. */
        size_t value = GW_HTTP_CHUNK_LINE_MAX - 4;
        memcpy(buf, "0\r\nX:", 5);
        memset(buf + 5, 'v', value);
        memcpy(buf + 5 + value, "\r\n\r\n", 5);
        check_body(buf);
        memset(buf + 5, 'v', value + 1);
        memcpy(buf + 6 + value, "\r\n\r\n", 5);
        check_chunked(buf, -1, 3 + GW_HTTP_CHUNK_LINE_MAX - 2, "trailer line longer than 4096 bytes");

        /* GW_HTTP_TRAILERS_MAX trailers, then one more. */
        char *p = buf;
        p += sprintf(p, "0\r\n");
        for (int i = 0; i < GW_HTTP_TRAILERS_MAX; i++)
                p += sprintf(p, "T%d: %d\r\n", i, i);
        size_t at = (size_t)(p - buf);
        strcpy(p, "\r\n");
        check_body(buf);
        strcpy(p, "T: x\r\n\r\n");
        check_chunked(buf, -1, at, "more than 64 trailer fields");
}
END_TEST

/* ---- search ---- */

/* The end of the first occurrence of needle in p[0..n) at or after from, or
 * 0: the naive way. */
static size_t naive_find(const char *needle, size_t m, const char *p, size_t n, size_t from)
{
        for (size_t i = from; i + m <= n; i++)
                if (memcmp(p + i, needle, m) == 0)
                        return i + m;
        return 0;
}

/* Every end of an occurrence of needle in hay (hay fed in pieces at
 * cuts[0..ncuts)) compared with the naive search. */
static void check_scan(const char *needle, const char *hay, const size_t *cuts, size_t ncuts)
{
        size_t m = strlen(needle), n = strlen(hay);
        gw_http_scan s;
        memset(&s, 0, sizeof(s));
        size_t start = 0, want_from = 0;
        for (size_t k = 0; k <= ncuts; k++) {
                size_t end = k < ncuts ? cuts[k] : n;
                size_t at = start;
                for (;;) {
                        uint8_t *piece = copy_of(hay + at, end - at);
                        size_t found_end = SIZE_MAX;
                        bool found = gw_http_scan_feed(&s, needle, m, piece, end - at, &found_end);
                        free(piece);
                        size_t want = naive_find(needle, m, hay, n, want_from);
                        bool want_here = want != 0 && want <= end;
                        if (found != want_here || (found && at + found_end != want))
                                ck_abort_msg("\"%s\" in \"%s\" (piece %zu..%zu): found %d at %zu, wanted %zu", needle,
                                             hay, at, end, found, found ? at + found_end : 0, want);
                        if (!found)
                                break;
                        at += found_end;
                        want_from = want - m + 1;
                }
                start = end;
        }
}

static void check_scan_splits(const char *needle, const char *hay)
{
        size_t n = strlen(hay);
        check_scan(needle, hay, NULL, 0);
        for (size_t cut = 0; cut <= n; cut++)
                check_scan(needle, hay, &cut, 1);
        for (size_t a = 0; a <= n; a++)
                for (size_t b = a; b <= n; b++)
                        check_scan(needle, hay, (size_t[]){a, b}, 2);
}

START_TEST(scan)
{
        gw_http_scan s = {0};
        size_t end = 0;
        ck_assert(gw_http_scan_feed(&s, "aab", 3, (const uint8_t *)"aaab", 4, &end));
        ck_assert_uint_eq(end, 4);
        memset(&s, 0, sizeof(s));
        ck_assert(!gw_http_scan_feed(&s, "aab", 3, (const uint8_t *)"aa", 2, NULL));
        ck_assert(!gw_http_scan_feed(&s, "aab", 3, (const uint8_t *)"a", 1, NULL));
        ck_assert(gw_http_scan_feed(&s, "aab", 3, (const uint8_t *)"b", 1, &end));
        ck_assert_uint_eq(end, 1);
        memset(&s, 0, sizeof(s));
        ck_assert(!gw_http_scan_feed(&s, "\r\n\r\n", 4, (const uint8_t *)"X: y\r\n\r", 7, NULL));
        ck_assert(gw_http_scan_feed(&s, "\r\n\r\n", 4, (const uint8_t *)"\nbody", 5, &end));
        ck_assert_uint_eq(end, 1);
        /* Bad needles. */
        memset(&s, 0, sizeof(s));
        ck_assert(!gw_http_scan_feed(&s, "", 0, (const uint8_t *)"abc", 3, NULL));
        char longest[GW_HTTP_SCAN_MAX + 1];
        memset(longest, 'x', sizeof(longest));
        ck_assert(!gw_http_scan_feed(&s, longest, sizeof(longest), (const uint8_t *)longest, sizeof(longest), NULL));
        ck_assert(gw_http_scan_feed(&s, longest, GW_HTTP_SCAN_MAX, (const uint8_t *)longest, sizeof(longest), &end));
        ck_assert_uint_eq(end, GW_HTTP_SCAN_MAX);

        check_scan_splits("aab", "aaab");
        check_scan_splits("abab", "abaababab");
        check_scan_splits("aaa", "aaaaa");
        check_scan_splits("abcabd", "abcabcabdabcabd");
        check_scan_splits("\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\n\r\n\r\n\r\nx");
        check_scan_splits("abc", "ababab");
        check_scan_splits("x", "");
}
END_TEST

START_TEST(scan_random)
{
        /* Needles and haystacks over {a, b}, where self-overlap is the rule. */
        uint32_t seed = 12345;
        char needle[9], hay[41];
        for (int round = 0; round < 3000; round++) {
                seed = seed * 1103515245u + 12345u;
                size_t m = 1 + (seed >> 16) % 8;
                seed = seed * 1103515245u + 12345u;
                size_t n = (seed >> 16) % 41;
                for (size_t i = 0; i < m; i++) {
                        seed = seed * 1103515245u + 12345u;
                        needle[i] = (seed >> 16) & 1 ? 'a' : 'b';
                }
                needle[m] = '\0';
                for (size_t i = 0; i < n; i++) {
                        seed = seed * 1103515245u + 12345u;
                        hay[i] = (seed >> 16) & 1 ? 'a' : 'b';
                }
                hay[n] = '\0';
                seed = seed * 1103515245u + 12345u;
                size_t cuts[2] = {(seed >> 16) % (n + 1), 0};
                seed = seed * 1103515245u + 12345u;
                cuts[1] = cuts[0] + (seed >> 16) % (n - cuts[0] + 1);
                check_scan(needle, hay, NULL, 0);
                check_scan(needle, hay, cuts, 2);
        }
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("gateway_http_msg");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, fields);
        tcase_add_test(tc, fields_not_a_head);
        tcase_add_test(tc, framing_accepted);
        tcase_add_test(tc, framing_refused);
        tcase_add_test(tc, chunked_ok);
        tcase_add_test(tc, chunked_malformed);
        tcase_add_test(tc, chunked_bounds);
        tcase_add_test(tc, scan);
        tcase_add_test(tc, scan_random);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
