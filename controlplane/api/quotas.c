/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenant quotas: GET /v1/tenants/{id}/usage, PUT /v1/tenants/{id}/quotas,
 * and the check the routes that add to a tenant's use run inside their
 * transaction (store/quotas.h). Nothing is cached: every check and every
 * answer counts from the records, so a quota set on one replica applies to
 * the next request on any.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"

int cp__quota_lock(cp_call *c, const char *tenant, sp_error **err)
{
        return cp_quota_lock(c->api->db, tenant, err);
}

int cp__quota_check(cp_call *c, const char *tenant, const char *delta, sp_error **err)
{
        int quota = -1;
        int r = cp_quota_check(c->api->db, tenant, c->api->quota_defaults, delta, &quota, err);
        if (r < 0 && quota >= 0)
                c->api->quota_refusals_total[quota]++;
        return r;
}

int cp__quota_admit(cp_call *c, const char *tenant, const char *delta, sp_error **err)
{
        int r = cp__quota_lock(c, tenant, err);
        return r < 0 ? r : cp__quota_check(c, tenant, delta, err);
}

int cp__quota_limit(cp_call *c, const char *tenant, int quota, int64_t *ret, sp_error **err)
{
        const char *p[] = {tenant, c->api->quota_defaults, cp_quota_names[quota]};
        _cleanup_pgresult_ PGresult *res = NULL;
        int r = cp_db_exec(c->api->db, "SELECT (tenant_limits($1, $2::jsonb)->>$3)::bigint", 3, p, &res, err);
        if (r < 0)
                return r;
        *ret = PQgetisnull(res, 0, 0) ? CP_QUOTA_NONE : strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        return 0;
}

/* {"tenant_id", "name", "quotas": {<quota>: {"limit" (null: none), "used",
 * "source": "tenant" | "cluster"}}, "rate_limits"} for tenant id. The use of
 * sessions_per_sandbox is the most sessions one of its running or paused
 * sandboxes has unfinished as recorded (one that ended without anybody
 * asking its worker counts until a GET, a list or a create over the limit
 * asks). */
static int usage(cp_call *c, const char *id, json_object **ret, sp_error **err)
{
        const char *p[] = {id, c->api->quota_defaults};
        char msg[128];
        snprintf(msg, sizeof(msg), "tenant %.64s not found", id);
        int r = cp__query_json(
                c->api,
                "SELECT jsonb_build_object('tenant_id', t.id, 'name', t.name, 'quotas', ("
                "  SELECT jsonb_object_agg(k, jsonb_build_object("
                "    'limit', CASE WHEN (l->>k)::bigint < 0 THEN NULL ELSE (l->>k)::bigint END, "
                "    'used', coalesce((u->>k)::bigint, 0), "
                "    'source', CASE WHEN t.quotas ? k THEN 'tenant' ELSE 'cluster' END)) "
                "  FROM jsonb_object_keys(l) k)) "
                "FROM tenants t, LATERAL tenant_limits(t.id, $2::jsonb) l, "
                "LATERAL (SELECT tenant_usage(t.id) || jsonb_build_object('sessions_per_sandbox', ("
                "  SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM sessions se "
                "  JOIN sandboxes s ON s.id = se.sandbox_id WHERE s.tenant_id = t.id AND s.deleted_at IS NULL "
                "  AND s.desired_state IN ('running', 'paused') AND se.state NOT IN ('exited', 'failed') "
                "  GROUP BY se.sandbox_id) m))) uu(u) "
                "WHERE t.id = $1 AND t.deleted_at IS NULL",
                2, p, msg, ret, err);
        if (r < 0)
                return r;
        /* The rate limits of this replica (each replica keeps its own buckets). */
        const cp_api_config *cfg = &c->api->cfg;
        struct {
                const char *name;
                int64_t rate, burst;
        } rates[] = {{"key_requests", cfg->rate_key_rps, cfg->rate_key_burst},
                     {"tenant_requests", cfg->rate_tenant_rps, cfg->rate_tenant_burst},
                     {"tenant_creates", cfg->rate_create_rps, cfg->rate_create_burst}};
        json_object *rl = json_object_new_object();
        for (size_t i = 0; i < SP_ARRAY_SIZE(rates); i++) {
                json_object *one = NULL;
                if (rates[i].rate > 0) {
                        one = json_object_new_object();
                        json_object_object_add(one, "per_second", json_object_new_int64(rates[i].rate));
                        json_object_object_add(one, "burst", json_object_new_int64(rates[i].burst));
                }
                json_object_object_add(rl, rates[i].name, one);
        }
        json_object_object_add(rl, "scope", json_object_new_string("replica"));
        json_object_object_add(*ret, "rate_limits", rl);
        return 0;
}

void cp__h_tenant_usage(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        if (strcmp(id, "self") == 0)
                id = c->who.tenant_id;
        /* A tenant sees its own; another tenant's id answers like a missing one. */
        if (!c->who.admin && strcmp(id, c->who.tenant_id) != 0) {
                cp__failf(c, SP_E_NOT_FOUND, "tenant %.64s not found", id);
                return;
        }
        if (usage(c, id, &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply(c, 200, out);
}

void cp__h_tenant_quotas(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *patch = json_object_new_object(), *out = NULL;
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        cp_quotas_req q;
        if (cp_req_quotas(c->body, c->body_len, &q, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        for (int i = 0; i < CP_QUOTA_COUNT; i++)
                if (q.set[i])
                        json_object_object_add(patch, cp_quota_names[i],
                                               q.limit[i] == CP_QUOTA_DEFAULT ? NULL
                                                                              : json_object_new_int64(q.limit[i]));
        if (cp__mutation_begin(c))
                return;
        /* null removes the tenant's own limit: the cluster's default applies again. */
        const char *p[] = {id, sp_json_str(patch)};
        if (cp_db_exec(c->api->db,
                       "UPDATE tenants SET quotas = jsonb_strip_nulls(quotas || $2::jsonb) "
                       "WHERE id = $1 AND deleted_at IS NULL RETURNING id",
                       2, p, &res, &e) < 0)
                goto abort;
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, "tenant %.64s not found", id);
                goto abort;
        }
        if (cp__audit(c, "tenant.quotas", id, patch, &e) < 0 || usage(c, id, &out, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 200, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

void cp__quota_metrics(cp_api *api, sp_buf *b)
{
        sp_buf_appendf(b, NULL,
                       "# HELP space_api_quota_refusals_total Requests refused because they would take a tenant "
                       "past a quota, by quota.\n# TYPE space_api_quota_refusals_total counter\n");
        for (int i = 0; i < CP_QUOTA_COUNT; i++)
                sp_buf_appendf(b, NULL, "space_api_quota_refusals_total{quota=\"%s\"} %llu\n", cp_quota_names[i],
                               (unsigned long long)api->quota_refusals_total[i]);
        static const char *const kinds[CP_RATE_KINDS] = {"key", "tenant", "create"};
        sp_buf_appendf(b, NULL,
                       "# HELP space_api_rate_limited_total Requests answered 429 by this replica's rate limits, by "
                       "limit (key: per API key; tenant: per tenant; create: sandbox creates per tenant).\n"
                       "# TYPE space_api_rate_limited_total counter\n");
        for (int i = 0; i < CP_RATE_KINDS; i++)
                sp_buf_appendf(b, NULL, "space_api_rate_limited_total{limit=\"%s\"} %llu\n", kinds[i],
                               (unsigned long long)api->rate_limited_total[i]);
        sp_buf_appendf(b, NULL,
                       "# HELP space_api_rate_buckets Keys, tenants and tenants' creates with a token bucket on this "
                       "replica now.\n# TYPE space_api_rate_buckets gauge\nspace_api_rate_buckets %zu\n",
                       api->rate ? sp_ratelimit_keys(api->rate) : (size_t)0);
}
