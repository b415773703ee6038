/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS contexts for the cluster's mutually authenticated connections.
 *
 * Every component holds the cluster CA certificate, its own certificate
 * (naming its role, see pki.h) and its key. A server context built with a
 * non-zero accepted-roles mask requires a client certificate issued by the
 * cluster CA whose role is in the mask; a client context requires the same
 * of the server. The identity of a peer is (CA, role, name): host names are
 * not checked, on purpose (see sp_tls_client_ctx_new()).
 *
 * The contexts are plain OpenSSL SSL_CTX objects, usable with SSL_new() and
 * libevent's bufferevent_openssl_socket_new(); free them with SSL_CTX_free().
 * Once built they are immutable and may be shared between threads.
 */
#ifndef SPACE_TLS_H
#define SPACE_TLS_H

#include <openssl/ssl.h>
#include <stdbool.h>

#include "space/error.h"
#include "space/pki.h"

/* Most ALPN protocols in a list, and bytes in one protocol name. */
#define SP_TLS_MAX_ALPN 8
#define SP_TLS_MAX_ALPN_LEN 32

/* The material a context is built from. PEM strings are copied (parsed) and
 * not retained. */
typedef struct sp_tls_config {
        const char *ca_pem; /* the cluster CA certificate(s); may be NULL only for a server with peer_roles 0 */
        const char *cert_pem; /* own certificate, optionally followed by its chain */
        const char *key_pem; /* own private key */
        unsigned peer_roles; /* accepted peer roles (sp_role bits); 0 = server does not ask for a certificate */
        bool peer_optional; /* server with peer_roles: a client may also come without a certificate */
        const char *const *alpn; /* NULL-terminated protocols by preference, e.g. {"h2", NULL}; NULL = no ALPN */
} sp_tls_config;

/* Builds a server context: TLS 1.2 or 1.3 (1.3 preferred, forward-secret
 * AEAD suites only for 1.2), own certificate and key, no renegotiation.
 * With peer_roles non-zero the client must present a certificate from the
 * CA whose role is in peer_roles, or the handshake fails; with 0 no
 * certificate is requested (a public HTTPS endpoint). With peer_roles and
 * peer_optional the server asks for a certificate but also lets a client
 * without one finish the handshake (sp_tls_peer_identity() then fails with
 * SP_E_UNAUTHENTICATED, and the application grants it only what anonymous
 * peers may do, e.g. the control plane's Join); a certificate that is presented
 * must verify and carry an accepted role, as without the flag. With an ALPN list the
 * server selects the first of its protocols the client offers and refuses a
 * client that offers ALPN but none of them. Errors: SP_E_INVALID for bad
 * PEM, a key that does not match the certificate, a bad ALPN list,
 * peer_optional without peer_roles. */
SSL_CTX *sp_tls_server_ctx_new(const sp_tls_config *cfg, sp_error **err);

/* Builds a client context: same protocol settings; presents its own
 * certificate when the server asks and verifies the server against the CA
 * and peer_roles (which must be non-zero). Host names are deliberately not
 * checked: inside the cluster the identity of an endpoint is its role and
 * name in a certificate from the cluster CA, not the address used to reach
 * it (workers are dialled by IP and may move). Callers that need a specific
 * peer compare sp_tls_peer_identity()'s name. cert_pem and key_pem may be
 * NULL for a client without a certificate. */
SSL_CTX *sp_tls_client_ctx_new(const sp_tls_config *cfg, sp_error **err);

/* After a completed handshake, the verified peer's role and name (a new
 * string in *ret_name, if ret_name is not NULL; caller frees). Fails with
 * SP_E_UNAUTHENTICATED when the peer sent no certificate or it was not
 * verified, and SP_E_PERMISSION when its role is not accepted by the
 * context the connection was made with. Outputs are untouched on failure. */
int sp_tls_peer_identity(SSL *ssl, sp_role *ret_role, char **ret_name, sp_error **err);

#define SP_TLS_SERIAL_MAX 40
/* The serial number of the peer's certificate in lower-case hex, as
 * sp_pki_cert_info.serial writes it; "" and -1 when the peer sent none. */
int sp_tls_peer_serial(SSL *ssl, char out[static SP_TLS_SERIAL_MAX + 1]);

#endif
