/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "guard.h"
#include "harness.h"

#define GUARD_MAX_ACTIONS 256
#define GUARD_MSG_MAX 16384
/* How long each step of the cleanup may take. */
#define GUARD_KILL_WAIT_MS 10000
#define GUARD_RUN_WAIT_MS 120000

enum guard_op {
        OP_KILL = 1,
        OP_RUN,
        OP_REMOVE,
        OP_DONE,
};

/* One message on the connection: the header, then (OP_RUN) NUL-terminated
 * argv strings or (OP_REMOVE) a NUL-terminated path; OP_KILL carries the
 * pidfd as SCM_RIGHTS. */
struct guard_hdr {
        uint32_t op;
        uint32_t id;
};

struct guard_action {
        uint32_t op;
        uint32_t id;
        int pidfd;
        char *data; /* OP_RUN: argv strings back to back; OP_REMOVE: the path */
        size_t len;
};

static int guard_fd = -1;
static pid_t guard_owner;
static uint32_t guard_next_id = 1;

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int ms_until(int64_t deadline)
{
        int64_t left = deadline - mono_ms();
        return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

static int pidfd_open_(pid_t pid)
{
        return (int)syscall(SYS_pidfd_open, pid, 0);
}

static void pidfd_kill_wait(int pidfd)
{
        if (syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0) < 0)
                return; /* gone already */
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        int64_t deadline = mono_ms() + GUARD_KILL_WAIT_MS;
        while (poll(&p, 1, ms_until(deadline)) < 0 && errno == EINTR)
                ;
}

static void run_bounded(const char *data, size_t len)
{
        char *argv[64];
        size_t n = 0;
        for (size_t off = 0; off < len && n + 1 < SP_ARRAY_SIZE(argv); off += strlen(data + off) + 1)
                argv[n++] = (char *)data + off;
        argv[n] = NULL;
        if (n == 0)
                return;
        pid_t pid = fork();
        if (pid < 0)
                return;
        if (pid == 0) {
                setpgid(0, 0);
                execvp(argv[0], argv);
                _exit(127);
        }
        _cleanup_close_ int pidfd = pidfd_open_(pid);
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        int64_t deadline = mono_ms() + GUARD_RUN_WAIT_MS;
        while (pidfd >= 0 && poll(&p, 1, ms_until(deadline)) < 0 && errno == EINTR)
                ;
        if (waitpid(pid, NULL, WNOHANG) == pid)
                return;
        kill(-pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
}

/* Detaches every mount at or below dir, deepest first (a later line of
 * mountinfo may sit on an earlier one, so repeat until none is left). */
static void unmount_below(const char *dir)
{
        size_t dl = strlen(dir);
        for (int pass = 0; pass < 8; pass++) {
                _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
                if (!f)
                        return;
                char line[4096], mp[PATH_MAX];
                bool found = false;
                while (fgets(line, sizeof(line), f)) {
                        if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) != 1)
                                continue;
                        if (strncmp(mp, dir, dl) != 0 || (mp[dl] != '\0' && mp[dl] != '/'))
                                continue;
                        found = true;
                        (void)umount2(mp, MNT_DETACH);
                }
                if (!found)
                        return;
        }
}

static void undo(struct guard_action *a)
{
        switch (a->op) {
        case OP_KILL:
                pidfd_kill_wait(a->pidfd);
                break;
        case OP_RUN:
                run_bounded(a->data, a->len);
                break;
        case OP_REMOVE:
                if (access(a->data, F_OK) == 0) {
                        unmount_below(a->data);
                        sp_test_tmpdir_remove(a->data);
                }
                break;
        default:
                break;
        }
}

/* The guard itself: collects registrations until the connection's last
 * writer is gone, then undoes them, newest first. */
__attribute__((noreturn)) static void guard_main(int fd)
{
        static struct guard_action acts[GUARD_MAX_ACTIONS];
        size_t n = 0;
        static char buf[GUARD_MSG_MAX];

        for (;;) {
                union {
                        struct cmsghdr h;
                        char b[CMSG_SPACE(sizeof(int))];
                } c;
                struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf) - 1};
                struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b, .msg_controllen = sizeof(c.b)};
                ssize_t r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        break;
                int passed = -1;
                struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
                if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
                        memcpy(&passed, CMSG_DATA(cm), sizeof(int));
                struct guard_hdr h;
                if ((size_t)r < sizeof(h)) {
                        sp_close(passed);
                        continue;
                }
                memcpy(&h, buf, sizeof(h));
                buf[r] = '\0';
                if (h.op == OP_DONE) {
                        for (size_t i = 0; i < n; i++)
                                if (acts[i].id == h.id)
                                        acts[i].op = 0;
                        continue;
                }
                if (n == GUARD_MAX_ACTIONS || (h.op == OP_KILL && passed < 0)) {
                        sp_close(passed);
                        continue;
                }
                size_t len = (size_t)r - sizeof(h);
                char *data = malloc(len + 1);
                if (!data)
                        abort();
                memcpy(data, buf + sizeof(h), len + 1);
                acts[n++] = (struct guard_action){.op = h.op, .id = h.id, .pidfd = passed, .data = data, .len = len};
        }
        while (n > 0)
                undo(&acts[--n]);
        _exit(0);
}

/* Starts this process's guard: a grandchild (so that it is nobody's child
 * here, and no leak snapshot counts it among our descendants) in a session of
 * its own. */
static int guard_start(sp_error **err)
{
        int sp[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "guard: socketpair");
        pid_t mid = fork();
        if (mid < 0) {
                int e = errno;
                close(sp[0]);
                close(sp[1]);
                return sp_error_set_errno(err, SP_E_IO, e, "guard: fork");
        }
        if (mid == 0) {
                if (setsid() < 0 || fork() != 0)
                        _exit(0);
                int null = open("/dev/null", O_RDWR);
                if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0 || chdir("/") < 0)
                        _exit(1);
                /* Nothing of the test's, above all not the other end of our connection. */
                if (dup2(sp[1], 3) < 0 || close_range(4, ~0U, 0) < 0)
                        _exit(1);
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                for (int s = 1; s < NSIG; s++)
                        if (s != SIGKILL && s != SIGSTOP)
                                signal(s,
                                       s == SIGINT || s == SIGTERM || s == SIGHUP || s == SIGPIPE ? SIG_IGN : SIG_DFL);
                (void)prctl(PR_SET_NAME, "space-guard");
                guard_main(3);
        }
        close(sp[1]);
        while (waitpid(mid, NULL, 0) < 0 && errno == EINTR)
                ;
        guard_fd = sp[0];
        guard_owner = getpid();
        return 0;
}

static int guard_send(uint32_t op, uint32_t id, const void *data, size_t len, int pass_fd, sp_error **err)
{
        if (sizeof(struct guard_hdr) + len > GUARD_MSG_MAX - 1)
                return sp_error_set(err, SP_E_TOO_LARGE, "guard: registration of %zu bytes", len);
        if (guard_fd >= 0 && guard_owner != getpid())
                /* Inherited: that guard waits for our parent too; ours is our own. */
                guard_fd = sp_close(guard_fd);
        if (guard_fd < 0 && guard_start(err) < 0)
                return -SP_E_IO;
        struct guard_hdr h = {.op = op, .id = id};
        struct iovec iov[2] = {{.iov_base = &h, .iov_len = sizeof(h)}, {.iov_base = (void *)data, .iov_len = len}};
        union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(int))];
        } c;
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = len ? 2 : 1};
        if (pass_fd >= 0) {
                memset(&c, 0, sizeof(c));
                m.msg_control = c.b;
                m.msg_controllen = sizeof(c.b);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
        }
        ssize_t r;
        do
                r = sendmsg(guard_fd, &m, MSG_NOSIGNAL);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "guard: register");
        return (int)id;
}

int sp_test_guard_kill(pid_t pid, sp_error **err)
{
        if (pid <= 0)
                return sp_error_set(err, SP_E_INVALID, "guard: no process");
        _cleanup_close_ int pidfd = pidfd_open_(pid);
        if (pidfd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "guard: pidfd of %d", (int)pid);
        return guard_send(OP_KILL, guard_next_id++, NULL, 0, pidfd, err);
}

int sp_test_guard_run(const char *const *argv, sp_error **err)
{
        char buf[GUARD_MSG_MAX];
        size_t len = 0;
        if (!argv || !argv[0])
                return sp_error_set(err, SP_E_INVALID, "guard: empty argv");
        for (size_t i = 0; argv[i]; i++) {
                size_t l = strlen(argv[i]) + 1;
                if (i >= 63 || len + l > sizeof(buf) - 64)
                        return sp_error_set(err, SP_E_TOO_LARGE, "guard: command too long");
                memcpy(buf + len, argv[i], l);
                len += l;
        }
        return guard_send(OP_RUN, guard_next_id++, buf, len, -1, err);
}

int sp_test_guard_remove(const char *path, sp_error **err)
{
        if (!path || path[0] != '/' || strcmp(path, "/") == 0)
                return sp_error_set(err, SP_E_INVALID, "guard: remove needs an absolute path below /");
        return guard_send(OP_REMOVE, guard_next_id++, path, strlen(path) + 1, -1, err);
}

void sp_test_guard_done(int id)
{
        if (id > 0 && guard_fd >= 0 && guard_owner == getpid())
                (void)guard_send(OP_DONE, (uint32_t)id, NULL, 0, -1, NULL);
}
