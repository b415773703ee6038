/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Carrying out operations: the oldest unfinished operation of each target
 * runs (so a sandbox's operations happen in the order they were accepted),
 * placing sandboxes with the scheduler and calling their worker. Failures a
 * retry can fix back off and retry; others fail the operation with the
 * worker's message. A call is repeatable: "already exists" after a create,
 * "not found" after a delete, and a conflict whose sandbox already is in the
 * wanted state all count as success.
 *
 * Workers that cannot serve: an operation on a sandbox whose worker is
 * unreachable waits (saying so) until the worker is back or the operation's
 * deadline passes, except a delete, which completes at once (the worker
 * removes the sandbox as an orphan if it returns) and a create, which is
 * placed again. A create that fails through the worker's fault is placed
 * again, on another worker if one fits, and the failure counts towards the
 * worker's quarantine.
 *
 * Moves (move.c): waking (restore, start) a suspended sandbox whose worker is
 * draining first moves it to another worker, then wakes it there; a `move`
 * (what a drain records for a sandbox that stays suspended or stopped) only
 * moves it. While no other worker can take it, the operation waits ("cannot
 * move it yet: …", tried again every 2 s and whenever a slot frees) until
 * its deadline; a failed step is retried with the same back-off as any call.
 * An operation may name the ones that follow it (request `then`, a drain's
 * suspend followed by the restore elsewhere): they are recorded when it
 * succeeds, while the sandbox is still wanted as it was (`want`) and nothing
 * else was asked of it meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_internal.h"
#include "sched/placement.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"
#include "store/create_req.h"
#include "store/egress.h"
#include "store/workers.h"

typedef struct kind_def {
        const char *kind;
        const char *method; /* worker RPC */
        const char *during; /* observed state while it runs, or NULL */
        const char *after; /* observed state once done (NULL: as it was) */
        const char *worker_state; /* the worker's state once done */
} kind_def;

static const kind_def KINDS[] = {
        {"create", "CreateSandbox", "creating", "running", "running"},
        {"pause", "PauseSandbox", NULL, "paused", "paused"},
        {"resume", "ResumeSandbox", NULL, "running", "running"},
        {"suspend", "SuspendSandbox", "suspending", "suspended", "suspended"},
        {"stop", "SuspendSandbox", "suspending", "stopped", "suspended"},
        {"restore", "RestoreSandbox", "restoring", "running", "running"},
        {"start", "RestoreSandbox", "restoring", "running", "running"},
        {"delete", "DeleteSandbox", "deleting", "deleted", NULL},
        {"move", NULL, NULL, NULL, NULL}, /* move.c; it stays suspended or stopped */
        {NULL, NULL, NULL, NULL, NULL},
};

typedef struct op_ctx {
        cp_ctrl *c;
        const kind_def *k;
        char op[SP_ID_MAX];
        char sbx[SP_ID_MAX];
        char worker[SP_ID_MAX];
        int attempts;
        char *prior_state;
        char *first_error;
        sp_errc first_code;
        int64_t egress_generation; /* a create's: the profile it sends */
} op_ctx;

static void ctx_free(op_ctx *x)
{
        cp__inflight_del(x->c, x->op);
        free(x->prior_state);
        free(x->first_error);
        free(x);
}

/* A slot came free (a sandbox deleted, suspended or stopped): the operations
 * waiting for one ("cannot place", retried every 2 s) try again now. Under a
 * load of creates and deletes they waited out the back-off: creates took 2-4 s
 * at p99 with 8 clients while slots were free. */
static void wake_waiting_for_a_slot(cp_ctrl *c)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db,
                       "UPDATE operations SET next_attempt_at = now() WHERE state = 'pending' "
                       "AND (message LIKE 'cannot place%' OR message LIKE 'cannot move%') AND next_attempt_at > now()",
                       0, NULL, &res, NULL) < 0)
                return;
        if (strcmp(PQcmdTuples(res), "0") != 0) {
                struct timeval now = {0, 0};
                event_add(c->kick_ev, &now);
        }
}

/* The status a sandbox shows once operation o is done: the one it was made
 * with (a policy's reason), after where it went if it moved. */
#define DONE_STATUS \
        "CASE WHEN o.request ? 'moved' THEN 'moved from ' || (o.request->'moved'->>'from') || ' to ' || " \
        "(o.request->'moved'->>'to') || coalesce(': ' || (o.request->>'status_message'), '') " \
        "ELSE o.request->>'status_message' END"

/* The next operation of op $1's `then`, as $2 (see the top comment). */
#define NEXT_OP \
        "INSERT INTO operations (id, tenant_id, kind, target_id, state, message, deadline_at, request) " \
        "SELECT $2, o.tenant_id, o.request->'then'->>0, o.target_id, 'pending', o.request->>'then_status_message', " \
        "now() + interval '10 minutes', (o.request - 'then' - 'status_message' - 'then_status_message' - 'moved' " \
        "- 'moved_message' - 'move_to' - 'move_avoid') || jsonb_build_object('then', (o.request->'then') - 0, " \
        "'status_message', coalesce(o.request->>'then_status_message', s.status_message)) " \
        "FROM operations o JOIN sandboxes s ON s.id = o.target_id WHERE o.id = $1 " \
        "AND jsonb_typeof(o.request->'then') = 'array' AND jsonb_array_length(o.request->'then') > 0 " \
        "AND s.deleted_at IS NULL AND s.desired_state = o.request->>'want' AND NOT EXISTS (SELECT 1 FROM " \
        "operations x WHERE x.target_id = o.target_id AND x.id <> o.id AND x.state IN ('pending', 'running'))"

/* Done; note (may be NULL) is what the worker said of it that the user must
 * know (a suspend that kept files only, a restore that lost the processes,
 * and why): it becomes the operation's message and is added to the sandbox's
 * status; kept (JSON, may be NULL), what a suspend kept or a restore lost,
 * goes into the operation's result as kept_key ("suspend", "restore"). */
static void op_succeed_note(cp_ctrl *c, const char *op, const char *sbx, const kind_def *k, const char *note,
                            const char *kept, const char *kept_key)
{
        char next[SP_ID_MAX];
        if (sp_id_new("op", next, NULL) < 0)
                return; /* retried on a later tick */
        const char *p[] = {op, sbx, k ? k->after : NULL, note, kept};
        const char *np[] = {op, next};
        _cleanup_error_ sp_error *e = NULL;
        /* The sandbox keeps the status the operation was made with (a policy's reason), if any. */
        const cp_db_stmt txn[] = {
                {"UPDATE sandboxes s SET observed_state = coalesce($3, s.observed_state), status_message = "
                 "(SELECT CASE WHEN $4::text IS NULL THEN " DONE_STATUS " ELSE coalesce((" DONE_STATUS
                 ") || '; ', '') || $4::text END FROM operations o WHERE o.id = $1), updated_at = now(), "
                 "deleted_at = CASE WHEN $3 = 'deleted' THEN now() ELSE s.deleted_at END WHERE s.id = $2",
                 4, p, false},
                {"UPDATE operations o SET state = 'succeeded', error = NULL, updated_at = now(), "
                 "message = CASE WHEN o.request ? 'moved' THEN o.request->>'moved_message' ELSE $3::text END, "
                 "result = (SELECT api_sandbox(s) FROM sandboxes s WHERE s.id = $2) || CASE WHEN o.request ? 'moved' "
                 "THEN jsonb_build_object('moved', o.request->'moved') ELSE '{}'::jsonb END || CASE WHEN $4::jsonb "
                 "IS NULL THEN '{}'::jsonb ELSE jsonb_build_object($5::text, $4::jsonb) END "
                 "WHERE o.id = $1 AND o.state IN ('pending', 'running')",
                 5, (const char *[]){op, sbx, note, kept, kept_key ? kept_key : "suspend"}, false},
                {NEXT_OP, 2, np, false},
        };
        if (cp_db_txn(c->db, k ? txn : txn + 1, k ? 3 : 1, &e) < 0) {
                sp_log_warn("operation %s: recording success: %s", op, e ? e->message : "?");
                return;
        }
        sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", sbx, "operation_id", op), "%s done", k ? k->kind : "operation");
        if (k && k->after &&
            (strcmp(k->after, "deleted") == 0 || strcmp(k->after, "suspended") == 0 ||
             strcmp(k->after, "stopped") == 0))
                wake_waiting_for_a_slot(c);
}

static void op_succeed(cp_ctrl *c, const char *op, const char *sbx, const kind_def *k)
{
        op_succeed_note(c, op, sbx, k, NULL, NULL, NULL);
}

/* Fails the operation for good; a failed create leaves a failed sandbox. */
static void op_fail(cp_ctrl *c, const char *op, const char *sbx, const kind_def *k, const char *prior, sp_errc code,
                    const char *message)
{
        const char *p[] = {op, sbx, sp_errc_name(code), message,
                           k && strcmp(k->kind, "create") == 0 ? "failed" : prior};
        const char *sp[] = {sbx, message, p[4]};
        const char *opp[] = {op, p[2], message};
        _cleanup_error_ sp_error *e = NULL;
        const cp_db_stmt txn[] = {
                {"UPDATE sandboxes SET observed_state = coalesce($3, observed_state), status_message = $2, "
                 "updated_at = now() WHERE id = $1",
                 3, sp, false},
                {"UPDATE operations SET state = 'failed', updated_at = now(), "
                 "error = jsonb_build_object('code', $2::text, 'message', $3::text) "
                 "WHERE id = $1 AND state IN ('pending', 'running')",
                 3, opp, false},
        };
        if (cp_db_txn(c->db, txn, SP_ARRAY_SIZE(txn), &e) < 0) {
                sp_log_warn("operation %s: recording failure: %s", op, e ? e->message : "?");
                return;
        }
        sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", sbx, "operation_id", op), "%s failed: %s", k ? k->kind : "operation",
                  message);
}

/* Puts the operation back to wait `delay_s` with message. */
static void op_retry(cp_ctrl *c, const char *op, int delay_s, const char *message)
{
        char d[16];
        snprintf(d, sizeof(d), "%d", delay_s);
        const char *p[] = {op, d, message};
        (void)cp_db_exec(c->db,
                         "UPDATE operations SET state = 'pending', message = $3, updated_at = now(), "
                         "next_attempt_at = now() + make_interval(secs => $2::integer) "
                         "WHERE id = $1 AND state IN ('pending', 'running')",
                         3, p, NULL, NULL);
}

static int backoff_s(int attempts)
{
        int d = 1 << (attempts < 5 ? attempts : 5);
        return d > 30 ? 30 : d;
}

static bool transient(sp_errc code)
{
        return code == SP_E_UNAVAILABLE || code == SP_E_TIMEOUT || code == SP_E_INTERNAL || code == SP_E_IO;
}

/* A failure of the worker rather than of the request: it counts towards the
 * worker's quarantine (the control plane's requests are valid and
 * authorised, so a permission error comes from the host, e.g. a read-only
 * filesystem). Not reaching the worker (unavailable) is left to liveness:
 * heartbeats decide whether it is unreachable. */
static bool worker_fault(sp_errc code)
{
        return code == SP_E_TIMEOUT || code == SP_E_INTERNAL || code == SP_E_IO || code == SP_E_PERMISSION;
}

/* Sends a create back to placement, preferring another worker than `avoid`
 * (kept in the operation's request), after delay_s with message. */
static void place_again(cp_ctrl *c, const char *op, const char *sbx, const char *avoid, int delay_s,
                        const char *message)
{
        const char *p[] = {sbx, op, avoid};
        (void)cp_db_exec(c->db, "UPDATE sandboxes SET worker_id = NULL, updated_at = now() WHERE id = $1", 1, p, NULL,
                         NULL);
        /* Its own parameters: PostgreSQL refuses a statement with one it cannot type (an unused $1). */
        const char *q[] = {op, avoid};
        _cleanup_error_ sp_error *e = NULL;
        if (cp_db_exec(c->db,
                       "UPDATE operations SET request = jsonb_set(request, '{avoid_worker}', to_jsonb($2::text)) "
                       "WHERE id = $1",
                       2, q, NULL, &e) < 0)
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", sbx, "operation_id", op),
                          "placing again: cannot record the worker to avoid: %s", e->message);
        op_retry(c, op, delay_s, message);
}

static void on_verify(json_object *resp, const sp_error *err, void *userdata)
{
        op_ctx *x = userdata;
        pr_wk_sandbox sb;
        const char *state = !err && pr_msg_decode(&pr_wk_sandbox_schema, resp, &sb, NULL) == 0 ? sb.state : "";
        if (!err && x->k->worker_state && strcmp(state, x->k->worker_state) == 0)
                op_succeed(x->c, x->op, x->sbx, x->k);
        else
                op_fail(x->c, x->op, x->sbx, x->k, x->prior_state, x->first_code, x->first_error);
        ctx_free(x);
}

/* What a suspend's answer says it kept (its "suspend"), and a note when its
 * processes were not kept where they could have been; for a restore that lost
 * the processes its suspend kept (its answer's "restore_why"), the note and a
 * "restore" result {"memory":false,"why"} (written in buf). */
static void kept_or_lost(json_object *resp, const op_ctx *x, char *note, size_t n, char *buf, size_t bn,
                         const char **kept, const char **kept_key)
{
        json_object *susp, *mem, *why;
        note[0] = '\0';
        *kept = NULL;
        *kept_key = "suspend";
        if (strcmp(x->k->method, "RestoreSandbox") == 0 && resp &&
            json_object_object_get_ex(resp, "restore_why", &why) && json_object_is_type(why, json_type_string)) {
                snprintf(note, n, "woken with its files only: %s", json_object_get_string(why));
                _cleanup_json_ json_object *r = json_object_new_object();
                json_object_object_add(r, "memory", json_object_new_boolean(false));
                json_object_object_add(r, "why", json_object_get(why));
                snprintf(buf, bn, "%s", json_object_to_json_string_ext(r, JSON_C_TO_STRING_PLAIN));
                *kept = buf;
                *kept_key = "restore";
                return;
        }
        if (strcmp(x->k->method, "SuspendSandbox") != 0 || !resp ||
            !json_object_object_get_ex(resp, "suspend", &susp) || !json_object_is_type(susp, json_type_object))
                return;
        *kept = json_object_to_json_string_ext(susp, JSON_C_TO_STRING_PLAIN);
        if (strcmp(x->k->kind, "suspend") == 0 && json_object_object_get_ex(susp, "memory", &mem) &&
            !json_object_get_boolean(mem) && json_object_object_get_ex(susp, "why", &why))
                snprintf(note, n, "suspended with its files only: %s", json_object_get_string(why));
}

static void on_result(json_object *resp, const sp_error *err, void *userdata)
{
        op_ctx *x = userdata;
        cp_ctrl *c = x->c;
        if (!err || (strcmp(x->k->kind, "create") == 0 && err->code == SP_E_CONFLICT) ||
            (strcmp(x->k->kind, "delete") == 0 && err->code == SP_E_NOT_FOUND)) {
                (void)cp_worker_record_result(c->db, x->worker, true, c->cfg.quarantine_threshold, NULL, NULL);
                if (!err && strcmp(x->k->kind, "create") == 0)
                        /* The worker has the profile this create sent (a later
                         * change is the controller's to send: ctrl/reconcile.c). */
                        cp_sandbox_egress_applied(c->db, x->sbx, x->egress_generation);
                char note[640], buf[1024];
                const char *kept = NULL, *kept_key = NULL;
                kept_or_lost(err ? NULL : resp, x, note, sizeof(note), buf, sizeof(buf), &kept, &kept_key);
                op_succeed_note(c, x->op, x->sbx, x->k, note[0] ? note : NULL, kept, kept_key);
                ctx_free(x);
                return;
        }
        if (err->code == SP_E_CONFLICT && x->k->worker_state) {
                /* Maybe an earlier attempt (or leader) already did it: look. */
                x->first_code = err->code;
                x->first_error = strdup(err->message);
                sp_rpc_client *cli = cp__worker_client(c, x->worker);
                _cleanup_json_ json_object *req =
                        pr_msg_encode(&pr_wk_sandbox_ref_schema, &(pr_wk_sandbox_ref){.id = x->sbx});
                if (cli && x->first_error && sp_rpc_client_call(cli, "GetSandbox", req, 10000, on_verify, x, NULL) == 0)
                        return;
                op_fail(c, x->op, x->sbx, x->k, x->prior_state, err->code, err->message);
                ctx_free(x);
                return;
        }
        if (worker_fault(err->code))
                (void)cp_worker_record_result(c->db, x->worker, false, c->cfg.quarantine_threshold, err->message, NULL);
        if (strcmp(x->k->kind, "create") == 0 &&
            (worker_fault(err->code) || err->code == SP_E_UNAVAILABLE || err->code == SP_E_NOT_FOUND ||
             err->code == SP_E_LIMIT) &&
            x->attempts < 5) {
                /* The worker failed it, lacks the template or the room after
                 * all: place it again, elsewhere if another worker fits. What
                 * a failed attempt left on the worker is an orphan that
                 * reconciliation removes. */
                char msg[512];
                snprintf(msg, sizeof(msg), "placing again: %s", err->message);
                place_again(c, x->op, x->sbx, x->worker, backoff_s(x->attempts), msg);
                ctx_free(x);
                return;
        }
        if (transient(err->code)) {
                char msg[512];
                snprintf(msg, sizeof(msg), "retrying: %s", err->message);
                op_retry(c, x->op, backoff_s(x->attempts), msg);
                ctx_free(x);
                return;
        }
        op_fail(c, x->op, x->sbx, x->k, x->prior_state, err->code, err->message);
        ctx_free(x);
}

/* Columns of the sandbox an operation acts on, with its worker. */
#define SBX_SELECT \
        "SELECT s.worker_id, s.template_id, s.spec::text, s.backend, s.observed_state, s.desired_state, " \
        "w.state, coalesce(w.name, w.id), w.admin_state, coalesce(s.backend, w.backend, 'jail'), s.tenant_id, " \
        "s.egress_generation, s.stored_bytes IS NOT NULL " \
        "FROM sandboxes s LEFT JOIN workers w ON w.id = s.worker_id WHERE s.id = $1"
enum {
        S_WORKER,
        S_TEMPLATE,
        S_SPEC,
        S_BACKEND,
        S_OBSERVED,
        S_DESIRED,
        S_HEALTH,
        S_WNAME,
        S_ADMIN,
        S_WBACKEND,
        S_TENANT,
        S_EGRESS_GEN,
        S_STORED
};

/* Places the sandbox (a row of start_sandbox_op's query) with the fleet's
 * scheduler (sched/placement.h), on another worker than `avoid` (NULL: any)
 * if one fits, else on any. */
static int place(cp_ctrl *c, PGresult *sbx, const char *avoid, char worker_out[static SP_ID_MAX], sp_error **err)
{
        cp_placement pl;
        int r = cp_placement_choose(c->db, PQgetvalue(sbx, 0, S_TEMPLATE), PQgetvalue(sbx, 0, S_SPEC),
                                    PQgetisnull(sbx, 0, S_BACKEND) ? NULL : PQgetvalue(sbx, 0, S_BACKEND), avoid, &pl,
                                    err);
        if (r < 0)
                return r;
        snprintf(worker_out, SP_ID_MAX, "%s", pl.worker_id);
        return 0;
}

/* What an operation does about its sandbox's worker. */
typedef enum serve {
        SERVE, /* call it */
        HANDLED, /* waiting, done or failed already */
        MOVE, /* move the sandbox to another worker first (move.c) */
} serve;

/* A delete of a sandbox whose worker is unreachable and whose copy is in the
 * artifact store: a worker with the store removes that copy (the copy of the
 * unreachable worker only: DeleteStoredSandbox names it), then the delete is
 * done. */
typedef struct forget_ctx {
        cp_ctrl *c;
        const kind_def *k;
        char op[SP_ID_MAX], sbx[SP_ID_MAX], holder[72], via[72];
} forget_ctx;

static void on_forgotten(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        forget_ctx *x = userdata;
        if (err && transient(err->code)) {
                char msg[512];
                snprintf(msg, sizeof(msg), "removing its copy in the artifact store through %s: retrying: %s", x->via,
                         err->message);
                op_retry(x->c, x->op, 2, msg);
        } else {
                if (err)
                        sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", x->sbx, "operation_id", x->op),
                                  "deleted while its worker %s is unreachable; its copy in the artifact store stays: "
                                  "%s",
                                  x->holder, err->message);
                else
                        sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", x->sbx, "operation_id", x->op),
                                  "deleted while its worker %s is unreachable; its copy in the artifact store was "
                                  "removed through %s",
                                  x->holder, x->via);
                op_succeed(x->c, x->op, x->sbx, x->k);
        }
        cp__inflight_del(x->c, x->op);
        free(x);
}

/* Returns false when no worker with the store can be asked now (the copy
 * stays: its worker removes it should it come back). */
static bool forget_stored(cp_ctrl *c, const char *op, const kind_def *k, const char *sbx, const char *holder)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->db,
                       "SELECT id, coalesce(name, id) FROM workers WHERE artifact_store AND state = 'ready' "
                       "ORDER BY last_heartbeat DESC NULLS LAST LIMIT 1",
                       0, NULL, &res, NULL) < 0 ||
            PQntuples(res) != 1)
                return false;
        sp_rpc_client *cli = cp__worker_client(c, PQgetvalue(res, 0, 0));
        forget_ctx *x = cli ? calloc(1, sizeof(*x)) : NULL;
        if (!x)
                return false;
        *x = (forget_ctx){.c = c, .k = k};
        snprintf(x->op, sizeof(x->op), "%s", op);
        snprintf(x->sbx, sizeof(x->sbx), "%s", sbx);
        snprintf(x->holder, sizeof(x->holder), "%s", holder);
        snprintf(x->via, sizeof(x->via), "%s", PQgetvalue(res, 0, 1));
        if (!cp__inflight_add(c, op)) {
                free(x);
                return true; /* under way already */
        }
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_delete_stored_sandbox_schema,
                                                        &(pr_wk_delete_stored_sandbox){.id = sbx, .holder = holder});
        if (sp_rpc_client_call(cli, "DeleteStoredSandbox", req, 60000, on_forgotten, x, NULL) < 0) {
                cp__inflight_del(c, op);
                free(x);
                return false;
        }
        return true;
}

/* Deals with an operation whose worker cannot serve it now. An unreachable
 * worker: a delete completes without it (it removes the sandbox as an orphan
 * if it returns; a copy in the artifact store is removed through another
 * worker first), a create is placed again, a wake or a move of a sandbox whose
 * copy is in the artifact store moves it from there (move.c), anything else
 * waits for it. A
 * draining worker: waking a suspended sandbox there moves it first (the
 * worker must not run it); a drain's `move` whose worker is no longer
 * draining has nothing to do. */
static serve worker_cannot_serve(cp_ctrl *c, const char *op, const kind_def *k, const char *sbx_id, PGresult *sbx,
                                 bool drain)
{
        const char *worker = PQgetvalue(sbx, 0, S_WORKER), *name = PQgetvalue(sbx, 0, S_WNAME);
        char msg[512];
        if (strcmp(PQgetvalue(sbx, 0, S_HEALTH), "unreachable") == 0) {
                bool stored = strcmp(PQgetvalue(sbx, 0, S_STORED), "t") == 0;
                bool wake = strcmp(k->kind, "restore") == 0 || strcmp(k->kind, "start") == 0 ||
                            strcmp(k->kind, "move") == 0;
                if (strcmp(k->kind, "delete") == 0) {
                        if (stored && forget_stored(c, op, k, sbx_id, name))
                                return HANDLED;
                        sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", sbx_id, "worker_id", worker, "operation_id", op),
                                  "deleted while its worker %s is unreachable; the worker removes it if it returns",
                                  name);
                        op_succeed(c, op, sbx_id, k);
                } else if (strcmp(k->kind, "create") == 0) {
                        snprintf(msg, sizeof(msg), "placing again: its worker %s is unreachable", name);
                        place_again(c, op, sbx_id, worker, 1, msg);
                } else if (wake && stored) {
                        return MOVE;
                } else {
                        snprintf(msg, sizeof(msg),
                                 "waiting for its worker %s, which is unreachable (it goes on once the worker is "
                                 "back, or fails at its deadline)%s",
                                 name,
                                 wake ? "; the sandbox has no stored copy in the artifact store to wake elsewhere from"
                                      : "");
                        op_retry(c, op, 2, msg);
                }
                return HANDLED;
        }
        bool draining = strcmp(PQgetvalue(sbx, 0, S_ADMIN), "draining") == 0;
        if (strcmp(k->kind, "move") == 0) {
                const char *obs = PQgetvalue(sbx, 0, S_OBSERVED);
                if (strcmp(obs, "suspended") != 0 && strcmp(obs, "stopped") != 0) {
                        snprintf(msg, sizeof(msg), "only a suspended or stopped sandbox moves; it is %s", obs);
                        op_fail(c, op, sbx_id, k, obs, SP_E_CONFLICT, msg);
                        return HANDLED;
                }
                if (drain && !draining) {
                        snprintf(msg, sizeof(msg), "not moved: its worker %s is no longer draining", name);
                        op_fail(c, op, sbx_id, k, obs, SP_E_CONFLICT, msg);
                        return HANDLED;
                }
                return MOVE;
        }
        if (draining && (strcmp(k->kind, "restore") == 0 || strcmp(k->kind, "start") == 0))
                return MOVE;
        return SERVE;
}

/* Calls the operation's method on x->worker; on_result goes on. Frees x
 * when the call cannot start. */
static void call_worker(op_ctx *x)
{
        cp_ctrl *c = x->c;
        sp_rpc_client *cli = cp__worker_client(c, x->worker);
        if (!cli) {
                op_retry(c, x->op, backoff_s(x->attempts), "waiting for the worker's address");
                ctx_free(x);
                return;
        }
        if (x->k->during) {
                const char *up[] = {x->sbx, x->k->during};
                (void)cp_db_exec(c->db, "UPDATE sandboxes SET observed_state = $2, updated_at = now() WHERE id = $1", 2,
                                 up, NULL, NULL);
        }
        _cleanup_json_ json_object *req = NULL;
        int64_t timeout_ms = 60000;
        if (strcmp(x->k->kind, "create") == 0) {
                /* Its spec, egress profile and secrets (store/create_req.h). */
                _cleanup_error_ sp_error *be = NULL;
                if (cp_sandbox_create_request(c->db, c->cfg.keyring, x->sbx, &req, &x->egress_generation, &be) < 0) {
                        op_retry(c, x->op, backoff_s(x->attempts - 1), be->message);
                        ctx_free(x);
                        return;
                }
                timeout_ms = 120000;
        } else if (strcmp(x->k->kind, "stop") == 0) {
                /* Its files only: a jail's processes end without a checkpoint, a VM's memory is not saved. */
                req = pr_msg_encode(&pr_wk_suspend_req_schema, &(pr_wk_suspend_req){.id = x->sbx, .processes = false});
        } else {
                req = pr_msg_encode(&pr_wk_sandbox_ref_schema, &(pr_wk_sandbox_ref){.id = x->sbx});
        }
        _cleanup_error_ sp_error *e = NULL;
        if (sp_rpc_client_call(cli, x->k->method, req, timeout_ms, on_result, x, &e) < 0) {
                op_retry(c, x->op, backoff_s(x->attempts - 1), e->message);
                ctx_free(x);
        }
}

/* A move that did not happen (move.c): the operation waits, retries or fails. */
static void not_moved(cp_ctrl *c, const char *op, const char *sbx, const kind_def *k, const char *prior, int attempts,
                      cp_move_outcome o, const sp_error *err)
{
        char msg[1024];
        switch (o) {
        case CP_MOVE_NO_WORKER:
                /* "cannot move": woken with the creates waiting for a slot. */
                snprintf(msg, sizeof(msg), "cannot move it yet: %s", err->message);
                op_retry(c, op, 2, msg);
                break;
        case CP_MOVE_RETRY:
                snprintf(msg, sizeof(msg), "moving it: retrying: %s", err->message);
                op_retry(c, op, backoff_s(attempts), msg);
                break;
        case CP_MOVE_FAILED:
        case CP_MOVE_DONE: {
                /* The step it was at is no longer under way: the error says what happened. */
                const char *mp[] = {op};
                (void)cp_db_exec(c->db, "UPDATE operations SET message = NULL WHERE id = $1", 1, mp, NULL, NULL);
                snprintf(msg, sizeof(msg), "cannot move it: %s", err ? err->message : "?");
                op_fail(c, op, sbx, k, prior, err ? err->code : SP_E_INTERNAL, msg);
                if (k->method) {
                        /* A wake that failed: it stays as it was, wanted so. */
                        const char *p[] = {sbx};
                        (void)cp_db_exec(c->db,
                                         "UPDATE sandboxes SET desired_state = observed_state, updated_at = now() "
                                         "WHERE id = $1 AND observed_state IN ('suspended', 'stopped')",
                                         1, p, NULL, NULL);
                }
                break;
        }
        }
}

/* A move has ended: a `move` is done; a wake goes on on the new worker. */
static void on_moved(void *userdata, cp_move_outcome o, const cp_move_result *r, const sp_error *err)
{
        op_ctx *x = userdata;
        if (o == CP_MOVE_DONE && x->k->method) {
                snprintf(x->worker, sizeof(x->worker), "%s", r->to);
                call_worker(x);
                return;
        }
        if (o == CP_MOVE_DONE)
                op_succeed(x->c, x->op, x->sbx, x->k);
        else
                not_moved(x->c, x->op, x->sbx, x->k, x->prior_state, x->attempts, o, err);
        ctx_free(x);
}

static void start_sandbox_op(cp_ctrl *c, const char *op, const char *kind, const char *sbx_id, int attempts,
                             const char *avoid, bool drain)
{
        const kind_def *k = NULL;
        for (const kind_def *d = KINDS; d->kind; d++)
                if (strcmp(d->kind, kind) == 0)
                        k = d;
        if (!k) {
                op_fail(c, op, sbx_id, NULL, NULL, SP_E_INVALID, "unknown operation");
                return;
        }
        _cleanup_pgresult_ PGresult *sbx = NULL;
        const char *p[] = {sbx_id};
        if (cp_db_exec(c->db, SBX_SELECT, 1, p, &sbx, NULL) < 0)
                return;
        if (PQntuples(sbx) != 1) {
                op_fail(c, op, sbx_id, NULL, NULL, SP_E_NOT_FOUND, "the sandbox no longer exists");
                return;
        }
        char worker[SP_ID_MAX] = "";
        serve how = SERVE;
        if (!PQgetisnull(sbx, 0, S_WORKER))
                snprintf(worker, sizeof(worker), "%s", PQgetvalue(sbx, 0, S_WORKER));
        if (!worker[0]) {
                if (strcmp(kind, "delete") == 0) {
                        op_succeed(c, op, sbx_id, k); /* never placed: nothing to remove */
                        return;
                }
                if (strcmp(kind, "create") != 0) {
                        op_fail(c, op, sbx_id, k, NULL, SP_E_CONFLICT, "the sandbox has no worker");
                        return;
                }
                _cleanup_error_ sp_error *e = NULL;
                if (place(c, sbx, avoid, worker, &e) < 0) {
                        char msg[1024];
                        snprintf(msg, sizeof(msg), "cannot place: %s", e->message);
                        op_retry(c, op, 2, msg);
                        return;
                }
                const char *wp[] = {sbx_id, worker};
                if (cp_db_exec(c->db,
                               "UPDATE sandboxes SET worker_id = $2, backend = coalesce(backend, (SELECT backend "
                               "FROM workers WHERE id = $2)), updated_at = now() WHERE id = $1",
                               2, wp, NULL, NULL) < 0)
                        return;
                sp_log_kv(SP_LOG_INFO, SP_KV("sandbox_id", sbx_id, "worker_id", worker), "placed");
        } else if ((how = worker_cannot_serve(c, op, k, sbx_id, sbx, drain)) == HANDLED) {
                return;
        }
        if (how == SERVE && !cp__worker_client(c, worker)) {
                op_retry(c, op, backoff_s(attempts), "waiting for the worker's address");
                return;
        }
        /* A move first chooses where to: while it cannot, the operation waits
         * as it is (never taken, so a delete can cancel it). */
        cp_move *mv = NULL;
        if (how == MOVE) {
                cp_move_outcome o;
                _cleanup_error_ sp_error *e = NULL;
                if (!(mv = cp__move_prepare(c, op, sbx_id, &o, &e))) {
                        not_moved(c, op, sbx_id, k, PQgetvalue(sbx, 0, S_OBSERVED), attempts + 1, o, e);
                        return;
                }
        }
        op_ctx *x = calloc(1, sizeof(*x));
        if (!x || !cp__inflight_add(c, op)) {
                free(x);
                cp__move_free(mv);
                return;
        }
        x->c = c;
        x->k = k;
        x->attempts = attempts + 1;
        snprintf(x->op, sizeof(x->op), "%s", op);
        snprintf(x->sbx, sizeof(x->sbx), "%s", sbx_id);
        snprintf(x->worker, sizeof(x->worker), "%s", worker);
        x->prior_state = strdup(PQgetvalue(sbx, 0, S_OBSERVED));
        const char *up[] = {op};
        _cleanup_pgresult_ PGresult *taken = NULL;
        if (cp_db_exec(c->db,
                       "UPDATE operations SET state = 'running', attempts = attempts + 1, updated_at = now() "
                       "WHERE id = $1 AND state IN ('pending', 'running') RETURNING id",
                       1, up, &taken, NULL) < 0 ||
            PQntuples(taken) != 1) {
                ctx_free(x); /* finished meanwhile (a delete cancelled it), or no database */
                cp__move_free(mv);
                return;
        }
        if (mv)
                cp__move_run(mv, on_moved, x);
        else
                call_worker(x);
}

void cp__ops_run(cp_ctrl *c)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        /* The oldest unfinished operation of each target, if it is due. */
        if (cp_db_exec(c->db,
                       "SELECT id, kind, target_id, attempts, avoid, drain FROM (SELECT DISTINCT ON (target_id) id, "
                       "kind, target_id, attempts, next_attempt_at, created_at, request->>'avoid_worker' avoid, "
                       "coalesce((request->>'drain')::boolean, false) drain "
                       "FROM operations WHERE state IN ('pending', 'running') ORDER BY target_id, created_at) o "
                       "WHERE next_attempt_at <= now() "
                       "ORDER BY created_at LIMIT 500",
                       0, NULL, &res, NULL) < 0)
                return;
        for (int i = 0; i < PQntuples(res); i++) {
                const char *op = PQgetvalue(res, i, 0), *kind = PQgetvalue(res, i, 1);
                if (cp__inflight_has(c, op))
                        continue;
                int attempts = atoi(PQgetvalue(res, i, 3));
                if (strncmp(kind, "template_", 9) == 0)
                        cp__template_op(c, op, kind, PQgetvalue(res, i, 2), attempts);
                else
                        start_sandbox_op(c, op, kind, PQgetvalue(res, i, 2), attempts,
                                         PQgetisnull(res, i, 4) ? NULL : PQgetvalue(res, i, 4),
                                         strcmp(PQgetvalue(res, i, 5), "t") == 0);
        }
}
