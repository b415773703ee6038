/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the raw attach format's frames (space/attach_frames.h): headers,
 * output handed out in pieces as it arrives, other frames whole, the bound on
 * them, and the same result however the stream is split. */
#include <string.h>

#include "harness.h"
#include "space/attach_frames.h"
#include "space/cleanup.h"

static void frame(sp_buf *out, uint8_t type, const char *payload, size_t len)
{
        uint8_t head[SP_ATTACH_FRAME_HEADER_SIZE];
        sp_attach_frame_header(head, type, (uint32_t)len);
        sp_buf_append(out, head, sizeof(head), NULL);
        sp_buf_append(out, payload, len, NULL);
}

/* Decodes in pieces of step bytes: "type:payload;" per frame, output joined. */
static int decode_all(const sp_buf *in, size_t step, sp_buf *log, sp_error **err)
{
        sp_attach_frames d;
        sp_attach_frames_init(&d, 16);
        int r = 0;
        bool in_output = false;
        for (size_t off = 0; off < in->len && r >= 0;) {
                size_t len = in->len - off < step ? in->len - off : step, pos = 0;
                while (pos < len) {
                        size_t used = 0;
                        sp_attach_chunk c;
                        r = sp_attach_frames_next(&d, (const uint8_t *)in->data + off + pos, len - pos, &used, &c, err);
                        ck_assert_uint_le(used, len - pos);
                        pos += used;
                        if (r < 0)
                                break;
                        if (r == 0) {
                                ck_assert_uint_eq(pos, len);
                                continue;
                        }
                        if (!in_output)
                                sp_buf_appendf(log, NULL, "%u:", c.type);
                        if (c.type == SP_ATTACH_FRAME_STDOUT || c.type == SP_ATTACH_FRAME_STDERR)
                                ck_assert_uint_gt(c.len, 0);
                        sp_buf_append(log, c.data, c.len, NULL);
                        in_output = !c.last;
                        if (c.last)
                                sp_buf_append_str(log, ";", NULL);
                }
                off += len;
        }
        if (r >= 0 && sp_attach_frames_partial(&d))
                sp_buf_append_str(log, "partial", NULL);
        sp_attach_frames_free(&d);
        return r < 0 ? r : 0;
}

START_TEST(header_bytes)
{
        uint8_t h[SP_ATTACH_FRAME_HEADER_SIZE];
        sp_attach_frame_header(h, SP_ATTACH_FRAME_STDERR, 0x01020304);
        const uint8_t want[] = {2, 1, 2, 3, 4};
        ck_assert(memcmp(h, want, sizeof(want)) == 0);
}
END_TEST

START_TEST(frames_any_split)
{
        _cleanup_buf_ sp_buf in = SP_BUF_INIT;
        frame(&in, SP_ATTACH_FRAME_START, "{\"offset\":0}", 12);
        frame(&in, SP_ATTACH_FRAME_STDOUT, "hello\n", 6);
        frame(&in, SP_ATTACH_FRAME_STDOUT, "", 0); /* nothing handed out */
        frame(&in, SP_ATTACH_FRAME_STDERR, "a\0b", 3);
        frame(&in, SP_ATTACH_FRAME_KEEPALIVE, "", 0);
        frame(&in, 9, "later", 5); /* a type a later data plane may add: handed out, whole */
        frame(&in, SP_ATTACH_FRAME_EXIT, "{\"code\":0}", 10);
        const char want[] = "0:{\"offset\":0};1:hello\n;2:a\0b;5:;9:later;3:{\"code\":0};";
        for (size_t step = 1; step <= in.len; step++) {
                _cleanup_buf_ sp_buf log = SP_BUF_INIT;
                ck_assert_int_eq(decode_all(&in, step, &log, NULL), 0);
                ck_assert_uint_eq(log.len, sizeof(want) - 1);
                ck_assert_msg(memcmp(log.data, want, log.len) == 0, "step %zu: %s", step, log.data);
        }
}
END_TEST

START_TEST(output_unbounded_json_bounded)
{
        /* Output frames stream through whatever their size; the bound is for the others. */
        _cleanup_buf_ sp_buf in = SP_BUF_INIT;
        char big[1000];
        memset(big, 'x', sizeof(big));
        frame(&in, SP_ATTACH_FRAME_STDOUT, big, sizeof(big));
        frame(&in, SP_ATTACH_FRAME_EXIT, "{\"code\":0,\"x\":\"yyyy\"}", 21);
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(decode_all(&in, 7, &log, &e), -SP_E_TOO_LARGE);
        ck_assert_uint_eq(log.len, 2 + sizeof(big) + 1);
        ck_assert_msg(strstr(e->message, "21 bytes"), "%s", e->message);

        /* A failed decoder keeps failing; a reset one starts again. */
        sp_attach_frames d;
        sp_attach_frames_init(&d, 4);
        size_t used;
        sp_attach_chunk c;
        const uint8_t head[] = {SP_ATTACH_FRAME_ERROR, 0, 0, 0, 5};
        ck_assert_int_lt(sp_attach_frames_next(&d, head, sizeof(head), &used, &c, NULL), 0);
        ck_assert_int_lt(sp_attach_frames_next(&d, head, 1, &used, &c, NULL), 0);
        sp_attach_frames_reset(&d);
        const uint8_t ok[] = {SP_ATTACH_FRAME_ERROR, 0, 0, 0, 2, '{', '}'};
        ck_assert_int_eq(sp_attach_frames_next(&d, ok, sizeof(ok), &used, &c, NULL), 1);
        ck_assert_uint_eq(used, sizeof(ok));
        ck_assert_uint_eq(c.len, 2);
        /* Truncated inside a header, then inside a payload. */
        ck_assert_int_eq(sp_attach_frames_next(&d, ok, 3, &used, &c, NULL), 0);
        ck_assert(sp_attach_frames_partial(&d));
        ck_assert_int_eq(sp_attach_frames_next(&d, ok + 3, 3, &used, &c, NULL), 0);
        ck_assert(sp_attach_frames_partial(&d));
        ck_assert_int_eq(sp_attach_frames_next(&d, ok + 6, 1, &used, &c, NULL), 1);
        ck_assert(!sp_attach_frames_partial(&d));
        ck_assert(memcmp(c.data, "{}", 2) == 0);
        sp_attach_frames_free(&d);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("common_attach_frames");
        TCase *tc = tcase_create("attach_frames");
        tcase_add_test(tc, header_bytes);
        tcase_add_test(tc, frames_any_split);
        tcase_add_test(tc, output_unbounded_json_bounded);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
