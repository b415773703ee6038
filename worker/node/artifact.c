/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A suspended sandbox's artifacts, so that another worker can take it
 * (proto/spec/worker-rpc.md: ExportSandbox, ReadSandboxArtifact,
 * ImportSandbox; docs/backends.md "Moving a suspended sandbox").
 *
 * Export: the files another worker needs — its state directory but run/
 * (sandbox.json, the egress log, its sessions and their output) and its
 * storage (a VM's disk and memory state; a jail's root filesystem packed into
 * rootfs.tar, made once per suspend) — each with its size and digest
 * (node/artifact_files.h), on a job thread; the worker the control plane
 * named may read them from then on, until the sandbox runs again or goes.
 *
 * Import: the files are fetched into a staging area by the RPC layer —
 *   <state>/incoming/<key>/state/…            what becomes <state>/sandboxes/<key>/
 *   <storage>/sandboxes/<key>.incoming/<file> what moves into <storage>/sandboxes/<key>/
 * kept across attempts, so that a retried import resumes — then checked
 * against their digests and installed on a job thread: the root filesystem
 * (a jail's unpacked into an empty subvolume, with its disk quota less what
 * it had used; a VM's a snapshot of its template, as a create makes it, or
 * an empty one), the storage files moved in, sandbox.json given this
 * worker's id slot, and the state directory renamed into place — the point
 * from which the sandbox is this worker's — then loaded as after a restart.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "node/artifact_files.h"
#include "node/node_internal.h"
#include "policy/secret.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define JAIL_TAR "rootfs.tar"
#define CKPT_DIR "checkpoint"
#define CKPT_TAR "checkpoint.tar" /* a jail's checkpoint (its processes: backend/jail_criu.h), packed */
#define PACK_TIMEOUT_US (INT64_C(15) * 60 * 1000000)
#define STATE_DEPTH_MAX 8
#define STATE_FILES_MAX 200000

static const char *const STORAGE_FILES[] = {"disk.ext4", "memory.state", JAIL_TAR, CKPT_TAR};

static bool jail_file(const char *name)
{
        return strcmp(name, JAIL_TAR) == 0 || strcmp(name, CKPT_TAR) == 0;
}

static bool component_ok(const char *c, size_t n)
{
        if (n == 0 || n > 128 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = c[i];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                      ch == '-' || ch == '.'))
                        return false;
        }
        return true;
}

int wk_artifact_name_check(const char *name, bool *ret_storage, const char **ret_rel, sp_error **err)
{
        if (strncmp(name, "storage/", 8) == 0) {
                for (size_t i = 0; i < SP_ARRAY_SIZE(STORAGE_FILES); i++)
                        if (strcmp(name + 8, STORAGE_FILES[i]) == 0) {
                                *ret_storage = true;
                                *ret_rel = name + 8;
                                return 0;
                        }
                return sp_error_set(err, SP_E_INVALID, "artifact %s: no such storage file", name);
        }
        if (strncmp(name, "state/", 6) != 0)
                return sp_error_set(err, SP_E_INVALID, "artifact %s: not under state/ or storage/", name);
        const char *rel = name + 6;
        if (strncmp(rel, "run/", 4) == 0 || strcmp(rel, "run") == 0)
                return sp_error_set(err, SP_E_INVALID, "artifact %s: run/ is not an artifact", name);
        const char *p = rel;
        unsigned depth = 0;
        for (;;) {
                const char *slash = strchr(p, '/');
                size_t n = slash ? (size_t)(slash - p) : strlen(p);
                if (!component_ok(p, n) || ++depth > STATE_DEPTH_MAX)
                        return sp_error_set(err, SP_E_INVALID, "artifact %s: not a file name this worker writes", name);
                if (!slash)
                        break;
                p = slash + 1;
        }
        *ret_storage = false;
        *ret_rel = rel;
        return 0;
}

static void storage_dir(wk_node *n, const char *key, char *out, size_t len)
{
        _cleanup_free_ char *d = wk_storage_sandbox_dir(n->storage, key, NULL);
        wk__path(out, len, "%s", d ? d : "");
}

void wk__artifacts_drop(wk_node *n, const char *key)
{
        char dir[PATH_MAX], p[PATH_MAX];
        storage_dir(n, key, dir, sizeof(dir));
        wk__path(p, sizeof(p), "%s/%s", dir, JAIL_TAR);
        unlink(p);
        wk__path(p, sizeof(p), "%s/%s.part", dir, JAIL_TAR);
        unlink(p);
        wk__path(p, sizeof(p), "%s/%s", dir, CKPT_TAR);
        unlink(p);
        wk__path(p, sizeof(p), "%s/%s.part", dir, CKPT_TAR);
        unlink(p);
}

/* ---- the artifacts and their manifest (export, and the store's copy) ---- */

static int add_file(wk__artifacts *x, const char *name, const char *path)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : sp_error_set_errno(&x->err, SP_E_IO, errno, "open %s", name);
        struct stat st;
        if (fstat(fd, &st) < 0)
                return sp_error_set_errno(&x->err, SP_E_IO, errno, "stat %s", name);
        if (!S_ISREG(st.st_mode))
                return 0;
        char digest[PR_WK_DIGEST_MAX];
        if (wk_artifact_digest_fd(fd, (uint64_t)st.st_size, digest, &x->err) < 0)
                return sp_error_wrap(&x->err, "%s", name);
        uint64_t data = (uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size ? (uint64_t)st.st_blocks * 512
                                                                            : (uint64_t)st.st_size;
        if (json_object_array_length(x->files) >= STATE_FILES_MAX)
                return sp_error_set(&x->err, SP_E_LIMIT, "more than %d files", STATE_FILES_MAX);
        pr_wk_artifact_file f = {.name = name, .bytes = st.st_size, .digest = digest};
        json_object_array_add(x->files, pr_msg_encode(&pr_wk_artifact_file_schema, &f));
        x->bytes += (int64_t)data;
        return 0;
}

/* Every regular file under dir (rel its name below the state directory). */
static int walk_state(wk__artifacts *x, const char *dir, const char *rel, unsigned depth)
{
        if (depth > STATE_DEPTH_MAX)
                return 0;
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : sp_error_set_errno(&x->err, SP_E_IO, errno, "open the state of %s", x->id);
        struct dirent *de;
        while ((de = readdir(d))) {
                size_t n = strlen(de->d_name);
                if (!component_ok(de->d_name, n) || (depth == 0 && strcmp(de->d_name, "run") == 0))
                        continue;
                char path[PATH_MAX], name[PATH_MAX];
                wk__path(path, sizeof(path), "%s/%s", dir, de->d_name);
                wk__path(name, sizeof(name), "%s%s%s", rel, *rel ? "/" : "", de->d_name);
                struct stat st;
                if (lstat(path, &st) < 0)
                        continue;
                int r = 0;
                if (S_ISDIR(st.st_mode))
                        r = walk_state(x, path, name, depth + 1);
                else if (S_ISREG(st.st_mode)) {
                        char full[PATH_MAX];
                        wk__path(full, sizeof(full), "state/%s", name);
                        r = strlen(full) <= PR_WK_ARTIFACT_NAME_MAX ? add_file(x, full, path) : 0;
                }
                if (r < 0)
                        return r;
        }
        return 0;
}

int wk__artifacts_init(wk__artifacts *x, wk_node *n, const wk_sandbox *sb)
{
        *x = (wk__artifacts){0};
        if (!(x->files = json_object_new_array()))
                return -1;
        const char *backend = sb->backend->ops->name;
        x->jail = strcmp(backend, "jail") == 0;
        x->memory = sb->suspended.memory;
        snprintf(x->backend, sizeof(x->backend), "%s", backend);
        const char *accel = sb->backend->ops->accel ? sb->backend->ops->accel(sb->backend) : NULL;
        snprintf(x->accel, sizeof(x->accel), "%s", accel ? accel : "");
        snprintf(x->id, sizeof(x->id), "%s", sb->id);
        snprintf(x->tpl, sizeof(x->tpl), "%s", sb->template_name);
        x->disk_bytes = (uint64_t)sb->disk_bytes;
        x->reserve = n->cfg.storage_reserve;
        wk__path(x->state, sizeof(x->state), "%s/sandboxes/%s", n->state_dir, sb->key);
        storage_dir(n, sb->key, x->storage, sizeof(x->storage));
        wk__path(x->rootfs, sizeof(x->rootfs), "%s/rootfs", x->storage);
        wk__path(x->checkpoint, sizeof(x->checkpoint), "%s/%s", x->storage, CKPT_DIR);
        return 0;
}

void wk__artifacts_clear(wk__artifacts *x)
{
        sp_json_putp(&x->files);
        x->err = sp_error_free(x->err);
}

/* Packs dir into storage/<name> unless it is there (made once per suspend):
 * what root in the sandbox controls is bounded, the archive by the pool's
 * room (reflinked copies count once against its quota, in full here), what
 * the packer is fed (sparse files' holes included) by max_fed, and the time.
 * what names it in errors ("root filesystem"). */
static int pack_once(wk__artifacts *x, const char *dir, const char *name, uint64_t max_fed, const char *what)
{
        char tar[PATH_MAX], part[PATH_MAX];
        wk__path(tar, sizeof(tar), "%s/%s", x->storage, name);
        wk__path(part, sizeof(part), "%s/%s.part", x->storage, name);
        if (access(tar, F_OK) == 0)
                return 0;
        _cleanup_close_ int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return sp_error_set_errno(&x->err, SP_E_IO, errno, "create the packed %s", what);
        uint64_t n = 0, room = 0;
        if (wk__pool_room(fd, x->reserve, &room, &x->err) < 0) {
                unlink(part);
                return -1;
        }
        wk_artifact_pack_limits lim = {
                .max_fed = max_fed,
                .max_archive_bytes = room ? room : 1,
                .deadline_us = sp_now_mono_us() + PACK_TIMEOUT_US,
        };
        if (wk_artifact_pack_tree_bounded(dir, fd, &lim, &n, &x->err) < 0 || fsync(fd) < 0 || rename(part, tar) < 0) {
                if (!x->err)
                        sp_error_set_errno(&x->err, SP_E_IO, errno, "write the packed %s", what);
                unlink(part);
                return sp_error_wrap(&x->err, "pack the %s of %s", what, x->id);
        }
        return 0;
}

void wk__artifacts_make(wk__artifacts *x)
{
        if (x->jail) {
                wk_quota_usage u = {0};
                if (wk_subvol_sync(x->rootfs, NULL) == 0 && wk_quota_get(x->rootfs, &u, NULL) == 0)
                        x->disk_exclusive = u.exclusive;
                uint64_t quota = x->disk_bytes ? x->disk_bytes : (UINT64_C(8) << 30);
                if (pack_once(x, x->rootfs, JAIL_TAR, quota > (UINT64_C(1) << 60) / 4 ? UINT64_C(1) << 60 : quota * 4,
                              "root filesystem") < 0)
                        return;
        }
        /* A jail suspended with its processes: its checkpoint's images too. */
        if (x->jail && x->memory) {
                if (access(x->checkpoint, F_OK) < 0) {
                        sp_error_set(&x->err, SP_E_INTERNAL,
                                     "sandbox %s: suspended with its processes, but its checkpoint is not there",
                                     x->id);
                        return;
                }
                if (pack_once(x, x->checkpoint, CKPT_TAR, UINT64_C(1) << 40, "checkpoint") < 0)
                        return;
        }
        for (size_t i = 0; i < SP_ARRAY_SIZE(STORAGE_FILES); i++) {
                if (x->jail != jail_file(STORAGE_FILES[i]))
                        continue;
                char path[PATH_MAX], name[64];
                wk__path(path, sizeof(path), "%s/%s", x->storage, STORAGE_FILES[i]);
                snprintf(name, sizeof(name), "storage/%s", STORAGE_FILES[i]);
                if (add_file(x, name, path) < 0)
                        return;
        }
        (void)walk_state(x, x->state, "", 0);
}

json_object *wk__artifacts_manifest(const wk__artifacts *x)
{
        pr_wk_manifest man = {.version = 1,
                              .id = x->id,
                              .backend = x->backend,
                              .template_name = x->tpl,
                              .accel = x->memory && x->accel[0] ? x->accel : NULL,
                              .memory = x->memory,
                              .bytes = x->bytes,
                              .files = x->files};
        json_object *m = pr_msg_encode(&pr_wk_manifest_schema, &man);
        if (m && x->jail)
                json_object_object_add(m, "disk_exclusive", json_object_new_int64((int64_t)x->disk_exclusive));
        return m;
}

/* ---- export ---- */

typedef struct export_job {
        wk_job job;
        wk_sandbox *sb;
        wk_node_export_done_fn done;
        void *ud;
        wk__artifacts a;
} export_job;

static void export_run(wk_job *j)
{
        wk__artifacts_make(&((export_job *)j)->a);
}

static void export_done(wk_job *j)
{
        export_job *x = (export_job *)j;
        wk_sandbox *sb = x->sb;
        if (j->cancelled)
                sp_error_set(&x->a.err, SP_E_UNAVAILABLE, "export %s: the worker is shutting down", x->a.id);
        _cleanup_json_ json_object *m = NULL;
        if (!x->a.err) {
                m = wk__artifacts_manifest(&x->a);
                sp_log_info_kv(SP_KV("sandbox_id", x->a.id), "exported for worker %s: %zu files, %lld bytes",
                               sb->export_to, json_object_array_length(x->a.files), (long long)x->a.bytes);
        }
        if (x->a.err && x->a.err->code == SP_E_TOO_LARGE && !sb->export_refused)
                sb->export_refused = strdup(x->a.err->message);
        wk__sandbox_unbusy(sb);
        x->done(m, x->a.err, x->ud);
        wk__artifacts_clear(&x->a);
        free(x);
}

int wk_node_sandbox_export(wk_node *n, const char *id, const char *to, wk_node_export_done_fn done, void *ud,
                           sp_error **err)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        if (!sb)
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s not found", id);
        if (sb->state != WK_SB_SUSPENDED)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is %s: only a suspended sandbox can move", id,
                                    wk_sandbox_state_name(sb->state));
        if (!*to || strlen(to) > WK_NAME_MAX || strcmp(to, n->node_id) == 0)
                return sp_error_set(err, SP_E_INVALID, "field 'to' must name another worker");
        if (sb->export_refused)
                return sp_error_set(err, SP_E_TOO_LARGE, "%s", sb->export_refused);
        export_job *x = calloc(1, sizeof(*x));
        if (!x || wk__artifacts_init(&x->a, n, sb) < 0) {
                free(x);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        /* The grant first: sandbox.json is one of the files, its digest taken after. */
        char before[WK_NAME_MAX + 1];
        snprintf(before, sizeof(before), "%s", sb->export_to);
        snprintf(sb->export_to, sizeof(sb->export_to), "%s", to);
        if (strcmp(before, to) != 0 && wk__sandbox_persist(sb, err) < 0) {
                snprintf(sb->export_to, sizeof(sb->export_to), "%s", before);
                wk__artifacts_clear(&x->a);
                free(x);
                return -SP_E_IO;
        }
        x->job = (wk_job){.kind = "export", .run = export_run, .done = export_done};
        x->sb = sb;
        x->done = done;
        x->ud = ud;
        sb->busy = true;
        wk_jobs_submit(n->jobs, &x->job);
        return 1;
}

bool wk_node_sandbox_export_allowed(wk_node *n, const char *id, const char *peer)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        return sb && peer && sb->state == WK_SB_SUSPENDED && sb->export_to[0] && strcmp(sb->export_to, peer) == 0;
}

int wk_node_artifact_file_open(wk_node *n, const char *id, const char *name, uint64_t *ret_size, sp_error **err)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        if (!sb)
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s not found", id);
        if (sb->state != WK_SB_SUSPENDED || sb->busy)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is %s: its artifacts are not ready", id,
                                    sb->busy ? "busy" : wk_sandbox_state_name(sb->state));
        bool storage = false;
        const char *rel = NULL;
        if (wk_artifact_name_check(name, &storage, &rel, err) < 0)
                return -SP_E_INVALID;
        char path[PATH_MAX];
        if (storage) {
                char dir[PATH_MAX];
                storage_dir(n, sb->key, dir, sizeof(dir));
                wk__path(path, sizeof(path), "%s/%s", dir, rel);
        } else {
                wk__path(path, sizeof(path), "%s/sandboxes/%s/%s", n->state_dir, sb->key, rel);
        }
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s has no artifact %s", id, name)
                                       : sp_error_set_errno(err, SP_E_IO, errno, "open artifact %s", name);
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s has no artifact %s", id, name);
        }
        *ret_size = (uint64_t)st.st_size;
        return fd;
}

/* ---- import ---- */

struct wk_node_import {
        wk_node *node;
        wk_job job;
        char id[WK_NAME_MAX + 1], tpl[WK_NAME_MAX + 1];
        bool jail, memory;
        int64_t disk_exclusive; /* a jail's, on the worker it came from (-1: unknown) */
        int64_t quota; /* its disk quota, from its record (0: none) */
        int64_t memory_bytes; /* its memory, from its record (0: the backend's default) */
        wk_backend *backend;
        json_object *manifest; /* its own reference */
        json_object *spec; /* the control plane's CreateSandbox of it (its own reference), or NULL */
        json_object *files; /* borrowed from manifest */
        char stage[PATH_MAX]; /* <state>/incoming/<key> */
        char stage_storage[PATH_MAX]; /* <storage>/sandboxes/<key>.incoming */
        uint32_t slot;
        bool slot_taken;
        wk_node_import_done_fn done;
        void *ud;
        sp_error *err;
        /* From the artifact store (store.c): the copy's directory ("" for a
         * fetch); adopted once this worker took the copy as its own. */
        char store_src[PATH_MAX];
        bool adopted;
        struct wk_node_import *next; /* in node->moving_in */
};

void wk__import_from_store(wk_node_import *imp, const char *dir)
{
        snprintf(imp->store_src, sizeof(imp->store_src), "%s", dir);
}

static void import_free(wk_node_import *imp)
{
        if (!imp)
                return;
        for (wk_node_import **p = &imp->node->moving_in; *p; p = &(*p)->next)
                if (*p == imp) {
                        *p = imp->next;
                        break;
                }
        if (imp->slot_taken)
                wk__slot_give_back(imp->node, imp->slot);
        json_object_put(imp->manifest);
        json_object_put(imp->spec);
        sp_error_free(imp->err);
        free(imp);
}

void wk_node_import_abort(wk_node_import *imp)
{
        import_free(imp);
}

static void remove_tree(const char *path, unsigned depth)
{
        if (depth > STATE_DEPTH_MAX + 4)
                return;
        _cleanup_closedir_ DIR *d = opendir(path);
        if (d) {
                struct dirent *de;
                while ((de = readdir(d))) {
                        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                                continue;
                        char p[PATH_MAX];
                        wk__path(p, sizeof(p), "%s/%s", path, de->d_name);
                        struct stat st;
                        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                                remove_tree(p, depth + 1);
                        else
                                unlink(p);
                }
        }
        rmdir(path);
}

void wk__tree_remove(const char *path)
{
        remove_tree(path, 0);
}

int wk_node_import_begin(wk_node *n, const char *id, json_object *manifest, json_object *spec, wk_node_import **ret,
                         sp_error **err)
{
        pr_wk_manifest m;
        if (pr_msg_decode(&pr_wk_manifest_schema, manifest, &m, err) < 0)
                return sp_error_wrap(err, "field 'manifest'");
        if (strcmp(m.id, id) != 0)
                return sp_error_set(err, SP_E_INVALID, "the manifest is sandbox %s's, not %s's", m.id, id);
        if (spec) {
                pr_wk_create_sandbox c;
                _cleanup_(gw_secrets_unrefp) gw_secrets *check = NULL;
                if (pr_msg_decode(&pr_wk_create_sandbox_schema, spec, &c, err) < 0 ||
                    gw_secrets_parse(c.secrets, &check, err) < 0)
                        return sp_error_wrap(err, "field 'spec'");
                if (strcmp(c.id, id) != 0 || strcmp(c.template_name, m.template_name) != 0)
                        return sp_error_set(err, SP_E_INVALID,
                                            "field 'spec' is of sandbox %s (template %s), the manifest of %s (%s)",
                                            c.id, c.template_name, id, m.template_name);
        }
        if (wk_rootfs_name_validate("sandbox id", id, err) < 0)
                return -SP_E_INVALID;
        wk_sandbox *have = wk__sandbox_find_any(n, id);
        if (have) {
                if (have->state == WK_SB_SUSPENDED && !have->busy && !have->warm)
                        return 1; /* imported already: the answer again */
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is on this worker already (%s)", id,
                                    wk_sandbox_state_name(have->state));
        }
        for (wk_node_import *u = n->moving_in; u; u = u->next)
                if (strcmp(u->id, id) == 0)
                        return sp_error_set(err, SP_E_UNAVAILABLE, "an import of sandbox %s is under way", id);
        wk_backend *b = wk__backend_named(n, m.backend);
        if (!b)
                return sp_error_set(err, SP_E_PRECONDITION, "sandbox %s is a %s sandbox and this worker runs %s%s", id,
                                    m.backend, n->backend->ops->name, n->nbackends > 1 ? " and others" : "");
        const char *backend = b->ops->name;
        const char *accel = b->ops->accel ? b->ops->accel(b) : NULL;
        if (m.memory && m.accel && (!accel || strcmp(m.accel, accel) != 0))
                return sp_error_set(err, SP_E_PRECONDITION,
                                    "sandbox %s's memory was saved under %s and this worker runs %s", id, m.accel,
                                    accel ? accel : "no accelerator");
        size_t nf = json_object_array_length(m.files);
        bool has_record = false;
        for (size_t i = 0; i < nf; i++) {
                pr_wk_artifact_file f;
                bool storage;
                const char *rel;
                if (pr_msg_decode(&pr_wk_artifact_file_schema, json_object_array_get_idx(m.files, i), &f, err) < 0 ||
                    wk_artifact_name_check(f.name, &storage, &rel, err) < 0)
                        return sp_error_wrap(err, "field 'manifest': file %zu", i);
                if (strncmp(f.digest, "sha256:", 7) != 0 || strlen(f.digest) != 7 + 64)
                        return sp_error_set(err, SP_E_INVALID, "field 'manifest': %s: not a sha256 digest", f.name);
                has_record |= strcmp(f.name, "state/sandbox.json") == 0;
        }
        if (!has_record)
                return sp_error_set(err, SP_E_INVALID, "field 'manifest': no state/sandbox.json");
        /* What the holder says it sends must fit (it may send no more: the fetch holds it to it). */
        {
                /* A look without a sync (this is the loop): the unpack is bounded again on its thread. */
                char sdir[PATH_MAX];
                storage_dir(n, id, sdir, sizeof(sdir));
                char *slash = strrchr(sdir, '/');
                if (slash)
                        *slash = '\0';
                struct statvfs vfs;
                uint64_t room = 0;
                if (statvfs(sdir, &vfs) == 0) {
                        uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
                        uint64_t tenth = (uint64_t)vfs.f_blocks * vfs.f_frsize / 10;
                        uint64_t reserve = n->cfg.storage_reserve < tenth ? n->cfg.storage_reserve : tenth;
                        room = avail > reserve ? avail - reserve : 0;
                }
                if ((uint64_t)m.bytes > room)
                        return sp_error_set(err, SP_E_TOO_LARGE,
                                            "sandbox %s's %lld bytes do not fit in this worker's free storage", id,
                                            (long long)m.bytes);
        }
        wk_node_import *imp = calloc(1, sizeof(*imp));
        if (!imp)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        imp->node = n;
        imp->next = n->moving_in;
        n->moving_in = imp;
        imp->manifest = json_object_get(manifest);
        imp->spec = spec ? json_object_get(spec) : NULL;
        imp->files = m.files;
        imp->jail = strcmp(backend, "jail") == 0;
        imp->backend = b;
        imp->memory = m.memory;
        imp->disk_exclusive = -1;
        json_object *de = NULL;
        if (json_object_object_get_ex(manifest, "disk_exclusive", &de) && json_object_is_type(de, json_type_int))
                imp->disk_exclusive = json_object_get_int64(de);
        snprintf(imp->id, sizeof(imp->id), "%s", id);
        snprintf(imp->tpl, sizeof(imp->tpl), "%s", m.template_name);
        wk__path(imp->stage, sizeof(imp->stage), "%s/incoming/%s", n->state_dir, id);
        char sdir[PATH_MAX];
        storage_dir(n, id, sdir, sizeof(sdir));
        wk__path(imp->stage_storage, sizeof(imp->stage_storage), "%s.incoming", sdir);
        char state_stage[PATH_MAX];
        wk__path(state_stage, sizeof(state_stage), "%s/state", imp->stage);
        if (sp_mkdir_p(state_stage, 0700, err) < 0 ||
            (mkdir(imp->stage_storage, 0700) < 0 && errno != EEXIST &&
             sp_error_set_errno(err, SP_E_IO, errno, "make the staging directory of %s", id) < 0)) {
                import_free(imp);
                return -SP_E_IO;
        }
        *ret = imp;
        return 0;
}

size_t wk_node_import_count(const wk_node_import *imp)
{
        return json_object_array_length(imp->files);
}

int wk_node_import_file(wk_node_import *imp, size_t i, const char **ret_name, uint64_t *ret_bytes, char *path,
                        size_t len, sp_error **err)
{
        pr_wk_artifact_file f;
        bool storage;
        const char *rel;
        if (pr_msg_decode(&pr_wk_artifact_file_schema, json_object_array_get_idx(imp->files, i), &f, err) < 0 ||
            wk_artifact_name_check(f.name, &storage, &rel, err) < 0)
                return -SP_E_INVALID;
        if (storage) {
                wk__path(path, len, "%s/%s", imp->stage_storage, rel);
        } else {
                wk__path(path, len, "%s/state/%s", imp->stage, rel);
                char dir[PATH_MAX];
                wk__path(dir, sizeof(dir), "%s", path);
                char *slash = strrchr(dir, '/');
                if (slash) {
                        *slash = '\0';
                        if (sp_mkdir_p(dir, 0700, err) < 0)
                                return -SP_E_IO;
                }
        }
        *ret_name = f.name;
        *ret_bytes = (uint64_t)f.bytes;
        return 0;
}

/* On the job thread: every staged file against its digest. */
static int verify(wk_node_import *imp)
{
        size_t nf = json_object_array_length(imp->files);
        for (size_t i = 0; i < nf; i++) {
                char path[PATH_MAX];
                const char *name;
                uint64_t bytes;
                pr_wk_artifact_file f;
                if (wk_node_import_file(imp, i, &name, &bytes, path, sizeof(path), &imp->err) < 0 ||
                    pr_msg_decode(&pr_wk_artifact_file_schema, json_object_array_get_idx(imp->files, i), &f,
                                  &imp->err) < 0)
                        return -1;
                _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0)
                        return sp_error_set_errno(&imp->err, SP_E_IO, errno, "artifact %s was not fetched", name);
                char digest[PR_WK_DIGEST_MAX];
                if ((uint64_t)st.st_size != bytes ||
                    wk_artifact_digest_fd(fd, (uint64_t)st.st_size, digest, &imp->err) < 0 ||
                    strcmp(digest, f.digest) != 0) {
                        /* Fetched wrong: dropped, fetched again by the next attempt. */
                        unlink(path);
                        sp_error_free(imp->err);
                        imp->err = NULL;
                        return sp_error_set(&imp->err, SP_E_IO,
                                            "artifact %s of sandbox %s does not match its digest (dropped; the next "
                                            "attempt fetches it again)",
                                            name, imp->id);
                }
        }
        return 0;
}

/* A jail's checkpoint, when it came: unpacked beside its root filesystem,
 * within its directory's quota (files), where its restore finds it. */
static int install_checkpoint(wk_node_import *imp, const char *sdir, uint64_t files)
{
        char tar[PATH_MAX], dir[PATH_MAX];
        wk__path(tar, sizeof(tar), "%s/%s", sdir, CKPT_TAR);
        wk__path(dir, sizeof(dir), "%s/%s", sdir, CKPT_DIR);
        _cleanup_close_ int fd = open(tar, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return errno == ENOENT ? 0 : sp_error_set_errno(&imp->err, SP_E_IO, errno, "open the checkpoint");
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return sp_error_set_errno(&imp->err, SP_E_IO, errno, "mkdir %s", dir);
        if (wk_artifact_unpack_tree(fd, dir, files ? files : 1, &imp->err) < 0)
                return sp_error_wrap(&imp->err, "unpack the checkpoint of %s", imp->id);
        unlink(tar);
        return 0;
}

static int install_storage(wk_node_import *imp)
{
        wk_node *n = imp->node;
        _cleanup_free_ char *rootfs = NULL;
        _cleanup_free_ char *sdir = wk_storage_sandbox_dir(n->storage, imp->id, &imp->err);
        if (!sdir)
                return -1;
        /* A directory an earlier attempt left: made again. Its files' quota as a create's (node/sandbox.c). */
        (void)wk_storage_sandbox_delete(n->storage, imp->id, NULL);
        uint64_t files = 0;
        if (imp->backend->ops->files_bytes) {
                wk_box_spec spec = {.memory_bytes = imp->memory_bytes, .disk_bytes = (uint64_t)imp->quota};
                files = imp->backend->ops->files_bytes(&spec);
        }
        bool from_template =
                !imp->jail && wk_storage_sandbox_create(n->storage, imp->tpl, imp->id, 0, files, &rootfs, NULL) == 0;
        if (!from_template && wk_storage_sandbox_create_empty(n->storage, imp->id, files, &rootfs, &imp->err) < 0)
                return -1;
        for (size_t i = 0; i < SP_ARRAY_SIZE(STORAGE_FILES); i++) {
                char from[PATH_MAX], to[PATH_MAX];
                wk__path(from, sizeof(from), "%s/%s", imp->stage_storage, STORAGE_FILES[i]);
                wk__path(to, sizeof(to), "%s/%s", sdir, STORAGE_FILES[i]);
                if (rename(from, to) == 0 || errno == ENOENT)
                        continue;
                /* Into a subvolume of its own: a reflink where the filesystem allows, then the fetched one goes. */
                if (errno != EXDEV)
                        return sp_error_set_errno(&imp->err, SP_E_IO, errno, "move in %s", STORAGE_FILES[i]);
                if (wk__file_copy(from, to, &imp->err) < 0)
                        return sp_error_wrap(&imp->err, "move in %s", STORAGE_FILES[i]);
                unlink(from);
        }
        rmdir(imp->stage_storage);
        if (!imp->jail)
                return 0;
        char tar[PATH_MAX];
        wk__path(tar, sizeof(tar), "%s/%s", sdir, JAIL_TAR);
        _cleanup_close_ int fd = open(tar, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(&imp->err, SP_E_IO, errno, "open the packed root filesystem");
        struct stat st;
        if (fstat(fd, &st) < 0)
                return sp_error_set_errno(&imp->err, SP_E_IO, errno, "stat the packed root filesystem");
        /* Bounded by the pool's room (the extractor counts a sparse file at its size). */
        uint64_t room = 0;
        if (wk__pool_room(fd, imp->node->cfg.storage_reserve, &room, &imp->err) < 0)
                return -1;
        if (wk_artifact_unpack_tree(fd, rootfs, room ? room : 1, &imp->err) < 0)
                return sp_error_wrap(&imp->err, "unpack the root filesystem of %s", imp->id);
        unlink(tar);
        return install_checkpoint(imp, sdir, files);
}

/* sandbox.json, made this worker's: its id slot, no export grant, not warm. */
static void put_or_del(json_object *o, const char *key, json_object *v)
{
        if (v)
                json_object_object_add(o, key, v);
        else
                json_object_object_del(o, key);
}

/* The control plane's word for what the holder's record says of the sandbox
 * (its template, host name, tenant, resources, environment, egress and secrets): a
 * holder that lies gains nothing here. A VM's memory state holds its
 * machine: one saved for another memory size than the spec's is refused. */
static int apply_spec(wk_node_import *imp, json_object *o, json_object *box)
{
        pr_wk_create_sandbox c;
        if (pr_msg_decode(&pr_wk_create_sandbox_schema, imp->spec, &c, &imp->err) < 0)
                return -1;
        int64_t mem = c.resources.memory_mb << 20, saved = 0;
        if (imp->memory && mem > 0 && sp_json_get_int(box, "memory_bytes", false, 0, INT64_MAX, &saved, NULL) == 0 &&
            saved > 0 && saved != mem)
                return sp_error_set(&imp->err, SP_E_INVALID,
                                    "sandbox %s's memory state is of a %lld MiB machine, its spec of %lld MiB", imp->id,
                                    (long long)(saved >> 20), (long long)(mem >> 20));
        json_object_object_add(o, "template", json_object_new_string(c.template_name));
        /* Its host name as a create gives it: the spec's, else its id's. */
        char host[64];
        wk__hostname_of(c.hostname, imp->id, host);
        json_object_object_add(o, "hostname", json_object_new_string(host));
        json_object *res = json_object_new_object();
        json_object_object_add(res, "cpu_millis", json_object_new_int64(c.resources.cpu_millis));
        json_object_object_add(res, "memory_mb", json_object_new_int64(c.resources.memory_mb));
        json_object_object_add(res, "pids", json_object_new_int64(c.resources.pids));
        json_object_object_add(res, "disk_mb", json_object_new_int64(c.resources.disk_mb));
        json_object_object_add(o, "resources", res);
        json_object_object_add(o, "memory_bytes", json_object_new_int64(mem));
        json_object_object_add(o, "disk_bytes", json_object_new_int64(c.resources.disk_mb << 20));
        imp->quota = c.resources.disk_mb << 20;
        imp->memory_bytes = mem;
        put_or_del(o, "tenant_id", c.tenant_id && *c.tenant_id ? json_object_new_string(c.tenant_id) : NULL);
        put_or_del(o, "env", c.env ? json_object_get(c.env) : NULL);
        put_or_del(o, "egress", c.egress ? json_object_get(c.egress) : NULL);
        /* The bindings without their values: those never touch the disk (and come again when it runs). */
        put_or_del(o, "secrets", c.secrets ? gw_secrets_strip_values(c.secrets) : NULL);
        put_or_del(o, "egress_generation", c.egress_generation ? json_object_new_int64(c.egress_generation) : NULL);
        return 0;
}

static int rewrite_record(wk_node_import *imp)
{
        char path[PATH_MAX];
        wk__path(path, sizeof(path), "%s/state/sandbox.json", imp->stage);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        _cleanup_json_ json_object *o = NULL;
        if (sp_file_read(path, 1 << 20, &text, &imp->err) < 0 || sp_json_parse(text.data, text.len, &o, &imp->err) < 0)
                return -1;
        const char *state = sp_json_member_str(o, "state");
        if (!state || strcmp(state, "suspended") != 0)
                return sp_error_set(&imp->err, SP_E_INVALID, "sandbox %s's record is not a suspended sandbox's",
                                    imp->id);
        sp_json_get_int(o, "disk_bytes", false, 0, INT64_MAX, &imp->quota, NULL);
        sp_json_get_int(o, "memory_bytes", false, 0, INT64_MAX, &imp->memory_bytes, NULL);
        json_object_object_add(o, "id", json_object_new_string(imp->id));
        json_object_object_add(o, "key", json_object_new_string(imp->id));
        json_object_object_add(o, "slot", json_object_new_int64(imp->slot));
        json_object_object_add(o, "warm", json_object_new_boolean(false));
        json_object_object_del(o, "export_to");
        /* Its copy in the artifact store is the holder's (this worker's own is recorded once made). */
        json_object_object_del(o, "stored");
        json_object_object_del(o, "stored_bytes");
        /* Its box as a suspended one of this worker: no process of the holder's (a pid and start time
         * from another host must never name one here), its machine's shape kept (a VM's memory and
         * vCPUs, which its memory state needs). */
        json_object *box = NULL, *nb = json_object_new_object();
        json_object_object_add(nb, "suspended", json_object_new_boolean(true));
        if (json_object_object_get_ex(o, "box", &box) && json_object_is_type(box, json_type_object)) {
                static const char *const keep[] = {"memory_bytes", "vcpus", "accel"};
                for (size_t i = 0; i < SP_ARRAY_SIZE(keep); i++) {
                        json_object *v = NULL;
                        if (json_object_object_get_ex(box, keep[i], &v))
                                json_object_object_add(nb, keep[i], json_object_get(v));
                }
        }
        json_object_object_add(o, "box", nb);
        if (imp->spec && apply_spec(imp, o, nb) < 0)
                return -1;
        const char *s = sp_json_str(o);
        return sp_file_write_atomic(path, s, strlen(s), 0600, &imp->err);
}

/* On the job thread: every file of the manifest from the store's copy into
 * the staging area (a reflink where the filesystems allow it). */
static int copy_from_store(wk_node_import *imp)
{
        size_t nf = json_object_array_length(imp->files);
        for (size_t i = 0; i < nf; i++) {
                char path[PATH_MAX], from[PATH_MAX];
                const char *name;
                uint64_t bytes;
                if (wk_node_import_file(imp, i, &name, &bytes, path, sizeof(path), &imp->err) < 0)
                        return -1;
                wk__path(from, sizeof(from), "%s/%s", imp->store_src, name);
                (void)unlink(path);
                if (wk__file_copy(from, path, &imp->err) < 0)
                        return sp_error_wrap(&imp->err, "sandbox %s's %s from the artifact store", imp->id, name);
        }
        return 0;
}

static void import_run(wk_job *j)
{
        wk_node_import *imp = (wk_node_import *)((char *)j - offsetof(wk_node_import, job));
        wk_node *n = imp->node;
        if ((imp->store_src[0] && copy_from_store(imp) < 0) || verify(imp) < 0 || rewrite_record(imp) < 0)
                return;
        if (install_storage(imp) < 0) {
                /* What it made of the sandbox's storage goes (the fetched files went with it: fetched again). */
                (void)wk_storage_sandbox_delete(n->storage, imp->id, NULL);
                return;
        }
        if (imp->jail) {
                /* Its quota: what it may still write, as on the worker it came from. Everything it holds is its
                 * own here (nothing is shared with a template), so the limit is what it holds now plus what it
                 * had left. */
                char sdir[PATH_MAX];
                storage_dir(n, imp->id, sdir, sizeof(sdir));
                char rootfs[PATH_MAX];
                wk__path(rootfs, sizeof(rootfs), "%s/rootfs", sdir);
                int64_t quota = imp->quota;
                wk_quota_usage u = {0};
                if (quota > 0 && wk_subvol_sync(rootfs, NULL) == 0 && wk_quota_get(rootfs, &u, NULL) == 0) {
                        int64_t left = imp->disk_exclusive >= 0 && imp->disk_exclusive < quota
                                               ? quota - imp->disk_exclusive
                                               : (imp->disk_exclusive >= 0 ? 0 : quota);
                        if (wk_quota_set_limit(rootfs, u.exclusive + (uint64_t)left + (UINT64_C(1) << 20), &imp->err) <
                            0) {
                                sp_error_wrap(&imp->err, "the disk quota of %s", imp->id);
                                return;
                        }
                }
        }
        /* Its runtime directory (never an artifact), then the point from which the sandbox is this worker's. */
        char from[PATH_MAX], to[PATH_MAX];
        wk__path(from, sizeof(from), "%s/state/run", imp->stage);
        if (mkdir(from, 0700) < 0 && errno != EEXIST) {
                sp_error_set_errno(&imp->err, SP_E_IO, errno, "make the runtime directory of %s", imp->id);
                return;
        }
        wk__path(from, sizeof(from), "%s/state", imp->stage);
        wk__path(to, sizeof(to), "%s/sandboxes/%s", n->state_dir, imp->id);
        if (rename(from, to) < 0) {
                sp_error_set_errno(&imp->err, SP_E_IO, errno, "install the state of %s", imp->id);
                return;
        }
        rmdir(imp->stage);
        /* The store's copy is this worker's sandbox now: it holds it (and removes it when the sandbox runs
         * again). Not taken, it stays the gone worker's: this worker makes its own copy later. */
        if (imp->store_src[0]) {
                _cleanup_error_ sp_error *e = NULL;
                if (wk__store_holder_write(imp->store_src, n->node_id, &e) == 0)
                        imp->adopted = true;
                else
                        sp_log_warn_kv(SP_KV("sandbox_id", imp->id), "artifact store: taking its copy: %s", e->message);
        }
}

static void import_done(wk_job *j)
{
        wk_node_import *imp = (wk_node_import *)((char *)j - offsetof(wk_node_import, job));
        wk_node *n = imp->node;
        if (j->cancelled)
                sp_error_set(&imp->err, SP_E_UNAVAILABLE, "import %s: the worker is shutting down", imp->id);
        wk_sandbox *sb = NULL;
        if (!imp->err) {
                /* The slot is the sandbox's now: loading marks it used. */
                wk__slot_give_back(n, imp->slot);
                imp->slot_taken = false;
                if (wk__sandbox_load_one(n, imp->id, &imp->err) == 0) {
                        sb = wk_node_sandbox_find(n, imp->id);
                        if (!sb)
                                sp_error_set(&imp->err, SP_E_INTERNAL, "sandbox %s did not load", imp->id);
                }
                if (sb) {
                        sp_log_info_kv(SP_KV("sandbox_id", imp->id), "imported (%s)%s",
                                       imp->memory ? "memory and files" : "files",
                                       imp->store_src[0] ? " from the artifact store" : "");
                        if (imp->adopted) {
                                json_object *b = NULL;
                                sb->stored = true;
                                sb->stored_bytes = json_object_object_get_ex(imp->manifest, "bytes", &b)
                                                           ? json_object_get_int64(b)
                                                           : 0;
                                if (sb->stored_bytes <= 0)
                                        sb->stored_bytes = 1;
                                (void)wk__sandbox_persist(sb, NULL);
                        } else {
                                wk__store_want(n);
                        }
                }
        }
        imp->done(sb, imp->err, imp->ud);
        import_free(imp);
}

void wk_node_import_finish(wk_node_import *imp, wk_node_import_done_fn done, void *ud)
{
        imp->done = done;
        imp->ud = ud;
        _cleanup_error_ sp_error *e = NULL;
        if (wk__slot_take(imp->node, &imp->slot, &e) < 0) {
                done(NULL, e, ud);
                import_free(imp);
                return;
        }
        imp->slot_taken = true;
        imp->job = (wk_job){.kind = "import", .run = import_run, .done = import_done};
        wk_jobs_submit(imp->node->jobs, &imp->job);
}

void wk__imports_stale_sweep(wk_node *n)
{
        char dir[PATH_MAX];
        wk__path(dir, sizeof(dir), "%s/incoming", n->state_dir);
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return;
        int64_t now = sp_now_real_us() / 1000000;
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char p[PATH_MAX];
                wk__path(p, sizeof(p), "%s/%s", dir, de->d_name);
                struct stat st;
                /* An import abandoned a day ago: the control plane moved the sandbox elsewhere. */
                if (lstat(p, &st) < 0 || now - st.st_mtime < 24 * 3600 || wk__sandbox_find_any(n, de->d_name))
                        continue;
                remove_tree(p, 0);
                char sdir[PATH_MAX];
                storage_dir(n, de->d_name, sdir, sizeof(sdir));
                char stage[PATH_MAX];
                wk__path(stage, sizeof(stage), "%s.incoming", sdir);
                remove_tree(stage, 0);
                sp_log_info_kv(SP_KV("sandbox_id", de->d_name), "removed an import abandoned over a day ago");
        }
}
