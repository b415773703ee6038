/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A pool of RPC clients (sp_rpc_client), one per key: the control plane keys
 * its clients to workers by worker id, the data plane by the worker's
 * address. Each client is one HTTP/2 connection, opened on first use and
 * shared by every call made through it.
 *
 * The caller names the key and the address to dial now. A key whose address
 * changed gets a new client; the old one is retired and freed from the loop
 * soon after (its open calls then fail with SP_E_UNAVAILABLE), never inside
 * sp_rpc_pool_get(), so that no call's callback runs inside the caller. Every
 * client made gets a new generation number, so that a caller keeping state
 * about the peer behind a key (what it last told it) sees when the client
 * changed.
 *
 * The pool holds at most max clients. At the bound, the least recently used
 * client that is idle (no call open and no stream unit held, below) is
 * retired to make room; when every client is busy the pool refuses
 * (SP_E_LIMIT).
 *
 * Optionally each entry also shares out its connection's streams per tenant
 * (sp_shares): a streamed call takes one unit for its tenant first
 * (sp_rpc_pool_take) and gives it back when it ends (sp_rpc_pool_give), so
 * that one tenant's slow transfers cannot hold all of a connection's streams.
 * An entry holding units is busy: it is never retired to make room, and the
 * units stay with the key when its address changes, so what was taken is
 * always given back to the table it came from.
 *
 * Threading: the loop's thread only, like sp_rpc_client.
 */
#ifndef SPACE_RPC_POOL_H
#define SPACE_RPC_POOL_H

#include <openssl/ssl.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"
#include "space/rpc.h"
#include "space/shares.h"

struct event_base;

typedef struct sp_rpc_pool sp_rpc_pool;

/* A pool on base (borrowed, must outlive it) of at most max clients (0: 1)
 * dialling with tls (the pool takes a reference; NULL speaks cleartext
 * HTTP/2, for tests only). NULL with the reason when out of memory. */
sp_rpc_pool *sp_rpc_pool_new(struct event_base *base, SSL_CTX *tls, size_t max, sp_error **err);

/* Frees every client (their open calls fail now with SP_E_UNAVAILABLE, the
 * callbacks firing inside this call) and the pool. Accepts NULL; returns
 * NULL. Not from a client's callback. */
sp_rpc_pool *sp_rpc_pool_free(sp_rpc_pool *p);

/* Checks the server of each client the pool makes from now on, after its
 * TLS handshake (the chain and role already verified by the pool's TLS
 * context): key is the entry's (e.g. a worker's id). < 0 with *err closes the
 * connection, failing its calls. On the pool's loop. */
typedef int (*sp_rpc_pool_verify_fn)(SSL *ssl, const char *key, void *userdata, sp_error **err);
void sp_rpc_pool_set_verify(sp_rpc_pool *p, sp_rpc_pool_verify_fn fn, void *userdata);

/* Gives each entry made from now on stream shares: total units (1..
 * SP_RPC_MAX_CONCURRENT_STREAMS; 0 keeps SP_RPC_MAX_CONCURRENT_STREAMS) of
 * which one tenant may hold per_tenant (0: a quarter). Call before the first
 * sp_rpc_pool_get(). Without it, entries have no shares. */
void sp_rpc_pool_set_shares(sp_rpc_pool *p, size_t total, size_t per_tenant);

/* The client of key at addr ("HOST:PORT"), most recently used now; made if
 * there is none or addr differs from the entry's. Borrowed: valid until the
 * loop runs after the key's address changes or the entry is retired to make
 * room (so start its call at once), or the pool is freed. *ret_generation
 * (may be NULL) is the client's generation. Errors: SP_E_INVALID (the
 * address, from sp_rpc_client_new), SP_E_LIMIT (max clients, all busy; or out
 * of memory). */
sp_rpc_client *sp_rpc_pool_get(sp_rpc_pool *p, const char *key, const char *addr, uint64_t *ret_generation,
                               sp_error **err);

/* Takes one stream unit of key's entry (made as sp_rpc_pool_get() would) for
 * tenant: 0, or < 0 with err. Errors: those of sp_rpc_pool_get(), and sp_shares_take()'s
 * (SP_E_LIMIT: the tenant holds its share; SP_E_UNAVAILABLE: the total is
 * taken), what naming the unit in their messages. Without shares it only
 * makes the entry. sp_rpc_pool_give() gives the unit back (an entry that is
 * gone, as while the pool is freed, is ignored). */
int sp_rpc_pool_take(sp_rpc_pool *p, const char *key, const char *addr, const char *tenant, const char *what,
                     sp_error **err);
void sp_rpc_pool_give(sp_rpc_pool *p, const char *key, const char *tenant);

/* The shares of key's entry (NULL: no entry, or the pool has no shares);
 * borrowed, like the client. */
sp_shares *sp_rpc_pool_shares(sp_rpc_pool *p, const char *key);

/* Calls fn for every entry, most recently used first. fn must not call into
 * the pool. */
typedef void (*sp_rpc_pool_entry_fn)(const char *key, const char *addr, sp_rpc_client *cli, sp_shares *shares,
                                     void *userdata);
void sp_rpc_pool_foreach(sp_rpc_pool *p, sp_rpc_pool_entry_fn fn, void *userdata);

/* Clients held (retired ones not counted). */
size_t sp_rpc_pool_size(const sp_rpc_pool *p);

#endif
