/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers shared by the template tests: archives written with libarchive's
 * writer, file reading and comparison, sha256 of files, tree removal.
 */
#ifndef TEST_TEMPLATE_UTIL_H
#define TEST_TEMPLATE_UTIL_H

#include <archive.h>
#include <archive_entry.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "space/buf.h"
#include "template/internal.h"

enum tt_filter { TT_PLAIN, TT_GZIP, TT_ZSTD, TT_XZ, TT_BZIP2 };

/* A new pax archive writing to path with the given compression. */
static inline struct archive *tt_archive_open(const char *path, enum tt_filter f)
{
        struct archive *a = archive_write_new();
        ck_assert_ptr_nonnull(a);
        ck_assert_int_eq(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
        int r = ARCHIVE_OK;
        switch (f) {
        case TT_PLAIN:
                break;
        case TT_GZIP:
                r = archive_write_add_filter_gzip(a);
                break;
        case TT_ZSTD:
                r = archive_write_add_filter_zstd(a);
                break;
        case TT_XZ:
                r = archive_write_add_filter_xz(a);
                break;
        case TT_BZIP2:
                r = archive_write_add_filter_bzip2(a);
                break;
        }
        ck_assert_msg(r == ARCHIVE_OK, "filter: %s", archive_error_string(a));
        ck_assert_msg(archive_write_open_filename(a, path) == ARCHIVE_OK, "open %s: %s", path, archive_error_string(a));
        return a;
}

static inline void tt_archive_close(struct archive *a)
{
        ck_assert_int_eq(archive_write_close(a), ARCHIVE_OK);
        archive_write_free(a);
}

/* Adds an entry: type AE_IFREG (data), AE_IFDIR, AE_IFLNK (link = target),
 * AE_IFCHR/AE_IFBLK/AE_IFIFO; a non-NULL link with type 0 makes a hard link. */
static inline void tt_add(struct archive *a, const char *name, unsigned type, unsigned perm, const char *data,
                          const char *link)
{
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, name);
        archive_entry_set_perm(e, perm);
        archive_entry_set_mtime(e, 1700000000, 0);
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        if (type == 0) {
                archive_entry_set_filetype(e, AE_IFREG);
                archive_entry_set_hardlink(e, link);
                archive_entry_set_size(e, 0);
        } else {
                archive_entry_set_filetype(e, type);
                if (type == AE_IFLNK)
                        archive_entry_set_symlink(e, link);
                if (type == AE_IFCHR || type == AE_IFBLK)
                        archive_entry_set_rdev(e, makedev(1, 3));
                archive_entry_set_size(e, type == AE_IFREG && data ? (la_int64_t)strlen(data) : 0);
        }
        ck_assert_msg(archive_write_header(a, e) == ARCHIVE_OK, "header %s: %s", name, archive_error_string(a));
        if (type == AE_IFREG && data && *data)
                ck_assert_int_eq(archive_write_data(a, data, strlen(data)), (la_ssize_t)strlen(data));
        archive_entry_free(e);
}

static inline void tt_file(struct archive *a, const char *name, const char *data, unsigned perm)
{
        tt_add(a, name, AE_IFREG, perm, data, NULL);
}

static inline void tt_dir(struct archive *a, const char *name, unsigned perm)
{
        tt_add(a, name, AE_IFDIR, perm, NULL, NULL);
}

static inline void tt_symlink(struct archive *a, const char *name, const char *target)
{
        tt_add(a, name, AE_IFLNK, 0777, NULL, target);
}

static inline void tt_hardlink(struct archive *a, const char *name, const char *target)
{
        tt_add(a, name, 0, 0644, NULL, target);
}

/* The whole file as a NUL-terminated string (NULL if it cannot be read). */
static inline char *tt_read(const char *path)
{
        sp_buf b = SP_BUF_INIT;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        char chunk[4096];
        ssize_t n;
        while ((n = read(fd, chunk, sizeof(chunk))) > 0)
                sp_buf_append(&b, chunk, (size_t)n, NULL);
        close(fd);
        if (!b.data)
                return strdup("");
        return sp_buf_steal(&b);
}

static inline void tt_write(const char *path, const char *data, mode_t mode)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
        ck_assert_int_eq(write(fd, data, strlen(data)), (ssize_t)strlen(data));
        ck_assert_int_eq(fchmod(fd, mode), 0);
        close(fd);
}

/* Asserts that path holds exactly data. */
#define tt_assert_content(path, data) \
        do { \
                char *got_ = tt_read(path); \
                ck_assert_msg(got_ != NULL, "cannot read %s", (path)); \
                ck_assert_str_eq(got_, (data)); \
                free(got_); \
        } while (0)

/* "sha256:<hex>" of a file's bytes. */
static inline void tt_sha256_file(const char *path, char out[WK_TEMPLATE_DIGEST_MAX])
{
        char *data = NULL;
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        data = malloc((size_t)st.st_size + 1);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(read(fd, data, (size_t)st.st_size), st.st_size);
        close(fd);
        ck_assert_int_eq(wk__tpl_sha256(data, (size_t)st.st_size, out, NULL), 0);
        free(data);
}

/* Removes path and everything below it (read-only directories included). */
static inline void tt_rmrf(const char *path)
{
        if (path)
                wk__tpl_remove_tree(AT_FDCWD, path, 4096);
}

/* The number of entries in a directory (-1 if it cannot be read). */
static inline int tt_count_entries(const char *path)
{
        DIR *d = opendir(path);
        if (!d)
                return -1;
        int n = 0;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        n++;
        closedir(d);
        return n;
}

/* Asserts that r failed with code and that the message contains needle. */
#define tt_assert_error(r, err, want, needle) \
        do { \
                ck_assert_int_lt((r), 0); \
                ck_assert_ptr_nonnull(err); \
                ck_assert_msg((err)->code == (want), "code %d, want %d: %s", (int)(err)->code, (int)(want), \
                              (err)->message); \
                ck_assert_msg(strstr((err)->message, (needle)) != NULL, "message '%s' lacks '%s'", (err)->message, \
                              (needle)); \
                sp_error_freep(&(err)); \
        } while (0)

#endif
