/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: importing rootfs tarballs — every compression, every entry
 * type, replacement semantics, the digest; and every malicious archive
 * refused with the entry named and nothing written outside the destination.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "template/internal.h"
#include "template/template.h"
#include "test_template_util.h"

static char *dir;
static char dest[512], outside[512], tarball[512];

static void setup(void)
{
        dir = sp_test_tmpdir("tpl-tar");
        snprintf(dest, sizeof(dest), "%s/dest", dir);
        snprintf(outside, sizeof(outside), "%s/outside", dir);
        snprintf(tarball, sizeof(tarball), "%s/t.tar", dir);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        ck_assert_int_eq(mkdir(outside, 0755), 0);
        char p[600];
        snprintf(p, sizeof(p), "%s/sentinel", outside);
        tt_write(p, "outside\n", 0644);
        wk__tpl_set_use_openat2(true);
}

static void teardown(void)
{
        tt_rmrf(dir);
        free(dir);
}

static char *at(const char *rel)
{
        static char buf[4][1024];
        static int i;
        char *b = buf[i++ % 4];
        snprintf(b, sizeof(buf[0]), "%s/%s", dest, rel);
        return b;
}

static mode_t perm(const char *path)
{
        struct stat st;
        ck_assert_msg(lstat(path, &st) == 0, "lstat %s", path);
        return st.st_mode & 07777;
}

static void assert_link(const char *path, const char *target)
{
        char buf[4096];
        ssize_t n = readlink(path, buf, sizeof(buf) - 1);
        ck_assert_msg(n >= 0, "readlink %s", path);
        buf[n] = '\0';
        ck_assert_str_eq(buf, target);
}

/* The outside directory holds only its sentinel, unchanged. */
static void assert_outside_untouched(void)
{
        char p[600];
        ck_assert_int_eq(tt_count_entries(outside), 1);
        snprintf(p, sizeof(p), "%s/sentinel", outside);
        tt_assert_content(p, "outside\n");
}

static const enum tt_filter filters[] = {TT_PLAIN, TT_GZIP, TT_ZSTD, TT_XZ, TT_BZIP2};

START_TEST(every_compression_and_entry_type)
{
        struct archive *a = tt_archive_open(tarball, filters[_i]);
        tt_dir(a, "./", 0751);
        tt_dir(a, "etc/", 0755);
        tt_file(a, "etc/hostname", "box\n", 0644);
        tt_dir(a, "bin", 0755);
        tt_file(a, "bin/tool", "#!/bin/sh\necho tool\n", 0750);
        tt_hardlink(a, "bin/tool2", "bin/tool");
        tt_symlink(a, "lib", "usr/lib");
        tt_symlink(a, "abs", "/etc/passwd");
        tt_dir(a, "ro", 0555);
        tt_file(a, "ro/inner", "secret", 0400);
        tt_add(a, "fifo", AE_IFIFO, 0600, NULL, NULL);
        tt_file(a, "deep/a/b/c/file", "", 0644);
        tt_file(a, "./dot//slashes/./x", "x", 0644);
        tt_archive_close(a);

        wk_template_meta *meta = NULL;
        wk_template_stats stats;
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_tar(tarball, dest, NULL, &stats, &meta, &err), &err);

        tt_assert_content(at("etc/hostname"), "box\n");
        tt_assert_content(at("bin/tool"), "#!/bin/sh\necho tool\n");
        tt_assert_content(at("ro/inner"), "secret");
        tt_assert_content(at("deep/a/b/c/file"), "");
        tt_assert_content(at("dot/slashes/x"), "x");
        ck_assert_uint_eq(perm(dest), 0751);
        ck_assert_uint_eq(perm(at("bin/tool")), 0750);
        ck_assert_uint_eq(perm(at("ro")), 0555);
        ck_assert_uint_eq(perm(at("ro/inner")), 0400);
        ck_assert_uint_eq(perm(at("deep/a")), 0755); /* made implicitly */
        assert_link(at("lib"), "usr/lib");
        assert_link(at("abs"), "/etc/passwd");

        struct stat s1, s2, sf, sd;
        ck_assert_int_eq(stat(at("bin/tool"), &s1), 0);
        ck_assert_int_eq(stat(at("bin/tool2"), &s2), 0);
        ck_assert_uint_eq(s1.st_ino, s2.st_ino);
        ck_assert_uint_eq(s1.st_nlink, 2);
        ck_assert_int_eq(s1.st_mtime, 1700000000);
        ck_assert_int_eq(lstat(at("fifo"), &sf), 0);
        ck_assert(S_ISFIFO(sf.st_mode));
        /* directory times are set after their contents were written */
        ck_assert_int_eq(stat(at("etc"), &sd), 0);
        ck_assert_int_eq(sd.st_mtime, 1700000000);

        char want[WK_TEMPLATE_DIGEST_MAX];
        tt_sha256_file(tarball, want);
        ck_assert_int_eq(meta->source, WK_TEMPLATE_SOURCE_TAR);
        ck_assert_str_eq(meta->digest, want);
        ck_assert_str_eq(meta->workdir, "/");
        ck_assert_uint_eq(stats.hardlinks, 1);
        ck_assert_uint_eq(stats.entries, 13);
        wk_template_meta_free(meta);
}
END_TEST

START_TEST(later_entries_replace_earlier_ones)
{
        struct archive *a = tt_archive_open(tarball, TT_PLAIN);
        tt_file(a, "a", "one", 0644);
        tt_hardlink(a, "a-link", "a");
        tt_file(a, "a", "two", 0600); /* a fresh inode: the hard link keeps "one" */
        tt_dir(a, "b", 0755);
        tt_file(a, "b/x", "x", 0644);
        tt_symlink(a, "b", "/etc");
        tt_symlink(a, "c", "/etc/passwd");
        tt_file(a, "c", "replaced the symlink, not its target", 0644);
        tt_file(a, "d", "file", 0644);
        tt_dir(a, "d", 0700);
        tt_dir(a, "e", 0700);
        tt_dir(a, "e", 0711); /* a directory declared twice: the later mode wins */
        tt_archive_close(a);
        char *before = tt_read("/etc/passwd");

        sp_error *err = NULL;
        sp_test_ok(wk_template_import_tar(tarball, dest, NULL, NULL, NULL, &err), &err);
        tt_assert_content(at("a"), "two");
        tt_assert_content(at("a-link"), "one");
        assert_link(at("b"), "/etc");
        tt_assert_content(at("c"), "replaced the symlink, not its target");
        struct stat st;
        ck_assert_int_eq(lstat(at("d"), &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_uint_eq(perm(at("e")), 0711);
        tt_assert_content("/etc/passwd", before);
        free(before);
}
END_TEST

START_TEST(reads_from_a_pipe)
{
        struct archive *a = tt_archive_open(tarball, TT_GZIP);
        tt_file(a, "hello", "world", 0644);
        tt_archive_close(a);
        char *data = tt_read(tarball);
        struct stat st;
        ck_assert_int_eq(stat(tarball, &st), 0);
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        if (pid == 0) {
                close(p[0]);
                ssize_t w = write(p[1], data, (size_t)st.st_size);
                _exit(w == st.st_size ? 0 : 1);
        }
        close(p[1]);
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_tar_fd(p[0], dest, NULL, NULL, &meta, &err), &err);
        close(p[0]);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        tt_assert_content(at("hello"), "world");
        char want[WK_TEMPLATE_DIGEST_MAX];
        tt_sha256_file(tarball, want);
        ck_assert_str_eq(meta->digest, want);
        wk_template_meta_free(meta);
        free(data);
}
END_TEST

/* Imports tarball with lim and asserts the failure names the entry. */
static void assert_refused(const wk_template_limits *lim, sp_errc code, const char *needle)
{
        sp_error *err = NULL;
        wk_template_meta *meta = NULL;
        int r = wk_template_import_tar(tarball, dest, lim, NULL, &meta, &err);
        ck_assert_ptr_null(meta);
        tt_assert_error(r, err, code, needle);
        assert_outside_untouched();
}

static void one_entry(unsigned type, const char *name, const char *link)
{
        struct archive *a = tt_archive_open(tarball, TT_PLAIN);
        tt_file(a, "ok", "fine", 0644);
        tt_add(a, name, type, 0644, type == AE_IFREG ? "bad" : NULL, link);
        tt_archive_close(a);
}

START_TEST(refuses_dotdot)
{
        one_entry(AE_IFREG, "../x", NULL);
        assert_refused(NULL, SP_E_INVALID, "entry '../x': path has a '..' component");
        char p[600];
        snprintf(p, sizeof(p), "%s/x", dir);
        ck_assert_int_ne(access(p, F_OK), 0);
}
END_TEST

START_TEST(refuses_absolute)
{
        one_entry(AE_IFREG, "/abs", NULL);
        assert_refused(NULL, SP_E_INVALID, "entry '/abs': absolute path");
        ck_assert_int_ne(access("/abs", F_OK), 0);
}
END_TEST

START_TEST(refuses_inner_dotdot)
{
        one_entry(AE_IFREG, "a/../../x", NULL);
        assert_refused(NULL, SP_E_INVALID, "entry 'a/../../x'");
}
END_TEST

/* The classic: a symlink to /etc, then a file through it. */
static void symlink_then_write(void)
{
        struct stat before, after;
        ck_assert_int_eq(stat("/etc/passwd", &before), 0);
        char *content = tt_read("/etc/passwd");

        struct archive *a = tt_archive_open(tarball, TT_PLAIN);
        tt_symlink(a, "a", "/etc");
        tt_file(a, "a/passwd", "evil::0:0::/:/bin/sh\n", 0644);
        tt_archive_close(a);
        assert_refused(NULL, SP_E_INVALID, "entry 'a/passwd': open parent directory: the path goes through a symlink");
        ck_assert_int_eq(stat("/etc/passwd", &after), 0);
        ck_assert_int_eq(before.st_mtim.tv_sec, after.st_mtim.tv_sec);
        ck_assert_int_eq(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
        tt_assert_content("/etc/passwd", content);
        free(content);

        /* the same against a directory the test owns, absolute and relative */
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        a = tt_archive_open(tarball, TT_GZIP);
        tt_symlink(a, "out", outside);
        tt_file(a, "out/evil", "x", 0644);
        tt_archive_close(a);
        assert_refused(NULL, SP_E_INVALID, "entry 'out/evil'");

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        a = tt_archive_open(tarball, TT_PLAIN);
        tt_symlink(a, "rel", "../outside");
        tt_dir(a, "rel/newdir", 0755);
        tt_archive_close(a);
        assert_refused(NULL, SP_E_INVALID, "entry 'rel/newdir/'");

        /* a symlink to / and a deeper path whose parents would be made through it */
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        a = tt_archive_open(tarball, TT_PLAIN);
        tt_symlink(a, "root", "/");
        tt_file(a, "root/tmp/space-template-escape", "x", 0644);
        tt_archive_close(a);
        assert_refused(NULL, SP_E_INVALID, "entry 'root/tmp/space-template-escape'");
        ck_assert_int_ne(access("/tmp/space-template-escape", F_OK), 0);
}

START_TEST(refuses_write_through_symlink)
{
        symlink_then_write();
}
END_TEST

START_TEST(refuses_write_through_symlink_without_openat2)
{
        wk__tpl_set_use_openat2(false);
        symlink_then_write();
}
END_TEST

START_TEST(refuses_hardlink_out)
{
        one_entry(0, "h", "../outside/sentinel");
        assert_refused(NULL, SP_E_INVALID, "entry 'h': hard link target: path has a '..' component");

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_entry(0, "h", "/etc/passwd");
        assert_refused(NULL, SP_E_INVALID, "entry 'h': hard link target: absolute path");

        /* through a symlink inside the tree */
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        struct archive *a = tt_archive_open(tarball, TT_PLAIN);
        tt_symlink(a, "s", outside);
        tt_hardlink(a, "h", "s/sentinel");
        tt_archive_close(a);
        assert_refused(NULL, SP_E_INVALID, "entry 'h': hard link target: the path goes through a symlink");

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_entry(0, "h", "missing");
        assert_refused(NULL, SP_E_INVALID, "entry 'h': hard link target does not exist");

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_entry(0, "ok", "ok");
        assert_refused(NULL, SP_E_INVALID, "entry 'ok': hard link to itself");
}
END_TEST

START_TEST(refuses_device_nodes)
{
        one_entry(AE_IFCHR, "dev/null", NULL);
        assert_refused(NULL, SP_E_UNSUPPORTED, "entry 'dev/null': device nodes are not allowed");
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_entry(AE_IFBLK, "dev/sda", NULL);
        assert_refused(NULL, SP_E_UNSUPPORTED, "entry 'dev/sda': device nodes are not allowed");
}
END_TEST

START_TEST(enforces_limits)
{
        struct archive *a = tt_archive_open(tarball, TT_ZSTD);
        for (int i = 0; i < 6; i++) {
                char name[16];
                snprintf(name, sizeof(name), "f%d", i);
                tt_file(a, name, "", 0644);
        }
        tt_archive_close(a);
        assert_refused(&(wk_template_limits){.max_entries = 5}, SP_E_LIMIT, "entry 'f5': more than 5 entries");
        ck_assert_int_eq(tt_count_entries(dest), 5);

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        a = tt_archive_open(tarball, TT_GZIP);
        tt_file(a, "small", "12345", 0644);
        tt_file(a, "big", "123456", 0644);
        tt_archive_close(a);
        /* What they cost on disk: the root (an empty name), then each name
         * (overhead and length, metadata twice) and its bytes. */
        uint64_t root = 2 * 512, small = 2 * (512 + 5) + 5, big = 2 * (512 + 3) + 6;
        char want[128];
        snprintf(want, sizeof(want), "entry 'big': the template exceeds %llu bytes",
                 (unsigned long long)(root + small + big - 1));
        assert_refused(&(wk_template_limits){.max_bytes = root + small + big - 1}, SP_E_TOO_LARGE, want);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        wk_template_stats stats;
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_tar(tarball, dest, &(wk_template_limits){.max_bytes = root + small + big}, &stats,
                                          NULL, &err),
                   &err);
        ck_assert_uint_eq(stats.cost, root + small + big);
        uint64_t measured = 0;
        sp_test_ok(wk_template_measure(dest, &measured, &err), &err);
        ck_assert_uint_eq(measured, root + small + big);

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_entry(AE_IFREG, "a-name-of-17-byte", NULL);
        assert_refused(&(wk_template_limits){.max_path = 16}, SP_E_LIMIT, "entry 'a-name-of-17-byte': path longer");

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_entry(AE_IFREG, "a/b/c/d", NULL);
        assert_refused(&(wk_template_limits){.max_depth = 3}, SP_E_LIMIT, "entry 'a/b/c/d': path deeper than 3");
}
END_TEST

/* Directories with paths of ~3.8 KB (15 components of 250 bytes, within
 * max_path and max_depth): what the importer keeps of them until the end of
 * the archive is bounded by max_memory, not by the archive's few bytes. */
START_TEST(bounds_the_memory_directories_take)
{
        struct archive *a = tt_archive_open(tarball, TT_ZSTD);
        char comp[251];
        memset(comp, 'c', 250);
        comp[250] = '\0';
        for (int i = 0; i < 200; i++) {
                char path[4096];
                int o = snprintf(path, sizeof(path), "d%03d", i);
                for (int k = 1; k < 15; k++)
                        o += snprintf(path + o, sizeof(path) - (size_t)o, "/%s", comp);
                ck_assert_int_lt(o, 4096);
                tt_dir(a, path, 0755);
        }
        tt_archive_close(a);
        /* 200 paths of ~3.5 KB: more than 256 KiB kept. */
        assert_refused(&(wk_template_limits){.max_memory = 256 << 10}, SP_E_LIMIT,
                       "the archive's directories and paths need more than 262144 bytes of the importer's memory");
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        sp_error *err = NULL;
        wk_template_stats stats;
        sp_test_ok(wk_template_import_tar(tarball, dest, NULL, &stats, NULL, &err), &err);
        ck_assert_uint_eq(stats.entries, 200);
}
END_TEST

/* What the room callback saw, and after how many calls it refuses (0: never). */
typedef struct {
        int calls, refuse_at;
        uint64_t asked;
        bool bad_fd;
} room_seen;

static int room_cb(void *ud, int fd, uint64_t n, sp_error **err)
{
        room_seen *r = ud;
        struct stat st;
        r->bad_fd |= fstat(fd, &st) < 0;
        r->asked += n;
        if (++r->calls == r->refuse_at)
                return sp_error_set(err, SP_E_TOO_LARGE, "no room left (test)");
        return 0;
}

/* The room is asked for before each 4 MiB written, inside a large file too,
 * and a refusal stops the import there. */
START_TEST(asks_for_room_every_step)
{
        size_t n = 10u << 20;
        char *data = calloc(1, n + 1);
        memset(data, 'z', n);
        struct archive *a = tt_archive_open(tarball, TT_ZSTD);
        tt_file(a, "small", "12345", 0644);
        tt_file(a, "big", data, 0644);
        tt_archive_close(a);
        free(data);
        room_seen seen = {0};
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_tar(tarball, dest, &(wk_template_limits){.room = room_cb, .room_ud = &seen}, NULL,
                                          NULL, &err),
                   &err);
        ck_assert_int_ge(seen.calls, 3);
        ck_assert(!seen.bad_fd);
        ck_assert_uint_ge(seen.asked, n / 2);

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        seen = (room_seen){.refuse_at = 2};
        ck_assert_int_eq(wk_template_import_tar(tarball, dest, &(wk_template_limits){.room = room_cb, .room_ud = &seen},
                                                NULL, NULL, &err),
                         -SP_E_TOO_LARGE);
        ck_assert_msg(strstr(err->message, "entry 'big'") && strstr(err->message, "no room left (test)"), "%s",
                      err->message);
        sp_error_free(err);
        struct stat st;
        ck_assert_int_eq(stat(at("big"), &st), 0);
        ck_assert_int_lt(st.st_size, (off_t)n);
}
END_TEST

START_TEST(refuses_garbage_and_busy_destination)
{
        tt_write(tarball, "this is not a tarball, not even compressed, just text\n", 0644);
        assert_refused(NULL, SP_E_INVALID, "import tarball");

        struct archive *a = tt_archive_open(tarball, TT_PLAIN);
        tt_file(a, "x", "x", 0644);
        tt_archive_close(a);
        tt_write(at("already-here"), "", 0644);
        assert_refused(NULL, SP_E_CONFLICT, "is not empty");

        /* a truncated compressed archive */
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        a = tt_archive_open(tarball, TT_GZIP);
        char big[5000];
        memset(big, 'z', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        for (int i = 0; i < 20; i++) {
                char name[16];
                snprintf(name, sizeof(name), "f%d", i);
                big[i] = (char)('a' + i);
                tt_file(a, name, big, 0644);
        }
        tt_archive_close(a);
        struct stat st;
        ck_assert_int_eq(stat(tarball, &st), 0);
        ck_assert_int_eq(truncate(tarball, st.st_size / 2), 0);
        assert_refused(NULL, SP_E_INVALID, "import tarball");
}
END_TEST

START_TEST(normalises_paths)
{
        static const struct {
                const char *in, *out, *error;
        } cases[] = {
                {"a", "a", NULL},
                {"./a//b/./c/", "a/b/c", NULL},
                {"./", "", NULL},
                {".", "", NULL},
                {"...", "...", NULL},
                {"a/.../b", "a/.../b", NULL},
                {"..a/b..", "..a/b..", NULL},
                {"", NULL, "empty name"},
                {"/", NULL, "absolute path"},
                {"//a", NULL, "absolute path"},
                {"..", NULL, "'..'"},
                {"a/..", NULL, "'..'"},
                {"a/../b", NULL, "'..'"},
        };
        wk_template_limits lim = wk__tpl_limits_resolve(NULL);
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                char *out = NULL;
                sp_error *err = NULL;
                int r = wk__tpl_path_normalize(cases[i].in, &lim, &out, &err);
                if (cases[i].out) {
                        ck_assert_msg(r == 0, "'%s': %s", cases[i].in, err ? err->message : "");
                        ck_assert_str_eq(out, cases[i].out);
                        free(out);
                } else {
                        tt_assert_error(r, err, SP_E_INVALID, cases[i].error);
                }
        }
        char name[300];
        memset(name, 'n', 256);
        name[256] = '\0';
        char *out = NULL;
        sp_error *err = NULL;
        tt_assert_error(wk__tpl_path_normalize(name, &lim, &out, &err), err, SP_E_INVALID, "longer than 255");
}
END_TEST

START_TEST(opens_beneath_without_symlinks)
{
        char p[1024];
        snprintf(p, sizeof(p), "%s/d", dest);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/l", dest);
        ck_assert_int_eq(symlink("d", p), 0);
        int root = open(dest, O_RDONLY | O_DIRECTORY);
        ck_assert_int_ge(root, 0);
        for (int mode = 0; mode < 2; mode++) {
                wk__tpl_set_use_openat2(mode == 0);
                int fd = wk__tpl_open_dir_beneath(root, "d", O_RDONLY);
                ck_assert_int_ge(fd, 0);
                close(fd);
                int r = wk__tpl_open_dir_beneath(root, "l", O_RDONLY);
                ck_assert_msg(r == -ELOOP || r == -ENOTDIR, "mode %d: %d", mode, r);
                const char *base;
                r = wk__tpl_open_parent(root, "l/x", true, &base);
                ck_assert_msg(r == -ELOOP || r == -ENOTDIR, "mode %d: %d", mode, r);
                fd = wk__tpl_open_parent(root, "n/m/x", true, &base);
                ck_assert_int_ge(fd, 0);
                ck_assert_str_eq(base, "x");
                close(fd);
                ck_assert_uint_eq(perm(at("n/m")), 0755);
                tt_rmrf(at("n"));
        }
        close(root);
        ck_assert_int_eq(tt_count_entries(at("d")), 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_tar");
        TCase *tc = tcase_create("import");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_loop_test(tc, every_compression_and_entry_type, 0, (int)SP_ARRAY_SIZE(filters));
        tcase_add_test(tc, later_entries_replace_earlier_ones);
        tcase_add_test(tc, reads_from_a_pipe);
        tcase_add_test(tc, normalises_paths);
        tcase_add_test(tc, opens_beneath_without_symlinks);
        suite_add_tcase(s, tc);
        TCase *bad = tcase_create("malicious");
        tcase_add_checked_fixture(bad, setup, teardown);
        tcase_add_test(bad, refuses_dotdot);
        tcase_add_test(bad, refuses_absolute);
        tcase_add_test(bad, refuses_inner_dotdot);
        tcase_add_test(bad, refuses_write_through_symlink);
        tcase_add_test(bad, refuses_write_through_symlink_without_openat2);
        tcase_add_test(bad, refuses_hardlink_out);
        tcase_add_test(bad, refuses_device_nodes);
        tcase_add_test(bad, enforces_limits);
        tcase_add_test(bad, bounds_the_memory_directories_take);
        tcase_add_test(bad, asks_for_room_every_step);
        tcase_add_test(bad, refuses_garbage_and_busy_destination);
        suite_add_tcase(s, bad);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
