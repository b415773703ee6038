/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A pool of RPC clients to workers, one per worker (each one HTTP/2
 * connection, opened on first use and shared by every call), for code that
 * calls workers outside the controllers — the public API's sessions and files,
 * which any replica serves, leader or not.
 *
 * The caller names the worker and the address it has now (from the workers
 * table); a worker whose address changed gets a new client, and the old one
 * is freed from the loop soon after (its open calls then fail with
 * SP_E_UNAVAILABLE), never inside cp_wpool_get(), so that no call's callback
 * runs inside the caller.
 *
 * Threading: the loop's thread only, like sp_rpc_client.
 */
#ifndef CP_FLEET_WPOOL_H
#define CP_FLEET_WPOOL_H

#include <openssl/ssl.h>
#include <stddef.h>

#include "space/error.h"
#include "space/rpc.h"

struct event_base;

#define CP_WPOOL_MAX 1024 /* workers with a client at once */

typedef struct cp_wpool cp_wpool;

/* A pool on base whose clients use tls (a client context that checks the
 * server is a worker; the pool takes a reference). tls NULL speaks cleartext
 * HTTP/2 (tests only). NULL with SP_E_LIMIT when out of memory. */
cp_wpool *cp_wpool_new(struct event_base *base, SSL_CTX *tls, sp_error **err);
/* Frees every client (their open calls fail now, with SP_E_UNAVAILABLE) and
 * the pool. Accepts NULL; returns NULL. Not from a client's callback. */
cp_wpool *cp_wpool_free(cp_wpool *p);

/* The client of worker_id at address ("HOST:PORT"): the pool's, borrowed and
 * valid until the pool is freed or the worker's address changes. Errors:
 * SP_E_INVALID (address), SP_E_LIMIT (CP_WPOOL_MAX workers already). */
sp_rpc_client *cp_wpool_get(cp_wpool *p, const char *worker_id, const char *address, sp_error **err);

#endif
