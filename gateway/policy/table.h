/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The gateway's sandboxes, by address: who each is (sandbox and tenant
 * ids), its egress profile, the DNS answers pinned to it, its limits'
 * state — and the decisions taken from them (docs/networking.md).
 *
 * A decision is allowed, or refused by a named rule. Rules come in two
 * kinds. The platform's own boundaries (forbidden addresses: loopback,
 * link-local and metadata, multicast and reserved, the host's and the
 * sandboxes' own addresses; malformed DNS) refuse in every mode. The
 * profile's rules and the per-sandbox limits refuse in `enforce` and only
 * say "would refuse" in `audit`, where the connection or query goes ahead.
 * Beyond four times its connection limit a sandbox is refused in every mode,
 * so that no profile lets one sandbox take the gateway.
 *
 * Pure state and logic (time is passed in): the gateway's loop calls it;
 * not thread-safe.
 */
#ifndef SPACE_GATEWAY_TABLE_H
#define SPACE_GATEWAY_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/profile.h"
#include "policy/secret.h"
#include "wire/name.h"

#define GW_ID_MAX 64

typedef struct gw_limits {
        uint32_t max_conns; /* connections open at once per sandbox */
        uint32_t conn_rate, conn_burst; /* new connections per second, and the burst */
        uint32_t dns_rate, dns_burst; /* DNS queries per second, and the burst */
        uint32_t dns_name_max; /* longest name a sandbox may ask for (against tunnelling) */
        uint32_t max_pins; /* pinned answers kept per sandbox (the oldest go first) */
        uint32_t min_ttl, max_ttl; /* what a pin lasts, in seconds, whatever the answer said */
} gw_limits;

#define GW_LIMITS_DEFAULT \
        ((gw_limits){.max_conns = 256, \
                     .conn_rate = 50, \
                     .conn_burst = 100, \
                     .dns_rate = 50, \
                     .dns_burst = 100, \
                     .dns_name_max = 120, \
                     .max_pins = 4096, \
                     .min_ttl = 30, \
                     .max_ttl = 3600})

typedef struct gw_bucket {
        double tokens;
        int64_t at_us;
} gw_bucket;

typedef struct gw_pin {
        char name[GW_NAME_MAX + 1];
        uint32_t addr;
        int64_t expires_us;
} gw_pin;

typedef struct gw_sandbox {
        uint32_t addr; /* host order */
        char id[GW_ID_MAX + 1], tenant[GW_ID_MAX + 1];
        gw_profile *profile; /* owned reference */
        uint32_t conns;
        uint32_t pending; /* connections accepted and not yet decided (their first bytes awaited) */
        /* Refusal records written this second, and those left out since the
         * last one written, per kind (0 DNS, 1 TCP: a flood of one does not
         * hide the other). */
        int64_t audit_window[2];
        uint32_t audit_n[2], audit_suppressed[2], audit_rules[2]; /* audit.c */
        gw_bucket conn_bucket, dns_bucket;
        /* Four times the rates: refused in every mode (audit mode must not
         * let one sandbox flood what every sandbox shares). */
        gw_bucket conn_hard, dns_hard;
        uint32_t dns_pending; /* its questions waiting for the upstream resolver */
        uint64_t bytes_out, bytes_in;
        gw_pin *pins;
        size_t npins, cap_pins;
        /* Its secrets (docs/secrets.md), its CA (tls/tls.h) when it has
         * any, and each secret's injections this minute (by index). */
        gw_secrets *secrets;
        struct gw_sb_ca *ca;
        gw_bucket secret_rate[GW_SECRETS_MAX];
        bool stale; /* not yet confirmed by the worker's resync (ctl) */
} gw_sandbox;

typedef struct gw_table gw_table;

gw_table *gw_table_new(const gw_limits *limits);
void gw_table_free(gw_table *t);
const gw_limits *gw_table_limits(const gw_table *t);

/* Adds the sandbox at addr, or changes who it is and its profile (its pins
 * stay: the next decision checks them against the new profile). Takes a
 * reference of profile. NULL when out of memory. */
gw_sandbox *gw_table_set(gw_table *t, uint32_t addr, const char *id, const char *tenant, gw_profile *profile);
/* Forgets the sandbox at addr (false: there was none). */
bool gw_table_del(gw_table *t, uint32_t addr);
gw_sandbox *gw_table_find(gw_table *t, uint32_t addr);
size_t gw_table_count(const gw_table *t);
/* Calls fn for each sandbox (none may be added or removed meanwhile). */
void gw_table_each(gw_table *t, void (*fn)(gw_sandbox *sb, void *ud), void *ud);
void gw_table_clear(gw_table *t);
/* Removes each sandbox marked stale, calling fn for it first. */
void gw_table_sweep(gw_table *t, void (*fn)(gw_sandbox *sb, void *ud), void *ud);

/* Pins addr to name for the sandbox for ttl seconds (bounded by the limits). */
void gw_pin_add(gw_table *t, gw_sandbox *sb, const char *name, uint32_t addr, uint32_t ttl, int64_t now_us);
/* Whether the gateway resolved name to addr for the sandbox, and the pin still holds. */
bool gw_pin_has(const gw_sandbox *sb, const char *name, uint32_t addr, int64_t now_us);

typedef struct gw_decision {
        bool allow; /* go ahead (also when audit only would refuse) */
        bool would_refuse; /* audit: the profile or a limit would have refused */
        const char *rule; /* what decided: "allowed", or the refusing rule */
} gw_decision;

/* A DNS query for name (normal form, len bytes) from the sandbox. */
gw_decision gw_decide_dns(gw_table *t, gw_sandbox *sb, const char *name, size_t len, int64_t now_us);

/* A TCP connection from the sandbox to dst:port, of class dst_class (the
 * caller says GW_ADDR_FORBIDDEN for the host's and the sandboxes' own
 * addresses), naming name (SNI or Host, normal form) or NULL. On allow,
 * the connection counts against the sandbox until gw_conn_done. */
/* What the sandbox's profile (and the platform) say of a connection, without
 * the limits and with no effect on them: for connections already open when
 * the profile changes. */
gw_decision gw_decide_tcp_profile(const gw_sandbox *sb, uint32_t dst, uint16_t port, int dst_class, const char *name,
                                  int64_t now_us);
gw_decision gw_decide_tcp(gw_table *t, gw_sandbox *sb, uint32_t dst, uint16_t port, int dst_class, const char *name,
                          int64_t now_us);
void gw_conn_done(gw_sandbox *sb);
/* A refusal by a profile rule of the sandbox's (would-refuse in audit). */
gw_decision gw_decision_soft(const gw_sandbox *sb, const char *rule);

/* Whether an upstream answer's address may be pinned for the sandbox: never
 * a forbidden one, a private one only if its profile allows private
 * addresses (DNS rebinding). */
bool gw_answer_pinnable(const gw_sandbox *sb, int addr_class);

#endif
