/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack: one tenant exhausts the E2B wrapper's shared bounds for everyone
 * (issue #13: 1,030 slow calls from one API key made every request, health
 * checks included, answer 429; 1,000 watchers of one tenant refused every
 * other tenant's).
 *
 * A real cluster (PostgreSQL, the control plane, a worker) and a real
 * space-e2b in front of it with small bounds (--max-calls=8,
 * --max-calls-per-key=2, --max-watchers=4, --max-watchers-per-key=2).
 * Tenants A and B each have a sandbox.
 *
 * Calls: A opens as many WatchDir streams (each holds a call while its
 * client stays) as the whole bound. Only its share is admitted; the rest,
 * one with a made-up X-API-KEY beside its token, and A's REST calls with
 * the same key, are answered 429 naming the share, at once. B's envd and REST calls are served, /health, /healthz, /readyz
 * and /metrics answer, and /metrics counts the refusals and the key at its
 * share. When A's streams end its calls are served again.
 *
 * Watchers: A creates two watchers, its third is resource_exhausted naming
 * the share while B creates one; after A removes one it may create one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define TOTAL 8
#define SHARE 2
#define WATCHERS_SHARE 2

typedef struct tenant {
        char key[256];
        char sandbox[64];
        char token[1024]; /* the sandbox's envdAccessToken */
} tenant;

static sp_test_space S;
static sp_test_proc e2b;
static int port;
static tenant A, B;

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* GET /sandboxes/{id} through the wrapper: the sandbox's envd access token. */
static void envd_token(tenant *t)
{
        char path[128], auth[300];
        snprintf(path, sizeof(path), "/sandboxes/%s", t->sandbox);
        snprintf(auth, sizeof(auth), "X-API-KEY: %s", t->key);
        const char *h[] = {auth, NULL};
        sp_test_http_response r = {0};
        sp_error *err = NULL;
        sp_test_ok(sp_test_http(port, "GET", path, h, NULL, 30000, &r, &err), &err);
        ck_assert_msg(r.status == 200, "GET %s: %d %s", path, r.status, r.body);
        _cleanup_json_ json_object *o = sp_test_http_json(&r);
        const char *tok = sp_test_jstr(o, "envdAccessToken");
        ck_assert_ptr_nonnull(tok);
        snprintf(t->token, sizeof(t->token), "%s", tok);
        sp_test_http_response_free(&r);
}

static void cluster_up(void)
{
        sp_error *err = NULL;
        sp_test_space_opts o = {.workers = 1};
        sp_test_space_up(&S, &o);
        port = sp_test_free_port(&err);
        sp_test_ok(port, &err);
        char bin[1024], listen[80], api[80], secret[700], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-e2b", sp_test_binary_dir());
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(api, sizeof(api), "--api-url=http://127.0.0.1:%d", S.api_port[0]);
        snprintf(secret, sizeof(secret), "--secret-file=%s/e2b-secret.key", S.dir);
        snprintf(logp, sizeof(logp), "%s/e2b.log", S.dir);
        const char *argv[] = {bin,
                              listen,
                              api,
                              secret,
                              "--max-calls=8",
                              "--max-calls-per-key=2",
                              "--max-watchers=4",
                              "--max-watchers-per-key=2",
                              "--signed-url-scans=5",
                              "--log-format=text",
                              NULL};
        sp_test_proc_opts po = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&e2b, "e2b", argv, &po, &err), &err);
        sp_test_ok(sp_test_proc_wait_http(&e2b, "127.0.0.1", port, "/healthz", 15000, &err), &err);
        sp_test_new_tenant(&S, "e2bcapa", A.key);
        sp_test_new_tenant(&S, "e2bcapb", B.key);
        sp_test_create_sandbox(&S, A.key, SANDBOX, A.sandbox);
        sp_test_create_sandbox(&S, B.key, SANDBOX, B.sandbox);
        envd_token(&A);
        envd_token(&B);
}

static void cluster_down(void)
{
        if (e2b.argv) {
                if (getenv("SPACE_TEST_DUMP"))
                        sp_test_proc_dump_log(&e2b, 40);
                sp_test_proc_stop(&e2b, 10000, NULL);
                sp_test_proc_free(&e2b);
        }
        sp_test_space_down(&S);
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

/* Starts a WatchDir stream of t's sandbox's root: it holds a call while fd
 * stays open. extra: one more header line ("Name: value\r\n") or "". */
static int watch_dir_with(const tenant *t, const char *extra)
{
        static const char msg[] = "{\"path\":\"/\"}";
        char body[64];
        size_t n = sizeof(msg) - 1;
        body[0] = 0;
        body[1] = body[2] = body[3] = 0;
        body[4] = (char)n;
        memcpy(body + 5, msg, n);
        char head[2048];
        int len = snprintf(head, sizeof(head),
                           "POST /filesystem.Filesystem/WatchDir HTTP/1.1\r\nHost: e2b\r\n"
                           "Content-Type: application/connect+json\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n"
                           "%sContent-Length: %zu\r\n\r\n",
                           t->sandbox, t->token, extra, n + 5);
        int fd = dial();
        ck_assert_int_eq(write(fd, head, (size_t)len), len);
        ck_assert_int_eq(write(fd, body, n + 5), (ssize_t)(n + 5));
        return fd;
}

static int watch_dir(const tenant *t)
{
        return watch_dir_with(t, "");
}

/* A unary envd call of t (Connect, JSON): the status, the body into out. */
static int envd(const tenant *t, const char *method, const char *json, sp_test_http_response *out)
{
        char path[128], sbx[128], tok[1100];
        snprintf(path, sizeof(path), "/filesystem.Filesystem/%s", method);
        snprintf(sbx, sizeof(sbx), "E2b-Sandbox-Id: %s", t->sandbox);
        snprintf(tok, sizeof(tok), "X-Access-Token: %s", t->token);
        const char *h[] = {sbx, tok, "Content-Type: application/json", NULL};
        sp_error *err = NULL;
        sp_test_ok(sp_test_http(port, "POST", path, h, json, 30000, out, &err), &err);
        return out->status;
}

/* GET /sandboxes/{t's sandbox} with t's API key: the status, the body into out. */
static int rest_get(const tenant *t, sp_test_http_response *out)
{
        char path[128], auth[300];
        snprintf(path, sizeof(path), "/sandboxes/%s", t->sandbox);
        snprintf(auth, sizeof(auth), "X-API-KEY: %s", t->key);
        const char *h[] = {auth, NULL};
        sp_error *err = NULL;
        sp_test_ok(sp_test_http(port, "GET", path, h, NULL, 30000, out, &err), &err);
        return out->status;
}

static int get_status(const char *path)
{
        sp_test_http_response r = {0};
        sp_error *err = NULL;
        sp_test_ok(sp_test_http(port, "GET", path, NULL, NULL, 5000, &r, &err), &err);
        int status = r.status;
        sp_test_http_response_free(&r);
        return status;
}

/* The value of the metric line starting with prefix, or -1. */
static long long metric(const char *prefix)
{
        sp_test_http_response r = {0};
        sp_error *err = NULL;
        sp_test_ok(sp_test_http(port, "GET", "/metrics", NULL, NULL, 5000, &r, &err), &err);
        ck_assert_int_eq(r.status, 200);
        long long v = -1;
        for (char *l = r.body; l && *l;) {
                char *nl = strchr(l, '\n');
                if (strncmp(l, prefix, strlen(prefix)) == 0) {
                        v = atoll(l + strlen(prefix));
                        break;
                }
                l = nl ? nl + 1 : NULL;
        }
        sp_test_http_response_free(&r);
        return v;
}

/* Waits (bounded) until the wrapper holds want calls. */
static void wait_calls(long long want)
{
        long long have = -1;
        for (int64_t deadline = mono_ms() + 10000; mono_ms() < deadline; usleep(100000))
                if ((have = metric("space_e2b_calls ")) == want)
                        return;
        ck_abort_msg("the wrapper holds %lld calls, want %lld", have, want);
}

/* GET /files with a made-up signature: the status. host: the Host header's value; extra: one
 * more header line ("Name: value\r\n") or "". */
static int bogus_signed_get(const char *host, const char *extra)
{
        char head[1024];
        int len = snprintf(head, sizeof(head),
                           "GET /files?path=%%2Ftmp%%2Fx&username=user&signature=v1_"
                           "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA HTTP/1.1\r\nHost: %s\r\n%s"
                           "Connection: close\r\n\r\n",
                           host, extra);
        int fd = dial();
        ck_assert_int_eq(write(fd, head, (size_t)len), len);
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        int status = answer(fd, 10000, &b);
        close(fd);
        return status;
}

/* Attack (issue 21's outside pass): signed file URLs that name no sandbox are checked against
 * every token the replica holds; a flood of made-up ones took most of its CPU. They are now
 * bounded per replica (--signed-url-scans=5 here, a burst of 10): the flood is answered 429 at
 * once, while URLs whose host names their sandbox, or requests naming it, are checked against
 * that sandbox's tokens alone and still answered (401: the signature is no token's). */
START_TEST(anonymous_signed_urls_are_bounded)
{
        int64_t t0 = mono_ms();
        int refused = 0, checked = 0;
        for (int i = 0; i < 40; i++) {
                int st = bogus_signed_get("e2b", "");
                ck_assert_msg(st == 401 || st == 429, "status %d", st);
                st == 429 ? refused++ : checked++;
        }
        int64_t elapsed_s = (mono_ms() - t0) / 1000 + 1;
        ck_assert_msg(refused > 0, "40 made-up signatures in %lld s: none refused", (long long)elapsed_s);
        ck_assert_msg(checked <= 10 + 5 * elapsed_s, "%d checked in %lld s", checked, (long long)elapsed_s);
        char host[128], hdr[160];
        snprintf(host, sizeof(host), "49983-%s.sandbox.example.com", A.sandbox);
        snprintf(hdr, sizeof(hdr), "E2b-Sandbox-Id: %s\r\n", B.sandbox);
        for (int i = 0; i < 20; i++) {
                ck_assert_int_eq(bogus_signed_get(host, ""), 401);
                ck_assert_int_eq(bogus_signed_get("e2b", hdr), 401);
        }
}
END_TEST

START_TEST(one_key_at_its_share_leaves_the_others_served)
{
        int a[TOTAL];
        int held = 0, refused = 0;
        /* A tries to take every call of the wrapper. */
        for (int i = 0; i < TOTAL; i++) {
                a[i] = watch_dir(&A);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                int status = answer(a[i], 5000, &b);
                if (status == 200) {
                        held++;
                        continue;
                }
                ck_assert_msg(status == 429, "A's stream %d: %.600s", i, b.data);
                ck_assert_msg(strstr(b.data, "resource_exhausted") && strstr(b.data, "--max-calls-per-key"), "%s",
                              b.data);
                refused++;
        }
        ck_assert_int_eq(held, SHARE);
        ck_assert_int_eq(refused, TOTAL - SHARE);
        wait_calls(SHARE);

        /* A header the route does not act with buys no share of its own. */
        int fake = watch_dir_with(&A, "X-API-KEY: made-up-key\r\n");
        _cleanup_buf_ sp_buf fb = SP_BUF_INIT;
        ck_assert_msg(answer(fake, 5000, &fb) == 429, "A's stream with a made-up X-API-KEY: %.600s", fb.data);
        close(fake);

        /* A's REST calls act with the same key: the same share, refused at once. */
        sp_test_http_response r = {0};
        int64_t t0 = mono_ms();
        ck_assert_msg(rest_get(&A, &r) == 429, "A's REST call: %d %s", r.status, r.body);
        ck_assert_msg(strstr(r.body, "share") && strstr(r.body, "\"code\":429"), "%s", r.body);
        ck_assert_int_lt(mono_ms() - t0, 3000);
        sp_test_http_response_free(&r);

        /* B is served, on envd and on REST. */
        r = (sp_test_http_response){0};
        ck_assert_msg(envd(&B, "Stat", "{\"path\":\"/\"}", &r) == 200, "B's Stat: %d %s", r.status, r.body);
        sp_test_http_response_free(&r);
        r = (sp_test_http_response){0};
        ck_assert_msg(rest_get(&B, &r) == 200, "B's REST call: %d %s", r.status, r.body);
        sp_test_http_response_free(&r);
        int bw = watch_dir(&B);
        _cleanup_buf_ sp_buf bb = SP_BUF_INIT;
        ck_assert_msg(answer(bw, 10000, &bb) == 200, "B's stream: %.600s", bb.data);

        /* Health and metrics take no call. */
        ck_assert_int_eq(get_status("/health"), 204);
        ck_assert_int_eq(get_status("/healthz"), 200);
        ck_assert_int_eq(get_status("/readyz"), 200);
        ck_assert_int_eq(metric("space_e2b_calls "), SHARE + 1);
        ck_assert_int_eq(metric("space_e2b_call_refusals_total{limit=\"key\"} "), TOTAL - SHARE + 2);
        ck_assert_int_eq(metric("space_e2b_call_refusals_total{limit=\"total\"} "), 0);
        ck_assert_int_eq(metric("space_e2b_call_keys_at_share "), 1);
        ck_assert_int_eq(metric("space_e2b_calls_per_key_max "), SHARE);

        /* A's calls come back when its streams end. */
        for (int i = 0; i < TOTAL; i++)
                close(a[i]);
        close(bw);
        wait_calls(0);
        r = (sp_test_http_response){0};
        ck_assert_msg(envd(&A, "Stat", "{\"path\":\"/\"}", &r) == 200, "A afterwards: %d %s", r.status, r.body);
        sp_test_http_response_free(&r);
}
END_TEST

/* A REST call with X-API-KEY key, sent on a new connection (not read). */
static int rest_with_key(const char *key)
{
        char head[512];
        int len = snprintf(head, sizeof(head), "GET /sandboxes/%s HTTP/1.1\r\nHost: e2b\r\nX-API-KEY: %s\r\n\r\n",
                           B.sandbox, key);
        int fd = dial();
        ck_assert_int_eq(write(fd, head, (size_t)len), len);
        return fd;
}

/* Attack (fourth pass): with the API slow to answer, calls with made-up API
 * keys each held a call until the API refused them, so a flood of them took
 * every call of the wrapper. Keys the API has not accepted yet now share one
 * share: with the control plane stopped, made-up keys hold SHARE calls, the
 * rest are 429 at once, and B's envd call (which needs no control plane) is
 * still served. */
START_TEST(made_up_keys_share_one_share)
{
        pid_t cp = S.cp[0].pid;
        ck_assert_int_gt(cp, 0);
        ck_assert_int_eq(kill(cp, SIGSTOP), 0);
        /* Every check after SIGCONT: a failed one must not leave the control plane stopped. */
        int fds[TOTAL], status[TOTAL];
        char first_other[640] = "";
        bool message_ok = true;
        for (int i = 0; i < TOTAL; i++) {
                char key[64];
                snprintf(key, sizeof(key), "made-up-%d", i);
                fds[i] = rest_with_key(key);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                status[i] = answer(fds[i], 200, &b);
                if (status[i] == 429 && !strstr(b.data, "not accepted yet"))
                        message_ok = false;
                if (status[i] > 0 && status[i] != 429 && !first_other[0])
                        snprintf(first_other, sizeof(first_other), "%.600s", b.data);
        }
        /* B's envd call is admitted (it waits for the stopped control plane, not refused). */
        static const char stat_body[] = "{\"path\":\"/\"}";
        char head[2048];
        int len =
                snprintf(head, sizeof(head),
                         "POST /filesystem.Filesystem/Stat HTTP/1.1\r\nHost: e2b\r\nContent-Type: application/json\r\n"
                         "E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nContent-Length: %zu\r\n\r\n%s",
                         B.sandbox, B.token, sizeof(stat_body) - 1, stat_body);
        int bfd = dial();
        ck_assert_int_eq(write(bfd, head, (size_t)len), len);
        _cleanup_buf_ sp_buf early = SP_BUF_INIT;
        int bearly = answer(bfd, 500, &early);
        ck_assert_int_eq(kill(cp, SIGCONT), 0);
        ck_assert_msg(bearly <= 0 || bearly == 200, "B's call while made-up keys flood: %.600s", early.data);
        if (bearly <= 0) {
                _cleanup_buf_ sp_buf late = SP_BUF_INIT;
                int blate = answer(bfd, 30000, &late);
                ck_assert_msg(blate == 200, "B's call once the control plane is back: %.2000s", late.data);
        }
        close(bfd);
        int refused = 0;
        for (int i = 0; i < TOTAL; i++)
                refused += status[i] == 429;
        ck_assert_msg(!first_other[0], "a made-up key's call was answered while the API is stopped: %s", first_other);
        ck_assert_msg(message_ok, "a refusal does not name the keys not accepted yet");
        ck_assert_int_eq(refused, TOTAL - SHARE);
        for (int i = 0; i < TOTAL; i++)
                close(fds[i]);
        wait_calls(0);
}
END_TEST

/* CreateWatcher for t on /: the status; the watcher's id into id. */
static int create_watcher(const tenant *t, char id[static 64], sp_test_http_response *r)
{
        int status = envd(t, "CreateWatcher", "{\"path\":\"/\"}", r);
        if (status == 200) {
                _cleanup_json_ json_object *o = sp_test_http_json(r);
                const char *w = sp_test_jstr(o, "watcherId");
                ck_assert_ptr_nonnull(w);
                snprintf(id, 64, "%s", w);
        }
        return status;
}

static void remove_watcher(const tenant *t, const char *id)
{
        char body[128];
        snprintf(body, sizeof(body), "{\"watcherId\":\"%s\"}", id);
        sp_test_http_response r = {0};
        ck_assert_msg(envd(t, "RemoveWatcher", body, &r) == 200, "RemoveWatcher: %d %s", r.status, r.body);
        sp_test_http_response_free(&r);
}

START_TEST(one_key_at_its_watcher_share_leaves_the_others_served)
{
        char wa[WATCHERS_SHARE + 1][64], wb[64];
        for (int i = 0; i < WATCHERS_SHARE; i++) {
                sp_test_http_response r = {0};
                ck_assert_msg(create_watcher(&A, wa[i], &r) == 200, "A's watcher %d: %d %s", i, r.status, r.body);
                sp_test_http_response_free(&r);
        }
        sp_test_http_response r = {0};
        ck_assert_msg(create_watcher(&A, wa[WATCHERS_SHARE], &r) == 429, "A's extra watcher: %d %s", r.status, r.body);
        ck_assert_msg(strstr(r.body, "resource_exhausted") && strstr(r.body, "--max-watchers-per-key"), "%s", r.body);
        sp_test_http_response_free(&r);
        r = (sp_test_http_response){0};
        ck_assert_msg(create_watcher(&B, wb, &r) == 200, "B's watcher: %d %s", r.status, r.body);
        sp_test_http_response_free(&r);
        ck_assert_int_eq(metric("space_e2b_watchers "), WATCHERS_SHARE + 1);
        ck_assert_int_eq(metric("space_e2b_watcher_refusals_total{limit=\"key\"} "), 1);
        ck_assert_int_eq(metric("space_e2b_watcher_keys_at_share "), 1);

        /* A removed watcher gives its unit back. */
        remove_watcher(&A, wa[0]);
        r = (sp_test_http_response){0};
        ck_assert_msg(create_watcher(&A, wa[0], &r) == 200, "A after a removal: %d %s", r.status, r.body);
        sp_test_http_response_free(&r);
        for (int i = 0; i < WATCHERS_SHARE; i++)
                remove_watcher(&A, wa[i]);
        remove_watcher(&B, wb);
        ck_assert_int_eq(metric("space_e2b_watchers "), 0);
}
END_TEST

int main(void)
{
        sp_test_require_root("the worker needs btrfs, namespaces and cgroups");
        sp_test_pg_require();
        Suite *s = suite_create("sec_caps_e2b");
        TCase *tc = tcase_create("caps");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, one_key_at_its_share_leaves_the_others_served);
        tcase_add_test(tc, made_up_keys_share_one_share);
        tcase_add_test(tc, one_key_at_its_watcher_share_leaves_the_others_served);
        tcase_add_test(tc, anonymous_signed_urls_are_bounded);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
