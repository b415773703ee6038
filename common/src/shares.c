/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Per-tenant shares (see shares.h): a total, a chained hash table of the
 * keys holding units (an entry lives while its count is above zero), and a
 * small fixed table of refusal counters.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "space/shares.h"

#define BUCKETS 256

typedef struct entry {
        struct entry *next;
        size_t used;
        char key[SP_SHARES_KEY_MAX + 1];
} entry;

typedef struct refusal {
        char key[SP_SHARES_KEY_MAX + 1];
        uint64_t share, total;
} refusal;

struct sp_shares {
        pthread_mutex_t mu;
        size_t total, per_key, used;
        entry *buckets[BUCKETS];
        refusal named[SP_SHARES_NAMED];
        size_t nnamed;
        refusal other; /* refusals of keys beyond the named ones */
};

sp_shares *sp_shares_new(size_t total, size_t per_key)
{
        if (total == 0)
                total = 1;
        if (per_key == 0)
                per_key = total / 4 ? total / 4 : 1;
        if (per_key > total)
                per_key = total;
        sp_shares *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        pthread_mutex_init(&s->mu, NULL);
        s->total = total;
        s->per_key = per_key;
        return s;
}

sp_shares *sp_shares_free(sp_shares *s)
{
        if (!s)
                return NULL;
        for (size_t i = 0; i < BUCKETS; i++)
                for (entry *e = s->buckets[i], *next; e; e = next) {
                        next = e->next;
                        free(e);
                }
        pthread_mutex_destroy(&s->mu);
        free(s);
        return NULL;
}

/* The key as stored: cut to SP_SHARES_KEY_MAX bytes. */
static void key_copy(char out[static SP_SHARES_KEY_MAX + 1], const char *key)
{
        size_t n = key ? strnlen(key, SP_SHARES_KEY_MAX) : 0;
        if (n)
                memcpy(out, key, n);
        out[n] = '\0';
}

static size_t bucket(const char *key)
{
        uint32_t h = 2166136261u; /* FNV-1a */
        for (const char *p = key; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        return h % BUCKETS;
}

/* The entry of key, or NULL; *ret_link is where it hangs (for unlinking). */
static entry *find(sp_shares *s, const char *key, entry ***ret_link)
{
        entry **link = &s->buckets[bucket(key)];
        for (; *link; link = &(*link)->next)
                if (strcmp((*link)->key, key) == 0)
                        break;
        *ret_link = link;
        return *link;
}

static void count_refusal(sp_shares *s, const char *key, bool share)
{
        refusal *r = NULL;
        for (size_t i = 0; i < s->nnamed && !r; i++)
                if (strcmp(s->named[i].key, key) == 0)
                        r = &s->named[i];
        if (!r && s->nnamed < SP_SHARES_NAMED) {
                r = &s->named[s->nnamed++];
                memcpy(r->key, key, strlen(key) + 1);
        }
        if (!r)
                r = &s->other;
        if (share)
                r->share++;
        else
                r->total++;
}

int sp_shares_take(sp_shares *s, const char *key, const char *what, sp_error **err)
{
        char k[SP_SHARES_KEY_MAX + 1];
        key_copy(k, key);
        pthread_mutex_lock(&s->mu);
        entry **link;
        entry *e = find(s, k, &link);
        if (e && e->used >= s->per_key) {
                count_refusal(s, k, true);
                size_t n = s->per_key;
                pthread_mutex_unlock(&s->mu);
                return sp_error_set(err, SP_E_LIMIT,
                                    "this tenant holds %zu %s already, its share of this server: wait until one ends",
                                    n, what);
        }
        if (s->used >= s->total) {
                count_refusal(s, k, false);
                size_t n = s->total;
                pthread_mutex_unlock(&s->mu);
                return sp_error_set(err, SP_E_UNAVAILABLE, "this server holds %zu %s already: try again later", n,
                                    what);
        }
        if (!e) {
                e = calloc(1, sizeof(*e));
                if (!e) {
                        pthread_mutex_unlock(&s->mu);
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                }
                memcpy(e->key, k, sizeof(k));
                *link = e;
        }
        e->used++;
        s->used++;
        pthread_mutex_unlock(&s->mu);
        return 0;
}

void sp_shares_give(sp_shares *s, const char *key)
{
        char k[SP_SHARES_KEY_MAX + 1];
        key_copy(k, key);
        pthread_mutex_lock(&s->mu);
        entry **link;
        entry *e = find(s, k, &link);
        if (e) {
                s->used--;
                if (--e->used == 0) {
                        *link = e->next;
                        free(e);
                }
        }
        pthread_mutex_unlock(&s->mu);
}

size_t sp_shares_used(sp_shares *s)
{
        pthread_mutex_lock(&s->mu);
        size_t n = s->used;
        pthread_mutex_unlock(&s->mu);
        return n;
}

size_t sp_shares_used_by(sp_shares *s, const char *key)
{
        char k[SP_SHARES_KEY_MAX + 1];
        key_copy(k, key);
        pthread_mutex_lock(&s->mu);
        entry **link;
        entry *e = find(s, k, &link);
        size_t n = e ? e->used : 0;
        pthread_mutex_unlock(&s->mu);
        return n;
}

size_t sp_shares_keys_full(sp_shares *s)
{
        size_t n = 0;
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < BUCKETS; i++)
                for (entry *e = s->buckets[i]; e; e = e->next)
                        n += e->used >= s->per_key;
        pthread_mutex_unlock(&s->mu);
        return n;
}

size_t sp_shares_total(const sp_shares *s)
{
        return s->total;
}

size_t sp_shares_per_key(const sp_shares *s)
{
        return s->per_key;
}

typedef struct render_ctx {
        const char *name;
        sp_buf *out;
        sp_error **err;
        int r;
} render_ctx;

void sp_shares_label(char *dst, size_t cap, const char *src)
{
        size_t i = 0;
        for (; src[i] && i + 1 < cap; i++)
                dst[i] = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-*[]", src[i])
                                 ? src[i]
                                 : '_';
        dst[i] = '\0';
}

static void render_one(const char *key, uint64_t share, uint64_t total, void *userdata)
{
        render_ctx *x = userdata;
        char label[SP_SHARES_KEY_MAX + 1];
        sp_shares_label(label, sizeof(label), key);
        if (x->r == 0 && share)
                x->r = sp_buf_appendf(x->out, x->err, "%s{tenant=\"%s\",limit=\"tenant\"} %llu\n", x->name, label,
                                      (unsigned long long)share);
        if (x->r == 0 && total)
                x->r = sp_buf_appendf(x->out, x->err, "%s{tenant=\"%s\",limit=\"total\"} %llu\n", x->name, label,
                                      (unsigned long long)total);
}

int sp_shares_render(sp_shares *s, const char *name, const char *help, sp_buf *out, sp_error **err)
{
        render_ctx x = {.name = name, .out = out, .err = err};
        x.r = sp_buf_appendf(out, err, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
        if (x.r == 0)
                sp_shares_refusals(s, render_one, &x);
        return x.r;
}

void sp_shares_refusals(sp_shares *s,
                        void (*fn)(const char *key, uint64_t share_refusals, uint64_t total_refusals, void *userdata),
                        void *userdata)
{
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->nnamed; i++)
                fn(s->named[i].key, s->named[i].share, s->named[i].total, userdata);
        if (s->other.share || s->other.total)
                fn("*", s->other.share, s->other.total, userdata);
        pthread_mutex_unlock(&s->mu);
}
