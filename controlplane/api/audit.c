/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The audit log (docs/api.md "Audit log", docs/operations.md "Reading the
 * audit trail"): how records are written and GET /v1/audit.
 *
 * A mutation's handler writes its record in the mutation's own transaction
 * (cp__audit), so that a change is never stored without it. Everything else
 * is recorded in one place, from the answer (cp__audit_answer, which every
 * reply runs): a mutating call whose handler wrote nothing — refused,
 * failed, an Idempotency-Key replay — and an admin route refused to a key
 * that is not an admin's. Login failures (401) are recorded from dispatch,
 * at most at a configured rate (a flood of bad keys cannot fill the table);
 * the rest are counted, in /metrics and in the next record. Calls answered
 * 429 (rate limits, quotas: what a flood of calls gets) are bounded the same
 * way, with a bucket of their own.
 *
 * Threading: the API's loop.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request_audit.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

static const char *or_null(const char *s)
{
        return s && s[0] ? s : NULL;
}

int cp__audit(cp_call *c, const char *action, const char *target, json_object *detail, sp_error **err)
{
        const char *params[] = {
                or_null(c->who.tenant_id),          or_null(c->who.key_id), action, target, sp_http_request_id(c->req),
                detail ? sp_json_str(detail) : "{}"};
        if (cp_db_exec(c->api->db,
                       "INSERT INTO audit_log (tenant_id, key_id, action, target, request_id, detail) "
                       "VALUES ($1, $2, $3, $4, $5, $6::jsonb)",
                       6, params, NULL, err) < 0)
                return -(int)(*err)->code;
        cp__audit_written(c);
        return 0;
}

void cp__audit_written(cp_call *c)
{
        if (c->in_txn)
                c->audit_in_txn = true;
        else
                c->audited = true;
}

void cp__audit_txn_end(cp_call *c, bool committed)
{
        if (c->audit_in_txn && committed)
                c->audited = true;
        c->audit_in_txn = false;
}

/* The longest object id a record made from an answer keeps: a path parameter is the caller's
 * (an id of thousands of bytes fails the index's row size, and fills the table). */
#define AUDIT_TARGET_MAX 256

/* Inserts one record made outside a handler; logs a failure. */
static void insert(cp_call *c, const char *tenant_id, const char *key_id, const char *action, const char *target,
                   const char *outcome, int status, const char *error, json_object *detail)
{
        char cut[AUDIT_TARGET_MAX + 1];
        if (target && strlen(target) > AUDIT_TARGET_MAX) {
                /* Cut on a character boundary, and say so. */
                size_t n = AUDIT_TARGET_MAX;
                while (n > 0 && ((unsigned char)target[n] & 0xC0) == 0x80)
                        n--;
                memcpy(cut, target, n);
                cut[n] = '\0';
                json_object_object_add(detail, "object_id_bytes", json_object_new_int64((int64_t)strlen(target)));
                target = cut;
        }
        char st[16];
        snprintf(st, sizeof(st), "%d", status);
        const char *params[] = {
                or_null(tenant_id),  or_null(key_id), action, or_null(target), sp_http_request_id(c->req),
                sp_json_str(detail), outcome,         st,     error,
        };
        _cleanup_error_ sp_error *e = NULL;
        if (cp_db_exec(c->api->db,
                       "INSERT INTO audit_log (tenant_id, key_id, action, target, request_id, detail, outcome, "
                       "status, error) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8::integer, $9)",
                       9, params, NULL, &e) < 0)
                sp_log_warn_kv(SP_KV("request_id", sp_http_request_id(c->req)), "audit record %s (%s) not stored: %s",
                               action, outcome, e->message);
}

/* The object a route's path names: its {id} or {name}. */
static const char *path_object(cp_call *c)
{
        const char *id = sp_http_request_param(c->req, "id");
        return id ? id : sp_http_request_param(c->req, "name");
}

/* Takes a token of b (rate per second, a burst of ten seconds' worth): true
 * when a record may be written, false when it is only counted. */
static bool bucket_take(cp_api *api, cp_audit_bucket *b)
{
        double rate = (double)api->cfg.audit_login_failures_per_s, burst = rate * 10;
        int64_t now = sp_now_mono_us();
        if (b->refill_us) {
                b->tokens += (double)(now - b->refill_us) / 1e6 * rate;
                if (b->tokens > burst)
                        b->tokens = burst;
        }
        b->refill_us = now;
        if (b->tokens < 1) {
                b->unrecorded_total++;
                b->unrecorded_since++;
                return false;
        }
        b->tokens -= 1;
        return true;
}

/* Says in detail how many records of b's kind the one being written stands for. */
static void bucket_note(cp_audit_bucket *b, json_object *detail)
{
        if (b->unrecorded_since)
                json_object_object_add(detail, "unrecorded_before",
                                       json_object_new_int64((int64_t)b->unrecorded_since));
        b->unrecorded_since = 0;
}

void cp__audit_answer(cp_call *c, int status)
{
        if (c->audited || c->audit_in_txn || !c->rc)
                return;
        const cp_route *r = c->rc->route;
        bool mutating = strcmp(r->method, "GET") != 0 && strcmp(r->method, "HEAD") != 0;
        bool admin_refused = r->auth == CP_AUTH_ADMIN && status == 403;
        /* 401s were recorded (or counted) as login failures already. */
        if (r->auth == CP_AUTH_NONE || status == 401 || !(mutating || admin_refused))
                return;
        c->audited = true;
        /* A 429 (a rate limit or a quota) is what a flood of calls gets: bounded like login failures. */
        if (status == 429 && !bucket_take(c->api, &c->api->throttled_bucket))
                return;
        const char *action = c->audit_action ? c->audit_action : cp_audit_route_action(r->method, r->pattern);
        if (!action)
                action = "api.call";
        if (status < 400 && !c->replayed)
                sp_log_warn_kv(SP_KV("request_id", sp_http_request_id(c->req)),
                               "%s %s answered %d without an audit record of its own", r->method, r->pattern, status);
        _cleanup_json_ json_object *detail = json_object_new_object();
        json_object_object_add(detail, "method", json_object_new_string(r->method));
        json_object_object_add(detail, "route", json_object_new_string(r->pattern));
        if (c->replayed)
                json_object_object_add(detail, "replayed", json_object_new_boolean(true));
        if (status == 429)
                bucket_note(&c->api->throttled_bucket, detail);
        const char *outcome = status < 400 ? "ok" : status == 403 ? "denied" : "failed";
        insert(c, c->who.tenant_id, c->who.key_id, action, path_object(c), outcome, status,
               status >= 400 ? (c->fail_code ? c->fail_code : "error") : NULL, detail);
}

void cp__audit_login_failure(cp_call *c, const cp_apikey_denial *d)
{
        cp_api *api = c->api;
        c->audited = true;
        api->login_failures_total++;
        if (!bucket_take(api, &api->login_bucket))
                return;
        const cp_route *r = c->rc->route;
        _cleanup_json_ json_object *detail = json_object_new_object();
        json_object_object_add(detail, "reason", json_object_new_string(d ? d->reason : "missing"));
        json_object_object_add(detail, "method", json_object_new_string(r->method));
        json_object_object_add(detail, "route", json_object_new_string(r->pattern));
        const char *remote = sp_http_request_remote(c->req);
        if (remote)
                json_object_object_add(detail, "remote", json_object_new_string(remote));
        bucket_note(&api->login_bucket, detail);
        insert(c, d ? d->tenant_id : NULL, d ? d->key_id : NULL, "key.login_failed", d ? d->key_id : NULL, "denied",
               401, "unauthenticated", detail);
}

void cp__audit_metrics(cp_api *api, sp_buf *b)
{
        sp_buf_appendf(b, NULL,
                       "# HELP space_api_login_failures_total Requests refused for a missing or bad API key.\n"
                       "# TYPE space_api_login_failures_total counter\nspace_api_login_failures_total %llu\n"
                       "# HELP space_api_login_failures_unrecorded_total Login failures past the audit log's rate "
                       "bound (--audit-login-failure-rate): counted, not recorded.\n"
                       "# TYPE space_api_login_failures_unrecorded_total counter\n"
                       "space_api_login_failures_unrecorded_total %llu\n",
                       (unsigned long long)api->login_failures_total,
                       (unsigned long long)api->login_bucket.unrecorded_total);
        sp_buf_appendf(b, NULL,
                       "# HELP space_api_throttled_unrecorded_total Calls answered 429 past the audit log's rate "
                       "bound (--audit-login-failure-rate): counted, not recorded.\n"
                       "# TYPE space_api_throttled_unrecorded_total counter\n"
                       "space_api_throttled_unrecorded_total %llu\n",
                       (unsigned long long)api->throttled_bucket.unrecorded_total);
}

/* ---- GET /v1/audit ---- */

void cp__h_audit_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_http_request *req = c->req;
        cp_audit_params p = {
                .tenant_id = sp_http_request_query(req, "tenant_id"),
                .key_id = sp_http_request_query(req, "key_id"),
                .object_type = sp_http_request_query(req, "object_type"),
                .object_id = sp_http_request_query(req, "object_id"),
                .action = sp_http_request_query(req, "action"),
                .outcome = sp_http_request_query(req, "outcome"),
                .since = sp_http_request_query(req, "since"),
                .until = sp_http_request_query(req, "until"),
                .limit = sp_http_request_query(req, "limit"),
                .cursor = sp_http_request_query(req, "cursor"),
        };
        cp_audit_query q;
        if (cp_req_audit_query(&p, &q, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        /* A tenant's key reads its own tenant's records only. */
        if (!c->who.admin) {
                if (q.tenant_id[0] && strcmp(q.tenant_id, c->who.tenant_id) != 0) {
                        cp__failf(c, SP_E_PERMISSION, "only an admin key can read another tenant's audit records");
                        return;
                }
                snprintf(q.tenant_id, sizeof(q.tenant_id), "%s", c->who.tenant_id);
        }
        char xid[24] = "", id[24] = "", nrows[24];
        if (q.has_cursor) {
                snprintf(xid, sizeof(xid), "%" PRIu64, q.cursor.xid);
                snprintf(id, sizeof(id), "%" PRId64, q.cursor.id);
        }
        snprintf(nrows, sizeof(nrows), "%lld", (long long)(q.limit + 1));
        const char *params[] = {
                or_null(q.tenant_id),
                or_null(q.key_id),
                or_null(q.object_type),
                or_null(q.object_id),
                q.action_prefix ? NULL : or_null(q.action),
                q.action_prefix ? q.action : NULL,
                or_null(q.outcome),
                or_null(q.since),
                or_null(q.until),
                or_null(xid),
                or_null(id),
                nrows,
        };
        _cleanup_pgresult_ PGresult *res = NULL;
        /* Only records whose transaction ended before every running one
         * began (migration 0016): a cursor never skips a late commit. */
        if (cp_db_exec(c->api->db,
                       "SELECT jsonb_build_object('id', a.id, 'at', api_ts(a.at), 'tenant_id', a.tenant_id, "
                       "'key_id', a.key_id, 'action', a.action, 'object_type', a.object_type, 'object_id', a.target, "
                       "'outcome', a.outcome, 'status', a.status, 'error', a.error, 'request_id', a.request_id, "
                       "'detail', a.detail)::text, a.xid::text, a.id FROM audit_log a "
                       "WHERE a.xid < pg_snapshot_xmin(pg_current_snapshot()) "
                       "AND ($1::text IS NULL OR a.tenant_id = $1) AND ($2::text IS NULL OR a.key_id = $2) "
                       "AND ($3::text IS NULL OR a.object_type = $3) AND ($4::text IS NULL OR a.target = $4) "
                       "AND ($5::text IS NULL OR a.action = $5) AND ($6::text IS NULL OR starts_with(a.action, $6)) "
                       "AND ($7::text IS NULL OR a.outcome = $7) AND ($8::timestamptz IS NULL OR a.at >= $8) "
                       "AND ($9::timestamptz IS NULL OR a.at < $9) "
                       "AND ($10::xid8 IS NULL OR (a.xid, a.id) > ($10::xid8, $11::bigint)) "
                       "ORDER BY a.xid, a.id LIMIT $12::integer",
                       12, params, &res, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        int n = PQntuples(res);
        int shown = n > q.limit ? (int)q.limit : n;
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object *arr = json_object_new_array();
        json_object_object_add(out, "records", arr);
        for (int i = 0; i < shown; i++) {
                json_object *o = NULL;
                const char *v = PQgetvalue(res, i, 0);
                if (sp_json_parse(v, strlen(v), &o, &e) < 0) {
                        cp__fail(c, e);
                        return;
                }
                json_object_array_add(arr, o);
        }
        /* The position after the last record shown (the one given when none
         * was): a follower polls with it and gets what comes after. */
        char cur[CP_AUDIT_CURSOR_MAX + 1] = "";
        if (shown > 0) {
                cp_audit_pos pos = {strtoull(PQgetvalue(res, shown - 1, 1), NULL, 10),
                                    strtoll(PQgetvalue(res, shown - 1, 2), NULL, 10)};
                if (cp_audit_cursor_encode(&pos, cur, sizeof(cur), &e) < 0) {
                        cp__fail(c, e);
                        return;
                }
        } else if (q.has_cursor) {
                snprintf(cur, sizeof(cur), "%s", p.cursor);
        }
        json_object_object_add(out, "next_cursor", cur[0] ? json_object_new_string(cur) : NULL);
        json_object_object_add(out, "has_more", json_object_new_boolean(n > q.limit));
        cp__reply(c, 200, out);
}
