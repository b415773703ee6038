/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template imports off the worker's event loop, against a real space-worker
 * over mTLS (needs root: btrfs, namespaces, cgroups), with debootstrap
 * replaced by a script (--debootstrap-program) that prints a line every
 * quarter second for three seconds and makes a tiny root filesystem. While
 * it runs, heartbeats (to a fake control plane the test runs in a thread)
 * and other calls go on, progress frames arrive before the trailer, the name
 * is taken (a second import is a conflict, a sandbox of it is not found);
 * the worker's and the request's mirror reach the program; the fields are
 * checked per source; a delete mid-import kills the program and answers once
 * nothing of the template is left; and a worker stopped mid-import exits
 * cleanly and leaves nothing of the template.
 */
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/worker/test_template_util.h"
#include "harness.h"
#include "launcher.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/time.h"
#include "space/tls.h"

#define WORKER_MIRROR "http://mirror.example/debian"

/* ---- per test case (the runner process): certificates, the fake program ---- */

static char *top;
static char cgparent[64];
static char *ca_pem, *cp_cert, *cp_key;

static void save(const char *name, const char *pem, bool secret)
{
        char p[700];
        snprintf(p, sizeof(p), "%s/%s", top, name);
        sp_error *e = NULL;
        sp_test_ok(sp_pki_pem_save(p, pem, secret, &e), &e);
}

static void issue(sp_pki_ca *ca, sp_role role, const char *name, char **ret_cert, char **ret_key)
{
        static const char *const sans[] = {"127.0.0.1", "localhost", NULL};
        sp_error *e = NULL;
        sp_test_ok(sp_pki_issue(ca, role, name, sans, 30, ret_cert, ret_key, &e), &e);
}

/* Prints "I: step N" every quarter second for three seconds, then makes a
 * root filesystem recording its arguments; suite "broken" fails. */
static const char fake_debootstrap[] =
        "#!/bin/sh\n"
        "# the worker runs: PROGRAM --variant=minbase SUITE DEST [MIRROR]\n"
        "echo \"I: Retrieving InRelease of $2\"\n"
        "i=0\n"
        "while [ $i -lt 12 ]; do echo \"I: step $i\"; sleep 0.25; i=$((i+1)); done\n"
        "[ \"$2\" = broken ] && { echo 'E: Couldn'\"'\"'t download packages'; exit 1; }\n"
        "mkdir -p \"$3/etc\" || exit 1\n"
        "echo 12.0 > \"$3/etc/debian_version\"\n"
        "echo \"${4:-none}\" > \"$3/etc/mirror\"\n"
        "echo \"$1\" > \"$3/etc/variant\"\n"
        "echo 'I: Base system installed successfully.'\n";

static void case_setup(void)
{
        top = sp_test_tmpdir("import");
        ck_assert_int_eq(chmod(top, 0755), 0);
        snprintf(cgparent, sizeof(cgparent), "space-import-%d", (int)getpid());
        sp_error *e = NULL;
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        sp_test_ok(sp_pki_ca_create("space-test-ca", 30, &ca, &e), &e);
        ca_pem = sp_pki_ca_cert_pem(ca, &e);
        ck_assert_ptr_nonnull(ca_pem);
        _cleanup_free_ char *wc = NULL, *wkey = NULL;
        issue(ca, SP_ROLE_WORKER, "worker-test", &wc, &wkey);
        issue(ca, SP_ROLE_CONTROLPLANE, "controlplane", &cp_cert, &cp_key);
        save("ca.pem", ca_pem, false);
        save("worker.crt", wc, false);
        save("worker.key", wkey, true);
        char p[700];
        snprintf(p, sizeof(p), "%s/fake-debootstrap", top);
        sp_test_ok(sp_file_write_atomic(p, fake_debootstrap, strlen(fake_debootstrap), 0755, &e), &e);
}

static void case_teardown(void)
{
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "for m in $(awk '$5 ~ \"^%s/\" {print $5}' /proc/self/mountinfo | sort -r); do umount -l $m; done; "
                 "for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] && rmdir $d/* $d 2>/dev/null; "
                 "done; true",
                 top, cgparent, cgparent);
        if (system(cmd) != 0)
                fprintf(stderr, "import test: the cleanup script failed\n");
        sp_test_tmpdir_remove(top);
        free(top);
        free(ca_pem);
        free(cp_cert);
        free(cp_key);
}

/* ---- a fake control plane: records heartbeats, on its own thread ---- */

static struct {
        pthread_mutex_t lock;
        json_object *beats; /* array of the Heartbeat requests, in order */
        struct event_base *base;
        sp_rpc_server *srv;
        SSL_CTX *ctx;
        pthread_t thread;
        int port;
} cp = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void h_heartbeat(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        pthread_mutex_lock(&cp.lock);
        json_object_array_add(cp.beats, json_object_get(req));
        pthread_mutex_unlock(&cp.lock);
        _cleanup_json_ json_object *resp = NULL;
        const char *text = "{\"worker_id\":\"wkr_test\",\"state\":\"ready\",\"admin_state\":\"active\","
                           "\"heartbeat_ms\":200}";
        ck_assert_int_eq(sp_json_parse(text, strlen(text), &resp, NULL), 0);
        sp_rpc_call_reply(call, resp, NULL);
}

static int cp_identity(SSL *ssl, void *ud, unsigned *ret_role, char **ret_name, sp_error **err)
{
        (void)ud;
        sp_role role;
        if (sp_tls_peer_identity(ssl, &role, ret_name, err) < 0)
                return -SP_E_UNAUTHENTICATED;
        *ret_role = (unsigned)role;
        return 0;
}

static void *cp_main(void *arg)
{
        (void)arg;
        event_base_dispatch(cp.base);
        return NULL;
}

static void cp_start(void)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = ca_pem, .cert_pem = cp_cert, .key_pem = cp_key, .peer_roles = SP_ROLE_WORKER, .alpn = alpn};
        sp_error *e = NULL;
        cp.beats = json_object_new_array();
        cp.base = event_base_new();
        cp.ctx = sp_tls_server_ctx_new(&tc, &e);
        sp_test_ok(cp.ctx ? 0 : -1, &e);
        cp.srv = sp_rpc_server_new(cp.base, cp.ctx, &e);
        sp_test_ok(cp.srv ? 0 : -1, &e);
        const sp_rpc_method m = {"Heartbeat", SP_ROLE_WORKER, false, h_heartbeat, NULL};
        sp_test_ok(sp_rpc_server_register(cp.srv, &m, &e), &e);
        sp_rpc_server_set_identity_fn(cp.srv, cp_identity, NULL);
        sp_test_ok(sp_rpc_server_listen(cp.srv, "127.0.0.1:0", &e), &e);
        cp.port = sp_rpc_server_port(cp.srv);
        ck_assert_int_eq(pthread_create(&cp.thread, NULL, cp_main, NULL), 0);
}

static size_t beats_count(void)
{
        pthread_mutex_lock(&cp.lock);
        size_t n = json_object_array_length(cp.beats);
        pthread_mutex_unlock(&cp.lock);
        return n;
}

/* ---- per test (forked): a fresh worker ---- */

static char *dir;
static char addr[64];
static sp_test_proc worker;
static SSL_CTX *cp_ctx;

static SSL_CTX *client_ctx(const char *cert, const char *key)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = ca_pem, .cert_pem = cert, .key_pem = key, .peer_roles = SP_ROLE_WORKER, .alpn = alpn};
        sp_error *e = NULL;
        SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, &e);
        sp_test_ok(ctx ? 0 : -1, &e);
        return ctx;
}

static char *at(const char *rel)
{
        static char buf[8][1024];
        static int i;
        char *b = buf[i++ % 8];
        snprintf(b, sizeof(buf[0]), "%s/%s", dir, rel);
        return b;
}

static void start_worker(void)
{
        char bin[1024], state[700], storage[700], image[700], logp[700], ca[700], cert[700], key[700], listen[80],
                cg[128], cpl[80], prog[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(state, sizeof(state), "--state-dir=%s/state", dir);
        snprintf(storage, sizeof(storage), "--storage-dir=%s/storage", dir);
        snprintf(image, sizeof(image), "--storage-image=%s/storage.img", dir);
        snprintf(logp, sizeof(logp), "%s/worker.log", dir);
        snprintf(ca, sizeof(ca), "--tls-ca=%s/ca.pem", top);
        snprintf(cert, sizeof(cert), "--tls-cert=%s/worker.crt", top);
        snprintf(key, sizeof(key), "--tls-key=%s/worker.key", top);
        snprintf(listen, sizeof(listen), "--listen=%s", addr);
        snprintf(cg, sizeof(cg), "--cgroup-parent=%s", cgparent);
        snprintf(cpl, sizeof(cpl), "--control-plane=127.0.0.1:%d", cp.port);
        snprintf(prog, sizeof(prog), "--debootstrap-program=%s/fake-debootstrap", top);
        const char *argv[] = {bin,
                              state,
                              storage,
                              image,
                              "--storage-size=1G",
                              ca,
                              cert,
                              key,
                              listen,
                              "--http-listen=",
                              cg,
                              cpl,
                              "--node-id=worker-test",
                              prog,
                              "--debootstrap-mirror=" WORKER_MIRROR,
                              "--base-template=false",
                              "--slots=4",
                              "--log-format=text",
                              NULL};
        sp_test_proc_opts opts = {.log_path = logp};
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_start(&worker, "worker", argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);
}

static void setup(void)
{
        static int n;
        if (asprintf(&dir, "%s/t%d-%d", top, (int)getpid(), n++) < 0 || mkdir(dir, 0700) < 0)
                ck_abort_msg("cannot make the test directory");
        sp_error *e = NULL;
        int port = sp_test_free_port(&e);
        sp_test_ok(port > 0 ? 0 : -1, &e);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        cp_ctx = client_ctx(cp_cert, cp_key);
        cp_start();
        memset(&worker, 0, sizeof(worker));
        start_worker();
}

static void teardown(void)
{
        sp_test_proc_stop(&worker, 10000, NULL);
        sp_test_proc_free(&worker);
        free(dir);
}

/* ---- calls ---- */

static json_object *call(SSL_CTX *ctx, const char *method, sp_error **err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static json_object *call(SSL_CTX *ctx, const char *method, sp_error **err, const char *fmt, ...)
{
        char text[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_msg(sp_json_parse(text, strlen(text), &req, NULL) == 0, "bad test JSON: %s", text);
        json_object *resp = NULL;
        if (sp_rpc_call_sync(addr, ctx, method, req, 60000, &resp, err) < 0)
                return NULL;
        return resp;
}

static const char *field(json_object *o, const char *name)
{
        json_object *v;
        return o && json_object_object_get_ex(o, name, &v) ? json_object_get_string(v) : NULL;
}

/* ---- ImportTemplate as a stream on the test's own loop ---- */

typedef struct {
        struct event_base *base;
        sp_rpc_client *cli;
        sp_rpc_stream *stream;
        bool ended;
        json_object *trailer;
        sp_error *error;
        unsigned progress; /* progress frames of the program's own lines ("I: …") */
        unsigned frames_after_end;
        char last[256];
} import_state;

static void im_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)s;
        import_state *st = ud;
        if (type != SP_RPC_FRAME_JSON)
                return;
        if (st->ended)
                st->frames_after_end++;
        _cleanup_json_ json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse((const char *)p, n, &o, NULL), 0);
        ck_assert_str_eq(field(o, "event"), "progress");
        const char *m = field(o, "message");
        ck_assert_ptr_nonnull(m);
        snprintf(st->last, sizeof(st->last), "%s", m);
        if (strncmp(m, "I: ", 3) == 0)
                st->progress++;
}

static void im_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        import_state *st = ud;
        st->ended = true;
        st->stream = NULL;
        if (trailer)
                st->trailer = json_object_get(trailer);
        if (err)
                sp_error_set(&st->error, err->code, "%s", err->message);
        event_base_loopbreak(st->base);
}

static void import_start(import_state *st, const char *req_json)
{
        memset(st, 0, sizeof(*st));
        st->base = event_base_new();
        sp_error *e = NULL;
        st->cli = sp_rpc_client_new(st->base, addr, cp_ctx, &e);
        sp_test_ok(st->cli ? 0 : -1, &e);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_msg(sp_json_parse(req_json, strlen(req_json), &req, NULL) == 0, "bad test JSON %s", req_json);
        static const sp_rpc_stream_ops ops = {.on_frame = im_frame, .on_end = im_end};
        st->stream = sp_rpc_client_stream(st->cli, "ImportTemplate", req, 120000, &ops, st, &e);
        sp_test_ok(st->stream ? 0 : -1, &e);
}

/* Runs the loop until the import has sent n progress lines (or ended). */
static void import_wait_progress(import_state *st, unsigned n)
{
        int64_t until = sp_now_mono_us() + 30 * 1000000;
        while (!st->ended && st->progress < n && sp_now_mono_us() < until)
                event_base_loop(st->base, EVLOOP_ONCE);
}

static void import_wait_end(import_state *st)
{
        while (!st->ended)
                event_base_dispatch(st->base);
}

static void import_free(import_state *st)
{
        sp_rpc_client_free(st->cli);
        event_base_free(st->base);
        if (st->trailer)
                json_object_put(st->trailer);
        sp_error_free(st->error);
        memset(st, 0, sizeof(*st));
}

/* A whole import: returns the error code (0 on success); *st holds the rest. */
static int import_run(import_state *st, const char *req_json)
{
        import_start(st, req_json);
        import_wait_end(st);
        return st->error ? (int)st->error->code : 0;
}

static int64_t timed_call_ms(const char *method, const char *req)
{
        sp_error *e = NULL;
        int64_t t0 = sp_now_mono_us();
        _cleanup_json_ json_object *r = call(cp_ctx, method, &e, "%s", req);
        ck_assert_msg(r, "%s: %s", method, e ? e->message : "?");
        return (sp_now_mono_us() - t0) / 1000;
}

static sp_errc call_error(const char *method, const char *req)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *r = call(cp_ctx, method, &e, "%s", req);
        ck_assert_msg(!r, "%s %s succeeded", method, req);
        sp_errc code = e->code;
        sp_error_free(e);
        return code;
}

static char *rootfs_file(const char *tpl, const char *rel)
{
        char p[256];
        snprintf(p, sizeof(p), "storage/templates/%s/rootfs/%s", tpl, rel);
        return tt_read(at(p));
}

/* Whether a process runs the fake program (its path followed by its first
 * argument is in the command line: the worker's own names the path only).
 * Read in C, not by a shell per process: on a loaded machine a shell loop
 * over /proc took longer than the fake program runs. */
static bool fake_running(void)
{
        char needle[700];
        snprintf(needle, sizeof(needle), "%s/fake-debootstrap --variant", top);
        return sp_test_procs_with_cmdline(needle, NULL) > 0;
}

/* ---- tests ---- */

START_TEST(import_runs_off_the_loop)
{
        size_t beats_before = beats_count();
        int64_t t0 = sp_now_mono_us();
        import_state st;
        import_start(&st, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}");
        import_wait_progress(&st, 2);
        ck_assert_msg(!st.ended, "the import ended early: %s", st.error ? st.error->message : "ok");

        /* The loop answers at once while the program runs. */
        int64_t info_ms = timed_call_ms("NodeInfo", "{}");
        int64_t list_ms = timed_call_ms("ListSandboxes", "{}");
        ck_assert_msg(info_ms < 1000 && list_ms < 1000, "NodeInfo took %lld ms, ListSandboxes %lld ms",
                      (long long)info_ms, (long long)list_ms);
        /* The name is taken, and not yet a template. */
        import_state again;
        ck_assert_int_eq(import_run(&again, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}"),
                         SP_E_CONFLICT);
        ck_assert_msg(strstr(again.error->message, "being imported"), "%s", again.error->message);
        import_free(&again);
        ck_assert_int_eq(call_error("CreateSandbox", "{\"id\":\"sbx_test00000000000000b1\",\"template\":\"deb\"}"),
                         SP_E_NOT_FOUND);
        _cleanup_json_ json_object *info = call(cp_ctx, "NodeInfo", NULL, "{}");
        json_object *names = NULL;
        ck_assert(json_object_object_get_ex(info, "templates", &names));
        ck_assert_int_eq(json_object_array_length(names), 0);

        import_wait_end(&st);
        int64_t took_ms = (sp_now_mono_us() - t0) / 1000;
        ck_assert_msg(!st.error, "ImportTemplate: %s", st.error ? st.error->message : "");
        ck_assert_uint_eq(st.frames_after_end, 0);
        /* 13 lines in 3 s, forwarded at most 4 a second. */
        ck_assert_msg(st.progress >= 4 && st.progress <= 4 * (unsigned)(took_ms / 1000 + 2),
                      "%u progress lines in %lld ms", st.progress, (long long)took_ms);
        ck_assert_str_eq(st.last, "imported");
        json_object *t = NULL;
        ck_assert(json_object_object_get_ex(st.trailer, "template", &t));
        ck_assert_str_eq(field(t, "name"), "deb");
        ck_assert_str_eq(field(t, "source"), "debootstrap");
        import_free(&st);
        /* Heartbeats went on every 200 ms meanwhile (and one came at once after). */
        size_t beats = beats_count() - beats_before;
        ck_assert_msg(beats >= (size_t)(took_ms / 400), "%zu heartbeats in %lld ms", beats, (long long)took_ms);

        /* The worker's mirror reached the program, with the minbase variant. */
        char *mirror = rootfs_file("deb", "etc/mirror"), *variant = rootfs_file("deb", "etc/variant");
        ck_assert_str_eq(mirror, WORKER_MIRROR "\n");
        ck_assert_str_eq(variant, "--variant=minbase\n");
        free(mirror);
        free(variant);
        _cleanup_json_ json_object *sb =
                call(cp_ctx, "CreateSandbox", NULL, "{\"id\":\"sbx_test00000000000000b2\",\"template\":\"deb\"}");
        ck_assert_ptr_nonnull(sb);
        _cleanup_json_ json_object *d = call(cp_ctx, "DeleteSandbox", NULL, "{\"id\":\"sbx_test00000000000000b2\"}");
        ck_assert_ptr_nonnull(d);
        _cleanup_json_ json_object *dt = call(cp_ctx, "DeleteTemplate", NULL, "{\"name\":\"deb\"}");
        ck_assert_ptr_nonnull(dt);
}
END_TEST

START_TEST(request_mirror_failures_and_fields)
{
        import_state st;
        ck_assert_int_eq(import_run(&st, "{\"name\":\"deb2\",\"source\":\"debootstrap\",\"suite\":\"trixie\","
                                         "\"mirror\":\"https://other.example/debian\"}"),
                         0);
        import_free(&st);
        char *mirror = rootfs_file("deb2", "etc/mirror");
        ck_assert_str_eq(mirror, "https://other.example/debian\n");
        free(mirror);

        /* A failing program: its last line, and nothing of the template left. */
        ck_assert_int_eq(import_run(&st, "{\"name\":\"deb3\",\"source\":\"debootstrap\",\"suite\":\"broken\"}"),
                         SP_E_UNAVAILABLE);
        ck_assert_msg(strstr(st.error->message, "download packages"), "%s", st.error->message);
        ck_assert_msg(st.progress >= 1, "no progress before the failure");
        import_free(&st);
        ck_assert_int_eq(access(at("storage/templates/deb3"), F_OK), -1);
        ck_assert_int_eq(access(at("state/templates/deb3.json"), F_OK), -1);

        /* Fields per source. */
        static const char *const bad[] = {
                "{\"name\":\"x\",\"source\":\"debootstrap\"}",
                "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"bookworm\",\"path\":\"/srv\"}",
                "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"Bad Suite\"}",
                "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"bookworm\",\"mirror\":\"ftp://m/debian\"}",
                "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"bookworm\",\"mirror\":\"http://m/$(id)\"}",
                "{\"name\":\"x\",\"source\":\"tar\",\"path\":\"a.tar\",\"suite\":\"bookworm\"}",
                "{\"name\":\"x\",\"source\":\"base\",\"mirror\":\"http://m/debian\"}",
                "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"bookworm\",\"variant\":\"buildd\"}",
                "{\"name\":\"x\",\"source\":\"nope\"}",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                int code = import_run(&st, bad[i]);
                ck_assert_msg(code == SP_E_INVALID, "%s: %d %s", bad[i], code, st.error ? st.error->message : "");
                import_free(&st);
        }
        ck_assert_int_eq(access(at("storage/templates/x"), F_OK), -1);
}
END_TEST

START_TEST(deleting_mid_import_kills_the_program)
{
        import_state st;
        import_start(&st, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}");
        import_wait_progress(&st, 1);
        ck_assert(!st.ended);
        ck_assert(fake_running());
        ck_assert_int_eq(access(at("storage/templates/deb/rootfs"), F_OK), 0);
        /* Answered once the import stopped: the program killed (it would run
         * three seconds), nothing of the template left. */
        int64_t ms = timed_call_ms("DeleteTemplate", "{\"name\":\"deb\"}");
        ck_assert_msg(ms < 2000, "the delete took %lld ms", (long long)ms);
        ck_assert(!fake_running());
        ck_assert_int_eq(access(at("storage/templates/deb"), F_OK), -1);
        ck_assert_int_eq(access(at("state/templates/deb.json"), F_OK), -1);
        import_wait_end(&st);
        ck_assert_msg(st.error && st.error->code == SP_E_NOT_FOUND && strstr(st.error->message, "deleted"), "%s",
                      st.error ? st.error->message : "imported");
        import_free(&st);
        /* Not recorded after the fact; the name is free again. */
        _cleanup_json_ json_object *info = call(cp_ctx, "NodeInfo", NULL, "{}");
        json_object *names = NULL;
        ck_assert(json_object_object_get_ex(info, "templates", &names));
        ck_assert_int_eq(json_object_array_length(names), 0);
        ck_assert_int_eq(call_error("DeleteTemplate", "{\"name\":\"deb\"}"), SP_E_NOT_FOUND);
        ck_assert_int_eq(import_run(&st, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}"), 0);
        import_free(&st);
}
END_TEST

START_TEST(stopping_mid_import_leaves_nothing)
{
        import_state st;
        import_start(&st, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}");
        import_wait_progress(&st, 1);
        ck_assert(!st.ended);
        ck_assert(fake_running());
        /* SIGTERM: the import is cancelled, the program killed, the daemon exits cleanly. */
        int64_t t0 = sp_now_mono_us();
        sp_error *e = NULL;
        int r = sp_test_proc_stop(&worker, 10000, &e);
        sp_test_ok(r < 0 ? r : 0, &e);
        ck_assert_msg(r == 0, "the worker had to be killed");
        ck_assert_msg(sp_now_mono_us() - t0 < 5 * 1000000, "the worker took %lld ms to stop",
                      (long long)(sp_now_mono_us() - t0) / 1000);
        ck_assert_msg(WIFEXITED(worker.status) && WEXITSTATUS(worker.status) == 0, "worker status %d", worker.status);
        import_wait_end(&st);
        ck_assert_ptr_nonnull(st.error);
        import_free(&st);
        ck_assert(!fake_running());
        ck_assert_int_eq(access(at("storage/templates/deb"), F_OK), -1);

        /* A crash mid-import: the next start removes the template without a record. */
        sp_test_ok(sp_test_proc_restart(&worker, 10000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);
        import_start(&st, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}");
        import_wait_progress(&st, 1);
        ck_assert(!st.ended);
        ck_assert_int_eq(access(at("storage/templates/deb/rootfs"), F_OK), 0);
        sp_test_ok(sp_test_proc_kill(&worker, &e), &e);
        import_wait_end(&st);
        import_free(&st);
        /* The program dies with the daemon's importing thread. */
        int64_t until = sp_now_mono_us() + 5 * 1000000;
        while (fake_running() && sp_now_mono_us() < until)
                usleep(50000);
        ck_assert(!fake_running());
        sp_test_ok(sp_test_proc_restart(&worker, 10000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);
        ck_assert_int_eq(access(at("storage/templates/deb"), F_OK), -1);
        ck_assert_int_eq(import_run(&st, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}"), 0);
        import_free(&st);
}
END_TEST

int main(void)
{
        sp_test_require_root("btrfs, namespaces and cgroups");
        Suite *s = suite_create("worker_import");
        TCase *tc = tcase_create("import");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, import_runs_off_the_loop);
        tcase_add_test(tc, request_mirror_failures_and_fields);
        tcase_add_test(tc, deleting_mid_import_kills_the_program);
        tcase_add_test(tc, stopping_mid_import_leaves_nothing);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
