/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: space-e2b's own counters (compat/e2b/metrics.h). Requests are
 * counted by route (method and pattern, once per pair) and exact status,
 * with the statuses past a route's slots as status="other", a client gone
 * before its answer as 499, nothing for an unknown route; calls to the API
 * and the data plane are counted, and their errors by reason (a wait that
 * ran out, no connection, an answer of 500 and above; a 4xx is no error).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "metrics.h"
#include "space/cleanup.h"

/* The rendered text of m. */
static char *render(e2b_metrics *m)
{
        sp_buf out = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(e2b_metrics_render(m, &out, &e), 0);
        sp_buf_append(&out, "", 1, NULL);
        return out.data;
}

/* The value of the line "name value", or -1. */
static long long value(const char *text, const char *name)
{
        size_t n = strlen(name);
        for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (strncmp(l, name, n) == 0 && l[n] == ' ')
                        return strtoll(l + n + 1, NULL, 10);
        return -1;
}

START_TEST(requests_by_route_and_status)
{
        e2b_metrics *m = e2b_metrics_new();
        int create = e2b_metrics_route(m, "POST", "/sandboxes");
        int health = e2b_metrics_route(m, "GET", "/health");
        ck_assert_int_ge(create, 0);
        ck_assert_int_ne(create, health);
        ck_assert_int_eq(e2b_metrics_route(m, "POST", "/sandboxes"), create);
        e2b_metrics_request(m, create, 201);
        e2b_metrics_request(m, create, 201);
        e2b_metrics_request(m, create, 400);
        e2b_metrics_request(m, health, E2B_METRICS_CLIENT_GONE);
        e2b_metrics_request(m, -1, 200); /* a route not counted */
        e2b_metrics_request(NULL, create, 200);
        /* Past the slots of a route: "other". */
        for (int s = 200; s < 200 + E2B_METRICS_STATUSES + 3; s++)
                e2b_metrics_request(m, health, s);
        _cleanup_free_ char *text = render(m);
        ck_assert_int_eq(value(text, "space_e2b_requests_total{method=\"POST\",route=\"/sandboxes\",status=\"201\"}"),
                         2);
        ck_assert_int_eq(value(text, "space_e2b_requests_total{method=\"POST\",route=\"/sandboxes\",status=\"400\"}"),
                         1);
        ck_assert_int_eq(value(text, "space_e2b_requests_total{method=\"POST\",route=\"/sandboxes\",status=\"200\"}"),
                         -1);
        ck_assert_int_eq(value(text, "space_e2b_requests_total{method=\"GET\",route=\"/health\",status=\"499\"}"), 1);
        ck_assert_int_eq(value(text, "space_e2b_requests_total{method=\"GET\",route=\"/health\",status=\"other\"}"), 4);
        ck_assert_ptr_nonnull(strstr(text, "# TYPE space_e2b_requests_total counter\n"));
        /* At most E2B_METRICS_MAX_ROUTES routes; past them, not counted. */
        for (int i = 2; i < E2B_METRICS_MAX_ROUTES; i++) {
                char p[32];
                snprintf(p, sizeof(p), "/r%d", i);
                ck_assert_int_eq(e2b_metrics_route(m, "GET", p), i);
        }
        ck_assert_int_eq(e2b_metrics_route(m, "GET", "/one-too-many"), -1);
        e2b_metrics_free(m);
}
END_TEST

START_TEST(upstream_calls_and_errors)
{
        e2b_metrics *m = e2b_metrics_new();
        sp_error *timeout = NULL, *down = NULL;
        sp_error_set(&timeout, SP_E_TIMEOUT, "timed out");
        sp_error_set(&down, SP_E_UNAVAILABLE, "connection refused");
        e2b_metrics_upstream(m, E2B_UPSTREAM_API, 200, NULL);
        e2b_metrics_upstream(m, E2B_UPSTREAM_API, 404, NULL);
        e2b_metrics_upstream(m, E2B_UPSTREAM_API, 503, NULL);
        e2b_metrics_upstream(m, E2B_UPSTREAM_API, -1, timeout);
        e2b_metrics_upstream(m, E2B_UPSTREAM_API, -1, down);
        e2b_metrics_upstream(m, E2B_UPSTREAM_DATAPLANE, -1, NULL);
        e2b_metrics_upstream(NULL, E2B_UPSTREAM_API, 500, NULL);
        sp_error_free(timeout);
        sp_error_free(down);
        _cleanup_free_ char *text = render(m);
        ck_assert_int_eq(value(text, "space_e2b_upstream_requests_total{upstream=\"api\"}"), 5);
        ck_assert_int_eq(value(text, "space_e2b_upstream_requests_total{upstream=\"dataplane\"}"), 1);
        ck_assert_int_eq(value(text, "space_e2b_upstream_errors_total{upstream=\"api\",reason=\"timeout\"}"), 1);
        ck_assert_int_eq(value(text, "space_e2b_upstream_errors_total{upstream=\"api\",reason=\"unreachable\"}"), 1);
        ck_assert_int_eq(value(text, "space_e2b_upstream_errors_total{upstream=\"api\",reason=\"status_5xx\"}"), 1);
        ck_assert_int_eq(value(text, "space_e2b_upstream_errors_total{upstream=\"dataplane\",reason=\"unreachable\"}"),
                         1);
        ck_assert_int_eq(value(text, "space_e2b_upstream_errors_total{upstream=\"dataplane\",reason=\"status_5xx\"}"),
                         0);
        e2b_metrics_free(m);
        ck_assert_ptr_null(e2b_metrics_free(NULL));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_metrics");
        TCase *tc = tcase_create("metrics");
        tcase_add_test(tc, requests_by_route_and_status);
        tcase_add_test(tc, upstream_calls_and_errors);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
