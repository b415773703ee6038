/* SPDX-License-Identifier: Apache-2.0 */
/* The gateway's sandboxes and its decisions (see table.h). */
#include "policy/table.h"

#include "tls/tls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Few sandboxes per node (hundreds): a sorted array searched by address. */
struct gw_table {
        gw_limits limits;
        gw_sandbox **v;
        size_t n, cap;
};

gw_table *gw_table_new(const gw_limits *limits)
{
        gw_table *t = calloc(1, sizeof(*t));
        if (t)
                t->limits = *limits;
        return t;
}

static void sandbox_free(gw_sandbox *sb)
{
        gw_profile_unref(sb->profile);
        free(sb->pins);
        gw_secrets_unref(sb->secrets);
        gw_sb_ca_free(sb->ca);
        free(sb);
}

void gw_table_clear(gw_table *t)
{
        for (size_t i = 0; i < t->n; i++)
                sandbox_free(t->v[i]);
        t->n = 0;
}

void gw_table_free(gw_table *t)
{
        if (!t)
                return;
        gw_table_clear(t);
        free(t->v);
        free(t);
}

const gw_limits *gw_table_limits(const gw_table *t)
{
        return &t->limits;
}

/* The index of addr, or where it would go. */
static size_t lower_bound(const gw_table *t, uint32_t addr)
{
        size_t lo = 0, hi = t->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (t->v[mid]->addr < addr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

gw_sandbox *gw_table_find(gw_table *t, uint32_t addr)
{
        size_t i = lower_bound(t, addr);
        return i < t->n && t->v[i]->addr == addr ? t->v[i] : NULL;
}

gw_sandbox *gw_table_set(gw_table *t, uint32_t addr, const char *id, const char *tenant, gw_profile *profile)
{
        gw_sandbox *sb = gw_table_find(t, addr);
        if (!sb) {
                if (t->n == t->cap) {
                        size_t cap = t->cap ? t->cap * 2 : 64;
                        gw_sandbox **v = realloc(t->v, cap * sizeof(*v));
                        if (!v)
                                return NULL;
                        t->v = v;
                        t->cap = cap;
                }
                sb = calloc(1, sizeof(*sb));
                if (!sb)
                        return NULL;
                sb->addr = addr;
                size_t i = lower_bound(t, addr);
                memmove(&t->v[i + 1], &t->v[i], (t->n - i) * sizeof(*t->v));
                t->v[i] = sb;
                t->n++;
        }
        sb->stale = false;
        snprintf(sb->id, sizeof(sb->id), "%s", id ? id : "");
        snprintf(sb->tenant, sizeof(sb->tenant), "%s", tenant ? tenant : "");
        gw_profile *old = sb->profile;
        sb->profile = gw_profile_ref(profile);
        gw_profile_unref(old);
        return sb;
}

bool gw_table_del(gw_table *t, uint32_t addr)
{
        size_t i = lower_bound(t, addr);
        if (i >= t->n || t->v[i]->addr != addr)
                return false;
        sandbox_free(t->v[i]);
        memmove(&t->v[i], &t->v[i + 1], (t->n - i - 1) * sizeof(*t->v));
        t->n--;
        return true;
}

size_t gw_table_count(const gw_table *t)
{
        return t->n;
}

void gw_table_each(gw_table *t, void (*fn)(gw_sandbox *sb, void *ud), void *ud)
{
        for (size_t i = 0; i < t->n; i++)
                fn(t->v[i], ud);
}

void gw_table_sweep(gw_table *t, void (*fn)(gw_sandbox *sb, void *ud), void *ud)
{
        size_t keep = 0;
        for (size_t i = 0; i < t->n; i++) {
                if (t->v[i]->stale) {
                        if (fn)
                                fn(t->v[i], ud);
                        sandbox_free(t->v[i]);
                } else {
                        t->v[keep++] = t->v[i];
                }
        }
        t->n = keep;
}

/* ---- pins ---- */

void gw_pin_add(gw_table *t, gw_sandbox *sb, const char *name, uint32_t addr, uint32_t ttl, int64_t now_us)
{
        if (ttl < t->limits.min_ttl)
                ttl = t->limits.min_ttl;
        if (ttl > t->limits.max_ttl)
                ttl = t->limits.max_ttl;
        int64_t expires = now_us + (int64_t)ttl * 1000000;
        /* Renew a pin of the same pair; else drop the expired, then (at the
         * bound) the one that ends first. */
        size_t keep = 0;
        for (size_t i = 0; i < sb->npins; i++) {
                gw_pin *p = &sb->pins[i];
                if (p->addr == addr && strcmp(p->name, name) == 0) {
                        if (p->expires_us < expires)
                                p->expires_us = expires;
                        return;
                }
        }
        for (size_t i = 0; i < sb->npins; i++)
                if (sb->pins[i].expires_us > now_us)
                        sb->pins[keep++] = sb->pins[i];
        sb->npins = keep;
        if (t->limits.max_pins == 0)
                return;
        if (sb->npins >= t->limits.max_pins) {
                size_t first = 0;
                for (size_t i = 1; i < sb->npins; i++)
                        if (sb->pins[i].expires_us < sb->pins[first].expires_us)
                                first = i;
                sb->pins[first] = sb->pins[--sb->npins];
        }
        if (sb->npins == sb->cap_pins) {
                size_t cap = sb->cap_pins ? sb->cap_pins * 2 : 16;
                gw_pin *v = realloc(sb->pins, cap * sizeof(*v));
                if (!v)
                        return; /* not pinned: the connection will be refused, never wrongly allowed */
                sb->pins = v;
                sb->cap_pins = cap;
        }
        gw_pin *p = &sb->pins[sb->npins++];
        snprintf(p->name, sizeof(p->name), "%s", name);
        p->addr = addr;
        p->expires_us = expires;
}

bool gw_pin_has(const gw_sandbox *sb, const char *name, uint32_t addr, int64_t now_us)
{
        for (size_t i = 0; i < sb->npins; i++) {
                const gw_pin *p = &sb->pins[i];
                if (p->addr == addr && p->expires_us > now_us && strcmp(p->name, name) == 0)
                        return true;
        }
        return false;
}

/* ---- decisions ---- */

static bool bucket_take(gw_bucket *b, uint32_t rate, uint32_t burst, int64_t now_us)
{
        if (rate == 0)
                return true;
        if (b->at_us == 0) {
                b->tokens = burst;
                b->at_us = now_us;
        }
        double add = (double)(now_us - b->at_us) * rate / 1e6;
        if (add > 0) {
                b->tokens = b->tokens + add > burst ? burst : b->tokens + add;
                b->at_us = now_us;
        }
        if (b->tokens < 1)
                return false;
        b->tokens -= 1;
        return true;
}

static gw_decision allowed(void)
{
        return (gw_decision){.allow = true, .rule = "allowed"};
}

/* A platform boundary: refused in every mode. */
static gw_decision hard(const char *rule)
{
        return (gw_decision){.allow = false, .rule = rule};
}

/* A profile rule or a limit: refused in enforce, "would refuse" in audit. */
gw_decision gw_decision_soft(const gw_sandbox *sb, const char *rule)
{
        bool audit = gw_profile_mode(sb->profile) == GW_MODE_AUDIT;
        return (gw_decision){.allow = audit, .would_refuse = audit, .rule = rule};
}

gw_decision gw_decide_dns(gw_table *t, gw_sandbox *sb, const char *name, size_t len, int64_t now_us)
{
        if (!bucket_take(&sb->dns_hard, 4 * t->limits.dns_rate, 4 * t->limits.dns_burst, now_us))
                return hard("dns-rate");
        if (!bucket_take(&sb->dns_bucket, t->limits.dns_rate, t->limits.dns_burst, now_us))
                return gw_decision_soft(sb, "dns-rate");
        if (t->limits.dns_name_max && len > t->limits.dns_name_max)
                return gw_decision_soft(sb, "dns-name-length");
        if (!gw_profile_allows_name(sb->profile, name))
                return gw_decision_soft(sb, "name");
        return allowed();
}

/* The platform's own refusal of a destination, in every mode, or NULL. */
static const char *platform_refusal(const gw_sandbox *sb, int dst_class)
{
        if (dst_class == GW_ADDR_FORBIDDEN)
                return "forbidden-address";
        /* Private networks are an admin's to open (allow_private): audit mode
         * does not open them. */
        if (dst_class == GW_ADDR_PRIVATE && !gw_profile_allows_private(sb->profile))
                return "private-address";
        return NULL;
}

gw_decision gw_decide_tcp_profile(const gw_sandbox *sb, uint32_t dst, uint16_t port, int dst_class, const char *name,
                                  int64_t now_us)
{
        const char *refusal = platform_refusal(sb, dst_class);
        if (refusal)
                return hard(refusal);
        if (!gw_profile_allows_port(sb->profile, port))
                return gw_decision_soft(sb, "port");
        if (name && *name) {
                if ((gw_pin_has(sb, name, dst, now_us) && gw_profile_allows_name(sb->profile, name)) ||
                    gw_profile_allows_addr(sb->profile, dst, dst_class))
                        return allowed();
                return gw_decision_soft(sb, gw_profile_allows_name(sb->profile, name) ? "not-resolved" : "name");
        }
        return gw_profile_allows_addr(sb->profile, dst, dst_class) ? allowed() : gw_decision_soft(sb, "address");
}

gw_decision gw_decide_tcp(gw_table *t, gw_sandbox *sb, uint32_t dst, uint16_t port, int dst_class, const char *name,
                          int64_t now_us)
{
        const char *refusal = platform_refusal(sb, dst_class);
        if (refusal)
                return hard(refusal);
        if (t->limits.max_conns && sb->conns >= 4 * t->limits.max_conns)
                return hard("conn-limit");
        if (!bucket_take(&sb->conn_hard, 4 * t->limits.conn_rate, 4 * t->limits.conn_burst, now_us))
                return hard("conn-rate");
        gw_decision d;
        if (t->limits.max_conns && sb->conns >= t->limits.max_conns)
                d = gw_decision_soft(sb, "conn-limit");
        else if (!bucket_take(&sb->conn_bucket, t->limits.conn_rate, t->limits.conn_burst, now_us))
                d = gw_decision_soft(sb, "conn-rate");
        else
                d = gw_decide_tcp_profile(sb, dst, port, dst_class, name, now_us);
        if (d.allow)
                sb->conns++;
        return d;
}

void gw_conn_done(gw_sandbox *sb)
{
        if (sb->conns > 0)
                sb->conns--;
}

bool gw_answer_pinnable(const gw_sandbox *sb, int addr_class)
{
        return addr_class == GW_ADDR_PUBLIC ||
               (addr_class == GW_ADDR_PRIVATE && gw_profile_allows_private(sb->profile));
}
