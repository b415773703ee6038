/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Parsers of cgroup control files and the conversions between the API's
 * units and the kernel's.
 */
#include <limits.h>
#include <string.h>

#include "cgroup/cgroup_internal.h"

static bool is_space(char c)
{
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parses exactly len bytes of decimal digits (no sign) into *ret. */
static int parse_digits(const char *s, size_t len, uint64_t *ret)
{
        if (len == 0 || len > 20)
                return -1;
        uint64_t v = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -1;
                unsigned d = (unsigned)(s[i] - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -1;
                v = v * 10 + d;
        }
        *ret = v;
        return 0;
}

int wk__cg_parse_u64(const char *text, size_t len, uint64_t *ret)
{
        size_t b = 0, e = len;
        while (b < e && is_space(text[b]))
                b++;
        while (e > b && is_space(text[e - 1]))
                e--;
        if ((e - b == 3 && memcmp(text + b, "max", 3) == 0) || (e - b == 2 && memcmp(text + b, "-1", 2) == 0)) {
                *ret = UINT64_MAX;
                return 0;
        }
        return parse_digits(text + b, e - b, ret);
}

int wk__cg_parse_keyed(const char *text, size_t len, const char *key, uint64_t *ret)
{
        size_t klen = strlen(key);
        for (size_t pos = 0; pos < len;) {
                const char *nl = memchr(text + pos, '\n', len - pos);
                size_t end = nl ? (size_t)(nl - text) : len;
                const char *line = text + pos;
                size_t l = end - pos;
                if (l > klen && memcmp(line, key, klen) == 0 && (line[klen] == ' ' || line[klen] == '\t'))
                        return wk__cg_parse_u64(line + klen, l - klen, ret) < 0 ? -1 : 1;
                pos = end + 1;
        }
        return 0;
}

int wk__cg_parse_pids(const char *text, size_t len, int (*fn)(pid_t pid, void *userdata), void *userdata)
{
        for (size_t pos = 0; pos < len;) {
                const char *nl = memchr(text + pos, '\n', len - pos);
                size_t end = nl ? (size_t)(nl - text) : len;
                if (end > pos) {
                        uint64_t v;
                        if (parse_digits(text + pos, end - pos, &v) < 0 || v == 0 || v > INT_MAX)
                                return -1;
                        int r = fn((pid_t)v, userdata);
                        if (r < 0)
                                return r;
                }
                pos = end + 1;
        }
        return 0;
}

static const struct {
        const char *v1;
        const char *v2;
        unsigned bit;
} controllers[] = {
        {"cpu", "cpu", WK_CGROUP_CPU},          {"cpuacct", NULL, WK_CGROUP_CPUACCT},
        {"memory", "memory", WK_CGROUP_MEMORY}, {"pids", "pids", WK_CGROUP_PIDS},
        {"freezer", NULL, WK_CGROUP_FREEZER},   {"blkio", "io", WK_CGROUP_IO},
        {"devices", NULL, WK_CGROUP_DEVICES},
};

const char *wk__cg_controller_name(wk_cgroup_version v, unsigned controller)
{
        for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]); i++)
                if (controllers[i].bit == controller)
                        return v == WK_CGROUP_V1 ? controllers[i].v1 : controllers[i].v2;
        return NULL;
}

/* The controllers named in a list of words separated by any of seps. */
static unsigned parse_words(const char *text, size_t len, const char *seps, bool v1)
{
        unsigned mask = 0;
        for (size_t pos = 0; pos < len;) {
                size_t end = pos;
                while (end < len && !strchr(seps, text[end]) && text[end] != '\0')
                        end++;
                for (size_t i = 0; i < sizeof(controllers) / sizeof(controllers[0]); i++) {
                        const char *name = v1 ? controllers[i].v1 : controllers[i].v2;
                        if (name && strlen(name) == end - pos && memcmp(text + pos, name, end - pos) == 0)
                                mask |= controllers[i].bit;
                }
                pos = end + 1;
        }
        return mask;
}

unsigned wk__cg_parse_v1_options(const char *options)
{
        return parse_words(options, strlen(options), ",", true);
}

unsigned wk__cg_parse_v2_controllers(const char *text, size_t len)
{
        return parse_words(text, len, " \t\n", false);
}

uint64_t wk__cg_cpu_quota_us(uint32_t millicores)
{
        return millicores ? (uint64_t)millicores * WK__CG_CPU_PERIOD_US / 1000 : 0;
}

uint64_t wk__cg_cpu_shares(uint32_t millicores)
{
        if (millicores == 0)
                return 1024;
        uint64_t s = (uint64_t)millicores * 1024 / 1000;
        return s < 2 ? 2 : s > 262144 ? 262144 : s;
}

uint64_t wk__cg_cpu_weight(uint32_t millicores)
{
        /* The mapping Kubernetes and systemd use between v1 shares and v2 weights. */
        return 1 + ((wk__cg_cpu_shares(millicores) - 2) * 9999) / 262142;
}

uint64_t wk__cg_io_weight_v1(uint32_t weight)
{
        if (weight == 0)
                weight = 100;
        return 10 + ((uint64_t)weight - 1) * 990 / 9999;
}

uint64_t wk__cg_io_weight_bfq(uint32_t weight)
{
        if (weight == 0)
                weight = 100;
        return 1 + ((uint64_t)weight - 1) * 999 / 9999;
}

int wk__cg_limits_validate(const wk_cgroup_limits *l, sp_error **err)
{
        if (l->cpu_millicores &&
            (l->cpu_millicores < WK_CGROUP_CPU_MIN_MILLICORES || l->cpu_millicores > WK_CGROUP_CPU_MAX_MILLICORES))
                return sp_error_set(err, SP_E_INVALID, "cpu limit %u millicores outside [%u, %u]", l->cpu_millicores,
                                    WK_CGROUP_CPU_MIN_MILLICORES, WK_CGROUP_CPU_MAX_MILLICORES);
        if (l->memory_bytes && (l->memory_bytes < WK_CGROUP_MEMORY_MIN || l->memory_bytes > WK_CGROUP_MEMORY_MAX))
                return sp_error_set(err, SP_E_INVALID, "memory limit %llu bytes outside [%llu, %llu]",
                                    (unsigned long long)l->memory_bytes, (unsigned long long)WK_CGROUP_MEMORY_MIN,
                                    (unsigned long long)WK_CGROUP_MEMORY_MAX);
        if (l->pids_max > WK_CGROUP_PIDS_MAX)
                return sp_error_set(err, SP_E_INVALID, "pids limit %u above %u", l->pids_max, WK_CGROUP_PIDS_MAX);
        if (l->io_weight > WK_CGROUP_IO_WEIGHT_MAX)
                return sp_error_set(err, SP_E_INVALID, "io weight %u above %u", l->io_weight, WK_CGROUP_IO_WEIGHT_MAX);
        if (l->n_io > WK_CGROUP_IO_DEVICES_MAX || (l->n_io && !l->io))
                return sp_error_set(err, SP_E_INVALID, "at most %d io device limits", WK_CGROUP_IO_DEVICES_MAX);
        for (size_t i = 0; i < l->n_io; i++) {
                /* The kernel's device numbers: 12-bit major, 20-bit minor. */
                if (l->io[i].major > 4095 || l->io[i].minor > 1048575)
                        return sp_error_set(err, SP_E_INVALID, "io limit %zu: bad device %u:%u", i, l->io[i].major,
                                            l->io[i].minor);
        }
        return 0;
}
