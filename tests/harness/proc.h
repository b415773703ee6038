/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: child processes.
 *
 * The building block under pg.h, launcher.h and netns.h: spawn an argv with
 * environment additions, its output in a log file, optionally in its own
 * process group, as another user, inside a network namespace, and with a
 * parent-death signal; wait for it with a bound; stop it (a signal, a bounded
 * wait, then SIGKILL); and find processes that are still around.
 *
 * Every wait is bounded and event-driven where the kernel offers an event
 * (pidfd). Free ports are in port.h. Not thread-safe; PR_SET_PDEATHSIG fires when the *thread* that
 * spawned the child exits, so spawn from the thread that outlives the child
 * (normally the test's main thread).
 */
#ifndef SPACE_TEST_PROC_H
#define SPACE_TEST_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/error.h"

#include "port.h" /* sp_test_free_port(), which began here */

/* How to start a child. A zeroed struct means: inherit everything, same
 * process group, no parent-death signal. */
typedef struct sp_test_spawn_opts {
        const char *const *env; /* "NAME=value" added to (or replacing in) our environment; NULL-terminated */
        const char *log_path; /* stdout and stderr appended here (created 0644); NULL keeps ours */
        const char *cwd; /* working directory; NULL keeps ours */
        const char *netns; /* path of a network namespace file (e.g. /run/netns/<name>) to enter */
        bool netns_sysfs; /* with netns: a private mount namespace with its own /sys, like `ip netns exec` */
        bool new_pgroup; /* the child leads its own process group (stop and kill reach all of it) */
        int pdeathsig; /* signal the child gets when the spawning thread dies; 0 for none */
        bool drop_user; /* run as uid/gid with no supplementary groups (the caller must be root) */
        uid_t uid;
        gid_t gid;
} sp_test_spawn_opts;

/* Starts argv[0] (searched on PATH) with argv. stdin is /dev/null; signal
 * dispositions and mask are reset; descriptors other than 0-2 are closed.
 * Errors in the child before exec (a missing binary, a failed setns ...) are
 * reported here with the step and errno. On success *ret_pid is the child,
 * which the caller must reap (sp_test_child_wait/stop). */
int sp_test_spawn(const char *const *argv, const sp_test_spawn_opts *opts, pid_t *ret_pid, sp_error **err);

/* Waits at most timeout_ms for child pid to exit and reaps it. Returns 0 and
 * the wait status in *ret_status (may be NULL), or -SP_E_TIMEOUT (still
 * running, not reaped). A pid that is not our child — started by the process
 * that forked us, as Check's unchecked fixtures are — is awaited through a
 * pidfd instead, and its status reads -1. */
int sp_test_child_wait(pid_t pid, int64_t timeout_ms, int *ret_status, sp_error **err);

/* Stops child pid: sends sig (to its process group if group is true), waits
 * grace_ms, then SIGKILLs and waits again (bounded). With group, whatever else
 * is left in the group afterwards is killed too and awaited. Returns 0 if it
 * exited within the grace period, 1 if it had to be killed, <0 if it could not
 * be reaped. *ret_status (may be NULL) receives the wait status (-1 for a
 * process that is not our child, see sp_test_child_wait()). */
int sp_test_child_stop(pid_t pid, bool group, int sig, int64_t grace_ms, int *ret_status, sp_error **err);

/* Waits at most timeout_ms for any process (child or not) to exit, through a
 * pidfd. Returns 0 once it is gone (or never existed), -SP_E_TIMEOUT otherwise.
 * Does not reap. */
int sp_test_pid_wait_gone(pid_t pid, int64_t timeout_ms);

/* True if pid names a live (non-zombie) process. */
bool sp_test_pid_alive(pid_t pid);

/* What /proc/<pid>/stat says about a process. */
typedef struct sp_test_pidstat {
        pid_t pid;
        pid_t ppid;
        pid_t pgrp;
        char state; /* R, S, D, Z, ... */
        char comm[32];
} sp_test_pidstat;

/* Reads /proc/<pid>/stat. Returns 0, or -1 if the process is gone. */
int sp_test_pidstat_read(pid_t pid, sp_test_pidstat *ret);
/* Every process visible in /proc, as a malloc'd array the caller frees.
 * Returns 0, or -1 if /proc cannot be read. */
int sp_test_pidstat_list(sp_test_pidstat **ret, size_t *ret_n);

/* Lists live (non-zombie) processes of process group pgid into out (at most
 * max); returns how many there are in total (which may exceed max). */
size_t sp_test_pgroup_members(pid_t pgid, pid_t *out, size_t max);

/* SIGKILLs every member of process group pgid and waits at most timeout_ms
 * until none is left alive. Returns 0, or -SP_E_TIMEOUT. */
int sp_test_pgroup_kill_wait(pid_t pgid, int64_t timeout_ms);

/* Lists live processes whose working directory is dir or lies below it
 * (dir must be canonical, see realpath(3)); returns the total count. Only
 * processes we may inspect are seen (all of them as root). */
size_t sp_test_procs_with_cwd(const char *dir, pid_t *out, size_t max);

/* How many live processes have a command line (arguments joined by spaces,
 * its first 8 KiB) holding a, and b too when b is not NULL. */
size_t sp_test_procs_with_cmdline(const char *a, const char *b);

/* space-worker --purge with the worker's own flags (argv as it was started,
 * NULL-ended): takes away what it left on the host — sandboxes, cgroups,
 * mounts, its firewall table, its gateway and its links. sp_test_worker_purge
 * runs it now (bounded; 0, or <0 with *err); sp_test_worker_purge_guard
 * registers it to run once the test process is gone (guard.h), returning the
 * registration id. */
int sp_test_worker_purge(const char *const *worker_argv, sp_error **err);
int sp_test_worker_purge_guard(const char *const *worker_argv, sp_error **err);

#endif
