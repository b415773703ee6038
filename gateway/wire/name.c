/* SPDX-License-Identifier: Apache-2.0 */
/* Host names: syntax, normal form, IP literals (see name.h). */
#include "wire/name.h"

#include <arpa/inet.h>
#include <string.h>

static bool is_digit(unsigned char c)
{
        return c >= '0' && c <= '9';
}

static bool is_hex(unsigned char c)
{
        return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int fail(char out[GW_NAME_MAX + 1], const char **ret_reason, const char *reason)
{
        out[0] = '\0';
        if (ret_reason)
                *ret_reason = reason;
        return -1;
}

int gw_name_normalize(const char *in, size_t len, unsigned flags, char out[GW_NAME_MAX + 1], const char **ret_reason)
{
        if ((flags & GW_NAME_TRAILING_DOT) && len > 1 && in[len - 1] == '.')
                len--;
        if (len == 0)
                return fail(out, ret_reason, "empty name");
        if (len > GW_NAME_MAX)
                return fail(out, ret_reason, "name longer than 253 bytes");
        size_t label = 0;
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)in[i];
                if (c == '.') {
                        if (label == 0)
                                return fail(out, ret_reason, "empty label in name");
                        label = 0;
                        out[i] = '.';
                        continue;
                }
                if (c >= 'A' && c <= 'Z')
                        c = (unsigned char)(c + ('a' - 'A'));
                else if (c == '\0')
                        return fail(out, ret_reason, "NUL in name");
                else if (!((c >= 'a' && c <= 'z') || is_digit(c) || c == '-' ||
                           (c == '_' && (flags & GW_NAME_UNDERSCORE))))
                        return fail(out, ret_reason, "character not allowed in name");
                if (++label > GW_NAME_LABEL_MAX)
                        return fail(out, ret_reason, "label longer than 63 bytes");
                out[i] = (char)c;
        }
        if (label == 0)
                return fail(out, ret_reason, "trailing dot in name");
        out[len] = '\0';
        return (int)len;
}

/* "Ends in a number", as the WHATWG URL standard decides that a host is
 * IPv4: the last label is all digits, or 0x/0X and hex digits (maybe none). */
static bool ends_in_number(const char *s, size_t len)
{
        if (len > 0 && s[len - 1] == '.')
                len--;
        size_t start = len;
        while (start > 0 && s[start - 1] != '.')
                start--;
        const char *l = s + start;
        size_t n = len - start;
        if (n == 0)
                return false;
        size_t i = 0;
        bool hex = n >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X');
        if (hex)
                i = 2;
        for (; i < n; i++)
                if (!(hex ? is_hex((unsigned char)l[i]) : is_digit((unsigned char)l[i])))
                        return false;
        return true;
}

bool gw_name_is_ip_literal(const char *s, size_t len)
{
        if (memchr(s, ':', len) == NULL)
                return ends_in_number(s, len);
        if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
                s++;
                len -= 2;
        }
        char buf[INET6_ADDRSTRLEN + 1];
        if (len == 0 || len >= sizeof(buf) || memchr(s, '\0', len))
                return false;
        memcpy(buf, s, len);
        buf[len] = '\0';
        struct in6_addr a;
        return inet_pton(AF_INET6, buf, &a) == 1;
}
