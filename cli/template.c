/* SPDX-License-Identifier: Apache-2.0 */
/* `spacectl template`: build (from a directory, tarball, OCI layout or a Debian suite), list, get, delete. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define BUILD_WAIT_DEFAULT_US (30 * 60 * SP_USEC_PER_SEC)
#define DELETE_WAIT_DEFAULT_US (10 * 60 * SP_USEC_PER_SEC)

static void template_path(sp_buf *b, const char *name, const char *suffix)
{
        sp_buf_append_str(b, "/v1/templates/", NULL);
        ctl_url_escape(b, name);
        sp_buf_append_str(b, suffix, NULL);
}

/* Waits for a template operation and prints "NAME STATE" or the envelope. */
static int finish(ctl_ctx *ctx, bool wait, int64_t timeout, const char *name, json_object *env, const char *verb,
                  sp_error **err)
{
        int r;
        if (!wait) {
                if (ctx->json)
                        ctl_print_json(ctx, env);
                else
                        fprintf(ctx->out, "%s\n", ctl_jstr(env, "operation.id"));
                return 0;
        }
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        template_path(&path, name, "");
        char label[192];
        snprintf(label, sizeof(label), "%s template %s", verb, name);
        bool gone = strcmp(verb, "delete") == 0;
        _cleanup_json_ json_object *op = NULL, *tpl = NULL;
        r = ctl_wait_operation(ctx, ctl_jstr(env, "operation.id"), label, gone ? NULL : path.data, timeout, &op, err);
        if (r < 0)
                return r;
        if (!gone && (r = ctl_api(ctx, "GET", path.data, NULL, NULL, &tpl, err)) < 0)
                return r;
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "operation", json_object_get(op));
                if (tpl)
                        json_object_object_add(o, "template", json_object_get(tpl));
                ctl_print_json(ctx, o);
        } else {
                fprintf(ctx->out, "%s %s\n", name, gone ? "deleted" : ctl_jstr(tpl, "state"));
        }
        return 0;
}

static int run_build(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        bool wait;
        int64_t timeout;
        int r = ctl_wait_settings(ctx, a, BUILD_WAIT_DEFAULT_US, &wait, &timeout, err);
        if (r < 0)
                return r;
        static const char *const sources[][2] = {
                {"dir", "dir"}, {"tar", "tar"}, {"oci", "oci"}, {"debootstrap", "debootstrap"}};
        const char *source = NULL, *value = NULL;
        for (size_t i = 0; i < SP_ARRAY_SIZE(sources); i++) {
                if (!ctl_arg(a, sources[i][0]))
                        continue;
                if (source)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "give one of --dir, --tar, --oci and --debootstrap");
                source = sources[i][1];
                value = ctl_arg(a, sources[i][0]);
        }
        if (!source)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "give one of --dir, --tar, --oci and --debootstrap\nRun 'spacectl template build "
                                "--help' for usage.");
        bool suite = strcmp(source, "debootstrap") == 0;
        if (!suite && value[0] != '/')
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "--%s %s: the path must be absolute (it is read on the worker hosts)", source, value);
        if (ctl_arg(a, "mirror") && !suite)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--mirror goes with --debootstrap");
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "name", json_object_new_string(a->pos[0]));
        json_object_object_add(body, "source", json_object_new_string(source));
        json_object_object_add(body, suite ? "suite" : "path", json_object_new_string(value));
        if (ctl_arg(a, "mirror"))
                json_object_object_add(body, "mirror", json_object_new_string(ctl_arg(a, "mirror")));
        if (ctl_arg(a, "warm")) {
                int64_t warm;
                r = ctl_parse_int(ctl_arg(a, "warm"), 0, 64, &warm, err);
                if (r < 0) {
                        sp_error_wrap(err, "--warm");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(body, "warm", json_object_new_int64(warm));
        }
        _cleanup_json_ json_object *env = NULL;
        r = ctl_api(ctx, "POST", "/v1/templates", body, NULL, &env, err);
        if (r < 0)
                return r;
        return finish(ctx, wait, timeout, a->pos[0], env, "build", err);
}

static int run_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *resp = NULL;
        int r = ctl_api(ctx, "GET", "/v1/templates", NULL, NULL, &resp, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, resp);
                return 0;
        }
        json_object *list = NULL;
        json_object_object_get_ex(resp, "templates", &list);
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"NAME", "STATE", "SOURCE", "WARM", "PUBLIC", "AGE", NULL});
        for (size_t i = 0; list && i < json_object_array_length(list); i++) {
                json_object *o = json_object_array_get_idx(list, i);
                char age[32];
                ctl_table_row(&t, (const char *[]){ctl_jstr(o, "name"), ctl_jstr(o, "state"), ctl_jstr(o, "source"),
                                                   ctl_jstr(o, "warm"),
                                                   strcmp(ctl_jstr(o, "public"), "true") == 0 ? "yes" : "no",
                                                   ctl_jage(o, "created_at", age, sizeof(age))});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

static int run_get(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        template_path(&path, a->pos[0], "");
        _cleanup_json_ json_object *o = NULL;
        int r = ctl_api(ctx, "GET", path.data, NULL, NULL, &o, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, o);
        else
                ctl_print_object(ctx, o);
        return 0;
}

static int run_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        bool wait;
        int64_t timeout;
        int r = ctl_wait_settings(ctx, a, DELETE_WAIT_DEFAULT_US, &wait, &timeout, err);
        if (r < 0)
                return r;
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        template_path(&path, a->pos[0], "");
        _cleanup_json_ json_object *env = NULL;
        r = ctl_api(ctx, "DELETE", path.data, NULL, NULL, &env, err);
        if (r < 0)
                return r;
        return finish(ctx, wait, timeout, a->pos[0], env, "delete", err);
}

static int run_warm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int64_t warm;
        int r = ctl_parse_int(a->pos[1], 0, 64, &warm, err);
        if (r < 0) {
                sp_error_wrap(err, "warm-pool size");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "warm", json_object_new_int64(warm));
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        template_path(&path, a->pos[0], "/warm");
        _cleanup_json_ json_object *o = NULL;
        r = ctl_api(ctx, "POST", path.data, body, NULL, &o, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, o);
        else
                fprintf(ctx->out, "%s warm %s\n", ctl_jstr(o, "name"), ctl_jstr(o, "warm"));
        return 0;
}

static const ctl_opt build_opts[] = {
        {"dir", "PATH", 0, "from a directory tree on the worker hosts"},
        {"tar", "PATH", 0, "from a root filesystem tarball on the worker hosts"},
        {"oci", "PATH", 0, "from an OCI image layout on the worker hosts"},
        {"debootstrap", "SUITE", 0, "from a Debian suite (e.g. bookworm) via debootstrap"},
        {"mirror", "URL", 0, "the Debian mirror for --debootstrap"},
        {"warm", "N", 0, "keep N sandboxes of it ready on each worker (0-64)"},
        {0},
};

static const ctl_cmd cmds[] = {
        {.name = "build",
         .usage = "NAME",
         .summary = "register a template and build it on the workers",
         .min_args = 1,
         .max_args = 1,
         .opts = build_opts,
         .run = run_build,
         .waits = true,
         .help = "Paths are absolute paths on the worker hosts (in direct mode: this host). Waits for the build\n"
                 "(up to 30 minutes unless --wait-timeout), showing its progress."},
        {.name = "ls", .summary = "list your templates and the public ones", .run = run_ls},
        {.name = "get", .usage = "NAME", .summary = "show a template", .min_args = 1, .max_args = 1, .run = run_get},
        {.name = "rm",
         .usage = "NAME",
         .summary = "delete a template (refused while sandboxes use it)",
         .min_args = 1,
         .max_args = 1,
         .run = run_rm,
         .waits = true},
        {.name = "warm",
         .usage = "NAME N",
         .summary = "keep N sandboxes of a template ready on each worker",
         .min_args = 2,
         .max_args = 2,
         .run = run_warm},
        {0},
};

const ctl_group ctl_group_template = {"template", "Templates: the images sandboxes start from.", cmds};
