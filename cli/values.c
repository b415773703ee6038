/* SPDX-License-Identifier: Apache-2.0 */
/* Values typed on spacectl's command line: CPUs, sizes, durations, integers, KEY=VALUE pairs. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "space/time.h"

int ctl_parse_int(const char *s, int64_t min, int64_t max, int64_t *ret, sp_error **err)
{
        size_t n = strlen(s);
        if (n == 0 || n > 18 || strspn(s, "0123456789") != n)
                return sp_error_set(err, SP_E_INVALID, "'%.32s' is not a number", s);
        int64_t v = strtoll(s, NULL, 10);
        if (v < min || v > max)
                return sp_error_set(err, SP_E_INVALID, "%lld is not between %lld and %lld", (long long)v,
                                    (long long)min, (long long)max);
        *ret = v;
        return 0;
}

int ctl_parse_cpu(const char *s, int64_t *ret_millis, sp_error **err)
{
        size_t n = strlen(s);
        if (n >= 2 && n <= 12 && s[n - 1] == 'm' && strspn(s, "0123456789") == n - 1) {
                *ret_millis = strtoll(s, NULL, 10);
                return 0;
        }
        /* CPUs with up to three decimals. */
        size_t whole = strspn(s, "0123456789");
        size_t frac = 0;
        if (s[whole] == '.')
                frac = strspn(s + whole + 1, "0123456789");
        bool ok = whole > 0 && whole <= 6 &&
                  (s[whole] == '\0' || (s[whole] == '.' && frac > 0 && frac <= 3 && s[whole + 1 + frac] == '\0'));
        if (!ok)
                return sp_error_set(err, SP_E_INVALID, "'%.32s' is not a CPU amount (e.g. 2, 0.5 or 250m)", s);
        int64_t v = strtoll(s, NULL, 10) * 1000;
        int64_t scale = 100;
        for (size_t i = 0; i < frac; i++, scale /= 10)
                v += (s[whole + 1 + i] - '0') * scale;
        *ret_millis = v;
        return 0;
}

int ctl_parse_mib(const char *s, int64_t *ret_mib, sp_error **err)
{
        size_t digits = strspn(s, "0123456789");
        const char *suffix = s + digits;
        if (digits == 0 || digits > 15)
                return sp_error_set(err, SP_E_INVALID, "'%.32s' is not a size (e.g. 512M or 2G)", s);
        static const struct {
                const char *name;
                int shift; /* relative to KiB */
        } units[] = {{"", 10},   {"k", 0},    {"ki", 0},  {"kib", 0},  {"kb", 0},  {"m", 10},
                     {"mi", 10}, {"mib", 10}, {"mb", 10}, {"g", 20},   {"gi", 20}, {"gib", 20},
                     {"gb", 20}, {"t", 30},   {"ti", 30}, {"tib", 30}, {"tb", 30}};
        int shift = -1;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
                if (strcasecmp(suffix, units[i].name) == 0)
                        shift = units[i].shift;
        if (shift < 0)
                return sp_error_set(err, SP_E_INVALID, "'%.32s' is not a size (e.g. 512M or 2G)", s);
        int64_t kib = strtoll(s, NULL, 10);
        if (kib > (INT64_C(1) << (50 - shift)))
                return sp_error_set(err, SP_E_INVALID, "'%.32s' is too large", s);
        kib <<= shift;
        if (kib % 1024 != 0)
                return sp_error_set(err, SP_E_INVALID, "'%.32s' is not a whole number of MiB", s);
        *ret_mib = kib / 1024;
        return 0;
}

int ctl_parse_seconds(const char *s, int64_t *ret_s, sp_error **err)
{
        int64_t us;
        int r = sp_duration_parse(s, &us, err);
        if (r < 0)
                return r;
        if (us % SP_USEC_PER_SEC != 0)
                return sp_error_set(err, SP_E_INVALID, "'%.32s' is not a whole number of seconds", s);
        *ret_s = us / SP_USEC_PER_SEC;
        return 0;
}

int ctl_parse_kv(const char *s, const char *what, json_object *map, sp_error **err)
{
        const char *eq = strchr(s, '=');
        if (!eq || eq == s)
                return sp_error_set(err, SP_E_INVALID, "--%s wants KEY=VALUE, not '%.64s'", what, s);
        size_t klen = (size_t)(eq - s);
        if (klen > 256)
                return sp_error_set(err, SP_E_INVALID, "--%s: key longer than 256 bytes", what);
        char key[257];
        memcpy(key, s, klen);
        key[klen] = '\0';
        if (json_object_object_get_ex(map, key, NULL))
                return sp_error_set(err, SP_E_INVALID, "--%s: key '%s' given twice", what, key);
        json_object_object_add(map, key, json_object_new_string(eq + 1));
        return 0;
}
