/* SPDX-License-Identifier: Apache-2.0 */
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>

#include "space/time.h"

static int cmp_dbl(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

bn_stats bn_stats_of(double *v, int n)
{
        bn_stats s = {.n = n};
        if (n <= 0)
                return s;
        qsort(v, (size_t)n, sizeof(double), cmp_dbl);
        s.min = v[0];
        s.max = v[n - 1];
        s.p50 = v[(n - 1) * 50 / 100];
        s.p90 = v[(n - 1) * 90 / 100];
        s.p99 = v[(n - 1) * 99 / 100];
        return s;
}

void bn_stats_json(json_object *o, const char *key, bn_stats s)
{
        static const char *const suffix[] = {"p50_ms", "p90_ms", "p99_ms"};
        const double value[] = {s.p50, s.p90, s.p99};
        char name[128];
        for (size_t i = 0; i < 3; i++) {
                snprintf(name, sizeof(name), "%s_%s", key, suffix[i]);
                json_object_object_add(o, name, json_object_new_double(value[i]));
        }
        snprintf(name, sizeof(name), "%s_n", key);
        json_object_object_add(o, name, json_object_new_int(s.n));
}

double bn_ms_since(int64_t t0)
{
        return (double)(sp_now_mono_us() - t0) / 1000.0;
}
