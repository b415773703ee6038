/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The temporary btrfs of the test harness: it is mounted, is btrfs, takes
 * subvolumes and snapshots through libbtrfsutil, and its teardown leaves no
 * mount, no loop device and no files behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <btrfsutil.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "btrfs.h"
#include "harness.h"

static sp_test_btrfs g_fs;

/* What the fixture's filesystem was, for the checks after its teardown. */
static struct {
        bool recorded;
        char dir[PATH_MAX];
        char mnt[PATH_MAX];
        char image[PATH_MAX];
        int loop_nr;
} g_gone;

/* A second filesystem, kept busy by an open file across its teardown. */
static sp_test_btrfs g_busy;
static int g_busy_fd = -1;
static struct {
        char mnt[PATH_MAX];
        char image[PATH_MAX];
        int loop_nr;
} g_busy_gone;

static void busy_setup(void)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_btrfs_create(0, &g_busy, &err), &err);
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%.4000s/held-open", g_busy.mnt);
        g_busy_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        ck_assert_int_ge(g_busy_fd, 0);
}

static void busy_teardown(void)
{
        snprintf(g_busy_gone.mnt, sizeof(g_busy_gone.mnt), "%s", g_busy.mnt);
        snprintf(g_busy_gone.image, sizeof(g_busy_gone.image), "%s", g_busy.image);
        g_busy_gone.loop_nr = g_busy.loop_nr;
        sp_test_btrfs_destroy(&g_busy); /* busy: a lazy unmount */
        close(g_busy_fd); /* the last user lets go */
        g_busy_fd = -1;
}

static void fs_setup(void)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_btrfs_create(0, &g_fs, &err), &err);
}

static void fs_teardown(void)
{
        g_gone.recorded = true;
        snprintf(g_gone.dir, sizeof(g_gone.dir), "%s", g_fs.dir);
        snprintf(g_gone.mnt, sizeof(g_gone.mnt), "%s", g_fs.mnt);
        snprintf(g_gone.image, sizeof(g_gone.image), "%s", g_fs.image);
        g_gone.loop_nr = g_fs.loop_nr;
        sp_test_btrfs_destroy(&g_fs);
}

/* The fstype mountinfo reports at mount point mnt, or NULL if none is there. */
static char *mount_fstype(const char *mnt)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
        ck_assert_ptr_nonnull(f);
        char line[4096];
        char *found = NULL;
        while (fgets(line, sizeof(line), f)) {
                char point[PATH_MAX], fstype[64];
                const char *dash = strstr(line, " - ");
                if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", point) != 1 ||
                    sscanf(dash + 3, "%63s", fstype) != 1)
                        continue;
                if (strcmp(point, mnt) == 0) {
                        free(found);
                        found = strdup(fstype); /* the last one on top wins */
                }
        }
        return found;
}

static void write_file(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
        ck_assert_int_eq(close(fd), 0);
}

START_TEST(test_mounted_btrfs_on_loop)
{
        struct statfs sfs;
        ck_assert_int_eq(statfs(g_fs.mnt, &sfs), 0);
        ck_assert_int_eq((unsigned long)sfs.f_type, (unsigned long)BTRFS_SUPER_MAGIC);
        char *fstype = mount_fstype(g_fs.mnt);
        ck_assert_ptr_nonnull(fstype);
        ck_assert_str_eq(fstype, "btrfs");
        free(fstype);
        ck_assert_int_ge(g_fs.loop_nr, 0);
        ck_assert(sp_test_loop_attached_to(g_fs.loop_nr, g_fs.image));
        /* The image is sparse: a fresh filesystem uses far less than its size. */
        struct stat st;
        ck_assert_int_eq(stat(g_fs.image, &st), 0);
        ck_assert_int_eq(st.st_size, (off_t)SP_TEST_BTRFS_DEFAULT_SIZE);
        ck_assert_int_lt((long long)st.st_blocks * 512, (long long)SP_TEST_BTRFS_DEFAULT_SIZE / 2);
}
END_TEST

START_TEST(test_subvolume_and_snapshot)
{
        char sub[PATH_MAX], snap[PATH_MAX], file[PATH_MAX];
        snprintf(sub, sizeof(sub), "%s/template", g_fs.mnt);
        snprintf(snap, sizeof(snap), "%s/sandbox", g_fs.mnt);
        enum btrfs_util_error e = btrfs_util_create_subvolume(sub, 0, NULL, NULL);
        ck_assert_msg(e == BTRFS_UTIL_OK, "create_subvolume: %s", btrfs_util_strerror(e));
        ck_assert_int_eq(btrfs_util_is_subvolume(sub), BTRFS_UTIL_OK);
        snprintf(file, sizeof(file), "%.4000s/hello", sub);
        write_file(file, "from the template");

        e = btrfs_util_create_snapshot(sub, snap, BTRFS_UTIL_CREATE_SNAPSHOT_READ_ONLY, NULL, NULL);
        ck_assert_msg(e == BTRFS_UTIL_OK, "create_snapshot: %s", btrfs_util_strerror(e));
        bool ro = false;
        ck_assert_int_eq(btrfs_util_get_subvolume_read_only(snap, &ro), BTRFS_UTIL_OK);
        ck_assert(ro);
        snprintf(file, sizeof(file), "%.4000s/hello", snap);
        char buf[64] = {0};
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_gt(read(fd, buf, sizeof(buf) - 1), 0);
        close(fd);
        ck_assert_str_eq(buf, "from the template");
}
END_TEST

START_TEST(test_bad_size_rejected)
{
        sp_test_btrfs fs;
        sp_error *err = NULL;
        ck_assert_int_eq(sp_test_btrfs_create(UINT64_C(1) << 20, &fs, &err), -SP_E_INVALID);
        ck_assert_ptr_nonnull(err);
        ck_assert_ptr_null(fs.dir);
        sp_error_free(err);
        /* Destroying an empty or already destroyed struct is harmless. */
        sp_test_btrfs_destroy(&fs);
        sp_test_btrfs_destroy(&fs);
}
END_TEST

START_TEST(test_teardown_leaves_nothing)
{
        ck_assert_msg(g_gone.recorded, "the fixture did not run");
        char *fstype = mount_fstype(g_gone.mnt);
        ck_assert_msg(fstype == NULL, "%s still mounted (%s)", g_gone.mnt, fstype ? fstype : "");
        ck_assert_msg(!sp_test_loop_attached_to(g_gone.loop_nr, g_gone.image), "loop%d still attached to %s",
                      g_gone.loop_nr, g_gone.image);
        struct stat st;
        ck_assert_msg(stat(g_gone.dir, &st) < 0 && errno == ENOENT, "%s still exists", g_gone.dir);
}
END_TEST

START_TEST(test_busy_filesystem_held)
{
        struct statfs sfs;
        ck_assert_int_eq(fstatfs(g_busy_fd, &sfs), 0);
        ck_assert_int_eq((unsigned long)sfs.f_type, (unsigned long)BTRFS_SUPER_MAGIC);
}
END_TEST

START_TEST(test_busy_teardown_detaches_lazily)
{
        ck_assert_msg(g_busy_gone.mnt[0], "the fixture did not run");
        char *fstype = mount_fstype(g_busy_gone.mnt);
        ck_assert_msg(fstype == NULL, "%s still mounted", g_busy_gone.mnt);
        /* Autoclear detaches the loop device once the filesystem is released,
         * which the kernel finishes asynchronously: bounded wait. */
        int64_t deadline = sp_now_mono_us() + 10 * SP_USEC_PER_SEC;
        while (sp_test_loop_attached_to(g_busy_gone.loop_nr, g_busy_gone.image) && sp_now_mono_us() < deadline)
                usleep(10000);
        ck_assert_msg(!sp_test_loop_attached_to(g_busy_gone.loop_nr, g_busy_gone.image), "loop%d still attached",
                      g_busy_gone.loop_nr);
}
END_TEST

static Suite *btrfs_suite(void)
{
        Suite *s = suite_create("harness_btrfs");
        TCase *tc = tcase_create("filesystem");
        tcase_add_unchecked_fixture(tc, fs_setup, fs_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_mounted_btrfs_on_loop);
        tcase_add_test(tc, test_subvolume_and_snapshot);
        tcase_add_test(tc, test_bad_size_rejected);
        suite_add_tcase(s, tc);

        tc = tcase_create("after_teardown");
        tcase_add_test(tc, test_teardown_leaves_nothing);
        suite_add_tcase(s, tc);

        tc = tcase_create("busy");
        tcase_add_unchecked_fixture(tc, busy_setup, busy_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_busy_filesystem_held);
        suite_add_tcase(s, tc);

        tc = tcase_create("after_busy_teardown");
        tcase_set_timeout(tc, 30);
        tcase_add_test(tc, test_busy_teardown_detaches_lazily);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_btrfs_require();
        return sp_test_main(btrfs_suite());
}
