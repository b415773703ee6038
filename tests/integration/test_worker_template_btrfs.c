/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template imports on btrfs, where templates live: a directory import
 * reflinks every regular file (FICLONE) instead of copying it, and the
 * extents are shared with the source afterwards; a tarball imports into a
 * subvolume. Needs root, mkfs.btrfs and loop devices.
 */
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <btrfsutil.h>

#include "../unit/worker/test_template_util.h"
#include "btrfs.h"
#include "harness.h"
#include "template/template.h"

static sp_test_btrfs fs;
static char src[1024], dest[1024];

static void fs_setup(void)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_btrfs_create(0, &fs, &err), &err);
        snprintf(src, sizeof(src), "%s/src", fs.mnt);
        snprintf(dest, sizeof(dest), "%s/template", fs.mnt);
        ck_assert_int_eq(mkdir(src, 0755), 0);
        ck_assert_int_eq(btrfs_util_create_subvolume(dest, 0, NULL, NULL), BTRFS_UTIL_OK);
}

static void fs_teardown(void)
{
        sp_test_btrfs_destroy(&fs);
}

/* Whether the first extent of the file is shared with another file. */
static bool first_extent_shared(const char *path)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        fsync(fd);
        struct fiemap *fm = calloc(1, sizeof(struct fiemap) + 4 * sizeof(struct fiemap_extent));
        ck_assert_ptr_nonnull(fm);
        fm->fm_length = FIEMAP_MAX_OFFSET;
        fm->fm_flags = FIEMAP_FLAG_SYNC;
        fm->fm_extent_count = 4;
        ck_assert_int_eq(ioctl(fd, FS_IOC_FIEMAP, fm), 0);
        close(fd);
        ck_assert_uint_gt(fm->fm_mapped_extents, 0);
        bool shared = (fm->fm_extents[0].fe_flags & FIEMAP_EXTENT_SHARED) != 0;
        free(fm);
        return shared;
}

START_TEST(directory_import_reflinks)
{
        char p[1200];
        char *data = malloc(1 << 20);
        for (int i = 0; i < (1 << 20); i++)
                data[i] = (char)('a' + i % 26);
        data[(1 << 20) - 1] = '\0';
        for (int i = 0; i < 3; i++) {
                snprintf(p, sizeof(p), "%s/file%d", src, i);
                tt_write(p, data, 0644);
        }
        snprintf(p, sizeof(p), "%s/empty", src);
        tt_write(p, "", 0644);
        sync();
        wk_template_stats stats;
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_dir(src, dest, NULL, &stats, NULL, &err), &err);
        ck_assert_uint_eq(stats.reflinked, 4);
        ck_assert_uint_eq(stats.copied, 0);
        snprintf(p, sizeof(p), "%s/file1", dest);
        tt_assert_content(p, data);
        ck_assert(first_extent_shared(p));
        free(data);
}
END_TEST

START_TEST(tarball_into_a_subvolume)
{
        char tarball[1200];
        snprintf(tarball, sizeof(tarball), "%s/t.tar.zst", fs.mnt);
        struct archive *a = tt_archive_open(tarball, TT_ZSTD);
        tt_dir(a, "etc", 0755);
        tt_file(a, "etc/os-release", "ID=space\n", 0644);
        tt_archive_close(a);
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_tar(tarball, dest, NULL, NULL, NULL, &err), &err);
        char p[1200];
        snprintf(p, sizeof(p), "%s/etc/os-release", dest);
        tt_assert_content(p, "ID=space\n");
        ck_assert_int_eq(btrfs_util_set_subvolume_read_only(dest, true), BTRFS_UTIL_OK);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("worker_template_btrfs");
        TCase *tc = tcase_create("btrfs");
        tcase_add_unchecked_fixture(tc, fs_setup, fs_teardown);
        tcase_add_test(tc, directory_import_reflinks);
        suite_add_tcase(s, tc);
        TCase *tc2 = tcase_create("subvolume");
        tcase_add_unchecked_fixture(tc2, fs_setup, fs_teardown);
        tcase_add_test(tc2, tarball_into_a_subvolume);
        suite_add_tcase(s, tc2);
        return s;
}

int main(void)
{
        sp_test_btrfs_require();
        return sp_test_main(suite());
}
