/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by cgroup.c, cgroup_v1.c, cgroup_v2.c and cgroup_parse.c
 * (and their tests and fuzz target). Not part of the worker's API.
 */
#ifndef WK_CGROUP_INTERNAL_H
#define WK_CGROUP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cgroup/cgroup.h"
#include "space/error.h"

#define WK__CG_NCTRL 7 /* controllers in the WK_CGROUP_* mask */
#define WK__CG_FILE_MAX 65536 /* a control file we read whole (not cgroup.procs) */
#define WK__CG_PROCS_MAX (UINT64_C(16) << 20) /* cgroup.procs of one group */
#define WK__CG_MAX_DEPTH 16 /* groups nested inside a sandbox's group */
#define WK__CG_CPU_PERIOD_US 100000u

/* One hierarchy: where it is mounted and which of our controllers it has. */
typedef struct wk__cg_mount {
        char *path;
        unsigned controllers;
} wk__cg_mount;

struct wk_cgroup_host {
        wk_cgroup_version version;
        wk__cg_mount mounts[WK__CG_NCTRL]; /* v2: one */
        size_t n_mounts;
        unsigned controllers;
        char *description;
};

struct wk_cgroup {
        wk_cgroup_version version;
        char *name;
        wk__cg_mount dirs[WK__CG_NCTRL]; /* the group's directory in each hierarchy */
        size_t n_dirs;
        unsigned controllers;
};

/* The controller's name in the host's version ("blkio" on v1, "io" on v2). */
const char *wk__cg_controller_name(wk_cgroup_version v, unsigned controller);

/* ---- control files ---- */

/* Writes value to dir/file in one write(2). Errors name the file; ENOENT is
 * SP_E_UNSUPPORTED (the controller or feature is missing), EINVAL
 * SP_E_INVALID, EBUSY SP_E_CONFLICT, ESRCH SP_E_NOT_FOUND. */
int wk__cg_write(const char *dir, const char *file, const char *value, sp_error **err);
/* Reads dir/file whole (at most size - 1 bytes, NUL-terminated) into buf.
 * Returns the length, or <0 (SP_E_NOT_FOUND when the file does not exist). */
ssize_t wk__cg_read(const char *dir, const char *file, char *buf, size_t size, sp_error **err);
/* Whether dir/file exists. */
bool wk__cg_has(const char *dir, const char *file);
/* The directory of cg holding controller, or NULL. */
const char *wk__cg_dir(const wk_cgroup *cg, unsigned controller);

/* ---- parsers (fuzzed: text is what a kernel, or an attacker, wrote) ---- */

/* A single number ("max" or "-1" read as UINT64_MAX), surrounded by
 * whitespace. Returns 0 or -1 when malformed. */
int wk__cg_parse_u64(const char *text, size_t len, uint64_t *ret);
/* In a flat keyed file ("key value" lines: cpu.stat, memory.events,
 * memory.oom_control, cgroup.events), the value of key. Returns 1 when found,
 * 0 when absent, -1 when its value is malformed. */
int wk__cg_parse_keyed(const char *text, size_t len, const char *key, uint64_t *ret);
/* Calls fn for each pid of a cgroup.procs text (one decimal per line);
 * returns -1 at a malformed line or the first negative value fn returns. */
int wk__cg_parse_pids(const char *text, size_t len, int (*fn)(pid_t pid, void *userdata), void *userdata);
/* The v1 controllers named in a cgroup mount's super options ("rw,cpu,cpuacct"). */
unsigned wk__cg_parse_v1_options(const char *options);
/* The controllers named in a v2 cgroup.controllers text ("cpu io memory pids"). */
unsigned wk__cg_parse_v2_controllers(const char *text, size_t len);

/* ---- conversions ---- */

/* CFS quota in microseconds per WK__CG_CPU_PERIOD_US for millicores (0: none). */
uint64_t wk__cg_cpu_quota_us(uint32_t millicores);
/* v1 cpu.shares for millicores (1024 per CPU, 2..262144; 0 → 1024). */
uint64_t wk__cg_cpu_shares(uint32_t millicores);
/* v2 cpu.weight for millicores (the shares mapped onto 1..10000). */
uint64_t wk__cg_cpu_weight(uint32_t millicores);
/* v1 blkio.weight (10..1000) and bfq weight (1..1000) for a v2 io weight (1..10000). */
uint64_t wk__cg_io_weight_v1(uint32_t weight);
uint64_t wk__cg_io_weight_bfq(uint32_t weight);

/* Checks l against the bounds of cgroup.h. */
int wk__cg_limits_validate(const wk_cgroup_limits *l, sp_error **err);

/* ---- per-version operations ---- */

int wk__cg_v1_set_limits(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err);
int wk__cg_v1_freeze(const wk_cgroup *cg, bool freeze, int64_t timeout_ms, sp_error **err);
int wk__cg_v1_stats(const wk_cgroup *cg, wk_cgroup_stats *ret, sp_error **err);

/* Enables the wanted controllers in the subtree_control of every level
 * from the mount root down to the parent. */
int wk__cg_v2_enable(const wk_cgroup_host *h, const char *parent, sp_error **err);
int wk__cg_v2_set_limits(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err);
int wk__cg_v2_freeze(const wk_cgroup *cg, bool freeze, int64_t timeout_ms, sp_error **err);
int wk__cg_v2_stats(const wk_cgroup *cg, wk_cgroup_stats *ret, sp_error **err);
/* Waits (bounded) until cgroup.events reports key = want. */
int wk__cg_v2_wait_event(const char *dir, const char *key, uint64_t want, int64_t timeout_ms, sp_error **err);

/* Kills by signals: freeze, SIGKILL every process, thaw, until empty. What
 * wk_cgroup_kill_all() does where there is no cgroup.kill (tests call it
 * directly on v2 too). */
int wk__cg_kill_by_signal(const wk_cgroup *cg, int64_t timeout_ms, sp_error **err);

#endif
