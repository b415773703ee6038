/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's veth link over rtnetlink (see link.h). */
#include "net/link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/if_tun.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "net/nft.h"
#include "space/cleanup.h"

/* ---- the pool ---- */

int wk_net_pool_parse(const char *cidr, wk_net_pool *ret, sp_error **err)
{
        char addr[INET_ADDRSTRLEN];
        const char *slash = cidr ? strchr(cidr, '/') : NULL;
        if (!slash || (size_t)(slash - cidr) >= sizeof(addr))
                return sp_error_set(err, SP_E_INVALID, "sandbox network '%.64s' must be A.B.C.D/N", cidr ? cidr : "");
        memcpy(addr, cidr, (size_t)(slash - cidr));
        addr[slash - cidr] = '\0';
        struct in_addr in;
        char *end = NULL;
        errno = 0;
        long n = strtol(slash + 1, &end, 10);
        if (inet_pton(AF_INET, addr, &in) != 1 || !slash[1] || *end || errno || n < 8 || n > 30)
                return sp_error_set(err, SP_E_INVALID, "sandbox network '%.64s' must be A.B.C.D/N with N from 8 to 30",
                                    cidr);
        uint32_t base = ntohl(in.s_addr), mask = ~UINT32_C(0) << (32 - n);
        if (base & ~mask)
                return sp_error_set(err, SP_E_INVALID, "sandbox network '%.64s' has host bits set", cidr);
        ret->base = base;
        ret->prefix_len = (int)n;
        snprintf(ret->ifprefix, sizeof(ret->ifprefix), "%s", WK_NET_HOST_PREFIX);
        return 0;
}

int wk_net_pool_set_ifprefix(wk_net_pool *p, const char *prefix, sp_error **err)
{
        size_t n = prefix ? strlen(prefix) : 0;
        bool ok = n >= 1 && n <= WK_NET_IFPREFIX_MAX && prefix[0] >= 'a' && prefix[0] <= 'z';
        for (size_t i = 0; ok && i < n; i++)
                ok = (prefix[i] >= 'a' && prefix[i] <= 'z') || (prefix[i] >= '0' && prefix[i] <= '9');
        if (!ok)
                return sp_error_set(err, SP_E_INVALID,
                                    "interface prefix '%.32s' must be 1 to %d of a-z and 0-9, starting with a letter",
                                    prefix ? prefix : "", WK_NET_IFPREFIX_MAX);
        memcpy(p->ifprefix, prefix, n + 1);
        return 0;
}

uint32_t wk_net_pool_slots(const wk_net_pool *p)
{
        return UINT32_C(1) << (32 - p->prefix_len - 1);
}

int wk_net_link_of(const wk_net_pool *p, uint32_t slot, wk_net_link *ret, sp_error **err)
{
        if (slot >= wk_net_pool_slots(p))
                return sp_error_set(err, SP_E_LIMIT, "the sandbox network has addresses for %u sandboxes",
                                    (unsigned)wk_net_pool_slots(p));
        memset(ret, 0, sizeof(*ret));
        /* A prefix of at most 7 and a slot below 2^23 (7 digits) fit IF_NAMESIZE. */
        char name[32];
        snprintf(name, sizeof(name), "%s%u", p->ifprefix[0] ? p->ifprefix : WK_NET_HOST_PREFIX, (unsigned)slot);
        memcpy(ret->host_if, name, sizeof(ret->host_if) - 1);
        ret->host_addr.s_addr = htonl(p->base + 2 * slot);
        ret->sandbox_addr.s_addr = htonl(p->base + 2 * slot + 1);
        return 0;
}

/* ---- rtnetlink ---- */

typedef struct nl {
        struct mnl_socket *sock;
        unsigned seq, portid;
        char buf[8192];
} nl;

static int nl_open(nl *n, sp_error **err)
{
        n->sock = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
        if (!n->sock)
                return sp_error_set_errno(err, SP_E_IO, errno, "open a netlink socket");
        if (mnl_socket_bind(n->sock, 0, MNL_SOCKET_AUTOPID) < 0) {
                int e = errno;
                mnl_socket_close(n->sock);
                n->sock = NULL;
                return sp_error_set_errno(err, SP_E_IO, e, "bind a netlink socket");
        }
        n->portid = mnl_socket_get_portid(n->sock);
        n->seq = (unsigned)time(NULL);
        return 0;
}

static void nl_close(nl *n)
{
        if (n->sock)
                mnl_socket_close(n->sock);
        n->sock = NULL;
}

static struct nlmsghdr *nl_msg(nl *n, uint16_t type, uint16_t flags)
{
        struct nlmsghdr *h = mnl_nlmsg_put_header(n->buf);
        h->nlmsg_type = type;
        h->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
        h->nlmsg_seq = ++n->seq;
        return h;
}

/* Sends h and waits for its acknowledgement: 0 or -errno. */
static int nl_talk(nl *n, struct nlmsghdr *h)
{
        if (mnl_socket_sendto(n->sock, h, h->nlmsg_len) < 0)
                return -errno;
        unsigned seq = h->nlmsg_seq;
        for (;;) {
                ssize_t got = mnl_socket_recvfrom(n->sock, n->buf, sizeof(n->buf));
                if (got < 0)
                        return -errno;
                int r = mnl_cb_run(n->buf, (size_t)got, seq, n->portid, NULL, NULL);
                if (r == MNL_CB_ERROR)
                        return -errno;
                if (r == MNL_CB_STOP)
                        return 0;
        }
}

static int link_set_up(nl *n, unsigned index)
{
        struct nlmsghdr *h = nl_msg(n, RTM_NEWLINK, 0);
        struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
        ifi->ifi_family = AF_UNSPEC;
        ifi->ifi_index = (int)index;
        ifi->ifi_flags = IFF_UP;
        ifi->ifi_change = IFF_UP;
        return nl_talk(n, h);
}

static int link_set_mac(nl *n, unsigned index, const uint8_t mac[6])
{
        struct nlmsghdr *h = nl_msg(n, RTM_NEWLINK, 0);
        struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
        ifi->ifi_family = AF_UNSPEC;
        ifi->ifi_index = (int)index;
        mnl_attr_put(h, IFLA_ADDRESS, 6, mac);
        return nl_talk(n, h);
}

static int addr_add(nl *n, unsigned index, struct in_addr addr, int prefix_len)
{
        struct nlmsghdr *h = nl_msg(n, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE);
        struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(h, sizeof(*ifa));
        ifa->ifa_family = AF_INET;
        ifa->ifa_prefixlen = (unsigned char)prefix_len;
        ifa->ifa_index = index;
        mnl_attr_put(h, IFA_LOCAL, sizeof(addr), &addr);
        mnl_attr_put(h, IFA_ADDRESS, sizeof(addr), &addr);
        return nl_talk(n, h);
}

static int default_route(nl *n, unsigned index, struct in_addr via)
{
        struct nlmsghdr *h = nl_msg(n, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
        struct rtmsg *rt = mnl_nlmsg_put_extra_header(h, sizeof(*rt));
        rt->rtm_family = AF_INET;
        rt->rtm_table = RT_TABLE_MAIN;
        rt->rtm_protocol = RTPROT_STATIC;
        rt->rtm_scope = RT_SCOPE_UNIVERSE;
        rt->rtm_type = RTN_UNICAST;
        mnl_attr_put(h, RTA_GATEWAY, sizeof(via), &via);
        mnl_attr_put_u32(h, RTA_OIF, index);
        return nl_talk(n, h);
}

static int link_delete(nl *n, const char *ifname)
{
        struct nlmsghdr *h = nl_msg(n, RTM_DELLINK, 0);
        struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
        ifi->ifi_family = AF_UNSPEC;
        mnl_attr_put_strz(h, IFLA_IFNAME, ifname);
        int r = nl_talk(n, h);
        return r == -ENODEV ? 0 : r;
}

static int veth_create(nl *n, const char *host_if, const char *peer_if, int netns_fd)
{
        struct nlmsghdr *h = nl_msg(n, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
        struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
        ifi->ifi_family = AF_UNSPEC;
        mnl_attr_put_strz(h, IFLA_IFNAME, host_if);
        struct nlattr *linkinfo = mnl_attr_nest_start(h, IFLA_LINKINFO);
        mnl_attr_put_strz(h, IFLA_INFO_KIND, "veth");
        struct nlattr *data = mnl_attr_nest_start(h, IFLA_INFO_DATA);
        struct nlattr *peer = mnl_attr_nest_start(h, VETH_INFO_PEER);
        struct ifinfomsg *pifi = mnl_nlmsg_put_extra_header(h, sizeof(*pifi));
        pifi->ifi_family = AF_UNSPEC;
        mnl_attr_put_strz(h, IFLA_IFNAME, peer_if);
        mnl_attr_put_u32(h, IFLA_NET_NS_FD, (uint32_t)netns_fd);
        mnl_attr_nest_end(h, peer);
        mnl_attr_nest_end(h, data);
        mnl_attr_nest_end(h, linkinfo);
        return nl_talk(n, h);
}

/* Writes "1" to a sysctl of the caller's (thread's) namespace; one that
 * does not exist is no error where missing_ok. */
static int sysctl_on(const char *path, bool missing_ok)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT && missing_ok ? 0 : -errno;
        return write(fd, "1", 1) == 1 ? 0 : -errno;
}

/* A kernel without IPv6 has nothing to disable. */
static int ipv6_off(const char *ifname)
{
        char path[128];
        snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", ifname);
        return sysctl_on(path, true);
}

/* ---- inside the sandbox's namespace ---- */

typedef struct inside {
        int netns_fd;
        const wk_net_link *link;
        int error; /* -errno */
        const char *step;
} inside;

static void *inside_main(void *arg)
{
        inside *x = arg;
        nl n = {0};
        x->step = "enter the sandbox's network namespace";
        if (setns(x->netns_fd, CLONE_NEWNET) < 0) {
                x->error = -errno;
                return NULL;
        }
        x->step = "open a netlink socket in the sandbox";
        if (nl_open(&n, NULL) < 0) {
                x->error = -EIO;
                return NULL;
        }
        unsigned lo = if_nametoindex("lo"), eth = if_nametoindex(WK_NET_SANDBOX_IF);
        int r = 0;
        if (!lo || !eth) {
                x->step = "find the sandbox's interfaces";
                r = -ENODEV;
        } else if ((r = ipv6_off("all")) < 0 || (r = ipv6_off("default")) < 0 ||
                   (r = ipv6_off(WK_NET_SANDBOX_IF)) < 0) {
                x->step = "disable IPv6 in the sandbox";
        } else if ((r = link_set_up(&n, lo)) < 0) {
                x->step = "set the sandbox's loopback up";
        } else if ((r = addr_add(&n, eth, x->link->sandbox_addr, 31)) < 0) {
                x->step = "address the sandbox's interface";
        } else if ((r = link_set_up(&n, eth)) < 0) {
                x->step = "set the sandbox's interface up";
        } else if ((r = default_route(&n, eth, x->link->host_addr)) < 0) {
                x->step = "route the sandbox through its host";
        }
        x->error = r;
        nl_close(&n);
        return NULL;
}

/* Runs the sandbox side in a thread of its own: setns(CLONE_NEWNET) moves
 * that thread only, and it ends there. */
static int configure_inside(const wk_net_link *l, int netns_fd, sp_error **err)
{
        inside x = {.netns_fd = netns_fd, .link = l};
        pthread_t t;
        int r = pthread_create(&t, NULL, inside_main, &x);
        if (r != 0)
                return sp_error_set_errno(err, SP_E_LIMIT, r, "start a thread to configure the sandbox's network");
        pthread_join(t, NULL);
        if (x.error < 0)
                return sp_error_set_errno(err, SP_E_IO, -x.error, "%s", x.step);
        return 0;
}

/* ---- the pair ---- */

int wk_net_link_create(const wk_net_link *l, int netns_fd, sp_error **err)
{
        nl n = {0};
        if (nl_open(&n, err) < 0)
                return -SP_E_IO;
        int r = link_delete(&n, l->host_if);
        const char *step = "remove a stale host end";
        if (r == 0) {
                step = "create the veth pair";
                r = veth_create(&n, l->host_if, WK_NET_SANDBOX_IF, netns_fd);
        }
        bool made = r == 0;
        unsigned index = made ? if_nametoindex(l->host_if) : 0;
        if (made && !index) {
                step = "find the host end";
                r = -ENODEV;
        }
        if (r == 0 && (r = ipv6_off(l->host_if)) < 0)
                step = "disable IPv6 on the host end";
        if (r == 0 && (r = addr_add(&n, index, l->host_addr, 31)) < 0)
                step = "address the host end";
        if (r == 0 && (r = link_set_up(&n, index)) < 0)
                step = "set the host end up";
        if (r < 0) {
                if (made)
                        (void)link_delete(&n, l->host_if);
                nl_close(&n);
                return sp_error_set_errno(err, SP_E_IO, -r, "sandbox link %s: %s", l->host_if, step);
        }
        if (configure_inside(l, netns_fd, err) < 0) {
                (void)link_delete(&n, l->host_if);
                nl_close(&n);
                return sp_error_wrap(err, "sandbox link %s", l->host_if);
        }
        nl_close(&n);
        return 0;
}

bool wk_net_link_exists(const wk_net_link *l)
{
        return if_nametoindex(l->host_if) != 0;
}

int wk_net_link_delete(const wk_net_link *l, sp_error **err)
{
        nl n = {0};
        if (nl_open(&n, err) < 0)
                return -SP_E_IO;
        int r = link_delete(&n, l->host_if);
        nl_close(&n);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_IO, -r, "remove the sandbox link %s", l->host_if);
        return 0;
}

/* ---- a VM's namespace ---- */

typedef struct vm_ns {
        int netns_fd, tap_fd;
        int error; /* -errno */
        const char *step;
} vm_ns;

static void *vm_ns_main(void *arg)
{
        vm_ns *x = arg;
        x->step = "make a network namespace";
        if (unshare(CLONE_NEWNET) < 0) {
                x->error = -errno;
                return NULL;
        }
        x->step = "open /dev/net/tun";
        _cleanup_close_ int tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
        if (tap < 0) {
                x->error = -errno;
                return NULL;
        }
        /* No IFF_VNET_HDR: QEMU then offers the guest the features it offers without any peer, so that a
         * base snapshot saved without a network restores with one. */
        struct ifreq ifr = {0};
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", WK_NET_VM_TAP);
        ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
        x->step = "create the tap device";
        if (ioctl(tap, TUNSETIFF, &ifr) < 0) {
                x->error = -errno;
                return NULL;
        }
        x->step = "open the new network namespace";
        int ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (ns < 0) {
                x->error = -errno;
                return NULL;
        }
        x->netns_fd = ns;
        x->tap_fd = tap;
        tap = -1;
        return NULL;
}

int wk_net_vm_netns(int *ret_netns, int *ret_tap, sp_error **err)
{
        vm_ns x = {.netns_fd = -1, .tap_fd = -1};
        pthread_t t;
        int r = pthread_create(&t, NULL, vm_ns_main, &x);
        if (r != 0)
                return sp_error_set_errno(err, SP_E_LIMIT, r, "start a thread to make a VM's network namespace");
        pthread_join(t, NULL);
        if (x.error < 0)
                return sp_error_set_errno(err, SP_E_IO, -x.error, "a VM's network: %s", x.step);
        *ret_netns = x.netns_fd;
        *ret_tap = x.tap_fd;
        return 0;
}

typedef struct vm_router {
        int netns_fd;
        const wk_net_link *link;
        int error; /* -errno */
        const char *step;
        sp_error *nft_err;
} vm_router;

static void *vm_router_main(void *arg)
{
        vm_router *x = arg;
        nl n = {0};
        x->step = "enter the VM's network namespace";
        if (setns(x->netns_fd, CLONE_NEWNET) < 0) {
                x->error = -errno;
                return NULL;
        }
        x->step = "open a netlink socket in the VM's namespace";
        if (nl_open(&n, NULL) < 0) {
                x->error = -EIO;
                return NULL;
        }
        struct in_addr router = {0};
        inet_pton(AF_INET, WK_NET_VM_ROUTER, &router);
        /* The same in every VM's namespace, as the router's address is: a guest restored into a new
         * namespace (after a suspend, on another worker, from a base snapshot) sends to the router it
         * knew, whose hardware address its neighbour table holds. */
        static const uint8_t router_mac[6] = {0x52, 0x54, 0x00, 0x5a, 0x00, 0x01};
        unsigned tap = if_nametoindex(WK_NET_VM_TAP);
        int r = 0;
        if (!tap) {
                x->step = "find the VM's tap device";
                r = -ENODEV;
        } else if ((r = ipv6_off(WK_NET_VM_TAP)) < 0) {
                x->step = "disable IPv6 on the tap device";
        } else if ((r = link_set_mac(&n, tap, router_mac)) < 0) {
                x->step = "set the tap device's address";
        } else if ((r = addr_add(&n, tap, router, WK_NET_VM_PREFIX)) < 0) {
                x->step = "address the tap device";
        } else if ((r = link_set_up(&n, tap)) < 0) {
                x->step = "set the tap device up";
        } else if ((r = sysctl_on("/proc/sys/net/ipv4/ip_forward", false)) < 0) {
                x->step = "let the VM's namespace forward";
        } else if ((r = sysctl_on("/proc/sys/net/ipv4/conf/" WK_NET_VM_TAP "/arp_ignore", false)) < 0) {
                /* The guest learns no address of the namespace's but its router's. */
                x->step = "keep the tap from answering for the link's address";
        } else {
                const wk_nft_vm v = {
                        .tap = WK_NET_VM_TAP,
                        .link = WK_NET_SANDBOX_IF,
                        .router = router,
                        .host = x->link->host_addr,
                        .sandbox = x->link->sandbox_addr,
                };
                if (wk_nft_vm_install(&v, &x->nft_err) < 0) {
                        x->step = "install its firewall";
                        r = -EIO;
                }
        }
        x->error = r;
        nl_close(&n);
        return NULL;
}

int wk_net_vm_router(const wk_net_link *l, int netns_fd, sp_error **err)
{
        vm_router x = {.netns_fd = netns_fd, .link = l};
        pthread_t t;
        int r = pthread_create(&t, NULL, vm_router_main, &x);
        if (r != 0)
                return sp_error_set_errno(err, SP_E_LIMIT, r, "start a thread to configure a VM's network");
        pthread_join(t, NULL);
        if (x.nft_err) {
                sp_error_set(err, SP_E_IO, "a VM's network: %s", x.nft_err->message);
                sp_error_free(x.nft_err);
                return -SP_E_IO;
        }
        if (x.error < 0)
                return sp_error_set_errno(err, SP_E_IO, -x.error, "a VM's network: %s", x.step);
        return 0;
}
