/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "btrfs.h"
#include "harness.h"
#include "proc.h"

#define MKFS_TIMEOUT_MS 60000
#define LOOP_ATTEMPTS 16
#define LOOP_DETACH_WAIT_MS 10000

static const char *find_mkfs(void)
{
        static char found[PATH_MAX];
        const char *path = getenv("PATH");
        _cleanup_free_ char *dirs = NULL;
        if (asprintf(&dirs, "%s:/usr/sbin:/sbin", path ? path : "") < 0)
                abort();
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                snprintf(found, sizeof(found), "%s/mkfs.btrfs", d);
                if (*d && access(found, X_OK) == 0)
                        return found;
        }
        return NULL;
}

static bool kernel_has_btrfs(void)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/filesystems", "re");
        char line[128];
        while (f && fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = '\0';
                const char *name = strrchr(line, '\t');
                if (strcmp(name ? name + 1 : line, "btrfs") == 0)
                        return true;
        }
        return false;
}

void sp_test_btrfs_require(void)
{
        sp_test_require_root("a test btrfs needs loop devices and mount(2)");
        if (!find_mkfs())
                sp_test_skip("needs mkfs.btrfs (btrfs-progs) to make a test filesystem");
        if (access("/dev/loop-control", R_OK | W_OK) != 0)
                sp_test_skip("needs /dev/loop-control for a test btrfs");
        if (!kernel_has_btrfs())
                sp_test_skip("the kernel does not support btrfs");
}

bool sp_test_loop_attached_to(int nr, const char *path)
{
        char p[128], backing[PATH_MAX + 16];
        snprintf(p, sizeof(p), "/sys/block/loop%d/loop/backing_file", nr);
        _cleanup_fclose_ FILE *f = nr >= 0 ? fopen(p, "re") : NULL;
        if (!f || !fgets(backing, sizeof(backing), f))
                return false;
        backing[strcspn(backing, "\n")] = '\0';
        size_t n = strlen(path);
        /* A deleted backing file reads as "<path> (deleted)". */
        return strncmp(backing, path, n) == 0 && (backing[n] == '\0' || strcmp(backing + n, " (deleted)") == 0);
}

/* Opens the node of loop device nr: /dev/loopN, or, where /dev has no node
 * for it, one we make in our own directory from /sys/block/loopN/dev. */
static int open_loop(sp_test_btrfs *fs, int nr, sp_error **err)
{
        snprintf(fs->loopdev, sizeof(fs->loopdev), "/dev/loop%d", nr);
        int fd = open(fs->loopdev, O_RDWR | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT)
                return fd >= 0 ? fd : sp_error_set_errno(err, SP_E_IO, errno, "open %s", fs->loopdev);

        char sys[128];
        unsigned maj, min;
        snprintf(sys, sizeof(sys), "/sys/block/loop%d/dev", nr);
        _cleanup_fclose_ FILE *f = fopen(sys, "re");
        if (!f || fscanf(f, "%u:%u", &maj, &min) != 2)
                return sp_error_set(err, SP_E_IO, "no device node for loop%d", nr);
        int w = snprintf(fs->loopdev, sizeof(fs->loopdev), "%s/loop%d", fs->dir, nr);
        if (w < 0 || (size_t)w >= sizeof(fs->loopdev))
                return sp_error_set(err, SP_E_LIMIT, "loop device path too long");
        (void)unlink(fs->loopdev);
        if (mknod(fs->loopdev, S_IFBLK | 0600, makedev(maj, min)) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "mknod %s", fs->loopdev);
        fd = open(fs->loopdev, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", fs->loopdev);
        return fd;
}

/* Binds image_fd to a free loop device with autoclear; returns the open loop
 * device, which must stay open until the filesystem is mounted (autoclear
 * detaches it on the last close). */
static int loop_attach(sp_test_btrfs *fs, int image_fd, sp_error **err)
{
        _cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
        if (ctl < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /dev/loop-control");

        for (int attempt = 0; attempt < LOOP_ATTEMPTS; attempt++) {
                int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
                if (nr < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "LOOP_CTL_GET_FREE");
                _cleanup_close_ int lfd = open_loop(fs, nr, err);
                if (lfd < 0)
                        return lfd;

                struct loop_config cfg;
                memset(&cfg, 0, sizeof(cfg));
                cfg.fd = (__u32)image_fd;
                cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
                snprintf((char *)cfg.info.lo_file_name, sizeof(cfg.info.lo_file_name), "%s", fs->image);
                if (ioctl(lfd, LOOP_CONFIGURE, &cfg) == 0) {
                        fs->loop_nr = nr;
                        return TAKE_FD(lfd);
                }
                if (errno == EBUSY)
                        continue; /* someone else took it first */
                if (errno != EINVAL && errno != ENOTTY)
                        return sp_error_set_errno(err, SP_E_IO, errno, "LOOP_CONFIGURE %s", fs->loopdev);

                /* Kernels before 5.8: the two-step way. */
                if (ioctl(lfd, LOOP_SET_FD, image_fd) < 0) {
                        if (errno == EBUSY)
                                continue;
                        return sp_error_set_errno(err, SP_E_IO, errno, "LOOP_SET_FD %s", fs->loopdev);
                }
                if (ioctl(lfd, LOOP_SET_STATUS64, &cfg.info) < 0) {
                        int e = errno;
                        (void)ioctl(lfd, LOOP_CLR_FD, 0);
                        return sp_error_set_errno(err, SP_E_IO, e, "LOOP_SET_STATUS64 %s", fs->loopdev);
                }
                fs->loop_nr = nr;
                return TAKE_FD(lfd);
        }
        return sp_error_set(err, SP_E_LIMIT, "no free loop device after %d attempts", LOOP_ATTEMPTS);
}

static int run_mkfs(const sp_test_btrfs *fs, sp_error **err)
{
        const char *mkfs = find_mkfs();
        if (!mkfs)
                return sp_error_set(err, SP_E_UNSUPPORTED, "mkfs.btrfs not found");
        char log[PATH_MAX];
        snprintf(log, sizeof(log), "%s/mkfs.log", fs->dir);
        const char *argv[] = {mkfs, "-q", "-f", fs->image, NULL};
        sp_test_spawn_opts o = {.log_path = log, .pdeathsig = SIGKILL};
        pid_t pid;
        if (sp_test_spawn(argv, &o, &pid, err) < 0)
                return -SP_E_IO;
        int st = 0;
        if (sp_test_child_wait(pid, MKFS_TIMEOUT_MS, &st, err) < 0) {
                (void)sp_test_child_stop(pid, false, SIGKILL, 0, NULL, NULL);
                return sp_error_wrap(err, "mkfs.btrfs");
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                _cleanup_free_ char *tail = sp_test_file_tail(log, 20);
                return sp_error_set(err, SP_E_INTERNAL, "mkfs.btrfs failed (status 0x%x):\n%s", st, tail);
        }
        return 0;
}

int sp_test_btrfs_create(uint64_t size, sp_test_btrfs *fs, sp_error **err)
{
        memset(fs, 0, sizeof(*fs));
        fs->loop_nr = -1;
        if (size == 0)
                size = SP_TEST_BTRFS_DEFAULT_SIZE;
        if (size < SP_TEST_BTRFS_MIN_SIZE || size > SP_TEST_BTRFS_MAX_SIZE)
                return sp_error_set(err, SP_E_INVALID, "btrfs size %llu outside [%llu, %llu]", (unsigned long long)size,
                                    (unsigned long long)SP_TEST_BTRFS_MIN_SIZE,
                                    (unsigned long long)SP_TEST_BTRFS_MAX_SIZE);

        _cleanup_free_ char *tmp = sp_test_tmpdir("btrfs");
        char real[PATH_MAX];
        if (!realpath(tmp, real)) {
                sp_test_tmpdir_remove(tmp);
                return sp_error_set_errno(err, SP_E_IO, errno, "realpath %s", tmp);
        }
        fs->dir = strdup(real);
        if (asprintf(&fs->image, "%s/image", fs->dir) < 0 || asprintf(&fs->mnt, "%s/mnt", fs->dir) < 0)
                abort();

        int r;
        _cleanup_close_ int img = -1;
        _cleanup_close_ int lfd = -1;
        if (mkdir(fs->mnt, 0755) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", fs->mnt);
                goto fail;
        }
        img = open(fs->image, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (img < 0 || ftruncate(img, (off_t)size) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "creating image %s", fs->image);
                goto fail;
        }
        r = run_mkfs(fs, err);
        if (r < 0)
                goto fail;
        lfd = loop_attach(fs, img, err);
        if (lfd < 0) {
                r = lfd;
                goto fail;
        }
        if (mount(fs->loopdev, fs->mnt, "btrfs", 0, NULL) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "mount %s on %s", fs->loopdev, fs->mnt);
                (void)ioctl(lfd, LOOP_CLR_FD, 0);
                goto fail;
        }
        fs->mounted = true;
        /* The mount holds the loop device now; closing ours arms autoclear. */
        return 0;
fail:
        lfd = sp_close(lfd);
        sp_test_btrfs_destroy(fs);
        return r;
}

static void wait_loop_detached(sp_test_btrfs *fs)
{
        int64_t deadline = sp_now_mono_us() + LOOP_DETACH_WAIT_MS * SP_USEC_PER_MSEC;
        /* Autoclear may run asynchronously after the last close. */
        while (sp_test_loop_attached_to(fs->loop_nr, fs->image) && sp_now_mono_us() < deadline) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
        if (!sp_test_loop_attached_to(fs->loop_nr, fs->image))
                return;
        fprintf(stderr, "loop%d still attached to %s, detaching it\n", fs->loop_nr, fs->image);
        _cleanup_close_ int lfd = open(fs->loopdev, O_RDWR | O_CLOEXEC);
        if (lfd < 0 || ioctl(lfd, LOOP_CLR_FD, 0) < 0)
                fprintf(stderr, "detaching loop%d: %s\n", fs->loop_nr, strerror(errno));
}

void sp_test_btrfs_destroy(sp_test_btrfs *fs)
{
        if (!fs)
                return;
        bool lazy = false;
        if (fs->mounted && umount2(fs->mnt, 0) < 0) {
                if (errno == EBUSY) {
                        /* The filesystem, and with it the loop device, lives on
                         * until its last user lets go; autoclear then detaches it. */
                        fprintf(stderr, "%s is busy, detaching it lazily\n", fs->mnt);
                        lazy = true;
                        if (umount2(fs->mnt, MNT_DETACH) < 0)
                                fprintf(stderr, "umount %s: %s\n", fs->mnt, strerror(errno));
                } else if (errno != EINVAL) {
                        fprintf(stderr, "umount %s: %s\n", fs->mnt, strerror(errno));
                }
        }
        fs->mounted = false;
        if (fs->loop_nr >= 0 && fs->image && !lazy)
                wait_loop_detached(fs);
        if (fs->dir)
                sp_test_tmpdir_remove(fs->dir);
        free(fs->dir);
        free(fs->image);
        free(fs->mnt);
        memset(fs, 0, sizeof(*fs));
        fs->loop_nr = -1;
}
