/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenants and API keys. A key's secret is `spk_<key id>_<43 base64url chars>`
 * (256 random bits); only its SHA-256 is stored, and verification compares
 * hashes in constant time. The secret is returned once, at creation.
 */
#ifndef CP_STORE_KEYS_H
#define CP_STORE_KEYS_H

#include <stdbool.h>

#include "space/id.h"
#include "space/revoked_proto.h"
#include "store/db.h"

#define CP_NAME_MAX 128

typedef struct cp_principal {
        char tenant_id[SP_ID_MAX];
        char key_id[SP_ID_MAX];
        bool admin;
} cp_principal;

/* Creates a tenant; SP_E_CONFLICT if the name is taken, SP_E_INVALID for a bad name. */
int cp_tenant_create(cp_db *db, const char *name, char ret_id[static SP_ID_MAX], sp_error **err);
/* Creates a key for tenant_id; *ret_secret (malloc'd) is the only copy of the
 * secret. SP_E_NOT_FOUND for an unknown or deleted tenant. */
int cp_apikey_create(cp_db *db, const char *tenant_id, const char *name, bool admin, char **ret_secret,
                     char ret_key_id[static SP_ID_MAX], sp_error **err);
/* Why a presented secret was refused, for the audit log only (the client
 * is told the same whatever it was). */
typedef struct cp_apikey_denial {
        char key_id[SP_ID_MAX]; /* the key the secret names; "" when it names none */
        char tenant_id[SP_ID_MAX]; /* that key's tenant; "" when there is no such key */
        /* static: "malformed", "unknown_key", "wrong_secret" (the key exists,
         * the secret is not its), "revoked", "tenant_deleted" */
        const char *reason;
} cp_apikey_denial;

/* Authenticates a presented secret. Any failure is SP_E_UNAUTHENTICATED with
 * the same message, whatever was wrong (unknown, revoked, of a deleted tenant,
 * malformed, mismatched), and fills *ret_denial (may be NULL) with what it
 * was; database trouble is SP_E_UNAVAILABLE. */
int cp_apikey_verify(cp_db *db, const char *secret, cp_principal *ret, cp_apikey_denial *ret_denial, sp_error **err);
/* Revokes a key of tenant_id (NULL: of any tenant, for admins); a foreign,
 * unknown or already revoked key is SP_E_NOT_FOUND. */
int cp_apikey_revoke(cp_db *db, const char *tenant_id, const char *key_id, sp_error **err);

/* The keys of every tenant revoked at or after since_us (and within
 * PR_REVOKED_WINDOW_S of now), oldest first, at most
 * PR_REVOKED_MAX, as the RevokedKeys answer: cursor_us is the database's
 * clock, or the last key's time when more were left (more set). *ret is
 * untouched on failure (SP_E_UNAVAILABLE for database trouble). */
int cp_apikey_revoked_since(cp_db *db, int64_t since_us, pr_revoked_keys *ret, sp_error **err);

/* Adds to r (an answer of cp_apikey_revoked_since) the uploaded templates
 * deleted at or after since_us and at or before r->cursor_us (and within
 * PR_REVOKED_WINDOW_S), oldest first, at most PR_REVOKED_MAX; when more
 * were left, sets r->more and moves r->cursor_us back to the last
 * template's time (the keys after it come again next time, which the data
 * plane ignores). Sets r->has_templates. r is untouched on failure
 * (SP_E_UNAVAILABLE for database trouble). */
int cp_template_revoked_since(cp_db *db, int64_t since_us, pr_revoked_keys *r, sp_error **err);

/* On a cluster without any usable admin key, creates one in the system
 * tenant: from `secret` when it is given (a key in this format, e.g. kept in
 * a file by the operator), else a new one returned in *ret_secret (malloc'd).
 * Runs under an advisory lock, so replicas starting together make one.
 * *ret_secret is NULL when an admin key already existed (nothing is done). */
int cp_apikey_bootstrap_admin(cp_db *db, const char *secret, char **ret_secret, sp_error **err);

#endif
