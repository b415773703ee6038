/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: loopback ports for daemons under test.
 *
 * A port handed out here lies outside the kernel's ephemeral range
 * (/proc/sys/net/ipv4/ip_local_port_range), so no outgoing connection on the
 * host can take it between the choice and the daemon's bind, as one did when
 * tests asked the kernel for a port and then closed it. Each port was free a
 * moment ago (a bind to 127.0.0.1 succeeded) and is reserved for the calling
 * process and its forks: an exclusive flock(2) on
 * /tmp/space-test-ports/<port>, held until the process (and every fork that
 * inherited it) exits, keeps concurrent test processes from picking the same
 * one. Daemons started through proc.h do not inherit the lock. Each process
 * starts at a random place in the range, so reruns do not reuse ports still
 * in TIME_WAIT.
 *
 * When the ephemeral range leaves no room below it (it starts under 12000),
 * ports come from above it if there is room, and otherwise from the kernel as
 * before (port 0). Not thread-safe.
 */
#ifndef SPACE_TEST_PORT_H
#define SPACE_TEST_PORT_H

#include "space/error.h"

/* The lowest port tests use (below it: well-known and registered services). */
#define SP_TEST_PORT_MIN 10000

/* A free TCP port on 127.0.0.1, reserved as above. Returns the port, or <0
 * with *err set (SP_E_LIMIT: none free). */
int sp_test_free_port(sp_error **err);

/* The first of n consecutive free ports (n <= 64), all reserved as above: for
 * programs that derive their ports from one base (spacectl up --api-port N
 * uses N to N+5). Returns the first port, or <0 with *err set. */
int sp_test_free_port_block(int n, sp_error **err);

/* The range ports come from: [*ret_lo, *ret_hi], outside the ephemeral range
 * when there is room for one. Returns 0, or -1 if only the kernel's choice
 * (port 0) is left. */
int sp_test_port_range(int *ret_lo, int *ret_hi);

/* A worker's sandbox network that no other test's shares, derived from a
 * port the caller holds: --sandbox-network=true, --sandbox-cidr=<a /24 of
 * 10.128.0.0/9>, --net-prefix=t<port> (host ends are <ifprefix><slot>),
 * gateway ports of its own (two more held ports) and NFLOG group <port>.
 * With upstream_netns NULL the worker runs no gateway (--gateway=none: a
 * sandbox's DNS and TCP are steered to a port nobody serves, so nothing
 * leaves); else the gateway makes its upstream connections in that
 * namespace only (a test's own internet, inet.h). Ports 32768 apart would
 * share a network; tests never hold both. argv is the flags, NULL-ended. */
typedef struct sp_test_worker_net {
        char enable[32], cidr[48], prefix[32], tcp[40], dns[40], group[40], gateway[32], upstream[160];
        char ifprefix[16];
        int tcp_port, dns_port;
        const char *argv[10];
} sp_test_worker_net;
int sp_test_worker_net_args(int port, const char *upstream_netns, sp_test_worker_net *ret, sp_error **err);

#endif
