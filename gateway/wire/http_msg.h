/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The framing of a stream of HTTP/1.1 requests, for a gateway that reads
 * every request on a kept-alive connection it has decrypted: the header
 * fields and request line of a head that gw_http_host_parse() accepted
 * (http_host.h), how that request's body is framed, where a chunked body
 * ends (so that the next request's head is known to start there), and a
 * streaming search for a byte string.
 *
 * Strict where RFC 9112 is lenient or where servers are known to differ, so
 * that no request can be framed one way by the gateway and another by the
 * server (request smuggling), which would let a sandbox hide a request
 * inside another's body: Transfer-Encoding only as exactly "chunked", never
 * with Content-Length, never in HTTP/1.0, never repeated; Content-Length as
 * plain digits, never repeated (even with an equal value) nor a list; field
 * names "Content_Length" and "Transfer_Encoding" refused (some servers read
 * '_' as '-'); chunk lines ended by CRLF only, chunk sizes of hex digits
 * only, the CRLF after chunk data exactly CRLF, trailer lines that are well
 * formed field lines. What is refused is well-formed enough to answer with
 * 400 and close; nothing is repaired.
 *
 * Pure: no allocation, no global state, thread-safe. The gw_http_chunked and
 * gw_http_scan states belong to the caller (one per request or per stream).
 */
#ifndef SPACE_GATEWAY_WIRE_HTTP_MSG_H
#define SPACE_GATEWAY_WIRE_HTTP_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A Content-Length has at most this many digits. */
#define GW_HTTP_LENGTH_DIGITS_MAX 18
/* A chunk size has at most this many hex digits (leading zeros included). */
#define GW_HTTP_CHUNK_DIGITS_MAX 15
/* A chunk-size line (size, extensions, CRLF) or a trailer line (CRLF
 * included) has at most this many bytes. */
#define GW_HTTP_CHUNK_LINE_MAX 4096
/* A chunked body has at most this many trailer fields. */
#define GW_HTTP_TRAILERS_MAX 64
/* The longest needle gw_http_scan_feed() looks for. */
#define GW_HTTP_SCAN_MAX 128

/* One header field line of a head. The pointers are into the head. */
typedef struct gw_http_field {
        const char *name; /* a token, as sent (compare case-insensitively) */
        size_t name_len;
        const char *value; /* without the spaces and tabs around it; may be empty */
        size_t value_len;
        const char *line; /* the whole line, its CRLF included */
        size_t line_len;
} gw_http_field;

/* Calls fn for each header field line of head[0..head_len), in order (not
 * the request line, not the final empty line). Stops when fn returns
 * non-zero and returns that value, else returns 0. head must be a complete
 * head that gw_http_host_parse() accepted, head_len its head_len; for other
 * bytes it returns -1 at the first line it cannot read (not ended by CRLF,
 * no ':' or an empty name, no final empty line) after calling fn for the
 * lines before it, and never reads outside head[0..head_len). So that the
 * two can be told apart, fn should return positive values. */
int gw_http_fields_each(const uint8_t *head, size_t head_len, int (*fn)(const gw_http_field *f, void *ud), void *ud);

/* The request-target of the head's request line (*target points into head,
 * without the spaces around it). The method is in gw_http_request.method.
 * Returns 0, or -1 (outputs untouched) when the first line of
 * head[0..head_len) is not "method SP target SP version CRLF". */
int gw_http_request_line(const uint8_t *head, size_t head_len, const char **target, size_t *target_len);

typedef enum gw_http_body_kind {
        GW_HTTP_BODY_NONE, /* no body: the next request follows the head */
        GW_HTTP_BODY_LENGTH, /* length bytes (maybe 0) follow the head */
        GW_HTTP_BODY_CHUNKED, /* a chunked body follows: gw_http_chunked_feed() */
        GW_HTTP_BODY_TUNNEL, /* no body, and the request asks to switch protocols: see below */
} gw_http_body_kind;

typedef struct gw_http_framing {
        gw_http_body_kind kind;
        uint64_t length; /* with LENGTH: the Content-Length; else 0 */
        /* The connection ends after this request's response: "close" in
         * Connection, or HTTP/1.0 without "keep-alive" in Connection. */
        bool close;
        /* With -1: why, a static string; else NULL. */
        const char *reason;
} gw_http_framing;

/* How the body of the request whose head is head[0..head_len) is framed
 * (RFC 9112 §6.3, request side), into *ret (always written). head and
 * minor_version (HTTP/1.<minor_version>) as gw_http_host_parse() gave them.
 * Returns 0, or -1 with ret->reason when the gateway must not relay the
 * request because a server could frame it otherwise:
 *   - a Transfer-Encoding field other than exactly "chunked" (any case, one
 *     value: "gzip, chunked" and "chunked, chunked" are refused), more than
 *     one Transfer-Encoding field, Transfer-Encoding in HTTP/1.0, or
 *     together with Content-Length;
 *   - a Content-Length that is not 1 to 18 digits (no sign, spaces or
 *     commas inside: "5, 5" is refused), or more than one Content-Length
 *     field, even with equal values;
 *   - a field named Content_Length or Transfer_Encoding (any case);
 *   - a request asking to switch protocols (below) that has a body
 *     (Transfer-Encoding, or a Content-Length other than 0).
 * Otherwise the kind is CHUNKED with Transfer-Encoding, LENGTH with
 * Content-Length, else NONE (a request without either has no body) — or
 * TUNNEL for a request with a non-empty Upgrade field and an "upgrade" token
 * in Connection (a comma list, any case). TUNNEL only says the client asked:
 * the protocol changes only if the response is 101 (Switching Protocols).
 * Until the response head has been read the caller must not take the
 * client's next bytes as a request nor relay them as opaque: on 101 both
 * directions become opaque, on any other status the next request follows
 * as with NONE. (A 101 to a request that is not TUNNEL is the server's
 * mistake; the caller should close.) */
int gw_http_framing_of(const uint8_t *head, size_t head_len, int minor_version, gw_http_framing *ret);

/* The reading of one chunked body (RFC 9112 §7.1), fed in pieces as the
 * bytes arrive. Strict: a chunk size of 1 to GW_HTTP_CHUNK_DIGITS_MAX hex
 * digits directly followed by CRLF or by ";" and extensions of SP, HTAB and
 * visible ASCII (no whitespace before the ";"); lines of at most
 * GW_HTTP_CHUNK_LINE_MAX bytes ended by CRLF (a bare CR or LF is an error);
 * the chunk data followed by exactly CRLF; at most GW_HTTP_TRAILERS_MAX
 * trailer fields, each a field line as gw_http_host_parse() accepts in a
 * head (a token name directly followed by ':', no obs-fold, no control
 * bytes but HTAB in the value). The body ends with the empty line after the
 * last chunk and its trailers. Zeroed memory is a body before its first
 * byte; the fields are the reader's. */
typedef struct gw_http_chunked {
        int state;
        uint64_t left; /* chunk data bytes still to come; while reading a size, the size so far */
        size_t line; /* bytes of the current chunk-size or trailer line so far */
        unsigned trailers; /* trailer fields so far */
        const char *reason; /* after an error */
} gw_http_chunked;

/* Readies *c for a new body (the same as zeroing it). */
void gw_http_chunked_init(gw_http_chunked *c);

/* Reads p[0..n), the body's next bytes. Returns 0 when all of them belong to
 * the body and more are needed (*used == n); 1 when the body ended: its last
 * *used bytes are p[0..*used), and p[*used..n) is what follows the request
 * (the next request); -1 when the body is malformed, with *reason (a static
 * string) and *used the bytes before the offending one. After 1, further
 * calls return 1 with *used 0; after -1, they return -1 with the same
 * reason. p may be NULL when n is 0. */
int gw_http_chunked_feed(gw_http_chunked *c, const uint8_t *p, size_t n, size_t *used, const char **reason);

/* A search for one byte string in a stream: zeroed memory is a search
 * before the first byte. The same needle must be passed to every call. */
typedef struct gw_http_scan {
        size_t matched; /* bytes of the needle matched by the stream's last bytes */
} gw_http_scan;

/* Reads p[0..n) in search of needle[0..needle_len) (1 to GW_HTTP_SCAN_MAX
 * bytes), which may be split across calls. Returns true when an occurrence
 * ends within p[0..n), the first such one: *ret_end (unless NULL) is then
 * the offset just after it, and the scan stops there — to find further
 * occurrences (overlapping ones included), call again with p + *ret_end.
 * Returns false when p[0..n) holds no end of the needle (the state carries
 * a partial match to the next call), and for an empty or too long needle.
 * Linear in n (Knuth–Morris–Pratt; the table is rebuilt on the stack at each
 * call, O(needle_len)). */
bool gw_http_scan_feed(gw_http_scan *s, const char *needle, size_t needle_len, const uint8_t *p, size_t n,
                       size_t *ret_end);

#endif
