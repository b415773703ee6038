/* SPDX-License-Identifier: Apache-2.0 */
/* The token key set: one list of PEMs per source, and a verifier over their union. */
#include <stdlib.h>
#include <string.h>

#include "auth/keys.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/pki.h"
#include "space/token.h"

struct dp_keys {
        char **pems[DP_KEYS__SOURCES]; /* NULL-terminated, or NULL */
        sp_token_verifier *verifier;
        size_t count;
};

static void pems_free(char **v)
{
        for (char **i = v; i && *i; i++)
                free(*i);
        free(v);
}

dp_keys *dp_keys_new(void)
{
        dp_keys *k = calloc(1, sizeof(*k));
        if (k && !(k->verifier = sp_token_verifier_new())) {
                free(k);
                return NULL;
        }
        return k;
}

void dp_keys_free(dp_keys *k)
{
        if (!k)
                return;
        for (int s = 0; s < DP_KEYS__SOURCES; s++)
                pems_free(k->pems[s]);
        sp_token_verifier_free(k->verifier);
        free(k);
}

/* Adds every key of every source to a new verifier; *ret_count the PEMs it took. */
static sp_token_verifier *build(char **const pems[DP_KEYS__SOURCES], size_t *ret_count, sp_error **err)
{
        _cleanup_token_verifier_ sp_token_verifier *v = sp_token_verifier_new();
        if (!v) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        size_t count = 0;
        for (int s = 0; s < DP_KEYS__SOURCES; s++)
                for (char **p = pems[s]; p && *p; p++, count++)
                        if (sp_token_verifier_add_key(v, *p, err) < 0)
                                return NULL;
        *ret_count = count;
        return TAKE_PTR(v);
}

int dp_keys_set(dp_keys *k, dp_key_source source, const char *const *pems, size_t n, sp_error **err)
{
        if (source >= DP_KEYS__SOURCES)
                return sp_error_set(err, SP_E_INVALID, "bad key source");
        char **copy = calloc(n + 1, sizeof(char *));
        if (!copy)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                _cleanup_token_verifier_ sp_token_verifier *probe = sp_token_verifier_new();
                _cleanup_error_ sp_error *e = NULL;
                if (!probe || sp_token_verifier_add_key(probe, pems[i], &e) < 0) {
                        pems_free(copy);
                        return sp_error_set(err, SP_E_INVALID, "token key %zu: %s", i + 1,
                                            e ? e->message : "out of memory");
                }
                if (!(copy[i] = strdup(pems[i]))) {
                        pems_free(copy);
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                }
        }
        char **next[DP_KEYS__SOURCES];
        memcpy(next, k->pems, sizeof(next));
        next[source] = copy;
        size_t count = 0;
        sp_token_verifier *v = build(next, &count, err);
        if (!v) {
                pems_free(copy);
                return -SP_E_INVALID;
        }
        pems_free(k->pems[source]);
        k->pems[source] = copy;
        sp_token_verifier_free(k->verifier);
        k->verifier = v;
        k->count = count;
        return 0;
}

/* Appends every PEM block of text (a file may hold several keys, current
 * first, as the control plane's --token-public-key-out writes them) to pems. */
static int split_pems(const char *text, const char *path, char **pems, size_t *n, size_t max, sp_error **err)
{
        static const char end_marker[] = "-----END ";
        const char *p = text;
        size_t before = *n;
        while ((p = strstr(p, "-----BEGIN ")) != NULL) {
                const char *e = strstr(p, end_marker);
                const char *eol = e ? strstr(e + sizeof(end_marker) - 1, "-----") : NULL;
                if (!eol)
                        return sp_error_set(err, SP_E_INVALID, "token key %s: a PEM block without its end", path);
                eol += 5;
                if (*n >= max)
                        return sp_error_set(err, SP_E_LIMIT, "more than %zu token keys", max);
                if (!(pems[(*n)++] = strndup(p, (size_t)(eol - p))))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                p = eol;
        }
        if (*n == before)
                return sp_error_set(err, SP_E_INVALID, "token key %s: no PEM block", path);
        return 0;
}

int dp_keys_load_files(dp_keys *k, dp_key_source source, char *const *paths, sp_error **err)
{
        char **pems = calloc(SP_TOKEN_MAX_KEYS + 1, sizeof(char *));
        if (!pems)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        size_t n = 0;
        int r = 0;
        for (size_t i = 0; paths && paths[i] && r == 0; i++) {
                _cleanup_free_ char *text = sp_pki_pem_load(paths[i], err);
                if (!text)
                        r = sp_error_wrap(err, "token key %s", paths[i]);
                else
                        r = split_pems(text, paths[i], pems, &n, SP_TOKEN_MAX_KEYS, err);
        }
        if (r == 0 && (r = dp_keys_set(k, source, (const char *const *)pems, n, err)) < 0)
                r = sp_error_wrap(err, "--token-public-key");
        pems_free(pems);
        return r;
}

size_t dp_keys_count(const dp_keys *k)
{
        return k->count;
}

json_object *dp_keys_verify(const dp_keys *k, const char *token, int64_t now_s, sp_error **err)
{
        return sp_token_verify(k->verifier, token, now_s, err);
}
