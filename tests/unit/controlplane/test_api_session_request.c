/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: decoding and validation of the session, file and token routes'
 * requests (controlplane/api/request_session.h) — argv or command, every
 * bound on both sides (argv and env counts and bytes, pty, timeout, paths,
 * modes, limits, ttl), wrong types, unknown fields, signal names and
 * numbers, and the session cursor. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"
#include "api/request_session.h"
#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"
#include "store/tokenkeys.h"

static bool all_zero(const void *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (((const unsigned char *)p)[i])
                        return false;
        return true;
}

/* The session create decoder fails with a message containing want, output zeroed. */
static void create_fails_at(const char *body, size_t len, sp_errc code, const char *want, int line)
{
        cp_session_create_req r;
        memset(&r, 0xa5, sizeof(r));
        _cleanup_error_ sp_error *e = NULL;
        int ret = cp_req_session_create(body, len, &r, &e);
        ck_assert_msg(ret == -(int)code && e && e->code == code, "line %d: %.120s: got %d (%s)", line, body, ret,
                      e ? e->message : "no error");
        ck_assert_msg(strstr(e->message, want), "line %d: message '%s' lacks '%s'", line, e->message, want);
        ck_assert_msg(all_zero(&r, sizeof(r)), "line %d: output not zeroed", line);
}
#define create_fails(body, want) create_fails_at((body), strlen(body), SP_E_INVALID, (want), __LINE__)

static void create_ok_at(const char *body, cp_session_create_req *r, int line)
{
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(cp_req_session_create(body, strlen(body), r, &e) == 0, "line %d: %.120s: %s", line, body,
                      e ? e->message : "");
}
#define create_ok(body, r) create_ok_at((body), (r), __LINE__)

/* A JSON string of n bytes of c. */
static char *repeat(char c, size_t n)
{
        char *s = malloc(n + 1);
        ck_assert_ptr_nonnull(s);
        memset(s, c, n);
        s[n] = '\0';
        return s;
}

START_TEST(session_create_argv_and_defaults)
{
        cp_session_create_req r;
        create_ok("{\"argv\":[\"ls\",\"-l\",\"\"]}", &r);
        ck_assert_uint_eq(json_object_array_length(r.argv), 3);
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(r.argv, 1)), "-l");
        ck_assert(json_object_is_type(r.env, json_type_object));
        ck_assert_int_eq(json_object_object_length(r.env), 0);
        ck_assert_ptr_null(r.cwd);
        ck_assert_str_eq(r.user, "");
        ck_assert(!r.pty && !r.stdin_open);
        ck_assert_int_eq(r.timeout_s, 0);
        ck_assert_str_eq(r.tag, "");
        cp_session_create_req_free(&r);
        cp_session_create_req_free(&r); /* idempotent */

        create_ok("{\"argv\":[\"ls\"],\"tag\":\"web server \u00e9\"}", &r);
        ck_assert_str_eq(r.tag, "web server \xc3\xa9");
        cp_session_create_req_free(&r);

        create_ok("{\"command\":\"echo hi; exit 3\",\"env\":{\"A_1\":\"x\",\"_b\":\"\"},\"cwd\":\"/srv\","
                  "\"user\":\"1000\",\"pty\":{},\"stdin\":true,\"timeout_s\":2592000,\"argv\":null}",
                  &r);
        ck_assert_uint_eq(json_object_array_length(r.argv), 3);
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(r.argv, 0)), "/bin/sh");
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(r.argv, 1)), "-c");
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(r.argv, 2)), "echo hi; exit 3");
        ck_assert_int_eq(json_object_object_length(r.env), 2);
        ck_assert_str_eq(r.cwd, "/srv");
        ck_assert_str_eq(r.user, "1000");
        ck_assert(r.pty && r.stdin_open);
        ck_assert_int_eq(r.rows, 24);
        ck_assert_int_eq(r.cols, 80);
        ck_assert_int_eq(r.timeout_s, 2592000);
        cp_session_create_req_free(&r);

        create_ok("{\"argv\":[\"top\"],\"pty\":{\"rows\":10000,\"cols\":1}}", &r);
        ck_assert_int_eq(r.rows, 10000);
        ck_assert_int_eq(r.cols, 1);
        cp_session_create_req_free(&r);
}
END_TEST

START_TEST(session_create_refuses)
{
        create_fails("", "argv or command is required");
        create_fails("{}", "argv or command is required");
        create_fails("[]", "must be a JSON object");
        create_fails("{\"argv\":", "request body");
        create_fails("{\"argv\":[\"ls\"],\"x\":1}", "unknown field 'x'");
        create_fails("{\"argv\":[]}", "must name a program");
        create_fails("{\"argv\":[\"\"]}", "must name a program");
        create_fails("{\"argv\":\"ls\"}", "'argv' must be an array");
        create_fails("{\"argv\":[\"ls\",1]}", "array of strings");
        create_fails("{\"argv\":[\"ls\",null]}", "array of strings");
        create_fails("{\"argv\":[\"ls\"],\"command\":\"ls\"}", "not both");
        create_fails("{\"command\":\"\"}", "'command' must not be empty");
        create_fails("{\"command\":5}", "'command' must be a string");
        create_fails("{\"argv\":[\"ls\"],\"env\":{\"1A\":\"x\"}}", "name '1A'");
        create_fails("{\"argv\":[\"ls\"],\"env\":{\"A-B\":\"x\"}}", "name 'A-B'");
        create_fails("{\"argv\":[\"ls\"],\"env\":{\"A\":1}}", "must be a string");
        create_fails("{\"argv\":[\"ls\"],\"env\":[]}", "'env' must be an object");
        create_fails("{\"argv\":[\"ls\"],\"cwd\":\"\"}", "'cwd' must not be empty");
        create_fails("{\"argv\":[\"ls\"],\"user\":\"a b\"}", "'user' must be a user name or uid");
        create_fails("{\"argv\":[\"ls\"],\"user\":\"a:b\"}", "'user' must be a user name or uid");
        create_fails("{\"argv\":[\"ls\"],\"user\":\"\"}", "'user' must be a user name or uid");
        create_fails("{\"argv\":[\"ls\"],\"pty\":{\"rows\":0}}", "rows");
        create_fails("{\"argv\":[\"ls\"],\"pty\":{\"cols\":10001}}", "cols");
        create_fails("{\"argv\":[\"ls\"],\"pty\":{\"depth\":1}}", "unknown field 'depth'");
        create_fails("{\"argv\":[\"ls\"],\"pty\":true}", "'pty' must be an object");
        create_fails("{\"argv\":[\"ls\"],\"stdin\":1}", "'stdin' must be true or false");
        create_fails("{\"argv\":[\"ls\"],\"timeout_s\":-1}", "timeout_s");
        create_fails("{\"argv\":[\"ls\"],\"timeout_s\":2592001}", "timeout_s");
        create_fails("{\"argv\":[\"ls\"],\"timeout_s\":1.5}", "timeout_s");
        create_fails("{\"argv\":[\"ls\"],\"tag\":\"\"}",
                     "'tag' must be 1 to 256 bytes of UTF-8 without control characters");
        create_fails("{\"argv\":[\"ls\"],\"tag\":\"a\\nb\"}", "'tag' must be 1 to 256 bytes");
        create_fails("{\"argv\":[\"ls\"],\"tag\":\"a\\u0000b\"}", "'tag' contains a NUL");
        create_fails("{\"argv\":[\"ls\"],\"tag\":7}", "'tag' must be a string");
        create_fails("{\"argv\":[\"ls\"],\"tag\":\"\xff\xfe\"}", "invalid utf-8");

        /* Sizes: a user of 65 bytes, a cwd of 4097, argv and env beyond their counts and bytes. */
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_free_ char *u65 = repeat('u', 65), *p4097 = repeat('p', 4097), *big = repeat('a', 70000);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"ls\"],\"user\":\"%s\"}", u65);
        create_fails(b.data, "'user' is longer than 64");
        sp_buf_clear(&b);
        _cleanup_free_ char *t257 = repeat('t', 257);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"ls\"],\"tag\":\"%s\"}", t257);
        create_fails(b.data, "'tag' is longer than 256");
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"ls\"],\"cwd\":\"%s\"}", p4097);
        create_fails(b.data, "'cwd' is longer than 4096");
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"x\"");
        for (int i = 0; i < CP_SESSION_MAX_ARGV; i++)
                sp_buf_appendf(&b, NULL, ",\"a\"");
        sp_buf_appendf(&b, NULL, "]}");
        create_fails(b.data, "'argv' has more than 4096 items");
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"x\"");
        for (int i = 0; i < 4; i++)
                sp_buf_appendf(&b, NULL, ",\"%s\"", big);
        sp_buf_appendf(&b, NULL, "]}");
        create_fails(b.data, "'argv' is longer than 262144 bytes in all");
        sp_buf_clear(&b);
        _cleanup_free_ char *cmd = repeat('c', CP_SESSION_MAX_ARGV_BYTES + 1);
        sp_buf_appendf(&b, NULL, "{\"command\":\"%s\"}", cmd);
        create_fails(b.data, "'command' is longer than 262144");
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"x\"],\"env\":{");
        for (int i = 0; i <= CP_SESSION_MAX_ENV_BYTES / 70000; i++)
                sp_buf_appendf(&b, NULL, "%s\"E%d\":\"%s\"", i ? "," : "", i, big);
        sp_buf_appendf(&b, NULL, "}}");
        create_fails(b.data, "'env' is longer than 2097152 bytes in all");
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"x\"],\"env\":{");
        for (int i = 0; i <= CP_SESSION_MAX_ENV; i++)
                sp_buf_appendf(&b, NULL, "%s\"E%d\":\"\"", i ? "," : "", i);
        sp_buf_appendf(&b, NULL, "}}");
        create_fails(b.data, "'env' has more than 1024 entries");

        /* Exactly at the bounds passes. */
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "{\"argv\":[\"x\"");
        for (int i = 1; i < CP_SESSION_MAX_ARGV; i++)
                sp_buf_appendf(&b, NULL, ",\"a\"");
        sp_buf_appendf(&b, NULL, "],\"user\":\"%.64s\",\"cwd\":\"%.4096s\"}", u65, p4097);
        cp_session_create_req r;
        create_ok(b.data, &r);
        ck_assert_uint_eq(json_object_array_length(r.argv), CP_SESSION_MAX_ARGV);
        cp_session_create_req_free(&r);

        /* A body over 8 MiB is too large, whatever it holds. */
        _cleanup_free_ char *huge = repeat(' ', CP_SESSION_MAX_BODY + 1);
        create_fails_at(huge, strlen(huge), SP_E_TOO_LARGE, "larger than", __LINE__);
}
END_TEST

START_TEST(signals)
{
        static const struct {
                const char *in;
                int want;
        } ok[] = {{"TERM", 15},  {"SIGTERM", 15}, {"KILL", 9},  {"SIGKILL", 9}, {"HUP", 1},   {"INT", 2},
                  {"QUIT", 3},   {"USR1", 10},    {"USR2", 12}, {"CONT", 18},   {"STOP", 19}, {"TSTP", 20},
                  {"WINCH", 28}, {"1", 1},        {"9", 9},     {"64", 64}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok); i++) {
                int sig = -1;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(cp_signal_parse(ok[i].in, &sig, &e) == 0, "%s: %s", ok[i].in, e ? e->message : "");
                ck_assert_int_eq(sig, ok[i].want);
        }
        static const char *const bad[] = {"",    "0",          "65",    "100",   "-1",    "+9",  "09", "term",
                                          "SIG", "SIGSIGTERM", "TERM ", " TERM", "BOGUS", "1.0", "0x9"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                int sig = -1;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(cp_signal_parse(bad[i], &sig, &e) == -SP_E_INVALID, "'%s' accepted", bad[i]);
                ck_assert_int_eq(sig, 0);
                ck_assert(strstr(e->message, "must be HUP, INT"));
        }

        int sig = 0;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(cp_req_signal("{\"signal\":\"SIGINT\"}", 19, &sig, &e), 0);
        ck_assert_int_eq(sig, 2);
        ck_assert_int_eq(cp_req_signal("{\"signal\":15}", 13, &sig, &e), 0);
        ck_assert_int_eq(sig, 15);
        static const struct {
                const char *body;
                const char *want;
        } refused[] = {
                {"{}", "missing required field 'signal'"},
                {"", "missing required field 'signal'"},
                {"{\"signal\":null}", "missing required field 'signal'"},
                {"{\"signal\":\"NOPE\"}", "signal 'NOPE' must be"},
                {"{\"signal\":0}", "between 1 and 64"},
                {"{\"signal\":65}", "between 1 and 64"},
                {"{\"signal\":15.0}", "a signal name or number"},
                {"{\"signal\":true}", "a signal name or number"},
                {"{\"signal\":\"TERM\",\"pid\":1}", "unknown field 'pid'"},
                {"{\"signal\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}", "longer than 16"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(refused); i++) {
                sp_error_freep(&e);
                sig = -1;
                ck_assert_msg(cp_req_signal(refused[i].body, strlen(refused[i].body), &sig, &e) == -SP_E_INVALID,
                              "%s accepted", refused[i].body);
                ck_assert_msg(strstr(e->message, refused[i].want), "%s: '%s'", refused[i].body, e->message);
                ck_assert_int_eq(sig, 0);
        }
}
END_TEST

START_TEST(tokens)
{
        cp_token_req t;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(cp_req_session_token("", 0, &t, &e), 0);
        ck_assert_str_eq(t.scope, "");
        ck_assert_int_eq(t.ttl_s, 0);
        ck_assert_ptr_null(t.path);
        cp_token_req_free(&t);
        ck_assert_int_eq(cp_req_session_token("{\"scope\":\"write\",\"ttl_s\":86400}", 31, &t, &e), 0);
        ck_assert_str_eq(t.scope, "write");
        ck_assert_int_eq(t.ttl_s, CP_TOKEN_MAX_TTL_S);
        cp_token_req_free(&t);
        const char *files = "{\"path\":\"/srv/a b.txt\",\"scope\":\"read\",\"ttl_s\":1}";
        ck_assert_int_eq(cp_req_files_token(files, strlen(files), &t, &e), 0);
        ck_assert_str_eq(t.path, "/srv/a b.txt");
        ck_assert_str_eq(t.scope, "read");
        ck_assert_int_eq(t.ttl_s, 1);
        cp_token_req_free(&t);

        static const struct {
                bool files;
                const char *body, *want;
        } refused[] = {
                {false, "{\"scope\":\"admin\"}", "'scope' must be read or write"},
                {false, "{\"scope\":\"\"}", "'scope' must be read or write"},
                {false, "{\"ttl_s\":0}", "between 1 and 86400"},
                {false, "{\"ttl_s\":86401}", "between 1 and 86400"},
                {false, "{\"path\":\"/a\"}", "unknown field 'path'"},
                {true, "{\"path\":\"\"}", "'path' must not be empty"},
                {true, "{\"path\":7}", "'path' must be a string"},
                {true, "{\"typ\":\"files\"}", "unknown field 'typ'"},
                {true, "[1]", "must be a JSON object"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(refused); i++) {
                sp_error_freep(&e);
                memset(&t, 0xa5, sizeof(t));
                const char *b = refused[i].body;
                int r = refused[i].files ? cp_req_files_token(b, strlen(b), &t, &e)
                                         : cp_req_session_token(b, strlen(b), &t, &e);
                ck_assert_msg(r == -SP_E_INVALID, "%s accepted", b);
                ck_assert_msg(strstr(e->message, refused[i].want), "%s: '%s'", b, e->message);
                ck_assert(all_zero(&t, sizeof(t)));
        }
}
END_TEST

START_TEST(files)
{
        cp_files_req f;
        _cleanup_error_ sp_error *e = NULL;
        const char *b = "{\"path\":\"a/b\",\"parents\":true,\"mode\":\"0750\"}";
        ck_assert_int_eq(cp_req_files_mkdir(b, strlen(b), &f, &e), 0);
        ck_assert_str_eq(f.path, "a/b");
        ck_assert(f.parents);
        ck_assert_int_eq(f.mode, 0750);
        cp_files_req_free(&f);
        b = "{\"path\":\"/x\",\"mode\":511}";
        ck_assert_int_eq(cp_req_files_mkdir(b, strlen(b), &f, &e), 0);
        ck_assert_int_eq(f.mode, 0777);
        ck_assert(!f.parents);
        cp_files_req_free(&f);
        b = "{\"path\":\"/x\"}";
        ck_assert_int_eq(cp_req_files_mkdir(b, strlen(b), &f, &e), 0);
        ck_assert_int_eq(f.mode, -1);
        cp_files_req_free(&f);
        b = "{\"from\":\"/a\",\"to\":\"/b\"}";
        ck_assert_int_eq(cp_req_files_move(b, strlen(b), &f, &e), 0);
        ck_assert_str_eq(f.path, "/a");
        ck_assert_str_eq(f.to, "/b");
        cp_files_req_free(&f);
        b = "{\"path\":\"/a\",\"recursive\":true}";
        ck_assert_int_eq(cp_req_files_remove(b, strlen(b), &f, &e), 0);
        ck_assert(f.recursive);
        cp_files_req_free(&f);
        ck_assert_int_eq(cp_req_files_query("/etc", NULL, NULL, NULL, &f, &e), 0);
        ck_assert_int_eq(f.limit, CP_FILES_DEFAULT_LIST);
        cp_files_req_free(&f);
        ck_assert_int_eq(cp_req_files_query("/etc", "10000", NULL, NULL, &f, &e), 0);
        ck_assert_int_eq(f.limit, CP_FILES_MAX_LIST);
        ck_assert_str_eq(f.user, "");
        cp_files_req_free(&f);
        ck_assert_int_eq(cp_req_files_query("/etc", NULL, "user", NULL, &f, &e), 0);
        ck_assert_str_eq(f.user, "user");
        cp_files_req_free(&f);
        b = "{\"path\":\"/a\",\"user\":\"1000\"}";
        ck_assert_int_eq(cp_req_files_remove(b, strlen(b), &f, &e), 0);
        ck_assert_str_eq(f.user, "1000");
        cp_files_req_free(&f);
        /* owner: E2B's semantics, never with user */
        ck_assert_int_eq(cp_req_files_query("/etc", NULL, NULL, "user", &f, &e), 0);
        ck_assert_str_eq(f.owner, "user");
        ck_assert_str_eq(f.user, "");
        cp_files_req_free(&f);
        ck_assert_int_eq(cp_req_files_query("/etc", NULL, "user", "user", &f, &e), -SP_E_INVALID);
        ck_assert_ptr_nonnull(strstr(e->message, "not both"));
        sp_error_free(e);
        e = NULL;
        b = "{\"path\":\"/srv/a\",\"parents\":true,\"owner\":\"user\"}";
        ck_assert_int_eq(cp_req_files_mkdir(b, strlen(b), &f, &e), 0);
        ck_assert_str_eq(f.owner, "user");
        cp_files_req_free(&f);
        b = "{\"from\":\"a\",\"to\":\"b\",\"owner\":\"user\",\"user\":\"user\"}";
        ck_assert_int_eq(cp_req_files_move(b, strlen(b), &f, &e), -SP_E_INVALID);
        sp_error_free(e);
        e = NULL;

        typedef int (*dec)(const char *, size_t, cp_files_req *, sp_error **);
        static const struct {
                dec d;
                const char *body, *want;
        } refused[] = {
                {cp_req_files_mkdir, "{}", "missing required field 'path'"},
                {cp_req_files_mkdir, "{\"path\":\"\"}", "'path' must not be empty"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"mode\":\"8\"}", "'mode' must be octal"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"mode\":\"17777\"}", "'mode' must be octal"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"mode\":\"\"}", "'mode' must be octal"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"mode\":\"000000\"}", "'mode' must be octal"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"mode\":4096}", "between 0 and 4095"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"mode\":-1}", "between 0 and 4095"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"mode\":true}", "'mode' must be octal"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"recursive\":true}", "unknown field 'recursive'"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"parents\":\"yes\"}", "'parents' must be true or false"},
                {cp_req_files_move, "{\"from\":\"/a\"}", "missing required field 'to'"},
                {cp_req_files_move, "{\"to\":\"/a\"}", "missing required field 'from'"},
                {cp_req_files_move, "{\"from\":\"/a\",\"to\":\"\"}", "'to' must not be empty"},
                {cp_req_files_move, "{\"path\":\"/a\"}", "unknown field 'path'"},
                {cp_req_files_remove, "{\"path\":\"/a\",\"recursive\":1}", "'recursive' must be true or false"},
                {cp_req_files_remove, "", "missing required field 'path'"},
                {cp_req_files_remove, "{\"path\":\"/a\",\"user\":\"a b\"}", "'user' must be a user name"},
                {cp_req_files_move, "{\"from\":\"/a\",\"to\":\"/b\",\"user\":\"a:b\"}", "'user' must be a user name"},
                {cp_req_files_mkdir, "{\"path\":\"/a\",\"user\":7}", "'user' must be a string"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(refused); i++) {
                sp_error_freep(&e);
                memset(&f, 0xa5, sizeof(f));
                b = refused[i].body;
                ck_assert_msg(refused[i].d(b, strlen(b), &f, &e) == -SP_E_INVALID, "%s accepted", b);
                ck_assert_msg(strstr(e->message, refused[i].want), "%s: '%s'", b, e->message);
                ck_assert(all_zero(&f, sizeof(f)));
        }
        _cleanup_free_ char *p4097 = repeat('p', 4097);
        static const struct {
                const char *path, *limit, *want;
        } bad_query[] = {
                {NULL, NULL, "'path' is required"},
                {"", NULL, "'path' is required"},
                {"/a", "0", "limit must be between 1 and 10000"},
                {"/a", "10001", "limit must be between 1 and 10000"},
                {"/a", "x", "limit must be between 1 and 10000"},
                {"/a", NULL, "'user' must be a user name"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_query); i++) {
                sp_error_freep(&e);
                memset(&f, 0xa5, sizeof(f));
                ck_assert_int_eq(
                        cp_req_files_query(bad_query[i].path, bad_query[i].limit, i == 5 ? "x y" : NULL, NULL, &f, &e),
                        -SP_E_INVALID);
                ck_assert_msg(strstr(e->message, bad_query[i].want), "'%s'", e->message);
                ck_assert(all_zero(&f, sizeof(f)));
        }
        sp_error_freep(&e);
        ck_assert_int_eq(cp_req_files_query(p4097, NULL, NULL, NULL, &f, &e), -SP_E_INVALID);
        ck_assert(strstr(e->message, "longer than 4096"));
}
END_TEST

START_TEST(session_cursor)
{
        char ses[SP_ID_MAX], sbx[SP_ID_MAX], cursor[128];
        sp_test_ok(sp_id_new("ses", ses, NULL), NULL);
        sp_test_ok(sp_id_new("sbx", sbx, NULL), NULL);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(cp_cursor_encode_for("ses", "2024-05-01T12:00:00.123456Z", ses, cursor, sizeof(cursor), &e),
                         0);
        cp_session_list_query q;
        ck_assert_int_eq(cp_req_session_list_query("2", cursor, NULL, &q, &e), 0);
        ck_assert(q.has_cursor);
        ck_assert_int_eq(q.limit, 2);
        ck_assert_str_eq(q.cursor_id, ses);
        ck_assert_str_eq(q.cursor_created_at, "2024-05-01T12:00:00.123456Z");
        ck_assert_str_eq(q.tag, "");
        ck_assert_int_eq(cp_req_session_list_query(NULL, "", "web", &q, &e), 0);
        ck_assert(!q.has_cursor);
        ck_assert_int_eq(q.limit, 100);
        ck_assert_str_eq(q.tag, "web");
        memset(&q, 0xa5, sizeof(q));
        ck_assert_int_eq(cp_req_session_list_query(NULL, NULL, "", &q, &e), -SP_E_INVALID);
        ck_assert_str_eq(e->message,
                         "query parameter 'tag' must be 1 to 256 bytes of UTF-8 without control characters");
        ck_assert(all_zero(&q, sizeof(q)));
        sp_error_freep(&e);
        ck_assert_int_eq(cp_req_session_list_query(NULL, NULL, "\xff\xfe", &q, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        /* A sandbox cursor is not a session cursor, and the other way round. */
        ck_assert_int_eq(cp_cursor_encode_for("ses", "2024-05-01T12:00:00Z", sbx, cursor, sizeof(cursor), &e),
                         -SP_E_INVALID);
        ck_assert_str_eq(e->message, "cursor id is not a session id");
        sp_error_freep(&e);
        ck_assert_int_eq(cp_cursor_encode("2024-05-01T12:00:00Z", sbx, cursor, sizeof(cursor), &e), 0);
        memset(&q, 0xa5, sizeof(q));
        ck_assert_int_eq(cp_req_session_list_query(NULL, cursor, NULL, &q, &e), -SP_E_INVALID);
        ck_assert_str_eq(e->message, "cursor is malformed");
        ck_assert(all_zero(&q, sizeof(q)));
        sp_error_freep(&e);
        ck_assert_int_eq(cp_req_session_list_query("1001", NULL, NULL, &q, &e), -SP_E_INVALID);
        ck_assert_str_eq(e->message, "limit must be between 1 and 1000");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("api_session_request");
        TCase *tc = tcase_create("decode");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, session_create_argv_and_defaults);
        tcase_add_test(tc, session_create_refuses);
        tcase_add_test(tc, signals);
        tcase_add_test(tc, tokens);
        tcase_add_test(tc, files);
        tcase_add_test(tc, session_cursor);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
