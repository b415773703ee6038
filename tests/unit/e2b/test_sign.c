/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: space-e2b's signed file URLs (compat/e2b/sign.h). The
 * signature is the SDK's getSignature() to the byte (vectors computed with
 * the e2b package's exported getSignature), expirations parse as envd's
 * 64-bit integers, and the signers find the token that signed a URL for
 * that path, operation, user and expiration only, in the sandbox the
 * request names when it names one; an expiration in the past is refused
 * after the signature matched (envd's order), and the table forgets a
 * sandbox's oldest tokens beyond its share and the oldest of all beyond its
 * size.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "call.h"
#include "sign.h"
#include "space/cleanup.h"

#define NOW INT64_C(1700000000)

START_TEST(sdk_vectors)
{
        char s[E2B_SIGN_LEN + 1];
        /* getSignature({path: "a.txt", operation: "write", user: undefined, envdAccessToken: "e2b1.tok"}) */
        e2b_sign_compute("a.txt", "write", "", "e2b1.tok", NULL, s);
        ck_assert_str_eq(s, "v1_HW7h0mQMpOTu3+Mp/nY/74f+o4Qs+Wws4E45azGH3fE");
        e2b_sign_compute("/home/user/f", "read", "root", "e2b1.tok", NULL, s);
        ck_assert_str_eq(s, "v1_eoabjP3cRP6LyTsaG6ZGwkL07STvsDJEvpipg8cY5o4");
        /* ... with Date.now() at 1700000000 s and expirationInSeconds 0 */
        int64_t exp = NOW;
        e2b_sign_compute("a.txt", "read", "user", "e2b1.tok", &exp, s);
        ck_assert_str_eq(s, "v1_M8Sf35z5SZS8Mo8OHjzTBvGI7pVWYfr9+WJ+xS387fg");
        ck_assert_uint_eq(strlen(s), E2B_SIGN_LEN);
}
END_TEST

START_TEST(expirations)
{
        static const struct {
                const char *in;
                int64_t want;
        } ok[] = {{"0", 0},
                  {"1700000000", NOW},
                  {"-10", -10},
                  {"+5", 5},
                  {"007", 7},
                  {"9223372036854775807", INT64_MAX},
                  {"-9223372036854775808", INT64_MIN}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok); i++) {
                _cleanup_error_ sp_error *e = NULL;
                int64_t v = 1;
                sp_test_ok(e2b_sign_expiration(ok[i].in, &v, &e), &e);
                ck_assert_msg(v == ok[i].want, "%s", ok[i].in);
        }
        static const char *const bad[] = {"",
                                          "-",
                                          "+",
                                          "1.5",
                                          "1e9",
                                          " 1",
                                          "1 ",
                                          "0x10",
                                          "--1",
                                          "9223372036854775808",
                                          "-9223372036854775809",
                                          "12345678901234567890"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_error_ sp_error *e = NULL;
                int64_t v = 42;
                ck_assert_msg(e2b_sign_expiration(bad[i], &v, &e) < 0, "%s accepted", bad[i]);
                ck_assert_int_eq(e->code, SP_E_INVALID);
                ck_assert(v == 42);
        }
}
END_TEST

/* Checks sig and answers 0 with the sandbox and token found, or the error's message. */
static const char *check(e2b_signers *t, const char *hint, const char *path, const char *op, const char *user,
                         const char *sig, const char *exp, char **ret_sandbox, char **ret_token)
{
        static char msg[256];
        _cleanup_error_ sp_error *e = NULL;
        char *sbx = NULL, *tok = NULL;
        if (e2b_signers_check(t, hint, path, op, user, sig, exp, NOW, &sbx, &tok, &e) == 0) {
                if (ret_sandbox)
                        *ret_sandbox = sbx;
                else
                        free(sbx);
                if (ret_token)
                        *ret_token = tok;
                else
                        free(tok);
                return NULL;
        }
        ck_assert_ptr_null(sbx);
        ck_assert_ptr_null(tok);
        snprintf(msg, sizeof(msg), "%d %s",
                 e->code == SP_E_UNAUTHENTICATED ? 401
                 : e->code == SP_E_INVALID       ? 400
                                                 : 0,
                 e->message);
        return msg;
}

START_TEST(signers_bind_everything)
{
        e2b_signers *t = e2b_signers_new(16, 4);
        e2b_signers_remember(t, "sbx_a", "e2b1.A", "spk_one");
        e2b_signers_remember(t, "sbx_b", "e2b1.B", "spk_one");
        char s[E2B_SIGN_LEN + 1];
        e2b_sign_compute("/tmp/f", "read", "", "e2b1.A", NULL, s);
        _cleanup_free_ char *sbx = NULL, *tok = NULL;
        ck_assert_ptr_null(check(t, NULL, "/tmp/f", "read", "", s, NULL, &sbx, &tok));
        ck_assert_str_eq(sbx, "sbx_a");
        ck_assert_str_eq(tok, "e2b1.A");
        ck_assert_ptr_null(check(t, "sbx_a", "/tmp/f", "read", "", s, NULL, NULL, NULL));
        /* Another sandbox named, another path, operation or user, an expiration added. */
        ck_assert_str_eq(check(t, "sbx_b", "/tmp/f", "read", "", s, NULL, NULL, NULL), "401 invalid signature");
        ck_assert_str_eq(check(t, "sbx_c", "/tmp/f", "read", "", s, NULL, NULL, NULL), "401 invalid signature");
        ck_assert_str_eq(check(t, NULL, "/tmp/g", "read", "", s, NULL, NULL, NULL), "401 invalid signature");
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "write", "", s, NULL, NULL, NULL), "401 invalid signature");
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "root", s, NULL, NULL, NULL), "401 invalid signature");
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "", s, "9999999999", NULL, NULL), "401 invalid signature");
        /* Changed, cut, lengthened, absent. */
        char c[E2B_SIGN_LEN + 2];
        snprintf(c, sizeof(c), "%s", s);
        c[10] = c[10] == 'A' ? 'B' : 'A';
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "", c, NULL, NULL, NULL), "401 invalid signature");
        snprintf(c, sizeof(c), "%.*s", E2B_SIGN_LEN - 1, s);
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "", c, NULL, NULL, NULL), "401 invalid signature");
        snprintf(c, sizeof(c), "%s=", s);
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "", c, NULL, NULL, NULL), "401 invalid signature");
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "", NULL, NULL, NULL, NULL), "401 invalid signature");
        /* A user name with ':' is no user's: refused (envd's text joins the parts
         * with ':', docs/threat-model.md). */
        e2b_sign_compute("/tmp/f", "read", "a:write:root", "e2b1.A", NULL, s);
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "a:write:root", s, NULL, NULL, NULL),
                         "401 invalid signature");
        /* A token the daemon does not know. */
        e2b_sign_compute("/tmp/f", "read", "", "e2b1.C", NULL, s);
        ck_assert_str_eq(check(t, NULL, "/tmp/f", "read", "", s, NULL, NULL, NULL), "401 invalid signature");
        e2b_signers_free(t);
}
END_TEST

START_TEST(signers_expiry)
{
        e2b_signers *t = e2b_signers_new(16, 4);
        e2b_signers_remember(t, "sbx_a", "e2b1.A", "spk_one");
        char s[E2B_SIGN_LEN + 1];
        int64_t exp = NOW;
        e2b_sign_compute("f", "write", "user", "e2b1.A", &exp, s);
        /* envd refuses exp < now: the second itself still passes. */
        ck_assert_ptr_null(check(t, NULL, "f", "write", "user", s, "1700000000", NULL, NULL));
        /* Its canonical number is what is signed, as envd's FormatInt. */
        ck_assert_ptr_null(check(t, NULL, "f", "write", "user", s, "+01700000000", NULL, NULL));
        ck_assert_str_eq(check(t, NULL, "f", "write", "user", s, NULL, NULL, NULL), "401 invalid signature");
        exp = NOW - 1;
        e2b_sign_compute("f", "write", "user", "e2b1.A", &exp, s);
        ck_assert_str_eq(check(t, NULL, "f", "write", "user", s, "1699999999", NULL, NULL),
                         "401 signature is already expired");
        /* A forged expiration does not match; a malformed one is a bad request. */
        ck_assert_str_eq(check(t, NULL, "f", "write", "user", s, "1800000000", NULL, NULL), "401 invalid signature");
        ck_assert_str_eq(check(t, NULL, "f", "write", "user", s, "soon", NULL, NULL),
                         "400 signature_expiration is not a number of seconds");
        e2b_signers_free(t);
}
END_TEST

static bool known(e2b_signers *t, const char *sandbox, const char *token)
{
        char s[E2B_SIGN_LEN + 1];
        e2b_sign_compute("p", "read", "", token, NULL, s);
        return check(t, sandbox, "p", "read", "", s, NULL, NULL, NULL) == NULL;
}

START_TEST(signers_bounds)
{
        e2b_signers *t = e2b_signers_new(6, 2);
        e2b_signers_remember(t, "sbx_a", "e2b1.A1", "spk_one");
        e2b_signers_remember(t, "sbx_a", "e2b1.A2", "spk_one");
        e2b_signers_remember(t, "sbx_a", "e2b1.A1", "spk_one"); /* made the newest again */
        e2b_signers_remember(t, "sbx_a", "e2b1.A3", "spk_one"); /* forgets A2, the sandbox's oldest */
        ck_assert(known(t, "sbx_a", "e2b1.A1"));
        ck_assert(!known(t, "sbx_a", "e2b1.A2"));
        ck_assert(known(t, "sbx_a", "e2b1.A3"));
        /* The same token under another sandbox is another entry, found for that sandbox only. */
        e2b_signers_remember(t, "sbx_b", "e2b1.A1", "spk_one");
        ck_assert(known(t, "sbx_b", "e2b1.A1"));
        for (int i = 0; i < 5; i++) {
                char sbx[16], tok[16];
                snprintf(sbx, sizeof(sbx), "sbx_%d", i);
                snprintf(tok, sizeof(tok), "e2b1.%d", i);
                e2b_signers_remember(t, sbx, tok, "spk_one");
        }
        /* Six in all: the two oldest (sbx_a's A1 and A3) are gone. */
        ck_assert(!known(t, "sbx_a", "e2b1.A1"));
        ck_assert(!known(t, "sbx_a", "e2b1.A3"));
        ck_assert(known(t, "sbx_b", "e2b1.A1"));
        ck_assert(known(t, NULL, "e2b1.3"));
        /* Nothing remembered from empty or oversized values. */
        e2b_signers_remember(t, "", "e2b1.X", "spk_one");
        e2b_signers_remember(t, "sbx_x", "", "spk_one");
        e2b_signers_remember(t, NULL, "e2b1.X", "spk_one");
        ck_assert(!known(t, NULL, "e2b1.X"));
        ck_assert(known(t, NULL, "e2b1.0"));
        e2b_signers_free(t);
        e2b_signers_free(NULL);
}
END_TEST

/* A full table: the key holding the most gives up its oldest, so one key creating and connecting to
 * sandboxes in a loop never pushes out another's (the table is every tenant's). */
START_TEST(signers_one_key_cannot_push_out_another)
{
        e2b_signers *t = e2b_signers_new(64, 16);
        for (int i = 0; i < 8; i++) {
                char sbx[16], tok[16];
                snprintf(sbx, sizeof(sbx), "sbx_v%d", i);
                snprintf(tok, sizeof(tok), "e2b1.v%d", i);
                e2b_signers_remember(t, sbx, tok, "spk_victim");
        }
        for (int i = 0; i < 1000; i++) {
                char sbx[16], tok[16];
                snprintf(sbx, sizeof(sbx), "sbx_f%d", i);
                snprintf(tok, sizeof(tok), "e2b1.f%d", i);
                e2b_signers_remember(t, sbx, tok, "spk_flood");
        }
        for (int i = 0; i < 8; i++) {
                char sbx[16], tok[16];
                snprintf(sbx, sizeof(sbx), "sbx_v%d", i);
                snprintf(tok, sizeof(tok), "e2b1.v%d", i);
                ck_assert_msg(known(t, sbx, tok), "the flood pushed out %s", tok);
        }
        /* The flood keeps the rest, its newest. */
        ck_assert(known(t, "sbx_f999", "e2b1.f999"));
        ck_assert(known(t, "sbx_f944", "e2b1.f944"));
        ck_assert(!known(t, "sbx_f943", "e2b1.f943"));
        /* A third key gets room too: from the flood's entries, not the victim's. */
        e2b_signers_remember(t, "sbx_w", "e2b1.w", "spk_third");
        ck_assert(known(t, "sbx_w", "e2b1.w"));
        ck_assert(known(t, "sbx_v0", "e2b1.v0"));
        ck_assert(!known(t, "sbx_f944", "e2b1.f944"));
        e2b_signers_free(t);
}
END_TEST

/* The sandbox a signed URL's host names (E2B's "49983-<sandbox>.<domain>"): its tokens alone are
 * tried, and the check is not one of the counted scans of every token. */
START_TEST(hosts_name_their_sandbox)
{
        const char *id = "sbx_0123456789abcdefghjk";
        char host[128];
        snprintf(host, sizeof(host), "49983-%s.sandbox.example.com", id);
        _cleanup_free_ char *got = e2b_host_sandbox(host);
        ck_assert_ptr_nonnull(got);
        ck_assert_str_eq(got, id);
        snprintf(host, sizeof(host), "3000-%s.e2b.local:443", id);
        _cleanup_free_ char *port = e2b_host_sandbox(host);
        ck_assert_ptr_nonnull(port);
        ck_assert_str_eq(port, id);
        const char *none[] = {NULL,
                              "",
                              "localhost:3000",
                              "127.0.0.1:3000",
                              "api.example.com",
                              "49983-sbx_0123456789abcdefghjk",
                              "49983-sbx_0123456789abcdefghjk:80",
                              "-sbx_0123456789abcdefghjk.example.com",
                              "123456-sbx_0123456789abcdefghjk.example.com",
                              "49983-sbx_short.example.com",
                              "49983-tpl_0123456789abcdefghjk.example.com",
                              "49983-sbx_0123456789abcdefghjk0.example.com",
                              "49983x-sbx_0123456789abcdefghjk.example.com"};
        for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
                _cleanup_free_ char *n = e2b_host_sandbox(none[i]);
                ck_assert_msg(!n, "'%s' named %s", none[i] ? none[i] : "(null)", n);
        }
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_sign");
        TCase *tc = tcase_create("sign");
        tcase_add_test(tc, sdk_vectors);
        tcase_add_test(tc, expirations);
        tcase_add_test(tc, signers_bind_everything);
        tcase_add_test(tc, signers_expiry);
        tcase_add_test(tc, signers_bounds);
        tcase_add_test(tc, signers_one_key_cannot_push_out_another);
        tcase_add_test(tc, hosts_name_their_sandbox);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
