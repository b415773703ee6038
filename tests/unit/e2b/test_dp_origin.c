/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: where space-e2b dials the data plane (compat/e2b/api.h,
 * e2b_dp_origin): the origin of the URL the API gave, or --dataplane-url in
 * its place (a trailing slash dropped) with the URL's path and query kept;
 * URLs without a scheme, host or path are refused.
 */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "harness.h"
#include "space/cleanup.h"

START_TEST(origin_and_override)
{
        static const struct {
                const char *url, *override, *origin, *target;
        } cases[] = {
                {"http://localhost:7071/v1/sessions/ses_1/attach?offset=5", NULL, "http://localhost:7071",
                 "/v1/sessions/ses_1/attach?offset=5"},
                {"https://dp.example.com/v1/files/x", "", "https://dp.example.com", "/v1/files/x"},
                {"https://dp.example.com/v1/sessions/ses_1/attach", "http://space-dataplane.space.svc:7071",
                 "http://space-dataplane.space.svc:7071", "/v1/sessions/ses_1/attach"},
                {"http://localhost:7071/a?b=c", "http://space-dataplane:7071//", "http://space-dataplane:7071",
                 "/a?b=c"},
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                _cleanup_error_ sp_error *e = NULL;
                _cleanup_free_ char *origin = NULL;
                const char *target = NULL;
                ck_assert_msg(e2b_dp_origin(cases[i].url, cases[i].override, &origin, &target, &e) == 0, "case %zu", i);
                ck_assert_str_eq(origin, cases[i].origin);
                ck_assert_str_eq(target, cases[i].target);
        }
}
END_TEST

START_TEST(malformed_urls_are_refused)
{
        static const char *const bad[] = {"localhost:7071/a", "http://localhost:7071", "http:///a", ""};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                _cleanup_error_ sp_error *e = NULL;
                char *origin = (char *)"untouched";
                const char *target = NULL;
                ck_assert_msg(e2b_dp_origin(bad[i], "http://space-dataplane:7071", &origin, &target, &e) < 0,
                              "%s accepted", bad[i]);
                ck_assert_ptr_null(origin);
                ck_assert_int_eq(e->code, SP_E_INTERNAL);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_dp_origin");
        TCase *tc = tcase_create("dp_origin");
        tcase_add_test(tc, origin_and_override);
        tcase_add_test(tc, malformed_urls_are_refused);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
