/* SPDX-License-Identifier: Apache-2.0 */
/* What the jail and the VM backends share about a box: its main process (a
 * jail's init, a VM's QEMU) tracked by pid and start time, so that a
 * recycled pid is never taken for it, also after the worker restarted and
 * the process is no longer its child; its log FIFO; its listening sockets;
 * its cgroup. */
#ifndef WK_BACKEND_PROC_H
#define WK_BACKEND_PROC_H

#include <stdbool.h>
#include <sys/types.h>

#include "cgroup/cgroup.h"
#include "space/error.h"

/* The start time of pid (field 22 of /proc/PID/stat), 0 if it is gone or a
 * zombie (dead: an orphan waits for init to reap it, which may be slow). */
unsigned long long wk_proc_starttime(pid_t pid);
/* True while *pid runs with that start time; reaps it if it is a child that
 * died (and sets *pid to 0). */
bool wk_proc_alive(pid_t *pid, unsigned long long starttime);
/* Waits (bounded by timeout_ms) until *pid is gone, reaping it if it is a
 * child; sets *pid to 0. */
void wk_proc_wait_gone(pid_t *pid, unsigned long long starttime, int timeout_ms);

/* A box's log is a FIFO in its runtime directory (on the host, out of the
 * sandbox's reach), not a file: the worker reads it and applies its own
 * bounds, and a FIFO, unlike an anonymous pipe, can be opened again by a
 * restarted worker while the box keeps writing.
 * Opens its read end into *rfd unless it is open (non-blocking); -1 with errno. */
int wk_box_log_reader(const char *path, int *rfd);
/* Makes the FIFO if needed, holds its read end in *rfd, and returns a write
 * end for the box in *ret_wfd; -1 with errno. */
int wk_box_log_open(const char *path, int *rfd, int *ret_wfd);
/* Closes the read end and removes the FIFO. */
void wk_box_log_close(const char *path, int *rfd);

/* A unix socket listening at path (replacing what is there), mode 0600. On
 * failure errno says why; with err NULL nothing is allocated (a jail's init,
 * cloned from a process with threads, calls it). */
int wk_box_listen(const char *path, int backlog, int *ret, sp_error **err);

/* The box's cgroup parent/name with limits l: made, or taken over (emptied)
 * when a box that died with the worker left it; an existing *cg only gets
 * the limits. */
int wk_box_cgroup(const wk_cgroup_host *h, const char *parent, const char *name, const wk_cgroup_limits *l,
                  wk_cgroup **cg, sp_error **err);

#endif
