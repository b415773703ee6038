/* SPDX-License-Identifier: Apache-2.0 */
/* NFLOG records over nfnetlink_log (see nflog.h). */
#include "net/nflog.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#define RCVBUF (1 << 20)
/* Records are flushed after this long, in hundredths of a second. */
#define FLUSH_CS 10
#define BUF_SIZE 65536

/* ---- the parser ---- */

static uint16_t be16_at(const uint8_t *p)
{
        return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t be32_at(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The head of the packet, from its network header on. Leaves the record's packet fields zero unless it is a
 * well-formed IPv4 or IPv6 header. */
static void parse_packet(const uint8_t *p, size_t len, wk_nflog_record *r)
{
        const uint8_t *l4;
        size_t l4len;
        bool first_fragment = true;
        uint8_t icmp;
        if (len >= 20 && p[0] >> 4 == 4) {
                size_t ihl = (size_t)(p[0] & 0x0f) * 4;
                if (ihl < 20 || ihl > len)
                        return;
                r->family = AF_INET;
                r->length = be16_at(p + 2);
                r->protocol = p[9];
                memcpy(&r->saddr.v4, p + 12, 4);
                memcpy(&r->daddr.v4, p + 16, 4);
                first_fragment = (be16_at(p + 6) & 0x1fff) == 0;
                l4 = p + ihl;
                l4len = len - ihl;
                icmp = IPPROTO_ICMP;
        } else if (len >= 40 && p[0] >> 4 == 6) {
                /* Extension headers are not followed: protocol is the first next header. */
                r->family = AF_INET6;
                r->length = 40 + (uint32_t)be16_at(p + 4);
                r->protocol = p[6];
                memcpy(&r->saddr.v6, p + 8, 16);
                memcpy(&r->daddr.v6, p + 24, 16);
                l4 = p + 40;
                l4len = len - 40;
                icmp = IPPROTO_ICMPV6;
        } else {
                return;
        }
        if (!first_fragment)
                return;
        if ((r->protocol == IPPROTO_TCP || r->protocol == IPPROTO_UDP) && l4len >= 4) {
                r->sport = be16_at(l4);
                r->dport = be16_at(l4 + 2);
        } else if (r->protocol == icmp && l4len >= 2) {
                r->icmp_type = l4[0];
                r->icmp_code = l4[1];
        }
}

int wk_nflog_parse(const void *buf, size_t len, wk_nflog_record *ret, sp_error **err)
{
        const uint8_t *p = buf;
        struct nlmsghdr h;
        struct nfgenmsg g;
        memset(ret, 0, sizeof(*ret));
        /* Copied out field by field: the parser takes any bytes, aligned or not. */
        if (!p || len < NLMSG_HDRLEN + sizeof(g))
                return sp_error_set(err, SP_E_INVALID, "nflog message of %zu bytes is too short", len);
        memcpy(&h, p, sizeof(h));
        if (h.nlmsg_len < NLMSG_HDRLEN + sizeof(g) || h.nlmsg_len > len)
                return sp_error_set(err, SP_E_INVALID, "nflog message length %u out of bounds (%zu)",
                                    (unsigned)h.nlmsg_len, len);
        if (NFNL_SUBSYS_ID(h.nlmsg_type) != NFNL_SUBSYS_ULOG || NFNL_MSG_TYPE(h.nlmsg_type) != NFULNL_MSG_PACKET)
                return sp_error_set(err, SP_E_INVALID, "netlink message type %#x is not an nflog packet",
                                    (unsigned)h.nlmsg_type);
        memcpy(&g, p + NLMSG_HDRLEN, sizeof(g));
        ret->group = ntohs(g.res_id);

        bool have_hdr = false;
        const uint8_t *packet = NULL;
        size_t packet_len = 0;
        size_t end = h.nlmsg_len;
        for (size_t off = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(g)); off + NLA_HDRLEN <= end;) {
                struct nlattr a;
                memcpy(&a, p + off, sizeof(a));
                if (a.nla_len < NLA_HDRLEN || a.nla_len > end - off)
                        return sp_error_set(err, SP_E_INVALID, "nflog attribute at %zu has a bad length", off);
                const uint8_t *v = p + off + NLA_HDRLEN;
                size_t vlen = a.nla_len - NLA_HDRLEN;
                switch (a.nla_type & NLA_TYPE_MASK) {
                case NFULA_PACKET_HDR:
                        if (vlen < sizeof(struct nfulnl_msg_packet_hdr))
                                return sp_error_set(err, SP_E_INVALID, "nflog packet header too short");
                        ret->hook = v[offsetof(struct nfulnl_msg_packet_hdr, hook)];
                        have_hdr = true;
                        break;
                case NFULA_PREFIX: {
                        size_t n = strnlen((const char *)v, vlen);
                        if (n >= sizeof(ret->prefix))
                                n = sizeof(ret->prefix) - 1;
                        memcpy(ret->prefix, v, n);
                        ret->prefix[n] = '\0';
                        break;
                }
                case NFULA_IFINDEX_INDEV:
                case NFULA_IFINDEX_OUTDEV:
                        if (vlen < 4)
                                return sp_error_set(err, SP_E_INVALID, "nflog interface index too short");
                        if ((a.nla_type & NLA_TYPE_MASK) == NFULA_IFINDEX_INDEV)
                                ret->indev = be32_at(v);
                        else
                                ret->outdev = be32_at(v);
                        break;
                case NFULA_PAYLOAD:
                        packet = v;
                        packet_len = vlen;
                        break;
                default:
                        break;
                }
                off += NLA_ALIGN(a.nla_len);
        }
        if (!have_hdr)
                return sp_error_set(err, SP_E_INVALID, "nflog message without a packet header");
        if (packet)
                parse_packet(packet, packet_len, ret);
        return 0;
}

/* ---- the reader ---- */

struct wk_nflog {
        struct mnl_socket *sock;
        uint32_t portid, seq;
        uint16_t group;
        uint64_t skipped, overruns;
        char buf[BUF_SIZE];
};

/* One configuration message for the group, acknowledged: 0 or -errno. */
static int config(wk_nflog *l, const void *cmd, size_t cmd_len, const void *mode, size_t mode_len)
{
        char buf[512];
        struct nlmsghdr *h = mnl_nlmsg_put_header(buf);
        h->nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
        h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
        h->nlmsg_seq = ++l->seq;
        struct nfgenmsg *g = mnl_nlmsg_put_extra_header(h, sizeof(*g));
        g->nfgen_family = AF_UNSPEC;
        g->version = NFNETLINK_V0;
        g->res_id = htons(l->group);
        if (cmd)
                mnl_attr_put(h, NFULA_CFG_CMD, cmd_len, cmd);
        if (mode) {
                mnl_attr_put(h, NFULA_CFG_MODE, mode_len, mode);
                mnl_attr_put_u32(h, NFULA_CFG_TIMEOUT, htonl(FLUSH_CS));
        }
        if (mnl_socket_sendto(l->sock, h, h->nlmsg_len) < 0)
                return -errno;
        for (;;) {
                ssize_t got = mnl_socket_recvfrom(l->sock, l->buf, sizeof(l->buf));
                if (got < 0)
                        return -errno;
                int r = mnl_cb_run(l->buf, (size_t)got, h->nlmsg_seq, l->portid, NULL, NULL);
                if (r == MNL_CB_ERROR)
                        return -errno;
                if (r == MNL_CB_STOP)
                        return 0;
        }
}

int wk_nflog_open(uint16_t group, wk_nflog **ret, sp_error **err)
{
        wk_nflog *l = calloc(1, sizeof(*l));
        if (!l)
                return sp_error_set(err, SP_E_INTERNAL, "out of memory");
        l->group = group;
        l->seq = (uint32_t)time(NULL);
        const char *step = "open a netfilter netlink socket";
        int r = 0;
        l->sock = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
        if (!l->sock)
                r = -errno;
        struct timeval tv = {.tv_sec = 5};
        int rcvbuf = RCVBUF;
        if (r == 0 && (mnl_socket_bind(l->sock, 0, MNL_SOCKET_AUTOPID) < 0 ||
                       setsockopt(mnl_socket_get_fd(l->sock), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0))
                r = -errno;
        if (r == 0) {
                l->portid = mnl_socket_get_portid(l->sock);
                /* A bigger queue for bursts; the kernel may cap it (rmem_max), which only means less. */
                (void)setsockopt(mnl_socket_get_fd(l->sock), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
                step = "bind the NFLOG group";
                struct nfulnl_msg_config_cmd bind = {.command = NFULNL_CFG_CMD_BIND};
                r = config(l, &bind, sizeof(bind), NULL, 0);
                if (r == -EPERM)
                        step = "bind the NFLOG group (another socket has it, or no CAP_NET_ADMIN)";
        }
        if (r == 0) {
                step = "set the NFLOG copy mode";
                struct nfulnl_msg_config_mode mode = {.copy_range = htonl(WK_NFLOG_COPY),
                                                      .copy_mode = NFULNL_COPY_PACKET};
                r = config(l, NULL, 0, &mode, sizeof(mode));
        }
        if (r == 0) {
                step = "make the NFLOG socket non-blocking";
                int fd = mnl_socket_get_fd(l->sock), fl = fcntl(fd, F_GETFL);
                if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                        r = -errno;
        }
        if (r < 0) {
                wk_nflog_free(l);
                return sp_error_set_errno(err, SP_E_IO, -r, "NFLOG group %u: %s", (unsigned)group, step);
        }
        *ret = l;
        return 0;
}

wk_nflog *wk_nflog_free(wk_nflog *l)
{
        if (!l)
                return NULL;
        /* Closing the socket releases the group. */
        if (l->sock)
                mnl_socket_close(l->sock);
        free(l);
        return NULL;
}

int wk_nflog_fd(const wk_nflog *l)
{
        return mnl_socket_get_fd(l->sock);
}

uint64_t wk_nflog_skipped(const wk_nflog *l)
{
        return l->skipped;
}

uint64_t wk_nflog_overruns(const wk_nflog *l)
{
        return l->overruns;
}

int wk_nflog_read(wk_nflog *l, wk_nflog_cb cb, void *userdata, sp_error **err)
{
        ssize_t got;
        for (;;) {
                got = recv(mnl_socket_get_fd(l->sock), l->buf, sizeof(l->buf), 0);
                if (got >= 0)
                        break;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                        return 0;
                if (errno == ENOBUFS) {
                        l->overruns++;
                        continue;
                }
                if (errno != EINTR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read NFLOG group %u", (unsigned)l->group);
        }
        int n = 0, left = (int)got;
        for (const struct nlmsghdr *h = (const struct nlmsghdr *)l->buf; mnl_nlmsg_ok(h, left);
             h = mnl_nlmsg_next(h, &left)) {
                if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_NOOP)
                        continue;
                wk_nflog_record rec;
                if (wk_nflog_parse(h, h->nlmsg_len, &rec, NULL) < 0) {
                        l->skipped++;
                        continue;
                }
                if (rec.indev && !if_indextoname(rec.indev, rec.indev_name))
                        rec.indev_name[0] = '\0';
                int r = cb(&rec, userdata);
                if (r < 0)
                        return r;
                n++;
        }
        return n;
}
