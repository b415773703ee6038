/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template uploads against a real space-worker over mTLS (needs root: btrfs,
 * namespaces, cgroups): a gzip tarball streamed in many DATA frames becomes a
 * template a sandbox runs from; an OCI archive is unpacked and imported with
 * its image config; past max_bytes, a malformed archive or a cancelled stream
 * leave nothing behind; an existing name is a conflict; ReadTemplateArtifact
 * gives back exactly the uploaded bytes; DeleteTemplate removes the artifact;
 * a restart keeps template and artifact and sweeps stale upload files; the
 * data plane may upload but neither import nor read artifacts; and every
 * template change sends a heartbeat at once (to a fake control plane the
 * test runs in a thread). In a small pool: an archive stops short of the
 * free space less the reserve, and an OCI layer that fits the pool once but
 * not twice (its scratch copy, then the template) is refused without the
 * pool's free space ever going below the reserve. A template deleted while
 * its archive comes in or while it is imported stops there and leaves
 * nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

/* ---- per test case (the runner process): certificates, fixtures ---- */

static char *top;
static char cgparent[64];
static char *ca_pem, *cp_cert, *cp_key, *dp_cert, *dp_key;
static sp_buf tarball, oci_archive; /* the archives the tests upload */
static bool have_busybox;

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

static void read_whole(const char *path, sp_buf *out)
{
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(path, 256u << 20, out, &e), &e);
}

/* An entry with binary data of n bytes. */
static void add_bytes(struct archive *a, const char *name, const void *data, size_t n, unsigned perm)
{
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, perm);
        archive_entry_set_size(e, (la_int64_t)n);
        archive_entry_set_mtime(e, 1700000000, 0);
        ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
        if (n)
                ck_assert_int_eq(archive_write_data(a, data, n), (la_ssize_t)n);
        archive_entry_free(e);
}

/* A root filesystem tarball (gzip): a file to look for and, when the host has
 * a static busybox, a shell to look with. */
static void make_tarball(void)
{
        char path[700];
        snprintf(path, sizeof(path), "%s/rootfs.tar.gz", top);
        struct archive *a = tt_archive_open(path, TT_GZIP);
        tt_dir(a, "etc", 0755);
        tt_file(a, "etc/passwd", "root:x:0:0:root:/root:/bin/sh\n", 0644);
        tt_file(a, "etc/group", "root:x:0:\n", 0644);
        tt_dir(a, "root", 0700);
        tt_file(a, "hello.txt", "hello from an uploaded tarball\n", 0644);
        have_busybox = access("/bin/busybox", X_OK) == 0;
        if (have_busybox) {
                _cleanup_buf_ sp_buf bb = SP_BUF_INIT;
                read_whole("/bin/busybox", &bb);
                tt_dir(a, "bin", 0755);
                add_bytes(a, "bin/busybox", bb.data, bb.len, 0755);
                tt_symlink(a, "bin/sh", "busybox");
                tt_symlink(a, "bin/cat", "busybox");
        }
        /* Incompressible bytes, so that the archive takes many frames. */
        size_t n = 3u << 20;
        _cleanup_free_ unsigned char *noise = malloc(n);
        uint64_t x = 0x9e3779b97f4a7c15u;
        for (size_t i = 0; i < n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                noise[i] = (unsigned char)x;
        }
        add_bytes(a, "noise.bin", noise, n, 0644);
        tt_archive_close(a);
        read_whole(path, &tarball);
}

/* Blobs of the OCI layout, in memory: name (sha256 hex) and bytes. */
typedef struct {
        char digest[WK_TEMPLATE_DIGEST_MAX];
        sp_buf data;
} blob;

static void blob_set(blob *b, const void *p, size_t n)
{
        sp_buf_append(&b->data, p, n, NULL);
        ck_assert_int_eq(wk__tpl_sha256(p, n, b->digest, NULL), 0);
}

/* Into *out: a tar (compressed with f) of an OCI image layout with one
 * layer, the file at layer_path (of media type layer_type), a config with Env
 * and WorkingDir, its manifest and index.json. */
static void oci_archive_of(const char *layer_path, const char *layer_type, enum tt_filter f, sp_buf *out)
{
        char path[700];
        blob layer = {0}, config = {0}, manifest = {0};
        _cleanup_buf_ sp_buf lb = SP_BUF_INIT, text = SP_BUF_INIT;
        read_whole(layer_path, &lb);
        blob_set(&layer, lb.data, lb.len);
        sp_buf_free(&lb);
        const char *cfg = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/bin\","
                          "\"GREETING=uploaded\"],\"WorkingDir\":\"/srv\"}}";
        blob_set(&config, cfg, strlen(cfg));
        sp_buf_appendf(&text, NULL,
                       "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                       "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"%s\","
                       "\"size\":%zu},\"layers\":[{\"mediaType\":\"%s\","
                       "\"digest\":\"%s\",\"size\":%zu}]}",
                       config.digest, config.data.len, layer_type, layer.digest, layer.data.len);
        blob_set(&manifest, text.data, text.len);
        sp_buf_clear(&text);
        sp_buf_appendf(
                &text, NULL,
                "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
                "\"digest\":\"%s\",\"size\":%zu}]}",
                manifest.digest, manifest.data.len);

        snprintf(path, sizeof(path), "%s/image.tar", top);
        struct archive *a = tt_archive_open(path, f);
        tt_file(a, "oci-layout", "{\"imageLayoutVersion\":\"1.0.0\"}", 0644);
        tt_file(a, "index.json", text.data, 0644);
        tt_dir(a, "blobs", 0755);
        tt_dir(a, "blobs/sha256", 0755);
        blob *all[] = {&layer, &config, &manifest};
        for (size_t i = 0; i < 3; i++) {
                char name[128];
                snprintf(name, sizeof(name), "blobs/sha256/%s", all[i]->digest + 7);
                add_bytes(a, name, all[i]->data.data, all[i]->data.len, 0644);
                sp_buf_free(&all[i]->data);
        }
        tt_archive_close(a);
        read_whole(path, out);
        unlink(path);
}

/* An OCI archive with one gzip layer of /etc/greeting. */
static void make_oci_archive(void)
{
        char path[700];
        snprintf(path, sizeof(path), "%s/layer.tar.gz", top);
        struct archive *a = tt_archive_open(path, TT_GZIP);
        tt_dir(a, "etc", 0755);
        tt_file(a, "etc/greeting", "hello from an OCI layer\n", 0644);
        tt_dir(a, "srv", 0755);
        tt_archive_close(a);
        oci_archive_of(path, "application/vnd.oci.image.layer.v1.tar+gzip", TT_PLAIN, &oci_archive);
}

/* A small zstd OCI archive whose one layer is a tar (compressed with f) of a
 * file of `bytes` zeros. Uncompressed, unpacking it takes the layer's size
 * twice, once for the layout's copy and once for the template. */
static void make_big_oci_archive(uint64_t bytes, enum tt_filter f, sp_buf *out)
{
        char path[700];
        snprintf(path, sizeof(path), "%s/big-layer.tar", top);
        struct archive *a = tt_archive_open(path, f);
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, "big.bin");
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0644);
        archive_entry_set_size(e, (la_int64_t)bytes);
        ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
        archive_entry_free(e);
        static char zeros[1 << 20];
        for (uint64_t left = bytes; left;) {
                size_t n = left < sizeof(zeros) ? (size_t)left : sizeof(zeros);
                ck_assert_int_eq(archive_write_data(a, zeros, n), (la_ssize_t)n);
                left -= n;
        }
        tt_archive_close(a);
        oci_archive_of(path,
                       f == TT_ZSTD ? "application/vnd.oci.image.layer.v1.tar+zstd"
                                    : "application/vnd.oci.image.layer.v1.tar",
                       TT_ZSTD, out);
        unlink(path);
}

static void case_setup(void)
{
        top = sp_test_tmpdir("upload");
        snprintf(cgparent, sizeof(cgparent), "space-upload-%d", (int)getpid());
        sp_error *e = NULL;
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        sp_test_ok(sp_pki_ca_create("space-test-ca", 30, &ca, &e), &e);
        ca_pem = sp_pki_ca_cert_pem(ca, &e);
        ck_assert_ptr_nonnull(ca_pem);
        _cleanup_free_ char *wc = NULL, *wkey = NULL;
        issue(ca, SP_ROLE_WORKER, "worker-test", &wc, &wkey);
        issue(ca, SP_ROLE_CONTROLPLANE, "controlplane", &cp_cert, &cp_key);
        issue(ca, SP_ROLE_DATAPLANE, "dataplane", &dp_cert, &dp_key);
        save("ca.pem", ca_pem, false);
        save("worker.crt", wc, false);
        save("worker.key", wkey, true);
        make_tarball();
        make_oci_archive();
}

/* Kills what sandboxes left (they outlive the worker) and unmounts the storage. */
static void case_teardown(void)
{
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] || continue; "
                 "for p in $(cat $d/*/cgroup.procs 2>/dev/null); do kill -9 $p 2>/dev/null; done; done; "
                 "sleep 0.3; for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] && "
                 "rmdir $d/* $d 2>/dev/null; done; for m in $(awk '$5 ~ \"^%s/\" {print $5}' /proc/self/mountinfo "
                 "| sort -r); do umount -l $m; done; true",
                 cgparent, cgparent, cgparent, cgparent, top);
        if (system(cmd) != 0)
                fprintf(stderr, "upload test: the cleanup script failed\n");
        sp_test_tmpdir_remove(top);
        free(top);
        free(ca_pem);
        free(cp_cert);
        free(cp_key);
        free(dp_cert);
        free(dp_key);
        sp_buf_free(&tarball);
        sp_buf_free(&oci_archive);
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
                           "\"heartbeat_ms\":600000}";
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

/* The heartbeat at index i (a new reference), waiting up to timeout_ms for it. */
static json_object *beat_wait(size_t i, int64_t timeout_ms)
{
        int64_t until = sp_now_mono_us() + timeout_ms * 1000;
        while (beats_count() <= i && sp_now_mono_us() < until)
                usleep(20000);
        pthread_mutex_lock(&cp.lock);
        json_object *b =
                json_object_array_length(cp.beats) > i ? json_object_get(json_object_array_get_idx(cp.beats, i)) : NULL;
        pthread_mutex_unlock(&cp.lock);
        return b;
}

/* ---- per test (forked): a fresh worker ---- */

static char *dir;
static char addr[64];
static sp_test_proc worker;
static SSL_CTX *cp_ctx, *dp_ctx;

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

/* The worker's pool and per-template bound (a smaller pool for the free-space case). */
static const char *pool_size = "--storage-size=2G", *tpl_max = "--template-max-bytes=64M";

static void start_worker(void)
{
        char bin[1024], state[700], storage[700], image[700], logp[700], ca[700], cert[700], key[700], listen[80],
                cg[128], cpl[80], root[700];
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
        snprintf(root, sizeof(root), "--template-import-root=%s/import", dir);
        const char *argv[] = {bin,
                              state,
                              storage,
                              image,
                              pool_size,
                              ca,
                              cert,
                              key,
                              listen,
                              "--http-listen=",
                              cg,
                              cpl,
                              "--node-id=worker-test",
                              root,
                              tpl_max,
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
        ck_assert_int_eq(mkdir(at("import"), 0700), 0);
        sp_error *e = NULL;
        int port = sp_test_free_port(&e);
        sp_test_ok(port > 0 ? 0 : -1, &e);
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        cp_ctx = client_ctx(cp_cert, cp_key);
        dp_ctx = client_ctx(dp_cert, dp_key);
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

static int64_t int_field(json_object *o, const char *name)
{
        json_object *v;
        return o && json_object_object_get_ex(o, name, &v) ? json_object_get_int64(v) : -1;
}

typedef struct {
        struct event_base *base;
        sp_rpc_stream *stream;
        bool ended;
        json_object *trailer;
        sp_error *error;
        sp_buf data; /* DATA frames from the server */
        sp_buf out; /* AttachSession: the command's output */
        json_object *exit_event;
        bool output; /* DATA frames are output with a stream byte and an offset */
} stream_state;

static void st_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)s;
        stream_state *st = ud;
        if (type == SP_RPC_FRAME_DATA && st->output) {
                ck_assert_uint_ge(n, 9);
                sp_buf_append(&st->out, p + 9, n - 9, NULL);
        } else if (type == SP_RPC_FRAME_DATA) {
                sp_buf_append(&st->data, p, n, NULL);
        } else if (type == SP_RPC_FRAME_JSON) {
                json_object *o = NULL;
                if (sp_json_parse((const char *)p, n, &o, NULL) == 0 && field(o, "event") &&
                    strcmp(field(o, "event"), "exit") == 0 && !st->exit_event)
                        st->exit_event = o;
                else
                        json_object_put(o);
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

static void stream_free(stream_state *st)
{
        sp_buf_free(&st->data);
        sp_buf_free(&st->out);
        if (st->trailer)
                json_object_put(st->trailer);
        if (st->exit_event)
                json_object_put(st->exit_event);
        sp_error_free(st->error);
        memset(st, 0, sizeof(*st));
}

/* Sends len bytes of data as DATA frames of at most chunk bytes, with the
 * stream's flow control; stops early when the stream ends. */
static void send_all(stream_state *st, const void *data, size_t len, size_t chunk)
{
        size_t off = 0;
        while (off < len && !st->ended) {
                size_t n = len - off > chunk ? chunk : len - off;
                sp_error *e = NULL;
                int r = sp_rpc_stream_send(st->stream, SP_RPC_FRAME_DATA, (const char *)data + off, n, &e);
                if (r < 0) {
                        sp_error_free(e);
                        event_base_loop(st->base, EVLOOP_ONCE);
                        continue;
                }
                off += n;
                while (r == 1 && !st->ended && st->stream &&
                       sp_rpc_stream_queued(st->stream) > SP_RPC_SEND_HIGH_WATERMARK / 2)
                        event_base_loop(st->base, EVLOOP_ONCE);
        }
}

/* Runs a streaming call to its end: data (may be NULL: then the client does
 * not half-close) goes first as DATA frames of chunk bytes. */
static void run_stream(SSL_CTX *ctx, const char *method, const char *req_json, const void *data, size_t len,
                       size_t chunk, stream_state *st)
{
        st->base = event_base_new();
        sp_error *e = NULL;
        sp_rpc_client *cli = sp_rpc_client_new(st->base, addr, ctx, &e);
        sp_test_ok(cli ? 0 : -1, &e);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_int_eq(sp_json_parse(req_json, strlen(req_json), &req, NULL), 0);
        static const sp_rpc_stream_ops ops = {.on_frame = st_frame, .on_end = st_end};
        st->stream = sp_rpc_client_stream(cli, method, req, 120000, &ops, st, &e);
        sp_test_ok(st->stream ? 0 : -1, &e);
        if (data) {
                send_all(st, data, len, chunk);
                if (st->stream)
                        sp_rpc_stream_close_send(st->stream, NULL);
        }
        while (!st->ended)
                event_base_dispatch(st->base);
        sp_rpc_client_free(cli);
        event_base_free(st->base);
        st->base = NULL;
}

static void upload(SSL_CTX *ctx, const char *name, const char *format, const char *extra, const sp_buf *archive,
                   size_t chunk, stream_state *st)
{
        char req[512];
        snprintf(req, sizeof(req), "{\"name\":\"%s\",\"format\":\"%s\"%s}", name, format, extra ? extra : "");
        run_stream(ctx, "UploadTemplate", req, archive->data ? archive->data : "", archive->len, chunk, st);
}

/* The Template of name from ListTemplates (a new reference), or NULL. */
static json_object *listed(const char *name)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *all = call(cp_ctx, "ListTemplates", &e, "{}");
        ck_assert_msg(all, "ListTemplates: %s", e ? e->message : "?");
        json_object *arr = NULL;
        ck_assert(json_object_object_get_ex(all, "templates", &arr));
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                json_object *t = json_object_array_get_idx(arr, i);
                if (strcmp(field(t, "name"), name) == 0)
                        return json_object_get(t);
        }
        return NULL;
}

static int count_entries(const char *path)
{
        return tt_count_entries(path);
}

/* Nothing of an upload of name is left: no template, no files in artifacts/,
 * no template directory, no state. Waits a little: a cancelled call is
 * cleaned up when the worker sees the reset. */
static void assert_nothing_left(const char *name)
{
        int64_t until = sp_now_mono_us() + 10 * 1000000;
        while (count_entries(at("storage/artifacts")) != 0 && sp_now_mono_us() < until)
                usleep(20000);
        ck_assert_msg(count_entries(at("storage/artifacts")) == 0, "artifacts/ still holds %d entries",
                      count_entries(at("storage/artifacts")));
        json_object *t = listed(name);
        ck_assert_msg(!t, "template %s is listed", name);
        char p[256];
        snprintf(p, sizeof(p), "storage/templates/%s", name);
        ck_assert_int_eq(access(at(p), F_OK), -1);
        snprintf(p, sizeof(p), "state/templates/%s.json", name);
        ck_assert_int_eq(access(at(p), F_OK), -1);
}

static void sha256_of(const void *p, size_t n, char out[WK_TEMPLATE_DIGEST_MAX])
{
        ck_assert_int_eq(wk__tpl_sha256(p, n, out, NULL), 0);
}

/* ReadTemplateArtifact as the control plane. */
static void read_artifact(SSL_CTX *ctx, const char *name, stream_state *st)
{
        char req[256];
        snprintf(req, sizeof(req), "{\"name\":\"%s\"}", name);
        run_stream(ctx, "ReadTemplateArtifact", req, NULL, 0, 0, st);
}

/* Runs sh -c script in a sandbox; returns its output. */
static char *sandbox_sh(const char *sandbox, const char *session, const char *script)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *r =
                call(cp_ctx, "Exec", &e,
                     "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":[\"/bin/sh\",\"-c\",\"%s\"]}", sandbox,
                     session, script);
        ck_assert_msg(r, "Exec: %s", e ? e->message : "?");
        stream_state st = {.output = true};
        char req[256];
        snprintf(req, sizeof(req), "{\"session_id\":\"%s\",\"offset\":0}", session);
        run_stream(cp_ctx, "AttachSession", req, NULL, 0, 0, &st);
        ck_assert_msg(!st.error, "attach: %s", st.error ? st.error->message : "");
        char *out = st.out.data ? strndup(st.out.data, st.out.len) : strdup("");
        stream_free(&st);
        return out;
}

/* ---- tests ---- */

START_TEST(tarball_upload_runs_in_a_sandbox)
{
        stream_state st = {0};
        upload(cp_ctx, "tpl_tar", "tar", NULL, &tarball, 100000, &st);
        ck_assert_msg(!st.error, "UploadTemplate: %s", st.error ? st.error->message : "");
        ck_assert_int_eq(int_field(st.trailer, "bytes"), (int64_t)tarball.len);
        json_object *t = NULL;
        ck_assert(json_object_object_get_ex(st.trailer, "template", &t));
        char digest[WK_TEMPLATE_DIGEST_MAX];
        sha256_of(tarball.data, tarball.len, digest);
        ck_assert_str_eq(field(t, "name"), "tpl_tar");
        ck_assert_str_eq(field(t, "source"), "tar");
        ck_assert_str_eq(field(t, "format"), "tar");
        ck_assert_str_eq(field(t, "digest"), digest);
        ck_assert_int_eq(int_field(t, "artifact_bytes"), (int64_t)tarball.len);
        stream_free(&st);

        _cleanup_json_ json_object *l = listed("tpl_tar");
        ck_assert_ptr_nonnull(l);
        ck_assert_str_eq(field(l, "digest"), digest);
        ck_assert_str_eq(field(l, "format"), "tar");
        ck_assert_int_eq(int_field(l, "artifact_bytes"), (int64_t)tarball.len);
        /* the artifact is the upload, byte for byte; no partial file is left */
        _cleanup_buf_ sp_buf kept = SP_BUF_INIT;
        read_whole(at("storage/artifacts/tpl_tar"), &kept);
        ck_assert_uint_eq(kept.len, tarball.len);
        ck_assert(memcmp(kept.data, tarball.data, kept.len) == 0);
        ck_assert_int_eq(count_entries(at("storage/artifacts")), 1);

        /* a sandbox made from it sees the tarball's files */
        sp_error *e = NULL;
        _cleanup_json_ json_object *sb =
                call(cp_ctx, "CreateSandbox", &e, "{\"id\":\"sbx_test00000000000000a1\",\"template\":\"tpl_tar\"}");
        ck_assert_msg(sb, "CreateSandbox: %s", e ? e->message : "?");
        ck_assert_str_eq(field(sb, "state"), "running");
        if (have_busybox) {
                char *out = sandbox_sh("sbx_test00000000000000a1", "ses_test00000000000000a1", "cat /hello.txt");
                ck_assert_str_eq(out, "hello from an uploaded tarball\n");
                free(out);
        } else {
                fprintf(stderr, "NOTE: no /bin/busybox: the sandbox from the upload runs no command\n");
        }
        /* the template is in use: it stays, and so does its artifact */
        e = NULL;
        ck_assert_ptr_null(call(cp_ctx, "DeleteTemplate", &e, "{\"name\":\"tpl_tar\"}"));
        ck_assert_int_eq(e->code, SP_E_CONFLICT);
        sp_error_free(e);
        e = NULL;
        _cleanup_json_ json_object *d = call(cp_ctx, "DeleteSandbox", &e, "{\"id\":\"sbx_test00000000000000a1\"}");
        ck_assert_msg(d, "DeleteSandbox: %s", e ? e->message : "?");
        e = NULL;
        _cleanup_json_ json_object *dt = call(cp_ctx, "DeleteTemplate", &e, "{\"name\":\"tpl_tar\"}");
        ck_assert_msg(dt, "DeleteTemplate: %s", e ? e->message : "?");
        assert_nothing_left("tpl_tar");
}
END_TEST

START_TEST(oci_archive_upload_takes_the_image_config)
{
        stream_state st = {0};
        upload(cp_ctx, "tpl_oci", "oci", NULL, &oci_archive, 7000, &st);
        ck_assert_msg(!st.error, "UploadTemplate: %s", st.error ? st.error->message : "");
        json_object *t = NULL;
        ck_assert(json_object_object_get_ex(st.trailer, "template", &t));
        ck_assert_str_eq(field(t, "source"), "oci");
        ck_assert_str_eq(field(t, "format"), "oci");
        ck_assert_str_eq(field(t, "workdir"), "/srv");
        ck_assert_int_eq(int_field(t, "artifact_bytes"), (int64_t)oci_archive.len);
        ck_assert_int_eq(int_field(st.trailer, "bytes"), (int64_t)oci_archive.len);
        ck_assert_msg(strncmp(field(t, "digest"), "sha256:", 7) == 0, "digest %s", field(t, "digest"));
        stream_free(&st);
        /* the layer's files, the config's environment; the scratch directory is gone */
        char *greeting = tt_read(at("storage/templates/tpl_oci/rootfs/etc/greeting"));
        ck_assert_str_eq(greeting, "hello from an OCI layer\n");
        free(greeting);
        _cleanup_buf_ sp_buf meta = SP_BUF_INIT;
        read_whole(at("state/templates/tpl_oci.json"), &meta);
        ck_assert_msg(strstr(meta.data, "GREETING=uploaded"), "%s", meta.data);
        ck_assert_int_eq(count_entries(at("storage/artifacts")), 1);
        ck_assert_int_eq(access(at("storage/artifacts/tpl_oci"), F_OK), 0);

        /* ReadTemplateArtifact gives the archive back, with its format */
        read_artifact(cp_ctx, "tpl_oci", &st);
        ck_assert_msg(!st.error, "ReadTemplateArtifact: %s", st.error ? st.error->message : "");
        char want[WK_TEMPLATE_DIGEST_MAX], got[WK_TEMPLATE_DIGEST_MAX];
        sha256_of(oci_archive.data, oci_archive.len, want);
        sha256_of(st.data.data ? st.data.data : "", st.data.len, got);
        ck_assert_str_eq(got, want);
        ck_assert_str_eq(field(st.trailer, "format"), "oci");
        ck_assert_int_eq(int_field(st.trailer, "bytes"), (int64_t)oci_archive.len);
        stream_free(&st);
}
END_TEST

START_TEST(failed_uploads_leave_nothing)
{
        /* past max_bytes */
        stream_state st = {0};
        upload(cp_ctx, "tpl_big", "tar", ",\"max_bytes\":100000", &tarball, 65536, &st);
        ck_assert_ptr_nonnull(st.error);
        ck_assert_msg(st.error->code == SP_E_TOO_LARGE, "%s", st.error->message);
        ck_assert_msg(strstr(st.error->message, "the upload is larger than its 100000 bytes"), "%s", st.error->message);
        stream_free(&st);
        assert_nothing_left("tpl_big");

        /* past max_stored_bytes: the archive fits, the files unpacked from it do not */
        char extra[96];
        snprintf(extra, sizeof(extra), ",\"max_stored_bytes\":%zu", tarball.len + 1000);
        upload(cp_ctx, "tpl_big", "tar", extra, &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_TOO_LARGE, "%s", st.error ? st.error->message : "accepted");
        ck_assert_msg(strstr(st.error->message, "bytes left of the tenant's template storage"), "%s",
                      st.error->message);
        stream_free(&st);
        assert_nothing_left("tpl_big");

        /* max_bytes beyond the worker's --template-max-bytes */
        upload(cp_ctx, "tpl_big", "tar", ",\"max_bytes\":1000000000", &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_INVALID, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        /* past --template-max-bytes (64M) without max_bytes */
        sp_buf huge = SP_BUF_INIT;
        ck_assert_int_eq(sp_buf_reserve(&huge, (65u << 20) + 1, NULL), 0);
        memset(huge.data, 'x', 65u << 20);
        huge.len = 65u << 20;
        upload(cp_ctx, "tpl_big", "tar", NULL, &huge, 1u << 20, &st);
        sp_buf_free(&huge);
        ck_assert_msg(st.error && st.error->code == SP_E_TOO_LARGE, "%s", st.error ? st.error->message : "accepted");
        ck_assert_msg(strstr(st.error->message, "larger than its 67108864 bytes"), "%s", st.error->message);
        stream_free(&st);
        assert_nothing_left("tpl_big");

        /* malformed archives, in both formats */
        sp_buf junk = SP_BUF_INIT;
        for (int i = 0; i < 300000; i++)
                sp_buf_appendf(&junk, NULL, "%c", 'a' + i % 23);
        const char *formats[] = {"tar", "oci"};
        for (int i = 0; i < 2; i++) {
                upload(cp_ctx, "tpl_junk", formats[i], NULL, &junk, 65536, &st);
                ck_assert_msg(st.error && st.error->code == SP_E_INVALID, "%s: %s", formats[i],
                              st.error ? st.error->message : "accepted");
                stream_free(&st);
                assert_nothing_left("tpl_junk");
        }
        sp_buf_free(&junk);
        /* a tarball that is not an OCI layout */
        upload(cp_ctx, "tpl_junk", "oci", NULL, &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_INVALID, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        assert_nothing_left("tpl_junk");

        /* bad requests */
        upload(cp_ctx, "tpl_x", "zip", NULL, &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_INVALID, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        upload(cp_ctx, "tpl_x", "tar", ",\"path\":\"/etc\"", &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_INVALID && strstr(st.error->message, "path"), "%s",
                      st.error ? st.error->message : "accepted");
        stream_free(&st);
        upload(cp_ctx, "../x", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_INVALID, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        upload(cp_ctx, "tpl_x.part", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_INVALID, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        assert_nothing_left("tpl_x");
}
END_TEST

START_TEST(cancelled_upload_leaves_nothing)
{
        stream_state st = {.base = event_base_new()};
        sp_error *e = NULL;
        sp_rpc_client *cli = sp_rpc_client_new(st.base, addr, cp_ctx, &e);
        sp_test_ok(cli ? 0 : -1, &e);
        _cleanup_json_ json_object *req = NULL;
        const char *text = "{\"name\":\"tpl_cancel\",\"format\":\"tar\"}";
        ck_assert_int_eq(sp_json_parse(text, strlen(text), &req, NULL), 0);
        static const sp_rpc_stream_ops ops = {.on_frame = st_frame, .on_end = st_end};
        st.stream = sp_rpc_client_stream(cli, "UploadTemplate", req, 120000, &ops, &st, &e);
        sp_test_ok(st.stream ? 0 : -1, &e);
        size_t half = tarball.len / 2;
        send_all(&st, tarball.data, half, 65536);
        ck_assert(!st.ended);
        /* once the worker has written the first half, the client goes away */
        struct stat s = {0};
        int64_t until = sp_now_mono_us() + 20 * 1000000;
        while ((stat(at("storage/artifacts/tpl_cancel.part"), &s) < 0 || (size_t)s.st_size < half) &&
               sp_now_mono_us() < until)
                event_base_loop(st.base, EVLOOP_NONBLOCK), usleep(5000);
        ck_assert_uint_eq((size_t)s.st_size, half);
        sp_rpc_stream_cancel(st.stream);
        st.stream = NULL;
        for (int i = 0; i < 20; i++)
                event_base_loop(st.base, EVLOOP_NONBLOCK);
        sp_rpc_client_free(cli);
        event_base_free(st.base);
        st.base = NULL;
        stream_free(&st);
        assert_nothing_left("tpl_cancel");
        _cleanup_free_ char *log = sp_test_file_tail(at("worker.log"), 50);
        ck_assert_msg(strstr(log, "template upload abandoned"), "%s", log);

        /* the name is free again */
        upload(cp_ctx, "tpl_cancel", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(!st.error, "UploadTemplate: %s", st.error ? st.error->message : "");
        stream_free(&st);
}
END_TEST

START_TEST(conflicts_and_artifacts)
{
        stream_state st = {0};
        upload(cp_ctx, "tpl_one", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(!st.error, "UploadTemplate: %s", st.error ? st.error->message : "");
        stream_free(&st);
        /* a name the worker has: conflict, and the artifact is untouched */
        upload(cp_ctx, "tpl_one", "oci", NULL, &oci_archive, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_CONFLICT, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        read_artifact(cp_ctx, "tpl_one", &st);
        ck_assert_msg(!st.error, "ReadTemplateArtifact: %s", st.error ? st.error->message : "");
        char want[WK_TEMPLATE_DIGEST_MAX], got[WK_TEMPLATE_DIGEST_MAX];
        sha256_of(tarball.data, tarball.len, want);
        sha256_of(st.data.data, st.data.len, got);
        ck_assert_str_eq(got, want);
        ck_assert_str_eq(field(st.trailer, "format"), "tar");
        ck_assert_int_eq(int_field(st.trailer, "bytes"), (int64_t)tarball.len);
        stream_free(&st);

        /* a template imported from a path has no artifact; nor has a missing one */
        char p[700];
        snprintf(p, sizeof(p), "%s/import/rootfs.tar.gz", dir);
        sp_error *e = NULL;
        sp_test_ok(sp_file_write_atomic(p, tarball.data, tarball.len, 0600, &e), &e);
        run_stream(cp_ctx, "ImportTemplate", "{\"name\":\"tpl_path\",\"source\":\"tar\",\"path\":\"rootfs.tar.gz\"}",
                   NULL, 0, 0, &st);
        ck_assert_msg(!st.error, "ImportTemplate: %s", st.error ? st.error->message : "");
        json_object *t = NULL;
        ck_assert(json_object_object_get_ex(st.trailer, "template", &t));
        ck_assert_ptr_null(field(t, "format"));
        ck_assert_int_eq(int_field(t, "artifact_bytes"), -1);
        stream_free(&st);
        const char *missing[] = {"tpl_path", "tpl_none"};
        for (int i = 0; i < 2; i++) {
                read_artifact(cp_ctx, missing[i], &st);
                ck_assert_msg(st.error && st.error->code == SP_E_NOT_FOUND, "%s: %s", missing[i],
                              st.error ? st.error->message : "found");
                stream_free(&st);
        }
        /* an upload may not take the name of a path-imported template either */
        upload(cp_ctx, "tpl_path", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(st.error && st.error->code == SP_E_CONFLICT, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);

        /* DeleteTemplate takes the artifact with it */
        _cleanup_json_ json_object *d = call(cp_ctx, "DeleteTemplate", &e, "{\"name\":\"tpl_one\"}");
        ck_assert_msg(d, "DeleteTemplate: %s", e ? e->message : "?");
        ck_assert_int_eq(access(at("storage/artifacts/tpl_one"), F_OK), -1);
        read_artifact(cp_ctx, "tpl_one", &st);
        ck_assert_msg(st.error && st.error->code == SP_E_NOT_FOUND, "%s", st.error ? st.error->message : "found");
        stream_free(&st);
        ck_assert_int_eq(count_entries(at("storage/artifacts")), 0);
}
END_TEST

START_TEST(restart_keeps_the_artifact_and_sweeps_stale_files)
{
        stream_state st = {0};
        upload(cp_ctx, "tpl_keep", "oci", NULL, &oci_archive, 65536, &st);
        ck_assert_msg(!st.error, "UploadTemplate: %s", st.error ? st.error->message : "");
        stream_free(&st);
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_stop(&worker, 10000, &e), &e);
        /* what a crash mid-upload leaves: a partial file, a scratch directory,
         * an artifact whose template was never recorded */
        tt_write(at("storage/artifacts/tpl_crashed.part"), "partial", 0600);
        ck_assert_int_eq(mkdir(at("storage/artifacts/tpl_crashed.unpack"), 0700), 0);
        ck_assert_int_eq(mkdir(at("storage/artifacts/tpl_crashed.unpack/blobs"), 0700), 0);
        tt_write(at("storage/artifacts/tpl_crashed.unpack/blobs/x"), "x", 0600);
        tt_write(at("storage/artifacts/tpl_orphan"), "orphan", 0600);
        sp_test_ok(sp_test_proc_restart(&worker, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);

        ck_assert_int_eq(count_entries(at("storage/artifacts")), 1);
        _cleanup_json_ json_object *t = listed("tpl_keep");
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(field(t, "format"), "oci");
        ck_assert_int_eq(int_field(t, "artifact_bytes"), (int64_t)oci_archive.len);
        read_artifact(cp_ctx, "tpl_keep", &st);
        ck_assert_msg(!st.error, "ReadTemplateArtifact: %s", st.error ? st.error->message : "");
        ck_assert_uint_eq(st.data.len, oci_archive.len);
        ck_assert(memcmp(st.data.data, oci_archive.data, st.data.len) == 0);
        ck_assert_str_eq(field(st.trailer, "format"), "oci");
        stream_free(&st);
}
END_TEST

START_TEST(dataplane_may_upload_only)
{
        stream_state st = {0};
        upload(dp_ctx, "tpl_dp", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(!st.error, "UploadTemplate as the data plane: %s", st.error ? st.error->message : "");
        stream_free(&st);
        run_stream(dp_ctx, "ImportTemplate", "{\"name\":\"tpl_dp2\",\"source\":\"tar\",\"path\":\"x.tar\"}", NULL, 0, 0,
                   &st);
        ck_assert_msg(st.error && st.error->code == SP_E_PERMISSION, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        read_artifact(dp_ctx, "tpl_dp", &st);
        ck_assert_msg(st.error && st.error->code == SP_E_PERMISSION, "%s", st.error ? st.error->message : "accepted");
        stream_free(&st);
        sp_error *e = NULL;
        ck_assert_ptr_null(call(dp_ctx, "DeleteTemplate", &e, "{\"name\":\"tpl_dp\"}"));
        ck_assert_int_eq(e->code, SP_E_PERMISSION);
        sp_error_free(e);
        _cleanup_json_ json_object *t = listed("tpl_dp");
        ck_assert_ptr_nonnull(t);
}
END_TEST

START_TEST(template_changes_send_a_heartbeat_at_once)
{
        /* the first heartbeat at start; the fake control plane then asks for one every 10 minutes */
        _cleanup_json_ json_object *first = beat_wait(0, 20000);
        ck_assert_ptr_nonnull(first);
        json_object *a = NULL;
        ck_assert(!json_object_object_get_ex(first, "artifacts", &a));
        size_t n = beats_count();

        stream_state st = {0};
        upload(cp_ctx, "tpl_beat", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(!st.error, "UploadTemplate: %s", st.error ? st.error->message : "");
        stream_free(&st);
        _cleanup_json_ json_object *after_upload = beat_wait(n, 5000);
        ck_assert_msg(after_upload, "no heartbeat after the upload");
        ck_assert(json_object_object_get_ex(after_upload, "artifacts", &a));
        ck_assert_int_eq(int_field(a, "tpl_beat"), (int64_t)tarball.len);
        /* what its files hold, as the template says it */
        json_object *sizes = NULL;
        ck_assert(json_object_object_get_ex(after_upload, "template_bytes", &sizes));
        _cleanup_json_ json_object *t = listed("tpl_beat");
        ck_assert_ptr_nonnull(t);
        ck_assert_int_gt(int_field(sizes, "tpl_beat"), 3 << 20);
        ck_assert_int_eq(int_field(sizes, "tpl_beat"), int_field(t, "bytes"));
        json_object *names = NULL;
        ck_assert(json_object_object_get_ex(after_upload, "templates", &names));
        ck_assert_int_eq(json_object_array_length(names), 1);

        sp_error *e = NULL;
        _cleanup_json_ json_object *d = call(cp_ctx, "DeleteTemplate", &e, "{\"name\":\"tpl_beat\"}");
        ck_assert_msg(d, "DeleteTemplate: %s", e ? e->message : "?");
        _cleanup_json_ json_object *after_delete = beat_wait(n + 1, 5000);
        ck_assert_msg(after_delete, "no heartbeat after the delete");
        ck_assert(!json_object_object_get_ex(after_delete, "artifacts", &a));
        ck_assert(json_object_object_get_ex(after_delete, "templates", &names));
        ck_assert_int_eq(json_object_array_length(names), 0);
}
END_TEST

/* An archive larger than the pool's free space (less its reserve) stops
 * there, before the pool is full, and leaves nothing; a small one still fits. */
START_TEST(uploads_stop_short_of_the_pool)
{
        sp_buf big = SP_BUF_INIT;
        ck_assert_int_eq(sp_buf_reserve(&big, 300u << 20, NULL), 0);
        memset(big.data, 'x', 300u << 20);
        big.len = 300u << 20;
        stream_state st = {0};
        upload(cp_ctx, "tpl_pool", "tar", NULL, &big, 1u << 20, &st);
        sp_buf_free(&big);
        ck_assert_msg(st.error && st.error->code == SP_E_TOO_LARGE, "%s", st.error ? st.error->message : "accepted");
        ck_assert_msg(strstr(st.error->message, "the worker's free storage"), "%s", st.error->message);
        stream_free(&st);
        assert_nothing_left("tpl_pool");
        upload(cp_ctx, "tpl_small", "tar", NULL, &tarball, 65536, &st);
        ck_assert_msg(!st.error, "%s", st.error ? st.error->message : "");
        stream_free(&st);
}
END_TEST

/* Samples the pool's free space (written out first, as the worker's checks
 * do) until stopped; keeps the least seen. */
static struct {
        pthread_t thread;
        atomic_bool stop;
        uint64_t least;
} sampler;

static void *sample_main(void *arg)
{
        (void)arg;
        int fd = open(at("storage"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        while (!atomic_load(&sampler.stop)) {
                struct statvfs v;
                if (syncfs(fd) == 0 && fstatvfs(fd, &v) == 0) {
                        uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize;
                        if (avail < sampler.least)
                                sampler.least = avail;
                }
                usleep(10000);
        }
        close(fd);
        return NULL;
}

/* The pool's free space less the worker's reserve (--storage-reserve, 1G by
 * default, at most a tenth of the pool), and the reserve. */
static uint64_t pool_room(uint64_t *ret_reserve)
{
        struct statvfs v;
        ck_assert_int_eq(statvfs(at("storage"), &v), 0);
        uint64_t avail = (uint64_t)v.f_bavail * v.f_frsize, reserve = (uint64_t)v.f_blocks * v.f_frsize / 10;
        if (reserve > (UINT64_C(1) << 30))
                reserve = UINT64_C(1) << 30;
        *ret_reserve = reserve;
        return avail > reserve ? avail - reserve : 0;
}

/* An OCI layer that fits the pool's room once but not twice (its scratch copy
 * and the template): refused, and the pool never goes below the reserve while
 * the worker tries; one that fits twice is imported. */
START_TEST(oci_layers_leave_the_reserve_beside_their_scratch_copy)
{
        uint64_t reserve, room = pool_room(&reserve);
        ck_assert_uint_gt(room, 64u << 20);
        sp_buf big = SP_BUF_INIT;
        make_big_oci_archive(room / 10 * 6, TT_PLAIN, &big);
        ck_assert_uint_lt(big.len, room / 10); /* the archive itself is small */
        sampler.least = UINT64_MAX;
        atomic_store(&sampler.stop, false);
        ck_assert_int_eq(pthread_create(&sampler.thread, NULL, sample_main, NULL), 0);
        stream_state st = {0};
        upload(cp_ctx, "tpl_twice", "oci", NULL, &big, 1u << 20, &st);
        atomic_store(&sampler.stop, true);
        pthread_join(sampler.thread, NULL);
        sp_buf_free(&big);
        ck_assert_msg(sampler.least >= reserve, "the pool's free space went down to %llu bytes, below its %llu reserve",
                      (unsigned long long)sampler.least, (unsigned long long)reserve);
        ck_assert_msg(st.error && st.error->code == SP_E_TOO_LARGE, "%s", st.error ? st.error->message : "accepted");
        ck_assert_msg(strstr(st.error->message, "the worker's free storage"), "%s", st.error->message);
        stream_free(&st);
        assert_nothing_left("tpl_twice");

        room = pool_room(&reserve);
        make_big_oci_archive(room / 10 * 4, TT_PLAIN, &big);
        upload(cp_ctx, "tpl_fits", "oci", NULL, &big, 1u << 20, &st);
        sp_buf_free(&big);
        ck_assert_msg(!st.error, "%s", st.error ? st.error->message : "");
        stream_free(&st);
}
END_TEST

/* Starts an upload of data (half-closed when whole is set), without waiting for its end. */
static sp_rpc_client *upload_start(stream_state *st, const char *name, const char *format, const sp_buf *data,
                                   bool whole)
{
        st->base = event_base_new();
        sp_error *e = NULL;
        sp_rpc_client *cli = sp_rpc_client_new(st->base, addr, cp_ctx, &e);
        sp_test_ok(cli ? 0 : -1, &e);
        char text[256];
        snprintf(text, sizeof(text), "{\"name\":\"%s\",\"format\":\"%s\"}", name, format);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_int_eq(sp_json_parse(text, strlen(text), &req, NULL), 0);
        static const sp_rpc_stream_ops ops = {.on_frame = st_frame, .on_end = st_end};
        st->stream = sp_rpc_client_stream(cli, "UploadTemplate", req, 120000, &ops, st, &e);
        sp_test_ok(st->stream ? 0 : -1, &e);
        send_all(st, data->data, data->len, 1u << 20);
        if (whole && st->stream)
                sp_rpc_stream_close_send(st->stream, NULL);
        return cli;
}

static void upload_wait_end(stream_state *st, sp_rpc_client *cli)
{
        while (!st->ended)
                event_base_dispatch(st->base);
        sp_rpc_client_free(cli);
        event_base_free(st->base);
        st->base = NULL;
}

static off_t file_size(const char *rel)
{
        struct stat s;
        return stat(at(rel), &s) == 0 ? s.st_size : -1;
}

/* A template deleted while its archive comes in, or while it is imported:
 * the delete stops the upload or the import (answering once it has
 * stopped), and nothing of the template is left, nor grows again. */
START_TEST(deleting_mid_upload_or_import_stops_it)
{
        /* Mid-upload: the partial file goes at once, the upload fails at its next bytes. */
        stream_state st = {0};
        sp_buf half = {.data = tarball.data, .len = tarball.len / 2};
        sp_rpc_client *cli = upload_start(&st, "tpl_del", "tar", &half, false);
        int64_t until = sp_now_mono_us() + 20 * 1000000;
        while (file_size("storage/artifacts/tpl_del.part") < (off_t)half.len && sp_now_mono_us() < until)
                event_base_loop(st.base, EVLOOP_NONBLOCK), usleep(5000);
        ck_assert_int_eq(file_size("storage/artifacts/tpl_del.part"), (off_t)half.len);
        sp_error *e = NULL;
        _cleanup_json_ json_object *d1 = call(cp_ctx, "DeleteTemplate", &e, "{\"name\":\"tpl_del\"}");
        ck_assert_msg(d1, "DeleteTemplate mid-upload: %s", e ? e->message : "?");
        ck_assert_int_eq(file_size("storage/artifacts/tpl_del.part"), -1);
        sp_buf rest = {.data = tarball.data + half.len, .len = tarball.len - half.len};
        send_all(&st, rest.data, rest.len, 65536);
        if (st.stream)
                sp_rpc_stream_close_send(st.stream, NULL);
        upload_wait_end(&st, cli);
        ck_assert_msg(st.error && st.error->code == SP_E_NOT_FOUND, "%s", st.error ? st.error->message : "accepted");
        ck_assert_msg(strstr(st.error->message, "deleted"), "%s", st.error->message);
        stream_free(&st);
        assert_nothing_left("tpl_del");

        /* Mid-import: a layer of 768 MiB of zeros (a small archive), deleted
         * once its file is being written in the template. */
        sp_buf big = SP_BUF_INIT;
        make_big_oci_archive(768u << 20, TT_ZSTD, &big);
        cli = upload_start(&st, "tpl_del", "oci", &big, true);
        sp_buf_free(&big);
        const char *file = "storage/templates/tpl_del/rootfs/big.bin";
        until = sp_now_mono_us() + 60 * 1000000;
        while (file_size(file) <= 0 && !st.ended && sp_now_mono_us() < until)
                event_base_loop(st.base, EVLOOP_NONBLOCK), usleep(2000);
        ck_assert_msg(file_size(file) > 0 && !st.ended, "the import was not caught mid-way: %s",
                      st.error ? st.error->message : "it ended");
        int64_t t0 = sp_now_mono_us();
        _cleanup_json_ json_object *d2 = call(cp_ctx, "DeleteTemplate", &e, "{\"name\":\"tpl_del\"}");
        ck_assert_msg(d2, "DeleteTemplate mid-import: %s", e ? e->message : "?");
        ck_assert_msg(sp_now_mono_us() - t0 < 10 * 1000000, "the delete took %lld ms",
                      (long long)(sp_now_mono_us() - t0) / 1000);
        /* Answered once the import stopped: nothing of it left, at once. */
        ck_assert_int_eq(access(at("storage/templates/tpl_del"), F_OK), -1);
        ck_assert_int_eq(access(at("storage/artifacts/tpl_del.unpack"), F_OK), -1);
        ck_assert_int_eq(count_entries(at("storage/artifacts")), 0);
        upload_wait_end(&st, cli);
        ck_assert_msg(st.error && st.error->code == SP_E_NOT_FOUND, "%s", st.error ? st.error->message : "imported");
        ck_assert_msg(strstr(st.error->message, "deleted"), "%s", st.error->message);
        stream_free(&st);
        /* And it does not come back (nor grow) afterwards. */
        usleep(500000);
        assert_nothing_left("tpl_del");
        _cleanup_free_ char *log = sp_test_file_tail(at("worker.log"), 50);
        ck_assert_msg(strstr(log, "template deleted (its import stopped)"), "%s", log);
        ck_assert_msg(!strstr(log, "template ready"), "%s", log);
}
END_TEST

static void setup_large_templates(void)
{
        tpl_max = "--template-max-bytes=1G";
        setup();
}

static void setup_small_pool(void)
{
        pool_size = "--storage-size=256M";
        tpl_max = "--template-max-bytes=1G";
        setup();
}

int main(void)
{
        sp_test_require_root("btrfs, namespaces and cgroups");
        Suite *s = suite_create("worker_upload");
        TCase *tc = tcase_create("upload");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, tarball_upload_runs_in_a_sandbox);
        tcase_add_test(tc, oci_archive_upload_takes_the_image_config);
        tcase_add_test(tc, failed_uploads_leave_nothing);
        tcase_add_test(tc, cancelled_upload_leaves_nothing);
        tcase_add_test(tc, conflicts_and_artifacts);
        tcase_add_test(tc, restart_keeps_the_artifact_and_sweeps_stale_files);
        tcase_add_test(tc, dataplane_may_upload_only);
        tcase_add_test(tc, template_changes_send_a_heartbeat_at_once);
        suite_add_tcase(s, tc);
        TCase *small = tcase_create("small_pool");
        tcase_set_timeout(small, 300);
        tcase_add_unchecked_fixture(small, case_setup, case_teardown);
        tcase_add_checked_fixture(small, setup_small_pool, teardown);
        tcase_add_test(small, uploads_stop_short_of_the_pool);
        tcase_add_test(small, oci_layers_leave_the_reserve_beside_their_scratch_copy);
        suite_add_tcase(s, small);
        TCase *large = tcase_create("large_templates");
        tcase_set_timeout(large, 300);
        tcase_add_unchecked_fixture(large, case_setup, case_teardown);
        tcase_add_checked_fixture(large, setup_large_templates, teardown);
        tcase_add_test(large, deleting_mid_upload_or_import_stops_it);
        suite_add_tcase(s, large);
        return sp_test_main(s);
}
