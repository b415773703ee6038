/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The jail's last steps, taken by the agent itself: the jail executes the
 * agent while it is still host root in the host's user namespace (so that its
 * memory belongs to that namespace), and the agent then enters the sandbox's
 * user namespace, locks every mount it inherited under a new mount namespace,
 * becomes the sandbox's root and makes itself non-dumpable. From then on root
 * in the sandbox holds no capability over the agent's memory: no ptrace, no
 * /proc/1/mem, /proc/1/fd or /proc/1/exe, no pidfd_getfd, no process_vm_readv.
 *
 * Runs once, before the event loop, single-threaded.
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent.h"

/* Reports a failed step on the sync socket (the worker reads it as the start's
 * error) and exits. */
__attribute__((noreturn, format(printf, 3, 4))) static void fail(int sync_fd, int e, const char *fmt, ...)
{
        char msg[256];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (e && n >= 0 && (size_t)n < sizeof(msg))
                snprintf(msg + n, sizeof(msg) - (size_t)n, ": %s", strerror(e));
        (void)!write(sync_fd, msg, strlen(msg));
        _exit(126);
}

void ag_enter_jail(int userns_fd, int sync_fd)
{
        /* A parent-death signal the worker asked for (sandboxes of tests) is
         * cleared by the change of credentials below: keep it to set again. */
        int deathsig = 0;
        if (prctl(PR_GET_PDEATHSIG, &deathsig, 0, 0, 0) < 0)
                deathsig = 0;
        if (setns(userns_fd, CLONE_NEWUSER) < 0)
                fail(sync_fd, errno, "agent: enter the user namespace");
        close(userns_fd);
        /* A mount namespace owned by the sandbox's user namespace locks every
         * mount the host made; a cgroup namespace hides the host's tree. */
        if (unshare(CLONE_NEWNS | CLONE_NEWCGROUP) < 0)
                fail(sync_fd, errno, "agent: unshare mount and cgroup namespaces");
        if (setresgid(0, 0, 0) < 0 || setgroups(0, NULL) < 0 || setresuid(0, 0, 0) < 0)
                fail(sync_fd, errno, "agent: become the sandbox's root");
        if (deathsig) {
                if (prctl(PR_SET_PDEATHSIG, deathsig, 0, 0, 0) < 0)
                        fail(sync_fd, errno, "agent: keep its parent-death signal");
                /* The worker holds the other end until this start ends: a hang-up
                 * means it died before the signal was armed again. */
                struct pollfd p = {.fd = sync_fd, .events = POLLIN};
                if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)))
                        _exit(125);
        }
        if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5") <
            0)
                fail(sync_fd, errno, "agent: mount /dev/pts");
        /* Credential changes reset dumpability: set it last. */
        if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
                fail(sync_fd, errno, "agent: make itself non-dumpable");
        close(sync_fd); /* EOF: the worker's start returns */
}
