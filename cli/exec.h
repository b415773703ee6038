/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl exec and run: a command in a sandbox as a command session
 * (docs/spacectl.md; the API's sessions, proto/spec/dataplane.md for the
 * data plane).
 *
 * exec.c has the two commands; session.c creates a session and follows it
 * through the data plane until it ends (its output to our stdout and
 * stderr, reconnecting with Last-Event-ID when the stream breaks, a new
 * token when one expires, signals and terminal sizes forwarded); stdin.c
 * forwards our stdin from a child process, so that a command that is slow
 * to read its input never holds up its output; term.c has the terminal
 * (raw mode, window size) and the signals spacectl catches meanwhile.
 *
 * Single threaded, apart from that child.
 */
#ifndef SPACECTL_EXEC_H
#define SPACECTL_EXEC_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <termios.h>

#include "cli.h"
#include "space/id.h"

/* ---- signals (term.c) ---- */

/* SIGINT, SIGTERM and SIGHUP, counted here by the handler that
 * ctl_signals_install() sets (for ctx->interrupted). */
extern volatile sig_atomic_t ctl_interrupts;

/* The signals spacectl catches while a command runs: SIGINT, SIGTERM,
 * SIGHUP and SIGWINCH are written to a pipe (self-pipe), to be forwarded by
 * the poll loop that reads it. */
typedef struct ctl_signals {
        int pipe[2]; /* nonblocking; the read end is polled */
        bool installed;
        struct sigaction old[4];
} ctl_signals;

/* Installs the handlers (with SA_RESTART). One set at a time per process. */
int ctl_signals_install(ctl_signals *s, sp_error **err);
/* Puts back the previous handlers and closes the pipe; accepts a set that
 * was never installed. */
void ctl_signals_restore(ctl_signals *s);
/* The next caught signal's number, or 0 when none is pending. */
int ctl_signals_next(ctl_signals *s);
/* Restores the default handling of those signals in a child process and
 * closes its copy of the pipe. */
void ctl_signals_child(ctl_signals *s);
#define _cleanup_signals_ __attribute__((cleanup(ctl_signals_restore)))

/* ---- the terminal (term.c) ---- */

typedef struct ctl_term {
        int fd; /* the terminal in raw mode, or -1 */
        struct termios saved;
} ctl_term;

/* Puts the terminal on fd in raw mode (input byte by byte, no echo, no
 * signals from keys, no output processing), remembering its settings. */
int ctl_term_raw(ctl_term *t, int fd, sp_error **err);
/* Puts the settings back (once; accepts a terminal never made raw). */
void ctl_term_restore(ctl_term *t);
#define _cleanup_term_ __attribute__((cleanup(ctl_term_restore)))

/* The window size of the first of stdin, stdout and stderr that is a
 * terminal; false when none is. */
bool ctl_term_size(int *ret_rows, int *ret_cols);

/* ---- sessions (session.c) ---- */

/* What to run, and how (from exec's or run's options). */
typedef struct ctl_exec_spec {
        const char *const *argv; /* borrowed */
        int argc;
        json_object *env; /* {"K":"V"} or NULL; borrowed */
        const char *cwd, *user; /* or NULL */
        int64_t timeout_s; /* 0: none */
        bool tty; /* a PTY of our window size (raw mode when stdin is a terminal) */
        bool forward_stdin;
} ctl_exec_spec;

/* A session as the API describes it: where to attach, under which token. */
typedef struct ctl_session {
        char id[SP_ID_MAX];
        char *attach_url; /* owned */
        char *token; /* owned */
} ctl_session;

void ctl_session_clear(ctl_session *s);

/* Mints a new token for s (POST /v1/sessions/{id}/token, the scope the
 * session's own), replacing attach_url and token. */
int ctl_session_renew(ctl_ctx *ctx, ctl_session *s, sp_error **err);

/* POSTs body (len bytes of content_type) to the session's data-plane route
 * ("/stdin", "/close-stdin", "/resize") with c, under its token: a 401
 * renews the token and tries once more, a 503 (the data plane cannot reach
 * the worker: nothing was written) is retried for a while. Returns the
 * status (2xx) with the parsed answer in *ret (ret may be NULL), or < 0: a
 * failed connection as the client reports it (CTL_EXIT_CONNECT; not sent
 * again: the route may have acted), an error answer (ctl_http_fail()). */
int ctl_session_post(ctl_ctx *ctx, ctl_session *s, sp_http_client *c, const char *route, const void *body, size_t len,
                     const char *content_type, json_object **ret, sp_error **err);

/* Runs spec in sandbox_id as a session and follows it until it ends:
 * output to fd 1 and 2 (with ctx->json both to 2, and the final Session on
 * stdout), stdin forwarded as the spec says, signals from sig forwarded
 * (the third SIGINT, SIGTERM or SIGHUP gives up waiting). *ret_code is the
 * command's exit code, 128+N when signal N ended it, 141 when our stdout
 * was closed (the session is then killed). Errors: the API's (CTL_EXIT_API),
 * the data plane lost for good (CTL_EXIT_CONNECT), stdin that could not be
 * forwarded in full (CTL_EXIT_CONNECT, once the command ended), giving up
 * (exit code 130). */
int ctl_exec_session(ctl_ctx *ctx, const char *sandbox_id, const ctl_exec_spec *spec, ctl_signals *sig, int *ret_code,
                     sp_error **err);

/* ---- stdin (stdin.c) ---- */

/* Forks the child that forwards our stdin to session s in chunks (POST
 * /stdin as it is read) and closes the session's stdin at its end (POST
 * /close-stdin); it stops quietly when the session has ended (409). It
 * dies with us (PR_SET_PDEATHSIG) and ignores the signals we forward. A
 * chunk whose request broke off is not sent again (it may have been
 * written): the child then says so on stderr, closes the session's stdin and
 * exits 1 (raw: our terminal is in raw mode, for the line end of that
 * message). Returns its pid. */
pid_t ctl_stdin_start(ctl_ctx *ctx, const ctl_session *s, ctl_signals *sig, bool raw, sp_error **err);

/* Stops the child (SIGKILL when it still runs) and reaps it; returns true
 * when it had failed (exit status 1) before. */
bool ctl_stdin_stop(pid_t pid);

#endif
