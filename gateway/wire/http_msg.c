/* SPDX-License-Identifier: Apache-2.0 */
/* Header fields, body framing and chunked bodies of HTTP/1.1 requests, and a
 * streaming search (see http_msg.h). The field rules are those of
 * http_host.c, which has already checked every head given here; the chunked
 * reader is a byte-at-a-time state machine so that it needs no buffer and
 * gives the same answer however the body is split. */
#include "wire/http_msg.h"

#include <string.h>

static bool is_tchar(unsigned char c)
{
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
                return true;
        return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A byte no field value may hold: controls but HTAB. */
static bool is_ctl(unsigned char c)
{
        return (c < 0x20 && c != '\t') || c == 0x7f;
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

static unsigned char lower(unsigned char c)
{
        return c >= 'A' && c <= 'Z' ? (unsigned char)(c + ('a' - 'A')) : c;
}

static bool caseeq(const char *s, size_t n, const char *lit)
{
        if (strlen(lit) != n)
                return false;
        for (size_t i = 0; i < n; i++)
                if (lower((unsigned char)s[i]) != (unsigned char)lit[i])
                        return false;
        return true;
}

/* ---- the head ---- */

/* The line at head[pos..head_len) without its CRLF: its length into *n and
 * the position after it, or 0 when it is not ended by CRLF. */
static size_t next_line(const char *d, size_t head_len, size_t pos, size_t *n)
{
        const char *lf = memchr(d + pos, '\n', head_len - pos);
        if (!lf)
                return 0;
        size_t at = (size_t)(lf - d);
        if (at == pos || d[at - 1] != '\r')
                return 0;
        *n = at - 1 - pos;
        return at + 1;
}

int gw_http_fields_each(const uint8_t *head, size_t head_len, int (*fn)(const gw_http_field *f, void *ud), void *ud)
{
        const char *d = (const char *)head;
        size_t n, pos = next_line(d, head_len, 0, &n);
        if (pos == 0)
                return -1;
        for (;;) {
                const char *l = d + pos;
                size_t next = pos < head_len ? next_line(d, head_len, pos, &n) : 0;
                if (next == 0)
                        return -1;
                if (n == 0)
                        return 0;
                const char *colon = memchr(l, ':', n);
                if (!colon || colon == l)
                        return -1;
                const char *v = colon + 1, *end = l + n;
                while (v < end && (*v == ' ' || *v == '\t'))
                        v++;
                while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
                        end--;
                gw_http_field f = {
                        .name = l,
                        .name_len = (size_t)(colon - l),
                        .value = v,
                        .value_len = (size_t)(end - v),
                        .line = l,
                        .line_len = next - pos,
                };
                int r = fn(&f, ud);
                if (r != 0)
                        return r;
                pos = next;
        }
}

int gw_http_request_line(const uint8_t *head, size_t head_len, const char **target, size_t *target_len)
{
        const char *d = (const char *)head;
        size_t n;
        if (next_line(d, head_len, 0, &n) == 0)
                return -1;
        const char *sp1 = memchr(d, ' ', n);
        if (!sp1 || sp1 == d)
                return -1;
        const char *t = sp1 + 1;
        const char *sp2 = memchr(t, ' ', (size_t)(d + n - t));
        if (!sp2 || sp2 == t || sp2 == d + n - 1)
                return -1;
        *target = t;
        *target_len = (size_t)(sp2 - t);
        return 0;
}

/* ---- framing ---- */

typedef struct framing_scan {
        unsigned lengths, encodings, upgrades;
        uint64_t length;
        const char *length_bad; /* why the Content-Length is refused */
        bool chunked; /* the (last) Transfer-Encoding is exactly "chunked" */
        bool lookalike;
        bool conn_close, conn_keep_alive, conn_upgrade;
} framing_scan;

static const char *parse_length(const char *v, size_t n, uint64_t *ret)
{
        if (n == 0)
                return "empty Content-Length";
        if (memchr(v, ',', n))
                return "Content-Length is a list";
        if (n > GW_HTTP_LENGTH_DIGITS_MAX)
                return "Content-Length longer than 18 digits";
        uint64_t x = 0;
        for (size_t i = 0; i < n; i++) {
                if (v[i] < '0' || v[i] > '9')
                        return "Content-Length is not digits only";
                x = x * 10 + (uint64_t)(v[i] - '0');
        }
        *ret = x;
        return NULL;
}

/* The tokens of a Connection field, a comma list (empty elements allowed). */
static void connection_tokens(framing_scan *fs, const char *v, size_t n)
{
        size_t i = 0;
        while (i <= n) {
                size_t s = i;
                while (i < n && v[i] != ',')
                        i++;
                size_t e = i;
                while (s < e && (v[s] == ' ' || v[s] == '\t'))
                        s++;
                while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
                        e--;
                if (caseeq(v + s, e - s, "close"))
                        fs->conn_close = true;
                else if (caseeq(v + s, e - s, "keep-alive"))
                        fs->conn_keep_alive = true;
                else if (caseeq(v + s, e - s, "upgrade"))
                        fs->conn_upgrade = true;
                i++;
        }
}

static int framing_field(const gw_http_field *f, void *ud)
{
        framing_scan *fs = ud;
        if (caseeq(f->name, f->name_len, "content-length")) {
                if (fs->lengths++ == 0)
                        fs->length_bad = parse_length(f->value, f->value_len, &fs->length);
        } else if (caseeq(f->name, f->name_len, "transfer-encoding")) {
                fs->encodings++;
                fs->chunked = caseeq(f->value, f->value_len, "chunked");
        } else if (caseeq(f->name, f->name_len, "connection")) {
                connection_tokens(fs, f->value, f->value_len);
        } else if (caseeq(f->name, f->name_len, "upgrade")) {
                if (f->value_len > 0)
                        fs->upgrades++;
        } else if (caseeq(f->name, f->name_len, "content_length") ||
                   caseeq(f->name, f->name_len, "transfer_encoding")) {
                fs->lookalike = true;
        }
        return 0;
}

static int refuse(gw_http_framing *ret, const char *reason)
{
        gw_http_framing keep = {.reason = reason};
        *ret = keep;
        return -1;
}

int gw_http_framing_of(const uint8_t *head, size_t head_len, int minor_version, gw_http_framing *ret)
{
        memset(ret, 0, sizeof(*ret));
        framing_scan fs = {0};
        if (gw_http_fields_each(head, head_len, framing_field, &fs) != 0)
                return refuse(ret, "malformed request head");
        if (fs.lookalike)
                return refuse(ret, "Content_Length or Transfer_Encoding field");
        if (fs.lengths > 1)
                return refuse(ret, "more than one Content-Length");
        if (fs.lengths && fs.length_bad)
                return refuse(ret, fs.length_bad);
        if (fs.encodings) {
                if (minor_version == 0)
                        return refuse(ret, "Transfer-Encoding in an HTTP/1.0 request");
                if (fs.lengths)
                        return refuse(ret, "both Transfer-Encoding and Content-Length");
                if (fs.encodings > 1)
                        return refuse(ret, "more than one Transfer-Encoding");
                if (!fs.chunked)
                        return refuse(ret, "Transfer-Encoding other than chunked");
        }
        bool tunnel = fs.upgrades && fs.conn_upgrade;
        if (tunnel && (fs.encodings || fs.length > 0))
                return refuse(ret, "Upgrade request with a body");
        ret->close = fs.conn_close || (minor_version == 0 && !fs.conn_keep_alive);
        if (tunnel)
                ret->kind = GW_HTTP_BODY_TUNNEL;
        else if (fs.encodings)
                ret->kind = GW_HTTP_BODY_CHUNKED;
        else if (fs.lengths)
                ret->kind = GW_HTTP_BODY_LENGTH;
        else
                ret->kind = GW_HTTP_BODY_NONE;
        ret->length = ret->kind == GW_HTTP_BODY_LENGTH ? fs.length : 0;
        return 0;
}

/* ---- chunked bodies ---- */

enum chunked_state {
        C_SIZE, /* zero: the hex digits of a chunk size */
        C_EXT, /* after ';': chunk extensions up to CR */
        C_SIZE_LF, /* the LF after a chunk-size line */
        C_DATA,
        C_DATA_CR, /* the CRLF after chunk data */
        C_DATA_LF,
        C_TRAILER, /* the start of a trailer line, or the final empty line */
        C_TRAILER_NAME,
        C_TRAILER_VALUE,
        C_TRAILER_LF,
        C_END_LF, /* the LF of the final empty line */
        C_DONE,
        C_ERROR,
};

void gw_http_chunked_init(gw_http_chunked *c)
{
        memset(c, 0, sizeof(*c));
}

static int chunked_fail(gw_http_chunked *c, size_t at, size_t *used, const char **reason, const char *why)
{
        c->state = C_ERROR;
        c->reason = why;
        *used = at;
        *reason = why;
        return -1;
}

/* The states that read the bytes of a line before its CR. */
static bool in_line(int state)
{
        return state == C_SIZE || state == C_EXT || state == C_TRAILER || state == C_TRAILER_NAME ||
               state == C_TRAILER_VALUE;
}

/* A byte of a chunk extension: SP, HTAB and visible ASCII. */
static bool is_ext_char(unsigned char c)
{
        return c == '\t' || (c >= 0x20 && c < 0x7f);
}

int gw_http_chunked_feed(gw_http_chunked *c, const uint8_t *p, size_t n, size_t *used, const char **reason)
{
        size_t i = 0;
        *used = 0;
        if (c->state == C_DONE)
                return 1;
        if (c->state == C_ERROR) {
                *reason = c->reason;
                return -1;
        }
        while (i < n) {
                unsigned char b = p[i];
                /* A line's bytes and its CRLF must fit in GW_HTTP_CHUNK_LINE_MAX. */
                if (in_line(c->state) && b != '\r' && c->line >= GW_HTTP_CHUNK_LINE_MAX - 2)
                        return chunked_fail(c, i, used, reason,
                                            c->state == C_SIZE || c->state == C_EXT
                                                    ? "chunk-size line longer than 4096 bytes"
                                                    : "trailer line longer than 4096 bytes");
                switch (c->state) {
                case C_SIZE: {
                        int h = hexval(b);
                        if (h >= 0) {
                                if (c->line == GW_HTTP_CHUNK_DIGITS_MAX)
                                        return chunked_fail(c, i, used, reason, "chunk size longer than 15 hex digits");
                                c->left = c->left * 16 + (uint64_t)h;
                                c->line++;
                        } else if (c->line > 0 && b == ';') {
                                c->line++;
                                c->state = C_EXT;
                        } else if (c->line > 0 && b == '\r') {
                                c->state = C_SIZE_LF;
                        } else {
                                return chunked_fail(c, i, used, reason,
                                                    b == '\n' ? "line not ended by CRLF" : "malformed chunk size");
                        }
                        i++;
                        break;
                }
                case C_EXT:
                        if (b == '\r') {
                                c->state = C_SIZE_LF;
                        } else if (is_ext_char(b)) {
                                c->line++;
                        } else {
                                return chunked_fail(c, i, used, reason,
                                                    b == '\n' ? "line not ended by CRLF" : "malformed chunk extension");
                        }
                        i++;
                        break;
                case C_SIZE_LF:
                        if (b != '\n')
                                return chunked_fail(c, i, used, reason, "CR not followed by LF");
                        c->line = 0;
                        c->state = c->left ? C_DATA : C_TRAILER;
                        i++;
                        break;
                case C_DATA: {
                        size_t take = n - i;
                        if ((uint64_t)take > c->left)
                                take = (size_t)c->left;
                        c->left -= take;
                        i += take;
                        if (c->left == 0)
                                c->state = C_DATA_CR;
                        break;
                }
                case C_DATA_CR:
                case C_DATA_LF:
                        if (b != (c->state == C_DATA_CR ? '\r' : '\n'))
                                return chunked_fail(c, i, used, reason, "chunk data not followed by CRLF");
                        c->state = c->state == C_DATA_CR ? C_DATA_LF : C_SIZE;
                        i++;
                        break;
                case C_TRAILER:
                        if (b == '\r') {
                                c->state = C_END_LF;
                        } else if (b == ' ' || b == '\t') {
                                return chunked_fail(c, i, used, reason,
                                                    "obs-fold or whitespace before a trailer field name");
                        } else if (!is_tchar(b)) {
                                return chunked_fail(c, i, used, reason,
                                                    b == '\n' ? "line not ended by CRLF" : "malformed trailer field");
                        } else if (c->trailers == GW_HTTP_TRAILERS_MAX) {
                                return chunked_fail(c, i, used, reason, "more than 64 trailer fields");
                        } else {
                                c->trailers++;
                                c->line = 1;
                                c->state = C_TRAILER_NAME;
                        }
                        i++;
                        break;
                case C_TRAILER_NAME:
                        if (b == ':')
                                c->state = C_TRAILER_VALUE;
                        else if (!is_tchar(b))
                                return chunked_fail(c, i, used, reason,
                                                    b == '\n' ? "line not ended by CRLF" : "malformed trailer field");
                        c->line++;
                        i++;
                        break;
                case C_TRAILER_VALUE:
                        if (b == '\r')
                                c->state = C_TRAILER_LF;
                        else if (is_ctl(b))
                                return chunked_fail(c, i, used, reason,
                                                    b == '\n' ? "line not ended by CRLF"
                                                              : "control byte in a trailer field");
                        else
                                c->line++;
                        i++;
                        break;
                case C_TRAILER_LF:
                case C_END_LF:
                        if (b != '\n')
                                return chunked_fail(c, i, used, reason, "CR not followed by LF");
                        i++;
                        c->line = 0;
                        if (c->state == C_END_LF) {
                                c->state = C_DONE;
                                *used = i;
                                return 1;
                        }
                        c->state = C_TRAILER;
                        break;
                default:
                        return chunked_fail(c, i, used, reason, "chunked reader in an unknown state");
                }
        }
        *used = n;
        return 0;
}

/* ---- search ---- */

bool gw_http_scan_feed(gw_http_scan *s, const char *needle, size_t needle_len, const uint8_t *p, size_t n,
                       size_t *ret_end)
{
        if (needle_len == 0 || needle_len > GW_HTTP_SCAN_MAX)
                return false;
        /* border[q]: the longest proper prefix of needle[0..q] that is also
         * its suffix (the KMP failure function). */
        uint8_t border[GW_HTTP_SCAN_MAX];
        border[0] = 0;
        for (size_t q = 1, k = 0; q < needle_len; q++) {
                while (k > 0 && needle[q] != needle[k])
                        k = border[k - 1];
                if (needle[q] == needle[k])
                        k++;
                border[q] = (uint8_t)k;
        }
        size_t m = s->matched < needle_len ? s->matched : 0;
        for (size_t i = 0; i < n; i++) {
                char b = (char)p[i];
                while (m > 0 && needle[m] != b)
                        m = border[m - 1];
                if (needle[m] == b)
                        m++;
                if (m == needle_len) {
                        s->matched = border[m - 1];
                        if (ret_end)
                                *ret_end = i + 1;
                        return true;
                }
        }
        s->matched = m;
        return false;
}
