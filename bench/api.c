/* SPDX-License-Identifier: Apache-2.0 */
#include "api.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "space/buf.h"
#include "space/attach_frames.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

/* Largest API answer kept, and longest line of an event stream (an event
 * carries at most 48 KiB of output, 64 KiB in base64). */
#define MAX_BODY (4 << 20)
#define MAX_SSE_LINE (256 * 1024)

int bn_api_init(bn_api *a, const char *url, const char *key, sp_error **err)
{
        *a = (bn_api){0};
        if (strlen(key) > 256)
                return sp_error_set(err, SP_E_INVALID, "API key too long");
        snprintf(a->auth, sizeof(a->auth), "Authorization: Bearer %s", key);
        sp_http_client_config cfg = {.io_timeout_ms = 120000, .user_agent = "space-bench"};
        a->api = sp_http_client_new(url, &cfg, err);
        return a->api ? 0 : sp_error_wrap(err, "API client");
}

void bn_api_done(bn_api *a)
{
        a->api = sp_http_client_free(a->api);
        a->dp = sp_http_client_free(a->dp);
}

int bn_api_call(bn_api *a, const char *method, const char *path, const char *body, int want, json_object **ret,
                sp_error **err)
{
        const char *headers[] = {a->auth, body ? "Content-Type: application/json" : NULL, NULL};
        sp_http_client_request req = {.method = method, .target = path, .headers = headers};
        if (body) {
                req.body = body;
                req.body_len = strlen(body);
        }
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        int status = sp_http_client_do(a->api, &req, MAX_BODY, &out, err);
        if (status < 0)
                return sp_error_wrap(err, "%s %s", method, path);
        if (status != want)
                return sp_error_set(err, SP_E_INTERNAL, "%s %s: status %d: %.*s", method, path, status,
                                    (int)(out.len > 500 ? 500 : out.len), out.data ? out.data : "");
        if (!ret)
                return 0;
        if (sp_json_parse(out.data ? out.data : "", out.len, ret, err) < 0)
                return sp_error_wrap(err, "%s %s: the answer", method, path);
        return 0;
}

/* Copies the string at "object.field" of o into out. */
static int get_id(json_object *o, const char *object, const char *field, char out[static BN_ID_MAX], sp_error **err)
{
        json_object *inner = o;
        const char *s = NULL;
        if ((object && sp_json_get_object(o, object, true, &inner, err) < 0) ||
            sp_json_get_string(inner, field, true, BN_ID_MAX - 1, &s, err) < 0)
                return sp_error_wrap(err, "the answer's %s.%s", object ? object : "", field);
        snprintf(out, BN_ID_MAX, "%s", s);
        return 0;
}

int bn_api_wait_op(bn_api *a, const char *op, int timeout_s, sp_error **err)
{
        int64_t deadline = sp_now_mono_us() + (int64_t)timeout_s * 1000000;
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s?wait=%d", op, timeout_s < 30 ? timeout_s : 30);
        do {
                _cleanup_json_ json_object *o = NULL;
                const char *state = NULL;
                if (bn_api_call(a, "GET", path, NULL, 200, &o, err) < 0 ||
                    sp_json_get_string(o, "state", true, 64, &state, err) < 0)
                        return sp_error_wrap(err, "operation %s", op);
                if (strcmp(state, "succeeded") == 0)
                        return 0;
                if (strcmp(state, "failed") == 0 || strcmp(state, "cancelled") == 0)
                        return sp_error_set(err, SP_E_INTERNAL, "operation %s %s: %s", op, state,
                                            json_object_to_json_string(o));
        } while (sp_now_mono_us() < deadline);
        return sp_error_set(err, SP_E_TIMEOUT, "operation %s did not finish in %d s", op, timeout_s);
}

int bn_api_create(bn_api *a, const char *body, char id[static BN_ID_MAX], char op[static BN_ID_MAX], sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        if (bn_api_call(a, "POST", "/v1/sandboxes", body, 202, &o, err) < 0 ||
            get_id(o, "sandbox", "id", id, err) < 0 || get_id(o, "operation", "id", op, err) < 0)
                return -SP_E_INTERNAL;
        return 0;
}

int bn_api_delete(bn_api *a, const char *id, char op[static BN_ID_MAX], sp_error **err)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *o = NULL;
        if (bn_api_call(a, "DELETE", path, NULL, 202, &o, err) < 0 || get_id(o, "operation", "id", op, err) < 0)
                return -SP_E_INTERNAL;
        return 0;
}

/* ---- the attach stream: server-sent events, one line at a time ---- */

typedef struct sse_state {
        bn_session *s;
        char type[32];
        sp_buf data; /* base64 of the current event */
        sp_buf decoded;
        bool ended; /* exit or error seen */
        char error[512];
} sse_state;

/* Handles the event gathered so far, at its blank line. */
static int dispatch(sse_state *st, sp_error **err)
{
        bool output = strcmp(st->type, "stdout") == 0 || strcmp(st->type, "stderr") == 0;
        if (output && st->data.len) {
                sp_buf_clear(&st->decoded);
                if (sp_base64_decode(&st->decoded, st->data.data, st->data.len, 0, err) < 0)
                        return sp_error_wrap(err, "an output event");
                if (st->decoded.len && !st->s->first_byte)
                        st->s->first_byte = sp_now_mono_us();
                st->s->bytes += st->decoded.len;
        } else if (strcmp(st->type, "exit") == 0) {
                st->s->exit_seen = sp_now_mono_us();
                _cleanup_json_ json_object *o = NULL;
                int64_t code = 0;
                if (sp_json_parse(st->data.data ? st->data.data : "", st->data.len, &o, err) < 0 ||
                    sp_json_get_int(o, "code", true, -1, 255, &code, err) < 0)
                        return sp_error_wrap(err, "the exit event");
                st->s->exit_code = (int)code;
                st->ended = true;
        } else if (strcmp(st->type, "error") == 0) {
                snprintf(st->error, sizeof(st->error), "error event: %.*s",
                         (int)(st->data.len > 400 ? 400 : st->data.len), st->data.data ? st->data.data : "");
                st->ended = true;
        }
        st->type[0] = '\0';
        sp_buf_clear(&st->data);
        return 0;
}

static int line(sse_state *st, const char *l, size_t n, sp_error **err)
{
        if (n && l[n - 1] == '\r')
                n--;
        if (n == 0)
                return st->type[0] ? dispatch(st, err) : 0;
        if (n >= 6 && memcmp(l, "event:", 6) == 0) {
                size_t skip = n > 6 && l[6] == ' ' ? 7 : 6;
                snprintf(st->type, sizeof(st->type), "%.*s", (int)(n - skip), l + skip);
        } else if (n >= 5 && memcmp(l, "data:", 5) == 0) {
                size_t skip = n > 5 && l[5] == ' ' ? 6 : 5;
                if (!st->type[0])
                        snprintf(st->type, sizeof(st->type), "message");
                if (sp_buf_append(&st->data, l + skip, n - skip, err) < 0)
                        return -SP_E_INTERNAL;
        }
        return 0; /* ids, comments and other fields: not needed here */
}

/* Makes a->dp a client of the attach URL's origin; *ret_path is the rest. */
static int dp_client(bn_api *a, const char *url, const char **ret_path, sp_error **err)
{
        const char *scheme = strstr(url, "://");
        const char *path = scheme ? strchr(scheme + 3, '/') : NULL;
        if (!path || (size_t)(path - url) >= sizeof(a->dp_origin))
                return sp_error_set(err, SP_E_INVALID, "attach URL %s", url);
        *ret_path = path;
        if (a->dp && strlen(a->dp_origin) == (size_t)(path - url) &&
            memcmp(a->dp_origin, url, (size_t)(path - url)) == 0)
                return 0;
        a->dp = sp_http_client_free(a->dp);
        snprintf(a->dp_origin, sizeof(a->dp_origin), "%.*s", (int)(path - url), url);
        sp_http_client_config cfg = {.io_timeout_ms = 120000, .user_agent = "space-bench"};
        a->dp = sp_http_client_new(a->dp_origin, &cfg, err);
        return a->dp ? 0 : sp_error_wrap(err, "data-plane client");
}

/* ---- the attach stream as raw frames ---- */

/* One chunk of a raw frame; sets *ended at exit or error. */
static int raw_chunk(bn_session *s, const sp_attach_chunk *c, bool *ended, sp_error **err)
{
        if (c->type == SP_ATTACH_FRAME_STDOUT || c->type == SP_ATTACH_FRAME_STDERR) {
                if (!s->first_byte)
                        s->first_byte = sp_now_mono_us();
                s->bytes += c->len;
        } else if (c->type == SP_ATTACH_FRAME_EXIT) {
                s->exit_seen = sp_now_mono_us();
                _cleanup_json_ json_object *o = NULL;
                int64_t code = 0;
                if (sp_json_parse((const char *)c->data, c->len, &o, err) < 0 ||
                    sp_json_get_int(o, "code", true, -1, 255, &code, err) < 0)
                        return sp_error_wrap(err, "the exit frame");
                s->exit_code = (int)code;
                *ended = true;
        } else if (c->type == SP_ATTACH_FRAME_ERROR) {
                *ended = true;
                return sp_error_set(err, SP_E_INTERNAL, "attach: error frame: %.*s", (int)(c->len > 400 ? 400 : c->len),
                                    (const char *)c->data);
        }
        return 0;
}

static int read_frames(bn_api *a, bn_session *s, sp_error **err)
{
        sp_attach_frames d;
        sp_attach_frames_init(&d, 0);
        char chunk[256 * 1024];
        bool ended = false;
        int r = 0;
        while (!ended && r == 0) {
                ssize_t got = sp_http_client_read(a->dp, chunk, sizeof(chunk), -1, err);
                if (got < 0) {
                        r = sp_error_wrap(err, "attach stream");
                        break;
                }
                if (got == 0) {
                        r = sp_error_set(err, SP_E_UNAVAILABLE, "attach stream ended without an exit frame");
                        break;
                }
                for (size_t at = 0; at < (size_t)got && !ended && r == 0;) {
                        size_t used = 0;
                        sp_attach_chunk c;
                        r = sp_attach_frames_next(&d, (const uint8_t *)chunk + at, (size_t)got - at, &used, &c, err);
                        at += used;
                        if (r == 1)
                                r = raw_chunk(s, &c, &ended, err);
                }
        }
        sp_attach_frames_free(&d);
        if (r == 0) {
                /* Drain the end of the response, so that the connection is kept. */
                while (sp_http_client_read(a->dp, chunk, sizeof(chunk), -1, NULL) > 0)
                        ;
        }
        return r < 0 ? r : 0;
}

static int attach(bn_api *a, const char *url, const char *token, bn_session *s, sp_error **err)
{
        const char *path = NULL;
        if (dp_client(a, url, &path, err) < 0)
                return -SP_E_INVALID;
        char auth[1024];
        if (strlen(token) > sizeof(auth) - 32)
                return sp_error_set(err, SP_E_INVALID, "attach token too long");
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        const char *headers[] = {auth, NULL};
        char target[1024];
        snprintf(target, sizeof(target), "%s%s", path, a->sse ? "" : strchr(path, '?') ? "&format=raw" : "?format=raw");
        sp_http_client_request req = {.method = "GET", .target = target, .headers = headers};
        int status = sp_http_client_send(a->dp, &req, err);
        if (status < 0)
                return sp_error_wrap(err, "attach");
        if (status != 200)
                return sp_error_set(err, SP_E_INTERNAL, "attach: status %d", status);
        if (!a->sse)
                return read_frames(a, s, err);
        sse_state st = {.s = s, .data = SP_BUF_INIT, .decoded = SP_BUF_INIT};
        _cleanup_buf_ sp_buf in = SP_BUF_INIT;
        char chunk[64 * 1024];
        int r = 0;
        while (!st.ended) {
                ssize_t got = sp_http_client_read(a->dp, chunk, sizeof(chunk), -1, err);
                if (got < 0) {
                        r = sp_error_wrap(err, "attach stream");
                        break;
                }
                if (got == 0) {
                        r = sp_error_set(err, SP_E_UNAVAILABLE, "attach stream ended without an exit event");
                        break;
                }
                if ((r = sp_buf_append(&in, chunk, (size_t)got, err)) < 0)
                        break;
                size_t start = 0;
                for (;;) {
                        const char *nl = memchr(in.data + start, '\n', in.len - start);
                        if (!nl)
                                break;
                        size_t n = (size_t)(nl - (in.data + start));
                        if ((r = line(&st, in.data + start, n, err)) < 0)
                                break;
                        start += n + 1;
                }
                if (r < 0)
                        break;
                sp_buf_consume(&in, start);
                if (in.len > MAX_SSE_LINE) {
                        r = sp_error_set(err, SP_E_TOO_LARGE, "an event-stream line over %d bytes", MAX_SSE_LINE);
                        break;
                }
        }
        if (r == 0 && st.error[0])
                r = sp_error_set(err, SP_E_INTERNAL, "attach: %s", st.error);
        if (r == 0) {
                /* Drain the end of the response, so that the connection is kept. */
                while ((r = (int)sp_http_client_read(a->dp, chunk, sizeof(chunk), -1, NULL)) > 0)
                        ;
                r = 0;
        }
        sp_buf_free(&st.data);
        sp_buf_free(&st.decoded);
        return r;
}

int bn_api_run(bn_api *a, const char *sandbox, const char *argv_json, bn_session *ret, sp_error **err)
{
        *ret = (bn_session){0};
        char path[128], body[1024];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", sandbox);
        if (snprintf(body, sizeof(body), "{\"argv\":%s}", argv_json) >= (int)sizeof(body))
                return sp_error_set(err, SP_E_INVALID, "argv too long");
        _cleanup_json_ json_object *o = NULL;
        const char *url = NULL, *token = NULL;
        if (bn_api_call(a, "POST", path, body, 201, &o, err) < 0)
                return -SP_E_INTERNAL;
        ret->created = sp_now_mono_us();
        if (sp_json_get_string(o, "attach_url", true, 1024, &url, err) < 0 ||
            sp_json_get_string(o, "attach_token", true, 900, &token, err) < 0)
                return sp_error_wrap(err, "the session's answer");
        return attach(a, url, token, ret, err);
}
