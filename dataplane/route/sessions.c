/* SPDX-License-Identifier: Apache-2.0 */
/* Session routes besides attach: stdin (a streamed body), close-stdin,
 * resize and signal (unary worker calls). */
#include <stdlib.h>

#include "route/request.h"
#include "route/routes.h"
#include "route/upload.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

/* Checks the token of a session route with write scope. */
static int session_auth(dp *d, sp_http_request *req, dp_route route, dp_claims *ret)
{
        dp_want want = {.kind = DP_KIND_SESSION, .write = true, .session = sp_http_request_param(req, "id")};
        return dp__authenticate(d, req, route, &want, ret);
}

static const dp_upload_result written_result[] = {{"written", json_type_int}, {NULL, json_type_null}};

void dp_stdin_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        dp_claims c;
        if (session_auth(d, req, DP_ROUTE_STDIN, &c) < 0)
                return;
        bool close = false;
        _cleanup_error_ sp_error *e = NULL;
        if (dp_request_stdin(sp_http_request_parser(req), &close, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_STDIN, &c, e);
                return;
        }
        if (!dp__stream_admit(d, req, DP_ROUTE_STDIN, &c))
                return;
        _cleanup_json_ json_object *r =
                pr_msg_encode(&pr_wk_write_stdin_schema, &(pr_wk_write_stdin){.session_id = c.session, .close = close});
        dp_upload_spec spec = {.route = DP_ROUTE_STDIN,
                               .method = "WriteStdin",
                               .request = r,
                               .results = written_result,
                               .bytes = &d->metrics.stdin_bytes};
        dp__upload_start(d, req, &c, &spec);
}

/* A control request: one unary worker call, answered {} or with its error. */
typedef struct control {
        dp *d;
        sp_http_request *req;
        dp_claims claims;
        dp_route route;
        const char *method;
} control;

static void control_done(json_object *resp, const sp_error *err, void *userdata)
{
        control *c = userdata;
        if (err) {
                _cleanup_error_ sp_error *e = dp__worker_error(c->d, &c->claims, c->method, err);
                dp__reply_error(c->d, c->req, c->route, &c->claims, e);
        } else {
                dp__reply_ok(c->d, c->req, c->route, &c->claims, NULL);
        }
        sp_http_request_unref(c->req);
        free(c);
}

/* Calls method with request (borrowed) on the token's worker and answers req when it returns. */
static void control_call(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims, const char *method,
                         json_object *request)
{
        _cleanup_error_ sp_error *e = NULL;
        control *c = calloc(1, sizeof(*c));
        if (!c) {
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                dp__reply_error(d, req, route, claims, e);
                return;
        }
        *c = (control){.d = d, .claims = *claims, .route = route, .method = method};
        sp_rpc_client *cli = dp_pool_get(d->pool, claims->worker, claims->worker_name, &e);
        if (!cli || sp_rpc_client_call(cli, method, request, d->limits.rpc_timeout_ms, control_done, c, &e) < 0) {
                free(c);
                dp__reply_error(d, req, route, claims, e);
                return;
        }
        c->req = sp_http_request_ref(req);
}

void dp_close_stdin_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        dp_claims c;
        if (session_auth(d, req, DP_ROUTE_CLOSE_STDIN, &c) < 0)
                return;
        static const char *const allowed[] = {"token", NULL};
        _cleanup_error_ sp_error *e = NULL;
        if (dp_request_check_query(sp_http_request_parser(req), allowed, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_CLOSE_STDIN, &c, e);
                return;
        }
        _cleanup_json_ json_object *r =
                pr_msg_encode(&pr_wk_session_ref_schema, &(pr_wk_session_ref){.session_id = c.session});
        control_call(d, req, DP_ROUTE_CLOSE_STDIN, &c, "CloseStdin", r);
}

void dp_resize_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        dp_claims c;
        if (session_auth(d, req, DP_ROUTE_RESIZE, &c) < 0)
                return;
        static const char *const allowed[] = {"token", NULL};
        size_t len = 0;
        const char *body = sp_http_request_body(req, &len);
        int rows = 0, cols = 0;
        _cleanup_error_ sp_error *e = NULL;
        if (dp_request_check_query(sp_http_request_parser(req), allowed, &e) < 0 ||
            dp_request_resize(body, len, &rows, &cols, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_RESIZE, &c, e);
                return;
        }
        _cleanup_json_ json_object *r =
                pr_msg_encode(&pr_wk_resize_session_schema,
                              &(pr_wk_resize_session){.session_id = c.session, .rows = rows, .cols = cols});
        control_call(d, req, DP_ROUTE_RESIZE, &c, "ResizeSession", r);
}

void dp_signal_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        dp_claims c;
        if (session_auth(d, req, DP_ROUTE_SIGNAL, &c) < 0)
                return;
        static const char *const allowed[] = {"token", NULL};
        size_t len = 0;
        const char *body = sp_http_request_body(req, &len);
        int sig = 0;
        _cleanup_error_ sp_error *e = NULL;
        if (dp_request_check_query(sp_http_request_parser(req), allowed, &e) < 0 ||
            dp_request_signal(body, len, &sig, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_SIGNAL, &c, e);
                return;
        }
        _cleanup_json_ json_object *r = pr_msg_encode(&pr_wk_signal_session_schema,
                                                      &(pr_wk_signal_session){.session_id = c.session, .signal = sig});
        control_call(d, req, DP_ROUTE_SIGNAL, &c, "SignalSession", r);
}
