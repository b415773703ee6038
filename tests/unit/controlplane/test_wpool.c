/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the pool of RPC clients to workers (controlplane/fleet/wpool.h)
 * over real loopback sockets (cleartext HTTP/2): one client per worker,
 * reused; a worker that moves gets a new client and its old client's open
 * calls fail from the loop afterwards, never inside cp_wpool_get(); bad
 * addresses and the bound on workers are refused; freeing the pool fails
 * what is still open.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/wpool.h"
#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/time.h"

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
        (void)fd;
        (void)what;
        (void)arg;
}

/* Runs the loop until *flag or ms pass; yields *flag. */
static bool run_until(struct event_base *base, const bool *flag, int64_t ms)
{
        int64_t end = sp_now_mono_us() + ms * 1000;
        while (!*flag && sp_now_mono_us() < end) {
                struct event *t = evtimer_new(base, wake_cb, NULL);
                struct timeval tv = {0, 20000};
                evtimer_add(t, &tv);
                event_base_loop(base, EVLOOP_ONCE);
                event_free(t);
        }
        return *flag;
}

typedef struct result {
        bool done;
        sp_errc code;
        char who[8];
} result;

static void on_result(json_object *resp, const sp_error *e, void *ud)
{
        result *r = ud;
        ck_assert(!r->done);
        r->done = true;
        r->code = e ? e->code : SP_OK;
        json_object *w = NULL;
        if (resp && json_object_object_get_ex(resp, "server", &w))
                snprintf(r->who, sizeof(r->who), "%s", json_object_get_string(w));
}

/* "Who" answers the server's name; "Hang" never answers. */
static void who(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)req;
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "server", json_object_new_string(ud));
        sp_rpc_call_reply(call, resp, NULL);
}

static sp_rpc_call *hung;

static void hang(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)req;
        (void)ud;
        sp_rpc_call_unref(hung);
        hung = sp_rpc_call_ref(call);
}

static sp_rpc_server *server(struct event_base *base, const char *name, char addr[static 64])
{
        _cleanup_error_ sp_error *e = NULL;
        sp_rpc_server *srv = sp_rpc_server_new(base, NULL, &e);
        ck_assert_ptr_nonnull(srv);
        sp_rpc_method m = {"Who", SP_RPC_UNAUTHENTICATED, false, who, (void *)name};
        sp_rpc_method h = {"Hang", SP_RPC_UNAUTHENTICATED, false, hang, NULL};
        ck_assert_int_eq(sp_rpc_server_register(srv, &m, &e), 0);
        ck_assert_int_eq(sp_rpc_server_register(srv, &h, &e), 0);
        ck_assert_int_eq(sp_rpc_server_listen(srv, "127.0.0.1:0", &e), 0);
        snprintf(addr, 64, "127.0.0.1:%d", sp_rpc_server_port(srv));
        return srv;
}

static void call(struct event_base *base, sp_rpc_client *cli, const char *method, result *r)
{
        memset(r, 0, sizeof(*r));
        _cleanup_json_ json_object *req = json_object_new_object();
        ck_assert_int_eq(sp_rpc_client_call(cli, method, req, 10000, on_result, r, NULL), 0);
        if (strcmp(method, "Who") == 0)
                ck_assert_msg(run_until(base, &r->done, 10000), "no answer");
}

START_TEST(one_client_per_worker_replaced_when_it_moves)
{
        struct event_base *base = event_base_new();
        char a[64], b[64];
        sp_rpc_server *sa = server(base, "A", a), *sb = server(base, "B", b);
        _cleanup_error_ sp_error *e = NULL;
        cp_wpool *p = cp_wpool_new(base, NULL, &e);
        ck_assert_ptr_nonnull(p);

        sp_rpc_client *c1 = cp_wpool_get(p, "wkr_1", a, &e);
        ck_assert_ptr_nonnull(c1);
        ck_assert_ptr_eq(cp_wpool_get(p, "wkr_1", a, &e), c1);
        sp_rpc_client *c2 = cp_wpool_get(p, "wkr_2", b, &e);
        ck_assert_ptr_nonnull(c2);
        ck_assert_ptr_ne(c1, c2);
        result r, pending;
        call(base, c1, "Who", &r);
        ck_assert_str_eq(r.who, "A");
        call(base, c2, "Who", &r);
        ck_assert_str_eq(r.who, "B");

        /* A call left open on wkr_1's client, then wkr_1 moves to B's address. */
        call(base, c1, "Hang", &pending);
        bool arrived = false;
        for (int i = 0; i < 500 && !hung; i++)
                run_until(base, &arrived, 10);
        ck_assert_ptr_nonnull(hung);
        sp_rpc_client *moved = cp_wpool_get(p, "wkr_1", b, &e);
        ck_assert_ptr_nonnull(moved);
        ck_assert_msg(!pending.done, "the old client's call failed inside cp_wpool_get()");
        ck_assert_msg(run_until(base, &pending.done, 10000), "the old client's call never ended");
        ck_assert_int_eq(pending.code, SP_E_UNAVAILABLE);
        call(base, moved, "Who", &r);
        ck_assert_str_eq(r.who, "B");
        ck_assert_ptr_eq(cp_wpool_get(p, "wkr_1", b, &e), moved);

        /* Freeing the pool fails what is still open, at once. */
        call(base, moved, "Hang", &pending);
        arrived = false;
        sp_rpc_call *before = hung;
        for (int i = 0; i < 500 && hung == before; i++)
                run_until(base, &arrived, 10);
        ck_assert_ptr_ne(hung, before);
        cp_wpool_free(p);
        ck_assert(pending.done);
        ck_assert_int_eq(pending.code, SP_E_UNAVAILABLE);
        ck_assert_ptr_null(cp_wpool_free(NULL));

        hung = sp_rpc_call_unref(hung);
        sp_rpc_server_free(sa);
        sp_rpc_server_free(sb);
        event_base_free(base);
}
END_TEST

START_TEST(bad_addresses_and_the_bound)
{
        struct event_base *base = event_base_new();
        _cleanup_error_ sp_error *e = NULL;
        cp_wpool *p = cp_wpool_new(base, NULL, &e);
        static const char *const bad[] = {
                "",      "nohost", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "0.0.0.0:7443", "unix:/run/x.sock",
                "[::]:1"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                sp_error_freep(&e);
                ck_assert_msg(cp_wpool_get(p, "wkr_x", bad[i], &e) == NULL, "'%s' accepted", bad[i]);
                ck_assert_int_eq(e->code, SP_E_INVALID);
        }
        char id[32];
        for (int i = 0; i < CP_WPOOL_MAX; i++) {
                snprintf(id, sizeof(id), "wkr_%d", i);
                ck_assert_ptr_nonnull(cp_wpool_get(p, id, "127.0.0.1:9", NULL));
        }
        sp_error_freep(&e);
        ck_assert_ptr_null(cp_wpool_get(p, "wkr_one_more", "127.0.0.1:9", &e));
        ck_assert_int_eq(e->code, SP_E_LIMIT);
        /* The workers it has are still served. */
        ck_assert_ptr_nonnull(cp_wpool_get(p, "wkr_7", "127.0.0.1:9", NULL));
        cp_wpool_free(p);
        event_base_free(base);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("wpool");
        TCase *tc = tcase_create("pool");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, one_client_per_worker_replaced_when_it_moves);
        tcase_add_test(tc, bad_addresses_and_the_bound);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
