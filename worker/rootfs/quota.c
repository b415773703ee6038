/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Disk quotas: btrfs qgroups through the ioctls of <linux/btrfs.h>.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <btrfsutil.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "rootfs/internal.h"
#include "rootfs/rootfs.h"

#define QGROUP_CLEAR_VALUE UINT64_MAX /* the kernel's "remove this limit" */
#define RESCAN_POLL_MS 20

static int open_dir(const char *path, sp_error **err)
{
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open %s", path);
        if (!wk__fd_is_btrfs(fd)) {
                sp_close(fd);
                return sp_error_set(err, SP_E_INVALID, "%s is not on btrfs", path);
        }
        return fd;
}

/* Looks up the item with exactly this key in the quota tree and copies up to
 * size bytes of it into item. Returns 1 when found, 0 when not (or when the
 * quota tree does not exist: quotas are off), <0 on error. */
static int quota_tree_lookup(int fd, uint8_t type, uint64_t offset, void *item, size_t size, sp_error **err)
{
        struct btrfs_ioctl_search_args args;
        memset(&args, 0, sizeof(args));
        struct btrfs_ioctl_search_key *k = &args.key;
        k->tree_id = BTRFS_QUOTA_TREE_OBJECTID;
        k->min_objectid = k->max_objectid = 0;
        k->min_type = k->max_type = type;
        k->min_offset = k->max_offset = offset;
        k->max_transid = UINT64_MAX;
        k->nr_items = 1;
        if (ioctl(fd, BTRFS_IOC_TREE_SEARCH, &args) < 0) {
                if (errno == ENOENT)
                        return 0;
                return sp_error_set_errno(err, SP_E_IO, errno, "searching the quota tree");
        }
        if (k->nr_items == 0)
                return 0;
        struct btrfs_ioctl_search_header sh;
        memcpy(&sh, args.buf, sizeof(sh));
        if (sh.type != type || sh.offset != offset || sh.objectid != 0 || sh.len > sizeof(args.buf) - sizeof(sh))
                return sp_error_set(err, SP_E_INTERNAL, "unexpected quota tree item (type %u)", sh.type);
        memset(item, 0, size);
        memcpy(item, args.buf + sizeof(sh), sh.len < size ? sh.len : size);
        return 1;
}

static int rescan_wait(int fd, const char *path, sp_error **err)
{
        int64_t deadline = sp_now_mono_us() + WK_QUOTA_RESCAN_TIMEOUT_MS * SP_USEC_PER_MSEC;
        for (;;) {
                struct btrfs_ioctl_quota_rescan_args st;
                memset(&st, 0, sizeof(st));
                if (ioctl(fd, BTRFS_IOC_QUOTA_RESCAN_STATUS, &st) < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "quota rescan status of %s", path);
                if (st.flags == 0)
                        return 0;
                if (sp_now_mono_us() >= deadline)
                        return sp_error_set(err, SP_E_TIMEOUT, "quota rescan of %s still running after %d ms", path,
                                            WK_QUOTA_RESCAN_TIMEOUT_MS);
                /* The kernel offers no event for the end of a rescan but a
                 * blocking, unbounded ioctl: poll its status. */
                struct timespec ts = {0, RESCAN_POLL_MS * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
}

int wk_quota_enable(const char *path, sp_error **err)
{
        _cleanup_close_ int fd = open_dir(path, err);
        if (fd < 0)
                return fd;
        struct btrfs_ioctl_quota_ctl_args a;
        memset(&a, 0, sizeof(a));
        a.cmd = BTRFS_QUOTA_CTL_ENABLE;
        if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &a) < 0 && errno != EEXIST)
                return sp_error_set_errno(err, errno == EPERM ? SP_E_PERMISSION : SP_E_IO, errno,
                                          "enabling quotas on %s", path);
        return rescan_wait(fd, path, err);
}

int wk_quota_enabled(const char *path, bool *ret, sp_error **err)
{
        _cleanup_close_ int fd = open_dir(path, err);
        if (fd < 0)
                return fd;
        struct btrfs_qgroup_status_item status;
        int r = quota_tree_lookup(fd, BTRFS_QGROUP_STATUS_KEY, 0, &status, sizeof(status), err);
        if (r < 0)
                return sp_error_wrap(err, "%s", path);
        *ret = r > 0;
        return 0;
}

static int subvol_qgroup(int fd, const char *path, uint64_t *ret, sp_error **err)
{
        uint64_t id = 0;
        enum btrfs_util_error e = btrfs_util_subvolume_id_fd(fd, &id);
        if (e != BTRFS_UTIL_OK)
                return wk__btrfs_error(err, e, "reading the subvolume id of", path);
        *ret = id; /* level 0: the qgroup id is the subvolume id */
        return 0;
}

int wk_quota_set_limit(const char *path, uint64_t max_exclusive, sp_error **err)
{
        _cleanup_close_ int fd = open_dir(path, err);
        if (fd < 0)
                return fd;
        struct btrfs_ioctl_qgroup_limit_args a;
        memset(&a, 0, sizeof(a));
        uint64_t qgroupid = 0;
        if (subvol_qgroup(fd, path, &qgroupid, err) < 0)
                return -SP_E_IO;
        a.qgroupid = qgroupid;
        a.lim.flags = BTRFS_QGROUP_LIMIT_MAX_EXCL;
        a.lim.max_excl = max_exclusive ? max_exclusive : QGROUP_CLEAR_VALUE;
        if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &a) < 0) {
                if (errno == ENOTCONN)
                        return sp_error_set(err, SP_E_CONFLICT, "quotas are not enabled on the filesystem of %s", path);
                return sp_error_set_errno(err, errno == ENOENT ? SP_E_NOT_FOUND : SP_E_IO, errno,
                                          "setting the quota of %s", path);
        }
        return 0;
}

int wk_quota_get(const char *path, wk_quota_usage *ret, sp_error **err)
{
        _cleanup_close_ int fd = open_dir(path, err);
        if (fd < 0)
                return fd;
        uint64_t qgroupid = 0;
        if (subvol_qgroup(fd, path, &qgroupid, err) < 0)
                return -SP_E_IO;

        struct btrfs_qgroup_info_item info;
        int r = quota_tree_lookup(fd, BTRFS_QGROUP_INFO_KEY, qgroupid, &info, sizeof(info), err);
        if (r < 0)
                return sp_error_wrap(err, "%s", path);
        if (r == 0)
                return sp_error_set(err, SP_E_NOT_FOUND, "no qgroup for %s (quotas off?)", path);
        struct btrfs_qgroup_limit_item lim;
        r = quota_tree_lookup(fd, BTRFS_QGROUP_LIMIT_KEY, qgroupid, &lim, sizeof(lim), err);
        if (r < 0)
                return sp_error_wrap(err, "%s", path);

        wk_quota_usage u = {
                .referenced = le64toh(info.rfer),
                .exclusive = le64toh(info.excl),
        };
        if (r > 0) {
                uint64_t flags = le64toh(lim.flags);
                if (flags & BTRFS_QGROUP_LIMIT_MAX_RFER)
                        u.max_referenced = le64toh(lim.max_rfer);
                if (flags & BTRFS_QGROUP_LIMIT_MAX_EXCL)
                        u.max_exclusive = le64toh(lim.max_excl);
        }
        *ret = u;
        return 0;
}
