/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Rate limits of the public API (docs/controlplane.md, "Quotas and rate
 * limits"): token buckets per API key, per tenant, and for sandbox creates
 * per tenant (space/ratelimit.h), checked after authentication and before
 * the handler, so that a refused request has done nothing and may be sent
 * again as it was. Each replica keeps its own buckets: with N replicas behind
 * a load balancer a client may get up to N times the rate.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "space/log.h"
#include "space/time.h"

/* The burst of a rate: as set, else twice the rate. */
static double burst_of(int64_t rate, int64_t burst)
{
        return (double)(burst > 0 ? burst : 2 * rate);
}

typedef struct limit {
        int kind; /* CP_RATE_* */
        char key[SP_RATELIMIT_KEY_MAX + 1];
        int64_t rate, burst;
        const char *what; /* for the message */
} limit;

int cp__rate_admit(cp_call *c)
{
        cp_api *api = c->api;
        const cp_api_config *cfg = &api->cfg;
        if (!api->rate)
                return 0;
        limit limits[CP_RATE_KINDS];
        size_t n = 0;
        if (cfg->rate_key_rps > 0 && c->who.key_id[0]) {
                limits[n] =
                        (limit){CP_RATE_KEY, "", cfg->rate_key_rps, cfg->rate_key_burst, "requests of this API key"};
                snprintf(limits[n++].key, sizeof(limits[0].key), "k/%s", c->who.key_id);
        }
        if (cfg->rate_tenant_rps > 0 && c->who.tenant_id[0]) {
                limits[n] = (limit){CP_RATE_TENANT, "", cfg->rate_tenant_rps, cfg->rate_tenant_burst,
                                    "requests of this tenant"};
                snprintf(limits[n++].key, sizeof(limits[0].key), "t/%s", c->who.tenant_id);
        }
        if (cfg->rate_create_rps > 0 && c->who.tenant_id[0] && c->rc->route->handler == cp__h_sandbox_create) {
                limits[n] = (limit){CP_RATE_CREATE, "", cfg->rate_create_rps, cfg->rate_create_burst,
                                    "sandbox creates of this tenant"};
                snprintf(limits[n++].key, sizeof(limits[0].key), "c/%s", c->who.tenant_id);
        }
        int64_t now = sp_now_mono_us();
        for (size_t i = 0; i < n; i++) {
                const limit *l = &limits[i];
                int64_t wait_us = 0;
                if (sp_ratelimit_take(api->rate, l->key, (double)l->rate, burst_of(l->rate, l->burst), now, &wait_us))
                        continue;
                /* Refused: the tokens taken for the other limits go back,
                 * since the request does nothing. */
                for (size_t j = 0; j < i; j++)
                        sp_ratelimit_give(api->rate, limits[j].key, burst_of(limits[j].rate, limits[j].burst));
                api->rate_limited_total[l->kind]++;
                int64_t after = sp_ratelimit_retry_after_s(wait_us);
                char ra[24];
                snprintf(ra, sizeof(ra), "%" PRId64, after);
                sp_http_response_header(c->req, "Retry-After", ra);
                sp_log_debug_kv(SP_KV("tenant_id", c->who.tenant_id, "key_id", c->who.key_id), "rate limited: %s",
                                l->what);
                cp__failf(c, SP_E_LIMIT,
                          "rate limit exceeded: %s, %" PRId64 " a second with a burst of %.0f (on this replica); "
                          "retry after %" PRId64 " s",
                          l->what, l->rate, burst_of(l->rate, l->burst), after);
                return -1;
        }
        return 0;
}
