/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl port-forward SANDBOX [LOCAL:]REMOTE`: a port on this machine
 * that reaches a server in a sandbox through the data plane's ingress
 * (docs/api.md, "Ingress"), like `kubectl port-forward` — for servers that
 * speak HTTP (WebSockets included), since ingress relays HTTP.
 *
 * Each local connection gets its own connection to the data plane (the same
 * base URL exec and cp use, TLS as the profile trusts it). The local port is
 * a reverse proxy at the HTTP level:
 *
 *   client -> data plane   each request head is parsed with the strict
 *                          request parser (space/http_parser.h) and written
 *                          again with its target under the path form,
 *                          /v1/sandboxes/{id}/ports/{REMOTE}{target}, its
 *                          Host as the client sent it and the ingress token
 *                          in X-Space-Ingress-Token; its body is passed on as
 *                          it comes, framing and all
 *   data plane -> client   the answers, byte for byte, through a response
 *                          parser that tells where each ends (so keep-alive
 *                          and pipelined requests pair up) and whether an
 *                          upgrade was granted
 *   after a 101            raw bytes both ways until either side ends (the
 *                          client's end is passed on as a half-close)
 *
 * Bounds: at most MAX_CONNS local connections at once (the listener pauses
 * meanwhile; the kernel's backlog holds the next), at most MAX_PENDING
 * requests forwarded and not yet answered per connection, and at most about
 * HIGH_WATER bytes queued toward either side: reading the other side stops
 * until they are written. A malformed request is answered by us (400, 431, …)
 * once the answers before it are through, then the connection closes; a
 * data plane that cannot be reached is a 502 naming why.
 *
 * A sandbox whose ingress mode is `token` gets one ingress token at start
 * (an hour), minted again ten minutes before it ends (forwarding pauses for
 * that API call). Runs until SIGINT or SIGTERM, then closes everything and
 * exits 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/http_parser.h"
#include "space/json.h"

#define MAX_CONNS 256
#define MAX_PENDING 32
#define HIGH_WATER (256 * 1024)
#define MAX_REQUEST_HEAD (64 * 1024)
#define CONNECT_TIMEOUT_S 10
#define TOKEN_TTL_S 3600
#define TOKEN_RENEW_S (TOKEN_TTL_S - 600)
#define TOKEN_RETRY_S 30
#define MAX_URL 4096

const ctl_opt ctl_port_forward_opts[] = {
        {"address", "ADDR", 0, "the local address to listen on (default 127.0.0.1)"},
        {0},
};

typedef struct fwd fwd;
typedef struct conn conn;

struct fwd {
        ctl_ctx *ctx;
        const char *sandbox;
        struct event_base *base;
        struct evconnlistener *listener;
        struct event *sigint, *sigterm, *renew;
        /* the data plane */
        char *dp_url; /* its base URL, for messages */
        bool tls, host_is_ip;
        char host[256], port[8];
        SSL_CTX *ssl_ctx;
        struct sockaddr_storage addr;
        socklen_t addrlen;
        char *prefix; /* what goes before a request's target: "/v1/sandboxes/{id}/ports/{port}" */
        char *token; /* NULL for a public sandbox */
        /* local connections */
        conn *conns;
        size_t nconns;
        bool paused; /* the listener, at MAX_CONNS */
};

/* Where the client's bytes are. */
typedef enum up_state {
        UP_HTTP, /* request heads are parsed and rewritten */
        UP_WAIT, /* an upgrade request is complete: held until its answer says whether it switched */
        UP_RAW, /* after a 101: bytes as they are */
        UP_STOP, /* a malformed request: nothing more is read */
} up_state;

/* A request forwarded whose answer has not ended. */
typedef struct pending {
        char method[SP_HTTP_METHOD_MAX + 1];
        bool upgrade;
        uint64_t seq;
} pending;

struct conn {
        fwd *f;
        conn *prev, *next;
        struct bufferevent *client, *dp;
        bool dp_connected;
        char *dp_error; /* why the data plane could not be reached */
        /* client -> data plane */
        up_state up;
        sp_http_parser *req; /* the request being read; NULL between requests */
        bool req_head; /* its head was forwarded */
        uint64_t seq; /* of the last request forwarded */
        uint64_t waiting; /* UP_WAIT: the upgrade request's seq */
        pending pending[MAX_PENDING]; /* oldest first */
        size_t npending;
        int stop_status;
        const char *stop_message;
        /* data plane -> client */
        sp_http_response_parser *resp; /* the answer being read */
        /* ends */
        bool client_eof, dp_eof, client_dead, client_shut, dp_shut, closing;
};

/* ---- the data plane ---- */

/* "http[s]://HOST[:PORT][/PREFIX]", already checked by sp_http_client_new(). */
static void parse_base(fwd *f, const char *base, sp_buf *prefix)
{
        f->tls = strncasecmp(base, "https://", 8) == 0;
        const char *s = base + (f->tls ? 8 : 7);
        const char *end = s + strcspn(s, "/");
        const char *hs = s, *he, *port = NULL;
        if (*s == '[') {
                hs = s + 1;
                he = memchr(s, ']', (size_t)(end - s));
                if (he + 1 < end && he[1] == ':')
                        port = he + 2;
                f->host_is_ip = true;
        } else {
                const char *colon = memchr(s, ':', (size_t)(end - s));
                he = colon ? colon : end;
                port = colon ? colon + 1 : NULL;
        }
        snprintf(f->host, sizeof(f->host), "%.*s", (int)(he - hs), hs);
        if (!f->host_is_ip) {
                struct in_addr a4;
                f->host_is_ip = inet_pton(AF_INET, f->host, &a4) == 1;
        }
        if (port)
                snprintf(f->port, sizeof(f->port), "%.*s", (int)(end - port), port);
        else
                snprintf(f->port, sizeof(f->port), "%s", f->tls ? "443" : "80");
        size_t plen = strlen(end);
        while (plen > 0 && end[plen - 1] == '/')
                plen--;
        sp_buf_append(prefix, end, plen, NULL);
}

/* Connects once to each address of the data plane's host until one
 * answers, and keeps that one for the connections to come. */
static int dp_resolve(fwd *f, sp_error **err)
{
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res = NULL;
        int g = getaddrinfo(f->host, f->port, &hints, &res);
        if (g != 0)
                return ctl_fail(f->ctx, CTL_EXIT_CONNECT, err, SP_E_UNAVAILABLE, "the data plane at %s: %s", f->dp_url,
                                gai_strerror(g));
        int last = ENOENT;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0) {
                        last = errno;
                        continue;
                }
                int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
                if (rc < 0 && errno == EINPROGRESS) {
                        struct pollfd p = {.fd = fd, .events = POLLOUT};
                        socklen_t l = sizeof(last);
                        if (poll(&p, 1, CONNECT_TIMEOUT_S * 1000) == 1 &&
                            getsockopt(fd, SOL_SOCKET, SO_ERROR, &last, &l) == 0)
                                rc = last ? -1 : 0;
                        else
                                last = ETIMEDOUT;
                } else if (rc < 0) {
                        last = errno;
                }
                close(fd);
                if (rc == 0 && ai->ai_addrlen <= sizeof(f->addr)) {
                        memcpy(&f->addr, ai->ai_addr, ai->ai_addrlen);
                        f->addrlen = ai->ai_addrlen;
                        freeaddrinfo(res);
                        return 0;
                }
        }
        freeaddrinfo(res);
        return ctl_fail(f->ctx, CTL_EXIT_CONNECT, err, SP_E_UNAVAILABLE, "cannot reach the data plane at %s: %s",
                        f->dp_url, strerror(last));
}

/* The TLS context: the CA the profile trusts (else the system's), as for the API. */
static int tls_init(fwd *f, sp_error **err)
{
        f->ssl_ctx = SSL_CTX_new(TLS_client_method());
        if (!f->ssl_ctx)
                return ctl_fail(f->ctx, CTL_EXIT_CONFIG, err, SP_E_INTERNAL, "SSL_CTX_new failed");
        SSL_CTX_set_min_proto_version(f->ssl_ctx, TLS1_2_VERSION);
        SSL_CTX_set_verify(f->ssl_ctx, SSL_VERIFY_PEER, NULL);
        static const unsigned char alpn[] = "\x08http/1.1";
        SSL_CTX_set_alpn_protos(f->ssl_ctx, alpn, sizeof(alpn) - 1);
        const char *ca = f->ctx->settings.v[CTL_F_CA_FILE];
        ERR_clear_error();
        if (ca ? SSL_CTX_load_verify_locations(f->ssl_ctx, ca, NULL) != 1
               : SSL_CTX_set_default_verify_paths(f->ssl_ctx) != 1) {
                ERR_clear_error();
                return ctl_fail(f->ctx, CTL_EXIT_CONFIG, err, SP_E_INVALID, "%s could not be loaded",
                                ca ? ca : "the system's CA store");
        }
        return 0;
}

/* A TLS session for one connection: SNI, and the name or address checked. */
static SSL *tls_new(fwd *f)
{
        SSL *ssl = SSL_new(f->ssl_ctx);
        if (!ssl)
                return NULL;
        int ok = f->host_is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), f->host)
                               : SSL_set_tlsext_host_name(ssl, f->host) == 1 && SSL_set1_host(ssl, f->host) == 1;
        if (ok != 1) {
                SSL_free(ssl);
                return NULL;
        }
        return ssl;
}

/* Why a connection to the data plane failed (malloc'd). */
static char *dp_failure(conn *c, short what)
{
        char *msg = NULL;
        int e = EVUTIL_SOCKET_ERROR();
        if (what & BEV_EVENT_TIMEOUT) {
                if (asprintf(&msg, "no connection within %d s", CONNECT_TIMEOUT_S) < 0)
                        msg = NULL;
                return msg;
        }
        if (c->f->tls) {
                SSL *ssl = bufferevent_openssl_get_ssl(c->dp);
                long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
                unsigned long le = bufferevent_get_openssl_error(c->dp);
                char buf[256] = "";
                if (le)
                        ERR_error_string_n(le, buf, sizeof(buf));
                if (vr != X509_V_OK &&
                    asprintf(&msg, "certificate verify failed: %s", X509_verify_cert_error_string(vr)) >= 0)
                        return msg;
                if (le && asprintf(&msg, "TLS: %s", buf) >= 0)
                        return msg;
        }
        if (asprintf(&msg, "%s", e ? strerror(e) : "the connection ended") < 0)
                msg = NULL;
        return msg;
}

/* ---- one local connection ---- */

static void conn_free(conn *c)
{
        fwd *f = c->f;
        if (c->prev)
                c->prev->next = c->next;
        else
                f->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        f->nconns--;
        if (f->paused && f->nconns < MAX_CONNS && f->listener) {
                evconnlistener_enable(f->listener);
                f->paused = false;
        }
        if (c->client)
                bufferevent_free(c->client);
        if (c->dp)
                bufferevent_free(c->dp);
        sp_http_parser_free(c->req);
        sp_http_response_parser_free(c->resp);
        free(c->dp_error);
        free(c);
}

static const char *reason_phrase(int status)
{
        switch (status) {
        case 400:
                return "Bad Request";
        case 413:
                return "Content Too Large";
        case 414:
                return "URI Too Long";
        case 417:
                return "Expectation Failed";
        case 431:
                return "Request Header Fields Too Large";
        case 505:
                return "HTTP Version Not Supported";
        default:
                return "Bad Gateway";
        }
}

/* Our own answer, then the connection ends. */
static void reply(conn *c, int status, const char *msg)
{
        evbuffer_add_printf(bufferevent_get_output(c->client),
                            "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                            "Connection: close\r\n\r\n%s\n",
                            status, reason_phrase(status), strlen(msg) + 1, msg);
        c->closing = true;
}

/* Connection: upgrade with an Upgrade header (a WebSocket's handshake). */
static bool asks_upgrade(const sp_http_parser *p)
{
        const char *v = sp_http_parser_header(p, "Connection");
        if (!v || !sp_http_parser_header(p, "Upgrade"))
                return false;
        for (const char *s = v; *s;) {
                while (*s == ' ' || *s == ',')
                        s++;
                size_t n = strcspn(s, ", ");
                if (n == 7 && strncasecmp(s, "upgrade", 7) == 0)
                        return true;
                s += n;
        }
        return false;
}

/* The request head again: the target under the path form, the client's
 * headers but its own ingress tokens, ours. */
static void write_head(conn *c, const sp_http_parser *p)
{
        struct evbuffer *out = bufferevent_get_output(c->dp);
        evbuffer_add_printf(out, "%s %s%s HTTP/1.%d\r\n", sp_http_parser_method(p), c->f->prefix,
                            sp_http_parser_target(p), sp_http_parser_version_minor(p));
        const char *name, *value;
        for (size_t i = 0; sp_http_parser_header_at(p, i, &name, &value); i++) {
                if (sp_http_strcaseeq(name, "X-Space-Ingress-Token") ||
                    sp_http_strcaseeq(name, "E2B-Traffic-Access-Token") ||
                    sp_http_strcaseeq(name, "X-Space-Ingress-Client"))
                        continue;
                evbuffer_add_printf(out, "%s: %s\r\n", name, value);
        }
        if (c->f->token)
                evbuffer_add_printf(out, "X-Space-Ingress-Token: %s\r\n", c->f->token);
        /* The page is served from the local port, its own origin: answers
         * as the host form's (cookies kept, no sandboxing CSP). */
        evbuffer_add(out, "X-Space-Ingress-Client: forward\r\n", 33);
        evbuffer_add(out, "\r\n", 2);
}

static bool still_pending(const conn *c, uint64_t seq)
{
        for (size_t i = 0; i < c->npending; i++)
                if (c->pending[i].seq == seq)
                        return true;
        return false;
}

/* The first contiguous bytes of a buffer (len 0 when empty). */
static struct evbuffer_iovec first_bytes(struct evbuffer *b)
{
        struct evbuffer_iovec v = {.iov_base = (void *)"", .iov_len = 0};
        if (evbuffer_peek(b, -1, NULL, &v, 1) < 1 || !v.iov_base) {
                v.iov_base = (void *)"";
                v.iov_len = 0;
        }
        return v;
}

/* Client -> data plane, as far as the state and the data plane's queue allow. */
static void pump_up(conn *c)
{
        struct evbuffer *in = bufferevent_get_input(c->client), *out = bufferevent_get_output(c->dp);
        for (;;) {
                if (c->up == UP_RAW) {
                        if (evbuffer_get_length(out) < HIGH_WATER)
                                evbuffer_add_buffer(out, in);
                        return;
                }
                if (c->up != UP_HTTP || evbuffer_get_length(out) >= HIGH_WATER)
                        return;
                if (!c->req) {
                        if (evbuffer_get_length(in) == 0 || c->npending == MAX_PENDING)
                                return;
                        sp_http_limits lim = {.max_head_bytes = MAX_REQUEST_HEAD, .max_body = UINT64_MAX};
                        c->req = sp_http_parser_new(&lim);
                        c->req_head = false;
                }
                struct evbuffer_iovec v = first_bytes(in);
                size_t used = 0, blen = 0;
                const char *body = NULL;
                sp_http_parse_event ev = sp_http_parser_feed(c->req, v.iov_base, v.iov_len, &used, &body, &blen);
                if (ev == SP_HTTP_PARSE_ERROR) {
                        c->stop_status = sp_http_parser_error(c->req, NULL, &c->stop_message);
                        c->up = UP_STOP;
                        return;
                }
                /* Head bytes are the parser's now (written again below);
                 * the body's, with their framing, go on as they are. */
                if (c->req_head)
                        evbuffer_remove_buffer(in, out, used);
                else
                        evbuffer_drain(in, used);
                if (ev == SP_HTTP_PARSE_HEAD) {
                        c->req_head = true;
                        write_head(c, c->req);
                        pending *p = &c->pending[c->npending++];
                        snprintf(p->method, sizeof(p->method), "%s", sp_http_parser_method(c->req));
                        p->upgrade = asks_upgrade(c->req);
                        p->seq = ++c->seq;
                } else if (ev == SP_HTTP_PARSE_DONE) {
                        bool upgrade = asks_upgrade(c->req);
                        c->req = sp_http_parser_free(c->req);
                        /* Nothing after an upgrade request is HTTP until its answer says no. */
                        if (upgrade && still_pending(c, c->seq)) {
                                c->up = UP_WAIT;
                                c->waiting = c->seq;
                        }
                } else if (ev == SP_HTTP_PARSE_AGAIN && (used == 0 || evbuffer_get_length(in) == 0)) {
                        return;
                }
        }
}

/* Data plane -> client, answer by answer. */
static void pump_down(conn *c)
{
        struct evbuffer *in = bufferevent_get_input(c->dp), *out = bufferevent_get_output(c->client);
        for (;;) {
                if (evbuffer_get_length(out) >= HIGH_WATER)
                        return;
                if (c->up == UP_RAW) {
                        evbuffer_add_buffer(out, in);
                        return;
                }
                if (!c->resp) {
                        if (evbuffer_get_length(in) == 0)
                                return;
                        if (c->npending == 0) {
                                /* An answer to nothing asked: passed on, and the connection ends. */
                                evbuffer_add_buffer(out, in);
                                c->closing = true;
                                return;
                        }
                        c->resp = sp_http_response_parser_new(c->pending[0].method, NULL);
                        if (c->pending[0].upgrade)
                                sp_http_response_parser_allow_upgrade(c->resp);
                }
                struct evbuffer_iovec v = first_bytes(in);
                size_t used = 0, blen = 0;
                const char *body = NULL;
                sp_http_parse_event ev =
                        sp_http_response_parser_feed(c->resp, v.iov_base, v.iov_len, &used, &body, &blen);
                if (ev == SP_HTTP_PARSE_ERROR) {
                        fprintf(stderr, "spacectl: port-forward: a malformed answer from the data plane (%s)\n",
                                sp_http_response_parser_error(c->resp));
                        c->closing = true;
                        return;
                }
                evbuffer_remove_buffer(in, out, used);
                if (ev == SP_HTTP_PARSE_DONE) {
                        bool switched = sp_http_response_parser_status(c->resp) == 101;
                        c->resp = sp_http_response_parser_free(c->resp);
                        uint64_t seq = c->pending[0].seq;
                        memmove(&c->pending[0], &c->pending[1], (c->npending - 1) * sizeof(c->pending[0]));
                        c->npending--;
                        if (switched) {
                                c->up = UP_RAW;
                                c->req = sp_http_parser_free(c->req);
                        } else if (c->up == UP_WAIT && seq == c->waiting) {
                                c->up = UP_HTTP;
                        }
                } else if (ev == SP_HTTP_PARSE_AGAIN && (used == 0 || evbuffer_get_length(in) == 0)) {
                        return;
                }
        }
}

/* What the end of either side means, once what it sent is through. */
static void ends(conn *c)
{
        struct evbuffer *cin = bufferevent_get_input(c->client), *cout = bufferevent_get_output(c->client);
        struct evbuffer *din = bufferevent_get_input(c->dp), *dout = bufferevent_get_output(c->dp);
        if (c->up == UP_RAW) {
                /* Each end passed on as a half-close (TLS has none: the client's ends it all). */
                if (c->client_eof && !c->dp_shut && evbuffer_get_length(cin) == 0 && evbuffer_get_length(dout) == 0) {
                        if (c->f->tls) {
                                c->closing = true;
                                return;
                        }
                        shutdown(bufferevent_getfd(c->dp), SHUT_WR);
                        c->dp_shut = true;
                }
                if (c->dp_eof && !c->client_shut && evbuffer_get_length(din) == 0 && evbuffer_get_length(cout) == 0) {
                        shutdown(bufferevent_getfd(c->client), SHUT_WR);
                        c->client_shut = true;
                }
                return;
        }
        if (c->up == UP_STOP && c->npending == 0) {
                reply(c, c->stop_status, c->stop_message ? c->stop_message : "malformed request");
                return;
        }
        if (c->dp_eof && evbuffer_get_length(din) == 0) {
                bool started = c->resp && sp_http_response_parser_bytes_seen(c->resp) > 0;
                if (c->resp && started)
                        (void)sp_http_response_parser_eof(c->resp); /* complete or short: either way the end */
                if (c->npending > 0 && !started)
                        reply(c, 502, "spacectl port-forward: the data plane closed the connection before answering");
                c->closing = true;
                return;
        }
        if (c->client_eof && evbuffer_get_length(cin) == 0 &&
            ((c->req && sp_http_parser_bytes_seen(c->req) > 0) || c->npending == 0))
                c->closing = true; /* a request cut short, or nothing left to answer */
}

/* Reading each side only while the other's queue has room. */
static void update_reads(conn *c)
{
        size_t dout = evbuffer_get_length(bufferevent_get_output(c->dp));
        size_t cout = evbuffer_get_length(bufferevent_get_output(c->client));
        bool up = !c->client_eof && dout < HIGH_WATER &&
                  (c->up == UP_RAW || (c->up == UP_HTTP && (c->req || c->npending < MAX_PENDING)));
        bool down = !c->dp_eof && cout < HIGH_WATER;
        if (up)
                bufferevent_enable(c->client, EV_READ);
        else
                bufferevent_disable(c->client, EV_READ);
        if (down)
                bufferevent_enable(c->dp, EV_READ);
        else
                bufferevent_disable(c->dp, EV_READ);
}

/* Every callback ends here: moves what can move, and frees the connection
 * when it is over (nothing touches it after). */
static void conn_step(conn *c)
{
        if (c->client_dead) {
                conn_free(c);
                return;
        }
        if (!c->closing && c->dp_error) {
                fprintf(stderr, "spacectl: port-forward: cannot reach the data plane at %s: %s\n", c->f->dp_url,
                        c->dp_error);
                bool started = c->up == UP_RAW || (c->resp && sp_http_response_parser_bytes_seen(c->resp) > 0);
                if (started) {
                        c->closing = true;
                } else {
                        char msg[512];
                        snprintf(msg, sizeof(msg), "spacectl port-forward: cannot reach the data plane at %s: %s",
                                 c->f->dp_url, c->dp_error);
                        reply(c, 502, msg);
                }
        }
        if (!c->closing) {
                pump_up(c);
                pump_down(c);
                pump_up(c);
                if (!c->closing)
                        ends(c);
        }
        if (c->closing) {
                bufferevent_disable(c->client, EV_READ);
                bufferevent_disable(c->dp, EV_READ | EV_WRITE);
                if (evbuffer_get_length(bufferevent_get_output(c->client)) == 0)
                        conn_free(c);
                return;
        }
        if (c->client_shut && c->dp_shut) {
                conn_free(c);
                return;
        }
        update_reads(c);
}

static void on_data(struct bufferevent *b, void *ud)
{
        (void)b;
        conn_step(ud);
}

static void on_client_event(struct bufferevent *b, short what, void *ud)
{
        (void)b;
        conn *c = ud;
        if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
                c->client_eof = true;
        if (what & BEV_EVENT_ERROR)
                c->client_dead = true; /* nothing can be written to it any more */
        conn_step(c);
}

static void nodelay(evutil_socket_t fd)
{
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void on_dp_event(struct bufferevent *b, short what, void *ud)
{
        conn *c = ud;
        if (what & BEV_EVENT_CONNECTED) {
                c->dp_connected = true;
                bufferevent_set_timeouts(b, NULL, NULL);
                nodelay(bufferevent_getfd(b));
        } else if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
                if (!c->dp_connected && !c->dp_error)
                        c->dp_error = dp_failure(c, what);
                c->dp_eof = true;
        }
        conn_step(c);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *ud)
{
        (void)l;
        (void)sa;
        (void)salen;
        fwd *f = ud;
        conn *c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                return;
        }
        c->f = f;
        c->client = bufferevent_socket_new(f->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!c->client) {
                close(fd);
                free(c);
                return;
        }
        nodelay(fd);
        if (f->tls) {
                SSL *ssl = tls_new(f);
                c->dp = ssl ? bufferevent_openssl_socket_new(f->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
                                                             BEV_OPT_CLOSE_ON_FREE)
                            : NULL;
                if (c->dp)
                        bufferevent_openssl_set_allow_dirty_shutdown(c->dp, 1);
                else if (ssl)
                        SSL_free(ssl);
        } else {
                c->dp = bufferevent_socket_new(f->base, -1, BEV_OPT_CLOSE_ON_FREE);
        }
        if (!c->dp) {
                bufferevent_free(c->client);
                free(c);
                return;
        }
        c->next = f->conns;
        if (f->conns)
                f->conns->prev = c;
        f->conns = c;
        if (++f->nconns >= MAX_CONNS) {
                evconnlistener_disable(f->listener);
                f->paused = true;
        }
        bufferevent_setcb(c->client, on_data, on_data, on_client_event, c);
        bufferevent_setcb(c->dp, on_data, on_data, on_dp_event, c);
        bufferevent_setwatermark(c->client, EV_READ, 0, HIGH_WATER);
        bufferevent_setwatermark(c->dp, EV_READ, 0, HIGH_WATER);
        struct timeval tv = {.tv_sec = CONNECT_TIMEOUT_S};
        bufferevent_set_timeouts(c->dp, &tv, &tv);
        if (bufferevent_socket_connect(c->dp, (struct sockaddr *)&f->addr, (int)f->addrlen) < 0 && !c->dp_error)
                c->dp_error = strdup("cannot connect");
        bufferevent_enable(c->dp, EV_WRITE);
        conn_step(c);
}

static void on_accept_error(struct evconnlistener *l, void *ud)
{
        (void)l;
        (void)ud;
        fprintf(stderr, "spacectl: port-forward: accept: %s\n", strerror(EVUTIL_SOCKET_ERROR()));
}

/* ---- the token ---- */

static int mint(fwd *f, char **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/sandboxes/", NULL);
        ctl_url_escape(&path, f->sandbox);
        sp_buf_append_str(&path, "/ingress/tokens", NULL);
        _cleanup_json_ json_object *body = json_object_new_object(), *resp = NULL;
        json_object_object_add(body, "ttl_s", json_object_new_int64(TOKEN_TTL_S));
        if (ctl_api(f->ctx, "POST", path.data, body, NULL, &resp, err) < 0)
                return -1;
        const char *tok = NULL;
        if (sp_json_get_string(resp, "token", true, CTL_DP_TOKEN_MAX, &tok, NULL) < 0 || !tok || !*tok)
                return ctl_fail(f->ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the API's ingress token answer has no token");
        for (const char *p = tok; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                        return ctl_fail(f->ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                        "the API handed out a token with a byte a header cannot carry");
        *ret = strdup(tok);
        return *ret ? 0 : ctl_fail(f->ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
}

static void on_renew(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        fwd *f = ud;
        _cleanup_error_ sp_error *e = NULL;
        char *tok = NULL;
        struct timeval tv = {.tv_sec = TOKEN_RENEW_S};
        if (mint(f, &tok, &e) < 0) {
                fprintf(stderr, "spacectl: port-forward: a new ingress token (again in %d s): %s\n", TOKEN_RETRY_S,
                        e ? e->message : "failed");
                f->ctx->exit_code = 0;
                tv.tv_sec = TOKEN_RETRY_S;
        } else {
                free(f->token);
                f->token = tok;
        }
        evtimer_add(f->renew, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *ud)
{
        (void)sig;
        (void)what;
        fwd *f = ud;
        event_base_loopbreak(f->base);
}

/* ---- the command ---- */

static void fwd_free(fwd *f)
{
        while (f->conns)
                conn_free(f->conns);
        if (f->listener)
                evconnlistener_free(f->listener);
        if (f->sigint)
                event_free(f->sigint);
        if (f->sigterm)
                event_free(f->sigterm);
        if (f->renew)
                event_free(f->renew);
        if (f->base)
                event_base_free(f->base);
        if (f->ssl_ctx)
                SSL_CTX_free(f->ssl_ctx);
        free(f->dp_url);
        free(f->prefix);
        free(f->token);
}

/* "REMOTE" or "LOCAL:REMOTE". */
static int parse_ports(ctl_ctx *ctx, const char *s, int *local, int *remote, sp_error **err)
{
        const char *colon = strchr(s, ':');
        char lbuf[16];
        if (colon && (size_t)(colon - s) >= sizeof(lbuf))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "'%s' is not [LOCAL:]REMOTE", s);
        int r = ctl_parse_port(ctx, colon ? colon + 1 : s, 1, "REMOTE", remote, err);
        if (r < 0)
                return r;
        if (!colon) {
                *local = *remote;
                return 0;
        }
        snprintf(lbuf, sizeof(lbuf), "%.*s", (int)(colon - s), s);
        return ctl_parse_port(ctx, lbuf, 0, "LOCAL", local, err);
}

/* Binds the local port; *ret_port is the one bound (LOCAL 0 picks one). */
static int listen_local(fwd *f, const char *address, int port, char *shown, size_t shown_len, int *ret_port,
                        sp_error **err)
{
        char ps[8];
        snprintf(ps, sizeof(ps), "%d", port);
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
        int g = getaddrinfo(address, ps, &hints, &res);
        if (g != 0)
                return ctl_fail(f->ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--address %s: %s", address,
                                gai_strerror(g));
        f->listener = evconnlistener_new_bind(f->base, on_accept, f,
                                              LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
                                              res->ai_addr, (int)res->ai_addrlen);
        int e = errno;
        freeaddrinfo(res);
        if (!f->listener)
                return ctl_fail(f->ctx, CTL_EXIT_API, err, SP_E_IO, "cannot listen on %s:%d: %s", address, port,
                                strerror(e));
        evconnlistener_set_error_cb(f->listener, on_accept_error);
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char host[INET6_ADDRSTRLEN] = "?";
        getsockname(evconnlistener_get_fd(f->listener), (struct sockaddr *)&ss, &sl);
        if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
                inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
                *ret_port = ntohs(s6->sin6_port);
                snprintf(shown, shown_len, "[%s]", host);
        } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
                inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
                *ret_port = ntohs(s4->sin_port);
                snprintf(shown, shown_len, "%s", host);
        }
        return 0;
}

static int forward(fwd *f, const ctl_args *a, sp_error **err)
{
        ctl_ctx *ctx = f->ctx;
        int local, remote;
        int r = parse_ports(ctx, a->pos[1], &local, &remote, err);
        if (r < 0)
                return r;
        const char *address = ctl_arg(a, "address") ? ctl_arg(a, "address") : "127.0.0.1";

        /* The sandbox: its mode, and where the data plane has its port. */
        _cleanup_json_ json_object *s = NULL;
        r = ctl_api_on(ctx, "GET", "/v1/sandboxes/", f->sandbox, "", &s, err);
        if (r < 0)
                return r;
        json_object *ing = NULL;
        const char *path_t = NULL;
        if (!json_object_object_get_ex(s, "ingress", &ing) ||
            sp_json_get_string(ing, "path_url", true, MAX_URL, &path_t, NULL) < 0 || !path_t ||
            !strstr(path_t, "{port}"))
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the API's sandbox has no ingress URLs (a control plane without ingress?)");
        bool token = strcmp(ctl_jstr(ing, "mode"), "public") != 0;
        _cleanup_free_ char *path_url = ctl_ingress_url(path_t, remote);
        if (!path_url)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
        /* The URL checked (and the CA file loaded) as exec and cp would. */
        _cleanup_free_ char *target = NULL;
        sp_http_client *check = ctl_dp_client(ctx, path_url, &target, err);
        if (!check)
                return -1;
        sp_http_client_free(check);
        const char *v1 = NULL;
        f->dp_url = ctl_dp_base(ctx, path_url, &v1, err);
        if (!f->dp_url)
                return -1;
        _cleanup_buf_ sp_buf prefix = SP_BUF_INIT;
        parse_base(f, f->dp_url, &prefix);
        size_t tlen = strlen(target);
        while (tlen > 0 && target[tlen - 1] == '/')
                tlen--;
        sp_buf_append(&prefix, target, tlen, NULL);
        f->prefix = strndup(prefix.data, prefix.len);
        if (!f->prefix)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
        if (f->tls && tls_init(f, err) < 0)
                return -1;
        if (dp_resolve(f, err) < 0)
                return -1;
        if (token && mint(f, &f->token, err) < 0)
                return -1;

        f->base = event_base_new();
        if (!f->base)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "event_base_new failed");
        char shown[INET6_ADDRSTRLEN + 2];
        int port = 0;
        if (listen_local(f, address, local, shown, sizeof(shown), &port, err) < 0)
                return -1;
        f->sigint = evsignal_new(f->base, SIGINT, on_signal, f);
        f->sigterm = evsignal_new(f->base, SIGTERM, on_signal, f);
        f->renew = evtimer_new(f->base, on_renew, f);
        struct timeval tv = {.tv_sec = TOKEN_RENEW_S};
        if (!f->sigint || !f->sigterm || !f->renew || evsignal_add(f->sigint, NULL) < 0 ||
            evsignal_add(f->sigterm, NULL) < 0 || (f->token && evtimer_add(f->renew, &tv) < 0))
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "cannot set up the event loop");

        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "address", json_object_new_string(shown));
                json_object_object_add(o, "port", json_object_new_int(port));
                json_object_object_add(o, "sandbox", json_object_new_string(f->sandbox));
                json_object_object_add(o, "remote_port", json_object_new_int(remote));
                fprintf(ctx->out, "%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        } else {
                fprintf(ctx->out, "Forwarding from %s:%d -> %s:%d\n", shown, port, f->sandbox, remote);
        }
        fflush(ctx->out);
        if (event_base_dispatch(f->base) < 0)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_INTERNAL, "the event loop failed");
        return 0;
}

int ctl_run_port_forward(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        fwd f = {.ctx = ctx, .sandbox = a->pos[0]};
        int r = forward(&f, a, err);
        fwd_free(&f);
        return r;
}
