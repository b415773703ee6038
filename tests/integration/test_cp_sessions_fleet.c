/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attachment-token keys and data-plane replicas against a real PostgreSQL:
 * the signing key created once by racing replicas; rotation (a new current
 * key signs, the retired one keeps verifying and loses its private half, long
 * retired keys go); Join with role dataplane through a real fleet RPC server
 * over mTLS (certificate, CA and token keys; every refusal consumes nothing
 * and records nothing); TokenKeys for data planes and workers only.
 */
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleet/fleet.h"
#include "harness.h"
#include "pg.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space/token.h"
#include "store/tokenkeys.h"

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

static sp_test_pg pg;
static char *conninfo;
static cp_db *db;
static sp_pki_ca *ca;
static char *ca_pem;
static char fleet_addr[64];
static pid_t fleet_pid;

/* ---- fixtures ---- */

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
        sp_test_ok(cp_db_open(conninfo, &db, &e), &e);
        sp_test_ok(cp_db_migrate(db, NULL, &e), &e);
}

static void teardown(void)
{
        if (fleet_pid > 0) {
                kill(fleet_pid, SIGKILL);
                waitpid(fleet_pid, NULL, 0);
        }
        fleet_pid = 0;
        sp_pki_ca_free(ca);
        ca = NULL;
        free(ca_pem);
        ca_pem = NULL;
        cp_db_close(db);
        free(conninfo);
}

static char *query1(const char *sql, const char *param)
{
        _cleanup_pgresult_ PGresult *r = NULL;
        sp_error *e = NULL;
        const char *params[] = {param};
        sp_test_ok(cp_db_exec(db, sql, param ? 1 : 0, param ? params : NULL, &r, &e), &e);
        ck_assert_msg(PQntuples(r) == 1, "%s: %d rows", sql, PQntuples(r));
        return strdup(PQgetisnull(r, 0, 0) ? "(null)" : PQgetvalue(r, 0, 0));
}

/* A verifier holding every PEM of the array keys. */
static sp_token_verifier *verifier_of(json_object *keys)
{
        sp_token_verifier *v = sp_token_verifier_new();
        ck_assert_ptr_nonnull(v);
        for (size_t i = 0; i < json_object_array_length(keys); i++) {
                sp_error *e = NULL;
                sp_test_ok(sp_token_verifier_add_key(v, json_object_get_string(json_object_array_get_idx(keys, i)), &e),
                           &e);
        }
        return v;
}

/* A token from the current key. */
static char *sign_now(const char *ses)
{
        sp_error *e = NULL;
        _cleanup_token_signer_ sp_token_signer *s = NULL;
        sp_test_ok(cp_token_keys_signer(db, &s, &e), &e);
        _cleanup_json_ json_object *claims = json_object_new_object();
        json_object_object_add(claims, "typ", json_object_new_string("session"));
        json_object_object_add(claims, "ses", json_object_new_string(ses));
        char *t = sp_token_sign(s, claims, 60, &e);
        sp_test_ok(t ? 0 : -1, &e);
        return t;
}

static void rotate(char kid[static SP_TOKEN_KID_LEN + 1])
{
        sp_error *e = NULL;
        sp_test_ok(cp_db_begin(db, &e), &e);
        sp_test_ok(cp_token_keys_rotate(db, kid, &e), &e);
        sp_test_ok(cp_db_commit(db, &e), &e);
}

/* ---- the keys ---- */

START_TEST(signing_key_created_once_when_racing)
{
        int gun[2];
        ck_assert_int_eq(pipe(gun), 0);
        pid_t kids[4];
        for (int i = 0; i < 4; i++) {
                kids[i] = fork();
                ck_assert_int_ge(kids[i], 0);
                if (kids[i] == 0) {
                        close(gun[1]);
                        char c;
                        (void)!read(gun[0], &c, 1);
                        cp_db *mine = NULL;
                        if (cp_db_open(conninfo, &mine, NULL) < 0 || cp_token_keys_ensure(mine, NULL) < 0)
                                _exit(2);
                        _exit(0);
                }
        }
        close(gun[0]);
        close(gun[1]);
        for (int i = 0; i < 4; i++) {
                int st = 0;
                ck_assert_int_eq(waitpid(kids[i], &st, 0), kids[i]);
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "replica %d failed: %d", i, st);
        }
        _cleanup_free_ char *count = query1("SELECT count(*) FROM token_keys", NULL);
        ck_assert_str_eq(count, "1");
        _cleanup_free_ char *kid = query1("SELECT kid FROM token_keys WHERE current", NULL);
        /* Every replica signs with that key, and its public half verifies. */
        sp_error *e = NULL;
        _cleanup_token_signer_ sp_token_signer *s = NULL;
        sp_test_ok(cp_token_keys_signer(db, &s, &e), &e);
        ck_assert_str_eq(sp_token_signer_kid(s), kid);
        _cleanup_json_ json_object *keys = NULL;
        sp_test_ok(cp_token_keys_public(db, &keys, &e), &e);
        ck_assert_uint_eq(json_object_array_length(keys), 1);
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(keys);
        _cleanup_free_ char *t = sign_now("ses_a");
        _cleanup_json_ json_object *claims = sp_token_verify(v, t, sp_now_real_us() / SP_USEC_PER_SEC, &e);
        sp_test_ok(claims ? 0 : -1, &e);
}
END_TEST

START_TEST(rotation_keeps_old_tokens_verifying)
{
        sp_error *e = NULL;
        /* On a fresh database, asking for the keys creates the first. */
        _cleanup_json_ json_object *first = NULL;
        sp_test_ok(cp_token_keys_public(db, &first, &e), &e);
        ck_assert_uint_eq(json_object_array_length(first), 1);
        _cleanup_free_ char *old_kid = query1("SELECT kid FROM token_keys WHERE current", NULL);
        _cleanup_free_ char *old_token = sign_now("ses_old");

        char kid[SP_TOKEN_KID_LEN + 1];
        rotate(kid);
        ck_assert_str_ne(kid, old_kid);
        _cleanup_free_ char *cur = query1("SELECT kid FROM token_keys WHERE current", NULL);
        ck_assert_str_eq(cur, kid);
        /* The retired key lost its private half. */
        _cleanup_free_ char *priv = query1("SELECT private_pem IS NULL AND retired_at IS NOT NULL FROM token_keys "
                                           "WHERE kid = $1",
                                           old_kid);
        ck_assert_str_eq(priv, "t");
        /* New tokens name the new key; both verify with what is published (current first). */
        _cleanup_free_ char *new_token = sign_now("ses_new");
        _cleanup_json_ json_object *keys = NULL, *list = NULL;
        sp_test_ok(cp_token_keys_public(db, &keys, &e), &e);
        ck_assert_uint_eq(json_object_array_length(keys), 2);
        sp_test_ok(cp_token_keys_list(db, &list, &e), &e);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(json_object_array_get_idx(list, 0), "kid")),
                         kid);
        ck_assert(json_object_get_boolean(json_object_object_get(json_object_array_get_idx(list, 0), "current")));
        ck_assert(!json_object_get_boolean(json_object_object_get(json_object_array_get_idx(list, 1), "current")));
        ck_assert_ptr_nonnull(
                json_object_get_string(json_object_object_get(json_object_array_get_idx(list, 1), "retired_at")));
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(keys);
        int64_t now = sp_now_real_us() / SP_USEC_PER_SEC;
        _cleanup_json_ json_object *c1 = sp_token_verify(v, old_token, now, &e);
        sp_test_ok(c1 ? 0 : -1, &e);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(c1, "kid")), old_kid);
        _cleanup_json_ json_object *c2 = sp_token_verify(v, new_token, now, &e);
        sp_test_ok(c2 ? 0 : -1, &e);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(c2, "kid")), kid);
        /* Only the first key alone does not verify the new token: the key really changed. */
        _cleanup_token_verifier_ sp_token_verifier *only_old = verifier_of(first);
        _cleanup_json_ json_object *no = sp_token_verify(only_old, new_token, now, &e);
        ck_assert_ptr_null(no);
        ck_assert_str_eq(e->message, "unknown signing key");
        e = sp_error_free(e);

        /* A key retired longer ago than any token lives is no longer published, and the next rotation drops it. */
        sp_test_ok(cp_db_exec(db,
                              "UPDATE token_keys SET retired_at = now() - make_interval(secs => 86400 + 601) "
                              "WHERE NOT current",
                              0, NULL, NULL, &e),
                   &e);
        _cleanup_json_ json_object *later = NULL;
        sp_test_ok(cp_token_keys_public(db, &later, &e), &e);
        ck_assert_uint_eq(json_object_array_length(later), 1);
        char kid3[SP_TOKEN_KID_LEN + 1];
        rotate(kid3);
        _cleanup_free_ char *gone = query1("SELECT count(*) FROM token_keys WHERE kid = $1", old_kid);
        ck_assert_str_eq(gone, "0");
        _cleanup_free_ char *total = query1("SELECT count(*) FROM token_keys", NULL);
        ck_assert_str_eq(total, "2");

        /* Many rotations: at most SP_TOKEN_MAX_KEYS keys are published, the current one first. */
        for (int i = 0; i < SP_TOKEN_MAX_KEYS + 2; i++)
                rotate(kid3);
        _cleanup_json_ json_object *many = NULL;
        sp_test_ok(cp_token_keys_public(db, &many, &e), &e);
        ck_assert_uint_eq(json_object_array_length(many), SP_TOKEN_MAX_KEYS);
        _cleanup_token_verifier_ sp_token_verifier *vm = verifier_of(many);
        _cleanup_free_ char *latest = sign_now("ses_latest");
        _cleanup_json_ json_object *c3 = sp_token_verify(vm, latest, sp_now_real_us() / SP_USEC_PER_SEC, &e);
        sp_test_ok(c3 ? 0 : -1, &e);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(c3, "kid")), kid3);
}
END_TEST

/* ---- a fleet server in a child process ---- */

static int fleet_serve(int ready_fd)
{
        sp_error *e = NULL;
        cp_db *sdb = NULL;
        sp_pki_ca *sca = NULL;
        SSL_CTX *ctx = NULL;
        cp_fleet *f = NULL;
        sp_rpc_server *srv = NULL;
        struct event_base *base = event_base_new();
        if (cp_db_open(conninfo, &sdb, &e) < 0 || cp_fleet_cluster_ca(sdb, &sca, &e) < 0 ||
            !(f = cp_fleet_new(sdb, sca, NULL, &e)) || cp_fleet_tls(sca, "cp-test", NULL, 1, &ctx, NULL, &e) < 0 ||
            !(srv = sp_rpc_server_new(base, ctx, &e)) || cp_fleet_register(f, srv, &e) < 0 ||
            sp_rpc_server_listen(srv, fleet_addr, &e) < 0) {
                fprintf(stderr, "fleet server: %s\n", e ? e->message : "?");
                return 1;
        }
        sp_rpc_server_set_identity_fn(srv, cp_fleet_identity, NULL);
        if (write(ready_fd, "R", 1) != 1)
                return 1;
        close(ready_fd);
        event_base_dispatch(base);
        return 0;
}

static void fleet_up(void)
{
        sp_error *e = NULL;
        sp_test_ok(cp_fleet_cluster_ca(db, &ca, &e), &e);
        ca_pem = sp_pki_ca_cert_pem(ca, &e);
        sp_test_ok(ca_pem ? 0 : -1, &e);
        int port = sp_test_free_port(&e);
        sp_test_ok(port, &e);
        snprintf(fleet_addr, sizeof(fleet_addr), "127.0.0.1:%d", port);
        int pfd[2];
        ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0);
        fleet_pid = fork();
        ck_assert_int_ge(fleet_pid, 0);
        if (fleet_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(pfd[0]);
                _exit(fleet_serve(pfd[1]));
        }
        close(pfd[1]);
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        char c = 0;
        bool ready = poll(&p, 1, 30000) == 1 && read(pfd[0], &c, 1) == 1 && c == 'R';
        close(pfd[0]);
        ck_assert_msg(ready, "the fleet server did not start");
}

static SSL_CTX *client_ctx(const char *cert, const char *key)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = ca_pem, .cert_pem = cert, .key_pem = key, .peer_roles = SP_ROLE_CONTROLPLANE, .alpn = alpn};
        sp_error *e = NULL;
        SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, &e);
        sp_test_ok(ctx ? 0 : -1, &e);
        return ctx;
}

static json_object *rpc(SSL_CTX *ctx, const char *method, json_object *req, sp_error **err)
{
        json_object *resp = NULL;
        if (sp_rpc_call_sync(fleet_addr, ctx, method, req, 30000, &resp, err) < 0)
                return NULL;
        return resp;
}

static const char *field(json_object *o, const char *name)
{
        json_object *v;
        return json_object_object_get_ex(o, name, &v) ? json_object_get_string(v) : NULL;
}

/* Join with role dataplane: a CSR for csr_role named csr_name, and extra fields (JSON object text, or NULL). */
static json_object *dp_join(const char *token, sp_role csr_role, const char *csr_name, const char *name,
                            const char *extra, char **ret_key, sp_error **err)
{
        _cleanup_free_ char *csr = NULL, *key = NULL;
        sp_error *e = NULL;
        sp_test_ok(sp_pki_csr_create(csr_role, csr_name, NULL, &csr, &key, &e), &e);
        _cleanup_json_ json_object *req = NULL;
        if (extra)
                sp_test_ok(sp_json_parse(extra, strlen(extra), &req, &e), &e);
        else
                req = json_object_new_object();
        json_object_object_add(req, "role", json_object_new_string("dataplane"));
        json_object_object_add(req, "token", json_object_new_string(token));
        json_object_object_add(req, "name", json_object_new_string(name));
        json_object_object_add(req, "csr", json_object_new_string(csr));
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL);
        json_object *resp = rpc(anon, "Join", req, err);
        if (resp && ret_key)
                *ret_key = TAKE_PTR(key);
        return resp;
}

START_TEST(dataplane_joins_and_learns_the_keys)
{
        fleet_up();
        sp_error *e = NULL;
        char tid[SP_ID_MAX], once_id[SP_ID_MAX];
        _cleanup_free_ char *token = NULL, *once = NULL;
        sp_test_ok(cp_jointoken_create(db, "dataplane", "dp", 3600, 0, &token, tid, &e), &e);
        sp_test_ok(cp_jointoken_create(db, "dataplane", "dp-once", 3600, 1, &once, once_id, &e), &e);

        /* Refusals, each with its reason; none uses the one-use token up, none records anything. */
        static const struct {
                sp_role role;
                const char *csr_name, *name, *extra;
                sp_errc code;
                const char *want;
        } refused[] = {
                {SP_ROLE_DATAPLANE, "dp-1", "dp-1", "{\"address\":\"127.0.0.1:1\"}", SP_E_INVALID,
                 "field 'address' is not allowed with role dataplane"},
                {SP_ROLE_DATAPLANE, "dp-1", "dp-1", "{\"backend\":\"jail\"}", SP_E_INVALID,
                 "field 'backend' is not allowed with role dataplane"},
                {SP_ROLE_DATAPLANE, "dp-1", "dp-1", "{\"labels\":{}}", SP_E_INVALID,
                 "field 'labels' is not allowed with role dataplane"},
                {SP_ROLE_DATAPLANE, "dp-1", "dp-1", "{\"x\":1}", SP_E_INVALID, "unknown field 'x'"},
                {SP_ROLE_DATAPLANE, "dp-1", "DP_1", NULL, SP_E_INVALID, "name 'DP_1' must be"},
                {SP_ROLE_WORKER, "dp-1", "dp-1", NULL, SP_E_PERMISSION, "csr"},
                {SP_ROLE_DATAPLANE, "dp-2", "dp-1", NULL, SP_E_INVALID, "common name 'dp-2'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(refused); i++) {
                json_object *no = dp_join(once, refused[i].role, refused[i].csr_name, refused[i].name, refused[i].extra,
                                          NULL, &e);
                ck_assert_msg(!no, "refusal %zu joined", i);
                ck_assert_msg(e->code == refused[i].code && strstr(e->message, refused[i].want), "refusal %zu: %s", i,
                              e->message);
                e = sp_error_free(e);
        }
        json_object *bad = dp_join("spj_jtk_00000000000000000000_x", SP_ROLE_DATAPLANE, "dp-1", "dp-1", NULL, NULL, &e);
        ck_assert_ptr_null(bad);
        ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);
        ck_assert_str_eq(e->message, "Join: invalid join token");
        e = sp_error_free(e);
        {
                _cleanup_json_ json_object *req = json_object_new_object();
                json_object_object_add(req, "role", json_object_new_string("gateway"));
                _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL);
                ck_assert_ptr_null(rpc(anon, "Join", req, &e));
                ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "role must be worker or dataplane"), "%s",
                              e->message);
                e = sp_error_free(e);
        }
        _cleanup_free_ char *left = query1("SELECT uses_left FROM join_tokens WHERE id = $1", once_id);
        ck_assert_str_eq(left, "1");
        _cleanup_free_ char *audits = query1("SELECT count(*) FROM audit_log WHERE action = 'dataplane.join'", NULL);
        ck_assert_str_eq(audits, "0");

        /* The one-use token joins once: a dataplane certificate from the cluster CA, and the keys. */
        _cleanup_free_ char *key = NULL;
        _cleanup_json_ json_object *r = dp_join(once, SP_ROLE_DATAPLANE, "dp-1", "dp-1", NULL, &key, &e);
        ck_assert_msg(r, "%s", e ? e->message : "");
        ck_assert_ptr_null(field(r, "worker_id"));
        ck_assert_str_eq(field(r, "ca"), ca_pem);
        sp_pki_cert_info info;
        sp_test_ok(sp_pki_cert_verify(ca_pem, field(r, "certificate"), SP_ROLE_DATAPLANE, &info, &e), &e);
        ck_assert_str_eq(info.name, "dp-1");
        json_object *keys = NULL;
        ck_assert(json_object_object_get_ex(r, "token_keys", &keys) && json_object_is_type(keys, json_type_array));
        ck_assert_uint_eq(json_object_array_length(keys), 1);
        _cleanup_token_verifier_ sp_token_verifier *v = verifier_of(keys);
        _cleanup_free_ char *t = sign_now("ses_x");
        _cleanup_json_ json_object *claims = sp_token_verify(v, t, sp_now_real_us() / SP_USEC_PER_SEC, &e);
        sp_test_ok(claims ? 0 : -1, &e);
        _cleanup_free_ char *used = query1("SELECT uses_left FROM join_tokens WHERE id = $1", once_id);
        ck_assert_str_eq(used, "0");
        _cleanup_free_ char *nworkers = query1("SELECT count(*) FROM workers", NULL);
        ck_assert_str_eq(nworkers, "0");
        char sql[300];
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM audit_log WHERE action = 'dataplane.join' AND target = $1 AND "
                 "detail->>'token_id' = '%s' AND detail->>'cert_serial' = '%s'",
                 once_id, info.serial);
        _cleanup_free_ char *audit = query1(sql, "dp-1");
        ck_assert_str_eq(audit, "1");
        json_object *again = dp_join(once, SP_ROLE_DATAPLANE, "dp-1", "dp-1", NULL, NULL, &e);
        ck_assert_ptr_null(again);
        ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);
        e = sp_error_free(e);

        /* TokenKeys: the data plane learns a rotated key, the current one first. */
        _cleanup_(SSL_CTX_freep) SSL_CTX *dp = client_ctx(field(r, "certificate"), key);
        _cleanup_json_ json_object *empty = json_object_new_object();
        char kid[SP_TOKEN_KID_LEN + 1];
        rotate(kid);
        _cleanup_json_ json_object *k2 = rpc(dp, "TokenKeys", empty, &e);
        ck_assert_msg(k2, "%s", e ? e->message : "");
        json_object *arr = NULL;
        ck_assert(json_object_object_get_ex(k2, "token_keys", &arr));
        ck_assert_uint_eq(json_object_array_length(arr), 2);
        _cleanup_json_ json_object *first = json_object_new_array();
        json_object_array_add(first, json_object_get(json_object_array_get_idx(arr, 0)));
        _cleanup_token_verifier_ sp_token_verifier *vf = verifier_of(first);
        _cleanup_free_ char *t2 = sign_now("ses_y");
        _cleanup_json_ json_object *c2 = sp_token_verify(vf, t2, sp_now_real_us() / SP_USEC_PER_SEC, &e);
        sp_test_ok(c2 ? 0 : -1, &e);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(c2, "kid")), kid);
        /* ... and nothing but {} is asked. */
        _cleanup_json_ json_object *extra = json_object_new_object();
        json_object_object_add(extra, "all", json_object_new_boolean(true));
        ck_assert_ptr_null(rpc(dp, "TokenKeys", extra, &e));
        ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "unknown field 'all'"), "%s", e->message);
        e = sp_error_free(e);

        /* A worker may ask too; a control plane may not, nor a client without a certificate. */
        _cleanup_free_ char *wcsr = NULL, *wkey = NULL;
        sp_test_ok(sp_pki_csr_create(SP_ROLE_WORKER, "node-a", NULL, &wcsr, &wkey, &e), &e);
        _cleanup_free_ char *wcert = sp_pki_csr_sign(ca, wcsr, SP_ROLE_WORKER, 1, NULL, &e);
        sp_test_ok(wcert ? 0 : -1, &e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *worker = client_ctx(wcert, wkey);
        _cleanup_json_ json_object *k3 = rpc(worker, "TokenKeys", empty, &e);
        ck_assert_msg(k3, "%s", e ? e->message : "");
        _cleanup_free_ char *ccert = NULL, *ckey = NULL;
        sp_test_ok(sp_pki_issue(ca, SP_ROLE_CONTROLPLANE, "cp-x", NULL, 1, &ccert, &ckey, &e), &e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *cpc = client_ctx(ccert, ckey);
        ck_assert_ptr_null(rpc(cpc, "TokenKeys", empty, &e));
        ck_assert_int_eq(e->code, SP_E_PERMISSION);
        e = sp_error_free(e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL);
        ck_assert_ptr_null(rpc(anon, "TokenKeys", empty, &e));
        ck_assert_msg(e->code == SP_E_PERMISSION || e->code == SP_E_UNAUTHENTICATED, "%s", e->message);
        e = sp_error_free(e);
        /* A data plane that has joined may not join again with its certificate. */
        _cleanup_json_ json_object *rejoin = json_object_new_object();
        json_object_object_add(rejoin, "role", json_object_new_string("dataplane"));
        ck_assert_ptr_null(rpc(dp, "Join", rejoin, &e));
        ck_assert_int_eq(e->code, SP_E_PERMISSION);
        e = sp_error_free(e);
}
END_TEST

int main(void)
{
        sp_test_pg_require();
        Suite *s = suite_create("cp_sessions_fleet");
        TCase *tc = tcase_create("keys");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, signing_key_created_once_when_racing);
        tcase_add_test(tc, rotation_keeps_old_tokens_verifying);
        tcase_add_test(tc, dataplane_joins_and_learns_the_keys);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
