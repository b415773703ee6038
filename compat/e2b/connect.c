/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Connect protocol with JSON and the envd calls' authentication (see
 * connect.h).
 */
#include "connect.h"

#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

/* Opens the API with the key token seals for sandbox_id, as *user (taken). */
static int envd_open(const e2b_ctx *ctx, const char *sandbox_id, const char *token, char *user, e2b_envd *ret,
                     sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        ret->user = user;
        _cleanup_free_ char *key = e2b_token_open(&ctx->key, sandbox_id, token, err);
        if (!key) {
                e2b_envd_close(ret);
                return -1;
        }
        /* envd acts as its default user when the SDK names none (as the SDK
         * does from envd 0.4 on); E2B's templates all have `user`, and the
         * wrapper makes sure ours do (user.c). */
        if (!ret->user && !(ret->user = strdup(E2B_REQUEST_DEFAULT_USER)))
                abort();
        ret->ctx = ctx;
        if (!(ret->sandbox_id = strdup(sandbox_id)))
                abort();
        int rc = e2b_api_open(&ret->api, ctx, key, err);
        if (rc < 0)
                e2b_envd_close(ret);
        else
                e2b_signers_remember(ctx->signers, sandbox_id, token, key);
        sp_explicit_bzero(key, strlen(key));
        return rc;
}

int e2b_envd_open(e2b_call *call, const e2b_ctx *ctx, e2b_envd *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        const e2b_req *r = e2b_call_req(call);
        if (!r->sandbox_id || !*r->sandbox_id || strlen(r->sandbox_id) > 128)
                return sp_error_set(err, SP_E_INVALID, "missing E2b-Sandbox-Id header");
        if (!r->access_token)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "missing X-Access-Token header");
        char *user = NULL;
        if (e2b_request_user(r->authorization, &user, err) < 0)
                return -1;
        return envd_open(ctx, r->sandbox_id, r->access_token, user, ret, err);
}

int e2b_envd_open_token(const e2b_ctx *ctx, const char *sandbox_id, const char *token, const char *user, e2b_envd *ret,
                        sp_error **err)
{
        char *u = NULL;
        if (user && *user && !(u = strdup(user)))
                abort();
        return envd_open(ctx, sandbox_id, token, u, ret, err);
}

void e2b_envd_close(e2b_envd *e)
{
        e2b_api_close(&e->api);
        free(e->user);
        e->user = NULL;
        free(e->sandbox_id);
        e->sandbox_id = NULL;
}

/* E2B's own wire: Connect code names, each with the HTTP status the Connect
 * protocol gives it (not sp_errc_http_status(): a timeout is 504 there, too
 * large 429). */
const char *e2b_connect_code(sp_errc code, int *ret_status)
{
        static const struct {
                sp_errc code;
                const char *name;
                int status;
        } map[] = {
                {SP_E_INVALID, "invalid_argument", 400},     {SP_E_UNAUTHENTICATED, "unauthenticated", 401},
                {SP_E_PERMISSION, "permission_denied", 403}, {SP_E_NOT_FOUND, "not_found", 404},
                {SP_E_METHOD, "unimplemented", 501},         {SP_E_TIMEOUT, "deadline_exceeded", 504},
                {SP_E_CONFLICT, "already_exists", 409},      {SP_E_TOO_LARGE, "resource_exhausted", 429},
                {SP_E_UNSUPPORTED, "unimplemented", 501},    {SP_E_LIMIT, "resource_exhausted", 429},
                {SP_E_UNAVAILABLE, "unavailable", 503},      {SP_E_PRECONDITION, "failed_precondition", 400},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(map); i++)
                if (map[i].code == code) {
                        if (ret_status)
                                *ret_status = map[i].status;
                        return map[i].name;
                }
        if (ret_status)
                *ret_status = 500;
        return "internal";
}

int e2b_connect_request(e2b_call *call, bool stream, json_object **ret, sp_error **err)
{
        const e2b_req *r = e2b_call_req(call);
        return e2b_request_message(r->body, r->body_len, stream, ret, err);
}

void e2b_connect_reply(e2b_call *call, json_object *msg)
{
        const char *s = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN);
        e2b_call_reply(call, 200, "application/json", NULL, s, strlen(s));
}

static json_object *error_json(const sp_error *e, int *ret_status)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "code", json_object_new_string(e2b_connect_code(e->code, ret_status)));
        json_object_object_add(o, "message", json_object_new_string(e->message));
        return o;
}

void e2b_connect_error(e2b_call *call, const sp_error *e)
{
        int status = 500;
        _cleanup_json_ json_object *o = error_json(e, &status);
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        e2b_call_reply(call, status, "application/json", NULL, s, strlen(s));
}

int e2b_connect_stream_begin(e2b_call *call)
{
        return e2b_call_begin(call, 200, "application/connect+json", NULL, -1);
}

static int send_envelope(e2b_call *call, uint8_t flag, json_object *msg)
{
        const char *s = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN);
        size_t n = strlen(s);
        uint8_t head[5] = {flag, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_buf_append(&b, head, sizeof(head), NULL);
        sp_buf_append(&b, s, n, NULL);
        return e2b_call_write(call, b.data, b.len);
}

int e2b_connect_stream_send(e2b_call *call, json_object *msg)
{
        return send_envelope(call, 0, msg);
}

void e2b_connect_stream_end(e2b_call *call, const sp_error *e)
{
        _cleanup_json_ json_object *end = json_object_new_object();
        if (e)
                json_object_object_add(end, "error", error_json(e, NULL));
        send_envelope(call, 2, end);
        e2b_call_end(call);
}
