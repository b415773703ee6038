/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl tenant usage` (a tenant's quotas, their use and the rate limits)
 * and `spacectl tenant quota` (an admin sets them): docs/spacectl.md,
 * "Quotas and usage".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/json.h"

/* The quotas as the API names them, with their flags (the same, '_' as '-'). */
static const char *const quotas[] = {"running_sandboxes",    "cpu_millis", "memory_mb",      "disk_mb", "suspended_mb",
                                     "sessions_per_sandbox", "templates",  "template_bytes", NULL};

const ctl_opt ctl_tenant_quota_opts[] = {
        {"running-sandboxes", "N", 0, "sandboxes running or paused"},
        {"cpu-millis", "N", 0, "CPU (millicores) of the sandboxes running or paused"},
        {"memory-mb", "N", 0, "memory (MiB) of the sandboxes running or paused"},
        {"disk-mb", "N", 0, "disk (MiB) of the sandboxes running or paused"},
        {"suspended-mb", "N", 0,
         "what suspended and stopped sandboxes keep (MiB; their disk and a suspended one's memory)"},
        {"sessions-per-sandbox", "N", 0, "command sessions running in one sandbox"},
        {"templates", "N", 0, "templates of its own"},
        {"template-bytes", "SIZE", 0, "bytes its templates hold together (K, M, G, T suffixes)"},
        {0},
};

/* One quota's value from its flag: a number (a size for template-bytes),
 * "none" (no limit: -1) or "default" (the cluster's: null). */
static int quota_value(ctl_ctx *ctx, const char *flag, const char *v, json_object **ret, sp_error **err)
{
        if (strcmp(v, "default") == 0) {
                *ret = NULL;
                return 0;
        }
        int64_t n = -1;
        if (strcmp(v, "none") != 0) {
                char *end = NULL;
                if (strcmp(flag, "template-bytes") == 0) {
                        if (sp_size_parse(v, &n, err) < 0)
                                return ctl_failed(ctx, CTL_EXIT_USAGE, sp_error_wrap(err, "--%s", flag));
                } else if ((n = strtoll(v, &end, 10)) < 0 || !*v || *end) {
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "--%s must be a number, none or default", flag);
                }
        }
        *ret = json_object_new_int64(n);
        return 0;
}

/* The usage answer as a table: QUOTA LIMIT USED SOURCE, then the rate limits. */
static void print_usage(ctl_ctx *ctx, json_object *u)
{
        if (ctx->json) {
                ctl_print_json(ctx, u);
                return;
        }
        fprintf(ctx->out, "tenant %s (%s)\n", ctl_jstr(u, "tenant_id"), ctl_jstr(u, "name"));
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"QUOTA", "LIMIT", "USED", "SOURCE", NULL});
        json_object *q = NULL;
        json_object_object_get_ex(u, "quotas", &q);
        for (size_t i = 0; quotas[i]; i++) {
                json_object *one = NULL, *limit = NULL;
                if (!json_object_object_get_ex(q, quotas[i], &one))
                        continue;
                bool none = !json_object_object_get_ex(one, "limit", &limit) || !limit;
                ctl_table_row(&t, (const char *[]){quotas[i], none ? "none" : json_object_get_string(limit),
                                                   ctl_jstr(one, "used"), ctl_jstr(one, "source")});
        }
        ctl_table_print(ctx, &t);
        static const char *const rates[] = {"key_requests", "tenant_requests", "tenant_creates", NULL};
        json_object *rl = NULL;
        json_object_object_get_ex(u, "rate_limits", &rl);
        fprintf(ctx->out, "rate limits (each control-plane replica counts its own):");
        for (size_t i = 0; rates[i]; i++) {
                json_object *r = NULL;
                if (json_object_object_get_ex(rl, rates[i], &r) && r)
                        fprintf(ctx->out, " %s %s/s (burst %s)", rates[i], ctl_jstr(r, "per_second"),
                                ctl_jstr(r, "burst"));
                else
                        fprintf(ctx->out, " %s none", rates[i]);
        }
        fprintf(ctx->out, "\n");
}

int ctl_tenant_usage_run(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *u = NULL;
        int r = ctl_api_on(ctx, "GET", "/v1/tenants/", a->npos > 0 ? a->pos[0] : "self", "/usage", &u, err);
        if (r < 0)
                return r;
        print_usage(ctx, u);
        return 0;
}

int ctl_tenant_quota_run(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        for (size_t i = 0; quotas[i]; i++) {
                char flag[64];
                snprintf(flag, sizeof(flag), "%s", quotas[i]);
                for (char *p = flag; *p; p++)
                        if (*p == '_')
                                *p = '-';
                const char *v = ctl_arg(a, flag);
                if (!v)
                        continue;
                json_object *val = NULL;
                if (quota_value(ctx, flag, v, &val, err) < 0)
                        return -SP_E_INVALID;
                json_object_object_add(body, quotas[i], val);
        }
        if (json_object_object_length(body) == 0)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "give at least one quota (--running-sandboxes, --cpu-millis, ...; spacectl tenant "
                                "quota --help)");
        _cleanup_json_ json_object *u = NULL;
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/tenants/", NULL);
        ctl_url_escape(&path, a->pos[0]);
        sp_buf_append_str(&path, "/quotas", NULL);
        int r = ctl_api(ctx, "PUT", path.data, body, NULL, &u, err);
        if (r < 0)
                return r;
        print_usage(ctx, u);
        return 0;
}
