/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-agent: PID 1 of a sandbox. Reaps orphans, forwards termination to the
 * commands it runs, and serves the agent protocol on a listening socket it is
 * handed (the jail backend passes one by fd) or opens itself.
 *
 *   space-agent --listen-fd 3 [--jail-userns-fd 4 --jail-sync-fd 5]
 *   space-agent --listen /run/space-agent.sock
 *
 * Its files form layers. Each calls only the layers below it; a lower layer
 * reaches a higher one only through callbacks registered here at start (the
 * loop's signal, child and tick hooks, the connection handlers):
 *
 *   main.c                        start-up, what a signal means, shutdown
 *     dispatch.c                  frame or request → session, file or port handler
 *       session.c files.c port.c  command sessions; file operations, transfers;
 *                                 connections to ports in the sandbox
 *         stream.c                flow-controlled output with a resend buffer
 *           conn.c    (conn.h)    worker connections: HELLO, frames in and out
 *             loop.c  (loop.h)    epoll, watches, tick, clock, signals, reaping
 *   users.c proc.c enter.c        leaves: users, process trees, jail entry
 *
 * This file only puts them together: it starts the loop with its hooks (a
 * reaped child goes to the sessions; SIGTERM and the like stop the commands,
 * then the agent once they are gone or the grace is over) and hands the
 * listening socket to the connections with the dispatch handlers.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"
#include "space/cleanup.h"
#include "space/log.h"

#define SHUTDOWN_GRACE_MS 10000

static bool shutting_down;
static bool in_jail; /* in a jail or a VM: signals from inside the sandbox do not stop the agent */
static int64_t shutdown_deadline;

/* A child the loop reaped: a session's command, or an orphan. */
static void on_child(pid_t pid, int status)
{
        ag_session_reaped(pid, status);
}

/* While shutting down, after every wait of at most 100 ms: end when every
 * child is gone, or kill what remains once the grace is over. */
static void shutdown_tick(void)
{
        ag_loop_reap();
        if (ag_now_ms() > shutdown_deadline) {
                ag_session_signal_all(SIGKILL);
                ag_loop_stop(0);
                return;
        }
        if (ag_loop_no_children())
                ag_loop_stop(0);
}

static void on_signal(int signo, uint32_t sender)
{
        switch (signo) {
        case SIGTERM:
        case SIGINT:
        case SIGHUP:
        case SIGQUIT:
                /* A sender outside the sandbox's pid namespace (the host) shows
                 * as pid 0; one inside is the sandbox's root, which must not end
                 * the agent that serves the sandbox. */
                if (in_jail && sender != 0) {
                        sp_log_info("signal %d from pid %u inside the sandbox: ignored", signo, sender);
                        break;
                }
                if (!shutting_down) {
                        sp_log_info("signal %d: stopping commands", signo);
                        shutting_down = true;
                        shutdown_deadline = ag_now_ms() + SHUTDOWN_GRACE_MS;
                        ag_session_signal_all(SIGTERM);
                        ag_loop_set_tick(100, shutdown_tick);
                }
                break;
        default:
                break;
        }
}

static int listen_path(const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path)) {
                fprintf(stderr, "space-agent: socket path too long\n");
                return -1;
        }
        strcpy(sa.sun_path, path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        unlink(path);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 || listen(fd, 16) < 0) {
                fprintf(stderr, "space-agent: listen on %s: %s\n", path, strerror(errno));
                return sp_close(fd);
        }
        return fd;
}

static void usage(FILE *f)
{
        fprintf(f, "usage: space-agent (--listen-fd N | --listen PATH) [--log-level LEVEL]\n"
                   "                   [--jail-userns-fd N --jail-sync-fd N]\n"
                   "PID 1 of a sandbox: runs commands and file operations for the worker.\n"
                   "Run as /init by a VM's kernel, it sets the VM up and serves its virtio-serial port.\n");
}

int main(int argc, char **argv)
{
        int lfd = -1, userns_fd = -1, sync_fd = -1;
        sp_log_level level = SP_LOG_INFO;
        ag_loop_clock_start();

        int port = -1;
        /* A VM's kernel runs the initramfs's /init as PID 1 (with no options). */
        if (getpid() == 1 && strcmp(argv[0], "/init") == 0) {
                port = ag_vm_init(&level);
                in_jail = true;
                argc = 1;
        }
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--listen-fd") == 0 && i + 1 < argc) {
                        lfd = atoi(argv[++i]);
                        if (lfd < 3 || fcntl(lfd, F_GETFD) < 0) {
                                fprintf(stderr, "space-agent: --listen-fd %s is not an open descriptor\n", argv[i]);
                                return 2;
                        }
                        fcntl(lfd, F_SETFD, FD_CLOEXEC);
                        fcntl(lfd, F_SETFL, O_NONBLOCK);
                } else if ((strcmp(argv[i], "--jail-userns-fd") == 0 || strcmp(argv[i], "--jail-sync-fd") == 0) &&
                           i + 1 < argc) {
                        int *fd = strcmp(argv[i], "--jail-userns-fd") == 0 ? &userns_fd : &sync_fd;
                        *fd = atoi(argv[++i]);
                        if (*fd < 3 || fcntl(*fd, F_GETFD) < 0) {
                                fprintf(stderr, "space-agent: %s %s is not an open descriptor\n", argv[i - 1], argv[i]);
                                return 2;
                        }
                } else if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
                        lfd = listen_path(argv[++i]);
                        if (lfd < 0)
                                return 1;
                } else if (strcmp(argv[i], "--log-level") == 0 && i + 1 < argc) {
                        if (sp_log_level_parse(argv[++i], &level) < 0) {
                                fprintf(stderr, "space-agent: unknown log level %s\n", argv[i]);
                                return 2;
                        }
                } else if (strcmp(argv[i], "--version") == 0) {
                        printf("space-agent %s\n", SPACE_VERSION);
                        return 0;
                } else if (strcmp(argv[i], "--help") == 0) {
                        usage(stdout);
                        return 0;
                } else {
                        usage(stderr);
                        return 2;
                }
        }
        if ((lfd < 0 && port < 0) || (userns_fd < 0) != (sync_fd < 0)) {
                usage(stderr);
                return 2;
        }
        if (userns_fd >= 0) {
                ag_enter_jail(userns_fd, sync_fd);
                in_jail = true;
                /* In a jail its log is a pipe the worker reads: never block on
                 * it, drop a line instead. */
                fcntl(STDERR_FILENO, F_SETFL, fcntl(STDERR_FILENO, F_GETFL) | O_NONBLOCK);
        }
        sp_log_init("agent", level, SP_LOG_FORMAT_AUTO);
        ag_proc_init(); /* before any command can mount over /proc */

        int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
        signal(SIGPIPE, SIG_IGN);
        if (ag_loop_init() < 0 || ag_loop_signals(sigs, SP_ARRAY_SIZE(sigs), on_signal, on_child) < 0 ||
            (port >= 0 ? ag_conn_serial_add(port, &ag_dispatch) : ag_conn_listen_add(lfd, &ag_dispatch)) < 0) {
                sp_log_error("cannot set up the event loop: %s", strerror(errno));
                return 1;
        }
        sp_log_info("ready (pid %d)", (int)getpid());
        return ag_loop_run();
}
