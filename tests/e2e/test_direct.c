/* SPDX-License-Identifier: Apache-2.0 */
/*
 * End to end, as a user: the real `spacectl up` starts a direct-mode cluster
 * (PostgreSQL, the control plane, a worker, the data plane) in a temporary
 * state directory on its own block of ports, with its own configuration
 * file, and the real spacectl drives it. `run` (output, exit code, the
 * sandbox gone afterwards, --keep), `exec` with stdin through cat, `cp` in
 * and out (checksums, directories, stdin and stdout), `exec -t` under a real
 * PTY (a /dev/pts terminal, our window size and its change, the exit code,
 * our terminal put back), signals forwarded, errors; the secrets key file
 * up makes (0600) and the secrets API it serves; a data plane SIGKILLed
 * while exec streams (status reports it, up repairs it, exec reconnects and
 * loses and repeats nothing); and `down --purge` leaving no process, cgroup,
 * mount, loop device or directory behind. Needs root, btrfs and PostgreSQL;
 * the fixture purges the cluster also when a test fails.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/loop.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "btrfs.h"
#include "guard.h"
#include "netns.h"
#include "harness.h"
#include "pg.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/id.h"
#include "space/json.h"

#define RUN_TIMEOUT_MS 300000
#define MAX_ARGS 64
#define BIG_BYTES (4 * 1024 * 1024)
/* Small CPU shares, so that the sandboxes of a test fit on a host of one CPU. */
#define CPU "0.2"

extern char **environ;

static char *dir; /* the test's temporary directory */
static char state[256], config[512], sandbox[64];
static int api_port;
/* The egress gateway's upstream side: a namespace with only loopback, so that
 * nothing a sandbox sends can leave (docs/networking.md, "Traffic safety"). */
static sp_test_netns upstream = {.fd = -1};
static int upstream_guard;
static int down_guard; /* the guard's spacectl down (guard.h) */
static bool up_ok;
static char up_failure[8192];

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

/* ---- running spacectl ---- */

typedef struct result {
        int code; /* exit code; 128 + signal if killed */
        sp_buf out, err;
} result;

static void result_free(result *r)
{
        sp_buf_free(&r->out);
        sp_buf_free(&r->err);
}
#define _cleanup_result_ __attribute__((cleanup(result_free)))

/* Our environment without the SPACE_* settings spacectl reads, plus its configuration file. */
static char **child_env(void)
{
        static char cfg[600], pg[600];
        size_t n = 0;
        while (environ[n])
                n++;
        char **env = calloc(n + 3, sizeof(char *));
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (strncmp(environ[i], "SPACE_PROFILE=", 14) != 0 && strncmp(environ[i], "SPACE_ENDPOINT=", 15) != 0 &&
                    strncmp(environ[i], "SPACE_API_KEY=", 14) != 0 && strncmp(environ[i], "SPACE_CA_FILE=", 14) != 0 &&
                    strncmp(environ[i], "SPACE_DATAPLANE_URL=", 20) != 0 &&
                    strncmp(environ[i], "SPACE_CONFIG=", 13) != 0)
                        env[k++] = environ[i];
        snprintf(cfg, sizeof(cfg), "SPACE_CONFIG=%s", config);
        env[k++] = cfg;
        /* The harness's PostgreSQL location, for up's private PostgreSQL. */
        if (getenv("SPACE_TEST_PG_BINDIR") && !getenv("SPACE_PG_BINDIR")) {
                snprintf(pg, sizeof(pg), "SPACE_PG_BINDIR=%s", getenv("SPACE_TEST_PG_BINDIR"));
                env[k++] = pg;
        }
        return env;
}

/* Starts spacectl with argv (NULL-terminated, without the program), stdin
 * from in_path (NULL: /dev/null), stdout and stderr into files under dir
 * named after tag. Returns the pid. */
static pid_t ctl_start(const char *in_path, const char *tag, const char *const *argv)
{
        char bin[1024], out[600], err[600];
        snprintf(bin, sizeof(bin), "%s/bin/spacectl", sp_test_binary_dir());
        snprintf(out, sizeof(out), "%s/%s.out", dir, tag);
        snprintf(err, sizeof(err), "%s/%s.err", dir, tag);
        const char *args[MAX_ARGS + 2] = {bin};
        size_t na = 1;
        for (size_t i = 0; argv[i] && na < MAX_ARGS; i++)
                args[na++] = argv[i];
        char **env = child_env();
        pid_t pid = fork();
        if (pid == 0) {
                int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
                int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
                if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
                        _exit(126);
                execve(bin, (char *const *)args, env);
                _exit(127);
        }
        free(env);
        ck_assert_int_gt(pid, 0);
        return pid;
}

/* Waits (bounded) for a spacectl started by ctl_start() and collects what it wrote. */
static result ctl_wait(pid_t pid, const char *tag)
{
        int status = 0;
        int64_t deadline = mono_ms() + RUN_TIMEOUT_MS;
        pid_t w;
        while ((w = waitpid(pid, &status, WNOHANG)) == 0 && mono_ms() < deadline)
                sleep_ms(20);
        if (w == 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                ck_abort_msg("spacectl (%s) did not finish in time", tag);
        }
        result r = {.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
        char p[600];
        snprintf(p, sizeof(p), "%s/%s.out", dir, tag);
        sp_file_read(p, 64 << 20, &r.out, NULL);
        sp_buf_append(&r.out, "", 0, NULL);
        snprintf(p, sizeof(p), "%s/%s.err", dir, tag);
        sp_file_read(p, 1 << 20, &r.err, NULL);
        sp_buf_append(&r.err, "", 0, NULL);
        return r;
}

/* ctl(in_path, "exec", sbx, "--", "true", NULL): runs spacectl to its end. */
static result ctl(const char *in_path, const char *first, ...)
{
        const char *argv[MAX_ARGS + 1];
        size_t n = 0;
        va_list ap;
        va_start(ap, first);
        for (const char *a = first; a && n < MAX_ARGS; a = va_arg(ap, const char *))
                argv[n++] = a;
        va_end(ap);
        argv[n] = NULL;
        return ctl_wait(ctl_start(in_path, "run", argv), "run");
}

#define assert_code(r, want) \
        ck_assert_msg((r).code == (want), "exit code %d, want %d\nstdout: %.2000s\nstderr: %.2000s", (r).code, (want), \
                      (r).out.data, (r).err.data)

/* ---- the cluster ---- */

/* The worker's cgroup parent for our state directory (docs/operations.md: space-direct-<FNV-1a of the path>). */
static void cgroup_name(char out[static 64])
{
        uint32_t h = 2166136261u;
        for (const char *q = state; *q; q++)
                h = (h ^ (uint8_t)*q) * 16777619u;
        snprintf(out, 64, "space-direct-%08x", h);
}

/* Appends to report everything of the cluster still on the host: processes
 * naming the state directory, cgroups of its name, mounts and loop devices
 * under it, the directory itself. */
static void leftovers(sp_buf *report)
{
        size_t sl = strlen(state);
        _cleanup_closedir_ DIR *proc = opendir("/proc");
        for (struct dirent *de; proc && (de = readdir(proc));) {
                if (de->d_name[0] < '0' || de->d_name[0] > '9' || atoi(de->d_name) == getpid())
                        continue;
                char p[300];
                snprintf(p, sizeof(p), "/proc/%s/cmdline", de->d_name);
                _cleanup_buf_ sp_buf cmd = SP_BUF_INIT;
                if (sp_file_read(p, 1 << 16, &cmd, NULL) < 0 || cmd.len == 0)
                        continue;
                for (size_t i = 0; i < cmd.len; i++)
                        if (cmd.data[i] == '\0')
                                cmd.data[i] = ' ';
                sp_buf_append(&cmd, "", 0, NULL);
                if (strstr(cmd.data, state))
                        sp_buf_appendf(report, NULL, "process %s: %.200s\n", de->d_name, cmd.data);
        }
        char cg[64], p[600];
        cgroup_name(cg);
        snprintf(p, sizeof(p), "/sys/fs/cgroup/%s", cg);
        if (access(p, F_OK) == 0)
                sp_buf_appendf(report, NULL, "cgroup %s\n", p);
        _cleanup_closedir_ DIR *hier = opendir("/sys/fs/cgroup");
        for (struct dirent *de; hier && (de = readdir(hier));) {
                snprintf(p, sizeof(p), "/sys/fs/cgroup/%s/%s", de->d_name, cg);
                if (de->d_name[0] != '.' && access(p, F_OK) == 0)
                        sp_buf_appendf(report, NULL, "cgroup %s\n", p);
        }
        _cleanup_fclose_ FILE *mi = fopen("/proc/self/mountinfo", "re");
        char line[4096], mnt[4096];
        while (mi && fgets(line, sizeof(line), mi))
                if (sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 && strncmp(mnt, state, sl) == 0 &&
                    (mnt[sl] == '/' || mnt[sl] == '\0'))
                        sp_buf_appendf(report, NULL, "mount %s\n", mnt);
        _cleanup_closedir_ DIR *blk = opendir("/sys/block");
        for (struct dirent *de; blk && (de = readdir(blk));) {
                if (strncmp(de->d_name, "loop", 4) != 0)
                        continue;
                snprintf(p, sizeof(p), "/sys/block/%s/loop/backing_file", de->d_name);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                if (sp_file_read(p, 4096, &b, NULL) == 0 && b.len > sl && strncmp(b.data, state, sl) == 0 &&
                    b.data[sl] == '/')
                        sp_buf_appendf(report, NULL, "loop device %s: %.*s", de->d_name, (int)b.len, b.data);
        }
        /* The sandboxes' links (d<port><slot>) and the firewall's table. */
        char prefix[32];
        snprintf(prefix, sizeof(prefix), "d%d", api_port);
        _cleanup_closedir_ DIR *net = opendir("/sys/class/net");
        for (struct dirent *de; net && (de = readdir(net));)
                if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
                        sp_buf_appendf(report, NULL, "link %s\n", de->d_name);
        char nft[200];
        snprintf(nft, sizeof(nft), "nft list table inet space_%s >/dev/null 2>&1", prefix);
        if (system(nft) == 0)
                sp_buf_appendf(report, NULL, "nftables table space_%s\n", prefix);
        if (access(state, F_OK) == 0)
                sp_buf_appendf(report, NULL, "directory %s\n", state);
}

static void kill_cgroup(const char *path)
{
        char p[700];
        snprintf(p, sizeof(p), "%s/cgroup.kill", path);
        sp_file_write_atomic(p, "1", 1, 0644, NULL);
        _cleanup_closedir_ DIR *d = opendir(path);
        for (struct dirent *de; d && (de = readdir(d));)
                if (de->d_type == DT_DIR && de->d_name[0] != '.') {
                        snprintf(p, sizeof(p), "%s/%s", path, de->d_name);
                        kill_cgroup(p);
                }
        for (int i = 0; i < 100 && rmdir(path) < 0 && errno == EBUSY; i++)
                sleep_ms(20);
}

/* Last resort after a failed purge: whatever leftovers() finds, removed. */
static void sweep(void)
{
        _cleanup_buf_ sp_buf report = SP_BUF_INIT;
        leftovers(&report);
        if (!report.len)
                return;
        fprintf(stderr, "e2e: sweeping what the cluster left:\n%s", report.data);
        for (char *l = report.data; l && *l;) {
                char *nl = strchr(l, '\n');
                if (nl)
                        *nl = '\0';
                if (strncmp(l, "process ", 8) == 0)
                        kill(atoi(l + 8), SIGKILL);
                else if (strncmp(l, "cgroup ", 7) == 0)
                        kill_cgroup(l + 7);
                l = nl ? nl + 1 : NULL;
        }
        for (int i = 0; i < 8; i++) {
                _cleanup_buf_ sp_buf again = SP_BUF_INIT;
                leftovers(&again);
                for (char *l = again.data; l && (l = strstr(l, "mount ")); l++) {
                        char m[4096];
                        if (sscanf(l + 6, "%4095s", m) == 1)
                                umount2(m, MNT_DETACH);
                }
        }
        _cleanup_closedir_ DIR *blk = opendir("/sys/block");
        for (struct dirent *de; blk && (de = readdir(blk));) {
                char p[600];
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                snprintf(p, sizeof(p), "/sys/block/%s/loop/backing_file", de->d_name);
                if (strncmp(de->d_name, "loop", 4) != 0 || sp_file_read(p, 4096, &b, NULL) < 0 ||
                    strncmp(b.data, state, strlen(state)) != 0)
                        continue;
                snprintf(p, sizeof(p), "/dev/%s", de->d_name);
                int fd = open(p, O_RDONLY | O_CLOEXEC);
                if (fd >= 0) {
                        ioctl(fd, LOOP_CLR_FD, 0);
                        close(fd);
                }
        }
        sp_test_tmpdir_remove(state);
}

/* Runs in the runner process (an unchecked fixture): the cluster and a sandbox for the tests. */
static void cluster_up(void)
{
        dir = sp_test_tmpdir("e2e");
        chmod(dir, 0711); /* PostgreSQL runs as its own user below it */
        snprintf(state, sizeof(state), "%s/s", dir);
        snprintf(config, sizeof(config), "%s/config.json", dir);
        /* spacectl up --api-port N listens on N to N+7 (docs/operations.md). */
        sp_error *perr = NULL;
        api_port = sp_test_free_port_block(8, &perr);
        if (api_port < 0) {
                snprintf(up_failure, sizeof(up_failure), "no ports: %s", perr->message);
                sp_error_free(perr);
                return;
        }
        char port[16], bin[1024];
        snprintf(port, sizeof(port), "%d", api_port);
        if (sp_test_netns_create(&upstream, &perr) < 0) {
                snprintf(up_failure, sizeof(up_failure), "no namespace: %s", perr->message);
                sp_error_free(perr);
                return;
        }
        const char *del_ns[] = {"ip", "netns", "delete", upstream.name, NULL};
        upstream_guard = sp_test_guard_run(del_ns, NULL);
        setenv("SPACE_WORKER_GATEWAY_UPSTREAM_NETNS", upstream.path, 1);
        /* Should this process die before cluster_down() (a crash, CTest's TIMEOUT), the cluster goes
         * anyway, ahead of the directory. */
        snprintf(bin, sizeof(bin), "%s/bin/spacectl", sp_test_binary_dir());
        const char *down[] = {bin, "down", "--purge", "--quiet", "--state-dir", state, NULL};
        down_guard = sp_test_guard_run(down, NULL);
        const char *argv[] = {"up", "--state-dir", state, "--api-port", port, NULL};
        result r = ctl_wait(ctl_start(NULL, "up", argv), "up");
        if (r.code != 0) {
                snprintf(up_failure, sizeof(up_failure), "spacectl up exited %d:\n%s\n%s", r.code, r.out.data,
                         r.err.data);
                result_free(&r);
                return;
        }
        result_free(&r);
        const char *create[] = {"sandbox", "create", "--template", "base", "--cpu", CPU, NULL};
        r = ctl_wait(ctl_start(NULL, "create", create), "create");
        snprintf(sandbox, sizeof(sandbox), "%.*s", (int)strcspn(r.out.data, "\n"), r.out.data);
        if (r.code != 0 || !sp_id_valid(sandbox, "sbx"))
                snprintf(up_failure, sizeof(up_failure), "sandbox create exited %d:\n%s\n%s", r.code, r.out.data,
                         r.err.data);
        else
                up_ok = true;
        result_free(&r);
}

static void cluster_down(void)
{
        const char *argv[] = {"down", "--purge", "--state-dir", state, NULL};
        result r = ctl_wait(ctl_start(NULL, "teardown", argv), "teardown");
        result_free(&r);
        sp_test_guard_done(down_guard);
        sweep();
        sp_test_netns_destroy(&upstream);
        sp_test_guard_done(upstream_guard);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

static void require_cluster(void)
{
        ck_assert_msg(up_ok, "%s", up_failure);
}

static char *path_in(const char *name)
{
        char *p;
        ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
        return p;
}

/* Writes n random bytes to a file of ours; returns its path. */
static char *random_file(const char *name, size_t n)
{
        char *p = path_in(name);
        _cleanup_free_ char *b = malloc(n);
        _cleanup_close_ int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        for (size_t got = 0; got < n;) {
                ssize_t r = read(fd, b + got, n - got);
                ck_assert_int_gt(r, 0);
                got += (size_t)r;
        }
        ck_assert_int_eq(sp_file_write_atomic(p, b, n, 0640, NULL), 0);
        return p;
}

static bool same_file(const char *a, const char *b)
{
        _cleanup_buf_ sp_buf x = SP_BUF_INIT, y = SP_BUF_INIT;
        return sp_file_read(a, 64 << 20, &x, NULL) == 0 && sp_file_read(b, 64 << 20, &y, NULL) == 0 && x.len == y.len &&
               (x.len == 0 || memcmp(x.data, y.data, x.len) == 0);
}

/* How many sandboxes the API lists. */
static size_t sandbox_count(void)
{
        _cleanup_result_ result r = ctl(NULL, "sandbox", "ls", "--json", "--all", NULL);
        assert_code(r, 0);
        _cleanup_json_ json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse(r.out.data, r.out.len, &o, NULL), 0);
        json_object *arr = NULL;
        ck_assert(json_object_object_get_ex(o, "sandboxes", &arr));
        return json_object_array_length(arr);
}

/* ---- the tests ---- */

START_TEST(run_prints_the_output_and_exits_with_the_code)
{
        require_cluster();
        size_t before = sandbox_count();
        _cleanup_result_ result r =
                ctl(NULL, "run", "base", "--cpu", CPU, "--", "sh", "-c", "echo hello; echo oops >&2; exit 3", NULL);
        assert_code(r, 3);
        ck_assert_str_eq(r.out.data, "hello\n");
        ck_assert_str_eq(r.err.data, "oops\n");
        ck_assert_uint_eq(sandbox_count(), before);
        /* A signal that ends the command: 128 + its number. */
        _cleanup_result_ result k = ctl(NULL, "run", "base", "--cpu", CPU, "--", "sh", "-c", "kill -TERM $$", NULL);
        assert_code(k, 128 + SIGTERM);
        /* --keep: the sandbox stays, named on stderr. */
        _cleanup_result_ result kept = ctl(NULL, "run", "base", "--cpu", CPU, "--keep", "--", "true", NULL);
        assert_code(kept, 0);
        const char *id = strstr(kept.err.data, "kept sandbox ");
        ck_assert_msg(id, "%s", kept.err.data);
        char sbx[64];
        snprintf(sbx, sizeof(sbx), "%.*s", (int)strcspn(id + 13, "\n"), id + 13);
        ck_assert_uint_eq(sandbox_count(), before + 1);
        _cleanup_result_ result rm = ctl(NULL, "sandbox", "rm", sbx, NULL);
        assert_code(rm, 0);
        ck_assert_uint_eq(sandbox_count(), before);
}
END_TEST

START_TEST(exec_forwards_stdin_through_cat)
{
        require_cluster();
        _cleanup_free_ char *in = random_file("cat.in", 3 * 1024 * 1024 + 17);
        _cleanup_free_ char *out = path_in("run.out");
        _cleanup_result_ result r = ctl(in, "exec", sandbox, "--", "cat", NULL);
        assert_code(r, 0);
        ck_assert_msg(same_file(in, out), "cat gave back %zu bytes, not the same %d", r.out.len, 3 * 1024 * 1024 + 17);
        /* Without stdin the command reads end of file at once. */
        _cleanup_result_ result none = ctl(in, "exec", "--no-stdin", sandbox, "--", "wc", "-c", NULL);
        assert_code(none, 0);
        ck_assert_int_eq(atoi(none.out.data), 0);
        /* --env, --cwd and --json (the output on stderr, the final session on stdout). */
        _cleanup_result_ result j = ctl(NULL, "exec", "--json", "--env", "GREETING=hi", "--cwd", "/tmp", sandbox, "--",
                                        "sh", "-c", "echo $GREETING $(pwd); exit 9", NULL);
        assert_code(j, 9);
        ck_assert_str_eq(j.err.data, "hi /tmp\n");
        _cleanup_json_ json_object *s = NULL;
        ck_assert_int_eq(sp_json_parse(j.out.data, j.out.len, &s, NULL), 0);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(s, "state")), "exited");
        ck_assert_int_eq(json_object_get_int(json_object_object_get(json_object_object_get(s, "exit"), "code")), 9);
}
END_TEST

START_TEST(cp_in_and_out)
{
        require_cluster();
        _cleanup_free_ char *big = random_file("big.bin", BIG_BYTES + 5);
        char remote[128];
        snprintf(remote, sizeof(remote), "%s:/tmp/big.bin", sandbox);
        _cleanup_result_ result up = ctl(NULL, "cp", big, remote, NULL);
        assert_code(up, 0);
        _cleanup_result_ result wc = ctl(NULL, "exec", sandbox, "--", "wc", "-c", "/tmp/big.bin", NULL);
        assert_code(wc, 0);
        ck_assert_int_eq(atoi(wc.out.data), BIG_BYTES + 5);
        /* Out again, to a file and into a directory (under its name, no temporary file left). */
        _cleanup_free_ char *back = path_in("back.bin");
        _cleanup_result_ result down = ctl(NULL, "cp", remote, back, NULL);
        assert_code(down, 0);
        ck_assert(same_file(big, back));
        _cleanup_free_ char *ddir = path_in("downloads");
        ck_assert_int_eq(mkdir(ddir, 0755), 0);
        _cleanup_result_ result into = ctl(NULL, "cp", remote, ddir, NULL);
        assert_code(into, 0);
        _cleanup_free_ char *landed = path_in("downloads/big.bin");
        ck_assert(same_file(big, landed));
        _cleanup_closedir_ DIR *d = opendir(ddir);
        int entries = 0;
        for (struct dirent *de; (de = readdir(d));)
                entries += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
        ck_assert_int_eq(entries, 1); /* big.bin, and no temporary file */
        /* Into a directory of the sandbox (found by its type, or named with a '/'), from stdin, to stdout. */
        _cleanup_result_ result mk = ctl(NULL, "exec", sandbox, "--", "mkdir", "-p", "/tmp/d", NULL);
        assert_code(mk, 0);
        char tmpdir[128], slashed[128], small[128];
        snprintf(tmpdir, sizeof(tmpdir), "%s:/tmp/d", sandbox);
        snprintf(slashed, sizeof(slashed), "%s:/tmp/d/", sandbox);
        snprintf(small, sizeof(small), "%s:/tmp/d/small.txt", sandbox);
        _cleanup_result_ result todir = ctl(NULL, "cp", big, tmpdir, NULL);
        assert_code(todir, 0);
        _cleanup_result_ result cmp = ctl(NULL, "exec", sandbox, "--", "cmp", "/tmp/big.bin", "/tmp/d/big.bin", NULL);
        assert_code(cmp, 0);
        _cleanup_free_ char *txt = path_in("small.txt");
        ck_assert_int_eq(sp_file_write_atomic(txt, "some text\n", 10, 0644, NULL), 0);
        _cleanup_result_ result named = ctl(NULL, "cp", txt, slashed, NULL);
        assert_code(named, 0);
        _cleanup_result_ result fromstdin = ctl(txt, "cp", "-", small, NULL);
        assert_code(fromstdin, 0);
        _cleanup_result_ result tostdout = ctl(NULL, "cp", small, "-", NULL);
        assert_code(tostdout, 0);
        ck_assert_str_eq(tostdout.out.data, "some text\n");
        /* A file the sandbox lacks: an error, and nothing made here. */
        char missing[128];
        snprintf(missing, sizeof(missing), "%s:/no/such/file", sandbox);
        _cleanup_free_ char *nothing = path_in("nothing");
        _cleanup_result_ result miss = ctl(NULL, "cp", missing, nothing, NULL);
        assert_code(miss, 1);
        ck_assert_msg(strstr(miss.err.data, "not_found"), "%s", miss.err.data);
        ck_assert_int_ne(access(nothing, F_OK), 0);
}
END_TEST

/* Reads the PTY's master until want appears in all (bounded); false at its end or on time out. */
static bool pty_read_until(int fd, sp_buf *all, const char *want, int timeout_ms)
{
        int64_t deadline = mono_ms() + timeout_ms;
        while (!(all->data && strstr(all->data, want))) {
                int64_t left = deadline - mono_ms();
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, (int)left) <= 0)
                        return false;
                char buf[4096];
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n <= 0)
                        return false;
                sp_buf_append(all, buf, (size_t)n, NULL);
        }
        return true;
}

START_TEST(exec_with_a_terminal)
{
        require_cluster();
        char bin[1024];
        snprintf(bin, sizeof(bin), "%s/bin/spacectl", sp_test_binary_dir());
        char **env = child_env();
        struct winsize ws = {.ws_row = 33, .ws_col = 101};
        int master;
        pid_t pid = forkpty(&master, NULL, NULL, &ws);
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                const char *argv[] = {
                        bin,  "exec", "-t", sandbox,
                        "--", "sh",   "-c", "tty; stty size; while read x; do echo \"got $x\"; stty size; done; exit 4",
                        NULL};
                execve(bin, (char *const *)argv, env);
                _exit(127);
        }
        free(env);
        _cleanup_buf_ sp_buf all = SP_BUF_INIT;
        bool started = pty_read_until(master, &all, "33 101", 60000);
        if (!started) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
        }
        ck_assert_msg(started, "no terminal size in: %s", all.data);
        ck_assert_msg(strstr(all.data, "/dev/pts/"), "tty printed no /dev/pts path: %s", all.data);
        /* Our terminal is in raw mode meanwhile: no echo here, no line editing. */
        struct termios t;
        ck_assert_int_eq(tcgetattr(master, &t), 0);
        ck_assert_int_eq(t.c_lflag & (ICANON | ECHO), 0);
        /* A new window size reaches the command (SIGWINCH, then a resize). */
        ws.ws_row = 40;
        ws.ws_col = 120;
        ck_assert_int_eq(ioctl(master, TIOCSWINSZ, &ws), 0);
        bool resized = false;
        for (int i = 0; i < 100 && !resized; i++) {
                ck_assert_int_eq(write(master, "line\r", 5), 5);
                resized = pty_read_until(master, &all, "40 120", 200);
        }
        ck_assert_msg(resized, "the new size never showed: %s", all.data);
        ck_assert_msg(strstr(all.data, "got line"), "%s", all.data);
        /* Ctrl-D ends its input; the exit code comes back. */
        ck_assert_int_eq(write(master, "\x04", 1), 1);
        int status = 0;
        int64_t deadline = mono_ms() + 60000;
        pid_t w;
        char drain[4096];
        while ((w = waitpid(pid, &status, WNOHANG)) == 0 && mono_ms() < deadline) {
                struct pollfd p = {.fd = master, .events = POLLIN};
                if (poll(&p, 1, 50) <= 0 || read(master, drain, sizeof(drain)) <= 0)
                        sleep_ms(10);
        }
        if (w == 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
        }
        ck_assert_msg(w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 4, "status 0x%x", status);
        /* Our terminal is back as it was. */
        ck_assert_int_eq(tcgetattr(master, &t), 0);
        ck_assert_int_eq(t.c_lflag & (ICANON | ECHO), ICANON | ECHO);
        close(master);
}
END_TEST

START_TEST(signals_reach_the_command)
{
        require_cluster();
        const char *argv[] = {"exec",
                              "--no-stdin",
                              sandbox,
                              "--",
                              "sh",
                              "-c",
                              "trap 'echo got INT; exit 5' INT; echo ready; while :; do sleep 0.1; done",
                              NULL};
        pid_t pid = ctl_start(NULL, "sig", argv);
        _cleanup_free_ char *out = path_in("sig.out");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        int64_t deadline = mono_ms() + 60000;
        while (mono_ms() < deadline) {
                sp_buf_clear(&b);
                if (sp_file_read(out, 4096, &b, NULL) == 0 && b.len && strstr(b.data, "ready"))
                        break;
                sleep_ms(50);
        }
        kill(pid, SIGINT);
        _cleanup_result_ result r = ctl_wait(pid, "sig");
        assert_code(r, 5);
        ck_assert_str_eq(r.out.data, "ready\ngot INT\n");
}
END_TEST

START_TEST(bad_input_is_refused)
{
        require_cluster();
        _cleanup_result_ result nocmd = ctl(NULL, "exec", sandbox, NULL);
        assert_code(nocmd, 2);
        _cleanup_result_ result both = ctl(NULL, "exec", "-i", "--no-stdin", sandbox, "--", "true", NULL);
        assert_code(both, 2);
        _cleanup_result_ result local = ctl(NULL, "cp", "a", "b", NULL);
        assert_code(local, 2);
        _cleanup_result_ result missing = ctl(NULL, "exec", "sbx_00000000000000000000", "--", "true", NULL);
        assert_code(missing, 1);
        ck_assert_msg(strstr(missing.err.data, "not_found"), "%s", missing.err.data);
        _cleanup_result_ result noprog = ctl(NULL, "exec", sandbox, "--", "/no/such/program", NULL);
        assert_code(noprog, 1);
        _cleanup_result_ result notemplate = ctl(NULL, "run", "no-such-template", "--", "true", NULL);
        assert_code(notemplate, 1);
}
END_TEST

START_TEST(secrets_are_sealed_with_a_key_file_of_its_own)
{
        require_cluster();
        /* up made the key ring (docs/secrets.md) in its state directory, for the control plane only. */
        char keys[400], value[400];
        snprintf(keys, sizeof(keys), "%s/controlplane/secrets.keys", state);
        struct stat st;
        ck_assert_int_eq(stat(keys, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(keys, 4096, &text, NULL), 0);
        ck_assert_int_eq(strncmp(text.data, "k1 ", 3), 0);
        ck_assert_uint_eq(text.len, 3 + 44 + 1);
        /* So the secrets API works: a value from stdin, never shown again. */
        snprintf(value, sizeof(value), "%s/../value", state);
        ck_assert_int_eq(sp_file_write_atomic(value, "e2e-SECRET-value\n", 17, 0600, NULL), 0);
        _cleanup_result_ result made = ctl(value, "secret", "create", "e2e-key", "--host", "api.example.test", NULL);
        assert_code(made, 0);
        _cleanup_result_ result ls = ctl(NULL, "secret", "ls", NULL);
        assert_code(ls, 0);
        ck_assert_msg(strstr(ls.out.data, "e2e-key") && !strstr(ls.out.data, "SECRET"), "%s", ls.out.data);
        _cleanup_result_ result rm = ctl(NULL, "secret", "rm", "e2e-key", NULL);
        assert_code(rm, 0);
        unlink(value);
}
END_TEST

START_TEST(a_killed_data_plane_is_reported_repaired_and_exec_reconnects)
{
        require_cluster();
        const char *argv[] = {"exec",
                              "--no-stdin",
                              sandbox,
                              "--",
                              "sh",
                              "-c",
                              "i=0; while [ $i -lt 40 ]; do echo line$i; i=$((i+1)); sleep 0.1; done",
                              NULL};
        pid_t pid = ctl_start(NULL, "stream", argv);
        _cleanup_free_ char *out = path_in("stream.out");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        int64_t deadline = mono_ms() + 60000;
        while (mono_ms() < deadline) {
                sp_buf_clear(&b);
                if (sp_file_read(out, 1 << 16, &b, NULL) == 0 && b.len && strstr(b.data, "line1\n"))
                        break;
                sleep_ms(20);
        }
        /* SIGKILL the data plane through its pidfile. */
        char pidfile[600];
        snprintf(pidfile, sizeof(pidfile), "%s/run/dataplane.pid", state);
        _cleanup_buf_ sp_buf pb = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(pidfile, 64, &pb, NULL), 0);
        pid_t dp = atoi(pb.data);
        ck_assert_int_gt(dp, 1);
        ck_assert_int_eq(kill(dp, SIGKILL), 0);
        ck_assert_int_eq(sp_test_pid_wait_gone(dp, 30000), 0);
        _cleanup_result_ result st = ctl(NULL, "status", "--state-dir", state, NULL);
        assert_code(st, 1);
        ck_assert_msg(strstr(st.out.data, "dataplane      stopped"), "%s", st.out.data);
        ck_assert_msg(strstr(st.out.data, "worker         healthy"), "%s", st.out.data);
        _cleanup_result_ result up = ctl(NULL, "up", "--state-dir", state, NULL);
        assert_code(up, 0);
        _cleanup_result_ result st2 = ctl(NULL, "status", "--state-dir", state, NULL);
        assert_code(st2, 0);
        ck_assert_msg(strstr(st2.out.data, "dataplane      healthy"), "%s", st2.out.data);
        /* exec carried on: every line once, in order. */
        _cleanup_result_ result r = ctl_wait(pid, "stream");
        assert_code(r, 0);
        _cleanup_buf_ sp_buf want = SP_BUF_INIT;
        for (int i = 0; i < 40; i++)
                sp_buf_appendf(&want, NULL, "line%d\n", i);
        ck_assert_str_eq(r.out.data, want.data);
}
END_TEST

START_TEST(sandboxes_have_a_network_through_the_gateway)
{
        require_cluster();
        /* A link with an address and a default route; the gateway as resolver; the default profile
         * (none) lets nothing out, and the sandbox's egress log says so. */
        _cleanup_result_ result r = ctl(NULL, "exec", sandbox, "--", "sh", "-c",
                                        "ip -4 -o addr show eth0 | grep -c inet; ip route | grep -c '^default'; "
                                        "grep -c '^nameserver' /etc/resolv.conf; "
                                        "timeout 10 wget -q -O - http://example.com/ || echo refused",
                                        NULL);
        assert_code(r, 0);
        ck_assert_str_eq(r.out.data, "1\n1\n1\nrefused\n");
        bool seen = false;
        char last[4096] = "";
        for (int i = 0; i < 50 && !seen; i++) {
                _cleanup_result_ result log = ctl(NULL, "--json", "sandbox", "egress-log", sandbox, NULL);
                assert_code(log, 0);
                seen = strstr(log.out.data, "example.com") && strstr(log.out.data, "refused");
                snprintf(last, sizeof(last), "%s", log.out.data);
                if (!seen)
                        sleep_ms(100);
        }
        ck_assert_msg(seen, "the refusal is not in the sandbox's egress log: %s", last);
        /* The gateway runs beside the worker, supervised by it. */
        char pidp[400];
        snprintf(pidp, sizeof(pidp), "%s/worker/state/gateway.pid", state);
        _cleanup_buf_ sp_buf pid = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(pidp, 64, &pid, NULL), 0);
        ck_assert_int_eq(kill(atoi(pid.data), 0), 0);
}
END_TEST

START_TEST(down_purge_leaves_nothing)
{
        require_cluster();
        _cleanup_result_ result r = ctl(NULL, "down", "--purge", "--state-dir", state, NULL);
        assert_code(r, 0);
        _cleanup_buf_ sp_buf report = SP_BUF_INIT;
        leftovers(&report);
        ck_assert_msg(report.len == 0, "left behind:\n%s", report.data);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("e2e_direct");
        TCase *tc = tcase_create("direct");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, run_prints_the_output_and_exits_with_the_code);
        tcase_add_test(tc, exec_forwards_stdin_through_cat);
        tcase_add_test(tc, cp_in_and_out);
        tcase_add_test(tc, exec_with_a_terminal);
        tcase_add_test(tc, signals_reach_the_command);
        tcase_add_test(tc, bad_input_is_refused);
        tcase_add_test(tc, secrets_are_sealed_with_a_key_file_of_its_own);
        tcase_add_test(tc, a_killed_data_plane_is_reported_repaired_and_exec_reconnects);
        tcase_add_test(tc, sandboxes_have_a_network_through_the_gateway);
        /* Last: it takes the cluster down. */
        tcase_add_test(tc, down_purge_leaves_nothing);
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
