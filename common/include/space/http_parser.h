/* SPDX-License-Identifier: Apache-2.0 */
/*
 * An incremental HTTP/1.1 request parser: pure (no I/O, no global state), so
 * that it can be fuzzed and unit-tested on its own. The server in http.h feeds
 * it the bytes it reads.
 *
 * One parser parses one request: the request line, the header section, then a
 * Content-Length or chunked body (trailers are validated and dropped). Feed it
 * bytes with sp_http_parser_feed(); it stops after the header section (HEAD),
 * hands out body bytes as they come (BODY, pointing into the caller's input)
 * and stops at the end of the message (DONE), leaving any bytes of a pipelined
 * next request unconsumed. Splitting the input differently never changes the
 * outcome.
 *
 * Strict by design, so that no two parsers can disagree about where a request
 * ends (request smuggling): CRLF line endings only (bare CR or LF, NUL and
 * other control bytes are rejected), no obs-fold, no whitespace before a
 * header's colon, tokens checked, Content-Length digits only and never with
 * Transfer-Encoding, duplicate Content-Length only if identical,
 * Transfer-Encoding only as a single "chunked" on HTTP/1.1, exactly one Host
 * on HTTP/1.1, origin-form targets only, valid percent-encoding without %00
 * and without "." or ".." path segments.
 *
 * Errors carry the HTTP status to answer with: 400 malformed, 413 body too
 * large, 414 URI too long, 417 unknown expectation, 431 header section too
 * large or too many fields, 505 unsupported version.
 *
 * Memory: the parser copies the header section (at most max_head_bytes);
 * every string it returns is owned by it and valid until it is freed. Not
 * thread-safe; a parser belongs to one caller.
 */
#ifndef SPACE_HTTP_PARSER_H
#define SPACE_HTTP_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define SP_HTTP_DEFAULT_MAX_HEAD_BYTES (16 * 1024)
#define SP_HTTP_DEFAULT_MAX_HEADERS 100
#define SP_HTTP_DEFAULT_MAX_URI (8 * 1024)
#define SP_HTTP_DEFAULT_MAX_BODY (1024 * 1024)
#define SP_HTTP_DEFAULT_MAX_CHUNK_LINE 1024
#define SP_HTTP_DEFAULT_MAX_QUERY_PARAMS 100
/* Longest method token accepted. */
#define SP_HTTP_METHOD_MAX 32

/* Limits of one request. A zero field means the default above. */
typedef struct sp_http_limits {
        size_t max_head_bytes; /* request line + header section; also trailers (431) */
        size_t max_headers; /* header fields; also trailer fields (431) */
        size_t max_uri; /* request-target (414) */
        uint64_t max_body; /* body bytes (413); see sp_http_parser_set_max_body() */
        size_t max_chunk_line; /* a chunk-size line with its extensions (400) */
        size_t max_query_params; /* query parameters (400) */
} sp_http_limits;

typedef enum sp_http_parse_event {
        SP_HTTP_PARSE_ERROR = -1, /* see sp_http_parser_error(); the parser stays failed */
        SP_HTTP_PARSE_AGAIN = 0, /* all input consumed, more is needed */
        SP_HTTP_PARSE_HEAD, /* request line and headers complete: accessors work now */
        SP_HTTP_PARSE_BODY, /* *ret_body holds body bytes (within the input) */
        SP_HTTP_PARSE_DONE, /* message complete; further input is not consumed */
} sp_http_parse_event;

typedef struct sp_http_parser sp_http_parser;

/* A parser for one request with the given limits (NULL: defaults). Allocation
 * failure aborts, like sp_buf. */
sp_http_parser *sp_http_parser_new(const sp_http_limits *limits);
/* Frees the parser; accepts NULL; returns NULL. */
sp_http_parser *sp_http_parser_free(sp_http_parser *p);

/* Consumes a prefix of data[0..len) and reports what happened. *ret_consumed
 * is the number of bytes consumed (the caller drops them from its input; on
 * BODY the body bytes are the last *ret_body_len of them). Call again with the
 * rest (or with len 0 after HEAD or BODY: the parser may have an event without
 * new input, such as DONE for a request without a body). */
sp_http_parse_event sp_http_parser_feed(sp_http_parser *p, const void *data, size_t len, size_t *ret_consumed,
                                        const char **ret_body, size_t *ret_body_len);

/* Sets the body limit after HEAD (the server knows it per route). Fails with
 * status 413 (and puts the parser in the error state) if the declared
 * Content-Length is already larger. Returns 0 or -SP_E_TOO_LARGE. */
int sp_http_parser_set_max_body(sp_http_parser *p, uint64_t max_body);

/* After SP_HTTP_PARSE_ERROR: the HTTP status to answer with (0 if there is no
 * error), the error code for the error shape in *ret_code and a static,
 * client-safe message in *ret_message (both optional). */
int sp_http_parser_error(const sp_http_parser *p, sp_errc *ret_code, const char **ret_message);

/* Accessors, valid from HEAD on (before: NULL / 0 / false). Strings are
 * NUL-terminated and owned by the parser. */
const char *sp_http_parser_method(const sp_http_parser *p);
/* The raw request-target, e.g. "/v1/a%20b?x=1". */
const char *sp_http_parser_target(const sp_http_parser *p);
/* The raw path (target up to '?') and its percent-decoded form. */
const char *sp_http_parser_raw_path(const sp_http_parser *p);
const char *sp_http_parser_path(const sp_http_parser *p);
/* 0 for HTTP/1.0, 1 for HTTP/1.1 (and 1.x). */
int sp_http_parser_version_minor(const sp_http_parser *p);
/* First header with that name (ASCII case-insensitive); value trimmed. */
const char *sp_http_parser_header(const sp_http_parser *p, const char *name);
size_t sp_http_parser_header_count(const sp_http_parser *p);
/* The i-th header in arrival order; false when i is out of range. */
bool sp_http_parser_header_at(const sp_http_parser *p, size_t i, const char **ret_name, const char **ret_value);
/* First query parameter with that exact name, decoded ('+' is a space); a
 * parameter without '=' has the value "". */
const char *sp_http_parser_query(const sp_http_parser *p, const char *name);
size_t sp_http_parser_query_count(const sp_http_parser *p);
bool sp_http_parser_query_at(const sp_http_parser *p, size_t i, const char **ret_name, const char **ret_value);
/* Declared Content-Length, 0 without one, -1 for a chunked body. */
int64_t sp_http_parser_content_length(const sp_http_parser *p);
bool sp_http_parser_chunked(const sp_http_parser *p);
/* Whether the client allows the connection to stay open after this request
 * (HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "keep-alive"). */
bool sp_http_parser_keep_alive(const sp_http_parser *p);
/* "Expect: 100-continue" on HTTP/1.1. */
bool sp_http_parser_expect_continue(const sp_http_parser *p);
/* True once the whole message has been parsed. */
bool sp_http_parser_done(const sp_http_parser *p);
/* Body bytes handed out so far. */
uint64_t sp_http_parser_body_received(const sp_http_parser *p);
/* Bytes consumed so far (0: the client has sent nothing of this request). */
uint64_t sp_http_parser_bytes_seen(const sp_http_parser *p);

/* Percent-decodes s[0..len) into out (room for len + 1 bytes), NUL-terminates
 * and stores the decoded length in *ret_len. plus_space: '+' decodes to a
 * space (query strings). Fails (-SP_E_INVALID) on a malformed escape and on
 * %00. Pure; thread-safe. */
int sp_http_percent_decode(const char *s, size_t len, bool plus_space, char *out, size_t *ret_len);

/* ASCII case-insensitive equality (locale-independent). */
bool sp_http_strcaseeq(const char *a, const char *b);
/* True for a non-empty RFC 9110 token (method, header name). */
bool sp_http_token_valid(const char *s, size_t len);

#endif
