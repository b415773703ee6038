/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A jail's checkpoint and restore with CRIU (docs/backends.md, "What a jail
 * keeps across a suspend"): the agent as PID 1 and everything under it, with
 * their memory, open files, sockets and namespaces, into a directory of
 * images beside the sandbox's root filesystem, and back.
 *
 * What the tree holds of the host's is named to CRIU as external and given
 * again at restore: the network namespace (the host's user namespace owns
 * it: a new one with the sandbox's link is made for the restore), the mounts
 * the jail binds from the host (device nodes, the /proc masks, the agent
 * binary), /dev and /sys (neither can be made from inside the sandbox's user
 * namespace: the worker mounts them for the restore), and the files the
 * agent was started with (its binary, /dev/null, its log FIFO). The agent's
 * listening socket is made again in the new network namespace. What they
 * were is written beside the images (space-checkpoint.json).
 *
 * CRIU is the one scripts/criu builds (with the project's patches: a jail's
 * network namespace is another user namespace's). Blocking (seconds): the
 * node calls it on a job thread.
 */
#ifndef WK_BACKEND_JAIL_CRIU_H
#define WK_BACKEND_JAIL_CRIU_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/error.h"

/* Where a restore stages the mounts CRIU binds from the host (one directory
 * per restore, removed after it). */
#define WK_CRIU_STAGING "/run/space-criu"

/* The checkpoint's file beside the images that says what was external. */
#define WK_CRIU_META "space-checkpoint.json"

typedef struct wk_criu_dump {
        const char *criu; /* the binary */
        const char *dir; /* the images' directory: made here (what was there is removed) */
        pid_t pid; /* the tree's root: the agent */
        uid_t uid_base; /* its user namespace maps 0 to this host id (recorded: a restore may map elsewhere) */
        const char *cgroup; /* its cgroup below each hierarchy's root ("/space/<id>"; recorded likewise) */
        const char *agent_path; /* host path of the agent binary */
        const char *log_fifo; /* host path of the agent's log FIFO */
        const char *log; /* CRIU's own log (kept: it says why a checkpoint failed) */
} wk_criu_dump;

/* Checkpoints the tree and ends it (CRIU kills it once its images are
 * written). On failure the tree runs on (CRIU lets it go), the directory is
 * removed, and err says why in CRIU's words (its last error line). */
int wk_criu_dump_tree(const wk_criu_dump *d, sp_error **err);

typedef struct wk_criu_restore {
        const char *criu;
        const char *dir; /* the images */
        const char *rootfs; /* host path of the sandbox's root filesystem */
        const char *runtime_dir; /* the box's: mount points made in it, the pid file */
        const char *agent_path;
        const char *log_fifo; /* made by the caller, read end open */
        int log_wfd; /* the agent's stdout/stderr */
        const char *agent_socket; /* made again here, in the new network namespace */
        uid_t uid_base; /* may differ from the dump's (another slot, another worker): its map is rewritten */
        uint32_t uid_count;
        /* The tree's cgroup below each hierarchy's root ("/space/<id>"), made by
         * the caller; where the dump's was another (another worker's parent),
         * the hierarchies it was in are rooted here instead. */
        const char *cgroup;
        /* Gives the new network namespace (netns_fd, before the restore) its
         * link, as a jail's start does (may be NULL). */
        int (*attach_net)(int netns_fd, void *ud, sp_error **err);
        void *ud;
        const char *log; /* CRIU's own log */
} wk_criu_restore;

/* Restores the tree in new namespaces (its cgroup: the one the dump
 * recorded, which the caller has made) and returns its root's host pid.
 * Nothing the restore mounted on the host is left; on failure nothing of the
 * tree runs. */
int wk_criu_restore_tree(const wk_criu_restore *r, pid_t *ret_pid, sp_error **err);

/* A CRIU userns image (in, n bytes: magic, then size-prefixed userns_entry
 * messages) with every extent whose host side starts in [from, from+count)
 * moved by to - from, into out (appended). The image names the host ids of
 * the tree's user namespace: a restore on another slot maps it to its own.
 * SP_E_INVALID for anything but a well-formed image. */
struct sp_buf;
int wk_criu_userns_remap(const uint8_t *in, size_t n, uint32_t from, uint32_t to, uint32_t count, struct sp_buf *out,
                         sp_error **err);

/* Checks a CRIU mountpoints image (the bytes of mountpoints-N.img): every mount is one a jail makes
 * (its mount point and, where the jail mounts a filesystem there, its type), each mount point once,
 * at most 64. A restore makes these mounts as host root, so a checkpoint (from this worker or
 * another) with any other is refused. SP_E_INVALID naming the mount, or for a malformed image. */
int wk_criu_mounts_check(const uint8_t *in, size_t n, sp_error **err);

/* Removes a checkpoint's images (none is no error). */
void wk_criu_images_remove(const char *dir);

/* Whether the CRIU binary at path has this project's patches (scripts/criu.d: a restore needs
 * --enter-userns, 0005): its text names the option. A stock CRIU would dump a jail and fail
 * every restore of it. */
bool wk_criu_has_patches(const char *path);

/* The images' size in bytes (0 when there are none). */
uint64_t wk_criu_images_bytes(const char *dir);

#endif
