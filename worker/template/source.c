/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template sources confined to the operator's import root: a path from a
 * request is resolved beneath the root without following symlinks, and every
 * way it can fail reads alike, so that a caller learns nothing about the host
 * from an import that does not work.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "template/internal.h"
#include "template/template.h"

static int refused(sp_error **err)
{
        return sp_error_set(err, SP_E_NOT_FOUND, "%s", WK_TEMPLATE_SOURCE_REFUSED);
}

/* The part of path below root ("" for root itself), or NULL when an absolute
 * path is not inside root. A relative path is taken as it is. */
static const char *below(const char *root, const char *path)
{
        if (path[0] != '/')
                return path;
        size_t n = strlen(root);
        while (n > 1 && root[n - 1] == '/')
                n--;
        if (n == 1 && root[0] == '/')
                return path + 1;
        if (strncmp(path, root, n) != 0 || (path[n] != '/' && path[n] != '\0'))
                return NULL;
        return path[n] ? path + n + 1 : path + n;
}

int wk_template_source_open(const char *root, const char *path, bool want_dir, sp_error **err)
{
        if (!root || !*root)
                return sp_error_set(
                        err, SP_E_PERMISSION,
                        "this worker imports no templates from host paths (it has no template import root)");
        if (!path || !*path)
                return refused(err);
        _cleanup_close_ int rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (rootfd < 0) {
                sp_log_warn("template import root: %s", strerror(errno));
                return refused(err);
        }
        /* The path may name the root as configured or as resolved. */
        const char *rest = below(root, path);
        if (!rest) {
                _cleanup_free_ char *real = realpath(root, NULL);
                if (real)
                        rest = below(real, path);
        }
        if (!rest)
                return refused(err);
        wk_template_limits lim = wk__tpl_limits_resolve(NULL);
        _cleanup_free_ char *rel = NULL;
        if (*rest && wk__tpl_path_normalize(rest, &lim, &rel, NULL) < 0)
                return refused(err);
        int fd;
        if (!rel || !*rel) {
                if (!want_dir)
                        return refused(err);
                fd = openat(rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0)
                        return refused(err);
        } else if (want_dir) {
                fd = wk__tpl_open_dir_beneath(rootfd, rel, O_RDONLY);
                if (fd < 0)
                        return refused(err);
        } else {
                const char *base = NULL;
                _cleanup_close_ int parent = wk__tpl_open_parent(rootfd, rel, false, &base);
                if (parent < 0)
                        return refused(err);
                /* Non-blocking, so that a fifo cannot hold the open; checked to be a file below. */
                fd = openat(parent, base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
                if (fd < 0)
                        return refused(err);
        }
        _cleanup_close_ int owned = fd;
        struct stat st;
        if (fstat(fd, &st) < 0 || (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
                return refused(err);
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
                return refused(err);
        return TAKE_FD(owned);
}
