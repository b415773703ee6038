/* SPDX-License-Identifier: Apache-2.0 */
/* The Host of the first plain HTTP/1.x request (see http_host.h). The rules
 * for field lines are those of the project's HTTP/1 reader (common's
 * http1.c), kept here over a byte buffer without its allocations. */
#include "wire/http_host.h"

#include <arpa/inet.h>
#include <string.h>

typedef struct authority {
        char host[GW_NAME_MAX + 1];
        uint16_t port;
        bool is_ip;
} authority;

typedef struct state {
        unsigned flags;
        gw_http_request *ret;
        const char *reason;
        authority target; /* of an absolute-form request-target */
        authority host;
        int hosts;
} state;

static gw_http_result stop(state *st, gw_http_result r, const char *reason)
{
        st->reason = reason;
        return r;
}

static bool is_tchar(unsigned char c)
{
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
                return true;
        return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_token(const char *s, size_t n)
{
        if (n == 0)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!is_tchar((unsigned char)s[i]))
                        return false;
        return true;
}

static bool caseeq(const char *s, size_t n, const char *lit)
{
        if (strlen(lit) != n)
                return false;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c >= 'A' && c <= 'Z')
                        c = (unsigned char)(c + ('a' - 'A'));
                if (c != (unsigned char)lit[i])
                        return false;
        }
        return true;
}

/* A byte no head may hold: controls but HTAB (CR is checked apart). */
static bool is_ctl(unsigned char c)
{
        return (c < 0x20 && c != '\t') || c == 0x7f;
}

/* host [ ":" port ] from Host or an absolute-form target. */
static gw_http_result read_authority(state *st, const char *s, size_t n, authority *a)
{
        const char *port = NULL;
        size_t port_len = 0;
        if (n == 0)
                return stop(st, GW_HTTP_REFUSED, "empty Host");
        if (s[0] == '[') {
                const char *close = memchr(s, ']', n);
                size_t in = close ? (size_t)(close - s - 1) : 0;
                char v6[INET6_ADDRSTRLEN + 1];
                struct in6_addr addr;
                if (!close || in == 0 || in >= sizeof(v6))
                        return stop(st, GW_HTTP_MALFORMED, "malformed IPv6 literal in Host");
                for (size_t i = 0; i < in; i++) {
                        unsigned char c = (unsigned char)s[1 + i];
                        v6[i] = (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
                }
                v6[in] = '\0';
                if (memchr(v6, '\0', in) || inet_pton(AF_INET6, v6, &addr) != 1)
                        return stop(st, GW_HTTP_MALFORMED, "malformed IPv6 literal in Host");
                size_t rest = n - in - 2;
                const char *after = close + 1;
                if (rest > 0 && after[0] != ':')
                        return stop(st, GW_HTTP_MALFORMED, "malformed IPv6 literal in Host");
                if (rest > 0) {
                        port = after + 1;
                        port_len = rest - 1;
                }
                memcpy(a->host, v6, in + 1);
                a->is_ip = true;
        } else {
                const char *colon = memchr(s, ':', n);
                size_t hn = colon ? (size_t)(colon - s) : n;
                const char *why;
                if (colon) {
                        port = colon + 1;
                        port_len = n - hn - 1;
                }
                if (hn == 0)
                        return stop(st, GW_HTTP_REFUSED, "empty Host");
                if (gw_name_normalize(s, hn, GW_NAME_TRAILING_DOT, a->host, &why) < 0)
                        return stop(st, GW_HTTP_MALFORMED, why);
                a->is_ip = gw_name_is_ip_literal(a->host, strlen(a->host));
        }
        a->port = 80;
        if (port) {
                unsigned v = 0;
                if (port_len == 0 || port_len > 5)
                        return stop(st, GW_HTTP_MALFORMED, "malformed port in Host");
                for (size_t i = 0; i < port_len; i++) {
                        if (port[i] < '0' || port[i] > '9')
                                return stop(st, GW_HTTP_MALFORMED, "malformed port in Host");
                        v = v * 10 + (unsigned)(port[i] - '0');
                }
                if (v == 0 || v > 65535)
                        return stop(st, GW_HTTP_MALFORMED, "port out of range in Host");
                a->port = (uint16_t)v;
        }
        if (a->is_ip && (st->flags & GW_HTTP_REFUSE_IP))
                return stop(st, GW_HTTP_REFUSED, "Host is an IP literal");
        return GW_HTTP_OK;
}

/* "http://authority[/path][?query]": scheme http only, no userinfo. */
static gw_http_result read_absolute(state *st, const char *t, size_t n)
{
        size_t i = 0;
        while (i < n && ((t[i] >= 'a' && t[i] <= 'z') || (t[i] >= 'A' && t[i] <= 'Z') ||
                         (i > 0 && ((t[i] >= '0' && t[i] <= '9') || t[i] == '+' || t[i] == '-' || t[i] == '.'))))
                i++;
        if (i == 0 || n - i < 3 || memcmp(t + i, "://", 3) != 0)
                return stop(st, GW_HTTP_MALFORMED, "malformed request-target");
        if (!caseeq(t, i, "http"))
                return stop(st, GW_HTTP_REFUSED, "request-target scheme is not http");
        const char *auth = t + i + 3;
        size_t an = 0, left = n - i - 3;
        while (an < left && auth[an] != '/' && auth[an] != '?' && auth[an] != '#')
                an++;
        if (memchr(auth, '@', an))
                return stop(st, GW_HTTP_REFUSED, "userinfo in the request-target");
        st->ret->absolute_form = true;
        return read_authority(st, auth, an, &st->target);
}

static gw_http_result read_request_line(state *st, const char *l, size_t n)
{
        if (n == 0)
                return stop(st, GW_HTTP_MALFORMED, "empty line before the request line");
        const char *sp1 = memchr(l, ' ', n);
        if (!sp1)
                return stop(st, GW_HTTP_MALFORMED, "malformed request line");
        size_t mlen = (size_t)(sp1 - l);
        if (!is_token(l, mlen) || mlen > GW_HTTP_METHOD_MAX)
                return stop(st, GW_HTTP_MALFORMED, "malformed method");
        const char *t = sp1 + 1;
        size_t left = n - mlen - 1;
        const char *sp2 = memchr(t, ' ', left);
        size_t tlen = sp2 ? (size_t)(sp2 - t) : left;
        if (tlen == 0)
                return stop(st, GW_HTTP_MALFORMED, "malformed request line");
        for (size_t i = 0; i < tlen; i++)
                if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
                        return stop(st, GW_HTTP_MALFORMED, "malformed request-target");
        if (!sp2)
                return stop(st, GW_HTTP_REFUSED, "HTTP/0.9 request");
        const char *v = sp2 + 1;
        size_t vlen = left - tlen - 1;
        if (vlen != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' ||
            v[7] > '9')
                return stop(st, GW_HTTP_MALFORMED, "malformed HTTP version");
        if (v[5] != '1')
                return stop(st, GW_HTTP_REFUSED, v[5] == '0' ? "HTTP/0.9 request" : "HTTP version other than 1.x");
        st->ret->minor_version = v[7] - '0';
        if (caseeq(l, mlen, "connect"))
                return stop(st, GW_HTTP_REFUSED, "CONNECT");
        memcpy(st->ret->method, l, mlen);
        st->ret->method[mlen] = '\0';
        if (t[0] == '/')
                return GW_HTTP_OK;
        if (tlen == 1 && t[0] == '*')
                return mlen == 7 && memcmp(l, "OPTIONS", 7) == 0
                               ? GW_HTTP_OK
                               : stop(st, GW_HTTP_MALFORMED, "'*' target with a method other than OPTIONS");
        return read_absolute(st, t, tlen);
}

static gw_http_result read_field_line(state *st, const char *l, size_t n)
{
        if (l[0] == ' ' || l[0] == '\t')
                return stop(st, GW_HTTP_MALFORMED, "obs-fold or whitespace before a field name");
        const char *colon = memchr(l, ':', n);
        if (!colon)
                return stop(st, GW_HTTP_MALFORMED, "field line without ':'");
        size_t nlen = (size_t)(colon - l);
        if (nlen > 0 && (l[nlen - 1] == ' ' || l[nlen - 1] == '\t'))
                return stop(st, GW_HTTP_MALFORMED, "whitespace between a field name and ':'");
        if (!is_token(l, nlen))
                return stop(st, GW_HTTP_MALFORMED, "field name is not a token");
        const char *v = colon + 1, *end = l + n;
        for (const char *c = v; c < end; c++)
                if (is_ctl((unsigned char)*c))
                        return stop(st, GW_HTTP_MALFORMED, "control byte in a field value");
        while (v < end && (*v == ' ' || *v == '\t'))
                v++;
        while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
                end--;
        if (!caseeq(l, nlen, "host"))
                return GW_HTTP_OK;
        if (++st->hosts > 1)
                return stop(st, GW_HTTP_REFUSED, "more than one Host header");
        return read_authority(st, v, (size_t)(end - v), &st->host);
}

static gw_http_result read_head(state *st, const uint8_t *data, size_t len)
{
        const char *d = (const char *)data;
        size_t window = len < GW_HTTP_MAX_HEAD ? len : GW_HTTP_MAX_HEAD;
        size_t pos = 0;
        for (unsigned line = 0;; line++) {
                const char *lf = memchr(d + pos, '\n', window - pos);
                if (!lf) {
                        /* Fail early on what no line may hold. */
                        for (size_t i = pos; i < window; i++) {
                                if (data[i] == '\r' && i + 1 < window)
                                        return stop(st, GW_HTTP_MALFORMED, "CR not followed by LF");
                                if (data[i] != '\r' && is_ctl(data[i]))
                                        return stop(st, GW_HTTP_MALFORMED, "control byte in the request head");
                        }
                        if (len >= GW_HTTP_MAX_HEAD)
                                return stop(st, GW_HTTP_REFUSED, "request head larger than 16384 bytes");
                        return GW_HTTP_NEED_MORE;
                }
                size_t at = (size_t)(lf - d);
                if (at == pos || d[at - 1] != '\r')
                        return stop(st, GW_HTTP_MALFORMED, "line not ended by CRLF");
                const char *l = d + pos;
                size_t n = at - 1 - pos;
                pos = at + 1;
                if (memchr(l, '\r', n))
                        return stop(st, GW_HTTP_MALFORMED, "CR not followed by LF");
                gw_http_result r;
                if (line == 0)
                        r = read_request_line(st, l, n);
                else if (n == 0)
                        break;
                else
                        r = read_field_line(st, l, n);
                if (r != GW_HTTP_OK)
                        return r;
        }
        st->ret->head_len = pos;
        if (st->hosts == 0)
                return stop(st, GW_HTTP_REFUSED, "no Host header");
        if (st->ret->absolute_form && (strcmp(st->target.host, st->host.host) != 0 || st->target.port != st->host.port))
                return stop(st, GW_HTTP_REFUSED, "request-target authority differs from Host");
        memcpy(st->ret->host, st->host.host, sizeof(st->ret->host));
        st->ret->port = st->host.port;
        st->ret->host_is_ip = st->host.is_ip;
        return GW_HTTP_OK;
}

gw_http_result gw_http_host_parse(const uint8_t *data, size_t len, unsigned flags, gw_http_request *ret)
{
        memset(ret, 0, sizeof(*ret));
        if (len == 0)
                return GW_HTTP_NEED_MORE;
        state st = {.flags = flags, .ret = ret};
        gw_http_result r = read_head(&st, data, len);
        if (r != GW_HTTP_OK) {
                gw_http_request keep = {.reason = r == GW_HTTP_NEED_MORE ? NULL : st.reason};
                *ret = keep;
        }
        return r;
}

const char *gw_http_result_name(gw_http_result r)
{
        switch (r) {
        case GW_HTTP_NEED_MORE:
                return "need_more";
        case GW_HTTP_OK:
                return "ok";
        case GW_HTTP_MALFORMED:
                return "malformed";
        case GW_HTTP_REFUSED:
                return "refused";
        }
        return "unknown";
}
