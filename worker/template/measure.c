/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a template holds on disk: the bytes of its regular files, each inode
 * once however many names it has, found without following any symlink and
 * without leaving the template's filesystem. What the importers count
 * (declared sizes, for their bounds) can differ from it: an archive may name
 * a file twice; this is what stays.
 */
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "template/template.h"

typedef struct inode {
        dev_t dev;
        ino_t ino;
        uint64_t size;
} inode;

/* nftw has no user data: one walk per thread at a time. */
static _Thread_local struct {
        uint64_t bytes;
        inode *linked; /* files with more than one name, counted at the end */
        size_t n, cap;
        bool oom;
} walk;

static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        (void)path;
        (void)ftw;
        if (type != FTW_F || !S_ISREG(st->st_mode))
                return 0;
        if (st->st_nlink <= 1) {
                walk.bytes += (uint64_t)st->st_size;
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
        walk.linked[walk.n++] = (inode){st->st_dev, st->st_ino, (uint64_t)st->st_size};
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
        int r = nftw(dir, visit, 16, FTW_PHYS | FTW_MOUNT);
        int saved = errno;
        if (r == 0) {
                qsort(walk.linked, walk.n, sizeof(*walk.linked), cmp_inode);
                for (size_t i = 0; i < walk.n; i++)
                        if (i == 0 || cmp_inode(&walk.linked[i - 1], &walk.linked[i]) != 0)
                                walk.bytes += walk.linked[i].size;
        }
        free(walk.linked);
        walk.linked = NULL;
        if (walk.oom)
                return sp_error_set(err, SP_E_LIMIT, "out of memory measuring the template");
        if (r != 0)
                return sp_error_set_errno(err, SP_E_IO, saved, "measure the template's files");
        *ret = walk.bytes;
        return 0;
}
