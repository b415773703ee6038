/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: what an attach reads. With a first byte of 'G' the input is an
 * HTTP request head: where the attach starts (Last-Event-ID, ?offset=) and
 * where its token is; a start is only ever reported with an offset within
 * DP_OFFSET_MAX, a refusal always with an error. Otherwise the input is a run
 * of worker AttachSession frames (1 type byte, 2-byte length, payload) fed to
 * the event decoder: the offset only moves forward, by exactly the output
 * bytes queued, every event's id is an offset that was reached, a refusal
 * leaves the queue as it was, and nothing follows the last event; the same
 * events encoded as raw frames decode to the same output bytes.
 */
#include <event2/buffer.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "auth/token.h"
#include "route/request.h"
#include "space/attach_frames.h"
#include "space/http_parser.h"
#include "space/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request(const uint8_t *data, size_t size)
{
        sp_http_parser *p = sp_http_parser_new(NULL);
        size_t used = 0, blen = 0;
        const char *body = NULL;
        if (sp_http_parser_feed(p, data, size, &used, &body, &blen) == SP_HTTP_PARSE_HEAD) {
                bool given = false, raw = false;
                uint64_t off = 0;
                sp_error *e = NULL;
                if (dp_request_attach(p, &given, &off, &raw, &e) == 0) {
                        if (e || off > DP_OFFSET_MAX || (!given && off != 0))
                                abort();
                } else if (!e || e->code != SP_E_INVALID) {
                        abort();
                }
                sp_error_free(e);
                e = NULL;
                const char *tok = NULL;
                dp_refusal reason = DP_REFUSE__MAX;
                if (dp_token_find(p, &tok, &reason, &e) == 0) {
                        if (e || !tok || !*tok || strchr(tok, ' '))
                                abort();
                } else if (!e || reason >= DP_REFUSE__MAX) {
                        abort();
                }
                sp_error_free(e);
        }
        sp_http_parser_free(p);
}

/* Every event of q in the raw format, read back with the clients' decoder:
 * the frames carry the same output bytes, in order, and end with q's last. */
static void raw_roundtrip(const dp_attach_queue *q)
{
        struct evbuffer *out = evbuffer_new();
        sp_buf want = SP_BUF_INIT, got = SP_BUF_INIT;
        size_t events = 0;
        for (dp_attach_event *ev = q->head; ev; ev = ev->next, events++) {
                dp_attach_raw_encode(ev, out);
                if (ev->stream)
                        sp_buf_append(&want, ev->data.data, ev->data.len, NULL);
        }
        size_t len = evbuffer_get_length(out), at = 0, frames = 0;
        const uint8_t *p = evbuffer_pullup(out, -1);
        sp_attach_frames d;
        sp_attach_frames_init(&d, 0);
        while (at < len) {
                size_t used = 0;
                sp_attach_chunk c;
                int r = sp_attach_frames_next(&d, p + at, len - at, &used, &c, NULL);
                if (r < 0 || used == 0)
                        abort();
                at += used;
                if (r == 1 && (c.type == SP_ATTACH_FRAME_STDOUT || c.type == SP_ATTACH_FRAME_STDERR))
                        sp_buf_append(&got, c.data, c.len, NULL);
                if (r == 1 && c.last)
                        frames++;
        }
        if (sp_attach_frames_partial(&d) || frames != events || got.len != want.len ||
            (want.len && memcmp(got.data, want.data, want.len) != 0))
                abort();
        sp_attach_frames_free(&d);
        sp_buf_free(&want);
        sp_buf_free(&got);
        evbuffer_free(out);
}

static void frames(const uint8_t *data, size_t size)
{
        dp_attach_queue q = {0};
        uint64_t off = 1000, start = 1000;
        bool ended = false;
        size_t i = 0;
        while (i + 3 <= size && !ended) {
                int type = data[i] % 4;
                size_t n = (size_t)data[i + 1] << 8 | data[i + 2];
                i += 3;
                if (n > size - i)
                        n = size - i;
                uint8_t *copy = malloc(n ? n : 1);
                memcpy(copy, data + i, n);
                i += n;
                size_t events = 0;
                for (dp_attach_event *ev = q.head; ev; ev = ev->next)
                        events++;
                size_t bytes = q.bytes;
                uint64_t before = off;
                sp_error *e = NULL;
                int r = dp_attach_decode(type, copy, n, "ses_fuzz", start, &off, &q, &e);
                free(copy);
                size_t after = 0;
                uint64_t raw = 0;
                for (dp_attach_event *ev = q.head; ev; ev = ev->next, after++)
                        if (after >= events)
                                raw += ev->stream ? ev->data.len : 0;
                if (r < 0) {
                        if (!e || after != events || q.bytes != bytes || off != before)
                                abort();
                } else {
                        if (e || off < before || off - before != raw)
                                abort();
                        ended = r == 1;
                }
                sp_error_free(e);
        }
        for (dp_attach_event *ev = q.head; ev; ev = ev->next) {
                if (ev->stream && (ev->data.len == 0 || ev->data.len > DP_ATTACH_EVENT_MAX || !ev->has_id))
                        abort();
                if (ev->has_id && ev->id > off)
                        abort();
        }
        raw_roundtrip(&q);
        dp_attach_queue_clear(&q);
        if (q.bytes != 0)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size > 65536)
                return 0;
        if (size && data[0] == 'G')
                request(data, size);
        else if (size)
                frames(data + 1, size - 1);
        return 0;
}
