/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by rpc_server.c (connections) and rpc_server_call.c (calls). */
#ifndef SPACE_RPC_SERVER_INTERNAL_H
#define SPACE_RPC_SERVER_INTERNAL_H

#include "rpc_internal.h"
#include "space/tls.h"

typedef struct sp__rpc_method {
        char name[SP_RPC_MAX_METHOD_NAME + 1];
        uint32_t roles;
        bool streaming;
        sp_rpc_handler_fn handler;
        void *userdata;
} sp__rpc_method;

/* One accepted connection. */
typedef struct sp__rpc_conn {
        sp__rpc_h2 h2; /* first: the nghttp2 user_data */
        sp_rpc_server *srv;
        struct sp__rpc_conn *prev, *next;
        struct event *kick; /* deferred work: handlers, deliveries, flush */
        struct event *idle;
        unsigned role;
        char *peer_name;
        char peer_serial[SP_TLS_SERIAL_MAX + 1]; /* its certificate's serial, "" without one */
        sp_rpc_call *calls; /* calls whose stream is attached */
} sp__rpc_conn;

typedef enum call_ct {
        CALL_CT_NONE = 0,
        CALL_CT_JSON,
        CALL_CT_STREAM,
        CALL_CT_OTHER,
} call_ct;

struct sp_rpc_call {
        unsigned refs;
        sp_rpc_server *srv; /* NULL once the server is freed */
        sp__rpc_conn *conn; /* NULL once the stream is released */
        sp_rpc_call *prev, *next; /* in conn->calls */
        sp_rpc_call *all_prev, *all_next; /* in the server's list of handles */
        int32_t stream_id;
        const sp__rpc_method *method;
        char method_name[SP_RPC_MAX_METHOD_NAME + 1];
        unsigned role;
        char *peer_name;
        char peer_serial[SP_TLS_SERIAL_MAX + 1];

        /* request headers */
        size_t header_bytes;
        bool is_post;
        bool path_ok;
        call_ct ct;
        int64_t timeout_ms; /* 0 none, -1 malformed */

        sp_buf body; /* unary request */
        sp__rpc_inq in; /* streaming request */
        sp__rpc_outq out;
        struct event *deadline_ev;
        int64_t deadline_us;

        bool dispatched; /* handler invoked */
        bool req_ended; /* client END_STREAM received */
        bool input_end_fired;
        bool responded; /* response HEADERS submitted */
        bool finished; /* the final reply or trailer is queued */
        bool end_sent; /* our END_STREAM went out */
        bool h2_closed; /* nghttp2 closed the stream */
        bool closed; /* on_close fired (or was due with no ops) */

        sp_rpc_call_ops ops;
        void *ud;
};

const sp__rpc_method *sp__rpc_server_find_method(const sp_rpc_server *srv, const char *name, size_t len);
struct event_base *sp__rpc_server_base(const sp_rpc_server *srv);
void sp__rpc_server_call_born(sp_rpc_server *srv, sp_rpc_call *call);
void sp__rpc_server_call_gone(sp_rpc_server *srv, sp_rpc_call *call);
void sp__rpc_server_call_started(sp_rpc_server *srv);

/* Schedules the connection's deferred work. */
void sp__rpc_conn_kick(sp__rpc_conn *c);
/* Installs the nghttp2 callbacks of a server session. */
void sp__rpc_server_set_callbacks(nghttp2_session_callbacks *cbs);
/* Runs handlers and deliveries, and releases calls whose stream closed. */
void sp__rpc_conn_process_calls(sp__rpc_conn *c);
/* The connection is going away (its session is already deleted): every call
 * gets on_close with SP_E_UNAVAILABLE and is released. */
void sp__rpc_conn_close_calls(sp__rpc_conn *c);

#endif
