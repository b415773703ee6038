/* SPDX-License-Identifier: Apache-2.0 */
/* ResolveSandbox with a cache (resolve.h). */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/resolve.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

typedef struct entry {
        bool used, in_flight;
        int64_t expires_us, answered_us; /* monotonic */
        dp_sandbox_info info;
        sp_errc code; /* 0: info holds the answer */
        char message[256];
        dp_resolve *waiters;
} entry;

typedef struct wake_call wake_call;

struct dp_resolve {
        dp_resolver *r;
        entry *e; /* waiting on it; NULL once ready */
        wake_call *wake; /* or on this wake's answer */
        dp_resolve_cb cb;
        void *ud;
        dp_sandbox_info info;
        sp_errc code;
        char message[256];
        dp_resolve *next;
};

/* A wake in flight and the lookups waiting on its answer (a cancelled one
 * leaves the list; the answer is then dropped for it). */
struct wake_call {
        dp_resolver *r;
        dp_resolve *waiters;
        bool anonymous;
        char sandbox[DP_CLAIM_ID_MAX + 1];
        wake_call *next;
};

struct dp_resolver {
        sp_rpc_client *cli;
        wake_call *wakes; /* in flight */
        struct event *kick; /* delivers ready */
        dp_resolve *ready;
        entry *v; /* DP_RESOLVE_CACHE */
};

static void unlink_from(dp_resolve **list, dp_resolve *q)
{
        for (dp_resolve **p = list; *p; p = &(*p)->next)
                if (*p == q) {
                        *p = q->next;
                        return;
                }
}

static void make_ready(dp_resolver *r, dp_resolve *q, const entry *e)
{
        q->e = NULL;
        q->info = e->info;
        q->code = e->code;
        memcpy(q->message, e->message, sizeof(q->message));
        q->next = r->ready;
        r->ready = q;
        static const struct timeval now = {0, 0};
        event_add(r->kick, &now);
}

static void on_kick(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        dp_resolver *r = ud;
        while (r->ready) {
                dp_resolve *q = r->ready;
                r->ready = q->next;
                _cleanup_error_ sp_error *e = NULL;
                if (q->code)
                        sp_error_set(&e, q->code, "%s", q->message);
                q->cb(q->code ? NULL : &q->info, e, q->ud);
                free(q);
        }
}

static int copy_str(json_object *o, const char *name, bool required, char *out, size_t cap, sp_error **err)
{
        const char *s = NULL;
        if (sp_json_get_string(o, name, required, cap - 1, &s, err) < 0)
                return -SP_E_INVALID;
        snprintf(out, cap, "%s", s ? s : "");
        return 0;
}

/* The answer (or err) of a question about asked, into info (all zeros but
 * the sandbox on failure), code and message (0 and "" on success). */
static void take_answer(json_object *resp, const sp_error *err, const char *asked, dp_sandbox_info *info, sp_errc *code,
                        char message[static 256])
{
        _cleanup_error_ sp_error *bad = NULL;
        const char *mode = NULL;
        memset(info, 0, sizeof(*info));
        if (!err) {
                bool ar = false, waking = false;
                if (copy_str(resp, "sandbox_id", true, info->sandbox, sizeof(info->sandbox), &bad) < 0 ||
                    copy_str(resp, "tenant_id", true, info->tenant, sizeof(info->tenant), &bad) < 0 ||
                    copy_str(resp, "state", true, info->state, sizeof(info->state), &bad) < 0 ||
                    copy_str(resp, "worker", false, info->worker, sizeof(info->worker), &bad) < 0 ||
                    copy_str(resp, "worker_name", false, info->worker_name, sizeof(info->worker_name), &bad) < 0 ||
                    sp_json_get_string(resp, "ingress", true, 16, &mode, &bad) < 0 ||
                    sp_json_get_bool(resp, "auto_resume", false, &ar, &bad) < 0 ||
                    sp_json_get_bool(resp, "waking", false, &waking, &bad) < 0) {
                        sp_error_wrap(&bad, "the control plane's answer to ResolveSandbox");
                } else if (strcmp(mode, "public") != 0 && strcmp(mode, "token") != 0) {
                        sp_error_set(&bad, SP_E_INTERNAL, "the control plane named ingress mode '%.16s'", mode);
                } else if (strcmp(info->sandbox, asked) != 0) {
                        sp_error_set(&bad, SP_E_INTERNAL, "the control plane answered for another sandbox");
                }
                info->public_ = mode && strcmp(mode, "public") == 0;
                info->auto_resume = ar;
                info->waking = waking;
                err = bad;
        }
        if (err) {
                memset(info, 0, sizeof(*info));
                snprintf(info->sandbox, sizeof(info->sandbox), "%s", asked); /* the key of the entry */
        }
        *code = err ? err->code : 0;
        snprintf(message, 256, "%s", err ? err->message : "");
}

static void on_answer(json_object *resp, const sp_error *err, void *ud)
{
        entry *e = ud;
        e->in_flight = false;
        char asked[sizeof(e->info.sandbox)];
        memcpy(asked, e->info.sandbox, sizeof(asked));
        take_answer(resp, err, asked, &e->info, &e->code, e->message);
        /* A failure to ask is not remembered: the next request asks again. */
        int64_t ttl = !e->code ? DP_RESOLVE_TTL_MS : e->code == SP_E_NOT_FOUND ? DP_RESOLVE_MISS_TTL_MS : 0;
        e->answered_us = sp_now_mono_us();
        e->expires_us = e->answered_us + ttl * SP_USEC_PER_MSEC;
        if (!ttl)
                e->used = false;
        while (e->waiters) {
                dp_resolve *q = e->waiters;
                e->waiters = q->next;
                make_ready(q->r, q, e);
        }
}

dp_resolver *dp_resolver_new(struct event_base *base, sp_rpc_client *cli, sp_error **err)
{
        dp_resolver *r = calloc(1, sizeof(*r));
        if (r)
                r->v = calloc(DP_RESOLVE_CACHE, sizeof(entry));
        if (!r || !r->v || !(r->kick = evtimer_new(base, on_kick, r))) {
                dp_resolver_free(r);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        r->cli = cli;
        return r;
}

void dp_resolver_free(dp_resolver *r)
{
        if (!r)
                return;
        for (size_t i = 0; r->v && i < DP_RESOLVE_CACHE; i++)
                while (r->v[i].waiters) {
                        dp_resolve *q = r->v[i].waiters;
                        r->v[i].waiters = q->next;
                        free(q);
                }
        while (r->ready) {
                dp_resolve *q = r->ready;
                r->ready = q->next;
                free(q);
        }
        while (r->wakes) { /* none once the client was freed first, as said */
                wake_call *w = r->wakes;
                r->wakes = w->next;
                while (w->waiters) {
                        dp_resolve *q = w->waiters;
                        w->waiters = q->next;
                        free(q);
                }
                free(w);
        }
        if (r->kick)
                event_free(r->kick);
        free(r->v);
        free(r);
}

/* The entry of sandbox, or a slot for it (a free one, else the one that
 * expires first and is not being asked), or NULL when every slot is asked. */
static entry *slot_for(dp_resolver *r, const char *sandbox, int64_t now)
{
        entry *victim = NULL;
        for (size_t i = 0; i < DP_RESOLVE_CACHE; i++) {
                entry *e = &r->v[i];
                if (e->used && strcmp(e->info.sandbox, sandbox) == 0) {
                        if (!e->in_flight && e->expires_us <= now)
                                e->used = false; /* stale: asked again in the same slot */
                        return e;
                }
                if (e->in_flight)
                        continue;
                if (!e->used || e->expires_us <= now) {
                        if (!victim || victim->used)
                                victim = e;
                } else if (!victim || (victim->used && e->expires_us < victim->expires_us)) {
                        victim = e;
                }
        }
        if (victim)
                victim->used = false;
        return victim;
}

dp_resolve *dp_resolver_lookup_fresh(dp_resolver *r, const char *sandbox, int64_t max_age_ms, dp_resolve_cb cb,
                                     void *userdata, sp_error **err)
{
        dp_resolve *q = calloc(1, sizeof(*q));
        if (!q) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        *q = (dp_resolve){.r = r, .cb = cb, .ud = userdata};
        int64_t now = sp_now_mono_us();
        entry *e = slot_for(r, sandbox, now);
        if (!e) {
                free(q);
                sp_error_set(err, SP_E_LIMIT, "%d sandboxes are being looked up: no more", DP_RESOLVE_CACHE);
                return NULL;
        }
        if (e->used && !e->in_flight && now - e->answered_us > max_age_ms * SP_USEC_PER_MSEC)
                e->used = false; /* too old for this caller: asked again in the same slot */
        if (e->used && !e->in_flight) {
                make_ready(r, q, e);
                return q;
        }
        if (!e->used) {
                *e = (entry){.used = true};
                snprintf(e->info.sandbox, sizeof(e->info.sandbox), "%s", sandbox);
                _cleanup_json_ json_object *req = json_object_new_object();
                json_object_object_add(req, "sandbox_id", json_object_new_string(sandbox));
                if (sp_rpc_client_call(r->cli, "ResolveSandbox", req, DP_RESOLVE_TIMEOUT_MS, on_answer, e, err) < 0) {
                        e->used = false;
                        free(q);
                        return NULL;
                }
                e->in_flight = true;
        }
        q->e = e;
        q->next = e->waiters;
        e->waiters = q;
        return q;
}

dp_resolve *dp_resolver_lookup(dp_resolver *r, const char *sandbox, dp_resolve_cb cb, void *userdata, sp_error **err)
{
        return dp_resolver_lookup_fresh(r, sandbox, DP_RESOLVE_TTL_MS, cb, userdata, err);
}

static void on_wake_answer(json_object *resp, const sp_error *err, void *ud)
{
        wake_call *w = ud;
        dp_resolver *r = w->r;
        for (wake_call **p = &r->wakes; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        break;
                }
        dp_sandbox_info info;
        sp_errc code;
        char message[256];
        take_answer(resp, err, w->sandbox, &info, &code, message);
        /* What was learnt serves the next lookups (the cache entry, when
         * there is one and it is not being asked). */
        if (!code) {
                int64_t now = sp_now_mono_us();
                for (size_t i = 0; i < DP_RESOLVE_CACHE; i++) {
                        entry *e = &r->v[i];
                        if (e->used && !e->in_flight && strcmp(e->info.sandbox, w->sandbox) == 0) {
                                e->info = info;
                                e->code = 0;
                                e->message[0] = '\0';
                                e->answered_us = now;
                                e->expires_us = now + DP_RESOLVE_TTL_MS * SP_USEC_PER_MSEC;
                        }
                }
        }
        while (w->waiters) {
                dp_resolve *q = w->waiters;
                w->waiters = q->next;
                q->wake = NULL;
                q->info = info;
                q->code = code;
                memcpy(q->message, message, sizeof(q->message));
                q->next = r->ready;
                r->ready = q;
        }
        free(w);
        static const struct timeval now = {0, 0};
        event_add(r->kick, &now);
}

dp_resolve *dp_resolver_wake(dp_resolver *r, const char *sandbox, bool anonymous, const char *key_id, dp_resolve_cb cb,
                             void *userdata, sp_error **err)
{
        dp_resolve *q = calloc(1, sizeof(*q));
        if (!q) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        *q = (dp_resolve){.r = r, .cb = cb, .ud = userdata};
        /* One wake in flight per sandbox: later ones wait on its answer (an
         * anonymous one may also wait on a token's, not the reverse). */
        for (wake_call *w = r->wakes; w; w = w->next)
                if (strcmp(w->sandbox, sandbox) == 0 && (anonymous || !w->anonymous)) {
                        q->wake = w;
                        q->next = w->waiters;
                        w->waiters = q;
                        return q;
                }
        wake_call *w = calloc(1, sizeof(*w));
        if (!w) {
                free(q);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        *w = (wake_call){.r = r, .waiters = q, .anonymous = anonymous};
        snprintf(w->sandbox, sizeof(w->sandbox), "%s", sandbox);
        q->wake = w;
        _cleanup_json_ json_object *req = json_object_new_object();
        json_object_object_add(req, "sandbox_id", json_object_new_string(sandbox));
        json_object_object_add(req, "wake", json_object_new_boolean(true));
        if (anonymous)
                json_object_object_add(req, "anonymous", json_object_new_boolean(true));
        if (key_id && *key_id)
                json_object_object_add(req, "key_id", json_object_new_string(key_id));
        if (sp_rpc_client_call(r->cli, "ResolveSandbox", req, DP_RESOLVE_TIMEOUT_MS, on_wake_answer, w, err) < 0) {
                free(q);
                free(w);
                return NULL;
        }
        w->next = r->wakes;
        r->wakes = w;
        return q;
}

void dp_resolve_cancel(dp_resolve *q)
{
        if (!q)
                return;
        if (q->e)
                unlink_from(&q->e->waiters, q);
        else if (q->wake)
                unlink_from(&q->wake->waiters, q); /* the answer is dropped for it */
        else
                unlink_from(&q->r->ready, q);
        free(q);
}

void dp_resolver_forget(dp_resolver *r, const char *sandbox)
{
        for (size_t i = 0; i < DP_RESOLVE_CACHE; i++) {
                entry *e = &r->v[i];
                if (e->used && !e->in_flight && strcmp(e->info.sandbox, sandbox) == 0)
                        e->used = false;
        }
}
