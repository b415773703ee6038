/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rate limits of the public API on a real control plane (a real PostgreSQL;
 * no workers: creates are recorded and wait to be placed). Replica 0 runs
 * without limits and sets things up; replica 1 runs with
 * --rate-key-rps=1 --rate-key-burst=3, --rate-tenant-rps=1
 * --rate-tenant-burst=5 and --rate-create-rps=1 --rate-create-burst=2:
 *
 * - one key gets its burst, then 429 resource_exhausted with Retry-After
 *   naming the key's limit; a request after that wait is served;
 * - a second key of the same tenant gets what is left of the tenant's
 *   burst, then 429 naming the tenant's limit; another tenant is not
 *   affected;
 * - sandbox creates have their own, smaller, limit;
 * - a refused request did nothing (no sandbox, operation or audit row), and
 *   every refusal is counted in /metrics by limit;
 * - spacectl, sent a 429 with Retry-After, waits and sends the request
 *   again, and succeeds.
 *
 * The tests count requests until the first refusal instead of timing them:
 * a bucket refills at one token a second, so on a slow machine a refusal may
 * come later than the burst, never earlier.
 *
 * Needs PostgreSQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"
#include "test_spacectl_util.h"

#define MAX_TRIES 200

/* Audit records of what was done: where records carry an outcome (refused
 * calls are recorded too), those that succeeded. */
#define DONE "coalesce(to_jsonb(a)->>'outcome', 'ok') = 'ok'"

static sp_test_space S;
static char *dir;
static const char *rate_args[] = {"--rate-key-rps=1",
                                  "--rate-key-burst=3",
                                  "--rate-tenant-rps=1",
                                  "--rate-tenant-burst=5",
                                  "--rate-create-rps=1",
                                  "--rate-create-burst=2",
                                  NULL};

static void cluster_up(void)
{
        sp_error *e = NULL;
        sp_test_space_opts o = {.workers = 0};
        sp_test_space_up(&S, &o);
        S.opts.cp_args = rate_args;
        sp_test_ok(sp_test_space_start_cp(&S, 1, &e), &e);
        dir = sp_test_tmpdir("ratelimit");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/spacectl.json", dir);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

typedef struct tenant {
        char id[64];
        char key[256];
} tenant;

/* A new key of tenant_id (through replica 0, which has no limits) into t. */
static void new_key_for(tenant *t, const char *tenant_id)
{
        char body[200];
        snprintf(body, sizeof(body), "{\"name\":\"k\",\"tenant_id\":\"%s\"}", tenant_id);
        _cleanup_json_ json_object *k = sp_test_api(&S, S.admin_key, "POST", "/v1/keys", 201, body, NULL);
        snprintf(t->id, sizeof(t->id), "%s", tenant_id);
        snprintf(t->key, sizeof(t->key), "%s", sp_test_jstr(k, "secret"));
}

static void new_tenant(const char *name, tenant *t)
{
        char body[200];
        snprintf(body, sizeof(body), "{\"name\":\"%s-%d\"}", name, (int)getpid());
        _cleanup_json_ json_object *r = sp_test_api(&S, S.admin_key, "POST", "/v1/tenants", 201, body, NULL);
        new_key_for(t, sp_test_jstr(r, "id"));
}

/* A call to the rate-limited replica. */
static void call(const char *key, const char *method, const char *path, const char *body, sp_test_http_response *ret)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        const char *h[] = {auth, NULL};
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api_port[1], method, path, h, body, 30000, ret, &e), &e);
}

/* Sends method path as key until the first 429, which it returns in *ret;
 * the number of requests served before it. */
static int until_refused(const char *key, const char *method, const char *path, const char *body,
                         sp_test_http_response *ret)
{
        for (int served = 0; served < MAX_TRIES; served++) {
                sp_test_http_response r = {0};
                call(key, method, path, body, &r);
                if (r.status == 429) {
                        *ret = r;
                        return served;
                }
                ck_assert_msg(r.status / 100 == 2, "%s %s: %d %s", method, path, r.status, r.body);
                sp_test_http_response_free(&r);
        }
        ck_abort_msg("%s %s was never refused in %d requests", method, path, MAX_TRIES);
        return -1;
}

/* The Retry-After of a 429, asserted to be whole seconds >= 1. */
static int retry_after(const sp_test_http_response *r)
{
        const char *h = strcasestr(r->headers, "\r\nRetry-After: ");
        ck_assert_msg(h, "no Retry-After in %s", r->headers);
        int s = atoi(h + strlen("\r\nRetry-After: "));
        ck_assert_int_ge(s, 1);
        return s;
}

static void says(const sp_test_http_response *r, const char *what)
{
        ck_assert_int_eq(r->status, 429);
        _cleanup_json_ json_object *o = sp_test_http_json(r);
        ck_assert_str_eq(sp_test_jstr(o, "error.code"), "resource_exhausted");
        ck_assert_msg(strstr(sp_test_jstr(o, "error.message"), what), "want '%s' in %s", what, r->body);
}

static int64_t limited(const char *limit)
{
        _cleanup_(sp_test_http_response_free) sp_test_http_response r = {0};
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api_port[1], "GET", "/metrics", NULL, NULL, 10000, &r, &e), &e);
        char prefix[96];
        snprintf(prefix, sizeof(prefix), "space_api_rate_limited_total{limit=\"%s\"} ", limit);
        const char *p = strstr(r.body, prefix);
        ck_assert_msg(p, "no %s in /metrics", prefix);
        return strtoll(p + strlen(prefix), NULL, 10);
}

static int64_t count(const tenant *t, const char *sql)
{
        const char *p[] = {t->id};
        _cleanup_free_ char *v = sp_test_space_sql(&S, sql, 1, p);
        return strtoll(v, NULL, 10);
}

START_TEST(a_key_past_its_rate_waits_retry_after)
{
        tenant t;
        new_tenant("rl-key", &t);
        int64_t before = limited("key");
        _cleanup_(sp_test_http_response_free) sp_test_http_response r = {0};
        int served = until_refused(t.key, "GET", "/v1/sandboxes", NULL, &r);
        ck_assert_int_ge(served, 3); /* the burst, at least */
        says(&r, "requests of this API key");
        ck_assert_int_eq(limited("key"), before + 1);
        /* After the wait it asks for, the same request is served. */
        sleep((unsigned)retry_after(&r));
        _cleanup_(sp_test_http_response_free) sp_test_http_response again = {0};
        call(t.key, "GET", "/v1/sandboxes", NULL, &again);
        ck_assert_int_eq(again.status, 200);
        /* The replica without limits serves the same key meanwhile. */
        json_object_put(sp_test_api(&S, t.key, "GET", "/v1/sandboxes", 200, NULL, NULL));
}
END_TEST

/* An admin route refused to a tenant's key (403, recorded in the audit log) counts against its rate
 * like any call: a flood of refusals is cut off with 429 too. */
START_TEST(refused_admin_calls_count_against_the_rate)
{
        tenant t;
        new_tenant("rl-admin", &t);
        int refused = 0, limited_at = -1;
        for (int i = 0; i < MAX_TRIES && limited_at < 0; i++) {
                sp_test_http_response r = {0};
                call(t.key, "GET", "/v1/workers", NULL, &r);
                if (r.status == 429)
                        limited_at = i;
                else
                        ck_assert_msg(r.status == 403, "GET /v1/workers as a tenant: %d %s", r.status, r.body);
                refused += r.status == 403;
                sp_test_http_response_free(&r);
        }
        ck_assert_msg(limited_at >= 3, "refused admin calls were never rate-limited (%d refused)", refused);
}
END_TEST

START_TEST(keys_of_a_tenant_share_its_rate)
{
        tenant a, b, other;
        new_tenant("rl-tenant", &a);
        new_key_for(&b, a.id);
        new_tenant("rl-other", &other);
        int64_t before = limited("tenant");
        _cleanup_(sp_test_http_response_free) sp_test_http_response r1 = {0}, r2 = {0};
        int first = until_refused(a.key, "GET", "/v1/templates", NULL, &r1);
        says(&r1, "requests of this API key");
        /* b gets what its tenant has left (5 in all), then the tenant's refusal. */
        int second = until_refused(b.key, "GET", "/v1/templates", NULL, &r2);
        ck_assert_int_ge(first + second, 5);
        says(&r2, "requests of this tenant");
        retry_after(&r2);
        ck_assert_int_eq(limited("tenant"), before + 1);
        /* Another tenant has its own buckets. */
        _cleanup_(sp_test_http_response_free) sp_test_http_response o = {0};
        call(other.key, "GET", "/v1/templates", NULL, &o);
        ck_assert_int_eq(o.status, 200);
}
END_TEST

START_TEST(creates_have_their_own_rate_and_a_refusal_does_nothing)
{
        tenant t;
        new_tenant("rl-create", &t);
        int64_t before = limited("create");
        static const char body[] = "{\"template\":\"base\",\"resources\":{\"memory_mb\":32,\"cpu_millis\":100}}";
        _cleanup_(sp_test_http_response_free) sp_test_http_response r = {0};
        int served = until_refused(t.key, "POST", "/v1/sandboxes", body, &r);
        ck_assert_int_ge(served, 2);
        /* Whichever limit refused it (the creates', or the key's when the
         * machine is slow), it did nothing. */
        ck_assert_int_eq(count(&t, "SELECT count(*) FROM sandboxes WHERE tenant_id = $1"), served);
        ck_assert_int_eq(count(&t, "SELECT count(*) FROM operations WHERE tenant_id = $1"), served);
        ck_assert_int_eq(
                count(&t,
                      "SELECT count(*) FROM audit_log a WHERE tenant_id = $1 AND action = 'sandbox.create' AND " DONE),
                served);
        if (strstr(r.body, "sandbox creates of this tenant"))
                ck_assert_int_eq(limited("create"), before + 1);
        else
                says(&r, "requests of this API key");
        /* Reads are not creates: served after the wait, while creates are limited on their own. */
        sleep((unsigned)retry_after(&r));
        _cleanup_(sp_test_http_response_free) sp_test_http_response list = {0};
        call(t.key, "GET", "/v1/sandboxes", NULL, &list);
        ck_assert_int_eq(list.status, 200);
}
END_TEST

START_TEST(spacectl_waits_out_a_rate_limit)
{
        tenant t;
        new_tenant("rl-ctl", &t);
        char endpoint[128], key[300];
        snprintf(endpoint, sizeof(endpoint), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api_port[1]);
        snprintf(key, sizeof(key), "SPACE_API_KEY=%s", t.key);
        const char *env[] = {endpoint, key, NULL};
        int64_t before = limited("key") + limited("tenant");
        /* Empty the key's bucket, then ask through spacectl. */
        _cleanup_(sp_test_http_response_free) sp_test_http_response r = {0};
        until_refused(t.key, "GET", "/v1/sandboxes", NULL, &r);
        _cleanup_ctl_result_ ctl_result out = ctl_run(env, NULL, "tenant", "usage", "--json", NULL);
        ck_assert_msg(out.code == 0, "spacectl: %d %s", out.code, out.err.data);
        ck_assert_msg(strstr(out.err.data, "rate limited by the API; retrying in"), "%s", out.err.data);
        _cleanup_json_ json_object *u = NULL;
        sp_error *e = NULL;
        sp_test_ok(sp_json_parse(out.out.data, out.out.len, &u, &e), &e);
        ck_assert_str_eq(sp_test_jstr(u, "tenant_id"), t.id);
        ck_assert_str_eq(sp_test_jstr(u, "rate_limits.key_requests.per_second"), "1");
        /* The refusal before, and at least one that spacectl waited out. */
        ck_assert_int_ge(limited("key") + limited("tenant"), before + 2);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_ratelimit");
        TCase *tc = tcase_create("ratelimit");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, a_key_past_its_rate_waits_retry_after);
        tcase_add_test(tc, refused_admin_calls_count_against_the_rate);
        tcase_add_test(tc, keys_of_a_tenant_share_its_rate);
        tcase_add_test(tc, creates_have_their_own_rate_and_a_refusal_does_nothing);
        tcase_add_test(tc, spacectl_waits_out_a_rate_limit);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the cluster harness runs as root");
        sp_test_pg_require();
        return sp_test_main(suite());
}
