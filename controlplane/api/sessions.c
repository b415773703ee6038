/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command sessions (docs/api.md, proto/spec/dataplane.md). A session is
 * recorded (state `starting`) before its worker is asked to run it, and the
 * client hears of it as soon as the worker accepted it (ExecStream's first
 * frame, proto/spec/worker-rpc.md), with an attachment token for the data
 * plane: the session is then on its worker, and its `start` (pid) comes
 * through the attach stream. The agent's start report, the stream's second
 * frame, is recorded when it arrives, after the answer; a program, cwd or
 * user the sandbox lacks makes it `failed` with the agent's message (and the
 * attach stream ends with an `error` event saying so). A worker that refuses
 * before it accepts (no such sandbox, too many sessions) leaves no record;
 * one that cannot be reached or does not accept in time leaves the session
 * `starting` — a GET asks the worker again, and a retry with the same
 * Idempotency-Key asks it to run the same session (it runs once). Reads
 * refresh unfinished sessions from their worker when it is reachable (which
 * also settles a start report that never arrived, as when this replica
 * stopped after answering) and keep the last recorded state when it is not.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "api/request_session.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"

#define NOT_FOUND_FMT "session %.64s not found"

/* ---- the record ---- */

/* A session of c's tenant as stored, with where it runs. */
typedef struct session_row {
        char id[SP_ID_MAX];
        char sandbox_id[SP_ID_MAX];
        char state[16];
        char worker_id[SP_ID_MAX];
        char address[272];
        bool reachable; /* its worker is not marked unreachable */
        bool sandbox_running;
        bool write_default; /* stdin or a PTY: tokens default to scope write */
        int64_t age_ms;
        json_object *json; /* api_session() */
} session_row;

static void row_free(session_row *r)
{
        sp_json_putp(&r->json);
}

static bool finished(const char *state)
{
        return strcmp(state, "exited") == 0 || strcmp(state, "failed") == 0;
}

static int load(cp_api *api, const char *tenant_id, const char *id, session_row *ret, sp_error **err)
{
        const char *params[] = {id, tenant_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        int r = cp_db_exec(api->db,
                           "SELECT api_session(s)::text, s.id, s.sandbox_id, s.state, coalesce(s.worker_id, ''), "
                           "coalesce(w.address, ''), coalesce(w.state <> 'unreachable', false), "
                           "sb.observed_state = 'running' AND sb.desired_state = 'running' AND sb.deleted_at IS NULL, "
                           "coalesce((s.spec->>'stdin')::boolean, false) OR jsonb_typeof(s.spec->'pty') = 'object', "
                           "(extract(epoch FROM now() - s.created_at) * 1000)::bigint "
                           "FROM sessions s JOIN sandboxes sb ON sb.id = s.sandbox_id "
                           "LEFT JOIN workers w ON w.id = s.worker_id WHERE s.id = $1 AND s.tenant_id = $2",
                           2, params, &res, err);
        if (r < 0)
                return r;
        if (PQntuples(res) != 1)
                return sp_error_set(err, SP_E_NOT_FOUND, NOT_FOUND_FMT, id);
        const char *text = PQgetvalue(res, 0, 0);
        if ((r = sp_json_parse(text, strlen(text), &ret->json, err)) < 0)
                return r;
        snprintf(ret->id, sizeof(ret->id), "%s", PQgetvalue(res, 0, 1));
        snprintf(ret->sandbox_id, sizeof(ret->sandbox_id), "%s", PQgetvalue(res, 0, 2));
        snprintf(ret->state, sizeof(ret->state), "%s", PQgetvalue(res, 0, 3));
        snprintf(ret->worker_id, sizeof(ret->worker_id), "%s", PQgetvalue(res, 0, 4));
        snprintf(ret->address, sizeof(ret->address), "%s", PQgetvalue(res, 0, 5));
        ret->reachable = strcmp(PQgetvalue(res, 0, 6), "t") == 0;
        ret->sandbox_running = strcmp(PQgetvalue(res, 0, 7), "t") == 0;
        ret->write_default = strcmp(PQgetvalue(res, 0, 8), "t") == 0;
        ret->age_ms = strtoll(PQgetvalue(res, 0, 9), NULL, 10);
        return 0;
}

/* Records what the worker reports of a session (its Session object) on an
 * unfinished record of tenant_id. */
static int record(cp_api *api, const char *tenant_id, json_object *ws, sp_error **err)
{
        static const char *const states[] = {"starting", "running", "exited", "failed"};
        pr_wk_session ses;
        if (pr_msg_decode(&pr_wk_session_schema, ws, &ses, err) < 0)
                return sp_error_wrap(err, "the worker's session");
        const char *state = ses.state;
        bool known = false;
        for (size_t i = 0; i < SP_ARRAY_SIZE(states); i++)
                known |= strcmp(state, states[i]) == 0;
        if (!known)
                return sp_error_set(err, SP_E_INTERNAL, "the worker's session: unknown state '%.16s'", state);
        /* Only the fields the API shows, with their types. */
        _cleanup_json_ json_object *exit_obj = NULL;
        if (ses.has_exit) {
                const pr_wk_exit *x = &ses.exit;
                exit_obj = json_object_new_object();
                json_object_object_add(exit_obj, "code", json_object_new_int64(x->code));
                json_object_object_add(exit_obj, "oom", json_object_new_boolean(x->oom));
                json_object_object_add(exit_obj, "signal", json_object_new_int64(x->signal));
                json_object_object_add(exit_obj, "killed", json_object_new_boolean(x->killed));
                json_object_object_add(exit_obj, "reason", x->reason ? json_object_new_string(x->reason) : NULL);
        }
        char pidtext[16];
        snprintf(pidtext, sizeof(pidtext), "%lld", (long long)ses.pid);
        const char *params[] = {ses.id,
                                tenant_id,
                                state,
                                ses.pid ? pidtext : NULL,
                                ses.started_at,
                                ses.ended_at,
                                exit_obj ? sp_json_str(exit_obj) : NULL,
                                ses.error};
        return cp_db_exec(api->db,
                          "UPDATE sessions SET state = $3, pid = coalesce($4::integer, pid), "
                          "started_at = coalesce($5::timestamptz, started_at), "
                          "ended_at = coalesce($6::timestamptz, ended_at), exit = coalesce($7::jsonb, exit), "
                          "error = $8, updated_at = now() "
                          "WHERE id = $1 AND tenant_id = $2 AND state NOT IN ('exited', 'failed')",
                          8, params, NULL, err);
}

/* Marks an unfinished session failed with why. */
static void mark_failed(cp_api *api, const char *id, const char *why)
{
        const char *params[] = {id, why};
        (void)cp_db_exec(api->db,
                         "UPDATE sessions SET state = 'failed', error = $2, ended_at = coalesce(ended_at, now()), "
                         "updated_at = now() WHERE id = $1 AND state NOT IN ('exited', 'failed')",
                         2, params, NULL, NULL);
}

/* The attach token for a session (scope "read" or "write") into o:
 * attach_url, attach_token, token_expires_at. */
static int add_token(cp_call *c, const session_row *s, const char *scope, int64_t ttl_s, json_object *o, sp_error **err)
{
        _cleanup_json_ json_object *claims = json_object_new_object();
        json_object_object_add(claims, "typ", json_object_new_string("session"));
        json_object_object_add(claims, "ten", json_object_new_string(c->who.tenant_id));
        if (c->who.key_id[0]) /* the key that minted it: revoking the key ends the token */
                json_object_object_add(claims, "akey", json_object_new_string(c->who.key_id));
        json_object_object_add(claims, "sbx", json_object_new_string(s->sandbox_id));
        json_object_object_add(claims, "ses", json_object_new_string(s->id));
        cp__token_worker_claims(c->api, claims, s->worker_id, s->address);
        json_object_object_add(claims, "scope", json_object_new_string(scope));
        _cleanup_free_ char *token = NULL;
        char expires[32], url[1200];
        int r = cp__token_mint(c->api, claims, ttl_s, &token, expires, err);
        if (r < 0)
                return r;
        snprintf(url, sizeof(url), "%s/v1/sessions/%s/attach", c->api->dataplane_url, s->id);
        json_object_object_add(o, "attach_url", json_object_new_string(url));
        json_object_object_add(o, "attach_token", json_object_new_string(token));
        json_object_object_add(o, "token_expires_at", json_object_new_string(expires));
        return 0;
}

static void sync_sessions(cp_call *c, const char *sandbox_id, const char *worker_id, json_object *resp,
                          const sp_error *err);

/* ---- create ---- */

/* One create, from the request to the worker's start report. The request's
 * part (c) ends with the answer; the stream of ExecStream may go on after it
 * to record the start, so the context is freed by whichever ends last. */
typedef struct create_ctx {
        cp_api *api;
        cp_call *c; /* NULL once answered */
        cp_session_create_req r;
        char tenant_id[SP_ID_MAX];
        char id[SP_ID_MAX];
        char sandbox_id[SP_ID_MAX];
        char worker_id[SP_ID_MAX];
        char address[272];
        char request_id[64];
        bool replayed;
        bool streaming; /* an ExecStream is open: its on_end frees the context */
        json_object *recorded; /* api_session() of the new record, for the answer without reading it back */
        char conflict[512]; /* the worker's refusal, while we look whether it ran the session already */
        int64_t session_limit; /* the tenant's sessions_per_sandbox (CP_QUOTA_NONE: none) */
} create_ctx;

static void create_free(create_ctx *x)
{
        cp_session_create_req_free(&x->r);
        sp_json_putp(&x->recorded);
        free(x);
}

/* The request is answered: the context lives on while its stream does. */
static void create_done(create_ctx *x)
{
        x->c = NULL;
        if (!x->streaming)
                create_free(x);
}

/* Answers 201 with the session (as recorded at x->recorded, else read now) and a new token. */
static void create_answer(cp_call *c, create_ctx *x)
{
        _cleanup_error_ sp_error *e = NULL;
        session_row s = {0};
        _cleanup_json_ json_object *out = json_object_new_object();
        int r = 0;
        if (x->recorded) {
                snprintf(s.id, sizeof(s.id), "%s", x->id);
                snprintf(s.sandbox_id, sizeof(s.sandbox_id), "%s", x->sandbox_id);
                snprintf(s.address, sizeof(s.address), "%s", x->address);
                s.write_default = x->r.stdin_open || x->r.pty;
                s.json = json_object_get(x->recorded);
        } else {
                r = load(c->api, c->who.tenant_id, x->id, &s, &e);
        }
        if (r < 0 ||
            add_token(c, &s, s.write_default ? "write" : "read", c->api->cfg.attach_token_ttl_s, out, &e) < 0) {
                row_free(&s);
                cp__fail(c, e);
                create_done(x);
                return;
        }
        json_object_object_add(out, "session", json_object_get(s.json));
        row_free(&s);
        if (x->replayed)
                sp_http_response_header(c->req, "Idempotent-Replayed", "true");
        cp__reply(c, 201, out);
        create_done(x);
}

/* The worker would not run it: nothing of it stays. */
static void create_refused(cp_call *c, create_ctx *x, const sp_error *err)
{
        const char *params[] = {x->id};
        (void)cp_db_exec(c->api->db, "DELETE FROM sessions WHERE id = $1 AND state = 'starting'", 1, params, NULL,
                         NULL);
        cp__mutation_forget(c);
        if (err->code == SP_E_NOT_FOUND)
                cp__failf(c, SP_E_CONFLICT, "sandbox %s is not running on its worker: %s", x->sandbox_id, err->message);
        else
                cp__fail(c, err);
        create_done(x);
}

/* Whether it started is unknown: the record stays `starting` for a GET or a retry to settle. */
static void create_unknown(cp_call *c, create_ctx *x, const sp_error *err)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *params[] = {x->id, err->message};
        (void)cp_db_exec(c->api->db, "UPDATE sessions SET error = $2, updated_at = now() WHERE id = $1", 2, params,
                         NULL, NULL);
        sp_error_set(&e, err->code,
                     "%s; session %s may have started: GET /v1/sessions/%s tells, and a retry with "
                     "the same Idempotency-Key runs it at most once",
                     err->message, x->id, x->id);
        cp__fail_worker(c, e);
        create_done(x);
}

/* The worker's Session (GetSession's answer, for a session an earlier
 * attempt started): recorded, then answered. */
static void on_recorded_session(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        create_ctx *x = userdata;
        _cleanup_error_ sp_error *e = NULL;
        if (err && (err->code == SP_E_NOT_FOUND || err->code == SP_E_CONFLICT)) {
                /* The conflict was not about this session existing: report it. */
                _cleanup_error_ sp_error *conflict = NULL;
                sp_error_set(&conflict, SP_E_CONFLICT, "%s", x->conflict);
                create_refused(c, x, conflict);
                return;
        }
        if (err) {
                create_unknown(c, x, err);
                return;
        }
        if (record(c->api, c->who.tenant_id, resp, &e) < 0) {
                cp__fail(c, e);
                create_done(x);
                return;
        }
        sp_json_putp(&x->recorded); /* answer what was recorded now */
        create_answer(c, x);
}

/* The worker refused before it accepted, or could not be asked. */
static void create_failed(cp_call *c, create_ctx *x, const sp_error *err)
{
        if (err->code == SP_E_CONFLICT) {
                /* An earlier attempt may have started it already: look. */
                snprintf(x->conflict, sizeof(x->conflict), "%s", err->message);
                _cleanup_json_ json_object *req =
                        pr_msg_encode(&pr_wk_session_ref_schema, &(pr_wk_session_ref){.session_id = x->id});
                cp__worker_call(c, x->worker_id, x->address, "GetSession", req, on_recorded_session, x);
                return;
        }
        if (err->code != SP_E_UNAVAILABLE && err->code != SP_E_TIMEOUT)
                create_refused(c, x, err);
        else
                create_unknown(c, x, err);
}

/* A Session frame of ExecStream: the first is the worker's acceptance, which
 * is answered at once; one that is no longer `starting` is the agent's start
 * report (or its refusal), recorded whenever it comes. */
static void on_exec_frame(cp_api *api, json_object *msg, void *userdata)
{
        create_ctx *x = userdata;
        _cleanup_error_ sp_error *e = NULL;
        pr_wk_session ses;
        if (pr_msg_decode(&pr_wk_session_schema, msg, &ses, &e) < 0) {
                sp_log_kv(SP_LOG_WARN, SP_KV("session_id", x->id, "worker_id", x->worker_id), "ExecStream: %s",
                          e->message);
                return;
        }
        if (x->c) {
                if (!x->replayed) {
                        api->sessions_created_total++;
                        sp_log_kv(SP_LOG_INFO,
                                  SP_KV("session_id", x->id, "sandbox_id", x->sandbox_id, "request_id", x->request_id),
                                  "session accepted");
                }
                create_answer(x->c, x);
        }
        if (strcmp(ses.state, "starting") == 0)
                return;
        if (record(api, x->tenant_id, msg, &e) < 0) {
                sp_log_kv(SP_LOG_WARN, SP_KV("session_id", x->id, "request_id", x->request_id),
                          "recording the session's start: %s", e->message);
                return;
        }
        if (strcmp(ses.state, "failed") == 0)
                sp_log_kv(SP_LOG_INFO,
                          SP_KV("session_id", x->id, "sandbox_id", x->sandbox_id, "request_id", x->request_id),
                          "session failed to start: %s", ses.error ? ses.error : "");
        else
                sp_log_kv(SP_LOG_INFO,
                          SP_KV("session_id", x->id, "sandbox_id", x->sandbox_id, "request_id", x->request_id),
                          "session started");
}

static void on_exec_end(cp_api *api, const sp_error *err, void *userdata)
{
        (void)api;
        create_ctx *x = userdata;
        x->streaming = false;
        if (x->c) {
                _cleanup_error_ sp_error *e = NULL;
                if (!err)
                        sp_error_set(&e, SP_E_INTERNAL, "worker %s ended ExecStream without accepting the session",
                                     x->worker_id);
                create_failed(x->c, x, err ? err : e);
                return;
        }
        if (err)
                /* Answered, the start not recorded: a GET or a list asks the worker. */
                sp_log_kv(SP_LOG_WARN, SP_KV("session_id", x->id, "request_id", x->request_id),
                          "the session's start report did not arrive: %s", err->message);
        create_free(x);
}

static void ask_worker(cp_call *c, create_ctx *x)
{
        _cleanup_json_ json_object *cwd = x->r.cwd ? json_object_new_string(x->r.cwd) : NULL;
        _cleanup_json_ json_object *user = x->r.user[0] ? json_object_new_string(x->r.user) : NULL;
        _cleanup_json_ json_object *pty = NULL;
        if (x->r.pty) {
                pty = json_object_new_object();
                json_object_object_add(pty, "rows", json_object_new_int64(x->r.rows));
                json_object_object_add(pty, "cols", json_object_new_int64(x->r.cols));
        }
        _cleanup_json_ json_object *stdin_open = json_object_new_boolean(x->r.stdin_open);
        pr_wk_exec q = {
                .sandbox_id = x->sandbox_id,
                .session_id = x->id,
                .timeout_ms = x->r.timeout_s * 1000,
                .argv = x->r.argv,
                .env = x->r.env,
                .cwd = cwd,
                .user = user,
                .pty = pty,
                .stdin_open = stdin_open,
        };
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_exec_schema, &q);
        static const cp_worker_stream_ops ops = {.on_frame = on_exec_frame, .on_end = on_exec_end};
        _cleanup_error_ sp_error *e = NULL;
        x->streaming = true;
        if (cp__worker_stream(c, x->worker_id, x->address, "ExecStream", req, &ops, x, &e) < 0) {
                x->streaming = false;
                create_failed(c, x, e);
        }
}

/* What the record keeps of the request: never the environment's values. */
static json_object *spec_of(const cp_session_create_req *r)
{
        json_object *spec = json_object_new_object();
        json_object_object_add(spec, "argv", json_object_get(r->argv));
        json_object_object_add(spec, "cwd", r->cwd ? json_object_new_string(r->cwd) : NULL);
        json_object_object_add(spec, "user", r->user[0] ? json_object_new_string(r->user) : NULL);
        json_object *pty = NULL;
        if (r->pty) {
                pty = json_object_new_object();
                json_object_object_add(pty, "rows", json_object_new_int64(r->rows));
                json_object_object_add(pty, "cols", json_object_new_int64(r->cols));
        }
        json_object_object_add(spec, "pty", pty);
        json_object_object_add(spec, "stdin", json_object_new_boolean(r->stdin_open));
        json_object_object_add(spec, "timeout_s", json_object_new_int64(r->timeout_s));
        return spec;
}

/* A retry of an earlier create: answer for its session, running it if the
 * first attempt's outcome is unknown. */
static void create_again(cp_call *c, create_ctx *x)
{
        _cleanup_error_ sp_error *e = NULL;
        session_row s = {0};
        x->replayed = true;
        if (load(c->api, c->who.tenant_id, x->id, &s, &e) < 0) {
                row_free(&s);
                cp__fail(c, e);
                create_free(x);
                return;
        }
        snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", s.sandbox_id);
        snprintf(x->worker_id, sizeof(x->worker_id), "%s", s.worker_id);
        snprintf(x->address, sizeof(x->address), "%s", s.address);
        bool starting = strcmp(s.state, "starting") == 0;
        row_free(&s);
        if (!starting) {
                create_answer(c, x);
                return;
        }
        ask_worker(c, x);
}

/* The sessions of sandbox id (of c's tenant) unfinished as recorded; 0 on trouble. */
static int64_t unfinished(cp_call *c, const char *id)
{
        const char *p[] = {id, c->who.tenant_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db,
                       "SELECT count(*) FROM sessions WHERE sandbox_id = $1 AND tenant_id = $2 "
                       "AND state NOT IN ('exited', 'failed')",
                       2, p, &res, NULL) < 0)
                return 0;
        return strtoll(PQgetvalue(res, 0, 0), NULL, 10);
}

/* Inside the create's transaction: locks sandbox id's row against other
 * creates of its sessions and refuses one more past limit (SP_E_LIMIT,
 * counted in /metrics), counting the sessions unfinished as recorded. */
static int session_room(cp_call *c, const char *id, int64_t limit, sp_error **err)
{
        const char *p[] = {id};
        if (cp_db_exec(c->api->db, "SELECT 1 FROM sandboxes WHERE id = $1 FOR NO KEY UPDATE", 1, p, NULL, err) < 0)
                return -SP_E_UNAVAILABLE;
        int64_t n = unfinished(c, id);
        if (n < limit)
                return 0;
        c->api->quota_refusals_total[CP_QUOTA_SESSIONS_PER_SANDBOX]++;
        return sp_error_set(err, SP_E_LIMIT,
                            "tenant quota exceeded: sessions_per_sandbox limit %lld, in use %lld, requested 1 (sandbox "
                            "%s has that many sessions running; an admin sets it with PUT /v1/tenants/%s/quotas)",
                            (long long)limit, (long long)n, id, c->who.tenant_id);
}

static void create_go(cp_call *c, create_ctx *x);

/* ListSessions's answer before a create over the recorded count: recorded, then the create goes on. */
static void on_synced(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        create_ctx *x = userdata;
        sync_sessions(c, x->sandbox_id, x->worker_id, resp, err);
        create_go(c, x);
}

void cp__h_session_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *sbx = sp_http_request_param(c->req, "id");
        create_ctx *x = calloc(1, sizeof(*x));
        if (!x) {
                cp__failf(c, SP_E_LIMIT, "out of memory");
                return;
        }
        x->api = c->api;
        x->c = c;
        snprintf(x->tenant_id, sizeof(x->tenant_id), "%s", c->who.tenant_id);
        snprintf(x->request_id, sizeof(x->request_id), "%s",
                 sp_http_request_id(c->req) ? sp_http_request_id(c->req) : "");
        if (cp_req_session_create(c->body, c->body_len, &x->r, &e) < 0 || sp_id_new("ses", x->id, &e) < 0 ||
            cp__quota_limit(c, c->who.tenant_id, CP_QUOTA_SESSIONS_PER_SANDBOX, &x->session_limit, &e) < 0) {
                cp__fail(c, e);
                create_free(x);
                return;
        }
        /* With a limit of sessions per sandbox that the record says is
         * reached, the worker is asked first which have ended (a session's
         * record learns of its end only when someone asks). */
        cp_sandbox_loc loc;
        if (x->session_limit >= 0 && unfinished(c, sbx) >= x->session_limit &&
            cp__sandbox_locate(c, sbx, true, &loc, NULL) == 0 && loc.reachable) {
                snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", loc.id);
                snprintf(x->worker_id, sizeof(x->worker_id), "%s", loc.worker_id);
                _cleanup_json_ json_object *req =
                        pr_msg_encode(&pr_wk_list_sessions_schema, &(pr_wk_list_sessions){.sandbox_id = loc.id});
                cp__worker_call(c, loc.worker_id, loc.address, "ListSessions", req, on_synced, x);
                return;
        }
        create_go(c, x);
}

/* The rest of a create: the record (checked against the tenant's
 * sessions_per_sandbox under the sandbox's lock), then the worker. */
static void create_go(cp_call *c, create_ctx *x)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *sbx = sp_http_request_param(c->req, "id");
        /* With an Idempotency-Key, the key's record and the session's go in one
         * transaction, and so do the count of a sessions_per_sandbox quota
         * and the record. Without either no transaction is opened: the
         * session's writes are one statement, atomic by itself — two round
         * trips to PostgreSQL fewer on every exec (docs/performance.md). */
        bool keyed = sp_http_request_header(c->req, "Idempotency-Key") != NULL;
        bool txn = keyed || x->session_limit >= 0; /* the count and the record, together */
        if (txn) {
                char first[SP_ID_MAX];
                int r = cp__mutation_begin_for(c, x->id, first);
                if (r == 1) {
                        create_free(x);
                        return;
                }
                if (r == 2) {
                        snprintf(x->id, sizeof(x->id), "%s", first);
                        create_again(c, x);
                        return;
                }
        }
        cp_sandbox_loc loc;
        _cleanup_json_ json_object *spec = spec_of(&x->r);
        _cleanup_json_ json_object *detail = json_object_new_object();
        json_object_object_add(detail, "sandbox_id", json_object_new_string(sbx));
        json_object_object_add(detail, "argv0", json_object_get(json_object_array_get_idx(x->r.argv, 0)));
        if (cp__sandbox_locate(c, sbx, true, &loc, &e) < 0 ||
            (x->session_limit >= 0 && session_room(c, loc.id, x->session_limit, &e) < 0)) {
                cp__mutation_abort(c, e);
                create_free(x);
                return;
        }
        const char *params[] = {x->id,
                                c->who.tenant_id,
                                loc.id,
                                sp_json_str(spec),
                                loc.worker_id,
                                x->r.tag[0] ? x->r.tag : NULL,
                                c->who.key_id[0] ? c->who.key_id : NULL,
                                sp_http_request_id(c->req),
                                sp_json_str(detail)};
        _cleanup_pgresult_ PGresult *ins = NULL;
        /* The session, the sandbox's activity and the audit record (as
         * cp__audit writes it), in one statement; the record as the answer shows
         * it, so that the answer needs no read after the worker's. */
        if (cp_db_exec(
                    c->api->db,
                    "WITH s AS (INSERT INTO sessions (id, tenant_id, sandbox_id, spec, state, worker_id, tag) "
                    "VALUES ($1, $2, $3, $4::jsonb, 'starting', $5, $6) RETURNING api_session(sessions)::text AS j), "
                    "t AS (UPDATE sandboxes SET last_active_at = now() WHERE id = $3), "
                    "a AS (INSERT INTO audit_log (tenant_id, key_id, action, target, request_id, detail) "
                    "VALUES ($2, $7, 'session.create', $1, $8, $9::jsonb)) SELECT j FROM s",
                    9, params, &ins, &e) < 0 ||
            (PQntuples(ins) != 1 && sp_error_set(&e, SP_E_INTERNAL, "the new session has no record") < 0) ||
            sp_json_parse(PQgetvalue(ins, 0, 0), strlen(PQgetvalue(ins, 0, 0)), &x->recorded, &e) < 0) {
                cp__mutation_abort(c, e);
                create_free(x);
                return;
        }
        cp__audit_written(c);
        if (txn && cp__mutation_commit_quiet(c) < 0) {
                create_free(x);
                return;
        }
        snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", loc.id);
        snprintf(x->worker_id, sizeof(x->worker_id), "%s", loc.worker_id);
        snprintf(x->address, sizeof(x->address), "%s", loc.address);
        ask_worker(c, x);
}

/* ---- get ---- */

typedef struct get_ctx {
        char id[SP_ID_MAX];
        char state[16];
        int64_t age_ms;
} get_ctx;

/* Answers with the session as recorded now, and with output_end when it
 * is >= 0 (what its worker has just reported: the offset after the output
 * produced so far). */
static void get_answer(cp_call *c, const char *id, int64_t output_end)
{
        _cleanup_error_ sp_error *e = NULL;
        session_row s = {0};
        if (load(c->api, c->who.tenant_id, id, &s, &e) < 0) {
                row_free(&s);
                cp__fail(c, e);
                return;
        }
        if (output_end >= 0)
                json_object_object_add(s.json, "output_end", json_object_new_int64(output_end));
        cp__reply(c, 200, s.json);
        row_free(&s);
}

static void on_get(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        get_ctx *x = userdata;
        _cleanup_error_ sp_error *e = NULL;
        int64_t output_end = -1;
        if (!err) {
                json_object *end = NULL;
                if (json_object_object_get_ex(resp, "output_end", &end) && json_object_is_type(end, json_type_int))
                        output_end = json_object_get_int64(end);
                if (record(c->api, c->who.tenant_id, resp, &e) < 0)
                        sp_log_warn_kv(SP_KV("session_id", x->id), "recording the worker's session: %s", e->message);
        } else if (err->code == SP_E_NOT_FOUND &&
                   (strcmp(x->state, "running") == 0 || x->age_ms > 2 * c->api->cfg.worker_timeout_ms)) {
                /* Its worker lost it (the sandbox was stopped, suspended or recreated), or never started it. */
                mark_failed(c->api, x->id, "its worker no longer has it");
        }
        /* Otherwise (worker trouble) the last recorded state stands. */
        get_answer(c, x->id, output_end);
        free(x);
}

void cp__h_session_get(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        session_row s = {0};
        if (load(c->api, c->who.tenant_id, id, &s, &e) < 0) {
                row_free(&s);
                cp__fail(c, e);
                return;
        }
        if (finished(s.state) || !s.worker_id[0] || !s.reachable) {
                cp__reply(c, 200, s.json);
                row_free(&s);
                return;
        }
        get_ctx *x = calloc(1, sizeof(*x));
        if (!x) {
                cp__reply(c, 200, s.json);
                row_free(&s);
                return;
        }
        snprintf(x->id, sizeof(x->id), "%s", s.id);
        snprintf(x->state, sizeof(x->state), "%s", s.state);
        x->age_ms = s.age_ms;
        _cleanup_json_ json_object *req =
                pr_msg_encode(&pr_wk_session_ref_schema, &(pr_wk_session_ref){.session_id = s.id});
        cp__worker_call(c, s.worker_id, s.address, "GetSession", req, on_get, x);
        row_free(&s);
}

/* ---- list ---- */

typedef struct list_ctx {
        cp_session_list_query q;
        char sandbox_id[SP_ID_MAX];
        char worker_id[SP_ID_MAX];
} list_ctx;

/* Answers one page of the sandbox's sessions, oldest first. */
static void list_answer(cp_call *c, const list_ctx *x)
{
        _cleanup_error_ sp_error *e = NULL;
        char limit[24];
        snprintf(limit, sizeof(limit), "%lld", (long long)(x->q.limit + 1));
        const char *params[] = {c->who.tenant_id,
                                x->sandbox_id,
                                x->q.has_cursor ? x->q.cursor_created_at : NULL,
                                x->q.has_cursor ? x->q.cursor_id : NULL,
                                limit,
                                x->q.tag[0] ? x->q.tag : NULL};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db,
                       "SELECT api_session(s)::text, api_ts(s.created_at), s.id FROM sessions s "
                       "WHERE s.tenant_id = $1 AND s.sandbox_id = $2 "
                       "AND ($3::text IS NULL OR (s.created_at, s.id) > ($3::timestamptz, $4::text)) "
                       "AND ($6::text IS NULL OR s.tag = $6) "
                       "ORDER BY s.created_at, s.id LIMIT $5::integer",
                       6, params, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply_page(c, res, x->q.limit, "sessions", "ses");
}

/* Records what a worker's ListSessions answer (resp, or err) says of the
 * sessions of sandbox_id: their states, and those it does not have as
 * failed. */
static void sync_sessions(cp_call *c, const char *sandbox_id, const char *worker_id, json_object *resp,
                          const sp_error *err)
{
        pr_wk_session_list list = {0};
        _cleanup_error_ sp_error *bad = NULL;
        if (!err && pr_msg_decode(&pr_wk_session_list_schema, resp, &list, &bad) < 0)
                sp_log_warn_kv(SP_KV("sandbox_id", sandbox_id), "the worker's sessions: %s", bad->message);
        else if (!err) {
                json_object *arr = list.sessions;
                _cleanup_json_ json_object *ids = json_object_new_array();
                for (size_t i = 0; i < json_object_array_length(arr); i++) {
                        _cleanup_error_ sp_error *e = NULL;
                        json_object *ws = json_object_array_get_idx(arr, i);
                        pr_wk_session ses;
                        (void)pr_msg_decode(&pr_wk_session_schema, ws, &ses, NULL); /* the list's decode checked it */
                        json_object_array_add(ids, json_object_new_string(ses.id));
                        if (record(c->api, c->who.tenant_id, ws, &e) < 0)
                                sp_log_warn_kv(SP_KV("sandbox_id", sandbox_id), "recording the worker's sessions: %s",
                                               e->message);
                }
                /* What the worker does not have it lost, or never started (as in GET) — but only a
                 * record older than this list can be: one that became running (or was made) while the
                 * list was on its way is not in it, and failing it let a racing create past its
                 * sandbox's sessions_per_sandbox (integration.cp_quotas). A list takes at most the
                 * worker timeout: twice that is the margin. */
                char grace[24];
                snprintf(grace, sizeof(grace), "%lld", (long long)(2 * c->api->cfg.worker_timeout_ms));
                const char *params[] = {c->who.tenant_id, sandbox_id, worker_id, sp_json_str(ids), grace};
                (void)cp_db_exec(c->api->db,
                                 "UPDATE sessions SET state = 'failed', error = 'its worker no longer has it', "
                                 "ended_at = coalesce(ended_at, now()), updated_at = now() WHERE tenant_id = $1 "
                                 "AND sandbox_id = $2 AND worker_id = $3 AND state NOT IN ('exited', 'failed') "
                                 "AND NOT $4::jsonb ? id AND updated_at < now() - "
                                 "$5::integer * interval '1 millisecond'",
                                 5, params, NULL, NULL);
        }
}

static void on_list(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        list_ctx *x = userdata;
        sync_sessions(c, x->sandbox_id, x->worker_id, resp, err);
        list_answer(c, x);
        free(x);
}

void cp__h_session_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        list_ctx *x = calloc(1, sizeof(*x));
        cp_sandbox_loc loc;
        if (!x) {
                cp__failf(c, SP_E_LIMIT, "out of memory");
                return;
        }
        if (cp_req_session_list_query(sp_http_request_query(c->req, "limit"), sp_http_request_query(c->req, "cursor"),
                                      sp_http_request_query(c->req, "tag"), &x->q, &e) < 0 ||
            cp__sandbox_locate(c, sp_http_request_param(c->req, "id"), false, &loc, &e) < 0) {
                cp__fail(c, e);
                free(x);
                return;
        }
        snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", loc.id);
        snprintf(x->worker_id, sizeof(x->worker_id), "%s", loc.worker_id);
        /* Unfinished sessions on a reachable worker are asked about first, in one call. */
        const char *params[] = {c->who.tenant_id, loc.id, loc.worker_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        bool ask = loc.worker_id[0] && loc.reachable &&
                   cp_db_exec(c->api->db,
                              "SELECT 1 FROM sessions WHERE tenant_id = $1 AND sandbox_id = $2 AND worker_id = $3 "
                              "AND state NOT IN ('exited', 'failed') LIMIT 1",
                              3, params, &res, NULL) == 0 &&
                   PQntuples(res) == 1;
        if (!ask) {
                list_answer(c, x);
                free(x);
                return;
        }
        _cleanup_json_ json_object *req =
                pr_msg_encode(&pr_wk_list_sessions_schema, &(pr_wk_list_sessions){.sandbox_id = loc.id});
        cp__worker_call(c, loc.worker_id, loc.address, "ListSessions", req, on_list, x);
}

/* ---- signal, kill ---- */

typedef struct act_ctx {
        char id[SP_ID_MAX];
        char sandbox_id[SP_ID_MAX];
        char action[24]; /* audit action */
        int signal; /* 0 for kill */
} act_ctx;

static void on_act(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        act_ctx *x = userdata;
        _cleanup_error_ sp_error *e = NULL;
        if (err) {
                if (err->code == SP_E_NOT_FOUND)
                        cp__failf(c, SP_E_CONFLICT, "session %s is no longer on its worker", x->id);
                else
                        cp__fail_worker(c, err);
                free(x);
                return;
        }
        _cleanup_json_ json_object *detail = json_object_new_object();
        if (x->signal)
                json_object_object_add(detail, "signal", json_object_new_int(x->signal));
        if (cp__audit(c, x->action, x->id, detail, &e) < 0) {
                /* The signal went out; its record did not: say so rather than claim success. */
                cp__fail(c, e);
                free(x);
                return;
        }
        cp__sandbox_touch(c->api, x->sandbox_id);
        get_answer(c, x->id, -1);
        free(x);
}

static void act(cp_call *c, int signal)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = sp_http_request_param(c->req, "id");
        session_row s = {0};
        if (load(c->api, c->who.tenant_id, id, &s, &e) < 0) {
                row_free(&s);
                cp__fail(c, e);
                return;
        }
        if (finished(s.state))
                sp_error_set(&e, SP_E_CONFLICT, "session %s has %s", s.id, s.state);
        else if (!s.sandbox_running)
                sp_error_set(&e, SP_E_CONFLICT, "session %s: its sandbox %s is not running", s.id, s.sandbox_id);
        else if (!s.worker_id[0] || !s.reachable)
                sp_error_set(&e, SP_E_UNAVAILABLE, "session %s: its worker is unreachable; retry later", s.id);
        act_ctx *x = e ? NULL : calloc(1, sizeof(*x));
        if (!x) {
                row_free(&s);
                if (!e)
                        sp_error_set(&e, SP_E_LIMIT, "out of memory");
                cp__fail(c, e);
                return;
        }
        snprintf(x->id, sizeof(x->id), "%s", s.id);
        snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", s.sandbox_id);
        snprintf(x->action, sizeof(x->action), signal ? "session.signal" : "session.kill");
        x->signal = signal;
        _cleanup_json_ json_object *req =
                signal ? pr_msg_encode(&pr_wk_signal_session_schema,
                                       &(pr_wk_signal_session){.session_id = s.id, .signal = signal})
                       : pr_msg_encode(&pr_wk_session_ref_schema, &(pr_wk_session_ref){.session_id = s.id});
        cp__worker_call(c, s.worker_id, s.address, signal ? "SignalSession" : "KillSession", req, on_act, x);
        row_free(&s);
}

void cp__h_session_signal(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        int sig = 0;
        if (cp_req_signal(c->body, c->body_len, &sig, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        act(c, sig);
}

void cp__h_session_kill(cp_call *c)
{
        if (cp__body_none(c) < 0)
                return;
        act(c, 0);
}

/* ---- a new token ---- */

void cp__h_session_token(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_token_req r;
        if (cp_req_session_token(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        session_row s = {0};
        _cleanup_json_ json_object *out = json_object_new_object();
        _cleanup_json_ json_object *detail = json_object_new_object();
        const char *scope = r.scope[0] ? r.scope : NULL;
        int64_t ttl = r.ttl_s ? r.ttl_s : c->api->cfg.attach_token_ttl_s;
        int rc = load(c->api, c->who.tenant_id, sp_http_request_param(c->req, "id"), &s, &e);
        if (rc == 0 && !s.worker_id[0])
                rc = sp_error_set(&e, SP_E_CONFLICT, "session %s has no worker", s.id);
        if (rc == 0) {
                if (!scope)
                        scope = s.write_default ? "write" : "read";
                json_object_object_add(detail, "scope", json_object_new_string(scope));
                json_object_object_add(detail, "ttl_s", json_object_new_int64(ttl));
                rc = add_token(c, &s, scope, ttl, out, &e);
        }
        if (rc == 0)
                rc = cp__audit(c, "session.token", s.id, detail, &e);
        row_free(&s);
        cp_token_req_free(&r);
        if (rc < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply(c, 200, out);
}
