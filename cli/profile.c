/* SPDX-License-Identifier: Apache-2.0 */
/* `spacectl profile`: named endpoints, keys and CAs in the configuration file. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"

/* Reads an API key from stdin (`--api-key -`): one line, without its end. */
static int read_key_stdin(ctl_ctx *ctx, char *buf, size_t len, sp_error **err)
{
        if (!fgets(buf, (int)len, stdin))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--api-key -: nothing on standard input");
        buf[strcspn(buf, "\r\n")] = '\0';
        if (!*buf)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--api-key -: an empty line");
        return 0;
}

/* A profile as shown: fields, with the API key replaced by whether it is set. */
static json_object *shown_profile(const char *name, json_object *prof, bool current, bool reveal)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(name));
        json_object_object_add(o, "current", json_object_new_boolean(current));
        for (int i = 0; i < CTL_F__MAX; i++) {
                json_object *v = NULL;
                bool set = json_object_object_get_ex(prof, ctl_field_name((ctl_field)i), &v);
                if (i == CTL_F_API_KEY) {
                        json_object_object_add(o, "api_key_set", json_object_new_boolean(set));
                        if (!reveal)
                                continue;
                }
                json_object_object_add(o, ctl_field_name((ctl_field)i), set ? json_object_get(v) : NULL);
        }
        return o;
}

static int run_set(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        const char *name = a->pos[0];
        if (!ctl_profile_name_valid(name))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "profile name '%.64s' must be 1-%d of "
                                "[A-Za-z0-9._-]",
                                name, CTL_MAX_PROFILE_NAME);
        int r = ctl_load_config(ctx, err);
        if (r < 0)
                return r;
        const char *values[CTL_F__MAX] = {ctx->flags.v[CTL_F_ENDPOINT], ctx->flags.v[CTL_F_API_KEY],
                                          ctx->flags.v[CTL_F_CA_FILE], ctl_arg(a, "dataplane-url")};
        bool any = ctl_flag(a, "use") || ctl_arg(a, "unset");
        for (int i = 0; i < CTL_F__MAX; i++)
                any |= values[i] != NULL;
        if (!any)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "nothing to set: give --endpoint, --api-key, --ca, --dataplane-url, --unset or --use");
        char key[CTL_MAX_VALUE + 2];
        if (values[CTL_F_API_KEY] && strcmp(values[CTL_F_API_KEY], "-") == 0) {
                r = read_key_stdin(ctx, key, sizeof(key), err);
                if (r < 0)
                        return r;
                values[CTL_F_API_KEY] = key;
        }
        /* The endpoints must be URLs we can use, the CA file a file we can read. */
        for (int i = 0; i < CTL_F__MAX; i++) {
                if (!values[i] || (i != CTL_F_ENDPOINT && i != CTL_F_DATAPLANE_URL))
                        continue;
                _cleanup_error_ sp_error *e = NULL;
                sp_http_client *probe = sp_http_client_new(values[i], NULL, &e);
                if (!probe)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--%s: %s",
                                        i == CTL_F_ENDPOINT ? "endpoint" : "dataplane-url", e->message);
                sp_http_client_free(probe);
        }
        char ca[PATH_MAX];
        if (values[CTL_F_CA_FILE]) {
                if (!realpath(values[CTL_F_CA_FILE], ca))
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--ca %s: %m", values[CTL_F_CA_FILE]);
                values[CTL_F_CA_FILE] = ca;
        }
        for (size_t i = 0; ctl_arg_at(a, "unset", i); i++) {
                const char *u = ctl_arg_at(a, "unset", i);
                int f = ctl_field_parse(u);
                if (f < 0)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "--unset %.64s: one of endpoint, api_key, ca_file, dataplane_url", u);
                r = ctl_config_set(ctx->config, name, (ctl_field)f, NULL, err);
                if (r < 0)
                        return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
        }
        for (int i = 0; i < CTL_F__MAX; i++) {
                if (!values[i])
                        continue;
                r = ctl_config_set(ctx->config, name, (ctl_field)i, values[i], err);
                if (r < 0)
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        if (ctl_config_profile(ctx->config, name) == NULL) {
                /* Only --use on a profile that does not exist. */
                return ctl_fail(ctx, CTL_EXIT_CONFIG, err, SP_E_NOT_FOUND, "no profile '%s' in %s", name,
                                ctx->config->path);
        }
        if (ctl_flag(a, "use") || !ctl_config_current(ctx->config)) {
                r = ctl_config_use(ctx->config, name, err);
                if (r < 0)
                        return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
        }
        r = ctl_config_save(ctx->config, err);
        if (r < 0)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
        bool current = strcmp(ctl_config_current(ctx->config), name) == 0;
        if (ctx->json) {
                _cleanup_json_ json_object *o =
                        shown_profile(name, ctl_config_profile(ctx->config, name), current, false);
                ctl_print_json(ctx, o);
        } else {
                fprintf(ctx->out, "profile %s saved in %s%s\n", name, ctx->config->path, current ? " (current)" : "");
        }
        return 0;
}

static int run_use(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int r = ctl_load_config(ctx, err);
        if (r < 0)
                return r;
        r = ctl_config_use(ctx->config, a->pos[0], err);
        if (r >= 0)
                r = ctl_config_save(ctx->config, err);
        if (r < 0)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
        if (!ctx->json)
                fprintf(ctx->out, "using profile %s\n", a->pos[0]);
        return 0;
}

static int run_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int r = ctl_load_config(ctx, err);
        if (r < 0)
                return r;
        r = ctl_config_remove(ctx->config, a->pos[0], err);
        if (r >= 0)
                r = ctl_config_save(ctx->config, err);
        if (r < 0)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
        if (!ctx->json)
                fprintf(ctx->out, "profile %s removed\n", a->pos[0]);
        return 0;
}

static int run_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int r = ctl_load_config(ctx, err);
        if (r < 0)
                return r;
        const char *cur = ctl_config_current(ctx->config);
        _cleanup_json_ json_object *list = json_object_new_array();
        json_object_object_foreach (ctl_config_profiles(ctx->config), name, prof) {
                json_object_array_add(list, shown_profile(name, prof, cur && strcmp(cur, name) == 0, false));
        }
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "current", cur ? json_object_new_string(cur) : NULL);
                json_object_object_add(o, "profiles", json_object_get(list));
                ctl_print_json(ctx, o);
                return 0;
        }
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"CURRENT", "NAME", "ENDPOINT", "API KEY", "CA FILE", NULL});
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *p = json_object_array_get_idx(list, i);
                bool key = json_object_get_boolean(json_object_object_get(p, "api_key_set"));
                ctl_table_row(&t, (const char *[]){strcmp(ctl_jstr(p, "current"), "true") == 0 ? "*" : "",
                                                   ctl_jstr(p, "name"), ctl_jstr(p, "endpoint"), key ? "set" : "-",
                                                   ctl_jstr(p, "ca_file")});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

/* Shows what a command would run with: each setting and where it came from. */
static int run_show(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int r = ctl_load_config(ctx, err);
        if (r < 0)
                return r;
        ctl_settings flags = ctx->flags;
        if (a->npos > 0)
                flags.profile = a->pos[0];
        ctl_resolved res;
        r = ctl_resolve(ctx->config, &flags, &ctx->env, &res, err);
        if (r < 0)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
        bool reveal = ctl_flag(a, "reveal");
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "profile", res.profile ? json_object_new_string(res.profile) : NULL);
        json_object_object_add(o, "profile_source", json_object_new_string(ctl_source_name(res.profile_source)));
        json_object_object_add(o, "config", json_object_new_string(ctx->config->path));
        for (int i = 0; i < CTL_F__MAX; i++) {
                const char *n = ctl_field_name((ctl_field)i);
                const char *v = res.v[i];
                if (i == CTL_F_API_KEY) {
                        json_object_object_add(o, "api_key_set", json_object_new_boolean(v != NULL));
                        if (!reveal)
                                v = NULL;
                }
                if (i != CTL_F_API_KEY || reveal)
                        json_object_object_add(o, n, v ? json_object_new_string(v) : NULL);
                char sn[64];
                snprintf(sn, sizeof(sn), "%s_source", n);
                json_object_object_add(o, sn, json_object_new_string(ctl_source_name(res.source[i])));
        }
        if (ctx->json) {
                ctl_print_json(ctx, o);
        } else {
                fprintf(ctx->out, "profile: %s (%s)\nconfig: %s\n", res.profile ? res.profile : "-",
                        ctl_source_name(res.profile_source), ctx->config->path);
                for (int i = 0; i < CTL_F__MAX; i++) {
                        const char *v = res.v[i];
                        if (i == CTL_F_API_KEY && v && !reveal)
                                v = "(set; --reveal shows it)";
                        fprintf(ctx->out, "%s: %s (%s)\n", ctl_field_name((ctl_field)i), v ? v : "-",
                                ctl_source_name(res.source[i]));
                }
        }
        ctl_resolved_free(&res);
        return 0;
}

static const ctl_opt set_opts[] = {
        {"dataplane-url", "URL", 0, "the data plane's URL (for exec and file transfers)"},
        {"unset", "FIELD", CTL_OPT_REPEAT, "remove a setting: endpoint, api_key, ca_file or dataplane_url"},
        {"use", NULL, 0, "also make it the current profile"},
        {0},
};

static const ctl_opt show_opts[] = {
        {"reveal", NULL, 0, "show the API key itself"},
        {0},
};

static const ctl_cmd cmds[] = {
        {.name = "set",
         .usage = "NAME",
         .summary = "create or change a profile",
         .min_args = 1,
         .max_args = 1,
         .opts = set_opts,
         .run = run_set,
         .help = "Takes --endpoint, --api-key (- reads it from stdin), --ca and --dataplane-url as the values to\n"
                 "store. The first profile becomes the current one."},
        {.name = "use",
         .usage = "NAME",
         .summary = "make a profile the current one",
         .min_args = 1,
         .max_args = 1,
         .run = run_use},
        {.name = "ls", .summary = "list the profiles (API keys are never shown)", .run = run_ls},
        {.name = "show",
         .usage = "[NAME]",
         .summary = "show the settings a command would use, and where each comes from",
         .max_args = 1,
         .opts = show_opts,
         .run = run_show,
         .help = "Precedence: flags > environment (SPACE_*) > the profile > defaults."},
        {.name = "rm", .usage = "NAME", .summary = "remove a profile", .min_args = 1, .max_args = 1, .run = run_rm},
        {0},
};

const ctl_group ctl_group_profile = {"profile", "Profiles: named endpoints, API keys and CAs.", cmds};
