/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates a tenant uploads, end to end: a real cluster (PostgreSQL, a
 * control plane, a data plane joined to it, two workers) driven with spacectl
 * and the API as a tenant would.
 *
 *   - `spacectl template push` of a rootfs tarball and of an OCI image
 *     archive streams through the data plane to one worker; the template
 *     becomes ready only once the control plane has copied it to the other
 *     worker, and a sandbox started on either worker (the other one cordoned)
 *     sees the archive's files (and, for OCI, the image's environment);
 *   - uploads count against the tenant's template storage: each upload token
 *     may hold what is left of it, at most the per-upload bound; a body
 *     larger than that is refused before it reaches a worker; with nothing
 *     left a new upload is 429 until a template is deleted; a push of a
 *     template still waiting for its archive takes it up again with a fresh
 *     token; a token for one template does not upload another;
 *   - what counts is what a template holds, its archive and the files
 *     unpacked from it: a decompression bomb (a small archive of a file of
 *     zeros larger than what is left of the tenant's storage) is refused by
 *     the worker naming the tenant's storage and leaves nothing behind; an
 *     archive that fits is ready with archive + unpacked bytes as its size;
 *     a second one that fits the per-upload bound but not what is left of
 *     the tenant's storage, by its unpacked files only, is refused.
 *
 * One cluster for the file (an unchecked fixture). Needs root, btrfs,
 * PostgreSQL and the static busybox the base template is made of.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"
#include "../integration/test_spacectl_util.h"

#define MiB (1024 * 1024)

static sp_test_space S;
static sp_test_proc dp;
static int dp_port;
static char *dir;
static char dp_url_arg[128];
static const char *cp_args[] = {dp_url_arg, "--tenant-template-bytes=12M", "--template-upload-max-bytes=10M", NULL};

static void cluster_up(void)
{
        sp_error *err = NULL;
        dp_port = sp_test_free_port(&err);
        sp_test_ok(dp_port, &err);
        snprintf(dp_url_arg, sizeof(dp_url_arg), "--dataplane-url=http://127.0.0.1:%d", dp_port);
        sp_test_space_opts o = {.workers = 2, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        sp_test_space_start_dataplane(&S, &dp, dp_port, "dp-upload", NULL);
        dir = sp_test_tmpdir("tplupload");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
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
        if (dir) {
                sp_test_tmpdir_remove(dir);
                free(dir);
                dir = NULL;
        }
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
        char cmd[8192];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

static int64_t file_size(const char *path)
{
        struct stat st;
        ck_assert_msg(stat(path, &st) == 0, "%s", path);
        return (int64_t)st.st_size;
}

/* What the tree dir/<name> costs on disk, by the rule of the worker's
 * template.h, computed here on its own: every name 2 * (512 + its length),
 * the root's counting as empty; every inode once (hard links), its file bytes
 * plus 2 * its symlink target's length (the extended attributes would count
 * 2 * their names and values: the trees made here have none, neither cp nor
 * tar -c keep any). */
static int64_t tree_bytes(const char *name)
{
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "find '%s/%s' -printf '%%y %%s %%n %%i %%P\\n' | awk '{"
                 "n = split($5, c, \"/\"); s += 2 * (512 + (n ? length(c[n]) : 0));"
                 "if ($1 != \"d\" && $3 > 1) { if ($4 in seen) next; seen[$4] = 1 }"
                 "if ($1 == \"f\") s += $2; if ($1 == \"l\") s += 2 * $2"
                 "} END {print s+0}'",
                 dir, name);
        FILE *f = popen(cmd, "r");
        ck_assert_ptr_nonnull(f);
        long long n = -1;
        ck_assert_int_eq(fscanf(f, "%lld", &n), 1);
        ck_assert_int_eq(pclose(f), 0);
        return (int64_t)n;
}

/* A root filesystem in dir/<name>: busybox with sh and cat, and /hello.txt
 * holding `hello`. */
static void make_rootfs(const char *name, const char *hello)
{
        sh("set -e; r='%s/%s'; mkdir -p \"$r/bin\" \"$r/etc\" \"$r/tmp\" \"$r/root\"; cp /bin/busybox \"$r/bin/\"; "
           "for a in sh cat env pwd; do ln -sf busybox \"$r/bin/$a\"; done; "
           "echo 'root:x:0:0:root:/root:/bin/sh' > \"$r/etc/passwd\"; echo 'root:x:0:' > \"$r/etc/group\"; "
           "printf '%%s' '%s' > \"$r/hello.txt\"",
           dir, name, hello);
}

/* dir/<name>.tar.gz of the rootfs dir/<name>. */
static void make_tarball(const char *name, char out[static 512])
{
        snprintf(out, 512, "%s/%s.tar.gz", dir, name);
        sh("tar -C '%s/%s' -czf '%s' .", dir, name, out);
}

/* dir/<name>.oci.tar: an OCI image archive (a tar of an OCI layout) with the
 * rootfs dir/<name> as its one layer and GREETING=<greeting>, workdir /tmp
 * in its config. */
static void make_oci_archive(const char *name, const char *greeting, char out[static 512])
{
        snprintf(out, 512, "%s/%s.oci.tar", dir, name);
        sh("set -e; d='%s'; n='%s'; L=\"$d/$n.layout\"; mkdir -p \"$L/blobs/sha256\"; "
           "tar -C \"$d/$n\" -czf \"$d/$n.layer\" .; "
           "ld=$(sha256sum \"$d/$n.layer\" | cut -d' ' -f1); ls=$(stat -c %%s \"$d/$n.layer\"); "
           "diff=$(gzip -dc \"$d/$n.layer\" | sha256sum | cut -d' ' -f1); mv \"$d/$n.layer\" \"$L/blobs/sha256/$ld\"; "
           "printf '{\"architecture\":\"%%s\",\"os\":\"linux\",\"config\":{\"Env\":[\"PATH=/bin\",\"GREETING=%s\"],"
           "\"WorkingDir\":\"/tmp\",\"Cmd\":[\"/bin/sh\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":"
           "[\"sha256:%%s\"]}}' \"$(dpkg --print-architecture)\" \"$diff\" > \"$d/$n.config\"; "
           "cd_=$(sha256sum \"$d/$n.config\" | cut -d' ' -f1); cs=$(stat -c %%s \"$d/$n.config\"); "
           "mv \"$d/$n.config\" \"$L/blobs/sha256/$cd_\"; "
           "printf '{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":"
           "{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:%%s\",\"size\":%%s},"
           "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:%%s\","
           "\"size\":%%s}]}' \"$cd_\" \"$cs\" \"$ld\" \"$ls\" > \"$d/$n.manifest\"; "
           "md=$(sha256sum \"$d/$n.manifest\" | cut -d' ' -f1); ms=$(stat -c %%s \"$d/$n.manifest\"); "
           "mv \"$d/$n.manifest\" \"$L/blobs/sha256/$md\"; "
           "printf '{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
           "\"digest\":\"sha256:%%s\",\"size\":%%s}]}' \"$md\" \"$ms\" > \"$L/index.json\"; "
           "printf '{\"imageLayoutVersion\":\"1.0.0\"}' > \"$L/oci-layout\"; "
           "tar -C \"$L\" -cf '%s' oci-layout index.json blobs",
           dir, name, greeting, out);
}

static const char *api_url(void)
{
        static char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", S.api);
        return url;
}

/* A tenant with a key and a spacectl configuration of its own. */
static void tenant(const char *name, char key[static 256])
{
        sp_test_new_tenant(&S, name, key);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/%s.json", dir, name);
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "profile", "set", "local", "--endpoint", api_url(),
                                                    "--api-key", key, "--use", NULL);
        ctl_assert_code(r, 0);
}

static void worker_admin(const char *wid, const char *verb)
{
        char p[160];
        snprintf(p, sizeof(p), "/v1/workers/%s/%s", wid, verb);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", p, 200, NULL, NULL));
}

/* The ids of the two workers. */
static void worker_ids(char ids[2][64])
{
        _cleanup_json_ json_object *ws = sp_test_api(&S, S.admin_key, "GET", "/v1/workers", 200, NULL, NULL);
        json_object *arr = sp_test_jarr(ws, "workers");
        ck_assert_int_eq((int)json_object_array_length(arr), 2);
        for (int i = 0; i < 2; i++)
                snprintf(ids[i], 64, "%s", sp_test_jstr(json_object_array_get_idx(arr, (size_t)i), "id"));
}

/* Runs argv in a new sandbox of template tpl placed on worker `on` (the
 * other one cordoned meanwhile) and returns its stdout. */
static char *run_on(const char *key, const char *tpl, const char *on, const char *other, const char *cmd)
{
        worker_admin(other, "cordon");
        char body[256], id[64], wid[64];
        snprintf(body, sizeof(body), "{\"template\":\"%s\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}", tpl);
        sp_test_create_sandbox(&S, key, body, id);
        sp_test_sandbox_worker(&S, key, id, wid);
        worker_admin(other, "uncordon");
        ck_assert_str_eq(wid, on);
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "exec", id, "--", "sh", "-c", cmd, NULL);
        ctl_assert_code(r, 0);
        char *out = strdup(r.out.data ? r.out.data : "");
        _cleanup_ctl_result_ ctl_result rm = ctl_run(NULL, NULL, "sandbox", "rm", id, NULL);
        ctl_assert_code(rm, 0);
        return out;
}

START_TEST(pushed_templates_reach_every_worker)
{
        char key[256], ids[2][64], tgz[512], oci[512], tpl_ids[2][64];
        tenant("pusher", key);
        worker_ids(ids);
        make_rootfs("app", "hello from the archive");
        make_tarball("app", tgz);
        make_oci_archive("app", "bonjour", oci);

        /* A tarball: ready only once both workers hold it. */
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "--json", "template", "push", "app", tgz, NULL);
                ctl_assert_code(r, 0);
                _cleanup_json_ json_object *o = ctl_json(&r);
                ck_assert_str_eq(sp_test_jstr(o, "template.state"), "ready");
                ck_assert_str_eq(sp_test_jstr(o, "template.source"), "upload");
                ck_assert_str_eq(sp_test_jstr(o, "template.format"), "tar");
                char size[32];
                snprintf(size, sizeof(size), "%lld", (long long)file_size(tgz));
                ck_assert_str_eq(sp_test_jstr(o, "bytes"), size);
                /* Its size: the archive and the files unpacked from it. */
                snprintf(size, sizeof(size), "%lld", (long long)(file_size(tgz) + tree_bytes("app")));
                ck_assert_str_eq(sp_test_jstr(o, "template.size_bytes"), size);
                snprintf(tpl_ids[0], 64, "%s", sp_test_jstr(o, "template.id"));
        }
        for (int i = 0; i < 2; i++) {
                _cleanup_free_ char *out = run_on(key, "app", ids[i], ids[1 - i], "cat /hello.txt");
                ck_assert_str_eq(out, "hello from the archive");
        }

        /* An OCI image archive: the image's environment and working directory come with it. */
        {
                _cleanup_ctl_result_ ctl_result r =
                        ctl_run(NULL, NULL, "--json", "template", "push", "--oci", "img", oci, NULL);
                ctl_assert_code(r, 0);
                _cleanup_json_ json_object *o = ctl_json(&r);
                ck_assert_str_eq(sp_test_jstr(o, "template.state"), "ready");
                ck_assert_str_eq(sp_test_jstr(o, "template.format"), "oci");
                snprintf(tpl_ids[1], 64, "%s", sp_test_jstr(o, "template.id"));
        }
        for (int i = 0; i < 2; i++) {
                _cleanup_free_ char *out =
                        run_on(key, "img", ids[i], ids[1 - i], "echo \"$GREETING $(pwd) $(cat /hello.txt)\"");
                ck_assert_str_eq(out, "bonjour /tmp hello from the archive\n");
        }

        /* Deleted: gone from the API and from both workers. */
        for (int i = 0; i < 2; i++) {
                _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "template", "rm", i ? "img" : "app", NULL);
                ctl_assert_code(r, 0);
        }
        _cleanup_json_ json_object *mine = sp_test_api(&S, key, "GET", "/v1/templates", 200, NULL, NULL);
        ck_assert_msg(!strstr(json_object_to_json_string(mine), "\"app\""), "%s", json_object_to_json_string(mine));
        /* The workers report neither template nor archive any more (at their next heartbeats). */
        bool gone = false;
        for (int64_t deadline = ctl_mono_ms() + 30000; !gone && ctl_mono_ms() < deadline;) {
                _cleanup_json_ json_object *ws = sp_test_api(&S, S.admin_key, "GET", "/v1/workers", 200, NULL, NULL);
                const char *text = json_object_to_json_string(ws);
                gone = !strstr(text, tpl_ids[0]) && !strstr(text, tpl_ids[1]);
                if (!gone)
                        usleep(200 * 1000);
        }
        ck_assert_msg(gone, "a worker still reports %s or %s", tpl_ids[0], tpl_ids[1]);
}
END_TEST

/* PUT body (a string) to the data plane's upload url with token. */
static int dp_put(const char *url, const char *token, const char *body, json_object **ret)
{
        const char *path = strstr(url, "/v1/templates/");
        ck_assert_ptr_nonnull(path);
        char auth[4200];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        const char *headers[] = {auth, "Content-Type: application/octet-stream", NULL};
        sp_test_http_response r = {0};
        sp_error *err = NULL;
        sp_test_ok(sp_test_http(dp_port, "PUT", path, headers, body, 60000, &r, &err), &err);
        int status = r.status;
        if (ret)
                *ret = sp_test_http_json(&r);
        sp_test_http_response_free(&r);
        return status;
}

START_TEST(uploads_count_against_the_tenants_template_storage)
{
        char key[256], tgz[512];
        tenant("quota", key);
        make_rootfs("small", "small");
        make_tarball("small", tgz);

        /* 12 MiB per tenant, 10 MiB per upload: the first takes 10, the second what is left. */
        _cleanup_json_ json_object *a = sp_test_api(&S, key, "POST", "/v1/templates", 201,
                                                    "{\"name\":\"a\",\"source\":\"upload\",\"format\":\"tar\"}", NULL);
        ck_assert_str_eq(sp_test_jstr(a, "template.state"), "uploading");
        ck_assert_str_eq(sp_test_jstr(a, "upload.max_bytes"), "10485760");
        _cleanup_json_ json_object *b = sp_test_api(&S, key, "POST", "/v1/templates", 201,
                                                    "{\"name\":\"b\",\"source\":\"upload\",\"format\":\"tar\"}", NULL);
        ck_assert_str_eq(sp_test_jstr(b, "upload.max_bytes"), "2097152");
        _cleanup_json_ json_object *c = sp_test_api(&S, key, "POST", "/v1/templates", 429,
                                                    "{\"name\":\"c\",\"source\":\"upload\",\"format\":\"tar\"}", NULL);
        ck_assert_str_eq(sp_test_jstr(c, "error.code"), "resource_exhausted");

        /* More than the token allows: refused before a worker sees it; the template still waits. */
        _cleanup_free_ char *big = malloc(10 * MiB + 2);
        memset(big, 'x', 10 * MiB + 1);
        big[10 * MiB + 1] = '\0';
        _cleanup_json_ json_object *tl = NULL;
        ck_assert_int_eq(dp_put(sp_test_jstr(a, "upload.url"), sp_test_jstr(a, "upload.token"), big, &tl), 413);
        ck_assert_str_eq(sp_test_jstr(tl, "error.code"), "too_large");
        _cleanup_json_ json_object *ga = sp_test_api(&S, key, "GET", "/v1/templates/a", 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(ga, "state"), "uploading");

        /* An empty body is answered (the worker finds no archive in it), not left hanging. */
        {
                _cleanup_json_ json_object *empty = NULL;
                int st = dp_put(sp_test_jstr(b, "upload.url"), sp_test_jstr(b, "upload.token"), "", &empty);
                ck_assert_msg(st >= 400 && st < 500, "an empty upload: %d %s", st,
                              empty ? json_object_to_json_string(empty) : "");
        }

        /* One template's token does not upload another. */
        char other[512];
        snprintf(other, sizeof(other), "%s", sp_test_jstr(b, "upload.url"));
        _cleanup_json_ json_object *cross = NULL;
        ck_assert_int_eq(dp_put(other, sp_test_jstr(a, "upload.token"), "x", &cross), 403);

        /* Deleting one frees its reservation. */
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", "/v1/templates/a", 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        _cleanup_json_ json_object *c2 = sp_test_api(&S, key, "POST", "/v1/templates", 201,
                                                     "{\"name\":\"c\",\"source\":\"upload\",\"format\":\"tar\"}", NULL);
        ck_assert_str_eq(sp_test_jstr(c2, "upload.max_bytes"), "10485760");

        /* spacectl push of a template that waits for its archive takes it up (a fresh token). */
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "--json", "template", "push", "c", tgz, NULL);
                ctl_assert_code(r, 0);
                _cleanup_json_ json_object *o = ctl_json(&r);
                ck_assert_str_eq(sp_test_jstr(o, "template.state"), "ready");
                char size[32];
                snprintf(size, sizeof(size), "%lld", (long long)(file_size(tgz) + tree_bytes("small")));
                ck_assert_str_eq(sp_test_jstr(o, "template.size_bytes"), size);
        }
        /* Once in, the template counts with its real size: the rest is free again. */
        int64_t c_size = file_size(tgz) + tree_bytes("small");
        _cleanup_json_ json_object *again = sp_test_api(&S, key, "POST", "/v1/templates/b/upload", 200, NULL, NULL);
        ck_assert_int_eq((int)strtoll(sp_test_jstr(again, "upload.max_bytes"), NULL, 10),
                         (int)(10 * MiB < 12 * MiB - c_size ? 10 * MiB : 12 * MiB - c_size));
        /* A template that has its archive takes no other. */
        _cleanup_json_ json_object *no = sp_test_api(&S, key, "POST", "/v1/templates/c/upload", 409, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(no, "error.code"), "conflict");

        /* A file larger than what is left: spacectl says so before sending it. */
        char bigf[600];
        snprintf(bigf, sizeof(bigf), "%s/big.tar", dir);
        sh("head -c %d /dev/zero > '%s'", 11 * MiB, bigf);
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "template", "push", "b", bigf, NULL);
        ctl_assert_code(r, 1);
        ck_assert_msg(strstr(r.err.data, "this upload may hold"), "%s", r.err.data);
}
END_TEST

/* dir/<name>.tar.gz holding one file of mib MiB of zeros (a few KiB compressed). */
static void make_zeros(const char *name, int64_t bytes, char out[static 512])
{
        snprintf(out, 512, "%s/%s.tar.gz", dir, name);
        sh("set -e; r='%s/%s'; mkdir -p \"$r\"; head -c %lld /dev/zero > \"$r/zeros\"; tar -C \"$r\" -czf '%s' .; "
           "rm -f \"$r/zeros\"",
           dir, name, (long long)bytes, out);
}

/* Whether worker i's storage holds anything of template id: its files or its archive. */
static bool worker_holds(int i, const char *id)
{
        char p[1024];
        struct stat st;
        snprintf(p, sizeof(p), "%s/w%d/storage/templates/%s", S.dir, i, id);
        if (lstat(p, &st) == 0)
                return true;
        const char *const suffixes[] = {"", ".part", ".unpack"};
        for (size_t k = 0; k < 3; k++) {
                snprintf(p, sizeof(p), "%s/w%d/storage/artifacts/%s%s", S.dir, i, id, suffixes[k]);
                if (lstat(p, &st) == 0)
                        return true;
        }
        return false;
}

START_TEST(templates_count_what_they_unpack_to)
{
        char key[256], bomb[512], tgz[512], over[512];
        tenant("bomber", key);

        /* A decompression bomb: 64 MiB of zeros in a few KiB, more than the
         * tenant's 12 MiB but far less than the worker's 16 GiB per template. */
        make_zeros("bomb", 64 * MiB, bomb);
        ck_assert_int_lt(file_size(bomb), MiB);
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "template", "push", "bomb", bomb, NULL);
                ctl_assert_code(r, 1);
                ck_assert_msg(strstr(r.err.data, "tenant's template storage"), "%s", r.err.data);
        }
        _cleanup_json_ json_object *g = sp_test_api(&S, key, "GET", "/v1/templates/bomb", 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(g, "state"), "uploading");
        char bomb_id[64];
        snprintf(bomb_id, sizeof(bomb_id), "%s", sp_test_jstr(g, "id"));
        /* Nothing of it stays on the workers. */
        for (int i = 0; i < 2; i++)
                ck_assert_msg(!worker_holds(i, bomb_id), "worker %d holds something of %s", i, bomb_id);
        /* Its reservation is all it counted: deleted, the tenant has all its storage again. */
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", "/v1/templates/bomb", 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        _cleanup_json_ json_object *probe =
                sp_test_api(&S, key, "POST", "/v1/templates", 201,
                            "{\"name\":\"probe\",\"source\":\"upload\",\"format\":\"tar\"}", NULL);
        ck_assert_str_eq(sp_test_jstr(probe, "upload.max_bytes"), "10485760");
        _cleanup_json_ json_object *pdel = sp_test_api(&S, key, "DELETE", "/v1/templates/probe", 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(pdel, "operation.id"), true));

        /* An archive that fits: its size is the archive and its files. */
        make_rootfs("fits", "it fits");
        make_tarball("fits", tgz);
        int64_t size = file_size(tgz) + tree_bytes("fits");
        {
                _cleanup_ctl_result_ ctl_result r =
                        ctl_run(NULL, NULL, "--json", "template", "push", "fits", tgz, NULL);
                ctl_assert_code(r, 0);
                _cleanup_json_ json_object *o = ctl_json(&r);
                ck_assert_str_eq(sp_test_jstr(o, "template.state"), "ready");
        }
        _cleanup_json_ json_object *fits = sp_test_api(&S, key, "GET", "/v1/templates/fits", 200, NULL, NULL);
        ck_assert_int_eq(strtoll(sp_test_jstr(fits, "size_bytes"), NULL, 10), size);

        /* A second one within the per-upload bound (10 MiB) but more than is
         * left of the tenant's 12 MiB once its files are unpacked. */
        int64_t left = 12 * MiB - size;
        ck_assert_int_lt(left + MiB / 2, 10 * MiB);
        make_zeros("over", left + MiB / 2, over);
        ck_assert_int_lt(file_size(over), left);
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "template", "push", "over", over, NULL);
                ctl_assert_code(r, 1);
                ck_assert_msg(strstr(r.err.data, "tenant's template storage"), "%s", r.err.data);
        }
        _cleanup_json_ json_object *og = sp_test_api(&S, key, "GET", "/v1/templates/over", 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(og, "state"), "uploading");
        for (int i = 0; i < 2; i++)
                ck_assert(!worker_holds(i, sp_test_jstr(og, "id")));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_upload");
        TCase *tc = tcase_create("upload");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, pushed_templates_reach_every_worker);
        tcase_add_test(tc, uploads_count_against_the_tenants_template_storage);
        tcase_add_test(tc, templates_count_what_they_unpack_to);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
