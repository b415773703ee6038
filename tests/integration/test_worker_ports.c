/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ConnectPort (proto/spec/worker-rpc.md, "Ports"): a real worker, a real
 * sandbox, real servers inside it (busybox httpd and nc), reached over the
 * worker's RPC through the agent — the layer ingress stands on. Needs root
 * (btrfs, namespaces, cgroups).
 *
 * Proves: an HTTP exchange through a port; 32 MiB echoed byte-exact while
 * both directions stream at once; the server's end of writing arriving as
 * "eof" before the trailer with both counts; a client that stops reading
 * holds the worker's memory to its windows while the server in the sandbox
 * has 64 MiB to send, and gets every byte once it reads again; a cancelled
 * call closing the connection inside; and the refusals: nothing listening,
 * a paused sandbox, an unknown one, a bad port, the worker's limit. And,
 * with the agent swapped for a hostile one (what root in a sandbox can do),
 * that a port connection or a file read whose agent sends past the credit
 * the worker granted ends with an error naming it, holding no more than the
 * window, and that the worker logs it and goes on serving the sandbox.
 */
#include <event2/event.h>
#include <glob.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guard.h"
#include "harness.h"
#include "launcher.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/agent_proto.h"
#include "space/json.h"
#include "space/rpc.h"

#define SBX "sbx_test00000000000000p1"

static char *top, *dir;
static char addr[64], cgparent[64];
static sp_test_proc worker;
static char w_bin[1024], w_state[600], w_storage[600], w_image[600], w_listen[80], w_cg[80];
static const char *w_argv[24];
static int purge_guard;

static void start_worker(const char *extra)
{
        static int n;
        if (asprintf(&dir, "%s/t%d-%d", top, (int)getpid(), n++) < 0 || mkdir(dir, 0700) < 0)
                ck_abort_msg("cannot make the test directory");
        sp_error *e = NULL;
        int port = sp_test_free_port(&e);
        sp_test_ok(port > 0 ? 0 : -1, &e);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        char logp[600];
        snprintf(w_bin, sizeof(w_bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(w_state, sizeof(w_state), "--state-dir=%s/state", dir);
        snprintf(w_storage, sizeof(w_storage), "--storage-dir=%s/storage", dir);
        snprintf(w_image, sizeof(w_image), "--storage-image=%s/storage.img", dir);
        snprintf(logp, sizeof(logp), "%s/worker.log", dir);
        snprintf(w_listen, sizeof(w_listen), "--listen=%s", addr);
        snprintf(w_cg, sizeof(w_cg), "--cgroup-parent=%s", cgparent);
        const char *argv[] = {w_bin,    w_storage,        w_image,      "--storage-size=2G",
                              w_listen, "--http-listen=", "--insecure", "--log-format=text",
                              w_cg,     w_state,          extra,        NULL};
        memcpy(w_argv, argv, sizeof(argv));
        purge_guard = sp_test_worker_purge_guard(w_argv, &e);
        sp_test_ok(purge_guard, &e);
        sp_test_ok(sp_test_proc_start(&worker, "worker", w_argv, &(sp_test_proc_opts){.log_path = logp}, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);
}

static void case_setup(void)
{
        top = sp_test_tmpdir("ports");
        snprintf(cgparent, sizeof(cgparent), "space-test-ports-%d", (int)getpid());
}

static void case_teardown(void)
{
        sp_test_tmpdir_remove(top);
        free(top);
}

static void teardown(void)
{
        if (!w_argv[0])
                return;
        sp_test_proc_stop(&worker, 5000, NULL);
        sp_test_proc_free(&worker);
        sp_error *e = NULL;
        if (sp_test_worker_purge(w_argv, &e) < 0) {
                fprintf(stderr, "purge: %s\n", e->message);
                sp_error_free(e);
        }
        sp_test_guard_done(purge_guard);
        free(dir);
}

static json_object *call(const char *method, sp_error **err, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static json_object *call(const char *method, sp_error **err, const char *fmt, ...)
{
        char text[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_msg(sp_json_parse(text, strlen(text), &req, NULL) == 0, "bad test JSON: %s", text);
        json_object *resp = NULL;
        if (sp_rpc_call_sync(addr, NULL, method, req, 60000, &resp, err) < 0)
                return NULL;
        return resp;
}

static void must(const char *method, const char *json)
{
        sp_error *e = NULL;
        json_object *r = call(method, &e, "%s", json);
        ck_assert_msg(r, "%s: %s", method, e ? e->message : "?");
        json_object_put(r);
}

/* Starts a command in the sandbox and leaves it running (a server). */
static void run_bg(const char *session, const char *script)
{
        _cleanup_json_ json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string(script));
        char req[4096];
        snprintf(req, sizeof(req), "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":%s}", SBX, session,
                 json_object_to_json_string_ext(argv, JSON_C_TO_STRING_PLAIN));
        must("Exec", req);
}

/* --- one ConnectPort call, both directions at once --- */

typedef struct {
        struct event_base *base;
        sp_rpc_client *cli;
        sp_rpc_stream *s;
        const uint8_t *send;
        size_t send_len, send_off;
        bool close_send, closed;
        bool count_only; /* keep no bytes, only count them (and check they are zeros) */
        sp_buf data;
        uint64_t received;
        bool connected, eof, ended;
        int frames_after_eof;
        json_object *trailer;
        sp_error *error;
} port_call;

static void pump_send(port_call *pc)
{
        while (pc->s && pc->send_off < pc->send_len) {
                size_t n = pc->send_len - pc->send_off > 65536 ? 65536 : pc->send_len - pc->send_off;
                int r = sp_rpc_stream_send(pc->s, SP_RPC_FRAME_DATA, pc->send + pc->send_off, n, NULL);
                if (r < 0)
                        return; /* at the watermark: on_writable comes */
                pc->send_off += n;
                if (r == 1)
                        return;
        }
        if (pc->s && pc->close_send && !pc->closed && pc->send_off == pc->send_len) {
                sp_rpc_stream_close_send(pc->s, NULL);
                pc->closed = true;
        }
}

static void pc_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)s;
        port_call *pc = ud;
        if (type == SP_RPC_FRAME_JSON) {
                _cleanup_json_ json_object *o = NULL;
                ck_assert_int_eq(sp_json_parse((const char *)p, n, &o, NULL), 0);
                json_object *ev = NULL;
                ck_assert(json_object_object_get_ex(o, "event", &ev));
                if (strcmp(json_object_get_string(ev), "connected") == 0) {
                        ck_assert_msg(!pc->connected && pc->received == 0, "connected twice, or after data");
                        pc->connected = true;
                } else {
                        ck_assert_str_eq(json_object_get_string(ev), "eof");
                        ck_assert_msg(!pc->eof, "eof twice");
                        pc->eof = true;
                }
                return;
        }
        ck_assert_msg(pc->connected, "data before connected");
        if (pc->eof)
                pc->frames_after_eof++;
        pc->received += n;
        if (pc->count_only) {
                /* (one check per frame: each check costs a message to Check's parent) */
                size_t i = 0;
                while (i < n && p[i] == 0)
                        i++;
                ck_assert_msg(i == n, "byte %llu is not what the server sent",
                              (unsigned long long)(pc->received - n + i));
        } else {
                sp_buf_append(&pc->data, p, n, NULL);
        }
}

static void pc_writable(sp_rpc_stream *s, void *ud)
{
        (void)s;
        pump_send(ud);
}

static void pc_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        port_call *pc = ud;
        pc->ended = true;
        pc->s = NULL;
        if (trailer)
                pc->trailer = json_object_get(trailer);
        if (err)
                sp_error_set(&pc->error, err->code, "%s", err->message);
}

static const sp_rpc_stream_ops pc_ops = {.on_frame = pc_frame, .on_writable = pc_writable, .on_end = pc_end};

static void pc_open(port_call *pc, const char *sandbox, int port)
{
        memset(pc, 0, sizeof(*pc));
        pc->base = event_base_new();
        sp_error *e = NULL;
        pc->cli = sp_rpc_client_new(pc->base, addr, NULL, &e);
        sp_test_ok(pc->cli ? 0 : -1, &e);
        char text[256];
        snprintf(text, sizeof(text), "{\"sandbox_id\":\"%s\",\"port\":%d}", sandbox, port);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_int_eq(sp_json_parse(text, strlen(text), &req, NULL), 0);
        pc->s = sp_rpc_client_stream(pc->cli, "ConnectPort", req, 120000, &pc_ops, pc, &e);
        sp_test_ok(pc->s ? 0 : -1, &e);
}

/* Runs the loop until cond(pc) or the call ended. */
static void pc_until(port_call *pc, bool (*cond)(port_call *))
{
        pump_send(pc);
        while (!pc->ended && !(cond && cond(pc)))
                event_base_loop(pc->base, EVLOOP_ONCE);
}

static void pc_close(port_call *pc)
{
        if (pc->s)
                sp_rpc_stream_cancel(pc->s);
        sp_rpc_client_free(pc->cli);
        event_base_free(pc->base);
        sp_buf_free(&pc->data);
        json_object_put(pc->trailer);
        sp_error_free(pc->error);
}

static int64_t trailer_int(port_call *pc, const char *name)
{
        json_object *v = NULL;
        ck_assert_msg(pc->trailer && json_object_object_get_ex(pc->trailer, name, &v), "no '%s' in the trailer", name);
        return json_object_get_int64(v);
}

static bool all_sent(port_call *pc)
{
        return pc->send_off == pc->send_len && (!pc->s || sp_rpc_stream_queued(pc->s) == 0);
}

static bool is_connected(port_call *pc)
{
        return pc->connected;
}

/* Connects to a server that may still be starting: retried while nothing
 * listens, at most 100 times 100 ms apart. */
static void pc_connect(port_call *pc, int port)
{
        for (int i = 0; i < 100; i++) {
                pc_open(pc, SBX, port);
                pc_until(pc, is_connected);
                if (pc->connected)
                        return;
                ck_assert_msg(pc->error && pc->error->code == SP_E_UNAVAILABLE, "ConnectPort %d: %s", port,
                              pc->error ? pc->error->message : "ended without connecting");
                pc_close(pc);
                usleep(100000);
        }
        ck_abort_msg("nothing came to listen on port %d in the sandbox", port);
}

static int64_t worker_rss_kib(void)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)worker.pid);
        _cleanup_buf_ sp_buf s = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(path, 1 << 20, &s, NULL), 0);
        const char *p = strstr(s.data, "VmRSS:");
        ck_assert_ptr_nonnull(p);
        return strtoll(p + 6, NULL, 10);
}

START_TEST(ports_in_the_sandbox_are_reached_both_ways)
{
        start_worker("--slots=4");
        must("CreateSandbox", "{\"id\":\"" SBX "\",\"template\":\"base\"}");
        run_bg("ses_test0000000000000h01",
               "mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 127.0.0.1:8080 -h /www");
        run_bg("ses_test0000000000000h02", "exec nc -ll -p 9000 -e cat");
        run_bg("ses_test0000000000000h03", "exec nc -ll -p 9001 -e head -c 67108864 /dev/zero");
        run_bg("ses_test0000000000000h04", "exec nc -l -p 9002 -e sh -c 'cat >/dev/null; echo closed >/tmp/gone'");

        /* An HTTP exchange: the request goes in, the page comes out, then the
         * server's end ("eof") and the trailer with both counts. */
        port_call pc;
        pc_connect(&pc, 8080);
        static const char get[] = "GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n";
        pc.send = (const uint8_t *)get;
        pc.send_len = strlen(get);
        pc.close_send = true;
        pc_until(&pc, NULL);
        ck_assert_msg(!pc.error, "%s", pc.error ? pc.error->message : "");
        sp_buf_append(&pc.data, "", 1, NULL);
        ck_assert_msg(strncmp(pc.data.data, "HTTP/1.", 7) == 0 && strstr(pc.data.data, " 200 "), "%s", pc.data.data);
        ck_assert_msg(strstr(pc.data.data, "\r\n\r\nhello-from-httpd\n"), "%s", pc.data.data);
        ck_assert(pc.eof);
        ck_assert_int_eq(pc.frames_after_eof, 0);
        ck_assert_int_eq(trailer_int(&pc, "received"), (int64_t)strlen(get));
        ck_assert_int_eq(trailer_int(&pc, "sent"), (int64_t)pc.data.len - 1);
        int64_t sent = (int64_t)pc.data.len - 1;
        pc_close(&pc);
        /* Counted for the sandbox (SandboxStats; the API's stats "ingress"). */
        sp_error *se = NULL;
        _cleanup_json_ json_object *st = call("SandboxStats", &se, "{\"id\":\"" SBX "\"}");
        ck_assert_msg(st, "SandboxStats: %s", se ? se->message : "");
        json_object *v;
        ck_assert(json_object_object_get_ex(st, "port_connections", &v) && json_object_get_int64(v) >= 1);
        ck_assert(json_object_object_get_ex(st, "port_bytes_in", &v) &&
                  json_object_get_int64(v) == (int64_t)strlen(get));
        ck_assert(json_object_object_get_ex(st, "port_bytes_out", &v) && json_object_get_int64(v) == sent);

        /* 32 MiB of random bytes echoed, both directions streaming at once. */
        size_t big = 32u << 20;
        uint8_t *buf = malloc(big);
        ck_assert_ptr_nonnull(buf);
        for (size_t off = 0; off < big;)
                off += (size_t)getrandom(buf + off, big - off, 0);
        pc_connect(&pc, 9000);
        pc.send = buf;
        pc.send_len = big;
        pc.close_send = true;
        pc_until(&pc, NULL);
        ck_assert_msg(!pc.error, "%s", pc.error ? pc.error->message : "");
        ck_assert_uint_eq(pc.data.len, big);
        ck_assert_msg(memcmp(pc.data.data, buf, big) == 0, "the echo differs from what was sent");
        ck_assert(pc.eof);
        ck_assert_int_eq(trailer_int(&pc, "received"), (int64_t)big);
        ck_assert_int_eq(trailer_int(&pc, "sent"), (int64_t)big);
        pc_close(&pc);
        free(buf);

        /* A client that stops reading: the server has 64 MiB to send, the
         * worker holds only its windows. Then every byte, in order. */
        pc_connect(&pc, 9001);
        pc.count_only = true;
        int64_t rss0 = worker_rss_kib();
        sp_rpc_stream_pause(pc.s);
        for (int i = 0; i < 30; i++) { /* 1.5 s with the loop running and nothing read */
                struct timeval tv = {0, 50000};
                event_base_loopexit(pc.base, &tv);
                event_base_dispatch(pc.base);
        }
        int64_t grown = worker_rss_kib() - rss0;
        ck_assert_msg(grown < 24 * 1024, "the worker grew by %lld KiB while its caller read nothing", (long long)grown);
        ck_assert_uint_lt(pc.received + sp_rpc_stream_buffered(pc.s), 16u << 20);
        sp_rpc_stream_resume(pc.s);
        pc.close_send = true;
        pc_until(&pc, NULL);
        ck_assert_msg(!pc.error, "%s", pc.error ? pc.error->message : "");
        ck_assert_uint_eq(pc.received, 64u << 20);
        ck_assert_int_eq(trailer_int(&pc, "sent"), (int64_t)64 << 20);
        pc_close(&pc);

        /* A cancelled call closes the connection in the sandbox: the server
         * there sees its end and says so in a file. */
        pc_connect(&pc, 9002);
        pc.send = (const uint8_t *)"some bytes";
        pc.send_len = 10;
        pc_until(&pc, all_sent);
        pc_close(&pc); /* cancels the call */
        bool gone = false;
        for (int i = 0; i < 100 && !gone; i++) {
                sp_error *e = NULL;
                json_object *r = call("StatFile", &e, "{\"sandbox_id\":\"" SBX "\",\"path\":\"/tmp/gone\"}");
                gone = r != NULL;
                json_object_put(r);
                sp_error_free(e);
                if (!gone)
                        usleep(100000);
        }
        ck_assert_msg(gone, "the server in the sandbox never saw the connection close");

        /* Nothing listens: unavailable, saying so, before any "connected". */
        pc_open(&pc, SBX, 9999);
        pc_until(&pc, NULL);
        ck_assert(!pc.connected);
        ck_assert_ptr_nonnull(pc.error);
        ck_assert_int_eq(pc.error->code, SP_E_UNAVAILABLE);
        ck_assert_msg(strstr(pc.error->message, "nothing listens on port 9999"), "%s", pc.error->message);
        pc_close(&pc);
}
END_TEST

START_TEST(ports_are_refused_clearly)
{
        start_worker("--max-port-connections=2");
        must("CreateSandbox", "{\"id\":\"" SBX "\",\"template\":\"base\"}");
        run_bg("ses_test0000000000000h05", "exec nc -ll -p 9000 -e cat");
        port_call a, b, c;
        pc_connect(&a, 9000);
        pc_connect(&b, 9000);
        /* The worker's limit: a third is refused while two are open. */
        pc_open(&c, SBX, 9000);
        pc_until(&c, NULL);
        ck_assert_msg(c.error && c.error->code == SP_E_LIMIT, "%s", c.error ? c.error->message : "accepted");
        pc_close(&c);
        pc_close(&a);
        pc_close(&b);

        /* Requests that are wrong. */
        static const struct {
                const char *req;
                sp_errc code;
                const char *says;
        } bad[] = {
                {"{\"sandbox_id\":\"sbx_test00000000000000zz\",\"port\":9000}", SP_E_NOT_FOUND, "not found"},
                {"{\"sandbox_id\":\"" SBX "\",\"port\":0}", SP_E_INVALID, "port"},
                {"{\"sandbox_id\":\"" SBX "\",\"port\":65536}", SP_E_INVALID, "port"},
                {"{\"sandbox_id\":\"" SBX "\"}", SP_E_INVALID, "port"},
                {"{\"sandbox_id\":\"" SBX "\",\"port\":9000,\"host\":\"10.0.0.1\"}", SP_E_INVALID, "host"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct event_base *base = event_base_new();
                sp_error *e = NULL;
                sp_rpc_client *cli = sp_rpc_client_new(base, addr, NULL, &e);
                _cleanup_json_ json_object *req = NULL;
                ck_assert_int_eq(sp_json_parse(bad[i].req, strlen(bad[i].req), &req, NULL), 0);
                port_call pc = {.base = base, .cli = cli};
                pc.s = sp_rpc_client_stream(cli, "ConnectPort", req, 60000, &pc_ops, &pc, &e);
                sp_test_ok(pc.s ? 0 : -1, &e);
                pc_until(&pc, NULL);
                ck_assert_msg(pc.error && pc.error->code == bad[i].code && strstr(pc.error->message, bad[i].says),
                              "%s: %s", bad[i].req, pc.error ? pc.error->message : "accepted");
                pc_close(&pc);
        }

        /* A paused sandbox: conflict naming its state; resumed, it answers. */
        must("PauseSandbox", "{\"id\":\"" SBX "\"}");
        port_call pc;
        pc_open(&pc, SBX, 9000);
        pc_until(&pc, NULL);
        ck_assert_msg(pc.error && pc.error->code == SP_E_CONFLICT && strstr(pc.error->message, "paused"), "%s",
                      pc.error ? pc.error->message : "accepted");
        pc_close(&pc);
        must("ResumeSandbox", "{\"id\":\"" SBX "\"}");
        pc_connect(&pc, 9000);
        pc.send = (const uint8_t *)"ping";
        pc.send_len = 4;
        pc.close_send = true;
        pc_until(&pc, NULL);
        ck_assert_msg(!pc.error, "%s", pc.error ? pc.error->message : "");
        ck_assert_uint_eq(pc.data.len, 4);
        ck_assert(memcmp(pc.data.data, "ping", 4) == 0);
        pc_close(&pc);
}
END_TEST

/* Many connections whose server never reads, holding bytes in the agent,
 * all ending at once when the server goes: the agent (the sandbox's init)
 * frees them in one batch of events and must not touch one it has freed
 * (an outside attack pass crashed it so, and the sandbox failed). */
START_TEST(ports_ending_together_leave_the_agent_standing)
{
        start_worker("--slots=4");
        must("CreateSandbox", "{\"id\":\"" SBX "\",\"template\":\"base\"}");
        run_bg("ses_test0000000000000h06", "exec nc -ll -p 9005 -e sleep 600");
        enum { N = 60 };
        static port_call pcs[N];
        static uint8_t junk[2u << 20];
        for (int i = 0; i < N; i++) {
                pc_connect(&pcs[i], 9005);
                pcs[i].send = junk;
                pcs[i].send_len = sizeof(junk);
                pump_send(&pcs[i]);
        }
        /* Let the bytes reach the agent (its writes to the servers stall). */
        for (int round = 0; round < 20; round++)
                for (int i = 0; i < N; i++) {
                        struct timeval tv = {0, 5000};
                        event_base_loopexit(pcs[i].base, &tv);
                        event_base_dispatch(pcs[i].base);
                }
        /* The servers go, all together. */
        must("Exec", "{\"sandbox_id\":\"" SBX "\",\"session_id\":\"ses_test0000000000000h07\","
                     "\"argv\":[\"sh\",\"-c\",\"kill -9 $(pidof sleep)\"]}");
        for (int i = 0; i < N; i++) {
                for (int k = 0; k < 200 && !pcs[i].ended; k++) {
                        struct timeval tv = {0, 20000};
                        event_base_loopexit(pcs[i].base, &tv);
                        event_base_dispatch(pcs[i].base);
                }
                /* A reset connection is over both ways: the call ends. */
                ck_assert_msg(pcs[i].ended && pcs[i].eof, "connection %d did not end with its server", i);
                pc_close(&pcs[i]);
        }
        /* The sandbox still runs and its agent answers. */
        sp_error *e = NULL;
        _cleanup_json_ json_object *sb = call("GetSandbox", &e, "{\"id\":\"" SBX "\"}");
        ck_assert_msg(sb, "GetSandbox: %s", e ? e->message : "");
        json_object *state = NULL;
        ck_assert(json_object_object_get_ex(sb, "state", &state));
        ck_assert_str_eq(json_object_get_string(state), "running");
        _cleanup_json_ json_object *st = call("StatFile", &e, "{\"sandbox_id\":\"" SBX "\",\"path\":\"/\"}");
        ck_assert_msg(st, "the agent does not answer: %s", e ? e->message : "");
}
END_TEST

/* --- a hostile agent: sends past the credit the worker granted --- */

#define HOSTILE_BYTES (4u << 20) /* what it sends on a connection or a read, whatever its credit */

static int hostile_fd;

static void hostile_write(const sp_buf *b)
{
        for (size_t off = 0; off < b->len;) {
                ssize_t w = write(hostile_fd, b->data + off, b->len - off);
                if (w <= 0)
                        _exit(0); /* the worker went */
                off += (size_t)w;
        }
}

static void hostile_frame_out(uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        pr_agent_frame_append(&b, type, stream, channel, p, n, NULL);
        hostile_write(&b);
}

static void hostile_json(uint8_t type, uint32_t channel, const char *json)
{
        hostile_frame_out(type, 0, channel, json, strlen(json));
}

/* Answers HELLO; a connect or a read gets HOSTILE_BYTES of data at once,
 * then its end; anything else an empty EXIT. */
static int hostile_on_frame(const pr_agent_frame *f, void *ud, sp_error **err)
{
        (void)ud;
        (void)err;
        if (f->type == PR_AGENT_HELLO) {
                hostile_json(PR_AGENT_HELLO, 0, "{\"version\":1,\"agent\":\"hostile/1\"}");
                return 0;
        }
        if (f->type != PR_AGENT_OPEN)
                return 0;
        _cleanup_json_ json_object *req = NULL;
        if (sp_json_parse((const char *)f->payload, f->length, &req, NULL) < 0)
                return 0;
        const char *op = sp_json_member_str(req, "op");
        uint8_t stream = 0;
        if (op && strcmp(op, "connect") == 0) {
                stream = PR_STREAM_PORT;
                hostile_json(PR_AGENT_REPLY, f->channel, "{\"connected\":true,\"address\":\"127.0.0.1\"}");
                uint8_t credit[4] = {0, 0x10, 0, 0}; /* 1 MiB for the worker's bytes */
                hostile_frame_out(PR_AGENT_WINDOW, PR_STREAM_PORT, f->channel, credit, 4);
        } else if (op && strcmp(op, "read") == 0) {
                stream = PR_STREAM_FILE;
        }
        if (stream) {
                /* Each frame twice the 64 KiB window: past its credit from the first, however fast the
                 * caller reads (frames of the window's size made the test depend on how quickly the
                 * caller's reads came back as credit). */
                static uint8_t chunk[131072];
                for (size_t sent = 0; sent < HOSTILE_BYTES; sent += sizeof(chunk))
                        hostile_frame_out(PR_AGENT_DATA, stream, f->channel, chunk, sizeof(chunk));
                if (stream == PR_STREAM_PORT)
                        hostile_frame_out(PR_AGENT_EOF, stream, f->channel, NULL, 0);
                char exit[96];
                snprintf(exit, sizeof(exit),
                         stream == PR_STREAM_PORT ? "{\"received\":0,\"sent\":%u}" : "{\"size\":%u}", HOSTILE_BYTES);
                hostile_json(PR_AGENT_EXIT, f->channel, exit);
                return 0;
        }
        hostile_json(PR_AGENT_EXIT, f->channel, "{}");
        return 0;
}

/* Puts a hostile agent where the worker finds the sandbox's (its socket on
 * the host; the real agent keeps running, unreached): a child process that
 * serves every connection in turn. */
static pid_t hostile_agent_start(void)
{
        char pattern[700];
        snprintf(pattern, sizeof(pattern), "%s/state/sandboxes/*/run/agent.sock", dir);
        glob_t g;
        ck_assert_msg(glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc == 1, "no agent socket at %s", pattern);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", g.gl_pathv[0]);
        globfree(&g);
        ck_assert_int_eq(unlink(sa.sun_path), 0);
        int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_msg(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 8) == 0,
                      "hostile agent: %s", strerror(errno));
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                for (;;) {
                        hostile_fd = accept(lfd, NULL, NULL);
                        if (hostile_fd < 0)
                                _exit(0);
                        pr_agent_decoder dec = {0};
                        uint8_t buf[65536];
                        ssize_t n;
                        while ((n = read(hostile_fd, buf, sizeof(buf))) > 0)
                                if (pr_agent_decoder_feed(&dec, buf, (size_t)n, hostile_on_frame, NULL, NULL) < 0)
                                        break;
                        pr_agent_decoder_free(&dec);
                        close(hostile_fd);
                }
        }
        close(lfd);
        return pid;
}

/* The worker's log holds a line with both needles. */
static bool worker_logged(const char *a, const char *b)
{
        char path[700];
        snprintf(path, sizeof(path), "%s/worker.log", dir);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        char line[4096];
        while (f && fgets(line, sizeof(line), f))
                if (strstr(line, a) && strstr(line, b))
                        return true;
        return false;
}

START_TEST(a_hostile_agent_cannot_overrun_its_credit)
{
        start_worker("--slots=4");
        must("CreateSandbox", "{\"id\":\"" SBX "\",\"template\":\"base\"}");
        /* The worker dies, the sandbox's root swaps the agent, the worker comes
         * back and connects to the impostor. */
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&worker, &e), &e);
        pid_t hostile = hostile_agent_start();
        sp_test_ok(sp_test_proc_restart(&worker, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 60000, &e), &e);

        /* A port connection granted 64 KiB (and more as the caller reads), sent
         * 4 MiB at once: the call fails saying so once the agent is past its
         * credit, and the caller never gets what was not granted. */
        port_call pc;
        memset(&pc, 0, sizeof(pc));
        pc.base = event_base_new();
        pc.cli = sp_rpc_client_new(pc.base, addr, NULL, &e);
        sp_test_ok(pc.cli ? 0 : -1, &e);
        const char *q = "{\"sandbox_id\":\"" SBX "\",\"port\":80,\"window\":65536}";
        _cleanup_json_ json_object *req = NULL;
        ck_assert_int_eq(sp_json_parse(q, strlen(q), &req, NULL), 0);
        for (int i = 0; i < 100; i++) {
                pc.s = sp_rpc_client_stream(pc.cli, "ConnectPort", req, 60000, &pc_ops, &pc, &e);
                sp_test_ok(pc.s ? 0 : -1, &e);
                pc_until(&pc, NULL);
                if (!pc.error || !strstr(pc.error->message, "not connected"))
                        break;
                /* The restarted worker is still connecting to the agent. */
                sp_error_free(pc.error);
                pc.error = NULL;
                pc.ended = false;
                usleep(100000);
        }
        ck_assert_msg(pc.error, "a connection whose agent overran a 64 KiB window ended well (%llu bytes)",
                      (unsigned long long)pc.received);
        ck_assert_msg(pc.error->code == SP_E_UNAVAILABLE && strstr(pc.error->message, "granted"), "%s",
                      pc.error->message);
        ck_assert_uint_lt(pc.received, HOSTILE_BYTES);
        pc_close(&pc);

        /* A file read, the same. */
        memset(&pc, 0, sizeof(pc));
        pc.base = event_base_new();
        pc.cli = sp_rpc_client_new(pc.base, addr, NULL, &e);
        sp_test_ok(pc.cli ? 0 : -1, &e);
        pc.connected = true; /* a read has no "connected" event */
        const char *r = "{\"sandbox_id\":\"" SBX "\",\"path\":\"/etc/passwd\",\"window\":65536}";
        _cleanup_json_ json_object *rreq = NULL;
        ck_assert_int_eq(sp_json_parse(r, strlen(r), &rreq, NULL), 0);
        pc.s = sp_rpc_client_stream(pc.cli, "ReadFile", rreq, 60000, &pc_ops, &pc, &e);
        sp_test_ok(pc.s ? 0 : -1, &e);
        pc_until(&pc, NULL);
        ck_assert_msg(pc.error, "a read whose agent overran a 64 KiB window ended well (%llu bytes)",
                      (unsigned long long)pc.received);
        ck_assert_msg(pc.error->code == SP_E_UNAVAILABLE && strstr(pc.error->message, "granted"), "%s",
                      pc.error->message);
        ck_assert_uint_lt(pc.received, HOSTILE_BYTES);
        pc_close(&pc);

        /* The worker said so, naming the sandbox, and still serves it over the
         * same connection. */
        ck_assert_msg(worker_logged("broke flow control", SBX), "no warning naming %s in the worker's log", SBX);
        _cleanup_json_ json_object *st = call("StatFile", &e, "{\"sandbox_id\":\"" SBX "\",\"path\":\"/\"}");
        ck_assert_msg(st, "StatFile: %s", e ? e->message : "");
        ck_assert_msg(!worker_logged("agent connection closed", SBX), "the worker closed the agent's connection");

        kill(hostile, SIGKILL);
        waitpid(hostile, NULL, 0);
}
END_TEST

int main(void)
{
        sp_test_require_root("btrfs, namespaces and cgroups");
        Suite *s = suite_create("worker_ports");
        TCase *tc = tcase_create("ports");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, NULL, teardown);
        tcase_add_test(tc, ports_in_the_sandbox_are_reached_both_ways);
        tcase_add_test(tc, ports_are_refused_clearly);
        tcase_add_test(tc, ports_ending_together_leave_the_agent_standing);
        tcase_add_test(tc, a_hostile_agent_cannot_overrun_its_credit);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
