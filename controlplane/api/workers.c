/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The API's calls to workers (sessions and files): where a sandbox runs, one
 * RPC per request on the loop with the API's deadline, errors that say which
 * worker failed and how, and their metrics.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/log.h"

static const char *const failure_names[CP_WORKER_FAILURE_KINDS] = {"unreachable", "timeout", "error"};

void cp__token_worker_claims(cp_api *api, json_object *claims, const char *worker_id, const char *address)
{
        json_object_object_add(claims, "wkr", json_object_new_string(address));
        const char *params[] = {worker_id && *worker_id ? worker_id : NULL, address};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(api->db,
                       "SELECT name FROM workers WHERE ($1::text IS NOT NULL AND id = $1) "
                       "OR ($1::text IS NULL AND address = $2) "
                       "ORDER BY last_heartbeat DESC NULLS LAST LIMIT 1",
                       2, params, &res, NULL) == 0 &&
            PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
                json_object_object_add(claims, "wkn", json_object_new_string(PQgetvalue(res, 0, 0)));
}

int cp__sandbox_locate(cp_call *c, const char *id, bool need_running, cp_sandbox_loc *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        const char *params[] = {id, c->who.tenant_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        int r = cp_db_exec(c->api->db,
                           "SELECT s.id, s.observed_state, s.desired_state, s.worker_id, w.address, "
                           "coalesce(w.state <> 'unreachable', false) FROM sandboxes s "
                           "LEFT JOIN workers w ON w.id = s.worker_id "
                           "WHERE s.id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL",
                           2, params, &res, err);
        if (r < 0)
                return r;
        if (PQntuples(res) != 1)
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %.64s not found", id);
        snprintf(ret->id, sizeof(ret->id), "%s", PQgetvalue(res, 0, 0));
        snprintf(ret->state, sizeof(ret->state), "%s", PQgetvalue(res, 0, 1));
        snprintf(ret->desired, sizeof(ret->desired), "%s", PQgetvalue(res, 0, 2));
        snprintf(ret->worker_id, sizeof(ret->worker_id), "%s", PQgetvalue(res, 0, 3));
        snprintf(ret->address, sizeof(ret->address), "%s", PQgetvalue(res, 0, 4));
        ret->reachable = strcmp(PQgetvalue(res, 0, 5), "t") == 0;
        if (!need_running)
                return 0;
        if (strcmp(ret->state, "running") != 0)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is %s, not running", ret->id, ret->state);
        if (strcmp(ret->desired, "running") != 0)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is on its way to %s, not running", ret->id,
                                    ret->desired);
        if (!ret->worker_id[0])
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s has no worker", ret->id);
        if (!ret->reachable)
                return sp_error_set(err, SP_E_UNAVAILABLE, "sandbox %s: its worker %s is unreachable; retry later",
                                    ret->id, ret->worker_id);
        return 0;
}

void cp__sandbox_touch(cp_api *api, const char *id)
{
        const char *params[] = {id};
        (void)cp_db_exec(api->db, "UPDATE sandboxes SET last_active_at = now() WHERE id = $1", 1, params, NULL, NULL);
}

typedef struct worker_call {
        cp_call *c;
        cp_worker_done_fn done;
        void *userdata;
        char worker_id[SP_ID_MAX];
        char method[32];
        int64_t timeout_ms;
} worker_call;

/* Counts a failed call and says which worker failed and how into *said. */
static void worker_error(cp_api *api, const char *worker_id, const char *method, int64_t timeout_ms,
                         const char *request_id, const sp_error *err, sp_error **said)
{
        int kind = err->code == SP_E_UNAVAILABLE                        ? CP_WORKER_UNREACHABLE
                   : err->code == SP_E_TIMEOUT                          ? CP_WORKER_TIMEOUT
                   : err->code == SP_E_INTERNAL || err->code == SP_E_IO ? CP_WORKER_ERROR
                                                                        : -1;
        if (kind >= 0) {
                api->worker_failures_total[kind]++;
                sp_log_kv(SP_LOG_WARN, SP_KV("worker_id", worker_id, "request_id", request_id), "%s: %s", method,
                          err->message);
        }
        if (kind == CP_WORKER_UNREACHABLE)
                sp_error_set(said, err->code, "worker %s is unreachable: %s", worker_id, err->message);
        else if (kind == CP_WORKER_TIMEOUT)
                sp_error_set(said, err->code, "worker %s did not answer %s within %lld ms", worker_id, method,
                             (long long)timeout_ms);
        else
                sp_error_set(said, err->code, "%s", err->message);
}

static void on_answer(json_object *resp, const sp_error *err, void *userdata)
{
        worker_call *w = userdata;
        _cleanup_error_ sp_error *said = NULL;
        if (err)
                worker_error(w->c->api, w->worker_id, w->method, w->timeout_ms, sp_http_request_id(w->c->req), err,
                             &said);
        w->done(w->c, err ? NULL : resp, said, w->userdata);
        free(w);
}

void cp__worker_call(cp_call *c, const char *worker_id, const char *address, const char *method, json_object *req,
                     cp_worker_done_fn done, void *userdata)
{
        cp__worker_call_within(c, worker_id, address, method, req, c->api->cfg.worker_timeout_ms, done, userdata);
}

void cp__worker_call_within(cp_call *c, const char *worker_id, const char *address, const char *method,
                            json_object *req, int64_t timeout_ms, cp_worker_done_fn done, void *userdata)
{
        _cleanup_error_ sp_error *e = NULL;
        worker_call *w = calloc(1, sizeof(*w));
        if (!w) {
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                done(c, NULL, e, userdata);
                return;
        }
        *w = (worker_call){.c = c, .done = done, .userdata = userdata};
        snprintf(w->worker_id, sizeof(w->worker_id), "%s", worker_id);
        snprintf(w->method, sizeof(w->method), "%s", method);
        c->api->worker_calls_total++;
        sp_rpc_client *cli = NULL;
        if (!cp_fleet_address_ok(address))
                sp_error_set(&e, SP_E_INVALID, "worker %.64s has no usable address", worker_id);
        else {
                char key[CP_FLEET_WORKER_KEY_MAX];
                (void)cp_fleet_worker_key(c->api->db, worker_id, key);
                cli = sp_rpc_pool_get(c->api->workers, key, address, NULL, &e);
        }
        w->timeout_ms = timeout_ms > 0 && timeout_ms < c->api->cfg.worker_timeout_ms ? timeout_ms
                                                                                     : c->api->cfg.worker_timeout_ms;
        if (!cli || sp_rpc_client_call(cli, method, req, w->timeout_ms, on_answer, w, &e) < 0) {
                free(w);
                sp_error_wrap(&e, "worker %s", worker_id);
                done(c, NULL, e, userdata);
        }
}

struct cp_worker_stream {
        cp_api *api;
        const cp_worker_stream_ops *ops;
        void *userdata;
        char worker_id[SP_ID_MAX];
        char method[32];
        char request_id[64];
        int64_t timeout_ms;
};

static void stream_on_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *payload, size_t len, void *ud)
{
        (void)s;
        cp_worker_stream *w = ud;
        _cleanup_json_ json_object *msg = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (type != SP_RPC_FRAME_JSON)
                return; /* none of the streams the API reads carries bytes */
        if (sp_json_parse((const char *)payload, len, &msg, &e) < 0) {
                sp_log_kv(SP_LOG_WARN, SP_KV("worker_id", w->worker_id, "request_id", w->request_id),
                          "%s: a frame that is not JSON: %s", w->method, e->message);
                return;
        }
        w->ops->on_frame(w->api, msg, w->userdata);
}

static void stream_on_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        (void)trailer;
        cp_worker_stream *w = ud;
        _cleanup_error_ sp_error *said = NULL;
        if (err)
                worker_error(w->api, w->worker_id, w->method, w->timeout_ms, w->request_id, err, &said);
        w->ops->on_end(w->api, said, w->userdata);
        free(w);
}

int cp__worker_stream(cp_call *c, const char *worker_id, const char *address, const char *method, json_object *req,
                      const cp_worker_stream_ops *ops, void *userdata, sp_error **err)
{
        cp_worker_stream *w = calloc(1, sizeof(*w));
        if (!w)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *w = (cp_worker_stream){
                .api = c->api, .ops = ops, .userdata = userdata, .timeout_ms = c->api->cfg.worker_timeout_ms};
        snprintf(w->worker_id, sizeof(w->worker_id), "%s", worker_id);
        snprintf(w->method, sizeof(w->method), "%s", method);
        snprintf(w->request_id, sizeof(w->request_id), "%s",
                 sp_http_request_id(c->req) ? sp_http_request_id(c->req) : "");
        c->api->worker_calls_total++;
        static const sp_rpc_stream_ops sops = {.on_frame = stream_on_frame, .on_end = stream_on_end};
        sp_rpc_client *cli = NULL;
        if (!cp_fleet_address_ok(address))
                sp_error_set(err, SP_E_INVALID, "worker %.64s has no usable address", worker_id);
        else {
                char key[CP_FLEET_WORKER_KEY_MAX];
                (void)cp_fleet_worker_key(c->api->db, worker_id, key);
                cli = sp_rpc_pool_get(c->api->workers, key, address, NULL, err);
        }
        if (!cli || !sp_rpc_client_stream(cli, method, req, w->timeout_ms, &sops, w, err)) {
                free(w);
                return sp_error_wrap(err, "worker %s", worker_id);
        }
        return 0;
}

void cp__fail_worker(cp_call *c, const sp_error *e)
{
        if (!e || e->code != SP_E_TIMEOUT) {
                cp__fail(c, e);
                return;
        }
        /* A worker that does not answer in time is a gateway timeout, not the
         * 408 of a client that was too slow. */
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_error_shape_encode(&b, e->code, e->message, NULL) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply_raw(c, 504, "application/json", b.data, b.len);
}

void cp__worker_metrics(cp_api *api, sp_buf *b)
{
        sp_buf_appendf(b, NULL,
                       "# HELP space_sessions_created_total Command sessions started through this replica.\n"
                       "# TYPE space_sessions_created_total counter\nspace_sessions_created_total %llu\n"
                       "# HELP space_api_worker_calls_total Calls from the API to workers (sessions and files).\n"
                       "# TYPE space_api_worker_calls_total counter\nspace_api_worker_calls_total %llu\n"
                       "# HELP space_api_worker_call_failures_total Calls to workers that failed, by reason.\n"
                       "# TYPE space_api_worker_call_failures_total counter\n",
                       (unsigned long long)api->sessions_created_total, (unsigned long long)api->worker_calls_total);
        for (int i = 0; i < CP_WORKER_FAILURE_KINDS; i++)
                sp_buf_appendf(b, NULL, "space_api_worker_call_failures_total{reason=\"%s\"} %llu\n", failure_names[i],
                               (unsigned long long)api->worker_failures_total[i]);
}
