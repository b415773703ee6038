/* SPDX-License-Identifier: Apache-2.0 */
/* TLS for credential injection (see tls.h). */
#include "tls/tls.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wire/name.h"

#define LEAVES_MAX 16
#define LEAF_DAYS 30

struct gw_tls {
        SSL_CTX *server, *client;
        /* Made on a thread of its own at start (an RSA key takes a few
         * hundred milliseconds the gateway's loop should not wait), taken
         * when first needed. */
        EVP_PKEY *leaf_key;
        pthread_t keygen;
        bool keygen_running;
};

static void *make_leaf_key(void *arg)
{
        gw_tls *t = arg;
        t->leaf_key = EVP_RSA_gen(2048);
        return NULL;
}

static EVP_PKEY *leaf_key(gw_tls *t)
{
        if (t->keygen_running) {
                pthread_join(t->keygen, NULL);
                t->keygen_running = false;
        }
        return t->leaf_key;
}

typedef struct leaf {
        char name[GW_NAME_MAX + 1];
        X509 *cert;
        time_t until; /* issue again after this */
} leaf;

struct gw_sb_ca {
        X509 *cert;
        EVP_PKEY *key;
        leaf leaves[LEAVES_MAX];
        size_t next; /* the entry the next new name takes */
};

static int ssl_error(sp_error **err, const char *what)
{
        char why[256] = "";
        unsigned long e = ERR_get_error();
        if (e)
                ERR_error_string_n(e, why, sizeof(why));
        ERR_clear_error();
        return sp_error_set(err, SP_E_INTERNAL, "%s%s%s", what, why[0] ? ": " : "", why);
}

static bool random_serial(X509 *x)
{
        BIGNUM *bn = BN_new();
        bool ok = bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) == 1 &&
                  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
        BN_free(bn);
        return ok;
}

static bool add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
        X509V3_CTX ctx;
        X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
        bool ok = e && X509_add_ext(x, e, -1) == 1;
        X509_EXTENSION_free(e);
        return ok;
}

static char *pem_of(int (*write)(BIO *, const void *), const void *obj)
{
        BIO *b = BIO_new(BIO_s_mem());
        char *out = NULL, *data = NULL;
        if (b && write(b, obj) == 1) {
                long n = BIO_get_mem_data(b, &data);
                if (n > 0 && (out = malloc((size_t)n + 1))) {
                        memcpy(out, data, (size_t)n);
                        out[n] = '\0';
                }
        }
        BIO_free(b);
        return out;
}

static int write_cert(BIO *b, const void *x)
{
        return PEM_write_bio_X509(b, (X509 *)x);
}

static int write_key(BIO *b, const void *k)
{
        return PEM_write_bio_PrivateKey(b, (EVP_PKEY *)k, NULL, NULL, 0, NULL, NULL);
}

int gw_ca_generate(const char *common_name, char **cert_pem, char **key_pem, sp_error **err)
{
        *cert_pem = *key_pem = NULL;
        EVP_PKEY *k = EVP_EC_gen("P-256");
        X509 *x = X509_new();
        X509_NAME *n = x ? X509_get_subject_name(x) : NULL;
        bool ok =
                k && x && n && X509_set_version(x, 2) == 1 && random_serial(x) &&
                X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
                X509_gmtime_adj(X509_getm_notAfter(x), 5L * 365 * 86400) &&
                X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC, (const unsigned char *)"SPACE sandbox", -1, -1, 0) ==
                        1 &&
                X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)common_name, -1, -1, 0) == 1 &&
                X509_set_issuer_name(x, n) == 1 && X509_set_pubkey(x, k) == 1 &&
                add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") &&
                add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") &&
                add_ext(x, x, NID_subject_key_identifier, "hash") && X509_sign(x, k, EVP_sha256()) > 0;
        if (ok) {
                *cert_pem = pem_of(write_cert, x);
                *key_pem = pem_of(write_key, k);
        }
        X509_free(x);
        EVP_PKEY_free(k);
        if (!ok || !*cert_pem || !*key_pem) {
                free(*cert_pem);
                if (*key_pem)
                        explicit_bzero(*key_pem, strlen(*key_pem));
                free(*key_pem);
                *cert_pem = *key_pem = NULL;
                return ssl_error(err, "make a sandbox CA");
        }
        return 0;
}

static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                       unsigned int inlen, void *arg)
{
        (void)ssl;
        (void)arg;
        for (unsigned i = 0; i < inlen;) {
                unsigned l = in[i];
                if (i + 1 + l > inlen)
                        break;
                if (l == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
                        *out = in + i + 1;
                        *outlen = 8;
                        return SSL_TLSEXT_ERR_OK;
                }
                i += 1 + l;
        }
        /* No http/1.1 offered (h2 only): no protocol is chosen, and what the
         * client then sends is read as HTTP/1.1 or refused. */
        return SSL_TLSEXT_ERR_NOACK;
}

int gw_tls_new(const char *upstream_ca_file, gw_tls **ret, sp_error **err)
{
        gw_tls *t = calloc(1, sizeof(*t));
        if (!t)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        t->server = SSL_CTX_new(TLS_server_method());
        t->client = SSL_CTX_new(TLS_client_method());
        t->keygen_running = pthread_create(&t->keygen, NULL, make_leaf_key, t) == 0;
        if (!t->server || !t->client || !t->keygen_running) {
                gw_tls_free(t);
                return ssl_error(err, "TLS contexts");
        }
        /* The sandbox's side: a link on this host to a client the sandbox
         * runs. Busybox's TLS client (wget in small images) sends no
         * signature_algorithms, which implies SHA-1 signatures: allowed here
         * (security level 0); what the sandbox could gain from weakening its
         * own link to the gateway is nothing it does not have already. */
        SSL_CTX_set_security_level(t->server, 0);
        SSL_CTX_set_min_proto_version(t->server, TLS1_2_VERSION);
        SSL_CTX_set_options(t->server, SSL_OP_NO_TICKET);
        SSL_CTX_set_session_cache_mode(t->server, SSL_SESS_CACHE_OFF);
        SSL_CTX_set_alpn_select_cb(t->server, alpn_select, NULL);
        /* The upstream's side: verified, as any client should. */
        SSL_CTX_set_min_proto_version(t->client, TLS1_2_VERSION);
        SSL_CTX_set_verify(t->client, SSL_VERIFY_PEER, NULL);
        SSL_CTX_set_session_cache_mode(t->client, SSL_SESS_CACHE_OFF);
        static const unsigned char alpn[] = "\x08http/1.1";
        SSL_CTX_set_alpn_protos(t->client, alpn, sizeof(alpn) - 1);
        int ok = upstream_ca_file && *upstream_ca_file
                         ? SSL_CTX_load_verify_locations(t->client, upstream_ca_file, NULL)
                         : SSL_CTX_set_default_verify_paths(t->client);
        if (ok != 1) {
                gw_tls_free(t);
                return ssl_error(err, upstream_ca_file && *upstream_ca_file ? "load --upstream-ca-file"
                                                                            : "the system's CA store");
        }
        *ret = t;
        return 0;
}

void gw_tls_free(gw_tls *t)
{
        if (!t)
                return;
        SSL_CTX_free(t->server);
        SSL_CTX_free(t->client);
        EVP_PKEY_free(leaf_key(t));
        free(t);
}

int gw_sb_ca_parse(const char *cert_pem, const char *key_pem, gw_sb_ca **ret, sp_error **err)
{
        gw_sb_ca *ca = calloc(1, sizeof(*ca));
        if (!ca)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        BIO *cb = BIO_new_mem_buf(cert_pem, -1), *kb = BIO_new_mem_buf(key_pem, -1);
        ca->cert = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
        ca->key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
        BIO_free(cb);
        BIO_free(kb);
        if (!ca->cert || !ca->key || X509_check_private_key(ca->cert, ca->key) != 1 || X509_check_ca(ca->cert) == 0) {
                gw_sb_ca_free(ca);
                ERR_clear_error();
                return sp_error_set(err, SP_E_INVALID, "field 'ca': not a CA certificate and its key (PEM)");
        }
        *ret = ca;
        return 0;
}

void gw_sb_ca_free(gw_sb_ca *ca)
{
        if (!ca)
                return;
        for (size_t i = 0; i < LEAVES_MAX; i++)
                X509_free(ca->leaves[i].cert);
        X509_free(ca->cert);
        EVP_PKEY_free(ca->key);
        free(ca);
}

bool gw_sb_ca_same(const gw_sb_ca *a, const gw_sb_ca *b)
{
        return a && b && X509_cmp(a->cert, b->cert) == 0;
}

static X509 *issue(gw_tls *t, gw_sb_ca *ca, const char *name)
{
        EVP_PKEY *key = leaf_key(t);
        if (!key)
                return NULL;
        char san[GW_NAME_MAX + 8];
        snprintf(san, sizeof(san), "DNS:%s", name);
        X509 *x = X509_new();
        X509_NAME *n = x ? X509_get_subject_name(x) : NULL;
        bool ok = x && n && X509_set_version(x, 2) == 1 && random_serial(x) &&
                  X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
                  X509_gmtime_adj(X509_getm_notAfter(x), (long)LEAF_DAYS * 86400) &&
                  X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)name, -1, -1, 0) == 1 &&
                  X509_set_issuer_name(x, X509_get_subject_name(ca->cert)) == 1 && X509_set_pubkey(x, key) == 1 &&
                  add_ext(x, ca->cert, NID_subject_alt_name, san) &&
                  add_ext(x, ca->cert, NID_basic_constraints, "critical,CA:FALSE") &&
                  add_ext(x, ca->cert, NID_key_usage, "critical,digitalSignature,keyEncipherment") &&
                  add_ext(x, ca->cert, NID_ext_key_usage, "serverAuth") &&
                  add_ext(x, ca->cert, NID_authority_key_identifier, "keyid") &&
                  X509_sign(x, ca->key, EVP_sha256()) > 0;
        if (!ok) {
                X509_free(x);
                return NULL;
        }
        return x;
}

static X509 *leaf_for(gw_tls *t, gw_sb_ca *ca, const char *name)
{
        time_t now = time(NULL);
        for (size_t i = 0; i < LEAVES_MAX; i++)
                if (ca->leaves[i].cert && strcmp(ca->leaves[i].name, name) == 0 && ca->leaves[i].until > now)
                        return ca->leaves[i].cert;
        X509 *x = issue(t, ca, name);
        if (!x)
                return NULL;
        leaf *l = &ca->leaves[ca->next];
        ca->next = (ca->next + 1) % LEAVES_MAX;
        X509_free(l->cert);
        l->cert = x;
        l->until = now + (LEAF_DAYS - 1) * 86400;
        snprintf(l->name, sizeof(l->name), "%s", name);
        return x;
}

SSL *gw_tls_server_ssl(gw_tls *t, gw_sb_ca *ca, const char *name, sp_error **err)
{
        X509 *x = leaf_for(t, ca, name);
        SSL *ssl = x ? SSL_new(t->server) : NULL;
        if (!ssl || SSL_use_certificate(ssl, x) != 1 || SSL_use_PrivateKey(ssl, leaf_key(t)) != 1) {
                SSL_free(ssl);
                ssl_error(err, "a certificate for the sandbox");
                return NULL;
        }
        return ssl;
}

SSL *gw_tls_client_ssl(gw_tls *t, const char *name, sp_error **err)
{
        SSL *ssl = SSL_new(t->client);
        if (!ssl || SSL_set_tlsext_host_name(ssl, name) != 1 || SSL_set1_host(ssl, name) != 1) {
                SSL_free(ssl);
                ssl_error(err, "an upstream TLS client");
                return NULL;
        }
        return ssl;
}
