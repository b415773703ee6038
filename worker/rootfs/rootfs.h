/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Root filesystems on btrfs: the storage, subvolumes, snapshots and quotas.
 *
 * STORAGE. wk_storage_open() uses a directory that is on btrfs as it is.
 * Otherwise it backs the directory with a btrfs image file: created sparse and
 * formatted (mkfs.btrfs, the one external program — libbtrfsutil cannot make
 * filesystems) when missing, attached to a free loop device (loop-control,
 * autoclear) and mounted on the directory. A daemon that restarts finds its
 * image already mounted there (/proc/self/mountinfo) and reuses the mount.
 *
 * LAYOUT under the storage directory (names are validated path components,
 * see wk_rootfs_name_validate()):
 *
 *   templates/<name>/rootfs      the template: a subvolume, read-only once sealed
 *   templates/<name>/...         room for the template's metadata and images
 *   sandboxes/<id>/rootfs        the sandbox's root: a writable snapshot of its
 *                                template's rootfs, with the sandbox's disk quota
 *   sandboxes/<id>/...           room for other per-sandbox files (VM images)
 *   artifacts/<name>             the archive a template was uploaded as, kept
 *                                as long as the template (the node's business)
 *   artifacts/<name>.part        an upload still being received
 *   artifacts/<name>.unpack      scratch subvolume an OCI archive is unpacked into
 *
 * A template or sandbox is its directory; the rootfs subvolume sits one level
 * down so that metadata and disk images never show inside the sandbox.
 *
 * SUBVOLUMES go through libbtrfsutil only (never the `btrfs` command).
 * Deletion is recursive: subvolumes that a sandbox created inside its own
 * root do not block deleting it. Delete a sandbox only after its processes
 * are gone (the recursive walk resolves paths inside the sandbox's tree).
 *
 * QUOTAS. A sandbox's disk quota limits the *exclusive* bytes of its
 * snapshot's qgroup (max_exclusive): what the sandbox wrote or rewrote,
 * not the extents it still shares with its template, which would otherwise
 * count the whole template against every sandbox. A write past the limit
 * fails with EDQUOT inside the sandbox. Caveats: deleting a template while
 * sandboxes of it still exist turns the extents they shared into their
 * exclusive usage; and subvolumes a sandbox creates inside itself have
 * qgroups of their own that the limit does not cover (the jail's seccomp
 * filter is where subvolume creation can be refused). Usage figures are
 * those of the last committed transaction (wk_subvol_sync() commits one).
 *
 * Everything here needs root (CAP_SYS_ADMIN): mounting, loop devices, the
 * quota ioctls and the subvolume iterator behind recursive deletion.
 *
 * Thread-safety: no shared state; a wk_storage may be used from several
 * threads for distinct templates and sandboxes, but open/close are not
 * synchronised with its other users.
 */
#ifndef WK_ROOTFS_H
#define WK_ROOTFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

/* ---- names ------------------------------------------------------------- */

#define WK_ROOTFS_NAME_MAX 128

/* Checks a template name or sandbox id that becomes one path component:
 * 1..WK_ROOTFS_NAME_MAX bytes of [A-Za-z0-9._-], starting with a letter,
 * digit or '_' (names starting with '.' or '-' are refused), and no "..".
 * SP_E_INVALID naming `what` ("template name", "sandbox id") otherwise. */
int wk_rootfs_name_validate(const char *what, const char *name, sp_error **err);

/* ---- storage ------------------------------------------------------------ */

#define WK_STORAGE_IMAGE_MIN_SIZE (UINT64_C(128) << 20)
#define WK_STORAGE_IMAGE_MAX_SIZE (UINT64_C(64) << 40)
#define WK_STORAGE_MKFS_TIMEOUT_MS 120000
#define WK_STORAGE_DETACH_TIMEOUT_MS 10000

/* What wk_storage_open() found or did, for the daemon to log. */
typedef enum wk_storage_origin {
        WK_STORAGE_NATIVE = 1, /* the directory is on a btrfs the host provides */
        WK_STORAGE_IMAGE_CREATED, /* a new image was created, formatted and mounted */
        WK_STORAGE_IMAGE_MOUNTED, /* the existing image was mounted */
        WK_STORAGE_IMAGE_REUSED, /* the image was already mounted on the directory */
} wk_storage_origin;

/* An open storage. Fields are read-only for callers. */
typedef struct wk_storage {
        char *dir; /* canonical storage directory (the mount point for an image) */
        char *image; /* canonical image path; NULL for native storage */
        wk_storage_origin origin;
        int loop_nr; /* N of the loop device holding the image, -1 for native storage */
        char loop_dev[32]; /* "/dev/loopN", "" for native storage */
        uint64_t image_size; /* size of the image file in bytes, 0 for native storage */
} wk_storage;

/* Opens the storage at dir (absolute; created, mode 0700, when missing) and
 * makes sure templates/, sandboxes/ and artifacts/ exist in it.
 *   - dir on btrfs: used as it is (WK_STORAGE_NATIVE), or, when it is the
 *     mount of image_path's loop device, WK_STORAGE_IMAGE_REUSED;
 *   - otherwise image_path (absolute) is required: an existing image is
 *     checked to be btrfs (never reformatted) and mounted; a missing one is
 *     created sparse with image_size bytes (between WK_STORAGE_IMAGE_MIN_SIZE
 *     and _MAX_SIZE; ignored for an existing image) and formatted first. The
 *     mount is noatime (reading a snapshot must not rewrite shared metadata).
 * Errors: SP_E_INVALID for bad arguments, SP_E_UNSUPPORTED when dir is not on
 * btrfs and there is no image_path, SP_E_CONFLICT when the image is not btrfs
 * or is already attached or mounted elsewhere, SP_E_UNAVAILABLE when mkfs.btrfs
 * is missing, SP_E_IO for a failed system call. On failure nothing new is left
 * mounted or attached (a newly created image file is removed). *ret is owned
 * by the caller: wk_storage_close() or wk_storage_free(). */
int wk_storage_open(const char *dir, const char *image_path, uint64_t image_size, wk_storage **ret, sp_error **err);

/* Closes an image-backed storage for good: unmounts it and waits (bounded by
 * WK_STORAGE_DETACH_TIMEOUT_MS) until its loop device has detached. Native
 * storage is never unmounted. st is freed in every case (NULL allowed).
 * SP_E_CONFLICT when the filesystem is still busy (it then stays mounted). */
int wk_storage_close(wk_storage *st, sp_error **err);

/* Frees st and leaves the filesystem mounted (a daemon exiting while its
 * sandboxes keep running; the next wk_storage_open() reuses the mount).
 * Accepts NULL; returns NULL. */
wk_storage *wk_storage_free(wk_storage *st);
static inline void wk_storage_freep(wk_storage **st)
{
        *st = wk_storage_free(*st);
}
#define _cleanup_storage_ __attribute__((cleanup(wk_storage_freep)))

/* "native btrfs", "created image", "mounted image", "reused mounted image". */
const char *wk_storage_origin_name(wk_storage_origin origin);

/* Layout paths (malloc'd, caller frees); the name is validated (SP_E_INVALID). */
char *wk_storage_template_dir(const wk_storage *st, const char *name, sp_error **err);
char *wk_storage_template_rootfs(const wk_storage *st, const char *name, sp_error **err);
char *wk_storage_sandbox_dir(const wk_storage *st, const char *id, sp_error **err);
char *wk_storage_sandbox_rootfs(const wk_storage *st, const char *id, sp_error **err);

/* Creates templates/<name>/ and an empty, writable rootfs subvolume in it for
 * an importer to fill; *ret_rootfs (may be NULL) receives its path. Seal it
 * with wk_storage_template_seal() when filled. SP_E_CONFLICT if the template
 * exists. On failure nothing is left behind. */
int wk_storage_template_create(const wk_storage *st, const char *name, char **ret_rootfs, sp_error **err);

/* Makes the template's rootfs read-only; sandboxes are made from sealed templates. */
int wk_storage_template_seal(const wk_storage *st, const char *name, sp_error **err);

/* Deletes templates/<name> with everything in it (subvolumes recursively).
 * A missing template is not an error. See the quota caveat above. */
int wk_storage_template_delete(const wk_storage *st, const char *name, sp_error **err);

/* Creates sandboxes/<id>/rootfs as a writable snapshot of template's rootfs
 * (which must be sealed: SP_E_CONFLICT otherwise) and, when quota_bytes is not
 * 0, limits its exclusive usage to quota_bytes (quotas must be enabled:
 * wk_quota_enable()). With files_bytes, sandboxes/<id>/ itself is a
 * subvolume limited to that: what is kept there beside the rootfs (a VM's
 * disk and memory state) counts against the sandbox, not the pool.
 * *ret_rootfs (may be NULL) receives its path. SP_E_NOT_FOUND for a missing
 * template, SP_E_CONFLICT if the sandbox exists. On failure nothing is left
 * behind. */
int wk_storage_sandbox_create(const wk_storage *st, const char *template_name, const char *id, uint64_t quota_bytes,
                              uint64_t files_bytes, char **ret_rootfs, sp_error **err);

/* Creates sandboxes/<id>/rootfs as an empty subvolume (a sandbox moved here
 * from another worker, whose files are then unpacked into it); files_bytes as
 * above. SP_E_CONFLICT when the sandbox's directory exists. */
int wk_storage_sandbox_create_empty(const wk_storage *st, const char *id, uint64_t files_bytes, char **ret_rootfs,
                                    sp_error **err);

/* Deletes sandboxes/<id> with everything in it, including subvolumes the
 * sandbox nested inside its root. A missing sandbox is not an error. Call it
 * once the sandbox's processes are gone. */
int wk_storage_sandbox_delete(const wk_storage *st, const char *id, sp_error **err);

/* ---- VM disks ------------------------------------------------------------ */

#define WK_EXT4_MIN_SIZE (UINT64_C(16) << 20)

/* Makes image (created or replaced, mode 0600, sparse) an ext4 filesystem of
 * size bytes holding a copy of dir's tree, owners and modes kept (mkfs.ext4
 * -d, e2fsprogs), bounded by timeout_ms. SP_E_UNAVAILABLE without mkfs.ext4,
 * SP_E_INVALID for a size out of bounds, SP_E_IO when it fails (the image is
 * removed). */
int wk_rootfs_make_ext4(const char *dir, const char *image, uint64_t size, int64_t timeout_ms, sp_error **err);

#define WK_STORAGE_LIST_MAX 100000

/* The path of artifacts/<entry> (malloc'd, caller frees); entry is a
 * validated name (SP_E_INVALID), e.g. a template name with its suffix. */
char *wk_storage_artifact_path(const wk_storage *st, const char *entry, sp_error **err);

/* Removes artifacts/<entry>: a file, a directory or a subvolume with
 * everything in it (never following symlinks). A missing entry is not an
 * error. */
int wk_storage_artifact_remove(const wk_storage *st, const char *entry, sp_error **err);

/* The names in templates/ (templates = true) or sandboxes/, sorted, as a new
 * NULL-terminated vector (free with sp_strv_freep), for reconciliation and
 * orphan cleanup. Entries that are not valid names are skipped; more than
 * WK_STORAGE_LIST_MAX entries fail with SP_E_LIMIT. */
int wk_storage_list(const wk_storage *st, bool templates, char ***ret, sp_error **err);

/* ---- subvolumes (libbtrfsutil) ------------------------------------------ *
 * Paths are host paths on a btrfs filesystem. Errors map libbtrfsutil's:
 * SP_E_NOT_FOUND (missing), SP_E_CONFLICT (exists), SP_E_INVALID (not a
 * subvolume / not btrfs), SP_E_IO otherwise, with errno and the path.     */

/* Creates an empty subvolume at path (its parent must exist). */
int wk_subvol_create(const char *path, sp_error **err);

/* Snapshots the subvolume src at dst: read-only (templates, checkpoints) or
 * writable (sandboxes). Nested subvolumes of src are not included. */
int wk_subvol_snapshot(const char *src, const char *dst, bool read_only, sp_error **err);

int wk_subvol_set_read_only(const char *path, bool read_only, sp_error **err);
int wk_subvol_get_read_only(const char *path, bool *ret, sp_error **err);

/* Deletes the subvolume at path and every subvolume beneath it. */
int wk_subvol_delete(const char *path, sp_error **err);

/* *ret = whether path is a subvolume; false (not an error) when path is not
 * on btrfs. SP_E_NOT_FOUND when path does not exist. */
int wk_subvol_is(const char *path, bool *ret, sp_error **err);

/* The id of the subvolume containing path. */
int wk_subvol_id(const char *path, uint64_t *ret, sp_error **err);

#define WK_SUBVOL_LIST_MAX 65536

/* The subvolumes beneath the subvolume at path (not itself), as paths
 * relative to it, parents before children, in a new NULL-terminated vector
 * (free with sp_strv_freep). More than WK_SUBVOL_LIST_MAX: SP_E_LIMIT. */
int wk_subvol_list(const char *path, char ***ret, sp_error **err);

/* Commits the filesystem's current transaction (and so its qgroup numbers). */
int wk_subvol_sync(const char *path, sp_error **err);

/* ---- quotas (btrfs qgroups, ioctls of <linux/btrfs.h>) ------------------ */

#define WK_QUOTA_RESCAN_TIMEOUT_MS 600000

/* Enables quotas on the filesystem holding path (a no-op when they are on)
 * and waits for the initial rescan. */
int wk_quota_enable(const char *path, sp_error **err);

/* *ret = whether quotas are enabled on the filesystem holding path. */
int wk_quota_enabled(const char *path, bool *ret, sp_error **err);

/* Limits the exclusive bytes of the subvolume at path (its level-0 qgroup);
 * 0 removes the limit. SP_E_CONFLICT when quotas are not enabled. */
int wk_quota_set_limit(const char *path, uint64_t max_exclusive, sp_error **err);

typedef struct wk_quota_usage {
        uint64_t referenced; /* bytes reachable from the subvolume, shared or not */
        uint64_t exclusive; /* bytes only this subvolume references */
        uint64_t max_referenced; /* 0 = no limit */
        uint64_t max_exclusive; /* 0 = no limit */
} wk_quota_usage;

/* Reads the qgroup of the subvolume at path (as of the last commit).
 * SP_E_NOT_FOUND when it has no qgroup (quotas off). */
int wk_quota_get(const char *path, wk_quota_usage *ret, sp_error **err);

#endif
