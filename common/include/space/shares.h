/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Per-tenant shares of a shared bound.
 *
 * A daemon that serves several tenants bounds what it holds at once (streams,
 * request threads, watchers). A plain counter lets one tenant take the whole
 * bound and leave every other tenant refused. sp_shares keeps, beside the
 * total, a count per key (a tenant id, or a digest standing for one) and
 * admits a unit only while both the total and the key's count are under
 * their bounds, so a tenant at its share leaves the rest of the bound to the
 * others.
 *
 * Refusals are counted per key for the daemon's /metrics: the first
 * SP_SHARES_NAMED keys refused are counted by name, later ones together
 * under the key "*" (so that a client cannot grow the label set without
 * bound). Keys are at most SP_SHARES_KEY_MAX bytes; a daemon passes only keys
 * it has authenticated (a verified token's tenant), never raw client input.
 *
 * Thread-safe: every function takes the handle's mutex.
 */
#ifndef SPACE_SHARES_H
#define SPACE_SHARES_H

#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

#define SP_SHARES_KEY_MAX 64
#define SP_SHARES_NAMED 64

typedef struct sp_shares sp_shares;

/* A new table bounding the total at total (>= 1) and each key at per_key
 * (1..total; 0 means total / 4, at least 1). NULL when out of memory. */
sp_shares *sp_shares_new(size_t total, size_t per_key);

/* Frees the table; accepts NULL; returns NULL. Units still taken are forgotten. */
sp_shares *sp_shares_free(sp_shares *s);

/* Takes one unit for key ("" for requests without a tenant; longer keys than
 * SP_SHARES_KEY_MAX are cut). Errors, counted as refusals of key:
 *   SP_E_LIMIT        the key holds its share already ("... per tenant")
 *   SP_E_UNAVAILABLE  the total is reached by all keys together
 * what names the unit in the message ("streams", "requests in progress"). */
int sp_shares_take(sp_shares *s, const char *key, const char *what, sp_error **err);

/* Gives back a unit taken for key. A key that holds nothing is ignored. */
void sp_shares_give(sp_shares *s, const char *key);

/* Units taken now, in all and by key. */
size_t sp_shares_used(sp_shares *s);
size_t sp_shares_used_by(sp_shares *s, const char *key);

/* Keys holding their whole share now (each would be refused its next unit). */
size_t sp_shares_keys_full(sp_shares *s);

/* The bounds in force (per_key resolved). */
size_t sp_shares_total(const sp_shares *s);
size_t sp_shares_per_key(const sp_shares *s);

/* Calls fn for every key refused so far (the overflow key "*" last, if any)
 * with its refusals for its share and for the total. fn must not call back
 * into s. */
void sp_shares_refusals(sp_shares *s,
                        void (*fn)(const char *key, uint64_t share_refusals, uint64_t total_refusals, void *userdata),
                        void *userdata);

/* Appends the Prometheus text of the refusals to out: a counter named name
 * (with HELP help) with the labels tenant (the key; characters outside
 * [A-Za-z0-9_.:*-] become '_') and limit ("tenant": the key's share was
 * full; "total": the whole bound was), one line per key and limit with a
 * non-zero count, and no line at all before the first refusal. */
int sp_shares_render(sp_shares *s, const char *name, const char *help, sp_buf *out, sp_error **err);

/* src as a Prometheus label value in dst (cap >= 1 bytes, cut to fit):
 * characters outside [A-Za-z0-9_.:*[]-] become '_'. */
void sp_shares_label(char *dst, size_t cap, const char *src);

#endif
