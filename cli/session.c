/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A command session followed through the data plane (see exec.h): created
 * through the API, its output read as raw frames (?format=raw, see
 * space/attach_frames.h) and written to our stdout and stderr, the stream
 * reconnected where it broke off. A data plane that does not know raw frames
 * (it refuses the format with 400) is read as server-sent events instead.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "space/attach_frames.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "sse.h"

#define READ_CHUNK (64 * 1024)
/* The data plane sends a comment every 15 s: this long without a byte means the stream is dead. */
#define IDLE_US (45 * SP_USEC_PER_SEC)
/* Reconnecting (and retrying a 503): at most this many attempts in a row, within this long. */
#define RETRY_ATTEMPTS 30
#define RETRY_WINDOW_US (60 * SP_USEC_PER_SEC)
#define FIRST_BACKOFF_MS 100
#define MAX_BACKOFF_MS 2000
/* The interrupt (SIGINT, SIGTERM, SIGHUP) that gives up waiting. */
#define GIVE_UP_AFTER 3
#define DEFAULT_ROWS 24
#define DEFAULT_COLS 80

void ctl_session_clear(ctl_session *s)
{
        free(s->attach_url);
        free(s->token);
        memset(s, 0, sizeof(*s));
}

/* Takes attach_url and attach_token from a SessionCreated or SessionToken. */
static int session_take(ctl_ctx *ctx, ctl_session *s, json_object *o, sp_error **err)
{
        const char *url = NULL, *token = NULL;
        if (sp_json_get_string(o, "attach_url", true, 4096, &url, err) < 0 ||
            sp_json_get_string(o, "attach_token", true, CTL_DP_TOKEN_MAX, &token, err) < 0) {
                sp_error_wrap(err, "the API's answer");
                return ctl_failed(ctx, CTL_EXIT_CONNECT, -SP_E_INVALID);
        }
        char *u = strdup(url), *t = strdup(token);
        if (!u || !t) {
                free(u);
                free(t);
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
        }
        free(s->attach_url);
        free(s->token);
        s->attach_url = u;
        s->token = t;
        return 0;
}

static void session_path(sp_buf *b, const char *id, const char *suffix)
{
        sp_buf_append_str(b, "/v1/sessions/", NULL);
        ctl_url_escape(b, id);
        sp_buf_append_str(b, suffix, NULL);
}

int ctl_session_renew(ctl_ctx *ctx, ctl_session *s, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        session_path(&path, s->id, "/token");
        _cleanup_json_ json_object *body = json_object_new_object();
        _cleanup_json_ json_object *resp = NULL;
        int r = ctl_api(ctx, "POST", path.data, body, NULL, &resp, err);
        if (r < 0)
                return sp_error_wrap(err, "a new token for session %s", s->id);
        return session_take(ctx, s, resp, err);
}

static void sleep_ms(int64_t ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
}

static int64_t backoff_ms(int attempt)
{
        int64_t ms = FIRST_BACKOFF_MS;
        for (int i = 1; i < attempt && ms < MAX_BACKOFF_MS; i++)
                ms *= 2;
        return ms < MAX_BACKOFF_MS ? ms : MAX_BACKOFF_MS;
}

int ctl_session_post(ctl_ctx *ctx, ctl_session *s, sp_http_client *c, const char *route, const void *body, size_t len,
                     const char *content_type, json_object **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf target = SP_BUF_INIT;
        session_path(&target, s->id, route);
        bool renewed = false;
        int64_t start = sp_now_mono_us();
        for (int attempt = 1;; attempt++) {
                char auth[CTL_DP_AUTH_MAX], ctype[128];
                if (ctl_dp_auth(auth, sizeof(auth), s->token, err) < 0)
                        return ctl_failed(ctx, CTL_EXIT_CONNECT, -SP_E_INVALID);
                snprintf(ctype, sizeof(ctype), "Content-Type: %s", content_type);
                const char *headers[] = {auth, ctype, "Accept: application/json", NULL};
                sp_http_client_request req = {
                        .method = "POST", .target = target.data, .headers = headers, .body = body, .body_len = len};
                _cleanup_buf_ sp_buf resp = SP_BUF_INIT;
                int status = sp_http_client_do(c, &req, 64 * 1024, &resp, err);
                if (status < 0)
                        return ctl_failed(ctx, CTL_EXIT_CONNECT, status);
                if (status == 401 && !renewed) {
                        renewed = true;
                        if (ctl_session_renew(ctx, s, err) < 0)
                                return -1;
                        continue;
                }
                /* 503: the data plane cannot reach the worker; nothing was written. */
                if (status == 503 && attempt < RETRY_ATTEMPTS && sp_now_mono_us() - start < RETRY_WINDOW_US) {
                        sleep_ms(backoff_ms(attempt));
                        continue;
                }
                if (status < 200 || status >= 300)
                        return ctl_http_fail(ctx, status, &resp, err);
                if (ret && resp.len > 0 && sp_json_parse(resp.data, resp.len, ret, err) < 0) {
                        sp_error_wrap(err, "the data plane's answer to %s", route);
                        return ctl_failed(ctx, CTL_EXIT_CONNECT, -SP_E_INVALID);
                }
                return status;
        }
}

/* ---- following the output ---- */

typedef struct follow {
        ctl_ctx *ctx;
        ctl_session *s;
        bool pty;
        bool raw; /* our terminal is in raw mode: line ends need a carriage return */
        sp_http_client *dp; /* the attach stream */
        sp_http_client *ctl; /* resizes, while dp streams */
        char *attach_target;
        bool events; /* read server-sent events: the data plane refused raw frames */
        sp_attach_frames frames;
        ctl_sse_parser sse;
        sp_buf decoded;
        uint64_t offset; /* output bytes received so far */
        bool attached; /* once: later attaches send Last-Event-ID */
        bool connected;
        bool reconnect; /* the data plane said the worker stream broke off */
        bool done;
        bool output_closed;
        int code;
        char note[256]; /* said on stderr once the terminal is back to normal */
        int out_fd, err_fd;
} follow;

static void follow_free(follow *f)
{
        f->dp = sp_http_client_free(f->dp);
        f->ctl = sp_http_client_free(f->ctl);
        free(f->attach_target);
        ctl_sse_free(&f->sse);
        sp_attach_frames_free(&f->frames);
        sp_buf_free(&f->decoded);
}

/* A message on stderr while the command runs. */
static void say(const follow *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const follow *f, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "spacectl: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, f->raw ? "\r\n" : "\n");
        va_end(ap);
}

static int write_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0 && errno == EAGAIN) {
                        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
                        poll(&pfd, 1, -1);
                        continue;
                }
                if (w < 0)
                        return -errno;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

static int malformed(follow *f, const char *what, sp_error **err)
{
        return ctl_fail(f->ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID, "the data plane sent a malformed %s event", what);
}

/* Writes output bytes to fd; they move our offset. */
static int write_output(follow *f, int fd, const void *p, size_t n, sp_error **err)
{
        int r = write_all(fd, p, n);
        if (r == -EPIPE) {
                f->output_closed = true;
                return ctl_fail(f->ctx, CTL_EXIT_API, err, SP_E_IO, "our %s was closed", fd == 1 ? "stdout" : "stderr");
        }
        if (r < 0)
                return ctl_fail(f->ctx, CTL_EXIT_API, err, SP_E_IO, "writing the command's output: %s", strerror(-r));
        f->offset += n;
        return 0;
}

static int on_output(follow *f, const ctl_sse_event *ev, int fd, sp_error **err)
{
        char *end;
        if (!ev->id || !*ev->id || strspn(ev->id, "0123456789") != strlen(ev->id) || strlen(ev->id) > 19)
                return malformed(f, ev->type, err);
        uint64_t id = strtoull(ev->id, &end, 10);
        sp_buf_clear(&f->decoded);
        if (sp_base64_decode(&f->decoded, ev->data, ev->data_len, 0, NULL) < 0)
                return malformed(f, ev->type, err);
        /* Each event's id is the offset after its bytes: what we have plus what it brings. */
        if (id != f->offset + f->decoded.len)
                return ctl_fail(f->ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the data plane's output offsets do not add up (%" PRIu64 " + %zu bytes, event id %s)",
                                f->offset, f->decoded.len, ev->id);
        return write_output(f, fd, f->decoded.data, f->decoded.len, err);
}

static int on_exit_event(follow *f, const char *data, size_t len, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        int64_t code = 0, sig = 0;
        bool oom = false, killed = false;
        const char *reason = NULL;
        if (sp_json_parse(data, len, &o, NULL) < 0 || !json_object_is_type(o, json_type_object) ||
            sp_json_get_int(o, "code", true, INT32_MIN, INT32_MAX, &code, NULL) < 0 ||
            sp_json_get_int(o, "signal", false, 0, 64, &sig, NULL) < 0 ||
            sp_json_get_bool(o, "oom", false, &oom, NULL) < 0 ||
            sp_json_get_bool(o, "killed", false, &killed, NULL) < 0 ||
            sp_json_get_string(o, "reason", false, 64, &reason, NULL) < 0)
                return malformed(f, "exit", err);
        f->code = sig ? 128 + (int)sig : (int)(code & 0xff);
        if (oom)
                snprintf(f->note, sizeof(f->note), "session %s ran out of memory", f->s->id);
        else if (killed)
                snprintf(f->note, sizeof(f->note), "session %s was killed%s%s", f->s->id, reason && *reason ? ": " : "",
                         reason ? reason : "");
        f->done = true;
        return 0;
}

static int on_error_event(follow *f, const char *data, size_t len, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        const char *code = NULL, *msg = NULL;
        if (sp_json_parse(data, len, &o, NULL) < 0 || !json_object_is_type(o, json_type_object) ||
            sp_json_get_string(o, "code", true, 64, &code, NULL) < 0 ||
            sp_json_get_string(o, "message", true, 4096, &msg, NULL) < 0)
                return malformed(f, "error", err);
        if (strcmp(code, "unavailable") == 0) {
                f->reconnect = true;
                return 0;
        }
        return ctl_fail(f->ctx, CTL_EXIT_API, err, SP_E_INTERNAL, "session %s: %s (%s)", f->s->id, msg, code);
}

static int on_event(const ctl_sse_event *ev, void *userdata, sp_error **err)
{
        follow *f = userdata;
        if (f->done)
                return 0;
        if (strcmp(ev->type, "stdout") == 0)
                return on_output(f, ev, f->out_fd, err);
        if (strcmp(ev->type, "stderr") == 0)
                return on_output(f, ev, f->err_fd, err);
        if (strcmp(ev->type, "exit") == 0)
                return on_exit_event(f, ev->data, ev->data_len, err);
        if (strcmp(ev->type, "error") == 0)
                return on_error_event(f, ev->data, ev->data_len, err);
        return 0; /* start, and events a later data plane may add */
}

/* One piece of a raw frame: output is written as it comes (its offset is ours plus what came before). */
static int on_chunk(follow *f, const sp_attach_chunk *c, sp_error **err)
{
        if (f->done)
                return 0;
        switch (c->type) {
        case SP_ATTACH_FRAME_STDOUT:
                return write_output(f, f->out_fd, c->data, c->len, err);
        case SP_ATTACH_FRAME_STDERR:
                return write_output(f, f->err_fd, c->data, c->len, err);
        case SP_ATTACH_FRAME_START: {
                _cleanup_json_ json_object *o = NULL;
                int64_t at = -1;
                if (sp_json_parse((const char *)c->data, c->len, &o, NULL) < 0 ||
                    !json_object_is_type(o, json_type_object) ||
                    sp_json_get_int(o, "offset", true, 0, INT64_MAX, &at, NULL) < 0)
                        return malformed(f, "start", err);
                if ((uint64_t)at != f->offset)
                        return ctl_fail(f->ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                        "the data plane started the output at offset %" PRId64 ", not %" PRIu64, at,
                                        f->offset);
                return 0;
        }
        case SP_ATTACH_FRAME_EXIT:
                return on_exit_event(f, (const char *)c->data, c->len, err);
        case SP_ATTACH_FRAME_ERROR:
                return on_error_event(f, (const char *)c->data, c->len, err);
        default:
                return 0; /* keepalive, and frames a later data plane may add */
        }
}

/* Feeds what was read to the parser of the stream's format. */
static int feed(follow *f, const char *buf, size_t n, sp_error **err)
{
        if (f->events)
                return ctl_sse_feed(&f->sse, buf, n, on_event, f, err);
        for (size_t at = 0; at < n && !f->reconnect;) {
                size_t used = 0;
                sp_attach_chunk c;
                int r = sp_attach_frames_next(&f->frames, (const uint8_t *)buf + at, n - at, &used, &c, err);
                if (r < 0)
                        return ctl_failed(f->ctx, CTL_EXIT_CONNECT, r);
                at += used;
                if (r == 1 && on_chunk(f, &c, err) < 0)
                        return -1;
        }
        return 0;
}

/* Opens the attach stream from f->offset, retrying what may pass (the data
 * plane unreachable or restarting, a 503, an expired token). */
static int attach(follow *f, sp_error **err)
{
        ctl_ctx *ctx = f->ctx;
        int64_t start = sp_now_mono_us();
        bool renewed = false;
        _cleanup_error_ sp_error *last = NULL;
        for (int attempt = 1;; attempt++) {
                char auth[CTL_DP_AUTH_MAX], from[64];
                if (ctl_dp_auth(auth, sizeof(auth), f->s->token, err) < 0)
                        return ctl_failed(ctx, CTL_EXIT_CONNECT, -SP_E_INVALID);
                snprintf(from, sizeof(from), "Last-Event-ID: %" PRIu64, f->offset);
                _cleanup_buf_ sp_buf target = SP_BUF_INIT;
                sp_buf_append_str(&target, f->attach_target, NULL);
                if (!f->events)
                        sp_buf_append_str(&target, strchr(f->attach_target, '?') ? "&format=raw" : "?format=raw", NULL);
                const char *headers[] = {
                        auth, f->events ? "Accept: text/event-stream" : "Accept: " SP_ATTACH_FRAMES_CONTENT_TYPE,
                        f->attached ? from : NULL, NULL};
                sp_http_client_request req = {.method = "GET", .target = target.data, .headers = headers};
                sp_error *e = NULL;
                int status = sp_http_client_send(f->dp, &req, &e);
                if (status == 200) {
                        ctl_sse_reset(&f->sse);
                        sp_attach_frames_reset(&f->frames);
                        f->attached = f->connected = true;
                        return 0;
                }
                if (status == 400 && !f->events) {
                        /* A data plane from before raw frames refuses the format: read events from it. (Any other
                         * 400 is refused again, and reported, as events.) */
                        sp_http_client_close(f->dp);
                        f->events = true;
                        continue;
                }
                if (status < 0 && e->code != SP_E_UNAVAILABLE && e->code != SP_E_TIMEOUT && e->code != SP_E_IO) {
                        sp_error_move(err, &e);
                        sp_error_wrap(err, "attaching to session %s", f->s->id);
                        return ctl_failed(ctx, CTL_EXIT_CONNECT, status);
                }
                if (status == 401 && !renewed) {
                        sp_http_client_close(f->dp);
                        renewed = true;
                        if (ctl_session_renew(ctx, f->s, err) < 0)
                                return -1;
                        continue;
                }
                if (status > 0 && status != 503)
                        return ctl_dp_fail(ctx, f->dp, status, err);
                if (status > 0) {
                        sp_http_client_close(f->dp);
                        sp_error_set(&e, SP_E_UNAVAILABLE, "the data plane answered 503");
                }
                sp_error_free(last);
                last = e;
                if (attempt >= RETRY_ATTEMPTS || sp_now_mono_us() - start > RETRY_WINDOW_US)
                        return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_UNAVAILABLE,
                                        "lost the output of session %s after %" PRIu64 " bytes: %s (it may still run)",
                                        f->s->id, f->offset, last->message);
                sleep_ms(backoff_ms(attempt));
        }
}

static void forward_resize(follow *f)
{
        int rows, cols;
        if (!f->pty || !ctl_term_size(&rows, &cols))
                return;
        sp_error *e = NULL;
        if (!f->ctl) {
                _cleanup_free_ char *unused = NULL;
                f->ctl = ctl_dp_client(f->ctx, f->s->attach_url, &unused, &e);
        }
        char body[64];
        int n = snprintf(body, sizeof(body), "{\"rows\":%d,\"cols\":%d}", rows, cols);
        int r = f->ctl ? ctl_session_post(f->ctx, f->s, f->ctl, "/resize", body, (size_t)n, "application/json", NULL,
                                          &e)
                       : -1;
        if (r < 0)
                say(f, "resizing the terminal of session %s: %s", f->s->id, e ? e->message : "failed");
        sp_error_free(e);
        f->ctx->exit_code = 0;
}

static void forward_signal(follow *f, int sig)
{
        const char *name = sig == SIGINT ? "INT" : sig == SIGTERM ? "TERM" : "HUP";
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        session_path(&path, f->s->id, "/signal");
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "signal", json_object_new_string(name));
        sp_error *e = NULL;
        /* A session that has just ended answers 409: its exit event is on its way. */
        if (ctl_api(f->ctx, "POST", path.data, body, NULL, NULL, &e) < 0 && e->code != SP_E_CONFLICT)
                say(f, "forwarding SIG%s to session %s: %s", name, f->s->id, e->message);
        sp_error_free(e);
        f->ctx->exit_code = 0;
}

static int on_signals(follow *f, ctl_signals *sig, int *interrupts, sp_error **err)
{
        for (int s; (s = ctl_signals_next(sig)) != 0;) {
                if (s == SIGWINCH) {
                        forward_resize(f);
                        continue;
                }
                if (++*interrupts >= GIVE_UP_AFTER)
                        return ctl_fail(f->ctx, 128 + SIGINT, err, SP_E_TIMEOUT,
                                        "gave up waiting for session %s (it may still run)", f->s->id);
                forward_signal(f, s);
        }
        return 0;
}

/* Kills the session whose output can no longer go anywhere. */
static void kill_session(follow *f)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        session_path(&path, f->s->id, "/kill");
        sp_error *e = NULL;
        if (ctl_api(f->ctx, "POST", path.data, NULL, NULL, NULL, &e) < 0 && e->code != SP_E_CONFLICT)
                say(f, "killing session %s: %s", f->s->id, e->message);
        sp_error_free(e);
        f->ctx->exit_code = 0;
}

/* Reads events until the exit event. */
static int follow_run(follow *f, ctl_signals *sig, sp_error **err)
{
        _cleanup_free_ char *buf = malloc(READ_CHUNK);
        if (!buf)
                return ctl_fail(f->ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
        int interrupts = 0;
        int64_t last_byte = 0;
        while (!f->done) {
                if (!f->connected) {
                        if (attach(f, err) < 0)
                                return -1;
                        last_byte = sp_now_mono_us();
                }
                struct pollfd p[2] = {{.fd = sig->pipe[0], .events = POLLIN},
                                      {.fd = sp_http_client_fd(f->dp), .events = POLLIN}};
                if (poll(p, 2, sp_http_client_buffered(f->dp) ? 0 : 1000) < 0 && errno != EINTR)
                        return ctl_fail(f->ctx, CTL_EXIT_API, err, SP_E_IO, "poll: %s", strerror(errno));
                if (on_signals(f, sig, &interrupts, err) < 0)
                        return -1;
                sp_error *e = NULL;
                ssize_t n = sp_http_client_read(f->dp, buf, READ_CHUNK, 0, &e);
                if (n > 0) {
                        last_byte = sp_now_mono_us();
                        if (feed(f, buf, (size_t)n, &e) < 0) {
                                if (!f->output_closed) {
                                        sp_error_move(err, &e);
                                        return -1;
                                }
                                /* As a local command would die of SIGPIPE. */
                                sp_error_free(e);
                                kill_session(f);
                                f->code = 128 + SIGPIPE;
                                f->done = true;
                                f->ctx->exit_code = 0;
                        }
                        if (f->reconnect) {
                                f->reconnect = false;
                                f->connected = false;
                                sp_http_client_close(f->dp);
                        }
                        continue;
                }
                bool idle = n == -SP_E_TIMEOUT && sp_now_mono_us() - last_byte > IDLE_US;
                sp_error_free(e);
                if (n == -SP_E_TIMEOUT && !idle)
                        continue;
                /* The stream ended or broke before the exit event, or went silent: attach again from the offset. */
                f->connected = false;
                sp_http_client_close(f->dp);
        }
        return 0;
}

/* ---- the session ---- */

static json_object *create_body(const ctl_exec_spec *spec)
{
        json_object *body = json_object_new_object();
        json_object *argv = json_object_new_array();
        for (int i = 0; i < spec->argc; i++)
                json_object_array_add(argv, json_object_new_string(spec->argv[i]));
        json_object_object_add(body, "argv", argv);
        if (spec->env)
                json_object_object_add(body, "env", json_object_get(spec->env));
        if (spec->cwd)
                json_object_object_add(body, "cwd", json_object_new_string(spec->cwd));
        if (spec->user)
                json_object_object_add(body, "user", json_object_new_string(spec->user));
        if (spec->tty) {
                int rows = DEFAULT_ROWS, cols = DEFAULT_COLS;
                ctl_term_size(&rows, &cols);
                json_object *pty = json_object_new_object();
                json_object_object_add(pty, "rows", json_object_new_int(rows));
                json_object_object_add(pty, "cols", json_object_new_int(cols));
                json_object_object_add(body, "pty", pty);
        }
        json_object_object_add(body, "stdin", json_object_new_boolean(spec->forward_stdin));
        if (spec->timeout_s > 0)
                json_object_object_add(body, "timeout_s", json_object_new_int64(spec->timeout_s));
        return body;
}

/* Prints the session as the API has it now (exec --json). */
static int print_session(ctl_ctx *ctx, const char *id, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        session_path(&path, id, "");
        _cleanup_json_ json_object *s = NULL;
        if (ctl_api(ctx, "GET", path.data, NULL, NULL, &s, err) < 0)
                return -1;
        ctl_print_json(ctx, s);
        return 0;
}

int ctl_exec_session(ctl_ctx *ctx, const char *sandbox_id, const ctl_exec_spec *spec, ctl_signals *sig, int *ret_code,
                     sp_error **err)
{
        _cleanup_term_ ctl_term term = {.fd = -1};
        if (spec->tty && isatty(STDIN_FILENO) && ctl_term_raw(&term, STDIN_FILENO, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_API, -SP_E_IO);
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/sandboxes/", NULL);
        ctl_url_escape(&path, sandbox_id);
        sp_buf_append_str(&path, "/sessions", NULL);
        _cleanup_json_ json_object *body = create_body(spec);
        _cleanup_json_ json_object *created = NULL;
        if (ctl_api(ctx, "POST", path.data, body, NULL, &created, err) < 0)
                return -1;
        _cleanup_(ctl_session_clear) ctl_session s = {0};
        json_object *ses = NULL;
        const char *id = NULL;
        if (sp_json_get_object(created, "session", true, &ses, NULL) < 0 || !ses ||
            sp_json_get_string(ses, "id", true, SP_ID_MAX - 1, &id, NULL) < 0 || !id || !sp_id_valid(id, "ses"))
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID, "the API's answer names no session");
        snprintf(s.id, sizeof(s.id), "%s", id);
        if (session_take(ctx, &s, created, err) < 0)
                return -1;

        _cleanup_(follow_free) follow f = {
                .ctx = ctx,
                .s = &s,
                .pty = spec->tty,
                .raw = term.fd >= 0,
                .out_fd = ctx->json ? STDERR_FILENO : STDOUT_FILENO,
                .err_fd = STDERR_FILENO,
        };
        ctl_sse_init(&f.sse);
        sp_attach_frames_init(&f.frames, 0);
        f.dp = ctl_dp_client(ctx, s.attach_url, &f.attach_target, err);
        if (!f.dp) {
                /* Nobody could follow it, or give it input. */
                kill_session(&f);
                return -1;
        }
        pid_t child = -1;
        if (spec->forward_stdin && (child = ctl_stdin_start(ctx, &s, sig, f.raw, err)) < 0) {
                kill_session(&f);
                return -1;
        }
        int r = follow_run(&f, sig, err);
        bool stdin_failed = child > 0 && ctl_stdin_stop(child);
        ctl_term_restore(&term);
        if (r < 0)
                return r;
        if (f.note[0])
                fprintf(stderr, "spacectl: %s\n", f.note);
        if (stdin_failed)
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_UNAVAILABLE,
                                "session %s: stdin was not forwarded in full (the command exited with %d)", s.id,
                                f.code);
        if (ctx->json && f.code != 128 + SIGPIPE && print_session(ctx, s.id, err) < 0)
                return -1;
        *ret_code = f.code;
        return 0;
}
