/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: streamed request bodies with pause/resume, streamed responses
 * with backpressure (bytes copied, or buffers moved holding them by
 * reference), and server-sent events (format, backpressure against a
 * client that stops reading, disconnects). */
#include <event2/buffer.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include "space/cleanup.h"
#include "test_http_util.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++) {
                h ^= b[i];
                h *= 1099511628211ull;
        }
        return h;
}
#define FNV_INIT 14695981039346656037ull

static unsigned char pattern(uint64_t i)
{
        return (unsigned char)((i * 7 + (i >> 12)) % 251);
}

/* ---- streamed uploads ---- */

typedef struct upload {
        struct event_base *base;
        uint64_t bytes, hash;
        uint64_t since_pause;
        int pauses, resumes;
        bool paused; /* set while we asked the server to pause */
        int delivered_while_paused;
        size_t max_piece;
} upload;

static upload up;

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
        sp_http_request *req = arg;
        up.paused = false;
        up.resumes++;
        sp_http_request_resume_body(req);
        sp_http_request_unref(req);
}

static void upload_body(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        if (len == 0) {
                char out[128];
                snprintf(out, sizeof(out), "{\"bytes\":%llu,\"hash\":\"%016llx\"}", (unsigned long long)up.bytes,
                         (unsigned long long)up.hash);
                sp_http_reply(req, 200, "application/json", out, strlen(out));
                return;
        }
        if (up.paused)
                up.delivered_while_paused++;
        if (len > up.max_piece)
                up.max_piece = len;
        up.bytes += len;
        up.hash = fnv(up.hash, data, len);
        up.since_pause += len;
        if (up.since_pause >= 256 * 1024) {
                /* pause, and resume from a timer a moment later */
                up.since_pause = 0;
                up.paused = true;
                up.pauses++;
                sp_http_request_pause_body(req);
                /* the first pause outlasts the body timeout, which must not run meanwhile */
                struct timeval tv = {0, up.pauses == 1 ? 400000 : 2000};
                event_base_once(up.base, -1, EV_TIMEOUT, resume_cb, sp_http_request_ref(req), &tv);
        }
}

static void upload_handler(sp_http_request *req, void *userdata)
{
        up.bytes = 0;
        up.hash = FNV_INIT;
        ck_assert_int_eq(sp_http_request_read_body(req, upload_body, NULL, NULL), 0);
        /* a second reader is refused */
        ck_assert_int_eq(sp_http_request_read_body(req, upload_body, NULL, NULL), -SP_E_INVALID);
}

static void send_upload(int fd, bool chunked, size_t total, uint64_t *ret_hash)
{
        unsigned char buf[65536];
        uint64_t h = FNV_INIT;
        char head[256];
        if (chunked)
                snprintf(head, sizeof(head), "PUT /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
        else
                snprintf(head, sizeof(head), "PUT /upload HTTP/1.1\r\nHost: h\r\nContent-Length: %zu\r\n\r\n", total);
        cli_send(fd, head);
        for (size_t off = 0; off < total;) {
                size_t n = total - off < sizeof(buf) ? total - off : sizeof(buf) - 1000 + off % 1000;
                if (n > total - off)
                        n = total - off;
                for (size_t i = 0; i < n; i++)
                        buf[i] = pattern(off + i);
                h = fnv(h, buf, n);
                if (chunked) {
                        char line[32];
                        snprintf(line, sizeof(line), "%zx\r\n", n);
                        cli_send(fd, line);
                }
                cli_send_n(fd, buf, n);
                if (chunked)
                        cli_send(fd, "\r\n");
                off += n;
        }
        if (chunked)
                cli_send(fd, "0\r\n\r\n");
        *ret_hash = h;
}

START_TEST(streamed_upload_pause_resume)
{
        tserver ts;
        sp_http_config cfg = {.body_timeout_ms = 200};
        tserver_new(&ts, &cfg);
        memset(&up, 0, sizeof(up));
        up.base = ts.base;
        sp_http_route_opts opts = {.max_body = 64u * 1024 * 1024, .flags = SP_HTTP_ROUTE_STREAM_BODY};
        ck_assert_int_eq(sp_http_route_ex(ts.srv, "PUT", "/upload", &opts, upload_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);

        for (int chunked = 0; chunked < 2; chunked++) {
                size_t total = chunked ? 3u * 1024 * 1024 + 17 : 5u * 1024 * 1024 + 3;
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                uint64_t h;
                send_upload(fd, chunked, total, &h);
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 200);
                char expect[128];
                snprintf(expect, sizeof(expect), "{\"bytes\":%zu,\"hash\":\"%016llx\"}", total, (unsigned long long)h);
                ck_assert_str_eq(r.body.data, expect);
                close(fd);
        }
        /* it did pause and resume, and nothing arrived while paused */
        ck_assert_int_gt(up.pauses, 10);
        ck_assert_int_eq(up.delivered_while_paused, 0);
        /* pieces are bounded by the read buffer, not by the body */
        ck_assert_uint_le(up.max_piece, SP_HTTP_DEFAULT_MAX_HEAD_BYTES + 64 * 1024);
        tserver_stop(&ts);
}
END_TEST

static tsignal stall_closed;

static void stall_body(sp_http_request *req, const void *data, size_t len, void *userdata) {}

static void stall_close(sp_http_request *req, void *userdata)
{
        tsignal_post(&stall_closed);
        sp_http_request_unref(req);
}

static void stall_handler(sp_http_request *req, void *userdata)
{
        sp_http_request_on_close(sp_http_request_ref(req), stall_close, NULL);
        sp_http_request_read_body(req, stall_body, NULL, NULL);
}

START_TEST(streamed_upload_stall_times_out)
{
        tserver ts;
        sp_http_config cfg = {.body_timeout_ms = 200};
        tserver_new(&ts, &cfg);
        tsignal_init(&stall_closed);
        sp_http_route_opts opts = {.flags = SP_HTTP_ROUTE_STREAM_BODY};
        ck_assert_int_eq(sp_http_route_ex(ts.srv, "PUT", "/upload", &opts, stall_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);
        int fd = cli_connect(ts.port);
        cli_send(fd, "PUT /upload HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\nonly a part");
        /* the handler hears that the body will not come; the client is dropped */
        ck_assert(tsignal_wait(&stall_closed, 1));
        ck_assert(cli_wait_closed(fd));
        close(fd);
        tserver_stop(&ts);
}
END_TEST

/* ---- streamed responses ---- */

#define BIG_TOTAL (8u * 1024 * 1024)

typedef struct producer {
        uint64_t sent, total;
        int would_block, writable;
        size_t max_pending;
        int bad_write;
        bool by_ref; /* through sp_http_stream_write_buffer(), bytes added by reference */
        int released; /* referenced blocks freed */
} producer;

static producer prod;

static void release_ref(const void *data, size_t len, void *extra)
{
        prod.released++;
        free((void *)data);
}

/* One write of n bytes, as bytes or as a buffer holding them by reference. */
static int write_piece(sp_http_request *req, const unsigned char *buf, size_t n)
{
        if (!prod.by_ref)
                return sp_http_stream_write(req, buf, n);
        struct evbuffer *b = evbuffer_new();
        void *copy = malloc(n);
        memcpy(copy, buf, n);
        evbuffer_add_reference(b, copy, n, release_ref, NULL);
        int r = sp_http_stream_write_buffer(req, b);
        if (evbuffer_get_length(b) != (r == 0 ? 0 : n))
                prod.bad_write = -1000; /* moved in full, or left as it was */
        evbuffer_free(b);
        return r;
}

static void produce(sp_http_request *req)
{
        unsigned char buf[65536];
        while (prod.sent < prod.total) {
                size_t n = prod.total - prod.sent < sizeof(buf) ? prod.total - prod.sent : sizeof(buf);
                for (size_t i = 0; i < n; i++)
                        buf[i] = pattern(prod.sent + i);
                int r = write_piece(req, buf, n);
                size_t pending = sp_http_request_output_pending(req);
                if (pending > prod.max_pending)
                        prod.max_pending = pending;
                if (r == SP_HTTP_WOULD_BLOCK) {
                        prod.would_block++;
                        return; /* the writable callback continues */
                }
                if (r < 0) {
                        prod.bad_write = r;
                        return;
                }
                prod.sent += n;
        }
        sp_http_stream_end(req);
        sp_http_request_unref(req);
}

static void on_writable(sp_http_request *req, void *userdata)
{
        prod.writable++;
        produce(req);
}

static void big_handler(sp_http_request *req, void *userdata)
{
        memset(&prod, 0, sizeof(prod));
        prod.total = BIG_TOTAL;
        prod.by_ref = sp_http_request_query(req, "ref") != NULL;
        bool chunked = sp_http_request_query(req, "chunked") != NULL;
        ck_assert_int_eq(sp_http_stream_start(req, 200, "application/octet-stream", chunked ? -1 : (int64_t)BIG_TOTAL),
                         0);
        sp_http_stream_on_writable(req, on_writable, NULL);
        sp_http_request_ref(req);
        produce(req);
}

static void check_big(const sp_buf *body)
{
        ck_assert_uint_eq(body->len, BIG_TOTAL);
        for (size_t i = 0; i < body->len; i++)
                if ((unsigned char)body->data[i] != pattern(i))
                        ck_abort_msg("byte %zu differs", i);
}

START_TEST(streamed_response_backpressure)
{
        tserver ts;
        tserver_new(&ts, NULL);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/big", big_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);
        const char *reqs[] = {"GET /big HTTP/1.1\r\nHost: h\r\n\r\n", "GET /big?chunked HTTP/1.1\r\nHost: h\r\n\r\n",
                              "GET /big?chunked&ref HTTP/1.1\r\nHost: h\r\n\r\n"};
        int fd = cli_connect_buf(ts.port, 32 * 1024);
        _cleanup_creader_ creader rd = {.fd = fd};
        for (int i = 0; i < 3; i++) {
                cli_send(fd, reqs[i]);
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 200);
                char v[32];
                ck_assert_int_eq(cresponse_header(&r, "transfer-encoding", v, sizeof(v)), i >= 1);
                check_big(&r.body);
                ck_assert_int_eq(prod.bad_write, 0);
                ck_assert_int_gt(prod.would_block, 0);
                ck_assert_int_eq(prod.writable, prod.would_block);
                /* queued output never went much past the high watermark */
                ck_assert_uint_le(prod.max_pending, 256 * 1024 + 65536 + 64);
        }
        close(fd);
        tserver_stop(&ts);
        /* The server gone, every block the last response handed over by reference was freed: the ones sent and
         * the ones refused (would-block). */
        ck_assert_int_eq(prod.released, (int)(BIG_TOTAL / 65536) + prod.would_block);
}
END_TEST

/* ---- server-sent events ---- */

static void events_handler(sp_http_request *req, void *userdata)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_sse *sse = sp_sse_start(req, &e);
        ck_assert_ptr_nonnull(sse);
        ck_assert_ptr_eq(sp_sse_request(sse), req);
        /* a second start is refused */
        _cleanup_error_ sp_error *e2 = NULL;
        ck_assert_ptr_null(sp_sse_start(req, &e2));
        ck_assert_int_eq(e2->code, SP_E_CONFLICT);
        ck_assert_int_eq(sp_sse_retry(sse, 1500), 0);
        ck_assert_int_eq(sp_sse_comment(sse, "ping"), 0);
        ck_assert_int_eq(sp_sse_send(sse, "1", "stdout", "hello", 5), 0);
        const char *multi = "line1\nline2\r\nline3\rline4";
        ck_assert_int_eq(sp_sse_send(sse, "2", NULL, multi, strlen(multi)), 0);
        ck_assert_int_eq(sp_sse_send(sse, NULL, "exit", "{\"code\":0}\n", 11), 0);
        ck_assert_int_eq(sp_sse_send(sse, NULL, NULL, NULL, 0), 0);
        ck_assert_int_eq(sp_sse_send(sse, "3\n", NULL, "x", 1), -SP_E_INVALID);
        ck_assert_int_eq(sp_sse_send(sse, NULL, "a\rb", "x", 1), -SP_E_INVALID);
        ck_assert_int_eq(sp_sse_comment(sse, "two\nlines"), -SP_E_INVALID);
        sp_sse_free(sse);
}

START_TEST(sse_format)
{
        tserver ts;
        tserver_new(&ts, NULL);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/events", events_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, "GET /events HTTP/1.1\r\nHost: h\r\n\r\n");
        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_response(&rd, &r));
        ck_assert_int_eq(r.status, 200);
        char v[64];
        ck_assert(cresponse_header(&r, "content-type", v, sizeof(v)));
        ck_assert_str_eq(v, "text/event-stream");
        ck_assert(cresponse_header(&r, "cache-control", v, sizeof(v)));
        ck_assert_str_eq(v, "no-store");
        ck_assert(cresponse_header(&r, "transfer-encoding", v, sizeof(v)));
        ck_assert_str_eq(v, "chunked");
        ck_assert_str_eq(r.body.data, "retry: 1500\n\n"
                                      ": ping\n\n"
                                      "id: 1\nevent: stdout\ndata: hello\n\n"
                                      "id: 2\ndata: line1\ndata: line2\ndata: line3\ndata: line4\n\n"
                                      "event: exit\ndata: {\"code\":0}\ndata: \n\n"
                                      "data: \n\n");
        /* the stream ended cleanly: the connection serves the next request */
        cli_send(fd, "GET /events HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
        _cleanup_cresponse_ cresponse r2 = {0};
        ck_assert(creader_response(&rd, &r2));
        ck_assert_int_eq(r2.status, 200);
        close(fd);
        tserver_stop(&ts);
}
END_TEST

#define SSE_EVENTS 6000
#define SSE_DATA 4000

typedef struct sse_prod {
        sp_sse *sse;
        int next;
        int would_block, writable, closed;
        size_t max_pending;
        int error;
        tsignal blocked, finished, gone;
} sse_prod;

static sse_prod sp;

static void sse_produce(sp_sse *sse)
{
        char data[SSE_DATA];
        while (sp.next < SSE_EVENTS) {
                char id[16];
                snprintf(id, sizeof(id), "%d", sp.next);
                for (size_t i = 0; i < sizeof(data); i++)
                        data[i] = (char)('a' + (sp.next + i) % 26);
                data[100] = '\n'; /* a two-line event */
                int r = sp_sse_send(sse, id, "out", data, sizeof(data));
                size_t pending = sp_http_request_output_pending(sp_sse_request(sse));
                if (pending > sp.max_pending)
                        sp.max_pending = pending;
                if (r == SP_HTTP_WOULD_BLOCK) {
                        sp.would_block++;
                        tsignal_post(&sp.blocked);
                        return;
                }
                if (r < 0) {
                        sp.error = r;
                        return;
                }
                sp.next++;
        }
        sp_sse_free(sse);
        sp.sse = NULL;
        tsignal_post(&sp.finished);
}

static void sse_writable(sp_sse *sse, void *userdata)
{
        sp.writable++;
        sse_produce(sse);
}

static void sse_closed(sp_sse *sse, void *userdata)
{
        sp.closed++;
        /* sending now is a no-op; freeing from the close callback is allowed */
        sp.error = sp_sse_send(sse, NULL, NULL, "x", 1);
        sp_sse_free(sse);
        sp.sse = NULL;
        tsignal_post(&sp.gone);
}

static void stream_handler(sp_http_request *req, void *userdata)
{
        sp.sse = sp_sse_start(req, NULL);
        ck_assert_ptr_nonnull(sp.sse);
        sp_sse_on_writable(sp.sse, sse_writable, NULL);
        sp_sse_on_close(sp.sse, sse_closed, NULL);
        if (userdata)
                sse_produce(sp.sse);
        else
                sp_sse_comment(sp.sse, "hello");
}

START_TEST(sse_backpressure_slow_client)
{
        tserver ts;
        tserver_new(&ts, NULL);
        memset(&sp, 0, sizeof(sp));
        tsignal_init(&sp.blocked);
        tsignal_init(&sp.finished);
        tsignal_init(&sp.gone);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/stream", stream_handler, "produce", NULL), 0);
        tserver_run(&ts, NULL);

        int fd = cli_connect_buf(ts.port, 64 * 1024);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, "GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
        /* the client reads nothing until the producer has been told to wait */
        ck_assert(tsignal_wait(&sp.blocked, 1));
        int sent_when_blocked = sp.next;
        ck_assert_int_lt(sent_when_blocked, SSE_EVENTS);

        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_response(&rd, &r));
        ck_assert(tsignal_wait(&sp.finished, 1));
        ck_assert_int_eq(sp.error, 0);
        ck_assert_int_eq(sp.closed, 0);
        ck_assert_int_ge(sp.would_block, 1);
        ck_assert_int_eq(sp.writable, sp.would_block);
        /* the queue stayed bounded: high watermark plus one event */
        ck_assert_uint_le(sp.max_pending, 256 * 1024 + SSE_DATA + 64);

        /* every event, in order, intact (compared without an assertion per byte) */
        _cleanup_buf_ sp_buf expect = SP_BUF_INIT;
        for (int i = 0; i < SSE_EVENTS; i++) {
                sp_buf_appendf(&expect, NULL, "id: %d\nevent: out\ndata: ", i);
                for (int k = 0; k < SSE_DATA; k++) {
                        char c = k == 100 ? '\n' : (char)('a' + (i + k) % 26);
                        sp_buf_append(&expect, &c, 1, NULL);
                        if (k == 100)
                                sp_buf_append_str(&expect, "data: ", NULL);
                }
                sp_buf_append_str(&expect, "\n\n", NULL);
        }
        ck_assert_uint_eq(r.body.len, expect.len);
        size_t first_diff = 0;
        while (first_diff < expect.len && r.body.data[first_diff] == expect.data[first_diff])
                first_diff++;
        ck_assert_msg(first_diff == expect.len, "streams differ at byte %zu", first_diff);
        close(fd);
        tserver_stop(&ts);
}
END_TEST

START_TEST(sse_client_disconnect)
{
        tserver ts;
        tserver_new(&ts, NULL);
        memset(&sp, 0, sizeof(sp));
        tsignal_init(&sp.blocked);
        tsignal_init(&sp.finished);
        tsignal_init(&sp.gone);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/stream", stream_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, "GET /stream HTTP/1.1\r\nHost: h\r\n\r\n");
        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_head(&rd, &r));
        ck_assert_int_eq(r.status, 200);
        close(fd);
        ck_assert(tsignal_wait(&sp.gone, 1));
        ck_assert_int_eq(sp.closed, 1);
        ck_assert_int_eq(sp.error, -SP_E_UNAVAILABLE);
        ck_assert(tserver_wait_connections(&ts, 0));
        tserver_stop(&ts);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("http_stream");
        TCase *tc = tcase_create("stream");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, streamed_upload_pause_resume);
        tcase_add_test(tc, streamed_upload_stall_times_out);
        tcase_add_test(tc, streamed_response_backpressure);
        tcase_add_test(tc, sse_format);
        tcase_add_test(tc, sse_backpressure_slow_client);
        tcase_add_test(tc, sse_client_disconnect);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
