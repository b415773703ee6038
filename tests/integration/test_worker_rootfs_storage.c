/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker's storage on a directory that is not btrfs: a sparse image is
 * created, formatted and loop-mounted; a restarted daemon reuses the mount
 * instead of mounting twice; closing unmounts it and leaves no loop device;
 * an existing image is mounted again with its data; bad arguments and
 * foreign files are refused without side effects. Root only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "btrfs.h"
#include "harness.h"
#include "rootfs/mountinfo.h"
#include "rootfs/rootfs.h"
#include "space/cleanup.h"
#include "space/time.h"

#define IMAGE_SIZE (UINT64_C(256) << 20)
/* snprintf into a path buffer, failing the test on truncation. */
#define PATHF(buf, ...) ck_assert_int_lt(snprintf((buf), sizeof(buf), __VA_ARGS__), (int)sizeof(buf))

static char *g_tmp;
static char g_dir[PATH_MAX], g_dir2[PATH_MAX], g_image[PATH_MAX];

/* The loop device attached to path, or -1 (read from sysfs, independently
 * of the code under test). */
static int loop_of(const char *path)
{
        for (int nr = 0; nr < 1024; nr++) {
                if (sp_test_loop_attached_to(nr, path))
                        return nr;
        }
        return -1;
}

static int mounts_on(const char *point)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
        ck_assert_ptr_nonnull(f);
        char line[8192];
        int n = 0;
        while (fgets(line, sizeof(line), f)) {
                wk_mountinfo_entry e;
                if (wk_mountinfo_parse_line(line, strlen(line), &e, NULL) == 0) {
                        n += strcmp(e.mount_point, point) == 0;
                        wk_mountinfo_entry_clear(&e);
                }
        }
        return n;
}

static bool is_btrfs(const char *path)
{
        struct statfs s;
        return statfs(path, &s) == 0 && (unsigned long)s.f_type == (unsigned long)BTRFS_SUPER_MAGIC;
}

static void setup(void)
{
        g_tmp = sp_test_tmpdir("storage");
        char real[PATH_MAX];
        ck_assert_ptr_nonnull(realpath(g_tmp, real));
        PATHF(g_dir, "%s/storage", real);
        PATHF(g_dir2, "%s/other", real);
        PATHF(g_image, "%s/storage.img", real);
}

/* Runs in the parent even when a test crashed: unmount and detach whatever
 * is left, then report it (a leak fails the next test's checks). */
static void teardown(void)
{
        const char *points[] = {g_dir, g_dir2};
        for (size_t i = 0; i < SP_ARRAY_SIZE(points); i++) {
                while (mounts_on(points[i]) > 0) {
                        fprintf(stderr, "teardown: unmounting %s\n", points[i]);
                        if (umount2(points[i], MNT_DETACH) < 0)
                                break;
                }
        }
        int64_t deadline = sp_now_mono_us() + 10 * SP_USEC_PER_SEC;
        int nr;
        while ((nr = loop_of(g_image)) >= 0 && sp_now_mono_us() < deadline) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
        if (nr >= 0) {
                fprintf(stderr, "teardown: detaching loop%d\n", nr);
                char dev[32];
                snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
                _cleanup_close_ int fd = open(dev, O_RDWR | O_CLOEXEC);
                if (fd >= 0)
                        (void)ioctl(fd, LOOP_CLR_FD, 0);
        }
        sp_test_tmpdir_remove(g_tmp);
        free(g_tmp);
}

static void write_file(const char *path, const char *text)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        ck_assert_int_eq(fsync(fd), 0);
}

static void assert_file(const char *path, const char *text)
{
        char buf[256] = {0};
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
        ck_assert_int_ge(read(fd, buf, sizeof(buf) - 1), 0);
        ck_assert_str_eq(buf, text);
}

START_TEST(image_created_reused_closed_mounted)
{
        sp_error *err = NULL;
        wk_storage *st = NULL;
        sp_test_ok(wk_storage_open(g_dir, g_image, IMAGE_SIZE, &st, &err), &err);
        ck_assert_int_eq(st->origin, WK_STORAGE_IMAGE_CREATED);
        ck_assert_str_eq(st->dir, g_dir);
        ck_assert_str_eq(st->image, g_image);
        ck_assert_uint_eq(st->image_size, IMAGE_SIZE);
        ck_assert(is_btrfs(g_dir));
        ck_assert_int_eq(mounts_on(g_dir), 1);
        int nr = st->loop_nr;
        ck_assert_int_ge(nr, 0);
        ck_assert_int_eq(loop_of(g_image), nr);

        /* Mounted noatime from our loop device, which detaches itself. */
        wk_mountinfo_entry m = {0};
        ck_assert_int_eq(wk_mountinfo_find(g_dir, &m, NULL), 1);
        ck_assert_str_eq(m.fstype, "btrfs");
        ck_assert_str_eq(m.source, st->loop_dev);
        ck_assert(wk_mountinfo_has_option(m.mount_options, "noatime"));
        /* a setuid file a sandbox's root made (host uid 0 on disk) gives nothing on the host */
        ck_assert(wk_mountinfo_has_option(m.mount_options, "nosuid"));
        ck_assert(wk_mountinfo_has_option(m.mount_options, "nodev"));
        wk_mountinfo_entry_clear(&m);
        char p[PATH_MAX], flag[8] = {0};
        PATHF(p, "/sys/block/loop%d/loop/autoclear", nr);
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(flag, sizeof(flag), f));
        ck_assert_int_eq(flag[0], '1');

        /* A sparse image, with the layout in it and no leftover temporary. */
        struct stat s;
        ck_assert_int_eq(stat(g_image, &s), 0);
        ck_assert_int_eq(s.st_size, (off_t)IMAGE_SIZE);
        ck_assert_int_lt((uint64_t)s.st_blocks * 512, IMAGE_SIZE / 2);
        PATHF(p, "%s.new", g_image);
        ck_assert_int_eq(access(p, F_OK), -1);
        PATHF(p, "%s/templates", g_dir);
        ck_assert_int_eq(access(p, F_OK), 0);
        PATHF(p, "%s/sandboxes", g_dir);
        ck_assert_int_eq(access(p, F_OK), 0);

        _cleanup_free_ char *rootfs = NULL;
        sp_test_ok(wk_storage_template_create(st, "base", &rootfs, &err), &err);
        PATHF(p, "%s/hello", rootfs);
        write_file(p, "persisted");
        sp_test_ok(wk_storage_template_seal(st, "base", &err), &err);

        /* The daemon goes away without closing; its successor reuses the mount. */
        st = wk_storage_free(st);
        ck_assert_int_eq(mounts_on(g_dir), 1);
        sp_test_ok(wk_storage_open(g_dir, g_image, IMAGE_SIZE, &st, &err), &err);
        ck_assert_int_eq(st->origin, WK_STORAGE_IMAGE_REUSED);
        ck_assert_int_eq(st->loop_nr, nr);
        ck_assert_str_eq(st->image, g_image);
        ck_assert_int_eq(mounts_on(g_dir), 1);
        assert_file(p, "persisted");

        /* Closing unmounts and the loop device detaches. */
        sp_test_ok(wk_storage_close(st, &err), &err);
        ck_assert_int_eq(mounts_on(g_dir), 0);
        ck_assert_int_eq(loop_of(g_image), -1);
        ck_assert(!is_btrfs(g_dir));

        /* The existing image is mounted again, with its data. */
        sp_test_ok(wk_storage_open(g_dir, g_image, IMAGE_SIZE, &st, &err), &err);
        ck_assert_int_eq(st->origin, WK_STORAGE_IMAGE_MOUNTED);
        assert_file(p, "persisted");
        char **names = NULL;
        sp_test_ok(wk_storage_list(st, true, &names, &err), &err);
        ck_assert_ptr_nonnull(names[0]);
        ck_assert_str_eq(names[0], "base");
        ck_assert_ptr_null(names[1]);
        sp_strv_freep(&names);
        sp_test_ok(wk_storage_close(st, &err), &err);
        ck_assert_int_eq(mounts_on(g_dir), 0);
        ck_assert_int_eq(loop_of(g_image), -1);
}
END_TEST

START_TEST(bad_arguments_refused)
{
        wk_storage *st = NULL;
        sp_error *err = NULL;
        ck_assert_int_eq(wk_storage_open("relative/dir", g_image, IMAGE_SIZE, &st, NULL), -SP_E_INVALID);
        ck_assert_int_eq(wk_storage_open(g_dir, "relative.img", IMAGE_SIZE, &st, NULL), -SP_E_INVALID);

        /* Not btrfs and no image: nothing to do. */
        ck_assert_int_eq(wk_storage_open(g_dir, NULL, 0, &st, &err), -SP_E_UNSUPPORTED);
        ck_assert_msg(strstr(err->message, "not on btrfs"), "%s", err->message);
        sp_error_free(err);
        err = NULL;

        /* Sizes outside the bounds leave no image behind. */
        ck_assert_int_eq(wk_storage_open(g_dir, g_image, WK_STORAGE_IMAGE_MIN_SIZE - 1, &st, NULL), -SP_E_INVALID);
        ck_assert_int_eq(wk_storage_open(g_dir, g_image, WK_STORAGE_IMAGE_MAX_SIZE + 1, &st, NULL), -SP_E_INVALID);
        ck_assert_int_eq(access(g_image, F_OK), -1);
        ck_assert_int_eq(mounts_on(g_dir), 0);

        /* An existing file that is not btrfs is never formatted. */
        {
                _cleanup_close_ int fd = open(g_image, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
                ck_assert_int_ge(fd, 0);
                static char junk[256 << 10];
                memset(junk, 'x', sizeof(junk));
                ck_assert_int_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
        }
        ck_assert_int_eq(wk_storage_open(g_dir, g_image, IMAGE_SIZE, &st, &err), -SP_E_CONFLICT);
        ck_assert_msg(strstr(err->message, "not a btrfs image"), "%s", err->message);
        sp_error_free(err);
        struct stat s;
        ck_assert_int_eq(stat(g_image, &s), 0);
        ck_assert_int_eq(s.st_size, 256 << 10);
        ck_assert_int_eq(mounts_on(g_dir), 0);
        ck_assert_int_eq(loop_of(g_image), -1);
}
END_TEST

START_TEST(image_in_use_elsewhere_refused)
{
        sp_error *err = NULL;
        wk_storage *st = NULL;
        sp_test_ok(wk_storage_open(g_dir, g_image, IMAGE_SIZE, &st, &err), &err);
        st = wk_storage_free(st);

        /* The same image for another directory while it is mounted: refused. */
        wk_storage *other = NULL;
        ck_assert_int_eq(wk_storage_open(g_dir2, g_image, IMAGE_SIZE, &other, &err), -SP_E_CONFLICT);
        ck_assert_msg(strstr(err->message, "already attached"), "%s", err->message);
        sp_error_free(err);
        err = NULL;
        ck_assert_int_eq(mounts_on(g_dir2), 0);

        /* A busy filesystem is not unmounted under its users. */
        sp_test_ok(wk_storage_open(g_dir, g_image, IMAGE_SIZE, &st, &err), &err);
        char p[PATH_MAX];
        PATHF(p, "%s/busy", g_dir);
        int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(wk_storage_close(st, &err), -SP_E_CONFLICT);
        sp_error_free(err);
        err = NULL;
        ck_assert_int_eq(mounts_on(g_dir), 1);
        close(fd);
        sp_test_ok(wk_storage_open(g_dir, g_image, IMAGE_SIZE, &st, &err), &err);
        ck_assert_int_eq(st->origin, WK_STORAGE_IMAGE_REUSED);
        sp_test_ok(wk_storage_close(st, &err), &err);
        ck_assert_int_eq(mounts_on(g_dir), 0);
        ck_assert_int_eq(loop_of(g_image), -1);
}
END_TEST

static sp_test_btrfs g_fs;

static void fs_setup(void)
{
        setup();
        sp_error *err = NULL;
        sp_test_ok(sp_test_btrfs_create(0, &g_fs, &err), &err);
}

static void fs_teardown(void)
{
        sp_test_btrfs_destroy(&g_fs);
        teardown();
}

START_TEST(native_btrfs_used_as_is)
{
        sp_error *err = NULL;
        wk_storage *st = NULL;
        /* An image path is ignored where the directory is btrfs already. */
        sp_test_ok(wk_storage_open(g_fs.mnt, g_image, IMAGE_SIZE, &st, &err), &err);
        ck_assert_int_eq(st->origin, WK_STORAGE_NATIVE);
        ck_assert_ptr_null(st->image);
        ck_assert_int_eq(st->loop_nr, -1);
        ck_assert_int_eq(access(g_image, F_OK), -1);
        /* Closing native storage never unmounts it. */
        sp_test_ok(wk_storage_close(st, &err), &err);
        ck_assert_int_eq(mounts_on(g_fs.mnt), 1);
}
END_TEST

/* One TCase per test: its unchecked fixture (run by the parent, even after
 * the test crashed) gives it a fresh directory and cleans up after it. */
static void add(Suite *s, const char *name, const TTest *t, void (*up)(void), void (*down)(void))
{
        TCase *tc = tcase_create(name);
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, up, down);
        tcase_add_test(tc, t);
        suite_add_tcase(s, tc);
}

static Suite *suite(void)
{
        Suite *s = suite_create("worker_rootfs_storage");
        add(s, "lifecycle", image_created_reused_closed_mounted, setup, teardown);
        add(s, "refusals", bad_arguments_refused, setup, teardown);
        add(s, "in_use", image_in_use_elsewhere_refused, setup, teardown);
        add(s, "native", native_btrfs_used_as_is, fs_setup, fs_teardown);
        return s;
}

int main(void)
{
        sp_test_btrfs_require();
        return sp_test_main(suite());
}
