/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Data-plane replicas (proto/spec/controlplane-rpc.md, "Data-plane
 * replicas"): Join with role dataplane — a join token and a CSR for a
 * dataplane certificate, answered with the certificate, the cluster CA and
 * the token public keys — TokenKeys, which data planes (and workers) call
 * to learn rotated keys, RevokedKeys, which they poll to refuse the
 * tokens of revoked API keys and the upload tokens of deleted templates, and
 * ResolveSandbox, which tells a data plane serving ingress a sandbox's
 * tenant and state, who may reach it and on which worker it runs.
 */
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"
#include "space/log.h"
#include "store/keys.h"
#include "store/tokenkeys.h"

/* Decodes the data plane's Join (space/controlplane_rpc.h), then checks the
 * name. Strings are borrowed from req. */
static int parse(json_object *req, pr_cp_join *r, sp_error **err)
{
        /* The codec would call them unknown: say why they are. */
        static const char *const worker_only[] = {"address", "backend", "labels"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(worker_only); i++) {
                json_object *v = NULL;
                if (json_object_object_get_ex(req, worker_only[i], &v) && v)
                        return sp_error_set(err, SP_E_INVALID, "field '%s' is not allowed with role dataplane",
                                            worker_only[i]);
        }
        if (pr_msg_decode(&pr_cp_join_dataplane_schema, req, r, err) < 0)
                return -SP_E_INVALID;
        if (!cp__fleet_name_ok(r->name))
                return sp_error_set(
                        err, SP_E_INVALID,
                        "name '%s' must be 1 to 63 characters of [a-z0-9.-], starting with a letter or digit", r->name);
        return 0;
}

/* Everything after the token check, inside the transaction. */
static int record(cp_fleet *f, const pr_cp_join *r, const char *token_id, char **ret_cert, json_object **ret_keys,
                  sp_error **err)
{
        sp_pki_cert_info info;
        _cleanup_free_ char *cert =
                sp_pki_csr_sign(f->ca, r->csr, SP_ROLE_DATAPLANE, (int)f->cfg.cert_days, &info, err);
        if (!cert)
                return sp_error_wrap(err, "csr");
        if (strcmp(info.name, r->name) != 0)
                return sp_error_set(err, SP_E_INVALID, "csr: its common name '%s' must be the data plane's name '%s'",
                                    info.name, r->name);
        _cleanup_json_ json_object *detail = json_object_new_object();
        json_object_object_add(detail, "name", json_object_new_string(r->name));
        json_object_object_add(detail, "token_id", json_object_new_string(token_id));
        json_object_object_add(detail, "cert_serial", json_object_new_string(info.serial));
        const char *params[] = {r->name, sp_json_str(detail)};
        if (cp_db_exec(f->db, "INSERT INTO audit_log (action, target, detail) VALUES ('dataplane.join', $1, $2::jsonb)",
                       2, params, NULL, err) < 0)
                return sp_error_wrap(err, "record the data plane");
        /* Read inside the transaction: if this fails, the token keeps its use. */
        int rc = cp_token_keys_public(f->db, ret_keys, err);
        if (rc < 0)
                return rc;
        *ret_cert = TAKE_PTR(cert);
        return 0;
}

int cp__fleet_join_dataplane(cp_fleet *f, json_object *req, json_object **ret, sp_error **err)
{
        pr_cp_join r;
        if (parse(req, &r, err) < 0)
                return -SP_E_INVALID;
        if (cp_db_begin(f->db, err) < 0)
                return sp_error_wrap(err, "join");
        char token_id[SP_ID_MAX];
        _cleanup_free_ char *cert = NULL;
        _cleanup_json_ json_object *keys = NULL;
        int rc = cp__jointoken_consume(f->db, r.token, "dataplane", token_id, err);
        if (rc == 0)
                rc = record(f, &r, token_id, &cert, &keys, err);
        if (rc == 0)
                rc = cp_db_commit(f->db, err);
        if (rc < 0) {
                cp_db_rollback(f->db);
                return rc;
        }
        sp_log_info_kv(SP_KV("dataplane", r.name, "token_id", token_id), "data plane joined");
        pr_cp_join_dataplane_resp resp = {.certificate = cert, .ca = f->ca_pem, .token_keys = keys};
        json_object *o = pr_msg_encode(&pr_cp_join_dataplane_resp_schema, &resp);
        *ret = o;
        return 0;
}

void cp__fleet_token_keys(sp_rpc_call *call, json_object *req, void *userdata)
{
        cp_fleet *f = userdata;
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *keys = NULL;
        pr_cp_empty none;
        if (pr_msg_decode(&pr_cp_empty_schema, req, &none, &e) < 0 || cp_token_keys_public(f->db, &keys, &e) < 0) {
                sp_rpc_call_fail(call, e);
                return;
        }
        pr_cp_token_keys_resp r = {.token_keys = keys};
        _cleanup_json_ json_object *resp = pr_msg_encode(&pr_cp_token_keys_resp_schema, &r);
        sp_rpc_call_reply(call, resp, NULL);
}

void cp__fleet_revoked_keys(sp_rpc_call *call, json_object *req, void *userdata)
{
        cp_fleet *f = userdata;
        _cleanup_error_ sp_error *e = NULL;
        int64_t since = 0;
        bool templates = false;
        pr_revoked_keys r = {0};
        if (pr_revoked_req_decode(req, &since, &templates, &e) < 0 ||
            cp_apikey_revoked_since(f->db, since, &r, &e) < 0) {
                sp_rpc_call_fail(call, e);
                return;
        }
        /* Only to a poller that asked: an older one refuses the field. */
        if (templates && cp_template_revoked_since(f->db, since, &r, &e) < 0) {
                pr_revoked_keys_free(&r);
                sp_rpc_call_fail(call, e);
                return;
        }
        _cleanup_json_ json_object *resp = pr_revoked_resp_encode(&r);
        pr_revoked_keys_free(&r);
        sp_rpc_call_reply(call, resp, NULL);
}

/* The wake of ResolveSandbox: a paused or suspended sandbox whose
 * auto_resume is set is asked back to running, as POST
 * /v1/sandboxes/{id}/wake would (an operation, resume or restore, and an
 * audit record naming the data plane and the token's key, or that the
 * request came without one; the sandbox's status_message says why once it
 * runs), in one statement. Not when:
 *   - the request came without a token and the sandbox is not public now
 *     (the data plane's view of its mode may be seconds old);
 *   - its timeout passed and it is to be deleted then (end_action kill): a
 *     request must not keep it alive;
 *   - a wake of it failed in the last WAKE_RETRY_S seconds (on a draining
 *     worker, it could not move, say): requests do not each write an operation.
 *   - it would take its tenant past a quota (store/quotas.h): the check runs
 *     under the tenant's lock, as the API's wake does, and the sandbox's
 *     status_message says which quota.
 * A timeout that passed (end_action suspend) starts again from now, its
 * length the sandbox's timeout_s, or the controller would suspend it again
 * at once. Nothing happens otherwise: already running, on its way, stopped,
 * or without auto_resume. */
#define WAKE_RETRY_S "10"
/* What a wake of sandbox x adds to its tenant's use (a failed one holds nothing now). */
#define WAKE_DELTA \
        "CASE WHEN x.observed_state = 'failed' THEN quota_charge(x.spec, 'running') " \
        "ELSE quota_delta(x.spec, x.desired_state, 'running') END"
static const char TENANT_LOCK_SQL[] =
        "SELECT 1 FROM tenants WHERE id = (SELECT tenant_id FROM sandboxes WHERE id = $1) FOR NO KEY UPDATE";
static const char WAKE_SQL[] =
        "WITH s AS (SELECT id, tenant_id, desired_state AS was FROM sandboxes x "
        "  WHERE id = $1 AND deleted_at IS NULL AND auto_resume AND desired_state IN ('paused', 'suspended') "
        "  AND ($7::jsonb IS NULL OR quota_refusal(x.tenant_id, $7::jsonb, " WAKE_DELTA ") IS NULL) "
        "  AND (NOT $5::boolean OR ingress = 'public') "
        "  AND NOT (end_action = 'kill' AND coalesce(end_at <= now(), false)) "
        "  AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.target_id = x.id "
        "    AND o.kind IN ('resume', 'restore') AND o.state = 'failed' "
        "    AND o.updated_at > now() - interval '" WAKE_RETRY_S " seconds') "
        "  FOR UPDATE), "
        "u AS (UPDATE sandboxes x SET desired_state = 'running', updated_at = now(), last_active_at = now(), "
        "  end_at = CASE WHEN x.end_at <= now() AND x.end_action = 'suspend' AND x.timeout_s > 0 "
        "    THEN now() + make_interval(secs => x.timeout_s) ELSE x.end_at END "
        "  FROM s WHERE x.id = s.id RETURNING x.id), "
        "o AS (INSERT INTO operations (id, tenant_id, kind, target_id, state, message, request, deadline_at) "
        "  SELECT $2, s.tenant_id, CASE s.was WHEN 'paused' THEN 'resume' ELSE 'restore' END, s.id, "
        "  'pending', 'woken by a request for one of its ports', "
        "  jsonb_build_object('status_message', 'woken by a request for one of its ports'), "
        "  now() + make_interval(secs => $3::integer) FROM s, u WHERE u.id = s.id RETURNING id), "
        "a AS (INSERT INTO audit_log (tenant_id, key_id, action, target, detail) "
        "  SELECT s.tenant_id, $6, 'sandbox.wake', s.id, jsonb_build_object('by', 'ingress', "
        "  'dataplane', $4::text, 'operation', o.id, 'was', s.was, 'anonymous', $5::boolean) FROM s, o) "
        "SELECT count(*) FROM o";
/* Sandbox $1, left as it was for a quota (defaults $2), says which, once. */
static const char OVER_QUOTA_SQL[] =
        "WITH r AS (SELECT x.id, 'not woken by a request for one of its ports: tenant quota exceeded: ' || "
        "  (q->>'quota') || ' limit ' || (q->>'limit') || ', in use ' || (q->>'used') || ', requested ' || "
        "  (q->>'asked') AS why FROM sandboxes x, LATERAL quota_refusal(x.tenant_id, $2::jsonb, " WAKE_DELTA ") q "
        "  WHERE x.id = $1 AND x.deleted_at IS NULL AND x.auto_resume "
        "  AND x.desired_state IN ('paused', 'suspended') AND q IS NOT NULL) "
        "UPDATE sandboxes x SET status_message = r.why FROM r "
        "WHERE x.id = r.id AND x.status_message IS DISTINCT FROM r.why";
static int wake(cp_fleet *f, const pr_cp_resolve_sandbox *r, const char *dataplane, sp_error **err)
{
        char op[SP_ID_MAX], deadline[32];
        if (sp_id_new("op", op, err) < 0)
                return -SP_E_IO;
        snprintf(deadline, sizeof(deadline), "%lld", (long long)f->cfg.operation_deadline_s);
        const char *params[] = {r->sandbox_id,
                                op,
                                deadline,
                                dataplane ? dataplane : "",
                                r->anonymous ? "true" : "false",
                                r->key_id,
                                f->cfg.quota_defaults};
        _cleanup_pgresult_ PGresult *res = NULL;
        /* The tenant's quota lock first, as every quota check takes it. */
        if (cp_db_begin(f->db, err) < 0)
                return -SP_E_UNAVAILABLE;
        int rc = cp_db_exec(f->db, TENANT_LOCK_SQL, 1, params, NULL, err);
        if (rc == 0)
                rc = cp_db_exec(f->db, WAKE_SQL, 7, params, &res, err);
        /* Not woken for a quota: the sandbox says which. */
        if (rc == 0 && strcmp(PQgetvalue(res, 0, 0), "0") == 0 && f->cfg.quota_defaults)
                rc = cp_db_exec(f->db, OVER_QUOTA_SQL, 2, (const char *[]){r->sandbox_id, f->cfg.quota_defaults}, NULL,
                                err);
        if (rc == 0)
                rc = cp_db_commit(f->db, err);
        else
                cp_db_rollback(f->db);
        if (rc < 0)
                return rc;
        if (strcmp(PQgetvalue(res, 0, 0), "0") != 0)
                sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", r->sandbox_id), "woken by ingress on data plane %s (%s)",
                          dataplane ? dataplane : "?", op);
        return 0;
}

void cp__fleet_resolve_sandbox(sp_rpc_call *call, json_object *req, void *userdata)
{
        cp_fleet *f = userdata;
        _cleanup_error_ sp_error *e = NULL;
        pr_cp_resolve_sandbox r;
        if (pr_msg_decode(&pr_cp_resolve_sandbox_schema, req, &r, &e) < 0) {
                sp_rpc_call_fail(call, e);
                return;
        }
        if (!sp_id_valid(r.sandbox_id, "sbx")) {
                sp_error_set(&e, SP_E_INVALID, "field 'sandbox_id' must be a sandbox id (sbx_...)");
                sp_rpc_call_fail(call, e);
                return;
        }
        if (r.wake && wake(f, &r, sp_rpc_call_peer_name(call), &e) < 0) {
                sp_rpc_call_fail(call, e);
                return;
        }
        /* One read by primary key, outside any transaction: data planes ask
         * for every sandbox they have not cached in the last seconds. A
         * sandbox whose delete was asked serves nothing more. */
        const char *params[] = {r.sandbox_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(f->db,
                       "SELECT s.id, s.tenant_id, s.observed_state, s.ingress, w.address, s.auto_resume, "
                       "s.desired_state = 'running' AND s.observed_state NOT IN ('running', 'failed'), w.name "
                       "FROM sandboxes s LEFT JOIN workers w ON w.id = s.worker_id "
                       "WHERE s.id = $1 AND s.deleted_at IS NULL AND s.desired_state <> 'deleted'",
                       1, params, &res, &e) < 0) {
                sp_rpc_call_fail(call, e);
                return;
        }
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, "sandbox %s not found", r.sandbox_id);
                sp_rpc_call_fail(call, e);
                return;
        }
        pr_cp_resolve_sandbox_resp a = {.sandbox_id = PQgetvalue(res, 0, 0),
                                        .tenant_id = PQgetvalue(res, 0, 1),
                                        .state = PQgetvalue(res, 0, 2),
                                        .ingress = PQgetvalue(res, 0, 3),
                                        .worker = PQgetisnull(res, 0, 4) ? NULL : PQgetvalue(res, 0, 4),
                                        .auto_resume = strcmp(PQgetvalue(res, 0, 5), "t") == 0,
                                        .waking = strcmp(PQgetvalue(res, 0, 6), "t") == 0,
                                        .worker_name = PQgetisnull(res, 0, 7) ? NULL : PQgetvalue(res, 0, 7)};
        _cleanup_json_ json_object *resp = pr_msg_encode(&pr_cp_resolve_sandbox_resp_schema, &a);
        sp_rpc_call_reply(call, resp, NULL);
}
