/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The artifact store (docs/backends.md "The artifact store"): a directory
 * that every worker mounts (shared storage: NFS and the like) where each
 * suspended sandbox's artifacts and manifest are kept as an export makes
 * them (artifact.c), so that another worker can take the sandbox when the
 * one that holds it is gone for good (ImportSandbox with from.store):
 *
 *   <dir>/sandboxes/<id>/manifest.json        the Manifest (worker-rpc.md)
 *   <dir>/sandboxes/<id>/holder               the name of the worker whose sandbox it is
 *   <dir>/sandboxes/<id>/state/…, storage/…   the files, named as in the manifest
 *   <dir>/sandboxes/.<id>.<worker>.tmp        a copy being made, renamed into place whole
 *   <dir>/sandboxes/.<id>.<worker>.old        the copy it replaces, removed after
 *   <dir>/sandboxes/.<id>.<worker>.del        a copy being removed
 *
 * Directories 0700, files 0600 (root's alone: they hold sandboxes' files).
 *
 * A worker copies every sandbox it holds suspended (after its suspend, or an
 * import fetched from another worker) on a background job, so that a copy
 * never holds up a request's job; a failed copy is logged, counted, and tried
 * again later (1 minute, doubling to an hour). The sandbox is not marked busy
 * meanwhile: a restore or a delete goes ahead, and the copy, stale then, is
 * removed when its job ends (store_token). A sandbox that runs again or goes
 * has its copy removed (a VM's memory state would be stale). A worker removes
 * only a copy whose holder it is — or, asked by the control plane, a copy
 * held by a worker that is gone — so that two workers never remove each
 * other's: an import from the store makes the importer the holder.
 *
 * Threading: the loop, but for the jobs' run(), which touch only their own
 * copies of paths and names.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node/artifact_files.h"
#include "node/node_internal.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define SCAN_S 30 /* how often suspended sandboxes without a copy are looked for */
#define RETRY_MIN_US (INT64_C(60) * 1000000)
#define RETRY_MAX_US (INT64_C(3600) * 1000000)
#define STORING_MAX 2 /* copies made at once */
#define MANIFEST_MAX (64 << 20)
#define COPY_DEPTH_MAX 10

static const char *const STORAGE_FILES[] = {"disk.ext4", "memory.state", "rootfs.tar"};

bool wk_node_has_artifact_store(const wk_node *n)
{
        return n->store_dir != NULL;
}

void wk__store_path(const wk_node *n, const char *id, char *out, size_t len)
{
        if (!n->store_dir) {
                if (len)
                        out[0] = '\0';
                return;
        }
        wk__path(out, len, "%s/sandboxes/%s", n->store_dir, id);
}

/* <dir>/sandboxes/.<id>.<this worker>.<what> */
static void temp_path(const wk_node *n, const char *id, const char *what, char *out, size_t len)
{
        wk__path(out, len, "%s/sandboxes/.%s.%s.%s", n->store_dir, id, n->node_id, what);
}

static void sync_dir(const char *dir)
{
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0)
                (void)fsync(fd);
}

/* ---- copying files ---- */

/* The blocks of in with data into out, holes and zero blocks left out. */
static int copy_blocks(int in, int out, uint64_t size, sp_error **err)
{
        _cleanup_free_ char *buf = malloc(WK_ARTIFACT_BLOCK);
        if (!buf)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (ftruncate(out, (off_t)size) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "size the copy");
        uint64_t off = 0;
        for (;;) {
                size_t len = 0;
                int r = wk_artifact_next_block(in, off, size, &off, buf, &len, err);
                if (r <= 0)
                        return r;
                for (size_t done = 0; done < len;) {
                        ssize_t w = pwrite(out, buf + done, len - done, (off_t)(off + done));
                        if (w < 0 && errno == EINTR)
                                continue;
                        if (w <= 0)
                                return sp_error_set_errno(err, SP_E_IO, w < 0 ? errno : ENOSPC, "write the copy");
                        done += (size_t)w;
                }
                off += WK_ARTIFACT_BLOCK;
        }
}

int wk__file_copy(const char *from, const char *to, sp_error **err)
{
        _cleanup_close_ int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", from);
        struct stat st;
        if (fstat(in, &st) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", from);
        if (!S_ISREG(st.st_mode))
                return sp_error_set(err, SP_E_IO, "%s is not a regular file", from);
        _cleanup_close_ int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create %s", to);
        /* A reflink where both ends are one filesystem that shares extents
         * (btrfs, XFS): no data is copied. Anything else copies blocks. */
        int r = 0;
        if (ioctl(out, FICLONE, in) < 0)
                r = copy_blocks(in, out, (uint64_t)st.st_size, err);
        if (r == 0 && fsync(out) < 0)
                r = sp_error_set_errno(err, SP_E_IO, errno, "sync %s", to);
        if (r < 0) {
                unlink(to);
                return sp_error_wrap(err, "copy %s", from);
        }
        return 0;
}

/* The state directory at from (but run/ at its top) into to, files and
 * directories only. A file that goes while it is read is left out: the
 * manifest is made from what was copied. */
static int copy_tree(const char *from, const char *to, unsigned depth, sp_error **err)
{
        if (depth > COPY_DEPTH_MAX)
                return 0;
        if (mkdir(to, 0700) < 0 && errno != EEXIST)
                return sp_error_set_errno(err, SP_E_IO, errno, "make %s", to);
        _cleanup_closedir_ DIR *d = opendir(from);
        if (!d)
                return errno == ENOENT ? 0 : sp_error_set_errno(err, SP_E_IO, errno, "open %s", from);
        struct dirent *de;
        while ((de = readdir(d))) {
                const char *nm = de->d_name;
                if (strcmp(nm, ".") == 0 || strcmp(nm, "..") == 0 || (depth == 0 && strcmp(nm, "run") == 0))
                        continue;
                char a[PATH_MAX], b[PATH_MAX];
                wk__path(a, sizeof(a), "%s/%s", from, nm);
                wk__path(b, sizeof(b), "%s/%s", to, nm);
                struct stat st;
                if (lstat(a, &st) < 0)
                        continue;
                int r = 0;
                if (S_ISDIR(st.st_mode)) {
                        r = copy_tree(a, b, depth + 1, err);
                } else if (S_ISREG(st.st_mode)) {
                        _cleanup_error_ sp_error *e = NULL;
                        r = wk__file_copy(a, b, &e);
                        if (r < 0 && access(a, F_OK) < 0 && errno == ENOENT)
                                r = 0;
                        else if (r < 0)
                                sp_error_move(err, &e);
                }
                if (r < 0)
                        return r;
        }
        sync_dir(to);
        return 0;
}

static bool holder_is(const char *dir, const char *holder)
{
        char p[PATH_MAX];
        wk__path(p, sizeof(p), "%s/holder", dir);
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(p, 256, &b, NULL) < 0)
                return false;
        while (b.len > 0 && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == ' '))
                b.data[--b.len] = '\0';
        return strcmp(b.data, holder) == 0;
}

int wk__store_holder_write(const char *dir, const char *holder, sp_error **err)
{
        char p[PATH_MAX], text[WK_NAME_MAX + 2];
        wk__path(p, sizeof(p), "%s/holder", dir);
        snprintf(text, sizeof(text), "%s\n", holder);
        return sp_file_write_atomic(p, text, strlen(text), 0600, err);
}

/* ---- removing a copy ---- */

typedef struct remove_job {
        wk_job job;
        wk_node *node;
        char id[WK_NAME_MAX + 1], holder[WK_NAME_MAX + 1];
        char dir[PATH_MAX], trash[PATH_MAX];
        bool removed;
        sp_error *err;
        wk_node_done_fn done;
        void *ud;
} remove_job;

static void remove_run(wk_job *j)
{
        remove_job *x = (remove_job *)j;
        if (!holder_is(x->dir, x->holder))
                return; /* none, or another worker's */
        if (rename(x->dir, x->trash) < 0) {
                if (errno != ENOENT)
                        sp_error_set_errno(&x->err, SP_E_IO, errno, "remove the stored copy of %s", x->id);
                return;
        }
        /* Another worker may have put its own copy in place between the look
         * and the rename: that one is not ours to remove. */
        if (!holder_is(x->trash, x->holder) && rename(x->trash, x->dir) == 0)
                return;
        wk__tree_remove(x->trash);
        x->removed = true;
}

static void remove_done(wk_job *j)
{
        remove_job *x = (remove_job *)j;
        if (j->cancelled)
                sp_error_set(&x->err, SP_E_UNAVAILABLE, "remove the stored copy of %s: the worker is shutting down",
                             x->id);
        if (x->removed) {
                x->node->store_removed++;
                sp_log_info_kv(SP_KV("sandbox_id", x->id), "artifact store: removed its copy (held by %s)", x->holder);
        } else if (x->err) {
                sp_log_warn_kv(SP_KV("sandbox_id", x->id), "artifact store: %s", x->err->message);
        }
        if (x->done)
                x->done(x->err, x->ud);
        sp_error_free(x->err);
        free(x);
}

static int remove_submit(wk_node *n, const char *id, const char *holder, bool background, wk_node_done_fn done,
                         void *ud)
{
        remove_job *x = calloc(1, sizeof(*x));
        if (!x)
                return -SP_E_LIMIT;
        x->job = (wk_job){.kind = "store-remove", .run = remove_run, .done = remove_done, .background = background};
        x->node = n;
        x->done = done;
        x->ud = ud;
        snprintf(x->id, sizeof(x->id), "%s", id);
        snprintf(x->holder, sizeof(x->holder), "%s", holder);
        wk__store_path(n, id, x->dir, sizeof(x->dir));
        temp_path(n, id, "del", x->trash, sizeof(x->trash));
        wk_jobs_submit(n->jobs, &x->job);
        return 0;
}

/* ---- making a copy ---- */

struct wk__store_job {
        wk_job job;
        wk_node *node;
        wk__artifacts a;
        uint64_t token;
        char src_state[PATH_MAX], src_storage[PATH_MAX];
        char stage[PATH_MAX], dest[PATH_MAX], old[PATH_MAX], parent[PATH_MAX];
        char holder[WK_NAME_MAX + 1];
        struct wk__store_job *next;
};
typedef struct wk__store_job store_job;

static bool storing(const wk_node *n, const char *id)
{
        for (const store_job *x = n->storing; x; x = x->next)
                if (strcmp(x->a.id, id) == 0)
                        return true;
        return false;
}

/* Stages the copy, makes its manifest from what was copied, then puts it in
 * place whole. */
static int store_copy(store_job *x)
{
        wk__artifacts *a = &x->a;
        wk__path(a->state, sizeof(a->state), "%s/state", x->stage);
        wk__path(a->storage, sizeof(a->storage), "%s/storage", x->stage);
        if (mkdir(x->stage, 0700) < 0 || mkdir(a->storage, 0700) < 0)
                return sp_error_set_errno(&a->err, SP_E_IO, errno, "make the staging directory");
        if (copy_tree(x->src_state, a->state, 0, &a->err) < 0)
                return -1;
        for (size_t i = 0; i < SP_ARRAY_SIZE(STORAGE_FILES); i++) {
                char from[PATH_MAX], to[PATH_MAX];
                wk__path(from, sizeof(from), "%s/%s", x->src_storage, STORAGE_FILES[i]);
                wk__path(to, sizeof(to), "%s/%s", a->storage, STORAGE_FILES[i]);
                /* A jail's rootfs.tar is there when an export made it for this suspend: taken as it is;
                 * else the artifacts' make packs it straight into the copy. */
                if (access(from, F_OK) == 0 && wk__file_copy(from, to, &a->err) < 0)
                        return -1;
        }
        wk__artifacts_make(a);
        if (a->err)
                return -1;
        _cleanup_json_ json_object *m = wk__artifacts_manifest(a);
        char p[PATH_MAX];
        wk__path(p, sizeof(p), "%s/manifest.json", x->stage);
        const char *text = sp_json_str(m);
        if (sp_file_write_atomic(p, text, strlen(text), 0600, &a->err) < 0 ||
            wk__store_holder_write(x->stage, x->holder, &a->err) < 0)
                return -1;
        sync_dir(a->storage);
        sync_dir(x->stage);
        /* Whole or not at all: the older copy (whoever's) goes aside, this one in. */
        wk__tree_remove(x->old);
        if (rename(x->dest, x->old) < 0 && errno != ENOENT)
                return sp_error_set_errno(&a->err, SP_E_IO, errno, "move the older copy aside");
        if (rename(x->stage, x->dest) < 0) {
                int e = errno;
                (void)rename(x->old, x->dest);
                return sp_error_set_errno(&a->err, SP_E_IO, e, "put the copy in place");
        }
        sync_dir(x->parent);
        wk__tree_remove(x->old);
        return 0;
}

static void store_run(wk_job *j)
{
        store_job *x = (store_job *)j;
        /* What an earlier attempt (or a crash) left of this worker's staging. */
        wk__tree_remove(x->stage);
        if (store_copy(x) < 0) {
                wk__tree_remove(x->stage);
                sp_error_wrap(&x->a.err, "copy %s into the artifact store", x->a.id);
        }
}

static void scan(wk_node *n);

static void store_done(wk_job *j)
{
        store_job *x = (store_job *)j;
        wk_node *n = x->node;
        for (store_job **p = &n->storing; *p; p = &(*p)->next)
                if (*p == x) {
                        *p = x->next;
                        n->nstoring--;
                        break;
                }
        wk_sandbox *sb = wk_node_sandbox_find(n, x->a.id);
        bool current = sb && x->token && sb->store_token == x->token && sb->state == WK_SB_SUSPENDED && !sb->deleting &&
                       !sb->warm;
        if (sb && current)
                sb->store_token = 0;
        if (j->cancelled) {
                /* Never ran: nothing was made. */
        } else if (!current) {
                /* It ran again or went meanwhile: what was made is stale. */
                n->store_stale++;
                if (!x->a.err && remove_submit(n, x->a.id, x->holder, true, NULL, NULL) < 0)
                        sp_log_warn_kv(SP_KV("sandbox_id", x->a.id), "artifact store: out of memory");
        } else if (x->a.err) {
                n->store_failed++;
                int64_t wait = RETRY_MIN_US << (sb->store_failures < 6 ? sb->store_failures : 6);
                if (wait > RETRY_MAX_US)
                        wait = RETRY_MAX_US;
                sb->store_failures++;
                sb->store_retry_us = sp_now_mono_us() + wait;
                sp_log_warn_kv(SP_KV("sandbox_id", x->a.id), "artifact store: %s (tried again in %lld s)",
                               x->a.err->message, (long long)(wait / 1000000));
        } else {
                n->store_ok++;
                sb->stored = true;
                sb->stored_bytes = x->a.bytes > 0 ? x->a.bytes : 1;
                sb->store_failures = 0;
                sb->store_retry_us = 0;
                _cleanup_error_ sp_error *e = NULL;
                if (wk__sandbox_persist(sb, &e) < 0)
                        sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "its record: %s", e->message);
                sp_log_info_kv(SP_KV("sandbox_id", x->a.id), "artifact store: stored (%zu files, %lld bytes)",
                               json_object_array_length(x->a.files), (long long)x->a.bytes);
        }
        bool cancelled = j->cancelled; /* j is x's: gone after the free */
        wk__artifacts_clear(&x->a);
        free(x);
        if (!cancelled)
                scan(n);
}

static int store_start(wk_node *n, wk_sandbox *sb)
{
        store_job *x = calloc(1, sizeof(*x));
        if (!x || wk__artifacts_init(&x->a, n, sb) < 0) {
                free(x);
                return -SP_E_LIMIT;
        }
        x->job = (wk_job){.kind = "store", .run = store_run, .done = store_done, .background = true};
        x->node = n;
        snprintf(x->src_state, sizeof(x->src_state), "%s", x->a.state);
        snprintf(x->src_storage, sizeof(x->src_storage), "%s", x->a.storage);
        snprintf(x->holder, sizeof(x->holder), "%s", n->node_id);
        wk__store_path(n, sb->id, x->dest, sizeof(x->dest));
        temp_path(n, sb->id, "tmp", x->stage, sizeof(x->stage));
        temp_path(n, sb->id, "old", x->old, sizeof(x->old));
        wk__path(x->parent, sizeof(x->parent), "%s/sandboxes", n->store_dir);
        x->token = sb->store_token = ++n->store_tokens;
        x->next = n->storing;
        n->storing = x;
        n->nstoring++;
        wk_jobs_submit(n->jobs, &x->job);
        return 0;
}

/* Starts copies of the suspended sandboxes that have none, a few at a time. */
static void scan(wk_node *n)
{
        int64_t now = sp_now_mono_us();
        for (wk_sandbox *sb = n->sandboxes; sb && n->nstoring < STORING_MAX; sb = sb->next) {
                if (sb->warm || sb->state != WK_SB_SUSPENDED || sb->busy || sb->deleting || sb->stored ||
                    now < sb->store_retry_us || storing(n, sb->id))
                        continue;
                if (store_start(n, sb) < 0)
                        break;
        }
}

static void on_timer(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_node *n = ud;
        scan(n);
        struct timeval tv = {SCAN_S, 0};
        evtimer_add(n->store_timer, &tv);
}

void wk__store_want(wk_node *n)
{
        if (!n->store_dir || !n->store_timer)
                return;
        struct timeval now = {0, 0};
        evtimer_add(n->store_timer, &now);
}

void wk__store_drop(wk_sandbox *sb)
{
        wk_node *n = sb->node;
        if (!n->store_dir)
                return;
        bool had = sb->stored;
        sb->stored = false;
        sb->stored_bytes = 0;
        sb->store_token = 0;
        sb->store_failures = 0;
        sb->store_retry_us = 0;
        if (had) {
                _cleanup_error_ sp_error *e = NULL;
                if (wk__sandbox_persist(sb, &e) < 0)
                        sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "its record: %s", e->message);
        }
        /* A copy under way is removed when it ends (store_done: stale). */
        if (storing(n, sb->id) || (!had && sb->state != WK_SB_SUSPENDED))
                return;
        if (remove_submit(n, sb->id, n->node_id, true, NULL, NULL) < 0)
                sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "artifact store: out of memory: its copy stays");
}

/* ---- the store's copies, for the RPC ---- */

typedef struct read_job {
        wk_job job;
        wk_node *node;
        char id[WK_NAME_MAX + 1], dir[PATH_MAX];
        json_object *spec; /* its own reference, or NULL */
        json_object *manifest;
        sp_error *err;
        wk_node_import_done_fn done;
        void *ud;
} read_job;

static void read_run(wk_job *j)
{
        read_job *x = (read_job *)j;
        char p[PATH_MAX];
        wk__path(p, sizeof(p), "%s/manifest.json", x->dir);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_file_read(p, MANIFEST_MAX, &text, &e) < 0) {
                if (access(p, F_OK) < 0 && errno == ENOENT)
                        sp_error_set(&x->err, SP_E_PRECONDITION, "the artifact store holds no copy of sandbox %s",
                                     x->id);
                else
                        sp_error_set(&x->err, SP_E_IO, "the artifact store's manifest of %s: %s", x->id, e->message);
                return;
        }
        if (sp_json_parse(text.data, text.len, &x->manifest, &e) < 0)
                sp_error_set(&x->err, SP_E_IO, "the artifact store's manifest of %s: %s", x->id, e->message);
}

static void read_done(wk_job *j)
{
        read_job *x = (read_job *)j;
        wk_node *n = x->node;
        if (j->cancelled)
                sp_error_set(&x->err, SP_E_UNAVAILABLE, "import %s: the worker is shutting down", x->id);
        wk_node_import *imp = NULL;
        int r = x->err ? -1 : wk_node_import_begin(n, x->id, x->manifest, x->spec, &imp, &x->err);
        if (r < 0) {
                sp_log_warn_kv(SP_KV("sandbox_id", x->id), "import from the artifact store: %s", x->err->message);
                x->done(NULL, x->err, x->ud);
        } else if (r == 1) {
                wk_sandbox *sb = wk_node_sandbox_find(n, x->id);
                if (!sb)
                        sp_error_set(&x->err, SP_E_INTERNAL, "sandbox %s vanished", x->id);
                x->done(sb, x->err, x->ud);
        } else {
                sp_log_info_kv(SP_KV("sandbox_id", x->id), "importing from the artifact store: %zu files",
                               wk_node_import_count(imp));
                wk__import_from_store(imp, x->dir);
                wk_node_import_finish(imp, x->done, x->ud);
        }
        json_object_put(x->spec);
        json_object_put(x->manifest);
        sp_error_free(x->err);
        free(x);
}

int wk_node_store_import(wk_node *n, const char *id, json_object *spec, wk_node_import_done_fn done, void *ud,
                         sp_error **err)
{
        if (!n->store_dir)
                return sp_error_set(err, SP_E_PRECONDITION, "this worker has no artifact store");
        if (wk_rootfs_name_validate("sandbox id", id, err) < 0)
                return -SP_E_INVALID;
        read_job *x = calloc(1, sizeof(*x));
        if (!x)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        x->job = (wk_job){.kind = "store-read", .run = read_run, .done = read_done};
        x->node = n;
        x->spec = spec ? json_object_get(spec) : NULL;
        x->done = done;
        x->ud = ud;
        snprintf(x->id, sizeof(x->id), "%s", id);
        wk__store_path(n, id, x->dir, sizeof(x->dir));
        wk_jobs_submit(n->jobs, &x->job);
        return 1;
}

int wk_node_store_forget(wk_node *n, const char *id, const char *holder, wk_node_done_fn done, void *ud, sp_error **err)
{
        if (!n->store_dir)
                return sp_error_set(err, SP_E_PRECONDITION, "this worker has no artifact store");
        if (wk_rootfs_name_validate("sandbox id", id, err) < 0)
                return -SP_E_INVALID;
        if (!*holder || strlen(holder) > WK_NAME_MAX || strchr(holder, '/') || strchr(holder, '\n'))
                return sp_error_set(err, SP_E_INVALID, "field 'holder' must name a worker");
        if (wk__sandbox_find_any(n, id) && strcmp(holder, n->node_id) == 0)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is this worker's: delete it instead", id);
        if (remove_submit(n, id, holder, false, done, ud) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 1;
}

/* ---- the node's store ---- */

int wk__store_open(wk_node *n, const char *dir, sp_error **err)
{
        char p[PATH_MAX];
        wk__path(p, sizeof(p), "%s/sandboxes", dir);
        if (sp_mkdir_p(p, 0700, err) < 0)
                return sp_error_wrap(err, "the artifact store");
        struct stat st;
        if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "the artifact store %s is not a directory", dir);
        if (!(n->store_dir = strdup(dir)) || !(n->store_timer = evtimer_new(n->base, on_timer, n)))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

void wk__store_start(wk_node *n)
{
        if (!n->store_timer)
                return;
        sp_log_info("artifact store: %s", n->store_dir);
        wk__store_want(n);
}

void wk__store_free(wk_node *n)
{
        if (n->store_timer)
                event_free(n->store_timer);
        n->store_timer = NULL;
        free(n->store_dir);
        n->store_dir = NULL;
}

void wk__store_metrics(wk_node *n, sp_buf *out)
{
        if (!n->store_dir)
                return;
        int64_t stored = 0;
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                stored += sb->stored && sb->state == WK_SB_SUSPENDED;
        sp_buf_appendf(out, NULL,
                       "# HELP space_worker_artifact_store_total Copies of suspended sandboxes made for the artifact "
                       "store, by result (stale: the sandbox ran again or went while it was copied).\n"
                       "# TYPE space_worker_artifact_store_total counter\n"
                       "space_worker_artifact_store_total{result=\"ok\"} %llu\n"
                       "space_worker_artifact_store_total{result=\"failed\"} %llu\n"
                       "space_worker_artifact_store_total{result=\"stale\"} %llu\n"
                       "# HELP space_worker_artifact_store_removed_total Copies removed from the artifact store.\n"
                       "# TYPE space_worker_artifact_store_removed_total counter\n"
                       "space_worker_artifact_store_removed_total %llu\n"
                       "# HELP space_worker_artifact_store_sandboxes Suspended sandboxes of this worker whose copy "
                       "in the artifact store is whole.\n"
                       "# TYPE space_worker_artifact_store_sandboxes gauge\n"
                       "space_worker_artifact_store_sandboxes %lld\n",
                       (unsigned long long)n->store_ok, (unsigned long long)n->store_failed,
                       (unsigned long long)n->store_stale, (unsigned long long)n->store_removed, (long long)stored);
}
