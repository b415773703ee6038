/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loop devices for the storage image: attach through loop-control with
 * autoclear, and find which loop device holds a file.
 */
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "rootfs/internal.h"

#define LOOP_ATTEMPTS 16
#define BTRFS_SUPER_OFFSET 65536 /* the primary superblock */
#define BTRFS_SUPER_MAGIC_OFFSET 64 /* csum[32] fsid[16] bytenr flags, then the magic */
#define BTRFS_SUPER_MAGIC_VALUE UINT64_C(0x4D5F53665248425F) /* "_BHRfS_M" */

bool wk__image_is_btrfs(int fd)
{
        uint64_t magic = 0;
        ssize_t n = pread(fd, &magic, sizeof(magic), BTRFS_SUPER_OFFSET + BTRFS_SUPER_MAGIC_OFFSET);
        return n == (ssize_t)sizeof(magic) && le64toh(magic) == BTRFS_SUPER_MAGIC_VALUE;
}

bool wk__loop_attached_to(int nr, const char *path)
{
        if (nr < 0)
                return false;
        char p[96], backing[PATH_MAX + 16];
        snprintf(p, sizeof(p), "/sys/block/loop%d/loop/backing_file", nr);
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        if (!f || !fgets(backing, sizeof(backing), f))
                return false;
        backing[strcspn(backing, "\n")] = '\0';
        size_t n = strlen(path);
        /* A backing file removed since reads as "<path> (deleted)". */
        return strncmp(backing, path, n) == 0 && (backing[n] == '\0' || strcmp(backing + n, " (deleted)") == 0);
}

int wk__loop_find(const char *path)
{
        _cleanup_closedir_ DIR *d = opendir("/sys/block");
        if (!d)
                return -1;
        for (struct dirent *de; (de = readdir(d));) {
                int nr;
                char tail;
                if (sscanf(de->d_name, "loop%d%c", &nr, &tail) != 1 || nr < 0)
                        continue;
                if (wk__loop_attached_to(nr, path))
                        return nr;
        }
        return -1;
}

int wk__loop_attach(int image_fd, const char *image_path, int *ret_nr, sp_error **err)
{
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return sp_error_set_errno(err, errno == ENOENT ? SP_E_UNAVAILABLE : SP_E_IO, errno,
                                          "open /dev/loop-control");

        for (int attempt = 0; attempt < LOOP_ATTEMPTS; attempt++) {
                int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
                if (nr < 0)
                        return sp_error_set_errno(err, SP_E_LIMIT, errno, "no free loop device");
                char dev[32];
                snprintf(dev, sizeof(dev), "/dev/loop%d", nr);
                _cleanup_close_ int lfd = open(dev, O_RDWR | O_CLOEXEC);
                if (lfd < 0)
                        return sp_error_set_errno(err, errno == ENOENT ? SP_E_UNAVAILABLE : SP_E_IO, errno, "open %s",
                                                  dev);

                struct loop_config cfg;
                memset(&cfg, 0, sizeof(cfg));
                cfg.fd = (__u32)image_fd;
                cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), "%s", image_path);
                if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0) {
                        *ret_nr = nr;
                        return TAKE_FD(lfd);
                }
                if (errno == EBUSY)
                        continue; /* another process took it between GET_FREE and now */
                if (errno != EINVAL && errno != ENOTTY)
                        return sp_error_set_errno(err, SP_E_IO, errno, "LOOP_CONFIGURE %s", dev);

                /* Kernels before 5.8 know only the two-step way. */
                if (ioctl(lfd, LOOP_SET_FD, image_fd) < 0) {
                        if (errno == EBUSY)
                                continue;
                        return sp_error_set_errno(err, SP_E_IO, errno, "LOOP_SET_FD %s", dev);
                }
                if (ioctl(lfd, LOOP_SET_STATUS64, &cfg.info) < 0) {
                        int e = errno;
                        (void)ioctl(lfd, LOOP_CLR_FD, 0);
                        return sp_error_set_errno(err, SP_E_IO, e, "LOOP_SET_STATUS64 %s", dev);
                }
                *ret_nr = nr;
                return TAKE_FD(lfd);
        }
        return sp_error_set(err, SP_E_LIMIT, "no free loop device after %d attempts", LOOP_ATTEMPTS);
}
