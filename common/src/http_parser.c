/* SPDX-License-Identifier: Apache-2.0 */
/* The incremental HTTP/1.1 request parser (see space/http_parser.h). */
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "space/http_parser.h"

enum state {
        P_HEAD,
        P_HEAD_DONE,
        P_BODY,
        P_CHUNK_SIZE,
        P_CHUNK_DATA,
        P_CHUNK_CRLF,
        P_TRAILER,
        P_DONE,
        P_ERROR,
};

struct field {
        const char *name;
        const char *value;
};

struct sp_http_parser {
        sp_http_limits lim;
        enum state state;
        uint64_t seen;

        /* header section scanner */
        sp_buf head;
        size_t head_bytes; /* including blank lines before the request line */
        size_t line_len;
        size_t lines; /* completed non-empty lines */
        unsigned blank_lead;
        bool prev_cr;

        /* parsed header section */
        const char *method, *target;
        char *raw_path, *path, *dec;
        int minor;
        struct field *headers;
        size_t nheaders;
        struct field *params;
        size_t nparams;

        /* framing */
        bool head_ok, chunked, keep_alive, expect_continue, has_cl;
        uint64_t content_length, max_body, received, remaining;

        /* chunk-size and trailer lines */
        sp_buf line;
        size_t trailer_bytes, ntrailers;

        int status;
        sp_errc code;
        const char *message;
};

static bool is_tchar(unsigned char c)
{
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
                return true;
        return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

bool sp_http_token_valid(const char *s, size_t len)
{
        if (len == 0)
                return false;
        for (size_t i = 0; i < len; i++)
                if (!is_tchar((unsigned char)s[i]))
                        return false;
        return true;
}

static unsigned char lower(unsigned char c)
{
        return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

bool sp_http_strcaseeq(const char *a, const char *b)
{
        for (; *a && *b; a++, b++)
                if (lower((unsigned char)*a) != lower((unsigned char)*b))
                        return false;
        return *a == *b;
}

static bool strncaseeq(const char *a, size_t alen, const char *b)
{
        size_t blen = strlen(b);
        if (alen != blen)
                return false;
        for (size_t i = 0; i < alen; i++)
                if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
                        return false;
        return true;
}

static int hexval(unsigned char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int sp_http_percent_decode(const char *s, size_t len, bool plus_space, char *out, size_t *ret_len)
{
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c == '%') {
                        if (len - i < 3)
                                return -SP_E_INVALID;
                        int hi = hexval((unsigned char)s[i + 1]), lo = hexval((unsigned char)s[i + 2]);
                        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                                return -SP_E_INVALID;
                        out[o++] = (char)(hi * 16 + lo);
                        i += 2;
                } else if (c == '\0') {
                        return -SP_E_INVALID;
                } else {
                        out[o++] = (plus_space && c == '+') ? ' ' : (char)c;
                }
        }
        out[o] = '\0';
        *ret_len = o;
        return 0;
}

static sp_http_parse_event fail(sp_http_parser *p, int status, const char *message)
{
        p->state = P_ERROR;
        p->status = status;
        p->message = message;
        switch (status) {
        case 413:
        case 414:
        case 431:
                p->code = SP_E_TOO_LARGE;
                break;
        case 501:
        case 505:
                p->code = SP_E_UNSUPPORTED;
                break;
        default:
                p->code = SP_E_INVALID;
                break;
        }
        return SP_HTTP_PARSE_ERROR;
}

sp_http_parser *sp_http_parser_new(const sp_http_limits *limits)
{
        sp_http_parser *p = calloc(1, sizeof(*p));
        if (!p)
                abort();
        if (limits)
                p->lim = *limits;
        if (!p->lim.max_head_bytes)
                p->lim.max_head_bytes = SP_HTTP_DEFAULT_MAX_HEAD_BYTES;
        if (!p->lim.max_headers)
                p->lim.max_headers = SP_HTTP_DEFAULT_MAX_HEADERS;
        if (!p->lim.max_uri)
                p->lim.max_uri = SP_HTTP_DEFAULT_MAX_URI;
        if (!p->lim.max_body)
                p->lim.max_body = SP_HTTP_DEFAULT_MAX_BODY;
        if (!p->lim.max_chunk_line)
                p->lim.max_chunk_line = SP_HTTP_DEFAULT_MAX_CHUNK_LINE;
        if (!p->lim.max_query_params)
                p->lim.max_query_params = SP_HTTP_DEFAULT_MAX_QUERY_PARAMS;
        p->max_body = p->lim.max_body;
        p->state = P_HEAD;
        return p;
}

sp_http_parser *sp_http_parser_free(sp_http_parser *p)
{
        if (!p)
                return NULL;
        sp_buf_free(&p->head);
        sp_buf_free(&p->line);
        free(p->headers);
        free(p->params);
        free(p->dec);
        free(p);
        return NULL;
}

/* ---- header section ---- */

static bool value_char_ok(unsigned char c)
{
        return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/* Parses one "name: value" line (NUL-terminated, without CRLF) in place. */
static int parse_field(char *line, struct field *ret)
{
        if (line[0] == ' ' || line[0] == '\t')
                return -1; /* obs-fold, or whitespace before the first field */
        char *colon = strchr(line, ':');
        if (!colon || !sp_http_token_valid(line, (size_t)(colon - line)))
                return -1;
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
                v++;
        char *end = v + strlen(v);
        while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
                end--;
        *end = '\0';
        for (char *c = v; c < end; c++)
                if (!value_char_ok((unsigned char)*c))
                        return -1;
        ret->name = line;
        ret->value = v;
        return 0;
}

/* Whether a comma-separated list header holds token (case-insensitive). */
static bool list_has(const char *value, const char *token)
{
        const char *s = value;
        while (*s) {
                while (*s == ' ' || *s == '\t' || *s == ',')
                        s++;
                const char *e = s;
                while (*e && *e != ',')
                        e++;
                const char *t = e;
                while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
                        t--;
                if (t > s && strncaseeq(s, (size_t)(t - s), token))
                        return true;
                s = e;
        }
        return false;
}

/* Counts the elements of a comma-separated list; *all_chunked tells whether
 * each of them is "chunked". Empty elements count as invalid. */
static size_t te_elements(const char *value, bool *all_chunked)
{
        size_t n = 0;
        const char *s = value;
        for (;;) {
                while (*s == ' ' || *s == '\t')
                        s++;
                const char *e = s;
                while (*e && *e != ',')
                        e++;
                const char *t = e;
                while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
                        t--;
                n++;
                if (!strncaseeq(s, (size_t)(t - s), "chunked"))
                        *all_chunked = false;
                if (!*e)
                        break;
                s = e + 1;
        }
        return n;
}

static int parse_content_length(const char *v, uint64_t *ret)
{
        size_t n = strlen(v);
        if (n == 0 || n > 18)
                return -1;
        uint64_t x = 0;
        for (size_t i = 0; i < n; i++) {
                if (v[i] < '0' || v[i] > '9')
                        return -1;
                x = x * 10 + (uint64_t)(v[i] - '0');
        }
        *ret = x;
        return 0;
}

static bool has_dot_segment(const char *path)
{
        const char *s = path;
        while (*s) {
                if (*s == '/')
                        s++;
                const char *e = strchr(s, '/');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                if ((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
                        return true;
                s += n;
        }
        return false;
}

static sp_http_parse_event parse_target(sp_http_parser *p)
{
        const char *t = p->target;
        size_t tlen = strlen(t);
        if (tlen > p->lim.max_uri)
                return fail(p, 414, "request URI too long");
        if (tlen == 0 || t[0] != '/')
                return fail(p, 400, "request target must be an absolute path");
        for (size_t i = 0; i < tlen; i++) {
                unsigned char c = (unsigned char)t[i];
                if (c <= 0x20 || c >= 0x7f || c == '#')
                        return fail(p, 400, "invalid character in request target");
        }
        /* Every decoded string fits: raw path + decoded path + each query key
         * and value with their NULs (at most two per byte of the query). */
        p->dec = malloc(tlen * 5 + 16);
        if (!p->dec)
                abort();
        char *out = p->dec;
        const char *q = strchr(t, '?');
        size_t plen = q ? (size_t)(q - t) : tlen;
        memcpy(out, t, plen);
        out[plen] = '\0';
        p->raw_path = out;
        out += plen + 1;
        size_t n;
        if (sp_http_percent_decode(t, plen, false, out, &n) < 0)
                return fail(p, 400, "invalid percent-encoding in path");
        p->path = out;
        out += n + 1;
        if (has_dot_segment(p->path))
                return fail(p, 400, "dot segments are not allowed in the path");
        if (!q)
                return SP_HTTP_PARSE_AGAIN;

        size_t cap = 0;
        for (const char *s = q + 1;;) {
                const char *amp = strchr(s, '&');
                size_t len = amp ? (size_t)(amp - s) : strlen(s);
                if (len > 0) {
                        if (p->nparams == p->lim.max_query_params)
                                return fail(p, 400, "too many query parameters");
                        if (p->nparams == cap) {
                                cap = cap ? cap * 2 : 8;
                                p->params = realloc(p->params, cap * sizeof(*p->params));
                                if (!p->params)
                                        abort();
                        }
                        const char *eq = memchr(s, '=', len);
                        size_t klen = eq ? (size_t)(eq - s) : len;
                        struct field *f = &p->params[p->nparams++];
                        if (sp_http_percent_decode(s, klen, true, out, &n) < 0)
                                return fail(p, 400, "invalid percent-encoding in query");
                        f->name = out;
                        out += n + 1;
                        const char *v = eq ? eq + 1 : s + len;
                        if (sp_http_percent_decode(v, (size_t)(s + len - v), true, out, &n) < 0)
                                return fail(p, 400, "invalid percent-encoding in query");
                        f->value = out;
                        out += n + 1;
                }
                if (!amp)
                        break;
                s = amp + 1;
        }
        return SP_HTTP_PARSE_AGAIN;
}

static sp_http_parse_event parse_request_line(sp_http_parser *p, char *line)
{
        char *sp1 = strchr(line, ' ');
        if (!sp1)
                return fail(p, 400, "malformed request line");
        *sp1 = '\0';
        size_t mlen = (size_t)(sp1 - line);
        if (!sp_http_token_valid(line, mlen) || mlen > SP_HTTP_METHOD_MAX)
                return fail(p, 400, "invalid method");
        char *target = sp1 + 1;
        char *sp2 = strchr(target, ' ');
        if (!sp2)
                return fail(p, 400, "malformed request line");
        *sp2 = '\0';
        const char *v = sp2 + 1;
        if (strlen(v) != 8 || strncmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' ||
            v[7] > '9')
                return fail(p, 400, "malformed HTTP version");
        if (v[5] != '1')
                return fail(p, 505, "HTTP version not supported");
        p->minor = v[7] == '0' ? 0 : 1;
        p->method = line;
        p->target = target;
        return parse_target(p);
}

static sp_http_parse_event parse_head(sp_http_parser *p)
{
        char *s = p->head.data;
        /* The scanner guarantees CRLF pairs and no NUL: split at each CR. */
        char *cr = strchr(s, '\r');
        *cr = '\0';
        if (parse_request_line(p, s) < 0)
                return SP_HTTP_PARSE_ERROR;
        s = cr + 2;

        size_t nlines = p->lines - 1;
        if (nlines) {
                p->headers = calloc(nlines, sizeof(*p->headers));
                if (!p->headers)
                        abort();
        }
        size_t hosts = 0, te = 0, te_elems = 0;
        bool te_chunked = true, close = false, ka = false;
        while (*s != '\r') {
                cr = strchr(s, '\r');
                *cr = '\0';
                struct field *f = &p->headers[p->nheaders];
                if (parse_field(s, f) < 0)
                        return fail(p, 400, "malformed header field");
                p->nheaders++;
                s = cr + 2;

                if (sp_http_strcaseeq(f->name, "content-length")) {
                        uint64_t n;
                        if (parse_content_length(f->value, &n) < 0)
                                return fail(p, 400, "invalid Content-Length");
                        if (p->has_cl && n != p->content_length)
                                return fail(p, 400, "conflicting Content-Length headers");
                        p->has_cl = true;
                        p->content_length = n;
                } else if (sp_http_strcaseeq(f->name, "transfer-encoding")) {
                        te++;
                        te_elems += te_elements(f->value, &te_chunked);
                } else if (sp_http_strcaseeq(f->name, "host")) {
                        hosts++;
                } else if (sp_http_strcaseeq(f->name, "connection")) {
                        close = close || list_has(f->value, "close");
                        ka = ka || list_has(f->value, "keep-alive");
                } else if (sp_http_strcaseeq(f->name, "expect")) {
                        if (!sp_http_strcaseeq(f->value, "100-continue"))
                                return fail(p, 417, "unsupported expectation");
                        p->expect_continue = p->minor >= 1;
                }
        }

        if (te) {
                if (p->minor == 0)
                        return fail(p, 400, "Transfer-Encoding is not allowed in HTTP/1.0");
                if (p->has_cl)
                        return fail(p, 400, "both Content-Length and Transfer-Encoding");
                if (te_elems != 1 || !te_chunked)
                        return fail(p, 400, "unsupported Transfer-Encoding");
                p->chunked = true;
        }
        if (hosts > 1 || (p->minor >= 1 && hosts == 0))
                return fail(p, 400, "exactly one Host header is required");
        p->keep_alive = !close && (p->minor >= 1 || ka);
        p->head_ok = true;
        p->state = P_HEAD_DONE;
        return SP_HTTP_PARSE_HEAD;
}

/* Scans header-section bytes, copying them, until the empty line. */
static sp_http_parse_event feed_head(sp_http_parser *p, const unsigned char *d, size_t len, size_t *used)
{
        size_t start = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = d[i];
                p->head_bytes++;
                if (p->lines == 0 && p->line_len > p->lim.max_uri + SP_HTTP_METHOD_MAX + 10) {
                        *used = i;
                        return fail(p, 414, "request URI too long");
                }
                if (p->head_bytes > p->lim.max_head_bytes) {
                        *used = i;
                        return fail(p, 431, "request header section too large");
                }
                if (p->prev_cr) {
                        p->prev_cr = false;
                        if (c != '\n') {
                                *used = i;
                                return fail(p, 400, "bare CR in header section");
                        }
                        if (p->line_len > 0) {
                                p->lines++;
                                p->line_len = 0;
                                if (p->lines - 1 > p->lim.max_headers) {
                                        *used = i + 1;
                                        return fail(p, 431, "too many header fields");
                                }
                                continue;
                        }
                        if (p->lines == 0) {
                                /* Blank lines before the request line are tolerated (RFC 9112 2.2). */
                                if (++p->blank_lead > 4) {
                                        *used = i + 1;
                                        return fail(p, 400, "malformed request line");
                                }
                                sp_buf_clear(&p->head);
                                start = i + 1;
                                continue;
                        }
                        sp_buf_append(&p->head, d + start, i + 1 - start, NULL);
                        *used = i + 1;
                        return parse_head(p);
                }
                if (c == '\r') {
                        p->prev_cr = true;
                } else if (c == '\n') {
                        *used = i;
                        return fail(p, 400, "bare LF in header section");
                } else if (c == '\0') {
                        *used = i;
                        return fail(p, 400, "NUL in header section");
                } else {
                        p->line_len++;
                }
        }
        sp_buf_append(&p->head, d + start, len - start, NULL);
        *used = len;
        return SP_HTTP_PARSE_AGAIN;
}

/* ---- body ---- */

/* Accumulates a CRLF-terminated line into p->line (without the CRLF), at most
 * max bytes. Returns 1 when complete, 0 when more is needed, -1 on error. */
static int feed_line(sp_http_parser *p, const unsigned char *d, size_t len, size_t max, size_t *used)
{
        for (size_t i = 0; i < len; i++) {
                unsigned char c = d[i];
                bool pending_cr = p->line.len > 0 && p->line.data[p->line.len - 1] == '\r';
                if (pending_cr) {
                        *used = i + 1;
                        if (c != '\n')
                                return -1;
                        p->line.data[--p->line.len] = '\0';
                        return 1;
                }
                if (c == '\n' || c == '\0' || p->line.len >= max) {
                        *used = i;
                        return -1;
                }
                sp_buf_append(&p->line, &c, 1, NULL);
        }
        *used = len;
        return 0;
}

static sp_http_parse_event parse_chunk_size(sp_http_parser *p)
{
        const char *s = p->line.data;
        uint64_t size = 0;
        size_t digits = 0;
        int h;
        while ((h = hexval((unsigned char)s[digits])) >= 0) {
                if (++digits > 15)
                        return fail(p, 400, "invalid chunk size");
                size = size * 16 + (uint64_t)h;
        }
        if (digits == 0)
                return fail(p, 400, "invalid chunk size");
        const char *ext = s + digits;
        while (*ext == ' ' || *ext == '\t')
                ext++;
        if (*ext && *ext != ';')
                return fail(p, 400, "invalid chunk size");
        if (ext > s + digits && !*ext)
                return fail(p, 400, "invalid chunk size");
        for (; *ext; ext++)
                if (!value_char_ok((unsigned char)*ext))
                        return fail(p, 400, "invalid chunk extension");
        sp_buf_clear(&p->line);
        if (p->received > p->max_body || size > p->max_body - p->received)
                return fail(p, 413, "request body too large");
        if (size == 0) {
                p->state = P_TRAILER;
        } else {
                p->remaining = size;
                p->state = P_CHUNK_DATA;
        }
        return SP_HTTP_PARSE_AGAIN;
}

static sp_http_parse_event parse_trailer(sp_http_parser *p)
{
        if (p->line.len == 0) {
                p->state = P_DONE;
                return SP_HTTP_PARSE_AGAIN;
        }
        if (++p->ntrailers > p->lim.max_headers)
                return fail(p, 431, "too many trailer fields");
        struct field f;
        if (parse_field(p->line.data, &f) < 0)
                return fail(p, 400, "malformed trailer field");
        sp_buf_clear(&p->line);
        return SP_HTTP_PARSE_AGAIN;
}

int sp_http_parser_set_max_body(sp_http_parser *p, uint64_t max_body)
{
        if (p->state == P_ERROR)
                return -SP_E_INVALID;
        p->max_body = max_body;
        if (p->has_cl && p->content_length > max_body) {
                fail(p, 413, "request body too large");
                return -SP_E_TOO_LARGE;
        }
        return 0;
}

sp_http_parse_event sp_http_parser_feed(sp_http_parser *p, const void *data, size_t len, size_t *ret_consumed,
                                        const char **ret_body, size_t *ret_body_len)
{
        const unsigned char *d = data ? data : (const unsigned char *)"";
        size_t i = 0, n = 0;
        sp_http_parse_event ev = SP_HTTP_PARSE_AGAIN;
        int r;

        *ret_body = NULL;
        *ret_body_len = 0;
        for (;;) {
                switch (p->state) {
                case P_ERROR:
                        ev = SP_HTTP_PARSE_ERROR;
                        goto out;
                case P_HEAD:
                        ev = feed_head(p, d, len, &n);
                        i = n;
                        goto out;
                case P_HEAD_DONE:
                        if (p->chunked) {
                                p->state = P_CHUNK_SIZE;
                        } else if (p->content_length > 0) {
                                if (p->content_length > p->max_body) {
                                        ev = fail(p, 413, "request body too large");
                                        goto out;
                                }
                                p->remaining = p->content_length;
                                p->state = P_BODY;
                        } else {
                                p->state = P_DONE;
                        }
                        break;
                case P_BODY:
                case P_CHUNK_DATA:
                        if (i == len) {
                                ev = SP_HTTP_PARSE_AGAIN;
                                goto out;
                        }
                        n = len - i < p->remaining ? len - i : (size_t)p->remaining;
                        *ret_body = (const char *)d + i;
                        *ret_body_len = n;
                        i += n;
                        p->remaining -= n;
                        p->received += n;
                        if (p->remaining == 0)
                                p->state = p->state == P_BODY ? P_DONE : P_CHUNK_CRLF;
                        ev = SP_HTTP_PARSE_BODY;
                        goto out;
                case P_CHUNK_CRLF:
                        /* p->line holds the CR already seen, if any. */
                        if (i == len) {
                                ev = SP_HTTP_PARSE_AGAIN;
                                goto out;
                        }
                        if (p->line.len == 0) {
                                if (d[i] != '\r') {
                                        ev = fail(p, 400, "missing CRLF after chunk data");
                                        goto out;
                                }
                                sp_buf_append(&p->line, "\r", 1, NULL);
                        } else {
                                if (d[i] != '\n') {
                                        ev = fail(p, 400, "missing CRLF after chunk data");
                                        goto out;
                                }
                                sp_buf_clear(&p->line);
                                p->state = P_CHUNK_SIZE;
                        }
                        i++;
                        break;
                case P_CHUNK_SIZE:
                        r = feed_line(p, d + i, len - i, p->lim.max_chunk_line, &n);
                        i += n;
                        if (r < 0) {
                                ev = fail(p, 400, "invalid chunk size line");
                                goto out;
                        }
                        if (r == 0) {
                                ev = SP_HTTP_PARSE_AGAIN;
                                goto out;
                        }
                        if (parse_chunk_size(p) < 0) {
                                ev = SP_HTTP_PARSE_ERROR;
                                goto out;
                        }
                        break;
                case P_TRAILER: {
                        size_t room = p->trailer_bytes >= p->lim.max_head_bytes
                                              ? 0
                                              : p->lim.max_head_bytes - p->trailer_bytes;
                        r = feed_line(p, d + i, len - i, room, &n);
                        i += n;
                        p->trailer_bytes += n;
                        if (r < 0) {
                                ev = p->line.len >= room ? fail(p, 431, "request trailer section too large")
                                                         : fail(p, 400, "malformed trailer field");
                                goto out;
                        }
                        if (r == 0) {
                                ev = SP_HTTP_PARSE_AGAIN;
                                goto out;
                        }
                        if (parse_trailer(p) < 0) {
                                ev = SP_HTTP_PARSE_ERROR;
                                goto out;
                        }
                        break;
                }
                case P_DONE:
                        ev = SP_HTTP_PARSE_DONE;
                        goto out;
                }
        }
out:
        p->seen += i;
        *ret_consumed = i;
        return ev;
}

int sp_http_parser_error(const sp_http_parser *p, sp_errc *ret_code, const char **ret_message)
{
        if (p->state != P_ERROR)
                return 0;
        if (ret_code)
                *ret_code = p->code;
        if (ret_message)
                *ret_message = p->message;
        return p->status;
}

static bool head_parsed(const sp_http_parser *p)
{
        return p->head_ok;
}

const char *sp_http_parser_method(const sp_http_parser *p)
{
        return head_parsed(p) ? p->method : NULL;
}

const char *sp_http_parser_target(const sp_http_parser *p)
{
        return head_parsed(p) ? p->target : NULL;
}

const char *sp_http_parser_raw_path(const sp_http_parser *p)
{
        return head_parsed(p) ? p->raw_path : NULL;
}

const char *sp_http_parser_path(const sp_http_parser *p)
{
        return head_parsed(p) ? p->path : NULL;
}

int sp_http_parser_version_minor(const sp_http_parser *p)
{
        return p->minor;
}

const char *sp_http_parser_header(const sp_http_parser *p, const char *name)
{
        if (!head_parsed(p))
                return NULL;
        for (size_t i = 0; i < p->nheaders; i++)
                if (sp_http_strcaseeq(p->headers[i].name, name))
                        return p->headers[i].value;
        return NULL;
}

size_t sp_http_parser_header_count(const sp_http_parser *p)
{
        return head_parsed(p) ? p->nheaders : 0;
}

bool sp_http_parser_header_at(const sp_http_parser *p, size_t i, const char **ret_name, const char **ret_value)
{
        if (i >= sp_http_parser_header_count(p))
                return false;
        *ret_name = p->headers[i].name;
        *ret_value = p->headers[i].value;
        return true;
}

const char *sp_http_parser_query(const sp_http_parser *p, const char *name)
{
        if (!head_parsed(p))
                return NULL;
        for (size_t i = 0; i < p->nparams; i++)
                if (strcmp(p->params[i].name, name) == 0)
                        return p->params[i].value;
        return NULL;
}

size_t sp_http_parser_query_count(const sp_http_parser *p)
{
        return head_parsed(p) ? p->nparams : 0;
}

bool sp_http_parser_query_at(const sp_http_parser *p, size_t i, const char **ret_name, const char **ret_value)
{
        if (i >= sp_http_parser_query_count(p))
                return false;
        *ret_name = p->params[i].name;
        *ret_value = p->params[i].value;
        return true;
}

int64_t sp_http_parser_content_length(const sp_http_parser *p)
{
        if (p->chunked)
                return -1;
        return (int64_t)p->content_length;
}

bool sp_http_parser_chunked(const sp_http_parser *p)
{
        return p->chunked;
}

bool sp_http_parser_keep_alive(const sp_http_parser *p)
{
        return p->keep_alive;
}

bool sp_http_parser_expect_continue(const sp_http_parser *p)
{
        return p->expect_continue;
}

bool sp_http_parser_done(const sp_http_parser *p)
{
        return p->state == P_DONE;
}

uint64_t sp_http_parser_body_received(const sp_http_parser *p)
{
        return p->received;
}

uint64_t sp_http_parser_bytes_seen(const sp_http_parser *p)
{
        return p->seen;
}
