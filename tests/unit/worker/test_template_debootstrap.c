/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the debootstrap importer without the network — argument
 * building and validation, and the runner driven by stand-in programs:
 * progress lines and the log, a minimal environment, failures quoting the
 * last line, a timeout that kills the whole process group.
 * (tests/integration/test_worker_template_debootstrap.c runs the real one.)
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "template/template.h"
#include "test_template_util.h"

static char *dir;
static char dest[512], prog[512], logp[512];

static void setup(void)
{
        dir = sp_test_tmpdir("tpl-deboot");
        snprintf(dest, sizeof(dest), "%s/dest", dir);
        snprintf(prog, sizeof(prog), "%s/debootstrap", dir);
        snprintf(logp, sizeof(logp), "%s/build.log", dir);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
}

static void teardown(void)
{
        tt_rmrf(dir);
        free(dir);
}

static void script(const char *body)
{
        char text[4096];
        snprintf(text, sizeof(text), "#!/bin/sh\n%s", body);
        tt_write(prog, text, 0755);
}

static void collect(const char *line, void *userdata)
{
        sp_buf_appendf(userdata, NULL, "%s|", line);
}

START_TEST(builds_argv)
{
        wk_debootstrap_opts o = {.suite = "bookworm", .mirror = "http://deb.debian.org/debian"};
        char **argv = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_debootstrap_argv(&o, "/srv/t/rootfs", &argv, &err), &err);
        const char *want[] = {"/usr/sbin/debootstrap",
                              "--variant=minbase",
                              "bookworm",
                              "/srv/t/rootfs",
                              "http://deb.debian.org/debian",
                              NULL};
        for (size_t i = 0; i < SP_ARRAY_SIZE(want); i++) {
                if (want[i])
                        ck_assert_str_eq(argv[i], want[i]);
                else
                        ck_assert_ptr_null(argv[i]);
        }
        sp_strv_freep(&argv);

        o = (wk_debootstrap_opts){.suite = "sid", .program = "/opt/bin/debootstrap"};
        sp_test_ok(wk_debootstrap_argv(&o, "/x", &argv, &err), &err);
        ck_assert_str_eq(argv[0], "/opt/bin/debootstrap");
        ck_assert_str_eq(argv[2], "sid");
        ck_assert_ptr_null(argv[4]);
        sp_strv_freep(&argv);
        o.mirror = "https://[2001:db8::1]:8080/debian-mirror_1/~x";
        sp_test_ok(wk_debootstrap_argv(&o, "/x", &argv, &err), &err);
        sp_strv_freep(&argv);

        /* Packages and the user come after debootstrap (not its arguments), but are checked with them. */
        o = (wk_debootstrap_opts){
                .suite = "bookworm", .packages = "python3,python3-pip,g++,libc6.1-dev", .user = "user"};
        sp_test_ok(wk_debootstrap_argv(&o, "/x", &argv, &err), &err);
        ck_assert_str_eq(argv[1], "--variant=minbase");
        ck_assert_str_eq(argv[2], "bookworm");
        ck_assert_str_eq(argv[3], "/x");
        ck_assert_ptr_null(argv[4]);
        sp_strv_freep(&argv);
}
END_TEST

START_TEST(refuses_bad_arguments)
{
        static const char *const suites[] = {
                "",    "Bookworm", "book worm", "-x",
                "a/b", "a;b",      "$(id)",     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(suites); i++) {
                wk_debootstrap_opts o = {.suite = suites[i]};
                char **argv = NULL;
                sp_error *err = NULL;
                tt_assert_error(wk_debootstrap_argv(&o, "/x", &argv, &err), err, SP_E_INVALID, "field 'suite'");
                ck_assert_ptr_null(argv);
        }
        static const char *const mirrors[] = {"ftp://deb.debian.org/debian",
                                              "http://",
                                              "http:///debian",
                                              "https://host/$(id)",
                                              "http://a b/",
                                              "file:///etc",
                                              "http://h/`x`",
                                              "http://h/a;b",
                                              "http://h/\n",
                                              "deb.debian.org/debian"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(mirrors); i++) {
                wk_debootstrap_opts o = {.suite = "bookworm", .mirror = mirrors[i]};
                char **argv = NULL;
                sp_error *err = NULL;
                tt_assert_error(wk_debootstrap_argv(&o, "/x", &argv, &err), err, SP_E_INVALID, "field 'mirror'");
        }
        static const char *const dests[] = {"relative", "/", "//", "/a\nb"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(dests); i++) {
                wk_debootstrap_opts o = {.suite = "bookworm"};
                char **argv = NULL;
                sp_error *err = NULL;
                tt_assert_error(wk_debootstrap_argv(&o, dests[i], &argv, &err), err, SP_E_INVALID, "destination");
        }
        static const char *const packages[] = {"",   "Python3", "a",     "git,",      ",git", "git,,curl", "git curl",
                                               "-x", "git;id",  "$(id)", "git\ncurl", "a_b",  "git,-x"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(packages); i++) {
                wk_debootstrap_opts o = {.suite = "bookworm", .packages = packages[i]};
                char **argv = NULL;
                sp_error *err = NULL;
                tt_assert_error(wk_debootstrap_argv(&o, "/x", &argv, &err), err, SP_E_INVALID, "field 'packages'");
        }
        static const char *const users[] = {
                "", "root", "User", "1user", "-u", "u;id", "u$(id)", "u ser", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(users); i++) {
                wk_debootstrap_opts o = {.suite = "bookworm", .user = users[i]};
                char **argv = NULL;
                sp_error *err = NULL;
                tt_assert_error(wk_debootstrap_argv(&o, "/x", &argv, &err), err, SP_E_INVALID, "field 'user'");
        }
        wk_debootstrap_opts o = {.suite = "bookworm", .program = "debootstrap"};
        char **argv = NULL;
        sp_error *err = NULL;
        tt_assert_error(wk_debootstrap_argv(&o, "/x", &argv, &err), err, SP_E_INVALID, "absolute path");
        o = (wk_debootstrap_opts){0};
        tt_assert_error(wk_debootstrap_argv(&o, "/x", &argv, &err), err, SP_E_INVALID, "field 'suite'");
}
END_TEST

START_TEST(runs_and_reports_progress)
{
        script("echo \"I: args $# [$1] [$2] [$3] [$4]\"\n"
               "echo \"I: secret=${SPACE_TEST_SECRET:-unset} lang=$LC_ALL\"\n"
               "echo 'W: to stderr' >&2\n"
               "mkdir -p \"$3/etc\" && echo 12.5 > \"$3/etc/debian_version\"\n"
               "printf 'I: Base system installed successfully.'\n");
        setenv("SPACE_TEST_SECRET", "leaked", 1);
        sp_buf lines = SP_BUF_INIT;
        wk_debootstrap_opts o = {.suite = "bookworm",
                                 .mirror = "http://deb.example.org/debian",
                                 .program = prog,
                                 .log_path = logp,
                                 .timeout_sec = 30,
                                 .progress = collect,
                                 .userdata = &lines};
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_debootstrap(&o, dest, &meta, &err), &err);
        /* The lines reported name no host path: the destination reads <rootfs>. */
        ck_assert_str_eq(lines.data, "I: args 4 [--variant=minbase] [bookworm] [<rootfs>] "
                                     "[http://deb.example.org/debian]|"
                                     "I: secret=unset lang=C|W: to stderr|I: Base system installed successfully.|");
        char p[700];
        snprintf(p, sizeof(p), "%s/etc/debian_version", dest);
        tt_assert_content(p, "12.5\n");
        char *log = tt_read(logp);
        ck_assert_ptr_nonnull(strstr(log, "W: to stderr\n"));
        ck_assert_ptr_nonnull(strstr(log, "I: Base system installed successfully."));
        free(log);
        ck_assert_int_eq(meta->source, WK_TEMPLATE_SOURCE_DEBOOTSTRAP);
        ck_assert_str_eq(meta->cmd[0], "/bin/bash");
        wk_template_meta_free(meta);
        sp_buf_free(&lines);
}
END_TEST

/* Packages and the user are installed and made by the new system's own tools under chroot: a system
 * without them fails the build, naming the step. (tests/e2b/run debian builds a real one.) */
START_TEST(packages_and_a_user_need_the_systems_own_tools)
{
        script("mkdir -p \"$3/etc\" \"$3/proc\" && echo 12.5 > \"$3/etc/debian_version\"\n");
        wk_debootstrap_opts o = {.suite = "bookworm", .program = prog, .user = "user"};
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        tt_assert_error(wk_template_import_debootstrap(&o, dest, &meta, &err), err, SP_E_UNAVAILABLE,
                        "make the user user: failed (exit status 127)");
        ck_assert_ptr_null(meta);
        char cmd[1200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s/etc' '%s/proc'", dest, dest);
        ck_assert_int_eq(system(cmd), 0);
        o.packages = "git";
        tt_assert_error(wk_template_import_debootstrap(&o, dest, &meta, &err), err, SP_E_UNAVAILABLE,
                        "install the packages: failed (exit status 127)");
}
END_TEST

START_TEST(cuts_long_lines)
{
        script("i=0; while [ $i -lt 1000 ]; do printf 'aaaaaaaaaa'; i=$((i+1)); done; echo; echo next\n");
        sp_buf lines = SP_BUF_INIT;
        wk_debootstrap_opts o = {.suite = "bookworm", .program = prog, .progress = collect, .userdata = &lines};
        sp_error *err = NULL;
        sp_test_ok(wk_template_import_debootstrap(&o, dest, NULL, &err), &err);
        ck_assert_uint_eq(lines.len, WK_DEBOOTSTRAP_LINE_MAX + 1 + 5);
        ck_assert_str_eq(lines.data + WK_DEBOOTSTRAP_LINE_MAX, "|next|");
        sp_buf_free(&lines);
}
END_TEST

START_TEST(reports_failure_with_the_last_line)
{
        script("echo 'I: Retrieving InRelease'\necho 'E: Failed getting release file'\nexit 1\n");
        wk_debootstrap_opts o = {.suite = "bookworm", .program = prog};
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        tt_assert_error(wk_template_import_debootstrap(&o, dest, &meta, &err), err, SP_E_UNAVAILABLE,
                        "exit status 1): E: Failed getting release file");
        ck_assert_ptr_null(meta);

        o.program = "/nonexistent/debootstrap";
        tt_assert_error(wk_template_import_debootstrap(&o, dest, &meta, &err), err, SP_E_UNAVAILABLE, "cannot run");

        tt_write(logp, "", 0644);
        o.program = prog;
        o.log_path = logp;
        char p[700];
        snprintf(p, sizeof(p), "%s/busy", dest);
        tt_write(p, "", 0644);
        tt_assert_error(wk_template_import_debootstrap(&o, dest, &meta, &err), err, SP_E_CONFLICT, "not empty");
}
END_TEST

/* Waits (bounded) until the process pid has exited. */
static bool exits_within(pid_t pid, int ms)
{
        int fd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (fd < 0)
                return errno == ESRCH;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, ms);
        close(fd);
        return r == 1;
}

START_TEST(times_out_and_kills_the_group)
{
        char pidfile[600], body[1024];
        snprintf(pidfile, sizeof(pidfile), "%s/child.pid", dir);
        snprintf(body, sizeof(body), "echo started\nsleep 1000 &\necho $! > %s\nwait\n", pidfile);
        script(body);
        sp_buf lines = SP_BUF_INIT;
        wk_debootstrap_opts o = {
                .suite = "bookworm", .program = prog, .timeout_sec = 1, .progress = collect, .userdata = &lines};
        sp_error *err = NULL;
        tt_assert_error(wk_template_import_debootstrap(&o, dest, NULL, &err), err, SP_E_TIMEOUT, "1 seconds");
        ck_assert_str_eq(lines.data, "started|");
        char *pid = tt_read(pidfile);
        ck_assert_ptr_nonnull(pid);
        ck_assert_msg(exits_within((pid_t)atoi(pid), 5000), "the background child %s survived", pid);
        free(pid);
        sp_buf_free(&lines);

        /* closing its output does not make a hung program look finished */
        script("exec >/dev/null 2>&1\nsleep 1000\n");
        tt_assert_error(wk_template_import_debootstrap(&o, dest, NULL, &err), err, SP_E_TIMEOUT, "did not finish");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_debootstrap");
        TCase *tc = tcase_create("debootstrap");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, builds_argv);
        tcase_add_test(tc, refuses_bad_arguments);
        tcase_add_test(tc, runs_and_reports_progress);
        tcase_add_test(tc, cuts_long_lines);
        tcase_add_test(tc, packages_and_a_user_need_the_systems_own_tools);
        tcase_add_test(tc, reports_failure_with_the_last_line);
        tcase_add_test(tc, times_out_and_kills_the_group);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
