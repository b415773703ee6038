/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The internal RPC transport: HTTP/2 (nghttp2) over TLS on libevent.
 *
 * Wire format (proto/spec/worker-rpc.md, docs/architecture.md):
 *   - every call is `POST /rpc/v1/<Method>`;
 *   - a unary call sends one JSON body (content-type application/json) and
 *     gets 200 with a JSON body, or an error status with the error shape
 *     {"error":{"code":"...","message":"..."}} (space/error_shape.h);
 *   - a streaming call (content-type application/x-space-rpc-stream) sends and
 *     receives framed messages on the open HTTP/2 stream: 1 type byte, a 4-byte
 *     big-endian length, the payload. The client's first frame is the JSON
 *     request; the server's last frame is an END trailer carrying
 *     {"ok":true,...} or the error shape;
 *   - the header `rpc-timeout-ms` carries the caller's deadline; the server
 *     cancels the call when it passes.
 * Every method names the peer roles it accepts; the role comes from the TLS
 * peer certificate through a hook the caller sets (sp_rpc_server_set_identity_fn).
 *
 * Roles are the bit values of sp_role (pki.h): a peer has one, a method
 * accepts a mask of them. A peer without an identity (cleartext, or TLS
 * without an identity hook) has role 0 and may call only methods whose mask
 * includes SP_RPC_UNAUTHENTICATED.
 *
 * Threading: a server or client and everything hanging off it belong to the
 * thread that runs its event_base; no function here may be called from another
 * thread. Callbacks never run inside the function that triggered them: they run
 * from the event loop. No callback may free the server or client that invoked it.
 *
 * Creating a server or client sets SIGPIPE to ignored if it still has its
 * default action, so that a peer that hangs up cannot kill the process.
 */
#ifndef SPACE_RPC_H
#define SPACE_RPC_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

struct event_base;
typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

/* ---- Roles --------------------------------------------------------------- */

/* In a method's role mask: peers without an identity (role 0) may call it. */
#define SP_RPC_UNAUTHENTICATED (UINT32_C(1) << 31)

/* ---- Limits -------------------------------------------------------------- */

#define SP_RPC_PATH_PREFIX "/rpc/v1/"
#define SP_RPC_CONTENT_TYPE_JSON "application/json"
#define SP_RPC_CONTENT_TYPE_STREAM "application/x-space-rpc-stream"
#define SP_RPC_TIMEOUT_HEADER "rpc-timeout-ms"

#define SP_RPC_MAX_METHOD_NAME 128
#define SP_RPC_MAX_BODY (8u * 1024 * 1024) /* unary request and response bodies */
#define SP_RPC_MAX_FRAME (4u * 1024 * 1024) /* one frame's payload */
#define SP_RPC_SEND_HIGH_WATERMARK (1u * 1024 * 1024) /* queued bytes per stream */
#define SP_RPC_STREAM_WINDOW (1u * 1024 * 1024) /* HTTP/2 receive window per stream */
#define SP_RPC_CONN_WINDOW (16u * 1024 * 1024) /* HTTP/2 receive window per connection */
#define SP_RPC_MAX_CONCURRENT_STREAMS 256u /* per connection; a client queues more */
#define SP_RPC_MAX_HEADER_BYTES 16384u /* request or response header list */
#define SP_RPC_MAX_METHODS 1024u
#define SP_RPC_MAX_CONNECTIONS 1024u
#define SP_RPC_MAX_CLIENT_CALLS 4096u /* calls open or waiting on one client */
#define SP_RPC_MAX_TIMEOUT_MS (INT64_C(7) * 24 * 3600 * 1000)
#define SP_RPC_HANDSHAKE_TIMEOUT_MS 10000
#define SP_RPC_IDLE_TIMEOUT_MS (5 * 60 * 1000) /* a connection with no stream */

/* ---- Frames (pure codec, no I/O) ------------------------------------------ */

typedef enum sp_rpc_frame_type {
        SP_RPC_FRAME_DATA = 0x00, /* a chunk of bytes */
        SP_RPC_FRAME_JSON = 0x01, /* one JSON message */
        SP_RPC_FRAME_END = 0x02, /* end-of-stream trailer: {"ok":true,...} or the error shape */
} sp_rpc_frame_type;

#define SP_RPC_FRAME_HEADER_SIZE 5

typedef struct sp_rpc_frame {
        sp_rpc_frame_type type;
        const uint8_t *payload; /* borrowed: valid until the next decoder call */
        size_t len;
} sp_rpc_frame;

/* Appends one frame (header + payload) to out. Fails with SP_E_TOO_LARGE if
 * n > SP_RPC_MAX_FRAME, SP_E_INVALID for an unknown type. */
int sp_rpc_frame_append(sp_buf *out, sp_rpc_frame_type type, const void *payload, size_t n, sp_error **err);

/* Writes the 5-byte header of a frame. Same errors as sp_rpc_frame_append(). */
int sp_rpc_frame_header(uint8_t out[SP_RPC_FRAME_HEADER_SIZE], sp_rpc_frame_type type, size_t n, sp_error **err);

/* Incremental frame decoder over arbitrarily split input. Caller-allocated;
 * init before use, free after. A decoder that failed keeps failing. */
typedef struct sp_rpc_frame_decoder {
        uint8_t header[SP_RPC_FRAME_HEADER_SIZE];
        size_t header_len; /* header bytes held */
        size_t max_payload;
        sp_buf payload; /* payload bytes of a frame split across inputs */
        bool in_payload; /* header complete, payload pending */
        bool failed;
        sp_errc fail_code;
} sp_rpc_frame_decoder;

/* max_payload 0 means SP_RPC_MAX_FRAME; larger values are clamped to it. */
void sp_rpc_frame_decoder_init(sp_rpc_frame_decoder *d, size_t max_payload);
void sp_rpc_frame_decoder_free(sp_rpc_frame_decoder *d);

/* Consumes input up to the end of the next frame. Returns 1 with *ret filled
 * when a frame is complete (its payload points into p or into the decoder and
 * stays valid until the next call), 0 when all of p was consumed without
 * completing a frame, <0 on a bad type (SP_E_INVALID) or an oversized length
 * (SP_E_TOO_LARGE). *ret_used is always set to the bytes taken from p. */
int sp_rpc_frame_decoder_next(sp_rpc_frame_decoder *d, const uint8_t *p, size_t n, size_t *ret_used, sp_rpc_frame *ret,
                              sp_error **err);

/* True if part of a frame is held (so an end of input here is a truncation). */
bool sp_rpc_frame_decoder_partial(const sp_rpc_frame_decoder *d);

/* The error shape of error statuses and END trailers is encoded and decoded
 * by space/error_shape.h. */

/* Builds an END trailer payload: {"ok":true} plus the fields of extra (may be
 * NULL; borrowed), or the error shape when e is not NULL. */
int sp_rpc_trailer_encode(sp_buf *out, const sp_error *e, json_object *extra, sp_error **err);

/* Parses an END trailer payload. {"ok":true,...} → 0 and *ret a new reference
 * to the object; the error shape → the negative code with *err set from it;
 * anything else → SP_E_INVALID. */
int sp_rpc_trailer_parse(const void *payload, size_t len, json_object **ret, sp_error **err);

/* ---- Server ----------------------------------------------------------------- */

typedef struct sp_rpc_server sp_rpc_server;

/* One call in progress on the server. Reference-counted: the transport holds a
 * reference while the HTTP/2 stream lives; a handler that replies or streams
 * after returning takes its own with sp_rpc_call_ref(). Once the call is over
 * (on_close has fired) replies and sends are harmless no-ops returning
 * -SP_E_UNAVAILABLE, and only the small handle stays until the last unref. */
typedef struct sp_rpc_call sp_rpc_call;

/* A method handler: request is the parsed JSON request, borrowed for the
 * duration of the call of the handler. A unary handler must eventually call
 * sp_rpc_call_reply() or sp_rpc_call_fail() exactly once, now or later; a
 * streaming handler sends frames and finishes with sp_rpc_call_end() or
 * sp_rpc_call_fail(). */
typedef void (*sp_rpc_handler_fn)(sp_rpc_call *call, json_object *request, void *userdata);

typedef struct sp_rpc_method {
        const char *name; /* [A-Za-z0-9_.]+, copied */
        uint32_t roles; /* sp_role bits allowed to call it, | SP_RPC_UNAUTHENTICATED */
        bool streaming;
        sp_rpc_handler_fn handler;
        void *userdata;
} sp_rpc_method;

/* Given the TLS connection of a new peer (handshake done, chain verified by the
 * SSL_CTX), sets *ret_role (one sp_role bit; sp_tls_peer_identity() fits) and
 * *ret_name (malloc'd, or NULL). Failing closes the connection. */
typedef int (*sp_rpc_identity_fn)(SSL *ssl, void *userdata, unsigned *ret_role, char **ret_name, sp_error **err);

/* Callbacks of one server call, all optional. They never fire after on_close. */
typedef struct sp_rpc_call_ops {
        /* A frame from the client (DATA or JSON). The payload is borrowed for the
         * callback. Call sp_rpc_call_pause() to stop delivery (and, through HTTP/2
         * flow control, the client); frames wait until sp_rpc_call_resume(). */
        void (*on_frame)(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *payload, size_t len, void *userdata);
        /* The client half-closed: every frame it sent has been delivered. */
        void (*on_input_end)(sp_rpc_call *call, void *userdata);
        /* The send queue fell below half the high watermark after a send
         * returned 1 (would block). */
        void (*on_writable)(sp_rpc_call *call, void *userdata);
        /* The call is over, exactly once: reason is NULL once the whole reply
         * or trailer was sent, else why it ended early (SP_E_UNAVAILABLE: the
         * peer reset the stream, the connection died or the server was freed;
         * SP_E_TIMEOUT: the deadline passed, and the server answered 408 or
         * reset the stream). Free per-call state here; the transport frees its
         * own once the stream is gone. */
        void (*on_close)(sp_rpc_call *call, const sp_error *reason, void *userdata);
} sp_rpc_call_ops;

/* Creates a server on base. ctx NULL serves cleartext HTTP/2 with prior
 * knowledge (tests only); otherwise the server takes a reference to ctx, which
 * should select ALPN "h2" (sp_tls_config.alpn); a peer that negotiates any
 * other protocol is refused, one without ALPN is served HTTP/2. */
sp_rpc_server *sp_rpc_server_new(struct event_base *base, SSL_CTX *ctx, sp_error **err);

/* Closes listeners and connections (every open call gets on_close with
 * SP_E_UNAVAILABLE) and frees the server. Accepts NULL. Not from a callback. */
void sp_rpc_server_free(sp_rpc_server *srv);

/* Sets the hook that names the role of TLS peers (see sp_rpc_identity_fn).
 * Without it every peer has role 0. Applies to connections accepted later. */
void sp_rpc_server_set_identity_fn(sp_rpc_server *srv, sp_rpc_identity_fn fn, void *userdata);

/* Registers a method (copied). Fails with SP_E_CONFLICT for a duplicate name,
 * SP_E_INVALID for a bad name or a missing handler, SP_E_LIMIT beyond
 * SP_RPC_MAX_METHODS. */
int sp_rpc_server_register(sp_rpc_server *srv, const sp_rpc_method *method, sp_error **err);

/* Listens on "HOST:PORT" (numeric IPv4 or [IPv6]; port 0 picks one) or
 * "unix:/path" (a stale socket file there is replaced). Up to 4 listeners. */
int sp_rpc_server_listen(sp_rpc_server *srv, const char *addr, sp_error **err);

/* The TCP port of the first TCP listener, or -1. */
int sp_rpc_server_port(const sp_rpc_server *srv);

/* Serves one already connected socket (taken over, closed on failure), e.g.
 * an inherited or socketpair fd. */
int sp_rpc_server_adopt_fd(sp_rpc_server *srv, int fd, sp_error **err);

/* Graceful stop: closes the listeners and sends GOAWAY on every connection;
 * calls already started finish, connections close when their last stream does. */
void sp_rpc_server_shutdown(sp_rpc_server *srv);

typedef struct sp_rpc_server_stats {
        uint64_t connections_accepted;
        uint64_t connections_open;
        uint64_t calls_started; /* requests dispatched to a handler */
        uint64_t calls_open; /* call handles still allocated */
} sp_rpc_server_stats;
void sp_rpc_server_get_stats(const sp_rpc_server *srv, sp_rpc_server_stats *ret);

/* Server call handle. */
sp_rpc_call *sp_rpc_call_ref(sp_rpc_call *call);
/* Drops a reference; accepts NULL; returns NULL. */
sp_rpc_call *sp_rpc_call_unref(sp_rpc_call *call);
/* Sets the callbacks (copied) and their userdata. Call it from the handler:
 * once the call is over it does nothing (and no callback will ever fire). */
void sp_rpc_call_set_ops(sp_rpc_call *call, const sp_rpc_call_ops *ops, void *userdata);

const char *sp_rpc_call_method(const sp_rpc_call *call);
/* The peer's role (an sp_role bit), 0 if it has none. */
unsigned sp_rpc_call_role(const sp_rpc_call *call);
/* The peer's name from the identity hook, or NULL. */
const char *sp_rpc_call_peer_name(const sp_rpc_call *call);
/* The serial of the peer's certificate (sp_tls_peer_serial()), or NULL
 * without one: tells one certificate of a name from another. */
const char *sp_rpc_call_peer_serial(const sp_rpc_call *call);
/* The deadline (CLOCK_MONOTONIC µs) or 0 for none. */
int64_t sp_rpc_call_deadline(const sp_rpc_call *call);
/* True once the call is over for the handler (on_close fired or is due). */
bool sp_rpc_call_is_closed(const sp_rpc_call *call);

/* Unary: replies 200 with resp (borrowed, serialised now; NULL sends {}).
 * Fails with SP_E_UNAVAILABLE once the call is over (harmless: nobody is
 * listening), SP_E_INVALID if it was already answered or is streaming. */
int sp_rpc_call_reply(sp_rpc_call *call, json_object *resp, sp_error **err);
/* Fails the call with e (NULL → internal error): an error status with the
 * error shape if nothing was sent yet, else an END trailer with the error.
 * Returns 0, or the negative code of sp_rpc_call_reply()'s errors. */
int sp_rpc_call_fail(sp_rpc_call *call, const sp_error *e);
int sp_rpc_call_failf(sp_rpc_call *call, sp_errc code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Streaming: queues one frame (type DATA or JSON). Returns 0, or 1 when the
 * queue has reached the high watermark (the frame was queued; wait for
 * on_writable before sending more). Fails with SP_E_LIMIT when called while
 * already at the watermark, SP_E_TOO_LARGE for n > SP_RPC_MAX_FRAME. */
int sp_rpc_call_send(sp_rpc_call *call, sp_rpc_frame_type type, const void *payload, size_t n, sp_error **err);
int sp_rpc_call_send_json(sp_rpc_call *call, json_object *msg, sp_error **err);
/* Streaming: queues the END trailer {"ok":true, ...extra} and ends the stream. */
int sp_rpc_call_end(sp_rpc_call *call, json_object *extra, sp_error **err);
/* Bytes queued on the call's stream and not yet handed to the connection. */
size_t sp_rpc_call_queued(const sp_rpc_call *call);
/* Bytes received from the client and not yet delivered to on_frame. */
size_t sp_rpc_call_buffered(const sp_rpc_call *call);
void sp_rpc_call_pause(sp_rpc_call *call);
void sp_rpc_call_resume(sp_rpc_call *call);

/* ---- Client ----------------------------------------------------------------- */

/* A client for one address: one HTTP/2 connection, opened on the first call,
 * shared by every call, and reopened on the next call after it fails. */
typedef struct sp_rpc_client sp_rpc_client;

/* One client streaming call. Owned by the transport: valid from
 * sp_rpc_client_stream() until on_end returns or sp_rpc_stream_cancel(). */
typedef struct sp_rpc_stream sp_rpc_stream;

/* Checks a TLS server after the handshake (e.g. its role); failing drops the
 * connection and fails its calls with SP_E_UNAVAILABLE. */
typedef int (*sp_rpc_verify_fn)(SSL *ssl, void *userdata, sp_error **err);

/* Result of a unary call, exactly once: resp (borrowed; json_object_get() to
 * keep) or err. */
typedef void (*sp_rpc_unary_cb)(json_object *resp, const sp_error *err, void *userdata);

typedef struct sp_rpc_stream_ops {
        /* A DATA or JSON frame from the server, borrowed for the callback. */
        void (*on_frame)(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *payload, size_t len, void *userdata);
        /* The send queue fell below half the high watermark after a send returned 1. */
        void (*on_writable)(sp_rpc_stream *s, void *userdata);
        /* Exactly once, last: trailer ({"ok":true,...}, borrowed) on success, or
         * err (the server's error, SP_E_TIMEOUT, SP_E_UNAVAILABLE when the
         * connection is lost...). The stream is freed when it returns. */
        void (*on_end)(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *userdata);
} sp_rpc_stream_ops;

/* Creates a client for addr ("HOST:PORT" with a numeric host or a name, which
 * each connection attempt resolves with a blocking lookup, or "unix:/path"). ctx NULL speaks cleartext HTTP/2 (tests only); otherwise the
 * client takes a reference to ctx and offers ALPN "h2" on each connection
 * (a server that selects another protocol is refused). */
sp_rpc_client *sp_rpc_client_new(struct event_base *base, const char *addr, SSL_CTX *ctx, sp_error **err);
/* Fails every open call with SP_E_UNAVAILABLE (callbacks fire now), closes
 * connections and frees the client. Accepts NULL. Not from a callback. */
void sp_rpc_client_free(sp_rpc_client *cli);
void sp_rpc_client_set_verify_fn(sp_rpc_client *cli, sp_rpc_verify_fn fn, void *userdata);
/* The same, the client owning userdata: free_fn(userdata) when the client
 * is freed or another hook is set. */
void sp_rpc_client_set_verify_fn_owned(sp_rpc_client *cli, sp_rpc_verify_fn fn, void *userdata,
                                       void (*free_fn)(void *));
/* Server name for SNI (copied); defaults to the host of addr if not numeric. */
int sp_rpc_client_set_server_name(sp_rpc_client *cli, const char *name, sp_error **err);

/* Starts a unary call; req is borrowed (serialised now). timeout_ms > 0 sets
 * the deadline (sent as rpc-timeout-ms; SP_E_TIMEOUT when it passes), 0 none.
 * On success cb fires later exactly once; on failure (bad arguments,
 * SP_E_LIMIT for too many calls) it never fires. */
int sp_rpc_client_call(sp_rpc_client *cli, const char *method, json_object *req, int64_t timeout_ms, sp_rpc_unary_cb cb,
                       void *userdata, sp_error **err);

/* Starts a streaming call whose first frame is req (borrowed). ops is copied.
 * Returns the handle, or NULL (then no callback fires). */
sp_rpc_stream *sp_rpc_client_stream(sp_rpc_client *cli, const char *method, json_object *req, int64_t timeout_ms,
                                    const sp_rpc_stream_ops *ops, void *userdata, sp_error **err);

/* Same contract as sp_rpc_call_send(). Fails with SP_E_INVALID after
 * sp_rpc_stream_close_send(), SP_E_UNAVAILABLE once the stream has ended. */
int sp_rpc_stream_send(sp_rpc_stream *s, sp_rpc_frame_type type, const void *payload, size_t n, sp_error **err);
int sp_rpc_stream_send_json(sp_rpc_stream *s, json_object *msg, sp_error **err);
/* Half-closes: no more frames from the client (END_STREAM after the queue). */
int sp_rpc_stream_close_send(sp_rpc_stream *s, sp_error **err);
/* Resets the stream (RST_STREAM CANCEL) and frees the handle; on_end does not
 * fire. Allowed from the stream's own callbacks. */
void sp_rpc_stream_cancel(sp_rpc_stream *s);
void sp_rpc_stream_pause(sp_rpc_stream *s);
void sp_rpc_stream_resume(sp_rpc_stream *s);
size_t sp_rpc_stream_queued(const sp_rpc_stream *s);
/* Bytes received and not yet delivered to on_frame (bounded by the window). */
size_t sp_rpc_stream_buffered(const sp_rpc_stream *s);

typedef struct sp_rpc_client_stats {
        uint64_t connects; /* connection attempts */
        uint64_t calls_open;
} sp_rpc_client_stats;
void sp_rpc_client_get_stats(const sp_rpc_client *cli, sp_rpc_client_stats *ret);
/* True while a connection is established and accepting new calls. */
bool sp_rpc_client_connected(const sp_rpc_client *cli);

/* Blocking unary call for tools and tests: runs its own event_base and client
 * until the answer or timeout_ms. On success *ret_resp is a new reference.
 * Thread-safe (nothing shared). */
int sp_rpc_call_sync(const char *addr, SSL_CTX *ctx, const char *method, json_object *req, int64_t timeout_ms,
                     json_object **ret_resp, sp_error **err);

#endif
