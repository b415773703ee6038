/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-bench-checkpoint: a jail's suspend with its processes (a CRIU
 * checkpoint) and its wake (the restore), measured over the worker's RPC
 * against a space-worker started with --criu, for an idle sandbox and for
 * one holding 256 MiB of anonymous memory, with the images' size; beside
 * them in the same run, CRIU alone dumping and restoring a plain host
 * process that holds the same memory (the floor: what the jail adds is the
 * difference).
 *
 *   space-bench-checkpoint --addr 127.0.0.1:7071 --storage DIR --criu PATH [--samples N] [--json]
 *
 * DIR is the worker's --storage-dir (the images lie in sandboxes/<id>/checkpoint).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/time.h"
#include "space/worker_rpc.h"
#include "stats.h"
#include "worker_call.h"

#define BIG_BYTES (UINT64_C(256) << 20)

static const char *addr = "127.0.0.1:7071", *storage, *criu;

/* rpc(method, &(request type){...}): the literal may hold commas. */
#define rpc(method, ...) \
        bn_worker_call("space-bench-checkpoint", addr, 300000, (method), (__VA_ARGS__), sizeof(*(__VA_ARGS__)))

/* The bytes of the regular files in dir (flat). */
static uint64_t dir_bytes(const char *dir)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        uint64_t n = 0;
        for (struct dirent *de; d && (de = readdir(d));) {
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
                        n += (uint64_t)st.st_size;
        }
        return n;
}

static uint64_t memory_of(const char *id)
{
        _cleanup_json_ json_object *s = rpc("SandboxStats", &(pr_wk_sandbox_ref){.id = id});
        json_object *m;
        return json_object_object_get_ex(s, "memory_bytes", &m) ? (uint64_t)json_object_get_int64(m) : 0;
}

typedef struct {
        double *suspend, *wake;
        uint64_t image_bytes; /* the last checkpoint's */
} series;

/* A sandbox (holding big bytes of anonymous memory when big), suspended with its processes and woken
 * samples times. */
static void measure_jail(bool big, int samples, series *out)
{
        char id[SP_ID_MAX], ses[SP_ID_MAX];
        if (sp_id_new("sbx", id, NULL) < 0 || sp_id_new("ses", ses, NULL) < 0)
                abort();
        json_object_put(
                rpc("CreateSandbox", &(pr_wk_create_sandbox){.id = id, .template_name = "base", .warm = false}));
        _cleanup_json_ json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        /* awk's string of 256 MiB of spaces: anonymous memory, touched; then it waits. */
        json_object_array_add(
                argv, json_object_new_string(
                              big ? "awk 'BEGIN { s = sprintf(\"%268435456s\", \"\"); system(\"sleep 100000\") }'"
                                  : "sleep 100000"));
        json_object_put(rpc("Exec", &(pr_wk_exec){.sandbox_id = id, .session_id = ses, .argv = argv}));
        int64_t deadline = sp_now_mono_us() + 120 * SP_USEC_PER_SEC;
        while (big && memory_of(id) < BIG_BYTES) {
                if (sp_now_mono_us() > deadline) {
                        fprintf(stderr, "space-bench-checkpoint: the sandbox never held 256 MiB\n");
                        exit(1);
                }
                usleep(100000);
        }
        char images[4096];
        snprintf(images, sizeof(images), "%s/sandboxes/%s/checkpoint", storage, id);
        for (int i = 0; i < samples; i++) {
                int64_t t0 = sp_now_mono_us();
                _cleanup_json_ json_object *s =
                        rpc("SuspendSandbox", &(pr_wk_suspend_req){.id = id, .processes = true});
                out->suspend[i] = bn_ms_since(t0);
                json_object *susp, *mem;
                if (!json_object_object_get_ex(s, "suspend", &susp) ||
                    !json_object_object_get_ex(susp, "memory", &mem) || !json_object_get_boolean(mem)) {
                        fprintf(stderr,
                                "space-bench-checkpoint: the suspend kept no processes (is the worker run with "
                                "--criu?): %s\n",
                                json_object_to_json_string(s));
                        exit(1);
                }
                out->image_bytes = dir_bytes(images);
                t0 = sp_now_mono_us();
                json_object_put(rpc("RestoreSandbox", &(pr_wk_sandbox_ref){.id = id}));
                out->wake[i] = bn_ms_since(t0);
        }
        if (big && memory_of(id) < BIG_BYTES) {
                fprintf(stderr, "space-bench-checkpoint: the restored sandbox no longer holds its memory\n");
                exit(1);
        }
        json_object_put(rpc("DeleteSandbox", &(pr_wk_sandbox_ref){.id = id}));
}

/* Runs criu with args (NULL-terminated after argv[0]); 0 when it exits 0. */
static int run_criu(const char *const *args)
{
        pid_t p = fork();
        if (p == 0) {
                int null = open("/dev/null", O_RDWR);
                dup2(null, 0), dup2(null, 1), dup2(null, 2);
                execv(criu, (char *const *)args);
                _exit(127);
        }
        int st = 0;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR)
                ;
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The floor's process (killed when the bench fails: it would outlive it). */
static pid_t floor_pid;

__attribute__((noreturn)) static void floor_fail(const char *what, const char *dir)
{
        if (floor_pid > 0)
                kill(floor_pid, SIGKILL);
        fprintf(stderr, "space-bench-checkpoint: %s (%s)\n", what, dir);
        exit(1);
}

/* The floor: CRIU alone on a host process holding bytes of anonymous memory, dumped and restored. */
static void measure_floor(uint64_t bytes, int samples, series *out)
{
        char dir[] = "/tmp/space-bench-ckpt-XXXXXX";
        if (!mkdtemp(dir))
                abort();
        pid_t child = fork();
        if (child == 0) {
                setsid();
                int null = open("/dev/null", O_RDWR);
                dup2(null, 0), dup2(null, 1), dup2(null, 2);
                /* Nothing of the bench's (bench/run's port lock is a file lock CRIU refuses to dump). */
                syscall(SYS_close_range, 3, ~0U, 0);
                if (bytes) {
                        char *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                        if (m == MAP_FAILED)
                                _exit(1);
                        memset(m, ' ', bytes);
                }
                for (;;)
                        pause();
        }
        floor_pid = child;
        usleep(300000);
        char pid[32], pidfile[64];
        snprintf(pidfile, sizeof(pidfile), "%s/pid", dir);
        for (int i = 0; i < samples; i++) {
                snprintf(pid, sizeof(pid), "%d", (int)child);
                const char *dump[] = {criu, "dump", "-t", pid, "-D", dir, "-o", "dump.log", NULL};
                int64_t t0 = sp_now_mono_us();
                if (run_criu(dump) < 0)
                        floor_fail("criu dump of a host process failed: see its dump.log", dir);
                out->suspend[i] = bn_ms_since(t0);
                out->image_bytes = dir_bytes(dir);
                /* Gone before its pid is restored: reaped here (the first, our child) or by init. */
                while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                        ;
                for (int k = 0; k < 5000 && kill(child, 0) == 0; k++)
                        usleep(1000);
                const char *restore[] = {criu, "restore",     "-D",        dir,     "-d",
                                         "-o", "restore.log", "--pidfile", pidfile, NULL};
                unlink(pidfile);
                t0 = sp_now_mono_us();
                if (run_criu(restore) < 0)
                        floor_fail("criu restore of a host process failed: see its restore.log", dir);
                out->wake[i] = bn_ms_since(t0);
                FILE *f = fopen(pidfile, "re");
                int p = 0;
                if (!f || fscanf(f, "%d", &p) != 1 || p <= 0)
                        floor_fail("no pid from criu restore", dir);
                fclose(f);
                child = floor_pid = p;
                /* A restored process is CRIU's child, reparented: dumps of it need it alive, not reaped. */
        }
        kill(child, SIGKILL);
        floor_pid = 0;
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "space-bench-checkpoint: could not remove %s\n", dir);
}

static void row(const char *name, const double *v, int n)
{
        double *copy = malloc((size_t)n * sizeof(double));
        memcpy(copy, v, (size_t)n * sizeof(double));
        bn_stats s = bn_stats_of(copy, n);
        printf("| %-52s | %3d | %8.1f | %8.1f | %8.1f |", name, s.n, s.p50, s.p90, s.p99);
        free(copy);
}

int main(int argc, char **argv)
{
        int samples = 10;
        bool json = false;
        criu = "/var/lib/space/criu/criu";
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--addr") == 0 && i + 1 < argc)
                        addr = argv[++i];
                else if (strcmp(argv[i], "--storage") == 0 && i + 1 < argc)
                        storage = argv[++i];
                else if (strcmp(argv[i], "--criu") == 0 && i + 1 < argc)
                        criu = argv[++i];
                else if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc)
                        samples = atoi(argv[++i]);
                else if (strcmp(argv[i], "--json") == 0)
                        json = true;
                else {
                        fprintf(stderr, "usage: space-bench-checkpoint --addr HOST:PORT --storage DIR [--criu PATH] "
                                        "[--samples N] [--json]\n");
                        return 2;
                }
        }
        if (!storage || samples < 3 || samples > 1000) {
                fprintf(stderr, "space-bench-checkpoint: --storage is needed, --samples must be 3..1000\n");
                return 2;
        }
        struct {
                const char *name, *key;
                bool jail, big;
                series s;
        } rows[] = {
                {"jail, idle", "jail_idle", true, false, {0}},
                {"jail, 256 MiB of anonymous memory", "jail_256mib", true, true, {0}},
                {"floor: CRIU alone, host process, idle", "floor_idle", false, false, {0}},
                {"floor: CRIU alone, host process, 256 MiB", "floor_256mib", false, true, {0}},
        };
        for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
                rows[r].s.suspend = calloc((size_t)samples, sizeof(double));
                rows[r].s.wake = calloc((size_t)samples, sizeof(double));
                if (rows[r].jail)
                        measure_jail(rows[r].big, samples, &rows[r].s);
                else
                        measure_floor(rows[r].big ? BIG_BYTES : 0, samples, &rows[r].s);
        }
        if (json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "samples", json_object_new_int(samples));
                for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
                        json_object *x = json_object_new_object();
                        bn_stats_json(x, "checkpoint_ms", bn_stats_of(rows[r].s.suspend, samples));
                        bn_stats_json(x, "restore_ms", bn_stats_of(rows[r].s.wake, samples));
                        json_object_object_add(x, "image_bytes", json_object_new_int64((int64_t)rows[r].s.image_bytes));
                        json_object_object_add(o, rows[r].key, x);
                }
                printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
        } else {
                printf("| %-52s | n   |      p50 |      p90 |      p99 |     images |\n",
                       "checkpoint (suspend) and restore (wake), ms");
                printf("|------------------------------------------------------|----:|---------:|---------:|---------:|"
                       "-----------:|\n");
                for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
                        char name[96];
                        snprintf(name, sizeof(name), "%s: checkpoint", rows[r].name);
                        row(name, rows[r].s.suspend, samples);
                        printf(" %6.1f MiB |\n", (double)rows[r].s.image_bytes / (1 << 20));
                        snprintf(name, sizeof(name), "%s: restore", rows[r].name);
                        row(name, rows[r].s.wake, samples);
                        printf("            |\n");
                }
        }
        for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
                free(rows[r].s.suspend);
                free(rows[r].s.wake);
        }
        return 0;
}
