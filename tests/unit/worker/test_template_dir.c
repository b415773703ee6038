/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: importing a directory tree — contents, modes, times, symlinks
 * copied as they are (never followed), hard links kept, fifos recreated,
 * sockets skipped, limits, and a destination inside its source refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "template/internal.h"
#include "template/template.h"
#include "test_template_util.h"

static char *dir;
static char src[512], dest[512], outside[512];

static char *path_in(const char *base, const char *rel)
{
        static char buf[8][1024];
        static int i;
        char *b = buf[i++ % 8];
        snprintf(b, sizeof(buf[0]), "%s/%s", base, rel);
        return b;
}

static void setup(void)
{
        dir = sp_test_tmpdir("tpl-dir");
        snprintf(src, sizeof(src), "%s/src", dir);
        snprintf(dest, sizeof(dest), "%s/dest", dir);
        snprintf(outside, sizeof(outside), "%s/outside", dir);
        ck_assert_int_eq(mkdir(src, 0755), 0);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        ck_assert_int_eq(mkdir(outside, 0755), 0);
        tt_write(path_in(outside, "secret"), "outside\n", 0600);
}

static void teardown(void)
{
        tt_rmrf(dir);
        free(dir);
}

/* Asserts that the trees at a and b are equal: types, modes, contents,
 * symlink targets and modification times (of files and directories). */
static void assert_same_tree(const char *a, const char *b)
{
        struct stat sa, sb;
        ck_assert_msg(lstat(a, &sa) == 0, "lstat %s", a);
        ck_assert_msg(lstat(b, &sb) == 0, "lstat %s", b);
        ck_assert_msg((sa.st_mode & S_IFMT) == (sb.st_mode & S_IFMT), "type of %s", b);
        if (!S_ISLNK(sa.st_mode)) {
                ck_assert_msg((sa.st_mode & 07777) == (sb.st_mode & 07777), "mode of %s: %o != %o", b,
                              sa.st_mode & 07777, sb.st_mode & 07777);
                ck_assert_msg(sa.st_mtim.tv_sec == sb.st_mtim.tv_sec && sa.st_mtim.tv_nsec == sb.st_mtim.tv_nsec,
                              "mtime of %s", b);
        }
        if (S_ISREG(sa.st_mode)) {
                char *ca = tt_read(a), *cb = tt_read(b);
                ck_assert_msg(ca && cb && sa.st_size == sb.st_size && memcmp(ca, cb, (size_t)sa.st_size) == 0,
                              "content of %s", b);
                free(ca);
                free(cb);
        } else if (S_ISLNK(sa.st_mode)) {
                char ta[4096] = "", tb[4096] = "";
                ck_assert_int_ge(readlink(a, ta, sizeof(ta) - 1), 0);
                ck_assert_int_ge(readlink(b, tb, sizeof(tb) - 1), 0);
                ck_assert_str_eq(ta, tb);
        } else if (S_ISDIR(sa.st_mode)) {
                DIR *d = opendir(a);
                ck_assert_ptr_nonnull(d);
                struct dirent *de;
                while ((de = readdir(d))) {
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        struct stat cs;
                        char ca[2048], cb[2048];
                        snprintf(ca, sizeof(ca), "%s/%s", a, de->d_name);
                        snprintf(cb, sizeof(cb), "%s/%s", b, de->d_name);
                        if (lstat(ca, &cs) == 0 && S_ISSOCK(cs.st_mode))
                                continue;
                        assert_same_tree(ca, cb);
                }
                closedir(d);
        }
}

static void make_source(void)
{
        ck_assert_int_eq(mkdir(path_in(src, "etc"), 0755), 0);
        tt_write(path_in(src, "etc/hostname"), "box\n", 0644);
        tt_write(path_in(src, "etc/shadow"), "root:*:\n", 0640);
        ck_assert_int_eq(mkdir(path_in(src, "bin"), 0711), 0);
        tt_write(path_in(src, "bin/tool"), "#!/bin/sh\n", 0755);
        ck_assert_int_eq(link(path_in(src, "bin/tool"), path_in(src, "bin/tool-again")), 0);
        ck_assert_int_eq(mkdir(path_in(src, "a"), 0755), 0);
        ck_assert_int_eq(mkdir(path_in(src, "a/b"), 0700), 0);
        ck_assert_int_eq(mkdir(path_in(src, "a/b/c"), 0755), 0);
        tt_write(path_in(src, "a/b/c/empty"), "", 0600);
        ck_assert_int_eq(link(path_in(src, "bin/tool"), path_in(src, "a/b/c/tool-deep")), 0);
        ck_assert_int_eq(mkdir(path_in(src, "ro"), 0755), 0);
        tt_write(path_in(src, "ro/file"), "read only", 0444);
        ck_assert_int_eq(chmod(path_in(src, "ro"), 0555), 0);
        /* a bigger file, to go through the copy loop more than once */
        char *big = malloc(300001);
        for (int i = 0; i < 300000; i++)
                big[i] = (char)('a' + i % 26);
        big[300000] = '\0';
        tt_write(path_in(src, "big"), big, 0644);
        free(big);
        ck_assert_int_eq(symlink("/etc/passwd", path_in(src, "abs-link")), 0);
        ck_assert_int_eq(symlink("../nowhere", path_in(src, "dangling")), 0);
        ck_assert_int_eq(symlink(outside, path_in(src, "out-link")), 0);
        ck_assert_int_eq(symlink("etc", path_in(src, "etc-link")), 0);
        ck_assert_int_eq(mkfifo(path_in(src, "fifo"), 0620), 0);
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path_in(src, "sock"));
        ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
        close(s);
        struct timespec ts[2] = {{.tv_sec = 1600000000, .tv_nsec = 123456789},
                                 {.tv_sec = 1600000000, .tv_nsec = 987654321}};
        ck_assert_int_eq(utimensat(AT_FDCWD, path_in(src, "etc/hostname"), ts, 0), 0);
        ck_assert_int_eq(utimensat(AT_FDCWD, path_in(src, "a/b"), ts, 0), 0);
        ck_assert_int_eq(utimensat(AT_FDCWD, src, ts, 0), 0);
        ck_assert_int_eq(chmod(src, 0750), 0);
}

START_TEST(round_trip)
{
        make_source();
        wk_template_stats stats;
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_dir(src, dest, NULL, &stats, &meta, &err), &err);
        assert_same_tree(src, dest);

        struct stat s1, s2, s3;
        ck_assert_int_eq(stat(path_in(dest, "bin/tool"), &s1), 0);
        ck_assert_int_eq(stat(path_in(dest, "bin/tool-again"), &s2), 0);
        ck_assert_int_eq(stat(path_in(dest, "a/b/c/tool-deep"), &s3), 0);
        ck_assert_uint_eq(s1.st_ino, s2.st_ino);
        ck_assert_uint_eq(s1.st_ino, s3.st_ino);
        ck_assert_uint_eq(s1.st_nlink, 3);
        ck_assert_uint_eq(stats.hardlinks, 2);
        ck_assert_int_ne(access(path_in(dest, "sock"), F_OK), 0);
        ck_assert_uint_eq(stats.skipped, 1);
        ck_assert_uint_eq(stats.reflinked + stats.copied, 6); /* hostname shadow tool empty file big */
        ck_assert_uint_eq(stats.bytes, 4 + 8 + 10 + 0 + 9 + 300000);
        /* the symlink to a directory outside was copied, not followed */
        struct stat sl;
        ck_assert_int_eq(lstat(path_in(dest, "out-link"), &sl), 0);
        ck_assert(S_ISLNK(sl.st_mode));
        ck_assert_int_eq(meta->source, WK_TEMPLATE_SOURCE_DIR);
        ck_assert_str_eq(meta->digest, "");
        wk_template_meta_free(meta);
}
END_TEST

START_TEST(refuses_bad_destinations)
{
        tt_write(path_in(src, "f"), "x", 0644);
        sp_error *err = NULL;
        tt_write(path_in(dest, "busy"), "", 0644);
        tt_assert_error(wk_template_import_dir(src, dest, NULL, NULL, NULL, &err), err, SP_E_CONFLICT, "not empty");
        ck_assert_int_eq(unlink(path_in(dest, "busy")), 0);

        /* the destination inside the source: the walk would never end */
        char inner[1024];
        snprintf(inner, sizeof(inner), "%s/sub/dest", src);
        ck_assert_int_eq(mkdir(path_in(src, "sub"), 0755), 0);
        ck_assert_int_eq(mkdir(inner, 0755), 0);
        tt_assert_error(wk_template_import_dir(src, inner, NULL, NULL, NULL, &err), err, SP_E_INVALID,
                        "the destination is inside the source (at 'sub/dest')");
        tt_assert_error(wk_template_import_dir(dest, dest, NULL, NULL, NULL, &err), err, SP_E_INVALID,
                        "the source is the destination");
        tt_assert_error(wk_template_import_dir(path_in(dir, "missing"), dest, NULL, NULL, NULL, &err), err,
                        SP_E_NOT_FOUND, "missing");
}
END_TEST

START_TEST(enforces_limits)
{
        for (int i = 0; i < 5; i++) {
                char name[16];
                snprintf(name, sizeof(name), "f%d", i);
                tt_write(path_in(src, name), "12345", 0644);
        }
        sp_error *err = NULL;
        tt_assert_error(wk_template_import_dir(src, dest, &(wk_template_limits){.max_entries = 4}, NULL, NULL, &err),
                        err, SP_E_LIMIT, "more than 4 entries");
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        /* What they cost on disk: the root, and each file's name (overhead and
         * length, metadata twice) and bytes: three files fit, not four. */
        uint64_t file = 2 * (512 + 2) + 5, bound = 2 * 512 + 3 * file + file - 1;
        char want[64];
        snprintf(want, sizeof(want), "the template exceeds %llu bytes", (unsigned long long)bound);
        tt_assert_error(wk_template_import_dir(src, dest, &(wk_template_limits){.max_bytes = bound}, NULL, NULL, &err),
                        err, SP_E_TOO_LARGE, want);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        wk_template_stats stats;
        sp_test_ok(wk_template_import_dir(src, dest, &(wk_template_limits){.max_bytes = bound + 1 + file}, &stats, NULL,
                                          &err),
                   &err);
        ck_assert_uint_eq(stats.cost, 2 * 512 + 5 * file);
        uint64_t measured = 0;
        sp_test_ok(wk_template_measure(dest, &measured, &err), &err);
        ck_assert_uint_eq(measured, 2 * 512 + 5 * file);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        ck_assert_int_eq(mkdir(path_in(src, "d1"), 0755), 0);
        ck_assert_int_eq(mkdir(path_in(src, "d1/d2"), 0755), 0);
        ck_assert_int_eq(mkdir(path_in(src, "d1/d2/d3"), 0755), 0);
        tt_assert_error(wk_template_import_dir(src, dest, &(wk_template_limits){.max_depth = 2}, NULL, NULL, &err), err,
                        SP_E_LIMIT, "'d1/d2/d3': deeper than 2 levels");
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        tt_assert_error(wk_template_import_dir(src, dest, &(wk_template_limits){.max_path = 7}, NULL, NULL, &err), err,
                        SP_E_LIMIT, "'d1/d2/d3': path longer than 7 bytes");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_dir");
        TCase *tc = tcase_create("import");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, round_trip);
        tcase_add_test(tc, refuses_bad_destinations);
        tcase_add_test(tc, enforces_limits);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
