/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: what ingress reads of a request and what it writes for the
 * server in the sandbox (dataplane/ingress/host.c). The input is an HTTP
 * request head. Its Host is read as a sandbox port under a fixed domain: a
 * name read is always a valid sandbox id and a port 1-65535, and only a host
 * under the domain is ever read. Its token is found or refused with an error.
 * The head written for the server is itself one the strict request parser
 * reads whole, with the same method, no token header, no token parameter in
 * its query, no token cookie and one Host.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ingress/ingress.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/http_parser.h"
#include "space/id.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DOMAIN "ingress.example"

static void check_host(const char *host)
{
        dp_ingress_target t;
        sp_error *e = NULL;
        bool under = dp_ingress_host_matches(host, DOMAIN);
        if (dp_ingress_host_parse(host, DOMAIN, &t, &e) == 0) {
                if (e || !under || !t.by_host || t.port == 0 || !sp_id_valid(t.sandbox, "sbx"))
                        abort();
        } else if (!e || e->code != SP_E_NOT_FOUND) {
                abort();
        }
        sp_error_free(e);
}

static void check_head(const sp_http_parser *p)
{
        const char *raw = sp_http_parser_raw_path(p);
        dp_ingress_head h = {.path = raw, .client_addr = "192.0.2.1", .proto = "http"};
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        sp_error *e = NULL;
        if (dp_ingress_request_head(p, &h, &out, &e) < 0)
                abort(); /* the parser's raw paths start with '/' */
        sp_http_parser *q = sp_http_parser_new(NULL);
        size_t used = 0, blen = 0;
        const char *body = NULL;
        sp_http_parse_event ev = sp_http_parser_feed(q, out.data, out.len, &used, &body, &blen);
        if (ev != SP_HTTP_PARSE_HEAD || used != out.len)
                abort(); /* the server gets one well-formed head, whole */
        if (strcmp(sp_http_parser_method(q), sp_http_parser_method(p)) != 0 ||
            sp_http_parser_header(q, DP_INGRESS_TOKEN_HEADER) ||
            sp_http_parser_header(q, DP_INGRESS_E2B_TOKEN_HEADER) || sp_http_parser_query(q, DP_INGRESS_TOKEN_PARAM) ||
            !sp_http_parser_header(q, "Host"))
                abort();
        const char *cookie = sp_http_parser_header(q, "Cookie");
        /* (a cookie whose name merely ends with the token cookie's stays) */
        if (cookie && (strncmp(cookie, DP_INGRESS_TOKEN_COOKIE "=", strlen(DP_INGRESS_TOKEN_COOKIE) + 1) == 0 ||
                       strstr(cookie, "; " DP_INGRESS_TOKEN_COOKIE "=")))
                abort();
        sp_http_parser_free(q);
        sp_error_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        sp_http_parser *p = sp_http_parser_new(NULL);
        size_t used = 0, blen = 0;
        const char *body = NULL;
        if (sp_http_parser_feed(p, data, size, &used, &body, &blen) == SP_HTTP_PARSE_HEAD) {
                const char *host = sp_http_parser_header(p, "Host");
                if (host)
                        check_host(host);
                char *token = NULL;
                dp_ingress_token_src src;
                sp_error *e = NULL;
                if (dp_ingress_token_find(p, &token, &src, &e) == 0) {
                        if (e || (token == NULL) != (src == DP_INGRESS_TOKEN_NONE))
                                abort();
                } else if (!e || token) {
                        abort();
                }
                free(token);
                sp_error_free(e);
                check_head(p);
        }
        /* The raw input as a Host value too. */
        char host[300];
        size_t n = size < sizeof(host) - 1 ? size : sizeof(host) - 1;
        memcpy(host, data, n);
        host[n] = '\0';
        if (strlen(host) == n)
                check_host(host);
        sp_http_parser_free(p);
        return 0;
}
