/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The process launcher of the test harness. Its subjects are this very
 * executable, re-run as a small helper (`--helper <mode>`): an HTTP server on
 * loopback, a process that ignores SIGTERM, one that forks, one that exits.
 * The launcher starts them, waits for their port, HTTP answer and log lines,
 * fails fast when they die, stops them (escalating to SIGKILL), restarts
 * them, tears clusters down, and nothing it started outlives a killed test.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/time.h"

#include "harness.h"
#include "launcher.h"
#include "proc.h"

static char g_self[PATH_MAX];
static char *g_dir;

/* A daemon started by an unchecked fixture (in the runner process), and what
 * the forked tests did to it, on a page shared with the runner. */
static sp_test_proc g_daemon;
static int g_daemon_port;
static struct shared {
        pid_t original;
        pid_t restarted;
        int status_after_kill;
} * g_shared;

/* ---- the helper side ---------------------------------------------------- */

static int helper_http(int port)
{
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 16) < 0) {
                perror("helper: listen");
                return 2;
        }
        printf("listening on %d\n", port);
        fflush(stdout);
        for (;;) {
                int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        continue;
                char req[1024] = {0};
                ssize_t n = read(c, req, sizeof(req) - 1);
                const char *resp = n > 0 && strncmp(req, "GET /healthz ", 13) == 0
                                           ? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                                           : "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                (void)!write(c, resp, strlen(resp));
                close(c);
        }
}

static int helper_main(int argc, char **argv)
{
        const char *mode = argc > 2 ? argv[2] : "";
        if (strcmp(mode, "http") == 0 && argc > 3)
                return helper_http(atoi(argv[3]));
        if (strcmp(mode, "stubborn") == 0) {
                signal(SIGTERM, SIG_IGN);
                printf("ready, ignoring SIGTERM\n");
                fflush(stdout);
                for (;;)
                        pause();
        }
        if (strcmp(mode, "tree") == 0) {
                pid_t child = fork();
                if (child == 0) {
                        /* Even if the test fails before stopping us, nothing outlives it. */
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        for (;;)
                                pause();
                }
                printf("tree ready: child %d\n", (int)child);
                fflush(stdout);
                for (;;)
                        pause();
        }
        if (strcmp(mode, "exit") == 0 && argc > 3) {
                fprintf(stderr, "helper exiting with %s\n", argv[3]);
                return atoi(argv[3]);
        }
        fprintf(stderr, "helper: unknown mode '%s'\n", mode);
        return 64;
}

/* ---- the tests ---------------------------------------------------------- */

static void dir_setup(void)
{
        g_dir = sp_test_tmpdir("launcher");
}

static void dir_teardown(void)
{
        sp_test_tmpdir_remove(g_dir);
        free(g_dir);
        g_dir = NULL;
}

static char *log_in_dir(const char *name)
{
        char *p = NULL;
        if (asprintf(&p, "%s/%s-%d.log", g_dir, name, (int)getpid()) < 0)
                abort();
        return p;
}

static int free_port(void)
{
        sp_error *err = NULL;
        int port = sp_test_free_port(&err);
        sp_test_ok(port, &err);
        ck_assert_int_gt(port, 0);
        return port;
}

static void start_helper(sp_test_proc *p, const char *name, const char *mode, const char *arg)
{
        _cleanup_free_ char *log = log_in_dir(name);
        const char *argv[] = {g_self, "--helper", mode, arg, NULL};
        sp_test_proc_opts o = {.log_path = log};
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_start(p, name, argv, &o, &err), &err);
}

START_TEST(test_http_server_waits_and_stops)
{
        int port = free_port();
        char port_s[16];
        snprintf(port_s, sizeof(port_s), "%d", port);
        sp_test_proc p;
        start_helper(&p, "http", "http", port_s);
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_wait_port(&p, "127.0.0.1", port, 10000, &err), &err);
        sp_test_ok(sp_test_proc_wait_http(&p, "127.0.0.1", port, "/healthz", 10000, &err), &err);
        sp_test_ok(sp_test_proc_wait_log(&p, "listening on", 10000, &err), &err);

        /* A path that never answers 200 runs into the bound, quickly. */
        int64_t t0 = sp_now_mono_us();
        ck_assert_int_eq(sp_test_proc_wait_http(&p, "127.0.0.1", port, "/missing", 300, &err), -SP_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(err->message, "last status 404"));
        sp_error_free(err);
        err = NULL;
        ck_assert_int_lt(sp_now_mono_us() - t0, 5 * SP_USEC_PER_SEC);

        pid_t pid = p.pid;
        ck_assert(sp_test_proc_running(&p));
        ck_assert_int_eq(sp_test_proc_stop(&p, 5000, &err), 0); /* exited on SIGTERM */
        ck_assert(p.exited);
        ck_assert(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGTERM);
        ck_assert(!sp_test_pid_alive(pid));
        ck_assert(!sp_test_proc_running(&p));
        sp_test_proc_free(&p);
}
END_TEST

START_TEST(test_early_exit_fails_fast)
{
        sp_test_proc p;
        start_helper(&p, "quitter", "exit", "3");
        sp_error *err = NULL;
        int64_t t0 = sp_now_mono_us();
        ck_assert_int_eq(sp_test_proc_wait_port(&p, "127.0.0.1", free_port(), 30000, &err), -SP_E_UNAVAILABLE);
        ck_assert_int_lt(sp_now_mono_us() - t0, 10 * SP_USEC_PER_SEC);
        ck_assert_ptr_nonnull(strstr(err->message, "exited with code 3"));
        sp_error_free(err);
        err = NULL;
        ck_assert(p.exited && WIFEXITED(p.status) && WEXITSTATUS(p.status) == 3);
        /* Its last words are in the log, and the tail finds them. */
        _cleanup_free_ char *tail = sp_test_file_tail(p.log_path, 5);
        ck_assert_ptr_nonnull(strstr(tail, "helper exiting with 3"));
        ck_assert_int_eq(sp_test_proc_wait_log(&p, "helper exiting", 1000, &err), 0);
        ck_assert_int_eq(sp_test_proc_wait_log(&p, "never printed", 1000, &err), -SP_E_UNAVAILABLE);
        sp_error_free(err);
        sp_test_proc_free(&p);
}
END_TEST

START_TEST(test_stop_escalates_to_sigkill)
{
        sp_test_proc p;
        start_helper(&p, "stubborn", "stubborn", NULL);
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_wait_log(&p, "ignoring SIGTERM", 10000, &err), &err);
        ck_assert_int_eq(sp_test_proc_stop(&p, 200, &err), 1);
        ck_assert(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL);
        sp_test_proc_free(&p);
}
END_TEST

START_TEST(test_stop_takes_the_whole_group)
{
        sp_test_proc p;
        start_helper(&p, "tree", "tree", NULL);
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_wait_log(&p, "tree ready", 10000, &err), &err);
        pid_t members[8];
        size_t n = sp_test_pgroup_members(p.pid, members, SP_ARRAY_SIZE(members));
        ck_assert_uint_eq(n, 2);
        ck_assert_int_ge(sp_test_proc_stop(&p, 5000, &err), 0);
        for (size_t i = 0; i < n; i++)
                ck_assert_msg(!sp_test_pid_alive(members[i]), "%d survived", (int)members[i]);

        /* A crash: kill -9 of the group. */
        sp_test_ok(sp_test_proc_restart(&p, 1000, &err), &err);
        sp_test_ok(sp_test_proc_wait_log(&p, "tree ready", 10000, &err), &err);
        n = sp_test_pgroup_members(p.pid, members, SP_ARRAY_SIZE(members));
        ck_assert_uint_eq(n, 2);
        sp_test_ok(sp_test_proc_kill(&p, &err), &err);
        ck_assert(WIFSIGNALED(p.status) && WTERMSIG(p.status) == SIGKILL);
        for (size_t i = 0; i < n; i++)
                ck_assert_msg(!sp_test_pid_alive(members[i]), "%d survived", (int)members[i]);
        sp_test_proc_free(&p);
}
END_TEST

START_TEST(test_restart_same_port_and_log)
{
        int port = free_port();
        char port_s[16];
        snprintf(port_s, sizeof(port_s), "%d", port);
        sp_test_proc p;
        start_helper(&p, "restarted", "http", port_s);
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_wait_http(&p, "127.0.0.1", port, "/healthz", 10000, &err), &err);
        pid_t first = p.pid;
        sp_test_ok(sp_test_proc_restart(&p, 5000, &err), &err);
        ck_assert_int_ne(p.pid, first);
        ck_assert_uint_eq(p.starts, 2);
        /* The log wait looks only past the first run's lines. */
        ck_assert_int_gt(p.log_offset, 0);
        sp_test_ok(sp_test_proc_wait_log(&p, "listening on", 10000, &err), &err);
        sp_test_ok(sp_test_proc_wait_http(&p, "127.0.0.1", port, "/healthz", 10000, &err), &err);
        _cleanup_free_ char *tail = sp_test_file_tail(p.log_path, 10);
        char *second = strstr(tail, "listening on");
        ck_assert_ptr_nonnull(second);
        ck_assert_ptr_nonnull(strstr(second + 1, "listening on"));
        sp_test_proc_free(&p);
}
END_TEST

START_TEST(test_env_additions_and_log)
{
        _cleanup_free_ char *log = log_in_dir("env");
        const char *env[] = {"SP_TEST_GREETING=hello from the test", "PATH=/usr/bin:/bin", NULL};
        const char *argv[] = {"sh", "-c", "echo \"$SP_TEST_GREETING\"; echo to-stderr >&2; exit 0", NULL};
        sp_test_proc_opts o = {.env = env, .log_path = log};
        sp_test_proc p;
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_start(&p, "env", argv, &o, &err), &err);
        int st = -1;
        sp_test_ok(sp_test_proc_wait_exit(&p, 10000, &st, &err), &err);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        _cleanup_free_ char *tail = sp_test_file_tail(log, 10);
        ck_assert_str_eq(tail, "hello from the test\nto-stderr\n");
        sp_test_proc_free(&p);
}
END_TEST

START_TEST(test_bad_starts_are_errors)
{
        sp_test_proc p;
        sp_error *err = NULL;
        const char *missing[] = {"/nonexistent/space-daemon", NULL};
        ck_assert_int_eq(sp_test_proc_start(&p, "missing", missing, NULL, &err), -SP_E_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(err->message, "exec"));
        ck_assert_ptr_null(p.name); /* nothing to free */
        sp_error_free(err);
        err = NULL;
        const char *ok[] = {"true", NULL};
        ck_assert_int_eq(sp_test_proc_start(&p, "a/b", ok, NULL, &err), -SP_E_INVALID);
        sp_error_free(err);
        err = NULL;
        const char *bad_env[] = {"NOEQUALS", NULL};
        sp_test_proc_opts o = {.env = bad_env};
        ck_assert_int_lt(sp_test_proc_start(&p, "env", ok, &o, &err), 0);
        sp_error_free(err);
}
END_TEST

START_TEST(test_killed_test_leaves_no_child)
{
        /* A stand-in for a test process: it starts a daemon and is killed. */
        int pfd[2];
        ck_assert_int_eq(pipe(pfd), 0);
        pid_t test = fork();
        ck_assert_int_ge(test, 0);
        if (test == 0) {
                close(pfd[0]);
                sp_test_proc p;
                const char *argv[] = {g_self, "--helper", "stubborn", NULL};
                _cleanup_free_ char *log = log_in_dir("orphan");
                sp_test_proc_opts o = {.log_path = log};
                pid_t pid = -1;
                if (sp_test_proc_start(&p, "orphan", argv, &o, NULL) == 0 &&
                    sp_test_proc_wait_log(&p, "ready", 10000, NULL) == 0)
                        pid = p.pid;
                (void)!write(pfd[1], &pid, sizeof(pid));
                for (;;)
                        pause();
        }
        close(pfd[1]);
        pid_t daemon = -1;
        ck_assert_int_eq(read(pfd[0], &daemon, sizeof(daemon)), (ssize_t)sizeof(daemon));
        close(pfd[0]);
        ck_assert_int_gt(daemon, 0);
        ck_assert(sp_test_pid_alive(daemon));

        ck_assert_int_eq(kill(test, SIGKILL), 0);
        ck_assert_int_eq(waitpid(test, NULL, 0), test);
        ck_assert_msg(sp_test_pid_wait_gone(daemon, 10000) == 0, "daemon %d outlived its test", (int)daemon);
}
END_TEST

START_TEST(test_cluster_torn_down_together)
{
        sp_test_cluster c;
        sp_error *err = NULL;
        sp_test_ok(sp_test_cluster_init(&c, g_dir, &err), &err);
        int ports[2] = {free_port(), free_port()};
        const char *names[2] = {"controlplane", "worker"};
        pid_t pids[2];
        for (int i = 0; i < 2; i++) {
                char port_s[16];
                snprintf(port_s, sizeof(port_s), "%d", ports[i]);
                const char *argv[] = {g_self, "--helper", "http", port_s, NULL};
                sp_test_proc *p = sp_test_cluster_start(&c, names[i], argv, NULL, &err);
                ck_assert_msg(p != NULL, "%s", err ? err->message : "");
                sp_test_ok(sp_test_proc_wait_http(p, "127.0.0.1", ports[i], "/healthz", 10000, &err), &err);
                pids[i] = p->pid;
        }
        const char *argv[] = {"true", NULL};
        ck_assert_ptr_null(sp_test_cluster_start(&c, "worker", argv, NULL, &err));
        ck_assert_int_eq(err->code, SP_E_CONFLICT);
        sp_error_free(err);
        err = NULL;
        ck_assert_ptr_eq(sp_test_cluster_find(&c, "worker"), &c.procs[1]);
        ck_assert_ptr_null(sp_test_cluster_find(&c, "nobody"));
        char log[PATH_MAX];
        snprintf(log, sizeof(log), "%s/worker.log", g_dir);
        ck_assert_str_eq(c.procs[1].log_path, log);
        sp_test_cluster_dump_logs(&c, 3);

        sp_test_cluster_destroy(&c);
        for (int i = 0; i < 2; i++)
                ck_assert_msg(!sp_test_pid_alive(pids[i]), "%s survived", names[i]);
        struct stat st;
        ck_assert_int_eq(stat(log, &st), 0); /* a caller's log directory stays */

        /* A cluster's own directory goes with it. */
        sp_test_ok(sp_test_cluster_init(&c, NULL, &err), &err);
        char *dir = strdup(c.dir);
        sp_test_cluster_destroy(&c);
        ck_assert(stat(dir, &st) < 0 && errno == ENOENT);
        free(dir);
        sp_test_cluster_destroy(&c); /* harmless */
}
END_TEST

START_TEST(test_file_tail)
{
        _cleanup_free_ char *path = log_in_dir("tail");
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        for (int i = 1; i <= 100; i++)
                fprintf(f, "line %d\n", i);
        fclose(f);
        _cleanup_free_ char *tail = sp_test_file_tail(path, 3);
        ck_assert_str_eq(tail, "line 98\nline 99\nline 100\n");
        _cleanup_free_ char *all = sp_test_file_tail(path, 1000);
        ck_assert_int_eq(strncmp(all, "line 1\n", 7), 0);
        _cleanup_free_ char *none = sp_test_file_tail("/nonexistent/log", 3);
        ck_assert_str_eq(none, "");
}
END_TEST

static void daemon_setup(void)
{
        dir_setup();
        sp_error *err = NULL;
        g_daemon_port = sp_test_free_port(&err);
        sp_test_ok(g_daemon_port, &err);
        char port_s[16];
        snprintf(port_s, sizeof(port_s), "%d", g_daemon_port);
        start_helper(&g_daemon, "daemon", "http", port_s);
        sp_test_ok(sp_test_proc_wait_http(&g_daemon, "127.0.0.1", g_daemon_port, "/healthz", 10000, &err), &err);
        g_shared->original = g_daemon.pid;
}

static void daemon_teardown(void)
{
        sp_test_proc_free(&g_daemon);
        dir_teardown();
}

START_TEST(test_forked_test_crashes_fixture_daemon)
{
        /* Not our child: the kill waits through a pidfd. */
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_kill(&g_daemon, &err), &err);
        ck_assert(g_daemon.exited);
        g_shared->status_after_kill = g_daemon.status;
        ck_assert(!sp_test_pid_alive(g_shared->original));
        ck_assert_int_lt(sp_test_proc_wait_port(&g_daemon, "127.0.0.1", g_daemon_port, 100, &err), 0);
        sp_error_free(err);
        err = NULL;

        /* Brought back, it is this test's child and dies with it. */
        sp_test_ok(sp_test_proc_restart(&g_daemon, 1000, &err), &err);
        sp_test_ok(sp_test_proc_wait_http(&g_daemon, "127.0.0.1", g_daemon_port, "/healthz", 10000, &err), &err);
        g_shared->restarted = g_daemon.pid;
}
END_TEST

START_TEST(test_nothing_of_the_fixture_daemon_left)
{
        ck_assert_int_gt(g_shared->original, 0);
        ck_assert_int_gt(g_shared->restarted, 0);
        ck_assert_int_eq(g_shared->status_after_kill, -1);
        ck_assert(!sp_test_pid_alive(g_shared->original));
        ck_assert_msg(sp_test_pid_wait_gone(g_shared->restarted, 10000) == 0, "restarted daemon %d survived",
                      (int)g_shared->restarted);
}
END_TEST

static Suite *launcher_suite(void)
{
        Suite *s = suite_create("harness_launcher");
        TCase *tc = tcase_create("launcher");
        tcase_add_unchecked_fixture(tc, dir_setup, dir_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_http_server_waits_and_stops);
        tcase_add_test(tc, test_early_exit_fails_fast);
        tcase_add_test(tc, test_stop_escalates_to_sigkill);
        tcase_add_test(tc, test_stop_takes_the_whole_group);
        tcase_add_test(tc, test_restart_same_port_and_log);
        tcase_add_test(tc, test_env_additions_and_log);
        tcase_add_test(tc, test_bad_starts_are_errors);
        tcase_add_test(tc, test_killed_test_leaves_no_child);
        tcase_add_test(tc, test_cluster_torn_down_together);
        tcase_add_test(tc, test_file_tail);
        suite_add_tcase(s, tc);

        tc = tcase_create("fixture_daemon");
        tcase_add_unchecked_fixture(tc, daemon_setup, daemon_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_forked_test_crashes_fixture_daemon);
        suite_add_tcase(s, tc);

        tc = tcase_create("after_fixture_daemon");
        tcase_add_test(tc, test_nothing_of_the_fixture_daemon_left);
        suite_add_tcase(s, tc);
        return s;
}

int main(int argc, char **argv)
{
        if (argc > 1 && strcmp(argv[1], "--helper") == 0)
                return helper_main(argc, argv);
        ssize_t n = readlink("/proc/self/exe", g_self, sizeof(g_self) - 1);
        if (n <= 0)
                sp_test_skip("cannot find our own executable to run as a helper");
        g_self[n] = '\0';
        g_shared = mmap(NULL, sizeof(*g_shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (g_shared == MAP_FAILED)
                return 1;
        int r = sp_test_main(launcher_suite());
        munmap(g_shared, sizeof(*g_shared));
        return r;
}
