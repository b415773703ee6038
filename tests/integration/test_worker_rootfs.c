/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates, sandboxes, subvolumes and quotas on a real btrfs (a loop device
 * of the test harness): a sealed template is read-only and snapshots to a
 * read-only copy; a sandbox's snapshot is writable while its template stays
 * unchanged; a snapshot shares its template's data (qgroup numbers);
 * subvolumes nested inside a sandbox are deleted with it; a write past the
 * sandbox's quota fails with EDQUOT; invalid names are refused. Root only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "btrfs.h"
#include "harness.h"
#include "rootfs/rootfs.h"
#include "space/cleanup.h"

#define MiB (UINT64_C(1) << 20)
#define PATHF(buf, ...) ck_assert_int_lt(snprintf((buf), sizeof(buf), __VA_ARGS__), (int)sizeof(buf))

static sp_test_btrfs g_fs;

static void fs_setup(void)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_btrfs_create(0, &g_fs, &err), &err);
}

static void fs_teardown(void)
{
        sp_test_btrfs_destroy(&g_fs);
}

static wk_storage *storage(void)
{
        wk_storage *st = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_storage_open(g_fs.mnt, NULL, 0, &st, &err), &err);
        ck_assert_int_eq(st->origin, WK_STORAGE_NATIVE);
        return st;
}

static void write_file(const char *path, const char *text)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
}

static void assert_file(const char *path, const char *text)
{
        char buf[256] = {0};
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
        ck_assert_int_ge(read(fd, buf, sizeof(buf) - 1), 0);
        ck_assert_str_eq(buf, text);
}

/* Writes size bytes of incompressible data; returns 0 or the errno of the
 * first failing write(2)/fsync(2), with *written what got through. */
static int write_random(const char *path, uint64_t size, uint64_t *written)
{
        static unsigned char chunk[MiB];
        uint64_t x = 0x9E3779B97F4A7C15u ^ (uint64_t)size;
        for (size_t i = 0; i < sizeof(chunk); i += 8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                memcpy(chunk + i, &x, 8);
        }
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
        *written = 0;
        while (*written < size) {
                chunk[0]++; /* no two chunks alike */
                size_t n = size - *written < sizeof(chunk) ? (size_t)(size - *written) : sizeof(chunk);
                ssize_t w = write(fd, chunk, n);
                if (w < 0)
                        return errno;
                *written += (uint64_t)w;
        }
        return fsync(fd) < 0 ? errno : 0;
}

/* A sealed template "base" holding hello="original" (and more when given). */
static char *make_template(wk_storage *st, const char *name, uint64_t extra_bytes)
{
        sp_error *err = NULL;
        char *rootfs = NULL;
        sp_test_ok(wk_storage_template_create(st, name, &rootfs, &err), &err);
        char p[PATH_MAX];
        PATHF(p, "%s/etc", rootfs);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        PATHF(p, "%s/etc/hello", rootfs);
        write_file(p, "original");
        if (extra_bytes) {
                uint64_t w;
                PATHF(p, "%s/blob", rootfs);
                ck_assert_int_eq(write_random(p, extra_bytes, &w), 0);
        }
        sp_test_ok(wk_storage_template_seal(st, name, &err), &err);
        return rootfs;
}

START_TEST(template_sealed_and_snapshotted_read_only)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        _cleanup_free_ char *tpl = make_template(st, "base", 0);

        bool ro = false, is = false;
        sp_test_ok(wk_subvol_get_read_only(tpl, &ro, &err), &err);
        ck_assert(ro);
        sp_test_ok(wk_subvol_is(tpl, &is, &err), &err);
        ck_assert(is);
        char p[PATH_MAX];
        PATHF(p, "%s/etc/new", tpl);
        ck_assert_int_eq(open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644), -1);
        ck_assert_int_eq(errno, EROFS);

        /* A read-only snapshot of the template: a checkpoint with the same data. */
        char snap[PATH_MAX];
        PATHF(snap, "%s/checkpoint", g_fs.mnt);
        sp_test_ok(wk_subvol_snapshot(tpl, snap, true, &err), &err);
        sp_test_ok(wk_subvol_is(snap, &is, &err), &err);
        ck_assert(is);
        sp_test_ok(wk_subvol_get_read_only(snap, &ro, &err), &err);
        ck_assert(ro);
        PATHF(p, "%s/etc/hello", snap);
        assert_file(p, "original");
        uint64_t id_tpl = 0, id_snap = 0;
        sp_test_ok(wk_subvol_id(tpl, &id_tpl, &err), &err);
        sp_test_ok(wk_subvol_id(snap, &id_snap, &err), &err);
        ck_assert_uint_ne(id_tpl, id_snap);

        /* Made writable again on request, and deleted. */
        sp_test_ok(wk_subvol_set_read_only(snap, false, &err), &err);
        PATHF(p, "%s/etc/hello", snap);
        write_file(p, "edited");
        sp_test_ok(wk_subvol_delete(snap, &err), &err);
        ck_assert_int_eq(access(snap, F_OK), -1);

        /* Plain directories are not subvolumes; missing paths are errors. */
        PATHF(p, "%s/etc", tpl);
        sp_test_ok(wk_subvol_is(p, &is, &err), &err);
        ck_assert(!is);
        sp_test_ok(wk_subvol_is("/proc", &is, &err), &err);
        ck_assert(!is);
        ck_assert_int_eq(wk_subvol_is(snap, &is, NULL), -SP_E_NOT_FOUND);
        ck_assert_int_eq(wk_subvol_delete(snap, NULL), -SP_E_NOT_FOUND);
        ck_assert_int_eq(wk_subvol_create(tpl, NULL), -SP_E_CONFLICT);

        /* Deleting the template removes its directory. */
        sp_test_ok(wk_storage_template_delete(st, "base", &err), &err);
        _cleanup_free_ char *tdir = wk_storage_template_dir(st, "base", NULL);
        ck_assert_int_eq(access(tdir, F_OK), -1);
        sp_test_ok(wk_storage_template_delete(st, "base", &err), &err); /* already gone: fine */
}
END_TEST

START_TEST(sandbox_writable_template_unchanged)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        _cleanup_free_ char *tpl = make_template(st, "base", 0);
        _cleanup_free_ char *a = NULL, *b = NULL;
        sp_test_ok(wk_storage_sandbox_create(st, "base", "sbx_a", 0, 0, &a, &err), &err);
        sp_test_ok(wk_storage_sandbox_create(st, "base", "sbx_b", 0, 0, &b, &err), &err);
        _cleanup_free_ char *expect = wk_storage_sandbox_rootfs(st, "sbx_a", NULL);
        ck_assert_str_eq(a, expect);

        bool ro = true;
        sp_test_ok(wk_subvol_get_read_only(a, &ro, &err), &err);
        ck_assert(!ro);
        char p[PATH_MAX], q[PATH_MAX];
        PATHF(p, "%s/etc/hello", a);
        write_file(p, "changed in a");
        PATHF(p, "%s/only-in-a", a);
        write_file(p, "new");
        PATHF(p, "%s/etc/hello", b);
        ck_assert_int_eq(unlink(p), 0);

        PATHF(p, "%s/etc/hello", a);
        assert_file(p, "changed in a");
        PATHF(q, "%s/etc/hello", tpl);
        assert_file(q, "original");
        PATHF(q, "%s/only-in-a", tpl);
        ck_assert_int_eq(access(q, F_OK), -1);
        PATHF(q, "%s/only-in-a", b);
        ck_assert_int_eq(access(q, F_OK), -1);

        char **names = NULL;
        sp_test_ok(wk_storage_list(st, false, &names, &err), &err);
        ck_assert_str_eq(names[0], "sbx_a");
        ck_assert_str_eq(names[1], "sbx_b");
        ck_assert_ptr_null(names[2]);
        sp_strv_freep(&names);

        sp_test_ok(wk_storage_sandbox_delete(st, "sbx_a", &err), &err);
        sp_test_ok(wk_storage_sandbox_delete(st, "sbx_b", &err), &err);
        sp_test_ok(wk_storage_list(st, false, &names, &err), &err);
        ck_assert_ptr_null(names[0]);
        sp_strv_freep(&names);
        PATHF(q, "%s/etc/hello", tpl);
        assert_file(q, "original");
        sp_test_ok(wk_storage_template_delete(st, "base", &err), &err);
}
END_TEST

START_TEST(bad_requests_leave_nothing)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        free(make_template(st, "base", 0));

        static const char *const bad[] = {"", "..", "../templates/base", "a/b", ".hidden", "x y", "-x"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_int_eq(wk_storage_sandbox_create(st, "base", bad[i], 0, 0, NULL, NULL), -SP_E_INVALID);
                ck_assert_int_eq(wk_storage_sandbox_create(st, bad[i], "sbx_ok", 0, 0, NULL, NULL), -SP_E_INVALID);
                ck_assert_int_eq(wk_storage_template_create(st, bad[i], NULL, NULL), -SP_E_INVALID);
                ck_assert_int_eq(wk_storage_sandbox_delete(st, bad[i], NULL), -SP_E_INVALID);
                ck_assert_int_eq(wk_storage_template_delete(st, bad[i], NULL), -SP_E_INVALID);
        }

        ck_assert_int_eq(wk_storage_sandbox_create(st, "missing", "sbx_1", 0, 0, NULL, &err), -SP_E_NOT_FOUND);
        sp_error_free(err);
        err = NULL;
        _cleanup_free_ char *draft = NULL;
        sp_test_ok(wk_storage_template_create(st, "draft", &draft, &err), &err);
        ck_assert_int_eq(wk_storage_sandbox_create(st, "draft", "sbx_1", 0, 0, NULL, &err), -SP_E_CONFLICT);
        ck_assert_msg(strstr(err->message, "not sealed"), "%s", err->message);
        sp_error_free(err);
        err = NULL;
        ck_assert_int_eq(wk_storage_template_create(st, "base", NULL, NULL), -SP_E_CONFLICT);
        sp_test_ok(wk_storage_sandbox_create(st, "base", "sbx_1", 0, 0, NULL, &err), &err);
        ck_assert_int_eq(wk_storage_sandbox_create(st, "base", "sbx_1", 0, 0, NULL, NULL), -SP_E_CONFLICT);

        /* Only valid names are listed; stray entries are skipped. */
        char p[PATH_MAX];
        PATHF(p, "%s/templates/.partial", g_fs.mnt);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        char **names = NULL;
        sp_test_ok(wk_storage_list(st, true, &names, &err), &err);
        ck_assert_str_eq(names[0], "base");
        ck_assert_str_eq(names[1], "draft");
        ck_assert_ptr_null(names[2]);
        sp_strv_freep(&names);
        sp_test_ok(wk_storage_list(st, false, &names, &err), &err);
        ck_assert_str_eq(names[0], "sbx_1");
        ck_assert_ptr_null(names[1]);
        sp_strv_freep(&names);
}
END_TEST

START_TEST(nested_subvolumes_deleted_with_sandbox)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        free(make_template(st, "base", 0));
        _cleanup_free_ char *root = NULL;
        sp_test_ok(wk_storage_sandbox_create(st, "base", "sbx_n", 0, 0, &root, &err), &err);

        /* What a sandbox might build inside itself: nested subvolumes, a
         * read-only snapshot among them, files and directories around them. */
        char p[PATH_MAX], q[PATH_MAX];
        PATHF(p, "%s/nested", root);
        sp_test_ok(wk_subvol_create(p, &err), &err);
        PATHF(p, "%s/nested/deeper", root);
        sp_test_ok(wk_subvol_create(p, &err), &err);
        PATHF(p, "%s/nested/deeper/file", root);
        write_file(p, "x");
        PATHF(p, "%s/home", root);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        PATHF(p, "%s/nested/deeper", root);
        PATHF(q, "%s/home/frozen", root);
        sp_test_ok(wk_subvol_snapshot(p, q, true, &err), &err);

        char **subs = NULL;
        sp_test_ok(wk_subvol_list(root, &subs, &err), &err);
        size_t n = 0;
        bool deeper = false, frozen = false;
        for (; subs[n]; n++) {
                deeper |= strcmp(subs[n], "nested/deeper") == 0;
                frozen |= strcmp(subs[n], "home/frozen") == 0;
        }
        sp_strv_freep(&subs);
        ck_assert_uint_eq(n, 3);
        ck_assert(deeper && frozen);

        sp_test_ok(wk_storage_sandbox_delete(st, "sbx_n", &err), &err);
        _cleanup_free_ char *dir = wk_storage_sandbox_dir(st, "sbx_n", NULL);
        ck_assert_int_eq(access(dir, F_OK), -1);
        /* Nothing of the sandbox is left on the filesystem: only the template. */
        sp_test_ok(wk_subvol_list(g_fs.mnt, &subs, &err), &err);
        ck_assert_str_eq(subs[0], "templates/base/rootfs");
        ck_assert_ptr_null(subs[1]);
        sp_strv_freep(&subs);
        sp_test_ok(wk_storage_sandbox_delete(st, "sbx_n", &err), &err); /* already gone: fine */
}
END_TEST

START_TEST(snapshot_shares_template_data)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        sp_test_ok(wk_quota_enable(g_fs.mnt, &err), &err);
        bool on = false;
        sp_test_ok(wk_quota_enabled(g_fs.mnt, &on, &err), &err);
        ck_assert(on);
        sp_test_ok(wk_quota_enable(g_fs.mnt, &err), &err); /* again: a no-op */

        _cleanup_free_ char *tpl = make_template(st, "big", 16 * MiB);
        _cleanup_free_ char *root = NULL;
        sp_test_ok(wk_storage_sandbox_create(st, "big", "sbx_s", 0, 0, &root, &err), &err);
        sp_test_ok(wk_subvol_sync(g_fs.mnt, &err), &err);

        wk_quota_usage t, s;
        sp_test_ok(wk_quota_get(tpl, &t, &err), &err);
        sp_test_ok(wk_quota_get(root, &s, &err), &err);
        /* Both reference the 16 MiB; neither holds them exclusively. */
        ck_assert_uint_ge(t.referenced, 16 * MiB);
        ck_assert_uint_ge(s.referenced, 16 * MiB);
        ck_assert_uint_lt(s.exclusive, 1 * MiB);
        ck_assert_uint_lt(t.exclusive, 1 * MiB);
        ck_assert_uint_eq(s.max_exclusive, 0);

        /* What the sandbox writes is its own. */
        char p[PATH_MAX];
        uint64_t w;
        PATHF(p, "%s/mine", root);
        ck_assert_int_eq(write_random(p, 4 * MiB, &w), 0);
        sp_test_ok(wk_subvol_sync(g_fs.mnt, &err), &err);
        sp_test_ok(wk_quota_get(root, &s, &err), &err);
        ck_assert_uint_ge(s.exclusive, 4 * MiB);
        ck_assert_uint_lt(s.exclusive, 5 * MiB);
}
END_TEST

START_TEST(quota_enforced_with_edquot)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        sp_test_ok(wk_quota_enable(g_fs.mnt, &err), &err);
        free(make_template(st, "base", 4 * MiB));
        _cleanup_free_ char *root = NULL;
        sp_test_ok(wk_storage_sandbox_create(st, "base", "sbx_q", 8 * MiB, 0, &root, &err), &err);
        wk_quota_usage u;
        sp_test_ok(wk_quota_get(root, &u, &err), &err);
        ck_assert_uint_eq(u.max_exclusive, 8 * MiB);

        /* Within the quota: fine. */
        char p[PATH_MAX];
        uint64_t w = 0;
        PATHF(p, "%s/small", root);
        ck_assert_int_eq(write_random(p, 2 * MiB, &w), 0);

        /* Past it: EDQUOT, after no more than the quota got through. */
        PATHF(p, "%s/big", root);
        int e = write_random(p, 64 * MiB, &w);
        ck_assert_msg(e == EDQUOT, "writing past the quota gave \"%s\" after %llu bytes", strerror(e),
                      (unsigned long long)w);
        ck_assert_uint_le(w, 8 * MiB);

        /* The template's shared 4 MiB never counted against the sandbox, and
         * lifting the limit lets the sandbox write again. */
        sp_test_ok(wk_quota_set_limit(root, 0, &err), &err);
        sp_test_ok(wk_quota_get(root, &u, &err), &err);
        ck_assert_uint_eq(u.max_exclusive, 0);
        ck_assert_int_eq(write_random(p, 24 * MiB, &w), 0);
        sp_test_ok(wk_storage_sandbox_delete(st, "sbx_q", &err), &err);
}
END_TEST

/* A VM's disk and memory state live beside its rootfs: with files_bytes the
 * sandbox's directory is a subvolume of its own whose quota bounds them. */
START_TEST(files_beside_the_rootfs_have_their_own_quota)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        sp_test_ok(wk_quota_enable(g_fs.mnt, &err), &err);
        free(make_template(st, "base", 4 * MiB));
        _cleanup_free_ char *root = NULL;
        sp_test_ok(wk_storage_sandbox_create(st, "base", "sbx_f", 8 * MiB, 16 * MiB, &root, &err), &err);
        _cleanup_free_ char *dir = wk_storage_sandbox_dir(st, "sbx_f", &err);
        ck_assert_ptr_nonnull(dir);
        bool sub = false;
        sp_test_ok(wk_subvol_is(dir, &sub, &err), &err);
        ck_assert_msg(sub, "the sandbox's directory is not a subvolume");
        struct stat s;
        ck_assert_int_eq(stat(dir, &s), 0);
        ck_assert_int_eq(s.st_mode & 07777, 0700);
        wk_quota_usage u;
        sp_test_ok(wk_quota_get(dir, &u, &err), &err);
        ck_assert_uint_eq(u.max_exclusive, 16 * MiB);
        sp_test_ok(wk_quota_get(root, &u, &err), &err);
        ck_assert_uint_eq(u.max_exclusive, 8 * MiB);

        /* Past it: EDQUOT, after no more than the quota got through; the rootfs's own is apart. */
        char p[PATH_MAX];
        uint64_t w = 0;
        PATHF(p, "%s/disk.ext4", dir);
        int e = write_random(p, 64 * MiB, &w);
        ck_assert_msg(e == EDQUOT, "writing past the files' quota gave \"%s\" after %llu bytes", strerror(e),
                      (unsigned long long)w);
        ck_assert_uint_le(w, 16 * MiB);
        PATHF(p, "%s/small", root);
        ck_assert_int_eq(write_random(p, 2 * MiB, &w), 0);

        /* Made again over an existing one: refused, the first untouched; deleted: nothing left. */
        ck_assert_int_eq(wk_storage_sandbox_create(st, "base", "sbx_f", 8 * MiB, 16 * MiB, NULL, NULL), -SP_E_CONFLICT);
        PATHF(p, "%s/small", root);
        ck_assert_int_eq(access(p, F_OK), 0);
        sp_test_ok(wk_storage_sandbox_delete(st, "sbx_f", &err), &err);
        ck_assert_int_eq(access(dir, F_OK), -1);

        /* An empty one (a sandbox moved here) gets the same. */
        sp_test_ok(wk_storage_sandbox_create_empty(st, "sbx_e", 16 * MiB, NULL, &err), &err);
        _cleanup_free_ char *edir = wk_storage_sandbox_dir(st, "sbx_e", &err);
        sp_test_ok(wk_quota_get(edir, &u, &err), &err);
        ck_assert_uint_eq(u.max_exclusive, 16 * MiB);
        sp_test_ok(wk_storage_sandbox_delete(st, "sbx_e", &err), &err);
}
END_TEST

START_TEST(quota_needs_quotas_enabled)
{
        _cleanup_storage_ wk_storage *st = storage();
        sp_error *err = NULL;
        bool on = true;
        sp_test_ok(wk_quota_enabled(g_fs.mnt, &on, &err), &err);
        ck_assert(!on);
        _cleanup_free_ char *tpl = make_template(st, "base", 0);
        ck_assert_int_eq(wk_storage_sandbox_create(st, "base", "sbx_1", 8 * MiB, 0, NULL, &err), -SP_E_CONFLICT);
        ck_assert_msg(strstr(err->message, "quotas are not enabled"), "%s", err->message);
        sp_error_free(err);
        err = NULL;
        _cleanup_free_ char *dir = wk_storage_sandbox_dir(st, "sbx_1", NULL);
        ck_assert_int_eq(access(dir, F_OK), -1);
        ck_assert_int_eq(wk_storage_sandbox_create(st, "base", "sbx_1", 0, 8 * MiB, NULL, &err), -SP_E_CONFLICT);
        ck_assert_msg(strstr(err->message, "quotas are not enabled"), "%s", err->message);
        sp_error_free(err);
        err = NULL;
        ck_assert_int_eq(access(dir, F_OK), -1);
        wk_quota_usage u;
        ck_assert_int_eq(wk_quota_get(tpl, &u, NULL), -SP_E_NOT_FOUND);
}
END_TEST

/* One TCase (one fresh filesystem, made and destroyed by the parent) per test. */
static void add(Suite *s, const char *name, const TTest *t)
{
        TCase *tc = tcase_create(name);
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, fs_setup, fs_teardown);
        tcase_add_test(tc, t);
        suite_add_tcase(s, tc);
}

static Suite *suite(void)
{
        Suite *s = suite_create("worker_rootfs");
        add(s, "template", template_sealed_and_snapshotted_read_only);
        add(s, "sandbox", sandbox_writable_template_unchanged);
        add(s, "refusals", bad_requests_leave_nothing);
        add(s, "nested", nested_subvolumes_deleted_with_sandbox);
        add(s, "shared", snapshot_shares_template_data);
        add(s, "quota", quota_enforced_with_edquot);
        add(s, "quota_off", quota_needs_quotas_enabled);
        add(s, "files_quota", files_beside_the_rootfs_have_their_own_quota);
        return s;
}

int main(void)
{
        sp_test_btrfs_require();
        return sp_test_main(suite());
}
