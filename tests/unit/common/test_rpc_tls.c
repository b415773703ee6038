/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the RPC transport over real mutual TLS on 127.0.0.1, with a
 * cluster CA and role certificates from the tls module. The server's identity
 * hook names each peer's role; methods accept some roles and refuse others
 * with 403; peers the TLS layer rejects never reach a method.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/time.h"
#include "space/tls.h"

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

static void wake_cb(evutil_socket_t fd, short what, void *arg) {}

static void loop_once(struct event_base *base)
{
        struct event *t = evtimer_new(base, wake_cb, NULL);
        struct timeval tv = {0, 20000};
        evtimer_add(t, &tv);
        event_base_loop(base, EVLOOP_ONCE);
        event_free(t);
}

#define RUN_UNTIL(base, cond, ms) \
        ({ \
                int64_t end_ = sp_now_mono_us() + (int64_t)(ms)*SP_USEC_PER_MSEC; \
                while (!(cond) && sp_now_mono_us() < end_) \
                        loop_once(base); \
                (cond); \
        })

/* ---- PKI ------------------------------------------------------------------- */

typedef struct identity {
        char *cert, *key;
} identity;

static struct {
        char *ca_pem;
        identity cp, worker, dp, foreign_cp;
} pki;

static void issue(sp_pki_ca *ca, sp_role role, const char *name, identity *id)
{
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(sp_pki_issue(ca, role, name, NULL, 1, &id->cert, &id->key, &e) == 0, "%s", e ? e->message : "");
}

static void pki_setup(void)
{
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL, *other = NULL;
        ck_assert_int_eq(sp_pki_ca_create("cluster", 2, &ca, NULL), 0);
        ck_assert_int_eq(sp_pki_ca_create("elsewhere", 2, &other, NULL), 0);
        pki.ca_pem = sp_pki_ca_cert_pem(ca, NULL);
        issue(ca, SP_ROLE_CONTROLPLANE, "cp-1", &pki.cp);
        issue(ca, SP_ROLE_WORKER, "worker-1", &pki.worker);
        issue(ca, SP_ROLE_DATAPLANE, "dp-1", &pki.dp);
        issue(other, SP_ROLE_CONTROLPLANE, "cp-1", &pki.foreign_cp);
}

static void pki_teardown(void)
{
        identity *all[] = {&pki.cp, &pki.worker, &pki.dp, &pki.foreign_cp};
        for (size_t i = 0; i < SP_ARRAY_SIZE(all); i++) {
                free(all[i]->cert);
                free(all[i]->key);
        }
        free(pki.ca_pem);
        memset(&pki, 0, sizeof(pki));
}

static const char *const h2[] = {"h2", NULL};

static SSL_CTX *client_ctx(const identity *id)
{
        sp_tls_config cfg = {.ca_pem = pki.ca_pem,
                             .cert_pem = id ? id->cert : NULL,
                             .key_pem = id ? id->key : NULL,
                             .peer_roles = SP_ROLE_WORKER,
                             .alpn = h2};
        _cleanup_error_ sp_error *e = NULL;
        SSL_CTX *ctx = sp_tls_client_ctx_new(&cfg, &e);
        ck_assert_msg(ctx != NULL, "%s", e ? e->message : "");
        return ctx;
}

/* ---- server ------------------------------------------------------------------ */

static int identity_hook(SSL *ssl, void *ud, unsigned *ret_role, char **ret_name, sp_error **err)
{
        sp_role role;
        int r = sp_tls_peer_identity(ssl, &role, ret_name, err);
        if (r < 0)
                return r;
        *ret_role = (unsigned)role;
        return 0;
}

static void whoami(sp_rpc_call *call, json_object *req, void *ud)
{
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "name", json_object_new_string(sp_rpc_call_peer_name(call)));
        json_object_object_add(resp, "role", json_object_new_int((int)sp_rpc_call_role(call)));
        sp_rpc_call_reply(call, resp, NULL);
}

typedef struct pump {
        sp_rpc_call *call;
        uint64_t sent, size;
        uint8_t buf[32768];
} pump;

static void pump_more(pump *p)
{
        while (p->sent < p->size) {
                for (size_t i = 0; i < sizeof(p->buf); i++)
                        p->buf[i] = (uint8_t)(p->sent + i);
                int r = sp_rpc_call_send(p->call, SP_RPC_FRAME_DATA, p->buf, sizeof(p->buf), NULL);
                ck_assert_int_ge(r, 0);
                p->sent += sizeof(p->buf);
                if (r == 1)
                        return;
        }
        sp_rpc_call_end(p->call, NULL, NULL);
}

static void pump_writable(sp_rpc_call *call, void *ud)
{
        pump_more(ud);
}

static void pump_close(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        pump *p = ud;
        sp_rpc_call_unref(p->call);
        free(p);
}

/* Streams 8 MiB over TLS, with backpressure. */
static void stream_method(sp_rpc_call *call, json_object *req, void *ud)
{
        static const sp_rpc_call_ops ops = {.on_writable = pump_writable, .on_close = pump_close};
        pump *p = calloc(1, sizeof(*p));
        p->call = sp_rpc_call_ref(call);
        p->size = 8 * 1024 * 1024;
        sp_rpc_call_set_ops(call, &ops, p);
        pump_more(p);
}

typedef struct fx {
        struct event_base *base;
        SSL_CTX *srv_ctx;
        sp_rpc_server *srv;
        char addr[64];
} fx;

static void fx_init(fx *f, bool with_hook)
{
        pki_setup();
        f->base = event_base_new();
        sp_tls_config cfg = {.ca_pem = pki.ca_pem,
                             .cert_pem = pki.worker.cert,
                             .key_pem = pki.worker.key,
                             .peer_roles = SP_ROLE_CONTROLPLANE | SP_ROLE_DATAPLANE,
                             .alpn = h2};
        _cleanup_error_ sp_error *e = NULL;
        f->srv_ctx = sp_tls_server_ctx_new(&cfg, &e);
        ck_assert_msg(f->srv_ctx != NULL, "%s", e ? e->message : "");
        f->srv = sp_rpc_server_new(f->base, f->srv_ctx, NULL);
        if (with_hook)
                sp_rpc_server_set_identity_fn(f->srv, identity_hook, NULL);
        const sp_rpc_method methods[] = {
                {.name = "CreateSandbox", .roles = SP_ROLE_CONTROLPLANE, .handler = whoami},
                {.name = "Attach",
                 .roles = SP_ROLE_CONTROLPLANE | SP_ROLE_DATAPLANE,
                 .streaming = true,
                 .handler = stream_method},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++)
                ck_assert_int_eq(sp_rpc_server_register(f->srv, &methods[i], NULL), 0);
        ck_assert_int_eq(sp_rpc_server_listen(f->srv, "127.0.0.1:0", NULL), 0);
        snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", sp_rpc_server_port(f->srv));
}

static void fx_fini(fx *f)
{
        sp_rpc_server_free(f->srv);
        SSL_CTX_free(f->srv_ctx);
        event_base_free(f->base);
        pki_teardown();
}

/* ---- client side -------------------------------------------------------------- */

typedef struct result {
        bool done;
        sp_errc code;
        char msg[512];
        json_object *resp;
} result;

static void on_result(json_object *resp, const sp_error *e, void *ud)
{
        result *r = ud;
        r->done = true;
        r->code = e ? e->code : SP_OK;
        if (e)
                snprintf(r->msg, sizeof(r->msg), "%s", e->message);
        r->resp = json_object_get(resp);
}

static void call(fx *f, SSL_CTX *ctx, const char *method, result *r)
{
        sp_rpc_client *cli = sp_rpc_client_new(f->base, f->addr, ctx, NULL);
        ck_assert_ptr_nonnull(cli);
        ck_assert_int_eq(sp_rpc_client_call(cli, method, NULL, 10000, on_result, r, NULL), 0);
        ck_assert(RUN_UNTIL(f->base, r->done, 15000));
        sp_rpc_client_free(cli);
}

static int verify_worker(SSL *ssl, void *ud, sp_error **err)
{
        sp_role role;
        _cleanup_free_ char *name = NULL;
        if (sp_tls_peer_identity(ssl, &role, &name, err) < 0)
                return -SP_E_UNAUTHENTICATED;
        if (role != SP_ROLE_WORKER || strcmp(name, ud) != 0)
                return sp_error_set(err, SP_E_PERMISSION, "not the expected worker");
        return 0;
}

typedef struct sink {
        uint64_t got, bad;
        bool ended;
        sp_errc code;
} sink;

static void sink_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        sink *k = ud;
        for (size_t i = 0; i < n; i++)
                k->bad += p[i] != (uint8_t)(k->got + i);
        k->got += n;
}

static void sink_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        sink *k = ud;
        k->ended = true;
        k->code = err ? err->code : SP_OK;
}

/* ---- tests ---------------------------------------------------------------------- */

START_TEST(mtls_role_allowed_and_refused)
{
        fx f;
        fx_init(&f, true);
        _cleanup_(SSL_CTX_freep) SSL_CTX *cp = client_ctx(&pki.cp);
        _cleanup_(SSL_CTX_freep) SSL_CTX *dp = client_ctx(&pki.dp);

        /* The control plane may create; the server saw its role and name. */
        result r = {0};
        call(&f, cp, "CreateSandbox", &r);
        ck_assert_msg(r.code == SP_OK, "%s", r.msg);
        const char *name = NULL;
        int64_t role = 0;
        ck_assert_int_eq(sp_json_get_string(r.resp, "name", true, 64, &name, NULL), 0);
        ck_assert_str_eq(name, "cp-1");
        ck_assert_int_eq(sp_json_get_int(r.resp, "role", true, 0, 255, &role, NULL), 0);
        ck_assert_int_eq(role, SP_ROLE_CONTROLPLANE);
        json_object_put(r.resp);

        /* The data plane passes TLS but this method refuses its role. */
        memset(&r, 0, sizeof(r));
        call(&f, dp, "CreateSandbox", &r);
        ck_assert_int_eq(r.code, SP_E_PERMISSION);
        ck_assert_ptr_nonnull(strstr(r.msg, "CreateSandbox"));

        /* ... and may attach: 8 MiB streamed over TLS, in order. */
        sp_rpc_client *cli = sp_rpc_client_new(f.base, f.addr, dp, NULL);
        sp_rpc_client_set_verify_fn(cli, verify_worker, (void *)"worker-1");
        sink k = {0};
        static const sp_rpc_stream_ops ops = {.on_frame = sink_frame, .on_end = sink_end};
        ck_assert_ptr_nonnull(sp_rpc_client_stream(cli, "Attach", NULL, 30000, &ops, &k, NULL));
        ck_assert(RUN_UNTIL(f.base, k.ended, 30000));
        ck_assert_int_eq(k.code, SP_OK);
        ck_assert_uint_eq(k.got, 8 * 1024 * 1024);
        ck_assert_uint_eq(k.bad, 0);
        sp_rpc_client_free(cli);

        fx_fini(&f);
}
END_TEST

START_TEST(mtls_peers_refused_before_any_method)
{
        fx f;
        fx_init(&f, true);
        _cleanup_(SSL_CTX_freep) SSL_CTX *foreign = client_ctx(&pki.foreign_cp);
        _cleanup_(SSL_CTX_freep) SSL_CTX *anonymous = client_ctx(NULL);
        _cleanup_(SSL_CTX_freep) SSL_CTX *cp = client_ctx(&pki.cp);
        SSL_CTX *refused[] = {foreign, anonymous, NULL /* cleartext */};
        for (size_t i = 0; i < SP_ARRAY_SIZE(refused); i++) {
                result r = {0};
                call(&f, refused[i], "CreateSandbox", &r);
                ck_assert_msg(r.code == SP_E_UNAVAILABLE, "case %zu: %s", i, r.msg);
        }
        /* A client that does not like the server's identity hangs up. */
        sp_rpc_client *cli = sp_rpc_client_new(f.base, f.addr, cp, NULL);
        sp_rpc_client_set_verify_fn(cli, verify_worker, (void *)"worker-2");
        result r = {0};
        ck_assert_int_eq(sp_rpc_client_call(cli, "CreateSandbox", NULL, 10000, on_result, &r, NULL), 0);
        ck_assert(RUN_UNTIL(f.base, r.done, 15000));
        ck_assert_int_eq(r.code, SP_E_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(r.msg, "not the expected worker"));
        sp_rpc_client_free(cli);

        sp_rpc_server_stats st;
        sp_rpc_server_get_stats(f.srv, &st);
        ck_assert_uint_eq(st.calls_started, 0);
        ck_assert(RUN_UNTIL(f.base, (sp_rpc_server_get_stats(f.srv, &st), st.connections_open == 0), 15000));
        fx_fini(&f);
}
END_TEST

START_TEST(mtls_without_identity_hook_is_unauthenticated)
{
        fx f;
        fx_init(&f, false);
        _cleanup_(SSL_CTX_freep) SSL_CTX *cp = client_ctx(&pki.cp);
        result r = {0};
        call(&f, cp, "CreateSandbox", &r);
        ck_assert_int_eq(r.code, SP_E_PERMISSION);
        fx_fini(&f);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("rpc_tls");
        TCase *tc = tcase_create("mtls");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, mtls_role_allowed_and_refused);
        tcase_add_test(tc, mtls_peers_refused_before_any_method);
        tcase_add_test(tc, mtls_without_identity_hook_is_unauthenticated);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
