/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template uploads through space-dataplane with a real worker (needs root):
 * a gzip tarball uploaded with Content-Length and chunked answers the
 * worker's template (with its digest) and the bytes, and the worker lists
 * it; the refusals — another template's token, a files token, a query
 * parameter, a Content-Length or a chunked body past the token's max, a
 * malformed archive, a second upload — and a client that goes away
 * mid-upload leave nothing on the worker, and a refused archive may be
 * uploaded again with the same token. Logs name the template, never the
 * token.
 */
#include <errno.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataplane/env.h"
#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"

#define TPL_A "tpl_dpt00000000000000001"
#define TPL_B "tpl_dpt00000000000000002"
#define TPL_BIG "tpl_dpt00000000000000003"
#define TPL_CHUNKED "tpl_dpt00000000000000004"
#define TPL_GONE "tpl_dpt00000000000000005"
#define MiB (1024 * 1024)
#define MAX (16 * MiB)

static dpt_env env;
static sp_test_proc dp;
static int port;

static void case_setup(void)
{
        dpt_env_up(&env, true, 4);
        port = dpt_dataplane_start(&env, &dp, "dataplane", NULL);
}

static void case_teardown(void)
{
        bool clean = dpt_dataplane_stop(&dp);
        dpt_env_down(&env);
        ck_assert_msg(clean, "the data plane did not stop cleanly");
}

static char *template_token(const char *tpl, uint64_t max)
{
        return dpt_template_token(env.signer, tpl, "tar", max, env.worker_addr, "write", 3600);
}

/* A small root filesystem as a gzip tarball, read into out. */
static void make_tarball(sp_buf *out)
{
        char cmd[4096];
        snprintf(cmd, sizeof(cmd),
                 "set -e; d=%s/rootfs; mkdir -p $d/etc $d/bin $d/root; echo dpt > $d/etc/hostname; "
                 "echo 'root:x:0:0:root:/root:/bin/sh' > $d/etc/passwd; echo 'root:x:0:' > $d/etc/group; "
                 "head -c 300000 /dev/urandom > $d/root/blob; tar -C $d -czf %s/rootfs.tar.gz .",
                 env.dir, env.dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(cmd, sizeof(cmd), "%s/rootfs.tar.gz", env.dir);
        sp_error *err = NULL;
        sp_test_ok(sp_file_read(cmd, 64 * MiB, out, &err), &err);
        ck_assert_uint_gt(out->len, 300000);
}

static const char *leftover_name;
static char leftover_path[1024];

static int find_leftover(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        if (strncmp(path + ftw->base, leftover_name, strlen(leftover_name)) != 0)
                return 0;
        snprintf(leftover_path, sizeof(leftover_path), "%s", path);
        return 1;
}

/* Whether the worker lists the template. */
static bool worker_lists(const char *tpl)
{
        _cleanup_json_ json_object *r = dpt_rpcf(&env, "ListTemplates", "{}");
        json_object *list = NULL;
        ck_assert(json_object_object_get_ex(r, "templates", &list));
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *name = NULL;
                if (json_object_object_get_ex(json_object_array_get_idx(list, i), "name", &name) &&
                    strcmp(json_object_get_string(name), tpl) == 0)
                        return true;
        }
        return false;
}

/* Whether the worker's storage holds a file or directory named after tpl
 * (its artifact, a partial file, a scratch tree). */
static bool in_storage(const char *tpl)
{
        char storage[700];
        snprintf(storage, sizeof(storage), "%s/worker/storage", env.dir);
        leftover_name = tpl;
        leftover_path[0] = '\0';
        int r = nftw(storage, find_leftover, 32, FTW_PHYS);
        ck_assert_msg(r >= 0, "walk %s: %s", storage, strerror(errno));
        return r == 1;
}

/* Asserts that the worker holds nothing of tpl: not listed, no file or
 * directory named after it in its storage (artifact, partial file, tree).
 * Waits up to wait_ms for a cancelled upload to be cleaned up. */
static void nothing_left(const char *tpl, int wait_ms)
{
        for (int waited = 0;; waited += 100) {
                bool listed = worker_lists(tpl);
                if (!listed && !in_storage(tpl))
                        return;
                if (waited >= wait_ms)
                        ck_abort_msg("%s: left on the worker (%s)", tpl, listed ? "listed" : leftover_path);
                usleep(100 * 1000);
        }
}

static void auth_header(char *out, size_t n, const char *tok)
{
        snprintf(out, n, "Authorization: Bearer %s", tok);
}

/* PUT with Content-Length. */
static int upload(const char *tpl, const char *query, const char *tok, const void *body, size_t len, sp_buf *out)
{
        char h[4200], target[256];
        auth_header(h, sizeof(h), tok);
        snprintf(target, sizeof(target), "/v1/templates/%s/upload%s", tpl, query ? query : "");
        const char *hs[] = {h, NULL};
        sp_buf_clear(out);
        return dpt_http(port, "PUT", target, hs, body, len, out);
}

static void send_all(int fd, const void *p, size_t n)
{
        for (size_t off = 0; off < n;) {
                ssize_t w = send(fd, (const char *)p + off, n - off, MSG_NOSIGNAL);
                ck_assert_msg(w > 0, "send: %s", strerror(errno));
                off += (size_t)w;
        }
}

/* Reads the whole answer (the server closes the connection); returns its status. */
static int read_answer(int fd, sp_buf *out)
{
        sp_buf_clear(out);
        char buf[65536];
        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                ck_assert_msg(poll(&p, 1, 120000) == 1, "no answer");
                ssize_t r = read(fd, buf, sizeof(buf));
                if (r <= 0)
                        break;
                sp_buf_append(out, buf, (size_t)r, NULL);
        }
        int status = 0;
        ck_assert_msg(out->len && sscanf(out->data, "HTTP/1.1 %d", &status) == 1, "no HTTP answer");
        const char *b = strstr(out->data, "\r\n\r\n");
        if (b)
                sp_buf_consume(out, (size_t)(b + 4 - out->data));
        return status;
}

/* PUT chunked: body in chunks of 64 KiB, then total - len more bytes of
 * filler; stops sending as soon as an answer arrives. Returns the status. */
static int upload_chunked(const char *tpl, const char *tok, const void *body, size_t len, uint64_t total, sp_buf *out)
{
        sp_error *err = NULL;
        int fd = sp_test_dial(port, &err);
        sp_test_ok(fd, &err);
        char head[4600];
        int n = snprintf(head, sizeof(head),
                         "PUT /v1/templates/%s/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                         "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                         tpl, tok);
        send_all(fd, head, (size_t)n);
        static char filler[64 * 1024];
        bool answered = false;
        for (uint64_t off = 0; off < total && !answered;) {
                size_t k = total - off < sizeof(filler) ? (size_t)(total - off) : sizeof(filler);
                const char *p = off < len ? (const char *)body + off : filler;
                if (off < len && len - off < k)
                        k = len - off;
                char size[32];
                int sn = snprintf(size, sizeof(size), "%zx\r\n", k);
                struct pollfd pw = {.fd = fd, .events = POLLOUT | POLLIN};
                ck_assert_int_eq(poll(&pw, 1, 120000), 1);
                if (pw.revents & (POLLIN | POLLHUP | POLLERR)) {
                        answered = true;
                        break;
                }
                if (send(fd, size, (size_t)sn, MSG_NOSIGNAL) != sn || send(fd, p, k, MSG_NOSIGNAL) != (ssize_t)k ||
                    send(fd, "\r\n", 2, MSG_NOSIGNAL) != 2)
                        answered = true; /* the server closed its side: read what it said */
                off += k;
        }
        if (!answered)
                send(fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
        int status = read_answer(fd, out);
        close(fd);
        return status;
}

/* Checks a 200 answer: the template (named tpl, with a digest) and bytes. */
static void check_stored(const sp_buf *answer, const char *tpl, size_t bytes)
{
        _cleanup_json_ json_object *o = NULL;
        ck_assert_msg(sp_json_parse(answer->data, answer->len, &o, NULL) == 0, "%s", answer->data);
        json_object *t = NULL;
        ck_assert_int_eq(sp_json_get_object(o, "template", true, &t, NULL), 0);
        const char *name = NULL, *digest = NULL;
        ck_assert_int_eq(sp_json_get_string(t, "name", true, 128, &name, NULL), 0);
        ck_assert_str_eq(name, tpl);
        ck_assert_int_eq(sp_json_get_string(t, "digest", true, 128, &digest, NULL), 0);
        ck_assert_msg(strncmp(digest, "sha256:", 7) == 0, "digest %s", digest);
        int64_t n = 0;
        ck_assert_int_eq(sp_json_get_int(o, "bytes", true, 0, INT64_MAX, &n, NULL), 0);
        ck_assert_int_eq(n, (int64_t)bytes);
        ck_assert_int_eq(json_object_object_length(o), 2);
        ck_assert(worker_lists(tpl));
        ck_assert_msg(in_storage(tpl), "%s: no artifact in the worker's storage",
                      tpl); /* what nothing_left() looks for */
}

START_TEST(uploads_and_refusals)
{
        _cleanup_buf_ sp_buf tar = SP_BUF_INIT, b = SP_BUF_INIT;
        make_tarball(&tar);
        _cleanup_free_ char *ta = template_token(TPL_A, MAX);

        /* Refused before anything reaches the worker. */
        ck_assert_int_eq(upload(TPL_B, NULL, ta, tar.data, tar.len, &b), 403);
        ck_assert_msg(strstr(b.data, "token does not grant this template"), "%s", b.data);
        _cleanup_free_ char *files = dpt_token(env.signer, "files", "sbx_x", NULL, env.worker_addr, "write", NULL, 60);
        ck_assert_int_eq(upload(TPL_A, NULL, files, tar.data, tar.len, &b), 403);
        ck_assert_msg(strstr(b.data, "token does not grant this route"), "%s", b.data);
        char h[4200];
        auth_header(h, sizeof(h), ta);
        const char *hs[] = {h, NULL};
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "PUT", "/v1/sandboxes/" TPL_A "/files?path=/x", hs, "x", 1, &b), 403);
        ck_assert_msg(strstr(b.data, "token does not grant this route"), "%s", b.data);
        _cleanup_free_ char *read_only = dpt_template_token(env.signer, TPL_A, "tar", MAX, env.worker_addr, "read", 60);
        ck_assert_int_eq(upload(TPL_A, NULL, read_only, tar.data, tar.len, &b), 403);
        ck_assert_msg(strstr(b.data, "token is read-only"), "%s", b.data);
        ck_assert_int_eq(upload(TPL_A, "?format=oci", ta, tar.data, tar.len, &b), 400);
        ck_assert_msg(strstr(b.data, "unknown query parameter 'format'"), "%s", b.data);
        nothing_left(TPL_A, 0);
        nothing_left(TPL_B, 0);

        /* A Content-Length past the token's max: 413 before the worker is called. */
        _cleanup_free_ char *tbig = template_token(TPL_BIG, 1000);
        char hbig[4200];
        auth_header(hbig, sizeof(hbig), tbig);
        const char *hs_big[] = {hbig, "Content-Length: 1001", NULL};
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "PUT", "/v1/templates/" TPL_BIG "/upload", hs_big, NULL, 0, &b), 413);
        ck_assert_msg(strstr(b.data, "\"too_large\""), "%s", b.data);
        nothing_left(TPL_BIG, 0);

        /* A chunked body past it: stopped by the worker, nothing left. */
        ck_assert_int_eq(upload_chunked(TPL_BIG, tbig, tar.data, tar.len, 4 * MiB, &b), 413);
        ck_assert_msg(strstr(b.data, "\"too_large\""), "%s", b.data);
        nothing_left(TPL_BIG, 5000);

        /* A malformed archive: the worker's 400, nothing left, and the same token uploads again. */
        static const char junk[] = "this is not an archive, not even a compressed one";
        ck_assert_int_eq(upload(TPL_A, NULL, ta, junk, sizeof(junk) - 1, &b), 400);
        ck_assert_msg(strstr(b.data, "\"invalid_argument\""), "%s", b.data);
        nothing_left(TPL_A, 5000);
        ck_assert_int_eq(upload(TPL_A, NULL, ta, tar.data, tar.len, &b), 200);
        check_stored(&b, TPL_A, tar.len);

        /* Once uploaded, the template is taken. */
        ck_assert_int_eq(upload(TPL_A, NULL, ta, tar.data, tar.len, &b), 409);
        ck_assert_msg(strstr(b.data, "\"conflict\""), "%s", b.data);
        ck_assert(worker_lists(TPL_A));

        /* Chunked, within the bound. */
        _cleanup_free_ char *tc = template_token(TPL_CHUNKED, MAX);
        ck_assert_int_eq(upload_chunked(TPL_CHUNKED, tc, tar.data, tar.len, tar.len, &b), 200);
        check_stored(&b, TPL_CHUNKED, tar.len);

        /* Counted by route, refusal and bytes; logged by template, never with the token. */
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port, "GET", "/metrics", NULL, NULL, 0, &b), 200);
        const char *want[] = {
                "space_dataplane_requests_total{route=\"template_put\",status=\"200\"} 2\n",
                "space_dataplane_requests_total{route=\"template_put\",status=\"409\"} 1\n",
                "space_dataplane_requests_total{route=\"template_put\",status=\"413\"} 2\n",
                "space_dataplane_token_refusals_total{reason=\"template\"} 1\n",
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(want); i++)
                ck_assert_msg(strstr(b.data, want[i]), "no %s in\n%s", want[i], b.data);
        ck_assert_msg(!strstr(b.data, "space_dataplane_template_bytes_total 0\n"), "%s", b.data);
        _cleanup_free_ char *log = dpt_log(&dp);
        ck_assert_msg(strstr(log, "\"template_id\":\"" TPL_A "\""), "the log names no template");
        ck_assert_msg(!strstr(log, ta) && !strstr(log, tbig) && !strstr(log, tc), "a token is in the log");
}
END_TEST

START_TEST(client_gone_mid_upload)
{
        _cleanup_buf_ sp_buf tar = SP_BUF_INIT;
        make_tarball(&tar);
        _cleanup_free_ char *tok = template_token(TPL_GONE, MAX);
        sp_error *err = NULL;
        int fd = sp_test_dial(port, &err);
        sp_test_ok(fd, &err);
        char head[4600];
        int n = snprintf(head, sizeof(head),
                         "PUT /v1/templates/" TPL_GONE "/upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                         tok, tar.len);
        send_all(fd, head, (size_t)n);
        send_all(fd, tar.data, tar.len / 2);
        usleep(500 * 1000); /* the worker has the first half */
        close(fd);
        nothing_left(TPL_GONE, 10000);

        /* The data plane counted it as a client that went away, and the token still uploads. */
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port, "GET", "/metrics", NULL, NULL, 0, &b), 200);
        ck_assert_msg(strstr(b.data, "space_dataplane_requests_total{route=\"template_put\",status=\"499\"} 1\n"), "%s",
                      b.data);
        ck_assert_msg(strstr(b.data, "space_dataplane_worker_streams 0\n"), "%s", b.data);
        ck_assert_int_eq(upload(TPL_GONE, NULL, tok, tar.data, tar.len, &b), 200);
        check_stored(&b, TPL_GONE, tar.len);
}
END_TEST

int main(void)
{
        sp_test_require_root("the worker needs btrfs, namespaces and cgroups");
        Suite *s = suite_create("dataplane_templates");
        TCase *tc = tcase_create("templates");
        tcase_set_timeout(tc, 200);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_test(tc, uploads_and_refusals);
        tcase_add_test(tc, client_gone_mid_upload);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
