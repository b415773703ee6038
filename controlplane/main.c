/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-controlplane: the public API, the internal RPC workers and data
 * planes call (join, heartbeat, token keys), and the controllers — on one
 * event loop. Several replicas may
 * serve at once against one PostgreSQL; the controllers run on the one that
 * holds the leader lock.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "ctrl/ctrl.h"
#include "fleet/fleet.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/daemon.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/tls.h"
#include "store/db.h"
#include "store/keyring.h"
#include "store/keys.h"
#include "store/quotas.h"
#include "store/secrets.h"
#include "store/tokenkeys.h"

typedef struct cp_cfg {
        char *database, *listen, *rpc_listen, *rpc_names, *tls_cert, *tls_key, *admin_key_file, *ca_out, *name;
        char *dataplane_url, *ingress_domain, *token_public_key_out, *debootstrap_mirror, *secrets_key_file;
        char *log_level, *log_format;
        int64_t idle_timeout_s, heartbeat_ms, tick_ms, attach_token_ttl_s, worker_call_timeout_ms;
        int64_t template_upload_max, tenant_template_max, tenant_template_builds, max_waiters;
        int64_t quota[CP_QUOTA_COUNT]; /* the cluster's default quotas, by CP_QUOTA_* (template_bytes unused) */
        int64_t rate_key_rps, rate_key_burst, rate_tenant_rps, rate_tenant_burst, rate_create_rps, rate_create_burst;
        int64_t audit_retention_us, audit_login_failure_rate;
        bool create_database, create_fast_path, bootstrap_only;
} cp_cfg;

static const sp_config_def defs[] = {
        {"database", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, database), 0, 0,
         "PostgreSQL connection string or URI (required)"},
        {"create-database", SP_CONFIG_BOOL, "false", offsetof(cp_cfg, create_database), 0, 0,
         "create the database --database names when the server has none of that name (through its 'postgres' "
         "database; the user needs CREATEDB)"},
        {"create-fast-path", SP_CONFIG_BOOL, "true", offsetof(cp_cfg, create_fast_path), 0, 0,
         "one-hop creates: a create a worker's warm pool can serve is placed and sent to that worker by the request "
         "itself and answered running (--no-create-fast-path: every create goes through the controller)"},
        {"bootstrap-only", SP_CONFIG_BOOL, "false", offsetof(cp_cfg, bootstrap_only), 0, 0,
         "make what a first start makes (the schema, the cluster CA, the first admin key, the token keys), write "
         "--ca-out and --token-public-key-out, and exit without serving (a Kubernetes bootstrap Job: "
         "docs/kubernetes.md)"},
        {"listen", SP_CONFIG_STRING, "127.0.0.1:7070", offsetof(cp_cfg, listen), 0, 0, "the public API (HOST:PORT)"},
        {"tls-cert", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, tls_cert), 0, 0,
         "serve the public API over HTTPS with this certificate (PEM file)"},
        {"tls-key", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, tls_key), 0, 0, "the key of --tls-cert (PEM file)"},
        {"rpc-listen", SP_CONFIG_STRING, "127.0.0.1:7073", offsetof(cp_cfg, rpc_listen), 0, 0,
         "the internal RPC workers call: join and heartbeat (mTLS)"},
        {"rpc-names", SP_CONFIG_STRING, "127.0.0.1,localhost", offsetof(cp_cfg, rpc_names), 0, 0,
         "names and addresses in this replica's cluster certificate (comma-separated)"},
        {"admin-key-file", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, admin_key_file), 0, 0,
         "first start: the admin key is read from this file, or written to it (0600) if it does not exist; "
         "without it the key is printed once on stderr"},
        {"ca-out", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, ca_out), 0, 0,
         "write the cluster CA certificate here (what workers pass as --tls-ca)"},
        {"secrets-key-file", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, secrets_key_file), 0, 0,
         "the cluster key ring that seals secrets' values (docs/secrets.md): lines '<key-id> <base64 of 32 bytes>', "
         "the first one wraps new data keys; read again when it changes. Without it the secrets API answers 503"},
        {"name", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, name), 0, 0,
         "this replica's name in logs (default: host:pid)"},
        {"dataplane-url", SP_CONFIG_STRING, "http://127.0.0.1:7071", offsetof(cp_cfg, dataplane_url), 0, 0,
         "the data plane's public URL, the base of the attach, file and ingress URLs given to clients"},
        {"ingress-domain", SP_CONFIG_STRING, "localhost", offsetof(cp_cfg, ingress_domain), 0, 0,
         "the DNS domain of sandboxes' ingress URLs, {port}-{sandbox id, '_' as '-'}.DOMAIN: a wildcard name "
         "(*.DOMAIN) that reaches the data plane, at the scheme and port of --dataplane-url (*.localhost is "
         "loopback for curl and browsers)"},
        {"attach-token-ttl-s", SP_CONFIG_INT, "3600", offsetof(cp_cfg, attach_token_ttl_s), 1, CP_TOKEN_MAX_TTL_S,
         "lifetime of attachment tokens unless a request asks for another"},
        {"token-public-key-out", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, token_public_key_out), 0, 0,
         "write the attachment-token public keys here (PEM, current first; for data planes given "
         "--token-public-key)"},
        {"worker-call-timeout-ms", SP_CONFIG_INT, "15000", offsetof(cp_cfg, worker_call_timeout_ms), 100, 600000,
         "deadline of the API's calls to workers (sessions and files); past it the API answers 504"},
        {"template-upload-max-bytes", SP_CONFIG_SIZE, "16G", offsetof(cp_cfg, template_upload_max), 1 << 20,
         INT64_C(1) << 50,
         "the most one tenant template may hold: an upload's archive and its unpacked files, a build's files (keep "
         "it within the workers' --template-max-bytes)"},
        {"tenant-template-bytes", SP_CONFIG_SIZE, "64G", offsetof(cp_cfg, tenant_template_max), 1 << 20,
         INT64_C(1) << 50, "the most a tenant's templates may hold together (archives and unpacked files)"},
        {"max-waiters", SP_CONFIG_INT, "1024", offsetof(cp_cfg, max_waiters), 1, 1000000,
         "long-polls (GET /v1/operations/{id}?wait=) held at once, a quarter of them per tenant; beyond its share a "
         "tenant's wait is answered at once with the operation as it is"},
        {"tenant-template-builds", SP_CONFIG_INT, "4", offsetof(cp_cfg, tenant_template_builds), 1, 1000,
         "the most templates one tenant may have uploading or building at once (each is an import on the workers)"},
        {"debootstrap-mirror", SP_CONFIG_STRING, NULL, offsetof(cp_cfg, debootstrap_mirror), 0, 0,
         "the Debian mirror (http:// or https:// URL) tenants' debootstrap builds fetch from; without it only admin "
         "keys may build templates from debootstrap"},
#define QUOTA(name, index, what) \
        { \
                "quota-" name, SP_CONFIG_INT, "-1", offsetof(cp_cfg, quota) + (index) * sizeof(int64_t), -1, \
                        CP_QUOTA_MAX, \
                        "each tenant's default quota of " what " (-1: none); an admin sets a tenant's own with PUT " \
                        "/v1/tenants/{id}/quotas (docs/controlplane.md, \"Quotas and rate limits\")" \
        }
        QUOTA("running-sandboxes", CP_QUOTA_RUNNING_SANDBOXES, "sandboxes running or paused"),
        QUOTA("cpu-millis", CP_QUOTA_CPU_MILLIS, "CPU (millicores) of its sandboxes running or paused"),
        QUOTA("memory-mb", CP_QUOTA_MEMORY_MB, "memory (MiB) of its sandboxes running or paused"),
        QUOTA("disk-mb", CP_QUOTA_DISK_MB, "disk (MiB) of its sandboxes running or paused"),
        QUOTA("suspended-mb", CP_QUOTA_SUSPENDED_MB,
              "storage (MiB) its suspended and stopped sandboxes may keep, counted as their disk_mb (and a "
              "suspended one's memory_mb)"),
        QUOTA("sessions-per-sandbox", CP_QUOTA_SESSIONS_PER_SANDBOX, "command sessions running in one sandbox"),
        QUOTA("templates", CP_QUOTA_TEMPLATES, "templates of its own"),
#undef QUOTA
        {"rate-key-rps", SP_CONFIG_INT, "0", offsetof(cp_cfg, rate_key_rps), 0, 1000000,
         "API requests a second one API key may make on this replica (0: no limit); past it 429 with Retry-After"},
        {"rate-key-burst", SP_CONFIG_INT, "0", offsetof(cp_cfg, rate_key_burst), 0, 10000000,
         "the most requests one API key may make at once, the size of its bucket (0: twice --rate-key-rps)"},
        {"rate-tenant-rps", SP_CONFIG_INT, "0", offsetof(cp_cfg, rate_tenant_rps), 0, 1000000,
         "API requests a second all of one tenant's keys together may make on this replica (0: no limit)"},
        {"rate-tenant-burst", SP_CONFIG_INT, "0", offsetof(cp_cfg, rate_tenant_burst), 0, 10000000,
         "the most requests one tenant may make at once, the size of its bucket (0: twice --rate-tenant-rps)"},
        {"rate-create-rps", SP_CONFIG_INT, "0", offsetof(cp_cfg, rate_create_rps), 0, 1000000,
         "sandbox creates (POST /v1/sandboxes) a second one tenant may make on this replica (0: no limit)"},
        {"rate-create-burst", SP_CONFIG_INT, "0", offsetof(cp_cfg, rate_create_burst), 0, 10000000,
         "the most sandbox creates one tenant may make at once, the size of its bucket (0: twice --rate-create-rps)"},
        {"idle-timeout-s", SP_CONFIG_INT, "21600", offsetof(cp_cfg, idle_timeout_s), 0, 30 * 86400,
         "suspend sandboxes idle this long (0: never), unless a sandbox sets its own"},
        {"heartbeat-ms", SP_CONFIG_INT, "2000", offsetof(cp_cfg, heartbeat_ms), 100, 60000,
         "how often workers report; three missed make a worker unreachable"},
        {"tick-ms", SP_CONFIG_INT, "1000", offsetof(cp_cfg, tick_ms), 50, 60000, "the controllers' backstop period"},
        {"audit-retention", SP_CONFIG_DURATION, "90d", offsetof(cp_cfg, audit_retention_us), 0,
         INT64_C(36600) * 86400 * 1000000,
         "how long audit records are kept (e.g. 90d, 12h; 0: for ever): the leader deletes older ones when it "
         "takes the lead and every ten minutes"},
        {"audit-login-failure-rate", SP_CONFIG_INT, "10", offsetof(cp_cfg, audit_login_failure_rate), 1, 100000,
         "login failures (requests with no or a bad API key) recorded in the audit log per second and replica, in "
         "bursts of up to ten seconds' worth, and as many calls answered 429; the rest are counted in /metrics only"},
        SP_DAEMON_LOG_SETTINGS(cp_cfg),
        SP_CONFIG_END,
};

static int bootstrap_admin(cp_db *db, const char *path, sp_error **err)
{
        _cleanup_buf_ sp_buf have = SP_BUF_INIT;
        const char *secret = NULL;
        if (path && access(path, F_OK) == 0) {
                if (sp_file_read(path, 4096, &have, err) < 0)
                        return -SP_E_IO;
                while (have.len && (have.data[have.len - 1] == '\n' || have.data[have.len - 1] == '\r'))
                        have.data[--have.len] = '\0';
                secret = have.data;
        }
        _cleanup_free_ char *made = NULL;
        if (cp_apikey_bootstrap_admin(db, secret, &made, err) < 0)
                return -SP_E_INVALID;
        if (!made)
                return 0;
        if (path) {
                if (sp_file_write_atomic(path, made, strlen(made), 0600, err) < 0)
                        return -SP_E_IO;
                sp_log_info("created the first admin API key in %s", path);
        } else {
                fprintf(stderr, "\nThe first admin API key (shown once; keep it safe):\n\n    %s\n\n", made);
        }
        return 0;
}

/* The API's view of leadership: arg is the address of main's cp_ctrl pointer. */
static bool ctrl_leads(const void *arg)
{
        cp_ctrl *const *ctrl = arg;
        return cp_ctrl_is_leader(*ctrl);
}

/* The controllers' metrics for /metrics: arg as ctrl_leads's. */
static void ctrl_metrics(const void *arg, sp_buf *b)
{
        cp_ctrl *const *ctrl = arg;
        cp_ctrl_metrics(*ctrl, b);
}

/* Splits "a,b,c" in place into at most SP_PKI_MAX_SANS names. */
static void split_names(char *list, const char *out[static SP_PKI_MAX_SANS + 1])
{
        size_t n = 0;
        for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && n < SP_PKI_MAX_SANS;
             tok = strtok_r(NULL, ",", &save))
                out[n++] = tok;
        out[n] = NULL;
}

/* Writes the published token public keys to path, one PEM block after the other. */
static int write_token_keys(cp_db *db, const char *path, sp_error **err)
{
        _cleanup_json_ json_object *keys = NULL;
        _cleanup_buf_ sp_buf pems = SP_BUF_INIT;
        if (cp_token_keys_public(db, &keys, err) < 0)
                return -SP_E_UNAVAILABLE;
        for (size_t i = 0; i < json_object_array_length(keys); i++)
                if (sp_buf_appendf(&pems, err, "%s", json_object_get_string(json_object_array_get_idx(keys, i))) < 0)
                        return -SP_E_LIMIT;
        if (sp_pki_pem_save(path, pems.data ? pems.data : "", false, err) < 0)
                return sp_error_wrap(err, "--token-public-key-out");
        return 0;
}

static SSL_CTX *public_tls(const cp_cfg *c, sp_error **err)
{
        _cleanup_buf_ sp_buf cert = SP_BUF_INIT, key = SP_BUF_INIT;
        if (sp_file_read(c->tls_cert, 1 << 20, &cert, err) < 0 || sp_file_read(c->tls_key, 1 << 20, &key, err) < 0)
                return NULL;
        sp_tls_config tc = {.cert_pem = cert.data, .key_pem = key.data};
        SSL_CTX *ctx = sp_tls_server_ctx_new(&tc, err);
        sp_explicit_bzero(key.data, key.len);
        return ctx;
}

int main(int argc, char **argv)
{
        cp_cfg c = {0};
        _cleanup_error_ sp_error *e = NULL;
        sp_daemon_config dc = {.program = "space-controlplane",
                               .component = "controlplane",
                               .env_prefix = "SPACE_CONTROLPLANE",
                               .defs = defs,
                               .ignore_sigpipe = true};
        int r = sp_daemon_setup(&dc, &c, argc, argv);
        if (r != SP_DAEMON_GO_ON)
                return r;
        if (!c.database) {
                sp_log_error("--database is required (a PostgreSQL connection string)");
                sp_config_free(defs, &c);
                return 2;
        }
        if (!cp_api_ingress_domain_valid(c.ingress_domain)) {
                sp_log_error("--ingress-domain must be a DNS name of at most %d bytes: lowercase letters, digits, "
                             "'-' and '.', labels of 1 to 63 not starting or ending with '-'",
                             CP_INGRESS_DOMAIN_MAX);
                sp_config_free(defs, &c);
                return 2;
        }
        if (!!c.tls_cert != !!c.tls_key) {
                sp_log_error("--tls-cert and --tls-key go together");
                return 2;
        }
        char name[300];
        if (c.name)
                snprintf(name, sizeof(name), "%s", c.name);
        else {
                char host[256] = "controlplane";
                gethostname(host, sizeof(host) - 1);
                snprintf(name, sizeof(name), "%s:%d", host, (int)getpid());
        }

        /* The database: schema, CA and first admin key, each made once however many replicas start. */
        cp_db *db = NULL;
        int applied = 0;
        if ((c.create_database && cp_db_create_missing(c.database, &e) < 0) || cp_db_open(c.database, &db, &e) < 0 ||
            cp_db_migrate(db, &applied, &e) < 0) {
                sp_log_error("database: %s", e->message);
                cp_db_close(db);
                return 1;
        }
        if (applied)
                sp_log_info("database: applied %d migrations", applied);
        sp_pki_ca *ca = NULL;
        if (cp_fleet_cluster_ca(db, &ca, &e) < 0 || bootstrap_admin(db, c.admin_key_file, &e) < 0) {
                sp_log_error("bootstrap: %s", e->message);
                cp_db_close(db);
                return 1;
        }
        if (c.ca_out) {
                _cleanup_free_ char *pem = sp_pki_ca_cert_pem(ca, &e);
                if (!pem || sp_pki_pem_save(c.ca_out, pem, false, &e) < 0) {
                        sp_log_error("--ca-out: %s", e->message);
                        return 1;
                }
        }
        if (cp_token_keys_ensure(db, &e) < 0 ||
            (c.token_public_key_out && write_token_keys(db, c.token_public_key_out, &e) < 0)) {
                sp_log_error("token keys: %s", e->message);
                return 1;
        }
        if (c.bootstrap_only) {
                sp_log_info("bootstrap done: the schema, the cluster CA, an admin key and the token keys exist");
                sp_pki_ca_free(ca);
                cp_db_close(db);
                sp_config_free(defs, &c);
                return 0;
        }

        cp_keyring *keyring = NULL;
        if (c.secrets_key_file && cp_keyring_load(c.secrets_key_file, &keyring, &e) < 0) {
                sp_log_error("--secrets-key-file: %s", e->message);
                return 1;
        }
        if (keyring && cp_secrets_key_checks(db, keyring, &e) < 0) {
                sp_log_error("--secrets-key-file %s: %s", c.secrets_key_file, e->message);
                return 1;
        }
        if (keyring)
                sp_log_info_kv(SP_KV("primary", cp_keyring_primary(keyring)), "secrets: %zu cluster keys in %s",
                               cp_keyring_count(keyring), c.secrets_key_file);
        else
                sp_log_info("secrets: no --secrets-key-file; the secrets API answers 503");

        sp_daemon d = {0};
        if (sp_daemon_loop_new(&d, &e) < 0) {
                sp_log_error("%s", e->message);
                return 1;
        }
        const char *sans[SP_PKI_MAX_SANS + 1];
        split_names(c.rpc_names, sans);
        SSL_CTX *rpc_tls = NULL, *worker_tls = NULL, *api_tls = NULL;
        if (cp_fleet_tls(ca, "controlplane", sans, 30, &rpc_tls, &worker_tls, &e) < 0 ||
            (c.tls_cert && !(api_tls = public_tls(&c, &e)))) {
                sp_log_error("tls: %s", e ? e->message : "out of memory");
                return 1;
        }

        /* The default quotas as the store takes them (the API makes its own copy). */
        char quota_defaults[CP_QUOTA_DEFAULTS_MAX];
        c.quota[CP_QUOTA_TEMPLATE_BYTES] = c.tenant_template_max;
        cp_quota_defaults_json(c.quota, quota_defaults);
        cp_fleet_config fc = {.heartbeat_ms = c.heartbeat_ms, .quota_defaults = quota_defaults};
        cp_fleet *fleet = cp_fleet_new(db, ca, &fc, &e);
        sp_rpc_server *rpc = fleet ? sp_rpc_server_new(d.base, rpc_tls, &e) : NULL;
        if (!rpc || cp_fleet_register(fleet, rpc, &e) < 0 || sp_rpc_server_listen(rpc, c.rpc_listen, &e) < 0) {
                sp_log_error("rpc: %s", e->message);
                return 1;
        }
        sp_rpc_server_set_identity_fn(rpc, cp_fleet_identity, NULL);

        sp_http_server *http = sp_http_server_new(d.base, NULL, &e);
        cp_ctrl *ctrl = NULL; /* made below: /metrics asks it through &ctrl */
        cp_api_config ac = {.conninfo = c.database,
                            .default_idle_timeout_s = c.idle_timeout_s,
                            .dataplane_url = c.dataplane_url,
                            .ingress_domain = c.ingress_domain,
                            .attach_token_ttl_s = c.attach_token_ttl_s,
                            .worker_timeout_ms = c.worker_call_timeout_ms,
                            .template_upload_max_bytes = c.template_upload_max,
                            .tenant_template_bytes = c.tenant_template_max,
                            .tenant_template_builds = c.tenant_template_builds,
                            .max_waiters = c.max_waiters,
                            .audit_login_failures_per_s = c.audit_login_failure_rate,
                            .debootstrap_mirror = c.debootstrap_mirror,
                            .worker_tls = worker_tls,
                            .keyring = keyring,
                            .create_fast_path = c.create_fast_path,
                            .quota_defaults = c.quota,
                            .rate_key_rps = c.rate_key_rps,
                            .rate_key_burst = c.rate_key_burst,
                            .rate_tenant_rps = c.rate_tenant_rps,
                            .rate_tenant_burst = c.rate_tenant_burst,
                            .rate_create_rps = c.rate_create_rps,
                            .rate_create_burst = c.rate_create_burst,
                            .is_leader = ctrl_leads,
                            .leader_arg = &ctrl,
                            .ctrl_metrics = ctrl_metrics};
        cp_api *api = http ? cp_api_new(d.base, http, &ac, &e) : NULL;
        if (!api || sp_http_server_listen(http, c.listen, api_tls, &e) < 0) {
                sp_log_error("api: %s", e->message);
                return 1;
        }
        cp_ctrl_config cc = {.conninfo = c.database,
                             .worker_tls = worker_tls,
                             .default_idle_timeout_s = c.idle_timeout_s,
                             .tick_ms = c.tick_ms,
                             .audit_retention_s = c.audit_retention_us / 1000000,
                             .name = name,
                             .keyring = keyring};
        ctrl = cp_ctrl_new(d.base, &cc, &e);
        if (!ctrl) {
                sp_log_error("controllers: %s", e->message);
                return 1;
        }
        if (sp_daemon_stop_on_signals(&d, NULL, &e) < 0) {
                sp_log_error("%s", e->message);
                return 1;
        }
        sp_log_info_kv(SP_KV("listen", c.listen, "rpc_listen", c.rpc_listen, "replica", name),
                       "control plane ready (%s)", cp_ctrl_is_leader(ctrl) ? "leader" : "standby");

        sp_daemon_run(&d);

        cp_ctrl_free(ctrl);
        cp_api_free(api);
        sp_http_server_free(http);
        sp_rpc_server_free(rpc);
        cp_fleet_free(fleet);
        cp_db_close(db);
        cp_keyring_free(keyring);
        sp_pki_ca_free(ca);
        SSL_CTX_free(rpc_tls);
        SSL_CTX_free(worker_tls);
        if (api_tls)
                SSL_CTX_free(api_tls);
        sp_daemon_loop_free(&d);
        sp_config_free(defs, &c);
        return 0;
}
