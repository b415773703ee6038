/* SPDX-License-Identifier: Apache-2.0 */
/* QEMU's own filesystem view (see qemu_root.h). */
#include "backend/qemu_root.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ENTRIES_MAX 24
#define ROOT_PATH_MAX 512

typedef enum { E_DIR, E_FILE, E_LINK, E_PROC } kind;

typedef struct entry {
        kind kind;
        char path[ROOT_PATH_MAX]; /* inside: <dir>/... */
        char src[ROOT_PATH_MAX]; /* E_DIR, E_FILE: the host's; E_LINK: the link's target */
} entry;

struct wk_qemu_root {
        char dir[ROOT_PATH_MAX];
        entry e[ENTRIES_MAX];
        size_t n;
};

static int add(wk_qemu_root *r, kind k, const char *inside, const char *src, sp_error **err)
{
        if (r->n == ENTRIES_MAX)
                return sp_error_set(err, SP_E_LIMIT, "QEMU's root: too many entries");
        entry *e = &r->e[r->n];
        e->kind = k;
        if (snprintf(e->path, sizeof(e->path), "%s%s", r->dir, inside) >= (int)sizeof(e->path) ||
            snprintf(e->src, sizeof(e->src), "%s", src ? src : "") >= (int)sizeof(e->src))
                return sp_error_set(err, SP_E_INVALID, "QEMU's root: path too long: %s", inside);
        r->n++;
        return 0;
}

int wk_qemu_root_prepare(const char *dir, const char *qemu_path, bool kvm, wk_qemu_root **ret, sp_error **err)
{
        wk_qemu_root *r = calloc(1, sizeof(*r));
        if (!r)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        int rc = 0;
        if (snprintf(r->dir, sizeof(r->dir), "%s", dir) >= (int)sizeof(r->dir))
                rc = sp_error_set(err, SP_E_INVALID, "QEMU's root: path too long: %s", dir);
        else if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                rc = sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", dir);
        if (rc == 0)
                rc = add(r, E_DIR, "/usr", "/usr", err);
        /* The host's top-level program and library directories: links into /usr on a merged /usr
         * (Debian 12), directories elsewhere. */
        static const char *const tops[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
        for (size_t i = 0; i < sizeof(tops) / sizeof(tops[0]) && rc == 0; i++) {
                struct stat st;
                if (lstat(tops[i], &st) < 0)
                        continue;
                if (S_ISLNK(st.st_mode)) {
                        char target[ROOT_PATH_MAX];
                        ssize_t len = readlink(tops[i], target, sizeof(target) - 1);
                        if (len <= 0)
                                continue;
                        target[len] = '\0';
                        rc = add(r, E_LINK, tops[i], target, err);
                } else if (S_ISDIR(st.st_mode)) {
                        rc = add(r, E_DIR, tops[i], tops[i], err);
                }
        }
        /* A QEMU installed elsewhere (/opt/qemu/bin/qemu-system-x86_64): its prefix, where its
         * libraries and firmware are. */
        if (rc == 0 && qemu_path && strncmp(qemu_path, "/usr/", 5) != 0) {
                char prefix[ROOT_PATH_MAX];
                snprintf(prefix, sizeof(prefix), "%s", qemu_path);
                for (int up = 0; up < 2; up++) {
                        char *slash = strrchr(prefix, '/');
                        if (slash && slash != prefix)
                                *slash = '\0';
                }
                if (prefix[0] == '/' && prefix[1])
                        rc = add(r, E_DIR, prefix, prefix, err);
        }
        static const char *const devs[] = {"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/kvm"};
        for (size_t i = 0; i < sizeof(devs) / sizeof(devs[0]) && rc == 0; i++)
                if ((kvm || strcmp(devs[i], "/dev/kvm") != 0) && access(devs[i], F_OK) == 0)
                        rc = add(r, E_FILE, devs[i], devs[i], err);
        if (rc == 0)
                rc = add(r, E_PROC, "/proc", NULL, err);
        if (rc < 0) {
                free(r);
                return rc;
        }
        *ret = r;
        return 0;
}

void wk_qemu_root_free(wk_qemu_root *r)
{
        free(r);
}

/* ---- in the child: system calls only ---- */

/* mkdir -p of path's parents and, with self, of path (in a copy: path is shared with the parent). */
static int mkdirs(const char *path, bool self)
{
        char p[ROOT_PATH_MAX];
        size_t n = strlen(path);
        if (n >= sizeof(p))
                return -1;
        memcpy(p, path, n + 1);
        for (size_t i = 1; i <= n; i++) {
                if (p[i] != '/' && p[i] != '\0')
                        continue;
                if (p[i] == '\0' && !self)
                        break;
                char c = p[i];
                p[i] = '\0';
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return -1;
                p[i] = c;
        }
        return 0;
}

static int bind_ro(const char *src, const char *dst, bool dev)
{
        unsigned long fl = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | (dev ? 0 : MS_NODEV);
        if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0 || mount(NULL, dst, NULL, fl, NULL) < 0)
                return -1;
        return 0;
}

const char *wk_qemu_root_enter(const wk_qemu_root *r)
{
        if (unshare(CLONE_NEWNS) < 0)
                return "make a mount namespace";
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return "make its mounts private";
        if (mount("tmpfs", r->dir, "tmpfs", MS_NOSUID, "mode=0755,size=64k") < 0)
                return "mount its root";
        for (size_t i = 0; i < r->n; i++) {
                const entry *e = &r->e[i];
                switch (e->kind) {
                case E_DIR:
                        if (mkdirs(e->path, true) < 0 || bind_ro(e->src, e->path, false) < 0)
                                return "bind a directory into its root";
                        break;
                case E_FILE: {
                        if (mkdirs(e->path, false) < 0)
                                return "make a device's directory";
                        int fd = open(e->path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                        if (fd < 0)
                                return "make a device's mount point";
                        close(fd);
                        if (bind_ro(e->src, e->path, true) < 0)
                                return "bind a device into its root";
                        break;
                }
                case E_LINK:
                        if (mkdirs(e->path, false) < 0 || symlink(e->src, e->path) < 0)
                                return "make a link in its root";
                        break;
                case E_PROC:
                        if (mkdirs(e->path, true) < 0 ||
                            mount("proc", e->path, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                  "hidepid=invisible,subset=pid") < 0)
                                return "mount its /proc";
                        break;
                }
        }
        /* The view becomes the root; the old one is detached (pivot_root with both "." stacks it
         * under the new one, where the umount takes it). */
        if (chdir(r->dir) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 || umount2(".", MNT_DETACH) < 0 ||
            chdir("/") < 0)
                return "make the view its root";
        if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, NULL) < 0)
                return "make its root read-only";
        return NULL;
}
