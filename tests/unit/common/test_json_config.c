/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: strict JSON parsing, field validation, and configuration. */
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/fileio.h"
#include "space/json.h"

#define PARSE(s, obj, e) sp_json_parse((s), strlen(s), (obj), (e))

START_TEST(json_strict)
{
        json_object *o = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(PARSE("{\"a\":1}  \n", &o, NULL), 0);
        json_object_put(o);
        o = NULL;
        static const char *const bad[] = {
                "",         "{",    "{\"a\":1} x",      "{\"a\":1}{}", "[1,]",
                "{'a':1}",  "NaN",  "{\"a\":Infinity}", "/* c */ {}",  "{\"a\":\"\\u0000\"",
                "\"\xff\"", "[1.]", "[\"a\tb\"]",       "[01]",        "{\"a\" 1}",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_msg(PARSE(bad[i], &o, NULL) < 0, "accepted %s", bad[i]);
                ck_assert_ptr_null(o);
        }
        /* depth limit */
        char deep[200];
        memset(deep, '[', 100);
        memset(deep + 100, ']', 100);
        ck_assert_int_lt(sp_json_parse(deep, sizeof(deep), &o, &e), 0);
        ck_assert_int_eq(e->code, SP_E_INVALID);
}
END_TEST

/* Parses s and asserts it is refused with exactly msg. */
static void assert_refused(const char *s, const char *msg)
{
        json_object *o = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(PARSE(s, &o, &e) < 0, "accepted %s", s);
        ck_assert_ptr_null(o);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert_str_eq(e->message, msg);
}

START_TEST(json_keys_unique_and_without_nul)
{
        /* json-c keeps a key up to its NUL and lets a repeated key win: both refused, naming where. */
        assert_refused("{\"a\":1,\"a\":2}", "duplicate key \"a\"");
        assert_refused("{\"metadata\":{\"x\":\"1\",\"y\":\"2\",\"x\":\"3\"}}", "duplicate key \"x\" in metadata");
        assert_refused("{\"env\":{\"A\\u0000B\":\"1\"}}", "NUL character (\\u0000) in a key in env");
        assert_refused("{\"\\u0000\":1}", "NUL character (\\u0000) in a key");
        /* Escapes decode before comparing: "a" and "\u0061" are one key. */
        assert_refused("{\"m\":{\"a\":1,\"\\u0061\":2}}", "duplicate key \"a\" in m");
        assert_refused("{\"k\":{\"\\ud83d\\ude00\":1,\"\xf0\x9f\x98\x80\":2}}",
                       "duplicate key \"\\xf0\\x9f\\x98\\x80\" in k");
        /* Deeper, through arrays. */
        assert_refused("{\"a\":[{},{\"b\":{\"c\":1,\"c\":1}}]}", "duplicate key \"c\" in a[1].b");
        /* The same key in sibling or nested objects is fine, and so are NULs in values' escapes elsewhere. */
        json_object *o = NULL;
        const char *ok = "{\"a\":{\"a\":1},\"b\":[{\"a\":1},{\"a\":2}],\"\\u0061b\":true}";
        ck_assert_int_eq(PARSE(ok, &o, NULL), 0);
        ck_assert_int_eq(json_object_object_length(o), 3);
        json_object_put(o);
        /* Many keys: still linear enough (sorted per object). */
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_buf_append_str(&b, "{", NULL);
        for (int i = 0; i < 20000; i++) {
                char k[32];
                snprintf(k, sizeof(k), "%s\"k%d\":%d", i ? "," : "", i, i);
                sp_buf_append_str(&b, k, NULL);
        }
        sp_buf_append_str(&b, ",\"k7\":0}", NULL);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(sp_json_parse(b.data, b.len, &o, &e), 0);
        ck_assert_str_eq(e->message, "duplicate key \"k7\"");
}
END_TEST

START_TEST(json_fields_name_the_problem)
{
        _cleanup_json_ json_object *o = NULL;
        const char *doc = "{\"template\":\"base\",\"timeout\":99999999,\"env\":{\"A\":\"1\",\"B\":2},"
                          "\"argv\":[\"sh\",3],\"nul\":\"a\\u0000b\",\"flag\":\"yes\",\"extra\":1}";
        ck_assert_int_eq(PARSE(doc, &o, NULL), 0);

        const char *t = NULL;
        ck_assert_int_eq(sp_json_get_string(o, "template", true, 64, &t, NULL), 0);
        ck_assert_str_eq(t, "base");

        struct {
                int r;
                const char *want;
        } cases[6];
        sp_error *e[6] = {0};
        int64_t n;
        bool b;
        json_object *m;
        char **v = NULL;
        cases[0].r = sp_json_get_int(o, "timeout", true, 1, 86400, &n, &e[0]);
        cases[0].want = "field 'timeout' must be an integer between 1 and 86400";
        cases[1].r = sp_json_get_string_map(o, "env", false, 10, 64, 64, &m, &e[1]);
        cases[1].want = "field 'env.B' must be a string";
        cases[2].r = sp_json_get_strv(o, "argv", true, 10, 64, &v, &e[2]);
        cases[2].want = "field 'argv[1]' must be a string";
        cases[3].r = sp_json_get_string(o, "nul", true, 64, &t, &e[3]);
        cases[3].want = "field 'nul' contains a NUL character";
        cases[4].r = sp_json_get_bool(o, "flag", true, &b, &e[4]);
        cases[4].want = "field 'flag' must be true or false";
        static const char *const allowed[] = {"template", "timeout", "env", "argv", "nul", "flag", NULL};
        cases[5].r = sp_json_check_fields(o, allowed, &e[5]);
        cases[5].want = "unknown field 'extra'";
        for (int i = 0; i < 6; i++) {
                ck_assert_int_lt(cases[i].r, 0);
                ck_assert_int_eq(e[i]->code, SP_E_INVALID);
                ck_assert_str_eq(e[i]->message, cases[i].want);
                sp_error_free(e[i]);
        }
        ck_assert_ptr_null(v);

        /* absent optional: untouched, success; absent required: named */
        n = 42;
        ck_assert_int_eq(sp_json_get_int(o, "missing", false, 0, 10, &n, NULL), 0);
        ck_assert_int_eq(n, 42);
        _cleanup_error_ sp_error *e2 = NULL;
        ck_assert_int_lt(sp_json_get_int(o, "missing", true, 0, 10, &n, &e2), 0);
        ck_assert_str_eq(e2->message, "missing required field 'missing'");
}
END_TEST

START_TEST(json_member_str_is_lenient)
{
        json_object *o = NULL;
        const char *doc = "{\"s\":\"x\",\"n\":1,\"z\":null,\"a\":[\"y\"]}";
        ck_assert_int_eq(sp_json_parse(doc, strlen(doc), &o, NULL), 0);
        ck_assert_str_eq(sp_json_member_str(o, "s"), "x");
        ck_assert_ptr_null(sp_json_member_str(o, "n"));
        ck_assert_ptr_null(sp_json_member_str(o, "z"));
        ck_assert_ptr_null(sp_json_member_str(o, "a"));
        ck_assert_ptr_null(sp_json_member_str(o, "missing"));
        ck_assert_ptr_null(sp_json_member_str(json_object_object_get(o, "a"), "s")); /* not an object */
        ck_assert_ptr_null(sp_json_member_str(NULL, "s"));
        json_object_put(o);
}
END_TEST

START_TEST(json_big_numbers)
{
        _cleanup_json_ json_object *o = NULL;
        ck_assert_int_eq(PARSE("{\"a\":18446744073709551615,\"b\":1e3,\"c\":-9223372036854775808}", &o, NULL), 0);
        int64_t n;
        ck_assert_int_lt(sp_json_get_int(o, "a", true, INT64_MIN, INT64_MAX, &n, NULL), 0);
        ck_assert_int_lt(sp_json_get_int(o, "b", true, INT64_MIN, INT64_MAX, &n, NULL), 0);
        ck_assert_int_eq(sp_json_get_int(o, "c", true, INT64_MIN, INT64_MAX, &n, NULL), 0);
        ck_assert(n == INT64_MIN);
}
END_TEST

typedef struct {
        char *listen;
        int64_t slots;
        bool debug;
        int64_t idle;
        int64_t storage;
} test_cfg;

static const sp_config_def defs[] = {
        {"listen", SP_CONFIG_STRING, "127.0.0.1:8080", offsetof(test_cfg, listen), 0, 0, "address to listen on"},
        {"slots", SP_CONFIG_INT, "16", offsetof(test_cfg, slots), 1, 1000, "sandbox slots"},
        {"debug", SP_CONFIG_BOOL, "false", offsetof(test_cfg, debug), 0, 0, "debug logging"},
        {"idle-timeout", SP_CONFIG_DURATION, "6h", offsetof(test_cfg, idle), 0, 0, "suspend after"},
        {"storage-size", SP_CONFIG_SIZE, "10G", offsetof(test_cfg, storage), 0, 0, "image size"},
        SP_CONFIG_END,
};

START_TEST(utf8_validity)
{
        static const struct {
                const char *s;
                bool ok;
        } cases[] = {
                {"", true},
                {"plain ascii", true},
                {"caf\xc3\xa9", true},
                {"\xe2\x82\xac", true}, /* U+20AC */
                {"\xf0\x9f\x98\x80", true}, /* U+1F600 */
                {"\xf4\x8f\xbf\xbf", true}, /* U+10FFFF */
                {"\xff\xfe", false}, /* not a lead byte */
                {"\x80", false}, /* a lone continuation */
                {"\xc3", false}, /* cut */
                {"\xe2\x82", false}, /* cut */
                {"\xc0\xaf", false}, /* overlong '/' */
                {"\xe0\x80\xaf", false}, /* overlong */
                {"\xed\xa0\x80", false}, /* a surrogate */
                {"\xf4\x90\x80\x80", false}, /* past U+10FFFF */
                {"\xf8\x88\x80\x80\x80", false}, /* five bytes */
                {"ok\xc3\xa9\xc3", false}, /* cut at the end */
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++)
                ck_assert_msg(sp_utf8_valid(cases[i].s, strlen(cases[i].s)) == cases[i].ok, "case %zu", i);
        /* The length is what counts, not a NUL. */
        ck_assert(!sp_utf8_valid("\xc3\xa9", 1));
}
END_TEST

START_TEST(config_layers)
{
        char *dir = sp_test_tmpdir("config");
        char path[512];
        snprintf(path, sizeof(path), "%s/test.conf", dir);
        const char *text = "# comment\n\nlisten = \"0.0.0.0:9 #not a comment\"\nslots=20 # trailing\n"
                           "debug = yes\r\nidle-timeout = 30m\n";
        ck_assert_int_eq(sp_file_write_atomic(path, text, strlen(text), 0600, NULL), 0);

        setenv("SPTEST_SLOTS", "30", 1);
        char *argv[] = {"prog", "--config", path, "--storage-size=512M", "--no-debug", "pos1", "--x", NULL};
        test_cfg c = {0};
        int argind = 0;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_config_load(defs, &c, "SPTEST", 7, argv, &argind, NULL, &e), 0);
        ck_assert_str_eq(c.listen, "0.0.0.0:9 #not a comment"); /* file */
        ck_assert_int_eq(c.slots, 30); /* env beats file */
        ck_assert(!c.debug); /* flag beats file */
        ck_assert_int_eq(c.idle, 30LL * 60 * 1000000);
        ck_assert_int_eq(c.storage, 512LL << 20);
        ck_assert_int_eq(argind, 5); /* stops at the first positional */
        sp_config_free(defs, &c);
        unsetenv("SPTEST_SLOTS");
        sp_test_tmpdir_remove(dir);
        free(dir);
}
END_TEST

START_TEST(config_errors_name_key_and_line)
{
        test_cfg c = {0};
        ck_assert_int_eq(sp_config_defaults(defs, &c, NULL), 0);
        struct {
                const char *text, *want;
        } cases[] = {
                {"slots = 0\n", "t.conf:1: key 'slots': 0 is out of range [1, 1000]"},
                {"\nbogus = 1\n", "t.conf:2: unknown key 'bogus'"},
                {"listen\n", "t.conf:1: expected 'key = value'"},
                {"debug = maybe\n", "t.conf:1: key 'debug': 'maybe' is not a boolean (true/false)"},
                {"listen = \"abc\n", "t.conf:1: unterminated quoted value"},
                {"idle-timeout = 5 parsecs\n", "t.conf:1: key 'idle-timeout': invalid duration '5 parsecs' (use e.g. "
                                               "250ms, 30s, 5m, 6h, 2d)"},
                {"storage-size = 99999999999T\n", "t.conf:1: key 'storage-size': size '99999999999T' too large"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                sp_error *e = NULL;
                ck_assert_int_lt(sp_config_parse_text(defs, &c, cases[i].text, strlen(cases[i].text), "t.conf", &e), 0);
                ck_assert_str_eq(e->message, cases[i].want);
                sp_error_free(e);
        }
        char *argv[] = {"prog", "--slots", NULL};
        sp_error *e = NULL;
        ck_assert_int_lt(sp_config_load(defs, &c, "SPTEST", 2, argv, NULL, NULL, &e), 0);
        ck_assert_str_eq(e->message, "flag '--slots' needs a value");
        sp_error_free(e);
        e = NULL;
        char *argv2[] = {"prog", "--nope=1", NULL};
        ck_assert_int_lt(sp_config_load(defs, &c, "SPTEST", 2, argv2, NULL, NULL, &e), 0);
        ck_assert_str_eq(e->message, "unknown flag '--nope' (see --help)");
        sp_error_free(e);
        sp_config_free(defs, &c);
}
END_TEST

START_TEST(config_help_lists_defaults)
{
        char *out = NULL;
        size_t n = 0;
        FILE *f = open_memstream(&out, &n);
        test_cfg c = {0};
        char *argv[] = {"prog", "--help", NULL};
        ck_assert_int_eq(sp_config_load(defs, &c, "SPTEST", 2, argv, NULL, f, NULL), 1);
        fclose(f);
        ck_assert_ptr_nonnull(strstr(out, "--idle-timeout"));
        ck_assert_ptr_nonnull(strstr(out, "default: 6h; env SPTEST_IDLE_TIMEOUT"));
        free(out);
        sp_config_free(defs, &c);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("json_config");
        TCase *tc = tcase_create("all");
        tcase_add_test(tc, json_strict);
        tcase_add_test(tc, utf8_validity);
        tcase_add_test(tc, json_member_str_is_lenient);
        tcase_add_test(tc, json_keys_unique_and_without_nul);
        tcase_add_test(tc, json_fields_name_the_problem);
        tcase_add_test(tc, json_big_numbers);
        tcase_add_test(tc, config_layers);
        tcase_add_test(tc, config_errors_name_key_and_line);
        tcase_add_test(tc, config_help_lists_defaults);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
