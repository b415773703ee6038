/* SPDX-License-Identifier: Apache-2.0 */
/* Request bodies into worker streams, paced by the worker. */
#include <stdlib.h>
#include <string.h>

#include "route/upload.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

/* Bytes per DATA frame. */
#define CHUNK (64u * 1024)

typedef struct upload {
        dp *d;
        sp_http_request *req;
        dp_claims claims;
        dp_route route;
        const char *method;
        const dp_upload_result *results;
        uint64_t *bytes;
        sp_rpc_stream *rpc; /* NULL once ended or cancelled */
        sp_buf pending; /* body bytes the worker stream could not take yet */
        uint64_t sent;
        bool blocked; /* the stream's send queue is full: wait for on_writable */
        bool body_done, send_closed;
} upload;

static void upload_free(upload *u)
{
        if (u->rpc)
                sp_rpc_stream_cancel(u->rpc);
        sp_http_request_on_close(u->req, NULL, NULL);
        sp_http_request_unref(u->req);
        sp_buf_free(&u->pending);
        dp__stream_release(u->d, &u->claims);
        free(u);
}

/* Answers and ends the upload. */
static void upload_fail(upload *u, const sp_error *e)
{
        dp__reply_error(u->d, u->req, u->route, &u->claims, e);
        upload_free(u);
}

/* Sends what is pending; pauses or resumes the body to match. */
static void flush(upload *u)
{
        while (u->rpc && !u->blocked && u->pending.len > 0) {
                size_t n = u->pending.len < CHUNK ? u->pending.len : CHUNK;
                int r = sp_rpc_stream_send(u->rpc, SP_RPC_FRAME_DATA, u->pending.data, n, NULL);
                if (r < 0)
                        return; /* the stream is over: its on_end answers */
                sp_buf_consume(&u->pending, n);
                u->sent += n;
                *u->bytes += n;
                u->blocked = r == 1;
        }
        if (!u->rpc)
                return;
        if (u->pending.len > 0 || u->blocked) {
                sp_http_request_pause_body(u->req);
                return;
        }
        sp_http_request_resume_body(u->req);
        if (u->body_done && !u->send_closed) {
                u->send_closed = true;
                sp_rpc_stream_close_send(u->rpc, NULL);
        }
}

static void on_body(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        upload *u = userdata;
        /* A token revoked meanwhile (its key, or its template deleted) ends the upload at its next bytes. */
        sp_error *revoked = dp__revoked(u->d, &u->claims);
        if (revoked) {
                upload_fail(u, revoked);
                sp_error_free(revoked);
                return;
        }
        if (len == 0) {
                u->body_done = true;
        } else if (sp_buf_append(&u->pending, data, len, NULL) < 0) {
                _cleanup_error_ sp_error *e = NULL;
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                upload_fail(u, e);
                return;
        }
        flush(u);
}

static void on_writable(sp_rpc_stream *s, void *userdata)
{
        upload *u = userdata;
        u->blocked = false;
        flush(u);
}

/* The answer's object: the spec's fields of the worker's trailer. */
static json_object *answer(const upload *u, json_object *trailer, sp_error **err)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        for (const dp_upload_result *f = u->results; f->name; f++) {
                json_object *v = NULL;
                int64_t n = 0;
                const char *str = NULL;
                if (f->type == json_type_int) {
                        if (sp_json_get_int(trailer, f->name, true, 0, INT64_MAX, &n, err) < 0)
                                return NULL;
                        v = json_object_new_int64(n);
                } else if (f->type == json_type_string) {
                        if (sp_json_get_string(trailer, f->name, false, DP_UPLOAD_MAX_STRING, &str, err) < 0)
                                return NULL;
                        if (!str)
                                continue;
                        v = json_object_new_string(str);
                } else if (sp_json_get_object(trailer, f->name, true, &v, err) < 0) {
                        return NULL;
                } else {
                        v = json_object_get(v);
                }
                json_object_object_add(o, f->name, v);
        }
        return TAKE_PTR(o);
}

static void on_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *userdata)
{
        upload *u = userdata;
        u->rpc = NULL;
        if (err) {
                _cleanup_error_ sp_error *e = dp__worker_error(u->d, &u->claims, u->method, err);
                upload_fail(u, e);
                return;
        }
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *o = answer(u, trailer, &e);
        if (!o) {
                sp_error_wrap(&e, "the worker's answer to %s", u->method);
                upload_fail(u, e);
                return;
        }
        dp__reply_ok(u->d, u->req, u->route, &u->claims, o);
        upload_free(u);
}

static void on_client_close(sp_http_request *req, void *userdata)
{
        upload *u = userdata;
        dp__answered(u->d, req, u->route, &u->claims, 499, "the client went away during the upload");
        upload_free(u);
}

void dp__upload_start(dp *d, sp_http_request *req, const dp_claims *claims, const dp_upload_spec *spec)
{
        _cleanup_error_ sp_error *e = NULL;
        upload *u = calloc(1, sizeof(*u));
        if (!u) {
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                dp__stream_release(d, claims);
                dp__reply_error(d, req, spec->route, claims, e);
                return;
        }
        u->d = d;
        u->req = sp_http_request_ref(req);
        u->claims = *claims;
        u->route = spec->route;
        u->method = spec->method;
        u->results = spec->results;
        u->bytes = spec->bytes;
        static const sp_rpc_stream_ops ops = {.on_writable = on_writable, .on_end = on_end};
        sp_rpc_client *cli = dp_pool_get(d->pool, claims->worker, claims->worker_name, &e);
        if (cli)
                u->rpc = sp_rpc_client_stream(cli, spec->method, spec->request, 0, &ops, u, &e);
        if (!u->rpc || sp_http_request_read_body(req, on_body, u, &e) < 0) {
                upload_fail(u, e);
                return;
        }
        sp_http_request_on_close(req, on_client_close, u);
}
