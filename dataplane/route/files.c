/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File contents: GET streams the worker's ReadFile to the client (after a
 * StatFile that gives the Content-Length), reading from the worker only as
 * fast as the client takes the bytes; PUT streams the body into WriteFile
 * (route/upload.c). Neither holds a file in memory.
 */
#include <stdlib.h>
#include <string.h>

#include "route/request.h"
#include "route/routes.h"
#include "route/upload.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

typedef struct download {
        dp *d;
        sp_http_request *req;
        dp_claims claims;
        char *path;
        char *owner; /* owner=: act as root, resolve from the owner's home (NULL: the token's user) */
        uint64_t offset, length; /* what the response carries */
        uint64_t written;
        sp_rpc_stream *rpc; /* NULL once ended or cancelled */
        sp_buf pending; /* a chunk the client's connection could not take yet */
        bool started, client_gone, stat_pending;
        bool complete; /* the worker sent everything: end once pending is written */
} download;

static void download_free(download *dl)
{
        if (dl->rpc)
                sp_rpc_stream_cancel(dl->rpc);
        sp_http_request_on_close(dl->req, NULL, NULL);
        sp_http_stream_on_writable(dl->req, NULL, NULL);
        sp_http_request_unref(dl->req);
        sp_buf_free(&dl->pending);
        free(dl->path);
        free(dl->owner);
        dp__stream_release(dl->d, &dl->claims);
        free(dl);
}

static void download_fail(download *dl, const sp_error *e)
{
        if (dl->started) {
                /* Too late for a status: ending short closes the connection, which the client sees. */
                dp__answered(dl->d, dl->req, DP_ROUTE_FILE_GET, &dl->claims, 200, e->message);
                sp_http_stream_end(dl->req);
        } else {
                dp__reply_error(dl->d, dl->req, DP_ROUTE_FILE_GET, &dl->claims, e);
        }
        download_free(dl);
}

static void start_response(download *dl)
{
        if (dl->started)
                return;
        dl->started = true;
        sp_http_stream_start(dl->req, 200, "application/octet-stream", (int64_t)dl->length);
}

/* Writes the pending chunk; false while the client's connection is full. */
static bool write_pending(download *dl)
{
        if (dl->pending.len == 0)
                return true;
        int r = sp_http_stream_write(dl->req, dl->pending.data, dl->pending.len);
        if (r == SP_HTTP_WOULD_BLOCK)
                return false;
        dl->written += dl->pending.len;
        dl->d->metrics.file_bytes_out += dl->pending.len;
        sp_buf_clear(&dl->pending);
        return true;
}

/* Ends the response (everything was written) and the download. */
static void finish(download *dl)
{
        start_response(dl);
        dp__answered(dl->d, dl->req, DP_ROUTE_FILE_GET, &dl->claims, 200, "file sent");
        sp_http_stream_end(dl->req);
        download_free(dl);
}

static void on_writable(sp_http_request *req, void *userdata)
{
        download *dl = userdata;
        if (!write_pending(dl))
                return;
        if (dl->complete)
                finish(dl);
        else if (dl->rpc)
                sp_rpc_stream_resume(dl->rpc);
}

static void on_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *userdata)
{
        download *dl = userdata;
        if (type != SP_RPC_FRAME_DATA || n == 0)
                return;
        if (dl->written + dl->pending.len + n > dl->length) {
                _cleanup_error_ sp_error *e = NULL;
                sp_error_set(&e, SP_E_INTERNAL, "the worker sent more than the file's %llu bytes",
                             (unsigned long long)dl->length);
                download_fail(dl, e);
                return;
        }
        start_response(dl);
        if (sp_buf_append(&dl->pending, p, n, NULL) < 0 || !write_pending(dl))
                sp_rpc_stream_pause(s);
}

static void on_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *userdata)
{
        download *dl = userdata;
        dl->rpc = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (err)
                e = dp__worker_error(dl->d, &dl->claims, "ReadFile", err);
        else if (dl->written + dl->pending.len != dl->length)
                sp_error_set(&e, SP_E_CONFLICT, "the file changed while it was read (%llu of %llu bytes)",
                             (unsigned long long)(dl->written + dl->pending.len), (unsigned long long)dl->length);
        if (e) {
                download_fail(dl, e);
                return;
        }
        /* A last chunk may still wait for the client's connection to drain. */
        dl->complete = true;
        if (write_pending(dl))
                finish(dl);
}

static void on_client_close(sp_http_request *req, void *userdata)
{
        download *dl = userdata;
        if (dl->stat_pending) {
                /* StatFile cannot be cancelled: its answer frees the download. */
                dl->client_gone = true;
                return;
        }
        dp__answered(dl->d, req, DP_ROUTE_FILE_GET, &dl->claims, 499, "the client went away during the download");
        download_free(dl);
}

/* The file request of the download: its sandbox, path and user, every other member absent. */
static pr_wk_file file_request(const download *dl)
{
        pr_wk_file q = PR_WK_FILE_INIT;
        q.sandbox_id = dl->claims.sandbox;
        q.path = dl->path;
        q.user = dl->claims.user[0] ? dl->claims.user : NULL;
        q.owner = dl->owner;
        return q;
}

/* StatFile for the Content-Length: of the file a symlink names, which is
 * what the read sends. */
static json_object *stat_request(const download *dl)
{
        pr_wk_file q = file_request(dl);
        q.follow = true;
        return pr_msg_encode(&pr_wk_stat_file_schema, &q);
}

static void stat_done(json_object *resp, const sp_error *err, void *userdata)
{
        download *dl = userdata;
        dl->stat_pending = false;
        if (dl->client_gone) {
                download_free(dl);
                return;
        }
        _cleanup_error_ sp_error *e = NULL;
        const char *type = NULL;
        int64_t size = 0;
        if (err) {
                e = dp__worker_error(dl->d, &dl->claims, "StatFile", err);
        } else if (sp_json_get_string(resp, "type", true, 32, &type, &e) < 0 ||
                   sp_json_get_int(resp, "size", true, 0, INT64_MAX, &size, &e) < 0) {
                sp_error_wrap(&e, "the worker's answer to StatFile");
        } else if (strcmp(type, "dir") == 0) {
                sp_error_set(&e, SP_E_INVALID, "%s is a directory", dl->path);
        }
        if (e) {
                download_fail(dl, e);
                return;
        }
        uint64_t left = dl->offset < (uint64_t)size ? (uint64_t)size - dl->offset : 0;
        if (dl->length > left)
                dl->length = left;
        if (dl->length == 0 || strcmp(sp_http_request_method(dl->req), "HEAD") == 0) {
                finish(dl);
                return;
        }
        static const sp_rpc_stream_ops ops = {.on_frame = on_frame, .on_end = on_end};
        pr_wk_file q = file_request(dl);
        q.offset = (int64_t)dl->offset;
        q.length = (int64_t)dl->length;
        _cleanup_json_ json_object *r = pr_msg_encode(&pr_wk_read_file_schema, &q);
        sp_rpc_client *cli = dp_pool_get(dl->d->pool, dl->claims.worker, dl->claims.worker_name, &e);
        if (cli)
                dl->rpc = sp_rpc_client_stream(cli, "ReadFile", r, 0, &ops, dl, &e);
        if (!dl->rpc) {
                download_fail(dl, e);
                return;
        }
        sp_http_stream_on_writable(dl->req, on_writable, dl);
}

/* owner= acts as root: only with a token that does (no user); a token for
 * a user keeps that user's rights. */
static int owner_excludes_user(const dp_file_request *f, const dp_claims *c, sp_error **err)
{
        if (f->owner && c->user[0])
                return sp_error_set(err, SP_E_INVALID,
                                    "query parameter 'owner' and the token's user '%s' are mutually exclusive: "
                                    "owner= acts as root, so it needs a files token without a user",
                                    c->user);
        return 0;
}

void dp_file_get_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        _cleanup_error_ sp_error *e = NULL;
        dp_want want = {.kind = DP_KIND_FILES,
                        .sandbox = sp_http_request_param(req, "id"),
                        .path = sp_http_request_query(req, "path")};
        dp_claims c;
        if (dp__authenticate(d, req, DP_ROUTE_FILE_GET, &want, &c) < 0)
                return;
        dp_file_request f;
        if (dp_request_file_get(sp_http_request_parser(req), &f, &e) < 0 || owner_excludes_user(&f, &c, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_FILE_GET, &c, e);
                return;
        }
        if (!dp__stream_admit(d, req, DP_ROUTE_FILE_GET, &c))
                return;
        download *dl = calloc(1, sizeof(*dl));
        if (!dl || !(dl->path = strdup(f.path)) || (f.owner && !(dl->owner = strdup(f.owner)))) {
                if (dl)
                        free(dl->path);
                free(dl);
                dp__stream_release(d, &c);
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                dp__reply_error(d, req, DP_ROUTE_FILE_GET, &c, e);
                return;
        }
        dl->d = d;
        dl->req = sp_http_request_ref(req);
        dl->claims = c;
        dl->offset = f.offset;
        dl->length = f.has_length ? f.length : DP_OFFSET_MAX;
        _cleanup_json_ json_object *r = stat_request(dl);
        sp_rpc_client *cli = dp_pool_get(d->pool, c.worker, c.worker_name, &e);
        if (!cli || sp_rpc_client_call(cli, "StatFile", r, d->limits.rpc_timeout_ms, stat_done, dl, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_FILE_GET, &c, e);
                download_free(dl);
                return;
        }
        dl->stat_pending = true;
        sp_http_request_on_close(req, on_client_close, dl);
}

static const dp_upload_result size_result[] = {
        {"size", json_type_int}, {"path", json_type_string}, {NULL, json_type_null}};

void dp_file_put_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        _cleanup_error_ sp_error *e = NULL;
        dp_want want = {.kind = DP_KIND_FILES,
                        .write = true,
                        .sandbox = sp_http_request_param(req, "id"),
                        .path = sp_http_request_query(req, "path")};
        dp_claims c;
        if (dp__authenticate(d, req, DP_ROUTE_FILE_PUT, &want, &c) < 0)
                return;
        dp_file_request f;
        if (dp_request_file_put(sp_http_request_parser(req), &f, &e) < 0 || owner_excludes_user(&f, &c, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_FILE_PUT, &c, e);
                return;
        }
        if (!dp__stream_admit(d, req, DP_ROUTE_FILE_PUT, &c))
                return;
        pr_wk_file q = PR_WK_FILE_INIT;
        q.sandbox_id = c.sandbox;
        q.path = f.path;
        q.mode = f.mode;
        q.append = f.append;
        q.parents = f.parents;
        q.user = c.user[0] ? c.user : NULL;
        q.owner = f.owner;
        _cleanup_json_ json_object *r = pr_msg_encode(&pr_wk_write_file_schema, &q);
        dp_upload_spec spec = {.route = DP_ROUTE_FILE_PUT,
                               .method = "WriteFile",
                               .request = r,
                               .results = size_result,
                               .bytes = &d->metrics.file_bytes_in};
        dp__upload_start(d, req, &c, &spec);
}
