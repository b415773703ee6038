/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HTTP/1.1 message syntax shared by the request parser (http_parser.c) and
 * the response parser (http_client_parser.c), so that both read fields and
 * frame bodies by the same rules: header fields, the fields that frame a body
 * (Content-Length, Transfer-Encoding, Connection), and the body decoder
 * (Content-Length, chunked with its trailers, or to the end of the
 * connection).
 *
 * Pure: no I/O, no global state. Errors carry the HTTP status a server
 * answers with and a static, client-safe message. Not installed, not for
 * other modules.
 */
#ifndef SPACE_HTTP1_H
#define SPACE_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/http_parser.h"

/* A header or trailer field; both strings point into the caller's copy of
 * the line. */
typedef struct sp__http1_field {
        const char *name;
        const char *value;
} sp__http1_field;

/* A byte allowed in a field value: HTAB, SP, VCHAR and obs-text. */
bool sp__http1_value_char_ok(unsigned char c);
/* The value of a hexadecimal digit, or -1. */
int sp__http1_hexval(unsigned char c);

/* Parses one "name: value" line (NUL-terminated, without CRLF) in place:
 * a token name directly followed by the colon (no obs-fold, no whitespace
 * before it), the value trimmed and free of control bytes. Returns 0 or -1. */
int sp__http1_parse_field(char *line, sp__http1_field *ret);
/* The value of the first of the n fields named name (ASCII case-insensitive),
 * or NULL. */
const char *sp__http1_field_get(const sp__http1_field *fields, size_t n, const char *name);

/* What the header fields of a message say about its body and connection. */
typedef struct sp__http1_framing {
        bool has_length;
        uint64_t content_length;
        size_t te_fields; /* Transfer-Encoding fields */
        size_t te_codings; /* their list elements, empty ones included */
        bool te_all_chunked;
        bool close, keep_alive; /* Connection tokens */
} sp__http1_framing;

/* The state before the first field. */
void sp__http1_framing_init(sp__http1_framing *fr);
/* Takes one header field into account. Returns 1 for Content-Length,
 * Transfer-Encoding and Connection, 0 for any other field, -1 with
 * *ret_message for a Content-Length that is not digits only (at most 18) or
 * that differs from an earlier one. */
int sp__http1_framing_field(sp__http1_framing *fr, const sp__http1_field *f, const char **ret_message);
/* After the last field: NULL when the message has no Transfer-Encoding or
 * exactly "chunked" on HTTP/1.1 without a Content-Length, else the message. */
const char *sp__http1_framing_check(const sp__http1_framing *fr, int minor);
/* Whether the connection may stay open after the message: on HTTP/1.1
 * unless "Connection: close", on HTTP/1.0 only with "keep-alive". */
bool sp__http1_framing_keep_alive(const sp__http1_framing *fr, int minor);

typedef enum sp__http1_body_kind {
        SP__HTTP1_BODY_NONE, /* no body */
        SP__HTTP1_BODY_LENGTH, /* Content-Length bytes (more than 0) */
        SP__HTTP1_BODY_CHUNKED, /* chunked, with trailers that are checked and dropped */
        SP__HTTP1_BODY_EOF, /* up to the end of the connection (responses only) */
} sp__http1_body_kind;

typedef struct sp__http1_body_limits {
        uint64_t max_body; /* bytes of the body (413); UINT64_MAX for none */
        size_t max_chunk_line; /* a chunk-size line with its extensions (400) */
        size_t max_trailer_bytes; /* all trailer lines together (431) */
        size_t max_trailers; /* trailer fields (431) */
        bool request; /* the messages speak of a request ("request body too large") */
} sp__http1_body_limits;

/* The reading of one message, embedded in a parser: its head (read by the
 * parser's own function), then its body, then the end or an error.
 * Zero-initialised memory is a message whose head is being read. */
typedef struct sp__http1_msg {
        int state;
        uint64_t seen; /* bytes consumed */
        sp__http1_body_limits lim;
        uint64_t remaining; /* of the Content-Length body or of the current chunk */
        uint64_t received; /* body bytes handed out */
        sp_buf line; /* a chunk-size or trailer line being read; the CR after chunk data */
        size_t trailer_bytes, ntrailers;
        int status; /* after an error: the status a server answers a request with */
        const char *message; /* after an error: static and client-safe */
} sp__http1_msg;

/* Reads head bytes: consumes *used bytes of d[0..len) and returns AGAIN,
 * HEAD once the head is complete (after sp__http1_start_body()), or ERROR
 * (after sp__http1_fail()). */
typedef sp_http_parse_event (*sp__http1_head_fn)(void *parser, const unsigned char *d, size_t len, size_t *used);

/* Consumes a prefix of data[0..len) (*ret_consumed bytes): head bytes through
 * read_head(parser, ...), then body bytes. Returns the parser's event, as
 * sp_http_parser_feed() describes: BODY with body bytes in *ret_body (within
 * data), AGAIN when all input was consumed without an event, DONE at the end
 * of the message (consuming nothing after it), ERROR (the message stays
 * failed). */
sp_http_parse_event sp__http1_feed(sp__http1_msg *m, const void *data, size_t len, size_t *ret_consumed,
                                   const char **ret_body, size_t *ret_body_len, sp__http1_head_fn read_head,
                                   void *parser);
/* Fails the message with the status a server answers with (0 where there is
 * none: responses) and a static message; returns ERROR. */
sp_http_parse_event sp__http1_fail(sp__http1_msg *m, int status, const char *message);
/* After the head: the body that follows (length: the Content-Length). */
void sp__http1_start_body(sp__http1_msg *m, sp__http1_body_kind kind, uint64_t length,
                          const sp__http1_body_limits *lim);
/* The connection ended after the head: DONE when that ends the body (none,
 * or one framed by the end of the connection), else ERROR. */
sp_http_parse_event sp__http1_end(sp__http1_msg *m);
bool sp__http1_in_head(const sp__http1_msg *m);
bool sp__http1_failed(const sp__http1_msg *m);
/* True once the whole message has been read. */
bool sp__http1_done(const sp__http1_msg *m);
/* Releases the line buffer. */
void sp__http1_msg_free(sp__http1_msg *m);

#endif
