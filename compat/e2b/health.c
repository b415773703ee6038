/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /health (envd's), /healthz, /readyz and /metrics. They run on the
 * event loop and take no call, so a full call bound — one tenant's or
 * everyone's — never refuses them.
 */
#include "e2b.h"
#include "space/buf.h"
#include "space/cleanup.h"

#define STATUS_OK "{\"status\":\"ok\"}"

/* envd's health check: 204 while the daemon serves. */
static void envd_health(sp_http_request *req, void *userdata)
{
        (void)userdata;
        sp_http_reply(req, 204, NULL, "", 0);
}

/* Liveness, and readiness: the daemon keeps no state and learns nothing at
 * start, so it is ready once it listens (it does not probe the public API:
 * an API that is down is answered per request, 503). */
static void ok(sp_http_request *req, void *userdata)
{
        (void)userdata;
        sp_http_reply(req, 200, "application/json", STATUS_OK, sizeof(STATUS_OK) - 1);
}

static void metrics(sp_http_request *req, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        if (e2b_caps_render(ctx->caps, &out, &e) < 0) {
                sp_http_reply_error(req, e);
                return;
        }
        sp_http_reply(req, 200, "text/plain; version=0.0.4", out.data ? out.data : "", out.len);
}

int e2b_health_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err)
{
        if (sp_http_route(srv, "GET", "/health", envd_health, ctx, err) < 0 ||
            sp_http_route(srv, "GET", "/healthz", ok, ctx, err) < 0 ||
            sp_http_route(srv, "GET", "/readyz", ok, ctx, err) < 0 ||
            sp_http_route(srv, "GET", "/metrics", metrics, ctx, err) < 0)
                return -1;
        return 0;
}
