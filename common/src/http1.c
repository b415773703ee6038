/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/1.1 fields, framing and body decoding for both parsers (see http1.h). */
#include "http1.h"

#include <string.h>

enum msg_state {
        M_HEAD, /* zero: the parser reads the head */
        M_EMPTY, /* no body; DONE on the next feed */
        M_LENGTH,
        M_EOF,
        M_CHUNK_SIZE,
        M_CHUNK_DATA,
        M_CHUNK_CRLF,
        M_TRAILER,
        M_DONE,
        M_ERROR,
};

/* ---- tokens and fields ---- */

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

int sp__http1_hexval(unsigned char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

bool sp__http1_value_char_ok(unsigned char c)
{
        return c == '\t' || (c >= 0x20 && c != 0x7f);
}

int sp__http1_parse_field(char *line, sp__http1_field *ret)
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
                if (!sp__http1_value_char_ok((unsigned char)*c))
                        return -1;
        ret->name = line;
        ret->value = v;
        return 0;
}

const char *sp__http1_field_get(const sp__http1_field *fields, size_t n, const char *name)
{
        for (size_t i = 0; i < n; i++)
                if (sp_http_strcaseeq(fields[i].name, name))
                        return fields[i].value;
        return NULL;
}

/* ---- framing ---- */

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

static void connection_token(const char *s, size_t n, void *ud)
{
        sp__http1_framing *fr = ud;
        if (strncaseeq(s, n, "close"))
                fr->close = true;
        else if (strncaseeq(s, n, "keep-alive"))
                fr->keep_alive = true;
}

static void te_token(const char *s, size_t n, void *ud)
{
        sp__http1_framing *fr = ud;
        if (!strncaseeq(s, n, "chunked"))
                fr->te_all_chunked = false;
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

void sp__http1_framing_init(sp__http1_framing *fr)
{
        memset(fr, 0, sizeof(*fr));
        fr->te_all_chunked = true;
}

int sp__http1_framing_field(sp__http1_framing *fr, const sp__http1_field *f, const char **ret_message)
{
        if (sp_http_strcaseeq(f->name, "content-length")) {
                uint64_t n;
                if (parse_content_length(f->value, &n) < 0) {
                        *ret_message = "invalid Content-Length";
                        return -1;
                }
                if (fr->has_length && n != fr->content_length) {
                        *ret_message = "conflicting Content-Length headers";
                        return -1;
                }
                fr->has_length = true;
                fr->content_length = n;
                return 1;
        }
        if (sp_http_strcaseeq(f->name, "transfer-encoding")) {
                fr->te_fields++;
                fr->te_codings += list_walk(f->value, te_token, fr);
                return 1;
        }
        if (sp_http_strcaseeq(f->name, "connection")) {
                list_walk(f->value, connection_token, fr);
                return 1;
        }
        return 0;
}

const char *sp__http1_framing_check(const sp__http1_framing *fr, int minor)
{
        if (fr->te_fields == 0)
                return NULL;
        if (minor == 0)
                return "Transfer-Encoding is not allowed in HTTP/1.0";
        if (fr->has_length)
                return "both Content-Length and Transfer-Encoding";
        if (fr->te_codings != 1 || !fr->te_all_chunked)
                return "unsupported Transfer-Encoding";
        return NULL;
}

bool sp__http1_framing_keep_alive(const sp__http1_framing *fr, int minor)
{
        return !fr->close && (minor >= 1 || fr->keep_alive);
}

/* ---- the message ---- */

sp_http_parse_event sp__http1_fail(sp__http1_msg *m, int status, const char *message)
{
        m->state = M_ERROR;
        m->status = status;
        m->message = message;
        return SP_HTTP_PARSE_ERROR;
}

void sp__http1_start_body(sp__http1_msg *m, sp__http1_body_kind kind, uint64_t length, const sp__http1_body_limits *lim)
{
        static const enum msg_state first[] = {
                [SP__HTTP1_BODY_NONE] = M_EMPTY,
                [SP__HTTP1_BODY_LENGTH] = M_LENGTH,
                [SP__HTTP1_BODY_CHUNKED] = M_CHUNK_SIZE,
                [SP__HTTP1_BODY_EOF] = M_EOF,
        };
        m->lim = *lim;
        m->remaining = length;
        m->state = first[kind];
}

sp_http_parse_event sp__http1_end(sp__http1_msg *m)
{
        switch (m->state) {
        case M_ERROR:
                return SP_HTTP_PARSE_ERROR;
        case M_EMPTY:
        case M_EOF:
        case M_DONE:
                m->state = M_DONE;
                return SP_HTTP_PARSE_DONE;
        default:
                return sp__http1_fail(m, 400, "connection closed before the end of the body");
        }
}

bool sp__http1_in_head(const sp__http1_msg *m)
{
        return m->state == M_HEAD;
}

bool sp__http1_failed(const sp__http1_msg *m)
{
        return m->state == M_ERROR;
}

bool sp__http1_done(const sp__http1_msg *m)
{
        return m->state == M_DONE;
}

void sp__http1_msg_free(sp__http1_msg *m)
{
        sp_buf_free(&m->line);
}

/* Accumulates a CRLF-terminated line into m->line (without the CRLF), at most
 * max bytes. Returns 1 when complete, 0 when more is needed, -1 on error. */
static int feed_line(sp__http1_msg *m, const unsigned char *d, size_t len, size_t max, size_t *used)
{
        for (size_t i = 0; i < len; i++) {
                unsigned char c = d[i];
                bool pending_cr = m->line.len > 0 && m->line.data[m->line.len - 1] == '\r';
                if (pending_cr) {
                        *used = i + 1;
                        if (c != '\n')
                                return -1;
                        m->line.data[--m->line.len] = '\0';
                        return 1;
                }
                if (c == '\n' || c == '\0' || m->line.len >= max) {
                        *used = i;
                        return -1;
                }
                sp_buf_append(&m->line, &c, 1, NULL);
        }
        *used = len;
        return 0;
}

static sp_http_parse_event parse_chunk_size(sp__http1_msg *m)
{
        const char *s = m->line.data;
        uint64_t size = 0;
        size_t digits = 0;
        int h;
        while ((h = sp__http1_hexval((unsigned char)s[digits])) >= 0) {
                if (++digits > 15)
                        return sp__http1_fail(m, 400, "invalid chunk size");
                size = size * 16 + (uint64_t)h;
        }
        if (digits == 0)
                return sp__http1_fail(m, 400, "invalid chunk size");
        const char *ext = s + digits;
        while (*ext == ' ' || *ext == '\t')
                ext++;
        if (*ext ? *ext != ';' : ext > s + digits)
                return sp__http1_fail(m, 400, "invalid chunk size");
        for (; *ext; ext++)
                if (!sp__http1_value_char_ok((unsigned char)*ext))
                        return sp__http1_fail(m, 400, "invalid chunk extension");
        sp_buf_clear(&m->line);
        if (m->received > m->lim.max_body || size > m->lim.max_body - m->received)
                return sp__http1_fail(m, 413, "request body too large");
        if (size == 0) {
                m->state = M_TRAILER;
        } else {
                m->remaining = size;
                m->state = M_CHUNK_DATA;
        }
        return SP_HTTP_PARSE_AGAIN;
}

static sp_http_parse_event parse_trailer(sp__http1_msg *m)
{
        if (m->line.len == 0) {
                m->state = M_DONE;
                return SP_HTTP_PARSE_AGAIN;
        }
        if (++m->ntrailers > m->lim.max_trailers)
                return sp__http1_fail(m, 431, "too many trailer fields");
        sp__http1_field f;
        if (sp__http1_parse_field(m->line.data, &f) < 0)
                return sp__http1_fail(m, 400, "malformed trailer field");
        sp_buf_clear(&m->line);
        return SP_HTTP_PARSE_AGAIN;
}

/* One step of a chunked body that is not data: the CRLF after chunk data, a
 * chunk-size line or a trailer line. Consumes *used bytes; returns AGAIN
 * when it needs more input than len, ERROR, or BODY to go on. */
static sp_http_parse_event chunk_step(sp__http1_msg *m, const unsigned char *d, size_t len, size_t *used)
{
        *used = 0;
        if (len == 0)
                return SP_HTTP_PARSE_AGAIN;
        if (m->state == M_CHUNK_CRLF) {
                /* m->line holds the CR already seen, if any. */
                if (d[0] != (m->line.len == 0 ? '\r' : '\n'))
                        return sp__http1_fail(m, 400, "missing CRLF after chunk data");
                *used = 1;
                if (m->line.len == 0) {
                        sp_buf_append(&m->line, "\r", 1, NULL);
                } else {
                        sp_buf_clear(&m->line);
                        m->state = M_CHUNK_SIZE;
                }
                return SP_HTTP_PARSE_BODY;
        }
        if (m->state == M_CHUNK_SIZE) {
                int r = feed_line(m, d, len, m->lim.max_chunk_line, used);
                if (r < 0)
                        return sp__http1_fail(m, 400, "invalid chunk size line");
                if (r == 0)
                        return SP_HTTP_PARSE_AGAIN;
                return parse_chunk_size(m) < 0 ? SP_HTTP_PARSE_ERROR : SP_HTTP_PARSE_BODY;
        }
        size_t room = m->trailer_bytes >= m->lim.max_trailer_bytes ? 0 : m->lim.max_trailer_bytes - m->trailer_bytes;
        int r = feed_line(m, d, len, room, used);
        m->trailer_bytes += *used;
        if (r < 0) {
                if (m->line.len < room)
                        return sp__http1_fail(m, 400, "malformed trailer field");
                return sp__http1_fail(
                        m, 431, m->lim.request ? "request trailer section too large" : "trailer section too large");
        }
        if (r == 0)
                return SP_HTTP_PARSE_AGAIN;
        return parse_trailer(m) < 0 ? SP_HTTP_PARSE_ERROR : SP_HTTP_PARSE_BODY;
}

/* Hands out body bytes from d[0..len) (*used of them). */
static sp_http_parse_event body_bytes(sp__http1_msg *m, const unsigned char *d, size_t len, size_t *used,
                                      const char **ret_body, size_t *ret_body_len)
{
        *used = 0;
        /* A Content-Length over the limit fails before its first byte (the
         * limit may have been set after the head). */
        if (m->state == M_LENGTH && m->received == 0 && m->remaining > m->lim.max_body)
                return sp__http1_fail(m, 413, "request body too large");
        if (len == 0)
                return SP_HTTP_PARSE_AGAIN;
        size_t n = len;
        if (m->state != M_EOF && n > m->remaining)
                n = (size_t)m->remaining;
        *ret_body = (const char *)d;
        *ret_body_len = n;
        *used = n;
        m->received += n;
        if (m->state != M_EOF) {
                m->remaining -= n;
                if (m->remaining == 0)
                        m->state = m->state == M_LENGTH ? M_DONE : M_CHUNK_CRLF;
        }
        return SP_HTTP_PARSE_BODY;
}

/* Reads body bytes: in a loop over the chunked framing until body bytes, the
 * end of the input, the end of the message or an error. */
static sp_http_parse_event feed_body(sp__http1_msg *m, const unsigned char *d, size_t len, size_t *used,
                                     const char **ret_body, size_t *ret_body_len)
{
        size_t i = 0, n = 0;
        sp_http_parse_event ev;
        for (;;) {
                switch (m->state) {
                case M_EMPTY:
                        m->state = M_DONE;
                        ev = SP_HTTP_PARSE_DONE;
                        break;
                case M_DONE:
                        ev = SP_HTTP_PARSE_DONE;
                        break;
                case M_LENGTH:
                case M_CHUNK_DATA:
                case M_EOF:
                        ev = body_bytes(m, d + i, len - i, &n, ret_body, ret_body_len);
                        i += n;
                        break;
                default:
                        ev = chunk_step(m, d + i, len - i, &n);
                        i += n;
                        if (ev == SP_HTTP_PARSE_BODY)
                                continue;
                        break;
                }
                *used = i;
                return ev;
        }
}

sp_http_parse_event sp__http1_feed(sp__http1_msg *m, const void *data, size_t len, size_t *ret_consumed,
                                   const char **ret_body, size_t *ret_body_len, sp__http1_head_fn read_head,
                                   void *parser)
{
        const unsigned char *d = data ? data : (const unsigned char *)"";
        size_t used = 0;
        sp_http_parse_event ev;

        *ret_body = NULL;
        *ret_body_len = 0;
        if (m->state == M_ERROR)
                ev = SP_HTTP_PARSE_ERROR;
        else if (m->state == M_HEAD)
                ev = read_head(parser, d, len, &used);
        else
                ev = feed_body(m, d, len, &used, ret_body, ret_body_len);
        m->seen += used;
        *ret_consumed = used;
        return ev;
}
