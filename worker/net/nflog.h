/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The audit trail of the sandboxes' firewall: the packets its drop rules log
 * to an NFLOG group (see nft.h), read over nfnetlink_log.
 *
 * wk_nflog_parse() turns one kernel message into a record: the rule's prefix,
 * the interfaces' indexes, and the protocol, addresses and ports read from
 * the copied head of the packet (IPv4 or IPv6, every length checked). It is
 * pure: no system call, no allocation unless it fails with err set.
 *
 * A wk_nflog reader binds the group in the network namespace of the thread
 * that opens it, asking for the first WK_NFLOG_COPY bytes of each packet,
 * flushed at least every 100 ms. Its socket is non-blocking, for an event
 * loop; one reader per group and namespace (the kernel refuses a second
 * with EPERM). A reader is used by one thread at a time. The reader does not
 * PF_BIND nfnetlink_log as a family's default logger: the rules name their
 * group, which needs no binding, and the default logger is the namespace's
 * (conntrack's invalid-packet logging and the like would follow it).
 */
#ifndef SPACE_WORKER_NET_NFLOG_H
#define SPACE_WORKER_NET_NFLOG_H

#include <net/if.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define WK_NFLOG_COPY 128
#define WK_NFLOG_PREFIX_MAX 64

typedef struct wk_nflog_record {
        char prefix[WK_NFLOG_PREFIX_MAX]; /* the rule's, truncated; "" when none */
        uint16_t group; /* the NFLOG group it came by */
        uint8_t hook; /* NF_INET_* */
        int family; /* AF_INET or AF_INET6 (from the packet); 0 when its head was not read */
        uint32_t indev, outdev; /* interface indexes, 0 when none */
        char indev_name[IF_NAMESIZE]; /* filled by the reader (if_indextoname), not the parser */
        uint8_t protocol; /* IPPROTO_*: the IPv4 protocol or the IPv6 next header */
        union {
                struct in_addr v4;
                struct in6_addr v6;
        } saddr, daddr;
        uint16_t sport, dport; /* host order; TCP, UDP (first fragment only), else 0 */
        uint8_t icmp_type, icmp_code; /* ICMP and ICMPv6 */
        uint32_t length; /* the packet's length as its header says (bytes), 0 when unread */
} wk_nflog_record;

/* Parses one netlink message (buf, len: from its nlmsghdr on; trailing
 * bytes past nlmsg_len are ignored) of type NFULNL_MSG_PACKET into *ret.
 * SP_E_INVALID for anything else or anything malformed; *ret is then
 * unspecified. A packet head too short or not IP leaves the packet fields
 * zero (family 0) and is no error. */
int wk_nflog_parse(const void *buf, size_t len, wk_nflog_record *ret, sp_error **err);

typedef struct wk_nflog wk_nflog;

/* Binds group in the caller's network namespace. */
int wk_nflog_open(uint16_t group, wk_nflog **ret, sp_error **err);
/* Unbinds and frees; accepts NULL; returns NULL. */
wk_nflog *wk_nflog_free(wk_nflog *l);
/* The socket, non-blocking, for poll(2). Owned by the reader. */
int wk_nflog_fd(const wk_nflog *l);

/* Callback per record; a negative return stops the read and is returned. */
typedef int (*wk_nflog_cb)(const wk_nflog_record *r, void *userdata);

/* Reads what is waiting (one datagram, which may hold many records) and
 * calls cb for each. Returns the number of records, 0 when nothing waits,
 * or <0. Messages that do not parse are skipped and counted in
 * wk_nflog_skipped(); when the kernel dropped records because we were too
 * slow (ENOBUFS), wk_nflog_overruns() grows and the read goes on. */
int wk_nflog_read(wk_nflog *l, wk_nflog_cb cb, void *userdata, sp_error **err);
uint64_t wk_nflog_skipped(const wk_nflog *l);
uint64_t wk_nflog_overruns(const wk_nflog *l);

#endif
