/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Token buckets by key (see ratelimit.h): a chained hash table of buckets,
 * each refilled lazily from the time it was last touched.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/ratelimit.h"

#define BUCKETS 1024

typedef struct entry {
        struct entry *next;
        double tokens;
        int64_t at_us; /* when tokens was right */
        double rate, burst; /* as of the last take: when it is full again */
        char key[SP_RATELIMIT_KEY_MAX + 1];
} entry;

struct sp_ratelimit {
        pthread_mutex_t mu;
        size_t max_keys, nkeys;
        entry *buckets[BUCKETS];
};

/* x microseconds rounded up, at least 1. */
static int64_t ceil_us(double x)
{
        int64_t n = (int64_t)x;
        if ((double)n < x)
                n++;
        return n > 0 ? n : 1;
}

static size_t hash(const char *key)
{
        /* FNV-1a */
        uint64_t h = 1469598103934665603ULL;
        for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
                h ^= *p;
                h *= 1099511628211ULL;
        }
        return (size_t)(h % BUCKETS);
}

sp_ratelimit *sp_ratelimit_new(size_t max_keys)
{
        sp_ratelimit *r = calloc(1, sizeof(*r));
        if (!r)
                return NULL;
        pthread_mutex_init(&r->mu, NULL);
        r->max_keys = max_keys ? max_keys : 1;
        return r;
}

sp_ratelimit *sp_ratelimit_free(sp_ratelimit *r)
{
        if (!r)
                return NULL;
        for (size_t i = 0; i < BUCKETS; i++)
                for (entry *e = r->buckets[i], *next; e; e = next) {
                        next = e->next;
                        free(e);
                }
        pthread_mutex_destroy(&r->mu);
        free(r);
        return NULL;
}

static void refill(entry *e, double rate, double burst, int64_t now_us)
{
        if (now_us > e->at_us) {
                e->tokens += (double)(now_us - e->at_us) / 1e6 * rate;
                e->at_us = now_us;
        }
        if (e->tokens > burst)
                e->tokens = burst;
}

/* Drops every bucket that has refilled to its burst by now_us. */
static void sweep(sp_ratelimit *r, int64_t now_us)
{
        for (size_t i = 0; i < BUCKETS; i++)
                for (entry **link = &r->buckets[i]; *link;) {
                        entry *e = *link;
                        refill(e, e->rate, e->burst, now_us);
                        if (e->tokens >= e->burst) {
                                *link = e->next;
                                free(e);
                                r->nkeys--;
                        } else {
                                link = &e->next;
                        }
                }
}

static entry *find(sp_ratelimit *r, const char *key, entry ***ret_link)
{
        entry **link = &r->buckets[hash(key)];
        for (; *link; link = &(*link)->next)
                if (strcmp((*link)->key, key) == 0)
                        break;
        if (ret_link)
                *ret_link = link;
        return *link;
}

bool sp_ratelimit_take(sp_ratelimit *r, const char *key, double rate, double burst, int64_t now_us,
                       int64_t *ret_wait_us)
{
        if (ret_wait_us)
                *ret_wait_us = 0;
        if (!(rate > 0))
                return true;
        if (burst < 1)
                burst = 1;
        char k[SP_RATELIMIT_KEY_MAX + 1];
        snprintf(k, sizeof(k), "%s", key ? key : "");
        pthread_mutex_lock(&r->mu);
        entry *e = find(r, k, NULL);
        if (!e) {
                if (r->nkeys >= r->max_keys)
                        sweep(r, now_us);
                if (r->nkeys >= r->max_keys || !(e = calloc(1, sizeof(*e)))) {
                        pthread_mutex_unlock(&r->mu);
                        if (ret_wait_us)
                                *ret_wait_us = ceil_us(1e6 / rate);
                        return false;
                }
                memcpy(e->key, k, sizeof(k));
                e->tokens = burst;
                e->at_us = now_us;
                entry **link = &r->buckets[hash(k)];
                e->next = *link;
                *link = e;
                r->nkeys++;
        }
        e->rate = rate;
        e->burst = burst;
        refill(e, rate, burst, now_us);
        bool ok = e->tokens >= 1;
        if (ok)
                e->tokens -= 1;
        else if (ret_wait_us) {
                *ret_wait_us = ceil_us((1 - e->tokens) / rate * 1e6);
        }
        pthread_mutex_unlock(&r->mu);
        return ok;
}

void sp_ratelimit_give(sp_ratelimit *r, const char *key, double burst)
{
        char k[SP_RATELIMIT_KEY_MAX + 1];
        snprintf(k, sizeof(k), "%s", key ? key : "");
        pthread_mutex_lock(&r->mu);
        entry *e = find(r, k, NULL);
        if (e) {
                e->tokens += 1;
                if (e->tokens > (burst < 1 ? 1 : burst))
                        e->tokens = burst < 1 ? 1 : burst;
        }
        pthread_mutex_unlock(&r->mu);
}

size_t sp_ratelimit_keys(sp_ratelimit *r)
{
        pthread_mutex_lock(&r->mu);
        size_t n = r->nkeys;
        pthread_mutex_unlock(&r->mu);
        return n;
}

int64_t sp_ratelimit_retry_after_s(int64_t wait_us)
{
        if (wait_us <= 0)
                return 1;
        int64_t s = (wait_us + 999999) / 1000000;
        return s < 1 ? 1 : s;
}
