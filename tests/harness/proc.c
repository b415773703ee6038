/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "guard.h"
#include "proc.h"

extern char **environ;

#define SPAWN_MAX_ENV 4096
/* How long a SIGKILLed process may take to disappear before we give up. */
#define KILL_WAIT_MS 10000

enum spawn_step {
        STEP_PGROUP = 1,
        STEP_SETNS,
        STEP_MOUNTNS,
        STEP_STDIO,
        STEP_CWD,
        STEP_USER,
        STEP_PDEATHSIG,
        STEP_EXEC,
};

static const char *step_name(int step)
{
        switch (step) {
        case STEP_PGROUP:
                return "setpgid";
        case STEP_SETNS:
                return "setns";
        case STEP_MOUNTNS:
                return "private /sys";
        case STEP_STDIO:
                return "stdio";
        case STEP_CWD:
                return "chdir";
        case STEP_USER:
                return "dropping privileges";
        case STEP_PDEATHSIG:
                return "PR_SET_PDEATHSIG";
        case STEP_EXEC:
                return "exec";
        default:
                return "child setup";
        }
}

struct spawn_report {
        int step;
        int errnum;
};

static int64_t deadline_after(int64_t timeout_ms)
{
        return sp_now_mono_us() + (timeout_ms < 0 ? 0 : timeout_ms) * SP_USEC_PER_MSEC;
}

/* Milliseconds left until deadline (>= 0), rounded up. */
static int ms_left(int64_t deadline)
{
        int64_t left = deadline - sp_now_mono_us();
        if (left <= 0)
                return 0;
        left = (left + SP_USEC_PER_MSEC - 1) / SP_USEC_PER_MSEC;
        return left > INT_MAX ? INT_MAX : (int)left;
}

static void sleep_ms(int ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int pidfd_open_(pid_t pid)
{
        return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* Waits for pid to exit: 1 = exited (or gone), 0 = timed out, -1 = no pidfd
 * support (the caller polls instead). */
static int pidfd_wait(pid_t pid, int64_t deadline)
{
        _cleanup_close_ int fd = pidfd_open_(pid);
        if (fd < 0)
                return errno == ESRCH ? 1 : -1;
        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int r = poll(&p, 1, ms_left(deadline));
                if (r > 0)
                        return 1;
                if (r == 0)
                        return 0;
                if (errno != EINTR)
                        return -1;
        }
}

/* The child between fork and exec: only async-signal-safe calls. */
__attribute__((noreturn)) static void spawn_child(const char *const *argv, char *const *envp,
                                                  const sp_test_spawn_opts *o, int devnull, int logfd, int nsfd,
                                                  int report_fd, pid_t parent)
{
        struct spawn_report rep = {0, 0};

        if (o->new_pgroup && setpgid(0, 0) < 0) {
                rep.step = STEP_PGROUP;
                goto fail;
        }
        if (nsfd >= 0) {
                if (setns(nsfd, CLONE_NEWNET) < 0) {
                        rep.step = STEP_SETNS;
                        goto fail;
                }
                /* /sys shows the namespace that mounted it: give the child its
                 * own, in a mount namespace of its own that no host mount sees. */
                if (o->netns_sysfs &&
                    (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 ||
                     umount2("/sys", MNT_DETACH) < 0 || mount("sysfs", "/sys", "sysfs", 0, NULL) < 0)) {
                        rep.step = STEP_MOUNTNS;
                        goto fail;
                }
        }
        if (dup2(devnull, 0) < 0 || (logfd >= 0 && (dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0))) {
                rep.step = STEP_STDIO;
                goto fail;
        }
        if (o->cwd && chdir(o->cwd) < 0) {
                rep.step = STEP_CWD;
                goto fail;
        }
        if (o->drop_user && (setgroups(0, NULL) < 0 || setgid(o->gid) < 0 || setuid(o->uid) < 0)) {
                rep.step = STEP_USER;
                goto fail;
        }

        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int sig = 1; sig < NSIG; sig++) {
                if (sig == SIGKILL || sig == SIGSTOP)
                        continue;
                struct sigaction sa = {.sa_handler = SIG_DFL};
                (void)sigaction(sig, &sa, NULL);
        }

        /* After the credential change, which clears the parent-death signal. */
        if (o->pdeathsig > 0) {
                if (prctl(PR_SET_PDEATHSIG, o->pdeathsig) < 0) {
                        rep.step = STEP_PDEATHSIG;
                        goto fail;
                }
                if (getppid() != parent)
                        _exit(127); /* the parent is already gone */
        }

        /* Nothing of ours leaks into the program; the report pipe closes on exec. */
        (void)close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        execvpe(argv[0], (char *const *)argv, envp);
        rep.step = STEP_EXEC;
fail:
        rep.errnum = errno;
        (void)!write(report_fd, &rep, sizeof(rep));
        _exit(127);
}

static bool env_overridden(const char *entry, const char *const *add)
{
        const char *eq = strchr(entry, '=');
        size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
        for (const char *const *a = add; a && *a; a++)
                if (strncmp(*a, entry, n) == 0 && ((*a)[n] == '=' || (*a)[n] == '\0'))
                        return true;
        return false;
}

/* environ minus the overridden names, plus add. The strings are borrowed. */
static char **build_env(const char *const *add, sp_error **err)
{
        size_t n = 0, k = 0;
        for (char **e = environ; e && *e; e++)
                n++;
        for (const char *const *a = add; a && *a; a++) {
                if (!strchr(*a, '=')) {
                        sp_error_set(err, SP_E_INVALID, "environment entry '%s' has no '='", *a);
                        return NULL;
                }
                n++;
        }
        if (n > SPAWN_MAX_ENV) {
                sp_error_set(err, SP_E_LIMIT, "environment has %zu entries (at most %d)", n, SPAWN_MAX_ENV);
                return NULL;
        }
        char **env = calloc(n + 1, sizeof(*env));
        if (!env)
                abort();
        for (char **e = environ; e && *e; e++)
                if (!env_overridden(*e, add))
                        env[k++] = *e;
        for (const char *const *a = add; a && *a; a++)
                env[k++] = (char *)*a;
        env[k] = NULL;
        return env;
}

int sp_test_spawn(const char *const *argv, const sp_test_spawn_opts *opts, pid_t *ret_pid, sp_error **err)
{
        static const sp_test_spawn_opts defaults = {0};
        const sp_test_spawn_opts *o = opts ? opts : &defaults;

        if (!argv || !argv[0] || !*argv[0])
                return sp_error_set(err, SP_E_INVALID, "spawn: empty argv");
        if (o->drop_user && geteuid() != 0)
                return sp_error_set(err, SP_E_PERMISSION, "spawn %s: changing user needs root", argv[0]);

        _cleanup_free_ char **envp = build_env(o->env, err);
        if (!envp)
                return -SP_E_INVALID;
        _cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /dev/null");
        _cleanup_close_ int logfd = -1;
        if (o->log_path) {
                logfd = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                if (logfd < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "open log %s", o->log_path);
        }
        _cleanup_close_ int nsfd = -1;
        if (o->netns) {
                nsfd = open(o->netns, O_RDONLY | O_CLOEXEC);
                if (nsfd < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "open netns %s", o->netns);
        }
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        _cleanup_close_ int rd = pfd[0];
        _cleanup_close_ int wr = pfd[1];

        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "fork");
        if (pid == 0)
                spawn_child(argv, envp, o, devnull, logfd, nsfd, wr, parent);
        wr = sp_close(wr);

        struct spawn_report rep;
        ssize_t n;
        do
                n = read(rd, &rep, sizeof(rep));
        while (n < 0 && errno == EINTR);
        if (n == (ssize_t)sizeof(rep)) {
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                return sp_error_set_errno(err, rep.errnum == ENOENT && rep.step == STEP_EXEC ? SP_E_NOT_FOUND : SP_E_IO,
                                          rep.errnum, "spawn %s: %s", argv[0], step_name(rep.step));
        }
        *ret_pid = pid;
        return 0;
}

int sp_test_child_wait(pid_t pid, int64_t timeout_ms, int *ret_status, sp_error **err)
{
        int64_t deadline = deadline_after(timeout_ms);
        int st = 0;
        bool polled = false;

        for (;;) {
                pid_t r = waitpid(pid, &st, WNOHANG);
                if (r == pid) {
                        if (ret_status)
                                *ret_status = st;
                        return 0;
                }
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0 && errno == ECHILD) {
                        /* Started by another process (the runner of a forked test, say). */
                        if (sp_test_pid_wait_gone(pid, ms_left(deadline)) < 0)
                                return sp_error_set(err, SP_E_TIMEOUT, "process %d still running after %lld ms",
                                                    (int)pid, (long long)timeout_ms);
                        if (ret_status)
                                *ret_status = -1;
                        return 0;
                }
                if (r < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "waitpid %d", (int)pid);
                if (ms_left(deadline) == 0 && polled)
                        return sp_error_set(err, SP_E_TIMEOUT, "process %d still running after %lld ms", (int)pid,
                                            (long long)timeout_ms);
                polled = true;
                int w = pidfd_wait(pid, deadline);
                if (w < 0)
                        sleep_ms(ms_left(deadline) < 5 ? ms_left(deadline) : 5);
        }
}

int sp_test_child_stop(pid_t pid, bool group, int sig, int64_t grace_ms, int *ret_status, sp_error **err)
{
        if (pid <= 0)
                return sp_error_set(err, SP_E_INVALID, "stop: no process");
        pid_t target = group ? -pid : pid;
        int killed = 0;

        if (kill(target, sig) < 0 && errno != ESRCH)
                return sp_error_set_errno(err, SP_E_IO, errno, "kill %d", (int)target);
        sp_error *e = NULL;
        int r = sp_test_child_wait(pid, grace_ms, ret_status, &e);
        if (r == -SP_E_TIMEOUT) {
                sp_error_free(e);
                e = NULL;
                killed = 1;
                (void)kill(target, SIGKILL);
                r = sp_test_child_wait(pid, KILL_WAIT_MS, ret_status, &e);
        }
        if (r < 0) {
                sp_error_move(err, &e);
                return r;
        }
        /* Whatever the leader left behind in its group goes too. */
        if (group && sp_test_pgroup_kill_wait(pid, KILL_WAIT_MS) < 0)
                return sp_error_set(err, SP_E_TIMEOUT, "process group %d survived SIGKILL", (int)pid);
        return killed;
}

bool sp_test_pid_alive(pid_t pid)
{
        sp_test_pidstat st;
        return pid > 0 && sp_test_pidstat_read(pid, &st) == 0 && st.state != 'Z' && st.state != 'X';
}

int sp_test_pid_wait_gone(pid_t pid, int64_t timeout_ms)
{
        int64_t deadline = deadline_after(timeout_ms);
        for (;;) {
                if (!sp_test_pid_alive(pid))
                        return 0;
                int w = pidfd_wait(pid, deadline);
                if (w > 0)
                        return 0;
                if (ms_left(deadline) == 0)
                        return sp_test_pid_alive(pid) ? -SP_E_TIMEOUT : 0;
                if (w < 0)
                        sleep_ms(5);
        }
}

int sp_test_pidstat_read(pid_t pid, sp_test_pidstat *ret)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        if (n <= 0)
                return -1;
        buf[n] = '\0';
        /* "pid (comm) S ppid pgrp ...": comm may hold spaces and parentheses. */
        char *open_paren = strchr(buf, '(');
        char *close_paren = strrchr(buf, ')');
        if (!open_paren || !close_paren || close_paren < open_paren)
                return -1;
        sp_test_pidstat st = {.pid = pid};
        size_t clen = (size_t)(close_paren - open_paren - 1);
        if (clen >= sizeof(st.comm))
                clen = sizeof(st.comm) - 1;
        memcpy(st.comm, open_paren + 1, clen);
        st.comm[clen] = '\0';
        int ppid = 0, pgrp = 0;
        if (sscanf(close_paren + 1, " %c %d %d", &st.state, &ppid, &pgrp) != 3)
                return -1;
        st.ppid = ppid;
        st.pgrp = pgrp;
        *ret = st;
        return 0;
}

int sp_test_pidstat_list(sp_test_pidstat **ret, size_t *ret_n)
{
        _cleanup_closedir_ DIR *d = opendir("/proc");
        if (!d)
                return -1;
        size_t n = 0, cap = 0;
        sp_test_pidstat *v = NULL;
        struct dirent *de;
        while ((de = readdir(d))) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                if (*end || pid <= 0 || pid > INT_MAX)
                        continue;
                sp_test_pidstat st;
                if (sp_test_pidstat_read((pid_t)pid, &st) < 0)
                        continue; /* it exited meanwhile */
                if (n == cap) {
                        cap = cap ? cap * 2 : 256;
                        v = realloc(v, cap * sizeof(*v));
                        if (!v)
                                abort();
                }
                v[n++] = st;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

size_t sp_test_pgroup_members(pid_t pgid, pid_t *out, size_t max)
{
        _cleanup_free_ sp_test_pidstat *all = NULL;
        size_t n = 0, found = 0;
        if (pgid <= 0 || sp_test_pidstat_list(&all, &n) < 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                if (all[i].pgrp != pgid || all[i].state == 'Z' || all[i].state == 'X')
                        continue;
                if (out && found < max)
                        out[found] = all[i].pid;
                found++;
        }
        return found;
}

int sp_test_pgroup_kill_wait(pid_t pgid, int64_t timeout_ms)
{
        int64_t deadline = deadline_after(timeout_ms);
        pid_t members[256];
        for (;;) {
                size_t n = sp_test_pgroup_members(pgid, members, SP_ARRAY_SIZE(members));
                if (n == 0)
                        return 0;
                (void)kill(-pgid, SIGKILL);
                if (ms_left(deadline) == 0)
                        return -SP_E_TIMEOUT;
                if (n > SP_ARRAY_SIZE(members))
                        n = SP_ARRAY_SIZE(members);
                for (size_t i = 0; i < n; i++)
                        (void)sp_test_pid_wait_gone(members[i], ms_left(deadline));
        }
}

size_t sp_test_procs_with_cwd(const char *dir, pid_t *out, size_t max)
{
        _cleanup_free_ sp_test_pidstat *all = NULL;
        size_t n = 0, found = 0, dlen = strlen(dir);
        if (dlen == 0 || sp_test_pidstat_list(&all, &n) < 0)
                return 0;
        while (dlen > 1 && dir[dlen - 1] == '/')
                dlen--;
        for (size_t i = 0; i < n; i++) {
                char link[64], cwd[PATH_MAX];
                if (all[i].state == 'Z' || all[i].state == 'X')
                        continue;
                snprintf(link, sizeof(link), "/proc/%d/cwd", (int)all[i].pid);
                ssize_t l = readlink(link, cwd, sizeof(cwd) - 1);
                if (l <= 0)
                        continue;
                cwd[l] = '\0';
                if (strncmp(cwd, dir, dlen) != 0 || (cwd[dlen] != '\0' && cwd[dlen] != '/'))
                        continue;
                if (out && found < max)
                        out[found] = all[i].pid;
                found++;
        }
        return found;
}

/* worker_argv with --purge added; the strings stay the caller's. */
static int purge_argv(const char *const *worker_argv, const char **out, size_t cap)
{
        size_t n = 0;
        while (worker_argv[n] && n + 2 < cap) {
                out[n] = worker_argv[n];
                n++;
        }
        if (worker_argv[n])
                return -1;
        out[n++] = "--purge";
        out[n] = NULL;
        return 0;
}

int sp_test_worker_purge(const char *const *worker_argv, sp_error **err)
{
        const char *argv[80];
        if (purge_argv(worker_argv, argv, 80) < 0)
                return sp_error_set(err, SP_E_INVALID, "too many worker flags to purge");
        pid_t pid;
        int status = 0;
        if (sp_test_spawn(argv, &(sp_test_spawn_opts){0}, &pid, err) < 0 ||
            sp_test_child_wait(pid, 120000, &status, err) < 0)
                return -1;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return sp_error_set(err, SP_E_INTERNAL, "space-worker --purge failed (status %d)", status);
        return 0;
}

int sp_test_worker_purge_guard(const char *const *worker_argv, sp_error **err)
{
        const char *argv[80];
        if (purge_argv(worker_argv, argv, 80) < 0)
                return sp_error_set(err, SP_E_INVALID, "too many worker flags to purge");
        return sp_test_guard_run(argv, err);
}

size_t sp_test_procs_with_cmdline(const char *a, const char *b)
{
        size_t n = 0;
        _cleanup_closedir_ DIR *d = opendir("/proc");
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (de->d_name[0] < '0' || de->d_name[0] > '9')
                        continue;
                char p[300], buf[8192];
                snprintf(p, sizeof(p), "/proc/%s/cmdline", de->d_name);
                FILE *f = fopen(p, "re");
                if (!f)
                        continue;
                size_t k = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                for (size_t i = 0; i < k; i++)
                        if (!buf[i])
                                buf[i] = ' ';
                buf[k] = '\0';
                if (strstr(buf, a) && (!b || strstr(buf, b)))
                        n++;
        }
        return n;
}
