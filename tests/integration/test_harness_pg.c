/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The throw-away PostgreSQL of the test harness: it starts, answers queries,
 * keeps its data across a restart and a crash, and its teardown leaves no
 * process and no directory behind — also when a forked test restarted it.
 */
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "space/cleanup.h"

#include "harness.h"
#include "pg.h"
#include "proc.h"

/* What a fixture's server was, recorded just before its teardown, so that a
 * later TCase can check that nothing of it is left. */
struct gone {
        char dir[PATH_MAX];
        char datadir[PATH_MAX];
        pid_t pids[64];
        size_t n_pids;
        bool recorded;
};

static sp_test_pg g_server, g_restart, g_kill;
static struct gone g_server_gone, g_restart_gone, g_kill_gone;

static void record(const sp_test_pg *pg, struct gone *g)
{
        memset(g, 0, sizeof(*g));
        if (!pg->dir)
                return;
        snprintf(g->dir, sizeof(g->dir), "%s", pg->dir);
        snprintf(g->datadir, sizeof(g->datadir), "%s", pg->datadir);
        g->n_pids = sp_test_procs_with_cwd(pg->datadir, g->pids, SP_ARRAY_SIZE(g->pids));
        if (g->n_pids > SP_ARRAY_SIZE(g->pids))
                g->n_pids = SP_ARRAY_SIZE(g->pids);
        g->recorded = true;
}

static void start_into(sp_test_pg *pg)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_pg_start(pg, &err), &err);
}

static void server_setup(void)
{
        start_into(&g_server);
}
static void server_teardown(void)
{
        record(&g_server, &g_server_gone);
        sp_test_pg_stop(&g_server);
}
static void restart_setup(void)
{
        start_into(&g_restart);
}
static void restart_teardown(void)
{
        record(&g_restart, &g_restart_gone);
        sp_test_pg_stop(&g_restart);
}
static void kill_setup(void)
{
        start_into(&g_kill);
}
static void kill_teardown(void)
{
        record(&g_kill, &g_kill_gone);
        sp_test_pg_stop(&g_kill);
}

static PGconn *connect_to(const char *conninfo)
{
        PGconn *c = PQconnectdb(conninfo);
        ck_assert_msg(PQstatus(c) == CONNECTION_OK, "connect %s: %s", conninfo, PQerrorMessage(c));
        return c;
}

static void exec_ok(PGconn *c, const char *sql)
{
        PGresult *r = PQexec(c, sql);
        ExecStatusType st = PQresultStatus(r);
        PQclear(r);
        ck_assert_msg(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
}

/* The single value of a one-row, one-column query, malloc'd. */
static char *query_value(PGconn *c, const char *sql)
{
        PGresult *r = PQexec(c, sql);
        ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
        ck_assert_int_eq(PQntuples(r), 1);
        char *v = PQgetisnull(r, 0, 0) ? NULL : strdup(PQgetvalue(r, 0, 0));
        PQclear(r);
        return v;
}

START_TEST(test_query_through_libpq)
{
        PGconn *c = connect_to(g_server.conninfo);
        exec_ok(c, "CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)");
        exec_ok(c, "INSERT INTO items VALUES (1, 'one'), (2, 'two')");
        char *v = query_value(c, "SELECT string_agg(name, ',' ORDER BY id) FROM items");
        ck_assert_str_eq(v, "one,two");
        free(v);
        v = query_value(c, "SHOW fsync");
        ck_assert_str_eq(v, "off");
        free(v);
        PQfinish(c);
}
END_TEST

START_TEST(test_fresh_database_is_empty_and_separate)
{
        sp_error *err = NULL;
        char *other = NULL;
        sp_test_ok(sp_test_pg_create_database(&g_server, &other, &err), &err);
        ck_assert_str_ne(other, g_server.conninfo);
        PGconn *a = connect_to(g_server.conninfo);
        PGconn *b = connect_to(other);
        exec_ok(a, "CREATE TABLE only_in_a (x int)");
        char *v = query_value(b, "SELECT to_regclass('only_in_a')::text");
        ck_assert_ptr_null(v);
        v = query_value(b, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'");
        ck_assert_str_eq(v, "0");
        free(v);
        PQfinish(a);
        PQfinish(b);
        free(other);
}
END_TEST

START_TEST(test_server_identity)
{
        /* The postmaster leads a process group of its own, runs as postgres
         * when we are root, and listens on the recorded port. */
        sp_test_pidstat st;
        ck_assert_int_eq(sp_test_pidstat_read(g_server.pid, &st), 0);
        ck_assert_int_eq(st.pgrp, g_server.pid);
        ck_assert_int_gt(g_server.port, 0);
        ck_assert_ptr_nonnull(strstr(g_server.conninfo, "127.0.0.1"));
        if (sp_test_is_root()) {
                struct passwd *pw = getpwnam("postgres");
                ck_assert_ptr_nonnull(pw);
                char path[64];
                snprintf(path, sizeof(path), "/proc/%d", (int)g_server.pid);
                struct stat sb;
                ck_assert_int_eq(stat(path, &sb), 0);
                ck_assert_uint_eq(sb.st_uid, pw->pw_uid);
        }
        PGconn *c = connect_to(g_server.conninfo);
        char *v = query_value(c, "SELECT inet_server_port()::text");
        char want[16];
        snprintf(want, sizeof(want), "%d", g_server.port);
        ck_assert_str_eq(v, want);
        free(v);
        PQfinish(c);
}
END_TEST

START_TEST(test_missing_binaries_fail_cleanly)
{
        setenv("SPACE_TEST_PG_BINDIR", "/nonexistent/postgresql/bin", 1);
        sp_test_pg pg;
        sp_error *err = NULL;
        ck_assert_int_eq(sp_test_pg_start(&pg, &err), -SP_E_UNSUPPORTED);
        ck_assert_ptr_nonnull(err);
        ck_assert_ptr_null(pg.dir);
        ck_assert_int_eq(pg.pid, 0);
        sp_error_free(err);
        unsetenv("SPACE_TEST_PG_BINDIR");
}
END_TEST

/* ran: the server was running at teardown (a server restarted by a forked
 * test may already have died with it, through its parent-death signal). */
static void assert_gone(const struct gone *g, bool ran)
{
        ck_assert_msg(g->recorded, "the fixture did not run");
        if (ran)
                ck_assert_uint_gt(g->n_pids, 0);
        for (size_t i = 0; i < g->n_pids; i++)
                ck_assert_msg(!sp_test_pid_alive(g->pids[i]), "server process %d survived", (int)g->pids[i]);
        ck_assert_uint_eq(sp_test_procs_with_cwd(g->datadir, NULL, 0), 0);
        struct stat st;
        ck_assert_msg(stat(g->dir, &st) < 0 && errno == ENOENT, "%s still exists", g->dir);
}

START_TEST(test_teardown_leaves_nothing)
{
        assert_gone(&g_server_gone, true);
}
END_TEST

START_TEST(test_restart_keeps_data)
{
        PGconn *c = connect_to(g_restart.conninfo);
        exec_ok(c, "CREATE TABLE kept (v text)");
        exec_ok(c, "INSERT INTO kept VALUES ('survives a restart')");
        PQfinish(c);

        pid_t before = g_restart.pid;
        int port = g_restart.port;
        sp_error *err = NULL;
        sp_test_ok(sp_test_pg_restart(&g_restart, &err), &err);
        ck_assert_int_ne(g_restart.pid, before);
        ck_assert_int_eq(g_restart.port, port);
        ck_assert(!sp_test_pid_alive(before));

        c = connect_to(g_restart.conninfo);
        char *v = query_value(c, "SELECT v FROM kept");
        ck_assert_str_eq(v, "survives a restart");
        free(v);
        PQfinish(c);
        /* This test's process owns the new server now; the TCase's
         * teardown must still stop it (checked below). */
}
END_TEST

START_TEST(test_kill_then_restart_recovers)
{
        PGconn *c = connect_to(g_kill.conninfo);
        exec_ok(c, "CREATE TABLE committed (v int)");
        exec_ok(c, "INSERT INTO committed SELECT generate_series(1, 1000)");
        /* A connection open across the crash, like a daemon's. */
        pid_t procs[64];
        size_t n = sp_test_procs_with_cwd(g_kill.datadir, procs, SP_ARRAY_SIZE(procs));
        ck_assert_uint_ge(n, 2); /* postmaster, our backend and its helpers */

        sp_error *err = NULL;
        sp_test_ok(sp_test_pg_kill(&g_kill, &err), &err);
        ck_assert_int_eq(g_kill.pid, 0);
        for (size_t i = 0; i < n && i < SP_ARRAY_SIZE(procs); i++)
                ck_assert_msg(!sp_test_pid_alive(procs[i]), "process %d survived the kill", (int)procs[i]);
        ck_assert_int_ne(PQping(g_kill.admin_conninfo), PQPING_OK);
        PGresult *r = PQexec(c, "SELECT 1");
        ck_assert_int_ne(PQresultStatus(r), PGRES_TUPLES_OK);
        PQclear(r);
        PQfinish(c);

        sp_test_ok(sp_test_pg_restart(&g_kill, &err), &err);
        c = connect_to(g_kill.conninfo);
        char *v = query_value(c, "SELECT count(*) FROM committed");
        ck_assert_str_eq(v, "1000");
        free(v);
        PQfinish(c);
}
END_TEST

START_TEST(test_teardown_stops_servers_tests_restarted)
{
        assert_gone(&g_restart_gone, false);
        assert_gone(&g_kill_gone, false);
}
END_TEST

static Suite *pg_suite(void)
{
        Suite *s = suite_create("harness_pg");
        TCase *tc = tcase_create("server");
        tcase_add_unchecked_fixture(tc, server_setup, server_teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_query_through_libpq);
        tcase_add_test(tc, test_fresh_database_is_empty_and_separate);
        tcase_add_test(tc, test_server_identity);
        tcase_add_test(tc, test_missing_binaries_fail_cleanly);
        suite_add_tcase(s, tc);

        tc = tcase_create("after_teardown");
        tcase_add_test(tc, test_teardown_leaves_nothing);
        suite_add_tcase(s, tc);

        /* Tests that restart or kill the server get a TCase, and a server, each. */
        tc = tcase_create("restart");
        tcase_add_unchecked_fixture(tc, restart_setup, restart_teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_restart_keeps_data);
        suite_add_tcase(s, tc);

        tc = tcase_create("kill");
        tcase_add_unchecked_fixture(tc, kill_setup, kill_teardown);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_kill_then_restart_recovers);
        suite_add_tcase(s, tc);

        tc = tcase_create("after_restart_teardown");
        tcase_add_test(tc, test_teardown_stops_servers_tests_restarted);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_pg_require();
        return sp_test_main(pg_suite());
}
