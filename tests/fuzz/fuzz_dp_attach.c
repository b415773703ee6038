/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: what an attach reads. With a first byte of 'G' the input is an
 * HTTP request head: where the attach starts (Last-Event-ID, ?offset=) and
 * where its token is; a start is only ever reported with an offset within
 * DP_OFFSET_MAX, a refusal always with an error. Otherwise the input is a run
 * of worker AttachSession frames (1 type byte, 2-byte length, payload) fed to
 * the event decoder: the offset only moves forward, by exactly the output
 * bytes queued, every event's id is an offset that was reached, a refusal
 * leaves the queue as it was, and nothing follows the last event.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "auth/token.h"
#include "route/request.h"
#include "space/http_parser.h"
#include "space/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void request(const uint8_t *data, size_t size)
{
        sp_http_parser *p = sp_http_parser_new(NULL);
        size_t used = 0, blen = 0;
        const char *body = NULL;
        if (sp_http_parser_feed(p, data, size, &used, &body, &blen) == SP_HTTP_PARSE_HEAD) {
                bool given = false;
                uint64_t off = 0;
                sp_error *e = NULL;
                if (dp_request_attach(p, &given, &off, &e) == 0) {
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

static void frames(const uint8_t *data, size_t size)
{
        dp_sse_queue q = {0};
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
                for (dp_sse_event *ev = q.head; ev; ev = ev->next)
                        events++;
                size_t bytes = q.bytes;
                uint64_t before = off;
                sp_error *e = NULL;
                int r = dp_attach_decode(type, copy, n, "ses_fuzz", start, &off, &q, &e);
                free(copy);
                size_t after = 0;
                uint64_t raw = 0;
                for (dp_sse_event *ev = q.head; ev; ev = ev->next, after++)
                        if (after >= events)
                                raw += ev->raw;
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
        for (dp_sse_event *ev = q.head; ev; ev = ev->next) {
                if (ev->stream && (ev->raw == 0 || ev->raw > DP_ATTACH_EVENT_MAX || !ev->id[0]))
                        abort();
                if (ev->id[0] && strtoull(ev->id, NULL, 10) > off)
                        abort();
        }
        dp_sse_queue_clear(&q);
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
