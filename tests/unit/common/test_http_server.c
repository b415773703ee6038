/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the HTTP server over real loopback sockets — routing, the error
 * shape, keep-alive and pipelining, bodies, limits, malformed and smuggled
 * requests, timeouts, asynchronous answers, connection limits, unix sockets,
 * IPv6 and TLS. */
#include <stdatomic.h>
#include <stdio.h>

#include "space/cleanup.h"
#include "test_http_util.h"

/* ---- handlers ---- */

static atomic_int handled;

/* Echoes what the request looked like as JSON. */
static void echo_handler(sp_http_request *req, void *userdata)
{
        atomic_fetch_add(&handled, 1);
        _cleanup_json_ json_object *o = json_object_new_object();
        const char *tag = userdata;
        size_t blen;
        const char *body = sp_http_request_body(req, &blen);
        json_object_object_add(o, "tag", json_object_new_string(tag ? tag : ""));
        json_object_object_add(o, "method", json_object_new_string(sp_http_request_method(req)));
        json_object_object_add(o, "path", json_object_new_string(sp_http_request_path(req)));
        const char *names[] = {"id", "path", "name"};
        for (size_t i = 0; i < 3; i++) {
                const char *v = sp_http_request_param(req, names[i]);
                if (v) {
                        char key[32];
                        snprintf(key, sizeof(key), "param_%s", names[i]);
                        json_object_object_add(o, key, json_object_new_string(v));
                }
        }
        const char *q = sp_http_request_query(req, "x");
        if (q)
                json_object_object_add(o, "query_x", json_object_new_string(q));
        const char *h = sp_http_request_header(req, "x-thing");
        if (h)
                json_object_object_add(o, "header", json_object_new_string(h));
        json_object_object_add(o, "body", json_object_new_string_len(body, (int)blen));
        json_object_object_add(o, "remote", json_object_new_string(sp_http_request_remote(req)));
        sp_http_response_header(req, "X-Extra", "yes");
        sp_http_reply_json(req, 200, o);
}

static void fixed_handler(sp_http_request *req, void *userdata)
{
        sp_http_reply(req, 200, "text/plain", "hello world", 11);
}

static void silent_handler(sp_http_request *req, void *userdata)
{
        (void)req; /* answers nothing and keeps no reference */
}

static void error_handler(sp_http_request *req, void *userdata)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_CONFLICT, "sandbox %s is busy", sp_http_request_param(req, "id"));
        sp_http_reply_error(req, e);
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

static void add_routes(sp_http_server *srv)
{
        ck_assert_int_eq(sp_http_route(srv, "GET", "/v1/sandboxes/{id}/files/*path", echo_handler, "files", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/v1/sandboxes/{id}", echo_handler, "get", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/v1/sandboxes/special", echo_handler, "special", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/v1/sandboxes", echo_handler, "list", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "POST", "/v1/sandboxes", echo_handler, "create", NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "DELETE", "/v1/sandboxes/{id}", error_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/silent", silent_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/fixed", fixed_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(srv, "POST", "/echo", echo_handler, "echo", NULL), 0);
        sp_http_route_opts small = {.max_body = 100};
        ck_assert_int_eq(sp_http_route_ex(srv, "POST", "/small", &small, echo_handler, "small", NULL), 0);
}

static void start(tserver *ts, const sp_http_config *cfg)
{
        tserver_new(ts, cfg);
        add_routes(ts->srv);
        tserver_run(ts, NULL);
}

/* ---- tests ---- */

START_TEST(route_registration_errors)
{
        struct event_base *base = event_base_new();
        sp_http_server *srv = sp_http_server_new(base, NULL, NULL);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(sp_http_route(srv, "GET", "/a/{id}", echo_handler, NULL, &e), 0);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/a/{id}", echo_handler, NULL, &e), -SP_E_CONFLICT);
        const char *bad[] = {"a", "/a/{}", "/a/{1x}", "/*rest/x", "/a/{id}/{id}", "/a/%20", "/a/..", "/a b"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                sp_error_free(e);
                e = NULL;
                ck_assert_msg(sp_http_route(srv, "GET", bad[i], echo_handler, NULL, &e) == -SP_E_INVALID, "%s", bad[i]);
        }
        ck_assert_int_eq(sp_http_route(srv, "G T", "/b", echo_handler, NULL, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_http_server_listen(srv, "nonsense", NULL, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_http_server_listen(srv, "127.0.0.1:99999", NULL, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_http_server_port(srv), -1);
        sp_http_server_free(srv);
        event_base_free(base);
}
END_TEST

/* Collects "METHOD PATTERN\n" lines; stops with 7 after `stop_after` routes (0: never). */
typedef struct route_walk {
        sp_buf lines;
        size_t seen, stop_after;
} route_walk;

static int collect_route(const char *method, const char *pattern, void *userdata)
{
        route_walk *w = userdata;
        sp_buf_appendf(&w->lines, NULL, "%s %s\n", method, pattern);
        return ++w->seen == w->stop_after ? 7 : 0;
}

START_TEST(foreach_route_lists_registered_routes)
{
        struct event_base *base = event_base_new();
        sp_http_server *srv = sp_http_server_new(base, NULL, NULL);
        route_walk w = {0};
        ck_assert_int_eq(sp_http_server_foreach_route(srv, collect_route, &w), 0);
        ck_assert_uint_eq(w.seen, 0);

        add_routes(srv);
        /* Refused registrations leave no trace in the table. */
        ck_assert_int_eq(sp_http_route(srv, "GET", "/fixed", fixed_handler, NULL, NULL), -SP_E_CONFLICT);
        ck_assert_int_eq(sp_http_route(srv, "GET", "/bad/{}", fixed_handler, NULL, NULL), -SP_E_INVALID);
        ck_assert_int_eq(sp_http_server_foreach_route(srv, collect_route, &w), 0);
        ck_assert_str_eq(w.lines.data, "GET /v1/sandboxes/{id}/files/*path\n"
                                       "GET /v1/sandboxes/{id}\n"
                                       "GET /v1/sandboxes/special\n"
                                       "GET /v1/sandboxes\n"
                                       "POST /v1/sandboxes\n"
                                       "DELETE /v1/sandboxes/{id}\n"
                                       "GET /silent\n"
                                       "GET /fixed\n"
                                       "POST /echo\n"
                                       "POST /small\n");
        ck_assert_uint_eq(w.seen, 10);

        /* A non-zero return stops the walk and is passed on. */
        sp_buf_clear(&w.lines);
        w.seen = 0;
        w.stop_after = 3;
        ck_assert_int_eq(sp_http_server_foreach_route(srv, collect_route, &w), 7);
        ck_assert_uint_eq(w.seen, 3);
        ck_assert_str_eq(w.lines.data, "GET /v1/sandboxes/{id}/files/*path\n"
                                       "GET /v1/sandboxes/{id}\n"
                                       "GET /v1/sandboxes/special\n");
        sp_buf_free(&w.lines);
        sp_http_server_free(srv);
        event_base_free(base);
}
END_TEST

START_TEST(routing_params_and_request_ids)
{
        tserver ts;
        start(&ts, NULL);
        {
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port,
                            "GET /v1/sandboxes/sbx_1/files/dir/a%20b.txt?x=y%21&z HTTP/1.1\r\nHost: h\r\n"
                            "X-Thing: thing\r\nX-Request-Id: abc-123\r\n\r\n",
                            &r);
                ck_assert_int_eq(r.status, 200);
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "tag"), "files");
                ck_assert_str_eq(jstr(o, "param_id"), "sbx_1");
                ck_assert_str_eq(jstr(o, "param_path"), "dir/a b.txt");
                ck_assert_str_eq(jstr(o, "path"), "/v1/sandboxes/sbx_1/files/dir/a b.txt");
                ck_assert_str_eq(jstr(o, "query_x"), "y!");
                ck_assert_str_eq(jstr(o, "header"), "thing");
                ck_assert(strncmp(jstr(o, "remote"), "127.0.0.1:", 10) == 0);
                char v[128];
                ck_assert(cresponse_header(&r, "x-request-id", v, sizeof(v)));
                ck_assert_str_eq(v, "abc-123");
                ck_assert(cresponse_header(&r, "content-type", v, sizeof(v)));
                ck_assert_str_eq(v, "application/json");
                ck_assert(cresponse_header(&r, "x-extra", v, sizeof(v)));
                ck_assert(cresponse_header(&r, "date", v, sizeof(v)));
        }
        {
                /* literal segments win over parameters; the rest may be empty */
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "GET /v1/sandboxes/special HTTP/1.1\r\nHost: h\r\nX-Request-Id: bad id!\r\n\r\n",
                            &r);
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "tag"), "special");
                char v[128];
                ck_assert(cresponse_header(&r, "x-request-id", v, sizeof(v)));
                ck_assert(strncmp(v, "req_", 4) == 0);
        }
        {
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "GET /v1/sandboxes/sbx%2F2/files HTTP/1.1\r\nHost: h\r\n\r\n", &r);
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "tag"), "files");
                ck_assert_str_eq(jstr(o, "param_id"), "sbx/2");
                ck_assert_str_eq(jstr(o, "param_path"), "");
        }
        {
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "GET /v1/sandboxes/sbx_3 HTTP/1.1\r\nHost: h\r\n\r\n", &r);
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "tag"), "get");
                ck_assert_str_eq(jstr(o, "param_id"), "sbx_3");
        }
        {
                /* an error from a handler in the one shape */
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "DELETE /v1/sandboxes/sbx_4 HTTP/1.1\r\nHost: h\r\n\r\n", &r);
                ck_assert_int_eq(r.status, 409);
                assert_error_shape(&r.body, "conflict");
                ck_assert(strstr(r.body.data, "sandbox sbx_4 is busy"));
        }
        tserver_stop(&ts);
}
END_TEST

START_TEST(not_found_method_not_allowed_head)
{
        tserver ts;
        start(&ts, NULL);
        {
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "GET /nope HTTP/1.1\r\nHost: h\r\n\r\n", &r);
                ck_assert_int_eq(r.status, 404);
                assert_error_shape(&r.body, "not_found");
        }
        {
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "PUT /v1/sandboxes HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", &r);
                ck_assert_int_eq(r.status, 405);
                assert_error_shape(&r.body, "method_not_allowed");
                char v[128];
                ck_assert(cresponse_header(&r, "allow", v, sizeof(v)));
                ck_assert_str_eq(v, "GET, HEAD, POST");
        }
        {
                /* HEAD answers like GET without the body */
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, "HEAD /fixed HTTP/1.1\r\nHost: h\r\n\r\nGET /fixed HTTP/1.1\r\nHost: h\r\n\r\n");
                _cleanup_cresponse_ cresponse h = {0}, g = {0};
                ck_assert(creader_response_ex(&rd, &h, true));
                ck_assert_int_eq(h.status, 200);
                ck_assert(creader_response(&rd, &g));
                char v[32];
                ck_assert(cresponse_header(&h, "content-length", v, sizeof(v)));
                ck_assert_str_eq(v, "11");
                ck_assert_str_eq(g.body.data, "hello world");
                close(fd);
        }
        tserver_stop(&ts);
}
END_TEST

START_TEST(keepalive_and_pipelining)
{
        tserver ts;
        start(&ts, NULL);
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        const char *paths[] = {"/v1/sandboxes/a", "/v1/sandboxes/b", "/v1/sandboxes/c", "/v1/sandboxes/d",
                               "/v1/sandboxes/e"};
        /* two requests one after the other on one connection */
        for (int i = 0; i < 2; i++) {
                char req[256];
                snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", paths[i]);
                cli_send(fd, req);
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "path"), paths[i]);
        }
        /* three pipelined in one write (one with a body); answered in order */
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        sp_buf_appendf(&many, NULL, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", paths[2]);
        sp_buf_appendf(&many, NULL, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc");
        sp_buf_appendf(&many, NULL, "GET %s HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", paths[4]);
        cli_send(fd, many.data);
        for (int i = 2; i < 5; i++) {
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                _cleanup_json_ json_object *o = body_json(&r);
                if (i == 3) {
                        ck_assert_str_eq(jstr(o, "body"), "abc");
                } else {
                        ck_assert_str_eq(jstr(o, "path"), paths[i]);
                }
                char v[32];
                ck_assert_int_eq(cresponse_header(&r, "connection", v, sizeof(v)), i == 4);
        }
        ck_assert(cli_wait_closed(fd));
        close(fd);

        /* HTTP/1.0 closes unless asked to keep the connection */
        fd = cli_connect(ts.port);
        rd.fd = fd;
        sp_buf_clear(&rd.in);
        cli_send(fd, "GET /v1/sandboxes HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        {
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                char v[32];
                ck_assert(cresponse_header(&r, "connection", v, sizeof(v)));
                ck_assert_str_eq(v, "keep-alive");
        }
        cli_send(fd, "GET /v1/sandboxes HTTP/1.0\r\n\r\n");
        {
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 200);
        }
        ck_assert(cli_wait_closed(fd));
        close(fd);
        tserver_stop(&ts);
}
END_TEST

START_TEST(chunked_request_body_and_continue)
{
        tserver ts;
        start(&ts, NULL);
        {
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port,
                            "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
                            "5\r\nhello\r\n1;ext=x\r\n,\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n",
                            &r);
                ck_assert_int_eq(r.status, 200);
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "body"), "hello, world");
        }
        {
                /* Expect: 100-continue: the interim answer comes before the body is sent */
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, "POST /echo HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n");
                _cleanup_cresponse_ cresponse c = {0}, r = {0};
                ck_assert(creader_head(&rd, &c));
                ck_assert_int_eq(c.status, 100);
                cli_send(fd, "data");
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 200);
                _cleanup_json_ json_object *o = body_json(&r);
                ck_assert_str_eq(jstr(o, "body"), "data");
                close(fd);
        }
        tserver_stop(&ts);
}
END_TEST

START_TEST(oversized_headers_431_then_serves_on)
{
        tserver ts;
        start(&ts, NULL);
        _cleanup_buf_ sp_buf req = SP_BUF_INIT;
        sp_buf_append_str(&req, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n", NULL);
        for (int i = 0; i < 200; i++)
                sp_buf_appendf(&req, NULL, "X-Filler-%d: %0100d\r\n", i, i);
        sp_buf_append_str(&req, "\r\n", NULL);
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, req.data);
        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_response(&rd, &r));
        ck_assert_int_eq(r.status, 431);
        assert_error_shape(&r.body, "too_large");
        ck_assert(cli_wait_closed(fd));
        close(fd);

        /* too many (small) header fields */
        sp_buf_clear(&req);
        sp_buf_append_str(&req, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n", NULL);
        for (int i = 0; i < 101; i++)
                sp_buf_appendf(&req, NULL, "X-%d: 1\r\n", i);
        sp_buf_append_str(&req, "\r\n", NULL);
        _cleanup_cresponse_ cresponse m = {0};
        cli_request(ts.port, req.data, &m);
        ck_assert_int_eq(m.status, 431);

        /* a long URI */
        sp_buf_clear(&req);
        sp_buf_append_str(&req, "GET /", NULL);
        for (int i = 0; i < 9000; i++)
                sp_buf_append_str(&req, "a", NULL);
        sp_buf_append_str(&req, " HTTP/1.1\r\nHost: h\r\n\r\n", NULL);
        _cleanup_cresponse_ cresponse u = {0};
        cli_request(ts.port, req.data, &u);
        ck_assert_int_eq(u.status, 414);
        assert_error_shape(&u.body, "too_large");

        _cleanup_cresponse_ cresponse ok = {0};
        cli_request(ts.port, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n", &ok);
        ck_assert_int_eq(ok.status, 200);
        tserver_stop(&ts);
}
END_TEST

START_TEST(oversized_body_413)
{
        tserver ts;
        start(&ts, NULL);
        atomic_store(&handled, 0);
        {
                /* declared too large: answered before the body is sent */
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 2000000\r\n\r\n", &r);
                ck_assert_int_eq(r.status, 413);
                assert_error_shape(&r.body, "too_large");
        }
        {
                /* with Expect: no 100 Continue, straight to 413 */
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port,
                            "POST /small HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 101\r\n\r\n",
                            &r);
                ck_assert_int_eq(r.status, 413);
        }
        {
                /* chunked past the route's limit, body actually sent */
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, "POST /small HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n");
                char chunk[64];
                memset(chunk, 'x', sizeof(chunk));
                for (int i = 0; i < 2; i++) {
                        cli_send(fd, "40\r\n");
                        cli_send_n(fd, chunk, sizeof(chunk));
                        cli_send(fd, "\r\n");
                }
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 413);
                ck_assert(cli_wait_closed(fd));
                close(fd);
        }
        ck_assert_int_eq(atomic_load(&handled), 0);
        tserver_stop(&ts);
}
END_TEST

START_TEST(malformed_requests_400)
{
        tserver ts;
        start(&ts, NULL);
        atomic_store(&handled, 0);
        const char *bad[] = {
                "GARBAGE\r\n\r\n",
                "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\nNo colon here\r\n\r\n",
                "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\nX: a\r\n folded\r\n\r\n",
                "GET /v1/sandboxes HTTP/1.1\nHost: h\n\n",
                "GET /v1/sandboxes HTTP/1.1\r\nHost: h\rX: 1\r\n\r\n",
                "GET /v1/sandboxes/%zz HTTP/1.1\r\nHost: h\r\n\r\n",
                "GET /v1/../etc HTTP/1.1\r\nHost: h\r\n\r\n",
                "GET /v1/sandboxes HTTP/1.1\r\n\r\n",
                "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: abc\r\n\r\n",
                "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nxyz\r\n",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, bad[i]);
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert_msg(creader_response(&rd, &r), "no answer to %s", bad[i]);
                ck_assert_msg(r.status == 400, "%s: %d", bad[i], r.status);
                assert_error_shape(&r.body, "invalid_argument");
                char v[32];
                ck_assert(cresponse_header(&r, "connection", v, sizeof(v)));
                ck_assert_str_eq(v, "close");
                ck_assert(cli_wait_closed(fd));
                close(fd);
        }
        {
                _cleanup_cresponse_ cresponse r = {0};
                cli_request(ts.port, "GET / HTTP/3.0\r\nHost: h\r\n\r\n", &r);
                ck_assert_int_eq(r.status, 505);
                assert_error_shape(&r.body, "unsupported");
        }
        ck_assert_int_eq(atomic_load(&handled), 0);
        tserver_stop(&ts);
}
END_TEST

START_TEST(smuggling_cl_te_rejected)
{
        tserver ts;
        start(&ts, NULL);
        atomic_store(&handled, 0);
        const char *attacks[] = {
                /* CL.TE: a front end using Content-Length would forward the smuggled GET as body */
                "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 45\r\nTransfer-Encoding: chunked\r\n\r\n"
                "0\r\n\r\nGET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n",
                /* TE.CL */
                "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
                "8\r\nSMUGGLED\r\n0\r\n\r\n",
                /* obfuscated TE */
                "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-encoding: x\r\n\r\n0\r\n\r\n",
                "POST /echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\tchunked, identity\r\n\r\n0\r\n\r\n",
                /* duplicate, differing Content-Length */
                "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nContent-Length: 45\r\n\r\n"
                "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(attacks); i++) {
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, attacks[i]);
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_msg(r.status == 400, "attack %zu: %d", i, r.status);
                assert_error_shape(&r.body, "invalid_argument");
                /* nothing else is answered on that connection */
                ck_assert(creader_wait_closed(&rd));
                ck_assert_uint_eq(rd.in.len, 0);
                close(fd);
        }
        ck_assert_int_eq(atomic_load(&handled), 0);
        tserver_stop(&ts);
}
END_TEST

START_TEST(timeouts)
{
        tserver ts;
        sp_http_config cfg = {.header_timeout_ms = 200, .keepalive_timeout_ms = 300, .body_timeout_ms = 200};
        start(&ts, &cfg);
        {
                /* idle after connect: closed silently */
                int64_t t0 = mono_ms();
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                ck_assert(!creader_more(&rd));
                ck_assert_uint_eq(rd.in.len, 0);
                ck_assert_int_ge(mono_ms() - t0, 190);
                close(fd);
        }
        {
                /* a request that stops halfway through its headers: 408, closed */
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n");
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 408);
                assert_error_shape(&r.body, "timeout");
                ck_assert(cli_wait_closed(fd));
                close(fd);
        }
        {
                /* trickling bytes does not extend the header deadline */
                int64_t t0 = mono_ms();
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd}; /* closes fd at the end of the scope */
                (void)rd;
                bool closed = false;
                for (int i = 0; i < 100 && !closed; i++) {
                        if (send(fd, "X", 1, MSG_NOSIGNAL) != 1)
                                closed = true;
                        usleep(20000);
                        char c;
                        if (recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK) >= 0)
                                closed = true;
                }
                ck_assert(closed);
                ck_assert_int_lt(mono_ms() - t0, 1500);
                close(fd);
        }
        {
                /* a body that stalls: 408 */
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                cli_send(fd, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nabc");
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 408);
                close(fd);
        }
        {
                /* keep-alive idle: closed after the keep-alive timeout (which starts
                 * after the request, so it cannot have run before t0) */
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                int64_t t0 = mono_ms();
                cli_send(fd, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n");
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert(cli_wait_closed(fd));
                ck_assert_int_ge(mono_ms() - t0, 290);
                close(fd);
        }
        ck_assert(tserver_wait_connections(&ts, 0));
        tserver_stop(&ts);
}
END_TEST

/* ---- asynchronous answers ---- */

typedef struct async_state {
        struct event_base *base;
        sp_http_request *req;
        tsignal called, closed, replied;
        int late_reply; /* what the reply after the disconnect returned */
        char late_path[64];
        bool connected_after;
} async_state;

static async_state async;

static void later_reply_cb(evutil_socket_t fd, short what, void *arg)
{
        sp_http_request *req = TAKE_PTR(async.req);
        async.late_reply = sp_http_reply(req, 200, "text/plain", "late", 4);
        snprintf(async.late_path, sizeof(async.late_path), "%s", sp_http_request_path(req));
        async.connected_after = sp_http_request_connected(req);
        sp_http_request_unref(req);
        tsignal_post(&async.replied);
}

static void async_on_close(sp_http_request *req, void *userdata)
{
        tsignal_post(&async.closed);
        /* answer later, from the loop, after the client has gone */
        struct timeval tv = {0, 1000};
        event_base_once(async.base, -1, EV_TIMEOUT, later_reply_cb, NULL, &tv);
}

static void async_handler(sp_http_request *req, void *userdata)
{
        async.req = sp_http_request_ref(req);
        if (userdata) {
                sp_http_request_on_close(req, async_on_close, NULL);
        } else {
                struct timeval tv = {0, 20000};
                event_base_once(async.base, -1, EV_TIMEOUT, later_reply_cb, NULL, &tv);
        }
        tsignal_post(&async.called);
}

START_TEST(async_reply_and_disconnect)
{
        tserver ts;
        tserver_new(&ts, NULL);
        async.base = ts.base;
        tsignal_init(&async.called);
        tsignal_init(&async.closed);
        tsignal_init(&async.replied);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/later", async_handler, NULL, NULL), 0);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/gone", async_handler, "close", NULL), 0);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/silent", silent_handler, NULL, NULL), 0);
        tserver_run(&ts, NULL);

        /* answered 20 ms later, from a timer */
        int fd = cli_connect(ts.port);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, "GET /later HTTP/1.1\r\nHost: h\r\n\r\n");
        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_response(&rd, &r));
        ck_assert_int_eq(r.status, 200);
        ck_assert_str_eq(r.body.data, "late");
        ck_assert(tsignal_wait(&async.replied, 1));
        ck_assert_int_eq(async.late_reply, 0);

        /* the client half-closes after its request: it still gets the answer, then the server closes */
        int fh = cli_connect(ts.port);
        {
                _cleanup_creader_ creader hrd = {.fd = fh};
                cli_send(fh, "GET /later HTTP/1.1\r\nHost: h\r\n\r\n");
                ck_assert_int_eq(shutdown(fh, SHUT_WR), 0);
                _cleanup_cresponse_ cresponse h = {0};
                ck_assert(creader_response(&hrd, &h));
                ck_assert_int_eq(h.status, 200);
                ck_assert_str_eq(h.body.data, "late");
                ck_assert(cli_wait_closed(fh));
                ck_assert(tsignal_wait(&async.called, 2));
                ck_assert(tsignal_wait(&async.replied, 2));
        }

        /* the client resets the connection before the answer: close callback, then the reply is a no-op
         * (a plain close reads like a half-close: it is noticed once the answer is written) */
        int fd2 = cli_connect(ts.port);
        cli_send(fd2, "GET /gone HTTP/1.1\r\nHost: h\r\n\r\n");
        ck_assert(tsignal_wait(&async.called, 3));
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        ck_assert_int_eq(setsockopt(fd2, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
        close(fd2);
        ck_assert(tsignal_wait(&async.closed, 1));
        ck_assert(tsignal_wait(&async.replied, 3));
        ck_assert_int_eq(async.late_reply, -SP_E_UNAVAILABLE);
        ck_assert_str_eq(async.late_path, "/gone");
        ck_assert(!async.connected_after);

        /* the first connection still works; a handler that never answers gets a 500 */
        cli_send(fd, "GET /silent HTTP/1.1\r\nHost: h\r\n\r\n");
        _cleanup_cresponse_ cresponse s = {0};
        ck_assert(creader_response(&rd, &s));
        ck_assert_int_eq(s.status, 500);
        assert_error_shape(&s.body, "internal");
        close(fd);
        tserver_stop(&ts);
}
END_TEST

START_TEST(async_request_outlives_server)
{
        tserver ts;
        tserver_new(&ts, NULL);
        async.base = ts.base;
        tsignal_init(&async.called);
        tsignal_init(&async.closed);
        ck_assert_int_eq(sp_http_route(ts.srv, "GET", "/hold", async_handler, "close", NULL), 0);
        tserver_run(&ts, NULL);
        int fd = cli_connect(ts.port);
        cli_send(fd, "GET /hold HTTP/1.1\r\nHost: h\r\n\r\n");
        ck_assert(tsignal_wait(&async.called, 1));
        /* freeing the server runs the close callback; the held request stays usable */
        event_base_loopbreak(ts.base);
        pthread_join(ts.thread, NULL);
        sp_http_server_free(ts.srv);
        ck_assert_int_eq(async.closed.count, 1);
        sp_http_request *req = TAKE_PTR(async.req);
        ck_assert_ptr_nonnull(req);
        ck_assert_str_eq(sp_http_request_path(req), "/hold");
        ck_assert_int_eq(sp_http_reply(req, 200, NULL, "x", 1), -SP_E_UNAVAILABLE);
        sp_http_request_unref(req);
        event_base_free(ts.base);
        close(fd);
}
END_TEST

START_TEST(connection_limit)
{
        tserver ts;
        sp_http_config cfg = {.max_connections = 2};
        start(&ts, &cfg);
        int fds[2];
        for (int i = 0; i < 2; i++) {
                fds[i] = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fds[i]};
                cli_send(fds[i], "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n");
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 200);
        }
        {
                int fd = cli_connect(ts.port);
                _cleanup_creader_ creader rd = {.fd = fd};
                _cleanup_cresponse_ cresponse r = {0};
                ck_assert(creader_response(&rd, &r));
                ck_assert_int_eq(r.status, 503);
                assert_error_shape(&r.body, "unavailable");
                ck_assert(cli_wait_closed(fd));
                close(fd);
        }
        close(fds[0]);
        ck_assert(tserver_wait_connections(&ts, 1));
        _cleanup_cresponse_ cresponse ok = {0};
        cli_request(ts.port, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n", &ok);
        ck_assert_int_eq(ok.status, 200);
        close(fds[1]);
        tserver_stop(&ts);
}
END_TEST

START_TEST(unix_socket_and_ipv6)
{
        _cleanup_free_ char *dir = sp_test_tmpdir("http");
        char path[512];
        snprintf(path, sizeof(path), "%s/api.sock", dir);
        char address[600];
        snprintf(address, sizeof(address), "unix:%s", path);

        tserver ts;
        tserver_new(&ts, NULL);
        add_routes(ts.srv);
        int v6 = sp_http_server_listen(ts.srv, "[::1]:0", NULL, NULL);
        tserver_run(&ts, address);

        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        ck_assert_uint_lt(strlen(path), sizeof(sun.sun_path));
        memcpy(sun.sun_path, path, strlen(path) + 1);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
        cli_timeouts(fd, TEST_TIMEOUT_MS);
        _cleanup_creader_ creader rd = {.fd = fd};
        cli_send(fd, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n");
        _cleanup_cresponse_ cresponse r = {0};
        ck_assert(creader_response(&rd, &r));
        _cleanup_json_ json_object *o = body_json(&r);
        ck_assert_str_eq(jstr(o, "remote"), "unix");
        close(fd);

        if (v6 == 0) {
                ck_assert_int_eq(ts.port, sp_http_server_port(ts.srv));
                int fd6 = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6,
                                            .sin6_port = htons((uint16_t)ts.port),
                                            .sin6_addr = IN6ADDR_LOOPBACK_INIT};
                ck_assert_int_eq(connect(fd6, (struct sockaddr *)&sin6, sizeof(sin6)), 0);
                cli_timeouts(fd6, TEST_TIMEOUT_MS);
                _cleanup_creader_ creader rd6 = {.fd = fd6};
                cli_send(fd6, "GET /v1/sandboxes HTTP/1.1\r\nHost: h\r\n\r\n");
                _cleanup_cresponse_ cresponse r6 = {0};
                ck_assert(creader_response(&rd6, &r6));
                _cleanup_json_ json_object *o6 = body_json(&r6);
                ck_assert(strncmp(jstr(o6, "remote"), "[::1]:", 6) == 0);
                close(fd6);
        } else {
                fprintf(stderr, "note: no IPv6 loopback here, IPv6 part skipped\n");
        }
        tserver_stop(&ts);
        ck_assert_int_ne(access(path, F_OK), 0); /* the socket file is removed */
        sp_test_tmpdir_remove(dir);
}
END_TEST

/* ---- TLS ---- */

START_TEST(https)
{
        tserver ts;
        tserver_new(&ts, NULL);
        add_routes(ts.srv);
        SSL_CTX *sctx = self_signed_ctx();
        ck_assert_int_eq(sp_http_server_listen(ts.srv, "127.0.0.1:0", sctx, NULL), 0);
        SSL_CTX_free(sctx); /* the server holds its own reference */
        ts.port = sp_http_server_port(ts.srv);
        ck_assert(pthread_create(&ts.thread, NULL, tserver_loop, &ts) == 0);

        SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
        SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, NULL);
        for (int round = 0; round < 2; round++) {
                int fd = cli_connect(ts.port);
                SSL *ssl = SSL_new(cctx);
                SSL_set_fd(ssl, fd);
                ck_assert_int_eq(SSL_connect(ssl), 1);
                const char *req = "GET /v1/sandboxes/tls HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n";
                ck_assert_int_eq(SSL_write(ssl, req, (int)strlen(req)), (int)strlen(req));
                _cleanup_buf_ sp_buf all = SP_BUF_INIT;
                char buf[4096];
                int n;
                while ((n = SSL_read(ssl, buf, sizeof(buf))) > 0)
                        sp_buf_append(&all, buf, (size_t)n, NULL);
                ck_assert_msg(all.data && strncmp(all.data, "HTTP/1.1 200 OK\r\n", 17) == 0, "got '%s'", all.data);
                ck_assert(strstr(all.data, "\"param_id\":\"tls\""));
                SSL_free(ssl);
                close(fd);
        }
        SSL_CTX_free(cctx);
        tserver_stop(&ts);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("http_server");
        TCase *tc = tcase_create("server");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, route_registration_errors);
        tcase_add_test(tc, foreach_route_lists_registered_routes);
        tcase_add_test(tc, routing_params_and_request_ids);
        tcase_add_test(tc, not_found_method_not_allowed_head);
        tcase_add_test(tc, keepalive_and_pipelining);
        tcase_add_test(tc, chunked_request_body_and_continue);
        tcase_add_test(tc, oversized_headers_431_then_serves_on);
        tcase_add_test(tc, oversized_body_413);
        tcase_add_test(tc, malformed_requests_400);
        tcase_add_test(tc, smuggling_cl_te_rejected);
        tcase_add_test(tc, timeouts);
        tcase_add_test(tc, async_reply_and_disconnect);
        tcase_add_test(tc, async_request_outlives_server);
        tcase_add_test(tc, connection_limit);
        tcase_add_test(tc, unix_socket_and_ipv6);
        tcase_add_test(tc, https);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
