/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl env --e2b: the environment that points the unmodified E2B SDK at
 * this cluster's space-e2b (docs/e2b.md), as shell exports or JSON.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "direct.h"
#include "space/cleanup.h"
#include "space/json.h"

const ctl_opt ctl_env_opts[] = {
        {"e2b", NULL, 0, "the E2B SDK's settings: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY"},
        {"e2b-url", "URL", 0, "space-e2b's URL (else SPACE_E2B_URL, else the direct-mode cluster's)"},
        {"state-dir", "DIR", 0, "the direct-mode cluster to ask (default /var/lib/space/direct)"},
        {0},
};

/* Prints name='value' for a POSIX shell (single quotes, ' as '\''). */
static void print_export(FILE *f, const char *name, const char *value)
{
        fprintf(f, "export %s='", name);
        for (const char *p = value; *p; p++) {
                if (*p == '\'')
                        fputs("'\\''", f);
                else
                        fputc(*p, f);
        }
        fputs("'\n", f);
}

int ctl_run_env(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        if (!ctl_flag(a, "e2b"))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "say which environment: --e2b");
        char url[256];
        const char *given = ctl_arg(a, "e2b-url");
        if (!given)
                given = getenv("SPACE_E2B_URL");
        if (given) {
                if (strncmp(given, "http://", 7) != 0 && strncmp(given, "https://", 8) != 0)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--e2b-url must be an http(s) URL");
                snprintf(url, sizeof(url), "%s", given);
        } else {
                ctl_direct_opts o = {.state_dir = ctl_arg(a, "state-dir"), .quiet = true};
                if (ctl_direct_e2b_url(&o, url, sizeof(url), err) < 0) {
                        sp_error_wrap(err, "give --e2b-url (no direct-mode cluster to ask)");
                        return ctl_failed(ctx, CTL_EXIT_CONFIG, -1);
                }
        }
        if (ctl_connect(ctx, err) < 0)
                return -1;
        const char *key = ctx->settings.v[CTL_F_API_KEY];
        if (!key)
                return ctl_fail(ctx, CTL_EXIT_CONFIG, err, SP_E_INVALID,
                                "no API key (--api-key, SPACE_API_KEY or a profile): the SDK needs one");
        if (ctx->json) {
                _cleanup_json_ json_object *j = json_object_new_object();
                json_object_object_add(j, "E2B_API_URL", json_object_new_string(url));
                json_object_object_add(j, "E2B_SANDBOX_URL", json_object_new_string(url));
                json_object_object_add(j, "E2B_API_KEY", json_object_new_string(key));
                ctl_print_json(ctx, j);
                return 0;
        }
        print_export(ctx->out, "E2B_API_URL", url);
        print_export(ctx->out, "E2B_SANDBOX_URL", url);
        print_export(ctx->out, "E2B_API_KEY", key);
        return 0;
}
