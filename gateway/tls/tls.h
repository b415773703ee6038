/* SPDX-License-Identifier: Apache-2.0 */
/*
 * TLS for credential injection (docs/secrets.md). For a host a sandbox's
 * secret is bound to, the gateway is the TLS server the sandbox talks to —
 * with a certificate for that name issued by the sandbox's own CA, whose
 * certificate the worker installed in the sandbox's trust store and whose
 * key never enters the sandbox — and a verifying TLS client of the real
 * host (the system's CA store, or --upstream-ca-file).
 *
 * - gw_ca_generate(): a sandbox's CA (ECDSA P-256, self-signed, CA:TRUE with
 *   pathlen 0, keyCertSign only), PEM. The worker makes one per sandbox
 *   that has secrets and hands the gateway both halves.
 * - gw_tls: the gateway's two contexts and the one key every leaf
 *   certificate carries (RSA 2048, made at start: small TLS clients such as
 *   busybox's speak RSA best; it never leaves the gateway's memory).
 * - gw_sb_ca: a sandbox's CA as the gateway holds it, with the leaf
 *   certificates it issued (a few names per sandbox, cached).
 */
#ifndef SPACE_GATEWAY_TLS_H
#define SPACE_GATEWAY_TLS_H

#include <openssl/ssl.h>
#include <stdbool.h>

#include "space/error.h"

typedef struct gw_tls gw_tls;
typedef struct gw_sb_ca gw_sb_ca;

/* A new CA: cert and key PEM (malloc'd; wipe and free the key). */
int gw_ca_generate(const char *common_name, char **cert_pem, char **key_pem, sp_error **err);

/* upstream_ca_file: the CAs upstream servers are checked against (NULL or
 * "": the system's default store). */
int gw_tls_new(const char *upstream_ca_file, gw_tls **ret, sp_error **err);
void gw_tls_free(gw_tls *t);

int gw_sb_ca_parse(const char *cert_pem, const char *key_pem, gw_sb_ca **ret, sp_error **err);
void gw_sb_ca_free(gw_sb_ca *ca);
/* Whether two are the same CA (its certificate). */
bool gw_sb_ca_same(const gw_sb_ca *a, const gw_sb_ca *b);

/* A server SSL for a sandbox's connection to name (normal form): a leaf
 * for name issued by ca, ALPN http/1.1 only. */
SSL *gw_tls_server_ssl(gw_tls *t, gw_sb_ca *ca, const char *name, sp_error **err);
/* A client SSL to name: SNI, the certificate checked against the upstream
 * CAs and name, ALPN http/1.1. */
SSL *gw_tls_client_ssl(gw_tls *t, const char *name, sp_error **err);

#endif
