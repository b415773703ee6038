/* SPDX-License-Identifier: Apache-2.0 */
/* Decoding and validation of the session, file and token routes' requests. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"
#include "api/request_session.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "store/tokenkeys.h"

#define MAX_SIGNAL 64
#define MAX_MODE 07777

static bool env_name_ok(const char *k)
{
        if (!k[0] || (k[0] >= '0' && k[0] <= '9'))
                return false;
        for (const char *c = k; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_'))
                        return false;
        return true;
}

/* A user name or uid as the agent looks it up: printable, no space or ':'. */
static bool user_ok(const char *s)
{
        if (!s[0])
                return false;
        for (const unsigned char *c = (const unsigned char *)s; *c; c++)
                if (*c <= 0x20 || *c >= 0x7f || *c == ':')
                        return false;
        return true;
}

#define USER_RULE "a user name or uid: printable, without spaces or ':'"

/* The optional user field name ("user", or a file route's "owner") into out
 * (CP_SESSION_MAX_USER + 1 bytes; "" when absent). */
static int get_user_field(json_object *o, const char *name, char *out, sp_error **err)
{
        const char *user = NULL;
        if (sp_json_get_string(o, name, false, CP_SESSION_MAX_USER, &user, err) < 0)
                return -SP_E_INVALID;
        if (user && !user_ok(user))
                return sp_error_set(err, SP_E_INVALID, "field '%s' must be " USER_RULE, name);
        snprintf(out, CP_SESSION_MAX_USER + 1, "%s", user ? user : "");
        return 0;
}

static int get_user(json_object *o, char *out, sp_error **err)
{
        return get_user_field(o, "user", out, err);
}

#define OWNER_AND_USER \
        "give either user (act with that user's rights) or owner (act as root, give it what is created), not both"

/* An optional non-empty path field, copied into *ret (NULL when absent). */
static int get_path(json_object *o, const char *name, bool required, char **ret, sp_error **err)
{
        const char *s = NULL;
        if (sp_json_get_string(o, name, required, CP_SESSION_MAX_PATH, &s, err) < 0)
                return -SP_E_INVALID;
        if (!s)
                return 0;
        if (!s[0])
                return sp_error_set(err, SP_E_INVALID, "field '%s' must not be empty", name);
        *ret = strdup(s);
        return *ret ? 0 : sp_error_set(err, SP_E_LIMIT, "out of memory");
}

/* argv, or command as /bin/sh -c: a new array in *ret. */
static int get_argv(json_object *o, json_object **ret, sp_error **err)
{
        json_object *argv = NULL;
        const char *command = NULL;
        if (sp_json_get_array(o, "argv", false, CP_SESSION_MAX_ARGV, &argv, err) < 0 ||
            sp_json_get_string(o, "command", false, CP_SESSION_MAX_ARGV_BYTES, &command, err) < 0)
                return -SP_E_INVALID;
        if (argv && command)
                return sp_error_set(err, SP_E_INVALID, "give either argv or command, not both");
        if (command) {
                if (!command[0])
                        return sp_error_set(err, SP_E_INVALID, "field 'command' must not be empty");
                json_object *a = json_object_new_array();
                json_object_array_add(a, json_object_new_string("/bin/sh"));
                json_object_array_add(a, json_object_new_string("-c"));
                json_object_array_add(a, json_object_new_string(command));
                *ret = a;
                return 0;
        }
        if (!argv)
                return sp_error_set(err, SP_E_INVALID, "argv or command is required");
        size_t n = json_object_array_length(argv), total = 0;
        if (n == 0)
                return sp_error_set(err, SP_E_INVALID, "field 'argv' must name a program");
        for (size_t i = 0; i < n; i++) {
                json_object *v = json_object_array_get_idx(argv, i);
                if (!v || !json_object_is_type(v, json_type_string))
                        return sp_error_set(err, SP_E_INVALID, "field 'argv' must be an array of strings");
                size_t len = (size_t)json_object_get_string_len(v);
                if (memchr(json_object_get_string(v), '\0', len))
                        return sp_error_set(err, SP_E_INVALID, "field 'argv' item %zu contains a NUL character", i);
                total += len + 1;
                if (total > CP_SESSION_MAX_ARGV_BYTES)
                        return sp_error_set(err, SP_E_INVALID, "field 'argv' is longer than %d bytes in all",
                                            CP_SESSION_MAX_ARGV_BYTES);
        }
        if (json_object_get_string_len(json_object_array_get_idx(argv, 0)) == 0)
                return sp_error_set(err, SP_E_INVALID, "field 'argv' must name a program");
        *ret = json_object_get(argv);
        return 0;
}

static int get_env(json_object *o, json_object **ret, sp_error **err)
{
        json_object *env = NULL;
        if (sp_json_get_string_map(o, "env", false, CP_SESSION_MAX_ENV, CP_SESSION_MAX_ENV_KEY,
                                   CP_SESSION_MAX_ENV_BYTES, &env, err) < 0)
                return -SP_E_INVALID;
        if (!env) {
                *ret = json_object_new_object();
                return *ret ? 0 : sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        size_t total = 0;
        json_object_object_foreach (env, k, v) {
                if (!env_name_ok(k))
                        return sp_error_set(err, SP_E_INVALID,
                                            "field 'env': name '%.64s' must be letters, digits and '_', not starting "
                                            "with a digit",
                                            k);
                total += strlen(k) + (size_t)json_object_get_string_len(v) + 2;
                if (total > CP_SESSION_MAX_ENV_BYTES)
                        return sp_error_set(err, SP_E_INVALID, "field 'env' is longer than %d bytes in all",
                                            CP_SESSION_MAX_ENV_BYTES);
        }
        *ret = json_object_get(env);
        return 0;
}

static int get_pty(json_object *o, cp_session_create_req *r, sp_error **err)
{
        json_object *pty = NULL;
        if (sp_json_get_object(o, "pty", false, &pty, err) < 0)
                return -SP_E_INVALID;
        if (!pty)
                return 0;
        static const char *const fields[] = {"rows", "cols", NULL};
        r->rows = 24;
        r->cols = 80;
        if (sp_json_check_fields(pty, fields, err) < 0 ||
            sp_json_get_int(pty, "rows", false, 1, CP_SESSION_MAX_PTY, &r->rows, err) < 0 ||
            sp_json_get_int(pty, "cols", false, 1, CP_SESSION_MAX_PTY, &r->cols, err) < 0)
                return sp_error_wrap(err, "field 'pty'");
        r->pty = true;
        return 0;
}

bool cp_session_tag_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > CP_SESSION_MAX_TAG)
                return false;
        for (const unsigned char *c = (const unsigned char *)s; *c; c++)
                if (*c < 0x20 || *c == 0x7f)
                        return false;
        return sp_utf8_valid(s, n);
}

#define TAG_RULE "1 to 256 bytes of UTF-8 without control characters"

static int get_tag(json_object *o, char *out, sp_error **err)
{
        const char *tag = NULL;
        if (sp_json_get_string(o, "tag", false, CP_SESSION_MAX_TAG, &tag, err) < 0)
                return -SP_E_INVALID;
        if (tag && !cp_session_tag_ok(tag))
                return sp_error_set(err, SP_E_INVALID, "field 'tag' must be " TAG_RULE);
        snprintf(out, CP_SESSION_MAX_TAG + 1, "%s", tag ? tag : "");
        return 0;
}

static int session_create(json_object *o, cp_session_create_req *r, sp_error **err)
{
        static const char *const fields[] = {"argv", "command", "env",       "cwd", "user",
                                             "pty",  "stdin",   "timeout_s", "tag", NULL};
        if (sp_json_check_fields(o, fields, err) < 0 || get_argv(o, &r->argv, err) < 0 ||
            get_env(o, &r->env, err) < 0 || get_path(o, "cwd", false, &r->cwd, err) < 0 ||
            get_user(o, r->user, err) < 0 || get_pty(o, r, err) < 0 ||
            sp_json_get_bool(o, "stdin", false, &r->stdin_open, err) < 0 ||
            sp_json_get_int(o, "timeout_s", false, 0, CP_MAX_TIMEOUT_S, &r->timeout_s, err) < 0 ||
            get_tag(o, r->tag, err) < 0)
                return -SP_E_INVALID;
        return 0;
}

void cp_session_create_req_free(cp_session_create_req *r)
{
        if (!r)
                return;
        sp_json_putp(&r->argv);
        sp_json_putp(&r->env);
        free(r->cwd);
        r->cwd = NULL;
}

int cp_req_session_create(const char *body, size_t len, cp_session_create_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object_max(body, len, CP_SESSION_MAX_BODY, &o, err);
        if (r < 0)
                return r;
        cp_session_create_req q = {0};
        if ((r = session_create(o, &q, err)) < 0) {
                cp_session_create_req_free(&q);
                return r;
        }
        *ret = q;
        return 0;
}

/* ---- signals ---- */

static const struct {
        const char *name;
        int number;
} signals[] = {
        {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"KILL", SIGKILL},
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM},   {"CONT", SIGCONT},
        {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH},
};

int cp_signal_parse(const char *s, int *ret, sp_error **err)
{
        *ret = 0;
        size_t n = s ? strlen(s) : 0;
        if (n > 0 && n <= 2 && strspn(s, "0123456789") == n && s[0] != '0') {
                int v = s[0] - '0';
                if (n == 2)
                        v = v * 10 + (s[1] - '0');
                if (v <= MAX_SIGNAL) {
                        *ret = v;
                        return 0;
                }
        }
        const char *name = s && strncmp(s, "SIG", 3) == 0 ? s + 3 : s;
        for (size_t i = 0; name && i < SP_ARRAY_SIZE(signals); i++)
                if (strcmp(name, signals[i].name) == 0) {
                        *ret = signals[i].number;
                        return 0;
                }
        return sp_error_set(err, SP_E_INVALID,
                            "signal '%.16s' must be HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP, TSTP or WINCH "
                            "(with or without SIG) or a number from 1 to %d",
                            s ? s : "", MAX_SIGNAL);
}

int cp_req_signal(const char *body, size_t len, int *ret, sp_error **err)
{
        *ret = 0;
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const fields[] = {"signal", NULL};
        json_object *v = NULL;
        if (sp_json_check_fields(o, fields, err) < 0)
                return -SP_E_INVALID;
        if (!json_object_object_get_ex(o, "signal", &v) || !v)
                return sp_error_set(err, SP_E_INVALID, "missing required field 'signal'");
        if (json_object_is_type(v, json_type_int)) {
                int64_t n = 0;
                if (sp_json_get_int(o, "signal", true, 1, MAX_SIGNAL, &n, err) < 0)
                        return -SP_E_INVALID;
                *ret = (int)n;
                return 0;
        }
        if (!json_object_is_type(v, json_type_string))
                return sp_error_set(err, SP_E_INVALID, "field 'signal' must be a signal name or number");
        const char *s = NULL;
        if (sp_json_get_string(o, "signal", true, 16, &s, err) < 0)
                return -SP_E_INVALID;
        return cp_signal_parse(s, ret, err);
}

/* ---- tokens ---- */

static int token_req(const char *body, size_t len, bool files, cp_token_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const session_fields[] = {"scope", "ttl_s", NULL};
        static const char *const files_fields[] = {"path", "scope", "ttl_s", "user", NULL};
        cp_token_req q = {0};
        const char *scope = NULL;
        if (sp_json_check_fields(o, files ? files_fields : session_fields, err) < 0 ||
            sp_json_get_string(o, "scope", false, 16, &scope, err) < 0 ||
            sp_json_get_int(o, "ttl_s", false, 1, CP_TOKEN_MAX_TTL_S, &q.ttl_s, err) < 0 ||
            (files && (get_path(o, "path", false, &q.path, err) < 0 || get_user(o, q.user, err) < 0))) {
                cp_token_req_free(&q);
                return -SP_E_INVALID;
        }
        if (scope) {
                if (strcmp(scope, "read") != 0 && strcmp(scope, "write") != 0) {
                        cp_token_req_free(&q);
                        return sp_error_set(err, SP_E_INVALID, "field 'scope' must be read or write");
                }
                snprintf(q.scope, sizeof(q.scope), "%s", scope);
        }
        *ret = q;
        return 0;
}

int cp_req_session_token(const char *body, size_t len, cp_token_req *ret, sp_error **err)
{
        return token_req(body, len, false, ret, err);
}

int cp_req_files_token(const char *body, size_t len, cp_token_req *ret, sp_error **err)
{
        return token_req(body, len, true, ret, err);
}

void cp_token_req_free(cp_token_req *r)
{
        if (r) {
                free(r->path);
                r->path = NULL;
        }
}

/* ---- files ---- */

void cp_files_req_free(cp_files_req *r)
{
        if (!r)
                return;
        free(r->path);
        free(r->to);
        r->path = r->to = NULL;
}

/* "0755", "755" or 493. */
static int get_mode(json_object *o, int64_t *ret, sp_error **err)
{
        json_object *v = NULL;
        *ret = -1;
        if (!json_object_object_get_ex(o, "mode", &v) || !v)
                return 0;
        if (json_object_is_type(v, json_type_int))
                return sp_json_get_int(o, "mode", true, 0, MAX_MODE, ret, err) < 0 ? -SP_E_INVALID : 0;
        const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > 5 || strspn(s, "01234567") != n || strtol(s, NULL, 8) > MAX_MODE)
                return sp_error_set(err, SP_E_INVALID, "field 'mode' must be octal digits (\"0755\") up to 07777");
        *ret = strtol(s, NULL, 8);
        return 0;
}

typedef enum files_op { FILES_MKDIR, FILES_MOVE, FILES_REMOVE } files_op;

static int files_body(const char *body, size_t len, files_op op, cp_files_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const mkdir_fields[] = {"path", "parents", "mode", "user", "owner", NULL};
        static const char *const move_fields[] = {"from", "to", "user", "owner", NULL};
        static const char *const remove_fields[] = {"path", "recursive", "user", "owner", NULL};
        const char *const *fields = op == FILES_MKDIR ? mkdir_fields : op == FILES_MOVE ? move_fields : remove_fields;
        cp_files_req q = {.mode = -1};
        bool ok = sp_json_check_fields(o, fields, err) == 0 && get_user(o, q.user, err) == 0 &&
                  get_user_field(o, "owner", q.owner, err) == 0;
        if (ok && q.user[0] && q.owner[0])
                ok = sp_error_set(err, SP_E_INVALID, OWNER_AND_USER) == 0;
        if (ok && op == FILES_MOVE)
                ok = get_path(o, "from", true, &q.path, err) == 0 && get_path(o, "to", true, &q.to, err) == 0;
        else if (ok)
                ok = get_path(o, "path", true, &q.path, err) == 0;
        if (ok && op == FILES_MKDIR)
                ok = sp_json_get_bool(o, "parents", false, &q.parents, err) == 0 && get_mode(o, &q.mode, err) == 0;
        if (ok && op == FILES_REMOVE)
                ok = sp_json_get_bool(o, "recursive", false, &q.recursive, err) == 0;
        if (!ok) {
                cp_files_req_free(&q);
                return -SP_E_INVALID;
        }
        *ret = q;
        return 0;
}

int cp_req_files_mkdir(const char *body, size_t len, cp_files_req *ret, sp_error **err)
{
        return files_body(body, len, FILES_MKDIR, ret, err);
}

int cp_req_files_move(const char *body, size_t len, cp_files_req *ret, sp_error **err)
{
        return files_body(body, len, FILES_MOVE, ret, err);
}

int cp_req_files_remove(const char *body, size_t len, cp_files_req *ret, sp_error **err)
{
        return files_body(body, len, FILES_REMOVE, ret, err);
}

int cp_req_files_query(const char *path, const char *limit, const char *user, const char *owner, cp_files_req *ret,
                       sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        cp_files_req q = {.mode = -1};
        if (!path || !path[0])
                return sp_error_set(err, SP_E_INVALID, "query parameter 'path' is required");
        if (strlen(path) > CP_SESSION_MAX_PATH)
                return sp_error_set(err, SP_E_INVALID, "query parameter 'path' is longer than %d bytes",
                                    CP_SESSION_MAX_PATH);
        if (cp_req_count("limit", limit, CP_FILES_DEFAULT_LIST, CP_FILES_MAX_LIST, &q.limit, err) < 0)
                return -SP_E_INVALID;
        if (user) {
                if (strlen(user) > CP_SESSION_MAX_USER || !user_ok(user))
                        return sp_error_set(err, SP_E_INVALID, "query parameter 'user' must be " USER_RULE);
                snprintf(q.user, sizeof(q.user), "%s", user);
        }
        if (owner) {
                if (strlen(owner) > CP_SESSION_MAX_USER || !user_ok(owner))
                        return sp_error_set(err, SP_E_INVALID, "query parameter 'owner' must be " USER_RULE);
                if (user)
                        return sp_error_set(err, SP_E_INVALID, OWNER_AND_USER);
                snprintf(q.owner, sizeof(q.owner), "%s", owner);
        }
        if (!(q.path = strdup(path)))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *ret = q;
        return 0;
}

int cp_req_session_list_query(const char *limit, const char *cursor, const char *tag, cp_session_list_query *ret,
                              sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        cp_session_list_query q = {0};
        if (cp_req_count("limit", limit, 100, 1000, &q.limit, err) < 0)
                return -SP_E_INVALID;
        if (tag) {
                if (!cp_session_tag_ok(tag))
                        return sp_error_set(err, SP_E_INVALID, "query parameter 'tag' must be " TAG_RULE);
                snprintf(q.tag, sizeof(q.tag), "%s", tag);
        }
        if (cursor && cursor[0]) {
                if (cp_cursor_decode_for("ses", cursor, q.cursor_created_at, sizeof(q.cursor_created_at), q.cursor_id,
                                         sizeof(q.cursor_id), err) < 0)
                        return -SP_E_INVALID;
                q.has_cursor = true;
        }
        *ret = q;
        return 0;
}
