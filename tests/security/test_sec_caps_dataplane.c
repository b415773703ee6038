/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack: one tenant exhausts the data plane's stream bound for everyone
 * (issue #13: 4,100 slow uploads filled the 4,096 streams of a replica).
 *
 * Against a real data plane (--max-streams 8, --max-streams-per-tenant 4)
 * and a real worker: tenant A opens as many slow uploads as the whole bound
 * (headers and a few bytes, then silence). Only its share is admitted; its
 * extra uploads are answered 429 resource_exhausted naming the share at
 * once. Tenant B still attaches to a session and uploads a file, /healthz
 * and /metrics answer, and /metrics counts A's refusals under its tenant.
 * When A and B together hold the whole bound, a third tenant gets 503. A's
 * slots come back when its uploads end.
 *
 * Attack: one tenant fills the streams of the data plane's connection to
 * one worker (far fewer than the data plane's own bound: 256), so every
 * other tenant's calls to that worker wait behind it. Against a data plane
 * whose stream bound is high (--max-streams 64, a share of 16) but whose
 * connection to a worker carries --worker-streams 8 with a share of 2 per
 * tenant: tenant A's slow uploads beyond 2 are answered 429 naming the
 * share of streams to this worker per tenant, while tenant B's attach and
 * upload to the same worker are served, and /metrics counts A's refusals
 * under the worker and A's tenant.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dataplane/env.h"
#include "harness.h"
#include "http_client.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

#define SBX "sbx_sec00000000000000001"
#define SES "ses_sec00000000000000001"
#define TEN_A "ten_seca000000000000001"
#define TEN_B "ten_secb000000000000001"
#define TEN_C "ten_secc000000000000001"
#define TOTAL 8
#define SHARE 4

static dpt_env env;
static sp_test_proc dp;
static int port;

static void case_setup(void)
{
        dpt_env_up(&env, true, 4);
        static const char *const extra[] = {"--max-streams=8", "--max-streams-per-tenant=4", NULL};
        port = dpt_dataplane_start(&env, &dp, "dataplane", extra);
        dpt_sandbox(&env, SBX, 0);
        json_object_put(dpt_rpcf(
                &env, "Exec", "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":[\"sleep\",\"1000\"]}", SBX, SES));
}

#define WORKER_SHARE 2

static void worker_case_setup(void)
{
        dpt_env_up(&env, true, 4);
        static const char *const extra[] = {"--max-streams=64", "--worker-streams=8", "--worker-streams-per-tenant=2",
                                            NULL};
        port = dpt_dataplane_start(&env, &dp, "dataplane", extra);
        dpt_sandbox(&env, SBX, 0);
        json_object_put(dpt_rpcf(
                &env, "Exec", "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":[\"sleep\",\"1000\"]}", SBX, SES));
}

static void case_teardown(void)
{
        bool clean = dpt_dataplane_stop(&dp);
        dpt_env_down(&env);
        ck_assert_msg(clean, "the data plane did not stop cleanly");
}

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A token of tenant ten: a files token for SBX, or a session token for SES. */
static char *token(const char *ten, bool files)
{
        _cleanup_json_ json_object *c = json_object_new_object();
        json_object_object_add(c, "typ", json_object_new_string(files ? "files" : "session"));
        json_object_object_add(c, "ten", json_object_new_string(ten));
        json_object_object_add(c, "sbx", json_object_new_string(SBX));
        if (!files)
                json_object_object_add(c, "ses", json_object_new_string(SES));
        json_object_object_add(c, "wkr", json_object_new_string(env.worker_addr));
        json_object_object_add(c, "scope", json_object_new_string("write"));
        sp_error *err = NULL;
        char *t = sp_token_sign(env.signer, c, 3600, &err);
        ck_assert_msg(t, "sign: %s", err ? err->message : "?");
        return t;
}

static int dial(void)
{
        sp_error *e = NULL;
        int fd = sp_test_dial(port, &e);
        sp_test_ok(fd, &e);
        return fd;
}

static int answer(int fd, int wait_ms, sp_buf *out)
{
        return sp_test_read_answer(fd, wait_ms, out);
}

/* Starts a slow upload for tenant ten: the headers announce 1 MiB, 16 bytes follow, then nothing. */
static int slow_upload(const char *ten, int n)
{
        _cleanup_free_ char *t = token(ten, true);
        int fd = dial();
        char req[8192];
        int len = snprintf(req, sizeof(req),
                           "PUT /v1/sandboxes/%s/files?path=/tmp/slow-%s-%d HTTP/1.1\r\nHost: dp\r\n"
                           "Authorization: Bearer %s\r\nContent-Length: 1048576\r\n\r\n0123456789abcdef",
                           SBX, ten, n, t);
        ck_assert_int_eq(write(fd, req, (size_t)len), len);
        return fd;
}

/* The value of the metric line starting with prefix, or -1. */
static long long metric(const char *prefix)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port, "GET", "/metrics", NULL, NULL, 0, &b), 200);
        sp_buf_append(&b, "", 0, NULL);
        for (char *l = b.data; l && *l;) {
                char *nl = strchr(l, '\n');
                if (strncmp(l, prefix, strlen(prefix)) == 0)
                        return atoll(l + strlen(prefix));
                l = nl ? nl + 1 : NULL;
        }
        return -1;
}

/* Waits (bounded) until the data plane holds want worker streams. */
static void wait_streams(long long want)
{
        long long have = -1;
        for (int64_t deadline = mono_ms() + 10000; mono_ms() < deadline; usleep(50000))
                if ((have = metric("space_dataplane_worker_streams ")) == want)
                        return;
        ck_abort_msg("the data plane holds %lld streams, want %lld", have, want);
}

START_TEST(one_tenant_at_its_share_leaves_the_others_served)
{
        int a[TOTAL];
        int held = 0, refused = 0;
        /* Tenant A tries to take every stream of the replica. */
        for (int i = 0; i < TOTAL; i++) {
                a[i] = slow_upload(TEN_A, i);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                int status = answer(a[i], 500, &b);
                if (status == 0) {
                        held++;
                        continue;
                }
                ck_assert_msg(status == 429, "A's upload %d: %.600s", i, b.data);
                ck_assert_msg(strstr(b.data, "resource_exhausted") && strstr(b.data, "share"), "%s", b.data);
                refused++;
        }
        ck_assert_int_eq(held, SHARE);
        ck_assert_int_eq(refused, TOTAL - SHARE);
        wait_streams(SHARE);

        /* Tenant B is served: an attach stream and a whole upload. */
        _cleanup_free_ char *tb = token(TEN_B, false);
        int att = dial();
        char req[8192];
        int len = snprintf(req, sizeof(req),
                           "GET /v1/sessions/%s/attach HTTP/1.1\r\nHost: dp\r\nAuthorization: Bearer %s\r\n\r\n", SES,
                           tb);
        ck_assert_int_eq(write(att, req, (size_t)len), len);
        _cleanup_buf_ sp_buf ab = SP_BUF_INIT;
        ck_assert_msg(answer(att, 10000, &ab) == 200, "B's attach: %.600s", ab.data);
        _cleanup_free_ char *tbf = token(TEN_B, true);
        char auth[4200];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tbf);
        const char *h[] = {auth, NULL};
        _cleanup_buf_ sp_buf ub = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port, "PUT", "/v1/sandboxes/" SBX "/files?path=/tmp/b.txt", h, "hello", 5, &ub), 200);
        _cleanup_buf_ sp_buf hb = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port, "GET", "/healthz", NULL, NULL, 0, &hb), 200);
        ck_assert_int_eq(metric("space_dataplane_stream_refusals_total{tenant=\"" TEN_A "\",limit=\"tenant\"} "),
                         TOTAL - SHARE);
        ck_assert_int_eq(metric("space_dataplane_stream_refusals_total{tenant=\"" TEN_B "\",limit=\"tenant\"} "), -1);

        /* A and B together at the whole bound: a third tenant waits for the total (503). */
        int bslow[SHARE - 1];
        for (int i = 0; i < SHARE - 1; i++) {
                bslow[i] = slow_upload(TEN_B, i);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                ck_assert_msg(answer(bslow[i], 300, &b) == 0, "B's upload %d: %.600s", i, b.data);
        }
        wait_streams(TOTAL);
        int c = slow_upload(TEN_C, 0);
        _cleanup_buf_ sp_buf cb = SP_BUF_INIT;
        ck_assert_msg(answer(c, 5000, &cb) == 503, "C's upload: %.600s", cb.data);
        ck_assert_msg(strstr(cb.data, "unavailable") && strstr(cb.data, "8 streams"), "%s", cb.data);
        ck_assert_int_eq(metric("space_dataplane_stream_refusals_total{tenant=\"" TEN_C "\",limit=\"total\"} "), 1);
        close(c);

        /* A's slots come back when its uploads end: it is served again. */
        for (int i = 0; i < TOTAL; i++)
                close(a[i]);
        for (int i = 0; i < SHARE - 1; i++)
                close(bslow[i]);
        wait_streams(1); /* B's attach */
        int again = slow_upload(TEN_A, 100);
        _cleanup_buf_ sp_buf gb = SP_BUF_INIT;
        ck_assert_msg(answer(again, 500, &gb) == 0, "A after its uploads ended: %.600s", gb.data);
        close(again);
        close(att);
        wait_streams(0);
}
END_TEST

START_TEST(one_tenant_at_its_share_of_a_worker_leaves_the_others_served)
{
        enum { TRIES = 6 };
        int a[TRIES];
        int held = 0, refused = 0;
        /* Tenant A tries to take the connection's streams: far under the data
         * plane's own share (16), so only the worker connection's share stops it. */
        for (int i = 0; i < TRIES; i++) {
                a[i] = slow_upload(TEN_A, i);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                int status = answer(a[i], 500, &b);
                if (status == 0) {
                        held++;
                        continue;
                }
                ck_assert_msg(status == 429, "A's upload %d: %.600s", i, b.data);
                ck_assert_msg(strstr(b.data, "resource_exhausted") &&
                                      strstr(b.data, "streams to this worker per tenant"),
                              "%s", b.data);
                refused++;
        }
        ck_assert_int_eq(held, WORKER_SHARE);
        ck_assert_int_eq(refused, TRIES - WORKER_SHARE);
        wait_streams(WORKER_SHARE);

        /* Tenant B is served by the same worker: an attach stream and a whole upload. */
        _cleanup_free_ char *tb = token(TEN_B, false);
        int att = dial();
        char req[8192];
        int len = snprintf(req, sizeof(req),
                           "GET /v1/sessions/%s/attach HTTP/1.1\r\nHost: dp\r\nAuthorization: Bearer %s\r\n\r\n", SES,
                           tb);
        ck_assert_int_eq(write(att, req, (size_t)len), len);
        _cleanup_buf_ sp_buf ab = SP_BUF_INIT;
        ck_assert_msg(answer(att, 10000, &ab) == 200, "B's attach: %.600s", ab.data);
        _cleanup_free_ char *tbf = token(TEN_B, true);
        char auth[4200];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", tbf);
        const char *h[] = {auth, NULL};
        _cleanup_buf_ sp_buf ub = SP_BUF_INIT;
        ck_assert_msg(dpt_http(port, "PUT", "/v1/sandboxes/" SBX "/files?path=/tmp/b.txt", h, "hello", 5, &ub) == 200,
                      "B's upload: %.600s", ub.data);
        char want[512];
        snprintf(want, sizeof(want),
                 "space_dataplane_worker_stream_refusals_total{worker=\"%s\",tenant=\"" TEN_A "\",limit=\"tenant\"} ",
                 env.worker_addr);
        ck_assert_int_eq(metric(want), TRIES - WORKER_SHARE);
        /* The data plane's own share was never reached. */
        ck_assert_int_eq(metric("space_dataplane_stream_refusals_total{tenant=\"" TEN_A "\",limit=\"tenant\"} "), -1);

        /* A's streams come back when its uploads end. */
        for (int i = 0; i < TRIES; i++)
                close(a[i]);
        wait_streams(1); /* B's attach */
        int again = slow_upload(TEN_A, 100);
        _cleanup_buf_ sp_buf gb = SP_BUF_INIT;
        ck_assert_msg(answer(again, 500, &gb) == 0, "A after its uploads ended: %.600s", gb.data);
        close(again);
        close(att);
        wait_streams(0);
}
END_TEST

int main(void)
{
        sp_test_require_root("the worker needs btrfs, namespaces and cgroups");
        Suite *s = suite_create("sec_caps_dataplane");
        TCase *tc = tcase_create("caps");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_test(tc, one_tenant_at_its_share_leaves_the_others_served);
        suite_add_tcase(s, tc);
        TCase *tw = tcase_create("worker_caps");
        tcase_set_timeout(tw, 120);
        tcase_add_unchecked_fixture(tw, worker_case_setup, case_teardown);
        tcase_add_test(tw, one_tenant_at_its_share_of_a_worker_leaves_the_others_served);
        suite_add_tcase(s, tw);
        return sp_test_main(s);
}
