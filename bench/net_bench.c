/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-bench-net: a sandbox's connections through the node's egress gateway,
 * beside the same connections made without it, in the same run
 * (`bench/run net`, docs/performance.md).
 *
 *   space-bench-net [--samples N] [--runs N] [--mib N] [--rounds N] [--quick] [--json]
 *
 * What it starts (all of it removed again, also when it fails or is killed:
 * the harness's guard runs `space-worker --purge`, deletes the namespaces and
 * the directory once this process is gone):
 *   - an "internet": the test harness's namespace (tests/harness/inet.h: only
 *     its loopback, the name bench.test → 10.213.200.1 in its DNS server at
 *     10.213.253.53) and, inside it, this program's own HTTP server on port
 *     8000 (threads of this process on a socket made in that namespace):
 *     GET / answers "ok", GET /bytes/N answers N bytes (byte p is
 *     'a' + p % 26);
 *   - a space-worker with --sandbox-network, its gateway's upstream confined
 *     to that namespace (--gateway-upstream-netns, --gateway-resolver,
 *     --gateway-public-cidrs), its network, ports and names its own
 *     (sp_test_worker_net_args), and one sandbox whose egress profile allows
 *     bench.test on port 8000: its traffic goes sandbox → veth → the
 *     worker's nftables redirect → space-gateway (sniffs the Host, checks the
 *     profile, dials upstream in the internet, relays) → the server;
 *   - beside it, a plain network namespace joined to the internet by a veth
 *     pair and two host routes: no gateway, no nftables, the same server.
 * No packet can leave the machine: the gateway's upstream sockets live in the
 * internet namespace, which holds nothing but its loopback and the veth to
 * the plain namespace.
 *
 * The same static client (bench/net_client/) runs in both places with the
 * same arguments: in the sandbox (copied in with WriteFile, run with Exec) and
 * in the plain namespace. A warm-up run on each path checks every byte of a
 * 4 MiB download (the relay's integrity, not timed); then the client measures DNS lookups (query → answer), TCP
 * connect, connect → first byte of a small HTTP GET, and downloads of --mib
 * MiB (GET /bytes/N, connect → last byte). The runs alternate between the two
 * paths in --rounds rounds (the first path of each round alternates too), so
 * that drift on a shared machine falls on both. Figures: p50/p90/p99 (ms) of
 * each latency per path, the download's median, min and max MiB/s per path,
 * and the ratios gateway/direct. Speed is never judged; a failed run is an
 * error (exit 1). Needs root: exits 77 without it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <event2/event.h>

#include "guard.h"
#include "harness.h"
#include "inet.h"
#include "launcher.h"
#include "netns.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/id.h"
#include "space/json.h"
#include "space/rpc.h"
#include "stats.h"

#define NAME "bench.test"
#define SERVER_ADDR "10.213.200.1"
#define SERVER_PORT 8000
#define PROFILE "{\"name\":\"bench\",\"domains\":[\"" NAME "\"],\"ports\":[8000]}"
#define CLIENT_IN_SANDBOX "/tmp/space-bench-net-client"

static struct {
        int samples, runs, mib, rounds;
        bool json;
} opt;

enum { GW, DIRECT };
static const char *const path_name[] = {"gateway", "direct"};

/* What the client reported, per path. */
typedef struct path_samples {
        double *dns, *connect, *first, *mib_s;
        int n_dns, n_setup, n_get;
} path_samples;
static path_samples P[2];

/* ---- the internet's HTTP server (threads of this process) ---- */

#define SERVER_THREADS 3
static int srv_fd = -1;
static pthread_t srv_thread[SERVER_THREADS];
static int srv_threads;
#define SERVER_CHUNK (1 << 20)
static char srv_chunk[SERVER_CHUNK + 26]; /* srv_chunk[i] = 'a' + i % 26 */

static void serve_one(int fd)
{
        struct timeval tv = {.tv_sec = 10};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        char req[4096];
        size_t len = 0;
        while (len < sizeof(req) - 1) {
                ssize_t n = read(fd, req + len, sizeof(req) - 1 - len);
                if (n <= 0)
                        return;
                len += (size_t)n;
                req[len] = '\0';
                if (strstr(req, "\r\n\r\n"))
                        break;
        }
        unsigned long long want = 0;
        bool bytes = sscanf(req, "GET /bytes/%llu ", &want) == 1;
        char head[256];
        int hn = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nConnection: close\r\n\r\n%s",
                          bytes ? want : 3ull, bytes ? "" : "ok\n");
        if (send(fd, head, (size_t)hn, MSG_NOSIGNAL | (bytes && want ? MSG_MORE : 0)) != hn)
                return;
        for (unsigned long long sent = 0; bytes && sent < want;) {
                size_t k = want - sent < SERVER_CHUNK ? (size_t)(want - sent) : SERVER_CHUNK;
                ssize_t n = send(fd, srv_chunk + sent % 26, k, MSG_NOSIGNAL); /* byte p is 'a' + p % 26 */
                if (n <= 0)
                        return;
                sent += (unsigned long long)n;
        }
}

static void *serve(void *arg)
{
        (void)arg;
        for (;;) {
                int c = accept4(srv_fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return NULL; /* shut down */
                }
                serve_one(c);
                close(c);
        }
}

/* The listening socket is made inside the internet's namespace (this thread
 * enters it for the socket() call and comes back); the threads serve it. */
static int server_start(const sp_test_netns *ns, sp_error **err)
{
        for (size_t i = 0; i < sizeof(srv_chunk); i++)
                srv_chunk[i] = (char)('a' + i % 26);
        _cleanup_close_ int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (self < 0 || setns(ns->fd, CLONE_NEWNET) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "enter the internet's namespace");
        srv_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int e = errno;
        if (setns(self, CLONE_NEWNET) < 0)
                abort(); /* this thread must not stay in there */
        if (srv_fd < 0)
                return sp_error_set_errno(err, SP_E_IO, e, "socket");
        int one = 1;
        setsockopt(srv_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(SERVER_PORT)};
        if (bind(srv_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(srv_fd, 128) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "the server's socket on port %d", SERVER_PORT);
        for (; srv_threads < SERVER_THREADS; srv_threads++)
                if ((e = pthread_create(&srv_thread[srv_threads], NULL, serve, NULL)) != 0)
                        return sp_error_set_errno(err, SP_E_LIMIT, e, "start the server's threads");
        return 0;
}

static void server_stop(void)
{
        if (srv_fd >= 0)
                shutdown(srv_fd, SHUT_RDWR); /* wakes the threads' accept() */
        for (int i = 0; i < srv_threads; i++)
                pthread_join(srv_thread[i], NULL);
        srv_threads = 0;
        srv_fd = sp_close(srv_fd);
}

/* ---- setup and teardown (an unchecked fixture: runs whatever the test does) ---- */

static char *dir;
static sp_test_inet in;
static sp_test_netns direct_ns = {.fd = -1};
static int inet_guard, direct_guard, purge_guard;
static sp_test_worker_net net;
static sp_test_proc worker;
static char w_bin[PATH_MAX], w_state[600], w_storage[600], w_image[600], w_listen[80], w_cg[120], w_log[600];
static const char *w_argv[40];
static bool worker_started;
static char addr[64], sandbox[SP_ID_MAX], client_bin[PATH_MAX];

static json_object *rpc(const char *method, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_object *rpc(const char *method, const char *fmt, ...)
{
        char text[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_msg(sp_json_parse(text, strlen(text), &req, NULL) == 0, "bad JSON: %s", text);
        json_object *resp = NULL;
        sp_error *e = NULL;
        if (sp_rpc_call_sync(addr, NULL, method, req, 120000, &resp, &e) < 0) {
                sp_test_proc_dump_log(&worker, 30);
                ck_abort_msg("%s: %s", method, e->message);
        }
        return resp;
}

/* ---- streaming calls: WriteFile, AttachSession ---- */

typedef struct stream_state {
        struct event_base *base;
        sp_buf out, err;
        int code; /* the exit event's code; -1 until it came */
        sp_error *error;
        bool ended;
} stream_state;

static void st_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)s;
        stream_state *st = ud;
        if (type == SP_RPC_FRAME_DATA && n >= 9) {
                sp_buf_append(p[0] == 2 ? &st->err : &st->out, p + 9, n - 9, NULL);
        } else if (type == SP_RPC_FRAME_JSON) {
                _cleanup_json_ json_object *o = NULL;
                json_object *ev, *code;
                if (sp_json_parse((const char *)p, n, &o, NULL) == 0 && json_object_object_get_ex(o, "event", &ev) &&
                    strcmp(json_object_get_string(ev), "exit") == 0 && json_object_object_get_ex(o, "code", &code))
                        st->code = json_object_get_int(code);
        }
}

static void st_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        (void)trailer;
        stream_state *st = ud;
        st->ended = true;
        if (err)
                sp_error_set(&st->error, err->code, "%s", err->message);
        event_base_loopbreak(st->base);
}

static const sp_rpc_stream_ops st_ops = {.on_frame = st_frame, .on_end = st_end};

/* Runs a streaming call to its end; data (may be NULL) goes first as DATA frames. */
static void run_stream(const char *method, json_object *req, const void *data, size_t len, stream_state *st)
{
        st->base = event_base_new();
        st->code = -1;
        sp_error *e = NULL;
        sp_rpc_client *cli = sp_rpc_client_new(st->base, addr, NULL, &e);
        sp_test_ok(cli ? 0 : -1, &e);
        sp_rpc_stream *s = sp_rpc_client_stream(cli, method, req, 600000, &st_ops, st, &e);
        sp_test_ok(s ? 0 : -1, &e);
        for (size_t off = 0; data && off < len && !st->ended;) {
                size_t n = len - off > 65536 ? 65536 : len - off;
                int r = sp_rpc_stream_send(s, SP_RPC_FRAME_DATA, (const char *)data + off, n, &e);
                if (r < 0) {
                        sp_error_free(e);
                        e = NULL;
                        event_base_loop(st->base, EVLOOP_ONCE);
                        continue;
                }
                off += n;
                while (!st->ended && sp_rpc_stream_queued(s) > SP_RPC_SEND_HIGH_WATERMARK / 2)
                        event_base_loop(st->base, EVLOOP_ONCE);
        }
        if (data && !st->ended)
                sp_rpc_stream_close_send(s, NULL);
        while (!st->ended)
                event_base_dispatch(st->base);
        sp_rpc_client_free(cli);
        event_base_free(st->base);
        st->base = NULL;
}

static void stream_free(stream_state *st)
{
        sp_buf_free(&st->out);
        sp_buf_free(&st->err);
        sp_error_free(st->error);
        st->error = NULL;
}

/* ---- the fixture ---- */

static void run_in(const sp_test_netns *ns, const char *const *argv)
{
        sp_error *e = NULL;
        int r = sp_test_netns_exec(ns, argv, NULL, 10000, &e);
        if (r > 0)
                ck_abort_msg("%s %s %s in %s: exit %d", argv[0], argv[1], argv[2], ns->name, r);
        sp_test_ok(r, &e);
}

static uint32_t ip4(const char *s)
{
        struct in_addr a = {0};
        inet_pton(AF_INET, s, &a);
        return ntohl(a.s_addr);
}

static void direct_up(void)
{
        sp_error *e = NULL;
        sp_test_ok(sp_test_netns_create(&direct_ns, &e), &e);
        const char *del[] = {"ip", "netns", "delete", direct_ns.name, NULL};
        direct_guard = sp_test_guard_run(del, &e);
        sp_test_ok(direct_guard, &e);
        /* A veth pair from the plain namespace to the internet; its /30 must not
         * hold the internet's own addresses (the harness picks it from 10.213/16). */
        sp_test_veth v;
        for (int tries = 0;; tries++) {
                sp_test_ok(sp_test_netns_veth(&direct_ns, &in.ns, &v, &e), &e);
                uint32_t sub = ip4(v.addr_a) & ~3u;
                if (sub != (ip4(SERVER_ADDR) & ~3u) && sub != (ip4(SP_TEST_INET_RESOLVER) & ~3u))
                        break;
                const char *del_link[] = {"ip", "link", "del", v.name_a, NULL};
                run_in(&direct_ns, del_link);
                ck_assert_msg(tries < 8, "no veth subnet apart from the internet's addresses");
        }
        const char *r1[] = {"ip", "route", "add", SERVER_ADDR "/32", "via", v.addr_b, NULL};
        const char *r2[] = {"ip", "route", "add", SP_TEST_INET_RESOLVER "/32", "via", v.addr_b, NULL};
        run_in(&direct_ns, r1);
        run_in(&direct_ns, r2);
}

static void worker_up(void)
{
        sp_error *e = NULL;
        int port = sp_test_free_port(&e);
        sp_test_ok(port > 0 ? 0 : -1, &e);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        sp_test_ok(sp_test_worker_net_args(port, in.ns.path, &net, &e), &e);
        snprintf(w_bin, sizeof(w_bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(w_state, sizeof(w_state), "--state-dir=%s/state", dir);
        snprintf(w_storage, sizeof(w_storage), "--storage-dir=%s/storage", dir);
        snprintf(w_image, sizeof(w_image), "--storage-image=%s/storage.img", dir);
        snprintf(w_listen, sizeof(w_listen), "--listen=%s", addr);
        snprintf(w_cg, sizeof(w_cg), "--cgroup-parent=space-bench-net-%d", (int)getpid());
        snprintf(w_log, sizeof(w_log), "%s/worker.log", dir);
        const char *fixed[] = {w_bin,
                               w_storage,
                               w_image,
                               "--storage-size=2G",
                               w_listen,
                               "--http-listen=",
                               "--insecure",
                               "--slots=8",
                               "--log-format=text",
                               w_cg,
                               w_state,
                               "--gateway-resolver=" SP_TEST_INET_RESOLVER,
                               "--gateway-public-cidrs=" SP_TEST_INET_CIDR};
        size_t n = 0;
        for (; n < sizeof(fixed) / sizeof(fixed[0]); n++)
                w_argv[n] = fixed[n];
        for (size_t i = 0; net.argv[i]; i++)
                w_argv[n++] = net.argv[i];
        w_argv[n] = NULL;
        purge_guard = sp_test_worker_purge_guard(w_argv, &e);
        sp_test_ok(purge_guard, &e);
        worker_started = true;
        sp_test_ok(sp_test_proc_start(&worker, "worker", w_argv, &(sp_test_proc_opts){.log_path = w_log}, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 180000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "egress gateway connected", 30000, &e), &e);
}

static void sandbox_up(void)
{
        ck_assert(sp_id_new("sbx", sandbox, NULL) == 0);
        json_object_put(rpc("CreateSandbox",
                            "{\"id\":\"%s\",\"template\":\"base\",\"tenant_id\":\"ten_bench\",\"egress\":%s}", sandbox,
                            PROFILE));
        /* The client, copied in. */
        _cleanup_buf_ sp_buf bin = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(client_bin, 64 << 20, &bin, &e), &e);
        char text[256];
        snprintf(text, sizeof(text), "{\"sandbox_id\":\"%s\",\"path\":\"%s\",\"mode\":493}", sandbox,
                 CLIENT_IN_SANDBOX);
        _cleanup_json_ json_object *req = NULL;
        ck_assert(sp_json_parse(text, strlen(text), &req, NULL) == 0);
        stream_state st = {0};
        run_stream("WriteFile", req, bin.data, bin.len, &st);
        ck_assert_msg(!st.error, "WriteFile %s: %s", CLIENT_IN_SANDBOX, st.error ? st.error->message : "");
        stream_free(&st);
}

static void up(void)
{
        dir = sp_test_tmpdir("bench-net");
        snprintf(client_bin, sizeof(client_bin), "%s/bin/space-bench-net-client", sp_test_binary_dir());
        ck_assert_msg(access(client_bin, X_OK) == 0, "%s is missing: build first", client_bin);
        static const sp_test_inet_record rec[] = {{NAME, SERVER_ADDR}};
        sp_error *e = NULL;
        sp_test_ok(sp_test_inet_start(&in, dir, rec, 1, &e), &e);
        const char *del[] = {"ip", "netns", "delete", in.ns.name, NULL};
        inet_guard = sp_test_guard_run(del, &e);
        sp_test_ok(inet_guard, &e);
        sp_test_ok(server_start(&in.ns, &e), &e);
        direct_up();
        worker_up();
        sandbox_up();
}

static void down(void)
{
        if (worker_started) {
                if (sandbox[0] && sp_test_proc_running(&worker)) {
                        _cleanup_json_ json_object *req = json_object_new_object();
                        json_object_object_add(req, "id", json_object_new_string(sandbox));
                        json_object *resp = NULL;
                        sp_error *e = NULL;
                        if (sp_rpc_call_sync(addr, NULL, "DeleteSandbox", req, 60000, &resp, &e) < 0)
                                fprintf(stderr, "space-bench-net: DeleteSandbox: %s\n", e->message);
                        sp_error_free(e);
                        json_object_put(resp);
                }
                sp_test_proc_stop(&worker, 5000, NULL);
                sp_test_proc_free(&worker);
                /* What a stopped worker leaves (sandboxes, cgroups, mounts, its
                 * table, gateway and links), its purge takes. */
                sp_error *e = NULL;
                if (sp_test_worker_purge(w_argv, &e) < 0) {
                        fprintf(stderr, "space-bench-net: purge: %s\n", e->message);
                        sp_error_free(e);
                } else {
                        sp_test_guard_done(purge_guard);
                }
        }
        server_stop();
        if (direct_ns.name[0]) {
                sp_test_netns_destroy(&direct_ns);
                sp_test_guard_done(direct_guard);
        }
        if (in.ns.name[0]) {
                sp_test_inet_stop(&in);
                sp_test_guard_done(inet_guard);
        }
        if (dir) {
                sp_test_tmpdir_remove(dir);
                free(dir);
                dir = NULL;
        }
}

/* ---- running the client ---- */

/* Adds what the client printed to p's samples, which must be what it was asked for. */
static void take(const char *out, path_samples *p, int verify, int dns, int setup, int get)
{
        int nv = 0, nd = 0, ns = 0, ng = 0;
        for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
                double a, b;
                unsigned long long bytes;
                if (sscanf(l, "verify %llu", &bytes) == 1) {
                        nv += bytes == (unsigned long long)verify;
                } else if (sscanf(l, "dns %lf", &a) == 1) {
                        p->dns[p->n_dns++] = a;
                        nd++;
                } else if (sscanf(l, "setup %lf %lf", &a, &b) == 2) {
                        p->connect[p->n_setup] = a;
                        p->first[p->n_setup++] = b;
                        ns++;
                } else if (sscanf(l, "get %llu %lf", &bytes, &a) == 2) {
                        ck_assert_msg(a > 0, "a download took no time");
                        p->mib_s[p->n_get++] = (double)bytes / 1048576.0 / a;
                        ng++;
                }
        }
        ck_assert_msg(nv == (verify > 0) && nd == dns && ns == setup && ng == get,
                      "the client reported %d checked downloads, %d lookups, %d connections and %d downloads instead "
                      "of %d, %d, %d, %d:\n%s",
                      nv, nd, ns, ng, verify > 0, dns, setup, get, out);
}

/* The client's arguments, the same in both places. */
static size_t client_args(const char **argv, char (*num)[24], int verify, int dns, int setup, int get)
{
        size_t n = 0;
        argv[n++] = "--verify";
        snprintf(num[5], 24, "%d", verify);
        argv[n++] = num[5];
        argv[n++] = "--resolver";
        argv[n++] = SP_TEST_INET_RESOLVER;
        argv[n++] = "--name";
        argv[n++] = NAME;
        argv[n++] = "--port";
        snprintf(num[0], 24, "%d", SERVER_PORT);
        argv[n++] = num[0];
        argv[n++] = "--dns";
        snprintf(num[1], 24, "%d", dns);
        argv[n++] = num[1];
        argv[n++] = "--setup";
        snprintf(num[2], 24, "%d", setup);
        argv[n++] = num[2];
        argv[n++] = "--get";
        snprintf(num[3], 24, "%d", get);
        argv[n++] = num[3];
        argv[n++] = "--bytes";
        snprintf(num[4], 24, "%llu", (unsigned long long)opt.mib << 20);
        argv[n++] = num[4];
        argv[n] = NULL;
        return n;
}

static void run_sandbox(int verify, int dns, int setup, int get, path_samples *p)
{
        const char *args[24];
        char num[6][24];
        client_args(args, num, verify, dns, setup, get);
        _cleanup_json_ json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string(CLIENT_IN_SANDBOX));
        for (size_t i = 0; args[i]; i++)
                json_object_array_add(argv, json_object_new_string(args[i]));
        char ses[SP_ID_MAX];
        ck_assert(sp_id_new("ses", ses, NULL) == 0);
        json_object_put(rpc("Exec", "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":%s}", sandbox, ses,
                            json_object_to_json_string_ext(argv, JSON_C_TO_STRING_PLAIN)));
        _cleanup_json_ json_object *req = json_object_new_object();
        json_object_object_add(req, "session_id", json_object_new_string(ses));
        stream_state st = {0};
        run_stream("AttachSession", req, NULL, 0, &st);
        ck_assert_msg(!st.error, "AttachSession: %s", st.error ? st.error->message : "");
        if (st.code != 0) {
                /* What the worker and the gateway saw, to tell a lost packet from
                 * a refusal or a sandbox the gateway did not know. */
                sp_test_proc_dump_log(&worker, 80);
                json_object *log = NULL;
                sp_error *e = NULL;
                _cleanup_json_ json_object *q = json_object_new_object();
                json_object_object_add(q, "id", json_object_new_string(sandbox));
                json_object_object_add(q, "limit", json_object_new_int(50));
                if (sp_rpc_call_sync(addr, NULL, "GetEgressLog", q, 10000, &log, &e) == 0)
                        fprintf(stderr, "space-bench-net: the sandbox's egress log: %s\n",
                                json_object_to_json_string_ext(log, JSON_C_TO_STRING_PRETTY));
                sp_error_free(e);
                json_object_put(log);
        } else if (st.err.data && *st.err.data)
                fprintf(stderr, "%s", st.err.data);
        ck_assert_msg(st.code == 0, "the client in the sandbox failed (exit %d): %s", st.code,
                      st.err.data ? st.err.data : "");
        take(st.out.data ? st.out.data : "", p, verify, dns, setup, get);
        stream_free(&st);
}

static void run_direct(int verify, int dns, int setup, int get, path_samples *p)
{
        const char *argv[26];
        char num[6][24];
        argv[0] = client_bin;
        client_args(argv + 1, num, verify, dns, setup, get);
        char out[PATH_MAX];
        snprintf(out, sizeof(out), "%s/direct.out", dir);
        unlink(out);
        sp_error *e = NULL;
        pid_t pid;
        sp_test_ok(sp_test_spawn(argv,
                                 &(sp_test_spawn_opts){.netns = direct_ns.path, .log_path = out, .pdeathsig = SIGKILL},
                                 &pid, &e),
                   &e);
        int status = 0;
        sp_test_ok(sp_test_child_wait(pid, 600000, &status, &e), &e);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        sp_test_ok(sp_file_read(out, 16 << 20, &text, &e), &e);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client beside the gateway failed (%d): %s",
                      status, text.data ? text.data : "");
        take(text.data ? text.data : "", p, verify, dns, setup, get);
}

static void run_path(int which, int verify, int dns, int setup, int get, path_samples *p)
{
        if (which == GW)
                run_sandbox(verify, dns, setup, get, p);
        else
                run_direct(verify, dns, setup, get, p);
}

/* ---- the report ---- */

static double ratio(double a, double b)
{
        return b > 0 ? a / b : 0;
}

#define COL 50

/* "| name" padded to COL columns (the names hold UTF-8 arrows). */
static void print_name(const char *name)
{
        int cols = 0;
        for (const char *p = name; *p; p++)
                cols += ((unsigned char)*p & 0xc0) != 0x80;
        printf("| %s%*s", name, cols < COL ? COL - cols : 0, "");
}

static void print_row(const char *name, bn_stats s, double ref_p50)
{
        print_name(name);
        printf(" | %5d | %8.3f | %8.3f | %8.3f | %14.2f |\n", s.n, s.p50, s.p90, s.p99, ratio(s.p50, ref_p50));
}

static void print_tput(const char *name, bn_stats s, double ref)
{
        print_name(name);
        printf(" | %5d | %8.0f | %8.0f | %8.0f | %14.2f |\n", s.n, s.p50, s.min, s.max, ratio(s.p50, ref));
}

static void print_rule(void)
{
        printf("|%.*s|------:|---------:|---------:|---------:|---------------:|\n", COL + 2,
               "----------------------------------------------------------------------");
}

START_TEST(bench)
{
        int cap = opt.samples, gcap = opt.runs;
        for (int w = 0; w < 2; w++) {
                P[w].dns = calloc((size_t)cap, sizeof(double));
                P[w].connect = calloc((size_t)cap, sizeof(double));
                P[w].first = calloc((size_t)cap, sizeof(double));
                P[w].mib_s = calloc((size_t)gcap, sizeof(double));
                ck_assert(P[w].dns && P[w].connect && P[w].first && P[w].mib_s);
        }
        /* Warm-up (first lookups, neighbours, the gateway's first connection) with a
         * download checked byte by byte, not counted. */
        path_samples scratch = {0};
        double tmp[3][3], tmp_get[1];
        for (int w = 0; w < 2; w++) {
                scratch = (path_samples){.dns = tmp[0], .connect = tmp[1], .first = tmp[2], .mib_s = tmp_get};
                run_path(w, 4 << 20, 3, 3, 0, &scratch);
        }
        for (int r = 0; r < opt.rounds; r++) {
                /* This round's share of the samples and downloads. */
                int n = opt.samples / opt.rounds + (r < opt.samples % opt.rounds);
                int g = opt.runs / opt.rounds + (r < opt.runs % opt.rounds);
                for (int k = 0; k < 2; k++) {
                        int w = (r + k) % 2; /* the first path alternates from round to round */
                        run_path(w, 0, n, n, g, &P[w]);
                }
        }

        /* Proof that the sandbox's connections went through the gateway: its audit log has them. */
        _cleanup_json_ json_object *log =
                rpc("GetEgressLog", "{\"id\":\"%s\",\"limit\":1000,\"decision\":\"allowed\"}", sandbox);
        json_object *recs = NULL;
        int tcp = 0, dns = 0;
        if (json_object_object_get_ex(log, "records", &recs))
                for (size_t i = 0; i < json_object_array_length(recs); i++) {
                        json_object *rec = json_object_array_get_idx(recs, i), *kind, *name;
                        if (!json_object_object_get_ex(rec, "kind", &kind) ||
                            !json_object_object_get_ex(rec, "name", &name) ||
                            strcmp(json_object_get_string(name), NAME) != 0)
                                continue;
                        tcp += strcmp(json_object_get_string(kind), "tcp") == 0;
                        dns += strcmp(json_object_get_string(kind), "dns") == 0;
                }
        ck_assert_msg(tcp > 0 && dns > 0, "the gateway's audit log has no allowed connection (%d) or lookup (%d) of %s",
                      tcp, dns, NAME);

        bn_stats s_dns[2], s_conn[2], s_first[2], s_get[2];
        for (int w = 0; w < 2; w++) {
                s_dns[w] = bn_stats_of(P[w].dns, P[w].n_dns);
                s_conn[w] = bn_stats_of(P[w].connect, P[w].n_setup);
                s_first[w] = bn_stats_of(P[w].first, P[w].n_setup);
                s_get[w] = bn_stats_of(P[w].mib_s, P[w].n_get);
        }
        if (opt.json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "samples", json_object_new_int(s_first[GW].n));
                json_object_object_add(o, "rounds", json_object_new_int(opt.rounds));
                json_object_object_add(o, "transfer_mib", json_object_new_int(opt.mib));
                json_object_object_add(o, "transfer_runs", json_object_new_int(s_get[GW].n));
                char key[64];
                for (int w = 0; w < 2; w++) {
                        snprintf(key, sizeof(key), "dns_%s", path_name[w]);
                        bn_stats_json(o, key, s_dns[w]);
                        snprintf(key, sizeof(key), "connect_%s", path_name[w]);
                        bn_stats_json(o, key, s_conn[w]);
                        snprintf(key, sizeof(key), "setup_%s", path_name[w]);
                        bn_stats_json(o, key, s_first[w]);
                        snprintf(key, sizeof(key), "throughput_%s_mib_s", path_name[w]);
                        json_object_object_add(o, key, json_object_new_double(s_get[w].p50));
                        snprintf(key, sizeof(key), "throughput_%s_min_mib_s", path_name[w]);
                        json_object_object_add(o, key, json_object_new_double(s_get[w].min));
                        snprintf(key, sizeof(key), "throughput_%s_max_mib_s", path_name[w]);
                        json_object_object_add(o, key, json_object_new_double(s_get[w].max));
                }
                static const char *const q[] = {"p50", "p90", "p99"};
                for (int i = 0; i < 3; i++) {
                        double g = i == 0 ? s_first[GW].p50 : i == 1 ? s_first[GW].p90 : s_first[GW].p99;
                        double d = i == 0 ? s_first[DIRECT].p50 : i == 1 ? s_first[DIRECT].p90 : s_first[DIRECT].p99;
                        snprintf(key, sizeof(key), "setup_ratio_%s", q[i]);
                        json_object_object_add(o, key, json_object_new_double(ratio(g, d)));
                }
                json_object_object_add(o, "dns_ratio_p50",
                                       json_object_new_double(ratio(s_dns[GW].p50, s_dns[DIRECT].p50)));
                json_object_object_add(o, "connect_ratio_p50",
                                       json_object_new_double(ratio(s_conn[GW].p50, s_conn[DIRECT].p50)));
                json_object_object_add(o, "throughput_ratio",
                                       json_object_new_double(ratio(s_get[GW].p50, s_get[DIRECT].p50)));
                printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
        } else {
                print_name("latency (ms)");
                printf(" |     n |      p50 |      p90 |      p99 | gateway/direct |\n");
                print_rule();
                print_row("DNS lookup (A), through the gateway", s_dns[GW], s_dns[DIRECT].p50);
                print_row("DNS lookup (A), direct", s_dns[DIRECT], s_dns[DIRECT].p50);
                print_row("TCP connect, through the gateway", s_conn[GW], s_conn[DIRECT].p50);
                print_row("TCP connect, direct", s_conn[DIRECT], s_conn[DIRECT].p50);
                print_row("connect → first byte (GET /), through the gateway", s_first[GW], s_first[DIRECT].p50);
                print_row("connect → first byte (GET /), direct", s_first[DIRECT], s_first[DIRECT].p50);
                printf("\n");
                print_name("throughput (MiB/s)");
                printf(" |  runs |   median |      min |      max | gateway/direct |\n");
                print_rule();
                char name[96];
                snprintf(name, sizeof(name), "GET of %d MiB, through the gateway", opt.mib);
                print_tput(name, s_get[GW], s_get[DIRECT].p50);
                snprintf(name, sizeof(name), "GET of %d MiB, direct", opt.mib);
                print_tput(name, s_get[DIRECT], s_get[DIRECT].p50);
                printf("\nconnect → first byte, gateway/direct: p50 %.2f, p90 %.2f, p99 %.2f; throughput %.2f "
                       "(%d rounds alternating the paths)\n",
                       ratio(s_first[GW].p50, s_first[DIRECT].p50), ratio(s_first[GW].p90, s_first[DIRECT].p90),
                       ratio(s_first[GW].p99, s_first[DIRECT].p99), ratio(s_get[GW].p50, s_get[DIRECT].p50),
                       opt.rounds);
        }
        for (int w = 0; w < 2; w++) {
                free(P[w].dns);
                free(P[w].connect);
                free(P[w].first);
                free(P[w].mib_s);
        }
}
END_TEST

static int arg_int(const char *name, const char *v, int lo, int hi)
{
        char *end = NULL;
        errno = 0;
        long n = v ? strtol(v, &end, 10) : 0;
        if (!v || errno || *end || n < lo || n > hi) {
                fprintf(stderr, "space-bench-net: %s must be an integer from %d to %d\n", name, lo, hi);
                exit(2);
        }
        return (int)n;
}

/* SPACE_BINARY_DIR (where bin/ is) for the harness: the build tree this
 * program was built in, unless set. */
static void find_binaries(void)
{
        if (getenv("SPACE_BINARY_DIR"))
                return;
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
                return;
        self[n] = '\0';
        for (int up = 0; up < 2; up++) {
                char *slash = strrchr(self, '/');
                if (slash)
                        *slash = '\0';
        }
        setenv("SPACE_BINARY_DIR", self, 0);
}

int main(int argc, char **argv)
{
        bool quick = false;
        int samples = -1, runs = -1, rounds = -1;
        opt.mib = 64;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                if (strcmp(a, "--json") == 0)
                        opt.json = true;
                else if (strcmp(a, "--quick") == 0)
                        quick = true;
                else if (strcmp(a, "--samples") == 0 && ++i)
                        samples = arg_int(a, v, 1, 100000);
                else if (strcmp(a, "--runs") == 0 && ++i)
                        runs = arg_int(a, v, 1, 1000);
                else if (strcmp(a, "--mib") == 0 && ++i)
                        opt.mib = arg_int(a, v, 1, 4096);
                else if (strcmp(a, "--rounds") == 0 && ++i)
                        rounds = arg_int(a, v, 1, 100);
                else {
                        fprintf(stderr, "usage: space-bench-net [--samples N] [--runs N] [--mib N] [--rounds N] "
                                        "[--quick] [--json]\n");
                        return 2;
                }
        }
        opt.samples = samples > 0 ? samples : quick ? 40 : 200;
        opt.runs = runs > 0 ? runs : quick ? 4 : 10;
        opt.rounds = rounds > 0 ? rounds : quick ? 2 : 4;
        if (opt.rounds > opt.samples)
                opt.rounds = opt.samples;
        sp_test_require_root("the worker and the bench make namespaces, cgroups and nftables rules");
        find_binaries();

        Suite *s = suite_create("net_bench");
        TCase *tc = tcase_create("bench");
        tcase_add_unchecked_fixture(tc, up, down);
        tcase_add_test(tc, bench);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_SILENT);
        int failed = srunner_ntests_failed(sr);
        if (failed) {
                TestResult **tr = srunner_failures(sr);
                for (int i = 0; i < failed; i++)
                        fprintf(stderr, "space-bench-net: %s:%d: %s\n", tr_lfile(tr[i]), tr_lno(tr[i]), tr_msg(tr[i]));
                free(tr);
        }
        srunner_free(sr);
        return failed ? 1 : 0;
}
