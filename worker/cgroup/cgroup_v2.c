/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cgroup v2: the unified hierarchy, one directory per group.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "space/time.h"

#include "cgroup/cgroup_internal.h"

#define V2_WANTED (WK_CGROUP_CPU | WK_CGROUP_MEMORY | WK_CGROUP_PIDS | WK_CGROUP_IO)
#define EVENT_RECHECK_MS 100

/* Enables the wanted controllers that dir offers in its subtree_control. */
static int enable_in(const char *dir, sp_error **err)
{
        char avail[1024], on[1024];
        ssize_t na = wk__cg_read(dir, "cgroup.controllers", avail, sizeof(avail), err);
        if (na < 0)
                return (int)na;
        ssize_t no = wk__cg_read(dir, "cgroup.subtree_control", on, sizeof(on), err);
        if (no < 0)
                return (int)no;
        unsigned want = wk__cg_parse_v2_controllers(avail, (size_t)na) & V2_WANTED &
                        ~wk__cg_parse_v2_controllers(on, (size_t)no);
        for (unsigned bit = 1; bit <= WK_CGROUP_DEVICES; bit <<= 1) {
                if (!(want & bit))
                        continue;
                char v[32];
                snprintf(v, sizeof(v), "+%s", wk__cg_controller_name(WK_CGROUP_V2, bit));
                sp_error *e = NULL;
                if (wk__cg_write(dir, "cgroup.subtree_control", v, &e) < 0) {
                        if (e->code == SP_E_CONFLICT)
                                sp_error_wrap(&e,
                                              "processes live in %s, where cgroup v2 allows no controllers "
                                              "for subgroups",
                                              dir);
                        sp_error_move(err, &e);
                        return -SP_E_CONFLICT;
                }
        }
        return 0;
}

int wk__cg_v2_enable(const wk_cgroup_host *h, const char *parent, sp_error **err)
{
        char p[PATH_MAX];
        const char *root = h->mounts[0].path;
        if (snprintf(p, sizeof(p), "%s/%s", root, parent) >= (int)sizeof(p))
                return sp_error_set(err, SP_E_INVALID, "cgroup path too long");
        size_t rootlen = strlen(root);
        p[rootlen] = '\0';
        if (enable_in(p, err) < 0)
                return -SP_E_IO;
        p[rootlen] = '/';
        for (char *s = p + rootlen + 1;; s++) {
                if (*s != '/' && *s != '\0')
                        continue;
                char saved = *s;
                *s = '\0';
                if (mkdir(p, 0755) < 0 && errno != EEXIST)
                        return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", p);
                if (enable_in(p, err) < 0)
                        return -SP_E_IO;
                *s = saved;
                if (saved == '\0')
                        return 0;
        }
}

/* The group's dir when it has file; SP_E_UNSUPPORTED naming the controller
 * when it lacks it and the limit is wanted; NULL without error otherwise. */
static int need_file(const wk_cgroup *cg, const char *file, unsigned controller, bool wanted, const char **ret,
                     sp_error **err)
{
        const char *dir = cg->dirs[0].path;
        *ret = wk__cg_has(dir, file) ? dir : NULL;
        if (!*ret && wanted)
                return sp_error_set(err, SP_E_UNSUPPORTED, "the cgroup2 %s controller is not available to %s",
                                    wk__cg_controller_name(WK_CGROUP_V2, controller), dir);
        return 0;
}

static int set_cpu(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir;
        if (need_file(cg, "cpu.max", WK_CGROUP_CPU, l->cpu_millicores != 0, &dir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!dir)
                return 0;
        char v[64];
        if (l->cpu_millicores)
                snprintf(v, sizeof(v), "%" PRIu64 " %u", wk__cg_cpu_quota_us(l->cpu_millicores), WK__CG_CPU_PERIOD_US);
        else
                snprintf(v, sizeof(v), "max %u", WK__CG_CPU_PERIOD_US);
        if (wk__cg_write(dir, "cpu.max", v, err) < 0)
                return -SP_E_IO;
        snprintf(v, sizeof(v), "%" PRIu64, wk__cg_cpu_weight(l->cpu_millicores));
        return wk__cg_write(dir, "cpu.weight", v, err);
}

static int set_memory(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir;
        if (need_file(cg, "memory.max", WK_CGROUP_MEMORY, l->memory_bytes != 0, &dir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!dir)
                return 0;
        char v[32];
        if (l->memory_bytes)
                snprintf(v, sizeof(v), "%" PRIu64, l->memory_bytes);
        else
                snprintf(v, sizeof(v), "max");
        sp_error *e = NULL;
        if (wk__cg_write(dir, "memory.max", v, &e) < 0) {
                if (e->code == SP_E_CONFLICT)
                        sp_error_wrap(&e, "the group uses more memory than it can reclaim");
                sp_error_move(err, &e);
                return -SP_E_IO;
        }
        /* memory.swap.max exists where the kernel accounts swap. */
        if (wk__cg_has(dir, "memory.swap.max") &&
            wk__cg_write(dir, "memory.swap.max", l->memory_bytes ? "0" : "max", err) < 0)
                return -SP_E_IO;
        return 0;
}

static int set_pids(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir;
        if (need_file(cg, "pids.max", WK_CGROUP_PIDS, l->pids_max != 0, &dir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!dir)
                return 0;
        char v[32];
        if (l->pids_max)
                snprintf(v, sizeof(v), "%u", l->pids_max);
        else
                snprintf(v, sizeof(v), "max");
        return wk__cg_write(dir, "pids.max", v, err);
}

static int set_io(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir = cg->dirs[0].path;
        char v[128];
        /* The weight is best effort: only some io schedulers have one. */
        if (wk__cg_has(dir, "io.weight")) {
                snprintf(v, sizeof(v), "default %u", l->io_weight ? l->io_weight : 100);
                if (wk__cg_write(dir, "io.weight", v, err) < 0)
                        return -SP_E_IO;
        } else if (wk__cg_has(dir, "io.bfq.weight")) {
                snprintf(v, sizeof(v), "%" PRIu64, wk__cg_io_weight_bfq(l->io_weight));
                if (wk__cg_write(dir, "io.bfq.weight", v, err) < 0)
                        return -SP_E_IO;
        } else if (l->io_weight) {
                sp_log_debug("cgroup %s: no io weight on this host, io_weight ignored", cg->name);
        }

        const char *iodir;
        if (need_file(cg, "io.max", WK_CGROUP_IO, l->n_io != 0, &iodir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!iodir)
                return 0;
        char cur[WK__CG_FILE_MAX];
        ssize_t n = wk__cg_read(dir, "io.max", cur, sizeof(cur), err);
        if (n < 0)
                return (int)n;
        for (char *save = NULL, *line = strtok_r(cur, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                unsigned maj, min;
                if (sscanf(line, "%u:%u", &maj, &min) != 2)
                        continue;
                bool listed = false;
                for (size_t i = 0; i < l->n_io && !listed; i++)
                        listed = l->io[i].major == maj && l->io[i].minor == min;
                snprintf(v, sizeof(v), "%u:%u rbps=max wbps=max", maj, min);
                if (!listed && wk__cg_write(dir, "io.max", v, err) < 0)
                        return -SP_E_IO;
        }
        for (size_t i = 0; i < l->n_io; i++) {
                char r[32], w[32];
                if (l->io[i].read_bps)
                        snprintf(r, sizeof(r), "%" PRIu64, l->io[i].read_bps);
                else
                        snprintf(r, sizeof(r), "max");
                if (l->io[i].write_bps)
                        snprintf(w, sizeof(w), "%" PRIu64, l->io[i].write_bps);
                else
                        snprintf(w, sizeof(w), "max");
                snprintf(v, sizeof(v), "%u:%u rbps=%s wbps=%s", l->io[i].major, l->io[i].minor, r, w);
                if (wk__cg_write(dir, "io.max", v, err) < 0)
                        return -SP_E_IO;
        }
        return 0;
}

int wk__cg_v2_set_limits(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        if (set_cpu(cg, l, err) < 0 || set_memory(cg, l, err) < 0 || set_pids(cg, l, err) < 0 || set_io(cg, l, err) < 0)
                return -SP_E_IO;
        return 0;
}

int wk__cg_v2_wait_event(const char *dir, const char *key, uint64_t want, int64_t timeout_ms, sp_error **err)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/cgroup.events", dir);
        _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                /* A group that is gone holds no processes and is not frozen. */
                if (errno == ENOENT && want == 0)
                        return 0;
                return sp_error_set_errno(err, errno == ENOENT ? SP_E_NOT_FOUND : SP_E_IO, errno, "open %s", p);
        }
        int64_t deadline = sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
        for (;;) {
                char buf[512];
                ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
                if (n < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read %s", p);
                uint64_t v;
                int r = wk__cg_parse_keyed(buf, (size_t)n, key, &v);
                if (r <= 0)
                        return sp_error_set(err, SP_E_INTERNAL, "no \"%s\" in %s", key, p);
                if (v == want)
                        return 0;
                int64_t left_ms = (deadline - sp_now_mono_us()) / SP_USEC_PER_MSEC;
                if (left_ms <= 0)
                        return sp_error_set(err, SP_E_TIMEOUT, "%s: %s is still %" PRIu64 " after %lld ms", dir, key, v,
                                            (long long)timeout_ms);
                /* kernfs signals a change of the file with POLLPRI; re-read
                 * now and then anyway, in case the change raced our read. */
                struct pollfd pfd = {.fd = fd, .events = POLLPRI};
                if (poll(&pfd, 1, (int)(left_ms < EVENT_RECHECK_MS ? left_ms : EVENT_RECHECK_MS)) < 0 && errno != EINTR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "poll %s", p);
        }
}

int wk__cg_v2_freeze(const wk_cgroup *cg, bool freeze, int64_t timeout_ms, sp_error **err)
{
        const char *dir = cg->dirs[0].path;
        if (!wk__cg_has(dir, "cgroup.freeze"))
                return sp_error_set(err, SP_E_UNSUPPORTED, "the kernel has no cgroup2 freezer (%s)", dir);
        if (wk__cg_write(dir, "cgroup.freeze", freeze ? "1" : "0", err) < 0)
                return -SP_E_IO;
        int r = wk__cg_v2_wait_event(dir, "frozen", freeze ? 1 : 0, timeout_ms, err);
        if (r < 0 && freeze)
                (void)wk__cg_write(dir, "cgroup.freeze", "0", NULL);
        return r;
}

static int stat_file(const char *dir, const char *file, const char *key, uint64_t scale, uint64_t *ret, unsigned *valid,
                     unsigned bit, sp_error **err)
{
        char buf[4096];
        sp_error *e = NULL;
        ssize_t n = wk__cg_read(dir, file, buf, sizeof(buf), &e);
        if (n < 0) {
                if (e->code == SP_E_NOT_FOUND) {
                        sp_error_free(e);
                        return 0;
                }
                sp_error_move(err, &e);
                return (int)n;
        }
        uint64_t v;
        int r = key ? wk__cg_parse_keyed(buf, (size_t)n, key, &v) : (wk__cg_parse_u64(buf, (size_t)n, &v) < 0 ? -1 : 1);
        if (r < 0)
                return sp_error_set(err, SP_E_INTERNAL, "unreadable %s/%s", dir, file);
        if (r == 0)
                return 0;
        *ret = v > UINT64_MAX / scale ? UINT64_MAX : v * scale;
        *valid |= bit;
        return 0;
}

int wk__cg_v2_stats(const wk_cgroup *cg, wk_cgroup_stats *s, sp_error **err)
{
        const char *dir = cg->dirs[0].path;
        if (stat_file(dir, "cpu.stat", "usage_usec", 1000, &s->cpu_usage_ns, &s->valid, WK_CGROUP_STAT_CPU, err) < 0 ||
            stat_file(dir, "memory.current", NULL, 1, &s->memory_current, &s->valid, WK_CGROUP_STAT_MEMORY, err) < 0 ||
            stat_file(dir, "memory.peak", NULL, 1, &s->memory_peak, &s->valid, WK_CGROUP_STAT_MEMORY_PEAK, err) < 0 ||
            stat_file(dir, "pids.current", NULL, 1, &s->pids_current, &s->valid, WK_CGROUP_STAT_PIDS, err) < 0 ||
            stat_file(dir, "memory.events", "oom_kill", 1, &s->oom_kills, &s->valid, WK_CGROUP_STAT_OOM_KILLS, err) < 0)
                return -SP_E_IO;
        return 0;
}
