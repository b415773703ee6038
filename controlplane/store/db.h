/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control plane's PostgreSQL store: one libpq connection, reconnected on
 * demand, with parameterised queries whose failures map to the project's error
 * codes, and versioned migrations applied at start under an advisory lock so
 * that replicas starting together apply each migration exactly once.
 *
 * Error mapping: a lost or refused connection → SP_E_UNAVAILABLE (callers
 * answer 503 fast and retry later; the next call reconnects); unique violation
 * → SP_E_CONFLICT; foreign-key violation → SP_E_NOT_FOUND; invalid input and
 * check violations → SP_E_INVALID; anything else → SP_E_INTERNAL. Messages
 * never include parameter values.
 *
 * Not thread-safe: one cp_db per thread.
 */
#ifndef CP_STORE_DB_H
#define CP_STORE_DB_H

#include <libpq-fe.h>
#include <stdint.h>
#include <stdbool.h>

#include "space/error.h"

typedef struct cp_migration {
        int version;
        const char *name;
        const char *sql;
} cp_migration;

/* The migrations compiled in from store/migrations/NNNN_name.sql, in order, ended by {0}. */
extern const cp_migration cp_migrations[];

typedef struct cp_db cp_db;

/* Connects to conninfo (a libpq connection string or URI) with a bounded connect timeout. */
int cp_db_open(const char *conninfo, cp_db **ret, sp_error **err);

/* Makes the database conninfo names when the server says it does not exist,
 * through the server's maintenance database ("postgres", same host and user;
 * the user needs CREATEDB). Another replica making it at the same time is
 * not an error. Nothing is done when the database is there. */
int cp_db_create_missing(const char *conninfo, sp_error **err);
void cp_db_close(cp_db *db);
static inline void cp_db_closep(cp_db **db)
{
        if (*db)
                cp_db_close(*db);
}

/* Runs sql with text parameters (NULL = SQL NULL). *ret (may be NULL) receives
 * the result of a successful command; the caller PQclear()s it. Reconnects
 * once if the connection had been lost before the call (also when the server
 * closed it while it sat idle, e.g. across a database restart). */
int cp_db_exec(cp_db *db, const char *sql, int nparams, const char *const *params, PGresult **ret, sp_error **err);

/* The live connection, reconnecting first if needed (for LISTEN and
 * PQsocket()); NULL with SP_E_UNAVAILABLE. Borrowed. */
PGconn *cp_db_conn(cp_db *db, sp_error **err);
/* The connection string it was opened with (borrowed): to open another. */
const char *cp_db_conninfo(const cp_db *db);
/* When the connection was last made (CLOCK_MONOTONIC µs; 0 before the
 * first): what the store saw before then may be stale (an outage). */
int64_t cp_db_connected_since(const cp_db *db);
/* Counts successful (re)connections: a LISTEN must be issued again when it changes. */
unsigned cp_db_generation(const cp_db *db);
/* True while the connection is up (as far as libpq knows). */
bool cp_db_connected(const cp_db *db);

/* BEGIN / COMMIT / ROLLBACK. If the connection is lost inside a transaction,
 * every call fails with SP_E_UNAVAILABLE until cp_db_rollback() (never a
 * silent reconnection that would run the rest outside the transaction). */
int cp_db_begin(cp_db *db, sp_error **err);
int cp_db_commit(cp_db *db, sp_error **err);
void cp_db_rollback(cp_db *db);

/* Statements run together in one transaction (cp_db_txn). */
typedef struct cp_db_stmt {
        const char *sql;
        int nparams;
        const char *const *params;
        /* Only when the statement before this one changed or returned a row;
         * otherwise the transaction stops there and commits what it did. */
        bool if_previous;
} cp_db_stmt;

/* BEGIN, the statements, COMMIT; on any failure ROLLBACK (nothing of them
 * stays). Returns how many statements ran (fewer than n when an if_previous
 * one was skipped), or <0. */
int cp_db_txn(cp_db *db, const cp_db_stmt *stmts, size_t n, sp_error **err);

/* Applies every migration the database has not recorded, in order, each in
 * its own transaction, holding an advisory lock for the whole run: those
 * newer than its version, and any older one it lacks (a migration numbered
 * before another but merged after it, which a database may have met in that
 * order). Sets *ret_applied (may be NULL) to how many this call applied. */
int cp_db_migrate(cp_db *db, int *ret_applied, sp_error **err);
/* The newest applied migration (0 for an empty database). */
int cp_db_version(cp_db *db, int *ret, sp_error **err);

static inline void cp_pqclearp(PGresult **r)
{
        if (*r)
                PQclear(*r);
        *r = NULL;
}
#define _cleanup_pgresult_ __attribute__((cleanup(cp_pqclearp)))

#endif
