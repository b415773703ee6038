/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Egress profiles (docs/networking.md): what a sandbox may reach through the
 * gateway. One definition serves the control plane (which checks what
 * tenants send), the worker (which passes profiles on) and the gateway
 * (which enforces them).
 *
 *   {"name": "ci", "mode": "enforce",
 *    "domains": ["pypi.org", "*.pythonhosted.org"],
 *    "ports": [443],
 *    "cidrs": ["151.101.0.0/16"],
 *    "allow_private": false,
 *    "secrets": ["openai"]}
 *
 * - domains: exact names and "*.suffix" wildcards (gateway/wire/pattern.h);
 *   a connection to a name must go to an address the gateway resolved for
 *   that name for that sandbox;
 * - ports: the TCP ports allowed (1-65535); default 80 and 443;
 * - cidrs: addresses reachable directly (no name needed) on those ports;
 *   private, shared, loopback, link-local, multicast and reserved ranges
 *   only with allow_private, which only an admin may set;
 * - secrets: the tenant's secrets (docs/secrets.md) a sandbox with this
 *   profile may be given, by name; the built-in profiles grant none;
 * - mode: enforce, or audit (a dry run: what the profile would refuse is
 *   allowed and logged as such; the platform's own boundaries — the host,
 *   other sandboxes, link-local and metadata addresses, protocols other
 *   than DNS and TCP — hold in every mode).
 *
 * Built in: "none" (nothing; the default) and "public" (any name, and any
 * public address, on ports 80 and 443).
 *
 * A profile is immutable once parsed and reference-counted, so that a
 * sandbox keeps the one it had while another replaces it.
 */
#ifndef SPACE_GATEWAY_PROFILE_H
#define SPACE_GATEWAY_PROFILE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"

#define GW_PROFILE_NAME_MAX 63
#define GW_PROFILE_DOMAINS_MAX 1000
#define GW_PROFILE_PORTS_MAX 64
#define GW_PROFILE_CIDRS_MAX 256
#define GW_PROFILE_SECRETS_MAX 32

typedef enum gw_mode {
        GW_MODE_ENFORCE,
        GW_MODE_AUDIT,
} gw_mode;

typedef struct gw_profile gw_profile;

/* Parses and checks a profile. Errors are SP_E_INVALID naming the field
 * ("field 'domains[2]': ..."); allow_private without may_allow_private is
 * SP_E_PERMISSION. A missing name is taken from default_name (NULL: the name
 * is required). */
int gw_profile_parse(json_object *o, const char *default_name, bool may_allow_private, gw_profile **ret,
                     sp_error **err);
/* {"name": "none"} or {"name": "public"} is the built-in profile; anything
 * else is parsed (gw_profile_parse without a default name). */
int gw_profile_resolve(json_object *o, bool may_allow_private, gw_profile **ret, sp_error **err);
/* "none" or "public" (a new reference), or NULL. */
gw_profile *gw_profile_builtin(const char *name);
bool gw_profile_is_builtin_name(const char *name);

gw_profile *gw_profile_ref(gw_profile *p);
void gw_profile_unref(gw_profile *p);
static inline void gw_profile_unrefp(gw_profile **p)
{
        gw_profile_unref(*p);
}

/* Back to JSON (the normal form: lowercase names, sorted ports). New reference. */
json_object *gw_profile_to_json(const gw_profile *p);

const char *gw_profile_name(const gw_profile *p);
gw_mode gw_profile_mode(const gw_profile *p);
/* Whether a name (normal form) is one the profile names. */
bool gw_profile_allows_name(const gw_profile *p, const char *name);
bool gw_profile_allows_port(const gw_profile *p, uint16_t port);
/* Whether the profile lets a sandbox reach addr (IPv4, host order), of
 * class cls (gw_addr_classify, or what the gateway was told to treat as
 * public), without a name: in its cidrs (private ones only with
 * allow_private), or any public address for "public". Forbidden addresses
 * never. */
bool gw_profile_allows_addr(const gw_profile *p, uint32_t addr, int cls);
/* Whether a sandbox with this profile may be given the secret named name. */
bool gw_profile_grants_secret(const gw_profile *p, const char *name);
/* Whether its cidrs may hold private addresses. */
bool gw_profile_allows_private(const gw_profile *p);

/* Address classes (IPv4, host order). */
typedef enum gw_addr_class {
        GW_ADDR_PUBLIC,
        GW_ADDR_PRIVATE, /* 10/8, 172.16/12, 192.168/16, 100.64/10 (shared), 198.18/15 (benchmarking),
                            192.0.0/24, 192.0.2/24, 198.51.100/24, 203.0.113/24 (assignments, documentation) */
        GW_ADDR_FORBIDDEN, /* 0/8, 127/8 (loopback), 169.254/16 (link-local, metadata), 224/4 and above
                              (multicast, reserved, broadcast) */
} gw_addr_class;
gw_addr_class gw_addr_classify(uint32_t addr);

#endif
