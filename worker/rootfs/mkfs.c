/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The programs the storage runs: mkfs.btrfs (libbtrfsutil cannot make a
 * filesystem) and mkfs.ext4 (a VM's disk, filled from a directory).
 * fork/execve with an argv and a fixed environment, never a shell; output
 * captured (its tail quoted on failure); bounded in time.
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
#include "rootfs/rootfs.h"

#define MKFS_OUTPUT_TAIL 2048

static int find_tool(const char *tool, char out[static PATH_MAX])
{
        const char *path = getenv("PATH");
        _cleanup_free_ char *dirs = NULL;
        if (asprintf(&dirs, "%s:/usr/sbin:/sbin:/usr/bin:/bin", path ? path : "") < 0)
                abort();
        char *save = NULL;
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                if (d[0] != '/')
                        continue; /* never a relative PATH entry for a root daemon */
                int n = snprintf(out, PATH_MAX, "%s/%s", d, tool);
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

/* Runs tool (found on PATH or in the system directories) with args (argv[1..],
 * NULL-terminated); what names the run in errors. */
static int run_tool(const char *tool, const char *package, const char *const *args, const char *what,
                    int64_t timeout_ms, sp_error **err)
{
        char mkfs[PATH_MAX];
        if (find_tool(tool, mkfs) < 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "%s (%s) not found", tool, package);
        char *argv[16] = {mkfs};
        size_t argc = 1;
        for (; args[argc - 1] && argc < 15; argc++)
                argv[argc] = (char *)args[argc - 1];
        argv[argc] = NULL;

        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        _cleanup_close_ int rd = pipefd[0];
        _cleanup_close_ int wr = pipefd[1];
        _cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /dev/null");

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
                return sp_error_set(err, SP_E_TIMEOUT, "%s %s took longer than %lld ms", tool, what,
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
                        return sp_error_set_errno(err, SP_E_IO, errno, "waitpid %s", tool);
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                char *t = tail;
                while (*t == '\n')
                        t++;
                return sp_error_set(err, SP_E_IO, "%s %s failed (%s %d): %s", tool, what,
                                    WIFEXITED(status) ? "exit status" : "signal",
                                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), t);
        }
        return 0;
}

int wk__mkfs_btrfs(const char *image, int64_t timeout_ms, sp_error **err)
{
        const char *const args[] = {"-q", "-f", "-K", image, NULL};
        return run_tool("mkfs.btrfs", "btrfs-progs", args, image, timeout_ms, err);
}

int wk_rootfs_make_ext4(const char *dir, const char *image, uint64_t size, int64_t timeout_ms, sp_error **err)
{
        if (size < WK_EXT4_MIN_SIZE || size > WK_STORAGE_IMAGE_MAX_SIZE)
                return sp_error_set(err, SP_E_INVALID, "a disk of %llu bytes is outside [%llu, %llu]",
                                    (unsigned long long)size, (unsigned long long)WK_EXT4_MIN_SIZE,
                                    (unsigned long long)WK_STORAGE_IMAGE_MAX_SIZE);
        char blocks[32];
        snprintf(blocks, sizeof(blocks), "%lluk", (unsigned long long)(size >> 10));
        /* Sparse; the files' owners and modes as they are in dir; no reserved
         * blocks (the sandbox's root may use the whole disk, as in a jail). */
        int fd = open(image, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create %s", image);
        close(fd);
        const char *const args[] = {"-q", "-F", "-m", "0", "-d", dir, "-E", "lazy_itable_init=1", image, blocks, NULL};
        if (run_tool("mkfs.ext4", "e2fsprogs", args, image, timeout_ms, err) < 0) {
                unlink(image);
                return -SP_E_IO;
        }
        return 0;
}
