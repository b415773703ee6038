/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl's connection to the public API: settings, the HTTP client, calls
 * with idempotent retries, errors in the API's words, and waiting for
 * operations with progress on stderr.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"
#include "space/time.h"

#define MAX_RESPONSE (64 * 1024 * 1024)
#define ATTEMPTS 4
#define FIRST_BACKOFF_MS 250
/* Rate limits (429 with Retry-After): how many times a call is sent again,
 * and the longest wait honoured for one. */
#define RATE_ATTEMPTS 5
#define RATE_MAX_WAIT_S 60
/* Long-poll slices: short while progress is shown, so the elapsed time moves. */
#define POLL_SLICE_S 30
#define POLL_SLICE_PROGRESS_S 1

const ctl_opt ctl_wait_opts[] = {
        {"wait", NULL, 0, "wait until the operation has finished (the default)"},
        {"no-wait", NULL, 0, "return as soon as the operation is accepted"},
        {"wait-timeout", "DURATION", 0, "give up waiting after this long (exit code 5)"},
        {0},
};

int ctl_fail(ctl_ctx *ctx, int exit_code, sp_error **err, sp_errc code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = sp_error_setv(err, code, 0, fmt, ap);
        va_end(ap);
        ctx->exit_code = exit_code;
        return r;
}

int ctl_failed(ctl_ctx *ctx, int exit_code, int r)
{
        ctx->exit_code = exit_code;
        return r;
}

void ctl_url_escape(sp_buf *out, const char *s)
{
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '.' || c == '_' || c == '~')
                        sp_buf_append(out, s, 1, NULL);
                else
                        sp_buf_appendf(out, NULL, "%%%02X", c);
        }
}

/* The code of the API's error shape, mapped back to ours (internal for a code
 * newer than this client). */
static sp_errc code_from_name(const char *name)
{
        sp_errc c = sp_errc_from_name(name);
        return c == SP_E__MAX ? SP_E_INTERNAL : c;
}

/* Fails with the message of an error answer (the one shape), or with the
 * status when the body is something else. */
static int api_error(ctl_ctx *ctx, int status, json_object *body, const sp_buf *raw, sp_error **err)
{
        json_object *e = NULL, *code = NULL, *msg = NULL;
        if (body && json_object_object_get_ex(body, "error", &e) && json_object_object_get_ex(e, "code", &code) &&
            json_object_object_get_ex(e, "message", &msg) && json_object_is_type(msg, json_type_string))
                return ctl_fail(ctx, CTL_EXIT_API, err, code_from_name(json_object_get_string(code)), "%s (%s)",
                                json_object_get_string(msg), json_object_get_string(code));
        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_INTERNAL, "the API answered HTTP %d: %.200s", status,
                        raw->data ? raw->data : "");
}

int ctl_http_fail(ctl_ctx *ctx, int status, const sp_buf *body, sp_error **err)
{
        _cleanup_json_ json_object *parsed = NULL;
        if (body->len > 0 && sp_json_parse(body->data, body->len, &parsed, NULL) < 0)
                parsed = NULL;
        return api_error(ctx, status, parsed, body, err);
}

static void sleep_ms(int ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0) {
        }
}

int ctl_api_on(ctl_ctx *ctx, const char *method, const char *prefix, const char *name, const char *suffix,
               json_object **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, prefix, NULL);
        ctl_url_escape(&path, name);
        sp_buf_append_str(&path, suffix, NULL);
        return ctl_api(ctx, method, path.data, NULL, NULL, ret, err);
}

void ctl_print_any(ctl_ctx *ctx, json_object *o)
{
        if (ctx->json)
                ctl_print_json(ctx, o);
        else
                ctl_print_object(ctx, o);
}

int ctl_api(ctl_ctx *ctx, const char *method, const char *target, json_object *body, const char *idem_key,
            json_object **ret, sp_error **err)
{
        int r = ctl_connect(ctx, err);
        if (r < 0)
                return r;
        char auth[CTL_MAX_VALUE + 32], idem[300], generated[SP_ID_MAX];
        const char *headers[5];
        size_t nh = 0;
        headers[nh++] = "Accept: application/json";
        const char *key = ctx->settings.v[CTL_F_API_KEY];
        if (key) {
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
                headers[nh++] = auth;
        }
        bool mutating = strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0;
        if (mutating) {
                if (!idem_key) {
                        sp_id_new("idem", generated, NULL);
                        idem_key = generated;
                }
                snprintf(idem, sizeof(idem), "Idempotency-Key: %s", idem_key);
                headers[nh++] = idem;
        }
        const char *text = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL;
        if (text)
                headers[nh++] = "Content-Type: application/json";
        headers[nh] = NULL;
        sp_http_client_request req = {.method = method,
                                      .target = target,
                                      .headers = headers,
                                      .body = text,
                                      .body_len = text ? strlen(text) : 0};
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT;
        int status = 0;
        for (int attempt = 1, limited = 0;; attempt++) {
                sp_error *e = NULL;
                sp_buf_clear(&raw);
                status = sp_http_client_do(ctx->http, &req, MAX_RESPONSE, &raw, &e);
                /* A rate limit: the request did nothing; sent again, as it
                 * was, after the wait the server asks for (a 429 without
                 * Retry-After is a quota: waiting does not help). */
                int64_t wait_s = status == 429
                                         ? sp_http_retry_after_parse(sp_http_client_header(ctx->http, "Retry-After"),
                                                                     RATE_MAX_WAIT_S)
                                         : -1;
                if (wait_s >= 0 && limited < RATE_ATTEMPTS && !(ctx->interrupted && *ctx->interrupted)) {
                        limited++;
                        attempt--;
                        fprintf(stderr, "spacectl: rate limited by the API; retrying in %lld s (%d of %d)\n",
                                (long long)wait_s, limited, RATE_ATTEMPTS);
                        sleep_ms((int)(wait_s > 0 ? wait_s * 1000 : FIRST_BACKOFF_MS));
                        continue;
                }
                bool transient = status < 0 ? (e->code == SP_E_UNAVAILABLE || e->code == SP_E_TIMEOUT) : status == 503;
                if (!transient || attempt == ATTEMPTS) {
                        if (status < 0) {
                                sp_error_move(err, &e);
                                return ctl_failed(ctx, CTL_EXIT_CONNECT, status);
                        }
                        break;
                }
                sp_error_free(e);
                sleep_ms(FIRST_BACKOFF_MS << (attempt - 1));
        }
        _cleanup_json_ json_object *parsed = NULL;
        if (raw.len > 0 && sp_json_parse(raw.data, raw.len, &parsed, NULL) < 0 && status < 300)
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the API answered %d with a body that is not "
                                "JSON",
                                status);
        if (status < 200 || status >= 300)
                return api_error(ctx, status, parsed, &raw, err);
        if (ret)
                *ret = TAKE_PTR(parsed);
        return status;
}

/* ---- progress ---- */

void ctl_progress_begin(ctl_ctx *ctx, ctl_progress *p)
{
        memset(p, 0, sizeof(*p));
        p->tty = isatty(STDERR_FILENO);
        p->on = ctx->progress > 0 || (ctx->progress < 0 && p->tty);
        p->start_us = sp_now_mono_us();
}

void ctl_progress_update(ctl_progress *p, const char *fmt, ...)
{
        if (!p->on)
                return;
        char text[sizeof(p->last)];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        double elapsed = (double)(sp_now_mono_us() - p->start_us) / (double)SP_USEC_PER_SEC;
        if (p->tty) {
                fprintf(stderr, "\r\033[K%s (%.1fs)", text, elapsed);
                fflush(stderr);
        } else if (strcmp(text, p->last) != 0) {
                fprintf(stderr, "%s (%.1fs)\n", text, elapsed);
        }
        memcpy(p->last, text, sizeof(p->last));
}

void ctl_progress_end(ctl_progress *p)
{
        if (p->on && p->tty && p->last[0]) {
                fprintf(stderr, "\r\033[K");
                fflush(stderr);
        }
}

/* ---- operations ---- */

int ctl_wait_settings(ctl_ctx *ctx, const ctl_args *a, int64_t default_timeout_us, bool *ret_wait,
                      int64_t *ret_timeout_us, sp_error **err)
{
        if (ctl_flag(a, "wait") && ctl_flag(a, "no-wait"))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--wait and --no-wait contradict each other");
        *ret_wait = !ctl_flag(a, "no-wait");
        *ret_timeout_us = default_timeout_us;
        const char *t = ctl_arg(a, "wait-timeout");
        if (t) {
                int r = sp_duration_parse(t, ret_timeout_us, err);
                if (r < 0) {
                        sp_error_wrap(err, "--wait-timeout");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
        }
        return 0;
}

int ctl_wait_operation(ctl_ctx *ctx, const char *op_id, const char *label, const char *state_target, int64_t timeout_us,
                       json_object **ret, sp_error **err)
{
        ctl_progress p;
        ctl_progress_begin(ctx, &p);
        int64_t deadline = sp_now_mono_us() + timeout_us;
        _cleanup_buf_ sp_buf target = SP_BUF_INIT;
        _cleanup_json_ json_object *op = NULL;
        for (;;) {
                if (ctx->interrupted && *ctx->interrupted) {
                        ctl_progress_end(&p);
                        return ctl_fail(ctx, CTL_EXIT_WAIT, err, SP_E_TIMEOUT,
                                        "%s: interrupted while operation %s runs", label, op_id);
                }
                int64_t left = deadline - sp_now_mono_us();
                if (left < 0)
                        left = 0;
                /* Short slices while progress moves or a signal may end the wait. */
                double slice = p.on || ctx->interrupted ? POLL_SLICE_PROGRESS_S : POLL_SLICE_S;
                if ((double)left / (double)SP_USEC_PER_SEC < slice)
                        slice = (double)left / (double)SP_USEC_PER_SEC;
                sp_buf_clear(&target);
                sp_buf_append_str(&target, "/v1/operations/", NULL);
                ctl_url_escape(&target, op_id);
                sp_buf_appendf(&target, NULL, "?wait=%.3f", slice);
                if (op)
                        json_object_put(TAKE_PTR(op));
                int r = ctl_api(ctx, "GET", target.data, NULL, NULL, &op, err);
                if (r < 0) {
                        ctl_progress_end(&p);
                        return r;
                }
                const char *state = ctl_jstr(op, "state");
                if (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0)
                        break;
                char object_state[64] = "";
                if (p.on && state_target) {
                        _cleanup_json_ json_object *obj = NULL;
                        sp_error *e = NULL;
                        if (ctl_api(ctx, "GET", state_target, NULL, NULL, &obj, &e) >= 0)
                                snprintf(object_state, sizeof(object_state), ", state %s", ctl_jstr(obj, "state"));
                        sp_error_free(e);
                        ctx->exit_code = 0;
                }
                const char *msg = ctl_jstr(op, "message");
                ctl_progress_update(&p, "%s: operation %s%s%s%s", label, state, object_state,
                                    strcmp(msg, "-") ? ": " : "", strcmp(msg, "-") ? msg : "");
                if (sp_now_mono_us() >= deadline) {
                        ctl_progress_end(&p);
                        char d[32];
                        sp_duration_format(timeout_us, d);
                        return ctl_fail(ctx, CTL_EXIT_WAIT, err, SP_E_TIMEOUT,
                                        "%s: operation %s is still %s after %s (spacectl operation wait %s)", label,
                                        op_id, state, d, op_id);
                }
        }
        ctl_progress_end(&p);
        if (strcmp(ctl_jstr(op, "state"), "failed") == 0) {
                const char *code = ctl_jstr(op, "error.code");
                return ctl_fail(ctx, CTL_EXIT_API, err, code_from_name(code), "%s: operation %s failed: %s (%s)", label,
                                op_id, ctl_jstr(op, "error.message"), code);
        }
        if (ret)
                *ret = TAKE_PTR(op);
        return 0;
}
