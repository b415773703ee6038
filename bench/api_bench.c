/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-bench-api: the cluster as its users see it, measured at the public
 * API and the data plane of a running cluster (bench/run starts one in
 * direct mode and points this program at it).
 *
 *   space-bench-api --api URL --key-file FILE --metrics URL [--cgroup NAME] [--quick] [--samples N]
 *                   [--exec-samples N] [--stream-mib N] [--stream-runs N] [--load-levels N,N,…]
 *                   [--load-creates N] [--load-execs N] [--load-seconds N] [--density-max N]
 *                   [--density-seconds N] [--ingress-samples N] [--ingress-mib N] [--ingress-runs N]
 *                   [--only PHASE,…]
 *
 * Phases, in this order (each bounded in count and time):
 *   create        create → running (POST /v1/sandboxes, then the operation
 *                 long-polled until it succeeded), cold (no warm pool) and
 *                 warm (template base's pool refilled before each create);
 *   first output  create, run `echo`, first output byte received, exit seen,
 *                 all from the create's POST, warm and cold;
 *   exec          session round trip of `true` in one running sandbox (POST
 *                 session, attach, exit event);
 *   stream        `dd if=/dev/zero bs=65536 count=N` (busybox) through
 *                 agent → worker → data plane → this client, as raw frames
 *                 (stream_mib_s) and as base64 server-sent events
 *                 (stream_sse_mib_s), and in the same run the floor: the same command
 *                 on the host into a plain pipe, a loopback TCP socket, and
 *                 a pipe relayed into a socket, read by this process;
 *   ingress       HTTP to busybox httpd in a sandbox through the data plane
 *                 (host form, with an ingress token): GETs of 1 KiB on new
 *                 connections (connect → last byte) and downloads of
 *                 --ingress-mib MiB, and in the same run the same GETs to
 *                 the same server (the host's busybox httpd) on loopback;
 *   load          sustained load, one level per client count of
 *                 --load-levels (default 1,4,8,16), each bounded by a count
 *                 and --load-seconds (load.h): cold creates (each sandbox
 *                 deleted once running; --load-creates a level), then `true`
 *                 round trips as phase exec's, each client in a running
 *                 sandbox of its own (--load-execs a level); a level that
 *                 fails or times out is reported and the larger ones of its
 *                 kind are skipped (--only create-load or exec-load runs one
 *                 kind);
 *   density       idle sandboxes created in batches until --density-max, the
 *                 time bound, or the first failure; host memory per sandbox
 *                 from MemAvailable and from the worker's cgroup.
 * Every sandbox it makes is deleted. It prints one JSON object (see
 * docs/performance.md for the keys) and exits 0, or 1 with the first failure
 * on stderr. --metrics is the worker's metrics URL (the warm pool's size),
 * --cgroup the worker's cgroup parent (for the cgroup memory figure).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api.h"
#include "load.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "stats.h"

/* The API's defaults: 1 CPU, 512 MiB (a smaller CPU share throttles the agent). */
#define BODY "{\"template\":\"base\"}"
#define WARM_POOL 2
#define OP_TIMEOUT_S 120
#define DENSITY_BATCH 25
#define MAX_LEVELS 8

static struct {
        const char *api, *metrics, *cgroup, *only;
        char key[257];
        int samples, exec_samples, stream_mib, stream_runs, density_max, density_s;
        int ingress_samples, ingress_mib, ingress_runs;
        int levels[MAX_LEVELS], nlevels, load_creates, load_execs, load_s;
} opt;

static bn_api A;
static json_object *out; /* the results */

static void fail(const char *what, sp_error *e) __attribute__((noreturn));
static void fail(const char *what, sp_error *e)
{
        fprintf(stderr, "space-bench-api: %s: %s\n", what, e ? e->message : "failed");
        exit(1);
}

static void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void progress(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "space-bench-api: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
}

static double *samples_new(int n)
{
        double *v = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
        if (!v)
                fail("allocating samples", NULL);
        return v;
}

static void add_double(const char *key, double v)
{
        json_object_object_add(out, key, json_object_new_double(v));
}

static void add_stats(const char *key, double *v, int n)
{
        bn_stats_json(out, key, bn_stats_of(v, n));
}

/* ---- sandboxes ---- */

/* Creates a sandbox and waits until it runs: its id; the POST's start. */
static void create_running(char id[static BN_ID_MAX], int64_t *t0)
{
        char op[BN_ID_MAX];
        _cleanup_error_ sp_error *e = NULL;
        *t0 = sp_now_mono_us();
        if (bn_api_create(&A, BODY, id, op, &e) < 0 || bn_api_wait_op(&A, op, OP_TIMEOUT_S, &e) < 0)
                fail("create", e);
}

static void delete_wait(const char *id)
{
        char op[BN_ID_MAX];
        _cleanup_error_ sp_error *e = NULL;
        if (bn_api_delete(&A, id, op, &e) < 0 || bn_api_wait_op(&A, op, OP_TIMEOUT_S, &e) < 0)
                fail("delete", e);
}

/* The worker's warm sandboxes of template base, from its metrics. */
static int warm_ready(void)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_http_client_ sp_http_client *c = sp_http_client_new(opt.metrics, NULL, &e);
        if (!c)
                fail("metrics client", e);
        sp_http_client_request req = {.method = "GET", .target = "/metrics"};
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        if (sp_http_client_do(c, &req, 8 << 20, &body, &e) != 200 || sp_buf_append(&body, "", 1, &e) < 0)
                fail("GET the worker's /metrics", e);
        static const char metric[] = "space_worker_warm_sandboxes{template=\"base\"} ";
        const char *at = strstr(body.data, metric);
        return at ? atoi(at + strlen(metric)) : 0;
}

static void set_warm_pool(int n)
{
        char body[64];
        snprintf(body, sizeof(body), "{\"warm\":%d}", n);
        _cleanup_error_ sp_error *e = NULL;
        if (bn_api_call(&A, "POST", "/v1/templates/base/warm", body, 200, NULL, &e) < 0)
                fail("setting the warm pool", e);
}

/* Waits (at most 60 s) until the pool holds n sandboxes (n > 0) or none. */
static void wait_warm(int n)
{
        for (int i = 0; i < 6000; i++) {
                int have = warm_ready();
                if (n > 0 ? have >= n : have == 0)
                        return;
                usleep(10000);
        }
        fprintf(stderr, "space-bench-api: the warm pool did not reach %d sandboxes in 60 s\n", n);
        exit(1);
}

/* ---- create → running ---- */

static void phase_create(const char *key, bool warm)
{
        double *v = samples_new(opt.samples);
        for (int i = -2; i < opt.samples; i++) {
                if (warm)
                        wait_warm(WARM_POOL);
                char id[BN_ID_MAX];
                int64_t t0;
                create_running(id, &t0);
                double ms = bn_ms_since(t0);
                if (i >= 0)
                        v[i] = ms;
                delete_wait(id);
        }
        add_stats(key, v, opt.samples);
        free(v);
}

/* ---- time to first output ---- */

static void phase_first_output(const char *key, bool warm)
{
        int n = opt.samples;
        double *running = samples_new(n), *session = samples_new(n), *first = samples_new(n), *exit_ = samples_new(n);
        for (int i = -2; i < n; i++) {
                if (warm)
                        wait_warm(WARM_POOL);
                char id[BN_ID_MAX];
                int64_t t0;
                create_running(id, &t0);
                double run_ms = bn_ms_since(t0);
                bn_session s;
                _cleanup_error_ sp_error *e = NULL;
                if (bn_api_run(&A, id, "[\"echo\",\"hello\"]", &s, &e) < 0)
                        fail("echo", e);
                if (s.bytes != 6 || s.exit_code != 0 || !s.first_byte) {
                        fprintf(stderr, "space-bench-api: echo gave %llu bytes, exit %d\n", (unsigned long long)s.bytes,
                                s.exit_code);
                        exit(1);
                }
                if (i >= 0) {
                        running[i] = run_ms;
                        session[i] = (double)(s.created - t0) / 1000.0;
                        first[i] = (double)(s.first_byte - t0) / 1000.0;
                        exit_[i] = (double)(s.exit_seen - t0) / 1000.0;
                }
                delete_wait(id);
        }
        char k[96];
        add_stats(key, first, n);
        snprintf(k, sizeof(k), "%s_running", key);
        add_stats(k, running, n);
        snprintf(k, sizeof(k), "%s_session", key);
        add_stats(k, session, n);
        snprintf(k, sizeof(k), "%s_exit", key);
        add_stats(k, exit_, n);
        free(running);
        free(session);
        free(first);
        free(exit_);
}

/* ---- exec round trip and streaming, in one running sandbox ---- */

static void phase_exec(const char *id)
{
        int n = opt.exec_samples;
        double *rtt = samples_new(n), *session = samples_new(n);
        for (int i = -3; i < n; i++) {
                bn_session s;
                _cleanup_error_ sp_error *e = NULL;
                int64_t t0 = sp_now_mono_us();
                if (bn_api_run(&A, id, "[\"true\"]", &s, &e) < 0)
                        fail("true", e);
                if (s.exit_code != 0) {
                        fprintf(stderr, "space-bench-api: true exited %d\n", s.exit_code);
                        exit(1);
                }
                if (i >= 0) {
                        rtt[i] = (double)(s.exit_seen - t0) / 1000.0;
                        session[i] = (double)(s.created - t0) / 1000.0;
                }
        }
        add_stats("exec_rtt", rtt, n);
        add_stats("exec_rtt_session", session, n);
        free(rtt);
        free(session);
}

#define FLOOR_CHUNK (64 * 1024)

/* Execs the stream's producer, busybox dd writing bytes zeros in 64 KiB
 * blocks, with its stdout on fd (a child). The sandbox runs the same. */
static void produce(int fd, uint64_t bytes) __attribute__((noreturn));
static void produce(int fd, uint64_t bytes)
{
        char count[64];
        snprintf(count, sizeof(count), "count=%llu", (unsigned long long)(bytes / FLOOR_CHUNK));
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(fd, 1) < 0 || dup2(null, 2) < 0)
                _exit(126);
        execlp("busybox", "busybox", "dd", "if=/dev/zero", "bs=65536", count, (char *)NULL);
        _exit(127);
}

/* Copies in to out until EOF, then exits (a child). */
static void relay(int in, int outfd) __attribute__((noreturn));
static void relay(int in, int outfd)
{
        static char b[FLOOR_CHUNK];
        for (;;) {
                ssize_t r = read(in, b, sizeof(b));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        _exit(1);
                if (r == 0)
                        _exit(0);
                for (ssize_t off = 0; off < r;) {
                        ssize_t w = write(outfd, b + off, (size_t)(r - off));
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w <= 0)
                                _exit(1);
                        off += w;
                }
        }
}

/* Reads fd until EOF; the bytes read. */
static uint64_t consume(int fd)
{
        static char b[FLOOR_CHUNK];
        uint64_t total = 0;
        for (;;) {
                ssize_t r = read(fd, b, sizeof(b));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return total;
                total += (uint64_t)r;
        }
}

/* A connected loopback TCP pair: *ret_w (the writer's end) and *ret_r. */
static void tcp_pair(int *ret_w, int *ret_r)
{
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        int one = 1;
        if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
            getsockname(l, (struct sockaddr *)&a, &len) < 0) {
                fprintf(stderr, "space-bench-api: loopback socket: %m\n");
                exit(1);
        }
        int w = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (w < 0 || connect(w, (struct sockaddr *)&a, sizeof(a)) < 0) {
                fprintf(stderr, "space-bench-api: loopback connect: %m\n");
                exit(1);
        }
        int r = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (r < 0) {
                fprintf(stderr, "space-bench-api: loopback accept: %m\n");
                exit(1);
        }
        setsockopt(w, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        close(l);
        *ret_w = w;
        *ret_r = r;
}

typedef enum { FLOOR_PIPE, FLOOR_SOCKET, FLOOR_PIPE_SOCKET } floor_kind;

/* MiB/s of bytes through the floor path: a producer process, optionally a
 * relay process, and this process reading until EOF. */
static double floor_once(floor_kind kind, uint64_t bytes)
{
        int p[2] = {-1, -1}, s[2] = {-1, -1};
        int64_t t0 = sp_now_mono_us();
        if (kind != FLOOR_SOCKET && pipe2(p, O_CLOEXEC) < 0) {
                fprintf(stderr, "space-bench-api: pipe: %m\n");
                exit(1);
        }
        if (kind != FLOOR_PIPE)
                tcp_pair(&s[0], &s[1]);
        pid_t kids[2] = {-1, -1};
        kids[0] = fork();
        if (kids[0] == 0)
                produce(kind == FLOOR_SOCKET ? s[0] : p[1], bytes);
        if (kind == FLOOR_PIPE_SOCKET) {
                kids[1] = fork();
                if (kids[1] == 0) {
                        close(p[1]);
                        relay(p[0], s[0]);
                }
        }
        int rd = kind == FLOOR_PIPE ? p[0] : s[1];
        for (int i = 0; i < 2; i++) {
                if (p[i] >= 0 && p[i] != rd)
                        close(p[i]);
                if (s[i] >= 0 && s[i] != rd)
                        close(s[i]);
        }
        uint64_t got = consume(rd);
        double secs = (double)(sp_now_mono_us() - t0) / 1e6;
        close(rd);
        for (int i = 0; i < 2; i++)
                if (kids[i] > 0)
                        waitpid(kids[i], NULL, 0);
        if (got != bytes) {
                fprintf(stderr, "space-bench-api: the floor moved %llu of %llu bytes\n", (unsigned long long)got,
                        (unsigned long long)bytes);
                exit(1);
        }
        return (double)bytes / (1024.0 * 1024.0) / secs;
}

/* The median of n values (sorted in place). */
static double median(double *v, int n)
{
        return bn_stats_of(v, n).p50;
}

static void phase_stream(const char *id)
{
        uint64_t bytes = (uint64_t)opt.stream_mib << 20;
        char argv_json[160];
        snprintf(argv_json, sizeof(argv_json), "[\"sh\",\"-c\",\"dd if=/dev/zero bs=65536 count=%llu 2>/dev/null\"]",
                 (unsigned long long)(bytes / FLOOR_CHUNK));
        int n = opt.stream_runs;
        double *st = samples_new(n), *sse = samples_new(n), *fp = samples_new(n), *fs = samples_new(n),
               *fps = samples_new(n);
        for (int i = 0; i < n; i++) {
                /* Raw frames (what spacectl reads), then the same as server-sent events (what browsers read). */
                for (int format = 0; format < 2; format++) {
                        bn_session s;
                        _cleanup_error_ sp_error *e = NULL;
                        A.sse = format == 1;
                        int64_t t0 = sp_now_mono_us();
                        if (bn_api_run(&A, id, argv_json, &s, &e) < 0)
                                fail("streaming", e);
                        if (s.bytes != bytes || s.exit_code != 0) {
                                fprintf(stderr, "space-bench-api: the stream (%s) gave %llu of %llu bytes, exit %d\n",
                                        A.sse ? "events" : "raw", (unsigned long long)s.bytes,
                                        (unsigned long long)bytes, s.exit_code);
                                exit(1);
                        }
                        (format ? sse : st)[i] = (double)bytes / (1024.0 * 1024.0) / ((double)(s.exit_seen - t0) / 1e6);
                }
                A.sse = false;
                fp[i] = floor_once(FLOOR_PIPE, bytes);
                fs[i] = floor_once(FLOOR_SOCKET, bytes);
                fps[i] = floor_once(FLOOR_PIPE_SOCKET, bytes);
        }
        double m_st = median(st, n), m_ps = median(fps, n);
        json_object_object_add(out, "stream_bytes", json_object_new_int64((int64_t)bytes));
        json_object_object_add(out, "stream_runs", json_object_new_int(n));
        add_double("stream_mib_s", m_st);
        add_double("floor_pipe_mib_s", median(fp, n));
        add_double("floor_socket_mib_s", median(fs, n));
        add_double("floor_pipe_socket_mib_s", m_ps);
        add_double("stream_ratio_to_floor", m_ps > 0 ? m_st / m_ps : 0);
        double m_sse = median(sse, n);
        add_double("stream_sse_mib_s", m_sse);
        add_double("stream_sse_ratio_to_floor", m_ps > 0 ? m_sse / m_ps : 0);
        free(st);
        free(sse);
        free(fp);
        free(fs);
        free(fps);
}

/* ---- ingress: HTTP through the data plane to a server in a sandbox ---- */

/* One GET on a new connection to 127.0.0.1:port with host and extra headers:
 * the milliseconds from connect() to the last byte, the body's length in
 * *ret_bytes; -1 on any failure (said on stderr). */
static double http_get_once(int port, const char *host, const char *target, const char *headers, uint64_t *ret_bytes)
{
        int64_t t0 = sp_now_mono_us();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct timeval tv = {.tv_sec = 60};
        if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
            connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                fprintf(stderr, "space-bench-api: connect to port %d: %s\n", port, strerror(errno));
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        char req[4096];
        int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n", target, host,
                         headers);
        if (write(fd, req, (size_t)n) != n) {
                close(fd);
                return -1;
        }
        static char buf[1 << 18];
        uint64_t total = 0, head = 0;
        char first[512] = "";
        size_t flen = 0;
        ssize_t r;
        while ((r = read(fd, buf, sizeof(buf))) > 0) {
                if (!head) {
                        size_t k = (size_t)r < sizeof(first) - 1 - flen ? (size_t)r : sizeof(first) - 1 - flen;
                        memcpy(first + flen, buf, k);
                        flen += k;
                        first[flen] = '\0';
                        char *end = strstr(first, "\r\n\r\n");
                        if (end)
                                head = (uint64_t)(end + 4 - first);
                }
                total += (uint64_t)r;
        }
        close(fd);
        double ms = (double)(sp_now_mono_us() - t0) / 1000.0;
        if (r < 0 || !head || strncmp(first, "HTTP/1.", 7) != 0 || strncmp(first + 9, "200", 3) != 0) {
                fprintf(stderr, "space-bench-api: GET %s on port %d: %.80s\n", target, port,
                        r < 0 ? strerror(errno) : first);
                return -1;
        }
        *ret_bytes = total - head;
        return ms;
}

/* The same server kind beside the cluster: busybox httpd on loopback,
 * serving the same files. */
static pid_t host_httpd(const char *dir, int *ret_port)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t l = sizeof(sa);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            getsockname(fd, (struct sockaddr *)&sa, &l) < 0)
                fail("a port for the host's httpd", NULL);
        close(fd);
        *ret_port = ntohs(sa.sin_port);
        char addr[32];
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", *ret_port);
        pid_t pid = fork();
        if (pid == 0) {
                execlp("busybox", "busybox", "httpd", "-f", "-p", addr, "-h", dir, (char *)NULL);
                _exit(127);
        }
        if (pid < 0)
                fail("starting busybox httpd", NULL);
        return pid;
}

/* Polls GET target until it answers 200, at most 300 times 100 ms apart. */
static void wait_200(int port, const char *host, const char *target, const char *headers)
{
        for (int i = 0; i < 300; i++) {
                uint64_t b;
                if (http_get_once(port, host, target, headers, &b) >= 0)
                        return;
                usleep(100000);
        }
        fail("the server never answered", NULL);
}

static void phase_ingress(void)
{
        char id[BN_ID_MAX], op[BN_ID_MAX];
        _cleanup_error_ sp_error *e = NULL;
        if (bn_api_create(&A, BODY, id, op, &e) < 0 || bn_api_wait_op(&A, op, OP_TIMEOUT_S, &e) < 0)
                fail("create", e);
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/ingress/tokens", id);
        _cleanup_json_ json_object *tok = NULL;
        if (bn_api_call(&A, "POST", path, "{}", 201, &tok, &e) < 0)
                fail("ingress token", e);
        json_object *t = NULL, *u = NULL;
        if (!json_object_object_get_ex(tok, "token", &t) || !json_object_object_get_ex(tok, "url", &u))
                fail("the ingress token answer", NULL);
        /* url: http://{port}-sbx-….<domain>:<data plane port>/ — the bench
         * connects to loopback (direct mode) with that Host. */
        const char *url = json_object_get_string(u), *h = strstr(url, "://");
        char host[256], headers[4200];
        int dp_port = 0;
        if (!h || sscanf(h + 3, "{port}-%255[^/]", host) != 1 || !strrchr(host, ':') ||
            (dp_port = atoi(strrchr(host, ':') + 1)) <= 0)
                fail("the ingress URL is not http://{port}-….:PORT/", NULL);
        char full[300];
        snprintf(full, sizeof(full), "8080-%s", host);
        snprintf(headers, sizeof(headers), "X-Space-Ingress-Token: %s\r\n", json_object_get_string(t));
        uint64_t big = (uint64_t)opt.ingress_mib << 20;
        char argv_json[400];
        snprintf(argv_json, sizeof(argv_json),
                 "[\"sh\",\"-c\",\"mkdir -p /srv && head -c 1024 /dev/zero > /srv/small && "
                 "dd if=/dev/zero of=/srv/big bs=1048576 count=%d 2>/dev/null && httpd -p 8080 -h /srv\"]",
                 opt.ingress_mib);
        bn_session s;
        if (bn_api_run(&A, id, argv_json, &s, &e) < 0 || s.exit_code != 0)
                fail("starting httpd in the sandbox", e);
        /* The same files beside the cluster. */
        char dir[] = "/tmp/space-bench-ingress.XXXXXX";
        if (!mkdtemp(dir))
                fail("a directory for the host's httpd", NULL);
        char cmd[512];
        snprintf(cmd, sizeof(cmd),
                 "head -c 1024 /dev/zero > %s/small && dd if=/dev/zero of=%s/big bs=1048576 "
                 "count=%d 2>/dev/null",
                 dir, dir, opt.ingress_mib);
        if (system(cmd) != 0)
                fail("the host's files", NULL);
        int direct_port;
        pid_t httpd = host_httpd(dir, &direct_port);
        char direct_host[64];
        snprintf(direct_host, sizeof(direct_host), "127.0.0.1:%d", direct_port);
        wait_200(dp_port, full, "/small", headers);
        wait_200(direct_port, direct_host, "/small", "");

        int n = opt.ingress_samples, g = opt.ingress_runs;
        double *lat_i = samples_new(n), *lat_d = samples_new(n), *tp_i = samples_new(g), *tp_d = samples_new(g);
        for (int i = 0; i < n; i++) {
                uint64_t b = 0, b2 = 0;
                /* the first path alternates, so neither always goes first */
                lat_i[i] = http_get_once(dp_port, full, "/small", headers, &b);
                lat_d[i] = http_get_once(direct_port, direct_host, "/small", "", &b2);
                if (lat_i[i] < 0 || lat_d[i] < 0 || b != 1024 || b2 != 1024)
                        fail("a small GET", NULL);
        }
        for (int i = 0; i < g; i++) {
                uint64_t b = 0, b2 = 0;
                double a = http_get_once(dp_port, full, "/big", headers, &b);
                double d = http_get_once(direct_port, direct_host, "/big", "", &b2);
                if (a < 0 || d < 0 || b != big || b2 != big)
                        fail("a large GET", NULL);
                tp_i[i] = (double)big / 1048576.0 / (a / 1000.0);
                tp_d[i] = (double)big / 1048576.0 / (d / 1000.0);
        }
        kill(httpd, SIGTERM);
        waitpid(httpd, NULL, 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "space-bench-api: could not remove %s\n", dir);
        bn_stats si = bn_stats_of(lat_i, n), sd = bn_stats_of(lat_d, n);
        add_stats("ingress_get", lat_i, n);
        add_stats("direct_get", lat_d, n);
        add_double("ingress_get_ratio_p50", sd.p50 > 0 ? si.p50 / sd.p50 : 0);
        add_double("ingress_get_ratio_p99", sd.p99 > 0 ? si.p99 / sd.p99 : 0);
        double mi = median(tp_i, g), md = median(tp_d, g);
        json_object_object_add(out, "ingress_bytes", json_object_new_int64((int64_t)big));
        add_double("ingress_mib_s", mi);
        add_double("direct_mib_s", md);
        add_double("ingress_throughput_ratio", md > 0 ? mi / md : 0);
        free(lat_i);
        free(lat_d);
        free(tp_i);
        free(tp_d);
        delete_wait(id);
}

/* ---- sustained load: creates and exec round trips at 1, 4, 8, 16 … clients ---- */

static void add_level(const char *prefix, const bn_load_level *lv)
{
        char k[96];
        if (lv->ok > 0)
                add_stats(prefix, lv->ms, lv->ok);
        snprintf(k, sizeof(k), "%s_clients", prefix);
        json_object_object_add(out, k, json_object_new_int(lv->clients));
        snprintf(k, sizeof(k), "%s_per_s", prefix);
        add_double(k, lv->seconds > 0 ? lv->ok / lv->seconds : 0);
        snprintf(k, sizeof(k), "%s_seconds", prefix);
        add_double(k, lv->seconds);
        snprintf(k, sizeof(k), "%s_bound", prefix);
        json_object_object_add(out, k, json_object_new_string(lv->time_bound ? "time" : "count"));
        if (lv->error[0]) {
                snprintf(k, sizeof(k), "%s_error", prefix);
                json_object_object_add(out, k, json_object_new_string(lv->error));
        }
}

static void add_skipped(const char *prefix, const char *why)
{
        char k[96];
        snprintf(k, sizeof(k), "%s_error", prefix);
        json_object_object_add(out, k, json_object_new_string(why));
}

static void level_progress(const char *what, const bn_load_level *lv)
{
        bn_stats s = bn_stats_of(lv->ms, lv->ok);
        progress("load: %s, %d client%s: %d in %.1f s (%.1f/s), p50 %.1f ms, p99 %.1f ms%s%s", what, lv->clients,
                 lv->clients == 1 ? "" : "s", lv->ok, lv->seconds, lv->seconds > 0 ? lv->ok / lv->seconds : 0, s.p50,
                 s.p99, lv->error[0] ? "; failed: " : "", lv->error);
}

/* Runs the levels of kind in order; a level that fails or times out is
 * reported, and the levels after it (more clients) are skipped. For creates,
 * the figures of the largest level of at most 8 clients that succeeded are
 * also kept under the keys of the former single-level phase. */
static void load_levels(bn_load_kind kind, const bn_load_config *cfg, const char *setup_error)
{
        const char *what = kind == BN_LOAD_CREATE ? "creates" : "exec round trips";
        char why[640] = "";
        if (setup_error)
                snprintf(why, sizeof(why), "not run: %s", setup_error);
        for (int i = 0; i < opt.nlevels; i++) {
                char prefix[32];
                snprintf(prefix, sizeof(prefix), "%s_load_%d", kind == BN_LOAD_CREATE ? "create" : "exec",
                         opt.levels[i]);
                if (why[0]) {
                        add_skipped(prefix, why);
                        continue;
                }
                bn_load_level lv;
                bn_load_run(&A, kind, cfg, opt.levels[i], &lv);
                level_progress(what, &lv);
                add_level(prefix, &lv);
                if (lv.error[0])
                        snprintf(why, sizeof(why), "skipped: the level of %d client%s failed", lv.clients,
                                 lv.clients == 1 ? "" : "s");
                else if (kind == BN_LOAD_CREATE && lv.clients <= 8) {
                        json_object_object_add(out, "load_concurrency", json_object_new_int(lv.clients));
                        json_object_object_add(out, "load_creates", json_object_new_int(lv.ok));
                        add_double("load_creates_per_s", lv.seconds > 0 ? lv.ok / lv.seconds : 0);
                        add_stats("create_load", lv.ms, lv.ok);
                }
                bn_load_level_done(&lv);
        }
}

static bn_load_config load_config(int ops)
{
        return (bn_load_config){.api = opt.api,
                                .key = opt.key,
                                .create_body = BODY,
                                .op_timeout_s = OP_TIMEOUT_S,
                                .seconds = opt.load_s,
                                .ops = ops};
}

static void phase_load_create(void)
{
        bn_load_config cfg = load_config(opt.load_creates);
        load_levels(BN_LOAD_CREATE, &cfg, NULL);
}

/* Each client runs in a sandbox of its own, as agents each with their own
 * sandbox would: as many sandboxes as the largest level, made once for all
 * the levels, deleted after them. */
static void phase_load_exec(void)
{
        int n = opt.levels[opt.nlevels - 1], made = 0;
        char ids[BN_LOAD_MAX_CLIENTS][BN_ID_MAX], ops[BN_LOAD_MAX_CLIENTS][BN_ID_MAX];
        const char *sandboxes[BN_LOAD_MAX_CLIENTS];
        _cleanup_error_ sp_error *e = NULL;
        for (; made < n; made++) {
                if (bn_api_create(&A, BODY, ids[made], ops[made], &e) < 0)
                        break;
                sandboxes[made] = ids[made];
        }
        for (int i = 0; i < made; i++) {
                _cleanup_error_ sp_error *we = NULL;
                if (bn_api_wait_op(&A, ops[i], OP_TIMEOUT_S, &we) < 0 && !e)
                        e = TAKE_PTR(we);
        }
        char setup[600] = "";
        if (e)
                snprintf(setup, sizeof(setup), "making %d sandboxes for the clients: %s", n, e->message);
        bn_load_config cfg = load_config(opt.load_execs);
        cfg.sandboxes = sandboxes;
        load_levels(BN_LOAD_EXEC, &cfg, e ? setup : NULL);
        for (int i = 0; i < made; i++) {
                _cleanup_error_ sp_error *de = NULL;
                if (bn_api_delete(&A, ids[i], ops[i], &de) < 0)
                        fail("deleting the exec clients' sandboxes", de);
        }
        for (int i = 0; i < made; i++) {
                _cleanup_error_ sp_error *de = NULL;
                if (bn_api_wait_op(&A, ops[i], OP_TIMEOUT_S, &de) < 0)
                        fail("deleting the exec clients' sandboxes", de);
        }
}

/* ---- density ---- */

/* A "Key: N kB" line of /proc/meminfo, in bytes. */
static int64_t meminfo(const char *key)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/meminfo", "re");
        char line[256];
        size_t klen = strlen(key);
        while (f && fgets(line, sizeof(line), f))
                if (strncmp(line, key, klen) == 0 && line[klen] == ':')
                        return strtoll(line + klen + 1, NULL, 10) * 1024;
        return -1;
}

/* The memory the worker's cgroup parent holds, in bytes (v2 memory.current
 * or v1 memory.usage_in_bytes), -1 when there is no such cgroup. */
static int64_t cgroup_memory(void)
{
        if (!opt.cgroup)
                return -1;
        char path[512];
        const char *forms[] = {"/sys/fs/cgroup/%s/memory.current", "/sys/fs/cgroup/memory/%s/memory.usage_in_bytes"};
        for (size_t i = 0; i < 2; i++) {
                snprintf(path, sizeof(path), forms[i], opt.cgroup);
                _cleanup_fclose_ FILE *f = fopen(path, "re");
                long long v;
                if (f && fscanf(f, "%lld", &v) == 1)
                        return v;
        }
        return -1;
}

/* Drops clean page cache so that MemAvailable moves with what the
 * sandboxes hold rather than with what was read meanwhile. */
static void settle(void)
{
        sync();
        _cleanup_fclose_ FILE *f = fopen("/proc/sys/vm/drop_caches", "we");
        if (f)
                fputs("1\n", f);
        usleep(500000);
}

static void phase_density(void)
{
        char(*ids)[BN_ID_MAX] = calloc((size_t)opt.density_max, BN_ID_MAX);
        char(*ops)[BN_ID_MAX] = calloc((size_t)DENSITY_BATCH, BN_ID_MAX);
        if (!ids || !ops)
                fail("allocating ids", NULL);
        settle();
        int64_t avail0 = meminfo("MemAvailable"), cg0 = cgroup_memory();
        int64_t t0 = sp_now_mono_us(), deadline = t0 + (int64_t)opt.density_s * 1000000;
        int n = 0, failed = 0; /* sandboxes made (all deleted below), of which failed */
        char stop[512] = "reached --density-max";
        while (n < opt.density_max && !failed) {
                if (sp_now_mono_us() >= deadline) {
                        snprintf(stop, sizeof(stop), "reached the time bound (%d s)", opt.density_s);
                        break;
                }
                int batch = opt.density_max - n < DENSITY_BATCH ? opt.density_max - n : DENSITY_BATCH, made = 0;
                _cleanup_error_ sp_error *e = NULL;
                for (; made < batch; made++)
                        if (bn_api_create(&A, BODY, ids[n + made], ops[made], &e) < 0)
                                break;
                for (int i = 0; i < made; i++) {
                        _cleanup_error_ sp_error *we = NULL;
                        if (bn_api_wait_op(&A, ops[i], 60, &we) < 0) {
                                failed++;
                                if (!e)
                                        e = TAKE_PTR(we);
                        }
                }
                n += made;
                if (e)
                        snprintf(stop, sizeof(stop), "a create failed after %d running: %s", n - failed, e->message);
                else if (n % 250 == 0)
                        progress("density: %d idle sandboxes", n);
        }
        double create_s = (double)(sp_now_mono_us() - t0) / 1e6;
        settle();
        int64_t avail1 = meminfo("MemAvailable"), cg1 = cgroup_memory(), total = meminfo("MemTotal");
        int running = n - failed;
        progress("density: %d sandboxes, deleting them", n);
        /* Delete in batches: every delete accepted, then waited for. */
        for (int i = 0; i < n; i += DENSITY_BATCH) {
                int m = n - i < DENSITY_BATCH ? n - i : DENSITY_BATCH;
                for (int j = 0; j < m; j++) {
                        _cleanup_error_ sp_error *e = NULL;
                        if (bn_api_delete(&A, ids[i + j], ops[j], &e) < 0)
                                fail("a density delete", e);
                }
                for (int j = 0; j < m; j++) {
                        _cleanup_error_ sp_error *e = NULL;
                        if (bn_api_wait_op(&A, ops[j], OP_TIMEOUT_S, &e) < 0)
                                fail("a density delete", e);
                }
        }
        double per = running > 0 ? (double)(avail0 - avail1) / running : 0;
        json_object_object_add(out, "density_sandboxes", json_object_new_int(running));
        json_object_object_add(out, "density_stop", json_object_new_string(stop));
        add_double("density_create_s", create_s);
        add_double("density_mem_available_per_sandbox_mib", per / (1024.0 * 1024.0));
        if (cg0 >= 0 && cg1 >= 0 && running > 0)
                add_double("density_cgroup_per_sandbox_mib", (double)(cg1 - cg0) / running / (1024.0 * 1024.0));
        add_double("host_mem_total_gib", (double)total / (1024.0 * 1024.0 * 1024.0));
        if (per > 0)
                add_double("density_extrapolated_24gib", 24.0 * 1024 * 1024 * 1024 / per);
        free(ids);
        free(ops);
}

/* ---- main ---- */

static int arg_int(const char *name, const char *v, int lo, int hi)
{
        char *end = NULL;
        errno = 0;
        long n = v ? strtol(v, &end, 10) : 0;
        if (!v || errno || *end || n < lo || n > hi) {
                fprintf(stderr, "space-bench-api: %s must be an integer from %d to %d\n", name, lo, hi);
                exit(2);
        }
        return (int)n;
}

/* --load-levels: client counts, ascending, comma-separated. */
static void parse_levels(const char *list)
{
        opt.nlevels = 0;
        for (const char *p = list; *p;) {
                char one[16];
                size_t len = strcspn(p, ",");
                snprintf(one, sizeof(one), "%.*s", (int)(len < sizeof(one) - 1 ? len : sizeof(one) - 1), p);
                int n = arg_int("each of --load-levels", one, 1, BN_LOAD_MAX_CLIENTS);
                if (opt.nlevels == MAX_LEVELS || (opt.nlevels > 0 && n <= opt.levels[opt.nlevels - 1])) {
                        fprintf(stderr, "space-bench-api: --load-levels takes up to %d client counts, ascending\n",
                                MAX_LEVELS);
                        exit(2);
                }
                opt.levels[opt.nlevels++] = n;
                p += len + (p[len] == ',');
        }
        if (opt.nlevels == 0) {
                fprintf(stderr, "space-bench-api: --load-levels needs at least one client count\n");
                exit(2);
        }
}

/* Whether --only (a comma-separated list of phases) names phase, or is absent. */
static bool wanted(const char *phase)
{
        if (!opt.only)
                return true;
        size_t n = strlen(phase);
        for (const char *p = opt.only; *p;) {
                size_t len = strcspn(p, ",");
                if (len == n && strncmp(p, phase, n) == 0)
                        return true;
                p += len + (p[len] == ',');
        }
        return false;
}

static void usage(void) __attribute__((noreturn));
static void usage(void)
{
        fprintf(stderr,
                "usage: space-bench-api --api URL --key-file FILE --metrics URL [--cgroup NAME] [--quick] "
                "[--samples N] [--exec-samples N] [--stream-mib N] [--stream-runs N] [--load-levels N,N,…] "
                "[--load-creates N] [--load-execs N] [--load-seconds N] [--density-max N] [--density-seconds N] "
                "[--ingress-samples N] [--ingress-mib N] [--ingress-runs N] [--only PHASE,…]\n");
        exit(2);
}

static void read_key(const char *path)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_file_read(path, sizeof(opt.key), &b, &e) < 0)
                fail("the key file", e);
        while (b.len && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r'))
                b.len--;
        if (b.len == 0 || b.len >= sizeof(opt.key))
                fail("the key file is empty or too long", NULL);
        memcpy(opt.key, b.data, b.len);
        opt.key[b.len] = '\0';
}

int main(int argc, char **argv)
{
        bool quick = false;
        const char *key_file = NULL;
        int samples = 0, exec_samples = 0, stream_mib = 0, stream_runs = 0, load_creates = 0, load_execs = 0,
            load_s = 0, density_max = -1, density_s = 0;
        const char *levels = "1,4,8,16";
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (strcmp(a, "--quick") == 0)
                        quick = true;
                else if (strcmp(a, "--api") == 0 && v && ++i)
                        opt.api = v;
                else if (strcmp(a, "--key-file") == 0 && v && ++i)
                        key_file = v;
                else if (strcmp(a, "--metrics") == 0 && v && ++i)
                        opt.metrics = v;
                else if (strcmp(a, "--cgroup") == 0 && v && ++i)
                        opt.cgroup = v;
                else if (strcmp(a, "--only") == 0 && v && ++i)
                        opt.only = v;
                else if (strcmp(a, "--samples") == 0 && ++i)
                        samples = arg_int(a, v, 3, 10000);
                else if (strcmp(a, "--exec-samples") == 0 && ++i)
                        exec_samples = arg_int(a, v, 3, 100000);
                else if (strcmp(a, "--stream-mib") == 0 && ++i)
                        stream_mib = arg_int(a, v, 1, 16384);
                else if (strcmp(a, "--stream-runs") == 0 && ++i)
                        stream_runs = arg_int(a, v, 1, 100);
                else if (strcmp(a, "--load-levels") == 0 && v && ++i)
                        levels = v;
                else if (strcmp(a, "--load-creates") == 0 && ++i)
                        load_creates = arg_int(a, v, 1, 100000);
                else if (strcmp(a, "--load-execs") == 0 && ++i)
                        load_execs = arg_int(a, v, 1, 1000000);
                else if (strcmp(a, "--load-seconds") == 0 && ++i)
                        load_s = arg_int(a, v, 1, 3600);
                else if (strcmp(a, "--density-max") == 0 && ++i)
                        density_max = arg_int(a, v, 0, 100000);
                else if (strcmp(a, "--density-seconds") == 0 && ++i)
                        density_s = arg_int(a, v, 1, 86400);
                else if (strcmp(a, "--ingress-samples") == 0 && ++i)
                        opt.ingress_samples = arg_int(a, v, 3, 100000);
                else if (strcmp(a, "--ingress-mib") == 0 && ++i)
                        opt.ingress_mib = arg_int(a, v, 1, 4096);
                else if (strcmp(a, "--ingress-runs") == 0 && ++i)
                        opt.ingress_runs = arg_int(a, v, 1, 100);
                else
                        usage();
        }
        if (!opt.api || !key_file || !opt.metrics)
                usage();
        read_key(key_file);
        opt.samples = samples ? samples : quick ? 10 : 100;
        opt.exec_samples = exec_samples ? exec_samples : quick ? 30 : 300;
        opt.stream_mib = stream_mib ? stream_mib : quick ? 32 : 256;
        opt.stream_runs = stream_runs ? stream_runs : quick ? 1 : 5;
        parse_levels(levels);
        opt.load_creates = load_creates ? load_creates : quick ? 60 : 400;
        opt.load_execs = load_execs ? load_execs : quick ? 300 : 2000;
        opt.load_s = load_s ? load_s : quick ? 6 : 30;
        opt.density_max = density_max >= 0 ? density_max : quick ? 50 : 2000;
        opt.density_s = density_s ? density_s : quick ? 30 : 900;
        opt.ingress_samples = opt.ingress_samples ? opt.ingress_samples : quick ? 20 : 300;
        opt.ingress_mib = opt.ingress_mib ? opt.ingress_mib : quick ? 16 : 256;
        opt.ingress_runs = opt.ingress_runs ? opt.ingress_runs : quick ? 1 : 5;
        signal(SIGPIPE, SIG_IGN);

        _cleanup_error_ sp_error *e = NULL;
        if (bn_api_init(&A, opt.api, opt.key, &e) < 0)
                fail("API client", e);
        out = json_object_new_object();
        json_object_object_add(out, "samples", json_object_new_int(opt.samples));
        if (wanted("load") || wanted("create-load") || wanted("exec-load")) {
                json_object *lv = json_object_new_array();
                for (int i = 0; i < opt.nlevels; i++)
                        json_object_array_add(lv, json_object_new_int(opt.levels[i]));
                json_object_object_add(out, "load_levels", lv);
                json_object_object_add(out, "load_seconds", json_object_new_int(opt.load_s));
        }

        set_warm_pool(0);
        wait_warm(0);
        if (wanted("create")) {
                progress("create → running, cold (%d samples)", opt.samples);
                phase_create("create_cold", false);
        }
        if (wanted("first")) {
                progress("time to first output, cold");
                phase_first_output("first_output_cold", false);
        }
        if (wanted("create") || wanted("first")) {
                set_warm_pool(WARM_POOL);
                if (wanted("create")) {
                        progress("create → running, warm pool of %d", WARM_POOL);
                        phase_create("create_warm", true);
                }
                if (wanted("first")) {
                        progress("time to first output, warm");
                        phase_first_output("first_output", true);
                }
                set_warm_pool(0);
                wait_warm(0);
        }
        if (wanted("exec") || wanted("stream")) {
                char id[BN_ID_MAX];
                int64_t t0;
                create_running(id, &t0);
                if (wanted("exec")) {
                        progress("exec round trip (%d samples)", opt.exec_samples);
                        phase_exec(id);
                }
                if (wanted("stream")) {
                        progress("streaming %d MiB × %d, and the floor", opt.stream_mib, opt.stream_runs);
                        phase_stream(id);
                }
                delete_wait(id);
        }
        if (wanted("ingress")) {
                progress("ingress: %d small GETs and %d of %d MiB, through the data plane and direct",
                         opt.ingress_samples, opt.ingress_runs, opt.ingress_mib);
                phase_ingress();
        }
        if (wanted("load") || wanted("create-load")) {
                progress("load: creates at %s clients (at most %d or %d s a level)", levels, opt.load_creates,
                         opt.load_s);
                phase_load_create();
        }
        if (wanted("load") || wanted("exec-load")) {
                progress("load: exec round trips at %s clients (at most %d or %d s a level)", levels, opt.load_execs,
                         opt.load_s);
                phase_load_exec();
        }
        if (wanted("density") && opt.density_max > 0) {
                progress("density: up to %d idle sandboxes or %d s", opt.density_max, opt.density_s);
                phase_density();
        }
        printf("%s\n", json_object_to_json_string_ext(out, JSON_C_TO_STRING_PRETTY));
        json_object_put(out);
        bn_api_done(&A);
        return 0;
}
