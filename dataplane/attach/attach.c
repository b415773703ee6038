/* SPDX-License-Identifier: Apache-2.0 */
/* GET /v1/sessions/{id}/attach: GetSession, then AttachSession as events or raw frames. */
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "route/request.h"
#include "route/routes.h"
#include "space/attach_frames.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"

typedef struct attach {
        dp *d;
        sp_http_request *req; /* our reference (the stream holds one more once it started) */
        dp_attach_format format;
        dp_attach_out *out; /* once the stream started */
        dp_claims claims;
        bool offset_given;
        uint64_t start; /* the offset the stream starts at */
        uint64_t offset; /* the next output offset expected from the worker */
        uint64_t sent_bytes[2]; /* output sent, stdout and stderr */
        sp_rpc_stream *rpc; /* NULL once it ended or was cancelled */
        bool paused; /* the worker stream is paused until the queue drains */
        bool last_queued; /* exit or error queued: the stream ends after the queue */
        bool get_pending, client_gone;
        dp_attach_queue queue;
        struct event *keepalive;
        struct event *flush; /* raw: sends what a burst of worker frames queued, coalesced */
} attach;

static void attach_free(attach *a)
{
        if (a->rpc)
                sp_rpc_stream_cancel(a->rpc);
        if (a->keepalive)
                event_free(a->keepalive);
        if (a->flush)
                event_free(a->flush);
        dp_attach_queue_clear(&a->queue);
        if (a->out) {
                a->d->metrics.attach_open--;
                dp_attach_out_free(a->out);
        } else {
                sp_http_request_on_close(a->req, NULL, NULL);
        }
        sp_http_request_unref(a->req);
        dp__stream_release(a->d, &a->claims);
        free(a);
}

/* The stream is over (everything queued was sent, or the client left). */
static void attach_end(attach *a, const char *why)
{
        char what[160];
        snprintf(what, sizeof(what),
                 "attach ended (%s): %" PRIu64 " stdout and %" PRIu64 " stderr bytes from offset %" PRIu64, why,
                 a->sent_bytes[0], a->sent_bytes[1], a->start);
        dp__answered(a->d, a->req, DP_ROUTE_ATTACH, &a->claims, 200, what);
        attach_free(a);
}

static void keepalive_arm(attach *a)
{
        struct timeval tv = {a->d->limits.keepalive_ms / 1000, (a->d->limits.keepalive_ms % 1000) * 1000};
        evtimer_add(a->keepalive, &tv);
}

/* Sends queued events until the client's connection is full. */
static void pump(attach *a)
{
        if (a->queue.head) {
                uint64_t before[2] = {a->sent_bytes[0], a->sent_bytes[1]};
                int r = dp_attach_out_send(a->out, &a->queue, a->sent_bytes);
                for (int i = 0; i < 2; i++)
                        a->d->metrics.output_bytes[i] += a->sent_bytes[i] - before[i];
                if (r < 0) {
                        attach_end(a, "the client went away");
                        return;
                }
                keepalive_arm(a);
        }
        if (a->queue.head) {
                if (a->rpc && !a->paused) {
                        a->paused = true;
                        sp_rpc_stream_pause(a->rpc);
                }
                return;
        }
        if (a->last_queued || !a->rpc) {
                attach_end(a, a->last_queued ? "the session ended" : "the worker stream ended");
                return;
        }
        if (a->paused) {
                a->paused = false;
                sp_rpc_stream_resume(a->rpc);
        }
}

static void on_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *userdata)
{
        attach *a = userdata;
        if (a->last_queued)
                return;
        _cleanup_error_ sp_error *e = NULL;
        int r = dp_attach_decode(type, p, n, a->claims.session, a->start, &a->offset, &a->queue, &e);
        if (r < 0) {
                sp_log_warn_kv(SP_KV("worker", a->claims.worker, "session_id", a->claims.session), "attach: %s",
                               e->message);
                sp_rpc_stream_cancel(a->rpc);
                a->rpc = NULL;
                dp_attach_error_event(&a->queue, SP_E_INTERNAL, e->message);
                r = 1;
        }
        if (r == 1)
                a->last_queued = true;
        /* Raw frames: what the rest of this burst of worker frames brings goes in the same frame, up to its size. */
        if (a->format == DP_ATTACH_RAW && !a->last_queued && a->queue.bytes < DP_ATTACH_FRAME_MAX) {
                event_active(a->flush, EV_TIMEOUT, 0);
                return;
        }
        pump(a);
}

static void on_flush(evutil_socket_t fd, short what, void *userdata)
{
        pump(userdata);
}

static void on_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *userdata)
{
        attach *a = userdata;
        a->rpc = NULL;
        if (err && !a->last_queued) {
                _cleanup_error_ sp_error *e = dp__worker_error(a->d, &a->claims, "AttachSession", err);
                dp_attach_error_event(&a->queue, e->code, e->message);
                a->last_queued = true;
        }
        pump(a);
}

static void on_writable(void *userdata)
{
        pump(userdata);
}

static void on_out_close(void *userdata)
{
        attach_end(userdata, "the client went away");
}

static void on_keepalive(evutil_socket_t fd, short what, void *userdata)
{
        attach *a = userdata;
        if (dp_attach_out_keepalive(a->out) < 0) {
                attach_end(a, "the client went away");
                return;
        }
        keepalive_arm(a);
}

static void on_client_close(sp_http_request *req, void *userdata)
{
        /* Before the stream started: GetSession is still out, and its answer frees the attach. */
        attach *a = userdata;
        a->client_gone = true;
}

/* Starts the event stream and the worker's AttachSession at a->start. */
static void stream_start(attach *a)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_http_request_on_close(a->req, NULL, NULL);
        if (!(a->keepalive = evtimer_new(a->d->base, on_keepalive, a)) ||
            !(a->flush = event_new(a->d->base, -1, 0, on_flush, a))) {
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                dp__reply_error(a->d, a->req, DP_ROUTE_ATTACH, &a->claims, e);
                attach_free(a);
                return;
        }
        _cleanup_json_ json_object *r =
                pr_msg_encode(&pr_wk_attach_session_schema,
                              &(pr_wk_attach_session){.session_id = a->claims.session, .offset = (int64_t)a->start});
        static const sp_rpc_stream_ops ops = {.on_frame = on_frame, .on_end = on_end};
        sp_rpc_client *cli = dp_pool_get(a->d->pool, a->claims.worker, a->claims.worker_name, &e);
        if (cli)
                a->rpc = sp_rpc_client_stream(cli, "AttachSession", r, 0, &ops, a, &e);
        if (!a->rpc) {
                dp__reply_error(a->d, a->req, DP_ROUTE_ATTACH, &a->claims, e);
                attach_free(a);
                return;
        }
        if (!(a->out = dp_attach_out_start(a->req, a->format, on_writable, on_out_close, a, &e))) {
                attach_free(a); /* the client left: nobody to answer */
                return;
        }
        a->d->metrics.attach_open++;
        keepalive_arm(a);
        char from[64];
        snprintf(from, sizeof(from), "%" PRIu64, a->start);
        sp_log_info_kv(SP_KV("request_id", sp_http_request_id(a->req), "route", "attach", "session_id",
                             a->claims.session, "kid", a->claims.kid, "offset", from, "format",
                             a->format == DP_ATTACH_RAW ? "raw" : "sse"),
                       "attach started");
}

static void session_done(json_object *resp, const sp_error *err, void *userdata)
{
        attach *a = userdata;
        a->get_pending = false;
        if (a->client_gone) {
                attach_free(a);
                return;
        }
        _cleanup_error_ sp_error *e = NULL;
        int64_t first = 0, end = 0;
        bool reclaimed = false;
        if (err) {
                e = dp__worker_error(a->d, &a->claims, "GetSession", err);
        } else if (sp_json_get_int(resp, "output_start", true, 0, INT64_MAX, &first, &e) < 0 ||
                   sp_json_get_int(resp, "output_end", true, first, INT64_MAX, &end, &e) < 0 ||
                   sp_json_get_bool(resp, "output_reclaimed", false, &reclaimed, &e) < 0) {
                sp_error_wrap(&e, "the worker's answer to GetSession");
        } else if (reclaimed && (a->offset_given ? a->start < (uint64_t)first : first > 0)) {
                /* Not an empty stream: the client would take it for output that never was. */
                sp_error_set(&e, SP_E_NOT_FOUND,
                             "the output of session %s was reclaimed: its sandbox's session logs reached their "
                             "budget on the worker; its exit status remains (GET /v1/sessions/%s)",
                             a->claims.session, a->claims.session);
        } else if (a->offset_given && a->start < (uint64_t)first) {
                sp_error_set(&e, SP_E_NOT_FOUND,
                             "offset %" PRIu64 " is no longer retained (the output starts at %" PRId64 ")", a->start,
                             first);
        } else if (a->offset_given && a->start > (uint64_t)end) {
                sp_error_set(&e, SP_E_INVALID, "offset %" PRIu64 " is past the end of the output (%" PRId64 ")",
                             a->start, end);
        }
        if (e) {
                dp__reply_error(a->d, a->req, DP_ROUTE_ATTACH, &a->claims, e);
                attach_free(a);
                return;
        }
        if (!a->offset_given)
                a->start = (uint64_t)first;
        a->offset = a->start;
        if (strcmp(sp_http_request_method(a->req), "HEAD") == 0) {
                /* The headers of the stream, without following it. */
                sp_http_response_header(a->req, "Cache-Control", "no-store");
                dp__answered(a->d, a->req, DP_ROUTE_ATTACH, &a->claims, 200, "attach headers");
                sp_http_reply(a->req, 200,
                              a->format == DP_ATTACH_RAW ? SP_ATTACH_FRAMES_CONTENT_TYPE : "text/event-stream", NULL,
                              0);
                attach_free(a);
                return;
        }
        stream_start(a);
}

void dp_attach_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        dp_want want = {.kind = DP_KIND_SESSION, .session = sp_http_request_param(req, "id")};
        dp_claims c;
        if (dp__authenticate(d, req, DP_ROUTE_ATTACH, &want, &c) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        bool given = false, raw = false;
        uint64_t offset = 0;
        if (dp_request_attach(sp_http_request_parser(req), &given, &offset, &raw, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_ATTACH, &c, e);
                return;
        }
        if (!dp__stream_admit(d, req, DP_ROUTE_ATTACH, &c))
                return;
        attach *a = calloc(1, sizeof(*a));
        if (!a) {
                dp__stream_release(d, &c);
                sp_error_set(&e, SP_E_LIMIT, "out of memory");
                dp__reply_error(d, req, DP_ROUTE_ATTACH, &c, e);
                return;
        }
        *a = (attach){.d = d,
                      .req = sp_http_request_ref(req),
                      .claims = c,
                      .format = raw ? DP_ATTACH_RAW : DP_ATTACH_SSE,
                      .offset_given = given,
                      .start = offset,
                      .queue = {.event_max = raw ? DP_ATTACH_FRAME_MAX : DP_ATTACH_EVENT_MAX}};
        _cleanup_json_ json_object *r =
                pr_msg_encode(&pr_wk_session_ref_schema, &(pr_wk_session_ref){.session_id = c.session});
        sp_rpc_client *cli = dp_pool_get(d->pool, c.worker, c.worker_name, &e);
        if (!cli || sp_rpc_client_call(cli, "GetSession", r, d->limits.rpc_timeout_ms, session_done, a, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_ATTACH, &c, e);
                attach_free(a);
                return;
        }
        a->get_pending = true;
        sp_http_request_on_close(req, on_client_close, a);
}
