/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent's event loop (loop.c), its lowest layer: epoll watches, a tick
 * for polling while something waits, the agent's clock, and the signals it
 * takes through a signalfd (exited children are reaped here and handed to a
 * hook). It knows nothing of connections, sessions or files.
 */
#ifndef SPACE_AGENT_LOOP_H
#define SPACE_AGENT_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* An epoll registration: the loop calls fn with the events. */
typedef struct ag_watch {
        int fd;
        void (*fn)(struct ag_watch *w, uint32_t events);
        bool registered;
        uint32_t events;
} ag_watch;

/* Starts the agent's clock: ag_now_ms() counts from this call. */
void ag_loop_clock_start(void);
/* Milliseconds since ag_loop_clock_start() (monotonic). */
int64_t ag_now_ms(void);

/* Creates the epoll instance. Returns -1 (errno set) on failure. */
int ag_loop_init(void);
/* Registers w for events, or changes its events if already registered. */
int ag_loop_add(ag_watch *w, uint32_t events);
int ag_loop_mod(ag_watch *w, uint32_t events);
/* Unregisters w if registered. An event for it already fetched in the
 * current batch is not delivered. */
void ag_loop_del(ag_watch *w);
/* Frees p (malloc'd) once the current batch of events has been delivered,
 * or at once outside the loop. Memory that holds watches is freed this way:
 * a later event of the same batch may still name one of its watches (two
 * watches of one object, or the watches of objects an earlier callback
 * freed), and it must still be there to be skipped. */
void ag_loop_free_later(void *p);

/* Blocks sigs and takes them through a signalfd watched by the loop. SIGCHLD
 * (if in sigs) reaps every exited child, calling child_fn(pid, status) for each;
 * any other signal calls signal_fn(signo, sender) — sender is the sending pid as
 * the agent's pid namespace sees it, 0 for one from outside it. */
int ag_loop_signals(const int *sigs, size_t n, void (*signal_fn)(int signo, uint32_t sender),
                    void (*child_fn)(pid_t pid, int status));
/* Reaps every exited child now, through the child hook. */
void ag_loop_reap(void);
/* True when the agent has no child left. Like waitpid(-1, NULL, WNOHANG), it
 * may reap a child that exited since the last ag_loop_reap() without the hook. */
bool ag_loop_no_children(void);

/* With fn set, epoll waits at most interval_ms and fn runs after every wait;
 * NULL goes back to waiting for events only. */
void ag_loop_set_tick(int interval_ms, void (*fn)(void));
/* Runs until ag_loop_stop(); returns its status, or 1 if epoll_wait fails. */
int ag_loop_run(void);
void ag_loop_stop(int status);

#endif
