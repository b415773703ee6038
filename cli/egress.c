/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl egress`: a tenant's egress profiles (docs/networking.md); and
 * `spacectl sandbox egress` (change a sandbox's profile) and `sandbox
 * egress-log` (its decisions, optionally followed).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"

#define PROFILE_FILE_MAX (1 << 20)

/* A profile from --file (JSON; - for stdin), or from the options. */
static int profile_body(ctl_ctx *ctx, const ctl_args *a, const char *name, json_object **ret, sp_error **err)
{
        const char *file = ctl_arg(a, "file");
        int r;
        if (file) {
                if (ctl_arg(a, "domain") || ctl_arg(a, "port") || ctl_arg(a, "cidr") || ctl_arg(a, "mode") ||
                    ctl_flag(a, "allow-private") || ctl_arg(a, "secret"))
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "--file holds the whole profile: no --domain, --port, --cidr, --mode, "
                                        "--allow-private or --secret with it");
                _cleanup_buf_ sp_buf text = SP_BUF_INIT;
                if ((r = sp_file_read(strcmp(file, "-") == 0 ? "/dev/stdin" : file, PROFILE_FILE_MAX, &text, err)) <
                            0 ||
                    (r = sp_json_parse(text.data ? text.data : "", text.len, ret, err)) < 0) {
                        sp_error_wrap(err, "--file %s", file);
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                if (!json_object_is_type(*ret, json_type_object)) {
                        sp_json_putp(ret);
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--file %s: not a JSON object", file);
                }
                if (name && !json_object_object_get_ex(*ret, "name", NULL))
                        json_object_object_add(*ret, "name", json_object_new_string(name));
                return 0;
        }
        json_object *o = json_object_new_object();
        if (name)
                json_object_object_add(o, "name", json_object_new_string(name));
        const char *s;
        if (ctl_arg(a, "domain")) {
                json_object *d = json_object_new_array();
                json_object_object_add(o, "domains", d);
                for (size_t i = 0; (s = ctl_arg_at(a, "domain", i)); i++)
                        json_object_array_add(d, json_object_new_string(s));
        }
        if (ctl_arg(a, "port")) {
                json_object *p = json_object_new_array();
                json_object_object_add(o, "ports", p);
                for (size_t i = 0; (s = ctl_arg_at(a, "port", i)); i++) {
                        int64_t v;
                        if ((r = ctl_parse_int(s, 1, 65535, &v, err)) < 0) {
                                json_object_put(o);
                                sp_error_wrap(err, "--port");
                                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                        }
                        json_object_array_add(p, json_object_new_int64(v));
                }
        }
        if (ctl_arg(a, "cidr")) {
                json_object *c = json_object_new_array();
                json_object_object_add(o, "cidrs", c);
                for (size_t i = 0; (s = ctl_arg_at(a, "cidr", i)); i++)
                        json_object_array_add(c, json_object_new_string(s));
        }
        if (ctl_arg(a, "secret")) {
                json_object *g = json_object_new_array();
                json_object_object_add(o, "secrets", g);
                for (size_t i = 0; (s = ctl_arg_at(a, "secret", i)); i++)
                        json_object_array_add(g, json_object_new_string(s));
        }
        if ((s = ctl_arg(a, "mode")))
                json_object_object_add(o, "mode", json_object_new_string(s));
        if (ctl_flag(a, "allow-private"))
                json_object_object_add(o, "allow_private", json_object_new_boolean(true));
        *ret = o;
        return 0;
}

static int run_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        (void)a;
        _cleanup_json_ json_object *resp = NULL;
        int r = ctl_api(ctx, "GET", "/v1/egress-profiles", NULL, NULL, &resp, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, resp);
                return 0;
        }
        json_object *list = NULL;
        json_object_object_get_ex(resp, "egress_profiles", &list);
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"NAME", "MODE", "DOMAINS", "PORTS", "CIDRS", "SANDBOXES", NULL});
        for (size_t i = 0; list && i < json_object_array_length(list); i++) {
                json_object *p = json_object_array_get_idx(list, i);
                char d[96], pt[64], c[96];
                bool builtin = strcmp(ctl_jstr(p, "builtin"), "true") == 0;
                const char *domains = ctl_jjoin(p, "domains", d, sizeof(d));
                if (builtin && strcmp(ctl_jstr(p, "name"), "public") == 0)
                        domains = "(any)";
                ctl_table_row(&t, (const char *[]){ctl_jstr(p, "name"), ctl_jstr(p, "mode"), domains,
                                                   ctl_jjoin(p, "ports", pt, sizeof(pt)),
                                                   ctl_jjoin(p, "cidrs", c, sizeof(c)),
                                                   builtin ? "(built in)" : ctl_jstr(p, "sandboxes")});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

static int run_get(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *p = NULL;
        int r = ctl_api_on(ctx, "GET", "/v1/egress-profiles/", a->pos[0], "", &p, err);
        if (r < 0)
                return r;
        ctl_print_any(ctx, p);
        return 0;
}

static int run_put(ctl_ctx *ctx, const ctl_args *a, bool create, sp_error **err)
{
        _cleanup_json_ json_object *body = NULL, *p = NULL;
        int r = profile_body(ctx, a, create ? a->pos[0] : NULL, &body, err);
        if (r < 0)
                return r;
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/egress-profiles", NULL);
        if (!create) {
                sp_buf_append_str(&path, "/", NULL);
                ctl_url_escape(&path, a->pos[0]);
        }
        if ((r = ctl_api(ctx, create ? "POST" : "PUT", path.data, body, NULL, &p, err)) < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, p);
        else if (create)
                fprintf(ctx->out, "%s\n", ctl_jstr(p, "name"));
        else
                fprintf(ctx->out, "%s updated (%s sandboxes get it)\n", ctl_jstr(p, "name"),
                        ctl_jstr(p, "sandboxes_updating"));
        return 0;
}

static int run_create(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        return run_put(ctx, a, true, err);
}

static int run_update(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        return run_put(ctx, a, false, err);
}

static int run_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int r = ctl_api_on(ctx, "DELETE", "/v1/egress-profiles/", a->pos[0], "", NULL, err);
        if (r < 0)
                return r;
        if (!ctx->json)
                fprintf(ctx->out, "%s deleted\n", a->pos[0]);
        return 0;
}

static const ctl_opt profile_opts[] = {
        {"domain", "NAME", CTL_OPT_REPEAT, "a name it may reach: example.com, or *.example.com for those below it"},
        {"port", "PORT", CTL_OPT_REPEAT, "a TCP port it may reach (default 80 and 443)"},
        {"cidr", "A.B.C.D/N", CTL_OPT_REPEAT, "addresses it may reach without a name"},
        {"mode", "MODE", 0, "enforce (default) or audit: allowed, but logged as would-refuse"},
        {"allow-private", NULL, 0, "let --cidr name private addresses (admins only)"},
        {"secret", "NAME", CTL_OPT_REPEAT, "a secret of yours that sandboxes with this profile may be given"},
        {"file", "FILE", 0, "the whole profile as JSON (- for stdin) instead of the options"},
        {0},
};

static const ctl_cmd egress_cmds[] = {
        {.name = "ls", .summary = "list egress profiles (the built-in none and public, then yours)", .run = run_ls},
        {.name = "get", .usage = "NAME", .summary = "show a profile", .min_args = 1, .max_args = 1, .run = run_get},
        {.name = "create",
         .usage = "NAME",
         .summary = "create a profile",
         .min_args = 1,
         .max_args = 1,
         .opts = profile_opts,
         .run = run_create,
         .help = "Example: spacectl egress create ci --domain pypi.org --domain '*.pythonhosted.org' --port 443"},
        {.name = "update",
         .usage = "NAME",
         .summary = "replace a profile; the sandboxes using it get the new one",
         .min_args = 1,
         .max_args = 1,
         .opts = profile_opts,
         .run = run_update,
         .help = "The options (or --file) give the whole new profile, not a change to the old one."},
        {.name = "rm",
         .usage = "NAME",
         .summary = "delete a profile no sandbox uses",
         .min_args = 1,
         .max_args = 1,
         .run = run_rm},
        {0},
};

const ctl_group ctl_group_egress = {"egress", "Egress profiles: what sandboxes may reach through their node's gateway.",
                                    egress_cmds};

/* ---- spacectl sandbox egress ID PROFILE ---- */

int ctl_run_sandbox_egress(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        const char *profile = a->pos[1];
        _cleanup_json_ json_object *body = json_object_new_object(), *s = NULL;
        if (profile[0] == '@') {
                _cleanup_buf_ sp_buf text = SP_BUF_INIT;
                json_object *o = NULL;
                int r = sp_file_read(strcmp(profile, "@-") == 0 ? "/dev/stdin" : profile + 1, PROFILE_FILE_MAX, &text,
                                     err);
                if (r >= 0)
                        r = sp_json_parse(text.data ? text.data : "", text.len, &o, err);
                if (r < 0) {
                        sp_error_wrap(err, "%s", profile);
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(body, "egress", o);
        } else {
                json_object_object_add(body, "egress", json_object_new_string(profile));
        }
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/sandboxes/", NULL);
        ctl_url_escape(&path, a->pos[0]);
        sp_buf_append_str(&path, "/egress", NULL);
        int r = ctl_api(ctx, "PUT", path.data, body, NULL, &s, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, s);
        else if (strcmp(ctl_jstr(s, "egress_applied"), "true") == 0)
                fprintf(ctx->out, "%s: egress %s\n", ctl_jstr(s, "id"), ctl_jstr(s, "egress"));
        else
                fprintf(ctx->out, "%s: egress %s (its worker gets it when it can be reached)\n", ctl_jstr(s, "id"),
                        ctl_jstr(s, "egress"));
        return 0;
}

/* ---- spacectl sandbox egress-log ID ---- */

static void print_record(ctl_ctx *ctx, json_object *rec)
{
        if (ctx->json) {
                fprintf(ctx->out, "%s\n", json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN));
                return;
        }
        json_object *t = NULL;
        int64_t us = json_object_object_get_ex(rec, "time_us", &t) ? json_object_get_int64(t) : 0;
        time_t secs = (time_t)(us / 1000000);
        struct tm tm;
        char when[96] = "-";
        if (gmtime_r(&secs, &tm))
                snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                         tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(us % 1000000 / 1000));
        char dest[80] = "-";
        const char *d = ctl_jstr(rec, "destination");
        if (strcmp(d, "-") != 0)
                snprintf(dest, sizeof(dest), "%s:%s", d, ctl_jstr(rec, "port"));
        /* A secret's record: which secret, to which host. */
        bool secret = strcmp(ctl_jstr(rec, "kind"), "secret") == 0;
        if (secret)
                snprintf(dest, sizeof(dest), "%s", ctl_jstr(rec, "host"));
        fprintf(ctx->out, "%s %-6s %-12s %-18s %-30s %-21s %s\n", when, ctl_jstr(rec, "kind"),
                ctl_jstr(rec, "decision"), ctl_jstr(rec, "rule"), ctl_jstr(rec, secret ? "secret" : "name"), dest,
                ctl_jstr(rec, "proto"));
}

int ctl_run_sandbox_egress_log(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int64_t limit = 100, for_s = 0;
        const char *s;
        int r;
        if ((s = ctl_arg(a, "limit")) && (r = ctl_parse_int(s, 1, 1000, &limit, err)) < 0) {
                sp_error_wrap(err, "--limit");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        if ((s = ctl_arg(a, "for")) && (r = ctl_parse_seconds(s, &for_s, err)) < 0) {
                sp_error_wrap(err, "--for");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        bool follow = ctl_flag(a, "follow");
        if (for_s && !follow)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--for goes with --follow");
        _cleanup_buf_ sp_buf base = SP_BUF_INIT;
        sp_buf_append_str(&base, "/v1/sandboxes/", NULL);
        ctl_url_escape(&base, a->pos[0]);
        sp_buf_appendf(&base, NULL, "/egress/log?limit=%lld", (long long)limit);
        const char *filters[] = {"decision", "kind"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(filters); i++)
                if ((s = ctl_arg(a, filters[i]))) {
                        sp_buf_appendf(&base, NULL, "&%s=", filters[i]);
                        ctl_url_escape(&base, s);
                }
        _cleanup_json_ json_object *first = NULL;
        if ((r = ctl_api(ctx, "GET", base.data, NULL, NULL, &first, err)) < 0)
                return r;
        json_object *recs = NULL;
        json_object_object_get_ex(first, "records", &recs);
        if (!follow && ctx->json) {
                ctl_print_json(ctx, first);
                return 0;
        }
        int64_t last = 0;
        for (size_t i = 0; recs && i < json_object_array_length(recs); i++) {
                json_object *rec = json_object_array_get_idx(recs, i), *t = NULL;
                print_record(ctx, rec);
                if (json_object_object_get_ex(rec, "time_us", &t))
                        last = json_object_get_int64(t);
        }
        if (!follow) {
                if (strcmp(ctl_jstr(first, "more"), "true") == 0 && last)
                        fprintf(stderr, "spacectl: older records: --limit up to 1000\n");
                return 0;
        }
        /* Following: newer records every second, until interrupted, the
         * sandbox is gone, or --for has passed. */
        fflush(ctx->out);
        int64_t until = for_s ? sp_now_mono_us() + for_s * SP_USEC_PER_SEC : 0;
        if (!last)
                last = sp_now_real_us() - 5 * SP_USEC_PER_SEC;
        while (!until || sp_now_mono_us() < until) {
                usleep(1000 * 1000);
                _cleanup_buf_ sp_buf target = SP_BUF_INIT;
                sp_buf_append(&target, base.data, base.len, NULL);
                sp_buf_appendf(&target, NULL, "&after=%lld", (long long)last);
                _cleanup_json_ json_object *more = NULL;
                if ((r = ctl_api(ctx, "GET", target.data, NULL, NULL, &more, err)) < 0)
                        return r;
                json_object *m = NULL;
                json_object_object_get_ex(more, "records", &m);
                for (size_t i = 0; m && i < json_object_array_length(m); i++) {
                        json_object *rec = json_object_array_get_idx(m, i), *t = NULL;
                        print_record(ctx, rec);
                        if (json_object_object_get_ex(rec, "time_us", &t))
                                last = json_object_get_int64(t);
                }
                fflush(ctx->out);
        }
        return 0;
}

const ctl_opt ctl_sandbox_egress_log_opts[] = {
        {"decision", "DECISION", 0, "only allowed, refused or would-refuse"},
        {"kind", "KIND", 0, "only dns, tcp, packet or secret"},
        {"limit", "N", 0, "the last N records (1-1000, default 100)"},
        {"follow", NULL, CTL_OPT_SHORT('f'), "keep printing new records until interrupted"},
        {"for", "DURATION", 0, "with --follow: stop after this long (10s, 5m)"},
        {0},
};
