/* SPDX-License-Identifier: Apache-2.0 */
/* RPC clients by worker address, least recently used first out. */
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>

#include "space/log.h"
#include "workers/pool.h"

typedef struct entry {
        char *addr;
        sp_rpc_client *cli;
        struct entry *prev, *next; /* most recently used first */
} entry;

struct dp_pool {
        struct event_base *base;
        SSL_CTX *ctx;
        size_t max, n;
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
        if (ctx) {
                SSL_CTX_up_ref(ctx);
                p->ctx = ctx;
        }
        return p;
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

static bool busy(const entry *e)
{
        sp_rpc_client_stats st;
        sp_rpc_client_get_stats(e->cli, &st);
        return st.calls_open > 0;
}

sp_rpc_client *dp_pool_get(dp_pool *p, const char *addr, sp_error **err)
{
        for (entry *e = p->head; e; e = e->next)
                if (strcmp(e->addr, addr) == 0) {
                        unlink_entry(p, e);
                        push_front(p, e);
                        return e->cli;
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
        entry *e = calloc(1, sizeof(*e));
        if (!e || !(e->addr = strdup(addr))) {
                free(e);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        if (!(e->cli = sp_rpc_client_new(p->base, addr, p->ctx, err))) {
                free(e->addr);
                free(e);
                return NULL;
        }
        push_front(p, e);
        p->n++;
        return e->cli;
}

size_t dp_pool_size(const dp_pool *p)
{
        return p->n;
}
