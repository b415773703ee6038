/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A test killed mid-way (CTest's TIMEOUT, a crash) leaves nothing behind and
 * nothing holding its output: a "test" process, whose stdout and stderr are a
 * pipe as under CTest, starts a daemon through the launcher, a process that
 * escapes into its own session with the pipe (as a sandbox's init does), and
 * a temporary directory, and is then SIGKILLed. The pipe must reach
 * end-of-file within seconds, and the daemon, the escapee and the directory
 * must be gone. Also: the guard withdraws what a teardown already did.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "guard.h"
#include "harness.h"
#include "launcher.h"
#include "proc.h"

#define EOF_WAIT_MS 10000

static int64_t mono_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The "test": its stdout and stderr are out (the pipe CTest would read). It
 * reports "<daemon> <escapee> <dir>\n" on report and waits to be killed. */
__attribute__((noreturn)) static void doomed_test(int out, int report)
{
        if (dup2(out, 1) < 0 || dup2(out, 2) < 0)
                _exit(2);
        close(out);
        sp_error *err = NULL;
        static sp_test_proc daemon;
        const char *argv[] = {"sleep", "600", NULL};
        if (sp_test_proc_start(&daemon, "daemon", argv, NULL, &err) < 0)
                _exit(3);
        pid_t escapee = fork();
        if (escapee == 0) {
                setsid();
                execlp("sleep", "sleep", "600", (char *)NULL);
                _exit(127);
        }
        if (escapee < 0 || sp_test_guard_kill(escapee, &err) < 0)
                _exit(4);
        char *dir = sp_test_tmpdir("guard");
        dprintf(report, "%d %d %s\n", (int)daemon.pid, (int)escapee, dir);
        close(report);
        for (;;)
                pause();
}

START_TEST(killed_test_leaves_nothing_holding_its_pipe)
{
        int out[2], rep[2];
        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(rep, O_CLOEXEC), 0);
        pid_t t = fork();
        ck_assert_int_ge(t, 0);
        if (t == 0) {
                close(out[0]);
                close(rep[0]);
                doomed_test(out[1], rep[1]);
        }
        close(out[1]);
        close(rep[1]);

        char line[4096] = "";
        _cleanup_fclose_ FILE *f = fdopen(rep[0], "r");
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
        int daemon = 0, escapee = 0;
        char dir[4000];
        ck_assert_int_eq(sscanf(line, "%d %d %3999s", &daemon, &escapee, dir), 3);
        ck_assert(sp_test_pid_alive(daemon));
        ck_assert(sp_test_pid_alive(escapee));
        struct stat st;
        ck_assert_int_eq(stat(dir, &st), 0);

        ck_assert_int_eq(kill(t, SIGKILL), 0);
        ck_assert_int_eq(waitpid(t, NULL, 0), t);
        int64_t killed = mono_ms();

        /* End-of-file on the pipe: nobody holds it any more. */
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        char buf[256];
        ssize_t n = 1;
        while (n != 0 && mono_ms() - killed < EOF_WAIT_MS) {
                int r = poll(&p, 1, (int)(EOF_WAIT_MS - (mono_ms() - killed)));
                if (r > 0)
                        n = read(out[0], buf, sizeof(buf));
                if (n < 0 && errno != EINTR && errno != EAGAIN)
                        break;
        }
        ck_assert_msg(n == 0, "the test's pipe is still held %d ms after it was killed", EOF_WAIT_MS);
        close(out[0]);

        ck_assert_msg(sp_test_pid_wait_gone(daemon, EOF_WAIT_MS) == 0, "the daemon survived the test");
        ck_assert_msg(sp_test_pid_wait_gone(escapee, EOF_WAIT_MS) == 0, "the escaped process survived the test");
        bool gone = false;
        for (int64_t end = mono_ms() + EOF_WAIT_MS; !gone && mono_ms() < end; usleep(20000))
                gone = stat(dir, &st) < 0 && errno == ENOENT;
        ck_assert_msg(gone, "%s survived the test", dir);
}
END_TEST

/* A registration withdrawn with sp_test_guard_done() is not undone; the rest
 * are, once the process exits on its own too. */
START_TEST(done_withdraws_a_registration)
{
        char *dir = sp_test_tmpdir("guard-done");
        char kept[4200], ran[4200];
        snprintf(kept, sizeof(kept), "%s/withdrawn", dir);
        snprintf(ran, sizeof(ran), "%s/ran", dir);
        pid_t t = fork();
        ck_assert_int_ge(t, 0);
        if (t == 0) {
                const char *a[] = {"touch", kept, NULL};
                const char *b[] = {"touch", ran, NULL};
                int id = sp_test_guard_run(a, NULL);
                if (id <= 0 || sp_test_guard_run(b, NULL) <= 0)
                        _exit(1);
                sp_test_guard_done(id);
                _exit(0);
        }
        int status = 0;
        ck_assert_int_eq(waitpid(t, &status, 0), t);
        ck_assert_int_eq(status, 0);
        struct stat st;
        bool done = false;
        for (int64_t end = mono_ms() + EOF_WAIT_MS; !done && mono_ms() < end; usleep(20000))
                done = stat(ran, &st) == 0;
        ck_assert_msg(done, "the guard did not run its command");
        ck_assert_msg(stat(kept, &st) < 0, "the guard ran a withdrawn command");
        sp_test_tmpdir_remove(dir);
        free(dir);
}
END_TEST

static Suite *guard_suite(void)
{
        Suite *s = suite_create("harness_guard");
        TCase *tc = tcase_create("guard");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, killed_test_leaves_nothing_holding_its_pipe);
        tcase_add_test(tc, done_withdraws_a_registration);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(guard_suite());
}
