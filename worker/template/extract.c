/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The extraction engine: writes the entries of a tar archive (a rootfs
 * tarball or one OCI layer) into the destination, making every security
 * decision itself rather than trusting libarchive's extract-to-disk.
 *
 * For each entry: the path is normalised and checked, its parent is opened
 * beneath the destination without following symlinks (missing directories
 * are created), whatever already has the name is removed (never opened for
 * writing, so a hard link cannot redirect a write), and the new file,
 * directory, symlink, hard link or fifo is made with *at() calls on that
 * parent. Directories are created private (0700) and get their mode, owner
 * and times after the whole archive, deepest first, so that neither a
 * read-only directory nor a later child changes the result.
 *
 * OCI layers add whiteouts. The paths a layer creates are remembered (with
 * their ancestors) so that its whiteouts and opaque markers remove only
 * what lower layers made, whatever the order of entries in the layer.
 *
 * Two bounds besides the entries, paths and time: what the entries cost on
 * disk (template.h's rule: every name, implicit parent directories included,
 * its inode's metadata counted twice, file data once) is counted against
 * max_bytes before each is written; and the paths kept until the end of an
 * archive (directories, the OCI layer's paths) are counted against
 * max_memory, each path once plus MEM_PER_PATH for its bookkeeping.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "template/internal.h"

#define WHITEOUT_PREFIX ".wh."
#define WHITEOUT_META_PREFIX ".wh..wh."
#define WHITEOUT_OPAQUE ".wh..wh..opq"
#define XATTR_VALUE_MAX 65536
/* What keeping one path costs besides its bytes: the allocator's header, its
 * hash table slots (at most 70% full, doubled when full) and, for a
 * directory, its share of the growing dir_meta array. An estimate, on the
 * high side. */
#define MEM_PER_PATH 64

/* A string-keyed hash table (open addressing) of paths, each with an index. */
typedef struct strmap {
        char **keys;
        size_t *vals;
        size_t cap, n; /* cap is a power of two or 0 */
        bool borrowed; /* the keys belong to someone else: never freed here */
} strmap;

static uint64_t str_hash(const char *s)
{
        uint64_t h = 1469598103934665603ull;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return h;
}

static size_t *strmap_find(const strmap *m, const char *key)
{
        if (!m->cap)
                return NULL;
        for (size_t i = str_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
                if (!m->keys[i])
                        return NULL;
                if (strcmp(m->keys[i], key) == 0)
                        return &m->vals[i];
        }
}

/* Takes key (on success and on failure) unless the map's keys are borrowed. */
static int strmap_put(strmap *m, char *key, size_t val)
{
        if ((m->n + 1) * 10 > m->cap * 7) {
                size_t ncap = m->cap ? m->cap * 2 : 64;
                char **nk = calloc(ncap, sizeof(char *));
                size_t *nv = calloc(ncap, sizeof(size_t));
                if (!nk || !nv) {
                        free(nk);
                        free(nv);
                        if (!m->borrowed)
                                free(key);
                        return -ENOMEM;
                }
                for (size_t i = 0; i < m->cap; i++) {
                        if (!m->keys[i])
                                continue;
                        size_t j = str_hash(m->keys[i]) & (ncap - 1);
                        while (nk[j])
                                j = (j + 1) & (ncap - 1);
                        nk[j] = m->keys[i];
                        nv[j] = m->vals[i];
                }
                free(m->keys);
                free(m->vals);
                m->keys = nk;
                m->vals = nv;
                m->cap = ncap;
        }
        size_t i = str_hash(key) & (m->cap - 1);
        while (m->keys[i]) {
                if (strcmp(m->keys[i], key) == 0) {
                        m->vals[i] = val;
                        if (!m->borrowed)
                                free(key);
                        return 0;
                }
                i = (i + 1) & (m->cap - 1);
        }
        m->keys[i] = key;
        m->vals[i] = val;
        m->n++;
        return 0;
}

static void strmap_clear(strmap *m)
{
        if (!m->borrowed)
                for (size_t i = 0; i < m->cap; i++)
                        free(m->keys[i]);
        free(m->keys);
        free(m->vals);
        *m = (strmap){.borrowed = m->borrowed};
}

typedef struct dir_meta {
        char *path; /* owned (dir_index borrows it); "" is the root */
        size_t depth; /* components in path */
        mode_t perm;
        uid_t uid;
        gid_t gid;
        struct timespec times[2];
} dir_meta;

struct wk__tpl_extract {
        int rootfd;
        wk_template_limits lim;
        bool oci;
        bool as_root;
        uint64_t entries, bytes; /* counted against the limits, over all archives */
        uint64_t written, next_look; /* bytes written; when to check the room and deadline again */
        bool over_bytes; /* an implicit parent directory did not fit in max_bytes */
        wk_template_stats stats;
        dir_meta *dirs;
        size_t n_dirs, cap_dirs;
        strmap dir_index; /* path -> index in dirs (keys borrowed from dirs) */
        strmap layer; /* OCI: paths this layer made, and their ancestors */
        size_t mem_dirs, mem_layer; /* counted against max_memory */
};

int wk__tpl_extract_new(int rootfd, const wk_template_limits *lim, bool oci, wk__tpl_extract **ret, sp_error **err)
{
        wk__tpl_extract *x = calloc(1, sizeof(*x));
        if (!x)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        x->rootfd = rootfd;
        x->lim = wk__tpl_limits_resolve(lim);
        x->oci = oci;
        x->as_root = geteuid() == 0;
        x->dir_index.borrowed = true;
        x->bytes = wk__tpl_cost_name(0); /* the root directory */
        *ret = x;
        return 0;
}

static void dirs_clear(wk__tpl_extract *x)
{
        strmap_clear(&x->dir_index);
        for (size_t i = 0; i < x->n_dirs; i++)
                free(x->dirs[i].path);
        free(x->dirs);
        x->dirs = NULL;
        x->n_dirs = x->cap_dirs = 0;
        x->mem_dirs = 0;
}

static void layer_clear(wk__tpl_extract *x)
{
        strmap_clear(&x->layer);
        x->mem_layer = 0;
}

/* Counts n more bytes of kept paths in *counter: -E2BIG past max_memory. */
static int mem_charge(wk__tpl_extract *x, size_t *counter, size_t n)
{
        size_t used = x->mem_dirs + x->mem_layer;
        if (n > x->lim.max_memory || used > x->lim.max_memory - n)
                return -E2BIG;
        *counter += n;
        return 0;
}

/* The error of a failed mem_charge (-E2BIG) or allocation. */
static int mem_error(const wk__tpl_extract *x, int r, sp_error **err)
{
        if (r == -E2BIG)
                return sp_error_set(err, SP_E_LIMIT,
                                    "the archive's directories and paths need more than %zu bytes of the importer's "
                                    "memory",
                                    x->lim.max_memory);
        return sp_error_set(err, SP_E_LIMIT, "out of memory");
}

wk__tpl_extract *wk__tpl_extract_free(wk__tpl_extract *x)
{
        if (!x)
                return NULL;
        dirs_clear(x);
        layer_clear(x);
        free(x);
        return NULL;
}

void wk__tpl_extract_stats(const wk__tpl_extract *x, wk_template_stats *s)
{
        s->entries += x->stats.entries;
        s->bytes += x->stats.bytes;
        s->cost += x->bytes;
        s->hardlinks += x->stats.hardlinks;
        s->skipped += x->stats.skipped;
        s->whiteouts += x->stats.whiteouts;
}

/* Records path and its ancestors as made by the current layer. */
static int layer_add(wk__tpl_extract *x, const char *path)
{
        if (!x->oci)
                return 0;
        _cleanup_free_ char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        for (;;) {
                if (!*p || strmap_find(&x->layer, p))
                        return 0; /* an ancestor already there has its own ancestors there */
                size_t len = strlen(p);
                if (mem_charge(x, &x->mem_layer, len + 1 + MEM_PER_PATH) < 0)
                        return -E2BIG;
                char *k = strdup(p);
                if (!k)
                        return -ENOMEM;
                int r = strmap_put(&x->layer, k, 0);
                if (r < 0)
                        return r;
                char *slash = strrchr(p, '/');
                if (!slash)
                        return 0;
                *slash = '\0';
        }
}

static int sys_error(int negerrno, const char *what, sp_error **err)
{
        int e = -negerrno;
        if (e == ELOOP || e == ENOTDIR)
                return sp_error_set(err, SP_E_INVALID, "%s: the path goes through a symlink or a non-directory", what);
        return sp_error_set_errno(err, sp_errc_from_errno(e) == SP_E_INTERNAL ? SP_E_IO : sp_errc_from_errno(e), e,
                                  "%s", what);
}

typedef struct entry_meta {
        mode_t perm;
        uid_t uid;
        gid_t gid;
        struct timespec times[2];
} entry_meta;

static int entry_meta_get(wk__tpl_extract *x, struct archive_entry *e, entry_meta *m, sp_error **err)
{
        int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
        if (uid < 0 || uid >= (int64_t)UINT32_MAX || gid < 0 || gid >= (int64_t)UINT32_MAX)
                return sp_error_set(err, SP_E_INVALID, "owner %lld:%lld out of range", (long long)uid, (long long)gid);
        m->uid = (uid_t)uid;
        m->gid = (gid_t)gid;
        m->perm = archive_entry_perm(e) & 07777;
        if (!x->as_root)
                m->perm &= (mode_t) ~(S_ISUID | S_ISGID);
        if (archive_entry_mtime_is_set(e)) {
                long ns = archive_entry_mtime_nsec(e);
                m->times[1] = (struct timespec){.tv_sec = archive_entry_mtime(e),
                                                .tv_nsec = ns >= 0 && ns < 1000000000 ? ns : 0};
        } else {
                m->times[1] = (struct timespec){.tv_nsec = UTIME_OMIT};
        }
        if (archive_entry_atime_is_set(e)) {
                long ns = archive_entry_atime_nsec(e);
                m->times[0] = (struct timespec){.tv_sec = archive_entry_atime(e),
                                                .tv_nsec = ns >= 0 && ns < 1000000000 ? ns : 0};
        } else {
                m->times[0] = m->times[1];
        }
        return 0;
}

/* Applies owner, mode, extended attributes and times to an open file. The
 * owner comes first: chown clears set-uid bits and file capabilities. */
static int apply_meta_fd(wk__tpl_extract *x, int fd, const entry_meta *m, struct archive_entry *e, sp_error **err)
{
        if (x->as_root && fchown(fd, m->uid, m->gid) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chown");
        if (fchmod(fd, m->perm) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chmod");
        if (e) {
                const char *name;
                const void *value;
                size_t size;
                archive_entry_xattr_reset(e);
                while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK) {
                        if (!name || !wk__tpl_xattr_wanted(name) || size > XATTR_VALUE_MAX)
                                continue;
                        if (fsetxattr(fd, name, value, size, 0) < 0)
                                sp_log_debug("extended attribute %s not kept: %s", name, strerror(errno));
                }
        }
        if (futimens(fd, m->times) < 0 && errno != EINVAL)
                return sp_error_set_errno(err, SP_E_IO, errno, "set times");
        return 0;
}

/* Makes room for a new entry named base in pfd: an existing directory stays
 * when a directory is wanted (1), anything else is removed (0). */
static int make_room(wk__tpl_extract *x, int pfd, const char *base, bool want_dir, sp_error **err)
{
        struct stat st;
        if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                        return 0;
                return sys_error(-errno, "stat", err);
        }
        if (S_ISDIR(st.st_mode)) {
                if (want_dir)
                        return 1;
                int r = wk__tpl_remove_tree(pfd, base, x->lim.max_depth);
                return r < 0 ? sys_error(r, "replace directory", err) : 0;
        }
        if (unlinkat(pfd, base, 0) < 0)
                return sys_error(-errno, "replace", err);
        return 0;
}

static int too_large(const wk__tpl_extract *x, sp_error **err)
{
        return sp_error_set(err, SP_E_TOO_LARGE, "the template exceeds %llu bytes",
                            (unsigned long long)x->lim.max_bytes);
}

/* Counts n bytes about to be written to fd (an fd on the destination's
 * filesystem); every WK_TEMPLATE_ROOM_STEP bytes, checks the deadline and
 * cancel, and asks lim.room whether the next step fits (what was counted
 * against max_bytes and is not written yet, at most a step), so that neither
 * a large file nor a filesystem that others fill meanwhile goes unchecked. */
static int step(wk__tpl_extract *x, int fd, uint64_t n, sp_error **err)
{
        uint64_t ahead = x->bytes > x->written ? x->bytes - x->written : 0;
        x->written += n;
        if (x->written < x->next_look)
                return 0;
        x->next_look = x->written + WK_TEMPLATE_ROOM_STEP;
        int r = wk__tpl_deadline_check(&x->lim, err);
        if (r >= 0 && x->lim.room)
                r = x->lim.room(x->lim.room_ud, fd, ahead < WK_TEMPLATE_ROOM_STEP ? ahead : WK_TEMPLATE_ROOM_STEP, err);
        return r < 0 ? r : 0;
}

/* Whether cost more bytes stay within max_bytes (the root's own cost, counted
 * first, may already be past a tiny bound). */
static bool fits(const wk__tpl_extract *x, uint64_t cost)
{
        return x->bytes <= x->lim.max_bytes && cost <= x->lim.max_bytes - x->bytes;
}

/* Counts a parent directory about to be made for an entry against max_bytes. */
static int charge_mkdir(void *ud, size_t name_len)
{
        wk__tpl_extract *x = ud;
        uint64_t cost = wk__tpl_cost_name(name_len);
        if (!fits(x, cost)) {
                x->over_bytes = true;
                return -EFBIG;
        }
        x->bytes += cost;
        return 0;
}

static int open_parent(wk__tpl_extract *x, const char *path, bool create, const char **base, sp_error **err)
{
        x->over_bytes = false;
        int fd = wk__tpl_open_parent_charged(x->rootfd, path, create, charge_mkdir, x, base);
        if (fd < 0 && x->over_bytes)
                return too_large(x, err);
        if (fd < 0)
                return sys_error(fd, "open parent directory", err);
        return fd;
}

static size_t path_depth(const char *p)
{
        size_t n = *p ? 1 : 0;
        for (; *p; p++)
                n += *p == '/';
        return n;
}

/* Remembers a directory's metadata for apply_dirs; -E2BIG past max_memory.
 * The path is kept once: dir_index borrows dirs[i].path. */
static int record_dir(wk__tpl_extract *x, const char *path, const entry_meta *m)
{
        size_t *idx = strmap_find(&x->dir_index, path);
        size_t i;
        if (idx) {
                i = *idx;
        } else {
                if (mem_charge(x, &x->mem_dirs, strlen(path) + 1 + MEM_PER_PATH + sizeof(dir_meta)) < 0)
                        return -E2BIG;
                if (x->n_dirs == x->cap_dirs) {
                        size_t ncap = x->cap_dirs ? x->cap_dirs * 2 : 64;
                        dir_meta *nd = realloc(x->dirs, ncap * sizeof(*nd));
                        if (!nd)
                                return -ENOMEM;
                        x->dirs = nd;
                        x->cap_dirs = ncap;
                }
                char *p = strdup(path);
                if (!p)
                        return -ENOMEM;
                int r = strmap_put(&x->dir_index, p, x->n_dirs);
                if (r < 0) {
                        free(p);
                        return r;
                }
                i = x->n_dirs++;
                x->dirs[i] = (dir_meta){.path = p, .depth = path_depth(p)};
        }
        dir_meta *d = &x->dirs[i];
        d->perm = m->perm;
        d->uid = m->uid;
        d->gid = m->gid;
        d->times[0] = m->times[0];
        d->times[1] = m->times[1];
        return 0;
}

static int do_dir(wk__tpl_extract *x, const char *path, struct archive_entry *e, const entry_meta *m, sp_error **err)
{
        _cleanup_close_ int fd = -1;
        if (!*path) {
                fd = wk__tpl_open_dir_beneath(x->rootfd, "", O_RDONLY);
        } else {
                const char *base;
                _cleanup_close_ int pfd = open_parent(x, path, true, &base, err);
                if (pfd < 0)
                        return pfd;
                int r = make_room(x, pfd, base, true, err);
                if (r < 0)
                        return r;
                if (r == 0 && mkdirat(pfd, base, 0700) < 0)
                        return sys_error(-errno, "mkdir", err);
                fd = openat(pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0)
                return sys_error(-errno, "open directory", err);
        const char *name;
        const void *value;
        size_t size;
        archive_entry_xattr_reset(e);
        while (archive_entry_xattr_next(e, &name, &value, &size) == ARCHIVE_OK)
                if (name && wk__tpl_xattr_wanted(name) && size <= XATTR_VALUE_MAX &&
                    fsetxattr(fd, name, value, size, 0) < 0)
                        sp_log_debug("extended attribute %s not kept: %s", name, strerror(errno));
        int r = record_dir(x, path, m);
        return r < 0 ? mem_error(x, r, err) : 0;
}

static int write_all_at(int fd, const void *p, size_t n, off_t off)
{
        const char *c = p;
        while (n > 0) {
                ssize_t w = pwrite(fd, c, n, off);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                c += w;
                n -= (size_t)w;
                off += w;
        }
        return 0;
}

static int do_file(wk__tpl_extract *x, wk__tpl_reader *r, struct archive *a, const char *path, struct archive_entry *e,
                   const entry_meta *m, sp_error **err)
{
        int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
        const char *base;
        _cleanup_close_ int pfd = open_parent(x, path, true, &base, err);
        if (pfd < 0)
                return pfd;
        int rr = make_room(x, pfd, base, false, err);
        if (rr < 0)
                return rr;
        _cleanup_close_ int fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return sys_error(-errno, "create", err);
        for (;;) {
                const void *buf;
                size_t n;
                la_int64_t off;
                int ar = archive_read_data_block(a, &buf, &n, &off);
                if (ar == ARCHIVE_EOF)
                        break;
                if (ar < ARCHIVE_WARN)
                        return wk__tpl_archive_error(r, a, "read data", err);
                if (off < 0 || (uint64_t)off > (uint64_t)size || n > (uint64_t)size - (uint64_t)off)
                        return sp_error_set(err, SP_E_INVALID, "data past the entry's size");
                int sr = step(x, fd, n, err);
                if (sr < 0)
                        return sr;
                int w = write_all_at(fd, buf, n, (off_t)off);
                if (w < 0)
                        return sp_error_set_errno(err, SP_E_IO, -w, "write");
        }
        if (ftruncate(fd, (off_t)size) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "truncate");
        x->stats.bytes += (uint64_t)size;
        return apply_meta_fd(x, fd, m, e, err);
}

/* Owner and times of a name that cannot be opened for writing (symlink, fifo). */
static int apply_meta_at(wk__tpl_extract *x, int pfd, const char *base, const entry_meta *m, bool chmod, sp_error **err)
{
        if (x->as_root && fchownat(pfd, base, m->uid, m->gid, AT_SYMLINK_NOFOLLOW) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chown");
        if (chmod && fchmodat(pfd, base, m->perm, AT_SYMLINK_NOFOLLOW) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chmod");
        if (utimensat(pfd, base, m->times, AT_SYMLINK_NOFOLLOW) < 0 && errno != EINVAL)
                return sp_error_set_errno(err, SP_E_IO, errno, "set times");
        return 0;
}

static int do_symlink(wk__tpl_extract *x, const char *path, struct archive_entry *e, const entry_meta *m,
                      sp_error **err)
{
        const char *target = archive_entry_symlink(e);
        if (!target || !*target)
                return sp_error_set(err, SP_E_INVALID, "symlink without a target");
        if (strlen(target) >= PATH_MAX)
                return sp_error_set(err, SP_E_INVALID, "symlink target longer than %d bytes", PATH_MAX - 1);
        const char *base;
        _cleanup_close_ int pfd = open_parent(x, path, true, &base, err);
        if (pfd < 0)
                return pfd;
        int r = make_room(x, pfd, base, false, err);
        if (r < 0)
                return r;
        if (symlinkat(target, pfd, base) < 0)
                return sys_error(-errno, "symlink", err);
        return apply_meta_at(x, pfd, base, m, false, err);
}

static int do_fifo(wk__tpl_extract *x, const char *path, const entry_meta *m, sp_error **err)
{
        const char *base;
        _cleanup_close_ int pfd = open_parent(x, path, true, &base, err);
        if (pfd < 0)
                return pfd;
        int r = make_room(x, pfd, base, false, err);
        if (r < 0)
                return r;
        if (mkfifoat(pfd, base, 0600) < 0)
                return sys_error(-errno, "mkfifo", err);
        return apply_meta_at(x, pfd, base, m, true, err);
}

static int do_hardlink(wk__tpl_extract *x, const char *path, const char *link, sp_error **err)
{
        _cleanup_free_ char *target = NULL;
        if (wk__tpl_path_normalize(link, &x->lim, &target, err) < 0)
                return sp_error_wrap(err, "hard link target");
        if (!*target)
                return sp_error_set(err, SP_E_INVALID, "hard link to the root directory");
        if (strcmp(target, path) == 0)
                return sp_error_set(err, SP_E_INVALID, "hard link to itself");
        const char *tbase;
        int tfd = wk__tpl_open_parent(x->rootfd, target, false, &tbase);
        if (tfd < 0)
                return tfd == -ENOENT ? sp_error_set(err, SP_E_INVALID, "hard link target does not exist")
                                      : sys_error(tfd, "hard link target", err);
        _cleanup_close_ int tpfd = tfd;
        struct stat st;
        if (fstatat(tpfd, tbase, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? sp_error_set(err, SP_E_INVALID, "hard link target does not exist")
                                       : sys_error(-errno, "hard link target", err);
        if (S_ISDIR(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "hard link to a directory");
        const char *base;
        _cleanup_close_ int pfd = open_parent(x, path, true, &base, err);
        if (pfd < 0)
                return pfd;
        int r = make_room(x, pfd, base, false, err);
        if (r < 0)
                return r;
        if (linkat(tpfd, tbase, pfd, base, 0) < 0)
                return errno == ENOENT ? sp_error_set(err, SP_E_INVALID, "hard link target does not exist")
                                       : sys_error(-errno, "link", err);
        x->stats.hardlinks++;
        return 0;
}

/* Removes what lower layers left in the directory at path (fd), keeping what
 * this layer made. */
static int opaque_clear(wk__tpl_extract *x, int fd, const char *path, unsigned depth_left, sp_error **err)
{
        if (depth_left == 0)
                return sp_error_set(err, SP_E_LIMIT, "directory tree deeper than %u levels", x->lim.max_depth);
        int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dfd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "dup");
        _cleanup_closedir_ DIR *d = fdopendir(dfd);
        if (!d) {
                sp_close(dfd);
                return sp_error_set_errno(err, SP_E_IO, errno, "read directory");
        }
        for (;;) {
                errno = 0;
                struct dirent *de = readdir(d);
                if (!de) {
                        if (errno)
                                return sp_error_set_errno(err, SP_E_IO, errno, "read directory");
                        return 0;
                }
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                int dr = wk__tpl_deadline_check(&x->lim, err);
                if (dr < 0)
                        return dr;
                _cleanup_free_ char *child = NULL;
                if (asprintf(&child, "%s%s%s", path, *path ? "/" : "", de->d_name) < 0)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                if (!strmap_find(&x->layer, child)) {
                        int r = wk__tpl_remove_tree(fd, de->d_name, x->lim.max_depth);
                        if (r < 0)
                                return sys_error(r, "remove lower layer's entry", err);
                        continue;
                }
                _cleanup_close_ int cfd = openat(fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (cfd < 0)
                        continue; /* this layer's non-directory stays */
                int r = opaque_clear(x, cfd, child, depth_left - 1, err);
                if (r < 0)
                        return r;
        }
}

/* A whiteout entry at path (an OCI layer): `.wh.<name>` or `.wh..wh..opq`. */
static int do_whiteout(wk__tpl_extract *x, const char *path, const char *base, sp_error **err)
{
        size_t dirlen = (size_t)(base - path);
        _cleanup_free_ char *dir = strndup(path, dirlen ? dirlen - 1 : 0);
        if (!dir)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (strcmp(base, WHITEOUT_OPAQUE) == 0) {
                int fd = wk__tpl_open_dir_beneath(x->rootfd, dir, O_RDONLY);
                if (fd == -ENOENT)
                        return 0;
                if (fd < 0)
                        return sys_error(fd, "opaque directory", err);
                _cleanup_close_ int dfd = fd;
                int r = layer_add(x, dir);
                if (r < 0)
                        return mem_error(x, r, err);
                x->stats.whiteouts++;
                return opaque_clear(x, dfd, dir, x->lim.max_depth, err);
        }
        if (strncmp(base, WHITEOUT_META_PREFIX, strlen(WHITEOUT_META_PREFIX)) == 0) {
                x->stats.skipped++; /* aufs bookkeeping (.wh..wh.plnk, ...) */
                return 0;
        }
        const char *name = base + strlen(WHITEOUT_PREFIX);
        if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return sp_error_set(err, SP_E_INVALID, "whiteout without a name");
        _cleanup_free_ char *target = NULL;
        if (asprintf(&target, "%s%s%s", dir, *dir ? "/" : "", name) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        x->stats.whiteouts++;
        if (strmap_find(&x->layer, target))
                return 0; /* a whiteout hides lower layers only, never its own layer */
        int fd = wk__tpl_open_dir_beneath(x->rootfd, dir, O_RDONLY);
        if (fd == -ENOENT)
                return 0;
        if (fd < 0)
                return sys_error(fd, "whiteout", err);
        _cleanup_close_ int dfd = fd;
        int r = wk__tpl_remove_tree(dfd, name, x->lim.max_depth);
        return r < 0 ? sys_error(r, "whiteout", err) : 0;
}

static int extract_entry(wk__tpl_extract *x, wk__tpl_reader *r, struct archive *a, struct archive_entry *e,
                         const char *path, sp_error **err)
{
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (x->oci && strncmp(base, WHITEOUT_PREFIX, strlen(WHITEOUT_PREFIX)) == 0)
                return do_whiteout(x, path, base, err);

        entry_meta m;
        if (entry_meta_get(x, e, &m, err) < 0)
                return -SP_E_INVALID;
        const char *link = archive_entry_hardlink(e);
        mode_t type = archive_entry_filetype(e);
        if (!*path && (link || type != AE_IFDIR))
                return sp_error_set(err, SP_E_INVALID, "the root must be a directory");
        int rc;
        if (link) {
                rc = do_hardlink(x, path, link, err);
        } else {
                switch (type) {
                case AE_IFREG:
                        rc = do_file(x, r, a, path, e, &m, err);
                        break;
                case AE_IFDIR:
                        rc = do_dir(x, path, e, &m, err);
                        break;
                case AE_IFLNK:
                        rc = do_symlink(x, path, e, &m, err);
                        break;
                case AE_IFIFO:
                        rc = do_fifo(x, path, &m, err);
                        break;
                case AE_IFCHR:
                case AE_IFBLK:
                        return sp_error_set(err, SP_E_UNSUPPORTED, "device nodes are not allowed in templates");
                default:
                        return sp_error_set(err, SP_E_UNSUPPORTED, "unsupported entry type 0%o", (unsigned)type);
                }
        }
        if (rc < 0)
                return rc;
        x->stats.entries++;
        rc = layer_add(x, path);
        return rc < 0 ? mem_error(x, rc, err) : 0;
}

static int cmp_deeper_first(const void *a, const void *b)
{
        size_t da = ((const dir_meta *)a)->depth, db = ((const dir_meta *)b)->depth;
        return da < db ? 1 : da > db ? -1 : 0;
}

/* Gives the directories their modes, owners and times, deepest first (so a
 * read-only parent never blocks its children). A directory replaced or
 * removed after it was made is skipped. The deadline and cancel are checked
 * before each, as before each entry. */
static int apply_dirs(wk__tpl_extract *x, sp_error **err)
{
        if (wk__tpl_deadline_check(&x->lim, err) < 0)
                return sp_error_wrap(err, "directories' modes and times");
        strmap_clear(&x->dir_index); /* not needed any more; the sort moves its values */
        if (x->n_dirs > 1)
                qsort(x->dirs, x->n_dirs, sizeof(*x->dirs), cmp_deeper_first);
        for (size_t i = 0; i < x->n_dirs; i++) {
                if (wk__tpl_deadline_check(&x->lim, err) < 0)
                        return sp_error_wrap(err, "directories' modes and times");
                dir_meta *d = &x->dirs[i];
                int fd = wk__tpl_open_dir_beneath(x->rootfd, d->path, O_RDONLY);
                if (fd == -ENOENT || fd == -ELOOP || fd == -ENOTDIR)
                        continue;
                char q[WK__QUOTE_MAX + 8];
                if (fd < 0)
                        return sp_error_set_errno(err, SP_E_IO, -fd, "directory '%s'",
                                                  wk__tpl_quote(d->path, q, sizeof(q)));
                _cleanup_close_ int dfd = fd;
                entry_meta m = {.perm = d->perm, .uid = d->uid, .gid = d->gid, .times = {d->times[0], d->times[1]}};
                if (apply_meta_fd(x, dfd, &m, NULL, err) < 0)
                        return sp_error_wrap(err, "directory '%s'", wk__tpl_quote(d->path, q, sizeof(q)));
        }
        dirs_clear(x);
        return 0;
}

typedef struct xattr_ref {
        const char *name;
        size_t size;
} xattr_ref;

static int cmp_xattr_ref(const void *a, const void *b)
{
        return strcmp(((const xattr_ref *)a)->name, ((const xattr_ref *)b)->name);
}

/* Names and values of the extended attributes the entry will set, each name
 * once (a pax header may carry one twice, as LIBARCHIVE.xattr and
 * SCHILY.xattr; the filesystem keeps one), the largest value of a name
 * counted. UINT64_MAX when out of memory. */
static uint64_t xattrs_cost(struct archive_entry *e)
{
        int n = archive_entry_xattr_reset(e);
        if (n <= 0)
                return 0;
        xattr_ref *refs = calloc((size_t)n, sizeof(*refs));
        if (!refs)
                return UINT64_MAX;
        size_t k = 0;
        const char *name;
        const void *value;
        size_t vsize;
        while (k < (size_t)n && archive_entry_xattr_next(e, &name, &value, &vsize) == ARCHIVE_OK)
                if (name && wk__tpl_xattr_wanted(name) && vsize <= XATTR_VALUE_MAX)
                        refs[k++] = (xattr_ref){name, vsize};
        qsort(refs, k, sizeof(*refs), cmp_xattr_ref);
        uint64_t sum = 0;
        for (size_t i = 0; i < k;) {
                size_t max = refs[i].size, j = i + 1;
                for (; j < k && strcmp(refs[j].name, refs[i].name) == 0; j++)
                        if (refs[j].size > max)
                                max = refs[j].size;
                sum += strlen(refs[i].name) + max;
                i = j;
        }
        free(refs);
        return sum;
}

/* What the entry at the normalised path costs on disk by template.h's rule,
 * before any parent directory it needs (counted as they are made): its
 * declared size (every entry's counts, so that no entry can make libarchive
 * decompress and skip unbounded data), its name, a symlink's target and the
 * extended attributes that will be set. Whiteouts make no name; the root's
 * name is counted when the extraction starts. */
static uint64_t entry_cost(const wk__tpl_extract *x, struct archive_entry *e, const char *path, uint64_t size)
{
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (x->oci && strncmp(base, WHITEOUT_PREFIX, strlen(WHITEOUT_PREFIX)) == 0)
                return size;
        uint64_t meta = 0;
        uint64_t cost = *path ? wk__tpl_cost_name(strlen(base)) : 0;
        if (!archive_entry_hardlink(e)) {
                mode_t type = archive_entry_filetype(e);
                const char *target = type == AE_IFLNK ? archive_entry_symlink(e) : NULL;
                if (target)
                        meta += strlen(target);
                if (type == AE_IFREG || type == AE_IFDIR) {
                        uint64_t xc = xattrs_cost(e);
                        if (xc == UINT64_MAX)
                                return UINT64_MAX;
                        meta += xc;
                }
        }
        cost += wk__tpl_cost_meta(meta);
        return cost + size < cost ? UINT64_MAX : cost + size;
}

int wk__tpl_extract_archive(wk__tpl_extract *x, wk__tpl_reader *r, struct archive *a, sp_error **err)
{
        layer_clear(x);
        for (;;) {
                struct archive_entry *e;
                int ar = archive_read_next_header(a, &e);
                if (ar == ARCHIVE_EOF)
                        break;
                if (ar < ARCHIVE_WARN) {
                        wk__tpl_archive_error(r, a, "read archive", err);
                        return sp_error_wrap(err, "after %llu entries", (unsigned long long)x->entries);
                }
                char q[WK__QUOTE_MAX + 8];
                const char *raw = archive_entry_pathname(e);
                if (!raw)
                        return sp_error_set(err, SP_E_INVALID, "entry %llu has no usable name",
                                            (unsigned long long)x->entries + 1);
                wk__tpl_quote(raw, q, sizeof(q));
                if (++x->entries > x->lim.max_entries)
                        return sp_error_set(err, SP_E_LIMIT, "entry '%s': more than %llu entries", q,
                                            (unsigned long long)x->lim.max_entries);
                if (wk__tpl_deadline_check(&x->lim, err) < 0)
                        return sp_error_wrap(err, "entry '%s'", q);
                int64_t size = archive_entry_size_is_set(e) ? archive_entry_size(e) : 0;
                if (size < 0)
                        return sp_error_set(err, SP_E_TOO_LARGE, "entry '%s': the template exceeds %llu bytes", q,
                                            (unsigned long long)x->lim.max_bytes);
                _cleanup_free_ char *path = NULL;
                if (wk__tpl_path_normalize(raw, &x->lim, &path, err) < 0)
                        return sp_error_wrap(err, "entry '%s'", q);
                uint64_t cost = entry_cost(x, e, path, (uint64_t)size);
                if (!fits(x, cost))
                        return sp_error_set(err, SP_E_TOO_LARGE, "entry '%s': the template exceeds %llu bytes", q,
                                            (unsigned long long)x->lim.max_bytes);
                x->bytes += cost;
                /* The entry's own cost; its file's data is counted as it is written. */
                if (step(x, x->rootfd, cost - (uint64_t)size, err) < 0)
                        return sp_error_wrap(err, "entry '%s'", q);
                if (extract_entry(x, r, a, e, path, err) < 0)
                        return sp_error_wrap(err, "entry '%s'", q);
        }
        return apply_dirs(x, err);
}
