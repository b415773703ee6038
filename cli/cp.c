/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl cp`: a file into or out of a sandbox, through the data plane
 * under a file token the API mints for that one path. Both directions
 * stream (never a whole file in memory); a download is written to a
 * temporary file next to its destination and renamed into place once
 * complete.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define CHUNK (64 * 1024)
#define MAX_REMOTE_PATH 4096

const ctl_opt ctl_cp_opts[] = {
        {0},
};

/* ---- arguments ---- */

/* SANDBOX:PATH, where SANDBOX has no '/' (so ./a:b is a local path). */
static bool split_remote(const char *s, char *sandbox, size_t len, const char **ret_path)
{
        const char *colon = strchr(s, ':');
        const char *slash = strchr(s, '/');
        if (!colon || colon == s || (slash && slash < colon) || (size_t)(colon - s) >= len)
                return false;
        memcpy(sandbox, s, (size_t)(colon - s));
        sandbox[colon - s] = '\0';
        *ret_path = colon + 1;
        return true;
}

/* The last component of a path ("" for "-" or a path ending in '/'). */
static const char *base_name(const char *path)
{
        const char *slash = strrchr(path, '/');
        return slash ? slash + 1 : strcmp(path, "-") == 0 ? "" : path;
}

/* ---- the API ---- */

/* A file token for one path: the data-plane client, the request target (with ?path=) and the token. */
static sp_http_client *file_token(ctl_ctx *ctx, const char *sandbox, const char *path, const char *scope,
                                  sp_buf *target, char **ret_token, sp_error **err)
{
        _cleanup_buf_ sp_buf p = SP_BUF_INIT;
        sp_buf_append_str(&p, "/v1/sandboxes/", NULL);
        ctl_url_escape(&p, sandbox);
        sp_buf_append_str(&p, "/files/token", NULL);
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "path", json_object_new_string(path));
        json_object_object_add(body, "scope", json_object_new_string(scope));
        _cleanup_json_ json_object *resp = NULL;
        if (ctl_api(ctx, "POST", p.data, body, NULL, &resp, err) < 0)
                return NULL;
        const char *url = NULL, *token = NULL;
        if (sp_json_get_string(resp, "url", true, 4096, &url, NULL) < 0 || !url ||
            sp_json_get_string(resp, "token", true, CTL_DP_TOKEN_MAX, &token, NULL) < 0 || !token) {
                ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID, "the API's file token answer has no url or token");
                return NULL;
        }
        _cleanup_free_ char *base_target = NULL;
        sp_http_client *c = ctl_dp_client(ctx, url, &base_target, err);
        if (!c)
                return NULL;
        *ret_token = strdup(token);
        if (!*ret_token) {
                ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
                return sp_http_client_free(c);
        }
        sp_buf_append_str(target, base_target, NULL);
        sp_buf_append_str(target, "?path=", NULL);
        ctl_url_escape(target, path);
        return c;
}

/* Whether path is a directory in the sandbox (false when it does not exist). */
static int remote_is_dir(ctl_ctx *ctx, const char *sandbox, const char *path, bool *ret, sp_error **err)
{
        _cleanup_buf_ sp_buf p = SP_BUF_INIT;
        sp_buf_append_str(&p, "/v1/sandboxes/", NULL);
        ctl_url_escape(&p, sandbox);
        sp_buf_append_str(&p, "/files/stat?path=", NULL);
        ctl_url_escape(&p, path);
        _cleanup_json_ json_object *st = NULL;
        sp_error *e = NULL;
        if (ctl_api(ctx, "GET", p.data, NULL, NULL, &st, &e) < 0) {
                if (e->code != SP_E_NOT_FOUND) {
                        sp_error_move(err, &e);
                        return -1;
                }
                sp_error_free(e);
                ctx->exit_code = 0;
                *ret = false;
                return 0;
        }
        *ret = strcmp(ctl_jstr(st, "type"), "dir") == 0;
        return 0;
}

static void print_result(ctl_ctx *ctx, const char *dir, const char *sandbox, const char *path, int64_t bytes)
{
        if (!ctx->json)
                return;
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "direction", json_object_new_string(dir));
        json_object_object_add(o, "sandbox", json_object_new_string(sandbox));
        json_object_object_add(o, "path", json_object_new_string(path));
        json_object_object_add(o, "bytes", json_object_new_int64(bytes));
        ctl_print_json(ctx, o);
}

/* ---- upload ---- */

typedef struct upload_src {
        int fd;
        ctl_xfer *x;
} upload_src;

static ssize_t upload_read(void *buf, size_t cap, void *userdata, sp_error **err)
{
        upload_src *u = userdata;
        ssize_t n = sp_http_body_source_fd(buf, cap, &u->fd, err);
        if (n > 0) {
                u->x->done += n;
                ctl_xfer_tick(u->x, false);
        }
        return n;
}

static int upload(ctl_ctx *ctx, const char *src, const char *sandbox, const char *dst, sp_error **err)
{
        _cleanup_close_ int fd = -1;
        unsigned mode = 0644;
        int64_t size = -1;
        if (strcmp(src, "-") != 0) {
                fd = open(src, O_RDONLY | O_CLOEXEC);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0)
                        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_IO, "%s: %s", src, strerror(errno));
                if (S_ISDIR(st.st_mode))
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "%s is a directory: cp copies one file (tar it: tar c DIR | spacectl exec "
                                        "SANDBOX -- tar x)",
                                        src);
                mode = st.st_mode & 0777;
                if (S_ISREG(st.st_mode))
                        size = st.st_size;
        }
        /* Into a directory: under the source's name. */
        _cleanup_free_ char *path = NULL;
        bool dir = dst[strlen(dst) - 1] == '/';
        if (!dir && remote_is_dir(ctx, sandbox, dst, &dir, err) < 0)
                return -1;
        if (dir && !*base_name(src))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "%s:%s is a directory: name the file to write stdin to", sandbox, dst);
        if (asprintf(&path, "%s%s%s", dst, dir && dst[strlen(dst) - 1] != '/' ? "/" : "", dir ? base_name(src) : "") <
            0)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
        if (strlen(path) > MAX_REMOTE_PATH)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "the path is longer than %d bytes",
                                MAX_REMOTE_PATH);

        _cleanup_buf_ sp_buf target = SP_BUF_INIT;
        _cleanup_free_ char *token = NULL;
        _cleanup_http_client_ sp_http_client *c = file_token(ctx, sandbox, path, "write", &target, &token, err);
        if (!c)
                return -1;
        sp_buf_appendf(&target, NULL, "&mode=%04o", mode);
        char auth[CTL_DP_AUTH_MAX], label[256];
        if (ctl_dp_auth(auth, sizeof(auth), token, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_CONNECT, -SP_E_INVALID);
        snprintf(label, sizeof(label), "%s:%s", sandbox, path);
        ctl_xfer x;
        ctl_xfer_begin(ctx, &x, label, size);
        upload_src u = {.fd = fd >= 0 ? fd : STDIN_FILENO, .x = &x};
        const char *headers[] = {auth, "Content-Type: application/octet-stream", "Accept: application/json", NULL};
        sp_http_client_request req = {.method = "PUT",
                                      .target = target.data,
                                      .headers = headers,
                                      .body_source = upload_read,
                                      .body_userdata = &u};
        _cleanup_buf_ sp_buf resp = SP_BUF_INIT;
        int status = sp_http_client_do(c, &req, 64 * 1024, &resp, err);
        ctl_xfer_tick(&x, true);
        ctl_progress_end(&x.p);
        if (status < 0)
                /* SP_E_IO: reading our source failed; the rest is the connection's. */
                return ctl_failed(ctx, status == -SP_E_IO ? CTL_EXIT_API : CTL_EXIT_CONNECT, status);
        if (status != 200)
                return ctl_http_fail(ctx, status, &resp, err);
        _cleanup_json_ json_object *ans = NULL;
        int64_t written = -1;
        if (sp_json_parse(resp.data, resp.len, &ans, NULL) < 0 ||
            sp_json_get_int(ans, "size", true, 0, INT64_MAX, &written, NULL) < 0 || written != x.done)
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the data plane wrote %" PRId64 " bytes of %" PRId64 " to %s", written, x.done, label);
        print_result(ctx, "upload", sandbox, path, x.done);
        return 0;
}

/* ---- download ---- */

static int write_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -errno;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Where the download goes: dst, or dst/<name> for a directory. */
static char *local_destination(const char *dst, const char *remote)
{
        struct stat st;
        bool dir = dst[strlen(dst) - 1] == '/' || (stat(dst, &st) == 0 && S_ISDIR(st.st_mode));
        char *out = NULL;
        if (asprintf(&out, "%s%s%s", dst, dir && dst[strlen(dst) - 1] != '/' ? "/" : "", dir ? base_name(remote) : "") <
            0)
                return NULL;
        return out;
}

static int download(ctl_ctx *ctx, const char *sandbox, const char *src, const char *dst, sp_error **err)
{
        bool to_stdout = strcmp(dst, "-") == 0;
        if (to_stdout && ctx->json)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--json and - (stdout) contradict each other");
        if (!*base_name(src) && !to_stdout)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "%s:%s names a directory: cp copies one file",
                                sandbox, src);
        _cleanup_free_ char *dest = to_stdout ? NULL : local_destination(dst, src);
        if (!to_stdout && !dest)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");

        _cleanup_buf_ sp_buf target = SP_BUF_INIT;
        _cleanup_free_ char *token = NULL;
        _cleanup_http_client_ sp_http_client *c = file_token(ctx, sandbox, src, "read", &target, &token, err);
        if (!c)
                return -1;
        char auth[CTL_DP_AUTH_MAX];
        if (ctl_dp_auth(auth, sizeof(auth), token, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_CONNECT, -SP_E_INVALID);
        const char *headers[] = {auth, NULL};
        sp_http_client_request req = {.method = "GET", .target = target.data, .headers = headers};
        int status = sp_http_client_send(c, &req, err);
        if (status < 0)
                return ctl_failed(ctx, CTL_EXIT_CONNECT, status);
        if (status != 200)
                return ctl_dp_fail(ctx, c, status, err);
        const char *cl = sp_http_client_header(c, "Content-Length");
        int64_t total = cl ? strtoll(cl, NULL, 10) : -1;

        /* A temporary file next to the destination, renamed into place once complete. */
        _cleanup_free_ char *tmp = NULL;
        _cleanup_close_ int fd = -1;
        if (!to_stdout) {
                _cleanup_free_ char *copy = strdup(dest);
                if (!copy || asprintf(&tmp, "%s/.%s.spacectl-XXXXXX", dirname(copy), base_name(dest)) < 0)
                        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
                fd = mkostemp(tmp, O_CLOEXEC);
                if (fd < 0)
                        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_IO, "%s: %s", dest, strerror(errno));
                mode_t mask = umask(0);
                umask(mask);
                if (fchmod(fd, 0666 & ~mask) < 0) {
                        unlink(tmp);
                        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_IO, "%s: %s", tmp, strerror(errno));
                }
        }
        char label[256];
        snprintf(label, sizeof(label), "%s:%s", sandbox, src);
        ctl_xfer x;
        ctl_xfer_begin(ctx, &x, label, total);
        _cleanup_free_ char *buf = malloc(CHUNK);
        int r = buf ? 0 : ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
        while (r == 0) {
                ssize_t n = sp_http_client_read(c, buf, CHUNK, -1, err);
                if (n == 0)
                        break;
                if (n < 0) {
                        r = ctl_failed(ctx, CTL_EXIT_CONNECT, (int)n);
                        break;
                }
                int w = write_all(to_stdout ? STDOUT_FILENO : fd, buf, (size_t)n);
                if (w < 0)
                        r = ctl_fail(ctx, CTL_EXIT_API, err, SP_E_IO, "writing %s: %s", to_stdout ? "stdout" : tmp,
                                     strerror(-w));
                x.done += n;
                ctl_xfer_tick(&x, false);
        }
        ctl_xfer_tick(&x, true);
        ctl_progress_end(&x.p);
        if (r == 0 && total >= 0 && x.done != total)
                r = ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_UNAVAILABLE,
                             "%s: received %" PRId64 " of %" PRId64 " bytes", label, x.done, total);
        if (r == 0 && !to_stdout && (fsync(fd) < 0 || rename(tmp, dest) < 0))
                r = ctl_fail(ctx, CTL_EXIT_API, err, SP_E_IO, "%s: %s", dest, strerror(errno));
        if (r < 0) {
                if (tmp)
                        unlink(tmp);
                return r;
        }
        print_result(ctx, "download", sandbox, src, x.done);
        return 0;
}

int ctl_run_cp(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        const char *src = a->pos[0], *dst = a->pos[1];
        char ssbx[128], dsbx[128];
        const char *spath = NULL, *dpath = NULL;
        bool sremote = split_remote(src, ssbx, sizeof(ssbx), &spath);
        bool dremote = split_remote(dst, dsbx, sizeof(dsbx), &dpath);
        if (sremote == dremote)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "one of SRC and DST must be SANDBOX:PATH and the other a local path (or -)");
        const char *path = sremote ? spath : dpath;
        if (!*path || !*(sremote ? dst : src))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "a path is empty");
        if (strlen(path) > MAX_REMOTE_PATH)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "the path is longer than %d bytes",
                                MAX_REMOTE_PATH);
        return sremote ? download(ctx, ssbx, spath, dst, err) : upload(ctx, src, dsbx, dpath, err);
}
