/* SPDX-License-Identifier: Apache-2.0 */
/* Audit records and metrics (see gw.h). */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "gw.h"
#include "space/log.h"
#include "space/time.h"

static const char *verdict(const gw_decision *d)
{
        return !d->allow ? "refused" : d->would_refuse ? "would-refuse" : "allowed";
}

static void count_rule(gw *g, const char *kind, const gw_decision *d)
{
        if (!d->allow || d->would_refuse) {
                char key[96];
                snprintf(key, sizeof(key), "%s|%s|%s", kind, d->rule, verdict(d));
                json_object *v = NULL;
                int64_t n = json_object_object_get_ex(g->rules, key, &v) ? json_object_get_int64(v) : 0;
                json_object_object_add(g->rules, key, json_object_new_int64(n + 1));
        }
}

/* Refusal records (and their log lines) per sandbox and second: a flood a
 * limit refuses must not become a flood of records in the worker's logs.
 * DNS and TCP have a budget each. Over the budget, the first refusal of a
 * rule not yet recorded in that second is recorded all the same (rules are
 * hashed to 32 bits: at most 32 more a second), so that a flood of one kind
 * of refusal does not hide that another rule fired (a sandbox at its bound
 * of undecided connections while its earlier ones time out).
 * Allowed decisions are bounded by the rate limits already. */
#define REFUSALS_PER_S 50

static uint32_t rule_bit(const char *rule)
{
        uint32_t h = 2166136261u;
        for (const char *p = rule ? rule : ""; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        return 1u << (h % 32);
}

static bool refusal_recorded(gw *g, gw_sandbox *sb, int kind, const char *rule, int64_t now_s, uint32_t *suppressed)
{
        static int64_t window[2];
        static uint32_t n[2], left_out[2], rules[2]; /* records of no sandbox (unknown sources) */
        int64_t *w = sb ? &sb->audit_window[kind] : &window[kind];
        uint32_t *count = sb ? &sb->audit_n[kind] : &n[kind];
        uint32_t *skipped = sb ? &sb->audit_suppressed[kind] : &left_out[kind];
        uint32_t *seen = sb ? &sb->audit_rules[kind] : &rules[kind];
        uint32_t bit = rule_bit(rule);
        if (*w != now_s) {
                *w = now_s;
                *count = 0;
                *seen = 0;
        }
        if (*count >= REFUSALS_PER_S && (*seen & bit)) {
                (*skipped)++;
                g->counters.audit_suppressed++;
                return false;
        }
        (*count)++;
        *seen |= bit;
        *suppressed = *skipped;
        *skipped = 0;
        return true;
}

void gw_audit(gw *g, const gw_audit_rec *r)
{
        bool dns = strcmp(r->kind, "dns") == 0, secret = strcmp(r->kind, "secret") == 0;
        bool closing = r->phase && strcmp(r->phase, "close") == 0;
        if (secret) {
                g->counters.secret_injected += r->d.allow;
                g->counters.secret_refused += !r->d.allow;
                count_rule(g, r->kind, &r->d);
        } else if (!closing) {
                if (dns) {
                        g->counters.dns_queries++;
                        g->counters.dns_allowed += r->d.allow && !r->d.would_refuse;
                        g->counters.dns_refused += !r->d.allow;
                        g->counters.dns_would_refuse += r->d.would_refuse;
                } else {
                        g->counters.tcp_conns++;
                        g->counters.tcp_allowed += r->d.allow && !r->d.would_refuse;
                        g->counters.tcp_refused += !r->d.allow;
                        g->counters.tcp_would_refuse += r->d.would_refuse;
                }
                count_rule(g, r->kind, &r->d);
        }
        uint32_t suppressed = 0;
        if ((!r->d.allow || r->d.would_refuse) &&
            !refusal_recorded(g, (gw_sandbox *)r->sb, dns ? 0 : 1, r->d.rule, sp_now_mono_us() / 1000000, &suppressed))
                return;
        char src[INET_ADDRSTRLEN] = "", dst[INET_ADDRSTRLEN] = "";
        struct in_addr a = {.s_addr = htonl(r->src)};
        inet_ntop(AF_INET, &a, src, sizeof(src));
        if (r->dst) {
                a.s_addr = htonl(r->dst);
                inet_ntop(AF_INET, &a, dst, sizeof(dst));
        }
        json_object *o = json_object_new_object();
        json_object_object_add(o, "op", json_object_new_string("audit"));
        json_object_object_add(o, "time_us", json_object_new_int64(sp_now_real_us()));
        json_object_object_add(o, "kind", json_object_new_string(r->kind));
        if (r->phase)
                json_object_object_add(o, "phase", json_object_new_string(r->phase));
        json_object_object_add(o, "source", json_object_new_string(src));
        if (r->sb) {
                json_object_object_add(o, "sandbox_id", json_object_new_string(r->sb->id));
                json_object_object_add(o, "tenant_id", json_object_new_string(r->sb->tenant));
                json_object_object_add(o, "profile", json_object_new_string(gw_profile_name(r->sb->profile)));
                json_object_object_add(
                        o, "mode",
                        json_object_new_string(gw_profile_mode(r->sb->profile) == GW_MODE_AUDIT ? "audit" : "enforce"));
        }
        if (r->name)
                json_object_object_add(o, "name", json_object_new_string(r->name));
        if (r->proto)
                json_object_object_add(o, "proto", json_object_new_string(r->proto));
        if (r->dst) {
                json_object_object_add(o, "destination", json_object_new_string(dst));
                json_object_object_add(o, "port", json_object_new_int(r->port));
        }
        if (closing) {
                json_object_object_add(o, "bytes_out", json_object_new_int64((int64_t)r->bytes_out));
                json_object_object_add(o, "bytes_in", json_object_new_int64((int64_t)r->bytes_in));
        }
        json_object_object_add(o, "decision", json_object_new_string(verdict(&r->d)));
        json_object_object_add(o, "rule", json_object_new_string(r->d.rule));
        if (r->detail)
                json_object_object_add(o, "detail", json_object_new_string(r->detail));
        if (r->secret_id)
                json_object_object_add(o, "secret_id", json_object_new_string(r->secret_id));
        if (r->secret)
                json_object_object_add(o, "secret", json_object_new_string(r->secret));
        if (suppressed)
                json_object_object_add(o, "suppressed_before", json_object_new_int64(suppressed));
        const char *sid = r->sb ? r->sb->id : "";
        if ((!r->d.allow || r->d.would_refuse) && !closing)
                sp_log_info_kv(
                        SP_KV("sandbox_id", sid, "audit", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)),
                        "%s %s %s:%u %s (%s)", r->kind, r->name ? r->name : "-", r->dst ? dst : "-", (unsigned)r->port,
                        verdict(&r->d), r->d.rule);
        else
                sp_log_debug_kv(
                        SP_KV("sandbox_id", sid, "audit", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)),
                        "%s %s %s:%u %s", r->kind, r->name ? r->name : "-", r->dst ? dst : "-", (unsigned)r->port,
                        verdict(&r->d));
        if (g->ctl)
                gw_ctl_broadcast(g->ctl, o);
        json_object_put(o);
}

void gw_metrics(gw *g, sp_buf *out)
{
        const gw_counters *c = &g->counters;
        sp_buf_appendf(
                out, NULL,
                "# HELP space_gateway_sandboxes Sandboxes the gateway knows.\n"
                "# TYPE space_gateway_sandboxes gauge\nspace_gateway_sandboxes %zu\n"
                "# HELP space_gateway_connections Relayed connections open.\n"
                "# TYPE space_gateway_connections gauge\nspace_gateway_connections %llu\n"
                "# HELP space_gateway_dns_queries_total DNS queries by verdict.\n"
                "# TYPE space_gateway_dns_queries_total counter\n"
                "space_gateway_dns_queries_total{verdict=\"allowed\"} %llu\n"
                "space_gateway_dns_queries_total{verdict=\"refused\"} %llu\n"
                "space_gateway_dns_queries_total{verdict=\"would-refuse\"} %llu\n"
                "# HELP space_gateway_tcp_connections_total TCP connections by verdict.\n"
                "# TYPE space_gateway_tcp_connections_total counter\n"
                "space_gateway_tcp_connections_total{verdict=\"allowed\"} %llu\n"
                "space_gateway_tcp_connections_total{verdict=\"refused\"} %llu\n"
                "space_gateway_tcp_connections_total{verdict=\"would-refuse\"} %llu\n"
                "# HELP space_gateway_upstream_errors_total Upstream DNS and TCP failures.\n"
                "# TYPE space_gateway_upstream_errors_total counter\n"
                "space_gateway_upstream_errors_total{kind=\"dns\"} %llu\n"
                "space_gateway_upstream_errors_total{kind=\"tcp\"} %llu\n"
                "# HELP space_gateway_bytes_total Bytes relayed.\n"
                "# TYPE space_gateway_bytes_total counter\n"
                "space_gateway_bytes_total{direction=\"out\"} %llu\n"
                "space_gateway_bytes_total{direction=\"in\"} %llu\n"
                "# HELP space_gateway_secret_uses_total Secrets injected, and uses refused (expired, over their "
                "rate, misplaced placeholders: by rule in space_gateway_refusals_total{kind=\"secret\"}).\n"
                "# TYPE space_gateway_secret_uses_total counter\n"
                "space_gateway_secret_uses_total{verdict=\"injected\"} %llu\n"
                "space_gateway_secret_uses_total{verdict=\"refused\"} %llu\n"
                "# HELP space_gateway_unknown_sources_total Traffic from addresses of no known sandbox.\n"
                "# TYPE space_gateway_unknown_sources_total counter\nspace_gateway_unknown_sources_total %llu\n"
                "# HELP space_gateway_audit_suppressed_total Refusal records left out: over %d per sandbox "
                "and second (counted in the other metrics all the same).\n"
                "# TYPE space_gateway_audit_suppressed_total counter\nspace_gateway_audit_suppressed_total %llu\n"
                "# HELP space_gateway_audit_dropped_total Audit records a slow worker did not take.\n"
                "# TYPE space_gateway_audit_dropped_total counter\nspace_gateway_audit_dropped_total %llu\n",
                gw_table_count(g->table), (unsigned long long)c->open_conns, (unsigned long long)c->dns_allowed,
                (unsigned long long)c->dns_refused, (unsigned long long)c->dns_would_refuse,
                (unsigned long long)c->tcp_allowed, (unsigned long long)c->tcp_refused,
                (unsigned long long)c->tcp_would_refuse, (unsigned long long)c->dns_upstream_errors,
                (unsigned long long)c->tcp_upstream_errors, (unsigned long long)c->bytes_out,
                (unsigned long long)c->bytes_in, (unsigned long long)c->secret_injected,
                (unsigned long long)c->secret_refused, (unsigned long long)c->unknown_source, REFUSALS_PER_S,
                (unsigned long long)c->audit_suppressed, (unsigned long long)c->audit_dropped);
        sp_buf_appendf(out, NULL,
                       "# HELP space_gateway_refusals_total Refusals (and audit-mode would-refusals) by rule.\n"
                       "# TYPE space_gateway_refusals_total counter\n");
        json_object_object_foreach (g->rules, key, val) {
                char kind[16], rule[48], v[16];
                if (sscanf(key, "%15[^|]|%47[^|]|%15s", kind, rule, v) == 3)
                        sp_buf_appendf(out, NULL,
                                       "space_gateway_refusals_total{kind=\"%s\",rule=\"%s\",verdict=\"%s\"} %lld\n",
                                       kind, rule, v, (long long)json_object_get_int64(val));
        }
}
