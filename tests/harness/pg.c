/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "harness.h"
#include "pg.h"
#include "proc.h"

#define PG_INITDB_TIMEOUT_MS 120000
#define PG_READY_TIMEOUT_MS 60000
#define PG_SHUTDOWN_GRACE_MS 30000
#define PG_KILL_WAIT_MS 10000
#define PG_PORT_ATTEMPTS 5
#define PG_LOG_TAIL_LINES 30

static const char *const pg_env[] = {"LC_ALL=C", "LANG=C", NULL};

static bool has_server(const char *dir)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/postgres", dir);
        if (access(p, X_OK) != 0)
                return false;
        snprintf(p, sizeof(p), "%s/initdb", dir);
        return access(p, X_OK) == 0;
}

/* Version directories compare numerically: 9.6 < 10 < 15. */
static int version_cmp(const void *a, const void *b)
{
        /* "/usr/lib/postgresql/<version>/bin" */
        const char *pa = strstr(*(char *const *)a, "postgresql/");
        const char *pb = strstr(*(char *const *)b, "postgresql/");
        double va = pa ? strtod(pa + 11, NULL) : 0, vb = pb ? strtod(pb + 11, NULL) : 0;
        return va < vb ? -1 : va > vb ? 1 : 0;
}

static char *find_bindir(void)
{
        const char *env = getenv("SPACE_TEST_PG_BINDIR");
        if (env && *env)
                return has_server(env) ? strdup(env) : NULL;

        FILE *f = popen("pg_config --bindir 2>/dev/null", "r");
        if (f) {
                char line[PATH_MAX];
                bool got = fgets(line, sizeof(line), f) != NULL;
                pclose(f);
                if (got) {
                        line[strcspn(line, "\n")] = '\0';
                        if (*line && has_server(line))
                                return strdup(line);
                }
        }

        glob_t g;
        if (glob("/usr/lib/postgresql/*/bin", GLOB_NOSORT, NULL, &g) == 0) {
                qsort(g.gl_pathv, g.gl_pathc, sizeof(char *), version_cmp);
                for (size_t i = g.gl_pathc; i > 0; i--) {
                        if (has_server(g.gl_pathv[i - 1])) {
                                char *r = strdup(g.gl_pathv[i - 1]);
                                globfree(&g);
                                return r;
                        }
                }
                globfree(&g);
        }

        const char *path = getenv("PATH");
        if (path) {
                _cleanup_free_ char *copy = strdup(path);
                char *save = NULL;
                for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save))
                        if (*d && has_server(d))
                                return strdup(d);
        }
        return NULL;
}

void sp_test_pg_require(void)
{
        _cleanup_free_ char *bindir = find_bindir();
        if (!bindir)
                sp_test_skip("needs the PostgreSQL server (initdb, postgres): set SPACE_TEST_PG_BINDIR or install it");
        if (sp_test_is_root() && !getpwnam("postgres"))
                sp_test_skip("running as root needs the 'postgres' system user to run the PostgreSQL server");
}

/* Can uid walk down to path? Every ancestor must be searchable by it. */
static bool traversable_by(const char *path, uid_t uid)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s", path);
        for (;;) {
                struct stat st;
                if (stat(p, &st) < 0)
                        return false;
                if (!(st.st_mode & S_IXOTH) && st.st_uid != uid)
                        return false;
                char *slash = strrchr(p, '/');
                if (!slash || slash == p)
                        return true;
                *slash = '\0';
        }
}

static char *make_dir(const sp_test_pg *pg, sp_error **err)
{
        const char *base = getenv("TMPDIR");
        if (!base || !*base)
                base = "/tmp";
        if (pg->as_postgres && !traversable_by(base, pg->uid))
                base = "/tmp";
        char *dir = NULL;
        if (asprintf(&dir, "%s/space-test-pg-XXXXXX", base) < 0)
                abort();
        if (!mkdtemp(dir)) {
                sp_error_set_errno(err, SP_E_IO, errno, "mkdtemp %s", dir);
                free(dir);
                return NULL;
        }
        return dir;
}

static int fail_with_log(sp_error **err, sp_errc code, const char *log_path, const char *fmt, const char *what)
{
        _cleanup_free_ char *tail = sp_test_file_tail(log_path, PG_LOG_TAIL_LINES);
        return sp_error_set(err, code, fmt, what, tail);
}

static int run_initdb(sp_test_pg *pg, sp_error **err)
{
        char initdb[PATH_MAX], log[PATH_MAX];
        snprintf(initdb, sizeof(initdb), "%s/initdb", pg->bindir);
        snprintf(log, sizeof(log), "%s/initdb.log", pg->dir);
        const char *argv[] = {initdb,  "-D", pg->datadir, "-U",         "postgres", "-A",
                              "trust", "-E", "UTF8",      "--locale=C", "-N",       NULL};
        sp_test_spawn_opts o = {.env = pg_env,
                                .log_path = log,
                                .cwd = pg->dir,
                                .pdeathsig = SIGKILL,
                                .drop_user = pg->as_postgres,
                                .uid = pg->uid,
                                .gid = pg->gid};
        pid_t pid;
        if (sp_test_spawn(argv, &o, &pid, err) < 0)
                return sp_error_wrap(err, "initdb");
        int st = 0;
        sp_error *e = NULL;
        if (sp_test_child_wait(pid, PG_INITDB_TIMEOUT_MS, &st, &e) < 0) {
                sp_error_free(e);
                (void)sp_test_child_stop(pid, false, SIGKILL, 0, NULL, NULL);
                return fail_with_log(err, SP_E_TIMEOUT, log, "%s timed out:\n%s", "initdb");
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                return fail_with_log(err, SP_E_INTERNAL, log, "%s failed:\n%s", "initdb");
        return 0;
}

static char *make_conninfo(const sp_test_pg *pg, const char *db)
{
        char *s = NULL;
        if (asprintf(&s, "host=127.0.0.1 port=%d user=postgres dbname=%s connect_timeout=10", pg->port, db) < 0)
                abort();
        return s;
}

/* The postmaster recorded in postmaster.pid, if it is alive and runs on our
 * data directory; 0 otherwise. */
static pid_t pidfile_postmaster(const sp_test_pg *pg)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/postmaster.pid", pg->datadir);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        long pid = 0;
        if (!f || fscanf(f, "%ld", &pid) != 1 || pid <= 0 || pid > INT_MAX)
                return 0;
        pid_t procs[64];
        size_t n = sp_test_procs_with_cwd(pg->datadir, procs, SP_ARRAY_SIZE(procs));
        for (size_t i = 0; i < n && i < SP_ARRAY_SIZE(procs); i++)
                if (procs[i] == (pid_t)pid)
                        return (pid_t)pid;
        return 0;
}

/* After every server process is gone: what a crash leaves behind (the
 * System V segment, the lock files) would confuse a later start or outlive
 * the test. Line 7 of postmaster.pid holds "<shm key> <shm id>". */
static void remove_crash_leftovers(const sp_test_pg *pg)
{
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/postmaster.pid", pg->datadir);
        FILE *f = fopen(path, "re");
        if (f) {
                char line[256];
                long key = 0, id = -1;
                for (int i = 1; fgets(line, sizeof(line), f); i++) {
                        if (i == 7) {
                                if (sscanf(line, "%ld %ld", &key, &id) != 2)
                                        id = -1;
                                break;
                        }
                }
                fclose(f);
                struct shmid_ds ds;
                if (id >= 0 && id <= INT_MAX && shmctl((int)id, IPC_STAT, &ds) == 0 && ds.shm_nattch == 0 &&
                    ds.shm_perm.__key == (key_t)key)
                        (void)shmctl((int)id, IPC_RMID, NULL);
                (void)unlink(path);
        }
        snprintf(path, sizeof(path), "%s/sock/.s.PGSQL.%d.lock", pg->dir, pg->port);
        (void)unlink(path);
        snprintf(path, sizeof(path), "%s/sock/.s.PGSQL.%d", pg->dir, pg->port);
        (void)unlink(path);
}

/* Waits for pid (our child or not) to exit, reaping it if it is ours. */
static int wait_exit(pid_t pid, int64_t timeout_ms)
{
        return sp_test_child_wait(pid, timeout_ms, NULL, NULL);
}

/* Stops whatever server runs on the data directory: fast shutdown when
 * graceful, SIGKILL to everything otherwise (or when the shutdown overruns).
 * Afterwards no process works in the data directory. */
static int server_stop(sp_test_pg *pg, bool graceful, sp_error **err)
{
        if (!pg->datadir)
                return 0;
        pid_t pid = pg->pid > 0 ? pg->pid : 0;
        if (pid > 0 && !sp_test_pid_alive(pid)) {
                (void)wait_exit(pid, 0); /* reap it if it already died */
                pid = 0;
        }
        if (pid <= 0)
                pid = pidfile_postmaster(pg);

        if (pid > 0 && graceful) {
                int r = -SP_E_TIMEOUT;
                if (kill(pid, SIGINT) == 0)
                        r = wait_exit(pid, PG_SHUTDOWN_GRACE_MS);
                if (r < 0)
                        fprintf(stderr, "postgres %d ignored fast shutdown, killing it\n", (int)pid);
        }

        /* What is left — everything, when not graceful — dies at once: the
         * postmaster and its children (which run in sessions of their own,
         * so no process group reaches them all), found by their working
         * directory. */
        int64_t deadline = sp_now_mono_us() + PG_KILL_WAIT_MS * SP_USEC_PER_MSEC;
        pid_t left[64];
        size_t n;
        while ((n = sp_test_procs_with_cwd(pg->datadir, left, SP_ARRAY_SIZE(left))) > 0) {
                if (sp_now_mono_us() > deadline)
                        return sp_error_set(err, SP_E_TIMEOUT, "%zu PostgreSQL processes survive SIGKILL", n);
                for (size_t i = 0; i < n && i < SP_ARRAY_SIZE(left); i++)
                        (void)kill(left[i], SIGKILL);
                for (size_t i = 0; i < n && i < SP_ARRAY_SIZE(left); i++)
                        (void)wait_exit(left[i], 1000);
        }
        if (pid > 0)
                (void)wait_exit(pid, PG_KILL_WAIT_MS);
        if (pg->pid > 0 && pg->pid != pid)
                (void)wait_exit(pg->pid, 0);
        pg->pid = 0;
        remove_crash_leftovers(pg);
        return 0;
}

/* Starts the postmaster and waits until it answers. Returns 0, or
 * -SP_E_CONFLICT when the port was taken (the caller may try another). */
static int server_launch(sp_test_pg *pg, sp_error **err)
{
        char postgres[PATH_MAX], port[16], sock[PATH_MAX];
        snprintf(postgres, sizeof(postgres), "%s/postgres", pg->bindir);
        snprintf(port, sizeof(port), "%d", pg->port);
        snprintf(sock, sizeof(sock), "%s/sock", pg->dir);
        const char *argv[] = {postgres,
                              "-D",
                              pg->datadir,
                              "-p",
                              port,
                              "-h",
                              "127.0.0.1",
                              "-k",
                              sock,
                              "-c",
                              "fsync=off",
                              "-c",
                              "shared_buffers=16MB",
                              "-c",
                              "max_connections=100",
                              "-c",
                              "dynamic_shared_memory_type=mmap",
                              "-c",
                              "logging_collector=off",
                              NULL};
        struct stat st;
        off_t log_from = stat(pg->log_path, &st) == 0 ? st.st_size : 0;
        sp_test_spawn_opts o = {.env = pg_env,
                                .log_path = pg->log_path,
                                .cwd = pg->dir,
                                .new_pgroup = true,
                                .pdeathsig = SIGQUIT,
                                .drop_user = pg->as_postgres,
                                .uid = pg->uid,
                                .gid = pg->gid};
        if (sp_test_spawn(argv, &o, &pg->pid, err) < 0)
                return sp_error_wrap(err, "starting postgres");

        int64_t deadline = sp_now_mono_us() + PG_READY_TIMEOUT_MS * SP_USEC_PER_MSEC;
        for (;;) {
                int status;
                pid_t r = waitpid(pg->pid, &status, WNOHANG);
                if (r == pg->pid) {
                        pg->pid = 0;
                        _cleanup_free_ char *tail = sp_test_file_tail(pg->log_path, PG_LOG_TAIL_LINES);
                        /* Only this launch's lines decide whether the port was the problem. */
                        _cleanup_fclose_ FILE *f = fopen(pg->log_path, "re");
                        bool port_taken = false;
                        if (f && fseeko(f, log_from, SEEK_SET) == 0) {
                                char line[1024];
                                while (fgets(line, sizeof(line), f))
                                        if (strstr(line, "Address already in use"))
                                                port_taken = true;
                        }
                        server_stop(pg, false, NULL);
                        return sp_error_set(err, port_taken ? SP_E_CONFLICT : SP_E_INTERNAL,
                                            "postgres exited during startup (status 0x%x):\n%s", status, tail);
                }
                if (PQping(pg->admin_conninfo) == PQPING_OK)
                        return 0;
                if (sp_now_mono_us() > deadline) {
                        server_stop(pg, false, NULL);
                        return fail_with_log(err, SP_E_TIMEOUT, pg->log_path, "%s not ready in time:\n%s", "postgres");
                }
                struct timespec ts = {0, 20 * 1000 * 1000};
                nanosleep(&ts, NULL);
        }
}

static int exec_admin(sp_test_pg *pg, const char *sql, sp_error **err)
{
        PGconn *c = PQconnectdb(pg->admin_conninfo);
        if (PQstatus(c) != CONNECTION_OK) {
                sp_error_set(err, SP_E_UNAVAILABLE, "connecting to %s: %s", pg->admin_conninfo, PQerrorMessage(c));
                PQfinish(c);
                return -SP_E_UNAVAILABLE;
        }
        PGresult *res = PQexec(c, sql);
        int r = 0;
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
                r = sp_error_set(err, SP_E_INTERNAL, "%s: %s", sql, PQerrorMessage(c));
        PQclear(res);
        PQfinish(c);
        return r;
}

int sp_test_pg_create_database(sp_test_pg *pg, char **ret_conninfo, sp_error **err)
{
        char name[64], sql[128];
        /* The pid keeps names unique across forked tests sharing one server. */
        snprintf(name, sizeof(name), "sptest_%d_%u", (int)getpid(), ++pg->next_db);
        snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
        if (exec_admin(pg, sql, err) < 0)
                return sp_error_wrap(err, "creating a test database");
        *ret_conninfo = make_conninfo(pg, name);
        return 0;
}

static void pg_free(sp_test_pg *pg)
{
        free(pg->dir);
        free(pg->datadir);
        free(pg->bindir);
        free(pg->log_path);
        free(pg->conninfo);
        free(pg->admin_conninfo);
        memset(pg, 0, sizeof(*pg));
}

int sp_test_pg_start(sp_test_pg *pg, sp_error **err)
{
        memset(pg, 0, sizeof(*pg));
        pg->bindir = find_bindir();
        if (!pg->bindir)
                return sp_error_set(err, SP_E_UNSUPPORTED, "PostgreSQL server binaries not found");
        if (sp_test_is_root()) {
                struct passwd *pw = getpwnam("postgres");
                if (!pw) {
                        pg_free(pg);
                        return sp_error_set(err, SP_E_UNSUPPORTED, "no 'postgres' user to run PostgreSQL as");
                }
                pg->as_postgres = true;
                pg->uid = pw->pw_uid;
                pg->gid = pw->pw_gid;
        }
        pg->dir = make_dir(pg, err);
        if (!pg->dir) {
                pg_free(pg);
                return -SP_E_IO;
        }
        int r;
        char sock[PATH_MAX];
        snprintf(sock, sizeof(sock), "%s/sock", pg->dir);
        if (mkdir(sock, 0700) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", sock);
                goto fail;
        }
        if (pg->as_postgres && (chown(pg->dir, pg->uid, pg->gid) < 0 || chown(sock, pg->uid, pg->gid) < 0)) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "chown %s to postgres", pg->dir);
                goto fail;
        }
        if (asprintf(&pg->datadir, "%s/data", pg->dir) < 0 || asprintf(&pg->log_path, "%s/postgres.log", pg->dir) < 0)
                abort();

        r = run_initdb(pg, err);
        if (r < 0)
                goto fail;
        char real[PATH_MAX];
        if (!realpath(pg->datadir, real)) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "realpath %s", pg->datadir);
                goto fail;
        }
        free(pg->datadir);
        pg->datadir = strdup(real);

        for (int attempt = 1;; attempt++) {
                sp_error *e = NULL;
                pg->port = sp_test_free_port(err);
                if (pg->port < 0) {
                        r = pg->port;
                        goto fail;
                }
                free(pg->admin_conninfo);
                pg->admin_conninfo = make_conninfo(pg, "postgres");
                r = server_launch(pg, &e);
                if (r == 0)
                        break;
                if (r != -SP_E_CONFLICT || attempt == PG_PORT_ATTEMPTS) {
                        sp_error_move(err, &e);
                        goto fail;
                }
                sp_error_free(e);
        }
        r = sp_test_pg_create_database(pg, &pg->conninfo, err);
        if (r < 0)
                goto fail;
        return 0;
fail:
        sp_test_pg_stop(pg);
        return r;
}

int sp_test_pg_restart(sp_test_pg *pg, sp_error **err)
{
        if (!pg->datadir)
                return sp_error_set(err, SP_E_INVALID, "restart: no server");
        if (server_stop(pg, true, err) < 0)
                return sp_error_wrap(err, "restart: stopping postgres");
        if (server_launch(pg, err) < 0)
                return sp_error_wrap(err, "restart: starting postgres on port %d", pg->port);
        return 0;
}

int sp_test_pg_kill(sp_test_pg *pg, sp_error **err)
{
        if (!pg->datadir)
                return sp_error_set(err, SP_E_INVALID, "kill: no server");
        return server_stop(pg, false, err);
}

void sp_test_pg_stop(sp_test_pg *pg)
{
        if (!pg)
                return;
        sp_error *e = NULL;
        if (server_stop(pg, true, &e) < 0) {
                fprintf(stderr, "stopping PostgreSQL in %s: %s\n", pg->dir, e->message);
                sp_error_free(e);
        }
        if (pg->dir)
                sp_test_tmpdir_remove(pg->dir);
        pg_free(pg);
}
