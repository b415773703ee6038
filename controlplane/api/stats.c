/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's resource usage: one sample from its worker's SandboxStats,
 * with the limits it runs under. Reads only; no audit record.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

typedef struct stats_ctx {
        char sandbox_id[SP_ID_MAX];
        char worker_id[SP_ID_MAX];
} stats_ctx;

static void on_stats(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        _cleanup_free_ stats_ctx *x = userdata;
        _cleanup_error_ sp_error *e = NULL;
        if (err) {
                /* The worker no longer holds it running (it was just suspended or stopped). */
                if (err->code == SP_E_NOT_FOUND || err->code == SP_E_CONFLICT) {
                        cp__failf(c, SP_E_CONFLICT, "sandbox %s is no longer on worker %s", x->sandbox_id,
                                  x->worker_id);
                        return;
                }
                cp__fail_worker(c, err);
                return;
        }
        pr_wk_sandbox_stats st;
        if (pr_msg_decode(&pr_wk_sandbox_stats_schema, resp, &st, &e) < 0) {
                cp__failf(c, SP_E_INTERNAL, "the stats of worker %s: %s", x->worker_id, e->message);
                return;
        }
        _cleanup_json_ json_object *out = NULL;
        const char *params[] = {x->sandbox_id};
        if (cp__query_json(c->api,
                           "SELECT jsonb_build_object('sandbox_id', s.id, 'worker_id', s.worker_id, "
                           "'sampled_at', api_ts(clock_timestamp()), 'resources', s.spec->'resources') "
                           "FROM sandboxes s WHERE s.id = $1",
                           1, params, "sandbox not found", &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* The counters the worker reports (proto/spec/worker-rpc.md). */
        json_object_object_add(out, "cpu_ns", json_object_new_int64(st.cpu_ns));
        json_object_object_add(out, "memory_bytes", json_object_new_int64(st.memory_bytes));
        json_object_object_add(out, "memory_peak_bytes", json_object_new_int64(st.memory_peak_bytes));
        json_object_object_add(out, "pids", json_object_new_int64(st.pids));
        json_object_object_add(out, "oom_kills", json_object_new_int64(st.oom_kills));
        /* Ingress to its ports since its worker started (docs/ingress.md). */
        json_object *ing = json_object_new_object();
        json_object_object_add(ing, "connections", json_object_new_int64(st.port_connections));
        json_object_object_add(ing, "bytes_in", json_object_new_int64(st.port_bytes_in));
        json_object_object_add(ing, "bytes_out", json_object_new_int64(st.port_bytes_out));
        json_object_object_add(out, "ingress", ing);
        cp__reply(c, 200, out);
}

void cp__h_sandbox_stats(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_sandbox_loc loc;
        if (cp__sandbox_locate(c, sp_http_request_param(c->req, "id"), false, &loc, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* Running and paused sandboxes are on a worker; the others (creating,
         * suspended, stopped, failed, ...) have nothing to measure. */
        if ((strcmp(loc.state, "running") != 0 && strcmp(loc.state, "paused") != 0) || !loc.worker_id[0]) {
                cp__failf(c, SP_E_CONFLICT, "sandbox %s is %s: it has stats only while running or paused on a worker",
                          loc.id, loc.state);
                return;
        }
        if (!loc.reachable) {
                cp__failf(c, SP_E_UNAVAILABLE, "sandbox %s: its worker %s is unreachable; retry later", loc.id,
                          loc.worker_id);
                return;
        }
        stats_ctx *x = calloc(1, sizeof(*x));
        if (!x) {
                cp__failf(c, SP_E_LIMIT, "out of memory");
                return;
        }
        snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", loc.id);
        snprintf(x->worker_id, sizeof(x->worker_id), "%s", loc.worker_id);
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_sandbox_ref_schema, &(pr_wk_sandbox_ref){.id = loc.id});
        cp__worker_call(c, loc.worker_id, loc.address, "SandboxStats", req, on_stats, x);
}
