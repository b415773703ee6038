/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: what a reverse proxy needs from the HTTP server, over real
 * loopback sockets — the host handler, routes of every method ("*"), and
 * connections upgraded to raw byte streams: early bytes kept, 8 MiB echoed
 * both ways under backpressure, half-closes (also before an asynchronous
 * upgrade, and with output still queued, over TCP and TLS), one close
 * callback, refusals, timeouts, TLS. */
#include <stdio.h>
#include <strings.h>

#include "space/cleanup.h"
#include "test_http_util.h"

static unsigned char pattern(uint64_t i)
{
        return (unsigned char)((i * 7 + (i >> 12)) % 251);
}

static json_object *body_json(const cresponse *r)
{
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(r->body.data ? r->body.data : "", r->body.len, &o, NULL) == 0, "not JSON: %s",
                      r->body.data);
        return o;
}

static const char *jstr(json_object *o, const char *key)
{
        json_object *v = NULL;
        if (!json_object_object_get_ex(o, key, &v))
                return NULL;
        return json_object_get_string(v);
}

/* Answers with what the request looked like, its tag (userdata) also in X-Tag
 * for HEAD requests. */
static void tell_handler(sp_http_request *req, void *userdata)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        const char *tag = userdata ? userdata : "";
        size_t blen;
        const char *body = sp_http_request_body(req, &blen);
        const char *host = sp_http_request_header(req, "host");
        json_object_object_add(o, "tag", json_object_new_string(tag));
        json_object_object_add(o, "method", json_object_new_string(sp_http_request_method(req)));
        json_object_object_add(o, "path", json_object_new_string(sp_http_request_path(req)));
        json_object_object_add(o, "host", json_object_new_string(host ? host : ""));
        json_object_object_add(o, "body", json_object_new_string_len(body, (int)blen));
        const char *names[] = {"id", "port", "path", "x", "y"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(names); i++) {
                const char *v = sp_http_request_param(req, names[i]);
                if (v) {
                        char key[32];
                        snprintf(key, sizeof(key), "param_%s", names[i]);
                        json_object_object_add(o, key, json_object_new_string(v));
                }
        }
        sp_http_response_header(req, "X-Tag", tag);
        sp_http_reply_json(req, 200, o);
}

/* One request on a new connection (a HEAD one reads no body). */
static void one(int port, const char *request, cresponse *r)
{
        int fd = cli_connect(port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, request);
        ck_assert_msg(creader_response_ex(&rd, r, strncmp(request, "HEAD ", 5) == 0), "no response to %s", request);
        close(fd);
}

/* ---- the host handler ---- */

static const char host_tag[] = "host";

/* "{port}-{id}.sbx.test", with or without a port suffix. */
static bool sbx_host(const char *host, void *userdata)
{
        ck_assert_ptr_eq(userdata, host_tag);
        const char *dot = strstr(host, ".sbx.test");
        const char *dash = strchr(host, '-');
        return dot && dash && dash < dot && (dot[9] == '\0' || dot[9] == ':');
}

START_TEST(host_handler_takes_matching_hosts)
{
        tserver ts;
        tserver_new(&ts, NULL);
        sp_http_server *srv = ts.srv;
        ck_assert_int_eq(sp_http_route(srv, "GET", "/v1/sandboxes", tell_handler, "list", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "POST", "/v1/sandboxes", tell_handler, "create", NULL), 0);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_http_server_set_host_handler(srv, NULL, NULL, tell_handler, NULL, &e), -SP_E_INVALID);
        ck_assert_int_eq(sp_http_server_set_host_handler(srv, sbx_host, NULL, NULL, NULL, NULL), -SP_E_INVALID);
        sp_http_route_opts opts = {.max_body = 16};
        ck_assert_int_eq(sp_http_server_set_host_handler(srv, sbx_host, &opts, tell_handler, (void *)host_tag, NULL),
                         0);
        /* one per server */
        ck_assert_int_eq(sp_http_server_set_host_handler(srv, sbx_host, NULL, tell_handler, (void *)host_tag, NULL),
                         -SP_E_CONFLICT);
        tserver_run(&ts, NULL);

        const struct {
                const char *request;
                int status;
                const char *tag, *method, *path, *host, *body;
        } cases[] = {
                /* any method and path for a matching host, the Host as sent */
                {"PUT /v1/sandboxes HTTP/1.1\r\nHost: 8080-sbx1.sbx.test:443\r\nContent-Length: 3\r\n\r\nabc", 200,
                 "host", "PUT", "/v1/sandboxes", "8080-sbx1.sbx.test:443", "abc"},
                {"PROPFIND /any/deep/p%20q?x=1 HTTP/1.1\r\nHost: 3000-a.sbx.test\r\n\r\n", 200, "host", "PROPFIND",
                 "/any/deep/p q", "3000-a.sbx.test", ""},
                {"GET /v1/sandboxes HTTP/1.1\r\nHost: 1-b.sbx.test\r\n\r\n", 200, "host", "GET", "/v1/sandboxes",
                 "1-b.sbx.test", ""},
                {"DELETE /nope HTTP/1.1\r\nHost: 1-b.sbx.test\r\n\r\n", 200, "host", "DELETE", "/nope", "1-b.sbx.test",
                 ""},
                /* its max_body */
                {"POST /x HTTP/1.1\r\nHost: 1-b.sbx.test\r\nContent-Length: 17\r\n\r\n01234567890123456", 413, NULL,
                 NULL, NULL, NULL, NULL},
                /* other hosts, and none: the route table as before */
                {"GET /v1/sandboxes HTTP/1.1\r\nHost: api.example\r\n\r\n", 200, "list", "GET", "/v1/sandboxes",
                 "api.example", ""},
                {"POST /v1/sandboxes HTTP/1.1\r\nHost: sbx.test\r\nContent-Length: 2\r\n\r\nhi", 200, "create", "POST",
                 "/v1/sandboxes", "sbx.test", "hi"},
                {"PUT /v1/sandboxes HTTP/1.1\r\nHost: api.example\r\nContent-Length: 0\r\n\r\n", 405, NULL, NULL, NULL,
                 NULL, NULL},
                {"GET /nope HTTP/1.1\r\nHost: nodash.sbx.test\r\n\r\n", 404, NULL, NULL, NULL, NULL, NULL},
                {"GET /nope HTTP/1.0\r\n\r\n", 404, NULL, NULL, NULL, NULL, NULL},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_cresponse_ cresponse r = {0};
                one(ts.port, cases[i].request, &r);
                ck_assert_msg(r.status == cases[i].status, "case %zu: %d", i, r.status);
                if (r.status == 405) {
                        char v[64];
                        ck_assert(cresponse_header(&r, "allow", v, sizeof(v)));
                        ck_assert_str_eq(v, "GET, HEAD, POST");
                        assert_error_shape(&r.body, "method_not_allowed");
                }
                if (r.status == 404)
                        assert_error_shape(&r.body, "not_found");
                if (r.status == 413)
                        assert_error_shape(&r.body, "too_large");
                if (r.status != 200)
                        continue;
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "tag"), cases[i].tag);
                ck_assert_str_eq(jstr(o, "method"), cases[i].method);
                ck_assert_str_eq(jstr(o, "path"), cases[i].path);
                ck_assert_str_eq(jstr(o, "host"), cases[i].host);
                ck_assert_str_eq(jstr(o, "body"), cases[i].body);
                ck_assert_ptr_null(jstr(o, "param_path")); /* no route, no parameters */
        }
        tserver_stop(&ts);
}
END_TEST

static tsignal host_called;
static uint64_t host_bytes;

static void host_count_body(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        host_bytes += len;
        if (len == 0) {
                char out[32];
                snprintf(out, sizeof(out), "%llu", (unsigned long long)host_bytes);
                sp_http_reply(req, 200, "text/plain", out, strlen(out));
        }
}

static void host_stream_handler(sp_http_request *req, void *userdata)
{
        host_bytes = 0;
        tsignal_post(&host_called);
        ck_assert_int_eq(sp_http_request_read_body(req, host_count_body, NULL, NULL), 0);
}

START_TEST(host_handler_streams_body)
{
        tserver ts;
        tserver_new(&ts, NULL);
        tsignal_init(&host_called);
        sp_http_route_opts opts = {.flags = SP_HTTP_ROUTE_STREAM_BODY, .max_body = 8u * 1024 * 1024};
        ck_assert_int_eq(
                sp_http_server_set_host_handler(ts.srv, sbx_host, &opts, host_stream_handler, (void *)host_tag, NULL),
                0);
        tserver_run(&ts, NULL);
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        size_t total = 3u * 1024 * 1024; /* over the server's 1 MiB: the handler's limit applies */
        char head[256];
        snprintf(head, sizeof(head), "PATCH /upload HTTP/1.1\r\nHost: 80-x.sbx.test\r\nContent-Length: %zu\r\n\r\n",
                 total);
        cli_send(fd, head);
        /* the handler runs on the head alone */
        ck_assert(tsignal_wait(&host_called, 1));
        unsigned char buf[65536];
        for (size_t off = 0; off < total; off += sizeof(buf)) {
                size_t n = total - off < sizeof(buf) ? total - off : sizeof(buf);
                for (size_t i = 0; i < n; i++)
                        buf[i] = pattern(off + i);
                cli_send_n(fd, buf, n);
        }
        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_response(&rd, &r));
        ck_assert_int_eq(r.status, 200);
        char expect[32];
        snprintf(expect, sizeof(expect), "%zu", total);
        ck_assert_str_eq(r.body.data, expect);
        close(fd);
        tserver_stop(&ts);
}
END_TEST

/* ---- routes of every method ---- */

static int collect_route(const char *method, const char *pattern, void *userdata)
{
        sp_buf_appendf(userdata, NULL, "%s %s\n", method, pattern);
        return 0;
}

START_TEST(any_method_routes)
{
        tserver ts;
        tserver_new(&ts, NULL);
        sp_http_server *srv = ts.srv;
        sp_http_route_opts stream = {.flags = SP_HTTP_ROUTE_STREAM_BODY};
        ck_assert_int_eq(sp_http_route(srv, "*", "/v1/sandboxes/{id}/ports/{port}/*path", tell_handler, "proxy", NULL),
                         0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/v1/sandboxes", tell_handler, "list", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "POST", "/v1/sandboxes", tell_handler, "create", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/v1/sandboxes/{id}", tell_handler, "get", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "*", "/any/{x}", tell_handler, "any-x", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/any/{x}", tell_handler, "get-x", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/deep/*rest", tell_handler, "deep-get", NULL), 0);
        ck_assert_int_eq(sp_http_route_ex(srv, "*", "/deep/x/{y}", &stream, tell_handler, "deep-any", NULL), 0);
        /* "*" twice on one pattern is a conflict like any method */
        ck_assert_int_eq(sp_http_route(srv, "*", "/any/{x}", tell_handler, NULL, NULL), -SP_E_CONFLICT);
        _cleanup_buf_ sp_buf listed = SP_BUF_INIT;
        ck_assert_int_eq(sp_http_server_foreach_route(srv, collect_route, &listed), 0);
        ck_assert_str_eq(listed.data, "* /v1/sandboxes/{id}/ports/{port}/*path\n"
                                      "GET /v1/sandboxes\n"
                                      "POST /v1/sandboxes\n"
                                      "GET /v1/sandboxes/{id}\n"
                                      "* /any/{x}\n"
                                      "GET /any/{x}\n"
                                      "GET /deep/*rest\n"
                                      "* /deep/x/{y}\n");
        tserver_run(&ts, NULL);

        /* every method, standard or not, with its parameters and body */
        const char *methods[] = {"GET", "PUT", "DELETE", "PATCH", "OPTIONS", "POST", "PROPFIND", "M-SEARCH", "*"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++) {
                char req[256];
                snprintf(req, sizeof(req),
                         "%s /v1/sandboxes/s1/ports/8080/a/b%%20c HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nxyz",
                         methods[i]);
                _cleanup_cresponse_ cresponse r = {0};
                one(ts.port, req, &r);
                ck_assert_msg(r.status == 200, "%s: %d", methods[i], r.status);
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "tag"), "proxy");
                ck_assert_str_eq(jstr(o, "method"), methods[i]);
                ck_assert_str_eq(jstr(o, "param_id"), "s1");
                ck_assert_str_eq(jstr(o, "param_port"), "8080");
                ck_assert_str_eq(jstr(o, "param_path"), "a/b c");
                ck_assert_str_eq(jstr(o, "body"), "xyz");
        }

        const struct {
                const char *request;
                int status;
                const char *tag; /* X-Tag */
                const char *allow; /* for 405 */
        } cases[] = {
                {"HEAD /v1/sandboxes/s1/ports/80 HTTP/1.1\r\nHost: h\r\n\r\n", 200, "proxy", NULL},
                /* a route of the method itself wins on the same pattern (GET also for HEAD) */
                {"GET /any/1 HTTP/1.1\r\nHost: h\r\n\r\n", 200, "get-x", NULL},
                {"HEAD /any/1 HTTP/1.1\r\nHost: h\r\n\r\n", 200, "get-x", NULL},
                {"POST /any/1 HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", 200, "any-x", NULL},
                {"DELETE /any/1 HTTP/1.1\r\nHost: h\r\n\r\n", 200, "any-x", NULL},
                {"BREW /any/1 HTTP/1.1\r\nHost: h\r\n\r\n", 200, "any-x", NULL},
                /* ... but not over a more specific pattern */
                {"GET /deep/x/1 HTTP/1.1\r\nHost: h\r\n\r\n", 200, "deep-any", NULL},
                {"GET /deep/q HTTP/1.1\r\nHost: h\r\n\r\n", 200, "deep-get", NULL},
                /* 405 and Allow of other paths are as before, without "*" */
                {"DELETE /deep/q HTTP/1.1\r\nHost: h\r\n\r\n", 405, NULL, "GET, HEAD"},
                {"PUT /v1/sandboxes HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", 405, NULL, "GET, HEAD, POST"},
                {"DELETE /v1/sandboxes/s1 HTTP/1.1\r\nHost: h\r\n\r\n", 405, NULL, "GET, HEAD"},
                {"GET /v1/sandboxes/s1 HTTP/1.1\r\nHost: h\r\n\r\n", 200, "get", NULL},
                {"PUT /v1/sandboxes/s1/ports HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", 404, NULL, NULL},
                {"GET /nothing HTTP/1.1\r\nHost: h\r\n\r\n", 404, NULL, NULL},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_cresponse_ cresponse r = {0};
                one(ts.port, cases[i].request, &r);
                ck_assert_msg(r.status == cases[i].status, "case %zu: %d", i, r.status);
                char v[64];
                if (cases[i].tag) {
                        ck_assert(cresponse_header(&r, "x-tag", v, sizeof(v)));
                        ck_assert_msg(strcmp(v, cases[i].tag) == 0, "case %zu: %s", i, v);
                }
                if (cases[i].allow) {
                        ck_assert(cresponse_header(&r, "allow", v, sizeof(v)));
                        ck_assert_str_eq(v, cases[i].allow);
                }
        }
        tserver_stop(&ts);
}
END_TEST

/* ---- upgraded connections ---- */

#define UPGRADE_HEAD "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"

/* What the echo handler saw, written on the loop and read after a signal or
 * through tserver_call(). */
typedef struct echo_state {
        uint64_t received;
        int would_block, writable, eofs, closes;
        int delivered_while_paused, after_close;
        bool paused, closed;
        size_t max_pending, max_piece;
        int write_error;
        tsignal blocked, closed_sig;
} echo_state;

static echo_state es;

static void echo_reset(void)
{
        memset(&es, 0, sizeof(es));
        tsignal_init(&es.blocked);
        tsignal_init(&es.closed_sig);
}

static void echo_data(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        ck_assert_uint_gt(len, 0);
        if (es.closed)
                es.after_close++;
        if (es.paused)
                es.delivered_while_paused++;
        if (len > es.max_piece)
                es.max_piece = len;
        es.received += len;
        int r = sp_http_raw_write(req, data, len);
        size_t pending = sp_http_request_output_pending(req);
        if (pending > es.max_pending)
                es.max_pending = pending;
        if (r == SP_HTTP_WOULD_BLOCK) {
                es.would_block++;
                es.paused = true;
                sp_http_raw_pause(req);
                tsignal_post(&es.blocked);
        } else if (r < 0) {
                es.write_error = r;
        }
}

static void echo_writable(sp_http_request *req, void *userdata)
{
        if (es.closed)
                es.after_close++;
        es.writable++;
        es.paused = false;
        sp_http_raw_resume(req);
}

static void echo_eof(sp_http_request *req, void *userdata)
{
        if (es.closed)
                es.after_close++;
        es.eofs++;
        ck_assert_int_eq(sp_http_raw_shutdown_write(req), 0);
}

static void echo_close(sp_http_request *req, void *userdata)
{
        if (es.closed)
                es.after_close++;
        es.closed = true;
        es.closes++;
        /* the connection is gone: writing is a no-op now */
        ck_assert_int_eq(sp_http_raw_write(req, "x", 1), -SP_E_UNAVAILABLE);
        tsignal_post(&es.closed_sig);
}

static const sp_http_raw_ops echo_ops = {
        .on_data = echo_data, .on_eof = echo_eof, .on_writable = echo_writable, .on_close = echo_close};

static void echo_handler(sp_http_request *req, void *userdata)
{
        const char *conn = sp_http_request_header(req, "connection");
        if (!conn || strcasecmp(conn, "upgrade") != 0) {
                sp_http_reply_errorf(req, SP_E_INVALID, "not an upgrade");
                return;
        }
        const char *headers[] = {"Connection", "Upgrade", "Upgrade", sp_http_request_header(req, "upgrade"), NULL};
        ck_assert_int_eq(sp_http_response_header(req, "X-Extra", "yes"), 0);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(sp_http_upgrade(req, 101, headers, &echo_ops, NULL, &e) == 0, "%s", e ? e->message : "");
        /* no HTTP answer any more */
        ck_assert_int_eq(sp_http_reply(req, 200, NULL, NULL, 0), -SP_E_CONFLICT);
        ck_assert_int_eq(sp_http_stream_start(req, 200, NULL, -1), -SP_E_CONFLICT);
        ck_assert_int_eq(sp_http_upgrade(req, 101, headers, &echo_ops, NULL, NULL), -SP_E_CONFLICT);
}

/* Reads the 101 head of the echo handler. */
static void expect_101(creader *rd)
{
        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_head(rd, &r));
        ck_assert_int_eq(r.status, 101);
        char v[64];
        ck_assert(cresponse_header(&r, "connection", v, sizeof(v)));
        ck_assert_str_eq(v, "Upgrade");
        ck_assert(cresponse_header(&r, "upgrade", v, sizeof(v)));
        ck_assert_str_eq(v, "echo");
        ck_assert(cresponse_header(&r, "x-extra", v, sizeof(v)));
        ck_assert(!cresponse_header(&r, "content-length", v, sizeof(v)));
        ck_assert(!cresponse_header(&r, "transfer-encoding", v, sizeof(v)));
}

static void start_echo(tserver *ts, const sp_http_config *cfg)
{
        echo_reset();
        tserver_new(ts, cfg);
        ck_assert_int_eq(sp_http_route(ts->srv, "GET", "/ws", echo_handler, NULL, NULL), 0);
        tserver_run(ts, NULL);
}

#define ECHO_TOTAL (8u * 1024 * 1024)
#define ECHO_EARLY 3000
/* High watermark plus one on_data piece (at most the read buffer: 16 KiB of
 * head limit + 64 KiB), plus the 101 head. */
#define ECHO_PENDING_MAX (256u * 1024 + SP_HTTP_DEFAULT_MAX_HEAD_BYTES + 64 * 1024 + 1024)

typedef struct writer {
        int fd;
        bool ok;
} writer;

static bool send_all(int fd, const unsigned char *p, size_t n)
{
        while (n > 0) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return false;
                p += w;
                n -= (size_t)w;
        }
        return true;
}

/* The client's sending side: the upgrade request and the first bytes of the
 * stream in one write, the rest in pieces of odd sizes, then a half-close. */
static void *writer_main(void *arg)
{
        writer *w = arg;
        size_t hl = strlen(UPGRADE_HEAD);
        unsigned char *buf = malloc(65536 + hl);
        if (!buf)
                return NULL;
        memcpy(buf, UPGRADE_HEAD, hl);
        for (size_t i = 0; i < ECHO_EARLY; i++)
                buf[hl + i] = pattern(i);
        w->ok = send(w->fd, buf, hl + ECHO_EARLY, MSG_NOSIGNAL) == (ssize_t)(hl + ECHO_EARLY);
        for (size_t off = ECHO_EARLY; w->ok && off < ECHO_TOTAL;) {
                size_t n = 65536 - off % 997;
                if (n > ECHO_TOTAL - off)
                        n = ECHO_TOTAL - off;
                for (size_t i = 0; i < n; i++)
                        buf[i] = pattern(off + i);
                w->ok = send_all(w->fd, buf, n);
                off += n;
        }
        if (w->ok)
                w->ok = shutdown(w->fd, SHUT_WR) == 0;
        free(buf);
        return NULL;
}

typedef struct snapshot {
        uint64_t received;
        size_t max_pending;
        bool paused;
        int conns;
        sp_http_server *srv;
} snapshot;

/* The handler's view: bytes received, whether it is paused, and the largest
 * output queue (sp_http_request_output_pending()) it saw after a write. */
static void snapshot_cb(void *arg)
{
        snapshot *s = arg;
        s->received = es.received;
        s->max_pending = es.max_pending;
        s->paused = es.paused;
        s->conns = (int)sp_http_server_connections(s->srv);
}

START_TEST(upgrade_echo_8mib_early_bytes_backpressure)
{
        tserver ts;
        start_echo(&ts, NULL);
        int fd = cli_connect_buf(ts.port, 64 * 1024);
        _cleanup_creader_ creader rd = {.fd = fd};
        writer w = {.fd = fd};
        pthread_t t;
        ck_assert(pthread_create(&t, NULL, writer_main, &w) == 0);

        /* The client reads nothing: the echo fills the connection until the
         * handler is told to wait and stops reading. Then, for a while, the
         * server neither reads more nor queues more. */
        ck_assert(tsignal_wait(&es.blocked, 1));
        snapshot prev = {.srv = ts.srv}, cur = {.srv = ts.srv};
        int steady = 0;
        for (int64_t end = mono_ms() + TEST_TIMEOUT_MS; steady < 10 && mono_ms() < end;) {
                usleep(20 * 1000);
                tserver_call(&ts, snapshot_cb, &cur);
                ck_assert_uint_le(cur.max_pending, ECHO_PENDING_MAX);
                steady = cur.paused && prev.paused && cur.received == prev.received ? steady + 1 : 0;
                prev = cur;
        }
        ck_assert_msg(steady == 10, "the server kept reading from a client that does not read");
        ck_assert_uint_lt(cur.received, ECHO_TOTAL);
        ck_assert_int_eq(cur.conns, 1);

        /* Now read: the 101, then every byte back in order, early ones first. */
        expect_101(&rd);
        while (rd.in.len < ECHO_TOTAL)
                ck_assert(creader_more(&rd));
        ck_assert_uint_eq(rd.in.len, ECHO_TOTAL);
        for (size_t i = 0; i < ECHO_TOTAL; i++)
                if ((unsigned char)rd.in.data[i] != pattern(i))
                        ck_abort_msg("byte %zu differs", i);
        /* The client's half-close reached the handler, which closed its side
         * after the last byte; both sides closed, the connection is gone. */
        ck_assert(creader_wait_closed(&rd));
        ck_assert_uint_eq(rd.in.len, ECHO_TOTAL);
        pthread_join(t, NULL);
        ck_assert(w.ok);
        ck_assert(tsignal_wait(&es.closed_sig, 1));
        ck_assert(tserver_wait_connections(&ts, 0));

        tserver_call(&ts, snapshot_cb, &cur);
        ck_assert_uint_eq(cur.received, ECHO_TOTAL);
        ck_assert_int_eq(es.write_error, 0);
        ck_assert_int_gt(es.would_block, 0);
        ck_assert_int_eq(es.writable, es.would_block);
        ck_assert_int_eq(es.delivered_while_paused, 0);
        ck_assert_int_eq(es.eofs, 1);
        ck_assert_int_eq(es.closes, 1);
        ck_assert_int_eq(es.after_close, 0);
        ck_assert_uint_le(es.max_pending, ECHO_PENDING_MAX);
        ck_assert_uint_le(es.max_piece, SP_HTTP_DEFAULT_MAX_HEAD_BYTES + 64 * 1024);
        close(fd);
        tserver_stop(&ts);
}
END_TEST

/* ---- half-close ---- */

static struct {
        int eofs, closes, after_close;
        int write_at_eof, shut, write_after_shut, shut_again;
        sp_buf got;
        tsignal closed;
} hc;

static void hc_data(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        sp_buf_append(&hc.got, data, len, NULL);
}

static void hc_eof(sp_http_request *req, void *userdata)
{
        hc.eofs++;
        /* the client is done sending; the handler still answers */
        char out[128];
        snprintf(out, sizeof(out), "got %zu: %s", hc.got.len, hc.got.data ? hc.got.data : "");
        hc.write_at_eof = sp_http_raw_write(req, out, strlen(out));
        hc.shut = sp_http_raw_shutdown_write(req);
        hc.write_after_shut = sp_http_raw_write(req, "late", 4);
        hc.shut_again = sp_http_raw_shutdown_write(req);
}

static void hc_close(sp_http_request *req, void *userdata)
{
        hc.closes++;
        tsignal_post(&hc.closed);
}

static void hc_upgrade(sp_http_request *req)
{
        static const sp_http_raw_ops ops = {.on_data = hc_data, .on_eof = hc_eof, .on_close = hc_close};
        const char *headers[] = {"Connection", "Upgrade", "Upgrade", "echo", "X-Extra", "1", NULL};
        ck_assert_int_eq(sp_http_upgrade(req, 101, headers, &ops, NULL, NULL), 0);
}

static void hc_later(evutil_socket_t fd, short what, void *arg)
{
        _cleanup_http_request_ sp_http_request *req = arg;
        /* the client half-closed while waiting, before the 101 */
        ck_assert(sp_http_request_peer_closed(req));
        hc_upgrade(req);
}

static void hc_handler(sp_http_request *req, void *userdata)
{
        if (!userdata) {
                hc_upgrade(req);
                return;
        }
        /* as a proxy does: upgrade once the upstream has answered */
        struct timeval tv = {0, 200 * 1000};
        ck_assert_int_eq(event_base_once(userdata, -1, EV_TIMEOUT, hc_later, sp_http_request_ref(req), &tv), 0);
}

START_TEST(upgrade_half_close)
{
        tserver ts;
        tserver_new(&ts, NULL);
        memset(&hc, 0, sizeof(hc));
        tsignal_init(&hc.closed);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/ws", hc_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/later", hc_handler, ts.base, NULL), 0);
        tserver_run(&ts, NULL);
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, UPGRADE_HEAD "hello");
        expect_101(&rd);
        cli_send(fd, " world");
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
        ck_assert(creader_wait_closed(&rd));
        ck_assert_uint_eq(rd.in.len, strlen("got 11: hello world"));
        ck_assert_str_eq(rd.in.data, "got 11: hello world");
        ck_assert(tsignal_wait(&hc.closed, 1));
        ck_assert(tserver_wait_connections(&ts, 0));
        ck_assert_int_eq(hc.eofs, 1);
        ck_assert_int_eq(hc.closes, 1);
        ck_assert_int_eq(hc.write_at_eof, 0);
        ck_assert_int_eq(hc.shut, 0);
        ck_assert_int_eq(hc.write_after_shut, -SP_E_INVALID);
        ck_assert_int_eq(hc.shut_again, 0);
        close(fd);

        /* The client sends the request, early bytes and its end before the
         * handler upgrades: the bytes and then the end still come, in order. */
        sp_buf_clear(&hc.got);
        fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd2 = {.fd = fd};
        cli_send(fd, "GET /later HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nearly");
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
        expect_101(&rd2);
        ck_assert(creader_wait_closed(&rd2));
        ck_assert_str_eq(rd2.in.data, "got 5: early");
        ck_assert(tsignal_wait(&hc.closed, 2));
        ck_assert(tserver_wait_connections(&ts, 0));
        ck_assert_int_eq(hc.eofs, 2);
        ck_assert_int_eq(hc.closes, 2);
        sp_buf_free(&hc.got);
        close(fd);
        tserver_stop(&ts);
}
END_TEST

/* ---- the close callback ---- */

static void close_on_word(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        if (es.closed)
                es.after_close++;
        if (len >= 5 && memcmp(data, "close", 5) == 0)
                sp_http_raw_close(req);
        else
                es.received += len;
}

static void closing_handler(sp_http_request *req, void *userdata)
{
        static const sp_http_raw_ops ops = {.on_data = close_on_word, .on_close = echo_close};
        const char *headers[] = {"Connection", "Upgrade", "Upgrade", "echo", "X-Extra", "1", NULL};
        ck_assert_int_eq(sp_http_upgrade(req, 101, headers, &ops, NULL, NULL), 0);
}

START_TEST(upgrade_close_callback_once)
{
        tserver ts;
        echo_reset();
        tserver_new(&ts, NULL);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/ws", closing_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);

        /* the client vanishes: a reset */
        int fd = cli_connect(ts.port);
        {
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, UPGRADE_HEAD "abc");
                expect_101(&rd);
                struct linger lg = {.l_onoff = 1, .l_linger = 0};
                ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
                close(fd);
        }
        ck_assert(tsignal_wait(&es.closed_sig, 1));
        ck_assert(tserver_wait_connections(&ts, 0));
        ck_assert_int_eq(es.closes, 1);
        es.closed = false;

        /* the handler closes */
        fd = cli_connect(ts.port);
        {
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, UPGRADE_HEAD);
                expect_101(&rd);
                cli_send(fd, "close");
                ck_assert(creader_wait_closed(&rd));
                close(fd);
        }
        ck_assert(tsignal_wait(&es.closed_sig, 2));
        ck_assert(tserver_wait_connections(&ts, 0));
        ck_assert_int_eq(es.closes, 2);
        es.closed = false;

        /* the server is freed under a quiet raw connection */
        fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, UPGRADE_HEAD);
        expect_101(&rd);
        ck_assert(tserver_wait_connections(&ts, 1));
        tserver_stop(&ts);
        ck_assert_int_eq(es.closes, 3);
        ck_assert_int_eq(es.after_close, 0);
        ck_assert_uint_eq(es.received, 3); /* "abc" */
        ck_assert(creader_wait_closed(&rd));
        close(fd);
}
END_TEST

/* ---- refusals ---- */

static void nop_data(sp_http_request *req, const void *data, size_t len, void *userdata) {}

static const sp_http_raw_ops nop_ops = {.on_data = nop_data};

static int upgrade_code(sp_http_request *req, int status, const char *const *headers, const sp_http_raw_ops *ops)
{
        _cleanup_error_ sp_error *e = NULL;
        int r = sp_http_upgrade(req, status, headers, ops, NULL, &e);
        ck_assert(r == 0 || (e && r == -(int)e->code));
        return r;
}

static void started_handler(sp_http_request *req, void *userdata)
{
        ck_assert_int_eq(sp_http_stream_start(req, 200, "text/plain", -1), 0);
        const char *headers[] = {"Connection", "Upgrade", "Upgrade", "echo", NULL};
        ck_assert_int_eq(upgrade_code(req, 101, headers, &nop_ops), -SP_E_CONFLICT);
        ck_assert_int_eq(sp_http_stream_write(req, "started", 7), 0);
        ck_assert_int_eq(sp_http_stream_end(req), 0);
}

static void bad_handler(sp_http_request *req, void *userdata)
{
        const char *ok[] = {"Connection", "Upgrade", "Upgrade", "echo", NULL};
        const char *crlf[] = {"Upgrade", "echo\r\nX-Injected: 1", NULL};
        const char *lf[] = {"Upgrade", "echo\nX: 1", NULL};
        const char *name[] = {"Bad Name", "x", NULL};
        const char *odd[] = {"Upgrade", NULL};
        const char *cl[] = {"Content-Length", "0", NULL};
        const char *te[] = {"transfer-encoding", "chunked", NULL};
        const sp_http_raw_ops no_data = {.on_close = NULL};
        ck_assert_int_eq(upgrade_code(req, 200, ok, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 100, ok, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, crlf, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, lf, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, name, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, odd, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, cl, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, te, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, ok, NULL), -SP_E_INVALID);
        ck_assert_int_eq(upgrade_code(req, 101, ok, &no_data), -SP_E_INVALID);
        /* the raw functions on a request that was not upgraded */
        ck_assert_int_eq(sp_http_raw_write(req, "x", 1), -SP_E_INVALID);
        ck_assert_int_eq(sp_http_raw_shutdown_write(req), -SP_E_INVALID);
        sp_http_raw_pause(req);
        sp_http_raw_resume(req);
        sp_http_raw_close(req);
        /* nothing was sent: the answer is an ordinary one */
        sp_http_reply(req, 200, "text/plain", "ok", 2);
}

static void v10_handler(sp_http_request *req, void *userdata)
{
        const char *ok[] = {"Connection", "Upgrade", "Upgrade", "echo", NULL};
        ck_assert_int_eq(upgrade_code(req, 101, ok, &nop_ops), -SP_E_INVALID);
        sp_http_reply(req, 200, "text/plain", "http/1.0", 8);
}

static void unread_body(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        if (len == 0)
                sp_http_reply(req, 200, "text/plain", "read", 4);
}

static void body_handler(sp_http_request *req, void *userdata)
{
        const char *ok[] = {"Connection", "Upgrade", "Upgrade", "echo", NULL};
        ck_assert_int_eq(upgrade_code(req, 101, ok, &nop_ops), -SP_E_INVALID);
        ck_assert_int_eq(sp_http_request_read_body(req, unread_body, NULL, NULL), 0);
}

START_TEST(upgrade_refused)
{
        tserver ts;
        tserver_new(&ts, NULL);
        sp_http_route_opts stream = {.flags = SP_HTTP_ROUTE_STREAM_BODY};
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/started", started_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/bad", bad_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/v10", v10_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route_ex(ts.srv, "POST", "/body", &stream, body_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);
        const struct {
                const char *request, *body;
        } cases[] = {
                {"GET /started HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", "started"},
                {"GET /bad HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", "ok"},
                {"GET /v10 HTTP/1.0\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", "http/1.0"},
                {"POST /body HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: echo\r\nContent-Length: 5\r\n\r\n"
                 "12345",
                 "read"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_cresponse_ cresponse r = {0};
                one(ts.port, cases[i].request, &r);
                ck_assert_msg(r.status == 200, "case %zu: %d", i, r.status);
                ck_assert_str_eq(r.body.data, cases[i].body);
        }
        tserver_stop(&ts);
}
END_TEST

/* ---- timeouts ---- */

static void ping(int fd, creader *rd, const char *word)
{
        cli_send(fd, word);
        _cleanup_buf_ sp_buf got = SP_BUF_INIT;
        ck_assert(creader_bytes(rd, strlen(word), &got));
        ck_assert_str_eq(got.data, word);
}

START_TEST(upgrade_outlives_http_timeouts)
{
        /* The HTTP timeouts are tiny; an upgraded connection quiet for many
         * times as long is still there. */
        tserver ts;
        sp_http_config cfg = {.header_timeout_ms = 50, .body_timeout_ms = 50, .keepalive_timeout_ms = 50};
        start_echo(&ts, &cfg);
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, UPGRADE_HEAD);
        expect_101(&rd);
        usleep(500 * 1000);
        ping(fd, &rd, "still there");
        ck_assert_int_eq(es.closes, 0);
        close(fd);
        ck_assert(tsignal_wait(&es.closed_sig, 1));
        tserver_stop(&ts);

        /* Its own idle timeout: traffic keeps it open past the timeout, quiet
         * closes it (and on_close runs). */
        cfg = (sp_http_config){.raw_idle_timeout_ms = 500};
        start_echo(&ts, &cfg);
        fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd2 = {.fd = fd};
        cli_send(fd, UPGRADE_HEAD);
        expect_101(&rd2);
        int64_t start = mono_ms();
        while (mono_ms() - start < 1500) {
                ping(fd, &rd2, "p");
                usleep(50 * 1000);
        }
        ck_assert_int_eq(es.closes, 0);
        ck_assert(creader_wait_closed(&rd2));
        ck_assert_int_ge(mono_ms() - start, 1500);
        ck_assert(tsignal_wait(&es.closed_sig, 1));
        ck_assert_int_eq(es.eofs, 0);
        close(fd);
        tserver_stop(&ts);
}
END_TEST

/* ---- TLS ---- */

/* Reads from ssl into in until it holds n bytes; false at the end or on error. */
static bool ssl_read_to(SSL *ssl, sp_buf *in, size_t n)
{
        char buf[16384];
        while (in->len < n) {
                int r = SSL_read(ssl, buf, sizeof(buf));
                if (r <= 0)
                        return false;
                sp_buf_append(in, buf, (size_t)r, NULL);
        }
        return true;
}

START_TEST(upgrade_over_tls)
{
        tserver ts;
        echo_reset();
        tserver_new(&ts, NULL);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/ws", echo_handler, NULL, NULL), 0);
        SSL_CTX *sctx = self_signed_ctx();
        ck_assert_int_eq(sp_http_server_listen(ts.srv, "127.0.0.1:0", sctx, NULL), 0);
        SSL_CTX_free(sctx);
        ts.port = sp_http_server_port(ts.srv);
        ck_assert(pthread_create(&ts.thread, NULL, tserver_loop, &ts) == 0);

        SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
        SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
        int fd = cli_connect(ts.port);
        SSL *ssl = SSL_new(cctx);
        SSL_set_fd(ssl, fd);
        ck_assert_int_eq(SSL_connect(ssl), 1);
        /* the request and early bytes in one record */
        const char *first = UPGRADE_HEAD "early";
        ck_assert_int_eq(SSL_write(ssl, first, (int)strlen(first)), (int)strlen(first));
        _cleanup_buf_ sp_buf in = SP_BUF_INIT;
        char *end = NULL;
        while (!(end = in.data ? strstr(in.data, "\r\n\r\n") : NULL))
                ck_assert(ssl_read_to(ssl, &in, in.len + 1));
        ck_assert_msg(strncmp(in.data, "HTTP/1.1 101 Switching Protocols\r\n", 34) == 0, "got '%s'", in.data);
        ck_assert(strstr(in.data, "\r\nUpgrade: echo\r\n") != NULL);
        sp_buf_consume(&in, (size_t)(end + 4 - in.data));
        ck_assert(ssl_read_to(ssl, &in, 5));
        ck_assert_uint_eq(in.len, 5);
        ck_assert(memcmp(in.data, "early", 5) == 0);
        sp_buf_clear(&in);

        unsigned char buf[16384];
        for (uint64_t round = 0, off = 0; round < 32; round++, off += sizeof(buf)) {
                for (size_t i = 0; i < sizeof(buf); i++)
                        buf[i] = pattern(off + i);
                ck_assert_int_eq(SSL_write(ssl, buf, sizeof(buf)), (int)sizeof(buf));
                ck_assert(ssl_read_to(ssl, &in, sizeof(buf)));
                ck_assert_uint_eq(in.len, sizeof(buf));
                ck_assert(memcmp(in.data, buf, sizeof(buf)) == 0);
                sp_buf_clear(&in);
        }
        /* close_notify: the handler hears the end and shuts its side down
         * with its own close_notify, which ends the client's reading cleanly */
        ck_assert_int_ge(SSL_shutdown(ssl), 0);
        char c;
        int r = SSL_read(ssl, &c, 1);
        ck_assert_int_eq(r, 0);
        ck_assert_int_eq(SSL_get_error(ssl, r), SSL_ERROR_ZERO_RETURN);
        ck_assert(tsignal_wait(&es.closed_sig, 1));
        ck_assert(tserver_wait_connections(&ts, 0));
        ck_assert_int_eq(es.eofs, 1);
        ck_assert_int_eq(es.closes, 1);
        ck_assert_uint_eq(es.received, 5 + 32 * sizeof(buf));
        SSL_free(ssl);
        close(fd);
        SSL_CTX_free(cctx);
        tserver_stop(&ts);
}
END_TEST

/* ---- the client's end while output is queued ---- */

#define BANNER_TOTAL (8u * 1024 * 1024)

/* A handler that sends 8 MiB as soon as it upgrades, whatever the client
 * does, and closes its side once the client has ended and all is sent. */
static struct {
        uint64_t sent, received;
        size_t pending_at_eof;
        bool eof;
        int eofs, closes;
        tsignal blocked, eof_sig, closed;
} bn;

static void bn_produce(sp_http_request *req)
{
        unsigned char buf[65536];
        while (bn.sent < BANNER_TOTAL) {
                size_t n = BANNER_TOTAL - bn.sent < sizeof(buf) ? BANNER_TOTAL - bn.sent : sizeof(buf);
                for (size_t i = 0; i < n; i++)
                        buf[i] = pattern(bn.sent + i);
                int r = sp_http_raw_write(req, buf, n);
                ck_assert_int_ge(r, 0);
                bn.sent += n; /* queued even when the answer is to wait */
                if (r == SP_HTTP_WOULD_BLOCK) {
                        tsignal_post(&bn.blocked);
                        return;
                }
        }
        if (bn.eof)
                ck_assert_int_eq(sp_http_raw_shutdown_write(req), 0);
}

static void bn_writable(sp_http_request *req, void *userdata)
{
        bn_produce(req);
}

static void bn_data(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        bn.received += len;
}

static void bn_eof(sp_http_request *req, void *userdata)
{
        bn.eofs++;
        bn.eof = true;
        bn.pending_at_eof = sp_http_request_output_pending(req);
        tsignal_post(&bn.eof_sig);
        if (bn.sent == BANNER_TOTAL)
                ck_assert_int_eq(sp_http_raw_shutdown_write(req), 0);
}

static void bn_close(sp_http_request *req, void *userdata)
{
        bn.closes++;
        tsignal_post(&bn.closed);
}

static void banner_handler(sp_http_request *req, void *userdata)
{
        static const sp_http_raw_ops ops = {
                .on_data = bn_data, .on_eof = bn_eof, .on_writable = bn_writable, .on_close = bn_close};
        const char *headers[] = {"Connection", "Upgrade", "Upgrade", "echo", NULL};
        ck_assert_int_eq(sp_http_upgrade(req, 101, headers, &ops, NULL, NULL), 0);
        bn_produce(req);
}

/* The client's end of the connection, over TCP or TLS. */
typedef struct cio {
        int fd;
        SSL *ssl;
} cio;

static void cio_send(cio *io, const char *s)
{
        if (io->ssl)
                ck_assert_int_eq(SSL_write(io->ssl, s, (int)strlen(s)), (int)strlen(s));
        else
                cli_send(io->fd, s);
}

/* Reads what comes into in; 0 at a clean end, -1 on error. */
static int cio_more(cio *io, sp_buf *in)
{
        char buf[65536];
        int n = io->ssl ? SSL_read(io->ssl, buf, sizeof(buf)) : (int)recv(io->fd, buf, sizeof(buf), 0);
        if (n > 0) {
                sp_buf_append(in, buf, (size_t)n, NULL);
                return n;
        }
        if (io->ssl)
                return SSL_get_error(io->ssl, n) == SSL_ERROR_ZERO_RETURN ? 0 : -1;
        return n;
}

typedef struct banner_count {
        uint64_t sent;
} banner_count;

static void banner_count_cb(void *arg)
{
        ((banner_count *)arg)->sent = bn.sent;
}

static void banner_run(bool tls)
{
        memset(&bn, 0, sizeof(bn));
        tsignal_init(&bn.blocked);
        tsignal_init(&bn.eof_sig);
        tsignal_init(&bn.closed);
        tserver ts;
        tserver_new(&ts, NULL);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/ws", banner_handler, NULL, NULL), 0);
        SSL_CTX *sctx = tls ? self_signed_ctx() : NULL;
        ck_assert_int_eq(sp_http_server_listen(ts.srv, "127.0.0.1:0", sctx, NULL), 0);
        if (sctx)
                SSL_CTX_free(sctx);
        ts.port = sp_http_server_port(ts.srv);
        ck_assert(pthread_create(&ts.thread, NULL, tserver_loop, &ts) == 0);

        SSL_CTX *cctx = NULL;
        cio io = {.fd = cli_connect(ts.port)};
        if (tls) {
                cctx = SSL_CTX_new(TLS_client_method());
                SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
                io.ssl = SSL_new(cctx);
                SSL_set_fd(io.ssl, io.fd);
                ck_assert_int_eq(SSL_connect(io.ssl), 1);
        }
        cio_send(&io, UPGRADE_HEAD);
        _cleanup_buf_ sp_buf in = SP_BUF_INIT;
        char *end = NULL;
        while (!(end = in.data ? strstr(in.data, "\r\n\r\n") : NULL))
                ck_assert_int_gt(cio_more(&io, &in), 0);
        ck_assert(strncmp(in.data, "HTTP/1.1 101 ", 13) == 0);
        sp_buf_consume(&in, (size_t)(end + 4 - in.data));

        /* The client reads no more until the handler has stopped, waiting
         * with output queued, then sends a byte and ends its side. */
        ck_assert(tsignal_wait(&bn.blocked, 1));
        banner_count prev = {0}, cur = {0};
        int steady = 0;
        for (int64_t deadline = mono_ms() + TEST_TIMEOUT_MS; steady < 10 && mono_ms() < deadline;) {
                usleep(20 * 1000);
                tserver_call(&ts, banner_count_cb, &cur);
                steady = cur.sent == prev.sent ? steady + 1 : 0;
                prev = cur;
        }
        ck_assert_int_eq(steady, 10);
        cio_send(&io, "x");
        if (tls)
                ck_assert_int_ge(SSL_shutdown(io.ssl), 0);
        else
                ck_assert_int_eq(shutdown(io.fd, SHUT_WR), 0);
        ck_assert(tsignal_wait(&bn.eof_sig, 1));
        ck_assert_uint_gt(bn.pending_at_eof, 0);

        /* The queued output and the rest still come, then the server's end. */
        int r;
        while ((r = cio_more(&io, &in)) > 0) {
        }
        ck_assert_int_eq(r, 0);
        ck_assert_uint_eq(in.len, BANNER_TOTAL);
        for (size_t i = 0; i < BANNER_TOTAL; i++)
                if ((unsigned char)in.data[i] != pattern(i))
                        ck_abort_msg("byte %zu differs", i);
        ck_assert(tsignal_wait(&bn.closed, 1));
        ck_assert(tserver_wait_connections(&ts, 0));
        ck_assert_int_eq(bn.eofs, 1);
        ck_assert_int_eq(bn.closes, 1);
        ck_assert_uint_eq(bn.received, 1);
        if (io.ssl)
                SSL_free(io.ssl);
        if (cctx)
                SSL_CTX_free(cctx);
        close(io.fd);
        tserver_stop(&ts);
}

START_TEST(upgrade_client_end_with_output_queued)
{
        banner_run(false);
        banner_run(true);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("http_ingress");
        TCase *tc = tcase_create("ingress");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, host_handler_takes_matching_hosts);
        tcase_add_test(tc, host_handler_streams_body);
        tcase_add_test(tc, any_method_routes);
        tcase_add_test(tc, upgrade_echo_8mib_early_bytes_backpressure);
        tcase_add_test(tc, upgrade_half_close);
        tcase_add_test(tc, upgrade_close_callback_once);
        tcase_add_test(tc, upgrade_refused);
        tcase_add_test(tc, upgrade_outlives_http_timeouts);
        tcase_add_test(tc, upgrade_over_tls);
        tcase_add_test(tc, upgrade_client_end_with_output_queued);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
