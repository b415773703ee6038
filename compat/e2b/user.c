/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's default user in a sandbox (see user.h): a stat as `user` says
 * whether it and its home are there; when not, a session runs the script
 * below as root and its attach stream is read to the exit.
 */
#include "user.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach.h"
#include "request.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

#define OUTPUT_MAX 1024 /* of the script's output, kept for an error */

/* POSIX sh and the tools every image with a shell has (mkdir, chown, chmod;
 * tail and cp are used when there). Idempotent: an existing `user` is kept,
 * only its home made when it is missing. */
static const char script[] =
        "set -e\n"
        "umask 022\n"
        /* has FILE NAME: a line of FILE is NAME's; taken FILE ID: one has ID as its third field */
        "has() { [ -r \"$1\" ] || return 1; while IFS=: read -r n r || [ -n \"$n\" ]; do"
        " [ \"$n\" = \"$2\" ] && return 0; done < \"$1\"; return 1; }\n"
        "taken() { [ -r \"$1\" ] || return 1; while IFS=: read -r n x i r || [ -n \"$n\" ]; do"
        " [ \"$i\" = \"$2\" ] && return 0; done < \"$1\"; return 1; }\n"
        "gidof() { [ -r /etc/group ] || return 1; while IFS=: read -r n x g r || [ -n \"$n\" ]; do"
        " [ \"$n\" = \"$1\" ] && { echo \"$g\"; return 0; }; done < /etc/group; return 1; }\n"
        /* entry: uid, gid and home of user from /etc/passwd */
        "entry() { [ -r /etc/passwd ] || return 1; while IFS=: read -r n x u g c h s || [ -n \"$n\" ]; do"
        " if [ \"$n\" = user ]; then uid=$u; gid=$g; home=$h; return 0; fi; done < /etc/passwd; return 1; }\n"
        /* nl FILE: end FILE's last line before a line is added */
        "nl() { if [ -s \"$1\" ] && [ -n \"$(tail -c 1 \"$1\" 2>/dev/null)\" ]; then echo >> \"$1\"; fi; }\n"
        "[ -e /etc/passwd ] || echo 'root:x:0:0:root:/root:/bin/sh' > /etc/passwd\n"
        "[ -e /etc/group ] || echo 'root:x:0:' > /etc/group\n"
        "if ! entry; then\n"
        "  id=1000\n"
        "  while taken /etc/passwd $id || taken /etc/group $id; do\n"
        "    id=$((id + 1)); [ $id -lt 60000 ] || { echo 'no free uid from 1000 to 59999' >&2; exit 1; }\n"
        "  done\n"
        "  g=$(gidof user) || g=$id\n"
        "  sh=/bin/sh; if [ -x /bin/bash ]; then sh=/bin/bash; fi\n"
        "  nl /etc/passwd; echo \"user:x:$id:$g::/home/user:$sh\" >> /etc/passwd\n"
        "  if ! has /etc/group user; then nl /etc/group; echo \"user:x:$g:\" >> /etc/group; fi\n"
        "  if [ -f /etc/shadow ] && ! has /etc/shadow user; then"
        " nl /etc/shadow; echo 'user:*:19000:0:99999:7:::' >> /etc/shadow; fi\n"
        "  if [ -d /etc/sudoers.d ]; then echo 'user ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/space-e2b-user;"
        " chmod 0440 /etc/sudoers.d/space-e2b-user; fi\n"
        "  entry\n"
        "fi\n"
        "case $home in /?*) ;; *) exit 0 ;; esac\n"
        "if [ ! -d \"$home\" ]; then\n"
        "  mkdir -p \"$home\"\n"
        "  if [ -d /etc/skel ]; then cp -a /etc/skel/. \"$home\"/ 2>/dev/null || true; fi\n"
        "  chown -R \"$uid:$gid\" \"$home\"\n"
        "fi\n";

static void target_for(sp_buf *b, const char *id, const char *suffix)
{
        sp_buf_append_str(b, "/v1/sandboxes/", NULL);
        e2b_url_escape(b, id);
        sp_buf_append_str(b, suffix, NULL);
}

/* What the script's attach stream said: its output (the first OUTPUT_MAX
 * bytes) and exit. */
typedef struct run {
        sp_buf output;
        bool exited;
        int64_t code;
        sp_error *error; /* an error event */
} run;

static int on_event(const char *event, const char *data, size_t len, void *userdata)
{
        run *r = userdata;
        if (!event)
                return 0; /* a keep-alive */
        if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
                _cleanup_buf_ sp_buf bytes = SP_BUF_INIT;
                if (r->output.len < OUTPUT_MAX && sp_base64_decode(&bytes, data, len, 0, NULL) == 0 && bytes.len)
                        sp_buf_append(&r->output, bytes.data,
                                      bytes.len < OUTPUT_MAX - r->output.len ? bytes.len : OUTPUT_MAX - r->output.len,
                                      NULL);
                return 0;
        }
        if (strcmp(event, "exit") == 0) {
                _cleanup_json_ json_object *o = NULL;
                r->exited = true;
                r->code = -1;
                if (sp_json_parse(data, len, &o, NULL) == 0)
                        (void)sp_json_get_int(o, "code", false, INT64_MIN, INT64_MAX, &r->code, NULL);
                return 1;
        }
        if (strcmp(event, "error") == 0) {
                sp_error_set(&r->error, SP_E_UNAVAILABLE, "the script's output stream failed: %.*s", (int)len, data);
                return 1;
        }
        return 0;
}

/* Reads the session's attach stream at url to its exit. */
static int wait_exit(const e2b_ctx *ctx, const char *url, const char *token, run *r, sp_error **err)
{
        sp_http_client *c = NULL;
        const char *h[] = {"Accept: text/event-stream", NULL};
        int status = e2b_dp_send(ctx, url, "GET", token, h, NULL, 0, NULL, NULL, &c, err);
        if (status >= 0 && status != 200)
                status = e2b_dp_error(c, status, err);
        if (status < 0) {
                sp_http_client_free(c);
                return -1;
        }
        e2b_attach sse = E2B_ATTACH_INIT;
        char buf[16384];
        int rc = 0;
        while (rc == 0) {
                ssize_t n = sp_http_client_read(c, buf, sizeof(buf), -1, err);
                if (n <= 0) {
                        if (n == 0)
                                sp_error_set(err, SP_E_UNAVAILABLE, "the script's output stream ended early");
                        rc = -1;
                        break;
                }
                rc = e2b_attach_feed(&sse, buf, (size_t)n, on_event, r, err);
        }
        e2b_attach_free(&sse);
        sp_http_client_free(c);
        if (r->error) {
                if (err) {
                        sp_error_freep(err);
                        *err = TAKE_PTR(r->error);
                }
                sp_error_freep(&r->error);
                return -1;
        }
        return rc < 0 ? -1 : 0;
}

int e2b_user_ensure(e2b_api *a, const char *sandbox_id, sp_error **err)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, sandbox_id, "/files/stat?path=~&user=" E2B_REQUEST_DEFAULT_USER);
        _cleanup_json_ json_object *st = NULL, *out = NULL, *body = json_object_new_object();
        sp_error *e = NULL;
        if (e2b_api_json(a, "GET", t.data, NULL, &st, &e) >= 0)
                return 0;
        if (e->code != SP_E_NOT_FOUND) { /* no user, or no home: made below; anything else is the answer */
                if (err)
                        *err = TAKE_PTR(e);
                sp_error_freep(&e);
                return -1;
        }
        sp_error_freep(&e);

        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("/bin/sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string(script));
        json_object_object_add(body, "argv", argv);
        json_object_object_add(body, "user", json_object_new_string("root"));
        json_object_object_add(body, "cwd", json_object_new_string("/"));
        json_object_object_add(body, "timeout_s", json_object_new_int(E2B_USER_TIMEOUT_S));
        sp_buf_clear(&t);
        target_for(&t, sandbox_id, "/sessions");
        if (e2b_api_json(a, "POST", t.data, body, &out, err) < 0)
                return sp_error_wrap(err, "make the user '%s'", E2B_REQUEST_DEFAULT_USER);
        const char *url = sp_json_member_str(out, "attach_url"), *token = sp_json_member_str(out, "attach_token");
        if (!url || !token)
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered no session");
        run r = {.output = SP_BUF_INIT};
        int rc = wait_exit(a->ctx, url, token, &r, err);
        if (rc == 0 && r.code != 0)
                rc = sp_error_set(err, SP_E_PRECONDITION, "cannot make the user '%s' in the sandbox (exit %lld): %.*s",
                                  E2B_REQUEST_DEFAULT_USER, (long long)r.code, (int)r.output.len,
                                  r.output.data ? r.output.data : "");
        else if (rc < 0)
                sp_error_wrap(err, "make the user '%s'", E2B_REQUEST_DEFAULT_USER);
        sp_buf_free(&r.output);
        return rc < 0 ? -1 : 0;
}
