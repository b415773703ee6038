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
        if (cp_worker_list(c->api->db, &arr, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object_object_add(out, "workers", json_object_get(arr));
        cp__reply(c, 200, out);
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

/* Sets a worker's admin state (or lifts its quarantine), with its audit record, then answers the worker. */
static void worker_admin(cp_call *c, const char *admin_state)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *w = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        if (cp__mutation_begin(c))
                return;
        char action[48];
        snprintf(action, sizeof(action), "worker.%s",
                 !admin_state                           ? "unquarantine"
                 : strcmp(admin_state, "active") == 0   ? "uncordon"
                 : strcmp(admin_state, "cordoned") == 0 ? "cordon"
                                                        : "drain");
        int r = admin_state ? cp_worker_set_admin_state(c->api->db, id, admin_state, &e)
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
void cp__h_worker_unquarantine(cp_call *c)
{
        worker_admin(c, NULL);
}

void cp__h_join_token_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        size_t len = 0;
        const char *body = sp_http_request_body(c->req, &len);
        cp_join_token_req r;
        if (cp_req_join_token(body, len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (cp__mutation_begin(c))
                return;
        _cleanup_free_ char *token = NULL;
        _cleanup_json_ json_object *out = NULL;
        char id[SP_ID_MAX];
        if (cp_jointoken_create(c->api->db, r.description, r.ttl_s, r.uses, &token, id, &e) < 0 ||
            cp__audit(c, "join_token.create", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        const char *params[] = {id, token};
        if (cp__query_json(c->api,
                           "SELECT jsonb_build_object('id', id, 'token', $2::text, 'expires_at', api_ts(expires_at), "
                           "'uses', uses_left, 'description', description) FROM join_tokens WHERE id = $1",
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
        if (cp__mutation_begin(c))
                return;
        if (cp_jointoken_revoke(c->api->db, id, &e) < 0 || cp__audit(c, "join_token.revoke", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__mutation_commit(c, 204, NULL);
}

void cp__h_tenant_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        size_t len = 0;
        const char *body = sp_http_request_body(c->req, &len);
        cp_named_req r;
        if (cp_req_tenant_create(body, len, &r, &e) < 0) {
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

void cp__h_key_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        size_t len = 0;
        const char *body = sp_http_request_body(c->req, &len);
        cp_named_req r;
        if (cp_req_key_create(body, len, &r, &e) < 0) {
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
        if (cp_apikey_revoke(c->api->db, c->who.tenant_id, id, &e) < 0 ||
            cp__audit(c, "key.revoke", id, NULL, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__mutation_commit(c, 204, NULL);
}
