/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "space/time.h"

static int64_t clock_us(clockid_t id)
{
        struct timespec ts;
        clock_gettime(id, &ts);
        return (int64_t)ts.tv_sec * SP_USEC_PER_SEC + ts.tv_nsec / 1000;
}

int64_t sp_now_mono_us(void)
{
        return clock_us(CLOCK_MONOTONIC);
}
int64_t sp_now_real_us(void)
{
        return clock_us(CLOCK_REALTIME);
}

void sp_time_format_rfc3339(int64_t real_us, char out[static 32])
{
        time_t sec = (time_t)(real_us / SP_USEC_PER_SEC);
        int64_t frac = real_us % SP_USEC_PER_SEC;
        if (frac < 0) {
                frac += SP_USEC_PER_SEC;
                sec--;
        }
        struct tm tm;
        gmtime_r(&sec, &tm);
        size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out + n, 32 - n, ".%03dZ", (int)(frac / 1000));
}

static int digits(const char **p, int n, int *ret)
{
        int v = 0;
        for (int i = 0; i < n; i++) {
                if (!isdigit((unsigned char)**p))
                        return -1;
                v = v * 10 + (**p - '0');
                (*p)++;
        }
        *ret = v;
        return 0;
}

int sp_time_parse_rfc3339(const char *s, int64_t *ret_us, sp_error **err)
{
        const char *p = s;
        int Y, M, D, h, m, sec;
        if (!s || digits(&p, 4, &Y) < 0 || *p++ != '-' || digits(&p, 2, &M) < 0 || *p++ != '-' ||
            digits(&p, 2, &D) < 0 || (*p != 'T' && *p != 't' && *p != ' '))
                goto bad;
        p++;
        if (digits(&p, 2, &h) < 0 || *p++ != ':' || digits(&p, 2, &m) < 0 || *p++ != ':' || digits(&p, 2, &sec) < 0)
                goto bad;
        if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60)
                goto bad;
        int64_t frac_us = 0;
        if (*p == '.') {
                p++;
                int64_t scale = 100000;
                if (!isdigit((unsigned char)*p))
                        goto bad;
                while (isdigit((unsigned char)*p)) {
                        frac_us += (*p - '0') * scale;
                        scale /= 10;
                        p++;
                }
        }
        int off = 0;
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-') {
                int sign = *p == '-' ? -1 : 1, oh, om;
                p++;
                if (digits(&p, 2, &oh) < 0 || *p++ != ':' || digits(&p, 2, &om) < 0 || oh > 23 || om > 59)
                        goto bad;
                off = sign * (oh * 3600 + om * 60);
        } else {
                goto bad;
        }
        if (*p)
                goto bad;
        struct tm tm = {.tm_year = Y - 1900, .tm_mon = M - 1, .tm_mday = D, .tm_hour = h, .tm_min = m, .tm_sec = sec};
        time_t t = timegm(&tm);
        *ret_us = ((int64_t)t - off) * SP_USEC_PER_SEC + frac_us;
        return 0;
bad:
        return sp_error_set(err, SP_E_INVALID, "invalid timestamp (want RFC 3339, e.g. 2026-01-02T15:04:05Z)");
}

int sp_duration_parse(const char *s, int64_t *ret_us, sp_error **err)
{
        if (!s || !*s)
                return sp_error_set(err, SP_E_INVALID, "empty duration");
        const char *p = s;
        int64_t total = 0;
        bool any_unit = false;
        while (*p) {
                if (!isdigit((unsigned char)*p))
                        return sp_error_set(err, SP_E_INVALID, "invalid duration '%s'", s);
                int64_t v = 0;
                while (isdigit((unsigned char)*p)) {
                        if (v > INT64_MAX / 10 - 10)
                                return sp_error_set(err, SP_E_INVALID, "duration '%s' too large", s);
                        v = v * 10 + (*p++ - '0');
                }
                int64_t unit;
                if (strncmp(p, "ms", 2) == 0) {
                        unit = SP_USEC_PER_MSEC;
                        p += 2;
                } else if (strncmp(p, "us", 2) == 0) {
                        unit = 1;
                        p += 2;
                } else if (*p == 's') {
                        unit = SP_USEC_PER_SEC;
                        p++;
                } else if (*p == 'm') {
                        unit = 60 * SP_USEC_PER_SEC;
                        p++;
                } else if (*p == 'h') {
                        unit = 3600 * SP_USEC_PER_SEC;
                        p++;
                } else if (*p == 'd') {
                        unit = 86400 * SP_USEC_PER_SEC;
                        p++;
                } else if (*p == '\0' && !any_unit && p != s) {
                        unit = SP_USEC_PER_SEC; /* bare number: seconds */
                } else {
                        return sp_error_set(err, SP_E_INVALID,
                                            "invalid duration '%s' (use e.g. 250ms, 30s, 5m, 6h, 2d)", s);
                }
                any_unit = true;
                if (v > (INT64_MAX - total) / unit)
                        return sp_error_set(err, SP_E_INVALID, "duration '%s' too large", s);
                total += v * unit;
        }
        *ret_us = total;
        return 0;
}

void sp_duration_format(int64_t us, char out[static 32])
{
        if (us <= 0) {
                snprintf(out, 32, "0s");
                return;
        }
        if (us % SP_USEC_PER_SEC) {
                if (us % SP_USEC_PER_MSEC)
                        snprintf(out, 32, "%lldus", (long long)us);
                else
                        snprintf(out, 32, "%lldms", (long long)(us / SP_USEC_PER_MSEC));
                return;
        }
        int64_t s = us / SP_USEC_PER_SEC;
        size_t n = 0;
        static const struct {
                int64_t secs;
                char c;
        } units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
        for (size_t i = 0; i < 4; i++)
                if (s >= units[i].secs) {
                        n += (size_t)snprintf(out + n, 32 - n, "%lld%c", (long long)(s / units[i].secs), units[i].c);
                        s %= units[i].secs;
                }
}
