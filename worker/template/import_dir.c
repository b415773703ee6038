/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Importing a directory tree: a walk over directory fds (never a path that
 * could be swapped under us, never a symlink followed), files reflinked where
 * the filesystem allows and copied otherwise, hard links kept. What each
 * entry costs on disk (template.h's rule, as the archive importers count it)
 * is counted against max_bytes before it is made.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "template/internal.h"

#define COPY_CHUNK (1u << 30)
#define COPY_BUF (1u << 16)

/* Files with several links already copied: (dev, ino) -> path in dest. */
typedef struct inode_entry {
        dev_t dev;
        ino_t ino;
        char *path; /* NULL: free slot */
} inode_entry;

typedef struct copier {
        wk_template_limits lim;
        bool as_root;
        int dest_root;
        dev_t dest_dev;
        ino_t dest_ino;
        uint64_t entries;
        uint64_t bytes; /* the cost counted against max_bytes */
        wk_template_stats stats;
        inode_entry *inodes;
        size_t inodes_cap, inodes_n;
} copier;

static size_t inode_slot(const copier *c, dev_t dev, ino_t ino)
{
        uint64_t h = ((uint64_t)dev * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)ino * 0xc2b2ae3d27d4eb4full);
        size_t i = (size_t)(h >> 17) & (c->inodes_cap - 1);
        while (c->inodes[i].path && !(c->inodes[i].dev == dev && c->inodes[i].ino == ino))
                i = (i + 1) & (c->inodes_cap - 1);
        return i;
}

static const char *inode_find(const copier *c, dev_t dev, ino_t ino)
{
        if (!c->inodes_cap)
                return NULL;
        return c->inodes[inode_slot(c, dev, ino)].path;
}

static int inode_put(copier *c, dev_t dev, ino_t ino, const char *path)
{
        if ((c->inodes_n + 1) * 10 > c->inodes_cap * 7) {
                copier n = *c;
                n.inodes_cap = c->inodes_cap ? c->inodes_cap * 2 : 256;
                n.inodes = calloc(n.inodes_cap, sizeof(inode_entry));
                if (!n.inodes)
                        return -ENOMEM;
                for (size_t i = 0; i < c->inodes_cap; i++)
                        if (c->inodes[i].path)
                                n.inodes[inode_slot(&n, c->inodes[i].dev, c->inodes[i].ino)] = c->inodes[i];
                free(c->inodes);
                c->inodes = n.inodes;
                c->inodes_cap = n.inodes_cap;
        }
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        size_t i = inode_slot(c, dev, ino);
        c->inodes[i] = (inode_entry){.dev = dev, .ino = ino, .path = p};
        c->inodes_n++;
        return 0;
}

static void copier_clear(copier *c)
{
        for (size_t i = 0; i < c->inodes_cap; i++)
                free(c->inodes[i].path);
        free(c->inodes);
}

static mode_t perm_of(const copier *c, const struct stat *st)
{
        mode_t p = st->st_mode & 07777;
        return c->as_root ? p : p & (mode_t) ~(S_ISUID | S_ISGID);
}

/* Owner, mode, extended attributes, times of an open file or directory. */
static int apply_meta_fd(const copier *c, int sfd, int dfd, const struct stat *st)
{
        if (c->as_root && fchown(dfd, st->st_uid, st->st_gid) < 0)
                return -errno;
        if (fchmod(dfd, perm_of(c, st)) < 0)
                return -errno;
        int r = wk__tpl_xattr_copy(sfd, dfd);
        if (r < 0)
                return r;
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        return futimens(dfd, ts) < 0 ? -errno : 0;
}

static int apply_meta_at(const copier *c, int dirfd, const char *name, const struct stat *st, bool chmod)
{
        if (c->as_root && fchownat(dirfd, name, st->st_uid, st->st_gid, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        if (chmod && fchmodat(dirfd, name, perm_of(c, st), AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        struct timespec ts[2] = {st->st_atim, st->st_mtim};
        return utimensat(dirfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
}

int wk__tpl_copy_data(int sfd, int dfd, uint64_t size, bool *ret_reflinked)
{
        *ret_reflinked = false;
        if (ioctl(dfd, FICLONE, sfd) == 0) {
                *ret_reflinked = true;
                return 0;
        }
        uint64_t done = 0;
        bool use_cfr = true;
        _cleanup_free_ char *buf = NULL;
        while (done < size) {
                size_t want = size - done > COPY_CHUNK ? COPY_CHUNK : (size_t)(size - done);
                ssize_t n;
                if (use_cfr) {
                        n = copy_file_range(sfd, NULL, dfd, NULL, want, 0);
                        if (n < 0 && done == 0 &&
                            (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
                                use_cfr = false;
                                continue;
                        }
                } else {
                        if (!buf && !(buf = malloc(COPY_BUF)))
                                return -ENOMEM;
                        n = read(sfd, buf, want < COPY_BUF ? want : COPY_BUF);
                        if (n > 0) {
                                for (ssize_t w = 0; w < n;) {
                                        ssize_t k = write(dfd, buf + w, (size_t)(n - w));
                                        if (k < 0 && errno == EINTR)
                                                continue;
                                        if (k < 0)
                                                return -errno;
                                        w += k;
                                }
                        }
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break; /* the file shrank while we copied it */
                done += (uint64_t)n;
        }
        return 0;
}

static int copy_tree(copier *c, int sfd, int dfd, const char *rel, unsigned depth, sp_error **err);

static int fail(int negerrno, const char *what, const char *rel, sp_error **err)
{
        char q[WK__QUOTE_MAX + 8];
        int e = -negerrno;
        sp_errc code = sp_errc_from_errno(e);
        return sp_error_set_errno(err, code == SP_E_INTERNAL ? SP_E_IO : code, e, "%s '%s'", what,
                                  wk__tpl_quote(rel, q, sizeof(q)));
}

/* Counts cost against max_bytes before the entry rel is made. */
static int charge(copier *c, uint64_t cost, const char *rel, sp_error **err)
{
        char q[WK__QUOTE_MAX + 8];
        if (cost > c->lim.max_bytes - c->bytes)
                return sp_error_set(err, SP_E_TOO_LARGE, "'%s': the template exceeds %llu bytes",
                                    wk__tpl_quote(rel, q, sizeof(q)), (unsigned long long)c->lim.max_bytes);
        c->bytes += cost;
        return 0;
}

/* The cost of a name and of the inode's extended attributes read from fd. */
static int charge_with_xattrs(copier *c, int fd, uint64_t cost, const char *rel, sp_error **err)
{
        uint64_t x;
        int r = wk__tpl_xattr_cost(fd, &x);
        if (r < 0)
                return fail(r, "read extended attributes of", rel, err);
        return charge(c, cost + x < cost ? UINT64_MAX : cost + x, rel, err);
}

static uint64_t name_cost(const char *name)
{
        return wk__tpl_cost_name(strlen(name));
}

static int copy_file(copier *c, int sdir, int ddir, const char *name, const char *rel, const struct stat *st,
                     sp_error **err)
{
        if (st->st_nlink > 1) {
                const char *first = inode_find(c, st->st_dev, st->st_ino);
                if (first) {
                        int r = charge(c, name_cost(name), rel, err);
                        if (r < 0)
                                return r;
                        if (linkat(c->dest_root, first, ddir, name, 0) == 0) {
                                c->stats.hardlinks++;
                                return 0;
                        }
                        c->bytes -= name_cost(name); /* copied instead: counted below */
                }
        }
        char q[WK__QUOTE_MAX + 8];
        _cleanup_close_ int sfd = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (sfd < 0)
                return fail(-errno, "open", rel, err);
        struct stat now;
        if (fstat(sfd, &now) < 0)
                return fail(-errno, "stat", rel, err);
        if (!S_ISREG(now.st_mode) || now.st_ino != st->st_ino || now.st_dev != st->st_dev)
                return sp_error_set(err, SP_E_CONFLICT, "'%s' changed while it was copied",
                                    wk__tpl_quote(rel, q, sizeof(q)));
        uint64_t cost = name_cost(name) + (uint64_t)now.st_size;
        if (cost < (uint64_t)now.st_size)
                cost = UINT64_MAX;
        int cr = charge_with_xattrs(c, sfd, cost, rel, err);
        if (cr < 0)
                return cr;
        _cleanup_close_ int dfd = openat(ddir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (dfd < 0)
                return fail(-errno, "create", rel, err);
        bool reflinked;
        int r = wk__tpl_copy_data(sfd, dfd, (uint64_t)now.st_size, &reflinked);
        if (r < 0)
                return fail(r, "copy", rel, err);
        if (reflinked)
                c->stats.reflinked++;
        else
                c->stats.copied++;
        c->stats.bytes += (uint64_t)now.st_size;
        r = apply_meta_fd(c, sfd, dfd, &now);
        if (r < 0)
                return fail(r, "set attributes of", rel, err);
        if (st->st_nlink > 1 && !inode_find(c, st->st_dev, st->st_ino) && inode_put(c, st->st_dev, st->st_ino, rel) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

static int copy_dir(copier *c, int sdir, int ddir, const char *name, const char *rel, const struct stat *st,
                    unsigned depth, sp_error **err)
{
        char q[WK__QUOTE_MAX + 8];
        wk__tpl_quote(rel, q, sizeof(q));
        if (st->st_dev == c->dest_dev && st->st_ino == c->dest_ino)
                return sp_error_set(err, SP_E_INVALID, "the destination is inside the source (at '%s')", q);
        if (depth >= c->lim.max_depth)
                return sp_error_set(err, SP_E_LIMIT, "'%s': deeper than %u levels", q, c->lim.max_depth);
        _cleanup_close_ int sfd = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0)
                return fail(-errno, "open", rel, err);
        struct stat now;
        if (fstat(sfd, &now) < 0)
                return fail(-errno, "stat", rel, err);
        if (now.st_ino != st->st_ino || now.st_dev != st->st_dev)
                return sp_error_set(err, SP_E_CONFLICT, "'%s' changed while it was copied", q);
        int cr = charge_with_xattrs(c, sfd, name_cost(name), rel, err);
        if (cr < 0)
                return cr;
        if (mkdirat(ddir, name, 0700) < 0)
                return fail(-errno, "mkdir", rel, err);
        _cleanup_close_ int dfd = openat(ddir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return fail(-errno, "open", rel, err);
        int r = copy_tree(c, sfd, dfd, rel, depth + 1, err);
        if (r < 0)
                return r;
        r = apply_meta_fd(c, sfd, dfd, &now);
        return r < 0 ? fail(r, "set attributes of", rel, err) : 0;
}

/* Copies one entry; returns 1 when it was skipped (a socket). */
static int copy_entry(copier *c, int sdir, int ddir, const char *name, const char *rel, unsigned depth, sp_error **err)
{
        char q[WK__QUOTE_MAX + 8];
        struct stat st;
        if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return fail(-errno, "stat", rel, err);
        switch (st.st_mode & S_IFMT) {
        case S_IFDIR:
                return copy_dir(c, sdir, ddir, name, rel, &st, depth, err);
        case S_IFREG:
                return copy_file(c, sdir, ddir, name, rel, &st, err);
        case S_IFLNK: {
                char target[PATH_MAX];
                ssize_t n = readlinkat(sdir, name, target, sizeof(target));
                if (n < 0)
                        return fail(-errno, "read symlink", rel, err);
                if ((size_t)n >= sizeof(target))
                        return sp_error_set(err, SP_E_INVALID, "'%s': symlink target too long",
                                            wk__tpl_quote(rel, q, sizeof(q)));
                target[n] = '\0';
                int cr = charge(c, name_cost(name) + wk__tpl_cost_meta((uint64_t)n), rel, err);
                if (cr < 0)
                        return cr;
                if (symlinkat(target, ddir, name) < 0)
                        return fail(-errno, "symlink", rel, err);
                int r = apply_meta_at(c, ddir, name, &st, false);
                return r < 0 ? fail(r, "set attributes of", rel, err) : 0;
        }
        case S_IFIFO: {
                int cr = charge(c, name_cost(name), rel, err);
                if (cr < 0)
                        return cr;
                if (mkfifoat(ddir, name, 0600) < 0)
                        return fail(-errno, "mkfifo", rel, err);
                int r = apply_meta_at(c, ddir, name, &st, true);
                return r < 0 ? fail(r, "set attributes of", rel, err) : 0;
        }
        case S_IFSOCK:
                sp_log_debug("template import: socket '%s' skipped", wk__tpl_quote(rel, q, sizeof(q)));
                c->stats.skipped++;
                return 1;
        default:
                return sp_error_set(err, SP_E_UNSUPPORTED, "'%s': device nodes are not allowed in templates",
                                    wk__tpl_quote(rel, q, sizeof(q)));
        }
}

static int copy_tree(copier *c, int sfd, int dfd, const char *rel, unsigned depth, sp_error **err)
{
        int lfd = fcntl(sfd, F_DUPFD_CLOEXEC, 3);
        if (lfd < 0)
                return fail(-errno, "open", rel, err);
        _cleanup_closedir_ DIR *d = fdopendir(lfd);
        if (!d) {
                sp_close(lfd);
                return fail(-errno, "read", rel, err);
        }
        for (;;) {
                errno = 0;
                struct dirent *de = readdir(d);
                if (!de) {
                        if (errno)
                                return fail(-errno, "read", rel, err);
                        return 0;
                }
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                _cleanup_free_ char *child = NULL;
                if (asprintf(&child, "%s%s%s", rel, *rel ? "/" : "", de->d_name) < 0)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                char q[WK__QUOTE_MAX + 8];
                if (strlen(child) > c->lim.max_path)
                        return sp_error_set(err, SP_E_LIMIT, "'%s': path longer than %zu bytes",
                                            wk__tpl_quote(child, q, sizeof(q)), c->lim.max_path);
                if (++c->entries > c->lim.max_entries)
                        return sp_error_set(err, SP_E_LIMIT, "more than %llu entries",
                                            (unsigned long long)c->lim.max_entries);
                if (wk__tpl_deadline_check(&c->lim, err) < 0)
                        return -SP_E_TIMEOUT;
                int r = copy_entry(c, sfd, dfd, de->d_name, child, depth, err);
                if (r < 0)
                        return r;
                if (r == 0)
                        c->stats.entries++;
        }
}

int wk_template_import_dir_fd(int srcfd, const char *dest, const wk_template_limits *limits,
                              wk_template_stats *ret_stats, wk_template_meta **ret_meta, sp_error **err)
{
        _cleanup_close_ int dest_root = wk__tpl_dest_open(dest, err);
        if (dest_root < 0)
                return dest_root;
        struct stat sst, dst;
        if (fstat(srcfd, &sst) < 0 || fstat(dest_root, &dst) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "stat");
        if (!S_ISDIR(sst.st_mode))
                return sp_error_set(err, SP_E_INVALID, "the source is not a directory");
        if (sst.st_dev == dst.st_dev && sst.st_ino == dst.st_ino)
                return sp_error_set(err, SP_E_INVALID, "the source is the destination");

        copier c = {
                .lim = wk__tpl_limits_resolve(limits),
                .as_root = geteuid() == 0,
                .dest_root = dest_root,
                .dest_dev = dst.st_dev,
                .dest_ino = dst.st_ino,
        };
        /* The root: a name of its own, and its extended attributes. */
        int r = charge_with_xattrs(&c, srcfd, wk__tpl_cost_name(0), "/", err);
        if (r == 0)
                r = copy_tree(&c, srcfd, dest_root, "", 0, err);
        if (r == 0 && (r = apply_meta_fd(&c, srcfd, dest_root, &sst)) < 0)
                r = fail(r, "set attributes of", "/", err);
        copier_clear(&c);
        if (r < 0)
                return sp_error_wrap(err, "import directory");
        if (ret_meta && wk_template_meta_new(WK_TEMPLATE_SOURCE_DIR, ret_meta, err) < 0)
                return -SP_E_LIMIT;
        c.stats.cost = c.bytes;
        if (ret_stats)
                *ret_stats = c.stats;
        return 0;
}

int wk_template_import_dir(const char *src, const char *dest, const wk_template_limits *limits,
                           wk_template_stats *ret_stats, wk_template_meta **ret_meta, sp_error **err)
{
        _cleanup_close_ int src_root = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (src_root < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open source directory %s", src);
        if (wk_template_import_dir_fd(src_root, dest, limits, ret_stats, ret_meta, err) < 0)
                return sp_error_wrap(err, "%s", src);
        return 0;
}
