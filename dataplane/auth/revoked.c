/* SPDX-License-Identifier: Apache-2.0 */
/* The revoked API keys and deleted templates: two sorted arrays of ids,
 * looked up by binary search. */
#include <stdlib.h>
#include <string.h>

#include "auth/revoked.h"

typedef struct id_set {
        pr_revoked_key *v; /* sorted by id */
        size_t n, cap;
} id_set;

struct dp_revoked {
        id_set keys, templates;
};

dp_revoked *dp_revoked_new(void)
{
        return calloc(1, sizeof(dp_revoked));
}

void dp_revoked_free(dp_revoked *r)
{
        if (!r)
                return;
        free(r->keys.v);
        free(r->templates.v);
        free(r);
}

/* The index of id, or where it would go (*found false). */
static size_t find(const id_set *r, const char *id, bool *found)
{
        size_t lo = 0, hi = r->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(r->v[mid].id, id);
                if (c == 0) {
                        *found = true;
                        return mid;
                }
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        *found = false;
        return lo;
}

/* Drops the ids revoked before cutoff_us, keeping the order. */
static void forget_before(id_set *r, int64_t cutoff_us)
{
        size_t k = 0;
        for (size_t i = 0; i < r->n; i++)
                if (r->v[i].revoked_at_us >= cutoff_us)
                        r->v[k++] = r->v[i];
        r->n = k;
}

/* Drops the oldest id. */
static void forget_oldest(id_set *r)
{
        size_t oldest = 0;
        for (size_t i = 1; i < r->n; i++)
                if (r->v[i].revoked_at_us < r->v[oldest].revoked_at_us)
                        oldest = i;
        memmove(&r->v[oldest], &r->v[oldest + 1], (r->n - oldest - 1) * sizeof(*r->v));
        r->n--;
}

/* Adds the n ids of v; how many were new, or -1 when out of memory. */
static int add(id_set *r, const pr_revoked_key *v, size_t n, int64_t cutoff)
{
        forget_before(r, cutoff);
        int added = 0;
        for (size_t i = 0; i < n; i++) {
                const pr_revoked_key *k = &v[i];
                bool found;
                if (k->revoked_at_us < cutoff || !k->id[0])
                        continue;
                find(r, k->id, &found);
                if (found)
                        continue;
                if (r->n == DP_REVOKED_MAX)
                        forget_oldest(r);
                if (r->n == r->cap) {
                        size_t cap = r->cap ? r->cap * 2 : 64;
                        pr_revoked_key *nv = realloc(r->v, cap * sizeof(*nv));
                        if (!nv)
                                return -1;
                        r->v = nv;
                        r->cap = cap;
                }
                size_t at = find(r, k->id, &found);
                memmove(&r->v[at + 1], &r->v[at], (r->n - at) * sizeof(*r->v));
                r->v[at] = *k;
                r->n++;
                added++;
        }
        return added;
}

int dp_revoked_add(dp_revoked *r, const pr_revoked_keys *keys, int64_t now_us, int *ret_templates)
{
        int64_t cutoff = now_us - (int64_t)PR_REVOKED_WINDOW_S * 1000000;
        int added = add(&r->keys, keys->keys, keys->n, cutoff);
        int templates = add(&r->templates, keys->templates, keys->ntemplates, cutoff);
        if (ret_templates)
                *ret_templates = templates < 0 ? 0 : templates;
        return added < 0 || templates < 0 ? -1 : added;
}

static bool has(const id_set *r, const char *id)
{
        bool found = false;
        if (id && id[0])
                find(r, id, &found);
        return found;
}

bool dp_revoked_has(const dp_revoked *r, const char *key_id)
{
        return r && has(&r->keys, key_id);
}

bool dp_revoked_has_template(const dp_revoked *r, const char *template_id)
{
        return r && has(&r->templates, template_id);
}

size_t dp_revoked_count(const dp_revoked *r)
{
        return r->keys.n;
}

size_t dp_revoked_templates(const dp_revoked *r)
{
        return r->templates.n;
}
