/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-hop creates (docs/controlplane.md, "Creates"). A create that a worker
 * can serve from its warm pool (as its last heartbeat says, on a worker the
 * scheduler would choose anyway) is recorded by its request already placed
 * there, with its operation `running` under a lease (its next attempt
 * CP_CREATE_FAST_LEASE_S out, so the controller leaves it alone); the
 * request then sends CreateSandbox itself (warm allowed: a pool emptied
 * meanwhile means a cold create on that worker, slower and still right) and
 * answers with the sandbox running and the operation succeeded.
 *
 * When the worker fails the call, the request hands the operation back to
 * the controller (pending, due now; a create the controller would place
 * again is unplaced first, avoiding that worker) and answers it pending,
 * as the controller's path would have. When this replica dies in between,
 * the lease runs out and the controller sends the same CreateSandbox to the
 * same worker: "already exists" counts as done there (ctrl/ops.c), so
 * nothing is made twice.
 *
 * Threading: the API's loop. The call ends before the lease does, so a
 * request never changes an operation the controller has taken.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"
#include "store/create_req.h"
#include "store/egress.h"
#include "store/workers.h"

/* The deadline of the call: well within the lease. */
#define FAST_CALL_MS ((CP_CREATE_FAST_LEASE_S - 5) * 1000)

static const char *const result_names[CP_CREATE_FAST_RESULTS] = {"claimed", "fallback", "error"};

typedef struct fast_ctx {
        char op[SP_ID_MAX];
        char sbx[SP_ID_MAX];
        char worker[SP_ID_MAX];
        int64_t egress_generation;
} fast_ctx;

bool cp__create_fast_pick(cp_call *c, const char *template_id, const char *spec, const char *backend, cp_placement *ret)
{
        if (!c->api->cfg.create_fast_path)
                return false;
        cp_placement pl;
        if (cp_placement_choose(c->api->db, template_id, spec, backend, NULL, &pl, NULL) < 0 || pl.warm < 1 ||
            !pl.address[0]) {
                c->api->create_fast_total[CP_CREATE_FAST_FALLBACK]++;
                return false;
        }
        *ret = pl;
        return true;
}

/* Answers c with the operation and sandbox as they are now. */
static void answer(cp_call *c, const char *op, const char *sbx)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = NULL;
        if (cp__op_envelope(c, op, sbx, &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply(c, 202, out);
}

/* A failure the controller answers by placing the create again (ctrl/ops.c,
 * on_result): the worker's fault, not reached, no template or no room. */
static bool place_again(sp_errc code)
{
        return code == SP_E_TIMEOUT || code == SP_E_INTERNAL || code == SP_E_IO || code == SP_E_PERMISSION ||
               code == SP_E_UNAVAILABLE || code == SP_E_NOT_FOUND || code == SP_E_LIMIT;
}

/* Gives the operation back to the controller, due now, while the lease is
 * still this request's (running, its one attempt, next attempt ahead). */
static void hand_back(cp_call *c, const fast_ctx *x, const sp_error *err)
{
        char msg[512];
        snprintf(msg, sizeof(msg), "placing again: %s", err->message);
        const char *p[] = {x->op, x->worker, msg, place_again(err->code) ? "t" : "f"};
        _cleanup_error_ sp_error *e = NULL;
        if (cp_db_exec(c->api->db,
                       "WITH o AS (UPDATE operations SET state = 'pending', message = $3, updated_at = now(), "
                       "next_attempt_at = now(), request = CASE WHEN $4::boolean THEN jsonb_set(request, "
                       "'{avoid_worker}', to_jsonb($2::text)) ELSE request END "
                       "WHERE id = $1 AND state = 'running' AND attempts = 1 AND next_attempt_at > now() "
                       "RETURNING target_id) "
                       "UPDATE sandboxes SET worker_id = NULL, updated_at = now() "
                       "WHERE $4::boolean AND id IN (SELECT target_id FROM o) AND observed_state = 'creating'",
                       4, p, NULL, &e) < 0)
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", x->sbx, "operation_id", x->op),
                          "create: handing it to the controller: %s (it takes it when the lease ends)", e->message);
}

static void on_created(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        fast_ctx *x = userdata;
        cp_api *api = c->api;
        if (err) {
                api->create_fast_total[CP_CREATE_FAST_ERROR]++;
                /* The worker's own fault counts towards its quarantine, as the controller counts it. */
                if (err->code == SP_E_TIMEOUT || err->code == SP_E_INTERNAL || err->code == SP_E_IO ||
                    err->code == SP_E_PERMISSION)
                        (void)cp_worker_record_result(api->db, x->worker, false, CP_WORKER_QUARANTINE_THRESHOLD,
                                                      err->message, NULL);
                sp_log_kv(SP_LOG_WARN,
                          SP_KV("sandbox_id", x->sbx, "operation_id", x->op, "worker_id", x->worker, "request_id",
                                sp_http_request_id(c->req)),
                          "create: its worker failed it (%s); the controller takes it over", err->message);
                hand_back(c, x, err);
                answer(c, x->op, x->sbx);
                free(x);
                return;
        }
        /* As the controller records a create that succeeded (ctrl/ops.c,
         * op_succeed); the operation's trigger wakes long-polls everywhere. */
        const char *p[] = {x->op, x->sbx};
        _cleanup_error_ sp_error *e = NULL;
        const cp_db_stmt txn[] = {
                {"UPDATE sandboxes SET observed_state = 'running', status_message = NULL, updated_at = now() "
                 "WHERE id = $1 AND observed_state = 'creating' AND deleted_at IS NULL",
                 1, p + 1, false},
                {"UPDATE operations SET state = 'succeeded', message = NULL, error = NULL, updated_at = now(), "
                 "result = (SELECT api_sandbox(s) FROM sandboxes s WHERE s.id = $2) "
                 "WHERE id = $1 AND state IN ('pending', 'running')",
                 2, p, false},
        };
        if (cp_db_txn(api->db, txn, SP_ARRAY_SIZE(txn), &e) < 0) {
                /* The worker has it: the controller records it when the lease ends. */
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", x->sbx, "operation_id", x->op),
                          "create: recording its success: %s", e->message);
                cp__fail(c, e);
                free(x);
                return;
        }
        cp_sandbox_egress_applied(api->db, x->sbx, x->egress_generation);
        api->create_fast_total[CP_CREATE_FAST_CLAIMED]++;
        sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", x->sbx, "operation_id", x->op, "worker_id", x->worker),
                  "create done (one hop)");
        _cleanup_json_ json_object *out = NULL;
        if (cp__op_envelope(c, x->op, x->sbx, &out, &e) < 0) {
                cp__fail(c, e);
                free(x);
                return;
        }
        if (c->idem_key) {
                /* A retry with the key answers the sandbox running too. */
                const char *ip[] = {c->who.tenant_id, c->idem_key, sp_json_str(out)};
                (void)cp_db_exec(
                        api->db,
                        "UPDATE idempotency_keys SET response_body = $3::jsonb WHERE tenant_id = $1 AND key = $2", 3,
                        ip, NULL, NULL);
        }
        cp__reply(c, 202, out);
        /* A success resets the worker's failure count (after the answer: off its path). */
        (void)cp_worker_record_result(api->db, x->worker, true, CP_WORKER_QUARANTINE_THRESHOLD, NULL, NULL);
        free(x);
}

void cp__create_fast_send(cp_call *c, const char *op_id, const char *sbx_id, const cp_placement *pl)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *req = NULL;
        fast_ctx *x = calloc(1, sizeof(*x));
        if (!x) {
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                goto hand_back;
        }
        snprintf(x->op, sizeof(x->op), "%s", op_id);
        snprintf(x->sbx, sizeof(x->sbx), "%s", sbx_id);
        snprintf(x->worker, sizeof(x->worker), "%s", pl->worker_id);
        if (cp_sandbox_create_request(c->api->db, c->api->cfg.keyring, sbx_id, &req, &x->egress_generation, &e) < 0)
                goto hand_back;
        cp__worker_call_within(c, pl->worker_id, pl->address, "CreateSandbox", req, FAST_CALL_MS, on_created, x);
        return;
hand_back:
        /* The record is committed: the controller takes it (now, or when the lease ends). */
        if (x) {
                c->api->create_fast_total[CP_CREATE_FAST_ERROR]++;
                hand_back(c, x, e);
        }
        free(x);
        answer(c, op_id, sbx_id);
}

void cp__create_fast_metrics(cp_api *api, sp_buf *b)
{
        sp_buf_appendf(b, NULL,
                       "# HELP space_controlplane_create_fast_total Creates by how the one-hop path went: claimed "
                       "on a warm worker from the request, fallback (no warm worker: the controller's path), error "
                       "(the worker failed the call: the controller took it over).\n"
                       "# TYPE space_controlplane_create_fast_total counter\n");
        for (int i = 0; i < CP_CREATE_FAST_RESULTS; i++)
                sp_buf_appendf(b, NULL, "space_controlplane_create_fast_total{result=\"%s\"} %llu\n", result_names[i],
                               (unsigned long long)api->create_fast_total[i]);
}
