/* SPDX-License-Identifier: Apache-2.0 */
/* /healthz, /readyz, /metrics and /v1/openapi.json. */
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/openapi_doc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

extern const double cp__latency_bounds[CP_LATENCY_BUCKETS];

void cp__h_healthz(cp_call *c)
{
        static const char ok[] = "{\"status\":\"ok\"}";
        cp__reply_raw(c, 200, "application/json", ok, strlen(ok));
}

void cp__h_readyz(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (cp_db_exec(c->api->db, "SELECT 1", 0, NULL, NULL, &e) < 0) {
                cp__failf(c, SP_E_UNAVAILABLE, "database unavailable");
                return;
        }
        static const char ok[] = "{\"status\":\"ok\",\"checks\":{\"database\":\"ok\"}}";
        cp__reply_raw(c, 200, "application/json", ok, strlen(ok));
}

void cp__h_openapi(cp_call *c)
{
        cp__reply_raw(c, 200, "application/json", cp_openapi_json, cp_openapi_json_len);
}

/* Appends one gauge per row of a (label, value) query. */
static void gauge_rows(cp_api *api, sp_buf *b, const char *name, const char *help, const char *label, const char *sql)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        sp_buf_appendf(b, NULL, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
        if (cp_db_exec(api->db, sql, 0, NULL, &res, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(res); i++)
                sp_buf_appendf(b, NULL, "%s{%s=\"%s\"} %s\n", name, label, PQgetvalue(res, i, 0),
                               PQgetvalue(res, i, 1));
}

void cp__h_metrics(cp_call *c)
{
        cp_api *api = c->api;
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_buf_appendf(&b, NULL,
                       "# HELP space_api_requests_total API requests answered, by route and status class.\n"
                       "# TYPE space_api_requests_total counter\n");
        for (size_t i = 0; cp_api_routes[i].method; i++)
                for (int k = 1; k <= 5; k++)
                        if (api->stats[i].count[k])
                                sp_buf_appendf(&b, NULL,
                                               "space_api_requests_total{method=\"%s\",route=\"%s\",code=\"%dxx\"} "
                                               "%llu\n",
                                               cp_api_routes[i].method, cp_api_routes[i].pattern, k,
                                               (unsigned long long)api->stats[i].count[k]);
        sp_buf_appendf(&b, NULL,
                       "# HELP space_api_request_duration_seconds Time to answer, by route.\n"
                       "# TYPE space_api_request_duration_seconds histogram\n");
        for (size_t i = 0; cp_api_routes[i].method; i++) {
                const cp_route_stats *st = &api->stats[i];
                if (!st->total)
                        continue;
                for (int k = 0; k < CP_LATENCY_BUCKETS; k++)
                        sp_buf_appendf(&b, NULL,
                                       "space_api_request_duration_seconds_bucket{method=\"%s\",route=\"%s\","
                                       "le=\"%g\"} %llu\n",
                                       cp_api_routes[i].method, cp_api_routes[i].pattern, cp__latency_bounds[k],
                                       (unsigned long long)st->buckets[k]);
                sp_buf_appendf(&b, NULL,
                               "space_api_request_duration_seconds_bucket{method=\"%s\",route=\"%s\",le=\"+Inf\"} "
                               "%llu\n"
                               "space_api_request_duration_seconds_sum{method=\"%s\",route=\"%s\"} %.6f\n"
                               "space_api_request_duration_seconds_count{method=\"%s\",route=\"%s\"} %llu\n",
                               cp_api_routes[i].method, cp_api_routes[i].pattern, (unsigned long long)st->total,
                               cp_api_routes[i].method, cp_api_routes[i].pattern, st->sum_s, cp_api_routes[i].method,
                               cp_api_routes[i].pattern, (unsigned long long)st->total);
        }
        sp_buf_appendf(&b, NULL,
                       "# HELP space_api_unavailable_total Requests answered 503 (database down).\n"
                       "# TYPE space_api_unavailable_total counter\nspace_api_unavailable_total %llu\n",
                       (unsigned long long)api->unavailable_total);
        sp_buf_appendf(&b, NULL,
                       "# HELP space_api_waiters Long-polls held now (GET /v1/operations/{id}?wait=).\n"
                       "# TYPE space_api_waiters gauge\nspace_api_waiters %zu\n"
                       "# HELP space_api_waiter_tenants_full Tenants holding their whole share of long-polls now.\n"
                       "# TYPE space_api_waiter_tenants_full gauge\nspace_api_waiter_tenants_full %zu\n",
                       sp_shares_used(api->waiter_shares), sp_shares_keys_full(api->waiter_shares));
        cp__worker_metrics(api, &b);
        cp__create_fast_metrics(api, &b);
        cp__quota_metrics(api, &b);
        cp__audit_metrics(api, &b);
        sp_buf_appendf(&b, NULL,
                       "# HELP space_controlplane_leader 1 while this replica holds the leader lock and runs the "
                       "controllers.\n# TYPE space_controlplane_leader gauge\nspace_controlplane_leader %d\n",
                       api->cfg.is_leader && api->cfg.is_leader(api->cfg.leader_arg) ? 1 : 0);
        if (api->cfg.ctrl_metrics)
                api->cfg.ctrl_metrics(api->cfg.leader_arg, &b);
        gauge_rows(api, &b, "space_sandboxes", "Sandboxes by observed state.", "state",
                   "SELECT observed_state, count(*) FROM sandboxes WHERE deleted_at IS NULL GROUP BY 1 ORDER BY 1");
        gauge_rows(api, &b, "space_operations", "Operations by state.", "state",
                   "SELECT state, count(*) FROM operations GROUP BY 1 ORDER BY 1");
        gauge_rows(api, &b, "space_operations_unplaced", "Operations waiting because no worker can place them.", "kind",
                   "SELECT kind, count(*) FROM operations WHERE state = 'pending' AND (message LIKE 'cannot place%' "
                   "OR message LIKE 'cannot move%') GROUP BY 1 ORDER BY 1");
        gauge_rows(api, &b, "space_operation_seconds_avg",
                   "Mean duration of operations finished in the last hour, by kind.", "kind",
                   "SELECT kind, round(avg(extract(epoch FROM updated_at - created_at))::numeric, 6) FROM operations "
                   "WHERE state IN ('succeeded', 'failed') AND updated_at > now() - interval '1 hour' "
                   "GROUP BY 1 ORDER BY 1");
        gauge_rows(api, &b, "space_workers", "Workers by state.", "state",
                   "SELECT CASE WHEN state <> 'ready' THEN state WHEN admin_state = 'active' THEN 'ready' "
                   "ELSE admin_state END, count(*) FROM workers GROUP BY 1 ORDER BY 1");
        cp__reply_raw(c, 200, "text/plain; version=0.0.4", b.data ? b.data : "", b.len);
}
