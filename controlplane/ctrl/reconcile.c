/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reconciliation against each ready worker's last heartbeat: sandboxes the
 * database does not want there are removed (orphans), sandboxes it wants
 * there but the worker lost are recreated, states the worker reports are
 * recorded, missing templates are imported, templates the database no longer
 * knows are removed, warm pools sized, and egress profiles and secrets a
 * worker is behind on (or lost the values of) sent again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"
#include "store/egress.h"
#include "store/secrets.h"

/* Sandboxes on the worker without an active operation, as a JSON array in $1, worker in $2. */
#define OBSERVED "jsonb_array_elements(coalesce($1::jsonb, '[]'::jsonb)) o"
#define IDLE_TARGET(col) \
        "NOT EXISTS (SELECT 1 FROM operations op WHERE op.target_id = " col " AND op.state IN ('pending', 'running'))"

typedef struct orphan_ctx {
        cp_ctrl *c;
        char key[64];
} orphan_ctx;

static void on_orphan_deleted(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        orphan_ctx *x = userdata;
        if (err && err->code != SP_E_NOT_FOUND)
                sp_log_warn("reconcile: removing orphan %s: %s", x->key + 7, err->message);
        else if (!err)
                sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", x->key + 7), "reconcile: orphan removed");
        cp__inflight_del(x->c, x->key);
        free(x);
}

/* Sandboxes the worker reported (in its heartbeat at `heartbeat`) that the
 * database does not want there. One deleted after that heartbeat is not an
 * orphan: the report predates the delete, which went to the worker. */
static void remove_orphans(cp_ctrl *c, const char *worker, const char *sandboxes, const char *heartbeat)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {sandboxes, worker, heartbeat};
        if (cp_db_exec(c->db,
                       "SELECT o->>'id' FROM " OBSERVED " WHERE NOT coalesce((o->>'warm')::boolean, false) "
                       "AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = o->>'id' AND ((s.worker_id = $2 "
                       "AND s.deleted_at IS NULL) OR s.deleted_at >= $3::timestamptz)) AND " IDLE_TARGET("o->>'id'"),
                       3, p, &res, NULL) < 0)
                return;
        sp_rpc_client *cli = PQntuples(res) ? cp__worker_client(c, worker) : NULL;
        for (int i = 0; cli && i < PQntuples(res); i++) {
                orphan_ctx *x = calloc(1, sizeof(*x));
                if (!x)
                        return;
                x->c = c;
                snprintf(x->key, sizeof(x->key), "orphan:%s", PQgetvalue(res, i, 0));
                if (!cp__inflight_add(c, x->key)) {
                        free(x);
                        continue;
                }
                _cleanup_json_ json_object *req =
                        pr_msg_encode(&pr_wk_sandbox_ref_schema, &(pr_wk_sandbox_ref){.id = PQgetvalue(res, i, 0)});
                if (sp_rpc_client_call(cli, "DeleteSandbox", req, 60000, on_orphan_deleted, x, NULL) < 0) {
                        cp__inflight_del(c, x->key);
                        free(x);
                }
        }
}

static void repair_missing_and_drift(cp_ctrl *c, const char *worker, const char *sandboxes, const char *heartbeat)
{
        const char *p[] = {sandboxes, worker, heartbeat};
        /* What the worker lost (seen by a heartbeat well after the last change):
         * running ones are created again; a suspended one's filesystem is gone. */
        _cleanup_pgresult_ PGresult *lost = NULL;
        if (cp_db_exec(c->db,
                       "SELECT s.id, s.tenant_id, s.observed_state FROM sandboxes s WHERE s.worker_id = $2 "
                       "AND s.deleted_at IS NULL AND s.observed_state IN ('running', 'paused', 'suspended', 'stopped') "
                       "AND s.updated_at < $3::timestamptz - interval '5 seconds' AND " IDLE_TARGET(
                               "s.id") " AND "
                                       "NOT EXISTS (SELECT 1 FROM " OBSERVED " WHERE o->>'id' = s.id)",
                       3, p, &lost, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(lost); i++) {
                const char *id = PQgetvalue(lost, i, 0), *state = PQgetvalue(lost, i, 2);
                bool had_fs_only = strcmp(state, "suspended") == 0 || strcmp(state, "stopped") == 0;
                char op[SP_ID_MAX];
                if (sp_id_new("op", op, NULL) < 0)
                        return;
                const char *q[] = {id, PQgetvalue(lost, i, 1), op};
                if (had_fs_only) {
                        (void)cp_db_exec(c->db,
                                         "UPDATE sandboxes SET observed_state = 'failed', status_message = 'its "
                                         "worker lost its filesystem', updated_at = now() WHERE id = $1",
                                         1, q, NULL, NULL);
                        sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", id, "worker_id", worker),
                                  "reconcile: the worker lost a suspended sandbox");
                        continue;
                }
                const cp_db_stmt txn[] = {
                        {"UPDATE sandboxes SET observed_state = 'creating', desired_state = 'running', "
                         "status_message = 'its worker lost it; creating it again', updated_at = now() "
                         "WHERE id = $1",
                         1, q, false},
                        {"INSERT INTO operations (id, tenant_id, kind, target_id, state, message, deadline_at) "
                         "VALUES ($3, $2, 'create', $1, 'pending', 'recreating what the worker lost', "
                         "now() + interval '10 minutes')",
                         3, q, false},
                };
                if (cp_db_txn(c->db, txn, SP_ARRAY_SIZE(txn), NULL) < 0)
                        return;
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", id, "worker_id", worker),
                          "reconcile: the worker lost it; creating it again");
        }
        /* States the worker reports that differ from the record, seen by a
         * heartbeat well after the record's last change: a heartbeat taken just
         * before an operation finished would otherwise undo it (a pause shown
         * running again). */
        (void)cp_db_exec(c->db,
                         "UPDATE sandboxes s SET observed_state = CASE o->>'state' WHEN 'suspended' THEN "
                         "CASE WHEN s.observed_state = 'stopped' THEN 'stopped' ELSE 'suspended' END "
                         "ELSE o->>'state' END, status_message = CASE WHEN o->>'state' = 'failed' THEN "
                         "'the worker reports it failed' ELSE s.status_message END, updated_at = now() "
                         "FROM " OBSERVED " WHERE o->>'id' = s.id AND s.worker_id = $2 AND s.deleted_at IS NULL "
                         "AND o->>'state' IN ('running', 'paused', 'suspended', 'failed') "
                         "AND s.observed_state IN ('running', 'paused', 'suspended', 'stopped', 'failed') "
                         "AND s.observed_state <> o->>'state' AND NOT (s.observed_state = 'stopped' AND "
                         "o->>'state' = 'suspended') AND s.updated_at < $3::timestamptz - interval '5 seconds' "
                         "AND " IDLE_TARGET("s.id"),
                         3, p, NULL, NULL);
}

typedef struct egress_ctx {
        cp_ctrl *c;
        char key[64]; /* "egress:<sandbox id>" */
        int64_t generation;
} egress_ctx;

static void on_egress_set(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        egress_ctx *x = userdata;
        const char *id = x->key + 7;
        if (!err) {
                cp_sandbox_egress_applied(x->c->db, id, x->generation);
                cp_sandbox_secrets_sent(x->c->db, id);
                sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", id),
                          "reconcile: egress profile and secrets sent to its worker");
        } else if (err->code != SP_E_NOT_FOUND) {
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", id), "reconcile: sending its egress profile: %s",
                          err->message);
        }
        cp__inflight_del(x->c, x->key);
        free(x);
}

/* Sandboxes on the worker whose egress profile or secrets changed since the
 * worker last confirmed them (api/egress.c, api/secrets.c), and those whose
 * secrets the worker says it lost the values of (its heartbeat, at
 * `heartbeat`, says secrets_missing, and nothing was sent since that
 * heartbeat was taken): SetEgress with the profile they should have and
 * their bindings (store/secrets.h). */
static void egress_behind(cp_ctrl *c, const char *worker, const char *sandboxes, const char *heartbeat)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {sandboxes, worker, heartbeat};
        if (cp_db_exec(c->db,
                       "SELECT s.id, s.egress_generation, coalesce(s.spec->'egress_profile', "
                       "'{\"name\":\"none\"}'::jsonb)::text FROM sandboxes s WHERE s.worker_id = $2 "
                       "AND s.deleted_at IS NULL AND s.observed_state IN ('running', 'paused', 'suspended', 'stopped') "
                       "AND (s.egress_applied < s.egress_generation OR ((s.secrets_sent_at IS NULL "
                       "OR s.secrets_sent_at < $3::timestamptz) AND EXISTS (SELECT 1 FROM " OBSERVED
                       " WHERE o->>'id' = s.id AND coalesce((o->>'secrets_missing')::boolean, false)))) "
                       "AND " IDLE_TARGET("s.id") " LIMIT 200",
                       3, p, &res, NULL) < 0)
                return;
        sp_rpc_client *cli = PQntuples(res) ? cp__worker_client(c, worker) : NULL;
        for (int i = 0; cli && i < PQntuples(res); i++) {
                const char *id = PQgetvalue(res, i, 0);
                egress_ctx *x = calloc(1, sizeof(*x));
                _cleanup_json_ json_object *profile = NULL, *bindings = NULL;
                if (!x)
                        return;
                x->c = c;
                snprintf(x->key, sizeof(x->key), "egress:%s", id);
                x->generation = strtoll(PQgetvalue(res, i, 1), NULL, 10);
                const char *text = PQgetvalue(res, i, 2);
                if (sp_json_parse(text, strlen(text), &profile, NULL) < 0 ||
                    cp_sandbox_secret_bindings(c->db, c->cfg.keyring, id, profile, &bindings, NULL) < 0 ||
                    !cp__inflight_add(c, x->key)) {
                        free(x);
                        continue;
                }
                _cleanup_json_ json_object *req = pr_msg_encode(
                        &pr_wk_set_egress_schema,
                        &(pr_wk_set_egress){.id = id,
                                            .egress = profile,
                                            .secrets = json_object_array_length(bindings) ? bindings : NULL,
                                            .egress_generation = x->generation});
                if (sp_rpc_client_call(cli, "SetEgress", req, 30000, on_egress_set, x, NULL) < 0) {
                        cp__inflight_del(c, x->key);
                        free(x);
                }
        }
}

typedef struct tpl_import {
        cp_ctrl *c;
        char key[96];
} tpl_import;

static void on_tpl_imported(void *userdata, const sp_error *err)
{
        tpl_import *x = userdata;
        if (err)
                sp_log_warn("reconcile: %s: %s", x->key, err->message);
        cp__inflight_del(x->c, x->key);
        free(x);
}

static void on_warm_set(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        (void)userdata;
        if (err)
                sp_log_warn("reconcile: warm pool: %s", err->message);
}

static void templates_and_warm(cp_ctrl *c, const char *worker, json_object *observed_templates)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db, "SELECT id, spec::text, warm FROM templates WHERE state = 'ready' AND deleted_at IS NULL",
                       0, NULL, &res, NULL) < 0)
                return;
        cp_wclient *w = cp__worker_entry(c, worker);
        if (!w)
                return;
        for (int i = 0; i < PQntuples(res); i++) {
                const char *id = PQgetvalue(res, i, 0);
                bool has = false;
                for (size_t j = 0; observed_templates && j < json_object_array_length(observed_templates); j++)
                        if (strcmp(json_object_get_string(json_object_array_get_idx(observed_templates, j)), id) == 0)
                                has = true;
                if (!has) {
                        tpl_import *x = calloc(1, sizeof(*x));
                        if (!x)
                                return;
                        x->c = c;
                        snprintf(x->key, sizeof(x->key), "tpl:%s:%s", id, worker);
                        _cleanup_json_ json_object *spec = NULL;
                        const char *s = PQgetvalue(res, i, 1);
                        if (!cp__inflight_add(c, x->key) || sp_json_parse(s, strlen(s), &spec, NULL) < 0 ||
                            cp__template_import(c, worker, id, spec, NULL, on_tpl_imported, x) < 0) {
                                cp__inflight_del(c, x->key);
                                free(x);
                        }
                        continue;
                }
                int64_t want = strtoll(PQgetvalue(res, i, 2), NULL, 10);
                json_object *set = NULL;
                int64_t have = json_object_object_get_ex(w->warm_set, id, &set) ? json_object_get_int64(set) : 0;
                if (want == have)
                        continue;
                _cleanup_json_ json_object *req = pr_msg_encode(
                        &pr_wk_set_warm_pool_schema, &(pr_wk_set_warm_pool){.template_name = id, .size = want});
                if (sp_rpc_client_call(w->cli, "SetWarmPool", req, 30000, on_warm_set, NULL, NULL) == 0)
                        json_object_object_add(w->warm_set, id, json_object_new_int64(want));
        }
}

typedef struct tpl_remove {
        cp_ctrl *c;
        char key[96];
} tpl_remove;

static void on_stale_template_deleted(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        tpl_remove *x = userdata;
        if (err && err->code != SP_E_NOT_FOUND)
                sp_log_warn("reconcile: %s: %s", x->key, err->message);
        cp__inflight_del(x->c, x->key);
        free(x);
}

/* Templates the worker holds that the database no longer knows (deleted while
 * the worker was unreachable) are removed from it. Only the control plane's
 * own (ids "tpl_...") are touched. */
static void remove_stale_templates(cp_ctrl *c, const char *worker, const char *templates)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {templates};
        if (cp_db_exec(c->db,
                       "SELECT t FROM jsonb_array_elements_text(coalesce($1::jsonb, '[]'::jsonb)) t "
                       "WHERE t LIKE 'tpl\\_%' AND NOT EXISTS (SELECT 1 FROM templates WHERE id = t)",
                       1, p, &res, NULL) < 0)
                return;
        sp_rpc_client *cli = PQntuples(res) ? cp__worker_client(c, worker) : NULL;
        for (int i = 0; cli && i < PQntuples(res); i++) {
                tpl_remove *x = calloc(1, sizeof(*x));
                if (!x)
                        return;
                x->c = c;
                snprintf(x->key, sizeof(x->key), "tpldel:%s:%s", PQgetvalue(res, i, 0), worker);
                _cleanup_json_ json_object *req =
                        pr_msg_encode(&pr_wk_template_ref_schema, &(pr_wk_template_ref){.name = PQgetvalue(res, i, 0)});
                if (!cp__inflight_add(c, x->key)) {
                        free(x);
                        continue;
                }
                if (sp_rpc_client_call(cli, "DeleteTemplate", req, 60000, on_stale_template_deleted, x, NULL) < 0) {
                        cp__inflight_del(c, x->key);
                        free(x);
                }
        }
}

/* An upload the worker that took it has imported (its heartbeat lists the
 * template) becomes a build: a template_build operation copies it to the
 * other workers and marks it ready once they all hold it. The template's
 * size is what the worker reports it holds: the archive and the files
 * unpacked from it (a small archive may unpack to gigabytes); until then it
 * counted with the most its upload could hold. */
static void promote_uploads(cp_ctrl *c)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db,
                       "SELECT t.id, t.tenant_id FROM templates t, workers w WHERE t.state = 'uploading' "
                       "AND t.deleted_at IS NULL AND w.id = t.spec->>'worker' "
                       "AND coalesce(w.observed->'templates', '[]'::jsonb) ? t.id",
                       0, NULL, &res, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(res); i++) {
                char op[SP_ID_MAX];
                if (sp_id_new("op", op, NULL) < 0)
                        return;
                const char *p[] = {PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), op};
                /* Checked again under the row lock: one replica, one operation. */
                const cp_db_stmt txn[] = {
                        {"UPDATE templates t SET state = 'building', error = NULL, updated_at = now(), "
                         "size_bytes = coalesce((SELECT (w.observed->'artifacts'->>t.id)::bigint + "
                         "coalesce((w.observed->'template_bytes'->>t.id)::bigint, 0) FROM workers w "
                         "WHERE w.id = t.spec->>'worker'), t.upload_max_bytes), upload_max_bytes = NULL "
                         "WHERE t.id = $1 AND t.state = 'uploading'",
                         1, p, false},
                        {"INSERT INTO operations (id, tenant_id, kind, target_id, state, deadline_at) "
                         "VALUES ($3, $2, 'template_build', $1, 'pending', now() + interval '1 hour')",
                         3, p, true},
                };
                int ran = cp_db_txn(c->db, txn, SP_ARRAY_SIZE(txn), NULL);
                if (ran < 0)
                        return;
                if (ran == 2)
                        sp_log_info_kv(SP_KV("template_id", p[0], "operation_id", op),
                                       "template uploaded: copying it to the other workers");
        }
}

void cp__reconcile_run(cp_ctrl *c)
{
        _cleanup_pgresult_ PGresult *ws = NULL;
        promote_uploads(c);
        if (cp_db_exec(c->db,
                       "SELECT id, observed->'sandboxes', api_ts(last_heartbeat), observed->'templates' "
                       "FROM workers WHERE state = 'ready' AND last_heartbeat IS NOT NULL",
                       0, NULL, &ws, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(ws); i++) {
                const char *id = PQgetvalue(ws, i, 0);
                const char *sbx = PQgetisnull(ws, i, 1) ? "[]" : PQgetvalue(ws, i, 1);
                remove_orphans(c, id, sbx, PQgetvalue(ws, i, 2));
                repair_missing_and_drift(c, id, sbx, PQgetvalue(ws, i, 2));
                egress_behind(c, id, sbx, PQgetvalue(ws, i, 2));
                _cleanup_json_ json_object *tpls = NULL;
                if (!PQgetisnull(ws, i, 3)) {
                        (void)sp_json_parse(PQgetvalue(ws, i, 3), strlen(PQgetvalue(ws, i, 3)), &tpls, NULL);
                        remove_stale_templates(c, id, PQgetvalue(ws, i, 3));
                }
                templates_and_warm(c, id, tpls);
        }
}
