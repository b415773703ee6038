/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl template`: build (from a directory, tarball, OCI layout or a
 * Debian suite on the worker hosts), push (an archive from here, through the
 * data plane), list, get, delete.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
        static const char *const deb_only[] = {"mirror", "packages", "user"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(deb_only); i++)
                if (ctl_arg(a, deb_only[i]) && !suite)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--%s goes with --debootstrap",
                                        deb_only[i]);
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "name", json_object_new_string(a->pos[0]));
        json_object_object_add(body, "source", json_object_new_string(source));
        json_object_object_add(body, suite ? "suite" : "path", json_object_new_string(value));
        if (ctl_arg(a, "mirror"))
                json_object_object_add(body, "mirror", json_object_new_string(ctl_arg(a, "mirror")));
        if (ctl_arg(a, "packages")) {
                /* a,b,c: the API checks each name */
                json_object *list = json_object_new_array();
                json_object_object_add(body, "packages", list);
                for (const char *p = ctl_arg(a, "packages"); *p;) {
                        size_t n = strcspn(p, ", ");
                        if (n)
                                json_object_array_add(list, json_object_new_string_len(p, (int)n));
                        p += n;
                        p += strspn(p, ", ");
                }
        }
        if (ctl_arg(a, "user"))
                json_object_object_add(body, "user", json_object_new_string(ctl_arg(a, "user")));
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

/* ---- push: an archive from this machine ---- */

typedef struct push_src {
        int fd;
        ctl_xfer *x;
} push_src;

static ssize_t push_read(void *buf, size_t cap, void *userdata, sp_error **err)
{
        push_src *u = userdata;
        ssize_t n = sp_http_body_source_fd(buf, cap, &u->fd, err);
        if (n > 0) {
                u->x->done += n;
                ctl_xfer_tick(u->x, false);
        }
        return n;
}

/* The upload grant for template name: a new template, or (when one of that
 * name is still waiting for its archive) a fresh token for it. */
static int push_grant(ctl_ctx *ctx, const ctl_args *a, const char *name, const char *format, json_object **ret,
                      sp_error **err)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "name", json_object_new_string(name));
        json_object_object_add(body, "source", json_object_new_string("upload"));
        json_object_object_add(body, "format", json_object_new_string(format));
        if (ctl_arg(a, "warm")) {
                int64_t warm;
                int r = ctl_parse_int(ctl_arg(a, "warm"), 0, 64, &warm, err);
                if (r < 0) {
                        sp_error_wrap(err, "--warm");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(body, "warm", json_object_new_int64(warm));
        }
        sp_error *e = NULL;
        int r = ctl_api(ctx, "POST", "/v1/templates", body, NULL, ret, &e);
        if (r >= 0 || e->code != SP_E_CONFLICT) {
                sp_error_move(err, &e);
                return r;
        }
        /* It exists: if it still waits for its archive, take it up again. */
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        template_path(&path, name, "/upload");
        sp_error *e2 = NULL;
        ctx->exit_code = 0;
        if (ctl_api(ctx, "POST", path.data, NULL, NULL, ret, &e2) >= 0) {
                sp_error_free(e);
                return 0;
        }
        sp_error_free(e2);
        sp_error_move(err, &e); /* "a template named … already exists" */
        return -SP_E_CONFLICT;
}

/* Polls the template until it is ready or failed. */
static int push_wait(ctl_ctx *ctx, const char *name, int64_t timeout, json_object **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        template_path(&path, name, "");
        ctl_progress p;
        ctl_progress_begin(ctx, &p);
        int64_t deadline = sp_now_mono_us() + timeout;
        for (;;) {
                json_object *tpl = NULL;
                int r = ctl_api(ctx, "GET", path.data, NULL, NULL, &tpl, err);
                if (r < 0) {
                        ctl_progress_end(&p);
                        return r;
                }
                const char *state = ctl_jstr(tpl, "state");
                if (strcmp(state, "ready") == 0 || strcmp(state, "failed") == 0) {
                        ctl_progress_end(&p);
                        *ret = tpl;
                        if (strcmp(state, "failed") == 0)
                                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_INTERNAL, "template %s failed: %s", name,
                                                ctl_jstr(tpl, "error"));
                        return 0;
                }
                ctl_progress_update(&p, "template %s: %s", name, state);
                json_object_put(tpl);
                if (sp_now_mono_us() >= deadline) {
                        ctl_progress_end(&p);
                        return ctl_fail(ctx, CTL_EXIT_WAIT, err, SP_E_TIMEOUT,
                                        "template %s is still %s: waiting timed out (it goes on; see spacectl "
                                        "template get %s)",
                                        name, state, name);
                }
                nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
        }
}

static int run_push(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        bool wait;
        int64_t timeout;
        int r = ctl_wait_settings(ctx, a, BUILD_WAIT_DEFAULT_US, &wait, &timeout, err);
        if (r < 0)
                return r;
        const char *name = a->pos[0], *file = a->pos[1];
        const char *format = ctl_flag(a, "oci") ? "oci" : "tar";
        _cleanup_close_ int fd = -1;
        int64_t size = -1;
        if (strcmp(file, "-") != 0) {
                struct stat st;
                fd = open(file, O_RDONLY | O_CLOEXEC);
                if (fd < 0 || fstat(fd, &st) < 0)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_IO, "%s: %s", file, strerror(errno));
                if (S_ISDIR(st.st_mode))
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "%s is a directory: push takes an archive (tar -C DIR -c . | spacectl "
                                        "template push %s -)",
                                        file, name);
                if (S_ISREG(st.st_mode))
                        size = st.st_size;
        }
        _cleanup_json_ json_object *grant = NULL;
        if ((r = push_grant(ctx, a, name, format, &grant, err)) < 0)
                return r;
        const char *url = ctl_jstr(grant, "upload.url"), *token = ctl_jstr(grant, "upload.token");
        int64_t max = 0;
        json_object *up = NULL;
        if (json_object_object_get_ex(grant, "upload", &up))
                (void)sp_json_get_int(up, "max_bytes", false, 0, INT64_MAX, &max, NULL);
        if (!*url || !*token)
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the API's answer has no upload url or token");
        if (size > 0 && max > 0 && size > max)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_TOO_LARGE,
                                "%s holds %" PRId64 " bytes: this upload may hold %" PRId64
                                " (the tenant's template storage left, or the cluster's bound on one upload)",
                                file, size, max);
        _cleanup_free_ char *target = NULL;
        _cleanup_http_client_ sp_http_client *c = ctl_dp_client(ctx, url, &target, err);
        if (!c)
                return -1;
        char auth[CTL_DP_AUTH_MAX], label[256];
        if (ctl_dp_auth(auth, sizeof(auth), token, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_CONNECT, -SP_E_INVALID);
        snprintf(label, sizeof(label), "push %s", name);
        ctl_xfer x;
        ctl_xfer_begin(ctx, &x, label, size);
        push_src u = {.fd = fd >= 0 ? fd : STDIN_FILENO, .x = &x};
        const char *headers[] = {auth, "Content-Type: application/octet-stream", "Accept: application/json", NULL};
        sp_http_client_request req = {
                .method = "PUT", .target = target, .headers = headers, .body_source = push_read, .body_userdata = &u};
        _cleanup_buf_ sp_buf resp = SP_BUF_INIT;
        int status = sp_http_client_do(c, &req, 1024 * 1024, &resp, err);
        ctl_xfer_tick(&x, true);
        ctl_progress_end(&x.p);
        if (status < 0)
                return ctl_failed(ctx, status == -SP_E_IO ? CTL_EXIT_API : CTL_EXIT_CONNECT, status);
        if (status != 200)
                return ctl_http_fail(ctx, status, &resp, err);
        _cleanup_json_ json_object *ans = NULL, *tpl = NULL;
        int64_t got = -1;
        if (sp_json_parse(resp.data, resp.len, &ans, NULL) < 0 ||
            sp_json_get_int(ans, "bytes", true, 0, INT64_MAX, &got, NULL) < 0 || got != x.done)
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the data plane took %" PRId64 " bytes of %" PRId64 " for template %s", got, x.done,
                                name);
        if (!wait) {
                if (ctx->json)
                        ctl_print_json(ctx, ans);
                else
                        fprintf(ctx->out, "%s uploaded\n", name);
                return 0;
        }
        if ((r = push_wait(ctx, name, timeout, &tpl, err)) < 0)
                return r;
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "template", json_object_get(tpl));
                json_object_object_add(o, "bytes", json_object_new_int64(got));
                ctl_print_json(ctx, o);
        } else {
                fprintf(ctx->out, "%s ready\n", name);
        }
        return 0;
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
        _cleanup_json_ json_object *o = NULL;
        int r = ctl_api_on(ctx, "GET", "/v1/templates/", a->pos[0], "", &o, err);
        if (r < 0)
                return r;
        ctl_print_any(ctx, o);
        return 0;
}

static int run_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        bool wait;
        int64_t timeout;
        int r = ctl_wait_settings(ctx, a, DELETE_WAIT_DEFAULT_US, &wait, &timeout, err);
        if (r < 0)
                return r;
        _cleanup_json_ json_object *env = NULL;
        r = ctl_api_on(ctx, "DELETE", "/v1/templates/", a->pos[0], "", &env, err);
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
        {"packages", "LIST", 0, "Debian packages to install with --debootstrap (comma-separated, e.g. python3,git)"},
        {"user", "NAME", 0, "a login user to make in a --debootstrap template (uid 1000, sudo when installed)"},
        {"warm", "N", 0, "keep N sandboxes of it ready on each worker (0-64)"},
        {0},
};

static const ctl_opt push_opts[] = {
        {"oci", NULL, 0, "FILE is an OCI image archive (a tar of an OCI layout), not a root filesystem tarball"},
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
        {.name = "push",
         .usage = "NAME FILE",
         .summary = "make a template from an archive on this machine (FILE, or - for stdin)",
         .min_args = 2,
         .max_args = 2,
         .opts = push_opts,
         .run = run_push,
         .waits = true,
         .help = "FILE is a root filesystem tarball (plain, gzip, zstd, xz, bzip2 or lz4) or, with --oci, an OCI\n"
                 "image archive (skopeo copy ... oci-archive:FILE). It streams through the data plane with\n"
                 "progress; then the command waits until every worker has the template (up to 30 minutes unless\n"
                 "--wait-timeout). Run it again after a failed upload: it takes the same template up again."},
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
