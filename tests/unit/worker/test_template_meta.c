/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: template metadata — defaults, JSON round trip, atomic file
 * round trip, and a parser that refuses every malformed field by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "template/template.h"
#include "test_template_util.h"

#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

START_TEST(defaults_and_round_trip)
{
        wk_template_meta *m = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_template_meta_new(WK_TEMPLATE_SOURCE_OCI, &m, &err), &err);
        ck_assert_str_eq(m->env[0], WK_TEMPLATE_DEFAULT_PATH);
        ck_assert_ptr_null(m->env[1]);
        ck_assert_ptr_null(m->cmd[0]);
        ck_assert_str_eq(m->workdir, "/");
        ck_assert_str_eq(m->user, "root");
        ck_assert_str_eq(m->digest, "");

        sp_strv_freep(&m->cmd);
        m->cmd = calloc(4, sizeof(char *));
        m->cmd[0] = strdup("/bin/sh");
        m->cmd[1] = strdup("-c");
        m->cmd[2] = strdup("echo \"quoted\" \\ and ünïcödé");
        free(m->user);
        m->user = strdup("1000:1000");
        snprintf(m->digest, sizeof(m->digest), "%s", DIGEST);

        sp_buf out = SP_BUF_INIT;
        sp_test_ok(wk_template_meta_to_json(m, &out, &err), &err);
        ck_assert_msg(strstr(out.data, "\"source\":\"oci\"") && strstr(out.data, "\"version\":1"), "%s", out.data);
        wk_template_meta *back = NULL;
        sp_test_ok(wk_template_meta_parse(out.data, out.len, &back, &err), &err);
        ck_assert_int_eq(back->source, WK_TEMPLATE_SOURCE_OCI);
        ck_assert_str_eq(back->env[0], WK_TEMPLATE_DEFAULT_PATH);
        ck_assert_str_eq(back->cmd[2], m->cmd[2]);
        ck_assert_ptr_null(back->cmd[3]);
        ck_assert_str_eq(back->user, "1000:1000");
        ck_assert_str_eq(back->digest, DIGEST);
        sp_buf_free(&out);
        wk_template_meta_free(back);
        wk_template_meta_free(m);
}
END_TEST

START_TEST(file_round_trip)
{
        char *dir = sp_test_tmpdir("tpl-meta");
        char path[600];
        snprintf(path, sizeof(path), "%s/template.json", dir);
        wk_template_meta *m = NULL, *back = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_template_meta_new(WK_TEMPLATE_SOURCE_BASE, &m, &err), &err);
        sp_test_ok(wk_template_meta_write(path, m, &err), &err);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_uint_eq(st.st_mode & 0777, 0644);
        ck_assert_int_eq(tt_count_entries(dir), 1); /* no temporary file left */
        sp_test_ok(wk_template_meta_read(path, &back, &err), &err);
        ck_assert_int_eq(back->source, WK_TEMPLATE_SOURCE_BASE);
        ck_assert_str_eq(back->digest, "");

        /* an invalid value is never written */
        free(m->workdir);
        m->workdir = strdup("relative");
        tt_assert_error(wk_template_meta_write(path, m, &err), err, SP_E_INVALID, "field 'workdir'");
        wk_template_meta_free(back);
        sp_test_ok(wk_template_meta_read(path, &back, &err), &err);
        ck_assert_str_eq(back->workdir, "/");

        char missing[700];
        snprintf(missing, sizeof(missing), "%s/missing.json", dir);
        tt_assert_error(wk_template_meta_read(missing, &back, &err), err, SP_E_NOT_FOUND, "missing.json");
        wk_template_meta_free(back);
        wk_template_meta_free(m);
        tt_rmrf(dir);
        free(dir);
}
END_TEST

START_TEST(parser_names_bad_fields)
{
#define BASE_FIELDS "\"version\":1,\"source\":\"tar\",\"workdir\":\"/\",\"user\":\"root\",\"cmd\":[]"
        static const struct {
                const char *json;
                const char *needle;
        } cases[] = {
                {"[]", "must be a JSON object"},
                {"{", "template metadata"},
                {"{" BASE_FIELDS ",\"env\":[]} x", "template metadata"},
                {"{" BASE_FIELDS ",\"env\":[],\"extra\":1}", "unknown field 'extra'"},
                {"{\"version\":2,\"source\":\"tar\",\"env\":[],\"workdir\":\"/\",\"user\":\"root\",\"cmd\":[]}",
                 "'version'"},
                {"{\"version\":1,\"source\":\"zip\",\"env\":[],\"workdir\":\"/\",\"user\":\"root\",\"cmd\":[]}",
                 "'source'"},
                {"{" BASE_FIELDS "}", "'env'"},
                {"{" BASE_FIELDS ",\"env\":[\"NOEQUALS\"]}", "'env[0]' must be KEY=VALUE"},
                {"{" BASE_FIELDS ",\"env\":[\"=value\"]}", "'env[0]' must be KEY=VALUE"},
                {"{" BASE_FIELDS ",\"env\":[1]}", "'env[0]'"},
                {"{\"version\":1,\"source\":\"tar\",\"env\":[],\"workdir\":\"rel\",\"user\":\"root\",\"cmd\":[]}",
                 "'workdir'"},
                {"{\"version\":1,\"source\":\"tar\",\"env\":[],\"workdir\":\"/\",\"user\":\"\",\"cmd\":[]}", "'user'"},
                {"{\"version\":1,\"source\":\"tar\",\"env\":[],\"workdir\":\"/\",\"user\":\"a\\nb\",\"cmd\":[]}",
                 "'user'"},
                {"{\"version\":1,\"source\":\"tar\",\"env\":[],\"workdir\":\"/\",\"user\":\"root\",\"cmd\":\"sh\"}",
                 "'cmd'"},
                {"{" BASE_FIELDS ",\"env\":[],\"digest\":\"md5:abc\"}", "'digest'"},
                {"{" BASE_FIELDS ",\"env\":[],\"digest\":\"sha256:ABCDEF\"}", "'digest'"},
                {"{" BASE_FIELDS ",\"env\":[\"A=\\u0000\"]}", "template metadata"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                wk_template_meta *m = NULL;
                sp_error *err = NULL;
                int r = wk_template_meta_parse(cases[i].json, strlen(cases[i].json), &m, &err);
                ck_assert_msg(r < 0, "case %zu parsed: %s", i, cases[i].json);
                ck_assert_ptr_null(m);
                ck_assert_msg(err && strstr(err->message, cases[i].needle), "case %zu: '%s' lacks '%s'", i,
                              err ? err->message : "(none)", cases[i].needle);
                sp_error_free(err);
        }
}
END_TEST

START_TEST(parser_bounds_sizes)
{
        sp_buf b = SP_BUF_INIT;
        sp_buf_append_str(&b, "{" BASE_FIELDS ",\"env\":[", NULL);
        for (int i = 0; i <= WK_TEMPLATE_META_MAX_ITEMS; i++)
                sp_buf_appendf(&b, NULL, "%s\"K%d=v\"", i ? "," : "", i);
        sp_buf_append_str(&b, "]}", NULL);
        wk_template_meta *m = NULL;
        sp_error *err = NULL;
        tt_assert_error(wk_template_meta_parse(b.data, b.len, &m, &err), err, SP_E_INVALID, "'env'");
        sp_buf_clear(&b);

        sp_buf_append_str(&b, "{" BASE_FIELDS ",\"env\":[\"K=", NULL);
        for (int i = 0; i < WK_TEMPLATE_META_MAX_STRING; i++)
                sp_buf_append(&b, "v", 1, NULL);
        sp_buf_append_str(&b, "\"]}", NULL);
        tt_assert_error(wk_template_meta_parse(b.data, b.len, &m, &err), err, SP_E_INVALID, "'env[0]'");

        char *huge = calloc(1, WK_TEMPLATE_META_MAX_BYTES + 2);
        memset(huge, ' ', WK_TEMPLATE_META_MAX_BYTES + 1);
        tt_assert_error(wk_template_meta_parse(huge, WK_TEMPLATE_META_MAX_BYTES + 1, &m, &err), err, SP_E_TOO_LARGE,
                        "larger than");
        free(huge);
        sp_buf_free(&b);
}
END_TEST

START_TEST(source_names)
{
        for (int s = WK_TEMPLATE_SOURCE_DIR; s <= WK_TEMPLATE_SOURCE_BASE; s++) {
                const char *name = wk_template_source_name((wk_template_source)s);
                ck_assert_ptr_nonnull(name);
                wk_template_source back;
                ck_assert_int_eq(wk_template_source_parse(name, &back), 0);
                ck_assert_int_eq((int)back, s);
        }
        ck_assert_ptr_null(wk_template_source_name((wk_template_source)0));
        ck_assert_ptr_null(wk_template_source_name((wk_template_source)99));
        wk_template_source back;
        ck_assert_int_eq(wk_template_source_parse("docker", &back), -1);
        wk_template_meta *m = NULL;
        sp_error *err = NULL;
        tt_assert_error(wk_template_meta_new((wk_template_source)42, &m, &err), err, SP_E_INVALID, "unknown");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_meta");
        TCase *tc = tcase_create("meta");
        tcase_add_test(tc, defaults_and_round_trip);
        tcase_add_test(tc, file_round_trip);
        tcase_add_test(tc, parser_names_bad_fields);
        tcase_add_test(tc, parser_bounds_sizes);
        tcase_add_test(tc, source_names);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
