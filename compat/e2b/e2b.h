/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-e2b: what its modules share.
 *
 * The daemon serves the E2B control-plane REST API (rest.c) and the envd
 * protocol (process.c, filesystem.c, files.c over connect.c) on one
 * listener, translating each call onto the public API and the data plane
 * (api.c) on a thread of its own (call.c). It keeps no state but a table
 * of the access tokens it has seen, for signed file URLs (sign.c): a
 * sandbox's E2B id is its id, its envd access token seals the caller's API
 * key (token.c), and a process's pid finds its session through the API.
 */
#ifndef E2B_E2B_H
#define E2B_E2B_H

#include <stdbool.h>
#include <stdint.h>

#include "call.h"
#include "caps.h"
#include "metrics.h"
#include "space/http.h"
#include "sign.h"
#include "token.h"

/* The settings every handler reads; set up by main before serving, then
 * read-only (shared by all threads). */
typedef struct e2b_ctx {
        struct event_base *base;
        const char *api_url; /* the public API, e.g. http://127.0.0.1:7070 */
        const char *ca_file; /* CA for an https API and data plane; NULL: the system's */
        const char *dataplane_url; /* the data plane's origin as we reach it; NULL: the API's URLs' own */
        const char *envd_version; /* reported to the SDK */
        const char *template_default; /* our template for E2B's "base" */
        unsigned api_timeout_ms;
        e2b_token_key key;
        e2b_caps *caps; /* calls and watchers, shared out per caller (caps.h) */
        e2b_signers *signers; /* the tokens signed file URLs are checked against (sign.h) */
        /* Checks of signed file URLs that name no sandbox (every token is tried):
         * scan_rate a second on this replica; NULL: no limit. */
        struct sp_ratelimit *scans;
        double scan_rate;
        e2b_metrics *metrics; /* requests and upstream calls counted (metrics.h); may be NULL */
        struct e2b_health *health; /* /readyz's probe of the public API (health.c) */
} e2b_ctx;

/* One route of the daemon: fn runs on a call thread with the e2b_ctx as its
 * userdata (see call.h). max_body 0: 1 MiB. */
typedef struct e2b_route {
        const char *method, *pattern;
        e2b_call_fn fn;
        bool stream_body;
        uint64_t max_body;
} e2b_route;

/* Registers routes (the table must outlive the server). by_api_key: the
 * routes act with X-API-KEY (the REST API), else with the key sealed in
 * X-Access-Token (envd); a call holds that key's share (caps.h). Each
 * request's answer is counted by route and status (metrics.h). Routes are
 * registered on the loop before serving (router.c). */
int e2b_routes_add(e2b_ctx *ctx, sp_http_server *srv, const e2b_route *routes, size_t n, bool by_api_key,
                   sp_error **err);

/* A route bound to the daemon without a server route of its own: for a
 * handler on the loop that answers some requests itself and hands the
 * others to e2b_route_dispatch(). The route must outlive the server; the
 * binding lives as long as the process. NULL past 64 routes. */
typedef struct e2b_binding e2b_binding;
const e2b_binding *e2b_route_bind(e2b_ctx *ctx, const e2b_route *route, bool by_api_key, sp_error **err);
/* Runs req as a call of b's route (its caller's share held), or answers the
 * refusal: 429 (the caller's share) or 503 (the total). On the loop. */
void e2b_route_dispatch(sp_http_request *req, const e2b_binding *b);

/* Answers an E2B REST error: status with {"code": status, "message": msg}. */
void e2b_rest_error(e2b_call *call, int status, const char *msg);
/* The same for an error, its status from the platform's table (space/error.h)
 * but for a timeout (504) and unavailability (unavailable_status). */
void e2b_rest_fail(e2b_call *call, const sp_error *e, int unavailable_status);

/* Registers the control-plane REST routes. */
int e2b_rest_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err);
/* Registers envd's process.Process service (process.c). */
int e2b_process_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err);
/* Registers envd's filesystem.Filesystem service (filesystem.c). */
int e2b_filesystem_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err);
/* Registers envd's GET/POST /files (files.c). */
int e2b_files_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err);
/* Registers GET /health (envd's), /healthz, /readyz and /metrics (health.c)
 * and sets ctx->health; free it with e2b_health_free() after the server.
 * All but envd's /health for a sandbox are answered on the loop without a
 * call, so no bound refuses them. */
int e2b_health_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err);
/* Waits for a /readyz probe in flight and frees what e2b_health_register()
 * made; accepts ctx->health NULL. */
void e2b_health_free(e2b_ctx *ctx);

#endif
