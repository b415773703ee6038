/* SPDX-License-Identifier: Apache-2.0 */
/*
 * /proc/self/mountinfo, parsed.
 *
 * The storage layer finds the loop-mounted image on its directory with it
 * (so that a restarted daemon reuses the mount instead of mounting twice) and
 * the cgroup layer finds the cgroup v1 controllers' mount points. The parser
 * takes untrusted-looking text (a fuzz target drives it): every line and the
 * whole file are bounded, malformed lines are errors, octal escapes (\040 for
 * a space ...) in paths are decoded.
 *
 * Thread-safety: no shared state.
 */
#ifndef WK_ROOTFS_MOUNTINFO_H
#define WK_ROOTFS_MOUNTINFO_H

#include <stdbool.h>
#include <stddef.h>

#include "space/error.h"

#define WK_MOUNTINFO_MAX_BYTES (UINT64_C(64) << 20) /* whole file */
#define WK_MOUNTINFO_MAX_LINE 16384 /* one mount */

/* One mount. Strings are owned by the entry (wk_mountinfo_entry_clear). */
typedef struct wk_mountinfo_entry {
        int mount_id;
        int parent_id;
        unsigned major;
        unsigned minor;
        char *root; /* the mounted directory inside its filesystem, decoded */
        char *mount_point; /* decoded */
        char *mount_options; /* per-mount options, e.g. "rw,noatime" */
        char *fstype; /* "btrfs", "cgroup", "cgroup2" ... (with a subtype: "fuse.sshfs") */
        char *source; /* decoded, e.g. "/dev/loop3"; "none" when the kernel has none */
        char *super_options; /* per-superblock options, e.g. "rw,memory" */
} wk_mountinfo_entry;

/* Parses one line (len bytes, a trailing newline allowed) into *ret, which it
 * fills only on success. SP_E_INVALID for a malformed line. */
int wk_mountinfo_parse_line(const char *line, size_t len, wk_mountinfo_entry *ret, sp_error **err);

/* Frees the entry's strings and zeroes it; accepts a zeroed entry. */
void wk_mountinfo_entry_clear(wk_mountinfo_entry *e);

/* Called for each mount in file order (lower mounts first). Return 0 to go
 * on, >0 to stop (wk_mountinfo_foreach returns that value), <0 to fail (with
 * *err set by the callback). The entry is only valid during the call. */
typedef int (*wk_mountinfo_fn)(const wk_mountinfo_entry *e, void *userdata, sp_error **err);

/* Parses the text of a whole mountinfo file (len bytes) and calls fn for each
 * line. Returns 0 when fn never stopped, fn's positive value when it did, <0
 * on a malformed line (the message names its number) or a callback error. */
int wk_mountinfo_parse(const char *text, size_t len, wk_mountinfo_fn fn, void *userdata, sp_error **err);

/* wk_mountinfo_parse() over the file at path (NULL: /proc/self/mountinfo). */
int wk_mountinfo_foreach(const char *path, wk_mountinfo_fn fn, void *userdata, sp_error **err);

/* Finds the topmost mount on mount_point (an exact, canonical path) in
 * /proc/self/mountinfo. Returns 1 and fills *ret (to clear by the caller),
 * 0 when nothing is mounted there, <0 on error. */
int wk_mountinfo_find(const char *mount_point, wk_mountinfo_entry *ret, sp_error **err);

/* Whether the comma-separated option list opts contains exactly opt. */
bool wk_mountinfo_has_option(const char *opts, const char *opt);

#endif
