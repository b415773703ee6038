/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Egress (docs/networking.md): a tenant's egress profiles, a sandbox's
 * profile and its egress log.
 *
 * A profile is checked with the gateway's own parser (gateway/policy), so
 * what the API takes is what the gateway enforces. A sandbox's row keeps the
 * profile's name (spec.egress) and a copy of the whole profile
 * (spec.egress_profile), with a generation: a change bumps it, and the
 * generation its worker has confirmed is egress_applied. A change to one
 * sandbox is answered once its worker has it; a change to a profile reaches
 * the sandboxes using it through the controller (ctrl/reconcile.c), which
 * sends SetEgress wherever a worker is behind.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "policy/profile.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"
#include "store/egress.h"
#include "store/secrets.h"

#define PROFILES_MAX 100 /* per tenant */
#define PROFILE_NOT_FOUND "egress profile '%.64s' not found"

static json_object *builtin_json(const char *name)
{
        _cleanup_(gw_profile_unrefp) gw_profile *p = gw_profile_builtin(name);
        json_object *o = gw_profile_to_json(p);
        json_object_object_add(o, "builtin", json_object_new_boolean(true));
        return o;
}

static int check_private(cp_call *c, const gw_profile *p, sp_error **err)
{
        if (gw_profile_allows_private(p) && !c->who.admin)
                return sp_error_set(err, SP_E_PERMISSION,
                                    "field 'allow_private': only an admin may allow private addresses");
        return 0;
}

int cp__egress_resolve(cp_call *c, const char *name, const gw_profile *inline_profile, json_object **ret,
                       sp_error **err)
{
        *ret = NULL;
        if (inline_profile) {
                if (check_private(c, inline_profile, err) < 0)
                        return -SP_E_PERMISSION;
                *ret = gw_profile_to_json(inline_profile);
                return 0;
        }
        if (!name[0] || gw_profile_is_builtin_name(name)) {
                *ret = json_object_new_object();
                json_object_object_add(*ret, "name", json_object_new_string(name[0] ? name : "none"));
                return 0;
        }
        /* FOR SHARE: a delete of the profile waits for this transaction, and
         * then sees the sandbox that names it. */
        const char *params[] = {c->who.tenant_id, name};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db,
                       "SELECT spec::text FROM egress_profiles WHERE tenant_id = $1 AND name = $2 FOR SHARE", 2, params,
                       &res, err) < 0)
                return -SP_E_UNAVAILABLE;
        if (PQntuples(res) != 1)
                return sp_error_set(err, SP_E_NOT_FOUND, PROFILE_NOT_FOUND, name);
        return sp_json_parse(PQgetvalue(res, 0, 0), strlen(PQgetvalue(res, 0, 0)), ret, err);
}

/* ---- /v1/egress-profiles ---- */

void cp__h_egress_profile_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {c->who.tenant_id};
        if (cp_db_exec(c->api->db,
                       "SELECT api_egress_profile(p)::text FROM egress_profiles p WHERE p.tenant_id = $1 "
                       "ORDER BY p.name",
                       1, params, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        json_object *list = json_object_new_array();
        json_object_array_add(list, builtin_json("none"));
        json_object_array_add(list, builtin_json("public"));
        for (int i = 0; i < PQntuples(res); i++) {
                json_object *o = NULL;
                if (sp_json_parse(PQgetvalue(res, i, 0), strlen(PQgetvalue(res, i, 0)), &o, NULL) == 0)
                        json_object_array_add(list, o);
        }
        cp__reply_wrapped(c, 0, "egress_profiles", list, NULL);
}

void cp__h_egress_profile_get(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *name = sp_http_request_param(c->req, "name");
        if (gw_profile_is_builtin_name(name)) {
                _cleanup_json_ json_object *o = builtin_json(name);
                cp__reply(c, 200, o);
                return;
        }
        char msg[128];
        snprintf(msg, sizeof(msg), PROFILE_NOT_FOUND, name);
        _cleanup_json_ json_object *out = NULL;
        const char *params[] = {c->who.tenant_id, name};
        if (cp__query_json(c->api,
                           "SELECT api_egress_profile(p) FROM egress_profiles p WHERE p.tenant_id = $1 AND p.name = $2",
                           2, params, msg, &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply(c, 200, out);
}

/* The profile's row again, inside the mutation, as the answer. */
static int profile_answer(cp_call *c, const char *name, json_object **ret, sp_error **err)
{
        const char *params[] = {c->who.tenant_id, name};
        return cp__query_json(c->api,
                              "SELECT api_egress_profile(p) FROM egress_profiles p WHERE p.tenant_id = $1 "
                              "AND p.name = $2",
                              2, params, "egress profile not found", ret, err);
}

void cp__h_egress_profile_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_(gw_profile_unrefp) gw_profile *p = NULL;
        if (cp_req_egress_profile(c->body, c->body_len, NULL, &p, &e) < 0 || check_private(c, p, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        _cleanup_json_ json_object *spec = gw_profile_to_json(p);
        if (cp__mutation_begin(c))
                return;
        char id[SP_ID_MAX];
        _cleanup_pgresult_ PGresult *n = NULL, *ins = NULL;
        _cleanup_json_ json_object *out = NULL;
        const char *params[] = {id, c->who.tenant_id, gw_profile_name(p), sp_json_str(spec)};
        if (cp_db_exec(c->api->db, "SELECT count(*) FROM egress_profiles WHERE tenant_id = $1", 1, params + 1, &n, &e) <
            0)
                goto abort;
        if (atoi(PQgetvalue(n, 0, 0)) >= PROFILES_MAX) {
                sp_error_set(&e, SP_E_LIMIT, "a tenant has at most %d egress profiles", PROFILES_MAX);
                goto abort;
        }
        if (sp_id_new("egp", id, &e) < 0 ||
            cp_db_exec(c->api->db,
                       "INSERT INTO egress_profiles (id, tenant_id, name, spec) VALUES ($1, $2, $3, $4::jsonb) "
                       "ON CONFLICT (tenant_id, name) DO NOTHING RETURNING id",
                       4, params, &ins, &e) < 0)
                goto abort;
        if (PQntuples(ins) != 1) {
                sp_error_set(&e, SP_E_CONFLICT, "egress profile '%s' exists (PUT /v1/egress-profiles/%s changes it)",
                             gw_profile_name(p), gw_profile_name(p));
                goto abort;
        }
        if (cp__audit(c, "egress_profile.create", gw_profile_name(p), spec, &e) < 0 ||
            profile_answer(c, gw_profile_name(p), &out, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 201, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

/* Whether old_spec (a profile's JSON text) grants a secret p does not. */
static bool drops_a_grant(const char *old_spec, const gw_profile *p)
{
        _cleanup_json_ json_object *old = NULL;
        json_object *secrets = NULL;
        if (sp_json_parse(old_spec, strlen(old_spec), &old, NULL) < 0 ||
            !json_object_object_get_ex(old, "secrets", &secrets) || !json_object_is_type(secrets, json_type_array))
                return false;
        for (size_t i = 0; i < json_object_array_length(secrets); i++)
                if (!gw_profile_grants_secret(p, json_object_get_string(json_object_array_get_idx(secrets, i))))
                        return true;
        return false;
}

void cp__h_egress_profile_update(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *name = sp_http_request_param(c->req, "name");
        if (gw_profile_is_builtin_name(name)) {
                cp__failf(c, SP_E_INVALID, "egress profile '%s' is built in and cannot be changed", name);
                return;
        }
        _cleanup_(gw_profile_unrefp) gw_profile *p = NULL;
        if (cp_req_egress_profile(c->body, c->body_len, name, &p, &e) < 0 || check_private(c, p, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        _cleanup_json_ json_object *spec = gw_profile_to_json(p);
        /* The answer is made after the commit (it may wait for workers): a
         * retry with the same Idempotency-Key answers with the profile as it
         * is (the path names it). */
        char first[SP_ID_MAX];
        int r = cp__mutation_begin_for(c, "", first);
        if (r == 1)
                return;
        _cleanup_json_ json_object *out = NULL;
        if (r == 2) {
                if (profile_answer(c, name, &out, &e) < 0)
                        cp__fail(c, e);
                else
                        cp__reply(c, 200, out);
                return;
        }
        _cleanup_pgresult_ PGresult *old = NULL, *users = NULL;
        const char *params[] = {c->who.tenant_id, name, sp_json_str(spec)};
        if (cp_db_exec(c->api->db,
                       "SELECT spec::text FROM egress_profiles WHERE tenant_id = $1 AND name = $2 FOR UPDATE", 2,
                       params, &old, &e) < 0)
                goto abort;
        if (PQntuples(old) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, PROFILE_NOT_FOUND, name);
                goto abort;
        }
        bool dropped = drops_a_grant(PQgetvalue(old, 0, 0), p);
        if (cp_db_exec(c->api->db,
                       "UPDATE egress_profiles SET spec = $3::jsonb, updated_at = now() WHERE tenant_id = $1 "
                       "AND name = $2",
                       3, params, NULL, &e) < 0)
                goto abort;
        /* Its sandboxes run under the new one: the controller sends it to
         * their workers (egress_applied says when each has it); a secret it
         * no longer grants is taken from them now. */
        if (cp_db_exec(c->api->db,
                       "UPDATE sandboxes SET spec = jsonb_set(spec, '{egress_profile}', $3::jsonb), "
                       "egress_generation = egress_generation + 1 WHERE tenant_id = $1 AND spec->>'egress' = $2 "
                       "AND deleted_at IS NULL RETURNING id",
                       3, params, &users, &e) < 0 ||
            cp__audit(c, "egress_profile.update", name, spec, &e) < 0 || profile_answer(c, name, &out, &e) < 0)
                goto abort;
        json_object_object_add(out, "sandboxes_updating", json_object_new_int(PQntuples(users)));
        if (cp__mutation_commit_quiet(c) < 0)
                return;
        if (!dropped) {
                cp__reply(c, 200, out);
                return;
        }
        cp__egress_push_rows(c, users, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

void cp__h_egress_profile_delete(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *name = sp_http_request_param(c->req, "name");
        if (gw_profile_is_builtin_name(name)) {
                cp__failf(c, SP_E_INVALID, "egress profile '%s' is built in and cannot be deleted", name);
                return;
        }
        if (cp__body_none(c) < 0 || cp__mutation_begin(c))
                return;
        _cleanup_pgresult_ PGresult *row = NULL, *users = NULL;
        const char *params[] = {c->who.tenant_id, name};
        if (cp_db_exec(c->api->db, "SELECT id FROM egress_profiles WHERE tenant_id = $1 AND name = $2 FOR UPDATE", 2,
                       params, &row, &e) < 0)
                goto abort;
        if (PQntuples(row) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, PROFILE_NOT_FOUND, name);
                goto abort;
        }
        if (cp_db_exec(c->api->db,
                       "SELECT count(*), coalesce(min(id), '') FROM sandboxes WHERE tenant_id = $1 "
                       "AND spec->>'egress' = $2 AND deleted_at IS NULL",
                       2, params, &users, &e) < 0)
                goto abort;
        if (strcmp(PQgetvalue(users, 0, 0), "0") != 0) {
                sp_error_set(&e, SP_E_CONFLICT, "egress profile '%s' is used by %s sandboxes (%s%s)", name,
                             PQgetvalue(users, 0, 0), PQgetvalue(users, 0, 1),
                             strcmp(PQgetvalue(users, 0, 0), "1") == 0 ? "" : ", ...");
                goto abort;
        }
        if (cp_db_exec(c->api->db, "DELETE FROM egress_profiles WHERE tenant_id = $1 AND name = $2", 2, params, NULL,
                       &e) < 0 ||
            cp__audit(c, "egress_profile.delete", name, NULL, &e) < 0)
                goto abort;
        cp__mutation_commit(c, 204, NULL);
        return;
abort:
        cp__mutation_abort(c, e);
}

/* ---- PUT /v1/sandboxes/{id}/egress ---- */

typedef struct set_ctx {
        char sandbox_id[SP_ID_MAX];
        char worker_id[SP_ID_MAX];
        int64_t generation;
} set_ctx;

static void reply_sandbox(cp_call *c, const char *id, int status)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = NULL;
        const char *params[] = {id, c->who.tenant_id};
        if (cp__query_json(c->api, "SELECT api_sandbox(s) FROM sandboxes s WHERE s.id = $1 AND s.tenant_id = $2", 2,
                           params, "sandbox not found", &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__sandbox_ingress_urls(c->api, out);
        cp__reply(c, status, out);
}

static void on_set(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        _cleanup_free_ set_ctx *x = userdata;
        if (err && err->code != SP_E_UNAVAILABLE && err->code != SP_E_TIMEOUT && err->code != SP_E_NOT_FOUND) {
                cp__fail_worker(c, err);
                return;
        }
        if (!err) {
                cp_sandbox_egress_applied(c->api->db, x->sandbox_id, x->generation);
        } else {
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", x->sandbox_id, "worker_id", x->worker_id),
                          "egress: the worker did not take the new profile now (%s); the controller sends it again",
                          err->message);
        }
        /* 200 once the worker enforces it; 202 when it is recorded and
         * the controller will send it (egress_applied says which). */
        reply_sandbox(c, x->sandbox_id, err ? 202 : 200);
}

void cp__h_sandbox_egress(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        char name[64];
        _cleanup_(gw_profile_unrefp) gw_profile *inline_profile = NULL;
        if (cp_req_sandbox_egress(c->body, c->body_len, name, &inline_profile, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        char first[SP_ID_MAX];
        int r = cp__mutation_begin_for(c, id, first);
        if (r == 1)
                return;
        if (r == 2) {
                reply_sandbox(c, first, 200);
                return;
        }
        _cleanup_json_ json_object *profile = NULL, *patch = json_object_new_object(), *req = NULL, *bindings = NULL;
        _cleanup_pgresult_ PGresult *res = NULL;
        set_ctx *x = NULL;
        if (cp__egress_resolve(c, name, inline_profile, &profile, &e) < 0)
                goto abort;
        json_object_object_add(patch, "egress", inline_profile ? NULL : json_object_new_string(name));
        json_object_object_add(patch, "egress_profile", json_object_get(profile));
        const char *params[] = {id, c->who.tenant_id, sp_json_str(patch)};
        if (cp_db_exec(
                    c->api->db,
                    "UPDATE sandboxes s SET spec = s.spec || $3::jsonb, egress_generation = s.egress_generation + 1, "
                    "updated_at = now() WHERE s.id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL "
                    "RETURNING s.egress_generation, s.observed_state, coalesce(s.worker_id, ''), "
                    "coalesce((SELECT w.address FROM workers w WHERE w.id = s.worker_id), ''), "
                    "coalesce((SELECT w.state <> 'unreachable' FROM workers w WHERE w.id = s.worker_id), false)",
                    3, params, &res, &e) < 0)
                goto abort;
        if (PQntuples(res) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, "sandbox %.64s not found", id);
                goto abort;
        }
        if (cp__audit(c, "sandbox.egress", id, profile, &e) < 0)
                goto abort;
        if (cp__mutation_commit_quiet(c) < 0)
                return;
        const char *state = PQgetvalue(res, 0, 1);
        /* Held by a worker, running or not: a suspended sandbox would wake with
         * what its worker had (a revoked secret's value too) until the
         * controller's next pass. */
        bool on_worker = strcmp(state, "running") == 0 || strcmp(state, "paused") == 0 ||
                         strcmp(state, "suspended") == 0 || strcmp(state, "stopped") == 0;
        if (!on_worker || !*PQgetvalue(res, 0, 2) || strcmp(PQgetvalue(res, 0, 4), "t") != 0) {
                /* Not running (it gets the profile when it runs again, from its
                 * spec or from the controller), or its worker is unreachable. */
                reply_sandbox(c, id, on_worker ? 202 : 200);
                return;
        }
        if (!(x = calloc(1, sizeof(*x)))) {
                cp__failf(c, SP_E_LIMIT, "out of memory");
                return;
        }
        snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", id);
        snprintf(x->worker_id, sizeof(x->worker_id), "%s", PQgetvalue(res, 0, 2));
        x->generation = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        /* Its secrets as the new profile grants them. */
        if (cp_sandbox_secret_bindings(c->api->db, c->api->cfg.keyring, id, profile, &bindings, &e) < 0) {
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", id), "egress: %s; the controller sends it", e->message);
                free(x);
                reply_sandbox(c, id, 202);
                return;
        }
        req = pr_msg_encode(&pr_wk_set_egress_schema,
                            &(pr_wk_set_egress){.id = id,
                                                .egress = profile,
                                                .secrets = json_object_array_length(bindings) ? bindings : NULL,
                                                .egress_generation = x->generation});
        cp__worker_call(c, x->worker_id, PQgetvalue(res, 0, 3), "SetEgress", req, on_set, x);
        return;
abort:
        cp__mutation_abort(c, e);
}

/* ---- a change pushed to the workers of several sandboxes ---- */

typedef struct push {
        cp_call *c;
        json_object *out; /* the answer (a reference) */
        int pending; /* calls open, plus one while they are being started */
        int later; /* left to the controller */
} push;

typedef struct push_one {
        push *p;
        char sandbox_id[SP_ID_MAX];
        int64_t generation;
} push_one;

static void push_end(push *p)
{
        if (--p->pending > 0)
                return;
        if (p->later) {
                char msg[256];
                snprintf(msg, sizeof(msg),
                         "%d running sandboxes get the change from the controller as soon as their workers can take "
                         "it (egress_applied says when)",
                         p->later);
                json_object_object_add(p->out, "message", json_object_new_string(msg));
        }
        cp__reply(p->c, p->later ? 202 : 200, p->out);
        json_object_put(p->out);
        free(p);
}

static void on_push(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        push_one *o = userdata;
        push *p = o->p;
        if (!err) {
                cp_sandbox_egress_applied(c->api->db, o->sandbox_id, o->generation);
        } else {
                p->later++;
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", o->sandbox_id),
                          "egress: the worker did not take the change now (%s); the controller sends it again",
                          err->message);
        }
        free(o);
        push_end(p);
}

void cp__egress_push_rows(cp_call *c, PGresult *rows, json_object *out)
{
        _cleanup_json_ json_object *ids = json_object_new_array();
        for (int i = 0; i < PQntuples(rows); i++)
                json_object_array_add(ids, json_object_new_string(PQgetvalue(rows, i, 0)));
        cp__egress_push(c, ids, out);
}

void cp__egress_push(cp_call *c, json_object *ids, json_object *out)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {sp_json_str(ids), c->who.tenant_id};
        if (cp_db_exec(c->api->db,
                       "SELECT s.id, s.egress_generation, coalesce(s.spec->'egress_profile', "
                       "'{\"name\":\"none\"}'::jsonb)::text, "
                       "s.observed_state IN ('running', 'paused', 'suspended', 'stopped'), "
                       "coalesce(s.worker_id, ''), coalesce(w.address, ''), coalesce(w.state <> 'unreachable', false), "
                       "s.observed_state = 'creating' "
                       "FROM sandboxes s LEFT JOIN workers w ON w.id = s.worker_id "
                       "WHERE s.id IN (SELECT jsonb_array_elements_text($1::jsonb)) AND s.tenant_id = $2 "
                       "AND s.deleted_at IS NULL ORDER BY s.id",
                       2, params, &res, &e) < 0) {
                /* Committed already: the controller sends it. */
                sp_log_warn("egress: %s; the controller sends the change", e->message);
                res = NULL;
        }
        push *p = calloc(1, sizeof(*p));
        if (!p) {
                cp__failf(c, SP_E_LIMIT, "out of memory");
                return;
        }
        *p = (push){.c = c, .out = json_object_get(out), .pending = 1};
        int started = 0;
        for (int i = 0; res && i < PQntuples(res); i++) {
                if (strcmp(PQgetvalue(res, i, 3), "t") != 0) {
                        /* Not on a worker: it gets it when it runs again — but one
                         * being created may have been sent the old one already: the
                         * controller makes it right, and the answer says later. */
                        if (strcmp(PQgetvalue(res, i, 7), "t") == 0)
                                p->later++;
                        continue;
                }
                const char *id = PQgetvalue(res, i, 0), *text = PQgetvalue(res, i, 2);
                _cleanup_json_ json_object *profile = NULL, *bindings = NULL, *req = NULL;
                push_one *o = NULL;
                if (!*PQgetvalue(res, i, 4) || strcmp(PQgetvalue(res, i, 6), "t") != 0 ||
                    started >= CP_EGRESS_PUSH_MAX || sp_json_parse(text, strlen(text), &profile, NULL) < 0 ||
                    cp_sandbox_secret_bindings(c->api->db, c->api->cfg.keyring, id, profile, &bindings, NULL) < 0 ||
                    !(o = calloc(1, sizeof(*o)))) {
                        p->later++;
                        continue;
                }
                o->p = p;
                snprintf(o->sandbox_id, sizeof(o->sandbox_id), "%s", id);
                o->generation = strtoll(PQgetvalue(res, i, 1), NULL, 10);
                req = pr_msg_encode(&pr_wk_set_egress_schema,
                                    &(pr_wk_set_egress){.id = id,
                                                        .egress = profile,
                                                        .secrets = json_object_array_length(bindings) ? bindings : NULL,
                                                        .egress_generation = o->generation});
                p->pending++;
                started++;
                cp__worker_call(c, PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), "SetEgress", req, on_push, o);
        }
        push_end(p);
}

/* ---- GET /v1/sandboxes/{id}/egress/log ---- */

static void on_log(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        (void)userdata;
        if (err && err->code == SP_E_NOT_FOUND) {
                /* Not (or no longer) on that worker: nothing to show. */
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "records", json_object_new_array());
                json_object_object_add(o, "more", json_object_new_boolean(false));
                cp__reply(c, 200, o);
                return;
        }
        if (err) {
                cp__fail_worker(c, err);
                return;
        }
        cp__reply(c, 200, resp);
}

void cp__h_sandbox_egress_log(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        pr_wk_get_egress_log q;
        if (cp_req_egress_log_query(sp_http_request_query(c->req, "limit"), sp_http_request_query(c->req, "decision"),
                                    sp_http_request_query(c->req, "kind"), sp_http_request_query(c->req, "before"),
                                    sp_http_request_query(c->req, "after"), &q, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp_sandbox_loc loc;
        if (cp__sandbox_locate(c, sp_http_request_param(c->req, "id"), false, &loc, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (!loc.worker_id[0]) {
                cp__failf(c, SP_E_CONFLICT, "sandbox %s is %s and on no worker: its egress log is kept by its worker",
                          loc.id, loc.state);
                return;
        }
        if (!loc.reachable) {
                cp__failf(c, SP_E_UNAVAILABLE, "sandbox %s: its worker %s is unreachable; retry later", loc.id,
                          loc.worker_id);
                return;
        }
        q.id = loc.id;
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_get_egress_log_schema, &q);
        cp__worker_call(c, loc.worker_id, loc.address, "GetEgressLog", req, on_log, NULL);
}
