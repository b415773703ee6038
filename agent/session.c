/* SPDX-License-Identifier: Apache-2.0 */
/* Command sessions: spawn with pipes or a PTY, stream output under credit,
 * forward stdin, signals and resizes, report the exit, survive reconnection. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agent.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"

#define STDIN_WINDOW (64u << 10)
#define MAX_ENDED 1024
#define EXIT_DRAIN_MAX (1u << 20)

struct ag_session {
        char id[65];
        pid_t pid;
        bool exited, exit_sent, killed, pty;
        int status;
        ag_outstream out[2]; /* stdout, stderr (a PTY has only stdout) */
        int stdin_fd; /* pipe write end or a dup of the PTY master, -1 if none */
        ag_watch stdin_watch;
        sp_buf stdin_buf;
        bool stdin_eof; /* worker closed stdin: close once stdin_buf drained */
        ag_conn *conn;
        uint32_t channel;
        int64_t ended_ms;
        ag_session *next;
};

static ag_session *sessions;

size_t ag_session_count(void)
{
        size_t n = 0;
        for (ag_session *s = sessions; s; s = s->next)
                n++;
        return n;
}

static ag_session *find_id(const char *id)
{
        for (ag_session *s = sessions; s; s = s->next)
                if (strcmp(s->id, id) == 0)
                        return s;
        return NULL;
}

static ag_session *find_channel(ag_conn *c, uint32_t channel)
{
        for (ag_session *s = sessions; s; s = s->next)
                if (s->conn == c && s->channel == channel)
                        return s;
        return NULL;
}

static int nstreams(const ag_session *s)
{
        return s->pty ? 1 : 2;
}

static void stdin_close(ag_session *s)
{
        if (s->stdin_fd >= 0) {
                ag_loop_del(&s->stdin_watch);
                close(s->stdin_fd);
        }
        s->stdin_fd = -1;
        sp_buf_free(&s->stdin_buf);
}

static void session_free(ag_session *s)
{
        for (ag_session **p = &sessions; *p; p = &(*p)->next)
                if (*p == s) {
                        *p = s->next;
                        break;
                }
        for (int i = 0; i < 2; i++)
                ag_outstream_free(&s->out[i]);
        stdin_close(s);
        ag_loop_free_later(s);
}

/* How the session's process ended, as EXIT carries it. New reference. */
static json_object *exit_status(const ag_session *s)
{
        json_object *o = json_object_new_object();
        int code = WIFEXITED(s->status) ? WEXITSTATUS(s->status) : 128 + WTERMSIG(s->status);
        json_object_object_add(o, "code", json_object_new_int(code));
        json_object_object_add(o, "signal", json_object_new_int(WIFSIGNALED(s->status) ? WTERMSIG(s->status) : 0));
        json_object_object_add(o, "oom", json_object_new_boolean(false));
        json_object_object_add(o, "killed", json_object_new_boolean(s->killed));
        return o;
}

/* Sends what credit and the connection allow; sends EXIT once all output is out. */
static void pump(ag_session *s)
{
        for (int i = 0; i < nstreams(s); i++) {
                ag_outstream *o = &s->out[i];
                while (ag_outstream_wants_input(o) && ag_outstream_fill(o) > 0)
                        ;
                ag_outstream_flush(o, s->conn, s->channel, (uint8_t)(PR_STREAM_STDOUT + i));
                /* Watch the fd only while there is room to read into. */
                if (o->fd >= 0) {
                        if (ag_outstream_wants_input(o))
                                ag_loop_add(&o->watch, EPOLLIN);
                        else
                                ag_loop_del(&o->watch);
                }
        }
        if (!s->exited || s->exit_sent || !s->conn)
                return;
        for (int i = 0; i < nstreams(s); i++)
                if (!ag_outstream_done(&s->out[i]))
                        return;
        _cleanup_json_ json_object *o = exit_status(s);
        ag_conn_send_json(s->conn, PR_AGENT_EXIT, s->channel, o);
        s->exit_sent = true;
}

/* The process ended but output the worker has not acknowledged is still
 * here: say how it ended now (REPLY {"ended":…}), so the worker knows without
 * waiting for a reader to make room for the rest. */
static void reply_ended(ag_session *s)
{
        if (!s->exited || s->exit_sent || !s->conn)
                return;
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "ended", exit_status(s));
        ag_conn_send_json(s->conn, PR_AGENT_REPLY, s->channel, o);
}

static void on_output(ag_watch *w, uint32_t events)
{
        (void)events;
        for (ag_session *s = sessions; s; s = s->next)
                for (int i = 0; i < 2; i++)
                        if (&s->out[i].watch == w) {
                                pump(s);
                                return;
                        }
}

static void stdin_pump(ag_session *s)
{
        while (s->stdin_fd >= 0 && s->stdin_buf.len > 0) {
                ssize_t n = write(s->stdin_fd, s->stdin_buf.data, s->stdin_buf.len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        ag_loop_add(&s->stdin_watch, EPOLLOUT);
                        return;
                }
                if (n < 0) {
                        /* EPIPE: the process closed its stdin; drop what it will never read. */
                        stdin_close(s);
                        return;
                }
                sp_buf_consume(&s->stdin_buf, (size_t)n);
                /* Stored in the pipe: grant the worker that much credit again. */
                if (s->conn) {
                        ag_conn_send_window(s->conn, PR_STREAM_STDIN, s->channel, (uint32_t)n);
                }
        }
        if (s->stdin_fd >= 0)
                ag_loop_del(&s->stdin_watch);
        if (s->stdin_eof && s->stdin_buf.len == 0 && s->stdin_fd >= 0) {
                if (s->pty) {
                        /* A PTY has no half-close: send the EOF character instead. */
                        char eof = 4;
                        (void)!write(s->stdin_fd, &eof, 1);
                        ag_loop_del(&s->stdin_watch);
                        close(s->stdin_fd);
                        s->stdin_fd = -1;
                } else {
                        stdin_close(s);
                }
        }
}

static void on_stdin_writable(ag_watch *w, uint32_t events)
{
        (void)events;
        for (ag_session *s = sessions; s; s = s->next)
                if (&s->stdin_watch == w) {
                        stdin_pump(s);
                        return;
                }
}

static void child_fail(int errfd, int stage, int e)
{
        int msg[2] = {stage, e};
        (void)!write(errfd, msg, sizeof(msg));
        _exit(127);
}

enum { STAGE_SETUP = 1, STAGE_USER, STAGE_CWD, STAGE_EXEC };

static char **build_env(const ag_user *u, const pr_agent_request *req)
{
        static const char *const defaults[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                               NULL};
        size_t nreq = 0;
        for (char **e = req->env; e && *e; e++)
                nreq++;
        char **env = calloc(nreq + 8, sizeof(char *));
        size_t n = 0;
        if (!env)
                return NULL;
        char *tmp;
        if (asprintf(&tmp, "HOME=%s", u->home) >= 0)
                env[n++] = tmp;
        if (asprintf(&tmp, "USER=%s", u->name) >= 0)
                env[n++] = tmp;
        if (asprintf(&tmp, "LOGNAME=%s", u->name) >= 0)
                env[n++] = tmp;
        if (asprintf(&tmp, "SHELL=%s", u->shell) >= 0)
                env[n++] = tmp;
        if (req->pty && (tmp = strdup("TERM=xterm-256color")))
                env[n++] = tmp;
        for (size_t i = 0; defaults[i]; i++)
                if ((tmp = strdup(defaults[i])))
                        env[n++] = tmp;
        /* The request overrides the defaults, name by name. */
        for (char **e = req->env; e && *e; e++) {
                size_t klen = (size_t)(strchr(*e, '=') - *e);
                size_t j;
                for (j = 0; j < n; j++)
                        if (strncmp(env[j], *e, klen + 1) == 0)
                                break;
                char *copy = strdup(*e);
                if (!copy)
                        continue;
                if (j < n) {
                        free(env[j]);
                        env[j] = copy;
                } else {
                        env[n++] = copy;
                }
        }
        env[n] = NULL;
        return env;
}

/* What the child needs, all of it prepared by the parent: the child shares
 * the parent's memory until it executes (spawn_child) and must not allocate. */
typedef struct child_args {
        const pr_agent_request *req;
        const ag_user *u;
        const char *cwd;
        char **env;
        const char *path; /* the command's PATH */
        const char *slave;
        int in0, out1, err1, status1;
} child_args;

static const char *env_path(char **env)
{
        for (char **e = env; *e; e++)
                if (strncmp(*e, "PATH=", 5) == 0)
                        return *e + 5;
        return "/bin:/usr/bin"; /* execvp's default */
}

/* execvp with an explicit environment and without allocating: file as a
 * path when it has a '/', else each directory of path in turn; a file the
 * kernel cannot execute runs under /bin/sh, as execvp does. Returns the
 * errno to report. */
static int exec_search(const char *file, char **argv, char **env, const char *path)
{
        char buf[PATH_MAX];
        size_t flen = strlen(file);
        bool eacces = false, direct = strchr(file, '/') != NULL;
        for (const char *p = path;; p++) {
                const char *cand = file;
                if (!direct) {
                        const char *end = strchr(p, ':');
                        size_t dlen = end ? (size_t)(end - p) : strlen(p);
                        if (dlen + 1 + flen + 1 > sizeof(buf)) {
                                p += dlen;
                                if (!*p)
                                        break;
                                continue;
                        }
                        memcpy(buf, p, dlen);
                        size_t n = dlen;
                        if (dlen)
                                buf[n++] = '/';
                        memcpy(buf + n, file, flen + 1);
                        cand = buf;
                        p += dlen;
                }
                syscall(SYS_execve, cand, argv, env);
                int e = errno;
                if (e == ENOEXEC) {
                        /* At most 256 arguments are passed on to the shell (the rest would need memory). */
                        char *sh[258] = {"/bin/sh", (char *)cand};
                        size_t i = 1;
                        while (argv[i] && i + 1 < SP_ARRAY_SIZE(sh) - 1) {
                                sh[i + 1] = argv[i];
                                i++;
                        }
                        sh[i + 1] = NULL;
                        syscall(SYS_execve, "/bin/sh", sh, env);
                        return errno;
                }
                if (e == EACCES)
                        eacces = true;
                else if (e != ENOENT && e != ENOTDIR && e != ESTALE && e != ENODEV && e != ETIMEDOUT &&
                         e != ENAMETOOLONG && e != ELOOP)
                        return e;
                if (direct || !*p)
                        break;
        }
        return eacces ? EACCES : ENOENT;
}

/* The child between clone and exec: its own descriptors and signal
 * handlers, the parent's memory (which it only reads). Raw system calls
 * for the ids: glibc's wrappers would talk to the parent's threads. */
static int child_main(void *arg)
{
        const child_args *a = arg;
        const pr_agent_request *req = a->req;
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        for (int sig = 1; sig < NSIG; sig++)
                (void)sigaction(sig, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (setsid() < 0)
                child_fail(a->status1, STAGE_SETUP, errno);
        if (req->pty) {
                int fd = open(a->slave, O_RDWR);
                if (fd < 0 || ioctl(fd, TIOCSCTTY, 0) < 0)
                        child_fail(a->status1, STAGE_SETUP, errno);
                dup2(fd, 0);
                dup2(fd, 1);
                dup2(fd, 2);
                if (fd > 2)
                        close(fd);
        } else {
                int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
                dup2(req->stdin_open ? a->in0 : (null >= 0 ? null : 0), 0);
                dup2(a->out1, 1);
                dup2(a->err1, 2);
        }
        const ag_user *u = a->u;
        if (u->uid != getuid() || u->gid != getgid()) {
                if (syscall(SYS_setgroups, (size_t)u->ngroups, u->groups) < 0 || syscall(SYS_setgid, u->gid) < 0 ||
                    syscall(SYS_setuid, u->uid) < 0)
                        child_fail(a->status1, STAGE_USER, errno);
        }
        /* The command gets 0, 1 and 2 and nothing else of the agent's
         * (status1 stays open until the exec reports). */
        close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        if (chdir(a->cwd ? a->cwd : u->home) < 0) {
                if (a->cwd)
                        child_fail(a->status1, STAGE_CWD, errno);
                (void)!chdir("/");
        }
        child_fail(a->status1, STAGE_EXEC, exec_search(req->argv[0], req->argv, a->env, a->path));
        return 127;
}

/* Starts the child as vfork does (CLONE_VM | CLONE_VFORK: no copy of the
 * agent's page tables, which a fork made and the child then faulted on —
 * half a millisecond per command on a paravirtualised host,
 * docs/performance.md), on a stack of its own, with every signal blocked
 * until it has reset their handlers. Returns the pid, or -errno. */
static pid_t spawn_child(child_args *a)
{
        static void *stack;
        enum { STACK_SIZE = 256 * 1024, GUARD = 4096 };
        if (!stack) {
                void *m =
                        mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
                if (m == MAP_FAILED)
                        return -errno;
                (void)mprotect(m, GUARD, PROT_NONE);
                stack = m;
        }
        sigset_t all, old;
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, &old);
        /* The parent waits here until the child executes or exits. */
        pid_t pid = clone(child_main, (char *)stack + STACK_SIZE, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
        int e = errno;
        sigprocmask(SIG_SETMASK, &old, NULL);
        return pid < 0 ? -e : pid;
}

/* Starts req's command as u in cwd (resolved; NULL: u's home, else /). */
static int spawn(ag_session *s, const pr_agent_request *req, const ag_user *u, const char *cwd, sp_error **err)
{
        int out[2] = {-1, -1}, errp[2] = {-1, -1}, in[2] = {-1, -1}, status[2] = {-1, -1};
        int master = -1;
        char slave[128] = "";
        _cleanup_strv_free_ char **env = build_env(u, req);
        int r = -SP_E_IO;

        if (!env)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (pipe2(status, O_CLOEXEC) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        if (req->pty) {
                master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
                if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
                    ptsname_r(master, slave, sizeof(slave)) != 0) {
                        sp_error_set_errno(err, SP_E_IO, errno, "open a PTY");
                        goto out;
                }
                struct winsize ws = {.ws_row = req->rows, .ws_col = req->cols};
                ioctl(master, TIOCSWINSZ, &ws);
        } else {
                if (pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
                    (req->stdin_open && pipe2(in, O_CLOEXEC) < 0)) {
                        sp_error_set_errno(err, SP_E_IO, errno, "pipe");
                        goto out;
                }
        }

        child_args a = {.req = req,
                        .u = u,
                        .cwd = cwd,
                        .env = env,
                        .path = env_path(env),
                        .slave = slave,
                        .in0 = in[0],
                        .out1 = out[1],
                        .err1 = errp[1],
                        .status1 = status[1]};
        pid_t pid = spawn_child(&a);
        if (pid < 0) {
                sp_error_set_errno(err, SP_E_LIMIT, -pid, "clone");
                goto out;
        }
        close(status[1]);
        status[1] = -1;
        int msg[2];
        ssize_t n;
        do
                n = read(status[0], msg, sizeof(msg));
        while (n < 0 && errno == EINTR);
        if (n == (ssize_t)sizeof(msg)) {
                static const char *const what[] = {"", "set up the process", "switch to the user", "change directory",
                                                   "execute"};
                const char *target = msg[0] == STAGE_CWD    ? (cwd ? cwd : "")
                                     : msg[0] == STAGE_USER ? u->name
                                                            : req->argv[0];
                sp_errc code = msg[1] == ENOENT ? SP_E_NOT_FOUND : msg[1] == EACCES ? SP_E_PERMISSION : SP_E_INVALID;
                sp_error_set(err, code, "cannot %s '%.200s': %s", what[msg[0] >= 1 && msg[0] <= 4 ? msg[0] : 0], target,
                             strerror(msg[1]));
                /* The failed child is reaped by the SIGCHLD handler like any orphan. */
                goto out;
        }

        s->pid = pid;
        if (req->pty) {
                fcntl(master, F_SETFL, O_NONBLOCK);
                int wfd = fcntl(master, F_DUPFD_CLOEXEC, 3);
                ag_outstream_init(&s->out[0], master, req->window);
                ag_outstream_init(&s->out[1], -1, req->window);
                s->out[1].eof = s->out[1].eof_sent = true;
                s->stdin_fd = wfd;
                master = -1;
        } else {
                fcntl(out[0], F_SETFL, O_NONBLOCK);
                fcntl(errp[0], F_SETFL, O_NONBLOCK);
                ag_outstream_init(&s->out[0], out[0], req->window);
                ag_outstream_init(&s->out[1], errp[0], req->window);
                out[0] = errp[0] = -1;
                if (req->stdin_open) {
                        fcntl(in[1], F_SETFL, O_NONBLOCK);
                        s->stdin_fd = in[1];
                        in[1] = -1;
                }
        }
        s->out[0].watch.fn = s->out[1].watch.fn = on_output;
        s->stdin_watch.fd = s->stdin_fd;
        s->stdin_watch.fn = on_stdin_writable;
        r = 0;
out:
        for (int i = 0; i < 2; i++) {
                sp_close(out[i]);
                sp_close(errp[i]);
                sp_close(in[i]);
                sp_close(status[i]);
        }
        sp_close(master);
        return r;
}

static void reply_started(ag_session *s)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "pid", json_object_new_int(s->pid));
        json_object_object_add(o, "running", json_object_new_boolean(!s->exited));
        ag_conn_send_json(s->conn, PR_AGENT_REPLY, s->channel, o);
        if (s->stdin_fd >= 0) {
                uint32_t credit = STDIN_WINDOW - (uint32_t)s->stdin_buf.len;
                ag_conn_send_window(s->conn, PR_STREAM_STDIN, s->channel, credit);
        }
}

static void drop_old_ended(void)
{
        size_t ended = 0;
        ag_session *oldest = NULL;
        for (ag_session *s = sessions; s; s = s->next)
                if (s->exited && !s->conn) {
                        ended++;
                        if (!oldest || s->ended_ms < oldest->ended_ms)
                                oldest = s;
                }
        if (ended > MAX_ENDED && oldest)
                session_free(oldest);
}

int ag_session_exec(ag_conn *c, uint32_t channel, pr_agent_request *req, sp_error **err)
{
        if (find_id(req->session))
                return sp_error_set(err, SP_E_CONFLICT, "session %s already exists", req->session);
        if (find_channel(c, channel))
                return sp_error_set(err, SP_E_CONFLICT, "channel %u is in use", channel);
        ag_user u;
        char cwd[PATH_MAX];
        if (ag_user_lookup(req->user, &u, err) < 0)
                return -SP_E_NOT_FOUND;
        /* A relative cwd (or ~) is from the user's home, as file paths are. */
        if (req->cwd && ag_path_resolve(&u, req->cwd, cwd, sizeof(cwd), err) < 0)
                return -SP_E_INVALID;
        ag_session *s = calloc(1, sizeof(*s));
        if (!s)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        snprintf(s->id, sizeof(s->id), "%s", req->session);
        s->stdin_fd = -1;
        s->pty = req->pty;
        s->out[0].fd = s->out[1].fd = -1;
        if (spawn(s, req, &u, req->cwd ? cwd : NULL, err) < 0) {
                free(s);
                return -SP_E_INVALID;
        }
        s->conn = c;
        s->channel = channel;
        s->next = sessions;
        sessions = s;
        sp_log_debug_kv(SP_KV("session", s->id), "started pid %d", (int)s->pid);
        reply_started(s);
        pump(s);
        return 0;
}

int ag_session_attach(ag_conn *c, uint32_t channel, const pr_agent_request *req, sp_error **err)
{
        ag_session *s = find_id(req->session);
        if (!s)
                return sp_error_set(err, SP_E_NOT_FOUND, "session %s not found", req->session);
        if (find_channel(c, channel))
                return sp_error_set(err, SP_E_CONFLICT, "channel %u is in use", channel);
        if (ag_outstream_rewind(&s->out[0], req->stdout_offset, req->window, err) < 0 ||
            (!s->pty && ag_outstream_rewind(&s->out[1], req->stderr_offset, req->window, err) < 0))
                return sp_error_wrap(err, "attach %s", s->id);
        if (s->pty)
                s->out[1].eof_sent = true;
        s->conn = c; /* a new connection takes the session over from an old one */
        s->channel = channel;
        s->exit_sent = false;
        reply_started(s);
        pump(s);
        reply_ended(s);
        return 0;
}

int ag_session_release(const char *id, sp_error **err)
{
        ag_session *s = find_id(id);
        if (!s)
                return sp_error_set(err, SP_E_NOT_FOUND, "session %s not found", id);
        if (!s->exited)
                return sp_error_set(err, SP_E_CONFLICT, "session %s is still running", id);
        session_free(s);
        return 0;
}

static void control(ag_session *s, const pr_agent_control *ctl)
{
        if (ctl->rows && ctl->cols && s->pty && s->out[0].fd >= 0) {
                struct winsize ws = {.ws_row = ctl->rows, .ws_col = ctl->cols};
                ioctl(s->out[0].fd, TIOCSWINSZ, &ws);
        }
        if (s->exited)
                return;
        if (ctl->signal) {
                /* To the foreground process group of a PTY, else the command's group. */
                pid_t pg = s->pty && s->out[0].fd >= 0 ? tcgetpgrp(s->out[0].fd) : -1;
                kill(pg > 0 ? -pg : -s->pid, ctl->signal);
        }
        if (ctl->kill) {
                s->killed = true;
                ag_proc_kill_tree(s->pid, SIGKILL);
        }
}

bool ag_session_frame(ag_conn *c, const pr_agent_frame *f, sp_error **err)
{
        ag_session *s = find_channel(c, f->channel);
        if (!s)
                return false;
        switch (f->type) {
        case PR_AGENT_DATA:
                if (f->stream != PR_STREAM_STDIN || s->stdin_eof) {
                        sp_error_set(err, SP_E_INVALID, "DATA on stream %u of session %s", f->stream, s->id);
                        return true;
                }
                if (s->stdin_fd < 0)
                        return true; /* the process closed stdin: discard */
                if (s->stdin_buf.len + f->length > STDIN_WINDOW) {
                        sp_error_set(err, SP_E_INVALID, "stdin of session %s exceeds its credit", s->id);
                        return true;
                }
                sp_buf_append(&s->stdin_buf, f->payload, f->length, NULL);
                stdin_pump(s);
                return true;
        case PR_AGENT_EOF:
                if (f->stream == PR_STREAM_STDIN) {
                        s->stdin_eof = true;
                        stdin_pump(s);
                }
                return true;
        case PR_AGENT_WINDOW: {
                uint32_t n;
                int idx = f->stream == PR_STREAM_STDOUT ? 0 : f->stream == PR_STREAM_STDERR ? 1 : -1;
                if (idx < 0 || (s->pty && idx == 1) || pr_agent_window_decode(f, &n, err) < 0 ||
                    ag_outstream_ack(&s->out[idx], n, err) < 0) {
                        if (err && !*err)
                                sp_error_set(err, SP_E_INVALID, "WINDOW on stream %u of session %s", f->stream, s->id);
                        return true;
                }
                pump(s);
                return true;
        }
        case PR_AGENT_CONTROL: {
                pr_agent_control ctl;
                _cleanup_error_ sp_error *e = NULL;
                if (pr_agent_control_parse(f->payload, f->length, &ctl, &e) == 0)
                        control(s, &ctl);
                else
                        sp_log_debug("session %s: ignoring control: %s", s->id, e->message);
                return true;
        }
        case PR_AGENT_CANCEL:
                s->conn = NULL;
                s->channel = 0;
                return true;
        default:
                return false;
        }
}

static void drain_after_exit(ag_session *s)
{
        for (int i = 0; i < nstreams(s); i++) {
                ag_outstream *o = &s->out[i];
                size_t start = o->buf.len;
                while (o->fd >= 0 && o->buf.len - start < EXIT_DRAIN_MAX) {
                        sp_buf_reserve(&o->buf, 65536, NULL);
                        ssize_t n = read(o->fd, o->buf.data + o->buf.len, 65536);
                        if (n > 0) {
                                o->buf.len += (size_t)n;
                                continue;
                        }
                        if (n < 0 && errno == EINTR)
                                continue;
                        break;
                }
                /* Whatever still holds the pipe open (a background child) is no longer this session's. */
                o->eof = true;
                ag_outstream_close_fd(o);
        }
}

bool ag_session_reaped(pid_t pid, int status)
{
        for (ag_session *s = sessions; s; s = s->next)
                if (s->pid == pid && !s->exited) {
                        s->exited = true;
                        s->status = status;
                        s->ended_ms = ag_now_ms();
                        drain_after_exit(s);
                        stdin_close(s);
                        pump(s);
                        reply_ended(s);
                        drop_old_ended();
                        return true;
                }
        return false;
}

void ag_session_conn_closed(ag_conn *c)
{
        for (ag_session *s = sessions; s; s = s->next)
                if (s->conn == c) {
                        s->conn = NULL;
                        s->channel = 0;
                }
}

void ag_session_pump_all(ag_conn *c)
{
        for (ag_session *s = sessions; s; s = s->next)
                if (s->conn == c)
                        pump(s);
}

void ag_session_signal_all(int sig)
{
        for (ag_session *s = sessions; s; s = s->next)
                if (!s->exited)
                        ag_proc_kill_tree(s->pid, sig);
}
