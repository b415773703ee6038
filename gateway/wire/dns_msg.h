/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DNS messages (RFC 1035 §4, EDNS from RFC 6891) as the egress gateway
 * speaks them: it reads queries from sandboxes and answers them itself,
 * and it asks an upstream resolver and reads the answers.
 *
 * From a sandbox (hostile), a query is accepted only as a plain QUERY with
 * exactly one question whose name has no compression pointer, labels of
 * LDH characters and '_' (normal form of name.h, so no byte can smuggle a
 * second meaning through the name), class IN, empty answer and authority
 * sections, and at most one additional record: a well-formed EDNS OPT.
 * Nothing may follow the last record.
 *
 * From upstream (trusted to be the resolver, not to be well-formed), an
 * answer must carry the id and the question asked; the answer section is
 * followed from the name asked through its CNAME chain (at most
 * GW_DNS_MAX_CNAME links; a loop ends there) and the addresses of the last
 * name are collected. Compression pointers must point strictly backwards
 * (so names cannot loop) and at most GW_DNS_MAX_JUMPS of them make a name.
 *
 * Pure: no allocation, no global state, thread-safe. Builders write into
 * the caller's buffer.
 */
#ifndef SPACE_GATEWAY_WIRE_DNS_MSG_H
#define SPACE_GATEWAY_WIRE_DNS_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire/name.h"

#define GW_DNS_HEADER 12
/* A name in wire form, the root label included (RFC 1035 §3.1). */
#define GW_DNS_NAME_WIRE_MAX 255
/* Links of a CNAME chain followed in an upstream answer. */
#define GW_DNS_MAX_CNAME 8
/* Compression pointers followed to read one name. */
#define GW_DNS_MAX_JUMPS 32
/* Addresses kept from an upstream answer (the rest are dropped). */
#define GW_DNS_MAX_ADDRS 32
/* The largest answer over UDP to an EDNS query (the DNS flag day 2020 size),
 * and without EDNS (RFC 1035). */
#define GW_DNS_UDP_MAX 1232
#define GW_DNS_UDP_PLAIN 512

enum {
        GW_DNS_TYPE_A = 1,
        GW_DNS_TYPE_CNAME = 5,
        GW_DNS_TYPE_AAAA = 28,
        GW_DNS_TYPE_OPT = 41,
        GW_DNS_CLASS_IN = 1,
};

enum {
        GW_DNS_NOERROR = 0,
        GW_DNS_FORMERR = 1,
        GW_DNS_SERVFAIL = 2,
        GW_DNS_NXDOMAIN = 3,
        GW_DNS_NOTIMP = 4,
        GW_DNS_REFUSED = 5,
};

/* A query from a sandbox. */
typedef struct gw_dns_query {
        uint16_t id;
        uint16_t flags; /* header flags as received (RD is echoed) */
        bool has_question; /* the question below was read */
        char name[GW_NAME_MAX + 1]; /* normal form: lowercase, no trailing dot */
        uint16_t qtype, qclass;
        /* The question's name as sent (case kept, for the echo). */
        uint8_t qname_wire[GW_DNS_NAME_WIRE_MAX];
        size_t qname_wire_len;
        bool edns; /* a well-formed OPT record came with it */
        uint16_t edns_udp_size;
        uint8_t edns_version;
        const char *reason; /* why it was not accepted: static, or NULL */
} gw_dns_query;

/* An address with its time to live. A: addr[0..4), AAAA: addr[0..16). */
typedef struct gw_dns_addr {
        uint16_t type; /* GW_DNS_TYPE_A or GW_DNS_TYPE_AAAA */
        uint8_t addr[16];
        uint32_t ttl;
} gw_dns_addr;

/* What an upstream answer says about the name asked. */
typedef struct gw_dns_answer {
        uint8_t rcode; /* the header's RCODE */
        bool truncated; /* TC was set: ask again over TCP */
        size_t cname_links; /* CNAME records followed */
        size_t naddrs;
        /* Of the type asked, without duplicates; each TTL at most that of
         * the CNAMEs followed to it. */
        gw_dns_addr addrs[GW_DNS_MAX_ADDRS];
        uint32_t min_ttl; /* the least of those TTLs; 0 without addresses */
        const char *reason; /* why it was not accepted: static, or NULL */
} gw_dns_answer;

/* Reads a query from a sandbox into *ret (always written). Returns 0 when
 * it is acceptable; the RCODE to answer with (FORMERR, NOTIMP, REFUSED;
 * has_question says whether the question can be echoed) with ret->reason;
 * or -1 when it must be dropped unanswered (shorter than a header, or a
 * response). Any QTYPE is accepted; the caller picks those it answers. */
int gw_dns_query_parse(const uint8_t *msg, size_t len, gw_dns_query *ret);

/* The largest answer to send q over UDP: 512 without EDNS, else its UDP
 * size between 512 and GW_DNS_UDP_MAX. */
size_t gw_dns_query_udp_limit(const gw_dns_query *q);

/* Writes an answer to q with RCODE rcode and no records (besides an OPT
 * when q had one): the question is echoed when q has one. Returns its
 * length, or -1 when it does not fit in cap. */
ssize_t gw_dns_build_error(const gw_dns_query *q, int rcode, uint8_t *out, size_t cap);

/* Writes a NOERROR answer to q with addrs[0..n) (all of q->qtype; n may be
 * 0: NODATA). Records that do not fit in cap are left out, without TC (for
 * the gateway any subset of the addresses is a whole answer). Returns its
 * length, or -1 when q has no question, an address is not of q->qtype, or
 * the header and question do not fit. */
ssize_t gw_dns_build_answer(const gw_dns_query *q, const gw_dns_addr *addrs, size_t n, uint8_t *out, size_t cap);

/* Writes a recursive query (RD, an EDNS OPT offering GW_DNS_UDP_MAX) for
 * name (normal form of name.h, underscores allowed, one trailing dot
 * accepted) and qtype (A or AAAA). Returns its length, or -1. */
ssize_t gw_dns_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t cap);

/* Reads an upstream answer to the query (id, name, qtype) into *ret (always
 * written). Returns 0 (ret->rcode says what it answered) or -1 with
 * ret->reason: not a matching answer, malformed, truncated (ret->truncated),
 * a CNAME chain too long or looping, a name with two CNAMEs or with a
 * CNAME and addresses. */
int gw_dns_response_parse(const uint8_t *msg, size_t len, uint16_t id, const char *name, uint16_t qtype,
                          gw_dns_answer *ret);

#endif
