/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sandboxes: create, list, get, delete, the lifecycle actions and the
 * timeout. Mutations record the desired state and an operation in one
 * transaction and answer 202; the controllers carry them out — except a
 * create a warm pool can serve, which the request carries out itself
 * (api/create_fast.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"

#define NOT_FOUND_FMT "sandbox %.64s not found"

/* An operation; with lease_s > 0 it is being carried out by this request
 * (a one-hop create: api/create_fast.c), one attempt made, and the
 * controller leaves it alone for lease_s seconds. */
static int insert_operation_leased(cp_call *c, const char *kind, const char *target, const char *state,
                                   const char *message, int lease_s, char op_id[static SP_ID_MAX], sp_error **err)
{
        if (sp_id_new("op", op_id, err) < 0)
                return -SP_E_IO;
        char deadline[32], lease[16];
        snprintf(deadline, sizeof(deadline), "%lld", (long long)c->api->cfg.operation_deadline_s);
        snprintf(lease, sizeof(lease), "%d", lease_s > 0 ? lease_s : 0);
        const char *params[] = {op_id, c->who.tenant_id, kind, target, state, message, deadline, lease};
        return cp_db_exec(c->api->db,
                          "INSERT INTO operations (id, tenant_id, kind, target_id, state, message, deadline_at, "
                          "attempts, next_attempt_at) VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => "
                          "$7::integer), CASE WHEN $8::integer > 0 THEN 1 ELSE 0 END, now() + make_interval(secs => "
                          "$8::integer))",
                          8, params, NULL, err);
}

static int insert_operation(cp_call *c, const char *kind, const char *target, const char *state, const char *message,
                            char op_id[static SP_ID_MAX], sp_error **err)
{
        return insert_operation_leased(c, kind, target, state, message, 0, op_id, err);
}

/* {"operation":..., "sandbox":...} for op_id and sandbox id, inside the transaction. */
int cp__op_envelope(cp_call *c, const char *op_id, const char *sbx_id, json_object **ret, sp_error **err)
{
        const char *params[] = {op_id, sbx_id};
        int r = cp__query_json(c->api,
                               "SELECT jsonb_build_object('operation', api_operation(o), 'sandbox', api_sandbox(s)) "
                               "FROM operations o, sandboxes s WHERE o.id = $1 AND s.id = $2",
                               2, params, "operation not found", ret, err);
        if (r < 0)
                return r;
        cp__sandbox_ingress_urls(c->api, json_object_object_get(*ret, "sandbox"));
        cp__operation_ingress_urls(c->api, json_object_object_get(*ret, "operation"));
        return 0;
}

/* A secret given to the sandbox being made: its id, variable and placeholder. */
typedef struct given {
        char id[SP_ID_MAX];
        char env[CP_MAX_MAP_KEY + 1];
        char placeholder[GW_SECRET_PLACEHOLDER_LEN + 1];
} given;

/* Inside the create's transaction: checks each secret r asks for (the
 * tenant's, live, not expired, granted by profile; its variable free) and
 * gives it a new placeholder, set in env. SP_E_INVALID naming the secret. */
static int give_secrets(cp_call *c, const cp_sandbox_create_req *r, json_object *profile, json_object *env, given *out,
                        sp_error **err)
{
        _cleanup_(gw_profile_unrefp) gw_profile *p = NULL;
        if (gw_profile_resolve(profile, true, &p, NULL) < 0)
                return sp_error_set(err, SP_E_INVALID, "secrets: the sandbox's egress profile grants none");
        for (size_t i = 0; i < r->nsecrets; i++) {
                const cp_sandbox_secret_ref *ref = &r->secrets[i];
                /* FOR SHARE: a revoke of it waits for this transaction, and
                 * then finds this sandbox among those that had it. */
                const char *params[] = {c->who.tenant_id, ref->name};
                _cleanup_pgresult_ PGresult *res = NULL;
                if (cp_db_exec(c->api->db,
                               "SELECT id, env, coalesce(expires_at <= now(), false), api_ts(expires_at) FROM secrets "
                               "WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL FOR SHARE",
                               2, params, &res, err) < 0)
                        return -SP_E_UNAVAILABLE;
                if (PQntuples(res) != 1)
                        return sp_error_set(err, SP_E_INVALID, "secrets: secret '%s' not found", ref->name);
                if (strcmp(PQgetvalue(res, 0, 2), "t") == 0)
                        return sp_error_set(err, SP_E_INVALID, "secrets: secret '%s' expired at %s", ref->name,
                                            PQgetvalue(res, 0, 3));
                if (!gw_profile_grants_secret(p, ref->name))
                        return sp_error_set(err, SP_E_INVALID,
                                            "secrets: secret '%s' is not granted by the sandbox's egress profile '%s' "
                                            "(its \"secrets\" list)",
                                            ref->name, gw_profile_name(p));
                given *g = &out[i];
                snprintf(g->id, sizeof(g->id), "%s", PQgetvalue(res, 0, 0));
                snprintf(g->env, sizeof(g->env), "%s", ref->env[0] ? ref->env : PQgetvalue(res, 0, 1));
                if (json_object_object_get_ex(env, g->env, NULL))
                        return sp_error_set(err, SP_E_INVALID,
                                            "secrets: the variable %s of secret '%s' is already set (in env or by "
                                            "another secret)",
                                            g->env, ref->name);
                if (gw_secret_placeholder_new(g->placeholder, err) < 0)
                        return -SP_E_IO;
                json_object_object_add(env, g->env, json_object_new_string(g->placeholder));
        }
        return 0;
}

static int record_secrets(cp_call *c, const char *sbx, const given *g, size_t n, sp_error **err)
{
        for (size_t i = 0; i < n; i++) {
                const char *params[] = {sbx, g[i].id, g[i].env, g[i].placeholder};
                if (cp_db_exec(c->api->db,
                               "INSERT INTO sandbox_secrets (sandbox_id, secret_id, env, placeholder) "
                               "VALUES ($1, $2, $3, $4)",
                               4, params, NULL, err) < 0)
                        return -SP_E_UNAVAILABLE;
        }
        return 0;
}

void cp__h_sandbox_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_sandbox_create_req r;
        if (cp_req_sandbox_create(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (r.nsecrets && !c->api->cfg.keyring) {
                cp_sandbox_create_req_free(&r);
                cp__failf(c, SP_E_UNAVAILABLE,
                          "secrets are not configured on this control plane: start space-controlplane with "
                          "--secrets-key-file FILE (docs/secrets.md)");
                return;
        }
        /* The template: the tenant's own, else a public one. */
        _cleanup_pgresult_ PGresult *tpl = NULL;
        const char *tp[] = {r.template_name, c->who.tenant_id};
        if (cp_db_exec(c->api->db,
                       "SELECT id, state FROM templates WHERE name = $1 AND deleted_at IS NULL "
                       "AND (tenant_id = $2 OR tenant_id = 'ten_system') ORDER BY (tenant_id = $2) DESC LIMIT 1",
                       2, tp, &tpl, &e) < 0) {
                cp_sandbox_create_req_free(&r);
                cp__fail(c, e);
                return;
        }
        if (PQntuples(tpl) != 1) {
                cp__failf(c, SP_E_NOT_FOUND, "template '%s' not found", r.template_name);
                cp_sandbox_create_req_free(&r);
                return;
        }
        if (strcmp(PQgetvalue(tpl, 0, 1), "ready") != 0) {
                cp__failf(c, SP_E_CONFLICT, "template '%s' is %s, not ready", r.template_name, PQgetvalue(tpl, 0, 1));
                cp_sandbox_create_req_free(&r);
                return;
        }
        /* A backend no worker of the cluster runs: refused now, not left to a
         * create that would wait for its deadline. */
        if (r.backend[0]) {
                _cleanup_pgresult_ PGresult *bk = NULL;
                const char *bp[] = {r.backend};
                if (cp_db_exec(c->api->db,
                               "SELECT coalesce(bool_or($1 = b), false), coalesce(string_agg(DISTINCT b, ', '), '') "
                               "FROM workers, unnest(coalesce(backends, ARRAY[backend])) b",
                               1, bp, &bk, &e) < 0) {
                        cp_sandbox_create_req_free(&r);
                        cp__fail(c, e);
                        return;
                }
                if (strcmp(PQgetvalue(bk, 0, 0), "t") != 0) {
                        const char *have = PQgetvalue(bk, 0, 1);
                        cp__failf(c, SP_E_PRECONDITION, "no worker of this cluster runs backend %s (%s%s)", r.backend,
                                  *have ? "it has: " : "it has no workers", have);
                        cp_sandbox_create_req_free(&r);
                        return;
                }
        }
        _cleanup_json_ json_object *spec = json_object_new_object();
        json_object *res = json_object_new_object();
        json_object_object_add(res, "cpu_millis", json_object_new_int64(r.resources.cpu_millis));
        json_object_object_add(res, "memory_mb", json_object_new_int64(r.resources.memory_mb));
        json_object_object_add(res, "disk_mb", json_object_new_int64(r.resources.disk_mb));
        json_object_object_add(res, "pids", json_object_new_int64(r.resources.pids));
        json_object_object_add(spec, "resources", res);
        json_object_object_add(spec, "env", json_object_get(r.env));
        json_object_object_add(spec, "labels", json_object_get(r.labels));
        if (!r.egress_inline)
                json_object_object_add(spec, "egress", json_object_new_string(r.egress[0] ? r.egress : "none"));

        if (cp__mutation_begin(c)) {
                cp_sandbox_create_req_free(&r);
                return;
        }
        /* Under the tenant's lock until the sandbox is recorded: two creates
         * cannot both take the last room of a quota. */
        char delta[192];
        snprintf(delta, sizeof(delta),
                 "{\"running_sandboxes\":1,\"cpu_millis\":%lld,\"memory_mb\":%lld,\"disk_mb\":%lld}",
                 (long long)r.resources.cpu_millis, (long long)r.resources.memory_mb, (long long)r.resources.disk_mb);
        if (cp__quota_admit(c, c->who.tenant_id, delta, &e) < 0) {
                cp_sandbox_create_req_free(&r);
                cp__mutation_abort(c, e);
                return;
        }
        json_object *profile = NULL;
        if (cp__egress_resolve(c, r.egress, r.egress_inline, &profile, &e) < 0) {
                cp_sandbox_create_req_free(&r);
                cp__mutation_abort(c, e);
                return;
        }
        json_object_object_add(spec, "egress_profile", profile);
        /* Each secret's variable holds a placeholder of this sandbox's (the
         * spec's env is the one the sandbox gets). */
        given secrets[GW_SECRETS_MAX];
        json_object *env = NULL;
        json_object_object_get_ex(spec, "env", &env);
        if (r.nsecrets && give_secrets(c, &r, profile, env, secrets, &e) < 0) {
                cp_sandbox_create_req_free(&r);
                cp__mutation_abort(c, e);
                return;
        }
        /* One hop: a worker whose warm pool can serve it takes it now, from
         * this request (api/create_fast.c). */
        cp_placement pl;
        bool fast = cp__create_fast_pick(c, PQgetvalue(tpl, 0, 0), sp_json_str(spec), r.backend, &pl);
        char id[SP_ID_MAX], op[SP_ID_MAX], timeout[32], idle[32];
        snprintf(timeout, sizeof(timeout), "%lld", (long long)r.timeout_s);
        snprintf(idle, sizeof(idle), "%lld", (long long)r.idle_timeout_s);
        const char *params[] = {id,
                                c->who.tenant_id,
                                r.template_name,
                                PQgetvalue(tpl, 0, 0),
                                sp_json_str(spec),
                                sp_json_str(r.metadata),
                                r.backend[0] ? r.backend : NULL,
                                r.idle_timeout_s >= 0 ? idle : NULL,
                                r.end_action,
                                r.timeout_s > 0 ? timeout : NULL,
                                r.ingress,
                                r.auto_resume ? "true" : "false",
                                fast ? pl.worker_id : NULL};
        _cleanup_json_ json_object *out = NULL, *audit = NULL;
        if (r.nsecrets) {
                /* The audit record names the secrets given, never a value (nor a placeholder). */
                json_object *names = json_object_new_array();
                for (size_t i = 0; i < r.nsecrets; i++)
                        json_object_array_add(names, json_object_new_string(r.secrets[i].name));
                audit = json_object_new_object();
                json_object_object_add(audit, "secrets", names);
        }
        if (sp_id_new("sbx", id, &e) < 0 ||
            cp_db_exec(c->api->db,
                       "INSERT INTO sandboxes (id, tenant_id, template, template_id, spec, desired_state, "
                       "observed_state, metadata, backend, idle_timeout_s, end_action, end_at, ingress, auto_resume, "
                       "timeout_s, worker_id) VALUES ($1, $2, $3, $4, $5::jsonb, 'running', 'creating', $6::jsonb, "
                       "coalesce($7, (SELECT backend FROM workers WHERE id = $13)), $8::integer, $9, "
                       "now() + make_interval(secs => $10::integer), $11, $12::boolean, $10::integer, $13)",
                       13, params, NULL, &e) < 0 ||
            record_secrets(c, id, secrets, r.nsecrets, &e) < 0 ||
            insert_operation_leased(c, "create", id, fast ? "running" : "pending",
                                    fast ? "creating it on its worker from the request (one hop)" : NULL,
                                    fast ? CP_CREATE_FAST_LEASE_S : 0, op, &e) < 0 ||
            cp__audit(c, "sandbox.create", id, audit, &e) < 0 || cp__op_envelope(c, op, id, &out, &e) < 0) {
                cp_sandbox_create_req_free(&r);
                cp__mutation_abort(c, e);
                return;
        }
        cp_sandbox_create_req_free(&r);
        sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", id, "request_id", sp_http_request_id(c->req)), "create requested");
        if (!fast) {
                cp__mutation_commit(c, 202, out);
                return;
        }
        if (cp__mutation_commit_keep(c, 202, out) == 0)
                cp__create_fast_send(c, op, id, &pl);
}

void cp__h_sandbox_get(cp_call *c)
{
        const char *id = sp_http_request_param(c->req, "id");
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = NULL;
        char msg[128];
        snprintf(msg, sizeof(msg), NOT_FOUND_FMT, id);
        const char *params[] = {id, c->who.tenant_id};
        if (cp__query_json(c->api,
                           "SELECT api_sandbox(s) FROM sandboxes s WHERE s.id = $1 AND s.tenant_id = $2 "
                           "AND s.deleted_at IS NULL",
                           2, params, msg, &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__sandbox_ingress_urls(c->api, out);
        cp__reply(c, 200, out);
}

void cp__h_sandbox_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_list_query q;
        if (cp_req_list_query(sp_http_request_query(c->req, "state"), sp_http_request_query(c->req, "template"),
                              sp_http_request_query(c->req, "limit"), sp_http_request_query(c->req, "cursor"), &q,
                              &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* metadata.KEY=VALUE filters, all of which must match. */
        _cleanup_json_ json_object *meta = json_object_new_object();
        const sp_http_parser *p = sp_http_request_parser(c->req);
        size_t nmeta = 0;
        for (size_t i = 0; i < sp_http_parser_query_count(p); i++) {
                const char *k, *v;
                if (!sp_http_parser_query_at(p, i, &k, &v) || strncmp(k, "metadata.", 9) != 0)
                        continue;
                if (++nmeta > 8 || strlen(k + 9) == 0 || strlen(k + 9) > CP_MAX_MAP_KEY ||
                    strlen(v) > CP_MAX_MAP_VALUE) {
                        cp__failf(c, SP_E_INVALID, "at most 8 metadata.KEY=VALUE filters with non-empty keys");
                        return;
                }
                json_object_object_add(meta, k + 9, json_object_new_string(v));
        }
        char limit[24];
        snprintf(limit, sizeof(limit), "%lld", (long long)(q.limit + 1));
        const char *params[] = {c->who.tenant_id,
                                q.state[0] ? q.state : NULL,
                                q.template_name[0] ? q.template_name : NULL,
                                sp_json_str(meta),
                                q.has_cursor ? q.cursor_created_at : NULL,
                                q.has_cursor ? q.cursor_id : NULL,
                                limit};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db,
                       "SELECT api_sandbox(s)::text, api_ts(s.created_at), s.id FROM sandboxes s "
                       "WHERE s.tenant_id = $1 AND s.deleted_at IS NULL "
                       "AND ($2::text IS NULL OR s.observed_state = $2) AND ($3::text IS NULL OR s.template = $3) "
                       "AND s.metadata @> $4::jsonb "
                       "AND ($5::text IS NULL OR (s.created_at, s.id) > ($5::timestamptz, $6::text)) "
                       "ORDER BY s.created_at, s.id LIMIT $7::integer",
                       7, params, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply_page_each(c, res, q.limit, "sandboxes", "sbx", cp__sandbox_ingress_urls);
}

/* A lifecycle action: from one of the desired states in `from` (NULL-ended),
 * record `to` as desired and an operation of `kind`. */
typedef struct action {
        const char *name;
        const char *const *from;
        const char *to;
        const char *kind;
} action;

static bool in_list(const char *s, const char *const *list)
{
        for (; *list; list++)
                if (strcmp(s, *list) == 0)
                        return true;
        return false;
}

static void lifecycle(cp_call *c, const action *a)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        if (cp__body_none(c) < 0)
                return;
        if (cp__mutation_begin(c))
                return;
        /* An action that may add to the tenant's use (back to running, or to
         * suspended or stopped, which keep its storage) is checked against
         * its quotas, under the tenant's lock taken before the sandbox's. */
        bool quota = strcmp(a->to, "running") == 0 || strcmp(a->to, "suspended") == 0 || strcmp(a->to, "stopped") == 0;
        if (quota && cp__quota_lock(c, c->who.tenant_id, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id, c->who.tenant_id, a->to};
        if (cp_db_exec(c->api->db,
                       "SELECT desired_state, observed_state, "
                       "CASE WHEN observed_state = 'failed' THEN quota_charge(spec, $3) "
                       "ELSE quota_delta(spec, desired_state, $3) END::text FROM sandboxes "
                       "WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL FOR UPDATE",
                       3, params, &res, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, NOT_FOUND_FMT, id);
                cp__mutation_abort(c, e);
                return;
        }
        const char *desired = PQgetvalue(res, 0, 0);
        const char *kind = a->kind, *to = a->to;
        if (strcmp(a->name, "wake") == 0) {
                /* Any valid way back to running. */
                kind = strcmp(desired, "paused") == 0      ? "resume"
                       : strcmp(desired, "suspended") == 0 ? "restore"
                       : strcmp(desired, "stopped") == 0   ? "start"
                       : strcmp(desired, "running") == 0   ? "wake"
                                                           : NULL;
                to = "running";
        } else if (strcmp(a->name, "delete") == 0 && strcmp(desired, "deleted") == 0) {
                /* Deleting again answers with the delete already under way. */
                _cleanup_json_ json_object *out = NULL;
                _cleanup_pgresult_ PGresult *op = NULL;
                if (cp_db_exec(c->api->db,
                               "SELECT id FROM operations WHERE target_id = $1 AND tenant_id = $2 AND kind = 'delete' "
                               "ORDER BY created_at DESC LIMIT 1",
                               2, params, &op, &e) < 0 ||
                    PQntuples(op) != 1 || cp__op_envelope(c, PQgetvalue(op, 0, 0), id, &out, &e) < 0) {
                        if (!e)
                                sp_error_set(&e, SP_E_NOT_FOUND, NOT_FOUND_FMT, id);
                        cp__mutation_abort(c, e);
                        return;
                }
                cp__mutation_commit(c, 202, out);
                return;
        } else if (!in_list(desired, a->from)) {
                kind = NULL;
        }
        if (!kind) {
                sp_error_set(&e, SP_E_CONFLICT, "sandbox %.64s is %s; cannot %s it", id, desired, a->name);
                cp__mutation_abort(c, e);
                return;
        }
        /* A failed sandbox counts for nothing now: all it would hold is new. */
        if (quota && strcmp(kind, "wake") != 0 && cp__quota_check(c, c->who.tenant_id, PQgetvalue(res, 0, 2), &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        char op[SP_ID_MAX];
        const char *up[] = {id, to};
        _cleanup_json_ json_object *out = NULL;
        char action_name[64];
        snprintf(action_name, sizeof(action_name), "sandbox.%s", a->name);
        bool noop = strcmp(kind, "wake") == 0; /* already running: nothing to do */
        /* A create still waiting to be placed (not being carried out on a worker
         * now) is cancelled by a delete, which then has nothing to undo:
         * otherwise the delete would wait behind it until its deadline. So is
         * a wake or a move waiting for another worker to take the sandbox
         * (ctrl/move.c): nothing of it has happened yet. */
        const char *ip[] = {id};
        if (strcmp(a->name, "delete") == 0 &&
            (cp_db_exec(c->api->db,
                        "UPDATE operations SET state = 'failed', updated_at = now(), message = NULL, error = "
                        "'{\"code\":\"conflict\",\"message\":\"cancelled: the sandbox was deleted before it was "
                        "placed\"}' WHERE target_id = $1 AND kind = 'create' AND state = 'pending' "
                        "AND NOT EXISTS (SELECT 1 FROM sandboxes WHERE id = $1 AND worker_id IS NOT NULL)",
                        1, ip, NULL, &e) < 0 ||
             cp_db_exec(
                     c->api->db,
                     "UPDATE operations SET state = 'failed', updated_at = now(), error = jsonb_build_object("
                     "'code', 'conflict', 'message', 'cancelled: the sandbox was deleted while it waited for "
                     "another worker (' || message || ')'), message = NULL WHERE target_id = $1 "
                     "AND kind IN ('restore', 'start', 'move') AND state = 'pending' AND message LIKE 'cannot move%'",
                     1, ip, NULL, &e) < 0)) {
                cp__mutation_abort(c, e);
                return;
        }
        if (cp_db_exec(c->api->db,
                       "UPDATE sandboxes SET desired_state = $2, updated_at = now(), last_active_at = now() "
                       "WHERE id = $1",
                       2, up, NULL, &e) < 0 ||
            insert_operation(c, noop ? "resume" : kind, id, noop ? "succeeded" : "pending",
                             noop ? "already running" : NULL, op, &e) < 0 ||
            cp__audit(c, action_name, id, NULL, &e) < 0 || cp__op_envelope(c, op, id, &out, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__mutation_commit(c, 202, out);
}

static const char *const FROM_RUNNING[] = {"running", NULL};
static const char *const FROM_PAUSED[] = {"paused", NULL};
static const char *const FROM_ACTIVE[] = {"running", "paused", NULL};
static const char *const FROM_SUSPENDED[] = {"suspended", NULL};
static const char *const FROM_STOPPED[] = {"stopped", NULL};
static const char *const FROM_ANY[] = {"running", "paused", "suspended", "stopped", NULL};

void cp__h_sandbox_pause(cp_call *c)
{
        lifecycle(c, &(action){"pause", FROM_RUNNING, "paused", "pause"});
}
void cp__h_sandbox_resume(cp_call *c)
{
        lifecycle(c, &(action){"resume", FROM_PAUSED, "running", "resume"});
}
void cp__h_sandbox_suspend(cp_call *c)
{
        lifecycle(c, &(action){"suspend", FROM_ACTIVE, "suspended", "suspend"});
}
void cp__h_sandbox_restore(cp_call *c)
{
        lifecycle(c, &(action){"restore", FROM_SUSPENDED, "running", "restore"});
}
void cp__h_sandbox_wake(cp_call *c)
{
        lifecycle(c, &(action){"wake", FROM_ANY, "running", NULL});
}
void cp__h_sandbox_stop(cp_call *c)
{
        lifecycle(c, &(action){"stop", FROM_ACTIVE, "stopped", "stop"});
}
void cp__h_sandbox_start(cp_call *c)
{
        lifecycle(c, &(action){"start", FROM_STOPPED, "running", "start"});
}
void cp__h_sandbox_delete(cp_call *c)
{
        lifecycle(c, &(action){"delete", FROM_ANY, "deleted", "delete"});
}

void cp__h_sandbox_timeout(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        cp_timeout_req r;
        if (cp_req_timeout(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (cp__mutation_begin(c))
                return;
        char t[32];
        snprintf(t, sizeof(t), "%lld", (long long)r.timeout_s);
        const char *params[] = {id, c->who.tenant_id, r.timeout_s > 0 ? t : NULL,
                                r.end_action[0] ? r.end_action : NULL};
        _cleanup_pgresult_ PGresult *res = NULL;
        _cleanup_json_ json_object *out = NULL;
        if (cp_db_exec(c->api->db,
                       "UPDATE sandboxes SET end_at = now() + make_interval(secs => $3::integer), "
                       "timeout_s = $3::integer, end_action = coalesce($4, end_action), updated_at = now() "
                       "WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL AND desired_state <> 'deleted' "
                       "RETURNING api_sandbox(sandboxes)::text",
                       4, params, &res, &e) < 0 ||
            cp__audit(c, "sandbox.timeout", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, NOT_FOUND_FMT, id);
                cp__mutation_abort(c, e);
                return;
        }
        const char *v = PQgetvalue(res, 0, 0);
        if (sp_json_parse(v, strlen(v), &out, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__sandbox_ingress_urls(c->api, out);
        cp__mutation_commit(c, 200, out);
}
