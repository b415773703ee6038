/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: Check helpers shared by every suite.
 *
 * Each test_*.c builds one executable whose main() calls sp_test_main() with
 * its suite. Tests run forked (one process per test case). A test that needs
 * something this host lacks (root, KVM, a binary) calls SP_TEST_REQUIRE_*():
 * the whole executable then exits with SP_TEST_SKIP (77), which CTest reports
 * as skipped, with the reason on stderr — never as passed.
 *
 * Resources that must be cleaned up even when a forked test crashes (a
 * server, a mount, a namespace) belong in Check *unchecked* fixtures, which
 * run in the runner process: a failed assertion ends only the test's process.
 * The other harness headers:
 *   proc.h      spawning, bounded waits and stops, process lookups
 *   port.h      free loopback ports outside the ephemeral range, reserved per process
 *   pg.h        a throw-away PostgreSQL server
 *   btrfs.h     a temporary btrfs on a loop device
 *   netns.h     temporary network namespaces and veth pairs
 *   launcher.h  our daemons (and clusters of them) for end-to-end tests
 *   leak.h      snapshots of mounts, namespaces, loop devices and processes
 *   guard.h     cleanup that runs when the test process dies without its teardown
 */
#ifndef SPACE_TEST_HARNESS_H
#define SPACE_TEST_HARNESS_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>

#include "space/error.h"

#define SP_TEST_SKIP 77

/* Runs the suite (CK_FORK), prints Check's summary, returns the exit code. */
int sp_test_main(Suite *s);

/* Exits the process with SP_TEST_SKIP after printing "SKIP: <reason>". */
__attribute__((noreturn, format(printf, 1, 2))) void sp_test_skip(const char *fmt, ...);

bool sp_test_is_root(void);
/* Skips unless running as root. Call from main() before sp_test_main(). */
void sp_test_require_root(const char *why);
/* Skips unless the named program is on PATH. */
void sp_test_require_program(const char *prog, const char *why);

/* A fresh temporary directory under $TMPDIR (or /tmp), removed recursively by
 * sp_test_tmpdir_remove(), or, should the process die first (a failed or
 * timed-out test), by its guard once it and its forks are gone (guard.h).
 * Returns a malloc'd path; aborts on failure. */
char *sp_test_tmpdir(const char *tag);
void sp_test_tmpdir_remove(const char *path);

/* Fails the current test (a Check assertion, reported at the caller's file
 * and line) when r < 0, with the message of *err; frees *err either way.
 * For the harness functions that return <0 and set an sp_error:
 *   sp_error *err = NULL;
 *   sp_test_ok(sp_test_pg_start(&pg, &err), &err);
 * Also usable in an unchecked fixture, where Check reports the failure as the
 * setup's and skips the TCase's tests. */
#define sp_test_ok(r, errp) sp_test_ok_((r), (errp), #r, __FILE__, __LINE__)
void sp_test_ok_(long r, sp_error **err, const char *expr, const char *file, int line);

/* The last max_lines lines of a text file (at most the last 64 KiB of it), as
 * a malloc'd string the caller frees; "" if the file is missing or empty. */
char *sp_test_file_tail(const char *path, size_t max_lines);

/* Prints "==> <title> (last N lines of <path>)" and the tail of the file to
 * stderr, for diagnosing a failed test. */
void sp_test_dump_file_tail(const char *title, const char *path, size_t max_lines);

/* The source and build trees (from the environment CTest sets). */
const char *sp_test_source_dir(void);
const char *sp_test_binary_dir(void);

#endif
