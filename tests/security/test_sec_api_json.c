/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack: JSON that means one thing to a validator and another to the store.
 *
 * json-c keeps an object key only up to a NUL, so {"env":{"PATH\u0000x":…}}
 * arrived as an env key "PATH"; and it lets a repeated key replace the first,
 * so two readers of one body could disagree on its value. Against a real
 * control plane (PostgreSQL, no workers needed): a NUL in a metadata or env
 * key and a repeated key anywhere in a body answer 400 naming the field,
 * and nothing is created.
 *
 * One cluster for the file (an unchecked fixture). Needs root and PostgreSQL.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"

static sp_test_space S;

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 0};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* POSTs body to path and asserts a 400 whose message contains want. */
static void assert_400(const char *key, const char *path, const char *body, const char *want)
{
        _cleanup_json_ json_object *r = sp_test_api(&S, key, "POST", path, 400, body, NULL);
        ck_assert_str_eq(sp_test_jstr(r, "error.code"), "invalid_argument");
        const char *msg = sp_test_jstr(r, "error.message");
        ck_assert_msg(msg && strstr(msg, want), "%s: got \"%s\", want \"%s\"", body, msg ? msg : "", want);
}

START_TEST(nul_and_duplicate_keys_are_refused_by_name)
{
        char key[256];
        sp_test_new_tenant(&S, "json", key);
        assert_400(key, "/v1/sandboxes", "{\"template\":\"base\",\"env\":{\"PATH\\u0000x\":\"/evil\"}}",
                   "NUL character (\\u0000) in a key in env");
        assert_400(key, "/v1/sandboxes", "{\"template\":\"base\",\"metadata\":{\"owner\\u0000admin\":\"me\"}}",
                   "NUL character (\\u0000) in a key in metadata");
        assert_400(key, "/v1/sandboxes", "{\"template\":\"base\",\"metadata\":{\"x\":\"1\",\"x\":\"2\"}}",
                   "duplicate key \"x\" in metadata");
        assert_400(key, "/v1/sandboxes", "{\"template\":\"base\",\"env\":{\"A\":\"1\",\"\\u0041\":\"2\"}}",
                   "duplicate key \"A\" in env");
        assert_400(key, "/v1/sandboxes", "{\"template\":\"base\",\"template\":\"other\"}",
                   "duplicate key \"template\"");
        assert_400(key, "/v1/sandboxes", "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"memory_mb\":128}}",
                   "duplicate key \"memory_mb\" in resources");
        /* Other routes decode the same way. */
        assert_400(key, "/v1/keys", "{\"name\":\"a\",\"name\":\"b\"}", "duplicate key \"name\"");
        assert_400(S.admin_key, "/v1/tenants", "{\"name\":\"t\\u0000\",\"name\":\"u\"}", "duplicate key \"name\"");
        /* Nothing was created. */
        _cleanup_json_ json_object *list = sp_test_api(&S, key, "GET", "/v1/sandboxes", 200, NULL, NULL);
        ck_assert_int_eq(json_object_array_length(sp_test_jarr(list, "sandboxes")), 0);
        _cleanup_json_ json_object *keys = sp_test_api(&S, key, "GET", "/v1/keys", 200, NULL, NULL);
        ck_assert_int_eq(json_object_array_length(sp_test_jarr(keys, "keys")), 1);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_api_json");
        TCase *tc = tcase_create("json");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, nul_and_duplicate_keys_are_refused_by_name);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the test cluster needs root");
        sp_test_pg_require();
        return sp_test_main(suite());
}
