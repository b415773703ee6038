/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/proc.h"
#include "space/cleanup.h"

unsigned long long wk_proc_starttime(pid_t pid)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f || !fgets(buf, sizeof(buf), f))
                return 0;
        char *p = strrchr(buf, ')');
        if (!p)
                return 0;
        /* field 22 is starttime; after ')' comes field 3 */
        unsigned long long v = 0;
        int field = 2;
        char *save = NULL;
        for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
                if (++field == 22) {
                        v = strtoull(tok, NULL, 10);
                        break;
                }
        return v;
}

bool wk_proc_alive(pid_t *pid, unsigned long long starttime)
{
        if (*pid <= 0)
                return false;
        int status;
        /* Our own child: reap it if it died. Adopted (not our child): ECHILD. */
        if (waitpid(*pid, &status, WNOHANG) == *pid) {
                *pid = 0;
                return false;
        }
        return kill(*pid, 0) == 0 && wk_proc_starttime(*pid) == starttime;
}

void wk_proc_wait_gone(pid_t *pid, unsigned long long starttime, int timeout_ms)
{
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        while (*pid > 0) {
                if (waitpid(*pid, NULL, WNOHANG) == *pid)
                        break;
                if (kill(*pid, 0) < 0 || wk_proc_starttime(*pid) != starttime)
                        break;
                struct timespec now;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > timeout_ms)
                        break;
                usleep(2000);
        }
        *pid = 0;
}
