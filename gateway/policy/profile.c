/* SPDX-License-Identifier: Apache-2.0 */
/* Egress profiles (see profile.h). */
#include "policy/profile.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"
#include "wire/name.h"
#include "wire/pattern.h"

typedef struct cidr {
        uint32_t net, mask;
} cidr;

struct gw_profile {
        atomic_int refs; /* < 0: static (built in) */
        char name[GW_PROFILE_NAME_MAX + 1];
        gw_mode mode;
        bool any_name, public_addrs, allow_private;
        size_t ndomains;
        char (*domains)[GW_NAME_MAX + 1];
        size_t nports;
        uint16_t ports[GW_PROFILE_PORTS_MAX];
        size_t ncidrs;
        cidr *cidrs;
        size_t nsecrets;
        char (*secrets)[GW_PROFILE_NAME_MAX + 1]; /* the tenant's secrets it grants, by name */
};

static gw_profile none_profile = {.refs = -1, .name = "none", .mode = GW_MODE_ENFORCE};
static gw_profile public_profile = {.refs = -1,
                                    .name = "public",
                                    .mode = GW_MODE_ENFORCE,
                                    .any_name = true,
                                    .public_addrs = true,
                                    .nports = 2,
                                    .ports = {80, 443}};

gw_profile *gw_profile_builtin(const char *name)
{
        if (name && strcmp(name, "none") == 0)
                return &none_profile;
        if (name && strcmp(name, "public") == 0)
                return &public_profile;
        return NULL;
}

bool gw_profile_is_builtin_name(const char *name)
{
        return gw_profile_builtin(name) != NULL;
}

gw_profile *gw_profile_ref(gw_profile *p)
{
        if (p && atomic_load(&p->refs) >= 0)
                atomic_fetch_add(&p->refs, 1);
        return p;
}

void gw_profile_unref(gw_profile *p)
{
        if (!p || atomic_load(&p->refs) < 0)
                return;
        if (atomic_fetch_sub(&p->refs, 1) != 1)
                return;
        free(p->domains);
        free(p->cidrs);
        free(p->secrets);
        free(p);
}

/* ---- addresses ---- */

static bool in(uint32_t a, uint32_t net, int len)
{
        uint32_t mask = len == 0 ? 0 : ~UINT32_C(0) << (32 - len);
        return (a & mask) == net;
}

gw_addr_class gw_addr_classify(uint32_t a)
{
        if (in(a, 0x00000000, 8) || in(a, 0x7f000000, 8) || in(a, 0xa9fe0000, 16) || in(a, 0xe0000000, 3))
                return GW_ADDR_FORBIDDEN;
        if (in(a, 0x0a000000, 8) || in(a, 0xac100000, 12) || in(a, 0xc0a80000, 16) || in(a, 0x64400000, 10) ||
            in(a, 0xc6120000, 15) || in(a, 0xc0000000, 24) || in(a, 0xc0000200, 24) || in(a, 0xc6336400, 24) ||
            in(a, 0xcb007100, 24))
                return GW_ADDR_PRIVATE;
        return GW_ADDR_PUBLIC;
}

/* "A.B.C.D/N" with no host bits set. */
static int cidr_parse(const char *s, cidr *ret, const char **reason)
{
        char addr[INET_ADDRSTRLEN];
        const char *slash = strchr(s, '/');
        *reason = "must be A.B.C.D/N";
        if (!slash || (size_t)(slash - s) >= sizeof(addr) || !slash[1] || strlen(slash + 1) > 2)
                return -1;
        memcpy(addr, s, (size_t)(slash - s));
        addr[slash - s] = '\0';
        struct in_addr ia;
        int n = 0;
        for (const char *p = slash + 1; *p; p++) {
                if (*p < '0' || *p > '9')
                        return -1;
                n = n * 10 + (*p - '0');
        }
        if (inet_pton(AF_INET, addr, &ia) != 1 || n > 32)
                return -1;
        uint32_t a = ntohl(ia.s_addr), mask = n == 0 ? 0 : ~UINT32_C(0) << (32 - n);
        if (a & ~mask) {
                *reason = "has host bits set";
                return -1;
        }
        ret->net = a;
        ret->mask = mask;
        return 0;
}

/* The class of a whole range: its worst address's. */
static gw_addr_class cidr_class(const cidr *c)
{
        gw_addr_class worst = GW_ADDR_PUBLIC;
        /* The special ranges are all /3 or longer: look at the range's ends and at
         * every special range's start that falls inside it. */
        static const uint32_t starts[] = {0x00000000, 0x7f000000, 0xa9fe0000, 0xe0000000, 0x0a000000,
                                          0xac100000, 0xc0a80000, 0x64400000, 0xc6120000, 0xc0000000,
                                          0xc0000200, 0xc6336400, 0xcb007100};
        uint32_t last = c->net | ~c->mask;
        gw_addr_class k = gw_addr_classify(c->net);
        worst = k > worst ? k : worst;
        k = gw_addr_classify(last);
        worst = k > worst ? k : worst;
        for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++)
                if ((starts[i] & c->mask) == c->net) {
                        k = gw_addr_classify(starts[i]);
                        worst = k > worst ? k : worst;
                }
        return worst;
}

/* ---- parsing ---- */

static int port_cmp(const void *a, const void *b)
{
        return (int)*(const uint16_t *)a - (int)*(const uint16_t *)b;
}

static int name_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > GW_PROFILE_NAME_MAX)
                return 0;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_'))
                        return 0;
        return s[0] >= 'a' && s[0] <= 'z';
}

int gw_profile_parse(json_object *o, const char *default_name, bool may_allow_private, gw_profile **ret, sp_error **err)
{
        static const char *const fields[] = {"name",  "mode",          "domains", "ports",
                                             "cidrs", "allow_private", "secrets", NULL};
        if (!json_object_is_type(o, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "an egress profile must be a JSON object");
        if (sp_json_check_fields(o, fields, err) < 0)
                return -SP_E_INVALID;
        const char *name = NULL, *mode = NULL;
        json_object *domains = NULL, *ports = NULL, *cidrs = NULL, *secrets = NULL;
        bool allow_private = false;
        if (sp_json_get_string(o, "name", !default_name, GW_PROFILE_NAME_MAX, &name, err) < 0 ||
            sp_json_get_string(o, "mode", false, 16, &mode, err) < 0 ||
            sp_json_get_array(o, "domains", false, GW_PROFILE_DOMAINS_MAX, &domains, err) < 0 ||
            sp_json_get_array(o, "ports", false, GW_PROFILE_PORTS_MAX, &ports, err) < 0 ||
            sp_json_get_array(o, "cidrs", false, GW_PROFILE_CIDRS_MAX, &cidrs, err) < 0 ||
            sp_json_get_array(o, "secrets", false, GW_PROFILE_SECRETS_MAX, &secrets, err) < 0 ||
            sp_json_get_bool(o, "allow_private", false, &allow_private, err) < 0)
                return -SP_E_INVALID;
        if (!name)
                name = default_name;
        if (!name_ok(name))
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'name' must be 1 to %d of a-z, 0-9, '-' and '_', starting with a letter",
                                    GW_PROFILE_NAME_MAX);
        if (gw_profile_is_builtin_name(name))
                return sp_error_set(err, SP_E_INVALID, "field 'name': '%s' is a built-in profile", name);
        gw_mode m = GW_MODE_ENFORCE;
        if (mode && strcmp(mode, "audit") == 0)
                m = GW_MODE_AUDIT;
        else if (mode && strcmp(mode, "enforce") != 0)
                return sp_error_set(err, SP_E_INVALID, "field 'mode' must be \"enforce\" or \"audit\"");
        if (allow_private && !may_allow_private)
                return sp_error_set(err, SP_E_PERMISSION,
                                    "field 'allow_private': only an admin may allow private "
                                    "addresses");

        size_t nd = domains ? json_object_array_length(domains) : 0, nc = cidrs ? json_object_array_length(cidrs) : 0,
               ns = secrets ? json_object_array_length(secrets) : 0;
        gw_profile *p = calloc(1, sizeof(*p));
        if (!p)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        atomic_init(&p->refs, 1);
        snprintf(p->name, sizeof(p->name), "%s", name);
        p->mode = m;
        p->allow_private = allow_private;
        p->domains = nd ? calloc(nd, sizeof(*p->domains)) : NULL;
        p->cidrs = nc ? calloc(nc, sizeof(*p->cidrs)) : NULL;
        p->secrets = ns ? calloc(ns, sizeof(*p->secrets)) : NULL;
        if ((nd && !p->domains) || (nc && !p->cidrs) || (ns && !p->secrets)) {
                gw_profile_unref(p);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        for (size_t i = 0; i < nd; i++) {
                json_object *v = json_object_array_get_idx(domains, i);
                const char *reason = "must be a string";
                if (!json_object_is_type(v, json_type_string) ||
                    gw_pattern_normalize(json_object_get_string(v), (size_t)json_object_get_string_len(v),
                                         p->domains[p->ndomains], &reason) < 0) {
                        gw_profile_unref(p);
                        return sp_error_set(err, SP_E_INVALID, "field 'domains[%zu]' %s", i, reason);
                }
                bool dup = false;
                for (size_t j = 0; j < p->ndomains && !dup; j++)
                        dup = strcmp(p->domains[j], p->domains[p->ndomains]) == 0;
                if (!dup)
                        p->ndomains++;
        }
        if (!ports) {
                p->nports = 2;
                p->ports[0] = 80;
                p->ports[1] = 443;
        }
        for (size_t i = 0; ports && i < json_object_array_length(ports); i++) {
                json_object *v = json_object_array_get_idx(ports, i);
                errno = 0;
                int64_t port = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
                if (port < 1 || port > 65535) {
                        gw_profile_unref(p);
                        return sp_error_set(err, SP_E_INVALID, "field 'ports[%zu]' must be an integer from 1 to 65535",
                                            i);
                }
                bool dup = false;
                for (size_t j = 0; j < p->nports && !dup; j++)
                        dup = p->ports[j] == port;
                if (!dup)
                        p->ports[p->nports++] = (uint16_t)port;
        }
        qsort(p->ports, p->nports, sizeof(p->ports[0]), port_cmp);
        for (size_t i = 0; i < nc; i++) {
                json_object *v = json_object_array_get_idx(cidrs, i);
                const char *reason = "must be a string";
                cidr c;
                if (!json_object_is_type(v, json_type_string) ||
                    cidr_parse(json_object_get_string(v), &c, &reason) < 0) {
                        gw_profile_unref(p);
                        return sp_error_set(err, SP_E_INVALID, "field 'cidrs[%zu]' %s", i, reason);
                }
                gw_addr_class k = cidr_class(&c);
                if (k == GW_ADDR_FORBIDDEN || (k == GW_ADDR_PRIVATE && !allow_private)) {
                        gw_profile_unref(p);
                        return sp_error_set(err, k == GW_ADDR_FORBIDDEN ? SP_E_INVALID : SP_E_PERMISSION,
                                            "field 'cidrs[%zu]' %s", i,
                                            k == GW_ADDR_FORBIDDEN
                                                    ? "reaches loopback, link-local, multicast or reserved addresses, "
                                                      "which no profile may"
                                                    : "holds private addresses: only with allow_private, which only "
                                                      "an admin may set");
                }
                p->cidrs[p->ncidrs++] = c;
        }
        for (size_t i = 0; i < ns; i++) {
                json_object *v = json_object_array_get_idx(secrets, i);
                if (!json_object_is_type(v, json_type_string) || !name_ok(json_object_get_string(v))) {
                        gw_profile_unref(p);
                        return sp_error_set(err, SP_E_INVALID,
                                            "field 'secrets[%zu]' must be a secret's name (1 to %d of a-z, 0-9, '-' "
                                            "and '_', starting with a letter)",
                                            i, GW_PROFILE_NAME_MAX);
                }
                if (!gw_profile_grants_secret(p, json_object_get_string(v)))
                        snprintf(p->secrets[p->nsecrets++], sizeof(p->secrets[0]), "%s", json_object_get_string(v));
        }
        *ret = p;
        return 0;
}

int gw_profile_resolve(json_object *o, bool may_allow_private, gw_profile **ret, sp_error **err)
{
        json_object *n = NULL;
        if (json_object_is_type(o, json_type_object) && json_object_object_length(o) == 1 &&
            json_object_object_get_ex(o, "name", &n) && json_object_is_type(n, json_type_string) &&
            gw_profile_builtin(json_object_get_string(n))) {
                *ret = gw_profile_builtin(json_object_get_string(n));
                return 0;
        }
        return gw_profile_parse(o, NULL, may_allow_private, ret, err);
}

json_object *gw_profile_to_json(const gw_profile *p)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(p->name));
        json_object_object_add(o, "mode", json_object_new_string(p->mode == GW_MODE_AUDIT ? "audit" : "enforce"));
        json_object *d = json_object_new_array();
        if (p->any_name)
                json_object_array_add(d, json_object_new_string("*"));
        for (size_t i = 0; i < p->ndomains; i++)
                json_object_array_add(d, json_object_new_string(p->domains[i]));
        json_object_object_add(o, "domains", d);
        json_object *ports = json_object_new_array();
        for (size_t i = 0; i < p->nports; i++)
                json_object_array_add(ports, json_object_new_int(p->ports[i]));
        json_object_object_add(o, "ports", ports);
        json_object *c = json_object_new_array();
        if (p->public_addrs)
                json_object_array_add(c, json_object_new_string("public"));
        for (size_t i = 0; i < p->ncidrs; i++) {
                char a[INET_ADDRSTRLEN], s[INET_ADDRSTRLEN + 4];
                struct in_addr ia = {.s_addr = htonl(p->cidrs[i].net)};
                inet_ntop(AF_INET, &ia, a, sizeof(a));
                int len = __builtin_popcount(p->cidrs[i].mask);
                snprintf(s, sizeof(s), "%s/%d", a, len);
                json_object_array_add(c, json_object_new_string(s));
        }
        json_object_object_add(o, "cidrs", c);
        json_object_object_add(o, "allow_private", json_object_new_boolean(p->allow_private));
        json_object *sec = json_object_new_array();
        for (size_t i = 0; i < p->nsecrets; i++)
                json_object_array_add(sec, json_object_new_string(p->secrets[i]));
        json_object_object_add(o, "secrets", sec);
        return o;
}

const char *gw_profile_name(const gw_profile *p)
{
        return p->name;
}

gw_mode gw_profile_mode(const gw_profile *p)
{
        return p->mode;
}

bool gw_profile_allows_name(const gw_profile *p, const char *name)
{
        if (!name || !*name)
                return false;
        if (p->any_name)
                return true;
        for (size_t i = 0; i < p->ndomains; i++)
                if (gw_pattern_match(p->domains[i], name))
                        return true;
        return false;
}

bool gw_profile_allows_port(const gw_profile *p, uint16_t port)
{
        for (size_t i = 0; i < p->nports; i++)
                if (p->ports[i] == port)
                        return true;
        return false;
}

bool gw_profile_allows_addr(const gw_profile *p, uint32_t addr, int cls)
{
        if (cls == GW_ADDR_FORBIDDEN)
                return false;
        if (cls == GW_ADDR_PUBLIC && p->public_addrs)
                return true;
        if (cls == GW_ADDR_PRIVATE && !p->allow_private)
                return false;
        for (size_t i = 0; i < p->ncidrs; i++)
                if ((addr & p->cidrs[i].mask) == p->cidrs[i].net)
                        return true;
        return false;
}

bool gw_profile_allows_private(const gw_profile *p)
{
        return p->allow_private;
}

bool gw_profile_grants_secret(const gw_profile *p, const char *name)
{
        for (size_t i = 0; name && i < p->nsecrets; i++)
                if (strcmp(p->secrets[i], name) == 0)
                        return true;
        return false;
}
