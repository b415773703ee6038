/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Caps (see caps.h): two sp_shares, one per bound, keyed by a digest of the
 * caller's API key.
 */
#include "caps.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/shares.h"

#define DIGEST_KEY_LEN 32
#define MAX_SANDBOX_ID 128 /* as e2b_envd_open() */

/* Digests of the API keys the public API has accepted, as an open-addressed
 * table: a slot is probed at most ACCEPTED_PROBE times from the digest's
 * hash, and a full window forgets its oldest entry (a forgotten key is
 * accepted again at its next call). */
#define ACCEPTED_SLOTS 8192 /* a power of two */
#define ACCEPTED_PROBE 8

typedef struct accepted_slot {
        char digest[E2B_CAPS_CALLER_LEN + 1]; /* "" when free */
        uint64_t stamp; /* insertion order */
} accepted_slot;

struct e2b_caps {
        sp_shares *shares[E2B_CAP__MAX];
        uint8_t digest_key[DIGEST_KEY_LEN];
        pthread_mutex_t mu; /* accepted, stamp */
        accepted_slot *accepted;
        uint64_t stamp;
};

/* What each cap counts, for messages and metrics. */
static const struct {
        const char *unit, *total_opt, *key_opt, *metric;
} caps_info[E2B_CAP__MAX] = {
        [E2B_CAP_CALLS] = {"requests in progress", "--max-calls", "--max-calls-per-key", "call"},
        [E2B_CAP_WATCHERS] = {"watchers", "--max-watchers", "--max-watchers-per-key", "watcher"},
};

e2b_caps *e2b_caps_new(size_t max_calls, size_t per_key_calls, size_t max_watchers, size_t per_key_watchers,
                       sp_error **err)
{
        e2b_caps *c = calloc(1, sizeof(*c));
        if (!c) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        if (RAND_bytes(c->digest_key, sizeof(c->digest_key)) != 1) {
                sp_error_set(err, SP_E_IO, "no random bytes for the caller digest key");
                return e2b_caps_free(c);
        }
        pthread_mutex_init(&c->mu, NULL);
        if (!(c->accepted = calloc(ACCEPTED_SLOTS, sizeof(*c->accepted)))) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return e2b_caps_free(c);
        }
        c->shares[E2B_CAP_CALLS] = sp_shares_new(max_calls, per_key_calls);
        c->shares[E2B_CAP_WATCHERS] = sp_shares_new(max_watchers, per_key_watchers);
        if (!c->shares[E2B_CAP_CALLS] || !c->shares[E2B_CAP_WATCHERS]) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return e2b_caps_free(c);
        }
        return c;
}

e2b_caps *e2b_caps_free(e2b_caps *c)
{
        if (!c)
                return NULL;
        for (size_t i = 0; i < E2B_CAP__MAX; i++)
                sp_shares_free(c->shares[i]);
        sp_explicit_bzero(c->digest_key, sizeof(c->digest_key));
        free(c->accepted);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
}

/* The digest of key into out (hex). */
static void digest(const e2b_caps *c, const char *key, char out[static E2B_CAPS_CALLER_LEN + 1])
{
        uint8_t md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        out[0] = '\0';
        if (!HMAC(EVP_sha256(), c->digest_key, (int)sizeof(c->digest_key), (const uint8_t *)key, strlen(key), md,
                  &mdlen) ||
            mdlen < E2B_CAPS_CALLER_LEN / 2)
                return; /* cannot happen with SHA-256; the anonymous bucket is the safe side */
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < E2B_CAPS_CALLER_LEN / 2; i++) {
                out[2 * i] = hex[md[i] >> 4];
                out[2 * i + 1] = hex[md[i] & 15];
        }
        out[E2B_CAPS_CALLER_LEN] = '\0';
        sp_explicit_bzero(md, sizeof(md));
}

static size_t slot_of(const char *d)
{
        /* The digest is an HMAC: its first hex digits are as good a hash as any. */
        char head[9];
        memcpy(head, d, 8);
        head[8] = '\0';
        return (size_t)strtoull(head, NULL, 16) & (ACCEPTED_SLOTS - 1);
}

static bool accepted(e2b_caps *c, const char *d)
{
        pthread_mutex_lock(&c->mu);
        bool found = false;
        for (size_t i = 0, s = slot_of(d); i < ACCEPTED_PROBE && !found; i++)
                found = strcmp(c->accepted[(s + i) & (ACCEPTED_SLOTS - 1)].digest, d) == 0;
        pthread_mutex_unlock(&c->mu);
        return found;
}

void e2b_caps_key_accepted(e2b_caps *c, const char *key)
{
        char d[E2B_CAPS_CALLER_LEN + 1];
        digest(c, key, d);
        if (!*d)
                return;
        pthread_mutex_lock(&c->mu);
        size_t s = slot_of(d), victim = s;
        bool done = false;
        for (size_t i = 0; i < ACCEPTED_PROBE && !done; i++) {
                accepted_slot *a = &c->accepted[(s + i) & (ACCEPTED_SLOTS - 1)];
                if (strcmp(a->digest, d) == 0 || !a->digest[0]) {
                        victim = (s + i) & (ACCEPTED_SLOTS - 1);
                        done = true;
                } else if (a->stamp < c->accepted[victim].stamp) {
                        victim = (s + i) & (ACCEPTED_SLOTS - 1);
                }
        }
        memcpy(c->accepted[victim].digest, d, sizeof(d));
        c->accepted[victim].stamp = ++c->stamp;
        pthread_mutex_unlock(&c->mu);
}

void e2b_caps_caller(e2b_caps *c, const e2b_token_key *token_key, sp_http_request *req, bool by_api_key,
                     char out[static E2B_CAPS_CALLER_LEN + 1])
{
        out[0] = '\0';
        if (by_api_key) {
                const char *key = sp_http_request_header(req, "X-API-KEY");
                if (key && *key)
                        digest(c, key, out);
                /* A key the API has not accepted yet (a made-up one, or a new
                 * one's first call) holds no share of its own: all of them
                 * share one, so that made-up keys cannot take the server
                 * while the API is slow to refuse them. */
                if (*out && !accepted(c, out))
                        snprintf(out, E2B_CAPS_CALLER_LEN + 1, "%s", E2B_CAPS_UNACCEPTED);
                return;
        }
        const char *sandbox = sp_http_request_header(req, "E2b-Sandbox-Id");
        const char *token = sp_http_request_header(req, "X-Access-Token");
        if (!sandbox || !*sandbox || strlen(sandbox) > MAX_SANDBOX_ID || !token)
                return;
        _cleanup_free_ char *key = e2b_token_open(token_key, sandbox, token, NULL);
        if (!key)
                return;
        if (*key)
                digest(c, key, out);
        sp_explicit_bzero(key, strlen(key));
}

int e2b_caps_take(e2b_caps *c, e2b_cap cap, const char *caller, sp_error **err)
{
        _cleanup_error_ sp_error *e = NULL;
        if (sp_shares_take(c->shares[cap], caller, caps_info[cap].unit, &e) == 0)
                return 0;
        if (e->code == SP_E_LIMIT && sp_shares_used_by(c->shares[cap], caller) > 0)
                return sp_error_set(
                        err, SP_E_LIMIT, "%s %zu %s already, %s share of this server (%s): wait until one ends",
                        !*caller ? "requests without credentials hold"
                        : strcmp(caller, E2B_CAPS_UNACCEPTED) == 0
                                ? "requests with API keys the API has not accepted yet hold"
                                : "this API key holds",
                        sp_shares_per_key(c->shares[cap]), caps_info[cap].unit,
                        *caller && strcmp(caller, E2B_CAPS_UNACCEPTED) != 0 ? "its" : "their", caps_info[cap].key_opt);
        if (e->code == SP_E_UNAVAILABLE)
                return sp_error_set(err, SP_E_UNAVAILABLE, "this server holds %zu %s already (%s): try again later",
                                    sp_shares_total(c->shares[cap]), caps_info[cap].unit, caps_info[cap].total_opt);
        return sp_error_set(err, e->code, "%s", e->message);
}

void e2b_caps_give(e2b_caps *c, e2b_cap cap, const char *caller)
{
        sp_shares_give(c->shares[cap], caller);
}

size_t e2b_caps_used(e2b_caps *c, e2b_cap cap)
{
        return sp_shares_used(c->shares[cap]);
}

typedef struct refusals {
        uint64_t key, total;
} refusals;

static void add_refusals(const char *key, uint64_t share, uint64_t total, void *userdata)
{
        (void)key;
        refusals *r = userdata;
        r->key += share;
        r->total += total;
}

/* Appends one metric with its HELP and TYPE lines; labels may be NULL. */
static int metric(sp_buf *out, const char *type, const char *name, const char *help, const char *labels,
                  unsigned long long v, sp_error **err)
{
        if (help && sp_buf_appendf(out, err, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type) < 0)
                return -1;
        return sp_buf_appendf(out, err, "%s%s %llu\n", name, labels ? labels : "", v);
}

int e2b_caps_render(e2b_caps *c, sp_buf *out, sp_error **err)
{
        static const char *const help_used[E2B_CAP__MAX] = {
                [E2B_CAP_CALLS] = "Requests in progress now (each holds a thread).",
                [E2B_CAP_WATCHERS] = "CreateWatcher watchers kept now.",
        };
        for (size_t i = 0; i < E2B_CAP__MAX; i++) {
                sp_shares *s = c->shares[i];
                const char *m = caps_info[i].metric;
                char name[128], help[256];
                refusals n = {0, 0};
                sp_shares_refusals(s, add_refusals, &n);
                snprintf(name, sizeof(name), "space_e2b_%ss", m);
                if (metric(out, "gauge", name, help_used[i], NULL, sp_shares_used(s), err) < 0)
                        return -1;
                snprintf(name, sizeof(name), "space_e2b_%ss_max", m);
                snprintf(help, sizeof(help), "The bound on %s (%s).", caps_info[i].unit, caps_info[i].total_opt);
                if (metric(out, "gauge", name, help, NULL, sp_shares_total(s), err) < 0)
                        return -1;
                snprintf(name, sizeof(name), "space_e2b_%ss_per_key_max", m);
                snprintf(help, sizeof(help), "What one API key may hold of the %s (%s).", caps_info[i].unit,
                         caps_info[i].key_opt);
                if (metric(out, "gauge", name, help, NULL, sp_shares_per_key(s), err) < 0)
                        return -1;
                snprintf(name, sizeof(name), "space_e2b_%s_refusals_total", m);
                snprintf(help, sizeof(help),
                         "Refused %s: limit=\"key\" when the caller held its share, \"total\" when all callers "
                         "together held the bound.",
                         caps_info[i].unit);
                if (metric(out, "counter", name, help, "{limit=\"key\"}", n.key, err) < 0 ||
                    metric(out, "counter", name, NULL, "{limit=\"total\"}", n.total, err) < 0)
                        return -1;
                snprintf(name, sizeof(name), "space_e2b_%s_keys_at_share", m);
                if (metric(out, "gauge", name,
                           "Callers (API keys, and the bucket of requests without one) holding their whole share now.",
                           NULL, sp_shares_keys_full(s), err) < 0)
                        return -1;
        }
        return 0;
}
