/* SPDX-License-Identifier: Apache-2.0 */
/* Destination addresses as the gateway classes them (see gw.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw.h"
#include "policy/profile.h"

int gw_cidr_parse(const char *s, gw_cidr *ret, sp_error **err)
{
        char addr[INET_ADDRSTRLEN];
        const char *slash = strchr(s, '/');
        size_t alen = slash ? (size_t)(slash - s) : strlen(s);
        if (alen >= sizeof(addr))
                return sp_error_set(err, SP_E_INVALID, "'%.64s' is not A.B.C.D/N", s);
        memcpy(addr, s, alen);
        addr[alen] = '\0';
        long n = 32;
        if (slash) {
                char *end = NULL;
                errno = 0;
                n = strtol(slash + 1, &end, 10);
                if (!slash[1] || *end || errno || n < 0 || n > 32)
                        return sp_error_set(err, SP_E_INVALID, "'%.64s' is not A.B.C.D/N", s);
        }
        struct in_addr ia;
        if (inet_pton(AF_INET, addr, &ia) != 1)
                return sp_error_set(err, SP_E_INVALID, "'%.64s' is not A.B.C.D/N", s);
        uint32_t mask = n == 0 ? 0 : ~UINT32_C(0) << (32 - n);
        ret->net = ntohl(ia.s_addr) & mask;
        ret->mask = mask;
        return 0;
}

int gw_cidr_list_parse(const char *s, gw_cidr *v, size_t *n, sp_error **err)
{
        if (!s)
                return 0;
        char *copy = strdup(s), *save = NULL;
        if (!copy)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        int r = 0;
        for (char *tok = strtok_r(copy, ", ", &save); tok && r == 0; tok = strtok_r(NULL, ", ", &save)) {
                if (*n >= GW_CIDRS_MAX)
                        r = sp_error_set(err, SP_E_LIMIT, "more than %d networks", GW_CIDRS_MAX);
                else if (gw_cidr_parse(tok, &v[*n], err) == 0)
                        (*n)++;
                else
                        r = -SP_E_INVALID;
        }
        free(copy);
        return r;
}

bool gw_cidr_list_has(const gw_cidr *v, size_t n, uint32_t addr)
{
        for (size_t i = 0; i < n; i++)
                if ((addr & v[i].mask) == v[i].net)
                        return true;
        return false;
}

int gw_dst_class(const gw *g, uint32_t addr)
{
        if (gw_cidr_list_has(g->cfg.forbid_cidrs, g->cfg.n_forbid, addr))
                return GW_ADDR_FORBIDDEN;
        gw_addr_class k = gw_addr_classify(addr);
        if (k != GW_ADDR_FORBIDDEN && gw_cidr_list_has(g->cfg.public_cidrs, g->cfg.n_public, addr))
                return GW_ADDR_PUBLIC;
        return k;
}

int gw_host_addresses_open(gw *g, sp_error **err)
{
        g->n_forbid_flags = g->cfg.n_forbid;
        g->host_nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (g->host_nl < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "a route netlink socket");
        return 0;
}

/* The netlink macros compare the kernel's unsigned lengths with an int. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
int gw_forbid_local_addresses(gw *g, sp_error **err)
{
        static uint32_t seq;
        struct {
                struct nlmsghdr nh;
                struct ifaddrmsg ifa;
        } req = {.nh = {.nlmsg_len = sizeof(req),
                        .nlmsg_type = RTM_GETADDR,
                        .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
                        .nlmsg_seq = ++seq},
                 .ifa = {.ifa_family = AF_INET}};
        if (send(g->host_nl, &req, sizeof(req), 0) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "list the host's addresses");
        gw_cidr list[GW_CIDRS_MAX];
        size_t n = g->n_forbid_flags;
        memcpy(list, g->cfg.forbid_cidrs, n * sizeof(list[0]));
        static char buf[32768];
        for (;;) {
                ssize_t got = recv(g->host_nl, buf, sizeof(buf), 0);
                if (got < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "list the host's addresses");
                int left = (int)got;
                for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
                        if (h->nlmsg_seq != seq)
                                continue;
                        if (h->nlmsg_type == NLMSG_DONE)
                                goto done;
                        if (h->nlmsg_type == NLMSG_ERROR)
                                return sp_error_set(err, SP_E_IO, "list the host's addresses: refused");
                        if (h->nlmsg_type != RTM_NEWADDR)
                                continue;
                        struct ifaddrmsg *ifa = NLMSG_DATA(h);
                        int len = (int)IFA_PAYLOAD(h);
                        for (struct rtattr *rta = IFA_RTA(ifa); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
                                if ((rta->rta_type != IFA_LOCAL && rta->rta_type != IFA_ADDRESS) ||
                                    RTA_PAYLOAD(rta) != 4)
                                        continue;
                                uint32_t a;
                                memcpy(&a, RTA_DATA(rta), 4);
                                a = ntohl(a);
                                if (gw_cidr_list_has(list, n, a))
                                        continue;
                                if (n >= GW_CIDRS_MAX)
                                        return sp_error_set(err, SP_E_LIMIT, "the host has more than %d addresses",
                                                            GW_CIDRS_MAX);
                                list[n++] = (gw_cidr){.net = a, .mask = ~UINT32_C(0)};
                        }
                }
        }
done:
        memcpy(g->cfg.forbid_cidrs, list, n * sizeof(list[0]));
        g->cfg.n_forbid = n;
        return 0;
}
#pragma GCC diagnostic pop
