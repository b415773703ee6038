/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker fleet against a real PostgreSQL: the cluster CA created once by
 * racing replicas; join tokens (one answer for every bad token, uses counted,
 * a refused join consumes nothing); heartbeats allowed only from the worker
 * named by the certificate; unreachable workers, quarantine and admin states;
 * NOTIFY when the controllers have something to do. Then the real thing: a
 * space-worker daemon joins a fleet server running in this test with a join
 * token, heartbeats its templates and capacity, survives the control plane
 * going away, restarts on its saved certificate without the token, and
 * serves its RPC to the control plane over mTLS only.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleet/fleet.h"
#include "sched/placement.h"
#include "harness.h"
#include "launcher.h"
#include "pg.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/rpc_pool.h"
#include "space/time.h"
#include "store/workers.h"

#define HEARTBEAT_MS 200
#define WAIT_MS 60000

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

static sp_test_pg pg;
static char *conninfo;
static cp_db *db;
static sp_pki_ca *ca;
static char *ca_pem;
static char fleet_addr[64];
static int fleet_port;
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

static void fleet_stop(void)
{
        if (fleet_pid > 0) {
                kill(fleet_pid, SIGKILL);
                waitpid(fleet_pid, NULL, 0);
        }
        fleet_pid = 0;
}

static void teardown(void)
{
        fleet_stop();
        sp_pki_ca_free(ca);
        free(ca_pem);
        cp_db_close(db);
        free(conninfo);
}

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
        cp_fleet_config cfg = {.heartbeat_ms = HEARTBEAT_MS};
        if (cp_db_open(conninfo, &sdb, &e) < 0 || cp_fleet_cluster_ca(sdb, &sca, &e) < 0 ||
            !(f = cp_fleet_new(sdb, sca, &cfg, &e)) || cp_fleet_tls(sca, "cp-test", NULL, 1, &ctx, NULL, &e) < 0 ||
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

/* Starts (or restarts) the fleet server on fleet_addr; it dies with this process. */
static void fleet_start(void)
{
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

/* A fleet server on a fresh port, and the CA in this process. */
static void fleet_up(void)
{
        sp_error *e = NULL;
        sp_test_ok(cp_fleet_cluster_ca(db, &ca, &e), &e);
        ca_pem = sp_pki_ca_cert_pem(ca, &e);
        sp_test_ok(ca_pem ? 0 : -1, &e);
        fleet_port = sp_test_free_port(&e);
        sp_test_ok(fleet_port, &e);
        snprintf(fleet_addr, sizeof(fleet_addr), "127.0.0.1:%d", fleet_port);
        fleet_start();
}

/* ---- clients ---- */

static SSL_CTX *client_ctx(const char *cert, const char *key, unsigned server_roles)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = ca_pem, .cert_pem = cert, .key_pem = key, .peer_roles = server_roles, .alpn = alpn};
        sp_error *e = NULL;
        SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, &e);
        sp_test_ok(ctx ? 0 : -1, &e);
        return ctx;
}

static json_object *parse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_object *parse(const char *fmt, ...)
{
        _cleanup_free_ char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        ck_assert_int_ge(vasprintf(&text, fmt, ap), 0);
        va_end(ap);
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(text, strlen(text), &o, NULL) == 0, "bad test JSON: %s", text);
        return o;
}

/* Calls the fleet; returns the response, or NULL with *err. */
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

static json_object *join_request(const char *token, const char *name, const char *csr, const char *address)
{
        json_object *r = json_object_new_object();
        json_object_object_add(r, "token", json_object_new_string(token));
        json_object_object_add(r, "name", json_object_new_string(name));
        json_object_object_add(r, "csr", json_object_new_string(csr));
        json_object_object_add(r, "address", json_object_new_string(address));
        json_object_object_add(r, "backend", json_object_new_string("jail"));
        json_object_object_add(r, "labels", parse("{\"zone\":\"a\"}"));
        return r;
}

/* Joins as name (a CSR for role); returns Join's answer or NULL with *err; key out. */
static json_object *try_join(const char *token, sp_role role, const char *csr_name, const char *name, char **ret_key,
                             sp_error **err)
{
        _cleanup_free_ char *csr = NULL, *key = NULL;
        sp_error *e = NULL;
        sp_test_ok(sp_pki_csr_create(role, csr_name, NULL, &csr, &key, &e), &e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL, SP_ROLE_CONTROLPLANE);
        _cleanup_json_ json_object *req = join_request(token, name, csr, "127.0.0.1:7071");
        json_object *resp = rpc(anon, "Join", req, err);
        if (resp && ret_key)
                *ret_key = TAKE_PTR(key);
        return resp;
}

typedef struct joined {
        char id[SP_ID_MAX];
        char *cert, *key;
        SSL_CTX *ctx; /* a client with the worker's certificate */
} joined;

static void join_ok(const char *token, const char *name, joined *w)
{
        sp_error *e = NULL;
        memset(w, 0, sizeof(*w));
        _cleanup_json_ json_object *r = try_join(token, SP_ROLE_WORKER, name, name, &w->key, &e);
        ck_assert_msg(r, "join %s: %s", name, e ? e->message : "?");
        ck_assert(sp_id_valid(field(r, "worker_id"), "wkr"));
        snprintf(w->id, sizeof(w->id), "%s", field(r, "worker_id"));
        w->cert = strdup(field(r, "certificate"));
        w->ctx = client_ctx(w->cert, w->key, SP_ROLE_CONTROLPLANE);
}

static void joined_free(joined *w)
{
        free(w->cert);
        free(w->key);
        SSL_CTX_free(w->ctx);
}

static char *new_token(int64_t uses, char id[static SP_ID_MAX])
{
        sp_error *e = NULL;
        char *token = NULL;
        sp_test_ok(cp_jointoken_create(db, "worker", "test", 3600, uses, &token, id, &e), &e);
        return token;
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

#define BODY_FMT \
        "{\"address\":\"127.0.0.1:7071\",\"backend\":\"jail\",\"labels\":{\"zone\":\"a\"}," \
        "\"capacity\":{\"cpu_millis\":4000,\"memory_mb\":8192,\"slots\":16}," \
        "\"used\":{\"cpu_millis\":1000,\"memory_mb\":512,\"slots\":1}," \
        "\"templates\":[%s],\"warm\":{\"base\":1},\"sandboxes\":[%s]}"

static json_object *heartbeat(SSL_CTX *ctx, const char *templates, const char *sandboxes, sp_error **err)
{
        _cleanup_json_ json_object *req = parse(BODY_FMT, templates, sandboxes);
        return rpc(ctx, "Heartbeat", req, err);
}

static void heartbeat_ok(SSL_CTX *ctx, const char *templates, const char *sandboxes)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *r = heartbeat(ctx, templates, sandboxes, &e);
        ck_assert_msg(r, "heartbeat: %s", e ? e->message : "?");
}

/* ---- the store and the RPC methods ---- */

START_TEST(ca_created_once_when_racing)
{
        /* Four replicas start together; a closed pipe is their starting gun. */
        _cleanup_free_ char *dir = sp_test_tmpdir("ca");
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
                        sp_pki_ca *got = NULL;
                        if (cp_db_open(conninfo, &mine, NULL) < 0 || cp_fleet_cluster_ca(mine, &got, NULL) < 0)
                                _exit(2);
                        char *pem = sp_pki_ca_cert_pem(got, NULL), path[600];
                        snprintf(path, sizeof(path), "%s/ca%d.pem", dir, i);
                        _exit(pem && sp_file_write_atomic(path, pem, strlen(pem), 0600, NULL) == 0 ? 0 : 3);
                }
        }
        close(gun[0]);
        close(gun[1]);
        for (int i = 0; i < 4; i++) {
                int st = 0;
                ck_assert_int_eq(waitpid(kids[i], &st, 0), kids[i]);
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "replica %d failed: %d", i, st);
        }
        _cleanup_free_ char *count = query1("SELECT count(*) FROM cluster_ca", NULL);
        ck_assert_str_eq(count, "1");
        _cleanup_free_ char *stored = query1("SELECT cert_pem FROM cluster_ca", NULL);
        for (int i = 0; i < 4; i++) {
                char path[600];
                snprintf(path, sizeof(path), "%s/ca%d.pem", dir, i);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                sp_error *e = NULL;
                sp_test_ok(sp_file_read(path, 1 << 20, &b, &e), &e);
                ck_assert_str_eq(b.data, stored);
        }
        /* A later start loads the same CA. */
        sp_error *e = NULL;
        sp_test_ok(cp_fleet_cluster_ca(db, &ca, &e), &e);
        _cleanup_free_ char *again = sp_pki_ca_cert_pem(ca, &e);
        ck_assert_str_eq(again, stored);
        sp_test_tmpdir_remove(dir);
}
END_TEST

START_TEST(join_tokens)
{
        fleet_up();
        sp_error *e = NULL;
        char good_id[SP_ID_MAX], once_id[SP_ID_MAX], expired_id[SP_ID_MAX], revoked_id[SP_ID_MAX], any_id[SP_ID_MAX];
        _cleanup_free_ char *good = new_token(2, good_id);
        _cleanup_free_ char *once = new_token(1, once_id);
        _cleanup_free_ char *expired = new_token(0, expired_id);
        _cleanup_free_ char *revoked = new_token(0, revoked_id);
        _cleanup_free_ char *any = new_token(0, any_id);
        ck_assert(strncmp(good, "spj_jtk_", 8) == 0);
        const char *params[] = {expired_id};
        sp_test_ok(cp_db_exec(db, "UPDATE join_tokens SET expires_at = now() - interval '1 second' WHERE id = $1", 1,
                              params, NULL, &e),
                   &e);
        sp_test_ok(cp_jointoken_revoke(db, revoked_id, &e), &e);
        ck_assert_int_eq(cp_jointoken_revoke(db, revoked_id, &e), -SP_E_NOT_FOUND);
        e = sp_error_free(e);

        /* A good token joins: the certificate names the worker, role worker, from the cluster CA. */
        _cleanup_free_ char *key = NULL;
        _cleanup_json_ json_object *r = try_join(good, SP_ROLE_WORKER, "node-a", "node-a", &key, &e);
        ck_assert_msg(r, "%s", e ? e->message : "");
        const char *id = field(r, "worker_id");
        ck_assert(sp_id_valid(id, "wkr"));
        ck_assert_str_eq(field(r, "ca"), ca_pem);
        ck_assert_str_eq(field(r, "heartbeat_ms"), "200");
        sp_pki_cert_info info;
        sp_test_ok(sp_pki_cert_verify(ca_pem, field(r, "certificate"), SP_ROLE_WORKER, &info, &e), &e);
        ck_assert_str_eq(info.name, "node-a");
        _cleanup_free_ char *serial = query1("SELECT cert_serial FROM workers WHERE name = 'node-a'", NULL);
        ck_assert_str_eq(serial, info.serial);
        _cleanup_free_ char *row = query1("SELECT id || ' ' || address || ' ' || backend || ' ' || labels::text || "
                                          "' ' || state || ' ' || admin_state FROM workers WHERE name = 'node-a'",
                                          NULL);
        char want[256];
        snprintf(want, sizeof(want), "%s 127.0.0.1:7071 jail {\"zone\": \"a\"} ready active", id);
        ck_assert_str_eq(row, want);
        char sql[256];
        snprintf(sql, sizeof(sql),
                 "SELECT count(*) FROM audit_log WHERE action = 'worker.join' AND target = $1 AND "
                 "detail->>'token_id' = '%s' AND detail->>'name' = 'node-a' AND NOT (detail->>'rejoin')::boolean",
                 good_id);
        _cleanup_free_ char *audit = query1(sql, id);
        ck_assert_str_eq(audit, "1");
        _cleanup_free_ char *left = query1("SELECT uses_left FROM join_tokens WHERE id = $1", good_id);
        ck_assert_str_eq(left, "1");
        /* the token itself is stored nowhere */
        _cleanup_free_ char *leaked = query1("SELECT count(*) FROM join_tokens WHERE position($1::bytea in "
                                             "secret_hash) > 0",
                                             good);
        ck_assert_str_eq(leaked, "0");

        /* A join under the name of a worker that has joined before takes over its sandboxes: without
         * an operator's consent it is refused, takes nothing over and consumes no use of the token.
         * With consent, while that worker is alive (it just joined), it is "unavailable". */
        ck_assert_ptr_null(try_join(good, SP_ROLE_WORKER, "node-a", "node-a", NULL, &e));
        ck_assert_msg(e->code == SP_E_PERMISSION && strstr(e->message, "spacectl worker allow-rejoin node-a"), "%s",
                      e->message);
        e = sp_error_free(e);
        sp_test_ok(cp_db_exec(db,
                              "UPDATE workers SET rejoin_allowed_until = now() + interval '1 hour' "
                              "WHERE name = 'node-a'",
                              0, NULL, NULL, &e),
                   &e);
        ck_assert_ptr_null(try_join(good, SP_ROLE_WORKER, "node-a", "node-a", NULL, &e));
        ck_assert_msg(e->code == SP_E_UNAVAILABLE && strstr(e->message, "is alive"), "%s", e->message);
        e = sp_error_free(e);
        _cleanup_free_ char *kept = query1("SELECT cert_serial FROM workers WHERE name = 'node-a'", NULL);
        ck_assert_str_eq(kept, serial);
        _cleanup_free_ char *still = query1("SELECT uses_left FROM join_tokens WHERE id = $1", good_id);
        ck_assert_str_eq(still, "1");
        /* A heartbeat two intervals ago still counts as alive; once silent for three, the name is free. */
        sp_test_ok(cp_db_exec(db,
                              "UPDATE workers SET last_heartbeat = now() - interval '400 milliseconds' "
                              "WHERE name = 'node-a'",
                              0, NULL, NULL, &e),
                   &e);
        ck_assert_ptr_null(try_join(good, SP_ROLE_WORKER, "node-a", "node-a", NULL, &e));
        ck_assert_int_eq(e->code, SP_E_UNAVAILABLE);
        e = sp_error_free(e);
        /* Silent for three intervals, but the control plane has just (re)connected to its database
         * (a restart, an outage: heartbeats could not be recorded): it waits as long again. */
        fleet_stop();
        fleet_start();
        sp_test_ok(cp_db_exec(db,
                              "UPDATE workers SET last_heartbeat = now() - interval '700 milliseconds' "
                              "WHERE name = 'node-a'",
                              0, NULL, NULL, &e),
                   &e);
        ck_assert_ptr_null(try_join(good, SP_ROLE_WORKER, "node-a", "node-a", NULL, &e));
        ck_assert_msg(e->code == SP_E_UNAVAILABLE && strstr(e->message, "able to hear from workers for only"), "%s",
                      e->message);
        e = sp_error_free(e);
        usleep(700 * 1000);
        sp_test_ok(cp_db_exec(db,
                              "UPDATE workers SET last_heartbeat = now() - interval '700 milliseconds' "
                              "WHERE name = 'node-a'",
                              0, NULL, NULL, &e),
                   &e);
        /* That rejoin (its state was lost) keeps the id and takes the new certificate and address. */
        _cleanup_json_ json_object *again = try_join(good, SP_ROLE_WORKER, "node-a", "node-a", NULL, &e);
        ck_assert_msg(again, "%s", e ? e->message : "");
        /* The consent was for one join; given again, a join right after is refused like one under
         * a live worker's (the new holder counts as heard from at its join), and the old certificate
         * no longer speaks for the worker. */
        ck_assert_ptr_null(try_join(any, SP_ROLE_WORKER, "node-a", "node-a", NULL, &e));
        ck_assert_msg(e->code == SP_E_PERMISSION, "%s", e->message);
        e = sp_error_free(e);
        sp_test_ok(cp_db_exec(db,
                              "UPDATE workers SET rejoin_allowed_until = now() + interval '1 hour' "
                              "WHERE name = 'node-a'",
                              0, NULL, NULL, &e),
                   &e);
        ck_assert_ptr_null(try_join(any, SP_ROLE_WORKER, "node-a", "node-a", NULL, &e));
        ck_assert_msg(e->code == SP_E_UNAVAILABLE, "%s", e->message);
        e = sp_error_free(e);
        {
                _cleanup_(SSL_CTX_freep) SSL_CTX *old_ctx =
                        client_ctx(field(r, "certificate"), key, SP_ROLE_CONTROLPLANE);
                ck_assert_ptr_null(heartbeat(old_ctx, "\"base\"", "", &e));
                ck_assert_msg(e->code == SP_E_PERMISSION && strstr(e->message, "replaced by a later join"), "%s",
                              e->message);
                e = sp_error_free(e);
                _cleanup_json_ json_object *st = parse("{\"action\":\"status\"}");
                ck_assert_ptr_null(rpc(old_ctx, "DrainSelf", st, &e));
                ck_assert_msg(e->code == SP_E_PERMISSION, "%s", e->message);
                e = sp_error_free(e);
        }
        ck_assert_str_eq(field(again, "worker_id"), id);
        sp_test_ok(sp_pki_cert_verify(ca_pem, field(again, "certificate"), SP_ROLE_WORKER, &info, &e), &e);
        _cleanup_free_ char *serial2 = query1("SELECT cert_serial FROM workers WHERE name = 'node-a'", NULL);
        ck_assert_str_eq(serial2, info.serial);
        ck_assert_str_ne(serial2, serial);

        /* A token with one use joins once. */
        _cleanup_json_ json_object *first = try_join(once, SP_ROLE_WORKER, "node-b", "node-b", NULL, &e);
        ck_assert_msg(first, "%s", e ? e->message : "");

        /* Every bad token gets the same answer: used up (twice over), expired, revoked, wrong secret,
         * unknown id, garbage. */
        _cleanup_free_ char *wrong = strdup(any);
        wrong[strlen(wrong) - 1] = wrong[strlen(wrong) - 1] == 'A' ? 'B' : 'A';
        char unknown[256];
        snprintf(unknown, sizeof(unknown), "spj_jtk_00000000000000000000_%s", any + strlen("spj_jtk_") + 21);
        _cleanup_free_ char *huge = malloc(3000);
        memset(huge, 'x', 2999);
        huge[2999] = '\0';
        const char *bad[] = {good, once, expired, revoked, wrong, unknown, "", "spj_", "spj_jtk_../../_x", huge};
        char first_message[256] = "";
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                json_object *no = try_join(bad[i], SP_ROLE_WORKER, "node-c", "node-c", NULL, &e);
                ck_assert_msg(!no, "bad token %zu joined", i);
                ck_assert_msg(e->code == SP_E_UNAUTHENTICATED, "bad token %zu: %s", i, e->message);
                if (i == 0)
                        snprintf(first_message, sizeof(first_message), "%s", e->message);
                ck_assert_str_eq(e->message, first_message);
                e = sp_error_free(e);
        }
        ck_assert_str_eq(first_message, "Join: invalid join token");
        _cleanup_free_ char *nodec = query1("SELECT count(*) FROM workers WHERE name = 'node-c'", NULL);
        ck_assert_str_eq(nodec, "0");

        /* A CSR for another role, or for another name, is refused and consumes nothing. */
        _cleanup_free_ char *before = query1("SELECT count(*) FROM audit_log", NULL);
        ck_assert_ptr_null(try_join(any, SP_ROLE_CONTROLPLANE, "node-d", "node-d", NULL, &e));
        ck_assert_msg(e->code == SP_E_PERMISSION, "%s", e->message);
        e = sp_error_free(e);
        ck_assert_ptr_null(try_join(any, SP_ROLE_WORKER, "node-x", "node-d", NULL, &e));
        ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "common name"), "%s", e->message);
        e = sp_error_free(e);
        _cleanup_free_ char *after = query1("SELECT count(*) FROM audit_log", NULL);
        ck_assert_str_eq(after, before);
        _cleanup_free_ char *noded = query1("SELECT count(*) FROM workers WHERE name = 'node-d'", NULL);
        ck_assert_str_eq(noded, "0");
        _cleanup_free_ char *once_left = query1("SELECT uses_left FROM join_tokens WHERE id = $1", once_id);
        ck_assert_str_eq(once_left, "0");

        /* A token is for one role: a data planes' token cannot join a worker, nor the other way round
         * (refused, nothing consumed); one made before roles existed serves either. */
        char dp_id[SP_ID_MAX];
        _cleanup_free_ char *dp_token = NULL;
        sp_test_ok(cp_jointoken_create(db, "dataplane", "dp", 3600, 1, &dp_token, dp_id, &e), &e);
        ck_assert_ptr_null(try_join(dp_token, SP_ROLE_WORKER, "node-r", "node-r", NULL, &e));
        ck_assert_msg(e->code == SP_E_PERMISSION && strstr(e->message, "for a dataplane, not a worker"), "%s",
                      e->message);
        e = sp_error_free(e);
        _cleanup_free_ char *dp_left = query1("SELECT uses_left FROM join_tokens WHERE id = $1", dp_id);
        ck_assert_str_eq(dp_left, "1");
        _cleanup_free_ char *noder = query1("SELECT count(*) FROM workers WHERE name = 'node-r'", NULL);
        ck_assert_str_eq(noder, "0");
        {
                _cleanup_free_ char *csr = NULL, *k = NULL;
                sp_test_ok(sp_pki_csr_create(SP_ROLE_DATAPLANE, "dp-r", NULL, &csr, &k, &e), &e);
                _cleanup_(SSL_CTX_freep) SSL_CTX *anon_dp = client_ctx(NULL, NULL, SP_ROLE_CONTROLPLANE);
                char w_id[SP_ID_MAX];
                _cleanup_free_ char *w_token = new_token(1, w_id);
                _cleanup_json_ json_object *req = json_object_new_object();
                json_object_object_add(req, "role", json_object_new_string("dataplane"));
                json_object_object_add(req, "token", json_object_new_string(w_token));
                json_object_object_add(req, "name", json_object_new_string("dp-r"));
                json_object_object_add(req, "csr", json_object_new_string(csr));
                ck_assert_ptr_null(rpc(anon_dp, "Join", req, &e));
                ck_assert_msg(e->code == SP_E_PERMISSION && strstr(e->message, "for a worker, not a dataplane"), "%s",
                              e->message);
                e = sp_error_free(e);
                _cleanup_free_ char *w_left = query1("SELECT uses_left FROM join_tokens WHERE id = $1", w_id);
                ck_assert_str_eq(w_left, "1");
                /* A token of no role (made before roles existed) still joins a data plane. */
                sp_test_ok(cp_db_exec(db, "UPDATE join_tokens SET role = NULL WHERE id = $1", 1, (const char *[]){w_id},
                                      NULL, &e),
                           &e);
                _cleanup_json_ json_object *ok = rpc(anon_dp, "Join", req, &e);
                ck_assert_msg(ok, "%s", e ? e->message : "");
                sp_test_ok(cp_db_exec(db, "DELETE FROM join_tokens WHERE id = $1", 1, (const char *[]){w_id}, NULL, &e),
                           &e);
        }
        sp_test_ok(cp_jointoken_delete(db, dp_id, &e), &e);

        /* Bad requests say what is wrong. */
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL, SP_ROLE_CONTROLPLANE);
        const char *bad_names[] = {"Node-A", "-a", "a_b", "",
                                   "a234567890123456789012345678901234567890123456789012345678901234"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_names); i++) {
                ck_assert_ptr_null(try_join(any, SP_ROLE_WORKER, "node-e", bad_names[i], NULL, &e));
                ck_assert_msg(e->code == SP_E_INVALID, "name '%s': %s", bad_names[i], e->message);
                e = sp_error_free(e);
        }
        const char *bad_addresses[] = {"0.0.0.0:7071", "[::]:7071", "host", "host:0", "host:70000", "unix:/x", ":80"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_addresses); i++) {
                _cleanup_json_ json_object *req = join_request(any, "node-e", "x", bad_addresses[i]);
                ck_assert_ptr_null(rpc(anon, "Join", req, &e));
                ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "address"), "%s: %s", bad_addresses[i],
                              e->message);
                e = sp_error_free(e);
        }
        _cleanup_json_ json_object *extra = join_request(any, "node-e", "x", "10.0.0.1:7071");
        json_object_object_add(extra, "admin", json_object_new_boolean(1));
        ck_assert_ptr_null(rpc(anon, "Join", extra, &e));
        ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "unknown field 'admin'"), "%s", e->message);
        e = sp_error_free(e);

        /* Tokens list without secrets, each in its state. */
        _cleanup_json_ json_object *list = NULL;
        sp_test_ok(cp_jointoken_list(db, &list, &e), &e);
        ck_assert_int_eq(json_object_array_length(list), 5);
        const char *ids[] = {good_id, once_id, expired_id, revoked_id, any_id};
        const char *states[] = {"used", "used", "expired", "revoked", "active"};
        for (size_t i = 0; i < 5; i++) {
                json_object *t = json_object_array_get_idx(list, i);
                ck_assert_str_eq(field(t, "id"), ids[i]);
                ck_assert_str_eq(field(t, "state"), states[i]);
        }
        ck_assert_ptr_null(strstr(sp_json_str(list), "spj_"));
        char tid[SP_ID_MAX];
        char *tok = NULL;
        ck_assert_int_eq(cp_jointoken_create(db, "worker", "x", 0, 1, &tok, tid, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_jointoken_create(db, "worker", "x", 60, -1, &tok, tid, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_jointoken_create(db, "worker", "a\nb", 60, 1, &tok, tid, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_jointoken_revoke(db, "jtk_nope", &e), -SP_E_NOT_FOUND);
        e = sp_error_free(e);
}
END_TEST

START_TEST(heartbeats_only_from_the_worker_named)
{
        fleet_up();
        sp_error *e = NULL;
        char tid[SP_ID_MAX];
        _cleanup_free_ char *token = new_token(0, tid);
        joined w;
        join_ok(token, "node-a", &w);

        _cleanup_json_ json_object *r =
                heartbeat(w.ctx, "\"base\"", "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\"}", &e);
        ck_assert_msg(r, "%s", e ? e->message : "");
        ck_assert_str_eq(field(r, "worker_id"), w.id);
        ck_assert_str_eq(field(r, "state"), "ready");
        ck_assert_str_eq(field(r, "admin_state"), "active");
        ck_assert_str_eq(field(r, "heartbeat_ms"), "200");

        _cleanup_json_ json_object *got = NULL;
        sp_test_ok(cp_worker_get(db, w.id, &got, &e), &e);
        json_object *cap, *obs, *used, *v;
        ck_assert(json_object_object_get_ex(got, "capacity", &cap));
        ck_assert_str_eq(sp_json_str(cap), "{\"cpu_millis\":4000,\"memory_mb\":8192,\"slots\":16}");
        ck_assert(json_object_object_get_ex(got, "observed", &obs));
        ck_assert(json_object_object_get_ex(obs, "templates", &v));
        ck_assert_str_eq(sp_json_str(v), "[\"base\"]");
        ck_assert(json_object_object_get_ex(obs, "sandboxes", &v));
        ck_assert_int_eq(json_object_array_length(v), 1);
        ck_assert(json_object_object_get_ex(obs, "warm", &v));
        ck_assert_str_eq(sp_json_str(v), "{\"base\":1}");
        /* "used" is what the control plane placed there, not what the worker says */
        ck_assert(json_object_object_get_ex(got, "used", &used));
        ck_assert_str_eq(sp_json_str(used), "{\"cpu_millis\":0,\"memory_mb\":0,\"slots\":0}");
        ck_assert_ptr_nonnull(field(got, "last_heartbeat"));
        ck_assert_str_eq(field(got, "state"), "ready");
        ck_assert_str_eq(field(got, "health"), "ready");
        ck_assert_str_eq(field(got, "name"), "node-a");

        /* Someone else's certificate, another role, or none at all: refused, and the row keeps its data. */
        _cleanup_free_ char *gcert = NULL, *gkey = NULL, *dcert = NULL, *dkey = NULL;
        sp_test_ok(sp_pki_issue(ca, SP_ROLE_WORKER, "ghost", NULL, 1, &gcert, &gkey, &e), &e);
        sp_test_ok(sp_pki_issue(ca, SP_ROLE_DATAPLANE, "node-a", NULL, 1, &dcert, &dkey, &e), &e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *ghost = client_ctx(gcert, gkey, SP_ROLE_CONTROLPLANE);
        _cleanup_(SSL_CTX_freep) SSL_CTX *dp = client_ctx(dcert, dkey, SP_ROLE_CONTROLPLANE);
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL, SP_ROLE_CONTROLPLANE);
        SSL_CTX *refused[] = {ghost, dp, anon};
        for (size_t i = 0; i < SP_ARRAY_SIZE(refused); i++) {
                ck_assert_ptr_null(heartbeat(refused[i], "", "", &e));
                ck_assert_msg(e->code == SP_E_PERMISSION, "client %zu: %s", i, e->message);
                e = sp_error_free(e);
        }
        _cleanup_free_ char *ghosts = query1("SELECT count(*) FROM workers WHERE name = 'ghost'", NULL);
        ck_assert_str_eq(ghosts, "0");
        /* A worker certificate may not join again over mTLS either: Join is for peers without one. */
        _cleanup_free_ char *csr = NULL, *k2 = NULL;
        sp_test_ok(sp_pki_csr_create(SP_ROLE_WORKER, "node-a", NULL, &csr, &k2, &e), &e);
        _cleanup_json_ json_object *jr = join_request(token, "node-a", csr, "127.0.0.1:7071");
        ck_assert_ptr_null(rpc(w.ctx, "Join", jr, &e));
        ck_assert_int_eq(e->code, SP_E_PERMISSION);
        e = sp_error_free(e);

        /* Bad heartbeats are refused whole. */
        struct {
                const char *templates, *sandboxes, *needle;
        } bad[] = {
                {"\"base\"", "{\"id\":\"sbx_1\",\"state\":\"exploded\",\"template\":\"base\"}", "unknown state"},
                {"\"base\"", "{\"id\":\"../x\",\"state\":\"running\",\"template\":\"base\"}", "sandboxes[0]"},
                {"\"base\"", "{\"id\":\"sbx_1\",\"state\":\"running\"}", "template"},
                {"\"base\"", "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\",\"pid\":1}", "pid"},
                {"\"a b\"", "", "templates[0]"},
                {"7", "", "templates[0]"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_ptr_null(heartbeat(w.ctx, bad[i].templates, bad[i].sandboxes, &e));
                ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, bad[i].needle), "bad %zu: %s", i,
                              e->message);
                e = sp_error_free(e);
        }
        /* Too many templates. */
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        for (int i = 0; i <= 10000; i++)
                sp_buf_appendf(&many, NULL, "%s\"t%d\"", i ? "," : "", i);
        ck_assert_ptr_null(heartbeat(w.ctx, many.data, "", &e));
        ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "more than 10000"), "%s", e->message);
        e = sp_error_free(e);
        _cleanup_free_ char *tpl = query1("SELECT observed->'templates' FROM workers WHERE id = $1", w.id);
        ck_assert_str_eq(tpl, "[\"base\"]");
        joined_free(&w);
}
END_TEST

#define BODY_ARTIFACTS_FMT \
        "{\"address\":\"127.0.0.1:7071\",\"backend\":\"jail\"," \
        "\"capacity\":{\"cpu_millis\":4000,\"memory_mb\":8192,\"slots\":16}," \
        "\"used\":{\"cpu_millis\":0,\"memory_mb\":0,\"slots\":0},\"templates\":[\"tpl_a\"],\"artifacts\":%s}"

START_TEST(heartbeat_artifacts_are_observed)
{
        fleet_up();
        sp_error *e = NULL;
        char tid[SP_ID_MAX];
        _cleanup_free_ char *token = new_token(0, tid);
        joined w;
        join_ok(token, "node-a", &w);
        _cleanup_json_ json_object *req = parse(BODY_ARTIFACTS_FMT, "{\"tpl_a\":1125899906842624}");
        _cleanup_json_ json_object *r = rpc(w.ctx, "Heartbeat", req, &e);
        ck_assert_msg(r, "%s", e ? e->message : "");
        _cleanup_free_ char *got = query1("SELECT observed->'artifacts' FROM workers WHERE id = $1", w.id);
        ck_assert_str_eq(got, "{\"tpl_a\": 1125899906842624}");
        /* none: an empty object */
        heartbeat_ok(w.ctx, "\"base\"", "");
        _cleanup_free_ char *none = query1("SELECT observed->'artifacts' FROM workers WHERE id = $1", w.id);
        ck_assert_str_eq(none, "{}");
        const char *bad[] = {"[]", "{\"a b\":1}", "{\"tpl_a\":-1}", "{\"tpl_a\":1125899906842625}",
                             "{\"tpl_a\":\"1\"}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *b = parse(BODY_ARTIFACTS_FMT, bad[i]);
                ck_assert_ptr_null(rpc(w.ctx, "Heartbeat", b, &e));
                ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "artifacts"), "bad %zu: %s", i, e->message);
                e = sp_error_free(e);
        }
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        sp_buf_append_str(&many, "{", NULL);
        for (int i = 0; i <= 10000; i++)
                sp_buf_appendf(&many, NULL, "%s\"t%d\":1", i ? "," : "", i);
        sp_buf_append_str(&many, "}", NULL);
        _cleanup_json_ json_object *b = parse(BODY_ARTIFACTS_FMT, many.data);
        ck_assert_ptr_null(rpc(w.ctx, "Heartbeat", b, &e));
        ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "more than 10000"), "%s", e->message);
        e = sp_error_free(e);
        joined_free(&w);
}
END_TEST

#define BODY_JOBS_FMT \
        "{\"address\":\"127.0.0.1:%d\",\"backend\":\"jail\"," \
        "\"capacity\":{\"cpu_millis\":4000,\"memory_mb\":8192,\"slots\":16}," \
        "\"used\":{\"cpu_millis\":0,\"memory_mb\":0,\"slots\":0},\"templates\":[\"base\"],\"jobs\":%s}"

static void heartbeat_jobs(joined *w, int port, const char *jobs)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *req = parse(BODY_JOBS_FMT, port, jobs);
        _cleanup_json_ json_object *r = rpc(w->ctx, "Heartbeat", req, &e);
        ck_assert_msg(r, "%s", e ? e->message : "");
}

#define placed_on(w) placed_on_at(w, __LINE__)
static void placed_on_at(const joined *want, int line)
{
        sp_error *e = NULL;
        cp_placement pl;
        sp_test_ok(cp_placement_choose(db, "base", "{\"resources\":{\"cpu_millis\":100,\"memory_mb\":64}}", NULL, NULL,
                                       &pl, &e),
                   &e);
        ck_assert_msg(strcmp(pl.worker_id, want->id) == 0, "line %d: placed on %s, not %s", line, pl.worker_id,
                      want->id);
}

/* A worker's job queue (issue 18) reaches the scheduler: a create goes to a
 * worker with a job thread free, the queue being what the worker reported or
 * the creates placed there and not yet running, whichever is more. */
START_TEST(heartbeat_jobs_steer_placement)
{
        fleet_up();
        sp_error *e = NULL;
        char tid[SP_ID_MAX];
        _cleanup_free_ char *token = new_token(0, tid);
        joined a, b;
        join_ok(token, "node-a", &a);
        join_ok(token, "node-b", &b);

        /* Both idle: equal room, the smaller name. */
        heartbeat_jobs(&a, 7071, "{\"threads\":4,\"running\":0,\"queued\":0}");
        heartbeat_jobs(&b, 7072, "{\"threads\":4,\"running\":0,\"queued\":0}");
        _cleanup_free_ char *stored = query1("SELECT observed->'jobs' FROM workers WHERE id = $1", a.id);
        ck_assert_str_eq(stored, "{\"queued\": 0, \"running\": 0, \"threads\": 4}");
        placed_on(&a);

        /* node-a's threads all taken, requests waiting: node-b. */
        heartbeat_jobs(&a, 7071, "{\"threads\":4,\"running\":4,\"queued\":3}");
        placed_on(&b);
        /* Both full: the shorter queue. */
        heartbeat_jobs(&b, 7072, "{\"threads\":4,\"running\":4,\"queued\":5}");
        placed_on(&a);

        /* node-a reports itself idle, but four creates placed on it are not
         * running yet (its heartbeat is older than them): node-b. */
        heartbeat_jobs(&a, 7071, "{\"threads\":4,\"running\":0,\"queued\":0}");
        heartbeat_jobs(&b, 7072, "{\"threads\":4,\"running\":1,\"queued\":0}");
        placed_on(&a);
        const char *pab[] = {a.id, b.id};
        /* (node-b gets four running ones, so that both have the same room) */
        sp_test_ok(
                cp_db_exec(
                        db,
                        "INSERT INTO sandboxes (id, tenant_id, template, spec, desired_state, observed_state, "
                        "worker_id) SELECT 'sbx_jobsa' || g, 'ten_system', 'base', '{}'::jsonb, 'running', 'creating', "
                        "$1 FROM generate_series(1, 4) g UNION ALL SELECT 'sbx_jobsb' || g, 'ten_system', "
                        "'base', '{}'::jsonb, 'running', 'running', $2 FROM generate_series(1, 4) g",
                        2, pab, NULL, &e),
                &e);
        placed_on(&b);
        sp_test_ok(cp_db_exec(db, "UPDATE sandboxes SET observed_state = 'running' WHERE id LIKE 'sbx_jobs%'", 0, NULL,
                              NULL, &e),
                   &e);
        placed_on(&a);

        /* A heartbeat without jobs (an older worker) is taken, and not held against it. */
        heartbeat_ok(b.ctx, "\"base\"", "");
        _cleanup_free_ char *none =
                query1("SELECT coalesce(observed->'jobs', 'null') FROM workers WHERE id = $1", b.id);
        ck_assert_str_eq(none, "null");

        const char *bad[] = {"[]", "{\"threads\":4,\"running\":0}", "{\"threads\":-1,\"running\":0,\"queued\":0}",
                             "{\"threads\":4,\"running\":0,\"queued\":1000001}",
                             "{\"threads\":4,\"running\":0,\"queued\":0,\"waiting\":1}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *req = parse(BODY_JOBS_FMT, 7071, bad[i]);
                ck_assert_ptr_null(rpc(a.ctx, "Heartbeat", req, &e));
                ck_assert_msg(e->code == SP_E_INVALID && strstr(e->message, "jobs"), "bad %zu: %s", i, e->message);
                e = sp_error_free(e);
        }
        sp_test_ok(cp_db_exec(db, "DELETE FROM sandboxes WHERE id LIKE 'sbx_jobs%'", 0, NULL, NULL, &e), &e);
        joined_free(&a);
        joined_free(&b);
}
END_TEST

/* ---- NOTIFY ---- */

static PGconn *listener(void)
{
        PGconn *c = PQconnectdb(conninfo);
        ck_assert_int_eq(PQstatus(c), CONNECTION_OK);
        PGresult *r = PQexec(c, "LISTEN space_work");
        ck_assert_int_eq(PQresultStatus(r), PGRES_COMMAND_OK);
        PQclear(r);
        return c;
}

/* Reads notifications until our own marker arrives; returns how many came before it
 * and the payload of the last of them. NOTIFYs arrive in commit order, so
 * everything the calls before the marker caused is counted. */
static int drain(PGconn *c, char *last, size_t len)
{
        static int n_marker;
        char marker[64];
        snprintf(marker, sizeof(marker), "marker-%d", ++n_marker);
        const char *params[] = {marker};
        sp_error *e = NULL;
        sp_test_ok(cp_db_exec(db, "SELECT pg_notify('space_work', $1)", 1, params, NULL, &e), &e);
        int count = 0;
        int64_t deadline = sp_now_mono_us() + 30 * SP_USEC_PER_SEC;
        for (;;) {
                ck_assert_msg(sp_now_mono_us() < deadline, "no marker notification");
                struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
                poll(&p, 1, 1000);
                ck_assert_int_eq(PQconsumeInput(c), 1);
                PGnotify *n;
                while ((n = PQnotifies(c))) {
                        bool is_marker = strcmp(n->extra, marker) == 0;
                        if (!is_marker) {
                                count++;
                                snprintf(last, len, "%s", n->extra);
                        }
                        PQfreemem(n);
                        if (is_marker)
                                return count;
                }
        }
}

START_TEST(notify_when_there_is_something_to_do)
{
        fleet_up();
        PGconn *l = listener();
        char tid[SP_ID_MAX], last[128] = "", want[64];
        _cleanup_free_ char *token = new_token(0, tid);
        joined w;
        join_ok(token, "node-a", &w);
        snprintf(want, sizeof(want), "worker:%s", w.id);
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1); /* the join */
        ck_assert_str_eq(last, want);

        const char *two = "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\"},"
                          "{\"id\":\"sbx_2\",\"state\":\"paused\",\"template\":\"base\"}";
        const char *two_swapped = "{\"id\":\"sbx_2\",\"state\":\"paused\",\"template\":\"base\"},"
                                  "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\"}";
        heartbeat_ok(w.ctx, "\"base\"", two); /* the first report is a change */
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1);
        ck_assert_str_eq(last, want);
        heartbeat_ok(w.ctx, "\"base\"", two); /* the same again: nothing to do */
        heartbeat_ok(w.ctx, "\"base\"", two_swapped); /* order does not matter */
        ck_assert_int_eq(drain(l, last, sizeof(last)), 0);
        /* a state changes */
        heartbeat_ok(w.ctx, "\"base\"",
                     "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\"},"
                     "{\"id\":\"sbx_2\",\"state\":\"running\",\"template\":\"base\"}");
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1);
        /* a sandbox goes away */
        heartbeat_ok(w.ctx, "\"base\"", "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\"}");
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1);
        /* a template arrives */
        heartbeat_ok(w.ctx, "\"base\",\"py\"", "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\"}");
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1);
        /* health: marked unreachable (one), heard again (one) */
        sp_error *e = NULL;
        const char *params[] = {w.id};
        sp_test_ok(cp_db_exec(db, "UPDATE workers SET last_heartbeat = now() - interval '1 hour' WHERE id = $1", 1,
                              params, NULL, &e),
                   &e);
        int changed = -1;
        sp_test_ok(cp_worker_mark_unreachable(db, 3, &changed, &e), &e);
        ck_assert_int_eq(changed, 1);
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1);
        heartbeat_ok(w.ctx, "\"base\",\"py\"", "{\"id\":\"sbx_1\",\"state\":\"running\",\"template\":\"base\"}");
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1);
        ck_assert_str_eq(last, want);
        /* operators: cordon (one), cordon again (none) */
        sp_test_ok(cp_worker_set_admin_state(db, w.id, "cordoned", &e), &e);
        sp_test_ok(cp_worker_set_admin_state(db, w.id, "cordoned", &e), &e);
        ck_assert_int_eq(drain(l, last, sizeof(last)), 1);
        PQfinish(l);
        joined_free(&w);
}
END_TEST

START_TEST(unreachable_quarantine_and_admin_states)
{
        fleet_up();
        sp_error *e = NULL;
        char tid[SP_ID_MAX];
        _cleanup_free_ char *token = new_token(0, tid);
        joined a, b;
        join_ok(token, "node-a", &a);
        join_ok(token, "node-b", &b);
        heartbeat_ok(a.ctx, "\"base\"", "");
        heartbeat_ok(b.ctx, "\"base\"", "");

        /* a falls silent for an hour: marked unreachable; b, heard just now (within 100 intervals), is not */
        const char *pa[] = {a.id};
        sp_test_ok(cp_db_exec(db, "UPDATE workers SET last_heartbeat = now() - interval '1 hour' WHERE id = $1", 1, pa,
                              NULL, &e),
                   &e);
        int changed = -1;
        sp_test_ok(cp_worker_mark_unreachable(db, 100, &changed, &e), &e);
        ck_assert_int_eq(changed, 1);
        sp_test_ok(cp_worker_mark_unreachable(db, 100, &changed, &e), &e);
        ck_assert_int_eq(changed, 0);
        _cleanup_json_ json_object *ga = NULL, *gb = NULL;
        sp_test_ok(cp_worker_get(db, a.id, &ga, &e), &e);
        sp_test_ok(cp_worker_get(db, b.id, &gb, &e), &e);
        ck_assert_str_eq(field(ga, "state"), "unreachable");
        ck_assert_str_eq(field(gb, "state"), "ready");
        ck_assert_int_eq(cp_worker_mark_unreachable(db, 0, &changed, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        /* its next heartbeat brings it back */
        _cleanup_json_ json_object *back = heartbeat(a.ctx, "\"base\"", "", &e);
        ck_assert_msg(back, "%s", e ? e->message : "");
        ck_assert_str_eq(field(back, "state"), "ready");

        /* failures: below the threshold nothing happens, a success resets the count */
        sp_test_ok(cp_worker_record_result(db, a.id, false, 3, "create failed", &e), &e);
        sp_test_ok(cp_worker_record_result(db, a.id, false, 3, "create failed", &e), &e);
        _cleanup_free_ char *f2 = query1("SELECT failures || ' ' || state FROM workers WHERE id = $1", a.id);
        ck_assert_str_eq(f2, "2 ready");
        sp_test_ok(cp_worker_record_result(db, a.id, true, 3, NULL, &e), &e);
        for (int i = 0; i < 3; i++)
                sp_test_ok(cp_worker_record_result(db, a.id, false, 3, "create failed:\nagent timeout", &e), &e);
        json_object_put(ga);
        sp_test_ok(cp_worker_get(db, a.id, &ga, &e), &e);
        ck_assert_str_eq(field(ga, "state"), "quarantined");
        ck_assert_str_eq(field(ga, "health"), "quarantined");
        ck_assert_str_eq(field(ga, "quarantine_reason"), "create failed: agent timeout");
        ck_assert_str_eq(field(ga, "failures"), "3");
        /* a heartbeat does not lift a quarantine, and the worker is told */
        _cleanup_json_ json_object *q = heartbeat(a.ctx, "\"base\"", "", &e);
        ck_assert_msg(q, "%s", e ? e->message : "");
        ck_assert_str_eq(field(q, "state"), "quarantined");
        /* quarantined wins over cordoned in the one word */
        sp_test_ok(cp_worker_set_admin_state(db, a.id, "cordoned", &e), &e);
        json_object_put(ga);
        sp_test_ok(cp_worker_get(db, a.id, &ga, &e), &e);
        ck_assert_str_eq(field(ga, "state"), "quarantined");
        ck_assert_str_eq(field(ga, "admin_state"), "cordoned");
        /* lifted: heard recently, so ready at once (and cordoned shows); a long interval keeps
         * "recently" true however slow this machine is */
        sp_test_ok(cp_db_exec(db, "UPDATE workers SET heartbeat_ms = 600000 WHERE id = $1", 1, pa, NULL, &e), &e);
        sp_test_ok(cp_worker_unquarantine(db, a.id, &e), &e);
        json_object_put(ga);
        sp_test_ok(cp_worker_get(db, a.id, &ga, &e), &e);
        ck_assert_str_eq(field(ga, "health"), "ready");
        ck_assert_str_eq(field(ga, "state"), "cordoned");
        ck_assert_str_eq(field(ga, "failures"), "0");
        ck_assert_ptr_null(field(ga, "quarantine_reason"));
        sp_test_ok(cp_worker_set_admin_state(db, a.id, "draining", &e), &e);
        json_object_put(ga);
        sp_test_ok(cp_worker_get(db, a.id, &ga, &e), &e);
        ck_assert_str_eq(field(ga, "admin_state"), "draining");
        ck_assert_str_eq(field(ga, "state"), "drained"); /* no sandbox holds resources there */
        sp_test_ok(cp_worker_set_admin_state(db, a.id, "active", &e), &e);
        /* a quarantine lifted from a silent worker leaves it unreachable until it is heard */
        for (int i = 0; i < 2; i++)
                sp_test_ok(cp_worker_record_result(db, b.id, false, 2, NULL, &e), &e);
        const char *pb[] = {b.id};
        sp_test_ok(cp_db_exec(db, "UPDATE workers SET last_heartbeat = now() - interval '1 hour' WHERE id = $1", 1, pb,
                              NULL, &e),
                   &e);
        sp_test_ok(cp_worker_unquarantine(db, b.id, &e), &e);
        _cleanup_free_ char *bs = query1("SELECT state || ' ' || coalesce(quarantine_reason, '-') FROM workers "
                                         "WHERE id = $1",
                                         b.id);
        ck_assert_str_eq(bs, "unreachable -");
        heartbeat_ok(b.ctx, "\"base\"", "");
        _cleanup_free_ char *bs2 = query1("SELECT state FROM workers WHERE id = $1", b.id);
        ck_assert_str_eq(bs2, "ready");

        /* unknown workers and bad values */
        ck_assert_int_eq(cp_worker_get(db, "wkr_00000000000000000000", &gb, &e), -SP_E_NOT_FOUND);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_worker_set_admin_state(db, "wkr_00000000000000000000", "cordoned", &e), -SP_E_NOT_FOUND);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_worker_set_admin_state(db, a.id, "paused", &e), -SP_E_INVALID);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_worker_record_result(db, "wkr_00000000000000000000", false, 3, NULL, &e), -SP_E_NOT_FOUND);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_worker_record_result(db, a.id, false, 0, NULL, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        ck_assert_int_eq(cp_worker_unquarantine(db, "wkr_00000000000000000000", &e), -SP_E_NOT_FOUND);
        e = sp_error_free(e);

        /* used: the sandboxes placed on it that hold resources there */
        sp_test_ok(
                cp_db_exec(
                        db,
                        "INSERT INTO sandboxes (id, tenant_id, template, spec, desired_state, observed_state, "
                        "worker_id, deleted_at) VALUES "
                        "('sbx_u1', 'ten_system', 'base', '{\"resources\":{\"cpu_millis\":1000,\"memory_mb\":512}}', "
                        "'running', 'running', $1, NULL), "
                        "('sbx_u2', 'ten_system', 'base', '{\"resources\":{\"cpu_millis\":500,\"memory_mb\":256}}', "
                        "'running', 'creating', $1, NULL), "
                        "('sbx_u3', 'ten_system', 'base', '{\"resources\":{\"cpu_millis\":2000,\"memory_mb\":4096}}', "
                        "'suspended', 'suspended', $1, NULL), "
                        "('sbx_u4', 'ten_system', 'base', '{\"resources\":{\"cpu_millis\":2000,\"memory_mb\":4096}}', "
                        "'deleted', 'running', $1, now()), "
                        "('sbx_u5', 'ten_system', 'base', '{}', 'running', 'paused', $1, NULL)",
                        1, pa, NULL, &e),
                &e);
        _cleanup_json_ json_object *all = NULL;
        sp_test_ok(cp_worker_list(db, &all, &e), &e);
        ck_assert_int_eq(json_object_array_length(all), 2);
        json_object *first = json_object_array_get_idx(all, 0), *second = json_object_array_get_idx(all, 1), *used;
        ck_assert_str_eq(field(first, "name"), "node-a");
        ck_assert_str_eq(field(second, "name"), "node-b");
        ck_assert(json_object_object_get_ex(first, "used", &used));
        ck_assert_str_eq(sp_json_str(used), "{\"cpu_millis\":1500,\"memory_mb\":768,\"slots\":3}");
        ck_assert(json_object_object_get_ex(second, "used", &used));
        ck_assert_str_eq(sp_json_str(used), "{\"cpu_millis\":0,\"memory_mb\":0,\"slots\":0}");
        joined_free(&a);
        joined_free(&b);
}
END_TEST

/* ---- a real space-worker joins ---- */

static char *top;
static char cgparent[64];

static void daemon_case_setup(void)
{
        case_setup();
        top = sp_test_tmpdir("fleet");
        snprintf(cgparent, sizeof(cgparent), "space-test-%d", (int)getpid());
}

static void daemon_case_teardown(void)
{
        char cmd[2048];
        snprintf(cmd, sizeof(cmd),
                 "for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] || continue; "
                 "for p in $(cat $d/*/cgroup.procs 2>/dev/null); do kill -9 $p 2>/dev/null; done; done; "
                 "sleep 0.3; for d in /sys/fs/cgroup/*/%s /sys/fs/cgroup/%s; do [ -d \"$d\" ] && "
                 "rmdir $d/* $d 2>/dev/null; done; for m in $(awk '$5 ~ \"^%s/\" {print $5}' /proc/self/mountinfo); "
                 "do umount -l $m; done; true",
                 cgparent, cgparent, cgparent, cgparent, top);
        if (system(cmd) != 0)
                fprintf(stderr, "cleanup script failed\n");
        sp_test_tmpdir_remove(top);
        free(top);
        case_teardown();
}

static int count_in_file(const char *path, const char *needle)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(path, 64 << 20, &b, NULL) < 0 || !b.data)
                return 0;
        int n = 0;
        for (const char *p = b.data; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

/* Waits until needle appears n times in the file. */
static void wait_count(const char *path, const char *needle, int n)
{
        int64_t deadline = sp_now_mono_us() + WAIT_MS * SP_USEC_PER_MSEC;
        while (count_in_file(path, needle) < n) {
                ck_assert_msg(sp_now_mono_us() < deadline, "'%s' not %d times in %s", needle, n, path);
                usleep(100000);
        }
        ck_assert_int_eq(count_in_file(path, needle), n);
}

/* Waits until the worker row named name satisfies cond (an SQL boolean over w). */
static void wait_worker(const char *name, const char *cond)
{
        char sql[1024];
        snprintf(sql, sizeof(sql), "SELECT count(*) FROM workers w WHERE name = $1 AND (%s)", cond);
        int64_t deadline = sp_now_mono_us() + WAIT_MS * SP_USEC_PER_MSEC;
        for (;;) {
                _cleanup_free_ char *n = query1(sql, name);
                if (strcmp(n, "1") == 0)
                        return;
                ck_assert_msg(sp_now_mono_us() < deadline, "worker %s never had %s", name, cond);
                usleep(100000);
        }
}

/* DrainSelf: a worker drains itself and undoes only its own drain; it acts on itself alone. */
static json_object *drain_self(const joined *w, const char *action, sp_error **err)
{
        _cleanup_json_ json_object *req = parse("{\"action\":\"%s\"}", action);
        return rpc(w->ctx, "DrainSelf", req, err);
}

static void drain_self_ok(const joined *w, const char *action, const char *state, const char *admin, bool self)
{
        sp_error *e = NULL;
        _cleanup_json_ json_object *r = drain_self(w, action, &e);
        ck_assert_msg(r, "DrainSelf %s: %s", action, e ? e->message : "?");
        ck_assert_str_eq(field(r, "worker_id"), w->id);
        ck_assert_str_eq(field(r, "state"), state);
        ck_assert_str_eq(field(r, "admin_state"), admin);
        /* false is left out of the answer */
        ck_assert_str_eq(field(r, "by_self") ? field(r, "by_self") : "false", self ? "true" : "false");
        ck_assert_str_eq(field(r, "sandboxes"), "0");
}

START_TEST(workers_drain_themselves)
{
        fleet_up();
        sp_error *e = NULL;
        char tid[SP_ID_MAX];
        _cleanup_free_ char *token = new_token(0, tid);
        joined a, b;
        join_ok(token, "node-a", &a);
        join_ok(token, "node-b", &b);
        drain_self_ok(&a, "status", "ready", "active", false);
        drain_self_ok(&a, "uncordon", "ready", "active", false); /* nothing to undo */
        drain_self_ok(&a, "drain", "drained", "draining", true);
        drain_self_ok(&a, "drain", "drained", "draining", true); /* again: nothing changes */
        drain_self_ok(&b, "status", "ready", "active", false); /* the other is untouched */
        _cleanup_free_ char *audit = query1("SELECT count(*) FROM audit_log WHERE action = 'worker.drain' AND "
                                            "target = $1 AND detail->>'by' = 'worker'",
                                            a.id);
        ck_assert_str_eq(audit, "1");
        drain_self_ok(&a, "uncordon", "ready", "active", false);

        /* An operator's drain or cordon is the operator's: the worker cannot lift it, and draining a
         * cordoned worker does not make the drain its own. */
        sp_test_ok(cp_worker_set_admin_state(db, b.id, "draining", &e), &e);
        ck_assert_ptr_null(drain_self(&b, "uncordon", &e));
        ck_assert_msg(e->code == SP_E_PRECONDITION && strstr(e->message, "only an operator lifts it"), "%s",
                      e->message);
        e = sp_error_free(e);
        drain_self_ok(&b, "status", "drained", "draining", false);
        sp_test_ok(cp_worker_set_admin_state(db, a.id, "cordoned", &e), &e);
        drain_self_ok(&a, "drain", "drained", "draining", false);
        ck_assert_ptr_null(drain_self(&a, "uncordon", &e));
        ck_assert_int_eq(e->code, SP_E_PRECONDITION);
        e = sp_error_free(e);
        /* A drain the worker made, taken over by an operator, is the operator's. */
        sp_test_ok(cp_worker_set_admin_state(db, a.id, "active", &e), &e);
        drain_self_ok(&a, "drain", "drained", "draining", true);
        sp_test_ok(cp_worker_set_admin_state(db, a.id, "draining", &e), &e);
        drain_self_ok(&a, "status", "drained", "draining", false);

        /* Bad actions, no certificate, a data plane's certificate. */
        ck_assert_ptr_null(drain_self(&a, "stop", &e));
        ck_assert_msg(e->code == SP_E_INVALID, "%s", e->message);
        e = sp_error_free(e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL, SP_ROLE_CONTROLPLANE);
        _cleanup_json_ json_object *req = parse("{\"action\":\"status\"}");
        ck_assert_ptr_null(rpc(anon, "DrainSelf", req, &e));
        ck_assert_msg(e->code == SP_E_PERMISSION || e->code == SP_E_UNAUTHENTICATED, "%s", e->message);
        e = sp_error_free(e);
        _cleanup_free_ char *dcert = NULL, *dkey = NULL;
        sp_test_ok(sp_pki_issue(ca, SP_ROLE_DATAPLANE, "node-a", NULL, 1, &dcert, &dkey, &e), &e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *dp = client_ctx(dcert, dkey, SP_ROLE_CONTROLPLANE);
        ck_assert_ptr_null(rpc(dp, "DrainSelf", req, &e));
        ck_assert_msg(e->code == SP_E_PERMISSION, "%s", e->message);
        e = sp_error_free(e);
        joined_free(&a);
        joined_free(&b);
}
END_TEST

/* One call through a pool that checks the worker it reaches (cp_fleet_verify_worker), as the
 * control plane's: key names the worker meant. 0 or the error's code. */
typedef struct pool_call {
        bool done;
        int code;
        struct event_base *base;
} pool_call;

static void pool_reply(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        pool_call *pc = userdata;
        pc->done = true;
        pc->code = err ? (int)err->code : 0;
        if (err)
                fprintf(stderr, "pool call: %s\n", err->message);
        event_base_loopbreak(pc->base);
}

static int call_through_pool(SSL_CTX *cp, const char *key, const char *addr)
{
        sp_error *e = NULL;
        struct event_base *base = event_base_new();
        sp_rpc_pool *pool = sp_rpc_pool_new(base, cp, 4, &e);
        sp_test_ok(pool ? 0 : -1, &e);
        sp_rpc_pool_set_verify(pool, cp_fleet_verify_worker, db);
        sp_rpc_client *cli = sp_rpc_pool_get(pool, key, addr, NULL, &e);
        sp_test_ok(cli ? 0 : -1, &e);
        pool_call pc = {.base = base};
        _cleanup_json_ json_object *empty = json_object_new_object();
        sp_test_ok(sp_rpc_client_call(cli, "NodeInfo", empty, 20000, pool_reply, &pc, &e), &e);
        while (!pc.done)
                event_base_loop(base, EVLOOP_ONCE);
        sp_rpc_pool_free(pool);
        event_base_free(base);
        return pc.code;
}

START_TEST(worker_daemon_joins_and_heartbeats)
{
        fleet_up();
        sp_error *e = NULL;
        _cleanup_free_ char *dir = NULL;
        ck_assert_int_ge(asprintf(&dir, "%s/t%d", top, (int)getpid()), 0);
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        int port = sp_test_free_port(&e), http_port = sp_test_free_port(&e);
        sp_test_ok(port > 0 && http_port > 0 ? 0 : -1, &e);
        char ca_path[600], token_path[600], log_path[600], tls_dir[600];
        snprintf(ca_path, sizeof(ca_path), "%s/ca.crt", dir);
        snprintf(token_path, sizeof(token_path), "%s/token", dir);
        snprintf(log_path, sizeof(log_path), "%s/worker.log", dir);
        snprintf(tls_dir, sizeof(tls_dir), "%s/state/tls", dir);
        sp_test_ok(sp_file_write_atomic(ca_path, ca_pem, strlen(ca_pem), 0644, &e), &e);
        char tid[SP_ID_MAX];
        _cleanup_free_ char *token = new_token(1, tid);
        char token_line[300];
        snprintf(token_line, sizeof(token_line), "%s\n", token);
        sp_test_ok(sp_file_write_atomic(token_path, token_line, strlen(token_line), 0600, &e), &e);

        char bin[1024], state[700], storage[700], image[700], listen[80], http[80], cg[100], cpa[100], tca[700],
                tfile[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(state, sizeof(state), "--state-dir=%s/state", dir);
        snprintf(storage, sizeof(storage), "--storage-dir=%s/storage", dir);
        snprintf(image, sizeof(image), "--storage-image=%s/storage.img", dir);
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(http, sizeof(http), "--http-listen=127.0.0.1:%d", http_port);
        snprintf(cg, sizeof(cg), "--cgroup-parent=%s", cgparent);
        snprintf(cpa, sizeof(cpa), "--control-plane=%s", fleet_addr);
        snprintf(tca, sizeof(tca), "--tls-ca=%s", ca_path);
        snprintf(tfile, sizeof(tfile), "--join-token-file=%s", token_path);
        const char *argv[] = {bin,
                              state,
                              storage,
                              image,
                              "--storage-size=2G",
                              listen,
                              http,
                              "--slots=16",
                              "--log-format=text",
                              cg,
                              "--node-id=node-a",
                              "--labels=zone=test,disk=ssd",
                              cpa,
                              tca,
                              tfile,
                              NULL};
        sp_test_proc_opts opts = {.log_path = log_path};

        /* --insecure and --control-plane do not go together. */
        const char *insecure_argv[] = {bin, state, storage, image, listen, "--insecure", cpa, NULL};
        char ilog[700];
        snprintf(ilog, sizeof(ilog), "%s/insecure.log", dir);
        sp_test_proc_opts iopts = {.log_path = ilog};
        sp_test_proc bad = {0};
        sp_test_ok(sp_test_proc_start(&bad, "insecure", insecure_argv, &iopts, &e), &e);
        int st = 0;
        sp_test_ok(sp_test_proc_wait_exit(&bad, 30000, &st, &e), &e);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        ck_assert_int_eq(count_in_file(ilog, "cluster traffic is always mTLS"), 1);
        sp_test_proc_free(&bad);

        /* The first start joins with the token and heartbeats its templates and capacity. */
        sp_test_proc worker = {0};
        sp_test_ok(sp_test_proc_start(&worker, "worker", argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);
        wait_worker("node-a", "w.observed->'templates' ? 'base' AND w.capacity->>'slots' = '16' AND "
                              "w.observed->'jobs'->>'threads' = '4' AND "
                              "w.last_heartbeat IS NOT NULL AND w.state = 'ready'");
        char want_addr[64];
        snprintf(want_addr, sizeof(want_addr), "127.0.0.1:%d", port);
        _cleanup_free_ char *addr = query1("SELECT address FROM workers WHERE name = $1", "node-a");
        ck_assert_str_eq(addr, want_addr);
        _cleanup_free_ char *labels = query1("SELECT labels::text FROM workers WHERE name = $1", "node-a");
        ck_assert_str_eq(labels, "{\"disk\": \"ssd\", \"zone\": \"test\"}");
        _cleanup_free_ char *mem = query1("SELECT (capacity->>'memory_mb')::bigint > 0 AND "
                                          "(capacity->>'cpu_millis')::bigint > 0 FROM workers WHERE name = $1",
                                          "node-a");
        ck_assert_str_eq(mem, "t");
        _cleanup_free_ char *uses = query1("SELECT uses_left FROM join_tokens WHERE id = $1", tid);
        ck_assert_str_eq(uses, "0");
        const char *files[] = {"worker.key", "worker.crt", "ca.crt"};
        mode_t modes[] = {0600, 0600, 0644};
        for (size_t i = 0; i < 3; i++) {
                char p[700];
                struct stat sb;
                snprintf(p, sizeof(p), "%s/%s", tls_dir, files[i]);
                ck_assert_msg(stat(p, &sb) == 0, "%s is missing", p);
                ck_assert_msg((sb.st_mode & 0777) == modes[i], "%s has mode %o", p, sb.st_mode & 0777);
        }
        ck_assert_int_eq(count_in_file(log_path, "joined the cluster as node-a"), 1);

        /* The control plane calls the worker over mTLS; a client without a certificate, or with
         * a role the worker does not serve, is refused. */
        char waddr[64];
        snprintf(waddr, sizeof(waddr), "127.0.0.1:%d", port);
        _cleanup_(SSL_CTX_freep) SSL_CTX *cp = NULL;
        sp_test_ok(cp_fleet_tls(ca, "cp-test", NULL, 1, NULL, &cp, &e), &e);
        _cleanup_json_ json_object *empty = json_object_new_object();
        json_object *info = NULL;
        sp_test_ok(sp_rpc_call_sync(waddr, cp, "NodeInfo", empty, 30000, &info, &e), &e);
        ck_assert_str_eq(field(info, "id"), "node-a");
        json_object_put(info);
        _cleanup_(SSL_CTX_freep) SSL_CTX *anon = client_ctx(NULL, NULL, SP_ROLE_WORKER);
        ck_assert_int_lt(sp_rpc_call_sync(waddr, anon, "NodeInfo", empty, 30000, &info, &e), 0);
        e = sp_error_free(e);
        _cleanup_free_ char *wcert = NULL, *wkey = NULL;
        sp_test_ok(sp_pki_issue(ca, SP_ROLE_WORKER, "node-z", NULL, 1, &wcert, &wkey, &e), &e);
        _cleanup_(SSL_CTX_freep) SSL_CTX *other = client_ctx(wcert, wkey, SP_ROLE_WORKER);
        ck_assert_int_lt(sp_rpc_call_sync(waddr, other, "NodeInfo", empty, 30000, &info, &e), 0);
        e = sp_error_free(e);

        /* The control plane dials a worker by its row: the server there must present that worker's
         * current certificate. Another worker's row at this address (a node answering for another,
         * or a name taken over since) is refused before any call. */
        char tid2[SP_ID_MAX];
        _cleanup_free_ char *token2 = new_token(1, tid2);
        joined other_w;
        join_ok(token2, "node-other", &other_w);
        _cleanup_free_ char *a_id = query1("SELECT id FROM workers WHERE name = $1", "node-a");
        ck_assert_int_eq(call_through_pool(cp, a_id, waddr), 0);
        ck_assert_int_ne(call_through_pool(cp, other_w.id, waddr), 0);
        _cleanup_free_ char *a_serial = query1("SELECT cert_serial FROM workers WHERE name = $1", "node-a");
        sp_test_ok(
                cp_db_exec(db, "UPDATE workers SET cert_serial = 'feedface' WHERE name = 'node-a'", 0, NULL, NULL, &e),
                &e);
        ck_assert_int_ne(call_through_pool(cp, a_id, waddr), 0);
        const char *sp[] = {a_serial};
        sp_test_ok(cp_db_exec(db, "UPDATE workers SET cert_serial = $1 WHERE name = 'node-a'", 1, sp, NULL, &e), &e);
        ck_assert_int_eq(call_through_pool(cp, a_id, waddr), 0);
        /* The control plane's pools key a worker by id and serial (cp_fleet_worker_key): a
         * connection is made for one certificate, so a join under the name (a new serial) makes a
         * new, checked one instead of reusing it. */
        char key[CP_FLEET_WORKER_KEY_MAX];
        ck_assert_int_eq(cp_fleet_worker_key(db, a_id, key), 0);
        ck_assert_int_eq(call_through_pool(cp, key, waddr), 0);
        char stale[CP_FLEET_WORKER_KEY_MAX + 16];
        snprintf(stale, sizeof(stale), "%s/feedface", a_id);
        ck_assert_int_ne(call_through_pool(cp, stale, waddr), 0);
        joined_free(&other_w);
        sp_test_ok(cp_db_exec(db, "DELETE FROM workers WHERE name = 'node-other'", 0, NULL, NULL, &e), &e);

        /* The control plane goes away: the worker says so once, keeps trying, and is back when it is. */
        fleet_stop();
        sp_test_ok(sp_test_proc_wait_log(&worker, "control plane unreachable", WAIT_MS, &e), &e);
        usleep(5 * HEARTBEAT_MS * 1000);
        ck_assert_int_eq(count_in_file(log_path, "control plane unreachable"), 1);
        ck_assert(sp_test_proc_running(&worker));
        sp_test_ok(cp_db_exec(db, "UPDATE workers SET last_heartbeat = NULL WHERE name = 'node-a'", 0, NULL, NULL, &e),
                   &e);
        fleet_start();
        wait_worker("node-a", "w.last_heartbeat IS NOT NULL");
        wait_count(log_path, "control plane reachable", 2);

        /* Restarted without the token (which is used up anyway): it uses its saved certificate. */
        sp_test_ok(sp_test_proc_stop(&worker, 10000, &e) >= 0 ? 0 : -1, &e);
        sp_test_proc_free(&worker);
        ck_assert_int_eq(unlink(token_path), 0);
        const char *argv2[] = {bin,
                               state,
                               storage,
                               image,
                               "--storage-size=2G",
                               listen,
                               http,
                               "--slots=16",
                               "--log-format=text",
                               cg,
                               "--node-id=node-a",
                               cpa,
                               NULL};
        sp_test_ok(cp_db_exec(db, "UPDATE workers SET last_heartbeat = NULL WHERE name = 'node-a'", 0, NULL, NULL, &e),
                   &e);
        sp_test_ok(sp_test_proc_start(&worker, "worker", argv2, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&worker, "worker ready", 120000, &e), &e);
        wait_worker("node-a", "w.last_heartbeat IS NOT NULL AND w.observed->'templates' ? 'base'");
        ck_assert_int_eq(count_in_file(log_path, "joined the cluster"), 1);
        _cleanup_free_ char *nworkers = query1("SELECT count(*) FROM workers", NULL);
        ck_assert_str_eq(nworkers, "1");
        /* labels are what the worker says each time: none now */
        _cleanup_free_ char *labels2 = query1("SELECT labels::text FROM workers WHERE name = $1", "node-a");
        ck_assert_str_eq(labels2, "{}");

        /* A node's shutdown hook: --drain-self drains the worker with its own certificate (no admin
         * key) and waits until it is drained; --uncordon-self undoes it. A state directory without a
         * certificate has nothing to drain. */
        char dlog[700], nostate[700];
        snprintf(dlog, sizeof(dlog), "%s/drain.log", dir);
        snprintf(nostate, sizeof(nostate), "--state-dir=%s/empty", dir);
        ck_assert_int_eq(mkdir(nostate + strlen("--state-dir="), 0700), 0);
        const char *modes_argv[][8] = {
                {bin, state, "--node-id=node-a", cpa, "--drain-self", "--drain-timeout=60s", NULL},
                {bin, state, "--node-id=node-a", cpa, "--uncordon-self", NULL},
                {bin, nostate, "--node-id=node-q", cpa, "--drain-self", NULL},
        };
        const char *want_log[] = {"worker node-a is drained", "worker node-a is ready", "has not joined"};
        const char *want_admin[] = {"draining true", "active false", "active false"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(modes_argv); i++) {
                sp_test_proc_opts dopts = {.log_path = dlog};
                sp_test_proc p = {0};
                sp_test_ok(sp_test_proc_start(&p, "self", modes_argv[i], &dopts, &e), &e);
                sp_test_ok(sp_test_proc_wait_exit(&p, 90000, &st, &e), &e);
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mode %zu: status %d", i, st);
                sp_test_proc_free(&p);
                ck_assert_msg(count_in_file(dlog, want_log[i]) >= 1, "mode %zu: no '%s'", i, want_log[i]);
                _cleanup_free_ char *adm =
                        query1("SELECT admin_state || ' ' || admin_self FROM workers WHERE name = $1", "node-a");
                ck_assert_str_eq(adm, want_admin[i]);
        }
        /* An operator's drain is not the worker's to lift. */
        sp_test_ok(cp_db_exec(db,
                              "UPDATE workers SET admin_state = 'draining', drain_started_at = now() "
                              "WHERE name = 'node-a'",
                              0, NULL, NULL, &e),
                   &e);
        sp_test_proc p = {0};
        sp_test_proc_opts dopts = {.log_path = dlog};
        sp_test_ok(sp_test_proc_start(&p, "self", modes_argv[1], &dopts, &e), &e);
        sp_test_ok(sp_test_proc_wait_exit(&p, 90000, &st, &e), &e);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        sp_test_proc_free(&p);
        ck_assert_int_eq(count_in_file(dlog, "only an operator lifts it"), 1);
        _cleanup_free_ char *adm = query1("SELECT admin_state FROM workers WHERE name = $1", "node-a");
        ck_assert_str_eq(adm, "draining");
        ck_assert_int_eq(count_in_file(dlog, "Sanitizer"), 0);
        sp_test_ok(sp_test_proc_stop(&worker, 10000, &e) >= 0 ? 0 : -1, &e);
        sp_test_proc_free(&worker);
        /* under the sanitizers, both runs ended clean */
        ck_assert_int_eq(count_in_file(log_path, "Sanitizer"), 0);
}
END_TEST

int main(void)
{
        sp_test_pg_require();
        Suite *s = suite_create("cp_fleet");
        TCase *tc = tcase_create("fleet");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, ca_created_once_when_racing);
        tcase_add_test(tc, join_tokens);
        tcase_add_test(tc, workers_drain_themselves);
        tcase_add_test(tc, heartbeats_only_from_the_worker_named);
        tcase_add_test(tc, heartbeat_artifacts_are_observed);
        tcase_add_test(tc, heartbeat_jobs_steer_placement);
        tcase_add_test(tc, notify_when_there_is_something_to_do);
        tcase_add_test(tc, unreachable_quarantine_and_admin_states);
        suite_add_tcase(s, tc);
        if (sp_test_is_root()) {
                TCase *d = tcase_create("daemon");
                tcase_set_timeout(d, 300);
                tcase_add_unchecked_fixture(d, daemon_case_setup, daemon_case_teardown);
                tcase_add_checked_fixture(d, setup, teardown);
                tcase_add_test(d, worker_daemon_joins_and_heartbeats);
                suite_add_tcase(s, d);
        } else {
                fprintf(stderr, "SKIP: the daemon case needs root (btrfs, namespaces, cgroups)\n");
        }
        return sp_test_main(s);
}
