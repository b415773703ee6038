/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The newc cpio writer (initramfs.h): checks every entry first, then writes
 * headers, names and data through one buffer into a temporary file that is
 * renamed into place once synced. No state outside the call.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/initramfs.h"
#include "space/buf.h"
#include "space/cleanup.h"

#define HEADER_BYTES 110 /* "070701" and 13 fields of 8 hex digits */
#define FLUSH_BYTES (256u << 10)
#define NAME_MAX_BYTES 4095
#define TRAILER "TRAILER!!!"

typedef struct writer {
        int fd;
        const char *path; /* the temporary file, for messages */
        uint64_t off; /* bytes written and buffered: what padding aligns to */
        sp_buf buf;
} writer;

static int flush(writer *w, sp_error **err)
{
        size_t done = 0;
        while (done < w->buf.len) {
                ssize_t n = write(w->fd, w->buf.data + done, w->buf.len - done);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "write %s", w->path);
                }
                done += (size_t)n;
        }
        sp_buf_clear(&w->buf);
        return 0;
}

static int put(writer *w, const void *p, size_t n, sp_error **err)
{
        if (sp_buf_append(&w->buf, p, n, err) < 0)
                return -SP_E_INTERNAL;
        w->off += n;
        return w->buf.len >= FLUSH_BYTES ? flush(w, err) : 0;
}

static int pad4(writer *w, sp_error **err)
{
        static const char zeros[4];
        size_t n = (size_t)(-w->off & 3);
        return n ? put(w, zeros, n, err) : 0;
}

static int header(writer *w, uint32_t ino, uint32_t mode, uint32_t nlink, uint32_t size, const char *name,
                  sp_error **err)
{
        size_t namesize = strlen(name) + 1;
        char h[HEADER_BYTES + 1];
        /* magic ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor namesize check */
        snprintf(h, sizeof(h), "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X", ino, mode, 0u, 0u, nlink,
                 0u, size, 0u, 0u, 0u, 0u, (unsigned)namesize, 0u);
        int r = put(w, h, HEADER_BYTES, err);
        if (r < 0)
                return r;
        r = put(w, name, namesize, err);
        if (r < 0)
                return r;
        return pad4(w, err);
}

static bool valid_name(const char *name)
{
        size_t len = strlen(name);
        if (len == 0 || len > NAME_MAX_BYTES || name[0] == '/' || name[len - 1] == '/' || strcmp(name, TRAILER) == 0)
                return false;
        for (const char *c = name; *c;) {
                size_t part = strcspn(c, "/");
                if (part == 0 || (part == 1 && c[0] == '.') || (part == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c += part;
                if (*c == '/')
                        c++;
        }
        return true;
}

/* Whether entry i's parent is a directory listed before it (or it is at the top). */
static bool parent_listed(const wk_cpio_entry *entries, size_t i)
{
        const char *name = entries[i].name;
        const char *slash = strrchr(name, '/');
        if (!slash)
                return true;
        size_t plen = (size_t)(slash - name);
        for (size_t j = 0; j < i; j++)
                if (S_ISDIR(entries[j].mode) && strlen(entries[j].name) == plen &&
                    memcmp(entries[j].name, name, plen) == 0)
                        return true;
        return false;
}

static int check_entries(const wk_cpio_entry *entries, size_t n, sp_error **err)
{
        for (size_t i = 0; i < n; i++) {
                const wk_cpio_entry *e = &entries[i];
                if (!e->name || !valid_name(e->name))
                        return sp_error_set(err, SP_E_INVALID, "initramfs entry %zu: bad name '%s'", i,
                                            e->name ? e->name : "(null)");
                if ((e->mode & ~(uint32_t)(S_IFMT | 07777)) || (!S_ISREG(e->mode) && !S_ISDIR(e->mode)))
                        return sp_error_set(err, SP_E_INVALID, "initramfs %s: mode %o is not a file's or a directory's",
                                            e->name, e->mode);
                if (S_ISDIR(e->mode) && (e->src || e->data || e->len))
                        return sp_error_set(err, SP_E_INVALID, "initramfs %s: a directory with contents", e->name);
                if (S_ISREG(e->mode) && e->src && (e->data || e->len))
                        return sp_error_set(err, SP_E_INVALID, "initramfs %s: both a source file and data", e->name);
                if (S_ISREG(e->mode) && !e->src && e->len && !e->data)
                        return sp_error_set(err, SP_E_INVALID, "initramfs %s: a length without data", e->name);
                if (e->len > UINT32_MAX)
                        return sp_error_set(err, SP_E_INVALID, "initramfs %s: %zu bytes, over newc's 4 GiB", e->name,
                                            e->len);
                if (!parent_listed(entries, i))
                        return sp_error_set(err, SP_E_INVALID, "initramfs %s: its directory is not listed before it",
                                            e->name);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(entries[j].name, e->name) == 0)
                                return sp_error_set(err, SP_E_INVALID, "initramfs %s: listed twice", e->name);
        }
        return 0;
}

/* Copies the host file src, whose size goes in the header first: a file that
 * grows or shrinks meanwhile is an error, not a corrupt archive. */
static int put_file(writer *w, uint32_t ino, const wk_cpio_entry *e, sp_error **err)
{
        _cleanup_close_ int fd = open(e->src, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open %s", e->src);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", e->src);
        if (!S_ISREG(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "initramfs %s: %s is not a regular file", e->name, e->src);
        if ((uint64_t)st.st_size > UINT32_MAX)
                return sp_error_set(err, SP_E_INVALID, "initramfs %s: %s is over newc's 4 GiB", e->name, e->src);
        uint32_t size = (uint32_t)st.st_size;
        int r = header(w, ino, e->mode, 1, size, e->name, err);
        if (r < 0)
                return r;
        uint64_t left = size;
        for (;;) {
                if (sp_buf_reserve(&w->buf, FLUSH_BYTES, err) < 0)
                        return -SP_E_INTERNAL;
                /* One byte more than is left: to see a file that grew. */
                size_t want = left + 1 < FLUSH_BYTES ? (size_t)left + 1 : FLUSH_BYTES;
                ssize_t got = read(fd, w->buf.data + w->buf.len, want);
                if (got < 0) {
                        if (errno == EINTR)
                                continue;
                        return sp_error_set_errno(err, SP_E_IO, errno, "read %s", e->src);
                }
                if ((uint64_t)got > left)
                        return sp_error_set(err, SP_E_CONFLICT, "%s grew while it was copied", e->src);
                if (got == 0) {
                        if (left > 0)
                                return sp_error_set(err, SP_E_CONFLICT, "%s shrank while it was copied", e->src);
                        break;
                }
                w->buf.len += (size_t)got;
                w->buf.data[w->buf.len] = '\0';
                w->off += (uint64_t)got;
                left -= (uint64_t)got;
                if (w->buf.len >= FLUSH_BYTES && (r = flush(w, err)) < 0)
                        return r;
        }
        return pad4(w, err);
}

static int put_entry(writer *w, uint32_t ino, const wk_cpio_entry *e, sp_error **err)
{
        if (S_ISDIR(e->mode))
                return header(w, ino, e->mode, 2, 0, e->name, err);
        if (e->src)
                return put_file(w, ino, e, err);
        int r = header(w, ino, e->mode, 1, (uint32_t)e->len, e->name, err);
        if (r < 0)
                return r;
        if (e->len && (r = put(w, e->data, e->len, err)) < 0)
                return r;
        return pad4(w, err);
}

static void writer_free(writer *w)
{
        sp_buf_free(&w->buf);
}

/* Removes the temporary file unless it was renamed into place. */
typedef struct temp_file {
        char path[PATH_MAX];
        bool made;
} temp_file;

static void temp_file_remove(temp_file *t)
{
        if (t->made)
                (void)unlink(t->path);
}

int wk_initramfs_write(const char *path, const wk_cpio_entry *entries, size_t n, sp_error **err)
{
        int r = check_entries(entries, n, err);
        if (r < 0)
                return r;
        if (n > UINT32_MAX - 1)
                return sp_error_set(err, SP_E_INVALID, "initramfs: %zu entries, too many for newc", n);

        _cleanup_(temp_file_remove) temp_file tmp = {0};
        if (snprintf(tmp.path, sizeof(tmp.path), "%s.XXXXXX", path) >= (int)sizeof(tmp.path))
                return sp_error_set(err, SP_E_INVALID, "path too long: %s", path);
        _cleanup_close_ int fd = mkostemp(tmp.path, O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "create %s", tmp.path);
        tmp.made = true;

        _cleanup_(writer_free) writer w = {.fd = fd, .path = tmp.path};
        for (size_t i = 0; i < n; i++)
                if ((r = put_entry(&w, (uint32_t)(i + 1), &entries[i], err)) < 0)
                        return r;
        if ((r = header(&w, 0, 0, 1, 0, TRAILER, err)) < 0 || (r = flush(&w, err)) < 0)
                return r;
        if (fchmod(fd, 0644) < 0 || fsync(fd) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "sync %s", tmp.path);
        if (rename(tmp.path, path) < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "rename %s to %s", tmp.path, path);
        tmp.made = false;

        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", path);
        _cleanup_close_ int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0)
                (void)fsync(dfd);
        return 0;
}
