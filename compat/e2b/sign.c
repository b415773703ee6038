/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Signed file URLs (see sign.h).
 */
#include "sign.h"

#include <inttypes.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "token.h"

#define MAX_SANDBOX_ID 128

typedef struct signer {
        char *sandbox_id, *token; /* NULL: a free slot */
        uint64_t age; /* when last remembered: larger is newer */
        uint64_t owner; /* of the API key that made or used it (a hash, not the key) */
} signer;

/* Checks hash every token (milliseconds for a full table) and may run side
 * by side; remembering, on every envd call, is short and goes first, so a
 * flood of signed requests delays it by one check at most. */
struct e2b_signers {
        pthread_rwlock_t mu;
        signer *v;
        uint64_t *owners; /* scratch for the eviction (under the write lock) */
        size_t max, per_sandbox;
        uint64_t clock;
};

/* The signed text is "path:operation:user:" (hashed once, the prefix), then
 * the token and ":exp" when there is an expiration. */
static EVP_MD_CTX *prefix_new(const char *path, const char *operation, const char *user)
{
        EVP_MD_CTX *c = EVP_MD_CTX_new();
        if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(c, path, strlen(path)) != 1 ||
            EVP_DigestUpdate(c, ":", 1) != 1 || EVP_DigestUpdate(c, operation, strlen(operation)) != 1 ||
            EVP_DigestUpdate(c, ":", 1) != 1 || EVP_DigestUpdate(c, user, strlen(user)) != 1 ||
            EVP_DigestUpdate(c, ":", 1) != 1)
                abort();
        return c;
}

/* The signature's base64 after "v1_" for token: 43 characters and "=" (the
 * SDK strips the padding), NUL-terminated. one is scratch. */
static void sign_token(EVP_MD_CTX *one, const EVP_MD_CTX *prefix, const char *token, const char *expbuf,
                       unsigned char b64[static 48])
{
        uint8_t md[32];
        if (EVP_MD_CTX_copy_ex(one, prefix) != 1 || EVP_DigestUpdate(one, token, strlen(token)) != 1 ||
            EVP_DigestUpdate(one, expbuf, strlen(expbuf)) != 1 || EVP_DigestFinal_ex(one, md, NULL) != 1)
                abort();
        EVP_EncodeBlock(b64, md, sizeof(md));
}

static void exp_text(const int64_t *exp, char out[static 32])
{
        out[0] = '\0';
        if (exp)
                snprintf(out, 32, ":%" PRId64, *exp);
}

void e2b_sign_compute(const char *path, const char *operation, const char *user, const char *token, const int64_t *exp,
                      char out[static E2B_SIGN_LEN + 1])
{
        char expbuf[32];
        exp_text(exp, expbuf);
        EVP_MD_CTX *prefix = prefix_new(path, operation, user), *one = EVP_MD_CTX_new();
        if (!one)
                abort();
        unsigned char b64[48];
        sign_token(one, prefix, token, expbuf, b64);
        snprintf(out, E2B_SIGN_LEN + 1, "v1_%.*s", E2B_SIGN_LEN - 3, (const char *)b64);
        EVP_MD_CTX_free(prefix);
        EVP_MD_CTX_free(one);
}

int e2b_sign_expiration(const char *s, int64_t *ret, sp_error **err)
{
        const char *p = s ? s : "";
        bool neg = *p == '-';
        if (*p == '-' || *p == '+')
                p++;
        size_t n = strspn(p, "0123456789");
        if (n == 0 || n > 19 || p[n] != '\0')
                return sp_error_set(err, SP_E_INVALID, "signature_expiration is not a number of seconds");
        /* Accumulated as a negative number, which holds INT64_MIN too. */
        int64_t v = 0;
        for (size_t i = 0; i < n; i++) {
                int d = p[i] - '0';
                if (v < (INT64_MIN + d) / 10)
                        return sp_error_set(err, SP_E_INVALID, "signature_expiration is out of range");
                v = v * 10 - d;
        }
        if (!neg && v == INT64_MIN)
                return sp_error_set(err, SP_E_INVALID, "signature_expiration is out of range");
        *ret = neg ? v : -v;
        return 0;
}

e2b_signers *e2b_signers_new(size_t max, size_t per_sandbox)
{
        if (max == 0 || per_sandbox == 0)
                return NULL;
        e2b_signers *s = calloc(1, sizeof(*s));
        if (!s || !(s->v = calloc(max, sizeof(*s->v))) || !(s->owners = calloc(max, sizeof(*s->owners)))) {
                if (s)
                        free(s->v);
                free(s);
                return NULL;
        }
        pthread_rwlockattr_t a;
        pthread_rwlockattr_init(&a);
        pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&s->mu, &a);
        pthread_rwlockattr_destroy(&a);
        s->max = max;
        s->per_sandbox = per_sandbox;
        return s;
}

static void forget(signer *g)
{
        if (g->token) {
                sp_explicit_bzero(g->token, strlen(g->token));
                free(g->token);
        }
        free(g->sandbox_id);
        *g = (signer){0};
}

void e2b_signers_free(e2b_signers *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->max; i++)
                forget(&s->v[i]);
        free(s->v);
        free(s->owners);
        pthread_rwlock_destroy(&s->mu);
        free(s);
}

static uint64_t owner_of(const char *api_key)
{
        unsigned char md[32];
        unsigned int n = 0;
        EVP_Digest(api_key ? api_key : "", api_key ? strlen(api_key) : 0, md, &n, EVP_sha256(), NULL);
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
                v = v << 8 | md[i];
        return v;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* The owner holding the most entries of a full table (ties: the smaller hash). */
static uint64_t biggest_owner(e2b_signers *s)
{
        size_t n = 0;
        for (size_t i = 0; i < s->max; i++)
                if (s->v[i].token)
                        s->owners[n++] = s->v[i].owner;
        qsort(s->owners, n, sizeof(uint64_t), cmp_u64);
        uint64_t best = 0;
        size_t best_run = 0;
        for (size_t i = 0; i < n;) {
                size_t j = i;
                while (j < n && s->owners[j] == s->owners[i])
                        j++;
                if (j - i > best_run) {
                        best_run = j - i;
                        best = s->owners[i];
                }
                i = j;
        }
        return best;
}

void e2b_signers_remember(e2b_signers *s, const char *sandbox_id, const char *token, const char *api_key)
{
        if (!s || !sandbox_id || !*sandbox_id || strlen(sandbox_id) > MAX_SANDBOX_ID || !token || !*token ||
            strlen(token) > E2B_TOKEN_MAX_LEN)
                return;
        uint64_t owner = owner_of(api_key);
        pthread_rwlock_wrlock(&s->mu);
        signer *freeslot = NULL, *oldest_own = NULL;
        size_t own = 0;
        for (size_t i = 0; i < s->max; i++) {
                signer *g = &s->v[i];
                if (!g->token) {
                        if (!freeslot)
                                freeslot = g;
                        continue;
                }
                if (strcmp(g->sandbox_id, sandbox_id) == 0) {
                        if (strcmp(g->token, token) == 0) {
                                g->age = ++s->clock;
                                g->owner = owner;
                                pthread_rwlock_unlock(&s->mu);
                                return;
                        }
                        own++;
                        if (!oldest_own || g->age < oldest_own->age)
                                oldest_own = g;
                }
        }
        signer *slot = own >= s->per_sandbox ? oldest_own : freeslot;
        if (!slot) {
                /* Full: the oldest entry of whoever holds the most, so that one key filling the table
                 * (creating and connecting to sandboxes in a loop) recycles its own entries and never
                 * pushes out a key that holds fewer. */
                uint64_t big = biggest_owner(s);
                for (size_t i = 0; i < s->max; i++) {
                        signer *g = &s->v[i];
                        if (g->owner == big && (!slot || g->age < slot->age))
                                slot = g;
                }
        }
        forget(slot);
        slot->sandbox_id = strdup(sandbox_id);
        slot->token = strdup(token);
        if (!slot->sandbox_id || !slot->token)
                abort();
        slot->age = ++s->clock;
        slot->owner = owner;
        pthread_rwlock_unlock(&s->mu);
}

int e2b_signers_check(e2b_signers *s, const char *sandbox_id, const char *path, const char *operation, const char *user,
                      const char *signature, const char *expiration, int64_t now, char **ret_sandbox, char **ret_token,
                      sp_error **err)
{
        int64_t exp = 0;
        if (expiration && e2b_sign_expiration(expiration, &exp, err) < 0)
                return -1;
        /* No user name holds ':' (envd's text joins the parts with it; see
         * docs/threat-model.md for what that leaves). */
        if (!s || !signature || strlen(signature) != E2B_SIGN_LEN || (user && strchr(user, ':')))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "invalid signature");
        path = path ? path : "";
        user = user ? user : "";
        if (strncmp(signature, "v1_", 3) != 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "invalid signature");
        /* The part before the token is hashed once: a check hashes every token in
         * the table, and is made before anything says who asks
         * (docs/threat-model.md). */
        char expbuf[32];
        exp_text(expiration ? &exp : NULL, expbuf);
        EVP_MD_CTX *prefix = prefix_new(path, operation, user), *one = EVP_MD_CTX_new();
        if (!one)
                abort();
        _cleanup_free_ char *sbx = NULL, *tok = NULL;
        pthread_rwlock_rdlock(&s->mu);
        for (size_t i = 0; i < s->max && !tok; i++) {
                const signer *g = &s->v[i];
                if (!g->token || (sandbox_id && strcmp(g->sandbox_id, sandbox_id) != 0))
                        continue;
                unsigned char b64[48];
                sign_token(one, prefix, g->token, expbuf, b64);
                if (CRYPTO_memcmp(b64, signature + 3, E2B_SIGN_LEN - 3) == 0 &&
                    (!(sbx = strdup(g->sandbox_id)) || !(tok = strdup(g->token))))
                        abort();
        }
        pthread_rwlock_unlock(&s->mu);
        EVP_MD_CTX_free(prefix);
        EVP_MD_CTX_free(one);
        if (!tok)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "invalid signature");
        if (expiration && exp < now) {
                sp_explicit_bzero(tok, strlen(tok));
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "signature is already expired");
        }
        *ret_sandbox = TAKE_PTR(sbx);
        *ret_token = TAKE_PTR(tok);
        return 0;
}
