/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "space/id.h"

static const char alphabet[] = "0123456789abcdefghjkmnpqrstvwxyz"; /* 32, no i l o u */

int sp_random_bytes(void *p, size_t n, sp_error **err)
{
        unsigned char *b = p;
        while (n > 0) {
                ssize_t r = getrandom(b, n, 0);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return sp_error_set_errno(err, SP_E_IO, errno, "getrandom");
                }
                b += r;
                n -= (size_t)r;
        }
        return 0;
}

static bool prefix_ok(const char *prefix, size_t *len)
{
        size_t n = strlen(prefix);
        if (n == 0 || n > SP_ID_PREFIX_MAX)
                return false;
        for (size_t i = 0; i < n; i++)
                if (prefix[i] < 'a' || prefix[i] > 'z')
                        return false;
        *len = n;
        return true;
}

int sp_id_new(const char *prefix, char out[static SP_ID_MAX], sp_error **err)
{
        size_t n;
        if (!prefix || !prefix_ok(prefix, &n))
                return sp_error_set(err, SP_E_INVALID, "invalid id prefix");
        unsigned char rnd[SP_ID_RANDOM_CHARS];
        if (sp_random_bytes(rnd, sizeof(rnd), err) < 0)
                return -SP_E_IO;
        memcpy(out, prefix, n);
        out[n] = '_';
        for (size_t i = 0; i < SP_ID_RANDOM_CHARS; i++)
                out[n + 1 + i] = alphabet[rnd[i] & 31];
        out[n + 1 + SP_ID_RANDOM_CHARS] = '\0';
        return 0;
}

bool sp_id_valid(const char *s, const char *prefix)
{
        if (!s)
                return false;
        const char *us = strchr(s, '_');
        if (!us || us == s || (size_t)(us - s) > SP_ID_PREFIX_MAX)
                return false;
        for (const char *p = s; p < us; p++)
                if (*p < 'a' || *p > 'z')
                        return false;
        if (prefix && (strlen(prefix) != (size_t)(us - s) || strncmp(s, prefix, (size_t)(us - s)) != 0))
                return false;
        const char *r = us + 1;
        if (strlen(r) != SP_ID_RANDOM_CHARS)
                return false;
        for (; *r; r++)
                if (!strchr(alphabet, *r))
                        return false;
        return true;
}
