/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RPC server: listeners, connections (TLS handshake, peer identity, one
 * nghttp2 server session each) and request dispatch. The per-call API and the
 * call state machine live in rpc_server_call.c.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/bufferevent_ssl.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "rpc_server_internal.h"

#define MAX_LISTENERS 4

struct sp_rpc_server {
        struct event_base *base;
        SSL_CTX *ctx;
        sp_rpc_identity_fn identity_fn;
        void *identity_ud;
        struct evconnlistener *listeners[MAX_LISTENERS];
        size_t nlisteners;
        int port;
        sp__rpc_method **methods;
        size_t nmethods;
        sp__rpc_conn *conns;
        sp_rpc_call *calls; /* every call handle still allocated */
        bool shutting_down;
        sp_rpc_server_stats stats;
};

/* ---- methods ---------------------------------------------------------------- */

int sp_rpc_server_register(sp_rpc_server *srv, const sp_rpc_method *m, sp_error **err)
{
        if (!m || !m->name || !m->handler || !sp__rpc_method_name_valid(m->name, strlen(m->name)))
                return sp_error_set(err, SP_E_INVALID, "bad method registration '%s'", m && m->name ? m->name : "");
        if (sp__rpc_server_find_method(srv, m->name, strlen(m->name)))
                return sp_error_set(err, SP_E_CONFLICT, "method %s is already registered", m->name);
        if (srv->nmethods >= SP_RPC_MAX_METHODS)
                return sp_error_set(err, SP_E_LIMIT, "too many methods");
        sp__rpc_method **n = reallocarray(srv->methods, srv->nmethods + 1, sizeof(*n));
        if (!n)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        srv->methods = n;
        sp__rpc_method *e = calloc(1, sizeof(*e));
        if (!e)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        n[srv->nmethods] = e;
        memcpy(e->name, m->name, strlen(m->name) + 1);
        e->roles = m->roles;
        e->streaming = m->streaming;
        e->handler = m->handler;
        e->userdata = m->userdata;
        srv->nmethods++;
        return 0;
}

const sp__rpc_method *sp__rpc_server_find_method(const sp_rpc_server *srv, const char *name, size_t len)
{
        for (size_t i = 0; i < srv->nmethods; i++)
                if (strlen(srv->methods[i]->name) == len && memcmp(srv->methods[i]->name, name, len) == 0)
                        return srv->methods[i];
        return NULL;
}

/* ---- bookkeeping shared with rpc_server_call.c ---------------------------- */

struct event_base *sp__rpc_server_base(const sp_rpc_server *srv)
{
        return srv->base;
}

void sp__rpc_server_call_born(sp_rpc_server *srv, sp_rpc_call *call)
{
        call->all_next = srv->calls;
        if (srv->calls)
                srv->calls->all_prev = call;
        srv->calls = call;
        srv->stats.calls_open++;
}

void sp__rpc_server_call_gone(sp_rpc_server *srv, sp_rpc_call *call)
{
        if (call->all_prev)
                call->all_prev->all_next = call->all_next;
        else
                srv->calls = call->all_next;
        if (call->all_next)
                call->all_next->all_prev = call->all_prev;
        srv->stats.calls_open--;
}

void sp__rpc_server_call_started(sp_rpc_server *srv)
{
        srv->stats.calls_started++;
}

/* ---- connections ------------------------------------------------------------ */

static void conn_free(sp__rpc_conn *c);

static void conn_link(sp_rpc_server *srv, sp__rpc_conn *c)
{
        c->next = srv->conns;
        if (srv->conns)
                srv->conns->prev = c;
        srv->conns = c;
        srv->stats.connections_open++;
        srv->stats.connections_accepted++;
}

static void conn_unlink(sp__rpc_conn *c)
{
        sp_rpc_server *srv = c->srv;
        if (c->prev)
                c->prev->next = c->next;
        else
                srv->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        srv->stats.connections_open--;
}

/* Writes what nghttp2 has, then closes the connection if the session is over. */
static void conn_flush(sp__rpc_conn *c)
{
        if (!c->h2.session)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (sp__rpc_h2_send(&c->h2, &e) < 0) {
                sp_log_debug("rpc server: %s", e->message);
                conn_free(c);
                return;
        }
        if (sp__rpc_h2_finished(&c->h2) && evbuffer_get_length(bufferevent_get_output(c->h2.bev)) == 0)
                conn_free(c);
}

static void conn_update_idle(sp__rpc_conn *c)
{
        if (!c->idle)
                return;
        if (c->calls || !c->h2.session) {
                evtimer_del(c->idle);
                return;
        }
        if (!evtimer_pending(c->idle, NULL)) {
                struct timeval tv = {SP_RPC_IDLE_TIMEOUT_MS / 1000, (SP_RPC_IDLE_TIMEOUT_MS % 1000) * 1000};
                evtimer_add(c->idle, &tv);
        }
}

static void conn_kick_cb(evutil_socket_t fd, short what, void *arg)
{
        sp__rpc_conn *c = arg;
        sp__rpc_conn_process_calls(c);
        conn_update_idle(c);
        conn_flush(c);
}

void sp__rpc_conn_kick(sp__rpc_conn *c)
{
        if (c && c->kick)
                event_active(c->kick, EV_WRITE, 0);
}

static void conn_idle_cb(evutil_socket_t fd, short what, void *arg)
{
        sp__rpc_conn *c = arg;
        if (c->h2.session && !c->calls) {
                nghttp2_session_terminate_session(c->h2.session, NGHTTP2_NO_ERROR);
                conn_flush(c);
        }
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
        sp__rpc_conn *c = arg;
        if (!c->h2.session)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (sp__rpc_h2_recv(&c->h2, &e) < 0) {
                sp_log_debug("rpc server: %s", e->message);
                /* nghttp2 has queued a GOAWAY for protocol errors: try to send it. */
                sp__rpc_h2_send(&c->h2, NULL);
                conn_free(c);
                return;
        }
        conn_flush(c);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
        conn_flush(arg);
}

static int conn_established(sp__rpc_conn *c, sp_error **err)
{
        sp_rpc_server *srv = c->srv;
        SSL *ssl = srv->ctx ? bufferevent_openssl_get_ssl(c->h2.bev) : NULL;
        if (ssl) {
                const unsigned char *alpn = NULL;
                unsigned alpn_len = 0;
                SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
                if (alpn_len && !(alpn_len == 2 && memcmp(alpn, "h2", 2) == 0))
                        return sp_error_set(err, SP_E_UNSUPPORTED, "peer did not negotiate h2");
                if (srv->identity_fn) {
                        unsigned role = 0;
                        char *name = NULL;
                        if (srv->identity_fn(ssl, srv->identity_ud, &role, &name, err) < 0)
                                return sp_error_wrap(err, "peer identity");
                        if (role & SP_RPC_UNAUTHENTICATED) {
                                free(name);
                                return sp_error_set(err, SP_E_INTERNAL, "identity hook returned role 0x%x", role);
                        }
                        c->role = role;
                        c->peer_name = name;
                }
                (void)sp_tls_peer_serial(ssl, c->peer_serial);
        }

        nghttp2_session_callbacks *cbs = NULL;
        if (nghttp2_session_callbacks_new(&cbs) != 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        sp__rpc_server_set_callbacks(cbs);
        nghttp2_option *opt = sp__rpc_h2_options(true);
        int rv = opt ? nghttp2_session_server_new2(&c->h2.session, cbs, &c->h2, opt) : NGHTTP2_ERR_NOMEM;
        nghttp2_option_del(opt);
        nghttp2_session_callbacks_del(cbs);
        if (rv != 0)
                return sp_error_set(err, SP_E_LIMIT, "HTTP/2 session: %s", nghttp2_strerror(rv));
        if (sp__rpc_h2_start(&c->h2, true, err) < 0)
                return -SP_E_INTERNAL;
        if (srv->shutting_down)
                nghttp2_submit_goaway(c->h2.session, NGHTTP2_FLAG_NONE, 0, NGHTTP2_NO_ERROR, NULL, 0);
        bufferevent_set_timeouts(c->h2.bev, NULL, NULL);
        conn_update_idle(c);
        return 0;
}

static void conn_event_cb(struct bufferevent *bev, short events, void *arg)
{
        sp__rpc_conn *c = arg;
        if (events & BEV_EVENT_CONNECTED) {
                _cleanup_error_ sp_error *e = NULL;
                if (conn_established(c, &e) < 0) {
                        sp_log_debug("rpc server: refusing connection: %s", e->message);
                        conn_free(c);
                        return;
                }
                /* Data may have arrived with the end of the handshake. */
                conn_read_cb(bev, c);
                return;
        }
        if (events & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) {
                sp_log_debug("rpc server: connection closed (events 0x%x)", (unsigned)events);
                conn_free(c);
        }
}

static void conn_free(sp__rpc_conn *c)
{
        if (!c)
                return;
        /* No nghttp2 callback runs after this; calls see a dead session. */
        nghttp2_session_del(c->h2.session);
        c->h2.session = NULL;
        sp__rpc_conn_close_calls(c);
        conn_unlink(c);
        if (c->kick)
                event_free(c->kick);
        if (c->idle)
                event_free(c->idle);
        if (c->h2.bev)
                bufferevent_free(c->h2.bev);
        free(c->peer_name);
        free(c);
}

static int conn_new(sp_rpc_server *srv, evutil_socket_t fd, sp_error **err)
{
        if (srv->stats.connections_open >= SP_RPC_MAX_CONNECTIONS) {
                close(fd);
                return sp_error_set(err, SP_E_LIMIT, "too many connections");
        }
        evutil_make_socket_nonblocking(fd);
        evutil_make_socket_closeonexec(fd);
        sp__rpc_conn *c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        c->srv = srv;
        conn_link(srv, c);
        if (srv->ctx) {
                SSL *ssl = SSL_new(srv->ctx);
                if (ssl)
                        c->h2.bev = bufferevent_openssl_socket_new(srv->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                                   BEV_OPT_CLOSE_ON_FREE);
                if (!ssl)
                        close(fd);
                /* On failure libevent may or may not have freed ssl and closed
                 * fd already (out of memory only): leave both rather than risk
                 * a double free. */
                if (c->h2.bev)
                        bufferevent_openssl_set_allow_dirty_shutdown(c->h2.bev, 1);
        } else {
                c->h2.bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
                if (!c->h2.bev)
                        close(fd);
        }
        c->kick = event_new(srv->base, -1, 0, conn_kick_cb, c);
        c->idle = evtimer_new(srv->base, conn_idle_cb, c);
        c->h2.kick = c->kick;
        if (!c->h2.bev || !c->kick || !c->idle) {
                conn_free(c);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        bufferevent_setcb(c->h2.bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
        bufferevent_setwatermark(c->h2.bev, EV_WRITE, SP__RPC_OUTPUT_LIMIT / 2, 0);
        if (srv->ctx) {
                struct timeval tv = {SP_RPC_HANDSHAKE_TIMEOUT_MS / 1000, 0};
                bufferevent_set_timeouts(c->h2.bev, &tv, &tv);
        } else if (conn_established(c, err) < 0) {
                conn_free(c);
                return -SP_E_INTERNAL;
        }
        bufferevent_enable(c->h2.bev, EV_READ | EV_WRITE);
        if (!srv->ctx)
                conn_flush(c);
        return 0;
}

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *arg)
{
        _cleanup_error_ sp_error *e = NULL;
        /* Small frames must not wait for Nagle and delayed ACKs (40 ms each way). */
        int one = 1;
        if (sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6))
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (conn_new(arg, fd, &e) < 0)
                sp_log_debug("rpc server: %s", e->message);
}

int sp_rpc_server_adopt_fd(sp_rpc_server *srv, int fd, sp_error **err)
{
        if (fd < 0)
                return sp_error_set(err, SP_E_INVALID, "bad file descriptor");
        return conn_new(srv, fd, err);
}

/* ---- server ----------------------------------------------------------------- */

sp_rpc_server *sp_rpc_server_new(struct event_base *base, SSL_CTX *ctx, sp_error **err)
{
        if (!base) {
                sp_error_set(err, SP_E_INVALID, "no event base");
                return NULL;
        }
        sp_rpc_server *srv = calloc(1, sizeof(*srv));
        if (!srv) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        sp__rpc_ignore_sigpipe();
        srv->base = base;
        srv->port = -1;
        if (ctx) {
                SSL_CTX_up_ref(ctx);
                srv->ctx = ctx;
        }
        return srv;
}

void sp_rpc_server_set_identity_fn(sp_rpc_server *srv, sp_rpc_identity_fn fn, void *userdata)
{
        srv->identity_fn = fn;
        srv->identity_ud = userdata;
}

static void close_listeners(sp_rpc_server *srv)
{
        for (size_t i = 0; i < srv->nlisteners; i++)
                evconnlistener_free(srv->listeners[i]);
        srv->nlisteners = 0;
}

void sp_rpc_server_free(sp_rpc_server *srv)
{
        if (!srv)
                return;
        close_listeners(srv);
        while (srv->conns)
                conn_free(srv->conns);
        /* Handles that handlers still hold outlive the server. */
        for (sp_rpc_call *call = srv->calls; call; call = call->all_next)
                call->srv = NULL;
        if (srv->ctx)
                SSL_CTX_free(srv->ctx);
        for (size_t i = 0; i < srv->nmethods; i++)
                free(srv->methods[i]);
        free(srv->methods);
        free(srv);
}

int sp_rpc_server_listen(sp_rpc_server *srv, const char *addr, sp_error **err)
{
        sp__rpc_addr a;
        if (sp__rpc_addr_parse(addr, &a, err) < 0)
                return -SP_E_INVALID;
        if (!a.is_unix && !a.numeric)
                return sp_error_set(err, SP_E_INVALID, "listen address '%s' needs a numeric host", addr);
        if (srv->nlisteners >= MAX_LISTENERS)
                return sp_error_set(err, SP_E_LIMIT, "too many listeners");
        if (a.is_unix) {
                const char *path = ((struct sockaddr_un *)&a.ss)->sun_path;
                struct stat st;
                if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                        unlink(path);
        }
        unsigned flags = LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC | (a.is_unix ? 0 : LEV_OPT_REUSEABLE);
        /* A control plane's fleet reconnects at once after a restart: a queue of 1024 (capped by the
         * kernel's somaxconn) rather than libevent's 128. */
        struct evconnlistener *l =
                evconnlistener_new_bind(srv->base, accept_cb, srv, flags, 1024, (struct sockaddr *)&a.ss, a.sslen);
        if (!l)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "listen on %s", addr);
        srv->listeners[srv->nlisteners++] = l;
        if (!a.is_unix && srv->port < 0) {
                struct sockaddr_storage ss;
                socklen_t len = sizeof(ss);
                if (getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&ss, &len) == 0)
                        srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                                   : ((struct sockaddr_in *)&ss)->sin_port);
        }
        return 0;
}

int sp_rpc_server_port(const sp_rpc_server *srv)
{
        return srv->port;
}

void sp_rpc_server_shutdown(sp_rpc_server *srv)
{
        srv->shutting_down = true;
        close_listeners(srv);
        for (sp__rpc_conn *c = srv->conns; c; c = c->next) {
                if (!c->h2.session)
                        continue;
                nghttp2_submit_goaway(c->h2.session, NGHTTP2_FLAG_NONE,
                                      nghttp2_session_get_last_proc_stream_id(c->h2.session), NGHTTP2_NO_ERROR, NULL,
                                      0);
                sp__rpc_conn_kick(c);
        }
}

void sp_rpc_server_get_stats(const sp_rpc_server *srv, sp_rpc_server_stats *ret)
{
        *ret = srv->stats;
}
