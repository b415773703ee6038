/* SPDX-License-Identifier: Apache-2.0 */
/* The terminal and the signals of spacectl exec and run (see exec.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "exec.h"
#include "space/cleanup.h"

volatile sig_atomic_t ctl_interrupts;

static const int caught[4] = {SIGINT, SIGTERM, SIGHUP, SIGWINCH};
static int pipe_w = -1;

static void on_signal(int sig)
{
        int saved = errno;
        if (sig != SIGWINCH)
                ctl_interrupts++;
        unsigned char b = (unsigned char)sig;
        /* A full pipe drops the byte: enough of them are queued to act on. */
        if (pipe_w >= 0)
                (void)!write(pipe_w, &b, 1);
        errno = saved;
}

int ctl_signals_install(ctl_signals *s, sp_error **err)
{
        memset(s, 0, sizeof(*s));
        if (pipe2(s->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
                s->pipe[0] = s->pipe[1] = -1;
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        }
        pipe_w = s->pipe[1];
        ctl_interrupts = 0;
        struct sigaction sa = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
        sigemptyset(&sa.sa_mask);
        for (size_t i = 0; i < SP_ARRAY_SIZE(caught); i++)
                sigaction(caught[i], &sa, &s->old[i]);
        s->installed = true;
        return 0;
}

void ctl_signals_restore(ctl_signals *s)
{
        if (!s->installed)
                return;
        for (size_t i = 0; i < SP_ARRAY_SIZE(caught); i++)
                sigaction(caught[i], &s->old[i], NULL);
        pipe_w = -1;
        close(s->pipe[0]);
        close(s->pipe[1]);
        s->installed = false;
}

int ctl_signals_next(ctl_signals *s)
{
        unsigned char b;
        for (;;) {
                ssize_t n = read(s->pipe[0], &b, 1);
                if (n == 1)
                        return b;
                if (n < 0 && errno == EINTR)
                        continue;
                return 0;
        }
}

void ctl_signals_child(ctl_signals *s)
{
        if (!s || !s->installed)
                return;
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        for (size_t i = 0; i < SP_ARRAY_SIZE(caught); i++)
                sigaction(caught[i], &dfl, NULL);
        pipe_w = -1;
        close(s->pipe[0]);
        close(s->pipe[1]);
        s->installed = false;
}

int ctl_term_raw(ctl_term *t, int fd, sp_error **err)
{
        t->fd = -1;
        if (tcgetattr(fd, &t->saved) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "reading the terminal's settings");
        struct termios raw = t->saved;
        cfmakeraw(&raw);
        if (tcsetattr(fd, TCSANOW, &raw) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "putting the terminal in raw mode");
        t->fd = fd;
        return 0;
}

void ctl_term_restore(ctl_term *t)
{
        if (t->fd < 0)
                return;
        tcsetattr(t->fd, TCSANOW, &t->saved);
        t->fd = -1;
}

bool ctl_term_size(int *ret_rows, int *ret_cols)
{
        for (int fd = 0; fd <= 2; fd++) {
                struct winsize ws;
                if (isatty(fd) && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
                        *ret_rows = ws.ws_row;
                        *ret_cols = ws.ws_col;
                        return true;
                }
        }
        return false;
}
