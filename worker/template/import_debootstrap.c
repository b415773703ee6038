/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Building a template from a Debian suite with debootstrap: validated argv,
 * fork/execve (never a shell), its own process group so that a timeout kills
 * everything it started, output captured to a bounded log and reported line
 * by line.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/time.h"
#include "template/internal.h"

#define DEFAULT_PROGRAM "/usr/sbin/debootstrap"
#define LAST_LINE_MAX 512
#define POLL_SLICE_MS 250 /* how soon a cancellation is seen */

static bool suite_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > WK_DEBOOTSTRAP_SUITE_MAX || s[0] == '-')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
                        return false;
        return true;
}

/* http(s)://host[:port][/path] with only characters a mirror URL needs: the
 * value reaches debootstrap's shell code, so nothing a shell treats specially. */
static bool mirror_ok(const char *m)
{
        size_t n = strlen(m);
        const char *rest;
        if (n > WK_DEBOOTSTRAP_MIRROR_MAX)
                return false;
        if (strncmp(m, "http://", 7) == 0)
                rest = m + 7;
        else if (strncmp(m, "https://", 8) == 0)
                rest = m + 8;
        else
                return false;
        if (!*rest || *rest == '/' || *rest == ':')
                return false;
        for (const char *p = m; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                      strchr("-._~:/%@+=,[]", *p)))
                        return false;
        return true;
}

/* a,b,c: Debian package names (policy 5.6.1: [a-z0-9][a-z0-9+.-]+), at most 128 of them. */
static bool packages_ok(const char *p)
{
        size_t n = strlen(p), count = 0;
        if (n == 0 || n > WK_DEBOOTSTRAP_PACKAGES_MAX)
                return false;
        for (const char *w = p; *w;) {
                size_t len = strcspn(w, ",");
                if (len < 2 || !((w[0] >= 'a' && w[0] <= 'z') || (w[0] >= '0' && w[0] <= '9')) || ++count > 128)
                        return false;
                for (size_t i = 1; i < len; i++)
                        if (!((w[i] >= 'a' && w[i] <= 'z') || (w[i] >= '0' && w[i] <= '9') || strchr("+.-", w[i])))
                                return false;
                w += len;
                if (*w == ',' && !*++w)
                        return false;
        }
        return true;
}

bool wk_debootstrap_user_ok(const char *u)
{
        size_t n = strlen(u);
        if (n == 0 || n > WK_DEBOOTSTRAP_USER_MAX || strcmp(u, "root") == 0 ||
            !((u[0] >= 'a' && u[0] <= 'z') || u[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!((u[i] >= 'a' && u[i] <= 'z') || (u[i] >= '0' && u[i] <= '9') || u[i] == '_' || u[i] == '-'))
                        return false;
        return true;
}

static bool dest_ok(const char *d)
{
        if (d[0] != '/' || strlen(d) > WK_TEMPLATE_DEFAULT_MAX_PATH || d[strspn(d, "/")] == '\0')
                return false;
        for (const char *p = d; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        return false;
        return true;
}

int wk_debootstrap_argv(const wk_debootstrap_opts *opts, const char *dest, char ***ret, sp_error **err)
{
        const char *program = opts->program ? opts->program : DEFAULT_PROGRAM;
        if (!opts->suite || !suite_ok(opts->suite))
                return sp_error_set(err, SP_E_INVALID, "field 'suite' must be 1-%d characters of [a-z0-9-]",
                                    WK_DEBOOTSTRAP_SUITE_MAX);
        if (opts->mirror && !mirror_ok(opts->mirror))
                return sp_error_set(err, SP_E_INVALID, "field 'mirror' must be an http:// or https:// URL");
        if (opts->packages && !packages_ok(opts->packages))
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'packages' must be 1-128 Debian package names ([a-z0-9][a-z0-9+.-]+), "
                                    "comma-separated");
        if (opts->user && !wk_debootstrap_user_ok(opts->user))
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'user' must be a user name of 1-%d characters of [a-z0-9_-], starting with "
                                    "a letter or '_', other than root",
                                    WK_DEBOOTSTRAP_USER_MAX);
        if (!dest || !dest_ok(dest))
                return sp_error_set(err, SP_E_INVALID, "the destination must be an absolute path other than /");
        if (program[0] != '/')
                return sp_error_set(err, SP_E_INVALID, "the debootstrap program must be an absolute path");
        const char *words[] = {program, "--variant=minbase", opts->suite, dest, opts->mirror};
        _cleanup_strv_free_ char **v = calloc(SP_ARRAY_SIZE(words) + 1, sizeof(char *));
        if (!v)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0, n = 0; i < SP_ARRAY_SIZE(words); i++)
                if (words[i] && !(v[n++] = strdup(words[i])))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *ret = TAKE_PTR(v);
        return 0;
}

/* The child's environment: fixed, plus the daemon's proxy settings. */
static char **child_env(void)
{
        static const char *const fixed[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                            "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive", "HOME=/root"};
        static const char *const passed[] = {"http_proxy", "https_proxy", "no_proxy",
                                             "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"};
        char **env = calloc(SP_ARRAY_SIZE(fixed) + SP_ARRAY_SIZE(passed) + 1, sizeof(char *));
        size_t n = 0;
        if (!env)
                return NULL;
        for (size_t i = 0; i < SP_ARRAY_SIZE(fixed); i++)
                if (!(env[n++] = strdup(fixed[i])))
                        goto fail;
        for (size_t i = 0; i < SP_ARRAY_SIZE(passed); i++) {
                const char *v = getenv(passed[i]);
                if (v && asprintf(&env[n++], "%s=%s", passed[i], v) < 0) {
                        env[--n] = NULL;
                        goto fail;
                }
        }
        return env;
fail:
        sp_strv_freep(&env);
        return NULL;
}

typedef struct runner {
        const wk_debootstrap_opts *opts;
        const char *dest; /* replaced by <rootfs> in the lines reported: they name no host path */
        bool remount_dev; /* dest is on a nodev mount: debootstrap gets a bind mount with devices */
        int log_fd;
        uint64_t logged;
        char line[WK_DEBOOTSTRAP_LINE_MAX + 1];
        size_t line_len;
        bool line_cut; /* dropping the rest of an over-long line */
        char last[LAST_LINE_MAX];
} runner;

/* Replaces every occurrence of the destination in the line with "<rootfs>". */
static void hide_dest(runner *r)
{
        static const char tag[] = "<rootfs>";
        size_t dn = strlen(r->dest), tn = sizeof(tag) - 1;
        char *at = r->line;
        while (dn > tn && (at = strstr(at, r->dest))) {
                memmove(at + tn, at + dn, strlen(at + dn) + 1);
                memcpy(at, tag, tn);
                at += tn;
        }
        r->line_len = strlen(r->line);
}

static void emit_line(runner *r)
{
        r->line[r->line_len] = '\0';
        hide_dest(r);
        if (r->line_len > 0) {
                size_t k = r->line_len < sizeof(r->last) - 1 ? r->line_len : sizeof(r->last) - 1;
                memcpy(r->last, r->line, k);
                r->last[k] = '\0';
                if (r->opts->progress)
                        r->opts->progress(r->line, r->opts->userdata);
        }
        r->line_len = 0;
}

static void consume(runner *r, const char *p, size_t n)
{
        if (r->log_fd >= 0 && r->logged < WK_DEBOOTSTRAP_LOG_MAX) {
                size_t k = n < WK_DEBOOTSTRAP_LOG_MAX - r->logged ? n : (size_t)(WK_DEBOOTSTRAP_LOG_MAX - r->logged);
                if (write(r->log_fd, p, k) == (ssize_t)k)
                        r->logged += k;
                else
                        r->logged = WK_DEBOOTSTRAP_LOG_MAX; /* a broken log does not stop the build */
        }
        for (size_t i = 0; i < n; i++) {
                if (p[i] == '\n' || p[i] == '\r') {
                        if (!r->line_cut)
                                emit_line(r);
                        r->line_cut = false;
                        r->line_len = 0;
                } else if (!r->line_cut) {
                        r->line[r->line_len++] = p[i];
                        if (r->line_len == WK_DEBOOTSTRAP_LINE_MAX) {
                                emit_line(r);
                                r->line_cut = true;
                        }
                }
        }
}

static int64_t remaining_ms(int64_t deadline_us)
{
        int64_t now = sp_now_mono_us();
        return now >= deadline_us ? 0 : (deadline_us - now + 999) / 1000;
}

static bool cancelled(const wk_debootstrap_opts *opts)
{
        return opts->cancel && atomic_load(opts->cancel);
}

static void kill_group(pid_t pid)
{
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
}

/* Waits for pid to exit until the deadline, then kills what it left running
 * in its group (before reaping it, so the group id cannot have been reused)
 * and reaps it. Returns 0 with *status, -ETIMEDOUT or -ECANCELED (pid not
 * reaped). */
static int wait_exit(const wk_debootstrap_opts *opts, pid_t pid, int64_t deadline_us, int *status)
{
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        for (;;) {
                siginfo_t info = {0};
                if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) < 0 && errno != EINTR)
                        return -errno;
                if (info.si_pid == pid)
                        break;
                int64_t left = remaining_ms(deadline_us);
                if (left == 0)
                        return -ETIMEDOUT;
                if (cancelled(opts))
                        return -ECANCELED;
                if (pidfd >= 0) {
                        struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
                        (void)poll(&pfd, 1, left > POLL_SLICE_MS ? POLL_SLICE_MS : (int)left);
                } else {
                        /* Kernels without pidfd: check again shortly. */
                        (void)poll(NULL, 0, left > 100 ? 100 : (int)left);
                }
        }
        kill(-pid, SIGKILL);
        while (waitpid(pid, status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return 0;
}

static int run(runner *r, char **argv, char **envp, int64_t deadline_us, int *status, sp_error **err)
{
        int pipefd[2];
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        _cleanup_close_ int rd = pipefd[0];
        _cleanup_close_ int wr = pipefd[1];
        _cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (devnull < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /dev/null");
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pid_t parent = getpid();
        pid_t pid = fork();
        if (pid == 0) {
                /* Only async-signal-safe calls from here on. */
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                        _exit(126);
                setpgid(0, 0);
                struct sigaction dfl = {.sa_handler = SIG_DFL};
                for (int s = 1; s < NSIG; s++)
                        sigaction(s, &dfl, NULL);
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if (dup2(devnull, 0) < 0 || dup2(wr, 1) < 0 || dup2(wr, 2) < 0)
                        _exit(126);
                /* The worker's storage is mounted nodev, and debootstrap makes
                 * device nodes: in a mount namespace of its own it gets dest
                 * bound over itself with devices allowed (the nodes stay in
                 * the template; sandboxes' mounts are nodev and get their own
                 * /dev). */
                if (r->remount_dev &&
                    (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                     mount(r->dest, r->dest, NULL, MS_BIND, NULL) < 0 ||
                     mount(NULL, r->dest, NULL, MS_REMOUNT | MS_BIND | MS_NOATIME, NULL) < 0)) {
                        static const char msg[] = "E: cannot mount the destination with devices allowed\n";
                        if (write(1, msg, sizeof(msg) - 1) < 0)
                                _exit(125);
                        _exit(125);
                }
                syscall(SYS_close_range, 3u, ~0u, 0u);
                execve(argv[0], argv, envp);
                _exit(127);
        }
        int fork_errno = errno;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (pid < 0)
                return sp_error_set_errno(err, SP_E_IO, fork_errno, "fork");
        setpgid(pid, pid);
        wr = sp_close(wr);

        char buf[8192];
        for (;;) {
                int64_t left = remaining_ms(deadline_us);
                if (left == 0) {
                        kill_group(pid);
                        return sp_error_set(err, SP_E_TIMEOUT, "debootstrap did not finish in %u seconds",
                                            r->opts->timeout_sec ? r->opts->timeout_sec
                                                                 : WK_DEBOOTSTRAP_DEFAULT_TIMEOUT_SEC);
                }
                if (cancelled(r->opts)) {
                        kill_group(pid);
                        return sp_error_set(err, SP_E_UNAVAILABLE,
                                            "cancelled (the worker is stopping, or the template was deleted)");
                }
                struct pollfd pfd = {.fd = rd, .events = POLLIN};
                int pr = poll(&pfd, 1, left > POLL_SLICE_MS ? POLL_SLICE_MS : (int)left);
                if (pr < 0 && errno != EINTR) {
                        kill_group(pid);
                        return sp_error_set_errno(err, SP_E_IO, errno, "poll");
                }
                if (pr <= 0)
                        continue;
                ssize_t n = read(rd, buf, sizeof(buf));
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0) {
                        kill_group(pid);
                        return sp_error_set_errno(err, SP_E_IO, errno, "read debootstrap output");
                }
                if (n == 0)
                        break;
                consume(r, buf, (size_t)n);
        }
        if (r->line_len > 0 && !r->line_cut)
                emit_line(r);
        int w = wait_exit(r->opts, pid, deadline_us, status);
        if (w < 0) {
                kill_group(pid);
                if (w == -ECANCELED)
                        return sp_error_set(err, SP_E_UNAVAILABLE,
                                            "cancelled (the worker is stopping, or the template was deleted)");
                if (w == -ETIMEDOUT)
                        return sp_error_set(err, SP_E_TIMEOUT, "debootstrap did not finish in %u seconds",
                                            r->opts->timeout_sec ? r->opts->timeout_sec
                                                                 : WK_DEBOOTSTRAP_DEFAULT_TIMEOUT_SEC);
                return sp_error_set_errno(err, SP_E_IO, -w, "wait for debootstrap");
        }
        return 0;
}

/* The steps after debootstrap run the new system's programs as root under chroot, as debootstrap runs its
 * packages' scripts, and in a pid namespace of their own: whatever they leave running (a daemon that
 * escaped its process group) dies with the step. */
#define UNSHARE "/usr/bin/unshare"

/* Runs one of those steps (argv) and says what failed as "<what>: failed (exit status N): <its last line>". */
static int run_step(runner *r, char **argv, char **envp, int64_t deadline_us, const char *what, sp_error **err)
{
        r->last[0] = '\0';
        int status = 0;
        if (run(r, argv, envp, deadline_us, &status, err) < 0)
                return sp_error_wrap(err, "%s", what);
        char q[WK__QUOTE_MAX + 8];
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "%s: failed (%s %d): %s", what,
                                    WIFEXITED(status) ? "exit status" : "signal",
                                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                                    r->last[0] ? wk__tpl_quote(r->last, q, sizeof(q)) : "no output");
        return 0;
}

/* The packages, installed by the new system's own apt under chroot (debootstrap's --include resolves no
 * virtual packages: npm's dependencies fail it), from the mirror debootstrap wrote into its sources,
 * without recommended packages, with /proc (the namespace's) mounted for their scripts; apt's lists and
 * downloaded archives are removed after. */
static int install_packages(runner *r, char **envp, int64_t deadline_us, sp_error **err)
{
        /* policy-rc.d: no package starts a service while it is installed (it would run on the host). */
        static const char script[] =
                "set -e\n"
                "export DEBIAN_FRONTEND=noninteractive\n"
                "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d\n"
                "trap 'rm -f /usr/sbin/policy-rc.d' EXIT\n"
                "apt-get update -q\n"
                "apt-get install -y -q --no-install-recommends $(echo \"$1\" | tr , ' ')\n"
                "apt-get clean\n"
                "rm -rf /var/lib/apt/lists/*\n";
        _cleanup_free_ char *mount_proc = NULL;
        if (asprintf(&mount_proc, "--mount-proc=%s/proc", r->dest) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        char *argv[] = {UNSHARE,
                        "--pid",
                        "--fork",
                        "--kill-child",
                        mount_proc,
                        "/usr/sbin/chroot",
                        (char *)r->dest,
                        "/bin/sh",
                        "-c",
                        (char *)script,
                        "sh",
                        (char *)r->opts->packages,
                        NULL};
        return run_step(r, argv, envp, deadline_us, "install the packages", err);
}

/* The login user, made by the new system's own useradd under chroot (as debootstrap runs its packages'
 * scripts): uid and gid 1000 when free, a home from /etc/skel, bash; passwordless sudo when the system
 * has sudo's /etc/sudoers.d. The name was checked (wk_debootstrap_user_ok): nothing in it is special to
 * the shell. */
static int make_user(runner *r, char **envp, int64_t deadline_us, sp_error **err)
{
        static const char script[] = "set -e; u=\"$1\"\n"
                                     "if ! getent passwd \"$u\" >/dev/null; then\n"
                                     "  if getent passwd 1000 >/dev/null || getent group 1000 >/dev/null; then\n"
                                     "    useradd -m -s /bin/bash -U \"$u\"\n"
                                     "  else useradd -m -s /bin/bash -u 1000 -U \"$u\"; fi\n"
                                     "fi\n"
                                     "if [ -d /etc/sudoers.d ]; then\n"
                                     "  printf '%s ALL=(ALL:ALL) NOPASSWD: ALL\\n' \"$u\" > /etc/sudoers.d/space-user\n"
                                     "  chmod 0440 /etc/sudoers.d/space-user\n"
                                     "fi\n"
                                     "echo \"I: made the user $u ($(id -u \"$u\"):$(id -g \"$u\"), home $(getent "
                                     "passwd \"$u\" | cut -d: -f6))\"\n";
        char *argv[] = {UNSHARE,   "--pid", "--fork",       "--kill-child", "/usr/sbin/chroot",    (char *)r->dest,
                        "/bin/sh", "-c",    (char *)script, "sh",           (char *)r->opts->user, NULL};
        char what[WK_DEBOOTSTRAP_USER_MAX + 16];
        snprintf(what, sizeof(what), "make the user %s", r->opts->user);
        return run_step(r, argv, envp, deadline_us, what, err);
}

int wk_template_import_debootstrap(const wk_debootstrap_opts *opts, const char *dest, wk_template_meta **ret_meta,
                                   sp_error **err)
{
        _cleanup_strv_free_ char **argv = NULL;
        int rc = wk_debootstrap_argv(opts, dest, &argv, err);
        if (rc < 0)
                return rc;
        _cleanup_close_ int rootfd = wk__tpl_dest_open(dest, err);
        if (rootfd < 0)
                return rootfd;
        _cleanup_strv_free_ char **envp = child_env();
        if (!envp)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        _cleanup_close_ int log_fd = -1;
        if (opts->log_path) {
                log_fd = open(opts->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0640);
                if (log_fd < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "open log %s", opts->log_path);
        }
        _cleanup_free_ runner *r = calloc(1, sizeof(*r));
        if (!r)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        r->opts = opts;
        r->dest = dest;
        struct statvfs vfs;
        r->remount_dev = statvfs(dest, &vfs) == 0 && (vfs.f_flag & ST_NODEV);
        r->log_fd = log_fd;
        unsigned timeout = opts->timeout_sec ? opts->timeout_sec : WK_DEBOOTSTRAP_DEFAULT_TIMEOUT_SEC;
        int64_t deadline = sp_now_mono_us() + (int64_t)timeout * 1000000;
        int status = 0;
        if ((rc = run(r, argv, envp, deadline, &status, err)) < 0)
                return sp_error_wrap(err, "debootstrap %s", opts->suite);
        char q[WK__QUOTE_MAX + 8];
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                return sp_error_set(err, SP_E_UNAVAILABLE, "debootstrap %s: cannot run %s", opts->suite, argv[0]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "debootstrap %s failed (%s %d): %s", opts->suite,
                                    WIFEXITED(status) ? "exit status" : "signal",
                                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                                    r->last[0] ? wk__tpl_quote(r->last, q, sizeof(q)) : "no output");
        if (opts->packages && (rc = install_packages(r, envp, deadline, err)) < 0)
                return rc;
        if (opts->user && (rc = make_user(r, envp, deadline, err)) < 0)
                return rc;
        if (ret_meta) {
                _cleanup_template_meta_ wk_template_meta *m = NULL;
                if (wk_template_meta_new(WK_TEMPLATE_SOURCE_DEBOOTSTRAP, &m, err) < 0)
                        return -SP_E_LIMIT;
                sp_strv_freep(&m->cmd);
                m->cmd = calloc(2, sizeof(char *));
                if (!m->cmd || !(m->cmd[0] = strdup("/bin/bash")))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                *ret_meta = TAKE_PTR(m);
        }
        return 0;
}
