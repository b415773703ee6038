/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wrapper's own counters for /metrics (docs/e2b.md, "Metrics"):
 * requests answered by route and status, and the calls it made to the
 * public API and the data plane with their errors. The bounds on calls and
 * watchers are counted by caps.h.
 *
 * Labels are fixed names (a route's method and pattern as registered, a
 * status number, an upstream and a reason), never anything a client sent.
 *
 * Thread-safe: routes are added on the loop before serving; counting and
 * rendering may happen on any thread (one lock).
 */
#ifndef E2B_METRICS_H
#define E2B_METRICS_H

#include <stddef.h>

#include "space/buf.h"
#include "space/error.h"

#define E2B_METRICS_MAX_ROUTES 64
#define E2B_METRICS_STATUSES 16 /* distinct statuses kept per route; more count as status="other" */
/* The status counted for a request whose client went away before it was
 * answered (nginx's "client closed request"). */
#define E2B_METRICS_CLIENT_GONE 499

typedef struct e2b_metrics e2b_metrics;

/* What the wrapper calls. */
typedef enum e2b_upstream {
        E2B_UPSTREAM_API, /* the public API */
        E2B_UPSTREAM_DATAPLANE, /* the data plane (attach streams, files, stdin) */
        E2B_UPSTREAM__MAX,
} e2b_upstream;

/* New counters, all zero. Allocation failure aborts. */
e2b_metrics *e2b_metrics_new(void);
/* Accepts NULL; returns NULL. */
e2b_metrics *e2b_metrics_free(e2b_metrics *m);

/* Registers a route (method and pattern are copied) and returns its index
 * for e2b_metrics_request(), or -1 past E2B_METRICS_MAX_ROUTES (its requests
 * are then not counted). The same method and pattern twice give the same
 * index. */
int e2b_metrics_route(e2b_metrics *m, const char *method, const char *pattern);

/* Counts one request of route answered with status (E2B_METRICS_CLIENT_GONE
 * when its client left first). m NULL or route < 0: nothing. */
void e2b_metrics_request(e2b_metrics *m, int route, int status);

/* Counts one call to upstream: status is its answer's HTTP status, or < 0
 * when there was none, e saying why (SP_E_TIMEOUT: a wait ran out; anything
 * else: it could not be reached or the connection broke). Answers 500 and
 * above count as errors too. m NULL: nothing. */
void e2b_metrics_upstream(e2b_metrics *m, e2b_upstream upstream, int status, const sp_error *e);

/* Appends the Prometheus text: space_e2b_requests_total{method,route,status},
 * space_e2b_upstream_requests_total{upstream} and
 * space_e2b_upstream_errors_total{upstream,reason} (reason "unreachable",
 * "timeout" or "status_5xx"). */
int e2b_metrics_render(e2b_metrics *m, sp_buf *out, sp_error **err);

#endif
