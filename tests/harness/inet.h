/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: a test's own "internet", for the egress gateway's tests.
 *
 * One network namespace holding nothing but its loopback interface, on which
 * the test's public addresses live (from 10.213.128.0/17, which exists only
 * inside test namespaces): the egress gateway is pointed into it
 * (space-gateway --upstream-netns), so every upstream packet it could ever
 * send, however a sandbox tricks it, ends here. Inside, one server process
 * answers on every one of those addresses:
 *   udp 53 (on every address,        A records of the configured names
 *   the resolver's among them)       (NXDOMAIN for the rest)
 *   tcp 80, 8080, 53                 HTTP: "http <Host> <local address>:<port>\n"
 *   tcp 443, 853                     TLS (one self-signed RSA certificate for
 *                                    every name): after the request,
 *                                    "tls <SNI> <local address>:<port>\n"
 *                                    (443: up to 16 requests on a connection,
 *                                    their bodies read, until one says close)
 *   tcp 22                           a banner first ("SSH-2.0-inet <address>\r\n")
 *   tcp 7000                         HTTP that answers a head promising a body
 *                                    and then holds the connection, silent
 *                                    ("... held until the other side closed")
 *   udp 9999                         echo
 * Every connection and datagram it sees is a line in its log ("accept tcp
 * <address>:<port>", then "tcp <address>:<port> sni=<..> host=<..>"; "udp
 * <address>:53 q=<name> type=<n>", "udp <address>:<port> echo"; for HTTP
 * and TLS requests also "tcp <address>:<port> req <request line>" and "tcp
 * <address>:<port> hdr authorization <value>" (and x-api-key)), so that a
 * test can prove a refused connection never got here.
 * Root only; start in an unchecked fixture (it outlives forked tests).
 */
#ifndef SPACE_TEST_INET_H
#define SPACE_TEST_INET_H

#include <stddef.h>
#include <sys/types.h>

#include "netns.h"
#include "space/error.h"

#define SP_TEST_INET_RESOLVER "10.213.253.53"
#define SP_TEST_INET_CIDR "10.213.128.0/17"

typedef struct sp_test_inet_record {
        const char *name; /* "allowed.test" */
        const char *addr; /* "10.213.200.1" (in SP_TEST_INET_CIDR) */
} sp_test_inet_record;

typedef struct sp_test_inet {
        sp_test_netns ns;
        pid_t pid; /* the servers */
        char dir[256]; /* the log and the CA certificate live here */
        char log_path[300];
        char ca_path[300]; /* PEM of the TLS certificate (self-signed: its own CA) */
} sp_test_inet;

/* Starts the internet with records[0..n) (each address is added to the
 * namespace's loopback; one name may have several records). dir must exist. */
int sp_test_inet_start(sp_test_inet *in, const char *dir, const sp_test_inet_record *records, size_t n, sp_error **err);
void sp_test_inet_stop(sp_test_inet *in);
/* How many lines of the log contain needle (after a short settle). */
int sp_test_inet_seen(const sp_test_inet *in, const char *needle);

#endif
