/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: mutual TLS between real sockets on 127.0.0.1. A server thread
 * accepts one connection per test and records what it saw; the client runs
 * on the test's thread. Every socket has a 10 s timeout, so a broken
 * handshake fails the test instead of hanging it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/pki.h"
#include "space/tls.h"

#define IO_TIMEOUT_S 10

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

/* One CA and a certificate per role, plus a worker certificate from another CA. */
typedef struct identity {
        char *cert, *key;
} identity;

static struct {
        char *ca_pem, *other_ca_pem;
        identity cp, worker, dp, foreign_worker;
} pki;

static void identity_issue(sp_pki_ca *ca, sp_role role, const char *name, identity *id)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *sans[] = {"127.0.0.1", "localhost", NULL};
        ck_assert_msg(sp_pki_issue(ca, role, name, sans, 1, &id->cert, &id->key, &e) == 0, "%s", e ? e->message : "");
}

static void pki_setup(void)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL, *other = NULL;
        ck_assert_int_eq(sp_pki_ca_create("cluster", 2, &ca, NULL), 0);
        ck_assert_int_eq(sp_pki_ca_create("cluster", 2, &other, NULL), 0);
        pki.ca_pem = sp_pki_ca_cert_pem(ca, NULL);
        pki.other_ca_pem = sp_pki_ca_cert_pem(other, NULL);
        identity_issue(ca, SP_ROLE_CONTROLPLANE, "cp", &pki.cp);
        identity_issue(ca, SP_ROLE_WORKER, "w1", &pki.worker);
        identity_issue(ca, SP_ROLE_DATAPLANE, "dp", &pki.dp);
        identity_issue(other, SP_ROLE_WORKER, "w1", &pki.foreign_worker);
}

static void pki_teardown(void)
{
        identity *all[] = {&pki.cp, &pki.worker, &pki.dp, &pki.foreign_worker};
        for (size_t i = 0; i < SP_ARRAY_SIZE(all); i++) {
                free(all[i]->cert);
                free(all[i]->key);
        }
        free(pki.ca_pem);
        free(pki.other_ca_pem);
        memset(&pki, 0, sizeof(pki));
}

static void sock_timeouts(int fd)
{
        struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
}

/* What the server saw of its one connection. */
typedef struct server {
        SSL_CTX *ctx;
        int lfd;
        uint16_t port;
        pthread_t thread;
        bool accepted, handshake_ok, had_peer_cert;
        long verify_result;
        int identity_rc;
        sp_role peer_role;
        char peer_name[SP_PKI_MAX_NAME + 1];
        char alpn[SP_TLS_MAX_ALPN_LEN + 1];
} server;

static void *server_run(void *arg)
{
        server *s = arg;
        struct pollfd p = {.fd = s->lfd, .events = POLLIN};
        if (poll(&p, 1, IO_TIMEOUT_S * 1000) != 1)
                return NULL;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
                return NULL;
        s->accepted = true;
        struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        SSL *ssl = SSL_new(s->ctx);
        SSL_set_fd(ssl, fd);
        s->handshake_ok = SSL_accept(ssl) == 1;
        s->verify_result = SSL_get_verify_result(ssl);
        s->had_peer_cert = SSL_get0_peer_certificate(ssl) != NULL;
        if (s->handshake_ok) {
                const unsigned char *proto = NULL;
                unsigned plen = 0;
                SSL_get0_alpn_selected(ssl, &proto, &plen);
                if (proto && plen < sizeof(s->alpn))
                        memcpy(s->alpn, proto, plen);
                char *name = NULL;
                sp_error *e = NULL;
                s->identity_rc = sp_tls_peer_identity(ssl, &s->peer_role, &name, &e);
                sp_error_free(e);
                if (name)
                        snprintf(s->peer_name, sizeof(s->peer_name), "%s", name);
                free(name);
                char msg[128];
                snprintf(msg, sizeof(msg), "ok %s %s", s->identity_rc == 0 ? sp_role_name(s->peer_role) : "-",
                         s->identity_rc == 0 ? s->peer_name : "-");
                SSL_write(ssl, msg, (int)strlen(msg));
                SSL_shutdown(ssl);
        }
        SSL_free(ssl);
        close(fd);
        ERR_clear_error();
        return NULL;
}

static void server_start(server *s, const sp_tls_config *cfg)
{
        memset(s, 0, sizeof(*s));
        _cleanup_error_ sp_error *e = NULL;
        s->ctx = sp_tls_server_ctx_new(cfg, &e);
        ck_assert_msg(s->ctx != NULL, "%s", e ? e->message : "");
        s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(s->lfd, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        ck_assert_int_eq(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
        ck_assert_int_eq(listen(s->lfd, 4), 0);
        socklen_t al = sizeof(a);
        ck_assert_int_eq(getsockname(s->lfd, (struct sockaddr *)&a, &al), 0);
        s->port = ntohs(a.sin_port);
        ck_assert_int_eq(pthread_create(&s->thread, NULL, server_run, s), 0);
}

static void server_finish(server *s)
{
        ck_assert_int_eq(pthread_join(s->thread, NULL), 0);
        close(s->lfd);
        SSL_CTX_free(s->ctx);
        s->ctx = NULL;
        ck_assert(s->accepted);
}

/* What the client saw. */
typedef struct client {
        bool connect_ok;
        long verify_result;
        int identity_rc;
        sp_role peer_role;
        char peer_name[SP_PKI_MAX_NAME + 1];
        char reply[128]; /* what the server wrote, "" if nothing */
        int version;
        char alpn[SP_TLS_MAX_ALPN_LEN + 1];
} client;

static void client_run(const server *s, const sp_tls_config *cfg, int max_version, client *c)
{
        memset(c, 0, sizeof(*c));
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = sp_tls_client_ctx_new(cfg, &e);
        ck_assert_msg(ctx != NULL, "%s", e ? e->message : "");
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fd, 0);
        sock_timeouts(fd);
        struct sockaddr_in a = {
                .sin_family = AF_INET, .sin_port = htons(s->port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
        SSL *ssl = SSL_new(ctx);
        ck_assert_ptr_nonnull(ssl);
        if (max_version)
                ck_assert(SSL_set_max_proto_version(ssl, max_version));
        SSL_set_fd(ssl, fd);
        c->connect_ok = SSL_connect(ssl) == 1;
        c->verify_result = SSL_get_verify_result(ssl);
        if (c->connect_ok) {
                c->version = SSL_version(ssl);
                const unsigned char *proto = NULL;
                unsigned plen = 0;
                SSL_get0_alpn_selected(ssl, &proto, &plen);
                if (proto && plen < sizeof(c->alpn))
                        memcpy(c->alpn, proto, plen);
                char *name = NULL;
                c->identity_rc = sp_tls_peer_identity(ssl, &c->peer_role, &name, NULL);
                if (name)
                        snprintf(c->peer_name, sizeof(c->peer_name), "%s", name);
                free(name);
                /* Under TLS 1.3 the server judges the client's certificate
                 * after the client has finished: a refusal shows up here. */
                int n = SSL_read(ssl, c->reply, sizeof(c->reply) - 1);
                if (n > 0)
                        c->reply[n] = '\0';
        }
        SSL_free(ssl);
        ERR_clear_error();
}

static const char *const alpn_h2[] = {"h2", NULL};

static sp_tls_config cfg_of(const char *ca, const identity *id, unsigned roles, const char *const *alpn)
{
        return (sp_tls_config){.ca_pem = ca,
                               .cert_pem = id ? id->cert : NULL,
                               .key_pem = id ? id->key : NULL,
                               .peer_roles = roles,
                               .alpn = alpn};
}

START_TEST(handshake_with_right_roles)
{
        server s;
        client c;
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, alpn_h2);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_CONTROLPLANE, alpn_h2);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert(s.handshake_ok);
        ck_assert(c.connect_ok);
        ck_assert_int_eq(c.version, TLS1_3_VERSION);
        ck_assert_int_eq(s.identity_rc, 0);
        ck_assert_int_eq(s.peer_role, SP_ROLE_WORKER);
        ck_assert_str_eq(s.peer_name, "w1");
        ck_assert_int_eq(c.identity_rc, 0);
        ck_assert_int_eq(c.peer_role, SP_ROLE_CONTROLPLANE);
        ck_assert_str_eq(c.peer_name, "cp");
        ck_assert_str_eq(c.reply, "ok worker w1");
        ck_assert_str_eq(s.alpn, "h2");
        ck_assert_str_eq(c.alpn, "h2");
}
END_TEST

START_TEST(handshake_tls12)
{
        server s;
        client c;
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_CONTROLPLANE | SP_ROLE_DATAPLANE, alpn_h2);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.dp, SP_ROLE_WORKER, alpn_h2);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, TLS1_2_VERSION, &c);
        server_finish(&s);
        ck_assert(c.connect_ok);
        ck_assert_int_eq(c.version, TLS1_2_VERSION);
        ck_assert_str_eq(c.reply, "ok dataplane dp");
        ck_assert_int_eq(c.peer_role, SP_ROLE_WORKER);
}
END_TEST

START_TEST(client_from_other_ca_refused)
{
        server s;
        client c;
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, NULL);
        /* The client trusts the server's CA but holds a certificate from another. */
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.foreign_worker, SP_ROLE_CONTROLPLANE, NULL);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert(!s.handshake_ok);
        ck_assert(s.verify_result == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
                  s.verify_result == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE ||
                  s.verify_result == X509_V_ERR_CERT_SIGNATURE_FAILURE);
        ck_assert_str_eq(c.reply, "");
}
END_TEST

START_TEST(client_with_unaccepted_role_refused)
{
        server s;
        client c;
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, NULL);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.dp, SP_ROLE_CONTROLPLANE, NULL);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert(!s.handshake_ok);
        ck_assert_int_eq(s.verify_result, X509_V_ERR_APPLICATION_VERIFICATION);
        ck_assert_str_eq(c.reply, "");
}
END_TEST

START_TEST(server_with_wrong_role_refused_by_client)
{
        server s;
        client c;
        /* A worker poses as the control plane. */
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_WORKER, NULL);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_CONTROLPLANE, NULL);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert(!c.connect_ok);
        ck_assert_int_eq(c.verify_result, X509_V_ERR_APPLICATION_VERIFICATION);
        ck_assert(!s.handshake_ok);
}
END_TEST

START_TEST(server_from_other_ca_refused_by_client)
{
        server s;
        client c;
        sp_tls_config scfg = cfg_of(pki.other_ca_pem, &pki.foreign_worker, SP_ROLE_CONTROLPLANE, NULL);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, NULL);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert(!c.connect_ok);
        ck_assert_int_ne(c.verify_result, X509_V_OK);
}
END_TEST

START_TEST(client_without_certificate_refused)
{
        server s;
        client c;
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, NULL);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, NULL, SP_ROLE_CONTROLPLANE, NULL);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert(!s.handshake_ok);
        ck_assert(!s.had_peer_cert);
        ck_assert_str_eq(c.reply, "");
}
END_TEST

START_TEST(public_server_asks_no_certificate)
{
        server s;
        client c;
        /* peer_roles 0: no client certificate requested, no CA needed. */
        sp_tls_config scfg = cfg_of(NULL, &pki.cp, 0, NULL);
        sp_tls_config anon = cfg_of(pki.ca_pem, NULL, SP_ROLE_CONTROLPLANE, NULL);
        server_start(&s, &scfg);
        client_run(&s, &anon, 0, &c);
        server_finish(&s);
        ck_assert(s.handshake_ok);
        ck_assert_str_eq(c.reply, "ok - -");
        ck_assert_int_eq(s.identity_rc, -SP_E_UNAUTHENTICATED);

        /* A client holding a certificate is not asked for it either. */
        sp_tls_config with_cert = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_CONTROLPLANE, NULL);
        server_start(&s, &scfg);
        client_run(&s, &with_cert, 0, &c);
        server_finish(&s);
        ck_assert(s.handshake_ok);
        ck_assert(!s.had_peer_cert);
        ck_assert_str_eq(c.reply, "ok - -");
}
END_TEST

START_TEST(optional_client_certificate)
{
        server s;
        client c;
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, alpn_h2);
        scfg.peer_optional = true;

        /* No certificate: the handshake completes, the peer has no identity. */
        sp_tls_config anon = cfg_of(pki.ca_pem, NULL, SP_ROLE_CONTROLPLANE, alpn_h2);
        server_start(&s, &scfg);
        client_run(&s, &anon, 0, &c);
        server_finish(&s);
        ck_assert(s.handshake_ok);
        ck_assert(!s.had_peer_cert);
        ck_assert_int_eq(s.identity_rc, -SP_E_UNAUTHENTICATED);
        ck_assert_str_eq(c.reply, "ok - -");
        ck_assert_int_eq(c.peer_role, SP_ROLE_CONTROLPLANE);

        /* An accepted certificate names its holder, under TLS 1.3 and 1.2. */
        sp_tls_config worker = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_CONTROLPLANE, alpn_h2);
        int versions[] = {0, TLS1_2_VERSION};
        for (size_t i = 0; i < SP_ARRAY_SIZE(versions); i++) {
                server_start(&s, &scfg);
                client_run(&s, &worker, versions[i], &c);
                server_finish(&s);
                ck_assert(s.handshake_ok);
                ck_assert_int_eq(s.identity_rc, 0);
                ck_assert_int_eq(s.peer_role, SP_ROLE_WORKER);
                ck_assert_str_eq(c.reply, "ok worker w1");
        }

        /* A certificate that is presented must still verify and carry an accepted role. */
        sp_tls_config foreign = cfg_of(pki.ca_pem, &pki.foreign_worker, SP_ROLE_CONTROLPLANE, alpn_h2);
        server_start(&s, &scfg);
        client_run(&s, &foreign, 0, &c);
        server_finish(&s);
        ck_assert(!s.handshake_ok);
        ck_assert_str_eq(c.reply, "");
        sp_tls_config dp = cfg_of(pki.ca_pem, &pki.dp, SP_ROLE_CONTROLPLANE, alpn_h2);
        server_start(&s, &scfg);
        client_run(&s, &dp, 0, &c);
        server_finish(&s);
        ck_assert(!s.handshake_ok);
        ck_assert_int_eq(s.verify_result, X509_V_ERR_APPLICATION_VERIFICATION);
        ck_assert_str_eq(c.reply, "");

        /* Optional certificates without accepted roles make no sense. */
        _cleanup_error_ sp_error *e = NULL;
        sp_tls_config bad = cfg_of(pki.ca_pem, &pki.cp, 0, NULL);
        bad.peer_optional = true;
        ck_assert_ptr_null(sp_tls_server_ctx_new(&bad, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
}
END_TEST

START_TEST(alpn_selection)
{
        server s;
        client c;
        static const char *const server_protos[] = {"h2", "http/1.1", NULL};
        static const char *const client_protos[] = {"http/1.1", "h2", NULL};
        static const char *const http1[] = {"http/1.1", NULL};
        /* The server's preference wins. */
        sp_tls_config scfg = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, server_protos);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_CONTROLPLANE, client_protos);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert_str_eq(c.alpn, "h2");
        ck_assert_str_eq(c.reply, "ok worker w1");

        /* No protocol in common: refused. */
        sp_tls_config h2only = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, alpn_h2);
        sp_tls_config c1 = cfg_of(pki.ca_pem, &pki.worker, SP_ROLE_CONTROLPLANE, http1);
        server_start(&s, &h2only);
        client_run(&s, &c1, 0, &c);
        server_finish(&s);
        ck_assert(!c.connect_ok);
        ck_assert(!s.handshake_ok);
}
END_TEST

START_TEST(ca_bundle_accepts_both)
{
        server s;
        client c;
        size_t n = strlen(pki.ca_pem) + strlen(pki.other_ca_pem) + 1;
        _cleanup_free_ char *bundle = malloc(n);
        snprintf(bundle, n, "%s%s", pki.ca_pem, pki.other_ca_pem);
        sp_tls_config scfg = cfg_of(bundle, &pki.cp, SP_ROLE_WORKER, NULL);
        sp_tls_config ccfg = cfg_of(pki.ca_pem, &pki.foreign_worker, SP_ROLE_CONTROLPLANE, NULL);
        server_start(&s, &scfg);
        client_run(&s, &ccfg, 0, &c);
        server_finish(&s);
        ck_assert(s.handshake_ok);
        ck_assert_str_eq(c.reply, "ok worker w1");
}
END_TEST

START_TEST(ctx_rejects_bad_config)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_tls_config bad_key = {
                .ca_pem = pki.ca_pem, .cert_pem = pki.cp.cert, .key_pem = pki.worker.key, .peer_roles = SP_ROLE_WORKER};
        ck_assert_ptr_null(sp_tls_server_ctx_new(&bad_key, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_tls_client_ctx_new(&bad_key, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_freep(&e);

        sp_tls_config no_ca = cfg_of(NULL, &pki.cp, SP_ROLE_WORKER, NULL);
        ck_assert_ptr_null(sp_tls_server_ctx_new(&no_ca, &e));
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_tls_client_ctx_new(&no_ca, &e));
        sp_error_freep(&e);
        sp_tls_config no_roles = cfg_of(pki.ca_pem, &pki.cp, 0, NULL);
        ck_assert_ptr_null(sp_tls_client_ctx_new(&no_roles, &e));
        sp_error_freep(&e);
        sp_tls_config bad_roles = cfg_of(pki.ca_pem, &pki.cp, 8, NULL);
        ck_assert_ptr_null(sp_tls_server_ctx_new(&bad_roles, &e));
        sp_error_freep(&e);
        sp_tls_config garbage = cfg_of("garbage", &pki.cp, SP_ROLE_WORKER, NULL);
        ck_assert_ptr_null(sp_tls_server_ctx_new(&garbage, &e));
        ck_assert_int_eq(e->code, SP_E_INVALID);
        sp_error_freep(&e);
        /* A leaf certificate is not a CA. */
        sp_tls_config leaf_ca = cfg_of(pki.worker.cert, &pki.cp, SP_ROLE_WORKER, NULL);
        ck_assert_ptr_null(sp_tls_server_ctx_new(&leaf_ca, &e));
        sp_error_freep(&e);
        static const char *const long_alpn[] = {"012345678901234567890123456789012", NULL};
        static const char *const empty_alpn[] = {"", NULL};
        sp_tls_config alpn1 = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, long_alpn);
        sp_tls_config alpn2 = cfg_of(pki.ca_pem, &pki.cp, SP_ROLE_WORKER, empty_alpn);
        ck_assert_ptr_null(sp_tls_server_ctx_new(&alpn1, &e));
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_tls_client_ctx_new(&alpn2, &e));
        sp_error_freep(&e);
        ck_assert_ptr_null(sp_tls_server_ctx_new(NULL, &e));
        sp_error_freep(&e);
        /* Identity of a connection that never handshook. */
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx =
                sp_tls_client_ctx_new(&(sp_tls_config){.ca_pem = pki.ca_pem, .peer_roles = SP_ROLE_WORKER}, &e);
        ck_assert_ptr_nonnull(ctx);
        ck_assert_int_eq(SSL_CTX_get_min_proto_version(ctx), TLS1_2_VERSION);
        SSL *ssl = SSL_new(ctx);
        sp_role role = 0;
        ck_assert_int_eq(sp_tls_peer_identity(ssl, &role, NULL, &e), -SP_E_UNAUTHENTICATED);
        ck_assert_int_eq(role, 0);
        SSL_free(ssl);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("tls_mtls");
        TCase *tc = tcase_create("mtls");
        tcase_add_checked_fixture(tc, pki_setup, pki_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, handshake_with_right_roles);
        tcase_add_test(tc, handshake_tls12);
        tcase_add_test(tc, client_from_other_ca_refused);
        tcase_add_test(tc, client_with_unaccepted_role_refused);
        tcase_add_test(tc, server_with_wrong_role_refused_by_client);
        tcase_add_test(tc, server_from_other_ca_refused_by_client);
        tcase_add_test(tc, client_without_certificate_refused);
        tcase_add_test(tc, public_server_asks_no_certificate);
        tcase_add_test(tc, optional_client_certificate);
        tcase_add_test(tc, alpn_selection);
        tcase_add_test(tc, ca_bundle_accepts_both);
        tcase_add_test(tc, ctx_rejects_bad_config);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
