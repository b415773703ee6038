/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: roles, the cluster CA, issuing, CSRs, inspecting and verifying certificates. */
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/pki.h"

SP_DEFINE_CLEANUP(X509 *, X509_free)
SP_DEFINE_CLEANUP(X509_REQ *, X509_REQ_free)
SP_DEFINE_CLEANUP(EVP_PKEY *, EVP_PKEY_free)
SP_DEFINE_CLEANUP(BIO *, BIO_free)
SP_DEFINE_CLEANUP(X509_NAME *, X509_NAME_free)
SP_DEFINE_CLEANUP(GENERAL_NAMES *, GENERAL_NAMES_free)

static X509 *pem_cert(const char *pem)
{
        _cleanup_(BIO_freep) BIO *b = BIO_new_mem_buf(pem, -1);
        X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
        ck_assert_ptr_nonnull(x);
        return x;
}

static EVP_PKEY *pem_key(const char *pem)
{
        _cleanup_(BIO_freep) BIO *b = BIO_new_mem_buf(pem, -1);
        EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
        ck_assert_ptr_nonnull(k);
        return k;
}

static char *x509_pem(X509 *x)
{
        _cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_mem());
        ck_assert(PEM_write_bio_X509(b, x));
        char *data;
        long n = BIO_get_mem_data(b, &data);
        return strndup(data, (size_t)n);
}

static char *req_pem(X509_REQ *r)
{
        _cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_mem());
        ck_assert(PEM_write_bio_X509_REQ(b, r));
        char *data;
        long n = BIO_get_mem_data(b, &data);
        return strndup(data, (size_t)n);
}

static X509_REQ *pem_req(const char *pem)
{
        _cleanup_(BIO_freep) BIO *b = BIO_new_mem_buf(pem, -1);
        X509_REQ *r = PEM_read_bio_X509_REQ(b, NULL, NULL, NULL);
        ck_assert_ptr_nonnull(r);
        return r;
}

static void ext_add(X509 *x, X509 *issuer, int nid, const char *value)
{
        X509V3_CTX v3;
        X509V3_set_ctx_nodb(&v3);
        X509V3_set_ctx(&v3, issuer, x, NULL, NULL, 0);
        X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, &v3, nid, value);
        ck_assert_ptr_nonnull(ext);
        ck_assert(X509_add_ext(x, ext, -1));
        X509_EXTENSION_free(ext);
}

/* A certificate signed by the CA outside the PKI code, with whatever SAN
 * string the test wants and a notAfter `after_days` from now (negative: in
 * the past). Returns its PEM. */
static char *craft_cert(const sp_pki_ca *ca, const char *san, int after_days)
{
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, NULL);
        _cleanup_free_ char *ca_key_pem = sp_pki_ca_key_pem(ca, NULL);
        _cleanup_(X509_freep) X509 *issuer = pem_cert(ca_pem);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *ca_key = pem_key(ca_key_pem);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = EVP_EC_gen("P-256");
        _cleanup_(X509_freep) X509 *x = X509_new();
        ck_assert(X509_set_version(x, X509_VERSION_3));
        ck_assert(ASN1_INTEGER_set(X509_get_serialNumber(x), 4242));
        ck_assert(X509_gmtime_adj(X509_getm_notBefore(x), (long)(after_days - 30) * 86400));
        ck_assert(X509_gmtime_adj(X509_getm_notAfter(x), (long)after_days * 86400));
        X509_NAME *n = X509_get_subject_name(x);
        ck_assert(X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)"crafted", -1, -1, 0));
        ck_assert(X509_set_issuer_name(x, X509_get_subject_name(issuer)));
        ck_assert(X509_set_pubkey(x, key));
        ext_add(x, issuer, NID_basic_constraints, "critical,CA:FALSE");
        ext_add(x, issuer, NID_key_usage, "critical,digitalSignature");
        ext_add(x, issuer, NID_ext_key_usage, "serverAuth,clientAuth");
        ext_add(x, issuer, NID_subject_key_identifier, "hash");
        ext_add(x, issuer, NID_authority_key_identifier, "keyid:always");
        if (san)
                ext_add(x, issuer, NID_subject_alt_name, san);
        ck_assert_int_gt(X509_sign(x, ca_key, EVP_sha256()), 0);
        return x509_pem(x);
}

START_TEST(roles_name_and_parse)
{
        ck_assert_str_eq(sp_role_name(SP_ROLE_CONTROLPLANE), "controlplane");
        ck_assert_str_eq(sp_role_name(SP_ROLE_WORKER), "worker");
        ck_assert_str_eq(sp_role_name(SP_ROLE_DATAPLANE), "dataplane");
        ck_assert_ptr_null(sp_role_name(0));
        ck_assert_ptr_null(sp_role_name(SP_ROLE_WORKER | SP_ROLE_DATAPLANE));
        ck_assert_ptr_null(sp_role_name(8));
        sp_role r = 0;
        ck_assert_int_eq(sp_role_parse("worker", &r, NULL), 0);
        ck_assert_int_eq(r, SP_ROLE_WORKER);
        ck_assert_int_eq(sp_role_parse("dataplane", &r, NULL), 0);
        ck_assert_int_eq(r, SP_ROLE_DATAPLANE);
        _cleanup_error_ sp_error *e = NULL;
        static const char *const bad[] = {"", "Worker", "workers", "work", "controlplane ", "admin"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++)
                ck_assert_int_eq(sp_role_parse(bad[i], &r, &e), -SP_E_INVALID);
        ck_assert_int_eq(sp_role_parse(NULL, &r, NULL), -SP_E_INVALID);
        ck_assert_int_eq(e->code, SP_E_INVALID);
}
END_TEST

START_TEST(ca_create_save_load_roundtrip)
{
        _cleanup_free_ char *dir = sp_test_tmpdir("pki");
        char cert_path[512], key_path[512];
        snprintf(cert_path, sizeof(cert_path), "%s/ca.crt", dir);
        snprintf(key_path, sizeof(key_path), "%s/ca.key", dir);

        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_pki_ca_create("space cluster CA", 365, &ca, &e), 0);
        ck_assert_int_eq(sp_pki_ca_save_files(ca, cert_path, key_path, &e), 0);
        struct stat st;
        ck_assert_int_eq(stat(key_path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        ck_assert_int_eq(stat(cert_path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0644);

        _cleanup_pki_ca_ sp_pki_ca *loaded = NULL;
        ck_assert_int_eq(sp_pki_ca_load_files(cert_path, key_path, &loaded, &e), 0);
        _cleanup_free_ char *c1 = sp_pki_ca_cert_pem(ca, NULL), *c2 = sp_pki_ca_cert_pem(loaded, NULL);
        _cleanup_free_ char *k1 = sp_pki_ca_key_pem(ca, NULL), *k2 = sp_pki_ca_key_pem(loaded, NULL);
        ck_assert_str_eq(c1, c2);
        ck_assert_str_eq(k1, k2);
        ck_assert(strstr(k1, "-----BEGIN PRIVATE KEY-----") != NULL);

        /* The CA certificate is a P-256 self-signed CA allowed to sign certificates. */
        _cleanup_(X509_freep) X509 *x = pem_cert(c1);
        ck_assert_int_ge(X509_check_ca(x), 1);
        ck_assert(X509_get_key_usage(x) & KU_KEY_CERT_SIGN);
        ck_assert_int_eq(X509_check_issued(x, x), X509_V_OK);
        char group[32];
        ck_assert(EVP_PKEY_get_group_name(X509_get0_pubkey(x), group, sizeof(group), NULL));
        ck_assert_str_eq(group, "prime256v1");

        /* The loaded CA issues certificates that verify against the original. */
        _cleanup_free_ char *cert = NULL, *key = NULL;
        ck_assert_int_eq(sp_pki_issue(loaded, SP_ROLE_WORKER, "w1", NULL, 1, &cert, &key, &e), 0);
        ck_assert_int_eq(sp_pki_cert_verify(c1, cert, SP_ROLE_WORKER, NULL, &e), 0);

        /* A key that is not the certificate's, and a leaf posing as a CA, are refused. */
        _cleanup_pki_ca_ sp_pki_ca *other = NULL, *bad = NULL;
        ck_assert_int_eq(sp_pki_ca_create("other", 1, &other, NULL), 0);
        _cleanup_free_ char *k3 = sp_pki_ca_key_pem(other, NULL);
        ck_assert_int_eq(sp_pki_ca_load(c1, k3, &bad, &e), -SP_E_INVALID);
        ck_assert_ptr_null(bad);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_pki_ca_load(cert, key, &bad, &e), -SP_E_INVALID);
        ck_assert_ptr_null(bad);
        sp_error_freep(&e);
        /* A missing file is an error that names it. */
        ck_assert_int_lt(sp_pki_ca_load_files(cert_path, "/nonexistent/ca.key", &bad, &e), 0);
        ck_assert(strstr(e->message, "/nonexistent/ca.key") != NULL);
        sp_test_tmpdir_remove(dir);
}
END_TEST

START_TEST(ca_create_rejects_bad_input)
{
        sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("", 10, &ca, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_ca_create("ca\n", 10, &ca, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_ca_create("ca", 0, &ca, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_ca_create("ca", SP_PKI_MAX_DAYS + 1, &ca, NULL), -SP_E_INVALID);
        ck_assert_ptr_null(ca);
}
END_TEST

static bool names_have(GENERAL_NAMES *names, int type, const void *data, size_t n)
{
        for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
                GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
                int t;
                ASN1_STRING *s = GENERAL_NAME_get0_value(g, &t);
                if (t == type && (size_t)ASN1_STRING_length(s) == n && memcmp(ASN1_STRING_get0_data(s), data, n) == 0)
                        return true;
        }
        return false;
}

START_TEST(issue_and_inspect)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &ca, NULL), 0);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, NULL);
        _cleanup_free_ char *cert = NULL, *key = NULL, *cert2 = NULL, *key2 = NULL;
        _cleanup_error_ sp_error *e = NULL;
        const char *sans[] = {"node-1.cluster.example", "10.0.0.7", "fd00::7", NULL};
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, "node-1", sans, 30, &cert, &key, &e), 0);

        sp_pki_cert_info info;
        ck_assert_int_eq(sp_pki_cert_inspect(cert, &info, &e), 0);
        ck_assert_int_eq(info.role, SP_ROLE_WORKER);
        ck_assert_str_eq(info.name, "node-1");
        int64_t now = (int64_t)time(NULL);
        ck_assert_int_le(info.not_after, now + 30 * 86400 + 5);
        ck_assert_int_ge(info.not_after, now + 30 * 86400 - 5);
        ck_assert_int_lt(info.not_before, now);
        ck_assert_uint_ge(strlen(info.serial), 24); /* 128 random bits, leading zero bytes aside */
        ck_assert_uint_le(strlen(info.serial), 32);

        /* The certificate itself: key matches, end entity, both EKUs, the SANs. */
        _cleanup_(X509_freep) X509 *x = pem_cert(cert);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *k = pem_key(key);
        ck_assert_int_eq(X509_check_private_key(x, k), 1);
        ck_assert_int_eq(X509_check_ca(x), 0);
        ck_assert(X509_get_extended_key_usage(x) & XKU_SSL_CLIENT);
        ck_assert(X509_get_extended_key_usage(x) & XKU_SSL_SERVER);
        ck_assert_int_eq(X509_check_purpose(x, X509_PURPOSE_SSL_CLIENT, 0), 1);
        ck_assert_int_eq(X509_check_purpose(x, X509_PURPOSE_SSL_SERVER, 0), 1);
        _cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
        ck_assert_ptr_nonnull(names);
        ck_assert_int_eq(sk_GENERAL_NAME_num(names), 4);
        ck_assert(names_have(names, GEN_URI, "urn:space:role:worker", 21));
        ck_assert(names_have(names, GEN_DNS, "node-1.cluster.example", 22));
        ck_assert(names_have(names, GEN_IPADD, "\x0a\x00\x00\x07", 4));
        ck_assert(names_have(names, GEN_IPADD, "\xfd\x00\0\0\0\0\0\0\0\0\0\0\0\0\0\x07", 16));

        /* Serials differ between certificates. */
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, "node-1", sans, 30, &cert2, &key2, &e), 0);
        sp_pki_cert_info info2;
        ck_assert_int_eq(sp_pki_cert_inspect(cert2, &info2, &e), 0);
        ck_assert_str_ne(info.serial, info2.serial);

        /* Verification: the right CA and role pass; a wrong role or CA do not. */
        sp_pki_cert_info vinfo;
        ck_assert_int_eq(sp_pki_cert_verify(ca_pem, cert, SP_ROLE_WORKER | SP_ROLE_DATAPLANE, &vinfo, &e), 0);
        ck_assert_str_eq(vinfo.name, "node-1");
        ck_assert_int_eq(sp_pki_cert_verify(ca_pem, cert, SP_ROLE_CONTROLPLANE, NULL, &e), -SP_E_PERMISSION);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_pki_cert_verify(ca_pem, cert, 0, NULL, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        _cleanup_pki_ca_ sp_pki_ca *other = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &other, NULL), 0);
        _cleanup_free_ char *other_pem = sp_pki_ca_cert_pem(other, NULL);
        ck_assert_int_eq(sp_pki_cert_verify(other_pem, cert, SP_ROLE_WORKER, NULL, &e), -SP_E_UNAUTHENTICATED);
        sp_error_freep(&e);
        /* A bundle of both CAs (rotation) accepts it. */
        size_t bl = strlen(ca_pem) + strlen(other_pem) + 1;
        _cleanup_free_ char *bundle = malloc(bl);
        snprintf(bundle, bl, "%s%s", other_pem, ca_pem);
        ck_assert_int_eq(sp_pki_cert_verify(bundle, cert, SP_ROLE_WORKER, NULL, &e), 0);
        /* A leaf never outlives its CA. */
        _cleanup_free_ char *long_cert = NULL, *long_key = NULL;
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, "node-2", NULL, 365, &long_cert, &long_key, &e), 0);
        sp_pki_cert_info ca_info, long_info;
        ck_assert_int_eq(sp_pki_cert_inspect(ca_pem, &ca_info, &e), 0);
        ck_assert_int_eq(sp_pki_cert_inspect(long_cert, &long_info, &e), 0);
        ck_assert_int_eq(long_info.not_after, ca_info.not_after);
        ck_assert_int_eq(ca_info.role, 0);
        /* A leaf certificate is no trust anchor. */
        ck_assert_int_eq(sp_pki_cert_verify(cert2, cert, SP_ROLE_WORKER, NULL, &e), -SP_E_INVALID);
}
END_TEST

START_TEST(issue_rejects_bad_input)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &ca, NULL), 0);
        char *cert = NULL, *key = NULL;
        static const char *const bad_names[] = {"", "a b", "a/b", "a,URI:urn:space:role:controlplane",
                                                "0123456789012345678901234567890123456789012345678901234567890123x"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_names); i++)
                ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, bad_names[i], NULL, 1, &cert, &key, NULL),
                                 -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, NULL, NULL, 1, &cert, &key, NULL), -SP_E_INVALID);
        static const char *const bad_sans[] = {
                "*.example", "-a.example", "a-.example", "a..b", "a b", "", "x,URI:urn:space:role:controlplane",
                "10.0.0.1/8"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_sans); i++) {
                const char *sans[] = {"ok.example", bad_sans[i], NULL};
                ck_assert_msg(sp_pki_issue(ca, SP_ROLE_WORKER, "w", sans, 1, &cert, &key, NULL) == -SP_E_INVALID,
                              "accepted SAN '%s'", bad_sans[i]);
        }
        const char *many[SP_PKI_MAX_SANS + 2];
        for (size_t i = 0; i < SP_PKI_MAX_SANS + 1; i++)
                many[i] = "a.example";
        many[SP_PKI_MAX_SANS + 1] = NULL;
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, "w", many, 1, &cert, &key, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_issue(ca, 0, "w", NULL, 1, &cert, &key, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER | SP_ROLE_DATAPLANE, "w", NULL, 1, &cert, &key, NULL),
                         -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, "w", NULL, 0, &cert, &key, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_WORKER, "w", NULL, SP_PKI_MAX_DAYS + 1, &cert, &key, NULL),
                         -SP_E_INVALID);
        ck_assert_ptr_null(cert);
        ck_assert_ptr_null(key);
}
END_TEST

START_TEST(csr_create_and_sign)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &ca, NULL), 0);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, NULL);
        _cleanup_free_ char *csr = NULL, *key = NULL;
        _cleanup_error_ sp_error *e = NULL;
        const char *sans[] = {"worker-7.example", "192.0.2.7", NULL};
        ck_assert_int_eq(sp_pki_csr_create(SP_ROLE_WORKER, "worker-7", sans, &csr, &key, &e), 0);
        ck_assert(strstr(csr, "-----BEGIN CERTIFICATE REQUEST-----") != NULL);

        sp_pki_cert_info info;
        _cleanup_free_ char *cert = sp_pki_csr_sign(ca, csr, SP_ROLE_WORKER | SP_ROLE_DATAPLANE, 7, &info, &e);
        ck_assert_msg(cert != NULL, "%s", e ? e->message : "");
        ck_assert_int_eq(info.role, SP_ROLE_WORKER);
        ck_assert_str_eq(info.name, "worker-7");
        ck_assert_int_eq(sp_pki_cert_verify(ca_pem, cert, SP_ROLE_WORKER, NULL, &e), 0);

        /* The certificate is for the CSR's key, with its names. */
        _cleanup_(X509_freep) X509 *x = pem_cert(cert);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *k = pem_key(key);
        ck_assert_int_eq(X509_check_private_key(x, k), 1);
        _cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
        ck_assert_int_eq(sk_GENERAL_NAME_num(names), 3);
        ck_assert(names_have(names, GEN_DNS, "worker-7.example", 16));
        ck_assert(names_have(names, GEN_IPADD, "\xc0\x00\x02\x07", 4));
        ck_assert_int_eq(X509_check_ca(x), 0);
}
END_TEST

START_TEST(csr_disallowed_role_refused)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &ca, NULL), 0);
        _cleanup_free_ char *csr = NULL, *key = NULL;
        ck_assert_int_eq(sp_pki_csr_create(SP_ROLE_CONTROLPLANE, "sneaky", NULL, &csr, &key, NULL), 0);
        /* A worker joining may only get a worker certificate. */
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_ptr_null(sp_pki_csr_sign(ca, csr, SP_ROLE_WORKER, 7, NULL, &e));
        ck_assert_int_eq(e->code, SP_E_PERMISSION);
        ck_assert(strstr(e->message, "controlplane") != NULL);
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_pki_csr_sign(ca, csr, 0, 7, NULL, &e));
        ck_assert_int_eq(e->code, SP_E_PERMISSION);
}
END_TEST

START_TEST(csr_tampered_refused)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &ca, NULL), 0);
        _cleanup_free_ char *csr = NULL, *key = NULL;
        ck_assert_int_eq(sp_pki_csr_create(SP_ROLE_WORKER, "w1", NULL, &csr, &key, NULL), 0);

        /* The subject changed after signing. */
        _cleanup_(X509_REQ_freep) X509_REQ *r = pem_req(csr);
        _cleanup_(X509_NAME_freep) X509_NAME *n = X509_NAME_new();
        ck_assert(X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)"w2", -1, -1, 0));
        ck_assert(X509_REQ_set_subject_name(r, n));
        _cleanup_free_ char *tampered = req_pem(r);
        ck_assert_str_ne(tampered, csr);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_ptr_null(sp_pki_csr_sign(ca, tampered, SP_ROLE_ALL, 7, NULL, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert(strstr(e->message, "signature") != NULL);
        sp_error_freep(&e);

        /* Another key substituted after signing. */
        _cleanup_(X509_REQ_freep) X509_REQ *r2 = pem_req(csr);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *other = EVP_EC_gen("P-256");
        ck_assert(X509_REQ_set_pubkey(r2, other));
        _cleanup_free_ char *swapped = req_pem(r2);
        ck_assert_ptr_null(sp_pki_csr_sign(ca, swapped, SP_ROLE_ALL, 7, NULL, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_freep(&e);

        /* A CSR with a key that is not P-256, and garbage. */
        _cleanup_(X509_REQ_freep) X509_REQ *r3 = pem_req(csr);
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *p384 = EVP_EC_gen("P-384");
        ck_assert(X509_REQ_set_pubkey(r3, p384));
        ck_assert_int_gt(X509_REQ_sign(r3, p384, EVP_sha256()), 0);
        _cleanup_free_ char *wrong_curve = req_pem(r3);
        ck_assert_ptr_null(sp_pki_csr_sign(ca, wrong_curve, SP_ROLE_ALL, 7, NULL, &e));
        ck_assert(strstr(e->message, "P-256") != NULL);
        sp_error_freep(&e);
        ck_assert_ptr_null(
                sp_pki_csr_sign(ca, "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n", SP_ROLE_ALL, 7, NULL, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_pki_csr_sign(ca, NULL, SP_ROLE_ALL, 7, NULL, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
}
END_TEST

START_TEST(csr_with_two_roles_refused)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &ca, NULL), 0);
        static const char *const sans[] = {
                "URI:urn:space:role:worker,URI:urn:space:role:controlplane",
                "URI:urn:space:role:worker,URI:URN:SPACE:ROLE:controlplane",
                "URI:urn:space:role:worker,URI:https://example.com/",
                "URI:urn:space:role:worker,email:a@example.com",
                "DNS:w.example",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(sans); i++) {
                _cleanup_(EVP_PKEY_freep) EVP_PKEY *k = EVP_EC_gen("P-256");
                _cleanup_(X509_REQ_freep) X509_REQ *r = X509_REQ_new();
                X509_NAME *n = X509_REQ_get_subject_name(r);
                ck_assert(X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)"w", -1, -1, 0));
                STACK_OF(X509_EXTENSION) *exts = sk_X509_EXTENSION_new_null();
                X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, NULL, NID_subject_alt_name, sans[i]);
                ck_assert_ptr_nonnull(ext);
                sk_X509_EXTENSION_push(exts, ext);
                ck_assert(X509_REQ_add_extensions(r, exts));
                sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
                ck_assert(X509_REQ_set_pubkey(r, k));
                ck_assert_int_gt(X509_REQ_sign(r, k, EVP_sha256()), 0);
                _cleanup_free_ char *pem = req_pem(r);
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(sp_pki_csr_sign(ca, pem, SP_ROLE_ALL, 7, NULL, &e) == NULL, "signed %s", sans[i]);
                ck_assert_int_eq(e->code, SP_E_INVALID);
        }
}
END_TEST

START_TEST(role_uri_must_be_exactly_one)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("ca", 30, &ca, NULL), 0);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, NULL);
        static const char *const no_role[] = {
                NULL,
                "DNS:w.example",
                "URI:urn:space:role:worker,URI:urn:space:role:controlplane",
                "URI:urn:space:role:worker,URI:urn:space:role:worker",
                "URI:urn:space:role:worker,URI:URN:Space:Role:controlplane",
                "URI:urn:space:role:admin",
                "URI:urn:space:role:Worker",
                "URI:urn:space:role:",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(no_role); i++) {
                _cleanup_free_ char *pem = craft_cert(ca, no_role[i], 10);
                sp_pki_cert_info info;
                ck_assert_int_eq(sp_pki_cert_inspect(pem, &info, NULL), 0);
                ck_assert_msg(info.role == 0, "role from %s", no_role[i] ? no_role[i] : "(none)");
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_eq(sp_pki_cert_verify(ca_pem, pem, SP_ROLE_ALL, NULL, &e), -SP_E_PERMISSION);
        }
        /* The crafting itself is sound: one role URI verifies. */
        _cleanup_free_ char *good = craft_cert(ca, "URI:urn:space:role:dataplane,DNS:d.example", 10);
        sp_pki_cert_info info;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_pki_cert_verify(ca_pem, good, SP_ROLE_DATAPLANE, &info, &e), 0);
        ck_assert_str_eq(info.name, "crafted");
        /* Expired: refused as unauthenticated. */
        _cleanup_free_ char *expired = craft_cert(ca, "URI:urn:space:role:dataplane", -1);
        ck_assert_int_eq(sp_pki_cert_verify(ca_pem, expired, SP_ROLE_DATAPLANE, NULL, &e), -SP_E_UNAUTHENTICATED);
        ck_assert(strstr(e->message, "expired") != NULL);
}
END_TEST

START_TEST(pem_files_and_bounds)
{
        _cleanup_free_ char *dir = sp_test_tmpdir("pki");
        char path[512];
        snprintf(path, sizeof(path), "%s/x.pem", dir);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_pki_pem_save(path, "-----BEGIN X-----\n", true, &e), 0);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        _cleanup_free_ char *back = sp_pki_pem_load(path, &e);
        ck_assert_str_eq(back, "-----BEGIN X-----\n");

        /* Over-long PEM input is refused before parsing, in memory and on disk. */
        size_t big = SP_PKI_MAX_PEM + 2;
        _cleanup_free_ char *huge = malloc(big);
        memset(huge, 'A', big - 1);
        huge[big - 1] = '\0';
        sp_pki_cert_info info;
        ck_assert_int_eq(sp_pki_cert_inspect(huge, &info, &e), -SP_E_TOO_LARGE);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_pki_pem_save(path, huge, false, &e), 0);
        ck_assert_ptr_null(sp_pki_pem_load(path, &e));
        ck_assert_int_eq(e->code, SP_E_TOO_LARGE);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_pki_cert_inspect("not a certificate", &info, &e), -SP_E_INVALID);
        sp_test_tmpdir_remove(dir);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("tls_pki");
        TCase *tc = tcase_create("pki");
        tcase_add_test(tc, roles_name_and_parse);
        tcase_add_test(tc, ca_create_save_load_roundtrip);
        tcase_add_test(tc, ca_create_rejects_bad_input);
        tcase_add_test(tc, issue_and_inspect);
        tcase_add_test(tc, issue_rejects_bad_input);
        tcase_add_test(tc, csr_create_and_sign);
        tcase_add_test(tc, csr_disallowed_role_refused);
        tcase_add_test(tc, csr_tampered_refused);
        tcase_add_test(tc, csr_with_two_roles_refused);
        tcase_add_test(tc, role_uri_must_be_exactly_one);
        tcase_add_test(tc, pem_files_and_bounds);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
