/* SPDX-License-Identifier: Apache-2.0 */
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "store/keys.h"

#define SECRET_PREFIX "spk_"

static bool name_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > CP_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
                        return false;
        return true;
}

int cp_tenant_create(cp_db *db, const char *name, char ret_id[static SP_ID_MAX], sp_error **err)
{
        if (!name || !name_ok(name))
                return sp_error_set(err, SP_E_INVALID, "tenant name must be 1-%d printable characters", CP_NAME_MAX);
        char id[SP_ID_MAX];
        if (sp_id_new("ten", id, err) < 0)
                return -SP_E_IO;
        const char *params[] = {id, name};
        int r = cp_db_exec(db, "INSERT INTO tenants (id, name) VALUES ($1, $2)", 2, params, NULL, err);
        if (r == -SP_E_CONFLICT) {
                sp_error_free(*err);
                *err = NULL;
                return sp_error_set(err, SP_E_CONFLICT, "a tenant named '%.128s' already exists", name);
        }
        if (r < 0)
                return sp_error_wrap(err, "create tenant");
        memcpy(ret_id, id, SP_ID_MAX);
        return 0;
}

static void hash_hex(const char *secret, char out[65])
{
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)secret, strlen(secret), md);
        static const char hex[] = "0123456789abcdef";
        for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
                out[2 * i] = hex[md[i] >> 4];
                out[2 * i + 1] = hex[md[i] & 15];
        }
        out[64] = '\0';
}

int cp_apikey_create(cp_db *db, const char *tenant_id, const char *name, bool admin, char **ret_secret,
                     char ret_key_id[static SP_ID_MAX], sp_error **err)
{
        if (!name || !name_ok(name))
                return sp_error_set(err, SP_E_INVALID, "key name must be 1-%d printable characters", CP_NAME_MAX);
        char id[SP_ID_MAX];
        unsigned char rnd[32];
        if (sp_id_new("key", id, err) < 0 || sp_random_bytes(rnd, sizeof(rnd), err) < 0)
                return -SP_E_IO;
        _cleanup_buf_ sp_buf secret = SP_BUF_INIT;
        sp_buf_appendf(&secret, NULL, SECRET_PREFIX "%s_", id);
        sp_base64_encode(&secret, rnd, sizeof(rnd), 1, NULL);
        sp_explicit_bzero(rnd, sizeof(rnd));
        char hash[65];
        hash_hex(secret.data, hash);
        char hashlit[70];
        snprintf(hashlit, sizeof(hashlit), "\\x%s", hash);
        const char *params[] = {id, tenant_id, name, admin ? "true" : "false", hashlit};
        _cleanup_pgresult_ PGresult *res = NULL;
        /* A deleted tenant gets no new key. */
        if (cp_db_exec(db,
                       "INSERT INTO api_keys (id, tenant_id, name, admin, secret_hash) "
                       "SELECT $1, t.id, $3, $4::boolean, $5::bytea FROM tenants t "
                       "WHERE t.id = $2 AND t.deleted_at IS NULL",
                       5, params, &res, err) < 0) {
                sp_explicit_bzero(secret.data, secret.len);
                return sp_error_wrap(err, "create API key");
        }
        if (strcmp(PQcmdTuples(res), "1") != 0) {
                sp_explicit_bzero(secret.data, secret.len);
                return sp_error_set(err, SP_E_NOT_FOUND, "tenant %.64s not found", tenant_id);
        }
        memcpy(ret_key_id, id, SP_ID_MAX);
        *ret_secret = sp_buf_steal(&secret);
        return 0;
}

/* Fills *d (may be NULL) and returns the one answer every bad secret gets. */
static int deny(cp_apikey_denial *d, const char *key_id, const char *tenant_id, const char *reason, sp_error **err)
{
        if (d) {
                memset(d, 0, sizeof(*d));
                snprintf(d->key_id, sizeof(d->key_id), "%s", key_id ? key_id : "");
                snprintf(d->tenant_id, sizeof(d->tenant_id), "%s", tenant_id ? tenant_id : "");
                d->reason = reason;
        }
        return sp_error_set(err, SP_E_UNAUTHENTICATED, "invalid API key");
}

int cp_apikey_verify(cp_db *db, const char *secret, cp_principal *ret, cp_apikey_denial *ret_denial, sp_error **err)
{
        size_t plen = strlen(SECRET_PREFIX);
        if (ret_denial)
                memset(ret_denial, 0, sizeof(*ret_denial));
        if (!secret || strlen(secret) > 200 || strncmp(secret, SECRET_PREFIX, plen) != 0)
                return deny(ret_denial, NULL, NULL, "malformed", err);
        /* "spk_" + "key_<20>" + "_" + secret */
        char id[SP_ID_MAX];
        const char *rest = secret + plen;
        size_t idlen = 4 + SP_ID_RANDOM_CHARS;
        if (strlen(rest) <= idlen + 1 || rest[idlen] != '_')
                return deny(ret_denial, NULL, NULL, "malformed", err);
        memcpy(id, rest, idlen);
        id[idlen] = '\0';
        if (!sp_id_valid(id, "key"))
                return deny(ret_denial, NULL, NULL, "malformed", err);
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {id};
        /* Revoked keys and deleted tenants' are read too, to say why they were refused. */
        if (cp_db_exec(db,
                       "SELECT encode(k.secret_hash, 'hex'), k.tenant_id, k.admin, k.revoked_at IS NOT NULL, "
                       "t.deleted_at IS NOT NULL FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
                       "WHERE k.id = $1",
                       1, params, &res, err) < 0)
                return sp_error_wrap(err, "verify API key");
        char want[65], have[65] = {0};
        hash_hex(secret, want);
        bool found = PQntuples(res) == 1;
        if (found)
                snprintf(have, sizeof(have), "%s", PQgetvalue(res, 0, 0));
        /* Compare even when nothing was found, so timing tells nothing. */
        bool match = CRYPTO_memcmp(want, found ? have : want, 64) == 0 && found;
        if (!found)
                return deny(ret_denial, id, NULL, "unknown_key", err);
        const char *tenant = PQgetvalue(res, 0, 1);
        if (!match)
                return deny(ret_denial, id, tenant, "wrong_secret", err);
        if (strcmp(PQgetvalue(res, 0, 3), "t") == 0)
                return deny(ret_denial, id, tenant, "revoked", err);
        if (strcmp(PQgetvalue(res, 0, 4), "t") == 0)
                return deny(ret_denial, id, tenant, "tenant_deleted", err);
        memset(ret, 0, sizeof(*ret));
        snprintf(ret->tenant_id, sizeof(ret->tenant_id), "%s", tenant);
        snprintf(ret->key_id, sizeof(ret->key_id), "%s", id);
        ret->admin = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
        return 0;
}

int cp_apikey_revoke(cp_db *db, const char *tenant_id, const char *key_id, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *params[] = {key_id, tenant_id};
        if (cp_db_exec(db,
                       "UPDATE api_keys SET revoked_at = now() "
                       "WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND revoked_at IS NULL",
                       2, params, &res, err) < 0)
                return sp_error_wrap(err, "revoke API key");
        if (strcmp(PQcmdTuples(res), "1") != 0)
                return sp_error_set(err, SP_E_NOT_FOUND, "API key %.64s not found", key_id);
        return 0;
}

int cp_apikey_revoked_since(cp_db *db, int64_t since_us, pr_revoked_keys *ret, sp_error **err)
{
        char since[32], window[32], limit[32];
        snprintf(since, sizeof(since), "%lld", (long long)since_us);
        snprintf(window, sizeof(window), "%lld", (long long)PR_REVOKED_WINDOW_S * 1000000);
        snprintf(limit, sizeof(limit), "%d", PR_REVOKED_MAX + 1);
        const char *params[] = {since, window, limit};
        _cleanup_pgresult_ PGresult *res = NULL;
        /* The last row is the database's clock, so that the cursor and the rows come from one snapshot. */
        if (cp_db_exec(db,
                       "WITH t AS (SELECT (extract(epoch FROM now()) * 1000000)::bigint AS now_us), "
                       "k AS (SELECT id, (extract(epoch FROM revoked_at) * 1000000)::bigint AS at_us FROM api_keys, t "
                       "WHERE revoked_at IS NOT NULL AND revoked_at >= to_timestamp(greatest($1::bigint, "
                       "t.now_us - $2::bigint) / 1000000.0) ORDER BY revoked_at, id LIMIT $3::integer) "
                       "SELECT id, at_us FROM k UNION ALL SELECT NULL, now_us FROM t",
                       3, params, &res, err) < 0)
                return sp_error_wrap(err, "revoked API keys");
        int rows = PQntuples(res) - 1;
        pr_revoked_keys r = {.more = rows > PR_REVOKED_MAX};
        size_t n = (size_t)(rows > PR_REVOKED_MAX ? PR_REVOKED_MAX : rows < 0 ? 0 : rows);
        if (n && !(r.keys = calloc(n, sizeof(*r.keys))))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                snprintf(r.keys[i].id, sizeof(r.keys[i].id), "%s", PQgetvalue(res, (int)i, 0));
                r.keys[i].revoked_at_us = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
        }
        r.n = n;
        r.cursor_us = r.more ? r.keys[n - 1].revoked_at_us : strtoll(PQgetvalue(res, rows, 1), NULL, 10);
        *ret = r;
        return 0;
}

int cp_template_revoked_since(cp_db *db, int64_t since_us, pr_revoked_keys *r, sp_error **err)
{
        char since[32], until[32], window[32], limit[32];
        snprintf(since, sizeof(since), "%lld", (long long)since_us);
        snprintf(until, sizeof(until), "%lld", (long long)r->cursor_us);
        snprintf(window, sizeof(window), "%lld", (long long)PR_REVOKED_WINDOW_S * 1000000);
        snprintf(limit, sizeof(limit), "%d", PR_REVOKED_MAX + 1);
        const char *params[] = {since, until, window, limit};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(
                    db,
                    "SELECT id, (extract(epoch FROM revoked_at) * 1000000)::bigint FROM revoked_templates "
                    "WHERE revoked_at >= to_timestamp(greatest($1::bigint, (extract(epoch FROM now()) * "
                    "1000000)::bigint - $3::bigint) / 1000000.0) "
                    "AND revoked_at <= to_timestamp($2::bigint / 1000000.0) ORDER BY revoked_at, id LIMIT $4::integer",
                    4, params, &res, err) < 0)
                return sp_error_wrap(err, "revoked templates");
        int rows = PQntuples(res);
        size_t n = (size_t)(rows > PR_REVOKED_MAX ? PR_REVOKED_MAX : rows);
        pr_revoked_key *v = NULL;
        if (n && !(v = calloc(n, sizeof(*v))))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                snprintf(v[i].id, sizeof(v[i].id), "%s", PQgetvalue(res, (int)i, 0));
                v[i].revoked_at_us = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
        }
        free(r->templates);
        r->templates = v;
        r->ntemplates = n;
        r->has_templates = true;
        if (rows > PR_REVOKED_MAX) {
                r->more = true;
                if (v[n - 1].revoked_at_us < r->cursor_us)
                        r->cursor_us = v[n - 1].revoked_at_us;
        }
        return 0;
}

#define BOOTSTRAP_LOCK_KEY "7365790001"

int cp_apikey_bootstrap_admin(cp_db *db, const char *secret, char **ret_secret, sp_error **err)
{
        *ret_secret = NULL;
        if (cp_db_exec(db, "SELECT pg_advisory_lock(" BOOTSTRAP_LOCK_KEY ")", 0, NULL, NULL, err) < 0)
                return sp_error_wrap(err, "bootstrap admin key");
        _cleanup_pgresult_ PGresult *res = NULL;
        int r = cp_db_exec(db, "SELECT 1 FROM api_keys WHERE admin AND revoked_at IS NULL LIMIT 1", 0, NULL, &res, err);
        if (r < 0 || PQntuples(res) > 0)
                goto unlock;
        if (!secret) {
                char id[SP_ID_MAX];
                r = cp_apikey_create(db, "ten_system", "bootstrap admin", true, ret_secret, id, err);
                goto unlock;
        }
        /* An operator-provided secret: "spk_key_<20>_<secret>". */
        size_t plen = strlen(SECRET_PREFIX), idlen = 4 + SP_ID_RANDOM_CHARS;
        char id[SP_ID_MAX];
        if (strlen(secret) < plen + idlen + 1 + 16 || strlen(secret) > 200 ||
            strncmp(secret, SECRET_PREFIX, plen) != 0 || secret[plen + idlen] != '_') {
                r = sp_error_set(err, SP_E_INVALID, "the admin key must look like spk_key_<20 characters>_<secret>");
                goto unlock;
        }
        memcpy(id, secret + plen, idlen);
        id[idlen] = '\0';
        if (!sp_id_valid(id, "key")) {
                r = sp_error_set(err, SP_E_INVALID, "the admin key's id part is malformed");
                goto unlock;
        }
        char hash[65], hashlit[70];
        hash_hex(secret, hash);
        snprintf(hashlit, sizeof(hashlit), "\\x%s", hash);
        const char *params[] = {id, hashlit};
        r = cp_db_exec(db,
                       "INSERT INTO api_keys (id, tenant_id, name, admin, secret_hash) "
                       "VALUES ($1, 'ten_system', 'bootstrap admin', true, $2::bytea)",
                       2, params, NULL, err);
unlock:
        (void)cp_db_exec(db, "SELECT pg_advisory_unlock(" BOOTSTRAP_LOCK_KEY ")", 0, NULL, NULL, NULL);
        return r < 0 ? sp_error_wrap(err, "bootstrap admin key") : 0;
}
