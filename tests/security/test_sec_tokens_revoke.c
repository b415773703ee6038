/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack: the tokens of a revoked API key keep working (issue #13: attach
 * and file tokens lived up to 24 h after their key was revoked).
 *
 * A real cluster (PostgreSQL, the control plane, a worker) and a real data
 * plane that joined it and polls RevokedKeys every 500 ms. Key K1 mints a
 * session attachment token and a files token, key K2 of the same tenant a
 * files token; all three work. K1 is revoked through the API (with K2):
 * within a few seconds (polled, bounded) the data plane answers both of
 * K1's tokens 401 naming the revocation, while K2's token still works, and
 * /metrics counts the refusals under reason "revoked".
 *
 * Attack: an upload token outlives its template (the third attack pass: a
 * token still uploaded for its hour after the template was deleted, bytes
 * never reserved against the tenant's storage). A tenant creates two upload
 * templates and deletes one: within a few seconds (polled, bounded) the data
 * plane answers the deleted template's token 404 naming the deletion, while
 * the other template's token still uploads.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"

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
        sp_test_space_start_dataplane(&S, &dp, dp_port, "dp-sec", (const char *const[]){"--revoked-poll-ms=500", NULL});
}

static void cluster_down(void)
{
        if (dp.argv) {
                if (getenv("SPACE_TEST_DUMP"))
                        sp_test_proc_dump_log(&dp, 40);
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

/* The status of GET target on the data plane with the token (body into out,
 * for an answer that is not a stream). An attach stream is closed after its
 * status line. */
static int dp_get(const char *target, const char *token, char *out, size_t outlen)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dp_port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
        char req[8192];
        int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nAuthorization: Bearer %s\r\n\r\n", target, token);
        ck_assert_int_eq(write(fd, req, (size_t)n), n);
        size_t used = 0;
        out[0] = '\0';
        for (int64_t deadline = mono_ms() + 10000; used + 1 < outlen && mono_ms() < deadline;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 200) != 1)
                        continue;
                ssize_t r = read(fd, out + used, outlen - used - 1);
                if (r <= 0)
                        break;
                used += (size_t)r;
                out[used] = '\0';
                if (strstr(out, "text/event-stream") && strstr(out, "\r\n\r\n"))
                        break;
        }
        close(fd);
        int status = 0;
        ck_assert_msg(sscanf(out, "HTTP/1.%*d %d", &status) == 1, "no answer from the data plane: '%.200s'", out);
        return status;
}

/* A new key of the tenant of key (its secret into secret, its id into id). */
static void new_key(const char *key, char secret[static 256], char id[static 64])
{
        _cleanup_json_ json_object *k = sp_test_api(&S, key, "POST", "/v1/keys", 201, "{\"name\":\"k2\"}", NULL);
        snprintf(secret, 256, "%s", sp_test_jstr(k, "secret"));
        snprintf(id, 64, "%s", sp_test_jstr(k, "id"));
}

/* The id of an API key from its secret: spk_<key id>_<secret>. */
static void key_id_of(const char *secret, char id[static 64])
{
        const char *p = secret + 4;
        const char *end = strchr(p + 4, '_');
        ck_assert_ptr_nonnull(end);
        snprintf(id, 64, "%.*s", (int)(end - p), p);
}

START_TEST(revoked_key_tokens_refused_within_seconds)
{
        char k1[256], k2[256], k1_id[64], k2_id[64], sbx[64];
        sp_test_new_tenant(&S, "revoke", k1);
        key_id_of(k1, k1_id);
        new_key(k1, k2, k2_id);
        sp_test_create_sandbox(&S, k1, SANDBOX, sbx);

        char path[256];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", sbx);
        _cleanup_json_ json_object *ses =
                sp_test_api(&S, k1, "POST", path, 201, "{\"argv\":[\"sleep\",\"1000\"]}", NULL);
        const char *ses_id = sp_test_jstr(ses, "session.id");
        const char *att = sp_test_jstr(ses, "attach_token");
        ck_assert_msg(ses_id && att, "%s", json_object_to_json_string(ses));
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/files/token", sbx);
        _cleanup_json_ json_object *f1 = sp_test_api(&S, k1, "POST", path, 200, "{\"scope\":\"read\"}", NULL);
        _cleanup_json_ json_object *f2 = sp_test_api(&S, k2, "POST", path, 200, "{\"scope\":\"read\"}", NULL);
        const char *ft1 = sp_test_jstr(f1, "token"), *ft2 = sp_test_jstr(f2, "token");

        char attach[256], file[256], out[16384];
        snprintf(attach, sizeof(attach), "/v1/sessions/%s/attach", ses_id);
        snprintf(file, sizeof(file), "/v1/sandboxes/%s/files?path=/etc/passwd", sbx);
        ck_assert_msg(dp_get(attach, att, out, sizeof(out)) == 200, "%s", out);
        ck_assert_msg(dp_get(file, ft1, out, sizeof(out)) == 200, "%s", out);
        ck_assert_msg(dp_get(file, ft2, out, sizeof(out)) == 200, "%s", out);

        char del[128];
        snprintf(del, sizeof(del), "/v1/keys/%s", k1_id);
        json_object_put(sp_test_api(&S, k2, "DELETE", del, 204, NULL, NULL));
        int64_t revoked_at = mono_ms();

        /* Within a few seconds both of K1's tokens are refused. */
        int st_att = 0, st_file = 0;
        while (mono_ms() - revoked_at < 10000) {
                st_att = dp_get(attach, att, out, sizeof(out));
                if (st_att == 401)
                        break;
                usleep(100000);
        }
        ck_assert_msg(st_att == 401, "the attach token of the revoked key still answers %d after 10 s: %s", st_att,
                      out);
        ck_assert_msg(strstr(out, "unauthenticated") && strstr(out, "revoked"), "%s", out);
        fprintf(stderr, "revocation reached the data plane after %lld ms\n", (long long)(mono_ms() - revoked_at));
        st_file = dp_get(file, ft1, out, sizeof(out));
        ck_assert_msg(st_file == 401 && strstr(out, "revoked"), "the files token of the revoked key: %d %s", st_file,
                      out);

        /* The other key's token still works. */
        ck_assert_msg(dp_get(file, ft2, out, sizeof(out)) == 200, "%s", out);

        sp_error *err = NULL;
        sp_test_http_response m = {0};
        sp_test_ok(sp_test_http(dp_port, "GET", "/metrics", NULL, NULL, 10000, &m, &err), &err);
        ck_assert_msg(strstr(m.body, "space_dataplane_token_refusals_total{reason=\"revoked\"} 2"), "%s", m.body);
        ck_assert_msg(strstr(m.body, "space_dataplane_revoked_keys 1"), "%s", m.body);
        sp_test_http_response_free(&m);
}
END_TEST

/* PUT the file at path to the data plane's upload url with token; the status (body into out). */
static int dp_put_file(const char *url, const char *token, const char *path, char *out, size_t outlen)
{
        const char *target = strstr(url, "/v1/templates/");
        ck_assert_ptr_nonnull(target);
        FILE *f = fopen(path, "rb");
        ck_assert_msg(f, "%s: %s", path, strerror(errno));
        static char body[1 << 20];
        size_t len = fread(body, 1, sizeof(body), f);
        fclose(f);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dp_port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
        char req[8192];
        int n = snprintf(req, sizeof(req),
                         "PUT %s HTTP/1.0\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\n"
                         "Content-Length: %zu\r\n\r\n",
                         target, token, len);
        ck_assert_int_eq(write(fd, req, (size_t)n), n);
        /* The body may be cut short by an early refusal: what was written is enough. */
        for (size_t off = 0; off < len;) {
                ssize_t w = write(fd, body + off, len - off);
                if (w <= 0)
                        break;
                off += (size_t)w;
        }
        size_t used = 0;
        out[0] = '\0';
        for (int64_t deadline = mono_ms() + 30000; used + 1 < outlen && mono_ms() < deadline;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 200) != 1)
                        continue;
                ssize_t r = read(fd, out + used, outlen - used - 1);
                if (r <= 0)
                        break;
                used += (size_t)r;
                out[used] = '\0';
        }
        close(fd);
        int status = 0;
        ck_assert_msg(sscanf(out, "HTTP/1.%*d %d", &status) == 1, "no answer from the data plane: '%.200s'", out);
        return status;
}

START_TEST(deleted_template_upload_token_refused_within_seconds)
{
        char key[256];
        sp_test_new_tenant(&S, "tplrevoke", key);
        _cleanup_json_ json_object *a =
                sp_test_api(&S, key, "POST", "/v1/templates", 201,
                            "{\"name\":\"gone\",\"source\":\"upload\",\"format\":\"tar\"}", NULL);
        _cleanup_json_ json_object *b =
                sp_test_api(&S, key, "POST", "/v1/templates", 201,
                            "{\"name\":\"kept\",\"source\":\"upload\",\"format\":\"tar\"}", NULL);
        const char *a_url = sp_test_jstr(a, "upload.url"), *a_tok = sp_test_jstr(a, "upload.token");
        const char *b_url = sp_test_jstr(b, "upload.url"), *b_tok = sp_test_jstr(b, "upload.token");
        const char *a_id = sp_test_jstr(a, "template.id");
        ck_assert_msg(a_url && a_tok && b_url && b_tok && a_id, "%s", json_object_to_json_string(a));

        /* A small rootfs tarball to upload. */
        char *dir = sp_test_tmpdir("tplrevoke");
        char tar[512], cmd[2048];
        snprintf(tar, sizeof(tar), "%s/rootfs.tar", dir);
        snprintf(cmd, sizeof(cmd),
                 "set -e; r='%s/rootfs'; mkdir -p \"$r/etc\" \"$r/tmp\"; echo hello > \"$r/hello.txt\"; "
                 "echo 'root:x:0:0:root:/root:/bin/sh' > \"$r/etc/passwd\"; tar -C \"$r\" -cf '%s' .",
                 dir, tar);
        ck_assert_int_eq(system(cmd), 0);

        json_object_put(sp_test_api(&S, key, "DELETE", "/v1/templates/gone", 202, NULL, NULL));
        int64_t deleted_at = mono_ms();

        /* Within a few seconds the deleted template's token is refused. */
        char out[16384];
        int st = 0;
        while (mono_ms() - deleted_at < 10000) {
                st = dp_put_file(a_url, a_tok, tar, out, sizeof(out));
                /* Before the data plane refuses the token, an upload may still reach the
                 * worker and be stopped there by the delete (while it is received or imported):
                 * that is no refusal of the token. */
                if (st != 200 && !(st == 404 && (strstr(out, "was deleted while it was imported") ||
                                                 strstr(out, "was deleted while it was being uploaded"))))
                        break;
                usleep(100000);
        }
        ck_assert_msg(st == 404, "the upload token of the deleted template answers %d: %s", st, out);
        ck_assert_msg(strstr(out, "not_found") && strstr(out, "revoked") && strstr(out, a_id), "%s", out);
        fprintf(stderr, "the template's deletion reached the data plane after %lld ms\n",
                (long long)(mono_ms() - deleted_at));

        /* The other template's token still uploads. */
        ck_assert_msg(dp_put_file(b_url, b_tok, tar, out, sizeof(out)) == 200, "%s", out);

        sp_error *err = NULL;
        sp_test_http_response m = {0};
        sp_test_ok(sp_test_http(dp_port, "GET", "/metrics", NULL, NULL, 10000, &m, &err), &err);
        ck_assert_msg(strstr(m.body, "space_dataplane_revoked_templates 1"), "%s", m.body);
        sp_test_http_response_free(&m);
        sp_test_tmpdir_remove(dir);
        free(dir);
}
END_TEST

int main(void)
{
        sp_test_require_root("the worker needs btrfs, namespaces and cgroups");
        sp_test_pg_require();
        Suite *s = suite_create("sec_tokens_revoke");
        TCase *tc = tcase_create("revoke");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, revoked_key_tokens_refused_within_seconds);
        tcase_add_test(tc, deleted_template_upload_token_refused_within_seconds);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
