/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The file-level pieces of moving a suspended sandbox between workers
 * (proto/spec/worker-rpc.md: ExportSandbox, ReadSandboxArtifact,
 * ImportSandbox, ArtifactFile): reading a file as its blocks with data,
 * the digest over them, and packing and unpacking a jail's root filesystem.
 *
 * A file travels as its 64 KiB blocks (aligned at multiples of
 * WK_ARTIFACT_BLOCK, the last one possibly short) that hold at least one
 * non-zero byte; holes and all-zero blocks are left out, and the receiver
 * recreates them as holes. The digest covers exactly what travels, so that
 * a sparse copy and a dense one of the same bytes have the same digest:
 *
 *   sha256( for each block with data, in increasing order:
 *               its offset (8 bytes big-endian) || its bytes
 *           || the file's size (8 bytes big-endian) )
 *
 * written "sha256:<64 hex>".
 *
 * The functions share no state: distinct calls may run in parallel on
 * distinct files and handles. They block on the filesystem: the worker runs
 * them on job threads, never on its loop.
 */
#ifndef WK_ARTIFACT_FILES_H
#define WK_ARTIFACT_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "space/error.h"
#include "space/worker_rpc.h"

#define WK_ARTIFACT_BLOCK 65536

/* How many entries wk_artifact_unpack_tree() accepts in one archive, and
 * the memory its extractor may take for the directories' paths it keeps
 * until the end (a root filesystem has hundreds of thousands). */
#define WK_ARTIFACT_UNPACK_MAX_ENTRIES UINT64_C(4000000)
#define WK_ARTIFACT_UNPACK_MAX_MEMORY ((size_t)256 << 20)

/* ---- blocks and the digest ---------------------------------------------- */

/* Finds the first block at or after from (a multiple of WK_ARTIFACT_BLOCK,
 * else SP_E_INVALID) that holds a non-zero byte, among the first size bytes
 * of fd (size: the file's size as the caller knows it, from a stat at the
 * start; nothing past it is read). Holes are skipped without reading them
 * (lseek SEEK_DATA; every block is read where the filesystem does not
 * support it, EINVAL), and blocks read as all zeros are skipped too. The
 * block found is read into buf (room for WK_ARTIFACT_BLOCK bytes) with
 * pread. Returns 1 with *ret_off and *ret_len (WK_ARTIFACT_BLOCK, or less
 * for the block that ends at size), 0 when no block with data is left, < 0
 * on failure (SP_E_IO naming the errno; SP_E_IO as well when the file ends
 * before size). The outputs are set only when it returns 1. Moves fd's file
 * offset. */
int wk_artifact_next_block(int fd, uint64_t from, uint64_t size, uint64_t *ret_off, void *buf, size_t *ret_len,
                           sp_error **err);

/* The digest above, computed as blocks come: a sender hashes what it reads,
 * a receiver what it is sent, in one pass each. */
typedef struct wk_artifact_hash wk_artifact_hash;

/* A new digest with no block yet; free with wk_artifact_hash_free(). Fails
 * with SP_E_INTERNAL when sha256 is unavailable, SP_E_LIMIT out of memory. */
int wk_artifact_hash_new(wk_artifact_hash **ret, sp_error **err);
/* Adds the n bytes at p, the block of the file at off: off a multiple of
 * WK_ARTIFACT_BLOCK, n at most WK_ARTIFACT_BLOCK, and off past the previous
 * block's (blocks come in increasing order); SP_E_INVALID otherwise, and
 * after wk_artifact_hash_finish(). A block of zeros only (or n == 0) is
 * accepted and ignored, so that sender and receiver agree whatever their
 * holes: a receiver may add every block it is given. */
int wk_artifact_hash_add(wk_artifact_hash *h, uint64_t off, const void *p, size_t n, sp_error **err);
/* Adds the file's size and writes "sha256:<hex>" into out. SP_E_INVALID
 * when a block with data reached past size, or when called twice; after it
 * the digest takes no more blocks. */
int wk_artifact_hash_finish(wk_artifact_hash *h, uint64_t size, char out[PR_WK_DIGEST_MAX], sp_error **err);
/* Frees h (NULL allowed); returns NULL. */
wk_artifact_hash *wk_artifact_hash_free(wk_artifact_hash *h);
static inline void wk_artifact_hash_freep(wk_artifact_hash **h)
{
        *h = wk_artifact_hash_free(*h);
}
#define _cleanup_artifact_hash_ __attribute__((cleanup(wk_artifact_hash_freep)))

/* The digest of the first size bytes of fd ("sha256:<hex>" into out), read
 * with wk_artifact_next_block() (and failing as it does). */
int wk_artifact_digest_fd(int fd, uint64_t size, char out[PR_WK_DIGEST_MAX], sp_error **err);

/* ---- a jail's root filesystem as an archive ------------------------------ */

/* Writes a pax tar archive of the tree under the directory dir to out_fd
 * (from its current offset, with write(); out_fd is not closed) and sets
 * *ret_bytes to the archive's size. Entries are named relative to dir:
 * "." for dir itself (its mode, owner and times travel too), "./<path>"
 * for the rest; names and link targets are stored as the bytes they are
 * (pax hdrcharset BINARY), whatever the locale.
 *
 * Kept: regular files (sparse ones with their holes), directories,
 * symlinks (never followed), hard links (within the tree) and fifos; numeric owners only (no user or group names are looked up or
 * stored), modes with set-id bits, modification and access times, and
 * extended attributes (user.*, security.* including security.capability,
 * and trusted.* as root), POSIX ACLs and file flags as libarchive reads them.
 * Left out: sockets (meaningless without their process), device nodes
 * (nothing on the node's storage honours them: it is mounted nodev, and a
 * jail's /dev is mounted at its start; the extractor would refuse them),
 * and the contents
 * of every other filesystem mounted below dir — which includes btrfs
 * subvolumes a sandbox created inside its root: their directories are
 * archived, empty. No external program is run.
 *
 * The tree must not change while it is read (the sandbox is suspended).
 * libarchive's disk reader moves the working directory through the tree
 * (fchdir) to read the attributes of symlinks, fifos and devices, so the
 * calling thread is first given a working directory of its own
 * (unshare(CLONE_FS)): no other thread sees it move. Errors: SP_E_INVALID
 * when dir is not a directory, SP_E_IO for reading the tree or writing
 * out_fd (naming entries relative to dir). */
int wk_artifact_pack_tree(const char *dir, int out_fd, uint64_t *ret_bytes, sp_error **err);

/* Bounds of a pack of a tree root inside a sandbox controls (0: none). */
typedef struct wk_artifact_pack_limits {
        /* What the files give the writer, holes included: the writer must be
         * fed a hole's zeros even where the archive leaves them out, so a
         * file of one byte at offset 2^62 would hold the thread for ever. */
        uint64_t max_fed;
        uint64_t max_archive_bytes; /* the archive's size (e.g. the pool's room) */
        int64_t deadline_us; /* CLOCK_MONOTONIC (sp_now_mono_us) */
} wk_artifact_pack_limits;

/* wk_artifact_pack_tree() within lim (NULL: none): past max_fed or
 * max_archive_bytes SP_E_TOO_LARGE, past the deadline SP_E_TIMEOUT. */
int wk_artifact_pack_tree_bounded(const char *dir, int out_fd, const wk_artifact_pack_limits *lim, uint64_t *ret_bytes,
                                  sp_error **err);

/* Extracts an archive made by wk_artifact_pack_tree(), read from tar_fd's
 * current offset to its end (tar_fd is not closed), into dest_dir, an
 * existing empty directory, with the template importers' hardened extractor
 * (wk_template_import_tar_fd(): no entry is written outside dest_dir or
 * through a symlink). Limits: max_bytes on what the tree costs on disk by
 * template.h's rule (0: WK_TEMPLATE_DEFAULT_MAX_BYTES), at most
 * WK_ARTIFACT_UNPACK_MAX_ENTRIES entries and WK_ARTIFACT_UNPACK_MAX_MEMORY,
 * the extractor's other defaults (an hour, 4096-byte paths, 256 levels).
 *
 * Restored, when running as root: numeric owners, modes with set-id bits,
 * modification and access times, symlinks, hard links, fifos, sparse files
 * (written block by block, holes left as holes), and the extended
 * attributes user.* and security.capability of files and directories.
 * Not restored: other extended attributes (security.selinux, trusted.*),
 * POSIX ACLs and file flags. Not run as root, files belong to the caller and
 * lose their set-id bits. An archive holding a device node is refused
 * (SP_E_UNSUPPORTED: the extractor makes none; the packer leaves them out).
 * Other errors as wk_template_import_tar_fd()'s
 * (SP_E_INVALID, SP_E_TOO_LARGE, SP_E_LIMIT, SP_E_IO, SP_E_TIMEOUT);
 * SP_E_CONFLICT when dest_dir is not empty. On failure dest_dir is left
 * partly filled: the caller removes it. */
int wk_artifact_unpack_tree(int tar_fd, const char *dest_dir, uint64_t max_bytes, sp_error **err);

#endif
