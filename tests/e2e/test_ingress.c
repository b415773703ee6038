/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingress end to end (docs/ingress.md): a real cluster (PostgreSQL, the
 * control plane, a worker) and a real data plane that joined it; servers
 * started inside a sandbox (busybox httpd with CGI scripts, nc with a shell
 * WebSocket handshake) reached from this host through the data plane, by
 * host name and by path, as a browser or curl would. Needs root, btrfs and
 * PostgreSQL.
 *
 * Proves: a page through both forms; 502 with a page while nothing listens;
 * a 200 MiB download and upload byte-exact (SHA-256 here and in the
 * sandbox); a reader that stops does not grow the data plane; server-sent
 * events arrive one by one (the second is only written after the test saw
 * the first); a WebSocket upgrade relays bytes both ways; access: no token
 * 401, another sandbox's token 403, another tenant's token 404 exactly as a
 * missing sandbox, a public sandbox open to all, ?space_token= kept as a
 * cookie; an open WebSocket ends when its token's API key is revoked, or
 * (opened without a token) when its public sandbox switches to token; the
 * data plane killed mid-download gives a short, closed answer, and a retry
 * after its restart works.
 *
 * Waking (auto_resume): a paused sandbox without it answers 409 and stays
 * paused; with it, a request is let through first (no token: 401, still
 * paused), then wakes it and is answered by its server, with the operation
 * and the audit record saying why; a suspended one is restored by a request
 * (a jail's processes do not survive a suspend, so its answer is the 502 of
 * nothing listening — from a running sandbox); auto_resume switched off
 * takes effect; a wake that cannot finish (the worker stopped) answers 504
 * after --ingress-wake-ms, and the sandbox runs once the worker is back.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <libpq-fe.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "launcher.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space_cluster.h"

#define SANDBOX_TOKEN "{\"template\":\"base\",\"resources\":{\"memory_mb\":256,\"cpu_millis\":500}}"
#define SANDBOX_PUBLIC \
        "{\"template\":\"base\",\"ingress\":\"public\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define BIG (200u << 20)

static sp_test_space S;
static sp_test_proc dp;
static int dp_port;
static char dp_url_arg[128];
static const char *cp_args[] = {dp_url_arg, NULL};

static void cluster_up(void)
{
        sp_error *err = NULL;
        dp_port = sp_test_free_port(&err);
        sp_test_ok(dp_port, &err);
        snprintf(dp_url_arg, sizeof(dp_url_arg), "--dataplane-url=http://127.0.0.1:%d", dp_port);
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        sp_test_space_start_dataplane(
                &S, &dp, dp_port, "dp-ingress",
                (const char *const[]){"--ingress-answer-ms=3000", "--ingress-wake-ms=6000", NULL});
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
}

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- a plain HTTP/1.1 client on a socket ---- */

static int dial(void)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dp_port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
        return fd;
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

/* Reads what is there within ms (at most cap bytes): the count, 0 at the
 * end, -1 when nothing came in time. */
static ssize_t read_some(int fd, void *buf, size_t cap, int ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms) != 1)
                return -1;
        ssize_t r = read(fd, buf, cap);
        return r < 0 ? 0 : r;
}

/* Reads up to the end of the head into head (NUL-terminated); the bytes
 * after it go to rest. Returns the status. */
static int read_head(int fd, sp_buf *head, sp_buf *rest)
{
        char buf[65536];
        int64_t deadline = mono_ms() + 60000;
        while (mono_ms() < deadline) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                if (r == 0)
                        break;
                if (r < 0)
                        continue;
                sp_buf_append(head, buf, (size_t)r, NULL);
                sp_buf_append(head, "", 1, NULL);
                head->len--;
                char *end = strstr(head->data, "\r\n\r\n");
                if (end) {
                        size_t hl = (size_t)(end + 4 - head->data);
                        sp_buf_append(rest, head->data + hl, head->len - hl, NULL);
                        head->len = hl;
                        head->data[hl] = '\0';
                        break;
                }
        }
        int status = 0;
        ck_assert_msg(head->data && sscanf(head->data, "HTTP/1.%*d %d", &status) == 1, "no answer: '%.300s'",
                      head->data ? head->data : "");
        return status;
}

/* One request on a new connection; reads the whole answer (the data plane
 * closes after it: "Connection: close"). Returns the status; the body into
 * body (NUL-terminated), the head into head (may be NULL). */
static int request(const char *method, const char *target, const char *host, const char *headers, const char *body_in,
                   sp_buf *head, sp_buf *body)
{
        int fd = dial();
        _cleanup_buf_ sp_buf req = SP_BUF_INIT;
        sp_buf_appendf(&req, NULL, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s", method, target, host,
                       headers ? headers : "");
        if (body_in)
                sp_buf_appendf(&req, NULL, "Content-Length: %zu\r\n\r\n%s", strlen(body_in), body_in);
        else
                sp_buf_append(&req, "\r\n", 2, NULL);
        send_all(fd, req.data, req.len);
        _cleanup_buf_ sp_buf h = SP_BUF_INIT;
        int status = read_head(fd, &h, body);
        char buf[65536];
        for (int64_t deadline = mono_ms() + 60000; mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                if (r == 0)
                        break;
                if (r > 0)
                        sp_buf_append(body, buf, (size_t)r, NULL);
        }
        close(fd);
        sp_buf_append(body, "", 1, NULL);
        body->len--;
        if (head)
                sp_buf_append(head, h.data, h.len + 1, NULL);
        return status;
}

/* The body of a chunked answer, decoded (the data plane chunks answers of
 * unknown length). */
static void dechunk(const sp_buf *in, sp_buf *out)
{
        const char *p = in->data, *end = in->data + in->len;
        while (p < end) {
                unsigned long n = strtoul(p, NULL, 16);
                const char *nl = strstr(p, "\r\n");
                ck_assert_ptr_nonnull(nl);
                if (n == 0)
                        break;
                sp_buf_append(out, nl + 2, n, NULL);
                p = nl + 2 + n + 2;
        }
        sp_buf_append(out, "", 1, NULL);
        out->len--;
}

static char host_of(char *out, size_t cap, int port, const char *sbx)
{
        /* {port}-{id with '_' as '-'}.localhost:{dp port} */
        snprintf(out, cap, "%d-%s.localhost:%d", port, sbx, dp_port);
        char *us = strchr(out, '_');
        if (us)
                *us = '-';
        return 0;
}

/* Runs a command in the sandbox (a session) and leaves it running. */
static void run(const char *key, const char *sbx, const char *script)
{
        _cleanup_json_ json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string(script));
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "argv", json_object_get(argv));
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", sbx);
        json_object_put(sp_test_api(&S, key, "POST", path, 201,
                                    json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN), NULL));
}

static void mint(const char *key, const char *sbx, char token[static 4096])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/ingress/tokens", sbx);
        _cleanup_json_ json_object *t = sp_test_api(&S, key, "POST", path, 201, NULL, NULL);
        snprintf(token, 4096, "%s", sp_test_jstr(t, "token"));
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256(p, n, md);
        for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
                sprintf(out + 2 * i, "%02x", md[i]);
}

static int64_t rss_kib(pid_t pid)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        _cleanup_buf_ sp_buf s = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(path, 1 << 20, &s, NULL), 0);
        const char *p = strstr(s.data, "VmRSS:");
        ck_assert_ptr_nonnull(p);
        return strtoll(p + 6, NULL, 10);
}

/* Opens a WebSocket to host (the handshake answered by the server in the
 * sandbox) with extra headers, and checks bytes go both ways. */
static int open_ws(const char *host, const char *headers)
{
        int fd = dial();
        char req[8192];
        int n = snprintf(req, sizeof(req),
                         "GET /chat HTTP/1.1\r\nHost: %s\r\n%sConnection: Upgrade\r\nUpgrade: websocket\r\n"
                         "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nping",
                         host, headers);
        send_all(fd, req, (size_t)n);
        _cleanup_buf_ sp_buf h = SP_BUF_INIT, got = SP_BUF_INIT;
        ck_assert_int_eq(read_head(fd, &h, &got), 101);
        char buf[256];
        for (int64_t deadline = mono_ms() + 30000; got.len < 4 && mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                ck_assert_int_ne(r, 0);
                if (r > 0)
                        sp_buf_append(&got, buf, (size_t)r, NULL);
        }
        ck_assert_uint_eq(got.len, 4);
        return fd;
}

/* Whether the data plane closes fd within ms (bytes echoed meanwhile are read). */
static bool ws_closed_within(int fd, int ms)
{
        char buf[256];
        for (int64_t deadline = mono_ms() + ms; mono_ms() < deadline;) {
                if (read_some(fd, buf, sizeof(buf), 500) == 0) /* the end, or reset */
                        return true;
        }
        return false;
}

/* The servers: httpd on 8080 with /big (200 MiB, its SHA-256 beside it), a
 * CGI that hashes what is posted, a CGI of server-sent events that waits for
 * /tmp/go before its second; nc on 9001 doing a WebSocket handshake in shell,
 * then echoing. */
static const char SERVERS[] =
        "set -e\n"
        "mkdir -p /www/cgi-bin\n"
        "head -c 209715200 /dev/urandom > /www/big\n"
        "sha256sum /www/big | cut -d' ' -f1 > /www/big.sha256\n"
        "cat > /www/cgi-bin/up <<'EOF'\n"
        "#!/bin/sh\n"
        "printf 'Content-Type: text/plain\\r\\n\\r\\n'\n"
        "head -c \"$CONTENT_LENGTH\" | sha256sum | cut -d' ' -f1\n"
        "EOF\n"
        "cat > /www/cgi-bin/events <<'EOF'\n"
        "#!/bin/sh\n"
        "printf 'Content-Type: text/event-stream\\r\\n\\r\\n'\n"
        "printf 'data: one\\n\\n'\n"
        "while [ ! -f /tmp/go ]; do sleep 0.1; done\n"
        "printf 'data: two\\n\\n'\n"
        "EOF\n"
        "cat > /www/ws <<'EOF'\n"
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
        "exec cat\n"
        "EOF\n"
        "chmod +x /www/cgi-bin/up /www/cgi-bin/events /www/ws\n"
        "echo ready > /www/ready.txt\n"
        "nc -ll -p 9001 -e /www/ws &\n"
        "nc -ll -p 9002 -e sleep 60 &\n"
        "exec httpd -f -p 8080 -h /www\n";

START_TEST(ingress_end_to_end)
{
        char key[256], key2[256], sbx[64], other[64], pub[64], host[160], target[4400], token[4096], token_other[4096],
                token2[4096], hdr[4300];
        sp_test_new_tenant(&S, "ingress", key);
        sp_test_new_tenant(&S, "ingress2", key2);
        sp_test_create_sandbox(&S, key, SANDBOX_TOKEN, sbx);
        sp_test_create_sandbox(&S, key, SANDBOX_PUBLIC, other);
        char sbx2[64];
        sp_test_create_sandbox(&S, key2, SANDBOX_PUBLIC, sbx2);
        snprintf(pub, sizeof(pub), "%s", other);
        mint(key, sbx, token);
        mint(key, other, token_other);
        mint(key2, sbx2, token2);
        snprintf(hdr, sizeof(hdr), "X-Space-Ingress-Token: %s\r\n", token);
        host_of(host, sizeof(host), 8080, sbx);

        /* Nothing listens yet: 502, and a page for a browser. */
        _cleanup_buf_ sp_buf body = SP_BUF_INIT, head = SP_BUF_INIT;
        ck_assert_int_eq(request("GET", "/", host, hdr, NULL, NULL, &body), 502);
        ck_assert_msg(strstr(body.data, "nothing listens on port 8080"), "%s", body.data);
        sp_buf_clear(&body);
        char html[4400];
        snprintf(html, sizeof(html), "%sAccept: text/html\r\n", hdr);
        ck_assert_int_eq(request("GET", "/", host, html, NULL, NULL, &body), 502);
        ck_assert_msg(strstr(body.data, "<h1>502</h1>") && strstr(body.data, "nothing listens on port 8080") &&
                              strstr(body.data, "Start a server there"),
                      "%s", body.data);
        sp_buf_clear(&body);

        run(key, sbx, SERVERS);
        int status = 0;
        for (int64_t deadline = mono_ms() + 120000; mono_ms() < deadline; usleep(200000)) {
                sp_buf_clear(&body);
                status = request("GET", "/ready.txt", host, hdr, NULL, NULL, &body);
                if (status == 200)
                        break;
                ck_assert_int_eq(status, 502);
        }
        ck_assert_int_eq(status, 200);
        ck_assert_str_eq(body.data, "ready\n");

        /* The path form reaches the same server. */
        sp_buf_clear(&body);
        snprintf(target, sizeof(target), "/v1/sandboxes/%s/ports/8080/ready.txt", sbx);
        sp_buf_clear(&head);
        ck_assert_int_eq(request("GET", target, "127.0.0.1", hdr, NULL, &head, &body), 200);
        ck_assert_str_eq(body.data, "ready\n");
        /* ... and, sharing the data plane's origin, runs as an opaque one there;
         * a forwarder serving it from its own origin gets it as is; a page
         * cannot pretend to be one (its preflight is refused). */
        ck_assert_msg(strstr(head.data, "Content-Security-Policy: sandbox"), "%s", head.data);
        sp_buf_clear(&head);
        sp_buf_clear(&body);
        char fwd[4400];
        snprintf(fwd, sizeof(fwd), "%sX-Space-Ingress-Client: forward\r\n", hdr);
        ck_assert_int_eq(request("GET", target, "127.0.0.1", fwd, NULL, &head, &body), 200);
        ck_assert_msg(!strstr(head.data, "Content-Security-Policy"), "%s", head.data);
        sp_buf_clear(&body);
        ck_assert_int_eq(request("OPTIONS", target, "127.0.0.1",
                                 "Origin: http://evil.example\r\nAccess-Control-Request-Method: GET\r\n"
                                 "Access-Control-Request-Headers: x-space-ingress-client\r\n",
                                 NULL, NULL, &body),
                         403);
        sp_buf_clear(&head);

        /* Access. */
        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/ready.txt", host, NULL, NULL, NULL, &body), 401);
        sp_buf_clear(&body);
        char h2[4400];
        snprintf(h2, sizeof(h2), "X-Space-Ingress-Token: %s\r\n", token_other);
        ck_assert_int_eq(request("GET", "/ready.txt", host, h2, NULL, NULL, &body), 403);
        /* Another tenant's token answers exactly what it answers for a
         * sandbox that does not exist (the token is for another sandbox:
         * 403, decided before anything is looked up); and without a token,
         * a sandbox that does not exist answers like one that needs a
         * token: nobody learns which ids exist. */
        _cleanup_buf_ sp_buf foreign = SP_BUF_INIT, missing = SP_BUF_INIT, anon_missing = SP_BUF_INIT,
                             anon_there = SP_BUF_INIT;
        snprintf(h2, sizeof(h2), "X-Space-Ingress-Token: %s\r\n", token2);
        ck_assert_int_eq(request("GET", "/ready.txt", host, h2, NULL, NULL, &foreign), 403);
        char ghost[160], ghost_id[64] = "sbx_0000000000000000000a";
        host_of(ghost, sizeof(ghost), 8080, ghost_id);
        ck_assert_int_eq(request("GET", "/ready.txt", ghost, h2, NULL, NULL, &missing), 403);
        ck_assert_str_eq(foreign.data, missing.data);
        ck_assert_int_eq(request("GET", "/ready.txt", ghost, NULL, NULL, NULL, &anon_missing), 401);
        ck_assert_int_eq(request("GET", "/ready.txt", host, NULL, NULL, NULL, &anon_there), 401);
        _cleanup_json_ json_object *aj = NULL, *bj = NULL;
        ck_assert_int_eq(sp_json_parse(anon_missing.data, anon_missing.len, &aj, NULL), 0);
        ck_assert_int_eq(sp_json_parse(anon_there.data, anon_there.len, &bj, NULL), 0);
        ck_assert_str_eq(sp_test_jstr(aj, "error.code"), sp_test_jstr(bj, "error.code"));
        /* A public sandbox needs no token (nothing listens there: 502, not 401). */
        sp_buf_clear(&body);
        char phost[160];
        host_of(phost, sizeof(phost), 8080, pub);
        ck_assert_int_eq(request("GET", "/", phost, NULL, NULL, NULL, &body), 502);
        /* ?space_token= answers with the token as a cookie, and the cookie alone works. */
        sp_buf_clear(&body);
        snprintf(target, sizeof(target), "/ready.txt?space_token=%s", token);
        ck_assert_int_eq(request("GET", target, host, NULL, NULL, &head, &body), 200);
        ck_assert_msg(strstr(head.data, "Set-Cookie: space_ingress_token="), "%s", head.data);
        sp_buf_clear(&body);
        snprintf(h2, sizeof(h2), "Cookie: theme=dark; space_ingress_token=%s\r\n", token);
        ck_assert_int_eq(request("GET", "/ready.txt", host, h2, NULL, NULL, &body), 200);

        /* 200 MiB down, byte-exact. */
        _cleanup_buf_ sp_buf sum = SP_BUF_INIT;
        ck_assert_int_eq(request("GET", "/big.sha256", host, hdr, NULL, NULL, &sum), 200);
        sum.data[64] = '\0';
        int fd = dial();
        char req[4600];
        int n = snprintf(req, sizeof(req), "GET /big HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, hdr);
        send_all(fd, req, (size_t)n);
        _cleanup_buf_ sp_buf h = SP_BUF_INIT, got = SP_BUF_INIT;
        ck_assert_int_eq(read_head(fd, &h, &got), 200);
        ck_assert_msg(strstr(h.data, "Content-Length: 209715200"), "%s", h.data);
        /* A reader that stops: the data plane holds what its windows hold. */
        int64_t rss0 = rss_kib(dp.pid);
        usleep(1500000);
        int64_t grown = rss_kib(dp.pid) - rss0;
        ck_assert_msg(grown < 32 * 1024, "the data plane grew by %lld KiB while its client read nothing",
                      (long long)grown);
        sp_buf_reserve(&got, BIG, NULL);
        char buf[1 << 16];
        for (int64_t deadline = mono_ms() + 300000; got.len < BIG && mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 1000);
                if (r == 0)
                        break;
                if (r > 0)
                        sp_buf_append(&got, buf, (size_t)r, NULL);
        }
        close(fd);
        ck_assert_uint_eq(got.len, BIG);
        char hex[65];
        sha256_hex(got.data, got.len, hex);
        ck_assert_str_eq(hex, sum.data);

        /* 200 MiB up, byte-exact: the CGI hashes what it read. */
        fd = dial();
        n = snprintf(req, sizeof(req), "POST /cgi-bin/up HTTP/1.1\r\nHost: %s\r\n%sContent-Length: %u\r\n\r\n", host,
                     hdr, BIG);
        send_all(fd, req, (size_t)n);
        send_all(fd, got.data, got.len);
        sp_buf_clear(&h);
        _cleanup_buf_ sp_buf up = SP_BUF_INIT, upd = SP_BUF_INIT;
        ck_assert_int_eq(read_head(fd, &h, &up), 200);
        for (int64_t deadline = mono_ms() + 60000;
             !strstr(up.data ? up.data : "", "\r\n0\r\n") && mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                if (r == 0)
                        break;
                if (r > 0) {
                        sp_buf_append(&up, buf, (size_t)r, NULL);
                        sp_buf_append(&up, "", 1, NULL);
                        up.len--;
                }
        }
        close(fd);
        dechunk(&up, &upd);
        ck_assert_msg(strncmp(upd.data, sum.data, 64) == 0, "the sandbox read %s", upd.data);

        /* Server-sent events, one by one: the second is written only once the
         * first has arrived here. */
        fd = dial();
        n = snprintf(req, sizeof(req),
                     "GET /cgi-bin/events HTTP/1.1\r\nHost: %s\r\n%sAccept: text/event-stream\r\n\r\n", host, hdr);
        send_all(fd, req, (size_t)n);
        sp_buf_clear(&h);
        _cleanup_buf_ sp_buf ev = SP_BUF_INIT;
        ck_assert_int_eq(read_head(fd, &h, &ev), 200);
        ck_assert_msg(strstr(h.data, "text/event-stream"), "%s", h.data);
        for (int64_t deadline = mono_ms() + 30000;
             !strstr(ev.data ? ev.data : "", "data: one") && mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                ck_assert_int_ne(r, 0);
                if (r > 0) {
                        sp_buf_append(&ev, buf, (size_t)r, NULL);
                        sp_buf_append(&ev, "", 1, NULL);
                        ev.len--;
                }
        }
        ck_assert_msg(strstr(ev.data, "data: one") && !strstr(ev.data, "data: two"), "%s", ev.data);
        run(key, sbx, "touch /tmp/go");
        for (int64_t deadline = mono_ms() + 30000; !strstr(ev.data, "data: two") && mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                if (r == 0)
                        break;
                if (r > 0) {
                        sp_buf_append(&ev, buf, (size_t)r, NULL);
                        sp_buf_append(&ev, "", 1, NULL);
                        ev.len--;
                }
        }
        close(fd);
        ck_assert_msg(strstr(ev.data, "data: two"), "%s", ev.data);

        /* A WebSocket: the handshake answered by the server in the sandbox,
         * then bytes both ways (sent with the request head too). */
        char wshost[160];
        host_of(wshost, sizeof(wshost), 9001, sbx);
        fd = dial();
        n = snprintf(req, sizeof(req),
                     "GET /chat HTTP/1.1\r\nHost: %s\r\n%sConnection: Upgrade\r\nUpgrade: websocket\r\n"
                     "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\nearly-bytes|",
                     wshost, hdr);
        send_all(fd, req, (size_t)n);
        sp_buf_clear(&h);
        _cleanup_buf_ sp_buf ws = SP_BUF_INIT;
        ck_assert_int_eq(read_head(fd, &h, &ws), 101);
        /* RFC 6455's own example key and answer */
        ck_assert_msg(strstr(h.data, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "%s", h.data);
        send_all(fd, "more", 4);
        for (int64_t deadline = mono_ms() + 30000; ws.len < 16 && mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                ck_assert_int_ne(r, 0);
                if (r > 0)
                        sp_buf_append(&ws, buf, (size_t)r, NULL);
        }
        ck_assert_uint_eq(ws.len, 16);
        ck_assert(memcmp(ws.data, "early-bytes|more", 16) == 0);
        close(fd);

        /* 32 MiB through an upgraded connection, written while the echo is
         * read: the relay holds each direction to its windows and drops
         * nothing when the worker's call is full. */
        fd = dial();
        n = snprintf(req, sizeof(req),
                     "GET /bulk HTTP/1.1\r\nHost: %s\r\n%sConnection: Upgrade\r\nUpgrade: websocket\r\n"
                     "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
                     wshost, hdr);
        send_all(fd, req, (size_t)n);
        sp_buf_clear(&h);
        _cleanup_buf_ sp_buf echo = SP_BUF_INIT;
        ck_assert_int_eq(read_head(fd, &h, &echo), 101);
        size_t bulk = 32u << 20, off = 0;
        uint8_t *src = malloc(bulk);
        ck_assert_ptr_nonnull(src);
        for (size_t i = 0; i < bulk; i++)
                src[i] = (uint8_t)(i * 2654435761u >> 13);
        sp_buf_reserve(&echo, bulk, NULL);
        for (int64_t deadline = mono_ms() + 300000; echo.len < bulk && mono_ms() < deadline;) {
                struct pollfd pf = {.fd = fd, .events = POLLIN | (off < bulk ? POLLOUT : 0)};
                if (poll(&pf, 1, 1000) <= 0)
                        continue;
                if ((pf.revents & POLLOUT) && off < bulk) {
                        ssize_t w = send(fd, src + off, bulk - off > 65536 ? 65536 : bulk - off, MSG_DONTWAIT);
                        if (w > 0)
                                off += (size_t)w;
                }
                if (pf.revents & (POLLIN | POLLHUP)) {
                        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                        if (r == 0)
                                break;
                        if (r > 0)
                                sp_buf_append(&echo, buf, (size_t)r, NULL);
                }
        }
        close(fd);
        ck_assert_uint_eq(echo.len, bulk);
        ck_assert_msg(memcmp(echo.data, src, bulk) == 0, "the echo differs from what was sent");
        free(src);

        /* An open WebSocket ends when the API key that minted its token is
         * revoked, and one that came without a token when its public sandbox
         * switches to token. */
        _cleanup_json_ json_object *k2 = sp_test_api(&S, key, "POST", "/v1/keys", 201, "{\"name\":\"ws\"}", NULL);
        char tok_k2[4096], hdr_k2[4300], kpath[128];
        mint(sp_test_jstr(k2, "secret"), sbx, tok_k2);
        snprintf(hdr_k2, sizeof(hdr_k2), "X-Space-Ingress-Token: %s\r\n", tok_k2);
        int wsfd = open_ws(wshost, hdr_k2);
        snprintf(kpath, sizeof(kpath), "/v1/keys/%s", sp_test_jstr(k2, "id"));
        json_object_put(sp_test_api(&S, key, "DELETE", kpath, 204, NULL, NULL));
        ck_assert_msg(ws_closed_within(wsfd, 20000), "the WebSocket outlived its revoked key");
        close(wsfd);
        char ipath[128];
        snprintf(ipath, sizeof(ipath), "/v1/sandboxes/%s/ingress", sbx);
        json_object_put(sp_test_api(&S, key, "PUT", ipath, 200, "{\"mode\":\"public\"}", NULL));
        sleep(3); /* the data plane's cache */
        wsfd = open_ws(wshost, "");
        json_object_put(sp_test_api(&S, key, "PUT", ipath, 200, "{\"mode\":\"token\"}", NULL));
        ck_assert_msg(ws_closed_within(wsfd, 20000), "the token-less WebSocket outlived the switch to token");
        close(wsfd);
        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/metrics", "127.0.0.1", NULL, NULL, NULL, &body), 200);
        ck_assert_msg(strstr(body.data, "space_dataplane_ingress_upgrades_ended_total 2"), "%s", body.data);

        /* A server that takes the request and never answers: 504 once the
         * data plane's --ingress-answer-ms (3 s here) has passed. */
        char mute[160];
        host_of(mute, sizeof(mute), 9002, sbx);
        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/", mute, hdr, NULL, NULL, &body), 504);
        ck_assert_msg(strstr(body.data, "gateway_timeout") && strstr(body.data, "did not answer within 3000 ms"), "%s",
                      body.data);

        /* Clients that half-close before the server answers get an answer
         * all the same and their connections end (freed without one, they
         * stayed open for good and used up the data plane's connections). */
        int half[3];
        for (int i = 0; i < 3; i++) {
                half[i] = dial();
                n = snprintf(req, sizeof(req), "GET / HTTP/1.1\r\nHost: %s\r\n%s\r\n", mute, hdr);
                send_all(half[i], req, (size_t)n);
                ck_assert_int_eq(shutdown(half[i], SHUT_WR), 0);
        }
        for (int i = 0; i < 3; i++) {
                ck_assert_msg(ws_closed_within(half[i], 10000), "a half-closed client's connection stayed open");
                close(half[i]);
        }

        /* The data plane killed mid-download: the answer ends short and closed. */
        fd = dial();
        n = snprintf(req, sizeof(req), "GET /big HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, hdr);
        send_all(fd, req, (size_t)n);
        sp_buf_clear(&h);
        sp_buf_clear(&got);
        ck_assert_int_eq(read_head(fd, &h, &got), 200);
        while (got.len < (8u << 20)) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 10000);
                ck_assert_int_gt(r, 0);
                sp_buf_append(&got, buf, (size_t)r, NULL);
        }
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&dp, &e), &e);
        bool ended = false;
        for (int64_t deadline = mono_ms() + 30000; mono_ms() < deadline;) {
                ssize_t r = read_some(fd, buf, sizeof(buf), 500);
                if (r == 0) {
                        ended = true;
                        break;
                }
                if (r > 0)
                        got.len += (size_t)r;
        }
        close(fd);
        ck_assert_msg(ended && got.len < BIG, "the download did not end short (%zu bytes)", got.len);
        sp_test_ok(sp_test_proc_restart(&dp, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&dp, "data plane ready", 60000, &e), &e);
        sp_buf_clear(&body);
        for (int64_t deadline = mono_ms() + 30000; mono_ms() < deadline; usleep(200000)) {
                sp_buf_clear(&body);
                if ((status = request("GET", "/ready.txt", host, hdr, NULL, NULL, &body)) == 200)
                        break;
        }
        ck_assert_int_eq(status, 200);
        ck_assert_str_eq(body.data, "ready\n");

        /* Counted, for the sandbox too. */
        char spath[128];
        snprintf(spath, sizeof(spath), "/v1/sandboxes/%s/stats", sbx);
        _cleanup_json_ json_object *stats = sp_test_api(&S, key, "GET", spath, 200, NULL, NULL);
        json_object *ing = NULL, *v = NULL;
        ck_assert(json_object_object_get_ex(stats, "ingress", &ing));
        ck_assert(json_object_object_get_ex(ing, "connections", &v) && json_object_get_int64(v) >= 10);
        ck_assert(json_object_object_get_ex(ing, "bytes_in", &v) && json_object_get_int64(v) >= (int64_t)BIG);
        ck_assert(json_object_object_get_ex(ing, "bytes_out", &v) && json_object_get_int64(v) >= (int64_t)BIG);
        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/metrics", "127.0.0.1", NULL, NULL, NULL, &body), 200);
        ck_assert_msg(strstr(body.data, "route=\"ingress\""), "%s", body.data);
}
END_TEST

/* The count a query with one parameter answers, read from the cluster's database. */
static int64_t db_count(const char *sql, const char *param)
{
        PGconn *db = PQconnectdb(S.conninfo);
        ck_assert_msg(PQstatus(db) == CONNECTION_OK, "%s", PQerrorMessage(db));
        const char *p[] = {param};
        PGresult *res = PQexecParams(db, sql, 1, NULL, p, NULL, NULL, 0);
        ck_assert_msg(PQresultStatus(res) == PGRES_TUPLES_OK, "%s", PQerrorMessage(db));
        int64_t n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        PQfinish(db);
        return n;
}

/* The sandbox's state through the API. */
static void state_of(const char *key, const char *sbx, char out[static 32])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx);
        _cleanup_json_ json_object *o = sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
        snprintf(out, 32, "%s", sp_test_jstr(o, "state"));
}

/* GETs target until it answers want (or 60 s pass); returns the last status. */
static int poll_until(const char *target, const char *host, const char *hdr, int want)
{
        int status = 0;
        for (int64_t deadline = mono_ms() + 60000; mono_ms() < deadline; usleep(200000)) {
                _cleanup_buf_ sp_buf body = SP_BUF_INIT;
                if ((status = request("GET", target, host, hdr, NULL, NULL, &body)) == want)
                        break;
        }
        return status;
}

#define SANDBOX_WAKE "{\"template\":\"base\",\"auto_resume\":true,\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define SANDBOX_NO_WAKE \
        "{\"template\":\"base\",\"ingress\":\"public\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define WEB "mkdir -p /w && echo awake > /w/x && exec httpd -f -p 8080 -h /w"

START_TEST(auto_resume_wakes_on_request)
{
        char key[256], sbx[64], plain[64], host[160], host_plain[160], token[4096], hdr[4300], st[32], path[160];
        sp_test_new_tenant(&S, "wake", key);
        sp_test_create_sandbox(&S, key, SANDBOX_WAKE, sbx);
        sp_test_create_sandbox(&S, key, SANDBOX_NO_WAKE, plain);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx);
        _cleanup_json_ json_object *o = sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
        json_object *ing = NULL, *v = NULL;
        ck_assert(json_object_object_get_ex(o, "ingress", &ing) && json_object_object_get_ex(ing, "auto_resume", &v) &&
                  json_object_get_boolean(v));
        mint(key, sbx, token);
        snprintf(hdr, sizeof(hdr), "X-Space-Ingress-Token: %s\r\n", token);
        host_of(host, sizeof(host), 8080, sbx);
        host_of(host_plain, sizeof(host_plain), 8080, plain);
        run(key, sbx, WEB);
        run(key, plain, WEB);
        ck_assert_int_eq(poll_until("/x", host, hdr, 200), 200);
        ck_assert_int_eq(poll_until("/x", host_plain, NULL, 200), 200);

        /* Without auto_resume: 409, and it stays paused. */
        sp_test_sandbox_action(&S, key, plain, "pause", st);
        ck_assert_str_eq(st, "paused");
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(request("GET", "/x", host_plain, NULL, NULL, NULL, &body), 409);
        ck_assert_msg(strstr(body.data, "is paused"), "%s", body.data);
        sleep(1);
        state_of(key, plain, st);
        ck_assert_str_eq(st, "paused");

        /* With it: nobody wakes it without a token; a request with one wakes
         * it and gets its answer (the processes were frozen, not gone). */
        sp_test_sandbox_action(&S, key, sbx, "pause", st);
        ck_assert_str_eq(st, "paused");
        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/x", host, NULL, NULL, NULL, &body), 401);
        sleep(1);
        state_of(key, sbx, st);
        ck_assert_str_eq(st, "paused");
        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/x", host, hdr, NULL, NULL, &body), 200);
        ck_assert_str_eq(body.data, "awake\n");
        state_of(key, sbx, st);
        ck_assert_str_eq(st, "running");
        /* The wake is an operation of its own, audited as the data plane's,
         * and the sandbox says why it runs. */
        ck_assert_int_eq(db_count("SELECT count(*) FROM audit_log a JOIN operations o ON o.id = a.detail->>'operation' "
                                  "WHERE a.target = $1 AND a.action = 'sandbox.wake' AND a.detail->>'by' = 'ingress' "
                                  "AND a.detail->>'dataplane' = 'dp-ingress' AND a.detail->>'was' = 'paused' "
                                  "AND o.kind = 'resume' AND o.state = 'succeeded'",
                                  sbx),
                         1);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", sbx);
        _cleanup_json_ json_object *woken = sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(woken, "status_message"), "woken by a request for one of its ports");

        /* Suspended: a request restores it. Where the worker has the project's CRIU (scripts/criu; its
         * --criu=auto finds it) the jail kept its processes and the server answers the request that woke
         * it; without, it kept its files only and the woken sandbox answers that nothing listens. */
        bool criu = access("/var/lib/space/criu/criu", X_OK) == 0;
        if (!criu)
                fprintf(stderr, "ingress: no CRIU on this host (scripts/criu): a suspend keeps files only\n");
        sp_test_sandbox_action(&S, key, sbx, "suspend", st);
        ck_assert_str_eq(st, "suspended");
        sp_buf_clear(&body);
        if (criu) {
                ck_assert_int_eq(request("GET", "/x", host, hdr, NULL, NULL, &body), 200);
                ck_assert_str_eq(body.data, "awake\n");
        } else {
                ck_assert_int_eq(request("GET", "/x", host, hdr, NULL, NULL, &body), 502);
                ck_assert_msg(strstr(body.data, "nothing listens on port 8080"), "%s", body.data);
        }
        state_of(key, sbx, st);
        ck_assert_str_eq(st, "running");
        if (!criu)
                run(key, sbx, WEB);
        ck_assert_int_eq(poll_until("/x", host, hdr, 200), 200);

        /* Switched off: 409 again. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/ingress", sbx);
        json_object_put(sp_test_api(&S, key, "PUT", path, 200, "{\"auto_resume\":false}", NULL));
        sp_test_sandbox_action(&S, key, sbx, "pause", st);
        sleep(3); /* the data plane's cache of the sandbox (2 s) */
        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/x", host, hdr, NULL, NULL, &body), 409);
        state_of(key, sbx, st);
        ck_assert_str_eq(st, "paused");

        /* A wake that cannot finish in time: its worker stopped. 504 after
         * --ingress-wake-ms (6 s); the wake goes on once the worker is back. */
        json_object_put(sp_test_api(&S, key, "PUT", path, 200, "{\"auto_resume\":true}", NULL));
        sleep(3);
        ck_assert_int_eq(kill(S.workers[0].pid, SIGSTOP), 0);
        /* A client that half-closes while its request waits for the wake is
         * not waited for: its connection ends within seconds, not at the
         * wake's end. */
        int hc = dial();
        char hreq[4600];
        int hn = snprintf(hreq, sizeof(hreq), "GET /x HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, hdr);
        send_all(hc, hreq, (size_t)hn);
        bool hc_closed = shutdown(hc, SHUT_WR) == 0 && ws_closed_within(hc, 4000);
        close(hc);
        if (!hc_closed)
                kill(S.workers[0].pid, SIGCONT); /* the other test needs it */
        ck_assert_msg(hc_closed, "a half-closed waiting request held its connection");
        int64_t t0 = mono_ms();
        sp_buf_clear(&body);
        int status = request("GET", "/x", host, hdr, NULL, NULL, &body);
        int64_t took = mono_ms() - t0;
        ck_assert_int_eq(kill(S.workers[0].pid, SIGCONT), 0);
        ck_assert_msg(status == 504 && strstr(body.data, "did not wake within 6000 ms"), "%d %s", status, body.data);
        ck_assert_msg(took >= 5500, "answered after %lld ms", (long long)took);
        for (int64_t deadline = mono_ms() + 60000; mono_ms() < deadline; usleep(200000)) {
                state_of(key, sbx, st);
                if (strcmp(st, "running") == 0)
                        break;
        }
        ck_assert_str_eq(st, "running");
        ck_assert_int_eq(poll_until("/x", host, hdr, 200), 200);

        sp_buf_clear(&body);
        ck_assert_int_eq(request("GET", "/metrics", "127.0.0.1", NULL, NULL, NULL, &body), 200);
        ck_assert_msg(strstr(body.data, "space_dataplane_ingress_wakes_total") &&
                              strstr(body.data, "space_dataplane_ingress_wake_timeouts_total 1"),
                      "%s", body.data);
}
END_TEST

int main(void)
{
        sp_test_require_root("a cluster: btrfs, namespaces, cgroups");
        sp_test_pg_require();
        Suite *s = suite_create("ingress");
        TCase *tc = tcase_create("ingress");
        tcase_set_timeout(tc, 900);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        /* First: the other kills and restarts the data plane in its own
         * process, whose restart ends with it. */
        tcase_add_test(tc, auto_resume_wakes_on_request);
        tcase_add_test(tc, ingress_end_to_end);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
