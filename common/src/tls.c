/* SPDX-License-Identifier: Apache-2.0 */
/* mTLS contexts: the cluster CA as the only trust anchor, roles as identity. */
#include <openssl/err.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "pki_internal.h"
#include "space/cleanup.h"
#include "space/tls.h"

/* TLS 1.2 suites: forward secrecy and AEAD only (TLS 1.3 suites are all
 * acceptable and keep OpenSSL's defaults). */
#define TLS12_CIPHERS \
        "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" \
        "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" \
        "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define SESSION_ID_CONTEXT "space"
/* Certificates after the first in the own-certificate PEM (its chain). */
#define MAX_CHAIN 8

/* What the callbacks need, attached to each context we build and freed with
 * it (ex_data free callback). */
typedef struct ctx_data {
        unsigned peer_roles;
        unsigned char alpn[SP_TLS_MAX_ALPN * (SP_TLS_MAX_ALPN_LEN + 1)]; /* wire format */
        size_t alpn_len;
} ctx_data;

static int ctx_data_index = -1;
static pthread_once_t ctx_data_once = PTHREAD_ONCE_INIT;

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)
SP_DEFINE_CLEANUP(X509 *, X509_free)
SP_DEFINE_CLEANUP(EVP_PKEY *, EVP_PKEY_free)
SP_DEFINE_CLEANUP(BIO *, BIO_free)

static void ctx_data_free(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp)
{
        free(ptr);
}

static void ctx_data_index_init(void)
{
        ctx_data_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, ctx_data_free);
}

static const ctx_data *ctx_data_get(const SSL *ssl)
{
        SSL_CTX *ctx = ssl ? SSL_get_SSL_CTX(ssl) : NULL;
        if (!ctx || ctx_data_index < 0)
                return NULL;
        return SSL_CTX_get_ex_data(ctx, ctx_data_index);
}

/* Accepts the peer only when the chain verified and the leaf names exactly
 * one role in the accepted set and a valid name. The chain (CA only, depth 0)
 * is OpenSSL's job; this adds the role. */
static int verify_peer(int ok, X509_STORE_CTX *xs)
{
        if (!ok)
                return 0;
        if (X509_STORE_CTX_get_error_depth(xs) != 0)
                return 1;
        SSL *ssl = X509_STORE_CTX_get_ex_data(xs, SSL_get_ex_data_X509_STORE_CTX_idx());
        const ctx_data *d = ctx_data_get(ssl);
        X509 *x = X509_STORE_CTX_get_current_cert(xs);
        char name[SP_PKI_MAX_NAME + 1];
        if (!d || !x || !(sp__pki_x509_role(x) & d->peer_roles) || sp__pki_x509_name(x, name) < 0) {
                X509_STORE_CTX_set_error(xs, X509_V_ERR_APPLICATION_VERIFICATION);
                return 0;
        }
        return 1;
}

/* Selects the first of the server's protocols that the client offers. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
        const ctx_data *d = arg;
        for (size_t i = 0; i < d->alpn_len; i += 1u + d->alpn[i]) {
                const unsigned char *want = d->alpn + i + 1;
                unsigned char wlen = d->alpn[i];
                for (unsigned j = 0; j < inlen;) {
                        unsigned char clen = in[j];
                        if (clen == 0 || j + 1u + clen > inlen)
                                return SSL_TLSEXT_ERR_ALERT_FATAL;
                        if (clen == wlen && memcmp(in + j + 1, want, wlen) == 0) {
                                *out = want;
                                *outlen = wlen;
                                return SSL_TLSEXT_ERR_OK;
                        }
                        j += 1u + clen;
                }
        }
        return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static int alpn_build(ctx_data *d, const char *const *alpn, sp_error **err)
{
        size_t count = 0;
        for (const char *const *p = alpn; p && *p; p++) {
                size_t n = strlen(*p);
                if (++count > SP_TLS_MAX_ALPN)
                        return sp_error_set(err, SP_E_INVALID, "more than %d ALPN protocols", SP_TLS_MAX_ALPN);
                if (n == 0 || n > SP_TLS_MAX_ALPN_LEN)
                        return sp_error_set(err, SP_E_INVALID, "ALPN protocol must be 1 to %d bytes",
                                            SP_TLS_MAX_ALPN_LEN);
                d->alpn[d->alpn_len++] = (unsigned char)n;
                memcpy(d->alpn + d->alpn_len, *p, n);
                d->alpn_len += n;
        }
        return 0;
}

/* Own certificate, its chain and key. */
static int ctx_use_identity(SSL_CTX *ctx, const char *cert_pem, const char *key_pem, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = NULL;
        int r = sp__pki_pem_bio(cert_pem, "certificate", &b, err);
        if (r < 0)
                return r;
        _cleanup_(X509_freep) X509 *leaf = PEM_read_bio_X509(b, NULL, NULL, NULL);
        if (!leaf || SSL_CTX_use_certificate(ctx, leaf) != 1)
                return sp__pki_ossl_error(err, SP_E_INVALID, "certificate");
        for (int i = 0;; i++) {
                X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
                if (!x)
                        break;
                if (i >= MAX_CHAIN || SSL_CTX_add0_chain_cert(ctx, x) != 1) {
                        X509_free(x);
                        return sp_error_set(err, SP_E_INVALID, "certificate chain longer than %d", MAX_CHAIN);
                }
        }
        ERR_clear_error(); /* the end of the PEM */
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = NULL;
        if ((r = sp__pki_key_parse(key_pem, "private key", &key, err)) < 0)
                return r;
        if (SSL_CTX_use_PrivateKey(ctx, key) != 1 || SSL_CTX_check_private_key(ctx) != 1)
                return sp__pki_ossl_error(err, SP_E_INVALID, "private key does not match the certificate");
        return 0;
}

static SSL_CTX *ctx_new(const sp_tls_config *cfg, bool server, sp_error **err)
{
        if (!cfg)
                return sp_error_set(err, SP_E_INVALID, "no TLS configuration"), NULL;
        if (cfg->peer_roles & ~(unsigned)SP_ROLE_ALL)
                return sp_error_set(err, SP_E_INVALID, "unknown role bits 0x%x", cfg->peer_roles), NULL;
        if (pthread_once(&ctx_data_once, ctx_data_index_init) != 0 || ctx_data_index < 0)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "TLS context data index"), NULL;

        ctx_data *d = calloc(1, sizeof(*d));
        if (!d)
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        d->peer_roles = cfg->peer_roles;
        if (alpn_build(d, cfg->alpn, err) < 0) {
                free(d);
                return NULL;
        }
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
        if (!ctx || !SSL_CTX_set_ex_data(ctx, ctx_data_index, d)) {
                free(d);
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "new TLS context"), NULL;
        }
        /* d now belongs to ctx. */

        if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 || SSL_CTX_set_cipher_list(ctx, TLS12_CIPHERS) != 1)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "TLS protocol settings"), NULL;
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE);
        /* libevent's bufferevent_openssl may retry a write from a moved buffer. */
        SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);

        if (cfg->cert_pem || cfg->key_pem || server) {
                if (ctx_use_identity(ctx, cfg->cert_pem, cfg->key_pem, err) < 0)
                        return NULL;
        }
        if (cfg->ca_pem) {
                X509_STORE *store = NULL;
                if (sp__pki_store_new(cfg->ca_pem, &store, err) < 0)
                        return NULL;
                SSL_CTX_set_cert_store(ctx, store);
        }
        /* The store's parameters are not the connection's: set both. */
        X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(ctx), X509_V_FLAG_X509_STRICT);
        SSL_CTX_set_verify_depth(ctx, 0);
        return TAKE_PTR(ctx);
}

SSL_CTX *sp_tls_server_ctx_new(const sp_tls_config *cfg, sp_error **err)
{
        if (cfg && cfg->peer_roles && !cfg->ca_pem)
                return sp_error_set(err, SP_E_INVALID, "a server that verifies clients needs the CA certificate"), NULL;
        if (cfg && cfg->peer_optional && !cfg->peer_roles)
                return sp_error_set(err, SP_E_INVALID, "optional client certificates need accepted roles"), NULL;
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = ctx_new(cfg, true, err);
        if (!ctx) {
                sp_error_wrap(err, "TLS server");
                return NULL;
        }
        if (SSL_CTX_set_session_id_context(ctx, (const unsigned char *)SESSION_ID_CONTEXT,
                                           sizeof(SESSION_ID_CONTEXT) - 1) != 1)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "TLS server: session id context"), NULL;
        if (cfg->peer_roles)
                SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (cfg->peer_optional ? 0 : SSL_VERIFY_FAIL_IF_NO_PEER_CERT),
                                   verify_peer);
        else
                SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
        const ctx_data *d = SSL_CTX_get_ex_data(ctx, ctx_data_index);
        if (d->alpn_len)
                SSL_CTX_set_alpn_select_cb(ctx, alpn_select, (void *)d);
        return TAKE_PTR(ctx);
}

SSL_CTX *sp_tls_client_ctx_new(const sp_tls_config *cfg, sp_error **err)
{
        if (cfg && (!cfg->ca_pem || !cfg->peer_roles))
                return sp_error_set(err, SP_E_INVALID,
                                    "TLS client: the CA certificate and accepted roles are required"),
                       NULL;
        if (cfg && !cfg->cert_pem != !cfg->key_pem)
                return sp_error_set(err, SP_E_INVALID, "TLS client: certificate and key go together"), NULL;
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = ctx_new(cfg, false, err);
        if (!ctx) {
                sp_error_wrap(err, "TLS client");
                return NULL;
        }
        /* No host name check (X509_VERIFY_PARAM_set1_host) on purpose: the
         * server's identity is a certificate from the cluster CA naming an
         * accepted role, which verify_peer() enforces. */
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_peer);
        const ctx_data *d = SSL_CTX_get_ex_data(ctx, ctx_data_index);
        /* SSL_CTX_set_alpn_protos() returns 0 on success. */
        if (d->alpn_len && SSL_CTX_set_alpn_protos(ctx, d->alpn, (unsigned)d->alpn_len) != 0)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "TLS client: ALPN"), NULL;
        return TAKE_PTR(ctx);
}

int sp_tls_peer_serial(SSL *ssl, char out[static SP_TLS_SERIAL_MAX + 1])
{
        out[0] = '\0';
        X509 *x = ssl ? SSL_get0_peer_certificate(ssl) : NULL;
        BIGNUM *bn = x ? ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL) : NULL;
        char *hex = bn ? BN_bn2hex(bn) : NULL;
        size_t i = 0;
        for (; hex && hex[i] && i < SP_TLS_SERIAL_MAX; i++)
                out[i] = (char)(hex[i] >= 'A' && hex[i] <= 'F' ? hex[i] - 'A' + 'a' : hex[i]);
        out[i] = '\0';
        OPENSSL_free(hex);
        BN_free(bn);
        ERR_clear_error();
        return out[0] ? 0 : -1;
}

int sp_tls_peer_identity(SSL *ssl, sp_role *ret_role, char **ret_name, sp_error **err)
{
        X509 *x = ssl ? SSL_get0_peer_certificate(ssl) : NULL;
        if (!x || SSL_get_verify_result(ssl) != X509_V_OK)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "peer presented no verified certificate");
        const ctx_data *d = ctx_data_get(ssl);
        if (!d || !d->peer_roles)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "connection does not verify its peer");
        sp_role role = sp__pki_x509_role(x);
        if (!(role & d->peer_roles))
                return sp_error_set(err, SP_E_PERMISSION, "peer role is not accepted");
        char name[SP_PKI_MAX_NAME + 1];
        if (sp__pki_x509_name(x, name) < 0)
                return sp_error_set(err, SP_E_PERMISSION, "peer certificate carries no valid name");
        if (ret_name) {
                char *copy = strdup(name);
                if (!copy)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                *ret_name = copy;
        }
        if (ret_role)
                *ret_role = role;
        return 0;
}
