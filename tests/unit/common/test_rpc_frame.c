/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: RPC stream frames, the error shape and END trailers (pure codecs). */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/rpc.h"

/* Decodes `in` fed in pieces of `step` bytes; appends "type:payload;" per frame to out. */
static int decode_all(const uint8_t *in, size_t n, size_t step, sp_buf *out, sp_error **err)
{
        sp_rpc_frame_decoder d;
        sp_rpc_frame_decoder_init(&d, 0);
        int r = 0;
        for (size_t off = 0; off < n && r >= 0;) {
                size_t len = n - off < step ? n - off : step;
                size_t pos = 0;
                while (pos < len) {
                        size_t used = 0;
                        sp_rpc_frame f;
                        r = sp_rpc_frame_decoder_next(&d, in + off + pos, len - pos, &used, &f, err);
                        ck_assert_uint_le(used, len - pos);
                        pos += used;
                        if (r < 0)
                                break;
                        if (r == 1) {
                                sp_buf_appendf(out, NULL, "%d:", f.type);
                                sp_buf_append(out, f.payload, f.len, NULL);
                                sp_buf_append_str(out, ";", NULL);
                        } else {
                                ck_assert_uint_eq(pos, len);
                        }
                }
                off += len;
        }
        if (r >= 0 && sp_rpc_frame_decoder_partial(&d))
                sp_buf_append_str(out, "partial", NULL);
        sp_rpc_frame_decoder_free(&d);
        return r < 0 ? r : 0;
}

START_TEST(frame_roundtrip_every_split)
{
        _cleanup_buf_ sp_buf wire = SP_BUF_INIT;
        ck_assert_int_eq(sp_rpc_frame_append(&wire, SP_RPC_FRAME_JSON, "{\"a\":1}", 7, NULL), 0);
        ck_assert_int_eq(sp_rpc_frame_append(&wire, SP_RPC_FRAME_DATA, "", 0, NULL), 0);
        ck_assert_int_eq(sp_rpc_frame_append(&wire, SP_RPC_FRAME_DATA, "hello", 5, NULL), 0);
        ck_assert_int_eq(sp_rpc_frame_append(&wire, SP_RPC_FRAME_END, "{\"ok\":true}", 11, NULL), 0);
        ck_assert_uint_eq(wire.len, 4 * 5 + 7 + 0 + 5 + 11);
        ck_assert_int_eq((uint8_t)wire.data[0], 1);
        ck_assert_int_eq((uint8_t)wire.data[4], 7);
        const char *want = "1:{\"a\":1};0:;0:hello;2:{\"ok\":true};";
        for (size_t step = 1; step <= wire.len; step++) {
                _cleanup_buf_ sp_buf out = SP_BUF_INIT;
                ck_assert_int_eq(decode_all((const uint8_t *)wire.data, wire.len, step, &out, NULL), 0);
                ck_assert_str_eq(out.data, want);
        }
        /* A truncated stream leaves a partial frame. */
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        ck_assert_int_eq(decode_all((const uint8_t *)wire.data, wire.len - 3, 2, &out, NULL), 0);
        ck_assert_ptr_nonnull(strstr(out.data, "partial"));
}
END_TEST

START_TEST(frame_big_payload_split)
{
        size_t n = 300000;
        _cleanup_free_ char *payload = malloc(n);
        for (size_t i = 0; i < n; i++)
                payload[i] = (char)(i * 7 + 3);
        _cleanup_buf_ sp_buf wire = SP_BUF_INIT;
        ck_assert_int_eq(sp_rpc_frame_append(&wire, SP_RPC_FRAME_DATA, payload, n, NULL), 0);
        sp_rpc_frame_decoder d;
        sp_rpc_frame_decoder_init(&d, 0);
        size_t off = 0, frames = 0;
        while (off < wire.len) {
                size_t chunk = wire.len - off < 4093 ? wire.len - off : 4093, used = 0;
                sp_rpc_frame f;
                int r = sp_rpc_frame_decoder_next(&d, (const uint8_t *)wire.data + off, chunk, &used, &f, NULL);
                ck_assert_int_ge(r, 0);
                off += used;
                if (r == 1) {
                        frames++;
                        ck_assert_uint_eq(f.len, n);
                        ck_assert(memcmp(f.payload, payload, n) == 0);
                }
        }
        ck_assert_uint_eq(frames, 1);
        sp_rpc_frame_decoder_free(&d);
}
END_TEST

START_TEST(frame_limits_and_bad_types)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        uint8_t h[SP_RPC_FRAME_HEADER_SIZE];
        ck_assert_int_eq(sp_rpc_frame_header(h, SP_RPC_FRAME_DATA, SP_RPC_MAX_FRAME + 1, &e), -SP_E_TOO_LARGE);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_rpc_frame_append(&b, (sp_rpc_frame_type)7, "x", 1, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        ck_assert_uint_eq(b.len, 0);

        /* A header announcing more than the maximum fails before any payload. */
        const uint8_t big[] = {0x00, 0x00, 0x40, 0x00, 0x01, 'x'};
        sp_rpc_frame_decoder d;
        sp_rpc_frame_decoder_init(&d, 0);
        size_t used;
        sp_rpc_frame f;
        ck_assert_int_eq(sp_rpc_frame_decoder_next(&d, big, sizeof(big), &used, &f, &e), -SP_E_TOO_LARGE);
        ck_assert_uint_eq(used, 5);
        sp_error_freep(&e);
        /* and stays failed */
        ck_assert_int_eq(sp_rpc_frame_decoder_next(&d, (const uint8_t *)"\0\0\0\0\0", 5, &used, &f, &e),
                         -SP_E_TOO_LARGE);
        ck_assert_uint_eq(used, 0);
        sp_error_freep(&e);
        sp_rpc_frame_decoder_free(&d);

        /* A smaller configured bound applies. */
        sp_rpc_frame_decoder_init(&d, 4);
        const uint8_t five[] = {0x01, 0, 0, 0, 5};
        ck_assert_int_eq(sp_rpc_frame_decoder_next(&d, five, sizeof(five), &used, &f, &e), -SP_E_TOO_LARGE);
        sp_error_freep(&e);
        sp_rpc_frame_decoder_free(&d);

        sp_rpc_frame_decoder_init(&d, 0);
        const uint8_t badtype[] = {0x03, 0, 0, 0, 0};
        ck_assert_int_eq(sp_rpc_frame_decoder_next(&d, badtype, sizeof(badtype), &used, &f, &e), -SP_E_INVALID);
        sp_rpc_frame_decoder_free(&d);
}
END_TEST

START_TEST(error_body_roundtrip)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(sp_error_shape_encode(&b, SP_E_NOT_FOUND, "sandbox \"x\" not found", NULL), 0);
        ck_assert_str_eq(b.data, "{\"error\":{\"code\":\"not_found\",\"message\":\"sandbox \\\"x\\\" not found\"}}");
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_error_from_answer(b.data, b.len, 500, &e), -SP_E_NOT_FOUND);
        ck_assert_str_eq(e->message, "sandbox \"x\" not found");
        sp_error_freep(&e);
        /* Not the shape: the status decides. */
        ck_assert_int_eq(sp_error_from_answer("<html>", 6, 503, &e), -SP_E_UNAVAILABLE);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_error_from_answer("{\"error\":{\"code\":1}}", 20, 413, &e), -SP_E_TOO_LARGE);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_error_from_answer(NULL, 0, 418, &e), -SP_E_INTERNAL);
        sp_error_freep(&e);
        /* An unknown code string is internal. */
        const char *odd = "{\"error\":{\"code\":\"weird\",\"message\":\"m\"}}";
        ck_assert_int_eq(sp_error_from_answer(odd, strlen(odd), 400, &e), -SP_E_INTERNAL);
}
END_TEST

START_TEST(trailer_encode_parse)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_json_ json_object *extra = json_object_new_object();
        json_object_object_add(extra, "bytes", json_object_new_int(42));
        json_object_object_add(extra, "ok", json_object_new_boolean(0)); /* cannot override */
        ck_assert_int_eq(sp_rpc_trailer_encode(&b, NULL, extra, NULL), 0);
        _cleanup_json_ json_object *t = NULL;
        ck_assert_int_eq(sp_rpc_trailer_parse(b.data, b.len, &t, NULL), 0);
        json_object *v = NULL;
        ck_assert(json_object_object_get_ex(t, "bytes", &v) && json_object_get_int(v) == 42);
        ck_assert(json_object_object_get_ex(t, "ok", &v) && json_object_get_boolean(v));

        sp_buf_clear(&b);
        _cleanup_error_ sp_error *src = NULL, *e = NULL;
        sp_error_set(&src, SP_E_TIMEOUT, "too slow");
        ck_assert_int_eq(sp_rpc_trailer_encode(&b, src, NULL, NULL), 0);
        json_object *none = NULL;
        ck_assert_int_eq(sp_rpc_trailer_parse(b.data, b.len, &none, &e), -SP_E_TIMEOUT);
        ck_assert_ptr_null(none);
        ck_assert_str_eq(e->message, "too slow");
        sp_error_freep(&e);

        const char *bad[] = {"{\"ok\":false}", "[]", "{\"ok\":true,\"error\":{}}", "{", "{\"ok\":1}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_int_lt(sp_rpc_trailer_parse(bad[i], strlen(bad[i]), &none, &e), 0);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                ck_assert_ptr_null(none);
                sp_error_freep(&e);
        }
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("rpc_frame");
        TCase *tc = tcase_create("codec");
        tcase_add_test(tc, frame_roundtrip_every_split);
        tcase_add_test(tc, frame_big_payload_split);
        tcase_add_test(tc, frame_limits_and_bad_types);
        tcase_add_test(tc, error_body_roundtrip);
        tcase_add_test(tc, trailer_encode_parse);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
