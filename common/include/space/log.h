/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Structured logging.
 *
 * A record has a level, a message, the component (set once by the daemon's
 * main) and optional key/value fields. On a terminal it prints as
 *   2026-11-30T18:00:00.123Z INFO  worker: sandbox created sandbox_id=sbx_...
 * and otherwise as one JSON object per line:
 *   {"ts":"...","level":"info","component":"worker","msg":"sandbox created","sandbox_id":"sbx_..."}
 *
 * Fields are passed as a NULL-terminated list of key, value string pairs:
 *   sp_log_info_kv(SP_KV("sandbox_id", id, "request_id", rid), "created %s", name);
 * Formatting is skipped below the configured level. Library code logs at debug
 * only; daemons log once, at the top, with context. Thread-safe: one write(2)
 * per record.
 */
#ifndef SPACE_LOG_H
#define SPACE_LOG_H

#include <stdbool.h>

typedef enum sp_log_level {
        SP_LOG_DEBUG = 0,
        SP_LOG_INFO,
        SP_LOG_WARN,
        SP_LOG_ERROR,
        SP_LOG_OFF,
} sp_log_level;

typedef enum sp_log_format {
        SP_LOG_FORMAT_AUTO = 0, /* text on a terminal, JSON otherwise */
        SP_LOG_FORMAT_TEXT,
        SP_LOG_FORMAT_JSON,
} sp_log_format;

/* Process-wide settings; call before starting threads. component is copied. */
void sp_log_init(const char *component, sp_log_level level, sp_log_format format);
/* Redirects records to fd (default 2). */
void sp_log_set_fd(int fd);
void sp_log_set_level(sp_log_level level);
sp_log_level sp_log_get_level(void);
/* Parses "debug", "info", "warn", "error", "off"; returns -1 if unknown. */
int sp_log_level_parse(const char *s, sp_log_level *ret);
int sp_log_format_parse(const char *s, sp_log_format *ret);

static inline bool sp_log_enabled(sp_log_level level)
{
        return level >= sp_log_get_level();
}

void sp_log_emit(sp_log_level level, const char *const *kv, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Builds a NULL-terminated key/value list in place. */
#define SP_KV(...) ((const char *const[]){__VA_ARGS__, NULL})

#define sp_log_kv(level, kv, ...) \
        do { \
                if (sp_log_enabled(level)) \
                        sp_log_emit((level), (kv), __VA_ARGS__); \
        } while (0)

#define sp_log_debug(...) sp_log_kv(SP_LOG_DEBUG, NULL, __VA_ARGS__)
#define sp_log_info(...) sp_log_kv(SP_LOG_INFO, NULL, __VA_ARGS__)
#define sp_log_warn(...) sp_log_kv(SP_LOG_WARN, NULL, __VA_ARGS__)
#define sp_log_error(...) sp_log_kv(SP_LOG_ERROR, NULL, __VA_ARGS__)
#define sp_log_debug_kv(kv, ...) sp_log_kv(SP_LOG_DEBUG, kv, __VA_ARGS__)
#define sp_log_info_kv(kv, ...) sp_log_kv(SP_LOG_INFO, kv, __VA_ARGS__)
#define sp_log_warn_kv(kv, ...) sp_log_kv(SP_LOG_WARN, kv, __VA_ARGS__)
#define sp_log_error_kv(kv, ...) sp_log_kv(SP_LOG_ERROR, kv, __VA_ARGS__)

#endif
