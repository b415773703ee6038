/* SPDX-License-Identifier: Apache-2.0 */
/* Upgraded connections: the 101 answer, then a raw byte stream both ways, with
 * backpressure, a half-close in each direction and one close callback. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <string.h>
#include <sys/socket.h>

#include "http_internal.h"
#include "space/cleanup.h"
#include "space/log.h"

/* Builds the 101 head into out; 0 or the error for sp_http_upgrade(). */
static int build_head(sp_http_request *req, const char *const *headers, sp_buf *out, sp_error **err)
{
        sp_buf_append_str(out, "HTTP/1.1 101 Switching Protocols\r\n", NULL);
        for (size_t i = 0; headers && headers[i]; i += 2) {
                const char *name = headers[i], *value = headers[i + 1];
                if (!value)
                        return sp_error_set(err, SP_E_INVALID, "upgrade header %s has no value", name);
                if (!sp_http_token_valid(name, strlen(name)))
                        return sp_error_set(err, SP_E_INVALID, "upgrade header name is not a token");
                if (!sp__http_header_value_ok(value))
                        return sp_error_set(err, SP_E_INVALID, "upgrade header %s has control bytes in its value",
                                            name);
                /* A 101 has no body: framing fields would only mislead the client. */
                if (sp_http_strcaseeq(name, "content-length") || sp_http_strcaseeq(name, "transfer-encoding"))
                        return sp_error_set(err, SP_E_INVALID, "a 101 answer has no %s", name);
                if (sp_buf_appendf(out, NULL, "%s: %s\r\n", name, value) < 0)
                        return sp_error_set(err, SP_E_TOO_LARGE, "upgrade headers over %d bytes",
                                            SP_HTTP_UPGRADE_HEAD_MAX);
        }
        if (req->extra.len && sp_buf_append(out, req->extra.data, req->extra.len, NULL) < 0)
                return sp_error_set(err, SP_E_TOO_LARGE, "upgrade headers over %d bytes", SP_HTTP_UPGRADE_HEAD_MAX);
        if (sp_buf_append(out, "\r\n", 2, NULL) < 0)
                return sp_error_set(err, SP_E_TOO_LARGE, "upgrade headers over %d bytes", SP_HTTP_UPGRADE_HEAD_MAX);
        return 0;
}

int sp_http_upgrade(sp_http_request *req, int status, const char *const *headers, const sp_http_raw_ops *ops,
                    void *userdata, sp_error **err)
{
        if (status != 101)
                return sp_error_set(err, SP_E_INVALID, "an upgrade answers 101, not %d", status);
        if (!ops || !ops->on_data)
                return sp_error_set(err, SP_E_INVALID, "an upgraded connection needs an on_data callback");
        if (req->resp != SP__RESP_NONE)
                return sp_error_set(err, SP_E_CONFLICT, "the request was already answered");
        sp__http_conn *c = req->conn;
        if (!c || c->dead || c->state != SP__CONN_ACTIVE)
                return sp_error_set(err, SP_E_UNAVAILABLE, "the client has gone");
        /* Whatever follows the request is the new protocol's: the request
         * must be over, or its rest would be taken for raw bytes. */
        if (!req->body_done)
                return sp_error_set(err, SP_E_INVALID, "the request body was not read to its end");
        if (sp_http_parser_version_minor(req->parser) == 0)
                return sp_error_set(err, SP_E_INVALID, "HTTP/1.0 has no protocol upgrade");
        _cleanup_buf_ sp_buf head = {.limit = SP_HTTP_UPGRADE_HEAD_MAX};
        int r = build_head(req, headers, &head, err);
        if (r < 0)
                return r;

        sp__http_conn_api_enter(c);
        evbuffer_add(sp__http_conn_output(c), head.data, head.len);
        req->resp = SP__RESP_RAW;
        req->keep_alive = false;
        req->end_told = true; /* a streamed body's reader hears nothing more */
        req->raw = *ops;
        req->raw_ud = userdata;
        req->on_writable = ops->on_writable;
        req->on_writable_ud = userdata;
        req->want_writable = false;
        req->on_close = ops->on_close;
        req->on_close_ud = userdata;
        sp__http_conn_raw_start(c);
        sp__http_conn_api_leave(c);
        return 0;
}

/* Both directions have closed: the connection is over. */
static void check_done(sp__http_conn *c)
{
        if (c->peer_eof && c->req->raw_eof_told && c->shut == SP__SHUT_DONE)
                sp__http_conn_abort(c);
}

static void shut_retry_cb(evutil_socket_t fd, short what, void *arg);

/* The output is out: half-close toward the client. */
static void shutdown_now(sp__http_conn *c)
{
        if (c->tls) {
                /* close_notify; reading goes on (TLS allows it after sending ours). */
                SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
                ERR_clear_error();
                int r = SSL_shutdown(ssl);
                int e = r < 0 ? SSL_get_error(ssl, r) : SSL_ERROR_NONE;
                ERR_clear_error(); /* the bufferevent reads the queue after its own calls */
                if (e == SSL_ERROR_WANT_WRITE) {
                        /* The socket buffer is full: the alert waits in OpenSSL. */
                        if (!c->shut_retry) {
                                c->shut_retry = event_new(bufferevent_get_base(c->bev), bufferevent_getfd(c->bev),
                                                          EV_WRITE, shut_retry_cb, c);
                                if (!c->shut_retry)
                                        abort();
                        }
                        c->shut = SP__SHUT_RETRYING;
                        event_add(c->shut_retry, NULL);
                        return;
                }
                if (e != SSL_ERROR_NONE) {
                        sp_log_debug_kv(SP_KV("remote", c->remote), "http: TLS close_notify failed");
                        sp__http_conn_abort(c);
                        return;
                }
        } else if (shutdown(bufferevent_getfd(c->bev), SHUT_WR) < 0) {
                sp__http_conn_abort(c); /* the client has gone */
                return;
        }
        c->shut = SP__SHUT_DONE;
        check_done(c);
}

static void shut_retry_cb(evutil_socket_t fd, short what, void *arg)
{
        sp__http_conn *c = arg;
        if (c->dead)
                return;
        sp__http_conn_api_enter(c); /* freed from the loop if this ends it */
        shutdown_now(c);
        sp__http_conn_api_leave(c);
}

void sp__http_raw_input(sp__http_conn *c)
{
        sp_http_request *req = sp__http_request_hold(c->req);
        struct evbuffer *in = bufferevent_get_input(c->bev);
        /* Reading restarts here, from the loop, rather than in
         * sp_http_raw_resume(): enabling a TLS bufferevent may read at once. */
        if (!req->raw_paused && !c->peer_eof && !(bufferevent_get_enabled(c->bev) & EV_READ)) {
                sp__http_conn_api_enter(c);
                bufferevent_enable(c->bev, EV_READ);
                sp__http_conn_api_leave(c);
        }
        while (!c->dead && !req->raw_paused && evbuffer_get_length(in) > 0) {
                struct evbuffer_iovec v;
                evbuffer_peek(in, -1, NULL, &v, 1);
                sp__http_conn_raw_activity(c);
                req->raw.on_data(req, v.iov_base, v.iov_len, req->raw_ud);
                evbuffer_drain(in, v.iov_len); /* the data pointed into the buffer */
        }
        if (!c->dead && !req->raw_paused && c->peer_eof && !req->raw_eof_told && evbuffer_get_length(in) == 0) {
                req->raw_eof_told = true;
                if (req->raw.on_eof)
                        req->raw.on_eof(req, req->raw_ud);
                if (!c->dead)
                        check_done(c);
        }
        sp__http_request_release(req);
}

void sp__http_raw_drained(sp__http_conn *c, size_t pending)
{
        sp_http_request *req = c->req;
        if (c->shut == SP__SHUT_FLUSHING) {
                if (pending == 0)
                        shutdown_now(c);
                return;
        }
        if (req->want_writable && pending <= c->srv->cfg.low_watermark) {
                req->want_writable = false;
                if (req->on_writable) {
                        sp__http_request_hold(req);
                        req->on_writable(req, req->on_writable_ud);
                        sp__http_request_release(req);
                }
        }
}

int sp_http_raw_write(sp_http_request *req, const void *data, size_t len)
{
        if (req->resp != SP__RESP_RAW)
                return -SP_E_INVALID;
        sp__http_conn *c = req->conn;
        if (!c || c->dead)
                return -SP_E_UNAVAILABLE;
        if (c->shut != SP__SHUT_NONE || len > SP_HTTP_WRITE_MAX || (len && !data))
                return -SP_E_INVALID;
        struct evbuffer *out = sp__http_conn_output(c);
        sp__http_conn_api_enter(c);
        if (len) {
                evbuffer_add(out, data, len);
                sp__http_conn_raw_activity(c);
        }
        size_t pending = evbuffer_get_length(out);
        sp__http_conn_api_leave(c);
        if (pending >= c->srv->cfg.high_watermark) {
                req->want_writable = true;
                return SP_HTTP_WOULD_BLOCK;
        }
        return 0;
}

int sp_http_raw_shutdown_write(sp_http_request *req)
{
        if (req->resp != SP__RESP_RAW)
                return -SP_E_INVALID;
        sp__http_conn *c = req->conn;
        if (!c || c->dead)
                return -SP_E_UNAVAILABLE;
        if (c->shut != SP__SHUT_NONE)
                return 0;
        c->shut = SP__SHUT_FLUSHING;
        req->want_writable = false; /* nothing more to write */
        sp__http_conn_api_enter(c);
        if (evbuffer_get_length(sp__http_conn_output(c)) == 0)
                shutdown_now(c);
        else
                bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0); /* called back once all is out */
        sp__http_conn_api_leave(c);
        return 0;
}

void sp_http_raw_pause(sp_http_request *req)
{
        if (req->resp != SP__RESP_RAW || req->raw_paused)
                return;
        req->raw_paused = true;
        if (req->conn && !req->conn->dead)
                bufferevent_disable(req->conn->bev, EV_READ);
}

void sp_http_raw_resume(sp_http_request *req)
{
        if (req->resp != SP__RESP_RAW || !req->raw_paused)
                return;
        req->raw_paused = false;
        if (req->conn && !req->conn->dead)
                sp__http_conn_kick(req->conn); /* delivers what is buffered, reads again */
}

void sp_http_raw_close(sp_http_request *req)
{
        if (req->resp == SP__RESP_RAW && req->conn)
                sp__http_conn_abort(req->conn);
}
