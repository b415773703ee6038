/* SPDX-License-Identifier: Apache-2.0 */
/* The data plane's counters in the Prometheus text format. */
#include "metrics/metrics.h"

static const char *const route_names[DP_ROUTE__MAX] = {
        [DP_ROUTE_ATTACH] = "attach",           [DP_ROUTE_STDIN] = "stdin",
        [DP_ROUTE_CLOSE_STDIN] = "close_stdin", [DP_ROUTE_RESIZE] = "resize",
        [DP_ROUTE_SIGNAL] = "signal",           [DP_ROUTE_FILE_GET] = "file_get",
        [DP_ROUTE_FILE_PUT] = "file_put",       [DP_ROUTE_TEMPLATE_PUT] = "template_put",
        [DP_ROUTE_INGRESS] = "ingress",
};

static const char *const refusal_names[DP_REFUSE__MAX] = {
        [DP_REFUSE_MISSING] = "missing",
        [DP_REFUSE_AMBIGUOUS] = "ambiguous",
        [DP_REFUSE_MALFORMED] = "malformed",
        [DP_REFUSE_UNKNOWN_KEY] = "unknown_key",
        [DP_REFUSE_BAD_SIGNATURE] = "bad_signature",
        [DP_REFUSE_EXPIRED] = "expired",
        [DP_REFUSE_NOT_YET_VALID] = "not_yet_valid",
        [DP_REFUSE_CLAIMS] = "claims",
        [DP_REFUSE_ROUTE] = "route",
        [DP_REFUSE_SESSION] = "session",
        [DP_REFUSE_SANDBOX] = "sandbox",
        [DP_REFUSE_TEMPLATE] = "template",
        [DP_REFUSE_PATH] = "path",
        [DP_REFUSE_READ_ONLY] = "read_only",
        [DP_REFUSE_REVOKED] = "revoked",
};

const char *dp_route_name(dp_route r)
{
        return r < DP_ROUTE__MAX ? route_names[r] : "unknown";
}

const char *dp_refusal_name(dp_refusal r)
{
        return r < DP_REFUSE__MAX ? refusal_names[r] : "unknown";
}

void dp_metrics_request(dp_metrics *m, dp_route route, int status)
{
        if (route < DP_ROUTE__MAX && status >= DP_METRICS_STATUS_MIN && status <= DP_METRICS_STATUS_MAX)
                m->requests[route][status - DP_METRICS_STATUS_MIN]++;
}

/* Appends the HELP and TYPE lines of a metric. */
static int describe(sp_buf *out, const char *name, const char *type, const char *help, sp_error **err)
{
        return sp_buf_appendf(out, err, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

int dp_metrics_render(const dp_metrics *m, sp_buf *out, sp_error **err)
{
        int r = describe(out, "space_dataplane_requests_total", "counter", "Requests answered, by route and status.",
                         err);
        for (int i = 0; r == 0 && i < DP_ROUTE__MAX; i++)
                for (int s = 0; r == 0 && s <= DP_METRICS_STATUS_MAX - DP_METRICS_STATUS_MIN; s++)
                        if (m->requests[i][s])
                                r = sp_buf_appendf(out, err,
                                                   "space_dataplane_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                                                   route_names[i], s + DP_METRICS_STATUS_MIN,
                                                   (unsigned long long)m->requests[i][s]);
        const struct {
                const char *name, *type, *help, *labels;
                uint64_t value;
        } plain[] = {
                {"space_dataplane_attach_streams", "gauge", "Attach streams open.", "", m->attach_open},
                {"space_dataplane_worker_streams", "gauge", "Attach streams and transfers holding a worker stream.", "",
                 m->streams_open},
                {"space_dataplane_output_bytes_total", "counter", "Command output sent to clients, by stream.",
                 "{stream=\"stdout\"}", m->output_bytes[0]},
                {"space_dataplane_output_bytes_total", NULL, NULL, "{stream=\"stderr\"}", m->output_bytes[1]},
                {"space_dataplane_stdin_bytes_total", "counter", "Bytes written to command stdin.", "", m->stdin_bytes},
                {"space_dataplane_file_bytes_total", "counter", "File content moved, by direction.",
                 "{direction=\"in\"}", m->file_bytes_in},
                {"space_dataplane_file_bytes_total", NULL, NULL, "{direction=\"out\"}", m->file_bytes_out},
                {"space_dataplane_template_bytes_total", "counter", "Template archive bytes streamed to workers.", "",
                 m->template_bytes_in},
                {"space_dataplane_ingress_bytes_total", "counter",
                 "Bytes relayed to and from servers in sandboxes (ingress), by direction.", "{direction=\"in\"}",
                 m->ingress_bytes_in},
                {"space_dataplane_ingress_bytes_total", NULL, NULL, "{direction=\"out\"}", m->ingress_bytes_out},
                {"space_dataplane_ingress_upgrades_total", "counter",
                 "Ingress connections switched to another protocol (WebSockets).", "", m->ingress_upgrades},
                {"space_dataplane_ingress_upgraded", "gauge", "Upgraded ingress connections open.", "",
                 m->ingress_upgrades - m->ingress_upgrades_closed},
                {"space_dataplane_ingress_upgrades_ended_total", "counter",
                 "Upgraded ingress connections the data plane closed: their token's API key was revoked, or their "
                 "public sandbox switched to token.",
                 "", m->ingress_upgrades_ended},
                {"space_dataplane_ingress_no_listener_total", "counter",
                 "Ingress requests answered 502: nothing listened on the port in the sandbox.", "",
                 m->ingress_no_listener},
                {"space_dataplane_ingress_wakes_total", "counter",
                 "Ingress requests that asked to wake their paused or suspended sandbox (auto_resume; requests "
                 "arriving together share one wake).",
                 "", m->ingress_wakes},
                {"space_dataplane_ingress_wake_timeouts_total", "counter",
                 "Ingress requests answered 504: their sandbox did not wake within --ingress-wake-ms.", "",
                 m->ingress_wake_timeouts},
                {"space_dataplane_worker_errors_total", "counter",
                 "Worker calls that could not reach the worker or lost it.", "", m->worker_errors},
                {"space_dataplane_worker_clients", "gauge", "RPC clients held, one per worker address.", "",
                 m->worker_clients},
                {"space_dataplane_token_keys", "gauge", "Public keys that verify attachment tokens.", "",
                 m->token_keys},
                {"space_dataplane_revoked_keys", "gauge", "Revoked API keys whose tokens are refused.", "",
                 m->revoked_keys},
                {"space_dataplane_revoked_templates", "gauge", "Deleted templates whose upload tokens are refused.", "",
                 m->revoked_templates},
        };
        for (size_t i = 0; r == 0 && i < sizeof(plain) / sizeof(plain[0]); i++) {
                if (plain[i].type)
                        r = describe(out, plain[i].name, plain[i].type, plain[i].help, err);
                if (r == 0)
                        r = sp_buf_appendf(out, err, "%s%s %llu\n", plain[i].name, plain[i].labels,
                                           (unsigned long long)plain[i].value);
        }
        if (r == 0)
                r = describe(out, "space_dataplane_token_refusals_total", "counter",
                             "Requests refused for their token, by reason.", err);
        for (int i = 0; r == 0 && i < DP_REFUSE__MAX; i++)
                r = sp_buf_appendf(out, err, "space_dataplane_token_refusals_total{reason=\"%s\"} %llu\n",
                                   refusal_names[i], (unsigned long long)m->refusals[i]);
        return r;
}
