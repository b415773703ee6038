/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sched/sched.h"

/* Workers named in a refusal message before "and N more". */
#define EXPLAIN_MAX 20

/* Whether a worker can take the sandbox, from best to worst. */
typedef enum verdict {
        FITS,
        NO_ROOM, /* would fit once sandboxes there end */
        NEVER, /* unhealthy, cordoned, wrong backend or labels, too small in all */
} verdict;

/* A free fraction num/den with den > 0, compared exactly. */
typedef struct frac {
        int64_t num, den;
} frac;

/* Capacities and usage come from the store; a negative one counts as 0, so
 * cap - used never overflows and free room is never negative. */
/* Whether the comma-separated list has name. */
static bool runs(const char *list, const char *name)
{
        size_t n = strlen(name);
        for (const char *p = list; p && *p;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                if (len == n && strncmp(p, name, n) == 0)
                        return true;
                p = end ? end + 1 : NULL;
        }
        return false;
}

static int64_t nonneg(int64_t v)
{
        return v < 0 ? 0 : v;
}

static int64_t free_of(int64_t cap, int64_t used)
{
        cap = nonneg(cap);
        used = nonneg(used);
        return used >= cap ? 0 : cap - used;
}

static const char *str_or(const char *s, const char *fallback)
{
        return s && *s ? s : fallback;
}

static const char *display_name(const cp_sched_worker *w)
{
        return str_or(w->name, str_or(w->id, "(unnamed)"));
}

/* Checks that req->labels is NULL or an object of string values. */
static int check_labels(json_object *labels, sp_error **err)
{
        if (!labels)
                return 0;
        if (!json_object_is_type(labels, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "requested labels must be an object");
        json_object_object_foreach (labels, key, val) {
                if (!json_object_is_type(val, json_type_string))
                        return sp_error_set(err, SP_E_INVALID, "requested label '%.64s' must be a string", key);
        }
        return 0;
}

/* Writes why the worker lacks a requested label into why[], or returns false. */
static bool lacks_label(json_object *want, json_object *have, char *why, size_t whysz)
{
        if (!want)
                return false;
        /* A NULL or non-object have holds no key. */
        json_object_object_foreach (want, key, val) {
                const char *v = json_object_get_string(val);
                json_object *got = NULL;
                if (!json_object_object_get_ex(have, key, &got)) {
                        snprintf(why, whysz, "lacks label %.64s=%.64s", key, v);
                        return true;
                }
                const char *g = json_object_is_type(got, json_type_string) ? json_object_get_string(got) : NULL;
                if (!g || strcmp(g, v) != 0) {
                        snprintf(why, whysz, "has label %.64s=%.64s, not %.64s", key, g ? g : "(not a string)", v);
                        return true;
                }
        }
        return false;
}

/* Decides whether w can take the sandbox now, later or never; on a refusal
 * writes the reason into why[]. Permanent reasons are checked before a lack
 * of free room, so NO_ROOM means room is the only thing missing. */
static bool excluded(const cp_sched_request *req, const cp_sched_worker *w)
{
        if (!w->id)
                return false;
        if (req->exclude_worker && strcmp(req->exclude_worker, w->id) == 0)
                return true;
        for (size_t i = 0; req->exclude_workers && i < req->nexclude_workers; i++)
                if (req->exclude_workers[i] && strcmp(req->exclude_workers[i], w->id) == 0)
                        return true;
        return false;
}

static verdict judge(const cp_sched_request *req, const cp_sched_worker *w, char *why, size_t whysz)
{
        if (excluded(req, w)) {
                snprintf(why, whysz, "excluded (moving the sandbox away from it)");
                return NEVER;
        }
        if (!w->health || strcmp(w->health, "ready") != 0) {
                snprintf(why, whysz, "%.64s", str_or(w->health, "health unknown"));
                return NEVER;
        }
        if (!w->admin_state || strcmp(w->admin_state, "active") != 0) {
                snprintf(why, whysz, "%.64s", str_or(w->admin_state, "admin state unknown"));
                return NEVER;
        }
        if (req->backend && *req->backend && !runs(w->backend, req->backend)) {
                snprintf(why, whysz, "backend %.64s, not %.64s", str_or(w->backend, "unknown"), req->backend);
                return NEVER;
        }
        if (lacks_label(req->labels, w->labels, why, whysz))
                return NEVER;
        if (!w->has_template) {
                snprintf(why, whysz, "no template %.64s", req->template_id);
                return NEVER;
        }
        if (req->need_store && !w->artifact_store) {
                snprintf(why, whysz, "no artifact store");
                return NEVER;
        }

        int64_t cpu_cap = nonneg(w->cpu_millis_capacity), mem_cap = nonneg(w->memory_mb_capacity);
        if (req->cpu_millis > cpu_cap) {
                snprintf(why, whysz, "needs %lldm of CPU, has %lldm in all", (long long)req->cpu_millis,
                         (long long)cpu_cap);
                return NEVER;
        }
        if (req->memory_mb > mem_cap) {
                snprintf(why, whysz, "needs %lld MiB of memory, has %lld MiB in all", (long long)req->memory_mb,
                         (long long)mem_cap);
                return NEVER;
        }
        if (w->slots_capacity < 1) {
                snprintf(why, whysz, "has no slots");
                return NEVER;
        }
        if (w->disk_mb_capacity > 0 && req->disk_mb > w->disk_mb_capacity) {
                snprintf(why, whysz, "needs %lld MiB of disk, its storage pool has %lld MiB in all",
                         (long long)req->disk_mb, (long long)w->disk_mb_capacity);
                return NEVER;
        }

        int64_t cpu_free = free_of(w->cpu_millis_capacity, w->cpu_millis_used);
        int64_t mem_free = free_of(w->memory_mb_capacity, w->memory_mb_used);
        if (req->cpu_millis > cpu_free) {
                snprintf(why, whysz, "needs %lldm of CPU, %lldm free", (long long)req->cpu_millis, (long long)cpu_free);
                return NO_ROOM;
        }
        if (req->memory_mb > mem_free) {
                snprintf(why, whysz, "needs %lld MiB of memory, %lld MiB free", (long long)req->memory_mb,
                         (long long)mem_free);
                return NO_ROOM;
        }
        if (free_of(w->slots_capacity, w->slots_used) < 1) {
                snprintf(why, whysz, "no free slot");
                return NO_ROOM;
        }
        /* Quotas overcommit (snapshots share their template's blocks), so a new
         * sandbox does not need its whole quota free, only a working margin: its
         * quota or a twentieth of the pool, whichever is less. */
        int64_t disk_free = free_of(w->disk_mb_capacity, w->disk_mb_used);
        int64_t margin = req->disk_mb < w->disk_mb_capacity / 20 ? req->disk_mb : w->disk_mb_capacity / 20;
        if (w->disk_mb_capacity > 0 && disk_free < margin) {
                snprintf(why, whysz, "its storage pool is full (%lld MiB free, %lld MiB needed)", (long long)disk_free,
                         (long long)margin);
                return NO_ROOM;
        }
        return FITS;
}

/* a < b, exactly: both denominators are positive and every factor fits in
 * 63 bits, so the products fit in 128. */
static bool frac_less(frac a, frac b)
{
        return (__int128)a.num * b.den < (__int128)b.num * a.den;
}

static frac free_after(int64_t cap, int64_t used, int64_t need)
{
        cap = nonneg(cap);
        if (cap == 0)
                return (frac){0, 1};
        return (frac){free_of(cap, used) - need, cap};
}

/* The fraction of the tightest resource left free once the sandbox is placed
 * on a worker that fits it. */
static frac room_score(const cp_sched_request *req, const cp_sched_worker *w)
{
        frac s = free_after(w->cpu_millis_capacity, w->cpu_millis_used, req->cpu_millis);
        frac m = free_after(w->memory_mb_capacity, w->memory_mb_used, req->memory_mb);
        frac k = free_after(w->slots_capacity, w->slots_used, 1);
        if (frac_less(m, s))
                s = m;
        if (frac_less(k, s))
                s = k;
        return s;
}

/* The jobs a worker has beyond its threads (< 0: a thread is free; a worker
 * that does not report its threads counts as having one free). */
static int64_t backlog(const cp_sched_worker *w)
{
        if (w->job_threads <= 0)
                return -1;
        return nonneg(w->jobs_pending) - w->job_threads;
}

/* Whether a is preferred over b: warm first, then a thread free (or else the
 * shorter queue), then more room, then the smaller name, then the smaller id
 * (an equal pair keeps the earlier one). */
static bool better(const cp_sched_request *req, const cp_sched_worker *a, const cp_sched_worker *b)
{
        if ((a->warm > 0) != (b->warm > 0))
                return a->warm > 0;
        int64_t qa = backlog(a), qb = backlog(b);
        if ((qa < 0) != (qb < 0))
                return qa < 0;
        if (qa >= 0 && qa != qb)
                return qa < qb;
        frac ra = room_score(req, a), rb = room_score(req, b);
        if (frac_less(rb, ra))
                return true;
        if (frac_less(ra, rb))
                return false;
        int c = strcmp(display_name(a), display_name(b));
        if (c != 0)
                return c < 0;
        return strcmp(str_or(a->id, ""), str_or(b->id, "")) < 0;
}

/* A message built in place, silently cut at its size (which the bounds on
 * every part keep it from reaching). */
typedef struct msgbuf {
        char s[8192];
        size_t len;
} msgbuf;

__attribute__((format(printf, 2, 3))) static void msg_add(msgbuf *m, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = vsnprintf(m->s + m->len, sizeof(m->s) - m->len, fmt, ap);
        va_end(ap);
        if (r > 0)
                m->len += (size_t)r < sizeof(m->s) - m->len ? (size_t)r : sizeof(m->s) - m->len - 1;
}

int cp_sched_place(const cp_sched_request *req, const cp_sched_worker *ws, size_t n, size_t *ret_index, sp_error **err)
{
        if (!req || !ret_index || (n > 0 && !ws))
                return sp_error_set(err, SP_E_INVALID, "scheduler called without a request, workers or result");
        if (!req->template_id || !*req->template_id)
                return sp_error_set(err, SP_E_INVALID, "the request names no template");
        if (req->cpu_millis < 0 || req->memory_mb < 0 || req->disk_mb < 0)
                return sp_error_set(err, SP_E_INVALID, "requested CPU, memory and disk must not be negative");
        if (check_labels(req->labels, err) < 0)
                return -SP_E_INVALID;
        if (n == 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "no workers have joined the cluster");

        char why[256];
        size_t best = n;
        for (size_t i = 0; i < n; i++)
                if (judge(req, &ws[i], why, sizeof(why)) == FITS && (best == n || better(req, &ws[i], &ws[best])))
                        best = i;
        if (best < n) {
                *ret_index = best;
                return 0;
        }

        /* Nothing fits: explain each refusal, and tell "later" from "never". */
        msgbuf m = {.len = 0};
        bool later = false;
        msg_add(&m, "no worker can place it: ");
        for (size_t i = 0; i < n; i++) {
                if (judge(req, &ws[i], why, sizeof(why)) == NO_ROOM)
                        later = true;
                if (i < EXPLAIN_MAX)
                        msg_add(&m, "%s%.64s: %s", i ? "; " : "", display_name(&ws[i]), why);
        }
        if (n > EXPLAIN_MAX)
                msg_add(&m, "; and %zu more", n - EXPLAIN_MAX);
        return sp_error_set(err, later ? SP_E_LIMIT : SP_E_UNAVAILABLE, "%s", m.s);
}
