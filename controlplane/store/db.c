/* SPDX-License-Identifier: Apache-2.0 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/log.h"
#include "space/time.h"
#include "store/db.h"

/* An arbitrary, fixed key for pg_advisory_lock: "space migrate". */
#define MIGRATE_LOCK_KEY "736275617465"
#define CONNECT_TIMEOUT_S "5"

/* Statements prepared on the connection, by their text: PostgreSQL parses
 * and plans a statement sent with PQexecParams on every call, which was
 * most of its CPU on an exec (docs/performance.md); a prepared one is parsed
 * once per connection and its plan kept. Bounded: past the limit a new text
 * runs unprepared (there is no eviction, which would cost a round trip). */
#define STMT_SLOTS 1024 /* a power of two, twice the statements the control plane has */
#define STMT_MAX (STMT_SLOTS / 2)

typedef struct stmt_slot {
        char *sql; /* NULL: empty */
        uint64_t hash;
        unsigned id; /* prepared as "s<id>" */
} stmt_slot;

struct cp_db {
        char *conninfo;
        PGconn *conn;
        stmt_slot *stmts; /* STMT_SLOTS, for the current connection */
        unsigned nstmts;
        bool in_txn; /* between BEGIN and COMMIT/ROLLBACK: a lost connection must not be silently replaced */
        bool txn_lost; /* the connection died inside the transaction: fail until ROLLBACK */
        unsigned generation; /* counts (re)connections */
        int64_t connected_at; /* CLOCK_MONOTONIC µs of the last (re)connection */
};

/* Server notices ("relation already exists, skipping") are not errors. */
static void ignore_notice(void *arg, const char *message)
{
        (void)arg;
        (void)message;
}

/* True while the connection is usable. libpq learns that the server closed
 * an idle connection (a restart, a crash: a FATAL message, then the close)
 * only from the next statement, which then fails; a look at the socket, which
 * costs no round trip, notices it first. */
static bool conn_alive(PGconn *conn)
{
        if (!conn || PQstatus(conn) != CONNECTION_OK)
                return false;
        struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN | POLLRDHUP};
        return poll(&p, 1, 0) == 0 || !(p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Prepared statements live and die with their connection. */
static void stmts_forget(cp_db *db)
{
        if (db->stmts)
                for (size_t i = 0; i < STMT_SLOTS; i++) {
                        free(db->stmts[i].sql);
                        db->stmts[i].sql = NULL;
                }
        db->nstmts = 0;
}

static uint64_t sql_hash(const char *s)
{
        uint64_t h = 1469598103934665603ull; /* FNV-1a */
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ull;
        return h;
}

/* The slot of sql's text: its own, or the empty one where it would go. */
static stmt_slot *stmt_find(cp_db *db, const char *sql, uint64_t h)
{
        for (size_t i = h & (STMT_SLOTS - 1);; i = (i + 1) & (STMT_SLOTS - 1)) {
                stmt_slot *s = &db->stmts[i];
                if (!s->sql || (s->hash == h && strcmp(s->sql, sql) == 0))
                        return s;
        }
}

/* The name sql is prepared under on this connection, preparing it the
 * first time (one more round trip, once); NULL to run it unprepared, when
 * there is no room or it cannot be prepared (the unprepared run then
 * reports why). */
static const char *stmt_prepared(cp_db *db, const char *sql, int nparams, char name[static 16])
{
        if (!db->stmts && !(db->stmts = calloc(STMT_SLOTS, sizeof(*db->stmts))))
                return NULL;
        uint64_t h = sql_hash(sql);
        stmt_slot *s = stmt_find(db, sql, h);
        if (s->sql) {
                snprintf(name, 16, "s%u", s->id);
                return name;
        }
        if (db->nstmts >= STMT_MAX)
                return NULL;
        unsigned id = db->nstmts;
        snprintf(name, 16, "s%u", id);
        PGresult *res = PQprepare(db->conn, name, sql, nparams, NULL);
        bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (!ok || !(s->sql = strdup(sql)))
                return NULL;
        s->hash = h;
        s->id = id;
        db->nstmts++;
        return name;
}

static int connect_db(cp_db *db, sp_error **err)
{
        if (conn_alive(db->conn) && !db->txn_lost)
                return 0;
        if (db->in_txn) {
                /* Statements after a reconnection would run outside the
                 * transaction the caller began: refuse until it rolls back. */
                db->txn_lost = true;
                return sp_error_set(err, SP_E_UNAVAILABLE, "database connection lost during a transaction");
        }
        if (db->conn)
                PQfinish(db->conn);
        db->conn = NULL;
        stmts_forget(db);
        /* Keepalives and a statement timeout turn a stalled database into
         * errors within seconds instead of hung requests. */
        static const char *const keys[] = {"dbname",
                                           "connect_timeout",
                                           "application_name",
                                           "keepalives_idle",
                                           "keepalives_interval",
                                           "keepalives_count",
                                           "options",
                                           NULL};
        const char *const values[] = {
                db->conninfo, CONNECT_TIMEOUT_S, "space-controlplane", "5", "2", "3", "-c statement_timeout=15000",
                NULL};
        db->conn = PQconnectdbParams(keys, values, 1 /* expand dbname as a connection string */);
        if (!db->conn)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (PQstatus(db->conn) != CONNECTION_OK) {
                char msg[256];
                snprintf(msg, sizeof(msg), "%s", PQerrorMessage(db->conn));
                msg[strcspn(msg, "\n")] = '\0';
                PQfinish(db->conn);
                db->conn = NULL;
                return sp_error_set(err, SP_E_UNAVAILABLE, "database unavailable: %s", msg);
        }
        PQsetNoticeProcessor(db->conn, ignore_notice, NULL);
        db->generation++;
        db->connected_at = sp_now_mono_us();
        return 0;
}

PGconn *cp_db_conn(cp_db *db, sp_error **err)
{
        return connect_db(db, err) < 0 ? NULL : db->conn;
}

const char *cp_db_conninfo(const cp_db *db)
{
        return db->conninfo;
}

int64_t cp_db_connected_since(const cp_db *db)
{
        return db->connected_at;
}

unsigned cp_db_generation(const cp_db *db)
{
        return db->generation;
}

bool cp_db_connected(const cp_db *db)
{
        return db->conn && PQstatus(db->conn) == CONNECTION_OK;
}

int cp_db_open(const char *conninfo, cp_db **ret, sp_error **err)
{
        cp_db *db = calloc(1, sizeof(*db));
        if (!db || !(db->conninfo = strdup(conninfo))) {
                free(db);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (connect_db(db, err) < 0) {
                cp_db_close(db);
                return -SP_E_UNAVAILABLE;
        }
        *ret = db;
        return 0;
}

/* The first line of conn's error message, in buf. */
static const char *first_line(PGconn *conn, char *buf, size_t n)
{
        snprintf(buf, n, "%s", conn ? PQerrorMessage(conn) : "out of memory");
        buf[strcspn(buf, "\n")] = '\0';
        return buf;
}

/* True when the server answers that conninfo's database does not exist. */
static bool db_missing(const char *conninfo)
{
        static const char *const keys[] = {"dbname", "connect_timeout", NULL};
        const char *const values[] = {conninfo, CONNECT_TIMEOUT_S, NULL};
        PGconn *probe = PQconnectdbParams(keys, values, 1);
        bool missing = probe && PQstatus(probe) != CONNECTION_OK && strstr(PQerrorMessage(probe), "does not exist");
        PQfinish(probe);
        return missing;
}

/* CREATE DATABASE name through admin: 0 made (or made meanwhile by another
 * replica), 1 to try again (template1 busy: another CREATE DATABASE), or an error. */
static int create_once(PGconn *admin, const char *name, sp_error **err)
{
        char msg[256], sql[600];
        char *ident = PQescapeIdentifier(admin, name, strlen(name));
        if (!ident)
                return sp_error_set(err, SP_E_INVALID, "database: cannot quote the name %s", name);
        snprintf(sql, sizeof(sql), "CREATE DATABASE %s", ident);
        PQfreemem(ident);
        _cleanup_pgresult_ PGresult *res = PQexec(admin, sql);
        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
                sp_log_info("database: created %s", name);
                return 0;
        }
        const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        /* duplicate_database or a unique violation in pg_database: another replica made it. */
        if (state && (strcmp(state, "42P04") == 0 || strcmp(state, "23505") == 0))
                return 0;
        if (state && strcmp(state, "55006") == 0) /* object_in_use: template1, by a CREATE DATABASE */
                return 1;
        return sp_error_set(err, SP_E_UNAVAILABLE, "database: CREATE DATABASE %s: %s", name,
                            first_line(admin, msg, sizeof(msg)));
}

int cp_db_create_missing(const char *conninfo, sp_error **err)
{
        if (!db_missing(conninfo))
                return 0; /* there, or unreachable: cp_db_open says which */
        /* Its name, and everything else to reach the server with. */
        char *perr = NULL;
        PQconninfoOption *opts = PQconninfoParse(conninfo, &perr);
        if (!opts) {
                int r = sp_error_set(err, SP_E_INVALID, "database: %s", perr ? perr : "out of memory");
                PQfreemem(perr);
                return r;
        }
        const char *k[40], *v[40], *name = NULL;
        size_t n = 0;
        for (PQconninfoOption *o = opts; o->keyword && n < 38; o++) {
                if (!o->val)
                        continue;
                if (strcmp(o->keyword, "dbname") == 0) {
                        name = o->val;
                        continue;
                }
                k[n] = o->keyword;
                v[n++] = o->val;
        }
        k[n] = "dbname";
        v[n++] = "postgres";
        k[n] = NULL;
        v[n] = NULL;
        int r = 0;
        char msg[256];
        PGconn *admin = name ? PQconnectdbParams(k, v, 0) : NULL;
        if (!name) {
                r = sp_error_set(err, SP_E_INVALID, "database: the connection string names no database to create");
        } else if (PQstatus(admin) != CONNECTION_OK) {
                r = sp_error_set(err, SP_E_UNAVAILABLE, "database %s does not exist, and creating it: %s", name,
                                 first_line(admin, msg, sizeof(msg)));
        } else {
                /* Replicas starting together take turns on template1: bounded retries. */
                for (int i = 0; i < 50 && (r = create_once(admin, name, err)) == 1; i++)
                        usleep(100 * 1000);
                if (r == 1)
                        r = sp_error_set(err, SP_E_UNAVAILABLE, "database: CREATE DATABASE %s: template1 stayed busy",
                                         name);
        }
        PQfinish(admin);
        PQconninfoFree(opts);
        return r;
}

void cp_db_close(cp_db *db)
{
        if (!db)
                return;
        if (db->conn)
                PQfinish(db->conn);
        stmts_forget(db);
        free(db->stmts);
        free(db->conninfo);
        free(db);
}

static int map_error(cp_db *db, const PGresult *res, sp_error **err)
{
        if (PQstatus(db->conn) != CONNECTION_OK)
                return sp_error_set(err, SP_E_UNAVAILABLE, "database connection lost");
        const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        sp_errc code = SP_E_INTERNAL;
        if (state) {
                if (strcmp(state, "23505") == 0)
                        code = SP_E_CONFLICT;
                else if (strcmp(state, "23503") == 0)
                        code = SP_E_NOT_FOUND;
                else if (strncmp(state, "22", 2) == 0 || strcmp(state, "23514") == 0 || strcmp(state, "23502") == 0)
                        code = SP_E_INVALID;
                else if (strncmp(state, "08", 2) == 0 || strncmp(state, "57P", 3) == 0)
                        code = SP_E_UNAVAILABLE;
                else if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0)
                        code = SP_E_CONFLICT;
        }
        return sp_error_set(err, code, "database: %s (%s)", primary ? primary : "query failed", state ? state : "-");
}

/* A failure nobody will see otherwise (the caller passed no error) is
 * logged here, with the start of the statement as its context. */
static void log_dropped(const char *sql, const sp_error *e)
{
        char head[72];
        size_t n = 0;
        const char *p = sql;
        for (; *p && n + 1 < sizeof(head); p++) {
                char ch = (*p == '\n' || *p == '\t') ? ' ' : *p;
                if (ch == ' ' && n > 0 && head[n - 1] == ' ')
                        continue;
                head[n++] = ch;
        }
        head[n] = '\0';
        sp_log_warn("%s (in \"%s%s\")", e->message, head, *p ? "…" : "");
}

int cp_db_exec(cp_db *db, const char *sql, int nparams, const char *const *params, PGresult **ret, sp_error **err)
{
        _cleanup_error_ sp_error *dropped = NULL;
        if (!err)
                err = &dropped;
        if (connect_db(db, err) < 0) {
                if (dropped)
                        log_dropped(sql, dropped);
                return -SP_E_UNAVAILABLE;
        }
        char name[16];
        const char *prepared = stmt_prepared(db, sql, nparams, name);
        PGresult *res = prepared ? PQexecPrepared(db->conn, prepared, nparams, params, NULL, NULL, 0)
                                 : PQexecParams(db->conn, sql, nparams, NULL, params, NULL, NULL, 0);
        ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
                int r = map_error(db, res, err);
                PQclear(res);
                if (dropped)
                        log_dropped(sql, dropped);
                return r;
        }
        if (ret)
                *ret = res;
        else
                PQclear(res);
        return 0;
}

/* Several statements without parameters (a migration script). */
static int exec_script(cp_db *db, const char *sql, sp_error **err)
{
        if (connect_db(db, err) < 0)
                return -SP_E_UNAVAILABLE;
        PGresult *res = PQexec(db->conn, sql);
        ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
        int r = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : map_error(db, res, err);
        PQclear(res);
        return r;
}

int cp_db_begin(cp_db *db, sp_error **err)
{
        int r = cp_db_exec(db, "BEGIN", 0, NULL, NULL, err);
        if (r < 0)
                return r;
        db->in_txn = true;
        db->txn_lost = false;
        return 0;
}

int cp_db_commit(cp_db *db, sp_error **err)
{
        int r = cp_db_exec(db, "COMMIT", 0, NULL, NULL, err);
        /* Whatever the outcome, the transaction is over (a failed COMMIT rolled back). */
        db->in_txn = false;
        db->txn_lost = false;
        return r;
}

void cp_db_rollback(cp_db *db)
{
        bool lost = db->txn_lost;
        db->in_txn = false;
        db->txn_lost = false;
        if (!lost && cp_db_connected(db))
                (void)cp_db_exec(db, "ROLLBACK", 0, NULL, NULL, NULL);
}

int cp_db_txn(cp_db *db, const cp_db_stmt *stmts, size_t n, sp_error **err)
{
        if (cp_db_begin(db, err) < 0)
                return -SP_E_UNAVAILABLE;
        size_t ran = 0;
        bool touched = true;
        for (; ran < n; ran++) {
                if (stmts[ran].if_previous && !touched)
                        break;
                PGresult *res = NULL;
                int r = cp_db_exec(db, stmts[ran].sql, stmts[ran].nparams, stmts[ran].params, &res, err);
                if (r < 0) {
                        cp_db_rollback(db);
                        return r;
                }
                const char *affected = PQcmdTuples(res);
                touched = PQntuples(res) > 0 || (affected && *affected && strcmp(affected, "0") != 0);
                PQclear(res);
        }
        int r = cp_db_commit(db, err);
        if (r < 0) {
                cp_db_rollback(db);
                return r;
        }
        return (int)ran;
}

int cp_db_version(cp_db *db, int *ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db, "SELECT coalesce(max(version), 0) FROM schema_migrations", 0, NULL, &res, err) < 0)
                return sp_error_wrap(err, "schema version");
        *ret = atoi(PQgetvalue(res, 0, 0));
        return 0;
}

int cp_db_migrate(cp_db *db, int *ret_applied, sp_error **err)
{
        int applied = 0, current = 0;
        if (cp_db_exec(db, "SELECT pg_advisory_lock(" MIGRATE_LOCK_KEY ")", 0, NULL, NULL, err) < 0)
                return sp_error_wrap(err, "migrate: lock");
        int r = cp_db_exec(db,
                           "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, "
                           "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
                           0, NULL, NULL, err);
        if (r == 0)
                r = cp_db_version(db, &current, err);
        for (const cp_migration *m = cp_migrations; r == 0 && m->name; m++) {
                char version[16];
                snprintf(version, sizeof(version), "%d", m->version);
                const char *params[] = {version, m->name};
                /* Below the newest applied, one may still be missing: a
                 * migration numbered before another but merged after it. */
                if (m->version <= current) {
                        _cleanup_pgresult_ PGresult *have = NULL;
                        if ((r = cp_db_exec(db, "SELECT 1 FROM schema_migrations WHERE version = $1::integer", 1,
                                            params, &have, err)) < 0)
                                break;
                        if (PQntuples(have) > 0)
                                continue;
                }
                if ((r = cp_db_begin(db, err)) < 0)
                        break;
                if ((r = exec_script(db, m->sql, err)) < 0 ||
                    (r = cp_db_exec(db, "INSERT INTO schema_migrations (version, name) VALUES ($1::integer, $2)", 2,
                                    params, NULL, err)) < 0) {
                        sp_error_wrap(err, "migration %s", m->name);
                        cp_db_rollback(db);
                        break;
                }
                if ((r = cp_db_commit(db, err)) < 0)
                        break;
                applied++;
        }
        (void)cp_db_exec(db, "SELECT pg_advisory_unlock(" MIGRATE_LOCK_KEY ")", 0, NULL, NULL, NULL);
        if (ret_applied)
                *ret_applied = applied;
        return r;
}
