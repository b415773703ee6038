/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's link to its host: one veth pair, routed point to point (no
 * bridge, no L2 shared between sandboxes). The host end `spv<slot>` stays in
 * the worker's network namespace with the host address; the sandbox end is
 * `eth0` in the sandbox's namespace with the sandbox address and a default
 * route through the host address. Addresses come from the worker's sandbox
 * network (a CIDR, e.g. 10.250.0.0/16): slot s takes the /31 pair
 * (base + 2s, base + 2s + 1). IPv6 is disabled on both ends.
 *
 * Programmed over rtnetlink (libmnl). The sandbox's namespace is configured
 * through a netlink socket opened by a short-lived thread that entered it
 * (a socket keeps the namespace it was made in); nothing here runs a
 * program. The sandbox's namespace is owned by the host's user namespace,
 * so root inside holds no capability over it (it cannot change the link,
 * its address or its routes).
 */
#ifndef SPACE_WORKER_NET_LINK_H
#define SPACE_WORKER_NET_LINK_H

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"

#define WK_NET_DEFAULT_CIDR "10.250.0.0/16"
#define WK_NET_HOST_PREFIX "spv"
#define WK_NET_SANDBOX_IF "eth0"

/* Host ends are named <ifprefix><slot>; a prefix is 1 to 7 of [a-z0-9],
 * starting with a letter, so that every name fits IF_NAMESIZE. Workers that
 * share a host need distinct prefixes and networks. */
#define WK_NET_IFPREFIX_MAX 7

typedef struct wk_net_pool {
        uint32_t base; /* host order, aligned to the prefix */
        int prefix_len; /* 8 to 30 */
        char ifprefix[WK_NET_IFPREFIX_MAX + 1]; /* WK_NET_HOST_PREFIX unless set */
} wk_net_pool;

typedef struct wk_net_link {
        char host_if[IF_NAMESIZE];
        struct in_addr host_addr, sandbox_addr;
} wk_net_link;

/* Parses "A.B.C.D/N" (8 <= N <= 30, no host bits set); the interface
 * prefix is WK_NET_HOST_PREFIX. */
int wk_net_pool_parse(const char *cidr, wk_net_pool *ret, sp_error **err);
/* Names host ends <prefix><slot> instead. */
int wk_net_pool_set_ifprefix(wk_net_pool *p, const char *prefix, sp_error **err);
/* How many sandboxes the pool has addresses for. */
uint32_t wk_net_pool_slots(const wk_net_pool *p);
/* The link of slot (SP_E_LIMIT past the pool's end). */
int wk_net_link_of(const wk_net_pool *p, uint32_t slot, wk_net_link *ret, sp_error **err);

/* Creates the pair for the sandbox whose network namespace netns_fd is,
 * with its addresses, routes and both ends up. A host end of that name left
 * over from before is removed first. On failure nothing is left. */
int wk_net_link_create(const wk_net_link *l, int netns_fd, sp_error **err);
/* Whether the host end exists (in the caller's namespace). */
bool wk_net_link_exists(const wk_net_link *l);
/* Removes the pair (through its host end); a missing one is no error. */
int wk_net_link_delete(const wk_net_link *l, sp_error **err);

/* A VM's network (docs/backends.md, "Network"). A VM's QEMU runs in an empty
 * namespace of its own; the sandbox's namespace is another, made for it, with
 * the sandbox's link as a jail's has it and a tap device whose descriptor
 * QEMU is handed. The guest always has the address WK_NET_VM_GUEST behind the
 * router WK_NET_VM_ROUTER (the tap's own address, also its resolver): the
 * namespace routes between the tap and the link, translating the guest's
 * address to the sandbox's (nft.h, wk_nft_vm_install), so that a VM restored
 * elsewhere, or from a base snapshot, keeps its configuration. */
#define WK_NET_VM_TAP "tap0"
#define WK_NET_VM_ROUTER "169.254.77.1"
#define WK_NET_VM_GUEST "169.254.77.2"
#define WK_NET_VM_PREFIX 30

/* Makes a network namespace with the tap device in it (down, unaddressed):
 * *ret_netns and *ret_tap are descriptors of both. The tap's descriptor
 * holds the namespace while it is open (the caller's other may be closed). */
int wk_net_vm_netns(int *ret_netns, int *ret_tap, sp_error **err);
/* In the VM's namespace netns_fd, which has l's sandbox end already: the
 * tap's address and its routing and translation to l. */
int wk_net_vm_router(const wk_net_link *l, int netns_fd, sp_error **err);

#endif
