/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RevokedKeys (proto/spec/controlplane-rpc.md, "RevokedKeys"): the API keys
 * revoked recently, which data planes poll so that attachment and file
 * tokens minted by a revoked key stop working within seconds.
 *
 * Request  {"since_us":N}   (optional, default 0: every key revoked within
 *                            PR_REVOKED_WINDOW_S)
 * Response {"keys":[{"id":"key_…","revoked_at_us":N}…], "cursor_us":N, "more":bool}
 *
 * The control plane answers the keys revoked at or after since_us (and
 * within PR_REVOKED_WINDOW_S), oldest first, at most PR_REVOKED_MAX, and
 * cursor_us: its clock, or the last key's time when more are left (more
 * set). The poller asks again from cursor_us at once when more is set, and
 * otherwise next time from cursor_us - PR_REVOKED_SLACK_S, so that a
 * revocation committed late with an earlier timestamp is not missed.
 * Pure codecs both ends use: no I/O, no logging; any input is safe.
 */
#ifndef SPACE_REVOKED_PROTO_H
#define SPACE_REVOKED_PROTO_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define PR_REVOKED_MAX 10000 /* keys in one answer */
#define PR_REVOKED_ID_MAX 64 /* bytes of a key id */
#define PR_REVOKED_SLACK_S 60 /* the overlap of successive polls */
#define PR_REVOKED_WINDOW_S (30 * 24 * 3600) /* tokens live at most this long (SP_TOKEN_MAX_TTL) */

typedef struct pr_revoked_key {
        char id[PR_REVOKED_ID_MAX + 1];
        int64_t revoked_at_us; /* unix microseconds */
} pr_revoked_key;

/* An answer. keys is malloc'd (n entries); free with pr_revoked_keys_free(). */
typedef struct pr_revoked_keys {
        pr_revoked_key *keys;
        size_t n;
        int64_t cursor_us;
        bool more;
} pr_revoked_keys;

/* The request for keys revoked since since_us (>= 0), as a new object. */
json_object *pr_revoked_req_encode(int64_t since_us);
/* Reads a request: since_us 0 to INT64_MAX, no other field (SP_E_INVALID
 * naming the field otherwise). */
int pr_revoked_req_decode(json_object *req, int64_t *ret_since_us, sp_error **err);

/* The answer as a new object. */
json_object *pr_revoked_resp_encode(const pr_revoked_keys *r);
/* Reads an answer: every field required, ids 1 to PR_REVOKED_ID_MAX
 * characters of [A-Za-z0-9_], at most PR_REVOKED_MAX keys, times >= 0.
 * *ret untouched on failure (SP_E_INVALID naming the problem). */
int pr_revoked_resp_decode(json_object *resp, pr_revoked_keys *ret, sp_error **err);
/* Frees r->keys and zeroes *r. */
void pr_revoked_keys_free(pr_revoked_keys *r);

#endif
