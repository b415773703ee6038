/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The jail: a sandbox made of Linux namespaces around a root filesystem.
 *
 * wk_jail_start() runs space-agent as PID 1 of new pid, mount, network, uts,
 * ipc, user and cgroup namespaces:
 *
 *   - the root filesystem is an idmapped bind mount of `rootfs`, so files
 *     owned by root on disk are owned by the sandbox's root, which is the
 *     unprivileged host uid `uid_base` — no chown of the snapshot, and what the
 *     sandbox writes lands on disk with ordinary ids;
 *   - /proc (with /proc/sys, /proc/bus, /proc/fs, /proc/irq read-only and the
 *     kernel's sensitive files masked), a read-only /sys, a minimal /dev
 *     (null, zero, full, random, urandom, tty, a private devpts), /dev/shm and
 *     /run are set up by host root *before* the sandbox enters its user
 *     namespace, so the kernel locks them: root inside cannot unmount or
 *     remount them;
 *   - the network, uts and pid namespaces belong to the host's user namespace:
 *     root inside cannot reconfigure its network, hostname or reboot;
 *   - the agent binary is bind-mounted read-only from the host at
 *     /run/space/agent, so templates need not carry it;
 *   - a seccomp filter denies what a sandbox never needs (wk_jail_seccomp_load);
 *   - the agent is executed by host root before it enters the sandbox's user
 *     namespace (space-agent --jail-userns-fd): its memory belongs to the
 *     host's user namespace, and it makes itself non-dumpable once inside, so
 *     root in the sandbox cannot ptrace it, read its memory, open its /proc
 *     entries or take its descriptors (pidfd_getfd);
 *   - it receives only its own descriptors (0-5); everything else the worker
 *     had open is closed before the exec, and every process of the sandbox is
 *     limited to WK_JAIL_NOFILE_* open files.
 *
 * Thread-safety: call from the daemon's main thread (it forks).
 */
#ifndef WK_JAIL_H
#define WK_JAIL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "space/error.h"

#define WK_JAIL_AGENT_PATH "/run/space/agent"
/* Open files per process inside a sandbox (soft, hard; the hard limit is
 * lowered to this, never raised past the worker's own): root inside cannot
 * raise the hard limit, which bounds what a sandbox takes of the host's
 * file table together with its pids limit. */
#define WK_JAIL_NOFILE_SOFT 1024
#define WK_JAIL_NOFILE_HARD 65536

typedef struct wk_jail_config {
        const char *id; /* sandbox id, for messages */
        const char *rootfs; /* host path of the sandbox's root filesystem */
        const char *runtime_dir; /* host directory private to this sandbox (staging mount point) */
        const char *agent_path; /* host path of the static space-agent binary */
        const char *hostname;
        uid_t uid_base; /* sandbox uid/gid 0 is host uid/gid uid_base ... */
        uint32_t uid_count; /* ... for this many ids */
        /* Where the agent listens: a unix socket the init makes in the sandbox's
         * network namespace and hands the agent as fd 3. */
        const char *agent_socket;
        int log_fd; /* the agent's stdout/stderr, or -1 for /dev/null */
        /* Called with the init's host pid before it enters its namespaces for good
         * (e.g. to place it in the sandbox's cgroups). May be NULL. */
        int (*attach)(pid_t pid, void *userdata, sp_error **err);
        void *attach_userdata;
        /* Kill the sandbox when the calling thread dies (tests). The worker leaves it
         * false: sandboxes outlive it and are re-adopted. */
        bool die_with_parent;
} wk_jail_config;

/* Starts the sandbox and returns the host pid of its init once the agent is
 * running inside its namespaces. On failure nothing is left running (the init is killed and
 * reaped) and err says which step failed. The caller reaps the pid later
 * (or it is reparented if the daemon restarts). */
int wk_jail_start(const wk_jail_config *cfg, pid_t *ret_pid, sp_error **err);

/* The device nodes a jail's /dev binds from the host's, the /proc files it
 * masks with /dev/null and the /proc directories it binds read-only (those
 * the kernel has). */
#define WK_JAIL_DEV_NODES 6
#define WK_JAIL_PROC_MASKED 8
#define WK_JAIL_PROC_READONLY 4
extern const char *const wk_jail_proc_readonly[WK_JAIL_PROC_READONLY];
extern const char *const wk_jail_dev_nodes[WK_JAIL_DEV_NODES];
extern const char *const wk_jail_proc_masked[WK_JAIL_PROC_MASKED];

/* Brings the loopback interface of the calling thread's network namespace
 * up; -1 with errno (async-signal-safe: a jail's init calls it). */
int wk_jail_loopback_up(void);

/* Mounts a jail's /dev at dir: a tmpfs owned by the sandbox's root (host
 * uid base) with the mount points of the device nodes, pts/, shm/ and the
 * usual links, without the mounts on them. -1 with errno, *ret_step naming
 * the step (async-signal-safe). */
int wk_jail_dev_skeleton(const char *dir, uid_t base, const char **ret_step);

/* A user namespace of the jail's map (0..count-1 to base..), held by
 * *ret_fd: the one a restore's tree enters (jail_criu.c). */
int wk_jail_make_userns(uid_t base, uint32_t count, int *ret_fd, sp_error **err);

/* Attaches at path the sandbox's own view of rootfs (idmapped: host ids
 * base..base+count-1 appear as 0..count-1), as wk_jail_start makes it: a
 * checkpoint's restore starts from it. */
int wk_jail_mount_root(const char *rootfs, uid_t base, uint32_t count, const char *path, sp_error **err);

/* The seccomp filter as a BPF program, built once per process (the caller
 * must not free it): wk_jail_start takes it before the clone, so that the
 * child, cloned from a process with other threads, never allocates. */
struct sock_fprog;
int wk_jail_seccomp_program(struct sock_fprog *ret, sp_error **err);
/* Applies prog to the calling thread (async-signal-safe); -errno on failure. A caller with
 * CAP_SYS_ADMIN keeps setuid programs working (no no_new_privs); any other sets no_new_privs. */
int wk_jail_seccomp_apply(const struct sock_fprog *prog);
/* Loads the seccomp filter into the calling process. */
int wk_jail_seccomp_load(sp_error **err);

#endif
