/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: repeatable configuration settings (SP_CONFIG_LIST). Every
 * occurrence adds a value — default, file lines, environment, flags, in that
 * order — the count is bounded, and defaults, free and help handle lists.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/fileio.h"

typedef struct {
        char **keys;
        char **extra;
        char *name;
} list_cfg;

static const sp_config_def defs[] = {
        {"key", SP_CONFIG_LIST, "default.pem", offsetof(list_cfg, keys), 0, 6, "a key file (repeatable)"},
        {"extra", SP_CONFIG_LIST, NULL, offsetof(list_cfg, extra), 0, 0, "nothing by default"},
        {"name", SP_CONFIG_STRING, "n", offsetof(list_cfg, name), 0, 0, "a string"},
        SP_CONFIG_END,
};

static size_t count(char **v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

START_TEST(list_every_occurrence_adds_in_order)
{
        char *dir = sp_test_tmpdir("config-list");
        char path[512];
        snprintf(path, sizeof(path), "%s/t.conf", dir);
        const char *text = "key = file1.pem\nkey = \"file 2.pem\"\nname = x\n";
        ck_assert_int_eq(sp_file_write_atomic(path, text, strlen(text), 0600, NULL), 0);
        setenv("SPLTEST_KEY", "env.pem", 1);
        char *argv[] = {"prog", "--config", path, "--key=flag1.pem", "--key", "flag2.pem", NULL};
        list_cfg c = {0};
        _cleanup_error_ sp_error *e = NULL;
        int r = sp_config_load(defs, &c, "SPLTEST", 6, argv, NULL, NULL, &e);
        unsetenv("SPLTEST_KEY");
        ck_assert_msg(r == 0, "%s", e ? e->message : "");
        const char *want[] = {"default.pem", "file1.pem", "file 2.pem", "env.pem", "flag1.pem", "flag2.pem"};
        ck_assert_uint_eq(count(c.keys), SP_ARRAY_SIZE(want));
        for (size_t i = 0; i < SP_ARRAY_SIZE(want); i++)
                ck_assert_str_eq(c.keys[i], want[i]);
        ck_assert_ptr_null(c.extra);
        ck_assert_str_eq(c.name, "x");
        /* defaults start the lists over */
        ck_assert_int_eq(sp_config_defaults(defs, &c, NULL), 0);
        ck_assert_uint_eq(count(c.keys), 1);
        ck_assert_ptr_null(c.extra);
        sp_config_free(defs, &c);
        ck_assert_ptr_null(c.keys);
        ck_assert_ptr_null(c.name);
        sp_test_tmpdir_remove(dir);
        free(dir);
}
END_TEST

START_TEST(list_count_and_length_are_bounded)
{
        list_cfg c = {0};
        char *argv[] = {"prog", "--key=1", "--key=2", "--key=3", "--key=4", "--key=5", "--key=6", NULL};
        sp_error *e = NULL;
        ck_assert_int_lt(sp_config_load(defs, &c, "SPLTEST", 7, argv, NULL, NULL, &e), 0);
        ck_assert_str_eq(e->message, "flag --key: key 'key': more than 6 values");
        sp_error_free(e);
        sp_config_free(defs, &c);

        _cleanup_free_ char *big = malloc(SP_CONFIG_MAX_VALUE + 2);
        memset(big, 'a', SP_CONFIG_MAX_VALUE + 1);
        big[SP_CONFIG_MAX_VALUE + 1] = '\0';
        ck_assert_int_eq(sp_config_defaults(defs, &c, NULL), 0);
        e = NULL;
        ck_assert_int_lt(sp_config_set(defs, &c, "extra", big, &e), 0);
        ck_assert_ptr_nonnull(strstr(e->message, "longer than"));
        sp_error_free(e);
        /* without a max, the default bound applies */
        for (int i = 0; i < SP_CONFIG_LIST_DEFAULT_MAX; i++)
                ck_assert_int_eq(sp_config_set(defs, &c, "extra", "v", NULL), 0);
        e = NULL;
        ck_assert_int_lt(sp_config_set(defs, &c, "extra", "v", &e), 0);
        ck_assert_uint_eq(count(c.extra), SP_CONFIG_LIST_DEFAULT_MAX);
        sp_error_free(e);
        sp_config_free(defs, &c);
}
END_TEST

START_TEST(list_help_names_the_type)
{
        char *out = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        list_cfg c = {0};
        char *argv[] = {"prog", "--help", NULL};
        ck_assert_int_eq(sp_config_load(defs, &c, "SPLTEST", 2, argv, NULL, f, NULL), 1);
        fclose(f);
        ck_assert_ptr_nonnull(strstr(out, "list     a key file (repeatable)"));
        free(out);
        sp_config_free(defs, &c);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("config_list");
        TCase *tc = tcase_create("list");
        tcase_add_test(tc, list_every_occurrence_adds_in_order);
        tcase_add_test(tc, list_count_and_length_are_bounded);
        tcase_add_test(tc, list_help_names_the_type);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
