/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's GET /files and POST /files (multipart/form-data or an octet-stream
 * body), on the data plane's file routes. Contents stream
 * both ways: the upload is parsed as it arrives and each part is sent on to
 * the data plane while it is read, the download is relayed as it comes.
 *
 * Either route is authenticated as every envd call is (E2b-Sandbox-Id and
 * X-Access-Token), or, as envd's, by a signed URL's signature= (sign.h): the
 * signature binds the path, the operation (read for GET, write for POST) and
 * the user it names, so it grants that call only.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api.h"
#include "connect.h"
#include "multipart.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/ratelimit.h"
#include "space/time.h"

#define MAX_PATH 4096
#define MAX_PARTS 1000
#define CHUNK (64 * 1024)
#define MAX_UPLOAD (UINT64_C(64) << 30) /* as the data plane's default --max-upload */

/* Answers an envd HTTP error: {"code": status, "message"}; the sandbox's
 * agent out of reach is a bad gateway, as envd's proxy answers it. */
static void fail(e2b_call *call, const sp_error *e)
{
        e2b_rest_fail(call, e, 502);
}

/* The user of a /files call: ?username= (the SDK's), else Authorization:
 * Basic, else E2B's default user (e2b_envd_open()). */
static int files_user(e2b_call *call, e2b_envd *ev, sp_error **err)
{
        const char *u = e2b_call_req(call)->q_username;
        if (!u || !*u)
                return 0;
        if (strlen(u) > 64)
                return sp_error_set(err, SP_E_INVALID, "user name too long");
        free(ev->user);
        if (!(ev->user = strdup(u)))
                abort();
        return 0;
}

/* Opens a /files call for operation ("read" or "write"). With
 * X-Access-Token, as every envd call (the header wins over a signature, as
 * in envd). Without it, by signature=: the token that signed the path (""
 * when the URL names none), the operation and ?username= ("" when none),
 * among E2b-Sandbox-Id's when the request names a sandbox; the call then
 * acts as ?username= or E2B's default user, never as Authorization names. */
static int files_open(e2b_call *call, const e2b_ctx *ctx, const char *operation, e2b_envd *ev, sp_error **err)
{
        const e2b_req *r = e2b_call_req(call);
        if (r->access_token || !r->q_signature) {
                if (e2b_envd_open(call, ctx, ev, err) < 0)
                        return -1;
                if (files_user(call, ev, err) < 0) {
                        e2b_envd_close(ev);
                        return -1;
                }
                return 0;
        }
        memset(ev, 0, sizeof(*ev));
        const char *user = r->q_username ? r->q_username : "";
        if (strlen(user) > 64)
                return sp_error_set(err, SP_E_INVALID, "user name too long");
        _cleanup_free_ char *sandbox = NULL, *token = NULL;
        const char *sandbox_id = r->sandbox_id && *r->sandbox_id ? r->sandbox_id : NULL;
        int64_t wait_us = 0;
        if (!sandbox_id && ctx->scans &&
            !sp_ratelimit_take(ctx->scans, "scan", ctx->scan_rate, 2 * ctx->scan_rate, sp_now_mono_us(), &wait_us))
                return sp_error_set(err, SP_E_LIMIT,
                                    "too many signed file URLs that name no sandbox on this replica (at most %.0f a "
                                    "second): retry in %lld s, or reach the sandbox by its own host "
                                    "(49983-<sandbox>.<domain>) or with E2b-Sandbox-Id",
                                    ctx->scan_rate, (long long)sp_ratelimit_retry_after_s(wait_us));
        if (e2b_signers_check(ctx->signers, sandbox_id, r->q_path ? r->q_path : "", operation, user, r->q_signature,
                              r->q_signature_expiration, (int64_t)time(NULL), &sandbox, &token, err) < 0)
                return -1;
        int rc = e2b_envd_open_token(ctx, sandbox, token, user, ev, err);
        sp_explicit_bzero(token, strlen(token));
        return rc;
}

/* A files token for path, and *ret_url the data-plane URL with ?path= and
 * &owner= ev->user: as envd's, the transfer acts as root inside the sandbox,
 * a relative path is from the user's home, and what a write creates (the
 * file, the missing directories above it) is the user's (uid and primary
 * gid). The token names no user (it acts as root); owner= needs that. */
static int files_token(e2b_envd *ev, const char *path, const char *scope, char **ret_url, char **ret_token,
                       sp_error **err)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT, url = SP_BUF_INIT;
        sp_buf_append_str(&t, "/v1/sandboxes/", NULL);
        e2b_url_escape(&t, ev->sandbox_id);
        sp_buf_append_str(&t, "/files/token", NULL);
        _cleanup_json_ json_object *body = json_object_new_object(), *out = NULL;
        json_object_object_add(body, "path", json_object_new_string(path));
        json_object_object_add(body, "scope", json_object_new_string(scope));
        json_object_object_add(body, "ttl_s", json_object_new_int(600));
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, err) < 0)
                return -1;
        json_object *u = NULL, *k = NULL;
        if (!json_object_object_get_ex(out, "url", &u) || !json_object_object_get_ex(out, "token", &k))
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered no files token");
        sp_buf_append_str(&url, json_object_get_string(u), NULL);
        sp_buf_append_str(&url, "?path=", NULL);
        e2b_url_escape(&url, path);
        sp_buf_append_str(&url, "&owner=", NULL);
        e2b_url_escape(&url, ev->user);
        *ret_url = sp_buf_steal(&url);
        if (!(*ret_token = strdup(json_object_get_string(k))))
                abort();
        return 0;
}

static int check_path(const char *path, sp_error **err)
{
        if (!path || !*path || strlen(path) > MAX_PATH)
                return sp_error_set(err, SP_E_INVALID, "a path of 1 to 4096 bytes is required");
        return 0;
}

/* GET /files?path=P: the file's bytes. */
static void download(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        _cleanup_error_ sp_error *e = NULL;
        e2b_envd ev;
        _cleanup_free_ char *url = NULL, *token = NULL;
        sp_http_client *c = NULL;
        const char *path = e2b_call_req(call)->q_path;
        if (files_open(call, ctx, "read", &ev, &e) < 0 || check_path(path, &e) < 0 ||
            files_token(&ev, path, "read", &url, &token, &e) < 0) {
                fail(call, e);
                e2b_envd_close(&ev);
                return;
        }
        int status = e2b_dp_send(ctx, url, "GET", token, NULL, NULL, 0, NULL, NULL, &c, &e);
        if (status >= 0 && status != 200)
                status = e2b_dp_error(c, status, &e);
        if (status < 0) {
                fail(call, e);
        } else {
                const char *cl = sp_http_client_header(c, "Content-Length");
                int64_t len = cl ? strtoll(cl, NULL, 10) : -1;
                if (e2b_call_begin(call, 200, "application/octet-stream", NULL, len) == 0) {
                        char buf[CHUNK];
                        ssize_t n;
                        while ((n = sp_http_client_read(c, buf, sizeof(buf), -1, NULL)) > 0)
                                if (e2b_call_write(call, buf, (size_t)n) < 0)
                                        break;
                        if (n == 0)
                                e2b_call_end(call);
                }
        }
        sp_http_client_free(c);
        e2b_envd_close(&ev);
}

/* The path the data plane's answer to a PUT says it wrote (the agent's,
 * resolved: relative paths are from the user's home), or a copy of asked
 * when it says none (an older worker). Malloc'd. */
static char *written_path(sp_http_client *c, const char *asked)
{
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        char tmp[4096];
        ssize_t n;
        while ((n = sp_http_client_read(c, tmp, sizeof(tmp), -1, NULL)) > 0 && body.len <= 2 * MAX_PATH)
                sp_buf_append(&body, tmp, (size_t)n, NULL);
        _cleanup_json_ json_object *o = NULL;
        const char *p = NULL;
        if (body.len && sp_json_parse(body.data, body.len, &o, NULL) == 0)
                (void)sp_json_get_string(o, "path", false, MAX_PATH, &p, NULL);
        char *out = strdup(p && *p ? p : asked);
        if (!out)
                abort();
        return out;
}

/* Sends one file's bytes from source to the data plane, making the missing
 * directories above it first (as envd does). *ret_path is the path written
 * (malloc'd). */
static int put_file(e2b_envd *ev, const char *path, sp_http_body_source source, void *userdata, char **ret_path,
                    sp_error **err)
{
        _cleanup_free_ char *url = NULL, *token = NULL, *full = NULL;
        if (check_path(path, err) < 0 || files_token(ev, path, "write", &url, &token, err) < 0)
                return -1;
        if (asprintf(&full, "%s&parents=true", url) < 0)
                abort();
        sp_http_client *c = NULL;
        const char *h[] = {"Content-Type: application/octet-stream", NULL};
        int status = e2b_dp_send(ev->api.ctx, full, "PUT", token, h, NULL, 0, source, userdata, &c, err);
        if (status >= 0 && (status < 200 || status > 299))
                status = e2b_dp_error(c, status, err);
        if (status >= 0)
                *ret_path = written_path(c, path);
        sp_http_client_free(c);
        return status < 0 ? -1 : 0;
}

static void add_written(json_object *out, const char *path)
{
        json_object *o = json_object_new_object();
        const char *slash = strrchr(path, '/');
        json_object_object_add(o, "name", json_object_new_string(slash ? slash + 1 : path));
        json_object_object_add(o, "type", json_object_new_string("file"));
        json_object_object_add(o, "path", json_object_new_string(path));
        json_object_array_add(out, o);
}

static ssize_t body_read(void *out, size_t cap, void *userdata, sp_error **err)
{
        return e2b_call_read(userdata, out, cap, err);
}

/* POST /files[?path=P]: multipart parts (each named by the path query or
 * its filename) or one octet-stream body. */
static void upload(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        const e2b_req *r = e2b_call_req(call);
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *out = json_object_new_array();
        e2b_envd ev;
        if (files_open(call, ctx, "write", &ev, &e) < 0)
                goto failed;
        if (r->content_encoding && strcasecmp(r->content_encoding, "identity") != 0) {
                sp_error_set(&e, SP_E_UNSUPPORTED, "Content-Encoding %s is not supported", r->content_encoding);
                goto failed;
        }
        const char *ct = r->content_type ? r->content_type : "";
        if (strncasecmp(ct, "multipart/form-data", 19) == 0) {
                e2b_mp m;
                if (e2b_mp_init(&m, ct, body_read, call, &e) < 0)
                        goto failed;
                /* Skip the preamble up to the first delimiter. */
                char sink[CHUNK];
                ssize_t n;
                while ((n = e2b_mp_read(sink, sizeof(sink), &m, &e)) > 0)
                        ;
                int parts = 0;
                for (;;) {
                        if (n < 0)
                                break;
                        _cleanup_free_ char *name = NULL;
                        int more = e2b_mp_next(&m, &name, &e);
                        if (more <= 0) {
                                n = more;
                                break;
                        }
                        const char *path = r->q_path ? r->q_path : name;
                        if (++parts > MAX_PARTS) {
                                n = sp_error_set(&e, SP_E_LIMIT, "at most %d files at once", MAX_PARTS);
                                break;
                        }
                        _cleanup_free_ char *written = NULL;
                        if (put_file(&ev, path, e2b_mp_read, &m, &written, &e) < 0) {
                                n = -1;
                                break;
                        }
                        add_written(out, written);
                }
                e2b_mp_free(&m);
                if (n < 0)
                        goto failed;
        } else {
                _cleanup_free_ char *written = NULL;
                if (put_file(&ev, r->q_path, body_read, call, &written, &e) < 0)
                        goto failed;
                add_written(out, written);
        }
        if (json_object_array_length(out) == 0) {
                sp_error_set(&e, SP_E_INVALID, "no file in the request");
                goto failed;
        }
        const char *s = json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN);
        e2b_call_reply(call, 200, "application/json", NULL, s, strlen(s));
        e2b_envd_close(&ev);
        return;
failed:
        fail(call, e);
        e2b_envd_close(&ev);
}

static const e2b_route routes[] = {
        {"GET", "/files", download, false, 0},
        {"POST", "/files", upload, true, MAX_UPLOAD},
};

int e2b_files_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err)
{
        return e2b_routes_add(ctx, srv, routes, SP_ARRAY_SIZE(routes), false, err);
}
