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
        char *inflight[CP_CTRL_MAX_INFLIGHT]; /* op ids and "orphan:<sbx>" keys being worked on */
        sp_rpc_pool *pool; /* clients to workers, by worker id */
        cp_wclient workers[CP_CTRL_MAX_WORKERS];
        size_t nworkers;
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
/* Reconciles observed against desired on every reachable worker. */
void cp__reconcile_run(cp_ctrl *c);

#endif
