/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates: a tenant's own and the public ones (owned by the system tenant,
 * e.g. `base`). Building one records it and a template_build operation; the
 * controllers import it on every worker.
 */
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"

#define VISIBLE "(t.tenant_id = $2 OR t.tenant_id = 'ten_system') AND t.deleted_at IS NULL"

static void not_found(cp_call *c, const char *name)
{
        cp__failf(c, SP_E_NOT_FOUND, "template '%.128s' not found", name);
}

void cp__h_template_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        size_t len = 0;
        const char *body = sp_http_request_body(c->req, &len);
        cp_template_create_req r;
        if (cp_req_template_create(body, len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* A path names a file on the workers' hosts: whoever may name one can
         * read whatever the worker (root) can. Only operators may. */
        if (!c->who.admin && cp_req_template_host_path(&r)) {
                cp__failf(c, SP_E_PERMISSION,
                          "source %s reads a path on the workers' hosts: only an admin key may register it", r.source);
                cp_template_create_req_free(&r);
                return;
        }
        /* A mirror is a URL the workers fetch from, inside the cluster's network:
         * a tenant naming one could make them reach any address the hosts can
         * (the cluster's own services, a cloud's metadata). Tenants get the
         * operator's mirror. */
        if (!c->who.admin && r.mirror) {
                cp__failf(c, SP_E_PERMISSION,
                          "a debootstrap mirror is fetched from by the workers: only an admin key may choose one "
                          "(without it the workers use the operator's)");
                cp_template_create_req_free(&r);
                return;
        }
        if (!c->who.admin && r.tenant_id[0]) {
                cp__failf(c, SP_E_PERMISSION, "only an admin key may register a template for a tenant");
                cp_template_create_req_free(&r);
                return;
        }
        const char *owner = r.tenant_id[0] ? r.tenant_id : c->who.tenant_id;
        _cleanup_json_ json_object *spec = json_object_new_object();
        json_object_object_add(spec, "source", json_object_new_string(r.source));
        if (r.path)
                json_object_object_add(spec, "path", json_object_new_string(r.path));
        if (r.suite)
                json_object_object_add(spec, "suite", json_object_new_string(r.suite));
        if (r.mirror)
                json_object_object_add(spec, "mirror", json_object_new_string(r.mirror));
        char warm[24];
        snprintf(warm, sizeof(warm), "%lld", (long long)r.warm);
        if (cp__mutation_begin(c)) {
                cp_template_create_req_free(&r);
                return;
        }
        char id[SP_ID_MAX], op[SP_ID_MAX], deadline[24];
        snprintf(deadline, sizeof(deadline), "%lld", (long long)c->api->cfg.operation_deadline_s * 6);
        const char *params[] = {owner, r.name, id, sp_json_str(spec), warm};
        const char *pub[] = {r.name};
        const char *own[] = {owner};
        _cleanup_pgresult_ PGresult *clash = NULL, *tenant = NULL;
        _cleanup_json_ json_object *out = NULL;
        if (r.tenant_id[0]) {
                if (cp_db_exec(c->api->db, "SELECT 1 FROM tenants WHERE id = $1 AND deleted_at IS NULL", 1, own,
                               &tenant, &e) < 0)
                        goto abort;
                if (PQntuples(tenant) != 1) {
                        sp_error_set(&e, SP_E_NOT_FOUND, "tenant %.64s not found", owner);
                        goto abort;
                }
        }
        if (cp_db_exec(c->api->db, "SELECT 1 FROM templates WHERE tenant_id = 'ten_system' AND name = $1", 1, pub,
                       &clash, &e) < 0)
                goto abort;
        if (PQntuples(clash) > 0) {
                sp_error_set(&e, SP_E_CONFLICT, "'%s' is the name of a public template", r.name);
                goto abort;
        }
        if (sp_id_new("tpl", id, &e) < 0)
                goto abort;
        if (cp_db_exec(c->api->db,
                       "INSERT INTO templates (tenant_id, name, id, spec, state, warm) "
                       "VALUES ($1, $2, $3, $4::jsonb, 'building', $5::integer)",
                       5, params, NULL, &e) < 0) {
                if (e->code == SP_E_CONFLICT) {
                        sp_error_free(e);
                        e = NULL;
                        sp_error_set(&e, SP_E_CONFLICT, "a template named '%s' already exists", r.name);
                }
                goto abort;
        }
        if (sp_id_new("op", op, &e) < 0)
                goto abort;
        const char *opp[] = {op, c->who.tenant_id, id, deadline};
        const char *env[] = {op, id};
        if (cp_db_exec(c->api->db,
                       "INSERT INTO operations (id, tenant_id, kind, target_id, state, deadline_at) "
                       "VALUES ($1, $2, 'template_build', $3, 'pending', now() + make_interval(secs => $4::integer))",
                       4, opp, NULL, &e) < 0 ||
            cp__audit(c, "template.create", id, spec, &e) < 0 ||
            cp__query_json(c->api,
                           "SELECT jsonb_build_object('operation', api_operation(o), 'template', api_template(t)) "
                           "FROM operations o, templates t WHERE o.id = $1 AND t.id = $2",
                           2, env, NULL, &out, &e) < 0)
                goto abort;
        cp_template_create_req_free(&r);
        cp__mutation_commit(c, 202, out);
        return;
abort:
        cp_template_create_req_free(&r);
        cp__mutation_abort(c, e);
}

void cp__h_template_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = NULL;
        const char *params[] = {c->who.tenant_id};
        if (cp__query_json(
                    c->api,
                    "SELECT jsonb_build_object('templates', coalesce(jsonb_agg(api_template(t) ORDER BY t.name), "
                    "'[]'::jsonb)) FROM templates t "
                    "WHERE (t.tenant_id = $1 OR t.tenant_id = 'ten_system') AND t.deleted_at IS NULL",
                    1, params, NULL, &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply(c, 200, out);
}

void cp__h_template_get(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *name = sp_http_request_param(c->req, "name");
        _cleanup_json_ json_object *out = NULL;
        const char *params[] = {name, c->who.tenant_id};
        if (cp__query_json(c->api,
                           "SELECT api_template(t) FROM templates t WHERE t.name = $1 AND " VISIBLE
                           " ORDER BY (t.tenant_id = $2) DESC LIMIT 1",
                           2, params, NULL, &out, &e) < 0) {
                if (e->code == SP_E_NOT_FOUND)
                        not_found(c, name);
                else
                        cp__fail(c, e);
                return;
        }
        cp__reply(c, 200, out);
}

void cp__h_template_delete(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *name = sp_http_request_param(c->req, "name");
        _cleanup_pgresult_ PGresult *res = NULL, *users = NULL;
        _cleanup_json_ json_object *out = NULL;
        if (cp__mutation_begin(c))
                return;
        const char *params[] = {name, c->who.tenant_id};
        if (cp_db_exec(c->api->db,
                       "SELECT id, state FROM templates WHERE name = $1 AND tenant_id = $2 AND deleted_at IS NULL "
                       "FOR UPDATE",
                       2, params, &res, &e) < 0)
                goto abort;
        if (PQntuples(res) != 1) {
                /* Public templates are not the tenant's to delete: they answer like missing ones. */
                sp_error_set(&e, SP_E_NOT_FOUND, "template '%.128s' not found", name);
                goto abort;
        }
        char id[SP_ID_MAX];
        snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
        const char *ip[] = {id};
        if (cp_db_exec(c->api->db,
                       "SELECT count(*) FROM sandboxes WHERE template_id = $1 AND deleted_at IS NULL "
                       "AND desired_state <> 'deleted'",
                       1, ip, &users, &e) < 0)
                goto abort;
        if (strcmp(PQgetvalue(users, 0, 0), "0") != 0) {
                sp_error_set(&e, SP_E_CONFLICT, "template '%.128s' is used by %s sandboxes", name,
                             PQgetvalue(users, 0, 0));
                goto abort;
        }
        char op[SP_ID_MAX];
        const char *opp[] = {op, c->who.tenant_id, id};
        const char *env[] = {op, id};
        if (sp_id_new("op", op, &e) < 0 ||
            cp_db_exec(c->api->db, "UPDATE templates SET state = 'deleting', updated_at = now() WHERE id = $1", 1, ip,
                       NULL, &e) < 0 ||
            cp_db_exec(c->api->db,
                       "INSERT INTO operations (id, tenant_id, kind, target_id, state, deadline_at) "
                       "VALUES ($1, $2, 'template_delete', $3, 'pending', now() + interval '1 hour')",
                       3, opp, NULL, &e) < 0 ||
            cp__audit(c, "template.delete", id, NULL, &e) < 0 ||
            cp__query_json(c->api,
                           "SELECT jsonb_build_object('operation', api_operation(o), 'template', api_template(t)) "
                           "FROM operations o, templates t WHERE o.id = $1 AND t.id = $2",
                           2, env, NULL, &out, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 202, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

void cp__h_template_warm(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *name = sp_http_request_param(c->req, "name");
        size_t len = 0;
        const char *body = sp_http_request_body(c->req, &len);
        int64_t warm = 0;
        if (cp_req_warm(body, len, &warm, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (cp__mutation_begin(c))
                return;
        char w[24];
        snprintf(w, sizeof(w), "%lld", (long long)warm);
        /* Admins size the public templates' pools; tenants their own. */
        const char *params[] = {name, c->who.tenant_id, w, c->who.admin ? "true" : "false"};
        _cleanup_pgresult_ PGresult *res = NULL;
        _cleanup_json_ json_object *out = NULL;
        if (cp_db_exec(
                    c->api->db,
                    "UPDATE templates t SET warm = $3::integer, updated_at = now() WHERE t.name = $1 "
                    "AND t.deleted_at IS NULL AND (t.tenant_id = $2 OR ($4::boolean AND t.tenant_id = 'ten_system')) "
                    "RETURNING api_template(t)::text, t.id",
                    4, params, &res, &e) < 0)
                goto abort;
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, "template '%.128s' not found", name);
                goto abort;
        }
        if (cp__audit(c, "template.warm", PQgetvalue(res, 0, 1), NULL, &e) < 0 ||
            cp_db_exec(c->api->db, "SELECT pg_notify('space_work', 'warm')", 0, NULL, NULL, &e) < 0)
                goto abort;
        const char *v = PQgetvalue(res, 0, 0);
        if (sp_json_parse(v, strlen(v), &out, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 200, out);
        return;
abort:
        cp__mutation_abort(c, e);
}
