/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: token buckets by key (space/ratelimit.h), on a clock the test
 * steps. A new key has its burst; a refusal says how long until a token is
 * there, and at that time one is; keys do not share buckets; a token given
 * back is taken again; no rate means no limit; a full table makes room by
 * dropping refilled buckets and refuses a new key only while none has; and
 * Retry-After is whole seconds, at least one.
 */
#include <string.h>

#include "harness.h"
#include "space/ratelimit.h"

#define S 1000000 /* a second, in µs */

START_TEST(burst_then_rate)
{
        sp_ratelimit *r = sp_ratelimit_new(16);
        int64_t now = 5 * S, wait = 0;
        for (int i = 0; i < 3; i++)
                ck_assert(sp_ratelimit_take(r, "k", 2, 3, now, &wait));
        ck_assert(!sp_ratelimit_take(r, "k", 2, 3, now, &wait));
        ck_assert_int_eq(wait, S / 2); /* 2 a second: one every half second */
        ck_assert(!sp_ratelimit_take(r, "k", 2, 3, now + wait - 1, NULL));
        ck_assert(sp_ratelimit_take(r, "k", 2, 3, now + wait, &wait));
        ck_assert_int_eq(wait, 0);
        /* Another key has its own bucket. */
        ck_assert(sp_ratelimit_take(r, "other", 2, 3, now, NULL));
        /* Idle long enough, the burst is back, and no more than it. */
        now += 100 * S;
        for (int i = 0; i < 3; i++)
                ck_assert(sp_ratelimit_take(r, "k", 2, 3, now, NULL));
        ck_assert(!sp_ratelimit_take(r, "k", 2, 3, now, NULL));
        /* A token given back is taken again, never above the burst. */
        sp_ratelimit_give(r, "k", 3);
        ck_assert(sp_ratelimit_take(r, "k", 2, 3, now, NULL));
        sp_ratelimit_give(r, "nobody", 3);
        ck_assert_uint_eq(sp_ratelimit_keys(r), 2);
        sp_ratelimit_free(r);
}
END_TEST

START_TEST(no_rate_no_limit_and_small_bursts)
{
        sp_ratelimit *r = sp_ratelimit_new(1);
        for (int i = 0; i < 100; i++)
                ck_assert(sp_ratelimit_take(r, "k", 0, 0, 0, NULL));
        ck_assert_uint_eq(sp_ratelimit_keys(r), 0);
        /* A burst below one is one. */
        int64_t wait = 0;
        ck_assert(sp_ratelimit_take(r, "k", 0.5, 0, 0, &wait));
        ck_assert(!sp_ratelimit_take(r, "k", 0.5, 0, 0, &wait));
        ck_assert_int_eq(wait, 2 * S);
        sp_ratelimit_free(r);
}
END_TEST

START_TEST(a_full_table_drops_refilled_buckets)
{
        sp_ratelimit *r = sp_ratelimit_new(2);
        int64_t wait = 0;
        ck_assert(sp_ratelimit_take(r, "a", 1, 1, 0, NULL));
        ck_assert(sp_ratelimit_take(r, "b", 1, 1, 0, NULL));
        /* Both still refilling: a third key is refused with a token's wait. */
        ck_assert(!sp_ratelimit_take(r, "c", 1, 1, 0, &wait));
        ck_assert_int_eq(wait, S);
        /* Once they have refilled, they make room. */
        ck_assert(sp_ratelimit_take(r, "c", 1, 1, S, NULL));
        ck_assert_uint_le(sp_ratelimit_keys(r), 2);
        /* Keys are cut to their bound, not refused. */
        char longkey[200];
        memset(longkey, 'x', sizeof(longkey) - 1);
        longkey[sizeof(longkey) - 1] = '\0';
        ck_assert(sp_ratelimit_take(r, longkey, 1, 1, 10 * S, NULL));
        sp_ratelimit_free(r);
        sp_ratelimit_free(NULL);
}
END_TEST

START_TEST(retry_after_seconds)
{
        ck_assert_int_eq(sp_ratelimit_retry_after_s(0), 1);
        ck_assert_int_eq(sp_ratelimit_retry_after_s(1), 1);
        ck_assert_int_eq(sp_ratelimit_retry_after_s(S), 1);
        ck_assert_int_eq(sp_ratelimit_retry_after_s(S + 1), 2);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("ratelimit");
        TCase *tc = tcase_create("ratelimit");
        tcase_add_test(tc, burst_then_rate);
        tcase_add_test(tc, no_rate_no_limit_and_small_bursts);
        tcase_add_test(tc, a_full_table_drops_refilled_buckets);
        tcase_add_test(tc, retry_after_seconds);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
