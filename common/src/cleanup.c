/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include "space/cleanup.h"

void sp_pid_kill_and_reap(pid_t *pid)
{
        if (!pid || *pid <= 0)
                return;
        int saved = errno;
        (void)kill(*pid, SIGKILL);
        while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
                ;
        *pid = 0;
        errno = saved;
}

void sp_explicit_bzero(void *p, size_t n)
{
        if (p && n)
                explicit_bzero(p, n);
}
