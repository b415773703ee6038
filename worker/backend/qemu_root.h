/* SPDX-License-Identifier: Apache-2.0 */
/*
 * QEMU's own filesystem view (docs/backends.md, "How a VM is made"): a mount
 * namespace whose root is an empty read-only tmpfs holding only what QEMU
 * needs to run — /usr (and the host's /bin, /lib... links or directories
 * beside it, read-only), a few device nodes (null, zero, random, urandom;
 * kvm under KVM), and a /proc of its own that shows only processes of its
 * uid and nothing but them (hidepid=invisible, subset=pid) — so that a QEMU
 * taken over by its guest reads none of the host's files and no other
 * process's command line. Everything it works on is a descriptor it was
 * handed (its kernel and initramfs through /proc/self/fd).
 *
 * wk_qemu_root_prepare runs in the worker before the fork (it allocates and
 * reads the host's links); wk_qemu_root_enter runs in the child, as root,
 * before it drops its ids, and makes only system calls (async-signal-safe).
 */
#ifndef SPACE_WORKER_BACKEND_QEMU_ROOT_H
#define SPACE_WORKER_BACKEND_QEMU_ROOT_H

#include <stdbool.h>

#include "space/error.h"

typedef struct wk_qemu_root wk_qemu_root;

/* The view for a QEMU at qemu_path (one outside /usr gets its prefix, the
 * directory above its bin/, too), with /dev/kvm when kvm; its mount point
 * is dir (made 0700 if missing). */
int wk_qemu_root_prepare(const char *dir, const char *qemu_path, bool kvm, wk_qemu_root **ret, sp_error **err);
void wk_qemu_root_free(wk_qemu_root *r);
/* In the child: a mount namespace of its own with the view as its root
 * (cwd "/"). NULL, or what failed. */
const char *wk_qemu_root_enter(const wk_qemu_root *r);

#endif
