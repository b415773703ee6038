/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: host names and egress patterns (gateway/wire/name.h,
 * pattern.h). Input: a pattern, a NUL, a name. Beyond not crashing or
 * reading past the input: normal forms are fixed points; a match agrees
 * with a plain reference (exact: equal; wildcard: a non-empty prefix ending
 * before ".suffix"); no accepted pattern is an IP literal or opens a whole
 * top-level domain.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/pattern.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool reference_match(const char *pattern, const char *name)
{
        char low[512];
        size_t n = strlen(name);
        if (n >= sizeof(low))
                return false;
        for (size_t i = 0; i < n; i++)
                low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
        if (n > 0 && low[n - 1] == '.')
                n--;
        low[n] = '\0';
        if (n == 0)
                return false;
        if (strncmp(pattern, "*.", 2) != 0)
                return strcmp(low, pattern) == 0;
        size_t s = strlen(pattern) - 1; /* ".suffix" */
        return n > s && strcmp(low + n - s, pattern + 1) == 0 && low[n - s - 1] != '.';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *copy = malloc(size + 1);
        if (!copy)
                abort();
        memcpy(copy, data, size);
        copy[size] = '\0';
        const char *sep = memchr(copy, '\0', size);
        size_t plen = sep ? (size_t)(sep - copy) : size;
        const char *name = sep ? sep + 1 : "";

        char out[GW_NAME_MAX + 1], again[GW_NAME_MAX + 1];
        for (unsigned flags = 0; flags < 4; flags++) {
                int n = gw_name_normalize(copy, plen, flags, out, NULL);
                if (n >= 0 && (gw_name_normalize(out, (size_t)n, flags & GW_NAME_UNDERSCORE, again, NULL) != n ||
                               strcmp(out, again) != 0))
                        abort();
        }
        (void)gw_name_is_ip_literal(copy, plen);

        int n = gw_pattern_normalize(copy, plen, out, NULL);
        if (n >= 0) {
                if ((size_t)n != strlen(out) || gw_pattern_normalize(out, (size_t)n, again, NULL) != n ||
                    strcmp(out, again) != 0)
                        abort();
                const char *suffix = strncmp(out, "*.", 2) == 0 ? out + 2 : out;
                if (gw_name_is_ip_literal(suffix, strlen(suffix)) || (suffix != out && !strchr(suffix, '.')))
                        abort();
                if (gw_pattern_match(out, name) != reference_match(out, name))
                        abort();
        } else if (out[0] != '\0') {
                abort();
        }
        free(copy);
        return 0;
}
