/* SPDX-License-Identifier: Apache-2.0 */
/* Destination addresses as the gateway classes them (see gw.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
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

int gw_forbid_local_addresses(gw *g, sp_error **err)
{
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "list the host's addresses");
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
                        continue;
                uint32_t a = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
                if (gw_cidr_list_has(g->cfg.forbid_cidrs, g->cfg.n_forbid, a))
                        continue;
                if (g->cfg.n_forbid >= GW_CIDRS_MAX) {
                        freeifaddrs(ifs);
                        return sp_error_set(err, SP_E_LIMIT, "the host has more than %d addresses", GW_CIDRS_MAX);
                }
                g->cfg.forbid_cidrs[g->cfg.n_forbid++] = (gw_cidr){.net = a, .mask = ~UINT32_C(0)};
        }
        freeifaddrs(ifs);
        return 0;
}
