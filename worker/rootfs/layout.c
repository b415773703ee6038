/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The storage layout: templates/<name>/rootfs, sandboxes/<id>/rootfs and
 * artifacts/<entry>.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "rootfs/internal.h"
#include "rootfs/rootfs.h"

#define ROOTFS_NAME "rootfs"
#define REMOVE_MAX_DEPTH 16

int wk_rootfs_name_validate(const char *what, const char *name, sp_error **err)
{
        if (!name || !*name)
                return sp_error_set(err, SP_E_INVALID, "%s is empty", what);
        size_t n = strnlen(name, WK_ROOTFS_NAME_MAX + 1);
        if (n > WK_ROOTFS_NAME_MAX)
                return sp_error_set(err, SP_E_INVALID, "%s is longer than %d bytes", what, WK_ROOTFS_NAME_MAX);
        for (size_t i = 0; i < n; i++) {
                char c = name[i];
                bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                          c == '-' || c == '.';
                if (!ok)
                        return sp_error_set(err, SP_E_INVALID, "%s has a character outside [A-Za-z0-9._-]", what);
        }
        if (name[0] == '.' || name[0] == '-')
                return sp_error_set(err, SP_E_INVALID, "%s must start with a letter, a digit or '_'", what);
        if (strstr(name, ".."))
                return sp_error_set(err, SP_E_INVALID, "%s must not contain \"..\"", what);
        return 0;
}

static char *layout_path(const wk_storage *st, const char *kind, const char *what, const char *name, const char *leaf,
                         sp_error **err)
{
        if (wk_rootfs_name_validate(what, name, err) < 0)
                return NULL;
        char *p = NULL;
        int r = leaf ? asprintf(&p, "%s/%s/%s/%s", st->dir, kind, name, leaf)
                     : asprintf(&p, "%s/%s/%s", st->dir, kind, name);
        if (r < 0)
                abort();
        return p;
}

char *wk_storage_template_dir(const wk_storage *st, const char *name, sp_error **err)
{
        return layout_path(st, "templates", "template name", name, NULL, err);
}

char *wk_storage_template_rootfs(const wk_storage *st, const char *name, sp_error **err)
{
        return layout_path(st, "templates", "template name", name, ROOTFS_NAME, err);
}

char *wk_storage_sandbox_dir(const wk_storage *st, const char *id, sp_error **err)
{
        return layout_path(st, "sandboxes", "sandbox id", id, NULL, err);
}

char *wk_storage_sandbox_rootfs(const wk_storage *st, const char *id, sp_error **err)
{
        return layout_path(st, "sandboxes", "sandbox id", id, ROOTFS_NAME, err);
}

/* Opens <storage>/<kind> (templates, sandboxes or artifacts). */
static int open_kind(const wk_storage *st, const char *kind, sp_error **err)
{
        char p[4096];
        snprintf(p, sizeof(p), "%s/%s", st->dir, kind);
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", p);
        return fd;
}

static int remove_entry(const wk_storage *st, const char *kind, const char *what, const char *name, sp_error **err)
{
        if (wk_rootfs_name_validate(what, name, err) < 0)
                return -SP_E_INVALID;
        _cleanup_close_ int fd = open_kind(st, kind, err);
        if (fd < 0)
                return fd;
        /* btrfs refuses to delete a subvolume at its quota (deleting needs room it
         * reserves against the quota): the limits of the entry and its rootfs go first. */
        static const char *const leaves[] = {NULL, ROOTFS_NAME};
        for (size_t i = 0; i < SP_ARRAY_SIZE(leaves); i++) {
                _cleanup_free_ char *p = layout_path(st, kind, what, name, leaves[i], NULL);
                bool sub = false;
                if (p && wk_subvol_is(p, &sub, NULL) == 0 && sub)
                        (void)wk_quota_set_limit(p, 0, NULL);
        }
        if (wk__remove_tree(fd, name, REMOVE_MAX_DEPTH, err) < 0)
                return sp_error_wrap(err, "deleting %s %s", what, name);
        return 0;
}

/* Makes <kind>/<name>/ (SP_E_CONFLICT if it exists) and returns its path:
 * with files_bytes, a subvolume whose quota is that (what is kept there
 * beside the rootfs counts against it), else a directory. */
static int make_entry_dir(const wk_storage *st, const char *kind, const char *what, const char *name,
                          uint64_t files_bytes, char **ret, sp_error **err)
{
        _cleanup_free_ char *dir = layout_path(st, kind, what, name, NULL, err);
        if (!dir)
                return -SP_E_INVALID;
        if (!files_bytes) {
                if (mkdir(dir, 0700) < 0) {
                        if (errno == EEXIST)
                                return sp_error_set(err, SP_E_CONFLICT, "%s %s already exists", what, name);
                        return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", dir);
                }
        } else {
                struct stat s;
                if (lstat(dir, &s) == 0)
                        return sp_error_set(err, SP_E_CONFLICT, "%s %s already exists", what, name);
                if (wk_subvol_create(dir, err) < 0)
                        return sp_error_wrap(err, "%s %s", what, name);
                int r = chmod(dir, 0700) < 0 ? sp_error_set_errno(err, SP_E_IO, errno, "chmod %s", dir)
                                             : wk_quota_set_limit(dir, files_bytes, err);
                if (r < 0) {
                        (void)remove_entry(st, kind, what, name, NULL);
                        return sp_error_wrap(err, "the quota of %s %s's files", what, name);
                }
        }
        *ret = TAKE_PTR(dir);
        return 0;
}

/* <kind>/<name>/rootfs as a new empty subvolume; nothing is left on failure. */
static int make_entry_subvol(const wk_storage *st, const char *kind, const char *what, const char *name,
                             uint64_t files_bytes, char **ret_rootfs, sp_error **err)
{
        _cleanup_free_ char *dir = NULL;
        int r = make_entry_dir(st, kind, what, name, files_bytes, &dir, err);
        if (r < 0)
                return r;
        _cleanup_free_ char *rootfs = NULL;
        if (asprintf(&rootfs, "%s/%s", dir, ROOTFS_NAME) < 0)
                abort();
        if (wk_subvol_create(rootfs, err) < 0) {
                (void)remove_entry(st, kind, what, name, NULL);
                return sp_error_wrap(err, "%s %s", what, name);
        }
        if (ret_rootfs)
                *ret_rootfs = TAKE_PTR(rootfs);
        return 0;
}

int wk_storage_template_create(const wk_storage *st, const char *name, char **ret_rootfs, sp_error **err)
{
        return make_entry_subvol(st, "templates", "template", name, 0, ret_rootfs, err);
}

int wk_storage_template_seal(const wk_storage *st, const char *name, sp_error **err)
{
        _cleanup_free_ char *rootfs = wk_storage_template_rootfs(st, name, err);
        if (!rootfs)
                return -SP_E_INVALID;
        /* Everything the importer wrote reaches the disk before sandboxes share it. */
        if (wk_subvol_sync(rootfs, err) < 0 || wk_subvol_set_read_only(rootfs, true, err) < 0)
                return sp_error_wrap(err, "sealing template %s", name);
        return 0;
}

int wk_storage_template_delete(const wk_storage *st, const char *name, sp_error **err)
{
        return remove_entry(st, "templates", "template", name, err);
}

int wk_storage_sandbox_create(const wk_storage *st, const char *template_name, const char *id, uint64_t quota_bytes,
                              uint64_t files_bytes, char **ret_rootfs, sp_error **err)
{
        _cleanup_free_ char *src = wk_storage_template_rootfs(st, template_name, err);
        if (!src || wk_rootfs_name_validate("sandbox id", id, err) < 0)
                return -SP_E_INVALID;
        bool ro = false;
        struct stat s;
        if (lstat(src, &s) < 0) {
                if (errno == ENOENT)
                        return sp_error_set(err, SP_E_NOT_FOUND, "template %s not found", template_name);
                return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", src);
        }
        if (wk_subvol_get_read_only(src, &ro, err) < 0)
                return sp_error_wrap(err, "template %s", template_name);
        if (!ro)
                return sp_error_set(err, SP_E_CONFLICT, "template %s is not sealed", template_name);

        _cleanup_free_ char *dir = NULL;
        int r = make_entry_dir(st, "sandboxes", "sandbox", id, files_bytes, &dir, err);
        if (r < 0)
                return r;
        _cleanup_free_ char *rootfs = NULL;
        if (asprintf(&rootfs, "%s/%s", dir, ROOTFS_NAME) < 0)
                abort();
        r = wk_subvol_snapshot(src, rootfs, false, err);
        if (r >= 0 && quota_bytes > 0)
                r = wk_quota_set_limit(rootfs, quota_bytes, err);
        if (r < 0) {
                (void)remove_entry(st, "sandboxes", "sandbox", id, NULL);
                return sp_error_wrap(err, "sandbox %s", id);
        }
        if (ret_rootfs)
                *ret_rootfs = TAKE_PTR(rootfs);
        return 0;
}

int wk_storage_sandbox_create_empty(const wk_storage *st, const char *id, uint64_t files_bytes, char **ret_rootfs,
                                    sp_error **err)
{
        return make_entry_subvol(st, "sandboxes", "sandbox", id, files_bytes, ret_rootfs, err);
}

int wk_storage_sandbox_delete(const wk_storage *st, const char *id, sp_error **err)
{
        return remove_entry(st, "sandboxes", "sandbox", id, err);
}

char *wk_storage_artifact_path(const wk_storage *st, const char *entry, sp_error **err)
{
        return layout_path(st, "artifacts", "artifact name", entry, NULL, err);
}

int wk_storage_artifact_remove(const wk_storage *st, const char *entry, sp_error **err)
{
        return remove_entry(st, "artifacts", "artifact", entry, err);
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int wk_storage_list(const wk_storage *st, bool templates, char ***ret, sp_error **err)
{
        const char *kind = templates ? "templates" : "sandboxes";
        int fd = open_kind(st, kind, err);
        if (fd < 0)
                return fd;
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                sp_close(fd);
                return sp_error_set_errno(err, SP_E_IO, errno, "opendir %s", kind);
        }
        size_t n = 0, cap = 16;
        _cleanup_strv_free_ char **v = calloc(cap, sizeof(char *));
        if (!v)
                abort();
        for (;;) {
                errno = 0;
                struct dirent *de = readdir(d);
                if (!de) {
                        if (errno)
                                return sp_error_set_errno(err, SP_E_IO, errno, "readdir %s", kind);
                        break;
                }
                if (wk_rootfs_name_validate("name", de->d_name, NULL) < 0)
                        continue;
                if (n == WK_STORAGE_LIST_MAX)
                        return sp_error_set(err, SP_E_LIMIT, "more than %d entries in %s", WK_STORAGE_LIST_MAX, kind);
                if (n + 1 == cap) {
                        char **nv = realloc(v, 2 * cap * sizeof(char *));
                        if (!nv)
                                abort();
                        v = nv;
                        memset(v + cap, 0, cap * sizeof(char *));
                        cap *= 2;
                }
                v[n] = strdup(de->d_name);
                if (!v[n])
                        abort();
                n++;
        }
        qsort(v, n, sizeof(char *), cmp_str);
        *ret = TAKE_PTR(v);
        return 0;
}
