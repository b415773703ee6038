/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Secrets in PostgreSQL (docs/secrets.md, migration 0010): the parts that
 * touch values — storing one sealed (store/envelope.h), building a
 * sandbox's bindings for its worker with the values opened, and rewrapping
 * every data key under the key ring's primary. The rest (listing, reading,
 * revoking) is plain SQL in api/secrets.c.
 *
 * Each function reads the key file again first when it changed
 * (cp_keyring_refresh). Values never reach a log or an error message; the
 * copies made here are wiped when done with. Not thread-safe (the cp_db is
 * not).
 */
#ifndef CP_STORE_SECRETS_H
#define CP_STORE_SECRETS_H

#include <json-c/json.h>
#include <stdint.h>

#include "space/error.h"
#include "store/db.h"
#include "store/keyring.h"

/* A new secret's row; strings borrowed. */
typedef struct cp_secret_row {
        const char *id; /* "sec_..." */
        const char *tenant_id;
        const char *name;
        json_object *hosts; /* checked by gw_secret_check_spec() */
        json_object *inject;
        const char *env;
        int64_t rate_per_min;
        const char *expires_at; /* RFC 3339, or NULL: never */
} cp_secret_row;

/* Records the check value (cp_keyring_check_value) of each key of k whose id
 * the cluster has not seen, and compares the others with theirs:
 * SP_E_PRECONDITION naming the first key id whose bytes differ from those the
 * cluster used under that id; database errors as they come. */
int cp_secrets_key_checks(cp_db *db, const cp_keyring *k, sp_error **err);
/* cp_keyring_refresh() that takes a changed key file only when its key
 * checks pass (cp_secrets_key_checks against db). */
int cp_secrets_keyring_refresh(cp_db *db, cp_keyring *k);

/* Seals value (checked by the caller) under a new data key wrapped with the
 * primary key of k and inserts row with it (in the caller's transaction, if
 * one is open). SP_E_CONFLICT when the tenant has a live secret of that
 * name; the database's errors otherwise. */
int cp_secret_insert(cp_db *db, cp_keyring *k, const cp_secret_row *row, const char *value, size_t len, sp_error **err);

/* The bindings of sandbox sandbox_id as CreateSandbox and SetEgress send
 * them (gateway/policy/secret.h), a new JSON array in *ret: each secret the
 * sandbox was given that is not revoked, not expired and still granted by
 * profile (the sandbox's egress profile as its spec holds it:
 * {"name":"none"}, {"name":"public"} or a whole one), with its value opened.
 * A secret whose value does not open (its cluster key is not in the file, k
 * is NULL, the bytes were changed) is left out and logged by id, never
 * blocking the rest. Errors: the database's. */
int cp_sandbox_secret_bindings(cp_db *db, cp_keyring *k, const char *sandbox_id, json_object *profile,
                               json_object **ret, sp_error **err);

/* What a rewrap did. */
typedef struct cp_rewrap_result {
        char primary[CP_KEY_ID_MAX + 1];
        int64_t rewrapped; /* data keys wrapped again under the primary by this call */
        int64_t failed; /* under a key of the file, but they did not open (listed in the log) */
        int64_t remaining; /* live secrets still under another key than the primary */
        json_object *by_key; /* live secrets per cluster key id, after the call (new; the caller puts it) */
        json_object *missing_keys; /* key ids that wrap live secrets and are not in the file (new array) */
} cp_rewrap_result;

/* Wraps every live secret's data key that is under another key of the file
 * than the primary again under the primary, batch by batch (each its own
 * transaction; rows another replica is rewrapping are skipped), at most max
 * of them. Idempotent: a second call finds nothing to do. Must not run
 * inside a transaction. ret's JSON members are set even on failure (empty). */
int cp_secrets_rewrap(cp_db *db, cp_keyring *k, int64_t max, cp_rewrap_result *ret, sp_error **err);
void cp_rewrap_result_clear(cp_rewrap_result *r);

#endif
