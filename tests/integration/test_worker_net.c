/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's link (worker/net/link.h), between two namespaces the test
 * makes: one plays the worker's host, the other the sandbox's. The pair
 * carries TCP both ways with the planned addresses, the sandbox has a
 * default route through its host and no IPv6, a second create replaces a
 * stale pair, a failed create leaves nothing, and delete removes both ends.
 * Needs root; no packet leaves the test's namespaces.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "harness.h"
#include "net/link.h"
#include "netns.h"

static sp_test_netns g_host = {.fd = -1}, g_sbx = {.fd = -1};

static void ns_setup(void)
{
        sp_error *err = NULL;
        sp_test_ok(sp_test_netns_create(&g_host, &err), &err);
        sp_test_ok(sp_test_netns_create(&g_sbx, &err), &err);
}

static void ns_teardown(void)
{
        sp_test_netns_destroy(&g_host);
        sp_test_netns_destroy(&g_sbx);
}

START_TEST(the_pool_plans_addresses)
{
        wk_net_pool p;
        sp_error *e = NULL;
        ck_assert_int_eq(wk_net_pool_parse(WK_NET_DEFAULT_CIDR, &p, NULL), 0);
        ck_assert_uint_eq(wk_net_pool_slots(&p), 32768);
        wk_net_link l;
        ck_assert_int_eq(wk_net_link_of(&p, 5, &l, NULL), 0);
        char a[INET_ADDRSTRLEN], b[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &l.host_addr, a, sizeof(a));
        inet_ntop(AF_INET, &l.sandbox_addr, b, sizeof(b));
        ck_assert_str_eq(l.host_if, "spv5");
        ck_assert_str_eq(a, "10.250.0.10");
        ck_assert_str_eq(b, "10.250.0.11");
        ck_assert_int_eq(wk_net_link_of(&p, 32767, &l, NULL), 0);
        inet_ntop(AF_INET, &l.sandbox_addr, b, sizeof(b));
        ck_assert_str_eq(b, "10.250.255.255");
        ck_assert_int_eq(wk_net_link_of(&p, 32768, &l, &e), -SP_E_LIMIT);
        sp_error_free(e);
        static const char *const bad[] = {
                "",          "10.0.0.0",     "10.0.0.0/", "10.0.0.0/7", "10.0.0.0/31", "10.0.0.1/16",
                "10.0.0/16", "10.0.0.0/16x", "x/16",      NULL};
        for (size_t i = 0; bad[i]; i++) {
                e = NULL;
                ck_assert_msg(wk_net_pool_parse(bad[i], &p, &e) == -SP_E_INVALID, "took '%s'", bad[i]);
                sp_error_free(e);
        }
        ck_assert_int_eq(wk_net_pool_parse("192.168.4.0/30", &p, NULL), 0);
        ck_assert_uint_eq(wk_net_pool_slots(&p), 2);

        /* Another prefix for the host ends: a worker sharing the host with another. */
        ck_assert_int_eq(wk_net_pool_parse("10.0.0.0/8", &p, NULL), 0);
        ck_assert_int_eq(wk_net_pool_set_ifprefix(&p, "t12345z", NULL), 0);
        ck_assert_int_eq(wk_net_link_of(&p, wk_net_pool_slots(&p) - 1, &l, NULL), 0);
        ck_assert_str_eq(l.host_if, "t12345z8388607");
        static const char *const bad_prefix[] = {"", "1ab", "Ab", "abcdefgh", "a-b", "a b", "a/b", NULL};
        for (size_t i = 0; bad_prefix[i]; i++) {
                e = NULL;
                ck_assert_msg(wk_net_pool_set_ifprefix(&p, bad_prefix[i], &e) == -SP_E_INVALID, "took '%s'",
                              bad_prefix[i]);
                sp_error_free(e);
        }
        ck_assert_str_eq(p.ifprefix, "t12345z");
}
END_TEST

/* In the sandbox's namespace (a child): checks what the sandbox sees, then
 * serves one TCP connection on its address, answering "sbx". */
static int sandbox_side(const wk_net_link *l, int ready_fd)
{
        if (setns(g_sbx.fd, CLONE_NEWNET) < 0)
                return 20;
        char v[4] = {0};
        int fd = open("/proc/sys/net/ipv6/conf/all/disable_ipv6", O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && (read(fd, v, 1) != 1 || v[0] != '1'))
                return 21;
        if (fd >= 0)
                close(fd);
        if (!if_nametoindex(WK_NET_SANDBOX_IF))
                return 22;
        /* The default route: a connection to the host's address goes out eth0 (the host side listens). */
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(7001), .sin_addr = l->sandbox_addr};
        if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s, 1) < 0)
                return 23;
        if (write(ready_fd, "r", 1) != 1)
                return 24;
        struct sockaddr_in peer;
        socklen_t pl = sizeof(peer);
        int c = accept(s, (struct sockaddr *)&peer, &pl);
        if (c < 0)
                return 25;
        if (peer.sin_addr.s_addr != l->host_addr.s_addr)
                return 26; /* the host reaches it from the host end's address */
        if (write(c, "sbx", 3) != 3)
                return 27;
        close(c);
        close(s);
        /* And out: the host's address through the default route (8.8.8.8 would go the same way, but is
         * not dialled: only the route is asked for, with a UDP connect, which sends nothing). */
        int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in far = {.sin_family = AF_INET, .sin_port = htons(9)};
        inet_pton(AF_INET, "192.0.2.1", &far.sin_addr);
        if (connect(u, (struct sockaddr *)&far, sizeof(far)) < 0)
                return 28; /* no route */
        struct sockaddr_in me;
        socklen_t ml = sizeof(me);
        if (getsockname(u, (struct sockaddr *)&me, &ml) < 0 || me.sin_addr.s_addr != l->sandbox_addr.s_addr)
                return 29;
        close(u);
        return 0;
}

/* In the host's namespace: makes the link, checks it both ways, replaces it, deletes it. */
static int host_side(void *arg)
{
        (void)arg;
        wk_net_pool p;
        wk_net_link l;
        if (wk_net_pool_parse(WK_NET_DEFAULT_CIDR, &p, NULL) < 0 || wk_net_link_of(&p, 5, &l, NULL) < 0)
                return 1;
        sp_error *e = NULL;
        if (wk_net_link_create(&l, g_sbx.fd, &e) < 0) {
                fprintf(stderr, "create: %s\n", e->message);
                return 2;
        }
        if (!wk_net_link_exists(&l))
                return 3;
        /* Created again (a worker that lost track of it): replaced, not refused. */
        if (wk_net_link_create(&l, g_sbx.fd, &e) < 0) {
                fprintf(stderr, "create again: %s\n", e->message);
                return 4;
        }
        int pfd[2];
        if (pipe(pfd) < 0)
                return 5;
        pid_t pid = fork();
        if (pid == 0) {
                close(pfd[0]);
                _exit(sandbox_side(&l, pfd[1]));
        }
        close(pfd[1]);
        char r;
        if (read(pfd[0], &r, 1) != 1)
                return 6;
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(7001), .sin_addr = l.sandbox_addr};
        char got[4] = {0};
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 || read(s, got, 3) != 3 || strcmp(got, "sbx") != 0)
                return 7;
        close(s);
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                fprintf(stderr, "sandbox side: %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
                return 8;
        }
        if (wk_net_link_delete(&l, &e) < 0 || wk_net_link_exists(&l))
                return 9;
        if (wk_net_link_delete(&l, &e) < 0)
                return 10; /* a missing one is no error */
        /* A create that fails (no such namespace) leaves no host end behind. */
        int bad = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (wk_net_link_create(&l, bad, &e) == 0)
                return 11;
        sp_error_free(e);
        e = NULL;
        close(bad);
        if (wk_net_link_exists(&l))
                return 12;
        return 0;
}

/* After the host side: the sandbox's end went with its host end. */
static int sandbox_has_no_link(void *arg)
{
        (void)arg;
        return if_nametoindex(WK_NET_SANDBOX_IF) == 0 ? 0 : 1;
}

START_TEST(a_link_carries_tcp_both_ways_and_goes_away)
{
        sp_error *e = NULL;
        int r = sp_test_netns_run(&g_host, host_side, NULL, 20000, &e);
        ck_assert_msg(r == 0, "host side: %d %s", r, e ? e->message : "");
        r = sp_test_netns_run(&g_sbx, sandbox_has_no_link, NULL, 5000, &e);
        ck_assert_msg(r == 0, "sandbox side: %d %s", r, e ? e->message : "");
}
END_TEST

static Suite *net_suite(void)
{
        Suite *s = suite_create("worker_net");
        TCase *tc = tcase_create("link");
        tcase_add_unchecked_fixture(tc, ns_setup, ns_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, the_pool_plans_addresses);
        tcase_add_test(tc, a_link_carries_tcp_both_ways_and_goes_away);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_netns_require();
        return sp_test_main(net_suite());
}
