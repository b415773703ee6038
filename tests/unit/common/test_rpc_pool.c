/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the pool of RPC clients (space/rpc_pool.h) over real loopback
 * sockets (cleartext HTTP/2): one client per key, reused; a key whose
 * address changes gets a new client (and generation) and the old client's
 * open calls fail from the loop afterwards, never inside sp_rpc_pool_get();
 * at the bound the least recently used idle client makes room, busy ones
 * (open calls, held stream units) never do, and when all are busy the pool
 * refuses; stream shares per tenant are taken and given back per key;
 * freeing the pool fails what is still open.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/rpc_pool.h"
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

/* "Who" answers the server's name; "Hang" never answers (the calls are kept in hung[]). */
static void who(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)req;
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "server", json_object_new_string(ud));
        sp_rpc_call_reply(call, resp, NULL);
}

static sp_rpc_call *hung[8];
static size_t nhung;

static void hang(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)req;
        (void)ud;
        ck_assert_uint_lt(nhung, SP_ARRAY_SIZE(hung));
        hung[nhung++] = sp_rpc_call_ref(call);
}

static void unhang(void)
{
        while (nhung)
                sp_rpc_call_unref(hung[--nhung]);
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

/* Calls method on cli; "Who" waits for the answer, "Hang" until the server holds the call. */
static void call(struct event_base *base, sp_rpc_client *cli, const char *method, result *r)
{
        memset(r, 0, sizeof(*r));
        _cleanup_json_ json_object *req = json_object_new_object();
        ck_assert_int_eq(sp_rpc_client_call(cli, method, req, 10000, on_result, r, NULL), 0);
        if (strcmp(method, "Who") == 0) {
                ck_assert_msg(run_until(base, &r->done, 10000), "no answer");
                return;
        }
        size_t before = nhung;
        bool never = false;
        for (int i = 0; i < 500 && nhung == before; i++)
                run_until(base, &never, 10);
        ck_assert_uint_eq(nhung, before + 1);
}

START_TEST(one_client_per_key_replaced_when_the_address_changes)
{
        struct event_base *base = event_base_new();
        char a[64], b[64];
        sp_rpc_server *sa = server(base, "A", a), *sb = server(base, "B", b);
        _cleanup_error_ sp_error *e = NULL;
        sp_rpc_pool *p = sp_rpc_pool_new(base, NULL, 16, &e);
        ck_assert_ptr_nonnull(p);

        uint64_t g1 = 0, g = 0;
        sp_rpc_client *c1 = sp_rpc_pool_get(p, "wkr_1", a, &g1, &e);
        ck_assert_ptr_nonnull(c1);
        ck_assert_ptr_eq(sp_rpc_pool_get(p, "wkr_1", a, &g, &e), c1);
        ck_assert_uint_eq(g, g1);
        sp_rpc_client *c2 = sp_rpc_pool_get(p, "wkr_2", b, NULL, &e);
        ck_assert_ptr_nonnull(c2);
        ck_assert_ptr_ne(c1, c2);
        ck_assert_uint_eq(sp_rpc_pool_size(p), 2);
        result r, pending;
        call(base, c1, "Who", &r);
        ck_assert_str_eq(r.who, "A");
        call(base, c2, "Who", &r);
        ck_assert_str_eq(r.who, "B");

        /* A call left open on wkr_1's client, then wkr_1 moves to B's address. */
        call(base, c1, "Hang", &pending);
        sp_rpc_client *moved = sp_rpc_pool_get(p, "wkr_1", b, &g, &e);
        ck_assert_ptr_nonnull(moved);
        ck_assert_uint_ne(g, g1);
        ck_assert_uint_eq(sp_rpc_pool_size(p), 2);
        ck_assert_msg(!pending.done, "the old client's call failed inside sp_rpc_pool_get()");
        ck_assert_msg(run_until(base, &pending.done, 10000), "the old client's call never ended");
        ck_assert_int_eq(pending.code, SP_E_UNAVAILABLE);
        call(base, moved, "Who", &r);
        ck_assert_str_eq(r.who, "B");
        uint64_t g2 = 0;
        ck_assert_ptr_eq(sp_rpc_pool_get(p, "wkr_1", b, &g2, &e), moved);
        ck_assert_uint_eq(g2, g);

        /* Freeing the pool fails what is still open, at once. */
        call(base, moved, "Hang", &pending);
        sp_rpc_pool_free(p);
        ck_assert(pending.done);
        ck_assert_int_eq(pending.code, SP_E_UNAVAILABLE);
        ck_assert_ptr_null(sp_rpc_pool_free(NULL));

        unhang();
        sp_rpc_server_free(sa);
        sp_rpc_server_free(sb);
        event_base_free(base);
}
END_TEST

START_TEST(lru_eviction_skips_busy_entries)
{
        struct event_base *base = event_base_new();
        char a[64];
        sp_rpc_server *sa = server(base, "A", a);
        _cleanup_error_ sp_error *e = NULL;
        sp_rpc_pool *p = sp_rpc_pool_new(base, NULL, 2, &e);
        ck_assert_ptr_nonnull(p);

        uint64_t gx = 0, gy = 0, g = 0;
        sp_rpc_client *x = sp_rpc_pool_get(p, "x", a, &gx, &e);
        sp_rpc_client *y = sp_rpc_pool_get(p, "y", a, &gy, &e);
        ck_assert_ptr_nonnull(x);
        ck_assert_ptr_nonnull(y);
        /* x is the least recently used, but busy with an open call: y makes room for z. */
        result pending, r;
        call(base, x, "Hang", &pending);
        sp_rpc_client *z = sp_rpc_pool_get(p, "z", a, NULL, &e);
        ck_assert_ptr_nonnull(z);
        ck_assert_uint_eq(sp_rpc_pool_size(p), 2);
        ck_assert_ptr_eq(sp_rpc_pool_get(p, "x", a, &g, &e), x);
        ck_assert_uint_eq(g, gx);
        ck_assert(!pending.done);
        /* y comes back as a new client, taking z's place (x is still busy). */
        ck_assert_ptr_nonnull(sp_rpc_pool_get(p, "y", a, &g, &e));
        ck_assert_uint_gt(g, gy);
        ck_assert_uint_eq(sp_rpc_pool_size(p), 2);
        /* The evicted clients were freed from the loop; x still works. */
        call(base, x, "Who", &r);
        ck_assert_str_eq(r.who, "A");
        ck_assert(!pending.done);

        sp_rpc_pool_free(p);
        ck_assert(pending.done);
        unhang();
        sp_rpc_server_free(sa);
        event_base_free(base);
}
END_TEST

START_TEST(all_busy_is_the_limit)
{
        struct event_base *base = event_base_new();
        char a[64];
        sp_rpc_server *sa = server(base, "A", a);
        _cleanup_error_ sp_error *e = NULL;
        sp_rpc_pool *p = sp_rpc_pool_new(base, NULL, 2, &e);
        ck_assert_ptr_nonnull(p);
        sp_rpc_pool_set_shares(p, 4, 2);

        /* x busy with a call, y with a stream unit held (and no call). */
        sp_rpc_client *x = sp_rpc_pool_get(p, "x", a, NULL, &e);
        ck_assert_ptr_nonnull(x);
        result pending;
        call(base, x, "Hang", &pending);
        ck_assert_int_eq(sp_rpc_pool_take(p, "y", a, "t1", "streams", &e), 0);
        uint64_t gy = 0, g = 0;
        ck_assert_ptr_nonnull(sp_rpc_pool_get(p, "y", a, &gy, &e));

        ck_assert_ptr_null(sp_rpc_pool_get(p, "z", a, NULL, &e));
        ck_assert_int_eq(e->code, SP_E_LIMIT);
        sp_error_freep(&e);
        ck_assert(sp_rpc_pool_take(p, "z", a, "t1", "streams", &e) < 0);
        ck_assert_int_eq(e->code, SP_E_LIMIT);
        sp_error_freep(&e);
        ck_assert_uint_eq(sp_rpc_pool_size(p), 2);
        /* The keys it has are still served. */
        ck_assert_ptr_eq(sp_rpc_pool_get(p, "x", a, NULL, &e), x);
        ck_assert_ptr_nonnull(sp_rpc_pool_get(p, "y", a, &g, &e));
        ck_assert_uint_eq(g, gy);

        /* y's unit given back: y is idle and makes room. */
        sp_rpc_pool_give(p, "y", "t1");
        ck_assert_ptr_nonnull(sp_rpc_pool_get(p, "z", a, NULL, &e));
        ck_assert_ptr_null(sp_rpc_pool_shares(p, "y"));
        ck_assert_ptr_eq(sp_rpc_pool_get(p, "x", a, NULL, &e), x);
        ck_assert(!pending.done);

        sp_rpc_pool_free(p);
        ck_assert(pending.done);
        ck_assert_int_eq(pending.code, SP_E_UNAVAILABLE);
        unhang();
        sp_rpc_server_free(sa);
        event_base_free(base);
}
END_TEST

typedef struct seen {
        char keys[4][8];
        size_t n, used;
} seen;

static void on_entry(const char *key, const char *addr, sp_rpc_client *cli, sp_shares *shares, void *ud)
{
        seen *s = ud;
        ck_assert_ptr_nonnull(addr);
        ck_assert_ptr_nonnull(cli);
        ck_assert_uint_lt(s->n, SP_ARRAY_SIZE(s->keys));
        snprintf(s->keys[s->n++], sizeof(s->keys[0]), "%s", key);
        s->used += shares ? sp_shares_used(shares) : 0;
}

START_TEST(shares_take_and_give)
{
        struct event_base *base = event_base_new();
        char a[64], b[64];
        sp_rpc_server *sa = server(base, "A", a), *sb = server(base, "B", b);
        _cleanup_error_ sp_error *e = NULL;

        /* Without shares, take only makes the entry. */
        sp_rpc_pool *plain = sp_rpc_pool_new(base, NULL, 4, &e);
        ck_assert_int_eq(sp_rpc_pool_take(plain, "k", a, "t1", "streams", &e), 0);
        ck_assert_uint_eq(sp_rpc_pool_size(plain), 1);
        ck_assert_ptr_null(sp_rpc_pool_shares(plain, "k"));
        sp_rpc_pool_give(plain, "k", "t1");
        sp_rpc_pool_free(plain);

        sp_rpc_pool *p = sp_rpc_pool_new(base, NULL, 4, &e);
        sp_rpc_pool_set_shares(p, 3, 2);
        ck_assert_int_eq(sp_rpc_pool_take(p, "k", a, "t1", "streams", &e), 0);
        ck_assert_int_eq(sp_rpc_pool_take(p, "k", a, "t1", "streams", &e), 0);
        ck_assert(sp_rpc_pool_take(p, "k", a, "t1", "streams", &e) < 0);
        ck_assert_int_eq(e->code, SP_E_LIMIT);
        sp_error_freep(&e);
        ck_assert_int_eq(sp_rpc_pool_take(p, "k", a, "t2", "streams", &e), 0);
        ck_assert(sp_rpc_pool_take(p, "k", a, "t2", "streams", &e) < 0);
        ck_assert_int_eq(e->code, SP_E_UNAVAILABLE);
        sp_error_freep(&e);
        sp_shares *s = sp_rpc_pool_shares(p, "k");
        ck_assert_ptr_nonnull(s);
        ck_assert_uint_eq(sp_shares_used(s), 3);
        ck_assert_uint_eq(sp_shares_used_by(s, "t1"), 2);
        ck_assert_uint_eq(sp_shares_total(s), 3);
        ck_assert_uint_eq(sp_shares_per_key(s), 2);

        /* Another key has its own shares. */
        ck_assert_int_eq(sp_rpc_pool_take(p, "l", b, "t1", "streams", &e), 0);
        ck_assert_uint_eq(sp_shares_used(sp_rpc_pool_shares(p, "l")), 1);

        /* Units stay with the key when its address changes, and are given back there. */
        uint64_t g1 = 0, g2 = 0;
        sp_rpc_client *c1 = sp_rpc_pool_get(p, "k", a, &g1, &e);
        ck_assert_ptr_nonnull(sp_rpc_pool_get(p, "k", b, &g2, &e));
        ck_assert_uint_ne(g1, g2);
        (void)c1;
        ck_assert_ptr_eq(sp_rpc_pool_shares(p, "k"), s);
        ck_assert_uint_eq(sp_shares_used(s), 3);
        sp_rpc_pool_give(p, "k", "t1");
        ck_assert_uint_eq(sp_shares_used_by(s, "t1"), 1);
        ck_assert_int_eq(sp_rpc_pool_take(p, "k", b, "t2", "streams", &e), 0);
        sp_rpc_pool_give(p, "nobody", "t1"); /* no entry: ignored */

        /* Every entry, most recently used first. */
        seen v = {0};
        sp_rpc_pool_foreach(p, on_entry, &v);
        ck_assert_uint_eq(v.n, 2);
        ck_assert_str_eq(v.keys[0], "k");
        ck_assert_str_eq(v.keys[1], "l");
        ck_assert_uint_eq(v.used, 4);

        bool never = false;
        run_until(base, &never, 50); /* the replaced client is freed from the loop */
        sp_rpc_pool_free(p);
        sp_rpc_server_free(sa);
        sp_rpc_server_free(sb);
        event_base_free(base);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("rpc_pool");
        TCase *tc = tcase_create("pool");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, one_client_per_key_replaced_when_the_address_changes);
        tcase_add_test(tc, lru_eviction_skips_busy_entries);
        tcase_add_test(tc, all_busy_is_the_limit);
        tcase_add_test(tc, shares_take_and_give);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
