/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of the HTTP client shared by http_client.c (requests and
 * responses) and http_client_conn.c (the connection: TCP, TLS, waits).
 */
#ifndef SPACE_HTTP_CLIENT_INTERNAL_H
#define SPACE_HTTP_CLIENT_INTERNAL_H

#include <arpa/inet.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/buf.h"
#include "space/http_client.h"

struct sp_http_client {
        /* the endpoint */
        bool tls;
        bool host_is_ip;
        char *host; /* without brackets */
        char *host_header; /* "host[:port]", IPv6 in brackets */
        char port[8];
        char *prefix; /* "" or "/a/b" */
        char *user_agent;
        SSL_CTX *ssl_ctx;
        unsigned connect_timeout_ms, io_timeout_ms;
        sp_http_response_limits limits;

        /* the connection */
        int fd;
        SSL *ssl; /* reads from rbio and writes to wbio, memory BIOs we move bytes through */
        BIO *rbio, *wbio; /* owned by ssl */
        bool peer_closed; /* end of stream seen */
        bool unclean_eof; /* TLS: the peer closed without close_notify */
        sp_buf in; /* received (decrypted) bytes not yet parsed */

        /* the current response */
        sp_http_response_parser *resp;
        bool reading; /* its head was read, its body not yet to the end */
};

/* A monotonic deadline timeout_ms from now (in ms). */
int64_t sp__http_client_deadline(unsigned timeout_ms);

/* Loads the trust anchors into a new client TLS context. */
int sp__http_client_tls_init(sp_http_client *c, const char *ca_file, sp_error **err);
/* Resolves, connects and (https) finishes the TLS handshake, within the
 * connect timeout. */
int sp__http_client_connect(sp_http_client *c, sp_error **err);
/* Closes the connection (if any) and drops its buffered input. */
void sp__http_client_disconnect(sp_http_client *c);
/* Whether an idle kept-alive connection still looks usable (the server has
 * neither closed it nor sent anything unasked). */
bool sp__http_client_idle_ok(sp_http_client *c);
/* Writes all of data before the deadline. */
int sp__http_client_write(sp_http_client *c, const void *data, size_t len, int64_t deadline, sp_error **err);
/* Reads what arrives (waiting until the deadline for it) and appends it to
 * c->in. Returns the number of bytes, 0 at the end of the stream (setting
 * c->peer_closed), or < 0 (-SP_E_TIMEOUT when the deadline passed). */
ssize_t sp__http_client_fill(sp_http_client *c, int64_t deadline, sp_error **err);
/* True when TLS holds decrypted or unprocessed bytes. */
bool sp__http_client_tls_buffered(const sp_http_client *c);

#endif
