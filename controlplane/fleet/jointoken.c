/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Join tokens: `spj_<id>_<43 base64url chars>` (256 random bits). Only a
 * SHA-256 of the whole token is stored; checks compare hashes in constant
 * time and give one answer for every kind of bad token.
 */
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/time.h"

#define TOKEN_PREFIX "spj_"
#define ID_PREFIX "jtk"
#define TTL_MAX_S (INT64_C(366) * 86400)
#define USES_MAX 1000000
#define DESCRIPTION_MAX 256

static const char *const denied = "invalid join token";

static void hash_hex(const char *token, char out[65])
{
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)token, strlen(token), md);
        static const char hex[] = "0123456789abcdef";
        for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
                out[2 * i] = hex[md[i] >> 4];
                out[2 * i + 1] = hex[md[i] & 15];
        }
        out[64] = '\0';
}

int cp_jointoken_create(cp_db *db, const char *role, const char *description, int64_t ttl_s, int64_t uses,
                        char **ret_token, char ret_id[static SP_ID_MAX], sp_error **err)
{
        if (role && strcmp(role, "worker") != 0 && strcmp(role, "dataplane") != 0)
                return sp_error_set(err, SP_E_INVALID, "role must be worker or dataplane");
        if (!description)
                description = "";
        if (strlen(description) > DESCRIPTION_MAX)
                return sp_error_set(err, SP_E_INVALID, "description must be at most %d bytes", DESCRIPTION_MAX);
        for (const char *p = description; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        return sp_error_set(err, SP_E_INVALID, "description must be printable");
        if (ttl_s < 1 || ttl_s > TTL_MAX_S)
                return sp_error_set(err, SP_E_INVALID, "ttl_s must be between 1 and %lld", (long long)TTL_MAX_S);
        if (uses < 0 || uses > USES_MAX)
                return sp_error_set(err, SP_E_INVALID, "uses must be between 0 (unlimited) and %d", USES_MAX);
        char id[SP_ID_MAX];
        unsigned char rnd[32];
        if (sp_id_new(ID_PREFIX, id, err) < 0 || sp_random_bytes(rnd, sizeof(rnd), err) < 0)
                return -SP_E_IO;
        _cleanup_buf_ sp_buf token = SP_BUF_INIT;
        if (sp_buf_appendf(&token, err, TOKEN_PREFIX "%s_", id) < 0 ||
            sp_base64_encode(&token, rnd, sizeof(rnd), 1, err) < 0) {
                sp_explicit_bzero(rnd, sizeof(rnd));
                return -SP_E_LIMIT;
        }
        sp_explicit_bzero(rnd, sizeof(rnd));
        char hash[65], hashlit[70], ttl[24], nuses[24];
        hash_hex(token.data, hash);
        snprintf(hashlit, sizeof(hashlit), "\\x%s", hash);
        snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_s);
        snprintf(nuses, sizeof(nuses), "%lld", (long long)uses);
        const char *params[] = {id, hashlit, description, uses ? nuses : NULL, ttl, role};
        if (cp_db_exec(db,
                       "INSERT INTO join_tokens (id, secret_hash, description, uses_left, expires_at, role) "
                       "VALUES ($1, $2::bytea, $3, $4::integer, now() + make_interval(secs => $5::bigint), $6)",
                       6, params, NULL, err) < 0) {
                sp_explicit_bzero(token.data, token.len);
                return sp_error_wrap(err, "create join token");
        }
        memcpy(ret_id, id, SP_ID_MAX);
        *ret_token = sp_buf_steal(&token);
        return 0;
}

int cp_jointoken_revoke(cp_db *db, const char *id, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id};
        if (cp_db_exec(db, "UPDATE join_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL", 1, params,
                       &res, err) < 0)
                return sp_error_wrap(err, "revoke join token");
        if (strcmp(PQcmdTuples(res), "1") != 0)
                return sp_error_set(err, SP_E_NOT_FOUND, "join token %.64s not found", id);
        return 0;
}

int cp_jointoken_delete(cp_db *db, const char *id, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id};
        if (cp_db_exec(db, "DELETE FROM join_tokens WHERE id = $1", 1, params, &res, err) < 0)
                return sp_error_wrap(err, "delete join token");
        if (strcmp(PQcmdTuples(res), "1") != 0)
                return sp_error_set(err, SP_E_NOT_FOUND, "join token %.64s not found", id);
        return 0;
}

int cp_jointoken_list(cp_db *db, json_object **ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db,
                       "SELECT id, description, uses_left, coalesce(role, 'any'), "
                       "CASE WHEN revoked_at IS NOT NULL THEN 'revoked' WHEN expires_at <= now() THEN 'expired' "
                       "WHEN uses_left = 0 THEN 'used' ELSE 'active' END, "
                       "(extract(epoch FROM expires_at) * 1000000)::bigint, "
                       "(extract(epoch FROM created_at) * 1000000)::bigint, "
                       "(extract(epoch FROM revoked_at) * 1000000)::bigint "
                       "FROM join_tokens ORDER BY created_at, id",
                       0, NULL, &res, err) < 0)
                return sp_error_wrap(err, "list join tokens");
        json_object *arr = json_object_new_array();
        for (int i = 0; i < PQntuples(res); i++) {
                json_object *o = json_object_new_object();
                json_object_object_add(o, "id", json_object_new_string(PQgetvalue(res, i, 0)));
                json_object_object_add(o, "description", json_object_new_string(PQgetvalue(res, i, 1)));
                json_object_object_add(o, "uses_left",
                                       PQgetisnull(res, i, 2)
                                               ? NULL
                                               : json_object_new_int64(strtoll(PQgetvalue(res, i, 2), NULL, 10)));
                json_object_object_add(o, "role", json_object_new_string(PQgetvalue(res, i, 3)));
                json_object_object_add(o, "state", json_object_new_string(PQgetvalue(res, i, 4)));
                char ts[32];
                const char *keys[] = {"expires_at", "created_at", "revoked_at"};
                for (int k = 0; k < 3; k++) {
                        if (PQgetisnull(res, i, 5 + k)) {
                                json_object_object_add(o, keys[k], NULL);
                                continue;
                        }
                        sp_time_format_rfc3339(strtoll(PQgetvalue(res, i, 5 + k), NULL, 10), ts);
                        json_object_object_add(o, keys[k], json_object_new_string(ts));
                }
                json_object_array_add(arr, o);
        }
        *ret = arr;
        return 0;
}

int cp__jointoken_consume(cp_db *db, const char *token, const char *role, char ret_id[static SP_ID_MAX], sp_error **err)
{
        size_t plen = strlen(TOKEN_PREFIX), idlen = strlen(ID_PREFIX) + 1 + SP_ID_RANDOM_CHARS;
        if (!token || strlen(token) > CP_FLEET_TOKEN_MAX || strncmp(token, TOKEN_PREFIX, plen) != 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "%s", denied);
        const char *rest = token + plen;
        if (strlen(rest) <= idlen + 1 || rest[idlen] != '_')
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "%s", denied);
        char id[SP_ID_MAX];
        memcpy(id, rest, idlen);
        id[idlen] = '\0';
        if (!sp_id_valid(id, ID_PREFIX))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "%s", denied);
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id};
        if (cp_db_exec(db,
                       "SELECT encode(secret_hash, 'hex'), revoked_at IS NULL AND expires_at > now() AND "
                       "(uses_left IS NULL OR uses_left > 0), role FROM join_tokens WHERE id = $1 FOR UPDATE",
                       1, params, &res, err) < 0)
                return sp_error_wrap(err, "join token");
        char want[65], have[65] = {0};
        hash_hex(token, want);
        bool found = PQntuples(res) == 1;
        if (found)
                snprintf(have, sizeof(have), "%s", PQgetvalue(res, 0, 0));
        /* Compare even when nothing was found, so timing tells nothing. */
        bool match = CRYPTO_memcmp(want, found ? have : want, 64) == 0 && found;
        if (!match || strcmp(PQgetvalue(res, 0, 1), "t") != 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "%s", denied);
        /* Only a holder of the whole token gets this far: naming its role tells
         * nothing it could not read from where it found the token. */
        if (!PQgetisnull(res, 0, 2) && strcmp(PQgetvalue(res, 0, 2), role) != 0)
                return sp_error_set(err, SP_E_PERMISSION, "this join token is for a %s, not a %s",
                                    PQgetvalue(res, 0, 2), role);
        if (cp_db_exec(db, "UPDATE join_tokens SET uses_left = uses_left - 1 WHERE id = $1 AND uses_left IS NOT NULL",
                       1, params, NULL, err) < 0)
                return sp_error_wrap(err, "join token");
        memcpy(ret_id, id, SP_ID_MAX);
        return 0;
}
