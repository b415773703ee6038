/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the blocking HTTP client against real loopback servers — the
 * project's own HTTP server on an event loop in a thread (JSON, keep-alive,
 * chunked uploads from an fd, streamed downloads, server-sent events waited
 * for with poll, IPv6, TLS with a test CA: SNI, host and address checks,
 * untrusted servers), and a scripted raw server (malformed and truncated
 * responses, interim responses, bodies until close, a kept-alive connection
 * the server drops, timeouts, a server that never accepts). Loopback only:
 * no name is looked up that would leave the host. */
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>

#include "proc.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/http_client.h"
#include "space/pki.h"
#include "space/tls.h"
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

/* A directory for the tests' files, made and removed by the runner (also
 * when a test fails). */
static char *dir;

static void suite_up(void)
{
        dir = sp_test_tmpdir("httpc");
}

static void suite_down(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* ---- the project's server: routes ---- */

static void json_handler(sp_http_request *req, void *userdata)
{
        sp_http_reply(req, 200, "application/json", "{\"ok\":true}", 11);
}

/* Echoes the request as JSON: method, body, framing and a few headers. */
static void echo_handler(sp_http_request *req, void *userdata)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        size_t blen;
        const char *body = sp_http_request_body(req, &blen);
        json_object_object_add(o, "method", json_object_new_string(sp_http_request_method(req)));
        json_object_object_add(o, "path", json_object_new_string(sp_http_request_path(req)));
        json_object_object_add(o, "body", json_object_new_string_len(body, (int)blen));
        const char *names[] = {"host", "x-thing", "user-agent", "content-length", "transfer-encoding"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(names); i++) {
                const char *v = sp_http_request_header(req, names[i]);
                if (v)
                        json_object_object_add(o, names[i], json_object_new_string(v));
        }
        sp_http_reply_json(req, 200, o);
}

typedef struct upload {
        uint64_t bytes, hash;
} upload;
static upload up;

static void upload_body(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        if (len == 0) {
                char out[128];
                snprintf(out, sizeof(out), "{\"bytes\":%llu,\"hash\":\"%016llx\"}", (unsigned long long)up.bytes,
                         (unsigned long long)up.hash);
                sp_http_reply(req, 200, "application/json", out, strlen(out));
                return;
        }
        up.bytes += len;
        up.hash = fnv(up.hash, data, len);
}

static void upload_handler(sp_http_request *req, void *userdata)
{
        up.bytes = 0;
        up.hash = FNV_INIT;
        ck_assert_int_eq(sp_http_request_read_body(req, upload_body, NULL, NULL), 0);
}

#define BIG_TOTAL (2u * 1024 * 1024)

typedef struct producer {
        uint64_t sent;
        sp_http_request *held; /* our reference while the response is being produced */
} producer;
static producer prod;

/* Drops our reference once: at the end of the response, or when the client left. */
static void release(void)
{
        sp_http_request *req = prod.held;
        prod.held = NULL;
        sp_http_request_unref(req);
}

static void produce(sp_http_request *req)
{
        unsigned char buf[65536];
        while (prod.sent < BIG_TOTAL) {
                size_t n = BIG_TOTAL - prod.sent < sizeof(buf) ? BIG_TOTAL - prod.sent : sizeof(buf);
                for (size_t i = 0; i < n; i++)
                        buf[i] = pattern(prod.sent + i);
                int r = sp_http_stream_write(req, buf, n);
                if (r == SP_HTTP_WOULD_BLOCK)
                        return; /* the writable callback continues */
                if (r < 0) {
                        release();
                        return;
                }
                prod.sent += n;
        }
        sp_http_stream_end(req);
        release();
}

static void on_writable(sp_http_request *req, void *userdata)
{
        produce(req);
}

static void on_gone(sp_http_request *req, void *userdata)
{
        release();
}

static void big_handler(sp_http_request *req, void *userdata)
{
        prod.sent = 0;
        bool chunked = sp_http_request_query(req, "chunked") != NULL;
        ck_assert_int_eq(sp_http_stream_start(req, 200, "application/octet-stream", chunked ? -1 : (int64_t)BIG_TOTAL),
                         0);
        sp_http_stream_on_writable(req, on_writable, NULL);
        sp_http_request_on_close(req, on_gone, NULL);
        prod.held = sp_http_request_ref(req);
        produce(req);
}

static sp_sse *live_sse;

static void events_handler(sp_http_request *req, void *userdata)
{
        live_sse = sp_sse_start(req, NULL);
        ck_assert_ptr_nonnull(live_sse);
        ck_assert_int_eq(sp_sse_send(live_sse, "1", "stdout", "one", 3), 0);
}

static void sse_send_two(void *arg)
{
        ck_assert_int_eq(sp_sse_send(live_sse, "2", "stdout", "two", 3), 0);
}

static void sse_end(void *arg)
{
        live_sse = sp_sse_free(live_sse);
}

static void add_routes(sp_http_server *srv)
{
        ck_assert_int_eq(sp_http_route(srv, "GET", "/json", json_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "POST", "/echo", echo_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/echo", echo_handler, NULL, NULL), 0);
        sp_http_route_opts big = {.max_body = 64 * 1024 * 1024, .flags = SP_HTTP_ROUTE_STREAM_BODY};
        ck_assert_int_eq(sp_http_route_ex(srv, "PUT", "/upload", &big, upload_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/big", big_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/events", events_handler, NULL, NULL), 0);
}

static void start(tserver *ts, const char *address)
{
        tserver_new(ts, NULL);
        add_routes(ts->srv);
        tserver_run(ts, address);
}

/* ---- client helpers ---- */

static sp_http_client *client_cfg(const char *url, const sp_http_client_config *cfg)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_http_client *c = sp_http_client_new(url, cfg, &e);
        ck_assert_msg(c, "%s: %s", url, e ? e->message : "?");
        return c;
}

static sp_http_client *client(int port)
{
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
        return client_cfg(url, NULL);
}

/* Runs a request with a memory body; returns the status, body in *out. */
static int call(sp_http_client *c, const char *method, const char *target, const char *const *headers, const char *body,
                sp_buf *out, sp_error **err)
{
        sp_http_client_request req = {.method = method,
                                      .target = target,
                                      .headers = headers,
                                      .body = body,
                                      .body_len = body ? strlen(body) : 0};
        sp_buf_clear(out);
        return sp_http_client_do(c, &req, 1024 * 1024, out, err);
}

static int call_ok(sp_http_client *c, const char *method, const char *target, const char *body, sp_buf *out)
{
        _cleanup_error_ sp_error *e = NULL;
        int status = call(c, method, target, NULL, body, out, &e);
        ck_assert_msg(status > 0, "%s %s: %s", method, target, e ? e->message : "?");
        return status;
}

static json_object *parse_json(const sp_buf *b)
{
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(b->data ? b->data : "", b->len, &o, NULL) == 0, "not JSON: %s", b->data);
        return o;
}

static const char *jstr(json_object *o, const char *key)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

/* ---- the raw server: a scripted peer, one connection at a time ---- */

typedef void (*raw_fn)(int fd, int conn, void *ud);

typedef struct rawsrv {
        int lfd;
        int port;
        pthread_t thread;
        raw_fn fn;
        void *ud;
        atomic_int conns;
        atomic_int requests;
        atomic_bool stop;
} rawsrv;

static void *raw_loop(void *arg)
{
        rawsrv *rs = arg;
        while (!atomic_load(&rs->stop)) {
                struct pollfd p = {.fd = rs->lfd, .events = POLLIN};
                if (poll(&p, 1, 50) <= 0)
                        continue;
                int fd = accept4(rs->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                cli_timeouts(fd, TEST_TIMEOUT_MS);
                int n = atomic_fetch_add(&rs->conns, 1);
                rs->fn(fd, n, rs->ud);
                close(fd);
        }
        return NULL;
}

static void raw_start(rawsrv *rs, raw_fn fn, void *ud)
{
        memset(rs, 0, sizeof(*rs));
        rs->fn = fn;
        rs->ud = ud;
        rs->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(rs->lfd, 0);
        struct sockaddr_in sin = {.sin_family = AF_INET};
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(bind(rs->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
        ck_assert_int_eq(listen(rs->lfd, 16), 0);
        socklen_t sl = sizeof(sin);
        getsockname(rs->lfd, (struct sockaddr *)&sin, &sl);
        rs->port = ntohs(sin.sin_port);
        ck_assert_int_eq(pthread_create(&rs->thread, NULL, raw_loop, rs), 0);
}

static void raw_stop(rawsrv *rs)
{
        atomic_store(&rs->stop, true);
        pthread_join(rs->thread, NULL);
        close(rs->lfd);
}

/* Reads one request (head, and a Content-Length body) into out; false at EOF. */
static bool raw_read_request(rawsrv *rs, int fd, sp_buf *out)
{
        sp_buf_clear(out);
        char c;
        while (!out->data || !strstr(out->data, "\r\n\r\n")) {
                if (recv(fd, &c, 1, 0) != 1)
                        return false;
                sp_buf_append(out, &c, 1, NULL);
        }
        const char *cl = strcasestr(out->data, "content-length:");
        for (size_t n = cl ? strtoul(cl + 15, NULL, 10) : 0; n > 0; n--) {
                if (recv(fd, &c, 1, 0) != 1)
                        return false;
                sp_buf_append(out, &c, 1, NULL);
        }
        atomic_fetch_add(&rs->requests, 1);
        return true;
}

static rawsrv *current_raw;

/* Answers each request with the canned bytes in ud, then closes. */
static void raw_canned(int fd, int conn, void *ud)
{
        _cleanup_buf_ sp_buf req = SP_BUF_INIT;
        if (raw_read_request(current_raw, fd, &req))
                cli_send(fd, ud);
}

/* Reads a request and never answers; waits for the client to go. */
static void raw_silent(int fd, int conn, void *ud)
{
        _cleanup_buf_ sp_buf req = SP_BUF_INIT;
        raw_read_request(current_raw, fd, &req);
        cli_wait_closed(fd);
}

/* Answers the first request of each connection with keep-alive, then reads
 * the second and closes without a word (a server dropping an idle
 * connection just as the client reuses it). Records the idempotency keys. */
static char seen_keys[8][64];
static void raw_drop_second(int fd, int conn, void *ud)
{
        _cleanup_buf_ sp_buf req = SP_BUF_INIT;
        for (int i = 0; raw_read_request(current_raw, fd, &req); i++) {
                const char *k = strcasestr(req.data, "idempotency-key: ");
                int n = atomic_load(&current_raw->requests) - 1;
                if (k && n < 8)
                        snprintf(seen_keys[n], sizeof(seen_keys[n]), "%.*s", (int)strcspn(k + 17, "\r"), k + 17);
                if (i > 0)
                        return;
                cli_send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }
}

static void raw_begin(rawsrv *rs, raw_fn fn, void *ud)
{
        current_raw = rs;
        raw_start(rs, fn, ud);
}

/* ---- tests ---- */

START_TEST(urls)
{
        const char *bad[] = {"ftp://h",      "http://",        "http://a b",   "http://[::1",      "http://[zz]:1",
                             "http://h:0",   "http://h:99999", "http://h:12a", "http://u@h",       "http://h/p?q=1",
                             "http://h/p#f", "h:80",           "http://h:",    "http://[::1]x:80", "https://h/a b/c"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(sp_http_client_new(bad[i], NULL, &e) == NULL, "accepted %s", bad[i]);
                ck_assert_int_eq(e->code, SP_E_INVALID);
        }
        const char *good[] = {"http://h", "HTTP://h.example:8080/", "http://[::1]:7070/space/v", "https://10.0.0.1"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(good); i++)
                sp_http_client_free(client_cfg(good[i], NULL));
        /* A CA file that is not there is refused at once. */
        _cleanup_error_ sp_error *e = NULL;
        sp_http_client_config cfg = {.ca_file = "/nonexistent/ca.pem"};
        ck_assert_ptr_null(sp_http_client_new("https://h", &cfg, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert_ptr_nonnull(strstr(e->message, "/nonexistent/ca.pem"));
}
END_TEST

START_TEST(requests_keep_alive_and_headers)
{
        tserver ts;
        start(&ts, NULL);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/", ts.port);
        sp_http_client_config cfg = {.user_agent = "spacectl/test"};
        _cleanup_http_client_ sp_http_client *c = client_cfg(url, &cfg);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        for (int i = 0; i < 3; i++) {
                ck_assert_int_eq(call_ok(c, "GET", "/json", NULL, &body), 200);
                ck_assert_str_eq(body.data, "{\"ok\":true}");
                ck_assert_str_eq(sp_http_client_header(c, "content-type"), "application/json");
        }
        /* One connection served them all. */
        ck_assert(tserver_wait_connections(&ts, 1));
        const char *headers[] = {"X-Thing: a value", "Idempotency-Key: k1", NULL};
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(call(c, "POST", "/echo", headers, "{\"x\":1}", &body, &e), 200);
        _cleanup_json_ json_object *o = parse_json(&body);
        ck_assert_str_eq(jstr(o, "method"), "POST");
        ck_assert_str_eq(jstr(o, "body"), "{\"x\":1}");
        ck_assert_str_eq(jstr(o, "x-thing"), "a value");
        ck_assert_str_eq(jstr(o, "user-agent"), "spacectl/test");
        ck_assert_str_eq(jstr(o, "content-length"), "7");
        char host[32];
        snprintf(host, sizeof(host), "127.0.0.1:%d", ts.port);
        ck_assert_str_eq(jstr(o, "host"), host);
        /* A POST without a body says so. */
        ck_assert_int_eq(call_ok(c, "POST", "/echo", NULL, &body), 200);
        _cleanup_json_ json_object *o2 = parse_json(&body);
        ck_assert_str_eq(jstr(o2, "content-length"), "0");
        /* Error statuses are answers, not errors. */
        ck_assert_int_eq(call_ok(c, "GET", "/missing", NULL, &body), 404);
        ck_assert_ptr_nonnull(strstr(body.data, "not_found"));
        /* (The server closes after an answer it gives before reading the body; the next request reconnects.) */
        ck_assert_int_eq(call_ok(c, "DELETE", "/json", NULL, &body), 405);
        /* Bad requests never reach the wire. */
        const char *bad_headers[][2] = {{"Host: x", NULL},
                                        {"Content-Length: 1", NULL},
                                        {"No-Colon", NULL},
                                        {"Bad\r\nSplit: x", NULL},
                                        {"A: b\r\n", NULL}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_headers); i++) {
                sp_error_free(e);
                e = NULL;
                ck_assert_int_eq(call(c, "GET", "/json", bad_headers[i], NULL, &body, &e), -SP_E_INVALID);
        }
        const char *bad_targets[] = {"json", "/a b", "/a\r\nX: y", "/#frag"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_targets); i++) {
                sp_error_free(e);
                e = NULL;
                ck_assert_int_eq(call(c, "GET", bad_targets[i], NULL, NULL, &body, &e), -SP_E_INVALID);
        }
        sp_error_free(e);
        e = NULL;
        ck_assert_int_eq(call(c, "GE T", "/json", NULL, NULL, &body, &e), -SP_E_INVALID);
        /* The connection is still good. */
        ck_assert_int_eq(call_ok(c, "GET", "/json", NULL, &body), 200);
        /* A path prefix goes before every target. */
        snprintf(url, sizeof(url), "http://127.0.0.1:%d/pre//", ts.port);
        _cleanup_http_client_ sp_http_client *pc = client_cfg(url, NULL);
        ck_assert_int_eq(call_ok(pc, "GET", "/echo", NULL, &body), 404);
        sp_http_client_close(c);
        tserver_stop(&ts);
}
END_TEST

START_TEST(streamed_upload_from_fd)
{
        tserver ts;
        start(&ts, NULL);
        _cleanup_http_client_ sp_http_client *c = client(ts.port);
        /* A 3 MiB file, streamed chunked from its descriptor. */
        char path[512];
        snprintf(path, sizeof(path), "%s/upload", dir);
        size_t total = 3 * 1024 * 1024 + 17;
        _cleanup_free_ unsigned char *data = malloc(total);
        for (size_t i = 0; i < total; i++)
                data[i] = pattern(i);
        ck_assert_int_eq(sp_file_write_atomic(path, data, total, 0600, NULL), 0);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        sp_http_client_request req = {
                .method = "PUT", .target = "/upload", .body_source = sp_http_body_source_fd, .body_userdata = &fd};
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_http_client_do(c, &req, 4096, &body, &e), 200);
        close(fd);
        _cleanup_json_ json_object *o = parse_json(&body);
        json_object *b = NULL;
        ck_assert(json_object_object_get_ex(o, "bytes", &b));
        ck_assert_int_eq(json_object_get_int64(b), (int64_t)total);
        char want[32];
        snprintf(want, sizeof(want), "%016llx", (unsigned long long)fnv(FNV_INIT, data, total));
        ck_assert_str_eq(jstr(o, "hash"), want);
        /* A source that fails abandons the request and closes the connection. */
        int bad = -1;
        sp_http_client_request breq = {
                .method = "PUT", .target = "/upload", .body_source = sp_http_body_source_fd, .body_userdata = &bad};
        ck_assert_int_eq(sp_http_client_do(c, &breq, 4096, &body, &e), -SP_E_IO);
        ck_assert_ptr_nonnull(strstr(e->message, "request body"));
        /* Both a memory body and a source is a mistake. */
        sp_error_free(e);
        e = NULL;
        sp_http_client_request both = {.method = "PUT",
                                       .target = "/upload",
                                       .body = "x",
                                       .body_len = 1,
                                       .body_source = sp_http_body_source_fd,
                                       .body_userdata = &bad};
        ck_assert_int_eq(sp_http_client_send(c, &both, &e), -SP_E_INVALID);
        tserver_stop(&ts);
}
END_TEST

typedef struct sink_state {
        uint64_t bytes, hash;
        int calls;
        int fail_after;
} sink_state;

static int sink(const void *data, size_t len, void *userdata, sp_error **err)
{
        sink_state *s = userdata;
        s->bytes += len;
        s->hash = fnv(s->hash, data, len);
        if (s->fail_after && ++s->calls >= s->fail_after)
                return sp_error_set(err, SP_E_IO, "sink is full");
        return 0;
}

START_TEST(streamed_downloads_and_limits)
{
        tserver ts;
        start(&ts, NULL);
        _cleanup_http_client_ sp_http_client *c = client(ts.port);
        _cleanup_free_ unsigned char *want = malloc(BIG_TOTAL);
        for (size_t i = 0; i < BIG_TOTAL; i++)
                want[i] = pattern(i);
        uint64_t want_hash = fnv(FNV_INIT, want, BIG_TOTAL);
        const char *targets[] = {"/big", "/big?chunked=1"};
        for (size_t i = 0; i < 2; i++) {
                sink_state s = {.hash = FNV_INIT};
                sp_http_client_request req = {.method = "GET", .target = targets[i]};
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_eq(sp_http_client_stream(c, &req, sink, &s, &e), 200);
                ck_assert_uint_eq(s.bytes, BIG_TOTAL);
                ck_assert(s.hash == want_hash);
        }
        ck_assert(tserver_wait_connections(&ts, 1));
        /* The pull interface with a small buffer. */
        sp_http_client_request req = {.method = "GET", .target = "/big?chunked=1"};
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_http_client_send(c, &req, &e), 200);
        ck_assert_int_ge(sp_http_client_fd(c), 0);
        uint64_t got = 0, h = FNV_INIT;
        char buf[777];
        ssize_t n;
        while ((n = sp_http_client_read(c, buf, sizeof(buf), -1, &e)) > 0) {
                ck_assert_int_le(n, (ssize_t)sizeof(buf));
                h = fnv(h, buf, (size_t)n);
                got += (uint64_t)n;
        }
        ck_assert_int_eq(n, 0);
        ck_assert_uint_eq(got, BIG_TOTAL);
        ck_assert(h == want_hash);
        ck_assert_int_eq(sp_http_client_read(c, buf, sizeof(buf), -1, &e), 0); /* still the end */
        ck_assert_int_eq(sp_http_client_fd(c), -1);
        /* Too large for the bound: an error, and the connection is dropped. */
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(sp_http_client_do(c, &req, 1000, &body, &e), -SP_E_TOO_LARGE);
        sp_error_free(e);
        e = NULL;
        /* A sink that fails stops the transfer. */
        sink_state s = {.hash = FNV_INIT, .fail_after = 2};
        ck_assert_int_eq(sp_http_client_stream(c, &req, sink, &s, &e), -SP_E_IO);
        ck_assert_uint_lt(s.bytes, BIG_TOTAL);
        /* A response abandoned half-read does not confuse the next request. */
        sp_error_free(e);
        e = NULL;
        ck_assert_int_eq(sp_http_client_send(c, &req, &e), 200);
        ck_assert_int_gt(sp_http_client_read(c, buf, sizeof(buf), -1, &e), 0);
        ck_assert_int_eq(call_ok(c, "GET", "/json", NULL, &body), 200);
        ck_assert_str_eq(body.data, "{\"ok\":true}");
        tserver_stop(&ts);
}
END_TEST

/* Reads from the client until n bytes have been collected. */
static void read_exactly(sp_http_client *c, sp_buf *out, size_t n)
{
        char buf[256];
        while (out->len < n) {
                _cleanup_error_ sp_error *e = NULL;
                ssize_t r = sp_http_client_read(c, buf, sizeof(buf), -1, &e);
                ck_assert_msg(r > 0, "read: %s", e ? e->message : "end of body");
                sp_buf_append(out, buf, (size_t)r, NULL);
        }
}

START_TEST(events_waited_for_with_poll)
{
        tserver ts;
        start(&ts, NULL);
        _cleanup_http_client_ sp_http_client *c = client(ts.port);
        sp_http_client_request req = {.method = "GET", .target = "/events"};
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_http_client_send(c, &req, &e), 200);
        ck_assert_str_eq(sp_http_client_header(c, "content-type"), "text/event-stream");
        const char *one = "id: 1\nevent: stdout\ndata: one\n\n";
        _cleanup_buf_ sp_buf got = SP_BUF_INIT;
        read_exactly(c, &got, strlen(one));
        ck_assert_str_eq(got.data, one);
        /* Nothing more for now: a zero timeout says so at once, and poll agrees. */
        char buf[256];
        ck_assert_int_eq(sp_http_client_read(c, buf, sizeof(buf), 0, &e), -SP_E_TIMEOUT);
        sp_error_free(e);
        e = NULL;
        ck_assert(!sp_http_client_buffered(c));
        int fd = sp_http_client_fd(c);
        ck_assert_int_ge(fd, 0);
        int pipefd[2];
        ck_assert_int_eq(pipe2(pipefd, O_CLOEXEC), 0);
        struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = pipefd[0], .events = POLLIN}};
        ck_assert_int_eq(poll(p, 2, 100), 0);
        /* The other descriptor wakes the poll; the stream does not. */
        ck_assert_int_eq(write(pipefd[1], "x", 1), 1);
        ck_assert_int_eq(poll(p, 2, TEST_TIMEOUT_MS), 1);
        ck_assert(p[1].revents & POLLIN);
        ck_assert(!(p[0].revents & POLLIN));
        /* The next event makes the socket readable. */
        tserver_call(&ts, sse_send_two, NULL);
        p[1].fd = -1;
        ck_assert_int_eq(poll(p, 2, TEST_TIMEOUT_MS), 1);
        ck_assert(p[0].revents & POLLIN);
        sp_buf_clear(&got);
        const char *two = "id: 2\nevent: stdout\ndata: two\n\n";
        while (got.len < strlen(two)) {
                ssize_t n = sp_http_client_read(c, buf, sizeof(buf), 0, &e);
                if (n == -SP_E_TIMEOUT) {
                        sp_error_free(e);
                        e = NULL;
                        ck_assert_int_eq(poll(p, 1, TEST_TIMEOUT_MS), 1);
                        continue;
                }
                ck_assert_int_gt(n, 0);
                sp_buf_append(&got, buf, (size_t)n, NULL);
        }
        ck_assert_str_eq(got.data, two);
        /* The server ends the stream: the end of the body, and the connection serves on. */
        tserver_call(&ts, sse_end, NULL);
        ck_assert_int_eq(sp_http_client_read(c, buf, sizeof(buf), -1, &e), 0);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(call_ok(c, "GET", "/json", NULL, &body), 200);
        ck_assert(tserver_wait_connections(&ts, 1));
        close(pipefd[0]);
        close(pipefd[1]);
        tserver_stop(&ts);
}
END_TEST

START_TEST(ipv6_loopback)
{
        int s6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
        bool have = s6 >= 0 && bind(s6, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (s6 >= 0)
                close(s6);
        if (!have)
                return; /* no IPv6 loopback on this host */
        tserver ts;
        start(&ts, "[::1]:0");
        char url[64];
        snprintf(url, sizeof(url), "http://[::1]:%d", ts.port);
        _cleanup_http_client_ sp_http_client *c = client_cfg(url, NULL);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(call_ok(c, "GET", "/echo", NULL, &body), 200);
        _cleanup_json_ json_object *o = parse_json(&body);
        char host[32];
        snprintf(host, sizeof(host), "[::1]:%d", ts.port);
        ck_assert_str_eq(jstr(o, "host"), host);
        tserver_stop(&ts);
}
END_TEST

/* ---- TLS ---- */

typedef struct tls_fixture {
        char ca_path[512];
        SSL_CTX *good; /* a certificate for 127.0.0.1 and localhost */
        SSL_CTX *other; /* a certificate for other.test only */
} tls_fixture;

static SSL_CTX *server_ctx(sp_pki_ca *ca, const char *const *sans)
{
        _cleanup_free_ char *cert = NULL, *key = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(sp_pki_issue(ca, SP_ROLE_CONTROLPLANE, "api", sans, 1, &cert, &key, &e) == 0, "%s",
                      e ? e->message : "?");
        sp_tls_config tc = {.cert_pem = cert, .key_pem = key};
        SSL_CTX *ctx = sp_tls_server_ctx_new(&tc, &e);
        ck_assert_msg(ctx, "%s", e ? e->message : "?");
        return ctx;
}

static void tls_fixture_init(tls_fixture *f)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("test ca", 1, &ca, NULL), 0);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, NULL);
        snprintf(f->ca_path, sizeof(f->ca_path), "%s/ca.pem", dir);
        ck_assert_int_eq(sp_pki_pem_save(f->ca_path, ca_pem, false, NULL), 0);
        const char *good[] = {"127.0.0.1", "localhost", NULL};
        const char *other[] = {"other.test", NULL};
        f->good = server_ctx(ca, good);
        f->other = server_ctx(ca, other);
}

static void tls_fixture_free(tls_fixture *f)
{
        SSL_CTX_free(f->good);
        SSL_CTX_free(f->other);
}

static void start_tls(tserver *ts, SSL_CTX *ctx)
{
        tserver_new(ts, NULL);
        add_routes(ts->srv);
        ck_assert_int_eq(sp_http_server_listen(ts->srv, "127.0.0.1:0", ctx, NULL), 0);
        ts->port = sp_http_server_port(ts->srv);
        ck_assert(pthread_create(&ts->thread, NULL, tserver_loop, ts) == 0);
}

START_TEST(https_with_a_test_ca)
{
        tls_fixture f;
        tls_fixture_init(&f);
        tserver ts;
        start_tls(&ts, f.good);
        sp_http_client_config cfg = {.ca_file = f.ca_path};
        char url[64];
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        const char *hosts[] = {"127.0.0.1", "localhost"};
        for (size_t i = 0; i < 2; i++) {
                snprintf(url, sizeof(url), "https://%s:%d", hosts[i], ts.port);
                _cleanup_http_client_ sp_http_client *c = client_cfg(url, &cfg);
                for (int round = 0; round < 3; round++) {
                        ck_assert_int_eq(call_ok(c, "POST", "/echo", "{\"tls\":true}", &body), 200);
                        _cleanup_json_ json_object *o = parse_json(&body);
                        ck_assert_str_eq(jstr(o, "body"), "{\"tls\":true}");
                }
                /* Keep-alive over TLS too. */
                ck_assert(tserver_wait_connections(&ts, 1));
                /* A streamed download over TLS. */
                sink_state s = {.hash = FNV_INIT};
                sp_http_client_request req = {.method = "GET", .target = "/big?chunked=1"};
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_eq(sp_http_client_stream(c, &req, sink, &s, &e), 200);
                ck_assert_uint_eq(s.bytes, BIG_TOTAL);
                sp_http_client_close(c);
                ck_assert(tserver_wait_connections(&ts, 0));
        }
        /* Without the test CA (the system's store) the server is not trusted. */
        snprintf(url, sizeof(url), "https://127.0.0.1:%d", ts.port);
        _cleanup_http_client_ sp_http_client *sys = client_cfg(url, NULL);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(call(sys, "GET", "/json", NULL, NULL, &body, &e), -SP_E_UNAUTHENTICATED);
        ck_assert_msg(strstr(e->message, "certificate verify failed"), "%s", e->message);
        /* Plain HTTP to a TLS port is not mistaken for an answer. */
        sp_error_free(e);
        e = NULL;
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", ts.port);
        sp_http_client_config quick = {.io_timeout_ms = 2000};
        _cleanup_http_client_ sp_http_client *plain = client_cfg(url, &quick);
        ck_assert_int_lt(call(plain, "GET", "/json", NULL, NULL, &body, &e), 0);
        tserver_stop(&ts);

        /* A certificate for another name: the address check refuses it. */
        tserver ts2;
        start_tls(&ts2, f.other);
        snprintf(url, sizeof(url), "https://127.0.0.1:%d", ts2.port);
        _cleanup_http_client_ sp_http_client *wrong = client_cfg(url, &cfg);
        sp_error_free(e);
        e = NULL;
        ck_assert_int_eq(call(wrong, "GET", "/json", NULL, NULL, &body, &e), -SP_E_UNAUTHENTICATED);
        ck_assert_msg(strstr(e->message, "mismatch"), "%s", e->message);
        snprintf(url, sizeof(url), "https://localhost:%d", ts2.port);
        _cleanup_http_client_ sp_http_client *wrong_name = client_cfg(url, &cfg);
        sp_error_free(e);
        e = NULL;
        ck_assert_int_eq(call(wrong_name, "GET", "/json", NULL, NULL, &body, &e), -SP_E_UNAUTHENTICATED);
        ck_assert_msg(strstr(e->message, "mismatch"), "%s", e->message);
        tserver_stop(&ts2);
        tls_fixture_free(&f);
}
END_TEST

/* ---- malformed peers ---- */

START_TEST(malformed_and_truncated_responses)
{
        struct {
                const char *canned;
                int want; /* status, or -error code */
                const char *body;
        } cases[] = {
                {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello", -SP_E_INVALID,
                 NULL},
                {"garbage\r\n\r\n", -SP_E_INVALID, NULL},
                {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", -SP_E_UNAVAILABLE, NULL},
                {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", -SP_E_UNAVAILABLE, NULL},
                {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", -SP_E_INVALID, NULL},
                {"", -SP_E_UNAVAILABLE, NULL},
                {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", 201, "ok"},
                {"HTTP/1.0 200 OK\r\n\r\nuntil the end", 200, "until the end"},
                {"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc", 200, "abc"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                rawsrv rs;
                raw_begin(&rs, raw_canned, (void *)cases[i].canned);
                _cleanup_http_client_ sp_http_client *c = client(rs.port);
                _cleanup_buf_ sp_buf body = SP_BUF_INIT;
                _cleanup_error_ sp_error *e = NULL;
                int r = call(c, "GET", "/x", NULL, NULL, &body, &e);
                ck_assert_msg(r == cases[i].want, "case %zu: got %d (%s)", i, r, e ? e->message : "");
                if (cases[i].body)
                        ck_assert_str_eq(body.data, cases[i].body);
                if (r > 0) {
                        /* The server closed: the next request opens a new connection. */
                        ck_assert_int_eq(call(c, "GET", "/x", NULL, NULL, &body, &e), cases[i].want);
                        ck_assert_int_eq(atomic_load(&rs.conns), 2);
                }
                raw_stop(&rs);
        }
}
END_TEST

START_TEST(dropped_keep_alive_is_retried_when_safe)
{
        rawsrv rs;
        raw_begin(&rs, raw_drop_second, NULL);
        _cleanup_http_client_ sp_http_client *c = client(rs.port);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        /* GET: the second request meets the dropped connection and is sent again. */
        ck_assert_int_eq(call_ok(c, "GET", "/a", NULL, &body), 200);
        ck_assert_int_eq(call_ok(c, "GET", "/b", NULL, &body), 200);
        ck_assert_str_eq(body.data, "ok");
        ck_assert_int_eq(atomic_load(&rs.conns), 2);
        ck_assert_int_eq(atomic_load(&rs.requests), 3);
        /* A POST with an Idempotency-Key is retried with the same key. */
        const char *keyed[] = {"Idempotency-Key: key-1", NULL};
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(call(c, "POST", "/c", keyed, "{}", &body, &e), 200);
        ck_assert_int_eq(atomic_load(&rs.requests), 5);
        ck_assert_str_eq(seen_keys[3], "key-1");
        ck_assert_str_eq(seen_keys[4], "key-1");
        /* A plain POST is not: the caller learns that the connection broke. */
        ck_assert_int_eq(call(c, "POST", "/d", NULL, "{}", &body, &e), -SP_E_UNAVAILABLE);
        ck_assert_int_eq(atomic_load(&rs.requests), 6);
        raw_stop(&rs);
}
END_TEST

START_TEST(timeouts_and_unreachable)
{
        /* A server that never answers. */
        rawsrv rs;
        raw_begin(&rs, raw_silent, NULL);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", rs.port);
        sp_http_client_config cfg = {.io_timeout_ms = 300};
        _cleanup_http_client_ sp_http_client *c = client_cfg(url, &cfg);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(call(c, "GET", "/x", NULL, NULL, &body, &e), -SP_E_TIMEOUT);
        sp_http_client_close(c);
        raw_stop(&rs);

        /* Nothing listens: refused at once. */
        sp_error_free(e);
        e = NULL;
        int port = sp_test_free_port(NULL);
        ck_assert_int_gt(port, 0);
        _cleanup_http_client_ sp_http_client *r = client(port);
        ck_assert_int_eq(call(r, "GET", "/x", NULL, NULL, &body, &e), -SP_E_UNAVAILABLE);
        ck_assert_msg(strstr(e->message, "connect to 127.0.0.1:") && strstr(e->message, "refused"), "%s", e->message);

        /* A listener whose accept queue is full drops new connection attempts:
         * the connect timeout ends the wait. */
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sin = {.sin_family = AF_INET};
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
        ck_assert_int_eq(listen(lfd, 0), 0);
        socklen_t sl = sizeof(sin);
        getsockname(lfd, (struct sockaddr *)&sin, &sl);
        int fillers[4];
        for (int i = 0; i < 4; i++) {
                fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                connect(fillers[i], (struct sockaddr *)&sin, sizeof(sin));
        }
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", ntohs(sin.sin_port));
        sp_http_client_config ccfg = {.connect_timeout_ms = 300};
        _cleanup_http_client_ sp_http_client *full = client_cfg(url, &ccfg);
        sp_error_free(e);
        e = NULL;
        ck_assert_int_eq(call(full, "GET", "/x", NULL, NULL, &body, &e), -SP_E_TIMEOUT);
        ck_assert_msg(strstr(e->message, "timed out"), "%s", e->message);
        for (int i = 0; i < 4; i++)
                close(fillers[i]);
        close(lfd);
}
END_TEST

/* Retry-After, as clients read it: delta-seconds only, capped. */
START_TEST(retry_after_values)
{
        ck_assert_int_eq(sp_http_retry_after_parse("0", 60), 0);
        ck_assert_int_eq(sp_http_retry_after_parse("7", 60), 7);
        ck_assert_int_eq(sp_http_retry_after_parse("120", 60), 60);
        ck_assert_int_eq(sp_http_retry_after_parse("999999999999999999", 60), 60);
        ck_assert_int_eq(sp_http_retry_after_parse("5", -3), 0);
        static const char *const bad[] = {
                "", "-1", "1.5", " 1", "1 ", "+1", "0x10", "1000000000000000000", "Wed, 21 Oct 2015 07:28:00 GMT"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                ck_assert_msg(sp_http_retry_after_parse(bad[i], 60) == -1, "'%s'", bad[i]);
        ck_assert_int_eq(sp_http_retry_after_parse(NULL, 60), -1);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("http_client");
        TCase *tc = tcase_create("client");
        tcase_set_timeout(tc, 60);
        tcase_add_unchecked_fixture(tc, suite_up, suite_down);
        tcase_add_test(tc, urls);
        tcase_add_test(tc, requests_keep_alive_and_headers);
        tcase_add_test(tc, streamed_upload_from_fd);
        tcase_add_test(tc, streamed_downloads_and_limits);
        tcase_add_test(tc, events_waited_for_with_poll);
        tcase_add_test(tc, ipv6_loopback);
        tcase_add_test(tc, https_with_a_test_ca);
        tcase_add_test(tc, malformed_and_truncated_responses);
        tcase_add_test(tc, dropped_keep_alive_is_retried_when_safe);
        tcase_add_test(tc, timeouts_and_unreachable);
        tcase_add_test(tc, retry_after_values);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
