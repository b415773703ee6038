/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: spacectl's server-sent events parser (cli/sse.h). The input
 * is fed whole, then in pieces whose sizes come from its first byte, then
 * byte by byte: the three must dispatch the same events and end the same
 * way, and every event must keep the bounds (data, type and id lengths, a
 * type never empty).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int record(const ctl_sse_event *ev, void *userdata, sp_error **err)
{
        sp_buf *log = userdata;
        size_t tl = strlen(ev->type), il = ev->id ? strlen(ev->id) : 0;
        if (tl == 0 || tl > CTL_SSE_MAX_NAME || il > CTL_SSE_MAX_NAME || ev->data_len > CTL_SSE_MAX_DATA ||
            ev->data[ev->data_len] != '\0')
                abort();
        sp_buf_appendf(log, NULL, "%s|%d|%s|%zu|", ev->type, ev->id != NULL, ev->id ? ev->id : "", ev->data_len);
        sp_buf_append(log, ev->data, ev->data_len, NULL);
        sp_buf_append(log, "\n", 1, NULL);
        return 0;
}

/* Feeds data in pieces of the given size (0: whole); returns the feed's result. */
static int run(const uint8_t *data, size_t size, size_t piece, sp_buf *log)
{
        ctl_sse_parser p;
        ctl_sse_init(&p);
        int r = 0;
        for (size_t off = 0; off < size && r == 0;) {
                size_t n = piece && piece < size - off ? piece : size - off;
                sp_error *e = NULL;
                r = ctl_sse_feed(&p, data + off, n, record, log, &e);
                if ((r < 0) != (e != NULL))
                        abort();
                sp_error_free(e);
                off += n;
        }
        ctl_sse_free(&p);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        sp_buf whole = SP_BUF_INIT, pieces = SP_BUF_INIT, bytes = SP_BUF_INIT;
        int r1 = run(data, size, 0, &whole);
        int r2 = run(data, size, size ? (size_t)data[0] % 7 + 1 : 1, &pieces);
        int r3 = run(data, size, 1, &bytes);
        if (r1 != r2 || r1 != r3 || whole.len != pieces.len || whole.len != bytes.len ||
            (whole.len &&
             (memcmp(whole.data, pieces.data, whole.len) != 0 || memcmp(whole.data, bytes.data, whole.len) != 0)))
                abort();
        sp_buf_free(&whole);
        sp_buf_free(&pieces);
        sp_buf_free(&bytes);
        return 0;
}
