/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small file helpers: bounded reads, atomic writes, directory creation.
 */
#ifndef SPACE_FILEIO_H
#define SPACE_FILEIO_H

#include <stddef.h>
#include <sys/types.h>

#include "space/buf.h"
#include "space/error.h"

/* Reads the whole file into out (appending), failing with SP_E_TOO_LARGE past
 * max bytes. */
int sp_file_read(const char *path, size_t max, sp_buf *out, sp_error **err);
/* Writes data to path atomically: a temporary file in the same directory,
 * fsync, rename, fsync of the directory. mode applies to the new file. */
int sp_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode, sp_error **err);
/* Replaces path with data as sp_file_write_atomic does (a reader sees the
 * old file or the new one, whole), without syncing: what it writes survives
 * the process's crash (the page cache holds it), not the host's. For state
 * written often on a hot path that a host's crash makes moot anyway. */
int sp_file_replace(const char *path, const void *data, size_t len, mode_t mode, sp_error **err);
/* mkdir -p with the given mode for the directories it creates. */
int sp_mkdir_p(const char *path, mode_t mode, sp_error **err);

#endif
