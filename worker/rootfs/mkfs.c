/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkfs.btrfs: the one program the storage runs (libbtrfsutil cannot make a
 * filesystem). fork/execve with an argv and a fixed environment, never a
 * shell; output captured (its tail quoted on failure); bounded in time.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "rootfs/internal.h"

#define MKFS_OUTPUT_TAIL 2048

static int find_mkfs(char out[static PATH_MAX])
{
        const char *path = getenv("PATH");
        _cleanup_free_ char *dirs = NULL;
        if (asprintf(&dirs, "%s:/usr/sbin:/sbin:/usr/bin:/bin", path ? path : "") < 0)
                abort();
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                if (d[0] != '/')
                        continue; /* never a relative PATH entry for a root daemon */
                int n = snprintf(out, PATH_MAX, "%s/mkfs.btrfs", d);
                if (n > 0 && n < PATH_MAX && access(out, X_OK) == 0)
                        return 0;
        }
        return -1;
}

/* Keeps the last MKFS_OUTPUT_TAIL bytes of what was read. */
static void tail_append(char *tail, size_t *len, const char *p, size_t n)
{
        if (n >= MKFS_OUTPUT_TAIL) {
                memcpy(tail, p + n - MKFS_OUTPUT_TAIL, MKFS_OUTPUT_TAIL);
                *len = MKFS_OUTPUT_TAIL;
                return;
        }
        if (*len + n > MKFS_OUTPUT_TAIL) {
                size_t drop = *len + n - MKFS_OUTPUT_TAIL;
                memmove(tail, tail + drop, *len - drop);
                *len -= drop;
        }
        memcpy(tail + *len, p, n);
        *len += n;
}

int wk__mkfs_btrfs(const char *image, int64_t timeout_ms, sp_error **err)
{
        char mkfs[PATH_MAX];
        if (find_mkfs(mkfs) < 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "mkfs.btrfs (btrfs-progs) not found");

        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        _cleanup_close_ int rd = pipefd[0];
        _cleanup_close_ int wr = pipefd[1];
        _cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /dev/null");

        char *const argv[] = {mkfs, (char *)"-q", (char *)"-f", (char *)"-K", (char *)image, NULL};
        char *const envp[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", (char *)"LC_ALL=C", NULL};
        pid_t pid = fork();
        if (pid < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "fork");
        if (pid == 0) {
                /* Only async-signal-safe calls until execve. */
                if (dup2(devnull, 0) < 0 || dup2(wr, 1) < 0 || dup2(wr, 2) < 0)
                        _exit(127);
                sigset_t all;
                sigemptyset(&all);
                sigprocmask(SIG_SETMASK, &all, NULL);
                execve(mkfs, argv, envp);
                _exit(127);
        }
        wr = sp_close(wr);

        int64_t deadline = sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
        char tail[MKFS_OUTPUT_TAIL + 1];
        size_t tail_len = 0;
        bool timed_out = false;
        for (;;) {
                int64_t left_ms = (deadline - sp_now_mono_us()) / SP_USEC_PER_MSEC;
                if (left_ms <= 0) {
                        timed_out = true;
                        break;
                }
                struct pollfd pfd = {.fd = rd, .events = POLLIN};
                int pr = poll(&pfd, 1, (int)(left_ms > 1000 ? 1000 : left_ms));
                if (pr < 0 && errno != EINTR)
                        break;
                if (pr <= 0)
                        continue;
                char buf[4096];
                ssize_t n = read(rd, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break; /* EOF: mkfs (and anything it started) is done with its output */
                tail_append(tail, &tail_len, buf, (size_t)n);
        }
        tail[tail_len] = '\0';

        int status = 0;
        if (timed_out) {
                kill(pid, SIGKILL);
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                        ;
                return sp_error_set(err, SP_E_TIMEOUT, "mkfs.btrfs %s took longer than %lld ms", image,
                                    (long long)timeout_ms);
        }
        /* Output closed: the process is exiting; reap it, still bounded. */
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd >= 0) {
                int64_t left_ms = (deadline - sp_now_mono_us()) / SP_USEC_PER_MSEC;
                struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
                int pr = poll(&pfd, 1, left_ms > 0 ? (int)left_ms : 0);
                sp_close(pidfd);
                if (pr == 0)
                        kill(pid, SIGKILL);
        }
        while (waitpid(pid, &status, 0) < 0) {
                if (errno != EINTR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "waitpid mkfs.btrfs");
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                char *t = tail;
                while (*t == '\n')
                        t++;
                return sp_error_set(err, SP_E_IO, "mkfs.btrfs %s failed (%s %d): %s", image,
                                    WIFEXITED(status) ? "exit status" : "signal",
                                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), t);
        }
        return 0;
}
