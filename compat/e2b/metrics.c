/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wrapper's counters (see metrics.h), under one lock.
 */
#include "metrics.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"

enum { REASON_UNREACHABLE, REASON_TIMEOUT, REASON_5XX, REASON__MAX };

static const char *const upstream_names[E2B_UPSTREAM__MAX] = {
        [E2B_UPSTREAM_API] = "api",
        [E2B_UPSTREAM_DATAPLANE] = "dataplane",
};
static const char *const reason_names[REASON__MAX] = {
        [REASON_UNREACHABLE] = "unreachable",
        [REASON_TIMEOUT] = "timeout",
        [REASON_5XX] = "status_5xx",
};

typedef struct route_counts {
        char *method, *pattern;
        int status[E2B_METRICS_STATUSES]; /* 0: a free slot */
        uint64_t count[E2B_METRICS_STATUSES];
        uint64_t other; /* statuses past the slots */
} route_counts;

struct e2b_metrics {
        pthread_mutex_t mu;
        route_counts routes[E2B_METRICS_MAX_ROUTES];
        size_t nroutes;
        uint64_t upstream_calls[E2B_UPSTREAM__MAX];
        uint64_t upstream_errors[E2B_UPSTREAM__MAX][REASON__MAX];
};

e2b_metrics *e2b_metrics_new(void)
{
        e2b_metrics *m = calloc(1, sizeof(*m));
        if (!m)
                abort();
        pthread_mutex_init(&m->mu, NULL);
        return m;
}

e2b_metrics *e2b_metrics_free(e2b_metrics *m)
{
        if (!m)
                return NULL;
        for (size_t i = 0; i < m->nroutes; i++) {
                free(m->routes[i].method);
                free(m->routes[i].pattern);
        }
        pthread_mutex_destroy(&m->mu);
        free(m);
        return NULL;
}

int e2b_metrics_route(e2b_metrics *m, const char *method, const char *pattern)
{
        pthread_mutex_lock(&m->mu);
        int r = -1;
        for (size_t i = 0; i < m->nroutes && r < 0; i++)
                if (strcmp(m->routes[i].method, method) == 0 && strcmp(m->routes[i].pattern, pattern) == 0)
                        r = (int)i;
        if (r < 0 && m->nroutes < E2B_METRICS_MAX_ROUTES) {
                route_counts *rc = &m->routes[m->nroutes];
                if (!(rc->method = strdup(method)) || !(rc->pattern = strdup(pattern)))
                        abort();
                r = (int)m->nroutes++;
        }
        pthread_mutex_unlock(&m->mu);
        return r;
}

void e2b_metrics_request(e2b_metrics *m, int route, int status)
{
        if (!m || route < 0)
                return;
        pthread_mutex_lock(&m->mu);
        if ((size_t)route < m->nroutes) {
                route_counts *rc = &m->routes[route];
                size_t i = 0;
                while (i < E2B_METRICS_STATUSES && rc->status[i] && rc->status[i] != status)
                        i++;
                if (i == E2B_METRICS_STATUSES || status <= 0) {
                        rc->other++;
                } else {
                        rc->status[i] = status;
                        rc->count[i]++;
                }
        }
        pthread_mutex_unlock(&m->mu);
}

void e2b_metrics_upstream(e2b_metrics *m, e2b_upstream upstream, int status, const sp_error *e)
{
        if (!m || upstream >= E2B_UPSTREAM__MAX)
                return;
        int reason = -1;
        if (status < 0)
                reason = e && e->code == SP_E_TIMEOUT ? REASON_TIMEOUT : REASON_UNREACHABLE;
        else if (status >= 500)
                reason = REASON_5XX;
        pthread_mutex_lock(&m->mu);
        m->upstream_calls[upstream]++;
        if (reason >= 0)
                m->upstream_errors[upstream][reason]++;
        pthread_mutex_unlock(&m->mu);
}

int e2b_metrics_render(e2b_metrics *m, sp_buf *out, sp_error **err)
{
        pthread_mutex_lock(&m->mu);
        int r = sp_buf_appendf(out, err,
                               "# HELP space_e2b_requests_total Requests answered, by route and status (499: the "
                               "client went away before the answer).\n"
                               "# TYPE space_e2b_requests_total counter\n");
        for (size_t i = 0; r == 0 && i < m->nroutes; i++) {
                const route_counts *rc = &m->routes[i];
                for (size_t k = 0; r == 0 && k < E2B_METRICS_STATUSES && rc->status[k]; k++)
                        r = sp_buf_appendf(out, err,
                                           "space_e2b_requests_total{method=\"%s\",route=\"%s\",status=\"%d\"} %llu\n",
                                           rc->method, rc->pattern, rc->status[k], (unsigned long long)rc->count[k]);
                if (r == 0 && rc->other)
                        r = sp_buf_appendf(out, err,
                                           "space_e2b_requests_total{method=\"%s\",route=\"%s\",status=\"other\"} "
                                           "%llu\n",
                                           rc->method, rc->pattern, (unsigned long long)rc->other);
        }
        if (r == 0)
                r = sp_buf_appendf(out, err,
                                   "# HELP space_e2b_upstream_requests_total Calls made to the public API and the "
                                   "data plane.\n"
                                   "# TYPE space_e2b_upstream_requests_total counter\n");
        for (int u = 0; r == 0 && u < E2B_UPSTREAM__MAX; u++)
                r = sp_buf_appendf(out, err, "space_e2b_upstream_requests_total{upstream=\"%s\"} %llu\n",
                                   upstream_names[u], (unsigned long long)m->upstream_calls[u]);
        if (r == 0)
                r = sp_buf_appendf(out, err,
                                   "# HELP space_e2b_upstream_errors_total Calls to the public API and the data "
                                   "plane that failed: unreachable (no connection, or it broke), timeout, or an "
                                   "answer of 500 and above.\n"
                                   "# TYPE space_e2b_upstream_errors_total counter\n");
        for (int u = 0; r == 0 && u < E2B_UPSTREAM__MAX; u++)
                for (int k = 0; r == 0 && k < REASON__MAX; k++)
                        r = sp_buf_appendf(
                                out, err, "space_e2b_upstream_errors_total{upstream=\"%s\",reason=\"%s\"} %llu\n",
                                upstream_names[u], reason_names[k], (unsigned long long)m->upstream_errors[u][k]);
        pthread_mutex_unlock(&m->mu);
        return r;
}
