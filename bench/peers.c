/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-bench-peers: how long peers take to run `true` in fresh namespaces,
 * measured the same way in the same run as the floor, fork+exec of
 * /bin/true on the host.
 *
 *   space-bench-peers [--samples N] [--json] [--peer NAME 'ARGV'] ...
 *
 * ARGV is split on spaces (no quoting); "{n}" in an argument becomes the
 * run's number, for peers that need a fresh name per run (runc's container
 * id). Each run is fork, exec, and wait for the exit (stdout to /dev/null,
 * stderr kept for the report); runs are interleaved, one of each peer in
 * turn, so that the machine's noise falls on all of them alike, after three
 * warm-up runs each. A peer whose first run fails is reported unsupported
 * with the first line of its stderr (crun on a hybrid cgroup v1/v2 host,
 * for one), and is not run again. A run that takes over 10 s is killed.
 *
 * JSON keys: floor_fork_exec_p50_ms (and _p90_ms, _p99_ms, _n) and
 * peer_<NAME>_p50_ms …, or peer_<NAME>_error with the reason.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "stats.h"

#define MAX_PEERS 8
#define MAX_ARGS 64
#define RUN_TIMEOUT_MS 10000
#define WARMUP 3

typedef struct peer {
        const char *name;
        char *argv_text; /* the spaced ARGV, owned */
        double *ms;
        int n;
        char error[256]; /* set when unsupported */
} peer;

/* Runs argv once: its wall time in *ms; 0 when it exited 0, else -1 with
 * the first line of its stderr (or how it ended) in why. */
static int run_once(peer *p, int number, double *ms, char *why, size_t why_len)
{
        char text[4096];
        snprintf(text, sizeof(text), "%s", p->argv_text);
        char *argv[MAX_ARGS + 1];
        char numbered[MAX_ARGS][256];
        int argc = 0;
        for (char *save = NULL, *a = strtok_r(text, " ", &save); a && argc < MAX_ARGS; a = strtok_r(NULL, " ", &save)) {
                char *brace = strstr(a, "{n}");
                if (brace) {
                        snprintf(numbered[argc], sizeof(numbered[argc]), "%.*s%d%s", (int)(brace - a), a, number,
                                 brace + 3);
                        a = numbered[argc];
                }
                argv[argc++] = a;
        }
        argv[argc] = NULL;
        _cleanup_close_ int errfd = memfd_create("peer-stderr", MFD_CLOEXEC);
        if (errfd < 0) {
                snprintf(why, why_len, "memfd_create: %s", strerror(errno));
                return -1;
        }
        int64_t t0 = sp_now_mono_us();
        pid_t pid = fork();
        if (pid < 0) {
                snprintf(why, why_len, "fork: %s", strerror(errno));
                return -1;
        }
        if (pid == 0) {
                int null = open("/dev/null", O_RDWR);
                if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(errfd, 2) < 0)
                        _exit(126);
                execvp(argv[0], argv);
                dprintf(2, "%s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
        bool timed_out = pidfd >= 0 && poll(&pfd, 1, RUN_TIMEOUT_MS) == 0;
        if (timed_out)
                kill(pid, SIGKILL);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        *ms = bn_ms_since(t0);
        if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
        char line[200] = "";
        ssize_t got = pread(errfd, line, sizeof(line) - 1, 0);
        line[got > 0 ? got : 0] = '\0';
        line[strcspn(line, "\n")] = '\0';
        if (timed_out)
                snprintf(why, why_len, "did not finish in %d ms", RUN_TIMEOUT_MS);
        else if (WIFSIGNALED(st))
                snprintf(why, why_len, "killed by signal %d: %s", WTERMSIG(st), line);
        else
                snprintf(why, why_len, "exit %d: %s", WEXITSTATUS(st), line);
        return -1;
}

static void usage(void)
{
        fprintf(stderr, "usage: space-bench-peers [--samples N] [--json] [--peer NAME 'ARGV'] ...\n");
        exit(2);
}

static bool valid_name(const char *s)
{
        if (!*s || strlen(s) > 32)
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
                        return false;
        return true;
}

static void print_row(const char *label, const peer *p, bn_stats s, double floor_p50)
{
        if (p->error[0]) {
                printf("| %-44s | unsupported on this host: %s |\n", label, p->error);
                return;
        }
        printf("| %-44s | %5d | %8.2f | %8.2f | %8.2f | %9.2f |\n", label, s.n, s.p50, s.p90, s.p99,
               floor_p50 > 0 ? s.p50 / floor_p50 : 0.0);
}

int main(int argc, char **argv)
{
        int samples = 30;
        bool json = false;
        peer peers[MAX_PEERS + 1] = {{.name = "fork_exec", .argv_text = strdup("/bin/true")}};
        int npeers = 1;
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc) {
                        char *end = NULL;
                        long n = strtol(argv[++i], &end, 10);
                        if (*end || n < 3 || n > 100000)
                                usage();
                        samples = (int)n;
                } else if (strcmp(argv[i], "--json") == 0) {
                        json = true;
                } else if (strcmp(argv[i], "--peer") == 0 && i + 2 < argc && npeers <= MAX_PEERS &&
                           valid_name(argv[i + 1]) && strlen(argv[i + 2]) < 4096) {
                        peers[npeers++] = (peer){.name = argv[i + 1], .argv_text = strdup(argv[i + 2])};
                        i += 2;
                } else {
                        usage();
                }
        }
        for (int k = 0; k < npeers; k++) {
                peers[k].ms = calloc((size_t)samples, sizeof(double));
                if (!peers[k].ms || !peers[k].argv_text) {
                        fprintf(stderr, "space-bench-peers: out of memory\n");
                        return 1;
                }
        }
        for (int i = -WARMUP; i < samples; i++) {
                for (int k = 0; k < npeers; k++) {
                        peer *p = &peers[k];
                        if (p->error[0])
                                continue;
                        double ms = 0;
                        char why[256];
                        if (run_once(p, i + WARMUP, &ms, why, sizeof(why)) < 0) {
                                if (k == 0) {
                                        fprintf(stderr, "space-bench-peers: /bin/true failed: %s\n", why);
                                        return 1;
                                }
                                snprintf(p->error, sizeof(p->error), "%s", why);
                                continue;
                        }
                        if (i >= 0)
                                p->ms[p->n++] = ms;
                }
        }
        bn_stats st[MAX_PEERS + 1];
        for (int k = 0; k < npeers; k++)
                st[k] = bn_stats_of(peers[k].ms, peers[k].n);
        if (json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                bn_stats_json(o, "floor_fork_exec", st[0]);
                for (int k = 1; k < npeers; k++) {
                        char key[64];
                        snprintf(key, sizeof(key), "peer_%s", peers[k].name);
                        if (peers[k].error[0]) {
                                snprintf(key, sizeof(key), "peer_%s_error", peers[k].name);
                                json_object_object_add(o, key, json_object_new_string(peers[k].error));
                        } else {
                                bn_stats_json(o, key, st[k]);
                        }
                }
                printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
        } else {
                printf("| %-44s |     n |      p50 |      p90 |      p99 | p50/floor |\n", "run `true` (ms)");
                printf("|----------------------------------------------|------:|---------:|---------:|---------:|"
                       "----------:|\n");
                for (int k = 0; k < npeers; k++) {
                        char label[128];
                        snprintf(label, sizeof(label), "%s: %.30s", peers[k].name, peers[k].argv_text);
                        print_row(label, &peers[k], st[k], st[0].p50);
                }
        }
        for (int k = 0; k < npeers; k++) {
                free(peers[k].ms);
                free(peers[k].argv_text);
        }
        return 0;
}
