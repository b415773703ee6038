/* SPDX-License-Identifier: Apache-2.0 */
/* GET /healthz, /readyz and /metrics. */
#include "route/routes.h"
#include "space/buf.h"
#include "space/cleanup.h"

void dp_healthz_handler(sp_http_request *req, void *userdata)
{
        sp_http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

void dp_readyz_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        if (dp_keys_count(d->keys) == 0)
                sp_http_reply_errorf(req, SP_E_UNAVAILABLE, "no token keys yet");
        else if (!d->has_client_cert)
                sp_http_reply_errorf(req, SP_E_UNAVAILABLE, "no client certificate to reach workers with");
        else
                sp_http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

void dp_metrics_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        d->metrics.worker_clients = dp_pool_size(d->pool);
        d->metrics.token_keys = dp_keys_count(d->keys);
        d->metrics.revoked_keys = d->revoked ? dp_revoked_count(d->revoked) : 0;
        d->metrics.revoked_templates = d->revoked ? dp_revoked_templates(d->revoked) : 0;
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        if (dp_metrics_render(&d->metrics, &out, &e) < 0 ||
            sp_shares_render(d->streams, "space_dataplane_stream_refusals_total",
                             "Streams refused, by tenant and by the limit that was reached.", &out, &e) < 0 ||
            dp_pool_render(d->pool, &out, &e) < 0) {
                sp_http_reply_error(req, e);
                return;
        }
        sp_http_reply(req, 200, "text/plain; version=0.0.4", out.data, out.len);
}
