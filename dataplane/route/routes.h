/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data plane's HTTP routes (proto/spec/dataplane.md) and what every
 * handler shares: authentication of the request's token, answers that are
 * counted and logged once, the bound on streams, and how worker failures are
 * reported. Handlers live one kind per file: attach/attach.c (the event
 * stream), route/sessions.c (stdin and control), route/files.c,
 * route/templates.c (template uploads), route/ops.c (health, readiness,
 * metrics).
 */
#ifndef DP_ROUTE_ROUTES_H
#define DP_ROUTE_ROUTES_H

#include <json-c/json.h>

#include "auth/token.h"
#include "dp.h"
#include "space/error.h"
#include "space/http.h"

/* Registers every route on srv with d as their state (borrowed; it must
 * outlive the server). */
int dp_routes_register(dp *d, sp_http_server *srv, sp_error **err);

/* ---- for the handlers ---- */

/* Finds, verifies and checks the request's token against want. On success
 * fills *ret and returns 0; otherwise answers the refusal itself (401, 403
 * or 400 in the one error shape, counted by reason) and returns <0. A token
 * signed by a key the set lacks also calls d->unknown_key. */
int dp__authenticate(dp *d, sp_http_request *req, dp_route route, const dp_want *want, dp_claims *ret);

/* Whether the claims' token was revoked since it was minted: its API key
 * revoked (SP_E_UNAUTHENTICATED), or, for a template token, its template
 * deleted (SP_E_NOT_FOUND). A new error saying so, or NULL. */
sp_error *dp__revoked(dp *d, const dp_claims *c);

/* Answers req with e (status from its code), counts and logs the answer
 * under route with the claims' kid and object (claims may be NULL). */
void dp__reply_error(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims, const sp_error *e);
/* Answers 200 with obj (borrowed; NULL sends {}), counted and logged. */
void dp__reply_ok(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims, json_object *obj);
/* Counts and logs an answer already sent (a stream that started with 200). */
void dp__answered(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims, int status, const char *what);

/* Takes one of the d->limits.max_streams slots for the claims' tenant, and
 * one of the streams of the connection to the claims' worker (dp_pool_take).
 * False when the tenant holds its share of either already (answered 429
 * resource_exhausted) or all slots of either are taken (answered 503
 * unavailable); refusals are counted per tenant for /metrics.
 * dp__stream_release() gives both back, with the same claims. */
bool dp__stream_admit(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims);
void dp__stream_release(dp *d, const dp_claims *claims);

/* The error a worker call ended with, for the client: counts the failures
 * to reach the worker (SP_E_UNAVAILABLE, SP_E_TIMEOUT) and logs them with
 * the worker's address; the worker's own answers pass through unchanged,
 * but for "not found" on a session or files token, which also says that a
 * sandbox that moved to another worker needs a new token. Returns a new
 * error. */
sp_error *dp__worker_error(dp *d, const dp_claims *claims, const char *method, const sp_error *e);

/* Handlers, registered by dp_routes_register(). userdata is the dp. */
void dp_attach_handler(sp_http_request *req, void *userdata);
void dp_stdin_handler(sp_http_request *req, void *userdata);
void dp_close_stdin_handler(sp_http_request *req, void *userdata);
void dp_resize_handler(sp_http_request *req, void *userdata);
void dp_signal_handler(sp_http_request *req, void *userdata);
void dp_file_get_handler(sp_http_request *req, void *userdata);
void dp_file_put_handler(sp_http_request *req, void *userdata);
void dp_template_put_handler(sp_http_request *req, void *userdata);
void dp_healthz_handler(sp_http_request *req, void *userdata);
void dp_readyz_handler(sp_http_request *req, void *userdata);
void dp_metrics_handler(sp_http_request *req, void *userdata);

#endif
