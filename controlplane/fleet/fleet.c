/* SPDX-License-Identifier: Apache-2.0 */
/* The fleet object, its TLS contexts and identity hook, and the checks on what workers send. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/cleanup.h"
#include "space/tls.h"
#include "space/json.h"

#define DEFAULT_CERT_DAYS 365
#define DEFAULT_HEARTBEAT_MS 2000
#define HEARTBEAT_MS_MIN PR_CP_HEARTBEAT_MS_MIN
#define HEARTBEAT_MS_MAX PR_CP_HEARTBEAT_MS_MAX

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

cp_fleet *cp_fleet_new(cp_db *db, const sp_pki_ca *ca, const cp_fleet_config *cfg, sp_error **err)
{
        cp_fleet_config c = cfg ? *cfg : (cp_fleet_config){0};
        if (!c.cert_days)
                c.cert_days = DEFAULT_CERT_DAYS;
        if (!c.heartbeat_ms)
                c.heartbeat_ms = DEFAULT_HEARTBEAT_MS;
        if (c.operation_deadline_s <= 0)
                c.operation_deadline_s = 600;
        if (c.cert_days < 1 || c.cert_days > SP_PKI_MAX_DAYS)
                return sp_error_set(err, SP_E_INVALID, "worker certificate validity must be 1 to %d days",
                                    SP_PKI_MAX_DAYS),
                       NULL;
        if (c.heartbeat_ms < HEARTBEAT_MS_MIN || c.heartbeat_ms > HEARTBEAT_MS_MAX)
                return sp_error_set(err, SP_E_INVALID, "heartbeat interval must be %d to %d ms", HEARTBEAT_MS_MIN,
                                    HEARTBEAT_MS_MAX),
                       NULL;
        if (!db || !ca)
                return sp_error_set(err, SP_E_INVALID, "a fleet needs the database and the cluster CA"), NULL;
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, err);
        if (!ca_pem)
                return NULL;
        cp_fleet *f = calloc(1, sizeof(*f));
        if (!f)
                return sp_error_set(err, SP_E_LIMIT, "out of memory"), NULL;
        f->db = db;
        f->ca = ca;
        f->ca_pem = TAKE_PTR(ca_pem);
        f->cfg = c;
        return f;
}

cp_fleet *cp_fleet_free(cp_fleet *f)
{
        if (f) {
                free(f->ca_pem);
                free(f);
        }
        return NULL;
}

int cp_fleet_register(cp_fleet *f, sp_rpc_server *srv, sp_error **err)
{
        const sp_rpc_method methods[] = {
                {"Join", SP_RPC_UNAUTHENTICATED, false, cp__fleet_join, f},
                {"Heartbeat", SP_ROLE_WORKER, false, cp__fleet_heartbeat, f},
                {"TokenKeys", SP_ROLE_WORKER | SP_ROLE_DATAPLANE, false, cp__fleet_token_keys, f},
                {"RevokedKeys", SP_ROLE_WORKER | SP_ROLE_DATAPLANE, false, cp__fleet_revoked_keys, f},
                {"ResolveSandbox", SP_ROLE_DATAPLANE, false, cp__fleet_resolve_sandbox, f},
                {"DrainSelf", SP_ROLE_WORKER, false, cp__fleet_drain_self, f},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++)
                if (sp_rpc_server_register(srv, &methods[i], err) < 0)
                        return sp_error_wrap(err, "fleet");
        return 0;
}

int cp_fleet_tls(const sp_pki_ca *ca, const char *name, const char *const *sans, int days, SSL_CTX **ret_server,
                 SSL_CTX **ret_client, sp_error **err)
{
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, err);
        _cleanup_free_ char *cert = NULL, *key = NULL;
        if (!ca_pem || sp_pki_issue(ca, SP_ROLE_CONTROLPLANE, name, sans, days, &cert, &key, err) < 0)
                return sp_error_wrap(err, "control-plane certificate");
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config sc = {.ca_pem = ca_pem,
                            .cert_pem = cert,
                            .key_pem = key,
                            .peer_roles = SP_ROLE_ALL,
                            .peer_optional = true,
                            .alpn = alpn};
        sp_tls_config cc = {
                .ca_pem = ca_pem, .cert_pem = cert, .key_pem = key, .peer_roles = SP_ROLE_WORKER, .alpn = alpn};
        _cleanup_(SSL_CTX_freep) SSL_CTX *server = NULL, *client = NULL;
        bool failed = (ret_server && !(server = sp_tls_server_ctx_new(&sc, err))) ||
                      (ret_client && !(client = sp_tls_client_ctx_new(&cc, err)));
        sp_explicit_bzero(key, strlen(key));
        if (failed)
                return sp_error_wrap(err, "control-plane TLS");
        if (ret_server)
                *ret_server = TAKE_PTR(server);
        if (ret_client)
                *ret_client = TAKE_PTR(client);
        return 0;
}

int cp_fleet_identity(SSL *ssl, void *userdata, unsigned *ret_role, char **ret_name, sp_error **err)
{
        (void)userdata;
        /* The handshake already refused a certificate that does not verify;
         * what is left is a good one, or none (a worker that has not joined). */
        if (!SSL_get0_peer_certificate(ssl)) {
                *ret_role = 0;
                *ret_name = NULL;
                return 0;
        }
        sp_role role;
        if (sp_tls_peer_identity(ssl, &role, ret_name, err) < 0)
                return -SP_E_UNAUTHENTICATED;
        *ret_role = (unsigned)role;
        return 0;
}

int cp_fleet_worker_key(cp_db *db, const char *worker_id, char out[static CP_FLEET_WORKER_KEY_MAX])
{
        const char *params[] = {worker_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        sp_error *e = NULL;
        if (cp_db_exec(db, "SELECT coalesce(cert_serial, '') FROM workers WHERE id = $1", 1, params, &res, &e) < 0 ||
            PQntuples(res) != 1) {
                sp_error_free(e);
                snprintf(out, CP_FLEET_WORKER_KEY_MAX, "%s", worker_id);
                return -1;
        }
        cp_fleet_worker_key_of(worker_id, PQgetvalue(res, 0, 0), out);
        return 0;
}

void cp_fleet_worker_key_of(const char *worker_id, const char *cert_serial, char out[static CP_FLEET_WORKER_KEY_MAX])
{
        snprintf(out, CP_FLEET_WORKER_KEY_MAX, "%s/%s", worker_id, cert_serial ? cert_serial : "");
}

int cp_fleet_verify_worker(SSL *ssl, const char *pool_key, void *userdata, sp_error **err)
{
        cp_db *db = userdata;
        _cleanup_free_ char *name = NULL;
        char serial[SP_TLS_SERIAL_MAX + 1], key[CP_FLEET_WORKER_KEY_MAX];
        /* "wkr_…/serial" (cp_fleet_worker_key): the serial the connection was made for */
        snprintf(key, sizeof(key), "%s", pool_key);
        char *slash = strchr(key, '/');
        const char *made_for = slash ? slash + 1 : NULL;
        if (slash)
                *slash = '\0';
        if (sp_tls_peer_identity(ssl, NULL, &name, err) < 0 || sp_tls_peer_serial(ssl, serial) < 0)
                return sp_error_set(err, SP_E_PERMISSION, "worker %.64s: its certificate names no worker", key);
        if (made_for && *made_for && strcmp(made_for, serial) != 0)
                return sp_error_set(err, SP_E_PERMISSION,
                                    "the server at worker %.64s's address presents a certificate of '%.64s' that is "
                                    "not the worker's",
                                    key, name);
        const char *params[] = {key};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db, "SELECT name, coalesce(cert_serial, '') FROM workers WHERE id = $1", 1, params, &res, err) <
            0)
                return sp_error_wrap(err, "worker %.64s", key);
        if (PQntuples(res) != 1)
                return sp_error_set(err, SP_E_PERMISSION, "worker %.64s is not in this cluster", key);
        const char *want = PQgetvalue(res, 0, 0), *want_serial = PQgetvalue(res, 0, 1);
        if (strcmp(want, name) != 0)
                return sp_error_set(err, SP_E_PERMISSION,
                                    "the server at worker %.64s's address is worker '%.64s', not '%.64s'", key, name,
                                    want);
        if (*want_serial && strcmp(want_serial, serial) != 0)
                return sp_error_set(err, SP_E_PERMISSION,
                                    "the server at worker %.64s's address presents a certificate of '%.64s' that a "
                                    "later join replaced",
                                    key, name);
        return 0;
}

bool cp__fleet_cert_superseded(const char *name, const char *current, const char *presented, sp_error **err)
{
        if (!current || !*current || (presented && strcmp(current, presented) == 0))
                return false;
        sp_error_set(err, SP_E_PERMISSION,
                     "this certificate of worker '%s' was replaced by a later join under that name: it no longer "
                     "speaks for the worker",
                     name);
        return true;
}

bool cp__fleet_name_ok(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > CP_FLEET_NAME_MAX || !(islower((unsigned char)s[0]) || isdigit((unsigned char)s[0])))
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
                        return false;
        }
        return true;
}

static bool dns_name_ok(const char *s, size_t n)
{
        if (n == 0 || n > 253 || s[0] == '.' || s[0] == '-')
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!isalnum((unsigned char)c) && c != '.' && c != '-')
                        return false;
        }
        return true;
}

bool cp_fleet_address_ok(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > CP_FLEET_ADDRESS_MAX)
                return false;
        const char *colon = strrchr(s, ':');
        if (!colon || colon == s)
                return false;
        const char *port = colon + 1;
        size_t plen = strlen(port);
        if (plen == 0 || plen > 5 || strspn(port, "0123456789") != plen || port[0] == '0' || atoi(port) > 65535)
                return false;
        char host[256];
        size_t hlen = (size_t)(colon - s);
        if (s[0] == '[') {
                if (hlen < 3 || s[hlen - 1] != ']' || hlen - 2 >= sizeof(host))
                        return false;
                memcpy(host, s + 1, hlen - 2);
                host[hlen - 2] = '\0';
                struct in6_addr a6;
                return inet_pton(AF_INET6, host, &a6) == 1 && !IN6_IS_ADDR_UNSPECIFIED(&a6);
        }
        if (hlen >= sizeof(host) || !dns_name_ok(s, hlen))
                return false;
        memcpy(host, s, hlen);
        host[hlen] = '\0';
        struct in_addr a4;
        if (inet_pton(AF_INET, host, &a4) == 1)
                return a4.s_addr != htonl(INADDR_ANY);
        return true;
}

bool cp__fleet_backend_ok(const char *s)
{
        return s && (strcmp(s, "jail") == 0 || strcmp(s, "qemu") == 0 || strcmp(s, "firecracker") == 0);
}

bool cp__fleet_object_name_ok(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        return n > 0 && n <= CP_FLEET_OBJECT_NAME_MAX &&
               strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

int cp__fleet_check_labels(json_object *labels, sp_error **err)
{
        if (!labels)
                return 0;
        json_object_object_foreach (labels, k, v) {
                size_t kl = strlen(k);
                if (strspn(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-") != kl)
                        return sp_error_set(err, SP_E_INVALID, "label key '%.128s' must be of [A-Za-z0-9._/-]", k);
                for (const char *p = json_object_get_string(v); *p; p++)
                        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                                return sp_error_set(err, SP_E_INVALID, "label '%.128s' must be printable ASCII", k);
        }
        return 0;
}
