/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandboxes' only resolver. A query for a name the sandbox's profile
 * allows is asked upstream (--resolver) for its A records; the answer's
 * addresses are pinned to that sandbox (policy/table.h) and returned,
 * except addresses the sandbox may not reach (forbidden ones always,
 * private ones without allow_private: no DNS rebinding onto the host's
 * network). AAAA and other types get an empty answer (IPv6 does not leave a
 * sandbox); refused names get REFUSED. The upstream socket is made after the
 * gateway entered its upstream network namespace, the sandboxes' socket
 * before.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw.h"
#include "space/log.h"
#include "space/time.h"
#include "wire/dns_msg.h"

#define PENDING_MAX 4096
/* Questions of one sandbox waiting for the upstream resolver at once. */
#define DNS_PENDING_PER_SANDBOX 64
#define MSG_MAX 4096

typedef struct pending {
        bool used;
        uint16_t id; /* upstream */
        uint32_t src; /* the sandbox, host order */
        struct sockaddr_in client;
        gw_dns_query q;
        gw_decision d;
        int64_t deadline_us;
} pending;

struct gw_dns {
        gw *g;
        int fd; /* the sandboxes' side */
        int up_fd; /* to the resolver */
        bool up_connected; /* connected to it (only its answers are read); tried again per query until it is */
        struct event *ev, *up_ev, *sweep;
        pending *p; /* PENDING_MAX */
        size_t npending;
};

static void answer(gw_dns *d, const struct sockaddr_in *to, const uint8_t *msg, ssize_t len)
{
        if (len > 0)
                (void)sendto(d->fd, msg, (size_t)len, MSG_DONTWAIT, (const struct sockaddr *)to, sizeof(*to));
}

static void answer_error(gw_dns *d, const struct sockaddr_in *to, const gw_dns_query *q, int rcode)
{
        uint8_t out[MSG_MAX];
        size_t cap = gw_dns_query_udp_limit(q);
        answer(d, to, out, gw_dns_build_error(q, rcode, out, cap < sizeof(out) ? cap : sizeof(out)));
}

static void audit(gw_dns *d, const gw_sandbox *sb, uint32_t src, const char *name, gw_decision dec, const char *detail)
{
        gw_audit(d->g, &(gw_audit_rec){.kind = "dns", .sb = sb, .src = src, .name = name, .d = dec, .detail = detail});
}

static pending *pending_new(gw_dns *d)
{
        if (d->npending >= PENDING_MAX)
                return NULL;
        for (int tries = 0; tries < 64; tries++) {
                uint16_t id;
                if (getrandom(&id, sizeof(id), 0) != sizeof(id))
                        return NULL;
                pending *p = &d->p[id % PENDING_MAX];
                if (p->used)
                        continue;
                memset(p, 0, sizeof(*p));
                p->used = true;
                /* The slot is the id's low bits: an answer finds its query at once. */
                p->id = id;
                d->npending++;
                return p;
        }
        return NULL;
}

static void pending_done(gw_dns *d, pending *p)
{
        gw_sandbox *sb = gw_table_find(d->g->table, p->src);
        if (sb && sb->dns_pending > 0)
                sb->dns_pending--;
        p->used = false;
        d->npending--;
}

static void on_query(evutil_socket_t fd, short what, void *ud)
{
        (void)what;
        gw_dns *d = ud;
        gw *g = d->g;
        for (int i = 0; i < 64; i++) {
                uint8_t msg[MSG_MAX];
                struct sockaddr_in from;
                socklen_t fl = sizeof(from);
                ssize_t n = recvfrom(fd, msg, sizeof(msg), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
                if (n < 0)
                        return;
                if (from.sin_family != AF_INET)
                        continue;
                uint32_t src = ntohl(from.sin_addr.s_addr);
                gw_sandbox *sb = gw_table_find(g->table, src);
                gw_dns_query q;
                int r = gw_dns_query_parse(msg, (size_t)n, &q);
                if (!sb) {
                        /* Not answered (nobody to answer for), but recorded as the
                         * relay records a connection: a sandbox the gateway was not
                         * told of yet is seen in its log by its address. */
                        g->counters.unknown_source++;
                        audit(d, NULL, src, r == 0 && q.has_question ? q.name : NULL,
                              (gw_decision){.rule = "unknown-sandbox"}, NULL);
                        continue;
                }
                if (r < 0)
                        continue;
                if (r > 0) {
                        audit(d, sb, src, q.has_question ? q.name : NULL,
                              (gw_decision){.allow = false, .rule = "dns-malformed"}, q.reason);
                        answer_error(d, &from, &q, r);
                        continue;
                }
                gw_decision dec = gw_decide_dns(g->table, sb, q.name, strlen(q.name), sp_now_mono_us());
                if (!dec.allow) {
                        audit(d, sb, src, q.name, dec, NULL);
                        answer_error(d, &from, &q, GW_DNS_REFUSED);
                        continue;
                }
                if (q.qtype != GW_DNS_TYPE_A) {
                        /* IPv6 and the rest: nothing to reach through here. */
                        audit(d, sb, src, q.name, dec, "no data for types other than A");
                        uint8_t out[MSG_MAX];
                        size_t cap = gw_dns_query_udp_limit(&q);
                        answer(d, &from, out,
                               gw_dns_build_answer(&q, NULL, 0, out, cap < sizeof(out) ? cap : sizeof(out)));
                        continue;
                }
                /* The pending table is every sandbox's: one may hold a share of it. */
                if (sb->dns_pending >= DNS_PENDING_PER_SANDBOX) {
                        audit(d, sb, src, q.name, (gw_decision){.allow = false, .rule = "dns-pending"},
                              "too many questions of this sandbox wait for the resolver");
                        answer_error(d, &from, &q, GW_DNS_SERVFAIL);
                        continue;
                }
                pending *p = pending_new(d);
                uint8_t up[MSG_MAX];
                ssize_t ul = p ? gw_dns_build_query(p->id, q.name, GW_DNS_TYPE_A, up, sizeof(up)) : -1;
                if (!d->up_connected)
                        d->up_connected = connect(d->up_fd, (const struct sockaddr *)&g->cfg.resolver,
                                                  sizeof(g->cfg.resolver)) == 0;
                if (!p || ul < 0 || !d->up_connected || send(d->up_fd, up, (size_t)ul, MSG_DONTWAIT) != ul) {
                        if (p)
                                pending_done(d, p);
                        g->counters.dns_upstream_errors++;
                        audit(d, sb, src, q.name, dec, "the resolver cannot be asked");
                        answer_error(d, &from, &q, GW_DNS_SERVFAIL);
                        continue;
                }
                p->src = src;
                sb->dns_pending++;
                p->client = from;
                p->q = q;
                p->d = dec;
                p->deadline_us = sp_now_mono_us() + (int64_t)g->cfg.dns_timeout_ms * 1000;
        }
}

static void on_upstream(evutil_socket_t fd, short what, void *ud)
{
        (void)what;
        gw_dns *d = ud;
        gw *g = d->g;
        for (int i = 0; i < 64; i++) {
                uint8_t msg[MSG_MAX];
                ssize_t n = recv(fd, msg, sizeof(msg), MSG_DONTWAIT);
                if (n < 0)
                        return;
                if (n < 2)
                        continue;
                uint16_t id = (uint16_t)(msg[0] << 8 | msg[1]);
                pending *p = &d->p[id % PENDING_MAX];
                if (!p->used || p->id != id)
                        continue; /* late, or not ours */
                gw_dns_answer a;
                int r = gw_dns_response_parse(msg, (size_t)n, id, p->q.name, GW_DNS_TYPE_A, &a);
                gw_sandbox *sb = gw_table_find(g->table, p->src);
                if (!sb) {
                        pending_done(d, p);
                        continue;
                }
                if (r < 0 || (a.rcode != GW_DNS_NOERROR && a.rcode != GW_DNS_NXDOMAIN)) {
                        g->counters.dns_upstream_errors++;
                        audit(d, sb, p->src, p->q.name, p->d, r < 0 ? a.reason : "the resolver failed");
                        answer_error(d, &p->client, &p->q, GW_DNS_SERVFAIL);
                        pending_done(d, p);
                        continue;
                }
                if (a.rcode == GW_DNS_NXDOMAIN) {
                        audit(d, sb, p->src, p->q.name, p->d, "no such name");
                        answer_error(d, &p->client, &p->q, GW_DNS_NXDOMAIN);
                        pending_done(d, p);
                        continue;
                }
                /* Keep and pin what the sandbox may reach. */
                gw_dns_addr keep[GW_DNS_MAX_ADDRS];
                size_t nk = 0, dropped = 0;
                int64_t now = sp_now_mono_us();
                for (size_t k = 0; k < a.naddrs; k++) {
                        uint32_t ad = (uint32_t)a.addrs[k].addr[0] << 24 | (uint32_t)a.addrs[k].addr[1] << 16 |
                                      (uint32_t)a.addrs[k].addr[2] << 8 | a.addrs[k].addr[3];
                        if (!gw_answer_pinnable(sb, gw_dst_class(g, ad))) {
                                dropped++;
                                continue;
                        }
                        gw_pin_add(g->table, sb, p->q.name, ad, a.addrs[k].ttl, now);
                        keep[nk] = a.addrs[k];
                        /* The sandbox caches no longer than the pin holds. */
                        if (keep[nk].ttl > gw_table_limits(g->table)->max_ttl)
                                keep[nk].ttl = gw_table_limits(g->table)->max_ttl;
                        nk++;
                }
                audit(d, sb, p->src, p->q.name, p->d,
                      dropped ? "addresses the sandbox may not reach were left out of the answer" : NULL);
                uint8_t out[MSG_MAX];
                size_t cap = gw_dns_query_udp_limit(&p->q);
                answer(d, &p->client, out,
                       gw_dns_build_answer(&p->q, keep, nk, out, cap < sizeof(out) ? cap : sizeof(out)));
                pending_done(d, p);
        }
}

static void on_sweep(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        gw_dns *d = ud;
        int64_t now = sp_now_mono_us();
        for (size_t i = 0; i < PENDING_MAX && d->npending; i++) {
                pending *p = &d->p[i];
                if (!p->used || p->deadline_us > now)
                        continue;
                d->g->counters.dns_upstream_errors++;
                gw_sandbox *sb = gw_table_find(d->g->table, p->src);
                if (sb)
                        audit(d, sb, p->src, p->q.name, p->d, "the resolver did not answer in time");
                answer_error(d, &p->client, &p->q, GW_DNS_SERVFAIL);
                pending_done(d, p);
        }
}

int gw_dns_new(gw *g, int udp_fd, gw_dns **ret, sp_error **err)
{
        gw_dns *d = calloc(1, sizeof(*d));
        if (!d)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        d->g = g;
        d->fd = udp_fd;
        d->p = calloc(PENDING_MAX, sizeof(*d->p));
        d->up_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        /* A resolver that cannot be reached now (no route yet, an upstream
         * namespace with loopback only) does not stop the gateway: its
         * queries are answered SERVFAIL until it can be. */
        if (d->up_fd >= 0)
                d->up_connected =
                        connect(d->up_fd, (const struct sockaddr *)&g->cfg.resolver, sizeof(g->cfg.resolver)) == 0;
        if (!d->p || d->up_fd < 0) {
                int e = errno;
                if (d->up_fd >= 0)
                        close(d->up_fd);
                free(d->p);
                free(d);
                return sp_error_set_errno(err, SP_E_IO, e, "the resolver's socket");
        }
        d->ev = event_new(g->base, udp_fd, EV_READ | EV_PERSIST, on_query, d);
        d->up_ev = event_new(g->base, d->up_fd, EV_READ | EV_PERSIST, on_upstream, d);
        d->sweep = event_new(g->base, -1, EV_PERSIST, on_sweep, d);
        struct timeval tv = {.tv_sec = 0, .tv_usec = 250000};
        if (!d->ev || !d->up_ev || !d->sweep || event_add(d->ev, NULL) < 0 || event_add(d->up_ev, NULL) < 0 ||
            event_add(d->sweep, &tv) < 0) {
                gw_dns_free(d);
                return sp_error_set(err, SP_E_LIMIT, "dns: cannot watch its sockets");
        }
        *ret = d;
        return 0;
}

void gw_dns_free(gw_dns *d)
{
        if (!d)
                return;
        if (d->ev)
                event_free(d->ev);
        if (d->up_ev)
                event_free(d->up_ev);
        if (d->sweep)
                event_free(d->sweep);
        close(d->fd);
        close(d->up_fd);
        free(d->p);
        free(d);
}
