/* SPDX-License-Identifier: Apache-2.0 */
/* Query parameters and bodies of the data plane's routes. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "route/request.h"
#include "space/cleanup.h"
#include "space/json.h"

int dp_request_check_query(const sp_http_parser *p, const char *const *allowed, sp_error **err)
{
        size_t n = sp_http_parser_query_count(p);
        for (size_t i = 0; i < n; i++) {
                const char *name, *value;
                if (!sp_http_parser_query_at(p, i, &name, &value))
                        continue;
                bool known = false;
                for (const char *const *a = allowed; *a && !known; a++)
                        known = strcmp(*a, name) == 0;
                if (!known)
                        return sp_error_set(err, SP_E_INVALID, "unknown query parameter '%.64s'", name);
                for (size_t j = 0; j < i; j++) {
                        const char *other, *v;
                        if (sp_http_parser_query_at(p, j, &other, &v) && strcmp(other, name) == 0)
                                return sp_error_set(err, SP_E_INVALID, "query parameter '%.64s' is given twice", name);
                }
        }
        return 0;
}

/* A decimal number of at most 19 digits, no sign, no spaces, at most max. */
static bool parse_u64(const char *s, uint64_t max, uint64_t *ret)
{
        size_t n = strlen(s);
        if (n == 0 || n > 19 || strspn(s, "0123456789") != n)
                return false;
        uint64_t v = 0;
        for (size_t i = 0; i < n; i++)
                v = v * 10 + (uint64_t)(s[i] - '0');
        if (v > max)
                return false;
        *ret = v;
        return true;
}

static int parse_bool(const char *name, const char *s, bool *ret, sp_error **err)
{
        if (strcmp(s, "true") == 0)
                *ret = true;
        else if (strcmp(s, "false") == 0)
                *ret = false;
        else
                return sp_error_set(err, SP_E_INVALID, "query parameter '%s' must be true or false", name);
        return 0;
}

int dp_request_attach(const sp_http_parser *p, bool *ret_given, uint64_t *ret_offset, bool *ret_raw, sp_error **err)
{
        static const char *const allowed[] = {"token", "offset", "format", NULL};
        int r = dp_request_check_query(p, allowed, err);
        if (r < 0)
                return r;
        const char *format = sp_http_parser_query(p, "format");
        if (format && strcmp(format, "raw") != 0 && strcmp(format, "sse") != 0)
                return sp_error_set(err, SP_E_INVALID, "query parameter 'format' must be sse or raw");
        const char *header = sp_http_parser_header(p, "Last-Event-ID");
        const char *query = sp_http_parser_query(p, "offset");
        uint64_t off = 0;
        if (header && !parse_u64(header, DP_OFFSET_MAX, &off))
                return sp_error_set(err, SP_E_INVALID, "Last-Event-ID must be a byte offset (a decimal number)");
        if (!header && query && !parse_u64(query, DP_OFFSET_MAX, &off))
                return sp_error_set(err, SP_E_INVALID,
                                    "query parameter 'offset' must be a byte offset (a decimal number)");
        *ret_given = header || query;
        *ret_offset = off;
        *ret_raw = format && strcmp(format, "raw") == 0;
        return 0;
}

int dp_request_stdin(const sp_http_parser *p, bool *ret_close, sp_error **err)
{
        static const char *const allowed[] = {"token", "close", NULL};
        int r = dp_request_check_query(p, allowed, err);
        if (r < 0)
                return r;
        const char *close = sp_http_parser_query(p, "close");
        bool v = false;
        if (close && (r = parse_bool("close", close, &v, err)) < 0)
                return r;
        *ret_close = v;
        return 0;
}

/* Parses a control body: a JSON object with exactly the allowed fields. */
static int control_body(const char *body, size_t len, const char *const *fields, json_object **ret, sp_error **err)
{
        if (len > DP_CONTROL_BODY_MAX)
                return sp_error_set(err, SP_E_INVALID, "the body is larger than %d bytes", DP_CONTROL_BODY_MAX);
        _cleanup_json_ json_object *o = NULL;
        int r = sp_json_parse(body, len, &o, err);
        if (r < 0)
                return sp_error_wrap(err, "body");
        if (!json_object_is_type(o, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "the body must be a JSON object");
        if ((r = sp_json_check_fields(o, fields, err)) < 0)
                return r;
        *ret = TAKE_PTR(o);
        return 0;
}

int dp_request_resize(const char *body, size_t len, int *ret_rows, int *ret_cols, sp_error **err)
{
        static const char *const fields[] = {"rows", "cols", NULL};
        _cleanup_json_ json_object *o = NULL;
        int64_t rows = 0, cols = 0;
        int r;
        if ((r = control_body(body, len, fields, &o, err)) < 0 ||
            (r = sp_json_get_int(o, "rows", true, DP_PTY_MIN, DP_PTY_MAX, &rows, err)) < 0 ||
            (r = sp_json_get_int(o, "cols", true, DP_PTY_MIN, DP_PTY_MAX, &cols, err)) < 0)
                return r;
        *ret_rows = (int)rows;
        *ret_cols = (int)cols;
        return 0;
}

static const struct {
        const char *name;
        int number;
} signals[] = {
        {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"KILL", SIGKILL},
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},   {"CONT", SIGCONT},
        {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH},
};

int dp_request_signal(const char *body, size_t len, int *ret_signal, sp_error **err)
{
        static const char *const fields[] = {"signal", NULL};
        _cleanup_json_ json_object *o = NULL;
        int r = control_body(body, len, fields, &o, err);
        if (r < 0)
                return r;
        json_object *v = NULL;
        if (!json_object_object_get_ex(o, "signal", &v) || !v)
                return sp_error_set(err, SP_E_INVALID, "missing required field 'signal'");
        if (json_object_is_type(v, json_type_int)) {
                int64_t n = 0;
                if ((r = sp_json_get_int(o, "signal", true, 1, 64, &n, err)) < 0)
                        return r;
                *ret_signal = (int)n;
                return 0;
        }
        if (json_object_is_type(v, json_type_string)) {
                const char *s = json_object_get_string(v);
                if (strncasecmp(s, "SIG", 3) == 0)
                        s += 3;
                for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++)
                        if (strcasecmp(s, signals[i].name) == 0) {
                                *ret_signal = signals[i].number;
                                return 0;
                        }
        }
        return sp_error_set(err, SP_E_INVALID,
                            "field 'signal' must be one of HUP INT QUIT KILL USR1 USR2 TERM CONT STOP TSTP WINCH "
                            "or a number between 1 and 64");
}

static int file_path(const sp_http_parser *p, dp_file_request *ret, sp_error **err)
{
        const char *path = sp_http_parser_query(p, "path");
        if (!path || !*path)
                return sp_error_set(err, SP_E_INVALID, "missing query parameter 'path'");
        if (strlen(path) > DP_PATH_MAX)
                return sp_error_set(err, SP_E_INVALID, "query parameter 'path' is longer than %d bytes", DP_PATH_MAX);
        ret->path = path;
        return 0;
}

/* owner=: a user name or uid as the control plane takes one. */
static int file_owner(const sp_http_parser *p, dp_file_request *ret, sp_error **err)
{
        const char *owner = sp_http_parser_query(p, "owner");
        if (!owner)
                return 0;
        size_t n = strlen(owner);
        bool ok = n >= 1 && n <= DP_OWNER_MAX;
        for (const unsigned char *c = (const unsigned char *)owner; ok && *c; c++)
                ok = *c > 0x20 && *c < 0x7f && *c != ':';
        if (!ok)
                return sp_error_set(err, SP_E_INVALID,
                                    "query parameter 'owner' must be a user name or uid: 1 to %d printable "
                                    "characters without spaces or ':'",
                                    DP_OWNER_MAX);
        ret->owner = owner;
        return 0;
}

int dp_request_file_get(const sp_http_parser *p, dp_file_request *ret, sp_error **err)
{
        static const char *const allowed[] = {"token", "path", "offset", "length", "owner", NULL};
        dp_file_request f = {.mode = 0644};
        int r;
        if ((r = dp_request_check_query(p, allowed, err)) < 0 || (r = file_path(p, &f, err)) < 0 ||
            (r = file_owner(p, &f, err)) < 0)
                return r;
        const char *offset = sp_http_parser_query(p, "offset"), *length = sp_http_parser_query(p, "length");
        if (offset && !parse_u64(offset, DP_OFFSET_MAX, &f.offset))
                return sp_error_set(err, SP_E_INVALID, "query parameter 'offset' must be a byte offset");
        if (length && !parse_u64(length, DP_OFFSET_MAX, &f.length))
                return sp_error_set(err, SP_E_INVALID, "query parameter 'length' must be a number of bytes");
        f.has_length = length != NULL;
        *ret = f;
        return 0;
}

int dp_request_file_put(const sp_http_parser *p, dp_file_request *ret, sp_error **err)
{
        static const char *const allowed[] = {"token", "path", "mode", "append", "parents", "owner", NULL};
        dp_file_request f = {.mode = 0644};
        int r;
        if ((r = dp_request_check_query(p, allowed, err)) < 0 || (r = file_path(p, &f, err)) < 0 ||
            (r = file_owner(p, &f, err)) < 0)
                return r;
        const char *mode = sp_http_parser_query(p, "mode"), *append = sp_http_parser_query(p, "append");
        const char *parents = sp_http_parser_query(p, "parents");
        if (mode) {
                size_t n = strlen(mode);
                if (n == 0 || n > 4 || strspn(mode, "01234567") != n)
                        return sp_error_set(err, SP_E_INVALID,
                                            "query parameter 'mode' must be octal permission bits, e.g. 0644");
                f.mode = (unsigned)strtoul(mode, NULL, 8);
        }
        if (append && (r = parse_bool("append", append, &f.append, err)) < 0)
                return r;
        if (parents && (r = parse_bool("parents", parents, &f.parents, err)) < 0)
                return r;
        *ret = f;
        return 0;
}

int dp_request_template_put(const sp_http_parser *p, uint64_t max_bytes, sp_error **err)
{
        static const char *const allowed[] = {"token", NULL};
        int r = dp_request_check_query(p, allowed, err);
        if (r < 0)
                return r;
        int64_t length = sp_http_parser_content_length(p);
        if (length > 0 && (uint64_t)length > max_bytes)
                return sp_error_set(err, SP_E_TOO_LARGE,
                                    "the upload is larger than its %llu bytes (Content-Length %lld)",
                                    (unsigned long long)max_bytes, (long long)length);
        return 0;
}
