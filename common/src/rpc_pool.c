/* SPDX-License-Identifier: Apache-2.0 */
/* RPC clients by key, least recently used first out, replaced ones freed from the loop. */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "space/log.h"
#include "space/rpc_pool.h"

typedef struct entry {
        char *key, *addr;
        sp_rpc_client *cli;
        uint64_t generation;
        sp_shares *shares; /* the connection's streams, shared out per tenant; NULL without shares */
        struct entry *prev, *next; /* most recently used first */
} entry;

typedef struct retired {
        sp_rpc_client *cli;
        struct retired *next;
} retired;

struct sp_rpc_pool {
        struct event_base *base;
        SSL_CTX *tls;
        size_t max, n;
        bool shares;
        size_t streams, streams_per_tenant; /* the bounds of each new entry's shares */
        uint64_t generations;
        entry *head, *tail;
        retired *retired; /* replaced or evicted clients, freed by reap_ev */
        struct event *reap_ev;
        sp_rpc_pool_verify_fn verify;
        void *verify_ud;
};

/* What a client's verify hook needs: the pool's hook and the key it was made
 * for (owned by the client: a retired client may outlive its entry). */
typedef struct verify_ctx {
        sp_rpc_pool_verify_fn fn;
        void *ud;
        char key[];
} verify_ctx;

static int verify_trampoline(SSL *ssl, void *userdata, sp_error **err)
{
        verify_ctx *v = userdata;
        return v->fn(ssl, v->key, v->ud, err);
}

void sp_rpc_pool_set_verify(sp_rpc_pool *p, sp_rpc_pool_verify_fn fn, void *userdata)
{
        p->verify = fn;
        p->verify_ud = userdata;
}

/* A new client for key at addr, with the pool's verify hook. */
static sp_rpc_client *client_new(sp_rpc_pool *p, const char *key, const char *addr, sp_error **err)
{
        verify_ctx *v = NULL;
        if (p->verify) {
                size_t n = strlen(key) + 1;
                if (!(v = malloc(sizeof(*v) + n)))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
                v->fn = p->verify;
                v->ud = p->verify_ud;
                memcpy(v->key, key, n);
        }
        sp_rpc_client *cli = sp_rpc_client_new(p->base, addr, p->tls, err);
        if (!cli) {
                free(v);
                return NULL;
        }
        if (v)
                sp_rpc_client_set_verify_fn_owned(cli, verify_trampoline, v, free);
        return cli;
}

static void reap(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        sp_rpc_pool *p = arg;
        while (p->retired) {
                retired *r = p->retired;
                p->retired = r->next;
                sp_rpc_client_free(r->cli);
                free(r);
        }
}

sp_rpc_pool *sp_rpc_pool_new(struct event_base *base, SSL_CTX *tls, size_t max, sp_error **err)
{
        sp_rpc_pool *p = calloc(1, sizeof(*p));
        if (!p || !(p->reap_ev = event_new(base, -1, 0, reap, p))) {
                free(p);
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        }
        p->base = base;
        p->max = max ? max : 1;
        p->streams = SP_RPC_MAX_CONCURRENT_STREAMS;
        if (tls && SSL_CTX_up_ref(tls) != 1) {
                event_free(p->reap_ev);
                free(p);
                return sp_error_set(err, SP_E_INTERNAL, "RPC client pool: TLS context"), NULL;
        }
        p->tls = tls;
        return p;
}

void sp_rpc_pool_set_shares(sp_rpc_pool *p, size_t total, size_t per_tenant)
{
        p->shares = true;
        p->streams = total && total < SP_RPC_MAX_CONCURRENT_STREAMS ? total : SP_RPC_MAX_CONCURRENT_STREAMS;
        p->streams_per_tenant = per_tenant < p->streams ? per_tenant : p->streams;
}

static void unlink_entry(sp_rpc_pool *p, entry *e)
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

static void push_front(sp_rpc_pool *p, entry *e)
{
        e->next = p->head;
        if (p->head)
                p->head->prev = e;
        p->head = e;
        if (!p->tail)
                p->tail = e;
}

static void entry_free(entry *e)
{
        if (!e)
                return;
        sp_rpc_client_free(e->cli);
        sp_shares_free(e->shares);
        free(e->key);
        free(e->addr);
        free(e);
}

sp_rpc_pool *sp_rpc_pool_free(sp_rpc_pool *p)
{
        if (!p)
                return NULL;
        reap(-1, 0, p);
        while (p->head) {
                entry *e = p->head;
                unlink_entry(p, e);
                entry_free(e);
        }
        event_free(p->reap_ev);
        SSL_CTX_free(p->tls);
        free(p);
        return NULL;
}

/* Hands cli to the loop to free (r: a node the caller allocated). */
static void retire(sp_rpc_pool *p, retired *r, sp_rpc_client *cli)
{
        r->cli = cli;
        r->next = p->retired;
        p->retired = r;
        event_active(p->reap_ev, 0, 0);
}

/* A connection whose stream units are held stays, even between the calls of
 * one transfer (an attach looks the session up before its stream starts). */
static bool busy(const entry *e)
{
        sp_rpc_client_stats st;
        sp_rpc_client_get_stats(e->cli, &st);
        return st.calls_open > 0 || (e->shares && sp_shares_used(e->shares) > 0);
}

static entry *find(sp_rpc_pool *p, const char *key)
{
        for (entry *e = p->head; e; e = e->next)
                if (strcmp(e->key, key) == 0)
                        return e;
        return NULL;
}

/* The entry of key at addr, most recently used now; made if there is none. */
static entry *get(sp_rpc_pool *p, const char *key, const char *addr, sp_error **err)
{
        entry *e = find(p, key);
        if (e && strcmp(e->addr, addr) != 0) {
                /* It moved. The old client's calls fail from the loop, not inside this call;
                 * until the new client is made, the entry keeps the old one. */
                retired *r = malloc(sizeof(*r));
                char *a = strdup(addr);
                sp_rpc_client *cli = r && a ? client_new(p, key, addr, err) : NULL;
                if (!cli) {
                        if (!r || !a)
                                sp_error_set(err, SP_E_LIMIT, "out of memory");
                        free(r);
                        free(a);
                        return NULL;
                }
                retire(p, r, e->cli);
                e->cli = cli;
                free(e->addr);
                e->addr = a;
                e->generation = ++p->generations;
        }
        if (e) {
                unlink_entry(p, e);
                push_front(p, e);
                return e;
        }
        entry *victim = NULL;
        if (p->n >= p->max) {
                victim = p->tail;
                while (victim && busy(victim))
                        victim = victim->prev;
                if (!victim)
                        return sp_error_set(err, SP_E_LIMIT, "connections to %zu workers are busy: try again later",
                                            p->n),
                               NULL;
        }
        retired *r = victim ? malloc(sizeof(*r)) : NULL;
        e = calloc(1, sizeof(*e));
        if ((victim && !r) || !e || !(e->key = strdup(key)) || !(e->addr = strdup(addr)) ||
            (p->shares && !(e->shares = sp_shares_new(p->streams, p->streams_per_tenant)))) {
                free(r);
                entry_free(e);
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        }
        if (!(e->cli = client_new(p, key, addr, err))) {
                free(r);
                entry_free(e);
                return NULL;
        }
        if (victim) {
                sp_log_debug_kv(SP_KV("peer", victim->key), "closing the idle connection to make room");
                unlink_entry(p, victim);
                retire(p, r, victim->cli);
                victim->cli = NULL;
                entry_free(victim);
                p->n--;
        }
        e->generation = ++p->generations;
        push_front(p, e);
        p->n++;
        return e;
}

sp_rpc_client *sp_rpc_pool_get(sp_rpc_pool *p, const char *key, const char *addr, uint64_t *ret_generation,
                               sp_error **err)
{
        entry *e = get(p, key, addr, err);
        if (e && ret_generation)
                *ret_generation = e->generation;
        return e ? e->cli : NULL;
}

int sp_rpc_pool_take(sp_rpc_pool *p, const char *key, const char *addr, const char *tenant, const char *what,
                     sp_error **err)
{
        entry *e = get(p, key, addr, err);
        if (!e)
                return -1;
        return e->shares ? sp_shares_take(e->shares, tenant, what, err) : 0;
}

void sp_rpc_pool_give(sp_rpc_pool *p, const char *key, const char *tenant)
{
        entry *e = find(p, key);
        if (e && e->shares)
                sp_shares_give(e->shares, tenant);
}

sp_shares *sp_rpc_pool_shares(sp_rpc_pool *p, const char *key)
{
        entry *e = find(p, key);
        return e ? e->shares : NULL;
}

void sp_rpc_pool_foreach(sp_rpc_pool *p, sp_rpc_pool_entry_fn fn, void *userdata)
{
        for (entry *e = p->head; e; e = e->next)
                fn(e->key, e->addr, e->cli, e->shares, userdata);
}

size_t sp_rpc_pool_size(const sp_rpc_pool *p)
{
        return p->n;
}
