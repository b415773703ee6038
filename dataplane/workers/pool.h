/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One RPC client per worker address, made on first use and reused by every
 * request for that worker (one mutually authenticated HTTP/2 connection,
 * multiplexed). The pool holds at most `max` clients; at the bound, the
 * least recently used client with no call in progress is closed to make
 * room, and when every client is busy the request is refused (SP_E_LIMIT).
 * The TLS context presents this replica's certificate (role dataplane) and
 * accepts only servers whose certificate names role worker.
 * Not thread-safe (the daemon's event loop).
 */
#ifndef DP_WORKERS_POOL_H
#define DP_WORKERS_POOL_H

#include <stddef.h>

#include "space/error.h"
#include "space/rpc.h"

struct event_base;

typedef struct dp_pool dp_pool;

/* A pool on base (borrowed, must outlive it) dialling with ctx (the pool
 * takes a reference; NULL speaks cleartext HTTP/2, for tests only). */
dp_pool *dp_pool_new(struct event_base *base, SSL_CTX *ctx, size_t max, sp_error **err);

/* Closes every client (their calls end with SP_E_UNAVAILABLE, callbacks
 * firing now) and frees the pool. Accepts NULL. Not from an RPC callback. */
void dp_pool_free(dp_pool *p);

/* The client for addr ("HOST:PORT"), borrowed: use it at once (start the
 * call in the same callback); a client with calls in progress is never
 * closed by the pool. Errors: SP_E_INVALID (address), SP_E_LIMIT (every
 * client busy). */
sp_rpc_client *dp_pool_get(dp_pool *p, const char *addr, sp_error **err);

/* Clients held. */
size_t dp_pool_size(const dp_pool *p);

#endif
