/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "harness.h"
#include "launcher.h"
#include "proc.h"

#define MAX_ARGS 1024
#define KILL_WAIT_MS 10000
#define RETRY_INTERVAL_MS 10
#define CONNECT_TIMEOUT_MS 1000
#define NEEDLE_MAX 4096

static int64_t now_ms(void)
{
        return sp_now_mono_us() / SP_USEC_PER_MSEC;
}

static int ms_until(int64_t deadline_ms)
{
        int64_t left = deadline_ms - now_ms();
        return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

static void sleep_ms(int ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static char **strv_dup(const char *const *v, size_t max, sp_error **err)
{
        size_t n = 0;
        while (v && v[n])
                if (++n > max) {
                        sp_error_set(err, SP_E_LIMIT, "more than %zu arguments", max);
                        return NULL;
                }
        char **r = calloc(n + 1, sizeof(*r));
        if (!r)
                abort();
        for (size_t i = 0; i < n; i++)
                if (!(r[i] = strdup(v[i])))
                        abort();
        return r;
}

static char *strdup_or_null(const char *s)
{
        char *r = s ? strdup(s) : NULL;
        if (s && !r)
                abort();
        return r;
}

static void describe_status(int st, char *out, size_t len)
{
        if (WIFEXITED(st))
                snprintf(out, len, "exited with code %d", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
                snprintf(out, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
                snprintf(out, len, "ended with status 0x%x", st);
}

/* Prints the log tail and sets the error, naming how the process ended if it did. */
__attribute__((format(printf, 4, 5))) static int proc_fail(const sp_test_proc *p, sp_error **err, sp_errc code,
                                                           const char *fmt, ...)
{
        char what[512], how[128] = "";
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        if (p->exited) {
                char st[96];
                describe_status(p->status, st, sizeof(st));
                snprintf(how, sizeof(how), " (it %s)", st);
        }
        sp_test_proc_dump_log(p, SP_TEST_LOG_TAIL_LINES);
        return sp_error_set(err, code, "%s: %s%s; log: %s", p->name, what, how, p->log_path);
}

static int launch(sp_test_proc *p, sp_error **err)
{
        struct stat st;
        p->log_offset = stat(p->log_path, &st) == 0 ? st.st_size : 0;
        sp_test_spawn_opts o = {.env = (const char *const *)p->env,
                                .log_path = p->log_path,
                                .cwd = p->cwd,
                                .netns = p->netns,
                                .new_pgroup = true,
                                .pdeathsig = SIGKILL};
        if (sp_test_spawn((const char *const *)p->argv, &o, &p->pid, err) < 0)
                return sp_error_wrap(err, "starting %s", p->name);
        p->pgid = p->pid;
        p->exited = false;
        p->status = 0;
        p->starts++;
        return 0;
}

int sp_test_proc_start(sp_test_proc *p, const char *name, const char *const *argv, const sp_test_proc_opts *opts,
                       sp_error **err)
{
        static const sp_test_proc_opts defaults = {0};
        const sp_test_proc_opts *o = opts ? opts : &defaults;
        memset(p, 0, sizeof(*p));
        if (!name || !*name || strchr(name, '/') || strlen(name) > 64)
                return sp_error_set(err, SP_E_INVALID, "process name '%s' is empty, too long or has '/'",
                                    name ? name : "");
        if (!argv || !argv[0])
                return sp_error_set(err, SP_E_INVALID, "%s: empty argv", name);

        p->name = strdup_or_null(name);
        p->argv = strv_dup(argv, MAX_ARGS, err);
        p->env = o->env ? strv_dup(o->env, MAX_ARGS, err) : NULL;
        p->cwd = strdup_or_null(o->cwd);
        p->netns = strdup_or_null(o->netns);
        int r = -SP_E_LIMIT;
        if (!p->argv || (o->env && !p->env))
                goto fail;
        if (o->log_path) {
                p->log_path = strdup_or_null(o->log_path);
        } else {
                p->own_dir = sp_test_tmpdir("proc");
                if (asprintf(&p->log_path, "%s/%s.log", p->own_dir, name) < 0)
                        abort();
        }
        r = launch(p, err);
        if (r < 0)
                goto fail;
        return 0;
fail:
        sp_test_proc_free(p);
        return r;
}

bool sp_test_proc_running(sp_test_proc *p)
{
        if (p->pid <= 0)
                return false;
        int st;
        pid_t r;
        do
                r = waitpid(p->pid, &st, WNOHANG);
        while (r < 0 && errno == EINTR);
        if (r == 0)
                return true;
        if (r < 0 && errno == ECHILD) {
                /* Started by the process that forked us: its status is not ours to read. */
                if (sp_test_pid_alive(p->pid))
                        return true;
                st = -1;
        } else if (r != p->pid) {
                st = -1;
        }
        p->status = st;
        p->exited = true;
        p->pid = 0;
        return false;
}

/* Connects to host:port within timeout_ms; returns the socket or -errno. */
static int tcp_connect(const char *host, int port, int timeout_ms)
{
        char service[16];
        snprintf(service, sizeof(service), "%d", port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        struct addrinfo *ai = NULL;
        int gai = getaddrinfo(host, service, &hints, &ai);
        if (gai != 0)
                return gai == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
        int result = -ECONNREFUSED;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
                _cleanup_close_ int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0) {
                        result = -errno;
                        continue;
                }
                if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
                        if (errno != EINPROGRESS) {
                                result = -errno;
                                continue;
                        }
                        struct pollfd pf = {.fd = fd, .events = POLLOUT};
                        int soerr = 0;
                        socklen_t len = sizeof(soerr);
                        int pr = poll(&pf, 1, timeout_ms);
                        if (pr <= 0) {
                                result = pr == 0 ? -ETIMEDOUT : -errno;
                                continue;
                        }
                        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0 || soerr != 0) {
                                result = -(soerr ? soerr : errno);
                                continue;
                        }
                }
                result = TAKE_FD(fd);
                break;
        }
        freeaddrinfo(ai);
        return result;
}

int sp_test_proc_wait_port(sp_test_proc *p, const char *host, int port, int64_t timeout_ms, sp_error **err)
{
        int64_t deadline = now_ms() + timeout_ms;
        int last = 0;
        for (;;) {
                if (!sp_test_proc_running(p))
                        return proc_fail(p, err, SP_E_UNAVAILABLE, "ended before %s:%d accepted connections", host,
                                         port);
                int left = ms_until(deadline);
                int fd = tcp_connect(host, port, left < CONNECT_TIMEOUT_MS ? left : CONNECT_TIMEOUT_MS);
                if (fd >= 0) {
                        close(fd);
                        return 0;
                }
                last = -fd;
                if (ms_until(deadline) == 0)
                        return proc_fail(p, err, SP_E_TIMEOUT, "%s:%d not accepting after %lld ms (%s)", host, port,
                                         (long long)timeout_ms, strerror(last));
                left = ms_until(deadline);
                sleep_ms(left < RETRY_INTERVAL_MS ? left : RETRY_INTERVAL_MS);
        }
}

/* One GET; returns the HTTP status, or -errno. */
static int http_get_status(const char *host, int port, const char *path, int timeout_ms)
{
        int64_t deadline = now_ms() + timeout_ms;
        _cleanup_close_ int fd = tcp_connect(host, port, timeout_ms);
        if (fd < 0)
                return fd;
        char req[1024];
        int n = snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: space-test\r\nConnection: close\r\n\r\n", path,
                         host, port);
        if (n < 0 || (size_t)n >= sizeof(req))
                return -ENAMETOOLONG;
        for (int off = 0; off < n;) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                if (poll(&pf, 1, ms_until(deadline)) <= 0)
                        return -ETIMEDOUT;
                ssize_t w = send(fd, req + off, (size_t)(n - off), MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN && errno != EINTR)
                        return -errno;
                off += w > 0 ? (int)w : 0;
        }
        char buf[256];
        size_t got = 0;
        while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
                struct pollfd pf = {.fd = fd, .events = POLLIN};
                if (poll(&pf, 1, ms_until(deadline)) <= 0)
                        return -ETIMEDOUT;
                ssize_t r = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (r < 0)
                        return -errno;
                if (r == 0)
                        break;
                got += (size_t)r;
        }
        buf[got] = '\0';
        int major, minor, status;
        if (sscanf(buf, "HTTP/%d.%d %d", &major, &minor, &status) != 3)
                return -EPROTO;
        return status;
}

int sp_test_proc_wait_http(sp_test_proc *p, const char *host, int port, const char *path, int64_t timeout_ms,
                           sp_error **err)
{
        int64_t deadline = now_ms() + timeout_ms;
        int last_status = 0, last_err = 0;
        if (!path || path[0] != '/')
                return sp_error_set(err, SP_E_INVALID, "HTTP path must start with '/'");
        for (;;) {
                if (!sp_test_proc_running(p))
                        return proc_fail(p, err, SP_E_UNAVAILABLE, "ended before GET %s answered 200", path);
                int left = ms_until(deadline);
                int r = http_get_status(host, port, path, left < CONNECT_TIMEOUT_MS ? left : CONNECT_TIMEOUT_MS);
                if (r == 200)
                        return 0;
                if (r > 0)
                        last_status = r;
                else
                        last_err = -r;
                if (ms_until(deadline) == 0) {
                        char why[128];
                        if (last_status > 0)
                                snprintf(why, sizeof(why), "last status %d", last_status);
                        else
                                snprintf(why, sizeof(why), "%s", strerror(last_err));
                        return proc_fail(p, err, SP_E_TIMEOUT, "GET http://%s:%d%s not 200 after %lld ms (%s)", host,
                                         port, path, (long long)timeout_ms, why);
                }
                left = ms_until(deadline);
                sleep_ms(left < RETRY_INTERVAL_MS ? left : RETRY_INTERVAL_MS);
        }
}

/* Reads what was appended since *off and looks for needle, keeping the last
 * needle_len - 1 bytes in carry so a match across two reads is found. */
static bool log_scan(int fd, off_t *off, const char *needle, char *carry, size_t *carry_len)
{
        size_t nlen = strlen(needle);
        char buf[65536 + NEEDLE_MAX];
        for (;;) {
                memcpy(buf, carry, *carry_len);
                ssize_t n = pread(fd, buf + *carry_len, 65536, *off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return false;
                *off += n;
                size_t total = *carry_len + (size_t)n;
                if (memmem(buf, total, needle, nlen))
                        return true;
                size_t keep = nlen > 1 ? nlen - 1 : 0;
                if (keep > total)
                        keep = total;
                memcpy(carry, buf + total - keep, keep);
                *carry_len = keep;
        }
}

int sp_test_proc_wait_log(sp_test_proc *p, const char *needle, int64_t timeout_ms, sp_error **err)
{
        if (!needle || !*needle || strlen(needle) > NEEDLE_MAX)
                return sp_error_set(err, SP_E_INVALID, "log needle empty or longer than %d", NEEDLE_MAX);
        int64_t deadline = now_ms() + timeout_ms;
        _cleanup_close_ int fd = open(p->log_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", p->log_path);
        /* Woken by writes to the log and by the process's exit. */
        _cleanup_close_ int ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
        if (ino >= 0 && inotify_add_watch(ino, p->log_path, IN_MODIFY) < 0)
                ino = sp_close(ino);
        _cleanup_close_ int pidfd = p->pid > 0 ? (int)syscall(SYS_pidfd_open, p->pid, 0) : -1;

        off_t off = p->log_offset;
        char carry[NEEDLE_MAX];
        size_t carry_len = 0;
        for (;;) {
                bool alive = sp_test_proc_running(p);
                if (log_scan(fd, &off, needle, carry, &carry_len))
                        return 0;
                if (!alive)
                        return proc_fail(p, err, SP_E_UNAVAILABLE, "ended before its log showed \"%s\"", needle);
                int left = ms_until(deadline);
                if (left == 0)
                        return proc_fail(p, err, SP_E_TIMEOUT, "log did not show \"%s\" within %lld ms", needle,
                                         (long long)timeout_ms);
                struct pollfd pf[2] = {{.fd = ino, .events = POLLIN}, {.fd = pidfd, .events = POLLIN}};
                if (ino < 0 || pidfd < 0) {
                        sleep_ms(left < 50 ? left : 50); /* no events to wait for: poll the file */
                        continue;
                }
                if (poll(pf, 2, left) > 0 && (pf[0].revents & POLLIN)) {
                        char ev[4096];
                        while (read(ino, ev, sizeof(ev)) > 0)
                                ;
                }
        }
}

int sp_test_proc_wait_exit(sp_test_proc *p, int64_t timeout_ms, int *ret_status, sp_error **err)
{
        if (p->pid > 0) {
                int st;
                if (sp_test_child_wait(p->pid, timeout_ms, &st, err) < 0)
                        return sp_error_wrap(err, "%s", p->name);
                p->status = st;
                p->exited = true;
                p->pid = 0;
        }
        if (!p->exited)
                return sp_error_set(err, SP_E_INVALID, "%s was never started", p->name);
        if (ret_status)
                *ret_status = p->status;
        return 0;
}

static int stop_with(sp_test_proc *p, int sig, int64_t grace_ms, sp_error **err)
{
        int r = 0;
        if (p->pid > 0) {
                int st = 0;
                r = sp_test_child_stop(p->pid, true, sig, grace_ms, &st, err);
                if (r < 0)
                        return sp_error_wrap(err, "stopping %s", p->name);
                p->status = st;
                p->exited = true;
                p->pid = 0;
        }
        /* The leader may be gone while its group lives on. */
        if (p->pgid > 0 && sp_test_pgroup_kill_wait(p->pgid, KILL_WAIT_MS) < 0)
                return sp_error_set(err, SP_E_TIMEOUT, "%s: process group %d survives SIGKILL", p->name, (int)p->pgid);
        p->pgid = 0;
        return r;
}

int sp_test_proc_stop(sp_test_proc *p, int64_t grace_ms, sp_error **err)
{
        return stop_with(p, SIGTERM, grace_ms, err);
}

int sp_test_proc_kill(sp_test_proc *p, sp_error **err)
{
        int r = stop_with(p, SIGKILL, KILL_WAIT_MS, err);
        return r < 0 ? r : 0;
}

int sp_test_proc_restart(sp_test_proc *p, int64_t grace_ms, sp_error **err)
{
        if (!p->argv)
                return sp_error_set(err, SP_E_INVALID, "restart: process never started");
        if (stop_with(p, SIGTERM, grace_ms, err) < 0)
                return -SP_E_INTERNAL;
        return launch(p, err);
}

void sp_test_proc_dump_log(const sp_test_proc *p, size_t max_lines)
{
        char title[128];
        snprintf(title, sizeof(title), "%s", p->name ? p->name : "process");
        sp_test_dump_file_tail(title, p->log_path, max_lines);
}

void sp_test_proc_free(sp_test_proc *p)
{
        if (!p)
                return;
        sp_error *e = NULL;
        if ((p->pid > 0 || p->pgid > 0) && stop_with(p, SIGKILL, KILL_WAIT_MS, &e) < 0) {
                fprintf(stderr, "%s\n", e->message);
                sp_error_free(e);
        }
        free(p->name);
        sp_strv_freep(&p->argv);
        sp_strv_freep(&p->env);
        free(p->cwd);
        free(p->netns);
        free(p->log_path);
        if (p->own_dir)
                sp_test_tmpdir_remove(p->own_dir);
        free(p->own_dir);
        memset(p, 0, sizeof(*p));
}

int sp_test_cluster_init(sp_test_cluster *c, const char *log_dir, sp_error **err)
{
        memset(c, 0, sizeof(*c));
        if (log_dir) {
                struct stat st;
                if (stat(log_dir, &st) < 0 || !S_ISDIR(st.st_mode))
                        return sp_error_set(err, SP_E_NOT_FOUND, "log directory %s does not exist", log_dir);
                c->dir = strdup_or_null(log_dir);
        } else {
                c->dir = sp_test_tmpdir("cluster");
                c->own_dir = true;
        }
        return 0;
}

sp_test_proc *sp_test_cluster_find(sp_test_cluster *c, const char *name)
{
        for (size_t i = 0; i < c->n; i++)
                if (strcmp(c->procs[i].name, name) == 0)
                        return &c->procs[i];
        return NULL;
}

sp_test_proc *sp_test_cluster_start(sp_test_cluster *c, const char *name, const char *const *argv,
                                    const sp_test_proc_opts *opts, sp_error **err)
{
        if (!c->dir) {
                sp_error_set(err, SP_E_INVALID, "cluster not initialised");
                return NULL;
        }
        if (c->n == SP_TEST_CLUSTER_MAX) {
                sp_error_set(err, SP_E_LIMIT, "cluster holds at most %d processes", SP_TEST_CLUSTER_MAX);
                return NULL;
        }
        if (name && sp_test_cluster_find(c, name)) {
                sp_error_set(err, SP_E_CONFLICT, "cluster already has a process named %s", name);
                return NULL;
        }
        sp_test_proc_opts o = {0};
        if (opts)
                o = *opts;
        _cleanup_free_ char *log = NULL;
        if (asprintf(&log, "%s/%s.log", c->dir, name ? name : "") < 0)
                abort();
        o.log_path = log;
        sp_test_proc *p = &c->procs[c->n];
        if (sp_test_proc_start(p, name, argv, &o, err) < 0)
                return NULL;
        c->n++;
        return p;
}

void sp_test_cluster_dump_logs(const sp_test_cluster *c, size_t max_lines)
{
        for (size_t i = 0; i < c->n; i++)
                sp_test_proc_dump_log(&c->procs[i], max_lines);
}

void sp_test_cluster_stop_all(sp_test_cluster *c, int64_t grace_ms)
{
        for (size_t i = c->n; i > 0; i--) {
                sp_test_proc *p = &c->procs[i - 1];
                sp_error *e = NULL;
                if ((p->pid > 0 || p->pgid > 0) && sp_test_proc_stop(p, grace_ms, &e) < 0) {
                        fprintf(stderr, "%s\n", e->message);
                        sp_error_free(e);
                }
        }
}

void sp_test_cluster_destroy(sp_test_cluster *c)
{
        if (!c)
                return;
        sp_test_cluster_stop_all(c, 5000);
        for (size_t i = 0; i < c->n; i++)
                sp_test_proc_free(&c->procs[i]);
        if (c->own_dir && c->dir)
                sp_test_tmpdir_remove(c->dir);
        free(c->dir);
        memset(c, 0, sizeof(*c));
}
