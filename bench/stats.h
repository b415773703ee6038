/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Percentiles and their JSON and Markdown forms, shared by the benchmark
 * programs in bench/. Not thread-safe (no state; the arrays are the caller's).
 */
#ifndef SPACE_BENCH_STATS_H
#define SPACE_BENCH_STATS_H

#include <json-c/json.h>
#include <stdint.h>

/* A summary of n samples (milliseconds, or whatever unit the caller uses). */
typedef struct bn_stats {
        int n;
        double min, p50, p90, p99, max;
} bn_stats;

/* Nearest-rank percentiles of v[0..n), which is sorted in place; all zero
 * when n is 0. */
bn_stats bn_stats_of(double *v, int n);

/* Adds "<key>_p50_ms", "<key>_p90_ms", "<key>_p99_ms" and "<key>_n" to o. */
void bn_stats_json(json_object *o, const char *key, bn_stats s);

/* Milliseconds since t0 (a sp_now_mono_us() reading). */
double bn_ms_since(int64_t t0);

#endif
