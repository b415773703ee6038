/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: a throw-away PostgreSQL server.
 *
 * sp_test_pg_start() runs initdb in a fresh temporary directory, starts
 * postgres on a free port of 127.0.0.1 (and a Unix socket in that directory)
 * with fsync off and small buffers, waits until it accepts connections and
 * creates a fresh database. Run as root, initdb and postgres run as the
 * `postgres` system user. The server gets SIGQUIT (immediate shutdown) when
 * the thread that started it dies, so a crashed test leaves no server behind;
 * sp_test_pg_stop() shuts it down and removes the directory.
 *
 * Binaries: $SPACE_TEST_PG_BINDIR, else `pg_config --bindir`, else the newest
 * /usr/lib/postgresql/<version>/bin, else PATH.
 *
 * Use it from a Check *unchecked* fixture: those run in the runner process,
 * so the teardown runs even when a forked test crashes, and one server serves
 * every test of the TCase:
 *
 *   static sp_test_pg pg;
 *   static void pg_setup(void) { sp_error *e = NULL; sp_test_ok(sp_test_pg_start(&pg, &e), &e); }
 *   static void pg_teardown(void) { sp_test_pg_stop(&pg); }
 *   ...
 *   tcase_add_unchecked_fixture(tc, pg_setup, pg_teardown);
 *   // in a test: PGconn *c = PQconnectdb(pg.conninfo);
 *   int main(void) { sp_test_pg_require(); return sp_test_main(suite()); }
 *
 * A forked test that calls sp_test_pg_restart() or sp_test_pg_kill() changes
 * the server only for itself: the restarted server is that test's child and
 * dies with it. Give such tests a TCase of their own; the fixture's
 * sp_test_pg_stop() still finds and stops whatever server runs on the data
 * directory and removes it.
 *
 * Not thread-safe; one sp_test_pg per server.
 */
#ifndef SPACE_TEST_PG_H
#define SPACE_TEST_PG_H

#include <stdbool.h>
#include <sys/types.h>

#include "space/error.h"

typedef struct sp_test_pg {
        char *dir; /* temporary directory holding everything (owned) */
        char *datadir; /* dir/data, canonical */
        char *bindir; /* where initdb and postgres live */
        char *log_path; /* the server's stdout and stderr */
        int port; /* TCP port on 127.0.0.1 */
        pid_t pid; /* the postmaster, 0 when not running */
        char *conninfo; /* libpq connection string of the fresh database */
        char *admin_conninfo; /* the same server, database "postgres" */
        bool as_postgres; /* root: the server runs as the postgres user */
        uid_t uid;
        gid_t gid;
        unsigned next_db;
} sp_test_pg;

/* Skips the test executable (exit 77, with the reason) unless PostgreSQL's
 * server binaries are installed and, when root, the `postgres` user exists.
 * Call from main() before sp_test_main(). */
void sp_test_pg_require(void);

/* Starts a fresh server and database into *pg (which it zeroes first).
 * Bounded: initdb and the start each have a timeout. On failure nothing is
 * left behind and the error carries the tail of the server's log;
 * SP_E_UNSUPPORTED means PostgreSQL is not installed. */
int sp_test_pg_start(sp_test_pg *pg, sp_error **err);

/* Fast shutdown (SIGINT, then SIGKILL after a bound) of whatever server runs
 * on the data directory, then removes the directory and frees *pg. Safe on a
 * zeroed or already stopped struct. Reports problems on stderr. */
void sp_test_pg_stop(sp_test_pg *pg);

/* Stops the server (fast shutdown) and starts it again on the same data
 * directory and port; conninfo stays valid. After sp_test_pg_kill() it starts
 * the server, which then runs crash recovery. */
int sp_test_pg_restart(sp_test_pg *pg, sp_error **err);

/* Kills the server the way a crash would: SIGKILL to the postmaster and every
 * backend (found by their working directory, the data directory) at once,
 * and waits until all are gone. Committed data survives
 * (the page cache does); sp_test_pg_restart() brings it back. */
int sp_test_pg_kill(sp_test_pg *pg, sp_error **err);

/* Creates another empty database and returns its connection string
 * (malloc'd, the caller frees). */
int sp_test_pg_create_database(sp_test_pg *pg, char **ret_conninfo, sp_error **err);

#endif
