/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack (or mishap): a client that stops sending mid-request.
 *
 * A request whose body is shorter than its Content-Length, or whose head is
 * cut, was closed without an answer, so the client could not tell a refusal
 * from a crash; and a complete request followed by a half-close
 * (shutdown(SHUT_WR), as some proxies and `nc -N` do) was dropped by the E2B
 * wrapper, whose answer comes later from a thread. Against a real control
 * plane and a real space-e2b:
 *
 *   - a body cut short (with a half-close) answers 400 "request body
 *     truncated …" naming the byte counts, on the control plane and on the
 *     wrapper; so does a cut head and a cut chunked body;
 *   - a complete request followed by a half-close is answered (200), on the
 *     control plane and on the wrapper, and the connection is then closed;
 *   - nothing is created by a truncated create.
 *
 * One cluster for the file (an unchecked fixture). Needs root and PostgreSQL.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "launcher.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;
static sp_test_proc E2B;
static int e2b_port;

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 0};
        sp_test_space_up(&S, &o);
        sp_error *e = NULL;
        e2b_port = sp_test_free_port(&e);
        ck_assert_msg(e2b_port > 0, "free port: %s", e ? e->message : "");
        char bin[1024], listen[64], api[64], secret[700], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-e2b", sp_test_binary_dir());
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", e2b_port);
        snprintf(api, sizeof(api), "--api-url=http://127.0.0.1:%d", S.api);
        snprintf(secret, sizeof(secret), "--secret-file=%s/e2b-secret.key", S.dir);
        snprintf(logp, sizeof(logp), "%s/e2b.log", S.dir);
        const char *argv[] = {bin, listen, api, secret, "--log-format=text", NULL};
        sp_test_proc_opts po = {.log_path = logp};
        ck_assert_msg(sp_test_proc_start(&E2B, "e2b", argv, &po, &e) == 0 &&
                              sp_test_proc_wait_log(&E2B, "e2b wrapper ready", 30000, &e) == 0,
                      "space-e2b: %s", e ? e->message : "");
}

static void cluster_down(void)
{
        sp_test_proc_stop(&E2B, 2000, NULL);
        sp_test_proc_free(&E2B);
        sp_test_space_down(&S);
}

/* Sends raw on a new connection to port, half-closes, and returns everything
 * the server sends until it closes (within 15 s; malloc'd). */
static char *exchange(int port, const char *raw)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
        size_t len = strlen(raw);
        ck_assert_int_eq(write(fd, raw, len), (ssize_t)len);
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
        size_t cap = 65536, n = 0;
        char *out = calloc(1, cap + 1);
        int64_t deadline = sp_now_mono_us() + 15 * 1000000;
        for (;;) {
                int64_t left = (deadline - sp_now_mono_us()) / 1000;
                ck_assert_msg(left > 0, "no close within 15 s; got: %s", out);
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, (int)left) <= 0)
                        continue;
                ssize_t r = read(fd, out + n, cap - n);
                if (r <= 0)
                        break;
                n += (size_t)r;
                if (n == cap)
                        break;
        }
        out[n] = '\0';
        close(fd);
        return out;
}

static void assert_answer(const char *what, const char *got, const char *status, const char *needle)
{
        ck_assert_msg(strncmp(got, status, strlen(status)) == 0, "%s: want %s, got \"%s\"", what, status, got);
        ck_assert_msg(!needle || strstr(got, needle), "%s: no \"%s\" in \"%s\"", what, needle, got);
}

START_TEST(requests_cut_short_are_answered)
{
        char key[256], raw[2048];
        sp_test_new_tenant(&S, "cut", key);

        /* The control plane: a body shorter than its Content-Length. */
        snprintf(raw, sizeof(raw),
                 "POST /v1/sandboxes HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                 "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"template\":\"base\"}",
                 key);
        _cleanup_free_ char *a = exchange(S.api, raw);
        assert_answer("cp, short body", a, "HTTP/1.1 400", "request body truncated");
        ck_assert_msg(strstr(a, "after 19 of 100 bytes"), "%s", a);
        ck_assert_ptr_nonnull(strstr(a, "\"invalid_argument\""));

        /* A cut head, and a cut chunked body. */
        _cleanup_free_ char *b = exchange(S.api, "POST /v1/sandboxes HTTP/1.1\r\nHost: t\r\nContent-Le");
        assert_answer("cp, short head", b, "HTTP/1.1 400", "request truncated");
        snprintf(raw, sizeof(raw),
                 "POST /v1/sandboxes HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"tem\r\n",
                 key);
        _cleanup_free_ char *c = exchange(S.api, raw);
        assert_answer("cp, short chunked body", c, "HTTP/1.1 400", "chunked body");

        /* Nothing was created. */
        _cleanup_json_ json_object *list = sp_test_api(&S, key, "GET", "/v1/sandboxes", 200, NULL, NULL);
        ck_assert_int_eq(json_object_array_length(sp_test_jarr(list, "sandboxes")), 0);

        /* A complete request, then a half-close: answered, then closed. */
        snprintf(raw, sizeof(raw), "GET /v1/sandboxes HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n", key);
        _cleanup_free_ char *d = exchange(S.api, raw);
        assert_answer("cp, half-close", d, "HTTP/1.1 200", "\"sandboxes\"");

        /* The E2B wrapper: the same two. Its answers come from a thread, after the half-close. */
        snprintf(raw, sizeof(raw), "GET /v2/sandboxes HTTP/1.1\r\nHost: t\r\nX-API-KEY: %s\r\n\r\n", key);
        _cleanup_free_ char *e = exchange(e2b_port, raw);
        assert_answer("e2b, half-close", e, "HTTP/1.1 200", "[]");
        snprintf(raw, sizeof(raw),
                 "POST /sandboxes HTTP/1.1\r\nHost: t\r\nX-API-KEY: %s\r\nContent-Type: application/json\r\n"
                 "Content-Length: 50\r\n\r\n{\"templateID\":",
                 key);
        _cleanup_free_ char *f = exchange(e2b_port, raw);
        assert_answer("e2b, short body", f, "HTTP/1.1 400", "request body truncated");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_api_http");
        TCase *tc = tcase_create("http");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, requests_cut_short_are_answered);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the test cluster needs root");
        sp_test_pg_require();
        return sp_test_main(suite());
}
