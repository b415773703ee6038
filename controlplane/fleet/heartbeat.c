/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Heartbeat: a worker (identified by its certificate's name) reports its
 * capacity and everything it observes. The row is updated, an unreachable
 * worker becomes ready again, and the controllers are woken (NOTIFY) when
 * what they act on changed: the sandboxes and their states (and whether
 * the worker lost their secrets' values), the templates, or the worker's
 * health.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"

static const char *const sandbox_states[] = {"creating", "running", "paused", "suspended", "failed", NULL};

static bool one_of(const char *s, const char *const *set)
{
        for (; *set; set++)
                if (strcmp(s, *set) == 0)
                        return true;
        return false;
}

/* The checks a schema cannot make, on a decoded request: template names
 * and sandbox ids of [A-Za-z0-9._-], known sandbox states, labels. */
static int check_templates(json_object *arr, sp_error **err)
{
        for (size_t i = 0; arr && i < json_object_array_length(arr); i++)
                if (!cp__fleet_object_name_ok(json_object_get_string(json_object_array_get_idx(arr, i))))
                        return sp_error_set(err, SP_E_INVALID, "templates[%zu] must be a name of [A-Za-z0-9._-]", i);
        return 0;
}

/* artifacts, template_bytes and warm: keyed by template name. */
static int check_keys(json_object *map, const char *field, sp_error **err)
{
        if (!map)
                return 0;
        json_object_object_foreach (map, k, v) {
                (void)v;
                if (!cp__fleet_object_name_ok(k))
                        return sp_error_set(err, SP_E_INVALID, "%s: '%.128s' is not a template name", field, k);
        }
        return 0;
}

static int check_sandboxes(json_object *arr, sp_error **err)
{
        for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
                pr_cp_sandbox sb;
                if (pr_msg_decode(&pr_cp_sandbox_schema, json_object_array_get_idx(arr, i), &sb, err) < 0)
                        return sp_error_wrap(err, "sandboxes[%zu]", i);
                if (!cp__fleet_object_name_ok(sb.id) || !cp__fleet_object_name_ok(sb.template_name))
                        return sp_error_set(err, SP_E_INVALID,
                                            "sandboxes[%zu]: id and template must be of [A-Za-z0-9._-]", i);
                if (!one_of(sb.state, sandbox_states))
                        return sp_error_set(err, SP_E_INVALID, "sandboxes[%zu]: unknown state '%s'", i, sb.state);
                static const char *const reasons[] = {"session", "attached", "ingress", "cpu", NULL};
                if (sb.busy &&
                    (!json_object_is_type(sb.busy, json_type_array) || json_object_array_length(sb.busy) > 8))
                        return sp_error_set(err, SP_E_INVALID, "sandboxes[%zu]: busy must be an array of at most 8", i);
                for (size_t k = 0; sb.busy && k < json_object_array_length(sb.busy); k++) {
                        json_object *v = json_object_array_get_idx(sb.busy, k);
                        if (!json_object_is_type(v, json_type_string) || !one_of(json_object_get_string(v), reasons))
                                return sp_error_set(err, SP_E_INVALID, "sandboxes[%zu]: busy[%zu] is not a reason", i,
                                                    k);
                }
        }
        return 0;
}

typedef struct heartbeat_req {
        pr_cp_heartbeat m; /* borrowed from the request */
        json_object *capacity; /* owned: the capacity as stored */
        json_object *observed; /* owned: used, jobs, templates, artifacts, template_bytes, warm, sandboxes */
} heartbeat_req;

static json_object *or_empty(json_object *v, json_type type)
{
        return v ? json_object_get(v) : type == json_type_array ? json_object_new_array() : json_object_new_object();
}

static int parse(json_object *req, heartbeat_req *r, sp_error **err)
{
        pr_cp_heartbeat *m = &r->m;
        if (pr_msg_decode(&pr_cp_heartbeat_schema, req, m, err) < 0 || cp__fleet_check_labels(m->labels, err) < 0 ||
            check_templates(m->templates, err) < 0 || check_keys(m->artifacts, "artifacts", err) < 0 ||
            check_keys(m->template_bytes, "template_bytes", err) < 0 || check_keys(m->warm, "warm", err) < 0 ||
            check_sandboxes(m->sandboxes, err) < 0)
                return -SP_E_INVALID;
        if (!cp_fleet_address_ok(m->address))
                return sp_error_set(err, SP_E_INVALID, "address '%s' must be HOST:PORT the control plane can dial",
                                    m->address);
        if (!cp__fleet_backend_ok(m->backend))
                return sp_error_set(err, SP_E_INVALID, "backend '%s' must be jail, qemu or firecracker", m->backend);
        for (size_t i = 0; m->backends && i < json_object_array_length(m->backends); i++) {
                const char *b = json_object_get_string(json_object_array_get_idx(m->backends, i));
                if (!cp__fleet_backend_ok(b))
                        return sp_error_set(err, SP_E_INVALID, "backends[%zu] '%s' must be jail, qemu or firecracker",
                                            i, b);
                if (i == 0 && strcmp(b, m->backend) != 0)
                        return sp_error_set(err, SP_E_INVALID, "backends[0] must be the default backend, '%s'",
                                            m->backend);
        }
        r->capacity = pr_msg_encode(&pr_cp_resources_schema, &m->capacity);
        r->observed = json_object_new_object();
        json_object_object_add(r->observed, "used", pr_msg_encode(&pr_cp_resources_schema, &m->used));
        if (m->has_jobs)
                json_object_object_add(r->observed, "jobs", pr_msg_encode(&pr_cp_jobs_schema, &m->jobs));
        json_object_object_add(r->observed, "templates", or_empty(m->templates, json_type_array));
        json_object_object_add(r->observed, "artifacts", or_empty(m->artifacts, json_type_object));
        json_object_object_add(r->observed, "template_bytes", or_empty(m->template_bytes, json_type_object));
        json_object_object_add(r->observed, "warm", or_empty(m->warm, json_type_object));
        json_object_object_add(r->observed, "sandboxes", or_empty(m->sandboxes, json_type_array));
        return 0;
}

/* ---- what the controllers act on, in a comparable form ---- */

typedef struct pair {
        const char *id, *state;
        bool secrets_missing; /* the controller sends the sandbox its bindings again */
} pair;

typedef struct view {
        pair *sandboxes;
        size_t nsandboxes;
        const char **templates;
        size_t ntemplates;
} view;

static int pair_cmp(const void *a, const void *b)
{
        const pair *x = a, *y = b;
        int c = strcmp(x->id, y->id);
        if (!c)
                c = strcmp(x->state, y->state);
        return c ? c : (int)x->secrets_missing - (int)y->secrets_missing;
}

static int str_cmp(const void *a, const void *b)
{
        return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Borrows strings from sandboxes and templates (arrays, or NULL); entries
 * that are not well-formed (an old row) are skipped. */
static int view_of(json_object *sandboxes, json_object *templates, view *ret, sp_error **err)
{
        size_t ns = json_object_is_type(sandboxes, json_type_array) ? json_object_array_length(sandboxes) : 0;
        size_t nt = json_object_is_type(templates, json_type_array) ? json_object_array_length(templates) : 0;
        memset(ret, 0, sizeof(*ret));
        ret->sandboxes = calloc(ns + 1, sizeof(pair));
        ret->templates = calloc(nt + 1, sizeof(char *));
        if (!ret->sandboxes || !ret->templates)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < ns; i++) {
                json_object *sb = json_object_array_get_idx(sandboxes, i);
                json_object *m = NULL;
                pair p = {sp_json_member_str(sb, "id"), sp_json_member_str(sb, "state"),
                          json_object_object_get_ex(sb, "secrets_missing", &m) && json_object_get_boolean(m)};
                if (p.id && p.state)
                        ret->sandboxes[ret->nsandboxes++] = p;
        }
        for (size_t i = 0; i < nt; i++) {
                json_object *t = json_object_array_get_idx(templates, i);
                if (json_object_is_type(t, json_type_string))
                        ret->templates[ret->ntemplates++] = json_object_get_string(t);
        }
        qsort(ret->sandboxes, ret->nsandboxes, sizeof(pair), pair_cmp);
        qsort(ret->templates, ret->ntemplates, sizeof(char *), str_cmp);
        return 0;
}

static void view_free(view *v)
{
        free(v->sandboxes);
        free(v->templates);
}

static bool view_equal(const view *a, const view *b)
{
        if (a->nsandboxes != b->nsandboxes || a->ntemplates != b->ntemplates)
                return false;
        for (size_t i = 0; i < a->nsandboxes; i++)
                if (pair_cmp(&a->sandboxes[i], &b->sandboxes[i]) != 0)
                        return false;
        for (size_t i = 0; i < a->ntemplates; i++)
                if (strcmp(a->templates[i], b->templates[i]) != 0)
                        return false;
        return true;
}

/* Did the sandboxes or templates change from what the row holds? */
static int observed_changed(PGresult *res, json_object *observed, bool *ret, sp_error **err)
{
        _cleanup_json_ json_object *old_sb = NULL, *old_tpl = NULL;
        const char *sb_text = PQgetvalue(res, 0, 2), *tpl_text = PQgetvalue(res, 0, 3);
        if (!PQgetisnull(res, 0, 2))
                (void)sp_json_parse(sb_text, strlen(sb_text), &old_sb, NULL);
        if (!PQgetisnull(res, 0, 3))
                (void)sp_json_parse(tpl_text, strlen(tpl_text), &old_tpl, NULL);
        json_object *new_sb = NULL, *new_tpl = NULL;
        json_object_object_get_ex(observed, "sandboxes", &new_sb);
        json_object_object_get_ex(observed, "templates", &new_tpl);
        view a = {0}, b = {0};
        int r = view_of(old_sb, old_tpl, &a, err);
        if (r == 0)
                r = view_of(new_sb, new_tpl, &b, err);
        if (r == 0)
                *ret = !view_equal(&a, &b);
        view_free(&a);
        view_free(&b);
        return r;
}

typedef struct heartbeat_result {
        char worker_id[SP_ID_MAX];
        char state[32], admin_state[32];
        bool recovered;
} heartbeat_result;

static int store(cp_fleet *f, const char *name, const char *serial, const heartbeat_req *r, heartbeat_result *ret,
                 sp_error **err)
{
        _cleanup_pgresult_ PGresult *old = NULL, *upd = NULL;
        const char *nparams[] = {name};
        if (cp_db_exec(f->db,
                       "SELECT id, state, observed->'sandboxes', observed->'templates', cert_serial FROM workers "
                       "WHERE name = $1 FOR UPDATE",
                       1, nparams, &old, err) < 0)
                return sp_error_wrap(err, "heartbeat");
        if (PQntuples(old) != 1)
                return sp_error_set(err, SP_E_PERMISSION, "worker '%s' has not joined this cluster", name);
        if (cp__fleet_cert_superseded(name, PQgetisnull(old, 0, 4) ? NULL : PQgetvalue(old, 0, 4), serial, err))
                return -SP_E_PERMISSION;
        bool changed = false;
        if (observed_changed(old, r->observed, &changed, err) < 0)
                return -SP_E_LIMIT;
        snprintf(ret->worker_id, sizeof(ret->worker_id), "%s", PQgetvalue(old, 0, 0));
        char hb[24];
        snprintf(hb, sizeof(hb), "%lld", (long long)f->cfg.heartbeat_ms);
        const char *params[] = {ret->worker_id,
                                r->m.address,
                                r->m.backend,
                                r->m.labels ? sp_json_str(r->m.labels) : NULL,
                                sp_json_str(r->capacity),
                                sp_json_str(r->observed),
                                hb,
                                r->m.artifact_store ? "true" : "false",
                                r->m.backends ? sp_json_str(r->m.backends) : NULL};
        if (cp_db_exec(f->db,
                       "UPDATE workers SET address = $2, backend = $3, labels = coalesce($4::jsonb, labels), "
                       "capacity = $5::jsonb, observed = $6::jsonb, heartbeat_ms = $7::integer, "
                       "artifact_store = $8::boolean, last_heartbeat = now(), updated_at = now(), "
                       "backends = CASE WHEN $9::jsonb IS NULL THEN ARRAY[$3] "
                       "ELSE ARRAY(SELECT jsonb_array_elements_text($9::jsonb)) END, "
                       "state = CASE WHEN state = 'unreachable' THEN 'ready' ELSE state END "
                       "WHERE id = $1 RETURNING state, admin_state",
                       9, params, &upd, err) < 0)
                return sp_error_wrap(err, "heartbeat");
        snprintf(ret->state, sizeof(ret->state), "%s", PQgetvalue(upd, 0, 0));
        snprintf(ret->admin_state, sizeof(ret->admin_state), "%s", PQgetvalue(upd, 0, 1));
        ret->recovered = strcmp(ret->state, PQgetvalue(old, 0, 1)) != 0;
        if ((changed || ret->recovered) &&
            cp_db_exec(f->db, "SELECT pg_notify('" CP_FLEET_CHANNEL "', 'worker:' || $1)", 1, params, NULL, err) < 0)
                return sp_error_wrap(err, "heartbeat");
        /* Activity: a busy sandbox of this worker is active now, with its reasons; an idle one's go. */
        json_object *list = NULL;
        if (json_object_object_get_ex(r->observed, "sandboxes", &list) && json_object_array_length(list) > 0) {
                const char *ap[] = {ret->worker_id, sp_json_str(list)};
                if (cp_db_exec(f->db,
                               "UPDATE sandboxes s SET busy = CASE WHEN jsonb_array_length(coalesce(b.busy, '[]')) > 0 "
                               "THEN b.busy END, last_active_at = CASE WHEN jsonb_array_length(coalesce(b.busy, "
                               "'[]')) > 0 THEN greatest(s.last_active_at, now()) ELSE s.last_active_at END "
                               "FROM jsonb_to_recordset($2::jsonb) AS b(id text, busy jsonb) "
                               "WHERE s.id = b.id AND s.worker_id = $1 AND s.deleted_at IS NULL "
                               "AND (jsonb_array_length(coalesce(b.busy, '[]')) > 0 OR s.busy IS NOT NULL)",
                               2, ap, NULL, err) < 0)
                        return sp_error_wrap(err, "heartbeat");
        }
        /* The artifact store: which of this worker's sandboxes have a whole copy there (a wake finds it when the
         * worker is gone); one it no longer lists as stored is not (it ran again, or went). */
        const char *sp[] = {ret->worker_id, list ? sp_json_str(list) : "[]"};
        if (cp_db_exec(f->db,
                       "UPDATE sandboxes s SET stored_bytes = b.stored_bytes FROM (SELECT s2.id, x.stored_bytes FROM "
                       "sandboxes s2 LEFT JOIN jsonb_to_recordset($2::jsonb) AS x(id text, stored_bytes bigint) "
                       "ON x.id = s2.id WHERE s2.worker_id = $1 AND s2.deleted_at IS NULL) b "
                       "WHERE s.id = b.id AND s.stored_bytes IS DISTINCT FROM b.stored_bytes",
                       2, sp, NULL, err) < 0)
                return sp_error_wrap(err, "heartbeat");
        return 0;
}

static int heartbeat(cp_fleet *f, const char *name, const char *serial, json_object *req, json_object **ret,
                     sp_error **err)
{
        if (!name)
                return sp_error_set(err, SP_E_PERMISSION, "a heartbeat needs a worker certificate");
        heartbeat_req r = {0};
        int rc = parse(req, &r, err);
        if (rc == 0)
                rc = cp_db_begin(f->db, err);
        if (rc < 0) {
                sp_json_putp(&r.capacity);
                sp_json_putp(&r.observed);
                return rc;
        }
        heartbeat_result res = {0};
        rc = store(f, name, serial, &r, &res, err);
        if (rc == 0)
                rc = cp_db_commit(f->db, err);
        sp_json_putp(&r.capacity);
        sp_json_putp(&r.observed);
        if (rc < 0) {
                cp_db_rollback(f->db);
                return rc;
        }
        if (res.recovered)
                sp_log_info_kv(SP_KV("worker_id", res.worker_id, "worker", name), "worker is %s again", res.state);
        pr_cp_heartbeat_resp resp = {.worker_id = res.worker_id,
                                     .state = res.state,
                                     .admin_state = res.admin_state,
                                     .heartbeat_ms = f->cfg.heartbeat_ms};
        json_object *o = pr_msg_encode(&pr_cp_heartbeat_resp_schema, &resp);
        *ret = o;
        return 0;
}

void cp__fleet_heartbeat(sp_rpc_call *call, json_object *req, void *userdata)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *resp = NULL;
        const char *name = sp_rpc_call_peer_name(call);
        if (heartbeat(userdata, name, sp_rpc_call_peer_serial(call), req, &resp, &e) < 0) {
                sp_log_debug_kv(SP_KV("worker", name ? name : "?"), "heartbeat refused: %s", e->message);
                sp_rpc_call_fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, resp, NULL);
}
