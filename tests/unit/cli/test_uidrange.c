/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: direct mode's registry of host uid ranges (cli/uidrange.h), on
 * a registry file of the test's own — two clusters get disjoint ranges, a
 * cluster gets its own range again, --purge's release frees it, a cluster
 * that is gone is reclaimed, a preference is honoured only when free, the
 * space runs out with an error, a registry that is not one is refused and
 * left as it is, and processes reserving at once never share a range. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "uidrange.h"

#define BLOCK (256 * CTL_UIDRANGE_ALIGN) /* a worker of 256 slots */

static char *dir;
static char reg[600];

static void setup(void)
{
        dir = sp_test_tmpdir("uidrange");
        snprintf(reg, sizeof(reg), "%s/var/uid-ranges.json", dir);
}

static void teardown(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* A state directory holding a cluster (its direct.json). */
static const char *cluster(const char *name)
{
        static char bufs[8][700];
        static int n;
        char *p = bufs[n++ % 8];
        snprintf(p, 700, "%s/%s", dir, name);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        char f[800];
        snprintf(f, sizeof(f), "%s/direct.json", p);
        ck_assert_int_eq(sp_file_write_atomic(f, "{}", 2, 0600, NULL), 0);
        return p;
}

static uint32_t reserve(const char *state, uint32_t count, uint32_t preferred)
{
        uint32_t base = 0;
        sp_error *e = NULL;
        sp_test_ok(ctl_uidrange_reserve(reg, state, count, preferred, &base, &e), &e);
        ck_assert_uint_ge(base, CTL_UIDRANGE_FIRST);
        ck_assert_uint_le((uint64_t)base + count, CTL_UIDRANGE_END);
        ck_assert_uint_le(base, CTL_UIDRANGE_BASE_MAX);
        ck_assert_uint_eq(base % CTL_UIDRANGE_ALIGN, 0);
        return base;
}

static bool disjoint(uint32_t a, uint32_t an, uint32_t b, uint32_t bn)
{
        return (uint64_t)a + an <= b || (uint64_t)b + bn <= a;
}

START_TEST(two_clusters_get_disjoint_ranges)
{
        const char *x = cluster("x"), *y = cluster("y");
        uint32_t bx = reserve(x, BLOCK, CTL_UIDRANGE_FIRST), by = reserve(y, BLOCK, CTL_UIDRANGE_FIRST);
        ck_assert_uint_eq(bx, CTL_UIDRANGE_FIRST); /* the first keeps the worker's default */
        ck_assert_msg(disjoint(bx, BLOCK, by, BLOCK), "x %u and y %u overlap", bx, by);
        /* Again: each its own, whatever it prefers now. */
        ck_assert_uint_eq(reserve(x, BLOCK, 0), bx);
        ck_assert_uint_eq(reserve(y, BLOCK, bx), by);
        /* A smaller need fits the range held; a bigger one is refused. */
        ck_assert_uint_eq(reserve(x, CTL_UIDRANGE_ALIGN, 0), bx);
        uint32_t base = 7;
        sp_error *e = NULL;
        ck_assert_int_eq(ctl_uidrange_reserve(reg, x, 2 * BLOCK, 0, &base, &e), -SP_E_CONFLICT);
        ck_assert_uint_eq(base, 7);
        e = sp_error_free(e);
        /* A third of another size lands past both, or between them. */
        const char *z = cluster("z");
        uint32_t bz = reserve(z, 3 * CTL_UIDRANGE_ALIGN, 0);
        ck_assert(disjoint(bz, 3 * CTL_UIDRANGE_ALIGN, bx, BLOCK) && disjoint(bz, 3 * CTL_UIDRANGE_ALIGN, by, BLOCK));
}
END_TEST

START_TEST(release_and_reclaim)
{
        const char *x = cluster("x"), *y = cluster("y");
        uint32_t bx = reserve(x, BLOCK, 0);
        uint32_t by = reserve(y, BLOCK, 0);
        sp_error *e = NULL;
        /* down --purge gives x's back: the next cluster may have it. */
        sp_test_ok(ctl_uidrange_release(reg, x, &e), &e);
        sp_test_ok(ctl_uidrange_release(reg, x, &e), &e); /* twice is nothing */
        const char *w = cluster("w");
        ck_assert_uint_eq(reserve(w, BLOCK, 0), bx);
        /* y's directory loses its cluster without a purge: its range is reclaimed. */
        char f[800];
        snprintf(f, sizeof(f), "%s/direct.json", y);
        ck_assert_int_eq(unlink(f), 0);
        const char *v = cluster("v");
        ck_assert_uint_eq(reserve(v, BLOCK, by), by);
        /* A release of a registry that does not exist is nothing. */
        char none[700];
        snprintf(none, sizeof(none), "%s/none.json", dir);
        sp_test_ok(ctl_uidrange_release(none, x, &e), &e);
}
END_TEST

START_TEST(preference_only_when_free_and_space_runs_out)
{
        const char *x = cluster("x"), *y = cluster("y");
        uint32_t want = CTL_UIDRANGE_FIRST + 10 * BLOCK;
        ck_assert_uint_eq(reserve(x, BLOCK, want), want);
        uint32_t by = reserve(y, BLOCK, want + CTL_UIDRANGE_ALIGN); /* overlaps x: not given */
        ck_assert(disjoint(by, BLOCK, want, BLOCK));
        /* The whole space, then nothing more. */
        const char *big = cluster("big");
        uint32_t rest = (uint32_t)(((uint64_t)CTL_UIDRANGE_END - CTL_UIDRANGE_FIRST) / 2 / CTL_UIDRANGE_ALIGN *
                                   CTL_UIDRANGE_ALIGN);
        reserve(big, rest, 0);
        const char *big2 = cluster("big2");
        uint32_t base = 0;
        sp_error *e = NULL;
        ck_assert_int_eq(ctl_uidrange_reserve(reg, big2, rest, 0, &base, &e), -SP_E_LIMIT);
        ck_assert_msg(strstr(e->message, "no free range"), "%s", e->message);
        e = sp_error_free(e);
        /* Counts that are no range. */
        ck_assert_int_eq(ctl_uidrange_reserve(reg, big2, 1000, 0, &base, &e), -SP_E_INVALID);
        e = sp_error_free(e);
}
END_TEST

START_TEST(a_broken_registry_is_refused_and_kept)
{
        const char *x = cluster("x");
        reserve(x, BLOCK, 0);
        static const char *const bad[] = {
                "not json",
                "{}",
                "{\"ranges\":{}}",
                "{\"ranges\":[{\"state_dir\":\"/a\",\"base\":5,\"count\":65536}]}",
                "{\"ranges\":[{\"state_dir\":\"/a\",\"base\":268435456,\"count\":100}]}",
                "{\"ranges\":[{\"state_dir\":\"\",\"base\":268435456,\"count\":65536}]}",
                "{\"ranges\":[{\"base\":268435456,\"count\":65536}]}",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                ck_assert_int_eq(sp_file_write_atomic(reg, bad[i], strlen(bad[i]), 0644, NULL), 0);
                uint32_t base = 0;
                sp_error *e = NULL;
                ck_assert_int_eq(ctl_uidrange_reserve(reg, x, BLOCK, 0, &base, &e), -SP_E_INVALID);
                ck_assert_msg(strstr(e->message, reg), "%s", e->message);
                e = sp_error_free(e);
                ck_assert_int_eq(ctl_uidrange_release(reg, x, &e), -SP_E_INVALID);
                e = sp_error_free(e);
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                ck_assert_int_eq(sp_file_read(reg, 1 << 20, &b, NULL), 0);
                ck_assert_uint_eq(b.len, strlen(bad[i]));
                ck_assert(memcmp(b.data, bad[i], b.len) == 0);
        }
}
END_TEST

/* Clusters reserving at the same moment, each from its own process. */
START_TEST(concurrent_reservations_never_share)
{
        enum { N = 8 };
        const char *dirs[N];
        char names[N][8];
        for (int i = 0; i < N; i++) {
                snprintf(names[i], sizeof(names[i]), "c%d", i);
                dirs[i] = strdup(cluster(names[i]));
        }
        int fds[N][2];
        pid_t pids[N];
        for (int i = 0; i < N; i++) {
                ck_assert_int_eq(pipe(fds[i]), 0);
                pids[i] = fork();
                ck_assert_int_ge(pids[i], 0);
                if (pids[i] == 0) {
                        uint32_t base = 0;
                        if (ctl_uidrange_reserve(reg, dirs[i], BLOCK, CTL_UIDRANGE_FIRST, &base, NULL) < 0)
                                _exit(1);
                        _exit(write(fds[i][1], &base, sizeof(base)) == (ssize_t)sizeof(base) ? 0 : 1);
                }
                close(fds[i][1]);
        }
        uint32_t bases[N];
        for (int i = 0; i < N; i++) {
                int st = 0;
                ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
                ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                ck_assert_int_eq(read(fds[i][0], &bases[i], sizeof(bases[i])), (ssize_t)sizeof(bases[i]));
                close(fds[i][0]);
        }
        for (int i = 0; i < N; i++)
                for (int j = i + 1; j < N; j++)
                        ck_assert_msg(disjoint(bases[i], BLOCK, bases[j], BLOCK), "%d and %d share %u/%u", i, j,
                                      bases[i], bases[j]);
        for (int i = 0; i < N; i++)
                free((char *)dirs[i]);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("uidrange");
        TCase *tc = tcase_create("registry");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, two_clusters_get_disjoint_ranges);
        tcase_add_test(tc, release_and_reclaim);
        tcase_add_test(tc, preference_only_when_free_and_space_runs_out);
        tcase_add_test(tc, a_broken_registry_is_refused_and_kept);
        tcase_add_test(tc, concurrent_reservations_never_share);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
