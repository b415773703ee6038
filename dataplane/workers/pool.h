/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data plane's clients to workers: the shared pool (space/rpc_pool.h)
 * keyed by the worker's address from the token's claims, with per-tenant
 * shares of each connection's streams, and the data plane's words for them.
 *
 * One RPC client per worker address, made on first use and reused by every
 * request for that worker (one mutually authenticated HTTP/2 connection,
 * multiplexed). The pool holds at most `max` clients; at the bound, the
 * least recently used client with no call in progress is closed to make
 * room, and when every client is busy the request is refused (SP_E_LIMIT).
 * The TLS context presents this replica's certificate (role dataplane) and
 * accepts only servers whose certificate names role worker.
 *
 * Each connection also shares out its streams per tenant: a streamed call
 * (an attach, a file or stdin transfer, a template upload) takes one of the
 * connection's streams for the token's tenant first and gives it back when
 * it ends. The data plane's own stream bound is far above what one
 * connection carries (SP_RPC_MAX_CONCURRENT_STREAMS), so without this one
 * tenant's slow transfers to one worker could hold all of that worker's
 * streams, and every other tenant's calls to it would queue behind them. A
 * connection holding streams counts as busy: it is never closed to make
 * room, so what was taken is always given back to the same table.
 * Not thread-safe (the daemon's event loop).
 */
#ifndef DP_WORKERS_POOL_H
#define DP_WORKERS_POOL_H

#include <stddef.h>

#include "space/buf.h"
#include "space/error.h"
#include "space/rpc.h"
#include "space/rpc_pool.h"

struct event_base;

typedef sp_rpc_pool dp_pool;

/* A pool on base (borrowed, must outlive it) dialling with ctx (the pool
 * takes a reference; NULL speaks cleartext HTTP/2, for tests only). */
dp_pool *dp_pool_new(struct event_base *base, SSL_CTX *ctx, size_t max, sp_error **err);

/* The streams of each worker connection that streamed calls may hold
 * (1..SP_RPC_MAX_CONCURRENT_STREAMS; 0 keeps SP_RPC_MAX_CONCURRENT_STREAMS)
 * and what one tenant may hold of them (0: a quarter). For connections made
 * from now on; call before the first dp_pool_take(). */
void dp_pool_set_stream_shares(dp_pool *p, size_t streams, size_t per_tenant);

/* Closes every client (their calls end with SP_E_UNAVAILABLE, callbacks
 * firing now) and frees the pool. Accepts NULL. Not from an RPC callback. */
void dp_pool_free(dp_pool *p);

/* The client for addr ("HOST:PORT"), borrowed: use it at once (start the
 * call in the same callback); a client with calls in progress is never
 * closed by the pool. name: the worker's name the token (or ResolveSandbox)
 * gives, which the certificate answering at addr must carry (the connection
 * is refused otherwise); NULL or "" checks the worker role only (a token of
 * an older control plane). Errors: SP_E_INVALID (address), SP_E_LIMIT (every
 * client busy). */
sp_rpc_client *dp_pool_get(dp_pool *p, const char *addr, const char *name, sp_error **err);

/* Takes one stream of the connection to addr for tenant, making the
 * connection if there is none. Errors: SP_E_LIMIT when the tenant holds its
 * share of the connection's streams (the message says so) or every client
 * is busy, SP_E_UNAVAILABLE when all the connection's streams are taken,
 * SP_E_INVALID (address). dp_pool_give() gives the stream back. */
int dp_pool_take(dp_pool *p, const char *addr, const char *name, const char *tenant, sp_error **err);
void dp_pool_give(dp_pool *p, const char *addr, const char *name, const char *tenant);

/* Appends to out the Prometheus counter space_dataplane_worker_stream_refusals_total:
 * streamed calls refused by a connection's shares, by worker, tenant and
 * limit ("tenant" or "total"), for the connections held now. */
int dp_pool_render(dp_pool *p, sp_buf *out, sp_error **err);

/* Clients held. */
size_t dp_pool_size(const dp_pool *p);

#endif
