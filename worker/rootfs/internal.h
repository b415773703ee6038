/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the rootfs files (and their tests). Not part of the
 * worker's API.
 */
#ifndef WK_ROOTFS_INTERNAL_H
#define WK_ROOTFS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <btrfsutil.h>

#include "space/error.h"

/* Sets *err from a failed libbtrfsutil call (errno still that of the
 * failure): the code as described in rootfs.h, the message
 * "<what> <path>: <libbtrfsutil's text>: <strerror>". Returns -code. */
int wk__btrfs_error(sp_error **err, enum btrfs_util_error e, const char *what, const char *path);

/* Whether fd is on btrfs (statfs magic). */
bool wk__fd_is_btrfs(int fd);

/* Whether the file at fd starts with a btrfs superblock (its magic at the
 * primary superblock's offset). */
bool wk__image_is_btrfs(int fd);

/* Formats the file at image with mkfs.btrfs (found on PATH or in /usr/sbin,
 * /sbin; run by fork/execve with a minimal environment, never a shell),
 * bounded by timeout_ms. SP_E_UNAVAILABLE when there is no mkfs.btrfs,
 * SP_E_TIMEOUT, or SP_E_IO quoting the end of its output. */
int wk__mkfs_btrfs(const char *image, int64_t timeout_ms, sp_error **err);

/* Attaches image_fd (whose file is image_path, for the loop device's name)
 * to a free loop device with LO_FLAGS_AUTOCLEAR: LOOP_CONFIGURE, or
 * LOOP_SET_FD + LOOP_SET_STATUS64 on kernels before 5.8. Returns the open
 * loop device (autoclear detaches it after the last close once the mount
 * holds it) and its number in *ret_nr, or <0. */
int wk__loop_attach(int image_fd, const char *image_path, int *ret_nr, sp_error **err);

/* The loop device backed by the file at path (canonical), or -1 when none
 * (the backing_file of each loop device in sysfs). */
int wk__loop_find(const char *path);

/* Whether loop device nr is attached to the file at path. */
bool wk__loop_attached_to(int nr, const char *path);

/* Removes name in parent_fd: a subvolume (recursively, through libbtrfsutil), a
 * directory (its contents first, never following symlinks, at most max_depth
 * levels), or any other file. A missing name is not an error. */
int wk__remove_tree(int parent_fd, const char *name, unsigned max_depth, sp_error **err);

#endif
