/* SPDX-License-Identifier: Apache-2.0 */
/* Route registration, token checks, and answers counted and logged once. */
#include <stdio.h>
#include <string.h>

#include "ingress/ingress.h"
#include "route/request.h"
#include "route/routes.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

/* The server's dispatcher: a name under the ingress domain goes to ingress. */
static bool ingress_host(const char *host, void *userdata)
{
        const dp *d = userdata;
        return dp_ingress_host_matches(host, d->ingress_domain);
}

int dp_routes_register(dp *d, sp_http_server *srv, sp_error **err)
{
        const sp_http_route_opts stream = {.flags = SP_HTTP_ROUTE_STREAM_BODY, .max_body = UINT64_MAX};
        const sp_http_route_opts upload = {.flags = SP_HTTP_ROUTE_STREAM_BODY, .max_body = d->limits.max_upload};
        const sp_http_route_opts control = {.max_body = DP_CONTROL_BODY_MAX};
        /* The token's max bounds an upload (dp_request_template_put(), the worker's max_bytes). */
        const sp_http_route_opts archive = {.flags = SP_HTTP_ROUTE_STREAM_BODY, .max_body = DP_CLAIM_UPLOAD_MAX};
        const struct {
                const char *method, *pattern;
                const sp_http_route_opts *opts;
                sp_http_handler handler;
        } routes[] = {
                {"GET", "/v1/sessions/{id}/attach", NULL, dp_attach_handler},
                {"POST", "/v1/sessions/{id}/stdin", &stream, dp_stdin_handler},
                {"POST", "/v1/sessions/{id}/close-stdin", &control, dp_close_stdin_handler},
                {"POST", "/v1/sessions/{id}/resize", &control, dp_resize_handler},
                {"POST", "/v1/sessions/{id}/signal", &control, dp_signal_handler},
                {"GET", "/v1/sandboxes/{id}/files", NULL, dp_file_get_handler},
                {"PUT", "/v1/sandboxes/{id}/files", &upload, dp_file_put_handler},
                {"PUT", "/v1/templates/{id}/upload", &archive, dp_template_put_handler},
                {"GET", "/healthz", NULL, dp_healthz_handler},
                {"GET", "/readyz", NULL, dp_readyz_handler},
                {"GET", "/metrics", NULL, dp_metrics_handler},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(routes); i++)
                if (sp_http_route_ex(srv, routes[i].method, routes[i].pattern, routes[i].opts, routes[i].handler, d,
                                     err) < 0)
                        return sp_error_wrap(err, "route %s %s", routes[i].method, routes[i].pattern);
        /* Ingress: any method, the body streamed whatever its size, by path
         * and by host name (ingress/ingress.h). */
        static const char *const ports[] = {"/v1/sandboxes/{id}/ports/{port}", "/v1/sandboxes/{id}/ports/{port}/*rest"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ports); i++)
                if (sp_http_route_ex(srv, "*", ports[i], &stream, dp_ingress_handler, d, err) < 0)
                        return sp_error_wrap(err, "route * %s", ports[i]);
        if (d->ingress_domain[0] &&
            sp_http_server_set_host_handler(srv, ingress_host, &stream, dp_ingress_handler, d, err) < 0)
                return sp_error_wrap(err, "ingress by host name");
        return 0;
}

/* Logs a refusal: the reason and, once verified, the key id — never the token. */
static void refuse(dp *d, sp_http_request *req, dp_route route, dp_refusal reason, const char *kid, const sp_error *e)
{
        d->metrics.refusals[reason]++;
        dp_metrics_request(&d->metrics, route, sp_errc_http_status(e->code));
        sp_log_info_kv(SP_KV("request_id", sp_http_request_id(req), "route", dp_route_name(route), "refusal",
                             dp_refusal_name(reason), "kid", kid ? kid : ""),
                       "token refused: %s", e->message);
        sp_http_reply_error(req, e);
}

sp_error *dp__revoked(dp *d, const dp_claims *c)
{
        sp_error *e = NULL;
        if (dp_revoked_has(d->revoked, c->akey))
                sp_error_set(&e, SP_E_UNAUTHENTICATED, "token revoked: the API key that minted it was revoked");
        else if (c->kind == DP_KIND_TEMPLATE && dp_revoked_has_template(d->revoked, c->template_id))
                sp_error_set(&e, SP_E_NOT_FOUND, "token revoked: template %s was deleted", c->template_id);
        return e;
}

int dp__authenticate(dp *d, sp_http_request *req, dp_route route, const dp_want *want, dp_claims *ret)
{
        _cleanup_error_ sp_error *e = NULL;
        dp_refusal reason = DP_REFUSE_MALFORMED;
        const char *token = NULL;
        if (dp_token_find(sp_http_request_parser(req), &token, &reason, &e) < 0) {
                refuse(d, req, route, reason, NULL, e);
                return -1;
        }
        _cleanup_json_ json_object *claims = dp_keys_verify(d->keys, token, sp_now_real_us() / SP_USEC_PER_SEC, &e);
        if (!claims) {
                reason = dp_token_refusal(e);
                if (reason == DP_REFUSE_UNKNOWN_KEY && d->unknown_key)
                        d->unknown_key(d->unknown_key_userdata);
                refuse(d, req, route, reason, NULL, e);
                return -1;
        }
        dp_claims c;
        if (dp_claims_decode(claims, &c, &e) < 0) {
                refuse(d, req, route, DP_REFUSE_CLAIMS, NULL, e);
                return -1;
        }
        if ((e = dp__revoked(d, &c))) {
                refuse(d, req, route, DP_REFUSE_REVOKED, c.kid, e);
                return -1;
        }
        if (dp_claims_check(&c, want, &reason, &e) < 0) {
                refuse(d, req, route, reason, c.kid, e);
                return -1;
        }
        *ret = c;
        return 0;
}

/* What the token names, as a log field: its session, sandbox or template. */
static const char *object_key(const dp_claims *c)
{
        switch (c->kind) {
        case DP_KIND_FILES:
        case DP_KIND_INGRESS:
                return "sandbox_id";
        case DP_KIND_TEMPLATE:
                return "template_id";
        case DP_KIND_SESSION:
        default:
                return "session_id";
        }
}

static const char *object_id(const dp_claims *c)
{
        switch (c->kind) {
        case DP_KIND_FILES:
        case DP_KIND_INGRESS:
                return c->sandbox;
        case DP_KIND_TEMPLATE:
                return c->template_id;
        case DP_KIND_SESSION:
        default:
                return c->session;
        }
}

void dp__answered(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims, int status, const char *what)
{
        dp_metrics_request(&d->metrics, route, status);
        char st[8];
        snprintf(st, sizeof(st), "%d", status);
        const char *object = "", *object_key_name = "session_id";
        if (claims) {
                object = object_id(claims);
                object_key_name = object_key(claims);
        }
        sp_log_info_kv(SP_KV("request_id", sp_http_request_id(req), "route", dp_route_name(route), "status", st,
                             object_key_name, object, "kid", claims ? claims->kid : ""),
                       "%s", what);
}

void dp__reply_error(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims, const sp_error *e)
{
        dp__answered(d, req, route, claims, sp_errc_http_status(e->code), e->message);
        sp_http_reply_error(req, e);
}

void dp__reply_ok(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims, json_object *obj)
{
        dp__answered(d, req, route, claims, 200, "ok");
        if (obj)
                sp_http_reply_json(req, 200, obj);
        else
                sp_http_reply(req, 200, "application/json", "{}", 2);
}

bool dp__stream_admit(dp *d, sp_http_request *req, dp_route route, const dp_claims *claims)
{
        _cleanup_error_ sp_error *e = NULL;
        if (sp_shares_take(d->streams, claims->tenant, "streams", &e) == 0) {
                /* Then a stream of the worker's connection, whose bound is far
                 * lower: one tenant must not hold all of one worker's streams. */
                if (dp_pool_take(d->pool, claims->worker, claims->worker_name, claims->tenant, &e) == 0) {
                        d->metrics.streams_open++;
                        return true;
                }
                sp_shares_give(d->streams, claims->tenant);
        }
        sp_log_warn_kv(SP_KV("request_id", sp_http_request_id(req), "route", dp_route_name(route), "tenant_id",
                             claims->tenant),
                       "stream refused: %s", e->message);
        dp__reply_error(d, req, route, claims, e);
        return false;
}

void dp__stream_release(dp *d, const dp_claims *claims)
{
        dp_pool_give(d->pool, claims->worker, claims->worker_name, claims->tenant);
        sp_shares_give(d->streams, claims->tenant);
        if (d->metrics.streams_open > 0)
                d->metrics.streams_open--;
}

sp_error *dp__worker_error(dp *d, const dp_claims *claims, const char *method, const sp_error *e)
{
        sp_error *out = NULL;
        if (e->code == SP_E_UNAVAILABLE || e->code == SP_E_TIMEOUT) {
                d->metrics.worker_errors++;
                bool tpl = claims->kind == DP_KIND_TEMPLATE;
                sp_log_warn_kv(SP_KV("worker", claims->worker, "method", method, tpl ? "template_id" : "sandbox_id",
                                     tpl ? claims->template_id : claims->sandbox),
                               "worker call failed: %s", e->message);
                sp_error_set(&out, e->code, "the %s's worker cannot be reached: %s", tpl ? "template" : "sandbox",
                             e->message);
        } else if (e->code == SP_E_NOT_FOUND && (claims->kind == DP_KIND_SESSION || claims->kind == DP_KIND_FILES)) {
                /* The token names the worker the sandbox was on when it was
                 * made; a suspended sandbox may have moved since
                 * (docs/controlplane.md, "Moves"): the API's next token names
                 * the new one. */
                sp_error_set(&out, e->code,
                             "%s (if the sandbox moved to another worker since this token was made, get a new token "
                             "from the API)",
                             e->message);
        } else {
                sp_error_set(&out, e->code, "%s", e->message);
        }
        return out;
}
