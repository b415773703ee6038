/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cluster key ring (docs/secrets.md): the keys that wrap secrets' data
 * keys (store/envelope.h), kept in a file outside the database
 * (space-controlplane --secrets-key-file), one key a line:
 *
 *   <key-id> <base64 of 32 bytes>
 *
 * key ids are 1..CP_KEY_ID_MAX of [A-Za-z0-9._-]; blank lines and lines
 * starting with '#' are skipped. The first key is the primary: new data keys
 * are wrapped under it; the others still unwrap. Rotation puts a new key on
 * top, rewraps (POST /v1/admin/secrets/rewrap) and then drops the old line.
 *
 * The file is read again when it changes: cp_keyring_refresh() compares its
 * inode, size and times with those of the last read, and is called before
 * every use, so every replica sees a new file at its next use without a
 * restart. A file that does not load then leaves the keys as they were (and
 * says so in the log, once per change).
 *
 * Key material never reaches a log or an error message, and is wiped when
 * freed. Not thread-safe: one loop owns a key ring; what the lookups return
 * is valid until the next refresh or free.
 */
#ifndef CP_STORE_KEYRING_H
#define CP_STORE_KEYRING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define CP_KEY_ID_MAX 64
#define CP_KEY_LEN 32
#define CP_KEYRING_MAX 16 /* keys in one file */
#define CP_KEYRING_FILE_MAX (64 * 1024)

typedef struct cp_keyring cp_keyring;

/* Loads the key file at path (kept to refresh from). SP_E_INVALID naming the
 * line for a malformed file (never quoting a key), SP_E_IO for one that
 * cannot be read, SP_E_INVALID for an empty one. */
int cp_keyring_load(const char *path, cp_keyring **ret, sp_error **err);

/* A key ring from the text of a key file (no file behind it: refresh does
 * nothing). Errors as cp_keyring_load's. */
int cp_keyring_parse(const char *text, size_t len, cp_keyring **ret, sp_error **err);

/* Reads the file again if it changed since it was last read. Returns 1 when
 * the keys changed, 0 when the file is as it was (or there is no file), < 0
 * when the changed file does not load: the keys stay as they were. */
int cp_keyring_refresh(cp_keyring *k);

/* What a changed file must pass before it is taken: 0 takes it; < 0 with
 * *err keeps the keys read before — SP_E_PRECONDITION refuses this file (it
 * is tried again when it changes), any other code could not tell (it is
 * tried again at the next use). fresh is valid during the call only. */
typedef int (*cp_keyring_check_fn)(const cp_keyring *fresh, void *ud, sp_error **err);
/* cp_keyring_refresh() with check asked first (NULL: none). */
int cp_keyring_refresh_checked(cp_keyring *k, cp_keyring_check_fn check, void *ud);

#define CP_KEY_CHECK_LEN 32
/* The check value of the i-th key: HMAC-SHA256 under the key of a fixed
 * label. It tells whether two files' keys of one id are the same bytes
 * without storing anything that opens a value. */
void cp_keyring_check_value(const cp_keyring *k, size_t i, uint8_t out[CP_KEY_CHECK_LEN]);

/* Wipes and frees; accepts NULL; returns NULL. */
cp_keyring *cp_keyring_free(cp_keyring *k);
static inline void cp_keyring_freep(cp_keyring **k)
{
        *k = cp_keyring_free(*k);
}

/* The primary key's id (new wraps). */
const char *cp_keyring_primary(const cp_keyring *k);
/* The key named id (CP_KEY_LEN bytes), or NULL. Borrowed. */
const uint8_t *cp_keyring_key(const cp_keyring *k, const char *id);
size_t cp_keyring_count(const cp_keyring *k);
/* The id of the i-th key (0: the primary), or NULL past the last. */
const char *cp_keyring_id_at(const cp_keyring *k, size_t i);
/* The file it was loaded from, or NULL. */
const char *cp_keyring_path(const cp_keyring *k);
/* Why the key file as it is now was not taken (the keys read before are
 * still used), or NULL when it was. */
const char *cp_keyring_error(const cp_keyring *k);

/* Whether s is a key id. */
bool cp_keyring_id_valid(const char *s, size_t len);

#endif
