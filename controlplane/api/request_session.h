/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decoding and validation of the requests of the session, file and token
 * routes, under the same rules as request.h: pure functions over untrusted
 * bytes (a fuzz target drives each), strict JSON bodies (an empty body is
 * {}, a JSON null counts as absent), unknown fields refused, every size,
 * count and number bounded, and an SP_E_INVALID error naming the field on
 * failure, with *ret zeroed. On success the caller frees *ret with the
 * matching _free() (types without one own nothing). Thread-safe.
 *
 * The bounds keep a whole Exec request inside what the worker and the agent
 * accept (proto/spec/agent.md: at most 4 MiB per message).
 */
#ifndef CP_API_REQUEST_SESSION_H
#define CP_API_REQUEST_SESSION_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define CP_SESSION_MAX_ARGV 4096 /* items */
#define CP_SESSION_MAX_ARGV_BYTES (256 * 1024) /* all of argv, or the shell command */
#define CP_SESSION_MAX_ENV 1024 /* entries */
#define CP_SESSION_MAX_ENV_KEY 256
/* All names and values: room for the 2 MiB of arguments and environment
 * that Linux passes to a program (with the usual 8 MiB stack limit); the
 * E2B wrapper moves a long shell script into the environment. */
#define CP_SESSION_MAX_ENV_BYTES (2 * 1024 * 1024)
/* A create request's body: argv and env at their bounds, with JSON's escapes. */
#define CP_SESSION_MAX_BODY (8 * 1024 * 1024)
#define CP_SESSION_MAX_PATH 4096 /* cwd and file paths */
#define CP_SESSION_MAX_USER 64
#define CP_SESSION_MAX_PTY 10000 /* rows and columns */
#define CP_SESSION_MAX_TAG 256 /* bytes of a session's tag */
#define CP_FILES_MAX_LIST 10000 /* entries of one listing */
#define CP_FILES_DEFAULT_LIST 1000

/* POST /v1/sandboxes/{id}/sessions
 * {"argv":["ls","-l"] | "command":"ls -l | wc -l", "env":{}, "cwd":"/srv",
 *  "user":"app", "pty":{"rows":24,"cols":80}, "stdin":false, "timeout_s":0,
 *  "tag":"web"}
 * Exactly one of argv (1..CP_SESSION_MAX_ARGV strings, the first not empty)
 * and command (a non-empty string, run as ["/bin/sh","-c",command]). env
 * names match [A-Za-z_][A-Za-z0-9_]*; cwd is a non-empty path; user is 1..64
 * printable characters without spaces or ':' (a name or a uid); timeout_s
 * 0 (none) .. 30 days; tag 1..CP_SESSION_MAX_TAG bytes without control
 * characters (cp_session_tag_ok()). */
typedef struct cp_session_create_req {
        json_object *argv; /* array of strings, never NULL on success */
        json_object *env; /* string map, never NULL (empty object) */
        char *cwd; /* NULL when absent */
        char user[CP_SESSION_MAX_USER + 1]; /* "" when absent (the agent's default, root) */
        bool pty;
        int64_t rows, cols; /* with pty: 1..CP_SESSION_MAX_PTY each [24, 80] */
        bool stdin_open;
        int64_t timeout_s;
        char tag[CP_SESSION_MAX_TAG + 1]; /* "" when absent */
} cp_session_create_req;
int cp_req_session_create(const char *body, size_t len, cp_session_create_req *ret, sp_error **err);
void cp_session_create_req_free(cp_session_create_req *r);

/* Whether s is a session tag: 1..CP_SESSION_MAX_TAG bytes, none of them a
 * control character (below 0x20, or 0x7f). */
bool cp_session_tag_ok(const char *s);

/* A signal by name (HUP INT QUIT KILL USR1 USR2 TERM CONT STOP TSTP WINCH,
 * with or without "SIG", upper case) or number (1..64, decimal digits).
 * SP_E_INVALID otherwise. */
int cp_signal_parse(const char *s, int *ret, sp_error **err);

/* POST /v1/sessions/{id}/signal {"signal":"TERM"} — signal required: a name
 * as above, or a JSON integer 1..64. */
int cp_req_signal(const char *body, size_t len, int *ret, sp_error **err);

/* POST /v1/sessions/{id}/token {"scope":"read"|"write", "ttl_s":N} and
 * POST /v1/sandboxes/{id}/files/token {"path":"/srv/a.txt", "scope", "ttl_s"}:
 * every field optional; ttl_s 1..CP_TOKEN_MAX_TTL_S; path (files only) a
 * non-empty path; user (files only) the user inside the sandbox whose rights
 * the transfers have, as a session's user. */
typedef struct cp_token_req {
        char scope[8]; /* "" when absent */
        int64_t ttl_s; /* 0 when absent */
        char *path; /* NULL when absent */
        char user[CP_SESSION_MAX_USER + 1]; /* "" when absent (the sandbox's root) */
} cp_token_req;
int cp_req_session_token(const char *body, size_t len, cp_token_req *ret, sp_error **err);
int cp_req_files_token(const char *body, size_t len, cp_token_req *ret, sp_error **err);
void cp_token_req_free(cp_token_req *r);

/* The file routes: POST .../files/mkdir {"path", "parents":false, "mode":"0755"},
 * .../files/move {"from", "to"}, .../files/remove {"path", "recursive":false},
 * and the queries of GET .../files/stat?path= and .../files/list?path=&limit=.
 * Paths are required and non-empty, resolved by the agent inside the sandbox
 * (relative ones from the user's home). mode is a string of 1 to 5 octal
 * digits or a JSON integer, at most 07777. limit is 1..CP_FILES_MAX_LIST
 * [CP_FILES_DEFAULT_LIST]. Every route takes an optional user ("user" in the
 * body, ?user= in the query): the operation acts with that user's rights
 * inside the sandbox, as a session's user does; or else an optional owner
 * (same rules, "owner" / ?owner=; with user SP_E_INVALID): E2B's semantics,
 * the operation acts as root and what it creates is given to the owner. */
typedef struct cp_files_req {
        char *path; /* mkdir, remove, stat, list; "from" of move */
        char *to; /* move */
        bool parents, recursive;
        int64_t mode; /* -1 when absent */
        int64_t limit;
        char user[CP_SESSION_MAX_USER + 1]; /* "" when absent (the sandbox's root) */
        char owner[CP_SESSION_MAX_USER + 1]; /* "" when absent */
} cp_files_req;
int cp_req_files_mkdir(const char *body, size_t len, cp_files_req *ret, sp_error **err);
int cp_req_files_move(const char *body, size_t len, cp_files_req *ret, sp_error **err);
int cp_req_files_remove(const char *body, size_t len, cp_files_req *ret, sp_error **err);
/* path, limit, user and owner as the raw query values (NULL when absent; limit may be NULL for stat). */
int cp_req_files_query(const char *path, const char *limit, const char *user, const char *owner, cp_files_req *ret,
                       sp_error **err);
void cp_files_req_free(cp_files_req *r);

/* Query of GET /v1/sandboxes/{id}/sessions: ?limit=N (1..1000 [100]),
 * ?cursor= (a session cursor, see cp_cursor_decode_for()) and ?tag= (only
 * the sessions with that tag, as cp_session_tag_ok()). */
typedef struct cp_session_list_query {
        int64_t limit;
        bool has_cursor;
        char cursor_created_at[40];
        char cursor_id[32];
        char tag[CP_SESSION_MAX_TAG + 1]; /* "" when absent */
} cp_session_list_query;
int cp_req_session_list_query(const char *limit, const char *cursor, const char *tag, cp_session_list_query *ret,
                              sp_error **err);

#endif
