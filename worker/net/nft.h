/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The sandboxes' firewall: one nftables table (family inet) per worker that
 * lets a sandbox reach nothing but the node's gateway. A sandbox's DNS (UDP
 * to port 53, any address) is redirected to the gateway's DNS port and all
 * its TCP to the gateway's TCP port (REDIRECT: the destination becomes the
 * host end's address; the gateway reads the dialled one with
 * SO_ORIGINAL_DST). Everything else a sandbox sends is dropped: packets
 * whose (interface, source address) is not a registered sandbox, all IPv6,
 * anything else addressed to the host, and anything to be forwarded from or
 * to a sandbox interface or address, whatever the host's ip_forward says.
 * The gateway's ports take only redirected connections: new ones arriving
 * on any other interface (loopback included) are dropped. Each drop rule
 * counts and logs to an NFLOG group (see nflog.h) with a prefix naming it.
 *
 * The table as `nft list table inet <name>` prints it, for prefix "spv",
 * pool 10.250.0.0/16, gateway ports 3128 (TCP) and 5353 (DNS), group 7:
 *
 *   set sandboxes { type ifname . ipv4_addr }
 *   set conns { type ifname; size 65535; flags dynamic; }
 *   chain prerouting { type filter hook prerouting priority raw; policy accept;
 *     iifname "spv*" meta nfproto ipv6 counter log prefix "space:ipv6" group 7 drop
 *     iifname "spv*" iifname . ip saddr != @sandboxes counter log prefix "space:spoof" group 7 drop
 *     iifname "spv*" meta l4proto tcp accept
 *     iifname "spv*" udp dport 53 accept
 *     iifname "spv*" counter log prefix "space:protocol" group 7 drop }
 *   chain limits { type filter hook prerouting priority mangle; policy accept;
 *     iifname "spv*" ct state new add @conns { iifname ct count over 1024 }
 *       counter log prefix "space:conntrack" group 7 drop }
 *   chain to_gateway { type nat hook prerouting priority dstnat; policy accept;
 *     iifname "spv*" udp dport 53 redirect to :5353
 *     iifname "spv*" meta l4proto tcp redirect to :3128 }
 *   chain input { type filter hook input priority filter; policy accept;
 *     iifname "spv*" ct state established,related accept
 *     iifname "spv*" ct status dnat tcp dport 3128 accept
 *     iifname "spv*" ct status dnat udp dport 5353 accept
 *     iifname "spv*" counter log prefix "space:input" group 7 drop
 *     iifname != "spv*" ct state ! established,related tcp dport 3128 counter log prefix "space:gateway" group 7 drop
 *     iifname != "spv*" ct state ! established,related udp dport 5353 counter log prefix "space:gateway" group 7 drop }
 *   chain forward { type filter hook forward priority filter; policy accept;
 *     iifname "spv*" counter log prefix "space:forward" group 7 drop
 *     oifname "spv*" counter log prefix "space:forward" group 7 drop
 *     ip saddr 10.250.0.0/16 counter log prefix "space:forward" group 7 drop
 *     ip daddr 10.250.0.0/16 counter log prefix "space:forward" group 7 drop }
 *
 * Programmed with libnftnl over one netlink socket per call, opened in the
 * calling thread's network namespace (a thread that entered another one
 * with setns programs that one). Each change is one atomic batch. Calls are
 * independent: any thread, no shared state. Needs CAP_NET_ADMIN; the kernel
 * needs nf_tables with ct, nat/redir, log and nfnetlink_log.
 */
#ifndef SPACE_WORKER_NET_NFT_H
#define SPACE_WORKER_NET_NFT_H

#include <netinet/in.h>
#include <stdint.h>

#include "net/link.h"
#include "space/error.h"

/* The longest table name taken (nftables allows more; ours are short). */
#define WK_NFT_TABLE_MAX 64

typedef struct wk_nft_config {
        const char *table; /* [A-Za-z0-9_-], 1..WK_NFT_TABLE_MAX; one per worker on a host */
        const char *if_prefix; /* host ends' name prefix, e.g. WK_NET_HOST_PREFIX; 1..IF_NAMESIZE-2 */
        wk_net_pool pool; /* the sandbox network (see link.h) */
        uint16_t gateway_tcp_port, gateway_dns_port; /* on the host ends' addresses; nonzero, distinct */
        uint16_t log_group; /* NFLOG group of the drop rules */
        uint32_t conns_max; /* connection-tracking entries a sandbox may hold (0: WK_NFT_CONNS_MAX) */
} wk_nft_config;

/* Four times the gateway's limit of connections it relays for a sandbox
 * (256), with room for its DNS and connections on their way to it. */
#define WK_NFT_CONNS_MAX 1024

/* The drop rules, by name. The NFLOG prefix of each is wk_nft_drop_name(). */
typedef enum wk_nft_drop {
        WK_NFT_DROP_SPOOF, /* "space:spoof": (iifname, saddr) not a registered sandbox */
        WK_NFT_DROP_IPV6, /* "space:ipv6": any IPv6 from a sandbox */
        WK_NFT_DROP_INPUT, /* "space:input": to the host, not the gateway */
        WK_NFT_DROP_GATEWAY, /* "space:gateway": to a gateway port from another interface */
        WK_NFT_DROP_FORWARD, /* "space:forward": forwarded from or to a sandbox */
        WK_NFT_DROP_PROTOCOL, /* "space:protocol": from a sandbox, neither TCP nor UDP to port 53 */
        WK_NFT_DROP_CONNTRACK, /* "space:conntrack": a new flow past the sandbox's conns_max */
        WK_NFT_DROP__MAX
} wk_nft_drop;

/* Packets and bytes each drop rule took (summed over the rules sharing its name). */
typedef struct wk_nft_counters {
        uint64_t packets[WK_NFT_DROP__MAX];
        uint64_t bytes[WK_NFT_DROP__MAX];
} wk_nft_counters;

/* "space:spoof", ...; NULL past the end. */
const char *wk_nft_drop_name(wk_nft_drop d);
/* The rule whose NFLOG prefix is prefix, or WK_NFT_DROP__MAX. */
wk_nft_drop wk_nft_drop_from_name(const char *prefix);

/* Checks a configuration (SP_E_INVALID, saying which field). */
int wk_nft_config_validate(const wk_nft_config *c, sp_error **err);

/* Replaces the table whole, in one batch: deletes it if present and creates
 * it anew, empty set included (so re-add the running sandboxes after; until
 * then their packets are dropped as spoofed). Idempotent; run at start.
 * SP_E_INVALID when an interface of the namespace starts with the prefix but
 * is not the prefix and a number (its traffic would be taken for a
 * sandbox's). The prefix of another worker on the host must not start with
 * this one, nor this one with it: that is not checked here. */
int wk_nft_install(const wk_nft_config *c, sp_error **err);

/* Registers a sandbox: its host end ifname (1..IF_NAMESIZE-1 chars) may
 * carry source address addr. Adding one already there is no error;
 * SP_E_NOT_FOUND when the table is missing. */
int wk_nft_sandbox_add(const wk_nft_config *c, const char *ifname, struct in_addr addr, sp_error **err);
/* Unregisters it; a missing element (or table) is no error. */
int wk_nft_sandbox_del(const wk_nft_config *c, const char *ifname, struct in_addr addr, sp_error **err);
/* Unregisters n of them in one commit (an element's delete costs the
 * kernel a commit that takes milliseconds: batching them costs one);
 * missing ones are no error. */
int wk_nft_sandbox_del_many(const wk_nft_config *c, const char *const *ifnames, const struct in_addr *addrs, size_t n,
                            sp_error **err);

/* Deletes the table; a missing one is no error. */
int wk_nft_remove(const wk_nft_config *c, sp_error **err);

/* The table of a VM's own network namespace (docs/backends.md, "Network"),
 * installed in the caller's (thread's) namespace, replacing one there:
 *
 *   table inet space_vm {
 *     chain limits { type filter hook prerouting priority mangle;
 *       iifname "tap0" ct state new ct count over 1024 counter drop }
 *     chain to_host { type nat hook prerouting priority dstnat;
 *       iifname "tap0" ip daddr <router> udp dport 53 dnat ip to <host>:53 }
 *     chain from_guest { type nat hook postrouting priority srcnat;
 *       oifname "eth0" snat ip to <sandbox> }
 *     chain forward { type filter hook forward priority filter;
 *       ct state invalid counter drop
 *       iifname "tap0" oifname "eth0" accept
 *       iifname "eth0" oifname "tap0" ct state established,related accept
 *       counter drop }
 *     chain input { type filter hook input priority filter; counter drop } }
 *
 * The guest sees its fixed address behind its fixed router; the link sees
 * the sandbox's address only, and the host's firewall (above) does the rest. */
#define WK_NFT_VM_TABLE "space_vm"
typedef struct wk_nft_vm {
        const char *tap, *link; /* the guest's side, the host's side */
        struct in_addr router; /* the tap's own address: the guest's router and resolver */
        struct in_addr host; /* the link's host end: where DNS goes */
        struct in_addr sandbox; /* the link's address: every packet out carries it */
        uint32_t conns_max; /* the guest's connection-tracking entries (0: WK_NFT_CONNS_MAX) */
} wk_nft_vm;
int wk_nft_vm_install(const wk_nft_vm *v, sp_error **err);

/* Reads every drop rule's counter into *ret (zeroed first; untouched on
 * failure). SP_E_NOT_FOUND when the table is missing. */
int wk_nft_counters_read(const wk_nft_config *c, wk_nft_counters *ret, sp_error **err);

#endif
