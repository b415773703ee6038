/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the tls module's files (pki.c, tls.c, token.c); not
 * part of the public API.
 */
#ifndef SPACE_PKI_INTERNAL_H
#define SPACE_PKI_INTERNAL_H

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stddef.h>

#include "space/error.h"
#include "space/pki.h"

/* Most CA certificates a trust bundle may hold (rotation keeps two or three). */
#define SP__PKI_MAX_CA_CERTS 16

/* Sets *err to "<what>: <OpenSSL reason>" with the given code and empties the
 * thread's OpenSSL error queue (so that it cannot confuse a later
 * SSL_get_error()). Returns -(int)code. */
int sp__pki_ossl_error(sp_error **err, sp_errc code, const char *what);

/* The functions below return 0 or -(int)code with *err set, and leave their
 * output untouched on failure. */

/* A read-only memory BIO over a PEM string of at most SP_PKI_MAX_PEM bytes
 * (SP_E_TOO_LARGE past it). */
int sp__pki_pem_bio(const char *pem, const char *what, BIO **ret, sp_error **err);
/* The contents of a memory BIO as a new NUL-terminated string. */
int sp__pki_bio_string(BIO *b, char **ret, sp_error **err);

/* The first certificate of a PEM string. */
int sp__pki_cert_parse(const char *pem, const char *what, X509 **ret, sp_error **err);
/* A private key from a PEM string (encrypted keys are refused, never prompted for). */
int sp__pki_key_parse(const char *pem, const char *what, EVP_PKEY **ret, sp_error **err);
/* A trust store holding exactly the CA certificates of ca_pem (1 to
 * SP__PKI_MAX_CA_CERTS, each a CA), with strict X.509 checks and a chain
 * depth of 0: leaves must be signed directly by one of them. */
int sp__pki_store_new(const char *ca_pem, X509_STORE **ret, sp_error **err);

/* The certificate's role: the one role URI among its subject alternative
 * names, or 0 when there is none, several, or an unknown one. */
sp_role sp__pki_x509_role(X509 *x);
/* Copies the certificate's subject common name into name (size
 * SP_PKI_MAX_NAME + 1). Returns 0, or -1 (name = "") when there is not
 * exactly one common name or it is not a valid component name. */
int sp__pki_x509_name(X509 *x, char *name);

#endif
