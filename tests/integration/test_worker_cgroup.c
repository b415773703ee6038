/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sandbox cgroups on this host's real hierarchy (v1 or v2, whichever it
 * has), and on a cgroup2 mount without controllers where a hybrid host has
 * one: limits land in the kernel's files; a forked child is attached; a
 * child allocating past the memory limit is OOM-killed and the kill counted;
 * fork fails past the pids limit; freezing stops a busy child's CPU time and
 * thawing resumes it; kill_all kills a tree including a setsid'd grandchild;
 * groups re-open after creation, list, and removal leaves nothing behind.
 * Root only. Every group lives under a parent named space-test-<pid>-<n>,
 * which the parent process's teardown removes whatever happened.
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
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cgroup/cgroup.h"
#include "cgroup/cgroup_internal.h"
#include "harness.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/time.h"

#define MiB (UINT64_C(1) << 20)
#define WAIT_MS 30000
#define PATHF(buf, ...) ck_assert_int_lt(snprintf((buf), sizeof(buf), __VA_ARGS__), (int)sizeof(buf))

static char g_parent[64];
static char g_v2_root[PATH_MAX]; /* a cgroup2 mount for the v2 tests, "" if none */

/* ---- raw cleanup, independent of the code under test -------------------- */

static void sleep_ms(long ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
        nanosleep(&ts, NULL);
}

static void raw_write(const char *dir, const char *file, const char *v)
{
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "%s/%s", dir, file);
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
                (void)!write(fd, v, strlen(v));
                close(fd);
        }
}

/* Kills, thaws and removes dir and everything below it; returns how many
 * groups below dir it had to remove (leftovers of the test). */
static int raw_remove(const char *dir, int depth)
{
        int n = 0;
        DIR *d = opendir(dir);
        if (!d)
                return 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_type != DT_DIR || de->d_name[0] == '.' || depth > 16)
                        continue;
                char sub[PATH_MAX + 64];
                snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
                n += raw_remove(sub, depth + 1);
        }
        closedir(d);
        for (int attempt = 0; attempt < 400; attempt++) {
                raw_write(dir, "freezer.state", "THAWED");
                raw_write(dir, "cgroup.freeze", "0");
                char p[PATH_MAX + 64];
                snprintf(p, sizeof(p), "%s/cgroup.procs", dir);
                FILE *f = fopen(p, "re");
                int pid;
                while (f && fscanf(f, "%d", &pid) == 1)
                        kill(pid, SIGKILL);
                if (f)
                        fclose(f);
                if (rmdir(dir) == 0 || errno == ENOENT)
                        return n + (depth > 0);
                sleep_ms(5);
        }
        fprintf(stderr, "teardown: cannot remove %s: %s\n", dir, strerror(errno));
        return n + (depth > 0);
}

/* Calls fn on every directory named g_parent directly below a hierarchy's
 * root; returns the sum of what fn returned. */
static int for_each_parent_dir(int (*fn)(const char *dir))
{
        int n = 0;
        char p[PATH_MAX + 64];
        snprintf(p, sizeof(p), "/sys/fs/cgroup/%s", g_parent);
        if (access(p, F_OK) == 0)
                n += fn(p);
        DIR *d = opendir("/sys/fs/cgroup");
        if (!d)
                return n;
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                snprintf(p, sizeof(p), "/sys/fs/cgroup/%s/%s", de->d_name, g_parent);
                if (access(p, F_OK) == 0)
                        n += fn(p);
        }
        closedir(d);
        return n;
}

static int remove_parent(const char *dir)
{
        return raw_remove(dir, 0);
}

static void reap_all(void)
{
        while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
}

static void setup(void)
{
        static int seq;
        snprintf(g_parent, sizeof(g_parent), "space-test-%d-%d", (int)getpid(), ++seq);
}

static void teardown(void)
{
        int left = for_each_parent_dir(remove_parent);
        if (left > 0)
                fprintf(stderr, "teardown: removed %d cgroups the test left under %s\n", left, g_parent);
        reap_all();
}

/* ---- children ------------------------------------------------------------ */

typedef struct child {
        pid_t pid;
        int go; /* write a byte: the child starts its body */
        int report; /* what the child writes back */
} child;

/* Forks a child that waits for go() before running body(report_fd). */
static child child_start(void (*body)(int report))
{
        int go[2], rep[2];
        ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(rep, O_CLOEXEC), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(go[1]);
                close(rep[0]);
                char c;
                if (read(go[0], &c, 1) != 1)
                        _exit(100);
                body(rep[1]);
                _exit(0);
        }
        close(go[0]);
        close(rep[1]);
        return (child){.pid = pid, .go = go[1], .report = rep[0]};
}

static void child_go(child *c)
{
        ck_assert_int_eq(write(c->go, "g", 1), 1);
        c->go = sp_close(c->go);
}

/* Reads exactly n bytes the child reported (bounded by WAIT_MS). */
static void child_read(child *c, void *buf, size_t n)
{
        size_t got = 0;
        int64_t deadline = sp_now_mono_us() + WAIT_MS * SP_USEC_PER_MSEC;
        while (got < n) {
                ck_assert_msg(sp_now_mono_us() < deadline, "child %d reported nothing", (int)c->pid);
                fd_set rfds;
                FD_ZERO(&rfds);
                FD_SET(c->report, &rfds);
                struct timeval tv = {0, 100000};
                if (select(c->report + 1, &rfds, NULL, NULL, &tv) <= 0)
                        continue;
                ssize_t r = read(c->report, (char *)buf + got, n - got);
                ck_assert_msg(r > 0, "child %d closed its report pipe", (int)c->pid);
                got += (size_t)r;
        }
}

static int child_wait(child *c)
{
        int st = 0;
        sp_error *err = NULL;
        sp_test_ok(sp_test_child_wait(c->pid, WAIT_MS, &st, &err), &err);
        c->go = sp_close(c->go);
        c->report = sp_close(c->report);
        return st;
}

static void body_pause(int report)
{
        ck_assert_int_eq(write(report, "r", 1), 1);
        for (;;)
                pause();
}

static void body_spin(int report)
{
        ck_assert_int_eq(write(report, "r", 1), 1);
        for (volatile unsigned long i = 0;; i++)
                ;
}

static void body_eat_memory(int report)
{
        (void)report;
        size_t size = 512 * MiB;
        volatile char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                _exit(101);
        for (size_t i = 0; i < size; i += 4096)
                p[i] = 1;
        _exit(0); /* not killed: the limit did not hold */
}

static void body_fork_until_refused(int report)
{
        int made = 0, e = 0;
        for (int i = 0; i < 64; i++) {
                pid_t p = fork();
                if (p == 0) {
                        for (;;)
                                pause();
                }
                if (p < 0) {
                        e = errno;
                        break;
                }
                made++;
        }
        int out[2] = {made, e};
        (void)!write(report, out, sizeof(out));
        for (;;)
                pause();
}

/* A tree: grandchild in its own session, great-grandchild below it. */
static void body_tree(int report)
{
        int p[2];
        if (pipe(p) < 0)
                _exit(102);
        pid_t g = fork();
        if (g == 0) {
                setsid();
                pid_t gg = fork();
                if (gg == 0) {
                        for (;;)
                                pause();
                }
                (void)!write(p[1], &gg, sizeof(gg));
                for (;;)
                        pause();
        }
        pid_t gg = 0;
        if (g < 0 || read(p[0], &gg, sizeof(gg)) != (ssize_t)sizeof(gg))
                _exit(103);
        pid_t out[2] = {g, gg};
        (void)!write(report, out, sizeof(out));
        for (;;)
                pause();
}

/* ---- helpers --------------------------------------------------------------- */

/* The host's hierarchy, or the cgroup2 mount g_v2_root (set by the fixture). */
static wk_cgroup_host *host(void)
{
        wk_cgroup_host *h = NULL;
        sp_error *err = NULL;
        if (g_v2_root[0])
                sp_test_ok(wk_cgroup_host_v2_at(g_v2_root, &h, &err), &err);
        else
                sp_test_ok(wk_cgroup_host_detect(&h, &err), &err);
        return h;
}

static wk_cgroup *create(const wk_cgroup_host *h, const char *name)
{
        wk_cgroup *cg = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_cgroup_create(h, g_parent, name, &cg, &err), &err);
        return cg;
}

static void read_file(const char *dir, const char *file, char *buf, size_t size)
{
        sp_error *err = NULL;
        sp_test_ok(wk__cg_read(dir, file, buf, size, &err), &err);
        buf[strcspn(buf, "\n")] = '\0';
}

static void assert_file(const char *dir, const char *file, const char *want)
{
        char buf[256];
        read_file(dir, file, buf, sizeof(buf));
        ck_assert_msg(strcmp(buf, want) == 0, "%s/%s is \"%s\", want \"%s\"", dir, file, buf, want);
}

static uint64_t cpu_usage(const wk_cgroup *cg)
{
        wk_cgroup_stats s;
        sp_error *err = NULL;
        sp_test_ok(wk_cgroup_stats_read(cg, &s, &err), &err);
        ck_assert(s.valid & WK_CGROUP_STAT_CPU);
        return s.cpu_usage_ns;
}

/* Waits until the group's CPU time passes at_least (bounded). */
static uint64_t wait_cpu_above(const wk_cgroup *cg, uint64_t at_least)
{
        int64_t deadline = sp_now_mono_us() + WAIT_MS * SP_USEC_PER_MSEC;
        for (;;) {
                uint64_t u = cpu_usage(cg);
                if (u > at_least)
                        return u;
                ck_assert_msg(sp_now_mono_us() < deadline, "cpu usage stuck at %llu ns", (unsigned long long)u);
                sleep_ms(10);
        }
}

/* Whether /proc/<pid>/cgroup places pid in <parent>/<name> (every line of a
 * hierarchy we use). */
static bool proc_in_group(pid_t pid, const char *name)
{
        char p[64], want[256], line[1024];
        snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
        snprintf(want, sizeof(want), ":/%s/%s\n", g_parent, name);
        FILE *f = fopen(p, "re");
        ck_assert_ptr_nonnull(f);
        int hits = 0;
        while (fgets(line, sizeof(line), f)) {
                const char *tail = strrchr(line, ':');
                hits += tail && strcmp(tail, want) == 0;
        }
        fclose(f);
        return hits > 0;
}

/* The whole disk under "/" as major:minor, or false (an overlay root, say). */
static bool root_disk(unsigned *maj, unsigned *min)
{
        struct stat s;
        if (stat("/", &s) < 0 || major(s.st_dev) == 0)
                return false;
        char p[128], buf[64];
        snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/partition", major(s.st_dev), minor(s.st_dev));
        if (access(p, F_OK) == 0)
                snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/../dev", major(s.st_dev), minor(s.st_dev));
        else
                snprintf(p, sizeof(p), "/sys/dev/block/%u:%u/dev", major(s.st_dev), minor(s.st_dev));
        FILE *f = fopen(p, "re");
        bool ok = f && fgets(buf, sizeof(buf), f) && sscanf(buf, "%u:%u", maj, min) == 2;
        if (f)
                fclose(f);
        return ok;
}

/* ---- tests ------------------------------------------------------------------- */

START_TEST(limits_written_and_child_attached)
{
        _cleanup_cgroup_host_ wk_cgroup_host *h = host();
        _cleanup_cgroup_ wk_cgroup *cg = create(h, "sbx_limits");
        sp_error *err = NULL;
        unsigned maj = 0, min = 0;
        bool disk = root_disk(&maj, &min);
        wk_cgroup_io_limit io = {maj, min, 10 * MiB, 5 * MiB};
        wk_cgroup_limits l = {.cpu_millicores = 500,
                              .memory_bytes = 64 * MiB,
                              .pids_max = 64,
                              .io_weight = 200,
                              .io = disk ? &io : NULL,
                              .n_io = disk ? 1 : 0};
        if (!disk)
                fprintf(stderr, "note: no whole disk under /, io device limits not exercised\n");
        sp_test_ok(wk_cgroup_set_limits(cg, &l, &err), &err);

        char want[128];
        if (wk_cgroup_version_of(cg) == WK_CGROUP_V1) {
                const char *cpu = wk_cgroup_path(cg, WK_CGROUP_CPU);
                const char *mem = wk_cgroup_path(cg, WK_CGROUP_MEMORY);
                assert_file(cpu, "cpu.cfs_period_us", "100000");
                assert_file(cpu, "cpu.cfs_quota_us", "50000");
                assert_file(cpu, "cpu.shares", "512");
                assert_file(mem, "memory.limit_in_bytes", "67108864");
                if (wk__cg_has(mem, "memory.memsw.limit_in_bytes"))
                        assert_file(mem, "memory.memsw.limit_in_bytes", "67108864");
                assert_file(wk_cgroup_path(cg, WK_CGROUP_PIDS), "pids.max", "64");
                if (disk) {
                        snprintf(want, sizeof(want), "%u:%u %llu", maj, min, (unsigned long long)(10 * MiB));
                        assert_file(wk_cgroup_path(cg, WK_CGROUP_IO), "blkio.throttle.read_bps_device", want);
                        snprintf(want, sizeof(want), "%u:%u %llu", maj, min, (unsigned long long)(5 * MiB));
                        assert_file(wk_cgroup_path(cg, WK_CGROUP_IO), "blkio.throttle.write_bps_device", want);
                }
        } else {
                const char *dir = wk_cgroup_path(cg, WK_CGROUP_MEMORY);
                assert_file(dir, "cpu.max", "50000 100000");
                assert_file(dir, "memory.max", "67108864");
                if (wk__cg_has(dir, "memory.swap.max"))
                        assert_file(dir, "memory.swap.max", "0");
                assert_file(dir, "pids.max", "64");
                if (disk) {
                        snprintf(want, sizeof(want), "%u:%u rbps=%llu wbps=%llu riops=max wiops=max", maj, min,
                                 (unsigned long long)(10 * MiB), (unsigned long long)(5 * MiB));
                        assert_file(dir, "io.max", want);
                }
        }

        /* The child lands in the group in every hierarchy; so do its children. */
        child c = child_start(body_pause);
        sp_test_ok(wk_cgroup_attach(cg, c.pid, &err), &err);
        child_go(&c);
        char r;
        child_read(&c, &r, 1);
        ck_assert(proc_in_group(c.pid, "sbx_limits"));
        bool empty = true;
        sp_test_ok(wk_cgroup_is_empty(cg, &empty, &err), &err);
        ck_assert(!empty);
        wk_cgroup_stats s;
        sp_test_ok(wk_cgroup_stats_read(cg, &s, &err), &err);
        ck_assert(s.valid & WK_CGROUP_STAT_PIDS);
        ck_assert_uint_eq(s.pids_current, 1);
        ck_assert(s.valid & WK_CGROUP_STAT_MEMORY);

        /* Zeros lift the limits. */
        sp_test_ok(wk_cgroup_set_limits(cg, &(wk_cgroup_limits){0}, &err), &err);
        char buf[64];
        if (wk_cgroup_version_of(cg) == WK_CGROUP_V1) {
                assert_file(wk_cgroup_path(cg, WK_CGROUP_CPU), "cpu.cfs_quota_us", "-1");
                read_file(wk_cgroup_path(cg, WK_CGROUP_MEMORY), "memory.limit_in_bytes", buf, sizeof(buf));
                ck_assert_uint_gt(strtoull(buf, NULL, 10), UINT64_C(1) << 60);
                assert_file(wk_cgroup_path(cg, WK_CGROUP_PIDS), "pids.max", "max");
                if (disk)
                        assert_file(wk_cgroup_path(cg, WK_CGROUP_IO), "blkio.throttle.read_bps_device", "");
        } else {
                assert_file(wk_cgroup_path(cg, WK_CGROUP_CPU), "cpu.max", "max 100000");
                assert_file(wk_cgroup_path(cg, WK_CGROUP_MEMORY), "memory.max", "max");
        }

        /* Bad values and a second group of the same name are refused. */
        ck_assert_int_eq(wk_cgroup_set_limits(cg, &(wk_cgroup_limits){.memory_bytes = 1}, NULL), -SP_E_INVALID);
        wk_cgroup *dup = NULL;
        ck_assert_int_eq(wk_cgroup_create(h, g_parent, "sbx_limits", &dup, NULL), -SP_E_CONFLICT);
        ck_assert_int_eq(wk_cgroup_attach(cg, 0, NULL), -SP_E_INVALID);

        sp_test_ok(wk_cgroup_kill_all(cg, &err), &err);
        int st = child_wait(&c);
        ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        sp_test_ok(wk_cgroup_remove(cg, &err), &err);
}
END_TEST

START_TEST(memory_limit_oom_kills)
{
        _cleanup_cgroup_host_ wk_cgroup_host *h = host();
        _cleanup_cgroup_ wk_cgroup *cg = create(h, "sbx_oom");
        sp_error *err = NULL;
        sp_test_ok(wk_cgroup_set_limits(cg, &(wk_cgroup_limits){.memory_bytes = 32 * MiB}, &err), &err);
        child c = child_start(body_eat_memory);
        sp_test_ok(wk_cgroup_attach(cg, c.pid, &err), &err);
        child_go(&c);
        int st = child_wait(&c);
        ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child was not OOM-killed (status 0x%x)", st);

        wk_cgroup_stats s;
        sp_test_ok(wk_cgroup_stats_read(cg, &s, &err), &err);
        ck_assert(s.valid & WK_CGROUP_STAT_OOM_KILLS);
        ck_assert_uint_ge(s.oom_kills, 1);
        if (s.valid & WK_CGROUP_STAT_MEMORY_PEAK) {
                ck_assert_uint_le(s.memory_peak, 32 * MiB);
                ck_assert_uint_ge(s.memory_peak, 16 * MiB);
        }
        sp_test_ok(wk_cgroup_remove(cg, &err), &err);
}
END_TEST

START_TEST(pids_limit_refuses_fork)
{
        _cleanup_cgroup_host_ wk_cgroup_host *h = host();
        _cleanup_cgroup_ wk_cgroup *cg = create(h, "sbx_pids");
        sp_error *err = NULL;
        sp_test_ok(wk_cgroup_set_limits(cg, &(wk_cgroup_limits){.pids_max = 5}, &err), &err);
        child c = child_start(body_fork_until_refused);
        sp_test_ok(wk_cgroup_attach(cg, c.pid, &err), &err);
        child_go(&c);
        int out[2];
        child_read(&c, out, sizeof(out));
        ck_assert_int_eq(out[0], 4); /* the child and four more make five */
        ck_assert_int_eq(out[1], EAGAIN);
        wk_cgroup_stats s;
        sp_test_ok(wk_cgroup_stats_read(cg, &s, &err), &err);
        ck_assert_uint_eq(s.pids_current, 5);

        sp_test_ok(wk_cgroup_kill_all(cg, &err), &err);
        bool empty = false;
        sp_test_ok(wk_cgroup_is_empty(cg, &empty, &err), &err);
        ck_assert(empty);
        int st = child_wait(&c);
        ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        sp_test_ok(wk_cgroup_remove(cg, &err), &err);
}
END_TEST

START_TEST(freeze_stops_cpu_thaw_resumes)
{
        _cleanup_cgroup_host_ wk_cgroup_host *h = host();
        _cleanup_cgroup_ wk_cgroup *cg = create(h, "sbx_freeze");
        sp_error *err = NULL;
        child c = child_start(body_spin);
        sp_test_ok(wk_cgroup_attach(cg, c.pid, &err), &err);
        child_go(&c);
        char r;
        child_read(&c, &r, 1);
        wait_cpu_above(cg, 20 * 1000 * 1000);

        sp_test_ok(wk_cgroup_freeze(cg, &err), &err);
        /* CPU time is added to the group's count after it was used (the kernel's
         * statistics are flushed lazily; more so on a busy host): let what was used
         * before the freeze arrive, then measure a window in which a spinning,
         * unfrozen child would use all 300 ms. */
        sleep_ms(100);
        uint64_t u1 = cpu_usage(cg);
        sleep_ms(300); /* a window to measure in, not a synchronisation */
        uint64_t u2 = cpu_usage(cg);
        ck_assert_msg(u2 - u1 < 15 * 1000 * 1000, "a frozen group used %llu ns of CPU in 300 ms",
                      (unsigned long long)(u2 - u1));
        sp_test_ok(wk_cgroup_freeze(cg, &err), &err); /* again: a no-op */

        sp_test_ok(wk_cgroup_thaw(cg, &err), &err);
        wait_cpu_above(cg, u2 + 20 * 1000 * 1000);

        /* A frozen group is killed all the same, and left thawed. */
        sp_test_ok(wk_cgroup_freeze(cg, &err), &err);
        sp_test_ok(wk_cgroup_kill_all(cg, &err), &err);
        int st = child_wait(&c);
        ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        if (wk_cgroup_version_of(cg) == WK_CGROUP_V1)
                assert_file(wk_cgroup_path(cg, WK_CGROUP_FREEZER), "freezer.state", "THAWED");
        else
                assert_file(wk_cgroup_path(cg, WK_CGROUP_FREEZER), "cgroup.freeze", "0");
        sp_test_ok(wk_cgroup_remove(cg, &err), &err);
}
END_TEST

/* Kills a tree with a setsid'd grandchild through kill, and checks that each
 * died of SIGKILL (the test process is their subreaper). */
static void kill_tree(int (*kill_fn)(const wk_cgroup *cg, sp_error **err))
{
        ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
        _cleanup_cgroup_host_ wk_cgroup_host *h = host();
        _cleanup_cgroup_ wk_cgroup *cg = create(h, "sbx_tree");
        sp_error *err = NULL;
        child c = child_start(body_tree);
        sp_test_ok(wk_cgroup_attach(cg, c.pid, &err), &err);
        child_go(&c);
        pid_t tree[2];
        child_read(&c, tree, sizeof(tree));
        sp_test_pidstat gs;
        ck_assert_int_eq(sp_test_pidstat_read(tree[0], &gs), 0);
        ck_assert_int_ne(gs.pgrp, getpgrp()); /* its own session: out of reach of a process-group kill */

        sp_test_ok(kill_fn(cg, &err), &err);
        bool empty = false;
        sp_test_ok(wk_cgroup_is_empty(cg, &empty, &err), &err);
        ck_assert(empty);
        int st = child_wait(&c);
        ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        for (size_t i = 0; i < 2; i++) {
                /* Orphaned when their parent died, they were reparented to us. */
                st = 0;
                sp_test_ok(sp_test_child_wait(tree[i], WAIT_MS, &st, &err), &err);
                ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "pid %d: status 0x%x", (int)tree[i], st);
        }
        sp_test_ok(wk_cgroup_remove(cg, &err), &err);
}

START_TEST(kill_all_kills_tree)
{
        kill_tree(wk_cgroup_kill_all);
}
END_TEST

static int kill_by_signal(const wk_cgroup *cg, sp_error **err)
{
        return wk__cg_kill_by_signal(cg, WK_CGROUP_KILL_TIMEOUT_MS, err);
}

START_TEST(kill_by_signal_kills_tree)
{
        kill_tree(kill_by_signal);
}
END_TEST

static int count_groups(const char *dir)
{
        int n = 0;
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));)
                n += de->d_type == DT_DIR && de->d_name[0] != '.';
        if (d)
                closedir(d);
        return n;
}

START_TEST(reopen_list_remove)
{
        _cleanup_cgroup_host_ wk_cgroup_host *h = host();
        sp_error *err = NULL;
        _cleanup_cgroup_ wk_cgroup *b = create(h, "sbx_b");
        _cleanup_cgroup_ wk_cgroup *a = create(h, "sbx_a");

        /* After a restart: open by name, same directories. */
        _cleanup_cgroup_ wk_cgroup *again = NULL;
        sp_test_ok(wk_cgroup_open(h, g_parent, "sbx_a", &again, &err), &err);
        ck_assert_str_eq(wk_cgroup_name(again), "sbx_a");
        for (unsigned bit = 1; bit <= WK_CGROUP_DEVICES; bit <<= 1) {
                const char *p1 = wk_cgroup_path(a, bit), *p2 = wk_cgroup_path(again, bit);
                ck_assert((p1 == NULL) == (p2 == NULL));
                if (p1)
                        ck_assert_str_eq(p1, p2);
        }
        wk_cgroup *missing = NULL;
        ck_assert_int_eq(wk_cgroup_open(h, g_parent, "sbx_missing", &missing, NULL), -SP_E_NOT_FOUND);

        char **names = NULL;
        sp_test_ok(wk_cgroup_list(h, g_parent, &names, &err), &err);
        ck_assert_str_eq(names[0], "sbx_a");
        ck_assert_str_eq(names[1], "sbx_b");
        ck_assert_ptr_null(names[2]);
        sp_strv_freep(&names);
        sp_test_ok(wk_cgroup_list(h, "space-test-none", &names, &err), &err);
        ck_assert_ptr_null(names[0]);
        sp_strv_freep(&names);

        /* A group with a process in it is not removed... */
        child c = child_start(body_pause);
        sp_test_ok(wk_cgroup_attach(again, c.pid, &err), &err);
        ck_assert_int_eq(wk_cgroup_remove(a, &err), -SP_E_CONFLICT);
        sp_error_free(err);
        err = NULL;
        /* ...until it is killed. Groups nested inside go with it. */
        char nested[PATH_MAX];
        PATHF(nested, "%s/inner", wk_cgroup_path(a, WK_CGROUP_FREEZER));
        ck_assert_int_eq(mkdir(nested, 0755), 0);
        sp_test_ok(wk_cgroup_kill_all(a, &err), &err);
        int st = child_wait(&c);
        ck_assert(WIFSIGNALED(st));
        sp_test_ok(wk_cgroup_remove(a, &err), &err);
        for (unsigned bit = 1; bit <= WK_CGROUP_DEVICES; bit <<= 1)
                if (wk_cgroup_path(a, bit))
                        ck_assert_int_eq(access(wk_cgroup_path(a, bit), F_OK), -1);
        sp_test_ok(wk_cgroup_remove(a, &err), &err); /* already gone: fine */
        ck_assert_int_eq(wk_cgroup_open(h, g_parent, "sbx_a", &missing, NULL), -SP_E_NOT_FOUND);

        /* A group half made (a crash while creating it) opens and removes. */
        if (wk_cgroup_version_of(b) == WK_CGROUP_V1) {
                ck_assert_int_eq(rmdir(wk_cgroup_path(b, WK_CGROUP_MEMORY)), 0);
                _cleanup_cgroup_ wk_cgroup *half = NULL;
                sp_test_ok(wk_cgroup_open(h, g_parent, "sbx_b", &half, &err), &err);
                sp_test_ok(wk_cgroup_remove(half, &err), &err);
        } else {
                sp_test_ok(wk_cgroup_remove(b, &err), &err);
        }

        /* Nothing is left below the parent in any hierarchy. */
        ck_assert_int_eq(for_each_parent_dir(count_groups), 0);
}
END_TEST

START_TEST(v2_without_controllers)
{
        /* A cgroup2 mount whose controllers are elsewhere (v1): the core
         * features still work, and limits fail clearly rather than silently. */
        _cleanup_cgroup_host_ wk_cgroup_host *h = host();
        ck_assert_int_eq(wk_cgroup_host_version(h), WK_CGROUP_V2);
        _cleanup_cgroup_ wk_cgroup *cg = create(h, "sbx_v2");
        sp_error *err = NULL;
        if (!(wk_cgroup_host_controllers(h) & WK_CGROUP_MEMORY)) {
                ck_assert_int_eq(wk_cgroup_set_limits(cg, &(wk_cgroup_limits){.memory_bytes = 64 * MiB}, &err),
                                 -SP_E_UNSUPPORTED);
                ck_assert_msg(strstr(err->message, "memory"), "%s", err->message);
                sp_error_free(err);
                err = NULL;
        }
        sp_test_ok(wk_cgroup_set_limits(cg, &(wk_cgroup_limits){0}, &err), &err);
        sp_test_ok(wk_cgroup_remove(cg, &err), &err);
}
END_TEST

static void host_setup(void)
{
        g_v2_root[0] = '\0';
        setup();
}

static void v2_setup(void)
{
        snprintf(g_v2_root, sizeof(g_v2_root), "/sys/fs/cgroup/unified");
        setup();
}

/* One TCase per test: the parent's unchecked fixture picks the hierarchy
 * and a fresh parent name, and removes everything under it afterwards. */
static void add(Suite *s, const char *name, const TTest *t, void (*up)(void))
{
        TCase *tc = tcase_create(name);
        tcase_set_timeout(tc, 90);
        tcase_add_unchecked_fixture(tc, up, teardown);
        tcase_add_test(tc, t);
        suite_add_tcase(s, tc);
}

static Suite *suite(bool v2_extra)
{
        Suite *s = suite_create("worker_cgroup");
        add(s, "limits", limits_written_and_child_attached, host_setup);
        add(s, "oom", memory_limit_oom_kills, host_setup);
        add(s, "pids", pids_limit_refuses_fork, host_setup);
        add(s, "freeze", freeze_stops_cpu_thaw_resumes, host_setup);
        add(s, "kill", kill_all_kills_tree, host_setup);
        add(s, "kill_signal", kill_by_signal_kills_tree, host_setup);
        add(s, "reopen", reopen_list_remove, host_setup);
        if (v2_extra) {
                /* A hybrid host's cgroup2 mount (no controllers): the v2 code
                 * paths for freezing, killing and removal. */
                add(s, "v2_freeze", freeze_stops_cpu_thaw_resumes, v2_setup);
                add(s, "v2_kill", kill_all_kills_tree, v2_setup);
                add(s, "v2_kill_signal", kill_by_signal_kills_tree, v2_setup);
                add(s, "v2_reopen", reopen_list_remove, v2_setup);
                add(s, "v2_no_controllers", v2_without_controllers, v2_setup);
        }
        return s;
}

int main(void)
{
        sp_test_require_root("cgroups need root");
        wk_cgroup_host *h = NULL;
        sp_error *err = NULL;
        if (wk_cgroup_host_detect(&h, &err) < 0)
                sp_test_skip("no usable cgroups: %s", err->message);
        unsigned need = WK_CGROUP_CPU | WK_CGROUP_CPUACCT | WK_CGROUP_MEMORY | WK_CGROUP_PIDS | WK_CGROUP_FREEZER;
        if ((wk_cgroup_host_controllers(h) & need) != need)
                sp_test_skip("the host lacks cgroup controllers the tests need (%s)", wk_cgroup_host_describe(h));
        fprintf(stderr, "cgroups: %s\n", wk_cgroup_host_describe(h));
        bool v1 = wk_cgroup_host_version(h) == WK_CGROUP_V1;
        wk_cgroup_host_free(h);
        struct statfs sfs;
        bool v2_extra = v1 && statfs("/sys/fs/cgroup/unified", &sfs) == 0 &&
                        (unsigned long)sfs.f_type == (unsigned long)CGROUP2_SUPER_MAGIC;
        if (!v2_extra)
                fprintf(stderr, "note: no separate cgroup2 mount; the v2 paths run only where the host is v2\n");
        return sp_test_main(suite(v2_extra));
}
