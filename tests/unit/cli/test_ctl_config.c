/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: spacectl's profiles (the file, its strict reading, changes,
 * where it lives), the resolution of settings (flags > environment >
 * profile > defaults, and which profile), and the values typed on its
 * command line (CPUs, sizes, durations, integers, KEY=VALUE). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"
#include "harness.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"

/* The suite's directory (made and removed by the runner, also when a test
 * fails), and each test's own directory in it. */
static char *suite_dir;
static char dir[512];

static void suite_up(void)
{
        suite_dir = sp_test_tmpdir("ctl-config");
}

static void suite_down(void)
{
        sp_test_tmpdir_remove(suite_dir);
        free(suite_dir);
}

static void setup(void)
{
        snprintf(dir, sizeof(dir), "%s/t%d", suite_dir, (int)getpid());
        ck_assert_int_eq(mkdir(dir, 0700), 0);
}

static char *path_in(const char *name)
{
        char *p;
        ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
        return p;
}

static ctl_config *load(const char *path)
{
        ctl_config *c = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(ctl_config_load(path, &c, &e) == 0, "%s", e ? e->message : "?");
        return c;
}

START_TEST(missing_file_is_empty_and_save_is_private)
{
        _cleanup_free_ char *path = path_in("sub/dir/config.json");
        ctl_config *c = load(path);
        ck_assert(!c->exists);
        ck_assert_ptr_null(ctl_config_current(c));
        ck_assert_int_eq(json_object_object_length(ctl_config_profiles(c)), 0);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(ctl_config_set(c, "prod", CTL_F_ENDPOINT, "https://space.example", &e), 0);
        ck_assert_int_eq(ctl_config_set(c, "prod", CTL_F_API_KEY, "k", &e), 0);
        ck_assert_int_eq(ctl_config_use(c, "prod", &e), 0);
        ck_assert_int_eq(ctl_config_save(c, &e), 0);
        ctl_config_free(c);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        _cleanup_free_ char *sub = path_in("sub");
        ck_assert_int_eq(stat(sub, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0700);
        /* It reads back the same. */
        ctl_config *again = load(path);
        ck_assert(again->exists);
        ck_assert(!again->loose_mode);
        ck_assert_str_eq(ctl_config_current(again), "prod");
        json_object *p = ctl_config_profile(again, "prod");
        ck_assert_str_eq(json_object_get_string(json_object_object_get(p, "endpoint")), "https://space.example");
        ck_assert_str_eq(json_object_get_string(json_object_object_get(p, "api_key")), "k");
        /* Removing the current profile leaves none current. */
        ck_assert_int_eq(ctl_config_remove(again, "prod", &e), 0);
        ck_assert_ptr_null(ctl_config_current(again));
        ck_assert_int_eq(ctl_config_remove(again, "prod", &e), -SP_E_NOT_FOUND);
        ctl_config_free(again);
        ck_assert_ptr_null(ctl_config_free(NULL));
}
END_TEST

START_TEST(strict_reading)
{
        _cleanup_free_ char *path = path_in("config.json");
        const char *bad[] = {
                "",
                "{",
                "[]",
                "{\"profiles\":[]}",
                "{\"profiles\":{\"a\":{\"endpoint\":1}}}",
                "{\"profiles\":{\"a\":{\"endpoint\":\"\"}}}",
                "{\"profiles\":{\"a\":{\"endpoint\":\"x\\ny\"}}}",
                "{\"profiles\":{\"a\":{\"colour\":\"red\"}}}",
                "{\"profiles\":{\"a\":[]}}",
                "{\"profiles\":{\"a b\":{}}}",
                "{\"current\":\"a/b\"}",
                "{\"current\":1}",
                "{\"other\":1}",
                "{\"profiles\":{}} trailing",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_int_eq(sp_file_write_atomic(path, bad[i], strlen(bad[i]), 0600, NULL), 0);
                ctl_config *c = NULL;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(ctl_config_load(path, &c, &e) < 0, "accepted %s", bad[i]);
                ck_assert_ptr_null(c);
                ck_assert_msg(strstr(e->message, path), "%s", e->message);
        }
        /* Too many profiles. */
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        sp_buf_append_str(&many, "{\"profiles\":{", NULL);
        for (int i = 0; i <= CTL_MAX_PROFILES; i++)
                sp_buf_appendf(&many, NULL, "%s\"p%d\":{}", i ? "," : "", i);
        sp_buf_append_str(&many, "}}", NULL);
        ck_assert_int_eq(sp_file_write_atomic(path, many.data, many.len, 0600, NULL), 0);
        ctl_config *c = NULL;
        ck_assert_int_lt(ctl_config_load(path, &c, NULL), 0);
        /* A current profile that does not exist loads; resolving with it fails. */
        const char *dangling = "{\"current\":\"gone\",\"profiles\":{}}";
        ck_assert_int_eq(sp_file_write_atomic(path, dangling, strlen(dangling), 0644, NULL), 0);
        c = load(path);
        ck_assert(c->loose_mode);
        ctl_resolved r;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(ctl_resolve(c, NULL, NULL, &r, &e), -SP_E_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(e->message, "'gone' (the current profile)"));
        ctl_config_free(c);
}
END_TEST

START_TEST(changes_are_checked)
{
        _cleanup_free_ char *path = path_in("config.json");
        ctl_config *c = load(path);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(ctl_config_set(c, "", CTL_F_ENDPOINT, "x", &e), -SP_E_INVALID);
        ck_assert_int_eq(ctl_config_set(c, "a/b", CTL_F_ENDPOINT, "x", NULL), -SP_E_INVALID);
        ck_assert_int_eq(ctl_config_set(c, "a", CTL_F_ENDPOINT, "", NULL), -SP_E_INVALID);
        ck_assert_int_eq(ctl_config_set(c, "a", CTL_F_ENDPOINT, "a\tb", NULL), -SP_E_INVALID);
        ck_assert_int_eq(ctl_config_set(c, "a", CTL_F__MAX, "x", NULL), -SP_E_INVALID);
        ck_assert_int_eq(ctl_config_use(c, "a", NULL), -SP_E_NOT_FOUND);
        for (int i = 0; i < CTL_MAX_PROFILES; i++) {
                char name[16];
                snprintf(name, sizeof(name), "p%d", i);
                ck_assert_int_eq(ctl_config_set(c, name, CTL_F_ENDPOINT, "http://h", NULL), 0);
        }
        ck_assert_int_eq(ctl_config_set(c, "one-more", CTL_F_ENDPOINT, "http://h", NULL), -SP_E_LIMIT);
        /* Changing an existing one is fine at the limit, and NULL removes a field. */
        ck_assert_int_eq(ctl_config_set(c, "p0", CTL_F_API_KEY, "k", NULL), 0);
        ck_assert_int_eq(ctl_config_set(c, "p0", CTL_F_API_KEY, NULL, NULL), 0);
        ck_assert(!json_object_object_get_ex(ctl_config_profile(c, "p0"), "api_key", NULL));
        ck_assert(ctl_profile_name_valid("a.b_c-D9"));
        ck_assert(!ctl_profile_name_valid("toolong-toolong-toolong-toolong-toolong-toolong-toolong-toolong-x"));
        ctl_config_free(c);
        ck_assert_int_eq(ctl_field_parse("ca_file"), CTL_F_CA_FILE);
        ck_assert_int_eq(ctl_field_parse("ca"), -1);
        ck_assert_str_eq(ctl_source_name(CTL_SRC_ENV), "env");
}
END_TEST

START_TEST(resolution_precedence)
{
        _cleanup_free_ char *path = path_in("config.json");
        ctl_config *c = load(path);
        ck_assert_int_eq(ctl_config_set(c, "a", CTL_F_ENDPOINT, "http://a", NULL), 0);
        ck_assert_int_eq(ctl_config_set(c, "a", CTL_F_API_KEY, "key-a", NULL), 0);
        ck_assert_int_eq(ctl_config_set(c, "a", CTL_F_CA_FILE, "/ca-a", NULL), 0);
        ck_assert_int_eq(ctl_config_set(c, "b", CTL_F_ENDPOINT, "http://b", NULL), 0);
        ck_assert_int_eq(ctl_config_use(c, "a", NULL), 0);

        /* No file at all: the default endpoint and nothing else. */
        ctl_resolved r;
        ck_assert_int_eq(ctl_resolve(NULL, NULL, NULL, &r, NULL), 0);
        ck_assert_str_eq(r.v[CTL_F_ENDPOINT], CTL_DEFAULT_ENDPOINT);
        ck_assert_int_eq(r.source[CTL_F_ENDPOINT], CTL_SRC_DEFAULT);
        ck_assert_ptr_null(r.v[CTL_F_API_KEY]);
        ck_assert_int_eq(r.source[CTL_F_API_KEY], CTL_SRC_NONE);
        ck_assert_ptr_null(r.profile);
        ctl_resolved_free(&r);

        /* The current profile. */
        ck_assert_int_eq(ctl_resolve(c, NULL, NULL, &r, NULL), 0);
        ck_assert_str_eq(r.profile, "a");
        ck_assert_int_eq(r.profile_source, CTL_SRC_PROFILE);
        ck_assert_str_eq(r.v[CTL_F_API_KEY], "key-a");
        ck_assert_int_eq(r.source[CTL_F_CA_FILE], CTL_SRC_PROFILE);
        ctl_resolved_free(&r);

        /* SPACE_PROFILE picks another; its unset fields do not fall back to the current profile's. */
        ctl_settings env = {.profile = "b"};
        ck_assert_int_eq(ctl_resolve(c, NULL, &env, &r, NULL), 0);
        ck_assert_str_eq(r.profile, "b");
        ck_assert_int_eq(r.profile_source, CTL_SRC_ENV);
        ck_assert_str_eq(r.v[CTL_F_ENDPOINT], "http://b");
        ck_assert_ptr_null(r.v[CTL_F_API_KEY]);
        ctl_resolved_free(&r);

        /* --profile beats SPACE_PROFILE; env beats the profile; flags beat env. */
        ctl_settings flags = {.profile = "a"};
        env.v[CTL_F_ENDPOINT] = "http://env";
        env.v[CTL_F_API_KEY] = "key-env";
        ck_assert_int_eq(ctl_resolve(c, &flags, &env, &r, NULL), 0);
        ck_assert_str_eq(r.profile, "a");
        ck_assert_int_eq(r.profile_source, CTL_SRC_FLAG);
        ck_assert_str_eq(r.v[CTL_F_ENDPOINT], "http://env");
        ck_assert_int_eq(r.source[CTL_F_ENDPOINT], CTL_SRC_ENV);
        ck_assert_str_eq(r.v[CTL_F_API_KEY], "key-env");
        ck_assert_str_eq(r.v[CTL_F_CA_FILE], "/ca-a");
        ctl_resolved_free(&r);
        flags.v[CTL_F_ENDPOINT] = "http://flag";
        ck_assert_int_eq(ctl_resolve(c, &flags, &env, &r, NULL), 0);
        ck_assert_str_eq(r.v[CTL_F_ENDPOINT], "http://flag");
        ck_assert_int_eq(r.source[CTL_F_ENDPOINT], CTL_SRC_FLAG);
        ck_assert_int_eq(r.source[CTL_F_API_KEY], CTL_SRC_ENV);
        ctl_resolved_free(&r);

        /* A profile's data-plane address goes with its endpoint: not used for another endpoint. */
        ck_assert_int_eq(ctl_config_set(c, "a", CTL_F_DATAPLANE_URL, "http://dp-a", NULL), 0);
        ctl_settings none = {0}, other = {.v = {[CTL_F_ENDPOINT] = "http://elsewhere"}},
                     same = {.v = {[CTL_F_ENDPOINT] = "http://a"}};
        ck_assert_int_eq(ctl_resolve(c, NULL, &none, &r, NULL), 0);
        ck_assert_str_eq(r.v[CTL_F_DATAPLANE_URL], "http://dp-a");
        ck_assert_int_eq(r.source[CTL_F_DATAPLANE_URL], CTL_SRC_PROFILE);
        ctl_resolved_free(&r);
        ck_assert_int_eq(ctl_resolve(c, NULL, &other, &r, NULL), 0);
        ck_assert_ptr_null(r.v[CTL_F_DATAPLANE_URL]);
        ck_assert_int_eq(r.source[CTL_F_DATAPLANE_URL], CTL_SRC_NONE);
        ck_assert_str_eq(r.v[CTL_F_API_KEY], "key-a"); /* the others keep their precedence */
        ctl_resolved_free(&r);
        ck_assert_int_eq(ctl_resolve(c, &other, NULL, &r, NULL), 0);
        ck_assert_ptr_null(r.v[CTL_F_DATAPLANE_URL]);
        ctl_resolved_free(&r);
        ck_assert_int_eq(ctl_resolve(c, NULL, &same, &r, NULL), 0);
        ck_assert_str_eq(r.v[CTL_F_DATAPLANE_URL], "http://dp-a");
        ctl_resolved_free(&r);

        /* A profile that does not exist, named anywhere, is an error that says where. */
        ctl_settings nope = {.profile = "nope"};
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(ctl_resolve(c, &nope, NULL, &r, &e), -SP_E_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(e->message, "(--profile)"));
        sp_error_free(e);
        e = NULL;
        ck_assert_int_eq(ctl_resolve(c, NULL, &nope, &r, &e), -SP_E_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(e->message, "(SPACE_PROFILE)"));
        ctl_config_free(c);
}
END_TEST

START_TEST(where_the_file_lives_and_the_environment)
{
        setenv("SPACE_CONFIG", "/x/c.json", 1);
        _cleanup_free_ char *p1 = ctl_config_default_path(NULL);
        ck_assert_str_eq(p1, "/x/c.json");
        unsetenv("SPACE_CONFIG");
        setenv("XDG_CONFIG_HOME", "/xdg", 1);
        _cleanup_free_ char *p2 = ctl_config_default_path(NULL);
        ck_assert_str_eq(p2, "/xdg/space/config.json");
        unsetenv("XDG_CONFIG_HOME");
        setenv("HOME", "/home/u", 1);
        _cleanup_free_ char *p3 = ctl_config_default_path(NULL);
        ck_assert_str_eq(p3, "/home/u/.config/space/config.json");

        setenv("SPACE_PROFILE", "p", 1);
        setenv("SPACE_ENDPOINT", "http://e", 1);
        setenv("SPACE_API_KEY", "", 1); /* empty counts as unset */
        setenv("SPACE_CA_FILE", "/ca", 1);
        setenv("SPACE_DATAPLANE_URL", "http://d", 1);
        ctl_settings env;
        ctl_settings_from_env(&env);
        ck_assert_str_eq(env.profile, "p");
        ck_assert_str_eq(env.v[CTL_F_ENDPOINT], "http://e");
        ck_assert_ptr_null(env.v[CTL_F_API_KEY]);
        ck_assert_str_eq(env.v[CTL_F_CA_FILE], "/ca");
        ck_assert_str_eq(env.v[CTL_F_DATAPLANE_URL], "http://d");
}
END_TEST

START_TEST(command_line_values)
{
        struct {
                const char *s;
                int64_t want; /* -1: refused */
        } cpu[] = {{"2", 2000}, {"0.5", 500}, {"1.25", 1250}, {"0.001", 1}, {"250m", 250}, {"1.2345", -1},
                   {".5", -1},  {"1.", -1},   {"m", -1},      {"-1", -1},   {"2 ", -1},    {"", -1}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(cpu); i++) {
                int64_t v = 0;
                int r = ctl_parse_cpu(cpu[i].s, &v, NULL);
                ck_assert_msg(cpu[i].want < 0 ? r < 0 : (r == 0 && v == cpu[i].want), "cpu '%s': %d %lld", cpu[i].s, r,
                              (long long)v);
        }
        struct {
                const char *s;
                int64_t want;
        } mib[] = {{"512", 512},  {"512M", 512},   {"512MiB", 512}, {"512mb", 512}, {"2G", 2048},
                   {"2Gi", 2048}, {"1T", 1048576}, {"2048K", 2},    {"1000K", -1},  {"1.5G", -1},
                   {"-1M", -1},   {"1X", -1},      {"", -1},        {"G", -1},      {"99999999999999T", -1}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(mib); i++) {
                int64_t v = 0;
                int r = ctl_parse_mib(mib[i].s, &v, NULL);
                ck_assert_msg(mib[i].want < 0 ? r < 0 : (r == 0 && v == mib[i].want), "size '%s': %d %lld", mib[i].s, r,
                              (long long)v);
        }
        int64_t v;
        ck_assert_int_eq(ctl_parse_seconds("90", &v, NULL), 0);
        ck_assert_int_eq(v, 90);
        ck_assert_int_eq(ctl_parse_seconds("1h30m", &v, NULL), 0);
        ck_assert_int_eq(v, 5400);
        ck_assert_int_eq(ctl_parse_seconds("0", &v, NULL), 0);
        ck_assert_int_eq(v, 0);
        ck_assert_int_lt(ctl_parse_seconds("1500ms", &v, NULL), 0);
        ck_assert_int_lt(ctl_parse_seconds("soon", &v, NULL), 0);
        ck_assert_int_eq(ctl_parse_int("64", 0, 64, &v, NULL), 0);
        ck_assert_int_lt(ctl_parse_int("65", 0, 64, &v, NULL), 0);
        ck_assert_int_lt(ctl_parse_int("-1", 0, 64, &v, NULL), 0);
        ck_assert_int_lt(ctl_parse_int("1e3", 0, 5000, &v, NULL), 0);
        _cleanup_json_ json_object *map = json_object_new_object();
        ck_assert_int_eq(ctl_parse_kv("A=1", "env", map, NULL), 0);
        ck_assert_int_eq(ctl_parse_kv("B=", "env", map, NULL), 0);
        ck_assert_int_eq(ctl_parse_kv("C=x=y", "env", map, NULL), 0);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(map, "C")), "x=y");
        ck_assert_str_eq(json_object_get_string(json_object_object_get(map, "B")), "");
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(ctl_parse_kv("A=2", "env", map, &e), 0);
        ck_assert_ptr_nonnull(strstr(e->message, "given twice"));
        ck_assert_int_lt(ctl_parse_kv("=x", "env", map, NULL), 0);
        ck_assert_int_lt(ctl_parse_kv("novalue", "env", map, NULL), 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("ctl_config");
        TCase *tc = tcase_create("config");
        tcase_add_unchecked_fixture(tc, suite_up, suite_down);
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, missing_file_is_empty_and_save_is_private);
        tcase_add_test(tc, strict_reading);
        tcase_add_test(tc, changes_are_checked);
        tcase_add_test(tc, resolution_precedence);
        tcase_add_test(tc, where_the_file_lives_and_the_environment);
        tcase_add_test(tc, command_line_values);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
