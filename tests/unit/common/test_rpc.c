/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the RPC transport's unary calls over real loopback sockets
 * (cleartext HTTP/2): round trips, many calls on one connection, the error
 * statuses with the error shape, asynchronous replies, deadlines on both
 * sides, reconnects, GOAWAY, unix sockets and the blocking helper. Server
 * and client share one event_base unless a test needs them apart.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/time.h"

/* ---- helpers ------------------------------------------------------------- */

static void wake_cb(evutil_socket_t fd, short what, void *arg) {}

/* One loop iteration, woken after 20 ms at the latest. */
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

static bool run_until(struct event_base *base, const bool *flag, int64_t timeout_ms)
{
        return RUN_UNTIL(base, *flag, timeout_ms);
}

static sp_rpc_server_stats srv_stats(const sp_rpc_server *srv)
{
        sp_rpc_server_stats st;
        sp_rpc_server_get_stats(srv, &st);
        return st;
}

typedef struct result {
        bool done;
        sp_errc code;
        char msg[512];
        json_object *resp;
} result;

static void on_result(json_object *resp, const sp_error *e, void *ud)
{
        result *r = ud;
        ck_assert(!r->done); /* exactly once */
        r->done = true;
        r->code = e ? e->code : SP_OK;
        if (e)
                snprintf(r->msg, sizeof(r->msg), "%s", e->message);
        if (resp)
                r->resp = json_object_get(resp);
        ck_assert((resp != NULL) != (e != NULL));
}

static void result_clear(result *r)
{
        json_object_put(r->resp);
        memset(r, 0, sizeof(*r));
}

/* ---- methods --------------------------------------------------------------- */

static sp_errc g_close_code = SP_E__MAX; /* reason of the last on_close, SP_OK for none */
static int g_closes;

static void echo(sp_rpc_call *call, json_object *req, void *ud)
{
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "echo", json_object_get(req));
        json_object_object_add(resp, "method", json_object_new_string(sp_rpc_call_method(call)));
        ck_assert_int_eq(sp_rpc_call_reply(call, resp, NULL), 0);
        /* a second answer is refused */
        ck_assert_int_eq(sp_rpc_call_reply(call, resp, NULL), -SP_E_INVALID);
}

static void fail_method(sp_rpc_call *call, json_object *req, void *ud)
{
        sp_rpc_call_failf(call, SP_E_CONFLICT, "sandbox %s already exists", "sbx_1");
}

static void async_reply_cb(evutil_socket_t fd, short what, void *arg)
{
        sp_rpc_call *call = arg;
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "late", json_object_new_boolean(1));
        int r = sp_rpc_call_reply(call, resp, NULL);
        /* After the caller has gone, replying is a harmless no-op. */
        ck_assert(r == 0 || r == -SP_E_UNAVAILABLE);
        g_closes += r == -SP_E_UNAVAILABLE ? 100 : 0;
        sp_rpc_call_unref(call);
}

/* Replies after req.delay_ms (from a timer; the handler holds a reference). */
static void async(sp_rpc_call *call, json_object *req, void *ud)
{
        struct event_base *base = ud;
        int64_t delay = 20;
        sp_json_get_int(req, "delay_ms", false, 0, 10000, &delay, NULL);
        struct timeval tv = {0, (suseconds_t)delay * 1000};
        ck_assert_int_eq(event_base_once(base, -1, EV_TIMEOUT, async_reply_cb, sp_rpc_call_ref(call), &tv), 0);
}

static void hold_on_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        g_close_code = reason ? reason->code : SP_OK;
        g_closes++;
        ck_assert(sp_rpc_call_is_closed(call));
        ck_assert_int_eq(sp_rpc_call_reply(call, NULL, NULL), -SP_E_UNAVAILABLE);
        sp_rpc_call_unref(call);
}

/* Never answers; learns through on_close when the call is over. */
static void hold(sp_rpc_call *call, json_object *req, void *ud)
{
        static const sp_rpc_call_ops ops = {.on_close = hold_on_close};
        sp_rpc_call_set_ops(call, &ops, NULL);
        sp_rpc_call_ref(call);
}

typedef struct fx {
        struct event_base *base;
        sp_rpc_server *srv;
        sp_rpc_client *cli;
        char addr[64];
} fx;

static void register_methods(sp_rpc_server *srv, struct event_base *base)
{
        const sp_rpc_method methods[] = {
                {.name = "Echo", .roles = SP_RPC_UNAUTHENTICATED, .handler = echo},
                {.name = "Fail", .roles = SP_RPC_UNAUTHENTICATED, .handler = fail_method},
                {.name = "Async", .roles = SP_RPC_UNAUTHENTICATED, .handler = async, .userdata = base},
                {.name = "Hold", .roles = SP_RPC_UNAUTHENTICATED, .handler = hold},
                {.name = "WorkerOnly", .roles = SP_ROLE_WORKER, .handler = echo},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++)
                ck_assert_int_eq(sp_rpc_server_register(srv, &methods[i], NULL), 0);
}

static void fx_init(fx *f)
{
        memset(f, 0, sizeof(*f));
        f->base = event_base_new();
        ck_assert_ptr_nonnull(f->base);
        f->srv = sp_rpc_server_new(f->base, NULL, NULL);
        ck_assert_ptr_nonnull(f->srv);
        register_methods(f->srv, f->base);
        ck_assert_int_eq(sp_rpc_server_listen(f->srv, "127.0.0.1:0", NULL), 0);
        ck_assert_int_gt(sp_rpc_server_port(f->srv), 0);
        snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", sp_rpc_server_port(f->srv));
        f->cli = sp_rpc_client_new(f->base, f->addr, NULL, NULL);
        ck_assert_ptr_nonnull(f->cli);
}

static void fx_fini(fx *f)
{
        sp_rpc_client_free(f->cli);
        sp_rpc_server_free(f->srv);
        event_base_free(f->base);
}

static json_object *obj_int(const char *k, int64_t v)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, k, json_object_new_int64(v));
        return o;
}

/* ---- a raw HTTP/2 client (blocking, in a thread) for requests our client
 * never sends: other methods, content types, bad JSON, huge bodies. -------- */

typedef struct raw_req {
        int port;
        const char *method, *path, *content_type, *timeout_ms;
        const uint8_t *body;
        size_t body_len, body_off;
        int fd;
        int notify_fd;
        int status;
        sp_buf resp;
        bool closed;
        bool failed;
} raw_req;

static ssize_t raw_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud)
{
        raw_req *r = ud;
        ssize_t w = send(r->fd, data, len, MSG_NOSIGNAL);
        if (w < 0 && errno == EAGAIN)
                return NGHTTP2_ERR_WOULDBLOCK;
        return w < 0 ? NGHTTP2_ERR_CALLBACK_FAILURE : w;
}

static ssize_t raw_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                        nghttp2_data_source *src, void *ud)
{
        raw_req *r = ud;
        size_t n = r->body_len - r->body_off < len ? r->body_len - r->body_off : len;
        if (n)
                memcpy(buf, r->body + r->body_off, n);
        r->body_off += n;
        if (r->body_off == r->body_len)
                *flags |= NGHTTP2_DATA_FLAG_EOF;
        return (ssize_t)n;
}

static int raw_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                      const uint8_t *value, size_t vlen, uint8_t flags, void *ud)
{
        raw_req *r = ud;
        if (nlen == 7 && memcmp(name, ":status", 7) == 0)
                r->status = atoi((const char *)value);
        return 0;
}

static int raw_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud)
{
        raw_req *r = ud;
        sp_buf_append(&r->resp, data, len, NULL);
        return 0;
}

static int raw_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud)
{
        raw_req *r = ud;
        r->closed = true;
        return 0;
}

static void *raw_thread(void *arg)
{
        raw_req *r = arg;
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)r->port)};
        inet_pton(AF_INET, "127.0.0.1", &sin.sin_addr);
        r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        nghttp2_session_callbacks *cbs;
        nghttp2_session *s = NULL;
        nghttp2_session_callbacks_new(&cbs);
        nghttp2_session_callbacks_set_send_callback(cbs, raw_send);
        nghttp2_session_callbacks_set_on_header_callback(cbs, raw_header);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, raw_data);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, raw_close);
        nghttp2_session_client_new(&s, cbs, r);
        nghttp2_session_callbacks_del(cbs);
        if (connect(r->fd, (struct sockaddr *)&sin, sizeof(sin)) < 0) {
                r->failed = true;
                goto out;
        }
        nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0);
        nghttp2_nv nv[5];
        size_t n = 0;
#define RAW_NV(k, v) nv[n++] = (nghttp2_nv){(uint8_t *)(k), (uint8_t *)(v), strlen(k), strlen(v), 0}
        RAW_NV(":method", r->method);
        RAW_NV(":scheme", "http");
        RAW_NV(":authority", "localhost");
        RAW_NV(":path", r->path);
        if (r->content_type)
                RAW_NV("content-type", r->content_type);
        nghttp2_nv nv2[6];
        memcpy(nv2, nv, sizeof(nv[0]) * n);
        if (r->timeout_ms)
                nv2[n++] = (nghttp2_nv){(uint8_t *)SP_RPC_TIMEOUT_HEADER, (uint8_t *)r->timeout_ms,
                                        strlen(SP_RPC_TIMEOUT_HEADER), strlen(r->timeout_ms), 0};
        nghttp2_data_provider prd = {.read_callback = raw_body};
        nghttp2_submit_request(s, NULL, nv2, n, r->body ? &prd : NULL, NULL);
        int64_t end = sp_now_mono_us() + 10 * SP_USEC_PER_SEC;
        while (!r->closed && sp_now_mono_us() < end) {
                if (nghttp2_session_send(s) != 0)
                        break;
                struct pollfd p = {.fd = r->fd, .events = POLLIN};
                if (poll(&p, 1, 50) <= 0)
                        continue;
                uint8_t buf[16384];
                ssize_t got = recv(r->fd, buf, sizeof(buf), 0);
                if (got <= 0 || nghttp2_session_mem_recv(s, buf, (size_t)got) < 0)
                        break;
        }
out:
        nghttp2_session_del(s);
        close(r->fd);
        if (write(r->notify_fd, "x", 1) != 1)
                abort();
        return NULL;
}

static void raw_done_cb(evutil_socket_t fd, short what, void *arg)
{
        char c;
        ck_assert_int_eq(read(fd, &c, 1), 1);
        *(bool *)arg = true;
}

/* Sends one raw request to the server on f and waits for its answer. */
static void raw_run(fx *f, raw_req *r)
{
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        r->port = sp_rpc_server_port(f->srv);
        r->notify_fd = p[1];
        bool done = false;
        struct event *ev = event_new(f->base, p[0], EV_READ, raw_done_cb, &done);
        event_add(ev, NULL);
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, raw_thread, r), 0);
        ck_assert(run_until(f->base, &done, 15000));
        pthread_join(t, NULL);
        event_free(ev);
        close(p[0]);
        close(p[1]);
}

/* Asserts that the body is the error shape with code. */
static void assert_error_shape(const sp_buf *body, const char *code)
{
        _cleanup_json_ json_object *o = NULL;
        ck_assert_msg(sp_json_parse(body->data, body->len, &o, NULL) == 0, "body: %s", body->data);
        json_object *e = NULL, *c = NULL, *m = NULL;
        ck_assert(json_object_object_get_ex(o, "error", &e));
        ck_assert(json_object_object_get_ex(e, "code", &c));
        ck_assert(json_object_object_get_ex(e, "message", &m));
        ck_assert_str_eq(json_object_get_string(c), code);
        ck_assert_int_gt(json_object_get_string_len(m), 0);
}

/* ---- tests ------------------------------------------------------------------- */

START_TEST(unary_round_trip)
{
        fx f;
        fx_init(&f);
        _cleanup_json_ json_object *req = json_tokener_parse("{\"name\":\"sbx\",\"n\":[1,2,3]}");
        result r = {0};
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", req, 5000, on_result, &r, NULL), 0);
        ck_assert(!r.done); /* never from inside the call */
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_OK);
        json_object *echoed = NULL, *m = NULL;
        ck_assert(json_object_object_get_ex(r.resp, "echo", &echoed));
        ck_assert(json_object_equal(echoed, req));
        ck_assert(json_object_object_get_ex(r.resp, "method", &m));
        ck_assert_str_eq(json_object_get_string(m), "Echo");
        result_clear(&r);

        /* Bad arguments fail at once and never call back. */
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(sp_rpc_client_call(f.cli, "bad/name", req, 0, on_result, &r, &e), 0);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        fx_fini(&f);
}
END_TEST

#define NCONCURRENT 300 /* more than one connection's stream limit */

START_TEST(unary_many_concurrent_one_connection)
{
        fx f;
        fx_init(&f);
        static result rs[NCONCURRENT];
        memset(rs, 0, sizeof(rs));
        for (int i = 0; i < NCONCURRENT; i++) {
                _cleanup_json_ json_object *req = obj_int("i", i);
                ck_assert_int_eq(
                        sp_rpc_client_call(f.cli, i % 2 ? "Echo" : "Async", req, 10000, on_result, &rs[i], NULL), 0);
        }
        for (int i = 0; i < NCONCURRENT; i++) {
                ck_assert(run_until(f.base, &rs[i].done, 10000));
                ck_assert_int_eq(rs[i].code, SP_OK);
                if (i % 2) {
                        json_object *echoed = NULL, *v = NULL;
                        ck_assert(json_object_object_get_ex(rs[i].resp, "echo", &echoed));
                        ck_assert(json_object_object_get_ex(echoed, "i", &v));
                        ck_assert_int_eq(json_object_get_int(v), i);
                }
                result_clear(&rs[i]);
        }
        sp_rpc_server_stats st = srv_stats(f.srv);
        ck_assert_uint_eq(st.connections_accepted, 1);
        ck_assert_uint_eq(st.calls_started, NCONCURRENT);
        sp_rpc_client_stats cs;
        sp_rpc_client_get_stats(f.cli, &cs);
        ck_assert_uint_eq(cs.connects, 1);
        ck_assert_uint_eq(cs.calls_open, 0);
        fx_fini(&f);
}
END_TEST

START_TEST(unary_errors_have_the_shape)
{
        fx f;
        fx_init(&f);
        result r = {0};
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "NoSuchMethod", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_E_NOT_FOUND);
        ck_assert_str_eq(r.msg, "unknown method NoSuchMethod");
        result_clear(&r);

        /* Cleartext peers have no role: a worker-only method refuses them. */
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "WorkerOnly", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_E_PERMISSION);
        result_clear(&r);

        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Fail", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_E_CONFLICT);
        ck_assert_str_eq(r.msg, "sandbox sbx_1 already exists");
        result_clear(&r);

        /* What our client never sends, through a raw HTTP/2 client. */
        struct {
                const char *method, *path, *ct, *body;
                int status;
                const char *code;
        } cases[] = {
                {"POST", "/rpc/v1/Nope", SP_RPC_CONTENT_TYPE_JSON, "{}", 404, "not_found"},
                {"POST", "/other", SP_RPC_CONTENT_TYPE_JSON, "{}", 404, "not_found"},
                {"GET", "/rpc/v1/Echo", NULL, NULL, 405, "method_not_allowed"},
                {"POST", "/rpc/v1/Echo", "text/plain", "{}", 415, "unsupported"},
                {"POST", "/rpc/v1/Echo", SP_RPC_CONTENT_TYPE_JSON, "{\"a\":", 400, "invalid_argument"},
                {"POST", "/rpc/v1/Echo", SP_RPC_CONTENT_TYPE_JSON, "[1]", 400, "invalid_argument"},
                {"POST", "/rpc/v1/Echo", SP_RPC_CONTENT_TYPE_JSON, "", 400, "invalid_argument"},
                {"POST", "/rpc/v1/WorkerOnly", SP_RPC_CONTENT_TYPE_JSON, "{}", 403, "permission_denied"},
                {"POST", "/rpc/v1/Echo", "application/json; charset=utf-8", "{\"x\":1}", 200, NULL},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                raw_req q = {.method = cases[i].method,
                             .path = cases[i].path,
                             .content_type = cases[i].ct,
                             .body = (const uint8_t *)cases[i].body,
                             .body_len = cases[i].body ? strlen(cases[i].body) : 0};
                raw_run(&f, &q);
                ck_assert_msg(!q.failed && q.closed, "case %zu did not complete", i);
                ck_assert_int_eq(q.status, cases[i].status);
                if (cases[i].code)
                        assert_error_shape(&q.resp, cases[i].code);
                sp_buf_free(&q.resp);
        }

        /* An oversized body: 413 with the shape, and the connection survives. */
        size_t big = SP_RPC_MAX_BODY + 4096;
        _cleanup_free_ uint8_t *body = malloc(big);
        memset(body, ' ', big);
        raw_req q = {.method = "POST",
                     .path = "/rpc/v1/Echo",
                     .content_type = SP_RPC_CONTENT_TYPE_JSON,
                     .body = body,
                     .body_len = big};
        raw_run(&f, &q);
        ck_assert(q.closed);
        ck_assert_int_eq(q.status, 413);
        assert_error_shape(&q.resp, "too_large");
        sp_buf_free(&q.resp);

        ck_assert_uint_eq(srv_stats(f.srv).calls_started, 2); /* Fail, and the charset variant */
        fx_fini(&f);
}
END_TEST

START_TEST(unary_async_reply)
{
        fx f;
        fx_init(&f);
        _cleanup_json_ json_object *req = obj_int("delay_ms", 50);
        result r = {0};
        int64_t t0 = sp_now_mono_us();
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Async", req, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_OK);
        ck_assert_int_ge(sp_now_mono_us() - t0, 45 * SP_USEC_PER_MSEC);
        json_object *late = NULL;
        ck_assert(json_object_object_get_ex(r.resp, "late", &late));
        result_clear(&r);

        /* The caller gives up first: the late reply is a no-op and nothing leaks. */
        json_object_object_add(req, "delay_ms", json_object_new_int(300));
        g_closes = 0;
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Async", req, 50, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_E_TIMEOUT);
        result_clear(&r);
        ck_assert(RUN_UNTIL(f.base, g_closes == 100, 5000));
        ck_assert_uint_eq(srv_stats(f.srv).calls_open, 0);
        fx_fini(&f);
}
END_TEST

START_TEST(unary_deadline_both_sides)
{
        fx f;
        fx_init(&f);
        /* Client side: the callback reports a timeout; the server cancels too. */
        g_close_code = SP_E__MAX;
        g_closes = 0;
        result r = {0};
        int64_t t0 = sp_now_mono_us();
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Hold", NULL, 150, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_E_TIMEOUT);
        int64_t took = sp_now_mono_us() - t0;
        ck_assert_int_ge(took, 140 * SP_USEC_PER_MSEC);
        ck_assert_int_lt(took, 3000 * SP_USEC_PER_MSEC);
        result_clear(&r);
        ck_assert(RUN_UNTIL(f.base, g_closes == 1, 2000));
        /* The server's own deadline or the client's reset, whichever came first. */
        ck_assert(g_close_code == SP_E_TIMEOUT || g_close_code == SP_E_UNAVAILABLE);

        /* Server side alone: a peer that sends a deadline but never enforces it
         * gets 408 with the shape, and the handler's on_close says timeout. */
        g_close_code = SP_E__MAX;
        g_closes = 0;
        raw_req q = {.method = "POST",
                     .path = "/rpc/v1/Hold",
                     .content_type = SP_RPC_CONTENT_TYPE_JSON,
                     .timeout_ms = "100",
                     .body = (const uint8_t *)"{}",
                     .body_len = 2};
        raw_run(&f, &q);
        ck_assert(q.closed);
        ck_assert_int_eq(q.status, 408);
        assert_error_shape(&q.resp, "timeout");
        sp_buf_free(&q.resp);
        ck_assert_int_eq(g_closes, 1);
        ck_assert_int_eq(g_close_code, SP_E_TIMEOUT);

        /* A malformed deadline header is a bad request. */
        raw_req bad = {.method = "POST",
                       .path = "/rpc/v1/Echo",
                       .content_type = SP_RPC_CONTENT_TYPE_JSON,
                       .timeout_ms = "-5",
                       .body = (const uint8_t *)"{}",
                       .body_len = 2};
        raw_run(&f, &bad);
        ck_assert_int_eq(bad.status, 400);
        sp_buf_free(&bad.resp);

        ck_assert_uint_eq(srv_stats(f.srv).calls_open, 0);
        fx_fini(&f);
}
END_TEST

/* More calls than one connection's stream limit, all timing out: the queued
 * ones are cancelled too, and both sides free everything. */
START_TEST(unary_queued_calls_time_out_cleanly)
{
        fx f;
        fx_init(&f);
        g_closes = 0;
        static result rs[NCONCURRENT];
        memset(rs, 0, sizeof(rs));
        for (int i = 0; i < NCONCURRENT; i++)
                ck_assert_int_eq(sp_rpc_client_call(f.cli, "Hold", NULL, 200, on_result, &rs[i], NULL), 0);
        for (int i = 0; i < NCONCURRENT; i++) {
                ck_assert(run_until(f.base, &rs[i].done, 5000));
                ck_assert_int_eq(rs[i].code, SP_E_TIMEOUT);
        }
        sp_rpc_client_stats cs;
        ck_assert(RUN_UNTIL(f.base, (sp_rpc_client_get_stats(f.cli, &cs), cs.calls_open == 0), 5000));
        ck_assert(RUN_UNTIL(f.base, srv_stats(f.srv).calls_open == 0, 5000));
        ck_assert_int_eq(g_closes, (int)srv_stats(f.srv).calls_started);
        /* The connection is still good. */
        result r = {0};
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_OK);
        result_clear(&r);
        ck_assert_uint_eq(srv_stats(f.srv).connections_accepted, 1);
        fx_fini(&f);
}
END_TEST

START_TEST(unary_reconnect_after_server_restart)
{
        fx f;
        fx_init(&f);
        int port = sp_rpc_server_port(f.srv);
        result r = {0};
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_OK);
        result_clear(&r);
        ck_assert(sp_rpc_client_connected(f.cli));

        /* A call in flight when the server goes away fails as unavailable. */
        g_closes = 0;
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Hold", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(RUN_UNTIL(f.base, srv_stats(f.srv).calls_started == 2, 5000));
        sp_rpc_server_free(f.srv);
        ck_assert_int_eq(g_closes, 1); /* the held call was told */
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_E_UNAVAILABLE);
        result_clear(&r);
        ck_assert(!sp_rpc_client_connected(f.cli));

        /* Nobody listening: unavailable, quickly. */
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_E_UNAVAILABLE);
        result_clear(&r);

        /* The server is back on the same port: the next call reconnects. */
        f.srv = sp_rpc_server_new(f.base, NULL, NULL);
        register_methods(f.srv, f.base);
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        ck_assert_int_eq(sp_rpc_server_listen(f.srv, addr, NULL), 0);
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(f.base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_OK);
        result_clear(&r);
        sp_rpc_client_stats cs;
        sp_rpc_client_get_stats(f.cli, &cs);
        ck_assert_uint_eq(cs.connects, 3);
        fx_fini(&f);
}
END_TEST

START_TEST(unary_goaway_drains_then_reconnects)
{
        fx f;
        fx_init(&f);
        int port = sp_rpc_server_port(f.srv);
        result r1 = {0}, r2 = {0};
        _cleanup_json_ json_object *slow = obj_int("delay_ms", 300);
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Async", slow, 5000, on_result, &r1, NULL), 0);
        ck_assert(RUN_UNTIL(f.base, srv_stats(f.srv).calls_started == 1, 5000));
        /* Graceful stop: GOAWAY, listener closed; a new server takes the port. */
        sp_rpc_server *old = f.srv;
        sp_rpc_server_shutdown(old);
        f.srv = sp_rpc_server_new(f.base, NULL, NULL);
        register_methods(f.srv, f.base);
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        ck_assert_int_eq(sp_rpc_server_listen(f.srv, addr, NULL), 0);
        ck_assert(RUN_UNTIL(f.base, !sp_rpc_client_connected(f.cli), 5000));
        ck_assert(!r1.done);

        /* New calls go to a new connection while the old one drains. */
        ck_assert_int_eq(sp_rpc_client_call(f.cli, "Echo", NULL, 5000, on_result, &r2, NULL), 0);
        ck_assert(run_until(f.base, &r2.done, 5000));
        ck_assert_int_eq(r2.code, SP_OK);
        ck_assert(run_until(f.base, &r1.done, 5000));
        ck_assert_int_eq(r1.code, SP_OK);
        result_clear(&r1);
        result_clear(&r2);

        /* The old connection closes once its last stream is done. */
        ck_assert(RUN_UNTIL(f.base, srv_stats(old).connections_open == 0, 5000));
        ck_assert_uint_eq(srv_stats(f.srv).connections_accepted, 1);
        sp_rpc_server_free(old);
        fx_fini(&f);
}
END_TEST

START_TEST(unary_unix_socket)
{
        _cleanup_free_ char *dir = sp_test_tmpdir("rpc");
        char addr[256];
        snprintf(addr, sizeof(addr), "unix:%s/rpc.sock", dir);
        struct event_base *base = event_base_new();
        sp_rpc_server *srv = sp_rpc_server_new(base, NULL, NULL);
        register_methods(srv, base);
        ck_assert_int_eq(sp_rpc_server_listen(srv, addr, NULL), 0);
        ck_assert_int_eq(sp_rpc_server_port(srv), -1);
        sp_rpc_client *cli = sp_rpc_client_new(base, addr, NULL, NULL);
        result r = {0};
        ck_assert_int_eq(sp_rpc_client_call(cli, "Echo", NULL, 5000, on_result, &r, NULL), 0);
        ck_assert(run_until(base, &r.done, 5000));
        ck_assert_int_eq(r.code, SP_OK);
        result_clear(&r);
        sp_rpc_client_free(cli);
        sp_rpc_server_free(srv);
        event_base_free(base);
        sp_test_tmpdir_remove(dir);
}
END_TEST

START_TEST(addresses_are_checked)
{
        struct event_base *base = event_base_new();
        const char *bad[] = {"", "nohost", "1.2.3.4:", "1.2.3.4:70000", "::1:80", "[::1:80", "a b:1", "unix:"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_ptr_null(sp_rpc_client_new(base, bad[i], NULL, &e));
                ck_assert_int_eq(e->code, SP_E_INVALID);
        }
        sp_rpc_client *c = sp_rpc_client_new(base, "[::1]:7000", NULL, NULL);
        ck_assert_ptr_nonnull(c);
        sp_rpc_client_free(c);
        sp_rpc_server *srv = sp_rpc_server_new(base, NULL, NULL);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(sp_rpc_server_listen(srv, "localhost:0", &e), 0);
        sp_error_freep(&e);
        sp_rpc_method m = {.name = "a/b", .handler = echo};
        ck_assert_int_eq(sp_rpc_server_register(srv, &m, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        m.name = "Ok";
        ck_assert_int_eq(sp_rpc_server_register(srv, &m, NULL), 0);
        ck_assert_int_eq(sp_rpc_server_register(srv, &m, &e), -SP_E_CONFLICT);
        sp_rpc_server_free(srv);
        event_base_free(base);
}
END_TEST

/* A name that does not resolve: libevent reports it inside the connect call, before the
 * client's connection is set up; the call fails cleanly (it used to read a freed connection).
 * In a network namespace of its own with no interface up, so that the lookup leaves nothing. */
START_TEST(a_name_that_does_not_resolve)
{
        if (unshare(CLONE_NEWNET) < 0) {
                fprintf(stderr, "skipped a_name_that_does_not_resolve: needs root (a network namespace): %s\n",
                        strerror(errno));
                return;
        }
        _cleanup_json_ json_object *req = obj_int("x", 1);
        for (int i = 0; i < 3; i++) {
                _cleanup_error_ sp_error *e = NULL;
                json_object *none = NULL;
                ck_assert_int_lt(sp_rpc_call_sync("nowhere.invalid:7000", NULL, "Echo", req, 5000, &none, &e), 0);
                ck_assert_ptr_null(none);
                ck_assert_msg(e->code == SP_E_UNAVAILABLE || e->code == SP_E_TIMEOUT, "%s", e->message);
        }
}
END_TEST

/* ---- the blocking helper, against a server on its own thread ------------------ */

typedef struct server_thread {
        struct event_base *base;
        sp_rpc_server *srv;
        int stop[2];
        pthread_t thread;
} server_thread;

static void stop_cb(evutil_socket_t fd, short what, void *arg)
{
        event_base_loopbreak(arg);
}

static void *server_main(void *arg)
{
        server_thread *st = arg;
        event_base_dispatch(st->base);
        return NULL;
}

START_TEST(sync_call)
{
        server_thread st;
        st.base = event_base_new();
        st.srv = sp_rpc_server_new(st.base, NULL, NULL);
        register_methods(st.srv, st.base);
        ck_assert_int_eq(sp_rpc_server_listen(st.srv, "127.0.0.1:0", NULL), 0);
        ck_assert_int_eq(pipe(st.stop), 0);
        struct event *stop = event_new(st.base, st.stop[0], EV_READ, stop_cb, st.base);
        event_add(stop, NULL);
        char addr[64];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", sp_rpc_server_port(st.srv));
        ck_assert_int_eq(pthread_create(&st.thread, NULL, server_main, &st), 0);

        _cleanup_json_ json_object *req = obj_int("x", 7);
        _cleanup_json_ json_object *resp = NULL;
        ck_assert_int_eq(sp_rpc_call_sync(addr, NULL, "Echo", req, 5000, &resp, NULL), 0);
        json_object *echoed = NULL;
        ck_assert(json_object_object_get_ex(resp, "echo", &echoed));
        ck_assert(json_object_equal(echoed, req));

        _cleanup_error_ sp_error *e = NULL;
        json_object *none = NULL;
        ck_assert_int_eq(sp_rpc_call_sync(addr, NULL, "Fail", req, 5000, &none, &e), -SP_E_CONFLICT);
        ck_assert_ptr_null(none);
        ck_assert_ptr_nonnull(strstr(e->message, "already exists"));
        sp_error_freep(&e);
        ck_assert_int_eq(sp_rpc_call_sync(addr, NULL, "Hold", req, 100, &none, &e), -SP_E_TIMEOUT);
        sp_error_freep(&e);

        ck_assert_int_eq(write(st.stop[1], "x", 1), 1);
        pthread_join(st.thread, NULL);
        event_free(stop);
        sp_rpc_server_free(st.srv);
        event_base_free(st.base);
        close(st.stop[0]);
        close(st.stop[1]);

        /* Nothing listening any more. */
        ck_assert_int_eq(sp_rpc_call_sync(addr, NULL, "Echo", req, 5000, &none, &e), -SP_E_UNAVAILABLE);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("rpc");
        TCase *tc = tcase_create("unary");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, unary_round_trip);
        tcase_add_test(tc, unary_many_concurrent_one_connection);
        tcase_add_test(tc, unary_errors_have_the_shape);
        tcase_add_test(tc, unary_async_reply);
        tcase_add_test(tc, unary_deadline_both_sides);
        tcase_add_test(tc, unary_queued_calls_time_out_cleanly);
        tcase_add_test(tc, unary_reconnect_after_server_restart);
        tcase_add_test(tc, unary_goaway_drains_then_reconnects);
        tcase_add_test(tc, unary_unix_socket);
        tcase_add_test(tc, addresses_are_checked);
        tcase_add_test(tc, sync_call);
        tcase_add_test(tc, a_name_that_does_not_resolve);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
