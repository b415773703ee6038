/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RPC client: one HTTP/2 connection per address, opened lazily and shared by
 * every call; a new one after a failure or a GOAWAY. Calls live in the
 * client's list; nghttp2 callbacks only record what happened, and the
 * client's deferred-work event delivers frames and reports outcomes.
 */
#include <errno.h>
#include <stdio.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "rpc_internal.h"

#define NV(n, v) \
        { \
                (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE \
        }

typedef enum conn_state {
        CONN_CONNECTING,
        CONN_READY,
        CONN_DRAINING, /* GOAWAY received: no new calls */
} conn_state;

typedef struct cli_conn {
        sp__rpc_h2 h2; /* first: the nghttp2 user_data */
        sp_rpc_client *cli;
        struct cli_conn *prev, *next;
        conn_state state;
        bool failed; /* to be torn down by the deferred work */
        /* Inside conn_new's connect call, where libevent may report at once (a
         * name that does not resolve): what it reported waits for the deferred
         * work, since the connection must outlive conn_new. */
        bool in_connect;
        short early_events;
} cli_conn;

struct sp_rpc_client {
        struct event_base *base;
        SSL_CTX *ctx;
        sp__rpc_addr addr;
        char authority[300];
        char *sni;
        sp_rpc_verify_fn verify_fn;
        void *verify_ud;
        void (*verify_free)(void *); /* frees verify_ud with the client, or NULL */
        cli_conn *conns;
        cli_conn *current; /* takes new calls */
        sp_rpc_stream *streams;
        struct event *kick;
        sp_rpc_client_stats stats;
        bool freeing;
};

struct sp_rpc_stream {
        unsigned refs;
        sp_rpc_client *cli;
        cli_conn *conn; /* NULL once detached from its connection */
        sp_rpc_stream *prev, *next;
        int32_t stream_id; /* 0 until submitted */
        char path[sizeof(SP_RPC_PATH_PREFIX) + SP_RPC_MAX_METHOD_NAME];
        bool unary;
        sp_rpc_unary_cb unary_cb;
        sp_rpc_stream_ops ops;
        void *ud;
        int64_t deadline_us; /* 0: none */
        struct event *timer;

        sp__rpc_outq out;
        sp__rpc_inq in;
        sp_buf body; /* unary response, or an error body */
        int status;
        bool ct_stream;
        size_t header_bytes;

        bool headers_seen;
        bool remote_ended; /* END_STREAM received */
        bool h2_closed; /* the HTTP/2 stream is gone (or never was) */
        uint32_t h2_error;
        bool send_closed;
        bool done; /* outcome known */
        bool ended; /* outcome reported or cancelled: no more callbacks */
        json_object *result;
        sp_error *result_err;
};

static void set_callbacks(nghttp2_session_callbacks *cbs);

static void client_kick(sp_rpc_client *cli)
{
        event_active(cli->kick, EV_WRITE, 0);
}

/* ---- streams ---------------------------------------------------------------- */

static sp_rpc_stream *stream_ref(sp_rpc_stream *s)
{
        s->refs++;
        return s;
}

static void stream_unref(sp_rpc_stream *s)
{
        if (--s->refs > 0)
                return;
        free(s);
}

static nghttp2_session *stream_session(const sp_rpc_stream *s)
{
        return s->conn ? s->conn->h2.session : NULL;
}

/* Unlinks a finished stream and frees all it holds. */
static void stream_finish(sp_rpc_stream *s)
{
        sp_rpc_client *cli = s->cli;
        nghttp2_session *session = stream_session(s);
        if (session && s->stream_id > 0 && !s->h2_closed)
                nghttp2_session_set_stream_user_data(session, s->stream_id, NULL);
        if (s->timer)
                event_free(s->timer);
        sp__rpc_outq_free(&s->out);
        sp__rpc_inq_free(&s->in);
        sp_buf_free(&s->body);
        json_object_put(s->result);
        sp_error_free(s->result_err);
        if (s->prev)
                s->prev->next = s->next;
        else
                cli->streams = s->next;
        if (s->next)
                s->next->prev = s->prev;
        cli->stats.calls_open--;
        stream_unref(s);
}

/* True when nghttp2 no longer refers to the stream's queues. */
static bool stream_detached(const sp_rpc_stream *s)
{
        return s->stream_id == 0 || s->h2_closed || !stream_session(s);
}

/* Records the outcome (the first one wins). */
static void stream_done(sp_rpc_stream *s, json_object *result, sp_errc code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void stream_done(sp_rpc_stream *s, json_object *result, sp_errc code, const char *fmt, ...)
{
        if (s->done) {
                json_object_put(result);
                return;
        }
        s->done = true;
        s->result = result;
        if (code != SP_OK) {
                va_list ap;
                va_start(ap, fmt);
                sp_error_setv(&s->result_err, code, 0, fmt, ap);
                va_end(ap);
        }
        client_kick(s->cli);
}

/* Stops the HTTP/2 stream if it is still open. */
static void stream_reset(sp_rpc_stream *s)
{
        nghttp2_session *session = stream_session(s);
        if (session && s->stream_id > 0 && !s->h2_closed)
                nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, s->stream_id, NGHTTP2_CANCEL);
        client_kick(s->cli);
}

/* Reports the outcome once. */
static void stream_fire_end(sp_rpc_stream *s)
{
        if (s->ended)
                return;
        s->ended = true;
        if (s->timer)
                evtimer_del(s->timer);
        stream_ref(s);
        if (s->unary && s->unary_cb)
                s->unary_cb(s->result, s->result_err, s->ud);
        else if (!s->unary && s->ops.on_end)
                s->ops.on_end(s, s->result, s->result_err, s->ud);
        stream_reset(s);
        stream_unref(s);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
        sp_rpc_stream *s = arg;
        stream_done(s, NULL, SP_E_TIMEOUT, "deadline exceeded");
        stream_fire_end(s);
}

/* ---- connections ------------------------------------------------------------- */

static void conn_free(cli_conn *c, const char *why)
{
        sp_rpc_client *cli = c->cli;
        nghttp2_session_del(c->h2.session);
        c->h2.session = NULL;
        for (sp_rpc_stream *s = cli->streams; s; s = s->next) {
                if (s->conn != c)
                        continue;
                s->conn = NULL;
                /* A response that arrived whole is still delivered. */
                if (!s->remote_ended)
                        stream_done(s, NULL, SP_E_UNAVAILABLE, "%s", why);
                s->h2_closed = true;
        }
        if (c->prev)
                c->prev->next = c->next;
        else
                cli->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        if (cli->current == c)
                cli->current = NULL;
        if (c->h2.bev)
                bufferevent_free(c->h2.bev);
        free(c);
        client_kick(cli);
}

static void conn_flush(cli_conn *c)
{
        if (!c->h2.session)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (sp__rpc_h2_send(&c->h2, &e) < 0) {
                sp_log_debug("rpc client: %s", e->message);
                conn_free(c, e->message);
                return;
        }
        if (sp__rpc_h2_finished(&c->h2) && evbuffer_get_length(bufferevent_get_output(c->h2.bev)) == 0)
                conn_free(c, "connection closed by the server");
}

static void stream_submit(sp_rpc_stream *s)
{
        sp_rpc_client *cli = s->cli;
        char timeout[24] = "";
        if (s->deadline_us) {
                int64_t left = (s->deadline_us - sp_now_mono_us()) / SP_USEC_PER_MSEC;
                snprintf(timeout, sizeof(timeout), "%lld", (long long)(left < 1 ? 1 : left));
        }
        nghttp2_nv nv[] = {
                NV(":method", "POST"),
                NV(":scheme", cli->ctx ? "https" : "http"),
                NV(":authority", cli->authority),
                NV(":path", s->path),
                NV("content-type", s->unary ? SP_RPC_CONTENT_TYPE_JSON : SP_RPC_CONTENT_TYPE_STREAM),
                NV(SP_RPC_TIMEOUT_HEADER, timeout),
        };
        nghttp2_data_provider prd = sp__rpc_outq_provider(&s->out);
        size_t nnv = SP_ARRAY_SIZE(nv) - (s->deadline_us ? 0 : 1);
        int32_t id = nghttp2_submit_request(s->conn->h2.session, NULL, nv, nnv, &prd, s);
        if (id < 0) {
                stream_done(s, NULL, SP_E_UNAVAILABLE, "cannot start a stream: %s", nghttp2_strerror(id));
                s->conn = NULL;
                return;
        }
        s->stream_id = id;
}

static int conn_ready(cli_conn *c, sp_error **err)
{
        sp_rpc_client *cli = c->cli;
        SSL *ssl = cli->ctx ? bufferevent_openssl_get_ssl(c->h2.bev) : NULL;
        if (ssl) {
                const unsigned char *alpn = NULL;
                unsigned alpn_len = 0;
                SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
                if (alpn_len && !(alpn_len == 2 && memcmp(alpn, "h2", 2) == 0))
                        return sp_error_set(err, SP_E_UNAVAILABLE, "server did not negotiate h2");
                if (cli->verify_fn && cli->verify_fn(ssl, cli->verify_ud, err) < 0)
                        return sp_error_wrap(err, "server rejected");
        }
        nghttp2_session_callbacks *cbs = NULL;
        if (nghttp2_session_callbacks_new(&cbs) != 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        set_callbacks(cbs);
        nghttp2_option *opt = sp__rpc_h2_options(false);
        int rv = opt ? nghttp2_session_client_new2(&c->h2.session, cbs, &c->h2, opt) : NGHTTP2_ERR_NOMEM;
        nghttp2_option_del(opt);
        nghttp2_session_callbacks_del(cbs);
        if (rv != 0)
                return sp_error_set(err, SP_E_LIMIT, "HTTP/2 session: %s", nghttp2_strerror(rv));
        if (sp__rpc_h2_start(&c->h2, false, err) < 0)
                return -SP_E_INTERNAL;
        bufferevent_set_timeouts(c->h2.bev, NULL, NULL);
        c->state = CONN_READY;
        for (sp_rpc_stream *s = cli->streams; s; s = s->next)
                if (s->conn == c && s->stream_id == 0 && !s->ended && !s->done)
                        stream_submit(s);
        return 0;
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
        cli_conn *c = arg;
        if (!c->h2.session)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (sp__rpc_h2_recv(&c->h2, &e) < 0) {
                sp_log_debug("rpc client: %s", e->message);
                sp__rpc_h2_send(&c->h2, NULL);
                conn_free(c, e->message);
                return;
        }
        conn_flush(c);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
        conn_flush(arg);
}

static void conn_event_cb(struct bufferevent *bev, short events, void *arg)
{
        cli_conn *c = arg;
        if (c->in_connect) {
                c->early_events |= events;
                return;
        }
        if (events & BEV_EVENT_CONNECTED) {
                evutil_make_socket_closeonexec(bufferevent_getfd(bev));
                int one = 1;
                if (!c->cli->addr.is_unix)
                        (void)setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                _cleanup_error_ sp_error *e = NULL;
                if (conn_ready(c, &e) < 0) {
                        sp_log_debug("rpc client: %s", e->message);
                        conn_free(c, e->message);
                        return;
                }
                conn_read_cb(bev, c);
                return;
        }
        if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
                char why[512];
                unsigned long ssl_err = c->cli->ctx ? bufferevent_get_openssl_error(bev) : 0;
                if (events & BEV_EVENT_TIMEOUT)
                        snprintf(why, sizeof(why), "connection to %s timed out", c->cli->authority);
                else if (ssl_err)
                        snprintf(why, sizeof(why), "TLS with %s: %s", c->cli->authority,
                                 ERR_reason_error_string(ssl_err) ? ERR_reason_error_string(ssl_err) : "error");
                else if (c->state == CONN_CONNECTING)
                        snprintf(why, sizeof(why), "cannot connect to %s: %s", c->cli->authority,
                                 evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
                else
                        snprintf(why, sizeof(why), "connection to %s lost", c->cli->authority);
                sp_log_debug("rpc client: %s", why);
                conn_free(c, why);
        }
}

static cli_conn *conn_new(sp_rpc_client *cli)
{
        cli_conn *c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->cli = cli;
        c->h2.kick = cli->kick;
        c->next = cli->conns;
        if (cli->conns)
                cli->conns->prev = c;
        cli->conns = c;
        cli->stats.connects++;
        if (cli->ctx) {
                SSL *ssl = SSL_new(cli->ctx);
                if (ssl) {
                        SSL_set_alpn_protos(ssl, (const unsigned char *)"\x02h2", 3);
                        const char *sni = cli->sni ? cli->sni
                                                   : (!cli->addr.numeric && !cli->addr.is_unix ? cli->addr.host : NULL);
                        if (sni)
                                SSL_set_tlsext_host_name(ssl, sni);
                        c->h2.bev = bufferevent_openssl_socket_new(cli->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                                   BEV_OPT_CLOSE_ON_FREE);
                        /* On failure libevent may have freed ssl (out of memory only). */
                        if (c->h2.bev)
                                bufferevent_openssl_set_allow_dirty_shutdown(c->h2.bev, 1);
                }
        } else {
                c->h2.bev = bufferevent_socket_new(cli->base, -1, BEV_OPT_CLOSE_ON_FREE);
        }
        if (!c->h2.bev) {
                c->failed = true;
                client_kick(cli);
                return c;
        }
        bufferevent_setcb(c->h2.bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
        bufferevent_setwatermark(c->h2.bev, EV_WRITE, SP__RPC_OUTPUT_LIMIT / 2, 0);
        struct timeval tv = {SP_RPC_HANDSHAKE_TIMEOUT_MS / 1000, 0};
        bufferevent_set_timeouts(c->h2.bev, &tv, &tv);
        bufferevent_enable(c->h2.bev, EV_READ | EV_WRITE);
        int r;
        c->in_connect = true;
        if (cli->addr.numeric || cli->addr.is_unix)
                r = bufferevent_socket_connect(c->h2.bev, (struct sockaddr *)&cli->addr.ss, cli->addr.sslen);
        else
                r = bufferevent_socket_connect_hostname(c->h2.bev, NULL, AF_UNSPEC, cli->addr.host, cli->addr.port);
        c->in_connect = false;
        if (c->early_events)
                client_kick(cli); /* handled by the deferred work (kick_cb) */
        /* libevent makes the socket without close-on-exec: no child (a sandbox
         * above all) may inherit a connection. A name being resolved gets its
         * socket later, and the flag when it connects (conn_event_cb). */
        if (bufferevent_getfd(c->h2.bev) >= 0)
                evutil_make_socket_closeonexec(bufferevent_getfd(c->h2.bev));
        if (r < 0) {
                c->failed = true;
                client_kick(cli);
        }
        return c;
}

/* The connection that takes new calls, opened if needed. */
static cli_conn *client_conn(sp_rpc_client *cli)
{
        if (cli->current && cli->current->state != CONN_DRAINING && !cli->current->failed)
                return cli->current;
        cli->current = conn_new(cli);
        return cli->current;
}

/* ---- nghttp2 callbacks ----------------------------------------------------------- */

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_RESPONSE)
                return 0;
        sp_rpc_stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!s)
                return 0;
        s->header_bytes += namelen + valuelen + 32;
        if (s->header_bytes > SP_RPC_MAX_HEADER_BYTES)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        if (namelen == 7 && memcmp(name, ":status", 7) == 0 && valuelen == 3) {
                s->status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
        } else if (namelen == 12 && memcmp(name, "content-type", 12) == 0) {
                size_t l = strlen(SP_RPC_CONTENT_TYPE_STREAM);
                s->ct_stream = valuelen >= l && strncasecmp((const char *)value, SP_RPC_CONTENT_TYPE_STREAM, l) == 0 &&
                               (valuelen == l || value[l] == ';' || value[l] == ' ');
        }
        return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
        cli_conn *c = user_data;
        if (frame->hd.type == NGHTTP2_GOAWAY) {
                c->state = CONN_DRAINING;
                if (c->cli->current == c)
                        c->cli->current = NULL;
                return 0;
        }
        if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
                return 0;
        sp_rpc_stream *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!s)
                return 0;
        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_RESPONSE)
                s->headers_seen = true;
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
                s->remote_ended = true;
                s->in.eof = true;
        }
        client_kick(c->cli);
        return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                         void *user_data)
{
        cli_conn *c = user_data;
        sp_rpc_stream *s = nghttp2_session_get_stream_user_data(session, stream_id);
        if (!s || s->done || s->ended) {
                nghttp2_session_consume(session, stream_id, len);
                return 0;
        }
        if (!s->unary && s->status == 200 && s->ct_stream) {
                /* Frames open the stream's window only once delivered. */
                if (sp__rpc_inq_receive(&s->in, session, data, len) < 0)
                        return NGHTTP2_ERR_CALLBACK_FAILURE;
        } else {
                nghttp2_session_consume(session, stream_id, len);
                if (sp_buf_append(&s->body, data, len, NULL) < 0) {
                        stream_done(s, NULL, SP_E_TOO_LARGE, "response body exceeds %u bytes", SP_RPC_MAX_BODY);
                        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, stream_id, NGHTTP2_CANCEL);
                }
        }
        client_kick(c->cli);
        return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data)
{
        cli_conn *c = user_data;
        sp_rpc_stream *s = nghttp2_session_get_stream_user_data(session, stream_id);
        if (!s)
                return 0;
        s->h2_closed = true;
        s->h2_error = error_code;
        client_kick(c->cli);
        return 0;
}

static void set_callbacks(nghttp2_session_callbacks *cbs)
{
        sp__rpc_h2_set_io_callbacks(cbs);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
}

/* ---- deferred work ---------------------------------------------------------------- */

static bool deliver_frame(void *userdata, const sp_rpc_frame *f)
{
        sp_rpc_stream *s = userdata;
        if (s->done || s->ended)
                return false;
        if (f->type == SP_RPC_FRAME_END) {
                json_object *trailer = NULL;
                sp_error *e = NULL;
                if (sp_rpc_trailer_parse(f->payload, f->len, &trailer, &e) == 0) {
                        stream_done(s, trailer, SP_OK, "ok");
                } else {
                        stream_done(s, NULL, e->code, "%s", e->message);
                        sp_error_free(e);
                }
                return false;
        }
        if (s->ops.on_frame)
                s->ops.on_frame(s, f->type, f->payload, f->len, s->ud);
        return !s->done && !s->ended;
}

/* Works out what a finished non-stream response means. */
static void stream_plain_outcome(sp_rpc_stream *s)
{
        if (s->status == 200 && s->unary) {
                json_object *resp = NULL;
                sp_error *e = NULL;
                if (sp_json_parse(s->body.data, s->body.len, &resp, &e) == 0)
                        stream_done(s, resp, SP_OK, "ok");
                else
                        stream_done(s, NULL, SP_E_INVALID, "bad response: %s", e->message);
                sp_error_free(e);
                return;
        }
        if (s->status == 200) {
                stream_done(s, NULL, SP_E_INVALID, "streaming response without content-type %s",
                            SP_RPC_CONTENT_TYPE_STREAM);
                return;
        }
        sp_error *e = NULL;
        sp_error_from_answer(s->body.data, s->body.len, s->status, &e);
        stream_done(s, NULL, e->code, "%s", e->message);
        sp_error_free(e);
}

static void stream_process(sp_rpc_stream *s)
{
        if (!s->done && !s->ended) {
                bool framed = !s->unary && s->status == 200 && s->ct_stream;
                if (framed) {
                        _cleanup_error_ sp_error *e = NULL;
                        int r = sp__rpc_inq_deliver(&s->in, stream_session(s), s->stream_id, deliver_frame, s, &e);
                        if (r < 0)
                                stream_done(s, NULL, e->code, "bad frame from the server: %s", e->message);
                        else if (r == 0 && !s->done && !s->ended && s->in.eof)
                                stream_done(s, NULL, SP_E_UNAVAILABLE, "the stream ended without a trailer");
                } else if (s->remote_ended) {
                        stream_plain_outcome(s);
                }
                if (!s->done && !s->ended && s->h2_closed && !s->remote_ended)
                        stream_done(s, NULL, SP_E_UNAVAILABLE, "stream reset by the server (%s)",
                                    nghttp2_http2_strerror(s->h2_error));
                if (!s->done && !s->ended && s->out.writable_due) {
                        s->out.writable_due = false;
                        if (s->ops.on_writable)
                                s->ops.on_writable(s, s->ud);
                }
        }
        if (s->done && !s->ended)
                stream_fire_end(s);
        if (s->ended && stream_detached(s))
                stream_finish(s);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
        sp_rpc_client *cli = arg;
        for (cli_conn *c = cli->conns, *next; c; c = next) {
                next = c->next;
                if (c->early_events) {
                        short ev = c->early_events;
                        c->early_events = 0;
                        conn_event_cb(c->h2.bev, ev, c); /* may free c (it says why) */
                } else if (c->failed) {
                        conn_free(c, "cannot connect");
                }
        }
        for (sp_rpc_stream *s = cli->streams, *next; s; s = next) {
                stream_ref(s);
                stream_process(s);
                next = s->next;
                stream_unref(s);
        }
        for (cli_conn *c = cli->conns, *next; c; c = next) {
                next = c->next;
                conn_flush(c);
        }
}

/* ---- client API --------------------------------------------------------------------- */

sp_rpc_client *sp_rpc_client_new(struct event_base *base, const char *addr, SSL_CTX *ctx, sp_error **err)
{
        if (!base) {
                sp_error_set(err, SP_E_INVALID, "no event base");
                return NULL;
        }
        sp_rpc_client *cli = calloc(1, sizeof(*cli));
        if (!cli) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        if (sp__rpc_addr_parse(addr, &cli->addr, err) < 0) {
                free(cli);
                return NULL;
        }
        if (cli->addr.is_unix)
                snprintf(cli->authority, sizeof(cli->authority), "localhost");
        else if (strchr(cli->addr.host, ':'))
                snprintf(cli->authority, sizeof(cli->authority), "[%s]:%d", cli->addr.host, cli->addr.port);
        else
                snprintf(cli->authority, sizeof(cli->authority), "%s:%d", cli->addr.host, cli->addr.port);
        sp__rpc_ignore_sigpipe();
        cli->base = base;
        cli->kick = event_new(base, -1, 0, kick_cb, cli);
        if (!cli->kick) {
                free(cli);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        if (ctx) {
                SSL_CTX_up_ref(ctx);
                cli->ctx = ctx;
        }
        return cli;
}

void sp_rpc_client_free(sp_rpc_client *cli)
{
        if (!cli)
                return;
        cli->freeing = true;
        while (cli->conns)
                conn_free(cli->conns, "client closed");
        while (cli->streams) {
                sp_rpc_stream *s = cli->streams;
                stream_done(s, NULL, SP_E_UNAVAILABLE, "client closed");
                stream_fire_end(s);
                stream_finish(s);
        }
        event_free(cli->kick);
        if (cli->ctx)
                SSL_CTX_free(cli->ctx);
        if (cli->verify_free)
                cli->verify_free(cli->verify_ud);
        free(cli->sni);
        free(cli);
}

void sp_rpc_client_set_verify_fn(sp_rpc_client *cli, sp_rpc_verify_fn fn, void *userdata)
{
        sp_rpc_client_set_verify_fn_owned(cli, fn, userdata, NULL);
}

void sp_rpc_client_set_verify_fn_owned(sp_rpc_client *cli, sp_rpc_verify_fn fn, void *userdata, void (*free_fn)(void *))
{
        if (cli->verify_free)
                cli->verify_free(cli->verify_ud);
        cli->verify_fn = fn;
        cli->verify_ud = userdata;
        cli->verify_free = free_fn;
}

int sp_rpc_client_set_server_name(sp_rpc_client *cli, const char *name, sp_error **err)
{
        char *n = name ? strdup(name) : NULL;
        if (name && !n)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        free(cli->sni);
        cli->sni = n;
        return 0;
}

static sp_rpc_stream *stream_new(sp_rpc_client *cli, const char *method, int64_t timeout_ms, bool unary, sp_error **err)
{
        if (!method || !sp__rpc_method_name_valid(method, strlen(method))) {
                sp_error_set(err, SP_E_INVALID, "bad method name '%s'", method ? method : "");
                return NULL;
        }
        if (timeout_ms < 0 || timeout_ms > SP_RPC_MAX_TIMEOUT_MS) {
                sp_error_set(err, SP_E_INVALID, "timeout out of range");
                return NULL;
        }
        if (cli->freeing) {
                sp_error_set(err, SP_E_UNAVAILABLE, "the client is closing");
                return NULL;
        }
        if (cli->stats.calls_open >= SP_RPC_MAX_CLIENT_CALLS) {
                sp_error_set(err, SP_E_LIMIT, "too many calls in progress");
                return NULL;
        }
        sp_rpc_stream *s = calloc(1, sizeof(*s));
        if (!s || sp__rpc_outq_init(&s->out) < 0 || sp__rpc_inq_init(&s->in) < 0) {
                if (s) {
                        sp__rpc_outq_free(&s->out);
                        sp__rpc_inq_free(&s->in);
                }
                free(s);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        s->refs = 1;
        s->cli = cli;
        s->unary = unary;
        s->body.limit = SP_RPC_MAX_BODY;
        snprintf(s->path, sizeof(s->path), "%s%s", SP_RPC_PATH_PREFIX, method);
        if (timeout_ms > 0) {
                s->deadline_us = sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
                s->timer = evtimer_new(cli->base, timer_cb, s);
                struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
                if (!s->timer || evtimer_add(s->timer, &tv) < 0) {
                        if (s->timer)
                                event_free(s->timer);
                        sp__rpc_outq_free(&s->out);
                        sp__rpc_inq_free(&s->in);
                        free(s);
                        sp_error_set(err, SP_E_LIMIT, "out of memory");
                        return NULL;
                }
        }
        return s;
}

/* Links a new stream and hands it to a connection. */
static void stream_start(sp_rpc_client *cli, sp_rpc_stream *s)
{
        s->next = cli->streams;
        if (cli->streams)
                cli->streams->prev = s;
        cli->streams = s;
        cli->stats.calls_open++;
        cli_conn *c = client_conn(cli);
        if (!c) {
                stream_done(s, NULL, SP_E_LIMIT, "out of memory");
                return;
        }
        s->conn = c;
        if (c->state == CONN_READY)
                stream_submit(s);
        client_kick(cli);
}

static void stream_discard(sp_rpc_stream *s)
{
        if (s->timer)
                event_free(s->timer);
        sp__rpc_outq_free(&s->out);
        sp__rpc_inq_free(&s->in);
        free(s);
}

int sp_rpc_client_call(sp_rpc_client *cli, const char *method, json_object *req, int64_t timeout_ms, sp_rpc_unary_cb cb,
                       void *userdata, sp_error **err)
{
        sp_rpc_stream *s = stream_new(cli, method, timeout_ms, true, err);
        if (!s)
                return -SP_E_INVALID;
        const char *body = req ? sp_json_str(req) : "{}";
        size_t n = strlen(body);
        if (n > SP_RPC_MAX_BODY) {
                stream_discard(s);
                return sp_error_set(err, SP_E_TOO_LARGE, "request body exceeds %u bytes", SP_RPC_MAX_BODY);
        }
        if (evbuffer_add(s->out.buf, body, n) < 0) {
                stream_discard(s);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        s->out.eof = true;
        s->send_closed = true;
        s->unary_cb = cb;
        s->ud = userdata;
        stream_start(cli, s);
        return 0;
}

sp_rpc_stream *sp_rpc_client_stream(sp_rpc_client *cli, const char *method, json_object *req, int64_t timeout_ms,
                                    const sp_rpc_stream_ops *ops, void *userdata, sp_error **err)
{
        sp_rpc_stream *s = stream_new(cli, method, timeout_ms, false, err);
        if (!s)
                return NULL;
        const char *body = req ? sp_json_str(req) : "{}";
        if (sp__rpc_outq_frame(&s->out, SP_RPC_FRAME_JSON, body, strlen(body), err) < 0) {
                stream_discard(s);
                return NULL;
        }
        s->out.blocked = false;
        if (ops)
                s->ops = *ops;
        s->ud = userdata;
        stream_start(cli, s);
        return s;
}

int sp_rpc_stream_send(sp_rpc_stream *s, sp_rpc_frame_type type, const void *payload, size_t n, sp_error **err)
{
        if (s->done || s->ended)
                return sp_error_set(err, SP_E_UNAVAILABLE, "the stream has ended");
        if (s->send_closed)
                return sp_error_set(err, SP_E_INVALID, "the sending side is closed");
        int r = sp__rpc_outq_frame(&s->out, type, payload, n, err);
        if (r >= 0) {
                sp__rpc_outq_wake(&s->out, stream_session(s), s->stream_id);
                client_kick(s->cli);
        }
        return r;
}

int sp_rpc_stream_send_json(sp_rpc_stream *s, json_object *msg, sp_error **err)
{
        const char *str = msg ? sp_json_str(msg) : "null";
        return sp_rpc_stream_send(s, SP_RPC_FRAME_JSON, str, strlen(str), err);
}

int sp_rpc_stream_close_send(sp_rpc_stream *s, sp_error **err)
{
        if (s->done || s->ended)
                return sp_error_set(err, SP_E_UNAVAILABLE, "the stream has ended");
        if (s->send_closed)
                return 0;
        s->send_closed = true;
        s->out.eof = true;
        sp__rpc_outq_wake(&s->out, stream_session(s), s->stream_id);
        client_kick(s->cli);
        return 0;
}

void sp_rpc_stream_cancel(sp_rpc_stream *s)
{
        if (!s || s->ended)
                return;
        s->ended = true;
        if (s->timer)
                evtimer_del(s->timer);
        stream_reset(s);
}

void sp_rpc_stream_pause(sp_rpc_stream *s)
{
        s->in.paused = true;
}

void sp_rpc_stream_resume(sp_rpc_stream *s)
{
        if (!s->in.paused)
                return;
        s->in.paused = false;
        client_kick(s->cli);
}

size_t sp_rpc_stream_queued(const sp_rpc_stream *s)
{
        return s->out.buf ? evbuffer_get_length(s->out.buf) : 0;
}

size_t sp_rpc_stream_buffered(const sp_rpc_stream *s)
{
        return (s->in.buf ? evbuffer_get_length(s->in.buf) : 0) + s->in.dec.payload.len;
}

void sp_rpc_client_get_stats(const sp_rpc_client *cli, sp_rpc_client_stats *ret)
{
        *ret = cli->stats;
}

bool sp_rpc_client_connected(const sp_rpc_client *cli)
{
        return cli->current && cli->current->state == CONN_READY && !cli->current->failed;
}

/* ---- blocking call ------------------------------------------------------------------ */

typedef struct sync_state {
        bool done;
        json_object *resp;
        sp_error *err;
} sync_state;

static void sync_cb(json_object *resp, const sp_error *err, void *userdata)
{
        sync_state *st = userdata;
        st->done = true;
        if (resp)
                st->resp = json_object_get(resp);
        if (err)
                sp_error_set(&st->err, err->code, "%s", err->message);
}

int sp_rpc_call_sync(const char *addr, SSL_CTX *ctx, const char *method, json_object *req, int64_t timeout_ms,
                     json_object **ret_resp, sp_error **err)
{
        if (timeout_ms <= 0 || timeout_ms > SP_RPC_MAX_TIMEOUT_MS)
                return sp_error_set(err, SP_E_INVALID, "sp_rpc_call_sync needs a timeout");
        struct event_base *base = event_base_new();
        if (!base)
                return sp_error_set(err, SP_E_LIMIT, "cannot create an event base");
        sync_state st = {0};
        int r = 0;
        sp_rpc_client *cli = sp_rpc_client_new(base, addr, ctx, err);
        if (!cli) {
                r = -SP_E_INVALID;
                goto out_base;
        }
        r = sp_rpc_client_call(cli, method, req, timeout_ms, sync_cb, &st, err);
        if (r < 0)
                goto out_client;
        /* The call's own deadline ends the loop at the latest. */
        while (!st.done && event_base_loop(base, EVLOOP_ONCE) == 0)
                ;
        if (!st.done)
                r = sp_error_set(err, SP_E_INTERNAL, "event loop stopped");
        else if (st.err)
                r = sp_error_set(err, st.err->code, "%s: %s", method, st.err->message);
        else
                *ret_resp = TAKE_PTR(st.resp);
out_client:
        sp_rpc_client_free(cli);
out_base:
        json_object_put(st.resp);
        sp_error_free(st.err);
        event_base_free(base);
        return r;
}
