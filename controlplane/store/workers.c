/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Workers in the store. Every change of a worker's health or admin state
 * wakes the controllers (NOTIFY space_work, 'worker:<id>') in the same
 * statement, so it is sent exactly when the change commits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "store/workers.h"

#define ID_MAX 64
#define FACTOR_MAX 1000
#define THRESHOLD_MAX 1000
#define REASON_MAX 1024
/* A quarantine lifted from a worker heard within this many intervals makes it ready at once. */
#define RECENT_FACTOR "3"

/* The sandboxes a worker holds, in any state but failed: a drain moves
 * them all away (a failed one cannot move, and keeps no worker from being
 * drained). */
#define HELD_WHERE "deleted_at IS NULL AND observed_state NOT IN ('deleted', 'failed')"
#define HELD_BY \
        "SELECT worker_id, count(*) n FROM sandboxes WHERE worker_id IS NOT NULL AND " HELD_WHERE " GROUP BY " \
        "worker_id"

/* Columns of one worker and what its placed sandboxes use. Sandboxes that
 * hold no resources on it (suspended, stopped, failed, deleted) do not count. */
#define WORKER_SELECT \
        "SELECT w.id, coalesce(w.name, w.id), w.address, w.backend, w.labels::text, w.state, w.admin_state, " \
        "w.capacity::text, w.observed::text, w.failures, w.quarantine_reason, " \
        "(extract(epoch FROM w.last_heartbeat) * 1000000)::bigint, " \
        "(extract(epoch FROM w.created_at) * 1000000)::bigint, " \
        "coalesce(u.cpu, 0), coalesce(u.mem, 0), coalesce(u.n, 0), coalesce(h.n, 0), " \
        "(extract(epoch FROM w.drain_started_at) * 1000000)::bigint, " \
        "CASE WHEN w.admin_self THEN 'worker' ELSE 'operator' END, " \
        "array_to_json(coalesce(w.backends, ARRAY[w.backend]))::text " \
        "FROM workers w LEFT JOIN (" \
        "SELECT worker_id, " \
        "sum(CASE WHEN jsonb_typeof(spec->'resources'->'cpu_millis') = 'number' " \
        "THEN (spec->'resources'->>'cpu_millis')::numeric ELSE 0 END)::bigint AS cpu, " \
        "sum(CASE WHEN jsonb_typeof(spec->'resources'->'memory_mb') = 'number' " \
        "THEN (spec->'resources'->>'memory_mb')::numeric ELSE 0 END)::bigint AS mem, " \
        "count(*) AS n FROM sandboxes WHERE worker_id IS NOT NULL AND deleted_at IS NULL " \
        "AND observed_state NOT IN ('suspended', 'deleted', 'failed', 'stopped') GROUP BY worker_id" \
        ") u ON u.worker_id = w.id LEFT JOIN (" HELD_BY ") h ON h.worker_id = w.id "

enum {
        C_ID,
        C_NAME,
        C_ADDRESS,
        C_BACKEND,
        C_LABELS,
        C_STATE,
        C_ADMIN,
        C_CAPACITY,
        C_OBSERVED,
        C_FAILURES,
        C_REASON,
        C_HEARTBEAT,
        C_CREATED,
        C_USED_CPU,
        C_USED_MEM,
        C_USED_SLOTS,
        C_HELD,
        C_DRAIN_STARTED,
        C_ADMIN_BY,
        C_BACKENDS
};

static json_object *parse_object(PGresult *res, int row, int col)
{
        json_object *o = NULL;
        const char *text = PQgetvalue(res, row, col);
        if (PQgetisnull(res, row, col) || sp_json_parse(text, strlen(text), &o, NULL) < 0 ||
            !json_object_is_type(o, json_type_object)) {
                if (o)
                        json_object_put(o);
                return json_object_new_object();
        }
        return o;
}

static json_object *int_of(PGresult *res, int row, int col)
{
        return json_object_new_int64(strtoll(PQgetvalue(res, row, col), NULL, 10));
}

static json_object *time_of(PGresult *res, int row, int col)
{
        if (PQgetisnull(res, row, col))
                return NULL;
        char ts[32];
        sp_time_format_rfc3339(strtoll(PQgetvalue(res, row, col), NULL, 10), ts);
        return json_object_new_string(ts);
}

static json_object *resources(int64_t cpu, int64_t mem, int64_t slots)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "cpu_millis", json_object_new_int64(cpu));
        json_object_object_add(o, "memory_mb", json_object_new_int64(mem));
        json_object_object_add(o, "slots", json_object_new_int64(slots));
        return o;
}

static int64_t member_int(json_object *o, const char *key)
{
        json_object *v;
        return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_int) ? json_object_get_int64(v)
                                                                                              : 0;
}

/* The one word for operators, by precedence; a draining worker that holds
 * no sandbox any more (`held` is 0) is drained. */
static const char *summary_state(const char *health, const char *admin, const char *held)
{
        if (strcmp(health, "quarantined") == 0 || strcmp(health, "unreachable") == 0)
                return health;
        if (strcmp(admin, "draining") == 0 && strcmp(held, "0") == 0)
                return "drained";
        if (strcmp(admin, "draining") == 0 || strcmp(admin, "cordoned") == 0)
                return admin;
        return health;
}

static json_object *worker_json(PGresult *res, int i)
{
        json_object *o = json_object_new_object();
        const char *health = PQgetvalue(res, i, C_STATE), *admin = PQgetvalue(res, i, C_ADMIN);
        json_object_object_add(o, "id", json_object_new_string(PQgetvalue(res, i, C_ID)));
        json_object_object_add(o, "name", json_object_new_string(PQgetvalue(res, i, C_NAME)));
        json_object_object_add(o, "address", json_object_new_string(PQgetvalue(res, i, C_ADDRESS)));
        json_object_object_add(o, "backend", json_object_new_string(PQgetvalue(res, i, C_BACKEND)));
        json_object *backends = NULL;
        const char *bt = PQgetvalue(res, i, C_BACKENDS);
        if (sp_json_parse(bt, strlen(bt), &backends, NULL) < 0 || !json_object_is_type(backends, json_type_array)) {
                json_object_put(backends);
                backends = json_object_new_array();
                json_object_array_add(backends, json_object_new_string(PQgetvalue(res, i, C_BACKEND)));
        }
        json_object_object_add(o, "backends", backends);
        json_object_object_add(o, "labels", parse_object(res, i, C_LABELS));
        json_object_object_add(o, "state",
                               json_object_new_string(summary_state(health, admin, PQgetvalue(res, i, C_HELD))));
        json_object_object_add(o, "admin_state", json_object_new_string(admin));
        /* who set it: the worker draining itself (DrainSelf) or an operator; absent while active */
        if (strcmp(admin, "active") != 0)
                json_object_object_add(o, "admin_by", json_object_new_string(PQgetvalue(res, i, C_ADMIN_BY)));
        json_object_object_add(o, "health", json_object_new_string(health));
        _cleanup_json_ json_object *cap = parse_object(res, i, C_CAPACITY);
        json_object *capacity =
                resources(member_int(cap, "cpu_millis"), member_int(cap, "memory_mb"), member_int(cap, "slots"));
        if (member_int(cap, "disk_mb") > 0) /* its storage pool, when the worker reports it */
                json_object_object_add(capacity, "disk_mb", json_object_new_int64(member_int(cap, "disk_mb")));
        json_object_object_add(o, "capacity", capacity);
        json_object_object_add(o, "used",
                               resources(strtoll(PQgetvalue(res, i, C_USED_CPU), NULL, 10),
                                         strtoll(PQgetvalue(res, i, C_USED_MEM), NULL, 10),
                                         strtoll(PQgetvalue(res, i, C_USED_SLOTS), NULL, 10)));
        json_object_object_add(o, "observed", parse_object(res, i, C_OBSERVED));
        json_object_object_add(o, "failures", int_of(res, i, C_FAILURES));
        json_object_object_add(o, "quarantine_reason",
                               PQgetisnull(res, i, C_REASON) ? NULL
                                                             : json_object_new_string(PQgetvalue(res, i, C_REASON)));
        json_object_object_add(o, "last_heartbeat", time_of(res, i, C_HEARTBEAT));
        json_object_object_add(o, "created_at", time_of(res, i, C_CREATED));
        json_object_object_add(o, "sandboxes", int_of(res, i, C_HELD));
        return o;
}

/* The sandboxes still on a draining worker, with why each is there. */
#define LEFT_SQL \
        "SELECT s.id, s.tenant_id, s.observed_state, s.desired_state, o.id, o.kind, " \
        "coalesce(o.message, s.status_message) FROM sandboxes s LEFT JOIN LATERAL (SELECT id, kind, message " \
        "FROM operations x WHERE x.target_id = s.id AND x.state IN ('pending', 'running') ORDER BY x.created_at " \
        "LIMIT 1) o ON true WHERE s.worker_id = $1 AND s.deleted_at IS NULL " \
        "AND s.observed_state NOT IN ('deleted', 'failed') ORDER BY s.created_at, s.id LIMIT " LIST_MAX

/* The moves away from it since its drain began, with where each sandbox is now. */
#define MOVED_SQL \
        "SELECT m.sandbox_id, coalesce(w.name, m.to_worker), m.to_worker, m.bytes, " \
        "(extract(epoch FROM m.at) * 1000000)::bigint, coalesce(s.observed_state, 'deleted'), " \
        "coalesce(s.desired_state, 'deleted'), s.worker_id = m.to_worker FROM sandbox_moves m " \
        "LEFT JOIN workers w ON w.id = m.to_worker LEFT JOIN sandboxes s ON s.id = m.sandbox_id " \
        "WHERE m.from_worker = $1 AND m.at >= $2::timestamptz ORDER BY m.at, m.id LIMIT " LIST_MAX
#define LIST_MAX "1000"

static json_object *str_or_null(PGresult *res, int row, int col)
{
        return PQgetisnull(res, row, col) ? NULL : json_object_new_string(PQgetvalue(res, row, col));
}

/* {"started_at", "left": [...], "moved": [...]} of a draining worker (w, its row). */
static int drain_json(cp_db *db, PGresult *w, json_object **ret, sp_error **err)
{
        char since[40];
        sp_time_format_rfc3339(strtoll(PQgetvalue(w, 0, C_DRAIN_STARTED), NULL, 10), since);
        const char *p[] = {PQgetvalue(w, 0, C_ID), since};
        _cleanup_pgresult_ PGresult *left = NULL, *moved = NULL;
        if (cp_db_exec(db, LEFT_SQL, 1, p, &left, err) < 0 || cp_db_exec(db, MOVED_SQL, 2, p, &moved, err) < 0)
                return sp_error_wrap(err, "the worker's drain");
        json_object *o = json_object_new_object(), *l = json_object_new_array(), *m = json_object_new_array();
        json_object_object_add(o, "started_at", json_object_new_string(since));
        json_object_object_add(o, "left", l);
        json_object_object_add(o, "moved", m);
        for (int i = 0; i < PQntuples(left); i++) {
                json_object *e = json_object_new_object();
                json_object_object_add(e, "id", str_or_null(left, i, 0));
                json_object_object_add(e, "tenant_id", str_or_null(left, i, 1));
                json_object_object_add(e, "state", str_or_null(left, i, 2));
                json_object_object_add(e, "desired_state", str_or_null(left, i, 3));
                json_object_object_add(e, "operation_id", str_or_null(left, i, 4));
                json_object_object_add(e, "operation_kind", str_or_null(left, i, 5));
                json_object_object_add(e, "message", str_or_null(left, i, 6));
                json_object_array_add(l, e);
        }
        for (int i = 0; i < PQntuples(moved); i++) {
                json_object *e = json_object_new_object();
                json_object_object_add(e, "sandbox_id", str_or_null(moved, i, 0));
                json_object_object_add(e, "to", str_or_null(moved, i, 1));
                json_object_object_add(e, "to_worker_id", str_or_null(moved, i, 2));
                json_object_object_add(e, "bytes", int_of(moved, i, 3));
                json_object_object_add(e, "at", time_of(moved, i, 4));
                json_object_object_add(e, "state", str_or_null(moved, i, 5));
                json_object_object_add(e, "desired_state", str_or_null(moved, i, 6));
                /* false: it has left that worker too since (another move, or deleted) */
                json_object_object_add(e, "there", json_object_new_boolean(strcmp(PQgetvalue(moved, i, 7), "t") == 0));
                json_object_array_add(m, e);
        }
        *ret = o;
        return 0;
}

int cp_worker_list(cp_db *db, json_object **ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db, WORKER_SELECT "ORDER BY 2, w.id", 0, NULL, &res, err) < 0)
                return sp_error_wrap(err, "list workers");
        json_object *arr = json_object_new_array();
        for (int i = 0; i < PQntuples(res); i++)
                json_object_array_add(arr, worker_json(res, i));
        *ret = arr;
        return 0;
}

static int not_found(const char *id, sp_error **err)
{
        return sp_error_set(err, SP_E_NOT_FOUND, "worker %.64s not found", id ? id : "");
}

int cp_worker_get(cp_db *db, const char *id, json_object **ret, sp_error **err)
{
        if (!id || strlen(id) > ID_MAX)
                return not_found(id, err);
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id};
        if (cp_db_exec(db, WORKER_SELECT "WHERE w.id = $1", 1, params, &res, err) < 0)
                return sp_error_wrap(err, "get worker");
        if (PQntuples(res) != 1)
                return not_found(id, err);
        json_object *w = worker_json(res, 0), *drain = NULL;
        if (strcmp(PQgetvalue(res, 0, C_ADMIN), "draining") == 0 && !PQgetisnull(res, 0, C_DRAIN_STARTED) &&
            drain_json(db, res, &drain, err) < 0) {
                json_object_put(w);
                return -SP_E_UNAVAILABLE;
        }
        json_object_object_add(w, "drain", drain);
        *ret = w;
        return 0;
}

int cp_worker_set_admin_state(cp_db *db, const char *id, const char *admin_state, sp_error **err)
{
        if (!admin_state || (strcmp(admin_state, "active") != 0 && strcmp(admin_state, "cordoned") != 0 &&
                             strcmp(admin_state, "draining") != 0))
                return sp_error_set(err, SP_E_INVALID, "admin state must be active, cordoned or draining");
        if (!id || strlen(id) > ID_MAX)
                return not_found(id, err);
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id, admin_state};
        if (cp_db_exec(db,
                       "WITH old AS (SELECT id, admin_state FROM workers WHERE id = $1 FOR UPDATE), "
                       "upd AS (UPDATE workers w SET admin_state = $2, admin_self = false, updated_at = now(), "
                       "drain_started_at = "
                       "CASE WHEN $2 <> 'draining' THEN NULL WHEN old.admin_state = 'draining' "
                       "THEN coalesce(w.drain_started_at, now()) ELSE now() END FROM old "
                       "WHERE w.id = old.id RETURNING w.id, old.admin_state <> $2 AS changed) "
                       "SELECT id, CASE WHEN changed THEN pg_notify('space_work', 'worker:' || id) END FROM upd",
                       2, params, &res, err) < 0)
                return sp_error_wrap(err, "set worker admin state");
        if (PQntuples(res) != 1)
                return not_found(id, err);
        return 0;
}

int cp_worker_self_admin(cp_db *db, const char *name, const char *serial, const char *action,
                         char ret_id[static SP_ID_MAX], bool *ret_changed, sp_error **err)
{
        bool drain = strcmp(action, "drain") == 0, undo = strcmp(action, "uncordon") == 0;
        if (!drain && !undo && strcmp(action, "status") != 0)
                return sp_error_set(err, SP_E_INVALID, "action must be drain, uncordon or status");
        _cleanup_pgresult_ PGresult *old = NULL, *upd = NULL;
        const char *params[] = {name};
        if (cp_db_exec(db, "SELECT id, admin_state, admin_self, cert_serial FROM workers WHERE name = $1 FOR UPDATE", 1,
                       params, &old, err) < 0)
                return sp_error_wrap(err, "worker admin state");
        if (PQntuples(old) != 1)
                return sp_error_set(err, SP_E_PERMISSION, "worker '%s' has not joined this cluster", name);
        const char *current = PQgetisnull(old, 0, 3) ? "" : PQgetvalue(old, 0, 3);
        if (*current && (!serial || strcmp(current, serial) != 0))
                return sp_error_set(err, SP_E_PERMISSION,
                                    "this certificate of worker '%s' was replaced by a later join under that name: "
                                    "it no longer speaks for the worker",
                                    name);
        snprintf(ret_id, SP_ID_MAX, "%s", PQgetvalue(old, 0, 0));
        const char *admin = PQgetvalue(old, 0, 1);
        bool self = strcmp(PQgetvalue(old, 0, 2), "t") == 0;
        *ret_changed = false;
        const char *idp[] = {ret_id};
        if (drain && strcmp(admin, "draining") != 0) {
                /* From active the drain is the worker's own; from an operator's
                 * cordon it stays the operator's (the worker cannot lift it). */
                *ret_changed = true;
                if (cp_db_exec(db,
                               strcmp(admin, "active") == 0
                                       ? "UPDATE workers SET admin_state = 'draining', admin_self = true, "
                                         "drain_started_at = now(), updated_at = now() WHERE id = $1"
                                       : "UPDATE workers SET admin_state = 'draining', "
                                         "drain_started_at = now(), updated_at = now() WHERE id = $1",
                               1, idp, &upd, err) < 0)
                        return sp_error_wrap(err, "drain worker");
        } else if (undo && strcmp(admin, "active") != 0) {
                if (!self)
                        return sp_error_set(err, SP_E_PRECONDITION,
                                            "worker '%s' is %s by an operator: only an operator lifts it (spacectl "
                                            "worker uncordon)",
                                            name, strcmp(admin, "draining") == 0 ? "drained" : "cordoned");
                *ret_changed = true;
                if (cp_db_exec(db,
                               "UPDATE workers SET admin_state = 'active', admin_self = false, drain_started_at = "
                               "NULL, updated_at = now() WHERE id = $1",
                               1, idp, &upd, err) < 0)
                        return sp_error_wrap(err, "uncordon worker");
        }
        if (*ret_changed && cp_db_exec(db, "SELECT pg_notify('space_work', 'worker:' || $1)", 1, idp, NULL, err) < 0)
                return sp_error_wrap(err, "worker admin state");
        return 0;
}

int cp_worker_mark_unreachable(cp_db *db, int factor, int *ret_changed, sp_error **err)
{
        if (factor < 1 || factor > FACTOR_MAX)
                return sp_error_set(err, SP_E_INVALID, "factor must be between 1 and %d", FACTOR_MAX);
        char f[16];
        snprintf(f, sizeof(f), "%d", factor);
        const char *params[] = {f};
        _cleanup_pgresult_ PGresult *res = NULL;
        /* A worker that joined and never sent a heartbeat counts from its join. */
        if (cp_db_exec(db,
                       "WITH upd AS (UPDATE workers SET state = 'unreachable', updated_at = now() "
                       "WHERE state = 'ready' AND coalesce(last_heartbeat, updated_at) < "
                       "now() - make_interval(secs => heartbeat_ms::double precision * $1::integer / 1000) "
                       "RETURNING id) "
                       "SELECT id, pg_notify('space_work', 'worker:' || id) FROM upd",
                       1, params, &res, err) < 0)
                return sp_error_wrap(err, "mark unreachable workers");
        if (ret_changed)
                *ret_changed = PQntuples(res);
        return 0;
}

int cp_worker_record_result(cp_db *db, const char *id, bool ok, int threshold, const char *reason, sp_error **err)
{
        if (threshold < 1 || threshold > THRESHOLD_MAX)
                return sp_error_set(err, SP_E_INVALID, "threshold must be between 1 and %d", THRESHOLD_MAX);
        if (!id || strlen(id) > ID_MAX)
                return not_found(id, err);
        char why[REASON_MAX + 1], t[16];
        snprintf(why, sizeof(why), "%s", reason && *reason ? reason : "repeated failures");
        for (char *p = why; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        *p = ' ';
        snprintf(t, sizeof(t), "%d", threshold);
        const char *params[] = {id, ok ? "true" : "false", t, why};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db,
                       "WITH old AS (SELECT id, state FROM workers WHERE id = $1 FOR UPDATE), "
                       "upd AS (UPDATE workers w SET "
                       "failures = CASE WHEN $2::boolean THEN 0 ELSE w.failures + 1 END, "
                       "state = CASE WHEN NOT $2::boolean AND w.failures + 1 >= $3::integer THEN 'quarantined' "
                       "ELSE w.state END, "
                       "quarantine_reason = CASE WHEN NOT $2::boolean AND w.failures + 1 >= $3::integer "
                       "AND w.state <> 'quarantined' THEN $4 ELSE w.quarantine_reason END, "
                       "updated_at = CASE WHEN NOT $2::boolean OR w.failures <> 0 THEN now() ELSE w.updated_at END "
                       "FROM old WHERE w.id = old.id RETURNING w.id, w.state <> old.state AS changed) "
                       "SELECT id, CASE WHEN changed THEN pg_notify('space_work', 'worker:' || id) END FROM upd",
                       4, params, &res, err) < 0)
                return sp_error_wrap(err, "record worker result");
        if (PQntuples(res) != 1)
                return not_found(id, err);
        return 0;
}

int cp_worker_allow_rejoin(cp_db *db, const char *id, sp_error **err)
{
        if (!id || strlen(id) > ID_MAX)
                return not_found(id, err);
        const char *params[] = {id};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db,
                       "UPDATE workers SET rejoin_allowed_until = now() + interval '1 hour' WHERE id = $1 "
                       "RETURNING id",
                       1, params, &res, err) < 0)
                return sp_error_wrap(err, "allow a worker to join again");
        if (PQntuples(res) != 1)
                return not_found(id, err);
        return 0;
}

int cp_worker_unquarantine(cp_db *db, const char *id, sp_error **err)
{
        if (!id || strlen(id) > ID_MAX)
                return not_found(id, err);
        const char *params[] = {id};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db,
                       "WITH old AS (SELECT id, state FROM workers WHERE id = $1 FOR UPDATE), "
                       "upd AS (UPDATE workers w SET failures = 0, quarantine_reason = NULL, updated_at = now(), "
                       "state = CASE WHEN w.state <> 'quarantined' THEN w.state "
                       "WHEN w.last_heartbeat > now() - make_interval(secs => w.heartbeat_ms::double precision "
                       "* " RECENT_FACTOR " / 1000) THEN 'ready' ELSE 'unreachable' END "
                       "FROM old WHERE w.id = old.id RETURNING w.id, w.state <> old.state AS changed) "
                       "SELECT id, CASE WHEN changed THEN pg_notify('space_work', 'worker:' || id) END FROM upd",
                       1, params, &res, err) < 0)
                return sp_error_wrap(err, "unquarantine worker");
        if (PQntuples(res) != 1)
                return not_found(id, err);
        return 0;
}
