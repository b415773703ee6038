/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host-leak snapshots of the test harness: deliberately leaked mounts,
 * network namespaces and processes show up in the comparison, named in a
 * readable line, and vanish from it once cleaned up.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "harness.h"
#include "launcher.h"
#include "leak.h"
#include "netns.h"
#include "proc.h"

static char *g_dir;
static sp_test_snapshot g_before_netns;
static sp_test_netns g_ns = {.fd = -1};

/* The fixture leaks a network namespace on purpose, between a snapshot it
 * keeps and the tests' own; its teardown removes it. */
static void fixture_setup(void)
{
        sp_error *err = NULL;
        g_dir = sp_test_tmpdir("leak");
        sp_test_ok(sp_test_snapshot_take(&g_before_netns, &err), &err);
        sp_test_ok(sp_test_netns_create(&g_ns, &err), &err);
}

static void fixture_teardown(void)
{
        sp_test_netns_destroy(&g_ns);
        sp_test_snapshot_free(&g_before_netns);
        sp_test_tmpdir_remove(g_dir);
        free(g_dir);
        g_dir = NULL;
}

static void take(sp_test_snapshot *s)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_snapshot_take(s, &err), &err);
}

START_TEST(test_leaked_mount_reported)
{
        /* Our own mount namespace, so the mount dies with this test even if it fails. */
        ck_assert_int_eq(unshare(CLONE_NEWNS), 0);
        ck_assert_int_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);

        char mnt[PATH_MAX];
        snprintf(mnt, sizeof(mnt), "%s/mnt-%d", g_dir, (int)getpid());
        ck_assert_int_eq(mkdir(mnt, 0755), 0);
        sp_test_snapshot before, during, after;
        take(&before);
        ck_assert_uint_gt(before.n_mounts, 0);
        ck_assert_int_eq(mount("sptest-leak", mnt, "tmpfs", 0, "size=1m"), 0);
        take(&during);
        char *report = sp_test_snapshot_diff(&before, &during, g_dir);
        ck_assert_ptr_nonnull(report);
        char want[PATH_MAX + 64];
        snprintf(want, sizeof(want), "+ mount %s tmpfs sptest-leak\n", mnt);
        ck_assert_str_eq(report, want);
        free(report);

        /* Seen the other way round, it went away. */
        report = sp_test_snapshot_diff(&during, &before, g_dir);
        ck_assert_ptr_nonnull(report);
        ck_assert_int_eq(report[0], '-');
        free(report);

        ck_assert_int_eq(umount2(mnt, 0), 0);
        take(&after);
        ck_assert_ptr_null(sp_test_snapshot_diff(&before, &after, g_dir));
        /* A filter nothing matches reports nothing. */
        ck_assert_ptr_null(sp_test_snapshot_diff(&before, &during, "no such thing"));
        sp_test_snapshot_free(&before);
        sp_test_snapshot_free(&during);
        sp_test_snapshot_free(&after);
        rmdir(mnt);
}
END_TEST

START_TEST(test_leaked_netns_reported)
{
        sp_test_snapshot now;
        take(&now);
        char *report = sp_test_snapshot_diff(&g_before_netns, &now, g_ns.name);
        char want[512];
        /* Both the name and its bind mount. */
        snprintf(want, sizeof(want), "+ mount %s nsfs nsfs\n+ netns %s\n", g_ns.path, g_ns.name);
        ck_assert_ptr_nonnull(report);
        ck_assert_str_eq(report, want);
        free(report);
        sp_test_snapshot_free(&now);
}
END_TEST

START_TEST(test_leaked_link_reported)
{
        sp_test_snapshot before, during, after;
        take(&before);
        char name[16], cmd[128];
        snprintf(name, sizeof(name), "spleak%d", (int)getpid() % 100000);
        snprintf(cmd, sizeof(cmd), "ip link add %s type veth peer name %sp", name, name);
        ck_assert_int_eq(system(cmd), 0);
        take(&during);
        snprintf(cmd, sizeof(cmd), "ip link del %s", name);
        ck_assert_int_eq(system(cmd), 0);
        take(&after);
        char *report = sp_test_snapshot_diff(&before, &during, name);
        char want[96];
        snprintf(want, sizeof(want), "+ link %s\n+ link %sp\n", name, name);
        ck_assert_ptr_nonnull(report);
        ck_assert_str_eq(report, want);
        free(report);
        ck_assert_ptr_null(sp_test_snapshot_diff(&before, &after, name));
        sp_test_snapshot_free(&before);
        sp_test_snapshot_free(&during);
        sp_test_snapshot_free(&after);
}
END_TEST

START_TEST(test_leaked_processes_reported)
{
        sp_test_snapshot before, during, after;
        take(&before);

        /* A launched child, and an orphan that stays in our process group
         * after its parent exits (the way a daemon that forks leaks). */
        sp_test_proc p;
        sp_error *err = NULL;
        const char *sleeper[] = {"sleep", "600", NULL};
        char sleeper_log[PATH_MAX];
        snprintf(sleeper_log, sizeof(sleeper_log), "%s/sleeper-%d.log", g_dir, (int)getpid());
        sp_test_proc_opts po = {.log_path = sleeper_log};
        sp_test_ok(sp_test_proc_start(&p, "sleeper", sleeper, &po, &err), &err);
        const char *orphan_argv[] = {"sh", "-c", "sleep 601 </dev/null >/dev/null 2>&1 & echo $!", NULL};
        char log[PATH_MAX];
        snprintf(log, sizeof(log), "%s/orphan-%d.log", g_dir, (int)getpid());
        sp_test_spawn_opts o = {.log_path = log};
        pid_t sh;
        sp_test_ok(sp_test_spawn(orphan_argv, &o, &sh, &err), &err);
        int st;
        sp_test_ok(sp_test_child_wait(sh, 10000, &st, &err), &err);
        _cleanup_free_ char *orphan_s = sp_test_file_tail(log, 1);
        pid_t orphan = (pid_t)atoi(orphan_s);
        ck_assert_int_gt(orphan, 0);

        take(&during);
        char *report = sp_test_snapshot_diff(&before, &during, "sleep");
        ck_assert_ptr_nonnull(report);
        char want[128];
        snprintf(want, sizeof(want), "+ process %d sleep\n", (int)p.pid);
        ck_assert_msg(strstr(report, want), "launched child missing from:\n%s", report);
        free(report);
        /* The orphan may not have exec'd sleep yet: look for it by pid. */
        char pid_s[32];
        snprintf(pid_s, sizeof(pid_s), "%d ", (int)orphan);
        report = sp_test_snapshot_diff(&before, &during, pid_s);
        snprintf(want, sizeof(want), "+ process %d ", (int)orphan);
        ck_assert_msg(report && strstr(report, want), "orphan %d missing from the snapshot", (int)orphan);
        free(report);

        sp_test_proc_free(&p);
        ck_assert_int_eq(kill(orphan, SIGKILL), 0);
        ck_assert_int_eq(sp_test_pid_wait_gone(orphan, 10000), 0);
        take(&after);
        report = sp_test_snapshot_diff(&before, &after, "sleep");
        ck_assert_msg(report == NULL, "still there:\n%s", report);
        sp_test_snapshot_free(&before);
        sp_test_snapshot_free(&during);
        sp_test_snapshot_free(&after);
}
END_TEST

START_TEST(test_free_of_empty_snapshot)
{
        sp_test_snapshot s = {0};
        sp_test_snapshot_free(&s);
        ck_assert_ptr_null(sp_test_snapshot_diff(&s, &s, NULL));
}
END_TEST

static Suite *leak_suite(void)
{
        Suite *s = suite_create("harness_leak");
        TCase *tc = tcase_create("snapshots");
        tcase_add_unchecked_fixture(tc, fixture_setup, fixture_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_leaked_mount_reported);
        tcase_add_test(tc, test_leaked_netns_reported);
        tcase_add_test(tc, test_leaked_link_reported);
        tcase_add_test(tc, test_leaked_processes_reported);
        tcase_add_test(tc, test_free_of_empty_snapshot);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("mounting and namespaces need root");
        return sp_test_main(leak_suite());
}
