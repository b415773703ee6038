/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cluster PKI: one certificate authority per cluster, and certificates
 * that name a component's role.
 *
 * Keys are ECDSA P-256. A component certificate carries its role as exactly
 * one subject-alternative-name URI "urn:space:role:<role>" (a certificate
 * with no such URI, or with several, has no valid role and is never
 * accepted), its name as the subject common name, and optionally DNS names
 * and IP addresses. Component certificates are end-entity certificates
 * (CA:FALSE) valid for both TLS client and server authentication, with
 * 128-bit random serial numbers.
 *
 * Certificates, keys and requests travel as PEM strings: malloc'd, NUL-
 * terminated, freed by the caller with free(). Inputs are bounded by
 * SP_PKI_MAX_PEM bytes. All functions are thread-safe except where a shared
 * sp_pki_ca is freed while in use.
 */
#ifndef SPACE_PKI_H
#define SPACE_PKI_H

#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"

/* A component's role. The values are bits so that a set of accepted roles is
 * a mask: SP_ROLE_WORKER | SP_ROLE_DATAPLANE. */
typedef enum {
        SP_ROLE_CONTROLPLANE = 1,
        SP_ROLE_WORKER = 2,
        SP_ROLE_DATAPLANE = 4,
} sp_role;

#define SP_ROLE_ALL (SP_ROLE_CONTROLPLANE | SP_ROLE_WORKER | SP_ROLE_DATAPLANE)
/* The prefix of the role URI in a certificate's subject alternative names. */
#define SP_PKI_ROLE_URI_PREFIX "urn:space:role:"

/* Bounds on everything the PKI accepts. */
#define SP_PKI_MAX_PEM (64 * 1024)
#define SP_PKI_MAX_NAME 64 /* bytes of a component name (X.509 ub-common-name) */
#define SP_PKI_MAX_SANS 32 /* DNS names and IP addresses per certificate */
#define SP_PKI_MAX_DNS 253 /* bytes of one DNS name */
#define SP_PKI_MAX_DAYS 3650 /* validity of any certificate */

/* "controlplane", "worker", "dataplane"; NULL for anything that is not
 * exactly one role. */
const char *sp_role_name(sp_role role);
/* Parses a role name as printed by sp_role_name(). SP_E_INVALID names the
 * input (truncated) when it is not a role. */
int sp_role_parse(const char *s, sp_role *ret, sp_error **err);

/* A loaded certificate authority: its certificate and private key.
 * Opaque; immutable once created, so it may be shared between threads. */
typedef struct sp_pki_ca sp_pki_ca;

/* Creates a new self-signed CA (P-256, CA:TRUE, pathlen 0, keyCertSign and
 * cRLSign) named common_name, valid for `days` (1..SP_PKI_MAX_DAYS). */
int sp_pki_ca_create(const char *common_name, int days, sp_pki_ca **ret, sp_error **err);
/* Loads a CA from its certificate and private key PEM. Fails with
 * SP_E_INVALID when either does not parse, the key does not match the
 * certificate, or the certificate is not a CA allowed to sign certificates. */
int sp_pki_ca_load(const char *cert_pem, const char *key_pem, sp_pki_ca **ret, sp_error **err);
/* As sp_pki_ca_load(), reading the two PEM files. */
int sp_pki_ca_load_files(const char *cert_path, const char *key_path, sp_pki_ca **ret, sp_error **err);
/* Writes the CA certificate (mode 0644) and private key (mode 0600) to the
 * two paths, each atomically (temporary file, fsync, rename). */
int sp_pki_ca_save_files(const sp_pki_ca *ca, const char *cert_path, const char *key_path, sp_error **err);
/* The CA certificate (what every component trusts) as a new PEM string. */
char *sp_pki_ca_cert_pem(const sp_pki_ca *ca, sp_error **err);
/* The CA private key as a new PEM string (PKCS#8, unencrypted). Secret:
 * callers should sp_explicit_bzero() it before free(). */
char *sp_pki_ca_key_pem(const sp_pki_ca *ca, sp_error **err);
/* Frees the CA; accepts NULL; returns NULL. */
sp_pki_ca *sp_pki_ca_free(sp_pki_ca *ca);
static inline void sp_pki_ca_freep(sp_pki_ca **ca)
{
        *ca = sp_pki_ca_free(*ca);
}
#define _cleanup_pki_ca_ __attribute__((cleanup(sp_pki_ca_freep)))

/* What a certificate says about its holder. */
typedef struct sp_pki_cert_info {
        sp_role role; /* 0 when the certificate has no valid role */
        char name[SP_PKI_MAX_NAME + 1]; /* subject common name, "" if none */
        int64_t not_before; /* unix seconds */
        int64_t not_after; /* unix seconds */
        char serial[41]; /* lower-case hex */
} sp_pki_cert_info;

/* Issues a new key and certificate for (role, name, sans) signed by the CA,
 * valid for `days` (but never past the CA's own expiry). sans is a NULL-terminated list (or NULL) of DNS names and
 * IP address literals (IPv4 or IPv6), at most SP_PKI_MAX_SANS. name is 1 to
 * SP_PKI_MAX_NAME bytes of [A-Za-z0-9._-]. On success *ret_cert_pem and
 * *ret_key_pem are new PEM strings; on failure they are untouched. */
int sp_pki_issue(const sp_pki_ca *ca, sp_role role, const char *name, const char *const *sans, int days,
                 char **ret_cert_pem, char **ret_key_pem, sp_error **err);
/* Creates a new key and a certificate signing request for (role, name, sans)
 * (same rules as sp_pki_issue()), signed with that key. */
int sp_pki_csr_create(sp_role role, const char *name, const char *const *sans, char **ret_csr_pem, char **ret_key_pem,
                      sp_error **err);
/* Signs a CSR with the CA and returns the certificate PEM, valid for `days`.
 * Only the request's subject common name, role URI, DNS names and IP
 * addresses are taken from it; everything else is the CA's choice. Refuses
 * (SP_E_PERMISSION) a request whose role is not in allowed_roles and
 * (SP_E_INVALID) a malformed request, one whose signature does not verify,
 * one with a key that is not P-256, or one without exactly one role URI.
 * ret_info (may be NULL) receives what the new certificate says. */
char *sp_pki_csr_sign(const sp_pki_ca *ca, const char *csr_pem, unsigned allowed_roles, int days,
                      sp_pki_cert_info *ret_info, sp_error **err);

/* Reads the first certificate of cert_pem without verifying it. */
int sp_pki_cert_inspect(const char *cert_pem, sp_pki_cert_info *ret, sp_error **err);
/* Verifies the first certificate of cert_pem against the CA certificates in
 * ca_pem (one or more, for rotation), now, and checks that its role is in
 * accepted_roles (non-zero). Errors: SP_E_INVALID for unparsable input,
 * SP_E_UNAUTHENTICATED when the chain does not verify (other CA, expired,
 * bad signature), SP_E_PERMISSION when the role is missing or not accepted.
 * ret_info (may be NULL) is filled on success. */
int sp_pki_cert_verify(const char *ca_pem, const char *cert_pem, unsigned accepted_roles, sp_pki_cert_info *ret_info,
                       sp_error **err);

/* Reads a PEM file (at most SP_PKI_MAX_PEM bytes) into a new string. */
char *sp_pki_pem_load(const char *path, sp_error **err);
/* Writes a PEM string to path atomically; mode 0600 when secret (keys),
 * 0644 otherwise. */
int sp_pki_pem_save(const char *path, const char *pem, bool secret, sp_error **err);

#endif
