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
#include "fleet/fleet.h"
#include "policy/profile.h"
#include "sched/placement.h"
#include "space/buf.h"
#include "space/id.h"
#include "space/ratelimit.h"
#include "space/rpc_pool.h"
#include "space/shares.h"
#include "space/token.h"
#include "store/db.h"
#include "store/keys.h"
#include "store/quotas.h"

#define CP_API_MAX_ROUTES 96
#define CP_LATENCY_BUCKETS 12

/* Why a call to a worker failed, for metrics: it could not be reached, it did
 * not answer in time, it answered with an internal error. */
enum { CP_WORKER_UNREACHABLE, CP_WORKER_TIMEOUT, CP_WORKER_ERROR, CP_WORKER_FAILURE_KINDS };

/* How a create went with the one-hop path on (api/create_fast.c): its worker
 * claimed it in the request, no warm worker could take it (the controller's
 * path), or its worker failed the call and the controller took it over. */
/* The rate limits (api/ratelimit.c), for metrics and messages. */
#define CP_RATE_MAX_BUCKETS 100000
enum { CP_RATE_KEY, CP_RATE_TENANT, CP_RATE_CREATE, CP_RATE_KINDS };

enum { CP_CREATE_FAST_CLAIMED, CP_CREATE_FAST_FALLBACK, CP_CREATE_FAST_ERROR, CP_CREATE_FAST_RESULTS };

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

/* A token bucket over audit records (audit.c). */
typedef struct cp_audit_bucket {
        double tokens;
        int64_t refill_us;
        uint64_t unrecorded_total; /* refused a record, since the replica started */
        uint64_t unrecorded_since; /* since the last record written */
} cp_audit_bucket;

struct cp_api {
        struct event_base *base;
        cp_api_config cfg;
        cp_db *db; /* queries */
        cp_db *listen_db; /* LISTEN space_op_done */
        unsigned listen_generation;
        struct event *listen_ev;
        struct event *tick_ev; /* reconnects the listener, re-checks waiters */
        cp_waiter *waiters;
        sp_shares *waiter_shares; /* long-polls held, per tenant */
        cp_route_ctx ctx[CP_API_MAX_ROUTES];
        cp_route_stats stats[CP_API_MAX_ROUTES];
        uint64_t unavailable_total; /* answers 503 because PostgreSQL was down */
        /* sessions and files */
        char *dataplane_url; /* without a trailing '/' */
        /* The fixed parts of the host-form ingress URL template around the
         * sandbox's id: "<scheme>://{port}-" and ".<domain>[:<port>]/". */
        char *ingress_host_prefix, *ingress_host_suffix;
        char *debootstrap_mirror; /* for tenants' debootstrap builds; NULL: none allowed */
        sp_rpc_pool *workers; /* clients to workers, by worker id */
        sp_token_signer *signer; /* the current token key, reloaded every CP_TOKEN_SIGNER_RELOAD_US */
        int64_t signer_loaded_us;
        uint64_t sessions_created_total;
        uint64_t worker_calls_total;
        uint64_t worker_failures_total[CP_WORKER_FAILURE_KINDS];
        uint64_t create_fast_total[CP_CREATE_FAST_RESULTS];
        /* quotas and rate limits */
        char quota_defaults[CP_QUOTA_DEFAULTS_MAX]; /* cp_quota_defaults_json() of the cluster's */
        sp_ratelimit *rate; /* buckets of keys, tenants and tenants' creates (prefixed k/, t/, c/) */
        uint64_t rate_limited_total[CP_RATE_KINDS];
        uint64_t quota_refusals_total[CP_QUOTA_COUNT];
        /* Refusals a flood can cause (audit.c): login failures (401) and
         * 429s, each kind with a token bucket that bounds the records
         * written (cfg.audit_login_failures_per_s, a burst of ten seconds'
         * worth). */
        cp_audit_bucket login_bucket, throttled_bucket;
        uint64_t login_failures_total;
};

/* One request being served. */
struct cp_call {
        cp_api *api;
        sp_http_request *req;
        const char *body; /* the request's body (owned by req), body_len bytes */
        size_t body_len;
        const cp_route_ctx *rc;
        int64_t start_us;
        cp_principal who;
        /* idempotency, when the request carries Idempotency-Key */
        const char *idem_key;
        char idem_hash[65];
        bool idem_secret; /* the answer holds a secret shown once: a replay gets 409 instead */
        bool in_txn;
        /* audit (audit.c): a record of this call is stored (audited), or written
         * in the open transaction and stored once it commits (audit_in_txn);
         * the answer is an Idempotency-Key replay; the code of the error
         * answered (sp_errc_name(), static), NULL until one is. */
        bool audited, audit_in_txn, replayed;
        const char *fail_code;
        /* The action a record made from the answer names, when it is not the
         * route's (cp_audit_route_action()); static. */
        const char *audit_action;
};

/* Replies (each records metrics and logs once). obj is borrowed. */
void cp__reply(cp_call *c, int status, json_object *obj);
void cp__reply_raw(cp_call *c, int status, const char *content_type, const char *body, size_t len);
void cp__fail(cp_call *c, const sp_error *e);
void cp__failf(cp_call *c, sp_errc code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Answers one page of a list: {key: [rows' column 0, JSON text], "next_cursor"}
 * from res, whose rows are (object, api_ts(created_at), id) and which holds
 * up to limit + 1 rows (one more than shown says there is a next page, whose
 * cursor has prefix `kind`). */
void cp__reply_page(cp_call *c, PGresult *res, int64_t limit, const char *key, const char *kind);

/* cp__reply_page, with each(api, object) run on every object first (NULL: none). */
void cp__reply_page_each(cp_call *c, PGresult *res, int64_t limit, const char *key, const char *kind,
                         void (*each)(cp_api *api, json_object *o));

/* Answers 200 {key: v} when r is 0, else e. */
void cp__reply_wrapped(cp_call *c, int r, const char *key, json_object *v, const sp_error *e);

/* For routes that take no body: an empty one or {} passes (0); anything else
 * is answered 400 naming the problem (-1). */
int cp__body_none(cp_call *c);

/* The body of a mutation, in one transaction:
 *   if (cp__mutation_begin(c, &e) ...) → 1: answered already (a retry with the
 *   same Idempotency-Key, or an error); 0: go on inside a transaction, then
 *   cp__mutation_commit(c, status, obj) (which also stores the idempotent
 *   answer) or cp__mutation_abort(c, e). */
int cp__mutation_begin(cp_call *c);
void cp__mutation_commit(cp_call *c, int status, json_object *obj);
void cp__mutation_abort(cp_call *c, const sp_error *e);

/* A mutation whose answer is made after its transaction (it waits for a
 * worker) and made afresh for a retry: the Idempotency-Key's record names the
 * resource the first request created (resource_id) instead of holding an
 * answer. Returns 0: go on inside the transaction, then
 * cp__mutation_commit_quiet(c) (or cp__mutation_abort()); 1: answered
 * already (an error); 2: a retry — ret_first has the first request's
 * resource id, no transaction is open, and the caller answers for it. */
int cp__mutation_begin_for(cp_call *c, const char *resource_id, char ret_first[static SP_ID_MAX]);
/* Commits without answering (the key keeps naming the resource). Returns 0,
 * or < 0 after answering c with the error. */
int cp__mutation_commit_quiet(cp_call *c);
/* Commits with obj (borrowed) as the Idempotency-Key's answer, like
 * cp__mutation_commit(), without answering: the caller answers later.
 * Returns 0, or < 0 after answering c with the error. */
int cp__mutation_commit_keep(cp_call *c, int status, json_object *obj);
/* Drops c's Idempotency-Key record of a resource that could not be made, so
 * that a retry starts afresh. No-op without a key. */
void cp__mutation_forget(cp_call *c);

/* Inside a mutation: the whole egress profile a sandbox of c's tenant is
 * given for name ("" is none; a built-in; the tenant's, locked against its
 * delete until the transaction ends) or inline_profile (private addresses
 * only for admins). SP_E_NOT_FOUND for an unknown name. */
int cp__egress_resolve(cp_call *c, const char *name, const gw_profile *inline_profile, json_object **ret,
                       sp_error **err);

/* After a committed change that bumped the egress generation of sandboxes
 * of c's tenant (ids: a JSON array of their ids, borrowed): sends SetEgress
 * with each one's profile and secrets (store/secrets.h) to the workers of
 * those running or paused, at most CP_EGRESS_PUSH_MAX of them, and answers c
 * with out (borrowed) once every call has ended: 200 when every worker took
 * its sandbox's, else 202 with out.message saying how many the controller
 * sends as soon as it can (workers unreachable, not answering, or past the
 * bound). Sandboxes that are not running get theirs from the controller
 * (they are not counted). */
#define CP_EGRESS_PUSH_MAX 64
void cp__egress_push(cp_call *c, json_object *ids, json_object *out);
/* cp__egress_push for the sandbox ids in column 0 of rows. */
void cp__egress_push_rows(cp_call *c, PGresult *rows, json_object *out);

/* ---- the audit log (audit.c) ---- */

/* The audit record of c's change, with c's key, tenant and request id and
 * outcome ok. Inside a mutation it belongs to the transaction (stored when
 * it commits); outside one it is stored at once. detail may be NULL. */
int cp__audit(cp_call *c, const char *action, const char *target, json_object *detail, sp_error **err);
/* Tells the audit that c's handler wrote its record itself (in SQL of its own). */
void cp__audit_written(cp_call *c);
/* c's transaction committed (true) or rolled back (false). */
void cp__audit_txn_end(cp_call *c, bool committed);
/* Called by every answer, before it is sent: records a call that wrote no
 * record of its own and should have one — a mutating route's (refused,
 * failed, or a replay), an admin route refused (403) — with its outcome and
 * status. Best effort: a failure is logged. */
void cp__audit_answer(cp_call *c, int status);
/* Records a login failure (401: no API key, or a bad, revoked or deleted
 * tenant's one) of c, at most at the configured rate; the rest are counted
 * (in /metrics and in the next record). denial may be NULL. */
void cp__audit_login_failure(cp_call *c, const cp_apikey_denial *denial);
/* Appends the audit metrics (Prometheus text). */
void cp__audit_metrics(cp_api *api, sp_buf *b);

/* Runs sql (params as for cp_db_exec) expected to return one row with one
 * JSON column; *ret gets it parsed, or SP_E_NOT_FOUND with not_found_msg. */
int cp__query_json(cp_api *api, const char *sql, int nparams, const char *const *params, const char *not_found_msg,
                   json_object **ret, sp_error **err);

/* Long-poll: answers c with the operation op_id once it has finished, at
 * deadline_us (monotonic) or once the client has closed its side, whichever
 * comes first. -1 (nothing answered) when the tenant holds its share of the
 * long-polls (--max-waiters) or out of memory: the caller answers at once. */
int cp__wait_operation(cp_call *c, const char *op_id, int64_t deadline_us);
void cp__waiters_check(cp_api *api, const char *op_id);

/* ---- quotas (quotas.c) and rate limits (ratelimit.c) ---- */

/* Inside a mutation: locks tenant's row for the quota check that follows
 * (cp_quota_lock()), before any lock on one of its sandboxes. */
int cp__quota_lock(cp_call *c, const char *tenant, sp_error **err);
/* Inside a mutation, under cp__quota_lock(): SP_E_LIMIT (counted in
 * /metrics) when delta (JSON text: quota -> amount added) does not fit in
 * tenant's quotas (cp_quota_check()). */
int cp__quota_check(cp_call *c, const char *tenant, const char *delta, sp_error **err);
/* cp__quota_lock() then cp__quota_check(). */
int cp__quota_admit(cp_call *c, const char *tenant, const char *delta, sp_error **err);
/* The limit of quota (CP_QUOTA_*) for tenant now (CP_QUOTA_NONE: none). */
int cp__quota_limit(cp_call *c, const char *tenant, int quota, int64_t *ret, sp_error **err);
/* Appends the quota refusals and rate-limit counters (Prometheus text). */
void cp__quota_metrics(cp_api *api, sp_buf *b);

/* After authentication: takes a token from the caller's key's and tenant's
 * buckets (and its tenant's creates' for POST /v1/sandboxes). 0: go on;
 * -1: answered 429 with Retry-After. */
int cp__rate_admit(cp_call *c);

/* ---- one-hop creates (create_fast.c) ---- */

/* Inside the create's transaction, before the sandbox is recorded: a worker
 * for it when the one-hop path is on and the scheduler's choice
 * (sched/placement.h, the same rules as the controller's) has a warm sandbox
 * of template_id in its last heartbeat. true and *ret; false (the
 * controller's path, counted as a fallback) otherwise. */
bool cp__create_fast_pick(cp_call *c, const char *template_id, const char *spec, const char *backend,
                          cp_placement *ret);
/* The lease of a one-hop create's operation, recorded `running` with its next
 * attempt this far out so that the controller leaves it alone meanwhile. */
#define CP_CREATE_FAST_LEASE_S 10
/* After the create's transaction committed sandbox sbx_id on pl's worker and
 * operation op_id (running, leased): sends CreateSandbox and answers c with
 * the operation and sandbox — succeeded and running once the worker made it,
 * else as the controller has them after the lease was handed back. */
void cp__create_fast_send(cp_call *c, const char *op_id, const char *sbx_id, const cp_placement *pl);
/* {"operation", "sandbox"} for op_id and sbx_id as they are now. */
int cp__op_envelope(cp_call *c, const char *op_id, const char *sbx_id, json_object **ret, sp_error **err);
/* Appends space_controlplane_create_fast_total (Prometheus text). */
void cp__create_fast_metrics(cp_api *api, sp_buf *b);

/* ---- calls to workers (workers.c) ---- */

/* Where a sandbox of c's tenant runs: its states and its worker. */
/* Adds a data-plane token's worker claims: "wkr" (address, HOST:PORT) and
 * "wkn" (the worker's name, by worker_id, or by address when worker_id is
 * NULL or ""), which the data plane checks against the certificate that
 * answers there. "wkn" is left out when the name cannot be read. */
void cp__token_worker_claims(cp_api *api, json_object *claims, const char *worker_id, const char *address);

typedef struct cp_sandbox_loc {
        char id[SP_ID_MAX];
        char state[16]; /* observed */
        char desired[16];
        char worker_id[SP_ID_MAX]; /* "" when it has none */
        char address[272]; /* the worker's RPC address */
        bool reachable; /* the worker is not marked unreachable */
} cp_sandbox_loc;

/* Loads sandbox id of c's tenant (not deleted): SP_E_NOT_FOUND ("sandbox …
 * not found") for a missing or foreign one. With need_running, a sandbox that
 * is not running (observed and desired) is SP_E_CONFLICT naming its state,
 * and one whose worker is unreachable SP_E_UNAVAILABLE. */
int cp__sandbox_locate(cp_call *c, const char *id, bool need_running, cp_sandbox_loc *ret, sp_error **err);

/* Records activity in sandbox id (its idle timer starts again); best effort. */
void cp__sandbox_touch(cp_api *api, const char *id);

/* The result of cp__worker_call(): resp (borrowed) or err, whose message
 * names the worker when it could not be reached or did not answer in time
 * (code SP_E_UNAVAILABLE or SP_E_TIMEOUT). */
typedef void (*cp_worker_done_fn)(cp_call *c, json_object *resp, const sp_error *err, void *userdata);

/* Calls method on worker worker_id at address for request c, with the API's
 * deadline; req is borrowed. done runs exactly once, from the loop (also
 * when the call cannot start). */
void cp__worker_call(cp_call *c, const char *worker_id, const char *address, const char *method, json_object *req,
                     cp_worker_done_fn done, void *userdata);
/* The same with a deadline of timeout_ms (at most the API's own). */
void cp__worker_call_within(cp_call *c, const char *worker_id, const char *address, const char *method,
                            json_object *req, int64_t timeout_ms, cp_worker_done_fn done, void *userdata);

/* A streamed call to a worker started for request c that may outlive c's
 * answer: its callbacks get the API, never c. on_frame gets each JSON frame
 * (borrowed; frames that are not JSON are logged and skipped); on_end runs
 * exactly once, last, with NULL after the trailer or the error worded as
 * cp__worker_call()'s. */
typedef struct cp_worker_stream cp_worker_stream;
typedef struct cp_worker_stream_ops {
        void (*on_frame)(cp_api *api, json_object *msg, void *userdata);
        void (*on_end)(cp_api *api, const sp_error *err, void *userdata);
} cp_worker_stream_ops;

/* Starts method on worker worker_id at address as a stream whose first frame
 * is req (borrowed), with the API's deadline for the whole stream. ops is
 * borrowed (static). 0, or < 0 with err and no callback. */
int cp__worker_stream(cp_call *c, const char *worker_id, const char *address, const char *method, json_object *req,
                      const cp_worker_stream_ops *ops, void *userdata, sp_error **err);

/* Answers c with a worker's error: a missed deadline is 504 (code timeout),
 * anything else as cp__fail(). */
void cp__fail_worker(cp_call *c, const sp_error *e);

/* Appends the sessions' and worker calls' metrics (Prometheus text). */
void cp__worker_metrics(cp_api *api, sp_buf *b);

/* ---- ingress (ingress.c) ---- */

/* The most an ingress URL template takes, with its NUL. */
#define CP_INGRESS_URL_MAX 1400

/* The ingress URL templates of sandbox id, each with the literal "{port}":
 * the host form "<scheme>://{port}-<id, '_' as '-'>.<ingress domain>[:<port
 * of the data plane's URL>]/" and the path form "<data plane URL>/v1/
 * sandboxes/<id>/ports/{port}/". */
void cp__ingress_urls(const cp_api *api, const char *id, char url[static CP_INGRESS_URL_MAX],
                      char path_url[static CP_INGRESS_URL_MAX]);

/* Adds "url" and "path_url" to the "ingress" object (its mode, made by
 * api_sandbox()) of sandbox answer o; anything else is left as it is. Every
 * route that answers a sandbox runs it. */
void cp__sandbox_ingress_urls(cp_api *api, json_object *o);

/* The same for the sandbox an operation holds as its result, if it holds one. */
void cp__operation_ingress_urls(cp_api *api, json_object *op);

/* ---- attachment tokens (tokens.c) ---- */

#define CP_TOKEN_SIGNER_RELOAD_US (10 * 1000000LL)

/* Signs claims (borrowed; typ, ten, sbx, ... set by the caller) for ttl_s
 * seconds with the current key: *ret_token (new string, a secret: never
 * log it) and its expiry (RFC 3339). */
int cp__token_mint(cp_api *api, json_object *claims, int64_t ttl_s, char **ret_token, char ret_expires[static 32],
                   sp_error **err);

/* Handlers, by file. */
void cp__h_healthz(cp_call *c);
void cp__h_readyz(cp_call *c);
void cp__h_metrics(cp_call *c);
void cp__h_openapi(cp_call *c);
void cp__h_sandbox_create(cp_call *c);
void cp__h_tenant_usage(cp_call *c);
void cp__h_tenant_quotas(cp_call *c);
void cp__h_sandbox_list(cp_call *c);
void cp__h_sandbox_get(cp_call *c);
void cp__h_sandbox_stats(cp_call *c);
void cp__h_sandbox_delete(cp_call *c);
void cp__h_sandbox_pause(cp_call *c);
void cp__h_sandbox_resume(cp_call *c);
void cp__h_sandbox_suspend(cp_call *c);
void cp__h_sandbox_restore(cp_call *c);
void cp__h_sandbox_wake(cp_call *c);
void cp__h_sandbox_stop(cp_call *c);
void cp__h_sandbox_start(cp_call *c);
void cp__h_sandbox_timeout(cp_call *c);
void cp__h_sandbox_egress(cp_call *c);
void cp__h_sandbox_egress_log(cp_call *c);
void cp__h_sandbox_ingress(cp_call *c);
void cp__h_sandbox_ingress_token(cp_call *c);
void cp__h_egress_profile_create(cp_call *c);
void cp__h_egress_profile_list(cp_call *c);
void cp__h_egress_profile_get(cp_call *c);
void cp__h_egress_profile_update(cp_call *c);
void cp__h_egress_profile_delete(cp_call *c);
void cp__h_secret_create(cp_call *c);
void cp__h_secret_list(cp_call *c);
void cp__h_secret_get(cp_call *c);
void cp__h_secret_delete(cp_call *c);
void cp__h_secret_usage(cp_call *c);
void cp__h_secrets_rewrap(cp_call *c);
void cp__h_operation_get(cp_call *c);
void cp__h_template_create(cp_call *c);
void cp__h_template_list(cp_call *c);
void cp__h_template_get(cp_call *c);
void cp__h_template_delete(cp_call *c);
void cp__h_template_warm(cp_call *c);
void cp__h_template_upload(cp_call *c);
void cp__h_worker_list(cp_call *c);
void cp__h_worker_get(cp_call *c);
void cp__h_worker_cordon(cp_call *c);
void cp__h_worker_uncordon(cp_call *c);
void cp__h_worker_drain(cp_call *c);
void cp__h_worker_unquarantine(cp_call *c);
void cp__h_worker_allow_rejoin(cp_call *c);
void cp__h_join_token_create(cp_call *c);
void cp__h_join_token_delete(cp_call *c);
void cp__h_join_token_list(cp_call *c);
void cp__h_tenant_create(cp_call *c);
void cp__h_tenant_list(cp_call *c);
void cp__h_tenant_delete(cp_call *c);
void cp__h_key_create(cp_call *c);
void cp__h_key_delete(cp_call *c);
void cp__h_key_list(cp_call *c);
void cp__h_session_create(cp_call *c);
void cp__h_session_list(cp_call *c);
void cp__h_session_get(cp_call *c);
void cp__h_session_signal(cp_call *c);
void cp__h_session_kill(cp_call *c);
void cp__h_session_token(cp_call *c);
void cp__h_files_stat(cp_call *c);
void cp__h_files_list(cp_call *c);
void cp__h_files_mkdir(cp_call *c);
void cp__h_files_move(cp_call *c);
void cp__h_files_remove(cp_call *c);
void cp__h_files_token(cp_call *c);
void cp__h_token_keys_list(cp_call *c);
void cp__h_token_keys_rotate(cp_call *c);
void cp__h_audit_list(cp_call *c);

#endif
