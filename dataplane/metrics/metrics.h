/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data plane's counters, rendered as Prometheus text for /metrics
 * (proto/spec/dataplane.md, "Operations"): requests by route and status,
 * attach streams open, output bytes by stream, stdin bytes, file bytes in and
 * out, template archive bytes in, token refusals by reason, worker
 * connection errors. Labels are fixed
 * names, never anything a client sent (and never a token).
 * Plain counters on the daemon's event loop: not thread-safe.
 */
#ifndef DP_METRICS_H
#define DP_METRICS_H

#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

typedef enum dp_route {
        DP_ROUTE_ATTACH,
        DP_ROUTE_STDIN,
        DP_ROUTE_CLOSE_STDIN,
        DP_ROUTE_RESIZE,
        DP_ROUTE_SIGNAL,
        DP_ROUTE_FILE_GET,
        DP_ROUTE_FILE_PUT,
        DP_ROUTE_TEMPLATE_PUT,
        DP_ROUTE_INGRESS, /* requests to a sandbox's ports, both forms */
        DP_ROUTE__MAX
} dp_route;

/* Why a token was refused; the label of space_dataplane_token_refusals_total. */
typedef enum dp_refusal {
        DP_REFUSE_MISSING,
        DP_REFUSE_AMBIGUOUS, /* header and query parameter at once, or the parameter twice */
        DP_REFUSE_MALFORMED,
        DP_REFUSE_UNKNOWN_KEY,
        DP_REFUSE_BAD_SIGNATURE,
        DP_REFUSE_EXPIRED,
        DP_REFUSE_NOT_YET_VALID,
        DP_REFUSE_CLAIMS, /* verified, but the claims are not what a data-plane token holds */
        DP_REFUSE_ROUTE,
        DP_REFUSE_SESSION,
        DP_REFUSE_SANDBOX,
        DP_REFUSE_TEMPLATE,
        DP_REFUSE_PATH,
        DP_REFUSE_READ_ONLY,
        DP_REFUSE_REVOKED, /* minted by an API key revoked since */
        DP_REFUSE__MAX
} dp_refusal;

/* HTTP statuses are counted per route in buckets 100..599. */
#define DP_METRICS_STATUS_MIN 100
#define DP_METRICS_STATUS_MAX 599

typedef struct dp_metrics {
        uint64_t requests[DP_ROUTE__MAX][DP_METRICS_STATUS_MAX - DP_METRICS_STATUS_MIN + 1];
        uint64_t attach_open; /* gauge */
        uint64_t streams_open; /* gauge: attach streams and transfers holding a worker stream */
        uint64_t output_bytes[2]; /* stdout, stderr: output bytes sent to clients */
        uint64_t stdin_bytes;
        uint64_t file_bytes_in, file_bytes_out;
        uint64_t template_bytes_in; /* template archives streamed to workers */
        uint64_t ingress_bytes_in, ingress_bytes_out; /* to and from servers in sandboxes */
        uint64_t ingress_upgrades, ingress_upgrades_closed; /* WebSockets (101) relayed; open = the difference */
        uint64_t ingress_upgrades_ended; /* of those, closed by the data plane: their access ended */
        uint64_t ingress_no_listener; /* 502: nothing listened on the port */
        uint64_t ingress_wakes; /* requests that asked the control plane to wake their sandbox */
        uint64_t ingress_wake_timeouts; /* of requests waiting for a sandbox to wake: answered 504 */
        uint64_t refusals[DP_REFUSE__MAX];
        uint64_t worker_errors; /* calls that could not reach a worker or lost it */
        uint64_t worker_clients; /* gauge: RPC clients held (one per worker address) */
        uint64_t token_keys; /* gauge */
        uint64_t revoked_keys; /* gauge: revoked API keys known */
        uint64_t revoked_templates; /* gauge: deleted templates known */
} dp_metrics;

/* Route and refusal names as they appear in labels and logs. */
const char *dp_route_name(dp_route r);
const char *dp_refusal_name(dp_refusal r);

/* Counts one answered request (statuses outside 100-599 are not counted). */
void dp_metrics_request(dp_metrics *m, dp_route route, int status);

/* Appends the Prometheus text exposition of every counter to out. */
int dp_metrics_render(const dp_metrics *m, sp_buf *out, sp_error **err);

#endif
