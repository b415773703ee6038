/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Workers in the store. Health (`state`: ready, unreachable, quarantined) is
 * set by heartbeats and the controllers; admin_state (active, cordoned,
 * draining) by operators; a drain's start is kept (drain_started_at), and
 * the moves since then are its own (sandbox_moves, ctrl/move.c). Workers are cluster objects, visible to admins only.
 * Every change of health or admin state sends NOTIFY space_work,
 * 'worker:<id>' with its commit, so the controllers react at once.
 */
#ifndef CP_STORE_WORKERS_H
#define CP_STORE_WORKERS_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"
#include "space/id.h"
#include "store/db.h"

/* Every worker as an array of API objects, ordered by name:
 *   {"id","name","address","backend","labels":{},"state","admin_state","health",
 *    "capacity":{"cpu_millis","memory_mb","slots"},
 *    "used":{"cpu_millis","memory_mb","slots"},        (placed sandboxes, from the sandboxes table)
 *    "observed":{...last heartbeat...}, "failures", "quarantine_reason",
 *    "last_heartbeat":"RFC 3339"|null, "created_at",
 *    "sandboxes": N}                                   (the sandboxes it holds, in any state but failed)
 * `state` is the one word for operators: quarantined, unreachable, drained
 * (draining, and it holds no sandbox any more), draining, cordoned or
 * ready, in that precedence. */
int cp_worker_list(cp_db *db, json_object **ret, sp_error **err);
/* One worker as above, with "drain": null, or while it drains
 *   {"started_at", "left": [{"id","tenant_id","state","desired_state",
 *     "operation_id","operation_kind","message"}...],   (still there, and why: its
 *                                                        operation's message or its status)
 *    "moved": [{"sandbox_id","to","to_worker_id","bytes","at","state",
 *     "desired_state","there"}...]}                     (moved away since the drain began;
 *                                                        its state now, and whether it is still there)
 * (at most 1000 of each); SP_E_NOT_FOUND. */
int cp_worker_get(cp_db *db, const char *id, json_object **ret, sp_error **err);
/* Sets admin_state ("active", "cordoned", "draining"; anything else is
 * SP_E_INVALID); SP_E_NOT_FOUND. */
int cp_worker_set_admin_state(cp_db *db, const char *id, const char *admin_state, sp_error **err);
/* A worker's own request about its admin state (the DrainSelf RPC), by its
 * certificate's name, in the caller's transaction: "drain" makes it
 * draining (its own drain when it was active; an operator's cordon stays the
 * operator's), "uncordon" makes it active again only when the drain in force
 * is its own (an operator's cordon or drain is SP_E_PRECONDITION), "status"
 * changes nothing. serial: the presenting certificate's; one that a later join
 * under the name superseded is SP_E_PERMISSION. ret_id gets its id, *ret_changed whether anything changed
 * (then a NOTIFY goes with the commit). SP_E_PERMISSION for a name that has
 * not joined. An operator's cp_worker_set_admin_state() makes any state the
 * operator's. */
int cp_worker_self_admin(cp_db *db, const char *name, const char *serial, const char *action,
                         char ret_id[static SP_ID_MAX], bool *ret_changed, sp_error **err);
/* An operator's consent to one join under the worker's name within the
 * hour (a worker that lost its state directory joins again); SP_E_NOT_FOUND. */
int cp_worker_allow_rejoin(cp_db *db, const char *id, sp_error **err);
/* Marks every ready worker whose last heartbeat (or join, if it never sent
 * one) is older than `factor` (1..1000) of its heartbeat intervals as
 * unreachable; *ret_changed (may be NULL) gets how many changed. */
int cp_worker_mark_unreachable(cp_db *db, int factor, int *ret_changed, sp_error **err);
/* The consecutive failures that quarantine a worker unless configured otherwise. */
#define CP_WORKER_QUARANTINE_THRESHOLD 5
/* Counts a failed operation against a worker; at `threshold` (1..1000)
 * consecutive failures it is quarantined with reason (NULL: "repeated
 * failures"; control characters become spaces, at most 1024 bytes). A success
 * resets the count. SP_E_NOT_FOUND. */
int cp_worker_record_result(cp_db *db, const char *id, bool ok, int threshold, const char *reason, sp_error **err);
/* Lifts a quarantine (admin) and resets the failure count: health goes back
 * to ready if the worker was heard within 3 heartbeat intervals, else to
 * unreachable until its next heartbeat. A worker that is not quarantined
 * keeps its health. SP_E_NOT_FOUND. */
int cp_worker_unquarantine(cp_db *db, const char *id, sp_error **err);

#endif
