/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: "nothing left behind" checks.
 *
 * A snapshot records what a test could leak on the host: the mounts of our
 * mount namespace (/proc/self/mountinfo), the named network namespaces
 * (/run/netns), the attached loop devices and their backing files, and our
 * processes — every descendant of the calling process and, when the caller
 * leads its process group (as a forked Check test does), every member of
 * that group (zombies only while one of ours has yet to reap them) — except
 * the caller itself, and the network interfaces (/sys/class/net). Comparing a snapshot taken before
 * with one taken after gives a readable list of what appeared and what went.
 *
 *   sp_test_snapshot before, after;
 *   sp_test_snapshot_take(&before, &err);
 *   ... start and stop things ...
 *   sp_test_snapshot_take(&after, &err);
 *   char *leaks = sp_test_snapshot_diff(&before, &after, tmpdir);  // NULL: nothing new, nothing gone
 *
 * The host is shared with whatever else runs on it, so compare with a filter
 * that names what the test owns (its temporary directory, a name prefix), or
 * in a mount namespace of its own. Snapshots are plain data: not thread-safe,
 * but may be taken in one process and compared in a forked child.
 */
#ifndef SPACE_TEST_LEAK_H
#define SPACE_TEST_LEAK_H

#include <stddef.h>

#include "space/error.h"

/* Entries are sorted, malloc'd strings:
 *   mounts  "<mount point> <fstype> <source>"
 *   netns   "<name>"
 *   loops   "loop<N> <backing file>"
 *   procs   "<pid> <comm>"
 *   links   "<interface name>" (of the caller's network namespace) */
typedef struct sp_test_snapshot {
        char **mounts;
        size_t n_mounts;
        char **netns;
        size_t n_netns;
        char **loops;
        size_t n_loops;
        char **procs;
        size_t n_procs;
        char **links;
        size_t n_links;
} sp_test_snapshot;

/* Fills *s (which it overwrites). Each set is bounded (SP_TEST_SNAPSHOT_MAX
 * entries); failing to read /proc/self/mountinfo or /proc is an error, a
 * missing /run/netns is an empty set. */
#define SP_TEST_SNAPSHOT_MAX 100000
int sp_test_snapshot_take(sp_test_snapshot *s, sp_error **err);

/* Describes what differs between before and after, one line per entry:
 *   "+ mount /tmp/x/mnt tmpfs tmpfs"   (appeared)
 *   "- netns sptest-12-0"              (went away)
 * Only entries containing filter count (NULL: all). Returns a malloc'd
 * report, or NULL when nothing differs. */
char *sp_test_snapshot_diff(const sp_test_snapshot *before, const sp_test_snapshot *after, const char *filter);

/* Frees the entries and zeroes *s; safe on a zeroed struct. */
void sp_test_snapshot_free(sp_test_snapshot *s);

#endif
