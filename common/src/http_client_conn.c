/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The HTTP client's connection: name resolution, a non-blocking TCP connect
 * with a deadline, TLS through memory BIOs (so that every byte passes through
 * our own poll(2) with a deadline, and writes use MSG_NOSIGNAL), and bounded
 * reads and writes.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http_client_internal.h"
#include "space/cleanup.h"

#define FILL_CHUNK (16 * 1024)

int64_t sp__http_client_deadline(unsigned timeout_ms)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + timeout_ms;
}

static int remaining_ms(int64_t deadline)
{
        int64_t left = deadline - sp__http_client_deadline(0);
        return left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/* Waits for events on fd until the deadline: 0 when ready, -SP_E_TIMEOUT. */
static int wait_fd(sp_http_client *c, short events, int64_t deadline, sp_error **err)
{
        for (;;) {
                struct pollfd p = {.fd = c->fd, .events = events};
                int r = poll(&p, 1, remaining_ms(deadline));
                if (r > 0)
                        return 0;
                if (r == 0)
                        return sp_error_set(err, SP_E_TIMEOUT, "%s: timed out waiting to %s", c->host_header,
                                            events & POLLOUT ? "write" : "read");
                if (errno != EINTR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "poll");
        }
}

/* ---- plain socket I/O ---- */

static int sock_write(sp_http_client *c, const void *data, size_t len, int64_t deadline, sp_error **err)
{
        const char *p = data;
        while (len > 0) {
                ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        int w = wait_fd(c, POLLOUT, deadline, err);
                        if (w < 0)
                                return w;
                        continue;
                }
                return sp_error_set_errno(err, SP_E_UNAVAILABLE, errno, "%s: send", c->host_header);
        }
        return 0;
}

/* Reads what is there, waiting until the deadline: > 0 bytes, 0 at EOF. */
static ssize_t sock_read(sp_http_client *c, void *buf, size_t cap, int64_t deadline, sp_error **err)
{
        for (;;) {
                ssize_t n = recv(c->fd, buf, cap, MSG_DONTWAIT);
                if (n >= 0)
                        return n;
                if (errno == EINTR)
                        continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) {
                        int w = wait_fd(c, POLLIN, deadline, err);
                        if (w < 0)
                                return w;
                        continue;
                }
                return sp_error_set_errno(err, SP_E_UNAVAILABLE, errno, "%s: recv", c->host_header);
        }
}

/* ---- TLS over memory BIOs ---- */

int sp__http_client_tls_init(sp_http_client *c, const char *ca_file, sp_error **err)
{
        c->ssl_ctx = SSL_CTX_new(TLS_client_method());
        if (!c->ssl_ctx)
                return sp_error_set(err, SP_E_INTERNAL, "SSL_CTX_new failed");
        SSL_CTX_set_min_proto_version(c->ssl_ctx, TLS1_2_VERSION);
        SSL_CTX_set_verify(c->ssl_ctx, SSL_VERIFY_PEER, NULL);
        static const unsigned char alpn[] = "\x08http/1.1";
        SSL_CTX_set_alpn_protos(c->ssl_ctx, alpn, sizeof(alpn) - 1);
        ERR_clear_error();
        if (ca_file) {
                if (access(ca_file, R_OK) < 0)
                        return sp_error_set_errno(err, SP_E_INVALID, errno, "CA file %s", ca_file);
                if (SSL_CTX_load_verify_locations(c->ssl_ctx, ca_file, NULL) != 1) {
                        char e[256];
                        ERR_error_string_n(ERR_get_error(), e, sizeof(e));
                        ERR_clear_error();
                        return sp_error_set(err, SP_E_INVALID, "CA file %s: no certificate could be loaded (%s)",
                                            ca_file, e);
                }
        } else if (SSL_CTX_set_default_verify_paths(c->ssl_ctx) != 1) {
                ERR_clear_error();
                return sp_error_set(err, SP_E_INVALID, "the system's CA store could not be loaded");
        }
        return 0;
}

/* Sends whatever TLS has queued in its write BIO. */
static int tls_flush(sp_http_client *c, int64_t deadline, sp_error **err)
{
        char buf[FILL_CHUNK];
        while (BIO_ctrl_pending(c->wbio) > 0) {
                int n = BIO_read(c->wbio, buf, sizeof(buf));
                if (n <= 0)
                        break;
                int r = sock_write(c, buf, (size_t)n, deadline, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Moves received bytes from the socket into the read BIO: > 0, 0 at EOF. */
static ssize_t tls_pull(sp_http_client *c, int64_t deadline, sp_error **err)
{
        char buf[FILL_CHUNK];
        ssize_t n = sock_read(c, buf, sizeof(buf), deadline, err);
        if (n > 0 && BIO_write(c->rbio, buf, (int)n) != (int)n)
                return sp_error_set(err, SP_E_INTERNAL, "BIO_write failed");
        if (n == 0)
                BIO_set_mem_eof_return(c->rbio, 0);
        return n;
}

static int tls_fail(sp_http_client *c, const char *what, sp_error **err)
{
        long vr = c->ssl ? SSL_get_verify_result(c->ssl) : X509_V_OK;
        unsigned long e = ERR_get_error();
        char msg[256] = "";
        if (e)
                ERR_error_string_n(e, msg, sizeof(msg));
        ERR_clear_error();
        if (vr != X509_V_OK)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "TLS %s with %s: certificate verify failed: %s", what,
                                    c->host_header, X509_verify_cert_error_string(vr));
        return sp_error_set(err, SP_E_UNAUTHENTICATED, "TLS %s with %s failed%s%s", what, c->host_header,
                            *msg ? ": " : "", msg);
}

static int tls_handshake(sp_http_client *c, int64_t deadline, sp_error **err)
{
        c->rbio = BIO_new(BIO_s_mem());
        c->wbio = BIO_new(BIO_s_mem());
        c->ssl = SSL_new(c->ssl_ctx);
        if (!c->rbio || !c->wbio || !c->ssl) {
                BIO_free(c->rbio);
                BIO_free(c->wbio);
                c->rbio = c->wbio = NULL;
                return sp_error_set(err, SP_E_INTERNAL, "TLS setup failed");
        }
        SSL_set_bio(c->ssl, c->rbio, c->wbio);
        SSL_set_connect_state(c->ssl);
        if (c->host_is_ip) {
                if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), c->host) != 1)
                        return sp_error_set(err, SP_E_INTERNAL, "TLS: cannot check the address %s", c->host);
        } else if (SSL_set_tlsext_host_name(c->ssl, c->host) != 1 || SSL_set1_host(c->ssl, c->host) != 1) {
                return sp_error_set(err, SP_E_INTERNAL, "TLS: cannot check the name %s", c->host);
        }
        for (;;) {
                ERR_clear_error();
                int r = SSL_connect(c->ssl);
                int e = r == 1 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
                int f = tls_flush(c, deadline, err);
                if (f < 0)
                        return f;
                if (r == 1)
                        return 0;
                if (e != SSL_ERROR_WANT_READ)
                        return tls_fail(c, "handshake", err);
                ssize_t n = tls_pull(c, deadline, err);
                if (n < 0)
                        return sp_error_wrap(err, "TLS handshake");
                if (n == 0)
                        return sp_error_set(err, SP_E_UNAVAILABLE, "%s closed the connection during the TLS handshake",
                                            c->host_header);
        }
}

static int tls_write(sp_http_client *c, const void *data, size_t len, int64_t deadline, sp_error **err)
{
        const char *p = data;
        while (len > 0) {
                int chunk = len > INT32_MAX ? INT32_MAX : (int)len;
                ERR_clear_error();
                int r = SSL_write(c->ssl, p, chunk);
                if (r <= 0) {
                        int e = SSL_get_error(c->ssl, r);
                        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                                return tls_fail(c, "write", err);
                } else {
                        p += r;
                        len -= (size_t)r;
                }
                int f = tls_flush(c, deadline, err);
                if (f < 0)
                        return f;
        }
        return 0;
}

/* Decrypts what arrives into buf: > 0 bytes, 0 at the end of the stream. */
static ssize_t tls_read(sp_http_client *c, void *buf, size_t cap, int64_t deadline, sp_error **err)
{
        int want = cap > INT32_MAX ? INT32_MAX : (int)cap;
        for (;;) {
                ERR_clear_error();
                int r = SSL_read(c->ssl, buf, want);
                int e = r > 0 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, r);
                int f = tls_flush(c, deadline, err);
                if (f < 0)
                        return f;
                if (r > 0)
                        return r;
                if (e == SSL_ERROR_ZERO_RETURN)
                        return 0;
                if (e != SSL_ERROR_WANT_READ) {
                        if (c->peer_closed) {
                                /* The TCP stream ended without close_notify. */
                                ERR_clear_error();
                                c->unclean_eof = true;
                                return 0;
                        }
                        return tls_fail(c, "read", err);
                }
                ssize_t n = tls_pull(c, deadline, err);
                if (n < 0)
                        return n;
                if (n == 0)
                        c->peer_closed = true;
        }
}

bool sp__http_client_tls_buffered(const sp_http_client *c)
{
        return c->ssl && (SSL_pending(c->ssl) > 0 || BIO_ctrl_pending(c->rbio) > 0);
}

/* ---- the connection ---- */

/* A non-blocking connect to one address, finished within the deadline. */
static int connect_addr(sp_http_client *c, const struct addrinfo *ai, int64_t deadline, sp_error **err)
{
        c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (c->fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "socket");
        if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0) {
                if (errno != EINPROGRESS)
                        return sp_error_set_errno(err, SP_E_UNAVAILABLE, errno, "connect to %s", c->host_header);
                struct pollfd p = {.fd = c->fd, .events = POLLOUT};
                int r;
                do
                        r = poll(&p, 1, remaining_ms(deadline));
                while (r < 0 && errno == EINTR);
                if (r == 0)
                        return sp_error_set(err, SP_E_TIMEOUT, "connect to %s: timed out after %u ms", c->host_header,
                                            c->connect_timeout_ms);
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                if (r < 0 || getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "connect to %s", c->host_header);
                if (soerr)
                        return sp_error_set_errno(err, SP_E_UNAVAILABLE, soerr, "connect to %s", c->host_header);
        }
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return 0;
}

int sp__http_client_connect(sp_http_client *c, sp_error **err)
{
        sp__http_client_disconnect(c);
        int64_t deadline = sp__http_client_deadline(c->connect_timeout_ms);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
        if (c->host_is_ip)
                hints.ai_flags = AI_NUMERICHOST;
        struct addrinfo *res = NULL;
        int g = getaddrinfo(c->host, c->port, &hints, &res);
        if (g != 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "resolve %s: %s", c->host,
                                    g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
        sp_error *last = NULL;
        int r = sp_error_set(&last, SP_E_UNAVAILABLE, "resolve %s: no address", c->host);
        for (struct addrinfo *ai = res; ai && r < 0; ai = ai->ai_next) {
                sp_error_free(last);
                last = NULL;
                r = connect_addr(c, ai, deadline, &last);
                if (r < 0)
                        sp__http_client_disconnect(c);
        }
        freeaddrinfo(res);
        if (r < 0) {
                sp_error_move(err, &last);
                return r;
        }
        if (c->tls && (r = tls_handshake(c, deadline, err)) < 0) {
                sp__http_client_disconnect(c);
                return r;
        }
        return 0;
}

void sp__http_client_disconnect(sp_http_client *c)
{
        if (c->ssl) {
                /* Best effort close_notify, never waiting. */
                ERR_clear_error();
                if (!c->peer_closed && SSL_shutdown(c->ssl) >= 0)
                        tls_flush(c, 0, NULL);
                ERR_clear_error();
                SSL_free(c->ssl);
        }
        c->ssl = NULL;
        c->rbio = c->wbio = NULL;
        c->fd = sp_close(c->fd);
        c->peer_closed = false;
        c->unclean_eof = false;
        sp_buf_clear(&c->in);
}

bool sp__http_client_idle_ok(sp_http_client *c)
{
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        return poll(&p, 1, 0) == 0;
}

int sp__http_client_write(sp_http_client *c, const void *data, size_t len, int64_t deadline, sp_error **err)
{
        return c->ssl ? tls_write(c, data, len, deadline, err) : sock_write(c, data, len, deadline, err);
}

ssize_t sp__http_client_fill(sp_http_client *c, int64_t deadline, sp_error **err)
{
        if (c->peer_closed)
                return 0;
        int r = sp_buf_reserve(&c->in, FILL_CHUNK, err);
        if (r < 0)
                return r;
        char *dst = c->in.data + c->in.len;
        ssize_t n = c->ssl ? tls_read(c, dst, FILL_CHUNK, deadline, err) : sock_read(c, dst, FILL_CHUNK, deadline, err);
        if (n > 0) {
                c->in.len += (size_t)n;
                c->in.data[c->in.len] = '\0';
        } else if (n == 0) {
                c->peer_closed = true;
        }
        return n;
}
