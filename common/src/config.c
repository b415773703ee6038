/* SPDX-License-Identifier: Apache-2.0 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/fileio.h"
#include "space/time.h"

static const sp_config_def *find(const sp_config_def *defs, const char *key, size_t n)
{
        for (const sp_config_def *d = defs; d->key; d++)
                if (strlen(d->key) == n && strncmp(d->key, key, n) == 0)
                        return d;
        return NULL;
}

int sp_size_parse(const char *s, int64_t *ret, sp_error **err)
{
        if (!s || !isdigit((unsigned char)*s))
                return sp_error_set(err, SP_E_INVALID, "invalid size '%s'", s ? s : "");
        int64_t v = 0;
        const char *p = s;
        while (isdigit((unsigned char)*p)) {
                if (v > INT64_MAX / 10 - 10)
                        return sp_error_set(err, SP_E_INVALID, "size '%s' too large", s);
                v = v * 10 + (*p++ - '0');
        }
        int shift = 0;
        switch (toupper((unsigned char)*p)) {
        case '\0':
                break;
        case 'K':
                shift = 10;
                break;
        case 'M':
                shift = 20;
                break;
        case 'G':
                shift = 30;
                break;
        case 'T':
                shift = 40;
                break;
        default:
                return sp_error_set(err, SP_E_INVALID, "invalid size '%s' (use e.g. 4096, 512M, 10G)", s);
        }
        if (*p) {
                p++;
                /* accept K, KB, KiB */
                if (strcasecmp(p, "b") == 0 || strcasecmp(p, "ib") == 0)
                        p += strlen(p);
                if (*p)
                        return sp_error_set(err, SP_E_INVALID, "invalid size '%s' (use e.g. 4096, 512M, 10G)", s);
        }
        if (shift && v > (INT64_MAX >> shift))
                return sp_error_set(err, SP_E_INVALID, "size '%s' too large", s);
        *ret = v << shift;
        return 0;
}

static int parse_bool(const char *s, bool *ret)
{
        static const char *const yes[] = {"true", "yes", "on", "1"}, *const no[] = {"false", "no", "off", "0"};
        for (size_t i = 0; i < 4; i++) {
                if (strcasecmp(s, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
                if (strcasecmp(s, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        }
        return -1;
}

/* Adds value to the list at slot (a NULL-terminated vector, NULL when empty). */
static int list_add(const sp_config_def *d, char ***slot, const char *value, sp_error **err)
{
        size_t n = 0;
        while (*slot && (*slot)[n])
                n++;
        size_t max = d->max > 0 ? (size_t)d->max : SP_CONFIG_LIST_DEFAULT_MAX;
        if (n >= max)
                return sp_error_set(err, SP_E_INVALID, "key '%s': more than %zu values", d->key, max);
        char *copy = strdup(value);
        char **v = copy ? realloc(*slot, (n + 2) * sizeof(char *)) : NULL;
        if (!v) {
                free(copy);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        v[n] = copy;
        v[n + 1] = NULL;
        *slot = v;
        return 0;
}

static void list_free(char ***slot)
{
        for (char **i = *slot; i && *i; i++)
                free(*i);
        free(*slot);
        *slot = NULL;
}

static int apply(const sp_config_def *d, void *cfg, const char *value, sp_error **err)
{
        char *base = cfg;
        int64_t n = 0;
        switch (d->type) {
        case SP_CONFIG_STRING: {
                if (strlen(value) > SP_CONFIG_MAX_VALUE)
                        return sp_error_set(err, SP_E_INVALID, "key '%s': value longer than %d bytes", d->key,
                                            SP_CONFIG_MAX_VALUE);
                char *copy = strdup(value);
                if (!copy)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                char **slot = (char **)(base + d->offset);
                free(*slot);
                *slot = copy;
                return 0;
        }
        case SP_CONFIG_LIST:
                if (strlen(value) > SP_CONFIG_MAX_VALUE)
                        return sp_error_set(err, SP_E_INVALID, "key '%s': value longer than %d bytes", d->key,
                                            SP_CONFIG_MAX_VALUE);
                return list_add(d, (char ***)(base + d->offset), value, err);
        case SP_CONFIG_BOOL: {
                bool b;
                if (parse_bool(value, &b) < 0)
                        return sp_error_set(err, SP_E_INVALID, "key '%s': '%.64s' is not a boolean (true/false)",
                                            d->key, value);
                *(bool *)(base + d->offset) = b;
                return 0;
        }
        case SP_CONFIG_INT: {
                char *end = NULL;
                errno = 0;
                long long v = strtoll(value, &end, 10);
                if (!*value || *end || errno == ERANGE || isspace((unsigned char)*value))
                        return sp_error_set(err, SP_E_INVALID, "key '%s': '%.64s' is not an integer", d->key, value);
                n = v;
                break;
        }
        case SP_CONFIG_DURATION:
                if (sp_duration_parse(value, &n, err) < 0)
                        return sp_error_wrap(err, "key '%s'", d->key);
                break;
        case SP_CONFIG_SIZE:
                if (sp_size_parse(value, &n, err) < 0)
                        return sp_error_wrap(err, "key '%s'", d->key);
                break;
        default:
                return sp_error_set(err, SP_E_INTERNAL, "key '%s': bad type", d->key);
        }
        if ((d->min || d->max) && (n < d->min || n > d->max))
                return sp_error_set(err, SP_E_INVALID, "key '%s': %lld is out of range [%lld, %lld]", d->key,
                                    (long long)n, (long long)d->min, (long long)d->max);
        *(int64_t *)(base + d->offset) = n;
        return 0;
}

int sp_config_set(const sp_config_def *defs, void *cfg, const char *key, const char *value, sp_error **err)
{
        const sp_config_def *d = find(defs, key, strlen(key));
        if (!d)
                return sp_error_set(err, SP_E_INVALID, "unknown key '%.64s'", key);
        return apply(d, cfg, value, err);
}

int sp_config_defaults(const sp_config_def *defs, void *cfg, sp_error **err)
{
        for (const sp_config_def *d = defs; d->key; d++) {
                if (d->type == SP_CONFIG_LIST)
                        list_free((char ***)((char *)cfg + d->offset));
                if (d->def) {
                        if (apply(d, cfg, d->def, err) < 0)
                                return sp_error_wrap(err, "default");
                } else if (d->type == SP_CONFIG_STRING) {
                        char **slot = (char **)((char *)cfg + d->offset);
                        free(*slot);
                        *slot = NULL;
                } else if (d->type == SP_CONFIG_BOOL) {
                        *(bool *)((char *)cfg + d->offset) = false;
                } else if (d->type != SP_CONFIG_LIST) {
                        *(int64_t *)((char *)cfg + d->offset) = 0;
                }
        }
        return 0;
}

/* Unquotes a value in place: "..." with \" \\ \n \t escapes, or bare text
 * with trailing whitespace removed. */
static int unquote(char *v, sp_error **err)
{
        if (*v != '"') {
                size_t n = strlen(v);
                while (n && isspace((unsigned char)v[n - 1]))
                        v[--n] = '\0';
                return 0;
        }
        char *o = v;
        const char *p = v + 1;
        for (;;) {
                if (*p == '\0')
                        return sp_error_set(err, SP_E_INVALID, "unterminated quoted value");
                if (*p == '"')
                        break;
                if (*p == '\\') {
                        p++;
                        switch (*p) {
                        case '"':
                        case '\\':
                                *o++ = *p;
                                break;
                        case 'n':
                                *o++ = '\n';
                                break;
                        case 't':
                                *o++ = '\t';
                                break;
                        default:
                                return sp_error_set(err, SP_E_INVALID, "invalid escape in quoted value");
                        }
                        p++;
                        continue;
                }
                *o++ = *p++;
        }
        p++;
        while (isspace((unsigned char)*p))
                p++;
        if (*p && *p != '#')
                return sp_error_set(err, SP_E_INVALID, "text after quoted value");
        *o = '\0';
        return 0;
}

int sp_config_parse_text(const sp_config_def *defs, void *cfg, const char *text, size_t len, const char *source,
                         sp_error **err)
{
        if (len > SP_CONFIG_MAX_FILE)
                return sp_error_set(err, SP_E_TOO_LARGE, "%s: larger than %d bytes", source, SP_CONFIG_MAX_FILE);
        if (memchr(text, '\0', len))
                return sp_error_set(err, SP_E_INVALID, "%s: contains a NUL byte", source);
        size_t lineno = 0;
        const char *p = text, *end = text + len;
        while (p < end) {
                lineno++;
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
                if (n > SP_CONFIG_MAX_VALUE + 256)
                        return sp_error_set(err, SP_E_INVALID, "%s:%zu: line too long", source, lineno);
                char line[SP_CONFIG_MAX_VALUE + 257];
                memcpy(line, p, n);
                line[n] = '\0';
                if (n && line[n - 1] == '\r')
                        line[--n] = '\0';
                p = nl ? nl + 1 : end;

                char *s = line;
                while (isspace((unsigned char)*s))
                        s++;
                if (*s == '\0' || *s == '#')
                        continue;
                char *eq = strchr(s, '=');
                if (!eq)
                        return sp_error_set(err, SP_E_INVALID, "%s:%zu: expected 'key = value'", source, lineno);
                char *k_end = eq;
                while (k_end > s && isspace((unsigned char)k_end[-1]))
                        k_end--;
                char *v = eq + 1;
                while (isspace((unsigned char)*v))
                        v++;
                if (*v != '"') {
                        /* strip a trailing comment from a bare value */
                        char *hash = strstr(v, " #");
                        if (hash)
                                *hash = '\0';
                }
                const sp_config_def *d = find(defs, s, (size_t)(k_end - s));
                if (!d)
                        return sp_error_set(err, SP_E_INVALID, "%s:%zu: unknown key '%.*s'", source, lineno,
                                            (int)((k_end - s) > 64 ? 64 : (k_end - s)), s);
                if (unquote(v, err) < 0 || apply(d, cfg, v, err) < 0)
                        return sp_error_wrap(err, "%s:%zu", source, lineno);
        }
        return 0;
}

static void env_name(const char *prefix, const char *key, char *out, size_t outlen)
{
        snprintf(out, outlen, "%s_%s", prefix, key);
        for (char *c = out; *c; c++)
                *c = *c == '-' ? '_' : (char)toupper((unsigned char)*c);
}

int sp_config_load(const sp_config_def *defs, void *cfg, const char *env_prefix, int argc, char **argv, int *ret_argind,
                   FILE *out, sp_error **err)
{
        if (sp_config_defaults(defs, cfg, err) < 0)
                return -SP_E_INTERNAL;

        /* Find --config (and --help) first, so the file is applied before flags. */
        const char *file = NULL;
        char envbuf[256];
        env_name(env_prefix, "config", envbuf, sizeof(envbuf));
        file = getenv(envbuf);
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--") == 0)
                        break;
                if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                        sp_config_print_help(defs, env_prefix, out ? out : stdout);
                        return 1;
                }
                if (strcmp(argv[i], "--print-config-doc") == 0) {
                        sp_config_print_markdown(defs, env_prefix, out ? out : stdout);
                        return 1;
                }
                if (strcmp(argv[i], "--config") == 0) {
                        if (i + 1 >= argc)
                                return sp_error_set(err, SP_E_INVALID, "--config needs a file");
                        file = argv[i + 1];
                } else if (strncmp(argv[i], "--config=", 9) == 0) {
                        file = argv[i] + 9;
                }
        }
        if (file && *file) {
                _cleanup_buf_ sp_buf text = SP_BUF_INIT;
                if (sp_file_read(file, SP_CONFIG_MAX_FILE, &text, err) < 0)
                        return sp_error_wrap(err, "config file");
                if (sp_config_parse_text(defs, cfg, text.data ? text.data : "", text.len, file, err) < 0)
                        return -SP_E_INVALID;
        }

        for (const sp_config_def *d = defs; d->key; d++) {
                env_name(env_prefix, d->key, envbuf, sizeof(envbuf));
                const char *v = getenv(envbuf);
                if (v && apply(d, cfg, v, err) < 0)
                        return sp_error_wrap(err, "environment %s", envbuf);
        }

        int i = 1;
        for (; i < argc; i++) {
                const char *a = argv[i];
                if (strcmp(a, "--") == 0) {
                        i++;
                        break;
                }
                if (strncmp(a, "--", 2) != 0 || a[2] == '\0')
                        break; /* first positional argument */
                const char *key = a + 2;
                const char *eq = strchr(key, '=');
                size_t klen = eq ? (size_t)(eq - key) : strlen(key);
                if (klen == 6 && strncmp(key, "config", 6) == 0) {
                        if (!eq)
                                i++;
                        continue;
                }
                const sp_config_def *d = find(defs, key, klen);
                if (!d && !eq && strncmp(key, "no-", 3) == 0) {
                        d = find(defs, key + 3, klen - 3);
                        if (d && d->type == SP_CONFIG_BOOL) {
                                *(bool *)((char *)cfg + d->offset) = false;
                                continue;
                        }
                        d = NULL;
                }
                if (!d)
                        return sp_error_set(err, SP_E_INVALID, "unknown flag '--%.*s' (see --help)",
                                            (int)(klen > 64 ? 64 : klen), key);
                const char *value;
                if (eq)
                        value = eq + 1;
                else if (d->type == SP_CONFIG_BOOL)
                        value = "true";
                else if (i + 1 < argc)
                        value = argv[++i];
                else
                        return sp_error_set(err, SP_E_INVALID, "flag '--%s' needs a value", d->key);
                if (apply(d, cfg, value, err) < 0)
                        return sp_error_wrap(err, "flag --%s", d->key);
        }
        if (ret_argind)
                *ret_argind = i;
        return 0;
}

static const char *type_name(sp_config_type t)
{
        static const char *const names[] = {"string", "int", "bool", "duration", "size", "list"};
        return t <= SP_CONFIG_LIST ? names[t] : "?";
}

void sp_config_print_help(const sp_config_def *defs, const char *env_prefix, FILE *out)
{
        fprintf(out, "Settings (flag --KEY, environment %s_KEY, or 'key = value' in --config FILE):\n", env_prefix);
        for (const sp_config_def *d = defs; d->key; d++) {
                char env[256];
                env_name(env_prefix, d->key, env, sizeof(env));
                fprintf(out, "  --%-24s %-8s %s\n", d->key, type_name(d->type), d->help ? d->help : "");
                fprintf(out, "  %-26s %-8s default: %s; env %s\n", "", "", d->def ? d->def : "(unset)", env);
        }
}

void sp_config_print_markdown(const sp_config_def *defs, const char *env_prefix, FILE *out)
{
        fprintf(out, "| key / flag | environment | type | default | meaning |\n|---|---|---|---|---|\n");
        for (const sp_config_def *d = defs; d->key; d++) {
                char env[256];
                env_name(env_prefix, d->key, env, sizeof(env));
                fprintf(out, "| `--%s` | `%s` | %s | %s%s%s | %s |\n", d->key, env, type_name(d->type),
                        d->def ? "`" : "", d->def ? d->def : "(unset)", d->def ? "`" : "", d->help ? d->help : "");
        }
}

void sp_config_free(const sp_config_def *defs, void *cfg)
{
        for (const sp_config_def *d = defs; d->key; d++)
                if (d->type == SP_CONFIG_STRING) {
                        char **slot = (char **)((char *)cfg + d->offset);
                        free(*slot);
                        *slot = NULL;
                } else if (d->type == SP_CONFIG_LIST) {
                        list_free((char ***)((char *)cfg + d->offset));
                }
}
