/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: every decoder of controlplane/api/request_session.h over
 * arbitrary bytes. The first byte selects the decoder (modulo their number),
 * the rest is its input. Failures must set an error and leave the output
 * zeroed; successes must hold within every documented bound, and a decoded
 * session cursor must encode back to the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"
#include "api/request_session.h"
#include "space/cleanup.h"
#include "store/tokenkeys.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
        SEL_SESSION_CREATE,
        SEL_SIGNAL_BODY,
        SEL_SIGNAL_NAME,
        SEL_SESSION_TOKEN,
        SEL_FILES_TOKEN,
        SEL_MKDIR,
        SEL_MOVE,
        SEL_REMOVE,
        SEL_FILES_QUERY, /* path \n limit; a missing part is NULL */
        SEL_LIST_QUERY, /* limit \n cursor \n tag */
        SEL__MAX,
};

static void check(bool ok)
{
        if (!ok)
                abort();
}

static bool zeroed(const void *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (((const unsigned char *)p)[i])
                        return false;
        return true;
}

static void check_outcome(int r, sp_error *e)
{
        check((r < 0) == (e != NULL));
        if (r < 0)
                check(r == -(int)e->code && (e->code == SP_E_INVALID || e->code == SP_E_TOO_LARGE) && e->message);
        else
                check(r == 0);
}

static bool path_ok(const char *p)
{
        return p && p[0] && strlen(p) <= CP_SESSION_MAX_PATH;
}

static void session_create(const char *b, size_t n)
{
        cp_session_create_req r;
        sp_error *e = NULL;
        int ret = cp_req_session_create(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&r, sizeof(r)));
        } else {
                size_t argc = json_object_array_length(r.argv), total = 0;
                check(argc >= 1 && argc <= CP_SESSION_MAX_ARGV);
                for (size_t i = 0; i < argc; i++) {
                        json_object *a = json_object_array_get_idx(r.argv, i);
                        check(json_object_is_type(a, json_type_string));
                        total += (size_t)json_object_get_string_len(a) + 1;
                }
                check(json_object_get_string_len(json_object_array_get_idx(r.argv, 0)) > 0);
                check(total <= CP_SESSION_MAX_ARGV_BYTES + 16);
                check(json_object_is_type(r.env, json_type_object) &&
                      json_object_object_length(r.env) <= CP_SESSION_MAX_ENV);
                check(!r.cwd || path_ok(r.cwd));
                check(strlen(r.user) <= CP_SESSION_MAX_USER && !strchr(r.user, ':') && !strchr(r.user, ' '));
                check(!r.pty ||
                      (r.rows >= 1 && r.rows <= CP_SESSION_MAX_PTY && r.cols >= 1 && r.cols <= CP_SESSION_MAX_PTY));
                check(r.timeout_s >= 0 && r.timeout_s <= CP_MAX_TIMEOUT_S);
                check(!r.tag[0] || cp_session_tag_ok(r.tag));
                cp_session_create_req_free(&r);
        }
        sp_error_free(e);
}

static void signal_body(const char *b, size_t n)
{
        int sig = -1;
        sp_error *e = NULL;
        int ret = cp_req_signal(b, n, &sig, &e);
        check_outcome(ret, e);
        check(ret < 0 ? sig == 0 : (sig >= 1 && sig <= 64));
        sp_error_free(e);
}

static void signal_name(const char *s)
{
        int sig = -1;
        sp_error *e = NULL;
        int ret = cp_signal_parse(s, &sig, &e);
        check((ret < 0) == (e != NULL));
        check(ret < 0 ? sig == 0 : (sig >= 1 && sig <= 64));
        sp_error_free(e);
}

static void token(const char *b, size_t n, bool files)
{
        cp_token_req t;
        sp_error *e = NULL;
        int ret = files ? cp_req_files_token(b, n, &t, &e) : cp_req_session_token(b, n, &t, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&t, sizeof(t)));
        } else {
                check(!t.scope[0] || strcmp(t.scope, "read") == 0 || strcmp(t.scope, "write") == 0);
                check(t.ttl_s == 0 || (t.ttl_s >= 1 && t.ttl_s <= CP_TOKEN_MAX_TTL_S));
                check(files ? (!t.path || path_ok(t.path)) : !t.path);
                cp_token_req_free(&t);
        }
        sp_error_free(e);
}

static void files_body(const char *b, size_t n, int sel)
{
        cp_files_req f;
        sp_error *e = NULL;
        int ret = sel == SEL_MKDIR  ? cp_req_files_mkdir(b, n, &f, &e)
                  : sel == SEL_MOVE ? cp_req_files_move(b, n, &f, &e)
                                    : cp_req_files_remove(b, n, &f, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&f, sizeof(f)));
        } else {
                check(path_ok(f.path));
                check(sel == SEL_MOVE ? path_ok(f.to) : !f.to);
                check(f.mode >= -1 && f.mode <= 07777 && (sel == SEL_MKDIR || f.mode == -1));
                check(sel == SEL_MKDIR || !f.parents);
                check(sel == SEL_REMOVE || !f.recursive);
                check(!strpbrk(f.owner, " :\t\n") && !(f.user[0] && f.owner[0]));
                cp_files_req_free(&f);
        }
        sp_error_free(e);
}

/* Splits s at its first newline into two parts (the second NULL without one). */
static void split2(char *s, char **a, char **b)
{
        *a = s;
        *b = strchr(s, '\n');
        if (*b)
                *(*b)++ = '\0';
}

static void files_query(char *s)
{
        char *path, *limit, *user = NULL, *owner = NULL;
        split2(s, &path, &limit);
        if (limit)
                split2(limit, &limit, &user);
        if (user)
                split2(user, &user, &owner);
        cp_files_req f;
        sp_error *e = NULL;
        int ret = cp_req_files_query(path, limit, user, owner, &f, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&f, sizeof(f)));
        } else {
                check(path_ok(f.path) && f.limit >= 1 && f.limit <= CP_FILES_MAX_LIST && !strpbrk(f.user, " :\t\n") &&
                      !strpbrk(f.owner, " :\t\n") && !(f.user[0] && f.owner[0]));
                cp_files_req_free(&f);
        }
        sp_error_free(e);
}

static void list_query(char *s)
{
        char *limit, *cursor, *tag = NULL;
        split2(s, &limit, &cursor);
        if (cursor)
                split2(cursor, &cursor, &tag);
        cp_session_list_query q;
        sp_error *e = NULL;
        int ret = cp_req_session_list_query(limit, cursor, tag, &q, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&q, sizeof(q)));
        } else {
                check(q.limit >= 1 && q.limit <= 1000);
                check(tag ? strcmp(q.tag, tag) == 0 && cp_session_tag_ok(q.tag) : !q.tag[0]);
                if (q.has_cursor) {
                        char again[256];
                        check(cp_cursor_encode_for("ses", q.cursor_created_at, q.cursor_id, again, sizeof(again),
                                                   NULL) == 0);
                        check(strcmp(again, cursor) == 0);
                }
        }
        sp_error_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size == 0)
                return 0;
        int sel = data[0] % SEL__MAX;
        const char *body = (const char *)data + 1;
        size_t n = size - 1;
        /* The query decoders take C strings: the input up to its first NUL. */
        _cleanup_free_ char *s = strndup(body, n);
        if (!s)
                return 0;
        switch (sel) {
        case SEL_SESSION_CREATE:
                session_create(body, n);
                break;
        case SEL_SIGNAL_BODY:
                signal_body(body, n);
                break;
        case SEL_SIGNAL_NAME:
                signal_name(s);
                break;
        case SEL_SESSION_TOKEN:
        case SEL_FILES_TOKEN:
                token(body, n, sel == SEL_FILES_TOKEN);
                break;
        case SEL_MKDIR:
        case SEL_MOVE:
        case SEL_REMOVE:
                files_body(body, n, sel);
                break;
        case SEL_FILES_QUERY:
                files_query(s);
                break;
        default:
                list_query(s);
                break;
        }
        return 0;
}
