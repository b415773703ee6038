/* SPDX-License-Identifier: Apache-2.0 */
/* Whole-process-tree signalling: every process in the command's session, and
 * every descendant of those (which may have started sessions of their own). */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "space/cleanup.h"

#define MAX_PROCS 65536

typedef struct {
        pid_t pid, ppid, sid;
} pinfo;

/* The /proc the agent started with. Root in the sandbox may mount something
 * else over /proc later (FIFOs where stat files were would block the agent):
 * everything here reads through this descriptor. */
static int proc_fd = -1;

void ag_proc_init(void)
{
        if (proc_fd < 0)
                proc_fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static bool read_stat(pid_t pid, pinfo *ret)
{
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "%d/stat", (int)pid);
        int fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
        _cleanup_fclose_ FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
        if (!f && fd >= 0)
                close(fd);
        if (!f || !fgets(buf, sizeof(buf), f))
                return false;
        /* "pid (comm) state ppid pgrp session ..." — comm may contain spaces and ')'. */
        char *rp = strrchr(buf, ')');
        if (!rp)
                return false;
        char state;
        int ppid, pgrp, sid;
        if (sscanf(rp + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4)
                return false;
        ret->pid = pid;
        ret->ppid = ppid;
        ret->sid = sid;
        return true;
}

/* /proc must be of our own PID namespace, or its pids mean other processes. */
static bool proc_is_ours(void)
{
        char self[32];
        ag_proc_init();
        ssize_t n = readlinkat(proc_fd, "self", self, sizeof(self) - 1);
        if (n <= 0)
                return false;
        self[n] = '\0';
        return atoi(self) == (int)getpid();
}

int ag_proc_kill_tree(pid_t sid, int sig)
{
        if (sid <= 1)
                return 0;
        if (!proc_is_ours())
                return kill(-sid, sig) == 0 ? 1 : 0;
        _cleanup_free_ pinfo *procs = calloc(MAX_PROCS, sizeof(pinfo));
        if (!procs)
                return 0;
        size_t n = 0;
        int dfd = openat(proc_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_closedir_ DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
        if (!d && dfd >= 0)
                close(dfd);
        if (!d)
                return kill(-sid, sig) == 0 ? 1 : 0;
        struct dirent *de;
        while ((de = readdir(d)) && n < MAX_PROCS) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);
                if (*end || pid <= 1)
                        continue;
                if (read_stat((pid_t)pid, &procs[n]))
                        n++;
        }
        /* Mark the session, then grow the set by parentage until it is closed. */
        _cleanup_free_ bool *mark = calloc(n ? n : 1, sizeof(bool));
        if (!mark)
                return 0;
        for (size_t i = 0; i < n; i++)
                mark[i] = procs[i].sid == sid || procs[i].pid == sid;
        for (bool grew = true; grew;) {
                grew = false;
                for (size_t i = 0; i < n; i++) {
                        if (mark[i])
                                continue;
                        for (size_t j = 0; j < n; j++)
                                if (mark[j] && procs[j].pid == procs[i].ppid) {
                                        mark[i] = grew = true;
                                        break;
                                }
                }
        }
        int count = 0;
        for (size_t i = 0; i < n; i++)
                if (mark[i] && kill(procs[i].pid, sig) == 0)
                        count++;
        return count;
}
