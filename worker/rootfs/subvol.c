/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Subvolumes and snapshots, through libbtrfsutil only.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <btrfsutil.h>

#include "space/cleanup.h"

#include "rootfs/internal.h"
#include "rootfs/rootfs.h"

/* The inode number of every subvolume's root directory. */
#define BTRFS_SUBVOL_ROOT_INO 256

int wk__btrfs_error(sp_error **err, enum btrfs_util_error e, const char *what, const char *path)
{
        int errnum = errno;
        sp_errc code;
        switch (e) {
        case BTRFS_UTIL_ERROR_NOT_BTRFS:
        case BTRFS_UTIL_ERROR_NOT_SUBVOLUME:
        case BTRFS_UTIL_ERROR_INVALID_ARGUMENT:
                code = SP_E_INVALID;
                errnum = 0;
                break;
        case BTRFS_UTIL_ERROR_SUBVOLUME_NOT_FOUND:
                code = SP_E_NOT_FOUND;
                errnum = 0;
                break;
        case BTRFS_UTIL_ERROR_NO_MEMORY:
                code = SP_E_INTERNAL;
                break;
        default:
                code = errnum == ENOENT                        ? SP_E_NOT_FOUND
                       : errnum == EEXIST                      ? SP_E_CONFLICT
                       : (errnum == EPERM || errnum == EACCES) ? SP_E_PERMISSION
                       : errnum == EDQUOT || errnum == ENOSPC  ? SP_E_LIMIT
                                                               : SP_E_IO;
                break;
        }
        if (errnum)
                return sp_error_set_errno(err, code, errnum, "%s %s: %s", what, path, btrfs_util_strerror(e));
        return sp_error_set(err, code, "%s %s: %s", what, path, btrfs_util_strerror(e));
}

bool wk__fd_is_btrfs(int fd)
{
        struct statfs sfs;
        return fstatfs(fd, &sfs) == 0 && (unsigned long)sfs.f_type == (unsigned long)BTRFS_SUPER_MAGIC;
}

int wk_subvol_create(const char *path, sp_error **err)
{
        enum btrfs_util_error e = btrfs_util_create_subvolume(path, 0, NULL, NULL);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, "creating subvolume", path);
        return 0;
}

int wk_subvol_snapshot(const char *src, const char *dst, bool read_only, sp_error **err)
{
        int flags = read_only ? BTRFS_UTIL_CREATE_SNAPSHOT_READ_ONLY : 0;
        enum btrfs_util_error e = btrfs_util_create_snapshot(src, dst, flags, NULL, NULL);
        if (e != BTRFS_UTIL_OK) {
                int r = wk__btrfs_error(err, e, "snapshot to", dst);
                sp_error_wrap(err, "snapshotting %s", src);
                return r;
        }
        return 0;
}

int wk_subvol_set_read_only(const char *path, bool read_only, sp_error **err)
{
        enum btrfs_util_error e = btrfs_util_set_subvolume_read_only(path, read_only);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, read_only ? "making read-only" : "making writable", path);
        return 0;
}

int wk_subvol_get_read_only(const char *path, bool *ret, sp_error **err)
{
        bool ro = false;
        enum btrfs_util_error e = btrfs_util_get_subvolume_read_only(path, &ro);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, "reading the flags of", path);
        *ret = ro;
        return 0;
}

int wk_subvol_delete(const char *path, sp_error **err)
{
        enum btrfs_util_error e = btrfs_util_delete_subvolume(path, BTRFS_UTIL_DELETE_SUBVOLUME_RECURSIVE);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, "deleting subvolume", path);
        return 0;
}

int wk_subvol_is(const char *path, bool *ret, sp_error **err)
{
        struct stat s;
        if (lstat(path, &s) < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "stat %s", path);
        enum btrfs_util_error e = btrfs_util_is_subvolume(path);
        if (e == BTRFS_UTIL_OK) {
                *ret = true;
                return 0;
        }
        if (e == BTRFS_UTIL_ERROR_NOT_SUBVOLUME || e == BTRFS_UTIL_ERROR_NOT_BTRFS) {
                *ret = false;
                return 0;
        }
        return wk__btrfs_error(err, e, "checking for a subvolume at", path);
}

int wk_subvol_id(const char *path, uint64_t *ret, sp_error **err)
{
        uint64_t id = 0;
        enum btrfs_util_error e = btrfs_util_subvolume_id(path, &id);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, "reading the subvolume id of", path);
        *ret = id;
        return 0;
}

static void iter_destroyp(struct btrfs_util_subvolume_iterator **it)
{
        if (*it)
                btrfs_util_destroy_subvolume_iterator(*it);
        *it = NULL;
}

int wk_subvol_list(const char *path, char ***ret, sp_error **err)
{
        __attribute__((cleanup(iter_destroyp))) struct btrfs_util_subvolume_iterator *it = NULL;
        enum btrfs_util_error e = btrfs_util_create_subvolume_iterator(path, 0, 0, &it);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, "listing subvolumes beneath", path);

        size_t n = 0, cap = 8;
        _cleanup_strv_free_ char **v = calloc(cap, sizeof(char *));
        if (!v)
                abort();
        for (;;) {
                char *sub = NULL;
                uint64_t id;
                e = btrfs_util_subvolume_iterator_next(it, &sub, &id);
                if (e == BTRFS_UTIL_ERROR_STOP_ITERATION)
                        break;
                if (e != BTRFS_UTIL_OK)
                        return wk__btrfs_error(err, e, "listing subvolumes beneath", path);
                if (n == WK_SUBVOL_LIST_MAX) {
                        free(sub);
                        return sp_error_set(err, SP_E_LIMIT, "more than %d subvolumes beneath %s", WK_SUBVOL_LIST_MAX,
                                            path);
                }
                if (n + 1 == cap) {
                        char **nv = realloc(v, 2 * cap * sizeof(char *));
                        if (!nv)
                                abort();
                        v = nv;
                        memset(v + cap, 0, cap * sizeof(char *));
                        cap *= 2;
                }
                v[n++] = sub;
        }
        *ret = TAKE_PTR(v);
        return 0;
}

int wk_subvol_sync(const char *path, sp_error **err)
{
        enum btrfs_util_error e = btrfs_util_sync(path);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, "syncing", path);
        return 0;
}

int wk__remove_tree(int parent_fd, const char *name, unsigned max_depth, sp_error **err)
{
        struct stat s;
        if (fstatat(parent_fd, name, &s, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                        return 0;
                return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", name);
        }
        if (!S_ISDIR(s.st_mode)) {
                if (unlinkat(parent_fd, name, 0) < 0 && errno != ENOENT)
                        return sp_error_set_errno(err, SP_E_IO, errno, "unlink %s", name);
                return 0;
        }
        if (s.st_ino == BTRFS_SUBVOL_ROOT_INO && wk__fd_is_btrfs(parent_fd)) {
                enum btrfs_util_error e =
                        btrfs_util_delete_subvolume_fd(parent_fd, name, BTRFS_UTIL_DELETE_SUBVOLUME_RECURSIVE);
                if (e != BTRFS_UTIL_OK)
                        return wk__btrfs_error(err, e, "deleting subvolume", name);
                return 0;
        }
        if (max_depth == 0)
                return sp_error_set(err, SP_E_LIMIT, "%s: directory tree too deep to remove", name);

        int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", name);
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                sp_close(fd);
                return sp_error_set_errno(err, SP_E_IO, errno, "opendir %s", name);
        }
        for (;;) {
                errno = 0;
                struct dirent *de = readdir(d);
                if (!de) {
                        if (errno)
                                return sp_error_set_errno(err, SP_E_IO, errno, "readdir %s", name);
                        break;
                }
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if (wk__remove_tree(dirfd(d), de->d_name, max_depth - 1, err) < 0)
                        return sp_error_wrap(err, "in %s", name);
        }
        if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return sp_error_set_errno(err, SP_E_IO, errno, "rmdir %s", name);
        return 0;
}
