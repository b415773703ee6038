/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the API's handler files; not a public header. */
#ifndef CP_API_INTERNAL_H
#define CP_API_INTERNAL_H

#include <event2/event.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "api/api.h"
#include "api/routes.h"
#include "space/id.h"
#include "store/db.h"
#include "store/keys.h"

#define CP_API_MAX_ROUTES 64
#define CP_LATENCY_BUCKETS 12

typedef struct cp_route_stats {
        uint64_t count[6]; /* by status class: 1xx..5xx (index 1..5) */
        uint64_t buckets[CP_LATENCY_BUCKETS]; /* cumulative counts per upper bound */
        uint64_t total;
        double sum_s;
} cp_route_stats;

typedef struct cp_route_ctx {
        cp_api *api;
        const cp_route *route;
        size_t index;
} cp_route_ctx;

typedef struct cp_waiter cp_waiter;

struct cp_api {
        struct event_base *base;
        cp_api_config cfg;
        cp_db *db; /* queries */
        cp_db *listen_db; /* LISTEN space_op_done */
        unsigned listen_generation;
        struct event *listen_ev;
        struct event *tick_ev; /* reconnects the listener, re-checks waiters */
        cp_waiter *waiters;
        cp_route_ctx ctx[CP_API_MAX_ROUTES];
        cp_route_stats stats[CP_API_MAX_ROUTES];
        uint64_t unavailable_total; /* answers 503 because PostgreSQL was down */
};

/* One request being served. */
struct cp_call {
        cp_api *api;
        sp_http_request *req;
        const cp_route_ctx *rc;
        int64_t start_us;
        cp_principal who;
        /* idempotency, when the request carries Idempotency-Key */
        const char *idem_key;
        char idem_hash[65];
        bool idem_secret; /* the answer holds a secret shown once: a replay gets 409 instead */
        bool in_txn;
};

/* Replies (each records metrics and logs once). obj is borrowed. */
void cp__reply(cp_call *c, int status, json_object *obj);
void cp__reply_raw(cp_call *c, int status, const char *content_type, const char *body, size_t len);
void cp__fail(cp_call *c, const sp_error *e);
void cp__failf(cp_call *c, sp_errc code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The body of a mutation, in one transaction:
 *   if (cp__mutation_begin(c, &e) ...) → 1: answered already (a retry with the
 *   same Idempotency-Key, or an error); 0: go on inside a transaction, then
 *   cp__mutation_commit(c, status, obj) (which also stores the idempotent
 *   answer) or cp__mutation_abort(c, e). */
int cp__mutation_begin(cp_call *c);
void cp__mutation_commit(cp_call *c, int status, json_object *obj);
void cp__mutation_abort(cp_call *c, const sp_error *e);

/* Inside a mutation: the audit record. detail may be NULL. */
int cp__audit(cp_call *c, const char *action, const char *target, json_object *detail, sp_error **err);

/* Runs sql (params as for cp_db_exec) expected to return one row with one
 * JSON column; *ret gets it parsed, or SP_E_NOT_FOUND with not_found_msg. */
int cp__query_json(cp_api *api, const char *sql, int nparams, const char *const *params, const char *not_found_msg,
                   json_object **ret, sp_error **err);

/* Long-poll: answers c with the operation op_id once it has finished or at
 * deadline_us (monotonic), whichever comes first. */
void cp__wait_operation(cp_call *c, const char *op_id, int64_t deadline_us);
void cp__waiters_check(cp_api *api, const char *op_id);

/* Handlers, by file. */
void cp__h_healthz(cp_call *c);
void cp__h_readyz(cp_call *c);
void cp__h_metrics(cp_call *c);
void cp__h_openapi(cp_call *c);
void cp__h_sandbox_create(cp_call *c);
void cp__h_sandbox_list(cp_call *c);
void cp__h_sandbox_get(cp_call *c);
void cp__h_sandbox_delete(cp_call *c);
void cp__h_sandbox_pause(cp_call *c);
void cp__h_sandbox_resume(cp_call *c);
void cp__h_sandbox_suspend(cp_call *c);
void cp__h_sandbox_restore(cp_call *c);
void cp__h_sandbox_wake(cp_call *c);
void cp__h_sandbox_stop(cp_call *c);
void cp__h_sandbox_start(cp_call *c);
void cp__h_sandbox_timeout(cp_call *c);
void cp__h_operation_get(cp_call *c);
void cp__h_template_create(cp_call *c);
void cp__h_template_list(cp_call *c);
void cp__h_template_get(cp_call *c);
void cp__h_template_delete(cp_call *c);
void cp__h_template_warm(cp_call *c);
void cp__h_worker_list(cp_call *c);
void cp__h_worker_get(cp_call *c);
void cp__h_worker_cordon(cp_call *c);
void cp__h_worker_uncordon(cp_call *c);
void cp__h_worker_drain(cp_call *c);
void cp__h_worker_unquarantine(cp_call *c);
void cp__h_join_token_create(cp_call *c);
void cp__h_join_token_delete(cp_call *c);
void cp__h_tenant_create(cp_call *c);
void cp__h_key_create(cp_call *c);
void cp__h_key_delete(cp_call *c);

#endif
