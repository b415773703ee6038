/* SPDX-License-Identifier: Apache-2.0 */
/* Operators' routes: workers, join tokens, tenants; and API keys. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "fleet/fleet.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "store/workers.h"

void cp__h_worker_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *arr = NULL;
        int r = cp_worker_list(c->api->db, &arr, &e);
        cp__reply_wrapped(c, r, "workers", arr, e);
}

void cp__h_worker_get(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *w = NULL;
        if (cp_worker_get(c->api->db, sp_http_request_param(c->req, "id"), &w, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply(c, 200, w);
}

/* Sets a worker's admin state (or lifts its quarantine, or "rejoin": allows a
 * join under its name), with its audit record, then answers the worker. */
static void worker_admin(cp_call *c, const char *admin_state)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *w = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        if (cp__mutation_begin(c))
                return;
        char action[48];
        bool rejoin = admin_state && strcmp(admin_state, "rejoin") == 0;
        snprintf(action, sizeof(action), "worker.%s",
                 rejoin                                 ? "allow_rejoin"
                 : !admin_state                         ? "unquarantine"
                 : strcmp(admin_state, "active") == 0   ? "uncordon"
                 : strcmp(admin_state, "cordoned") == 0 ? "cordon"
                                                        : "drain");
        int r = rejoin        ? cp_worker_allow_rejoin(c->api->db, id, &e)
                : admin_state ? cp_worker_set_admin_state(c->api->db, id, admin_state, &e)
                              : cp_worker_unquarantine(c->api->db, id, &e);
        if (r < 0 || cp__audit(c, action, id, NULL, &e) < 0 ||
            cp_db_exec(c->api->db, "SELECT pg_notify('space_work', 'worker')", 0, NULL, NULL, &e) < 0 ||
            cp_worker_get(c->api->db, id, &w, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__mutation_commit(c, 200, w);
}

void cp__h_worker_cordon(cp_call *c)
{
        worker_admin(c, "cordoned");
}
void cp__h_worker_uncordon(cp_call *c)
{
        worker_admin(c, "active");
}
void cp__h_worker_drain(cp_call *c)
{
        worker_admin(c, "draining");
}
/* POST /v1/workers/{id}/allow-rejoin: lets one join under its name through within the hour. */
void cp__h_worker_allow_rejoin(cp_call *c)
{
        worker_admin(c, "rejoin");
}
void cp__h_worker_unquarantine(cp_call *c)
{
        worker_admin(c, NULL);
}

void cp__h_join_token_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_join_token_req r;
        if (cp_req_join_token(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (cp__mutation_begin(c))
                return;
        _cleanup_free_ char *token = NULL;
        _cleanup_json_ json_object *out = NULL;
        char id[SP_ID_MAX];
        if (cp_jointoken_create(c->api->db, r.role, r.description, r.ttl_s, r.uses, &token, id, &e) < 0 ||
            cp__audit(c, "join_token.create", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        const char *params[] = {id, token};
        if (cp__query_json(
                    c->api,
                    "SELECT jsonb_build_object('id', id, 'token', $2::text, 'expires_at', api_ts(expires_at), "
                    "'uses', uses_left, 'role', role, 'description', description) FROM join_tokens WHERE id = $1",
                    2, params, NULL, &out, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        c->idem_secret = true; /* the token is shown once */
        cp__mutation_commit(c, 201, out);
}

void cp__h_join_token_delete(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        /* ?purge=true deletes the token (whatever its state); without it the token is revoked and stays listed. */
        const char *purge = sp_http_request_query(c->req, "purge");
        bool del = purge && strcmp(purge, "true") == 0;
        if (del)
                c->audit_action = "join_token.delete";
        if (purge && purge[0] && !del && strcmp(purge, "false") != 0) {
                cp__failf(c, SP_E_INVALID, "purge must be true or false");
                return;
        }
        if (cp__mutation_begin(c))
                return;
        if ((del ? cp_jointoken_delete(c->api->db, id, &e) : cp_jointoken_revoke(c->api->db, id, &e)) < 0 ||
            cp__audit(c, del ? "join_token.delete" : "join_token.revoke", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__mutation_commit(c, 204, NULL);
}

void cp__h_tenant_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_named_req r;
        if (cp_req_tenant_create(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (cp__mutation_begin(c))
                return;
        char id[SP_ID_MAX];
        if (cp_tenant_create(c->api->db, r.name, id, &e) < 0 || cp__audit(c, "tenant.create", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object_object_add(out, "id", json_object_new_string(id));
        json_object_object_add(out, "name", json_object_new_string(r.name));
        cp__mutation_commit(c, 201, out);
}

void cp__h_tenant_delete(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        _cleanup_pgresult_ PGresult *t = NULL, *live = NULL, *tpls = NULL, *keys = NULL, *secrets = NULL;
        _cleanup_json_ json_object *out = NULL;
        if (cp__mutation_begin(c))
                return;
        const char *p[] = {id};
        /* The row lock makes a concurrent create in the tenant wait for this decision. */
        if (cp_db_exec(c->api->db, "SELECT name FROM tenants WHERE id = $1 AND deleted_at IS NULL FOR UPDATE", 1, p, &t,
                       &e) < 0)
                goto abort;
        if (PQntuples(t) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, "tenant %.64s not found", id);
                goto abort;
        }
        if (strcmp(id, "ten_system") == 0) {
                sp_error_set(&e, SP_E_CONFLICT,
                             "the system tenant holds the public templates and the admin keys: it cannot be deleted");
                goto abort;
        }
        if (cp_db_exec(c->api->db,
                       "SELECT count(*) FROM sandboxes WHERE tenant_id = $1 AND deleted_at IS NULL "
                       "AND desired_state <> 'deleted'",
                       1, p, &live, &e) < 0)
                goto abort;
        if (strcmp(PQgetvalue(live, 0, 0), "0") != 0) {
                sp_error_set(&e, SP_E_CONFLICT, "tenant %.64s still has %s live sandboxes: delete them first", id,
                             PQgetvalue(live, 0, 0));
                goto abort;
        }
        /* Its templates leave the workers (a template_delete operation each). */
        if (cp_db_exec(c->api->db,
                       "UPDATE templates SET state = 'deleting', updated_at = now() "
                       "WHERE tenant_id = $1 AND deleted_at IS NULL AND state <> 'deleting' RETURNING id",
                       1, p, &tpls, &e) < 0)
                goto abort;
        for (int i = 0; i < PQntuples(tpls); i++) {
                char op[SP_ID_MAX];
                const char *opp[] = {op, id, PQgetvalue(tpls, i, 0)};
                if (sp_id_new("op", op, &e) < 0 ||
                    cp_db_exec(c->api->db,
                               "INSERT INTO operations (id, tenant_id, kind, target_id, state, deadline_at) "
                               "VALUES ($1, $2, 'template_delete', $3, 'pending', now() + interval '1 hour')",
                               3, opp, NULL, &e) < 0)
                        goto abort;
        }
        /* Its secrets are revoked, their values erased (no live sandbox has one). */
        if (cp_db_exec(c->api->db, "UPDATE api_keys SET revoked_at = now() WHERE tenant_id = $1 AND revoked_at IS NULL",
                       1, p, &keys, &e) < 0 ||
            cp_db_exec(c->api->db,
                       "UPDATE secrets SET deleted_at = now(), updated_at = now(), key_id = NULL, wrapped_key = NULL, "
                       "ciphertext = NULL WHERE tenant_id = $1 AND deleted_at IS NULL",
                       1, p, &secrets, &e) < 0 ||
            cp_db_exec(c->api->db, "UPDATE tenants SET deleted_at = now() WHERE id = $1", 1, p, NULL, &e) < 0 ||
            cp__audit(c, "tenant.delete", id, NULL, &e) < 0)
                goto abort;
        char ntpl[16];
        snprintf(ntpl, sizeof(ntpl), "%d", PQntuples(tpls));
        const char *q[] = {id, PQcmdTuples(keys), ntpl, PQcmdTuples(secrets)};
        if (cp__query_json(c->api,
                           "SELECT jsonb_build_object('id', id, 'name', name, 'deleted_at', api_ts(deleted_at), "
                           "'keys_revoked', $2::integer, 'templates_deleted', $3::integer, "
                           "'secrets_revoked', $4::integer) FROM tenants WHERE id = $1",
                           4, q, NULL, &out, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 200, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

void cp__h_key_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_named_req r;
        if (cp_req_key_create(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* Tenants make keys for themselves; admins also for other tenants,
         * and only admins make admin keys. */
        const char *tenant = r.tenant_id[0] ? r.tenant_id : c->who.tenant_id;
        if (!c->who.admin && (strcmp(tenant, c->who.tenant_id) != 0 || r.admin)) {
                cp__failf(c, SP_E_PERMISSION, "only an admin key can make keys for another tenant or admin keys");
                return;
        }
        if (cp__mutation_begin(c))
                return;
        _cleanup_free_ char *secret = NULL;
        char id[SP_ID_MAX];
        if (cp_apikey_create(c->api->db, tenant, r.name, r.admin, &secret, id, &e) < 0 ||
            cp__audit(c, "key.create", id, NULL, &e) < 0) {
                if (e && e->code == SP_E_NOT_FOUND) {
                        sp_error_free(e);
                        e = NULL;
                        sp_error_set(&e, SP_E_NOT_FOUND, "tenant %.64s not found", tenant);
                }
                cp__mutation_abort(c, e);
                return;
        }
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object_object_add(out, "id", json_object_new_string(id));
        json_object_object_add(out, "tenant_id", json_object_new_string(tenant));
        json_object_object_add(out, "name", json_object_new_string(r.name));
        json_object_object_add(out, "admin", json_object_new_boolean(r.admin));
        json_object_object_add(out, "secret", json_object_new_string(secret));
        c->idem_secret = true; /* the secret is shown once */
        cp__mutation_commit(c, 201, out);
}

void cp__h_key_delete(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        if (cp__mutation_begin(c))
                return;
        /* An admin revokes any tenant's key; a tenant only its own (a foreign id reads as missing). */
        if (cp_apikey_revoke(c->api->db, c->who.admin ? NULL : c->who.tenant_id, id, &e) < 0 ||
            cp__audit(c, "key.revoke", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__mutation_commit(c, 204, NULL);
}

/* Answers one page of a listing, oldest first: sql selects (object as text,
 * api_ts(created_at), id) rows of ids with prefix; its first nfixed
 * parameters are fixed (borrowed), then come the cursor's created_at and id
 * (NULL on the first page) and the row limit. The answer is {key: [...],
 * "next_cursor": ...}, with ?limit= (1..1000 [100]) and ?cursor= as in
 * GET /v1/sandboxes. */
static void list_page(cp_call *c, const char *prefix, const char *key, const char *sql, int nfixed,
                      const char *const *fixed)
{
        _cleanup_error_ sp_error *e = NULL;
        int64_t limit = 0;
        char cur_at[40] = "", cur_id[32] = "";
        const char *cursor = sp_http_request_query(c->req, "cursor");
        if (cp_req_count("limit", sp_http_request_query(c->req, "limit"), 100, 1000, &limit, &e) < 0 ||
            (cursor && cursor[0] &&
             cp_cursor_decode_for(prefix, cursor, cur_at, sizeof(cur_at), cur_id, sizeof(cur_id), &e) < 0)) {
                cp__fail(c, e);
                return;
        }
        char nrows[24];
        snprintf(nrows, sizeof(nrows), "%lld", (long long)(limit + 1));
        const char *params[4] = {NULL};
        for (int i = 0; i < nfixed; i++)
                params[i] = fixed[i];
        params[nfixed] = cur_at[0] ? cur_at : NULL;
        params[nfixed + 1] = cur_at[0] ? cur_id : NULL;
        params[nfixed + 2] = nrows;
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db, sql, nfixed + 3, params, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply_page(c, res, limit, key, prefix);
}

void cp__h_tenant_list(cp_call *c)
{
        list_page(c, "ten", "tenants",
                  "SELECT jsonb_build_object('id', t.id, 'name', t.name, 'created_at', api_ts(t.created_at))::text, "
                  "api_ts(t.created_at), t.id FROM tenants t WHERE t.deleted_at IS NULL "
                  "AND ($1::text IS NULL OR (t.created_at, t.id) > ($1::timestamptz, $2::text)) "
                  "ORDER BY t.created_at, t.id LIMIT $3::integer",
                  0, NULL);
}

void cp__h_key_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *tenant = sp_http_request_query(c->req, "tenant_id");
        if (tenant && !tenant[0])
                tenant = NULL;
        if (tenant && strlen(tenant) >= SP_ID_MAX) {
                cp__failf(c, SP_E_INVALID, "tenant_id must be shorter than %d bytes", SP_ID_MAX);
                return;
        }
        /* A tenant's key lists its own tenant's keys only; an admin's, any tenant's or every key. */
        if (!c->who.admin) {
                if (tenant && strcmp(tenant, c->who.tenant_id) != 0) {
                        cp__failf(c, SP_E_PERMISSION, "only an admin key can list another tenant's keys");
                        return;
                }
                tenant = c->who.tenant_id;
        } else if (tenant) {
                _cleanup_pgresult_ PGresult *res = NULL;
                const char *p[] = {tenant};
                if (cp_db_exec(c->api->db, "SELECT 1 FROM tenants WHERE id = $1", 1, p, &res, &e) < 0) {
                        cp__fail(c, e);
                        return;
                }
                if (PQntuples(res) != 1) {
                        cp__failf(c, SP_E_NOT_FOUND, "tenant %.64s not found", tenant);
                        return;
                }
        }
        const char *fixed[] = {tenant};
        list_page(c, "key", "keys",
                  "SELECT jsonb_build_object('id', k.id, 'tenant_id', k.tenant_id, 'name', k.name, 'admin', k.admin, "
                  "'created_at', api_ts(k.created_at), 'revoked', k.revoked_at IS NOT NULL, "
                  "'revoked_at', api_ts(k.revoked_at))::text, api_ts(k.created_at), k.id FROM api_keys k "
                  "WHERE ($1::text IS NULL OR k.tenant_id = $1) "
                  "AND ($2::text IS NULL OR (k.created_at, k.id) > ($2::timestamptz, $3::text)) "
                  "ORDER BY k.created_at, k.id LIMIT $4::integer",
                  1, fixed);
}

void cp__h_join_token_list(cp_call *c)
{
        list_page(c, "jtk", "join_tokens",
                  "SELECT jsonb_build_object('id', j.id, 'role', coalesce(j.role, 'any'), "
                  "'description', j.description, 'uses_left', j.uses_left, "
                  "'state', CASE WHEN j.revoked_at IS NOT NULL THEN 'revoked' WHEN j.expires_at <= now() "
                  "THEN 'expired' WHEN j.uses_left = 0 THEN 'used' ELSE 'active' END, "
                  "'expires_at', api_ts(j.expires_at), 'created_at', api_ts(j.created_at), "
                  "'revoked_at', api_ts(j.revoked_at))::text, api_ts(j.created_at), j.id FROM join_tokens j "
                  "WHERE ($1::text IS NULL OR (j.created_at, j.id) > ($1::timestamptz, $2::text)) "
                  "ORDER BY j.created_at, j.id LIMIT $3::integer",
                  0, NULL);
}
