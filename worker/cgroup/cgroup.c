/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Cgroups: host detection, groups, processes, removal. The version-specific
 * parts are in cgroup_v1.c and cgroup_v2.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/time.h"

#include "cgroup/cgroup_internal.h"
#include "rootfs/mountinfo.h"

#define CGROUP_ROOT "/sys/fs/cgroup"
#define V1_WANTED \
        (WK_CGROUP_CPU | WK_CGROUP_CPUACCT | WK_CGROUP_MEMORY | WK_CGROUP_PIDS | WK_CGROUP_FREEZER | WK_CGROUP_IO | \
         WK_CGROUP_DEVICES)
#define POLL_MS 5

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
        nanosleep(&ts, NULL);
}

static char *xstrdup(const char *s)
{
        char *p = strdup(s);
        if (!p)
                abort();
        return p;
}

/* ---- control files ------------------------------------------------------ */

static sp_errc errc_for(int e)
{
        switch (e) {
        case ENOENT:
                return SP_E_UNSUPPORTED;
        case EINVAL:
        case ERANGE:
                return SP_E_INVALID;
        case EBUSY:
                return SP_E_CONFLICT;
        case ESRCH:
                return SP_E_NOT_FOUND;
        case EACCES:
        case EPERM:
                return SP_E_PERMISSION;
        case EAGAIN:
        case ENOSPC:
                return SP_E_LIMIT;
        default:
                return SP_E_IO;
        }
}

int wk__cg_write(const char *dir, const char *file, const char *value, sp_error **err)
{
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s/%s", dir, file) >= (int)sizeof(p))
                return sp_error_set(err, SP_E_INVALID, "cgroup path too long");
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, errc_for(errno), errno, "open %s", p);
        size_t n = strlen(value);
        ssize_t w;
        do
                w = write(fd, value, n);
        while (w < 0 && errno == EINTR);
        if (w < 0)
                return sp_error_set_errno(err, errc_for(errno), errno, "writing \"%s\" to %s", value, p);
        if ((size_t)w != n)
                return sp_error_set(err, SP_E_IO, "short write of \"%s\" to %s", value, p);
        return 0;
}

ssize_t wk__cg_read(const char *dir, const char *file, char *buf, size_t size, sp_error **err)
{
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s/%s", dir, file) >= (int)sizeof(p))
                return sp_error_set(err, SP_E_INVALID, "cgroup path too long");
        _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, errno == ENOENT ? SP_E_NOT_FOUND : SP_E_IO, errno, "open %s", p);
        size_t len = 0;
        while (len + 1 < size) {
                ssize_t n = read(fd, buf + len, size - 1 - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return sp_error_set_errno(err, errc_for(errno), errno, "read %s", p);
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        if (len + 1 >= size)
                return sp_error_set(err, SP_E_TOO_LARGE, "%s is larger than %zu bytes", p, size - 1);
        buf[len] = '\0';
        return (ssize_t)len;
}

bool wk__cg_has(const char *dir, const char *file)
{
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s/%s", dir, file) >= (int)sizeof(p))
                return false;
        return access(p, F_OK) == 0;
}

const char *wk__cg_dir(const wk_cgroup *cg, unsigned controller)
{
        for (size_t i = 0; i < cg->n_dirs; i++)
                if (cg->dirs[i].controllers & controller)
                        return cg->dirs[i].path;
        return NULL;
}

/* ---- the host ----------------------------------------------------------- */

wk_cgroup_host *wk_cgroup_host_free(wk_cgroup_host *h)
{
        if (!h)
                return NULL;
        for (size_t i = 0; i < h->n_mounts; i++)
                free(h->mounts[i].path);
        free(h->description);
        free(h);
        return NULL;
}

wk_cgroup_version wk_cgroup_host_version(const wk_cgroup_host *h)
{
        return h->version;
}

unsigned wk_cgroup_host_controllers(const wk_cgroup_host *h)
{
        return h->controllers;
}

const char *wk_cgroup_host_describe(const wk_cgroup_host *h)
{
        return h->description;
}

static void describe(wk_cgroup_host *h)
{
        sp_buf b = SP_BUF_INIT;
        if (h->version == WK_CGROUP_V2) {
                (void)sp_buf_appendf(&b, NULL, "v2 at %s:", h->mounts[0].path);
                for (unsigned bit = 1; bit <= WK_CGROUP_DEVICES; bit <<= 1) {
                        const char *name = wk__cg_controller_name(WK_CGROUP_V2, bit);
                        if (name && (h->controllers & bit))
                                (void)sp_buf_appendf(&b, NULL, " %s", name);
                }
        } else {
                (void)sp_buf_append_str(&b, "v1:", NULL);
                for (size_t i = 0; i < h->n_mounts; i++) {
                        (void)sp_buf_append_str(&b, i ? ", " : " ", NULL);
                        bool first = true;
                        for (unsigned bit = 1; bit <= WK_CGROUP_DEVICES; bit <<= 1) {
                                if (h->mounts[i].controllers & bit) {
                                        (void)sp_buf_appendf(&b, NULL, "%s%s", first ? "" : ",",
                                                             wk__cg_controller_name(WK_CGROUP_V1, bit));
                                        first = false;
                                }
                        }
                        (void)sp_buf_appendf(&b, NULL, " at %s", h->mounts[i].path);
                }
        }
        h->description = sp_buf_steal(&b);
}

int wk_cgroup_host_v2_at(const char *mount_point, wk_cgroup_host **ret, sp_error **err)
{
        struct statfs sfs;
        if (statfs(mount_point, &sfs) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "statfs %s", mount_point);
        if ((unsigned long)sfs.f_type != (unsigned long)CGROUP2_SUPER_MAGIC)
                return sp_error_set(err, SP_E_INVALID, "%s is not a cgroup2 filesystem", mount_point);
        char buf[1024];
        ssize_t n = wk__cg_read(mount_point, "cgroup.controllers", buf, sizeof(buf), err);
        if (n < 0)
                return (int)n;

        wk_cgroup_host *h = calloc(1, sizeof(*h));
        if (!h)
                abort();
        h->version = WK_CGROUP_V2;
        h->n_mounts = 1;
        h->mounts[0].path = xstrdup(mount_point);
        /* Freezing and CPU accounting are in the v2 core, not controllers;
         * whether the kernel has cgroup.freeze and cgroup.kill shows in each
         * group (the root has neither). */
        h->controllers = wk__cg_parse_v2_controllers(buf, (size_t)n) | WK_CGROUP_CPUACCT | WK_CGROUP_FREEZER;
        h->mounts[0].controllers = h->controllers;
        describe(h);
        *ret = h;
        return 0;
}

struct v1_ctx {
        wk_cgroup_host *h;
};

static int v1_mount_cb(const wk_mountinfo_entry *e, void *userdata, sp_error **err)
{
        (void)err;
        struct v1_ctx *c = userdata;
        if (strcmp(e->fstype, "cgroup") != 0)
                return 0;
        unsigned mask = wk__cg_parse_v1_options(e->super_options) & V1_WANTED & ~c->h->controllers;
        if (mask == 0)
                return 0;
        /* A second mount of a hierarchy we have (a bind mount) adds nothing. */
        if (c->h->n_mounts == WK__CG_NCTRL)
                return 0;
        wk__cg_mount *m = &c->h->mounts[c->h->n_mounts++];
        m->path = xstrdup(e->mount_point);
        m->controllers = mask;
        c->h->controllers |= mask;
        return 0;
}

int wk_cgroup_host_detect(wk_cgroup_host **ret, sp_error **err)
{
        struct statfs sfs;
        if (statfs(CGROUP_ROOT, &sfs) == 0 && (unsigned long)sfs.f_type == (unsigned long)CGROUP2_SUPER_MAGIC)
                return wk_cgroup_host_v2_at(CGROUP_ROOT, ret, err);

        wk_cgroup_host *h = calloc(1, sizeof(*h));
        if (!h)
                abort();
        h->version = WK_CGROUP_V1;
        struct v1_ctx c = {.h = h};
        int r = wk_mountinfo_foreach(NULL, v1_mount_cb, &c, err);
        if (r < 0) {
                wk_cgroup_host_free(h);
                return sp_error_wrap(err, "finding the cgroup v1 controllers");
        }
        if (h->n_mounts == 0) {
                wk_cgroup_host_free(h);
                return sp_error_set(err, SP_E_UNSUPPORTED, "no cgroup2 at %s and no cgroup v1 controller mounted",
                                    CGROUP_ROOT);
        }
        describe(h);
        *ret = h;
        return 0;
}

/* ---- names -------------------------------------------------------------- */

static int validate_component(const char *what, const char *s, size_t len, sp_error **err)
{
        if (len == 0)
                return sp_error_set(err, SP_E_INVALID, "%s has an empty component", what);
        if (len > WK_CGROUP_NAME_MAX)
                return sp_error_set(err, SP_E_INVALID, "%s: a component is longer than %d bytes", what,
                                    WK_CGROUP_NAME_MAX);
        if (s[0] == '.')
                return sp_error_set(err, SP_E_INVALID, "%s: a component starts with '.'", what);
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                      c == '-' || c == '.'))
                        return sp_error_set(err, SP_E_INVALID, "%s has a character outside [A-Za-z0-9._-]", what);
        }
        return 0;
}

static int validate_parent(const char *parent, sp_error **err)
{
        if (!parent)
                return sp_error_set(err, SP_E_INVALID, "cgroup parent is missing");
        size_t depth = 0;
        for (const char *p = parent;;) {
                const char *slash = strchr(p, '/');
                size_t len = slash ? (size_t)(slash - p) : strlen(p);
                if (validate_component("cgroup parent", p, len, err) < 0)
                        return -SP_E_INVALID;
                if (++depth > WK_CGROUP_PARENT_MAX_DEPTH)
                        return sp_error_set(err, SP_E_INVALID, "cgroup parent deeper than %d levels",
                                            WK_CGROUP_PARENT_MAX_DEPTH);
                if (!slash)
                        return 0;
                p = slash + 1;
        }
}

static int validate_names(const char *parent, const char *name, sp_error **err)
{
        if (validate_parent(parent, err) < 0)
                return -SP_E_INVALID;
        if (!name)
                return sp_error_set(err, SP_E_INVALID, "cgroup name is missing");
        return validate_component("cgroup name", name, strlen(name), err);
}

/* ---- groups ------------------------------------------------------------- */

wk_cgroup *wk_cgroup_free(wk_cgroup *cg)
{
        if (!cg)
                return NULL;
        for (size_t i = 0; i < cg->n_dirs; i++)
                free(cg->dirs[i].path);
        free(cg->name);
        free(cg);
        return NULL;
}

const char *wk_cgroup_name(const wk_cgroup *cg)
{
        return cg->name;
}

wk_cgroup_version wk_cgroup_version_of(const wk_cgroup *cg)
{
        return cg->version;
}

const char *wk_cgroup_path(const wk_cgroup *cg, unsigned controller)
{
        return wk__cg_dir(cg, controller);
}

static wk_cgroup *group_new(const wk_cgroup_host *h, const char *parent, const char *name)
{
        wk_cgroup *cg = calloc(1, sizeof(*cg));
        if (!cg)
                abort();
        cg->version = h->version;
        cg->name = xstrdup(name);
        cg->controllers = h->controllers;
        for (size_t i = 0; i < h->n_mounts; i++) {
                if (asprintf(&cg->dirs[i].path, "%s/%s/%s", h->mounts[i].path, parent, name) < 0)
                        abort();
                cg->dirs[i].controllers = h->mounts[i].controllers;
        }
        cg->n_dirs = h->n_mounts;
        return cg;
}

/* mkdir -p of mount/parent (each level mode 0755). */
static int make_parent(const char *mount, const char *parent, sp_error **err)
{
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s/%s", mount, parent) >= (int)sizeof(p))
                return sp_error_set(err, SP_E_INVALID, "cgroup path too long");
        for (char *s = p + strlen(mount) + 1;; s++) {
                if (*s == '/' || *s == '\0') {
                        char saved = *s;
                        *s = '\0';
                        if (mkdir(p, 0755) < 0 && errno != EEXIST)
                                return sp_error_set_errno(err, errc_for(errno), errno, "mkdir %s", p);
                        *s = saved;
                        if (saved == '\0')
                                return 0;
                }
        }
}

int wk_cgroup_create(const wk_cgroup_host *h, const char *parent, const char *name, wk_cgroup **ret, sp_error **err)
{
        if (validate_names(parent, name, err) < 0)
                return -SP_E_INVALID;
        if (h->version == WK_CGROUP_V2 && wk__cg_v2_enable(h, parent, err) < 0)
                return sp_error_wrap(err, "cgroup parent %s", parent);

        _cleanup_cgroup_ wk_cgroup *cg = group_new(h, parent, name);
        size_t made = 0;
        int r = 0;
        for (; made < cg->n_dirs; made++) {
                if (h->version == WK_CGROUP_V1 && (r = make_parent(h->mounts[made].path, parent, err)) < 0)
                        break;
                if (mkdir(cg->dirs[made].path, 0755) < 0) {
                        if (errno == EEXIST)
                                r = sp_error_set(err, SP_E_CONFLICT, "cgroup %s already exists", cg->dirs[made].path);
                        else
                                r = sp_error_set_errno(err, errc_for(errno), errno, "mkdir %s", cg->dirs[made].path);
                        break;
                }
        }
        if (r < 0) {
                while (made-- > 0)
                        (void)rmdir(cg->dirs[made].path);
                return r;
        }
        *ret = TAKE_PTR(cg);
        return 0;
}

int wk_cgroup_open(const wk_cgroup_host *h, const char *parent, const char *name, wk_cgroup **ret, sp_error **err)
{
        if (validate_names(parent, name, err) < 0)
                return -SP_E_INVALID;
        _cleanup_cgroup_ wk_cgroup *cg = group_new(h, parent, name);
        size_t present = 0;
        for (size_t i = 0; i < cg->n_dirs; i++) {
                struct stat s;
                if (stat(cg->dirs[i].path, &s) == 0)
                        present += S_ISDIR(s.st_mode);
                else if (errno != ENOENT)
                        return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", cg->dirs[i].path);
        }
        if (present == 0)
                return sp_error_set(err, SP_E_NOT_FOUND, "cgroup %s/%s not found", parent, name);
        *ret = TAKE_PTR(cg);
        return 0;
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int wk_cgroup_list(const wk_cgroup_host *h, const char *parent, char ***ret, sp_error **err)
{
        if (validate_parent(parent, err) < 0)
                return -SP_E_INVALID;
        size_t n = 0, cap = 16;
        _cleanup_strv_free_ char **v = calloc(cap, sizeof(char *));
        if (!v)
                abort();
        for (size_t i = 0; i < h->n_mounts; i++) {
                char p[PATH_MAX];
                snprintf(p, sizeof(p), "%s/%s", h->mounts[i].path, parent);
                _cleanup_closedir_ DIR *d = opendir(p);
                if (!d) {
                        if (errno == ENOENT)
                                continue;
                        return sp_error_set_errno(err, SP_E_IO, errno, "opendir %s", p);
                }
                for (struct dirent *de; (de = readdir(d));) {
                        if (de->d_type != DT_DIR ||
                            validate_component("name", de->d_name, strlen(de->d_name), NULL) < 0)
                                continue;
                        bool dup = false;
                        for (size_t j = 0; j < n && !dup; j++)
                                dup = strcmp(v[j], de->d_name) == 0;
                        if (dup)
                                continue;
                        if (n == WK_CGROUP_LIST_MAX)
                                return sp_error_set(err, SP_E_LIMIT, "more than %d cgroups under %s",
                                                    WK_CGROUP_LIST_MAX, parent);
                        if (n + 1 == cap) {
                                char **nv = realloc(v, 2 * cap * sizeof(char *));
                                if (!nv)
                                        abort();
                                v = nv;
                                memset(v + cap, 0, cap * sizeof(char *));
                                cap *= 2;
                        }
                        v[n++] = xstrdup(de->d_name);
                }
        }
        qsort(v, n, sizeof(char *), cmp_str);
        *ret = TAKE_PTR(v);
        return 0;
}

/* ---- limits, freezing, statistics: by version -------------------------- */

int wk_cgroup_set_limits(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        if (wk__cg_limits_validate(l, err) < 0)
                return -SP_E_INVALID;
        int r = cg->version == WK_CGROUP_V2 ? wk__cg_v2_set_limits(cg, l, err) : wk__cg_v1_set_limits(cg, l, err);
        if (r < 0)
                return sp_error_wrap(err, "cgroup %s", cg->name);
        return 0;
}

static int freeze(const wk_cgroup *cg, bool on, int64_t timeout_ms, sp_error **err)
{
        return cg->version == WK_CGROUP_V2 ? wk__cg_v2_freeze(cg, on, timeout_ms, err)
                                           : wk__cg_v1_freeze(cg, on, timeout_ms, err);
}

int wk_cgroup_freeze(const wk_cgroup *cg, sp_error **err)
{
        if (freeze(cg, true, WK_CGROUP_FREEZE_TIMEOUT_MS, err) < 0)
                return sp_error_wrap(err, "freezing cgroup %s", cg->name);
        return 0;
}

int wk_cgroup_thaw(const wk_cgroup *cg, sp_error **err)
{
        if (freeze(cg, false, WK_CGROUP_FREEZE_TIMEOUT_MS, err) < 0)
                return sp_error_wrap(err, "thawing cgroup %s", cg->name);
        return 0;
}

int wk_cgroup_stats_read(const wk_cgroup *cg, wk_cgroup_stats *ret, sp_error **err)
{
        wk_cgroup_stats s = {0};
        int r = cg->version == WK_CGROUP_V2 ? wk__cg_v2_stats(cg, &s, err) : wk__cg_v1_stats(cg, &s, err);
        if (r < 0)
                return sp_error_wrap(err, "statistics of cgroup %s", cg->name);
        *ret = s;
        return 0;
}

/* ---- processes ---------------------------------------------------------- */

int wk_cgroup_attach(const wk_cgroup *cg, pid_t pid, sp_error **err)
{
        if (pid <= 0)
                return sp_error_set(err, SP_E_INVALID, "bad pid %d", (int)pid);
        char v[32];
        snprintf(v, sizeof(v), "%d", (int)pid);
        for (size_t i = 0; i < cg->n_dirs; i++) {
                if (wk__cg_write(cg->dirs[i].path, "cgroup.procs", v, err) < 0)
                        return sp_error_wrap(err, "attaching pid %d to cgroup %s", (int)pid, cg->name);
        }
        return 0;
}

typedef int (*pid_fn)(pid_t pid, void *userdata);

struct walk_ctx {
        pid_fn fn;
        void *userdata;
        size_t *count;
};

static int walk_cb(pid_t pid, void *userdata)
{
        struct walk_ctx *c = userdata;
        (*c->count)++;
        return c->fn ? c->fn(pid, c->userdata) : 0;
}

/* Calls fn for every process in dir and the groups nested in it; counts them
 * in *count. A directory that vanished meanwhile counts as empty. */
static int procs_walk(const char *dir, unsigned depth, pid_fn fn, void *userdata, size_t *count, sp_error **err)
{
        sp_buf b = {.limit = WK__CG_PROCS_MAX};
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
        sp_error *e = NULL;
        if (sp_file_read(p, WK__CG_PROCS_MAX, &b, &e) < 0) {
                bool gone = e->code == SP_E_NOT_FOUND;
                sp_buf_free(&b);
                if (gone) {
                        sp_error_free(e);
                        return 0;
                }
                sp_error_move(err, &e);
                return -SP_E_IO;
        }
        struct walk_ctx c = {fn, userdata, count};
        int r = wk__cg_parse_pids(b.data ? b.data : "", b.len, walk_cb, &c);
        sp_buf_free(&b);
        if (r < 0)
                return sp_error_set(err, SP_E_INTERNAL, "unreadable %s", p);

        if (depth == 0)
                return 0;
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : sp_error_set_errno(err, SP_E_IO, errno, "opendir %s", dir);
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.')
                        continue;
                char sub[PATH_MAX];
                if (snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name) >= (int)sizeof(sub))
                        continue;
                if (procs_walk(sub, depth - 1, fn, userdata, count, err) < 0)
                        return -SP_E_IO;
        }
        return 0;
}

static int count_procs(const wk_cgroup *cg, size_t *ret, sp_error **err)
{
        size_t n = 0;
        for (size_t i = 0; i < cg->n_dirs; i++)
                if (procs_walk(cg->dirs[i].path, WK__CG_MAX_DEPTH, NULL, NULL, &n, err) < 0)
                        return -SP_E_IO;
        *ret = n;
        return 0;
}

int wk_cgroup_is_empty(const wk_cgroup *cg, bool *ret, sp_error **err)
{
        size_t n;
        if (count_procs(cg, &n, err) < 0)
                return -SP_E_IO;
        *ret = n == 0;
        return 0;
}

/* Waits until no process is left; v2 awaits cgroup.events, v1 (which has
 * no event for it) polls. Returns 0, or -SP_E_TIMEOUT. */
static int wait_empty(const wk_cgroup *cg, int64_t timeout_ms, sp_error **err)
{
        if (cg->version == WK_CGROUP_V2)
                return wk__cg_v2_wait_event(cg->dirs[0].path, "populated", 0, timeout_ms, err);
        int64_t deadline = sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
        for (;;) {
                size_t n;
                if (count_procs(cg, &n, err) < 0)
                        return -SP_E_IO;
                if (n == 0)
                        return 0;
                if (sp_now_mono_us() >= deadline)
                        return sp_error_set(err, SP_E_TIMEOUT, "%zu processes still in cgroup %s", n, cg->name);
                sleep_ms(POLL_MS);
        }
}

static int kill_cb(pid_t pid, void *userdata)
{
        (void)userdata;
        (void)kill(pid, SIGKILL); /* ESRCH: it is already gone */
        return 0;
}

#define KILL_ROUND_WAIT_MS 200
#define KILL_FREEZE_WAIT_MS 1000

int wk__cg_kill_by_signal(const wk_cgroup *cg, int64_t timeout_ms, sp_error **err)
{
        int64_t deadline = sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
        bool can_freeze = (cg->controllers & WK_CGROUP_FREEZER) != 0;
        for (;;) {
                /* Frozen, nothing forks while we enumerate. A task stuck in
                 * the kernel may keep the group from freezing: kill anyway. */
                if (can_freeze)
                        (void)freeze(cg, true, KILL_FREEZE_WAIT_MS, NULL);
                size_t n = 0;
                int r = 0;
                for (size_t i = 0; i < cg->n_dirs && r >= 0; i++)
                        r = procs_walk(cg->dirs[i].path, WK__CG_MAX_DEPTH, kill_cb, NULL, &n, err);
                /* Frozen tasks die once thawed: the SIGKILL is pending. */
                int t = can_freeze ? freeze(cg, false, KILL_FREEZE_WAIT_MS, r >= 0 ? err : NULL) : 0;
                if (r < 0)
                        return r;
                if (t < 0)
                        return sp_error_wrap(err, "thawing after the kill");
                if (n == 0)
                        return 0;
                int64_t left_ms = (deadline - sp_now_mono_us()) / SP_USEC_PER_MSEC;
                if (left_ms <= 0)
                        return sp_error_set(err, SP_E_TIMEOUT, "cgroup %s still has processes after %lld ms", cg->name,
                                            (long long)timeout_ms);
                sp_error *e = NULL;
                r = wait_empty(cg, left_ms < KILL_ROUND_WAIT_MS ? left_ms : KILL_ROUND_WAIT_MS, &e);
                bool timed_out = r < 0 && e && e->code == SP_E_TIMEOUT;
                if (r < 0 && !timed_out) {
                        sp_error_move(err, &e);
                        return r;
                }
                sp_error_free(e);
                if (r == 0)
                        return 0;
        }
}

int wk_cgroup_kill_all(const wk_cgroup *cg, sp_error **err)
{
        int r;
        if (cg->version == WK_CGROUP_V2 && wk__cg_has(cg->dirs[0].path, "cgroup.kill")) {
                r = wk__cg_write(cg->dirs[0].path, "cgroup.kill", "1", err);
                if (r >= 0)
                        r = wk__cg_v2_wait_event(cg->dirs[0].path, "populated", 0, WK_CGROUP_KILL_TIMEOUT_MS, err);
                /* A frozen group stays frozen with its processes dead: thaw it
                 * so that it is usable (and removable) again. */
                if (r >= 0 && wk__cg_has(cg->dirs[0].path, "cgroup.freeze"))
                        r = wk__cg_write(cg->dirs[0].path, "cgroup.freeze", "0", err);
        } else {
                r = wk__cg_kill_by_signal(cg, WK_CGROUP_KILL_TIMEOUT_MS, err);
        }
        if (r < 0)
                return sp_error_wrap(err, "killing cgroup %s", cg->name);
        return 0;
}

/* ---- removal ------------------------------------------------------------ */

/* rmdir of dir after the groups nested in it, retrying EBUSY until deadline. */
static int remove_tree(const char *dir, unsigned depth, int64_t deadline, sp_error **err)
{
        if (depth > 0) {
                _cleanup_closedir_ DIR *d = opendir(dir);
                if (!d && errno == ENOENT)
                        return 0;
                if (!d)
                        return sp_error_set_errno(err, SP_E_IO, errno, "opendir %s", dir);
                for (struct dirent *de; (de = readdir(d));) {
                        if (de->d_type != DT_DIR || de->d_name[0] == '.')
                                continue;
                        char sub[PATH_MAX];
                        if (snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name) >= (int)sizeof(sub))
                                return sp_error_set(err, SP_E_INVALID, "cgroup path too long");
                        if (remove_tree(sub, depth - 1, deadline, err) < 0)
                                return -SP_E_IO;
                }
        }
        for (;;) {
                if (rmdir(dir) == 0 || errno == ENOENT)
                        return 0;
                if (errno != EBUSY)
                        return sp_error_set_errno(err, errc_for(errno), errno, "rmdir %s", dir);
                if (sp_now_mono_us() >= deadline) {
                        size_t n = 0;
                        (void)procs_walk(dir, 0, NULL, NULL, &n, NULL);
                        if (n > 0)
                                return sp_error_set(err, SP_E_CONFLICT, "cgroup %s still has %zu processes", dir, n);
                        return sp_error_set_errno(err, SP_E_CONFLICT, EBUSY, "rmdir %s", dir);
                }
                /* Exiting processes may still be counted for a moment. */
                sleep_ms(POLL_MS);
        }
}

int wk_cgroup_remove(const wk_cgroup *cg, sp_error **err)
{
        int64_t deadline = sp_now_mono_us() + WK_CGROUP_REMOVE_TIMEOUT_MS * SP_USEC_PER_MSEC;
        for (size_t i = 0; i < cg->n_dirs; i++) {
                if (remove_tree(cg->dirs[i].path, WK__CG_MAX_DEPTH, deadline, err) < 0)
                        return sp_error_wrap(err, "removing cgroup %s", cg->name);
        }
        return 0;
}
