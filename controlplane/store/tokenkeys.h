/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Ed25519 keys that sign attachment tokens (proto/spec/dataplane.md, space/token.h),
 * kept in PostgreSQL (table token_keys) and shared by every replica.
 *
 * Exactly one key is current and signs. Rotating makes a new current key and
 * retires the old one: its private half is erased, and its public half is
 * still published for CP_TOKEN_KEY_RETIRED_S seconds, longer than any token
 * it signed may live (CP_TOKEN_MAX_TTL_S), so that tokens already handed out
 * keep verifying. The private keys are secrets of the same rank as the
 * database itself, like the cluster CA's.
 *
 * Not thread-safe (the cp_db is not); nothing here logs key material.
 */
#ifndef CP_STORE_TOKENKEYS_H
#define CP_STORE_TOKENKEYS_H

#include <json-c/json.h>

#include "space/error.h"
#include "space/token.h"
#include "store/db.h"

#define CP_TOKEN_MAX_TTL_S 86400 /* the longest attachment token the control plane mints */
#define CP_TOKEN_KEY_RETIRED_S (CP_TOKEN_MAX_TTL_S + 600) /* how long a retired key is still published */

/* Makes sure a current key exists: creates one if no replica has yet. Two
 * replicas starting together end with the same key (the second insert is a
 * no-op against a unique index). Errors: the database's. */
int cp_token_keys_ensure(cp_db *db, sp_error **err);

/* A new signer for the current key (creating it first if there is none).
 * Errors: the database's, SP_E_INVALID if the stored key does not load. */
int cp_token_keys_signer(cp_db *db, sp_token_signer **ret, sp_error **err);

/* The public keys that verify tokens (PEM strings), as a new JSON array:
 * the current key first, then the retired keys still published, newest
 * first, at most SP_TOKEN_MAX_KEYS. Creates the first key if there is none. */
int cp_token_keys_public(cp_db *db, json_object **ret, sp_error **err);

/* Every key still published, for operators, as a new JSON array of
 * {"kid","public_key","current","created_at","retired_at"} (current first). */
int cp_token_keys_list(cp_db *db, json_object **ret, sp_error **err);

/* Rotates, inside the caller's open transaction (rotations are serialised by
 * a transaction-scoped advisory lock): a new current key, the old one retired
 * (private half erased), keys retired longer than CP_TOKEN_KEY_RETIRED_S ago
 * deleted. ret_kid receives the new key's id. */
int cp_token_keys_rotate(cp_db *db, char ret_kid[static SP_TOKEN_KID_LEN + 1], sp_error **err);

#endif
