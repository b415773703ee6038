/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `space-controlplane --bootstrap-only` against a real PostgreSQL: what the
 * Kubernetes bootstrap Job runs (docs/kubernetes.md). It makes the schema, the
 * cluster CA, the first admin key (the operator's, from --admin-key-file) and
 * the token keys, writes --ca-out and --token-public-key-out, and exits 0
 * without listening; run again it makes nothing new (the same CA), and a
 * malformed admin key is refused with a non-zero exit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "pg.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "store/db.h"
#include "store/keys.h"

static sp_test_pg pg;
static char *conninfo, *dir;

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
        dir = sp_test_tmpdir("cp-bootstrap");
}

static void teardown(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
        free(conninfo);
}

/* Runs the control plane with --bootstrap-only and the given admin key file
 * name (in dir); returns its exit status (-1 if a signal ended it). Bounded:
 * a daemon that served instead of exiting fails the test after 30 s. */
static int bootstrap(const char *key_name, const char *ca_name)
{
        char bin[4096], db[2048], key[4200], ca[4200], tk[4200], log[4200];
        snprintf(bin, sizeof(bin), "%s/bin/space-controlplane", sp_test_binary_dir());
        snprintf(db, sizeof(db), "--database=%s", conninfo);
        snprintf(key, sizeof(key), "--admin-key-file=%s/%s", dir, key_name);
        snprintf(ca, sizeof(ca), "--ca-out=%s/%s", dir, ca_name);
        snprintf(tk, sizeof(tk), "--token-public-key-out=%s/token-keys.pem", dir);
        snprintf(log, sizeof(log), "%s/controlplane.log", dir);
        const char *argv[] = {bin, db, key, ca, tk, "--bootstrap-only", "--log-format=text", NULL};
        sp_test_spawn_opts o = {.log_path = log, .new_pgroup = true};
        pid_t pid;
        sp_error *e = NULL;
        sp_test_ok(sp_test_spawn(argv, &o, &pid, &e), &e);
        int status = 0;
        if (sp_test_child_wait(pid, 30000, &status, &e) < 0) {
                sp_error_free(e);
                e = NULL;
                sp_test_ok(sp_test_child_stop(pid, true, SIGKILL, 5000, NULL, &e), &e);
                sp_test_dump_file_tail("controlplane", log, 40);
                ck_abort_msg("--bootstrap-only did not exit within 30 s");
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                sp_test_dump_file_tail("controlplane", log, 40);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *slurp(const char *name)
{
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        sp_buf b = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(p, 1 << 20, &b, &e), &e);
        return sp_buf_steal(&b);
}

START_TEST(bootstrap_only_makes_the_cluster_once_and_exits)
{
        /* The operator's admin key, as the Job generates it: spk_key_<20 of the id alphabet>_<secret>. */
        const char *admin = "spk_key_0123456789abcdefghjk_s3cr3tvalueofthirtytwocharsxx";
        char p[4200];
        snprintf(p, sizeof(p), "%s/admin.key", dir);
        sp_error *e = NULL;
        sp_test_ok(sp_file_write_atomic(p, admin, strlen(admin), 0600, &e), &e);

        ck_assert_int_eq(bootstrap("admin.key", "ca.pem"), 0);
        _cleanup_free_ char *ca = slurp("ca.pem"), *tk = slurp("token-keys.pem");
        ck_assert_ptr_nonnull(strstr(ca, "-----BEGIN CERTIFICATE-----"));
        ck_assert_ptr_nonnull(strstr(tk, "-----BEGIN PUBLIC KEY-----"));

        /* The key it was given is the admin key now. */
        cp_db *db = NULL;
        sp_test_ok(cp_db_open(conninfo, &db, &e), &e);
        cp_principal who;
        sp_test_ok(cp_apikey_verify(db, admin, &who, NULL, &e), &e);
        ck_assert(who.admin);

        /* Again (a Job retried, or run once more): nothing new, the same CA. */
        ck_assert_int_eq(bootstrap("admin.key", "ca2.pem"), 0);
        _cleanup_free_ char *ca2 = slurp("ca2.pem");
        ck_assert_str_eq(ca, ca2);
        sp_test_ok(cp_apikey_verify(db, admin, &who, NULL, &e), &e);
        cp_db_close(db);
}
END_TEST

START_TEST(bootstrap_only_refuses_a_malformed_admin_key)
{
        char p[4200];
        snprintf(p, sizeof(p), "%s/bad.key", dir);
        sp_error *e = NULL;
        sp_test_ok(sp_file_write_atomic(p, "not-a-key", 9, 0600, &e), &e);
        ck_assert_int_ne(bootstrap("bad.key", "ca.pem"), 0);
}
END_TEST

int main(void)
{
        sp_test_pg_require();
        Suite *s = suite_create("cp_bootstrap");
        TCase *tc = tcase_create("bootstrap");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, bootstrap_only_makes_the_cluster_once_and_exits);
        tcase_add_test(tc, bootstrap_only_refuses_a_malformed_admin_key);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
