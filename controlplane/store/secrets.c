/* SPDX-License-Identifier: Apache-2.0 */
/* Secrets in PostgreSQL: sealing, bindings, rewrapping (secrets.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/profile.h"
#include "policy/secret.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "store/envelope.h"
#include "store/secrets.h"

#define REWRAP_BATCH 100

/* "\x<hex>" of b, a bytea parameter, into out. */
static int bytea_param(const sp_buf *b, sp_buf *out, sp_error **err)
{
        if (sp_buf_append_str(out, "\\x", err) < 0 || sp_hex_encode(out, b->data, b->len, err) < 0)
                return -SP_E_LIMIT;
        return 0;
}

static int hex_digit(char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* The bytes of hex text (encode(x, 'hex')) into out. */
static int hex_decode(const char *s, sp_buf *out)
{
        size_t n = strlen(s);
        if (n == 0 || n % 2 || sp_buf_reserve(out, n / 2, NULL) < 0)
                return -1;
        for (size_t i = 0; i < n; i += 2) {
                int hi = hex_digit(s[i]), lo = hex_digit(s[i + 1]);
                if (hi < 0 || lo < 0)
                        return -1;
                out->data[out->len++] = (char)(hi << 4 | lo);
        }
        out->data[out->len] = '\0';
        return 0;
}

static void check_hex(const cp_keyring *k, size_t i, char hex[static 2 * CP_KEY_CHECK_LEN + 3])
{
        uint8_t check[CP_KEY_CHECK_LEN];
        cp_keyring_check_value(k, i, check);
        memcpy(hex, "\\x", 3);
        for (size_t j = 0; j < CP_KEY_CHECK_LEN; j++)
                snprintf(hex + 2 + 2 * j, 3, "%02x", check[j]);
        sp_explicit_bzero(check, sizeof(check));
}

static int mismatch(const cp_keyring *k, size_t i, sp_error **err)
{
        return sp_error_set(err, SP_E_PRECONDITION,
                            "key '%s' is not the key '%s' this cluster has used (its check value differs): restore "
                            "the key file the secrets were sealed with, or give a new key a new id (docs/secrets.md)",
                            cp_keyring_id_at(k, i), cp_keyring_id_at(k, i));
}

int cp_secrets_key_checks(cp_db *db, const cp_keyring *k, sp_error **err)
{
        /* First every id the cluster knows, so that a refused file records nothing. */
        bool unknown[CP_KEYRING_MAX] = {false}, any = false;
        for (size_t i = 0; i < cp_keyring_count(k) && i < CP_KEYRING_MAX; i++) {
                char hex[2 * CP_KEY_CHECK_LEN + 3];
                check_hex(k, i, hex);
                const char *params[] = {cp_keyring_id_at(k, i), hex};
                _cleanup_pgresult_ PGresult *res = NULL;
                if (cp_db_exec(db, "SELECT check_value = $2::bytea FROM secrets_key_checks WHERE key_id = $1", 2,
                               params, &res, err) < 0)
                        return sp_error_wrap(err, "secrets key checks");
                if (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") != 0)
                        return mismatch(k, i, err);
                unknown[i] = PQntuples(res) == 0;
                any |= unknown[i];
        }
        if (!any)
                return 0;
        /* Then the new ids, on a connection of their own (committed at once: the
         * caller's transaction may yet roll back), each compared again after its
         * insert (a replica recording the same id meanwhile wins). */
        _cleanup_(cp_db_closep) cp_db *own = NULL;
        if (cp_db_open(cp_db_conninfo(db), &own, err) < 0)
                return sp_error_wrap(err, "secrets key checks");
        for (size_t i = 0; i < cp_keyring_count(k) && i < CP_KEYRING_MAX; i++) {
                if (!unknown[i])
                        continue;
                char hex[2 * CP_KEY_CHECK_LEN + 3];
                check_hex(k, i, hex);
                const char *params[] = {cp_keyring_id_at(k, i), hex};
                _cleanup_pgresult_ PGresult *res = NULL;
                if (cp_db_exec(own,
                               "INSERT INTO secrets_key_checks (key_id, check_value) VALUES ($1, $2::bytea) "
                               "ON CONFLICT (key_id) DO NOTHING",
                               2, params, NULL, err) < 0 ||
                    cp_db_exec(own, "SELECT check_value = $2::bytea FROM secrets_key_checks WHERE key_id = $1", 2,
                               params, &res, err) < 0)
                        return sp_error_wrap(err, "secrets key checks");
                if (PQntuples(res) != 1)
                        return sp_error_set(err, SP_E_UNAVAILABLE, "secrets key checks: key '%s' was not recorded",
                                            cp_keyring_id_at(k, i));
                if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
                        return mismatch(k, i, err);
        }
        return 0;
}

static int check_fresh(const cp_keyring *fresh, void *ud, sp_error **err)
{
        return cp_secrets_key_checks(ud, fresh, err);
}

int cp_secrets_keyring_refresh(cp_db *db, cp_keyring *k)
{
        return cp_keyring_refresh_checked(k, check_fresh, db);
}

int cp_secret_insert(cp_db *db, cp_keyring *k, const cp_secret_row *row, const char *value, size_t len, sp_error **err)
{
        if (!k)
                return sp_error_set(err, SP_E_UNAVAILABLE, "secrets: no key file");
        (void)cp_secrets_keyring_refresh(db, k);
        cp_sealed sealed;
        if (cp_envelope_seal(k, row->id, row->tenant_id, value, len, &sealed, err) < 0)
                return sp_error_wrap(err, "seal the secret's value");
        _cleanup_buf_ sp_buf wrapped = SP_BUF_INIT, ct = SP_BUF_INIT;
        char rate[24];
        snprintf(rate, sizeof(rate), "%lld", (long long)row->rate_per_min);
        int r = bytea_param(&sealed.wrapped, &wrapped, err);
        if (r == 0)
                r = bytea_param(&sealed.ciphertext, &ct, err);
        if (r == 0) {
                const char *p[] = {
                        row->id,  row->tenant_id, row->name,       sp_json_str(row->hosts), sp_json_str(row->inject),
                        row->env, rate,           row->expires_at, sealed.key_id,           wrapped.data,
                        ct.data};
                r = cp_db_exec(db,
                               "INSERT INTO secrets (id, tenant_id, name, hosts, inject, env, rate_per_min, "
                               "expires_at, key_id, wrapped_key, ciphertext) VALUES ($1, $2, $3, $4::jsonb, "
                               "$5::jsonb, $6, $7::integer, $8::timestamptz, $9, $10::bytea, $11::bytea)",
                               11, p, NULL, err);
        }
        cp_sealed_clear(&sealed);
        return r;
}

/* Columns of the bindings query. */
enum { B_ID, B_NAME, B_PLACEHOLDER, B_HOSTS, B_INJECT, B_RATE, B_EXPIRES, B_KEY, B_WRAPPED, B_CT, B_TENANT };

/* The binding of row i of res, with its value opened, or NULL (logged). */
static json_object *binding(cp_keyring *k, const char *sandbox_id, PGresult *res, int i)
{
        const char *id = PQgetvalue(res, i, B_ID);
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_buf_ sp_buf wrapped = SP_BUF_INIT, ct = SP_BUF_INIT;
        char *value = NULL;
        size_t len = 0;
        if (!k)
                sp_error_set(&e, SP_E_UNAVAILABLE, "no secrets key file (--secrets-key-file)");
        else if (hex_decode(PQgetvalue(res, i, B_WRAPPED), &wrapped) < 0 ||
                 hex_decode(PQgetvalue(res, i, B_CT), &ct) < 0)
                sp_error_set(&e, SP_E_INTERNAL, "its stored bytes are malformed");
        else
                (void)cp_envelope_open(k, id, PQgetvalue(res, i, B_TENANT), PQgetvalue(res, i, B_KEY), wrapped.data,
                                       wrapped.len, ct.data, ct.len, &value, &len, &e);
        if (!value) {
                sp_log_warn_kv(SP_KV("sandbox_id", sandbox_id, "secret_id", id),
                               "secret %s left out of the sandbox's bindings: %s", id, e ? e->message : "?");
                return NULL;
        }
        _cleanup_json_ json_object *hosts = NULL, *inject = NULL;
        const char *h = PQgetvalue(res, i, B_HOSTS), *in = PQgetvalue(res, i, B_INJECT);
        json_object *b = NULL;
        if (sp_json_parse(h, strlen(h), &hosts, NULL) == 0 && sp_json_parse(in, strlen(in), &inject, NULL) == 0 &&
            (b = json_object_new_object())) {
                json_object_object_add(b, "id", json_object_new_string(id));
                json_object_object_add(b, "name", json_object_new_string(PQgetvalue(res, i, B_NAME)));
                json_object_object_add(b, "placeholder", json_object_new_string(PQgetvalue(res, i, B_PLACEHOLDER)));
                json_object_object_add(b, "hosts", TAKE_PTR(hosts));
                json_object_object_add(b, "inject", TAKE_PTR(inject));
                json_object_object_add(b, "value", json_object_new_string_len(value, (int)len));
                json_object_object_add(b, "rate_per_min",
                                       json_object_new_int64(strtoll(PQgetvalue(res, i, B_RATE), NULL, 10)));
                json_object_object_add(b, "expires_at",
                                       json_object_new_int64(strtoll(PQgetvalue(res, i, B_EXPIRES), NULL, 10)));
        }
        cp_envelope_value_free(value, len);
        return b;
}

int cp_sandbox_secret_bindings(cp_db *db, cp_keyring *k, const char *sandbox_id, json_object *profile,
                               json_object **ret, sp_error **err)
{
        *ret = NULL;
        (void)cp_secrets_keyring_refresh(db, k);
        char limit[16];
        snprintf(limit, sizeof(limit), "%d", GW_SECRETS_MAX);
        const char *p[] = {sandbox_id, limit};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(db,
                       "SELECT x.id, x.name, ss.placeholder, x.hosts::text, x.inject::text, x.rate_per_min, "
                       "coalesce(floor(extract(epoch FROM x.expires_at))::bigint, 0), x.key_id, "
                       "encode(x.wrapped_key, 'hex'), encode(x.ciphertext, 'hex'), x.tenant_id "
                       "FROM sandbox_secrets ss JOIN secrets x ON x.id = ss.secret_id WHERE ss.sandbox_id = $1 "
                       "AND x.deleted_at IS NULL AND (x.expires_at IS NULL OR x.expires_at > now()) "
                       "ORDER BY ss.env LIMIT $2::integer",
                       2, p, &res, err) < 0)
                return sp_error_wrap(err, "the bindings of sandbox %s", sandbox_id);
        json_object *arr = json_object_new_array();
        if (!arr)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        _cleanup_(gw_profile_unrefp) gw_profile *prof = NULL;
        if (PQntuples(res) > 0 && profile && gw_profile_resolve(profile, true, &prof, NULL) < 0)
                prof = NULL; /* a profile that does not parse grants nothing */
        for (int i = 0; i < PQntuples(res); i++) {
                if (!prof || !gw_profile_grants_secret(prof, PQgetvalue(res, i, B_NAME)))
                        continue;
                json_object *b = binding(k, sandbox_id, res, i);
                if (b)
                        json_object_array_add(arr, b);
        }
        *ret = arr;
        return 0;
}

void cp_rewrap_result_clear(cp_rewrap_result *r)
{
        sp_json_putp(&r->by_key);
        sp_json_putp(&r->missing_keys);
}

/* The key ids of k as a JSON array literal (a text[] parameter via jsonb). */
static json_object *ring_ids(const cp_keyring *k)
{
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && i < cp_keyring_count(k); i++)
                json_object_array_add(a, json_object_new_string(cp_keyring_id_at(k, i)));
        return a;
}

/* One batch: rewraps up to n rows not in `failed` (a JSON array it extends). */
static int rewrap_batch(cp_db *db, cp_keyring *k, int64_t n, json_object *ids, json_object *failed, int64_t *done,
                        sp_error **err)
{
        char limit[24];
        snprintf(limit, sizeof(limit), "%lld", (long long)n);
        const char *p[] = {cp_keyring_primary(k), sp_json_str(ids), sp_json_str(failed), limit};
        _cleanup_pgresult_ PGresult *res = NULL;
        *done = 0;
        if (cp_db_begin(db, err) < 0)
                return -SP_E_UNAVAILABLE;
        if (cp_db_exec(db,
                       "SELECT id, key_id, encode(wrapped_key, 'hex') FROM secrets WHERE deleted_at IS NULL "
                       "AND key_id <> $1 AND key_id IN (SELECT jsonb_array_elements_text($2::jsonb)) "
                       "AND id NOT IN (SELECT jsonb_array_elements_text($3::jsonb)) "
                       "ORDER BY id LIMIT $4::integer FOR UPDATE SKIP LOCKED",
                       4, p, &res, err) < 0)
                goto rollback;
        for (int i = 0; i < PQntuples(res); i++) {
                const char *id = PQgetvalue(res, i, 0), *old = PQgetvalue(res, i, 1);
                _cleanup_buf_ sp_buf wrapped = SP_BUF_INIT, param = SP_BUF_INIT;
                _cleanup_error_ sp_error *e = NULL;
                cp_sealed s;
                if (hex_decode(PQgetvalue(res, i, 2), &wrapped) < 0 ||
                    cp_envelope_rewrap(k, id, old, wrapped.data, wrapped.len, &s, &e) < 0) {
                        sp_log_warn_kv(SP_KV("secret_id", id), "rewrap: secret %s stays under key '%s': %s", id, old,
                                       e ? e->message : "its stored bytes are malformed");
                        json_object_array_add(failed, json_object_new_string(id));
                        continue;
                }
                int r = bytea_param(&s.wrapped, &param, err);
                const char *up[] = {id, s.key_id, param.data, old};
                if (r == 0)
                        r = cp_db_exec(db,
                                       "UPDATE secrets SET key_id = $2, wrapped_key = $3::bytea WHERE id = $1 "
                                       "AND key_id = $4 AND deleted_at IS NULL",
                                       4, up, NULL, err);
                cp_sealed_clear(&s);
                if (r < 0)
                        goto rollback;
                (*done)++;
        }
        if (cp_db_commit(db, err) < 0)
                return -SP_E_UNAVAILABLE;
        return PQntuples(res);
rollback:
        cp_db_rollback(db);
        *done = 0;
        return -SP_E_UNAVAILABLE;
}

int cp_secrets_rewrap(cp_db *db, cp_keyring *k, int64_t max, cp_rewrap_result *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        ret->by_key = json_object_new_object();
        ret->missing_keys = json_object_new_array();
        if (!k)
                return sp_error_set(err, SP_E_UNAVAILABLE, "secrets: no key file");
        (void)cp_secrets_keyring_refresh(db, k);
        snprintf(ret->primary, sizeof(ret->primary), "%s", cp_keyring_primary(k));
        _cleanup_json_ json_object *ids = ring_ids(k), *failed = json_object_new_array();
        while (ret->rewrapped < max) {
                int64_t want = max - ret->rewrapped < REWRAP_BATCH ? max - ret->rewrapped : REWRAP_BATCH, done = 0;
                int seen = rewrap_batch(db, k, want, ids, failed, &done, err);
                if (seen < 0)
                        return sp_error_wrap(err, "rewrap");
                ret->rewrapped += done;
                if (seen == 0)
                        break;
        }
        ret->failed = (int64_t)json_object_array_length(failed);
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {sp_json_str(ids)};
        if (cp_db_exec(db,
                       "SELECT key_id, count(*), key_id IN (SELECT jsonb_array_elements_text($1::jsonb)) "
                       "FROM secrets WHERE deleted_at IS NULL GROUP BY key_id ORDER BY key_id",
                       1, p, &res, err) < 0)
                return sp_error_wrap(err, "rewrap: count");
        for (int i = 0; i < PQntuples(res); i++) {
                const char *kid = PQgetvalue(res, i, 0);
                int64_t n = strtoll(PQgetvalue(res, i, 1), NULL, 10);
                json_object_object_add(ret->by_key, kid, json_object_new_int64(n));
                if (strcmp(kid, ret->primary) != 0)
                        ret->remaining += n;
                if (strcmp(PQgetvalue(res, i, 2), "t") != 0)
                        json_object_array_add(ret->missing_keys, json_object_new_string(kid));
        }
        return 0;
}
