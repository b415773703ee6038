/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Taking a worker's host footprint away for good (space-worker --purge): the
 * sandboxes' processes and cgroups under its cgroup parent (v2 and every v1
 * hierarchy; frozen ones thawed so that they can die), every mount beneath its
 * state and storage directories (the storage image's filesystem, anything a
 * crash left), the loop device of its storage image, and the directories and
 * the image themselves. Run with the worker stopped. Each step goes on when an
 * earlier one could not finish, so that one stuck thing does not leave all the
 * rest; the first failure is what is returned.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <linux/loop.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node/node.h"
#include "space/cleanup.h"
#include "space/log.h"

#define CGROUP_ROOT "/sys/fs/cgroup"

static void write_file(const char *dir, const char *name, const char *value)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd >= 0)
                (void)!write(fd, value, strlen(value));
}

/* Kills every process in the group at dir and the groups beneath it. */
static void kill_tree(const char *dir, wk_purge_stats *st)
{
        write_file(dir, "cgroup.kill", "1");
        /* A paused sandbox is frozen: a frozen process dies of SIGKILL only once thawed. */
        write_file(dir, "cgroup.freeze", "0");
        write_file(dir, "freezer.state", "THAWED");
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        long pid;
        while (f && fscanf(f, "%ld", &pid) == 1)
                if (pid > 0 && kill((pid_t)pid, SIGKILL) == 0)
                        st->processes++;
        _cleanup_closedir_ DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                kill_tree(p, st);
        }
}

/* Removes the group at dir, deepest first, waiting briefly for dying processes. */
static int remove_tree(const char *dir, wk_purge_stats *st)
{
        int r = 0;
        _cleanup_closedir_ DIR *d = opendir(dir);
        char p[PATH_MAX];
        for (struct dirent *de; d && (de = readdir(d));) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                if (remove_tree(p, st) < 0)
                        r = -1;
        }
        int i = 0;
        while (rmdir(dir) < 0) {
                if (errno == ENOENT)
                        return r;
                if (errno != EBUSY || ++i >= 100)
                        return -1;
                usleep(20 * 1000);
        }
        st->cgroups++;
        return r;
}

/* The parent's directory in cgroup v2 and in each v1 hierarchy, at most 16. */
static size_t cgroup_dirs(const char *parent, char out[16][PATH_MAX])
{
        size_t n = 0;
        snprintf(out[n], PATH_MAX, CGROUP_ROOT "/%s", parent);
        if (access(out[n], F_OK) == 0)
                n++;
        _cleanup_closedir_ DIR *d = opendir(CGROUP_ROOT);
        for (struct dirent *de; d && (de = readdir(d)) && n < 16;) {
                if (de->d_name[0] == '.' || de->d_type != DT_DIR)
                        continue;
                snprintf(out[n], PATH_MAX, CGROUP_ROOT "/%s/%s", de->d_name, parent);
                /* v2 mounted at the root holds the parent itself, found above */
                if (strcmp(de->d_name, parent) != 0 && access(out[n], F_OK) == 0)
                        n++;
        }
        return n;
}

static bool under(const char *path, const char *top)
{
        size_t n = strlen(top);
        while (n > 1 && top[n - 1] == '/')
                n--;
        return strncmp(path, top, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* Unmounts everything at or beneath the tops, deepest first; repeats while
 * something came off (stacked mounts). */
static int unmount_under(const char *const *tops, wk_purge_stats *st)
{
        for (int round = 0; round < 8; round++) {
                _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
                if (!f)
                        return -1;
                static char found[64][PATH_MAX];
                char line[PATH_MAX + 512], mnt[PATH_MAX];
                int n = 0;
                while (fgets(line, sizeof(line), f) && n < 64) {
                        if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1)
                                continue;
                        for (size_t t = 0; tops[t]; t++)
                                if (under(mnt, tops[t])) {
                                        memcpy(found[n++], mnt, strlen(mnt) + 1);
                                        break;
                                }
                }
                if (n == 0)
                        return 0;
                for (int i = n - 1; i >= 0; i--) {
                        if (umount2(found[i], 0) < 0 && umount2(found[i], MNT_DETACH) < 0)
                                continue;
                        st->mounts++;
                }
        }
        return -1;
}

/* Detaches the loop devices whose backing file is image or lies beneath a top. */
static int detach_loops(const char *image, const char *const *tops, wk_purge_stats *st)
{
        int r = 0;
        _cleanup_closedir_ DIR *d = opendir("/sys/block");
        for (struct dirent *de; d && (de = readdir(d));) {
                if (strncmp(de->d_name, "loop", 4) != 0)
                        continue;
                char p[PATH_MAX], backing[PATH_MAX] = "";
                snprintf(p, sizeof(p), "/sys/block/%s/loop/backing_file", de->d_name);
                _cleanup_fclose_ FILE *f = fopen(p, "re");
                if (!f || !fgets(backing, sizeof(backing), f))
                        continue;
                backing[strcspn(backing, "\n")] = '\0';
                /* A backing file removed since reads as "<path> (deleted)". */
                char *del = strstr(backing, " (deleted)");
                if (del && del[10] == '\0')
                        *del = '\0';
                bool ours = image && strcmp(backing, image) == 0;
                for (size_t t = 0; !ours && tops[t]; t++)
                        ours = under(backing, tops[t]);
                if (!ours)
                        continue;
                snprintf(p, sizeof(p), "/dev/%s", de->d_name);
                _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
                if (fd >= 0 && ioctl(fd, LOOP_CLR_FD, 0) == 0)
                        st->loops++;
                else
                        r = -1;
        }
        return r;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
        (void)sb;
        (void)ftw;
        if (flag == FTW_DP)
                return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
        return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int remove_path(const char *path)
{
        if (!path || !*path)
                return 0;
        /* FTW_MOUNT: a mount that would not come off is left, not emptied. */
        if (nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT)
                return -1;
        return 0;
}

int wk_purge(const wk_purge_config *cfg, wk_purge_stats *ret, sp_error **err)
{
        wk_purge_stats st = {0};
        int r = 0;
        const char *tops[3] = {0};
        size_t nt = 0;
        if (cfg->state_dir && *cfg->state_dir)
                tops[nt++] = cfg->state_dir;
        if (cfg->storage_dir && *cfg->storage_dir)
                tops[nt++] = cfg->storage_dir;
        for (size_t i = 0; i < nt; i++)
                if (tops[i][0] != '/' || strcmp(tops[i], "/") == 0)
                        return sp_error_set(err, SP_E_INVALID, "purge: %s is not an absolute directory below /",
                                            tops[i]);
        if (cfg->cgroup_parent && *cfg->cgroup_parent) {
                if (strstr(cfg->cgroup_parent, "..") || cfg->cgroup_parent[0] == '/')
                        return sp_error_set(err, SP_E_INVALID, "purge: invalid cgroup parent %s", cfg->cgroup_parent);
                static char dirs[16][PATH_MAX];
                size_t n = cgroup_dirs(cfg->cgroup_parent, dirs);
                for (size_t i = 0; i < n; i++)
                        kill_tree(dirs[i], &st);
                for (size_t i = 0; i < n; i++)
                        if (remove_tree(dirs[i], &st) < 0 && r == 0)
                                r = sp_error_set_errno(err, SP_E_CONFLICT, errno, "purge: remove cgroup %s", dirs[i]);
        }
        if (unmount_under(tops, &st) < 0 && r == 0)
                r = sp_error_set(err, SP_E_CONFLICT, "purge: something beneath %s stays mounted", tops[0]);
        if (detach_loops(cfg->storage_image, tops, &st) < 0 && r == 0)
                r = sp_error_set(err, SP_E_CONFLICT, "purge: a loop device of %s stays attached",
                                 cfg->storage_image ? cfg->storage_image : tops[0]);
        for (size_t i = 0; i < nt; i++)
                if (remove_path(tops[i]) < 0 && r == 0)
                        r = sp_error_set_errno(err, SP_E_IO, errno, "purge: remove %s", tops[i]);
        if (cfg->storage_image && *cfg->storage_image && unlink(cfg->storage_image) < 0 && errno != ENOENT && r == 0)
                r = sp_error_set_errno(err, SP_E_IO, errno, "purge: remove %s", cfg->storage_image);
        if (ret)
                *ret = st;
        return r;
}
