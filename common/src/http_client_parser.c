/* SPDX-License-Identifier: Apache-2.0 */
/* The incremental HTTP/1.1 response parser (see space/http_client.h). */
#include <stdlib.h>
#include <string.h>

#include "http1.h"
#include "space/buf.h"
#include "space/http_client.h"

struct sp_http_response_parser {
        sp_http_response_limits lim;
        bool head_request;
        sp__http1_msg msg;

        /* header section scanner */
        sp_buf head;
        size_t line_len;
        size_t lines; /* completed non-empty lines of the current head */
        bool prev_cr;
        unsigned interim; /* 1xx responses skipped */
        bool upgrade_ok; /* a 101 is a final head (sp_http_response_parser_allow_upgrade) */

        /* the final head */
        bool head_ok;
        int status;
        int minor;
        const char *reason;
        sp__http1_field *headers;
        size_t nheaders;

        /* framing */
        sp__http1_body_kind framing; /* NONE: HEAD, 204, 304, or Content-Length: 0 */
        bool keep_alive;
        uint64_t content_length;
};

static sp_http_parse_event fail(sp_http_response_parser *p, const char *message)
{
        return sp__http1_fail(&p->msg, 0, message);
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
        return p;
}

void sp_http_response_parser_allow_upgrade(sp_http_response_parser *p)
{
        p->upgrade_ok = true;
}

sp_http_response_parser *sp_http_response_parser_free(sp_http_response_parser *p)
{
        if (!p)
                return NULL;
        sp_buf_free(&p->head);
        sp__http1_msg_free(&p->msg);
        free(p->headers);
        free(p);
        return NULL;
}

/* ---- header section ---- */

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
                if (sp__http1_parse_field(s, &p->headers[p->nheaders]) < 0)
                        return fail(p, "malformed header field");
                p->nheaders++;
                s = eol + 2;
        }
        if (p->status == 101 && !p->upgrade_ok)
                return fail(p, "unexpected switch of protocols");
        if (p->status < 200 && p->status != 101) {
                /* An interim response: drop it and read the next head. */
                if (++p->interim > SP_HTTP_RESPONSE_MAX_INTERIM)
                        return fail(p, "too many interim responses");
                sp_buf_clear(&p->head);
                p->lines = 0;
                p->line_len = 0;
                return SP_HTTP_PARSE_AGAIN;
        }

        sp__http1_framing fr;
        const char *why;
        sp__http1_framing_init(&fr);
        for (size_t i = 0; i < p->nheaders; i++)
                if (sp__http1_framing_field(&fr, &p->headers[i], &why) < 0)
                        return fail(p, why);
        p->keep_alive = sp__http1_framing_keep_alive(&fr, p->minor);
        p->content_length = fr.content_length;
        if (p->status == 101) {
                /* What follows is another protocol's, not a body. */
                p->framing = SP__HTTP1_BODY_NONE;
                p->content_length = 0;
                p->keep_alive = false;
        } else if (p->head_request || p->status == 204 || p->status == 304) {
                p->framing = SP__HTTP1_BODY_NONE;
                p->content_length = 0;
        } else if (fr.te_fields > 0) {
                if ((why = sp__http1_framing_check(&fr, p->minor)))
                        return fail(p, why);
                p->framing = SP__HTTP1_BODY_CHUNKED;
        } else if (fr.has_length) {
                p->framing = p->content_length > 0 ? SP__HTTP1_BODY_LENGTH : SP__HTTP1_BODY_NONE;
        } else {
                p->framing = SP__HTTP1_BODY_EOF;
                p->keep_alive = false;
        }
        p->head_ok = true;
        sp__http1_body_limits lim = {.max_body = UINT64_MAX,
                                     .max_chunk_line = p->lim.max_chunk_line,
                                     .max_trailer_bytes = p->lim.max_head_bytes,
                                     .max_trailers = p->lim.max_headers};
        sp__http1_start_body(&p->msg, p->framing, p->content_length, &lim);
        return SP_HTTP_PARSE_HEAD;
}

/* Scans header-section bytes, copying them into p->head, until the blank
 * line that ends a head (then parses it). */
static sp_http_parse_event feed_head(void *parser, const unsigned char *d, size_t len, size_t *used)
{
        sp_http_response_parser *p = parser;
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
                } else if (!sp__http1_value_char_ok(c)) {
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

sp_http_parse_event sp_http_response_parser_feed(sp_http_response_parser *p, const void *data, size_t len,
                                                 size_t *ret_consumed, const char **ret_body, size_t *ret_body_len)
{
        return sp__http1_feed(&p->msg, data, len, ret_consumed, ret_body, ret_body_len, feed_head, p);
}

sp_http_parse_event sp_http_response_parser_eof(sp_http_response_parser *p)
{
        if (sp__http1_in_head(&p->msg))
                return fail(p, p->msg.seen == 0 ? "connection closed before the response"
                                                : "connection closed in the response head");
        return sp__http1_end(&p->msg);
}

const char *sp_http_response_parser_error(const sp_http_response_parser *p)
{
        return sp__http1_failed(&p->msg) ? p->msg.message : NULL;
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
        return p->head_ok ? sp__http1_field_get(p->headers, p->nheaders, name) : NULL;
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
        case SP__HTTP1_BODY_NONE:
                return 0;
        case SP__HTTP1_BODY_LENGTH:
                return (int64_t)p->content_length;
        default:
                return -1;
        }
}

bool sp_http_response_parser_chunked(const sp_http_response_parser *p)
{
        return p->head_ok && p->framing == SP__HTTP1_BODY_CHUNKED;
}

bool sp_http_response_parser_keep_alive(const sp_http_response_parser *p)
{
        return p->head_ok && p->keep_alive;
}

bool sp_http_response_parser_done(const sp_http_response_parser *p)
{
        return sp__http1_done(&p->msg);
}

uint64_t sp_http_response_parser_bytes_seen(const sp_http_response_parser *p)
{
        return p->msg.seen;
}

uint64_t sp_http_response_parser_body_received(const sp_http_response_parser *p)
{
        return p->msg.received;
}

int64_t sp_http_retry_after_parse(const char *value, int64_t max_s)
{
        if (!value || !*value)
                return -1;
        int64_t v = 0;
        size_t n = 0;
        for (const char *p = value; *p; p++, n++) {
                if (*p < '0' || *p > '9' || n >= 18)
                        return -1;
                v = v * 10 + (*p - '0');
        }
        if (max_s < 0)
                max_s = 0;
        return v > max_s ? max_s : v;
}
