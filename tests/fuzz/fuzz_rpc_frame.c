/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the RPC stream frame decoder over arbitrary bytes and splits,
 * and the END trailer and error-shape parsers on what it yields. The first
 * byte seeds how the rest is split; decoding in one piece and in pieces must
 * give the same frames and the same outcome. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/error_shape.h"
#include "space/json.h"
#include "space/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decodes everything, recording "type,len,payload" per frame into log. */
static int decode(const uint8_t *p, size_t n, uint32_t seed, sp_buf *log)
{
        sp_rpc_frame_decoder d;
        sp_rpc_frame_decoder_init(&d, 64 * 1024);
        int r = 0;
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
                sp_rpc_frame f;
                r = sp_rpc_frame_decoder_next(&d, p + off, piece, &used, &f, NULL);
                if (used > piece)
                        abort();
                off += used;
                if (r < 0)
                        break;
                if (r == 0 && used != piece)
                        abort();
                if (r == 1) {
                        sp_buf_appendf(log, NULL, "%d,%zu,", f.type, f.len);
                        sp_buf_append(log, f.payload, f.len, NULL);
                        if (f.type == SP_RPC_FRAME_END) {
                                json_object *t = NULL;
                                sp_error *e = NULL;
                                if (sp_rpc_trailer_parse(f.payload, f.len, &t, &e) == 0) {
                                        if (!t || e)
                                                abort();
                                } else if (!e || t) {
                                        abort();
                                }
                                json_object_put(t);
                                sp_error_free(e);
                        } else if (f.type == SP_RPC_FRAME_JSON) {
                                sp_error *e = NULL;
                                if (sp_error_from_answer(f.payload, f.len, 500, &e) >= 0 || !e)
                                        abort();
                                sp_error_free(e);
                        }
                }
        }
        sp_buf_appendf(log, NULL, "|%d|%d", r, sp_rpc_frame_decoder_partial(&d));
        sp_rpc_frame_decoder_free(&d);
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
