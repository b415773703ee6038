/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Join: a worker without a certificate presents a join token and a CSR; the
 * control plane signs it with the cluster CA and records the worker, all in
 * one transaction (a refused or failed join consumes no use of the token).
 * A join with "role":"dataplane" is a data-plane replica's (dataplane.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

/* Decodes the worker's Join (space/controlplane_rpc.h), then checks what
 * the codec cannot. Strings and labels are borrowed from req. */
static int parse(json_object *req, pr_cp_join *r, sp_error **err)
{
        if (pr_msg_decode(&pr_cp_join_worker_schema, req, r, err) < 0 || cp__fleet_check_labels(r->labels, err) < 0)
                return -SP_E_INVALID;
        if (!cp__fleet_name_ok(r->name))
                return sp_error_set(
                        err, SP_E_INVALID,
                        "name '%s' must be 1 to 63 characters of [a-z0-9.-], starting with a letter or digit", r->name);
        if (!cp_fleet_address_ok(r->address))
                return sp_error_set(err, SP_E_INVALID, "address '%s' must be HOST:PORT the control plane can dial",
                                    r->address);
        if (!cp__fleet_backend_ok(r->backend))
                return sp_error_set(err, SP_E_INVALID, "backend '%s' must be jail, qemu or firecracker", r->backend);
        return 0;
}

/* A worker's name is its identity: a join under it gives the joiner that
 * worker's sandboxes (and their secrets when they are made again). So a join
 * under a name that has joined before needs an operator's consent
 * (rejoin_allowed_until, POST /v1/workers/{id}/allow-rejoin; one join, then
 * it is cleared), else SP_E_PERMISSION. Even then, the worker that lost its
 * state and joins again waits
 * (SP_E_UNAVAILABLE, which the joiner retries) until the old one has been
 * silent for REJOIN_SILENT_BEATS heartbeat intervals — counted from its last
 * heartbeat, or from its last join when none came since — and, after this
 * replica's connection to the database was (re)made (an outage, a restart:
 * heartbeats could not be recorded meanwhile), until as long again has
 * passed. Joins under one name take turns (a lock on the name, also before
 * any row exists). */
#define REJOIN_SILENT_BEATS 3
static int refuse_live_name(cp_fleet *f, const char *name, sp_error **err)
{
        char beats[8];
        snprintf(beats, sizeof(beats), "%d", REJOIN_SILENT_BEATS);
        const char *params[] = {name, beats};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(f->db, "SELECT pg_advisory_xact_lock(hashtext('space.worker.join'), hashtext($1))", 1, params,
                       NULL, err) < 0 ||
            cp_db_exec(f->db,
                       "SELECT (extract(epoch FROM now() - coalesce(last_heartbeat, updated_at)) * 1000)::bigint, "
                       "coalesce(last_heartbeat, updated_at) > now() - "
                       "make_interval(secs => heartbeat_ms::double precision * $2::integer / 1000), "
                       "coalesce(rejoin_allowed_until > now(), false) "
                       "FROM workers WHERE name = $1 FOR UPDATE",
                       2, params, &res, err) < 0)
                return sp_error_wrap(err, "join");
        if (PQntuples(res) != 1)
                return 0;
        if (strcmp(PQgetvalue(res, 0, 2), "t") != 0)
                return sp_error_set(err, SP_E_PERMISSION,
                                    "a worker named '%s' has joined this cluster before: a join under its name takes "
                                    "over its sandboxes, so an operator must allow it first (spacectl worker "
                                    "allow-rejoin %s; POST /v1/workers/{id}/allow-rejoin), e.g. after the worker "
                                    "lost its state directory",
                                    name, name);
        if (strcmp(PQgetvalue(res, 0, 1), "t") == 0)
                return sp_error_set(err, SP_E_UNAVAILABLE,
                                    "a worker named '%s' is alive (heard from %s ms ago): a join under its name "
                                    "waits until it has been silent for %d heartbeats",
                                    name, PQgetvalue(res, 0, 0), REJOIN_SILENT_BEATS);
        int64_t up_us = sp_now_mono_us() - cp_db_connected_since(f->db);
        if (up_us < REJOIN_SILENT_BEATS * f->cfg.heartbeat_ms * 1000)
                return sp_error_set(err, SP_E_UNAVAILABLE,
                                    "a worker named '%s' exists, and this control plane has been able to hear from "
                                    "workers for only %lld ms: a join under its name waits until it has for %d "
                                    "heartbeats",
                                    name, (long long)(up_us / 1000), REJOIN_SILENT_BEATS);
        return 0;
}

/* Everything after the token check, inside the transaction. */
static int record(cp_fleet *f, const pr_cp_join *r, const char *token_id, char **ret_cert,
                  char ret_worker_id[static SP_ID_MAX], sp_error **err)
{
        if (refuse_live_name(f, r->name, err) < 0)
                return -SP_E_UNAVAILABLE;
        sp_pki_cert_info info;
        _cleanup_free_ char *cert = sp_pki_csr_sign(f->ca, r->csr, SP_ROLE_WORKER, (int)f->cfg.cert_days, &info, err);
        if (!cert)
                return sp_error_wrap(err, "csr");
        if (strcmp(info.name, r->name) != 0)
                return sp_error_set(err, SP_E_INVALID, "csr: its common name '%s' must be the worker's name '%s'",
                                    info.name, r->name);
        char id[SP_ID_MAX], hb[24];
        if (sp_id_new("wkr", id, err) < 0)
                return -SP_E_IO;
        snprintf(hb, sizeof(hb), "%lld", (long long)f->cfg.heartbeat_ms);
        const char *labels = r->labels ? sp_json_str(r->labels) : "{}";
        const char *params[] = {id, r->name, r->address, r->backend, labels, hb, info.serial};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(f->db,
                       "INSERT INTO workers (id, name, address, backend, labels, state, heartbeat_ms, cert_serial) "
                       "VALUES ($1, $2, $3, $4, $5::jsonb, 'ready', $6::integer, $7) "
                       "ON CONFLICT (name) DO UPDATE SET address = EXCLUDED.address, backend = EXCLUDED.backend, "
                       "labels = EXCLUDED.labels, heartbeat_ms = EXCLUDED.heartbeat_ms, "
                       "cert_serial = EXCLUDED.cert_serial, last_heartbeat = NULL, admin_self = false, "
                       "rejoin_allowed_until = NULL, "
                       "updated_at = now() "
                       "RETURNING id",
                       7, params, &res, err) < 0)
                return sp_error_wrap(err, "record worker");
        const char *worker_id = PQgetvalue(res, 0, 0);
        bool rejoin = strcmp(worker_id, id) != 0;
        _cleanup_json_ json_object *detail = json_object_new_object();
        json_object_object_add(detail, "name", json_object_new_string(r->name));
        json_object_object_add(detail, "address", json_object_new_string(r->address));
        json_object_object_add(detail, "backend", json_object_new_string(r->backend));
        json_object_object_add(detail, "token_id", json_object_new_string(token_id));
        json_object_object_add(detail, "cert_serial", json_object_new_string(info.serial));
        json_object_object_add(detail, "rejoin", json_object_new_boolean(rejoin));
        const char *aparams[] = {worker_id, sp_json_str(detail)};
        if (cp_db_exec(f->db, "INSERT INTO audit_log (action, target, detail) VALUES ('worker.join', $1, $2::jsonb)", 2,
                       aparams, NULL, err) < 0 ||
            cp_db_exec(f->db, "SELECT pg_notify('" CP_FLEET_CHANNEL "', 'worker:' || $1)", 1, aparams, NULL, err) < 0)
                return sp_error_wrap(err, "record worker");
        snprintf(ret_worker_id, SP_ID_MAX, "%s", worker_id);
        *ret_cert = TAKE_PTR(cert);
        return 0;
}

static int join(cp_fleet *f, json_object *req, json_object **ret, sp_error **err)
{
        pr_cp_join r;
        if (parse(req, &r, err) < 0)
                return -SP_E_INVALID;
        if (cp_db_begin(f->db, err) < 0)
                return sp_error_wrap(err, "join");
        char token_id[SP_ID_MAX], worker_id[SP_ID_MAX];
        _cleanup_free_ char *cert = NULL;
        int rc = cp__jointoken_consume(f->db, r.token, "worker", token_id, err);
        if (rc == 0)
                rc = record(f, &r, token_id, &cert, worker_id, err);
        if (rc == 0)
                rc = cp_db_commit(f->db, err);
        if (rc < 0) {
                cp_db_rollback(f->db);
                return rc;
        }
        sp_log_info_kv(SP_KV("worker_id", worker_id, "worker", r.name, "address", r.address, "token_id", token_id),
                       "worker joined");
        pr_cp_join_worker_resp resp = {
                .worker_id = worker_id, .certificate = cert, .ca = f->ca_pem, .heartbeat_ms = f->cfg.heartbeat_ms};
        json_object *o = pr_msg_encode(&pr_cp_join_worker_resp_schema, &resp);
        *ret = o;
        return 0;
}

void cp__fleet_join(sp_rpc_call *call, json_object *req, void *userdata)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *resp = NULL;
        const char *role = "worker";
        int r = sp_json_get_string(req, "role", false, PR_CP_ROLE_MAX, &role, &e);
        if (r == 0 && strcmp(role, "worker") == 0)
                r = join(userdata, req, &resp, &e);
        else if (r == 0 && strcmp(role, "dataplane") == 0)
                r = cp__fleet_join_dataplane(userdata, req, &resp, &e);
        else if (r == 0)
                r = sp_error_set(&e, SP_E_INVALID, "role must be worker or dataplane");
        if (r < 0) {
                const char *name = NULL;
                (void)sp_json_get_string(req, "name", false, CP_FLEET_NAME_MAX, &name, NULL);
                sp_log_warn_kv(SP_KV("role", role, "name", name ? name : "?"), "join refused: %s", e->message);
                sp_rpc_call_fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, resp, NULL);
}
