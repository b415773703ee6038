/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: a temporary btrfs filesystem.
 *
 * sp_test_btrfs_create() makes a sparse image file in a fresh temporary
 * directory, formats it with mkfs.btrfs, attaches it to a free loop device
 * (loop-control, LOOP_CONFIGURE, autoclear) and mounts it at a temporary
 * mount point. sp_test_btrfs_destroy() unmounts it (lazily if it is busy),
 * waits for the loop device to detach and removes the files. Root only.
 *
 * Create it in a Check *unchecked* fixture so the teardown runs even when a
 * forked test crashes; call sp_test_btrfs_require() from main(). Not
 * thread-safe; one sp_test_btrfs per filesystem.
 */
#ifndef SPACE_TEST_BTRFS_H
#define SPACE_TEST_BTRFS_H

#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"

#define SP_TEST_BTRFS_DEFAULT_SIZE (UINT64_C(256) << 20)
#define SP_TEST_BTRFS_MIN_SIZE (UINT64_C(128) << 20)
#define SP_TEST_BTRFS_MAX_SIZE (UINT64_C(64) << 30)

typedef struct sp_test_btrfs {
        char *dir; /* temporary directory holding the image and the mount point (owned) */
        char *image; /* dir/image */
        char *mnt; /* dir/mnt: where the filesystem is mounted */
        char loopdev[64]; /* the loop device node, e.g. /dev/loop3 */
        int loop_nr; /* N of /dev/loopN, -1 when none */
        bool mounted;
} sp_test_btrfs;

/* Skips the test executable (exit 77, with the reason) unless we are root,
 * mkfs.btrfs is on PATH, /dev/loop-control exists and the kernel knows btrfs.
 * Call from main() before sp_test_main(). */
void sp_test_btrfs_require(void);

/* Creates and mounts a filesystem of size bytes (0 = the default, 256 MiB;
 * between SP_TEST_BTRFS_MIN_SIZE and SP_TEST_BTRFS_MAX_SIZE; the image is
 * sparse) into *fs, which it zeroes first. On failure nothing is left behind. */
int sp_test_btrfs_create(uint64_t size, sp_test_btrfs *fs, sp_error **err);

/* Unmounts and waits (bounded) for the loop device to detach — or, when the
 * filesystem is busy, detaches it lazily and leaves the loop device to
 * autoclear once its last user is gone — then removes the directory and
 * frees *fs. Safe on a zeroed or already
 * destroyed struct. Reports problems on stderr. */
void sp_test_btrfs_destroy(sp_test_btrfs *fs);

/* True if loop device nr is attached to the file at path. */
bool sp_test_loop_attached_to(int nr, const char *path);

#endif
