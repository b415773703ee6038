/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "space/log.h"

static _Atomic int log_level = SP_LOG_INFO;
static int log_fd = 2;
static sp_log_format log_format = SP_LOG_FORMAT_AUTO;
static char log_component[32] = "space";

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void sp_log_init(const char *component, sp_log_level level, sp_log_format format)
{
        if (component)
                snprintf(log_component, sizeof(log_component), "%s", component);
        log_level = level;
        log_format = format;
}

void sp_log_set_fd(int fd)
{
        log_fd = fd;
}
void sp_log_set_level(sp_log_level level)
{
        log_level = level;
}
sp_log_level sp_log_get_level(void)
{
        return (sp_log_level)log_level;
}

int sp_log_level_parse(const char *s, sp_log_level *ret)
{
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
                if (s && strcasecmp(s, level_names[i]) == 0) {
                        *ret = (sp_log_level)i;
                        return 0;
                }
        if (s && strcasecmp(s, "warning") == 0) {
                *ret = SP_LOG_WARN;
                return 0;
        }
        return -1;
}

int sp_log_format_parse(const char *s, sp_log_format *ret)
{
        static const char *const names[] = {"auto", "text", "json"};
        for (size_t i = 0; i < 3; i++)
                if (s && strcasecmp(s, names[i]) == 0) {
                        *ret = (sp_log_format)i;
                        return 0;
                }
        return -1;
}

/* A fixed record buffer: records longer than this are truncated, never split. */
typedef struct {
        char data[8192];
        size_t len;
} rec;

static void put(rec *r, const char *s, size_t n)
{
        size_t room = sizeof(r->data) - 2 - r->len; /* keep space for "\n" */
        if (n > room)
                n = room;
        memcpy(r->data + r->len, s, n);
        r->len += n;
}

static void puts_(rec *r, const char *s)
{
        put(r, s, strlen(s));
}

static void put_json_string(rec *r, const char *s)
{
        put(r, "\"", 1);
        for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
                char esc[8];
                if (*p == '"' || *p == '\\') {
                        esc[0] = '\\';
                        esc[1] = (char)*p;
                        put(r, esc, 2);
                } else if (*p < 0x20 || *p == 0x7f) {
                        snprintf(esc, sizeof(esc), "\\u%04x", *p);
                        put(r, esc, 6);
                } else {
                        put(r, (const char *)p, 1);
                }
        }
        put(r, "\"", 1);
}

static void put_text_value(rec *r, const char *s)
{
        bool quote = !*s || strpbrk(s, " \t\"=\n") != NULL;
        if (!quote) {
                puts_(r, s);
                return;
        }
        put_json_string(r, s);
}

void sp_log_emit(sp_log_level level, const char *const *kv, const char *fmt, ...)
{
        if (level < sp_log_get_level() || level >= SP_LOG_OFF)
                return;

        char msg[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);

        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char stamp[40];
        size_t sl = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(stamp + sl, sizeof(stamp) - sl, ".%03ldZ", ts.tv_nsec / 1000000);

        bool json = log_format == SP_LOG_FORMAT_JSON || (log_format == SP_LOG_FORMAT_AUTO && !isatty(log_fd));
        rec r = {.len = 0};
        if (json) {
                puts_(&r, "{\"ts\":\"");
                puts_(&r, stamp);
                puts_(&r, "\",\"level\":\"");
                puts_(&r, level_names[level]);
                puts_(&r, "\",\"component\":");
                put_json_string(&r, log_component);
                puts_(&r, ",\"msg\":");
                put_json_string(&r, msg);
                for (size_t i = 0; kv && kv[i] && kv[i + 1]; i += 2) {
                        puts_(&r, ",");
                        put_json_string(&r, kv[i]);
                        puts_(&r, ":");
                        put_json_string(&r, kv[i + 1]);
                }
                puts_(&r, "}");
        } else {
                static const char *const upper[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};
                puts_(&r, stamp);
                puts_(&r, " ");
                puts_(&r, upper[level]);
                puts_(&r, " ");
                puts_(&r, log_component);
                puts_(&r, ": ");
                puts_(&r, msg);
                for (size_t i = 0; kv && kv[i] && kv[i + 1]; i += 2) {
                        puts_(&r, " ");
                        puts_(&r, kv[i]);
                        puts_(&r, "=");
                        put_text_value(&r, kv[i + 1]);
                }
        }
        r.data[r.len++] = '\n';
        /* One write per record keeps lines whole across threads and processes. */
        ssize_t w = write(log_fd, r.data, r.len);
        (void)w;
}
