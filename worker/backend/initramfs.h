/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The initramfs of a VM sandbox: a newc ("070701") cpio archive the worker
 * writes from host files (the static space-agent as /init, kernel modules)
 * and from memory (the modules' load order), which the kernel unpacks into
 * its first root filesystem.
 *
 * The archive is reproducible: owner 0:0, mtime 0, inode numbers 1, 2, ...
 * in entry order, nlink 1 (2 for directories); each header with its name and
 * each file's data padded to 4 bytes; ended by TRAILER!!!. The kernel makes
 * no parent directories while unpacking, so each entry's parent must be
 * listed, as a directory, before it.
 */
#ifndef SPACE_WORKER_BACKEND_INITRAMFS_H
#define SPACE_WORKER_BACKEND_INITRAMFS_H

#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

typedef struct wk_cpio_entry {
        /* Inside the archive, without a leading slash: "init", "lib/space/modules/virtio.ko".
         * No empty, "." or ".." components. */
        const char *name;
        uint32_t mode; /* type and permissions: 0100755 a regular file, 040755 a directory */
        /* A regular file's contents: the host file src (followed if a
         * symlink; it must be a regular file), or without src the len bytes
         * at data. Directories have neither. */
        const char *src;
        const void *data;
        size_t len;
} wk_cpio_entry;

/* Writes the n entries and the trailer to path atomically (a temporary file
 * in the same directory, fsync, rename, fsync of the directory), mode 0644:
 * QEMU, which reads it, runs as another user. SP_E_INVALID for a bad name,
 * mode or entry, a duplicate, a parent not listed before its child, or a
 * file of 4 GiB or more (newc's size field); SP_E_CONFLICT for a source that
 * changed size while it was copied; the errno's code when a source cannot be
 * read or path cannot be written. Nothing is left behind on failure.
 * Thread-safe (no shared state). */
int wk_initramfs_write(const char *path, const wk_cpio_entry *entries, size_t n, sp_error **err);

#endif
