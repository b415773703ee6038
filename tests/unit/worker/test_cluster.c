/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests of the worker's cluster module without a control plane: labels,
 * the token file, names, and which saved credentials are used or refused
 * (and why) before any join is attempted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "harness.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/pki.h"

START_TEST(labels)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *m = NULL;
        sp_test_ok(wk_cluster_parse_labels("zone=a,disk=nvme,team/x.y-z=,empty=", &m, &e), &e);
        ck_assert_str_eq(sp_json_str(m), "{\"zone\":\"a\",\"disk\":\"nvme\",\"team/x.y-z\":\"\",\"empty\":\"\"}");
        json_object_put(m);
        m = NULL;
        sp_test_ok(wk_cluster_parse_labels("", &m, &e), &e);
        ck_assert_str_eq(sp_json_str(m), "{}");
        struct {
                const char *in, *needle;
        } bad[] = {
                {"zone", "must be KEY=VALUE"}, {"=a", "label key ''"},        {"a b=c", "label key 'a b'"},
                {"a=1,a=2", "given twice"},    {"a=\x01", "printable ASCII"}, {"a=\xc3\xa9", "printable ASCII"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                json_object *no = NULL;
                ck_assert_int_eq(wk_cluster_parse_labels(bad[i].in, &no, &e), -SP_E_INVALID);
                ck_assert_msg(strstr(e->message, bad[i].needle), "%s: %s", bad[i].in, e->message);
                ck_assert_ptr_null(no);
                e = sp_error_free(e);
        }
        /* bounds: 64 labels, 128-byte keys, 256-byte values */
        char many[2048] = "", key[200], value[300];
        for (int i = 0; i < 65; i++)
                snprintf(many + strlen(many), sizeof(many) - strlen(many), "%sk%d=v", i ? "," : "", i);
        ck_assert_int_eq(wk_cluster_parse_labels(many, &m, &e), -SP_E_INVALID);
        ck_assert_msg(strstr(e->message, "more than 64"), "%s", e->message);
        e = sp_error_free(e);
        memset(key, 'k', 129);
        snprintf(key + 129, sizeof(key) - 129, "=v");
        ck_assert_int_eq(wk_cluster_parse_labels(key, &m, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        snprintf(value, sizeof(value), "k=");
        memset(value + 2, 'v', 257);
        value[259] = '\0';
        ck_assert_int_eq(wk_cluster_parse_labels(value, &m, &e), -SP_E_INVALID);
        ck_assert_msg(strstr(e->message, "longer than 256"), "%s", e->message);
        e = sp_error_free(e);
}
END_TEST

START_TEST(names)
{
        const char *good[] = {"node-a", "a", "0", "n.example.com",
                              "a23456789012345678901234567890123456789012345678901234567890123"};
        const char *bad[] = {"",
                             "Node",
                             "-a",
                             ".a",
                             "a_b",
                             "a b",
                             "a234567890123456789012345678901234567890123456789012345678901234"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(good); i++)
                ck_assert_msg(sp_join_name_ok(good[i]), "%s", good[i]);
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++)
                ck_assert_msg(!sp_join_name_ok(bad[i]), "%s", bad[i]);
        ck_assert(!sp_join_name_ok(NULL));
}
END_TEST

static char *dir;

static void dir_setup(void)
{
        dir = sp_test_tmpdir("cluster");
}

static void dir_teardown(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
}

static void write_file(const char *name, const char *text)
{
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        sp_error *e = NULL;
        sp_test_ok(sp_file_write_atomic(path, text, strlen(text), 0600, &e), &e);
}

START_TEST(token_file)
{
        sp_error *e = NULL;
        char path[600];
        snprintf(path, sizeof(path), "%s/token", dir);
        _cleanup_free_ char *t = NULL;
        write_file("token", "  spj_jtk_x_secret \r\nsecond line\n");
        sp_test_ok(sp_join_read_token(path, &t, &e), &e);
        ck_assert_str_eq(t, "spj_jtk_x_secret");
        char *no = NULL;
        write_file("token", " \n\n");
        ck_assert_int_eq(sp_join_read_token(path, &no, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        char huge[300];
        memset(huge, 'x', 299);
        huge[299] = '\0';
        write_file("token", huge);
        ck_assert_int_eq(sp_join_read_token(path, &no, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        snprintf(path, sizeof(path), "%s/missing", dir);
        ck_assert_int_lt(sp_join_read_token(path, &no, &e), 0);
        ck_assert_msg(strstr(e->message, "missing"), "%s", e->message);
        e = sp_error_free(e);
        ck_assert_ptr_null(no);
}
END_TEST

/* Saved credentials under <dir>/tls: a certificate issued by issuer for name,
 * its key (or none), the CA (or none). */
static void save(sp_pki_ca *issuer, const char *name, bool with_key, const char *ca_pem)
{
        sp_error *e = NULL;
        _cleanup_free_ char *cert = NULL, *key = NULL;
        sp_test_ok(sp_pki_issue(issuer, SP_ROLE_WORKER, name, NULL, 1, &cert, &key, &e), &e);
        char path[700];
        snprintf(path, sizeof(path), "%s/tls", dir);
        mkdir(path, 0700);
        snprintf(path, sizeof(path), "%s/tls/worker.key", dir);
        unlink(path);
        snprintf(path, sizeof(path), "%s/tls/ca.crt", dir);
        unlink(path);
        write_file("tls/worker.crt", cert);
        if (with_key)
                write_file("tls/worker.key", key);
        if (ca_pem)
                write_file("tls/ca.crt", ca_pem);
}

START_TEST(saved_credentials)
{
        sp_error *e = NULL;
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL, *other = NULL;
        sp_test_ok(sp_pki_ca_create("cluster", 2, &ca, &e), &e);
        sp_test_ok(sp_pki_ca_create("cluster", 2, &other, &e), &e);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, &e);
        /* No join may happen here: the control plane address answers nothing. */
        wk_cluster_config cfg = {.control_plane = "127.0.0.1:1",
                                 .name = "node-a",
                                 .advertise = "127.0.0.1:7071",
                                 .backend = "jail",
                                 .state_dir = dir};
        sp_join_creds creds;

        ck_assert_int_eq(wk_cluster_credentials(&cfg, NULL, NULL, &creds, &e), -SP_E_INVALID);
        ck_assert_msg(strstr(e->message, "--tls-ca"), "%s", e->message);
        e = sp_error_free(e);
        ck_assert_int_eq(wk_cluster_credentials(&cfg, ca_pem, NULL, &creds, &e), -SP_E_INVALID);
        ck_assert_msg(strstr(e->message, "not joined yet"), "%s", e->message);
        e = sp_error_free(e);
        wk_cluster_config bad_name = cfg;
        bad_name.name = "Node_A";
        ck_assert_int_eq(wk_cluster_credentials(&bad_name, ca_pem, "spj_x", &creds, &e), -SP_E_INVALID);
        ck_assert_msg(strstr(e->message, "--node-id"), "%s", e->message);
        e = sp_error_free(e);

        /* A good saved set is used, with the saved CA or the given one, a token or not. */
        save(ca, "node-a", true, ca_pem);
        sp_test_ok(wk_cluster_credentials(&cfg, NULL, NULL, &creds, &e), &e);
        ck_assert_str_eq(creds.ca_pem, ca_pem);
        ck_assert(strstr(creds.key_pem, "PRIVATE KEY"));
        sp_join_creds_free(&creds);
        ck_assert_ptr_null(creds.key_pem);
        sp_test_ok(wk_cluster_credentials(&cfg, ca_pem, "spj_unused", &creds, &e), &e);
        sp_join_creds_free(&creds);

        /* Unusable saved sets are refused without a token, saying why. */
        struct {
                sp_pki_ca *issuer;
                const char *name;
                bool key;
                const char *needle;
        } cases[] = {
                {ca, "node-b", true, "names worker 'node-b'"},
                {other, "node-a", true, "the saved certificate cannot be used"},
                {ca, "node-a", false, "worker.key is missing"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                save(cases[i].issuer, cases[i].name, cases[i].key, NULL);
                ck_assert_int_eq(wk_cluster_credentials(&cfg, ca_pem, NULL, &creds, &e), -SP_E_INVALID);
                ck_assert_msg(strstr(e->message, cases[i].needle) && strstr(e->message, "--join-token"), "case %zu: %s",
                              i, e->message);
                e = sp_error_free(e);
        }
        /* a key that is not the certificate's */
        save(ca, "node-a", true, NULL);
        _cleanup_free_ char *c2 = NULL, *k2 = NULL;
        sp_test_ok(sp_pki_issue(ca, SP_ROLE_WORKER, "node-a", NULL, 1, &c2, &k2, &e), &e);
        write_file("tls/worker.key", k2);
        ck_assert_int_eq(wk_cluster_credentials(&cfg, ca_pem, NULL, &creds, &e), -SP_E_INVALID);
        ck_assert_msg(strstr(e->message, "does not match"), "%s", e->message);
        e = sp_error_free(e);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("worker_cluster");
        TCase *tc = tcase_create("cluster");
        tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
        tcase_add_test(tc, labels);
        tcase_add_test(tc, names);
        tcase_add_test(tc, token_file);
        tcase_add_test(tc, saved_credentials);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
