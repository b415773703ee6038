/* SPDX-License-Identifier: Apache-2.0 */
/* RPC clients by worker address: the shared pool, with the data plane's words and metric. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/shares.h"
#include "space/tls.h"
#include "workers/pool.h"

/* The pool's key of a worker: its address, or "name@address" when the
 * token (or ResolveSandbox) names it, so that a client is made for the name
 * it will be checked against. */
#define KEY_MAX (64 + 262 + 1) /* a name, "@" and an address (DP_CLAIM_WORKER_MAX) */
static const char *key_of(const char *addr, const char *name, char out[static KEY_MAX])
{
        if (!name || !*name)
                return addr;
        snprintf(out, KEY_MAX, "%s@%s", name, addr);
        return out;
}

/* After the handshake (the chain and the worker role checked by the TLS
 * context): the certificate must name the worker the token names. */
static int verify_name(SSL *ssl, const char *key, void *userdata, sp_error **err)
{
        (void)userdata;
        const char *at = strchr(key, '@');
        if (!at)
                return 0; /* a token of an older control plane: the role only */
        _cleanup_free_ char *peer = NULL;
        if (sp_tls_peer_identity(ssl, NULL, &peer, err) < 0)
                return -SP_E_PERMISSION;
        if (strlen(peer) != (size_t)(at - key) || memcmp(peer, key, (size_t)(at - key)) != 0)
                return sp_error_set(err, SP_E_PERMISSION, "the server at %.261s is worker '%.63s', not '%.*s'", at + 1,
                                    peer, (int)(at - key), key);
        return 0;
}

dp_pool *dp_pool_new(struct event_base *base, SSL_CTX *ctx, size_t max, sp_error **err)
{
        dp_pool *p = sp_rpc_pool_new(base, ctx, max, err);
        if (p) {
                sp_rpc_pool_set_shares(p, 0, 0);
                sp_rpc_pool_set_verify(p, verify_name, NULL);
        }
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

sp_rpc_client *dp_pool_get(dp_pool *p, const char *addr, const char *name, sp_error **err)
{
        char key[KEY_MAX];
        return sp_rpc_pool_get(p, key_of(addr, name, key), addr, NULL, err);
}

int dp_pool_take(dp_pool *p, const char *addr, const char *name, const char *tenant, sp_error **err)
{
        char kb[KEY_MAX];
        const char *key = key_of(addr, name, kb);
        _cleanup_error_ sp_error *refused = NULL;
        if (sp_rpc_pool_take(p, key, addr, tenant, "streams to this worker", &refused) == 0)
                return 0;
        /* sp_shares words its refusals for a whole server; say which bound it is. */
        sp_shares *streams = sp_rpc_pool_shares(p, key);
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

void dp_pool_give(dp_pool *p, const char *addr, const char *name, const char *tenant)
{
        char key[KEY_MAX];
        /* No entry: the pool is being freed (its calls end as it closes them). */
        sp_rpc_pool_give(p, key_of(addr, name, key), tenant);
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
        (void)key;
        (void)cli;
        render_ctx *x = userdata;
        x->worker = addr;
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
