/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the initramfs writer (worker/backend/initramfs.h) — an archive
 * of directories, files from the host and a file from memory, read back
 * field by field (headers, names, sizes, contents, padding, the trailer) and,
 * when the host has busybox (Debian's busybox-static), unpacked by its cpio;
 * entries refused and nothing left behind when it fails. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/initramfs.h"
#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"

static char *dir;
static char out[600];

static void setup(void)
{
        dir = sp_test_tmpdir("initramfs");
        snprintf(out, sizeof(out), "%s/initramfs.cpio", dir);
}

static void teardown(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* Bytes that are not all alike, so a misplaced copy shows. */
static void pattern(unsigned char *p, size_t n, unsigned seed)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (unsigned char)((i + seed) * 2654435761u >> 11);
}

static void write_source(const char *name, size_t n, unsigned seed, char *path, size_t path_n)
{
        snprintf(path, path_n, "%s/%s", dir, name);
        _cleanup_free_ unsigned char *p = malloc(n ? n : 1);
        pattern(p, n, seed);
        sp_error *e = NULL;
        sp_test_ok(sp_file_write_atomic(path, p, n, 0600, &e), &e);
}

/* One entry as read back from the archive. */
typedef struct got_entry {
        uint32_t f[13]; /* ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor namesize check */
        const char *name;
        const unsigned char *data;
} got_entry;

enum { F_INO, F_MODE, F_UID, F_GID, F_NLINK, F_MTIME, F_SIZE, F_DEVMAJ, F_DEVMIN, F_RDEVMAJ, F_RDEVMIN, F_NAMESZ };

static uint32_t hex8(const char *p)
{
        uint32_t v = 0;
        for (int i = 0; i < 8; i++) {
                char c = p[i];
                ck_assert_msg((c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'), "'%c' in a header field", c);
                v = v * 16 + (uint32_t)(c <= '9' ? c - '0' : c - 'A' + 10);
        }
        return v;
}

static void zeros(const char *a, size_t from, size_t to)
{
        for (size_t i = from; i < to; i++)
                ck_assert_msg(a[i] == 0, "padding byte %zu is %d", i, a[i]);
}

/* Parses the archive a (n bytes) into got (at most max entries, the trailer
 * excluded), checking the format's rules on the way; returns the count. */
static size_t parse_archive(const char *a, size_t n, got_entry *got, size_t max)
{
        size_t off = 0, count = 0;
        for (;;) {
                ck_assert_uint_eq(off % 4, 0);
                ck_assert_uint_le(off + 110, n);
                ck_assert(memcmp(a + off, "070701", 6) == 0);
                got_entry g;
                for (int i = 0; i < 13; i++)
                        g.f[i] = hex8(a + off + 6 + 8 * i);
                size_t name_at = off + 110;
                ck_assert_uint_ge(g.f[F_NAMESZ], 2);
                ck_assert_uint_le(name_at + g.f[F_NAMESZ], n);
                g.name = a + name_at;
                ck_assert_uint_eq(strnlen(g.name, g.f[F_NAMESZ]), g.f[F_NAMESZ] - 1);
                size_t data_at = (name_at + g.f[F_NAMESZ] + 3) & ~(size_t)3;
                zeros(a, name_at + g.f[F_NAMESZ], data_at);
                size_t end = data_at + g.f[F_SIZE];
                ck_assert_uint_le(end, n);
                g.data = (const unsigned char *)a + data_at;
                size_t next = (end + 3) & ~(size_t)3;
                ck_assert_uint_le(next, n);
                zeros(a, end, next);
                /* the same for every entry: reproducible, owned by root, no devices */
                ck_assert_uint_eq(g.f[F_UID], 0);
                ck_assert_uint_eq(g.f[F_GID], 0);
                ck_assert_uint_eq(g.f[F_MTIME], 0);
                ck_assert_uint_eq(g.f[F_DEVMAJ] | g.f[F_DEVMIN] | g.f[F_RDEVMAJ] | g.f[F_RDEVMIN], 0);
                ck_assert_uint_eq(g.f[12], 0); /* check: newc has none */
                off = next;
                if (strcmp(g.name, "TRAILER!!!") == 0) {
                        ck_assert_uint_eq(g.f[F_INO], 0);
                        ck_assert_uint_eq(g.f[F_MODE], 0);
                        ck_assert_uint_eq(g.f[F_NLINK], 1);
                        ck_assert_uint_eq(g.f[F_SIZE], 0);
                        ck_assert_uint_eq(off, n); /* nothing after it */
                        return count;
                }
                ck_assert_uint_lt(count, max);
                got[count++] = g;
        }
}

/* The files the tests archive: sizes around the 4-byte padding and the
 * writer's 256 KiB buffer. */
#define INIT_SIZE ((256u << 10) * 2 + 3)
#define MOD_SIZE 5u
static const char ORDER[] = "virtio_ring\nvirtio\nvirtio_mmio\n";

static void build(char *init_src, size_t init_n, char *mod_src, size_t mod_n)
{
        write_source("agent", INIT_SIZE, 1, init_src, init_n);
        write_source("virtio.ko", MOD_SIZE, 2, mod_src, mod_n);
        wk_cpio_entry entries[] = {
                {.name = "init", .mode = 0100755, .src = init_src},
                {.name = "lib", .mode = 040755},
                {.name = "lib/space", .mode = 040755},
                {.name = "lib/space/modules", .mode = 040700},
                {.name = "lib/space/modules/virtio.ko", .mode = 0100644, .src = mod_src},
                {.name = "lib/space/modules/order", .mode = 0100644, .data = ORDER, .len = strlen(ORDER)},
                {.name = "empty", .mode = 0100600},
        };
        sp_error *e = NULL;
        sp_test_ok(wk_initramfs_write(out, entries, SP_ARRAY_SIZE(entries), &e), &e);
}

START_TEST(archive_reads_back)
{
        char init_src[700], mod_src[700];
        build(init_src, sizeof(init_src), mod_src, sizeof(mod_src));
        _cleanup_buf_ sp_buf a = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(out, 16u << 20, &a, &e), &e);
        struct stat st;
        ck_assert_int_eq(stat(out, &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0644);

        got_entry got[16];
        ck_assert_uint_eq(parse_archive(a.data, a.len, got, 16), 7);
        static const struct {
                const char *name;
                uint32_t mode, nlink, size;
        } want[] = {
                {"init", 0100755, 1, INIT_SIZE},
                {"lib", 040755, 2, 0},
                {"lib/space", 040755, 2, 0},
                {"lib/space/modules", 040700, 2, 0},
                {"lib/space/modules/virtio.ko", 0100644, 1, MOD_SIZE},
                {"lib/space/modules/order", 0100644, 1, sizeof(ORDER) - 1},
                {"empty", 0100600, 1, 0},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(want); i++) {
                ck_assert_str_eq(got[i].name, want[i].name);
                ck_assert_uint_eq(got[i].f[F_INO], i + 1);
                ck_assert_uint_eq(got[i].f[F_MODE], want[i].mode);
                ck_assert_uint_eq(got[i].f[F_NLINK], want[i].nlink);
                ck_assert_uint_eq(got[i].f[F_SIZE], want[i].size);
                ck_assert_uint_eq(got[i].f[F_NAMESZ], strlen(want[i].name) + 1);
        }
        _cleanup_free_ unsigned char *p = malloc(INIT_SIZE);
        pattern(p, INIT_SIZE, 1);
        ck_assert(memcmp(got[0].data, p, INIT_SIZE) == 0);
        pattern(p, MOD_SIZE, 2);
        ck_assert(memcmp(got[4].data, p, MOD_SIZE) == 0);
        ck_assert(memcmp(got[5].data, ORDER, sizeof(ORDER) - 1) == 0);

        /* written again, the same bytes: reproducible */
        build(init_src, sizeof(init_src), mod_src, sizeof(mod_src));
        _cleanup_buf_ sp_buf again = SP_BUF_INIT;
        sp_test_ok(sp_file_read(out, 16u << 20, &again, &e), &e);
        ck_assert_uint_eq(again.len, a.len);
        ck_assert(memcmp(again.data, a.data, a.len) == 0);
}
END_TEST

static bool file_same(const char *path, const void *p, size_t n)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(path, n + 1, &b, NULL) < 0)
                return false;
        return b.len == n && (n == 0 || memcmp(b.data, p, n) == 0);
}

static uint32_t mode_of(const char *path)
{
        struct stat st;
        ck_assert_msg(lstat(path, &st) == 0, "%s is missing", path);
        return (uint32_t)st.st_mode;
}

START_TEST(busybox_unpacks_it)
{
        const char *busybox = "/bin/busybox";
        if (access(busybox, X_OK) != 0) {
                fprintf(stderr, "SKIP busybox_unpacks_it: no %s (Debian: busybox-static)\n", busybox);
                return;
        }
        char init_src[700], mod_src[700], root[700], cmd[2200], path[800];
        build(init_src, sizeof(init_src), mod_src, sizeof(mod_src));
        snprintf(root, sizeof(root), "%s/root", dir);
        ck_assert_int_eq(mkdir(root, 0755), 0);
        snprintf(cmd, sizeof(cmd), "cd '%s' && umask 0 && %s cpio -i -d < '%s' 2>'%s/cpio.log'", root, busybox, out,
                 dir);
        int rc = system(cmd);
        if (rc != 0) {
                snprintf(path, sizeof(path), "%s/cpio.log", dir);
                sp_test_dump_file_tail("busybox cpio", path, 20);
        }
        ck_assert_int_eq(rc, 0);

        _cleanup_free_ unsigned char *p = malloc(INIT_SIZE);
        snprintf(path, sizeof(path), "%s/init", root);
        pattern(p, INIT_SIZE, 1);
        ck_assert(file_same(path, p, INIT_SIZE));
        ck_assert_uint_eq(mode_of(path), 0100755);
        snprintf(path, sizeof(path), "%s/lib/space/modules", root);
        ck_assert_uint_eq(mode_of(path), 040700);
        snprintf(path, sizeof(path), "%s/lib/space/modules/virtio.ko", root);
        pattern(p, MOD_SIZE, 2);
        ck_assert(file_same(path, p, MOD_SIZE));
        ck_assert_uint_eq(mode_of(path), 0100644);
        snprintf(path, sizeof(path), "%s/lib/space/modules/order", root);
        ck_assert(file_same(path, ORDER, sizeof(ORDER) - 1));
        snprintf(path, sizeof(path), "%s/empty", root);
        ck_assert(file_same(path, "", 0));
        ck_assert_uint_eq(mode_of(path), 0100600);
}
END_TEST

/* The names in dir, sorted and joined by spaces. */
static void dir_names(char *buf, size_t n)
{
        struct dirent **list;
        int k = scandir(dir, &list, NULL, alphasort);
        ck_assert_int_ge(k, 0);
        buf[0] = '\0';
        for (int i = 0; i < k; i++) {
                if (strcmp(list[i]->d_name, ".") != 0 && strcmp(list[i]->d_name, "..") != 0) {
                        strncat(buf, list[i]->d_name, n - strlen(buf) - 1);
                        strncat(buf, " ", n - strlen(buf) - 1);
                }
                free(list[i]);
        }
        free(list);
}

static void refused(const wk_cpio_entry *entries, size_t n, sp_errc code, const char *want)
{
        char before[1024], after[1024];
        dir_names(before, sizeof(before));
        sp_error *e = NULL;
        ck_assert_int_eq(wk_initramfs_write(out, entries, n, &e), -(int)code);
        ck_assert_msg(strstr(e->message, want), "message '%s' lacks '%s'", e->message, want);
        sp_error_free(e);
        /* nothing made, nothing left half-written */
        dir_names(after, sizeof(after));
        ck_assert_str_eq(after, before);
}

START_TEST(bad_entries_refused)
{
        char src[700];
        write_source("src", 10, 3, src, sizeof(src));
        const char *bad_names[] = {"", "/init", "a/", "a//b", ".", "./a", "a/..", "a/../b", "TRAILER!!!"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_names); i++) {
                wk_cpio_entry e[] = {{.name = "a", .mode = 040755}, {.name = bad_names[i], .mode = 0100644}};
                refused(e, 2, SP_E_INVALID, "bad name");
        }
        wk_cpio_entry no_name[] = {{.mode = 0100644}};
        refused(no_name, 1, SP_E_INVALID, "bad name");

        wk_cpio_entry orphan[] = {{.name = "lib/x", .mode = 0100644}, {.name = "lib", .mode = 040755}};
        refused(orphan, 2, SP_E_INVALID, "not listed before it");
        wk_cpio_entry file_parent[] = {{.name = "lib", .mode = 0100644}, {.name = "lib/x", .mode = 0100644}};
        refused(file_parent, 2, SP_E_INVALID, "not listed before it");
        wk_cpio_entry twice[] = {{.name = "a", .mode = 040755}, {.name = "a", .mode = 040755}};
        refused(twice, 2, SP_E_INVALID, "listed twice");
        wk_cpio_entry link[] = {{.name = "a", .mode = 0120777, .data = "x", .len = 1}};
        refused(link, 1, SP_E_INVALID, "mode");
        wk_cpio_entry odd_bits[] = {{.name = "a", .mode = 0100644 | 01000000}};
        refused(odd_bits, 1, SP_E_INVALID, "mode");
        wk_cpio_entry full_dir[] = {{.name = "a", .mode = 040755, .src = src}};
        refused(full_dir, 1, SP_E_INVALID, "a directory with contents");
        wk_cpio_entry both[] = {{.name = "a", .mode = 0100644, .src = src, .data = "x", .len = 1}};
        refused(both, 1, SP_E_INVALID, "both");
        wk_cpio_entry no_data[] = {{.name = "a", .mode = 0100644, .len = 3}};
        refused(no_data, 1, SP_E_INVALID, "without data");

        /* sources that cannot be archived: found only while writing, and
         * the temporary file goes */
        char missing[700];
        snprintf(missing, sizeof(missing), "%s/missing", dir);
        wk_cpio_entry gone[] = {{.name = "a", .mode = 040755}, {.name = "a/b", .mode = 0100644, .src = missing}};
        refused(gone, 2, SP_E_NOT_FOUND, missing);
        wk_cpio_entry a_dir[] = {{.name = "b", .mode = 0100644, .src = dir}};
        refused(a_dir, 1, SP_E_INVALID, "not a regular file");

        /* an existing archive stays as it was when a new one fails */
        wk_cpio_entry good[] = {{.name = "x", .mode = 0100644, .src = src}};
        sp_error *e = NULL;
        sp_test_ok(wk_initramfs_write(out, good, 1, &e), &e);
        _cleanup_buf_ sp_buf before = SP_BUF_INIT, after = SP_BUF_INIT;
        sp_test_ok(sp_file_read(out, 1 << 20, &before, &e), &e);
        refused(gone, 2, SP_E_NOT_FOUND, missing);
        sp_test_ok(sp_file_read(out, 1 << 20, &after, &e), &e);
        ck_assert_uint_eq(after.len, before.len);
        ck_assert(memcmp(after.data, before.data, before.len) == 0);

        /* no entries: the trailer alone */
        sp_test_ok(wk_initramfs_write(out, NULL, 0, &e), &e);
        sp_buf_clear(&after);
        sp_test_ok(sp_file_read(out, 1 << 20, &after, &e), &e);
        got_entry g[1];
        ck_assert_uint_eq(parse_archive(after.data, after.len, g, 1), 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("initramfs");
        TCase *tc = tcase_create("initramfs");
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, archive_reads_back);
        tcase_add_test(tc, busybox_unpacks_it);
        tcase_add_test(tc, bad_entries_refused);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
