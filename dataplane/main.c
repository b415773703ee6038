/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-dataplane: the public endpoint for bytes (proto/spec/dataplane.md).
 * Clients attach to command sessions and receive their output as
 * server-sent events, send stdin, resize and signal, and move file contents,
 * each request under an attachment token the control plane signed. The data
 * plane verifies tokens itself and reaches the worker a token names over
 * mutually authenticated HTTP/2 (role dataplane). It keeps no state that a
 * restart could lose, so any number of replicas serve any request.
 *
 * Settings: `space-dataplane --help` lists every one with its default
 * (flags, SPACE_DATAPLANE_* environment variables, or a --config file).
 */
#include <event2/event.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth/keys.h"
#include "cluster/cluster.h"
#include "cluster/resolve.h"
#include "ingress/ingress.h"
#include "dp.h"
#include "route/routes.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/daemon.h"
#include "space/fileio.h"
#include "space/http.h"
#include "space/log.h"
#include "space/pki.h"
#include "space/tls.h"
#include "space/token.h"
#include "workers/pool.h"

typedef struct dp_cfg {
        char *listen, *tls_cert, *tls_key, *rpc_ca, *rpc_cert, *rpc_key;
        char **token_public_keys;
        char *control_plane, *join_token, *join_token_file, *state_dir, *name, *ingress_domain;
        char *log_level, *log_format;
        bool plain_http;
        int64_t revoked_poll_ms, max_workers, max_streams, max_streams_per_tenant, worker_streams,
                worker_streams_per_tenant, max_connections, max_upload, rpc_timeout_ms, keepalive_ms, body_timeout_ms,
                ingress_answer_ms, ingress_wake_ms;
} dp_cfg;

static const sp_config_def defs[] = {
        {"listen", SP_CONFIG_STRING, "127.0.0.1:7074", offsetof(dp_cfg, listen), 0, 0,
         "the public endpoint (HOST:PORT): HTTPS with --tls-cert, else plain HTTP on loopback"},
        {"tls-cert", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, tls_cert), 0, 0,
         "serve HTTPS with this certificate (PEM file, with its chain)"},
        {"tls-key", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, tls_key), 0, 0, "the key of --tls-cert (PEM file)"},
        {"plain-http", SP_CONFIG_BOOL, "false", offsetof(dp_cfg, plain_http), 0, 0,
         "serve plain HTTP on a non-loopback --listen (behind a proxy that terminates TLS)"},
        {"rpc-ca", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, rpc_ca), 0, 0,
         "the cluster CA certificate (PEM file) that workers and the control plane are checked against"},
        {"rpc-cert", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, rpc_cert), 0, 0,
         "this replica's cluster certificate, role dataplane (PEM file); without it the replica joins"},
        {"rpc-key", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, rpc_key), 0, 0, "the key of --rpc-cert (PEM file)"},
        {"token-public-key", SP_CONFIG_LIST, NULL, offsetof(dp_cfg, token_public_keys), 0, SP_TOKEN_MAX_KEYS,
         "a public key (PEM file) that verifies attachment tokens; repeat for rotation; re-read on SIGHUP"},
        {"control-plane", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, control_plane), 0, 0,
         "HOST:PORT of the control plane's internal RPC: join with a token, then fetch the token keys"},
        {"join-token", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, join_token), 0, 0,
         "bootstrap token for the first join (prefer --join-token-file)"},
        {"join-token-file", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, join_token_file), 0, 0,
         "file holding the bootstrap token for the first join"},
        {"state-dir", SP_CONFIG_STRING, "/var/lib/space/dataplane", offsetof(dp_cfg, state_dir), 0, 0,
         "where a joined replica keeps its certificate and the last token keys"},
        {"name", SP_CONFIG_STRING, NULL, offsetof(dp_cfg, name), 0, 0,
         "this replica's name in the cluster (default: the host name)"},
        {"ingress-answer-ms", SP_CONFIG_INT, "300000", offsetof(dp_cfg, ingress_answer_ms), 100, 86400000,
         "ingress: how long a server in a sandbox may take to start its answer (504 after)"},
        {"ingress-wake-ms", SP_CONFIG_INT, "60000", offsetof(dp_cfg, ingress_wake_ms), 100, 3600000,
         "ingress: how long a request waits for its paused or suspended sandbox (auto_resume) to run (504 after)"},
        {"ingress-domain", SP_CONFIG_STRING, "localhost", offsetof(dp_cfg, ingress_domain), 0, 0,
         "requests to {port}-{sandbox}.<this> are relayed to the port in the sandbox (docs/ingress.md; empty: by "
         "path only)"},
        {"revoked-poll-ms", SP_CONFIG_INT, "2000", offsetof(dp_cfg, revoked_poll_ms), 100, 600000,
         "how often to ask the control plane for revoked API keys, whose tokens are then refused"},
        {"max-workers", SP_CONFIG_INT, "1024", offsetof(dp_cfg, max_workers), 1, 100000,
         "worker connections kept open at most (idle ones are closed first)"},
        {"max-streams", SP_CONFIG_INT, "4096", offsetof(dp_cfg, max_streams), 1, 1000000,
         "attach streams and stdin or file transfers at once (more are answered 503)"},
        {"max-streams-per-tenant", SP_CONFIG_INT, "0", offsetof(dp_cfg, max_streams_per_tenant), 0, 1000000,
         "of --max-streams, what one tenant may hold (more are answered 429); 0: a quarter of --max-streams"},
        {"worker-streams", SP_CONFIG_INT, "256", offsetof(dp_cfg, worker_streams), 1, SP_RPC_MAX_CONCURRENT_STREAMS,
         "attach streams and transfers at once on the connection to one worker (more are answered 503)"},
        {"worker-streams-per-tenant", SP_CONFIG_INT, "0", offsetof(dp_cfg, worker_streams_per_tenant), 0,
         SP_RPC_MAX_CONCURRENT_STREAMS,
         "of --worker-streams, what one tenant may hold (more are answered 429); 0: a quarter of --worker-streams"},
        {"max-connections", SP_CONFIG_INT, "10000", offsetof(dp_cfg, max_connections), 1, 1000000,
         "client connections at once"},
        {"max-upload", SP_CONFIG_SIZE, "64G", offsetof(dp_cfg, max_upload), 1, INT64_MAX,
         "largest file a PUT may send (413 beyond)"},
        {"rpc-timeout-ms", SP_CONFIG_INT, "30000", offsetof(dp_cfg, rpc_timeout_ms), 100, 600000,
         "deadline of the short worker calls (session lookups, signals, resizes, file stats)"},
        {"keepalive-ms", SP_CONFIG_INT, "15000", offsetof(dp_cfg, keepalive_ms), 100, 600000,
         "an SSE comment after this much silence on an attach stream"},
        {"body-timeout-ms", SP_CONFIG_INT, "300000", offsetof(dp_cfg, body_timeout_ms), 1000, 86400000,
         "a request body (stdin, a file) that brings nothing new this long is cut off"},
        SP_DAEMON_LOG_SETTINGS(dp_cfg),
        SP_CONFIG_END,
};

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

static dp_keys *keys;
static dp_revoked *revoked;
static char **key_files;

static void on_reload(evutil_socket_t sig, short what, void *userdata)
{
        if (!key_files) {
                sp_log_info("SIGHUP: no --token-public-key files to re-read");
                return;
        }
        _cleanup_error_ sp_error *e = NULL;
        if (dp_keys_load_files(keys, DP_KEYS_FILES, key_files, &e) < 0) {
                sp_log_error("SIGHUP: keeping the token keys held: %s", e->message);
                return;
        }
        sp_log_info("SIGHUP: token keys re-read (%zu held)", dp_keys_count(keys));
}

static void unknown_key(void *userdata)
{
        dp_cluster_refresh(userdata);
}

static bool loopback(const char *addr)
{
        return strncmp(addr, "unix:", 5) == 0 || strncmp(addr, "127.", 4) == 0 || strncmp(addr, "[::1]:", 6) == 0 ||
               strncmp(addr, "localhost:", 10) == 0;
}

/* Checks the combinations of settings; the first problem is the error. */
static int check_settings(const dp_cfg *c, sp_error **err)
{
        if (!c->tls_cert != !c->tls_key)
                return sp_error_set(err, SP_E_INVALID, "--tls-cert and --tls-key go together");
        if (!c->tls_cert && !c->plain_http && !loopback(c->listen))
                return sp_error_set(err, SP_E_INVALID,
                                    "--listen %s is not loopback: give --tls-cert and --tls-key, or --plain-http "
                                    "behind a proxy that terminates TLS",
                                    c->listen);
        if (!c->rpc_cert != !c->rpc_key)
                return sp_error_set(err, SP_E_INVALID, "--rpc-cert and --rpc-key go together");
        if (c->rpc_cert && !c->rpc_ca)
                return sp_error_set(err, SP_E_INVALID, "--rpc-cert needs --rpc-ca (the cluster CA)");
        if (!c->rpc_cert && !c->control_plane)
                return sp_error_set(err, SP_E_INVALID,
                                    "no cluster certificate: give --rpc-ca, --rpc-cert and --rpc-key, or join with "
                                    "--control-plane and a join token");
        if (!c->token_public_keys && !c->control_plane)
                return sp_error_set(err, SP_E_INVALID,
                                    "no token keys: give --token-public-key, or --control-plane to fetch them");
        if (c->join_token && c->join_token_file)
                return sp_error_set(err, SP_E_INVALID, "give --join-token or --join-token-file, not both");
        return 0;
}

static SSL_CTX *public_tls(const dp_cfg *c, sp_error **err)
{
        _cleanup_buf_ sp_buf cert = SP_BUF_INIT, key = SP_BUF_INIT;
        if (sp_file_read(c->tls_cert, 1 << 20, &cert, err) < 0 || sp_file_read(c->tls_key, 1 << 20, &key, err) < 0)
                return NULL;
        sp_tls_config tc = {.cert_pem = cert.data, .key_pem = key.data};
        SSL_CTX *ctx = sp_tls_server_ctx_new(&tc, err);
        sp_explicit_bzero(key.data, key.len);
        return ctx;
}

/* The replica's cluster credentials: the --rpc-* files, or the saved or new ones of a join. */
static int credentials(const dp_cfg *c, const dp_cluster_config *cc, sp_join_creds *ret, sp_error **err)
{
        if (c->rpc_cert) {
                if (!(ret->ca_pem = sp_pki_pem_load(c->rpc_ca, err)) ||
                    !(ret->cert_pem = sp_pki_pem_load(c->rpc_cert, err)) ||
                    !(ret->key_pem = sp_pki_pem_load(c->rpc_key, err))) {
                        sp_join_creds_free(ret);
                        return -SP_E_IO;
                }
                return 0;
        }
        _cleanup_free_ char *ca = NULL, *token = NULL;
        if (c->rpc_ca && !(ca = sp_pki_pem_load(c->rpc_ca, err)))
                return -SP_E_IO;
        if (c->join_token_file && sp_join_read_token(c->join_token_file, &token, err) < 0)
                return -SP_E_INVALID;
        if (c->join_token && !(token = strdup(c->join_token)))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        int r = dp_cluster_credentials(cc, ca, token, keys, ret, err);
        if (token)
                sp_explicit_bzero(token, strlen(token));
        return r;
}

static SSL_CTX *client_tls(const sp_join_creds *cr, unsigned peer_role, sp_error **err)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {.ca_pem = cr->ca_pem,
                            .cert_pem = cr->cert_pem,
                            .key_pem = cr->key_pem,
                            .peer_roles = peer_role,
                            .alpn = alpn};
        return sp_tls_client_ctx_new(&tc, err);
}

static void cfg_freep(dp_cfg *c)
{
        sp_config_free(defs, c);
}

static void creds_freep(sp_join_creds *c)
{
        sp_join_creds_free(c);
}

int main(int argc, char **argv)
{
        _cleanup_(cfg_freep) dp_cfg c = {0};
        _cleanup_error_ sp_error *e = NULL;
        sp_daemon_config dc = {.program = "space-dataplane",
                               .component = "dataplane",
                               .env_prefix = "SPACE_DATAPLANE",
                               .defs = defs,
                               .ignore_sigpipe = true};
        int r = sp_daemon_setup(&dc, &c, argc, argv);
        if (r != SP_DAEMON_GO_ON)
                return r;
        if (check_settings(&c, &e) < 0) {
                sp_log_error("%s", e->message);
                return 2;
        }
        char host[256] = "dataplane";
        gethostname(host, sizeof(host) - 1);
        dp_cluster_config cc = {
                .control_plane = c.control_plane, .name = c.name ? c.name : host, .state_dir = c.state_dir};

        keys = dp_keys_new();
        revoked = dp_revoked_new();
        key_files = c.token_public_keys;
        _cleanup_(creds_freep) sp_join_creds creds = {0};
        if (!keys || !revoked || (key_files && dp_keys_load_files(keys, DP_KEYS_FILES, key_files, &e) < 0) ||
            credentials(&c, &cc, &creds, &e) < 0) {
                sp_log_error("%s", e ? e->message : "out of memory");
                dp_keys_free(keys);
                dp_revoked_free(revoked);
                return 1;
        }
        _cleanup_(SSL_CTX_freep) SSL_CTX *worker_tls = client_tls(&creds, SP_ROLE_WORKER, &e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *cp_tls =
                worker_tls && c.control_plane ? client_tls(&creds, SP_ROLE_CONTROLPLANE, &e) : NULL;
        _cleanup_(SSL_CTX_freep) SSL_CTX *api_tls = worker_tls && c.tls_cert ? public_tls(&c, &e) : NULL;
        if (!worker_tls || (c.control_plane && !cp_tls) || (c.tls_cert && !api_tls)) {
                sp_log_error("tls: %s", e->message);
                dp_keys_free(keys);
                dp_revoked_free(revoked);
                return 1;
        }

        sp_daemon loop = {0};
        struct event_base *base = sp_daemon_loop_new(&loop, &e) == 0 ? loop.base : NULL;
        dp d = {.base = base,
                .limits = {.max_streams = (size_t)c.max_streams,
                           .max_streams_per_tenant = (size_t)c.max_streams_per_tenant,
                           .rpc_timeout_ms = c.rpc_timeout_ms,
                           .max_upload = (uint64_t)c.max_upload,
                           .keepalive_ms = c.keepalive_ms,
                           .ingress_answer_ms = c.ingress_answer_ms,
                           .ingress_wake_ms = c.ingress_wake_ms},
                .keys = keys,
                .revoked = revoked,
                .has_client_cert = true};
        sp_http_config hc = {.max_connections = (unsigned)c.max_connections,
                             .body_timeout_ms = (unsigned)c.body_timeout_ms};
        dp_cluster *cluster = NULL;
        sp_http_server *http = NULL;
        d.streams = sp_shares_new(d.limits.max_streams, d.limits.max_streams_per_tenant);
        d.pool = base && d.streams ? dp_pool_new(base, worker_tls, (size_t)c.max_workers, &e) : NULL;
        if (d.pool) {
                dp_pool_set_stream_shares(d.pool, (size_t)c.worker_streams, (size_t)c.worker_streams_per_tenant);
                http = sp_http_server_new(base, &hc, &e);
        }
        if (c.ingress_domain && *c.ingress_domain) {
                if (!dp_ingress_domain_valid(c.ingress_domain)) {
                        sp_log_error("--ingress-domain '%s' is not a domain name (lowercase letters, digits, '-' and "
                                     "'.', at most %d bytes)",
                                     c.ingress_domain, DP_INGRESS_DOMAIN_MAX);
                        r = 2;
                        goto out;
                }
                snprintf(d.ingress_domain, sizeof(d.ingress_domain), "%s", c.ingress_domain);
        }
        if (!http ||
            (c.control_plane && (dp_cluster_start(base, &cc, cp_tls, keys, &cluster, &e) < 0 ||
                                 dp_cluster_watch_revoked(cluster, revoked, c.revoked_poll_ms, &e) < 0 ||
                                 !(d.resolver = dp_resolver_new(base, dp_cluster_client(cluster), &e)))) ||
            dp_routes_register(&d, http, &e) < 0 || sp_http_server_listen(http, c.listen, api_tls, &e) < 0 ||
            sp_daemon_stop_on_signals(&loop, NULL, &e) < 0) {
                sp_log_error("%s", e ? e->message : "out of memory");
                r = 1;
                goto out;
        }
        if (cluster) {
                d.unknown_key = unknown_key;
                d.unknown_key_userdata = cluster;
        }
        struct event *sighup = evsignal_new(base, SIGHUP, on_reload, NULL);
        if (sighup)
                event_add(sighup, NULL);
        char port[16];
        snprintf(port, sizeof(port), "%d", sp_http_server_port(http));
        sp_log_info_kv(SP_KV("listen", c.listen, "port", port, "tls", api_tls ? "yes" : "no", "control_plane",
                             c.control_plane ? c.control_plane : ""),
                       "data plane ready (%zu token keys)", dp_keys_count(keys));
        sp_daemon_run(&loop);
        if (sighup)
                event_free(sighup);
        r = 0;
out:
        /* Clients first: their streams end, then the worker connections close. */
        sp_http_server_free(http);
        dp_cluster_free(cluster);
        dp_resolver_free(d.resolver);
        dp_pool_free(d.pool);
        sp_shares_free(d.streams);
        dp_keys_free(keys);
        dp_revoked_free(revoked);
        sp_daemon_loop_free(&loop);
        return r;
}
