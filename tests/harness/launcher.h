/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: launching our daemons for end-to-end tests.
 *
 * A sp_test_proc is one program started from an argv with environment
 * additions and a log file (stdout and stderr), in its own process group and
 * with PR_SET_PDEATHSIG(SIGKILL), so it dies with the thread that started it
 * even if the test crashes. The waits (a TCP port accepting, an HTTP GET
 * answering 200, a line appearing in the log) are bounded, fail at once when
 * the process exits, and on failure print the tail of its log to stderr.
 * Stop sends SIGTERM to the whole group, waits, then SIGKILLs and reaps.
 *
 * A sp_test_cluster holds several named processes with their logs in one
 * directory and tears them down together (in reverse start order).
 *
 *   sp_test_cluster c;
 *   sp_test_ok(sp_test_cluster_init(&c, NULL, &err), &err);
 *   sp_test_proc *cp = sp_test_cluster_start(&c, "controlplane", argv, NULL, &err);
 *   sp_test_ok(sp_test_proc_wait_http(cp, "127.0.0.1", port, "/healthz", 10000, &err), &err);
 *   ...
 *   sp_test_cluster_destroy(&c);
 *
 * A forked test may stop, kill or restart a process its unchecked fixture
 * started (the runner's child): the waits then go through a pidfd and the
 * exit status reads -1, and a restarted process belongs to — and dies with —
 * the test's process, as with sp_test_pg_restart().
 *
 * Processes die with the thread that started them, but what they in turn
 * start outside their process group (a new session, say) is theirs to clean
 * up; the leak snapshot (leak.h) finds it. Not thread-safe.
 */
#ifndef SPACE_TEST_LAUNCHER_H
#define SPACE_TEST_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/error.h"

#define SP_TEST_LOG_TAIL_LINES 40

/* Optional settings for a start; a NULL or zeroed struct takes the defaults. */
typedef struct sp_test_proc_opts {
        const char *const *env; /* "NAME=value" additions, NULL-terminated */
        const char *log_path; /* default: <name>.log in a temporary directory the proc owns (which a
                               * failed forked test leaves behind: prefer a fixture's directory) */
        const char *cwd; /* default: ours */
        const char *netns; /* run inside this network namespace file (see netns.h) */
} sp_test_proc_opts;

typedef struct sp_test_proc {
        char *name; /* for messages (owned) */
        char **argv; /* owned copies, NULL-terminated */
        char **env;
        char *cwd;
        char *netns;
        char *log_path;
        char *own_dir; /* the temporary directory holding the default log, or NULL */
        pid_t pid; /* > 0 while started and not yet reaped */
        pid_t pgid; /* its process group, until stop or kill has emptied it */
        int status; /* wait status of the last exit (once exited); -1 if not ours to read */
        bool exited;
        off_t log_offset; /* log size at the last start: waits look only past it */
        unsigned starts;
} sp_test_proc;

/* Copies the settings into *p (which it overwrites) and starts the program.
 * On failure *p is left empty (nothing to free). */
int sp_test_proc_start(sp_test_proc *p, const char *name, const char *const *argv, const sp_test_proc_opts *opts,
                       sp_error **err);

/* True while the process runs; reaps it (recording status) once it exited. */
bool sp_test_proc_running(sp_test_proc *p);

/* Waits until host:port accepts a TCP connection. Fails early if the process
 * exits; prints its log tail on failure. */
int sp_test_proc_wait_port(sp_test_proc *p, const char *host, int port, int64_t timeout_ms, sp_error **err);

/* Waits until GET path on http://host:port answers with status 200. */
int sp_test_proc_wait_http(sp_test_proc *p, const char *host, int port, const char *path, int64_t timeout_ms,
                           sp_error **err);

/* Waits until the log, past what the last start found in it, contains needle. */
int sp_test_proc_wait_log(sp_test_proc *p, const char *needle, int64_t timeout_ms, sp_error **err);

/* Waits (bounded) for the process to exit on its own; *ret_status (may be
 * NULL) receives the wait status. */
int sp_test_proc_wait_exit(sp_test_proc *p, int64_t timeout_ms, int *ret_status, sp_error **err);

/* SIGTERM to the process group, up to grace_ms for it to exit, then SIGKILL;
 * reaps it and kills what is left of its group. Returns 0 if it exited on
 * SIGTERM, 1 if it had to be killed, <0 on failure. A stopped process may be
 * started again with sp_test_proc_restart(). */
int sp_test_proc_stop(sp_test_proc *p, int64_t grace_ms, sp_error **err);

/* SIGKILL to the process group at once (a crash), and reaps it. */
int sp_test_proc_kill(sp_test_proc *p, sp_error **err);

/* Stops it if it runs (SIGTERM, grace_ms) and starts the same argv again,
 * appending to the same log. */
int sp_test_proc_restart(sp_test_proc *p, int64_t grace_ms, sp_error **err);

/* Prints the last lines of its log to stderr. */
void sp_test_proc_dump_log(const sp_test_proc *p, size_t max_lines);

/* Kills it if it still runs, frees its settings and removes its own log
 * directory (a log_path given in the options stays). Safe on a zeroed struct. */
void sp_test_proc_free(sp_test_proc *p);

#define SP_TEST_CLUSTER_MAX 32

typedef struct sp_test_cluster {
        char *dir; /* where the logs go: <dir>/<name>.log */
        bool own_dir; /* dir was created by init and is removed by destroy */
        sp_test_proc procs[SP_TEST_CLUSTER_MAX];
        size_t n;
} sp_test_cluster;

/* Prepares an empty cluster whose logs go into log_dir (which must exist and
 * stays), or, with NULL, into a fresh temporary directory that destroy
 * removes. */
int sp_test_cluster_init(sp_test_cluster *c, const char *log_dir, sp_error **err);

/* Starts a process named name (unique in the cluster, also its log's name);
 * opts->log_path is ignored. Returns the process, owned by the cluster, or
 * NULL with *err set. */
sp_test_proc *sp_test_cluster_start(sp_test_cluster *c, const char *name, const char *const *argv,
                                    const sp_test_proc_opts *opts, sp_error **err);

/* The process of that name, or NULL. */
sp_test_proc *sp_test_cluster_find(sp_test_cluster *c, const char *name);

/* Prints the log tail of every process to stderr. */
void sp_test_cluster_dump_logs(const sp_test_cluster *c, size_t max_lines);

/* Stops every running process, in reverse start order, each with grace_ms. */
void sp_test_cluster_stop_all(sp_test_cluster *c, int64_t grace_ms);

/* Stops everything (5 s grace each), frees the processes and removes the log
 * directory if the cluster made it. Safe on a zeroed struct. */
void sp_test_cluster_destroy(sp_test_cluster *c);

#endif
