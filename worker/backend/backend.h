/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The isolation backends behind one table of operations (docs/architecture.md, docs/worker.md):
 * `jail` (Linux namespaces, everywhere), `qemu` (microvm, KVM or TCG) and
 * `firecracker` (KVM hosts). The node (worker/node/) drives sandboxes only
 * through this table and knows nothing of namespaces, VMs or sockets.
 *
 * A *box* is one sandbox's backend state. The node prepares its root
 * filesystem (a writable btrfs snapshot of the template) and its runtime
 * directory, then calls create → start; the agent inside is reached through
 * connect_agent's socket path. Every operation may fail with an sp_error
 * whose code the node reports; none leaves a half-made box behind: a failed
 * create or start has released what it took.
 *
 * After the daemon restarts, adopt() rebuilds a box from what save() wrote,
 * checking that the processes it names are still the sandbox's.
 * Not thread-safe: the daemon's event loop calls everything.
 */
#ifndef WK_BACKEND_H
#define WK_BACKEND_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/error.h"

typedef struct wk_backend wk_backend;
typedef struct wk_box wk_box;

typedef struct wk_box_spec {
        const char *id; /* sandbox id */
        const char *rootfs; /* host path of the root filesystem (jail) or its image (VMs) */
        const char *runtime_dir; /* host directory private to this box */
        const char *hostname;
        int64_t cpu_millis; /* 1000 = one CPU; 0 = unlimited */
        int64_t memory_bytes; /* 0 = unlimited */
        int64_t pids_max; /* 0 = unlimited */
        uint32_t id_slot; /* distinct per live box: picks its host uid range */
        uint64_t disk_bytes; /* VMs: the size of the disk made from rootfs (0: the backend's default) */
        /* VMs: the template's directory (templates/<name>, beside its rootfs) when
         * rootfs is still the template's unchanged: the backend may then keep
         * there what makes the next creates fast (an image of the template, a
         * base snapshot) and start the box from it. NULL: make the disk from rootfs. */
        const char *template_dir;
} wk_box_spec;

typedef struct wk_box_stats {
        uint64_t cpu_ns;
        uint64_t memory_bytes;
        uint64_t memory_peak_bytes;
        uint64_t pids;
        uint64_t oom_kills;
} wk_box_stats;

/* What a suspend kept: VMs their memory and disk; a jail its files, and its
 * processes when CRIU checkpointed them (memory). */
typedef struct wk_suspend_info {
        bool memory;
        bool filesystem;
        /* Without memory: why the processes were not kept ("" when the backend
         * never keeps them). */
        char why[256];
} wk_suspend_info;

/* What a restore lost: why the processes its suspend kept did not come back
 * (the box started from its files instead); "" when they did, or when the
 * suspend kept none. */
typedef struct wk_restore_info {
        char why[256];
} wk_restore_info;

typedef struct wk_backend_ops {
        const char *name;
        /* Frees the backend (accepts NULL). */
        void (*free)(wk_backend *b);
        /* Creates and starts a box; on success the agent is running. */
        int (*create)(wk_backend *b, const wk_box_spec *spec, wk_box **ret, sp_error **err);
        /* Applies new limits (cpu, memory, pids) to a running box: a warm box being claimed. */
        int (*update)(wk_box *box, const wk_box_spec *spec, sp_error **err);
        /* Freezes / thaws every process of the box. */
        int (*pause)(wk_box *box, sp_error **err);
        int (*resume)(wk_box *box, sp_error **err);
        /* Releases the box's processes (and memory, saved where the backend can
         * and processes is true: a jail's checkpoint, a VM's memory state),
         * keeping its filesystem; the box stays allocated for restore. */
        int (*suspend)(wk_box *box, bool processes, wk_suspend_info *ret, sp_error **err);
        /* Starts a suspended box again; ret says what it lost, if anything. */
        int (*restore)(wk_box *box, wk_restore_info *ret, sp_error **err);
        /* Stops everything and frees the box (its filesystem is the node's). */
        int (*destroy)(wk_box *box, sp_error **err);
        /* The read end of the agent's own log (its stdout and stderr), a pipe
         * held by the box for its whole life, or -1 (borrowed; may be NULL). The
         * node reads it on its event loop; the agent never blocks on it. */
        int (*log_fd)(const wk_box *box);
        /* The unix socket path on which the box's agent listens (borrowed). */
        const char *(*agent_socket)(const wk_box *box);
        /* Optional: a connection to the agent on which HELLO went both ways and
         * the agent answered a request of this connection's (*ret owned by the
         * caller: wk_agent_link_new_greeted). For a transport that outlives its
         * connections (a VM's serial port), which needs more than a connect to
         * the socket; may block for a few seconds. Without it, callers connect
         * to agent_socket. */
        int (*agent_connect)(wk_box *box, int *ret, sp_error **err);
        int (*stats)(wk_box *box, wk_box_stats *ret, sp_error **err);
        /* True while the box's init is alive. */
        bool (*alive)(const wk_box *box);
        /* State to persist, and the reverse after a restart. */
        json_object *(*save)(const wk_box *box);
        int (*adopt)(wk_backend *b, const wk_box_spec *spec, json_object *saved, wk_box **ret, sp_error **err);
        /* Frees the in-memory box without touching what runs (daemon shutdown). */
        void (*forget)(wk_box *box);
        /* Optional: how its VMs are accelerated ("kvm", "tcg"). */
        const char *(*accel)(const wk_backend *b);
        /* Optional: makes what creates of spec's template and machine start
         * from (a VM's base snapshot: booted once, its agent ready, saved),
         * booting a box with spec's id and slot for it: 1 when made, 0 at once
         * when it exists. Takes seconds: a background job calls it. */
        int (*prepare)(wk_backend *b, const wk_box_spec *spec, sp_error **err);
#define WK_VM_BASE_BOX_ID "vmbase" /* the box prepare boots: one at a time per worker */
        /* Optional: whether a running box (a warm one) can serve spec; a VM's
         * memory and vCPUs are fixed for its life. Without it, any box fits. */
        bool (*fits)(const wk_box *box, const wk_box_spec *spec);
        /* Optional: whether box started from a base snapshot (a copy of
         * another VM's memory: the node then gives it fresh randomness). */
        bool (*from_base)(const wk_box *box);
        /* Optional: the most of the pool a box of spec may keep beside its root
         * filesystem (a VM's disk, which copy-on-write can make take more
         * than its size, and its memory state): the node makes the sandbox's
         * directory a subvolume with that quota. NULL: nothing is kept there. */
        uint64_t (*files_bytes)(const wk_box_spec *spec);
        /* The guest names its own resolver (a VM: its fixed router, net/link.h),
         * so the node writes no resolv.conf into the root filesystem (which
         * would keep a VM from starting from its template's base snapshot). */
        bool own_resolver;
        /* Its page cache dies with a suspend (a VM's): the node has the agent
         * sync its filesystems first. A jail's files are the host's, cached
         * by the host: a sync would only flush every other sandbox's writes. */
        bool sync_before_suspend;
} wk_backend_ops;

struct wk_backend {
        const wk_backend_ops *ops;
};

typedef struct wk_backend_config {
        const char *agent_path; /* host path of the static space-agent */
        const char *cgroup_parent; /* e.g. "space" */
        uid_t uid_base; /* first host uid of the ranges handed to boxes */
        uint32_t uid_count; /* ids per box (65536) */
        struct wk_net *net; /* the sandboxes' network (borrowed; NULL: loopback only) */
        /* qemu: */
        const char *qemu_path; /* NULL: /usr/bin/qemu-system-x86_64 */
        const char *vm_kernel_dir; /* vmlinuz and modules/ (scripts/vm-kernel) */
        const char *vm_state_dir; /* where the backend writes the initramfs */
        const char *accel; /* "auto" (KVM when a probe guest answers, else TCG), "kvm" or "tcg" */
        bool die_with_parent; /* tests: boxes end with the process that made them */
        /* jail: the CRIU binary (scripts/criu) that checkpoints a suspended
         * jail; NULL, or one that does not run: suspend keeps files only. */
        const char *criu_path;
        bool no_base_snapshots; /* qemu: every create boots (benchmarks' cold row, debugging) */
} wk_backend_config;

/* The jail backend (backend/jail_backend.c). */
int wk_backend_jail_new(const wk_backend_config *cfg, wk_backend **ret, sp_error **err);

/* The qemu backend (backend/qemu_backend.c): writes the initramfs, finds out
 * whether KVM works (a probe guest with a deadline), else uses TCG.
 * SP_E_UNAVAILABLE without QEMU or the kernel, or when "kvm" was asked for and
 * does not work. */
int wk_backend_qemu_new(const wk_backend_config *cfg, wk_backend **ret, sp_error **err);

#endif
