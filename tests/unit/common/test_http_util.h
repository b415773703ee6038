/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the HTTP server tests: a server whose event loop runs in a
 * thread of the test process, a way to run code on that loop, a signal to
 * wait for events of the loop with a timeout, a self-signed TLS context, and a
 * blocking raw-socket client that reads responses (Content-Length, chunked or
 * until close).
 * Every wait is bounded (TEST_TIMEOUT_MS).
 */
#ifndef SPACE_TEST_HTTP_UTIL_H
#define SPACE_TEST_HTTP_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "space/buf.h"
#include "space/http.h"
#include "space/json.h"

#define TEST_TIMEOUT_MS 10000

/* ---- signals between the loop thread and the test thread ---- */

typedef struct tsignal {
        pthread_mutex_t m;
        pthread_cond_t c;
        int count;
} tsignal;

static inline void tsignal_init(tsignal *s)
{
        pthread_mutex_init(&s->m, NULL);
        pthread_cond_init(&s->c, NULL);
        s->count = 0;
}

static inline void tsignal_post(tsignal *s)
{
        pthread_mutex_lock(&s->m);
        s->count++;
        pthread_cond_broadcast(&s->c);
        pthread_mutex_unlock(&s->m);
}

/* Waits until the signal was posted at least n times; false on timeout. */
static inline bool tsignal_wait(tsignal *s, int n)
{
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += TEST_TIMEOUT_MS / 1000;
        pthread_mutex_lock(&s->m);
        int r = 0;
        while (s->count < n && r == 0)
                r = pthread_cond_timedwait(&s->c, &s->m, &deadline);
        bool ok = s->count >= n;
        pthread_mutex_unlock(&s->m);
        return ok;
}

static inline int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the server under test ---- */

typedef struct tserver {
        struct event_base *base;
        sp_http_server *srv;
        pthread_t thread;
        int port;
} tserver;

static void *tserver_loop(void *arg)
{
        tserver *ts = arg;
        event_base_loop(ts->base, EVLOOP_NO_EXIT_ON_EMPTY);
        return NULL;
}

/* Creates the server; register routes on ts->srv, then tserver_run(). */
static inline void tserver_new(tserver *ts, const sp_http_config *cfg)
{
        memset(ts, 0, sizeof(*ts));
        ck_assert_int_eq(evthread_use_pthreads(), 0);
        ts->base = event_base_new();
        ck_assert_ptr_nonnull(ts->base);
        sp_error *e = NULL;
        ts->srv = sp_http_server_new(ts->base, cfg, &e);
        ck_assert_msg(ts->srv, "%s", e ? e->message : "?");
}

/* Listens on address (NULL: 127.0.0.1:0) and starts the loop thread. */
static inline void tserver_run(tserver *ts, const char *address)
{
        sp_error *e = NULL;
        int r = sp_http_server_listen(ts->srv, address ? address : "127.0.0.1:0", NULL, &e);
        ck_assert_msg(r == 0, "listen: %s", e ? e->message : "?");
        ts->port = sp_http_server_port(ts->srv);
        ck_assert(pthread_create(&ts->thread, NULL, tserver_loop, ts) == 0);
}

static inline void tserver_stop(tserver *ts)
{
        event_base_loopbreak(ts->base);
        pthread_join(ts->thread, NULL);
        sp_http_server_free(ts->srv);
        event_base_free(ts->base);
}

typedef struct loop_call {
        void (*fn)(void *);
        void *arg;
        tsignal done;
} loop_call;

static void loop_call_cb(evutil_socket_t fd, short what, void *arg)
{
        loop_call *lc = arg;
        lc->fn(lc->arg);
        tsignal_post(&lc->done);
}

/* Runs fn(arg) on the loop thread and waits for it. */
static inline void tserver_call(tserver *ts, void (*fn)(void *), void *arg)
{
        loop_call lc = {.fn = fn, .arg = arg};
        tsignal_init(&lc.done);
        struct timeval zero = {0, 0};
        ck_assert_int_eq(event_base_once(ts->base, -1, EV_TIMEOUT, loop_call_cb, &lc, &zero), 0);
        ck_assert(tsignal_wait(&lc.done, 1));
}

typedef struct conn_count {
        tserver *ts;
        size_t n;
} conn_count;

static void conn_count_cb(void *arg)
{
        conn_count *cc = arg;
        cc->n = sp_http_server_connections(cc->ts->srv);
}

/* Waits until the server holds n connections; false on timeout. */
static inline bool tserver_wait_connections(tserver *ts, size_t n)
{
        int64_t end = mono_ms() + TEST_TIMEOUT_MS;
        conn_count cc = {.ts = ts};
        do {
                tserver_call(ts, conn_count_cb, &cc);
                if (cc.n == n)
                        return true;
                usleep(5000);
        } while (mono_ms() < end);
        return false;
}

/* A server context with a fresh self-signed P-256 certificate for localhost. */
static inline SSL_CTX *self_signed_ctx(void)
{
        EVP_PKEY *key = EVP_EC_gen("P-256");
        ck_assert_ptr_nonnull(key);
        X509 *x = X509_new();
        ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
        X509_gmtime_adj(X509_getm_notBefore(x), -60);
        X509_gmtime_adj(X509_getm_notAfter(x), 3600);
        X509_set_pubkey(x, key);
        X509_NAME *name = X509_get_subject_name(x);
        X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
        X509_set_issuer_name(x, name);
        ck_assert_int_gt(X509_sign(x, key, EVP_sha256()), 0);
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        ck_assert_int_eq(SSL_CTX_use_certificate(ctx, x), 1);
        ck_assert_int_eq(SSL_CTX_use_PrivateKey(ctx, key), 1);
        X509_free(x);
        EVP_PKEY_free(key);
        return ctx;
}

/* ---- the raw-socket client ---- */

static inline void cli_timeouts(int fd, int ms)
{
        struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A connected TCP socket to 127.0.0.1:port; rcvbuf > 0 shrinks its receive buffer. */
static inline int cli_connect_buf(int port, int rcvbuf)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        if (rcvbuf > 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
        cli_timeouts(fd, TEST_TIMEOUT_MS);
        return fd;
}

static inline int cli_connect(int port)
{
        return cli_connect_buf(port, 0);
}

static inline void cli_send_n(int fd, const void *p, size_t n)
{
        const char *s = p;
        while (n > 0) {
                ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
                ck_assert_msg(w > 0, "send: %s", strerror(errno));
                s += w;
                n -= (size_t)w;
        }
}

static inline void cli_send(int fd, const char *s)
{
        cli_send_n(fd, s, strlen(s));
}

/* True if the server closed the connection (EOF or reset) before the timeout;
 * any bytes still arriving are dropped. */
static inline bool cli_wait_closed(int fd)
{
        char buf[4096];
        int64_t end = mono_ms() + TEST_TIMEOUT_MS;
        while (mono_ms() < end) {
                ssize_t r = recv(fd, buf, sizeof(buf), 0);
                if (r == 0 || (r < 0 && errno == ECONNRESET))
                        return true;
                if (r < 0 && errno != EINTR)
                        return false;
        }
        return false;
}

typedef struct creader {
        int fd;
        sp_buf in;
} creader;

static inline void creader_free(creader *r)
{
        sp_buf_free(&r->in);
}

/* Reads more input; false on EOF, error or timeout. */
static inline bool creader_more(creader *r)
{
        char buf[65536];
        ssize_t n;
        do
                n = recv(r->fd, buf, sizeof(buf), 0);
        while (n < 0 && errno == EINTR);
        if (n <= 0)
                return false;
        sp_buf_append(&r->in, buf, (size_t)n, NULL);
        return true;
}

/* Takes a CRLF-terminated line (without CRLF) into out; false at EOF. */
static inline bool creader_line(creader *r, sp_buf *out)
{
        for (;;) {
                char *eol = r->in.data ? strstr(r->in.data, "\r\n") : NULL;
                if (eol) {
                        sp_buf_clear(out);
                        sp_buf_append(out, r->in.data, (size_t)(eol - r->in.data), NULL);
                        sp_buf_consume(&r->in, (size_t)(eol - r->in.data) + 2);
                        return true;
                }
                if (!creader_more(r))
                        return false;
        }
}

static inline bool creader_bytes(creader *r, size_t n, sp_buf *out)
{
        while (r->in.len < n)
                if (!creader_more(r))
                        return false;
        sp_buf_append(out, r->in.data, n, NULL);
        sp_buf_consume(&r->in, n);
        return true;
}

/* Reads until the server closes (true) or the timeout (false), keeping what
 * arrives in r->in. */
static inline bool creader_wait_closed(creader *r)
{
        int64_t end = mono_ms() + TEST_TIMEOUT_MS;
        while (mono_ms() < end) {
                char buf[4096];
                ssize_t n = recv(r->fd, buf, sizeof(buf), 0);
                if (n == 0 || (n < 0 && errno == ECONNRESET))
                        return true;
                if (n < 0 && errno != EINTR)
                        return false;
                if (n > 0)
                        sp_buf_append(&r->in, buf, (size_t)n, NULL);
        }
        return false;
}

typedef struct cresponse {
        int status;
        sp_buf head; /* header lines, each ending in \n, names as sent */
        sp_buf body;
} cresponse;

static inline void cresponse_free(cresponse *r)
{
        sp_buf_free(&r->head);
        sp_buf_free(&r->body);
}
#define _cleanup_cresponse_ __attribute__((cleanup(cresponse_free)))
#define _cleanup_creader_ __attribute__((cleanup(creader_free)))

/* The value of a response header (case-insensitive name) in out; false if absent. */
static inline bool cresponse_header(const cresponse *r, const char *name, char *out, size_t outlen)
{
        size_t n = strlen(name);
        for (const char *s = r->head.data; s && *s;) {
                const char *e = strchr(s, '\n');
                if (strncasecmp(s, name, n) == 0 && s[n] == ':') {
                        const char *v = s + n + 1;
                        while (*v == ' ')
                                v++;
                        snprintf(out, outlen, "%.*s", (int)(e - v), v);
                        return true;
                }
                s = e + 1;
        }
        return false;
}

/* Reads the head of a response (status line and headers); false at EOF. */
static inline bool creader_head(creader *r, cresponse *resp)
{
        _cleanup_buf_ sp_buf line = SP_BUF_INIT;
        if (!creader_line(r, &line))
                return false;
        ck_assert_msg(strncmp(line.data, "HTTP/1.1 ", 9) == 0, "bad status line '%s'", line.data);
        resp->status = atoi(line.data + 9);
        for (;;) {
                ck_assert(creader_line(r, &line));
                if (line.len == 0)
                        return true;
                sp_buf_append(&resp->head, line.data, line.len, NULL);
                sp_buf_append(&resp->head, "\n", 1, NULL);
        }
}

/* Reads a chunked body into out; false if it ends early. */
static inline bool creader_chunked(creader *r, sp_buf *out)
{
        _cleanup_buf_ sp_buf line = SP_BUF_INIT;
        for (;;) {
                if (!creader_line(r, &line))
                        return false;
                size_t n = strtoul(line.data, NULL, 16);
                if (n == 0)
                        return creader_line(r, &line) && line.len == 0;
                if (!creader_bytes(r, n, out) || !creader_line(r, &line) || line.len != 0)
                        return false;
        }
}

/* Reads one whole response; head_request: the response has no body. */
static inline bool creader_response_ex(creader *r, cresponse *resp, bool head_request)
{
        if (!creader_head(r, resp))
                return false;
        char v[64];
        if (head_request || resp->status == 204 || resp->status == 304 || resp->status < 200)
                return true;
        if (cresponse_header(resp, "content-length", v, sizeof(v)))
                return creader_bytes(r, strtoul(v, NULL, 10), &resp->body);
        if (cresponse_header(resp, "transfer-encoding", v, sizeof(v)))
                return creader_chunked(r, &resp->body);
        while (creader_more(r)) {
        }
        sp_buf_append(&resp->body, r->in.data, r->in.len, NULL);
        sp_buf_clear(&r->in);
        return true;
}

static inline bool creader_response(creader *r, cresponse *resp)
{
        return creader_response_ex(r, resp, false);
}

/* Sends req on a new connection and reads one response. */
static inline void cli_request(int port, const char *req, cresponse *resp)
{
        int fd = cli_connect(port);
        _cleanup_creader_ creader r = {.fd = fd};
        cli_send(fd, req);
        ck_assert(creader_response(&r, resp));
        close(fd);
}

/* Asserts that body is exactly the error shape with that code. */
static inline void assert_error_shape(const sp_buf *body, const char *code)
{
        _cleanup_json_ json_object *o = NULL;
        ck_assert_msg(sp_json_parse(body->data ? body->data : "", body->len, &o, NULL) == 0, "not JSON: '%s'",
                      body->data);
        ck_assert_int_eq(json_object_object_length(o), 1);
        json_object *err = NULL;
        ck_assert(json_object_object_get_ex(o, "error", &err));
        ck_assert_int_eq(json_object_object_length(err), 2);
        json_object *c = NULL, *m = NULL;
        ck_assert(json_object_object_get_ex(err, "code", &c));
        ck_assert(json_object_object_get_ex(err, "message", &m));
        ck_assert(json_object_is_type(m, json_type_string));
        ck_assert_str_eq(json_object_get_string(c), code);
}

#endif
