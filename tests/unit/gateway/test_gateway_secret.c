/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: credential bindings (gateway/policy/secret.h) — what a tenant
 * may bind a secret to and where it may go, each refusal naming the field
 * and never quoting a value; what the control plane sends per sandbox;
 * values kept across a resend without them; stripping values for disk;
 * placeholders; and the profile's grants.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "policy/profile.h"
#include "policy/secret.h"
#include "space/json.h"

static json_object *js(const char *s)
{
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(s, strlen(s), &o, NULL) == 0, "%s", s);
        return o;
}

static void spec_refused(const char *hosts, const char *inject, const char *says)
{
        _cleanup_json_ json_object *h = js(hosts), *i = js(inject);
        sp_error *e = NULL;
        ck_assert_msg(gw_secret_check_spec(h, i, &e) < 0, "took %s %s", hosts, inject);
        ck_assert_msg(e && e->code == SP_E_INVALID && strstr(e->message, says), "%s %s: '%s' does not say '%s'", hosts,
                      inject, e ? e->message : "", says);
        sp_error_free(e);
}

START_TEST(specs_are_checked_field_by_field)
{
        _cleanup_json_ json_object *h = js("[\"api.openai.com\",\"*.example.com\"]"),
                                   *i = js("{\"header\":\"Authorization\",\"format\":\"Bearer {{secret}}\"}"),
                                   *b = js("{\"basic\":{\"username\":\"x-access-token\"}}"),
                                   *k = js("{\"header\":\"x-api-key\"}");
        ck_assert_int_eq(gw_secret_check_spec(h, i, NULL), 0);
        ck_assert_int_eq(gw_secret_check_spec(h, b, NULL), 0);
        ck_assert_int_eq(gw_secret_check_spec(h, k, NULL), 0);
        spec_refused("[]", "{\"header\":\"x\"}", "field 'hosts' must name 1 to");
        spec_refused("[\"*\"]", "{\"header\":\"x\"}", "field 'hosts[0]'");
        spec_refused("[\"ok.test\",\"*.com\"]", "{\"header\":\"x\"}", "field 'hosts[1]'");
        spec_refused("[\"10.0.0.1\"]", "{\"header\":\"x\"}", "field 'hosts[0]'");
        spec_refused("[\"a.test\",\"A.TEST.\"]", "{\"header\":\"x\"}", "field 'hosts[1]' repeats hosts[0]");
        spec_refused("\"a.test\"", "{\"header\":\"x\"}", "field 'hosts' must be an array");
        spec_refused("[\"a.test\"]", "{}", "exactly one of 'header' and 'basic'");
        spec_refused("[\"a.test\"]", "{\"header\":\"x\",\"basic\":{}}", "exactly one of");
        spec_refused("[\"a.test\"]", "{\"header\":\"Host\"}", "frames or routes");
        spec_refused("[\"a.test\"]", "{\"header\":\"transfer-encoding\"}", "frames or routes");
        spec_refused("[\"a.test\"]", "{\"header\":\"Proxy-Authorization\"}", "frames or routes");
        spec_refused("[\"a.test\"]", "{\"header\":\"bad header\"}", "a token");
        spec_refused("[\"a.test\"]", "{\"header\":\"a\",\"format\":\"Bearer\"}", "exactly once");
        spec_refused("[\"a.test\"]", "{\"header\":\"a\",\"format\":\"{{secret}}{{secret}}\"}", "exactly once");
        spec_refused("[\"a.test\"]", "{\"header\":\"a\",\"format\":\"x\\r\\n{{secret}}\"}", "printable");
        spec_refused("[\"a.test\"]", "{\"basic\":{\"username\":\"a:b\"}}", "without ':'");
        spec_refused("[\"a.test\"]", "{\"basic\":{},\"format\":\"{{secret}}\"}", "goes with 'header'");
        spec_refused("[\"a.test\"]", "{\"header\":\"a\",\"body\":1}", "field 'inject'");

        sp_error *e = NULL;
        const char *bad = "sk-live\r\nX-Evil: 1";
        ck_assert_int_lt(gw_secret_check_value(bad, strlen(bad), &e), 0);
        ck_assert_ptr_null(strstr(e->message, "sk-live"));
        sp_error_free(e);
        ck_assert_int_lt(gw_secret_check_value("", 0, NULL), 0);
        ck_assert_int_eq(gw_secret_check_value("sk-\tok", 6, NULL), 0);
}
END_TEST

START_TEST(placeholders_are_random_and_recognised)
{
        char a[GW_SECRET_PLACEHOLDER_LEN + 1], b[GW_SECRET_PLACEHOLDER_LEN + 1];
        ck_assert_int_eq(gw_secret_placeholder_new(a, NULL), 0);
        ck_assert_int_eq(gw_secret_placeholder_new(b, NULL), 0);
        ck_assert_str_ne(a, b);
        ck_assert_uint_eq(strlen(a), GW_SECRET_PLACEHOLDER_LEN);
        ck_assert(gw_secret_is_placeholder(a, strlen(a)));
        ck_assert(!gw_secret_is_placeholder(a, strlen(a) - 1));
        a[20] = 'G';
        ck_assert(!gw_secret_is_placeholder(a, strlen(a)));
}
END_TEST

#define PH1 "space-secret-0123456789abcdef0123456789abcdef"
#define PH2 "space-secret-ffffffffffffffffffffffffffffffff"
#define BINDINGS \
        "[{\"id\":\"sec_1\",\"name\":\"openai\",\"placeholder\":\"" PH1 "\",\"hosts\":[\"api.openai.test\"]," \
        "\"inject\":{\"header\":\"Authorization\",\"format\":\"Bearer {{secret}}\"},\"value\":\"sk-one\"," \
        "\"rate_per_min\":5,\"expires_at\":1900000000}," \
        "{\"id\":\"sec_2\",\"name\":\"gh\",\"placeholder\":\"" PH2 "\",\"hosts\":[\"*.github.test\"]," \
        "\"inject\":{\"basic\":{}},\"value\":\"ghp-two\"}]"

START_TEST(bindings_parse_keep_and_strip)
{
        _cleanup_json_ json_object *arr = js(BINDINGS);
        gw_secrets *s = NULL;
        ck_assert_int_eq(gw_secrets_parse(arr, &s, NULL), 0);
        ck_assert_uint_eq(gw_secrets_count(s), 2);
        const gw_secret *one = gw_secrets_by_placeholder(s, PH1, strlen(PH1));
        ck_assert_ptr_nonnull(one);
        ck_assert_str_eq(one->value, "sk-one");
        ck_assert_int_eq(one->kind, GW_INJECT_HEADER);
        ck_assert_str_eq(one->format, "Bearer {{secret}}");
        ck_assert_uint_eq(one->rate_per_min, 5);
        ck_assert(gw_secret_bound(one, "api.openai.test"));
        ck_assert(!gw_secret_bound(one, "openai.test"));
        const gw_secret *two = gw_secrets_at(s, 1);
        ck_assert_int_eq(two->kind, GW_INJECT_BASIC);
        ck_assert(gw_secrets_bound(s, "raw.github.test"));
        ck_assert(!gw_secrets_bound(s, "github.test"));
        ck_assert_ptr_null(gw_secrets_by_placeholder(s, "space-secret-00", 15));

        /* What goes to disk has no value; parsed again, the values come from the set held. */
        _cleanup_json_ json_object *stripped = gw_secrets_strip_values(arr);
        ck_assert_ptr_null(strstr(json_object_to_json_string(stripped), "sk-one"));
        ck_assert_ptr_nonnull(strstr(json_object_to_json_string(arr), "sk-one")); /* the original is untouched */
        gw_secrets *again = NULL;
        ck_assert_int_eq(gw_secrets_parse(stripped, &again, NULL), 0);
        ck_assert_ptr_null(gw_secrets_at(again, 0)->value);
        ck_assert_uint_eq(gw_secrets_keep_values(again, NULL), 2);
        ck_assert_uint_eq(gw_secrets_keep_values(again, s), 0);
        ck_assert_str_eq(gw_secrets_at(again, 1)->value, "ghp-two");
        gw_secrets_unref(again);

        /* Another placeholder (a new sandbox, or the secret given again) does not take the old value. */
        _cleanup_json_ json_object *other = js("[{\"id\":\"sec_1\",\"name\":\"openai\",\"placeholder\":\"" PH2
                                               "\",\"hosts\":[\"api.openai.test\"],\"inject\":{\"header\":\"a\"}}]");
        ck_assert_int_eq(gw_secrets_parse(other, &again, NULL), 0);
        ck_assert_uint_eq(gw_secrets_keep_values(again, s), 1);
        gw_secrets_unref(again);
        gw_secrets_unref(s);

        static const char *const bad[] = {
                "{}",
                "[{\"id\":\"a\",\"name\":\"b\",\"placeholder\":\"space-secret-x\",\"hosts\":[\"a.test\"],"
                "\"inject\":{\"header\":\"a\"}}]",
                "[{\"id\":\"a\",\"name\":\"b\",\"placeholder\":\"" PH1 "\",\"hosts\":[\"a.test\"],"
                "\"inject\":{\"header\":\"a\"},\"value\":\"x\\ny\"}]",
                "[{\"id\":\"a\",\"name\":\"b\",\"placeholder\":\"" PH1 "\",\"hosts\":[\"a.test\"],"
                "\"inject\":{\"header\":\"a\"}},{\"id\":\"c\",\"name\":\"d\",\"placeholder\":\"" PH1
                "\",\"hosts\":[\"a.test\"],\"inject\":{\"header\":\"a\"}}]",
                "[{\"id\":\"a\",\"name\":\"b\",\"placeholder\":\"" PH1 "\",\"hosts\":[\"a.test\"],"
                "\"inject\":{\"header\":\"a\"},\"extra\":1}]",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                _cleanup_json_ json_object *o = js(bad[i]);
                sp_error *e = NULL;
                ck_assert_msg(gw_secrets_parse(o, &s, &e) < 0, "took %s", bad[i]);
                ck_assert_ptr_null(strstr(e->message, "x\ny"));
                sp_error_free(e);
        }
        ck_assert_int_eq(gw_secrets_parse(NULL, &s, NULL), 0);
        ck_assert_ptr_null(s);
}
END_TEST

START_TEST(profiles_grant_secrets_by_name)
{
        _cleanup_json_ json_object *o = js("{\"name\":\"agent\",\"domains\":[\"api.openai.test\"],"
                                           "\"secrets\":[\"openai\",\"gh\",\"openai\"]}");
        gw_profile *p = NULL;
        ck_assert_int_eq(gw_profile_parse(o, NULL, false, &p, NULL), 0);
        ck_assert(gw_profile_grants_secret(p, "openai"));
        ck_assert(gw_profile_grants_secret(p, "gh"));
        ck_assert(!gw_profile_grants_secret(p, "other"));
        _cleanup_json_ json_object *j = gw_profile_to_json(p);
        ck_assert_str_eq(json_object_to_json_string(json_object_object_get(j, "secrets")), "[ \"openai\", \"gh\" ]");
        gw_profile_unref(p);
        ck_assert(!gw_profile_grants_secret(gw_profile_builtin("public"), "openai"));
        _cleanup_json_ json_object *bad = js("{\"name\":\"agent\",\"secrets\":[\"Bad Name\"]}");
        sp_error *e = NULL;
        ck_assert_int_lt(gw_profile_parse(bad, NULL, false, &p, &e), 0);
        ck_assert_ptr_nonnull(strstr(e->message, "field 'secrets[0]'"));
        sp_error_free(e);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("gateway_secret");
        TCase *tc = tcase_create("secret");
        tcase_add_test(tc, specs_are_checked_field_by_field);
        tcase_add_test(tc, placeholders_are_random_and_recognised);
        tcase_add_test(tc, bindings_parse_keep_and_strip);
        tcase_add_test(tc, profiles_grant_secrets_by_name);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
