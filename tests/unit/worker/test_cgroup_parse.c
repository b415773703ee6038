/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the cgroup control-file parsers, the unit conversions, the
 * bounds on limits and on group names. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cgroup/cgroup.h"
#include "cgroup/cgroup_internal.h"
#include "harness.h"
#include "space/cleanup.h"

#define P(s) (s), strlen(s)

START_TEST(parse_u64)
{
        uint64_t v = 0;
        ck_assert_int_eq(wk__cg_parse_u64(P("12345\n"), &v), 0);
        ck_assert_uint_eq(v, 12345);
        ck_assert_int_eq(wk__cg_parse_u64(P("  0 "), &v), 0);
        ck_assert_uint_eq(v, 0);
        ck_assert_int_eq(wk__cg_parse_u64(P("max\n"), &v), 0);
        ck_assert_uint_eq(v, UINT64_MAX);
        ck_assert_int_eq(wk__cg_parse_u64(P("-1\n"), &v), 0);
        ck_assert_uint_eq(v, UINT64_MAX);
        ck_assert_int_eq(wk__cg_parse_u64(P("18446744073709551615"), &v), 0);
        ck_assert_uint_eq(v, UINT64_MAX);
        ck_assert_int_eq(wk__cg_parse_u64(P("18446744073709551616"), &v), -1);
        ck_assert_int_eq(wk__cg_parse_u64(P(""), &v), -1);
        ck_assert_int_eq(wk__cg_parse_u64(P("\n"), &v), -1);
        ck_assert_int_eq(wk__cg_parse_u64(P("12 34"), &v), -1);
        ck_assert_int_eq(wk__cg_parse_u64(P("-2"), &v), -1);
        ck_assert_int_eq(wk__cg_parse_u64(P("0x10"), &v), -1);
}
END_TEST

START_TEST(parse_keyed)
{
        const char *oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        uint64_t v = 0;
        ck_assert_int_eq(wk__cg_parse_keyed(P(oom), "oom_kill", &v), 1);
        ck_assert_uint_eq(v, 3);
        ck_assert_int_eq(wk__cg_parse_keyed(P(oom), "under_oom", &v), 1);
        ck_assert_uint_eq(v, 0);
        ck_assert_int_eq(wk__cg_parse_keyed(P(oom), "oom", &v), 0);
        ck_assert_int_eq(wk__cg_parse_keyed(P(oom), "kill", &v), 0);

        const char *cpu = "usage_usec 1500\nuser_usec 1000\nsystem_usec 500";
        ck_assert_int_eq(wk__cg_parse_keyed(P(cpu), "system_usec", &v), 1);
        ck_assert_uint_eq(v, 500);
        ck_assert_int_eq(wk__cg_parse_keyed(P("populated 1\nfrozen 0\n"), "frozen", &v), 1);
        ck_assert_uint_eq(v, 0);
        ck_assert_int_eq(wk__cg_parse_keyed(P("frozen x\n"), "frozen", &v), -1);
        ck_assert_int_eq(wk__cg_parse_keyed(P("frozen\n"), "frozen", &v), 0);
        ck_assert_int_eq(wk__cg_parse_keyed(P(""), "frozen", &v), 0);
}
END_TEST

struct pids {
        pid_t got[8];
        size_t n;
        int fail_at;
};

static int pid_cb(pid_t pid, void *userdata)
{
        struct pids *p = userdata;
        if (p->n == SP_ARRAY_SIZE(p->got) || (p->fail_at && (int)p->n == p->fail_at))
                return -5;
        p->got[p->n++] = pid;
        return 0;
}

START_TEST(parse_pids)
{
        struct pids p = {0};
        ck_assert_int_eq(wk__cg_parse_pids(P("1\n42\n\n4194304\n"), pid_cb, &p), 0);
        ck_assert_uint_eq(p.n, 3);
        ck_assert_int_eq(p.got[0], 1);
        ck_assert_int_eq(p.got[1], 42);
        ck_assert_int_eq(p.got[2], 4194304);

        static const char *const bad[] = {"0\n", "-3\n", "12a\n", "1 2\n", "99999999999\n", " 5\n"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                p = (struct pids){0};
                ck_assert_msg(wk__cg_parse_pids(P(bad[i]), pid_cb, &p) == -1, "accepted %s", bad[i]);
        }
        p = (struct pids){.fail_at = 1};
        ck_assert_int_eq(wk__cg_parse_pids(P("1\n2\n3\n"), pid_cb, &p), -5);
        ck_assert_uint_eq(p.n, 1);
        p = (struct pids){0};
        ck_assert_int_eq(wk__cg_parse_pids(P(""), pid_cb, &p), 0);
        ck_assert_uint_eq(p.n, 0);
}
END_TEST

START_TEST(parse_controllers)
{
        ck_assert_uint_eq(wk__cg_parse_v1_options("rw,cpu,cpuacct"), WK_CGROUP_CPU | WK_CGROUP_CPUACCT);
        ck_assert_uint_eq(wk__cg_parse_v1_options("rw,memory"), WK_CGROUP_MEMORY);
        ck_assert_uint_eq(wk__cg_parse_v1_options("rw,name=systemd"), 0);
        ck_assert_uint_eq(wk__cg_parse_v1_options("rw,cpuset"), 0);
        ck_assert_uint_eq(wk__cg_parse_v1_options("rw,blkio,freezer,pids,devices"),
                          WK_CGROUP_IO | WK_CGROUP_FREEZER | WK_CGROUP_PIDS | WK_CGROUP_DEVICES);
        ck_assert_uint_eq(wk__cg_parse_v2_controllers(P("cpuset cpu io memory hugetlb pids rdma misc\n")),
                          WK_CGROUP_CPU | WK_CGROUP_IO | WK_CGROUP_MEMORY | WK_CGROUP_PIDS);
        /* v1 names mean nothing on v2 and the other way round. */
        ck_assert_uint_eq(wk__cg_parse_v2_controllers(P("blkio freezer cpuacct")), 0);
        ck_assert_uint_eq(wk__cg_parse_v1_options("rw,io"), 0);
        ck_assert_uint_eq(wk__cg_parse_v2_controllers(P("")), 0);
        ck_assert_str_eq(wk__cg_controller_name(WK_CGROUP_V1, WK_CGROUP_IO), "blkio");
        ck_assert_str_eq(wk__cg_controller_name(WK_CGROUP_V2, WK_CGROUP_IO), "io");
}
END_TEST

START_TEST(conversions)
{
        ck_assert_uint_eq(wk__cg_cpu_quota_us(1000), 100000);
        ck_assert_uint_eq(wk__cg_cpu_quota_us(500), 50000);
        ck_assert_uint_eq(wk__cg_cpu_quota_us(2500), 250000);
        ck_assert_uint_eq(wk__cg_cpu_quota_us(WK_CGROUP_CPU_MIN_MILLICORES), 1000); /* the kernel's minimum */
        ck_assert_uint_eq(wk__cg_cpu_quota_us(0), 0);
        ck_assert_uint_eq(wk__cg_cpu_shares(1000), 1024);
        ck_assert_uint_eq(wk__cg_cpu_shares(0), 1024);
        ck_assert_uint_eq(wk__cg_cpu_shares(1), 2);
        ck_assert_uint_eq(wk__cg_cpu_shares(WK_CGROUP_CPU_MAX_MILLICORES), 262144);
        ck_assert_uint_eq(wk__cg_cpu_weight(0), 39); /* 1024 shares: what systemd maps to weight 39 */
        ck_assert_uint_eq(wk__cg_cpu_weight(1), 1);
        ck_assert_uint_eq(wk__cg_cpu_weight(WK_CGROUP_CPU_MAX_MILLICORES), 10000);
        ck_assert_uint_eq(wk__cg_io_weight_v1(1), 10);
        ck_assert_uint_eq(wk__cg_io_weight_v1(10000), 1000);
        ck_assert_uint_eq(wk__cg_io_weight_bfq(1), 1);
        ck_assert_uint_eq(wk__cg_io_weight_bfq(10000), 1000);
        ck_assert_uint_eq(wk__cg_io_weight_bfq(0), wk__cg_io_weight_bfq(100));
}
END_TEST

START_TEST(limits_bounds)
{
        wk_cgroup_io_limit io[WK_CGROUP_IO_DEVICES_MAX + 1] = {{8, 0, 1, 1}};
        wk_cgroup_limits ok = {.cpu_millicores = 500,
                               .memory_bytes = 64 << 20,
                               .pids_max = 100,
                               .io_weight = 100,
                               .io = io,
                               .n_io = 1};
        ck_assert_int_eq(wk__cg_limits_validate(&ok, NULL), 0);
        ck_assert_int_eq(wk__cg_limits_validate(&(wk_cgroup_limits){0}, NULL), 0);

        wk_cgroup_limits bad[] = {
                {.cpu_millicores = 5},
                {.cpu_millicores = WK_CGROUP_CPU_MAX_MILLICORES + 1},
                {.memory_bytes = 1024},
                {.memory_bytes = WK_CGROUP_MEMORY_MAX + 1},
                {.pids_max = WK_CGROUP_PIDS_MAX + 1},
                {.io_weight = WK_CGROUP_IO_WEIGHT_MAX + 1},
                {.io = io, .n_io = WK_CGROUP_IO_DEVICES_MAX + 1},
                {.io = NULL, .n_io = 1},
                {.io = (wk_cgroup_io_limit[]){{4096, 0, 1, 1}}, .n_io = 1},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                sp_error *err = NULL;
                ck_assert_msg(wk__cg_limits_validate(&bad[i], &err) == -SP_E_INVALID, "case %zu accepted", i);
                sp_error_free(err);
        }
}
END_TEST

START_TEST(group_names)
{
        /* A host whose hierarchy does not exist: names are checked before any
         * file is touched, and a valid name then fails on the missing path. */
        struct wk_cgroup_host h = {.version = WK_CGROUP_V1,
                                   .n_mounts = 1,
                                   .mounts = {{.path = (char *)"/nonexistent-cgroup-root", .controllers = 1}}};
        static const char *const bad_names[] = {"", ".", "..", ".x", "a/b", "a b", "x\n", "\xff"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_names); i++) {
                wk_cgroup *cg = NULL;
                sp_error *err = NULL;
                ck_assert_msg(wk_cgroup_open(&h, "space", bad_names[i], &cg, &err) == -SP_E_INVALID, "name %s",
                              bad_names[i]);
                sp_error_free(err);
        }
        static const char *const bad_parents[] = {"",     "/space", "space/", "a//b",
                                                  "../x", "a/../b", "a/.b",   "1/2/3/4/5/6/7/8/9"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_parents); i++) {
                wk_cgroup *cg = NULL;
                ck_assert_msg(wk_cgroup_create(&h, bad_parents[i], "sbx_1", &cg, NULL) == -SP_E_INVALID, "parent %s",
                              bad_parents[i]);
        }
        wk_cgroup *cg = NULL;
        sp_error *err = NULL;
        ck_assert_int_eq(wk_cgroup_open(&h, "system.slice/space-worker.service", "sbx_1", &cg, &err), -SP_E_NOT_FOUND);
        sp_error_free(err);
        char **names = NULL;
        ck_assert_int_eq(wk_cgroup_list(&h, "space", &names, NULL), 0);
        ck_assert_ptr_null(names[0]);
        sp_strv_freep(&names);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cgroup_parse");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, parse_u64);
        tcase_add_test(tc, parse_keyed);
        tcase_add_test(tc, parse_pids);
        tcase_add_test(tc, parse_controllers);
        tcase_add_test(tc, conversions);
        tcase_add_test(tc, limits_bounds);
        tcase_add_test(tc, group_names);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
