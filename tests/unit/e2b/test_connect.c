/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: space-e2b's envd requests (compat/e2b/request.h). The Connect
 * message: a unary JSON body or exactly one uncompressed envelope whose
 * length matches; the user of Authorization: Basic; and what each
 * process.Process and filesystem.Filesystem method reads from its request —
 * Start's session body (argv, env, cwd, user, stdin, PTY size, the
 * Connect-Timeout-Ms bounds; a shell's "-c" script over 64 KiB moved into
 * the environment, whole, in pieces cut between UTF-8 characters), a
 * selector's pid bounds, SendInput's base64
 * and its bound, Update's size, SendSignal's names, paths of 1 to 4096
 * bytes and ListDir's depth of 1 to 16.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "request.h"
#include "space/cleanup.h"
#include "space/json.h"

static json_object *parse(const char *s)
{
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(s, strlen(s), &o, NULL) == 0, "%s", s);
        return o;
}

static const char *str(json_object *o)
{
        return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* The message in an envelope: flag, then the 4-byte length (or len_override). */
static size_t envelope(char *out, uint8_t flag, const char *json, int64_t len_override)
{
        size_t n = strlen(json);
        uint32_t l = len_override >= 0 ? (uint32_t)len_override : (uint32_t)n;
        out[0] = (char)flag;
        out[1] = (char)(l >> 24);
        out[2] = (char)(l >> 16);
        out[3] = (char)(l >> 8);
        out[4] = (char)l;
        memcpy(out + 5, json, n);
        return 5 + n;
}

START_TEST(messages)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *o = NULL;
        /* Unary: JSON objects; an empty body is {}. */
        sp_test_ok(e2b_request_message("", 0, false, &o, &e), &e);
        ck_assert_str_eq(str(o), "{}");
        sp_json_putp(&o);
        sp_test_ok(e2b_request_message("{\"path\":\"/x\"} \n", 15, false, &o, &e), &e);
        ck_assert_str_eq(str(o), "{\"path\":\"/x\"}");
        sp_json_putp(&o);
        const char *bad[] = {"[1]", "\"s\"", "null", "1", "{", "{\"a\":1}x", "{\"a\":\"\x01\"}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_msg(e2b_request_message(bad[i], strlen(bad[i]), false, &o, &e) < 0, "%s", bad[i]);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                ck_assert_ptr_null(o);
                sp_error_free(TAKE_PTR(e));
        }

        /* Streams: one envelope, flag 0, the length of the rest. */
        char buf[256];
        size_t n = envelope(buf, 0, "{\"process\":{\"pid\":1}}", -1);
        sp_test_ok(e2b_request_message(buf, n, true, &o, &e), &e);
        ck_assert_str_eq(str(o), "{\"process\":{\"pid\":1}}");
        sp_json_putp(&o);
        n = envelope(buf, 0, "", -1);
        sp_test_ok(e2b_request_message(buf, n, true, &o, &e), &e);
        ck_assert_str_eq(str(o), "{}");
        sp_json_putp(&o);
        struct {
                uint8_t flag;
                const char *json;
                int64_t len;
                size_t cut, extra;
                const char *message;
        } cases[] = {
                {1, "{}", -1, 0, 0, "compressed or end-stream"},
                {2, "{}", -1, 0, 0, "compressed or end-stream"},
                {0, "{}", 1, 0, 0, "does not match"},
                {0, "{}", 3, 0, 0, "does not match"},
                {0, "{}", 0xffffffff, 0, 0, "does not match"},
                {0, "{}", -1, 1, 0, "does not match"}, /* truncated message */
                {0, "{}", -1, 3, 0, "one envelope"}, /* truncated prefix */
                {0, "{}", -1, 7, 0, "one envelope"},
                {0, "{}", -1, 0, 7, "does not match"}, /* a second envelope */
                {0, "[]", -1, 0, 0, "not a JSON object"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                n = envelope(buf, cases[i].flag, cases[i].json, cases[i].len);
                if (cases[i].extra)
                        n += envelope(buf + n, 0, "{}", -1);
                ck_assert_msg(e2b_request_message(buf, n - cases[i].cut, true, &o, &e) < 0, "case %zu", i);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                ck_assert_msg(strstr(e->message, cases[i].message), "case %zu: %s", i, e->message);
                sp_error_free(TAKE_PTR(e));
        }
        /* A unary body is not read as an envelope. */
        n = envelope(buf, 0, "{}", -1);
        ck_assert_int_lt(e2b_request_message(buf, n, false, &o, &e), 0);
}
END_TEST

START_TEST(basic_user)
{
        struct {
                const char *header, *user, *message;
        } cases[] = {
                {NULL, NULL, NULL},
                {"Bearer abc", NULL, NULL},
                {"Basic dXNlcjpwdw==", "user", NULL}, /* user:pw */
                {"basic dXNlcg==", "user", NULL}, /* user, no password */
                {"BASIC dXNlcjpwdw", "user", NULL}, /* unpadded */
                {"Basic OnB3", NULL, NULL}, /* :pw */
                {"Basic ", NULL, NULL},
                {"Basic dXNlcjpwdw=", NULL, "malformed"},
                {"Basic dXNl*jpwdw==", NULL, "malformed"},
                {"Basic dXNlcjpwdw==\r\n", NULL, "malformed"},
                {"Basic dXMAZXI6cHc=", NULL, "malformed"}, /* us\0er:pw */
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_error_ sp_error *e = NULL;
                _cleanup_free_ char *user = (char *)"untouched";
                int r = e2b_request_user(cases[i].header, &user, &e);
                if (!cases[i].message) {
                        ck_assert_msg(r == 0, "%s: %s", cases[i].header, e ? e->message : "");
                        if (cases[i].user)
                                ck_assert_str_eq(user, cases[i].user);
                        else
                                ck_assert_ptr_null(user);
                } else {
                        ck_assert_msg(r < 0, "%s accepted", cases[i].header);
                        ck_assert_int_eq(e->code, SP_E_INVALID);
                        ck_assert_msg(strstr(e->message, cases[i].message), "%s", e->message);
                        ck_assert_ptr_null(user);
                }
        }
}
END_TEST

/* "Basic " + base64(user ":x"), user of n bytes. */
static char *basic_of(size_t n)
{
        _cleanup_free_ char *u = malloc(n + 3);
        memset(u, 'u', n);
        memcpy(u + n, ":x", 3);
        sp_buf b = SP_BUF_INIT;
        sp_buf_append_str(&b, "Basic ", NULL);
        sp_base64_encode(&b, u, n + 2, 0, NULL);
        return sp_buf_steal(&b);
}

START_TEST(basic_user_bounds)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_free_ char *h64 = basic_of(E2B_REQUEST_MAX_USER), *h65 = basic_of(E2B_REQUEST_MAX_USER + 1);
        _cleanup_free_ char *user = NULL;
        sp_test_ok(e2b_request_user(h64, &user, &e), &e);
        ck_assert_uint_eq(strlen(user), E2B_REQUEST_MAX_USER);
        free(TAKE_PTR(user));
        ck_assert_int_lt(e2b_request_user(h65, &user, &e), 0);
        ck_assert_str_eq(e->message, "user name too long");
        sp_error_free(TAKE_PTR(e));
        /* The encoded header is bounded before decoding: 256 characters, no more. */
        char h[6 + E2B_REQUEST_MAX_BASIC + 5];
        memcpy(h, "Basic ", 6);
        memset(h + 6, 'A', E2B_REQUEST_MAX_BASIC);
        h[6 + E2B_REQUEST_MAX_BASIC] = '\0';
        memcpy(h + 6, "dTo", 3); /* "u:" then NULs: the user is "u" */
        sp_test_ok(e2b_request_user(h, &user, &e), &e);
        ck_assert_str_eq(user, "u");
        free(TAKE_PTR(user));
        memcpy(h + 6 + E2B_REQUEST_MAX_BASIC, "AAAA", 5);
        ck_assert_int_lt(e2b_request_user(h, &user, &e), 0);
        ck_assert_str_eq(e->message, "malformed Authorization header");
}
END_TEST

static json_object *start_ok(const char *req, const char *user, const char *tms, bool *pty)
{
        _cleanup_json_ json_object *r = parse(req);
        _cleanup_error_ sp_error *e = NULL;
        json_object *body = NULL;
        ck_assert_msg(e2b_request_start(r, user, tms, &body, pty, &e) == 0, "%s: %s", req, e ? e->message : "");
        return body;
}

START_TEST(start_bodies)
{
        bool pty = true;
        _cleanup_json_ json_object *b = start_ok(
                "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],\"envs\":{\"A\":\"1\"},"
                "\"cwd\":\"/tmp\"}}",
                "user", "60000", &pty);
        ck_assert(!pty);
        ck_assert_str_eq(str(b), "{\"argv\":[\"/bin/bash\",\"-l\",\"-c\",\"echo hi\"],\"env\":{\"A\":\"1\"},"
                                 "\"cwd\":\"/tmp\",\"user\":\"user\",\"stdin\":true,\"timeout_s\":60}");
        sp_json_putp(&b);
        /* What is not of its type is left out (an empty cwd is the user's
         * home, as a missing one); stdin false is kept. */
        b = start_ok("{\"process\":{\"cmd\":\"ls\",\"args\":\"-l\",\"envs\":[1],\"cwd\":\"\"},\"stdin\":false}", NULL,
                     NULL, &pty);
        ck_assert_str_eq(str(b), "{\"argv\":[\"ls\"],\"cwd\":\"~\",\"stdin\":false}");
        sp_json_putp(&b);
        /* A PTY: its size (24x80 when left out), and stdin is on. */
        b = start_ok("{\"process\":{\"cmd\":\"sh\"},\"stdin\":false,\"pty\":{\"size\":{\"rows\":50}}}", NULL, NULL,
                     &pty);
        ck_assert(pty);
        ck_assert_str_eq(str(b), "{\"argv\":[\"sh\"],\"cwd\":\"~\",\"pty\":{\"rows\":50,\"cols\":80},\"stdin\":true}");
        sp_json_putp(&b);
        b = start_ok("{\"process\":{\"cmd\":\"sh\"},\"pty\":{}}", NULL, NULL, &pty);
        ck_assert_str_eq(str(b), "{\"argv\":[\"sh\"],\"cwd\":\"~\",\"pty\":{\"rows\":24,\"cols\":80},\"stdin\":true}");
        sp_json_putp(&b);
        /* A tag goes to the session as it is (the public API checks it); an empty one is none. */
        b = start_ok("{\"process\":{\"cmd\":\"sh\"},\"tag\":\"web\"}", NULL, NULL, &pty);
        ck_assert_str_eq(str(b), "{\"argv\":[\"sh\"],\"cwd\":\"~\",\"stdin\":true,\"tag\":\"web\"}");
        sp_json_putp(&b);
        b = start_ok("{\"process\":{\"cmd\":\"sh\"},\"tag\":\"\"}", NULL, NULL, &pty);
        ck_assert_str_eq(str(b), "{\"argv\":[\"sh\"],\"cwd\":\"~\",\"stdin\":true}");
        sp_json_putp(&b);
        /* Connect-Timeout-Ms rounds up to seconds, 0 to 30 days. */
        struct {
                const char *ms;
                int64_t s;
        } timeouts[] = {{"0", 0}, {"1", 1}, {"1000", 1}, {"1001", 2}, {"2592000000", 2592000}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(timeouts); i++) {
                b = start_ok("{\"process\":{\"cmd\":\"sh\"}}", NULL, timeouts[i].ms, &pty);
                json_object *t = NULL;
                ck_assert(json_object_object_get_ex(b, "timeout_s", &t));
                ck_assert_int_eq(json_object_get_int64(t), timeouts[i].s);
                sp_json_putp(&b);
        }
}
END_TEST

START_TEST(start_refused)
{
        struct {
                const char *req, *tms, *message;
        } cases[] = {
                {"{}", NULL, "process.cmd is required"},
                {"{\"process\":\"ls\"}", NULL, "process.cmd is required"},
                {"{\"process\":{}}", NULL, "process.cmd is required"},
                {"{\"process\":{\"cmd\":\"\"}}", NULL, "process.cmd is required"},
                {"{\"process\":{\"cmd\":[\"ls\"]}}", NULL, "process.cmd is required"},
                {"{\"process\":{\"cmd\":\"ls\"}}", "2592000001", "invalid Connect-Timeout-Ms"},
                {"{\"process\":{\"cmd\":\"ls\"}}", "-1", "invalid Connect-Timeout-Ms"},
                {"{\"process\":{\"cmd\":\"ls\"}}", "10s", "invalid Connect-Timeout-Ms"},
                {"{\"process\":{\"cmd\":\"ls\"}}", "99999999999999999999", "invalid Connect-Timeout-Ms"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_json_ json_object *r = parse(cases[i].req), *body = NULL;
                _cleanup_error_ sp_error *e = NULL;
                bool pty = false;
                ck_assert_msg(e2b_request_start(r, NULL, cases[i].tms, &body, &pty, &e) < 0, "case %zu", i);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                ck_assert_str_eq(e->message, cases[i].message);
                ck_assert_ptr_null(body);
        }
}
END_TEST

/* Start for `cmd args...` where the script is text: its session body. */
static json_object *start_script(const char *cmd, const char *pre, const char *text, const char *envs)
{
        _cleanup_json_ json_object *req = json_object_new_object(), *proc = json_object_new_object();
        json_object *args = json_object_new_array();
        if (pre)
                json_object_array_add(args, json_object_new_string(pre));
        json_object_array_add(args, json_object_new_string("-c"));
        json_object_array_add(args, json_object_new_string(text));
        json_object_array_add(args, json_object_new_string("arg0"));
        json_object_object_add(proc, "cmd", json_object_new_string(cmd));
        json_object_object_add(proc, "args", args);
        if (envs)
                json_object_object_add(proc, "envs", parse(envs));
        json_object_object_add(req, "process", json_object_get(proc));
        _cleanup_error_ sp_error *e = NULL;
        json_object *body = NULL;
        bool pty = false;
        ck_assert_msg(e2b_request_start(req, NULL, NULL, &body, &pty, &e) == 0, "%s", e ? e->message : "");
        return body;
}

/* A text of n bytes: lines of ASCII, with a two-byte character where a
 * piece would end (the cut must move before it) when utf8. */
static char *script(size_t n, bool utf8)
{
        char *s = malloc(n + 1);
        ck_assert_ptr_nonnull(s);
        for (size_t i = 0; i < n; i++)
                s[i] = i % 80 == 79 ? '\n' : (char)('a' + i % 26);
        for (size_t at = E2B_REQUEST_MAX_ARG - 1; utf8 && at + 1 < n; at += E2B_REQUEST_MAX_ARG) {
                s[at] = (char)0xC3; /* é straddles the piece's end */
                s[at + 1] = (char)0xA9;
        }
        s[n] = '\0';
        return s;
}

START_TEST(long_scripts_move_into_the_environment)
{
        /* At the bound: an argument as it is. */
        _cleanup_free_ char *small = script(E2B_REQUEST_MAX_ARG, false);
        _cleanup_json_ json_object *b = start_script("/bin/bash", "-l", small, NULL);
        json_object *argv = NULL, *env = NULL;
        ck_assert(json_object_object_get_ex(b, "argv", &argv));
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 3)), small);
        ck_assert(!json_object_object_get_ex(b, "env", NULL));
        sp_json_putp(&b);

        /* 1 MiB and more, ASCII or not: pieces of at most 64 KiB, whole once joined, the user's envs kept. */
        for (int utf8 = 0; utf8 < 2; utf8++) {
                size_t n = (1 << 20) + 12345;
                _cleanup_free_ char *text = script(n, utf8);
                b = start_script("/bin/bash", "-l", text, "{\"ONE\":\"1\"}");
                ck_assert(json_object_object_get_ex(b, "argv", &argv));
                ck_assert(json_object_object_get_ex(b, "env", &env));
                ck_assert_uint_eq(json_object_array_length(argv), 5);
                ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 0)), "/bin/bash");
                ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 1)), "-l");
                ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 2)), "-c");
                ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 4)), "arg0");
                ck_assert_str_eq(json_object_get_string(json_object_object_get(env, "ONE")), "1");
                _cleanup_buf_ sp_buf joined = SP_BUF_INIT, names = SP_BUF_INIT, refs = SP_BUF_INIT;
                size_t k = 0;
                for (;; k++) {
                        char name[64];
                        snprintf(name, sizeof(name), "%s%zu", E2B_REQUEST_SCRIPT_VAR, k);
                        json_object *v = json_object_object_get(env, name);
                        if (!v)
                                break;
                        size_t len = (size_t)json_object_get_string_len(v);
                        const unsigned char *p = (const unsigned char *)json_object_get_string(v);
                        ck_assert_uint_le(len, E2B_REQUEST_MAX_ARG);
                        /* Full pieces but the last: a cut moves back at most 3 bytes. */
                        ck_assert(joined.len + len == n || len > E2B_REQUEST_MAX_ARG - 4);
                        ck_assert_msg((p[0] & 0xC0) != 0x80, "piece %zu starts inside a character", k);
                        sp_buf_append(&joined, p, len, NULL);
                        sp_buf_appendf(&names, NULL, " %s", name);
                        sp_buf_appendf(&refs, NULL, "$%s", name);
                }
                ck_assert_uint_eq(k, n / E2B_REQUEST_MAX_ARG + 1);
                ck_assert_uint_eq(json_object_object_length(env), k + 1);
                ck_assert_uint_eq(joined.len, n);
                ck_assert(memcmp(joined.data, text, n) == 0);
                _cleanup_free_ char *boot = NULL;
                ck_assert_int_ge(asprintf(&boot, "eval \"unset%s;%s\"", names.data, refs.data), 0);
                ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 3)), boot);
                sp_json_putp(&b);
        }

        /* sh too, found by its name; not a program that is not a shell, nor a script that is no "-c"'s. */
        _cleanup_free_ char *text = script(100000, false);
        b = start_script("sh", NULL, text, NULL);
        ck_assert(json_object_object_get_ex(b, "argv", &argv));
        ck_assert_ptr_nonnull(strstr(json_object_get_string(json_object_array_get_idx(argv, 2)), "eval"));
        sp_json_putp(&b);
        b = start_script("/usr/bin/python3", NULL, text, NULL);
        ck_assert(json_object_object_get_ex(b, "argv", &argv));
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(argv, 2)), text);
        sp_json_putp(&b);

        /* Past the bound, or with a NUL: refused. */
        _cleanup_free_ char *huge = script(E2B_REQUEST_MAX_COMMAND + 1, false);
        _cleanup_json_ json_object *req = json_object_new_object(), *proc = json_object_new_object();
        json_object *args = json_object_new_array();
        json_object_array_add(args, json_object_new_string("-c"));
        json_object_array_add(args, json_object_new_string(huge));
        json_object_object_add(proc, "cmd", json_object_new_string("/bin/bash"));
        json_object_object_add(proc, "args", args);
        json_object_object_add(req, "process", json_object_get(proc));
        _cleanup_error_ sp_error *e = NULL;
        bool pty = false;
        ck_assert_int_lt(e2b_request_start(req, NULL, NULL, &b, &pty, &e), 0);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert_str_eq(e->message, "the command is longer than 1966080 bytes");
        ck_assert_ptr_null(b);
        sp_error_free(TAKE_PTR(e));
        text[70000] = '\0';
        json_object_array_put_idx(args, 1, json_object_new_string_len(text, 100000));
        ck_assert_int_lt(e2b_request_start(req, NULL, NULL, &b, &pty, &e), 0);
        ck_assert_str_eq(e->message, "the command contains a NUL byte");
}
END_TEST

START_TEST(selectors)
{
        struct {
                const char *req;
                int code;
                int64_t pid;
        } cases[] = {
                {"{\"process\":{\"pid\":1}}", 0, 1},
                {"{\"process\":{\"pid\":2147483647}}", 0, INT32_MAX},
                {"{\"process\":{\"pid\":0}}", SP_E_INVALID, 0},
                {"{\"process\":{\"pid\":-4}}", SP_E_INVALID, 0},
                {"{\"process\":{\"pid\":2147483648}}", SP_E_INVALID, 0},
                {"{\"process\":{\"tag\":\"web\"}}", 0, 0},
                {"{\"process\":{\"tag\":\"\"}}", SP_E_NOT_FOUND, 0},
                {"{\"process\":{\"tag\":\"a\\nb\"}}", SP_E_NOT_FOUND, 0},
                {"{\"process\":{\"tag\":5}}", SP_E_INVALID, 0},
                {"{\"process\":{}}", SP_E_INVALID, 0},
                {"{\"process\":7}", SP_E_INVALID, 0},
                {"{}", SP_E_INVALID, 0},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_json_ json_object *r = parse(cases[i].req);
                _cleanup_error_ sp_error *e = NULL;
                int64_t pid = 99;
                const char *tag = NULL;
                int rc = e2b_request_selector(r, &pid, &tag, &e);
                if (cases[i].code == 0) {
                        ck_assert_msg(rc == 0, "%s", cases[i].req);
                        ck_assert_int_eq(pid, cases[i].pid);
                        if (pid == 0)
                                ck_assert_str_eq(tag, "web");
                        else
                                ck_assert_ptr_null(tag);
                } else {
                        ck_assert_msg(rc < 0, "%s accepted", cases[i].req);
                        ck_assert_int_eq(e->code, cases[i].code);
                        ck_assert_int_eq(pid, 99);
                }
        }
}
END_TEST

START_TEST(inputs)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_json_ json_object *r = parse("{\"input\":{\"stdin\":\"aGVsbG8K\"}}");
        sp_test_ok(e2b_request_input(r, &b, &e), &e);
        ck_assert_str_eq(b.data, "hello\n");
        sp_json_putp(&r);
        sp_buf_clear(&b);
        r = parse("{\"input\":{\"pty\":\"YQ\"}}");
        sp_test_ok(e2b_request_input(r, &b, &e), &e);
        ck_assert_str_eq(b.data, "a");
        sp_json_putp(&r);
        sp_buf_clear(&b);
        r = parse("{\"input\":{\"stdin\":\"\"}}");
        sp_test_ok(e2b_request_input(r, &b, &e), &e);
        ck_assert_uint_eq(b.len, 0);
        sp_json_putp(&r);
        const char *bad[] = {"{}",
                             "{\"input\":{}}",
                             "{\"input\":{\"stdin\":null}}",
                             "{\"input\":{\"stdin\":\"a\"}}",
                             "{\"input\":{\"stdin\":\"YQ=\"}}",
                             "{\"input\":{\"stdin\":\"Y_==\"}}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                r = parse(bad[i]);
                ck_assert_msg(e2b_request_input(r, &b, &e) < 0, "%s accepted", bad[i]);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                sp_error_free(TAKE_PTR(e));
                sp_json_putp(&r);
        }
        /* 16 MiB of base64 at most. */
        size_t n = E2B_REQUEST_MAX_INPUT;
        _cleanup_free_ char *big = malloc(n + 32);
        memcpy(big, "{\"input\":{\"stdin\":\"", 19);
        memset(big + 19, 'A', n);
        memcpy(big + 19 + n, "\"}}", 4);
        r = parse(big);
        sp_buf_clear(&b);
        sp_test_ok(e2b_request_input(r, &b, &e), &e);
        ck_assert_uint_eq(b.len, n / 4 * 3);
        sp_json_putp(&r);
        memcpy(big + 19 + n, "AAAA\"}}", 8);
        r = parse(big);
        ck_assert_int_lt(e2b_request_input(r, &b, &e), 0);
        ck_assert_str_eq(e->message, "input too large");
}
END_TEST

START_TEST(resize_and_signal)
{
        int64_t rows = 0, cols = 0;
        _cleanup_json_ json_object *r = parse("{\"pty\":{\"size\":{\"rows\":40,\"cols\":120}}}");
        ck_assert(e2b_request_resize(r, &rows, &cols));
        ck_assert_int_eq(rows, 40);
        ck_assert_int_eq(cols, 120);
        sp_json_putp(&r);
        r = parse("{\"pty\":{\"size\":{}}}");
        ck_assert(e2b_request_resize(r, &rows, &cols));
        ck_assert_int_eq(rows, 24);
        ck_assert_int_eq(cols, 80);
        sp_json_putp(&r);
        const char *none[] = {"{}", "{\"pty\":{}}", "{\"pty\":5}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(none); i++) {
                r = parse(none[i]);
                ck_assert_msg(!e2b_request_resize(r, &rows, &cols), "%s", none[i]);
                sp_json_putp(&r);
        }

        struct {
                const char *req, *name;
        } sigs[] = {
                {"{\"signal\":\"SIGNAL_SIGKILL\"}", "KILL"},
                {"{\"signal\":\"SIGNAL_SIGTERM\"}", "TERM"},
                {"{\"signal\":\"SIGNAL_SIG0123456789\"}", "0123456789"},
                {"{\"signal\":\"SIGNAL_SIG01234567890\"}", NULL},
                {"{\"signal\":\"SIGKILL\"}", NULL},
                {"{\"signal\":9}", NULL},
                {"{}", NULL},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(sigs); i++) {
                r = parse(sigs[i].req);
                _cleanup_error_ sp_error *e = NULL;
                const char *name = NULL;
                int rc = e2b_request_signal(r, &name, &e);
                if (sigs[i].name) {
                        ck_assert_msg(rc == 0, "%s", sigs[i].req);
                        ck_assert_str_eq(name, sigs[i].name);
                } else {
                        ck_assert_msg(rc < 0, "%s accepted", sigs[i].req);
                        ck_assert_str_eq(e->message, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
                }
                sp_json_putp(&r);
        }
}
END_TEST

START_TEST(paths_and_depth)
{
        _cleanup_free_ char *req = malloc(E2B_REQUEST_MAX_PATH + 32);
        memcpy(req, "{\"path\":\"", 9);
        memset(req + 9, 'p', E2B_REQUEST_MAX_PATH);
        memcpy(req + 9 + E2B_REQUEST_MAX_PATH, "\"}", 3);
        _cleanup_json_ json_object *r = parse(req);
        _cleanup_error_ sp_error *e = NULL;
        const char *p = NULL;
        sp_test_ok(e2b_request_path(r, "path", &p, &e), &e);
        ck_assert_uint_eq(strlen(p), E2B_REQUEST_MAX_PATH);
        sp_json_putp(&r);
        memcpy(req + 9 + E2B_REQUEST_MAX_PATH, "p\"}", 4);
        r = parse(req);
        ck_assert_int_lt(e2b_request_path(r, "path", &p, &e), 0);
        ck_assert_str_eq(e->message, "path: a path of 1 to 4096 bytes is required");
        sp_error_free(TAKE_PTR(e));
        sp_json_putp(&r);
        r = parse("{\"source\":\"a\",\"destination\":\"\",\"path\":7}");
        sp_test_ok(e2b_request_path(r, "source", &p, &e), &e);
        ck_assert_str_eq(p, "a");
        ck_assert_int_lt(e2b_request_path(r, "destination", &p, &e), 0);
        ck_assert_str_eq(e->message, "destination: a path of 1 to 4096 bytes is required");
        sp_error_free(TAKE_PTR(e));
        ck_assert_int_lt(e2b_request_path(r, "path", &p, &e), 0);
        sp_error_free(TAKE_PTR(e));
        sp_json_putp(&r);

        struct {
                const char *req;
                int depth; /* 0: refused */
        } depths[] = {
                {"{}", 1},
                {"{\"depth\":0}", 1},
                {"{\"depth\":1}", 1},
                {"{\"depth\":16}", 16},
                {"{\"depth\":17}", 0},
                {"{\"depth\":-1}", 0},
                {"{\"depth\":4294967297}", 0},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(depths); i++) {
                r = parse(depths[i].req);
                int d = 99;
                int rc = e2b_request_depth(r, &d, &e);
                if (depths[i].depth) {
                        ck_assert_msg(rc == 0, "%s", depths[i].req);
                        ck_assert_int_eq(d, depths[i].depth);
                } else {
                        ck_assert_msg(rc < 0, "%s accepted", depths[i].req);
                        ck_assert_str_eq(e->message, "depth must be 1 to 16");
                        ck_assert_int_eq(d, 99);
                        sp_error_free(TAKE_PTR(e));
                }
                sp_json_putp(&r);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_connect");
        TCase *tc = tcase_create("connect");
        tcase_add_test(tc, messages);
        tcase_add_test(tc, basic_user);
        tcase_add_test(tc, basic_user_bounds);
        tcase_add_test(tc, start_bodies);
        tcase_add_test(tc, start_refused);
        tcase_add_test(tc, long_scripts_move_into_the_environment);
        tcase_add_test(tc, selectors);
        tcase_add_test(tc, inputs);
        tcase_add_test(tc, resize_and_signal);
        tcase_add_test(tc, paths_and_depth);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
