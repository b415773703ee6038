/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's filesystem.Filesystem service on the public API's file routes.
 * Watching is not offered (the public API has no watch): WatchDir and the
 * watcher methods answer unimplemented.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "connect.h"
#include "request.h"
#include "space/cleanup.h"
#include "space/json.h"

#define MAX_ENTRIES 10000

static const char *str_field(json_object *o, const char *k)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_string)
                       ? json_object_get_string(v)
                       : NULL;
}

static void target_for(sp_buf *b, const char *sandbox, const char *route)
{
        sp_buf_append_str(b, "/v1/sandboxes/", NULL);
        e2b_url_escape(b, sandbox);
        sp_buf_append_str(b, "/files/", NULL);
        sp_buf_append_str(b, route, NULL);
}

/* envd's EntryInfo for our FileStat. */
static json_object *entry_info(json_object *st)
{
        json_object *o = json_object_new_object(), *v = NULL;
        const char *type = str_field(st, "type");
        const char *t = !type                          ? "FILE_TYPE_UNSPECIFIED"
                        : strcmp(type, "file") == 0    ? "FILE_TYPE_FILE"
                        : strcmp(type, "dir") == 0     ? "FILE_TYPE_DIRECTORY"
                        : strcmp(type, "symlink") == 0 ? "FILE_TYPE_SYMLINK"
                                                       : "FILE_TYPE_UNSPECIFIED";
        json_object_object_add(o, "name", json_object_new_string(str_field(st, "name") ? str_field(st, "name") : ""));
        json_object_object_add(o, "type", json_object_new_string(t));
        json_object_object_add(o, "path", json_object_new_string(str_field(st, "path") ? str_field(st, "path") : ""));
        int64_t size = json_object_object_get_ex(st, "size", &v) ? json_object_get_int64(v) : 0;
        char num[32];
        snprintf(num, sizeof(num), "%lld", (long long)size);
        json_object_object_add(o, "size", json_object_new_string(num));
        int64_t mode = json_object_object_get_ex(st, "mode", &v) ? json_object_get_int64(v) & 07777 : 0;
        json_object_object_add(o, "mode", json_object_new_int64(mode));
        char perm[11] = "----------";
        perm[0] = t[10] == 'D' ? 'd' : t[10] == 'S' ? 'l' : '-';
        for (int i = 0; i < 9; i++)
                if (mode & (0400 >> i))
                        perm[1 + i] = "rwxrwxrwx"[i];
        json_object_object_add(o, "permissions", json_object_new_string(perm));
        int64_t uid = json_object_object_get_ex(st, "uid", &v) ? json_object_get_int64(v) : 0;
        int64_t gid = json_object_object_get_ex(st, "gid", &v) ? json_object_get_int64(v) : 0;
        /* Names would need the sandbox's passwd; 0 is root. */
        snprintf(num, sizeof(num), "%lld", (long long)uid);
        json_object_object_add(o, "owner", json_object_new_string(uid == 0 ? "root" : num));
        snprintf(num, sizeof(num), "%lld", (long long)gid);
        json_object_object_add(o, "group", json_object_new_string(gid == 0 ? "root" : num));
        if (str_field(st, "mtime"))
                json_object_object_add(o, "modifiedTime", json_object_new_string(str_field(st, "mtime")));
        if (str_field(st, "target"))
                json_object_object_add(o, "symlinkTarget", json_object_new_string(str_field(st, "target")));
        return o;
}

static int stat_path(e2b_envd *ev, const char *path, json_object **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "stat?path=");
        e2b_url_escape(&t, path);
        return e2b_api_json(&ev->api, "GET", t.data, NULL, ret, err) < 0 ? -1 : 0;
}

/* Answers {"entry": EntryInfo} for path. */
static void reply_entry(e2b_call *call, e2b_envd *ev, const char *path)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *st = NULL, *out = json_object_new_object();
        if (stat_path(ev, path, &st, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        json_object_object_add(out, "entry", entry_info(st));
        e2b_connect_reply(call, out);
}

static void fs_stat(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *path = NULL;
        if (e2b_request_path(req, "path", &path, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        reply_entry(call, ev, path);
}

/* Lists dir into entries, descending depth-1 more levels. */
static int list_into(e2b_envd *ev, const char *dir, int depth, json_object *entries, sp_error **err)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "list?limit=10000&path=");
        e2b_url_escape(&t, dir);
        _cleanup_json_ json_object *l = NULL;
        json_object *items = NULL;
        if (e2b_api_json(&ev->api, "GET", t.data, NULL, &l, err) < 0)
                return -1;
        if (!json_object_object_get_ex(l, "entries", &items))
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered no entries");
        for (size_t i = 0; i < json_object_array_length(items); i++) {
                if (json_object_array_length(entries) >= MAX_ENTRIES)
                        return sp_error_set(err, SP_E_LIMIT, "more than %d entries", MAX_ENTRIES);
                json_object *st = json_object_array_get_idx(items, i);
                json_object_array_add(entries, entry_info(st));
                const char *type = str_field(st, "type"), *p = str_field(st, "path");
                if (depth > 1 && type && p && strcmp(type, "dir") == 0 && list_into(ev, p, depth - 1, entries, err) < 0)
                        return -1;
        }
        return 0;
}

static void fs_list_dir(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *path = NULL;
        int depth = 1;
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object *entries = json_object_new_array();
        json_object_object_add(out, "entries", entries);
        if (e2b_request_path(req, "path", &path, &e) < 0 || e2b_request_depth(req, &depth, &e) < 0 ||
            list_into(ev, path, depth, entries, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        e2b_connect_reply(call, out);
}

/* envd makes the parents too and answers already_exists for an existing path. */
static void fs_make_dir(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *path = NULL;
        _cleanup_json_ json_object *st = NULL, *out = NULL, *body = json_object_new_object();
        if (e2b_request_path(req, "path", &path, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        if (stat_path(ev, path, &st, &e) == 0) {
                sp_error_free(TAKE_PTR(e));
                sp_error_set(&e, SP_E_CONFLICT, "%s already exists", path);
                e2b_connect_error(call, e);
                return;
        }
        if (e->code != SP_E_NOT_FOUND) {
                e2b_connect_error(call, e);
                return;
        }
        sp_error_free(TAKE_PTR(e));
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "mkdir");
        json_object_object_add(body, "path", json_object_new_string(path));
        json_object_object_add(body, "parents", json_object_new_boolean(true));
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        reply_entry(call, ev, path);
}

static void fs_move(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *from = NULL, *to = NULL;
        _cleanup_json_ json_object *out = NULL, *body = json_object_new_object();
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "move");
        if (e2b_request_path(req, "source", &from, &e) < 0 || e2b_request_path(req, "destination", &to, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        json_object_object_add(body, "from", json_object_new_string(from));
        json_object_object_add(body, "to", json_object_new_string(to));
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        reply_entry(call, ev, to);
}

static void fs_remove(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *path = NULL;
        _cleanup_json_ json_object *out = NULL, *body = json_object_new_object();
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "remove");
        if (e2b_request_path(req, "path", &path, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        json_object_object_add(body, "path", json_object_new_string(path));
        json_object_object_add(body, "recursive", json_object_new_boolean(true));
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
}

typedef void (*fs_method)(e2b_call *call, e2b_envd *ev, json_object *req);

static void run(e2b_call *call, const e2b_ctx *ctx, fs_method m)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *req = NULL;
        e2b_envd ev;
        if (e2b_envd_open(call, ctx, &ev, &e) < 0 || e2b_connect_request(call, false, &req, &e) < 0)
                e2b_connect_error(call, e);
        else
                m(call, &ev, req);
        e2b_envd_close(&ev);
}

#define METHOD(name, fn) \
        static void name(e2b_call *call, void *userdata) \
        { \
                run(call, userdata, fn); \
        }
METHOD(rpc_stat, fs_stat)
METHOD(rpc_list_dir, fs_list_dir)
METHOD(rpc_make_dir, fs_make_dir)
METHOD(rpc_move, fs_move)
METHOD(rpc_remove, fs_remove)

/* WatchDir (a stream) and the watcher methods: no watch in the public API. */
static void rpc_watch_dir(e2b_call *call, void *userdata)
{
        (void)userdata;
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_UNSUPPORTED, "watching directories is not supported by this server");
        if (e2b_connect_stream_begin(call) == 0)
                e2b_connect_stream_end(call, e);
}

static void rpc_watcher(e2b_call *call, void *userdata)
{
        (void)userdata;
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_UNSUPPORTED, "watching directories is not supported by this server");
        e2b_connect_error(call, e);
}

static const e2b_route routes[] = {
        {"POST", "/filesystem.Filesystem/Stat", rpc_stat, false, 0},
        {"POST", "/filesystem.Filesystem/ListDir", rpc_list_dir, false, 0},
        {"POST", "/filesystem.Filesystem/MakeDir", rpc_make_dir, false, 0},
        {"POST", "/filesystem.Filesystem/Move", rpc_move, false, 0},
        {"POST", "/filesystem.Filesystem/Remove", rpc_remove, false, 0},
        {"POST", "/filesystem.Filesystem/WatchDir", rpc_watch_dir, false, 0},
        {"POST", "/filesystem.Filesystem/CreateWatcher", rpc_watcher, false, 0},
        {"POST", "/filesystem.Filesystem/GetWatcherEvents", rpc_watcher, false, 0},
        {"POST", "/filesystem.Filesystem/RemoveWatcher", rpc_watcher, false, 0},
};

int e2b_filesystem_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err)
{
        return e2b_routes_add(ctx, srv, routes, SP_ARRAY_SIZE(routes), err);
}
