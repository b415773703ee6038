/* SPDX-License-Identifier: Apache-2.0 */
/* Egress profile domain patterns (see pattern.h). */
#include "wire/pattern.h"

#include <string.h>

static int refuse(char out[GW_NAME_MAX + 1], const char **ret_reason, const char *reason)
{
        out[0] = '\0';
        if (ret_reason)
                *ret_reason = reason;
        return -1;
}

int gw_pattern_normalize(const char *in, size_t len, char out[GW_NAME_MAX + 1], const char **ret_reason)
{
        const unsigned flags = GW_NAME_UNDERSCORE | GW_NAME_TRAILING_DOT;
        if (len == 0)
                return refuse(out, ret_reason, "empty pattern");
        bool wildcard = len >= 2 && in[0] == '*' && in[1] == '.';
        size_t skip = wildcard ? 2 : 0;
        if (memchr(in + skip, '*', len - skip))
                return refuse(out, ret_reason, "'*' is allowed only as the whole first label (\"*.example.com\")");
        char suffix[GW_NAME_MAX + 1];
        int n = gw_name_normalize(in + skip, len - skip, flags, suffix, ret_reason);
        if (n < 0)
                return refuse(out, NULL, NULL);
        if (gw_name_is_ip_literal(suffix, (size_t)n))
                return refuse(out, ret_reason, "an IP address is not a domain pattern");
        if (wildcard && memchr(suffix, '.', (size_t)n) == NULL)
                return refuse(out, ret_reason, "a wildcard needs at least two labels after \"*.\"");
        if (skip + (size_t)n > GW_NAME_MAX)
                return refuse(out, ret_reason, "name longer than 253 bytes");
        memcpy(out, "*.", skip);
        memcpy(out + skip, suffix, (size_t)n + 1);
        return (int)skip + n;
}

static bool caseeq(const char *a, const char *b, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
                if (x >= 'A' && x <= 'Z')
                        x = (unsigned char)(x + ('a' - 'A'));
                if (y >= 'A' && y <= 'Z')
                        y = (unsigned char)(y + ('a' - 'A'));
                if (x != y)
                        return false;
        }
        return true;
}

bool gw_pattern_match(const char *pattern, const char *name)
{
        size_t plen = strlen(pattern), nlen = strlen(name);
        if (nlen > 0 && name[nlen - 1] == '.')
                nlen--;
        if (nlen == 0 || plen == 0)
                return false;
        if (plen >= 2 && pattern[0] == '*' && pattern[1] == '.') {
                /* ".example.com" ends the name, after at least one byte. */
                size_t slen = plen - 1;
                return nlen > slen && name[nlen - slen - 1] != '.' && caseeq(name + nlen - slen, pattern + 1, slen);
        }
        return nlen == plen && caseeq(name, pattern, plen);
}
