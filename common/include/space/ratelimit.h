/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Token buckets by key: requests per second with a burst.
 *
 * Each key (an API key's id, a tenant's id) has a bucket of at most `burst`
 * tokens that refills at `rate` tokens a second; a request takes one token
 * or is refused, and then told how long until one is there (what an HTTP
 * server answers as Retry-After). Rate and burst are given with every take,
 * so that one table serves keys with different limits.
 *
 * A bucket that has refilled to its burst is the same as no bucket: entries
 * are dropped then, when the table needs room, so the table holds at most
 * max_keys keys however many come and go. When every entry is still in use
 * (max_keys keys each took a token within their refill time), a new key is
 * refused with a wait of one token's refill (never let through unbounded).
 *
 * Keys are at most SP_RATELIMIT_KEY_MAX bytes (longer ones are cut); a caller
 * passes only keys it has authenticated, never raw client input. Times are
 * monotonic microseconds (sp_now_mono_us()), passed in so that tests can
 * step them.
 *
 * Thread-safe: every function takes the handle's mutex.
 */
#ifndef SPACE_RATELIMIT_H
#define SPACE_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SP_RATELIMIT_KEY_MAX 64

typedef struct sp_ratelimit sp_ratelimit;

/* A new table of at most max_keys (>= 1) buckets. NULL when out of memory. */
sp_ratelimit *sp_ratelimit_new(size_t max_keys);

/* Frees the table; accepts NULL; returns NULL. */
sp_ratelimit *sp_ratelimit_free(sp_ratelimit *r);

/* Takes one token from key's bucket (rate tokens a second, at most burst;
 * a new key starts full) at now_us. true: taken. false: refused, and
 * *ret_wait_us (may be NULL) is how long until a token is there (> 0). A
 * rate <= 0 means no limit: always true, and no entry is made. A burst
 * below 1 counts as 1. */
bool sp_ratelimit_take(sp_ratelimit *r, const char *key, double rate, double burst, int64_t now_us,
                       int64_t *ret_wait_us);

/* Gives back a token taken from key at now_us (a request that another
 * limit then refused), never above burst. No-op for a key without a bucket. */
void sp_ratelimit_give(sp_ratelimit *r, const char *key, double burst);

/* Keys with a bucket now. */
size_t sp_ratelimit_keys(sp_ratelimit *r);

/* Whole seconds to wait for wait_us, at least 1: the value of a Retry-After
 * header. */
int64_t sp_ratelimit_retry_after_s(int64_t wait_us);

#endif
