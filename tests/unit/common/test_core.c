/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: errors, buffers, base64/hex, ids, time and durations. */
#include <errno.h>
#include <string.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/error.h"
#include "space/id.h"
#include "space/time.h"

START_TEST(error_set_wrap_and_map)
{
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_error_set(&e, SP_E_NOT_FOUND, "sandbox %s not found", "sbx_x"), -SP_E_NOT_FOUND);
        ck_assert_str_eq(e->message, "sandbox sbx_x not found");
        /* the first error wins */
        sp_error_set(&e, SP_E_INVALID, "second");
        ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
        ck_assert_int_eq(sp_error_wrap(&e, "delete"), -SP_E_NOT_FOUND);
        ck_assert_str_eq(e->message, "delete: sandbox sbx_x not found");
        ck_assert_str_eq(sp_errc_name(e->code), "not_found");
        ck_assert_int_eq(sp_errc_http_status(e->code), 404);
        ck_assert_int_eq(sp_errc_http_status(SP_E_TOO_LARGE), 413);
        ck_assert_int_eq(sp_errc_from_errno(EEXIST), SP_E_CONFLICT);
        /* NULL err is allowed and still returns the code */
        ck_assert_int_eq(sp_error_set(NULL, SP_E_LIMIT, "x"), -SP_E_LIMIT);
}
END_TEST

START_TEST(error_errno_message)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set_errno(&e, SP_E_IO, ENOENT, "open %s", "/x");
        ck_assert_int_eq(e->sys_errno, ENOENT);
        ck_assert_str_eq(e->message, "open /x: No such file or directory");
}
END_TEST

START_TEST(buf_grow_and_limit)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        for (int i = 0; i < 1000; i++)
                ck_assert_int_eq(sp_buf_appendf(&b, NULL, "%d,", i), 0);
        ck_assert_uint_eq(strlen(b.data), b.len);
        sp_buf_consume(&b, 2);
        ck_assert(strncmp(b.data, "1,2,", 4) == 0);

        _cleanup_error_ sp_error *e = NULL;
        sp_buf small = {.limit = 4};
        ck_assert_int_eq(sp_buf_append_str(&small, "abcd", &e), 0);
        ck_assert_int_lt(sp_buf_append_str(&small, "e", &e), 0);
        ck_assert_int_eq(e->code, SP_E_TOO_LARGE);
        ck_assert_str_eq(small.data, "abcd");
        sp_buf_free(&small);
}
END_TEST

START_TEST(base64_roundtrip)
{
        unsigned char all[256];
        for (int i = 0; i < 256; i++)
                all[i] = (unsigned char)i;
        for (int url = 0; url < 2; url++)
                for (size_t n = 0; n <= 256; n += 1) {
                        _cleanup_buf_ sp_buf enc = SP_BUF_INIT, dec = SP_BUF_INIT;
                        ck_assert_int_eq(sp_base64_encode(&enc, all, n, url, NULL), 0);
                        ck_assert_int_eq(sp_base64_decode(&dec, enc.data, enc.len, url, NULL), 0);
                        ck_assert_uint_eq(dec.len, n);
                        ck_assert(n == 0 || memcmp(dec.data, all, n) == 0);
                }
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_base64_encode(&b, "hi?>", 4, 0, NULL);
        ck_assert_str_eq(b.data, "aGk/Pg==");
        sp_buf_clear(&b);
        ck_assert_int_lt(sp_base64_decode(&b, "aGk/Pg==", 8, 1, NULL), 0); /* '/' not in url alphabet */
        ck_assert_int_lt(sp_base64_decode(&b, "a", 1, 0, NULL), 0);
        ck_assert_int_lt(sp_base64_decode(&b, "aGl=", 4, 0, NULL), 0); /* non-canonical bits */
        sp_buf_clear(&b);
        sp_hex_encode(&b, "\x00\xff", 2, NULL);
        ck_assert_str_eq(b.data, "00ff");
}
END_TEST

START_TEST(ids)
{
        char id[SP_ID_MAX], id2[SP_ID_MAX];
        ck_assert_int_eq(sp_id_new("sbx", id, NULL), 0);
        ck_assert_int_eq(sp_id_new("sbx", id2, NULL), 0);
        ck_assert_str_ne(id, id2);
        ck_assert_uint_eq(strlen(id), 4 + SP_ID_RANDOM_CHARS);
        ck_assert(sp_id_valid(id, "sbx"));
        ck_assert(sp_id_valid(id, NULL));
        ck_assert(!sp_id_valid(id, "op"));
        ck_assert(!sp_id_valid("sbx_../../etc/passwd", "sbx"));
        ck_assert(!sp_id_valid("sbx_", "sbx"));
        ck_assert(!sp_id_valid("SBX_0123456789abcdefghjk", NULL));
        ck_assert(sp_id_valid("sbx_0123456789abcdefghjk", "sbx"));
        ck_assert_int_lt(sp_id_new("Bad", id, NULL), 0);
        ck_assert_int_lt(sp_id_new("toolongprefix", id, NULL), 0);
}
END_TEST

START_TEST(time_rfc3339)
{
        int64_t us;
        ck_assert_int_eq(sp_time_parse_rfc3339("2026-11-30T18:00:00.123Z", &us, NULL), 0);
        char out[32];
        sp_time_format_rfc3339(us, out);
        ck_assert_str_eq(out, "2026-11-30T18:00:00.123Z");
        int64_t us2;
        ck_assert_int_eq(sp_time_parse_rfc3339("2026-11-30T19:30:00.123+01:30", &us2, NULL), 0);
        ck_assert_int_eq(us, us2);
        ck_assert_int_lt(sp_time_parse_rfc3339("2026-13-30T18:00:00Z", &us, NULL), 0);
        ck_assert_int_lt(sp_time_parse_rfc3339("2026-11-30T18:00:00", &us, NULL), 0);
        ck_assert_int_lt(sp_time_parse_rfc3339("2026-11-30T18:00:00Zjunk", &us, NULL), 0);
        ck_assert_int_gt(sp_now_mono_us(), 0);
}
END_TEST

START_TEST(durations)
{
        int64_t us;
        ck_assert_int_eq(sp_duration_parse("1h30m", &us, NULL), 0);
        ck_assert_int_eq(us, 90 * 60 * SP_USEC_PER_SEC);
        ck_assert_int_eq(sp_duration_parse("250ms", &us, NULL), 0);
        ck_assert_int_eq(us, 250 * SP_USEC_PER_MSEC);
        ck_assert_int_eq(sp_duration_parse("45", &us, NULL), 0);
        ck_assert_int_eq(us, 45 * SP_USEC_PER_SEC);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(sp_duration_parse("-5s", &us, &e), 0);
        ck_assert_int_lt(sp_duration_parse("5x", &us, NULL), 0);
        ck_assert_int_lt(sp_duration_parse("1h30", &us, NULL), 0);
        ck_assert_int_lt(sp_duration_parse("99999999999999999999d", &us, NULL), 0);
        ck_assert_int_lt(sp_duration_parse("", &us, NULL), 0);
        char out[32];
        sp_duration_format(6 * 3600 * SP_USEC_PER_SEC, out);
        ck_assert_str_eq(out, "6h");
        sp_duration_format(90 * 60 * SP_USEC_PER_SEC + 5 * SP_USEC_PER_SEC, out);
        ck_assert_str_eq(out, "1h30m5s");
        sp_duration_format(250 * SP_USEC_PER_MSEC, out);
        ck_assert_str_eq(out, "250ms");
}
END_TEST

int main(void)
{
        Suite *s = suite_create("core");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, error_set_wrap_and_map);
        tcase_add_test(tc, error_errno_message);
        tcase_add_test(tc, buf_grow_and_limit);
        tcase_add_test(tc, base64_roundtrip);
        tcase_add_test(tc, ids);
        tcase_add_test(tc, time_rfc3339);
        tcase_add_test(tc, durations);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
