/* SPDX-License-Identifier: Apache-2.0 */
/* RPC clients by worker address: the shared pool, with the data plane's words and metric. */
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/shares.h"
#include "workers/pool.h"

dp_pool *dp_pool_new(struct event_base *base, SSL_CTX *ctx, size_t max, sp_error **err)
{
        dp_pool *p = sp_rpc_pool_new(base, ctx, max, err);
        if (p)
                sp_rpc_pool_set_shares(p, 0, 0);
        return p;
}

void dp_pool_set_stream_shares(dp_pool *p, size_t streams, size_t per_tenant)
{
        sp_rpc_pool_set_shares(p, streams, per_tenant);
}

void dp_pool_free(dp_pool *p)
{
        sp_rpc_pool_free(p);
}

sp_rpc_client *dp_pool_get(dp_pool *p, const char *addr, sp_error **err)
{
        return sp_rpc_pool_get(p, addr, addr, NULL, err);
}

int dp_pool_take(dp_pool *p, const char *addr, const char *tenant, sp_error **err)
{
        _cleanup_error_ sp_error *refused = NULL;
        if (sp_rpc_pool_take(p, addr, addr, tenant, "streams to this worker", &refused) == 0)
                return 0;
        /* sp_shares words its refusals for a whole server; say which bound it is. */
        sp_shares *streams = sp_rpc_pool_shares(p, addr);
        if (streams && refused->code == SP_E_LIMIT && sp_shares_used_by(streams, tenant) >= sp_shares_per_key(streams))
                return sp_error_set(err, SP_E_LIMIT,
                                    "this tenant holds %zu streams to this worker already, the share of streams to "
                                    "this worker per tenant: wait until one ends",
                                    sp_shares_per_key(streams));
        if (streams && refused->code == SP_E_UNAVAILABLE)
                return sp_error_set(err, SP_E_UNAVAILABLE,
                                    "the connection to this worker carries %zu streams already: try again later",
                                    sp_shares_total(streams));
        return sp_error_set(err, refused->code, "%s", refused->message);
}

void dp_pool_give(dp_pool *p, const char *addr, const char *tenant)
{
        /* No entry: the pool is being freed (its calls end as it closes them). */
        sp_rpc_pool_give(p, addr, tenant);
}

typedef struct render_ctx {
        const char *worker;
        sp_buf *out;
        sp_error **err;
        int r;
} render_ctx;

static void render_one(const char *key, uint64_t share, uint64_t total, void *userdata)
{
        render_ctx *x = userdata;
        char worker[256], tenant[SP_SHARES_KEY_MAX + 1];
        sp_shares_label(worker, sizeof(worker), x->worker);
        sp_shares_label(tenant, sizeof(tenant), key);
        static const char name[] = "space_dataplane_worker_stream_refusals_total";
        if (x->r == 0 && share)
                x->r = sp_buf_appendf(x->out, x->err, "%s{worker=\"%s\",tenant=\"%s\",limit=\"tenant\"} %llu\n", name,
                                      worker, tenant, (unsigned long long)share);
        if (x->r == 0 && total)
                x->r = sp_buf_appendf(x->out, x->err, "%s{worker=\"%s\",tenant=\"%s\",limit=\"total\"} %llu\n", name,
                                      worker, tenant, (unsigned long long)total);
}

static void render_entry(const char *key, const char *addr, sp_rpc_client *cli, sp_shares *shares, void *userdata)
{
        (void)addr;
        (void)cli;
        render_ctx *x = userdata;
        x->worker = key;
        if (x->r == 0 && shares)
                sp_shares_refusals(shares, render_one, x);
}

int dp_pool_render(dp_pool *p, sp_buf *out, sp_error **err)
{
        render_ctx x = {.out = out, .err = err};
        x.r = sp_buf_appendf(out, err,
                             "# HELP space_dataplane_worker_stream_refusals_total Streamed calls refused by the "
                             "share of one worker connection's streams, by worker, tenant and the limit reached.\n"
                             "# TYPE space_dataplane_worker_stream_refusals_total counter\n");
        if (x.r == 0)
                sp_rpc_pool_foreach(p, render_entry, &x);
        return x.r;
}

size_t dp_pool_size(const dp_pool *p)
{
        return sp_rpc_pool_size(p);
}
