/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a template holds on disk, by the rule of template.h
 * (WK_TEMPLATE_ENTRY_OVERHEAD): every name the walk meets costs the entry
 * overhead plus its length, the root counting as a name of its own; every
 * inode, once however many names it has, costs its regular file bytes, its
 * symlink target and its extended attributes (names and values, all of them:
 * what the filesystem keeps, read with llistxattr/lgetxattr, never following
 * a link); metadata counts WK_TEMPLATE_METADATA_COPIES times. The walk
 * follows no symlink and stays on the template's filesystem.
 *
 * What the importers count (declared sizes, for their bounds) can differ
 * from it: an archive may name a file twice; this is what stays.
 */
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "template/internal.h"
#include "template/template.h"

typedef struct inode {
        dev_t dev;
        ino_t ino;
        uint64_t cost;
} inode;

/* nftw has no user data: one walk per thread at a time. */
static _Thread_local struct {
        uint64_t bytes;
        inode *linked; /* files with more than one name, counted at the end */
        size_t n, cap;
        bool oom;
        int error; /* errno of a failed xattr read */
} walk;

static uint64_t add(uint64_t a, uint64_t b)
{
        return a + b < a ? UINT64_MAX : a + b;
}

static bool xattr_ignored(int e)
{
        return e == ENOTSUP || e == ENOSYS || e == ENODATA || e == ENOENT || e == EPERM || e == EACCES;
}

/* Names and values of path's extended attributes, path itself (never what a
 * symlink names). */
static int xattr_bytes(const char *path, uint64_t *ret)
{
        *ret = 0;
        ssize_t n = llistxattr(path, NULL, 0);
        if (n <= 0)
                return n < 0 && !xattr_ignored(errno) ? -errno : 0;
        char *names = malloc((size_t)n + 1);
        if (!names)
                return -ENOMEM;
        n = llistxattr(path, names, (size_t)n);
        if (n < 0) {
                int e = errno;
                free(names);
                return xattr_ignored(e) ? 0 : -e;
        }
        uint64_t sum = 0;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
                ssize_t v = lgetxattr(path, names + i, NULL, 0);
                if (v < 0) {
                        if (xattr_ignored(errno))
                                continue;
                        int e = errno;
                        free(names);
                        return -e;
                }
                sum += strlen(names + i) + (uint64_t)v;
        }
        free(names);
        *ret = sum;
        return 0;
}

static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        /* The name: the root's counts as empty. */
        walk.bytes = add(walk.bytes, wk__tpl_cost_name(ftw->level ? strlen(path + ftw->base) : 0));
        if (type == FTW_NS)
                return 0;
        uint64_t meta = 0;
        int r = xattr_bytes(path, &meta);
        if (r < 0) {
                walk.error = -r;
                return 1;
        }
        if (S_ISLNK(st->st_mode))
                meta += (uint64_t)st->st_size; /* the target's length */
        uint64_t cost = wk__tpl_cost_meta(meta);
        if (S_ISREG(st->st_mode))
                cost = add(cost, (uint64_t)st->st_size);
        if (S_ISDIR(st->st_mode) || st->st_nlink <= 1) {
                walk.bytes = add(walk.bytes, cost);
                return 0;
        }
        if (walk.n == walk.cap) {
                size_t cap = walk.cap ? walk.cap * 2 : 256;
                inode *p = realloc(walk.linked, cap * sizeof(*p));
                if (!p) {
                        walk.oom = true;
                        return 1;
                }
                walk.linked = p;
                walk.cap = cap;
        }
        walk.linked[walk.n++] = (inode){st->st_dev, st->st_ino, cost};
        return 0;
}

static int cmp_inode(const void *a, const void *b)
{
        const inode *x = a, *y = b;
        if (x->dev != y->dev)
                return x->dev < y->dev ? -1 : 1;
        return x->ino < y->ino ? -1 : x->ino > y->ino;
}

int wk_template_measure(const char *dir, uint64_t *ret, sp_error **err)
{
        walk.bytes = 0;
        walk.linked = NULL;
        walk.n = walk.cap = 0;
        walk.oom = false;
        walk.error = 0;
        int r = nftw(dir, visit, 16, FTW_PHYS | FTW_MOUNT);
        int saved = walk.error ? walk.error : errno;
        if (r == 0 && walk.n) {
                qsort(walk.linked, walk.n, sizeof(*walk.linked), cmp_inode);
                for (size_t i = 0; i < walk.n; i++)
                        if (i == 0 || cmp_inode(&walk.linked[i - 1], &walk.linked[i]) != 0)
                                walk.bytes = add(walk.bytes, walk.linked[i].cost);
        }
        free(walk.linked);
        walk.linked = NULL;
        if (walk.oom || (r != 0 && saved == ENOMEM))
                return sp_error_set(err, SP_E_LIMIT, "out of memory measuring the template");
        if (r != 0)
                return sp_error_set_errno(err, SP_E_IO, saved, "measure the template's files");
        *ret = walk.bytes;
        return 0;
}
