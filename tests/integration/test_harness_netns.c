/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The temporary network namespaces of the test harness: they appear in
 * /run/netns, what runs inside sees only its own loopback, a veth pair
 * carries TCP between two of them and nowhere else, and the teardown
 * removes them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"

#include "harness.h"
#include "netns.h"

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

static sp_test_netns g_a = {.fd = -1}, g_b = {.fd = -1};
static char *g_dir;
static char g_gone[2][128];

static void ns_setup(void)
{
        sp_error *err = NULL;
        g_dir = sp_test_tmpdir("netns");
        sp_test_ok(sp_test_netns_create(&g_a, &err), &err);
        sp_test_ok(sp_test_netns_create(&g_b, &err), &err);
}

static void ns_teardown(void)
{
        snprintf(g_gone[0], sizeof(g_gone[0]), "%s", g_a.path);
        snprintf(g_gone[1], sizeof(g_gone[1]), "%s", g_b.path);
        sp_test_netns_destroy(&g_a);
        sp_test_netns_destroy(&g_b);
        sp_test_tmpdir_remove(g_dir);
        free(g_dir);
        g_dir = NULL;
}

START_TEST(test_named_and_visible)
{
        ck_assert_str_ne(g_a.name, g_b.name);
        ck_assert_int_eq(strncmp(g_a.name, SP_TEST_NETNS_PREFIX, strlen(SP_TEST_NETNS_PREFIX)), 0);
        struct statfs sfs;
        ck_assert_int_eq(statfs(g_a.path, &sfs), 0);
        ck_assert_int_eq((unsigned long)sfs.f_type, (unsigned long)NSFS_MAGIC);
        /* A different namespace from ours. */
        struct stat ours, theirs;
        ck_assert_int_eq(stat("/proc/self/ns/net", &ours), 0);
        ck_assert_int_eq(fstat(g_a.fd, &theirs), 0);
        ck_assert(ours.st_ino != theirs.st_ino);
}
END_TEST

/* Inside: the interfaces are exactly "lo", and it is up. */
static int only_lo(void *arg)
{
        (void)arg;
        struct if_nameindex *ifs = if_nameindex();
        if (!ifs)
                return 10;
        int n = 0, lo = 0;
        for (struct if_nameindex *i = ifs; i->if_index; i++, n++)
                lo += strcmp(i->if_name, "lo") == 0;
        if_freenameindex(ifs);
        if (n != 1 || lo != 1)
                return 11;
        _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr;
        memset(&ifr, 0, sizeof(ifr));
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
        if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0 || !(ifr.ifr_flags & IFF_UP))
                return 12;
        return 0;
}

START_TEST(test_function_sees_only_lo)
{
        sp_error *err = NULL;
        int code = sp_test_netns_run(&g_a, only_lo, NULL, 10000, &err);
        sp_test_ok(code, &err);
        ck_assert_int_eq(code, 0);
}
END_TEST

static int exit_seven(void *arg)
{
        (void)arg;
        return 7;
}

static int hang(void *arg)
{
        (void)arg;
        for (;;)
                pause();
        return 0;
}

START_TEST(test_run_reports_code_and_timeout)
{
        sp_error *err = NULL;
        ck_assert_int_eq(sp_test_netns_run(&g_a, exit_seven, NULL, 10000, &err), 7);
        ck_assert_ptr_null(err);
        ck_assert_int_eq(sp_test_netns_run(&g_a, hang, NULL, 200, &err), -SP_E_TIMEOUT);
        ck_assert_ptr_nonnull(err);
        sp_error_free(err);
}
END_TEST

static char *read_all(const char *path)
{
        sp_buf b = SP_BUF_INIT;
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        ck_assert_ptr_nonnull(f);
        char chunk[1024];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                ck_assert_int_eq(sp_buf_append(&b, chunk, n, NULL), 0);
        return b.data ? sp_buf_steal(&b) : strdup("");
}

START_TEST(test_program_sees_only_lo)
{
        char log[4096];
        snprintf(log, sizeof(log), "%s/exec-%d.log", g_dir, (int)getpid());
        /* /proc/net/dev follows the reader's namespace; /sys/class/net needs
         * the private /sys that exec mounts. */
        const char *argv[] = {"sh", "-c",
                              "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo --; ls /sys/class/net", NULL};
        sp_error *err = NULL;
        int code = sp_test_netns_exec(&g_a, argv, log, 10000, &err);
        sp_test_ok(code, &err);
        ck_assert_int_eq(code, 0);
        char *out = read_all(log);
        ck_assert_str_eq(out, "lo\n--\nlo\n");
        free(out);

        /* Our own /sys is untouched by that. */
        struct stat st;
        ck_assert_int_eq(stat("/sys/class/net/lo", &st), 0);
}
END_TEST

START_TEST(test_exec_missing_program)
{
        const char *argv[] = {"/nonexistent/program", NULL};
        sp_error *err = NULL;
        ck_assert_int_eq(sp_test_netns_exec(&g_a, argv, NULL, 10000, &err), -SP_E_NOT_FOUND);
        ck_assert_ptr_nonnull(strstr(err->message, "exec"));
        sp_error_free(err);
}
END_TEST

struct veth_check {
        const sp_test_veth *v;
        int fd_a;
};

/* Runs in b: listens on b's address, then from a connects across the pair. */
static int talk_across(void *arg)
{
        struct veth_check *c = arg;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(4242)};
        if (inet_pton(AF_INET, c->v->addr_b, &sa.sin_addr) != 1)
                return 20;
        _cleanup_close_ int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 1) < 0)
                return 21;
        if (setns(c->fd_a, CLONE_NEWNET) < 0)
                return 22;
        if (if_nametoindex(c->v->name_a) == 0 || if_nametoindex(c->v->name_b) != 0)
                return 23; /* a sees its end only */
        _cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return 24;
        _cleanup_close_ int conn = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (conn < 0 || write(s, "x", 1) != 1)
                return 25;
        char ch = 0;
        if (read(conn, &ch, 1) != 1 || ch != 'x')
                return 26;
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        char addr[INET_ADDRSTRLEN];
        if (getpeername(conn, (struct sockaddr *)&peer, &len) < 0 ||
            !inet_ntop(AF_INET, &peer.sin_addr, addr, sizeof(addr)) || strcmp(addr, c->v->addr_a) != 0)
                return 27; /* it came from a's end of the pair */
        return 0;
}

START_TEST(test_veth_connects_two_namespaces)
{
        sp_test_veth v;
        sp_error *err = NULL;
        sp_test_ok(sp_test_netns_veth(&g_a, &g_b, &v, &err), &err);
        ck_assert_int_eq(strncmp(v.addr_a, "10.", 3), 0);
        ck_assert_int_eq(v.prefix_len, 30);
        /* Neither end is on the host. */
        ck_assert_uint_eq(if_nametoindex(v.name_a), 0);
        ck_assert_uint_eq(if_nametoindex(v.name_b), 0);

        struct veth_check c = {.v = &v, .fd_a = g_a.fd};
        int code = sp_test_netns_run(&g_b, talk_across, &c, 10000, &err);
        sp_test_ok(code, &err);
        ck_assert_msg(code == 0, "talk_across failed at step %d", code);
}
END_TEST

START_TEST(test_teardown_removes_namespaces)
{
        for (int i = 0; i < 2; i++) {
                ck_assert_msg(g_gone[i][0], "the fixture did not run");
                struct stat st;
                ck_assert_msg(stat(g_gone[i], &st) < 0 && errno == ENOENT, "%s still exists", g_gone[i]);
        }
        sp_test_netns none = {.fd = -1};
        sp_test_netns_destroy(&none); /* harmless */
}
END_TEST

static Suite *netns_suite(void)
{
        Suite *s = suite_create("harness_netns");
        TCase *tc = tcase_create("namespaces");
        tcase_add_unchecked_fixture(tc, ns_setup, ns_teardown);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_named_and_visible);
        tcase_add_test(tc, test_function_sees_only_lo);
        tcase_add_test(tc, test_run_reports_code_and_timeout);
        tcase_add_test(tc, test_program_sees_only_lo);
        tcase_add_test(tc, test_exec_missing_program);
        tcase_add_test(tc, test_veth_connects_two_namespaces);
        suite_add_tcase(s, tc);

        tc = tcase_create("after_teardown");
        tcase_add_test(tc, test_teardown_removes_namespaces);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_netns_require();
        return sp_test_main(netns_suite());
}
