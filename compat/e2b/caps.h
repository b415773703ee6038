/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Caps: the daemon's shared bounds, shared out per caller.
 *
 * space-e2b bounds the requests in progress (each holds a thread: calls)
 * and CreateWatcher's watchers (each holds a listing in memory). Each bound
 * is an sp_shares (space/shares.h): a caller may hold at most its share
 * (--max-calls-per-key, --max-watchers-per-key), all callers together the
 * total (--max-calls, --max-watchers), so one tenant at its share leaves
 * the rest to the others.
 *
 * A caller is named by the API key its request acts with: X-API-KEY on the
 * REST API, the key sealed in X-Access-Token on envd. The wrapper cannot
 * cheaply learn the key's tenant, so a caller is a keyed digest of the key
 * (HMAC-SHA256 under a random key made for this process, its first 8 bytes
 * in hex): the key itself is never kept, logged or shown, and a digest is
 * worthless outside this process. Requests without a credential (or with a
 * token that does not open) share one anonymous bucket, the caller "". An
 * API key holds a share of its own only once the public API has accepted it
 * (answered one of its calls with anything but 401, e2b_caps_key_accepted);
 * until then its calls count in one bucket shared by every such key,
 * E2B_CAPS_UNACCEPTED, so that made-up keys, which hold a call until the API
 * refuses them, cannot together take more than one share however slow the
 * API is.
 *
 * Thread-safe: e2b_caps_caller() runs on the loop, take and give on any
 * thread; the handle is read-only after e2b_caps_new() but for the shares,
 * which lock themselves.
 */
#ifndef E2B_CAPS_H
#define E2B_CAPS_H

#include <stdbool.h>
#include <stddef.h>

#include "space/buf.h"
#include "space/error.h"
#include "space/http.h"
#include "token.h"

#define E2B_CAPS_CALLER_LEN 16 /* hex digits of a caller's digest */
#define E2B_CAPS_UNACCEPTED "unaccepted" /* the bucket of API keys not yet accepted */

typedef struct e2b_caps e2b_caps;

/* What a unit of a cap is. */
typedef enum e2b_cap {
        E2B_CAP_CALLS, /* a request in progress */
        E2B_CAP_WATCHERS, /* a CreateWatcher watcher */
        E2B_CAP__MAX,
} e2b_cap;

/* New caps bounding calls at max_calls (per_key_calls each; 0: a quarter)
 * and watchers at max_watchers (per_key_watchers each; 0: a quarter), with a
 * fresh random digest key. Errors: SP_E_IO (no randomness), SP_E_LIMIT (out
 * of memory). */
e2b_caps *e2b_caps_new(size_t max_calls, size_t per_key_calls, size_t max_watchers, size_t per_key_watchers,
                       sp_error **err);

/* Frees caps (the digest key wiped); accepts NULL; returns NULL. */
e2b_caps *e2b_caps_free(e2b_caps *caps);

/* The caller of req into out ("" for the anonymous bucket): the digest of
 * X-API-KEY when by_api_key (the REST routes), else of the key that
 * X-Access-Token seals for E2b-Sandbox-Id (opened with token_key). A header
 * the route does not authenticate with is ignored, so a made-up one cannot
 * buy a fresh share. */
void e2b_caps_caller(e2b_caps *caps, const e2b_token_key *token_key, sp_http_request *req, bool by_api_key,
                     char out[static E2B_CAPS_CALLER_LEN + 1]);

/* Records that the public API accepted key (thread-safe): its calls hold
 * its own share from then on. */
void e2b_caps_key_accepted(e2b_caps *caps, const char *key);

/* Takes one unit of cap for caller. Errors: SP_E_LIMIT (429) when the
 * caller holds its share, SP_E_UNAVAILABLE (503) when all callers together
 * hold the total; the message names the bound and its option. */
int e2b_caps_take(e2b_caps *caps, e2b_cap cap, const char *caller, sp_error **err);

/* Gives back a unit taken for caller. */
void e2b_caps_give(e2b_caps *caps, e2b_cap cap, const char *caller);

/* Units of cap held now. */
size_t e2b_caps_used(e2b_caps *caps, e2b_cap cap);

/* Appends the caps' Prometheus text to out: units held and their bounds,
 * refusals by limit ("key": a caller's share, "total": the whole bound)
 * and the callers at their share now — counts only, no caller named. */
int e2b_caps_render(e2b_caps *caps, sp_buf *out, sp_error **err);

#endif
