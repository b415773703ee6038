/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for the spacectl tests: run the real binary (fork/exec) with a
 * chosen configuration file, environment and standard input, and capture
 * its stdout, stderr and exit code, or start it in the background
 * (ctl_spawn: a command that runs until it is signalled, such as
 * port-forward). The environment is ours without any
 * SPACE_* setting spacectl reads, plus HOME and SPACE_CONFIG pointing into
 * the test's directory, plus the test's own additions. Every run is bounded
 * (CTL_RUN_TIMEOUT_MS); a run that overstays is killed and fails the test.
 */
#ifndef SPACE_TEST_SPACECTL_UTIL_H
#define SPACE_TEST_SPACECTL_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "space/buf.h"
#include "space/json.h"

#define CTL_RUN_TIMEOUT_MS 300000
#define CTL_MAX_ARGS 64

extern char **environ;

typedef struct ctl_result {
        int code; /* exit code; 128 + signal if it was killed */
        sp_buf out, err;
} ctl_result;

static inline void ctl_result_free(ctl_result *r)
{
        sp_buf_free(&r->out);
        sp_buf_free(&r->err);
}
#define _cleanup_ctl_result_ __attribute__((cleanup(ctl_result_free)))

/* The configuration file and home directory of the runs that follow. */
static char ctl_config_path[512];
static char ctl_home[512];

static inline int64_t ctl_mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline bool ctl_env_filtered(const char *e)
{
        static const char *const drop[] = {
                "SPACE_PROFILE=",       "SPACE_ENDPOINT=", "SPACE_API_KEY=", "SPACE_CA_FILE=",
                "SPACE_DATAPLANE_URL=", "SPACE_CONFIG=",   "HOME=",          "XDG_CONFIG_HOME="};
        for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
                if (strncmp(e, drop[i], strlen(drop[i])) == 0)
                        return true;
        return false;
}

/* The environment of a run (see above) with the extra entries env (at most
 * 12; may be NULL), in a calloc'd array whose strings are borrowed. */
static inline const char **ctl_envp(const char *const *env)
{
        static char cfg[600], home[600];
        snprintf(cfg, sizeof(cfg), "SPACE_CONFIG=%s", ctl_config_path);
        snprintf(home, sizeof(home), "HOME=%s", ctl_home);
        size_t ne = 0;
        while (environ[ne])
                ne++;
        const char **envp = calloc(ne + 16, sizeof(char *));
        ck_assert_ptr_nonnull(envp);
        size_t n = 0;
        for (size_t i = 0; i < ne; i++)
                if (!ctl_env_filtered(environ[i]))
                        envp[n++] = environ[i];
        if (ctl_config_path[0])
                envp[n++] = cfg;
        if (ctl_home[0])
                envp[n++] = home;
        for (size_t i = 0; env && env[i] && i < 12; i++)
                envp[n++] = env[i];
        envp[n] = NULL;
        return envp;
}

/* The program and argv (NULL-terminated, without the program) as execve wants them. */
static inline void ctl_argv(const char *const *argv, char bin[static 1024], const char *args[static CTL_MAX_ARGS + 2])
{
        snprintf(bin, 1024, "%s/bin/spacectl", sp_test_binary_dir());
        size_t na = 0;
        args[na++] = bin;
        for (size_t i = 0; argv[i]; i++) {
                ck_assert_uint_lt(na, CTL_MAX_ARGS);
                args[na++] = argv[i];
        }
        args[na] = NULL;
}

/* Starts spacectl with argv (NULL-terminated, without the program) and
 * extra environment entries env (may be NULL) in the background: stdin is
 * /dev/null, stdout a pipe whose reading end is *ret_out, stderr ours.
 * Returns its pid (the caller waits for it). */
static inline pid_t ctl_spawn(const char *const *env, const char *const *argv, int *ret_out)
{
        char bin[1024];
        const char *args[CTL_MAX_ARGS + 2];
        ctl_argv(argv, bin, args);
        const char **envp = ctl_envp(env);
        int out[2];
        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                int null = open("/dev/null", O_RDONLY);
                dup2(null, 0);
                dup2(out[1], 1);
                execve(bin, (char *const *)args, (char *const *)envp);
                _exit(127);
        }
        free(envp);
        close(out[1]);
        *ret_out = out[0];
        return pid;
}

/* Runs spacectl with argv (NULL-terminated, without the program), extra
 * environment entries env (NULL-terminated; may be NULL) and input on stdin
 * (may be NULL). */
static inline ctl_result ctl_runv(const char *const *env, const char *input, const char *const *argv)
{
        char bin[1024];
        const char *args[CTL_MAX_ARGS + 2];
        ctl_argv(argv, bin, args);
        const char **envp = ctl_envp(env);

        int out[2], err[2], in[2];
        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                dup2(in[0], 0);
                dup2(out[1], 1);
                dup2(err[1], 2);
                execve(bin, (char *const *)args, (char *const *)envp);
                _exit(127);
        }
        free(envp);
        close(in[0]);
        close(out[1]);
        close(err[1]);
        if (input) {
                size_t len = strlen(input);
                ck_assert_int_eq(write(in[1], input, len), (ssize_t)len);
        }
        close(in[1]);
        ctl_result r = {0};
        struct pollfd p[2] = {{.fd = out[0], .events = POLLIN}, {.fd = err[0], .events = POLLIN}};
        int64_t deadline = ctl_mono_ms() + CTL_RUN_TIMEOUT_MS;
        while (p[0].fd >= 0 || p[1].fd >= 0) {
                int64_t left = deadline - ctl_mono_ms();
                if (left <= 0) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        ck_abort_msg("spacectl %s did not finish in time", argv[0] ? argv[0] : "");
                }
                int pr = poll(p, 2, (int)left);
                if (pr < 0 && errno == EINTR)
                        continue;
                for (int i = 0; i < 2; i++) {
                        if (p[i].fd < 0 || !p[i].revents)
                                continue;
                        char buf[4096];
                        ssize_t got = read(p[i].fd, buf, sizeof(buf));
                        if (got > 0) {
                                sp_buf_append(i == 0 ? &r.out : &r.err, buf, (size_t)got, NULL);
                        } else if (got == 0 || errno != EINTR) {
                                close(p[i].fd);
                                p[i].fd = -1;
                        }
                }
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (!r.out.data)
                sp_buf_append(&r.out, "", 0, NULL);
        if (!r.err.data)
                sp_buf_append(&r.err, "", 0, NULL);
        return r;
}

/* ctl_run(env, input, "sandbox", "ls", NULL) */
static inline ctl_result ctl_run(const char *const *env, const char *input, const char *first, ...)
{
        const char *argv[CTL_MAX_ARGS + 1];
        size_t n = 0;
        va_list ap;
        va_start(ap, first);
        for (const char *a = first; a; a = va_arg(ap, const char *)) {
                ck_assert_uint_lt(n, CTL_MAX_ARGS);
                argv[n++] = a;
        }
        va_end(ap);
        argv[n] = NULL;
        return ctl_runv(env, input, argv);
}

/* Asserts the exit code, showing what the run printed when it differs. */
#define ctl_assert_code(r, want) \
        ck_assert_msg((r).code == (want), "exit code %d, want %d\nstdout: %s\nstderr: %s", (r).code, (want), \
                      (r).out.data, (r).err.data)

/* Parses the run's stdout as JSON (a new reference). */
static inline json_object *ctl_json(const ctl_result *r)
{
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(r->out.data, r->out.len, &o, NULL) == 0, "not JSON (exit code %d): %s\nstderr: %s",
                      r->code, r->out.data, r->err.data);
        return o;
}

/* The first line of stdout, without its newline (static buffer). */
static inline const char *ctl_line(const ctl_result *r)
{
        static char line[1024];
        snprintf(line, sizeof(line), "%.*s", (int)strcspn(r->out.data, "\n"), r->out.data);
        return line;
}

#endif
