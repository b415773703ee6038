/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl and ingress against a real cluster: PostgreSQL, the control plane
 * (with --dataplane-url), one worker and a data plane, driven by the real
 * spacectl binary. Inside each sandbox busybox httpd serves /srv (a page
 * written with spacectl cp, a CGI that hashes what is posted) and nc a
 * WebSocket handshake in shell that then echoes. Needs root (the worker),
 * btrfs and PostgreSQL.
 *
 * Proves: `sandbox url` prints the exact host and path forms the API hands
 * out, and `--token` a URL whose token the data plane takes (and a --json
 * token that works as a header), while no token is a 401; `port-forward`
 * serves the page on a port it picked, twice on one kept-alive connection,
 * pipelined in order, and on a new connection, carries a 1 MiB POST
 * byte-exact (the CGI's SHA-256), passes a WebSocket upgrade and raw bytes
 * both ways, and exits 0 on SIGTERM with its port closed; `sandbox create
 * --ingress public` needs no token and `sandbox ingress ID token` brings the
 * 401 back.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <sys/socket.h>

#include "http_client.h"
#include "launcher.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/http_client.h"
#include "space/id.h"
#include "space_cluster.h"
#include "test_spacectl_util.h"

#define POLL_TRIES 150
#define POLL_EVERY_US 200000
#define POST_BYTES (1u << 20)

static sp_test_space S;
static sp_test_proc dp;
static int dp_port;
static char dp_url_arg[128];
static const char *cp_args[] = {dp_url_arg, NULL};
static char *dir;

static void cluster_up(void)
{
        sp_error *err = NULL;
        dp_port = sp_test_free_port(&err);
        sp_test_ok(dp_port, &err);
        snprintf(dp_url_arg, sizeof(dp_url_arg), "--dataplane-url=http://127.0.0.1:%d", dp_port);
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        sp_test_space_start_dataplane(&S, &dp, dp_port, "dp-spacectl", NULL);
        dir = sp_test_tmpdir("spacectl-ingress");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
}

static void cluster_down(void)
{
        if (dp.argv) {
                if (getenv("SPACE_TEST_DUMP"))
                        sp_test_proc_dump_log(&dp, 60);
                sp_test_proc_stop(&dp, 10000, NULL);
                sp_test_proc_free(&dp);
        }
        sp_test_space_down(&S);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* Each test has its own configuration file, with a profile for the cluster. */
static void use_profile(const char *name)
{
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/%s.json", dir, name);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", S.api);
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "profile", "set", "local", "--endpoint", url,
                                                    "--api-key", S.admin_key, "--use", NULL);
        ctl_assert_code(r, 0);
}

/* ---- the servers in a sandbox ---- */

static const char CGI_SUM[] = "#!/bin/sh\n"
                              "printf 'Content-Type: text/plain\\r\\n\\r\\n'\n"
                              "head -c \"$CONTENT_LENGTH\" | sha256sum | cut -d' ' -f1\n";

/* A WebSocket handshake in shell (nc runs it per connection), then an echo. */
static const char WS[] =
        "#!/bin/sh\n"
        "key=\n"
        "while IFS= read -r line; do\n"
        "  line=$(printf '%s' \"$line\" | tr -d '\\r')\n"
        "  [ -z \"$line\" ] && break\n"
        "  case \"$line\" in [Ss]ec-[Ww]eb[Ss]ocket-[Kk]ey:*) key=$(printf '%s' \"${line#*:}\" | tr -d ' ');; esac\n"
        "done\n"
        "acc=$(printf '%s' \"${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11\" | sha1sum | cut -c1-40 | sed "
        "'s/../\\\\x&/g')\n"
        "acc=$(printf \"$acc\" | base64)\n"
        "printf 'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: "
        "Upgrade\\r\\nSec-WebSocket-Accept: %s\\r\\n\\r\\n' \"$acc\"\n"
        "exec cat\n";

static void page_of(const char *id, char out[static 128])
{
        snprintf(out, 128, "<h1>hello from %s</h1>\n", id);
}

/* Creates a sandbox through spacectl (extra: one more option and its value, or NULL). */
static void create(const char *opt, const char *value, char id[static 64])
{
        _cleanup_ctl_result_ ctl_result r =
                ctl_run(NULL, NULL, "sandbox", "create", "--template", "base", "--memory", "128M", opt, value, NULL);
        ctl_assert_code(r, 0);
        snprintf(id, 64, "%s", ctl_line(&r));
        ck_assert_msg(sp_id_valid(id, "sbx"), "not a sandbox id: '%s'", r.out.data);
}

static void put_file(const char *id, const char *path, const char *content)
{
        char dst[256];
        snprintf(dst, sizeof(dst), "%s:%s", id, path);
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, content, "cp", "-", dst, NULL);
        ctl_assert_code(r, 0);
}

/* Writes /srv through spacectl and starts httpd on 8080 and nc on 9001 in a
 * session that keeps running (they take a moment to listen). */
static void serve(const char *id)
{
        _cleanup_ctl_result_ ctl_result mk = ctl_run(NULL, NULL, "exec", id, "--", "mkdir", "-p", "/srv/cgi-bin", NULL);
        ctl_assert_code(mk, 0);
        char page[128];
        page_of(id, page);
        put_file(id, "/srv/index.html", page);
        put_file(id, "/srv/two.html", "two\n");
        put_file(id, "/srv/cgi-bin/sum", CGI_SUM);
        put_file(id, "/srv/ws", WS);
        _cleanup_ctl_result_ ctl_result ch =
                ctl_run(NULL, NULL, "exec", id, "--", "chmod", "+x", "/srv/cgi-bin/sum", "/srv/ws", NULL);
        ctl_assert_code(ch, 0);
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", id);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 201,
                                    "{\"argv\":[\"sh\",\"-c\",\"nc -ll -p 9001 -e /srv/ws & "
                                    "exec busybox httpd -f -p 8080 -h /srv\"]}",
                                    NULL));
}

/* ---- HTTP/1.1 on a socket, answer by answer (keep-alive) ---- */

typedef struct hconn {
        int fd;
        sp_buf in; /* received, not yet parsed */
} hconn;

static void hconn_open(hconn *c, int port)
{
        sp_error *e = NULL;
        c->fd = sp_test_dial(port, &e);
        sp_test_ok(c->fd, &e);
        c->in = (sp_buf)SP_BUF_INIT;
}

static void hconn_close(hconn *c)
{
        close(c->fd);
        sp_buf_free(&c->in);
}

static void send_all(int fd, const void *p, size_t n)
{
        while (n) {
                ssize_t w = write(fd, p, n);
                ck_assert_msg(w > 0, "write: %s", strerror(errno));
                p = (const char *)p + w;
                n -= (size_t)w;
        }
}

/* Reads more into c->in within the deadline: false at the end of the connection. */
static bool hconn_fill(hconn *c, int64_t deadline)
{
        char buf[65536];
        for (;;) {
                int64_t left = deadline - ctl_mono_ms();
                ck_assert_msg(left > 0, "no answer in time");
                struct pollfd p = {.fd = c->fd, .events = POLLIN};
                if (poll(&p, 1, (int)(left < 1000 ? left : 1000)) != 1)
                        continue;
                ssize_t r = read(c->fd, buf, sizeof(buf));
                if (r <= 0)
                        return false;
                sp_buf_append(&c->in, buf, (size_t)r, NULL);
                return true;
        }
}

/* Reads the answer to a request with method: its status, its body decoded
 * (NUL-terminated) and, when set_cookie is not NULL, whether it sets a
 * cookie. */
static int hconn_answer(hconn *c, const char *method, sp_buf *body, bool *set_cookie)
{
        sp_http_response_parser *p = sp_http_response_parser_new(method, NULL);
        int64_t deadline = ctl_mono_ms() + 60000;
        for (;;) {
                size_t used = 0, blen = 0;
                const char *b = NULL;
                sp_http_parse_event ev =
                        sp_http_response_parser_feed(p, c->in.len ? c->in.data : "", c->in.len, &used, &b, &blen);
                ck_assert_msg(ev != SP_HTTP_PARSE_ERROR, "malformed answer: %s", sp_http_response_parser_error(p));
                if (ev == SP_HTTP_PARSE_BODY)
                        sp_buf_append(body, b, blen, NULL);
                sp_buf_consume(&c->in, used);
                if (ev == SP_HTTP_PARSE_DONE)
                        break;
                if (ev == SP_HTTP_PARSE_AGAIN && !hconn_fill(c, deadline)) {
                        ck_assert_int_eq(sp_http_response_parser_eof(p), SP_HTTP_PARSE_DONE);
                        break;
                }
        }
        int status = sp_http_response_parser_status(p);
        if (set_cookie)
                *set_cookie = sp_http_response_parser_header(p, "Set-Cookie") != NULL;
        sp_http_response_parser_free(p);
        sp_buf_append(body, "", 1, NULL);
        body->len--;
        return status;
}

/* One GET on a new connection to port with Host host and extra header lines
 * (each ending in CRLF; may be NULL). */
static int get(int port, const char *host, const char *target, const char *headers, sp_buf *body, bool *set_cookie)
{
        hconn c;
        hconn_open(&c, port);
        char req[8192];
        int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, host,
                         headers ? headers : "");
        ck_assert_int_lt(n, (int)sizeof(req));
        send_all(c.fd, req, (size_t)n);
        sp_buf_clear(body);
        int status = hconn_answer(&c, "GET", body, set_cookie);
        hconn_close(&c);
        return status;
}

/* Polls a GET until it is not 502 (the data plane's answer while nothing
 * listens on the port yet), a bounded number of times. */
static int get_when_up(int port, const char *host, const char *target, const char *headers, sp_buf *body)
{
        int status = 0;
        for (int i = 0; i < POLL_TRIES; i++) {
                status = get(port, host, target, headers, body, NULL);
                if (status != 502)
                        break;
                usleep(POLL_EVERY_US);
        }
        return status;
}

/* "8080-sbx-….localhost:PORT": the host form of a port of a sandbox. */
static void host_of(char *out, size_t cap, int port, const char *id)
{
        snprintf(out, cap, "%d-%s.localhost:%d", port, id, dp_port);
        for (char *p = out; *p; p++)
                if (*p == '_')
                        *p = '-';
}

/* ---- sandbox url ---- */

START_TEST(url_prints_both_forms_and_a_working_token)
{
        use_profile("url");
        char id[64], host[160], want[256], page[128];
        create(NULL, NULL, id);
        serve(id);
        page_of(id, page);

        host_of(host, sizeof(host), 8080, id);
        _cleanup_ctl_result_ ctl_result u = ctl_run(NULL, NULL, "sandbox", "url", id, "8080", NULL);
        ctl_assert_code(u, 0);
        snprintf(want, sizeof(want), "http://%s/\n", host);
        ck_assert_str_eq(u.out.data, want);
        _cleanup_ctl_result_ ctl_result p = ctl_run(NULL, NULL, "sandbox", "url", id, "8080", "--path", NULL);
        ctl_assert_code(p, 0);
        snprintf(want, sizeof(want), "http://127.0.0.1:%d/v1/sandboxes/%s/ports/8080/\n", dp_port, id);
        ck_assert_str_eq(p.out.data, want);
        _cleanup_ctl_result_ ctl_result j = ctl_run(NULL, NULL, "sandbox", "url", id, "3000", "--json", NULL);
        ctl_assert_code(j, 0);
        _cleanup_json_ json_object *jo = ctl_json(&j);
        char h3000[160];
        host_of(h3000, sizeof(h3000), 3000, id);
        snprintf(want, sizeof(want), "http://%s/", h3000);
        ck_assert_str_eq(sp_test_jstr(jo, "url"), want);
        snprintf(want, sizeof(want), "http://127.0.0.1:%d/v1/sandboxes/%s/ports/3000/", dp_port, id);
        ck_assert_str_eq(sp_test_jstr(jo, "path_url"), want);
        ck_assert_ptr_null(sp_test_jstr(jo, "token"));
        /* Bad input is a usage error. */
        _cleanup_ctl_result_ ctl_result bad = ctl_run(NULL, NULL, "sandbox", "url", id, "0", NULL);
        ctl_assert_code(bad, 2);
        _cleanup_ctl_result_ ctl_result bad_ttl = ctl_run(NULL, NULL, "sandbox", "url", id, "80", "--ttl", "60", NULL);
        ctl_assert_code(bad_ttl, 2);

        /* --token: the host form with ?space_token=, which the data plane takes. */
        _cleanup_ctl_result_ ctl_result t =
                ctl_run(NULL, NULL, "sandbox", "url", id, "8080", "--token", "--ttl", "10m", NULL);
        ctl_assert_code(t, 0);
        snprintf(want, sizeof(want), "http://%s/?space_token=", host);
        ck_assert_msg(strncmp(t.out.data, want, strlen(want)) == 0, "%s", t.out.data);
        char token[4096], target[4200];
        snprintf(token, sizeof(token), "%.*s", (int)strcspn(t.out.data + strlen(want), "\n"),
                 t.out.data + strlen(want));
        ck_assert_msg(*token && !strchr(token, '%') && !strchr(token, '&'), "%s", token);
        ck_assert_ptr_nonnull(strstr(t.err.data, "until"));
        snprintf(target, sizeof(target), "/index.html?space_token=%s", token);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(get_when_up(dp_port, host, target, NULL, &body), 200);
        ck_assert_str_eq(body.data, page);
        bool cookie = false;
        ck_assert_int_eq(get(dp_port, host, target, NULL, &body, &cookie), 200);
        ck_assert_msg(cookie, "no Set-Cookie for ?space_token=");
        /* Without a token: 401. */
        ck_assert_int_eq(get(dp_port, host, "/index.html", NULL, &body, NULL), 401);

        /* --path --token, and --json's token as the header. */
        _cleanup_ctl_result_ ctl_result tp =
                ctl_run(NULL, NULL, "sandbox", "url", id, "8080", "--token", "--path", NULL);
        ctl_assert_code(tp, 0);
        snprintf(want, sizeof(want), "http://127.0.0.1:%d/v1/sandboxes/%s/ports/8080/?space_token=", dp_port, id);
        ck_assert_msg(strncmp(tp.out.data, want, strlen(want)) == 0, "%s", tp.out.data);
        snprintf(target, sizeof(target), "/v1/sandboxes/%s/ports/8080/index.html?space_token=%.*s", id,
                 (int)strcspn(tp.out.data + strlen(want), "\n"), tp.out.data + strlen(want));
        ck_assert_int_eq(get(dp_port, "127.0.0.1", target, NULL, &body, NULL), 200);
        ck_assert_str_eq(body.data, page);
        _cleanup_ctl_result_ ctl_result tj =
                ctl_run(NULL, NULL, "sandbox", "url", id, "8080", "--token", "--json", NULL);
        ctl_assert_code(tj, 0);
        _cleanup_json_ json_object *tjo = ctl_json(&tj);
        snprintf(want, sizeof(want), "http://%s/", host);
        ck_assert_str_eq(sp_test_jstr(tjo, "url"), want);
        ck_assert_ptr_nonnull(sp_test_jstr(tjo, "expires_at"));
        char hdr[4200];
        snprintf(hdr, sizeof(hdr), "X-Space-Ingress-Token: %s\r\n", sp_test_jstr(tjo, "token"));
        ck_assert_int_eq(get(dp_port, host, "/index.html", hdr, &body, NULL), 200);
        ck_assert_str_eq(body.data, page);
}
END_TEST

/* ---- port-forward ---- */

/* Reads the first line of fd (without its newline) within 60 s. */
static void read_line(int fd, char *out, size_t cap)
{
        size_t n = 0;
        int64_t deadline = ctl_mono_ms() + 60000;
        while (n + 1 < cap) {
                int64_t left = deadline - ctl_mono_ms();
                ck_assert_msg(left > 0, "no line in time: '%.*s'", (int)n, out);
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, (int)left) != 1)
                        continue;
                char ch;
                ssize_t r = read(fd, &ch, 1);
                ck_assert_msg(r == 1, "port-forward ended before its line: '%.*s'", (int)n, out);
                if (ch == '\n')
                        break;
                out[n++] = ch;
        }
        out[n] = '\0';
}

/* SIGTERM, then it must exit 0 within 10 s. */
static void stop_forward(pid_t pid)
{
        ck_assert_int_eq(kill(pid, SIGTERM), 0);
        int status = 0;
        pid_t w = 0;
        for (int i = 0; i < 100 && (w = waitpid(pid, &status, WNOHANG)) == 0; i++)
                usleep(100000);
        if (w == 0) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                ck_abort_msg("port-forward did not exit on SIGTERM");
        }
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "port-forward ended with status %d", status);
}

static bool port_closed(int port)
{
        sp_error *e = NULL;
        int fd = sp_test_dial(port, &e);
        if (fd >= 0) {
                close(fd);
                return false;
        }
        sp_error_free(e);
        return true;
}

START_TEST(port_forward_serves_http_and_a_websocket)
{
        use_profile("forward");
        char id[64], page[128], line[256], want[256];
        create(NULL, NULL, id);
        serve(id);
        page_of(id, page);

        int out = -1;
        pid_t pid = ctl_spawn(NULL, (const char *[]){"port-forward", id, "0:8080", NULL}, &out);
        read_line(out, line, sizeof(line));
        int port = 0;
        ck_assert_msg(sscanf(line, "Forwarding from 127.0.0.1:%d ->", &port) == 1 && port > 0, "%s", line);
        snprintf(want, sizeof(want), "Forwarding from 127.0.0.1:%d -> %s:8080", port, id);
        ck_assert_str_eq(line, want);
        char local[64];
        snprintf(local, sizeof(local), "127.0.0.1:%d", port);

        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(get_when_up(port, local, "/index.html", NULL, &body), 200);
        ck_assert_str_eq(body.data, page);

        /* Two requests on one kept-alive connection, then two pipelined. */
        hconn c;
        hconn_open(&c, port);
        char req[256];
        int n = snprintf(req, sizeof(req), "GET /index.html HTTP/1.1\r\nHost: %s\r\n\r\n", local);
        for (int i = 0; i < 2; i++) {
                send_all(c.fd, req, (size_t)n);
                sp_buf_clear(&body);
                ck_assert_int_eq(hconn_answer(&c, "GET", &body, NULL), 200);
                ck_assert_str_eq(body.data, page);
        }
        char two[512];
        int n2 = snprintf(two, sizeof(two), "GET /two.html HTTP/1.1\r\nHost: %s\r\n\r\n%s", local, req);
        send_all(c.fd, two, (size_t)n2);
        sp_buf_clear(&body);
        ck_assert_int_eq(hconn_answer(&c, "GET", &body, NULL), 200);
        ck_assert_str_eq(body.data, "two\n");
        sp_buf_clear(&body);
        ck_assert_int_eq(hconn_answer(&c, "GET", &body, NULL), 200);
        ck_assert_str_eq(body.data, page);

        /* 1 MiB posted on the same connection reaches the CGI byte-exact. */
        unsigned char *data = malloc(POST_BYTES);
        ck_assert_ptr_nonnull(data);
        for (size_t i = 0; i < POST_BYTES; i++)
                data[i] = (unsigned char)((i * 2654435761u) >> 13);
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256(data, POST_BYTES, md);
        char hex[2 * SHA256_DIGEST_LENGTH + 2];
        for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
                sprintf(hex + 2 * i, "%02x", md[i]);
        strcat(hex, "\n");
        n = snprintf(req, sizeof(req),
                     "POST /cgi-bin/sum HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\n"
                     "Content-Length: %u\r\n\r\n",
                     local, POST_BYTES);
        send_all(c.fd, req, (size_t)n);
        send_all(c.fd, data, POST_BYTES);
        free(data);
        sp_buf_clear(&body);
        ck_assert_int_eq(hconn_answer(&c, "POST", &body, NULL), 200);
        ck_assert_str_eq(body.data, hex);
        hconn_close(&c);

        /* A new connection. */
        ck_assert_int_eq(get(port, local, "/index.html", NULL, &body, NULL), 200);
        ck_assert_str_eq(body.data, page);

        /* A WebSocket through a second forward (--json), early bytes too. */
        int out2 = -1;
        pid_t pid2 = ctl_spawn(NULL, (const char *[]){"port-forward", id, "0:9001", "--json", NULL}, &out2);
        read_line(out2, line, sizeof(line));
        _cleanup_json_ json_object *jo = NULL;
        ck_assert_msg(sp_json_parse(line, strlen(line), &jo, NULL) == 0, "%s", line);
        ck_assert_str_eq(sp_test_jstr(jo, "sandbox"), id);
        ck_assert_str_eq(sp_test_jstr(jo, "address"), "127.0.0.1");
        ck_assert_str_eq(sp_test_jstr(jo, "remote_port"), "9001");
        int wport = atoi(sp_test_jstr(jo, "port"));
        ck_assert_int_gt(wport, 0);
        char wlocal[64];
        snprintf(wlocal, sizeof(wlocal), "127.0.0.1:%d", wport);
        int status = 0;
        for (int i = 0; i < POLL_TRIES; i++) {
                hconn w;
                hconn_open(&w, wport);
                n = snprintf(req, sizeof(req),
                             "GET /chat HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                             wlocal);
                send_all(w.fd, req, (size_t)n);
                int64_t deadline = ctl_mono_ms() + 60000;
                while (!(w.in.data && memmem(w.in.data, w.in.len, "\r\n\r\n", 4)) && hconn_fill(&w, deadline)) {
                }
                ck_assert_msg(w.in.len > 12, "no answer to the upgrade");
                status = atoi(w.in.data + 9);
                if (status == 101) {
                        sp_buf_append(&w.in, "", 1, NULL);
                        ck_assert_msg(strstr(w.in.data, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "%s",
                                      w.in.data);
                        char *end = memmem(w.in.data, w.in.len, "\r\n\r\n", 4);
                        sp_buf_consume(&w.in, (size_t)(end + 4 - w.in.data));
                        w.in.len--; /* the NUL appended above */
                        send_all(w.fd, "ping\n", 5);
                        send_all(w.fd, "pong\n", 5);
                        while (w.in.len < 10 && hconn_fill(&w, deadline)) {
                        }
                        ck_assert_uint_eq(w.in.len, 10);
                        ck_assert_int_eq(memcmp(w.in.data, "ping\npong\n", 10), 0);
                        hconn_close(&w);
                        break;
                }
                hconn_close(&w);
                ck_assert_int_eq(status, 502);
                usleep(POLL_EVERY_US);
        }
        ck_assert_int_eq(status, 101);

        /* SIGTERM: exit 0, the port closed. */
        stop_forward(pid);
        stop_forward(pid2);
        close(out);
        close(out2);
        ck_assert(port_closed(port));
        ck_assert(port_closed(wport));
}
END_TEST

/* ---- sandbox create --ingress, sandbox ingress ---- */

START_TEST(public_then_token)
{
        use_profile("public");
        char id[64], host[160], page[128], path[128];
        _cleanup_ctl_result_ ctl_result bad =
                ctl_run(NULL, NULL, "sandbox", "create", "--template", "base", "--ingress", "open", NULL);
        ctl_assert_code(bad, 2);
        create("--ingress", "public", id);
        serve(id);
        page_of(id, page);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *s = sp_test_api(&S, S.admin_key, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(s, "ingress.mode"), "public");

        host_of(host, sizeof(host), 8080, id);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(get_when_up(dp_port, host, "/index.html", NULL, &body), 200);
        ck_assert_str_eq(body.data, page);

        _cleanup_ctl_result_ ctl_result t = ctl_run(NULL, NULL, "sandbox", "ingress", id, "token", NULL);
        ctl_assert_code(t, 0);
        char want[128];
        snprintf(want, sizeof(want), "%s: ingress token\n", id);
        ck_assert_str_eq(t.out.data, want);
        /* Data planes see it within a couple of seconds. */
        int status = 0;
        for (int i = 0; i < 50 && (status = get(dp_port, host, "/index.html", NULL, &body, NULL)) == 200; i++)
                usleep(POLL_EVERY_US);
        ck_assert_int_eq(status, 401);
        _cleanup_ctl_result_ ctl_result j = ctl_run(NULL, NULL, "sandbox", "ingress", id, "public", "--json", NULL);
        ctl_assert_code(j, 0);
        _cleanup_json_ json_object *jo = ctl_json(&j);
        ck_assert_str_eq(sp_test_jstr(jo, "ingress.mode"), "public");
        _cleanup_ctl_result_ ctl_result nope = ctl_run(NULL, NULL, "sandbox", "ingress", id, "open", NULL);
        ctl_assert_code(nope, 2);
}
END_TEST

/* ---- sandbox create --auto-resume, sandbox ingress --auto-resume ---- */

START_TEST(auto_resume_flags)
{
        use_profile("resume");
        char id[64], host[160], page[128], path[128], want[160];
        create("--auto-resume", NULL, id);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *s = sp_test_api(&S, S.admin_key, "GET", path, 200, NULL, NULL);
        json_object *ing = NULL, *ar = NULL;
        ck_assert(json_object_object_get_ex(s, "ingress", &ing) && json_object_object_get_ex(ing, "auto_resume", &ar) &&
                  json_object_get_boolean(ar));

        _cleanup_ctl_result_ ctl_result pub = ctl_run(NULL, NULL, "sandbox", "ingress", id, "public", NULL);
        ctl_assert_code(pub, 0);
        snprintf(want, sizeof(want), "%s: ingress public, auto-resume\n", id);
        ck_assert_str_eq(pub.out.data, want);
        serve(id);
        page_of(id, page);
        host_of(host, sizeof(host), 8080, id);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(get_when_up(dp_port, host, "/index.html", NULL, &body), 200);

        /* Paused: the next request wakes it, and its server answers. */
        _cleanup_ctl_result_ ctl_result p = ctl_run(NULL, NULL, "sandbox", "pause", id, NULL);
        ctl_assert_code(p, 0);
        ck_assert_int_eq(get(dp_port, host, "/index.html", NULL, &body, NULL), 200);
        ck_assert_str_eq(body.data, page);
        _cleanup_json_ json_object *s2 = sp_test_api(&S, S.admin_key, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(s2, "state"), "running");

        _cleanup_ctl_result_ ctl_result off = ctl_run(NULL, NULL, "sandbox", "ingress", id, "--no-auto-resume", NULL);
        ctl_assert_code(off, 0);
        snprintf(want, sizeof(want), "%s: ingress public\n", id);
        ck_assert_str_eq(off.out.data, want);
        _cleanup_ctl_result_ ctl_result none = ctl_run(NULL, NULL, "sandbox", "ingress", id, NULL);
        ctl_assert_code(none, 2);
        ck_assert_ptr_nonnull(strstr(none.err.data, "give a mode"));
        _cleanup_ctl_result_ ctl_result both =
                ctl_run(NULL, NULL, "sandbox", "ingress", id, "--auto-resume", "--no-auto-resume", NULL);
        ctl_assert_code(both, 2);
        _cleanup_json_ json_object *s3 = sp_test_api(&S, S.admin_key, "GET", path, 200, NULL, NULL);
        ck_assert(json_object_object_get_ex(s3, "ingress", &ing) &&
                  json_object_object_get_ex(ing, "auto_resume", &ar) && !json_object_get_boolean(ar));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("spacectl_ingress");
        TCase *tc = tcase_create("cluster");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, url_prints_both_forms_and_a_working_token);
        tcase_add_test(tc, port_forward_serves_http_and_a_websocket);
        tcase_add_test(tc, public_then_token);
        tcase_add_test(tc, auto_resume_flags);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
