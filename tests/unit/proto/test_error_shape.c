/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the one error shape (space/error_shape.h), and that the OpenAPI
 * document lists every code. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/error_shape.h"

START_TEST(encode_decode)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(sp_error_shape_encode(&b, SP_E_NOT_FOUND, "sandbox \"sbx_1\" not found", NULL), 0);
        ck_assert_str_eq(b.data,
                         "{\"error\":{\"code\":\"not_found\",\"message\":\"sandbox \\\"sbx_1\\\" not found\"}}");
        sp_errc c;
        _cleanup_free_ char *m = NULL;
        ck_assert_int_eq(sp_error_shape_decode(b.data, b.len, &c, &m, NULL), 0);
        ck_assert_int_eq(c, SP_E_NOT_FOUND);
        ck_assert_str_eq(m, "sandbox \"sbx_1\" not found");

        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(sp_error_shape_decode("{\"error\":{\"code\":1}}", 20, &c, &m, &e), 0);
        ck_assert_str_eq(e->message, "error body: field 'code' must be a string");
}
END_TEST

START_TEST(openapi_lists_every_code)
{
        char path[1024];
        snprintf(path, sizeof(path), "%s/proto/openapi.yaml", sp_test_source_dir());
        _cleanup_buf_ sp_buf doc = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(path, 4 << 20, &doc, NULL), 0);
        for (int c = SP_E_INVALID; c < SP_E__MAX; c++)
                ck_assert_msg(strstr(doc.data, sp_errc_name((sp_errc)c)) != NULL, "openapi.yaml lacks error code %s",
                              sp_errc_name((sp_errc)c));
        ck_assert_int_eq(sp_errc_from_name("not_found"), SP_E_NOT_FOUND);
        ck_assert_int_eq(sp_errc_from_name("nope"), SP_E__MAX);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("error_shape");
        TCase *tc = tcase_create("all");
        tcase_add_test(tc, encode_decode);
        tcase_add_test(tc, openapi_lists_every_code);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
