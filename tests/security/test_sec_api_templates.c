/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack: a tenant registers a host directory as a template and reads it.
 *
 * POST /v1/templates with source dir, tar or oci names a path on the workers'
 * hosts, which the worker (root) copies into a template that any sandbox of
 * the tenant then reads. Against a real cluster (PostgreSQL, a control plane,
 * one worker with --template-import-root and a 16 MiB import bound):
 *
 *   - a tenant key is refused (403) for every host-path source, also with a
 *     tenant_id, and nothing is recorded;
 *   - an admin key is refused by the worker for every path outside its import
 *     root — a root-only host directory, the worker's storage (other
 *     sandboxes' root filesystems and templates), the control plane's state
 *     (the admin key) — and for symlinks inside the root that lead out: each
 *     build fails with one and the same message, which names no path, for a
 *     missing path as for a forbidden one;
 *   - a source inside the root imports, for the tenant it is registered for;
 *   - a decompression bomb (a small .tar.gz declaring 256 MiB) stops at the
 *     worker's byte bound with a clear error.
 *
 * And two attacks on the workers' imports: a tenant's debootstrap build is
 * refused unless the operator set a mirror for them (else the workers fetch
 * from the internet); and creating and deleting templates in a loop cannot
 * run more imports at once than --tenant-template-builds (a second cluster,
 * with a fake debootstrap that runs for a minute and a mirror for tenants).
 *
 * One cluster per test case (an unchecked fixture). Needs root, btrfs and
 * PostgreSQL.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "http_client.h"
#include "space/time.h"
#include "space_cluster.h"

/* The worker's one message for a source it will not open (worker/template/template.h). */
#define REFUSED \
        "no importable template source at that path: it must be inside the worker's template import root, " \
        "without symlinks or '..'"

static sp_test_space S;

static json_object *api(const char *key, const char *method, const char *path, int want_status, const char *body)
{
        return sp_test_api(&S, key, method, path, want_status, body, NULL);
}

static void cluster_up(void)
{
        static const char *const wargs[] = {"--template-max-bytes=16M", NULL};
        static const char *const cargs[] = {"--tenant-template-builds=2", NULL};
        sp_test_space_opts o = {.workers = 1, .worker_args = wargs, .cp_args = cargs};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
        char cmd[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
}

/* Registers a template as admin (for tenant, when not NULL) and waits for its
 * build; returns the finished operation (put it). */
static json_object *admin_build(const char *name, const char *source, const char *path, const char *tenant,
                                bool want_success)
{
        char body[2048];
        if (tenant)
                snprintf(body, sizeof(body), "{\"name\":\"%s\",\"source\":\"%s\",\"path\":\"%s\",\"tenant_id\":\"%s\"}",
                         name, source, path, tenant);
        else
                snprintf(body, sizeof(body), "{\"name\":\"%s\",\"source\":\"%s\",\"path\":\"%s\"}", name, source, path);
        _cleanup_json_ json_object *r = api(S.admin_key, "POST", "/v1/templates", 202, body);
        return sp_test_wait_op(&S, S.admin_key, sp_test_jstr(r, "operation.id"), want_success);
}

/* Asserts that building from path fails with exactly the worker's refusal
 * (naming no path), then deletes the failed template. */
static void assert_refused(const char *name, const char *source, const char *path)
{
        _cleanup_json_ json_object *op = admin_build(name, source, path, NULL, false);
        const char *msg = sp_test_jstr(op, "error.message");
        ck_assert_ptr_nonnull(msg);
        char want[512];
        snprintf(want, sizeof(want), "template %s: %s", sp_test_jstr(op, "target_id"), REFUSED);
        ck_assert_msg(strcmp(msg, want) == 0, "%s from %s: got \"%s\"", source, path, msg);
        ck_assert_msg(!strchr(msg, '/'), "the error names a path: %s", msg);
        char p[256];
        snprintf(p, sizeof(p), "/v1/templates/%s", name);
        _cleanup_json_ json_object *t = api(S.admin_key, "GET", p, 200, NULL);
        ck_assert_str_eq(sp_test_jstr(t, "state"), "failed");
        _cleanup_json_ json_object *del = api(S.admin_key, "DELETE", p, 202, NULL);
        json_object_put(sp_test_wait_op(&S, S.admin_key, sp_test_jstr(del, "operation.id"), true));
}

START_TEST(host_paths_are_for_admins_and_confined_to_the_import_root)
{
        char key[256], tenant[64];
        sp_test_new_tenant(&S, "thief", key);
        {
                _cleanup_json_ json_object *ks = api(key, "GET", "/v1/keys", 200, NULL);
                snprintf(tenant, sizeof(tenant), "%s",
                         sp_test_jstr(json_object_array_get_idx(sp_test_jarr(ks, "keys"), 0), "tenant_id"));
        }

        /* 1. A tenant names host paths: refused, whatever the source, and nothing is recorded. */
        static const char *const sources[] = {"dir", "tar", "oci"};
        for (size_t i = 0; i < 3; i++) {
                char body[512];
                snprintf(body, sizeof(body), "{\"name\":\"steal-%s\",\"source\":\"%s\",\"path\":\"/root\"}", sources[i],
                         sources[i]);
                _cleanup_json_ json_object *r = api(key, "POST", "/v1/templates", 403, body);
                ck_assert_str_eq(sp_test_jstr(r, "error.code"), "permission_denied");
                ck_assert_ptr_nonnull(strstr(sp_test_jstr(r, "error.message"), "admin"));
                snprintf(body, sizeof(body), "/v1/templates/steal-%s", sources[i]);
                json_object_put(api(key, "GET", body, 404, NULL));
        }
        char body[1024];
        snprintf(body, sizeof(body),
                 "{\"name\":\"steal\",\"source\":\"dir\",\"path\":\"%s/import\",\"tenant_id\":\"%s\"}", S.dir, tenant);
        json_object_put(api(key, "POST", "/v1/templates", 403, body));
        /* A debootstrap mirror would make the workers fetch any URL (the control
         * plane's own API here): only an admin chooses one. */
        {
                char mirror[512];
                snprintf(mirror, sizeof(mirror),
                         "{\"name\":\"ssrf\",\"source\":\"debootstrap\",\"suite\":\"bookworm\","
                         "\"mirror\":\"http://127.0.0.1:%d/v1/keys\"}",
                         S.api);
                _cleanup_json_ json_object *r = api(key, "POST", "/v1/templates", 403, mirror);
                ck_assert_ptr_nonnull(strstr(sp_test_jstr(r, "error.message"), "mirror"));
                json_object_put(api(key, "GET", "/v1/templates/ssrf", 404, NULL));
        }

        /* 2. An admin names paths outside the worker's import root: the worker refuses
         * them all alike, missing or not. The root holds symlinks that lead out. */
        sh("mkdir -p %s/hostsecret && echo s3cr3t > %s/hostsecret/f && chmod 700 %s/hostsecret", S.dir, S.dir, S.dir);
        sh("ln -sfn %s/hostsecret %s/import/link-out && ln -sfn ../w0/storage %s/import/link-storage", S.dir, S.dir,
           S.dir);
        sh("mkdir -p %s/import/sub && ln -sfn /etc %s/import/sub/etc", S.dir, S.dir);
        char p[8][700];
        snprintf(p[0], sizeof(p[0]), "%s/hostsecret", S.dir); /* a root-only host directory */
        snprintf(p[1], sizeof(p[1]), "%s/w0/storage/templates/base/rootfs", S.dir); /* the worker's storage */
        snprintf(p[2], sizeof(p[2]), "%s", S.dir); /* the control plane's state: admin.key */
        snprintf(p[3], sizeof(p[3]), "%s/import/link-out", S.dir);
        snprintf(p[4], sizeof(p[4]), "%s/import/link-storage/templates/base/rootfs", S.dir);
        snprintf(p[5], sizeof(p[5]), "%s/import/sub/etc", S.dir);
        snprintf(p[6], sizeof(p[6]), "%s/import/no-such-dir", S.dir); /* missing: the same answer */
        snprintf(p[7], sizeof(p[7]), "%s/import-sibling", S.dir); /* a prefix of the root's name is not inside it */
        sh("mkdir -p %s", p[7]);
        for (int i = 0; i < 8; i++) {
                char name[32];
                snprintf(name, sizeof(name), "out-%d", i);
                assert_refused(name, "dir", p[i]);
        }
        assert_refused("out-etc", "dir", "/etc");
        assert_refused("out-tar", "tar", "/etc/passwd");
        assert_refused("out-oci", "oci", "/");
        snprintf(p[0], sizeof(p[0]), "%s/import/sub", S.dir); /* a directory where a tarball is wanted */
        assert_refused("out-kind", "tar", p[0]);

        /* 3. Inside the root: imported, for the tenant named. */
        sh("rm -rf %s/import/sub && cp -a %s/w0/storage/templates/base/rootfs %s/import/good && "
           "echo inside > %s/import/good/etc/marker",
           S.dir, S.dir, S.dir, S.dir);
        snprintf(p[0], sizeof(p[0]), "%s/import/good", S.dir);
        json_object_put(admin_build("good", "dir", p[0], tenant, true));
        _cleanup_json_ json_object *t = api(key, "GET", "/v1/templates/good", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(t, "state"), "ready");
        ck_assert_str_eq(sp_test_jstr(t, "public"), "false");

        /* 4. A decompression bomb: 256 MiB of zeros in a small .tar.gz stops at the 16 MiB bound. */
        sh("cd %s && truncate -s 256M zeros && tar -czf import/bomb.tgz zeros && rm -f zeros", S.dir);
        snprintf(p[0], sizeof(p[0]), "%s/import/bomb.tgz", S.dir);
        _cleanup_json_ json_object *op = admin_build("bomb", "tar", p[0], NULL, false);
        const char *msg = sp_test_jstr(op, "error.message");
        ck_assert_msg(msg && strstr(msg, "exceeds 16777216 bytes"), "bomb: %s", msg ? msg : "(none)");
        ck_assert_msg(!strchr(msg, '/'), "the error names a path: %s", msg);
}
END_TEST

/* Each template uploading or building is an import on the workers: one
 * tenant may hold only --tenant-template-builds of them (2 here) while its
 * storage (64 GiB, 16 GiB reserved per upload) would allow more; another
 * tenant is still served. */
START_TEST(imports_per_tenant_are_bounded)
{
        char busy[256], calm[256];
        sp_test_new_tenant(&S, "busy", busy);
        sp_test_new_tenant(&S, "calm", calm);
        static const char *const names[] = {"a", "b", "c"};
        char body[256];
        for (int i = 0; i < 2; i++) {
                snprintf(body, sizeof(body), "{\"name\":\"%s\",\"source\":\"upload\",\"format\":\"tar\"}", names[i]);
                json_object_put(api(busy, "POST", "/v1/templates", 201, body));
        }
        snprintf(body, sizeof(body), "{\"name\":\"c\",\"source\":\"upload\",\"format\":\"tar\"}");
        _cleanup_json_ json_object *r = api(busy, "POST", "/v1/templates", 429, body);
        ck_assert_str_eq(sp_test_jstr(r, "error.code"), "resource_exhausted");
        ck_assert_msg(strstr(sp_test_jstr(r, "error.message"), "uploading, building or being deleted"), "%s",
                      sp_test_jstr(r, "error.message"));
        json_object_put(api(busy, "GET", "/v1/templates/c", 404, NULL));
        /* Another tenant is not held up by it. */
        json_object_put(api(calm, "POST", "/v1/templates", 201, body));
        /* One fewer in flight: the tenant may start another. */
        _cleanup_json_ json_object *del = api(busy, "DELETE", "/v1/templates/a", 202, NULL);
        json_object_put(sp_test_wait_op(&S, busy, sp_test_jstr(del, "operation.id"), true));
        json_object_put(api(busy, "POST", "/v1/templates", 201, body));
}
END_TEST

/* Without a mirror for tenants (this cluster's control plane has none), a
 * tenant's debootstrap build would fetch from debootstrap's default mirror on
 * the internet: refused before anything is recorded or fetched. */
START_TEST(tenants_build_from_debootstrap_only_with_the_operators_mirror)
{
        char key[256];
        sp_test_new_tenant(&S, "debian", key);
        _cleanup_json_ json_object *r = api(key, "POST", "/v1/templates", 400,
                                            "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\"}");
        ck_assert_str_eq(sp_test_jstr(r, "error.code"), "failed_precondition");
        ck_assert_msg(strstr(sp_test_jstr(r, "error.message"), "debootstrap mirror"), "%s",
                      sp_test_jstr(r, "error.message"));
        json_object_put(api(key, "GET", "/v1/templates/deb", 404, NULL));
}
END_TEST

/* ---- a second cluster: a fake debootstrap, and a mirror for tenants ---- */

#define TENANT_MIRROR "http://mirror.invalid/debian"

static sp_test_space B;
static char *fake_dir;

/* Runs a minute (suite "quick": at once), then makes a root filesystem
 * recording the mirror it was given. */
static const char fake_debootstrap[] =
        "#!/bin/sh\n"
        "# the worker runs: PROGRAM --variant=minbase SUITE DEST [MIRROR]\n"
        "[ \"$2\" = quick ] || for i in $(seq 240); do echo \"I: step $i\"; sleep 0.25; done\n"
        "mkdir -p \"$3/etc\" && echo \"${4:-none}\" > \"$3/etc/mirror\"\n";

static void builds_up(void)
{
        fake_dir = sp_test_tmpdir("secdeb");
        ck_assert_int_eq(chmod(fake_dir, 0755), 0);
        char path[512];
        snprintf(path, sizeof(path), "%s/fake-debootstrap", fake_dir);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(fake_debootstrap, f);
        fclose(f);
        ck_assert_int_eq(chmod(path, 0755), 0);
        static char prog[600];
        snprintf(prog, sizeof(prog), "--debootstrap-program=%s", path);
        static const char *wargs[] = {prog, NULL};
        static const char *const cargs[] = {"--tenant-template-builds=2", "--debootstrap-mirror=" TENANT_MIRROR, NULL};
        sp_test_space_opts o = {.workers = 1, .worker_args = wargs, .cp_args = cargs};
        sp_test_space_up(&B, &o);
}

static void builds_down(void)
{
        sp_test_space_down(&B);
        sp_test_tmpdir_remove(fake_dir);
        free(fake_dir);
}

/* How many fake debootstrap runs there are (suite prefix: NULL for any). */
static int fakes_running(const char *suite)
{
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f 2>/dev/null | "
                 "grep -qs -- '%s/fake-debootstra[p] --variant=minbase %s' && echo; done | wc -l",
                 fake_dir, suite ? suite : "");
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        int n = -1;
        ck_assert_int_eq(fscanf(p, "%d", &n), 1);
        pclose(p);
        return n;
}

/* POST /v1/templates as key: the status, and the body in *ret (put it). */
static int create(const char *key, const char *body, json_object **ret)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        const char *headers[] = {auth, NULL};
        sp_test_http_response r;
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(B.api, "POST", "/v1/templates", headers, body, 60000, &r, &e), &e);
        int status = r.status;
        *ret = r.body_len ? sp_test_http_json(&r) : NULL;
        sp_test_http_response_free(&r);
        return status;
}

/* The mirror the fake recorded in template id's files on the worker. */
static char *recorded_mirror(const char *id)
{
        char path[700];
        snprintf(path, sizeof(path), "%s/w0/storage/templates/%s/rootfs/etc/mirror", B.dir, id);
        FILE *f = fopen(path, "r");
        ck_assert_msg(f, "no %s", path);
        char line[256] = "";
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
        fclose(f);
        line[strcspn(line, "\n")] = '\0';
        return strdup(line);
}

/* A tenant creates a debootstrap template, deletes it while it builds, and
 * creates another, again and again: a template being deleted counts among
 * its builds until the worker has stopped its import, so at no time do more
 * than --tenant-template-builds (2) of its imports run. */
START_TEST(create_delete_cycles_stay_within_the_builds_cap)
{
        char key[256];
        sp_test_new_tenant(&B, "cycler", key);
        for (int i = 0; i < 5; i++) {
                char body[256], suite[16];
                snprintf(suite, sizeof(suite), "s%d", i);
                snprintf(body, sizeof(body), "{\"name\":\"c%d\",\"source\":\"debootstrap\",\"suite\":\"%s\"}", i,
                         suite);
                /* Refused while the earlier ones still count; taken once they are gone. */
                json_object *r = NULL;
                int64_t until = sp_now_mono_us() + 30 * 1000000;
                int status;
                while ((status = create(key, body, &r)) == 429 && sp_now_mono_us() < until) {
                        ck_assert_str_eq(sp_test_jstr(r, "error.code"), "resource_exhausted");
                        json_object_put(r);
                        usleep(100000);
                }
                ck_assert_msg(status == 202, "create %d: %d %s", i, status, json_object_to_json_string(r));
                json_object_put(r);
                until = sp_now_mono_us() + 30 * 1000000;
                while (fakes_running(suite) == 0 && sp_now_mono_us() < until)
                        usleep(50000);
                ck_assert_msg(fakes_running(suite) == 1, "build %d did not start", i);
                ck_assert_msg(fakes_running(NULL) <= 2, "%d imports run at once after %d creates", fakes_running(NULL),
                              i + 1);
                char path[64];
                snprintf(path, sizeof(path), "/v1/templates/c%d", i);
                json_object_put(sp_test_api(&B, key, "DELETE", path, 202, NULL, NULL));
        }
        /* The deletes stop every build. */
        int64_t until = sp_now_mono_us() + 30 * 1000000;
        while (fakes_running(NULL) > 0 && sp_now_mono_us() < until)
                usleep(100000);
        ck_assert_int_eq(fakes_running(NULL), 0);

        /* A tenant's build fetches from the operator's mirror; an admin's may use the workers' default. */
        _cleanup_json_ json_object *t =
                sp_test_api(&B, key, "POST", "/v1/templates", 202,
                            "{\"name\":\"q\",\"source\":\"debootstrap\",\"suite\":\"quick\"}", NULL);
        json_object_put(sp_test_wait_op(&B, key, sp_test_jstr(t, "operation.id"), true));
        _cleanup_free_ char *m1 = recorded_mirror(sp_test_jstr(t, "template.id"));
        ck_assert_str_eq(m1, TENANT_MIRROR);
        _cleanup_json_ json_object *a =
                sp_test_api(&B, B.admin_key, "POST", "/v1/templates", 202,
                            "{\"name\":\"qa\",\"source\":\"debootstrap\",\"suite\":\"quick\"}", NULL);
        json_object_put(sp_test_wait_op(&B, B.admin_key, sp_test_jstr(a, "operation.id"), true));
        _cleanup_free_ char *m2 = recorded_mirror(sp_test_jstr(a, "template.id"));
        ck_assert_str_eq(m2, "none");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_api_templates");
        TCase *tc = tcase_create("templates");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, host_paths_are_for_admins_and_confined_to_the_import_root);
        tcase_add_test(tc, imports_per_tenant_are_bounded);
        tcase_add_test(tc, tenants_build_from_debootstrap_only_with_the_operators_mirror);
        suite_add_tcase(s, tc);
        TCase *builds = tcase_create("builds");
        tcase_set_timeout(builds, 300);
        tcase_add_unchecked_fixture(builds, builds_up, builds_down);
        tcase_add_test(builds, create_delete_cycles_stay_within_the_builds_cap);
        suite_add_tcase(s, builds);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
