/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RevokedKeys (proto/spec/controlplane-rpc.md, "RevokedKeys"): the API keys
 * revoked recently, which data planes poll so that attachment and file
 * tokens minted by a revoked key stop working within seconds, and, when
 * asked, the uploaded templates deleted recently, whose upload tokens stop
 * working the same way.
 *
 * Request  {"since_us":N, "templates":bool}
 *          since_us optional, default 0: everything revoked within
 *          PR_REVOKED_WINDOW_S; templates optional, default false
 * Response {"keys":[{"id":"key_…","revoked_at_us":N}…], "cursor_us":N, "more":bool,
 *           "templates":[{"id":"tpl_…","revoked_at_us":N}…]}
 *          templates only when the request asked for them
 *
 * The control plane answers the keys (and templates) revoked at or after
 * since_us (and within PR_REVOKED_WINDOW_S), oldest first, at most
 * PR_REVOKED_MAX of each, and cursor_us: its clock, or the last entry's time
 * when more are left (more set). The poller asks again from cursor_us at
 * once when more is set, and otherwise next time from cursor_us -
 * PR_REVOKED_SLACK_S, so that a revocation committed late with an earlier
 * timestamp is not missed.
 *
 * Both decoders refuse fields they do not know, so "templates" is sent only
 * to a peer that asked for it (an older data plane never asks, and gets the
 * answer it knows), and an older control plane refuses a request that asks
 * (SP_E_INVALID): the poller then asks without, and tries again later.
 * The messages are controlplane_rpc.h's (pr_cp_revoked_*_schema): these
 * functions read and write them for callers that hold the keys as C arrays.
 * Pure codecs both ends use: no I/O, no logging; any input is safe.
 */
#ifndef SPACE_REVOKED_PROTO_H
#define SPACE_REVOKED_PROTO_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/controlplane_rpc.h"
#include "space/error.h"

#define PR_REVOKED_MAX PR_CP_REVOKED_MAX /* keys in one answer */
#define PR_REVOKED_ID_MAX PR_CP_REVOKED_ID_MAX /* bytes of a key id */
#define PR_REVOKED_SLACK_S 60 /* the overlap of successive polls */
#define PR_REVOKED_WINDOW_S (30 * 24 * 3600) /* tokens live at most this long (SP_TOKEN_MAX_TTL) */

typedef struct pr_revoked_key {
        char id[PR_REVOKED_ID_MAX + 1];
        int64_t revoked_at_us; /* unix microseconds */
} pr_revoked_key;

/* An answer. keys and templates are malloc'd (n and ntemplates entries);
 * free with pr_revoked_keys_free(). has_templates: the answer holds the
 * templates field (it was asked for), even if empty. */
typedef struct pr_revoked_keys {
        pr_revoked_key *keys;
        size_t n;
        int64_t cursor_us;
        bool more;
        bool has_templates;
        pr_revoked_key *templates; /* ids of templates deleted, with the time */
        size_t ntemplates;
} pr_revoked_keys;

/* The request for what was revoked since since_us (>= 0), with the
 * templates if templates is set, as a new object. */
json_object *pr_revoked_req_encode(int64_t since_us, bool templates);
/* Reads a request: since_us 0 to INT64_MAX, templates a boolean, no other
 * field (SP_E_INVALID naming the field otherwise). */
int pr_revoked_req_decode(json_object *req, int64_t *ret_since_us, bool *ret_templates, sp_error **err);

/* The answer as a new object (templates only if r->has_templates). */
json_object *pr_revoked_resp_encode(const pr_revoked_keys *r);
/* Reads an answer: keys, cursor_us and more required, templates optional;
 * ids 1 to PR_REVOKED_ID_MAX characters of [A-Za-z0-9_], at most
 * PR_REVOKED_MAX keys and as many templates, times >= 0.
 * *ret untouched on failure (SP_E_INVALID naming the problem). */
int pr_revoked_resp_decode(json_object *resp, pr_revoked_keys *ret, sp_error **err);
/* Frees r->keys and zeroes *r. */
void pr_revoked_keys_free(pr_revoked_keys *r);

#endif
