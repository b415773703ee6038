/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Uploaded templates: receiving an archive into <storage>/artifacts, importing
 * it, keeping it as the template's artifact, and cleaning up after uploads
 * that a crash cut short.
 *
 * An upload writes artifacts/<name>.part; once whole it is synced and renamed
 * to artifacts/<name>, which the tarball importer reads (tar), or which is
 * first unpacked into the scratch subvolume artifacts/<name>.unpack for the
 * OCI importer (oci). Whatever fails, nothing of the upload stays: the
 * template's own cleanup is the import's (import.c).
 *
 * Receiving runs on the daemon's loop (writes are synchronous); syncing,
 * renaming, unpacking and importing the archive run on the import's thread
 * (import.c), which is given paths computed here and never the node.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node/node_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define PART_SUFFIX ".part"
#define SCRATCH_SUFFIX ".unpack"

struct wk_upload {
        wk_node *node;
        char name[WK_NAME_MAX + 1];
        char part[WK_NAME_MAX + sizeof(SCRATCH_SUFFIX)]; /* <name>.part */
        wk_template_source format;
        uint64_t max_bytes, bytes;
        uint64_t room_checked; /* bytes written when the pool's free space was last looked at */
        uint64_t max_stored; /* archive and files together (0: no bound but the node's) */
        int fd; /* the .part file (-1 once the template was deleted) */
        bool deleted; /* the template was deleted: the upload fails at its next write or its end */
        struct wk_upload *next;
};

static bool has_suffix(const char *s, const char *suffix)
{
        size_t n = strlen(s), m = strlen(suffix);
        return n >= m && strcmp(s + n - m, suffix) == 0;
}

uint64_t wk_node_upload_max_bytes(const wk_node *n)
{
        return n->cfg.template_limits.max_bytes ? n->cfg.template_limits.max_bytes : WK_TEMPLATE_DEFAULT_MAX_BYTES;
}

bool wk__upload_under_way(wk_node *n, const char *name)
{
        for (wk_upload *u = n->uploads; u; u = u->next)
                if (strcmp(u->name, name) == 0)
                        return true;
        return false;
}

static void unlink_upload(wk_upload *u)
{
        for (wk_upload **p = &u->node->uploads; *p; p = &(*p)->next)
                if (*p == u) {
                        *p = u->next;
                        break;
                }
}

/* Removes artifacts/<name><suffix>, logging a failure (the next start retries). */
static void remove_entry(wk_node *n, const char *name, const char *suffix)
{
        char entry[WK_NAME_MAX + sizeof(SCRATCH_SUFFIX)];
        snprintf(entry, sizeof(entry), "%s%s", name, suffix);
        _cleanup_error_ sp_error *e = NULL;
        if (wk_storage_artifact_remove(n->storage, entry, &e) < 0)
                sp_log_warn_kv(SP_KV("template", name), "removing upload file %s: %s", entry, e->message);
}

bool wk__upload_cancel(wk_node *n, const char *name)
{
        wk_upload *u = n->uploads;
        while (u && strcmp(u->name, name) != 0)
                u = u->next;
        if (!u)
                return false;
        if (!u->deleted) {
                u->deleted = true;
                u->fd = sp_close(u->fd);
                remove_entry(n, u->name, PART_SUFFIX);
                sp_log_info_kv(SP_KV("template", name), "template deleted while it was being uploaded");
        }
        return true;
}

static int upload_deleted(const wk_upload *u, sp_error **err)
{
        return sp_error_set(err, SP_E_NOT_FOUND, "template %s was deleted while it was being uploaded", u->name);
}

int wk_node_upload_begin(wk_node *n, const char *name, const char *format, uint64_t max_bytes, uint64_t max_stored,
                         wk_upload **ret, sp_error **err)
{
        if (!wk__template_name_ok(name))
                return sp_error_set(err, SP_E_INVALID, "invalid template name '%.64s' (1-64 of [A-Za-z0-9._-])", name);
        if (has_suffix(name, PART_SUFFIX) || has_suffix(name, SCRATCH_SUFFIX))
                return sp_error_set(err, SP_E_INVALID,
                                    "template name '%s' ends like the upload's own files (" PART_SUFFIX
                                    ", " SCRATCH_SUFFIX ")",
                                    name);
        wk_template_source f;
        if (wk_template_source_parse(format, &f) < 0 || (f != WK_TEMPLATE_SOURCE_TAR && f != WK_TEMPLATE_SOURCE_OCI))
                return sp_error_set(err, SP_E_INVALID, "unknown upload format '%.16s' (tar, oci)", format);
        uint64_t limit = wk_node_upload_max_bytes(n);
        if (max_bytes > limit)
                return sp_error_set(err, SP_E_INVALID, "max_bytes %llu is more than this worker's %llu",
                                    (unsigned long long)max_bytes, (unsigned long long)limit);
        if (wk__template_find(n, name))
                return sp_error_set(err, SP_E_CONFLICT, "template %s already exists", name);
        if (wk__upload_under_way(n, name))
                return sp_error_set(err, SP_E_CONFLICT, "template %s is being uploaded", name);
        /* No room in the pool (less its reserve): refused before a byte is read. */
        wk__bound room;
        if (wk__import_bound(n, 0, 0, &room, err) < 0)
                return sp_error_wrap(err, "template %s", name);
        wk_upload *u = calloc(1, sizeof(*u));
        if (!u)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        u->node = n;
        u->format = f;
        u->max_bytes = max_bytes ? max_bytes : limit;
        /* The archive alone cannot be more than the template may hold. */
        if (max_stored && max_stored < u->max_bytes)
                u->max_bytes = max_stored;
        u->max_stored = max_stored;
        snprintf(u->name, sizeof(u->name), "%s", name);
        snprintf(u->part, sizeof(u->part), "%s" PART_SUFFIX, name);
        _cleanup_free_ char *path = wk_storage_artifact_path(n->storage, u->part, err);
        if (!path) {
                free(u);
                return -SP_E_INVALID;
        }
        /* A leftover of the same name can only be a stale partial file: replace it. */
        u->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (u->fd < 0) {
                int r = sp_error_set_errno(err, SP_E_IO, errno, "create the upload file of template %s", name);
                free(u);
                return r;
        }
        u->next = n->uploads;
        n->uploads = u;
        sp_log_info_kv(SP_KV("template", name), "receiving a template upload (%s, at most %llu bytes)", format,
                       (unsigned long long)u->max_bytes);
        *ret = u;
        return 0;
}

int wk_upload_write(wk_upload *u, const void *p, size_t n, sp_error **err)
{
        if (u->deleted)
                return upload_deleted(u, err);
        if (n > u->max_bytes - u->bytes)
                return sp_error_set(err, SP_E_TOO_LARGE, "the upload is larger than its %llu bytes",
                                    (unsigned long long)u->max_bytes);
        /* The archive is bounded by the pool's free space less the reserve too
         * (several uploads at once, each within its tenant's storage, could
         * otherwise fill the pool): looked at again every WK__UPLOAD_ROOM_STEP. */
        if (u->bytes + n - u->room_checked >= WK__UPLOAD_ROOM_STEP || u->bytes == 0) {
                /* Written but not yet allocated (delayed allocation) is not
                 * in the free space the filesystem reports: sync first. The
                 * archive is synced once whole anyway (seal_artifact). */
                if (u->bytes && fdatasync(u->fd) < 0)
                        return sp_error_set_errno(err, errno == ENOSPC || errno == EDQUOT ? SP_E_LIMIT : SP_E_IO, errno,
                                                  "write the upload of template %s", u->name);
                wk__bound room;
                if (wk__import_bound(u->node, 0, 0, &room, err) < 0 ||
                    (n > room.max_bytes && wk__bound_refuse(&room, err) < 0))
                        return sp_error_wrap(err, "template %s", u->name);
                u->room_checked = u->bytes + n;
        }
        const char *c = p;
        while (n) {
                ssize_t w = write(u->fd, c, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return sp_error_set_errno(err, errno == ENOSPC || errno == EDQUOT ? SP_E_LIMIT : SP_E_IO, errno,
                                                  "write the upload of template %s", u->name);
                c += w;
                n -= (size_t)w;
                u->bytes += (uint64_t)w;
        }
        return 0;
}

static void upload_free(wk_upload *u)
{
        unlink_upload(u);
        sp_close(u->fd);
        free(u);
}

void wk_upload_abort(wk_upload *u)
{
        if (!u)
                return;
        wk_node *n = u->node;
        uint64_t bytes = u->bytes;
        remove_entry(n, u->name, PART_SUFFIX);
        sp_log_info_kv(SP_KV("template", u->name), "template upload abandoned after %llu bytes",
                       (unsigned long long)bytes);
        upload_free(u); /* closes the file: its space is free from the next commit */
        /* btrfs gives a removed file's space back at its next commit: commit
         * now, so that the pool's free space (which bounds the next upload)
         * counts it at once. */
        _cleanup_error_ sp_error *se = NULL;
        if (bytes >= WK__UPLOAD_ROOM_STEP && wk_subvol_sync(n->storage->dir, &se) < 0)
                sp_log_warn("committing the storage after an abandoned upload: %s", se->message);
}

void wk__uploads_abort_all(wk_node *n)
{
        while (n->uploads)
                wk_upload_abort(n->uploads);
}

/* What the import's thread needs, computed on the loop: it never touches the node. */
typedef struct {
        wk_template_source format;
        int fd; /* the .part file, written; then the artifact, for reading */
        char *part, *final, *scratch; /* paths of <name>.part, <name>, <name>.unpack */
        wk_template_limits lim; /* one deadline for syncing, unpacking and importing */
        wk__pool_watch pool; /* lim.room's: the pool's free space while the importers write */
} fill_args;

static void fill_args_free(void *ud)
{
        fill_args *a = ud;
        if (!a)
                return;
        sp_close(a->fd);
        free(a->part);
        free(a->final);
        free(a->scratch);
        free(a);
}

/* OCI: the archive is a tar of an image layout; unpack it into the scratch
 * subvolume (the tarball importer's path safety and limits), then import the
 * layout from there. The scratch copy holds the pool's space until it goes:
 * the layout's import is bounded by what is free once it is written. The
 * scratch subvolume goes in every case. */
static int fill_oci(const char *dest, fill_args *a, wk_template_meta **ret, sp_error **err)
{
        _cleanup_error_ sp_error *e = NULL;
        /* A subvolume: removed in one call however deep the archive's tree. */
        if (access(a->scratch, F_OK) == 0 && wk_subvol_delete(a->scratch, err) < 0)
                return sp_error_wrap(err, "scratch directory");
        if (wk_subvol_create(a->scratch, err) < 0)
                return sp_error_wrap(err, "scratch directory");
        int r = wk_template_import_tar_fd(a->fd, a->scratch, &a->lim, NULL, NULL, err);
        if (r < 0) {
                sp_error_wrap(err, "unpack the OCI archive");
        } else {
                _cleanup_close_ int lfd = open(a->scratch, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                uint64_t room = 0;
                if (lfd < 0)
                        r = sp_error_set_errno(err, SP_E_IO, errno, "open the unpacked OCI archive");
                else if ((r = wk__pool_room(lfd, a->pool.reserve, &room, err)) >= 0) {
                        wk__bound_narrow(a->pool.bound, room);
                        if (a->pool.bound->max_bytes == 0)
                                r = wk__bound_refuse(a->pool.bound, err);
                }
                if (r >= 0) {
                        a->lim.max_bytes = a->pool.bound->max_bytes;
                        r = wk_template_import_oci_fd(lfd, dest, NULL, &a->lim, NULL, ret, err);
                }
        }
        if (wk_subvol_delete(a->scratch, &e) < 0)
                sp_log_warn("removing the scratch directory of an OCI upload: %s", e->message);
        return r;
}

/* Syncs the partial file and renames it to the artifact; a->fd becomes the
 * artifact, opened for reading. */
static int seal_artifact(fill_args *a, sp_error **err)
{
        if (fsync(a->fd) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "sync the upload");
        a->fd = sp_close(a->fd);
        if (rename(a->part, a->final) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "rename the upload");
        /* The rename reaches the disk before the template records the artifact. */
        char *slash = strrchr(a->final, '/');
        *slash = '\0';
        _cleanup_close_ int dfd = open(a->final, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        *slash = '/';
        if (dfd < 0 || fsync(dfd) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "sync the artifacts directory");
        a->fd = open(a->final, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (a->fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open the artifact");
        return 0;
}

/* On the import's thread. */
static int fill_upload(const char *dest, void *ud, const wk__fill_ctx *ctx, wk_template_meta **ret, sp_error **err)
{
        fill_args *a = ud;
        a->lim.cancel = ctx->cancel;
        a->pool.bound = ctx->bound;
        if (seal_artifact(a, err) < 0)
                return -SP_E_IO;
        if (a->format == WK_TEMPLATE_SOURCE_TAR)
                return wk_template_import_tar_fd(a->fd, dest, &a->lim, NULL, ret, err);
        return fill_oci(dest, a, ret, err);
}

/* On the loop, when the import failed: nothing of the upload stays. */
static void upload_failed(wk_node *n, const char *name, void *ud)
{
        (void)ud;
        remove_entry(n, name, PART_SUFFIX);
        remove_entry(n, name, SCRATCH_SUFFIX);
        remove_entry(n, name, "");
}

int wk_upload_finish(wk_upload *u, const wk_import_ops *ops, void *userdata, wk_import **ret, uint64_t *ret_bytes,
                     sp_error **err)
{
        wk_node *n = u->node;
        if (u->deleted) {
                upload_deleted(u, err);
                wk_upload_abort(u);
                return -SP_E_NOT_FOUND;
        }
        char name[WK_NAME_MAX + 1], scratch[WK_NAME_MAX + sizeof(SCRATCH_SUFFIX)];
        snprintf(name, sizeof(name), "%s", u->name);
        snprintf(scratch, sizeof(scratch), "%s" SCRATCH_SUFFIX, name);
        uint64_t bytes = u->bytes;
        /* The archive stays beside the template: it counts against the
         * caller's bound, and it is already out of the pool's free space. */
        wk__bound bound;
        if (wk__import_bound(n, u->max_stored, bytes, &bound, err) < 0) {
                wk_upload_abort(u);
                return sp_error_wrap(err, "upload of template %s", name);
        }
        fill_args *a = calloc(1, sizeof(*a));
        if (!a) {
                wk_upload_abort(u);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        a->format = u->format;
        a->lim = n->cfg.template_limits;
        a->lim.max_bytes = bound.max_bytes;
        a->lim.room = wk__pool_room_check;
        a->lim.room_ud = &a->pool;
        a->pool.reserve = n->cfg.storage_reserve;
        if (!a->lim.max_seconds)
                a->lim.max_seconds = WK_TEMPLATE_DEFAULT_MAX_SECONDS;
        a->lim.deadline_us = sp_now_mono_us() + (int64_t)a->lim.max_seconds * 1000000;
        a->fd = TAKE_FD(u->fd);
        a->part = wk_storage_artifact_path(n->storage, u->part, err);
        a->final = a->part ? wk_storage_artifact_path(n->storage, name, err) : NULL;
        a->scratch = a->final ? wk_storage_artifact_path(n->storage, scratch, err) : NULL;
        /* No longer under way as an upload: from here it is an import of that name. */
        upload_free(u);
        if (!a->scratch) {
                fill_args_free(a);
                upload_failed(n, name, NULL);
                return sp_error_wrap(err, "upload of template %s", name);
        }
        wk__import_spec spec = {.name = name,
                                .fill = fill_upload,
                                .fill_ud = a,
                                .fill_free = fill_args_free,
                                .on_fail = upload_failed,
                                .artifact_format = a->format,
                                .artifact_bytes = (int64_t)bytes,
                                .bound = bound};
        if (wk__import_start(n, &spec, ops, userdata, ret, err) < 0) {
                upload_failed(n, name, NULL);
                return sp_error_wrap(err, "upload of template %s", name);
        }
        sp_log_info_kv(SP_KV("template", name), "template upload received (%llu bytes): importing it",
                       (unsigned long long)bytes);
        *ret_bytes = bytes;
        return 0;
}

int wk_node_artifact_open(wk_node *n, const char *name, const char **ret_format, sp_error **err)
{
        wk_template *t = wk__template_find(n, name);
        if (!t || !t->artifact_format)
                return sp_error_set(err, SP_E_NOT_FOUND, "template %.64s has no upload artifact on this worker", name);
        _cleanup_free_ char *path = wk_storage_artifact_path(n->storage, name, err);
        if (!path)
                return -SP_E_INVALID;
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT)
                        return sp_error_set(err, SP_E_NOT_FOUND, "template %s has no upload artifact on this worker",
                                            name);
                return sp_error_set_errno(err, SP_E_IO, errno, "open the artifact of template %s", name);
        }
        *ret_format = wk_template_source_name(t->artifact_format);
        return fd;
}

json_object *wk_node_artifacts_json(wk_node *n)
{
        json_object *o = json_object_new_object();
        for (wk_template *t = n->templates; t; t = t->next)
                if (t->artifact_format)
                        json_object_object_add(o, t->name, json_object_new_int64(t->artifact_bytes));
        return o;
}

void wk__artifacts_recover(wk_node *n)
{
        char dir[PATH_MAX];
        wk__path(dir, sizeof(dir), "%s/artifacts", n->storage->dir);
        /* Templates whose artifact went missing keep working, without it. */
        for (wk_template *t = n->templates; t; t = t->next) {
                if (!t->artifact_format)
                        continue;
                char p[PATH_MAX];
                struct stat st;
                wk__path(p, sizeof(p), "%s/%s", dir, t->name);
                if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) {
                        t->artifact_bytes = st.st_size;
                        continue;
                }
                sp_log_warn_kv(SP_KV("template", t->name), "the template's upload artifact is missing");
                t->artifact_format = 0;
                t->artifact_bytes = 0;
        }
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d) {
                sp_log_warn("cannot read %s: %s", dir, strerror(errno));
                return;
        }
        struct dirent *de;
        while ((de = readdir(d))) {
                const char *entry = de->d_name;
                if (strcmp(entry, ".") == 0 || strcmp(entry, "..") == 0)
                        continue;
                wk_template *t = wk__template_find(n, entry);
                if (t && t->artifact_format)
                        continue;
                const char *why = has_suffix(entry, PART_SUFFIX) || has_suffix(entry, SCRATCH_SUFFIX)
                                          ? "left by an interrupted upload"
                                          : "without a template";
                _cleanup_error_ sp_error *e = NULL;
                if (wk_storage_artifact_remove(n->storage, entry, &e) < 0)
                        sp_log_warn("cannot remove %s/%s (%s): %s", dir, entry, why, e->message);
                else
                        sp_log_info("removed %s/%s (%s)", dir, entry, why);
        }
}
