/* SPDX-License-Identifier: Apache-2.0 */
/* Glue between nghttp2, libevent bufferevents and the per-stream queues. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/util.h>

#include "space/cleanup.h"
#include "rpc_internal.h"

/* ---- send queue ---------------------------------------------------------- */

int sp__rpc_outq_init(sp__rpc_outq *q)
{
        memset(q, 0, sizeof(*q));
        q->buf = evbuffer_new();
        return q->buf ? 0 : -1;
}

void sp__rpc_outq_free(sp__rpc_outq *q)
{
        if (q->buf)
                evbuffer_free(q->buf);
        q->buf = NULL;
}

int sp__rpc_outq_end(sp__rpc_outq *q, const void *p, size_t n, sp_error **err)
{
        uint8_t h[SP_RPC_FRAME_HEADER_SIZE];
        int r = sp_rpc_frame_header(h, SP_RPC_FRAME_END, n, err);
        if (r < 0)
                return r;
        if (q->eof)
                return sp_error_set(err, SP_E_INVALID, "the stream was already ended");
        if (evbuffer_add(q->buf, h, sizeof(h)) < 0 || (n && evbuffer_add(q->buf, p, n) < 0))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        q->eof = true;
        return 0;
}

int sp__rpc_outq_frame(sp__rpc_outq *q, sp_rpc_frame_type type, const void *p, size_t n, sp_error **err)
{
        uint8_t h[SP_RPC_FRAME_HEADER_SIZE];
        if (type == SP_RPC_FRAME_END)
                return sp_error_set(err, SP_E_INVALID, "END frames are sent by ending the call");
        int r = sp_rpc_frame_header(h, type, n, err);
        if (r < 0)
                return r;
        if (q->eof)
                return sp_error_set(err, SP_E_INVALID, "the stream was already ended");
        if (evbuffer_get_length(q->buf) >= SP_RPC_SEND_HIGH_WATERMARK) {
                q->blocked = true;
                return sp_error_set(err, SP_E_LIMIT, "send queue full: wait for on_writable");
        }
        if (evbuffer_add(q->buf, h, sizeof(h)) < 0 || (n && evbuffer_add(q->buf, p, n) < 0))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (evbuffer_get_length(q->buf) >= SP_RPC_SEND_HIGH_WATERMARK) {
                q->blocked = true;
                return 1;
        }
        return 0;
}

void sp__rpc_outq_wake(sp__rpc_outq *q, nghttp2_session *session, int32_t stream_id)
{
        if (q->deferred && session && stream_id > 0) {
                q->deferred = false;
                nghttp2_session_resume_data(session, stream_id);
        }
}

static ssize_t outq_read(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length, uint32_t *data_flags,
                         nghttp2_data_source *source, void *user_data)
{
        sp__rpc_outq *q = source->ptr;
        size_t avail = evbuffer_get_length(q->buf);
        if (avail == 0 && !q->eof) {
                q->deferred = true;
                return NGHTTP2_ERR_DEFERRED;
        }
        size_t n = avail < length ? avail : length;
        *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
        if (n == avail && q->eof)
                *data_flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
}

nghttp2_data_provider sp__rpc_outq_provider(sp__rpc_outq *q)
{
        return (nghttp2_data_provider){.source = {.ptr = q}, .read_callback = outq_read};
}

/* ---- receive queue ------------------------------------------------------- */

int sp__rpc_inq_init(sp__rpc_inq *q)
{
        memset(q, 0, sizeof(*q));
        sp_rpc_frame_decoder_init(&q->dec, SP_RPC_MAX_FRAME);
        q->buf = evbuffer_new();
        return q->buf ? 0 : -1;
}

void sp__rpc_inq_free(sp__rpc_inq *q)
{
        if (q->buf)
                evbuffer_free(q->buf);
        q->buf = NULL;
        sp_rpc_frame_decoder_free(&q->dec);
}

int sp__rpc_inq_receive(sp__rpc_inq *q, nghttp2_session *session, const uint8_t *data, size_t len)
{
        if (evbuffer_add(q->buf, data, len) < 0)
                return -1;
        nghttp2_session_consume_connection(session, len);
        return 0;
}

int sp__rpc_inq_deliver(sp__rpc_inq *q, nghttp2_session *session, int32_t stream_id, sp__rpc_frame_fn fn,
                        void *userdata, sp_error **err)
{
        while (!q->paused && evbuffer_get_length(q->buf) > 0) {
                struct evbuffer_iovec v;
                if (evbuffer_peek(q->buf, -1, NULL, &v, 1) < 1)
                        break;
                size_t used = 0;
                sp_rpc_frame f;
                int r = sp_rpc_frame_decoder_next(&q->dec, v.iov_base, v.iov_len, &used, &f, err);
                if (r < 0)
                        return r;
                bool go = true;
                if (r == 1)
                        go = fn(userdata, &f); /* f may point into the chunk: drain after */
                evbuffer_drain(q->buf, used);
                if (session && used)
                        nghttp2_session_consume_stream(session, stream_id, used);
                if (!go)
                        return 1;
        }
        return evbuffer_get_length(q->buf) > 0 ? 1 : 0;
}

/* ---- session I/O ---------------------------------------------------------- */

static ssize_t send_cb(nghttp2_session *session, const uint8_t *data, size_t length, int flags, void *user_data)
{
        sp__rpc_h2 *h = user_data;
        struct evbuffer *out = bufferevent_get_output(h->bev);
        if (evbuffer_get_length(out) >= SP__RPC_OUTPUT_LIMIT)
                return NGHTTP2_ERR_WOULDBLOCK;
        if (evbuffer_add(out, data, length) < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        return (ssize_t)length;
}

static int send_data_cb(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *source, void *user_data)
{
        sp__rpc_h2 *h = user_data;
        sp__rpc_outq *q = source->ptr;
        struct evbuffer *out = bufferevent_get_output(h->bev);
        if (evbuffer_get_length(out) >= SP__RPC_OUTPUT_LIMIT)
                return NGHTTP2_ERR_WOULDBLOCK;
        static const uint8_t zeros[256];
        size_t padlen = frame->data.padlen;
        if (evbuffer_add(out, framehd, 9) < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (padlen > 0) {
                uint8_t pl = (uint8_t)(padlen - 1);
                if (evbuffer_add(out, &pl, 1) < 0)
                        return NGHTTP2_ERR_CALLBACK_FAILURE;
        }
        if (evbuffer_remove_buffer(q->buf, out, length) != (int)length)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (padlen > 1 && evbuffer_add(out, zeros, padlen - 1) < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        if (q->blocked && evbuffer_get_length(q->buf) < SP_RPC_SEND_HIGH_WATERMARK / 2) {
                q->blocked = false;
                q->writable_due = true;
                if (h->kick)
                        event_active(h->kick, EV_WRITE, 0);
        }
        return 0;
}

void sp__rpc_h2_set_io_callbacks(nghttp2_session_callbacks *cbs)
{
        nghttp2_session_callbacks_set_send_callback(cbs, send_cb);
        nghttp2_session_callbacks_set_send_data_callback(cbs, send_data_cb);
}

nghttp2_option *sp__rpc_h2_options(bool server)
{
        nghttp2_option *opt = NULL;
        if (nghttp2_option_new(&opt) != 0)
                return NULL;
        /* Windows open only as the application consumes what it received. */
        nghttp2_option_set_no_auto_window_update(opt, 1);
        nghttp2_option_set_max_outbound_ack(opt, 1000);
        if (!server) {
                nghttp2_option_set_max_reserved_remote_streams(opt, 0);
                /* Until the server's SETTINGS arrive, assume its limit rather
                 * than none, so that a burst of calls is queued, not refused. */
                nghttp2_option_set_peer_max_concurrent_streams(opt, SP_RPC_MAX_CONCURRENT_STREAMS);
        }
        return opt;
}

int sp__rpc_h2_start(sp__rpc_h2 *h, bool server, sp_error **err)
{
        nghttp2_settings_entry iv[] = {
                {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, server ? SP_RPC_MAX_CONCURRENT_STREAMS : 0},
                {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, SP_RPC_STREAM_WINDOW},
                {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, SP_RPC_MAX_HEADER_BYTES},
                {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        };
        /* ENABLE_PUSH is a client setting only. */
        int rv = nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, server ? 3 : 4);
        if (rv == 0)
                rv = nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0, SP_RPC_CONN_WINDOW);
        if (rv != 0)
                return sp_error_set(err, SP_E_INTERNAL, "HTTP/2 settings: %s", nghttp2_strerror(rv));
        return 0;
}

int sp__rpc_h2_recv(sp__rpc_h2 *h, sp_error **err)
{
        struct evbuffer *in = bufferevent_get_input(h->bev);
        while (evbuffer_get_length(in) > 0) {
                struct evbuffer_iovec v[8];
                int n = evbuffer_peek(in, -1, NULL, v, SP_ARRAY_SIZE(v));
                if (n <= 0)
                        break;
                if (n > (int)SP_ARRAY_SIZE(v))
                        n = SP_ARRAY_SIZE(v);
                size_t total = 0;
                for (int i = 0; i < n; i++) {
                        ssize_t r = nghttp2_session_mem_recv(h->session, v[i].iov_base, v[i].iov_len);
                        if (r < 0) {
                                evbuffer_drain(in, total);
                                return sp_error_set(err, SP_E_UNAVAILABLE, "HTTP/2: %s", nghttp2_strerror((int)r));
                        }
                        total += (size_t)r;
                }
                evbuffer_drain(in, total);
        }
        return 0;
}

int sp__rpc_h2_send(sp__rpc_h2 *h, sp_error **err)
{
        int rv = nghttp2_session_send(h->session);
        if (rv != 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "HTTP/2: %s", nghttp2_strerror(rv));
        return 0;
}

bool sp__rpc_h2_finished(const sp__rpc_h2 *h)
{
        return !nghttp2_session_want_read(h->session) && !nghttp2_session_want_write(h->session);
}

void sp__rpc_ignore_sigpipe(void)
{
        struct sigaction sa;
        if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL && !(sa.sa_flags & SA_SIGINFO)) {
                sa.sa_handler = SIG_IGN;
                sigaction(SIGPIPE, &sa, NULL);
        }
}

/* ---- addresses -------------------------------------------------------------- */

int sp__rpc_addr_parse(const char *s, sp__rpc_addr *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        if (!s || !*s)
                return sp_error_set(err, SP_E_INVALID, "empty address");
        if (strncmp(s, "unix:", 5) == 0) {
                const char *path = s + 5;
                struct sockaddr_un *un = (struct sockaddr_un *)&ret->ss;
                if (!*path || strlen(path) >= sizeof(un->sun_path))
                        return sp_error_set(err, SP_E_INVALID, "bad unix socket path in '%s'", s);
                ret->is_unix = true;
                un->sun_family = AF_UNIX;
                memcpy(un->sun_path, path, strlen(path) + 1);
                ret->sslen = (int)sizeof(*un);
                return 0;
        }
        const char *colon = strrchr(s, ':');
        if (!colon || colon == s || !colon[1])
                return sp_error_set(err, SP_E_INVALID, "address '%s' is not HOST:PORT or unix:PATH", s);
        char *end = NULL;
        errno = 0;
        long port = strtol(colon + 1, &end, 10);
        if (errno || *end || port < 0 || port > 65535 || colon[1] == '-' || colon[1] == '+')
                return sp_error_set(err, SP_E_INVALID, "bad port in address '%s'", s);
        const char *host = s;
        size_t hlen = (size_t)(colon - s);
        if (host[0] == '[') {
                if (hlen < 3 || host[hlen - 1] != ']')
                        return sp_error_set(err, SP_E_INVALID, "bad IPv6 address in '%s'", s);
                host++;
                hlen -= 2;
        } else if (memchr(host, ':', hlen)) {
                return sp_error_set(err, SP_E_INVALID, "IPv6 addresses need brackets: '%s'", s);
        }
        if (hlen >= sizeof(ret->host))
                return sp_error_set(err, SP_E_INVALID, "host name too long in '%s'", s);
        memcpy(ret->host, host, hlen);
        ret->host[hlen] = '\0';
        ret->port = (int)port;

        struct sockaddr_in *in4 = (struct sockaddr_in *)&ret->ss;
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ret->ss;
        if (inet_pton(AF_INET, ret->host, &in4->sin_addr) == 1) {
                in4->sin_family = AF_INET;
                in4->sin_port = htons((uint16_t)port);
                ret->sslen = (int)sizeof(*in4);
                ret->numeric = true;
        } else if (inet_pton(AF_INET6, ret->host, &in6->sin6_addr) == 1) {
                in6->sin6_family = AF_INET6;
                in6->sin6_port = htons((uint16_t)port);
                ret->sslen = (int)sizeof(*in6);
                ret->numeric = true;
        } else {
                for (const char *c = ret->host; *c; c++)
                        if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '.'))
                                return sp_error_set(err, SP_E_INVALID, "bad host name in '%s'", s);
        }
        return 0;
}

bool sp__rpc_method_name_valid(const char *name, size_t len)
{
        if (len == 0 || len > SP_RPC_MAX_METHOD_NAME)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = name[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '.'))
                        return false;
        }
        return true;
}
