/* SPDX-License-Identifier: Apache-2.0 */
/* The incremental HTTP/1.1 request parser (see space/http_parser.h). */
#include <stdlib.h>
#include <string.h>

#include "http1.h"
#include "space/buf.h"
#include "space/http_parser.h"

struct sp_http_parser {
        sp_http_limits lim;
        sp__http1_msg msg;

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
        sp__http1_field *headers;
        size_t nheaders;
        sp__http1_field *params;
        size_t nparams;

        /* framing */
        sp__http1_framing framing;
        bool head_ok, chunked, keep_alive, expect_continue;
        uint64_t max_body;
};

int sp_http_percent_decode(const char *s, size_t len, bool plus_space, char *out, size_t *ret_len)
{
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c == '%') {
                        if (len - i < 3)
                                return -SP_E_INVALID;
                        int hi = sp__http1_hexval((unsigned char)s[i + 1]),
                            lo = sp__http1_hexval((unsigned char)s[i + 2]);
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
        return sp__http1_fail(&p->msg, status, message);
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
        return p;
}

sp_http_parser *sp_http_parser_free(sp_http_parser *p)
{
        if (!p)
                return NULL;
        sp_buf_free(&p->head);
        sp__http1_msg_free(&p->msg);
        free(p->headers);
        free(p->params);
        free(p->dec);
        free(p);
        return NULL;
}

/* ---- header section ---- */

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
                        sp__http1_field *f = &p->params[p->nparams++];
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

/* The body that follows the head (its limit is checked when it starts). */
static void start_body(sp_http_parser *p)
{
        sp__http1_body_limits lim = {.max_body = p->max_body,
                                     .max_chunk_line = p->lim.max_chunk_line,
                                     .max_trailer_bytes = p->lim.max_head_bytes,
                                     .max_trailers = p->lim.max_headers,
                                     .request = true};
        uint64_t length = p->framing.content_length;
        sp__http1_body_kind kind = p->chunked   ? SP__HTTP1_BODY_CHUNKED
                                   : length > 0 ? SP__HTTP1_BODY_LENGTH
                                                : SP__HTTP1_BODY_NONE;
        sp__http1_start_body(&p->msg, kind, length, &lim);
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
        size_t hosts = 0;
        const char *why;
        sp__http1_framing_init(&p->framing);
        while (*s != '\r') {
                cr = strchr(s, '\r');
                *cr = '\0';
                sp__http1_field *f = &p->headers[p->nheaders];
                if (sp__http1_parse_field(s, f) < 0)
                        return fail(p, 400, "malformed header field");
                p->nheaders++;
                s = cr + 2;

                int r = sp__http1_framing_field(&p->framing, f, &why);
                if (r < 0)
                        return fail(p, 400, why);
                if (r > 0)
                        continue;
                if (sp_http_strcaseeq(f->name, "host")) {
                        hosts++;
                } else if (sp_http_strcaseeq(f->name, "expect")) {
                        if (!sp_http_strcaseeq(f->value, "100-continue"))
                                return fail(p, 417, "unsupported expectation");
                        p->expect_continue = p->minor >= 1;
                }
        }

        if ((why = sp__http1_framing_check(&p->framing, p->minor)))
                return fail(p, 400, why);
        p->chunked = p->framing.te_fields > 0;
        if (hosts > 1 || (p->minor >= 1 && hosts == 0))
                return fail(p, 400, "exactly one Host header is required");
        p->keep_alive = sp__http1_framing_keep_alive(&p->framing, p->minor);
        p->head_ok = true;
        start_body(p);
        return SP_HTTP_PARSE_HEAD;
}

/* Scans header-section bytes, copying them, until the empty line. */
static sp_http_parse_event feed_head(void *parser, const unsigned char *d, size_t len, size_t *used)
{
        sp_http_parser *p = parser;
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

int sp_http_parser_set_max_body(sp_http_parser *p, uint64_t max_body)
{
        if (sp__http1_failed(&p->msg))
                return -SP_E_INVALID;
        p->max_body = max_body;
        p->msg.lim.max_body = max_body;
        if (p->framing.has_length && p->framing.content_length > max_body) {
                fail(p, 413, "request body too large");
                return -SP_E_TOO_LARGE;
        }
        return 0;
}

sp_http_parse_event sp_http_parser_feed(sp_http_parser *p, const void *data, size_t len, size_t *ret_consumed,
                                        const char **ret_body, size_t *ret_body_len)
{
        return sp__http1_feed(&p->msg, data, len, ret_consumed, ret_body, ret_body_len, feed_head, p);
}

int sp_http_parser_error(const sp_http_parser *p, sp_errc *ret_code, const char **ret_message)
{
        if (!sp__http1_failed(&p->msg))
                return 0;
        int status = p->msg.status;
        if (ret_code)
                *ret_code = status == 413 || status == 414 || status == 431 ? SP_E_TOO_LARGE
                            : status == 501 || status == 505                ? SP_E_UNSUPPORTED
                                                                            : SP_E_INVALID;
        if (ret_message)
                *ret_message = p->msg.message;
        return status;
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
        return head_parsed(p) ? sp__http1_field_get(p->headers, p->nheaders, name) : NULL;
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
        return (int64_t)p->framing.content_length;
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
        return sp__http1_done(&p->msg);
}

uint64_t sp_http_parser_body_received(const sp_http_parser *p)
{
        return p->msg.received;
}

uint64_t sp_http_parser_bytes_seen(const sp_http_parser *p)
{
        return p->msg.seen;
}
