/* SPDX-License-Identifier: Apache-2.0 */
/* Attachment-token signing keys in token_keys: one current, retired ones published a while. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"
#include "store/tokenkeys.h"

/* Serialises rotations: "space tkey". */
#define ROTATE_LOCK_KEY "737061636574"

/* Frees a string holding a private key, wiping it first. */
static void secret_freep(char **p)
{
        if (*p) {
                sp_explicit_bzero(*p, strlen(*p));
                free(*p);
        }
        *p = NULL;
}
#define _cleanup_secret_ _cleanup_(secret_freep)

/* Generates a key pair and inserts it as the current key. With a current key
 * already there, the insert does nothing (the unique index on current). */
static int insert_current(cp_db *db, char ret_kid[static SP_TOKEN_KID_LEN + 1], sp_error **err)
{
        _cleanup_secret_ char *priv = NULL;
        _cleanup_free_ char *pub = NULL;
        _cleanup_token_signer_ sp_token_signer *s = NULL;
        if (sp_token_keygen(&priv, &pub, err) < 0 || sp_token_signer_new(priv, &s, err) < 0)
                return sp_error_wrap(err, "new token signing key");
        snprintf(ret_kid, SP_TOKEN_KID_LEN + 1, "%s", sp_token_signer_kid(s));
        const char *params[] = {ret_kid, pub, priv};
        if (cp_db_exec(db,
                       "INSERT INTO token_keys (kid, public_pem, private_pem, current) VALUES ($1, $2, $3, true) "
                       "ON CONFLICT DO NOTHING",
                       3, params, NULL, err) < 0)
                return sp_error_wrap(err, "store the token signing key");
        return 0;
}

/* The current key's private PEM in *ret (new, secret), or NULL when there is none. */
static int load_current(cp_db *db, char **ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        *ret = NULL;
        if (cp_db_exec(db, "SELECT private_pem FROM token_keys WHERE current", 0, NULL, &res, err) < 0)
                return sp_error_wrap(err, "token signing key");
        if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
                return 0;
        char *pem = PQgetvalue(res, 0, 0);
        *ret = strdup(pem);
        sp_explicit_bzero(pem, strlen(pem));
        return *ret ? 0 : sp_error_set(err, SP_E_LIMIT, "out of memory");
}

int cp_token_keys_ensure(cp_db *db, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db, "SELECT 1 FROM token_keys WHERE current", 0, NULL, &res, err) < 0)
                return sp_error_wrap(err, "token signing key");
        if (PQntuples(res) == 1)
                return 0;
        char kid[SP_TOKEN_KID_LEN + 1];
        return insert_current(db, kid, err);
}

int cp_token_keys_signer(cp_db *db, sp_token_signer **ret, sp_error **err)
{
        _cleanup_secret_ char *pem = NULL;
        int r = load_current(db, &pem, err);
        if (r < 0)
                return r;
        if (!pem) {
                if ((r = cp_token_keys_ensure(db, err)) < 0 || (r = load_current(db, &pem, err)) < 0)
                        return r;
                if (!pem)
                        return sp_error_set(err, SP_E_INTERNAL, "token signing key: stored but not found");
        }
        if (sp_token_signer_new(pem, ret, err) < 0)
                return sp_error_wrap(err, "token signing key in the database");
        return 0;
}

/* The published keys: kid, public PEM, current, created_at, retired_at. */
static int published(cp_db *db, PGresult **ret, sp_error **err)
{
        char window[24], max[24];
        snprintf(window, sizeof(window), "%d", CP_TOKEN_KEY_RETIRED_S);
        snprintf(max, sizeof(max), "%d", SP_TOKEN_MAX_KEYS);
        const char *params[] = {window, max};
        int r = cp_token_keys_ensure(db, err);
        if (r < 0)
                return r;
        if (cp_db_exec(db,
                       "SELECT kid, public_pem, current, api_ts(created_at), api_ts(retired_at) FROM token_keys "
                       "WHERE current OR retired_at > now() - make_interval(secs => $1::integer) "
                       "ORDER BY current DESC, created_at DESC, kid LIMIT $2::integer",
                       2, params, ret, err) < 0)
                return sp_error_wrap(err, "token keys");
        return 0;
}

int cp_token_keys_public(cp_db *db, json_object **ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        int r = published(db, &res, err);
        if (r < 0)
                return r;
        json_object *arr = json_object_new_array();
        if (!arr)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (int i = 0; i < PQntuples(res); i++)
                json_object_array_add(arr, json_object_new_string(PQgetvalue(res, i, 1)));
        *ret = arr;
        return 0;
}

int cp_token_keys_list(cp_db *db, json_object **ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        int r = published(db, &res, err);
        if (r < 0)
                return r;
        json_object *arr = json_object_new_array();
        if (!arr)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (int i = 0; i < PQntuples(res); i++) {
                json_object *k = json_object_new_object();
                json_object_object_add(k, "kid", json_object_new_string(PQgetvalue(res, i, 0)));
                json_object_object_add(k, "public_key", json_object_new_string(PQgetvalue(res, i, 1)));
                json_object_object_add(k, "current", json_object_new_boolean(strcmp(PQgetvalue(res, i, 2), "t") == 0));
                json_object_object_add(k, "created_at", json_object_new_string(PQgetvalue(res, i, 3)));
                json_object_object_add(k, "retired_at",
                                       PQgetisnull(res, i, 4) ? NULL : json_object_new_string(PQgetvalue(res, i, 4)));
                json_object_array_add(arr, k);
        }
        *ret = arr;
        return 0;
}

int cp_token_keys_rotate(cp_db *db, char ret_kid[static SP_TOKEN_KID_LEN + 1], sp_error **err)
{
        char window[24];
        snprintf(window, sizeof(window), "%d", CP_TOKEN_KEY_RETIRED_S);
        const char *params[] = {window};
        char kid[SP_TOKEN_KID_LEN + 1];
        if (cp_db_exec(db, "SELECT pg_advisory_xact_lock(" ROTATE_LOCK_KEY ")", 0, NULL, NULL, err) < 0 ||
            cp_db_exec(db,
                       "UPDATE token_keys SET current = false, private_pem = NULL, retired_at = now() WHERE current", 0,
                       NULL, NULL, err) < 0 ||
            cp_db_exec(db, "DELETE FROM token_keys WHERE retired_at < now() - make_interval(secs => $1::integer)", 1,
                       params, NULL, err) < 0 ||
            insert_current(db, kid, err) < 0)
                return sp_error_wrap(err, "rotate token keys");
        memcpy(ret_kid, kid, sizeof(kid));
        return 0;
}
