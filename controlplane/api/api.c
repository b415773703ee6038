/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The API's core: dispatch with authentication, replies with metrics and
 * logs, mutations in one transaction with their idempotency and audit
 * records, and long-polling on operations woken by LISTEN space_op_done.
 */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "store/keyring.h"
#include "store/tokenkeys.h"

/* Latency bucket upper bounds, seconds (Prometheus histogram). */
const double cp__latency_bounds[CP_LATENCY_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                       0.1,   0.25,   0.5,   1,    2.5,   10};

struct cp_waiter {
        cp_waiter *next;
        cp_call *call;
        char op_id[SP_ID_MAX];
        int64_t deadline_us;
};

static void record(cp_call *c, int status)
{
        if (!c->rc || !c->api)
                return;
        cp__audit_answer(c, status);
        cp_route_stats *st = &c->api->stats[c->rc->index];
        double s = (double)(sp_now_mono_us() - c->start_us) / 1e6;
        int cls = status / 100;
        if (cls >= 1 && cls <= 5)
                st->count[cls]++;
        for (int i = 0; i < CP_LATENCY_BUCKETS; i++)
                if (s <= cp__latency_bounds[i])
                        st->buckets[i]++;
        st->total++;
        st->sum_s += s;
        if (status == 503)
                c->api->unavailable_total++;
        sp_log_level lvl = status >= 500 ? SP_LOG_WARN : SP_LOG_DEBUG;
        char code[8];
        snprintf(code, sizeof(code), "%d", status);
        sp_log_kv(lvl,
                  SP_KV("request_id", sp_http_request_id(c->req), "method", sp_http_request_method(c->req), "path",
                        sp_http_request_path(c->req), "status", code),
                  "%s %s -> %d (%.1f ms)", sp_http_request_method(c->req), sp_http_request_path(c->req), status,
                  s * 1000);
}

static void call_done(cp_call *c)
{
        sp_http_request_unref(c->req);
        free(c);
}

void cp__reply(cp_call *c, int status, json_object *obj)
{
        record(c, status);
        if (obj)
                sp_http_reply_json(c->req, status, obj);
        else
                sp_http_reply(c->req, status, NULL, "", 0);
        call_done(c);
}

void cp__reply_raw(cp_call *c, int status, const char *content_type, const char *body, size_t len)
{
        record(c, status);
        sp_http_reply(c->req, status, content_type, body, len);
        call_done(c);
}

void cp__fail(cp_call *c, const sp_error *e)
{
        sp_error internal = {SP_E_INTERNAL, 0, (char *)"internal error"};
        if (!e)
                e = &internal;
        c->fail_code = sp_errc_name(e->code);
        int status = sp_errc_http_status(e->code);
        if (e->code == SP_E_INTERNAL || e->code == SP_E_IO) {
                /* Details of internal failures go to the log, not to the client. */
                sp_log_kv(SP_LOG_ERROR, SP_KV("request_id", sp_http_request_id(c->req)), "%s", e->message);
                sp_error shown = {e->code, 0, (char *)"internal error"};
                record(c, status);
                sp_http_reply_error(c->req, &shown);
                call_done(c);
                return;
        }
        record(c, status);
        sp_http_reply_error(c->req, e);
        call_done(c);
}

void cp__failf(cp_call *c, sp_errc code, const char *fmt, ...)
{
        _cleanup_error_ sp_error *e = NULL;
        va_list ap;
        va_start(ap, fmt);
        sp_error_setv(&e, code, 0, fmt, ap);
        va_end(ap);
        cp__fail(c, e);
}

/* ---- authentication and dispatch ---- */

static void dispatch(sp_http_request *req, void *userdata)
{
        cp_route_ctx *rc = userdata;
        cp_call *c = calloc(1, sizeof(*c));
        if (!c) {
                sp_http_reply_errorf(req, SP_E_LIMIT, "out of memory");
                return;
        }
        c->api = rc->api;
        c->req = sp_http_request_ref(req);
        c->body = sp_http_request_body(req, &c->body_len);
        c->rc = rc;
        c->start_us = sp_now_mono_us();
        if (!c->api) {
                cp__failf(c, SP_E_UNAVAILABLE, "the API is not serving");
                return;
        }
        if (rc->route->auth != CP_AUTH_NONE) {
                const char *h = sp_http_request_header(req, "Authorization");
                if (!h || strncasecmp(h, "Bearer ", 7) != 0) {
                        cp__audit_login_failure(c, NULL);
                        sp_http_response_header(req, "WWW-Authenticate", "Bearer");
                        cp__failf(c, SP_E_UNAUTHENTICATED, "missing API key: send Authorization: Bearer <key>");
                        return;
                }
                _cleanup_error_ sp_error *e = NULL;
                cp_apikey_denial denial;
                if (cp_apikey_verify(c->api->db, h + 7, &c->who, &denial, &e) < 0) {
                        if (e->code == SP_E_UNAUTHENTICATED) {
                                cp__audit_login_failure(c, &denial);
                                sp_http_response_header(req, "WWW-Authenticate", "Bearer");
                        }
                        cp__fail(c, e);
                        return;
                }
                /* Rate limits first: a refusal (recorded in the audit log) costs the caller its rate too. */
                if (cp__rate_admit(c) < 0)
                        return;
                if (rc->route->auth == CP_AUTH_ADMIN && !c->who.admin) {
                        cp__failf(c, SP_E_PERMISSION, "this route needs an admin API key");
                        return;
                }
        }
        rc->route->handler(c);
}

int cp_api_register_routes(sp_http_server *srv, cp_api *api, sp_error **err)
{
        static cp_route_ctx listing[CP_API_MAX_ROUTES];
        for (size_t i = 0; cp_api_routes[i].method; i++) {
                if (i >= CP_API_MAX_ROUTES)
                        return sp_error_set(err, SP_E_LIMIT, "more than %d routes", CP_API_MAX_ROUTES);
                cp_route_ctx *rc = api ? &api->ctx[i] : &listing[i];
                rc->api = api;
                rc->route = &cp_api_routes[i];
                rc->index = i;
                sp_http_route_opts opts = {.max_body = cp_api_routes[i].max_body};
                if (sp_http_route_ex(srv, cp_api_routes[i].method, cp_api_routes[i].pattern, &opts, dispatch, rc, err) <
                    0)
                        return sp_error_wrap(err, "route %s %s", cp_api_routes[i].method, cp_api_routes[i].pattern);
        }
        return 0;
}

/* ---- queries ---- */

int cp__query_json(cp_api *api, const char *sql, int nparams, const char *const *params, const char *not_found_msg,
                   json_object **ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(api->db, sql, nparams, params, &res, err) < 0)
                return -(int)(*err)->code;
        if (PQntuples(res) < 1 || PQgetisnull(res, 0, 0))
                return sp_error_set(err, SP_E_NOT_FOUND, "%s", not_found_msg ? not_found_msg : "not found");
        const char *v = PQgetvalue(res, 0, 0);
        return sp_json_parse(v, strlen(v), ret, err);
}

/* ---- mutations ---- */

/* What identifies a request under its Idempotency-Key (kept a day). A
 * secret's create holds its value: its digest is keyed (HMAC, with a key
 * derived from the cluster key, which is not in the database), so that the
 * table does not let whoever holds the database confirm guessed values. */
static void request_hash(cp_call *c, char out[65])
{
        const char *m = sp_http_request_method(c->req), *p = sp_http_request_path(c->req);
        unsigned char md[32] = {0};
        const cp_keyring *k = c->api->cfg.keyring;
        const uint8_t *ck = k && strcmp(p, "/v1/secrets") == 0 ? cp_keyring_key(k, cp_keyring_primary(k)) : NULL;
        if (ck) {
                unsigned char mac_key[32];
                unsigned int ml = 0;
                EVP_MD_CTX *d = EVP_MD_CTX_new();
                bool ok = d && EVP_DigestInit_ex(d, EVP_sha256(), NULL) == 1 &&
                          EVP_DigestUpdate(d, "space idempotency", 18) == 1 && EVP_DigestUpdate(d, ck, 32) == 1 &&
                          EVP_DigestFinal_ex(d, mac_key, NULL) == 1;
                EVP_MD_CTX_free(d);
                _cleanup_buf_ sp_buf msg = SP_BUF_INIT;
                sp_buf_append(&msg, m, strlen(m) + 1, NULL);
                sp_buf_append(&msg, p, strlen(p) + 1, NULL);
                sp_buf_append(&msg, c->body, c->body_len, NULL);
                if (ok)
                        HMAC(EVP_sha256(), mac_key, sizeof(mac_key), (const unsigned char *)msg.data, msg.len, md, &ml);
                OPENSSL_cleanse(mac_key, sizeof(mac_key));
                if (msg.data)
                        OPENSSL_cleanse(msg.data, msg.len);
        } else {
                EVP_MD_CTX *h = EVP_MD_CTX_new();
                if (h && EVP_DigestInit_ex(h, EVP_sha256(), NULL) == 1) {
                        EVP_DigestUpdate(h, m, strlen(m) + 1);
                        EVP_DigestUpdate(h, p, strlen(p) + 1);
                        EVP_DigestUpdate(h, c->body, c->body_len);
                        EVP_DigestFinal_ex(h, md, NULL);
                }
                EVP_MD_CTX_free(h);
        }
        static const char hex[] = "0123456789abcdef";
        for (int i = 0; i < 32; i++) {
                out[2 * i] = hex[md[i] >> 4];
                out[2 * i + 1] = hex[md[i] & 15];
        }
        out[64] = '\0';
}

/* Opens the mutation's transaction and claims c's Idempotency-Key (if it has
 * one) with a record of (status, body). Returns 0 when claimed (or there is
 * no key), 1 when answered already (an error), 2 when an earlier request with
 * the same key and body holds it: *ret_prev has its (status, body) and no
 * transaction is open. */
static int claim_key(cp_call *c, int status, const char *body, PGresult **ret_prev)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *key = sp_http_request_header(c->req, "Idempotency-Key");
        if (key && !cp_req_idempotency_key_valid(key)) {
                cp__failf(c, SP_E_INVALID, "Idempotency-Key must be 1-255 printable ASCII characters");
                return 1;
        }
        if (cp_db_begin(c->api->db, &e) < 0) {
                cp__fail(c, e);
                return 1;
        }
        c->in_txn = true;
        if (!key)
                return 0;
        c->idem_key = key;
        request_hash(c, c->idem_hash);
        char hashlit[70], st[16];
        snprintf(hashlit, sizeof(hashlit), "\\x%s", c->idem_hash);
        snprintf(st, sizeof(st), "%d", status);
        const char *params[] = {c->who.tenant_id, key, hashlit, c->rc->route->pattern, st, body};
        _cleanup_pgresult_ PGresult *res = NULL;
        /* ON CONFLICT waits for a concurrent holder of the key to finish: after it
         * commits we read its answer, after it rolls back we insert ours. */
        if (cp_db_exec(c->api->db,
                       "INSERT INTO idempotency_keys (tenant_id, key, request_hash, response_status, response_body, "
                       "route) VALUES ($1, $2, $3::bytea, $5::integer, $6::jsonb, $4) ON CONFLICT DO NOTHING "
                       "RETURNING 1",
                       6, params, &res, &e) < 0) {
                cp__mutation_abort(c, e);
                return 1;
        }
        if (PQntuples(res) == 1)
                return 0;
        cp_db_rollback(c->api->db);
        c->in_txn = false;
        cp__audit_txn_end(c, false);
        _cleanup_pgresult_ PGresult *prev = NULL;
        const char *p2[] = {c->who.tenant_id, key};
        if (cp_db_exec(c->api->db,
                       "SELECT encode(request_hash, 'hex'), response_status, response_body::text FROM idempotency_keys "
                       "WHERE tenant_id = $1 AND key = $2",
                       2, p2, &prev, &e) < 0) {
                cp__fail(c, e);
                return 1;
        }
        if (PQntuples(prev) != 1) {
                cp__failf(c, SP_E_UNAVAILABLE, "Idempotency-Key is being used by a request that did not finish; retry");
                return 1;
        }
        if (strcmp(PQgetvalue(prev, 0, 0), c->idem_hash) != 0) {
                cp__failf(c, SP_E_CONFLICT, "Idempotency-Key was already used for a different request");
                return 1;
        }
        *ret_prev = TAKE_PTR(prev);
        return 2;
}

/* Answers c with the stored answer of an earlier request. */
static void replay(cp_call *c, PGresult *prev)
{
        int status = atoi(PQgetvalue(prev, 0, 1));
        const char *body = PQgetvalue(prev, 0, 2);
        c->replayed = true;
        sp_http_response_header(c->req, "Idempotent-Replayed", "true");
        cp__reply_raw(c, status, status == 204 ? NULL : "application/json", status == 204 ? "" : body,
                      status == 204 ? 0 : strlen(body));
}

void cp__reply_page(cp_call *c, PGresult *res, int64_t limit, const char *key, const char *kind)
{
        cp__reply_page_each(c, res, limit, key, kind, NULL);
}

void cp__reply_page_each(cp_call *c, PGresult *res, int64_t limit, const char *key, const char *kind,
                         void (*each)(cp_api *api, json_object *o))
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object *arr = json_object_new_array();
        json_object_object_add(out, key, arr);
        int n = PQntuples(res);
        int shown = n > limit ? (int)limit : n;
        for (int i = 0; i < shown; i++) {
                json_object *o = NULL;
                const char *v = PQgetvalue(res, i, 0);
                if (sp_json_parse(v, strlen(v), &o, &e) < 0) {
                        cp__fail(c, e);
                        return;
                }
                if (each)
                        each(c->api, o);
                json_object_array_add(arr, o);
        }
        json_object *next = NULL;
        if (n > limit) {
                char cur[256];
                if (cp_cursor_encode_for(kind, PQgetvalue(res, shown - 1, 1), PQgetvalue(res, shown - 1, 2), cur,
                                         sizeof(cur), &e) < 0) {
                        cp__fail(c, e);
                        return;
                }
                next = json_object_new_string(cur);
        }
        json_object_object_add(out, "next_cursor", next);
        cp__reply(c, 200, out);
}

void cp__reply_wrapped(cp_call *c, int r, const char *key, json_object *v, const sp_error *e)
{
        if (r < 0) {
                cp__fail(c, e);
                return;
        }
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object_object_add(out, key, json_object_get(v));
        cp__reply(c, 200, out);
}

int cp__body_none(cp_call *c)
{
        if (c->body_len == 0)
                return 0;
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *o = NULL;
        static const char *const none[] = {NULL};
        if (cp_req_body_object(c->body, c->body_len, &o, &e) < 0 || sp_json_check_fields(o, none, &e) < 0) {
                cp__fail(c, e);
                return -1;
        }
        return 0;
}

int cp__mutation_begin(cp_call *c)
{
        _cleanup_pgresult_ PGresult *prev = NULL;
        int r = claim_key(c, 0, "{}", &prev);
        if (r == 2)
                replay(c, prev);
        return r == 0 ? 0 : 1;
}

int cp__mutation_begin_for(cp_call *c, const char *resource_id, char ret_first[static SP_ID_MAX])
{
        _cleanup_pgresult_ PGresult *prev = NULL;
        _cleanup_json_ json_object *rec = json_object_new_object();
        json_object_object_add(rec, "resource_id", json_object_new_string(resource_id));
        int r = claim_key(c, 0, sp_json_str(rec), &prev);
        if (r != 2)
                return r;
        _cleanup_json_ json_object *first = NULL;
        const char *body = PQgetvalue(prev, 0, 2);
        const char *id = NULL;
        if (atoi(PQgetvalue(prev, 0, 1)) != 0 || sp_json_parse(body, strlen(body), &first, NULL) < 0 ||
            sp_json_get_string(first, "resource_id", true, SP_ID_MAX - 1, &id, NULL) < 0) {
                replay(c, prev);
                return 1;
        }
        snprintf(ret_first, SP_ID_MAX, "%s", id);
        return 2;
}

void cp__mutation_abort(cp_call *c, const sp_error *e)
{
        if (c->in_txn)
                cp_db_rollback(c->api->db);
        c->in_txn = false;
        cp__audit_txn_end(c, false);
        cp__fail(c, e);
}

/* Stores obj as the Idempotency-Key's answer (if any) and commits. Returns
 * 0, or < 0 after answering c with the error. */
static int commit_answer(cp_call *c, int status, json_object *obj)
{
        _cleanup_error_ sp_error *e = NULL;
        if (c->idem_key) {
                _cleanup_buf_ sp_buf secret_replay = SP_BUF_INIT;
                if (c->idem_secret &&
                    sp_error_shape_encode(&secret_replay, SP_E_CONFLICT,
                                          "this request already succeeded; the secret it created is shown only once",
                                          &e) < 0) {
                        cp__mutation_abort(c, e);
                        return -1;
                }
                char st[16];
                snprintf(st, sizeof(st), "%d", c->idem_secret ? sp_errc_http_status(SP_E_CONFLICT) : status);
                const char *params[] = {c->who.tenant_id, c->idem_key, st,
                                        c->idem_secret ? secret_replay.data
                                        : obj          ? sp_json_str(obj)
                                                       : "{}"};
                if (cp_db_exec(c->api->db,
                               "UPDATE idempotency_keys SET response_status = $3::integer, response_body = $4::jsonb "
                               "WHERE tenant_id = $1 AND key = $2",
                               4, params, NULL, &e) < 0) {
                        cp__mutation_abort(c, e);
                        return -1;
                }
        }
        c->in_txn = false;
        if (cp_db_commit(c->api->db, &e) < 0) {
                cp__audit_txn_end(c, false);
                cp__fail(c, e);
                return -1;
        }
        cp__audit_txn_end(c, true);
        return 0;
}

void cp__mutation_commit(cp_call *c, int status, json_object *obj)
{
        if (commit_answer(c, status, obj) == 0)
                cp__reply(c, status, obj);
}

int cp__mutation_commit_keep(cp_call *c, int status, json_object *obj)
{
        return commit_answer(c, status, obj);
}

int cp__mutation_commit_quiet(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        c->in_txn = false;
        if (cp_db_commit(c->api->db, &e) < 0) {
                cp__audit_txn_end(c, false);
                cp__fail(c, e);
                return -1;
        }
        cp__audit_txn_end(c, true);
        return 0;
}

void cp__mutation_forget(cp_call *c)
{
        if (!c->idem_key)
                return;
        const char *params[] = {c->who.tenant_id, c->idem_key};
        (void)cp_db_exec(c->api->db,
                         "DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND response_status = 0", 2,
                         params, NULL, NULL);
}

/* ---- long-polling ---- */

/* Unlinks and frees the waiter at *link, giving back its share. */
static void drop_waiter(cp_api *api, cp_waiter **link)
{
        cp_waiter *w = *link;
        *link = w->next;
        sp_shares_give(api->waiter_shares, w->call->who.tenant_id);
        free(w);
}

static void answer_waiter(cp_api *api, cp_waiter **link)
{
        cp_call *call = (*link)->call;
        char op_id[SP_ID_MAX];
        snprintf(op_id, sizeof(op_id), "%s", (*link)->op_id);
        drop_waiter(api, link);
        const char *params[] = {op_id, call->who.tenant_id};
        _cleanup_json_ json_object *op = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (cp__query_json(api, "SELECT api_operation(o) FROM operations o WHERE o.id = $1 AND o.tenant_id = $2", 2,
                           params, "operation not found", &op, &e) < 0) {
                cp__fail(call, e);
                return;
        }
        cp__operation_ingress_urls(api, op);
        cp__reply(call, 200, op);
}

/* The ids among the waiters' operations (those of op_id only, when given)
 * that have finished: one query for all of them, whatever their number.
 * NULL when the database is down (every waiter is answered then: 503). */
static json_object *finished_ops(cp_api *api, const char *op_id, bool *db_down)
{
        _cleanup_json_ json_object *ids = json_object_new_array();
        for (cp_waiter *w = api->waiters; w; w = w->next)
                if (!op_id || strcmp(op_id, w->op_id) == 0)
                        json_object_array_add(ids, json_object_new_string(w->op_id));
        *db_down = false;
        if (json_object_array_length(ids) == 0)
                return NULL;
        const char *params[] = {json_object_to_json_string_ext(ids, JSON_C_TO_STRING_PLAIN)};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(api->db,
                       "SELECT id FROM operations WHERE id IN (SELECT jsonb_array_elements_text($1::jsonb)) "
                       "AND state IN ('succeeded', 'failed')",
                       1, params, &res, NULL) < 0) {
                *db_down = true;
                return NULL;
        }
        json_object *done = json_object_new_object();
        for (int i = 0; i < PQntuples(res); i++)
                json_object_object_add(done, PQgetvalue(res, i, 0), NULL);
        return done;
}

void cp__waiters_check(cp_api *api, const char *op_id)
{
        int64_t now = sp_now_mono_us();
        /* Gone, closed or past the deadline: no database needed. */
        for (cp_waiter **link = &api->waiters; *link;) {
                cp_waiter *w = *link;
                if (!sp_http_request_connected(w->call->req)) {
                        cp_call *call = w->call;
                        drop_waiter(api, link);
                        call_done(call);
                } else if (w->deadline_us <= now || sp_http_request_peer_closed(w->call->req)) {
                        answer_waiter(api, link);
                } else {
                        link = &w->next;
                }
        }
        bool db_down = false;
        _cleanup_json_ json_object *done = finished_ops(api, op_id, &db_down);
        if (!done && !db_down)
                return;
        for (cp_waiter **link = &api->waiters; *link;) {
                cp_waiter *w = *link;
                bool mine = !op_id || strcmp(op_id, w->op_id) == 0;
                if (mine && (db_down || json_object_object_get_ex(done, w->op_id, NULL)))
                        answer_waiter(api, link);
                else
                        link = &w->next;
        }
}

int cp__wait_operation(cp_call *c, const char *op_id, int64_t deadline_us)
{
        cp_api *api = c->api;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_shares_take(api->waiter_shares, c->who.tenant_id, "long-polls", &e) < 0) {
                sp_log_debug_kv(SP_KV("tenant_id", c->who.tenant_id), "long-poll answered at once: %s", e->message);
                return -1;
        }
        cp_waiter *w = calloc(1, sizeof(*w));
        if (!w) {
                sp_shares_give(api->waiter_shares, c->who.tenant_id);
                return -1;
        }
        w->call = c;
        snprintf(w->op_id, sizeof(w->op_id), "%s", op_id);
        w->deadline_us = deadline_us;
        w->next = api->waiters;
        api->waiters = w;
        return 0;
}

static void listen_setup(cp_api *api);

static void on_listen(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        cp_api *api = arg;
        PGconn *conn = cp_db_conn(api->listen_db, NULL);
        if (!conn || !PQconsumeInput(conn) || api->listen_generation != cp_db_generation(api->listen_db)) {
                /* Lost (or replaced by a connection that does not LISTEN): the
                 * tick listens again and re-checks every waiter. */
                if (api->listen_ev) {
                        event_free(api->listen_ev);
                        api->listen_ev = NULL;
                }
                return;
        }
        PGnotify *n;
        while ((n = PQnotifies(conn))) {
                cp__waiters_check(api, n->extra);
                PQfreemem(n);
        }
}

static void listen_setup(cp_api *api)
{
        if (api->listen_ev && cp_db_connected(api->listen_db) &&
            api->listen_generation == cp_db_generation(api->listen_db))
                return;
        if (api->listen_ev) {
                event_free(api->listen_ev);
                api->listen_ev = NULL;
        }
        _cleanup_error_ sp_error *e = NULL;
        if (cp_db_exec(api->listen_db, "LISTEN space_op_done", 0, NULL, NULL, &e) < 0)
                return;
        PGconn *conn = cp_db_conn(api->listen_db, NULL);
        if (!conn)
                return;
        api->listen_generation = cp_db_generation(api->listen_db);
        api->listen_ev = event_new(api->base, PQsocket(conn), EV_READ | EV_PERSIST, on_listen, api);
        if (api->listen_ev)
                event_add(api->listen_ev, NULL);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        cp_api *api = arg;
        listen_setup(api);
        /* The backstop for a notification lost while the listener reconnected,
         * and the deadlines. */
        if (api->waiters)
                cp__waiters_check(api, NULL);
}

bool cp_api_ingress_domain_valid(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > CP_INGRESS_DOMAIN_MAX)
                return false;
        for (const char *label = s;;) {
                size_t len = strcspn(label, ".");
                if (len == 0 || len > 63 || label[0] == '-' || label[len - 1] == '-' ||
                    strspn(label, "abcdefghijklmnopqrstuvwxyz0123456789-") < len)
                        return false;
                if (!label[len])
                        return true;
                label += len + 1;
        }
}

/* The fixed parts of the host-form ingress URL (cp__ingress_urls): the
 * scheme and the port of the data plane's URL dp (dplen bytes, checked to
 * be http:// or https://), around the host "{port}-<id>.<domain>" — the
 * data plane is reached there as at its URL, through a wildcard name. */
static int ingress_setup(cp_api *api, const char *dp, size_t dplen, const char *domain, sp_error **err)
{
        const char *sep = strstr(dp, "://");
        const char *host = sep + 3;
        size_t alen = strcspn(host, "/");
        if (host + alen > dp + dplen)
                alen = (size_t)(dp + dplen - host);
        const char *at = memrchr(host, '@', alen);
        if (at) {
                alen -= (size_t)(at + 1 - host);
                host = at + 1;
        }
        /* The port: after the last ':' that is not inside an [IPv6] literal. */
        const char *close = host[0] == '[' ? memchr(host, ']', alen) : NULL;
        const char *from = close ? close + 1 : host;
        const char *colon = memrchr(from, ':', alen - (size_t)(from - host));
        size_t plen = colon ? alen - (size_t)(colon + 1 - host) : 0;
        if ((host[0] == '[' && !close) || (colon && (plen == 0 || plen > 5 || strspn(colon + 1, "0123456789") < plen)))
                return sp_error_set(err, SP_E_INVALID, "the data plane's URL has a malformed host or port");
        if (asprintf(&api->ingress_host_prefix, "%.*s://{port}-", (int)(sep - dp), dp) < 0) {
                api->ingress_host_prefix = NULL;
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (asprintf(&api->ingress_host_suffix, ".%s%s%.*s/", domain, colon ? ":" : "", (int)plen,
                     colon ? colon + 1 : "") < 0) {
                api->ingress_host_suffix = NULL;
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        return 0;
}

cp_api *cp_api_new(struct event_base *base, sp_http_server *srv, const cp_api_config *cfg, sp_error **err)
{
        cp_api *api = calloc(1, sizeof(*api));
        if (!api) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        api->base = base;
        api->cfg = *cfg;
        if (api->cfg.default_idle_timeout_s == 0)
                api->cfg.default_idle_timeout_s = CP_DEFAULT_IDLE_TIMEOUT_S;
        if (api->cfg.operation_deadline_s == 0)
                api->cfg.operation_deadline_s = 600;
        if (!api->cfg.attach_token_ttl_s)
                api->cfg.attach_token_ttl_s = 3600;
        if (!api->cfg.worker_timeout_ms)
                api->cfg.worker_timeout_ms = 15000;
        if (!api->cfg.template_upload_max_bytes)
                api->cfg.template_upload_max_bytes = INT64_C(16) << 30;
        if (!api->cfg.tenant_template_bytes)
                api->cfg.tenant_template_bytes = INT64_C(64) << 30;
        if (!api->cfg.tenant_template_builds)
                api->cfg.tenant_template_builds = 4;
        if (!api->cfg.max_waiters)
                api->cfg.max_waiters = 1024;
        if (!api->cfg.audit_login_failures_per_s)
                api->cfg.audit_login_failures_per_s = 10;
        api->login_bucket.tokens = api->throttled_bucket.tokens = (double)api->cfg.audit_login_failures_per_s * 10;
        const char *dp = cfg->dataplane_url ? cfg->dataplane_url : "http://127.0.0.1:7071";
        size_t dplen = strlen(dp);
        while (dplen > 0 && dp[dplen - 1] == '/')
                dplen--;
        api->cfg.dataplane_url = NULL;
        api->cfg.debootstrap_mirror = NULL;
        api->cfg.worker_tls = NULL;
        if (api->cfg.attach_token_ttl_s < 1 || api->cfg.attach_token_ttl_s > CP_TOKEN_MAX_TTL_S) {
                sp_error_set(err, SP_E_INVALID, "the attachment tokens' lifetime must be 1 to %d s",
                             CP_TOKEN_MAX_TTL_S);
                goto fail;
        }
        if (api->cfg.worker_timeout_ms < 100 || api->cfg.worker_timeout_ms > 600000) {
                sp_error_set(err, SP_E_INVALID, "the deadline of worker calls must be 100 to 600000 ms");
                goto fail;
        }
        if ((strncmp(dp, "http://", 7) != 0 && strncmp(dp, "https://", 8) != 0) || dplen > 1024 ||
            strcspn(dp, " \t\r\n?#") < dplen) {
                sp_error_set(err, SP_E_INVALID, "the data plane's URL must be http:// or https:// without a query");
                goto fail;
        }
        const char *domain = cfg->ingress_domain ? cfg->ingress_domain : "localhost";
        if (!cp_api_ingress_domain_valid(domain)) {
                sp_error_set(err, SP_E_INVALID,
                             "the ingress domain must be a DNS name of at most %d bytes: lowercase letters, digits, "
                             "'-' and '.', labels of 1 to 63 not starting or ending with '-'",
                             CP_INGRESS_DOMAIN_MAX);
                goto fail;
        }
        if (cfg->debootstrap_mirror && *cfg->debootstrap_mirror) {
                if (!cp_req_mirror_valid(cfg->debootstrap_mirror) || strlen(cfg->debootstrap_mirror) > 2048) {
                        sp_error_set(err, SP_E_INVALID, "the debootstrap mirror must be an http:// or https:// URL");
                        goto fail;
                }
                if (!(api->debootstrap_mirror = strdup(cfg->debootstrap_mirror))) {
                        sp_error_set(err, SP_E_LIMIT, "out of memory");
                        goto fail;
                }
        }
        if (ingress_setup(api, dp, dplen, domain, err) < 0)
                goto fail;
        if (!(api->dataplane_url = strndup(dp, dplen)) ||
            !(api->workers = sp_rpc_pool_new(base, cfg->worker_tls, CP_FLEET_MAX_WORKER_CLIENTS, err))) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail;
        }
        int64_t quotas[CP_QUOTA_COUNT];
        for (int i = 0; i < CP_QUOTA_COUNT; i++)
                quotas[i] = cfg->quota_defaults ? cfg->quota_defaults[i] : CP_QUOTA_NONE;
        quotas[CP_QUOTA_TEMPLATE_BYTES] = api->cfg.tenant_template_bytes;
        cp_quota_defaults_json(quotas, api->quota_defaults);
        api->cfg.quota_defaults = NULL;
        if (api->cfg.rate_key_rps < 0 || api->cfg.rate_tenant_rps < 0 || api->cfg.rate_create_rps < 0 ||
            api->cfg.rate_key_burst < 0 || api->cfg.rate_tenant_burst < 0 || api->cfg.rate_create_burst < 0) {
                sp_error_set(err, SP_E_INVALID, "rate limits and their bursts must be 0 or more");
                goto fail;
        }
        if (!(api->rate = sp_ratelimit_new(CP_RATE_MAX_BUCKETS))) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail;
        }
        if (!(api->waiter_shares = sp_shares_new((size_t)api->cfg.max_waiters, 0))) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail;
        }
        if (cp_db_open(cfg->conninfo, &api->db, err) < 0 || cp_db_open(cfg->conninfo, &api->listen_db, err) < 0)
                goto fail;
        /* The worker that answers must be the one the control plane dials. */
        sp_rpc_pool_set_verify(api->workers, cp_fleet_verify_worker, api->db);
        listen_setup(api);
        struct timeval tv = {0, 250 * 1000};
        api->tick_ev = event_new(base, -1, EV_PERSIST, on_tick, api);
        if (!api->tick_ev || event_add(api->tick_ev, &tv) < 0) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail;
        }
        if (cp_api_register_routes(srv, api, err) < 0)
                goto fail;
        return api;
fail:
        cp_api_free(api);
        return NULL;
}

cp_api *cp_api_free(cp_api *api)
{
        if (!api)
                return NULL;
        while (api->waiters)
                answer_waiter(api, &api->waiters);
        /* Open worker calls fail now; their callbacks still use the database. */
        sp_rpc_pool_free(api->workers);
        sp_token_signer_free(api->signer);
        free(api->dataplane_url);
        free(api->ingress_host_prefix);
        free(api->ingress_host_suffix);
        free(api->debootstrap_mirror);
        if (api->listen_ev)
                event_free(api->listen_ev);
        if (api->tick_ev)
                event_free(api->tick_ev);
        cp_db_close(api->listen_db);
        cp_db_close(api->db);
        sp_shares_free(api->waiter_shares);
        sp_ratelimit_free(api->rate);
        free(api);
        return NULL;
}
