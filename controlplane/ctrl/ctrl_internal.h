/* SPDX-License-Identifier: Apache-2.0 */
#ifndef CP_CTRL_INTERNAL_H
#define CP_CTRL_INTERNAL_H

#include <event2/event.h>
#include <json-c/json.h>

#include "ctrl/ctrl.h"
#include "space/id.h"
#include "space/rpc.h"
#include "space/rpc_pool.h"
#include "store/db.h"

#define CP_CTRL_MAX_INFLIGHT 4096
#define CP_CTRL_MAX_WORKERS 1024

/* A worker's client, from the pool, and what the controllers last told it. */
typedef struct cp_wclient {
        char id[SP_ID_MAX];
        sp_rpc_client *cli; /* the pool's, borrowed: as valid as sp_rpc_pool_get() says */
        uint64_t generation; /* cli's in the pool: a new client starts warm_set afresh */
        json_object *warm_set; /* template id -> size last set on it */
} cp_wclient;

struct cp_ctrl {
        struct event_base *base;
        cp_ctrl_config cfg;
        cp_db *db;
        cp_db *lock_db; /* holds the advisory lock and LISTENs */
        unsigned lock_generation;
        bool leader;
        struct event *listen_ev;
        struct event *tick_ev;
        struct event *kick_ev; /* a run soon after a notification */
        uint64_t ticks;
        bool reconcile_due;
        bool audit_gc_due; /* set on taking the lead */
        char *inflight[CP_CTRL_MAX_INFLIGHT]; /* op ids and "orphan:<sbx>" keys being worked on */
        sp_rpc_pool *pool; /* clients to workers, by worker id */
        cp_wclient workers[CP_CTRL_MAX_WORKERS];
        size_t nworkers;
        /* Moves of suspended sandboxes (move.c), since this replica started:
         * done, attempts that failed, and the bytes moved. */
        uint64_t moves_total, moves_failed_total, move_bytes_total;
};

/* In-flight bookkeeping: add returns false if key is already in flight. */
bool cp__inflight_add(cp_ctrl *c, const char *key);
void cp__inflight_del(cp_ctrl *c, const char *key);
bool cp__inflight_has(cp_ctrl *c, const char *key);

/* The RPC client of a worker (from the pool; NULL if unknown). Borrowed:
 * start its calls at once. */
sp_rpc_client *cp__worker_client(cp_ctrl *c, const char *worker_id);
cp_wclient *cp__worker_entry(cp_ctrl *c, const char *worker_id);

/* Drives every operation that is due. */
void cp__ops_run(cp_ctrl *c);
/* Builds or deletes a template on the workers (template_build, template_delete). */
void cp__template_op(cp_ctrl *c, const char *op, const char *kind, const char *tpl_id, int attempts);
/* Imports template tpl_id (spec: its source, passed as ImportTemplate's
 * fields) on one worker; done(ok) reports. op (may be NULL): the build
 * operation whose message shows the worker's latest progress line (at most
 * once a second). */
int cp__template_import(cp_ctrl *c, const char *worker_id, const char *tpl_id, json_object *spec, const char *op,
                        void (*done)(void *userdata, const sp_error *err), void *userdata);
/* Timeouts, idle suspension and drains: turns them into operations. */
void cp__policies_run(cp_ctrl *c);
/* Drains (drain.c): every sandbox on a draining worker gets the operation
 * that takes it away (suspend and restore elsewhere, or move). */
void cp__drain_run(cp_ctrl *c);
/* Reconciles observed against desired on every reachable worker. */
void cp__reconcile_run(cp_ctrl *c);

/* ---- moving a suspended sandbox to another worker (move.c) ---- */

/* Workers that may refuse one sandbox (failed_precondition) before its move fails. */
#define CP_MOVE_MAX_REFUSALS 3

typedef enum cp_move_outcome {
        CP_MOVE_DONE, /* the sandbox is the new worker's (suspended there) */
        CP_MOVE_NO_WORKER, /* no other worker can take it now; nothing changed */
        CP_MOVE_RETRY, /* a step failed in a way that may pass; nothing changed */
        CP_MOVE_FAILED, /* it cannot move (an old worker, a sandbox that is not there or not suspended) */
} cp_move_outcome;

typedef struct cp_move_result {
        char to[SP_ID_MAX]; /* the new worker's id */
        char to_name[72], from_name[72];
        int64_t bytes; /* the artifacts' data */
} cp_move_result;

/* r: set with CP_MOVE_DONE only; err: why, for every other outcome. Both borrowed for the call. */
typedef void (*cp_move_done_fn)(void *userdata, cp_move_outcome o, const cp_move_result *r, const sp_error *err);

typedef struct cp_move cp_move;

/* Step 1 of moving suspended sandbox sbx (move.c's top comment) on behalf of
 * operation op, whose request keeps what a retry needs (move_to,
 * move_avoid): reads where it is and chooses the worker it goes to. The
 * move, ready to run (free it with cp__move_free if it is not run); or NULL
 * with *ret (CP_MOVE_NO_WORKER, CP_MOVE_RETRY, CP_MOVE_FAILED) and *err
 * saying why. Nothing is called or changed. */
cp_move *cp__move_prepare(cp_ctrl *c, const char *op, const char *sbx, cp_move_outcome *ret, sp_error **err);
/* The rest of the move; the operation's message says how far it got, and
 * its request gets `moved` once it is done. done runs exactly once (from the
 * loop, or before this returns); m is freed then. */
void cp__move_run(cp_move *m, cp_move_done_fn done, void *userdata);
/* Frees a move that was not run. Accepts NULL; returns NULL. */
cp_move *cp__move_free(cp_move *m);

#endif
