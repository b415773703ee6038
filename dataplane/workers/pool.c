/* SPDX-License-Identifier: Apache-2.0 */
/* RPC clients by worker address, least recently used first out. */
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "space/shares.h"
#include "workers/pool.h"

typedef struct entry {
        char *addr;
        sp_rpc_client *cli;
        sp_shares *streams; /* the connection's streams, shared out per tenant */
        struct entry *prev, *next; /* most recently used first */
} entry;

struct dp_pool {
        struct event_base *base;
        SSL_CTX *ctx;
        size_t max, n;
        size_t streams, streams_per_tenant; /* the bounds of each new entry's shares */
        entry *head, *tail;
};

dp_pool *dp_pool_new(struct event_base *base, SSL_CTX *ctx, size_t max, sp_error **err)
{
        dp_pool *p = calloc(1, sizeof(*p));
        if (!p) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        p->base = base;
        p->max = max ? max : 1;
        p->streams = SP_RPC_MAX_CONCURRENT_STREAMS;
        if (ctx) {
                SSL_CTX_up_ref(ctx);
                p->ctx = ctx;
        }
        return p;
}

void dp_pool_set_stream_shares(dp_pool *p, size_t streams, size_t per_tenant)
{
        p->streams = streams && streams < SP_RPC_MAX_CONCURRENT_STREAMS ? streams : SP_RPC_MAX_CONCURRENT_STREAMS;
        p->streams_per_tenant = per_tenant < p->streams ? per_tenant : p->streams;
}

static void unlink_entry(dp_pool *p, entry *e)
{
        if (e->prev)
                e->prev->next = e->next;
        else
                p->head = e->next;
        if (e->next)
                e->next->prev = e->prev;
        else
                p->tail = e->prev;
        e->prev = e->next = NULL;
}

static void push_front(dp_pool *p, entry *e)
{
        e->next = p->head;
        if (p->head)
                p->head->prev = e;
        p->head = e;
        if (!p->tail)
                p->tail = e;
}

static void entry_free(dp_pool *p, entry *e)
{
        unlink_entry(p, e);
        sp_rpc_client_free(e->cli);
        sp_shares_free(e->streams);
        free(e->addr);
        free(e);
        p->n--;
}

void dp_pool_free(dp_pool *p)
{
        if (!p)
                return;
        while (p->head)
                entry_free(p, p->head);
        if (p->ctx)
                SSL_CTX_free(p->ctx);
        free(p);
}

/* A connection whose streams are held stays, even between the calls of one
 * transfer (an attach looks the session up before its stream starts). */
static bool busy(const entry *e)
{
        sp_rpc_client_stats st;
        sp_rpc_client_get_stats(e->cli, &st);
        return st.calls_open > 0 || sp_shares_used(e->streams) > 0;
}

static entry *find(dp_pool *p, const char *addr)
{
        for (entry *e = p->head; e; e = e->next)
                if (strcmp(e->addr, addr) == 0)
                        return e;
        return NULL;
}

/* The entry for addr, most recently used now; made if there is none. */
static entry *get(dp_pool *p, const char *addr, sp_error **err)
{
        entry *e = find(p, addr);
        if (e) {
                unlink_entry(p, e);
                push_front(p, e);
                return e;
        }
        if (p->n >= p->max) {
                entry *victim = p->tail;
                while (victim && busy(victim))
                        victim = victim->prev;
                if (!victim) {
                        sp_error_set(err, SP_E_LIMIT, "connections to %zu workers are busy: try again later", p->n);
                        return NULL;
                }
                sp_log_debug_kv(SP_KV("worker", victim->addr), "closing the idle connection to make room");
                entry_free(p, victim);
        }
        e = calloc(1, sizeof(*e));
        if (!e || !(e->addr = strdup(addr)) || !(e->streams = sp_shares_new(p->streams, p->streams_per_tenant))) {
                if (e)
                        free(e->addr);
                free(e);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        if (!(e->cli = sp_rpc_client_new(p->base, addr, p->ctx, err))) {
                sp_shares_free(e->streams);
                free(e->addr);
                free(e);
                return NULL;
        }
        push_front(p, e);
        p->n++;
        return e;
}

sp_rpc_client *dp_pool_get(dp_pool *p, const char *addr, sp_error **err)
{
        entry *e = get(p, addr, err);
        return e ? e->cli : NULL;
}

int dp_pool_take(dp_pool *p, const char *addr, const char *tenant, sp_error **err)
{
        entry *e = get(p, addr, err);
        if (!e)
                return -1;
        _cleanup_error_ sp_error *refused = NULL;
        if (sp_shares_take(e->streams, tenant, "streams to this worker", &refused) == 0)
                return 0;
        /* sp_shares words its refusals for a whole server; say which bound it is. */
        if (refused->code == SP_E_LIMIT && sp_shares_used_by(e->streams, tenant) >= sp_shares_per_key(e->streams))
                return sp_error_set(err, SP_E_LIMIT,
                                    "this tenant holds %zu streams to this worker already, the share of streams to "
                                    "this worker per tenant: wait until one ends",
                                    sp_shares_per_key(e->streams));
        if (refused->code == SP_E_UNAVAILABLE)
                return sp_error_set(err, SP_E_UNAVAILABLE,
                                    "the connection to this worker carries %zu streams already: try again later",
                                    sp_shares_total(e->streams));
        return sp_error_set(err, refused->code, "%s", refused->message);
}

void dp_pool_give(dp_pool *p, const char *addr, const char *tenant)
{
        /* No entry: the pool is being freed (its calls end as it closes them). */
        entry *e = find(p, addr);
        if (e)
                sp_shares_give(e->streams, tenant);
}

typedef struct render_ctx {
        const char *worker;
        sp_buf *out;
        sp_error **err;
        int r;
} render_ctx;

/* Label values: characters outside [A-Za-z0-9_.:*-] become '_'. */
static void label(char *dst, size_t cap, const char *src)
{
        size_t i = 0;
        for (; src[i] && i + 1 < cap; i++)
                dst[i] = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-*[]", src[i])
                                 ? src[i]
                                 : '_';
        dst[i] = '\0';
}

static void render_one(const char *key, uint64_t share, uint64_t total, void *userdata)
{
        render_ctx *x = userdata;
        char worker[256], tenant[SP_SHARES_KEY_MAX + 1];
        label(worker, sizeof(worker), x->worker);
        label(tenant, sizeof(tenant), key);
        static const char name[] = "space_dataplane_worker_stream_refusals_total";
        if (x->r == 0 && share)
                x->r = sp_buf_appendf(x->out, x->err, "%s{worker=\"%s\",tenant=\"%s\",limit=\"tenant\"} %llu\n", name,
                                      worker, tenant, (unsigned long long)share);
        if (x->r == 0 && total)
                x->r = sp_buf_appendf(x->out, x->err, "%s{worker=\"%s\",tenant=\"%s\",limit=\"total\"} %llu\n", name,
                                      worker, tenant, (unsigned long long)total);
}

int dp_pool_render(dp_pool *p, sp_buf *out, sp_error **err)
{
        render_ctx x = {.out = out, .err = err};
        x.r = sp_buf_appendf(out, err,
                             "# HELP space_dataplane_worker_stream_refusals_total Streamed calls refused by the "
                             "share of one worker connection's streams, by worker, tenant and the limit reached.\n"
                             "# TYPE space_dataplane_worker_stream_refusals_total counter\n");
        for (entry *e = p->head; e && x.r == 0; e = e->next) {
                x.worker = e->addr;
                sp_shares_refusals(e->streams, render_one, &x);
        }
        return x.r;
}

size_t dp_pool_size(const dp_pool *p)
{
        return p->n;
}
