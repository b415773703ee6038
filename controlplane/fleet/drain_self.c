/* SPDX-License-Identifier: Apache-2.0 */
/*
 * DrainSelf: a worker, by its own certificate, asks for its drain (a node
 * shutting down: Kubernetes's pre-stop hook), undoes a drain of its own (the
 * node is back), or reads how far its drain has got. It can act only on
 * itself, and never lifts an operator's cordon or drain
 * (proto/spec/controlplane-rpc.md, DrainSelf), so that no admin key has to be
 * on a sandbox node for drains on shutdown.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "store/workers.h"

static int drain_self(cp_fleet *f, const char *name, const char *serial, json_object *req, json_object **ret,
                      sp_error **err)
{
        pr_cp_drain_self r;
        if (pr_msg_decode(&pr_cp_drain_self_schema, req, &r, err) < 0)
                return -SP_E_INVALID;
        if (!name)
                return sp_error_set(err, SP_E_PERMISSION, "DrainSelf needs a worker's certificate");
        if (cp_db_begin(f->db, err) < 0)
                return sp_error_wrap(err, "DrainSelf");
        char id[SP_ID_MAX];
        bool changed = false;
        int rc = cp_worker_self_admin(f->db, name, serial, r.action, id, &changed, err);
        if (rc == 0 && changed) {
                _cleanup_json_ json_object *detail = json_object_new_object();
                json_object_object_add(detail, "name", json_object_new_string(name));
                json_object_object_add(detail, "by", json_object_new_string("worker"));
                const char *params[] = {strcmp(r.action, "drain") == 0 ? "worker.drain" : "worker.uncordon", id,
                                        sp_json_str(detail)};
                rc = cp_db_exec(f->db, "INSERT INTO audit_log (action, target, detail) VALUES ($1, $2, $3::jsonb)", 3,
                                params, NULL, err);
        }
        if (rc == 0)
                rc = cp_db_commit(f->db, err);
        if (rc < 0) {
                cp_db_rollback(f->db);
                return rc;
        }
        if (changed)
                sp_log_info_kv(SP_KV("worker_id", id, "worker", name), "worker %s",
                               strcmp(r.action, "drain") == 0 ? "drains itself" : "undid its own drain");
        _cleanup_json_ json_object *w = NULL;
        if (cp_worker_get(f->db, id, &w, err) < 0)
                return sp_error_wrap(err, "DrainSelf");
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id};
        if (cp_db_exec(f->db, "SELECT admin_self FROM workers WHERE id = $1", 1, params, &res, err) < 0)
                return sp_error_wrap(err, "DrainSelf");
        json_object *n = NULL;
        const char *state = sp_json_member_str(w, "state"), *admin = sp_json_member_str(w, "admin_state");
        pr_cp_drain_self_resp resp = {
                .worker_id = id,
                .state = state ? state : "unknown",
                .admin_state = admin ? admin : "unknown",
                .by_self = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0,
                .sandboxes = json_object_object_get_ex(w, "sandboxes", &n) ? json_object_get_int64(n) : 0,
        };
        *ret = pr_msg_encode(&pr_cp_drain_self_resp_schema, &resp);
        return 0;
}

void cp__fleet_drain_self(sp_rpc_call *call, json_object *req, void *userdata)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *resp = NULL;
        const char *name = sp_rpc_call_peer_name(call);
        if (drain_self(userdata, name, sp_rpc_call_peer_serial(call), req, &resp, &e) < 0) {
                sp_log_warn_kv(SP_KV("worker", name ? name : "?"), "DrainSelf refused: %s", e->message);
                sp_rpc_call_fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, resp, NULL);
}
