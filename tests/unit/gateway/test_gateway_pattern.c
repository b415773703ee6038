/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: host names (gateway/wire/name.h: normal form, IP literals)
 * and egress profile patterns (pattern.h: validation, matching). */
#include <stdio.h>
#include <string.h>

#include "wire/pattern.h"
#include "harness.h"
#include "space/cleanup.h"

static int norm(const char *s, unsigned flags, char out[GW_NAME_MAX + 1])
{
        return gw_name_normalize(s, strlen(s), flags, out, NULL);
}

START_TEST(names)
{
        char out[GW_NAME_MAX + 1];
        const char *why = NULL;
        ck_assert_int_eq(norm("WWW.Example.COM", 0, out), 15);
        ck_assert_str_eq(out, "www.example.com");
        ck_assert_int_eq(norm("xn--bcher-kva.example", 0, out), 21);
        ck_assert_int_eq(norm("localhost", 0, out), 9);
        ck_assert_int_eq(norm("a-.-b.c", 0, out), 7);
        ck_assert_int_eq(norm("_dmarc.example.com", 0, out), -1);
        ck_assert_str_eq(out, "");
        ck_assert_int_eq(norm("_dmarc.example.com", GW_NAME_UNDERSCORE, out), 18);
        ck_assert_int_eq(norm("example.com.", 0, out), -1);
        ck_assert_int_eq(norm("example.com.", GW_NAME_TRAILING_DOT, out), 11);
        ck_assert_str_eq(out, "example.com");
        ck_assert_int_eq(norm("example.com..", GW_NAME_TRAILING_DOT, out), -1);
        ck_assert_int_eq(norm(".", GW_NAME_TRAILING_DOT, out), -1);
        ck_assert_int_eq(norm("", 0, out), -1);
        ck_assert_int_eq(gw_name_normalize("a.b", 3, 0, out, &why), 3);
        ck_assert_int_eq(gw_name_normalize("a\0b", 3, 0, out, &why), -1);
        ck_assert_str_eq(why, "NUL in name");
        ck_assert_int_eq(norm("a..b", 0, out), -1);
        ck_assert_int_eq(norm(".a", 0, out), -1);
        ck_assert_int_eq(norm("a b", 0, out), -1);
        ck_assert_int_eq(norm("a*b", 0, out), -1);
        ck_assert_int_eq(norm("caf\xc3\xa9", 0, out), -1);

        char label[64], name[300];
        memset(label, 'x', 63);
        label[63] = '\0';
        snprintf(name, sizeof(name), "%s.%s.%s.%.61s", label, label, label, label);
        ck_assert_int_eq(norm(name, 0, out), 253);
        snprintf(name, sizeof(name), "%s.%s.%s.%.62s", label, label, label, label);
        ck_assert_int_eq(gw_name_normalize(name, strlen(name), 0, out, &why), -1);
        ck_assert_str_eq(why, "name longer than 253 bytes");
        snprintf(name, sizeof(name), "%sx.com", label);
        ck_assert_int_eq(gw_name_normalize(name, strlen(name), 0, out, &why), -1);
        ck_assert_str_eq(why, "label longer than 63 bytes");
}
END_TEST

START_TEST(ip_literals)
{
        static const char *ip[] = {"1.2.3.4",    "1.2.3.4.",    "127.1",         "0x7f000001", "0X7F.0.0.1",
                                   "2130706433", "0x",          "example.0x1f",  "a.b.c.123",  "::1",
                                   "[::1]",      "2001:db8::1", "::ffff:1.2.3.4"};
        static const char *not_ip[] = {"example.com", "1.2.3.4a", "123.example", "0xg", "1e5",
                                       "[::1",        "a:b",      "0x1.com",     ""};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ip); i++)
                if (!gw_name_is_ip_literal(ip[i], strlen(ip[i])))
                        ck_abort_msg("%s is an IP literal", ip[i]);
        for (size_t i = 0; i < SP_ARRAY_SIZE(not_ip); i++)
                if (gw_name_is_ip_literal(not_ip[i], strlen(not_ip[i])))
                        ck_abort_msg("%s is no IP literal", not_ip[i]);
}
END_TEST

START_TEST(patterns)
{
        static const struct {
                const char *in, *out;
        } ok[] = {
                {"example.com", "example.com"},
                {"*.Example.COM", "*.example.com"},
                {"*.example.com.", "*.example.com"},
                {"_acme-challenge.example.com", "_acme-challenge.example.com"},
                {"*.co.uk", "*.co.uk"},
                {"localhost", "localhost"},
                {"*.a.b.c.example.com", "*.a.b.c.example.com"},
        };
        static const char *bad[] = {"",
                                    "*",
                                    "*.",
                                    "*.com",
                                    "*.com.",
                                    "**.example.com",
                                    "*example.com",
                                    "a.*.example.com",
                                    "example.*",
                                    "*.*.example.com",
                                    ".example.com",
                                    "example..com",
                                    "example.com..",
                                    "1.2.3.4",
                                    "*.1.2.3",
                                    "*.0x7f.1",
                                    "::1",
                                    "exa mple.com",
                                    "ex\xc3\xa9.com",
                                    "*.exa$mple.com"};
        char out[GW_NAME_MAX + 1];
        const char *why;
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok); i++) {
                int n = gw_pattern_normalize(ok[i].in, strlen(ok[i].in), out, &why);
                if (n < 0)
                        ck_abort_msg("%s: %s", ok[i].in, why);
                ck_assert_str_eq(out, ok[i].out);
                ck_assert_int_eq(n, (int)strlen(ok[i].out));
        }
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                why = NULL;
                if (gw_pattern_normalize(bad[i], strlen(bad[i]), out, &why) >= 0)
                        ck_abort_msg("%s was accepted", bad[i]);
                ck_assert_ptr_nonnull(why);
                ck_assert_str_eq(out, "");
        }
        ck_assert_int_eq(gw_pattern_normalize("*.com", 5, out, &why), -1);
        ck_assert_str_eq(why, "a wildcard needs at least two labels after \"*.\"");

        /* "*." and 251 bytes is too long; the suffix alone would fit. */
        char label[64], name[300];
        memset(label, 'x', 63);
        label[63] = '\0';
        snprintf(name, sizeof(name), "*.%s.%s.%s.%.59s", label, label, label, label);
        ck_assert_int_eq(gw_pattern_normalize(name, strlen(name), out, &why), 253);
        snprintf(name, sizeof(name), "*.%s.%s.%s.%.60s", label, label, label, label);
        ck_assert_int_eq(gw_pattern_normalize(name, strlen(name), out, &why), -1);
}
END_TEST

START_TEST(matching)
{
        ck_assert(gw_pattern_match("example.com", "example.com"));
        ck_assert(gw_pattern_match("example.com", "EXAMPLE.com."));
        ck_assert(!gw_pattern_match("example.com", "a.example.com"));
        ck_assert(!gw_pattern_match("example.com", "example.co"));
        ck_assert(!gw_pattern_match("example.com", "example.com.evil"));
        ck_assert(!gw_pattern_match("example.com", "xexample.com"));
        ck_assert(!gw_pattern_match("example.com", "example.com.."));
        ck_assert(!gw_pattern_match("example.com", ""));
        ck_assert(!gw_pattern_match("example.com", "."));

        ck_assert(gw_pattern_match("*.example.com", "a.example.com"));
        ck_assert(gw_pattern_match("*.example.com", "a.b.example.com"));
        ck_assert(gw_pattern_match("*.example.com", "A.Example.Com."));
        ck_assert(gw_pattern_match("*.example.com", "_x.example.com"));
        ck_assert(!gw_pattern_match("*.example.com", "example.com"));
        ck_assert(!gw_pattern_match("*.example.com", ".example.com"));
        ck_assert(!gw_pattern_match("*.example.com", "example.com."));
        ck_assert(!gw_pattern_match("*.example.com", "aexample.com"));
        ck_assert(!gw_pattern_match("*.example.com", "a.example.com.evil.net"));
        ck_assert(!gw_pattern_match("*.example.com", "a.example.co"));
        ck_assert(!gw_pattern_match("*.example.com", "*.example.com.x"));
        ck_assert(!gw_pattern_match("*.example.com", ""));
        ck_assert(!gw_pattern_match("", "example.com"));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("gateway_pattern");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, names);
        tcase_add_test(tc, ip_literals);
        tcase_add_test(tc, patterns);
        tcase_add_test(tc, matching);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
