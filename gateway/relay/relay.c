/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The TCP relay. A sandbox's connection arrives here redirected by the
 * worker's nftables table; SO_ORIGINAL_DST says where it was going. The
 * first bytes say what it names — a TLS ClientHello's SNI, a plain HTTP
 * request's Host, or nothing (a protocol whose server speaks first, after
 * --sniff-timeout of silence) — and the sandbox's profile decides
 * (policy/table.h). Allowed: the gateway dials the destination itself, sends
 * the bytes it read and relays both ways, half-closes included, with
 * backpressure. Refused: reset.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gw.h"
#include "relay/relay_internal.h"
#include "space/log.h"
#include "space/time.h"
#include "wire/http_host.h"
#include "wire/sni.h"

void gw__bound_buffers(int fd)
{
        int v = SOCK_BUF;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
}

void gw__audit_conn(conn *c, gw_sandbox *sb, const char *phase, const char *detail)
{
        gw_audit(c->r->g, &(gw_audit_rec){.kind = "tcp",
                                          .phase = phase,
                                          .sb = sb,
                                          .src = c->src,
                                          .name = c->name[0] ? c->name : NULL,
                                          .proto = c->proto,
                                          .dst = c->dst,
                                          .port = c->port,
                                          .bytes_out = c->out,
                                          .bytes_in = c->in,
                                          .d = c->d,
                                          .detail = detail});
}

/* The connection is decided (or gone): it no longer waits. */
static void unpend(conn *c, gw_sandbox *sb)
{
        if (!c->pending)
                return;
        c->pending = false;
        c->r->g->counters.pending_conns--;
        if (sb && sb->pending > 0)
                sb->pending--;
}

void gw__conn_close(conn *c, bool rst)
{
        gw_relay *r = c->r;
        gw *g = r->g;
        gw_sandbox *sb = gw_table_find(g->table, c->src);
        unpend(c, sb);
        if (c->counted) {
                if (sb)
                        gw_conn_done(sb);
                gw__audit_conn(c, sb, "close", NULL);
                g->counters.open_conns--;
        }
        if (c->prev)
                c->prev->next = c->next;
        else
                r->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        if (c->timer)
                event_free(c->timer);
        if (c->idle)
                event_free(c->idle);
        if (c->down) {
                if (rst) {
                        struct linger lg = {.l_onoff = 1, .l_linger = 0};
                        setsockopt(c->down_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                }
                bufferevent_free(c->down); /* a TLS filter frees the socket's bufferevent with it */
        }
        if (c->up)
                bufferevent_free(c->up);
        gw__term_free(c);
        free(c);
}

/* ---- relaying ---- */

static struct bufferevent *other(conn *c, struct bufferevent *b)
{
        return b == c->down ? c->up : c->down;
}

/* Both ways done and drained: the end. */
static void maybe_done(conn *c)
{
        if (c->down_eof && c->up_eof && c->down_shut && c->up_shut)
                gw__conn_close(c, false);
}

/* After the peer of `to` sent EOF and what it sent is written: shut to's write half. */
static void shut_if_drained(conn *c, struct bufferevent *to)
{
        bool from_eof = to == c->up ? c->down_eof : c->up_eof;
        bool *shut = to == c->up ? &c->up_shut : &c->down_shut;
        if (!from_eof || *shut || evbuffer_get_length(bufferevent_get_output(to)) > 0)
                return;
        shutdown(bufferevent_getfd(to), SHUT_WR);
        *shut = true;
}

/* libevent 2.1 reads at most 4 KiB from a socket per call (EVBUFFER_MAX_READ,
 * whatever bufferevent_set_max_single_read() says), and a bufferevent reads
 * once per turn of the loop: a download through the gateway ran at a sixth of
 * the same download without it (bench/run net). After the bufferevent's read,
 * this reads what else is ready straight into the other side's output, in
 * RELAY_CHUNK reads, up to HIGH_WATER. EOF and errors are left to the
 * bufferevent, which reads them again on its next turn. Returns the bytes. */
static size_t read_more(struct bufferevent *from, struct evbuffer *out)
{
        size_t total = 0;
        while (evbuffer_get_length(out) < HIGH_WATER) {
                struct evbuffer_iovec v[2];
                int nv = evbuffer_reserve_space(out, RELAY_CHUNK, v, 2);
                if (nv <= 0)
                        break;
                size_t room = 0;
                for (int i = 0; i < nv; i++)
                        room += v[i].iov_len;
                ssize_t n = readv(bufferevent_getfd(from), (struct iovec *)v, nv);
                if (n <= 0) {
                        evbuffer_commit_space(out, v, 0);
                        break;
                }
                size_t left = (size_t)n;
                int used = 0;
                for (; used < nv && left > 0; used++) {
                        if (v[used].iov_len > left)
                                v[used].iov_len = left;
                        left -= v[used].iov_len;
                }
                evbuffer_commit_space(out, v, used);
                total += (size_t)n;
                if ((size_t)n < room)
                        break; /* drained */
        }
        return total;
}

static void relay_read(struct bufferevent *from, void *ud)
{
        conn *c = ud;
        struct bufferevent *to = other(c, from);
        if (!to)
                return;
        struct evbuffer *in = bufferevent_get_input(from);
        size_t n = evbuffer_get_length(in);
        c->last_us = sp_now_mono_us();
        evbuffer_add_buffer(bufferevent_get_output(to), in);
        if (!c->term && !(from == c->down ? c->down_eof : c->up_eof))
                n += read_more(from, bufferevent_get_output(to));
        if (from == c->down) {
                c->out += n;
                c->r->g->counters.bytes_out += n;
        } else {
                c->in += n;
                c->r->g->counters.bytes_in += n;
        }
        if (evbuffer_get_length(bufferevent_get_output(to)) >= HIGH_WATER)
                bufferevent_disable(from, EV_READ);
}

static void relay_write(struct bufferevent *to, void *ud)
{
        conn *c = ud;
        struct bufferevent *from = other(c, to);
        if (from && evbuffer_get_length(bufferevent_get_output(to)) < HIGH_WATER / 2 &&
            !(from == c->down ? c->down_eof : c->up_eof))
                bufferevent_enable(from, EV_READ);
        shut_if_drained(c, to);
        maybe_done(c);
}

static void relay_event(struct bufferevent *b, short what, void *ud)
{
        conn *c = ud;
        if (what & BEV_EVENT_ERROR) {
                gw__conn_close(c, true);
                return;
        }
        if (what & BEV_EVENT_EOF) {
                if (b == c->down)
                        c->down_eof = true;
                else
                        c->up_eof = true;
                relay_read(b, c); /* what came with the EOF */
                bufferevent_disable(b, EV_READ);
                shut_if_drained(c, other(c, b));
                maybe_done(c);
        }
}

/* ---- the upstream ---- */

void gw__arm_idle(conn *c, int64_t after_us)
{
        struct timeval tv = {.tv_sec = after_us / 1000000, .tv_usec = after_us % 1000000};
        evtimer_add(c->idle, &tv);
}

/* No bytes either way for idle_timeout_ms: the connection ends (its slot of
 * the sandbox's concurrent connections with it). */
void gw__idle_check(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        conn *c = ud;
        int64_t left = c->last_us + (int64_t)c->r->g->cfg.idle_timeout_ms * 1000 - sp_now_mono_us();
        if (left > 0) {
                gw__arm_idle(c, left);
                return;
        }
        sp_log_debug("relay: closing a connection idle for %d s", c->r->g->cfg.idle_timeout_ms / 1000);
        gw__conn_close(c, true);
}

static void up_event(struct bufferevent *b, short what, void *ud)
{
        conn *c = ud;
        if (what & BEV_EVENT_CONNECTED) {
                c->last_us = sp_now_mono_us();
                if (c->r->g->cfg.idle_timeout_ms > 0 && (c->idle = evtimer_new(c->r->g->base, gw__idle_check, c)))
                        gw__arm_idle(c, (int64_t)c->r->g->cfg.idle_timeout_ms * 1000);
                bufferevent_setcb(c->up, relay_read, relay_write, relay_event, c);
                bufferevent_setcb(c->down, relay_read, relay_write, relay_event, c);
                bufferevent_set_max_single_write(c->up, RELAY_CHUNK);
                bufferevent_set_max_single_write(c->down, RELAY_CHUNK);
                /* The bytes read before deciding go first. */
                relay_read(c->down, c);
                bufferevent_enable(c->up, EV_READ | EV_WRITE);
                bufferevent_enable(c->down, EV_READ | EV_WRITE);
                return;
        }
        (void)b;
        c->r->g->counters.tcp_upstream_errors++;
        char dst[INET_ADDRSTRLEN];
        struct in_addr a = {.s_addr = htonl(c->dst)};
        inet_ntop(AF_INET, &a, dst, sizeof(dst));
        sp_log_info("relay: %s:%u: %s", dst, (unsigned)c->port,
                    (what & BEV_EVENT_TIMEOUT) ? "connect timed out" : "cannot connect");
        gw__conn_close(c, true);
}

static void dial(conn *c)
{
        gw *g = c->r->g;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd >= 0)
                gw__bound_buffers(fd);
        c->up = fd < 0 ? NULL : bufferevent_socket_new(g->base, fd, BEV_OPT_CLOSE_ON_FREE);
        if (!c->up) {
                if (fd >= 0)
                        close(fd);
                gw__conn_close(c, true);
                return;
        }
        bufferevent_setcb(c->up, NULL, NULL, up_event, c);
        struct timeval tv = {.tv_sec = g->cfg.connect_timeout_ms / 1000,
                             .tv_usec = (g->cfg.connect_timeout_ms % 1000) * 1000};
        bufferevent_set_timeouts(c->up, NULL, &tv);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(c->port), .sin_addr.s_addr = htonl(c->dst)};
        bufferevent_disable(c->down, EV_READ);
        if (bufferevent_socket_connect(c->up, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                g->counters.tcp_upstream_errors++;
                gw__conn_close(c, true);
        }
}

/* ---- deciding ---- */

static bool http_method_like(const uint8_t *p, size_t n)
{
        static const char *const methods[] = {"GET ",     "POST ",  "PUT ",   "HEAD ",    "DELETE ",
                                              "OPTIONS ", "PATCH ", "TRACE ", "CONNECT ", NULL};
        for (size_t i = 0; methods[i]; i++) {
                size_t m = strlen(methods[i]);
                size_t k = n < m ? n : m;
                if (k > 0 && strncasecmp((const char *)p, methods[i], k) == 0)
                        return true;
        }
        return false;
}

/* Looks at the first bytes: 1 decided (c->name, c->proto, *refusal set), 0
 * wait for more. */
static int sniff(conn *c, bool timed_out, const char **refusal, const char **detail)
{
        struct evbuffer *in = bufferevent_get_input(c->down);
        size_t n = evbuffer_get_length(in);
        *refusal = NULL;
        *detail = NULL;
        if (n == 0) {
                if (!timed_out)
                        return 0;
                c->proto = "other"; /* the server speaks first */
                return 1;
        }
        size_t look = n < GW_SNI_MAX ? n : GW_SNI_MAX;
        const uint8_t *p = evbuffer_pullup(in, (ev_ssize_t)look);
        if (gw_sni_is_tls(p, look) == 1) {
                c->proto = "tls";
                gw_sni_info si;
                switch (gw_sni_parse(p, look, &si)) {
                case GW_SNI_NEED_MORE:
                        if (!timed_out && look < GW_SNI_MAX)
                                return 0;
                        *refusal = "tls-clienthello";
                        *detail = timed_out ? "the ClientHello did not arrive in time" : "the ClientHello is too large";
                        return 1;
                case GW_SNI_OK:
                        snprintf(c->name, sizeof(c->name), "%s", si.name);
                        return 1;
                case GW_SNI_NO_SNI:
                        return 1;
                default:
                        *refusal = "tls-clienthello";
                        *detail = si.reason;
                        return 1;
                }
        }
        if (http_method_like(p, look)) {
                c->proto = "http";
                gw_http_request hr;
                switch (gw_http_host_parse(p, look, 0, &hr)) {
                case GW_HTTP_NEED_MORE:
                        if (!timed_out && look < GW_HTTP_MAX_HEAD)
                                return 0;
                        *refusal = "http-request";
                        *detail =
                                timed_out ? "the request head did not arrive in time" : "the request head is too large";
                        return 1;
                case GW_HTTP_OK:
                        if (!hr.host_is_ip)
                                snprintf(c->name, sizeof(c->name), "%s", hr.host);
                        return 1;
                default:
                        *refusal = "http-request";
                        *detail = hr.reason;
                        return 1;
                }
        }
        c->proto = "other";
        return 1;
}

static void decide(conn *c, bool timed_out)
{
        const char *refusal, *detail;
        if (!sniff(c, timed_out, &refusal, &detail))
                return;
        if (c->timer) {
                event_free(c->timer);
                c->timer = NULL;
        }
        gw *g = c->r->g;
        gw_sandbox *sb = gw_table_find(g->table, c->src);
        unpend(c, sb);
        if (!sb) {
                gw__conn_close(c, true);
                return;
        }
        int64_t now = sp_now_mono_us();
        gw_decision d =
                gw_decide_tcp(g->table, sb, c->dst, c->port, gw_dst_class(g, c->dst), c->name[0] ? c->name : NULL, now);
        if (d.allow && refusal) {
                gw_conn_done(sb);
                d = gw_decision_soft(sb, refusal);
                if (d.allow)
                        sb->conns++;
        }
        c->d = d;
        gw__audit_conn(c, sb, "open", detail);
        if (!d.allow) {
                gw__conn_close(c, true);
                return;
        }
        c->counted = true;
        g->counters.open_conns++;
        if (gw__term_wanted(c, sb))
                gw__term_start(c, sb);
        else
                dial(c);
}

static void sniff_read(struct bufferevent *b, void *ud)
{
        (void)b;
        decide(ud, false);
}

static void sniff_event(struct bufferevent *b, short what, void *ud)
{
        (void)b;
        conn *c = ud;
        if (what & BEV_EVENT_EOF) {
                /* Closed before it said enough: decide on what there is. */
                decide(c, true);
                return;
        }
        gw__conn_close(c, true);
}

static void sniff_timeout(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        decide(ud, true);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *ud)
{
        (void)l;
        (void)salen;
        gw_relay *r = ud;
        gw *g = r->g;
        struct sockaddr_in dst;
        socklen_t dl = sizeof(dst);
        if (sa->sa_family != AF_INET || getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl) < 0) {
                /* Not redirected to us: nothing to relay. */
                close(fd);
                return;
        }
        uint32_t src = ntohl(((struct sockaddr_in *)sa)->sin_addr.s_addr);
        gw_sandbox *sb = gw_table_find(g->table, src);
        if (!sb) {
                g->counters.unknown_source++;
                gw_audit(g, &(gw_audit_rec){.kind = "tcp",
                                            .phase = "open",
                                            .src = src,
                                            .dst = ntohl(dst.sin_addr.s_addr),
                                            .port = ntohs(dst.sin_port),
                                            .d = {.rule = "unknown-sandbox"}});
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                close(fd);
                return;
        }
        if (g->cfg.max_connections && g->counters.open_conns + g->counters.pending_conns >= g->cfg.max_connections) {
                sp_log_warn("relay: %u connections open and %u undecided: refusing more",
                            (unsigned)g->counters.open_conns, (unsigned)g->counters.pending_conns);
                close(fd);
                return;
        }
        /* Connections whose first bytes are awaited hold a descriptor each
         * for up to the sniff timeout: a sandbox may have as many waiting as
         * it may have open, and no more (in every mode: it is the gateway's
         * own resource). */
        uint32_t max = gw_table_limits(g->table)->max_conns;
        if (max && sb->pending >= max) {
                gw_audit(g, &(gw_audit_rec){.kind = "tcp",
                                            .phase = "open",
                                            .sb = sb,
                                            .src = src,
                                            .dst = ntohl(dst.sin_addr.s_addr),
                                            .port = ntohs(dst.sin_port),
                                            .d = {.rule = "conn-pending"}});
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
                close(fd);
                return;
        }
        conn *c = calloc(1, sizeof(*c));
        if (!c) {
                close(fd);
                return;
        }
        c->r = r;
        c->src = src;
        c->dst = ntohl(dst.sin_addr.s_addr);
        c->port = ntohs(dst.sin_port);
        c->pending = true;
        sb->pending++;
        g->counters.pending_conns++;
        c->next = r->conns;
        if (r->conns)
                r->conns->prev = c;
        r->conns = c;
        gw__bound_buffers(fd);
        c->down_fd = fd;
        c->down = bufferevent_socket_new(g->base, fd, BEV_OPT_CLOSE_ON_FREE);
        c->timer = evtimer_new(g->base, sniff_timeout, c);
        if (!c->down || !c->timer) {
                if (!c->down)
                        close(fd);
                gw__conn_close(c, true);
                return;
        }
        struct timeval tv = {.tv_sec = g->cfg.sniff_timeout_ms / 1000,
                             .tv_usec = (g->cfg.sniff_timeout_ms % 1000) * 1000};
        evtimer_add(c->timer, &tv);
        bufferevent_setcb(c->down, sniff_read, NULL, sniff_event, c);
        bufferevent_enable(c->down, EV_READ);
}

int gw_relay_new(gw *g, int listen_fd, gw_relay **ret, sp_error **err)
{
        gw_relay *r = calloc(1, sizeof(*r));
        if (!r)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        r->g = g;
        /* The heap keeps the relay's freed buffers (sp_daemon_setup's malloc settings). The socket
         * listens already, with a queue of 1024: a backlog of 0 keeps it (-1 would listen again with 128,
         * and a burst of connections from sandboxes past 128 would wait a second for their SYN's retry). */
        r->listener = evconnlistener_new(g->base, on_accept, r, LEV_OPT_CLOSE_ON_FREE, 0, listen_fd);
        if (!r->listener) {
                free(r);
                return sp_error_set(err, SP_E_LIMIT, "relay: cannot listen");
        }
        *ret = r;
        return 0;
}

void gw_relay_recheck_sandbox(gw_relay *r, gw_sandbox *sb)
{
        gw *g = r->g;
        int64_t now = sp_now_mono_us();
        for (conn *c = r->conns, *next; c; c = next) {
                next = c->next;
                if (c->src != sb->addr || !c->counted)
                        continue;
                gw_decision d = gw_decide_tcp_profile(sb, c->dst, c->port, gw_dst_class(g, c->dst),
                                                      c->name[0] ? c->name : NULL, now);
                if (d.allow)
                        continue;
                c->d = d; /* its close record says why */
                sp_log_info_kv(SP_KV("sandbox_id", sb->id),
                               "relay: its profile changed: a connection to port %u "
                               "is no longer allowed (%s)",
                               (unsigned)c->port, d.rule);
                gw__conn_close(c, true);
        }
}

void gw_relay_drop_sandbox(gw_relay *r, uint32_t addr)
{
        conn *next;
        for (conn *c = r->conns; c; c = next) {
                next = c->next;
                if (c->src == addr)
                        gw__conn_close(c, true);
        }
}

void gw_relay_free(gw_relay *r)
{
        if (!r)
                return;
        while (r->conns)
                gw__conn_close(r->conns, true);
        evconnlistener_free(r->listener);
        free(r);
}
