/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-gateway: a worker node's egress gateway (docs/networking.md). The
 * worker's nftables table steers every sandbox's DNS (UDP 53) and TCP here;
 * the gateway answers DNS for the names the sandbox's profile allows, pins
 * the answers to that sandbox, and relays a TCP connection only when its
 * SNI or Host names an allowed name and the address dialled is one it
 * pinned for that name (or the profile allows the address itself). Every
 * decision is an audit record, sent to the worker over the control socket,
 * logged and counted.
 *
 * Modules (one folder each, libspace-gateway):
 *   wire/    parsers of what sandboxes send: TLS ClientHello SNI, HTTP Host, DNS
 *   policy/  profiles, the sandbox table, pins, limits and decisions
 *   ctl/     the control socket (the worker says who is where with which profile)
 *   relay/   the TCP relay
 *   dns/     the DNS server and its upstream resolver client
 *   core/    addresses, audit records and metrics
 * One thread, one libevent loop.
 */
#ifndef SPACE_GATEWAY_GW_H
#define SPACE_GATEWAY_GW_H

#include <json-c/json.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "policy/table.h"
#include "space/buf.h"
#include "space/error.h"

struct event_base;

#define GW_CIDRS_MAX 64

typedef struct gw_cidr {
        uint32_t net, mask;
} gw_cidr;

typedef struct gw_config {
        struct sockaddr_in resolver; /* upstream DNS */
        gw_cidr public_cidrs[GW_CIDRS_MAX]; /* treated as public (a test's own internet) */
        size_t n_public;
        gw_cidr forbid_cidrs[GW_CIDRS_MAX]; /* never reached: the sandboxes' network, the host's */
        size_t n_forbid;
        int sniff_timeout_ms; /* for the first bytes of a connection */
        int connect_timeout_ms;
        int idle_timeout_ms; /* a relayed connection with no traffic either way is closed (0: never) */
        int dns_timeout_ms;
        uint32_t max_connections; /* all sandboxes together */
} gw_config;

typedef struct gw_counters {
        uint64_t dns_queries, dns_allowed, dns_refused, dns_would_refuse, dns_upstream_errors;
        uint64_t tcp_conns, tcp_allowed, tcp_refused, tcp_would_refuse, tcp_upstream_errors;
        uint64_t bytes_out, bytes_in;
        uint64_t secret_injected, secret_refused;
        uint64_t unknown_source, audit_dropped, audit_suppressed;
        uint64_t open_conns;
        uint64_t pending_conns; /* accepted, not yet decided */
} gw_counters;

typedef struct gw gw;
typedef struct gw_ctl gw_ctl;
typedef struct gw_relay gw_relay;
typedef struct gw_dns gw_dns;

struct gw {
        struct event_base *base;
        gw_config cfg;
        gw_table *table;
        gw_ctl *ctl;
        gw_relay *relay;
        gw_dns *dns;
        struct gw_tls *tls; /* NULL: secrets cannot be injected (see the log) */
        gw_counters counters;
        /* per rule, for /metrics: rule name -> count (refused and would-refuse) */
        json_object *rules;
        /* The host's addresses: a route netlink socket opened in the host's
         * namespace (it stays there when the process moves to the upstream
         * one), and how many forbidden ranges came from the flags. */
        int host_nl;
        size_t n_forbid_flags;
        struct event *host_addr_ev;
};

/* ---- core/addr.c ---- */
int gw_cidr_parse(const char *s, gw_cidr *ret, sp_error **err);
/* Parses "A/N,B/M" into v (at most GW_CIDRS_MAX). */
int gw_cidr_list_parse(const char *s, gw_cidr *v, size_t *n, sp_error **err);
bool gw_cidr_list_has(const gw_cidr *v, size_t n, uint32_t addr);
/* The class of a destination as this gateway sees it: forbidden if in the
 * forbidden list or a host address, public if in the public list, else by
 * gw_addr_classify. addr in host order. */
int gw_dst_class(const gw *g, uint32_t addr);
/* Opens g->host_nl in the caller's network namespace (the host's), and
 * remembers the forbidden ranges the flags gave. */
int gw_host_addresses_open(gw *g, sp_error **err);
/* The forbidden list again: the flags' ranges and the host's own IPv4
 * addresses now (all interfaces of the namespace host_nl was opened in).
 * Run at start and every few seconds, so that an address the host gains is
 * never reached. */
int gw_forbid_local_addresses(gw *g, sp_error **err);

/* ---- core/audit.c ---- */
typedef struct gw_audit_rec {
        const char *kind; /* "dns", "tcp", "secret" (a use of a secret, or a placeholder seen) */
        const gw_sandbox *sb; /* NULL: an unknown source */
        uint32_t src; /* host order */
        const char *name; /* the DNS question, SNI or Host, or NULL */
        const char *proto; /* tcp: "tls", "http", "other" */
        uint32_t dst; /* host order; 0: none */
        uint16_t port;
        uint64_t bytes_out, bytes_in;
        gw_decision d;
        const char *detail; /* e.g. why a ClientHello was refused; or NULL */
        const char *secret_id, *secret; /* kind "secret": which (never its value), or NULL */
        const char *phase; /* "open", "close" */
} gw_audit_rec;
/* Counts, logs and sends the record to the worker. */
void gw_audit(gw *g, const gw_audit_rec *r);
void gw_metrics(gw *g, sp_buf *out);

/* ---- ctl/ctl.c ---- */
int gw_ctl_new(gw *g, int listen_fd, gw_ctl **ret, sp_error **err);
void gw_ctl_free(gw_ctl *c);
/* Sends one line (a JSON object) to every connected worker; dropped (and
 * counted) for a worker whose backlog is full. */
void gw_ctl_broadcast(gw_ctl *c, json_object *o);

/* ---- relay/relay.c ---- */
int gw_relay_new(gw *g, int listen_fd, gw_relay **ret, sp_error **err);
void gw_relay_free(gw_relay *r);
/* Ends the connections of the sandbox at addr (it went away). */
void gw_relay_drop_sandbox(gw_relay *r, uint32_t addr);
/* After sb's profile changed: resets its open connections the new profile
 * (or the platform) no longer allows. */
void gw_relay_recheck_sandbox(gw_relay *r, gw_sandbox *sb);

/* ---- dns/dns.c ---- */
int gw_dns_new(gw *g, int udp_fd, gw_dns **ret, sp_error **err);
void gw_dns_free(gw_dns *d);

#endif
