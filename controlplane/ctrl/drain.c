/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Drains: a draining worker is emptied. Each sandbox on it without an active
 * operation gets the one that takes it away, keeping what its owner wants of
 * it (its desired state is left as it is):
 *
 *   running or paused, wanted so  a suspend there, then (request `then`,
 *                                 ops.c) a restore, which moves it (move.c)
 *                                 and runs it on another worker, then a pause
 *                                 for one wanted paused;
 *   suspended or stopped, wanted  a restore (start) that moves it first, then
 *   running or paused             a pause for one wanted paused;
 *   suspended or stopped, wanted  a `move`: it stays suspended (stopped) on
 *   so                            another worker.
 *
 * Where no other worker can take a sandbox, its operation waits, saying why,
 * until its deadline; the sandbox stays where it is, and the drain tries
 * again a minute after one of its operations failed. The worker reads
 * "drained" once it holds no sandbox (store/workers.c). An unreachable
 * worker is left alone — nothing can leave it until it is back — but for its
 * suspended and stopped sandboxes whose copy is in the artifact store, which
 * leave from there (move.c).
 */
#include <stdio.h>
#include <string.h>

#include "ctrl/ctrl_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"

/* After a drain's operation failed (or expired), the sandbox is left alone this long. */
#define COOLDOWN "60 seconds"

/* What the drain asks of a sandbox observed obs and wanted des: the kind of
 * its operation and what follows it (`then`, NULL-terminated). */
typedef struct plan {
        const char *kind;
        const char *then[3];
} plan;

static plan plan_for(const char *obs, const char *des)
{
        bool live = strcmp(obs, "running") == 0 || strcmp(obs, "paused") == 0;
        bool wants_live = strcmp(des, "running") == 0 || strcmp(des, "paused") == 0;
        bool wants_paused = strcmp(des, "paused") == 0;
        const char *wake = strcmp(obs, "stopped") == 0 ? "start" : "restore";
        if (live && wants_live)
                return wants_paused ? (plan){"suspend", {"restore", "pause", NULL}}
                                    : (plan){"suspend", {"restore", NULL}};
        if (live)
                return (plan){strcmp(des, "stopped") == 0 ? "stop" : "suspend", {NULL}};
        if (wants_live)
                return wants_paused ? (plan){wake, {"pause", NULL}} : (plan){wake, {NULL}};
        return (plan){"move", {NULL}};
}

/* Records the plan's operation for one sandbox, if it is still as seen. */
static void record(cp_ctrl *c, PGresult *res, int i)
{
        const char *id = PQgetvalue(res, i, 0), *tenant = PQgetvalue(res, i, 1), *obs = PQgetvalue(res, i, 2),
                   *des = PQgetvalue(res, i, 3), *name = PQgetvalue(res, i, 4), *worker = PQgetvalue(res, i, 5);
        plan pl = plan_for(obs, des);
        char op[SP_ID_MAX], why[160], suspended[256];
        if (sp_id_new("op", op, NULL) < 0)
                return;
        snprintf(why, sizeof(why), "its worker %s is draining", name);
        _cleanup_json_ json_object *req = json_object_new_object();
        json_object *then = json_object_new_array();
        for (size_t k = 0; pl.then[k]; k++)
                json_object_array_add(then, json_object_new_string(pl.then[k]));
        bool suspends = strcmp(pl.kind, "suspend") == 0 || strcmp(pl.kind, "stop") == 0;
        if (suspends && pl.then[0])
                snprintf(suspended, sizeof(suspended), "suspended: %s; it runs again on another worker", why);
        else if (suspends)
                snprintf(suspended, sizeof(suspended), "%s: %s", strcmp(pl.kind, "stop") == 0 ? "stopped" : "suspended",
                         why);
        json_object_object_add(req, "drain", json_object_new_boolean(true));
        json_object_object_add(req, "want", json_object_new_string(des));
        json_object_object_add(req, "then", then);
        json_object_object_add(req, "status_message", json_object_new_string(suspends ? suspended : why));
        if (suspends && pl.then[0]) /* the restore's: where it went, and why */
                json_object_object_add(req, "then_status_message", json_object_new_string(why));
        const char *sp[] = {id, worker, obs, des};
        const char *ip[] = {id, op, tenant, pl.kind, why, sp_json_str(req)};
        /* Checked again under the row lock: the API may have recorded an
         * operation since (it locks the row too). */
        const cp_db_stmt txn[] = {
                {"SELECT 1 FROM sandboxes s WHERE s.id = $1 AND s.worker_id = $2 AND s.observed_state = $3 "
                 "AND s.desired_state = $4 AND s.deleted_at IS NULL AND NOT EXISTS (SELECT 1 FROM operations o "
                 "WHERE o.target_id = s.id AND o.state IN ('pending', 'running')) FOR UPDATE",
                 4, sp, false},
                {"INSERT INTO operations (id, tenant_id, kind, target_id, state, message, deadline_at, request) "
                 "VALUES ($2, $3, $4, $1, 'pending', $5, now() + interval '10 minutes', $6::jsonb)",
                 6, ip, true},
        };
        if (cp_db_txn(c->db, txn, SP_ARRAY_SIZE(txn), NULL) == 2)
                sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", id, "operation_id", op, "worker", name), "drain: %s (%s)",
                          pl.kind, why);
}

void cp__drain_run(cp_ctrl *c)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db,
                       "SELECT s.id, s.tenant_id, s.observed_state, s.desired_state, coalesce(w.name, w.id), w.id "
                       "FROM sandboxes s JOIN workers w ON w.id = s.worker_id WHERE w.admin_state = 'draining' "
                       "AND (w.state <> 'unreachable' OR (s.observed_state IN ('suspended', 'stopped') "
                       "AND s.stored_bytes IS NOT NULL)) AND s.deleted_at IS NULL AND s.desired_state <> 'deleted' "
                       "AND s.observed_state IN ('running', 'paused', 'suspended', 'stopped') "
                       "AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.target_id = s.id "
                       "AND (o.state IN ('pending', 'running') OR (o.state = 'failed' AND o.request ? 'drain' "
                       "AND o.updated_at > now() - interval '" COOLDOWN "'))) "
                       "ORDER BY s.created_at LIMIT 100",
                       0, NULL, &res, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(res); i++)
                record(c, res, i);
}
