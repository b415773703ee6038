/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: HTTP/2 flow control across the streams of one connection. A
 * consumer that pauses streams (a slow attach client, a slow agent) holds at
 * most each stream's own window; it never stalls the other streams or the
 * unary calls that share the connection — on the client's side (downloads
 * paused by the client) and on the server's (uploads paused by the handler).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/time.h"

#define CHUNK (64 * 1024)
#define MiB (1024 * 1024)
/* More paused streams than the connection window holds stream windows. */
#define PAUSED (SP_RPC_CONN_WINDOW / SP_RPC_STREAM_WINDOW + 4)

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
}

static void loop_once(struct event_base *base)
{
        struct event *t = evtimer_new(base, wake_cb, NULL);
        struct timeval tv = {0, 20000};
        evtimer_add(t, &tv);
        event_base_loop(base, EVLOOP_ONCE);
        event_free(t);
}

#define RUN_UNTIL(base, cond, ms) \
        ({ \
                int64_t end_ = sp_now_mono_us() + (int64_t)(ms)*SP_USEC_PER_MSEC; \
                while (!(cond) && sp_now_mono_us() < end_) \
                        loop_once(base); \
                (cond); \
        })

/* ---- server ---------------------------------------------------------------- */

typedef struct download {
        sp_rpc_call *call;
        uint64_t size, sent;
} download;

static void download_pump(download *d)
{
        static uint8_t buf[CHUNK];
        while (d->sent < d->size) {
                size_t n = d->size - d->sent > CHUNK ? CHUNK : (size_t)(d->size - d->sent);
                int r = sp_rpc_call_send(d->call, SP_RPC_FRAME_DATA, buf, n, NULL);
                if (r < 0)
                        return;
                d->sent += n;
                if (r == 1)
                        return;
        }
        sp_rpc_call_end(d->call, NULL, NULL);
}

static void download_writable(sp_rpc_call *call, void *ud)
{
        (void)call;
        download_pump(ud);
}

static void download_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        download *d = ud;
        sp_rpc_call_unref(d->call);
        free(d);
}

static void download_method(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        static const sp_rpc_call_ops ops = {.on_writable = download_writable, .on_close = download_close};
        int64_t size = 0;
        ck_assert_int_eq(sp_json_get_int(req, "size", true, 0, INT64_MAX, &size, NULL), 0);
        download *d = calloc(1, sizeof(*d));
        d->call = sp_rpc_call_ref(call);
        d->size = (uint64_t)size;
        sp_rpc_call_set_ops(call, &ops, d);
        download_pump(d);
}

/* Uploads: "stall" pauses at the first frame and never resumes; otherwise
 * counts the bytes and ends with them when the client half-closes. */
typedef struct upload {
        sp_rpc_call *call;
        bool stall;
        uint64_t got;
} upload;

static void upload_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)type;
        (void)p;
        upload *u = ud;
        u->got += n;
        if (u->stall)
                sp_rpc_call_pause(call);
}

static void upload_end(sp_rpc_call *call, void *ud)
{
        upload *u = ud;
        _cleanup_json_ json_object *extra = json_object_new_object();
        json_object_object_add(extra, "got", json_object_new_int64((int64_t)u->got));
        sp_rpc_call_end(call, extra, NULL);
}

static void upload_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        upload *u = ud;
        sp_rpc_call_unref(u->call);
        free(u);
}

static void upload_method(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        static const sp_rpc_call_ops ops = {
                .on_frame = upload_frame, .on_input_end = upload_end, .on_close = upload_close};
        upload *u = calloc(1, sizeof(*u));
        u->call = sp_rpc_call_ref(call);
        ck_assert_int_eq(sp_json_get_bool(req, "stall", false, &u->stall, NULL), 0);
        sp_rpc_call_set_ops(call, &ops, u);
}

static void echo_method(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_rpc_call_reply(call, req, NULL);
}

typedef struct fx {
        struct event_base *base;
        sp_rpc_server *srv;
        sp_rpc_client *cli;
} fx;

static void fx_init(fx *f)
{
        f->base = event_base_new();
        f->srv = sp_rpc_server_new(f->base, NULL, NULL);
        ck_assert_ptr_nonnull(f->srv);
        const sp_rpc_method methods[] = {
                {.name = "Download", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = download_method},
                {.name = "Upload", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = upload_method},
                {.name = "Echo", .roles = SP_RPC_UNAUTHENTICATED, .handler = echo_method},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++)
                ck_assert_int_eq(sp_rpc_server_register(f->srv, &methods[i], NULL), 0);
        ck_assert_int_eq(sp_rpc_server_listen(f->srv, "127.0.0.1:0", NULL), 0);
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

/* ---- client ---------------------------------------------------------------- */

typedef struct sink {
        sp_rpc_stream *s;
        bool stall; /* pause at the first frame, never resume */
        uint64_t got;
        size_t max_buffered;
        bool ended;
        sp_errc code;
        json_object *trailer;
} sink;

static void sink_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)type;
        (void)p;
        sink *k = ud;
        k->got += n;
        if (sp_rpc_stream_buffered(s) > k->max_buffered)
                k->max_buffered = sp_rpc_stream_buffered(s);
        if (k->stall)
                sp_rpc_stream_pause(s);
}

static void sink_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        sink *k = ud;
        k->ended = true;
        k->s = NULL;
        k->code = err ? err->code : SP_OK;
        k->trailer = json_object_get(trailer);
}

static const sp_rpc_stream_ops sink_ops = {.on_frame = sink_frame, .on_end = sink_end};

/* Each stream received (and holds, paused) about a whole window. */
static bool all_full(const sink *k, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (k[i].got + sp_rpc_stream_buffered(k[i].s) < SP_RPC_STREAM_WINDOW - CHUNK)
                        return false;
        return true;
}

static bool all_ended(const sink *k, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!k[i].ended)
                        return false;
        return true;
}

static json_object *req_size(uint64_t size)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "size", json_object_new_int64((int64_t)size));
        return o;
}

static void unary_cb(json_object *resp, const sp_error *err, void *ud)
{
        int *done = ud;
        *done = resp && !err ? 1 : -1;
}

START_TEST(paused_downloads_do_not_stall_the_connection)
{
        fx f;
        fx_init(&f);
        static sink paused[PAUSED];
        _cleanup_json_ json_object *big = req_size(4 * MiB);
        for (size_t i = 0; i < PAUSED; i++) {
                paused[i] = (sink){.stall = true};
                paused[i].s = sp_rpc_client_stream(f.cli, "Download", big, 60000, &sink_ops, &paused[i], NULL);
                ck_assert_ptr_nonnull(paused[i].s);
        }
        /* Every paused stream fills its own window, and no more. */
        ck_assert_msg(RUN_UNTIL(f.base, all_full(paused, PAUSED), 20000),
                      "the paused streams did not each receive a window's worth");
        for (size_t i = 0; i < PAUSED; i++)
                ck_assert_uint_le(sp_rpc_stream_buffered(paused[i].s), SP_RPC_STREAM_WINDOW + CHUNK);

        /* A new download and a unary call on the same connection go through. */
        sink live = {0};
        live.s = sp_rpc_client_stream(f.cli, "Download", big, 60000, &sink_ops, &live, NULL);
        int done = 0;
        _cleanup_json_ json_object *ping = req_size(1);
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", ping, 60000, unary_cb, &done, NULL), 0);
        ck_assert(RUN_UNTIL(f.base, live.ended && done != 0, 20000));
        ck_assert_int_eq(live.code, SP_OK);
        ck_assert_uint_eq(live.got, 4 * MiB);
        ck_assert_int_eq(done, 1);
        sp_rpc_client_stats st;
        sp_rpc_client_get_stats(f.cli, &st);
        ck_assert_uint_eq(st.connects, 1);

        /* The paused ones resume and finish, whole. */
        for (size_t i = 0; i < PAUSED; i++) {
                paused[i].stall = false;
                sp_rpc_stream_resume(paused[i].s);
        }
        ck_assert(RUN_UNTIL(f.base, all_ended(paused, PAUSED), 30000));
        for (size_t i = 0; i < PAUSED; i++) {
                ck_assert_int_eq(paused[i].code, SP_OK);
                ck_assert_uint_eq(paused[i].got, 4 * MiB);
                json_object_put(paused[i].trailer);
        }
        json_object_put(live.trailer);
        fx_fini(&f);
}
END_TEST

/* Sends size bytes on s, as fast as its send queue allows. */
typedef struct source {
        sink k;
        uint64_t size, sent;
} source;

static void source_pump(source *src)
{
        static uint8_t buf[CHUNK];
        while (src->k.s && src->sent < src->size) {
                size_t n = src->size - src->sent > CHUNK ? CHUNK : (size_t)(src->size - src->sent);
                int r = sp_rpc_stream_send(src->k.s, SP_RPC_FRAME_DATA, buf, n, NULL);
                if (r < 0)
                        return;
                src->sent += n;
                if (r == 1)
                        return;
        }
        if (src->k.s)
                sp_rpc_stream_close_send(src->k.s, NULL);
}

static void source_writable(sp_rpc_stream *s, void *ud)
{
        (void)s;
        source_pump(ud);
}

static void source_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        source *src = ud;
        sink_end(s, trailer, err, &src->k);
}

static const sp_rpc_stream_ops source_ops = {.on_writable = source_writable, .on_end = source_end};

START_TEST(paused_uploads_do_not_stall_the_connection)
{
        fx f;
        fx_init(&f);
        static source stalled[PAUSED];
        _cleanup_json_ json_object *stall = json_object_new_object();
        json_object_object_add(stall, "stall", json_object_new_boolean(true));
        for (size_t i = 0; i < PAUSED; i++) {
                stalled[i] = (source){.size = 4 * MiB};
                stalled[i].k.s = sp_rpc_client_stream(f.cli, "Upload", stall, 60000, &source_ops, &stalled[i], NULL);
                ck_assert_ptr_nonnull(stalled[i].k.s);
                source_pump(&stalled[i]);
        }
        /* Let the stalled uploads fill what the server lets them send. */
        for (int i = 0; i < 100; i++)
                loop_once(f.base);

        source live = {.size = 4 * MiB};
        _cleanup_json_ json_object *go = json_object_new_object();
        live.k.s = sp_rpc_client_stream(f.cli, "Upload", go, 60000, &source_ops, &live, NULL);
        source_pump(&live);
        int done = 0;
        _cleanup_json_ json_object *ping = req_size(1);
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", ping, 60000, unary_cb, &done, NULL), 0);
        ck_assert(RUN_UNTIL(f.base, live.k.ended && done != 0, 20000));
        ck_assert_int_eq(live.k.code, SP_OK);
        int64_t got = -1;
        ck_assert_int_eq(sp_json_get_int(live.k.trailer, "got", true, 0, INT64_MAX, &got, NULL), 0);
        ck_assert_int_eq(got, 4 * MiB);
        ck_assert_int_eq(done, 1);
        json_object_put(live.k.trailer);
        for (size_t i = 0; i < PAUSED; i++) {
                ck_assert(!stalled[i].k.ended);
                sp_rpc_stream_cancel(stalled[i].k.s);
        }
        fx_fini(&f);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("rpc_flow");
        TCase *tc = tcase_create("flow");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, paused_downloads_do_not_stall_the_connection);
        tcase_add_test(tc, paused_uploads_do_not_stall_the_connection);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
