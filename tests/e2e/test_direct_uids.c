/* SPDX-License-Identifier: Apache-2.0 */
/*
 * End to end: two direct-mode clusters on one host (two `spacectl up`, at
 * the same time, each its own state directory and port block) give their
 * sandboxes disjoint host uid ranges (docs/operations.md, "Several clusters
 * on one host"): each worker runs with the --uid-base the host registry
 * gave its cluster, the two ranges do not meet, each sandbox's processes
 * run as host uids of its own cluster's range, and `down --purge` gives
 * each range back. The registry is the test's own file
 * (SPACE_DIRECT_UID_REGISTRY), so that the test neither depends on nor
 * changes the host's. Sandboxes get no network here (the network has its
 * own tests). Needs root, btrfs and PostgreSQL.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "btrfs.h"
#include "guard.h"
#include "harness.h"
#include "pg.h"
#include "port.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/id.h"
#include "space/json.h"

#define RUN_TIMEOUT_MS 600000
#define SLOTS 256 /* the worker's default */
#define RANGE ((uint64_t)SLOTS * 65536)

extern char **environ;

typedef struct cluster {
        char state[300], config[300];
        int port;
        int guard;
        pid_t up;
        char sandbox[64];
} cluster;

static char *dir;
static char registry[600];
static cluster C[2];

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Starts spacectl for cluster c with argv (NULL-terminated), its output in <dir>/<tag>.{out,err}. */
static pid_t ctl_start(const cluster *c, const char *tag, const char *const *argv)
{
        char bin[1024], out[700], err[700], cfg[400], reg[700], pg[700];
        snprintf(bin, sizeof(bin), "%s/bin/spacectl", sp_test_binary_dir());
        snprintf(out, sizeof(out), "%s/%s.out", dir, tag);
        snprintf(err, sizeof(err), "%s/%s.err", dir, tag);
        snprintf(cfg, sizeof(cfg), "SPACE_CONFIG=%s", c->config);
        snprintf(reg, sizeof(reg), "SPACE_DIRECT_UID_REGISTRY=%s", registry);
        const char *args[32] = {bin};
        size_t na = 1;
        for (size_t i = 0; argv[i] && na < 31; i++)
                args[na++] = argv[i];
        size_t n = 0;
        while (environ[n])
                n++;
        const char **env = calloc(n + 8, sizeof(char *));
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (strncmp(environ[i], "SPACE_", 6) != 0)
                        env[k++] = environ[i];
        env[k++] = cfg;
        env[k++] = reg;
        env[k++] = "SPACE_WORKER_SANDBOX_NETWORK=false";
        if (getenv("SPACE_TEST_PG_BINDIR")) {
                snprintf(pg, sizeof(pg), "SPACE_PG_BINDIR=%s", getenv("SPACE_TEST_PG_BINDIR"));
                env[k++] = pg;
        }
        pid_t pid = fork();
        if (pid == 0) {
                int in = open("/dev/null", O_RDONLY);
                int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
                        _exit(126);
                execve(bin, (char *const *)args, (char *const *)env);
                _exit(127);
        }
        free(env);
        ck_assert_int_gt(pid, 0);
        return pid;
}

/* Waits (bounded) for a spacectl and asserts its exit code 0; *out gets its stdout when out is set. */
static void ctl_wait_ok(pid_t pid, const char *tag, sp_buf *out)
{
        int status = 0;
        int64_t deadline = mono_ms() + RUN_TIMEOUT_MS;
        pid_t w;
        while ((w = waitpid(pid, &status, WNOHANG)) == 0 && mono_ms() < deadline)
                usleep(50 * 1000);
        if (w == 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
        }
        char p[700];
        _cleanup_buf_ sp_buf err = SP_BUF_INIT, o = SP_BUF_INIT;
        snprintf(p, sizeof(p), "%s/%s.err", dir, tag);
        sp_file_read(p, 1 << 20, &err, NULL);
        sp_buf_append(&err, "", 1, NULL);
        snprintf(p, sizeof(p), "%s/%s.out", dir, tag);
        sp_file_read(p, 1 << 20, &o, NULL);
        sp_buf_append(&o, "", 1, NULL);
        ck_assert_msg(w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "spacectl %s: status %d\n%s\n%s", tag,
                      status, o.data, err.data);
        if (out)
                sp_buf_append(out, o.data, strlen(o.data) + 1, NULL);
}

static void setup(void)
{
        dir = sp_test_tmpdir("e2e-uids");
        chmod(dir, 0711); /* PostgreSQL runs as its own user below it */
        snprintf(registry, sizeof(registry), "%s/uid-ranges.json", dir);
        char bin[1024];
        snprintf(bin, sizeof(bin), "%s/bin/spacectl", sp_test_binary_dir());
        /* spacectl up --api-port N listens on N to N+7 (docs/operations.md): one block of 16 for both. */
        sp_error *e = NULL;
        int ports = sp_test_free_port_block(16, &e);
        ck_assert_msg(ports > 0, "no ports: %s", e ? e->message : "");
        for (int i = 0; i < 2; i++) {
                cluster *c = &C[i];
                snprintf(c->state, sizeof(c->state), "%s/s%d", dir, i);
                snprintf(c->config, sizeof(c->config), "%s/config%d.json", dir, i);
                c->port = ports + 8 * i;
                const char *down[] = {bin, "down", "--purge", "--quiet", "--state-dir", c->state, NULL};
                c->guard = sp_test_guard_run(down, NULL);
        }
}

static void teardown(void)
{
        for (int i = 0; i < 2; i++) {
                const char *argv[] = {"down", "--purge", "--quiet", "--state-dir", C[i].state, NULL};
                char tag[32];
                snprintf(tag, sizeof(tag), "teardown%d", i);
                pid_t p = ctl_start(&C[i], tag, argv);
                waitpid(p, NULL, 0);
                sp_test_guard_done(C[i].guard);
        }
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* The --uid-base the cluster's worker runs with (its command line). */
static uint64_t worker_uid_base(const cluster *c)
{
        char p[700];
        snprintf(p, sizeof(p), "%s/run/worker.pid", c->state);
        _cleanup_buf_ sp_buf pid = SP_BUF_INIT, cmd = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(p, 64, &pid, NULL), 0);
        sp_buf_append(&pid, "", 1, NULL);
        snprintf(p, sizeof(p), "/proc/%d/cmdline", atoi(pid.data));
        ck_assert_int_eq(sp_file_read(p, 1 << 16, &cmd, NULL), 0);
        for (size_t off = 0; off < cmd.len; off += strlen(cmd.data + off) + 1)
                if (strncmp(cmd.data + off, "--uid-base=", 11) == 0)
                        return strtoull(cmd.data + off + 11, NULL, 10);
        ck_abort_msg("the worker of %s runs without --uid-base", c->state);
        return 0;
}

/* The registry's base for state (0: none). */
static uint64_t registered(const char *state)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(registry, 1 << 20, &b, NULL) < 0)
                return 0;
        _cleanup_json_ json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse(b.data, b.len, &o, NULL), 0);
        json_object *arr = json_object_object_get(o, "ranges");
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                json_object *e = json_object_array_get_idx(arr, i);
                if (strcmp(json_object_get_string(json_object_object_get(e, "state_dir")), state) == 0) {
                        ck_assert_int_ge(json_object_get_int64(json_object_object_get(e, "count")), (int64_t)RANGE);
                        return (uint64_t)json_object_get_int64(json_object_object_get(e, "base"));
                }
        }
        return 0;
}

/* The host uids of the processes under cgroup directory path, into uids (n of them). */
static void cgroup_uids(const char *path, uint64_t *uids, size_t *n, size_t max)
{
        char p[1200];
        snprintf(p, sizeof(p), "%s/cgroup.procs", path);
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        int pid;
        while (f && fscanf(f, "%d", &pid) == 1 && *n < max) {
                char sp[64], line[256];
                snprintf(sp, sizeof(sp), "/proc/%d/status", pid);
                _cleanup_fclose_ FILE *st = fopen(sp, "re");
                while (st && fgets(line, sizeof(line), st))
                        if (strncmp(line, "Uid:", 4) == 0)
                                uids[(*n)++] = strtoull(line + 4, NULL, 10);
        }
        _cleanup_closedir_ DIR *d = opendir(path);
        for (struct dirent *de; d && (de = readdir(d));)
                if (de->d_type == DT_DIR && de->d_name[0] != '.') {
                        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
                        cgroup_uids(p, uids, n, max);
                }
}

START_TEST(two_clusters_give_their_sandboxes_disjoint_uid_ranges)
{
        /* Both at once: their reservations race for the registry. */
        for (int i = 0; i < 2; i++) {
                char port[16], tag[16];
                snprintf(port, sizeof(port), "%d", C[i].port);
                snprintf(tag, sizeof(tag), "up%d", i);
                const char *argv[] = {"up", "--quiet", "--state-dir", C[i].state, "--api-port", port, NULL};
                C[i].up = ctl_start(&C[i], tag, argv);
        }
        for (int i = 0; i < 2; i++) {
                char tag[16];
                snprintf(tag, sizeof(tag), "up%d", i);
                ctl_wait_ok(C[i].up, tag, NULL);
        }
        uint64_t base[2];
        for (int i = 0; i < 2; i++) {
                base[i] = worker_uid_base(&C[i]);
                char canon[PATH_MAX];
                ck_assert_ptr_nonnull(realpath(C[i].state, canon));
                ck_assert_msg(registered(canon) == base[i], "cluster %d: registry %llu, worker %llu", i,
                              (unsigned long long)registered(canon), (unsigned long long)base[i]);
        }
        ck_assert_msg(base[0] + RANGE <= base[1] || base[1] + RANGE <= base[0], "ranges %llu and %llu meet",
                      (unsigned long long)base[0], (unsigned long long)base[1]);
        /* A sandbox in each runs as host uids of its own cluster's range. */
        for (int i = 0; i < 2; i++) {
                char tag[16];
                snprintf(tag, sizeof(tag), "create%d", i);
                const char *argv[] = {"sandbox", "create", "--template", "base", "--cpu", "0.2", NULL};
                _cleanup_buf_ sp_buf out = SP_BUF_INIT;
                ctl_wait_ok(ctl_start(&C[i], tag, argv), tag, &out);
                snprintf(C[i].sandbox, sizeof(C[i].sandbox), "%.*s", (int)strcspn(out.data, "\n"), out.data);
                ck_assert_msg(sp_id_valid(C[i].sandbox, "sbx"), "%s", out.data);
        }
        for (int i = 0; i < 2; i++) {
                /* The worker's cgroup parent (docs/operations.md: space-direct-<FNV-1a of the path>). */
                uint32_t h = 2166136261u;
                for (const char *q = C[i].state; *q; q++)
                        h = (h ^ (uint8_t)*q) * 16777619u;
                /* The group in cgroup v2, or in each v1 hierarchy. */
                char cg[128], p[400];
                snprintf(cg, sizeof(cg), "space-direct-%08x", h);
                uint64_t uids[2048];
                size_t n = 0;
                snprintf(p, sizeof(p), "/sys/fs/cgroup/%s", cg);
                cgroup_uids(p, uids, &n, 2048);
                _cleanup_closedir_ DIR *hier = opendir("/sys/fs/cgroup");
                for (struct dirent *de; hier && (de = readdir(hier));) {
                        snprintf(p, sizeof(p), "/sys/fs/cgroup/%s/%s", de->d_name, cg);
                        if (de->d_name[0] != '.' && access(p, F_OK) == 0)
                                cgroup_uids(p, uids, &n, 2048);
                }
                size_t in_range = 0;
                for (size_t k = 0; k < n; k++) {
                        if (uids[k] == 0)
                                continue; /* the worker's own helpers */
                        ck_assert_msg(uids[k] >= base[i] && uids[k] < base[i] + RANGE,
                                      "cluster %d: a process of host uid %llu, outside %llu+%llu", i,
                                      (unsigned long long)uids[k], (unsigned long long)base[i],
                                      (unsigned long long)RANGE);
                        in_range++;
                }
                ck_assert_msg(in_range > 0, "cluster %d: no sandbox process under %s (%zu processes)", i, cg, n);
        }
        /* down --purge gives each range back. */
        for (int i = 0; i < 2; i++) {
                char tag[16];
                snprintf(tag, sizeof(tag), "down%d", i);
                char canon[PATH_MAX];
                ck_assert_ptr_nonnull(realpath(C[i].state, canon));
                const char *argv[] = {"down", "--purge", "--quiet", "--state-dir", C[i].state, NULL};
                ctl_wait_ok(ctl_start(&C[i], tag, argv), tag, NULL);
                ck_assert_msg(registered(canon) == 0, "cluster %d's range is still registered", i);
        }
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("e2e_direct_uids");
        TCase *tc = tcase_create("uids");
        tcase_set_timeout(tc, 1200);
        tcase_add_unchecked_fixture(tc, setup, teardown);
        tcase_add_test(tc, two_clusters_give_their_sandboxes_disjoint_uid_ranges);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("spacectl up runs a worker (namespaces, cgroups, mounts)");
        sp_test_btrfs_require();
        sp_test_pg_require();
        return sp_test_main(suite());
}
