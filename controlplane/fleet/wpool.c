/* SPDX-License-Identifier: Apache-2.0 */
/* RPC clients to workers, one per worker, replaced when a worker moves. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/fleet_internal.h"
#include "fleet/wpool.h"
#include "space/id.h"

typedef struct entry {
        char worker_id[SP_ID_MAX];
        char address[CP_FLEET_ADDRESS_MAX + 1];
        sp_rpc_client *cli;
} entry;

struct cp_wpool {
        struct event_base *base;
        SSL_CTX *tls;
        entry entries[CP_WPOOL_MAX];
        size_t n;
        sp_rpc_client *retired[CP_WPOOL_MAX]; /* replaced clients, freed by reap_ev */
        size_t nretired;
        struct event *reap_ev;
};

static void reap(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        cp_wpool *p = arg;
        while (p->nretired)
                sp_rpc_client_free(p->retired[--p->nretired]);
}

cp_wpool *cp_wpool_new(struct event_base *base, SSL_CTX *tls, sp_error **err)
{
        cp_wpool *p = calloc(1, sizeof(*p));
        if (!p || !(p->reap_ev = event_new(base, -1, 0, reap, p))) {
                free(p);
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        }
        p->base = base;
        if (tls && SSL_CTX_up_ref(tls) == 1)
                p->tls = tls;
        else if (tls) {
                event_free(p->reap_ev);
                free(p);
                return sp_error_set(err, SP_E_INTERNAL, "worker clients: TLS context"), NULL;
        }
        return p;
}

cp_wpool *cp_wpool_free(cp_wpool *p)
{
        if (!p)
                return NULL;
        reap(-1, 0, p);
        for (size_t i = 0; i < p->n; i++)
                sp_rpc_client_free(p->entries[i].cli);
        event_free(p->reap_ev);
        SSL_CTX_free(p->tls);
        free(p);
        return NULL;
}

sp_rpc_client *cp_wpool_get(cp_wpool *p, const char *worker_id, const char *address, sp_error **err)
{
        if (!cp__fleet_address_ok(address))
                return sp_error_set(err, SP_E_INVALID, "worker %.64s has no usable address", worker_id), NULL;
        entry *e = NULL;
        for (size_t i = 0; i < p->n && !e; i++)
                if (strcmp(p->entries[i].worker_id, worker_id) == 0)
                        e = &p->entries[i];
        if (e && strcmp(e->address, address) == 0)
                return e->cli;
        if (e) {
                /* It moved. The old client's calls fail from the loop, not inside this call. */
                if (p->nretired == CP_WPOOL_MAX)
                        return sp_error_set(err, SP_E_LIMIT, "too many worker clients being replaced"), NULL;
                p->retired[p->nretired++] = e->cli;
                e->cli = NULL;
                event_active(p->reap_ev, 0, 0);
        } else {
                if (p->n == CP_WPOOL_MAX)
                        return sp_error_set(err, SP_E_LIMIT, "more than %d workers", CP_WPOOL_MAX), NULL;
                e = &p->entries[p->n++];
                snprintf(e->worker_id, sizeof(e->worker_id), "%s", worker_id);
        }
        snprintf(e->address, sizeof(e->address), "%s", address);
        e->cli = sp_rpc_client_new(p->base, address, p->tls, err);
        if (!e->cli) {
                /* Forget the entry: the next call tries again. */
                *e = p->entries[--p->n];
                return NULL;
        }
        return e->cli;
}
