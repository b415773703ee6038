/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Calls to the public API and the data plane (see api.h).
 */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"

#define MAX_ANSWER (8 * 1024 * 1024)
#define USER_AGENT "space-e2b"
/* A rate limit of the public API (429 with Retry-After) is waited out and
 * the call sent again, at most this many times and for waits of at most
 * this long each; a longer wait, or a 429 without Retry-After (a quota), is
 * the caller's answer. */
#define RATE_ATTEMPTS 3
#define RATE_MAX_WAIT_S 10

int e2b_api_open(e2b_api *a, const e2b_ctx *ctx, const char *key, sp_error **err)
{
        memset(a, 0, sizeof(*a));
        a->ctx = ctx;
        if (!key || !*key || strlen(key) > 512 || strpbrk(key, "\r\n"))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "missing or malformed API key");
        if (asprintf(&a->auth, "Authorization: Bearer %s", key) < 0)
                abort();
        sp_http_client_config cfg = {
                .ca_file = ctx->ca_file, .io_timeout_ms = ctx->api_timeout_ms, .user_agent = USER_AGENT};
        a->client = sp_http_client_new(ctx->api_url, &cfg, err);
        return a->client ? 0 : -1;
}

void e2b_api_close(e2b_api *a)
{
        a->client = sp_http_client_free(a->client);
        if (a->auth) {
                sp_explicit_bzero(a->auth, strlen(a->auth));
                free(a->auth);
                a->auth = NULL;
        }
}

int e2b_api_json(e2b_api *a, const char *method, const char *target, json_object *body, json_object **ret,
                 sp_error **err)
{
        if (ret)
                *ret = NULL;
        const char *headers[] = {a->auth, body ? "Content-Type: application/json" : NULL, NULL};
        const char *text = body ? sp_json_str(body) : NULL;
        sp_http_client_request rq = {.method = method,
                                     .target = target,
                                     .headers = headers,
                                     .body = text,
                                     .body_len = text ? strlen(text) : 0};
        _cleanup_buf_ sp_buf answer = SP_BUF_INIT;
        int status = 0;
        for (int limited = 0;; limited++) {
                sp_buf_clear(&answer);
                status = sp_http_client_do(a->client, &rq, MAX_ANSWER, &answer, err);
                e2b_metrics_upstream(a->ctx->metrics, E2B_UPSTREAM_API, status, err ? *err : NULL);
                /* The refused request did nothing: the same one goes again. */
                const char *ra = status == 429 ? sp_http_client_header(a->client, "Retry-After") : NULL;
                int64_t wait_s = sp_http_retry_after_parse(ra, RATE_MAX_WAIT_S + 1);
                if (wait_s < 0 || wait_s > RATE_MAX_WAIT_S || limited >= RATE_ATTEMPTS)
                        break;
                sleep((unsigned)(wait_s > 0 ? wait_s : 1));
        }
        if (status < 0)
                return sp_error_wrap(err, "the public API");
        static const char bearer[] = "Authorization: Bearer ";
        if (status != 401 && a->ctx->caps && strncmp(a->auth, bearer, sizeof(bearer) - 1) == 0)
                e2b_caps_key_accepted(a->ctx->caps, a->auth + sizeof(bearer) - 1);
        if (status < 200 || status > 299)
                return sp_error_from_answer(answer.data, answer.len, status, err);
        if (ret && answer.len > 0 && sp_json_parse(answer.data, answer.len, ret, err) < 0)
                return sp_error_wrap(err, "the public API's answer");
        return status;
}

/* 1 when op has finished well, 0 while it runs, < 0 (err) when it failed. */
static int op_finished(json_object *op, sp_error **err)
{
        json_object *v = NULL;
        const char *state = json_object_object_get_ex(op, "state", &v) ? json_object_get_string(v) : "";
        if (strcmp(state, "succeeded") == 0)
                return 1;
        if (strcmp(state, "failed") != 0)
                return 0;
        sp_errc code;
        const char *msg;
        if (sp_error_shape_get(op, &code, &msg, NULL) == 0)
                return sp_error_set(err, code, "%s", msg);
        return sp_error_set(err, SP_E_INTERNAL, "the operation failed");
}

int e2b_api_wait(e2b_api *a, json_object *envelope, int timeout_s, sp_error **err)
{
        json_object *op = NULL, *v = NULL;
        if (!json_object_object_get_ex(envelope, "operation", &op) || !json_object_object_get_ex(op, "id", &v))
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered no operation");
        char target[256];
        if (snprintf(target, sizeof(target), "/v1/operations/%s?wait=30", json_object_get_string(v)) >=
            (int)sizeof(target))
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered a malformed operation id");
        _cleanup_json_ json_object *cur = json_object_get(op);
        for (int waited = 0;; waited += 30) {
                int r = op_finished(cur, err);
                if (r != 0)
                        return r < 0 ? r : 0;
                if (waited >= timeout_s)
                        return sp_error_set(err, SP_E_TIMEOUT, "the operation did not finish in %d s", timeout_s);
                json_object *got = NULL;
                if (e2b_api_json(a, "GET", target, NULL, &got, err) < 0)
                        return -1;
                json_object_put(cur);
                cur = got;
        }
}

void e2b_url_escape(sp_buf *out, const char *s)
{
        static const char hex[] = "0123456789ABCDEF";
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                    *p == '_' || *p == '.' || *p == '~' || *p == '/') {
                        sp_buf_append(out, p, 1, NULL);
                } else {
                        char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
                        sp_buf_append(out, e, 3, NULL);
                }
        }
}

int e2b_dp_origin(const char *url, const char *override, char **ret_origin, const char **ret_target, sp_error **err)
{
        *ret_origin = NULL;
        const char *scheme = strstr(url, "://");
        const char *slash = scheme ? strchr(scheme + 3, '/') : NULL;
        if (!slash || slash == scheme + 3)
                return sp_error_set(err, SP_E_INTERNAL, "the API gave a malformed data-plane URL");
        if (override && *override) {
                size_t n = strlen(override);
                while (n && override[n - 1] == '/')
                        n--;
                *ret_origin = strndup(override, n);
        } else {
                *ret_origin = strndup(url, (size_t)(slash - url));
        }
        if (!*ret_origin)
                abort();
        *ret_target = slash;
        return 0;
}

int e2b_dp_send(const e2b_ctx *ctx, const char *url, const char *method, const char *token, const char *const *headers,
                const void *body, size_t body_len, sp_http_body_source source, void *source_userdata,
                sp_http_client **ret_client, sp_error **err)
{
        *ret_client = NULL;
        _cleanup_free_ char *origin = NULL;
        const char *slash;
        if (e2b_dp_origin(url, ctx->dataplane_url, &origin, &slash, err) < 0)
                return -1;
        sp_http_client_config cfg = {.ca_file = ctx->ca_file, .io_timeout_ms = 0, .user_agent = USER_AGENT};
        sp_http_client *c = sp_http_client_new(origin, &cfg, err);
        if (!c)
                return -1;
        _cleanup_free_ char *auth = NULL;
        if (asprintf(&auth, "Authorization: Bearer %s", token) < 0)
                abort();
        const char *h[SP_HTTP_CLIENT_MAX_HEADERS + 1];
        size_t n = 0;
        h[n++] = auth;
        for (size_t i = 0; headers && headers[i] && n < SP_HTTP_CLIENT_MAX_HEADERS; i++)
                h[n++] = headers[i];
        h[n] = NULL;
        sp_http_client_request rq = {.method = method,
                                     .target = slash,
                                     .headers = h,
                                     .body = body,
                                     .body_len = body_len,
                                     .body_source = source,
                                     .body_userdata = source_userdata};
        int status = sp_http_client_send(c, &rq, err);
        e2b_metrics_upstream(ctx->metrics, E2B_UPSTREAM_DATAPLANE, status, err ? *err : NULL);
        if (status < 0) {
                sp_http_client_free(c);
                return sp_error_wrap(err, "the data plane");
        }
        *ret_client = c;
        return status;
}

int e2b_dp_error(sp_http_client *c, int status, sp_error **err)
{
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        char tmp[4096];
        for (;;) {
                ssize_t r = sp_http_client_read(c, tmp, sizeof(tmp), -1, NULL);
                if (r <= 0 || body.len > 65536)
                        break;
                sp_buf_append(&body, tmp, (size_t)r, NULL);
        }
        return sp_error_from_answer(body.data, body.len, status, err);
}
