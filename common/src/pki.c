/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster PKI: CA, component certificates with roles, CSRs. */
#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "pki_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"

struct sp_pki_ca {
        X509 *cert;
        EVP_PKEY *key;
};

/* Certificates are valid from a few minutes in the past, so that a peer whose
 * clock is slightly behind accepts a certificate issued a moment ago. */
#define BACKDATE_SECONDS 300

SP_DEFINE_CLEANUP(X509 *, X509_free)
SP_DEFINE_CLEANUP(X509_REQ *, X509_REQ_free)
SP_DEFINE_CLEANUP(EVP_PKEY *, EVP_PKEY_free)
SP_DEFINE_CLEANUP(BIO *, BIO_free)
SP_DEFINE_CLEANUP(X509_NAME *, X509_NAME_free)
SP_DEFINE_CLEANUP(GENERAL_NAMES *, GENERAL_NAMES_free)
SP_DEFINE_CLEANUP(X509_STORE *, X509_STORE_free)
SP_DEFINE_CLEANUP(X509_STORE_CTX *, X509_STORE_CTX_free)
SP_DEFINE_CLEANUP(BIGNUM *, BN_free)

static int pem_load(const char *path, char **ret, sp_error **err);

typedef STACK_OF(X509_EXTENSION) ext_stack;

static void exts_freep(ext_stack **p)
{
        if (*p)
                sk_X509_EXTENSION_pop_free(*p, X509_EXTENSION_free);
        *p = NULL;
}

static void secret_freep(char **p)
{
        if (*p) {
                sp_explicit_bzero(*p, strlen(*p));
                free(*p);
        }
        *p = NULL;
}

static const char *const role_names[] = {"controlplane", "worker", "dataplane"};

const char *sp_role_name(sp_role role)
{
        switch (role) {
        case SP_ROLE_CONTROLPLANE:
                return role_names[0];
        case SP_ROLE_WORKER:
                return role_names[1];
        case SP_ROLE_DATAPLANE:
                return role_names[2];
        }
        return NULL;
}

static int role_parse_n(const char *s, size_t n, sp_role *ret)
{
        for (size_t i = 0; i < SP_ARRAY_SIZE(role_names); i++)
                if (strlen(role_names[i]) == n && memcmp(role_names[i], s, n) == 0) {
                        *ret = (sp_role)(1u << i);
                        return 0;
                }
        return -1;
}

int sp_role_parse(const char *s, sp_role *ret, sp_error **err)
{
        if (!s || role_parse_n(s, strlen(s), ret) < 0)
                return sp_error_set(err, SP_E_INVALID,
                                    "unknown role '%.32s' (expected controlplane, worker or dataplane)", s ? s : "");
        return 0;
}

int sp__pki_ossl_error(sp_error **err, sp_errc code, const char *what)
{
        unsigned long e = ERR_peek_last_error();
        const char *reason = e ? ERR_reason_error_string(e) : NULL;
        ERR_clear_error();
        if (reason)
                return sp_error_set(err, code, "%s: %s", what, reason);
        return sp_error_set(err, code, "%s", what);
}

int sp__pki_pem_bio(const char *pem, const char *what, BIO **ret, sp_error **err)
{
        if (!pem)
                return sp_error_set(err, SP_E_INVALID, "%s: missing", what);
        size_t n = strnlen(pem, SP_PKI_MAX_PEM + 1);
        if (n > SP_PKI_MAX_PEM)
                return sp_error_set(err, SP_E_TOO_LARGE, "%s: longer than %d bytes", what, SP_PKI_MAX_PEM);
        BIO *b = BIO_new_mem_buf(pem, (int)n);
        if (!b)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, what);
        *ret = b;
        return 0;
}

int sp__pki_bio_string(BIO *b, char **ret, sp_error **err)
{
        char *data = NULL;
        long n = BIO_get_mem_data(b, &data);
        if (n <= 0 || !data)
                return sp_error_set(err, SP_E_INTERNAL, "empty PEM output");
        char *s = malloc((size_t)n + 1);
        if (!s)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        memcpy(s, data, (size_t)n);
        s[n] = '\0';
        *ret = s;
        return 0;
}

/* A pem_password_cb that refuses: an encrypted key is an error, never a
 * prompt on the terminal (OpenSSL's default). */
static int no_password(char *buf, int size, int rwflag, void *u)
{
        return -1;
}

int sp__pki_cert_parse(const char *pem, const char *what, X509 **ret, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = NULL;
        int r = sp__pki_pem_bio(pem, what, &b, err);
        if (r < 0)
                return r;
        X509 *x = PEM_read_bio_X509(b, NULL, no_password, NULL);
        if (!x)
                return sp__pki_ossl_error(err, SP_E_INVALID, what);
        *ret = x;
        return 0;
}

int sp__pki_key_parse(const char *pem, const char *what, EVP_PKEY **ret, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = NULL;
        int r = sp__pki_pem_bio(pem, what, &b, err);
        if (r < 0)
                return r;
        EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, no_password, NULL);
        if (!k)
                return sp__pki_ossl_error(err, SP_E_INVALID, what);
        *ret = k;
        return 0;
}

int sp__pki_store_new(const char *ca_pem, X509_STORE **ret, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = NULL;
        int r = sp__pki_pem_bio(ca_pem, "CA certificate", &b, err);
        if (r < 0)
                return r;
        _cleanup_(X509_STORE_freep) X509_STORE *store = X509_STORE_new();
        if (!store)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "trust store");
        int count = 0;
        for (;;) {
                _cleanup_(X509_freep) X509 *x = PEM_read_bio_X509(b, NULL, no_password, NULL);
                if (!x)
                        break;
                if (++count > SP__PKI_MAX_CA_CERTS)
                        return sp_error_set(err, SP_E_INVALID, "more than %d CA certificates", SP__PKI_MAX_CA_CERTS);
                if (X509_check_ca(x) < 1)
                        return sp_error_set(err, SP_E_INVALID, "CA certificate %d is not a CA", count);
                if (X509_STORE_add_cert(store, x) != 1)
                        return sp__pki_ossl_error(err, SP_E_INVALID, "CA certificate");
        }
        /* The loop ends on "no start line"; anything else is a broken PEM. */
        unsigned long e = ERR_peek_last_error();
        if (count == 0 || (e && ERR_GET_REASON(e) != PEM_R_NO_START_LINE))
                return sp__pki_ossl_error(err, SP_E_INVALID, "CA certificate");
        ERR_clear_error();
        X509_VERIFY_PARAM *param = X509_STORE_get0_param(store);
        X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT);
        X509_VERIFY_PARAM_set_depth(param, 0);
        *ret = TAKE_PTR(store);
        return 0;
}

/* Component names: 1..SP_PKI_MAX_NAME bytes of [A-Za-z0-9._-]. */
static bool name_valid(const char *s, size_t n)
{
        if (n == 0 || n > SP_PKI_MAX_NAME)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '-'))
                        return false;
        }
        return true;
}

/* A host name: dot-separated labels of 1..63 letters, digits and hyphens,
 * not starting or ending with a hyphen; no wildcards. */
static bool dns_valid(const char *s, size_t n)
{
        if (n == 0 || n > SP_PKI_MAX_DNS)
                return false;
        size_t label = 0;
        for (size_t i = 0; i <= n; i++) {
                char c = i < n ? s[i] : '.';
                if (c == '.') {
                        if (label == 0 || label > 63 || s[i - 1] == '-')
                                return false;
                        label = 0;
                } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                           (c == '-' && label > 0)) {
                        label++;
                } else {
                        return false;
                }
        }
        return true;
}

static int subject_name(const X509_NAME *subject, char *name)
{
        name[0] = '\0';
        int idx = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
        if (idx < 0 || X509_NAME_get_index_by_NID(subject, NID_commonName, idx) >= 0)
                return -1;
        ASN1_STRING *cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, idx));
        unsigned char *utf8 = NULL;
        int n = ASN1_STRING_to_UTF8(&utf8, cn);
        if (n < 0) {
                ERR_clear_error();
                return -1;
        }
        int r = -1;
        if (name_valid((const char *)utf8, (size_t)n)) {
                memcpy(name, utf8, (size_t)n);
                name[n] = '\0';
                r = 0;
        }
        OPENSSL_free(utf8);
        return r;
}

int sp__pki_x509_name(X509 *x, char *name)
{
        return subject_name(X509_get_subject_name(x), name);
}

/* Counts role URIs (any case of the prefix counts, so that a look-alike
 * cannot hide a second role) and parses the one there should be. */
static sp_role names_role(const GENERAL_NAMES *names)
{
        int count = 0;
        sp_role role = 0;
        for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
                const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
                if (g->type != GEN_URI)
                        continue;
                const char *s = (const char *)ASN1_STRING_get0_data(g->d.uniformResourceIdentifier);
                size_t n = (size_t)ASN1_STRING_length(g->d.uniformResourceIdentifier);
                size_t plen = strlen(SP_PKI_ROLE_URI_PREFIX);
                if (n < plen || strncasecmp(s, SP_PKI_ROLE_URI_PREFIX, plen) != 0)
                        continue;
                count++;
                sp_role r;
                if (memcmp(s, SP_PKI_ROLE_URI_PREFIX, plen) == 0 && role_parse_n(s + plen, n - plen, &r) == 0)
                        role = r;
                else
                        role = 0;
        }
        return count == 1 ? role : 0;
}

sp_role sp__pki_x509_role(X509 *x)
{
        int crit = 0;
        /* Several SAN extensions give crit == -2 and NULL: no role. */
        _cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *names = X509_get_ext_d2i(x, NID_subject_alt_name, &crit, NULL);
        ERR_clear_error();
        if (!names)
                return 0;
        return names_role(names);
}

static GENERAL_NAME *general_name_new(int type, const void *data, size_t n)
{
        ASN1_STRING *s = type == GEN_IPADD ? ASN1_OCTET_STRING_new() : ASN1_IA5STRING_new();
        GENERAL_NAME *g = GENERAL_NAME_new();
        if (!s || !g || !ASN1_STRING_set(s, data, (int)n)) {
                ASN1_STRING_free(s);
                GENERAL_NAME_free(g);
                return NULL;
        }
        GENERAL_NAME_set0_value(g, type, s);
        return g;
}

static int names_push(GENERAL_NAMES *names, int type, const void *data, size_t n, sp_error **err)
{
        GENERAL_NAME *g = general_name_new(type, data, n);
        if (!g || !sk_GENERAL_NAME_push(names, g)) {
                GENERAL_NAME_free(g);
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "subject alternative name");
        }
        return 0;
}

/* Validates (role, name, sans) and builds the subject alternative names: the
 * role URI first, then each SAN as an IP address if it parses as one, else
 * as a DNS name. */
static int names_build(sp_role role, const char *name, const char *const *sans, GENERAL_NAMES **ret, sp_error **err)
{
        const char *rname = sp_role_name(role);
        if (!rname)
                return sp_error_set(err, SP_E_INVALID, "invalid role %d", (int)role);
        if (!name || !name_valid(name, strlen(name)))
                return sp_error_set(err, SP_E_INVALID,
                                    "invalid name '%.64s' (1 to %d characters of letters, digits, '.', '_' and '-')",
                                    name ? name : "", SP_PKI_MAX_NAME);
        _cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *names = GENERAL_NAMES_new();
        if (!names)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "subject alternative names");
        char uri[64];
        snprintf(uri, sizeof(uri), "%s%s", SP_PKI_ROLE_URI_PREFIX, rname);
        int r = names_push(names, GEN_URI, uri, strlen(uri), err);
        if (r < 0)
                return r;
        size_t count = 0;
        for (const char *const *s = sans; s && *s; s++) {
                if (++count > SP_PKI_MAX_SANS)
                        return sp_error_set(err, SP_E_INVALID, "more than %d subject alternative names",
                                            SP_PKI_MAX_SANS);
                unsigned char ip[16];
                if (inet_pton(AF_INET, *s, ip) == 1)
                        r = names_push(names, GEN_IPADD, ip, 4, err);
                else if (inet_pton(AF_INET6, *s, ip) == 1)
                        r = names_push(names, GEN_IPADD, ip, 16, err);
                else if (dns_valid(*s, strlen(*s)))
                        r = names_push(names, GEN_DNS, *s, strlen(*s), err);
                else
                        return sp_error_set(err, SP_E_INVALID,
                                            "subject alternative name '%.64s' is neither an IP address nor a DNS name",
                                            *s);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(names);
        return 0;
}

static int days_check(int days, sp_error **err)
{
        if (days < 1 || days > SP_PKI_MAX_DAYS)
                return sp_error_set(err, SP_E_INVALID, "validity must be between 1 and %d days", SP_PKI_MAX_DAYS);
        return 0;
}

static int key_new(EVP_PKEY **ret, sp_error **err)
{
        EVP_PKEY *k = EVP_EC_gen("P-256");
        if (!k)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "generate key");
        *ret = k;
        return 0;
}

static bool key_is_p256(EVP_PKEY *k)
{
        char group[32];
        size_t n = 0;
        if (!EVP_PKEY_is_a(k, "EC") || EVP_PKEY_get_group_name(k, group, sizeof(group), &n) != 1) {
                ERR_clear_error();
                return false;
        }
        return strcmp(group, "prime256v1") == 0 || strcmp(group, "P-256") == 0;
}

static int serial_set(X509 *x, sp_error **err)
{
        unsigned char raw[16];
        _cleanup_(BN_freep) BIGNUM *bn = NULL;
        do {
                if (RAND_bytes(raw, sizeof(raw)) != 1)
                        return sp__pki_ossl_error(err, SP_E_INTERNAL, "random serial");
                BN_free(bn);
                bn = BN_bin2bn(raw, sizeof(raw), NULL);
                if (!bn)
                        return sp__pki_ossl_error(err, SP_E_INTERNAL, "random serial");
        } while (BN_is_zero(bn));
        if (!BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "random serial");
        return 0;
}

static int ext_add(X509 *x, X509V3_CTX *v3, int nid, const char *value, sp_error **err)
{
        X509_EXTENSION *ext = X509V3_EXT_nconf_nid(NULL, v3, nid, value);
        if (!ext || !X509_add_ext(x, ext, -1)) {
                X509_EXTENSION_free(ext);
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "certificate extension");
        }
        X509_EXTENSION_free(ext);
        return 0;
}

/* Builds and signs a certificate for subject_key. issuer NULL makes it
 * self-signed (the CA); names NULL omits the SAN extension. */
static int cert_build(const char *cn, EVP_PKEY *subject_key, X509 *issuer, EVP_PKEY *issuer_key, GENERAL_NAMES *names,
                      int days, X509 **ret, sp_error **err)
{
        bool ca = issuer == NULL;
        _cleanup_(X509_freep) X509 *x = X509_new();
        _cleanup_(X509_NAME_freep) X509_NAME *subject = X509_NAME_new();
        if (!x || !subject || !X509_set_version(x, X509_VERSION_3))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "new certificate");
        int r = serial_set(x, err);
        if (r < 0)
                return r;
        if (!X509_gmtime_adj(X509_getm_notBefore(x), -BACKDATE_SECONDS) ||
            !X509_time_adj_ex(X509_getm_notAfter(x), days, 0, NULL))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "certificate validity");
        /* Never valid past the CA: such a certificate would fail anyway. */
        if (!ca && ASN1_TIME_compare(X509_get0_notAfter(x), X509_get0_notAfter(issuer)) > 0 &&
            !X509_set1_notAfter(x, X509_get0_notAfter(issuer)))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "certificate validity");
        if (!X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_UTF8, (const unsigned char *)"space", -1, -1, 0) ||
            !X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) ||
            !X509_set_subject_name(x, subject) ||
            !X509_set_issuer_name(x, ca ? subject : X509_get_subject_name(issuer)) || !X509_set_pubkey(x, subject_key))
                return sp__pki_ossl_error(err, SP_E_INVALID, "certificate subject");

        X509V3_CTX v3;
        X509V3_set_ctx_nodb(&v3);
        X509V3_set_ctx(&v3, ca ? x : issuer, x, NULL, NULL, 0);
        if (ca) {
                if ((r = ext_add(x, &v3, NID_basic_constraints, "critical,CA:TRUE,pathlen:0", err)) < 0 ||
                    (r = ext_add(x, &v3, NID_key_usage, "critical,keyCertSign,cRLSign", err)) < 0 ||
                    (r = ext_add(x, &v3, NID_subject_key_identifier, "hash", err)) < 0)
                        return r;
        } else {
                if ((r = ext_add(x, &v3, NID_basic_constraints, "critical,CA:FALSE", err)) < 0 ||
                    (r = ext_add(x, &v3, NID_key_usage, "critical,digitalSignature", err)) < 0 ||
                    (r = ext_add(x, &v3, NID_ext_key_usage, "serverAuth,clientAuth", err)) < 0 ||
                    (r = ext_add(x, &v3, NID_subject_key_identifier, "hash", err)) < 0 ||
                    (r = ext_add(x, &v3, NID_authority_key_identifier, "keyid:always", err)) < 0)
                        return r;
        }
        /* Built from GENERAL_NAMES rather than a configuration string, so that
         * no character of a name can smuggle in another entry. */
        if (names && X509_add1_ext_i2d(x, NID_subject_alt_name, names, 0, X509V3_ADD_DEFAULT) != 1)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "subject alternative names");
        if (X509_sign(x, ca ? subject_key : issuer_key, EVP_sha256()) <= 0)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "sign certificate");
        *ret = TAKE_PTR(x);
        return 0;
}

static int cert_pem(X509 *x, char **ret, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_mem());
        if (!b || !PEM_write_bio_X509(b, x))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "write certificate");
        return sp__pki_bio_string(b, ret, err);
}

static int key_pem(EVP_PKEY *k, char **ret, sp_error **err)
{
        /* A secure-memory BIO clears the key text when it is freed. */
        _cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_secmem());
        if (!b || !PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "write private key");
        return sp__pki_bio_string(b, ret, err);
}

static int64_t asn1_time_unix(const ASN1_TIME *t)
{
        struct tm tm;
        if (!t || ASN1_TIME_to_tm(t, &tm) != 1) {
                ERR_clear_error();
                return 0;
        }
        return (int64_t)timegm(&tm);
}

static void info_fill(X509 *x, sp_pki_cert_info *info)
{
        memset(info, 0, sizeof(*info));
        info->role = sp__pki_x509_role(x);
        (void)sp__pki_x509_name(x, info->name);
        info->not_before = asn1_time_unix(X509_get0_notBefore(x));
        info->not_after = asn1_time_unix(X509_get0_notAfter(x));
        BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
        char *hex = bn ? BN_bn2hex(bn) : NULL;
        if (hex) {
                size_t i = 0;
                for (; hex[i] && i < sizeof(info->serial) - 1; i++)
                        info->serial[i] = (char)(hex[i] >= 'A' && hex[i] <= 'F' ? hex[i] - 'A' + 'a' : hex[i]);
                info->serial[i] = '\0';
        }
        OPENSSL_free(hex);
        BN_free(bn);
        ERR_clear_error();
}

int sp_pki_ca_create(const char *common_name, int days, sp_pki_ca **ret, sp_error **err)
{
        size_t n = common_name ? strlen(common_name) : 0;
        if (n == 0 || n > SP_PKI_MAX_NAME)
                return sp_error_set(err, SP_E_INVALID, "CA name must be 1 to %d bytes", SP_PKI_MAX_NAME);
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)common_name[i] < 0x20 || (unsigned char)common_name[i] > 0x7e)
                        return sp_error_set(err, SP_E_INVALID, "CA name must be printable ASCII");
        int r = days_check(days, err);
        if (r < 0)
                return r;
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = NULL;
        _cleanup_(X509_freep) X509 *cert = NULL;
        if ((r = key_new(&key, err)) < 0 ||
            (r = cert_build(common_name, key, NULL, NULL, NULL, days, &cert, err)) < 0) {
                sp_error_wrap(err, "create CA");
                return r;
        }
        sp_pki_ca *ca = calloc(1, sizeof(*ca));
        if (!ca)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        ca->cert = TAKE_PTR(cert);
        ca->key = TAKE_PTR(key);
        *ret = ca;
        return 0;
}

int sp_pki_ca_load(const char *cert_pem, const char *key_pem, sp_pki_ca **ret, sp_error **err)
{
        _cleanup_(X509_freep) X509 *cert = NULL;
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = NULL;
        int r;
        if ((r = sp__pki_cert_parse(cert_pem, "CA certificate", &cert, err)) < 0 ||
            (r = sp__pki_key_parse(key_pem, "CA private key", &key, err)) < 0)
                return r;
        if (X509_check_private_key(cert, key) != 1)
                return sp__pki_ossl_error(err, SP_E_INVALID, "CA private key does not match its certificate");
        if (X509_check_ca(cert) < 1 || !(X509_get_key_usage(cert) & KU_KEY_CERT_SIGN))
                return sp_error_set(err, SP_E_INVALID, "certificate is not a CA allowed to sign certificates");
        sp_pki_ca *ca = calloc(1, sizeof(*ca));
        if (!ca)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        ca->cert = TAKE_PTR(cert);
        ca->key = TAKE_PTR(key);
        *ret = ca;
        return 0;
}

int sp_pki_ca_load_files(const char *cert_path, const char *key_path, sp_pki_ca **ret, sp_error **err)
{
        _cleanup_free_ char *cert = NULL;
        _cleanup_(secret_freep) char *key = NULL;
        int r;
        if ((r = pem_load(cert_path, &cert, err)) < 0 || (r = pem_load(key_path, &key, err)) < 0)
                return r;
        return sp_pki_ca_load(cert, key, ret, err);
}

int sp_pki_ca_save_files(const sp_pki_ca *ca, const char *cert_path, const char *key_path, sp_error **err)
{
        _cleanup_free_ char *cert = NULL;
        _cleanup_(secret_freep) char *key = NULL;
        int r;
        if ((r = cert_pem(ca->cert, &cert, err)) < 0 || (r = key_pem(ca->key, &key, err)) < 0 ||
            /* The key first: a certificate on disk without its key is useless. */
            (r = sp_pki_pem_save(key_path, key, true, err)) < 0 ||
            (r = sp_pki_pem_save(cert_path, cert, false, err)) < 0) {
                sp_error_wrap(err, "save CA");
                return r;
        }
        return 0;
}

char *sp_pki_ca_cert_pem(const sp_pki_ca *ca, sp_error **err)
{
        char *pem = NULL;
        return cert_pem(ca->cert, &pem, err) < 0 ? NULL : pem;
}

char *sp_pki_ca_key_pem(const sp_pki_ca *ca, sp_error **err)
{
        char *pem = NULL;
        return key_pem(ca->key, &pem, err) < 0 ? NULL : pem;
}

sp_pki_ca *sp_pki_ca_free(sp_pki_ca *ca)
{
        if (ca) {
                X509_free(ca->cert);
                EVP_PKEY_free(ca->key);
                free(ca);
        }
        return NULL;
}

/* Issues a certificate for pub, filling *ret_pem and ret_info (optional). */
static int issue_for_key(const sp_pki_ca *ca, EVP_PKEY *pub, sp_role role, const char *name, const char *const *sans,
                         int days, char **ret_pem, sp_pki_cert_info *ret_info, sp_error **err)
{
        _cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *names = NULL;
        _cleanup_(X509_freep) X509 *x = NULL;
        char *pem = NULL;
        int r;
        if ((r = days_check(days, err)) < 0 || (r = names_build(role, name, sans, &names, err)) < 0 ||
            (r = cert_build(name, pub, ca->cert, ca->key, names, days, &x, err)) < 0 ||
            (r = cert_pem(x, &pem, err)) < 0)
                return r;
        if (ret_info)
                info_fill(x, ret_info);
        *ret_pem = pem;
        return 0;
}

int sp_pki_issue(const sp_pki_ca *ca, sp_role role, const char *name, const char *const *sans, int days,
                 char **ret_cert_pem, char **ret_key_pem, sp_error **err)
{
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = NULL;
        _cleanup_free_ char *cert = NULL;
        char *kp = NULL;
        int r;
        if ((r = key_new(&key, err)) < 0 ||
            (r = issue_for_key(ca, key, role, name, sans, days, &cert, NULL, err)) < 0 ||
            (r = key_pem(key, &kp, err)) < 0) {
                sp_error_wrap(err, "issue certificate");
                return r;
        }
        *ret_cert_pem = TAKE_PTR(cert);
        *ret_key_pem = kp;
        return 0;
}

/* Builds and signs the request for (names, name) with key. */
static int csr_build(GENERAL_NAMES *names, const char *name, EVP_PKEY *key, char **ret, sp_error **err)
{
        _cleanup_(X509_REQ_freep) X509_REQ *req = X509_REQ_new();
        _cleanup_(X509_NAME_freep) X509_NAME *subject = X509_NAME_new();
        _cleanup_(exts_freep) ext_stack *exts = sk_X509_EXTENSION_new_null();
        if (!req || !subject || !exts)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "new CSR");
        X509_EXTENSION *san = X509V3_EXT_i2d(NID_subject_alt_name, 0, names);
        if (!san || !sk_X509_EXTENSION_push(exts, san)) {
                X509_EXTENSION_free(san);
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "CSR alternative names");
        }
        if (!X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_UTF8, (const unsigned char *)"space", -1, -1, 0) ||
            !X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8, (const unsigned char *)name, -1, -1, 0) ||
            !X509_REQ_set_subject_name(req, subject) || !X509_REQ_set_pubkey(req, key) ||
            !X509_REQ_add_extensions(req, exts) || X509_REQ_sign(req, key, EVP_sha256()) <= 0)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "sign CSR");
        _cleanup_(BIO_freep) BIO *b = BIO_new(BIO_s_mem());
        if (!b || !PEM_write_bio_X509_REQ(b, req))
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "write CSR");
        return sp__pki_bio_string(b, ret, err);
}

int sp_pki_csr_create(sp_role role, const char *name, const char *const *sans, char **ret_csr_pem, char **ret_key_pem,
                      sp_error **err)
{
        _cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *names = NULL;
        _cleanup_(EVP_PKEY_freep) EVP_PKEY *key = NULL;
        _cleanup_free_ char *csr = NULL;
        char *kp = NULL;
        int r;
        if ((r = names_build(role, name, sans, &names, err)) < 0 || (r = key_new(&key, err)) < 0 ||
            (r = csr_build(names, name, key, &csr, err)) < 0 || (r = key_pem(key, &kp, err)) < 0) {
                sp_error_wrap(err, "create CSR");
                return r;
        }
        *ret_csr_pem = TAKE_PTR(csr);
        *ret_key_pem = kp;
        return 0;
}

/* Reads the CSR's subject alternative names into a role and SAN strings
 * (sans: SP_PKI_MAX_SANS slots), refusing anything we would not issue. */
static int csr_names(X509_REQ *req, sp_role *ret_role, char sans[][SP_PKI_MAX_DNS + 1], size_t *ret_count,
                     sp_error **err)
{
        _cleanup_(exts_freep) ext_stack *exts = X509_REQ_get_extensions(req);
        int crit = 0;
        /* Several SAN extensions give crit == -2 and NULL. */
        _cleanup_(GENERAL_NAMES_freep) GENERAL_NAMES *names =
                exts ? X509V3_get_d2i(exts, NID_subject_alt_name, &crit, NULL) : NULL;
        ERR_clear_error();
        if (!names)
                return sp_error_set(err, SP_E_INVALID, "CSR must have one subject alternative name extension");
        sp_role role = names_role(names);
        if (!role)
                return sp_error_set(err, SP_E_INVALID, "CSR does not name exactly one valid role");
        size_t count = 0;
        for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
                const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
                if (g->type == GEN_URI) {
                        /* names_role() found exactly one role URI; any other URI is not ours to sign. */
                        const char *s = (const char *)ASN1_STRING_get0_data(g->d.uniformResourceIdentifier);
                        size_t n = (size_t)ASN1_STRING_length(g->d.uniformResourceIdentifier);
                        size_t plen = strlen(SP_PKI_ROLE_URI_PREFIX);
                        if (n < plen || strncasecmp(s, SP_PKI_ROLE_URI_PREFIX, plen) != 0)
                                return sp_error_set(err, SP_E_INVALID, "CSR asks for an unsupported URI name");
                        continue;
                }
                if (g->type != GEN_DNS && g->type != GEN_IPADD)
                        return sp_error_set(err, SP_E_INVALID, "CSR asks for an unsupported kind of alternative name");
                if (count >= SP_PKI_MAX_SANS)
                        return sp_error_set(err, SP_E_INVALID, "CSR has more than %d alternative names",
                                            SP_PKI_MAX_SANS);
                const ASN1_STRING *v = g->type == GEN_DNS ? g->d.dNSName : g->d.iPAddress;
                const unsigned char *d = ASN1_STRING_get0_data(v);
                size_t n = (size_t)ASN1_STRING_length(v);
                if (g->type == GEN_DNS) {
                        if (!dns_valid((const char *)d, n))
                                return sp_error_set(err, SP_E_INVALID, "CSR has an invalid DNS name");
                        memcpy(sans[count], d, n);
                        sans[count][n] = '\0';
                } else if (n == 4 || n == 16) {
                        inet_ntop(n == 4 ? AF_INET : AF_INET6, d, sans[count], SP_PKI_MAX_DNS + 1);
                } else {
                        return sp_error_set(err, SP_E_INVALID, "CSR has an invalid IP address");
                }
                count++;
        }
        *ret_role = role;
        *ret_count = count;
        return 0;
}

char *sp_pki_csr_sign(const sp_pki_ca *ca, const char *csr_pem, unsigned allowed_roles, int days,
                      sp_pki_cert_info *ret_info, sp_error **err)
{
        _cleanup_(BIO_freep) BIO *b = NULL;
        if (sp__pki_pem_bio(csr_pem, "CSR", &b, err) < 0)
                return NULL;
        _cleanup_(X509_REQ_freep) X509_REQ *req = PEM_read_bio_X509_REQ(b, NULL, no_password, NULL);
        if (!req)
                return sp__pki_ossl_error(err, SP_E_INVALID, "CSR"), NULL;
        EVP_PKEY *pub = X509_REQ_get0_pubkey(req);
        if (!pub || !key_is_p256(pub))
                return sp_error_set(err, SP_E_INVALID, "CSR key must be ECDSA P-256"), NULL;
        if (X509_REQ_verify(req, pub) != 1)
                return sp__pki_ossl_error(err, SP_E_INVALID, "CSR signature does not verify"), NULL;
        char name[SP_PKI_MAX_NAME + 1];
        if (subject_name(X509_REQ_get_subject_name(req), name) < 0)
                return sp_error_set(err, SP_E_INVALID, "CSR subject must have exactly one valid common name"), NULL;

        sp_role role = 0;
        size_t count = 0;
        char sans[SP_PKI_MAX_SANS][SP_PKI_MAX_DNS + 1];
        if (csr_names(req, &role, sans, &count, err) < 0)
                return NULL;
        if (!(role & allowed_roles))
                return sp_error_set(err, SP_E_PERMISSION, "CSR asks for role '%s', which may not be issued here",
                                    sp_role_name(role)),
                       NULL;
        const char *sanv[SP_PKI_MAX_SANS + 1];
        for (size_t i = 0; i < count; i++)
                sanv[i] = sans[i];
        sanv[count] = NULL;
        char *pem = NULL;
        if (issue_for_key(ca, pub, role, name, sanv, days, &pem, ret_info, err) < 0) {
                sp_error_wrap(err, "sign CSR");
                return NULL;
        }
        return pem;
}

int sp_pki_cert_inspect(const char *cert_pem, sp_pki_cert_info *ret, sp_error **err)
{
        _cleanup_(X509_freep) X509 *x = NULL;
        int r = sp__pki_cert_parse(cert_pem, "certificate", &x, err);
        if (r < 0)
                return r;
        info_fill(x, ret);
        return 0;
}

int sp_pki_cert_verify(const char *ca_pem, const char *cert_pem, unsigned accepted_roles, sp_pki_cert_info *ret_info,
                       sp_error **err)
{
        if ((accepted_roles & SP_ROLE_ALL) == 0)
                return sp_error_set(err, SP_E_INVALID, "no accepted role");
        _cleanup_(X509_STORE_freep) X509_STORE *store = NULL;
        _cleanup_(X509_freep) X509 *x = NULL;
        int r;
        if ((r = sp__pki_store_new(ca_pem, &store, err)) < 0 ||
            (r = sp__pki_cert_parse(cert_pem, "certificate", &x, err)) < 0)
                return r;
        _cleanup_(X509_STORE_CTX_freep) X509_STORE_CTX *ctx = X509_STORE_CTX_new();
        if (!ctx || X509_STORE_CTX_init(ctx, store, x, NULL) != 1)
                return sp__pki_ossl_error(err, SP_E_INTERNAL, "verify certificate");
        if (X509_verify_cert(ctx) != 1) {
                int e = X509_STORE_CTX_get_error(ctx);
                ERR_clear_error();
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "certificate does not verify: %s",
                                    X509_verify_cert_error_string(e));
        }
        sp_pki_cert_info info;
        info_fill(x, &info);
        if (!info.role)
                return sp_error_set(err, SP_E_PERMISSION, "certificate carries no valid role");
        if (!(info.role & accepted_roles))
                return sp_error_set(err, SP_E_PERMISSION, "certificate role '%s' is not accepted",
                                    sp_role_name(info.role));
        if (!info.name[0])
                return sp_error_set(err, SP_E_PERMISSION, "certificate carries no valid name");
        if (ret_info)
                *ret_info = info;
        return 0;
}

static int pem_load(const char *path, char **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        int r = sp_file_read(path, SP_PKI_MAX_PEM, &b, err);
        if (r < 0)
                return r;
        if (b.len == 0 || strlen(b.data) != b.len) {
                sp_explicit_bzero(b.data, b.len);
                return sp_error_set(err, SP_E_INVALID, "%s is not a PEM file", path);
        }
        *ret = sp_buf_steal(&b);
        return 0;
}

char *sp_pki_pem_load(const char *path, sp_error **err)
{
        char *pem = NULL;
        return pem_load(path, &pem, err) < 0 ? NULL : pem;
}

int sp_pki_pem_save(const char *path, const char *pem, bool secret, sp_error **err)
{
        if (!pem)
                return sp_error_set(err, SP_E_INVALID, "no PEM to write to %s", path);
        return sp_file_write_atomic(path, pem, strlen(pem), secret ? 0600 : 0644, err);
}
