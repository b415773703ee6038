/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the RPC server and client: the per-stream send and
 * receive queues, the nghttp2 <-> bufferevent glue and address parsing.
 */
#ifndef SPACE_RPC_INTERNAL_H
#define SPACE_RPC_INTERNAL_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "space/rpc.h"

/* Bytes in a connection's output buffer above which nghttp2 stops producing
 * frames until the socket has drained. */
#define SP__RPC_OUTPUT_LIMIT (256u * 1024)

/* The part of a server or client connection the shared glue needs. It is the
 * first member of both, and the nghttp2 session's user_data. */
typedef struct sp__rpc_h2 {
        struct bufferevent *bev;
        nghttp2_session *session;
        struct event *kick; /* the owner's deferred-work event (not owned) */
} sp__rpc_h2;

/* What one stream has queued to send, as framed bytes. */
typedef struct sp__rpc_outq {
        struct evbuffer *buf;
        bool eof; /* end the stream once buf is empty */
        bool deferred; /* the data provider waits for bytes */
        bool blocked; /* a send returned 1: on_writable is owed */
        bool writable_due; /* blocked and drained below half: fire on_writable */
} sp__rpc_outq;

/* What one stream has received and not yet delivered. */
typedef struct sp__rpc_inq {
        struct evbuffer *buf;
        sp_rpc_frame_decoder dec;
        bool paused;
        bool eof; /* the peer ended its side */
} sp__rpc_inq;

int sp__rpc_outq_init(sp__rpc_outq *q);
void sp__rpc_outq_free(sp__rpc_outq *q);
/* Queues a frame with the send contract of sp_rpc_call_send(). */
int sp__rpc_outq_frame(sp__rpc_outq *q, sp_rpc_frame_type type, const void *p, size_t n, sp_error **err);
/* Queues the END trailer frame (beyond the watermark) and marks the end. */
int sp__rpc_outq_end(sp__rpc_outq *q, const void *p, size_t n, sp_error **err);
/* Wakes the stream's data provider if it is waiting for bytes. */
void sp__rpc_outq_wake(sp__rpc_outq *q, nghttp2_session *session, int32_t stream_id);
nghttp2_data_provider sp__rpc_outq_provider(sp__rpc_outq *q);

int sp__rpc_inq_init(sp__rpc_inq *q);
void sp__rpc_inq_free(sp__rpc_inq *q);
/* Queues bytes received on the stream. The connection's window opens again at
 * once: what a stream holds is bounded by its own window, so a consumer that
 * pauses one stream never stalls the others on the connection. The stream's
 * window opens only as sp__rpc_inq_deliver() hands the bytes on. Returns -1
 * when out of memory. */
int sp__rpc_inq_receive(sp__rpc_inq *q, nghttp2_session *session, const uint8_t *data, size_t len);

/* Called per decoded frame; returns false to stop delivery (the frame counts
 * as delivered). */
typedef bool (*sp__rpc_frame_fn)(void *userdata, const sp_rpc_frame *f);
/* Decodes and delivers frames while the queue is not paused, returning the
 * delivered bytes to the stream's HTTP/2 window (session may be NULL). Returns 0 when
 * everything buffered was delivered, 1 if delivery stopped early, <0 on a
 * malformed frame. */
int sp__rpc_inq_deliver(sp__rpc_inq *q, nghttp2_session *session, int32_t stream_id, sp__rpc_frame_fn fn,
                        void *userdata, sp_error **err);

/* nghttp2 callbacks shared by both sides (user_data is an sp__rpc_h2). */
void sp__rpc_h2_set_io_callbacks(nghttp2_session_callbacks *cbs);
/* Applies our flow-control options (manual window updates). */
nghttp2_option *sp__rpc_h2_options(bool server);
/* Sends SETTINGS and widens the connection receive window. */
int sp__rpc_h2_start(sp__rpc_h2 *h, bool server, sp_error **err);
/* Feeds everything in the bufferevent's input to nghttp2. */
int sp__rpc_h2_recv(sp__rpc_h2 *h, sp_error **err);
/* Lets nghttp2 write frames until it is done or the output is full. */
int sp__rpc_h2_send(sp__rpc_h2 *h, sp_error **err);
/* True when the session has nothing more to read or write. */
bool sp__rpc_h2_finished(const sp__rpc_h2 *h);

/* Writing to a socket the peer has closed must fail with EPIPE, not kill the
 * process: sets SIGPIPE to ignored if it still has its default action. */
void sp__rpc_ignore_sigpipe(void);

/* A parsed "HOST:PORT" or "unix:/path". */
typedef struct sp__rpc_addr {
        bool is_unix;
        bool numeric; /* host is an IP literal: ss holds the address */
        char host[256];
        int port;
        struct sockaddr_storage ss;
        int sslen;
} sp__rpc_addr;

int sp__rpc_addr_parse(const char *s, sp__rpc_addr *ret, sp_error **err);

/* True if name is a valid method name. */
bool sp__rpc_method_name_valid(const char *name, size_t len);

#endif
