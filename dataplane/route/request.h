/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Parsing the data plane's requests (proto/spec/dataplane.md): where an
 * attach starts, the query parameters of each route, and the bodies of
 * resize and signal. Pure functions over a parsed request (http_parser.h) or
 * a body, so that they can be fuzzed; every refusal is SP_E_INVALID (but a
 * body too large for its bound) with a message that names the parameter or
 * field. Query parameters a route does
 * not know, and a parameter given twice, are refused.
 */
#ifndef DP_ROUTE_REQUEST_H
#define DP_ROUTE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"
#include "space/http_parser.h"

/* Resize bounds, rows and columns alike. */
#define DP_PTY_MIN 1
#define DP_PTY_MAX 10000
/* Body of resize and signal requests. */
#define DP_CONTROL_BODY_MAX 4096
/* Bytes of a file path in a query. */
#define DP_PATH_MAX 4096
#define DP_OWNER_MAX 64 /* files: owner=, a user name or uid inside the sandbox (as a token's usr) */
/* Largest offset or length: what the worker's JSON integers hold. */
#define DP_OFFSET_MAX ((uint64_t)INT64_MAX)

/* Checks that every query parameter of p is one of the NULL-terminated
 * names, and none is given twice ("unknown query parameter 'x'",
 * "query parameter 'x' is given twice"). */
int dp_request_check_query(const sp_http_parser *p, const char *const *allowed, sp_error **err);

/* Where an attach starts: the Last-Event-ID header, else the query parameter
 * `offset` (the header wins when both are given), each a decimal byte offset
 * of at most 19 digits and DP_OFFSET_MAX. *ret_given is false (and
 * *ret_offset 0) when neither is given. And its format: `format` "sse" (the
 * default) or "raw" (*ret_raw). Allowed query parameters: token, offset,
 * format. Outputs are set only on success. */
int dp_request_attach(const sp_http_parser *p, bool *ret_given, uint64_t *ret_offset, bool *ret_raw, sp_error **err);

/* POST stdin: `close` ("true" or "false", default false). Allowed: token, close. */
int dp_request_stdin(const sp_http_parser *p, bool *ret_close, sp_error **err);

/* Body {"rows":N,"cols":N}, each DP_PTY_MIN..DP_PTY_MAX; nothing else. */
int dp_request_resize(const char *body, size_t len, int *ret_rows, int *ret_cols, sp_error **err);

/* Body {"signal":S}: S a name of HUP INT QUIT KILL USR1 USR2 TERM CONT STOP
 * TSTP WINCH (with or without "SIG", any case) or a number 1-64; nothing
 * else. *ret_signal is the Linux signal number. */
int dp_request_signal(const char *body, size_t len, int *ret_signal, sp_error **err);

/* What a files request names. path points into the parser. */
typedef struct dp_file_request {
        const char *path; /* required, 1..DP_PATH_MAX bytes */
        uint64_t offset; /* GET: where to start (default 0) */
        bool has_length; /* GET: length given */
        uint64_t length; /* GET: at most this many bytes */
        unsigned mode; /* PUT: permission bits, octal in the query (default 0644, at most 07777) */
        bool append; /* PUT: append instead of replacing */
        bool parents; /* PUT: make the missing parent directories first */
        const char *owner; /* act as root, give what is created to this user (NULL: absent) */
} dp_file_request;

/* GET files: path, offset, length, owner (and token). owner is a user name
 * or uid (1..DP_OWNER_MAX printable bytes, no space or ':'); it
 * excludes a token's user, which the handlers check. */
int dp_request_file_get(const sp_http_parser *p, dp_file_request *ret, sp_error **err);
/* PUT files: path, mode, append, parents, owner (and token). */
int dp_request_file_put(const sp_http_parser *p, dp_file_request *ret, sp_error **err);

/* PUT a template's upload: no query parameter (but token), and a
 * Content-Length of at most max_bytes, the token's bound (a chunked body is
 * bounded by the worker). A Content-Length above it is SP_E_TOO_LARGE. */
int dp_request_template_put(const sp_http_parser *p, uint64_t max_bytes, sp_error **err);

#endif
