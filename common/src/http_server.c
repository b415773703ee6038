/* SPDX-License-Identifier: Apache-2.0 */
/* The server: listeners, connections, timers and the read loop that feeds
 * the parser and dispatches requests to their routes; upgraded connections
 * are handed to http_raw.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "http_internal.h"
#include "space/cleanup.h"
#include "space/log.h"
#include "space/time.h"

/* ---- configuration ---- */

static void config_defaults(sp_http_config *c)
{
        sp_http_limits *l = &c->limits;
        if (!l->max_head_bytes)
                l->max_head_bytes = SP_HTTP_DEFAULT_MAX_HEAD_BYTES;
        if (!l->max_headers)
                l->max_headers = SP_HTTP_DEFAULT_MAX_HEADERS;
        if (!l->max_uri)
                l->max_uri = SP_HTTP_DEFAULT_MAX_URI;
        if (!l->max_body)
                l->max_body = SP_HTTP_DEFAULT_MAX_BODY;
        if (!l->max_chunk_line)
                l->max_chunk_line = SP_HTTP_DEFAULT_MAX_CHUNK_LINE;
        if (!l->max_query_params)
                l->max_query_params = SP_HTTP_DEFAULT_MAX_QUERY_PARAMS;
        if (!c->max_connections)
                c->max_connections = 10000;
        if (!c->header_timeout_ms)
                c->header_timeout_ms = 10000;
        if (!c->body_timeout_ms)
                c->body_timeout_ms = 30000;
        if (!c->keepalive_timeout_ms)
                c->keepalive_timeout_ms = 60000;
        if (!c->write_timeout_ms)
                c->write_timeout_ms = 60000;
        if (!c->linger_ms)
                c->linger_ms = 2000;
        if (!c->high_watermark)
                c->high_watermark = 256 * 1024;
        if (!c->low_watermark)
                c->low_watermark = 64 * 1024;
        if (!c->raw_idle_timeout_ms)
                c->raw_idle_timeout_ms = 3600 * 1000;
}

static struct timeval ms_tv(unsigned ms)
{
        return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
}

/* ---- connections ---- */

static void conn_process(sp__http_conn *c);

static void conn_free(sp__http_conn *c)
{
        sp_http_server *srv = c->srv;
        c->dead = true;
        c->busy++; /* the close callback must not free us twice */
        sp_http_request *req = TAKE_PTR(c->req);
        if (req) {
                sp__http_request_detach(req);
                sp__http_request_release(req);
        }
        event_free(c->timer);
        event_free(c->kick);
        if (c->shut_retry)
                event_free(c->shut_retry);
        bufferevent_free(c->bev);
        if (c->prev)
                c->prev->next = c->next;
        else
                srv->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        srv->nconns--;
        free(c);
}

static void conn_enter(sp__http_conn *c)
{
        c->busy++;
}

static void conn_leave(sp__http_conn *c)
{
        if (--c->busy == 0 && c->dead)
                conn_free(c);
}

void sp__http_conn_kick(sp__http_conn *c)
{
        event_active(c->kick, EV_TIMEOUT, 1);
}

void sp__http_conn_api_enter(sp__http_conn *c)
{
        c->busy++;
        c->in_api++;
}

void sp__http_conn_api_leave(sp__http_conn *c)
{
        c->in_api--;
        if (--c->busy == 0 && c->dead)
                sp__http_conn_kick(c); /* freed from the loop, not inside the caller's call */
}

void sp__http_conn_abort(sp__http_conn *c)
{
        c->dead = true;
        if (c->busy == 0)
                sp__http_conn_kick(c);
}

struct evbuffer *sp__http_conn_output(sp__http_conn *c)
{
        return bufferevent_get_output(c->bev);
}

static void timer_set(sp__http_conn *c, sp__http_timer kind, unsigned ms)
{
        struct timeval tv = ms_tv(ms);
        c->timer_kind = kind;
        evtimer_add(c->timer, &tv);
}

void sp__http_conn_timer_stop(sp__http_conn *c)
{
        c->timer_kind = SP__TIMER_NONE;
        evtimer_del(c->timer);
}

void sp__http_conn_raw_activity(sp__http_conn *c)
{
        c->raw_active_us = sp_now_mono_us();
}

void sp__http_conn_raw_start(sp__http_conn *c)
{
        c->state = SP__CONN_RAW;
        sp__http_conn_timer_stop(c);
        /* Input is handed out as it arrives, and a pause stops reading
         * outright, so no read watermark: one that suspends a TLS
         * bufferevent mid-read leaves decrypted bytes inside OpenSSL that
         * no socket event would fetch. */
        bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
        sp__http_conn_raw_activity(c);
        if (c->srv->cfg.raw_idle_timeout_ms != SP_HTTP_NO_TIMEOUT)
                timer_set(c, SP__TIMER_RAW, c->srv->cfg.raw_idle_timeout_ms);
        sp__http_conn_kick(c); /* the bytes that followed the request, and its EOF */
}

/* The raw idle timer fired: close if nothing went either way meanwhile. The
 * clock is read here rather than the timer re-armed on every byte. */
static void raw_idle_check(sp__http_conn *c)
{
        unsigned idle = c->srv->cfg.raw_idle_timeout_ms;
        int64_t quiet_ms = (sp_now_mono_us() - c->raw_active_us) / SP_USEC_PER_MSEC;
        if (quiet_ms >= (int64_t)idle) {
                sp_log_debug_kv(SP_KV("remote", c->remote), "http: upgraded connection idle for %u ms, closing", idle);
                c->dead = true;
                return;
        }
        timer_set(c, SP__TIMER_RAW, idle - (unsigned)quiet_ms);
}

void sp__http_conn_body_progress(sp__http_conn *c)
{
        if (c->state == SP__CONN_ACTIVE && c->req && !c->req->body_done && !c->req->paused)
                timer_set(c, SP__TIMER_BODY, c->srv->cfg.body_timeout_ms);
}

/* Output is flushed: half-close and drop input for a while, so that the
 * client reads the final response instead of a reset. */
static void conn_linger(sp__http_conn *c)
{
        if (c->tls) {
                sp__http_conn_abort(c);
                return;
        }
        c->state = SP__CONN_LINGER;
        shutdown(bufferevent_getfd(c->bev), SHUT_WR);
        struct evbuffer *in = bufferevent_get_input(c->bev);
        evbuffer_drain(in, evbuffer_get_length(in));
        bufferevent_enable(c->bev, EV_READ);
        timer_set(c, SP__TIMER_LINGER, c->srv->cfg.linger_ms);
}

/* Closes after flushing what is queued. */
static void conn_close(sp__http_conn *c)
{
        if (c->state != SP__CONN_ACTIVE)
                return;
        c->state = SP__CONN_CLOSING;
        sp__http_conn_timer_stop(c);
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
                conn_linger(c);
}

void sp__http_conn_response_done(sp__http_conn *c)
{
        sp_http_request *req = c->req;
        if (!req->keep_alive || c->peer_eof) {
                conn_close(c);
                return;
        }
        c->req = NULL;
        sp__http_request_release(req);
        timer_set(c, SP__TIMER_KEEPALIVE, c->srv->cfg.keepalive_timeout_ms);
        sp__http_conn_kick(c);
}

/* If nobody can answer req any more, answer 500 for the handler. */
static void check_answered(sp_http_request *req)
{
        if (req->resp == SP__RESP_NONE && req->conn && sp__http_request_unowned(req) &&
            !(req->on_body && !req->body_done))
                sp__http_reply_status_error(req, 500, SP_E_INTERNAL, "the handler did not answer", NULL, false);
}

static void call_handler(sp__http_conn *c, sp_http_request *req)
{
        sp__http_conn_timer_stop(c);
        req->handler_called = true;
        sp__http_request_hold(req);
        req->handler(req, req->handler_ud);
        check_answered(req);
        sp__http_request_release(req);
}

static void reply_parse_error(sp__http_conn *c, sp_http_request *req)
{
        sp_errc code = SP_E_INVALID;
        const char *msg = "bad request";
        int status = sp_http_parser_error(req->parser, &code, &msg);
        sp_log_debug_kv(SP_KV("remote", c->remote), "http: rejecting request: %d %s", status, msg);
        sp__http_request_hold(req);
        if (req->resp != SP__RESP_NONE) {
                sp__http_conn_abort(c);
        } else {
                /* A streaming handler waiting for the body learns that it will not come. */
                sp_http_close_cb cb = req->handler_called ? req->on_close : NULL;
                req->on_close = NULL;
                sp__http_reply_status_error(req, status, code, msg, NULL, true);
                if (cb)
                        cb(req, req->on_close_ud);
        }
        sp__http_request_release(req);
}

/* Answers a request whose client stopped sending before its end (400, then
 * close); a streaming handler waiting for the body learns that it will not come. */
static void reply_truncated(sp__http_conn *c, sp_http_request *req)
{
        sp_http_parser *p = req->parser;
        char msg[160];
        if (!req->head_done)
                snprintf(msg, sizeof(msg), "request truncated: the connection ended inside the request head");
        else if (sp_http_parser_chunked(p))
                snprintf(msg, sizeof(msg),
                         "request body truncated: the connection ended after %llu bytes of a chunked body",
                         (unsigned long long)sp_http_parser_body_received(p));
        else
                snprintf(msg, sizeof(msg),
                         "request body truncated: the connection ended after %llu of %lld bytes (Content-Length)",
                         (unsigned long long)sp_http_parser_body_received(p),
                         (long long)sp_http_parser_content_length(p));
        sp_log_debug_kv(SP_KV("remote", c->remote), "http: %s", msg);
        sp__http_request_hold(req);
        sp_http_close_cb cb = req->handler_called ? req->on_close : NULL;
        req->on_close = NULL;
        sp__http_reply_status_error(req, 400, SP_E_INVALID, msg, NULL, true);
        if (cb)
                cb(req, req->on_close_ud);
        sp__http_request_release(req);
}

static void on_head(sp__http_conn *c, sp_http_request *req)
{
        sp_http_parser *p = req->parser;
        req->head_done = true;
        req->is_head = strcmp(sp_http_parser_method(p), "HEAD") == 0;
        bool has_body = sp_http_parser_chunked(p) || sp_http_parser_content_length(p) > 0;

        int status = 0;
        _cleanup_buf_ sp_buf allow = {.limit = 1024};
        const sp__http_route *route = sp__http_route_match(c->srv, req, &status, &allow);
        if (!route) {
                sp__http_request_hold(req);
                if (status == 405)
                        sp__http_reply_status_error(req, 405, SP_E_METHOD, "method not allowed for this path",
                                                    allow.data, false);
                else
                        sp__http_reply_status_error(req, 404, SP_E_NOT_FOUND, "no route matches the path", NULL, false);
                sp__http_request_release(req);
                return;
        }
        req->streamed = route->flags & SP_HTTP_ROUTE_STREAM_BODY;
        req->handler = route->handler;
        req->handler_ud = route->userdata;
        if (sp_http_parser_set_max_body(p, route->max_body) < 0) {
                reply_parse_error(c, req);
                return;
        }
        req->body.limit = route->max_body < SIZE_MAX ? (size_t)route->max_body : 0;

        if (!has_body) {
                size_t used;
                const char *body;
                size_t blen;
                if (sp_http_parser_feed(p, NULL, 0, &used, &body, &blen) == SP_HTTP_PARSE_DONE)
                        req->body_done = true;
        }
        if (req->streamed || req->body_done) {
                call_handler(c, req);
                return;
        }
        sp__http_send_continue(req);
        sp__http_conn_body_progress(c);
}

static void on_body(sp__http_conn *c, sp_http_request *req, const char *data, size_t len)
{
        if (!req->streamed) {
                /* The parser enforces the limit; the buffer's limit is a second guard. */
                if (sp_buf_append(&req->body, data, len, NULL) < 0)
                        sp__http_conn_abort(c);
        } else if (req->on_body) {
                req->on_body(req, data, len, req->on_body_ud);
        }
        sp__http_conn_body_progress(c);
}

static void on_done(sp__http_conn *c, sp_http_request *req)
{
        req->body_done = true;
        sp__http_conn_timer_stop(c);
        if (!req->streamed) {
                call_handler(c, req);
                return;
        }
        if (req->on_body) {
                req->end_told = true;
                req->on_body(req, NULL, 0, req->on_body_ud);
        }
        check_answered(req);
}

/* Whether the current request waits for something else than input. */
static bool waiting(const sp_http_request *req)
{
        if (req->body_done)
                return true; /* for the response */
        if (req->streamed && req->handler_called && (!req->on_body || req->paused))
                return true; /* for the handler to read (on) */
        return false;
}

static void conn_process(sp__http_conn *c)
{
        struct evbuffer *in = bufferevent_get_input(c->bev);
        unsigned started = 0;
        while (!c->dead && c->state == SP__CONN_ACTIVE) {
                if (!c->req) {
                        if (evbuffer_get_length(in) == 0)
                                return;
                        if (started++ == SP_HTTP_REQUESTS_PER_WAKEUP) {
                                sp__http_conn_kick(c); /* let other connections run */
                                return;
                        }
                        c->req = sp__http_request_new(c);
                        timer_set(c, SP__TIMER_HEAD, c->srv->cfg.header_timeout_ms);
                }
                sp_http_request *req = c->req;
                if (waiting(req))
                        return;

                struct evbuffer_iovec v = {0};
                if (evbuffer_get_length(in) > 0)
                        evbuffer_peek(in, -1, NULL, &v, 1);
                size_t used = 0, blen = 0;
                const char *body = NULL;
                sp_http_parse_event ev = sp_http_parser_feed(req->parser, v.iov_base, v.iov_len, &used, &body, &blen);
                sp__http_request_hold(req);
                switch (ev) {
                case SP_HTTP_PARSE_AGAIN:
                        evbuffer_drain(in, used);
                        if (evbuffer_get_length(in) == 0) {
                                sp__http_request_release(req);
                                return;
                        }
                        break;
                case SP_HTTP_PARSE_HEAD:
                        evbuffer_drain(in, used);
                        on_head(c, req);
                        break;
                case SP_HTTP_PARSE_BODY:
                        on_body(c, req, body, blen);
                        evbuffer_drain(in, used); /* body pointed into the buffer */
                        break;
                case SP_HTTP_PARSE_DONE:
                        evbuffer_drain(in, used);
                        on_done(c, req);
                        break;
                case SP_HTTP_PARSE_ERROR:
                        reply_parse_error(c, req);
                        break;
                }
                sp__http_request_release(req);
        }
}

static void read_cb(struct bufferevent *bev, void *arg)
{
        sp__http_conn *c = arg;
        if (c->in_api) {
                sp__http_conn_kick(c); /* called back from inside an API call */
                return;
        }
        conn_enter(c);
        if (c->state == SP__CONN_LINGER) {
                struct evbuffer *in = bufferevent_get_input(bev);
                evbuffer_drain(in, evbuffer_get_length(in));
        } else if (c->state == SP__CONN_RAW) {
                sp__http_raw_input(c);
        } else {
                conn_process(c);
        }
        conn_leave(c);
}

/* Output drained: finish closing, or tell a streaming producer to go on. */
static void conn_drained(sp__http_conn *c)
{
        size_t pending = evbuffer_get_length(bufferevent_get_output(c->bev));
        if (c->state == SP__CONN_CLOSING) {
                if (pending == 0)
                        conn_linger(c);
        } else if (c->state == SP__CONN_RAW) {
                sp__http_raw_drained(c, pending);
        } else if (c->state == SP__CONN_ACTIVE && c->req && c->req->want_writable &&
                   pending <= c->srv->cfg.low_watermark) {
                sp_http_request *req = sp__http_request_hold(c->req);
                req->want_writable = false;
                if (req->on_writable)
                        req->on_writable(req, req->on_writable_ud);
                sp__http_request_release(req);
        }
}

static void write_cb(struct bufferevent *bev, void *arg)
{
        sp__http_conn *c = arg;
        if (c->in_api) {
                sp__http_conn_kick(c);
                return;
        }
        conn_enter(c);
        if (c->state == SP__CONN_RAW)
                sp__http_conn_raw_activity(c); /* the client took output */
        conn_drained(c);
        conn_leave(c);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
        sp__http_conn *c = arg;
        if (what == BEV_EVENT_CONNECTED)
                return; /* TLS handshake done */
        conn_enter(c);
        bool eof = (what & BEV_EVENT_EOF) && !(what & (BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT));
        if (eof && c->state == SP__CONN_RAW) {
                /* A half-close, told after the input still buffered (from
                 * the loop: this may run inside an API call). */
                c->peer_eof = true;
                /* A TLS bufferevent stops writing at the peer's close_notify
                 * (or its dirty end), stranding output already queued;
                 * the other direction of a half-close still flows. */
                if (c->tls && evbuffer_get_length(bufferevent_get_output(bev)) > 0)
                        bufferevent_enable(bev, EV_WRITE);
                sp__http_conn_kick(c);
        } else if (eof && c->state == SP__CONN_CLOSING) {
                /* The client is done sending; keep flushing the final response. */
                bufferevent_disable(bev, EV_READ);
        } else if (eof && c->state == SP__CONN_ACTIVE && (!c->req || sp_http_parser_bytes_seen(c->req->parser) == 0)) {
                /* Between requests: finish sending what is queued, then close. */
                bufferevent_disable(bev, EV_READ);
                conn_close(c);
        } else if (eof && c->state == SP__CONN_ACTIVE && c->req->resp == SP__RESP_NONE) {
                /* The client stopped sending before the answer started: a
                 * half-close (shutdown(SHUT_WR)) still reads the answer, and
                 * after a full close the write fails and ends the connection. */
                bufferevent_disable(bev, EV_READ);
                c->peer_eof = true;
                if (!c->req->body_done)
                        reply_truncated(c, c->req);
        } else {
                /* Gone mid-request, failed, timed out writing, or done lingering. */
                sp_log_debug_kv(SP_KV("remote", c->remote), "http: connection closed (events 0x%x)", what);
                c->dead = true;
        }
        conn_leave(c);
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
        sp__http_conn *c = arg;
        sp_http_request *req = c->req;
        conn_enter(c);
        sp__http_timer kind = c->timer_kind;
        c->timer_kind = SP__TIMER_NONE;
        bool answer = false;
        if (kind == SP__TIMER_RAW) {
                raw_idle_check(c);
                conn_leave(c);
                return;
        }
        if (kind == SP__TIMER_HEAD)
                answer = req && sp_http_parser_bytes_seen(req->parser) > 0;
        else if (kind == SP__TIMER_BODY)
                answer = req && !req->handler_called;
        if (answer && req->resp == SP__RESP_NONE) {
                sp_log_debug_kv(SP_KV("remote", c->remote), "http: request timed out");
                sp__http_request_hold(req);
                sp__http_reply_status_error(req, 408, SP_E_TIMEOUT, "timed out reading the request", NULL, true);
                sp__http_request_release(req);
        } else if (kind != SP__TIMER_NONE) {
                c->dead = true;
        }
        conn_leave(c);
}

static void kick_cb(evutil_socket_t fd, short what, void *arg)
{
        sp__http_conn *c = arg;
        conn_enter(c);
        /* A streamed body that was over before the handler read it (an empty
         * one): its end is told now, from the loop. */
        sp_http_request *req = c->req;
        if (!c->dead && req && req->streamed && req->body_done && req->on_body && !req->end_told) {
                req->end_told = true;
                req->on_body(req, NULL, 0, req->on_body_ud);
                check_answered(req);
        }
        if (!c->dead && c->state == SP__CONN_ACTIVE)
                conn_process(c);
        else if (!c->dead && c->state == SP__CONN_RAW)
                sp__http_raw_input(c);
        if (!c->dead)
                conn_drained(c);
        conn_leave(c);
}

/* ---- listeners ---- */

static void format_remote(const struct sockaddr *sa, char out[static SP_HTTP_REMOTE_MAX])
{
        char host[INET6_ADDRSTRLEN] = "?";
        if (sa->sa_family == AF_INET) {
                const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
                inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
                snprintf(out, SP_HTTP_REMOTE_MAX, "%s:%u", host, ntohs(in->sin_port));
        } else if (sa->sa_family == AF_INET6) {
                const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
                inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
                snprintf(out, SP_HTTP_REMOTE_MAX, "[%s]:%u", host, ntohs(in6->sin6_port));
        } else {
                snprintf(out, SP_HTTP_REMOTE_MAX, "unix");
        }
}

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
        sp__http_listener *l = arg;
        sp_http_server *srv = l->srv;
        if (srv->nconns >= srv->cfg.max_connections) {
                if (!l->ssl)
                        (void)!send(fd, srv->busy_reply.data, srv->busy_reply.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                sp_log_debug("http: connection limit reached, refusing a connection");
                close(fd);
                return;
        }
        if (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }

        struct bufferevent *bev;
        /* No BEV_OPT_DEFER_CALLBACKS: deferred callbacks still pending when the
         * server is freed would keep their bufferevents alive forever. The
         * in_api guard handles the callbacks OpenSSL makes synchronously. */
        int opts = BEV_OPT_CLOSE_ON_FREE;
        if (l->ssl) {
                SSL *ssl = SSL_new(l->ssl);
                if (!ssl) {
                        close(fd);
                        return;
                }
                bev = bufferevent_openssl_socket_new(srv->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, opts);
                if (!bev) {
                        SSL_free(ssl);
                        close(fd);
                        return;
                }
                bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
        } else {
                bev = bufferevent_socket_new(srv->base, fd, opts);
                if (!bev) {
                        close(fd);
                        return;
                }
        }
        /* libevent writes at most 16 KiB per call by default: a stream to a
         * client (a session's output, a download) took a writev per 16 KiB. */
        bufferevent_set_max_single_write(bev, SP_HTTP_MAX_SINGLE_WRITE);

        sp__http_conn *c = calloc(1, sizeof(*c));
        if (!c)
                abort();
        c->srv = srv;
        c->bev = bev;
        c->tls = l->ssl != NULL;
        format_remote(sa, c->remote);
        c->timer = evtimer_new(srv->base, timer_cb, c);
        c->kick = event_new(srv->base, -1, 0, kick_cb, c);
        if (!c->timer || !c->kick)
                abort();
        c->next = srv->conns;
        if (srv->conns)
                srv->conns->prev = c;
        srv->conns = c;
        srv->nconns++;

        struct timeval wtv = ms_tv(srv->cfg.write_timeout_ms);
        conn_enter(c); /* enabling a TLS bufferevent may call back at once */
        bufferevent_setcb(bev, read_cb, write_cb, event_cb, c);
        bufferevent_setwatermark(bev, EV_READ, 0, srv->cfg.limits.max_head_bytes + 64 * 1024);
        bufferevent_setwatermark(bev, EV_WRITE, srv->cfg.low_watermark, 0);
        bufferevent_set_timeouts(bev, NULL, &wtv);
        timer_set(c, SP__TIMER_HEAD, srv->cfg.header_timeout_ms);
        bufferevent_enable(bev, EV_READ | EV_WRITE);
        conn_leave(c);
        (void)lev;
        (void)salen;
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
        sp__http_listener *l = arg;
        sp_http_server *srv = l->srv;
        int e = EVUTIL_SOCKET_ERROR();
        sp_log_debug("http: accept failed: %s", strerror(e));
        if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                /* Out of descriptors: pause accepting instead of spinning. */
                for (size_t i = 0; i < srv->nlisteners; i++)
                        evconnlistener_disable(srv->listeners[i].lev);
                struct timeval tv = ms_tv(100);
                evtimer_add(srv->accept_retry, &tv);
        }
        (void)lev;
}

static void accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
        sp_http_server *srv = arg;
        for (size_t i = 0; i < srv->nlisteners; i++)
                evconnlistener_enable(srv->listeners[i].lev);
}

static int bind_unix(const char *path, sp_error **err)
{
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        size_t n = strlen(path);
        if (n == 0 || n >= sizeof(sun.sun_path))
                return sp_error_set(err, SP_E_INVALID, "unix socket path must be 1-%zu bytes",
                                    sizeof(sun.sun_path) - 1);
        memcpy(sun.sun_path, path, n + 1);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                unlink(path);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "socket");
        if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "bind %s", path);
        if (listen(fd, 511) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "listen %s", path);
        return TAKE_FD(fd);
}

static int bind_tcp(const char *address, sp_error **err)
{
        char host[256];
        const char *port;
        if (address[0] == '[') {
                const char *end = strchr(address, ']');
                if (!end || end[1] != ':' || (size_t)(end - address - 1) >= sizeof(host))
                        return sp_error_set(err, SP_E_INVALID, "address '%s' is not [IPv6]:PORT", address);
                memcpy(host, address + 1, (size_t)(end - address - 1));
                host[end - address - 1] = '\0';
                port = end + 2;
        } else {
                const char *colon = strrchr(address, ':');
                if (!colon || colon == address || (size_t)(colon - address) >= sizeof(host))
                        return sp_error_set(err, SP_E_INVALID, "address '%s' is not HOST:PORT", address);
                memcpy(host, address, (size_t)(colon - address));
                host[colon - address] = '\0';
                port = colon + 1;
        }
        size_t plen = strlen(port);
        if (plen == 0 || plen > 5 || strspn(port, "0123456789") != plen || atoi(port) > 65535)
                return sp_error_set(err, SP_E_INVALID, "invalid port in address '%s'", address);

        struct addrinfo hints = {
                .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        struct addrinfo *ai = NULL;
        int r = getaddrinfo(host, port, &hints, &ai);
        if (r != 0)
                return sp_error_set(err, SP_E_INVALID, "cannot resolve '%s': %s", host, gai_strerror(r));
        _cleanup_close_ int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "socket");
                freeaddrinfo(ai);
                return r;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (ai->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "bind %s", address);
                freeaddrinfo(ai);
                return r;
        }
        freeaddrinfo(ai);
        if (listen(fd, 511) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "listen %s", address);
        return TAKE_FD(fd);
}

int sp_http_server_listen(sp_http_server *srv, const char *address, SSL_CTX *ssl, sp_error **err)
{
        if (!address)
                return sp_error_set(err, SP_E_INVALID, "no listen address");
        if (srv->nlisteners == SP_HTTP_MAX_LISTENERS)
                return sp_error_set(err, SP_E_LIMIT, "too many listeners");
        bool is_unix = strncmp(address, "unix:", 5) == 0;
        int fd = is_unix ? bind_unix(address + 5, err) : bind_tcp(address, err);
        if (fd < 0) {
                sp_error_wrap(err, "listen on %s", address);
                return fd;
        }

        sp__http_listener *l = &srv->listeners[srv->nlisteners];
        memset(l, 0, sizeof(*l));
        l->srv = srv;
        l->port = -1;
        if (!is_unix) {
                struct sockaddr_storage ss;
                socklen_t len = sizeof(ss);
                if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
                        l->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
        }
        l->lev = evconnlistener_new(srv->base, accept_cb, l, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
        if (!l->lev) {
                close(fd);
                if (is_unix)
                        unlink(address + 5);
                return sp_error_set(err, SP_E_IO, "listen on %s: cannot create the listener", address);
        }
        evconnlistener_set_error_cb(l->lev, accept_error_cb);
        if (is_unix) {
                l->unix_path = strdup(address + 5);
                if (!l->unix_path)
                        abort();
        }
        if (ssl) {
                SSL_CTX_up_ref(ssl);
                l->ssl = ssl;
        }
        srv->nlisteners++;
        sp_log_debug("http: listening on %s%s", address, ssl ? " (TLS)" : "");
        return 0;
}

int sp_http_server_port(const sp_http_server *srv)
{
        for (size_t i = 0; i < srv->nlisteners; i++)
                if (srv->listeners[i].port >= 0)
                        return srv->listeners[i].port;
        return -1;
}

size_t sp_http_server_connections(const sp_http_server *srv)
{
        return srv->nconns;
}

/* ---- server ---- */

sp_http_server *sp_http_server_new(struct event_base *base, const sp_http_config *cfg, sp_error **err)
{
        if (!base) {
                sp_error_set(err, SP_E_INVALID, "no event base");
                return NULL;
        }
        sp_http_config c = cfg ? *cfg : (sp_http_config){0};
        config_defaults(&c);
        if (c.low_watermark >= c.high_watermark) {
                sp_error_set(err, SP_E_INVALID, "low watermark must be below the high watermark");
                return NULL;
        }
        sp_http_server *srv = calloc(1, sizeof(*srv));
        if (!srv)
                abort();
        srv->base = base;
        srv->cfg = c;
        srv->accept_retry = evtimer_new(base, accept_retry_cb, srv);
        if (!srv->accept_retry)
                abort();
        sp__http_error_response(&srv->busy_reply, 503, SP_E_UNAVAILABLE, "too many connections");
        return srv;
}

sp_http_server *sp_http_server_free(sp_http_server *srv)
{
        if (!srv)
                return NULL;
        for (size_t i = 0; i < srv->nlisteners; i++) {
                sp__http_listener *l = &srv->listeners[i];
                evconnlistener_free(l->lev);
                if (l->ssl)
                        SSL_CTX_free(l->ssl);
                if (l->unix_path) {
                        unlink(l->unix_path);
                        free(l->unix_path);
                }
        }
        while (srv->conns)
                conn_free(srv->conns);
        event_free(srv->accept_retry);
        sp__http_routes_free(srv);
        sp_buf_free(&srv->busy_reply);
        free(srv);
        return NULL;
}
