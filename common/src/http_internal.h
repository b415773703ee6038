/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the files of the HTTP module (http_server.c: listeners,
 * connections, timers and the read loop; http_route.c: the route table;
 * http_request.c: requests; http_response.c: replies and streaming; sse.c).
 * Not installed, not for other modules.
 */
#ifndef SPACE_HTTP_INTERNAL_H
#define SPACE_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/http.h"
#include "space/id.h"

#define SP_HTTP_MAX_LISTENERS 8
#define SP_HTTP_MAX_ROUTES 1024
#define SP_HTTP_MAX_SEGMENTS 32
#define SP_HTTP_PARAM_NAME_MAX 32
#define SP_HTTP_REMOTE_MAX 64
#define SP_HTTP_REQUEST_ID_MAX 65
#define SP_HTTP_EXTRA_HEADERS_MAX (8 * 1024)
#define SP_HTTP_WRITE_MAX (16u * 1024 * 1024)
/* The most one write to a client's socket takes (libevent's default: 16 KiB). */
#define SP_HTTP_MAX_SINGLE_WRITE (256 * 1024)
/* The head of a 101 answer: status line and headers. */
#define SP_HTTP_UPGRADE_HEAD_MAX (64 * 1024)
/* Requests answered per read callback before yielding to other connections. */
#define SP_HTTP_REQUESTS_PER_WAKEUP 64

struct bufferevent;
struct evbuffer;
struct event;
struct evconnlistener;

typedef enum sp__http_seg_kind {
        SP__SEG_LITERAL,
        SP__SEG_PARAM,
        SP__SEG_REST,
} sp__http_seg_kind;

typedef struct sp__http_segment {
        sp__http_seg_kind kind;
        char *text; /* the literal, or the parameter name */
} sp__http_segment;

typedef struct sp__http_route {
        char *method;
        char *pattern;
        sp__http_segment segs[SP_HTTP_MAX_SEGMENTS];
        size_t nsegs;
        sp_http_handler handler;
        void *userdata;
        uint64_t max_body;
        unsigned flags;
} sp__http_route;

typedef struct sp__http_listener {
        sp_http_server *srv;
        struct evconnlistener *lev;
        SSL_CTX *ssl;
        char *unix_path;
        int port; /* -1 for unix sockets */
} sp__http_listener;

typedef struct sp__http_conn sp__http_conn;

/* The half-close of an upgraded connection toward its client. */
typedef enum sp__http_shut {
        SP__SHUT_NONE,
        SP__SHUT_FLUSHING, /* asked for: once the queued output is out */
        SP__SHUT_RETRYING, /* TLS: the socket did not take the close_notify yet */
        SP__SHUT_DONE,
} sp__http_shut;

struct sp_http_server {
        struct event_base *base;
        sp_http_config cfg;
        sp__http_listener listeners[SP_HTTP_MAX_LISTENERS];
        size_t nlisteners;
        struct event *accept_retry;
        sp__http_route *routes;
        size_t nroutes;
        sp_http_host_match_fn host_match; /* NULL: no host handler */
        sp__http_route host_route; /* its handler and options; no method, pattern or segments */
        sp__http_conn *conns;
        size_t nconns;
        sp_buf busy_reply; /* the canned 503 for connections over the limit */
};

typedef enum sp__http_conn_state {
        SP__CONN_ACTIVE, /* reading requests, answering them */
        SP__CONN_CLOSING, /* flushing the last response */
        SP__CONN_LINGER, /* output shut down, dropping input until EOF or timeout */
        SP__CONN_RAW, /* upgraded: a byte stream between the client and conn->req's raw callbacks */
} sp__http_conn_state;

typedef enum sp__http_timer {
        SP__TIMER_NONE,
        SP__TIMER_HEAD,
        SP__TIMER_BODY,
        SP__TIMER_KEEPALIVE,
        SP__TIMER_LINGER,
        SP__TIMER_RAW, /* idle check of an upgraded connection */
} sp__http_timer;

struct sp__http_conn {
        sp_http_server *srv;
        sp__http_conn *prev, *next;
        struct bufferevent *bev;
        bool tls;
        char remote[SP_HTTP_REMOTE_MAX];
        sp_http_request *req; /* the request being read or answered (one reference) */
        sp__http_conn_state state;
        sp__http_timer timer_kind;
        struct event *timer;
        struct event *kick; /* runs the read loop again from the event loop */
        unsigned busy; /* nesting of callbacks and API calls on the stack: free only at 0 */
        unsigned in_api; /* nesting of API calls (bufferevents may call back synchronously) */
        bool dead;
        bool peer_eof; /* the client sent all it will (a half-close): answer, then close */

        /* upgraded connections */
        int64_t raw_active_us; /* monotonic time of the last byte either way */
        sp__http_shut shut; /* the half-close toward the client */
        struct event *shut_retry; /* waits for the socket to take a TLS close_notify */
};

typedef enum sp__http_resp {
        SP__RESP_NONE,
        SP__RESP_STREAM,
        SP__RESP_DONE,
        SP__RESP_RAW, /* answered 101: the connection is a raw byte stream */
} sp__http_resp;

typedef struct sp__http_param {
        char *name;
        char *value;
} sp__http_param;

struct sp_http_request {
        unsigned refs;
        unsigned internal_refs; /* those of the connection and of the server's own stack frames */
        sp__http_conn *conn; /* NULL once detached */
        sp_http_parser *parser;
        char id[SP_HTTP_REQUEST_ID_MAX];
        char remote[SP_HTTP_REMOTE_MAX];

        /* routing and body */
        bool head_done, body_done, streamed, is_head, handler_called;
        bool end_told; /* a streamed body's end was given to on_body */
        sp__http_param *params;
        size_t nparams;
        sp_buf body;
        sp_http_handler handler;
        void *handler_ud;
        sp_http_body_cb on_body;
        void *on_body_ud;
        bool paused, continue_sent;

        /* response */
        sp__http_resp resp;
        bool keep_alive;
        bool chunked, until_close, no_body;
        bool has_length;
        uint64_t length_left;
        sp_buf extra;
        sp_http_writable_cb on_writable;
        void *on_writable_ud;
        bool want_writable;
        sp_http_close_cb on_close;
        void *on_close_ud;

        /* upgraded (SP__RESP_RAW) */
        sp_http_raw_ops raw;
        void *raw_ud;
        bool raw_paused, raw_eof_told;
};

/* http_route.c */
void sp__http_routes_free(sp_http_server *srv);
/* Finds the route for the request (after HEAD) and fills its parameters.
 * Returns the route, or NULL with *ret_status 404 or 405 (and the Allow list
 * in allow for 405). */
const sp__http_route *sp__http_route_match(sp_http_server *srv, sp_http_request *req, int *ret_status, sp_buf *allow);

/* http_request.c */
/* A new request holding one internal reference: the connection's. */
sp_http_request *sp__http_request_new(sp__http_conn *conn);
/* References taken by the server itself, so that it can tell whether anybody
 * else (a handler answering later, an SSE stream) still holds the request. */
static inline sp_http_request *sp__http_request_hold(sp_http_request *req)
{
        req->internal_refs++;
        return sp_http_request_ref(req);
}
static inline void sp__http_request_release(sp_http_request *req)
{
        req->internal_refs--;
        sp_http_request_unref(req);
}
/* True when only the server holds the request. */
static inline bool sp__http_request_unowned(const sp_http_request *req)
{
        return req->refs == req->internal_refs;
}
/* Detaches the request from its connection (which drops its reference next),
 * running the close callback if the response was not complete. */
void sp__http_request_detach(sp_http_request *req);

/* http_response.c */
/* A header value without control bytes (HTAB allowed). */
bool sp__http_header_value_ok(const char *value);
/* Answers with the error shape and an explicit status (431, 414, 505 ...);
 * allow, if not NULL, becomes an Allow header; close: close the connection
 * after it (malformed input). */
int sp__http_reply_status_error(sp_http_request *req, int status, sp_errc code, const char *message, const char *allow,
                                bool close);
/* Sends "HTTP/1.1 100 Continue" if the client asked for it and nothing has
 * been answered yet. */
void sp__http_send_continue(sp_http_request *req);
/* Builds a complete error response (for the canned 503). */
void sp__http_error_response(sp_buf *out, int status, sp_errc code, const char *message);

/* http_server.c */
struct evbuffer *sp__http_conn_output(sp__http_conn *conn);
/* The response of conn->req is complete: continue with the next request, or
 * close after flushing. */
void sp__http_conn_response_done(sp__http_conn *conn);
/* Schedules the read loop (resume after pause, after a response). */
void sp__http_conn_kick(sp__http_conn *conn);
/* Brackets every API call that writes to the connection: a callback the
 * bufferevent makes synchronously meanwhile (OpenSSL does) is postponed to
 * the loop, and the connection is never freed inside the call. */
void sp__http_conn_api_enter(sp__http_conn *conn);
void sp__http_conn_api_leave(sp__http_conn *conn);
/* Marks the connection for closing without flushing; freed from the loop. */
void sp__http_conn_abort(sp__http_conn *conn);
/* Switches the connection to raw mode after its request was answered 101:
 * the HTTP timers stop, the raw idle timer starts, and the input left after
 * the request is delivered from the loop. */
void sp__http_conn_raw_start(sp__http_conn *conn);
/* A byte went either way on a raw connection (the idle timer's clock). */
void sp__http_conn_raw_activity(sp__http_conn *conn);

/* http_raw.c */
/* Delivers the raw input (and the client's EOF after it) to the callbacks
 * unless paused; from the loop, with the connection held. */
void sp__http_raw_input(sp__http_conn *conn);
/* Output drained to pending bytes: the writable callback, the half-close. */
void sp__http_raw_drained(sp__http_conn *conn, size_t pending);

/* Re-arms the body timer (body reading resumed). */
void sp__http_conn_body_progress(sp__http_conn *conn);
/* Stops the body timer (body reading paused). */
void sp__http_conn_timer_stop(sp__http_conn *conn);

#endif
