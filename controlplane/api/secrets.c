/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Secrets (docs/secrets.md): a tenant's credentials, write-only. A value is
 * sealed (store/envelope.h) before it reaches the database, and no answer,
 * log line, metric or error ever holds it: answers show the secret's name,
 * hosts, injection, env, limits and dates; the sandboxes given it hold a
 * placeholder, and only their workers get the value (store/secrets.h).
 *
 * Revoking (DELETE) keeps the row without its value and gives every live
 * sandbox that had it its bindings again without it (a new egress
 * generation), sent to their workers at once (api/egress.c,
 * cp__egress_push): the answer waits for them, and the controller sends
 * what a worker could not take (ctrl/reconcile.c).
 *
 * Without a key file (--secrets-key-file) every route here answers 503
 * naming the flag; the rest of the API works.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"
#include "store/secrets.h"

#define SECRETS_MAX 500 /* live secrets per tenant */
#define USAGE_SANDBOXES_MAX 50 /* sandboxes asked by one usage call */
#define USAGE_RECORDS_MAX 100 /* secret records asked of each */
#define USAGE_TIMEOUT_MS 5000
#define SECRET_NOT_FOUND "secret '%.64s' not found"

/* 503 (and true) when this replica has no key file. */
static bool unconfigured(cp_call *c)
{
        if (c->api->cfg.keyring)
                return false;
        cp__failf(c, SP_E_UNAVAILABLE,
                  "secrets are not configured on this control plane: start space-controlplane with "
                  "--secrets-key-file FILE (docs/secrets.md)");
        return true;
}

/* The live secret of c's tenant named name, as the API shows it. */
static int secret_answer(cp_call *c, const char *name, json_object **ret, sp_error **err)
{
        char msg[128];
        snprintf(msg, sizeof(msg), SECRET_NOT_FOUND, name);
        const char *params[] = {c->who.tenant_id, name};
        return cp__query_json(c->api,
                              "SELECT api_secret(s) FROM secrets s WHERE s.tenant_id = $1 AND s.name = $2 "
                              "AND s.deleted_at IS NULL",
                              2, params, msg, ret, err);
}

void cp__h_secret_create(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (unconfigured(c))
                return;
        cp_secret_create_req r;
        if (cp_req_secret_create(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        if (cp__mutation_begin(c)) {
                cp_secret_create_req_free(&r);
                return;
        }
        /* The request's bytes hold the value: wiped now that the
         * Idempotency-Key's hash of them is taken (the request is this
         * handler's until it answers). */
        sp_explicit_bzero((char *)c->body, c->body_len);
        char id[SP_ID_MAX];
        _cleanup_pgresult_ PGresult *n = NULL;
        _cleanup_json_ json_object *out = NULL, *detail = json_object_new_object();
        const char *params[] = {c->who.tenant_id, r.name, r.expires_at[0] ? r.expires_at : NULL};
        if (cp_db_exec(c->api->db,
                       "SELECT count(*), count(*) FILTER (WHERE name = $2), coalesce($3::timestamptz <= now(), false) "
                       "FROM secrets WHERE tenant_id = $1 AND deleted_at IS NULL",
                       3, params, &n, &e) < 0)
                goto abort;
        if (strcmp(PQgetvalue(n, 0, 1), "0") != 0) {
                sp_error_set(&e, SP_E_CONFLICT, "secret '%s' exists (DELETE /v1/secrets/%s revokes it)", r.name,
                             r.name);
                goto abort;
        }
        if (atoi(PQgetvalue(n, 0, 0)) >= SECRETS_MAX) {
                sp_error_set(&e, SP_E_LIMIT, "a tenant has at most %d secrets", SECRETS_MAX);
                goto abort;
        }
        if (strcmp(PQgetvalue(n, 0, 2), "t") == 0) {
                sp_error_set(&e, SP_E_INVALID, "expires_at is in the past");
                goto abort;
        }
        cp_secret_row row = {.id = id,
                             .tenant_id = c->who.tenant_id,
                             .name = r.name,
                             .hosts = r.hosts,
                             .inject = r.inject,
                             .env = r.env,
                             .rate_per_min = r.rate_per_min,
                             .expires_at = r.expires_at[0] ? r.expires_at : NULL};
        json_object_object_add(detail, "name", json_object_new_string(r.name));
        json_object_object_add(detail, "hosts", json_object_get(r.hosts));
        json_object_object_add(detail, "inject", json_object_get(r.inject));
        json_object_object_add(detail, "env", json_object_new_string(r.env));
        if (sp_id_new("sec", id, &e) < 0 ||
            cp_secret_insert(c->api->db, c->api->cfg.keyring, &row, r.value, r.value_len, &e) < 0)
                goto abort;
        if (cp__audit(c, "secret.create", id, detail, &e) < 0 || secret_answer(c, r.name, &out, &e) < 0)
                goto abort;
        cp_secret_create_req_free(&r);
        cp__mutation_commit(c, 201, out);
        return;
abort:
        cp_secret_create_req_free(&r);
        if (e && e->code == SP_E_CONFLICT && !strstr(e->message, "exists")) {
                /* Made by a concurrent request between the check and the insert. */
                sp_error_free(e);
                e = NULL;
                sp_error_set(&e, SP_E_CONFLICT, "secret '%s' exists", r.name);
        }
        cp__mutation_abort(c, e);
}

void cp__h_secret_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (unconfigured(c))
                return;
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {c->who.tenant_id};
        if (cp_db_exec(c->api->db,
                       "SELECT api_secret(s)::text FROM secrets s WHERE s.tenant_id = $1 AND s.deleted_at IS NULL "
                       "ORDER BY s.name",
                       1, params, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        _cleanup_json_ json_object *list = json_object_new_array();
        for (int i = 0; i < PQntuples(res); i++) {
                json_object *o = NULL;
                if (sp_json_parse(PQgetvalue(res, i, 0), strlen(PQgetvalue(res, i, 0)), &o, NULL) == 0)
                        json_object_array_add(list, o);
        }
        cp__reply_wrapped(c, 0, "secrets", list, NULL);
}

void cp__h_secret_get(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (unconfigured(c))
                return;
        _cleanup_json_ json_object *out = NULL;
        if (secret_answer(c, sp_http_request_param(c->req, "name"), &out, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp__reply(c, 200, out);
}

void cp__h_secret_delete(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (unconfigured(c))
                return;
        const char *name = sp_http_request_param(c->req, "name");
        if (cp__body_none(c) < 0)
                return;
        /* The answer is made after the commit (it waits for workers): a retry
         * with the same Idempotency-Key answers with the secret the first
         * request revoked, by its id (the name may be another secret's by
         * then). */
        _cleanup_pgresult_ PGresult *live = NULL, *row = NULL, *users = NULL;
        _cleanup_json_ json_object *out = NULL;
        char msg[128], first[SP_ID_MAX];
        snprintf(msg, sizeof(msg), SECRET_NOT_FOUND, name);
        const char *params[] = {c->who.tenant_id, name};
        if (cp_db_exec(c->api->db, "SELECT id FROM secrets WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL",
                       2, params, &live, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        const char *live_id = PQntuples(live) == 1 ? PQgetvalue(live, 0, 0) : "";
        int r = cp__mutation_begin_for(c, live_id, first);
        if (r == 1)
                return;
        if (r == 2) {
                const char *fp[] = {c->who.tenant_id, first};
                if (cp__query_json(c->api, "SELECT api_secret(s) FROM secrets s WHERE s.tenant_id = $1 AND s.id = $2",
                                   2, fp, msg, &out, &e) < 0)
                        cp__fail(c, e);
                else
                        cp__reply(c, 200, out);
                return;
        }
        /* Its value goes with it: a revoked secret cannot come back. */
        const char *rp[] = {c->who.tenant_id, live_id};
        if (cp_db_exec(c->api->db,
                       "UPDATE secrets SET deleted_at = now(), updated_at = now(), key_id = NULL, wrapped_key = NULL, "
                       "ciphertext = NULL WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL "
                       "RETURNING id, api_secret(secrets)::text",
                       2, rp, &row, &e) < 0)
                goto abort;
        if (PQntuples(row) != 1) {
                sp_error_set(&e, SP_E_NOT_FOUND, "%s", msg);
                goto abort;
        }
        const char *id = PQgetvalue(row, 0, 0);
        const char *up[] = {id};
        /* Every live sandbox that had it gets its bindings without it. */
        if (cp_db_exec(c->api->db,
                       "UPDATE sandboxes s SET egress_generation = s.egress_generation + 1, updated_at = now() "
                       "FROM sandbox_secrets ss WHERE ss.sandbox_id = s.id AND ss.secret_id = $1 "
                       "AND s.deleted_at IS NULL RETURNING s.id",
                       1, up, &users, &e) < 0 ||
            cp__audit(c, "secret.delete", id, NULL, &e) < 0 ||
            sp_json_parse(PQgetvalue(row, 0, 1), strlen(PQgetvalue(row, 0, 1)), &out, &e) < 0)
                goto abort;
        json_object_object_add(out, "sandboxes_updating", json_object_new_int(PQntuples(users)));
        if (cp__mutation_commit_quiet(c) < 0)
                return;
        cp__egress_push_rows(c, users, out);
        return;
abort:
        cp__mutation_abort(c, e);
}

void cp__h_secrets_rewrap(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (unconfigured(c))
                return;
        int64_t max = 0;
        if (cp_req_secrets_rewrap(c->body, c->body_len, &max, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* A key file that did not load must not look like a finished rotation:
         * the next step would be to drop the only key that works. */
        (void)cp_secrets_keyring_refresh(c->api->db, c->api->cfg.keyring);
        const char *kerr = cp_keyring_error(c->api->cfg.keyring);
        if (kerr) {
                cp__failf(c, SP_E_CONFLICT, "%s: fix the key file before rewrapping", kerr);
                return;
        }
        cp_rewrap_result res;
        int r = cp_secrets_rewrap(c->api->db, c->api->cfg.keyring, max, &res, &e);
        if (r < 0) {
                cp_rewrap_result_clear(&res);
                cp__fail(c, e);
                return;
        }
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object_object_add(out, "primary", json_object_new_string(res.primary));
        json_object_object_add(out, "rewrapped", json_object_new_int64(res.rewrapped));
        json_object_object_add(out, "failed", json_object_new_int64(res.failed));
        json_object_object_add(out, "remaining", json_object_new_int64(res.remaining));
        json_object_object_add(out, "by_key", json_object_get(res.by_key));
        json_object_object_add(out, "missing_keys", json_object_get(res.missing_keys));
        cp_rewrap_result_clear(&res);
        (void)cp__audit(c, "secret.rewrap", NULL, out, NULL);
        sp_log_info_kv(SP_KV("request_id", sp_http_request_id(c->req)),
                       "secrets: %lld data keys wrapped again under '%s'; %lld still under other keys",
                       (long long)json_object_get_int64(json_object_object_get(out, "rewrapped")),
                       json_object_get_string(json_object_object_get(out, "primary")),
                       (long long)json_object_get_int64(json_object_object_get(out, "remaining")));
        cp__reply(c, 200, out);
}

/* ---- GET /v1/secrets/{name}/usage ----
 *
 * The gateway writes a record of kind "secret" to a sandbox's egress log for
 * every injection and every refused use; the log is its worker's. Usage asks
 * the workers of the live sandboxes given the secret (at most
 * USAGE_SANDBOXES_MAX, newest first) for their last secret records, keeps
 * this secret's, and answers them with counts per sandbox. Deleted
 * sandboxes' logs are gone with them. */

typedef struct usage {
        cp_call *c;
        char secret_id[SP_ID_MAX];
        json_object *out; /* the answer */
        json_object *records; /* this secret's records, every sandbox's */
        int pending; /* calls open, plus one while they are being started */
        bool complete;
} usage;

typedef struct usage_one {
        usage *u;
        json_object *entry; /* its element of out.sandboxes (borrowed from out) */
        char sandbox_id[SP_ID_MAX];
} usage_one;

static int64_t time_of(json_object *rec)
{
        json_object *t = NULL;
        return json_object_object_get_ex(rec, "time_us", &t) ? json_object_get_int64(t) : 0;
}

static int by_time(const void *a, const void *b)
{
        int64_t x = time_of(*(json_object *const *)a), y = time_of(*(json_object *const *)b);
        return x < y ? -1 : x > y;
}

static void usage_end(usage *u)
{
        if (--u->pending > 0)
                return;
        json_object_array_sort(u->records, by_time);
        json_object_object_add(u->out, "records", u->records);
        json_object_object_add(u->out, "complete", json_object_new_boolean(u->complete));
        cp__reply(u->c, 200, u->out);
        json_object_put(u->out);
        free(u);
}

static void on_usage_log(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        (void)c;
        usage_one *o = userdata;
        usage *u = o->u;
        json_object *recs = NULL, *more = NULL, *by_rule = json_object_new_object();
        int64_t uses = 0;
        if (err && err->code != SP_E_NOT_FOUND) {
                /* Its worker did not answer: say so, and that the answer is partial. */
                json_object_object_add(o->entry, "error", json_object_new_string(err->message));
                u->complete = false;
        }
        if (resp && json_object_object_get_ex(resp, "records", &recs) && json_object_is_type(recs, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(recs); i++) {
                        json_object *r = json_object_array_get_idx(recs, i), *v = NULL;
                        if (!json_object_is_type(r, json_type_object) ||
                            !json_object_object_get_ex(r, "secret_id", &v) ||
                            strcmp(json_object_get_string(v), u->secret_id) != 0 ||
                            !json_object_object_get_ex(r, "kind", &v) ||
                            strcmp(json_object_get_string(v), "secret") != 0)
                                continue;
                        const char *rule = json_object_object_get_ex(r, "rule", &v) ? json_object_get_string(v) : "";
                        json_object *n = NULL;
                        int64_t had = json_object_object_get_ex(by_rule, rule, &n) ? json_object_get_int64(n) : 0;
                        json_object_object_add(by_rule, rule, json_object_new_int64(had + 1));
                        uses++;
                        json_object *copy = NULL;
                        if (json_object_deep_copy(r, &copy, NULL) == 0) {
                                json_object_object_add(copy, "sandbox_id", json_object_new_string(o->sandbox_id));
                                json_object_array_add(u->records, copy);
                        }
                }
                if (json_object_object_get_ex(resp, "more", &more) && json_object_get_boolean(more))
                        json_object_object_add(o->entry, "more", json_object_new_boolean(true));
        }
        json_object_object_add(o->entry, "uses", json_object_new_int64(uses));
        json_object_object_add(o->entry, "by_rule", by_rule);
        free(o);
        usage_end(u);
}

void cp__h_secret_usage(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (unconfigured(c))
                return;
        const char *name = sp_http_request_param(c->req, "name");
        int64_t limit = 0;
        if (cp_req_count("limit", sp_http_request_query(c->req, "limit"), USAGE_RECORDS_MAX, USAGE_RECORDS_MAX, &limit,
                         &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* The live secret of that name, else the one revoked last (its refused uses). */
        _cleanup_json_ json_object *secret = NULL;
        char msg[128];
        snprintf(msg, sizeof(msg), SECRET_NOT_FOUND, name);
        const char *params[] = {c->who.tenant_id, name};
        if (cp__query_json(c->api,
                           "SELECT api_secret(s) FROM secrets s WHERE s.tenant_id = $1 AND s.name = $2 "
                           "ORDER BY s.deleted_at IS NULL DESC, s.created_at DESC LIMIT 1",
                           2, params, msg, &secret, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        const char *id = json_object_get_string(json_object_object_get(secret, "id"));
        char limit_s[16];
        snprintf(limit_s, sizeof(limit_s), "%d", USAGE_SANDBOXES_MAX);
        const char *sp[] = {id, c->who.tenant_id, limit_s};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(c->api->db,
                       "SELECT s.id, s.observed_state, coalesce(s.worker_id, ''), coalesce(w.address, ''), "
                       "coalesce(w.state <> 'unreachable', false), count(*) OVER () FROM sandbox_secrets ss "
                       "JOIN sandboxes s ON s.id = ss.sandbox_id LEFT JOIN workers w ON w.id = s.worker_id "
                       "WHERE ss.secret_id = $1 AND s.tenant_id = $2 AND s.deleted_at IS NULL "
                       "ORDER BY s.created_at DESC, s.id LIMIT $3::integer",
                       3, sp, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        usage *u = calloc(1, sizeof(*u));
        if (!u) {
                cp__failf(c, SP_E_LIMIT, "out of memory");
                return;
        }
        int total = PQntuples(res) ? atoi(PQgetvalue(res, 0, 5)) : 0;
        *u = (usage){.c = c,
                     .out = json_object_new_object(),
                     .records = json_object_new_array(),
                     .pending = 1,
                     .complete = total <= USAGE_SANDBOXES_MAX};
        snprintf(u->secret_id, sizeof(u->secret_id), "%s", id);
        json_object *list = json_object_new_array();
        json_object_object_add(u->out, "id", json_object_new_string(id));
        json_object_object_add(u->out, "name", json_object_new_string(name));
        json_object_object_add(u->out, "revoked_at", json_object_get(json_object_object_get(secret, "revoked_at")));
        json_object_object_add(u->out, "sandboxes_total", json_object_new_int(total));
        json_object_object_add(u->out, "sandboxes", list);
        pr_wk_get_egress_log q = {.limit = limit, .kind = "secret"};
        for (int i = 0; i < PQntuples(res); i++) {
                const char *sbx = PQgetvalue(res, i, 0), *worker = PQgetvalue(res, i, 2);
                json_object *entry = json_object_new_object();
                json_object_object_add(entry, "sandbox_id", json_object_new_string(sbx));
                json_object_object_add(entry, "state", json_object_new_string(PQgetvalue(res, i, 1)));
                json_object_array_add(list, entry);
                if (!*worker || strcmp(PQgetvalue(res, i, 4), "t") != 0) {
                        json_object_object_add(entry, "uses", json_object_new_int(0));
                        json_object_object_add(
                                entry, "error",
                                json_object_new_string(*worker ? "its worker is unreachable" : "it is on no worker"));
                        if (*worker)
                                u->complete = false;
                        continue;
                }
                usage_one *o = calloc(1, sizeof(*o));
                if (!o) {
                        u->complete = false;
                        continue;
                }
                *o = (usage_one){.u = u, .entry = entry};
                snprintf(o->sandbox_id, sizeof(o->sandbox_id), "%s", sbx);
                q.id = sbx;
                _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_get_egress_log_schema, &q);
                u->pending++;
                cp__worker_call_within(c, worker, PQgetvalue(res, i, 3), "GetEgressLog", req, USAGE_TIMEOUT_MS,
                                       on_usage_log, o);
        }
        usage_end(u);
}
