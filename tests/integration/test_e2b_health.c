/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration: space-e2b's own health routes and metrics, in front of a
 * public API played by the test (an HTTP server on a thread of its own whose
 * /readyz answers 200, 503 or nothing at all, or which is gone).
 *
 * /healthz is 200 whatever the API does. /readyz follows the API's own
 * /readyz: 200 while it is ready, 503 naming why when it answers 503, when
 * its probe times out and when nothing listens; a probe answers the
 * requests of the next second, and requests that arrive while one is in
 * flight wait for it (one probe, however many ask). envd's /health without a
 * sandbox is 204, with a token that does not open 401. /metrics counts the
 * answers by route and status and the probes' errors by reason. A call the
 * API answers 429 with Retry-After (a rate limit) is sent again after that
 * wait and served; a 429 without it (a quota) is passed on at once.
 */
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "port.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/http.h"
#include "space/json.h"

#define HELD_MAX 64

/* The public API as the test plays it. */
typedef struct fake_api {
        pthread_t thread;
        struct event_base *base;
        sp_http_server *srv;
        int port;
        atomic_int mode; /* the status /readyz answers; 0: none (the request is held) */
        atomic_int hits;
        /* GET /v1/sandboxes: how many more calls to answer 429 (rate_mode with
         * Retry-After: 1, quota_mode without), then 200 with an empty page */
        atomic_int refuse, retry_after, lists;
        sp_http_request *held[HELD_MAX]; /* the fake's thread only */
        size_t nheld;
} fake_api;

static fake_api api;
static sp_test_proc e2b;
static int port;
static char *dir;

static void fake_readyz(sp_http_request *req, void *userdata)
{
        fake_api *f = userdata;
        atomic_fetch_add(&f->hits, 1);
        int mode = atomic_load(&f->mode);
        if (mode == 200)
                sp_http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
        else if (mode == 503)
                sp_http_reply_errorf(req, SP_E_UNAVAILABLE, "database unavailable");
        else if (f->nheld < HELD_MAX)
                f->held[f->nheld++] = sp_http_request_ref(req);
}

static void fake_list(sp_http_request *req, void *userdata)
{
        fake_api *f = userdata;
        atomic_fetch_add(&f->lists, 1);
        if (atomic_load(&f->refuse) > 0) {
                atomic_fetch_sub(&f->refuse, 1);
                if (atomic_load(&f->retry_after)) {
                        sp_http_response_header(req, "Retry-After", "1");
                        sp_http_reply_errorf(req, SP_E_LIMIT, "rate limit exceeded: requests of this API key");
                } else {
                        sp_http_reply_errorf(req, SP_E_LIMIT, "tenant quota exceeded: running_sandboxes limit 1");
                }
                return;
        }
        static const char page[] = "{\"sandboxes\":[],\"next_cursor\":null}";
        sp_http_reply(req, 200, "application/json", page, sizeof(page) - 1);
}

static void *fake_main(void *userdata)
{
        fake_api *f = userdata;
        event_base_loop(f->base, EVLOOP_NO_EXIT_ON_EMPTY);
        return NULL;
}

static void fake_start(void)
{
        sp_error *err = NULL;
        atomic_store(&api.mode, 200);
        ck_assert_ptr_nonnull(api.base = event_base_new());
        ck_assert_ptr_nonnull(api.srv = sp_http_server_new(api.base, NULL, &err));
        sp_test_ok(sp_http_route(api.srv, "GET", "/readyz", fake_readyz, &api, &err), &err);
        sp_test_ok(sp_http_route(api.srv, "GET", "/v1/sandboxes", fake_list, &api, &err), &err);
        sp_test_ok(sp_http_server_listen(api.srv, "127.0.0.1:0", NULL, &err), &err);
        api.port = sp_http_server_port(api.srv);
        ck_assert_int_eq(pthread_create(&api.thread, NULL, fake_main, &api), 0);
}

/* Stops the fake: its port then refuses connections. */
static void fake_stop(void)
{
        if (!api.base)
                return;
        event_base_loopbreak(api.base);
        pthread_join(api.thread, NULL);
        api.srv = sp_http_server_free(api.srv);
        for (size_t i = 0; i < api.nheld; i++)
                sp_http_request_unref(api.held[i]);
        api.nheld = 0;
        event_base_free(api.base);
        api.base = NULL;
}

static void setup(void)
{
        sp_error *err = NULL;
        ck_assert_int_eq(evthread_use_pthreads(), 0);
        fake_start();
        dir = sp_test_tmpdir("e2b-health");
        port = sp_test_free_port(&err);
        sp_test_ok(port, &err);
        char bin[1024], listen[80], url[80], secret[700], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-e2b", sp_test_binary_dir());
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(url, sizeof(url), "--api-url=http://127.0.0.1:%d", api.port);
        snprintf(secret, sizeof(secret), "--secret-file=%s/secret.key", dir);
        snprintf(logp, sizeof(logp), "%s/e2b.log", dir);
        const char *argv[] = {bin, listen, url, secret, "--log-format=text", NULL};
        sp_test_proc_opts po = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&e2b, "e2b", argv, &po, &err), &err);
        sp_test_ok(sp_test_proc_wait_http(&e2b, "127.0.0.1", port, "/healthz", 15000, &err), &err);
}

static void teardown(void)
{
        if (e2b.argv) {
                if (getenv("SPACE_TEST_DUMP"))
                        sp_test_proc_dump_log(&e2b, 40);
                sp_test_proc_stop(&e2b, 10000, NULL);
                sp_test_proc_free(&e2b);
        }
        fake_stop();
        if (dir) {
                sp_test_tmpdir_remove(dir);
                free(dir);
                dir = NULL;
        }
}

/* GET path (with headers): status and body in *r. */
static int get(const char *path, const char *const *headers, sp_test_http_response *r)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_http(port, "GET", path, headers, NULL, 10000, r, &err), &err);
        return r->status;
}

/* GET /readyz: its status; its body must hold want when want is set. */
static int readyz(const char *want)
{
        sp_test_http_response r = {0};
        int status = get("/readyz", NULL, &r);
        if (want)
                ck_assert_msg(strstr(r.body, want), "/readyz %d: %s", status, r.body);
        sp_test_http_response_free(&r);
        return status;
}

/* The value of the metric line name, or -1. */
static long long metric(const char *name)
{
        sp_test_http_response r = {0};
        ck_assert_int_eq(get("/metrics", NULL, &r), 200);
        long long v = -1;
        size_t n = strlen(name);
        for (const char *l = r.body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (strncmp(l, name, n) == 0 && l[n] == ' ')
                        v = strtoll(l + n + 1, NULL, 10);
        sp_test_http_response_free(&r);
        return v;
}

/* Lets the last probe's answer go stale. */
static void next_second(void)
{
        usleep(1100 * 1000);
}

START_TEST(readyz_follows_the_api)
{
        ck_assert_int_eq(readyz("{\"status\":\"ok\",\"checks\":{\"api\":\"ok\"}}"), 200);
        int hits = atomic_load(&api.hits);
        ck_assert_int_ge(hits, 1);
        /* Within the second, from the same probe. */
        for (int i = 0; i < 5; i++)
                ck_assert_int_eq(readyz(NULL), 200);
        ck_assert_int_eq(atomic_load(&api.hits), hits);

        atomic_store(&api.mode, 503);
        next_second();
        ck_assert_int_eq(readyz("is not ready (503): database unavailable"), 503);
        sp_test_http_response r = {0};
        ck_assert_int_eq(get("/healthz", NULL, &r), 200);
        sp_test_http_response_free(&r);

        /* The API answers nothing: one probe for everyone waiting, 503 once it times out. */
        atomic_store(&api.mode, 0);
        next_second();
        hits = atomic_load(&api.hits);
        enum { N = 8 };
        int fds[N];
        for (int i = 0; i < N; i++) {
                sp_error *err = NULL;
                fds[i] = sp_test_dial(port, &err);
                sp_test_ok(fds[i], &err);
                static const char req[] = "GET /readyz HTTP/1.1\r\nHost: e2b\r\nConnection: close\r\n\r\n";
                ck_assert_int_eq(write(fds[i], req, sizeof(req) - 1), (ssize_t)(sizeof(req) - 1));
        }
        for (int i = 0; i < N; i++) {
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                ck_assert_int_eq(sp_test_read_answer(fds[i], 10000, &b), 503);
                ck_assert_msg(strstr(b.data, "cannot reach the public API"), "%s", b.data);
                close(fds[i]);
        }
        ck_assert_int_eq(atomic_load(&api.hits), hits + 1);
        ck_assert_int_ge(metric("space_e2b_upstream_errors_total{upstream=\"api\",reason=\"timeout\"}"), 1);

        atomic_store(&api.mode, 200);
        next_second();
        ck_assert_int_eq(readyz(NULL), 200);

        /* Nothing listens. */
        fake_stop();
        next_second();
        ck_assert_int_eq(readyz("cannot reach the public API"), 503);
        ck_assert_int_ge(metric("space_e2b_upstream_errors_total{upstream=\"api\",reason=\"unreachable\"}"), 1);
        ck_assert_int_ge(metric("space_e2b_upstream_errors_total{upstream=\"api\",reason=\"status_5xx\"}"), 1);
        ck_assert_int_ge(metric("space_e2b_requests_total{method=\"GET\",route=\"/readyz\",status=\"200\"}"), 7);
        ck_assert_int_ge(metric("space_e2b_requests_total{method=\"GET\",route=\"/readyz\",status=\"503\"}"), N + 2);
        ck_assert_int_ge(metric("space_e2b_requests_total{method=\"GET\",route=\"/healthz\",status=\"200\"}"), 1);
}
END_TEST

START_TEST(envd_health_and_metrics)
{
        sp_test_http_response r = {0};
        ck_assert_int_eq(get("/health", NULL, &r), 204);
        sp_test_http_response_free(&r);
        /* For a sandbox: a call that needs the sealed key; a token that does not open is refused. */
        const char *h[] = {"E2b-Sandbox-Id: sbx_nothing", "X-Access-Token: e2b1.AAAA", NULL};
        ck_assert_int_eq(get("/health", h, &r), 401);
        ck_assert_msg(strstr(r.body, "\"code\":401"), "%s", r.body);
        sp_test_http_response_free(&r);
        ck_assert_int_eq(metric("space_e2b_requests_total{method=\"GET\",route=\"/health\",status=\"204\"}"), 1);
        ck_assert_int_eq(metric("space_e2b_requests_total{method=\"GET\",route=\"/health\",status=\"401\"}"), 1);
        ck_assert_int_ge(metric("space_e2b_requests_total{method=\"GET\",route=\"/metrics\",status=\"200\"}"), 1);
        ck_assert_int_eq(metric("space_e2b_calls"), 0);
        ck_assert_int_eq(metric("space_e2b_upstream_requests_total{upstream=\"dataplane\"}"), 0);
        /* A REST route without its key never reaches the API. */
        ck_assert_int_eq(get("/v2/sandboxes", NULL, &r), 401);
        sp_test_http_response_free(&r);
        /* A call is counted when it is freed, which may come just after its answer reached the client. */
        long long v = -1;
        for (int i = 0; i < 100 && v != 1; i++) {
                v = metric("space_e2b_requests_total{method=\"GET\",route=\"/v2/sandboxes\",status=\"401\"}");
                if (v != 1)
                        usleep(20000);
        }
        ck_assert_int_eq(v, 1);
}
END_TEST

START_TEST(rate_limits_are_waited_out_and_quotas_passed_on)
{
        const char *h[] = {"X-API-KEY: spk_test", NULL};
        sp_test_http_response r = {0};
        /* A rate limit: waited out, then served. */
        atomic_store(&api.retry_after, 1);
        atomic_store(&api.refuse, 1);
        atomic_store(&api.lists, 0);
        ck_assert_int_eq(get("/v2/sandboxes", h, &r), 200);
        ck_assert_msg(strcmp(r.body, "[]") == 0, "%s", r.body);
        sp_test_http_response_free(&r);
        ck_assert_int_eq(atomic_load(&api.lists), 2);
        /* One that does not end within the wrapper's attempts is the caller's 429. */
        atomic_store(&api.refuse, 100);
        atomic_store(&api.lists, 0);
        ck_assert_int_eq(get("/v2/sandboxes", h, &r), 429);
        sp_test_http_response_free(&r);
        ck_assert_int_eq(atomic_load(&api.lists), 4); /* the call and its three retries */
        /* A quota (no Retry-After): passed on at once. */
        atomic_store(&api.retry_after, 0);
        atomic_store(&api.refuse, 1);
        atomic_store(&api.lists, 0);
        ck_assert_int_eq(get("/v2/sandboxes", h, &r), 429);
        ck_assert_msg(strstr(r.body, "tenant quota exceeded"), "%s", r.body);
        sp_test_http_response_free(&r);
        ck_assert_int_eq(atomic_load(&api.lists), 1);
        atomic_store(&api.refuse, 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_health");
        TCase *tc = tcase_create("health");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, readyz_follows_the_api);
        tcase_add_test(tc, envd_health_and_metrics);
        tcase_add_test(tc, rate_limits_are_waited_out_and_quotas_passed_on);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
