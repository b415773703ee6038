/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/proc.h"
#include "space/cleanup.h"

unsigned long long wk_proc_starttime(pid_t pid)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f || !fgets(buf, sizeof(buf), f))
                return 0;
        char *p = strrchr(buf, ')');
        if (!p)
                return 0;
        /* field 22 is starttime; after ')' comes field 3, the state */
        unsigned long long v = 0;
        int field = 2;
        char *save = NULL;
        for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
                if (++field == 3 && (tok[0] == 'Z' || tok[0] == 'X'))
                        return 0; /* dead, only not reaped yet (a restored jail's init is init's child) */
                else if (field == 22) {
                        v = strtoull(tok, NULL, 10);
                        break;
                }
        return v;
}

bool wk_proc_alive(pid_t *pid, unsigned long long starttime)
{
        if (*pid <= 0)
                return false;
        int status;
        /* Our own child: reap it if it died. Adopted (not our child): ECHILD. */
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
                *pid = 0;
                return false;
        }
        return kill(*pid, 0) == 0 && wk_proc_starttime(*pid) == starttime;
}

void wk_proc_wait_gone(pid_t *pid, unsigned long long starttime, int timeout_ms)
{
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        while (*pid > 0) {
                if (waitpid(*pid, NULL, WNOHANG) == *pid)
                        break;
                if (kill(*pid, 0) < 0 || wk_proc_starttime(*pid) != starttime) {
                        (void)waitpid(*pid, NULL, WNOHANG); /* a child that is a zombie now */
                        break;
                }
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > timeout_ms)
                        break;
                usleep(2000);
        }
        *pid = 0;
}

int wk_box_log_reader(const char *path, int *rfd)
{
        if (*rfd >= 0)
                return 0;
        *rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        return *rfd < 0 ? -1 : 0;
}

int wk_box_log_open(const char *path, int *rfd, int *ret_wfd)
{
        struct stat st;
        if (lstat(path, &st) == 0 && !S_ISFIFO(st.st_mode))
                unlink(path);
        if ((mkfifo(path, 0600) < 0 && errno != EEXIST) || wk_box_log_reader(path, rfd) < 0)
                return -1;
        *ret_wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        return *ret_wfd < 0 ? -1 : 0;
}

void wk_box_log_close(const char *path, int *rfd)
{
        sp_close(*rfd);
        *rfd = -1;
        unlink(path);
}

int wk_box_listen(const char *path, int backlog, int *ret, sp_error **err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path)) {
                errno = ENAMETOOLONG;
                return sp_error_set(err, SP_E_INVALID, "socket path too long: %s", path);
        }
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        unlink(path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 ||
            listen(fd, backlog) < 0) {
                int e = errno;
                sp_close(fd);
                errno = e;
                return sp_error_set_errno(err, SP_E_IO, e, "listen on %s", path);
        }
        *ret = fd;
        return 0;
}

int wk_box_cgroup(const wk_cgroup_host *h, const char *parent, const char *name, const wk_cgroup_limits *l,
                  wk_cgroup **cg, sp_error **err)
{
        if (!*cg) {
                int r = wk_cgroup_create(h, parent, name, cg, err);
                if (r == -SP_E_CONFLICT) {
                        /* A leftover of a box that died with the worker: empty it and reuse it. */
                        sp_error_free(*err);
                        *err = NULL;
                        if (wk_cgroup_open(h, parent, name, cg, err) < 0 || wk_cgroup_kill_all(*cg, err) < 0)
                                return sp_error_wrap(err, "sandbox %s: cgroup", name);
                } else if (r < 0) {
                        return sp_error_wrap(err, "sandbox %s: cgroup", name);
                }
        }
        if (wk_cgroup_set_limits(*cg, l, err) < 0)
                return sp_error_wrap(err, "sandbox %s: limits", name);
        return 0;
}
