/* SPDX-License-Identifier: Apache-2.0 */
/* The jail backend: backend/jail.c's namespaces plus a cgroup per sandbox,
 * behind the ops table of backend/backend.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/jail.h"
#include "backend/jail_criu.h"
#include "backend/proc.h"
#include "cgroup/cgroup.h"
#include "net/net.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define GONE_TIMEOUT_MS 10000

typedef struct jail_backend {
        wk_backend base;
        char *agent_path;
        char *cgroup_parent;
        uid_t uid_base;
        uint32_t uid_count;
        wk_cgroup_host *host;
        wk_cgroup *anchor; /* kept frozen (cgroup v1 freezer), or NULL */
        wk_net *net; /* NULL: loopback only */
        char *criu; /* NULL: suspend keeps files only */
        char criu_missing[160]; /* why there is none, for the suspend's answer */
} jail_backend;

/* The v1 freezer turns a kernel static key on when the first group starts
 * freezing and off when the last thaws, and each turn patches the kernel's
 * text on every CPU. A delete freezes the sandbox's group to kill it and
 * thaws it after: two patches per sandbox, 11% of the worker's CPU under a
 * load of creates and deletes. An empty group kept frozen while the backend
 * lives holds the key on, so the sandboxes' freezes only count. */
#define FREEZER_ANCHOR "freezer-anchor"

static void anchor_freezer(jail_backend *b)
{
        if (wk_cgroup_host_version(b->host) != WK_CGROUP_V1)
                return;
        _cleanup_error_ sp_error *e = NULL;
        int r = wk_cgroup_create(b->host, b->cgroup_parent, FREEZER_ANCHOR, &b->anchor, &e);
        if (r < 0 && e->code == SP_E_CONFLICT) {
                sp_error_free(e);
                e = NULL;
                r = wk_cgroup_open(b->host, b->cgroup_parent, FREEZER_ANCHOR, &b->anchor, &e);
        }
        if (r < 0 || wk_cgroup_freeze(b->anchor, &e) < 0) {
                sp_log_debug("no frozen anchor group: %s", e ? e->message : "?");
                if (b->anchor)
                        (void)wk_cgroup_remove(b->anchor, NULL);
                b->anchor = wk_cgroup_free(b->anchor);
        }
}

struct wk_box {
        jail_backend *b;
        char id[WK_CGROUP_NAME_MAX + 1];
        char rootfs[PATH_MAX];
        char runtime[PATH_MAX];
        char socket[108];
        char hostname[64];
        char checkpoint[PATH_MAX]; /* its images while suspended with its processes */
        wk_box_spec limits;
        uint32_t slot;
        wk_cgroup *cg;
        pid_t pid;
        unsigned long long starttime; /* of pid, to tell it from a recycled pid */
        bool suspended;
        bool linked; /* has its network link */
        int log_rfd; /* read end of the agent's log FIFO, or -1 */
};

static bool box_alive(const wk_box *box)
{
        return wk_proc_alive((pid_t *)&box->pid, box->starttime);
}

static void wait_gone(wk_box *box)
{
        wk_proc_wait_gone(&box->pid, box->starttime, GONE_TIMEOUT_MS);
}

static wk_cgroup_limits limits_of(const wk_box_spec *s)
{
        return (wk_cgroup_limits){
                .cpu_millicores = (uint32_t)s->cpu_millis,
                .memory_bytes = (uint64_t)s->memory_bytes,
                .pids_max = (uint32_t)s->pids_max,
        };
}

/* The jail's init exists, in its namespaces, and runs nothing yet: it joins
 * the box's cgroup and gets its network link. */
static int attach_cb(pid_t pid, void *ud, sp_error **err)
{
        wk_box *box = ud;
        if (wk_cgroup_attach(box->cg, pid, err) < 0)
                return -SP_E_IO;
        if (box->b->net) {
                if (wk_net_sandbox_up(box->b->net, box->slot, pid, err) < 0)
                        return sp_error_wrap(err, "sandbox %s: network", box->id);
                box->linked = true;
        }
        return 0;
}

static void net_down(wk_box *box)
{
        if (box->b->net && box->linked)
                wk_net_sandbox_down(box->b->net, box->slot);
        box->linked = false;
}

/* The host uid its root is (its user namespace maps 0 there). */
static uid_t box_uid_base(const wk_box *box)
{
        return box->b->uid_base + box->slot * box->b->uid_count;
}

/* Its cgroup below each hierarchy's root, as CRIU names it. */
static void box_cgroup_path(const wk_box *box, char *out, size_t n)
{
        snprintf(out, n, "/%s/%s", box->b->cgroup_parent, box->id);
}

static void log_path(const wk_box *box, char *out, size_t n)
{
        snprintf(out, n, "%s/agent-log.fifo", box->runtime);
}

static int log_open_reader(wk_box *box)
{
        char p[PATH_MAX + 32];
        log_path(box, p, sizeof(p));
        return wk_box_log_reader(p, &box->log_rfd);
}

static void log_close(wk_box *box)
{
        char p[PATH_MAX + 32];
        log_path(box, p, sizeof(p));
        wk_box_log_close(p, &box->log_rfd);
}

/* Makes (or takes over a leftover) cgroup, starts the jail in it. */
static int box_start(wk_box *box, sp_error **err)
{
        jail_backend *b = box->b;
        wk_cgroup_limits l = limits_of(&box->limits);
        if (wk_box_cgroup(b->host, b->cgroup_parent, box->id, &l, &box->cg, err) < 0)
                return -SP_E_IO;
        _cleanup_close_ int logfd = -1;
        char logp[PATH_MAX + 32];
        log_path(box, logp, sizeof(logp));
        if (wk_box_log_open(logp, &box->log_rfd, &logfd) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "sandbox %s: agent log pipe", box->id);

        wk_jail_config jc = {
                .id = box->id,
                .rootfs = box->rootfs,
                .runtime_dir = box->runtime,
                .agent_path = b->agent_path,
                .hostname = box->hostname,
                .uid_base = box_uid_base(box),
                .uid_count = b->uid_count,
                .agent_socket = box->socket,
                .log_fd = logfd,
                .attach = attach_cb,
                .attach_userdata = box,
        };
        if (wk_jail_start(&jc, &box->pid, err) < 0)
                return -SP_E_INTERNAL;
        box->starttime = wk_proc_starttime(box->pid);
        box->suspended = false;
        return 0;
}

static int box_stop(wk_box *box, sp_error **err)
{
        if (box->cg && wk_cgroup_kill_all(box->cg, err) < 0)
                return sp_error_wrap(err, "sandbox %s: stop", box->id);
        if (box->pid > 0) {
                kill(box->pid, SIGKILL);
                wait_gone(box);
        }
        unlink(box->socket);
        net_down(box);
        return 0;
}

static wk_box *box_new(jail_backend *b, const wk_box_spec *spec, sp_error **err)
{
        if (strlen(spec->id) > WK_CGROUP_NAME_MAX || strlen(spec->hostname) > 63) {
                sp_error_set(err, SP_E_INVALID, "sandbox id or hostname too long");
                return NULL;
        }
        wk_box *box = calloc(1, sizeof(*box));
        if (!box) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        box->b = b;
        snprintf(box->id, sizeof(box->id), "%s", spec->id);
        snprintf(box->rootfs, sizeof(box->rootfs), "%s", spec->rootfs);
        snprintf(box->runtime, sizeof(box->runtime), "%s", spec->runtime_dir);
        snprintf(box->hostname, sizeof(box->hostname), "%s", spec->hostname);
        if (snprintf(box->socket, sizeof(box->socket), "%s/agent.sock", spec->runtime_dir) >=
            (int)sizeof(box->socket)) {
                sp_error_set(err, SP_E_INVALID, "runtime directory path too long for a unix socket: %s",
                             spec->runtime_dir);
                free(box);
                return NULL;
        }
        /* Beside its root filesystem, in the sandbox's storage (counted, moved and deleted with it). */
        const char *slash = strrchr(spec->rootfs, '/');
        if (!slash || snprintf(box->checkpoint, sizeof(box->checkpoint), "%.*s/checkpoint", (int)(slash - spec->rootfs),
                               spec->rootfs) >= (int)sizeof(box->checkpoint)) {
                sp_error_set(err, SP_E_INVALID, "root filesystem path unusable for a checkpoint: %s", spec->rootfs);
                free(box);
                return NULL;
        }
        box->limits = *spec;
        box->slot = spec->id_slot;
        box->log_rfd = -1;
        return box;
}

static void box_free(wk_box *box)
{
        if (!box)
                return;
        wk_cgroup_free(box->cg);
        sp_close(box->log_rfd);
        free(box);
}

static int op_create(wk_backend *base, const wk_box_spec *spec, wk_box **ret, sp_error **err)
{
        jail_backend *b = (jail_backend *)base;
        wk_box *box = box_new(b, spec, err);
        if (!box)
                return -SP_E_INVALID;
        if (box_start(box, err) < 0) {
                if (box->cg) {
                        wk_cgroup_kill_all(box->cg, NULL);
                        wk_cgroup_remove(box->cg, NULL);
                }
                unlink(box->socket);
                net_down(box);
                log_close(box);
                box_free(box);
                return -SP_E_INTERNAL;
        }
        *ret = box;
        return 0;
}

static int op_update(wk_box *box, const wk_box_spec *spec, sp_error **err)
{
        box->limits.cpu_millis = spec->cpu_millis;
        box->limits.memory_bytes = spec->memory_bytes;
        box->limits.pids_max = spec->pids_max;
        wk_cgroup_limits l = limits_of(&box->limits);
        return wk_cgroup_set_limits(box->cg, &l, err);
}

static int op_pause(wk_box *box, sp_error **err)
{
        return wk_cgroup_freeze(box->cg, err);
}
static int op_resume(wk_box *box, sp_error **err)
{
        return wk_cgroup_thaw(box->cg, err);
}

/* Ends the box's processes and takes its cgroup and link: what a suspend
 * leaves is its files (and its checkpoint). */
static int box_release_suspended(wk_box *box, sp_error **err)
{
        if (box_stop(box, err) < 0)
                return -SP_E_INTERNAL;
        if (wk_cgroup_remove(box->cg, err) < 0)
                return sp_error_wrap(err, "sandbox %s: suspend", box->id);
        box->cg = wk_cgroup_free(box->cg);
        box->suspended = true;
        return 0;
}

/* CRIU checkpoints the tree (and ends it); 0, or -1 with why[] saying why not. */
static int checkpoint(wk_box *box, char *why, size_t n)
{
        jail_backend *b = box->b;
        if (!b->criu) {
                snprintf(why, n, "%s", b->criu_missing);
                return -1;
        }
        if (!box_alive(box)) {
                snprintf(why, n, "its init had exited");
                return -1;
        }
        char logp[PATH_MAX + 32], criu_log[PATH_MAX + 32], cgroup[PATH_MAX];
        log_path(box, logp, sizeof(logp));
        snprintf(criu_log, sizeof(criu_log), "%s/criu-dump.log", box->runtime);
        box_cgroup_path(box, cgroup, sizeof(cgroup));
        wk_criu_dump d = {.criu = b->criu,
                          .dir = box->checkpoint,
                          .pid = box->pid,
                          .uid_base = box_uid_base(box),
                          .cgroup = cgroup,
                          .agent_path = b->agent_path,
                          .log_fifo = logp,
                          .log = criu_log};
        _cleanup_error_ sp_error *e = NULL;
        int64_t t0 = sp_now_mono_us();
        if (wk_criu_dump_tree(&d, &e) < 0) {
                snprintf(why, n, "the checkpoint failed: %s", e->message);
                sp_log_warn_kv(SP_KV("sandbox_id", box->id), "suspend keeps its files only: %s", why);
                return -1;
        }
        sp_log_info_kv(SP_KV("sandbox_id", box->id), "checkpoint with its processes in %lld ms, %llu KiB",
                       (long long)(sp_now_mono_us() - t0) / 1000,
                       (unsigned long long)(wk_criu_images_bytes(box->checkpoint) / 1024));
        return 0;
}

static int op_suspend(wk_box *box, bool processes, wk_suspend_info *ret, sp_error **err)
{
        /* Thaw first: frozen tasks cannot die, nor be checkpointed without a freezer of CRIU's own. */
        wk_cgroup_thaw(box->cg, NULL);
        *ret = (wk_suspend_info){.filesystem = true};
        if (processes)
                ret->memory = checkpoint(box, ret->why, sizeof(ret->why)) == 0;
        else
                snprintf(ret->why, sizeof(ret->why), "stopped: its processes end");
        if (box_release_suspended(box, err) < 0) {
                wk_criu_images_remove(box->checkpoint);
                ret->memory = false;
                return -SP_E_INTERNAL;
        }
        return 0;
}

/* A checkpoint's images are the tree's memory and its tmpfs files, which its
 * memory limit bounds (tmpfs pages are charged to its cgroup), and some
 * metadata: the sandbox's directory (beside its root filesystem, which has a
 * quota of its own) is a subvolume with that quota. A checkpoint past it
 * fails and the suspend keeps files only. Without a memory limit: 4 GiB. */
#define CHECKPOINT_MARGIN (UINT64_C(64) << 20)
#define CHECKPOINT_NO_LIMIT (UINT64_C(4) << 30)

static uint64_t op_files_bytes(const wk_box_spec *spec)
{
        return (spec->memory_bytes > 0 ? (uint64_t)spec->memory_bytes : CHECKPOINT_NO_LIMIT) + CHECKPOINT_MARGIN;
}

static bool has_checkpoint(const wk_box *box)
{
        char p[PATH_MAX + 32];
        snprintf(p, sizeof(p), "%s/" WK_CRIU_META, box->checkpoint);
        return access(p, F_OK) == 0;
}

static int restore_net_cb(int netns_fd, void *ud, sp_error **err)
{
        wk_box *box = ud;
        if (!box->b->net)
                return 0;
        if (wk_net_sandbox_up_netns(box->b->net, box->slot, netns_fd, err) < 0)
                return sp_error_wrap(err, "sandbox %s: network", box->id);
        box->linked = true;
        return 0;
}

/* The tree again from its checkpoint, in a cgroup made again. */
static int box_restore_checkpoint(wk_box *box, sp_error **err)
{
        jail_backend *b = box->b;
        if (!b->criu)
                return sp_error_set(err, SP_E_UNAVAILABLE, "%s", b->criu_missing);
        wk_cgroup_limits l = limits_of(&box->limits);
        if (wk_box_cgroup(b->host, b->cgroup_parent, box->id, &l, &box->cg, err) < 0)
                return -SP_E_IO;
        _cleanup_close_ int logfd = -1;
        char logp[PATH_MAX + 32], criu_log[PATH_MAX + 32];
        log_path(box, logp, sizeof(logp));
        snprintf(criu_log, sizeof(criu_log), "%s/criu-restore.log", box->runtime);
        if (wk_box_log_open(logp, &box->log_rfd, &logfd) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "sandbox %s: agent log pipe", box->id);
        wk_criu_restore r = {
                .log = criu_log,
                .criu = b->criu,
                .dir = box->checkpoint,
                .rootfs = box->rootfs,
                .runtime_dir = box->runtime,
                .agent_path = b->agent_path,
                .log_fifo = logp,
                .log_wfd = logfd,
                .agent_socket = box->socket,
                .uid_base = box_uid_base(box),
                .uid_count = b->uid_count,
                .attach_net = restore_net_cb,
                .ud = box,
        };
        char cgroup[PATH_MAX];
        box_cgroup_path(box, cgroup, sizeof(cgroup));
        r.cgroup = cgroup;
        int64_t t0 = sp_now_mono_us();
        pid_t pid = 0;
        if (wk_criu_restore_tree(&r, &pid, err) < 0) {
                wk_cgroup_kill_all(box->cg, NULL);
                net_down(box);
                return sp_error_wrap(err, "sandbox %s", box->id);
        }
        box->pid = pid;
        box->starttime = wk_proc_starttime(pid);
        box->suspended = false;
        sp_log_info_kv(SP_KV("sandbox_id", box->id), "restored with its processes in %lld ms",
                       (long long)(sp_now_mono_us() - t0) / 1000);
        wk_criu_images_remove(box->checkpoint);
        return 0;
}

static int op_restore(wk_box *box, wk_restore_info *ret, sp_error **err)
{
        ret->why[0] = '\0';
        if (!box->suspended)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is not suspended", box->id);
        if (has_checkpoint(box)) {
                if (box_restore_checkpoint(box, err) == 0)
                        return 0;
                /* Never silent: the processes are lost, the answer and the log say why, the sandbox starts
                 * from its files. */
                snprintf(ret->why, sizeof(ret->why), "the restore from its checkpoint failed: %s", (*err)->message);
                sp_log_warn_kv(SP_KV("sandbox_id", box->id), "starting it from its files: %s", ret->why);
                *err = sp_error_free(*err);
                wk_criu_images_remove(box->checkpoint);
        }
        if (box_start(box, err) < 0) {
                if (box->cg) {
                        wk_cgroup_remove(box->cg, NULL);
                        box->cg = wk_cgroup_free(box->cg);
                }
                return -SP_E_INTERNAL;
        }
        return 0;
}

/* CRIU's logs of its last checkpoint and restore (they name the sandbox's paths and mounts). */
static void criu_logs_remove(const wk_box *box)
{
        static const char *const logs[] = {"criu-dump.log", "criu-restore.log"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(logs); i++) {
                char p[PATH_MAX + 32];
                snprintf(p, sizeof(p), "%s/%s", box->runtime, logs[i]);
                (void)unlink(p);
        }
}

static int op_destroy(wk_box *box, sp_error **err)
{
        if (box->cg)
                wk_cgroup_thaw(box->cg, NULL);
        if (box_stop(box, err) < 0)
                return -SP_E_INTERNAL;
        if (box->cg && wk_cgroup_remove(box->cg, err) < 0)
                return sp_error_wrap(err, "sandbox %s: remove cgroup", box->id);
        log_close(box);
        criu_logs_remove(box); /* its images go with its storage directory (the node's) */
        box_free(box);
        return 0;
}

static int op_log_fd(const wk_box *box)
{
        return box->log_rfd;
}

static const char *op_agent_socket(const wk_box *box)
{
        return box->socket;
}

static int op_stats(wk_box *box, wk_box_stats *ret, sp_error **err)
{
        wk_cgroup_stats st = {0};
        if (!box->cg)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is not running", box->id);
        if (wk_cgroup_stats_read(box->cg, &st, err) < 0)
                return -SP_E_IO;
        *ret = (wk_box_stats){
                .cpu_ns = st.cpu_usage_ns,
                .memory_bytes = st.memory_current,
                .memory_peak_bytes = st.memory_peak,
                .pids = st.pids_current,
                .oom_kills = st.oom_kills,
        };
        return 0;
}

static bool op_alive(const wk_box *box)
{
        return !box->suspended && box_alive(box);
}

static json_object *op_save(const wk_box *box)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "pid", json_object_new_int(box->pid));
        json_object_object_add(o, "starttime", json_object_new_int64((int64_t)box->starttime));
        json_object_object_add(o, "suspended", json_object_new_boolean(box->suspended));
        json_object *net = box->b->net && box->linked ? wk_net_link_record(box->b->net, box->slot) : NULL;
        if (net)
                json_object_object_add(o, "net", net);
        return o;
}

static int op_adopt(wk_backend *base, const wk_box_spec *spec, json_object *saved, wk_box **ret, sp_error **err)
{
        jail_backend *b = (jail_backend *)base;
        wk_box *box = box_new(b, spec, err);
        if (!box)
                return -SP_E_INVALID;
        int64_t pid = 0, starttime = 0;
        bool suspended = false;
        if (sp_json_get_int(saved, "pid", false, 0, INT32_MAX, &pid, err) < 0 ||
            sp_json_get_int(saved, "starttime", false, 0, INT64_MAX, &starttime, err) < 0 ||
            sp_json_get_bool(saved, "suspended", false, &suspended, err) < 0) {
                box_free(box);
                return sp_error_wrap(err, "sandbox %s: saved state", spec->id);
        }
        box->pid = (pid_t)pid;
        box->starttime = (unsigned long long)starttime;
        box->suspended = suspended;
        if (!suspended) {
                (void)log_open_reader(box); /* the agent's log from here on; none if it is gone */
                _cleanup_error_ sp_error *e = NULL;
                if (wk_cgroup_open(b->host, b->cgroup_parent, box->id, &box->cg, &e) < 0)
                        box->cg = NULL; /* the node restarts a box whose init is gone; box_start makes a new one */
                json_object *net = NULL;
                const char *saved_if = NULL;
                e = sp_error_free(e);
                if (sp_json_get_object(saved, "net", false, &net, &e) < 0 || !net ||
                    sp_json_get_string(net, "host_if", false, IF_NAMESIZE - 1, &saved_if, &e) < 0)
                        e = sp_error_free(e);
                if (b->net && box_alive(box)) {
                        if (wk_net_sandbox_adopt(b->net, box->slot, box->pid, saved_if, &e) < 0)
                                sp_log_warn_kv(SP_KV("sandbox_id", box->id), "network: %s", e->message);
                        else
                                box->linked = true;
                }
        }
        *ret = box;
        return 0;
}

static void op_forget(wk_box *box)
{
        box_free(box);
}

static void op_free(wk_backend *base)
{
        jail_backend *b = (jail_backend *)base;
        if (!b)
                return;
        if (b->anchor) {
                (void)wk_cgroup_thaw(b->anchor, NULL);
                (void)wk_cgroup_remove(b->anchor, NULL);
                wk_cgroup_free(b->anchor);
        }
        wk_cgroup_host_free(b->host);
        free(b->agent_path);
        free(b->cgroup_parent);
        free(b->criu);
        free(b);
}

static const wk_backend_ops jail_ops = {
        .name = "jail",
        .free = op_free,
        .create = op_create,
        .update = op_update,
        .pause = op_pause,
        .resume = op_resume,
        .suspend = op_suspend,
        .restore = op_restore,
        .destroy = op_destroy,
        .log_fd = op_log_fd,
        .agent_socket = op_agent_socket,
        .stats = op_stats,
        .alive = op_alive,
        .save = op_save,
        .adopt = op_adopt,
        .forget = op_forget,
        .files_bytes = op_files_bytes,
};

/* The CRIU to checkpoint with, if there is one (whether it can checkpoint
 * this kernel's processes shows at each suspend, which falls back to files
 * only and says why). */
static void find_criu(jail_backend *b, const char *path)
{
        if (!path) {
                snprintf(b->criu_missing, sizeof(b->criu_missing),
                         "this worker runs without CRIU (--criu=off, the default: docs/backends.md)");
                return;
        }
        if (access(path, X_OK) < 0) {
                snprintf(b->criu_missing, sizeof(b->criu_missing), "this worker has no CRIU at %s (scripts/criu)",
                         path);
                sp_log_info("jail: no CRIU at %s: suspend keeps a jail's files only", path);
                return;
        }
        if (!wk_criu_has_patches(path)) {
                snprintf(b->criu_missing, sizeof(b->criu_missing),
                         "the CRIU at %s lacks this project's patches (scripts/criu builds it)", path);
                sp_log_warn("jail: %s lacks this project's patches (--enter-userns): suspend keeps a jail's files "
                            "only",
                            path);
                return;
        }
        b->criu = strdup(path);
        if (!b->criu)
                snprintf(b->criu_missing, sizeof(b->criu_missing), "out of memory");
        else
                sp_log_info("jail: suspend checkpoints processes with %s", path);
}

int wk_backend_jail_new(const wk_backend_config *cfg, wk_backend **ret, sp_error **err)
{
        if (!cfg->agent_path || access(cfg->agent_path, X_OK) < 0)
                return sp_error_set(err, SP_E_INVALID, "the jail needs the space-agent binary (%s)",
                                    cfg->agent_path ? cfg->agent_path : "unset");
        jail_backend *b = calloc(1, sizeof(*b));
        if (!b)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        b->base.ops = &jail_ops;
        b->net = cfg->net;
        b->agent_path = strdup(cfg->agent_path);
        b->cgroup_parent = strdup(cfg->cgroup_parent ? cfg->cgroup_parent : "space");
        b->uid_base = cfg->uid_base;
        b->uid_count = cfg->uid_count ? cfg->uid_count : 65536;
        if (!b->agent_path || !b->cgroup_parent || wk_cgroup_host_detect(&b->host, err) < 0) {
                op_free(&b->base);
                return sp_error_wrap(err, "jail backend");
        }
        anchor_freezer(b);
        find_criu(b, cfg->criu_path);
        sp_log_debug("jail backend on %s", wk_cgroup_host_describe(b->host));
        *ret = &b->base;
        return 0;
}
