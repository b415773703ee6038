/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates: a tenant's own and the public ones (owned by the system tenant,
 * e.g. `base`). Building one records it and a template_build operation; the
 * controllers import it on every worker.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

#define VISIBLE "(t.tenant_id = $2 OR t.tenant_id = 'ten_system') AND t.deleted_at IS NULL"

static void not_found(cp_call *c, const char *name)
{
        cp__failf(c, SP_E_NOT_FOUND, "template '%.128s' not found", name);
}

/* ---- uploads ------------------------------------------------------------
 *
 * A template of source "upload" is recorded 'uploading' with the worker that
 * will take its archive (a ready, active worker with the most room in its
 * storage pool), and the answer carries a data-plane URL and a template token
 * for it. The controllers make it a build once that worker has imported it
 * (reconcile.c). Its bytes count against the tenant's template storage: a
 * token may upload at most what is left of it (at most the per-template
 * bound), reserved until the template is in; the worker then reports what it
 * holds, the archive and the files unpacked from it, which is the template's
 * size from then on. The reservation bounds both: the token's `max` the
 * archive, its `sto` the archive and the unpacked files together (the worker
 * stops an import, e.g. a decompression bomb, there). A tenant's template
 * built by the workers (debootstrap) reserves the same way until it is built
 * (the workers import at most the reservation, ctrl/templates.c). Public
 * templates (the system tenant's, made by admins) count against no tenant's
 * storage. */

/* SP_E_CONFLICT when name is a public template's: a tenant's own would hide it. */
static int public_name(cp_call *c, const char *name, sp_error **e)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {name};
        if (cp_db_exec(c->api->db, "SELECT 1 FROM templates WHERE tenant_id = 'ten_system' AND name = $1", 1, p, &res,
                       e) < 0)
                return -SP_E_UNAVAILABLE;
        if (PQntuples(res) > 0)
                return sp_error_set(e, SP_E_CONFLICT, "'%s' is the name of a public template", name);
        return 0;
}

/* SP_E_LIMIT when the tenant has --tenant-template-builds templates uploading,
 * building or being deleted already: each is an import on the workers
 * (unpacking, copying, a debootstrap run), and one tenant must not hold them
 * all. A template being deleted counts until every worker has said it is gone
 * (a worker's delete cancels its import and answers once it stopped), so that
 * deleting and creating again cannot run more at once. Called under the
 * tenant's row lock (upload_room), so that two creates cannot both take the
 * last one. Public templates (the system tenant's, an admin's) are not
 * counted. */
static int builds_room(cp_call *c, const char *tenant, sp_error **e)
{
        if (strcmp(tenant, "ten_system") == 0)
                return 0;
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {tenant};
        if (cp_db_exec(c->api->db,
                       "SELECT count(*) FROM templates WHERE tenant_id = $1 AND deleted_at IS NULL "
                       "AND state IN ('uploading', 'building', 'deleting')",
                       1, p, &res, e) < 0)
                return -SP_E_UNAVAILABLE;
        long long n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        if (n >= c->api->cfg.tenant_template_builds)
                return sp_error_set(e, SP_E_LIMIT,
                                    "the tenant has %lld templates uploading, building or being deleted, its most at "
                                    "once: wait for one to be ready or gone, or delete one",
                                    n);
        return 0;
}

/* SP_E_LIMIT when one more template would take the tenant past its
 * templates quota. Called under the tenant's row lock (upload_room); public
 * templates (the system tenant's) are not counted. */
static int count_room(cp_call *c, const char *tenant, sp_error **e)
{
        if (strcmp(tenant, "ten_system") == 0)
                return 0;
        return cp__quota_check(c, tenant, "{\"templates\":1}", e);
}

/* The worker for a new upload: id and RPC address. */
static int upload_worker(cp_call *c, char id[SP_ID_MAX], char addr[272], sp_error **e)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db,
                       "SELECT id, address FROM workers WHERE state = 'ready' AND admin_state = 'active' "
                       "ORDER BY coalesce((capacity->>'disk_mb')::bigint - (observed->'used'->>'disk_mb')::bigint, 0) "
                       "DESC, id LIMIT 1",
                       0, NULL, &res, e) < 0)
                return -SP_E_UNAVAILABLE;
        if (PQntuples(res) != 1)
                return sp_error_set(e, SP_E_UNAVAILABLE, "no ready worker can take an upload now: try again later");
        snprintf(id, SP_ID_MAX, "%s", PQgetvalue(res, 0, 0));
        snprintf(addr, 272, "%s", PQgetvalue(res, 0, 1));
        return 0;
}

/* What is left of the tenant's template storage (other than template
 * `except`), under a lock on the tenant's row so that two uploads cannot
 * both take the last of it. */
static int upload_room(cp_call *c, const char *tenant, const char *except, int64_t *ret, sp_error **e)
{
        _cleanup_pgresult_ PGresult *lock = NULL, *res = NULL;
        const char *p[] = {tenant, except ? except : ""};
        if (strcmp(tenant, "ten_system") == 0) {
                *ret = c->api->cfg.template_upload_max_bytes;
                return 0;
        }
        if (cp_db_exec(c->api->db, "SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE", 1, p, &lock, e) < 0 ||
            cp_db_exec(c->api->db,
                       "SELECT coalesce(sum(coalesce(size_bytes, upload_max_bytes, 0)), 0)::bigint FROM templates "
                       "WHERE tenant_id = $1 AND id <> $2 AND deleted_at IS NULL",
                       2, p, &res, e) < 0)
                return -SP_E_UNAVAILABLE;
        int64_t used = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        /* Its template_bytes quota: --tenant-template-bytes unless an admin set the tenant's own. */
        int64_t quota = c->api->cfg.tenant_template_bytes;
        if (cp__quota_limit(c, tenant, CP_QUOTA_TEMPLATE_BYTES, &quota, e) < 0)
                return -SP_E_UNAVAILABLE;
        if (quota == CP_QUOTA_NONE) {
                *ret = c->api->cfg.template_upload_max_bytes;
                return 0;
        }
        if (used >= quota) {
                c->api->quota_refusals_total[CP_QUOTA_TEMPLATE_BYTES]++;
                return sp_error_set(e, SP_E_LIMIT,
                                    "tenant quota exceeded: template_bytes limit %lld, in use %lld: the tenant's "
                                    "templates hold %lld of its %lld bytes of template storage: delete one first",
                                    (long long)quota, (long long)used, (long long)used, (long long)quota);
        }
        int64_t room = quota - used;
        *ret = room < c->api->cfg.template_upload_max_bytes ? room : c->api->cfg.template_upload_max_bytes;
        return 0;
}

/* Adds "upload": {url, token, expires_at, max_bytes} to out. */
static int upload_grant(cp_call *c, const char *tenant, const char *tpl_id, const char *format, const char *addr,
                        int64_t max, json_object *out, sp_error **e)
{
        _cleanup_json_ json_object *claims = json_object_new_object();
        json_object_object_add(claims, "typ", json_object_new_string("template"));
        json_object_object_add(claims, "scope", json_object_new_string("write"));
        json_object_object_add(claims, "ten", json_object_new_string(tenant));
        if (c->who.key_id[0])
                json_object_object_add(claims, "akey", json_object_new_string(c->who.key_id));
        json_object_object_add(claims, "tpl", json_object_new_string(tpl_id));
        cp__token_worker_claims(c->api, claims, NULL, addr);
        json_object_object_add(claims, "fmt", json_object_new_string(format));
        json_object_object_add(claims, "max", json_object_new_int64(max));
        /* The tenant's storage it may take, archive and unpacked files together. */
        if (strcmp(tenant, "ten_system") != 0)
                json_object_object_add(claims, "sto", json_object_new_int64(max));
        _cleanup_free_ char *token = NULL;
        char expires[32], url[1200];
        if (cp__token_mint(c->api, claims, c->api->cfg.attach_token_ttl_s, &token, expires, e) < 0)
                return -SP_E_INTERNAL;
        snprintf(url, sizeof(url), "%s/v1/templates/%s/upload", c->api->dataplane_url, tpl_id);
        json_object *up = json_object_new_object();
        json_object_object_add(up, "url", json_object_new_string(url));
        json_object_object_add(up, "token", json_object_new_string(token));
        json_object_object_add(up, "expires_at", json_object_new_string(expires));
        json_object_object_add(up, "max_bytes", json_object_new_int64(max));
        json_object_object_add(out, "upload", up);
        return 0;
}

static void upload_create(cp_call *c, const cp_template_create_req *r, const char *owner)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *spec = json_object_new_object(), *out = NULL;
        /* Every cleanup variable is declared before the first goto. */
        _cleanup_pgresult_ PGresult *same = NULL;
        char id[SP_ID_MAX], wid[SP_ID_MAX], addr[272], max_s[24], warm[24];
        int64_t max = 0;
        if (cp__mutation_begin(c))
                return;
        c->idem_secret = true; /* the answer holds a token: a replay mints none */
        if (public_name(c, r->name, &e) < 0)
                goto abort;
        /* A name taken is a conflict before the storage is looked at (spacectl
         * push then takes a template that waits for its archive up again). */
        const char *taken[] = {owner, r->name};
        if (cp_db_exec(c->api->db, "SELECT 1 FROM templates WHERE tenant_id = $1 AND name = $2", 2, taken, &same, &e) <
            0)
                goto abort;
        if (PQntuples(same) > 0) {
                sp_error_set(&e, SP_E_CONFLICT, "a template named '%s' already exists", r->name);
                goto abort;
        }
        if (upload_room(c, owner, NULL, &max, &e) < 0 || builds_room(c, owner, &e) < 0 ||
            count_room(c, owner, &e) < 0 || upload_worker(c, wid, addr, &e) < 0 || sp_id_new("tpl", id, &e) < 0)
                goto abort;
        json_object_object_add(spec, "source", json_object_new_string("upload"));
        json_object_object_add(spec, "format", json_object_new_string(r->format));
        json_object_object_add(spec, "worker", json_object_new_string(wid));
        snprintf(max_s, sizeof(max_s), "%lld", (long long)max);
        snprintf(warm, sizeof(warm), "%lld", (long long)r->warm);
        const char *params[] = {owner, r->name, id, sp_json_str(spec), warm, max_s};
        if (cp_db_exec(c->api->db,
                       "INSERT INTO templates (tenant_id, name, id, spec, state, warm, upload_max_bytes) "
                       "VALUES ($1, $2, $3, $4::jsonb, 'uploading', $5::integer, $6::bigint)",
                       6, params, NULL, &e) < 0) {
                if (e->code == SP_E_CONFLICT) {
                        sp_error_free(e);
                        e = NULL;
                        sp_error_set(&e, SP_E_CONFLICT, "a template named '%s' already exists", r->name);
                }
                goto abort;
        }
        const char *ip[] = {id};
        if (cp__audit(c, "template.create", id, spec, &e) < 0 ||
            cp__query_json(c->api,
                           "SELECT jsonb_build_object('template', api_template(t)) FROM templates t "
                           "WHERE t.id = $1",
                           1, ip, NULL, &out, &e) < 0 ||
            upload_grant(c, owner, id, r->format, addr, max, out, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 201, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

/* POST /v1/templates/{name}/upload: a new token for a template still
 * uploading (the first expired, or the worker that was to take it is gone:
 * then another one takes it). */
void cp__h_template_upload(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *name = sp_http_request_param(c->req, "name");
        if (cp__body_none(c) < 0)
                return;
        _cleanup_pgresult_ PGresult *res = NULL, *w = NULL;
        _cleanup_json_ json_object *out = NULL;
        if (cp__mutation_begin(c))
                return;
        c->idem_secret = true;
        const char *params[] = {name, c->who.tenant_id};
        if (cp_db_exec(c->api->db,
                       "SELECT id, state, spec->>'format', spec->>'worker', tenant_id FROM templates "
                       "WHERE name = $1 AND tenant_id = $2 AND deleted_at IS NULL FOR UPDATE",
                       2, params, &res, &e) < 0)
                goto abort;
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, "template '%.128s' not found", name);
                goto abort;
        }
        char id[SP_ID_MAX], wid[SP_ID_MAX], addr[272], max_s[24];
        snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
        if (strcmp(PQgetvalue(res, 0, 1), "uploading") != 0) {
                sp_error_set(&e, SP_E_CONFLICT,
                             "template '%.128s' is %s: only a template that is uploading takes an "
                             "archive",
                             name, PQgetvalue(res, 0, 1));
                goto abort;
        }
        const char *wp[] = {PQgetvalue(res, 0, 3)};
        if (cp_db_exec(c->api->db,
                       "SELECT id, address FROM workers WHERE id = $1 AND state = 'ready' AND admin_state = 'active'",
                       1, wp, &w, &e) < 0)
                goto abort;
        if (PQntuples(w) == 1) {
                snprintf(wid, sizeof(wid), "%s", PQgetvalue(w, 0, 0));
                snprintf(addr, sizeof(addr), "%s", PQgetvalue(w, 0, 1));
        } else if (upload_worker(c, wid, addr, &e) < 0) {
                goto abort;
        }
        int64_t max = 0;
        if (upload_room(c, c->who.tenant_id, id, &max, &e) < 0)
                goto abort;
        snprintf(max_s, sizeof(max_s), "%lld", (long long)max);
        const char *up[] = {id, wid, max_s};
        const char *ip[] = {id};
        if (cp_db_exec(c->api->db,
                       "UPDATE templates SET spec = jsonb_set(spec, '{worker}', to_jsonb($2::text)), "
                       "upload_max_bytes = $3::bigint, updated_at = now() WHERE id = $1",
                       3, up, NULL, &e) < 0 ||
            cp__audit(c, "template.upload_token", id, NULL, &e) < 0 ||
            cp__query_json(c->api,
                           "SELECT jsonb_build_object('template', api_template(t)) FROM templates t "
                           "WHERE t.id = $1",
                           1, ip, NULL, &out, &e) < 0 ||
            upload_grant(c, c->who.tenant_id, id, PQgetvalue(res, 0, 2), addr, max, out, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 200, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

void cp__h_template_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_template_create_req r;
        if (cp_req_template_create(c->body, c->body_len, &r, &e) < 0) {
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
        /* Without a mirror the workers fetch from debootstrap's default, on the
         * internet: a tenant's build needs the operator's mirror, which it
         * carries to the workers (--debootstrap-mirror). */
        if (!c->who.admin && strcmp(r.source, "debootstrap") == 0) {
                if (!c->api->debootstrap_mirror) {
                        cp__failf(c, SP_E_PRECONDITION,
                                  "this cluster builds no debootstrap templates for tenants: its operator has set no "
                                  "debootstrap mirror (the control plane's --debootstrap-mirror); upload an archive "
                                  "instead");
                        cp_template_create_req_free(&r);
                        return;
                }
                if (!(r.mirror = strdup(c->api->debootstrap_mirror))) {
                        cp__failf(c, SP_E_LIMIT, "out of memory");
                        cp_template_create_req_free(&r);
                        return;
                }
        }
        const char *owner = r.tenant_id[0] ? r.tenant_id : c->who.tenant_id;
        if (strcmp(r.source, "upload") == 0) {
                if (r.tenant_id[0]) {
                        /* An admin uploading for a tenant: the tenant must exist. */
                        _cleanup_pgresult_ PGresult *t = NULL;
                        const char *own[] = {owner};
                        if (cp_db_exec(c->api->db, "SELECT 1 FROM tenants WHERE id = $1 AND deleted_at IS NULL", 1, own,
                                       &t, &e) < 0 ||
                            PQntuples(t) != 1) {
                                if (!e)
                                        sp_error_set(&e, SP_E_NOT_FOUND, "tenant %.64s not found", owner);
                                cp__fail(c, e);
                                cp_template_create_req_free(&r);
                                return;
                        }
                }
                upload_create(c, &r, owner);
                cp_template_create_req_free(&r);
                return;
        }
        /* The spec is the workers' ImportTemplate request but the name and
         * the bound, which the controller adds (ctrl/templates.c). */
        _cleanup_json_ json_object *spec =
                pr_msg_encode(&pr_wk_import_template_schema, &(pr_wk_import_template){.source = r.source,
                                                                                      .path = r.path,
                                                                                      .suite = r.suite,
                                                                                      .mirror = r.mirror,
                                                                                      .packages = r.packages,
                                                                                      .user = r.user});
        char warm[24];
        snprintf(warm, sizeof(warm), "%lld", (long long)r.warm);
        if (cp__mutation_begin(c)) {
                cp_template_create_req_free(&r);
                return;
        }
        char id[SP_ID_MAX], op[SP_ID_MAX], deadline[24], reserve[24];
        snprintf(deadline, sizeof(deadline), "%lld", (long long)c->api->cfg.operation_deadline_s * 6);
        bool tenant_owned = strcmp(owner, "ten_system") != 0;
        const char *params[] = {owner, r.name, id, sp_json_str(spec), warm, tenant_owned ? reserve : NULL};
        int64_t room = 0;
        const char *own[] = {owner};
        _cleanup_pgresult_ PGresult *tenant = NULL;
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
        if (public_name(c, r.name, &e) < 0)
                goto abort;
        /* A tenant's template reserves its storage until the workers have
         * built it and said what it holds (ctrl/templates.c). */
        if (tenant_owned && (upload_room(c, owner, NULL, &room, &e) < 0 || builds_room(c, owner, &e) < 0 ||
                             count_room(c, owner, &e) < 0))
                goto abort;
        snprintf(reserve, sizeof(reserve), "%lld", (long long)room);
        if (sp_id_new("tpl", id, &e) < 0)
                goto abort;
        if (cp_db_exec(c->api->db,
                       "INSERT INTO templates (tenant_id, name, id, spec, state, warm, upload_max_bytes) "
                       "VALUES ($1, $2, $3, $4::jsonb, 'building', $5::integer, $6::bigint)",
                       6, params, NULL, &e) < 0) {
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
            /* Its build ends here, so that the delete runs now (a target's
             * operations run one at a time) and its workers' deletes cancel
             * their imports (ctrl/templates.c). */
            cp_db_exec(c->api->db,
                       "UPDATE operations SET state = 'failed', updated_at = now(), error = jsonb_build_object('code', "
                       "'failed', 'message', 'the template was deleted while it was built') WHERE target_id = $1 "
                       "AND kind = 'template_build' AND state IN ('pending', 'running')",
                       1, ip, NULL, &e) < 0 ||
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
        int64_t warm = 0;
        if (cp_req_warm(c->body, c->body_len, &warm, &e) < 0) {
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
