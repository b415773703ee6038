/* SPDX-License-Identifier: Apache-2.0 */
/* The incremental HTTP/1.1 response parser (see space/http_client.h). */
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "space/http_client.h"

enum state {
        P_HEAD,
        P_HEAD_DONE,
        P_BODY,
        P_BODY_EOF,
        P_CHUNK_SIZE,
        P_CHUNK_DATA,
        P_CHUNK_CRLF,
        P_TRAILER,
        P_DONE,
        P_ERROR,
};

enum framing {
        F_NONE, /* no body: HEAD, 204, 304, or Content-Length: 0 */
        F_LENGTH,
        F_CHUNKED,
        F_EOF,
};

struct field {
        const char *name;
        const char *value;
};

struct sp_http_response_parser {
        sp_http_response_limits lim;
        bool head_request;
        enum state state;
        uint64_t seen;
        const char *error;

        /* header section scanner */
        sp_buf head;
        size_t line_len;
        size_t lines; /* completed non-empty lines of the current head */
        bool prev_cr;
        unsigned interim; /* 1xx responses skipped */

        /* the final head */
        bool head_ok;
        int status;
        int minor;
        const char *reason;
        struct field *headers;
        size_t nheaders;

        /* framing */
        enum framing framing;
        bool keep_alive;
        uint64_t content_length, remaining, received;

        /* chunk-size and trailer lines */
        sp_buf line;
        size_t trailer_bytes, ntrailers;
};

static sp_http_parse_event fail(sp_http_response_parser *p, const char *message)
{
        p->state = P_ERROR;
        p->error = message;
        return SP_HTTP_PARSE_ERROR;
}

sp_http_response_parser *sp_http_response_parser_new(const char *method, const sp_http_response_limits *limits)
{
        sp_http_response_parser *p = calloc(1, sizeof(*p));
        if (!p)
                abort();
        if (limits)
                p->lim = *limits;
        if (!p->lim.max_head_bytes)
                p->lim.max_head_bytes = SP_HTTP_RESPONSE_DEFAULT_MAX_HEAD;
        if (!p->lim.max_headers)
                p->lim.max_headers = SP_HTTP_RESPONSE_DEFAULT_MAX_HEADERS;
        if (!p->lim.max_chunk_line)
                p->lim.max_chunk_line = SP_HTTP_RESPONSE_DEFAULT_MAX_CHUNK_LINE;
        p->head_request = method && strcmp(method, "HEAD") == 0;
        p->state = P_HEAD;
        return p;
}

sp_http_response_parser *sp_http_response_parser_free(sp_http_response_parser *p)
{
        if (!p)
                return NULL;
        sp_buf_free(&p->head);
        sp_buf_free(&p->line);
        free(p->headers);
        free(p);
        return NULL;
}

/* ---- header section ---- */

static bool value_char_ok(unsigned char c)
{
        return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static bool strncaseeq(const char *a, size_t alen, const char *b)
{
        size_t blen = strlen(b);
        if (alen != blen)
                return false;
        for (size_t i = 0; i < alen; i++) {
                unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
                if (x >= 'A' && x <= 'Z')
                        x = (unsigned char)(x + 32);
                if (y >= 'A' && y <= 'Z')
                        y = (unsigned char)(y + 32);
                if (x != y)
                        return false;
        }
        return true;
}

/* Parses one "name: value" line (NUL-terminated, without CRLF) in place. */
static int parse_field(char *line, struct field *ret)
{
        char *colon = strchr(line, ':');
        if (!colon || !sp_http_token_valid(line, (size_t)(colon - line)))
                return -1; /* also obs-fold and whitespace before the colon */
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
                v++;
        char *end = v + strlen(v);
        while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
                end--;
        *end = '\0';
        ret->name = line;
        ret->value = v;
        return 0;
}

/* Calls fn on each element of a comma-separated list (trimmed; empty
 * elements included) and returns how many there were. */
static size_t list_walk(const char *value, void (*fn)(const char *s, size_t n, void *ud), void *ud)
{
        size_t count = 0;
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
                fn(s, (size_t)(t - s), ud);
                count++;
                if (!*e)
                        return count;
                s = e + 1;
        }
}

struct conn_tokens {
        bool close, keep_alive;
};

static void conn_token(const char *s, size_t n, void *ud)
{
        struct conn_tokens *t = ud;
        if (strncaseeq(s, n, "close"))
                t->close = true;
        else if (strncaseeq(s, n, "keep-alive"))
                t->keep_alive = true;
}

static void te_token(const char *s, size_t n, void *ud)
{
        bool *all_chunked = ud;
        if (!strncaseeq(s, n, "chunked"))
                *all_chunked = false;
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

/* "HTTP/1.x NNN[ reason]" */
static int parse_status_line(sp_http_response_parser *p, char *line)
{
        if (strncmp(line, "HTTP/1.", 7) != 0 || line[7] < '0' || line[7] > '9' || line[8] != ' ')
                return -1;
        const char *s = line + 9;
        if (s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9')
                return -1;
        if (s[3] != '\0' && s[3] != ' ')
                return -1;
        p->minor = line[7] - '0';
        p->status = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
        p->reason = s[3] ? s + 4 : s + 3;
        return 0;
}

/* The whole head is in p->head (ending in CRLF CRLF): parse it in place. */
static sp_http_parse_event parse_head(sp_http_response_parser *p)
{
        char *s = p->head.data;
        char *eol = strstr(s, "\r\n");
        *eol = '\0';
        if (parse_status_line(p, s) < 0)
                return fail(p, "malformed status line");
        s = eol + 2;
        free(p->headers);
        p->headers = calloc(p->lines ? p->lines : 1, sizeof(*p->headers));
        if (!p->headers)
                abort();
        p->nheaders = 0;
        while (*s != '\r') {
                eol = strstr(s, "\r\n");
                *eol = '\0';
                if (parse_field(s, &p->headers[p->nheaders]) < 0)
                        return fail(p, "malformed header field");
                p->nheaders++;
                s = eol + 2;
        }
        if (p->status == 101)
                return fail(p, "unexpected switch of protocols");
        if (p->status < 200) {
                /* An interim response: drop it and read the next head. */
                if (++p->interim > SP_HTTP_RESPONSE_MAX_INTERIM)
                        return fail(p, "too many interim responses");
                sp_buf_clear(&p->head);
                p->lines = 0;
                p->line_len = 0;
                return SP_HTTP_PARSE_AGAIN;
        }

        bool has_cl = false, has_te = false, te_chunked = true;
        size_t te_elems = 0;
        struct conn_tokens conn = {0};
        for (size_t i = 0; i < p->nheaders; i++) {
                const struct field *f = &p->headers[i];
                if (sp_http_strcaseeq(f->name, "content-length")) {
                        uint64_t v;
                        if (parse_content_length(f->value, &v) < 0)
                                return fail(p, "invalid Content-Length");
                        if (has_cl && v != p->content_length)
                                return fail(p, "conflicting Content-Length");
                        has_cl = true;
                        p->content_length = v;
                } else if (sp_http_strcaseeq(f->name, "transfer-encoding")) {
                        has_te = true;
                        te_elems += list_walk(f->value, te_token, &te_chunked);
                } else if (sp_http_strcaseeq(f->name, "connection")) {
                        list_walk(f->value, conn_token, &conn);
                }
        }
        p->keep_alive = p->minor >= 1 ? !conn.close : (conn.keep_alive && !conn.close);
        if (p->head_request || p->status == 204 || p->status == 304) {
                p->framing = F_NONE;
                p->content_length = 0;
        } else if (has_te) {
                if (has_cl)
                        return fail(p, "both Content-Length and Transfer-Encoding");
                if (p->minor == 0)
                        return fail(p, "Transfer-Encoding on HTTP/1.0");
                if (te_elems != 1 || !te_chunked)
                        return fail(p, "unsupported Transfer-Encoding");
                p->framing = F_CHUNKED;
        } else if (has_cl) {
                p->framing = p->content_length > 0 ? F_LENGTH : F_NONE;
        } else {
                p->framing = F_EOF;
                p->keep_alive = false;
        }
        p->head_ok = true;
        p->state = P_HEAD_DONE;
        return SP_HTTP_PARSE_HEAD;
}

/* Scans header-section bytes, copying them into p->head, until the blank
 * line that ends a head (then parses it). */
static sp_http_parse_event feed_head(sp_http_response_parser *p, const unsigned char *d, size_t len, size_t *used)
{
        size_t start = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = d[i];
                if (p->head.len + (i - start) + 1 > p->lim.max_head_bytes) {
                        *used = i;
                        return fail(p, "response head too large");
                }
                if (p->prev_cr) {
                        p->prev_cr = false;
                        if (c != '\n') {
                                *used = i;
                                return fail(p, "bare CR in response head");
                        }
                        if (p->line_len > 0) {
                                p->line_len = 0;
                                if (++p->lines > p->lim.max_headers + 1) {
                                        *used = i;
                                        return fail(p, "too many header fields");
                                }
                                continue;
                        }
                        if (p->lines == 0) {
                                *used = i;
                                return fail(p, "malformed status line");
                        }
                        sp_buf_append(&p->head, d + start, i + 1 - start, NULL);
                        start = i + 1;
                        sp_http_parse_event ev = parse_head(p);
                        if (ev != SP_HTTP_PARSE_AGAIN) {
                                *used = i + 1;
                                return ev;
                        }
                        continue; /* an interim response was skipped */
                }
                if (c == '\r') {
                        p->prev_cr = true;
                } else if (c == '\n') {
                        *used = i;
                        return fail(p, "bare LF in response head");
                } else if (!value_char_ok(c)) {
                        *used = i;
                        return fail(p, "control character in response head");
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
static int feed_line(sp_http_response_parser *p, const unsigned char *d, size_t len, size_t max, size_t *used)
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
                if (c == '\n' || (c != '\r' && !value_char_ok(c)) || p->line.len >= max) {
                        *used = i;
                        return -1;
                }
                sp_buf_append(&p->line, &c, 1, NULL);
        }
        *used = len;
        return 0;
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

static sp_http_parse_event parse_chunk_size(sp_http_response_parser *p)
{
        const char *s = p->line.data;
        uint64_t size = 0;
        size_t digits = 0;
        int h;
        while ((h = hexval((unsigned char)s[digits])) >= 0) {
                if (++digits > 15)
                        return fail(p, "invalid chunk size");
                size = size * 16 + (uint64_t)h;
        }
        if (digits == 0)
                return fail(p, "invalid chunk size");
        const char *ext = s + digits;
        while (*ext == ' ' || *ext == '\t')
                ext++;
        if (*ext ? *ext != ';' : ext > s + digits)
                return fail(p, "invalid chunk size");
        sp_buf_clear(&p->line);
        if (size == 0) {
                p->state = P_TRAILER;
        } else {
                p->remaining = size;
                p->state = P_CHUNK_DATA;
        }
        return SP_HTTP_PARSE_AGAIN;
}

static sp_http_parse_event parse_trailer(sp_http_response_parser *p)
{
        if (p->line.len == 0) {
                p->state = P_DONE;
                return SP_HTTP_PARSE_AGAIN;
        }
        if (++p->ntrailers > p->lim.max_headers)
                return fail(p, "too many trailer fields");
        struct field f;
        if (parse_field(p->line.data, &f) < 0)
                return fail(p, "malformed trailer field");
        sp_buf_clear(&p->line);
        return SP_HTTP_PARSE_AGAIN;
}

sp_http_parse_event sp_http_response_parser_feed(sp_http_response_parser *p, const void *data, size_t len,
                                                 size_t *ret_consumed, const char **ret_body, size_t *ret_body_len)
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
                        switch (p->framing) {
                        case F_NONE:
                                p->state = P_DONE;
                                break;
                        case F_LENGTH:
                                p->remaining = p->content_length;
                                p->state = P_BODY;
                                break;
                        case F_CHUNKED:
                                p->state = P_CHUNK_SIZE;
                                break;
                        case F_EOF:
                                p->state = P_BODY_EOF;
                                break;
                        }
                        break;
                case P_BODY:
                case P_CHUNK_DATA:
                case P_BODY_EOF:
                        if (i == len) {
                                ev = SP_HTTP_PARSE_AGAIN;
                                goto out;
                        }
                        n = len - i;
                        if (p->state != P_BODY_EOF && n > p->remaining)
                                n = (size_t)p->remaining;
                        *ret_body = (const char *)d + i;
                        *ret_body_len = n;
                        i += n;
                        p->received += n;
                        if (p->state != P_BODY_EOF) {
                                p->remaining -= n;
                                if (p->remaining == 0)
                                        p->state = p->state == P_BODY ? P_DONE : P_CHUNK_CRLF;
                        }
                        ev = SP_HTTP_PARSE_BODY;
                        goto out;
                case P_CHUNK_CRLF:
                        /* p->line holds the CR already seen, if any. */
                        if (i == len) {
                                ev = SP_HTTP_PARSE_AGAIN;
                                goto out;
                        }
                        if (d[i] != (p->line.len == 0 ? '\r' : '\n')) {
                                ev = fail(p, "missing CRLF after chunk data");
                                goto out;
                        }
                        if (p->line.len == 0) {
                                sp_buf_append(&p->line, "\r", 1, NULL);
                        } else {
                                sp_buf_clear(&p->line);
                                p->state = P_CHUNK_SIZE;
                        }
                        i++;
                        break;
                case P_CHUNK_SIZE:
                        r = feed_line(p, d + i, len - i, p->lim.max_chunk_line, &n);
                        i += n;
                        if (r < 0) {
                                ev = fail(p, "invalid chunk size line");
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
                                ev = fail(p, p->line.len >= room ? "trailer section too large"
                                                                 : "malformed trailer field");
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

sp_http_parse_event sp_http_response_parser_eof(sp_http_response_parser *p)
{
        switch (p->state) {
        case P_DONE:
                return SP_HTTP_PARSE_DONE;
        case P_ERROR:
                return SP_HTTP_PARSE_ERROR;
        case P_HEAD_DONE:
                if (p->framing == F_NONE || p->framing == F_EOF) {
                        p->state = P_DONE;
                        return SP_HTTP_PARSE_DONE;
                }
                return fail(p, "connection closed before the end of the body");
        case P_BODY_EOF:
                p->state = P_DONE;
                return SP_HTTP_PARSE_DONE;
        case P_HEAD:
                return fail(p, p->seen == 0 ? "connection closed before the response"
                                            : "connection closed in the response head");
        default:
                return fail(p, "connection closed before the end of the body");
        }
}

const char *sp_http_response_parser_error(const sp_http_response_parser *p)
{
        return p->state == P_ERROR ? p->error : NULL;
}

int sp_http_response_parser_status(const sp_http_response_parser *p)
{
        return p->head_ok ? p->status : 0;
}

const char *sp_http_response_parser_reason(const sp_http_response_parser *p)
{
        return p->head_ok ? p->reason : NULL;
}

int sp_http_response_parser_version_minor(const sp_http_response_parser *p)
{
        return p->head_ok ? p->minor : 0;
}

const char *sp_http_response_parser_header(const sp_http_response_parser *p, const char *name)
{
        if (!p->head_ok)
                return NULL;
        for (size_t i = 0; i < p->nheaders; i++)
                if (sp_http_strcaseeq(p->headers[i].name, name))
                        return p->headers[i].value;
        return NULL;
}

size_t sp_http_response_parser_header_count(const sp_http_response_parser *p)
{
        return p->head_ok ? p->nheaders : 0;
}

bool sp_http_response_parser_header_at(const sp_http_response_parser *p, size_t i, const char **ret_name,
                                       const char **ret_value)
{
        if (!p->head_ok || i >= p->nheaders)
                return false;
        *ret_name = p->headers[i].name;
        *ret_value = p->headers[i].value;
        return true;
}

int64_t sp_http_response_parser_content_length(const sp_http_response_parser *p)
{
        if (!p->head_ok)
                return 0;
        switch (p->framing) {
        case F_NONE:
                return 0;
        case F_LENGTH:
                return (int64_t)p->content_length;
        default:
                return -1;
        }
}

bool sp_http_response_parser_chunked(const sp_http_response_parser *p)
{
        return p->head_ok && p->framing == F_CHUNKED;
}

bool sp_http_response_parser_keep_alive(const sp_http_response_parser *p)
{
        return p->head_ok && p->keep_alive;
}

bool sp_http_response_parser_done(const sp_http_response_parser *p)
{
        return p->state == P_DONE;
}

uint64_t sp_http_response_parser_bytes_seen(const sp_http_response_parser *p)
{
        return p->seen;
}

uint64_t sp_http_response_parser_body_received(const sp_http_response_parser *p)
{
        return p->received;
}
