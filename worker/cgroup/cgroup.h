/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cgroups for sandboxes: one API over cgroup v1 and v2.
 *
 * wk_cgroup_host_detect() looks at the host once: /sys/fs/cgroup mounted as
 * cgroup2 means the unified hierarchy (v2); otherwise each v1 controller's
 * mount point is taken from /proc/self/mountinfo (hybrid hosts, whose
 * controllers all sit on v1, are treated as v1). A sandbox's group is
 * <parent>/<name> in every hierarchy the worker uses — v1: cpu, cpuacct,
 * memory, pids, freezer, blkio and devices where mounted (comounted
 * controllers share one directory); v2: the one directory, with cpu, memory,
 * pids and io enabled in the subtree_control of every level above it.
 *
 * Limits: CPU as a CFS quota over a 100 ms period (v1 cpu.cfs_quota_us, v2
 * cpu.max) plus a proportional weight; memory with swap off (v1
 * memory.limit_in_bytes and memory.memsw.limit_in_bytes, v2 memory.max and
 * memory.swap.max = 0, where the host accounts swap); a pids limit; an io
 * weight (best effort: set where the host's io scheduler exposes one) and
 * bytes-per-second limits on given devices. A limit whose controller the host
 * lacks fails with SP_E_UNSUPPORTED rather than silently not applying.
 *
 * Freezing (pause): v1 freezer.state, v2 cgroup.freeze, both waited for until
 * the kernel reports the group frozen. Killing: v2 cgroup.kill where the
 * kernel has it; otherwise the group is frozen (so nothing forks meanwhile),
 * every process in it and in its descendants is sent SIGKILL, the group is
 * thawed so the signals land, and this repeats until the group is empty.
 *
 * The sandbox must not raise its own limits: the jail puts the sandbox in
 * a cgroup namespace rooted at its group and mounts the cgroup filesystem
 * read-only inside, and the group's files belong to host root; nothing in
 * this module is needed for that. On v2 hosts where systemd owns the tree,
 * give the worker a delegated subtree and a parent below it that holds no
 * processes (cgroup v2 forbids enabling controllers where processes live).
 *
 * Every wait is bounded (the WK_CGROUP_*_TIMEOUT_MS below). Everything needs
 * root. Thread-safety: host and group handles are immutable after creation
 * and may be shared between threads; operations on one group from several
 * threads at once (say a freeze and a kill) are not serialised here.
 */
#ifndef WK_CGROUP_H
#define WK_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/error.h"

#define WK_CGROUP_NAME_MAX 128 /* one path component */
#define WK_CGROUP_PARENT_MAX_DEPTH 8 /* components in a parent path */
#define WK_CGROUP_FREEZE_TIMEOUT_MS 10000
#define WK_CGROUP_KILL_TIMEOUT_MS 10000
#define WK_CGROUP_REMOVE_TIMEOUT_MS 2000
#define WK_CGROUP_LIST_MAX 100000

typedef enum wk_cgroup_version {
        WK_CGROUP_V1 = 1,
        WK_CGROUP_V2 = 2,
} wk_cgroup_version;

/* Controllers, as a bit mask. WK_CGROUP_IO is blkio on v1 and io on v2; v2
 * accounts CPU time in its core, without cpuacct. */
#define WK_CGROUP_CPU (1u << 0)
#define WK_CGROUP_CPUACCT (1u << 1)
#define WK_CGROUP_MEMORY (1u << 2)
#define WK_CGROUP_PIDS (1u << 3)
#define WK_CGROUP_FREEZER (1u << 4)
#define WK_CGROUP_IO (1u << 5)
#define WK_CGROUP_DEVICES (1u << 6)

/* ---- the host ----------------------------------------------------------- */

typedef struct wk_cgroup_host wk_cgroup_host;

/* Detects the host's cgroup layout (see above). SP_E_UNSUPPORTED when there
 * is neither a cgroup2 /sys/fs/cgroup nor any v1 controller we use. *ret is
 * owned by the caller (wk_cgroup_host_free). */
int wk_cgroup_host_detect(wk_cgroup_host **ret, sp_error **err);

/* A v2 host on the cgroup2 filesystem mounted at mount_point (for a unified
 * hierarchy mounted elsewhere, as on hybrid hosts, and for tests).
 * SP_E_INVALID when mount_point is not cgroup2. */
int wk_cgroup_host_v2_at(const char *mount_point, wk_cgroup_host **ret, sp_error **err);

/* Frees h (NULL allowed); returns NULL. Groups opened from it stay valid. */
wk_cgroup_host *wk_cgroup_host_free(wk_cgroup_host *h);
static inline void wk_cgroup_host_freep(wk_cgroup_host **h)
{
        *h = wk_cgroup_host_free(*h);
}
#define _cleanup_cgroup_host_ __attribute__((cleanup(wk_cgroup_host_freep)))

wk_cgroup_version wk_cgroup_host_version(const wk_cgroup_host *h);
/* The WK_CGROUP_* controllers available (v2: in the mount root's cgroup.controllers). */
unsigned wk_cgroup_host_controllers(const wk_cgroup_host *h);
/* One line for the daemon's log, e.g. "v2 at /sys/fs/cgroup: cpu memory pids io
 * freezer" or "v1: cpu at /sys/fs/cgroup/cpu, ..."; owned by h. */
const char *wk_cgroup_host_describe(const wk_cgroup_host *h);

/* ---- groups ------------------------------------------------------------- */

typedef struct wk_cgroup wk_cgroup;

/* Creates the group <parent>/<name> in every hierarchy (creating parent
 * levels as needed; v2: enabling the controllers on the way down). parent is
 * one or more '/'-separated components (at most WK_CGROUP_PARENT_MAX_DEPTH),
 * e.g. "space"; each component and name: 1..WK_CGROUP_NAME_MAX bytes of
 * [A-Za-z0-9._-], not starting with '.' (SP_E_INVALID). SP_E_CONFLICT when the
 * group exists (wk_cgroup_open() it instead). On failure no part of the group
 * is left (parent levels, shared by all groups, stay). */
int wk_cgroup_create(const wk_cgroup_host *h, const char *parent, const char *name, wk_cgroup **ret, sp_error **err);

/* Opens an existing group (after a daemon restart). A group present in only
 * some hierarchies (a crash while creating it) opens too, so that it can be
 * killed and removed; SP_E_NOT_FOUND when it is in none. */
int wk_cgroup_open(const wk_cgroup_host *h, const char *parent, const char *name, wk_cgroup **ret, sp_error **err);

/* The names of the groups under parent in any hierarchy (for orphan cleanup),
 * sorted, as a new NULL-terminated vector (free with sp_strv_freep); empty
 * when parent does not exist. Entries that are not valid names are skipped. */
int wk_cgroup_list(const wk_cgroup_host *h, const char *parent, char ***ret, sp_error **err);

/* Frees the handle, leaving the group as it is. NULL allowed; returns NULL. */
wk_cgroup *wk_cgroup_free(wk_cgroup *cg);
static inline void wk_cgroup_freep(wk_cgroup **cg)
{
        *cg = wk_cgroup_free(*cg);
}
#define _cleanup_cgroup_ __attribute__((cleanup(wk_cgroup_freep)))

const char *wk_cgroup_name(const wk_cgroup *cg);
wk_cgroup_version wk_cgroup_version_of(const wk_cgroup *cg);
/* The group's directory for one WK_CGROUP_* controller (v2: the one
 * directory whatever the controller), or NULL when the host lacks it. */
const char *wk_cgroup_path(const wk_cgroup *cg, unsigned controller);

/* ---- limits ------------------------------------------------------------- */

#define WK_CGROUP_CPU_MIN_MILLICORES 10u /* the kernel's minimum quota: 1 ms per 100 ms */
#define WK_CGROUP_CPU_MAX_MILLICORES 1024000u
#define WK_CGROUP_MEMORY_MIN (UINT64_C(4) << 20)
#define WK_CGROUP_MEMORY_MAX (UINT64_C(1) << 50)
#define WK_CGROUP_PIDS_MAX 4194304u
#define WK_CGROUP_IO_WEIGHT_MAX 10000u
#define WK_CGROUP_IO_DEVICES_MAX 16

/* A bytes-per-second limit on one block device (a whole disk: throttling
 * takes no partitions); 0 = no limit in that direction. */
typedef struct wk_cgroup_io_limit {
        unsigned major;
        unsigned minor;
        uint64_t read_bps;
        uint64_t write_bps;
} wk_cgroup_io_limit;

/* The whole set of limits; 0 in a field means unlimited (or the default). */
typedef struct wk_cgroup_limits {
        uint32_t cpu_millicores; /* 1000 = one CPU */
        uint64_t memory_bytes; /* swap is turned off whenever this is set */
        uint32_t pids_max;
        uint32_t io_weight; /* 1..10000 on the v2 scale (100 = default), mapped for v1 */
        const wk_cgroup_io_limit *io; /* n_io entries, at most WK_CGROUP_IO_DEVICES_MAX */
        size_t n_io;
} wk_cgroup_limits;

/* Applies every field of l (so it also lifts limits a zero field names).
 * SP_E_INVALID for values out of the bounds above, SP_E_UNSUPPORTED naming
 * the controller when a limit is asked of one the host lacks, SP_E_CONFLICT
 * when the kernel refuses (a memory limit below what the group uses and
 * cannot reclaim). Limits written before a failure stay. */
int wk_cgroup_set_limits(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err);

/* ---- processes ---------------------------------------------------------- */

/* Moves process pid (all its threads) into the group in every hierarchy.
 * Children it forks afterwards are born there. SP_E_NOT_FOUND when pid is
 * gone. */
int wk_cgroup_attach(const wk_cgroup *cg, pid_t pid, sp_error **err);

/* Whether no process is left in the group and its descendants. */
int wk_cgroup_is_empty(const wk_cgroup *cg, bool *ret, sp_error **err);

/* Freezes every process of the group and waits until the kernel reports it
 * frozen (bounded by WK_CGROUP_FREEZE_TIMEOUT_MS; on timeout the group is
 * thawed again and SP_E_TIMEOUT returned). SP_E_UNSUPPORTED without a freezer. */
int wk_cgroup_freeze(const wk_cgroup *cg, sp_error **err);
/* Thaws the group and waits until it runs again. */
int wk_cgroup_thaw(const wk_cgroup *cg, sp_error **err);

/* Kills every process in the group and its descendants (see above) and waits
 * until they are gone (bounded by WK_CGROUP_KILL_TIMEOUT_MS: SP_E_TIMEOUT).
 * Leaves the group thawed. The caller reaps the ones that are its children. */
int wk_cgroup_kill_all(const wk_cgroup *cg, sp_error **err);

/* ---- statistics --------------------------------------------------------- */

#define WK_CGROUP_STAT_CPU (1u << 0)
#define WK_CGROUP_STAT_MEMORY (1u << 1)
#define WK_CGROUP_STAT_MEMORY_PEAK (1u << 2)
#define WK_CGROUP_STAT_PIDS (1u << 3)
#define WK_CGROUP_STAT_OOM_KILLS (1u << 4)

typedef struct wk_cgroup_stats {
        unsigned valid; /* WK_CGROUP_STAT_* bits of the fields the host provides */
        uint64_t cpu_usage_ns; /* CPU time used by the group's processes */
        uint64_t memory_current; /* bytes charged now */
        uint64_t memory_peak; /* most bytes ever charged */
        uint64_t pids_current; /* tasks (threads) now */
        uint64_t oom_kills; /* processes the OOM killer killed for the group's limit */
} wk_cgroup_stats;

/* Reads the group's statistics; a figure the host does not provide is left 0
 * and its bit clear in valid. */
int wk_cgroup_stats_read(const wk_cgroup *cg, wk_cgroup_stats *ret, sp_error **err);

/* ---- removal ------------------------------------------------------------ */

/* Removes the group (and any groups nested in it) from every hierarchy,
 * retrying briefly while the kernel still counts exiting processes
 * (WK_CGROUP_REMOVE_TIMEOUT_MS). SP_E_CONFLICT when processes are still in it
 * (wk_cgroup_kill_all() first). A group already gone is not an error. The
 * handle must still be freed. */
int wk_cgroup_remove(const wk_cgroup *cg, sp_error **err);

#endif
