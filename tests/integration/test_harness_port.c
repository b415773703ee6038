/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test ports (port.h): outside the kernel's ephemeral range, free, and never
 * handed to two live processes at once.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "harness.h"
#include "port.h"

#define PICKS 32

static void assert_bindable(int port)
{
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "port %d is not free", port);
}

START_TEST(ports_lie_outside_the_ephemeral_range)
{
        int elo = 0, ehi = 0, lo, hi;
        _cleanup_fclose_ FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fscanf(f, "%d %d", &elo, &ehi), 2);
        if (sp_test_port_range(&lo, &hi) < 0)
                return; /* no room: the kernel chooses, as before */
        ck_assert(hi < elo || lo > ehi);
        sp_error *err = NULL;
        for (int i = 0; i < PICKS; i++) {
                int p = sp_test_free_port(&err);
                sp_test_ok(p, &err);
                ck_assert_msg(p >= lo && p <= hi && (p < elo || p > ehi), "port %d in the ephemeral range", p);
                assert_bindable(p);
        }
        int base = sp_test_free_port_block(6, &err);
        sp_test_ok(base, &err);
        for (int i = 0; i < 6; i++) {
                ck_assert(base + i <= hi);
                assert_bindable(base + i);
        }
}
END_TEST

/* Ports we hold are locked against every other process, and a process that
 * picks in parallel gets different ones. */
START_TEST(ports_are_reserved_per_process)
{
        sp_error *err = NULL;
        int mine[PICKS];
        for (int i = 0; i < PICKS; i++) {
                mine[i] = sp_test_free_port(&err);
                sp_test_ok(mine[i], &err);
        }
        char p[64];
        snprintf(p, sizeof(p), "/tmp/space-test-ports/%d", mine[0]);
        _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(flock(fd, LOCK_EX | LOCK_NB), -1);

        int pp[2];
        ck_assert_int_eq(pipe(pp), 0);
        pid_t c = fork();
        ck_assert_int_ge(c, 0);
        if (c == 0) {
                close(pp[0]);
                for (int i = 0; i < PICKS * 4; i++) {
                        int q = sp_test_free_port(NULL);
                        if (write(pp[1], &q, sizeof(q)) != sizeof(q))
                                _exit(1);
                }
                _exit(0);
        }
        close(pp[1]);
        int q;
        while (read(pp[0], &q, sizeof(q)) == sizeof(q)) {
                ck_assert_int_gt(q, 0);
                for (int i = 0; i < PICKS; i++)
                        ck_assert_msg(q != mine[i], "port %d handed out twice", q);
        }
        close(pp[0]);
        ck_assert_int_eq(waitpid(c, NULL, 0), c);
}
END_TEST

static Suite *port_suite(void)
{
        Suite *s = suite_create("harness_port");
        TCase *tc = tcase_create("port");
        tcase_add_test(tc, ports_lie_outside_the_ephemeral_range);
        tcase_add_test(tc, ports_are_reserved_per_process);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(port_suite());
}
