/* SPDX-License-Identifier: Apache-2.0 */
/* Ingress, the pure half (dataplane/ingress/host.c): where a request goes,
 * its token, and the head the server in the sandbox gets. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ingress/ingress.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/http_parser.h"

#define SBX "sbx_0123456789abcdefghjk"

static sp_http_parser *parse(const char *head)
{
        sp_http_parser *p = sp_http_parser_new(NULL);
        size_t used = 0, blen = 0;
        const char *body = NULL;
        ck_assert_int_eq(sp_http_parser_feed(p, head, strlen(head), &used, &body, &blen), SP_HTTP_PARSE_HEAD);
        return p;
}

START_TEST(domains)
{
        ck_assert(dp_ingress_domain_valid("localhost"));
        ck_assert(dp_ingress_domain_valid("sandboxes.example.com"));
        ck_assert(dp_ingress_domain_valid("a-b.c1"));
        static const char *const bad[] = {"", "Localhost", "-a.b", "a-.b", "a..b", ".a", "a.", "a_b", "a b", "a.b/c"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++)
                ck_assert_msg(!dp_ingress_domain_valid(bad[i]), "%s", bad[i]);
        char big[260];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        ck_assert(!dp_ingress_domain_valid(big));
}
END_TEST

START_TEST(hosts)
{
        static const struct {
                const char *host;
                int port;
        } good[] = {
                {"8080-sbx-0123456789abcdefghjk.localhost", 8080},
                {"8080-sbx-0123456789abcdefghjk.localhost:7071", 8080},
                {"1-sbx_0123456789abcdefghjk.localhost", 1},
                {"65535-SBX-0123456789ABCDEFGHJK.LocalHost.", 65535},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(good); i++) {
                dp_ingress_target t;
                sp_error *e = NULL;
                ck_assert(dp_ingress_host_matches(good[i].host, "localhost"));
                ck_assert_msg(dp_ingress_host_parse(good[i].host, "localhost", &t, &e) == 0, "%s: %s", good[i].host,
                              e ? e->message : "");
                ck_assert_int_eq(t.port, good[i].port);
                ck_assert_str_eq(t.sandbox, SBX);
                ck_assert(t.by_host);
        }
        static const char *const bad[] = {
                "localhost",
                "x.localhost.example",
                "8080-sbx-0123456789abcdefghjk.localhostx",
                "8080-sbx-0123456789abcdefghjk.xlocalhost",
                "0-sbx-0123456789abcdefghjk.localhost",
                "08080-sbx-0123456789abcdefghjk.localhost",
                "65536-sbx-0123456789abcdefghjk.localhost",
                "8080-sbx-0123456789abcdefghj.localhost", /* 19 characters */
                "8080-sbx-0123456789abcdefghji.localhost", /* 'i' is not in ids */
                "8080-ses-0123456789abcdefghjk.localhost", /* not a sandbox */
                "8080-sbx-0123456789-abcdefghj.localhost",
                "a.8080-sbx-0123456789abcdefghjk.localhost",
                "8080sbx-0123456789abcdefghjk.localhost",
                "-sbx-0123456789abcdefghjk.localhost",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                dp_ingress_target t;
                sp_error *e = NULL;
                ck_assert_msg(dp_ingress_host_parse(bad[i], "localhost", &t, &e) < 0, "%s", bad[i]);
                ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
                sp_error_free(e);
        }
        /* An empty first label is under the domain (a wildcard route may send it): it names no
         * port, and is never the data plane's own host. */
        static const char *const empty[] = {".localhost", ".localhost.", ".LOCALHOST", ".localhost:443"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(empty); i++) {
                dp_ingress_target t;
                sp_error *e = NULL;
                ck_assert_msg(dp_ingress_host_matches(empty[i], "localhost"), "%s", empty[i]);
                ck_assert_msg(dp_ingress_host_parse(empty[i], "localhost", &t, &e) < 0, "%s", empty[i]);
                ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
                sp_error_free(e);
        }
        ck_assert(!dp_ingress_host_matches("localhost", "localhost"));
        ck_assert(!dp_ingress_host_matches("xlocalhost", "localhost"));
        dp_ingress_target t;
        sp_error *e = NULL;
        ck_assert_int_eq(dp_ingress_path_parse(SBX, "3000", &t, NULL), 0);
        ck_assert(t.port == 3000 && !t.by_host && strcmp(t.sandbox, SBX) == 0);
        ck_assert_int_lt(dp_ingress_path_parse("sbx_nope", "3000", &t, &e), 0);
        ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
        sp_error_free(e);
        e = NULL;
        ck_assert_int_lt(dp_ingress_path_parse(SBX, "70000", &t, &e), 0);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_free(e);
}
END_TEST

static char *token_of(const char *head, dp_ingress_token_src *src, sp_error **err)
{
        sp_http_parser *p = parse(head);
        char *t = NULL;
        int r = dp_ingress_token_find(p, &t, src, err);
        sp_http_parser_free(p);
        ck_assert_int_eq(r < 0, t == NULL && err && *err);
        return t;
}

START_TEST(tokens)
{
        dp_ingress_token_src src;
        sp_error *e = NULL;
        char *t = token_of("GET / HTTP/1.1\r\nHost: h\r\n\r\n", &src, NULL);
        ck_assert(!t && src == DP_INGRESS_TOKEN_NONE);
        t = token_of("GET / HTTP/1.1\r\nHost: h\r\nX-Space-Ingress-Token: v1.a\r\n\r\n", &src, NULL);
        ck_assert_str_eq(t, "v1.a");
        ck_assert_int_eq(src, DP_INGRESS_TOKEN_HEADER_SRC);
        free(t);
        t = token_of("GET / HTTP/1.1\r\nHost: h\r\ne2b-traffic-access-token: v1.b\r\n\r\n", &src, NULL);
        ck_assert_str_eq(t, "v1.b");
        free(t);
        /* the header wins over the parameter, the parameter over the cookie */
        t = token_of("GET /?space_token=v1.q HTTP/1.1\r\nHost: h\r\nCookie: space_ingress_token=v1.c\r\n"
                     "X-Space-Ingress-Token: v1.h\r\n\r\n",
                     &src, NULL);
        ck_assert_str_eq(t, "v1.h");
        free(t);
        t = token_of("GET /?space_token=v1.q HTTP/1.1\r\nHost: h\r\nCookie: space_ingress_token=v1.c\r\n\r\n", &src,
                     NULL);
        ck_assert_str_eq(t, "v1.q");
        ck_assert_int_eq(src, DP_INGRESS_TOKEN_QUERY);
        free(t);
        t = token_of("GET / HTTP/1.1\r\nHost: h\r\nCookie: a=1; space_ingress_token=v1.c; b=2\r\n\r\n", &src, NULL);
        ck_assert_str_eq(t, "v1.c");
        ck_assert_int_eq(src, DP_INGRESS_TOKEN_COOKIE_SRC);
        free(t);
        /* refusals */
        ck_assert_ptr_null(token_of("GET / HTTP/1.1\r\nHost: h\r\nX-Space-Ingress-Token: v1.a\r\n"
                                    "E2B-Traffic-Access-Token: v1.b\r\n\r\n",
                                    &src, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_free(e);
        e = NULL;
        ck_assert_ptr_null(token_of("GET /?space_token=a&space_token=b HTTP/1.1\r\nHost: h\r\n\r\n", &src, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_free(e);
        e = NULL;
        ck_assert_ptr_null(token_of("GET /?space_token=a%20b HTTP/1.1\r\nHost: h\r\n\r\n", &src, &e));
        ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);
        sp_error_free(e);
}
END_TEST

static void head_of(const char *request, const dp_ingress_head *h, sp_buf *out)
{
        sp_http_parser *p = parse(request);
        ck_assert_int_eq(dp_ingress_request_head(p, h, out, NULL), 0);
        sp_buf_append(out, "", 1, NULL);
        sp_http_parser_free(p);
}

START_TEST(heads)
{
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        dp_ingress_head h = {.path = "/api/x%20y", .client_addr = "192.0.2.7", .proto = "https"};
        head_of("POST /v1/sandboxes/" SBX "/ports/3000/api/x%20y?a=1&space_token=v1.t&b=&space_token HTTP/1.0\r\n"
                "Host: dp.example:7071\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\n"
                "X-Space-Ingress-Token: v1.t\r\nCookie: space_ingress_token=v1.t; theme=dark\r\n"
                "X-Forwarded-For: 10.1.1.1\r\nX-Forwarded-Host: evil\r\nContent-Type: text/plain\r\n"
                "Content-Length: 5\r\n\r\n",
                &h, &out);
        ck_assert_str_eq(out.data, "POST /api/x%20y?a=1&b= HTTP/1.1\r\n"
                                   "Host: dp.example:7071\r\n"
                                   "Cookie: theme=dark\r\n"
                                   "Content-Type: text/plain\r\n"
                                   "X-Forwarded-For: 10.1.1.1, 192.0.2.7\r\n"
                                   "X-Forwarded-Proto: https\r\n"
                                   "X-Forwarded-Host: dp.example:7071\r\n"
                                   "Connection: close\r\n"
                                   "Content-Length: 5\r\n\r\n");
        sp_buf_clear(&out);
        /* a WebSocket keeps its Upgrade; a chunked body stays chunked; the
         * token-only cookie goes whole */
        h = (dp_ingress_head){.path = "/ws", .client_addr = "192.0.2.7", .proto = "http", .upgrade = true};
        head_of("GET /ws HTTP/1.1\r\nHost: 3000-sbx-0123456789abcdefghjk.localhost\r\nConnection: Upgrade\r\n"
                "Upgrade: websocket\r\nSec-WebSocket-Key: abc\r\nCookie: space_ingress_token=v1.t\r\n\r\n",
                &h, &out);
        ck_assert_str_eq(out.data, "GET /ws HTTP/1.1\r\n"
                                   "Host: 3000-sbx-0123456789abcdefghjk.localhost\r\n"
                                   "Upgrade: websocket\r\n"
                                   "Sec-WebSocket-Key: abc\r\n"
                                   "X-Forwarded-For: 192.0.2.7\r\n"
                                   "X-Forwarded-Proto: http\r\n"
                                   "X-Forwarded-Host: 3000-sbx-0123456789abcdefghjk.localhost\r\n"
                                   "Connection: Upgrade\r\n\r\n");
        sp_buf_clear(&out);
        h = (dp_ingress_head){.path = "/up", .client_addr = "192.0.2.7"};
        head_of("PUT /up HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nUpgrade: websocket\r\n\r\n", &h, &out);
        ck_assert_str_eq(out.data, "PUT /up HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 192.0.2.7\r\n"
                                   "X-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nConnection: close\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n");
        sp_buf_clear(&out);
        /* the token parameter compared decoded; what Connection names is this hop's */
        h = (dp_ingress_head){.path = "/q", .client_addr = "192.0.2.7"};
        head_of("GET /q?space%5Ftoken=v1.t&%73pace_token=x&keep=1 HTTP/1.1\r\nHost: h\r\n"
                "Connection: keep-alive, X-Hop, close\r\nX-Hop: secret\r\nX-Keep: 1\r\n\r\n",
                &h, &out);
        ck_assert_str_eq(out.data, "GET /q?keep=1 HTTP/1.1\r\nHost: h\r\nX-Keep: 1\r\nX-Forwarded-For: 192.0.2.7\r\n"
                                   "X-Forwarded-Proto: http\r\nX-Forwarded-Host: h\r\nConnection: close\r\n\r\n");
        ck_assert(!dp_ingress_response_header_passes("Transfer-Encoding"));
        ck_assert(!dp_ingress_response_header_passes("content-length"));
        ck_assert(!dp_ingress_response_header_passes("Connection"));
        ck_assert(dp_ingress_response_header_passes("Set-Cookie"));
        ck_assert(dp_ingress_response_header_passes("Cache-Control"));
}
END_TEST

START_TEST(response_headers)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        /* host form: a cookie for this host only */
        ck_assert_str_eq(dp_ingress_response_header("Set-Cookie", "a=1; Domain=localhost; Path=/; HttpOnly", true, &b),
                         "a=1; Path=/; HttpOnly");
        ck_assert_str_eq(dp_ingress_response_header("set-cookie", "a=1;domain = .localhost;Secure", true, &b),
                         "a=1;Secure");
        ck_assert_str_eq(dp_ingress_response_header("Set-Cookie", "domainx=1; Path=/", true, &b), "domainx=1; Path=/");
        ck_assert_str_eq(dp_ingress_response_header("Cache-Control", "no-store", true, &b), "no-store");
        ck_assert_str_eq(dp_ingress_response_header("Service-Worker-Allowed", "/", true, &b), "/");
        /* path form: the data plane's origin is nobody's */
        ck_assert_ptr_null(dp_ingress_response_header("Set-Cookie", "a=1", false, &b));
        ck_assert_ptr_null(dp_ingress_response_header("Service-Worker-Allowed", "/", false, &b));
        ck_assert_str_eq(dp_ingress_response_header("Cache-Control", "no-store", false, &b), "no-store");
        /* never: framing, hop-by-hop, this server's own */
        static const char *const never[] = {"Content-Length", "Transfer-Encoding", "Connection",  "Keep-Alive",
                                            "Date",           "X-Request-Id",      "Set-Cookie2", "Clear-Site-Data"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(never); i++) {
                ck_assert_ptr_null(dp_ingress_response_header(never[i], "x", true, &b));
                ck_assert_ptr_null(dp_ingress_response_header(never[i], "x", false, &b));
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("dp_ingress");
        TCase *tc = tcase_create("ingress");
        tcase_add_test(tc, domains);
        tcase_add_test(tc, hosts);
        tcase_add_test(tc, tokens);
        tcase_add_test(tc, heads);
        tcase_add_test(tc, response_headers);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
