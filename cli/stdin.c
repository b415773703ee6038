/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Our stdin, forwarded to a session by a child process (see exec.h), so
 * that the parent keeps reading the session's output while a chunk of input
 * waits for the command to read it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exec.h"
#include "space/cleanup.h"
#include "space/json.h"

/* One chunk per read: a keystroke on a terminal, up to this much from a pipe or file. */
#define CHUNK (64 * 1024)
#define CLOSE_ATTEMPTS 10

static void sleep_100ms(void)
{
        struct timespec ts = {0, 100 * 1000 * 1000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
        }
}

/* Closes the session's stdin; asking twice is harmless, so a failed attempt is retried. */
static int close_stdin(ctl_ctx *ctx, ctl_session *s, sp_http_client *c, sp_error **err)
{
        for (int attempt = 1;; attempt++) {
                sp_error *e = NULL;
                int r = ctl_session_post(ctx, s, c, "/close-stdin", NULL, 0, "application/json", NULL, &e);
                /* 409: the session has ended, and its stdin with it. */
                if (r < 0 && e->code == SP_E_CONFLICT)
                        r = 0;
                if (r >= 0) {
                        sp_error_free(e);
                        return 0;
                }
                if (attempt == CLOSE_ATTEMPTS || ctx->exit_code != CTL_EXIT_CONNECT) {
                        sp_error_move(err, &e);
                        return -1;
                }
                sp_error_free(e);
                sleep_100ms();
        }
}

/* Forwards fd 0 until its end; returns 0, or < 0 with *err set. */
static int pump(ctl_ctx *ctx, ctl_session *s, sp_error **err)
{
        _cleanup_free_ char *unused = NULL;
        sp_http_client *c = ctl_dp_client(ctx, s->attach_url, &unused, err);
        if (!c)
                return -1;
        _cleanup_free_ char *buf = malloc(CHUNK);
        if (!buf) {
                sp_http_client_free(c);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        int r = 0;
        for (;;) {
                ssize_t n = read(STDIN_FILENO, buf, CHUNK);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = sp_error_set_errno(err, SP_E_IO, errno, "reading stdin");
                        break;
                }
                if (n == 0)
                        break;
                _cleanup_json_ json_object *ans = NULL;
                sp_error *e = NULL;
                r = ctl_session_post(ctx, s, c, "/stdin", buf, (size_t)n, "application/octet-stream", &ans, &e);
                if (r < 0 && e->code == SP_E_CONFLICT) {
                        /* The session has ended: nothing reads its input any more. */
                        sp_error_free(e);
                        sp_http_client_free(c);
                        return 0;
                }
                if (r < 0) {
                        sp_error_move(err, &e);
                        break;
                }
                int64_t written = -1;
                if (!ans || sp_json_get_int(ans, "written", true, 0, n, &written, NULL) < 0 || written != n) {
                        r = sp_error_set(err, SP_E_INVALID, "the data plane wrote %lld of %zd bytes",
                                         (long long)written, n);
                        break;
                }
        }
        /* At the end of our input, and after a failure too, so that the command does not wait for more. */
        sp_error *e = NULL;
        int cr = close_stdin(ctx, s, c, r < 0 ? &e : err);
        sp_error_free(e);
        sp_http_client_free(c);
        return r < 0 ? r : cr;
}

pid_t ctl_stdin_start(ctl_ctx *ctx, const ctl_session *s, ctl_signals *sig, bool raw, sp_error **err)
{
        pid_t parent = getpid();
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid < 0)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_IO, "fork: %s", strerror(errno));
        if (pid > 0)
                return pid;

        /* The child. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
                _exit(1);
        ctl_signals_child(sig);
        signal(SIGINT, SIG_IGN);
        signal(SIGTERM, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        /* The parent's API connection stays the parent's (a TLS session cannot be shared): make our own. */
        ctx->http = NULL;
        ctl_session mine = {0};
        snprintf(mine.id, sizeof(mine.id), "%s", s->id);
        mine.attach_url = strdup(s->attach_url);
        mine.token = strdup(s->token);
        sp_error *e = NULL;
        int r = mine.attach_url && mine.token ? pump(ctx, &mine, &e) : sp_error_set(&e, SP_E_LIMIT, "out of memory");
        if (r < 0)
                fprintf(stderr, "spacectl: stdin of session %s: %s%s", s->id, e ? e->message : "failed",
                        raw ? "\r\n" : "\n");
        _exit(r < 0 ? 1 : 0);
}

bool ctl_stdin_stop(pid_t pid)
{
        int status;
        pid_t w;
        while ((w = waitpid(pid, &status, WNOHANG)) < 0 && errno == EINTR) {
        }
        if (w == 0) {
                kill(pid, SIGKILL);
                while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
                }
        }
        return w == pid && WIFEXITED(status) && WEXITSTATUS(status) != 0;
}
