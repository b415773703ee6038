/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The event loop (loop.h): epoll, watches, the tick, the clock, signals and
 * child reaping. The lowest layer of the agent; it calls up only through the
 * hooks and watch callbacks it is given.
 */
#include <errno.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loop.h"
#include "space/log.h"

static int epfd = -1;
static int64_t start_ms;
static int tick_ms = -1;
static void (*tick_fn)(void);
static bool stopped;
static int stop_status;

/* What ag_loop_free_later() holds until the batch is over. */
static void **graveyard;
static size_t ngrave, grave_cap;
static bool dispatching;

static void (*signal_hook)(int signo, uint32_t sender);
static void (*child_hook)(pid_t pid, int status);
static ag_watch signal_watch = {.fd = -1};

static int64_t monotonic_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ag_loop_clock_start(void)
{
        start_ms = monotonic_ms();
}

int64_t ag_now_ms(void)
{
        return monotonic_ms() - start_ms;
}

int ag_loop_init(void)
{
        epfd = epoll_create1(EPOLL_CLOEXEC);
        return epfd < 0 ? -1 : 0;
}

int ag_loop_add(ag_watch *w, uint32_t events)
{
        if (w->fd < 0)
                return -1;
        if (w->registered)
                return ag_loop_mod(w, events);
        struct epoll_event ev = {.events = events, .data.ptr = w};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, w->fd, &ev) < 0)
                return -1;
        w->registered = true;
        w->events = events;
        return 0;
}

int ag_loop_mod(ag_watch *w, uint32_t events)
{
        if (!w->registered)
                return ag_loop_add(w, events);
        if (w->events == events)
                return 0;
        struct epoll_event ev = {.events = events, .data.ptr = w};
        if (epoll_ctl(epfd, EPOLL_CTL_MOD, w->fd, &ev) < 0)
                return -1;
        w->events = events;
        return 0;
}

void ag_loop_del(ag_watch *w)
{
        if (!w->registered)
                return;
        epoll_ctl(epfd, EPOLL_CTL_DEL, w->fd, NULL);
        w->registered = false;
        w->events = 0;
}

void ag_loop_free_later(void *p)
{
        if (!p)
                return;
        if (!dispatching) {
                free(p);
                return;
        }
        if (ngrave == grave_cap) {
                size_t cap = grave_cap ? grave_cap * 2 : 64;
                void **g = realloc(graveyard, cap * sizeof(*g));
                if (!g)
                        abort(); /* the agent cannot go on safely without it */
                graveyard = g;
                grave_cap = cap;
        }
        graveyard[ngrave++] = p;
}

void ag_loop_reap(void)
{
        for (;;) {
                int status;
                pid_t pid = waitpid(-1, &status, WNOHANG);
                if (pid <= 0)
                        return;
                if (child_hook)
                        child_hook(pid, status);
        }
}

bool ag_loop_no_children(void)
{
        return waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD;
}

static void on_signal(ag_watch *w, uint32_t events)
{
        (void)events;
        struct signalfd_siginfo si;
        while (read(w->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGCHLD)
                        ag_loop_reap();
                else if (signal_hook)
                        signal_hook((int)si.ssi_signo, si.ssi_pid);
        }
}

int ag_loop_signals(const int *sigs, size_t n, void (*signal_fn)(int signo, uint32_t sender),
                    void (*child_fn)(pid_t pid, int status))
{
        sigset_t mask;
        sigemptyset(&mask);
        for (size_t i = 0; i < n; i++)
                sigaddset(&mask, sigs[i]);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal_hook = signal_fn;
        child_hook = child_fn;
        signal_watch.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        signal_watch.fn = on_signal;
        if (signal_watch.fd < 0)
                return -1;
        return ag_loop_add(&signal_watch, EPOLLIN);
}

void ag_loop_set_tick(int interval_ms, void (*fn)(void))
{
        tick_fn = fn;
        tick_ms = fn ? interval_ms : -1;
}

void ag_loop_stop(int status)
{
        stopped = true;
        stop_status = status;
}

int ag_loop_run(void)
{
        while (!stopped) {
                struct epoll_event ev[64];
                int n = epoll_wait(epfd, ev, 64, tick_ms);
                if (n < 0 && errno != EINTR) {
                        sp_log_error("epoll_wait: %s", strerror(errno));
                        return 1;
                }
                dispatching = true;
                for (int i = 0; i < n; i++) {
                        ag_watch *w = ev[i].data.ptr;
                        /* Deleted by an earlier callback of this batch (its
                         * memory is held until the batch is over). */
                        if (!w->registered)
                                continue;
                        w->fn(w, ev[i].events);
                }
                dispatching = false;
                for (size_t i = 0; i < ngrave; i++)
                        free(graveyard[i]);
                ngrave = 0;
                if (tick_fn && !stopped)
                        tick_fn();
        }
        return stop_status;
}
