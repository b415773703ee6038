/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker's RPC methods (proto/spec/worker-rpc.md) on an sp_rpc_server,
 * translated onto the node (worker/node/). Registration only; the daemon owns
 * the server and the node.
 */
#ifndef WK_RPC_SERVICE_H
#define WK_RPC_SERVICE_H

#include <stdbool.h>

#include "node/node.h"
#include "space/rpc.h"
#include <openssl/ssl.h>

typedef struct wk_service_options {
        /* Methods accept peers without an identity (cleartext on loopback, for tests and
         * single-host development). Never set with TLS. */
        bool allow_unauthenticated;
        /* ConnectPort calls open at once (0: WK_DEFAULT_MAX_PORT_CONNECTIONS). */
        int64_t max_port_connections;
        /* The worker's client context toward other workers (peer role worker):
         * ImportSandbox fetches with it. NULL: imports only with
         * allow_unauthenticated (cleartext), else refused. Borrowed. */
        SSL_CTX *peer_ctx;
} wk_service_options;

#define WK_DEFAULT_MAX_PORT_CONNECTIONS 4096

/* ConnectPort calls open now (for /metrics). */
int64_t wk_service_port_connections(void);

int wk_service_register(sp_rpc_server *srv, wk_node *node, const wk_service_options *opts, sp_error **err);

#endif
