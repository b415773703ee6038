/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: Check helpers shared by every suite.
 *
 * Each test_*.c builds one executable whose main() calls sp_test_main() with
 * its suite. Tests run forked (one process per test case). A test that needs
 * something this host lacks (root, KVM, a binary) calls SP_TEST_REQUIRE_*():
 * the whole executable then exits with SP_TEST_SKIP (77), which CTest reports
 * as skipped, with the reason on stderr — never as passed.
 */
#ifndef SPACE_TEST_HARNESS_H
#define SPACE_TEST_HARNESS_H

#include <check.h>
#include <stdbool.h>

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
 * sp_test_tmpdir_remove(). Returns a malloc'd path; aborts on failure. */
char *sp_test_tmpdir(const char *tag);
void sp_test_tmpdir_remove(const char *path);

/* The source and build trees (from the environment CTest sets). */
const char *sp_test_source_dir(void);
const char *sp_test_binary_dir(void);

#endif
