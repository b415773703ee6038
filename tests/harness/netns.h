/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: temporary network namespaces.
 *
 * sp_test_netns_create() makes a named network namespace the way
 * `ip netns add` does — a child unshares CLONE_NEWNET and bind-mounts its
 * /proc/self/ns/net onto /run/netns/<name> — so `ip netns` sees it. Names are
 * unique and start with "sptest-". Its loopback interface is up. Functions or
 * programs run inside it in forked children; sp_test_netns_veth() joins two
 * namespaces with a veth pair addressed from 10.213.0.0/16, which exists only
 * inside the test's namespaces (no traffic leaves them).
 * sp_test_netns_destroy() unmounts and removes the name; the kernel frees the
 * namespace, and any veth in it, once nothing uses it.
 *
 * Root only: call sp_test_netns_require() from main(). Create namespaces in a
 * Check *unchecked* fixture so the teardown runs even when a forked test
 * crashes. Not thread-safe.
 */
#ifndef SPACE_TEST_NETNS_H
#define SPACE_TEST_NETNS_H

#include <stdint.h>

#include "space/error.h"

#define SP_TEST_NETNS_DIR "/run/netns"
#define SP_TEST_NETNS_PREFIX "sptest-"

typedef struct sp_test_netns {
        char name[64]; /* "sptest-<pid>-<n>" */
        char path[128]; /* SP_TEST_NETNS_DIR "/" name */
        int fd; /* open on the namespace (O_CLOEXEC); -1 when none */
} sp_test_netns;

/* A veth pair between two namespaces: name_a with addr_a lives in the first,
 * name_b with addr_b in the second; both are up, in one /30. */
typedef struct sp_test_veth {
        char name_a[16];
        char name_b[16];
        char addr_a[16];
        char addr_b[16];
        int prefix_len;
} sp_test_veth;

/* Skips the test executable (exit 77, with the reason) unless we are root.
 * Call from main() before sp_test_main(). */
void sp_test_netns_require(void);

/* Creates a namespace into *ns (which it overwrites). On failure nothing is
 * left behind. */
int sp_test_netns_create(sp_test_netns *ns, sp_error **err);

/* Unmounts and removes the name, closes the descriptor. Safe on a destroyed
 * struct (fd -1, empty name); a zeroed struct must not be passed unless its
 * fd was set to -1. Reports problems on stderr. */
void sp_test_netns_destroy(sp_test_netns *ns);

/* Runs fn(arg) in a forked child that has entered ns (and dies with us).
 * Returns fn's result as an exit code (0..255), or <0 when the child could
 * not run, was killed by a signal or overran timeout_ms (it is then killed).
 * fn must not return to Check: it runs in the child only. */
int sp_test_netns_run(const sp_test_netns *ns, int (*fn)(void *arg), void *arg, int64_t timeout_ms, sp_error **err);

/* Runs argv inside ns, with its own /sys as `ip netns exec` gives it, its
 * stdout and stderr appended to log_path (NULL: ours), and returns its exit
 * code (0..255), or <0 as sp_test_netns_run(). */
int sp_test_netns_exec(const sp_test_netns *ns, const char *const *argv, const char *log_path, int64_t timeout_ms,
                       sp_error **err);

/* Creates a veth pair between a and b with fresh names and addresses (see
 * sp_test_veth). It goes away with either namespace. */
int sp_test_netns_veth(const sp_test_netns *a, const sp_test_netns *b, sp_test_veth *ret, sp_error **err);

#endif
