/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control plane's store against a real PostgreSQL: migrations applied once
 * even by replicas racing at start, an older one a database lacks applied
 * after newer ones, tenants and API keys (hashed, one answer
 * for every kind of bad key), and fast errors then recovery when PostgreSQL
 * goes away and comes back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "pg.h"
#include "space/cleanup.h"
#include "space/log.h"
#include "space/time.h"
#include "store/db.h"
#include "store/keys.h"

static sp_test_pg pg;

/* How many migrations are compiled in. */
static int n_migrations(void)
{
        int n = 0;
        while (cp_migrations[n].version)
                n++;
        return n;
}
static char *conninfo;

static void case_setup(void)
{
        sp_error *e = NULL;
        memset(&pg, 0, sizeof(pg));
        sp_test_ok(sp_test_pg_start(&pg, &e), &e);
}

static void case_teardown(void)
{
        sp_test_pg_stop(&pg);
}

static void setup(void)
{
        sp_error *e = NULL;
        sp_test_ok(sp_test_pg_create_database(&pg, &conninfo, &e), &e);
}

static void teardown(void)
{
        free(conninfo);
}

START_TEST(migrations_apply_once_even_when_racing)
{
        /* Four "replicas" start at once. */
        pid_t kids[4];
        for (int i = 0; i < 4; i++) {
                kids[i] = fork();
                if (kids[i] == 0) {
                        cp_db *db;
                        int applied = -1;
                        if (cp_db_open(conninfo, &db, NULL) < 0 || cp_db_migrate(db, &applied, NULL) < 0)
                                _exit(2);
                        cp_db_close(db);
                        _exit(applied == n_migrations() ? 10 : applied == 0 ? 0 : 3);
                }
        }
        int applied_by = 0;
        for (int i = 0; i < 4; i++) {
                int st;
                waitpid(kids[i], &st, 0);
                ck_assert(WIFEXITED(st));
                ck_assert_msg(WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 10, "replica failed: %d", WEXITSTATUS(st));
                applied_by += WEXITSTATUS(st) == 10;
        }
        ck_assert_int_eq(applied_by, 1);
        cp_db *db;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(conninfo, &db, &e), &e);
        int version = 0, applied = -1;
        sp_test_ok(cp_db_version(db, &version, &e), &e);
        ck_assert_int_eq(version, cp_migrations[n_migrations() - 1].version);
        sp_test_ok(cp_db_migrate(db, &applied, &e), &e);
        ck_assert_int_eq(applied, 0);
        _cleanup_pgresult_ PGresult *r = NULL;
        sp_test_ok(cp_db_exec(db, "SELECT count(*) FROM schema_migrations", 0, NULL, &r, &e), &e);
        ck_assert_int_eq(atoi(PQgetvalue(r, 0, 0)), n_migrations());
        cp_db_close(db);
}
END_TEST

/* A database that met a migration after a newer one (0016, the audit API,
 * merged before 0015, tenant quotas): the older is applied when it is
 * missing, and only then. */
START_TEST(a_missing_older_migration_is_applied)
{
        cp_db *db;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(conninfo, &db, &e), &e);
        sp_test_ok(cp_db_migrate(db, NULL, &e), &e);
        int version = 0, applied = -1;
        sp_test_ok(cp_db_version(db, &version, &e), &e);
        ck_assert_int_gt(version, 15);
        /* As a database migrated without 0015 has it: none of its objects, no record. */
        static const char *const undo[] = {"DROP FUNCTION quota_refusal(text, jsonb, jsonb)",
                                           "DROP FUNCTION tenant_limits(text, jsonb)",
                                           "DROP FUNCTION tenant_usage(text)",
                                           "DROP FUNCTION quota_delta(jsonb, text, text)",
                                           "DROP FUNCTION quota_charge(jsonb, text)",
                                           "DROP INDEX sandboxes_tenant_live",
                                           "ALTER TABLE tenants DROP COLUMN quotas",
                                           "DELETE FROM schema_migrations WHERE version = 15"};
        for (size_t i = 0; i < sizeof(undo) / sizeof(undo[0]); i++)
                sp_test_ok(cp_db_exec(db, undo[i], 0, NULL, NULL, &e), &e);
        sp_test_ok(cp_db_migrate(db, &applied, &e), &e);
        ck_assert_int_eq(applied, 1);
        _cleanup_pgresult_ PGresult *r = NULL;
        sp_test_ok(cp_db_exec(db, "SELECT quota_refusal('ten_system', '{\"templates\":0}', '{\"templates\":1}')::text",
                              0, NULL, &r, &e),
                   &e);
        ck_assert_msg(strstr(PQgetvalue(r, 0, 0), "\"quota\": \"templates\""), "%s", PQgetvalue(r, 0, 0));
        int again = -1;
        sp_test_ok(cp_db_migrate(db, &again, &e), &e);
        ck_assert_int_eq(again, 0);
        int after = 0;
        sp_test_ok(cp_db_version(db, &after, &e), &e);
        ck_assert_int_eq(after, version);
        cp_db_close(db);
}
END_TEST

START_TEST(tenants_and_keys)
{
        cp_db *db;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(conninfo, &db, &e), &e);
        sp_test_ok(cp_db_migrate(db, NULL, &e), &e);
        char a[SP_ID_MAX], b[SP_ID_MAX];
        sp_test_ok(cp_tenant_create(db, "acme", a, &e), &e);
        sp_test_ok(cp_tenant_create(db, "globex", b, &e), &e);
        ck_assert_int_eq(cp_tenant_create(db, "acme", a, &e), -SP_E_CONFLICT);
        ck_assert_str_eq(e->message, "a tenant named 'acme' already exists");
        e = sp_error_free(e);
        ck_assert_int_eq(cp_tenant_create(db, "", a, &e), -SP_E_INVALID);
        e = sp_error_free(e);

        _cleanup_free_ char *secret = NULL;
        char key[SP_ID_MAX];
        sp_test_ok(cp_apikey_create(db, a, "ci", true, &secret, key, &e), &e);
        ck_assert(strncmp(secret, "spk_key_", 8) == 0);
        cp_principal p;
        sp_test_ok(cp_apikey_verify(db, secret, &p, NULL, &e), &e);
        ck_assert_str_eq(p.tenant_id, a);
        ck_assert_str_eq(p.key_id, key);
        ck_assert(p.admin);

        /* the secret itself is not stored */
        _cleanup_pgresult_ PGresult *r = NULL;
        const char *params[] = {secret};
        sp_test_ok(cp_db_exec(db, "SELECT count(*) FROM api_keys WHERE position($1::bytea in secret_hash) > 0", 1,
                              params, &r, &e),
                   &e);
        ck_assert_str_eq(PQgetvalue(r, 0, 0), "0");

        /* every bad key gets the same answer */
        _cleanup_free_ char *wrong = strdup(secret);
        wrong[strlen(wrong) - 1] = wrong[strlen(wrong) - 1] == 'A' ? 'B' : 'A';
        char unknown[128];
        snprintf(unknown, sizeof(unknown), "spk_key_0000000000000000000a_%s", secret + 8 + 21);
        const char *bad[] = {wrong, unknown, "", "spk_", "Bearer x", "spk_key_../../_x"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_int_eq(cp_apikey_verify(db, bad[i], &p, NULL, &e), -SP_E_UNAUTHENTICATED);
                ck_assert_str_eq(e->message, "invalid API key");
                e = sp_error_free(e);
        }
        /* another tenant cannot revoke it; its own tenant can, and then it fails */
        ck_assert_int_eq(cp_apikey_revoke(db, b, key, &e), -SP_E_NOT_FOUND);
        e = sp_error_free(e);
        sp_test_ok(cp_apikey_revoke(db, a, key, &e), &e);
        ck_assert_int_eq(cp_apikey_verify(db, secret, &p, NULL, &e), -SP_E_UNAUTHENTICATED);
        ck_assert_str_eq(e->message, "invalid API key");
        e = sp_error_free(e);
        cp_db_close(db);
}
END_TEST

START_TEST(database_down_fails_fast_and_recovers)
{
        cp_db *db;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(conninfo, &db, &e), &e);
        sp_test_ok(cp_db_migrate(db, NULL, &e), &e);
        sp_test_ok(sp_test_pg_kill(&pg, &e), &e);
        int64_t t0 = sp_now_mono_us();
        ck_assert_int_eq(cp_db_exec(db, "SELECT 1", 0, NULL, NULL, &e), -SP_E_UNAVAILABLE);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_db_exec(db, "SELECT 1", 0, NULL, NULL, &e), -SP_E_UNAVAILABLE);
        e = sp_error_free(e);
        /* bounded by the connect timeout, not a hang (a generous bound: this is not a benchmark) */
        ck_assert_int_lt(sp_now_mono_us() - t0, 30 * SP_USEC_PER_SEC);
        sp_test_ok(sp_test_pg_restart(&pg, &e), &e);
        _cleanup_pgresult_ PGresult *r = NULL;
        /* Only the built-in system tenant. */
        sp_test_ok(cp_db_exec(db, "SELECT count(*) FROM tenants", 0, NULL, &r, &e), &e);
        ck_assert_str_eq(PQgetvalue(r, 0, 0), "1");
        cp_db_close(db);
}
END_TEST

/* A failed statement whose caller takes no error is logged with its context. */
START_TEST(dropped_errors_are_logged)
{
        cp_db *db;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(conninfo, &db, &e), &e);
        sp_test_ok(cp_db_migrate(db, NULL, &e), &e);
        int fd = memfd_create("dblog", MFD_CLOEXEC); /* the log, read back below */
        ck_assert_int_ge(fd, 0);
        sp_log_set_fd(fd);
        ck_assert_int_lt(cp_db_exec(db, "SELECT no_such_column FROM\n   tenants", 0, NULL, NULL, NULL), 0);
        sp_log_set_fd(STDERR_FILENO);
        char buf[4096] = "";
        ck_assert_int_gt(pread(fd, buf, sizeof(buf) - 1, 0), 0);
        close(fd);
        ck_assert_msg(strstr(buf, "no_such_column") && strstr(buf, "SELECT no_such_column FROM tenants"), "%s", buf);
        cp_db_close(db);
}
END_TEST

/* --create-database: a database the server lacks is made (its name quoted:
 * any name works), once; one that is there is left alone; a replica racing
 * another is not an error. */
START_TEST(missing_database_is_created)
{
        sp_error *e = NULL;
        char name[64], *ci = NULL;
        snprintf(name, sizeof(name), "space made-%d", (int)getpid());
        ck_assert_int_gt(
                asprintf(&ci, "host=127.0.0.1 port=%d user=postgres dbname='%s' connect_timeout=10", pg.port, name), 0);
        cp_db *db = NULL;
        ck_assert_int_lt(cp_db_open(ci, &db, &e), 0); /* not there yet */
        ck_assert_msg(strstr(e->message, "does not exist"), "%s", e->message);
        sp_error_free(e);
        e = NULL;
        pid_t kids[3];
        for (int i = 0; i < 3; i++)
                if ((kids[i] = fork()) == 0)
                        _exit(cp_db_create_missing(ci, NULL) == 0 ? 0 : 1);
        for (int i = 0; i < 3; i++) {
                int st;
                ck_assert_int_eq(waitpid(kids[i], &st, 0), kids[i]);
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a racing replica failed to create it");
        }
        sp_test_ok(cp_db_create_missing(ci, &e), &e); /* there: nothing to do */
        sp_test_ok(cp_db_open(ci, &db, &e), &e);
        sp_test_ok(cp_db_migrate(db, NULL, &e), &e);
        _cleanup_pgresult_ PGresult *r = NULL;
        sp_test_ok(cp_db_exec(db, "SELECT current_database()", 0, NULL, &r, &e), &e);
        ck_assert_str_eq(PQgetvalue(r, 0, 0), name);
        cp_db_close(db);
        free(ci);
}
END_TEST

int main(void)
{
        sp_test_pg_require();
        Suite *s = suite_create("cp_store");
        TCase *tc = tcase_create("store");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, migrations_apply_once_even_when_racing);
        tcase_add_test(tc, a_missing_older_migration_is_applied);
        tcase_add_test(tc, tenants_and_keys);
        tcase_add_test(tc, dropped_errors_are_logged);
        tcase_add_test(tc, missing_database_is_created);
        suite_add_tcase(s, tc);
        /* Killing and restarting PostgreSQL gets a server of its own (see pg.h). */
        TCase *down = tcase_create("down");
        tcase_set_timeout(down, 120);
        tcase_add_unchecked_fixture(down, case_setup, case_teardown);
        tcase_add_checked_fixture(down, setup, teardown);
        tcase_add_test(down, database_down_fails_fast_and_recovers);
        suite_add_tcase(s, down);
        return sp_test_main(s);
}
