/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the Host reader of the egress gateway (gateway/wire/
 * http_host.h): accepted heads, every prefix of them, the refusals (CONNECT,
 * Host missing, repeated or differing from the target, HTTP/0.9, IP
 * literals on request) and the malformed heads (folds, whitespace before the
 * colon, control bytes, bare LF). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/http_host.h"
#include "harness.h"
#include "space/cleanup.h"

static gw_http_result parse_n(const char *s, size_t n, unsigned flags, gw_http_request *req)
{
        /* An exact-size copy, so that a read past the end is caught. */
        uint8_t *copy = malloc(n ? n : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, s, n);
        gw_http_result r = gw_http_host_parse(copy, n, flags, req);
        free(copy);
        return r;
}

static gw_http_result parse(const char *s, unsigned flags, gw_http_request *req)
{
        return parse_n(s, strlen(s), flags, req);
}

/* Every proper prefix of the head asks for more; the whole is OK. */
static void check_ok(const char *s, unsigned flags, const char *method, const char *host, uint16_t port)
{
        gw_http_request req;
        size_t n = strlen(s);
        for (size_t i = 0; i < n; i++) {
                gw_http_result r = parse_n(s, i, flags, &req);
                if (r == GW_HTTP_OK)
                        break; /* the head ended: what follows is body */
                if (r != GW_HTTP_NEED_MORE)
                        ck_abort_msg("prefix %zu of \"%s\": %s (%s)", i, s, gw_http_result_name(r), req.reason);
        }
        gw_http_result r = parse_n(s, n, flags, &req);
        if (r != GW_HTTP_OK)
                ck_abort_msg("\"%s\": %s (%s)", s, gw_http_result_name(r), req.reason);
        ck_assert_str_eq(req.method, method);
        ck_assert_str_eq(req.host, host);
        ck_assert_uint_eq(req.port, port);
        ck_assert_ptr_null(req.reason);
}

static void check_fail(const char *s, unsigned flags, gw_http_result want, const char *reason)
{
        gw_http_request req;
        gw_http_result r = parse(s, flags, &req);
        if (r != want)
                ck_abort_msg("\"%s\": %s (%s), wanted %s", s, gw_http_result_name(r), req.reason ? req.reason : "",
                             gw_http_result_name(want));
        ck_assert_str_eq(req.host, "");
        if (reason)
                ck_assert_str_eq(req.reason, reason);
}

START_TEST(accepted)
{
        check_ok("GET / HTTP/1.1\r\nHost: Example.COM\r\n\r\n", 0, "GET", "example.com", 80);
        check_ok("GET /a?b=c HTTP/1.1\r\nUser-Agent: curl/8.5.0\r\nhost:\t api.example.com:8080 \t\r\n"
                 "Accept: */*\r\n\r\n",
                 0, "GET", "api.example.com", 8080);
        check_ok("POST /x HTTP/1.0\r\nHOST: example.com.\r\nContent-Length: 3\r\n\r\nabc", 0, "POST", "example.com",
                 80);
        check_ok("GET http://example.com/path HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "GET", "example.com", 80);
        check_ok("GET HTTP://Example.com:80?q HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, "GET", "example.com", 80);
        check_ok("OPTIONS * HTTP/1.1\r\nHost: example.com:81\r\n\r\n", 0, "OPTIONS", "example.com", 81);
        check_ok("GET / HTTP/1.1\r\nX-Obs: caf\xc3\xa9\r\nHost: example.com\r\n\r\n", 0, "GET", "example.com", 80);

        gw_http_request req;
        const char *ip = "GET / HTTP/1.1\r\nHost: 10.1.2.3:8000\r\n\r\n";
        ck_assert_int_eq(parse(ip, 0, &req), GW_HTTP_OK);
        ck_assert_str_eq(req.host, "10.1.2.3");
        ck_assert(req.host_is_ip);
        ck_assert_uint_eq(req.port, 8000);
        ck_assert_uint_eq(req.head_len, strlen(ip));
        ck_assert_int_eq(req.minor_version, 1);
        ck_assert_int_eq(parse("GET / HTTP/1.1\r\nHost: [2001:DB8::1]:8080\r\n\r\n", 0, &req), GW_HTTP_OK);
        ck_assert_str_eq(req.host, "2001:db8::1");
        ck_assert(req.host_is_ip);
        ck_assert_uint_eq(req.port, 8080);
        ck_assert_int_eq(parse("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n", 0, &req), GW_HTTP_OK);
        ck_assert(!req.host_is_ip);
        ck_assert(!req.absolute_form);
}
END_TEST

START_TEST(refused)
{
        check_fail("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", 0, GW_HTTP_REFUSED, "CONNECT");
        check_fail("connect example.com:443 HTTP/1.1\r\n", 0, GW_HTTP_REFUSED, "CONNECT");
        check_fail("GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 0, GW_HTTP_REFUSED, "no Host header");
        check_fail("GET / HTTP/1.0\r\n\r\n", 0, GW_HTTP_REFUSED, "no Host header");
        check_fail("GET / HTTP/1.1\r\nHost: allowed.com\r\nHost: blocked.com\r\n\r\n", 0, GW_HTTP_REFUSED,
                   "more than one Host header");
        check_fail("GET / HTTP/1.1\r\nHost: allowed.com\r\nhOsT: allowed.com\r\n", 0, GW_HTTP_REFUSED,
                   "more than one Host header");
        check_fail("GET / HTTP/1.1\r\nHost: \r\n\r\n", 0, GW_HTTP_REFUSED, "empty Host");
        check_fail("GET / HTTP/1.1\r\nHost: :80\r\n\r\n", 0, GW_HTTP_REFUSED, "empty Host");
        check_fail("GET http://blocked.com/ HTTP/1.1\r\nHost: allowed.com\r\n\r\n", 0, GW_HTTP_REFUSED,
                   "request-target authority differs from Host");
        check_fail("GET http://allowed.com:81/ HTTP/1.1\r\nHost: allowed.com\r\n\r\n", 0, GW_HTTP_REFUSED,
                   "request-target authority differs from Host");
        check_fail("GET http://user@allowed.com/ HTTP/1.1\r\nHost: allowed.com\r\n\r\n", 0, GW_HTTP_REFUSED,
                   "userinfo in the request-target");
        check_fail("GET https://allowed.com/ HTTP/1.1\r\nHost: allowed.com\r\n\r\n", 0, GW_HTTP_REFUSED,
                   "request-target scheme is not http");
        check_fail("GET /\r\n", 0, GW_HTTP_REFUSED, "HTTP/0.9 request");
        check_fail("GET / HTTP/0.9\r\n\r\n", 0, GW_HTTP_REFUSED, "HTTP/0.9 request");
        check_fail("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 0, GW_HTTP_REFUSED, "HTTP version other than 1.x");
        check_fail("GET / HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n", GW_HTTP_REFUSE_IP, GW_HTTP_REFUSED,
                   "Host is an IP literal");
        check_fail("GET / HTTP/1.1\r\nHost: 127.1\r\n\r\n", GW_HTTP_REFUSE_IP, GW_HTTP_REFUSED, NULL);
        check_fail("GET / HTTP/1.1\r\nHost: 0x7f000001\r\n\r\n", GW_HTTP_REFUSE_IP, GW_HTTP_REFUSED, NULL);
        check_fail("GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n", GW_HTTP_REFUSE_IP, GW_HTTP_REFUSED, NULL);
        check_fail("GET http://10.0.0.1/ HTTP/1.1\r\nHost: example.com\r\n\r\n", GW_HTTP_REFUSE_IP, GW_HTTP_REFUSED,
                   "Host is an IP literal");
}
END_TEST

START_TEST(malformed)
{
        static const char *bad[] = {
                "GET / HTTP/1.1\r\nHost : example.com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost\t: example.com\r\n\r\n",
                "GET / HTTP/1.1\r\n Host: example.com\r\n\r\n",
                "GET / HTTP/1.1\r\nX: a\r\n Host: blocked.com\r\nHost: allowed.com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com\r\n\tblocked.com\r\n\r\n",
                "GET / HTTP/1.1\nHost: example.com\n\n",
                "GET / HTTP/1.1\r\nHost: example.com\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com\rX: y\r\n\r\n",
                "\r\nGET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
                "GET  / HTTP/1.1\r\nHost: example.com\r\n\r\n",
                "GET / HTTP/1.1 \r\nHost: example.com\r\n\r\n",
                "GET / http/1.1\r\nHost: example.com\r\n\r\n",
                "GET / HTTP/1.10\r\nHost: example.com\r\n\r\n",
                "G(T / HTTP/1.1\r\nHost: example.com\r\n\r\n",
                "GET example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
                "GET * HTTP/1.1\r\nHost: example.com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com, blocked.com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com blocked.com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com:\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com:0\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com:65536\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com:8o\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com:80:80\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: a%62.com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: a..com\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: [example.com]\r\n\r\n",
                "GET / HTTP/1.1\r\nHost: allowed.com\x7f\r\n\r\n",
                "GET / HTTP/1.1\r\nHost allowed.com\r\n\r\n",
                "GET / HTTP/1.1\r\n:allowed.com\r\n\r\n",
                "GET /\x01 HTTP/1.1\r\n",
                "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++)
                check_fail(bad[i], 0, GW_HTTP_MALFORMED, NULL);
}
END_TEST

START_TEST(nul_and_controls)
{
        gw_http_request req;
        static const char nul_value[] = "GET / HTTP/1.1\r\nHost: allowed.com\0.evil.com\r\n\r\n";
        ck_assert_int_eq(parse_n(nul_value, sizeof(nul_value) - 1, 0, &req), GW_HTTP_MALFORMED);
        static const char nul_name[] = "GET / HTTP/1.1\r\nHo\0st: allowed.com\r\n\r\n";
        ck_assert_int_eq(parse_n(nul_name, sizeof(nul_name) - 1, 0, &req), GW_HTTP_MALFORMED);
        static const char nul_other[] = "GET / HTTP/1.1\r\nX: a\0b\r\nHost: allowed.com\r\n\r\n";
        ck_assert_int_eq(parse_n(nul_other, sizeof(nul_other) - 1, 0, &req), GW_HTTP_MALFORMED);
        /* Decided before the line ends. */
        ck_assert_int_eq(parse_n("GET / HTTP/1.1\r\nHost: a\0", 25, 0, &req), GW_HTTP_MALFORMED);
        ck_assert_int_eq(parse("GET / HTTP/1.1\r\nHost: a\rb", 0, &req), GW_HTTP_MALFORMED);
        ck_assert_int_eq(parse("GET / HTTP/1.1\r\nHost: a\r", 0, &req), GW_HTTP_NEED_MORE);
        ck_assert_int_eq(parse("", 0, &req), GW_HTTP_NEED_MORE);
}
END_TEST

START_TEST(size_bound)
{
        static char buf[GW_HTTP_MAX_HEAD + 64];
        const char *start = "GET / HTTP/1.1\r\nHost: example.com\r\nX-Pad: ";
        size_t n = strlen(start);
        memcpy(buf, start, n);
        /* A head of exactly the bound is read. */
        size_t pad = GW_HTTP_MAX_HEAD - n - 4;
        memset(buf + n, 'a', pad);
        memcpy(buf + n + pad, "\r\n\r\n", 4);
        gw_http_request req;
        ck_assert_int_eq(parse_n(buf, GW_HTTP_MAX_HEAD, 0, &req), GW_HTTP_OK);
        ck_assert_uint_eq(req.head_len, GW_HTTP_MAX_HEAD);
        /* One byte more is refused once the bound is reached. */
        memset(buf + n, 'a', pad + 1);
        memcpy(buf + n + pad + 1, "\r\n\r\n", 4);
        ck_assert_int_eq(parse_n(buf, GW_HTTP_MAX_HEAD - 1, 0, &req), GW_HTTP_NEED_MORE);
        ck_assert_int_eq(parse_n(buf, GW_HTTP_MAX_HEAD, 0, &req), GW_HTTP_REFUSED);
        ck_assert_str_eq(req.reason, "request head larger than 16384 bytes");
        ck_assert_int_eq(parse_n(buf, GW_HTTP_MAX_HEAD + 1, 0, &req), GW_HTTP_REFUSED);

        char method[64];
        memset(method, 'M', GW_HTTP_METHOD_MAX + 1);
        strcpy(method + GW_HTTP_METHOD_MAX + 1, " / HTTP/1.1\r\n");
        ck_assert_int_eq(parse(method, 0, &req), GW_HTTP_MALFORMED);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("gateway_http_host");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, accepted);
        tcase_add_test(tc, refused);
        tcase_add_test(tc, malformed);
        tcase_add_test(tc, nul_and_controls);
        tcase_add_test(tc, size_bound);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
