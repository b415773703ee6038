/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Path safety for the importers: entry names are normalised and checked
 * before use, and every directory is opened beneath the destination without
 * following symlinks, so that nothing an archive contains can make us write
 * outside the destination.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "space/time.h"
#include "template/internal.h"

#define XATTR_LIST_MAX_BYTES 65536
#define XATTR_VALUE_MAX_BYTES 65536

static int use_openat2 = 1;

void wk__tpl_set_use_openat2(bool on)
{
        __atomic_store_n(&use_openat2, on ? 1 : 0, __ATOMIC_RELAXED);
}

const char *wk__tpl_quote(const char *name, char *buf, size_t size)
{
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
                if (o + 8 >= size || (size_t)(p - (const unsigned char *)name) >= WK__QUOTE_MAX) {
                        memcpy(buf + o, "...", 3);
                        o += 3;
                        break;
                }
                if (*p < 0x20 || *p >= 0x7f || *p == '\'' || *p == '\\' || *p == '"') {
                        buf[o++] = '\\';
                        buf[o++] = 'x';
                        buf[o++] = hex[*p >> 4];
                        buf[o++] = hex[*p & 15];
                } else {
                        buf[o++] = (char)*p;
                }
        }
        buf[o] = '\0';
        return buf;
}

wk_template_limits wk__tpl_limits_resolve(const wk_template_limits *in)
{
        wk_template_limits l = in ? *in : (wk_template_limits){0};
        if (!l.max_bytes)
                l.max_bytes = WK_TEMPLATE_DEFAULT_MAX_BYTES;
        if (!l.max_entries)
                l.max_entries = WK_TEMPLATE_DEFAULT_MAX_ENTRIES;
        if (!l.max_path)
                l.max_path = WK_TEMPLATE_DEFAULT_MAX_PATH;
        if (!l.max_depth)
                l.max_depth = WK_TEMPLATE_DEFAULT_MAX_DEPTH;
        if (!l.max_seconds)
                l.max_seconds = WK_TEMPLATE_DEFAULT_MAX_SECONDS;
        if (!l.max_memory)
                l.max_memory = WK_TEMPLATE_DEFAULT_MAX_MEMORY;
        if (!l.deadline_us)
                l.deadline_us = sp_now_mono_us() + (int64_t)l.max_seconds * 1000000;
        return l;
}

int wk__tpl_deadline_check(const wk_template_limits *lim, sp_error **err)
{
        if (lim->cancel && atomic_load(lim->cancel))
                return sp_error_set(err, SP_E_UNAVAILABLE,
                                    "the import was cancelled (the worker is stopping, or the template was deleted)");
        if (lim->deadline_us && sp_now_mono_us() >= lim->deadline_us)
                return sp_error_set(err, SP_E_TIMEOUT, "the import took longer than %u seconds", lim->max_seconds);
        return 0;
}

int wk__tpl_path_normalize(const char *name, const wk_template_limits *lim, char **ret, sp_error **err)
{
        if (!name || !*name)
                return sp_error_set(err, SP_E_INVALID, "empty name");
        if (name[0] == '/')
                return sp_error_set(err, SP_E_INVALID, "absolute path");
        size_t len = strlen(name);
        if (len > lim->max_path)
                return sp_error_set(err, SP_E_LIMIT, "path longer than %zu bytes", lim->max_path);
        char *out = malloc(len + 1);
        if (!out)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        size_t o = 0;
        unsigned depth = 0;
        const char *p = name;
        while (*p) {
                const char *e = strchrnul(p, '/');
                size_t n = (size_t)(e - p);
                if (n == 2 && p[0] == '.' && p[1] == '.') {
                        free(out);
                        return sp_error_set(err, SP_E_INVALID, "path has a '..' component");
                }
                if (n > NAME_MAX) {
                        free(out);
                        return sp_error_set(err, SP_E_INVALID, "path component longer than %d bytes", NAME_MAX);
                }
                if (n > 0 && !(n == 1 && p[0] == '.')) {
                        if (++depth > lim->max_depth) {
                                free(out);
                                return sp_error_set(err, SP_E_LIMIT, "path deeper than %u components", lim->max_depth);
                        }
                        if (o)
                                out[o++] = '/';
                        memcpy(out + o, p, n);
                        o += n;
                }
                p = *e ? e + 1 : e;
        }
        out[o] = '\0';
        *ret = out;
        return 0;
}

int wk__tpl_dest_open(const char *dest, sp_error **err)
{
        _cleanup_close_ int fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open the template's destination");
        int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (dup_fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "dup");
        _cleanup_closedir_ DIR *d = fdopendir(dup_fd);
        if (!d) {
                sp_close(dup_fd);
                return sp_error_set_errno(err, SP_E_IO, errno, "read the template's destination");
        }
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                        return sp_error_set(err, SP_E_CONFLICT, "the template's destination is not empty");
        return TAKE_FD(fd);
}

/* Opens path beneath rootfd one component at a time, none followed if it is a
 * symlink; missing directories are created when create is set, each after
 * charge (optional) agreed to it. */
static int walk(int rootfd, const char *path, int oflags, bool create, wk__tpl_charge_fn charge, void *ud)
{
        _cleanup_free_ char *copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        _cleanup_close_ int cur = openat(rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (cur < 0)
                return -errno;
        char *save = NULL;
        for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
                bool last = *save == '\0';
                int flags = last ? oflags : O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
                int next = openat(cur, c, flags);
                if (next < 0 && errno == ENOENT && create) {
                        if (charge) {
                                int r = charge(ud, strlen(c));
                                if (r < 0)
                                        return r;
                        }
                        if (mkdirat(cur, c, 0755) < 0 && errno != EEXIST)
                                return -errno;
                        next = openat(cur, c, flags);
                }
                if (next < 0)
                        return -errno;
                sp_close(cur);
                cur = next;
        }
        return TAKE_FD(cur);
}

int wk__tpl_open_dir_beneath(int rootfd, const char *path, int flags)
{
        int oflags = flags | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        if (!*path) {
                int fd = openat(rootfd, ".", oflags);
                return fd < 0 ? -errno : fd;
        }
        if (__atomic_load_n(&use_openat2, __ATOMIC_RELAXED)) {
                struct open_how how = {
                        .flags = (uint64_t)oflags,
                        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
                };
                long fd = syscall(SYS_openat2, rootfd, path, &how, sizeof(how));
                if (fd >= 0)
                        return (int)fd;
                if (errno != ENOSYS)
                        return -errno;
                sp_log_debug("openat2 is not available: walking paths with O_NOFOLLOW");
                wk__tpl_set_use_openat2(false);
        }
        return walk(rootfd, path, oflags, false, NULL, NULL);
}

int wk__tpl_open_parent(int rootfd, const char *path, bool create, const char **ret_base)
{
        return wk__tpl_open_parent_charged(rootfd, path, create, NULL, NULL, ret_base);
}

int wk__tpl_open_parent_charged(int rootfd, const char *path, bool create, wk__tpl_charge_fn charge, void *ud,
                                const char **ret_base)
{
        const char *slash = strrchr(path, '/');
        if (!slash) {
                *ret_base = path;
                return wk__tpl_open_dir_beneath(rootfd, "", O_RDONLY);
        }
        _cleanup_free_ char *parent = strndup(path, (size_t)(slash - path));
        if (!parent)
                return -ENOMEM;
        int fd = wk__tpl_open_dir_beneath(rootfd, parent, O_RDONLY);
        if (fd == -ENOENT && create)
                fd = walk(rootfd, parent, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, true, charge, ud);
        if (fd >= 0)
                *ret_base = slash + 1;
        return fd;
}

static int remove_rec(int parent, const char *name, unsigned depth_left)
{
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : -errno;
        if (!S_ISDIR(st.st_mode))
                return unlinkat(parent, name, 0) < 0 && errno != ENOENT ? -errno : 0;
        if (depth_left == 0)
                return -ELOOP;
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == EACCES && fchmodat(parent, name, 0700, 0) == 0)
                fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        /* Without root, a read-only directory cannot be emptied: make it ours to change. */
        if ((st.st_mode & 0700) != 0700 && geteuid() != 0)
                (void)fchmod(fd, 0700);
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        if (!d) {
                sp_close(fd);
                return -errno;
        }
        for (;;) {
                errno = 0;
                struct dirent *de = readdir(d);
                if (!de) {
                        if (errno)
                                return -errno;
                        break;
                }
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                int r = remove_rec(dirfd(d), de->d_name, depth_left - 1);
                if (r < 0)
                        return r;
        }
        return unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
}

int wk__tpl_remove_tree(int dirfd, const char *name, unsigned max_depth)
{
        return remove_rec(dirfd, name, max_depth);
}

bool wk__tpl_xattr_wanted(const char *name)
{
        return strncmp(name, "user.", 5) == 0 || strcmp(name, "security.capability") == 0;
}

static bool xattr_unsupported(int e)
{
        return e == ENOTSUP || e == ENOSYS || e == EPERM || e == EACCES;
}

int wk__tpl_xattr_copy(int from_fd, int to_fd)
{
        _cleanup_free_ char *names = malloc(XATTR_LIST_MAX_BYTES);
        _cleanup_free_ char *value = malloc(XATTR_VALUE_MAX_BYTES);
        if (!names || !value)
                return -ENOMEM;
        ssize_t n = flistxattr(from_fd, names, XATTR_LIST_MAX_BYTES);
        if (n < 0)
                return xattr_unsupported(errno) ? 0 : -errno;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
                const char *name = names + i;
                if (!wk__tpl_xattr_wanted(name))
                        continue;
                ssize_t v = fgetxattr(from_fd, name, value, XATTR_VALUE_MAX_BYTES);
                if (v < 0) {
                        if (errno == ENODATA || xattr_unsupported(errno))
                                continue;
                        return -errno;
                }
                if (fsetxattr(to_fd, name, value, (size_t)v, 0) < 0) {
                        if (!xattr_unsupported(errno))
                                return -errno;
                        sp_log_debug("extended attribute %s not kept: %s", name, strerror(errno));
                }
        }
        return 0;
}

uint64_t wk__tpl_cost_meta(uint64_t n)
{
        if (n > UINT64_MAX / WK_TEMPLATE_METADATA_COPIES)
                return UINT64_MAX;
        return n * WK_TEMPLATE_METADATA_COPIES;
}

uint64_t wk__tpl_cost_name(size_t name_len)
{
        return wk__tpl_cost_meta((uint64_t)WK_TEMPLATE_ENTRY_OVERHEAD + name_len);
}

int wk__tpl_xattr_cost(int fd, uint64_t *ret)
{
        *ret = 0;
        _cleanup_free_ char *names = malloc(XATTR_LIST_MAX_BYTES);
        if (!names)
                return -ENOMEM;
        ssize_t n = flistxattr(fd, names, XATTR_LIST_MAX_BYTES);
        if (n < 0)
                return xattr_unsupported(errno) ? 0 : -errno;
        uint64_t sum = 0;
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
                const char *name = names + i;
                if (!wk__tpl_xattr_wanted(name))
                        continue;
                ssize_t v = fgetxattr(fd, name, NULL, 0);
                if (v < 0) {
                        if (errno == ENODATA || xattr_unsupported(errno))
                                continue;
                        return -errno;
                }
                sum += strlen(name) + (uint64_t)(v > XATTR_VALUE_MAX_BYTES ? XATTR_VALUE_MAX_BYTES : v);
        }
        *ret = wk__tpl_cost_meta(sum);
        return 0;
}
