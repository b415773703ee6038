/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingress (docs/api.md, "Ingress"): users reach a server listening in a
 * sandbox through the data plane, at {port}-{id}.<ingress domain> or at
 * <data plane>/v1/sandboxes/{id}/ports/{port}/. The control plane keeps who
 * may (the sandbox's mode: "token" or "public"), answers the URL templates
 * with every sandbox, and mints the ingress tokens; the data plane asks it
 * where a sandbox is (ResolveSandbox, fleet/dataplane.c) and checks the
 * tokens itself.
 */
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "store/tokenkeys.h"

#define NOT_FOUND_FMT "sandbox %.64s not found"

_Static_assert(CP_INGRESS_TOKEN_TTL_MAX_S <= CP_TOKEN_MAX_TTL_S,
               "an ingress token lives no longer than a retired key is published");

void cp__ingress_urls(const cp_api *api, const char *id, char url[static CP_INGRESS_URL_MAX],
                      char path_url[static CP_INGRESS_URL_MAX])
{
        /* A host name has no '_': the data plane reads the id back with '-'
         * after its prefix as '_' (ids are "<prefix>_<base32>", the prefix
         * letters only). */
        char host_id[SP_ID_MAX];
        snprintf(host_id, sizeof(host_id), "%s", id);
        for (char *p = host_id; *p; p++)
                if (*p == '_')
                        *p = '-';
        snprintf(url, CP_INGRESS_URL_MAX, "%s%s%s", api->ingress_host_prefix, host_id, api->ingress_host_suffix);
        snprintf(path_url, CP_INGRESS_URL_MAX, "%s/v1/sandboxes/%s/ports/{port}/", api->dataplane_url, id);
}

void cp__sandbox_ingress_urls(cp_api *api, json_object *o)
{
        json_object *ingress = NULL, *id = NULL;
        if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "ingress", &ingress) ||
            !json_object_is_type(ingress, json_type_object) || !json_object_object_get_ex(o, "id", &id) ||
            !json_object_is_type(id, json_type_string))
                return;
        char url[CP_INGRESS_URL_MAX], path_url[CP_INGRESS_URL_MAX];
        cp__ingress_urls(api, json_object_get_string(id), url, path_url);
        json_object_object_add(ingress, "url", json_object_new_string(url));
        json_object_object_add(ingress, "path_url", json_object_new_string(path_url));
}

void cp__operation_ingress_urls(cp_api *api, json_object *op)
{
        json_object *result = NULL;
        /* A sandbox's operation holds the sandbox as it was when it
         * finished; a template's holds no "ingress", and is left alone. */
        if (op && json_object_object_get_ex(op, "result", &result))
                cp__sandbox_ingress_urls(api, result);
}

/* ---- PUT /v1/sandboxes/{id}/ingress ---- */

void cp__h_sandbox_ingress(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        cp_sandbox_ingress_req r;
        if (cp_req_sandbox_ingress(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (cp__mutation_begin(c))
                return;
        const char *ar = r.auto_resume < 0 ? NULL : r.auto_resume ? "true" : "false";
        const char *params[] = {id, c->who.tenant_id, r.mode[0] ? r.mode : NULL, ar};
        _cleanup_pgresult_ PGresult *res = NULL;
        _cleanup_json_ json_object *out = NULL, *detail = json_object_new_object();
        if (r.mode[0])
                json_object_object_add(detail, "mode", json_object_new_string(r.mode));
        if (r.auto_resume >= 0)
                json_object_object_add(detail, "auto_resume", json_object_new_boolean(r.auto_resume));
        /* A sandbox being deleted is gone for this as for the other changes. */
        if (cp_db_exec(c->api->db,
                       "UPDATE sandboxes SET ingress = coalesce($3, ingress), "
                       "auto_resume = coalesce($4::boolean, auto_resume), updated_at = now() "
                       "WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL AND desired_state <> 'deleted' "
                       "RETURNING api_sandbox(sandboxes)::text",
                       4, params, &res, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, NOT_FOUND_FMT, id);
                cp__mutation_abort(c, e);
                return;
        }
        const char *v = PQgetvalue(res, 0, 0);
        if (cp__audit(c, "sandbox.ingress", id, detail, &e) < 0 || sp_json_parse(v, strlen(v), &out, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        cp__sandbox_ingress_urls(c->api, out);
        cp__mutation_commit(c, 200, out);
}

/* ---- POST /v1/sandboxes/{id}/ingress/tokens ---- */

void cp__h_sandbox_ingress_token(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        int64_t ttl = 0;
        if (cp_req_ingress_token(c->body, c->body_len, &ttl, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* Any state but on its way out: a token may be minted before the
         * server in the sandbox runs, and lives on across a pause. */
        const char *params[] = {id, c->who.tenant_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db,
                       "SELECT id FROM sandboxes WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL "
                       "AND desired_state <> 'deleted' AND observed_state NOT IN ('deleting', 'deleted')",
                       2, params, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (PQntuples(res) != 1) {
                cp__failf(c, SP_E_NOT_FOUND, NOT_FOUND_FMT, id);
                return;
        }
        const char *sbx = PQgetvalue(res, 0, 0);
        /* No "wkr": the data plane resolves the worker (ResolveSandbox), since
         * the sandbox may move while the token lives. */
        _cleanup_json_ json_object *claims = json_object_new_object();
        json_object_object_add(claims, "typ", json_object_new_string("ingress"));
        json_object_object_add(claims, "scope", json_object_new_string("read"));
        json_object_object_add(claims, "sbx", json_object_new_string(sbx));
        json_object_object_add(claims, "ten", json_object_new_string(c->who.tenant_id));
        if (c->who.key_id[0]) /* the key that minted it: revoking the key ends the token */
                json_object_object_add(claims, "akey", json_object_new_string(c->who.key_id));
        _cleanup_json_ json_object *detail = json_object_new_object();
        json_object_object_add(detail, "ttl_s", json_object_new_int64(ttl));
        _cleanup_free_ char *token = NULL;
        char expires[32];
        if (cp__token_mint(c->api, claims, ttl, &token, expires, &e) < 0 ||
            cp__audit(c, "sandbox.ingress_token", sbx, detail, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        char url[CP_INGRESS_URL_MAX], path_url[CP_INGRESS_URL_MAX];
        cp__ingress_urls(c->api, sbx, url, path_url);
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object_object_add(out, "token", json_object_new_string(token));
        json_object_object_add(out, "expires_at", json_object_new_string(expires));
        json_object_object_add(out, "url", json_object_new_string(url));
        json_object_object_add(out, "path_url", json_object_new_string(path_url));
        cp__reply(c, 201, out);
}
