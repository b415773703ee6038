/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Time helpers. Durations are in microseconds (int64) unless named _ms.
 */
#ifndef SPACE_TIME_H
#define SPACE_TIME_H

#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define SP_USEC_PER_MSEC INT64_C(1000)
#define SP_USEC_PER_SEC INT64_C(1000000)

/* CLOCK_MONOTONIC / CLOCK_REALTIME in microseconds. */
int64_t sp_now_mono_us(void);
int64_t sp_now_real_us(void);

/* RFC 3339 UTC with milliseconds: "2026-11-30T18:00:00.123Z". out >= 32 bytes. */
void sp_time_format_rfc3339(int64_t real_us, char out[static 32]);
/* Parses RFC 3339 (Z or ±hh:mm offset, optional fraction). */
int sp_time_parse_rfc3339(const char *s, int64_t *ret_us, sp_error **err);

/* Parses "250ms", "30s", "5m", "6h", "2d", or a combination "1h30m"; a bare
 * number is seconds. Rejects negatives and overflow. */
int sp_duration_parse(const char *s, int64_t *ret_us, sp_error **err);
/* Formats like "1h30m", "250ms", "0s". out >= 32 bytes. */
void sp_duration_format(int64_t us, char out[static 32]);

#endif
