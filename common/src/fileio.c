/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/fileio.h"

int sp_file_read(const char *path, size_t max, sp_buf *out, sp_error **err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open %s", path);
        size_t start = out->len;
        for (;;) {
                if (out->len - start > max)
                        break;
                if (sp_buf_reserve(out, 65536, err) < 0)
                        return -SP_E_TOO_LARGE;
                ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        out->len = start;
                        out->data[start] = '\0';
                        return sp_error_set_errno(err, SP_E_IO, errno, "read %s", path);
                }
                if (n == 0)
                        break;
                out->len += (size_t)n;
        }
        if (out->len - start > max) {
                out->len = start;
                out->data[start] = '\0';
                return sp_error_set(err, SP_E_TOO_LARGE, "%s is larger than %zu bytes", path, max);
        }
        out->data[out->len] = '\0';
        return 0;
}

static int write_atomic(const char *path, const void *data, size_t len, mode_t mode, bool sync, sp_error **err)
{
        char tmp[PATH_MAX];
        if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
                return sp_error_set(err, SP_E_INVALID, "path too long: %s", path);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "create %s", tmp);
        const char *p = data;
        size_t left = len;
        while (left > 0) {
                ssize_t n = write(fd, p, left);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        int e = errno;
                        unlink(tmp);
                        return sp_error_set_errno(err, sp_errc_from_errno(e), e, "write %s", tmp);
                }
                p += n;
                left -= (size_t)n;
        }
        if (fchmod(fd, mode) < 0 || (sync && fsync(fd) < 0)) {
                int e = errno;
                unlink(tmp);
                return sp_error_set_errno(err, SP_E_IO, e, "sync %s", tmp);
        }
        if (rename(tmp, path) < 0) {
                int e = errno;
                unlink(tmp);
                return sp_error_set_errno(err, sp_errc_from_errno(e), e, "rename %s", path);
        }
        if (!sync)
                return 0;
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", path);
        _cleanup_close_ int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0)
                (void)fsync(dfd);
        return 0;
}

int sp_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode, sp_error **err)
{
        return write_atomic(path, data, len, mode, true, err);
}

int sp_file_replace(const char *path, const void *data, size_t len, mode_t mode, sp_error **err)
{
        return write_atomic(path, data, len, mode, false, err);
}

int sp_mkdir_p(const char *path, mode_t mode, sp_error **err)
{
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
                return sp_error_set(err, SP_E_INVALID, "path too long: %s", path);
        /* Most calls make one directory in a parent that exists: try that
         * first, and walk from the root only when a parent is missing. */
        if (mkdir(p, mode) == 0 || errno == EEXIST)
                return 0;
        if (errno != ENOENT)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "mkdir %s", p);
        for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                        continue;
                *s = '\0';
                if (mkdir(p, mode) < 0 && errno != EEXIST)
                        return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "mkdir %s", p);
                *s = '/';
        }
        if (mkdir(p, mode) < 0 && errno != EEXIST)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "mkdir %s", p);
        return 0;
}
