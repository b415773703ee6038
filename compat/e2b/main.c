/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-e2b: the E2B compatibility wrapper (docs/e2b.md). Serves the E2B
 * control-plane REST API and the in-sandbox envd protocol on one listener,
 * as a client of the public API and the data plane, so that the unmodified
 * e2b SDK works against this cluster with E2B_API_URL and E2B_SANDBOX_URL
 * pointed here.
 *
 * Settings: `space-e2b --help` lists every one with its default (flags,
 * SPACE_E2B_* environment variables, or a --config file).
 */
#include <event2/thread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "e2b.h"
#include "request.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/daemon.h"
#include "space/http.h"
#include "space/log.h"
#include "space/ratelimit.h"

typedef struct e2b_cfg {
        char *listen, *api_url, *dataplane_url, *ca_file, *secret_file, *envd_version, *template_name;
        char *log_level, *log_format;
        int64_t max_calls, max_calls_per_key, max_watchers, max_watchers_per_key, max_connections, api_timeout_ms;
        int64_t signed_scans;
} e2b_cfg;

static const sp_config_def defs[] = {
        {"listen", SP_CONFIG_STRING, "127.0.0.1:3000", offsetof(e2b_cfg, listen), 0, 0,
         "where E2B clients connect (HOST:PORT): both E2B_API_URL and E2B_SANDBOX_URL point here"},
        {"api-url", SP_CONFIG_STRING, "http://127.0.0.1:7070", offsetof(e2b_cfg, api_url), 0, 0,
         "the public API of the cluster (its data plane comes from the API's answers)"},
        {"dataplane-url", SP_CONFIG_STRING, NULL, offsetof(e2b_cfg, dataplane_url), 0, 0,
         "the data plane as this replica reaches it (scheme://host:port), in place of the origin of the URLs in the "
         "API's answers, which are the clients' (e.g. a Kubernetes Service; default: those URLs as they are)"},
        {"ca-file", SP_CONFIG_STRING, NULL, offsetof(e2b_cfg, ca_file), 0, 0,
         "CA certificates (PEM) for an https API and data plane; default the system's"},
        {"secret-file", SP_CONFIG_STRING, "/var/lib/space/e2b/secret.key", offsetof(e2b_cfg, secret_file), 0, 0,
         "32-byte key that seals envd access tokens (created when missing); share it between replicas"},
        {"envd-version", SP_CONFIG_STRING, "0.5.7", offsetof(e2b_cfg, envd_version), 0, 0,
         "the envd version reported to the SDK (it selects the SDK's features)"},
        {"template", SP_CONFIG_STRING, "debian,base", offsetof(e2b_cfg, template_name), 0, 0,
         "our templates for E2B's default template \"base\", comma-separated: the first that the key may use and "
         "that is ready"},
        {"max-calls", SP_CONFIG_INT, "1024", offsetof(e2b_cfg, max_calls), 1, 100000,
         "requests in progress at once, streams included (each holds a thread); more are answered 503"},
        {"max-calls-per-key", SP_CONFIG_INT, "0", offsetof(e2b_cfg, max_calls_per_key), 0, 100000,
         "of those, what one API key may hold (0: a quarter of --max-calls); more are answered 429"},
        {"max-watchers", SP_CONFIG_INT, "1000", offsetof(e2b_cfg, max_watchers), 1, 100000,
         "CreateWatcher watchers kept at once; more are refused (unavailable)"},
        {"max-watchers-per-key", SP_CONFIG_INT, "0", offsetof(e2b_cfg, max_watchers_per_key), 0, 100000,
         "of those, what one API key may hold (0: a quarter of --max-watchers); more are resource_exhausted"},
        {"max-connections", SP_CONFIG_INT, "10000", offsetof(e2b_cfg, max_connections), 1, 1000000,
         "client connections at once"},
        {"signed-url-scans", SP_CONFIG_INT, "20", offsetof(e2b_cfg, signed_scans), 0, 100000,
         "signed file URLs a second (burst: twice as many) that name no sandbox and so are checked against every "
         "token this replica holds; more are answered 429 (0: no limit). A URL whose host names its sandbox "
         "(49983-<sandbox>.<domain>) or a request with E2b-Sandbox-Id is checked against that sandbox's tokens "
         "alone and not counted"},
        {"api-timeout-ms", SP_CONFIG_INT, "60000", offsetof(e2b_cfg, api_timeout_ms), 1000, 600000,
         "each wait on the public API"},
        SP_DAEMON_LOG_SETTINGS(e2b_cfg),
        SP_CONFIG_END,
};

static void cfg_freep(e2b_cfg *c)
{
        sp_config_free(defs, c);
}

int main(int argc, char **argv)
{
        _cleanup_(cfg_freep) e2b_cfg c = {0};
        _cleanup_error_ sp_error *e = NULL;
        sp_daemon_config dc = {.program = "space-e2b",
                               .component = "e2b",
                               .env_prefix = "SPACE_E2B",
                               .defs = defs,
                               .ignore_sigpipe = true};
        int r = sp_daemon_setup(&dc, &c, argc, argv);
        if (r != SP_DAEMON_GO_ON)
                return r;
        if (evthread_use_pthreads() < 0) {
                sp_log_error("libevent has no thread support");
                return 1;
        }
        /* name[,name...]: each a template name (1-128 characters, no ',') */
        for (const char *t = c.template_name;;) {
                size_t n = strcspn(t, ",");
                if (n == 0 || n > E2B_TEMPLATE_NAME_MAX) {
                        sp_log_error("--template must list template names (1 to 128 characters each), comma-separated");
                        return 2;
                }
                if (!t[n])
                        break;
                t += n + 1;
        }
        e2b_ctx ctx = {.api_url = c.api_url,
                       .ca_file = c.ca_file,
                       .dataplane_url = c.dataplane_url,
                       .envd_version = c.envd_version,
                       .template_default = c.template_name,
                       .api_timeout_ms = (unsigned)c.api_timeout_ms};
        if (e2b_token_key_load(c.secret_file, &ctx.key, &e) < 0) {
                sp_log_error("%s", e->message);
                return 1;
        }
        ctx.caps = e2b_caps_new((size_t)c.max_calls, (size_t)c.max_calls_per_key, (size_t)c.max_watchers,
                                (size_t)c.max_watchers_per_key, &e);
        if (!ctx.caps) {
                sp_log_error("%s", e->message);
                return 1;
        }
        ctx.metrics = e2b_metrics_new();
        ctx.scan_rate = (double)c.signed_scans;
        if (c.signed_scans > 0 && !(ctx.scans = sp_ratelimit_new(1))) {
                sp_log_error("out of memory");
                e2b_caps_free(ctx.caps);
                return 1;
        }
        if (!(ctx.signers = e2b_signers_new(E2B_SIGNERS_MAX, E2B_SIGNERS_PER_SANDBOX))) {
                sp_log_error("out of memory");
                e2b_caps_free(ctx.caps);
                return 1;
        }
        sp_daemon d = {0};
        ctx.base = sp_daemon_loop_new(&d, &e) == 0 ? d.base : NULL;
        sp_http_config hc = {.max_connections = (unsigned)c.max_connections};
        sp_http_server *http = ctx.base ? sp_http_server_new(ctx.base, &hc, &e) : NULL;
        if (!http || e2b_rest_register(&ctx, http, &e) < 0 || e2b_process_register(&ctx, http, &e) < 0 ||
            e2b_filesystem_register(&ctx, http, &e) < 0 || e2b_files_register(&ctx, http, &e) < 0 ||
            e2b_health_register(&ctx, http, &e) < 0 || sp_http_server_listen(http, c.listen, NULL, &e) < 0 ||
            sp_daemon_stop_on_signals(&d, NULL, &e) < 0) {
                sp_log_error("%s", e ? e->message : "out of memory");
                r = 1;
                goto out;
        }
        char port[16];
        snprintf(port, sizeof(port), "%d", sp_http_server_port(http));
        sp_log_info_kv(SP_KV("listen", c.listen, "port", port, "api", c.api_url), "e2b wrapper ready");
        sp_daemon_run(&d);
        r = 0;
out:
        sp_http_server_free(http);
        e2b_health_free(&ctx);
        sp_daemon_loop_free(&d);
        e2b_caps_free(ctx.caps);
        e2b_metrics_free(ctx.metrics);
        e2b_signers_free(ctx.signers);
        sp_ratelimit_free(ctx.scans);
        sp_explicit_bzero(&ctx.key, sizeof(ctx.key));
        return r;
}
