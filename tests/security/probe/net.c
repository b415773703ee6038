/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-probe --net: network attempts a busybox shell cannot make, for the
 * egress red-team suite (tests/security/test_sec_egress.c). One operation
 * per run, one line per attempt, "<attempt> <result> [detail]":
 *
 *   tcp ADDR PORT tls|http|dns|none ARG
 *                  connects and sends a hand-built TLS ClientHello with SNI
 *                  ARG ("-": none), an HTTP request with Host ARG, a DNS
 *                  query for ARG over TCP, or nothing; then "answered
 *                  [HTTP body]", "reset", "closed", "timeout" or
 *                  "connect_failed ERRNO"
 *   udp ADDR PORT  a datagram, then "answered", "silent" or "error ERRNO"
 *   icmp ADDR      an echo request by a ping socket and by a raw socket
 *   raw SRC DST PORT  a UDP packet with its own IP header (IPPROTO_RAW)
 *                  (creating a socket that is refused: "denied ERRNO")
 *   spoof SRC DST PORT  TCP and a DNS query from a source that is not ours:
 *                  IP_TRANSPARENT (needs a capability), then IP_FREEBIND
 *                  (needs none, but the kernel routes no foreign source)
 *   v6 ADDR PORT   TCP and UDP over IPv6, and turning IPv6 on
 *   nft            nftables over netlink: list the tables, add one
 *   dnsflood SERVER N SUFFIX  N queries at once, then the answers by rcode
 *   connflood ADDR PORT HOST N BURST PACE_MS  N HTTP connections, BURST at
 *                  once then one every PACE_MS, all held open to the end
 *
 * Every wait is bounded (a few seconds); nothing is retried.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int probe_net(int argc, char **argv);

static const char *err_name(int e)
{
        const char *n = strerrorname_np(e);
        return n ? n : "?";
}

static int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct sockaddr_in sin_of(const char *addr, int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, addr, &sa.sin_addr);
        return sa;
}

static void put16(uint8_t *b, size_t *n, unsigned v)
{
        b[(*n)++] = (uint8_t)(v >> 8);
        b[(*n)++] = (uint8_t)v;
}

/* A TLS 1.2 ClientHello naming sni ("-": no server_name), as small clients send it. */
static size_t client_hello(uint8_t *b, const char *sni)
{
        static const uint8_t tail[] = {
                0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17, /* groups: x25519, p256 */
                0x00, 0x0b, 0x00, 0x02, 0x01, 0x00, /* point formats */
                0x00, 0x0d, 0x00, 0x08, 0x00, 0x06, 0x04, 0x01, 0x08, 0x04, 0x04, 0x03}; /* signatures */
        size_t nl = strcmp(sni, "-") == 0 ? 0 : strlen(sni), n = 9;
        put16(b, &n, 0x0303);
        for (int i = 0; i < 32; i++)
                b[n++] = (uint8_t)(i * 37 + 11);
        b[n++] = 0; /* no session id */
        put16(b, &n, 6);
        put16(b, &n, 0xc02f);
        put16(b, &n, 0x009c);
        put16(b, &n, 0x002f);
        b[n++] = 1;
        b[n++] = 0;
        put16(b, &n, (nl ? 9 + nl : 0) + sizeof(tail));
        if (nl) {
                put16(b, &n, 0); /* server_name */
                put16(b, &n, 5 + nl);
                put16(b, &n, 3 + nl);
                b[n++] = 0;
                put16(b, &n, nl);
                memcpy(b + n, sni, nl);
                n += nl;
        }
        memcpy(b + n, tail, sizeof(tail));
        n += sizeof(tail);
        size_t hs = n - 9;
        b[0] = 0x16, b[1] = 3, b[2] = 1, b[3] = (uint8_t)((hs + 4) >> 8), b[4] = (uint8_t)(hs + 4);
        b[5] = 1, b[6] = 0, b[7] = (uint8_t)(hs >> 8), b[8] = (uint8_t)hs;
        return n;
}

/* A DNS query for an A record of name, with id. */
static size_t dns_query(uint8_t *b, uint16_t id, const char *name)
{
        size_t n = 0;
        put16(b, &n, id);
        put16(b, &n, 0x0100);
        put16(b, &n, 1);
        put16(b, &n, 0);
        put16(b, &n, 0);
        put16(b, &n, 0);
        for (const char *l = name; *l;) {
                size_t k = strcspn(l, ".");
                b[n++] = (uint8_t)k;
                memcpy(b + n, l, k);
                n += k;
                l += k + (l[k] == '.');
        }
        b[n++] = 0;
        put16(b, &n, 1);
        put16(b, &n, 1);
        return n;
}

/* Waits up to ms for fd to be readable: 1 ready, 0 not. */
static int wait_in(int fd, int ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        return poll(&p, 1, ms) > 0;
}

/* Connects within 2 s: 0, or -1 with errno. */
static int connect_within(int fd, const struct sockaddr *sa, socklen_t len)
{
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int r = connect(fd, sa, len);
        if (r < 0 && errno == EINPROGRESS) {
                struct pollfd p = {.fd = fd, .events = POLLOUT};
                if (poll(&p, 1, 2000) <= 0) {
                        errno = ETIMEDOUT;
                        return -1;
                }
                int e = 0;
                socklen_t el = sizeof(e);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
                errno = e;
                r = e ? -1 : 0;
        }
        fcntl(fd, F_SETFL, fl);
        return r;
}

/* What came back on fd within 3 s (0.3 s after its first bytes), as one word,
 * and the HTTP body if any. */
static void print_outcome(const char *what, int fd)
{
        char buf[4096];
        size_t len = 0;
        ssize_t r = 0;
        int64_t end = now_ms() + 3000;
        while (len < sizeof(buf) - 1 && wait_in(fd, (int)(end - now_ms() > 0 ? end - now_ms() : 0))) {
                r = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
                if (end > now_ms() + 300)
                        end = now_ms() + 300;
        }
        buf[len] = '\0';
        if (len > 0) {
                char *body = memmem(buf, len, "\r\n\r\n", 4);
                if (body) {
                        body += 4;
                        body[strcspn(body, "\r\n")] = '\0';
                }
                printf("%s answered%s%s\n", what, body ? " " : "", body ? body : "");
        } else if (r < 0) {
                printf("%s %s\n", what, errno == ECONNRESET ? "reset" : err_name(errno));
        } else {
                printf("%s %s\n", what, r == 0 && now_ms() < end ? "closed" : "timeout");
        }
}

static int op_tcp(char **a)
{
        char what[160];
        snprintf(what, sizeof(what), "tcp %s:%s", a[0], a[1]);
        struct sockaddr_in sa = sin_of(a[0], atoi(a[1]));
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect_within(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                printf("%s connect_failed %s\n", what, err_name(errno));
                return 0;
        }
        uint8_t msg[1024];
        size_t n = 0;
        if (strcmp(a[2], "tls") == 0) {
                n = client_hello(msg, a[3]);
        } else if (strcmp(a[2], "http") == 0) {
                n = (size_t)snprintf((char *)msg, sizeof(msg), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", a[3]);
        } else if (strcmp(a[2], "dns") == 0) {
                n = dns_query(msg + 2, 0x5150, a[3]) + 2;
                msg[0] = (uint8_t)((n - 2) >> 8), msg[1] = (uint8_t)(n - 2);
        }
        if (n && write(fd, msg, n) != (ssize_t)n) {
                printf("%s %s\n", what, errno == ECONNRESET || errno == EPIPE ? "reset" : err_name(errno));
                return 0;
        }
        if (strcmp(a[2], "tls") != 0)
                shutdown(fd, SHUT_WR);
        print_outcome(what, fd);
        close(fd);
        return 0;
}

/* Sends msg to sa from fd and says whether anything came back within 1 s. */
static void send_and_listen(const char *what, int fd, const void *msg, size_t n, const struct sockaddr *sa,
                            socklen_t len)
{
        if (sendto(fd, msg, n, 0, sa, len) < 0) {
                printf("%s error %s\n", what, err_name(errno));
                return;
        }
        char buf[512];
        bool got = wait_in(fd, 1000) && recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0;
        printf("%s %s\n", what, got ? "answered" : "silent");
}

static int op_udp(char **a)
{
        char what[160];
        snprintf(what, sizeof(what), "udp %s:%s", a[0], a[1]);
        struct sockaddr_in sa = sin_of(a[0], atoi(a[1]));
        int fd = socket(AF_INET, SOCK_DGRAM, 0);
        send_and_listen(what, fd, "space-probe\n", 12, (struct sockaddr *)&sa, sizeof(sa));
        close(fd);
        return 0;
}

/* N datagrams as fast as they go; prints "sent=N". */
static int op_udpflood(char **a)
{
        struct sockaddr_in sa = sin_of(a[0], atoi(a[1]));
        int fd = socket(AF_INET, SOCK_DGRAM, 0), n = atoi(a[2]), sent = 0;
        for (int i = 0; fd >= 0 && i < n && i < 100000; i++)
                sent += sendto(fd, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa)) == 1;
        printf("udpflood sent=%d\n", sent);
        if (fd >= 0)
                close(fd);
        return 0;
}

static int op_icmp(char **a)
{
        struct sockaddr_in sa = sin_of(a[0], 0);
        struct icmphdr echo = {.type = ICMP_ECHO, .un.echo = {.id = htons(7), .sequence = htons(1)}};
        uint32_t sum = 0;
        for (size_t i = 0; i < sizeof(echo) / 2; i++)
                sum += ((uint16_t *)&echo)[i];
        echo.checksum = (uint16_t) ~(sum + (sum >> 16));
        static const struct {
                const char *name;
                int type;
        } kinds[] = {{"icmp_dgram", SOCK_DGRAM}, {"icmp_raw", SOCK_RAW}};
        for (size_t k = 0; k < 2; k++) {
                int fd = socket(AF_INET, kinds[k].type, IPPROTO_ICMP);
                if (fd < 0) {
                        printf("%s denied %s\n", kinds[k].name, err_name(errno));
                        continue;
                }
                send_and_listen(kinds[k].name, fd, &echo, sizeof(echo), (struct sockaddr *)&sa, sizeof(sa));
                close(fd);
        }
        return 0;
}

static int op_raw(char **a)
{
        int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
        if (fd < 0) {
                printf("raw_ip denied %s\n", err_name(errno));
                return 0;
        }
        struct {
                struct iphdr ip;
                struct udphdr udp;
                char data[12];
        } pkt = {.ip = {.version = 4, .ihl = 5, .ttl = 64, .protocol = IPPROTO_UDP, .tot_len = htons(sizeof(pkt))},
                 .udp = {.dest = htons((uint16_t)atoi(a[2])), .source = htons(4242), .len = htons(8 + 12)}};
        memcpy(pkt.data, "space-probe\n", 12);
        inet_pton(AF_INET, a[0], &pkt.ip.saddr);
        inet_pton(AF_INET, a[1], &pkt.ip.daddr);
        struct sockaddr_in sa = sin_of(a[1], 0);
        ssize_t r = sendto(fd, &pkt, sizeof(pkt), 0, (struct sockaddr *)&sa, sizeof(sa));
        if (r < 0)
                printf("raw_ip error %s\n", err_name(errno));
        else
                printf("raw_ip sent\n");
        close(fd);
        return 0;
}

/* A socket of type bound to src, which need not be ours; -1 if not. */
static int freebind(int type, const char *src)
{
        int fd = socket(AF_INET, type, 0), one = 1;
        struct sockaddr_in sa = sin_of(src, 0);
        if (setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof(one)) < 0 ||
            bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
        }
        return fd;
}

static int op_spoof(char **a)
{
        struct sockaddr_in dst = sin_of(a[1], atoi(a[2])), dns = sin_of(a[1], 53);
        int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        if (setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof(one)) < 0)
                printf("spoof_transparent denied %s\n", err_name(errno));
        else
                printf("spoof_transparent ok\n");
        close(fd);
        fd = freebind(SOCK_STREAM, a[0]);
        if (fd < 0)
                printf("spoof_tcp bind_denied %s\n", err_name(errno));
        else if (connect_within(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0)
                printf("spoof_tcp %s\n", errno == ETIMEDOUT ? "timeout" : err_name(errno));
        else
                printf("spoof_tcp connected\n");
        if (fd >= 0)
                close(fd);
        fd = freebind(SOCK_DGRAM, a[0]);
        uint8_t q[512];
        size_t n = dns_query(q, 0x5151, "allowed.test");
        if (fd < 0)
                printf("spoof_udp bind_denied %s\n", err_name(errno));
        else
                send_and_listen("spoof_udp", fd, q, n, (struct sockaddr *)&dns, sizeof(dns));
        if (fd >= 0)
                close(fd);
        return 0;
}

static int op_v6(char **a)
{
        struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)atoi(a[1]))};
        inet_pton(AF_INET6, a[0], &sa.sin6_addr);
        int fd = socket(AF_INET6, SOCK_STREAM, 0);
        if (fd < 0)
                printf("v6_tcp denied %s\n", err_name(errno));
        else if (connect_within(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                printf("v6_tcp connect_failed %s\n", err_name(errno));
        else
                printf("v6_tcp connected\n");
        if (fd >= 0)
                close(fd);
        fd = socket(AF_INET6, SOCK_DGRAM, 0);
        if (fd >= 0 && sendto(fd, "x", 1, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                printf("v6_udp error %s\n", err_name(errno));
        else
                printf("v6_udp %s\n", fd < 0 ? "denied" : "sent");
        if (fd >= 0)
                close(fd);
        int sys = open("/proc/sys/net/ipv6/conf/all/disable_ipv6", O_WRONLY);
        if (sys < 0 || write(sys, "0\n", 2) < 0)
                printf("v6_enable denied %s\n", err_name(errno));
        else
                printf("v6_enable ok\n");
        if (sys >= 0)
                close(sys);
        return 0;
}

/* One netlink message of nfnetlink type (subsystem nftables unless batch) into b at *n. */
static void nl_put(uint8_t *b, size_t *n, uint16_t type, uint16_t flags, uint8_t family, const char *name)
{
        struct nlmsghdr *h = (struct nlmsghdr *)(b + *n);
        *h = (struct nlmsghdr){.nlmsg_type = type, .nlmsg_flags = NLM_F_REQUEST | flags, .nlmsg_seq = 1};
        struct nfgenmsg *g = (struct nfgenmsg *)(h + 1);
        *g = (struct nfgenmsg){.nfgen_family = family, .version = NFNETLINK_V0, .res_id = htons(NFNL_SUBSYS_NFTABLES)};
        size_t len = NLMSG_LENGTH(sizeof(*g));
        if (name) {
                struct nlattr *at = (struct nlattr *)((uint8_t *)h + len);
                at->nla_type = NFTA_TABLE_NAME;
                at->nla_len = (uint16_t)(NLA_HDRLEN + strlen(name) + 1);
                memcpy(at + 1, name, strlen(name) + 1);
                len += NLA_ALIGN(at->nla_len);
        }
        h->nlmsg_len = (uint32_t)len;
        *n += NLMSG_ALIGN(len);
}

/* The first error the kernel answers on fd (0: none), counting table messages in *tables. */
static int nl_answer(int fd, int *tables)
{
        uint8_t buf[16384];
        while (wait_in(fd, 1000)) {
                ssize_t r = recv(fd, buf, sizeof(buf), 0);
                for (struct nlmsghdr *h = (struct nlmsghdr *)buf; r > 0 && NLMSG_OK(h, (size_t)r);
                     h = NLMSG_NEXT(h, r)) {
                        if (h->nlmsg_type == NLMSG_DONE)
                                return 0;
                        if (h->nlmsg_type == NLMSG_ERROR)
                                return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
                        (*tables)++;
                }
        }
        return 0;
}

static int op_nft(char **a)
{
        (void)a;
        int fd = socket(AF_NETLINK, SOCK_RAW, NETLINK_NETFILTER), tables = 0;
        if (fd < 0) {
                printf("nft_socket denied %s\n", err_name(errno));
                return 0;
        }
        uint8_t b[512] __attribute__((aligned(4)));
        size_t n = 0;
        nl_put(b, &n, NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE, NLM_F_DUMP, NFPROTO_UNSPEC, NULL);
        int e = send(fd, b, n, 0) < 0 ? -errno : nl_answer(fd, &tables);
        if (e)
                printf("nft_list denied %s\n", err_name(-e));
        else
                printf("nft_tables %d\n", tables);
        n = 0;
        nl_put(b, &n, NFNL_MSG_BATCH_BEGIN, 0, NFPROTO_UNSPEC, NULL);
        nl_put(b, &n, NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_NEWTABLE, NLM_F_CREATE | NLM_F_ACK, NFPROTO_INET,
               "space_probe");
        nl_put(b, &n, NFNL_MSG_BATCH_END, 0, NFPROTO_UNSPEC, NULL);
        e = send(fd, b, n, 0) < 0 ? -errno : nl_answer(fd, &tables);
        if (e)
                printf("nft_newtable denied %s\n", err_name(-e));
        else
                printf("nft_newtable ok\n");
        close(fd);
        return 0;
}

static int op_dnsflood(char **a)
{
        struct sockaddr_in sa = sin_of(a[0], 53);
        int n = atoi(a[1]), fd = socket(AF_INET, SOCK_DGRAM, 0);
        int bufsz = 1 << 20, rcodes[16] = {0}, got = 0;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof(bufsz));
        int64_t start = now_ms();
        for (int i = 0; i < n; i++) {
                char name[256];
                uint8_t q[512];
                snprintf(name, sizeof(name), "q%d.%s", i, a[2]);
                size_t len = dns_query(q, (uint16_t)i, name);
                sendto(fd, q, len, 0, (struct sockaddr *)&sa, sizeof(sa));
        }
        int64_t sent_ms = now_ms() - start;
        while (got < n && wait_in(fd, 2000)) {
                uint8_t r[1024];
                if (recv(fd, r, sizeof(r), 0) >= 4) {
                        rcodes[r[3] & 15]++;
                        got++;
                }
        }
        printf("dnsflood sent=%d noerror=%d nxdomain=%d refused=%d servfail=%d lost=%d ms=%lld\n", n, rcodes[0],
               rcodes[3], rcodes[5], rcodes[2], n - got, (long long)sent_ms);
        close(fd);
        return 0;
}

/* The outcome of each flood connection: 0 open, then one of these. */
enum { FL_OPEN, FL_ANSWERED, FL_RESET, FL_CLOSED };

static void flood_poll(const int *fds, int *st, int n, int ms)
{
        struct pollfd *p = calloc((size_t)n, sizeof(*p));
        for (int i = 0; i < n; i++)
                p[i] = (struct pollfd){.fd = st[i] == FL_OPEN ? fds[i] : -1, .events = POLLIN};
        if (poll(p, (nfds_t)n, ms) > 0)
                for (int i = 0; i < n; i++) {
                        if (!p[i].revents)
                                continue;
                        char buf[512];
                        ssize_t r = recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT);
                        st[i] = r > 0 ? FL_ANSWERED : r == 0 ? FL_CLOSED : errno == ECONNRESET ? FL_RESET : FL_OPEN;
                }
        free(p);
}

/* N connections that send nothing (a slowloris on the gateway's wait for
 * the first bytes), held 300 ms; prints how many were reset or closed by
 * then ("closed=K"), how many are still open, and how long making them took
 * ("ms="). All are begun before any is waited for: the flood is as fast as
 * the sandbox's kernel, so that many wait at the gateway at once even on a
 * slow machine. */
static int op_silentflood(char **a)
{
        enum { SF_WAITING, SF_OPEN, SF_FAILED };
        struct sockaddr_in sa = sin_of(a[0], atoi(a[1]));
        int n = atoi(a[2]), opened = 0, closed = 0;
        int *fds = calloc((size_t)n, sizeof(int)), *st = calloc((size_t)n, sizeof(int));
        if (!fds || !st) {
                fprintf(stderr, "silentflood: out of memory\n");
                return 1;
        }
        int64_t start = now_ms();
        for (int i = 0; i < n; i++) {
                fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
                if (fds[i] < 0 || (connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS))
                        st[i] = SF_FAILED;
        }
        /* Until every connection is made or refused, or 2 s. */
        for (int64_t end = now_ms() + 2000; now_ms() < end;) {
                int waiting = 0;
                for (int i = 0; i < n; i++) {
                        if (st[i] != SF_WAITING)
                                continue;
                        struct pollfd p = {.fd = fds[i], .events = POLLOUT};
                        if (poll(&p, 1, 0) != 1) {
                                waiting++;
                                continue;
                        }
                        int e = 0;
                        socklen_t el = sizeof(e);
                        getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &e, &el);
                        st[i] = e ? SF_FAILED : SF_OPEN;
                }
                if (!waiting)
                        break;
                usleep(1000);
        }
        int64_t ms = now_ms() - start;
        usleep(300 * 1000);
        for (int i = 0; i < n; i++) {
                if (st[i] == SF_OPEN) {
                        opened++;
                        char b;
                        ssize_t r = recv(fds[i], &b, 1, MSG_DONTWAIT);
                        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
                                closed++;
                } else if (st[i] == SF_FAILED) {
                        closed++;
                }
        }
        printf("silentflood sent=%d opened=%d closed=%d ms=%lld\n", n, opened, closed, (long long)ms);
        for (int i = 0; i < n; i++)
                if (fds[i] >= 0)
                        close(fds[i]);
        free(fds);
        free(st);
        return 0;
}

static int op_connflood(char **a)
{
        struct sockaddr_in sa = sin_of(a[0], atoi(a[1]));
        int n = atoi(a[3]), burst = atoi(a[4]), pace = atoi(a[5]);
        int *fds = calloc((size_t)n, sizeof(int)), *st = calloc((size_t)n, sizeof(int)), count[4] = {0};
        char req[300];
        int rl = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", a[2]);
        int64_t start = now_ms();
        for (int i = 0; i < n; i++) {
                if (i >= burst)
                        usleep((useconds_t)pace * 1000);
                fds[i] = socket(AF_INET, SOCK_STREAM, 0);
                if (fds[i] < 0) {
                        n = i; /* out of descriptors: the flood is what was opened */
                        break;
                }
                if (connect_within(fds[i], (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
                    write(fds[i], req, (size_t)rl) != rl)
                        st[i] = FL_RESET;
        }
        int64_t opened_ms = now_ms() - start;
        /* Until every connection is decided, or 4 s; all are held open meanwhile. */
        for (int64_t end = now_ms() + 4000; now_ms() < end;) {
                flood_poll(fds, st, n, 100);
                int open = 0;
                for (int i = 0; i < n; i++)
                        open += st[i] == FL_OPEN;
                if (!open)
                        break;
        }
        for (int i = 0; i < n; i++) {
                count[st[i]]++;
                if (fds[i] >= 0)
                        close(fds[i]);
        }
        printf("connflood sent=%d answered=%d reset=%d closed=%d open=%d ms=%lld\n", n, count[FL_ANSWERED],
               count[FL_RESET], count[FL_CLOSED], count[FL_OPEN], (long long)opened_ms);
        free(fds);
        free(st);
        return 0;
}

int probe_net(int argc, char **argv)
{
        static const struct {
                const char *name;
                int nargs;
                int (*fn)(char **a);
        } ops[] = {{"tcp", 4, op_tcp},
                   {"udp", 2, op_udp},
                   {"icmp", 1, op_icmp},
                   {"raw", 3, op_raw},
                   {"spoof", 3, op_spoof},
                   {"v6", 2, op_v6},
                   {"nft", 0, op_nft},
                   {"dnsflood", 3, op_dnsflood},
                   {"connflood", 6, op_connflood},
                   {"udpflood", 3, op_udpflood},
                   {"silentflood", 3, op_silentflood}};
        setvbuf(stdout, NULL, _IOLBF, 0);
        for (size_t i = 0; argc > 0 && i < sizeof(ops) / sizeof(ops[0]); i++)
                if (strcmp(argv[0], ops[i].name) == 0 && argc - 1 == ops[i].nargs)
                        return ops[i].fn(argv + 1);
        fprintf(stderr, "space-probe --net: unknown operation or wrong arguments\n");
        return 2;
}
