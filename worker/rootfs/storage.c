/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The storage: a btrfs directory, or a btrfs image loop-mounted on it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/log.h"
#include "space/time.h"

#include "rootfs/internal.h"
#include "rootfs/mountinfo.h"
#include "rootfs/rootfs.h"

#define DETACH_POLL_MS 10
#define STALE_LOOP_WAIT_MS 2000

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
        nanosleep(&ts, NULL);
}

/* Waits (bounded) until loop device nr no longer holds path. Autoclear
 * detaches it when its last user goes, possibly a moment after the unmount;
 * the kernel offers no event for that short of uevents. */
static bool wait_loop_detached(int nr, const char *path, int64_t timeout_ms)
{
        int64_t deadline = sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
        while (wk__loop_attached_to(nr, path)) {
                if (sp_now_mono_us() >= deadline)
                        return false;
                sleep_ms(DETACH_POLL_MS);
        }
        return true;
}

const char *wk_storage_origin_name(wk_storage_origin origin)
{
        switch (origin) {
        case WK_STORAGE_NATIVE:
                return "native btrfs";
        case WK_STORAGE_IMAGE_CREATED:
                return "created image";
        case WK_STORAGE_IMAGE_MOUNTED:
                return "mounted image";
        case WK_STORAGE_IMAGE_REUSED:
                return "reused mounted image";
        }
        return "unknown";
}

wk_storage *wk_storage_free(wk_storage *st)
{
        if (!st)
                return NULL;
        free(st->dir);
        free(st->image);
        free(st);
        return NULL;
}

/* The loop device number in a mount source "/dev/loopN", or -1. */
static int source_loop_nr(const char *source)
{
        int nr;
        char tail;
        if (sscanf(source, "/dev/loop%d%c", &nr, &tail) != 1 || nr < 0)
                return -1;
        return nr;
}

/* If the btrfs mounted on dir is image's loop device, records it in st as reused. */
static int detect_reused(wk_storage *st, const char *image_path, sp_error **err)
{
        char cimage[PATH_MAX];
        if (!image_path || !realpath(image_path, cimage))
                return 0;
        wk_mountinfo_entry m = {0};
        int r = wk_mountinfo_find(st->dir, &m, err);
        if (r <= 0)
                return r;
        int nr = strcmp(m.fstype, "btrfs") == 0 ? source_loop_nr(m.source) : -1;
        wk_mountinfo_entry_clear(&m);
        if (nr < 0 || !wk__loop_attached_to(nr, cimage))
                return 0;
        struct stat s;
        if (stat(cimage, &s) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", cimage);
        st->image = strdup(cimage);
        if (!st->image)
                abort();
        st->origin = WK_STORAGE_IMAGE_REUSED;
        st->loop_nr = nr;
        snprintf(st->loop_dev, sizeof(st->loop_dev), "/dev/loop%d", nr);
        st->image_size = (uint64_t)s.st_size;
        return 1;
}

/* Creates image_path, formatted: built as "<image>.new" and renamed into place
 * once mkfs succeeded, so that a crash never leaves an unformatted image
 * under the real name. Returns the open image (O_RDWR). */
static int image_create(const char *image_path, uint64_t size, sp_error **err)
{
        if (size < WK_STORAGE_IMAGE_MIN_SIZE || size > WK_STORAGE_IMAGE_MAX_SIZE)
                return sp_error_set(err, SP_E_INVALID, "image size %llu outside [%llu, %llu] bytes",
                                    (unsigned long long)size, (unsigned long long)WK_STORAGE_IMAGE_MIN_SIZE,
                                    (unsigned long long)WK_STORAGE_IMAGE_MAX_SIZE);
        char tmp[PATH_MAX];
        if (snprintf(tmp, sizeof(tmp), "%s.new", image_path) >= (int)sizeof(tmp))
                return sp_error_set(err, SP_E_INVALID, "image path too long");
        _cleanup_close_ int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create %s", tmp);
        int r;
        if (ftruncate(fd, (off_t)size) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "size %s", tmp);
                goto fail;
        }
        r = wk__mkfs_btrfs(tmp, WK_STORAGE_MKFS_TIMEOUT_MS, err);
        if (r < 0)
                goto fail;
        if (fsync(fd) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "fsync %s", tmp);
                goto fail;
        }
        if (!wk__image_is_btrfs(fd)) {
                r = sp_error_set(err, SP_E_INTERNAL, "mkfs.btrfs left no btrfs in %s", tmp);
                goto fail;
        }
        if (rename(tmp, image_path) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "rename %s", tmp);
                goto fail;
        }
        return TAKE_FD(fd);
fail:
        (void)unlink(tmp);
        return r;
}

/* Opens the existing image, which must be a regular file holding btrfs. */
static int image_open_existing(int fd, const char *image_path, sp_error **err)
{
        struct stat s;
        if (fstat(fd, &s) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", image_path);
        if (!S_ISREG(s.st_mode))
                return sp_error_set(err, SP_E_CONFLICT, "%s is not a regular file", image_path);
        if (!wk__image_is_btrfs(fd))
                return sp_error_set(err, SP_E_CONFLICT, "%s exists and is not a btrfs image (not formatting it)",
                                    image_path);
        return 0;
}

static int mount_image(const char *loop_dev, const char *dir, sp_error **err)
{
        /* noatime: an atime update rewrites metadata a snapshot shares with
         * its template. nodev: sandboxes get their /dev elsewhere. nosuid: a
         * setuid file a sandbox's root made is owned by host uid 0 on disk
         * (the idmapped mount maps it back): on the host it gives nothing (a
         * jail's own mount of its root clears nosuid again: jail.c). discard
         * gives freed space back to the host's filesystem (the image is
         * sparse); kernels without the async variant take the plain mount. */
        unsigned long flags = MS_NOATIME | MS_NODEV | MS_NOSUID;
        if (mount(loop_dev, dir, "btrfs", flags, "discard=async") == 0)
                return 0;
        if (errno == EINVAL && mount(loop_dev, dir, "btrfs", flags, NULL) == 0)
                return 0;
        return sp_error_set_errno(err, SP_E_IO, errno, "mount %s on %s", loop_dev, dir);
}

/* Attaches and mounts the image (not btrfs-mounted anywhere yet) on st->dir. */
static int attach_and_mount(wk_storage *st, const char *image_path, uint64_t image_size, sp_error **err)
{
        bool created = false;
        _cleanup_close_ int img = open(image_path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
        if (img < 0 && errno == ENOENT) {
                img = image_create(image_path, image_size, err);
                if (img < 0)
                        return img;
                created = true;
        } else if (img < 0) {
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", image_path);
        } else if (image_open_existing(img, image_path, err) < 0) {
                return -SP_E_CONFLICT;
        }

        int r, nr = -1;
        _cleanup_close_ int lfd = -1;
        char cimage[PATH_MAX];
        if (!realpath(image_path, cimage)) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "realpath %s", image_path);
                goto fail;
        }
        /* Attached already: another mount of it, or one being torn down. */
        int64_t deadline = sp_now_mono_us() + STALE_LOOP_WAIT_MS * SP_USEC_PER_MSEC;
        int other;
        while ((other = wk__loop_find(cimage)) >= 0 && sp_now_mono_us() < deadline)
                sleep_ms(DETACH_POLL_MS);
        if (other >= 0) {
                r = sp_error_set(err, SP_E_CONFLICT, "%s is already attached to /dev/loop%d (mounted elsewhere?)",
                                 cimage, other);
                goto fail;
        }

        lfd = wk__loop_attach(img, cimage, &nr, err);
        if (lfd < 0) {
                r = lfd;
                goto fail;
        }
        char loop_dev[32];
        snprintf(loop_dev, sizeof(loop_dev), "/dev/loop%d", nr);
        r = mount_image(loop_dev, st->dir, err);
        if (r < 0) {
                (void)ioctl(lfd, LOOP_CLR_FD, 0);
                goto fail;
        }
        /* The mount holds the device now; closing lfd arms autoclear. */
        struct stat s;
        if (fstat(img, &s) < 0)
                s.st_size = 0;
        st->image = strdup(cimage);
        if (!st->image)
                abort();
        st->origin = created ? WK_STORAGE_IMAGE_CREATED : WK_STORAGE_IMAGE_MOUNTED;
        st->loop_nr = nr;
        snprintf(st->loop_dev, sizeof(st->loop_dev), "%s", loop_dev);
        st->image_size = (uint64_t)s.st_size;
        return 0;
fail:
        if (created)
                (void)unlink(image_path);
        return r;
}

static int ensure_layout(const char *dir, sp_error **err)
{
        static const char *const subdirs[] = {"templates", "sandboxes", "artifacts"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(subdirs); i++) {
                char p[PATH_MAX];
                snprintf(p, sizeof(p), "%s/%s", dir, subdirs[i]);
                if (mkdir(p, 0700) < 0 && errno != EEXIST)
                        return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", p);
        }
        return 0;
}

int wk_storage_open(const char *dir, const char *image_path, uint64_t image_size, wk_storage **ret, sp_error **err)
{
        if (!dir || dir[0] != '/' || strlen(dir) > PATH_MAX - 64)
                return sp_error_set(err, SP_E_INVALID, "storage directory must be an absolute path");
        if (image_path && (image_path[0] != '/' || strlen(image_path) > PATH_MAX - 16))
                return sp_error_set(err, SP_E_INVALID, "storage image must be an absolute path");
        if (sp_mkdir_p(dir, 0700, err) < 0)
                return sp_error_wrap(err, "storage directory");

        wk_storage *st = calloc(1, sizeof(*st));
        if (!st)
                abort();
        st->loop_nr = -1;
        char cdir[PATH_MAX];
        if (!realpath(dir, cdir)) {
                int r = sp_error_set_errno(err, SP_E_IO, errno, "realpath %s", dir);
                wk_storage_free(st);
                return r;
        }
        st->dir = strdup(cdir);
        if (!st->dir)
                abort();

        int r;
        _cleanup_close_ int dfd = open(cdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "open %s", cdir);
                goto fail;
        }
        if (wk__fd_is_btrfs(dfd)) {
                st->origin = WK_STORAGE_NATIVE;
                r = detect_reused(st, image_path, err);
                if (r < 0)
                        goto fail;
        } else {
                if (!image_path) {
                        r = sp_error_set(err, SP_E_UNSUPPORTED, "%s is not on btrfs and no storage image is configured",
                                         cdir);
                        goto fail;
                }
                r = attach_and_mount(st, image_path, image_size, err);
                if (r < 0)
                        goto fail;
        }
        r = ensure_layout(st->dir, err);
        if (r < 0) {
                if (st->origin == WK_STORAGE_IMAGE_CREATED || st->origin == WK_STORAGE_IMAGE_MOUNTED) {
                        (void)umount2(st->dir, 0);
                        (void)wait_loop_detached(st->loop_nr, st->image, WK_STORAGE_DETACH_TIMEOUT_MS);
                        if (st->origin == WK_STORAGE_IMAGE_CREATED)
                                (void)unlink(st->image);
                }
                goto fail;
        }
        sp_log_debug("storage %s: %s%s%s", st->dir, wk_storage_origin_name(st->origin), st->image ? " " : "",
                     st->image ? st->loop_dev : "");
        *ret = st;
        return 0;
fail:
        wk_storage_free(st);
        return r;
}

int wk_storage_close(wk_storage *st, sp_error **err)
{
        _cleanup_storage_ wk_storage *s = st;
        if (!s || s->origin == WK_STORAGE_NATIVE)
                return 0;

        /* Unmount only our image: whatever sits on top of it must go first. */
        wk_mountinfo_entry m = {0};
        int r = wk_mountinfo_find(s->dir, &m, err);
        if (r < 0)
                return r;
        bool ours = r > 0 && strcmp(m.fstype, "btrfs") == 0 && source_loop_nr(m.source) == s->loop_nr;
        wk_mountinfo_entry_clear(&m);
        if (r > 0 && !ours)
                return sp_error_set(err, SP_E_CONFLICT, "something else is mounted on %s", s->dir);
        if (r > 0 && umount2(s->dir, 0) < 0) {
                if (errno == EBUSY)
                        return sp_error_set(err, SP_E_CONFLICT, "storage %s is busy", s->dir);
                if (errno != EINVAL)
                        return sp_error_set_errno(err, SP_E_IO, errno, "umount %s", s->dir);
        }
        if (wait_loop_detached(s->loop_nr, s->image, WK_STORAGE_DETACH_TIMEOUT_MS))
                return 0;
        /* Still attached: someone else holds the device open. */
        _cleanup_close_ int lfd = open(s->loop_dev, O_RDWR | O_CLOEXEC);
        if (lfd < 0 || ioctl(lfd, LOOP_CLR_FD, 0) < 0)
                return sp_error_set_errno(err, SP_E_CONFLICT, errno, "%s still holds %s", s->loop_dev, s->image);
        return 0;
}
