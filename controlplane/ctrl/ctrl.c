/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Leader election, wake-ups and the periodic backstop; worker clients; the
 * policies (timeouts, idle suspension; drains in drain.c), garbage
 * collection and the controllers' metrics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_internal.h"
#include "fleet/fleet.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "store/workers.h"

/* An arbitrary, fixed key for the leader's advisory lock: "space lead". */
#define LEADER_LOCK_KEY "7370616365"

bool cp__inflight_has(cp_ctrl *c, const char *key)
{
        for (size_t i = 0; i < CP_CTRL_MAX_INFLIGHT; i++)
                if (c->inflight[i] && strcmp(c->inflight[i], key) == 0)
                        return true;
        return false;
}

bool cp__inflight_add(cp_ctrl *c, const char *key)
{
        if (cp__inflight_has(c, key))
                return false;
        for (size_t i = 0; i < CP_CTRL_MAX_INFLIGHT; i++)
                if (!c->inflight[i]) {
                        c->inflight[i] = strdup(key);
                        return c->inflight[i] != NULL;
                }
        return false; /* full: try again on a later tick */
}

void cp__inflight_del(cp_ctrl *c, const char *key)
{
        for (size_t i = 0; i < CP_CTRL_MAX_INFLIGHT; i++)
                if (c->inflight[i] && strcmp(c->inflight[i], key) == 0) {
                        free(c->inflight[i]);
                        c->inflight[i] = NULL;
                }
}

cp_wclient *cp__worker_entry(cp_ctrl *c, const char *worker_id)
{
        const char *params[] = {worker_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db, "SELECT address, coalesce(cert_serial, '') FROM workers WHERE id = $1", 1, params, &res,
                       NULL) < 0 ||
            PQntuples(res) != 1)
                return NULL;
        const char *addr = PQgetvalue(res, 0, 0);
        cp_wclient *w = NULL;
        for (size_t i = 0; i < c->nworkers; i++)
                if (strcmp(c->workers[i].id, worker_id) == 0)
                        w = &c->workers[i];
        if (!w && c->nworkers >= CP_CTRL_MAX_WORKERS)
                return NULL;
        _cleanup_error_ sp_error *e = NULL;
        uint64_t generation = 0;
        char key[CP_FLEET_WORKER_KEY_MAX];
        cp_fleet_worker_key_of(worker_id, PQgetvalue(res, 0, 1), key); /* the same row: no second query */
        sp_rpc_client *cli = sp_rpc_pool_get(c->pool, key, addr, &generation, &e);
        if (!cli) {
                sp_log_warn("worker %s at %s: %s", worker_id, addr, e->message);
                return NULL;
        }
        if (!w) {
                w = &c->workers[c->nworkers++];
                memset(w, 0, sizeof(*w));
                snprintf(w->id, sizeof(w->id), "%s", worker_id);
        }
        if (!w->warm_set || w->generation != generation) {
                /* A new client (the worker moved): what it was told starts afresh. */
                json_object *fresh = json_object_new_object();
                if (!fresh)
                        return NULL;
                if (w->warm_set)
                        json_object_put(w->warm_set);
                w->warm_set = fresh;
                w->generation = generation;
        }
        w->cli = cli;
        return w;
}

sp_rpc_client *cp__worker_client(cp_ctrl *c, const char *worker_id)
{
        cp_wclient *w = cp__worker_entry(c, worker_id);
        return w ? w->cli : NULL;
}

/* Turns a batch of sandboxes into operations: sets desired state `to` and
 * records an operation of `kind` with `message` for each sandbox the query
 * returns (id, tenant id and the status message the sandbox shows once the
 * operation is done, which may be NULL). */
static void make_ops(cp_ctrl *c, const char *select_sql, int nparams, const char *const *params, const char *to,
                     const char *kind, const char *message)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db, select_sql, nparams, params, &res, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(res); i++) {
                char op[SP_ID_MAX];
                if (sp_id_new("op", op, NULL) < 0)
                        return;
                const char *status = PQgetisnull(res, i, 2) ? NULL : PQgetvalue(res, i, 2);
                const char *p[] = {PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), op, to, kind, message, status};
                const char *up[] = {p[0], to};
                /* The conditions are checked again under the row lock. */
                const cp_db_stmt txn[] = {
                        {"UPDATE sandboxes SET desired_state = $2, updated_at = now() WHERE id = $1 "
                         "AND deleted_at IS NULL AND NOT EXISTS (SELECT 1 FROM operations o WHERE "
                         "o.target_id = $1 AND o.state IN ('pending', 'running'))",
                         2, up, false},
                        {"INSERT INTO operations (id, tenant_id, kind, target_id, state, message, deadline_at, "
                         "request) SELECT $3, $2, $5, $1, 'pending', $6, now() + interval '10 minutes', "
                         "CASE WHEN $7::text IS NULL THEN '{}'::jsonb ELSE jsonb_build_object("
                         "'status_message', $7::text) END "
                         "WHERE EXISTS (SELECT 1 FROM sandboxes WHERE id = $1 AND desired_state = $4)",
                         7, p, false},
                };
                if (cp_db_txn(c->db, txn, SP_ARRAY_SIZE(txn), NULL) < 0)
                        return;
                sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", PQgetvalue(res, i, 0)), "%s: %s", kind, message);
        }
}

#define IDLE_OF "coalesce(s.idle_timeout_s, $1::integer)"
#define NO_ACTIVE_OP \
        "NOT EXISTS (SELECT 1 FROM operations o WHERE o.target_id = s.id AND o.state IN ('pending', 'running'))"

void cp__policies_run(cp_ctrl *c)
{
        make_ops(c,
                 "SELECT s.id, s.tenant_id, NULL FROM sandboxes s WHERE s.end_at <= now() AND s.deleted_at IS NULL "
                 "AND s.desired_state IN ('running', 'paused') AND s.end_action = 'kill' AND " NO_ACTIVE_OP
                 " LIMIT 100",
                 0, NULL, "deleted", "delete", "its timeout passed");
        make_ops(c,
                 "SELECT s.id, s.tenant_id, 'suspended: its timeout passed' FROM sandboxes s WHERE s.end_at <= now() "
                 "AND s.deleted_at IS NULL AND s.desired_state IN ('running', 'paused') AND s.end_action = 'suspend' "
                 "AND " NO_ACTIVE_OP " LIMIT 100",
                 0, NULL, "suspended", "suspend", "its timeout passed");
        char idle[24];
        snprintf(idle, sizeof(idle), "%lld", (long long)c->cfg.default_idle_timeout_s);
        const char *ip[] = {idle};
        make_ops(c,
                 "SELECT s.id, s.tenant_id, 'suspended: idle for longer than its idle timeout' FROM sandboxes s "
                 "WHERE s.deleted_at IS NULL AND s.desired_state = "
                 "'running' AND s.observed_state = 'running' AND " IDLE_OF " > 0 AND s.last_active_at + "
                 "make_interval(secs => " IDLE_OF ") < now() AND " NO_ACTIVE_OP " LIMIT 100",
                 1, ip, "suspended", "suspend", "idle for longer than its idle timeout");
        cp__drain_run(c);
}

static void gc_run(cp_ctrl *c)
{
        (void)cp_db_exec(c->db, "DELETE FROM sandboxes WHERE deleted_at < now() - interval '1 day'", 0, NULL, NULL,
                         NULL);
        (void)cp_db_exec(c->db,
                         "DELETE FROM operations WHERE state IN ('succeeded', 'failed') AND updated_at < now() - "
                         "interval '7 days'",
                         0, NULL, NULL, NULL);
        (void)cp_db_exec(c->db, "DELETE FROM idempotency_keys WHERE created_at < now() - interval '1 day'", 0, NULL,
                         NULL, NULL);
        (void)cp_db_exec(c->db, "DELETE FROM join_tokens WHERE expires_at < now() - interval '7 days'", 0, NULL, NULL,
                         NULL);
        (void)cp_db_exec(c->db, "DELETE FROM sandbox_moves WHERE at < now() - interval '30 days'", 0, NULL, NULL, NULL);
}

/* Deletes audit records older than the retention (--audit-retention), the
 * oldest first, in batches so that no statement holds the table long;
 * bounded per run (the next run goes on). */
#define AUDIT_GC_BATCH 5000 /* the LIMIT in the statement */
#define AUDIT_GC_BATCHES 200
static void audit_gc_run(cp_ctrl *c)
{
        if (c->cfg.audit_retention_s <= 0)
                return;
        char secs[24];
        snprintf(secs, sizeof(secs), "%lld", (long long)c->cfg.audit_retention_s);
        const char *params[] = {secs};
        long long total = 0;
        for (int i = 0; i < AUDIT_GC_BATCHES; i++) {
                _cleanup_pgresult_ PGresult *res = NULL;
                if (cp_db_exec(c->db,
                               "DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < now() - "
                               "make_interval(secs => $1::bigint) ORDER BY at LIMIT 5000)",
                               1, params, &res, NULL) < 0)
                        break;
                long long n = atoll(PQcmdTuples(res));
                total += n;
                if (n < AUDIT_GC_BATCH)
                        break;
        }
        if (total > 0)
                sp_log_info("controllers: %lld audit records older than %s s deleted", total, secs);
}

/* Expires operations that waited past their deadline without starting. */
static void expire_run(cp_ctrl *c)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db,
                       "UPDATE operations SET state = 'failed', updated_at = now(), error = jsonb_build_object("
                       "'code', 'timeout', 'message', 'the operation could not finish in time' || "
                       "coalesce(': ' || message, '')) WHERE state = 'pending' AND deadline_at < now() "
                       "RETURNING kind, target_id, coalesce(message LIKE 'cannot move%', false), message",
                       0, NULL, &res, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(res); i++) {
                const char *p[] = {PQgetvalue(res, i, 1)};
                if (strcmp(PQgetvalue(res, i, 0), "create") == 0)
                        (void)cp_db_exec(c->db,
                                         "UPDATE sandboxes SET observed_state = 'failed', status_message = "
                                         "'it could not be placed or created in time', updated_at = now() "
                                         "WHERE id = $1 AND worker_id IS NULL",
                                         1, p, NULL, NULL);
                if (strcmp(PQgetvalue(res, i, 2), "t") == 0) {
                        /* It stays where it is, and says why (no other worker could take it). */
                        const char *mp[] = {p[0], PQgetvalue(res, i, 3)};
                        (void)cp_db_exec(c->db,
                                         "UPDATE sandboxes SET status_message = $2, updated_at = now() WHERE id = $1",
                                         2, mp, NULL, NULL);
                }
                if (strcmp(PQgetvalue(res, i, 0), "template_build") == 0)
                        (void)cp_db_exec(c->db,
                                         "UPDATE templates SET state = 'failed', error = 'the build could not "
                                         "finish in time' WHERE id = $1",
                                         1, p, NULL, NULL);
        }
}

static void run(cp_ctrl *c)
{
        if (!c->leader)
                return;
        int changed = 0;
        if (cp_worker_mark_unreachable(c->db, c->cfg.unreachable_factor, &changed, NULL) == 0 && changed > 0)
                c->reconcile_due = true;
        expire_run(c);
        cp__policies_run(c);
        cp__ops_run(c);
        if (c->reconcile_due || c->ticks % 5 == 0) {
                c->reconcile_due = false;
                cp__reconcile_run(c);
        }
        if (c->ticks % 600 == 0)
                gc_run(c);
        if (c->audit_gc_due || c->ticks % 600 == 0) {
                c->audit_gc_due = false;
                audit_gc_run(c);
        }
}

static void lose_leadership(cp_ctrl *c, const char *why)
{
        if (c->leader)
                sp_log_warn("controllers: no longer the leader (%s)", why);
        c->leader = false;
        if (c->listen_ev) {
                event_free(c->listen_ev);
                c->listen_ev = NULL;
        }
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        run(arg);
}

static void on_listen(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        cp_ctrl *c = arg;
        PGconn *conn = cp_db_conn(c->lock_db, NULL);
        if (!conn || !PQconsumeInput(conn) || c->lock_generation != cp_db_generation(c->lock_db)) {
                lose_leadership(c, "lost the database connection that holds the lock");
                return;
        }
        PGnotify *n;
        bool any = false;
        while ((n = PQnotifies(conn))) {
                if (strncmp(n->extra, "worker", 6) == 0)
                        c->reconcile_due = true;
                any = true;
                PQfreemem(n);
        }
        if (any) {
                /* Coalesce a burst of notifications into one run. */
                struct timeval tv = {0, 0};
                event_add(c->kick_ev, &tv);
        }
}

static void try_lead(cp_ctrl *c)
{
        if (c->leader) {
                if (c->lock_generation != cp_db_generation(c->lock_db) || !cp_db_connected(c->lock_db))
                        lose_leadership(c, "lost the database connection that holds the lock");
                return;
        }
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->lock_db, "SELECT pg_try_advisory_lock(" LEADER_LOCK_KEY ")", 0, NULL, &res, NULL) < 0 ||
            strcmp(PQgetvalue(res, 0, 0), "t") != 0)
                return;
        if (cp_db_exec(c->lock_db, "LISTEN space_work", 0, NULL, NULL, NULL) < 0)
                return;
        PGconn *conn = cp_db_conn(c->lock_db, NULL);
        if (!conn)
                return;
        c->lock_generation = cp_db_generation(c->lock_db);
        c->listen_ev = event_new(c->base, PQsocket(conn), EV_READ | EV_PERSIST, on_listen, c);
        if (!c->listen_ev || event_add(c->listen_ev, NULL) < 0)
                return;
        c->leader = true;
        c->reconcile_due = true;
        c->audit_gc_due = true;
        sp_log_info("controllers: %s is the leader", c->cfg.name ? c->cfg.name : "this replica");
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        cp_ctrl *c = arg;
        c->ticks++;
        try_lead(c);
        run(c);
}

cp_ctrl *cp_ctrl_new(struct event_base *base, const cp_ctrl_config *cfg, sp_error **err)
{
        cp_ctrl *c = calloc(1, sizeof(*c));
        if (!c) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        c->base = base;
        c->cfg = *cfg;
        if (c->cfg.default_idle_timeout_s < 0)
                c->cfg.default_idle_timeout_s = 0;
        if (!c->cfg.tick_ms)
                c->cfg.tick_ms = 1000;
        if (!c->cfg.unreachable_factor)
                c->cfg.unreachable_factor = 3;
        if (!c->cfg.quarantine_threshold)
                c->cfg.quarantine_threshold = CP_WORKER_QUARANTINE_THRESHOLD;
        if (cfg->worker_tls)
                SSL_CTX_up_ref(cfg->worker_tls);
        if (!(c->pool = sp_rpc_pool_new(base, cfg->worker_tls, CP_CTRL_MAX_WORKERS, err)))
                goto fail;
        if (cp_db_open(cfg->conninfo, &c->db, err) < 0 || cp_db_open(cfg->conninfo, &c->lock_db, err) < 0)
                goto fail;
        sp_rpc_pool_set_verify(c->pool, cp_fleet_verify_worker, c->db);
        c->tick_ev = event_new(base, -1, EV_PERSIST, on_tick, c);
        c->kick_ev = event_new(base, -1, 0, on_kick, c);
        struct timeval tv = {c->cfg.tick_ms / 1000, (c->cfg.tick_ms % 1000) * 1000};
        if (!c->tick_ev || !c->kick_ev || event_add(c->tick_ev, &tv) < 0) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail;
        }
        try_lead(c);
        return c;
fail:
        cp_ctrl_free(c);
        return NULL;
}

void cp_ctrl_metrics(const cp_ctrl *c, sp_buf *b)
{
        sp_buf_appendf(b, NULL,
                       "# HELP space_controlplane_sandbox_moves_total Suspended sandboxes moved to another worker "
                       "(result moved), and attempts that failed (result failed; a retry may follow), by this "
                       "replica's controllers.\n# TYPE space_controlplane_sandbox_moves_total counter\n"
                       "space_controlplane_sandbox_moves_total{result=\"moved\"} %llu\n"
                       "space_controlplane_sandbox_moves_total{result=\"failed\"} %llu\n"
                       "# HELP space_controlplane_sandbox_move_bytes_total The artifacts' bytes of the sandboxes "
                       "moved.\n# TYPE space_controlplane_sandbox_move_bytes_total counter\n"
                       "space_controlplane_sandbox_move_bytes_total %llu\n",
                       (unsigned long long)(c ? c->moves_total : 0),
                       (unsigned long long)(c ? c->moves_failed_total : 0),
                       (unsigned long long)(c ? c->move_bytes_total : 0));
}

bool cp_ctrl_is_leader(const cp_ctrl *c)
{
        return c && c->leader;
}

cp_ctrl *cp_ctrl_free(cp_ctrl *c)
{
        if (!c)
                return NULL;
        if (c->listen_ev)
                event_free(c->listen_ev);
        if (c->tick_ev)
                event_free(c->tick_ev);
        if (c->kick_ev)
                event_free(c->kick_ev);
        c->pool = sp_rpc_pool_free(c->pool);
        for (size_t i = 0; i < c->nworkers; i++)
                if (c->workers[i].warm_set)
                        json_object_put(c->workers[i].warm_set);
        for (size_t i = 0; i < CP_CTRL_MAX_INFLIGHT; i++)
                free(c->inflight[i]);
        cp_db_close(c->lock_db);
        cp_db_close(c->db);
        if (c->cfg.worker_tls)
                SSL_CTX_free(c->cfg.worker_tls);
        free(c);
        return NULL;
}
