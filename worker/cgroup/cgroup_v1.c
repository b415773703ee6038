/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cgroup v1: one directory per controller hierarchy.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "space/log.h"
#include "space/time.h"

#include "cgroup/cgroup_internal.h"

#define FREEZE_POLL_MAX_MS 10

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
        nanosleep(&ts, NULL);
}

static int write_u64(const char *dir, const char *file, uint64_t v, sp_error **err)
{
        char s[32];
        snprintf(s, sizeof(s), "%" PRIu64, v);
        return wk__cg_write(dir, file, s, err);
}

static int need(const wk_cgroup *cg, unsigned controller, bool wanted, const char **ret, sp_error **err)
{
        *ret = wk__cg_dir(cg, controller);
        if (!*ret && wanted)
                return sp_error_set(err, SP_E_UNSUPPORTED, "the host has no %s cgroup controller",
                                    wk__cg_controller_name(WK_CGROUP_V1, controller));
        return 0;
}

static int set_cpu(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir;
        if (need(cg, WK_CGROUP_CPU, l->cpu_millicores != 0, &dir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!dir)
                return 0;
        if (write_u64(dir, "cpu.cfs_period_us", WK__CG_CPU_PERIOD_US, err) < 0)
                return -SP_E_IO;
        int r = l->cpu_millicores ? write_u64(dir, "cpu.cfs_quota_us", wk__cg_cpu_quota_us(l->cpu_millicores), err)
                                  : wk__cg_write(dir, "cpu.cfs_quota_us", "-1", err);
        if (r < 0)
                return r;
        return write_u64(dir, "cpu.shares", wk__cg_cpu_shares(l->cpu_millicores), err);
}

static int set_memory(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir;
        if (need(cg, WK_CGROUP_MEMORY, l->memory_bytes != 0, &dir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!dir)
                return 0;
        char v[32];
        if (l->memory_bytes)
                snprintf(v, sizeof(v), "%" PRIu64, l->memory_bytes);
        else
                snprintf(v, sizeof(v), "-1");

        /* memory+swap must stay >= memory: raise memsw first when growing,
         * lower memory first when shrinking. Equal values mean no swap. */
        bool memsw = wk__cg_has(dir, "memory.memsw.limit_in_bytes");
        sp_error *e = NULL;
        int r = wk__cg_write(dir, "memory.limit_in_bytes", v, &e);
        if (r < 0 && e->code == SP_E_INVALID && memsw) {
                sp_error_free(e);
                e = NULL;
                r = wk__cg_write(dir, "memory.memsw.limit_in_bytes", v, &e);
                if (r >= 0)
                        r = wk__cg_write(dir, "memory.limit_in_bytes", v, &e);
        } else if (r >= 0 && memsw) {
                r = wk__cg_write(dir, "memory.memsw.limit_in_bytes", v, &e);
        }
        if (r >= 0 && !memsw && l->memory_bytes) {
                /* Swap is not accounted on this host: keep the group out of it. */
                r = wk__cg_write(dir, "memory.swappiness", "0", &e);
        }
        if (r < 0) {
                if (e->code == SP_E_CONFLICT)
                        sp_error_wrap(&e, "the group uses more memory than it can reclaim");
                sp_error_move(err, &e);
                return r;
        }
        return 0;
}

static int set_pids(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir;
        if (need(cg, WK_CGROUP_PIDS, l->pids_max != 0, &dir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!dir)
                return 0;
        return l->pids_max ? write_u64(dir, "pids.max", l->pids_max, err) : wk__cg_write(dir, "pids.max", "max", err);
}

/* Sets one throttle file to the listed devices' values and lifts the limit
 * of any other device it names. */
static int set_throttle(const char *dir, const char *file, const wk_cgroup_limits *l, bool read, sp_error **err)
{
        char cur[WK__CG_FILE_MAX];
        ssize_t n = wk__cg_read(dir, file, cur, sizeof(cur), err);
        if (n < 0)
                return (int)n;
        for (char *save = NULL, *line = strtok_r(cur, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                unsigned maj, min;
                if (sscanf(line, "%u:%u", &maj, &min) != 2)
                        continue;
                bool listed = false;
                for (size_t i = 0; i < l->n_io && !listed; i++)
                        listed = l->io[i].major == maj && l->io[i].minor == min;
                char v[64];
                snprintf(v, sizeof(v), "%u:%u 0", maj, min);
                if (!listed && wk__cg_write(dir, file, v, err) < 0)
                        return -SP_E_IO;
        }
        for (size_t i = 0; i < l->n_io; i++) {
                char v[64];
                snprintf(v, sizeof(v), "%u:%u %" PRIu64, l->io[i].major, l->io[i].minor,
                         read ? l->io[i].read_bps : l->io[i].write_bps);
                if (wk__cg_write(dir, file, v, err) < 0)
                        return -SP_E_IO;
        }
        return 0;
}

static int set_io(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        const char *dir;
        if (need(cg, WK_CGROUP_IO, l->n_io != 0, &dir, err) < 0)
                return -SP_E_UNSUPPORTED;
        if (!dir)
                return 0;
        /* The weight is best effort: only some io schedulers have one. */
        if (wk__cg_has(dir, "blkio.weight")) {
                if (write_u64(dir, "blkio.weight", wk__cg_io_weight_v1(l->io_weight), err) < 0)
                        return -SP_E_IO;
        } else if (wk__cg_has(dir, "blkio.bfq.weight")) {
                if (write_u64(dir, "blkio.bfq.weight", wk__cg_io_weight_bfq(l->io_weight), err) < 0)
                        return -SP_E_IO;
        } else if (l->io_weight) {
                sp_log_debug("cgroup %s: no io weight on this host, io_weight ignored", cg->name);
        }
        if (!wk__cg_has(dir, "blkio.throttle.read_bps_device")) {
                if (l->n_io)
                        return sp_error_set(err, SP_E_UNSUPPORTED, "the host has no blkio throttling");
                return 0;
        }
        if (set_throttle(dir, "blkio.throttle.read_bps_device", l, true, err) < 0 ||
            set_throttle(dir, "blkio.throttle.write_bps_device", l, false, err) < 0)
                return -SP_E_IO;
        return 0;
}

int wk__cg_v1_set_limits(const wk_cgroup *cg, const wk_cgroup_limits *l, sp_error **err)
{
        if (set_cpu(cg, l, err) < 0 || set_memory(cg, l, err) < 0 || set_pids(cg, l, err) < 0 || set_io(cg, l, err) < 0)
                return -SP_E_IO;
        return 0;
}

int wk__cg_v1_freeze(const wk_cgroup *cg, bool freeze, int64_t timeout_ms, sp_error **err)
{
        const char *dir = wk__cg_dir(cg, WK_CGROUP_FREEZER);
        if (!dir)
                return sp_error_set(err, SP_E_UNSUPPORTED, "the host has no freezer cgroup controller");
        const char *want = freeze ? "FROZEN" : "THAWED";
        int64_t deadline = sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
        long wait = 1;
        for (;;) {
                /* Writing FROZEN again retries tasks that could not be frozen yet. */
                if (wk__cg_write(dir, "freezer.state", want, err) < 0)
                        return -SP_E_IO;
                char state[64];
                ssize_t n = wk__cg_read(dir, "freezer.state", state, sizeof(state), err);
                if (n < 0)
                        return (int)n;
                state[strcspn(state, "\n")] = '\0';
                if (strcmp(state, want) == 0)
                        return 0;
                if (sp_now_mono_us() >= deadline) {
                        if (freeze)
                                (void)wk__cg_write(dir, "freezer.state", "THAWED", NULL);
                        return sp_error_set(err, SP_E_TIMEOUT, "freezer of %s still %s after %lld ms", cg->name, state,
                                            (long long)timeout_ms);
                }
                /* v1 reports no event when freezing completes: poll, backing off. */
                sleep_ms(wait);
                if (wait < FREEZE_POLL_MAX_MS)
                        wait *= 2;
        }
}

/* Reads a single-number file into *ret and sets bit in *valid; a missing
 * file is left out. */
static int stat_u64(const char *dir, const char *file, uint64_t *ret, unsigned *valid, unsigned bit, sp_error **err)
{
        if (!dir)
                return 0;
        char buf[256];
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
        if (wk__cg_parse_u64(buf, (size_t)n, ret) < 0)
                return sp_error_set(err, SP_E_INTERNAL, "unreadable %s/%s", dir, file);
        *valid |= bit;
        return 0;
}

int wk__cg_v1_stats(const wk_cgroup *cg, wk_cgroup_stats *s, sp_error **err)
{
        const char *mem = wk__cg_dir(cg, WK_CGROUP_MEMORY);
        if (stat_u64(wk__cg_dir(cg, WK_CGROUP_CPUACCT), "cpuacct.usage", &s->cpu_usage_ns, &s->valid,
                     WK_CGROUP_STAT_CPU, err) < 0 ||
            stat_u64(mem, "memory.usage_in_bytes", &s->memory_current, &s->valid, WK_CGROUP_STAT_MEMORY, err) < 0 ||
            stat_u64(mem, "memory.max_usage_in_bytes", &s->memory_peak, &s->valid, WK_CGROUP_STAT_MEMORY_PEAK, err) <
                    0 ||
            stat_u64(wk__cg_dir(cg, WK_CGROUP_PIDS), "pids.current", &s->pids_current, &s->valid, WK_CGROUP_STAT_PIDS,
                     err) < 0)
                return -SP_E_IO;
        if (mem) {
                char buf[1024];
                ssize_t n = wk__cg_read(mem, "memory.oom_control", buf, sizeof(buf), err);
                if (n < 0)
                        return (int)n;
                int r = wk__cg_parse_keyed(buf, (size_t)n, "oom_kill", &s->oom_kills);
                if (r < 0)
                        return sp_error_set(err, SP_E_INTERNAL, "unreadable %s/memory.oom_control", mem);
                if (r > 0)
                        s->valid |= WK_CGROUP_STAT_OOM_KILLS;
        }
        return 0;
}
