/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Direct mode (see direct.h): processes, PostgreSQL, readiness and cleanup.
 */
#include "direct.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/http_client.h"
#include "space/json.h"
#include "space/time.h"
#include "uidrange.h"

#define DEFAULT_STATE "/var/lib/space/direct"
#define READY_TIMEOUT_MS 180000
#define STOP_GRACE_MS 10000

enum { C_POSTGRES, C_CONTROLPLANE, C_WORKER, C_DATAPLANE, C_E2B, C_COUNT };
static const char *const component_names[C_COUNT] = {"postgres", "controlplane", "worker", "dataplane", "e2b"};

typedef struct dctx {
        const ctl_direct_opts *o;
        char state[200]; /* short enough for unix socket paths under it */
        char bin[1024];
        char pg_bin[1024];
        int api_port, dp_port, rpc_port, worker_port, worker_http_port, e2b_port;
        char database[1024]; /* libpq conninfo */
        bool private_pg;
        char backend[32];
        char admin_key[256];
        char cgroup[64]; /* the worker's cgroup parent */
        /* The sandboxes' network (docs/networking.md), derived from api_port
         * so that clusters on other port blocks do not share it: the gateway
         * on api_port+6 (TCP) and +7 (DNS), firewall log group api_port. */
        int gw_tcp_port, gw_dns_port;
        char sandbox_cidr[32], net_prefix[16];
        /* The host uids of the sandboxes (uidrange.h): the first of the range
         * this cluster was given, as direct.json remembers it (0: none yet). */
        uint32_t uid_base;
} dctx;

/* The worker's sandbox-network flags, NULL-ended, into argv (6 entries and
 * the NULL) with their text in buf. The caller's SPACE_WORKER_* variables
 * still win over what these do not say (e.g. SPACE_WORKER_GATEWAY=none or
 * SPACE_WORKER_GATEWAY_UPSTREAM_NETNS, which tests set). */
typedef struct net_flags {
        char enable[40], cidr[64], prefix[48], tcp[48], dns[48], group[48];
} net_flags;
static size_t net_argv(const dctx *c, net_flags *f, const char **argv)
{
        const char *on = getenv("SPACE_WORKER_SANDBOX_NETWORK");
        snprintf(f->enable, sizeof(f->enable), "--sandbox-network=%s", on && *on ? on : "true");
        snprintf(f->cidr, sizeof(f->cidr), "--sandbox-cidr=%s", c->sandbox_cidr);
        snprintf(f->prefix, sizeof(f->prefix), "--net-prefix=%s", c->net_prefix);
        snprintf(f->tcp, sizeof(f->tcp), "--gateway-tcp-port=%d", c->gw_tcp_port);
        snprintf(f->dns, sizeof(f->dns), "--gateway-dns-port=%d", c->gw_dns_port);
        snprintf(f->group, sizeof(f->group), "--gateway-log-group=%d", c->api_port);
        /* A setting the caller's environment gives is left to it. */
        const struct {
                const char *env, *flag;
        } all[] = {
                {NULL, f->enable},
                {"SPACE_WORKER_SANDBOX_CIDR", f->cidr},
                {"SPACE_WORKER_NET_PREFIX", f->prefix},
                {"SPACE_WORKER_GATEWAY_TCP_PORT", f->tcp},
                {"SPACE_WORKER_GATEWAY_DNS_PORT", f->dns},
                {"SPACE_WORKER_GATEWAY_LOG_GROUP", f->group},
        };
        size_t n = 0;
        for (size_t i = 0; i < SP_ARRAY_SIZE(all); i++)
                if (!all[i].env || !getenv(all[i].env) || !*getenv(all[i].env))
                        argv[n++] = all[i].flag;
        argv[n] = NULL;
        return n;
}

/* A /20 of 10.64.0.0/10 and a prefix of its own for each port block. */
static void net_defaults(dctx *c)
{
        unsigned i = (unsigned)c->api_port % 1024;
        snprintf(c->sandbox_cidr, sizeof(c->sandbox_cidr), "10.%u.%u.0/20", 64 + i / 16, (i % 16) * 16);
        snprintf(c->net_prefix, sizeof(c->net_prefix), "d%d", c->api_port);
        c->gw_tcp_port = c->api_port + 6;
        c->gw_dns_port = c->api_port + 7;
}

static void progress(const dctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void progress(const dctx *c, const char *fmt, ...)
{
        if (c->o->quiet)
                return;
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "== ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
}

static void path_of(const dctx *c, char *out, size_t n, const char *rel)
{
        snprintf(out, n, "%s/%s", c->state, rel);
}

/* ---- tiny loopback HTTP (the components listen on 127.0.0.1 in direct mode) ---- */

/* One request to 127.0.0.1:port through the shared HTTP client; *ret_status
 * and, if ret_body, the body parsed as JSON (NULL when empty or not JSON). */
static int http_local(int port, const char *method, const char *path, const char *key, const char *body,
                      int *ret_status, json_object **ret_body, sp_error **err)
{
        char url[64], auth[300];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
        sp_http_client_config cfg = {.connect_timeout_ms = 5000, .io_timeout_ms = 30000};
        _cleanup_(sp_http_client_freep) sp_http_client *cli = sp_http_client_new(url, &cfg, err);
        if (!cli)
                return -1;
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key ? key : "");
        const char *headers[] = {"Content-Type: application/json", key ? auth : NULL, NULL};
        sp_http_client_request req = {.method = method,
                                      .target = path,
                                      .headers = headers,
                                      .body = body,
                                      .body_len = body ? strlen(body) : 0};
        _cleanup_buf_ sp_buf in = SP_BUF_INIT;
        int status = sp_http_client_do(cli, &req, 1 << 20, &in, err);
        if (status < 0)
                return -1;
        *ret_status = status;
        if (ret_body) {
                *ret_body = NULL;
                if (in.len > 0 && sp_buf_append(&in, "", 1, err) == 0)
                        *ret_body = json_tokener_parse(in.data);
        }
        return 0;
}

static bool http_ok(int port, const char *path)
{
        int status = 0;
        return http_local(port, "GET", path, NULL, NULL, &status, NULL, NULL) == 0 && status == 200;
}

/* ---- processes ---- */

static void pidfile_path(const dctx *c, int comp, char *out, size_t n)
{
        snprintf(out, n, "%s/run/%s.pid", c->state, component_names[comp]);
}

/* The pid of a running component (its pidfile names a live process running
 * the expected program), or 0. */
static pid_t component_pid(const dctx *c, int comp)
{
        char p[PATH_MAX + 32];
        pidfile_path(c, comp, p, sizeof(p));
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        long pid = 0;
        if (!f || fscanf(f, "%ld", &pid) != 1 || pid <= 0)
                return 0;
        char exe[64], target[PATH_MAX];
        snprintf(exe, sizeof(exe), "/proc/%ld/exe", pid);
        ssize_t len = readlink(exe, target, sizeof(target) - 1);
        if (len <= 0)
                return 0;
        target[len] = '\0';
        /* A binary rebuilt or reinstalled since the process started reads "<path> (deleted)". */
        static const char deleted[] = " (deleted)";
        if ((size_t)len > sizeof(deleted) - 1 && strcmp(target + len - (sizeof(deleted) - 1), deleted) == 0)
                target[len - (sizeof(deleted) - 1)] = '\0';
        const char *want = comp == C_POSTGRES       ? "/postgres"
                           : comp == C_CONTROLPLANE ? "/space-controlplane"
                           : comp == C_WORKER       ? "/space-worker"
                           : comp == C_DATAPLANE    ? "/space-dataplane"
                                                    : "/space-e2b";
        size_t tl = strlen(target), wl = strlen(want);
        if (tl < wl || strcmp(target + tl - wl, want) != 0)
                return 0;
        return (pid_t)pid;
}

/* Starts argv as a daemon: its own session, stdin /dev/null, stdout and
 * stderr appended to logs/<name>.log, optionally as another user; records
 * its pid. */
static int spawn_daemon(const dctx *c, int comp, const char *const *argv, const struct passwd *as, sp_error **err)
{
        char logp[PATH_MAX + 32], pidp[PATH_MAX + 32];
        snprintf(logp, sizeof(logp), "%s/logs/%s.log", c->state, component_names[comp]);
        pidfile_path(c, comp, pidp, sizeof(pidp));
        int logfd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
        if (logfd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", logp);
        if (as && fchown(logfd, as->pw_uid, as->pw_gid) < 0) {
                close(logfd);
                return sp_error_set_errno(err, SP_E_IO, errno, "chown %s", logp);
        }
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) < 0) {
                close(logfd);
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        }
        pid_t pid = fork();
        if (pid < 0) {
                close(logfd);
                close(pfd[0]);
                close(pfd[1]);
                return sp_error_set_errno(err, SP_E_IO, errno, "fork");
        }
        if (pid == 0) {
                /* Double fork so that the daemon is not our child (nothing to reap). */
                close(pfd[0]);
                if (setsid() < 0)
                        _exit(126);
                pid_t d = fork();
                if (d != 0) {
                        if (d > 0 && write(pfd[1], &d, sizeof(d)) != sizeof(d))
                                _exit(126);
                        _exit(d > 0 ? 0 : 126);
                }
                int devnull = open("/dev/null", O_RDONLY);
                if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0)
                        _exit(126);
                if (as && (setgroups(0, NULL) < 0 || setgid(as->pw_gid) < 0 || setuid(as->pw_uid) < 0))
                        _exit(126);
                sigset_t none;
                sigemptyset(&none);
                sigprocmask(SIG_SETMASK, &none, NULL);
                for (int s = 1; s < NSIG; s++)
                        signal(s, SIG_DFL);
                if (chdir(c->state) < 0)
                        _exit(126);
                execv(argv[0], (char *const *)argv);
                int e = errno;
                dprintf(2, "spacectl: exec %s: %s\n", argv[0], strerror(e));
                (void)!write(pfd[1], &e, sizeof(e));
                _exit(127);
        }
        close(pfd[1]);
        close(logfd);
        pid_t daemon_pid = 0;
        ssize_t r;
        do
                r = read(pfd[0], &daemon_pid, sizeof(daemon_pid));
        while (r < 0 && errno == EINTR);
        /* The pipe is close-on-exec: it reaches end-of-file once the daemon has exec'd its program (so
         * that /proc/<pid>/exe names it), or carries the errno of a failed exec. */
        int exec_errno = 0;
        ssize_t r2;
        do
                r2 = read(pfd[0], &exec_errno, sizeof(exec_errno));
        while (r2 < 0 && errno == EINTR);
        close(pfd[0]);
        int st;
        waitpid(pid, &st, 0);
        if (r != sizeof(daemon_pid) || daemon_pid <= 0)
                return sp_error_set(err, SP_E_INTERNAL, "could not start %s", component_names[comp]);
        if (r2 == sizeof(exec_errno))
                return sp_error_set_errno(err, SP_E_INTERNAL, exec_errno, "could not start %s: exec %s",
                                          component_names[comp], argv[0]);
        char num[32];
        int nl = snprintf(num, sizeof(num), "%d\n", (int)daemon_pid);
        return sp_file_write_atomic(pidp, num, (size_t)nl, 0644, err);
}

static bool pid_alive(pid_t pid)
{
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        char state = 0;
        return f && fscanf(f, "%*d (%*[^)]) %c", &state) == 1 && state != 'Z';
}

/* Stops a component: SIGTERM, a grace period, then SIGKILL. */
static void stop_component(const dctx *c, int comp)
{
        pid_t pid = component_pid(c, comp);
        char pidp[PATH_MAX + 32];
        pidfile_path(c, comp, pidp, sizeof(pidp));
        if (pid > 0) {
                progress(c, "stopping %s (pid %d)", component_names[comp], (int)pid);
                kill(pid, comp == C_POSTGRES ? SIGINT : SIGTERM); /* postgres: fast shutdown */
                int64_t deadline = sp_now_mono_us() + STOP_GRACE_MS * 1000LL;
                while (pid_alive(pid) && sp_now_mono_us() < deadline)
                        usleep(50 * 1000);
                if (pid_alive(pid)) {
                        kill(pid, SIGKILL);
                        while (pid_alive(pid))
                                usleep(20 * 1000);
                }
        }
        unlink(pidp);
}

/* Waits until ok(c) or the component's process is gone or time is up; on
 * failure the error carries the tail of its log. */
static int wait_ready(const dctx *c, int comp, bool (*ok)(const dctx *c), sp_error **err)
{
        int64_t deadline = sp_now_mono_us() + READY_TIMEOUT_MS * 1000LL;
        for (;;) {
                if (ok(c))
                        return 0;
                bool alive = component_pid(c, comp) > 0;
                if (!alive || sp_now_mono_us() > deadline) {
                        char logp[PATH_MAX + 32];
                        snprintf(logp, sizeof(logp), "%s/logs/%s.log", c->state, component_names[comp]);
                        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                        const char *tail = "";
                        if (sp_file_read(logp, 1 << 20, &b, NULL) == 0 && b.len) {
                                sp_buf_append(&b, "", 1, NULL);
                                tail = b.data;
                                for (int lines = 0, i = (int)b.len - 2; i > 0; i--)
                                        if (b.data[i] == '\n' && ++lines == 15) {
                                                tail = b.data + i + 1;
                                                break;
                                        }
                        }
                        return sp_error_set(err, alive ? SP_E_TIMEOUT : SP_E_INTERNAL, "%s %s; the end of %s:\n%s",
                                            component_names[comp], alive ? "did not become ready" : "exited", logp,
                                            tail);
                }
                usleep(100 * 1000);
        }
}

/* ---- PostgreSQL ---- */

static int find_pg_bin(dctx *c, sp_error **err)
{
        const char *env = getenv("SPACE_PG_BINDIR");
        if (env) {
                if (strlen(env) >= sizeof(c->pg_bin))
                        return sp_error_set(err, SP_E_INVALID, "SPACE_PG_BINDIR is too long");
                snprintf(c->pg_bin, sizeof(c->pg_bin), "%s", env);
                return 0;
        }
        _cleanup_closedir_ DIR *d = opendir("/usr/lib/postgresql");
        int best = -1;
        for (struct dirent *de; d && (de = readdir(d));) {
                char *end;
                long v = strtol(de->d_name, &end, 10);
                char p[PATH_MAX];
                snprintf(p, sizeof(p), "/usr/lib/postgresql/%s/bin/postgres", de->d_name);
                if (*end == '\0' && v > best && access(p, X_OK) == 0)
                        best = (int)v;
        }
        if (best < 0)
                return sp_error_set(err, SP_E_NOT_FOUND,
                                    "no PostgreSQL server found (install postgresql, set SPACE_PG_BINDIR, or pass "
                                    "--database-url)");
        snprintf(c->pg_bin, sizeof(c->pg_bin), "/usr/lib/postgresql/%d/bin", best);
        return 0;
}

/* Runs argv (as pw, or as the caller when NULL) with its output appended to
 * log; returns its exit status, or -1 when it did not run or was killed. */
static int run_status(const struct passwd *pw, const char *const *argv, const char *log)
{
        pid_t pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
                int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (fd < 0 || devnull < 0 || dup2(devnull, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                        _exit(126);
                if (pw && (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0))
                        _exit(126);
                execv(argv[0], (char *const *)argv);
                _exit(127);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_as(const struct passwd *pw, const char *const *argv, const char *log, sp_error **err)
{
        int st = run_status(pw, argv, log);
        if (st != 0)
                return sp_error_set(err, SP_E_INTERNAL, "%s failed (status %d); see %s", argv[0], st, log);
        return 0;
}

/* PostgreSQL accepts connections on the cluster's socket (asked with its own
 * pg_isready: spacectl does not link libpq). */
static bool pg_ok(const dctx *c)
{
        char bin[PATH_MAX + 16], run[PATH_MAX + 16];
        snprintf(bin, sizeof(bin), "%s/pg_isready", c->pg_bin);
        snprintf(run, sizeof(run), "%s/pg/run", c->state);
        const char *argv[] = {bin, "-q", "-h", run, "-U", "postgres", "-d", "postgres", "-t", "2", NULL};
        return c->pg_bin[0] && run_status(NULL, argv, "/dev/null") == 0;
}

static int pg_up(dctx *c, sp_error **err)
{
        struct passwd *pw = getpwnam("postgres");
        if (!pw)
                return sp_error_set(err, SP_E_NOT_FOUND, "no 'postgres' system user to run PostgreSQL as");
        if (find_pg_bin(c, err) < 0)
                return -1;
        char dir[PATH_MAX], data[PATH_MAX + 16], run[PATH_MAX + 16], ver[PATH_MAX + 32], logp[PATH_MAX + 32];
        path_of(c, dir, sizeof(dir), "pg");
        snprintf(data, sizeof(data), "%s/data", dir);
        snprintf(run, sizeof(run), "%s/run", dir);
        snprintf(ver, sizeof(ver), "%s/PG_VERSION", data);
        snprintf(logp, sizeof(logp), "%s/logs/postgres.log", c->state);
        if (sp_mkdir_p(run, 0700, err) < 0)
                return -1;
        if (chown(dir, pw->pw_uid, pw->pw_gid) < 0 || chown(run, pw->pw_uid, pw->pw_gid) < 0 || chmod(dir, 0700) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "preparing %s for postgres", dir);
        if (access(ver, F_OK) != 0) {
                progress(c, "initializing PostgreSQL in %s", data);
                char initdb[PATH_MAX + 16];
                snprintf(initdb, sizeof(initdb), "%s/initdb", c->pg_bin);
                /* Trust on the unix socket only: its directory is postgres's, mode 0700 (root and postgres). */
                const char *argv[] = {initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", NULL};
                if (run_as(pw, argv, logp, err) < 0)
                        return -1;
        }
        if (component_pid(c, C_POSTGRES) == 0 || !pg_ok(c)) {
                if (component_pid(c, C_POSTGRES) == 0) {
                        progress(c, "starting PostgreSQL");
                        char pgbin[PATH_MAX + 16], sockopt[PATH_MAX + 48];
                        snprintf(pgbin, sizeof(pgbin), "%s/postgres", c->pg_bin);
                        snprintf(sockopt, sizeof(sockopt), "unix_socket_directories=%s", run);
                        const char *argv[] = {pgbin,
                                              "-D",
                                              data,
                                              "-c",
                                              "listen_addresses=",
                                              "-c",
                                              sockopt,
                                              "-c",
                                              "logging_collector=off",
                                              NULL};
                        if (spawn_daemon(c, C_POSTGRES, argv, pw, err) < 0)
                                return -1;
                }
                if (wait_ready(c, C_POSTGRES, pg_ok, err) < 0)
                        return -1;
        }
        /* The cluster's database is the control plane's to make (--create-database). */
        return 0;
}

/* ---- settings ---- */

static int load_settings(dctx *c, sp_error **err)
{
        char p[PATH_MAX + 32];
        path_of(c, p, sizeof(p), "direct.json");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(p, 1 << 16, &b, NULL) == 0) {
                sp_buf_append(&b, "", 1, NULL);
                _cleanup_json_ json_object *o = json_tokener_parse(b.data);
                json_object *v;
                if (!o)
                        return sp_error_set(err, SP_E_INVALID, "%s is not JSON", p);
#define GETI(k, f) \
        if (json_object_object_get_ex(o, k, &v)) \
        c->f = json_object_get_int(v)
                GETI("api_port", api_port);
                GETI("dataplane_port", dp_port);
                GETI("rpc_port", rpc_port);
                GETI("worker_port", worker_port);
                GETI("worker_http_port", worker_http_port);
                /* Clusters from before space-e2b: 3000 beside the default block, else the block's third port. */
                c->e2b_port = c->api_port == 7070 ? 3000 : c->api_port + 2;
                GETI("e2b_port", e2b_port);
                net_defaults(c);
                GETI("gateway_tcp_port", gw_tcp_port);
                GETI("gateway_dns_port", gw_dns_port);
#undef GETI
                if (json_object_object_get_ex(o, "sandbox_cidr", &v))
                        snprintf(c->sandbox_cidr, sizeof(c->sandbox_cidr), "%s", json_object_get_string(v));
                if (json_object_object_get_ex(o, "net_prefix", &v))
                        snprintf(c->net_prefix, sizeof(c->net_prefix), "%s", json_object_get_string(v));
                if (json_object_object_get_ex(o, "database", &v))
                        snprintf(c->database, sizeof(c->database), "%s", json_object_get_string(v));
                if (json_object_object_get_ex(o, "backend", &v))
                        snprintf(c->backend, sizeof(c->backend), "%s", json_object_get_string(v));
                if (json_object_object_get_ex(o, "uid_base", &v) && json_object_get_int64(v) > 0 &&
                    json_object_get_int64(v) < (int64_t)CTL_UIDRANGE_END)
                        c->uid_base = (uint32_t)json_object_get_int64(v);
                c->private_pg = json_object_object_get_ex(o, "private_database", &v) && json_object_get_boolean(v);
                return 0;
        }
        /* First run. */
        int base = c->o->api_port ? c->o->api_port : 7070;
        c->api_port = base;
        c->dp_port = base + 1;
        c->rpc_port = base + 3;
        c->worker_port = base + 4;
        c->worker_http_port = base + 5;
        c->e2b_port = c->o->api_port ? base + 2 : 3000;
        net_defaults(c);
        c->private_pg = !c->o->database_url;
        if (c->o->database_url)
                snprintf(c->database, sizeof(c->database), "%s", c->o->database_url);
        else
                snprintf(c->database, sizeof(c->database), "host=%s/pg/run dbname=space user=postgres", c->state);
        const char *want = c->o->backend ? c->o->backend : "auto";
        if (strcmp(want, "auto") == 0) {
                /* The jail everywhere: it needs nothing but the kernel. A VM per sandbox
                 * (qemu) is asked for by name (docs/backends.md). */
                snprintf(c->backend, sizeof(c->backend), "jail");
        } else if (strcmp(want, "jail") == 0 || strcmp(want, "qemu") == 0 || strcmp(want, "jail,qemu") == 0 ||
                   strcmp(want, "qemu,jail") == 0) {
                /* Both: one worker runs jails and VMs, the first the default (docs/backends.md). */
                snprintf(c->backend, sizeof(c->backend), "%s", want);
        } else {
                return sp_error_set(err, SP_E_UNSUPPORTED,
                                    "backend '%s' is not available in this build (jail, qemu, or both: jail,qemu)",
                                    want);
        }
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "api_port", json_object_new_int(c->api_port));
        json_object_object_add(o, "dataplane_port", json_object_new_int(c->dp_port));
        json_object_object_add(o, "rpc_port", json_object_new_int(c->rpc_port));
        json_object_object_add(o, "worker_port", json_object_new_int(c->worker_port));
        json_object_object_add(o, "worker_http_port", json_object_new_int(c->worker_http_port));
        json_object_object_add(o, "e2b_port", json_object_new_int(c->e2b_port));
        json_object_object_add(o, "gateway_tcp_port", json_object_new_int(c->gw_tcp_port));
        json_object_object_add(o, "gateway_dns_port", json_object_new_int(c->gw_dns_port));
        json_object_object_add(o, "sandbox_cidr", json_object_new_string(c->sandbox_cidr));
        json_object_object_add(o, "net_prefix", json_object_new_string(c->net_prefix));
        json_object_object_add(o, "database", json_object_new_string(c->database));
        json_object_object_add(o, "private_database", json_object_new_boolean(c->private_pg));
        json_object_object_add(o, "backend", json_object_new_string(c->backend));
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY);
        return sp_file_write_atomic(p, s, strlen(s), 0600, err);
}

static int ctx_init(dctx *c, const ctl_direct_opts *o, bool create, sp_error **err)
{
        memset(c, 0, sizeof(*c));
        c->o = o;
        const char *state = o->state_dir ? o->state_dir : DEFAULT_STATE;
        if (strlen(state) >= 100) /* PostgreSQL's socket path lives under it (sun_path is 108 bytes) */
                return sp_error_set(err, SP_E_INVALID, "the state directory's path is too long (at most 99 bytes)");
        snprintf(c->state, sizeof(c->state), "%s", state);
        if (o->bin_dir) {
                snprintf(c->bin, sizeof(c->bin), "%s", o->bin_dir);
        } else {
                ssize_t n = readlink("/proc/self/exe", c->bin, sizeof(c->bin) - 1);
                if (n <= 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "readlink /proc/self/exe");
                c->bin[n] = '\0';
                char *slash = strrchr(c->bin, '/');
                if (slash)
                        *slash = '\0';
        }
        /* The worker's cgroup parent: one per state directory, so that two direct-mode clusters (a test's
         * and the host's) never touch each other's sandboxes. */
        if (strcmp(c->state, DEFAULT_STATE) == 0) {
                snprintf(c->cgroup, sizeof(c->cgroup), "space-direct");
        } else {
                uint32_t h = 2166136261u;
                for (const char *q = c->state; *q; q++)
                        h = (h ^ (uint8_t)*q) * 16777619u;
                snprintf(c->cgroup, sizeof(c->cgroup), "space-direct-%08x", h);
        }
        if (!create) {
                char p[PATH_MAX + 32];
                path_of(c, p, sizeof(p), "direct.json");
                if (access(p, F_OK) != 0)
                        return sp_error_set(err, SP_E_NOT_FOUND, "no direct-mode cluster in %s", c->state);
        } else {
                char p[PATH_MAX + 32];
                if (sp_mkdir_p(c->state, 0711, err) < 0)
                        return -1;
                if (chmod(c->state, 0711) < 0) /* postgres must reach pg/ */
                        return sp_error_set_errno(err, SP_E_IO, errno, "chmod %s", c->state);
                static const char *const dirs[] = {"run", "logs", "controlplane", "worker", "dataplane", "e2b", NULL};
                for (size_t i = 0; dirs[i]; i++) {
                        path_of(c, p, sizeof(p), dirs[i]);
                        if (sp_mkdir_p(p, 0700, err) < 0)
                                return -1;
                }
        }
        return load_settings(c, err);
}

/* ---- the space components ---- */

static bool cp_ok(const dctx *c)
{
        return http_ok(c->api_port, "/readyz");
}

static bool dp_ok(const dctx *c)
{
        return http_ok(c->dp_port, "/readyz");
}

static bool e2b_ok(const dctx *c)
{
        int status = 0;
        return http_local(c->e2b_port, "GET", "/health", NULL, NULL, &status, NULL, NULL) == 0 && status == 204;
}

/* The worker is ready when it says so itself and the control plane lists it
 * ready with the base template after a heartbeat of this process (not one
 * left from a worker that has since died: the heartbeat is no older than the
 * pidfile). */
static bool worker_ok(const dctx *c)
{
        char pidp[PATH_MAX + 32];
        struct stat st;
        pidfile_path(c, C_WORKER, pidp, sizeof(pidp));
        if (stat(pidp, &st) < 0 || !http_ok(c->worker_http_port, "/readyz"))
                return false;
        int status = 0;
        _cleanup_json_ json_object *ws = NULL;
        if (http_local(c->api_port, "GET", "/v1/workers", c->admin_key, NULL, &status, &ws, NULL) < 0 ||
            status != 200 || !ws)
                return false;
        json_object *arr;
        if (!json_object_object_get_ex(ws, "workers", &arr))
                return false;
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                json_object *w = json_object_array_get_idx(arr, i), *name, *state, *hb;
                if (!json_object_object_get_ex(w, "name", &name) ||
                    strcmp(json_object_get_string(name), "direct") != 0 ||
                    !json_object_object_get_ex(w, "state", &state) ||
                    strcmp(json_object_get_string(state), "ready") != 0 ||
                    !strstr(json_object_to_json_string(w), "\"base\"") ||
                    !json_object_object_get_ex(w, "last_heartbeat", &hb))
                        continue;
                struct tm tm = {0};
                const char *end = strptime(json_object_get_string(hb), "%Y-%m-%dT%H:%M:%S", &tm);
                if (end && timegm(&tm) >= st.st_mtime)
                        return true;
        }
        return false;
}

static int read_admin_key(dctx *c, sp_error **err)
{
        char p[PATH_MAX + 32];
        path_of(c, p, sizeof(p), "controlplane/admin.key");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(p, sizeof(c->admin_key) - 1, &b, err) < 0)
                return -1;
        snprintf(c->admin_key, sizeof(c->admin_key), "%.*s", (int)b.len, b.data);
        c->admin_key[strcspn(c->admin_key, "\r\n")] = '\0';
        return 0;
}

/* A join token for a component that has not joined yet, in a 0600 file. */
static int join_token_file(const dctx *c, const char *who, char *out, size_t n, sp_error **err)
{
        char body[160];
        snprintf(body, sizeof(body), "{\"role\":\"%s\",\"description\":\"spacectl up: %s\",\"uses\":1,\"ttl_s\":900}",
                 who, who);
        int status = 0;
        _cleanup_json_ json_object *r = NULL;
        if (http_local(c->api_port, "POST", "/v1/join-tokens", c->admin_key, body, &status, &r, err) < 0)
                return -1;
        json_object *tok;
        if (status != 201 || !r || !json_object_object_get_ex(r, "token", &tok))
                return sp_error_set(err, SP_E_INTERNAL, "creating a join token: status %d: %s", status,
                                    r ? json_object_to_json_string(r) : "");
        snprintf(out, n, "%s/%s/join.token", c->state, who);
        const char *t = json_object_get_string(tok);
        return sp_file_write_atomic(out, t, strlen(t), 0600, err);
}

/* The cluster key ring that seals secrets' values (docs/secrets.md),
 * <state>/controlplane/secrets.keys: made once, one random key, 0600; its
 * path in path. */
static int secrets_key_file(dctx *c, char *path, size_t n, sp_error **err)
{
        path_of(c, path, n, "controlplane/secrets.keys");
        if (access(path, F_OK) == 0)
                return 0;
        uint8_t key[32];
        if (getrandom(key, sizeof(key), 0) != (ssize_t)sizeof(key))
                return sp_error_set_errno(err, SP_E_IO, errno, "getrandom");
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        int r = sp_buf_append_str(&text, "k1 ", err);
        if (r == 0)
                r = sp_base64_encode(&text, key, sizeof(key), 0, err);
        if (r == 0)
                r = sp_buf_append_str(&text, "\n", err);
        if (r == 0)
                r = sp_file_write_atomic(path, text.data, text.len, 0600, err);
        sp_explicit_bzero(key, sizeof(key));
        if (text.data)
                sp_explicit_bzero(text.data, text.cap);
        return r < 0 ? sp_error_wrap(err, "the secrets key file %s", path) : 0;
}

static int cp_up(dctx *c, sp_error **err)
{
        if (component_pid(c, C_CONTROLPLANE) == 0) {
                progress(c, "starting the control plane on 127.0.0.1:%d", c->api_port);
                char bin[PATH_MAX + 32], db[1100], listen[64], rpc[64], key[PATH_MAX + 48], ca[PATH_MAX + 48],
                        tk[PATH_MAX + 64], dpu[96], keys[PATH_MAX], keys_flag[PATH_MAX + 32];
                if (secrets_key_file(c, keys, sizeof(keys), err) < 0)
                        return -1;
                snprintf(keys_flag, sizeof(keys_flag), "--secrets-key-file=%s", keys);
                snprintf(bin, sizeof(bin), "%s/space-controlplane", c->bin);
                snprintf(db, sizeof(db), "--database=%s", c->database);
                snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", c->api_port);
                snprintf(rpc, sizeof(rpc), "--rpc-listen=127.0.0.1:%d", c->rpc_port);
                snprintf(key, sizeof(key), "--admin-key-file=%s/controlplane/admin.key", c->state);
                snprintf(ca, sizeof(ca), "--ca-out=%s/controlplane/ca.pem", c->state);
                snprintf(tk, sizeof(tk), "--token-public-key-out=%s/controlplane/token-keys.pem", c->state);
                snprintf(dpu, sizeof(dpu), "--dataplane-url=http://127.0.0.1:%d", c->dp_port);
                const char *argv[] = {bin,
                                      db,
                                      "--create-database",
                                      listen,
                                      rpc,
                                      key,
                                      ca,
                                      tk,
                                      dpu,
                                      keys_flag,
                                      "--name=direct",
                                      "--log-format=json",
                                      NULL};
                if (spawn_daemon(c, C_CONTROLPLANE, argv, NULL, err) < 0)
                        return -1;
        }
        if (wait_ready(c, C_CONTROLPLANE, cp_ok, err) < 0)
                return -1;
        return read_admin_key(c, err);
}

/* Sets key to v in direct.json. */
static int save_setting_int(const dctx *c, const char *key, int64_t v, sp_error **err)
{
        char p[PATH_MAX + 32];
        path_of(c, p, sizeof(p), "direct.json");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_json_ json_object *o = NULL;
        if (sp_file_read(p, 1 << 16, &b, err) < 0 || sp_json_parse(b.data ? b.data : "", b.len, &o, err) < 0)
                return sp_error_wrap(err, "%s", p);
        json_object_object_add(o, key, json_object_new_int64(v));
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY);
        return sp_file_write_atomic(p, s, strlen(s), 0600, err);
}

/* The worker's uid flags: a range of host uids of this cluster's own,
 * reserved on the host (uidrange.h), for as many sandboxes as the worker
 * has slots. A caller's SPACE_WORKER_UID_BASE is left to it (the caller
 * then keeps clusters apart). flag gets "--uid-base=N" ("" then). */
static int uid_flags(dctx *c, char *flag, size_t n, sp_error **err)
{
        flag[0] = '\0';
        const char *own = getenv("SPACE_WORKER_UID_BASE");
        if (own && *own)
                return 0;
        const char *s = getenv("SPACE_WORKER_SLOTS");
        long slots = s && *s ? strtol(s, NULL, 10) : 256; /* the worker's default */
        uint64_t span = (uint64_t)(CTL_UIDRANGE_END - CTL_UIDRANGE_FIRST) / CTL_UIDRANGE_ALIGN;
        if (slots < 1 || (uint64_t)slots > span)
                return sp_error_set(err, SP_E_INVALID, "SPACE_WORKER_SLOTS must be 1 to %llu in direct mode",
                                    (unsigned long long)span);
        /* A cluster made before the registry used the worker's default base: it keeps it if it can. */
        uint32_t preferred = c->uid_base ? c->uid_base : CTL_UIDRANGE_FIRST, base = 0;
        if (ctl_uidrange_reserve(ctl_uidrange_registry(), c->state, (uint32_t)slots * CTL_UIDRANGE_ALIGN, preferred,
                                 &base, err) < 0)
                return sp_error_wrap(err, "reserving the sandboxes' host uids");
        if (c->uid_base && base != c->uid_base)
                progress(c,
                         "warning: host uids %u.. are another cluster's now; this one's sandboxes get %u.. (those "
                         "made before keep files owned by the old ids)",
                         c->uid_base, base);
        if (base != c->uid_base && save_setting_int(c, "uid_base", base, err) < 0)
                return -1;
        c->uid_base = base;
        snprintf(flag, n, "--uid-base=%u", base);
        return 0;
}

static int worker_up(dctx *c, sp_error **err)
{
        if (component_pid(c, C_WORKER) == 0) {
                progress(c, "starting the worker (backend %s)", c->backend);
                char bin[PATH_MAX + 32], state[PATH_MAX + 48], storage[PATH_MAX + 48], image[PATH_MAX + 48], listen[64],
                        http[64], ca[PATH_MAX + 48], cpaddr[64], tokf[512], backend[64], cert[PATH_MAX + 64],
                        tokpath[300], cg[96], import[PATH_MAX + 48], uid[48];
                snprintf(bin, sizeof(bin), "%s/space-worker", c->bin);
                /* The only place templates are imported from (spacectl template build --dir, --tar, --oci). */
                path_of(c, import, sizeof(import), "import");
                if (sp_mkdir_p(import, 0700, err) < 0)
                        return -1;
                snprintf(import, sizeof(import), "--template-import-root=%s/import", c->state);
                snprintf(cg, sizeof(cg), "--cgroup-parent=%s", c->cgroup);
                /* CPU is overcommitted 4x on a single host: a sandbox asks for a whole CPU by default, and an
                 * agent's sandboxes are mostly idle (memory and slots are not overcommitted). Through the
                 * environment, so that SPACE_WORKER_CPU_MILLIS set by the caller still wins. */
                if (!getenv("SPACE_WORKER_CPU_MILLIS")) {
                        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
                        char cpu[32];
                        snprintf(cpu, sizeof(cpu), "%ld", (ncpu > 0 ? ncpu : 1) * 4000);
                        setenv("SPACE_WORKER_CPU_MILLIS", cpu, 1);
                }
                snprintf(state, sizeof(state), "--state-dir=%s/worker/state", c->state);
                snprintf(storage, sizeof(storage), "--storage-dir=%s/worker/storage", c->state);
                snprintf(image, sizeof(image), "--storage-image=%s/worker/storage.img", c->state);
                snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", c->worker_port);
                snprintf(http, sizeof(http), "--http-listen=127.0.0.1:%d", c->worker_http_port);
                snprintf(ca, sizeof(ca), "--tls-ca=%s/controlplane/ca.pem", c->state);
                snprintf(cpaddr, sizeof(cpaddr), "--control-plane=127.0.0.1:%d", c->rpc_port);
                snprintf(backend, sizeof(backend), "--backend=%s", c->backend);
                const char *argv[32] = {bin,     state,
                                        storage, image,
                                        listen,  http,
                                        ca,      cpaddr,
                                        backend, "--node-id=direct",
                                        cg,      "--log-format=json",
                                        import};
                size_t n = 13;
                if (uid_flags(c, uid, sizeof(uid), err) < 0)
                        return -1;
                if (uid[0])
                        argv[n++] = uid;
                net_flags nf;
                n += net_argv(c, &nf, argv + n);
                snprintf(cert, sizeof(cert), "%s/worker/state/tls/worker.crt", c->state);
                if (access(cert, F_OK) != 0) {
                        if (join_token_file(c, "worker", tokpath, sizeof(tokpath), err) < 0)
                                return -1;
                        snprintf(tokf, sizeof(tokf), "--join-token-file=%s", tokpath);
                        argv[n++] = tokf;
                }
                argv[n] = NULL;
                if (spawn_daemon(c, C_WORKER, argv, NULL, err) < 0)
                        return -1;
        }
        progress(c, "waiting for the worker to join and report the base template");
        return wait_ready(c, C_WORKER, worker_ok, err);
}

static int dp_up(dctx *c, sp_error **err)
{
        char bin[PATH_MAX + 32];
        snprintf(bin, sizeof(bin), "%s/space-dataplane", c->bin);
        if (access(bin, X_OK) != 0)
                return sp_error_set(err, SP_E_NOT_FOUND, "%s is missing (build it first)", bin);
        if (component_pid(c, C_DATAPLANE) == 0) {
                progress(c, "starting the data plane on 127.0.0.1:%d", c->dp_port);
                char state[PATH_MAX + 48], listen[64], cpaddr[64], ca[PATH_MAX + 48], tokf[512], tokpath[300],
                        cert[PATH_MAX + 64];
                snprintf(state, sizeof(state), "--state-dir=%s/dataplane/state", c->state);
                snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", c->dp_port);
                snprintf(cpaddr, sizeof(cpaddr), "--control-plane=127.0.0.1:%d", c->rpc_port);
                snprintf(ca, sizeof(ca), "--rpc-ca=%s/controlplane/ca.pem", c->state);
                const char *argv[16] = {bin, state, listen, cpaddr, ca, "--name=direct", "--log-format=json"};
                size_t n = 7;
                snprintf(cert, sizeof(cert), "%s/dataplane/state/tls/dataplane.crt", c->state);
                if (access(cert, F_OK) != 0) {
                        if (join_token_file(c, "dataplane", tokpath, sizeof(tokpath), err) < 0)
                                return -1;
                        snprintf(tokf, sizeof(tokf), "--join-token-file=%s", tokpath);
                        argv[n++] = tokf;
                }
                argv[n] = NULL;
                if (spawn_daemon(c, C_DATAPLANE, argv, NULL, err) < 0)
                        return -1;
        }
        return wait_ready(c, C_DATAPLANE, dp_ok, err);
}

static int e2b_up(dctx *c, sp_error **err)
{
        char bin[PATH_MAX + 32];
        snprintf(bin, sizeof(bin), "%s/space-e2b", c->bin);
        if (access(bin, X_OK) != 0)
                return sp_error_set(err, SP_E_NOT_FOUND, "%s is missing (build it first)", bin);
        if (component_pid(c, C_E2B) == 0) {
                progress(c, "starting the E2B wrapper on 127.0.0.1:%d", c->e2b_port);
                char listen[64], api[96], secret[PATH_MAX + 48];
                snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", c->e2b_port);
                snprintf(api, sizeof(api), "--api-url=http://127.0.0.1:%d", c->api_port);
                snprintf(secret, sizeof(secret), "--secret-file=%s/e2b/secret.key", c->state);
                const char *argv[] = {bin, listen, api, secret, "--log-format=json", NULL};
                if (spawn_daemon(c, C_E2B, argv, NULL, err) < 0)
                        return -1;
        }
        return wait_ready(c, C_E2B, e2b_ok, err);
}

int ctl_direct_up(const ctl_direct_opts *o, ctl_direct_info *info, sp_error **err)
{
        if (geteuid() != 0)
                return sp_error_set(err, SP_E_PERMISSION,
                                    "spacectl up runs as root (sandboxes need namespaces, cgroups and mounts)");
        dctx c;
        if (ctx_init(&c, o, true, err) < 0)
                return -1;
        progress(&c, "cluster state in %s", c.state);
        if (c.private_pg && pg_up(&c, err) < 0)
                return sp_error_wrap(err, "postgres");
        if (cp_up(&c, err) < 0)
                return sp_error_wrap(err, "controlplane");
        if (worker_up(&c, err) < 0)
                return sp_error_wrap(err, "worker");
        if (dp_up(&c, err) < 0)
                return sp_error_wrap(err, "dataplane");
        if (e2b_up(&c, err) < 0)
                return sp_error_wrap(err, "e2b");
        memset(info, 0, sizeof(*info));
        snprintf(info->api_url, sizeof(info->api_url), "http://127.0.0.1:%d", c.api_port);
        snprintf(info->dataplane_url, sizeof(info->dataplane_url), "http://127.0.0.1:%d", c.dp_port);
        snprintf(info->e2b_url, sizeof(info->e2b_url), "http://127.0.0.1:%d", c.e2b_port);
        snprintf(info->admin_key, sizeof(info->admin_key), "%s", c.admin_key);
        snprintf(info->ca_file, sizeof(info->ca_file), "%s/controlplane/ca.pem", c.state);
        return 0;
}

int ctl_direct_e2b_url(const ctl_direct_opts *o, char *out, size_t n, sp_error **err)
{
        dctx c;
        if (ctx_init(&c, o, false, err) < 0)
                return -1;
        snprintf(out, n, "http://127.0.0.1:%d", c.e2b_port);
        return 0;
}

int ctl_direct_status(const ctl_direct_opts *o, FILE *out, sp_error **err)
{
        dctx c;
        if (ctx_init(&c, o, false, err) < 0)
                return -1;
        (void)read_admin_key(&c, NULL);
        if (c.private_pg)
                (void)find_pg_bin(&c, NULL); /* pg_ok's pg_isready; none found reads as not healthy */
        int bad = 0;
        _cleanup_json_ json_object *all = json_object_new_array();
        for (int i = 0; i < C_COUNT; i++) {
                if (i == C_POSTGRES && !c.private_pg)
                        continue;
                pid_t pid = component_pid(&c, i);
                bool healthy = pid > 0 && (i == C_POSTGRES       ? pg_ok(&c)
                                           : i == C_CONTROLPLANE ? cp_ok(&c)
                                           : i == C_WORKER       ? worker_ok(&c)
                                           : i == C_DATAPLANE    ? dp_ok(&c)
                                                                 : e2b_ok(&c));
                char addr[PATH_MAX + 32];
                if (i == C_POSTGRES)
                        snprintf(addr, sizeof(addr), "%s/pg/run", c.state);
                else
                        snprintf(addr, sizeof(addr), "127.0.0.1:%d",
                                 i == C_CONTROLPLANE ? c.api_port
                                 : i == C_WORKER     ? c.worker_port
                                 : i == C_DATAPLANE  ? c.dp_port
                                                     : c.e2b_port);
                const char *st = pid == 0 ? "stopped" : healthy ? "healthy" : "unhealthy";
                bad += !healthy;
                if (o->json) {
                        json_object *e = json_object_new_object();
                        json_object_object_add(e, "component", json_object_new_string(component_names[i]));
                        json_object_object_add(e, "state", json_object_new_string(st));
                        json_object_object_add(e, "pid", pid ? json_object_new_int(pid) : NULL);
                        json_object_object_add(e, "address", json_object_new_string(addr));
                        json_object_array_add(all, e);
                } else {
                        if (i == 0)
                                fprintf(out, "%-14s %-10s %-8s %s\n", "COMPONENT", "STATE", "PID", "ADDRESS");
                        char pids[16] = "-";
                        if (pid)
                                snprintf(pids, sizeof(pids), "%d", (int)pid);
                        fprintf(out, "%-14s %-10s %-8s %s\n", component_names[i], st, pids, addr);
                }
        }
        if (o->json)
                fprintf(out, "%s\n",
                        json_object_to_json_string_ext(all, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        return bad;
}

/* ---- down and purge ---- */

/* The worker's own purge (space-worker --purge) takes away what it made on
 * this host: sandboxes, cgroups, mounts, the storage image's loop device. */
static int worker_purge(dctx *c, sp_error **err)
{
        char bin[PATH_MAX + 32], state[PATH_MAX + 32], storage[PATH_MAX + 32], image[PATH_MAX + 32], cg[128],
                logp[PATH_MAX + 32];
        snprintf(bin, sizeof(bin), "%s/space-worker", c->bin);
        snprintf(state, sizeof(state), "--state-dir=%s/worker/state", c->state);
        snprintf(storage, sizeof(storage), "--storage-dir=%s/worker/storage", c->state);
        snprintf(image, sizeof(image), "--storage-image=%s/worker/storage.img", c->state);
        snprintf(cg, sizeof(cg), "--cgroup-parent=%s", c->cgroup);
        snprintf(logp, sizeof(logp), "%s/logs/purge.log", c->state);
        const char *argv[16] = {bin, "--purge", state, storage, image, cg};
        net_flags nf;
        net_argv(c, &nf, argv + 6);
        char logs[PATH_MAX + 16];
        path_of(c, logs, sizeof(logs), "logs");
        (void)sp_mkdir_p(logs, 0700, NULL);
        int st = run_status(NULL, argv, logp);
        if (st != 0)
                return sp_error_set(err, SP_E_INTERNAL, "space-worker --purge failed (status %d): see %s", st, logp);
        return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)ftw;
        if (flag == FTW_DP)
                return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
        return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int ctl_direct_down(const ctl_direct_opts *o, bool purge, sp_error **err)
{
        if (geteuid() != 0)
                return sp_error_set(err, SP_E_PERMISSION, "spacectl down runs as root");
        dctx c;
        if (ctx_init(&c, o, false, err) < 0)
                return -1;
        for (int i = C_COUNT - 1; i >= 0; i--)
                stop_component(&c, i);
        if (!purge)
                return 0;
        progress(&c, "removing sandboxes, cgroups, mounts, loop devices and %s", c.state);
        if (worker_purge(&c, err) < 0)
                return -1;
        /* The uid range goes back to the host once nothing of the cluster is left. */
        char canon[PATH_MAX];
        if (!realpath(c.state, canon))
                snprintf(canon, sizeof(canon), "%s", c.state);
        if (nftw(c.state, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 && errno != ENOENT)
                return sp_error_set_errno(err, SP_E_IO, errno, "removing %s", c.state);
        return ctl_uidrange_release(ctl_uidrange_registry(), canon, err);
}
