/* SPDX-License-Identifier: Apache-2.0 */
/* Base snapshots of VM templates (docs/backends.md "Fast starts"): when a
 * template arrives, for the public API's default machine, and after a create
 * of a template had to boot its VM, for that machine, a background job has the
 * backend make that template's base snapshot (booted once, agent ready,
 * saved), and the next creates restore copies of it. One job at a
 * time per node (it costs one VM's memory and CPU while it runs); a failure
 * waits a minute before the next try. The VM it boots has an id slot of its
 * own (its own host uid): no sandbox's QEMU can touch what every later
 * sandbox will start from. Its box id (and cgroup name) is WK_VM_BASE_BOX_ID:
 * one at a time, so that the backend finds one a crashed worker left. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "node/jobs.h"
#include "node/node_internal.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/log.h"
#include "space/time.h"
#include "space/worker_rpc.h"

#define BASE_RETRY_US (60 * INT64_C(1000000))

typedef struct base_job {
        wk_job job;
        wk_node *n;
        wk_backend *backend;
        uint32_t slot;
        char id[32], template_name[WK_NAME_MAX + 1];
        char template_dir[PATH_MAX], runtime[PATH_MAX], rootfs[PATH_MAX];
        wk_box_spec spec;
        bool made;
        sp_error *err;
} base_job;

static void base_run(wk_job *j)
{
        base_job *b = (base_job *)j;
        if (sp_mkdir_p(b->runtime, 0700, &b->err) < 0)
                return;
        b->made = b->backend->ops->prepare(b->backend, &b->spec, &b->err) > 0;
        char p[PATH_MAX + 16];
        static const char *const files[] = {"console.log", "agent.sock", "qmp.sock"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(files); i++) {
                wk__path(p, sizeof(p), "%s/%s", b->runtime, files[i]);
                unlink(p);
        }
        rmdir(b->runtime);
}

static void base_done(wk_job *j)
{
        base_job *b = (base_job *)j;
        wk_node *n = b->n;
        wk__slot_give_back(n, b->slot);
        n->vm_base_busy = false;
        if (j->cancelled && !b->err)
                sp_error_set(&b->err, SP_E_UNAVAILABLE, "the worker is shutting down");
        if (b->err) {
                n->vm_bases_failed++;
                n->vm_base_retry_us = sp_now_mono_us() + BASE_RETRY_US;
                sp_log_warn_kv(SP_KV("template", b->template_name), "%s", b->err->message);
                sp_error_free(b->err);
        } else if (b->made) {
                n->vm_bases_made++;
                wk__warm_schedule(n); /* a pool waiting for VMs fills faster now */
        }
        free(b);
}

/* A base of template name for a machine, made in the background unless one is being made or a
 * failure is recent; the backend makes nothing when that base exists already. */
static void base_want(wk_node *n, const char *template_name, int64_t cpu_millis, int64_t memory_bytes, int64_t pids_max,
                      int64_t disk_bytes)
{
        wk_backend *vm = NULL; /* the node's backend that makes bases (a VM's) */
        for (size_t i = 0; i < n->nbackends && !vm; i++)
                if (n->backends[i]->ops->prepare)
                        vm = n->backends[i];
        if (!vm || n->vm_base_busy || sp_now_mono_us() < n->vm_base_retry_us)
                return;
        base_job *b = calloc(1, sizeof(*b));
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_free_ char *tdir = wk_storage_template_dir(n->storage, template_name, &e);
        if (!b || !tdir || wk__slot_take(n, &b->slot, &e) < 0) {
                free(b);
                return; /* no slot free now: a later cold create asks again */
        }
        b->job = (wk_job){.kind = "base", .run = base_run, .done = base_done, .background = true};
        b->n = n;
        b->backend = vm;
        snprintf(b->id, sizeof(b->id), "%s", WK_VM_BASE_BOX_ID);
        snprintf(b->template_name, sizeof(b->template_name), "%s", template_name);
        wk__path(b->template_dir, sizeof(b->template_dir), "%s", tdir);
        wk__path(b->rootfs, sizeof(b->rootfs), "%s/rootfs", tdir);
        wk__path(b->runtime, sizeof(b->runtime), "%s/vm-base", n->state_dir);
        b->spec = (wk_box_spec){
                .id = b->id,
                .rootfs = b->rootfs,
                .runtime_dir = b->runtime,
                .hostname = "sandbox",
                .cpu_millis = cpu_millis,
                .memory_bytes = memory_bytes,
                .pids_max = pids_max,
                .id_slot = b->slot,
                .disk_bytes = (uint64_t)disk_bytes,
                .template_dir = b->template_dir,
        };
        n->vm_base_busy = true;
        wk_jobs_submit(n->jobs, &b->job);
}

void wk__vm_base_want(wk_node *n, const wk_sandbox *sb)
{
        base_want(n, sb->template_name, sb->cpu_millis, sb->memory_bytes, sb->pids_max, sb->disk_bytes);
}

void wk__vm_base_ahead(wk_node *n, const char *template_name)
{
        if (!n->cfg.vm_bases_ahead)
                return;
        base_want(n, template_name, PR_WK_DEFAULT_CPU_MILLIS, (int64_t)PR_WK_DEFAULT_MEMORY_MB << 20,
                  PR_WK_DEFAULT_PIDS, (int64_t)PR_WK_DEFAULT_DISK_MB << 20);
}
