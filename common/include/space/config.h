/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Configuration: one table per daemon defines every setting with its type,
 * default and description — the one place defaults are documented
 * (`<daemon> --help` and `--print-config-doc` print it). Values are applied in
 * order, later wins:
 *
 *   1. the defaults in the table;
 *   2. a configuration file (`--config FILE` or $<PREFIX>_CONFIG), lines of
 *      `key = value`, `#` comments, values optionally in double quotes with
 *      \" \\ \n \t escapes;
 *   3. environment variables $<PREFIX>_<KEY> (key upper-cased, '-' → '_');
 *   4. command-line flags `--key=value` or `--key value` (`--flag` alone sets a
 *      bool to true, `--no-flag` to false).
 *
 * Values land in the caller's struct at the given offsets: strings as
 * malloc'd char* (freed by sp_config_free), ints and sizes as int64_t,
 * durations as int64_t microseconds, bools as bool, lists as a malloc'd
 * NULL-terminated char** (NULL while empty; freed by sp_config_free).
 * A list setting is repeatable: every occurrence — a default, a file line,
 * the environment variable, each flag — adds one value to it, in that order. Unknown keys, malformed
 * values and out-of-range numbers are errors that name the key and source
 * ("config.conf:12: key 'listen': ...").
 */
#ifndef SPACE_CONFIG_H
#define SPACE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "space/error.h"

typedef enum sp_config_type {
        SP_CONFIG_STRING,
        SP_CONFIG_INT, /* decimal integer within [min, max] */
        SP_CONFIG_BOOL, /* true/false/yes/no/on/off/1/0 */
        SP_CONFIG_DURATION, /* sp_duration_parse(): 30s, 5m, 6h ... within [min, max] µs */
        SP_CONFIG_SIZE, /* bytes with optional K/M/G/T suffix (powers of 1024) within [min, max] */
        SP_CONFIG_LIST, /* repeatable string: each occurrence adds one; at most max values (0: 64) */
} sp_config_type;

typedef struct sp_config_def {
        const char *key; /* lower-case, [a-z0-9-]; also the flag name */
        sp_config_type type;
        const char *def; /* default as text (NULL: unset string / zero) */
        size_t offset; /* offsetof(struct, field) */
        int64_t min, max;
        const char *help;
} sp_config_def;

#define SP_CONFIG_END \
        { \
                NULL, 0, NULL, 0, 0, 0, NULL \
        }

/* Limits on what a configuration file may hold. */
#define SP_CONFIG_MAX_FILE (1024 * 1024)
#define SP_CONFIG_MAX_VALUE 4096
#define SP_CONFIG_LIST_DEFAULT_MAX 64

/* Applies defaults, file, environment and flags (argv[1..argc-1]) to cfg.
 * env_prefix is e.g. "SPACE_WORKER". Positional arguments and anything after
 * "--" are left: *ret_argind is the index of the first one. Returns 1 (not an
 * error) if --help or --print-config-doc was handled and printed to out. */
int sp_config_load(const sp_config_def *defs, void *cfg, const char *env_prefix, int argc, char **argv, int *ret_argind,
                   FILE *out, sp_error **err);

/* Applies defaults only. */
int sp_config_defaults(const sp_config_def *defs, void *cfg, sp_error **err);
/* Parses configuration file text (for files and the fuzz target); source names it in errors. */
int sp_config_parse_text(const sp_config_def *defs, void *cfg, const char *text, size_t len, const char *source,
                         sp_error **err);
/* Sets one key from text. */
int sp_config_set(const sp_config_def *defs, void *cfg, const char *key, const char *value, sp_error **err);
/* Prints the table as aligned text (--help) or Markdown (docs). */
void sp_config_print_help(const sp_config_def *defs, const char *env_prefix, FILE *out);
void sp_config_print_markdown(const sp_config_def *defs, const char *env_prefix, FILE *out);
/* Frees the strings held in cfg. */
void sp_config_free(const sp_config_def *defs, void *cfg);

/* Parses "512M", "10G", "4096" into bytes. */
int sp_size_parse(const char *s, int64_t *ret, sp_error **err);

#endif
