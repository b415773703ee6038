/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What an E2B request asks for, decoded without I/O: the Connect message
 * and the user of an envd call, the process.Process and
 * filesystem.Filesystem requests, and the control-plane REST bodies and
 * list query. The handlers (process.c, filesystem.c, connect.c, rest.c)
 * decode with these, then call the public API.
 *
 * Every error is SP_E_INVALID with a message for the client (E2B's REST
 * answers it as 400, Connect as invalid_argument) unless said otherwise.
 * Strings returned are borrowed from the request object. Thread-safe.
 */
#ifndef E2B_REQUEST_H
#define E2B_REQUEST_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

#define E2B_REQUEST_DEFAULT_USER "user" /* envd's default user in E2B's templates */
#define E2B_REQUEST_DEFAULT_CWD "~" /* a command's cwd when Start names none: the user's home */
#define E2B_REQUEST_MAX_USER 64
#define E2B_REQUEST_MAX_BASIC 256 /* base64 of Authorization: Basic */
#define E2B_REQUEST_MAX_PATH 4096
#define E2B_REQUEST_MAX_DEPTH 16
#define E2B_REQUEST_MAX_INPUT (16 * 1024 * 1024) /* base64 of one SendInput */
#define E2B_REQUEST_MAX_START (8 * 1024 * 1024) /* a Start request's body */
#define E2B_REQUEST_MAX_TAG 256 /* a process tag: the public API's session tag */
/* A shell's "-c" script longer than this moves into the environment, in
 * pieces of at most this size (the agent's bound on one string). */
#define E2B_REQUEST_MAX_ARG (64 * 1024)
/* The longest such script: Linux passes a program 2 MiB of arguments and
 * environment at most (with the usual 8 MiB stack); 128 KiB are left to the
 * rest of the environment. */
#define E2B_REQUEST_MAX_COMMAND (2 * 1024 * 1024 - 128 * 1024)
#define E2B_REQUEST_SCRIPT_VAR "_SPACE_E2B_CMD_" /* the pieces' names, numbered from 0 */
#define E2B_REQUEST_MAX_TIMEOUT_S 2592000
#define E2B_REQUEST_DEFAULT_TIMEOUT_S 300 /* E2B's default sandbox lifetime */
#define E2B_REQUEST_MAX_LIST 1000
#define E2B_REQUEST_MAX_METADATA 8 /* pairs in a list's metadata filter */

/* ---- envd (Connect over JSON) ---- */

/* A request's message: a unary body (JSON, empty meaning {}) or, with
 * stream, one envelope (flag 0, 4-byte big-endian length, JSON) that is the
 * whole body. *ret is a new object. */
int e2b_request_message(const char *body, size_t len, bool stream, json_object **ret, sp_error **err);

/* The user named by Authorization: Basic base64(user[:password]); *ret_user
 * is malloc'd, or NULL without such a header or with an empty name.
 * Refused: base64 that does not decode or is over 256 characters, a name
 * over 64 bytes or with a NUL in it. */
int e2b_request_user(const char *authorization, char **ret_user, sp_error **err);

/* process.Process/Start: the public API's session body for it (argv from
 * process.cmd and args, env, cwd — E2B_REQUEST_DEFAULT_CWD when left out or
 * empty —, user, stdin, pty, and the Connect-Timeout-Ms header as
 * timeout_s, tag — an empty one is none; user and connect_timeout_ms may be
 * NULL). A shell's "-c" script
 * over E2B_REQUEST_MAX_ARG bytes is moved into the environment
 * (E2B_REQUEST_SCRIPT_VAR0, 1, ...) and run from there by `eval`; one over
 * E2B_REQUEST_MAX_COMMAND is refused. *ret_body is new; *ret_pty says whether
 * a PTY was asked for. */
int e2b_request_start(json_object *req, const char *user, const char *connect_timeout_ms, json_object **ret_body,
                      bool *ret_pty, sp_error **err);

/* A ProcessSelector: its pid (1 to INT32_MAX; *ret_tag NULL) or its tag
 * (*ret_tag borrowed from req; *ret_pid 0). Errors: SP_E_INVALID, and
 * SP_E_NOT_FOUND "process with tag … not found" (envd's answer) for a tag
 * no session can carry (e2b_request_tag_ok()). */
int e2b_request_selector(json_object *req, int64_t *ret_pid, const char **ret_tag, sp_error **err);

/* Whether tag is one a session may carry: 1..E2B_REQUEST_MAX_TAG bytes
 * without control characters (the public API's rule, docs/api.md). */
bool e2b_request_tag_ok(const char *tag);

/* SendInput's bytes (input.stdin or input.pty, base64) appended to out. */
int e2b_request_input(json_object *req, sp_buf *out, sp_error **err);

/* Update's pty.size: true with rows and cols (24 and 80 when left out), or
 * false when the request resizes nothing. */
bool e2b_request_resize(json_object *req, int64_t *ret_rows, int64_t *ret_cols);

/* SendSignal's signal, SIGNAL_SIG<NAME>: *ret_name is NAME ("KILL", …). */
int e2b_request_signal(json_object *req, const char **ret_name, sp_error **err);

/* filesystem.Filesystem: the path in field key (1 to 4096 bytes). */
int e2b_request_path(json_object *req, const char *key, const char **ret, sp_error **err);

/* ListDir's depth: 1 to 16; 0 or left out is 1. */
int e2b_request_depth(json_object *req, int *ret, sp_error **err);

/* ---- the control-plane REST API ---- */

/* A JSON object body; empty means {}. *ret is new. */
int e2b_request_body(const char *body, size_t len, json_object **ret, sp_error **err);

/* E2B's network options (allow_internet_access; allowOut and denyOut, in
 * "network" of a create, at the top of a network update) as our "egress"
 * (*ret, a new reference; a create that says nothing gets NULL: the
 * cluster's default, an update that says nothing "none"):
 * internet access → "public"; none (false, or denyOut [0.0.0.0/0]) → "none",
 * or with allowOut a profile of the sandbox's own naming those domains and
 * addresses. denyOut entries other than 0.0.0.0/0 are refused: profiles are
 * allowlists (docs/e2b.md). */
int e2b_request_egress(json_object *in, bool update, json_object **ret, sp_error **err);

#define E2B_TEMPLATE_NAME_MAX 128 /* the public API's bound on a template's name */

/* POST /sandboxes: the public API's create body (templateID, "base" or none
 * meaning the first of template_default, a comma-separated list; metadata; envVars; timeout, default 300;
 * autoPause as end action suspend, else kill). *ret_body is new. */
int e2b_request_create(json_object *in, const char *template_default, json_object **ret_body, sp_error **err);

/* E2B's network.allowPublicTraffic on a create as our ingress mode (*ret,
 * static): "public" unless it is false — E2B's default is public — and
 * "token" then (the caller gets a traffic access token). Refused: a value
 * that is neither a boolean nor null, a network that is not an object. */
int e2b_request_ingress(json_object *in, const char **ret, sp_error **err);

/* A body's "timeout" in seconds (0 to 2592000). Without one (or with a
 * negative one where it is optional) *ret is -1; required makes its absence
 * an error. */
int e2b_request_timeout(json_object *in, bool required, int64_t *ret, sp_error **err);

/* GET /v2/sandboxes: the query parameters (each NULL when absent) as the
 * public API's list target, appended to target, and which E2B states are
 * wanted. */
int e2b_request_list(const char *limit, const char *next_token, const char *metadata, const char *state, sp_buf *target,
                     bool *ret_running, bool *ret_paused, sp_error **err);

/* GET /sandboxes/{id}/logs: start, milliseconds since the epoch (digits;
 * absent: 0, everything), and limit, 1 to max (absent: max). */
int e2b_request_logs(const char *start, const char *limit, size_t max, int64_t *ret_start_ms, size_t *ret_limit,
                     sp_error **err);

/* ---- the public API's answers ---- */

#define E2B_DOMAIN_MAX 256

/* E2B's sandbox domain for a sandbox whose ingress URL template is url (the
 * public API's ingress.url, "http://{port}-sbx-….localhost:7071/"): its host
 * after the first label ("localhost:7071"), so that E2B's getHost(port),
 * "{port}-{id}.{domain}", names the host the data plane serves. Written to
 * out (n bytes); false when url is not of that form or does not fit (out is
 * then ""). */
bool e2b_ingress_domain(const char *url, char *out, size_t n);

#endif
