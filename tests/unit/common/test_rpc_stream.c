/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: streaming RPC calls over real loopback sockets (cleartext
 * HTTP/2): 50 MB to a slow consumer and 20 MB to a slow handler with bounded
 * queues and every byte in order; echo; errors in trailers; deadlines;
 * cancellation; a server killed mid-stream (the client's calls end
 * unavailable) and a client killed mid-stream (the server's calls are closed
 * and freed). Leaks are caught by the sanitizer build.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/time.h"

#define CHUNK (64 * 1024)
#define MiB (1024 * 1024)

/* ---- helpers ------------------------------------------------------------- */

static void wake_cb(evutil_socket_t fd, short what, void *arg) {}

static void loop_once(struct event_base *base)
{
        struct event *t = evtimer_new(base, wake_cb, NULL);
        struct timeval tv = {0, 20000};
        evtimer_add(t, &tv);
        event_base_loop(base, EVLOOP_ONCE);
        event_free(t);
}

/* Runs the loop until cond holds or ms milliseconds pass; yields cond. */
#define RUN_UNTIL(base, cond, ms) \
        ({ \
                int64_t end_ = sp_now_mono_us() + (int64_t)(ms)*SP_USEC_PER_MSEC; \
                while (!(cond) && sp_now_mono_us() < end_) \
                        loop_once(base); \
                (cond); \
        })

/* The byte at offset i of every test stream: a position hash, so that a lost,
 * duplicated or reordered chunk shows. */
static uint8_t gen(uint64_t i)
{
        return (uint8_t)((i * UINT64_C(0x9E3779B97F4A7C15)) >> 56);
}

static void fill(uint8_t *buf, uint64_t off, size_t n)
{
        for (size_t i = 0; i < n; i++)
                buf[i] = gen(off + i);
}

/* Counts bytes that differ from gen() at their offset. */
static uint64_t check(const uint8_t *buf, uint64_t off, size_t n)
{
        uint64_t bad = 0;
        for (size_t i = 0; i < n; i++)
                bad += buf[i] != gen(off + i);
        return bad;
}

static sp_rpc_server_stats srv_stats(const sp_rpc_server *srv)
{
        sp_rpc_server_stats st;
        sp_rpc_server_get_stats(srv, &st);
        return st;
}

/* ---- server side ------------------------------------------------------------ */

static struct event_base *g_base;
static size_t g_max_queued; /* largest server send queue seen */
static size_t g_max_buffered; /* largest server receive buffer seen */
static int g_server_blocked; /* sends that returned "would block" */
static int g_closes;
static sp_errc g_close_code;
static uint64_t g_sent;
static pid_t g_kill_pid; /* killed once g_sent passes g_kill_after */
static uint64_t g_kill_after;

static void note_close(const sp_error *reason)
{
        g_closes++;
        g_close_code = reason ? reason->code : SP_OK;
}

typedef struct download {
        sp_rpc_call *call;
        uint64_t size; /* 0: forever */
        uint64_t sent;
        uint8_t buf[CHUNK];
} download;

static void download_pump(download *d)
{
        while (d->size == 0 || d->sent < d->size) {
                size_t n = d->size == 0 || d->size - d->sent > CHUNK ? CHUNK : (size_t)(d->size - d->sent);
                fill(d->buf, d->sent, n);
                int r = sp_rpc_call_send(d->call, SP_RPC_FRAME_DATA, d->buf, n, NULL);
                ck_assert_int_ge(r, 0);
                d->sent += n;
                g_sent += n;
                if (sp_rpc_call_queued(d->call) > g_max_queued)
                        g_max_queued = sp_rpc_call_queued(d->call);
                if (g_kill_pid > 0 && g_sent >= g_kill_after) {
                        kill(g_kill_pid, SIGKILL);
                        g_kill_pid = 0;
                }
                if (r == 1) {
                        g_server_blocked++;
                        /* A send while blocked is refused, not queued. */
                        _cleanup_error_ sp_error *e = NULL;
                        ck_assert_int_eq(sp_rpc_call_send(d->call, SP_RPC_FRAME_DATA, "x", 1, &e), -SP_E_LIMIT);
                        return;
                }
        }
        _cleanup_json_ json_object *extra = json_object_new_object();
        json_object_object_add(extra, "bytes", json_object_new_int64((int64_t)d->sent));
        ck_assert_int_eq(sp_rpc_call_end(d->call, extra, NULL), 0);
}

static void download_writable(sp_rpc_call *call, void *ud)
{
        download_pump(ud);
}

static void download_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        download *d = ud;
        note_close(reason);
        sp_rpc_call_unref(d->call);
        free(d);
}

static void download_method(sp_rpc_call *call, json_object *req, void *ud)
{
        static const sp_rpc_call_ops ops = {.on_writable = download_writable, .on_close = download_close};
        int64_t size = 0;
        ck_assert_int_eq(sp_json_get_int(req, "size", true, 0, INT64_MAX, &size, NULL), 0);
        download *d = calloc(1, sizeof(*d));
        d->call = sp_rpc_call_ref(call);
        d->size = (uint64_t)size;
        sp_rpc_call_set_ops(call, &ops, d);
        download_pump(d);
}

typedef struct upload {
        sp_rpc_call *call;
        uint64_t got, bad, next_pause;
        bool stall; /* pause at the first frame and never resume */
} upload;

static void upload_resume_cb(evutil_socket_t fd, short what, void *arg)
{
        upload *u = arg;
        sp_rpc_call_resume(u->call);
        sp_rpc_call_unref(u->call); /* the timer's reference */
}

static void upload_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        upload *u = ud;
        ck_assert_int_eq(type, SP_RPC_FRAME_DATA);
        u->bad += check(p, u->got, n);
        u->got += n;
        if (sp_rpc_call_buffered(call) > g_max_buffered)
                g_max_buffered = sp_rpc_call_buffered(call);
        if (u->stall) {
                sp_rpc_call_pause(call);
                return;
        }
        /* A slow consumer: a pause of 2 ms after every MiB. */
        if (u->got >= u->next_pause) {
                u->next_pause += MiB;
                sp_rpc_call_pause(call);
                struct timeval tv = {0, 2000};
                event_base_once(g_base, -1, EV_TIMEOUT, upload_resume_cb, u, &tv);
                sp_rpc_call_ref(call);
        }
}

static void upload_input_end(sp_rpc_call *call, void *ud)
{
        upload *u = ud;
        _cleanup_json_ json_object *extra = json_object_new_object();
        json_object_object_add(extra, "bytes", json_object_new_int64((int64_t)u->got));
        json_object_object_add(extra, "mismatches", json_object_new_int64((int64_t)u->bad));
        ck_assert_int_eq(sp_rpc_call_end(call, extra, NULL), 0);
}

static void upload_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        upload *u = ud;
        note_close(reason);
        sp_rpc_call_unref(u->call);
        free(u);
}

static void upload_method(sp_rpc_call *call, json_object *req, void *ud)
{
        static const sp_rpc_call_ops ops = {
                .on_frame = upload_frame,
                .on_input_end = upload_input_end,
                .on_close = upload_close,
        };
        upload *u = calloc(1, sizeof(*u));
        u->call = sp_rpc_call_ref(call);
        u->next_pause = MiB;
        sp_json_get_bool(req, "stall", false, &u->stall, NULL);
        sp_rpc_call_set_ops(call, &ops, u);
}

static void echo_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        ck_assert_int_ge(sp_rpc_call_send(call, type, p, n, NULL), 0);
}

static void echo_input_end(sp_rpc_call *call, void *ud)
{
        sp_rpc_call_end(call, NULL, NULL);
}

static void echo_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        note_close(reason);
}

static void echo_method(sp_rpc_call *call, json_object *req, void *ud)
{
        static const sp_rpc_call_ops ops = {
                .on_frame = echo_frame,
                .on_input_end = echo_input_end,
                .on_close = echo_close,
        };
        sp_rpc_call_set_ops(call, &ops, NULL);
        ck_assert_int_eq(sp_rpc_call_send_json(call, req, NULL), 0);
}

static void fail_mid_method(sp_rpc_call *call, json_object *req, void *ud)
{
        ck_assert_int_eq(sp_rpc_call_send(call, SP_RPC_FRAME_DATA, "partial", 7, NULL), 0);
        ck_assert_int_eq(sp_rpc_call_failf(call, SP_E_CONFLICT, "session %s ended", "ses_1"), 0);
        ck_assert_int_eq(sp_rpc_call_send(call, SP_RPC_FRAME_DATA, "late", 4, NULL), -SP_E_INVALID);
}

static void hold_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        note_close(reason);
        sp_rpc_call_unref(call);
}

static void hold_method(sp_rpc_call *call, json_object *req, void *ud)
{
        static const sp_rpc_call_ops ops = {.on_close = hold_close};
        sp_rpc_call_set_ops(call, &ops, NULL);
        sp_rpc_call_ref(call);
}

static void unary_method(sp_rpc_call *call, json_object *req, void *ud)
{
        sp_rpc_call_reply(call, req, NULL);
}

static sp_rpc_server *server_new(struct event_base *base)
{
        sp_rpc_server *srv = sp_rpc_server_new(base, NULL, NULL);
        ck_assert_ptr_nonnull(srv);
        const sp_rpc_method methods[] = {
                {.name = "Download", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = download_method},
                {.name = "Upload", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = upload_method},
                {.name = "Echo", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = echo_method},
                {.name = "FailMid", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = fail_mid_method},
                {.name = "Hold", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = hold_method},
                {.name = "Unary", .roles = SP_RPC_UNAUTHENTICATED, .handler = unary_method},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++)
                ck_assert_int_eq(sp_rpc_server_register(srv, &methods[i], NULL), 0);
        ck_assert_int_eq(sp_rpc_server_listen(srv, "127.0.0.1:0", NULL), 0);
        return srv;
}

/* ---- client side -------------------------------------------------------------- */

typedef struct sink {
        sp_rpc_stream *s;
        uint64_t got, bad, next_pause;
        int json_frames;
        char last_json[256];
        size_t max_buffered;
        int pauses;
        bool slow;
        bool cancel_after_first;
        uint64_t kill_after;
        pid_t kill_pid;
        bool ended;
        sp_errc code;
        char msg[256];
        json_object *trailer;
} sink;

static void sink_resume_cb(evutil_socket_t fd, short what, void *arg)
{
        sink *k = arg;
        sp_rpc_stream_resume(k->s);
}

static void sink_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        sink *k = ud;
        ck_assert(!k->ended);
        if (type == SP_RPC_FRAME_JSON) {
                k->json_frames++;
                snprintf(k->last_json, sizeof(k->last_json), "%.*s", (int)n, (const char *)p);
                return;
        }
        k->bad += check(p, k->got, n);
        k->got += n;
        if (sp_rpc_stream_buffered(s) > k->max_buffered)
                k->max_buffered = sp_rpc_stream_buffered(s);
        if (k->cancel_after_first) {
                sp_rpc_stream_cancel(s);
                k->ended = true;
                return;
        }
        if (k->kill_pid > 0 && k->got >= k->kill_after) {
                kill(k->kill_pid, SIGKILL);
                k->kill_pid = 0;
        }
        if (k->slow && k->got >= k->next_pause) {
                k->next_pause += MiB;
                k->pauses++;
                sp_rpc_stream_pause(s);
                struct timeval tv = {0, 1000};
                event_base_once(g_base, -1, EV_TIMEOUT, sink_resume_cb, k, &tv);
        }
}

static void sink_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        sink *k = ud;
        ck_assert(!k->ended);
        ck_assert((trailer != NULL) != (err != NULL));
        k->ended = true;
        k->code = err ? err->code : SP_OK;
        if (err)
                snprintf(k->msg, sizeof(k->msg), "%s", err->message);
        k->trailer = json_object_get(trailer);
}

static const sp_rpc_stream_ops sink_ops = {.on_frame = sink_frame, .on_end = sink_end};

static int64_t trailer_int(json_object *t, const char *k)
{
        int64_t v = -1;
        ck_assert_int_eq(sp_json_get_int(t, k, true, INT64_MIN, INT64_MAX, &v, NULL), 0);
        return v;
}

typedef struct fx {
        struct event_base *base;
        sp_rpc_server *srv;
        sp_rpc_client *cli;
} fx;

static void fx_init(fx *f)
{
        g_base = f->base = event_base_new();
        f->srv = server_new(f->base);
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", sp_rpc_server_port(f->srv));
        f->cli = sp_rpc_client_new(f->base, addr, NULL, NULL);
        ck_assert_ptr_nonnull(f->cli);
}

static void fx_fini(fx *f)
{
        sp_rpc_client_free(f->cli);
        sp_rpc_server_free(f->srv);
        event_base_free(f->base);
}

static json_object *req_size(uint64_t size)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "size", json_object_new_int64((int64_t)size));
        return o;
}

/* ---- tests ---------------------------------------------------------------------- */

START_TEST(download_50mb_slow_consumer_bounded)
{
        fx f;
        fx_init(&f);
        const uint64_t size = 50 * 1000 * 1000;
        sink k = {.slow = true, .next_pause = MiB};
        _cleanup_json_ json_object *req = req_size(size);
        k.s = sp_rpc_client_stream(f.cli, "Download", req, 120000, &sink_ops, &k, NULL);
        ck_assert_ptr_nonnull(k.s);
        ck_assert(RUN_UNTIL(f.base, k.ended, 120000));
        ck_assert_msg(k.code == SP_OK, "%s", k.msg);
        ck_assert_uint_eq(k.got, size);
        ck_assert_uint_eq(k.bad, 0);
        ck_assert_int_eq(trailer_int(k.trailer, "bytes"), (int64_t)size);
        /* Backpressure happened and kept both sides' buffers bounded. */
        ck_assert_int_gt(g_server_blocked, 0);
        ck_assert_int_gt(k.pauses, 10);
        ck_assert_uint_le(g_max_queued, SP_RPC_SEND_HIGH_WATERMARK + CHUNK + SP_RPC_FRAME_HEADER_SIZE);
        ck_assert_uint_le(k.max_buffered, SP_RPC_STREAM_WINDOW + CHUNK + SP_RPC_FRAME_HEADER_SIZE);
        json_object_put(k.trailer);
        ck_assert(RUN_UNTIL(f.base, g_closes == 1, 5000));
        ck_assert_int_eq(g_close_code, SP_OK);
        ck_assert_uint_eq(srv_stats(f.srv).calls_open, 0);
        fx_fini(&f);
}
END_TEST

typedef struct source {
        sp_rpc_stream *s;
        uint64_t size, sent;
        size_t max_queued;
        int blocked;
        uint8_t buf[CHUNK];
} source;

static void source_pump(source *src)
{
        while (src->sent < src->size) {
                size_t n = src->size - src->sent > CHUNK ? CHUNK : (size_t)(src->size - src->sent);
                fill(src->buf, src->sent, n);
                int r = sp_rpc_stream_send(src->s, SP_RPC_FRAME_DATA, src->buf, n, NULL);
                ck_assert_int_ge(r, 0);
                src->sent += n;
                if (sp_rpc_stream_queued(src->s) > src->max_queued)
                        src->max_queued = sp_rpc_stream_queued(src->s);
                if (r == 1) {
                        src->blocked++;
                        return;
                }
        }
        ck_assert_int_eq(sp_rpc_stream_close_send(src->s, NULL), 0);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_rpc_stream_send(src->s, SP_RPC_FRAME_DATA, "x", 1, &e), -SP_E_INVALID);
}

typedef struct upload_client {
        source src;
        sink k;
} upload_client;

static void up_writable(sp_rpc_stream *s, void *ud)
{
        upload_client *u = ud;
        source_pump(&u->src);
}

static void up_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        upload_client *u = ud;
        sink_end(s, trailer, err, &u->k);
}

START_TEST(upload_20mb_flow_controlled)
{
        fx f;
        fx_init(&f);
        static upload_client u;
        memset(&u, 0, sizeof(u));
        u.src.size = 20 * MiB + 123;
        static const sp_rpc_stream_ops ops = {.on_writable = up_writable, .on_end = up_end};
        u.src.s = sp_rpc_client_stream(f.cli, "Upload", NULL, 120000, &ops, &u, NULL);
        ck_assert_ptr_nonnull(u.src.s);
        source_pump(&u.src);
        ck_assert(RUN_UNTIL(f.base, u.k.ended, 120000));
        ck_assert_msg(u.k.code == SP_OK, "%s", u.k.msg);
        ck_assert_int_eq(trailer_int(u.k.trailer, "bytes"), (int64_t)u.src.size);
        ck_assert_int_eq(trailer_int(u.k.trailer, "mismatches"), 0);
        json_object_put(u.k.trailer);
        /* The client had to wait for the server, and both buffers stayed bounded. */
        ck_assert_int_gt(u.src.blocked, 0);
        ck_assert_uint_le(u.src.max_queued, SP_RPC_SEND_HIGH_WATERMARK + CHUNK + SP_RPC_FRAME_HEADER_SIZE);
        ck_assert_uint_le(g_max_buffered, SP_RPC_STREAM_WINDOW + CHUNK + SP_RPC_FRAME_HEADER_SIZE);
        ck_assert(RUN_UNTIL(f.base, g_closes == 1 && srv_stats(f.srv).calls_open == 0, 5000));
        ck_assert_int_eq(g_close_code, SP_OK);
        fx_fini(&f);
}
END_TEST

typedef struct echo_client {
        sink k;
        int expect;
} echo_client;

static void echo_client_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        echo_client *e = ud;
        ck_assert_int_eq(type, SP_RPC_FRAME_JSON);
        char want[64];
        if (e->expect == 0)
                snprintf(want, sizeof(want), "{\"hello\":true}");
        else
                snprintf(want, sizeof(want), "{\"seq\":%d}", e->expect);
        ck_assert_int_eq((int)n, (int)strlen(want));
        ck_assert(memcmp(p, want, n) == 0);
        e->expect++;
}

static void echo_client_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        echo_client *e = ud;
        sink_end(s, trailer, err, &e->k);
}

START_TEST(echo_json_frames_in_order)
{
        fx f;
        fx_init(&f);
        echo_client e = {0};
        static const sp_rpc_stream_ops ops = {.on_frame = echo_client_frame, .on_end = echo_client_end};
        _cleanup_json_ json_object *hello = json_object_new_object();
        json_object_object_add(hello, "hello", json_object_new_boolean(1));
        sp_rpc_stream *s = sp_rpc_client_stream(f.cli, "Echo", hello, 10000, &ops, &e, NULL);
        ck_assert_ptr_nonnull(s);
        for (int i = 1; i <= 100; i++) {
                _cleanup_json_ json_object *m = json_object_new_object();
                json_object_object_add(m, "seq", json_object_new_int(i));
                ck_assert_int_ge(sp_rpc_stream_send_json(s, m, NULL), 0);
        }
        ck_assert_int_eq(sp_rpc_stream_close_send(s, NULL), 0);
        ck_assert(RUN_UNTIL(f.base, e.k.ended, 10000));
        ck_assert_msg(e.k.code == SP_OK, "%s", e.k.msg);
        ck_assert_int_eq(e.expect, 101);
        json_object_put(e.k.trailer);
        ck_assert(RUN_UNTIL(f.base, g_closes == 1, 5000));
        ck_assert_int_eq(g_close_code, SP_OK);
        fx_fini(&f);
}
END_TEST

START_TEST(stream_errors)
{
        fx f;
        fx_init(&f);
        /* An error after data arrives in the trailer, with the frames before it. */
        sink k = {0};
        ck_assert_ptr_nonnull(sp_rpc_client_stream(f.cli, "FailMid", NULL, 10000, &sink_ops, &k, NULL));
        ck_assert(RUN_UNTIL(f.base, k.ended, 10000));
        ck_assert_int_eq(k.code, SP_E_CONFLICT);
        ck_assert_str_eq(k.msg, "session ses_1 ended");
        ck_assert_uint_eq(k.got, 7);

        /* Refused before any frame: the HTTP status and the error shape. */
        struct {
                const char *method;
                sp_errc code;
        } cases[] = {{"Nope", SP_E_NOT_FOUND}, {"Unary", SP_E_UNSUPPORTED}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                sink c = {0};
                ck_assert_ptr_nonnull(sp_rpc_client_stream(f.cli, cases[i].method, NULL, 10000, &sink_ops, &c, NULL));
                ck_assert(RUN_UNTIL(f.base, c.ended, 10000));
                ck_assert_int_eq(c.code, cases[i].code);
        }
        fx_fini(&f);
}
END_TEST

START_TEST(stream_deadline_and_cancel)
{
        fx f;
        fx_init(&f);
        sink k = {0};
        int64_t t0 = sp_now_mono_us();
        ck_assert_ptr_nonnull(sp_rpc_client_stream(f.cli, "Hold", NULL, 150, &sink_ops, &k, NULL));
        ck_assert(RUN_UNTIL(f.base, k.ended, 5000));
        ck_assert_int_eq(k.code, SP_E_TIMEOUT);
        ck_assert_int_ge(sp_now_mono_us() - t0, 140 * SP_USEC_PER_MSEC);
        ck_assert(RUN_UNTIL(f.base, g_closes == 1, 5000));
        ck_assert(g_close_code == SP_E_TIMEOUT || g_close_code == SP_E_UNAVAILABLE);

        /* Cancelling from inside on_frame: the server hears of it, on_end never fires. */
        g_closes = 0;
        sink c = {.cancel_after_first = true};
        _cleanup_json_ json_object *req = req_size(0);
        ck_assert_ptr_nonnull(sp_rpc_client_stream(f.cli, "Download", req, 0, &sink_ops, &c, NULL));
        ck_assert(RUN_UNTIL(f.base, g_closes == 1, 5000));
        ck_assert_int_eq(g_close_code, SP_E_UNAVAILABLE);
        ck_assert_uint_eq(c.got, CHUNK);
        sp_rpc_client_stats cs;
        ck_assert(RUN_UNTIL(f.base, (sp_rpc_client_get_stats(f.cli, &cs), cs.calls_open == 0), 5000));
        ck_assert(RUN_UNTIL(f.base, srv_stats(f.srv).calls_open == 0, 5000));
        fx_fini(&f);
}
END_TEST

/* Runs a server in a child process; returns its pid and port. */
static pid_t fork_server(int *ret_port)
{
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                close(p[0]);
                struct event_base *base = event_base_new();
                g_base = base;
                sp_rpc_server *srv = server_new(base);
                int port = sp_rpc_server_port(srv);
                if (write(p[1], &port, sizeof(port)) != sizeof(port))
                        _exit(1);
                event_base_dispatch(base);
                _exit(0);
        }
        close(p[1]);
        ck_assert_int_eq(read(p[0], ret_port, sizeof(*ret_port)), (ssize_t)sizeof(*ret_port));
        close(p[0]);
        return pid;
}

START_TEST(server_killed_mid_stream)
{
        _cleanup_pid_ pid_t pid = -1;
        int port = 0;
        pid = fork_server(&port);
        g_base = event_base_new();
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        sp_rpc_client *cli = sp_rpc_client_new(g_base, addr, NULL, NULL);
        sink k = {.kill_pid = pid, .kill_after = 4 * MiB}, held = {0};
        _cleanup_json_ json_object *req = req_size(0);
        ck_assert_ptr_nonnull(sp_rpc_client_stream(cli, "Download", req, 0, &sink_ops, &k, NULL));
        ck_assert_ptr_nonnull(sp_rpc_client_stream(cli, "Hold", NULL, 0, &sink_ops, &held, NULL));
        ck_assert(RUN_UNTIL(g_base, k.ended && held.ended, 30000));
        /* Every call open on the lost connection ends unavailable. */
        ck_assert_int_eq(k.code, SP_E_UNAVAILABLE);
        ck_assert_int_eq(held.code, SP_E_UNAVAILABLE);
        ck_assert_uint_ge(k.got, 4 * MiB);
        ck_assert_uint_eq(k.bad, 0);
        sp_rpc_client_stats cs;
        sp_rpc_client_get_stats(cli, &cs);
        ck_assert_uint_eq(cs.calls_open, 0);
        ck_assert(!sp_rpc_client_connected(cli));
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        pid = -1;
        sp_rpc_client_free(cli);
        event_base_free(g_base);
}
END_TEST

START_TEST(client_killed_mid_stream)
{
        fx f;
        fx_init(&f);
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", sp_rpc_server_port(f.srv));
        _cleanup_pid_ pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                /* The client: a download it never reads fast enough and an
                 * upload the server stalls, until it is killed. */
                struct event_base *base = event_base_new();
                sp_rpc_client *cli = sp_rpc_client_new(base, addr, NULL, NULL);
                static sink k;
                static source up;
                _cleanup_json_ json_object *req = req_size(0);
                _cleanup_json_ json_object *stall = json_object_new_object();
                json_object_object_add(stall, "stall", json_object_new_boolean(1));
                sp_rpc_client_stream(cli, "Download", req, 0, &sink_ops, &k, NULL);
                up.size = 4 * MiB;
                up.s = sp_rpc_client_stream(cli, "Upload", stall, 0, NULL, NULL, NULL);
                source_pump(&up);
                event_base_dispatch(base);
                _exit(0);
        }
        g_kill_pid = pid;
        g_kill_after = 2 * MiB;
        /* Both calls are started, then the download reaches the kill point. */
        ck_assert(RUN_UNTIL(f.base, g_closes == 2, 30000));
        ck_assert_int_eq(g_close_code, SP_E_UNAVAILABLE);
        ck_assert_uint_ge(g_max_buffered, 1);
        /* Everything of the calls and the connection is gone. */
        ck_assert(RUN_UNTIL(f.base, srv_stats(f.srv).calls_open == 0 && srv_stats(f.srv).connections_open == 0, 5000));
        ck_assert_uint_eq(srv_stats(f.srv).calls_started, 2);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        pid = -1;
        fx_fini(&f);
}
END_TEST

static void reset_globals(void)
{
        g_max_queued = g_max_buffered = 0;
        g_server_blocked = g_closes = 0;
        g_close_code = SP_E__MAX;
        g_sent = 0;
        g_kill_pid = 0;
        g_kill_after = 0;
}

static Suite *suite(void)
{
        Suite *s = suite_create("rpc_stream");
        TCase *tc = tcase_create("stream");
        tcase_add_checked_fixture(tc, reset_globals, NULL);
        tcase_set_timeout(tc, 180);
        tcase_add_test(tc, download_50mb_slow_consumer_bounded);
        tcase_add_test(tc, upload_20mb_flow_controlled);
        tcase_add_test(tc, echo_json_frames_in_order);
        tcase_add_test(tc, stream_errors);
        tcase_add_test(tc, stream_deadline_and_cancel);
        tcase_add_test(tc, server_killed_mid_stream);
        tcase_add_test(tc, client_killed_mid_stream);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
