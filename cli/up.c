/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl up | status | down: direct mode, a whole single-node cluster on
 * this host (direct.h does the work; this file is the command line and the
 * CLI profile that `up` writes).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "direct.h"
#include "space/cleanup.h"
#include "space/json.h"

#define PROFILE "local"

const ctl_opt ctl_status_opts[] = {
        {"state-dir", "DIR", 0, "the cluster's state directory (default /var/lib/space/direct)"},
        {0},
};

const ctl_opt ctl_up_opts[] = {
        {"state-dir", "DIR", 0, "the cluster's state directory (default /var/lib/space/direct)"},
        {"database-url", "CONNINFO", 0, "use this PostgreSQL instead of a private one (first up only)"},
        {"backend", "NAME", 0,
         "auto (default: jail), jail, qemu (a VM per sandbox) or jail,qemu (both; the first the default; first up "
         "only)"},
        {"api-port", "PORT", 0, "first of eight consecutive loopback ports (default 7070; first up only)"},
        {"bin-dir", "DIR", 0, "where the space-* programs are (default: next to spacectl)"},
        {"no-profile", NULL, 0, "do not write the '" PROFILE "' CLI profile"},
        {0},
};

const ctl_opt ctl_down_opts[] = {
        {"state-dir", "DIR", 0, "the cluster's state directory (default /var/lib/space/direct)"},
        {"purge", NULL, 0, "also remove sandboxes, cgroups, mounts, loop devices and the state directory"},
        {0},
};

static int fill_opts(ctl_ctx *ctx, const ctl_args *a, ctl_direct_opts *o, sp_error **err)
{
        memset(o, 0, sizeof(*o));
        o->state_dir = ctl_arg(a, "state-dir");
        o->json = ctx->json;
        o->quiet = ctx->progress == 0;
        if (a->cmd->opts == ctl_up_opts) {
                o->database_url = ctl_arg(a, "database-url");
                o->backend = ctl_arg(a, "backend");
                o->bin_dir = ctl_arg(a, "bin-dir");
                const char *p = ctl_arg(a, "api-port");
                if (p) {
                        char *end;
                        long v = strtol(p, &end, 10);
                        if (*end || v < 1024 || v > 65530)
                                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                                "--api-port: '%s' is not a port from 1024 to 65530", p);
                        o->api_port = (int)v;
                }
        }
        if (o->state_dir && o->state_dir[0] != '/')
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--state-dir must be an absolute path");
        return 0;
}

/* Points the "local" profile at the cluster and makes it current. */
static int write_profile(ctl_ctx *ctx, const ctl_direct_info *info, sp_error **err)
{
        if (ctl_load_config(ctx, err) < 0)
                return -1;
        if (ctl_config_set(ctx->config, PROFILE, CTL_F_ENDPOINT, info->api_url, err) < 0 ||
            ctl_config_set(ctx->config, PROFILE, CTL_F_API_KEY, info->admin_key, err) < 0 ||
            ctl_config_set(ctx->config, PROFILE, CTL_F_DATAPLANE_URL, info->dataplane_url, err) < 0 ||
            ctl_config_set(ctx->config, PROFILE, CTL_F_CA_FILE, NULL, err) < 0 ||
            ctl_config_use(ctx->config, PROFILE, err) < 0 || ctl_config_save(ctx->config, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, -1);
        return 0;
}

int ctl_run_up(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        ctl_direct_opts o;
        if (fill_opts(ctx, a, &o, err) < 0)
                return -1;
        ctl_direct_info info;
        if (ctl_direct_up(&o, &info, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_API, -1);
        bool profile = !ctl_flag(a, "no-profile");
        if (profile && write_profile(ctx, &info, err) < 0)
                return -1;
        if (ctx->json) {
                _cleanup_json_ json_object *j = json_object_new_object();
                json_object_object_add(j, "api_url", json_object_new_string(info.api_url));
                json_object_object_add(j, "dataplane_url", json_object_new_string(info.dataplane_url));
                json_object_object_add(j, "e2b_url", json_object_new_string(info.e2b_url));
                json_object_object_add(j, "admin_key", json_object_new_string(info.admin_key));
                json_object_object_add(j, "ca_file", json_object_new_string(info.ca_file));
                json_object_object_add(j, "profile", profile ? json_object_new_string(PROFILE) : NULL);
                ctl_print_json(ctx, j);
                return 0;
        }
        fprintf(ctx->out,
                "The cluster is up.\n"
                "  API         %s\n"
                "  data plane  %s\n"
                "  E2B         %s (spacectl env --e2b)\n"
                "  admin key   %s\n"
                "  cluster CA  %s\n",
                info.api_url, info.dataplane_url, info.e2b_url, info.admin_key, info.ca_file);
        if (profile)
                fprintf(ctx->out, "spacectl now uses profile '" PROFILE "' (this cluster, as admin).\n");
        return 0;
}

int ctl_run_status(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        ctl_direct_opts o;
        if (fill_opts(ctx, a, &o, err) < 0)
                return -1;
        int bad = ctl_direct_status(&o, ctx->out, err);
        if (bad < 0)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, -1);
        if (bad > 0)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_UNAVAILABLE,
                                "%d component%s not healthy (spacectl up "
                                "repairs it)",
                                bad, bad == 1 ? " is" : "s are");
        return 0;
}

int ctl_run_down(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        ctl_direct_opts o;
        if (fill_opts(ctx, a, &o, err) < 0)
                return -1;
        if (ctl_direct_down(&o, ctl_flag(a, "purge"), err) < 0)
                return ctl_failed(ctx, CTL_EXIT_API, -1);
        if (!ctx->json)
                fprintf(ctx->out, ctl_flag(a, "purge") ? "The cluster is stopped and removed.\n"
                                                       : "The cluster is stopped (spacectl up starts it again).\n");
        return 0;
}
