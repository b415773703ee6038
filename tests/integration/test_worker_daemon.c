/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-worker as a daemon, driven over its RPC like the control plane and
 * the data plane will (needs root: btrfs, namespaces, cgroups):
 * create from the base template, exec with streamed output and exit codes,
 * stdin, files in and out, pause/resume, suspend/restore, a warm pool, a
 * SIGKILL of the worker in the middle of a streaming command with nothing
 * lost, and a delete that leaves nothing behind.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <event2/event.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "harness.h"
#include "inet.h"
#include "launcher.h"
#include "leak.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/rpc.h"

static char *dir;
static char addr[64], cgparent[64];
static int http_port;
static sp_test_worker_net net;
static sp_test_proc worker;

/* The worker's flags, kept for its purge. */
static char w_bin[1024], w_state[600], w_storage[600], w_image[600], w_listen[80], w_http[80], w_cg[80];
static const char *w_argv[40];
static const char *w_extra[4]; /* more flags for the next start_worker() */
static int purge_guard;

static void start_worker(void)
{
        char logp[600];
        snprintf(w_bin, sizeof(w_bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(w_state, sizeof(w_state), "--state-dir=%s/state", dir);
        snprintf(w_storage, sizeof(w_storage), "--storage-dir=%s/storage", dir);
        snprintf(w_image, sizeof(w_image), "--storage-image=%s/storage.img", dir);
        snprintf(logp, sizeof(logp), "%s/worker.log", dir);
        snprintf(w_listen, sizeof(w_listen), "--listen=%s", addr);
        snprintf(w_http, sizeof(w_http), "--http-listen=127.0.0.1:%d", http_port);
        snprintf(w_cg, sizeof(w_cg), "--cgroup-parent=%s", cgparent);
        const char *argv[] = {w_bin,   w_storage,    w_image,      "--storage-size=2G", w_listen,
                              w_http,  "--insecure", "--slots=16", "--log-format=text", w_cg,
                              w_state, "--criu=auto"};
        size_t n = 0;
        for (; n < sizeof(argv) / sizeof(argv[0]); n++)
                w_argv[n] = argv[n];
        for (size_t i = 0; net.argv[i]; i++)
                w_argv[n++] = net.argv[i];
        for (size_t i = 0; w_extra[i]; i++)
                w_argv[n++] = w_extra[i];
        w_argv[n] = NULL;
        sp_test_proc_opts opts = {.log_path = logp};
        sp_error *e = NULL;
        purge_guard = sp_test_worker_purge_guard(w_argv, &e);
        sp_test_ok(purge_guard, &e);
        sp_test_ok(sp_test_proc_start(&worker, "worker", w_argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);
}

/* Per test case (parent process): the directory and cgroup parent, and the
 * cleanup that must run even when a test fails (sandboxes outlive the worker). */
static char *top;

static void cleanup_sandboxes(void)
{
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] || continue; "
                 "for p in $(cat $d/*/cgroup.procs 2>/dev/null); do kill -9 $p 2>/dev/null; done; done; "
                 "sleep 0.3; for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] && "
                 "rmdir $d/* $d 2>/dev/null; done; for m in $(awk '$5 ~ \"^%s/\" {print $5}' /proc/self/mountinfo); "
                 "do umount -l $m; done; true",
                 cgparent, cgparent, cgparent, cgparent, top);
        if (system(cmd) != 0)
                fprintf(stderr, "cleanup script failed\n");
}

static void case_setup(void)
{
        top = sp_test_tmpdir("worker");
        snprintf(cgparent, sizeof(cgparent), "space-test-%d", (int)getpid());
}

static void case_teardown(void)
{
        cleanup_sandboxes();
        sp_test_tmpdir_remove(top);
        free(top);
}

/* Per test (forked child): a fresh directory and worker. */
static void setup(void)
{
        static int n;
        if (asprintf(&dir, "%s/t%d-%d", top, (int)getpid(), n++) < 0 || mkdir(dir, 0700) < 0)
                ck_abort_msg("cannot make the test directory");
        sp_error *e = NULL;
        int port = sp_test_free_port(&e);
        sp_test_ok(port > 0 ? 0 : -1, &e);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        sp_test_ok(sp_test_worker_net_args(port, NULL, &net, &e), &e);
        http_port = sp_test_free_port(&e);
        sp_test_ok(http_port > 0 ? 0 : -1, &e);
        memset(&worker, 0, sizeof(worker));
        start_worker();
}

static void teardown(void)
{
        sp_test_proc_stop(&worker, 5000, NULL);
        sp_test_proc_free(&worker);
        /* Its table, gateway and links too: what a stopped worker leaves, its purge takes. */
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
        char text[8192];
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

static json_object *must_call(const char *method, const char *fmt, const char *a, const char *b)
{
        sp_error *e = NULL;
        json_object *r = call(method, &e, fmt, a, b);
        ck_assert_msg(r, "%s: %s", method, e ? e->message : "?");
        return r;
}

static const char *field(json_object *o, const char *name)
{
        json_object *v;
        return json_object_object_get_ex(o, name, &v) ? json_object_get_string(v) : NULL;
}

/* --- streams --- */

typedef struct {
        struct event_base *base;
        sp_buf out, err, data;
        uint64_t next_offset;
        json_object *exit_event, *trailer;
        sp_error *error;
        size_t stop_after;
        bool raw; /* DATA frames are plain bytes (ReadFile), not output with offsets */
        bool ended;
        sp_rpc_stream *stream;
} stream_state;

static void st_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        stream_state *st = ud;
        if (type == SP_RPC_FRAME_DATA && !st->raw) {
                ck_assert_uint_ge(n, 9);
                uint64_t off = 0;
                for (int i = 0; i < 8; i++)
                        off = off << 8 | p[1 + i];
                ck_assert_msg(off == st->next_offset, "output offset %llu, expected %llu", (unsigned long long)off,
                              (unsigned long long)st->next_offset);
                sp_buf_append(p[0] == 2 ? &st->err : &st->out, p + 9, n - 9, NULL);
                st->next_offset += n - 9;
                if (st->stop_after && st->out.len + st->err.len >= st->stop_after) {
                        sp_rpc_stream_cancel(s);
                        st->stream = NULL;
                        st->ended = true;
                        event_base_loopbreak(st->base);
                }
        } else if (type == SP_RPC_FRAME_DATA) {
                sp_buf_append(&st->data, p, n, NULL);
        } else if (type == SP_RPC_FRAME_JSON) {
                json_object *o = NULL;
                if (sp_json_parse((const char *)p, n, &o, NULL) == 0) {
                        if (field(o, "event") && strcmp(field(o, "event"), "exit") == 0)
                                st->exit_event = o;
                        else
                                json_object_put(o);
                }
        }
}

static void st_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        stream_state *st = ud;
        st->ended = true;
        st->stream = NULL;
        if (trailer)
                st->trailer = json_object_get(trailer);
        if (err)
                sp_error_set(&st->error, err->code, "%s", err->message);
        event_base_loopbreak(st->base);
}

static const sp_rpc_stream_ops st_ops = {.on_frame = st_frame, .on_end = st_end};

static void stream_free(stream_state *st)
{
        sp_buf_free(&st->out);
        sp_buf_free(&st->err);
        sp_buf_free(&st->data);
        if (st->exit_event)
                json_object_put(st->exit_event);
        if (st->trailer)
                json_object_put(st->trailer);
        sp_error_free(st->error);
}

/* Runs a streaming call to its end; `send` (may be NULL) is written as DATA frames first. */
static void run_stream(const char *method, const char *req_json, const void *send, size_t send_len, size_t stop_after,
                       stream_state *st)
{
        st->base = event_base_new();
        st->stop_after = stop_after;
        sp_error *e = NULL;
        sp_rpc_client *cli = sp_rpc_client_new(st->base, addr, NULL, &e);
        sp_test_ok(cli ? 0 : -1, &e);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_int_eq(sp_json_parse(req_json, strlen(req_json), &req, NULL), 0);
        st->stream = sp_rpc_client_stream(cli, method, req, 120000, &st_ops, st, &e);
        sp_test_ok(st->stream ? 0 : -1, &e);
        size_t off = 0;
        while (send && off < send_len && !st->ended) {
                size_t n = send_len - off > 65536 ? 65536 : send_len - off;
                int r = sp_rpc_stream_send(st->stream, SP_RPC_FRAME_DATA, (const char *)send + off, n, &e);
                if (r < 0) {
                        sp_error_free(e);
                        e = NULL;
                        event_base_loop(st->base, EVLOOP_ONCE);
                        continue;
                }
                off += n;
                if (r == 1)
                        while (!st->ended && st->stream &&
                               sp_rpc_stream_queued(st->stream) > SP_RPC_SEND_HIGH_WATERMARK / 2)
                                event_base_loop(st->base, EVLOOP_ONCE);
        }
        if (send && st->stream)
                sp_rpc_stream_close_send(st->stream, NULL);
        while (!st->ended)
                event_base_dispatch(st->base);
        sp_rpc_client_free(cli);
        event_base_free(st->base);
}

static void attach(const char *session, uint64_t offset, size_t stop_after, stream_state *st)
{
        char req[256];
        snprintf(req, sizeof(req), "{\"session_id\":\"%s\",\"offset\":%llu}", session, (unsigned long long)offset);
        st->next_offset = offset;
        run_stream("AttachSession", req, NULL, 0, stop_after, st);
}

static void create_sandbox(const char *id)
{
        _cleanup_json_ json_object *r = must_call("CreateSandbox", "{\"id\":\"%s\",\"template\":\"%s\"}", id, "base");
        ck_assert_str_eq(field(r, "state"), "running");
}

static int exec_run(const char *sandbox, const char *session, const char *script, stream_state *st)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *r =
                call("Exec", &e, "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":[\"sh\",\"-c\",\"%s\"]}",
                     sandbox, session, script);
        ck_assert_msg(r, "Exec: %s", e ? e->message : "?");
        memset(st, 0, sizeof(*st));
        attach(session, 0, 0, st);
        ck_assert_msg(!st->error, "attach: %s", st->error ? st->error->message : "");
        ck_assert_ptr_nonnull(st->exit_event);
        json_object *code;
        ck_assert(json_object_object_get_ex(st->exit_event, "code", &code));
        return json_object_get_int(code);
}

START_TEST(lifecycle_exec_files)
{
        create_sandbox("sbx_test0000000000000001");
        stream_state st;
        int code = exec_run("sbx_test0000000000000001", "ses_test000000000000000a",
                            "echo hello; echo oops >&2; id -u; hostname; exit 3", &st);
        ck_assert_int_eq(code, 3);
        ck_assert_str_eq(st.out.data, "hello\n0\nsbx-test0000000000000001\n");
        ck_assert_str_eq(st.err.data, "oops\n");
        stream_free(&st);

        /* a command that does not exist fails the Exec with a clear error */
        sp_error *e = NULL;
        json_object *bad = call("Exec", &e,
                                "{\"sandbox_id\":\"sbx_test0000000000000001\",\"session_id\":"
                                "\"ses_test000000000000000b\",\"argv\":[\"/no/such\"]}");
        ck_assert_ptr_null(bad);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert_msg(strstr(e->message, "/no/such"), "%s", e->message);
        sp_error_free(e);

        /* stdin through cat */
        e = NULL;
        _cleanup_json_ json_object *r = call("Exec", &e,
                                             "{\"sandbox_id\":\"sbx_test0000000000000001\",\"session_id\":"
                                             "\"ses_test000000000000000c\",\"argv\":[\"cat\"],\"stdin\":true}");
        ck_assert_msg(r, "%s", e ? e->message : "");
        stream_state in = {0};
        run_stream("WriteStdin", "{\"session_id\":\"ses_test000000000000000c\",\"close\":true}", "round trip\n", 11, 0,
                   &in);
        ck_assert_msg(!in.error, "%s", in.error ? in.error->message : "");
        stream_free(&in);
        memset(&st, 0, sizeof(st));
        attach("ses_test000000000000000c", 0, 0, &st);
        ck_assert_str_eq(st.out.data, "round trip\n");
        stream_free(&st);

        /* a file in and out: 5 MB */
        size_t n = 5 << 20;
        _cleanup_free_ char *data = malloc(n);
        for (size_t i = 0; i < n; i++)
                data[i] = (char)(i * 7 + i / 4096);
        stream_state w = {0};
        run_stream("WriteFile", "{\"sandbox_id\":\"sbx_test0000000000000001\",\"path\":\"/tmp/big.bin\",\"mode\":420}",
                   data, n, 0, &w);
        ck_assert_msg(!w.error, "WriteFile: %s", w.error ? w.error->message : "");
        stream_free(&w);
        stream_state rd = {.raw = true};
        run_stream("ReadFile", "{\"sandbox_id\":\"sbx_test0000000000000001\",\"path\":\"/tmp/big.bin\"}", NULL, 0, 0,
                   &rd);
        ck_assert_msg(!rd.error, "ReadFile: %s", rd.error ? rd.error->message : "");
        ck_assert_uint_eq(rd.data.len, n);
        ck_assert(memcmp(rd.data.data, data, n) == 0);
        stream_free(&rd);
        _cleanup_json_ json_object *stat = must_call("StatFile", "{\"sandbox_id\":\"%s\",\"path\":\"%s\"}",
                                                     "sbx_test0000000000000001", "/tmp/big.bin");
        json_object *size;
        ck_assert(json_object_object_get_ex(stat, "size", &size) && json_object_get_int64(size) == (int64_t)n);
        e = NULL;
        ck_assert_ptr_null(call("StatFile", &e, "{\"sandbox_id\":\"sbx_test0000000000000001\",\"path\":\"/nope\"}"));
        ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
        sp_error_free(e);

        /* pause and resume */
        _cleanup_json_ json_object *p = must_call("PauseSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000001", "");
        ck_assert_str_eq(field(p, "state"), "paused");
        _cleanup_json_ json_object *q = must_call("ResumeSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000001", "");
        ck_assert_str_eq(field(q, "state"), "running");

        /* Without CRIU (--criu=off) a jail's suspend keeps the filesystem only (and says so and why), and
         * restore starts it again. */
        sp_test_proc_stop(&worker, 5000, NULL);
        sp_test_proc_free(&worker);
        memset(&worker, 0, sizeof(worker));
        sp_test_guard_done(purge_guard);
        w_extra[0] = "--criu=off";
        w_extra[1] = NULL;
        start_worker();
        _cleanup_json_ json_object *sl = must_call("Exec", "{\"sandbox_id\":\"%s\"%s}", "sbx_test0000000000000001",
                                                   ",\"session_id\":\"ses_test000000000000000e\",\"argv\":[\"sleep\","
                                                   "\"1000\"]");
        ck_assert_str_eq(field(sl, "sandbox_id"), "sbx_test0000000000000001");
        _cleanup_json_ json_object *s =
                must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000001", "");
        ck_assert_str_eq(field(s, "state"), "suspended");
        /* Without a memory image its processes are gone: the session that ran says so at once. */
        _cleanup_json_ json_object *gone =
                must_call("GetSession", "{\"session_id\":\"%s\"%s}", "ses_test000000000000000e", "");
        ck_assert_str_eq(field(gone, "state"), "failed");
        json_object *susp, *mem;
        ck_assert(json_object_object_get_ex(s, "suspend", &susp) && json_object_object_get_ex(susp, "memory", &mem));
        ck_assert(!json_object_get_boolean(mem));
        json_object *why;
        ck_assert_msg(json_object_object_get_ex(susp, "why", &why) &&
                              strstr(json_object_get_string(why), "without CRIU"),
                      "%s", json_object_to_json_string(susp));
        _cleanup_json_ json_object *rs =
                must_call("RestoreSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000001", "");
        ck_assert_str_eq(field(rs, "state"), "running");
        code = exec_run("sbx_test0000000000000001", "ses_test000000000000000d", "wc -c < /tmp/big.bin", &st);
        ck_assert_int_eq(code, 0);
        ck_assert_int_eq(atoll(st.out.data), (long long)n);
        stream_free(&st);

        /* A CRIU without this project's patches would dump a jail and fail to restore it: not used, and said. */
        sp_test_proc_stop(&worker, 5000, NULL);
        sp_test_proc_free(&worker);
        memset(&worker, 0, sizeof(worker));
        sp_test_guard_done(purge_guard);
        w_extra[0] = "--criu=/bin/true";
        start_worker();
        _cleanup_json_ json_object *s2 =
                must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000001", "");
        ck_assert(json_object_object_get_ex(s2, "suspend", &susp) && json_object_object_get_ex(susp, "why", &why));
        ck_assert_msg(strstr(json_object_get_string(why), "lacks this project's patches"), "%s",
                      json_object_get_string(why));

        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000001", ""));
        e = NULL;
        ck_assert_ptr_null(call("GetSandbox", &e, "{\"id\":\"sbx_test0000000000000001\"}"));
        ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
        sp_error_free(e);
}
END_TEST

/* The numbers 1..n, one per line, and nothing else: a counter's output with no
 * line lost or repeated. Returns n, or -1. */
static long counted_lines(const char *text)
{
        long want = 1;
        const char *p = text;
        while (*p) {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p || *end != '\n' || v != want)
                        return -1;
                want++;
                p = end + 1;
        }
        return want - 1;
}

/* Whether path (under the test's directory) exists. */
static bool storage_has(const char *rel)
{
        char p[1200];
        snprintf(p, sizeof(p), "%s/storage/%s", dir, rel);
        return access(p, F_OK) == 0;
}

/* With CRIU (scripts/criu), a jail's suspend keeps its processes: a counter
 * goes on from where it stood, its output is whole across the suspend (an
 * attachment from 0 reads every line once), a file in /dev/shm and an open
 * descriptor are still there, and delete removes the checkpoint's images. */
START_TEST(suspend_keeps_processes)
{
        const char *id = "sbx_test0000000000000021";
        create_sandbox(id);
        json_object_put(must_call(
                "Exec", "{\"sandbox_id\":\"%s\"%s}", id,
                ",\"session_id\":\"ses_test0000000000000210\",\"argv\":[\"sh\",\"-c\",\"echo kept > /dev/shm/mark; "
                "exec 7>/tmp/fd7; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo $i; echo $i >&7; sleep 0.05; "
                "done\"]"));
        /* A TCP connection within the sandbox, held across the suspend: a counter into nc. */
        json_object_put(must_call(
                "Exec", "{\"sandbox_id\":\"%s\"%s}", id,
                ",\"session_id\":\"ses_test0000000000000212\",\"argv\":[\"sh\",\"-c\",\"sleep 100000 | nc -l -p 5000 > "
                "/tmp/tcp.out & "
                "sleep 0.3; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo $i; sleep 0.05; done | nc 127.0.0.1 "
                "5000\"]"));
        stream_state st = {0};
        /* A process whose session leader is gone (a shell that put it in the background and ended): CRIU
         * restores it with a helper standing for that leader. */
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000214",
                                  "sleep 100123 </dev/null >/dev/null 2>&1 & echo $! > /tmp/orphan", &st),
                         0);
        stream_free(&st);
        memset(&st, 0, sizeof(st));
        attach("ses_test0000000000000210", 0, 20, &st);
        stream_free(&st);

        _cleanup_json_ json_object *s = must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert_str_eq(field(s, "state"), "suspended");
        json_object *susp, *mem;
        ck_assert(json_object_object_get_ex(s, "suspend", &susp) && json_object_object_get_ex(susp, "memory", &mem));
        ck_assert_msg(json_object_get_boolean(mem), "suspend kept no processes: %s", json_object_to_json_string(s));
        ck_assert_msg(storage_has("sandboxes/sbx_test0000000000000021/checkpoint/"
                                  "space-checkpoint.json"),
                      "no checkpoint beside the root filesystem");
        _cleanup_json_ json_object *ses =
                must_call("GetSession", "{\"session_id\":\"%s\"%s}", "ses_test0000000000000210", "");
        ck_assert_str_eq(field(ses, "state"), "running");

        _cleanup_json_ json_object *rs = must_call("RestoreSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert_str_eq(field(rs, "state"), "running");
        ck_assert_msg(!json_object_object_get_ex(rs, "restore_why", NULL), "%s", json_object_to_json_string(rs));
        ck_assert(!storage_has("sandboxes/sbx_test0000000000000021/checkpoint"));
        /* Every line from the first, across the suspend, once. */
        memset(&st, 0, sizeof(st));
        attach("ses_test0000000000000210", 0, 400, &st);
        long n = counted_lines(st.out.data);
        ck_assert_msg(n >= 20, "the counter's output across the suspend: %s", st.out.data);
        stream_free(&st);
        stream_state c = {0};
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000211",
                                  "cat /dev/shm/mark; a=$(tail -n1 /tmp/fd7); sleep 0.5; b=$(tail -n1 /tmp/fd7); "
                                  "[ $b -gt $a ] && head -n1 /tmp/fd7",
                                  &c),
                         0);
        ck_assert_str_eq(c.out.data, "kept\n1\n");
        stream_free(&c);
        memset(&c, 0, sizeof(c));
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000215", "kill -0 $(cat /tmp/orphan) && echo alive", &c), 0);
        ck_assert_str_eq(c.out.data, "alive\n");
        stream_free(&c);
        /* The connection goes on: what the server received grows, every number once. */
        memset(&c, 0, sizeof(c));
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000213",
                                  "a=$(wc -l < /tmp/tcp.out); sleep 0.5; cat /tmp/tcp.out; b=$(wc -l < /tmp/tcp.out); "
                                  "[ $b -gt $a ]",
                                  &c),
                         0);
        ck_assert_msg(counted_lines(c.out.data) > 10, "over TCP: %s", c.out.data);
        stream_free(&c);

        /* Suspended again and deleted: nothing of it stays. */
        json_object_put(must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", id, ""));
        ck_assert(storage_has("sandboxes/sbx_test0000000000000021/checkpoint"));
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", id, ""));
        ck_assert(!storage_has("sandboxes/sbx_test0000000000000021"));
        /* Nor of its state: CRIU's logs (which name its paths and mounts) went with it. */
        char state[1200];
        snprintf(state, sizeof(state), "%s/state/sandboxes/sbx_test0000000000000021", dir);
        ck_assert_msg(access(state, F_OK) < 0, "%s is still there", state);
}
END_TEST

/* A checkpoint outlives the worker: suspended, the worker restarted, the
 * sandbox wakes with its processes (the restarted worker finds the images
 * beside the root filesystem). */
START_TEST(a_checkpoint_outlives_a_worker_restart)
{
        const char *id = "sbx_test0000000000000023";
        create_sandbox(id);
        json_object_put(must_call("Exec", "{\"sandbox_id\":\"%s\"%s}", id,
                                  ",\"session_id\":\"ses_test0000000000000230\",\"argv\":[\"sh\",\"-c\",\"echo $$ > "
                                  "/tmp/pid; i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.05; done\"]"));
        stream_state c = {0};
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000231", "sleep 0.5; test -s /tmp/count", &c), 0);
        stream_free(&c);
        _cleanup_json_ json_object *s = must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", id, "");
        json_object *susp, *mem;
        ck_assert(json_object_object_get_ex(s, "suspend", &susp) && json_object_object_get_ex(susp, "memory", &mem) &&
                  json_object_get_boolean(mem));
        sp_test_proc_stop(&worker, 5000, NULL);
        sp_test_proc_free(&worker);
        memset(&worker, 0, sizeof(worker));
        sp_test_guard_done(purge_guard);
        start_worker();
        _cleanup_json_ json_object *got = must_call("GetSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert_str_eq(field(got, "state"), "suspended");
        _cleanup_json_ json_object *rs = must_call("RestoreSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert_str_eq(field(rs, "state"), "running");
        memset(&c, 0, sizeof(c));
        ck_assert_msg(exec_run(id, "ses_test0000000000000232",
                               "p=$(cat /tmp/pid); a=$(cat /tmp/count); sleep 0.5; b=$(cat /tmp/count); "
                               "[ -d /proc/$p ] && [ $b -gt $a ]",
                               &c) == 0,
                      "the counter did not go on after the worker's restart");
        stream_free(&c);
        _cleanup_json_ json_object *ses =
                must_call("GetSession", "{\"session_id\":\"%s\"%s}", "ses_test0000000000000230", "");
        ck_assert_str_eq(field(ses, "state"), "running");
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", id, ""));
}
END_TEST

/* A sandbox whose checkpoint is refused suspends with its files only and
 * says why; its session fails at once with the reason, and restore starts
 * it from its files. The refusal: a process holds a deleted file, which CRIU
 * would make again at its old path while that path is resolved against the
 * host's root — here the deleted file's directory is now a symlink to a
 * world-writable host directory, which must stay untouched (an outside pass
 * had CRIU write the sandbox's file there, and remove a host file). */
START_TEST(suspend_without_checkpoint_says_why)
{
        const char *id = "sbx_test0000000000000022";
        create_sandbox(id);
        stream_state c = {0};
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000220", "echo kept > /home/mark", &c), 0);
        stream_free(&c);
        char host[1100], argv[1600];
        snprintf(host, sizeof(host), "%s/host-dir", dir);
        ck_assert_int_eq(mkdir(host, 01777), 0);
        ck_assert_int_eq(chmod(host, 01777), 0);
        snprintf(argv, sizeof(argv),
                 ",\"session_id\":\"ses_test0000000000000221\",\"argv\":[\"sh\",\"-c\",\"mkdir -p /tmp/z && echo "
                 "from-the-sandbox > /tmp/z/evil && (exec 3</tmp/z/evil; exec sleep 1000) & sleep 0.5; rm /tmp/z/evil; "
                 "rmdir /tmp/z; ln -s %s /tmp/z; echo ready; sleep 1000\"]",
                 host);
        json_object_put(must_call("Exec", "{\"sandbox_id\":\"%s\"%s}", id, argv));
        memset(&c, 0, sizeof(c));
        attach("ses_test0000000000000221", 0, 6, &c);
        stream_free(&c);
        _cleanup_json_ json_object *s = must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert_str_eq(field(s, "state"), "suspended");
        json_object *susp, *mem, *why;
        ck_assert(json_object_object_get_ex(s, "suspend", &susp) && json_object_object_get_ex(susp, "memory", &mem) &&
                  json_object_object_get_ex(susp, "why", &why));
        ck_assert(!json_object_get_boolean(mem));
        ck_assert_msg(strstr(json_object_get_string(why), "checkpoint failed") &&
                              strstr(json_object_get_string(why), "deleted file"),
                      "%s", json_object_get_string(why));
        ck_assert(!storage_has("sandboxes/sbx_test0000000000000022/checkpoint"));
        _cleanup_json_ json_object *gone =
                must_call("GetSession", "{\"session_id\":\"%s\"%s}", "ses_test0000000000000221", "");
        ck_assert_str_eq(field(gone, "state"), "failed");
        _cleanup_json_ json_object *rs = must_call("RestoreSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert_str_eq(field(rs, "state"), "running");
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000222", "cat /home/mark", &c), 0);
        ck_assert_str_eq(c.out.data, "kept\n");
        stream_free(&c);
        /* A mount the sandbox made itself: a restore makes the tree's mounts as host root, so it is refused. */
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000223",
                                  "mkdir -p /mnt/own && mount -t tmpfs own /mnt/own && echo mounted", &c),
                         0);
        ck_assert_str_eq(c.out.data, "mounted\n");
        stream_free(&c);
        _cleanup_json_ json_object *s2 = must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert(json_object_object_get_ex(s2, "suspend", &susp) && json_object_object_get_ex(susp, "why", &why));
        ck_assert_msg(strstr(json_object_get_string(why), "a mount of its own (tmpfs on /mnt/own)"), "%s",
                      json_object_get_string(why));
        ck_assert(!storage_has("sandboxes/sbx_test0000000000000022/checkpoint"));
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", id, ""));
        /* Nothing was written in the host's directory. */
        _cleanup_closedir_ DIR *hd = opendir(host);
        ck_assert_ptr_nonnull(hd);
        for (struct dirent *de; (de = readdir(hd));)
                ck_assert_msg(de->d_name[0] == '.', "the restore wrote %s/%s on the host", host, de->d_name);
}
END_TEST

/* A checkpoint that cannot be restored (its images damaged here) starts the sandbox from its files, and
 * the restore's answer says so and why: the processes its suspend kept are never lost silently. */
START_TEST(a_failed_restore_says_why)
{
        const char *id = "sbx_test0000000000000024";
        create_sandbox(id);
        stream_state c = {0};
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000240",
                                  "echo kept > /home/mark; sleep 100000 </dev/null >/dev/null 2>&1 &", &c),
                         0);
        stream_free(&c);
        _cleanup_json_ json_object *s = must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", id, "");
        json_object *susp, *mem;
        ck_assert(json_object_object_get_ex(s, "suspend", &susp) && json_object_object_get_ex(susp, "memory", &mem) &&
                  json_object_get_boolean(mem));
        char core[1200];
        snprintf(core, sizeof(core), "%s/storage/sandboxes/%s/checkpoint/core-1.img", dir, id);
        ck_assert_int_eq(truncate(core, 10), 0);
        _cleanup_json_ json_object *rs = must_call("RestoreSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert_str_eq(field(rs, "state"), "running");
        json_object *why;
        ck_assert_msg(json_object_object_get_ex(rs, "restore_why", &why) &&
                              strstr(json_object_get_string(why), "the restore from its checkpoint failed"),
                      "%s", json_object_to_json_string(rs));
        /* GetSandbox says it too, until the next suspend. */
        _cleanup_json_ json_object *g = must_call("GetSandbox", "{\"id\":\"%s\"%s}", id, "");
        ck_assert(json_object_object_get_ex(g, "restore_why", NULL));
        ck_assert_int_eq(exec_run(id, "ses_test0000000000000241", "cat /home/mark", &c), 0);
        ck_assert_str_eq(c.out.data, "kept\n");
        stream_free(&c);
        ck_assert(!storage_has("sandboxes/sbx_test0000000000000024/checkpoint"));
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", id, ""));
}
END_TEST

/* A sandbox runs more commands than it keeps sessions with their output: the
 * oldest ended ones nobody reads give their output up (their exit is still
 * answered), and no command is refused for it. */
START_TEST(more_sessions_than_the_live_limit)
{
        const char *sbx = "sbx_test000000000000000m";
        create_sandbox(sbx);
        stream_state st;
        ck_assert_int_eq(exec_run(sbx, "ses_many0000000000000000", "echo first; exit 7", &st), 7);
        ck_assert_str_eq(st.out.data, "first\n");
        stream_free(&st);
        int total = 1100; /* beyond the 1024 kept with their output */
        for (int i = 1; i < total; i++) {
                char id[64];
                snprintf(id, sizeof(id), "ses_many%016d", i);
                json_object *r = NULL;
                /* A `true` just accepted may not have ended yet: such one is not retired,
                 * and a new one waits for it (bounded). */
                for (int tries = 0; !r && tries < 500; tries++) {
                        sp_error *e = NULL;
                        r = call("Exec", &e, "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":[\"true\"]}", sbx,
                                 id);
                        if (!r) {
                                ck_assert_msg(e->code == SP_E_LIMIT, "Exec %d: %s", i, e->message);
                                sp_error_free(e);
                                usleep(10000);
                        }
                }
                ck_assert_msg(r, "Exec %d refused for 5 s", i);
                json_object_put(r);
        }
        /* The first: its exit is kept, its output given up (said so). */
        _cleanup_json_ json_object *first =
                must_call("GetSession", "{\"session_id\":\"%s\"%s}", "ses_many0000000000000000", "");
        ck_assert_str_eq(field(first, "state"), "exited");
        ck_assert_msg(strstr(sp_json_str(first), "\"code\":7"), "%s", sp_json_str(first));
        memset(&st, 0, sizeof(st));
        attach("ses_many0000000000000000", 0, 0, &st);
        ck_assert_ptr_nonnull(st.error);
        ck_assert_int_eq(st.error->code, SP_E_NOT_FOUND);
        stream_free(&st);
        /* The newest: whole. */
        char last[64];
        snprintf(last, sizeof(last), "ses_many%016d", total - 1);
        memset(&st, 0, sizeof(st));
        attach(last, 0, 0, &st);
        ck_assert_msg(!st.error, "attach: %s", st.error ? st.error->message : "");
        ck_assert_ptr_nonnull(st.exit_event);
        stream_free(&st);
        /* Every one is still listed. */
        _cleanup_json_ json_object *list = must_call("ListSessions", "{\"sandbox_id\":\"%s\"%s}", sbx, "");
        json_object *arr;
        ck_assert(json_object_object_get_ex(list, "sessions", &arr));
        ck_assert_int_eq((int)json_object_array_length(arr), total);
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", sbx, ""));
}
END_TEST

static int count_dir(const char *path)
{
        _cleanup_closedir_ DIR *d = opendir(path);
        int n = 0;
        struct dirent *de;
        while (d && (de = readdir(d)))
                if (de->d_name[0] != '.')
                        n++;
        return n;
}

START_TEST(worker_sigkill_loses_nothing_and_delete_leaves_nothing)
{
        create_sandbox("sbx_test0000000000000002");
        sp_error *e = NULL;
        _cleanup_json_ json_object *r =
                call("Exec", &e,
                     "{\"sandbox_id\":\"sbx_test0000000000000002\",\"session_id\":\"ses_test000000000000000f\","
                     "\"argv\":[\"sh\",\"-c\",\"i=0; while [ $i -lt 200000 ]; do echo line $i; i=$((i+1)); done\"]}");
        ck_assert_msg(r, "%s", e ? e->message : "");
        /* Read part of the stream, then the worker dies hard. */
        stream_state a = {0};
        attach("ses_test000000000000000f", 0, 100000, &a);
        ck_assert_uint_ge(a.out.len, 100000);
        sp_test_ok(sp_test_proc_kill(&worker, &e), &e);
        sp_test_ok(sp_test_proc_restart(&worker, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 60000, &e), &e);

        /* The sandbox is still there, running, and the stream resumes exactly where we stopped. */
        _cleanup_json_ json_object *g = must_call("GetSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000002", "");
        ck_assert_str_eq(field(g, "state"), "running");
        stream_state b = {0};
        attach("ses_test000000000000000f", a.out.len, 0, &b);
        ck_assert_msg(!b.error, "%s", b.error ? b.error->message : "");
        _cleanup_buf_ sp_buf all = SP_BUF_INIT, want = SP_BUF_INIT;
        sp_buf_append(&all, a.out.data, a.out.len, NULL);
        sp_buf_append(&all, b.out.data, b.out.len, NULL);
        for (int i = 0; i < 200000; i++)
                sp_buf_appendf(&want, NULL, "line %d\n", i);
        ck_assert_uint_eq(all.len, want.len);
        ck_assert(memcmp(all.data, want.data, want.len) == 0);
        stream_free(&a);
        stream_free(&b);

        /* Delete removes everything the sandbox had: compare the host before and after. */
        sp_test_snapshot before = {0}, after = {0};
        sp_test_ok(sp_test_snapshot_take(&before, &e), &e);
        char cg[600], rootfs[600], state[600];
        snprintf(cg, sizeof(cg), "/sys/fs/cgroup/memory/%s", cgparent);
        snprintf(rootfs, sizeof(rootfs), "%s/storage/sandboxes", dir);
        snprintf(state, sizeof(state), "%s/state/sandboxes", dir);
        ck_assert_int_eq(count_dir(rootfs), 1);
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000002", ""));
        ck_assert_int_eq(count_dir(rootfs), 0);
        ck_assert_int_eq(count_dir(state), 0);
        sp_test_ok(sp_test_snapshot_take(&after, &e), &e);
        /* mounts, network namespaces, loop devices and processes; the worker itself stays */
        char *leaks = sp_test_snapshot_diff(&before, &after, NULL);
        /* Links, mounts, loop devices and network namespaces are the host's: tests running beside this
         * one add theirs. This worker's links are named after its --net-prefix, its mounts and loop
         * devices are under its directory, its namespaces carry this process's id; its processes are
         * this process's descendants (the snapshot holds no others). */
        bool only_gone = true;
        char mine[40], ns[40];
        snprintf(mine, sizeof(mine), "+ link %s", net.ifprefix);
        snprintf(ns, sizeof(ns), "sptest-%d-", (int)getpid());
        for (char *line = leaks; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                if (line[0] != '+')
                        continue;
                char *nl = strchr(line, '\n');
                size_t len = nl ? (size_t)(nl - line) : strlen(line);
                _cleanup_free_ char *one = strndup(line, len);
                bool ours = strncmp(one, "+ link ", 7) == 0    ? strncmp(one, mine, strlen(mine)) == 0
                            : strncmp(one, "+ mount ", 8) == 0 ? strstr(one, dir) != NULL
                            : strncmp(one, "+ loop ", 7) == 0  ? strstr(one, dir) != NULL
                            : strncmp(one, "+ netns ", 8) == 0 ? strstr(one, ns) != NULL
                                                               : true;
                if (ours)
                        only_gone = false;
        }
        ck_assert_msg(only_gone, "delete left something new behind:\n%s", leaks);
        free(leaks);
        sp_test_snapshot_free(&before);
        sp_test_snapshot_free(&after);
        if (access("/sys/fs/cgroup/memory", F_OK) == 0) {
                int left = 0;
                _cleanup_closedir_ DIR *dd = opendir(cg);
                struct dirent *de;
                /* The worker's own frozen anchor group stays while it runs (docs/worker.md). */
                while (dd && (de = readdir(dd)))
                        if (de->d_type == DT_DIR && de->d_name[0] != '.' && strcmp(de->d_name, "freezer-anchor") != 0)
                                left++;
                ck_assert_int_eq(left, 0);
        }
        /* no process is left in the worker's cgroups */
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "grep -l ':/%s/' /proc/[0-9]*/cgroup 2>/dev/null | grep -q .", cgparent);
        ck_assert_int_ne(system(cmd), 0);
}
END_TEST

/* The host ends of this worker's sandbox links (names "<ifprefix><slot>"),
 * one per line, sorted. */
static void host_links(sp_buf *out)
{
        _cleanup_closedir_ DIR *d = opendir("/sys/class/net");
        ck_assert_ptr_nonnull(d);
        struct dirent *de;
        size_t n = strlen(net.ifprefix);
        while ((de = readdir(d)))
                if (strncmp(de->d_name, net.ifprefix, n) == 0 && de->d_name[n] >= '0' && de->d_name[n] <= '9')
                        sp_buf_appendf(out, NULL, "%s\n", de->d_name);
}

static bool has_link(const char *name)
{
        _cleanup_buf_ sp_buf l = SP_BUF_INIT;
        host_links(&l);
        char want[32];
        snprintf(want, sizeof(want), "%s\n", name);
        return l.data && strstr(l.data, want) != NULL;
}

/* What the sandbox sees of its network: eth0's IPv4 address and the default route. */
static void sandbox_view(const char *sandbox, const char *session, sp_buf *out)
{
        stream_state st;
        int code = exec_run(sandbox, session,
                            "ip -4 -o addr show dev eth0 | awk '{print $4}'; ip route | awk '/^default/ {print $3}'; "
                            "cat /proc/sys/net/ipv6/conf/all/disable_ipv6",
                            &st);
        ck_assert_msg(code == 0, "the sandbox could not look at its network: %s", st.err.data ? st.err.data : "");
        sp_buf_append(out, st.out.data, st.out.len, NULL);
        stream_free(&st);
}

START_TEST(sandboxes_get_a_link_that_survives_restarts)
{
        create_sandbox("sbx_test0000000000000009");
        /* One host end, named for the sandbox's slot; the addresses of that slot's /31. */
        _cleanup_buf_ sp_buf links = SP_BUF_INIT;
        host_links(&links);
        ck_assert_msg(links.len > 0 && strchr(links.data, '\n') == links.data + links.len - 1,
                      "want one host end, have: %s", links.data ? links.data : "none");
        char host_if[32];
        snprintf(host_if, sizeof(host_if), "%.*s", (int)(links.len - 1), links.data);
        unsigned slot = (unsigned)atoi(host_if + strlen(net.ifprefix));
        unsigned a = 0, b = 0;
        ck_assert_int_eq(sscanf(net.cidr, "--sandbox-cidr=10.%u.%u.0/24", &a, &b), 2);
        char want[128];
        snprintf(want, sizeof(want), "10.%u.%u.%u/31\n10.%u.%u.%u\n1\n", a, b, 2 * slot + 1, a, b, 2 * slot);
        _cleanup_buf_ sp_buf view = SP_BUF_INIT;
        sandbox_view("sbx_test0000000000000009", "ses_test0000000000000090", &view);
        ck_assert_str_eq(view.data, want);

        /* Root inside holds no capability over its network: it cannot re-address, re-route or drop its link. */
        stream_state st;
        int code = exec_run("sbx_test0000000000000009", "ses_test0000000000000091",
                            "ip addr add 10.9.9.9/32 dev eth0 && echo added; ip route del default && echo unrouted; "
                            "ip link set eth0 down && echo down; ip link add x0 type dummy && echo made; "
                            "ip -4 -o addr show dev eth0 | wc -l",
                            &st);
        ck_assert_int_eq(code, 0);
        ck_assert_str_eq(st.out.data, "1\n");
        stream_free(&st);

        /* The worker dies; meanwhile someone removes the host end. The restarted worker makes it again. */
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&worker, &e), &e);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "ip link del %s", host_if);
        ck_assert_int_eq(system(cmd), 0);
        ck_assert(!has_link(host_if));
        sp_test_ok(sp_test_proc_restart(&worker, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 60000, &e), &e);
        ck_assert(has_link(host_if));
        _cleanup_buf_ sp_buf again = SP_BUF_INIT;
        sandbox_view("sbx_test0000000000000009", "ses_test0000000000000092", &again);
        ck_assert_str_eq(again.data, want);

        /* A plain restart keeps the link as it is. */
        sp_test_ok(sp_test_proc_kill(&worker, &e), &e);
        sp_test_ok(sp_test_proc_restart(&worker, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 60000, &e), &e);
        ck_assert(has_link(host_if));

        /* Suspended, it has no link; restored, it has its own again. */
        json_object_put(must_call("SuspendSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000009", ""));
        ck_assert(!has_link(host_if));
        json_object_put(must_call("RestoreSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000009", ""));
        ck_assert(has_link(host_if));
        _cleanup_buf_ sp_buf restored = SP_BUF_INIT;
        sandbox_view("sbx_test0000000000000009", "ses_test0000000000000093", &restored);
        ck_assert_str_eq(restored.data, want);

        /* Deleted, nothing of its network is left. */
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000009", ""));
        _cleanup_buf_ sp_buf left = SP_BUF_INIT;
        host_links(&left);
        ck_assert_msg(left.len == 0, "left behind: %s", left.data);
}
END_TEST

static int http_get(int port, const char *path, sp_buf *out)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect to port %d: %s", port,
                      strerror(errno));
        char req[256];
        int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
        ck_assert_int_eq(write(fd, req, (size_t)n), n);
        _cleanup_buf_ sp_buf all = SP_BUF_INIT;
        char buf[4096];
        ssize_t r;
        while ((r = read(fd, buf, sizeof(buf))) > 0)
                sp_buf_append(&all, buf, (size_t)r, NULL);
        close(fd);
        int status = 0;
        ck_assert_int_eq(sscanf(all.data ? all.data : "", "HTTP/1.1 %d", &status), 1);
        const char *body = strstr(all.data, "\r\n\r\n");
        if (body)
                sp_buf_append_str(out, body + 4, NULL);
        return status;
}

static char inet_log[400]; /* the test internet's log, for failures */

/* Runs script in the sandbox and returns its stdout (the caller frees). */
static char *sh(const char *sandbox, const char *script)
{
        static int n;
        char ses[40];
        snprintf(ses, sizeof(ses), "ses_egress%014d", ++n);
        stream_state st;
        exec_run(sandbox, ses, script, &st);
        char *out = strdup(st.out.data ? st.out.data : "");
        stream_free(&st);
        return out;
}

static void expect(const char *sandbox, const char *script, const char *want)
{
        char *got = sh(sandbox, script);
        if (strcmp(got, want) != 0) {
                char logp[700];
                snprintf(logp, sizeof(logp), "%s/worker.log", dir);
                sp_test_dump_file_tail("worker", logp, 40);
                if (inet_log[0])
                        sp_test_dump_file_tail("internet", inet_log, 20);
        }
        ck_assert_msg(strcmp(got, want) == 0, "%s\n  gave '%s'\n  want '%s'", script, got, want);
        free(got);
}

/* Whether the sandbox's egress log has a record with all of the pairs (key, value), NULL-ended. */
static bool logged(const char *sandbox, const char *const *pairs)
{
        for (int tries = 0; tries < 30; tries++) {
                char req[160];
                snprintf(req, sizeof(req), "{\"id\":\"%s\",\"limit\":1000}", sandbox);
                _cleanup_json_ json_object *r = must_call("GetEgressLog", "%s%s", req, "");
                json_object *recs = NULL;
                ck_assert(json_object_object_get_ex(r, "records", &recs));
                for (size_t i = 0; i < json_object_array_length(recs); i++) {
                        json_object *rec = json_object_array_get_idx(recs, i);
                        bool all = true;
                        for (size_t k = 0; pairs[k] && all; k += 2) {
                                json_object *v = NULL;
                                all = json_object_object_get_ex(rec, pairs[k], &v) &&
                                      strcmp(json_object_get_string(v), pairs[k + 1]) == 0;
                        }
                        if (all)
                                return true;
                }
                usleep(100000); /* the firewall's log comes every 100 ms */
        }
        char p[700];
        snprintf(p, sizeof(p), "%s/state/sandboxes/%s/egress.log", dir, sandbox);
        sp_test_dump_file_tail("egress log", p, 3);
        snprintf(p, sizeof(p), "%s/worker.log", dir);
        sp_test_dump_file_tail("worker", p, 60);
        return false;
}

/* Waits (10 s at most) until the sandbox reaches allowed.test again: the
 * gateway, started again, has its profile back. */
static void egress_back(const char *sandbox)
{
        char *got = NULL;
        for (int i = 0; i < 50; i++) {
                free(got);
                got = sh(sandbox, "timeout 5 wget -q -O - http://allowed.test/ || echo refused");
                if (strcmp(got, "http allowed.test 10.213.200.1:80\n") == 0)
                        break;
                usleep(200000);
        }
        ck_assert_str_eq(got, "http allowed.test 10.213.200.1:80\n");
        free(got);
}

#define LOGGED(sandbox, ...) logged(sandbox, (const char *const[]){__VA_ARGS__, NULL})

static const char *const T_PROFILE =
        "{\"name\":\"t\",\"domains\":[\"allowed.test\",\"*.wild.test\",\"meta.test\",\"lan.test\"],\"ports\":[80,443]}";

START_TEST(egress_goes_through_the_gateway_only)
{
        /* The test's own internet, and the worker again with a gateway confined to it. */
        static const sp_test_inet_record rec[] = {
                {"allowed.test", "10.213.200.1"},
                {"evil.test", "10.213.200.3"},
                {"meta.test", "169.254.169.254"},
                {"lan.test", "192.168.77.1"},
        };
        sp_error *e = NULL;
        sp_test_inet in;
        sp_test_ok(sp_test_inet_start(&in, dir, rec, sizeof(rec) / sizeof(rec[0]), &e), &e);
        snprintf(inet_log, sizeof(inet_log), "%s", in.log_path);
        const char *del_ns[] = {"ip", "netns", "delete", in.ns.name, NULL};
        int ns_guard = sp_test_guard_run(del_ns, &e);
        sp_test_ok(ns_guard, &e);
        sp_test_proc_stop(&worker, 5000, NULL);
        sp_test_proc_free(&worker);
        memset(&worker, 0, sizeof(worker));
        sp_test_guard_done(purge_guard);
        sp_test_ok(sp_test_worker_net_args(atoi(strchr(addr, ':') + 1), in.ns.path, &net, &e), &e);
        w_extra[0] = "--gateway-resolver=" SP_TEST_INET_RESOLVER;
        w_extra[1] = "--gateway-public-cidrs=" SP_TEST_INET_CIDR;
        w_extra[2] = NULL;
        start_worker();
        sp_test_ok(sp_test_proc_wait_log(&worker, "egress gateway connected", 30000, &e), &e);

        const char *sbx = "sbx_test000000000000000e";
        char req[512];
        snprintf(req, sizeof(req), "{\"id\":\"%s\",\"template\":\"base\",\"tenant_id\":\"ten_test\",\"egress\":%s}",
                 sbx, T_PROFILE);
        json_object_put(must_call("CreateSandbox", "%s%s", req, ""));

        /* Allowed: a name of the profile, by plain HTTP and by TLS, to the address the gateway resolved. */
        expect(sbx, "timeout 10 wget -q -O - http://allowed.test/", "http allowed.test 10.213.200.1:80\n");
        expect(sbx, "timeout 10 wget -q --no-check-certificate -O - https://allowed.test/",
               "tls allowed.test 10.213.200.1:443\n");
        expect(sbx, "nslookup allowed.test 10.213.200.9 | grep -c 'Address: 10.213.200.1'", "1\n");

        /* Refused: a name it does not allow; the same address dialled directly; a Host that is not the name
         * the address was resolved for; a port; UDP; another resolver for a refused name; addresses the
         * resolver would hand out that are the host's network or its metadata service; the host itself. */
        expect(sbx, "timeout 10 wget -q -O - http://evil.test/ || echo refused", "refused\n");
        expect(sbx, "timeout 10 wget -q -O - http://10.213.200.3/ || echo refused", "refused\n");
        expect(sbx,
               "printf 'GET / HTTP/1.1\\\\r\\\\nHost: evil.test\\\\r\\\\n\\\\r\\\\n' | nc -w 3 10.213.200.1 80; echo "
               "done",
               "done\n");
        expect(sbx, "nc -w 3 allowed.test 22 </dev/null; echo done", "done\n");
        expect(sbx, "cd /tmp && timeout 3 tftp -g -r x 10.213.200.1 9999 2>/dev/null; echo done", "done\n");
        expect(sbx, "nslookup evil.test 10.213.200.9 >/dev/null 2>&1 || echo refused", "refused\n");
        expect(sbx, "timeout 10 wget -q -O - http://meta.test/ || echo refused", "refused\n");
        expect(sbx, "timeout 10 wget -q -O - http://169.254.169.254/ || echo refused", "refused\n");
        expect(sbx, "timeout 10 wget -q -O - http://lan.test/ || echo refused", "refused\n");
        expect(sbx, "nc -w 3 $(ip route | awk '/^default/ {print $3}') 22 </dev/null; echo done", "done\n");
        expect(sbx,
               "nslookup "
               "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
               "bbbbbbbbbbbbbbbbbbbbbbbbbb.wild.test >/dev/null 2>&1 || echo refused",
               "refused\n");

        /* None of it reached the internet. */
        ck_assert_int_eq(sp_test_inet_seen(&in, "10.213.200.3"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, "host=evil.test"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, ":22"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, ":9999"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, "169.254"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, "q=evil.test"), 0);

        /* Every decision is in the sandbox's egress log. */
        ck_assert(LOGGED(sbx, "kind", "tcp", "name", "allowed.test", "decision", "allowed", "proto", "tls"));
        ck_assert(LOGGED(sbx, "kind", "dns", "name", "evil.test", "decision", "refused", "rule", "name"));
        ck_assert(LOGGED(sbx, "kind", "tcp", "destination", "10.213.200.3", "rule", "address"));
        ck_assert(LOGGED(sbx, "kind", "tcp", "name", "evil.test", "destination", "10.213.200.1", "rule", "name"));
        ck_assert(LOGGED(sbx, "kind", "tcp", "destination", "10.213.200.1", "port", "22", "rule", "port"));
        ck_assert(LOGGED(sbx, "kind", "tcp", "destination", "169.254.169.254", "rule", "forbidden-address"));
        ck_assert(LOGGED(sbx, "kind", "dns", "rule", "dns-name-length"));
        ck_assert(
                LOGGED(sbx, "kind", "packet", "destination", "10.213.200.1", "proto", "udp", "rule", "space:protocol"));
        ck_assert(LOGGED(sbx, "kind", "dns", "name", "meta.test", "tenant_id", "ten_test"));

        /* And counted: the firewall's drops by rule, the gateway's state. */
        _cleanup_buf_ sp_buf m = SP_BUF_INIT;
        ck_assert_int_eq(http_get(http_port, "/metrics", &m), 200);
        ck_assert_ptr_nonnull(strstr(m.data, "space_worker_gateway_connected 1\n"));
        ck_assert_ptr_nonnull(strstr(m.data, "space_worker_firewall_drops_total{rule=\"space:protocol\"} "));
        ck_assert_ptr_null(strstr(m.data, "space_worker_firewall_drops_total{rule=\"space:protocol\"} 0\n"));

        /* Audit: what the profile would refuse goes ahead, and says so. */
        snprintf(req, sizeof(req),
                 "{\"id\":\"%s\",\"egress\":{\"name\":\"t\",\"mode\":\"audit\",\"domains\":[\"allowed.test\"]}}", sbx);
        json_object_put(must_call("SetEgress", "%s%s", req, ""));
        expect(sbx, "timeout 10 wget -q -O - http://evil.test/", "http evil.test 10.213.200.3:80\n");
        ck_assert(LOGGED(sbx, "kind", "tcp", "name", "evil.test", "decision", "would-refuse"));
        expect(sbx, "timeout 10 wget -q -O - http://169.254.169.254/ || echo refused", "refused\n");

        /* none: nothing. */
        snprintf(req, sizeof(req), "{\"id\":\"%s\",\"egress\":{\"name\":\"none\"}}", sbx);
        json_object_put(must_call("SetEgress", "%s%s", req, ""));
        expect(sbx, "timeout 10 wget -q -O - http://allowed.test/ || echo refused", "refused\n");

        /* The gateway killed: started again, and the sandbox's profile with it. */
        snprintf(req, sizeof(req), "{\"id\":\"%s\",\"egress\":%s}", sbx, T_PROFILE);
        json_object_put(must_call("SetEgress", "%s%s", req, ""));
        char pidp[700];
        snprintf(pidp, sizeof(pidp), "%s/state/gateway.pid", dir);
        _cleanup_buf_ sp_buf pid = SP_BUF_INIT;
        sp_test_ok(sp_file_read(pidp, 64, &pid, &e), &e);
        ck_assert_int_eq(kill(atoi(pid.data), SIGKILL), 0);
        egress_back(sbx);

        /* The worker killed and started again: the sandbox keeps its network, its rules and its egress. */
        sp_test_ok(sp_test_proc_kill(&worker, &e), &e);
        sp_test_ok(sp_test_proc_restart(&worker, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 60000, &e), &e);
        egress_back(sbx);
        expect(sbx, "timeout 10 wget -q -O - http://evil.test/ || echo refused", "refused\n");

        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", sbx, ""));
        sp_test_inet_stop(&in);
        sp_test_guard_done(ns_guard);
}
END_TEST

static int warm_of(const char *template_name)
{
        _cleanup_json_ json_object *info = must_call("NodeInfo", "{%s%s}", "", "");
        json_object *wm, *c;
        return json_object_object_get_ex(info, "warm", &wm) && json_object_object_get_ex(wm, template_name, &c)
                       ? json_object_get_int(c)
                       : 0;
}

/* A pool as large as the node (16 slots: 15 warm, one kept free) never keeps a request out: the
 * creates that find every slot taken by the pool are made, and the pool gives the slots back. */
START_TEST(a_full_warm_pool_gives_way_to_creates)
{
        json_object_put(must_call("SetWarmPool", "{\"template\":\"%s\",\"size\":%s}", "base", "15"));
        int warm = 0;
        for (int i = 0; i < 1200 && (warm = warm_of("base")) < 15; i++)
                usleep(50000);
        ck_assert_int_eq(warm, 15);
        static const char *const ids[] = {"sbx_test00000000000000w1", "sbx_test00000000000000w2",
                                          "sbx_test00000000000000w3"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ids); i++) {
                _cleanup_json_ json_object *r = must_call(
                        "CreateSandbox", "{\"id\":\"%s\",\"template\":\"%s\",\"warm\":false}", ids[i], "base");
                ck_assert_str_eq(field(r, "state"), "running");
        }
        /* The pool is back under the node's slots: 16 - 3 sandboxes. */
        for (int i = 0; i < 600 && (warm = warm_of("base")) > 13; i++)
                usleep(50000);
        ck_assert_int_le(warm, 13);
        json_object_put(must_call("SetWarmPool", "{\"template\":\"%s\",\"size\":%s}", "base", "0"));
        for (size_t i = 0; i < SP_ARRAY_SIZE(ids); i++)
                json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", ids[i], ""));
        for (int i = 0; i < 600 && warm_of("base") > 0; i++)
                usleep(50000);
}
END_TEST

START_TEST(warm_pool_claims_and_refills)
{
        json_object_put(must_call("SetWarmPool", "{\"template\":\"%s\",\"size\":%s}", "base", "2"));
        int warm = 0;
        for (int i = 0; i < 300 && warm < 2; i++) {
                _cleanup_json_ json_object *info = must_call("NodeInfo", "{%s%s}", "", "");
                json_object *wm, *c;
                warm = json_object_object_get_ex(info, "warm", &wm) && json_object_object_get_ex(wm, "base", &c)
                               ? json_object_get_int(c)
                               : 0;
                if (warm < 2)
                        usleep(50000);
        }
        ck_assert_int_eq(warm, 2);
        create_sandbox("sbx_test0000000000000003");
        stream_state st;
        int code = exec_run("sbx_test0000000000000003", "ses_test000000000000000e", "echo claimed", &st);
        ck_assert_int_eq(code, 0);
        ck_assert_str_eq(st.out.data, "claimed\n");
        stream_free(&st);
        /* the pool refills behind the claim */
        for (int i = 0; i < 300; i++) {
                _cleanup_json_ json_object *info = must_call("NodeInfo", "{%s%s}", "", "");
                json_object *wm, *c;
                warm = json_object_object_get_ex(info, "warm", &wm) && json_object_object_get_ex(wm, "base", &c)
                               ? json_object_get_int(c)
                               : 0;
                if (warm == 2)
                        break;
                usleep(50000);
        }
        ck_assert_int_eq(warm, 2);
        _cleanup_json_ json_object *list = must_call("ListSandboxes", "{%s%s}", "", "");
        json_object *arr;
        ck_assert(json_object_object_get_ex(list, "sandboxes", &arr));
        ck_assert_int_eq(json_object_array_length(arr), 1); /* warm ones are not listed */
        json_object_put(must_call("SetWarmPool", "{\"template\":\"%s\",\"size\":%s}", "base", "0"));
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000003", ""));
}
END_TEST

START_TEST(bad_requests_are_refused_clearly)
{
        struct {
                const char *method, *json;
                sp_errc code;
                const char *needle;
        } cases[] = {
                {"CreateSandbox", "{\"id\":\"sbx_test0000000000000009\",\"template\":\"nope\"}", SP_E_NOT_FOUND,
                 "template nope"},
                {"CreateSandbox", "{\"id\":\"../etc\",\"template\":\"base\"}", SP_E_INVALID, "invalid sandbox id"},
                {"CreateSandbox", "{\"template\":\"base\"}", SP_E_INVALID, "'id'"},
                {"CreateSandbox", "{\"id\":\"sbx_test0000000000000009\",\"template\":\"base\",\"gpu\":1}", SP_E_INVALID,
                 "unknown field 'gpu'"},
                {"Exec",
                 "{\"sandbox_id\":\"sbx_test0000000000000008\",\"session_id\":\"ses_test0000000000000009\","
                 "\"argv\":[\"true\"]}",
                 SP_E_NOT_FOUND, "sbx_test0000000000000008"},
                {"GetSession", "{\"session_id\":\"ses_test0000000000000008\"}", SP_E_NOT_FOUND,
                 "ses_test0000000000000008"},
                {"NoSuchMethod", "{}", SP_E_NOT_FOUND, ""},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                sp_error *e = NULL;
                json_object *r = call(cases[i].method, &e, "%s", cases[i].json);
                ck_assert_msg(!r, "%s accepted %s", cases[i].method, cases[i].json);
                ck_assert_msg(e->code == cases[i].code, "%s: code %d (%s)", cases[i].method, e->code, e->message);
                ck_assert_msg(strstr(e->message, cases[i].needle), "%s: %s", cases[i].method, e->message);
                sp_error_free(e);
        }
}
END_TEST

static json_object *exit_of(const char *session)
{
        _cleanup_json_ json_object *g = NULL;
        sp_error *e = NULL;
        char req[128];
        snprintf(req, sizeof(req), "{\"session_id\":\"%s\"}", session);
        g = call("GetSession", &e, "%s", req);
        ck_assert_msg(g, "%s", e ? e->message : "");
        json_object *x = NULL;
        ck_assert_msg(json_object_object_get_ex(g, "exit", &x), "no exit: %s", json_object_to_json_string(g));
        return json_object_get(x);
}

START_TEST(limits_hold_and_the_exit_says_why)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *c = call("CreateSandbox", &e,
                                             "{\"id\":\"sbx_test0000000000000004\",\"template\":\"base\","
                                             "\"resources\":{\"memory_mb\":64,\"pids\":48,\"disk_mb\":32}}");
        ck_assert_msg(c, "%s", e ? e->message : "");
        const char *sb = "sbx_test0000000000000004";

        /* memory: a 200 MB buffer under a 64 MB limit */
        stream_state st;
        exec_run(sb, "ses_test0000000000000010", "dd if=/dev/zero of=/dev/null bs=200M count=1", &st);
        stream_free(&st);
        _cleanup_json_ json_object *x1 = exit_of("ses_test0000000000000010");
        ck_assert_msg(strcmp(field(x1, "reason") ? field(x1, "reason") : "", "memory") == 0, "memory: %s",
                      json_object_to_json_string(x1));

        /* disk: 64 MB into a 32 MB quota */
        int code = exec_run(sb, "ses_test0000000000000011", "dd if=/dev/zero of=/root/fill bs=1M count=64", &st);
        ck_assert_int_ne(code, 0);
        ck_assert_msg(strstr(st.err.data ? st.err.data : "", "quota"), "dd said: %s", st.err.data);
        stream_free(&st);
        _cleanup_json_ json_object *x2 = exit_of("ses_test0000000000000011");
        ck_assert_msg(strcmp(field(x2, "reason") ? field(x2, "reason") : "", "disk") == 0, "disk: %s",
                      json_object_to_json_string(x2));

        /* pids: a fork bomb hits the limit, and the sandbox still answers afterwards */
        code = exec_run(sb, "ses_test0000000000000012",
                        "i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done 2>/dev/null; echo forked $i", &st);
        ck_assert_msg(code != 0 || strstr(st.out.data ? st.out.data : "", "forked 200") == NULL,
                      "200 processes under a 48-pid limit: %s", st.out.data);
        stream_free(&st);
        code = exec_run(sb, "ses_test0000000000000013", "pkill sleep; echo alive", &st);
        ck_assert_str_eq(st.out.data, "alive\n");
        stream_free(&st);

        /* time: a command past its timeout is killed, and says so */
        e = NULL;
        _cleanup_json_ json_object *t =
                call("Exec", &e,
                     "{\"sandbox_id\":\"%s\",\"session_id\":\"ses_test0000000000000014\",\"argv\":[\"sleep\",\"60\"],"
                     "\"timeout_ms\":300}",
                     sb);
        ck_assert_msg(t, "%s", e ? e->message : "");
        memset(&st, 0, sizeof(st));
        attach("ses_test0000000000000014", 0, 0, &st);
        stream_free(&st);
        _cleanup_json_ json_object *x3 = exit_of("ses_test0000000000000014");
        ck_assert_msg(strcmp(field(x3, "reason") ? field(x3, "reason") : "", "time") == 0, "time: %s",
                      json_object_to_json_string(x3));

        /* a PTY sees its window size */
        e = NULL;
        _cleanup_json_ json_object *p =
                call("Exec", &e,
                     "{\"sandbox_id\":\"%s\",\"session_id\":\"ses_test0000000000000015\",\"argv\":[\"stty\",\"size\"],"
                     "\"pty\":{\"rows\":33,\"cols\":101}}",
                     sb);
        ck_assert_msg(p, "%s", e ? e->message : "");
        memset(&st, 0, sizeof(st));
        attach("ses_test0000000000000015", 0, 0, &st);
        ck_assert_msg(strstr(st.out.data ? st.out.data : "", "33 101"), "pty: %s", st.out.data);
        stream_free(&st);
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", sb, ""));
}
END_TEST

/* A plain HTTP/1.1 GET on loopback; returns the status, body in out. */
/* Creates and deletes run on the worker's job threads (4 by default): while eight creates are
 * made, the loop answers other calls at once, and calls on one sandbox keep their order — a
 * delete sent right behind its create removes what the create made, a GetSandbox behind a
 * create sees it running. */
typedef struct jobs_state {
        struct event_base *base;
        int pending, answered;
        int order[16]; /* answer position of each call */
        sp_errc code[16];
        char state[16][16];
} jobs_state;

typedef struct jobs_tag {
        jobs_state *st;
        int i;
} jobs_tag;

static void jobs_answer(json_object *resp, const sp_error *err, void *ud)
{
        jobs_tag *t = ud;
        t->st->order[t->i] = t->st->answered++;
        t->st->code[t->i] = err ? err->code : SP_OK;
        const char *state = resp ? sp_json_member_str(resp, "state") : NULL;
        snprintf(t->st->state[t->i], sizeof(t->st->state[t->i]), "%s", state ? state : "");
        if (--t->st->pending == 0)
                event_base_loopbreak(t->st->base);
}

START_TEST(jobs_run_off_the_loop_in_order)
{
        enum { CREATES = 8, DELETE0 = 8, GET1 = 9, INFO = 10, CALLS = 11 };
        jobs_state st = {.base = event_base_new()};
        ck_assert_ptr_nonnull(st.base);
        sp_error *e = NULL;
        sp_rpc_client *cli = sp_rpc_client_new(st.base, addr, NULL, &e);
        sp_test_ok(cli ? 0 : -1, &e);
        jobs_tag tags[CALLS];
        char ids[CREATES][32];
        for (int i = 0; i < CALLS; i++) {
                tags[i] = (jobs_tag){.st = &st, .i = i};
                const char *method = i < CREATES    ? "CreateSandbox"
                                     : i == DELETE0 ? "DeleteSandbox"
                                     : i == GET1    ? "GetSandbox"
                                                    : "NodeInfo";
                char text[256];
                if (i < CREATES) {
                        snprintf(ids[i], sizeof(ids[i]), "sbx_jbsq000000000000000%d", i);
                        snprintf(text, sizeof(text), "{\"id\":\"%s\",\"template\":\"base\"}", ids[i]);
                } else if (i == DELETE0 || i == GET1) {
                        snprintf(text, sizeof(text), "{\"id\":\"%s\"}", ids[i == DELETE0 ? 0 : 1]);
                } else {
                        snprintf(text, sizeof(text), "{}");
                }
                _cleanup_json_ json_object *req = NULL;
                ck_assert_int_eq(sp_json_parse(text, strlen(text), &req, NULL), 0);
                sp_test_ok(sp_rpc_client_call(cli, method, req, 120000, jobs_answer, &tags[i], &e), &e);
                st.pending++;
        }
        event_base_dispatch(st.base);
        sp_rpc_client_free(cli);
        event_base_free(st.base);
        for (int i = 0; i < CALLS; i++)
                ck_assert_msg(st.code[i] == SP_OK, "call %d failed (%d)", i, (int)st.code[i]);
        /* The loop was free: NodeInfo came back before the creates waiting for a thread. */
        int last_create = 0;
        for (int i = 0; i < CREATES; i++)
                if (st.order[i] > last_create)
                        last_create = st.order[i];
        ck_assert_msg(st.order[INFO] < last_create, "NodeInfo answered at %d, the last create at %d", st.order[INFO],
                      last_create);
        /* Per-sandbox order: the delete ran after its create (answered in a later turn), and the
         * GetSandbox waited for its create (answered in the same turn: either may arrive first). */
        ck_assert_int_gt(st.order[DELETE0], st.order[0]);
        ck_assert_str_eq(st.state[GET1], "running");
        ck_assert_ptr_null(call("GetSandbox", &e, "{\"id\":\"%s\"}", ids[0]));
        ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
        e = sp_error_free(e);
        char path[700];
        snprintf(path, sizeof(path), "%s/state/sandboxes", dir);
        ck_assert_int_eq(count_dir(path), CREATES - 1);
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(http_get(http_port, "/metrics", &body), 200);
        ck_assert_msg(strstr(body.data, "space_worker_jobs_total{kind=\"create\"} 8\n"), "%s", body.data);
        ck_assert_msg(strstr(body.data, "space_worker_jobs_total{kind=\"delete\"} 1\n"), "%s", body.data);
        ck_assert_msg(strstr(body.data, "space_worker_jobs_queued{priority=\"user\"} 0\n"), "%s", body.data);
        for (int i = 1; i < CREATES; i++)
                json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", ids[i], ""));
        ck_assert_int_eq(count_dir(path), 0);
}
END_TEST

START_TEST(health_and_metrics)
{
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        ck_assert_int_eq(http_get(http_port, "/healthz", &body), 200);
        sp_buf_clear(&body);
        ck_assert_int_eq(http_get(http_port, "/readyz", &body), 200);
        create_sandbox("sbx_test0000000000000005");
        sp_buf_clear(&body);
        ck_assert_int_eq(http_get(http_port, "/metrics", &body), 200);
        ck_assert_msg(strstr(body.data, "space_worker_sandboxes{state=\"running\"} 1\n"), "%s", body.data);
        ck_assert_msg(strstr(body.data, "space_worker_info{node="), "%s", body.data);
        ck_assert_msg(strstr(body.data, "space_worker_rpc_calls_total "), "%s", body.data);
        sp_buf_clear(&body);
        ck_assert_int_eq(http_get(http_port, "/nope", &body), 404);
        ck_assert_msg(strstr(body.data, "\"not_found\""), "%s", body.data);
        json_object_put(must_call("DeleteSandbox", "{\"id\":\"%s\"%s}", "sbx_test0000000000000005", ""));
}
END_TEST

int main(void)
{
        sp_test_require_root("btrfs, namespaces and cgroups");
        Suite *s = suite_create("worker_daemon");
        TCase *tc = tcase_create("daemon");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, lifecycle_exec_files);
        tcase_add_test(tc, suspend_keeps_processes);
        tcase_add_test(tc, a_failed_restore_says_why);
        tcase_add_test(tc, suspend_without_checkpoint_says_why);
        tcase_add_test(tc, a_checkpoint_outlives_a_worker_restart);
        tcase_add_test(tc, worker_sigkill_loses_nothing_and_delete_leaves_nothing);
        tcase_add_test(tc, sandboxes_get_a_link_that_survives_restarts);
        tcase_add_test(tc, egress_goes_through_the_gateway_only);
        tcase_add_test(tc, warm_pool_claims_and_refills);
        tcase_add_test(tc, a_full_warm_pool_gives_way_to_creates);
        tcase_add_test(tc, bad_requests_are_refused_clearly);
        tcase_add_test(tc, limits_hold_and_the_exit_says_why);
        tcase_add_test(tc, health_and_metrics);
        tcase_add_test(tc, jobs_run_off_the_loop_in_order);
        tcase_add_test(tc, more_sessions_than_the_live_limit);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
