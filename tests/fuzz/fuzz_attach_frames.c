/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the raw attach format's decoder (space/attach_frames.h) over
 * arbitrary bytes and splits. The first byte seeds how the rest is split;
 * decoding in one piece and in pieces must give the same frames (output
 * pieces joined back into their frames) and the same outcome; output pieces
 * are never empty, a whole input is always consumed unless a chunk is
 * handed out, and non-output frames stay within the bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/attach_frames.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define JSON_MAX 1024

static bool is_output(uint8_t t)
{
        return t == SP_ATTACH_FRAME_STDOUT || t == SP_ATTACH_FRAME_STDERR;
}

/* Decodes everything, recording "type,len,payload" per frame into log. */
static int decode(const uint8_t *p, size_t n, uint32_t seed, sp_buf *log)
{
        sp_attach_frames d;
        sp_attach_frames_init(&d, JSON_MAX);
        sp_buf frame = SP_BUF_INIT; /* the output frame being joined */
        int r = 0, frame_type = -1;
        size_t off = 0;
        while (off < n) {
                size_t piece = n - off;
                if (seed) {
                        seed = seed * 1103515245u + 12345u;
                        size_t cap = 1 + (seed >> 16) % 64;
                        if (piece > cap)
                                piece = cap;
                }
                size_t used = 0;
                sp_attach_chunk c;
                r = sp_attach_frames_next(&d, p + off, piece, &used, &c, NULL);
                if (used > piece)
                        abort();
                off += used;
                if (r < 0)
                        break;
                if (r == 0) {
                        if (used != piece)
                                abort();
                        continue;
                }
                if (is_output(c.type)) {
                        if (c.len == 0 || (frame_type >= 0 && frame_type != c.type))
                                abort();
                        frame_type = c.type;
                        sp_buf_append(&frame, c.data, c.len, NULL);
                        if (!c.last)
                                continue;
                        sp_buf_appendf(log, NULL, "%d,%zu,", c.type, frame.len);
                        sp_buf_append(log, frame.data, frame.len, NULL);
                        sp_buf_clear(&frame);
                        frame_type = -1;
                        continue;
                }
                if (!c.last || c.len > JSON_MAX || frame_type >= 0)
                        abort();
                sp_buf_appendf(log, NULL, "%d,%zu,", c.type, c.len);
                sp_buf_append(log, c.data, c.len, NULL);
        }
        /* Output pieces of a frame cut short by the end of input: logged as they are. */
        sp_buf_appendf(log, NULL, "|%d|%zu|%d", r, frame.len, r < 0 ? 0 : sp_attach_frames_partial(&d));
        sp_buf_free(&frame);
        sp_attach_frames_free(&d);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        uint32_t seed = data[0] | 1u;
        sp_buf whole = SP_BUF_INIT, split = SP_BUF_INIT;
        decode(data + 1, size - 1, 0, &whole);
        decode(data + 1, size - 1, seed, &split);
        if (whole.len != split.len || memcmp(whole.data, split.data, whole.len) != 0)
                abort();
        sp_buf_free(&whole);
        sp_buf_free(&split);
        return 0;
}
