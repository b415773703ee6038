/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A blocking HTTP/1.1 client, for spacectl and other clients of the public API
 * and the data plane.
 *
 * Two layers:
 *
 * - sp_http_response_parser: a pure, incremental parser of HTTP/1.1
 *   responses (no I/O, no global state; fuzzed). It reads the status line and
 *   the header section, skips interim 1xx responses, and frames the body by
 *   Content-Length, chunked encoding or the end of the connection. Strict in
 *   the manner of the request parser (http_parser.h): CRLF line endings only,
 *   no obs-fold, tokens checked, Content-Length digits only, never together
 *   with Transfer-Encoding, which must be exactly "chunked".
 *
 * - sp_http_client: one connection at a time to one endpoint given as a URL,
 *   "http://HOST[:PORT][/PREFIX]" or "https://…" (HOST a DNS name, an IPv4
 *   literal or a bracketed IPv6 literal). TLS verifies the server against a CA
 *   (a PEM file, or the system's store), sends SNI and checks the host name
 *   (or IP address) against the certificate. The connection is kept alive and
 *   reused; every wait is bounded (connect, and each read or write; name
 *   resolution by the system resolver's own timeouts). Request bodies come
 *   from memory or are streamed, chunked, from a callback (or an
 *   fd); response bodies are pulled piece by piece (sp_http_client_read()),
 *   pushed to a callback, or collected whole up to a bound.
 *
 * Waiting on a response together with another descriptor (spacectl exec
 * forwards stdin while it reads events): poll sp_http_client_fd() for POLLIN
 * unless sp_http_client_buffered() is true, then call sp_http_client_read()
 * with a timeout of 0, which returns what can be decoded without blocking
 * (-SP_E_TIMEOUT when that is nothing yet).
 *
 * Errors: SP_E_INVALID for a bad URL or request and for a malformed
 * response, SP_E_UNAVAILABLE when the endpoint cannot be resolved or reached
 * or the connection breaks, SP_E_TIMEOUT when a wait runs out,
 * SP_E_UNAUTHENTICATED when the TLS handshake fails (the message says why,
 * e.g. "certificate verify failed: self-signed certificate"), SP_E_TOO_LARGE
 * past a limit. An HTTP error status is not an error of the client: it is
 * the answer.
 *
 * Not thread-safe: a client belongs to one thread at a time. Writes never
 * raise SIGPIPE.
 */
#ifndef SPACE_HTTP_CLIENT_H
#define SPACE_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/buf.h"
#include "space/error.h"
#include "space/http_parser.h"

/* ---- the response parser ---- */

#define SP_HTTP_RESPONSE_DEFAULT_MAX_HEAD (64 * 1024)
#define SP_HTTP_RESPONSE_DEFAULT_MAX_HEADERS 100
#define SP_HTTP_RESPONSE_DEFAULT_MAX_CHUNK_LINE 1024
/* Interim (1xx) responses skipped before one is refused. */
#define SP_HTTP_RESPONSE_MAX_INTERIM 16

/* Limits of one response; a zero field means the default above. */
typedef struct sp_http_response_limits {
        size_t max_head_bytes; /* status line + header section; also all trailers together */
        size_t max_headers; /* header fields; also trailer fields */
        size_t max_chunk_line; /* a chunk-size line with its extensions */
} sp_http_response_limits;

typedef struct sp_http_response_parser sp_http_response_parser;

/* A parser for one response to a request with the given method (a HEAD
 * response has no body), with limits (NULL: defaults). Allocation failure
 * aborts, like sp_buf. */
sp_http_response_parser *sp_http_response_parser_new(const char *method, const sp_http_response_limits *limits);
/* Frees the parser; accepts NULL; returns NULL. */
sp_http_response_parser *sp_http_response_parser_free(sp_http_response_parser *p);
/* For a request that asked to switch protocols (a relay's): a 101 is the
 * final head instead of an error — HEAD, then DONE at once, no body; the
 * bytes after the head are the new protocol's and are not consumed. */
void sp_http_response_parser_allow_upgrade(sp_http_response_parser *p);

/* Consumes a prefix of data[0..len) and reports what happened, with the same
 * events as the request parser: HEAD once the final (non-1xx) status line and
 * headers are in, BODY with *ret_body pointing at the last *ret_body_len of
 * the *ret_consumed bytes, DONE at the end of the message (further input is
 * not consumed), AGAIN when all input is consumed and more is needed, ERROR
 * for a malformed response. Call again with the rest, or with len 0 after
 * HEAD or BODY (DONE may follow without input). Splitting the input
 * differently never changes the outcome, and body bytes are never more than
 * the input given. */
sp_http_parse_event sp_http_response_parser_feed(sp_http_response_parser *p, const void *data, size_t len,
                                                 size_t *ret_consumed, const char **ret_body, size_t *ret_body_len);
/* Tells the parser that the connection has ended. Returns DONE when that
 * completes the response (a body that runs until the connection closes, or a
 * response already complete), ERROR otherwise (a truncated response). */
sp_http_parse_event sp_http_response_parser_eof(sp_http_response_parser *p);

/* After ERROR: a static message saying what was wrong ("malformed status
 * line", ...), or NULL when there is no error. */
const char *sp_http_response_parser_error(const sp_http_response_parser *p);

/* Accessors, valid from HEAD on (before: 0 / NULL / false). Strings are
 * NUL-terminated and owned by the parser. */
int sp_http_response_parser_status(const sp_http_response_parser *p);
/* The reason phrase, possibly "". */
const char *sp_http_response_parser_reason(const sp_http_response_parser *p);
/* 0 for HTTP/1.0, 1 for HTTP/1.1 (and 1.x). */
int sp_http_response_parser_version_minor(const sp_http_response_parser *p);
/* The wait a Retry-After header value asks for, in whole seconds, at most
 * max_s (>= 0): only the delta-seconds form (1 to 18 digits, nothing else;
 * an HTTP-date is not read). -1 for NULL and for anything else. Pure. */
int64_t sp_http_retry_after_parse(const char *value, int64_t max_s);

/* First header with that name (ASCII case-insensitive); value trimmed. */
const char *sp_http_response_parser_header(const sp_http_response_parser *p, const char *name);
size_t sp_http_response_parser_header_count(const sp_http_response_parser *p);
/* The i-th header in arrival order; false when i is out of range. */
bool sp_http_response_parser_header_at(const sp_http_response_parser *p, size_t i, const char **ret_name,
                                       const char **ret_value);
/* The body's framing: its declared length, -1 for chunked or until the
 * connection closes, 0 for a response without a body. */
int64_t sp_http_response_parser_content_length(const sp_http_response_parser *p);
bool sp_http_response_parser_chunked(const sp_http_response_parser *p);
/* Whether the connection may carry another request after this response
 * (HTTP/1.1 without "Connection: close", HTTP/1.0 with "keep-alive", and a
 * body not delimited by the end of the connection). */
bool sp_http_response_parser_keep_alive(const sp_http_response_parser *p);
/* True once the whole message has been parsed. */
bool sp_http_response_parser_done(const sp_http_response_parser *p);
/* Bytes consumed so far (0: nothing of the response has arrived). */
uint64_t sp_http_response_parser_bytes_seen(const sp_http_response_parser *p);
/* Body bytes handed out so far. */
uint64_t sp_http_response_parser_body_received(const sp_http_response_parser *p);

/* ---- the client ---- */

/* Client settings. A zero field means the default in brackets. */
typedef struct sp_http_client_config {
        const char *ca_file; /* https: PEM file of the CAs to trust [the system's store] */
        unsigned connect_timeout_ms; /* [10000] to resolve, connect and finish the TLS handshake */
        unsigned io_timeout_ms; /* [60000] for each wait on a read or a write */
        sp_http_response_limits limits;
        const char *user_agent; /* [no User-Agent header] */
} sp_http_client_config;

typedef struct sp_http_client sp_http_client;

/* A client for url (see above; a path prefix is put before every request's
 * path, without a trailing slash). Nothing is connected yet. With https, the
 * CA file is loaded now (SP_E_INVALID if it cannot be). cfg may be NULL;
 * its strings are copied. */
sp_http_client *sp_http_client_new(const char *url, const sp_http_client_config *cfg, sp_error **err);
/* Closes the connection and frees the client; accepts NULL; returns NULL. */
sp_http_client *sp_http_client_free(sp_http_client *c);
static inline void sp_http_client_freep(sp_http_client **c)
{
        *c = sp_http_client_free(*c);
}
#define _cleanup_http_client_ __attribute__((cleanup(sp_http_client_freep)))

/* Supplies the next bytes of a streamed request body: writes at most cap
 * bytes to buf and returns how many, 0 at the end of the body, or < 0 with
 * *err set to abandon the request (the connection is then closed). */
typedef ssize_t (*sp_http_body_source)(void *buf, size_t cap, void *userdata, sp_error **err);

/* A body source reading a file descriptor until EOF; userdata points to an
 * int holding the fd (which the caller keeps and closes). */
ssize_t sp_http_body_source_fd(void *buf, size_t cap, void *userdata, sp_error **err);

/* Most extra header lines of a request, and bytes of its target. */
#define SP_HTTP_CLIENT_MAX_HEADERS 64
#define SP_HTTP_CLIENT_MAX_TARGET (8 * 1024)

typedef struct sp_http_client_request {
        const char *method; /* a token, e.g. "GET" */
        const char *target; /* origin form, "/v1/sandboxes?limit=3" (already percent-encoded) */
        const char *const *headers; /* "Name: value" lines, NULL-terminated (may be NULL); not Host,
                                       Content-Length, Transfer-Encoding or Connection */
        const void *body; /* a body in memory (sent with Content-Length), or NULL */
        size_t body_len;
        sp_http_body_source body_source; /* or a streamed body (chunked); not with body */
        void *body_userdata;
} sp_http_client_request;

/* Sends the request and reads the head of the final response; returns its
 * status (200-599) or < 0. The request is written on the kept-alive
 * connection when there is one, else on a new one. When a reused connection
 * turns out to have been closed by the server before any byte of the answer
 * arrived, the request is sent once more on a new connection, provided that
 * is safe: its body is in memory and its method is GET, HEAD, PUT, DELETE or
 * OPTIONS, or it carries an Idempotency-Key header. A response still being
 * read from an earlier request is abandoned (its connection closed). The
 * body is then read with sp_http_client_read(). */
int sp_http_client_send(sp_http_client *c, const sp_http_client_request *req, sp_error **err);

/* The status and headers of the response that sp_http_client_send() read
 * (valid until the next request; 0 / NULL before any). */
int sp_http_client_status(const sp_http_client *c);
const char *sp_http_client_header(const sp_http_client *c, const char *name);

/* Reads body bytes of the current response into buf (cap > 0). Waits at
 * most timeout_ms (-1: the I/O timeout) for them. Returns how many (> 0), 0
 * at the end of the body (the connection is kept for the next request when
 * the server allows), or < 0: -SP_E_TIMEOUT when the wait ran out (with an
 * explicit timeout_ms the response stays readable; with -1 the connection is
 * closed), other errors close the connection. */
ssize_t sp_http_client_read(sp_http_client *c, void *buf, size_t cap, int timeout_ms, sp_error **err);

/* The connection's socket while a response is being read (-1 otherwise), to
 * poll for POLLIN together with other descriptors. Do not read or write it. */
int sp_http_client_fd(const sp_http_client *c);
/* True when sp_http_client_read() may make progress without reading the
 * socket (input or TLS records already received): call it with a zero
 * timeout instead of polling, until this turns false. */
bool sp_http_client_buffered(const sp_http_client *c);

/* Receives the body of a response in pieces (len > 0); a negative return
 * (with *err set) stops the transfer and closes the connection. */
typedef int (*sp_http_body_sink)(const void *data, size_t len, void *userdata, sp_error **err);

/* sp_http_client_send(), then every piece of the body to sink (which may
 * call sp_http_client_status() and sp_http_client_header()). Returns the
 * status or < 0. */
int sp_http_client_stream(sp_http_client *c, const sp_http_client_request *req, sp_http_body_sink sink, void *userdata,
                          sp_error **err);

/* sp_http_client_send(), then the whole body appended to body (at most
 * max_body bytes; SP_E_TOO_LARGE beyond, and the connection is closed).
 * Returns the status or < 0. */
int sp_http_client_do(sp_http_client *c, const sp_http_client_request *req, size_t max_body, sp_buf *body,
                      sp_error **err);

/* Closes the kept-alive connection, if any (the next request opens one). */
void sp_http_client_close(sp_http_client *c);

#endif
