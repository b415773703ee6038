/* SPDX-License-Identifier: Apache-2.0 */
/* The sandboxes' nftables table, built with libnftnl (see nft.h). The
 * expressions are encoded the way `nft` encodes the rules that nft.h shows. */
#include "net/nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_nat.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter_ipv4.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

#include "space/cleanup.h"

#define SET_NAME "sandboxes"
#define SET_ID 1
#define CONNS_SET "conns"
#define CONNS_SET_ID 2
/* nft's datatype ids (TYPE_IFNAME, TYPE_IPADDR) and how it packs a concatenation's. */
#define TYPE_IFNAME 41
#define TYPE_IPADDR 7
#define TYPE_BITS 6
#define KEY_LEN (IFNAMSIZ + 4)
/* The install batch is a few kilobytes; mnl wants room for one more message past the limit. */
#define BATCH_LIMIT 32768
#define MAX_MSGS 64
#define NL_TIMEOUT_S 5
#define NL_BUF 16384

static const char *const drop_names[WK_NFT_DROP__MAX] = {
        [WK_NFT_DROP_SPOOF] = "space:spoof",         [WK_NFT_DROP_IPV6] = "space:ipv6",
        [WK_NFT_DROP_INPUT] = "space:input",         [WK_NFT_DROP_GATEWAY] = "space:gateway",
        [WK_NFT_DROP_FORWARD] = "space:forward",     [WK_NFT_DROP_PROTOCOL] = "space:protocol",
        [WK_NFT_DROP_CONNTRACK] = "space:conntrack",
};

const char *wk_nft_drop_name(wk_nft_drop d)
{
        return (unsigned)d < WK_NFT_DROP__MAX ? drop_names[d] : NULL;
}

wk_nft_drop wk_nft_drop_from_name(const char *prefix)
{
        for (int d = 0; prefix && d < WK_NFT_DROP__MAX; d++)
                if (strcmp(prefix, drop_names[d]) == 0)
                        return (wk_nft_drop)d;
        return WK_NFT_DROP__MAX;
}

int wk_nft_config_validate(const wk_nft_config *c, sp_error **err)
{
        size_t n = c->table ? strlen(c->table) : 0;
        if (n == 0 || n > WK_NFT_TABLE_MAX ||
            strspn(c->table, "abcdefghijklmnopqrstuvwxyz"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != n)
                return sp_error_set(err, SP_E_INVALID, "nftables table name '%.80s' must be 1 to %d of [A-Za-z0-9_-]",
                                    c->table ? c->table : "", WK_NFT_TABLE_MAX);
        n = c->if_prefix ? strlen(c->if_prefix) : 0;
        if (n == 0 || n > IFNAMSIZ - 2 || strpbrk(c->if_prefix, "/ *"))
                return sp_error_set(err, SP_E_INVALID, "interface prefix '%.32s' must be 1 to %d characters",
                                    c->if_prefix ? c->if_prefix : "", IFNAMSIZ - 2);
        if (c->pool.prefix_len < 8 || c->pool.prefix_len > 30 ||
            (c->pool.base & ~(~UINT32_C(0) << (32 - c->pool.prefix_len))))
                return sp_error_set(err, SP_E_INVALID, "the sandbox network is not a pool (see wk_net_pool_parse)");
        if (!c->gateway_tcp_port || !c->gateway_dns_port || c->gateway_tcp_port == c->gateway_dns_port)
                return sp_error_set(err, SP_E_INVALID, "the gateway's TCP and DNS ports must be set and differ");
        return 0;
}

/* ---- netlink ---- */

typedef struct nfnl {
        struct mnl_socket *sock;
        uint32_t portid;
} nfnl;

static int nfnl_open(nfnl *n)
{
        n->sock = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
        if (!n->sock)
                return -errno;
        /* A kernel that never answers must not hang the worker. */
        struct timeval tv = {.tv_sec = NL_TIMEOUT_S};
        if (mnl_socket_bind(n->sock, 0, MNL_SOCKET_AUTOPID) < 0 ||
            setsockopt(mnl_socket_get_fd(n->sock), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
                int e = errno;
                mnl_socket_close(n->sock);
                n->sock = NULL;
                return -e;
        }
        n->portid = mnl_socket_get_portid(n->sock);
        return 0;
}

static void nfnl_close(nfnl *n)
{
        if (n->sock)
                mnl_socket_close(n->sock);
        n->sock = NULL;
}

/* A transaction: batch begin, messages each asking for an acknowledgement, batch end. */
typedef struct batch {
        char *buf;
        struct mnl_nlmsg_batch *b;
        uint32_t seq0, seq; /* seq0: the batch begin's */
        unsigned n; /* messages to be acknowledged */
        const char *what[MAX_MSGS]; /* what each does, for errors */
        bool broken; /* out of room or memory */
} batch;

static int batch_start(batch *b)
{
        memset(b, 0, sizeof(*b));
        b->buf = malloc(2 * BATCH_LIMIT);
        if (!b->buf || !(b->b = mnl_nlmsg_batch_start(b->buf, BATCH_LIMIT))) {
                free(b->buf);
                return -ENOMEM;
        }
        b->seq0 = b->seq = (uint32_t)time(NULL);
        nftnl_batch_begin(mnl_nlmsg_batch_current(b->b), b->seq++);
        mnl_nlmsg_batch_next(b->b);
        return 0;
}

static void batch_free(batch *b)
{
        if (b->b)
                mnl_nlmsg_batch_stop(b->b);
        free(b->buf);
        b->buf = NULL;
        b->b = NULL;
}

/* The header of the next message, which the caller fills and ends with batch_next(). */
static struct nlmsghdr *batch_msg(batch *b, uint16_t type, uint16_t flags, const char *what)
{
        if (b->n == MAX_MSGS) {
                b->broken = true;
                b->n--; /* overwrite the last slot; the batch is not sent */
        }
        b->what[b->n++] = what;
        return nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(b->b), type, NFPROTO_INET, flags | NLM_F_ACK, b->seq++);
}

static void batch_next(batch *b)
{
        if (!mnl_nlmsg_batch_next(b->b))
                b->broken = true;
}

/* Sends the batch and reads every acknowledgement. Returns 0, or -errno with
 * *what set to the failing message's purpose. */
static int batch_send(batch *b, const nfnl *n, const char **what)
{
        *what = "build the nftables batch";
        if (b->broken)
                return -ENOBUFS;
        nftnl_batch_end(mnl_nlmsg_batch_current(b->b), b->seq++);
        batch_next(b);
        if (b->broken)
                return -ENOBUFS;
        *what = "send the nftables batch";
        if (mnl_socket_sendto(n->sock, mnl_nlmsg_batch_head(b->b), mnl_nlmsg_batch_size(b->b)) < 0)
                return -errno;
        /* Each message is acknowledged (or refused) once the whole batch is done; a batch the kernel
         * refuses whole (no permission, a failed commit) is answered on the batch begin's sequence. */
        char rbuf[NL_BUF];
        unsigned answered = 0;
        int first = 0;
        while (answered < b->n) {
                ssize_t got = mnl_socket_recvfrom(n->sock, rbuf, sizeof(rbuf));
                if (got < 0) {
                        *what = "read the nftables answer";
                        return first ? first : -errno;
                }
                int left = (int)got;
                for (const struct nlmsghdr *h = (const struct nlmsghdr *)rbuf; mnl_nlmsg_ok(h, left);
                     h = mnl_nlmsg_next(h, &left)) {
                        if (h->nlmsg_type != NLMSG_ERROR || h->nlmsg_len < mnl_nlmsg_size(sizeof(struct nlmsgerr)))
                                continue;
                        const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
                        uint32_t i = h->nlmsg_seq - b->seq0 - 1;
                        if (i >= b->n) {
                                *what = "commit the nftables batch";
                                return e->error < 0 ? e->error : -EPROTO;
                        }
                        answered++;
                        if (e->error < 0 && !first) {
                                first = e->error;
                                *what = b->what[i];
                        }
                }
        }
        return first;
}

/* Sends one batch made by build(c, b, arg) on a socket of the caller's namespace. */
static int transact(const wk_nft_config *c, void (*build)(const wk_nft_config *, batch *, const void *),
                    const void *arg, const char **what)
{
        nfnl n = {0};
        batch b;
        *what = "open a netfilter netlink socket";
        int r = nfnl_open(&n);
        if (r < 0)
                return r;
        if ((r = batch_start(&b)) < 0) {
                nfnl_close(&n);
                return r;
        }
        build(c, &b, arg);
        r = batch_send(&b, &n, what);
        batch_free(&b);
        nfnl_close(&n);
        return r;
}

/* ---- the objects ---- */

static void put_table(const wk_nft_config *c, batch *b, uint16_t type, uint16_t flags, const char *what)
{
        struct nftnl_table *t = nftnl_table_alloc();
        if (!t || nftnl_table_set_str(t, NFTNL_TABLE_NAME, c->table) < 0) {
                b->broken = true;
        } else {
                nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFPROTO_INET);
                nftnl_table_nlmsg_build_payload(batch_msg(b, type, flags, what), t);
                batch_next(b);
        }
        if (t)
                nftnl_table_free(t);
}

static void put_chain(const wk_nft_config *c, batch *b, const char *name, const char *type, uint32_t hook, int prio)
{
        struct nftnl_chain *ch = nftnl_chain_alloc();
        if (!ch || nftnl_chain_set_str(ch, NFTNL_CHAIN_TABLE, c->table) < 0 ||
            nftnl_chain_set_str(ch, NFTNL_CHAIN_NAME, name) < 0 ||
            nftnl_chain_set_str(ch, NFTNL_CHAIN_TYPE, type) < 0) {
                b->broken = true;
        } else {
                nftnl_chain_set_u32(ch, NFTNL_CHAIN_FAMILY, NFPROTO_INET);
                nftnl_chain_set_u32(ch, NFTNL_CHAIN_HOOKNUM, hook);
                nftnl_chain_set_s32(ch, NFTNL_CHAIN_PRIO, prio);
                nftnl_chain_set_u32(ch, NFTNL_CHAIN_POLICY, NF_ACCEPT);
                nftnl_chain_nlmsg_build_payload(batch_msg(b, NFT_MSG_NEWCHAIN, NLM_F_CREATE, "create a chain"), ch);
                batch_next(b);
        }
        if (ch)
                nftnl_chain_free(ch);
}

/* The set, named for the messages that create it and change its elements. */
static struct nftnl_set *set_new(const wk_nft_config *c)
{
        struct nftnl_set *s = nftnl_set_alloc();
        if (s && (nftnl_set_set_str(s, NFTNL_SET_TABLE, c->table) < 0 ||
                  nftnl_set_set_str(s, NFTNL_SET_NAME, SET_NAME) < 0)) {
                nftnl_set_free(s);
                return NULL;
        }
        if (s)
                nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        return s;
}

static void put_set(const wk_nft_config *c, batch *b)
{
        struct nftnl_set *s = set_new(c);
        if (!s) {
                b->broken = true;
                return;
        }
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, TYPE_IFNAME << TYPE_BITS | TYPE_IPADDR);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, KEY_LEN);
        nftnl_set_set_u32(s, NFTNL_SET_ID, SET_ID);
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, 0);
        nftnl_set_nlmsg_build_payload(batch_msg(b, NFT_MSG_NEWSET, NLM_F_CREATE, "create the sandboxes' set"), s);
        batch_next(b);
        nftnl_set_free(s);
}

/* The sandboxes' connection counts (one element per host end, made by the
 * rule that counts). No timeout: the count's own garbage collection ends
 * what closed connections leave. */
static void put_conns_set(const wk_nft_config *c, batch *b)
{
        struct nftnl_set *s = nftnl_set_alloc();
        if (!s || nftnl_set_set_str(s, NFTNL_SET_TABLE, c->table) < 0 ||
            nftnl_set_set_str(s, NFTNL_SET_NAME, CONNS_SET) < 0) {
                if (s)
                        nftnl_set_free(s);
                b->broken = true;
                return;
        }
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, TYPE_IFNAME);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, IFNAMSIZ);
        nftnl_set_set_u32(s, NFTNL_SET_ID, CONNS_SET_ID);
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_EVAL);
        nftnl_set_set_u32(s, NFTNL_SET_DESC_SIZE, 65535);
        nftnl_set_nlmsg_build_payload(batch_msg(b, NFT_MSG_NEWSET, NLM_F_CREATE, "create the connection counts' set"),
                                      s);
        batch_next(b);
        nftnl_set_free(s);
}

/* ---- rules, an expression at a time ---- */

typedef struct rule {
        struct nftnl_rule *r;
        bool broken;
} rule;

static struct nftnl_expr *expr_add(rule *r, const char *name)
{
        struct nftnl_expr *e = nftnl_expr_alloc(name);
        if (!e)
                r->broken = true;
        else
                nftnl_rule_add_expr(r->r, e);
        return e;
}

static void meta(rule *r, uint32_t key)
{
        struct nftnl_expr *e = expr_add(r, "meta");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
        }
}

static void cmp(rule *r, uint32_t sreg, enum nft_cmp_ops op, const void *data, uint32_t len)
{
        struct nftnl_expr *e = expr_add(r, "cmp");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, sreg);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
                if (nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len) < 0)
                        r->broken = true;
        }
}

static void payload(rule *r, enum nft_payload_bases base, uint32_t offset, uint32_t len, uint32_t dreg)
{
        struct nftnl_expr *e = expr_add(r, "payload");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, dreg);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
        }
}

/* reg 1 = reg 1 & mask (4 bytes, in the register's byte order). */
static void mask32(rule *r, uint32_t mask)
{
        uint32_t zero = 0;
        struct nftnl_expr *e = expr_add(r, "bitwise");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, sizeof(uint32_t));
                if (nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, sizeof(mask)) < 0 ||
                    nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &zero, sizeof(zero)) < 0)
                        r->broken = true;
        }
}

/* iifname/oifname "prefix*" (or !=): the prefix's bytes without their NUL, as nft encodes a wildcard. */
static void ifname_prefix(rule *r, uint32_t key, const char *prefix, enum nft_cmp_ops op)
{
        meta(r, key);
        cmp(r, NFT_REG_1, op, prefix, (uint32_t)strlen(prefix));
}

static void nfproto(rule *r, uint8_t proto)
{
        meta(r, NFT_META_NFPROTO);
        cmp(r, NFT_REG_1, NFT_CMP_EQ, &proto, sizeof(proto));
}

/* meta l4proto proto, and th dport port if port. */
static void l4(rule *r, uint8_t proto, uint16_t port)
{
        meta(r, NFT_META_L4PROTO);
        cmp(r, NFT_REG_1, NFT_CMP_EQ, &proto, sizeof(proto));
        if (port) {
                uint16_t be = htons(port);
                payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, sizeof(be), NFT_REG_1);
                cmp(r, NFT_REG_1, NFT_CMP_EQ, &be, sizeof(be));
        }
}

/* ct <key> & bits != 0 (op NEQ: any of them) or == 0 (op EQ: none). */
static void ct_bits(rule *r, enum nft_ct_keys key, uint32_t bits, enum nft_cmp_ops op)
{
        uint32_t zero = 0;
        struct nftnl_expr *e = expr_add(r, "ct");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, key);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
        }
        mask32(r, bits); /* host order: ct state and status are */
        cmp(r, NFT_REG_1, op, &zero, sizeof(zero));
}

/* ip saddr/daddr within the pool. */
static void in_pool(rule *r, const wk_net_pool *p, uint32_t offset)
{
        uint32_t mask = htonl(~UINT32_C(0) << (32 - p->prefix_len)), net = htonl(p->base);
        nfproto(r, NFPROTO_IPV4);
        payload(r, NFT_PAYLOAD_NETWORK_HEADER, offset, sizeof(uint32_t), NFT_REG_1);
        mask32(r, mask);
        cmp(r, NFT_REG_1, NFT_CMP_EQ, &net, sizeof(net));
}

/* iifname . ip saddr != @sandboxes: the name fills reg 1 (16 bytes), the address follows in reg 2. */
static void not_a_sandbox(rule *r)
{
        meta(r, NFT_META_IIFNAME);
        payload(r, NFT_PAYLOAD_NETWORK_HEADER, 12, sizeof(uint32_t), NFT_REG_2);
        struct nftnl_expr *e = expr_add(r, "lookup");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, SET_ID);
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_FLAGS, NFT_LOOKUP_F_INV);
                if (nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, SET_NAME) < 0)
                        r->broken = true;
        }
}

static void verdict(rule *r, int v)
{
        struct nftnl_expr *e = expr_add(r, "immediate");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)v);
        }
}

/* ct count over max: with set, per the key in reg 1 (add @set { <key> ct count over max }); without,
 * over everything the rule sees. Goes on only past max. */
static void ct_count_over(rule *r, uint32_t max, const char *set, uint32_t set_id)
{
        struct nftnl_expr *cl = nftnl_expr_alloc("connlimit");
        if (!cl) {
                r->broken = true;
                return;
        }
        nftnl_expr_set_u32(cl, NFTNL_EXPR_CONNLIMIT_COUNT, max);
        nftnl_expr_set_u32(cl, NFTNL_EXPR_CONNLIMIT_FLAGS, NFT_CONNLIMIT_F_INV);
        if (!set) {
                nftnl_rule_add_expr(r->r, cl);
                return;
        }
        struct nftnl_expr *e = expr_add(r, "dynset");
        if (!e) {
                nftnl_expr_free(cl);
                return;
        }
        nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_SREG_KEY, NFT_REG_1);
        nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_OP, NFT_DYNSET_OP_ADD);
        nftnl_expr_set_u32(e, NFTNL_EXPR_DYNSET_SET_ID, set_id);
        if (nftnl_expr_set_str(e, NFTNL_EXPR_DYNSET_SET_NAME, set) < 0)
                r->broken = true;
        nftnl_expr_set(e, NFTNL_EXPR_DYNSET_EXPR, cl, 0);
}

/* counter log prefix "<name>" group <g> drop */
static void drop_logged(rule *r, wk_nft_drop d, uint16_t group)
{
        expr_add(r, "counter");
        struct nftnl_expr *e = expr_add(r, "log");
        if (e) {
                nftnl_expr_set_u16(e, NFTNL_EXPR_LOG_GROUP, group);
                if (nftnl_expr_set_str(e, NFTNL_EXPR_LOG_PREFIX, drop_names[d]) < 0)
                        r->broken = true;
        }
        verdict(r, NF_DROP);
}

/* redirect to :port */
static void redirect(rule *r, uint16_t port)
{
        uint16_t be = htons(port);
        struct nftnl_expr *e = expr_add(r, "immediate");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
                if (nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &be, sizeof(be)) < 0)
                        r->broken = true;
        }
        e = expr_add(r, "redir");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_REDIR_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
        }
}

static rule rule_new(const wk_nft_config *c, const char *chain)
{
        rule r = {.r = nftnl_rule_alloc()};
        if (!r.r || nftnl_rule_set_str(r.r, NFTNL_RULE_TABLE, c->table) < 0 ||
            nftnl_rule_set_str(r.r, NFTNL_RULE_CHAIN, chain) < 0)
                r.broken = true;
        else
                nftnl_rule_set_u32(r.r, NFTNL_RULE_FAMILY, NFPROTO_INET);
        return r;
}

/* Appends the rule to the batch and frees it. */
static void rule_put(batch *b, rule *r, const char *what)
{
        if (r->broken)
                b->broken = true;
        else
                nftnl_rule_nlmsg_build_payload(batch_msg(b, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND, what), r->r);
        batch_next(b);
        if (r->r)
                nftnl_rule_free(r->r);
        r->r = NULL;
}

/* ---- the table ---- */

static void build_prerouting(const wk_nft_config *c, batch *b)
{
        const char *pfx = c->if_prefix;
        put_chain(c, b, "prerouting", "filter", NF_INET_PRE_ROUTING, NF_IP_PRI_RAW);
        rule r = rule_new(c, "prerouting");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        nfproto(&r, NFPROTO_IPV6);
        drop_logged(&r, WK_NFT_DROP_IPV6, c->log_group);
        rule_put(b, &r, "add the IPv6 rule");

        r = rule_new(c, "prerouting");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        nfproto(&r, NFPROTO_IPV4);
        not_a_sandbox(&r);
        drop_logged(&r, WK_NFT_DROP_SPOOF, c->log_group);
        rule_put(b, &r, "add the anti-spoofing rule");

        /* TCP and DNS go on (to the gateway); any other protocol is dropped here,
         * before routing, so that it is logged whatever the host's ip_forward. */
        r = rule_new(c, "prerouting");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        l4(&r, IPPROTO_TCP, 0);
        verdict(&r, NF_ACCEPT);
        rule_put(b, &r, "add the TCP rule");
        r = rule_new(c, "prerouting");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        l4(&r, IPPROTO_UDP, 53);
        verdict(&r, NF_ACCEPT);
        rule_put(b, &r, "add the DNS rule");
        r = rule_new(c, "prerouting");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        drop_logged(&r, WK_NFT_DROP_PROTOCOL, c->log_group);
        rule_put(b, &r, "add the protocol drop");
}

/* A sandbox holds at most conns_max connection-tracking entries: past them
 * its new flows are dropped before the kernel keeps them, so no sandbox
 * fills the host's table (whose limit every flow of the host shares) with
 * connections it never ends — half-open ones to addresses it cannot answer
 * from, say. After conntrack (which made the entry) and before it is kept. */
static void build_limits(const wk_nft_config *c, batch *b)
{
        put_chain(c, b, "limits", "filter", NF_INET_PRE_ROUTING, NF_IP_PRI_MANGLE);
        rule r = rule_new(c, "limits");
        ifname_prefix(&r, NFT_META_IIFNAME, c->if_prefix, NFT_CMP_EQ);
        ct_bits(&r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_NEW), NFT_CMP_NEQ);
        meta(&r, NFT_META_IIFNAME);
        ct_count_over(&r, c->conns_max ? c->conns_max : WK_NFT_CONNS_MAX, CONNS_SET, CONNS_SET_ID);
        drop_logged(&r, WK_NFT_DROP_CONNTRACK, c->log_group);
        rule_put(b, &r, "add the connection limit");
}

static void build_redirect(const wk_nft_config *c, batch *b)
{
        const char *pfx = c->if_prefix;
        put_chain(c, b, "to_gateway", "nat", NF_INET_PRE_ROUTING, NF_IP_PRI_NAT_DST);
        rule r = rule_new(c, "to_gateway");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        l4(&r, IPPROTO_UDP, 53);
        redirect(&r, c->gateway_dns_port);
        rule_put(b, &r, "add the DNS redirect");

        r = rule_new(c, "to_gateway");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        l4(&r, IPPROTO_TCP, 0);
        redirect(&r, c->gateway_tcp_port);
        rule_put(b, &r, "add the TCP redirect");
}

static void build_input(const wk_nft_config *c, batch *b)
{
        const char *pfx = c->if_prefix;
        const uint32_t est_rel = NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED);
        put_chain(c, b, "input", "filter", NF_INET_LOCAL_IN, NF_IP_PRI_FILTER);
        rule r = rule_new(c, "input");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        ct_bits(&r, NFT_CT_STATE, est_rel, NFT_CMP_NEQ);
        verdict(&r, NF_ACCEPT);
        rule_put(b, &r, "add the input rule for replies");

        static const uint8_t protos[2] = {IPPROTO_TCP, IPPROTO_UDP};
        const uint16_t ports[2] = {c->gateway_tcp_port, c->gateway_dns_port};
        for (int i = 0; i < 2; i++) {
                r = rule_new(c, "input");
                ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
                ct_bits(&r, NFT_CT_STATUS, IPS_DST_NAT, NFT_CMP_NEQ);
                l4(&r, protos[i], ports[i]);
                verdict(&r, NF_ACCEPT);
                rule_put(b, &r, "add the input rule for the gateway");
        }

        r = rule_new(c, "input");
        ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_EQ);
        drop_logged(&r, WK_NFT_DROP_INPUT, c->log_group);
        rule_put(b, &r, "add the input drop");

        /* Only new flows: the gateway's own upstream traffic (replies) may come back to its ports. */
        for (int i = 0; i < 2; i++) {
                r = rule_new(c, "input");
                ifname_prefix(&r, NFT_META_IIFNAME, pfx, NFT_CMP_NEQ);
                ct_bits(&r, NFT_CT_STATE, est_rel, NFT_CMP_EQ);
                l4(&r, protos[i], ports[i]);
                drop_logged(&r, WK_NFT_DROP_GATEWAY, c->log_group);
                rule_put(b, &r, "add the gateway port guard");
        }
}

static void build_forward(const wk_nft_config *c, batch *b)
{
        put_chain(c, b, "forward", "filter", NF_INET_FORWARD, NF_IP_PRI_FILTER);
        static const uint32_t keys[2] = {NFT_META_IIFNAME, NFT_META_OIFNAME};
        for (int i = 0; i < 2; i++) {
                rule r = rule_new(c, "forward");
                ifname_prefix(&r, keys[i], c->if_prefix, NFT_CMP_EQ);
                drop_logged(&r, WK_NFT_DROP_FORWARD, c->log_group);
                rule_put(b, &r, "add a forward drop");
        }
        /* The pool's addresses too, whichever interface they would come or go by. */
        static const uint32_t offsets[2] = {12, 16};
        for (int i = 0; i < 2; i++) {
                rule r = rule_new(c, "forward");
                in_pool(&r, &c->pool, offsets[i]);
                drop_logged(&r, WK_NFT_DROP_FORWARD, c->log_group);
                rule_put(b, &r, "add a forward drop");
        }
}

static void build_install(const wk_nft_config *c, batch *b, const void *arg)
{
        (void)arg;
        /* Create (if missing) then delete: the delete cannot fail, and the table is new after. */
        put_table(c, b, NFT_MSG_NEWTABLE, NLM_F_CREATE, "create the table");
        put_table(c, b, NFT_MSG_DELTABLE, 0, "delete the old table");
        put_table(c, b, NFT_MSG_NEWTABLE, NLM_F_CREATE, "create the table");
        put_set(c, b);
        put_conns_set(c, b);
        build_prerouting(c, b);
        build_limits(c, b);
        build_redirect(c, b);
        build_input(c, b);
        build_forward(c, b);
}

/* An interface the prefix takes for a sandbox's that is not one (prefix "e" and eth0, say) would have its
 * traffic redirected and dropped: refused. Sandboxes' host ends are the prefix and a slot number. */
static int prefix_check(const wk_nft_config *c, sp_error **err)
{
        struct if_nameindex *all = if_nameindex();
        if (!all)
                return sp_error_set_errno(err, SP_E_IO, errno, "list the interfaces");
        size_t n = strlen(c->if_prefix);
        int r = 0;
        for (const struct if_nameindex *i = all; i->if_index && r == 0; i++) {
                const char *slot = i->if_name + n;
                if (strncmp(i->if_name, c->if_prefix, n) == 0 && (!*slot || strspn(slot, "0123456789") != strlen(slot)))
                        r = sp_error_set(err, SP_E_INVALID,
                                         "nftables table %s: interface %s would be taken for a sandbox's (prefix '%s')",
                                         c->table, i->if_name, c->if_prefix);
        }
        if_freenameindex(all);
        return r;
}

int wk_nft_install(const wk_nft_config *c, sp_error **err)
{
        if (wk_nft_config_validate(c, err) < 0)
                return -SP_E_INVALID;
        int r = prefix_check(c, err);
        if (r < 0)
                return r;
        const char *what;
        r = transact(c, build_install, NULL, &what);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_IO, -r, "nftables table %s: %s", c->table, what);
        return 0;
}

static void build_remove(const wk_nft_config *c, batch *b, const void *arg)
{
        (void)arg;
        put_table(c, b, NFT_MSG_DELTABLE, 0, "delete the table");
}

int wk_nft_remove(const wk_nft_config *c, sp_error **err)
{
        if (wk_nft_config_validate(c, err) < 0)
                return -SP_E_INVALID;
        const char *what;
        int r = transact(c, build_remove, NULL, &what);
        if (r < 0 && r != -ENOENT)
                return sp_error_set_errno(err, SP_E_IO, -r, "nftables table %s: %s", c->table, what);
        return 0;
}

/* ---- the set's elements ---- */

typedef struct element {
        uint16_t type;
        uint8_t key[KEY_LEN];
} element;

static void build_element(const wk_nft_config *c, batch *b, const void *arg)
{
        const element *el = arg;
        struct nftnl_set *s = set_new(c);
        struct nftnl_set_elem *e = s ? nftnl_set_elem_alloc() : NULL;
        if (!e || nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, el->key, sizeof(el->key)) < 0) {
                if (e)
                        nftnl_set_elem_free(e);
                b->broken = true;
        } else {
                nftnl_set_elem_add(s, e); /* s owns e */
                uint16_t flags = el->type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0;
                nftnl_set_elems_nlmsg_build_payload(batch_msg(b, el->type, flags, "change the sandboxes' set"), s);
                batch_next(b);
        }
        if (s)
                nftnl_set_free(s);
}

static int element_change(const wk_nft_config *c, uint16_t type, const char *ifname, struct in_addr addr,
                          sp_error **err)
{
        if (wk_nft_config_validate(c, err) < 0)
                return -SP_E_INVALID;
        size_t n = ifname ? strlen(ifname) : 0;
        if (n == 0 || n >= IFNAMSIZ)
                return sp_error_set(err, SP_E_INVALID, "interface name '%.32s' must be 1 to %d characters",
                                    ifname ? ifname : "", IFNAMSIZ - 1);
        element el = {.type = type};
        memcpy(el.key, ifname, n); /* NUL-padded to IFNAMSIZ, as the kernel's iifname */
        memcpy(el.key + IFNAMSIZ, &addr.s_addr, sizeof(addr.s_addr));
        const char *what;
        int r = transact(c, build_element, &el, &what);
        if (r == -ENOENT && type == NFT_MSG_DELSETELEM)
                return 0;
        if (r < 0) {
                char a[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &addr, a, sizeof(a));
                return sp_error_set_errno(err, r == -ENOENT ? SP_E_NOT_FOUND : SP_E_IO, -r,
                                          "nftables table %s: %s %s . %s", c->table,
                                          type == NFT_MSG_NEWSETELEM ? "add" : "delete", ifname, a);
        }
        return 0;
}

int wk_nft_sandbox_add(const wk_nft_config *c, const char *ifname, struct in_addr addr, sp_error **err)
{
        return element_change(c, NFT_MSG_NEWSETELEM, ifname, addr, err);
}

int wk_nft_sandbox_del(const wk_nft_config *c, const char *ifname, struct in_addr addr, sp_error **err)
{
        return element_change(c, NFT_MSG_DELSETELEM, ifname, addr, err);
}

typedef struct elements {
        const char *const *ifnames;
        const struct in_addr *addrs;
        size_t n;
} elements;

/* One DELSETELEM message per element, in one batch (one commit). */
static void build_elements_del(const wk_nft_config *c, batch *b, const void *arg)
{
        const elements *els = arg;
        for (size_t i = 0; i < els->n && !b->broken; i++) {
                element el = {.type = NFT_MSG_DELSETELEM};
                memcpy(el.key, els->ifnames[i], strnlen(els->ifnames[i], IFNAMSIZ - 1));
                memcpy(el.key + IFNAMSIZ, &els->addrs[i].s_addr, sizeof(els->addrs[i].s_addr));
                build_element(c, b, &el);
        }
}

int wk_nft_sandbox_del_many(const wk_nft_config *c, const char *const *ifnames, const struct in_addr *addrs, size_t n,
                            sp_error **err)
{
        if (n == 0)
                return 0;
        if (wk_nft_config_validate(c, err) < 0)
                return -SP_E_INVALID;
        for (size_t i = 0; i < n; i++) {
                size_t len = ifnames[i] ? strlen(ifnames[i]) : 0;
                if (len == 0 || len >= IFNAMSIZ)
                        return sp_error_set(err, SP_E_INVALID, "interface name '%.32s' must be 1 to %d characters",
                                            ifnames[i] ? ifnames[i] : "", IFNAMSIZ - 1);
        }
        const char *what;
        elements els = {.ifnames = ifnames, .addrs = addrs, .n = n};
        int r = transact(c, build_elements_del, &els, &what);
        if (r != -ENOENT)
                return r < 0 ? sp_error_set_errno(err, SP_E_IO, -r, "nftables table %s: %s", c->table, what) : 0;
        /* The kernel takes a batch whole: one element already gone (or the
         * table) refuses them all. One at a time, then. */
        for (size_t i = 0; i < n; i++)
                if (wk_nft_sandbox_del(c, ifnames[i], addrs[i], err) < 0)
                        return -SP_E_IO;
        return 0;
}

/* ---- counters ---- */

typedef struct dump {
        wk_nft_counters counters;
        unsigned rules;
} dump;

static int rule_cb(const struct nlmsghdr *h, void *data)
{
        dump *out = data;
        struct nftnl_rule *r = nftnl_rule_alloc();
        if (!r || nftnl_rule_nlmsg_parse(h, r) < 0) {
                if (r)
                        nftnl_rule_free(r);
                errno = ENOMEM;
                return MNL_CB_ERROR;
        }
        uint64_t packets = 0, bytes = 0;
        bool counted = false;
        wk_nft_drop d = WK_NFT_DROP__MAX;
        struct nftnl_expr_iter *it = nftnl_expr_iter_create(r);
        for (struct nftnl_expr *e = it ? nftnl_expr_iter_next(it) : NULL; e; e = nftnl_expr_iter_next(it)) {
                const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
                if (name && strcmp(name, "counter") == 0) {
                        packets = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_PACKETS);
                        bytes = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_BYTES);
                        counted = true;
                } else if (name && strcmp(name, "log") == 0 && nftnl_expr_is_set(e, NFTNL_EXPR_LOG_PREFIX)) {
                        d = wk_nft_drop_from_name(nftnl_expr_get_str(e, NFTNL_EXPR_LOG_PREFIX));
                }
        }
        if (it)
                nftnl_expr_iter_destroy(it);
        nftnl_rule_free(r);
        out->rules++;
        if (counted && d != WK_NFT_DROP__MAX) {
                out->counters.packets[d] += packets;
                out->counters.bytes[d] += bytes;
        }
        return MNL_CB_OK;
}

int wk_nft_counters_read(const wk_nft_config *c, wk_nft_counters *ret, sp_error **err)
{
        if (wk_nft_config_validate(c, err) < 0)
                return -SP_E_INVALID;
        nfnl n = {0};
        int r = nfnl_open(&n);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_IO, -r, "open a netfilter netlink socket");
        char buf[NL_BUF];
        uint32_t seq = (uint32_t)time(NULL);
        struct nlmsghdr *h = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETRULE, NFPROTO_INET, NLM_F_DUMP, seq);
        struct nftnl_rule *filter = nftnl_rule_alloc();
        if (!filter || nftnl_rule_set_str(filter, NFTNL_RULE_TABLE, c->table) < 0) {
                if (filter)
                        nftnl_rule_free(filter);
                nfnl_close(&n);
                return sp_error_set(err, SP_E_INTERNAL, "out of memory");
        }
        nftnl_rule_nlmsg_build_payload(h, filter);
        nftnl_rule_free(filter);
        dump got = {0};
        r = mnl_socket_sendto(n.sock, h, h->nlmsg_len) < 0 ? -errno : 0;
        while (r == 0) {
                ssize_t len = mnl_socket_recvfrom(n.sock, buf, sizeof(buf));
                if (len < 0) {
                        r = -errno;
                        break;
                }
                int cb = mnl_cb_run(buf, (size_t)len, seq, n.portid, rule_cb, &got);
                if (cb == MNL_CB_ERROR)
                        r = -errno;
                else if (cb == MNL_CB_STOP)
                        break;
        }
        nfnl_close(&n);
        /* A dump filtered on a missing table is empty, and ours is never. */
        if (r == 0 && got.rules == 0)
                r = -ENOENT;
        if (r < 0)
                return sp_error_set_errno(err, r == -ENOENT ? SP_E_NOT_FOUND : SP_E_IO, -r,
                                          "nftables table %s: read the counters", c->table);
        *ret = got.counters;
        return 0;
}

/* ---- a VM's namespace (wk_nft_vm_install) ---- */

/* iifname/oifname "name": the whole field, NUL-padded, as nft encodes an exact name. */
static void ifname_is(rule *r, uint32_t key, const char *name)
{
        char field[IFNAMSIZ] = {0};
        snprintf(field, sizeof(field), "%s", name);
        meta(r, key);
        cmp(r, NFT_REG_1, NFT_CMP_EQ, field, sizeof(field));
}

/* ip daddr addr */
static void ip_daddr(rule *r, struct in_addr addr)
{
        nfproto(r, NFPROTO_IPV4);
        payload(r, NFT_PAYLOAD_NETWORK_HEADER, 16, sizeof(addr), NFT_REG_1);
        cmp(r, NFT_REG_1, NFT_CMP_EQ, &addr, sizeof(addr));
}

/* snat/dnat ip to addr (and :port if port) */
static void nat_to(rule *r, enum nft_nat_types type, struct in_addr addr, uint16_t port)
{
        nfproto(r, NFPROTO_IPV4);
        struct nftnl_expr *e = expr_add(r, "immediate");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
                if (nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &addr, sizeof(addr)) < 0)
                        r->broken = true;
        }
        uint16_t be = htons(port);
        if (port && (e = expr_add(r, "immediate"))) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_2);
                if (nftnl_expr_set(e, NFTNL_EXPR_IMM_DATA, &be, sizeof(be)) < 0)
                        r->broken = true;
        }
        e = expr_add(r, "nat");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_TYPE, type);
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FAMILY, NFPROTO_IPV4);
                nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_ADDR_MIN, NFT_REG_1);
                if (port) {
                        nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_REG_PROTO_MIN, NFT_REG_2);
                        nftnl_expr_set_u32(e, NFTNL_EXPR_NAT_FLAGS, NF_NAT_RANGE_PROTO_SPECIFIED);
                }
        }
}

static void build_vm(const wk_nft_config *c, batch *b, const void *arg)
{
        const wk_nft_vm *v = arg;
        put_table(c, b, NFT_MSG_NEWTABLE, NLM_F_CREATE, "create the table");
        put_table(c, b, NFT_MSG_DELTABLE, 0, "delete the old table");
        put_table(c, b, NFT_MSG_NEWTABLE, NLM_F_CREATE, "create the table");

        /* The guest's flows are bounded here as the host bounds the link's (build_limits): this
         * namespace's table is its own, and would otherwise keep as many as the host's. */
        put_chain(c, b, "limits", "filter", NF_INET_PRE_ROUTING, NF_IP_PRI_MANGLE);
        rule r = rule_new(c, "limits");
        ifname_is(&r, NFT_META_IIFNAME, v->tap);
        ct_bits(&r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_NEW), NFT_CMP_NEQ);
        ct_count_over(&r, v->conns_max ? v->conns_max : WK_NFT_CONNS_MAX, NULL, 0);
        expr_add(&r, "counter");
        verdict(&r, NF_DROP);
        rule_put(b, &r, "add the connection limit");

        /* The guest's DNS (UDP, as a jail's: docs/networking.md), sent to its router, goes to the host end
         * (whose firewall hands it to the gateway). */
        put_chain(c, b, "to_host", "nat", NF_INET_PRE_ROUTING, NF_IP_PRI_NAT_DST);
        r = rule_new(c, "to_host");
        ifname_is(&r, NFT_META_IIFNAME, v->tap);
        ip_daddr(&r, v->router);
        l4(&r, IPPROTO_UDP, 53);
        nat_to(&r, NFT_NAT_DNAT, v->host, 53);
        rule_put(b, &r, "add the DNS rule");
        /* Out of the link every packet carries the sandbox's address, whatever the guest put there. */
        put_chain(c, b, "from_guest", "nat", NF_INET_POST_ROUTING, NF_IP_PRI_NAT_SRC);
        r = rule_new(c, "from_guest");
        ifname_is(&r, NFT_META_OIFNAME, v->link);
        nat_to(&r, NFT_NAT_SNAT, v->sandbox, 0);
        rule_put(b, &r, "add the source rule");

        /* Forwarded: the guest's packets out of the link, and replies back; nothing else. A packet
         * conntrack calls invalid would leave untranslated (translation is a connection's): dropped. */
        put_chain(c, b, "forward", "filter", NF_INET_FORWARD, NF_IP_PRI_FILTER);
        r = rule_new(c, "forward");
        ct_bits(&r, NFT_CT_STATE, NF_CT_STATE_INVALID_BIT, NFT_CMP_NEQ);
        expr_add(&r, "counter");
        verdict(&r, NF_DROP);
        rule_put(b, &r, "add the invalid drop");
        r = rule_new(c, "forward");
        ifname_is(&r, NFT_META_IIFNAME, v->tap);
        ifname_is(&r, NFT_META_OIFNAME, v->link);
        verdict(&r, NF_ACCEPT);
        rule_put(b, &r, "add the forward rule");
        r = rule_new(c, "forward");
        ifname_is(&r, NFT_META_IIFNAME, v->link);
        ifname_is(&r, NFT_META_OIFNAME, v->tap);
        ct_bits(&r, NFT_CT_STATE, NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED), NFT_CMP_NEQ);
        verdict(&r, NF_ACCEPT);
        rule_put(b, &r, "add the reply rule");
        r = rule_new(c, "forward");
        expr_add(&r, "counter");
        verdict(&r, NF_DROP);
        rule_put(b, &r, "add the forward drop");

        /* Nothing in the namespace serves the guest (its router answers no ping, no port). */
        put_chain(c, b, "input", "filter", NF_INET_LOCAL_IN, NF_IP_PRI_FILTER);
        r = rule_new(c, "input");
        expr_add(&r, "counter");
        verdict(&r, NF_DROP);
        rule_put(b, &r, "add the input drop");
}

int wk_nft_vm_install(const wk_nft_vm *v, sp_error **err)
{
        const wk_nft_config c = {.table = WK_NFT_VM_TABLE};
        const char *what;
        int r = transact(&c, build_vm, v, &what);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_IO, -r, "nftables table %s: %s", c.table, what);
        return 0;
}
