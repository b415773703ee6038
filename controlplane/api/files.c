/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Files of a running sandbox: stat, list, mkdir, move and remove go to its
 * worker (and its agent, which resolves paths inside the sandbox); contents
 * move through the data plane under a token minted here. Changes are audited
 * once the worker has made them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/request_session.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

typedef struct files_ctx {
        char sandbox_id[SP_ID_MAX];
        const char *action; /* audit action of a change; NULL for reads */
        json_object *detail; /* its audit detail */
} files_ctx;

static void ctx_free(files_ctx *x)
{
        sp_json_putp(&x->detail);
        free(x);
}

static void on_done(cp_call *c, json_object *resp, const sp_error *err, void *userdata)
{
        files_ctx *x = userdata;
        _cleanup_error_ sp_error *e = NULL;
        if (err) {
                cp__fail_worker(c, err);
                ctx_free(x);
                return;
        }
        if (x->action && cp__audit(c, x->action, x->sandbox_id, x->detail, &e) < 0) {
                cp__fail(c, e);
                ctx_free(x);
                return;
        }
        cp__sandbox_touch(c->api, x->sandbox_id);
        cp__reply(c, 200, resp);
        ctx_free(x);
}

/* Sends method (its request schema) with q's fields plus sandbox_id to the
 * sandbox's worker. action/detail (taken) are the audit record of a change. */
static void call(cp_call *c, const char *method, const pr_schema *schema, pr_wk_file *q, const char *action,
                 json_object *detail)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *owned = detail;
        cp_sandbox_loc loc;
        if (cp__sandbox_locate(c, sp_http_request_param(c->req, "id"), true, &loc, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        files_ctx *x = calloc(1, sizeof(*x));
        if (!x) {
                cp__failf(c, SP_E_LIMIT, "out of memory");
                return;
        }
        snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s", loc.id);
        x->action = action;
        x->detail = TAKE_PTR(owned);
        q->sandbox_id = loc.id;
        _cleanup_json_ json_object *req = pr_msg_encode(schema, q);
        cp__worker_call(c, loc.worker_id, loc.address, method, req, on_done, x);
}

void cp__h_files_stat(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_files_req r;
        if (cp_req_files_query(sp_http_request_query(c->req, "path"), NULL, sp_http_request_query(c->req, "user"),
                               sp_http_request_query(c->req, "owner"), &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        pr_wk_file q = PR_WK_FILE_INIT;
        q.path = r.path;
        q.user = r.user[0] ? r.user : NULL;
        q.owner = r.owner[0] ? r.owner : NULL;
        call(c, "StatFile", &pr_wk_stat_file_schema, &q, NULL, NULL);
        cp_files_req_free(&r);
}

void cp__h_files_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_files_req r;
        if (cp_req_files_query(sp_http_request_query(c->req, "path"), sp_http_request_query(c->req, "limit"),
                               sp_http_request_query(c->req, "user"), sp_http_request_query(c->req, "owner"), &r,
                               &e) < 0) {
                cp__fail(c, e);
                return;
        }
        pr_wk_file q = PR_WK_FILE_INIT;
        q.path = r.path;
        q.limit = r.limit;
        q.user = r.user[0] ? r.user : NULL;
        q.owner = r.owner[0] ? r.owner : NULL;
        call(c, "ListDir", &pr_wk_list_dir_schema, &q, NULL, NULL);
        cp_files_req_free(&r);
}

/* A change: decoded by decode, sent as method (its request schema) with the
 * request's fields, audited as action with those fields (but the sandbox). */
static void change(cp_call *c, int (*decode)(const char *, size_t, cp_files_req *, sp_error **), const char *method,
                   const pr_schema *schema, const char *action)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_files_req r;
        if (decode(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        pr_wk_file q = PR_WK_FILE_INIT;
        if (r.to) {
                q.from = r.path;
                q.to = r.to;
        } else {
                q.path = r.path;
        }
        q.parents = r.parents;
        q.recursive = r.recursive;
        q.mode = r.mode;
        q.user = r.user[0] ? r.user : NULL;
        q.owner = r.owner[0] ? r.owner : NULL;
        call(c, method, schema, &q, action, pr_msg_encode(schema, &q));
        cp_files_req_free(&r);
}

void cp__h_files_mkdir(cp_call *c)
{
        change(c, cp_req_files_mkdir, "MakeDir", &pr_wk_make_dir_schema, "files.mkdir");
}

void cp__h_files_move(cp_call *c)
{
        change(c, cp_req_files_move, "MovePath", &pr_wk_move_path_schema, "files.move");
}

void cp__h_files_remove(cp_call *c)
{
        change(c, cp_req_files_remove, "RemovePath", &pr_wk_remove_path_schema, "files.remove");
}

void cp__h_files_token(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        cp_token_req r;
        if (cp_req_files_token(c->body, c->body_len, &r, &e) < 0) {
                cp__fail(c, e);
                return;
        }
        cp_sandbox_loc loc;
        _cleanup_json_ json_object *claims = json_object_new_object();
        _cleanup_json_ json_object *detail = json_object_new_object();
        _cleanup_json_ json_object *out = json_object_new_object();
        _cleanup_free_ char *token = NULL;
        char expires[32], url[1200];
        const char *scope = r.scope[0] ? r.scope : "read";
        int64_t ttl = r.ttl_s ? r.ttl_s : c->api->cfg.attach_token_ttl_s;
        int rc = cp__sandbox_locate(c, sp_http_request_param(c->req, "id"), true, &loc, &e);
        if (rc == 0) {
                json_object_object_add(claims, "typ", json_object_new_string("files"));
                json_object_object_add(claims, "ten", json_object_new_string(c->who.tenant_id));
                if (c->who.key_id[0]) /* the key that minted it: revoking the key ends the token */
                        json_object_object_add(claims, "akey", json_object_new_string(c->who.key_id));
                json_object_object_add(claims, "sbx", json_object_new_string(loc.id));
                cp__token_worker_claims(c->api, claims, loc.worker_id, loc.address);
                json_object_object_add(claims, "scope", json_object_new_string(scope));
                if (r.path)
                        json_object_object_add(claims, "path", json_object_new_string(r.path));
                if (r.user[0]) /* the data plane's transfers act as this user */
                        json_object_object_add(claims, "usr", json_object_new_string(r.user));
                json_object_object_add(detail, "scope", json_object_new_string(scope));
                json_object_object_add(detail, "ttl_s", json_object_new_int64(ttl));
                json_object_object_add(detail, "path", r.path ? json_object_new_string(r.path) : NULL);
                if (r.user[0])
                        json_object_object_add(detail, "user", json_object_new_string(r.user));
                rc = cp__token_mint(c->api, claims, ttl, &token, expires, &e);
        }
        if (rc == 0)
                rc = cp__audit(c, "files.token", loc.id, detail, &e);
        cp_token_req_free(&r);
        if (rc < 0) {
                cp__fail(c, e);
                return;
        }
        snprintf(url, sizeof(url), "%s/v1/sandboxes/%s/files", c->api->dataplane_url, loc.id);
        json_object_object_add(out, "url", json_object_new_string(url));
        json_object_object_add(out, "token", json_object_new_string(token));
        json_object_object_add(out, "expires_at", json_object_new_string(expires));
        cp__reply(c, 200, out);
}
