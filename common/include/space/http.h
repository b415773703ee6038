/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HTTP/1.1 server of every daemon: routing, limits, timeouts, JSON
 * responses in the one error shape, streamed request and response bodies with
 * backpressure, server-sent events, dispatch by Host for a reverse proxy, and
 * connections upgraded (101) to raw byte streams for WebSocket and the like.
 *
 * It runs on the caller's libevent loop, with its own parser (http_parser.h)
 * on bufferevents: every error it answers itself is JSON
 *   {"error":{"code":"not_found","message":"..."}}
 * with the matching status, bodies are buffered only up to a per-route limit
 * (or streamed), and a slow client slows its producer down instead of making
 * memory grow.
 *
 * Threading: a server and its requests belong to the thread that runs their
 * event_base; no function here may be called from another thread. Callbacks
 * run from that loop, never from inside a call into this API (a reply never
 * re-enters a handler), except where stated. Do not free the server from one
 * of its own callbacks.
 *
 * Request lifetime: the server passes a request to its handler and keeps it
 * until the response is complete or the client has gone. A handler that
 * answers later takes a reference (sp_http_request_ref()) and drops it when it
 * is done; if the client disconnects first, the close callback tells it, and
 * any later reply is a harmless no-op (the request's accessors keep working
 * while a reference is held). A handler that returns without answering and
 * without holding a reference (or a body callback, or an SSE stream) gets a
 * 500 answered for it.
 *
 * A client that stops sending (end of stream) before its request is complete
 * gets a 400 "request body truncated: … after N of M bytes" (or "request
 * truncated" inside the head) and the connection closes. One that stops after
 * a complete request, before the answer has started, is taken to have
 * half-closed (shutdown(SHUT_WR)): it still gets the answer, then the
 * connection closes. A client that closed completely is then noticed when the
 * answer is written; one that resets the connection, at once.
 */
#ifndef SPACE_HTTP_H
#define SPACE_HTTP_H

#include <json-c/json.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"
#include "space/http_parser.h"

struct event_base;
struct evbuffer;

typedef struct sp_http_server sp_http_server;
typedef struct sp_http_request sp_http_request;

/* Server settings. A zero field means the default in brackets. */
typedef struct sp_http_config {
        sp_http_limits limits; /* head 16 KiB (431), 100 headers (431), URI 8 KiB (414),
                                  body 1 MiB per route unless the route says (413) */
        unsigned max_connections; /* [10000]; more are answered 503 and closed */
        unsigned header_timeout_ms; /* [10000] from a request's first byte (or accept) to its last header */
        unsigned body_timeout_ms; /* [30000] without body progress while the server is reading */
        unsigned keepalive_timeout_ms; /* [60000] idle between requests */
        unsigned write_timeout_ms; /* [60000] without any output progress while output is pending */
        unsigned linger_ms; /* [2000] reading and dropping input after a final response, before closing */
        size_t high_watermark; /* [256 KiB] pending output at which streamed writes report would-block */
        size_t low_watermark; /* [64 KiB] pending output below which the writable callback fires */
        unsigned raw_idle_timeout_ms; /* [3600000] an upgraded connection without a byte in either
                                         direction (see sp_http_upgrade()); SP_HTTP_NO_TIMEOUT: none */
} sp_http_config;

/* A timeout field that means "never" (raw_idle_timeout_ms). */
#define SP_HTTP_NO_TIMEOUT (~0u)

/* ---- server ---- */

/* A server on the caller's loop (base must outlive it). cfg may be NULL. */
sp_http_server *sp_http_server_new(struct event_base *base, const sp_http_config *cfg, sp_error **err);

/* Starts listening on "HOST:PORT" (IPv4 literal or name, "[IPv6]"; port 0
 * picks a free port) or "unix:/path" (a stale socket file there is replaced,
 * and removed again by sp_http_server_free()). With ssl non-NULL the listener
 * speaks HTTPS; the server takes its own reference on ssl. At most 8
 * listeners. Errors: SP_E_INVALID (address), SP_E_IO (socket calls),
 * SP_E_LIMIT. */
int sp_http_server_listen(sp_http_server *srv, const char *address, SSL_CTX *ssl, sp_error **err);

/* The TCP port of the first TCP listener, or -1 if there is none. */
int sp_http_server_port(const sp_http_server *srv);

/* Connections currently open. */
size_t sp_http_server_connections(const sp_http_server *srv);

/* Closes the listeners and every connection (their requests' close callbacks
 * run first) and frees the server. Requests the application still references
 * stay valid, detached, until it drops them. Accepts NULL; returns NULL. */
sp_http_server *sp_http_server_free(sp_http_server *srv);

/* ---- routes ---- */

/* Called once per request, from the loop, when its route matched: after the
 * whole body arrived, or right after the headers for SP_HTTP_ROUTE_STREAM_BODY
 * routes. It answers now or later (see "Request lifetime" above). */
typedef void (*sp_http_handler)(sp_http_request *req, void *userdata);

enum {
        /* Deliver the body through sp_http_request_read_body() instead of
         * buffering it; the handler runs as soon as the headers are in. */
        SP_HTTP_ROUTE_STREAM_BODY = 1u << 0,
};

typedef struct sp_http_route_opts {
        uint64_t max_body; /* 0: the server's limits.max_body */
        unsigned flags; /* SP_HTTP_ROUTE_* */
} sp_http_route_opts;

/* Registers handler for method (a token, e.g. "GET") on pattern: a path of
 * literal segments, "{name}" segments that match one non-empty segment, and an
 * optional last "*name" that matches the rest of the path (possibly empty,
 * slashes included), e.g. "/v1/sandboxes/{id}/files/" followed by "*path". Segments are
 * compared after percent-decoding; literal segments win over parameters,
 * parameters over the rest wildcard. A GET route also answers HEAD. Unknown
 * paths get 404, known paths with another method 405 with an Allow header.
 *
 * The method "*" registers a route for every method (a proxy's): it answers
 * any method on its pattern unless a route of the request's own method (or a
 * GET route for HEAD) matches the path with a pattern at least as specific,
 * so a specific route on the same pattern wins over "*". A path that a "*"
 * route matches never gets 405, and "*" never appears in an Allow header.
 *
 * Errors: SP_E_INVALID (pattern, method), SP_E_CONFLICT (same method and
 * pattern twice), SP_E_LIMIT (1024 routes). */
int sp_http_route(sp_http_server *srv, const char *method, const char *pattern, sp_http_handler handler, void *userdata,
                  sp_error **err);
/* As sp_http_route(), with options (opts may be NULL). */
int sp_http_route_ex(sp_http_server *srv, const char *method, const char *pattern, const sp_http_route_opts *opts,
                     sp_http_handler handler, void *userdata, sp_error **err);

/* Called by sp_http_server_foreach_route() with each route's method and
 * pattern as registered (borrowed, valid during the call; the method is "*"
 * for a route of every method). 0 continues the walk; any other value stops
 * it. */
typedef int (*sp_http_route_cb)(const char *method, const char *pattern, void *userdata);

/* Calls cb for every registered route, in registration order (a GET route is
 * listed once, not again as HEAD). Returns 0 after the last route, or the
 * first non-zero value cb returned. Do not register routes from cb. */
int sp_http_server_foreach_route(const sp_http_server *srv, sp_http_route_cb cb, void *userdata);

/* ---- dispatch by host ---- */

/* Whether a request for host goes to the host handler. host is the Host
 * header as the client sent it (port suffix included, not validated beyond
 * the parser's rules for field values). Called from the loop for every
 * request with a Host header, right after its head: keep it cheap. */
typedef bool (*sp_http_host_match_fn)(const char *host, void *userdata);

/* Sends every request whose Host header match() accepts to handler, whatever
 * its method and path, before and instead of the route table (a reverse
 * proxy's virtual hosts). opts as for sp_http_route_ex() (may be NULL):
 * SP_HTTP_ROUTE_STREAM_BODY runs the handler right after the head, and
 * max_body limits the body. userdata goes to both match and handler. The
 * request has no route parameters. Requests without a Host header (HTTP/1.0
 * may omit it) or with one match() refuses are routed as before. One host
 * handler per server. Errors: SP_E_INVALID (no match or handler),
 * SP_E_CONFLICT (already set). */
int sp_http_server_set_host_handler(sp_http_server *srv, sp_http_host_match_fn match, const sp_http_route_opts *opts,
                                    sp_http_handler handler, void *userdata, sp_error **err);

/* ---- requests ---- */

/* Reference counting for requests answered later (see above). ref returns req. */
sp_http_request *sp_http_request_ref(sp_http_request *req);
/* Drops a reference; accepts NULL. */
void sp_http_request_unref(sp_http_request *req);
static inline void sp_http_request_unrefp(sp_http_request **req)
{
        sp_http_request_unref(*req);
        *req = NULL;
}
#define _cleanup_http_request_ __attribute__((cleanup(sp_http_request_unrefp)))

/* Accessors: strings are owned by the request and valid while it is. */
const char *sp_http_request_method(const sp_http_request *req);
/* The percent-decoded path, e.g. "/v1/sandboxes/sbx_1/files". */
const char *sp_http_request_path(const sp_http_request *req);
/* A route parameter ({name} or *name), decoded; NULL if the route has none. */
const char *sp_http_request_param(const sp_http_request *req, const char *name);
/* A query parameter, decoded; NULL if absent. */
const char *sp_http_request_query(const sp_http_request *req, const char *name);
/* A request header (case-insensitive name); NULL if absent. */
const char *sp_http_request_header(const sp_http_request *req, const char *name);
/* The buffered body (NUL-terminated, *ret_len bytes; "" when empty). Always
 * empty for SP_HTTP_ROUTE_STREAM_BODY routes. ret_len may be NULL. */
const char *sp_http_request_body(const sp_http_request *req, size_t *ret_len);
/* "1.2.3.4:5678", "[::1]:5678" or "unix". */
const char *sp_http_request_remote(const sp_http_request *req);
/* The request id: the client's X-Request-Id if it is 1-64 characters of
 * [A-Za-z0-9._:-], otherwise a new "req_..." id. Echoed as X-Request-Id. */
const char *sp_http_request_id(const sp_http_request *req);
/* The parsed request, for what the accessors above do not cover. */
const sp_http_parser *sp_http_request_parser(const sp_http_request *req);
/* False once the client has gone (or the server was freed). */
bool sp_http_request_connected(const sp_http_request *req);
/* True once the client has closed its sending side while waiting for the
 * answer: a half-close, or (indistinguishable until the answer is written)
 * a client that closed the connection and left. A long-poll should answer at
 * once rather than hold a slot for nobody. */
bool sp_http_request_peer_closed(const sp_http_request *req);
/* Output bytes queued on the connection and not yet accepted by the kernel. */
size_t sp_http_request_output_pending(const sp_http_request *req);

/* Called once, from the loop, if the request ends before its response was
 * complete: the client went away (a reset, an end of stream once the answer
 * has started, or a write that fails), a timeout (reading or writing), a
 * malformed or truncated streamed body (the server then answers 400 itself),
 * or the server was freed. Replies afterwards are no-ops. The request stays valid for the
 * duration of the call; keep a reference to use it afterwards. */
typedef void (*sp_http_close_cb)(sp_http_request *req, void *userdata);
void sp_http_request_on_close(sp_http_request *req, sp_http_close_cb cb, void *userdata);

/* ---- streamed request bodies (SP_HTTP_ROUTE_STREAM_BODY) ---- */

/* Receives body bytes in order (len > 0), then once len == 0 at the end of
 * the body. data is valid only during the call. */
typedef void (*sp_http_body_cb)(sp_http_request *req, const void *data, size_t len, void *userdata);

/* Starts reading the body into cb (sending "100 Continue" if the client asked
 * for it). The server keeps the request until the end of the body has been
 * delivered. Errors: SP_E_INVALID (not a streaming route, or called twice). */
int sp_http_request_read_body(sp_http_request *req, sp_http_body_cb cb, void *userdata, sp_error **err);
/* Stops delivering body bytes (takes effect after the current callback)
 * until resumed; the client is slowed down by TCP flow control, and the body
 * timeout does not run meanwhile. Harmless when not reading. */
void sp_http_request_pause_body(sp_http_request *req);
void sp_http_request_resume_body(sp_http_request *req);

/* ---- responses ---- */

/* Return values of the reply and stream functions: 0 done; SP_HTTP_WOULD_BLOCK
 * (streamed writes only); -SP_E_UNAVAILABLE when the client has gone (a
 * no-op); -SP_E_CONFLICT when the request was already answered (a no-op);
 * -SP_E_INVALID for arguments that cannot be sent (status outside 200-599,
 * header names or values with control bytes). */
#define SP_HTTP_WOULD_BLOCK 1

/* Adds a response header before the reply. The server owns Content-Length,
 * Transfer-Encoding, Connection, Date and X-Request-Id (-SP_E_INVALID). At
 * most 8 KiB of extra headers. */
int sp_http_response_header(sp_http_request *req, const char *name, const char *value);

/* Answers with status, an optional Content-Type and len bytes of body. */
int sp_http_reply(sp_http_request *req, int status, const char *content_type, const void *body, size_t len);
/* Answers with obj serialised (application/json); obj is borrowed. */
int sp_http_reply_json(sp_http_request *req, int status, json_object *obj);
/* Answers with the error shape for e: status sp_errc_http_status(e->code),
 * code sp_errc_name(e->code), message e->message. */
int sp_http_reply_error(sp_http_request *req, const sp_error *e);
/* As sp_http_reply_error() for a code and a formatted message. */
int sp_http_reply_errorf(sp_http_request *req, sp_errc code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Starts a streamed response. content_length >= 0 fixes the body size;
 * -1 streams chunked (on HTTP/1.0: until the connection closes). */
int sp_http_stream_start(sp_http_request *req, int status, const char *content_type, int64_t content_length);
/* Queues len (at most 16 MiB) body bytes. When the connection already holds
 * high_watermark bytes of unsent output, queues nothing and returns
 * SP_HTTP_WOULD_BLOCK: the writable callback fires once the output has
 * drained below low_watermark; write again then. Writing more than the
 * declared Content-Length is -SP_E_INVALID. */
int sp_http_stream_write(sp_http_request *req, const void *data, size_t len);
/* As sp_http_stream_write() for the whole content of buf, moved into the
 * connection's output without a copy (evbuffer_add_buffer(): bytes added to
 * buf by reference stay by reference); buf is empty afterwards. On
 * SP_HTTP_WOULD_BLOCK or an error buf is left as it was. A write of nothing
 * (an empty buf, or len 0 above) only reports whether a write would block. */
int sp_http_stream_write_buffer(sp_http_request *req, struct evbuffer *buf);
/* Called from the loop once after each SP_HTTP_WOULD_BLOCK, when output has
 * drained below the low watermark. */
typedef void (*sp_http_writable_cb)(sp_http_request *req, void *userdata);
void sp_http_stream_on_writable(sp_http_request *req, sp_http_writable_cb cb, void *userdata);
/* Completes the streamed response (never would-block). If fewer bytes than
 * the declared Content-Length were written, the connection is closed. */
int sp_http_stream_end(sp_http_request *req);

/* ---- upgraded connections: a raw byte stream after 101 ---- */

/* What an upgraded connection tells its owner, from the loop. Only on_data is
 * required. req stays valid until on_close has returned (take a reference to
 * keep it longer); no callback runs after on_close. */
typedef struct sp_http_raw_ops {
        /* Bytes from the client in order (len > 0), starting with any it sent
         * after the request head before the upgrade. data is valid only
         * during the call. Not called while paused. */
        void (*on_data)(sp_http_request *req, const void *data, size_t len, void *userdata);
        /* The client closed its sending side (a half-close, or a close not yet
         * told apart from one), after its last on_data; at most once. Writing
         * may go on. */
        void (*on_eof)(sp_http_request *req, void *userdata);
        /* Once after each SP_HTTP_WOULD_BLOCK from sp_http_raw_write(), when the
         * output has drained below low_watermark. */
        void (*on_writable)(sp_http_request *req, void *userdata);
        /* The connection is gone: the client reset it or a write failed, both
         * sides have closed (on_eof told and sp_http_raw_shutdown_write()
         * done), sp_http_raw_close(), a timeout, or the server was freed.
         * Exactly once, last. */
        void (*on_close)(sp_http_request *req, void *userdata);
} sp_http_raw_ops;

/* Answers req with "HTTP/1.1 101 Switching Protocols", the given headers
 * (name, value, name, value, ..., NULL; may be NULL) and those added with
 * sp_http_response_header(), verbatim: no Date, no X-Request-Id, and the
 * caller supplies Connection and Upgrade. From then on the connection carries
 * no more HTTP: it is a byte stream in both directions, through ops and the
 * sp_http_raw_* functions below, over the same socket (TLS included) until
 * on_close. ops->on_close replaces the request's close callback; callbacks
 * start from the loop, never from inside this call.
 *
 * Only 101: any other answer to an upgrade request (a proxy relaying an
 * upstream's refusal) is a normal response. Timeouts: the HTTP server's
 * header, body and keep-alive timeouts stop; raw_idle_timeout_ms closes a
 * connection that carried no byte in either direction for that long, and
 * write_timeout_ms still closes one whose client stops reading output.
 *
 * Errors: SP_E_INVALID (status not 101, no on_data, a header name that is not
 * a token, a value with control bytes, Content-Length or Transfer-Encoding,
 * an HTTP/1.0 request, or a body not read to its end), SP_E_TOO_LARGE (headers
 * over 64 KiB), SP_E_CONFLICT (a response was already started),
 * SP_E_UNAVAILABLE (the client has gone). Nothing is sent on error. */
int sp_http_upgrade(sp_http_request *req, int status, const char *const *headers, const sp_http_raw_ops *ops,
                    void *userdata, sp_error **err);

/* Queues len (at most 16 MiB) bytes toward the client. Returns 0, or
 * SP_HTTP_WOULD_BLOCK when the queued output has reached high_watermark (the
 * bytes are queued all the same): stop producing until on_writable.
 * -SP_E_UNAVAILABLE once the connection is gone, -SP_E_INVALID when req is
 * not upgraded or after sp_http_raw_shutdown_write(). */
int sp_http_raw_write(sp_http_request *req, const void *data, size_t len);
/* Half-closes toward the client once the queued bytes are out: shutdown(2)
 * SHUT_WR on TCP and unix sockets, a TLS close_notify on TLS (reading goes
 * on). Later writes are -SP_E_INVALID. Returns 0, -SP_E_UNAVAILABLE or
 * -SP_E_INVALID as sp_http_raw_write(); a second call is a no-op. */
int sp_http_raw_shutdown_write(sp_http_request *req);
/* Stops reading from the client (takes effect after the current on_data):
 * no on_data nor on_eof until resumed, and TCP flow control slows the
 * client down. Harmless when already paused or gone. */
void sp_http_raw_pause(sp_http_request *req);
/* Reads again; bytes already received are delivered from the loop. */
void sp_http_raw_resume(sp_http_request *req);
/* Closes the connection now, dropping queued output; on_close follows from
 * the loop. Harmless once gone. */
void sp_http_raw_close(sp_http_request *req);

/* ---- server-sent events (built on streamed responses) ---- */

typedef struct sp_sse sp_sse;
typedef void (*sp_sse_cb)(sp_sse *sse, void *userdata);

/* Answers req with 200, Content-Type: text/event-stream and Cache-Control:
 * no-store, and returns the stream. The stream holds a reference on req until
 * sp_sse_free(). Errors as for sp_http_stream_start() (SP_E_UNAVAILABLE,
 * SP_E_CONFLICT). */
sp_sse *sp_sse_start(sp_http_request *req, sp_error **err);
/* Sends one event: "id:" (if id), "event:" (if event), and one "data:" line
 * per line of data (split at CRLF, CR or LF), then a blank line. id and event
 * must not contain CR, LF or NUL (-SP_E_INVALID); an event is at most 1 MiB.
 * Either the whole event is queued (0) or nothing (SP_HTTP_WOULD_BLOCK: wait
 * for the writable callback and send it again); -SP_E_UNAVAILABLE once the
 * client has gone. */
int sp_sse_send(sp_sse *sse, const char *id, const char *event, const void *data, size_t len);
/* Sends a comment line (": text", text as for id), e.g. a keep-alive "ping". */
int sp_sse_comment(sp_sse *sse, const char *text);
/* Sends "retry: ms", the client's reconnection delay. */
int sp_sse_retry(sp_sse *sse, unsigned ms);
/* The writable callback after SP_HTTP_WOULD_BLOCK, and the close callback
 * when the client goes away (the stream stays valid until sp_sse_free()). */
void sp_sse_on_writable(sp_sse *sse, sp_sse_cb cb, void *userdata);
void sp_sse_on_close(sp_sse *sse, sp_sse_cb cb, void *userdata);
sp_http_request *sp_sse_request(sp_sse *sse);
/* Ends the stream (if the client is still there) and frees it, dropping its
 * request reference. Accepts NULL; returns NULL. May be called from the close
 * callback. */
sp_sse *sp_sse_free(sp_sse *sse);

#endif
