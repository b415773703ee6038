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
#include <sys/xattr.h>
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

/* The cost rule of template.h, written out again here. */
static uint64_t name_cost(const char *name)
{
        return 2 * (512 + (uint64_t)strlen(name));
}

/* The metadata bomb: entries that declare no bytes but cost the pool a lot
 * (symlinks with 4000-byte targets, empty files with four 3.8 KB user.*
 * attributes, metadata kept twice). Counted by declared file sizes alone it
 * was 0 bytes; it is refused at the bound now, before it writes past it. */
START_TEST(metadata_bomb_is_counted)
{
        char tarball[1200];
        snprintf(tarball, sizeof(tarball), "%s/bomb.tar.zst", fs.mnt);
        struct archive *a = tt_archive_open(tarball, TT_ZSTD);
        char target[4001], value[3800];
        memset(target, 't', 4000);
        target[4000] = '\0';
        memset(value, 'v', sizeof(value));
        uint64_t want = 2 * 512; /* the root */
        for (int i = 0; i < 1000; i++) {
                char name[32];
                snprintf(name, sizeof(name), "l%04d", i);
                target[0] = (char)('a' + i % 26);
                tt_symlink(a, name, target);
                want += name_cost(name) + 2 * 4000;
                snprintf(name, sizeof(name), "f%04d", i);
                struct archive_entry *e = archive_entry_new();
                archive_entry_set_pathname(e, name);
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_perm(e, 0644);
                archive_entry_set_size(e, 0);
                const char *keys[] = {"user.a", "user.b", "user.c", "user.d"};
                for (int k = 0; k < 4; k++) {
                        archive_entry_xattr_add_entry(e, keys[k], value, sizeof(value));
                        want += 2 * (strlen(keys[k]) + sizeof(value));
                }
                ck_assert_int_eq(archive_write_header(a, e), ARCHIVE_OK);
                archive_entry_free(e);
                want += name_cost(name);
        }
        tt_archive_close(a);

        sp_error *err = NULL;
        uint64_t bound = 4u << 20;
        ck_assert_uint_gt(want, 4 * bound);
        int r = wk_template_import_tar(tarball, dest, &(wk_template_limits){.max_bytes = bound}, NULL, NULL, &err);
        tt_assert_error(r, err, SP_E_TOO_LARGE, "the template exceeds 4194304 bytes");
        /* What it left costs no more than the bound. */
        uint64_t left = 0;
        sp_test_ok(wk_template_measure(dest, &left, &err), &err);
        ck_assert_uint_le(left, bound);
        ck_assert_uint_gt(left, bound / 2);

        /* Within a bound that holds it, the import counts what measure finds:
         * the xattrs and targets are really there. */
        char dest2[1200];
        snprintf(dest2, sizeof(dest2), "%s/template2", fs.mnt);
        ck_assert_int_eq(btrfs_util_create_subvolume(dest2, 0, NULL, NULL), BTRFS_UTIL_OK);
        wk_template_stats stats;
        sp_test_ok(wk_template_import_tar(tarball, dest2, &(wk_template_limits){.max_bytes = want}, &stats, NULL, &err),
                   &err);
        ck_assert_uint_eq(stats.cost, want);
        uint64_t measured = 0;
        sp_test_ok(wk_template_measure(dest2, &measured, &err), &err);
        ck_assert_uint_eq(measured, want);
        char p[1300];
        snprintf(p, sizeof(p), "%s/f0007", dest2);
        ck_assert_int_eq(lgetxattr(p, "user.c", NULL, 0), (ssize_t)sizeof(value));
}
END_TEST

/* measure: names, symlink targets, xattrs, directories and every other inode
 * once, hard links' inodes once. */
START_TEST(measure_counts_metadata)
{
        char p[1300], q[1300];
        snprintf(p, sizeof(p), "%s/d", dest);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        ck_assert_int_eq(setxattr(p, "user.k", "vvvv", 4, 0), 0);
        snprintf(p, sizeof(p), "%s/d/l", dest);
        ck_assert_int_eq(symlink("target-of-16abcd", p), 0);
        snprintf(p, sizeof(p), "%s/file", dest);
        tt_write(p, "0123456789", 0644);
        ck_assert_int_eq(setxattr(p, "user.long-name", "0123456789abcdef", 16, 0), 0);
        snprintf(q, sizeof(q), "%s/d/hard", dest);
        ck_assert_int_eq(link(p, q), 0);
        snprintf(p, sizeof(p), "%s/fifo", dest);
        ck_assert_int_eq(mkfifo(p, 0600), 0);
        uint64_t want = 2 * 512 /* root */
                        + name_cost("d") + 2 * (6 + 4) /* d and its xattr */
                        + name_cost("l") + 2 * 16 /* the symlink and its target */
                        + name_cost("file") + 10 + 2 * (14 + 16) /* the file, its bytes and xattr */
                        + name_cost("hard") /* another name for the same inode */
                        + name_cost("fifo");
        uint64_t got = 0;
        sp_error *err = NULL;
        sp_test_ok(wk_template_measure(dest, &got, &err), &err);
        ck_assert_uint_eq(got, want);
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
        TCase *tc3 = tcase_create("metadata");
        tcase_add_unchecked_fixture(tc3, fs_setup, fs_teardown);
        tcase_set_timeout(tc3, 120);
        tcase_add_test(tc3, measure_counts_metadata);
        suite_add_tcase(s, tc3);
        TCase *tc4 = tcase_create("bomb");
        tcase_add_unchecked_fixture(tc4, fs_setup, fs_teardown);
        tcase_set_timeout(tc4, 120);
        tcase_add_test(tc4, metadata_bomb_is_counted);
        suite_add_tcase(s, tc4);
        return s;
}

int main(void)
{
        sp_test_btrfs_require();
        return sp_test_main(suite());
}
