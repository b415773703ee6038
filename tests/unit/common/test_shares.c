/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: per-tenant shares of a shared bound (space/shares.h). A key
 * at its share is refused while others are admitted, the total bounds all
 * keys together, units given back are taken again, refusals are counted per
 * key (a bounded number by name, the rest together) and rendered with safe
 * labels.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/shares.h"

START_TEST(share_then_total)
{
        sp_shares *s = sp_shares_new(5, 2);
        sp_error *e = NULL;
        ck_assert_int_eq(sp_shares_take(s, "a", "streams", &e), 0);
        ck_assert_int_eq(sp_shares_take(s, "a", "streams", &e), 0);
        ck_assert_int_lt(sp_shares_take(s, "a", "streams", &e), 0);
        ck_assert_int_eq(e->code, SP_E_LIMIT);
        ck_assert_ptr_nonnull(strstr(e->message, "2 streams"));
        sp_error_free(e);
        e = NULL;
        ck_assert_int_eq(sp_shares_take(s, "b", "streams", &e), 0);
        ck_assert_int_eq(sp_shares_take(s, "b", "streams", &e), 0);
        ck_assert_int_eq(sp_shares_take(s, "c", "streams", &e), 0);
        ck_assert_uint_eq(sp_shares_keys_full(s), 2); /* a and b; c holds 1 of 2 */
        ck_assert_int_lt(sp_shares_take(s, "d", "streams", &e), 0);
        ck_assert_int_eq(e->code, SP_E_UNAVAILABLE);
        sp_error_free(e);
        e = NULL;
        ck_assert_uint_eq(sp_shares_used(s), 5);
        sp_shares_give(s, "a");
        sp_shares_give(s, "nobody"); /* ignored */
        ck_assert_uint_eq(sp_shares_used(s), 4);
        ck_assert_uint_eq(sp_shares_used_by(s, "a"), 1);
        ck_assert_uint_eq(sp_shares_keys_full(s), 1);
        ck_assert_int_eq(sp_shares_take(s, "d", "streams", &e), 0);
        ck_assert_uint_eq(sp_shares_used_by(s, "d"), 1);
        sp_shares_free(s);
}
END_TEST

START_TEST(defaults_and_bounds)
{
        sp_shares *s = sp_shares_new(4096, 0);
        ck_assert_uint_eq(sp_shares_per_key(s), 1024);
        sp_shares_free(s);
        s = sp_shares_new(3, 0);
        ck_assert_uint_eq(sp_shares_per_key(s), 1);
        sp_shares_free(s);
        s = sp_shares_new(3, 10);
        ck_assert_uint_eq(sp_shares_per_key(s), 3);
        sp_shares_free(s);
        ck_assert_ptr_null(sp_shares_free(NULL));
}
END_TEST

START_TEST(refusals_named_then_pooled_and_rendered_safely)
{
        sp_shares *s = sp_shares_new(1, 1);
        ck_assert_int_eq(sp_shares_take(s, "holder", "x", NULL), 0);
        for (int i = 0; i < SP_SHARES_NAMED + 10; i++) {
                char k[32];
                snprintf(k, sizeof(k), "k%d", i);
                ck_assert_int_lt(sp_shares_take(s, k, "x", NULL), 0);
        }
        ck_assert_int_lt(sp_shares_take(s, "holder", "x", NULL), 0);
        ck_assert_int_lt(sp_shares_take(s, "bad\"key\n", "x", NULL), 0);
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        ck_assert_int_eq(sp_shares_render(s, "m_total", "help", &out, NULL), 0);
        sp_buf_append(&out, "", 0, NULL);
        ck_assert_ptr_nonnull(strstr(out.data, "m_total{tenant=\"k0\",limit=\"total\"} 1\n"));
        ck_assert_ptr_null(strstr(out.data, "tenant=\"holder\""));
        ck_assert_msg(strstr(out.data, "m_total{tenant=\"*\",limit=\"total\"} 11\n"), "%s", out.data);
        ck_assert_ptr_nonnull(strstr(out.data, "m_total{tenant=\"*\",limit=\"tenant\"} 1\n"));
        ck_assert_ptr_null(strstr(out.data, "bad\""));
        sp_shares_free(s);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("shares");
        TCase *tc = tcase_create("shares");
        tcase_add_test(tc, share_then_total);
        tcase_add_test(tc, defaults_and_bounds);
        tcase_add_test(tc, refusals_named_then_pooled_and_rendered_safely);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
