/* SPDX-License-Identifier: Apache-2.0 */
#include "env.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/tls.h"

static void path_of(const dpt_env *e, const char *file, char out[static 600])
{
        snprintf(out, 600, "%s/%s", e->dir, file);
}

static void save(const dpt_env *e, const char *file, const char *pem, bool secret)
{
        char p[600];
        path_of(e, file, p);
        sp_error *err = NULL;
        sp_test_ok(sp_pki_pem_save(p, pem, secret, &err), &err);
}

/* Issues and saves <name>.crt and <name>.key for role. */
static void issue(const dpt_env *e, sp_pki_ca *ca, sp_role role, const char *name, char **ret_cert, char **ret_key)
{
        static const char *const sans[] = {"127.0.0.1", "localhost", NULL};
        char *cert = NULL, *key = NULL;
        sp_error *err = NULL;
        sp_test_ok(sp_pki_issue(ca, role, name, sans, 30, &cert, &key, &err), &err);
        char f[128];
        snprintf(f, sizeof(f), "%s.crt", name);
        save(e, f, cert, false);
        snprintf(f, sizeof(f), "%s.key", name);
        save(e, f, key, true);
        *ret_cert = cert;
        *ret_key = key;
}

static void start_worker(dpt_env *e, int storage_gb)
{
        sp_error *err = NULL;
        int port = sp_test_free_port(&err);
        sp_test_ok(port, &err);
        int http = sp_test_free_port(&err);
        sp_test_ok(http, &err);
        snprintf(e->worker_addr, sizeof(e->worker_addr), "127.0.0.1:%d", port);
        char bin[1024], state[700], storage[700], image[700], logp[700], ca[700], cert[700], key[700], listen[80],
                hl[80], cg[128], size[64];
        snprintf(bin, sizeof(bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(state, sizeof(state), "--state-dir=%s/worker/state", e->dir);
        snprintf(storage, sizeof(storage), "--storage-dir=%s/worker/storage", e->dir);
        snprintf(image, sizeof(image), "--storage-image=%s/worker/storage.img", e->dir);
        snprintf(logp, sizeof(logp), "%s/worker.log", e->dir);
        snprintf(ca, sizeof(ca), "--tls-ca=%s/ca.pem", e->dir);
        snprintf(cert, sizeof(cert), "--tls-cert=%s/worker.crt", e->dir);
        snprintf(key, sizeof(key), "--tls-key=%s/worker.key", e->dir);
        snprintf(listen, sizeof(listen), "--listen=%s", e->worker_addr);
        snprintf(hl, sizeof(hl), "--http-listen=127.0.0.1:%d", http);
        snprintf(cg, sizeof(cg), "--cgroup-parent=%s", e->cgparent);
        snprintf(size, sizeof(size), "--storage-size=%dG", storage_gb);
        const char *argv[] = {bin,
                              state,
                              storage,
                              image,
                              ca,
                              cert,
                              key,
                              listen,
                              hl,
                              cg,
                              size,
                              "--slots=16",
                              "--session-log-size=32M",
                              "--log-format=text",
                              NULL};
        sp_test_proc_opts o = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&e->worker, "worker", argv, &o, &err), &err);
        sp_test_ok(sp_test_proc_wait_log(&e->worker, "worker ready", 180000, &err), &err);
}

void dpt_env_up(dpt_env *e, bool worker, int storage_gb)
{
        memset(e, 0, sizeof(*e));
        e->dir = sp_test_tmpdir("dataplane");
        snprintf(e->cgparent, sizeof(e->cgparent), "space-dpt-%d", (int)getpid());
        sp_error *err = NULL;
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        sp_test_ok(sp_pki_ca_create("space-test-ca", 30, &ca, &err), &err);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, &err);
        ck_assert_ptr_nonnull(ca_pem);
        save(e, "ca.pem", ca_pem, false);
        _cleanup_free_ char *wc = NULL, *wk = NULL, *dc = NULL, *dk = NULL, *cc = NULL, *ck = NULL;
        issue(e, ca, SP_ROLE_WORKER, "worker", &wc, &wk);
        issue(e, ca, SP_ROLE_DATAPLANE, "dataplane", &dc, &dk);
        issue(e, ca, SP_ROLE_CONTROLPLANE, "controlplane", &cc, &ck);
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = ca_pem, .cert_pem = cc, .key_pem = ck, .peer_roles = SP_ROLE_WORKER, .alpn = alpn};
        e->cp_ctx = sp_tls_client_ctx_new(&tc, &err);
        sp_test_ok(e->cp_ctx ? 0 : -1, &err);

        const char *names[] = {"key1", "key2"};
        sp_token_signer **signers[] = {&e->signer, &e->signer2};
        for (int i = 0; i < 2; i++) {
                _cleanup_free_ char *priv = NULL, *pub = NULL;
                sp_test_ok(sp_token_keygen(&priv, &pub, &err), &err);
                sp_test_ok(sp_token_signer_new(priv, signers[i], &err), &err);
                char f[32];
                snprintf(f, sizeof(f), "%s.pub", names[i]);
                save(e, f, pub, false);
                snprintf(f, sizeof(f), "%s.key", names[i]);
                save(e, f, priv, true);
        }
        if (worker) {
                char d[600];
                path_of(e, "worker", d);
                ck_assert_int_eq(mkdir(d, 0700), 0);
                start_worker(e, storage_gb);
        }
}

/* Kills what the worker's sandboxes left (they outlive the worker) and unmounts its storage. */
static void cleanup_sandboxes(const dpt_env *e)
{
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] || continue; "
                 "for p in $(cat $d/*/cgroup.procs 2>/dev/null); do kill -9 $p 2>/dev/null; done; done; "
                 "sleep 0.3; for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] && "
                 "rmdir $d/* $d 2>/dev/null; done; for m in $(awk '$5 ~ \"^%s/\" {print $5}' /proc/self/mountinfo "
                 "| sort -r); do umount -l $m; done; true",
                 e->cgparent, e->cgparent, e->cgparent, e->cgparent, e->dir);
        if (system(cmd) != 0)
                fprintf(stderr, "dataplane test: the cleanup script failed\n");
}

void dpt_env_down(dpt_env *e)
{
        if (!e->dir)
                return;
        if (e->worker.argv) {
                sp_test_proc_stop(&e->worker, 10000, NULL);
                sp_test_proc_free(&e->worker);
                cleanup_sandboxes(e);
        }
        if (e->cp_ctx)
                SSL_CTX_free(e->cp_ctx);
        sp_token_signer_free(e->signer);
        sp_token_signer_free(e->signer2);
        sp_test_tmpdir_remove(e->dir);
        free(e->dir);
        memset(e, 0, sizeof(*e));
}

int dpt_dataplane_start(dpt_env *e, sp_test_proc *p, const char *name, const char *const *extra)
{
        sp_error *err = NULL;
        int port = sp_test_free_port(&err);
        sp_test_ok(port, &err);
        char bin[1024], listen[80], ca[700], cert[700], key[700], tok[700], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-dataplane", sp_test_binary_dir());
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(ca, sizeof(ca), "--rpc-ca=%s/ca.pem", e->dir);
        snprintf(cert, sizeof(cert), "--rpc-cert=%s/dataplane.crt", e->dir);
        snprintf(key, sizeof(key), "--rpc-key=%s/dataplane.key", e->dir);
        snprintf(tok, sizeof(tok), "--token-public-key=%s/key1.pub", e->dir);
        snprintf(logp, sizeof(logp), "%s/%s.log", e->dir, name);
        const char *argv[32] = {bin, listen, ca, cert, key, tok, "--log-format=json", "--log-level=debug"};
        size_t n = 8;
        for (size_t i = 0; extra && extra[i] && n < 31; i++)
                argv[n++] = extra[i];
        argv[n] = NULL;
        /* Under AddressSanitizer, freed memory waits in a quarantine (256 MB by default) that would count as
         * the data plane's own in the memory checks: keep it small. Other builds ignore the variable. */
        const char *asan = getenv("ASAN_OPTIONS");
        char asan_env[1024];
        snprintf(asan_env, sizeof(asan_env), "ASAN_OPTIONS=%s%squarantine_size_mb=4:thread_local_quarantine_size_kb=64",
                 asan ? asan : "", asan && *asan ? ":" : "");
        const char *env_add[] = {asan_env, NULL};
        sp_test_proc_opts o = {.log_path = logp, .env = env_add};
        sp_test_ok(sp_test_proc_start(p, name, argv, &o, &err), &err);
        sp_test_ok(sp_test_proc_wait_http(p, "127.0.0.1", port, "/healthz", 20000, &err), &err);
        return port;
}

bool dpt_dataplane_stop(sp_test_proc *p)
{
        if (!p->argv)
                return true;
        int r = sp_test_proc_stop(p, 10000, NULL);
        int status = p->status;
        bool clean = r == 0 && (status == -1 || (WIFEXITED(status) && WEXITSTATUS(status) == 0));
        if (!clean) {
                fprintf(stderr, "%s did not stop cleanly on SIGTERM (stop %d, status 0x%x)\n", p->name, r,
                        (unsigned)status);
                sp_test_proc_dump_log(p, 60);
        }
        sp_test_proc_free(p);
        return clean;
}

json_object *dpt_rpc(dpt_env *e, const char *method, json_object *req, sp_error **err)
{
        json_object *resp = NULL;
        if (sp_rpc_call_sync(e->worker_addr, e->cp_ctx, method, req, 60000, &resp, err) < 0)
                return NULL;
        return resp;
}

json_object *dpt_rpcf(dpt_env *e, const char *method, const char *fmt, ...)
{
        char text[8192];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        _cleanup_json_ json_object *req = NULL;
        ck_assert_msg(sp_json_parse(text, strlen(text), &req, NULL) == 0, "bad test JSON: %s", text);
        sp_error *err = NULL;
        json_object *resp = dpt_rpc(e, method, req, &err);
        ck_assert_msg(resp, "%s %s: %s", method, text, err ? err->message : "?");
        return resp;
}

void dpt_sandbox(dpt_env *e, const char *id, int disk_mb)
{
        json_object_put(dpt_rpcf(e, "CreateSandbox",
                                 "{\"id\":\"%s\",\"template\":\"base\",\"resources\":{\"disk_mb\":%d}}", id, disk_mb));
}

char *dpt_token(const sp_token_signer *signer, const char *typ, const char *sbx, const char *ses, const char *worker,
                const char *scope, const char *path, int64_t ttl_s)
{
        _cleanup_json_ json_object *c = json_object_new_object();
        json_object_object_add(c, "typ", json_object_new_string(typ));
        json_object_object_add(c, "ten", json_object_new_string("ten_test0000000000000001"));
        json_object_object_add(c, "sbx", json_object_new_string(sbx));
        if (ses)
                json_object_object_add(c, "ses", json_object_new_string(ses));
        json_object_object_add(c, "wkr", json_object_new_string(worker));
        json_object_object_add(c, "scope", json_object_new_string(scope));
        if (path)
                json_object_object_add(c, "path", json_object_new_string(path));
        sp_error *err = NULL;
        char *t = sp_token_sign(signer, c, ttl_s, &err);
        ck_assert_msg(t, "sign: %s", err ? err->message : "?");
        return t;
}

char *dpt_template_token(const sp_token_signer *signer, const char *tpl, const char *fmt, uint64_t max,
                         const char *worker, const char *scope, int64_t ttl_s)
{
        _cleanup_json_ json_object *c = json_object_new_object();
        json_object_object_add(c, "typ", json_object_new_string("template"));
        json_object_object_add(c, "ten", json_object_new_string("ten_test0000000000000001"));
        json_object_object_add(c, "tpl", json_object_new_string(tpl));
        json_object_object_add(c, "fmt", json_object_new_string(fmt));
        json_object_object_add(c, "max", json_object_new_int64((int64_t)max));
        json_object_object_add(c, "wkr", json_object_new_string(worker));
        json_object_object_add(c, "scope", json_object_new_string(scope));
        sp_error *err = NULL;
        char *t = sp_token_sign(signer, c, ttl_s, &err);
        ck_assert_msg(t, "sign: %s", err ? err->message : "?");
        return t;
}

int dpt_http(int port, const char *method, const char *target, const char *const *headers, const char *body,
             size_t body_len, sp_buf *ret_body)
{
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct timeval tv = {60, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect to %d: %s", port, strerror(errno));
        _cleanup_buf_ sp_buf req = SP_BUF_INIT;
        sp_buf_appendf(&req, NULL, "%s %s HTTP/1.1\r\nHost: test\r\nConnection: close\r\n", method, target);
        for (size_t i = 0; headers && headers[i]; i++)
                sp_buf_appendf(&req, NULL, "%s\r\n", headers[i]);
        if (body)
                sp_buf_appendf(&req, NULL, "Content-Length: %zu\r\n", body_len);
        sp_buf_append_str(&req, "\r\n", NULL);
        if (body)
                sp_buf_append(&req, body, body_len, NULL);
        for (size_t off = 0; off < req.len;) {
                ssize_t w = write(fd, req.data + off, req.len - off);
                ck_assert_msg(w > 0, "write: %s", strerror(errno));
                off += (size_t)w;
        }
        _cleanup_buf_ sp_buf all = SP_BUF_INIT;
        char buf[65536];
        ssize_t r;
        while ((r = read(fd, buf, sizeof(buf))) > 0)
                sp_buf_append(&all, buf, (size_t)r, NULL);
        close(fd);
        int status = 0;
        ck_assert_msg(all.len && sscanf(all.data, "HTTP/1.1 %d", &status) == 1, "no HTTP answer from port %d", port);
        const char *b = strstr(all.data, "\r\n\r\n");
        if (ret_body && b)
                sp_buf_append(ret_body, b + 4, all.len - (size_t)(b + 4 - all.data), NULL);
        return status;
}

int64_t dpt_rss(pid_t pid)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        _cleanup_fclose_ FILE *f = fopen(path, "r");
        char line[256];
        while (f && fgets(line, sizeof(line), f)) {
                long long kb;
                if (sscanf(line, "VmRSS: %lld kB", &kb) == 1)
                        return kb * 1024;
        }
        return -1;
}

char *dpt_log(const sp_test_proc *p)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(p->log_path, 64 << 20, &b, NULL) < 0 || !b.data)
                return strdup("");
        return sp_buf_steal(&b);
}
