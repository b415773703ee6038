/* SPDX-License-Identifier: Apache-2.0 */
/* A box's main process (a jail's init, a VM's QEMU) as the backends track it:
 * by pid and start time, so that a recycled pid is never taken for it, also
 * after the worker restarted and the process is no longer its child. */
#ifndef WK_BACKEND_PROC_H
#define WK_BACKEND_PROC_H

#include <stdbool.h>
#include <sys/types.h>

/* The start time of pid (field 22 of /proc/PID/stat), 0 if it is gone. */
unsigned long long wk_proc_starttime(pid_t pid);
/* True while *pid runs with that start time; reaps it if it is a child that
 * died (and sets *pid to 0). */
bool wk_proc_alive(pid_t *pid, unsigned long long starttime);
/* Waits (bounded by timeout_ms) until *pid is gone, reaping it if it is a
 * child; sets *pid to 0. */
void wk_proc_wait_gone(pid_t *pid, unsigned long long starttime, int timeout_ms);

#endif
