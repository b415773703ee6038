/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack: one tenant slows the control plane for everyone with long-polls.
 *
 * `GET /v1/operations/{id}?wait=60` holds the request until the operation
 * finishes. A tenant sent thousands of them on an operation that could never
 * finish, closing each connection at once: every waiter stayed for its whole
 * wait (a closed client was not noticed), each was checked against the
 * database four times a second, and another tenant's calls took seconds.
 * Against a real control plane (--max-waiters 8: a share of 2 per tenant):
 *
 *   - a tenant holds at most its share of long-polls; beyond it, its waits
 *     are answered at once with the operation as it is (still pending);
 *   - another tenant's long-poll is still held, and answered when its
 *     operation finishes;
 *   - a client that closes its connection frees its long-poll within a tick
 *     (the share is free again for a new wait);
 *   - /metrics counts the waiters held.
 *
 * One cluster for the file. Needs root and PostgreSQL.
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
#include "http_client.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"

static sp_test_space S;

static void cluster_up(void)
{
        static const char *const cargs[] = {"--max-waiters=8", NULL};
        sp_test_space_opts o = {.workers = 1, .cp_args = cargs};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* Opens a connection and sends a long-poll of op_id with key; returns the socket. */
static int long_poll(const char *key, const char *op_id, int wait_s)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)S.api)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "GET /v1/operations/%s?wait=%d HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", op_id,
                         wait_s, key);
        ck_assert_int_eq(write(fd, req, (size_t)n), n);
        return fd;
}

/* Whether an answer arrives on fd within ms; when it does, its body is read into out. */
static bool answered(int fd, int ms, char *out, size_t cap)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms) != 1)
                return false;
        size_t len = 0;
        for (int i = 0; i < 50 && len + 1 < cap; i++) {
                ssize_t r = read(fd, out + len, cap - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
                out[len] = '\0';
                if (strstr(out, "\r\n\r\n") && strrchr(out, '}'))
                        break;
                poll(&p, 1, 200);
        }
        out[len] = '\0';
        return len > 0;
}

/* A sandbox create no worker can place: its operation stays pending. */
static void pending_op(const char *key, char op[static 64])
{
        _cleanup_json_ json_object *r =
                sp_test_api(&S, key, "POST", "/v1/sandboxes", 202,
                            "{\"template\":\"base\",\"resources\":{\"disk_mb\":1048576}}", NULL);
        snprintf(op, 64, "%s", sp_test_jstr(r, "operation.id"));
}

/* The value of the sample line "name V" in the control plane's /metrics; -1 when absent. */
static long metric(const char *name)
{
        sp_test_http_response r = {0};
        _cleanup_error_ sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api, "GET", "/metrics", NULL, NULL, 5000, &r, &e), &e);
        char line[128];
        snprintf(line, sizeof(line), "\n%s ", name);
        const char *p = strstr(r.body, line);
        long v = p ? strtol(p + strlen(line), NULL, 10) : -1;
        sp_test_http_response_free(&r);
        return v;
}

START_TEST(long_polls_are_shared_per_tenant)
{
        char a_key[256], b_key[256], a_op[64], b_op[64], buf[8192];
        sp_test_new_tenant(&S, "poller", a_key);
        sp_test_new_tenant(&S, "victim", b_key);
        pending_op(a_key, a_op);

        /* A's share is 2: two waits held, the next two answered at once, still pending. */
        int held[2], extra[2];
        for (int i = 0; i < 2; i++)
                held[i] = long_poll(a_key, a_op, 30);
        for (int i = 0; i < 2; i++) {
                extra[i] = long_poll(a_key, a_op, 30);
                ck_assert_msg(answered(extra[i], 10000, buf, sizeof(buf)), "a wait beyond the share was held");
                ck_assert_msg(strstr(buf, " 200 ") && strstr(buf, "\"pending\""), "%s", buf);
                close(extra[i]);
        }
        for (int i = 0; i < 2; i++)
                ck_assert_msg(!answered(held[i], 300, buf, sizeof(buf)), "a wait within the share was answered: %s",
                              buf);
        long held_n = metric("space_api_waiters");
        ck_assert_int_eq(held_n, 2);

        /* B is served: its long-poll is held, and answered when its operation ends. */
        _cleanup_json_ json_object *sb =
                sp_test_api(&S, b_key, "POST", "/v1/sandboxes", 202, "{\"template\":\"base\"}", NULL);
        snprintf(b_op, sizeof(b_op), "%s", sp_test_jstr(sb, "operation.id"));
        int bfd = long_poll(b_key, b_op, 60);
        ck_assert_msg(answered(bfd, 60000, buf, sizeof(buf)), "the other tenant's long-poll got no answer");
        ck_assert_msg(strstr(buf, " 200 ") && strstr(buf, "\"succeeded\""), "%s", buf);
        close(bfd);

        /* A closes its held waits: within a few ticks they are gone and A may wait again. */
        for (int i = 0; i < 2; i++)
                close(held[i]);
        long n = -1;
        for (int i = 0; i < 100 && (n = metric("space_api_waiters")) != 0; i++)
                usleep(100 * 1000);
        ck_assert_msg(n == 0, "closed long-polls still held: %ld", n);
        int again = long_poll(a_key, a_op, 30);
        ck_assert_msg(!answered(again, 300, buf, sizeof(buf)), "a wait after the closed ones was not held: %s", buf);
        close(again);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_api_longpoll");
        TCase *tc = tcase_create("longpoll");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, long_polls_are_shared_per_tenant);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("a cluster with a worker (namespaces, btrfs)");
        sp_test_pg_require();
        return sp_test_main(suite());
}
