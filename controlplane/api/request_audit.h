/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The audit log's query (GET /v1/audit, docs/api.md "Audit log") and its
 * cursor, and the action every mutating route is audited as: pure functions
 * over untrusted bytes (tests/fuzz/fuzz_api_audit.c drives them), every
 * value bounded, SP_E_INVALID naming the parameter on failure with *ret
 * zeroed. Thread-safe.
 *
 * Pages of the audit log are ordered by (xid, id): the transaction that
 * wrote a record and the record's own number (migration 0016 says why). The
 * cursor is opaque to clients: base64url, unpadded, of "a1.<xid>.<id>" in
 * decimal without leading zeros (xid 1..2^63-1, id 1..2^63-1), so that
 * every position has exactly one spelling.
 */
#ifndef CP_API_REQUEST_AUDIT_H
#define CP_API_REQUEST_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"
#include "space/id.h"

#define CP_AUDIT_CURSOR_MAX 80 /* characters of a cursor, with room to spare */
#define CP_AUDIT_LIMIT_MAX 1000 /* records per page */
#define CP_AUDIT_LIMIT_DEFAULT 100
#define CP_AUDIT_OBJECT_MAX 128 /* an object's id or name */
#define CP_AUDIT_ACTION_MAX 64

typedef struct cp_audit_pos {
        uint64_t xid;
        int64_t id;
} cp_audit_pos;

/* Encodes pos into out (outlen bytes, at least CP_AUDIT_CURSOR_MAX is enough).
 * SP_E_INVALID for a position out of range or a buffer too small (out is
 * "" then). */
int cp_audit_cursor_encode(const cp_audit_pos *pos, char *out, size_t outlen, sp_error **err);
/* Decodes a cursor made by cp_audit_cursor_encode(); anything else is
 * SP_E_INVALID "cursor is malformed" with *ret zeroed. */
int cp_audit_cursor_decode(const char *cursor, cp_audit_pos *ret, sp_error **err);

/* The raw query parameters (NULL or "" when absent). */
typedef struct cp_audit_params {
        const char *tenant_id; /* ten_... */
        const char *key_id; /* key_...: the actor */
        const char *object_type; /* sandbox, session, template, ...: [a-z_], 1..32 */
        const char *object_id; /* the target's id or name: printable ASCII, 1..CP_AUDIT_OBJECT_MAX */
        const char *action; /* "sandbox.create", or a prefix ending in '.': "sandbox." */
        const char *outcome; /* ok, denied or failed */
        const char *since, *until; /* RFC 3339 with a zone: since <= at < until */
        const char *limit; /* 1..CP_AUDIT_LIMIT_MAX [CP_AUDIT_LIMIT_DEFAULT] */
        const char *cursor;
} cp_audit_params;

/* The decoded query: "" for an absent string filter. */
typedef struct cp_audit_query {
        char tenant_id[SP_ID_MAX];
        char key_id[SP_ID_MAX];
        char object_type[33];
        char object_id[CP_AUDIT_OBJECT_MAX + 1];
        char action[CP_AUDIT_ACTION_MAX + 1];
        bool action_prefix; /* action ends in '.': every action that starts with it */
        char outcome[8];
        char since[40], until[40];
        int64_t limit;
        bool has_cursor;
        cp_audit_pos cursor;
} cp_audit_query;

int cp_req_audit_query(const cp_audit_params *p, cp_audit_query *ret, sp_error **err);

/* The action a mutating route is audited as when its handler wrote no record
 * itself (a refusal, a failure, an idempotent replay): the action its
 * success writes. NULL for a route that is not in the table (a test holds
 * every POST, PUT and DELETE route of cp_api_routes to be in it). */
const char *cp_audit_route_action(const char *method, const char *pattern);

#endif
