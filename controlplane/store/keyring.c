/* SPDX-License-Identifier: Apache-2.0 */
/* The cluster key ring file (keyring.h). */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/log.h"
#include "store/keyring.h"

typedef struct cp_key {
        char id[CP_KEY_ID_MAX + 1];
        uint8_t key[CP_KEY_LEN];
} cp_key;

typedef struct keys {
        size_t n;
        cp_key v[CP_KEYRING_MAX];
} keys;

struct cp_keyring {
        char *path; /* NULL: parsed from text */
        struct stat seen; /* the file as last read (or tried) */
        keys k;
        char error[512]; /* why the file as it is now was not taken; "" when it was */
};

bool cp_keyring_id_valid(const char *s, size_t len)
{
        if (len < 1 || len > CP_KEY_ID_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '-'))
                        return false;
        }
        return true;
}

static void keys_wipe(keys *k)
{
        OPENSSL_cleanse(k, sizeof(*k));
}

/* One line "<id> <base64>" (surrounding spaces and a CR allowed) into k. */
static int parse_line(const char *line, size_t len, size_t lineno, keys *k, sp_error **err)
{
        while (len && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r'))
                len--;
        while (len && (*line == ' ' || *line == '\t')) {
                line++;
                len--;
        }
        if (len == 0 || *line == '#')
                return 0;
        size_t idlen = 0;
        while (idlen < len && line[idlen] != ' ' && line[idlen] != '\t')
                idlen++;
        if (!cp_keyring_id_valid(line, idlen))
                return sp_error_set(err, SP_E_INVALID,
                                    "line %zu: a key id must be 1 to %d of A-Z, a-z, 0-9, '.', '_' and '-'", lineno,
                                    CP_KEY_ID_MAX);
        const char *b64 = line + idlen;
        size_t blen = len - idlen;
        while (blen && (*b64 == ' ' || *b64 == '\t')) {
                b64++;
                blen--;
        }
        for (size_t i = 0; i < k->n; i++)
                if (strlen(k->v[i].id) == idlen && memcmp(k->v[i].id, line, idlen) == 0)
                        return sp_error_set(err, SP_E_INVALID, "line %zu: key id '%.*s' is repeated", lineno,
                                            (int)idlen, line);
        if (k->n >= CP_KEYRING_MAX)
                return sp_error_set(err, SP_E_INVALID, "line %zu: at most %d keys", lineno, CP_KEYRING_MAX);
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT;
        bool ok = blen > 0 && sp_base64_decode(&raw, b64, blen, 0, NULL) == 0 && raw.len == CP_KEY_LEN;
        if (ok) {
                cp_key *key = &k->v[k->n++];
                memcpy(key->id, line, idlen);
                key->id[idlen] = '\0';
                memcpy(key->key, raw.data, CP_KEY_LEN);
        }
        if (raw.data)
                OPENSSL_cleanse(raw.data, raw.cap);
        if (!ok)
                return sp_error_set(err, SP_E_INVALID, "line %zu: the key of '%.*s' must be the base64 of %d bytes",
                                    lineno, (int)idlen, line, CP_KEY_LEN);
        return 0;
}

static int parse_text(const char *text, size_t len, keys *k, sp_error **err)
{
        memset(k, 0, sizeof(*k));
        size_t lineno = 0;
        for (size_t at = 0; at < len;) {
                const char *nl = memchr(text + at, '\n', len - at);
                size_t end = nl ? (size_t)(nl - text) : len;
                if (memchr(text + at, '\0', end - at)) {
                        keys_wipe(k);
                        return sp_error_set(err, SP_E_INVALID, "line %zu: NUL byte", lineno + 1);
                }
                if (parse_line(text + at, end - at, ++lineno, k, err) < 0) {
                        keys_wipe(k);
                        return -SP_E_INVALID;
                }
                at = end + 1;
        }
        if (k->n == 0)
                return sp_error_set(err, SP_E_INVALID, "no key (lines '<key-id> <base64 of %d bytes>')", CP_KEY_LEN);
        return 0;
}

/* Reads the key file at path into k. */
static int read_file(const char *path, keys *k, sp_error **err)
{
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        int r = sp_file_read(path, CP_KEYRING_FILE_MAX, &text, err);
        if (r == 0)
                r = parse_text(text.data ? text.data : "", text.len, k, err);
        if (text.data)
                OPENSSL_cleanse(text.data, text.cap);
        if (r < 0)
                return sp_error_wrap(err, "secrets key file %s", path);
        return 0;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
        return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
               a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
               a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

int cp_keyring_parse(const char *text, size_t len, cp_keyring **ret, sp_error **err)
{
        *ret = NULL;
        cp_keyring *k = calloc(1, sizeof(*k));
        if (!k)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (parse_text(text, len, &k->k, err) < 0) {
                free(k);
                return -SP_E_INVALID;
        }
        *ret = k;
        return 0;
}

int cp_keyring_load(const char *path, cp_keyring **ret, sp_error **err)
{
        *ret = NULL;
        struct stat st;
        if (stat(path, &st) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "secrets key file %s", path);
        cp_keyring *k = calloc(1, sizeof(*k));
        if (!k || !(k->path = strdup(path))) {
                free(k);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (read_file(path, &k->k, err) < 0) {
                cp_keyring_free(k);
                return -SP_E_INVALID;
        }
        if (st.st_mode & 0077)
                sp_log_warn("secrets key file %s: group or others may access it (chmod 600 it)", path);
        k->seen = st;
        *ret = k;
        return 0;
}

int cp_keyring_refresh(cp_keyring *k)
{
        return cp_keyring_refresh_checked(k, NULL, NULL);
}

int cp_keyring_refresh_checked(cp_keyring *k, cp_keyring_check_fn check, void *ud)
{
        if (!k || !k->path)
                return 0;
        struct stat st;
        if (stat(k->path, &st) < 0) {
                /* Gone (being replaced, or removed): keep the keys, say so once. */
                if (k->seen.st_ino != 0)
                        sp_log_warn("secrets key file %s: %s; keeping the keys read before", k->path, strerror(errno));
                snprintf(k->error, sizeof(k->error), "secrets key file %s: %s; still using the keys read before",
                         k->path, strerror(errno));
                memset(&k->seen, 0, sizeof(k->seen));
                return -SP_E_IO;
        }
        if (same_file(&st, &k->seen))
                return 0;
        k->seen = st;
        if (st.st_mode & 0077)
                sp_log_warn("secrets key file %s: group or others may access it (chmod 600 it)", k->path);
        _cleanup_error_ sp_error *e = NULL;
        cp_keyring fresh = {0};
        if (read_file(k->path, &fresh.k, &e) < 0) {
                sp_log_warn("%s; keeping the keys read before", e->message);
                snprintf(k->error, sizeof(k->error), "%s; still using the keys read before", e->message);
                return -SP_E_INVALID;
        }
        if (check && check(&fresh, ud, &e) < 0) {
                keys_wipe(&fresh.k);
                if (e->code != SP_E_PRECONDITION) /* could not tell: ask again at the next use */
                        memset(&k->seen, 0, sizeof(k->seen));
                sp_log_error("secrets key file %s: %s; keeping the keys read before", k->path, e->message);
                snprintf(k->error, sizeof(k->error), "secrets key file %s: %s; still using the keys read before",
                         k->path, e->message);
                return -SP_E_INVALID;
        }
        k->error[0] = '\0';
        keys_wipe(&k->k);
        k->k = fresh.k;
        keys_wipe(&fresh.k);
        sp_log_info_kv(SP_KV("primary", k->k.v[0].id), "secrets key file %s read again: %zu keys", k->path, k->k.n);
        return 1;
}

void cp_keyring_check_value(const cp_keyring *k, size_t i, uint8_t out[CP_KEY_CHECK_LEN])
{
        static const char label[] = "space secrets key check v1";
        unsigned int n = CP_KEY_CHECK_LEN;
        if (!k || i >= k->k.n ||
            !HMAC(EVP_sha256(), k->k.v[i].key, CP_KEY_LEN, (const unsigned char *)label, sizeof(label) - 1, out, &n))
                memset(out, 0, CP_KEY_CHECK_LEN);
}

cp_keyring *cp_keyring_free(cp_keyring *k)
{
        if (!k)
                return NULL;
        keys_wipe(&k->k);
        free(k->path);
        free(k);
        return NULL;
}

const char *cp_keyring_primary(const cp_keyring *k)
{
        return k->k.v[0].id;
}

const uint8_t *cp_keyring_key(const cp_keyring *k, const char *id)
{
        for (size_t i = 0; id && i < k->k.n; i++)
                if (strcmp(k->k.v[i].id, id) == 0)
                        return k->k.v[i].key;
        return NULL;
}

size_t cp_keyring_count(const cp_keyring *k)
{
        return k->k.n;
}

const char *cp_keyring_id_at(const cp_keyring *k, size_t i)
{
        return i < k->k.n ? k->k.v[i].id : NULL;
}

const char *cp_keyring_path(const cp_keyring *k)
{
        return k->path;
}

const char *cp_keyring_error(const cp_keyring *k)
{
        return k && k->error[0] ? k->error : NULL;
}
