/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: cleanup that outlives the test process.
 *
 * A test that fails, crashes or is killed on its timeout (by Check, or by
 * CTest's TIMEOUT) skips its teardown. What the harness starts itself dies
 * with it (PR_SET_PDEATHSIG, see proc.h), but not what escapes into its own
 * session or namespaces — a sandbox's init, a cluster `spacectl up` started —
 * nor its temporary directories. The guard covers those: a small process that
 * the first registration of each process starts, outside the test's session
 * and process group (no Check or CTest kill reaches it), with stdin, stdout
 * and stderr on /dev/null (it never holds CTest's output pipe) and its working
 * directory at /. It waits until the registering process — and every fork of
 * it that inherited the connection, such as Check's forked tests — is gone,
 * then undoes the registrations in reverse order, each step bounded, and
 * exits.
 *
 * A registration a normal teardown already undid costs nothing: a process is
 * held as a pidfd (a reused pid is never hit), a missing directory is skipped;
 * a command, which may not be idempotent, is withdrawn with
 * sp_test_guard_done(). sp_test_tmpdir() registers each directory it makes.
 * Exec closes the connection (close-on-exec), so register from the process
 * whose life bounds the resource. Not thread-safe.
 */
#ifndef SPACE_TEST_GUARD_H
#define SPACE_TEST_GUARD_H

#include <sys/types.h>

#include "space/error.h"

/* SIGKILLs pid once the process is gone; the pid is taken as a pidfd now, so
 * pid must be alive (or a zombie). Returns a registration id (> 0), or <0 with
 * *err set. */
int sp_test_guard_kill(pid_t pid, sp_error **err);

/* Runs argv (argv[0] searched on PATH) once the process is gone, with stdio on
 * /dev/null, our environment as it is now, in its own process group, for at
 * most 120 s. Returns a registration id, or <0 with *err set. */
int sp_test_guard_run(const char *const *argv, sp_error **err);

/* Removes directory path recursively once the process is gone, after
 * detaching the mounts under it. Returns a registration id, or <0. */
int sp_test_guard_remove(const char *path, sp_error **err);

/* Withdraws registration id (its cleanup is done); unknown ids are ignored. */
void sp_test_guard_done(int id);

#endif
