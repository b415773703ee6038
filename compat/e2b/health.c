/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET /health (envd's), /healthz, /readyz and /metrics.
 *
 * envd's /health is what the SDK's isRunning() asks through the sandbox's
 * URL: with E2b-Sandbox-Id it is a call (a thread, the caller's share) that
 * asks the public API about the sandbox and answers 204 while it runs, else
 * E2B's 502 {"sandboxId", "message", "code": 502}, which the SDK reads as
 * "not running". Without the header (a probe of the daemon itself) it is
 * 204 at once.
 *
 * /healthz (the process serves), /readyz (the public API answers its own
 * /readyz) and /metrics run on the loop and take no call, so no bound — one
 * caller's or everyone's — refuses them. /readyz probes the API on a thread
 * of its own, at most one probe at a time and at most one a second: requests
 * that arrive meanwhile wait for the probe in flight or get the last answer.
 */
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "connect.h"
#include "e2b.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/http_client.h"
#include "space/json.h"
#include "space/time.h"

#define STATUS_OK "{\"status\":\"ok\"}"
#define READY_OK "{\"status\":\"ok\",\"checks\":{\"api\":\"ok\"}}"
#define PROBE_TIMEOUT_MS 2000 /* each wait of a /readyz probe on the public API */
#define PROBE_FRESH_US (1000 * 1000) /* a probe answers the /readyz requests of the next second */
#define PROBE_MAX_ANSWER (64 * 1024)

typedef struct e2b_health {
        e2b_ctx *ctx;
        const e2b_binding *sandbox; /* envd's /health for a sandbox: a call */
        int m_health, m_healthz, m_readyz, m_metrics; /* metric routes of the loop's answers */
        struct event *ev; /* a probe ended: answer the waiters */
        pthread_mutex_t mu;
        pthread_t thread;
        bool thread_joinable, in_flight;
        int64_t checked_us; /* monotonic time of the last finished probe; 0: none */
        bool ready;
        char message[512]; /* why the API is not ready */
        sp_http_request **waiters; /* references held until answered */
        size_t nwaiters, cap;
} e2b_health;

static void count(e2b_health *h, int route, int status)
{
        e2b_metrics_request(h->ctx->metrics, route, status);
}

/* ---- envd's /health ---- */

/* The call for a sandbox: 204 while the public API says it runs, else E2B's
 * 502 for a sandbox that is not running (killed, timed out, paused). */
static void sandbox_health(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        _cleanup_error_ sp_error *e = NULL;
        e2b_envd ev;
        if (e2b_envd_open(call, ctx, &ev, &e) < 0) {
                e2b_rest_fail(call, e, 503);
                e2b_envd_close(&ev);
                return;
        }
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        sp_buf_append_str(&t, "/v1/sandboxes/", NULL);
        e2b_url_escape(&t, ev.sandbox_id);
        _cleanup_json_ json_object *sb = NULL, *o = NULL;
        int r = e2b_api_json(&ev.api, "GET", t.data, NULL, &sb, &e);
        if (r < 0 && e->code != SP_E_NOT_FOUND) {
                e2b_rest_fail(call, e, 503);
                e2b_envd_close(&ev);
                return;
        }
        json_object *st = NULL;
        const char *state = r >= 0 && json_object_object_get_ex(sb, "state", &st) ? json_object_get_string(st) : NULL;
        if (state && strcmp(state, "running") == 0) {
                e2b_call_reply(call, 204, NULL, NULL, "", 0);
                e2b_envd_close(&ev);
                return;
        }
        char msg[128];
        if (state)
                snprintf(msg, sizeof(msg), "The sandbox is not running (it is %.32s)", state);
        else
                snprintf(msg, sizeof(msg), "The sandbox was not found");
        o = json_object_new_object();
        json_object_object_add(o, "sandboxId", json_object_new_string(ev.sandbox_id));
        json_object_object_add(o, "message", json_object_new_string(msg));
        json_object_object_add(o, "code", json_object_new_int(502));
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        e2b_call_reply(call, 502, "application/json", NULL, s, strlen(s));
        e2b_envd_close(&ev);
}

static const e2b_route sandbox_route = {"GET", "/health", sandbox_health, false, 0};

static void envd_health(sp_http_request *req, void *userdata)
{
        e2b_health *h = userdata;
        if (sp_http_request_header(req, "E2b-Sandbox-Id")) {
                e2b_route_dispatch(req, h->sandbox);
                return;
        }
        sp_http_reply(req, 204, NULL, "", 0);
        count(h, h->m_health, 204);
}

/* ---- /healthz, /metrics ---- */

static void healthz(sp_http_request *req, void *userdata)
{
        e2b_health *h = userdata;
        sp_http_reply(req, 200, "application/json", STATUS_OK, sizeof(STATUS_OK) - 1);
        count(h, h->m_healthz, 200);
}

static void metrics(sp_http_request *req, void *userdata)
{
        e2b_health *h = userdata;
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        /* Counted first, so that the answer includes itself. */
        count(h, h->m_metrics, 200);
        if (e2b_caps_render(h->ctx->caps, &out, &e) < 0 ||
            (h->ctx->metrics && e2b_metrics_render(h->ctx->metrics, &out, &e) < 0)) {
                sp_http_reply_error(req, e);
                return;
        }
        sp_http_reply(req, 200, "text/plain; version=0.0.4", out.data ? out.data : "", out.len);
}

/* ---- /readyz ---- */

/* The probe's thread: the public API's own /readyz. */
static void *probe_main(void *userdata)
{
        e2b_health *h = userdata;
        const e2b_ctx *ctx = h->ctx;
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_buf_ sp_buf answer = SP_BUF_INIT;
        sp_http_client_config cfg = {.ca_file = ctx->ca_file,
                                     .connect_timeout_ms = PROBE_TIMEOUT_MS,
                                     .io_timeout_ms = PROBE_TIMEOUT_MS,
                                     .user_agent = "space-e2b"};
        sp_http_client *c = sp_http_client_new(ctx->api_url, &cfg, &e);
        sp_http_client_request rq = {.method = "GET", .target = "/readyz"};
        int status = c ? sp_http_client_do(c, &rq, PROBE_MAX_ANSWER, &answer, &e) : -1;
        sp_http_client_free(c);
        if (c)
                e2b_metrics_upstream(ctx->metrics, E2B_UPSTREAM_API, status, e);
        pthread_mutex_lock(&h->mu);
        h->ready = status == 200;
        if (status < 0) {
                snprintf(h->message, sizeof(h->message), "cannot reach the public API at %s: %s", ctx->api_url,
                         e ? e->message : "no answer");
        } else if (status != 200) {
                _cleanup_error_ sp_error *ae = NULL;
                sp_error_from_answer(answer.data, answer.len, status, &ae);
                snprintf(h->message, sizeof(h->message), "the public API at %s is not ready (%d): %s", ctx->api_url,
                         status, ae ? ae->message : "no message");
        }
        h->checked_us = sp_now_mono_us();
        if (h->checked_us == 0)
                h->checked_us = 1;
        h->in_flight = false;
        event_active(h->ev, EV_READ, 0);
        pthread_mutex_unlock(&h->mu);
        return NULL;
}

/* Answers req with the last probe's result. Lock held. */
static void answer_locked(e2b_health *h, sp_http_request *req)
{
        if (h->ready) {
                sp_http_reply(req, 200, "application/json", READY_OK, sizeof(READY_OK) - 1);
                count(h, h->m_readyz, 200);
        } else {
                sp_http_reply_errorf(req, SP_E_UNAVAILABLE, "%s", h->message);
                count(h, h->m_readyz, 503);
        }
}

/* On the loop once a probe has ended: every waiter gets its answer. */
static void on_probe(evutil_socket_t fd, short what, void *userdata)
{
        (void)fd;
        (void)what;
        e2b_health *h = userdata;
        pthread_mutex_lock(&h->mu);
        for (size_t i = 0; i < h->nwaiters; i++) {
                answer_locked(h, h->waiters[i]);
                sp_http_request_unref(h->waiters[i]);
        }
        h->nwaiters = 0;
        pthread_mutex_unlock(&h->mu);
}

static void readyz(sp_http_request *req, void *userdata)
{
        e2b_health *h = userdata;
        pthread_mutex_lock(&h->mu);
        if (!h->in_flight && h->checked_us && sp_now_mono_us() - h->checked_us < PROBE_FRESH_US) {
                answer_locked(h, req);
                pthread_mutex_unlock(&h->mu);
                return;
        }
        if (h->nwaiters == h->cap) {
                size_t cap = h->cap ? h->cap * 2 : 16;
                sp_http_request **w = realloc(h->waiters, cap * sizeof(*w));
                if (!w)
                        abort();
                h->waiters = w;
                h->cap = cap;
        }
        h->waiters[h->nwaiters++] = sp_http_request_ref(req);
        if (!h->in_flight) {
                if (h->thread_joinable)
                        pthread_join(h->thread, NULL); /* it has ended: in_flight is false */
                h->thread_joinable = false;
                int r = pthread_create(&h->thread, NULL, probe_main, h);
                if (r == 0) {
                        h->thread_joinable = true;
                        h->in_flight = true;
                } else {
                        h->ready = false;
                        snprintf(h->message, sizeof(h->message), "cannot start a probe of the public API: %s",
                                 strerror(r));
                        event_active(h->ev, EV_READ, 0);
                }
        }
        pthread_mutex_unlock(&h->mu);
}

int e2b_health_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err)
{
        e2b_health *h = calloc(1, sizeof(*h));
        if (!h)
                abort();
        h->ctx = ctx;
        pthread_mutex_init(&h->mu, NULL);
        ctx->health = h;
        h->ev = event_new(ctx->base, -1, 0, on_probe, h);
        if (!h->ev)
                return sp_error_set(err, SP_E_IO, "event_new failed");
        h->m_health = h->m_healthz = h->m_readyz = h->m_metrics = -1;
        if (ctx->metrics) {
                h->m_health = e2b_metrics_route(ctx->metrics, "GET", "/health");
                h->m_healthz = e2b_metrics_route(ctx->metrics, "GET", "/healthz");
                h->m_readyz = e2b_metrics_route(ctx->metrics, "GET", "/readyz");
                h->m_metrics = e2b_metrics_route(ctx->metrics, "GET", "/metrics");
        }
        if (!(h->sandbox = e2b_route_bind(ctx, &sandbox_route, false, err)) ||
            sp_http_route(srv, "GET", "/health", envd_health, h, err) < 0 ||
            sp_http_route(srv, "GET", "/healthz", healthz, h, err) < 0 ||
            sp_http_route(srv, "GET", "/readyz", readyz, h, err) < 0 ||
            sp_http_route(srv, "GET", "/metrics", metrics, h, err) < 0)
                return -1;
        return 0;
}

void e2b_health_free(e2b_ctx *ctx)
{
        e2b_health *h = ctx->health;
        if (!h)
                return;
        if (h->thread_joinable)
                pthread_join(h->thread, NULL);
        for (size_t i = 0; i < h->nwaiters; i++)
                sp_http_request_unref(h->waiters[i]);
        free(h->waiters);
        if (h->ev)
                event_free(h->ev);
        pthread_mutex_destroy(&h->mu);
        free(h);
        ctx->health = NULL;
}
