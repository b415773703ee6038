/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandboxes' firewall (worker/net/nft.h) and its audit trail
 * (worker/net/nflog.h), between three namespaces each case makes afresh:
 * H plays the worker's host (the table, the gateway's sockets, the NFLOG
 * reader), S a sandbox linked to H by wk_net_link_create (spv3, 10.250.0.6
 * on H's side, 10.250.0.7 in S), and O "the internet", a veth away from H,
 * which routes to it (ip_forward=1, default route via O). A case runs in a
 * child that entered H; it makes the sockets of S and O by stepping into
 * their namespace and back (a socket keeps the namespace it was made in),
 * so one process sees both ends. "Nothing arrives" waits SILENCE_MS; where
 * it matters the same packet is first shown to arrive without the table.
 * Needs root; nothing leaves the test's namespaces, and the host's own
 * tables and interfaces are never touched.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "guard.h"
#include "harness.h"
#include "net/link.h"
#include "net/nflog.h"
#include "net/nft.h"
#include "netns.h"

#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80
#endif

#define TABLE "sptest_nft"
#define GW_TCP 15001
#define GW_DNS 15053
#define GROUP 7
#define SLOT 3
#define H_ADDR "10.250.0.6"
#define S_ADDR "10.250.0.7"
#define FAR "198.51.100.7" /* an address nobody in the test has: only routes lead to it */
#define SILENCE_MS 300
#define ARRIVE_MS 2000
#define RULES 18 /* what nft.h lists */

static sp_test_netns g_h = {.fd = -1}, g_s = {.fd = -1}, g_o = {.fd = -1};
static sp_test_veth g_ho; /* name_a, addr_a in H; name_b, addr_b in O */
static wk_net_link g_link;
static wk_nft_config g_cfg;
static int g_guard[3];
static char *g_why; /* a shared page: why the child in H failed */
static char g_root_ifs[4096]; /* the host's interfaces when we started */

/* ---- failing from the child in H ---- */

__attribute__((format(printf, 2, 3))) static void why(int line, const char *fmt, ...)
{
        va_list ap;
        int n = snprintf(g_why, 1024, "line %d: ", line);
        va_start(ap, fmt);
        vsnprintf(g_why + n, 1024 - (size_t)n, fmt, ap);
        va_end(ap);
}

#define REQUIRE(cond, ...) \
        do { \
                if (!(cond)) { \
                        why(__LINE__, __VA_ARGS__); \
                        return 1; \
                } \
        } while (0)

/* The message of *e (freed), for a REQUIRE. */
static const char *emsg(sp_error **e)
{
        static char buf[512];
        snprintf(buf, sizeof(buf), "%s", *e ? (*e)->message : "(no error)");
        sp_error_freep(e);
        return buf;
}

static void in_h(int (*fn)(void *), const char *what)
{
        g_why[0] = '\0';
        sp_error *e = NULL;
        int r = sp_test_netns_run(&g_h, fn, NULL, 60000, &e);
        ck_assert_msg(r == 0, "%s: %s%s", what, g_why[0] ? g_why : "", e ? emsg(&e) : "");
}

/* ---- namespaces and sockets ---- */

/* Moves this (single-threaded) child into ns; back with enter(&g_h). */
static void enter(const sp_test_netns *ns)
{
        if (setns(ns->fd, CLONE_NEWNET) < 0)
                abort(); /* carrying on in the wrong namespace would test the wrong thing */
}

static int sock_in(const sp_test_netns *ns, int domain, int type, int proto)
{
        enter(ns);
        int fd = socket(domain, type | SOCK_CLOEXEC, proto);
        int e = errno;
        enter(&g_h);
        errno = e;
        return fd;
}

static int write_in(const sp_test_netns *ns, const char *path, const char *value)
{
        enter(ns); /* /proc/sys/net is the namespace of whoever opens it */
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        int r = fd >= 0 && write(fd, value, strlen(value)) == (ssize_t)strlen(value) ? 0 : -1;
        if (fd >= 0)
                close(fd);
        enter(&g_h);
        return r;
}

static int ip_in(const sp_test_netns *ns, const char *const *argv)
{
        sp_error *e = NULL;
        int r = sp_test_netns_exec(ns, argv, NULL, 10000, &e);
        if (r != 0)
                fprintf(stderr, "%s: %d %s\n", argv[1], r, e ? emsg(&e) : "");
        sp_error_free(e);
        return r;
}

static struct sockaddr_in sin_of(const char *ip, uint16_t port)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
        inet_pton(AF_INET, ip, &a.sin_addr);
        return a;
}

static bool is_addr(struct in_addr a, const char *ip)
{
        struct in_addr b;
        return inet_pton(AF_INET, ip, &b) == 1 && a.s_addr == b.s_addr;
}

static bool readable(int fd, int ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, ms) == 1;
}

static int64_t now_ms(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A UDP socket of ns bound to ip:port. */
static int udp_bound(const sp_test_netns *ns, int family, const char *ip, uint16_t port)
{
        int fd = sock_in(ns, family, SOCK_DGRAM, 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (family == AF_INET) {
                struct sockaddr_in a = sin_of(ip, port);
                if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
                        return sp_close(fd);
        } else {
                struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
                inet_pton(AF_INET6, ip, &a.sin6_addr);
                if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
                        return sp_close(fd);
        }
        return fd;
}

static int tcp_listen(const sp_test_netns *ns, uint16_t port)
{
        int fd = sock_in(ns, AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in a = sin_of("0.0.0.0", port);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 8) < 0)
                return sp_close(fd);
        return fd;
}

/* Starts a non-blocking connect from ns; whether it completes in ms. */
static bool tcp_dial(const sp_test_netns *ns, const char *ip, uint16_t port, int ms, int *ret_fd)
{
        int fd = sock_in(ns, AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        *ret_fd = fd;
        struct sockaddr_in a = sin_of(ip, port);
        if (fd < 0 || (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS))
                return false;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t l = sizeof(soerr);
        return poll(&p, 1, ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &l) == 0 && soerr == 0;
}

/* Sends one datagram from ns (from src, or as routing picks when NULL) to ip:port. */
static int udp_send(const sp_test_netns *ns, const char *src, const char *ip, uint16_t port, const char *msg)
{
        _cleanup_close_ int fd = src ? udp_bound(ns, AF_INET, src, 0) : sock_in(ns, AF_INET, SOCK_DGRAM, 0);
        struct sockaddr_in a = sin_of(ip, port);
        if (fd < 0 || sendto(fd, msg, strlen(msg), 0, (struct sockaddr *)&a, sizeof(a)) < 0)
                return -1;
        return 0;
}

/* Receives one datagram waiting on fd, into buf (NUL-terminated); its sender in *from. */
static ssize_t udp_recv(int fd, char *buf, size_t size, struct sockaddr_in *from)
{
        socklen_t l = sizeof(*from);
        ssize_t n = recvfrom(fd, buf, size - 1, MSG_DONTWAIT, (struct sockaddr *)from, &l);
        buf[n > 0 ? n : 0] = '\0';
        return n;
}

static void drain(int fd)
{
        char buf[2048];
        while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
}

static uint16_t inet_csum(const void *data, size_t len, uint32_t sum)
{
        const uint8_t *p = data;
        for (size_t i = 0; i + 1 < len; i += 2)
                sum += (uint32_t)(p[i] << 8 | p[i + 1]);
        if (len & 1)
                sum += (uint32_t)(p[len - 1] << 8);
        while (sum >> 16)
                sum = (sum & 0xffff) + (sum >> 16);
        return htons((uint16_t)~sum);
}

/* An ICMP echo request on a raw ICMP socket. */
static int ping(int fd, const char *ip, uint16_t seq)
{
        uint8_t pkt[16] = {8, 0, 0, 0, 0x12, 0x34, (uint8_t)(seq >> 8), (uint8_t)seq, 'p', 'i', 'n', 'g'};
        uint16_t c = inet_csum(pkt, sizeof(pkt), 0);
        memcpy(pkt + 2, &c, 2);
        struct sockaddr_in a = sin_of(ip, 0);
        return sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&a, sizeof(a)) < 0 ? -1 : 0;
}

/* Whether an echo reply from ip comes to the raw ICMP socket fd within ms. */
static bool echo_reply(int fd, const char *ip, int ms)
{
        for (int64_t end = now_ms() + ms; now_ms() < end;) {
                if (!readable(fd, (int)(end - now_ms())))
                        return false;
                uint8_t buf[1500];
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n < 28)
                        continue;
                struct in_addr src;
                memcpy(&src, buf + 12, 4);
                size_t ihl = (size_t)(buf[0] & 0x0f) * 4;
                if (is_addr(src, ip) && (size_t)n > ihl && buf[ihl] == 0)
                        return true;
        }
        return false;
}

/* A TCP segment no stack would send (SYN|FIN), which conntrack calls invalid and NAT never sees. */
static int bad_tcp(int fd, const char *src, const char *dst, uint16_t port)
{
        uint8_t tcp[20] = {0x9c, 0x40, (uint8_t)(port >> 8), (uint8_t)port, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x03,
                           0xff, 0xff};
        uint8_t pseudo[12];
        inet_pton(AF_INET, src, pseudo);
        inet_pton(AF_INET, dst, pseudo + 4);
        pseudo[8] = 0;
        pseudo[9] = IPPROTO_TCP;
        pseudo[10] = 0;
        pseudo[11] = sizeof(tcp);
        uint32_t sum = 0;
        for (size_t i = 0; i < sizeof(pseudo); i += 2)
                sum += (uint32_t)(pseudo[i] << 8 | pseudo[i + 1]);
        uint16_t c = inet_csum(tcp, sizeof(tcp), sum);
        memcpy(tcp + 16, &c, 2);
        struct sockaddr_in a = sin_of(dst, 0);
        return sendto(fd, tcp, sizeof(tcp), 0, (struct sockaddr *)&a, sizeof(a)) < 0 ? -1 : 0;
}

/* ---- O's wire ---- */

/* Every frame on O's end of the veth, as O receives it. */
static int capture_open(void)
{
        enter(&g_o);
        int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ALL));
        struct sockaddr_ll sll = {.sll_family = AF_PACKET,
                                  .sll_protocol = htons(ETH_P_ALL),
                                  .sll_ifindex = (int)if_nametoindex(g_ho.name_b)};
        if (fd >= 0 && (sll.sll_ifindex == 0 || bind(fd, (struct sockaddr *)&sll, sizeof(sll)) < 0))
                fd = sp_close(fd);
        enter(&g_h);
        return fd;
}

/* Whether O receives, within ms, an IPv4 packet from src (to dst, of proto; NULL/0: any). */
static bool captured(int fd, const char *src, const char *dst, uint8_t proto, int ms)
{
        for (int64_t end = now_ms() + ms; now_ms() < end;) {
                if (!readable(fd, (int)(end - now_ms())))
                        return false;
                uint8_t buf[2048];
                struct sockaddr_ll from;
                socklen_t l = sizeof(from);
                ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&from, &l);
                if (n < 20 || from.sll_protocol != htons(ETH_P_IP) || from.sll_pkttype == PACKET_OUTGOING)
                        continue;
                struct in_addr s, d;
                memcpy(&s, buf + 12, 4);
                memcpy(&d, buf + 16, 4);
                if (is_addr(s, src) && (!dst || is_addr(d, dst)) && (!proto || buf[9] == proto))
                        return true;
        }
        return false;
}

/* ---- the firewall's side ---- */

static wk_nflog_record g_recs[512];
static size_t g_nrecs;

static int collect(const wk_nflog_record *r, void *userdata)
{
        (void)userdata;
        if (g_nrecs < SP_ARRAY_SIZE(g_recs))
                g_recs[g_nrecs++] = *r;
        return 0;
}

typedef struct want {
        const char *prefix;
        uint8_t proto;
        const char *src, *dst; /* IPv4; dst NULL: any */
        uint16_t dport; /* 0: any */
} want;

static bool matches(const wk_nflog_record *r, const want *w)
{
        return strcmp(r->prefix, w->prefix) == 0 && r->family == AF_INET && r->protocol == w->proto &&
               is_addr(r->saddr.v4, w->src) && (!w->dst || is_addr(r->daddr.v4, w->dst)) &&
               (!w->dport || r->dport == w->dport);
}

/* The first record read so far or within ARRIVE_MS that matches w. */
static const wk_nflog_record *logged(wk_nflog *l, want w)
{
        for (int64_t end = now_ms() + ARRIVE_MS;;) {
                for (size_t i = 0; i < g_nrecs; i++)
                        if (matches(&g_recs[i], &w))
                                return &g_recs[i];
                int64_t left = end - now_ms();
                if (left <= 0)
                        return NULL;
                if (readable(wk_nflog_fd(l), (int)left))
                        (void)wk_nflog_read(l, collect, NULL, NULL);
        }
}

static uint64_t drops(wk_nft_drop d)
{
        wk_nft_counters c;
        return wk_nft_counters_read(&g_cfg, &c, NULL) < 0 ? 0 : c.packets[d];
}

/* Installs the table with S registered, and reads its log. */
static int firewall_up(wk_nflog **ret_log)
{
        sp_error *e = NULL;
        REQUIRE(wk_nft_install(&g_cfg, &e) == 0, "install: %s", emsg(&e));
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "add: %s", emsg(&e));
        g_nrecs = 0;
        REQUIRE(wk_nflog_open(GROUP, ret_log, &e) == 0, "nflog: %s", emsg(&e));
        return 0;
}

/* ---- the cases (each in a child in H) ---- */

static int tcp_case(void *arg)
{
        (void)arg;
        _cleanup_close_ int lis = tcp_listen(&g_h, GW_TCP), cap = capture_open();
        REQUIRE(lis >= 0 && cap >= 0, "sockets: %s", strerror(errno));
        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        struct {
                const char *ip;
                uint16_t port;
        } dials[] = {{FAR, 80}, {g_ho.addr_b, 443}, {H_ADDR, 22}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(dials); i++) {
                _cleanup_close_ int c = -1;
                REQUIRE(tcp_dial(&g_s, dials[i].ip, dials[i].port, ARRIVE_MS, &c), "S could not reach %s:%u",
                        dials[i].ip, dials[i].port);
                REQUIRE(readable(lis, ARRIVE_MS), "the gateway got no connection for %s", dials[i].ip);
                struct sockaddr_in peer, orig;
                socklen_t pl = sizeof(peer), ol = sizeof(orig);
                _cleanup_close_ int a = accept4(lis, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
                REQUIRE(a >= 0 && is_addr(peer.sin_addr, S_ADDR), "accepted from elsewhere");
                REQUIRE(getsockopt(a, SOL_IP, SO_ORIGINAL_DST, &orig, &ol) == 0, "SO_ORIGINAL_DST: %s",
                        strerror(errno));
                REQUIRE(is_addr(orig.sin_addr, dials[i].ip) && ntohs(orig.sin_port) == dials[i].port,
                        "SO_ORIGINAL_DST gave %s:%u for %s:%u", inet_ntoa(orig.sin_addr), ntohs(orig.sin_port),
                        dials[i].ip, dials[i].port);
                char buf[8] = {0};
                REQUIRE(write(c, "ping", 4) == 4 && readable(a, ARRIVE_MS) && read(a, buf, 4) == 4 &&
                                strcmp(buf, "ping") == 0,
                        "no bytes sandbox to gateway");
                REQUIRE(write(a, "pong", 4) == 4 && readable(c, ARRIVE_MS) && read(c, buf, 4) == 4 &&
                                strcmp(buf, "pong") == 0,
                        "no bytes gateway to sandbox");
        }
        REQUIRE(!captured(cap, S_ADDR, NULL, 0, SILENCE_MS), "a packet of S reached O");
        wk_nflog_free(log);
        return 0;
}

/* A sandbox holds at most conns_max tracked flows: past them its new ones are dropped (and logged)
 * before the kernel keeps them; closing some makes room again. */
static int conntrack_case(void *arg)
{
        (void)arg;
        enum { MAX = 4, MORE = 3 };
        g_cfg.conns_max = MAX; /* this child's copy */
        _cleanup_close_ int lis = tcp_listen(&g_h, GW_TCP);
        REQUIRE(lis >= 0, "listen: %s", strerror(errno));
        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        int held[MAX];
        for (int i = 0; i < MAX; i++)
                REQUIRE(tcp_dial(&g_s, FAR, (uint16_t)(80 + i), ARRIVE_MS, &held[i]), "flow %d of %d did not connect",
                        i + 1, MAX);
        for (int i = 0; i < MORE; i++) {
                _cleanup_close_ int c = -1;
                REQUIRE(!tcp_dial(&g_s, FAR, (uint16_t)(200 + i), SILENCE_MS, &c), "flow %d past the limit connected",
                        MAX + i + 1);
        }
        REQUIRE(drops(WK_NFT_DROP_CONNTRACK) >= MORE, "the limit's drops were not counted");
        REQUIRE(logged(log, (want){"space:conntrack", IPPROTO_TCP, S_ADDR, FAR, 200}), "no log of the dropped flow");
        /* Ended flows make room (their entries count no more once closed). */
        for (int i = 0; i < MAX; i++) {
                _cleanup_close_ int a = accept4(lis, NULL, NULL, SOCK_CLOEXEC);
                REQUIRE(a >= 0, "accept: %s", strerror(errno));
        }
        for (int i = 0; i < MAX; i++)
                close(held[i]);
        _cleanup_close_ int again = -1;
        bool ok = false;
        for (int64_t end = now_ms() + 5000; !ok && now_ms() < end;) {
                again = sp_close(again);
                ok = tcp_dial(&g_s, FAR, 300, 500, &again);
        }
        REQUIRE(ok, "no new flow after the others ended");
        wk_nflog_free(log);
        return 0;
}

static int dns_case(void *arg)
{
        (void)arg;
        _cleanup_close_ int dns = udp_bound(&g_h, AF_INET, "0.0.0.0", GW_DNS);
        REQUIRE(dns >= 0, "DNS socket: %s", strerror(errno));
        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        const char *dials[] = {FAR, g_ho.addr_b, H_ADDR, "10.250.0.9"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(dials); i++) {
                _cleanup_close_ int q = sock_in(&g_s, AF_INET, SOCK_DGRAM, 0);
                struct sockaddr_in to = sin_of(dials[i], 53), from;
                REQUIRE(sendto(q, "query", 5, 0, (struct sockaddr *)&to, sizeof(to)) == 5, "send: %s", strerror(errno));
                char buf[64];
                REQUIRE(readable(dns, ARRIVE_MS) && udp_recv(dns, buf, sizeof(buf), &from) == 5 &&
                                strcmp(buf, "query") == 0,
                        "the gateway got no query for %s", dials[i]);
                REQUIRE(is_addr(from.sin_addr, S_ADDR), "query from %s", inet_ntoa(from.sin_addr));
                REQUIRE(sendto(dns, "answer", 6, 0, (struct sockaddr *)&from, sizeof(from)) == 6, "reply: %s",
                        strerror(errno));
                REQUIRE(readable(q, ARRIVE_MS) && udp_recv(q, buf, sizeof(buf), &from) == 6 &&
                                strcmp(buf, "answer") == 0,
                        "S got no answer from %s", dials[i]);
                REQUIRE(is_addr(from.sin_addr, dials[i]) && ntohs(from.sin_port) == 53,
                        "the answer came from %s:%u, not %s:53", inet_ntoa(from.sin_addr), ntohs(from.sin_port),
                        dials[i]);
        }
        wk_nflog_free(log);
        return 0;
}

static int input_case(void *arg)
{
        (void)arg;
        _cleanup_close_ int other = udp_bound(&g_h, AF_INET, "0.0.0.0", 9999);
        _cleanup_close_ int dns = udp_bound(&g_h, AF_INET, "0.0.0.0", GW_DNS);
        _cleanup_close_ int lis = tcp_listen(&g_h, GW_TCP);
        _cleanup_close_ int icmp = sock_in(&g_s, AF_INET, SOCK_RAW, IPPROTO_ICMP);
        REQUIRE(other >= 0 && dns >= 0 && lis >= 0 && icmp >= 0, "sockets: %s", strerror(errno));
        /* Without the table, H answers S's ping and gets its datagrams. */
        REQUIRE(ping(icmp, H_ADDR, 1) == 0 && echo_reply(icmp, H_ADDR, ARRIVE_MS), "no echo without the table");
        REQUIRE(udp_send(&g_s, NULL, H_ADDR, 9999, "x") == 0 && readable(other, ARRIVE_MS), "no UDP without the table");
        drain(other);

        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        uint64_t before = drops(WK_NFT_DROP_INPUT), pbefore = drops(WK_NFT_DROP_PROTOCOL);
        REQUIRE(ping(icmp, H_ADDR, 2) == 0 && !echo_reply(icmp, H_ADDR, SILENCE_MS), "H answered a ping");
        REQUIRE(udp_send(&g_s, NULL, H_ADDR, 9999, "x") == 0 && !readable(other, SILENCE_MS), "H took UDP 9999");
        /* The gateway's ports themselves take only what was redirected to them. */
        REQUIRE(udp_send(&g_s, NULL, H_ADDR, GW_DNS, "x") == 0 && !readable(dns, SILENCE_MS),
                "the DNS port took a datagram dialled to it");
        _cleanup_close_ int c = -1;
        REQUIRE(!tcp_dial(&g_s, H_ADDR, GW_TCP, SILENCE_MS, &c) && !readable(lis, 0),
                "the TCP port took a connection dialled to it");
        /* ICMP and UDP but DNS never get past prerouting; TCP dialled to the gateway's port is the input drop. */
        uint64_t after = drops(WK_NFT_DROP_INPUT), pafter = drops(WK_NFT_DROP_PROTOCOL);
        REQUIRE(after >= before + 1, "input drops went from %llu to %llu", (unsigned long long)before,
                (unsigned long long)after);
        REQUIRE(pafter >= pbefore + 3, "protocol drops went from %llu to %llu", (unsigned long long)pbefore,
                (unsigned long long)pafter);
        const wk_nflog_record *r = logged(log, (want){"space:protocol", IPPROTO_ICMP, S_ADDR, H_ADDR, 0});
        REQUIRE(r && r->icmp_type == 8, "no log of the ping");
        REQUIRE(strcmp(r->indev_name, g_link.host_if) == 0 && r->hook == NF_INET_PRE_ROUTING,
                "ping logged on %s, hook %u", r->indev_name, r->hook);
        REQUIRE(logged(log, (want){"space:protocol", IPPROTO_UDP, S_ADDR, H_ADDR, 9999}), "no log of UDP 9999");
        REQUIRE(logged(log, (want){"space:protocol", IPPROTO_UDP, S_ADDR, H_ADDR, GW_DNS}),
                "no log of UDP to the DNS port");
        REQUIRE(logged(log, (want){"space:input", IPPROTO_TCP, S_ADDR, H_ADDR, GW_TCP}),
                "no log of TCP to the gateway's port");
        REQUIRE(logged(log, (want){"space:input", IPPROTO_TCP, S_ADDR, H_ADDR, GW_TCP}),
                "no log of TCP to the TCP port");
        wk_nflog_free(log);
        return 0;
}

/* S sends the four kinds of packet that only forwarding could carry to O. */
static int send_four(int icmp, int raw_tcp)
{
        if (udp_send(&g_s, NULL, g_ho.addr_b, 9999, "x") < 0 || udp_send(&g_s, NULL, FAR, 9999, "x") < 0 ||
            ping(icmp, g_ho.addr_b, 1) < 0 || bad_tcp(raw_tcp, S_ADDR, g_ho.addr_b, 80) < 0)
                return -1;
        return 0;
}

static int forward_case(void *arg)
{
        (void)arg;
        _cleanup_close_ int cap = capture_open();
        _cleanup_close_ int icmp = sock_in(&g_s, AF_INET, SOCK_RAW, IPPROTO_ICMP);
        _cleanup_close_ int raw_tcp = sock_in(&g_s, AF_INET, SOCK_RAW, IPPROTO_TCP);
        REQUIRE(cap >= 0 && icmp >= 0 && raw_tcp >= 0, "sockets: %s", strerror(errno));
        /* Without the table, H forwards each to O. */
        REQUIRE(send_four(icmp, raw_tcp) == 0, "send: %s", strerror(errno));
        for (int seen = 0, want_mask = 0xf; seen != want_mask;) {
                uint8_t buf[2048];
                struct sockaddr_ll from;
                socklen_t l = sizeof(from);
                REQUIRE(readable(cap, ARRIVE_MS), "O saw only %#x of the four without the table", seen);
                ssize_t n = recvfrom(cap, buf, sizeof(buf), 0, (struct sockaddr *)&from, &l);
                if (n < 24 || from.sll_protocol != htons(ETH_P_IP))
                        continue;
                struct in_addr s, d;
                memcpy(&s, buf + 12, 4);
                memcpy(&d, buf + 16, 4);
                if (!is_addr(s, S_ADDR))
                        continue;
                if (buf[9] == IPPROTO_UDP && is_addr(d, g_ho.addr_b))
                        seen |= 1;
                else if (buf[9] == IPPROTO_UDP && is_addr(d, FAR))
                        seen |= 2;
                else if (buf[9] == IPPROTO_ICMP)
                        seen |= 4;
                else if (buf[9] == IPPROTO_TCP)
                        seen |= 8;
        }

        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        uint64_t before = drops(WK_NFT_DROP_FORWARD), pbefore = drops(WK_NFT_DROP_PROTOCOL);
        REQUIRE(send_four(icmp, raw_tcp) == 0, "send: %s", strerror(errno));
        REQUIRE(!captured(cap, S_ADDR, NULL, 0, SILENCE_MS), "a packet of S reached O through the table");
        /* UDP and ICMP stop before routing; the TCP segment conntrack calls invalid (not redirected) is the
         * forward drop. */
        uint64_t after = drops(WK_NFT_DROP_FORWARD), pafter = drops(WK_NFT_DROP_PROTOCOL);
        REQUIRE(after >= before + 1, "forward drops went from %llu to %llu", (unsigned long long)before,
                (unsigned long long)after);
        REQUIRE(pafter >= pbefore + 3, "protocol drops went from %llu to %llu", (unsigned long long)pbefore,
                (unsigned long long)pafter);
        const wk_nflog_record *r = logged(log, (want){"space:forward", IPPROTO_TCP, S_ADDR, g_ho.addr_b, 80});
        REQUIRE(r, "no log of the bad TCP");
        REQUIRE(r->hook == NF_INET_FORWARD && r->outdev == if_nametoindex(g_ho.name_a), "logged at hook %u, out %u",
                r->hook, r->outdev);
        REQUIRE(logged(log, (want){"space:protocol", IPPROTO_UDP, S_ADDR, g_ho.addr_b, 9999}), "no log of UDP to O");
        REQUIRE(logged(log, (want){"space:protocol", IPPROTO_UDP, S_ADDR, FAR, 9999}), "no log of UDP far away");
        REQUIRE(logged(log, (want){"space:protocol", IPPROTO_ICMP, S_ADDR, g_ho.addr_b, 0}), "no log of the ping");
        REQUIRE(wk_nflog_skipped(log) == 0 && wk_nflog_overruns(log) == 0, "records skipped or lost");
        /* The group has its reader: a second one is refused. */
        wk_nflog *dup = NULL;
        REQUIRE(wk_nflog_open(GROUP, &dup, NULL) < 0, "a second reader bound the group");
        wk_nflog_free(log);
        return 0;
}

static int spoof_case(void *arg)
{
        (void)arg;
        _cleanup_close_ int dns = udp_bound(&g_h, AF_INET, "0.0.0.0", GW_DNS);
        REQUIRE(dns >= 0, "DNS socket: %s", strerror(errno));
        const char *const add1[] = {"ip", "addr", "add", "10.250.0.99/32", "dev", WK_NET_SANDBOX_IF, NULL};
        const char *const add2[] = {"ip", "addr", "add", "192.0.2.99/32", "dev", WK_NET_SANDBOX_IF, NULL};
        REQUIRE(ip_in(&g_s, add1) == 0 && ip_in(&g_s, add2) == 0, "second addresses in S");
        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        char buf[64];
        struct sockaddr_in from;
        REQUIRE(udp_send(&g_s, NULL, FAR, 53, "real") == 0 && readable(dns, ARRIVE_MS), "S's own address refused");
        drain(dns);

        uint64_t before = drops(WK_NFT_DROP_SPOOF);
        REQUIRE(udp_send(&g_s, "10.250.0.99", FAR, 53, "spoof") == 0 && !readable(dns, SILENCE_MS),
                "a query from another pool address arrived");
        REQUIRE(udp_send(&g_s, "192.0.2.99", FAR, 53, "spoof") == 0 && !readable(dns, SILENCE_MS),
                "a query from a foreign address arrived");
        REQUIRE(drops(WK_NFT_DROP_SPOOF) >= before + 2, "spoof drops did not grow by 2");
        const wk_nflog_record *r = logged(log, (want){"space:spoof", IPPROTO_UDP, "10.250.0.99", FAR, 53});
        REQUIRE(r && r->hook == NF_INET_PRE_ROUTING && strcmp(r->indev_name, g_link.host_if) == 0,
                "no log of the pool spoof");
        REQUIRE(logged(log, (want){"space:spoof", IPPROTO_UDP, "192.0.2.99", FAR, 53}), "no log of the foreign spoof");

        sp_error *e = NULL;
        REQUIRE(wk_nft_sandbox_del(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "del: %s", emsg(&e));
        REQUIRE(wk_nft_sandbox_del(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "del again: %s", emsg(&e));
        REQUIRE(udp_send(&g_s, NULL, FAR, 53, "gone") == 0 && !readable(dns, SILENCE_MS),
                "an unregistered sandbox's query arrived");
        REQUIRE(logged(log, (want){"space:spoof", IPPROTO_UDP, S_ADDR, FAR, 53}), "no log of the unregistered one");
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "add: %s", emsg(&e));
        REQUIRE(udp_send(&g_s, NULL, FAR, 53, "back") == 0 && readable(dns, ARRIVE_MS) &&
                        udp_recv(dns, buf, sizeof(buf), &from) == 4 && strcmp(buf, "back") == 0,
                "the re-registered sandbox's query did not arrive");
        drain(dns);

        /* Several deleted in one commit, one of them never there (the batch falls back to one at a time). */
        struct in_addr other;
        inet_pton(AF_INET, "10.250.0.7", &other);
        const char *names[] = {g_link.host_if, "spv3"};
        struct in_addr addrs[] = {g_link.sandbox_addr, other};
        REQUIRE(wk_nft_sandbox_del_many(&g_cfg, names, addrs, 2, &e) == 0, "del many: %s", emsg(&e));
        REQUIRE(udp_send(&g_s, NULL, FAR, 53, "gone2") == 0 && !readable(dns, SILENCE_MS),
                "a query of a sandbox deleted in a batch arrived");
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "add: %s", emsg(&e));
        REQUIRE(wk_nft_sandbox_add(&g_cfg, "spv3", other, &e) == 0, "add spv3: %s", emsg(&e));
        REQUIRE(wk_nft_sandbox_del_many(&g_cfg, names, addrs, 2, &e) == 0, "del many, all there: %s", emsg(&e));
        REQUIRE(udp_send(&g_s, NULL, FAR, 53, "gone3") == 0 && !readable(dns, SILENCE_MS),
                "a query of a sandbox deleted in a whole batch arrived");
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "add: %s", emsg(&e));
        wk_nflog_free(log);
        return 0;
}

static int gateway_ports_case(void *arg)
{
        (void)arg;
        _cleanup_close_ int lis = tcp_listen(&g_h, GW_TCP), web = tcp_listen(&g_h, 8080);
        _cleanup_close_ int dns = udp_bound(&g_h, AF_INET, "0.0.0.0", GW_DNS);
        REQUIRE(lis >= 0 && web >= 0 && dns >= 0, "sockets: %s", strerror(errno));
        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        uint64_t before = drops(WK_NFT_DROP_GATEWAY);
        _cleanup_close_ int ok = -1, c1 = -1, c2 = -1;
        /* O reaches H otherwise: the table keeps only the gateway's ports from it. */
        REQUIRE(tcp_dial(&g_o, g_ho.addr_a, 8080, ARRIVE_MS, &ok) && readable(web, ARRIVE_MS), "O cannot reach H:8080");
        REQUIRE(!tcp_dial(&g_o, g_ho.addr_a, GW_TCP, SILENCE_MS, &c1) && !readable(lis, 0),
                "O reached the gateway's TCP port");
        REQUIRE(udp_send(&g_o, NULL, g_ho.addr_a, GW_DNS, "q") == 0 && !readable(dns, SILENCE_MS),
                "O reached the gateway's DNS port");
        REQUIRE(!tcp_dial(&g_h, "127.0.0.1", GW_TCP, SILENCE_MS, &c2) && !readable(lis, 0),
                "loopback reached the gateway's TCP port");
        REQUIRE(drops(WK_NFT_DROP_GATEWAY) >= before + 3, "gateway drops did not grow by 3");
        REQUIRE(logged(log, (want){"space:gateway", IPPROTO_TCP, g_ho.addr_b, g_ho.addr_a, GW_TCP}),
                "no log of O's TCP");
        REQUIRE(logged(log, (want){"space:gateway", IPPROTO_UDP, g_ho.addr_b, g_ho.addr_a, GW_DNS}),
                "no log of O's UDP");
        REQUIRE(logged(log, (want){"space:gateway", IPPROTO_TCP, "127.0.0.1", "127.0.0.1", GW_TCP}),
                "no log of loopback's TCP");
        wk_nflog_free(log);
        return 0;
}

static bool logged6(wk_nflog *l, const char *src, uint16_t dport)
{
        struct in6_addr s;
        inet_pton(AF_INET6, src, &s);
        for (int64_t end = now_ms() + ARRIVE_MS;;) {
                for (size_t i = 0; i < g_nrecs; i++) {
                        const wk_nflog_record *r = &g_recs[i];
                        if (strcmp(r->prefix, "space:ipv6") == 0 && r->family == AF_INET6 &&
                            memcmp(&r->saddr.v6, &s, sizeof(s)) == 0 && r->protocol == IPPROTO_UDP && r->dport == dport)
                                return true;
                }
                int64_t left = end - now_ms();
                if (left <= 0)
                        return false;
                if (readable(wk_nflog_fd(l), (int)left))
                        (void)wk_nflog_read(l, collect, NULL, NULL);
        }
}

static int ipv6_case(void *arg)
{
        (void)arg;
        if (access("/proc/sys/net/ipv6", F_OK) != 0) {
                fprintf(stderr, "SKIP ipv6 case: the kernel has no IPv6\n");
                return 0;
        }
        char path[128];
        snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", g_link.host_if);
        REQUIRE(write_in(&g_s, "/proc/sys/net/ipv6/conf/all/disable_ipv6", "0") == 0 &&
                        write_in(&g_s, "/proc/sys/net/ipv6/conf/" WK_NET_SANDBOX_IF "/disable_ipv6", "0") == 0 &&
                        write_in(&g_h, path, "0") == 0,
                "enable IPv6 on the link");
        const char *const s6[] = {"ip", "-6", "addr", "add", "fd00::7/64", "dev", WK_NET_SANDBOX_IF, "nodad", NULL};
        const char *const h6[] = {"ip", "-6", "addr", "add", "fd00::6/64", "dev", g_link.host_if, "nodad", NULL};
        REQUIRE(ip_in(&g_s, s6) == 0 && ip_in(&g_h, h6) == 0, "IPv6 addresses");
        _cleanup_close_ int sink = udp_bound(&g_h, AF_INET6, "::", 9);
        _cleanup_close_ int s = udp_bound(&g_s, AF_INET6, "fd00::7", 0);
        REQUIRE(sink >= 0 && s >= 0, "sockets: %s", strerror(errno));
        struct sockaddr_in6 to = {.sin6_family = AF_INET6, .sin6_port = htons(9)};
        inet_pton(AF_INET6, "fd00::6", &to.sin6_addr);
        /* Without the table, IPv6 crosses the link. */
        REQUIRE(sendto(s, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)) == 1 && readable(sink, ARRIVE_MS),
                "no IPv6 without the table");
        drain(sink);

        wk_nflog *log = NULL;
        if (firewall_up(&log) != 0)
                return 1;
        uint64_t before = drops(WK_NFT_DROP_IPV6);
        REQUIRE(sendto(s, "x", 1, 0, (struct sockaddr *)&to, sizeof(to)) == 1 && !readable(sink, SILENCE_MS),
                "IPv6 crossed the table");
        REQUIRE(drops(WK_NFT_DROP_IPV6) > before, "IPv6 drops did not grow");
        REQUIRE(logged6(log, "fd00::7", 9), "no log of the IPv6 datagram");
        wk_nflog_free(log);
        return 0;
}

/* ---- what the kernel holds, read back without nft ---- */

typedef struct dump_count {
        const char *table;
        int n;
} dump_count;

static int count_table(const struct nlmsghdr *h, void *data)
{
        dump_count *d = data;
        struct nftnl_table *t = nftnl_table_alloc();
        if (t && nftnl_table_nlmsg_parse(h, t) == 0 && strcmp(nftnl_table_get_str(t, NFTNL_TABLE_NAME), d->table) == 0)
                d->n++;
        if (t)
                nftnl_table_free(t);
        return MNL_CB_OK;
}

static int count_rule(const struct nlmsghdr *h, void *data)
{
        (void)h;
        ((dump_count *)data)->n++;
        return MNL_CB_OK;
}

/* How many inet tables of that name (type NFT_MSG_GETTABLE) or rules in it (NFT_MSG_GETRULE); -1 on failure. */
static int count(uint16_t type, const char *table)
{
        struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
        if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
                return -1;
        char buf[16384];
        struct nlmsghdr *h = nftnl_nlmsg_build_hdr(buf, type, NFPROTO_INET, NLM_F_DUMP, 1);
        if (type == NFT_MSG_GETRULE) {
                struct nftnl_rule *r = nftnl_rule_alloc();
                nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
                nftnl_rule_nlmsg_build_payload(h, r);
                nftnl_rule_free(r);
        }
        dump_count d = {.table = table};
        int r = mnl_socket_sendto(nl, h, h->nlmsg_len) < 0 ? -1 : 0;
        while (r == 0) {
                ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                int cb = n < 0 ? MNL_CB_ERROR
                               : mnl_cb_run(buf, (size_t)n, 1, mnl_socket_get_portid(nl),
                                            type == NFT_MSG_GETRULE ? count_rule : count_table, &d);
                if (cb == MNL_CB_ERROR)
                        r = -1;
                else if (cb == MNL_CB_STOP)
                        break;
        }
        mnl_socket_close(nl);
        return r < 0 ? -1 : d.n;
}

static int install_case(void *arg)
{
        (void)arg;
        sp_error *e = NULL;
        REQUIRE(wk_nft_install(&g_cfg, &e) == 0, "install: %s", emsg(&e));
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "add: %s", emsg(&e));
        REQUIRE(wk_nft_install(&g_cfg, &e) == 0, "install again: %s", emsg(&e));
        REQUIRE(count(NFT_MSG_GETTABLE, TABLE) == 1, "%d tables", count(NFT_MSG_GETTABLE, TABLE));
        REQUIRE(count(NFT_MSG_GETRULE, TABLE) == RULES, "%d rules", count(NFT_MSG_GETRULE, TABLE));
        /* For the log: the table as nft prints it, when nft is there. */
        const char *const nft[] = {"nft", "list", "table", "inet", TABLE, NULL};
        if (access("/usr/sbin/nft", X_OK) == 0)
                (void)ip_in(&g_h, nft);
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "add: %s", emsg(&e));
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "add twice: %s", emsg(&e));
        wk_nft_counters k;
        REQUIRE(wk_nft_counters_read(&g_cfg, &k, &e) == 0, "counters: %s", emsg(&e));

        /* A second worker's table beside it: each goes its own way. */
        wk_nft_config other = g_cfg;
        other.table = TABLE "_2";
        other.log_group = GROUP + 1;
        REQUIRE(wk_nft_install(&other, &e) == 0, "install the second: %s", emsg(&e));
        REQUIRE(count(NFT_MSG_GETTABLE, TABLE "_2") == 1 && count(NFT_MSG_GETTABLE, TABLE) == 1, "two tables");
        REQUIRE(wk_nft_remove(&other, &e) == 0, "remove the second: %s", emsg(&e));
        REQUIRE(count(NFT_MSG_GETTABLE, TABLE "_2") == 0 && count(NFT_MSG_GETRULE, TABLE) == RULES,
                "removing one touched the other");

        REQUIRE(wk_nft_remove(&g_cfg, &e) == 0, "remove: %s", emsg(&e));
        REQUIRE(count(NFT_MSG_GETTABLE, TABLE) == 0, "the table is still there");
        REQUIRE(wk_nft_remove(&g_cfg, &e) == 0, "remove again: %s", emsg(&e));
        REQUIRE(wk_nft_sandbox_del(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == 0, "del without a table: %s",
                emsg(&e));
        REQUIRE(wk_nft_sandbox_add(&g_cfg, g_link.host_if, g_link.sandbox_addr, &e) == -SP_E_NOT_FOUND,
                "add without a table");
        sp_error_freep(&e);
        REQUIRE(wk_nft_counters_read(&g_cfg, &k, &e) == -SP_E_NOT_FOUND, "counters without a table");
        sp_error_freep(&e);

        wk_nft_config bad = g_cfg;
        bad.table = "two words";
        REQUIRE(wk_nft_install(&bad, NULL) == -SP_E_INVALID, "took a table name with a space");
        bad = g_cfg;
        bad.if_prefix = "";
        REQUIRE(wk_nft_install(&bad, NULL) == -SP_E_INVALID, "took an empty prefix");
        bad = g_cfg;
        bad.gateway_dns_port = bad.gateway_tcp_port;
        REQUIRE(wk_nft_install(&bad, NULL) == -SP_E_INVALID, "took one port for both");
        REQUIRE(wk_nft_sandbox_add(&g_cfg, "", g_link.sandbox_addr, NULL) == -SP_E_INVALID, "took an empty ifname");
        /* A prefix that would take H's other interfaces for sandboxes' (its veth to O, loopback). */
        bad = g_cfg;
        bad.if_prefix = "sv";
        REQUIRE(wk_nft_install(&bad, NULL) == -SP_E_INVALID, "took a prefix of %s", g_ho.name_a);
        bad.if_prefix = "l";
        REQUIRE(wk_nft_install(&bad, NULL) == -SP_E_INVALID, "took a prefix of lo");
        REQUIRE(count(NFT_MSG_GETTABLE, TABLE) == 0, "a refused install left a table");
        return 0;
}

/* ---- fixtures ---- */

static int make_link(void *arg)
{
        (void)arg;
        sp_error *e = NULL;
        if (wk_net_link_create(&g_link, g_s.fd, &e) < 0) {
                fprintf(stderr, "link: %s\n", emsg(&e));
                return 1;
        }
        int fd = open("/proc/sys/net/ipv4/ip_forward", O_WRONLY | O_CLOEXEC);
        int ok = fd >= 0 && write(fd, "1", 1) == 1;
        if (fd >= 0)
                close(fd);
        return ok ? 0 : 2;
}

static void ns_teardown(void)
{
        sp_test_netns *all[] = {&g_h, &g_s, &g_o};
        for (size_t i = 0; i < SP_ARRAY_SIZE(all); i++) {
                sp_test_netns_destroy(all[i]);
                if (g_guard[i] > 0)
                        sp_test_guard_done(g_guard[i]);
                g_guard[i] = 0;
        }
}

static int ns_setup_try(sp_error **e)
{
        sp_test_netns *all[] = {&g_h, &g_s, &g_o};
        for (size_t i = 0; i < SP_ARRAY_SIZE(all); i++) {
                if (sp_test_netns_create(all[i], e) < 0)
                        return -1;
                /* Should the runner die before its teardown, the names go anyway. */
                const char *const del[] = {"ip", "netns", "delete", all[i]->name, NULL};
                if ((g_guard[i] = sp_test_guard_run(del, e)) < 0)
                        return -1;
        }
        int r = sp_test_netns_run(&g_h, make_link, NULL, 20000, e);
        if (r != 0)
                return r < 0 ? r : sp_error_set(e, SP_E_IO, "the sandbox's link (%d)", r);
        if (sp_test_netns_veth(&g_h, &g_o, &g_ho, e) < 0)
                return -1;
        const char *const route[] = {"ip", "route", "add", "default", "via", g_ho.addr_b, NULL};
        r = sp_test_netns_exec(&g_h, route, NULL, 10000, e);
        if (r != 0)
                return r < 0 ? r : sp_error_set(e, SP_E_IO, "ip route add default (%d)", r);
        return 0;
}

static void ns_setup(void)
{
        sp_error *e = NULL;
        int r = ns_setup_try(&e);
        if (r < 0)
                ns_teardown();
        sp_test_ok(r, &e);
}

/* ---- what is left after ---- */

static void root_ifs(char *buf, size_t size)
{
        buf[0] = '\0';
        struct if_nameindex *all = if_nameindex();
        for (struct if_nameindex *i = all; i && i->if_index; i++) {
                strncat(buf, i->if_name, size - strlen(buf) - 1);
                strncat(buf, " ", size - strlen(buf) - 1);
        }
        if (all)
                if_freenameindex(all);
}

START_TEST(nothing_is_left_behind)
{
        /* The runner made the namespaces (Check's unchecked fixtures run there). */
        char mine[64];
        snprintf(mine, sizeof(mine), SP_TEST_NETNS_PREFIX "%d-", (int)getppid());
        _cleanup_closedir_ DIR *d = opendir(SP_TEST_NETNS_DIR);
        for (struct dirent *de = d ? readdir(d) : NULL; de; de = readdir(d))
                ck_assert_msg(strncmp(de->d_name, mine, strlen(mine)) != 0, "namespace %s left", de->d_name);
        /* Nothing of ours in the host's namespace: the sandbox's link, a veth of the runner or of
         * this process. Other tests running beside this one add links of their own. */
        char now[sizeof(g_root_ifs)];
        root_ifs(now, sizeof(now));
        char veth_runner[32], veth_self[32];
        snprintf(veth_runner, sizeof(veth_runner), "sv%d-", (int)(getppid() % 10000000));
        snprintf(veth_self, sizeof(veth_self), "sv%d-", (int)(getpid() % 10000000));
        char *save = NULL;
        for (char *n = strtok_r(now, " ", &save); n; n = strtok_r(NULL, " ", &save)) {
                char padded[IF_NAMESIZE + 3];
                snprintf(padded, sizeof(padded), " %s ", n);
                char start[sizeof(g_root_ifs) + 2];
                snprintf(start, sizeof(start), " %s", g_root_ifs);
                if (strstr(start, padded))
                        continue;
                ck_assert_msg(strcmp(n, g_link.host_if) != 0 && strncmp(n, veth_runner, strlen(veth_runner)) != 0 &&
                                      strncmp(n, veth_self, strlen(veth_self)) != 0,
                              "link %s left in the host's namespace", n);
        }
}
END_TEST

START_TEST(tcp_goes_to_the_gateway_with_its_original_destination)
{
        in_h(tcp_case, "tcp");
}
END_TEST

START_TEST(a_sandbox_holds_a_bounded_number_of_flows)
{
        in_h(conntrack_case, "conntrack");
}
END_TEST

START_TEST(dns_goes_to_the_gateway_and_answers_as_dialled)
{
        in_h(dns_case, "dns");
}
END_TEST

START_TEST(the_host_takes_nothing_else_from_a_sandbox)
{
        in_h(input_case, "input");
}
END_TEST

START_TEST(nothing_is_forwarded_from_a_sandbox)
{
        in_h(forward_case, "forward");
}
END_TEST

START_TEST(spoofed_and_unregistered_sources_are_dropped)
{
        in_h(spoof_case, "spoof");
}
END_TEST

START_TEST(other_interfaces_cannot_reach_the_gateway_ports)
{
        in_h(gateway_ports_case, "gateway ports");
}
END_TEST

START_TEST(ipv6_from_a_sandbox_is_dropped)
{
        in_h(ipv6_case, "ipv6");
}
END_TEST

START_TEST(install_is_idempotent_and_remove_removes)
{
        in_h(install_case, "install");
}
END_TEST

static Suite *nft_suite(void)
{
        Suite *s = suite_create("worker_nft");
        const struct {
                const char *name;
                const TTest *test;
        } cases[] = {
                {"tcp", tcp_goes_to_the_gateway_with_its_original_destination},
                {"dns", dns_goes_to_the_gateway_and_answers_as_dialled},
                {"input", the_host_takes_nothing_else_from_a_sandbox},
                {"forward", nothing_is_forwarded_from_a_sandbox},
                {"spoof", spoofed_and_unregistered_sources_are_dropped},
                {"gateway_ports", other_interfaces_cannot_reach_the_gateway_ports},
                {"ipv6", ipv6_from_a_sandbox_is_dropped},
                {"install", install_is_idempotent_and_remove_removes},
                {"conntrack", a_sandbox_holds_a_bounded_number_of_flows},
        };
        /* A TCase each: fresh namespaces per case, removed by the runner even when the case crashes. */
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                TCase *tc = tcase_create(cases[i].name);
                tcase_add_unchecked_fixture(tc, ns_setup, ns_teardown);
                tcase_set_timeout(tc, 90);
                tcase_add_test(tc, cases[i].test);
                suite_add_tcase(s, tc);
        }
        TCase *tc = tcase_create("cleanup");
        tcase_add_test(tc, nothing_is_left_behind);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_netns_require();
        sp_test_require_program("ip", "the test configures addresses and routes with iproute2");
        g_why = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (g_why == MAP_FAILED)
                return 1;
        root_ifs(g_root_ifs, sizeof(g_root_ifs));
        wk_net_pool pool;
        if (wk_net_pool_parse(WK_NET_DEFAULT_CIDR, &pool, NULL) < 0 || wk_net_link_of(&pool, SLOT, &g_link, NULL) < 0)
                return 1;
        g_cfg = (wk_nft_config){.table = TABLE,
                                .if_prefix = WK_NET_HOST_PREFIX,
                                .pool = pool,
                                .gateway_tcp_port = GW_TCP,
                                .gateway_dns_port = GW_DNS,
                                .log_group = GROUP};
        return sp_test_main(nft_suite());
}
