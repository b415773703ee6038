/* SPDX-License-Identifier: Apache-2.0 */
/* Ingress, the pure half (ingress.h): where a request goes, its token, the
 * head the server in the sandbox gets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ingress/ingress.h"
#include "space/cleanup.h"
#include "space/id.h"

#define TOKEN_MAX 4096

static char lower(char c)
{
        return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

bool dp_ingress_domain_valid(const char *domain)
{
        size_t n = domain ? strlen(domain) : 0;
        if (n == 0 || n > DP_INGRESS_DOMAIN_MAX)
                return false;
        size_t label = 0;
        for (size_t i = 0; i <= n; i++) {
                char c = domain[i];
                if (c == '.' || c == '\0') {
                        if (label == 0 || domain[i - 1] == '-' || label > 63)
                                return false;
                        label = 0;
                        continue;
                }
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-') || (label == 0 && c == '-'))
                        return false;
                label++;
        }
        return true;
}

/* The length of host without a ":port" suffix (an IPv6 literal never matches a domain). */
static size_t name_len(const char *host)
{
        const char *colon = strrchr(host, ':');
        return colon ? (size_t)(colon - host) : strlen(host);
}

bool dp_ingress_host_matches(const char *host, const char *domain)
{
        if (!host || !domain || !*domain)
                return false;
        size_t n = name_len(host), d = strlen(domain);
        if (n > 0 && host[n - 1] == '.')
                n--; /* a fully qualified name's root dot */
        /* ".domain" too (an empty label): a wildcard route for *.domain may send it
         * here, and the data plane's own routes must never answer under the domain. */
        if (n < d + 1 || host[n - d - 1] != '.')
                return false;
        for (size_t i = 0; i < d; i++)
                if (lower(host[n - d + i]) != domain[i])
                        return false;
        return true;
}

static int not_a_port(const char *host, sp_error **err)
{
        return sp_error_set(err, SP_E_NOT_FOUND, "no sandbox port is named by host '%.80s'", host);
}

/* "1".."65535", decimal, no leading zero. */
static bool port_of(const char *s, size_t n, uint16_t *ret)
{
        if (n == 0 || n > 5 || s[0] == '0')
                return false;
        unsigned v = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                v = v * 10 + (unsigned)(s[i] - '0');
        }
        if (v > 65535)
                return false;
        *ret = (uint16_t)v;
        return true;
}

int dp_ingress_host_parse(const char *host, const char *domain, dp_ingress_target *ret, sp_error **err)
{
        if (!dp_ingress_host_matches(host, domain))
                return not_a_port(host ? host : "", err);
        size_t n = name_len(host);
        if (host[n - 1] == '.')
                n--;
        size_t label = n - strlen(domain) - 1; /* "{port}-{id}" */
        if (memchr(host, '.', label))
                return not_a_port(host, err);
        const char *dash = memchr(host, '-', label);
        dp_ingress_target t = {.by_host = true};
        if (!dash || !port_of(host, (size_t)(dash - host), &t.port))
                return not_a_port(host, err);
        size_t idn = label - (size_t)(dash - host) - 1;
        if (idn == 0 || idn > DP_CLAIM_ID_MAX)
                return not_a_port(host, err);
        const char *id = dash + 1;
        bool sep = false;
        for (size_t i = 0; i < idn; i++) {
                char c = lower(id[i]);
                /* The first '-' or '_' separates the prefix; ids hold no other. */
                if ((c == '-' || c == '_') && !sep) {
                        c = '_';
                        sep = true;
                }
                t.sandbox[i] = c;
        }
        t.sandbox[idn] = '\0';
        if (!sp_id_valid(t.sandbox, "sbx"))
                return not_a_port(host, err);
        *ret = t;
        return 0;
}

int dp_ingress_path_parse(const char *sandbox, const char *port, dp_ingress_target *ret, sp_error **err)
{
        dp_ingress_target t = {0};
        if (!sandbox || !sp_id_valid(sandbox, "sbx"))
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox '%.64s' not found", sandbox ? sandbox : "");
        if (!port || !port_of(port, strlen(port), &t.port))
                return sp_error_set(err, SP_E_INVALID, "port '%.16s' is not a port (1 to 65535)", port ? port : "");
        snprintf(t.sandbox, sizeof(t.sandbox), "%s", sandbox);
        *ret = t;
        return 0;
}

/* ---- the token ---- */

static bool token_ok(const char *s, size_t n)
{
        if (n == 0 || n > TOKEN_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
                        return false;
        return true;
}

/* The value of cookie name in a Cookie header ("a=1; b=2"), or NULL; *ret_len its length. */
static const char *cookie_value(const char *header, const char *name, size_t *ret_len)
{
        size_t nl = strlen(name);
        for (const char *p = header; p && *p;) {
                while (*p == ' ' || *p == ';')
                        p++;
                const char *end = strchr(p, ';');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                if (len > nl && strncmp(p, name, nl) == 0 && p[nl] == '=') {
                        *ret_len = len - nl - 1;
                        return p + nl + 1;
                }
                p = end;
        }
        return NULL;
}

int dp_ingress_token_find(const sp_http_parser *p, char **ret_token, dp_ingress_token_src *ret_src, sp_error **err)
{
        *ret_token = NULL;
        *ret_src = DP_INGRESS_TOKEN_NONE;
        const char *found = NULL;
        size_t n = 0;
        dp_ingress_token_src src = DP_INGRESS_TOKEN_NONE;
        const char *name, *value;
        for (size_t i = 0; sp_http_parser_header_at(p, i, &name, &value); i++) {
                if (!sp_http_strcaseeq(name, DP_INGRESS_TOKEN_HEADER) &&
                    !sp_http_strcaseeq(name, DP_INGRESS_E2B_TOKEN_HEADER))
                        continue;
                if (found && strcmp(found, value) != 0)
                        return sp_error_set(err, SP_E_INVALID, "the request carries two different ingress tokens");
                found = value;
                n = strlen(value);
                src = DP_INGRESS_TOKEN_HEADER_SRC;
        }
        if (!found) {
                size_t count = 0;
                for (size_t i = 0; sp_http_parser_query_at(p, i, &name, &value); i++)
                        if (strcmp(name, DP_INGRESS_TOKEN_PARAM) == 0) {
                                found = value;
                                count++;
                        }
                if (count > 1)
                        return sp_error_set(err, SP_E_INVALID, "query parameter '%s' given twice",
                                            DP_INGRESS_TOKEN_PARAM);
                if (found) {
                        n = strlen(found);
                        src = DP_INGRESS_TOKEN_QUERY;
                }
        }
        if (!found) {
                for (size_t i = 0; sp_http_parser_header_at(p, i, &name, &value); i++) {
                        if (!sp_http_strcaseeq(name, "Cookie"))
                                continue;
                        found = cookie_value(value, DP_INGRESS_TOKEN_COOKIE, &n);
                        if (found) {
                                src = DP_INGRESS_TOKEN_COOKIE_SRC;
                                break;
                        }
                }
        }
        if (!found)
                return 0;
        if (!token_ok(found, n))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token");
        *ret_token = strndup(found, n);
        if (!*ret_token)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *ret_src = src;
        return 0;
}

/* ---- the upstream head ---- */

static bool hop_by_hop(const char *name)
{
        static const char *const hop[] = {"Connection",
                                          "Keep-Alive",
                                          "Proxy-Connection",
                                          "Proxy-Authenticate",
                                          "Proxy-Authorization",
                                          "TE",
                                          "Trailer",
                                          "Transfer-Encoding",
                                          "Upgrade",
                                          NULL};
        for (size_t i = 0; hop[i]; i++)
                if (sp_http_strcaseeq(name, hop[i]))
                        return true;
        return false;
}

bool dp_ingress_response_header_passes(const char *name)
{
        return !hop_by_hop(name) && !sp_http_strcaseeq(name, "Content-Length");
}

/* value without its Domain attribute (any case, spaces around '='). */
static void cookie_without_domain(const char *value, sp_buf *out)
{
        for (const char *p = value; *p;) {
                const char *end = strchr(p, ';');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                const char *a = p;
                while (a < p + len && *a == ' ')
                        a++;
                bool domain =
                        (size_t)(p + len - a) >= 6 && strncasecmp(a, "domain", 6) == 0 && (a[6] == '=' || a[6] == ' ');
                if (!domain) {
                        if (out->len)
                                sp_buf_append(out, ";", 1, NULL);
                        sp_buf_append(out, p, len, NULL);
                }
                p = end ? end + 1 : p + len;
        }
}

const char *dp_ingress_response_header(const char *name, const char *value, bool by_host, sp_buf *buf)
{
        if (!dp_ingress_response_header_passes(name) || sp_http_strcaseeq(name, "Date") ||
            sp_http_strcaseeq(name, "X-Request-Id") || sp_http_strcaseeq(name, "Set-Cookie2") ||
            sp_http_strcaseeq(name, "Clear-Site-Data"))
                return NULL;
        if (!by_host) {
                /* The path form shares the data plane's origin: nothing of it for a sandbox. */
                if (sp_http_strcaseeq(name, "Set-Cookie") || sp_http_strcaseeq(name, "Service-Worker-Allowed"))
                        return NULL;
                return value;
        }
        if (sp_http_strcaseeq(name, "Set-Cookie")) {
                /* A cookie for this sandbox's host only, never for the domain all sandboxes share. */
                sp_buf_clear(buf);
                cookie_without_domain(value, buf);
                sp_buf_append(buf, "", 1, NULL);
                return buf->data;
        }
        return value;
}

/* Whether the Connection header conn names the header name (RFC 9110 7.6.1:
 * what it names is for this hop only). */
static bool connection_lists(const char *conn, const char *name)
{
        size_t n = strlen(name);
        for (const char *p = conn; p && *p;) {
                while (*p == ' ' || *p == ',' || *p == '\t')
                        p++;
                size_t len = strcspn(p, ", \t");
                if (len == n && strncasecmp(p, name, n) == 0)
                        return true;
                p += len;
        }
        return false;
}

/* The Cookie header without the token cookie; false when nothing is left. */
static bool cookie_without_token(const char *value, sp_buf *out)
{
        size_t nl = strlen(DP_INGRESS_TOKEN_COOKIE);
        bool any = false;
        for (const char *p = value; p && *p;) {
                while (*p == ' ' || *p == ';')
                        p++;
                if (!*p)
                        break;
                const char *end = strchr(p, ';');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                if (!(len > nl && strncmp(p, DP_INGRESS_TOKEN_COOKIE, nl) == 0 && p[nl] == '=')) {
                        if (any)
                                sp_buf_append(out, "; ", 2, NULL);
                        sp_buf_append(out, p, len, NULL);
                        any = true;
                }
                p = end;
        }
        return any;
}

int dp_ingress_request_head(const sp_http_parser *p, const dp_ingress_head *h, sp_buf *out, sp_error **err)
{
        if (!h->path || h->path[0] != '/')
                return sp_error_set(err, SP_E_INVALID, "the path for the server must start with '/'");
        sp_buf_appendf(out, NULL, "%s %s", sp_http_parser_method(p), h->path);
        /* The query as received, less the token parameter. */
        const char *target = sp_http_parser_target(p);
        const char *q = strchr(target, '?');
        if (q) {
                char sep = '?';
                size_t tl = strlen(DP_INGRESS_TOKEN_PARAM);
                for (const char *s = q + 1; *s;) {
                        const char *end = strchr(s, '&');
                        size_t len = end ? (size_t)(end - s) : strlen(s);
                        /* Compared decoded, as the token was found (?space%5Ftoken= too). */
                        size_t nl = strcspn(s, "=&");
                        char name[64];
                        size_t dl = 0;
                        bool token = nl < sizeof(name) && sp_http_percent_decode(s, nl, true, name, &dl) == 0 &&
                                     dl == tl && memcmp(name, DP_INGRESS_TOKEN_PARAM, tl) == 0;
                        if (!token && len > 0) {
                                sp_buf_append(out, &sep, 1, NULL);
                                sp_buf_append(out, s, len, NULL);
                                sep = '&';
                        }
                        s = end ? end + 1 : s + len;
                }
        }
        sp_buf_append(out, " HTTP/1.1\r\n", 11, NULL);
        const char *name, *value, *xff = NULL, *host = NULL;
        const char *conn = sp_http_parser_header(p, "Connection");
        for (size_t i = 0; sp_http_parser_header_at(p, i, &name, &value); i++) {
                if (sp_http_strcaseeq(name, "Upgrade") && h->upgrade) {
                        sp_buf_appendf(out, NULL, "Upgrade: %s\r\n", value);
                        continue;
                }
                if (hop_by_hop(name) || connection_lists(conn, name) || sp_http_strcaseeq(name, "Content-Length") ||
                    sp_http_strcaseeq(name, DP_INGRESS_TOKEN_HEADER) ||
                    sp_http_strcaseeq(name, DP_INGRESS_E2B_TOKEN_HEADER) ||
                    sp_http_strcaseeq(name, DP_INGRESS_CLIENT_HEADER) || sp_http_strcaseeq(name, "X-Forwarded-Proto") ||
                    sp_http_strcaseeq(name, "X-Forwarded-Host"))
                        continue;
                if (sp_http_strcaseeq(name, "X-Forwarded-For")) {
                        xff = value;
                        continue;
                }
                if (sp_http_strcaseeq(name, "Host"))
                        host = value;
                if (sp_http_strcaseeq(name, "Cookie")) {
                        _cleanup_buf_ sp_buf c = SP_BUF_INIT;
                        if (cookie_without_token(value, &c)) {
                                sp_buf_append(out, "Cookie: ", 8, NULL);
                                sp_buf_append(out, c.data, c.len, NULL);
                                sp_buf_append(out, "\r\n", 2, NULL);
                        }
                        continue;
                }
                sp_buf_appendf(out, NULL, "%s: %s\r\n", name, value);
        }
        if (!host)
                sp_buf_append(out, "Host: localhost\r\n", 17, NULL);
        const char *client = h->client_addr && *h->client_addr ? h->client_addr : "unknown";
        if (xff)
                sp_buf_appendf(out, NULL, "X-Forwarded-For: %s, %s\r\n", xff, client);
        else
                sp_buf_appendf(out, NULL, "X-Forwarded-For: %s\r\n", client);
        sp_buf_appendf(out, NULL, "X-Forwarded-Proto: %s\r\n", h->proto ? h->proto : "http");
        if (host)
                sp_buf_appendf(out, NULL, "X-Forwarded-Host: %s\r\n", host);
        sp_buf_appendf(out, NULL, "Connection: %s\r\n", h->upgrade ? "Upgrade" : "close");
        int64_t cl = sp_http_parser_content_length(p);
        if (sp_http_parser_chunked(p))
                sp_buf_append(out, "Transfer-Encoding: chunked\r\n", 28, NULL);
        else if (cl > 0 || (cl == 0 && sp_http_parser_header(p, "Content-Length")))
                sp_buf_appendf(out, NULL, "Content-Length: %lld\r\n", (long long)cl);
        sp_buf_append(out, "\r\n", 2, NULL);
        return 0;
}
