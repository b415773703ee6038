/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Routes (see e2b.h): each request of a route is handed to a call of its
 * own (call.h) holding its caller's share of the calls (caps.h), or refused
 * at once when that share or the total is held. Every answer is counted by
 * route and status (metrics.h).
 */
#include <string.h>

#include "connect.h"
#include "e2b.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"

#define MAX_ROUTES 64

struct e2b_binding {
        e2b_ctx *ctx;
        const e2b_route *route;
        bool by_api_key;
        int metric; /* the route's index in ctx->metrics */
};

/* Every route's binding (the server keeps pointers to them). */
static e2b_binding bindings[MAX_ROUTES];
static size_t nbindings;

/* Answers a call that could not start: the REST shape {"code": status,
 * "message"} or, on envd's Connect routes, {"code": "<connect code>",
 * "message"}. */
static void refuse(sp_http_request *req, const e2b_binding *b, const char *caller, const sp_error *e)
{
        int status = e->code == SP_E_LIMIT ? 429 : e->code == SP_E_UNAVAILABLE ? 503 : 500;
        const char *msg = status == 500 ? "cannot start the request" : e->message;
        /* Connect's routes are /<package>.<Service>/<Method>. */
        const char *p = b->route->pattern + 1;
        bool connect = memchr(p, '.', strcspn(p, "/")) != NULL;
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "code",
                               connect ? json_object_new_string(e2b_connect_code(e->code, NULL))
                                       : json_object_new_int(status));
        json_object_object_add(o, "message", json_object_new_string(msg));
        sp_log_warn_kv(SP_KV("request_id", sp_http_request_id(req), "route", b->route->pattern, "caller",
                             *caller ? caller : "anonymous"),
                       "request refused: %s", e->message);
        sp_http_reply_json(req, status, o);
        e2b_metrics_request(b->ctx->metrics, b->metric, status);
}

void e2b_route_dispatch(sp_http_request *req, const e2b_binding *b)
{
        _cleanup_error_ sp_error *e = NULL;
        char caller[E2B_CAPS_CALLER_LEN + 1];
        e2b_caps_caller(b->ctx->caps, &b->ctx->key, req, b->by_api_key, caller);
        e2b_call_count count = {b->ctx->metrics, b->metric};
        if (e2b_call_start(b->ctx->base, req, b->ctx->caps, caller, b->route->stream_body, count, b->route->fn, b->ctx,
                           &e) < 0)
                refuse(req, b, caller, e);
}

static void handle(sp_http_request *req, void *userdata)
{
        e2b_route_dispatch(req, userdata);
}

const e2b_binding *e2b_route_bind(e2b_ctx *ctx, const e2b_route *route, bool by_api_key, sp_error **err)
{
        if (nbindings == MAX_ROUTES) {
                sp_error_set(err, SP_E_LIMIT, "more than %d routes", MAX_ROUTES);
                return NULL;
        }
        e2b_binding *b = &bindings[nbindings++];
        *b = (e2b_binding){ctx, route, by_api_key, -1};
        if (ctx->metrics)
                b->metric = e2b_metrics_route(ctx->metrics, route->method, route->pattern);
        return b;
}

int e2b_routes_add(e2b_ctx *ctx, sp_http_server *srv, const e2b_route *routes, size_t n, bool by_api_key,
                   sp_error **err)
{
        for (size_t i = 0; i < n; i++) {
                const e2b_binding *b = e2b_route_bind(ctx, &routes[i], by_api_key, err);
                if (!b)
                        return -1;
                sp_http_route_opts o = {.max_body = routes[i].max_body,
                                        .flags = routes[i].stream_body ? SP_HTTP_ROUTE_STREAM_BODY : 0};
                if (sp_http_route_ex(srv, routes[i].method, routes[i].pattern, &o, handle, (void *)b, err) < 0)
                        return -1;
        }
        return 0;
}
