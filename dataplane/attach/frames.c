/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The two encoders of the attach stream, the only place where its formats
 * differ: server-sent events (output base64, one event per queued event) and
 * raw frames (space/attach_frames.h: output as it is, the consecutive output
 * events of one stream coalesced into frames of up to DP_ATTACH_FRAME_MAX
 * bytes, handed to the connection by reference rather than copied).
 *
 * Runs on the data plane's loop; an out holds a reference on its request.
 */
#include <event2/buffer.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "space/attach_frames.h"

struct dp_attach_out {
        dp_attach_format format;
        sp_sse *sse; /* SSE */
        sp_http_request *req; /* raw: our reference */
        struct evbuffer *frame; /* raw: the frame being handed over */
        dp_attach_out_cb on_writable, on_close;
        void *userdata;
        sp_buf scratch; /* SSE: an output event's base64 */
};

static void sse_writable(sp_sse *sse, void *userdata)
{
        dp_attach_out *o = userdata;
        o->on_writable(o->userdata);
}

static void sse_close(sp_sse *sse, void *userdata)
{
        dp_attach_out *o = userdata;
        o->on_close(o->userdata);
}

static void raw_writable(sp_http_request *req, void *userdata)
{
        dp_attach_out *o = userdata;
        o->on_writable(o->userdata);
}

static void raw_close(sp_http_request *req, void *userdata)
{
        dp_attach_out *o = userdata;
        o->on_close(o->userdata);
}

dp_attach_out *dp_attach_out_start(sp_http_request *req, dp_attach_format format, dp_attach_out_cb on_writable,
                                   dp_attach_out_cb on_close, void *userdata, sp_error **err)
{
        dp_attach_out *o = calloc(1, sizeof(*o));
        if (!o)
                abort();
        *o = (dp_attach_out){.format = format, .on_writable = on_writable, .on_close = on_close, .userdata = userdata};
        if (format == DP_ATTACH_SSE) {
                if (!(o->sse = sp_sse_start(req, err))) {
                        free(o);
                        return NULL;
                }
                sp_sse_on_writable(o->sse, sse_writable, o);
                sp_sse_on_close(o->sse, sse_close, o);
                return o;
        }
        if (!(o->frame = evbuffer_new()))
                abort();
        sp_http_response_header(req, "Cache-Control", "no-store");
        int r = sp_http_stream_start(req, 200, SP_ATTACH_FRAMES_CONTENT_TYPE, -1);
        if (r < 0) {
                evbuffer_free(o->frame);
                free(o);
                if (r == -SP_E_UNAVAILABLE)
                        sp_error_set(err, SP_E_UNAVAILABLE, "the client has gone");
                else
                        sp_error_set(err, SP_E_CONFLICT, "the request was already answered");
                return NULL;
        }
        o->req = sp_http_request_ref(req);
        sp_http_stream_on_writable(req, raw_writable, o);
        sp_http_request_on_close(req, raw_close, o);
        return o;
}

dp_attach_out *dp_attach_out_free(dp_attach_out *o)
{
        if (!o)
                return NULL;
        sp_sse_free(o->sse);
        if (o->req) {
                sp_http_stream_on_writable(o->req, NULL, NULL);
                sp_http_request_on_close(o->req, NULL, NULL);
                sp_http_stream_end(o->req); /* a no-op once the client has gone */
                sp_http_request_unref(o->req);
        }
        if (o->frame)
                evbuffer_free(o->frame);
        sp_buf_free(&o->scratch);
        free(o);
        return NULL;
}

static int sse_send(dp_attach_out *o, dp_attach_queue *q, uint64_t sent[2])
{
        while (q->head) {
                /* Only encode what can go out now. */
                int r = sp_http_stream_write(sp_sse_request(o->sse), NULL, 0);
                if (r != 0)
                        return r;
                dp_attach_event *ev = q->head;
                const char *data = ev->data.data;
                size_t len = ev->data.len;
                if (ev->stream) {
                        sp_buf_clear(&o->scratch);
                        sp_base64_encode(&o->scratch, data, len, 0, NULL);
                        data = o->scratch.data;
                        len = o->scratch.len;
                }
                char id[24];
                snprintf(id, sizeof(id), "%" PRIu64, ev->id);
                if ((r = sp_sse_send(o->sse, ev->has_id ? id : NULL, ev->name, data, len)) != 0)
                        return r;
                if (ev->stream)
                        sent[ev->stream - 1] += ev->data.len;
                dp_attach_queue_pop(q);
        }
        return 0;
}

static uint8_t raw_type(const dp_attach_event *ev)
{
        if (ev->stream)
                return (uint8_t)ev->stream;
        if (strcmp(ev->name, "start") == 0)
                return SP_ATTACH_FRAME_START;
        if (strcmp(ev->name, "exit") == 0)
                return SP_ATTACH_FRAME_EXIT;
        return SP_ATTACH_FRAME_ERROR;
}

void dp_attach_raw_encode(const dp_attach_event *ev, struct evbuffer *out)
{
        uint8_t type = raw_type(ev), head[SP_ATTACH_FRAME_HEADER_SIZE];
        const char *data = ev->data.data ? ev->data.data : "";
        size_t len = ev->data.len;
        if (type != SP_ATTACH_FRAME_START && type != SP_ATTACH_FRAME_EXIT) {
                sp_attach_frame_header(head, type, (uint32_t)len);
                evbuffer_add(out, head, sizeof(head));
                evbuffer_add(out, data, len);
                return;
        }
        /* Our own JSON object (never empty): its offset goes in before the closing brace. */
        char tail[48];
        int k = snprintf(tail, sizeof(tail), "%s\"offset\":%" PRIu64 "}", len > 2 ? "," : "", ev->id);
        size_t keep = len > 0 ? len - 1 : 0;
        sp_attach_frame_header(head, type, (uint32_t)(keep + (size_t)k + (len == 0)));
        evbuffer_add(out, head, sizeof(head));
        evbuffer_add(out, len ? data : "{", len ? keep : 1);
        evbuffer_add(out, tail, (size_t)k);
}

static void release(const void *data, size_t len, void *extra)
{
        free((void *)data);
}

/* Moves the output events at the head of q that share its stream, up to
 * DP_ATTACH_FRAME_MAX bytes (at least one event), into one frame. */
static void raw_output_frame(dp_attach_out *o, dp_attach_queue *q, uint64_t sent[2])
{
        int stream = q->head->stream;
        size_t total = 0;
        for (dp_attach_event *ev = q->head; ev && ev->stream == stream; ev = ev->next) {
                if (total && total + ev->data.len > DP_ATTACH_FRAME_MAX)
                        break;
                total += ev->data.len;
        }
        uint8_t head[SP_ATTACH_FRAME_HEADER_SIZE];
        sp_attach_frame_header(head, (uint8_t)stream, (uint32_t)total);
        evbuffer_add(o->frame, head, sizeof(head));
        while (total > 0) {
                dp_attach_event *ev = q->head;
                size_t len = ev->data.len;
                q->bytes -= len;
                char *data = sp_buf_steal(&ev->data);
                if (evbuffer_add_reference(o->frame, data, len, release, NULL) < 0) {
                        evbuffer_add(o->frame, data, len);
                        free(data);
                }
                sent[stream - 1] += len;
                total -= len;
                dp_attach_queue_pop(q);
        }
}

static int raw_send(dp_attach_out *o, dp_attach_queue *q, uint64_t sent[2])
{
        while (q->head) {
                /* Take events from the queue only when they can go out now. */
                int r = sp_http_stream_write_buffer(o->req, NULL);
                if (r != 0)
                        return r;
                if (q->head->stream) {
                        raw_output_frame(o, q, sent);
                } else {
                        dp_attach_raw_encode(q->head, o->frame);
                        dp_attach_queue_pop(q);
                }
                if ((r = sp_http_stream_write_buffer(o->req, o->frame)) != 0) {
                        evbuffer_drain(o->frame, evbuffer_get_length(o->frame));
                        return r < 0 ? r : -SP_E_INTERNAL; /* would-block cannot follow the probe */
                }
        }
        return 0;
}

int dp_attach_out_send(dp_attach_out *o, dp_attach_queue *q, uint64_t sent[2])
{
        return o->format == DP_ATTACH_SSE ? sse_send(o, q, sent) : raw_send(o, q, sent);
}

int dp_attach_out_keepalive(dp_attach_out *o)
{
        if (o->format == DP_ATTACH_SSE)
                return sp_sse_comment(o->sse, "keep-alive");
        uint8_t head[SP_ATTACH_FRAME_HEADER_SIZE];
        sp_attach_frame_header(head, SP_ATTACH_FRAME_KEEPALIVE, 0);
        return sp_http_stream_write(o->req, head, sizeof(head));
}
