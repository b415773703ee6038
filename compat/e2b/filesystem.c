/* SPDX-License-Identifier: Apache-2.0 */
/*
 * envd's filesystem.Filesystem service on the public API's file routes.
 *
 * The public API has no watch, so watching polls: a watch is a snapshot of
 * the directory's listing ({name relative to the watched directory:
 * EntryInfo}, one level, or up to E2B_REQUEST_MAX_DEPTH levels when
 * recursive, at most MAX_ENTRIES entries) and its events are the difference
 * between two snapshots. WatchDir polls every WATCH_POLL_MS while its client
 * stays; CreateWatcher keeps a snapshot in a table of this daemon (each
 * holds a unit of its caller's share of --max-watchers, caps.h; dropped
 * after WATCHER_IDLE_S without a call) that GetWatcherEvents diffs against
 * the listing of the moment.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "connect.h"
#include "request.h"
#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"

#define MAX_ENTRIES 10000
#define WATCH_POLL_MS 250
#define WATCH_KEEPALIVE_S 50 /* the E2B SDK's Keepalive-Ping-Interval */
#define MAX_WATCHER_EVENTS 10000 /* per GetWatcherEvents answer; the oldest beyond are dropped */
#define WATCHER_IDLE_S 600

static void target_for(sp_buf *b, const char *sandbox, const char *route)
{
        sp_buf_append_str(b, "/v1/sandboxes/", NULL);
        e2b_url_escape(b, sandbox);
        sp_buf_append_str(b, "/files/", NULL);
        sp_buf_append_str(b, route, NULL);
}

/* The call's user (Authorization: Basic, else E2B's default `user`) as the
 * owner, as envd does: the operation acts as root inside the sandbox,
 * relative paths resolve from the user's home, and what it creates (the
 * directories of a makeDir or of a move's destination) is the user's. As
 * &owner= after a query, or in a body. */
static void user_query(sp_buf *b, const e2b_envd *ev)
{
        sp_buf_append_str(b, "&owner=", NULL);
        e2b_url_escape(b, ev->user);
}

static void user_body(json_object *body, const e2b_envd *ev)
{
        json_object_object_add(body, "owner", json_object_new_string(ev->user));
}

/* envd's EntryInfo for our FileStat. */
static json_object *entry_info(json_object *st)
{
        json_object *o = json_object_new_object(), *v = NULL;
        const char *type = sp_json_member_str(st, "type");
        const char *t = !type                          ? "FILE_TYPE_UNSPECIFIED"
                        : strcmp(type, "file") == 0    ? "FILE_TYPE_FILE"
                        : strcmp(type, "dir") == 0     ? "FILE_TYPE_DIRECTORY"
                        : strcmp(type, "symlink") == 0 ? "FILE_TYPE_SYMLINK"
                                                       : "FILE_TYPE_UNSPECIFIED";
        json_object_object_add(
                o, "name",
                json_object_new_string(sp_json_member_str(st, "name") ? sp_json_member_str(st, "name") : ""));
        json_object_object_add(o, "type", json_object_new_string(t));
        json_object_object_add(
                o, "path",
                json_object_new_string(sp_json_member_str(st, "path") ? sp_json_member_str(st, "path") : ""));
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
        /* The names from the sandbox's /etc/passwd and /etc/group, as envd
         * answers them; an id without one (or an older agent) as its number,
         * 0 as root. */
        int64_t uid = json_object_object_get_ex(st, "uid", &v) ? json_object_get_int64(v) : 0;
        int64_t gid = json_object_object_get_ex(st, "gid", &v) ? json_object_get_int64(v) : 0;
        snprintf(num, sizeof(num), "%lld", (long long)uid);
        const char *owner = sp_json_member_str(st, "owner"), *group = sp_json_member_str(st, "group");
        json_object_object_add(o, "owner", json_object_new_string(owner ? owner : uid == 0 ? "root" : num));
        snprintf(num, sizeof(num), "%lld", (long long)gid);
        json_object_object_add(o, "group", json_object_new_string(group ? group : gid == 0 ? "root" : num));
        if (sp_json_member_str(st, "mtime"))
                json_object_object_add(o, "modifiedTime", json_object_new_string(sp_json_member_str(st, "mtime")));
        if (sp_json_member_str(st, "target"))
                json_object_object_add(o, "symlinkTarget", json_object_new_string(sp_json_member_str(st, "target")));
        return o;
}

static int stat_path(e2b_envd *ev, const char *path, json_object **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "stat?path=");
        e2b_url_escape(&t, path);
        user_query(&t, ev);
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
        user_query(&t, ev);
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
                const char *type = sp_json_member_str(st, "type"), *p = sp_json_member_str(st, "path");
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
        user_body(body, ev);
        json_object_object_add(body, "parents", json_object_new_boolean(true));
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        reply_entry(call, ev, path);
}

/* Makes the directories above path that are missing (envd's Move does:
 * EnsureDirs of the destination's directory), given to the call's user. */
static int make_parents(e2b_envd *ev, const char *path, sp_error **err)
{
        const char *slash = strrchr(path, '/');
        if (!slash || slash == path)
                return 0; /* in the user's home, or in / */
        _cleanup_free_ char *dir = strndup(path, (size_t)(slash - path));
        if (!dir)
                abort();
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "mkdir");
        _cleanup_json_ json_object *out = NULL, *body = json_object_new_object();
        json_object_object_add(body, "path", json_object_new_string(dir));
        user_body(body, ev);
        json_object_object_add(body, "parents", json_object_new_boolean(true));
        return e2b_api_json(&ev->api, "POST", t.data, body, &out, err) < 0 ? -1 : 0;
}

static void fs_move(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *from = NULL, *to = NULL;
        _cleanup_json_ json_object *out = NULL, *body = json_object_new_object();
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "move");
        if (e2b_request_path(req, "source", &from, &e) < 0 || e2b_request_path(req, "destination", &to, &e) < 0 ||
            make_parents(ev, to, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        json_object_object_add(body, "from", json_object_new_string(from));
        json_object_object_add(body, "to", json_object_new_string(to));
        user_body(body, ev);
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
        user_body(body, ev);
        json_object_object_add(body, "recursive", json_object_new_boolean(true));
        if (e2b_api_json(&ev->api, "POST", t.data, body, &out, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
}

/* ---- watching by polling ---- */

static bool bool_field(json_object *o, const char *k)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_boolean) &&
               json_object_get_boolean(v);
}

/* Adds dir's entries to snap under prefix ("" at the top), descending
 * depth-1 more levels. */
static int snapshot_into(e2b_envd *ev, const char *dir, const char *prefix, int depth, json_object *snap,
                         sp_error **err)
{
        _cleanup_buf_ sp_buf t = SP_BUF_INIT;
        target_for(&t, ev->sandbox_id, "list?limit=10000&path=");
        e2b_url_escape(&t, dir);
        user_query(&t, ev);
        _cleanup_json_ json_object *l = NULL;
        json_object *items = NULL;
        if (e2b_api_json(&ev->api, "GET", t.data, NULL, &l, err) < 0)
                return -1;
        if (!json_object_object_get_ex(l, "entries", &items) || !json_object_is_type(items, json_type_array))
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered no entries");
        for (size_t i = 0; i < json_object_array_length(items); i++) {
                json_object *st = json_object_array_get_idx(items, i);
                const char *name = sp_json_member_str(st, "name"), *type = sp_json_member_str(st, "type"),
                           *p = sp_json_member_str(st, "path");
                if (!name || !*name)
                        continue;
                if (json_object_object_length(snap) >= MAX_ENTRIES)
                        return sp_error_set(err, SP_E_LIMIT, "more than %d entries to watch", MAX_ENTRIES);
                _cleanup_free_ char *rel = NULL;
                if (asprintf(&rel, "%s%s%s", prefix, *prefix ? "/" : "", name) < 0)
                        abort();
                json_object_object_add(snap, rel, entry_info(st));
                if (depth > 1 && type && p && strcmp(type, "dir") == 0 &&
                    snapshot_into(ev, p, rel, depth - 1, snap, err) < 0)
                        return -1;
        }
        return 0;
}

/* A new snapshot of path (a directory: not_found when missing, and
 * invalid_argument when not a directory, as envd answers). */
static int snapshot(e2b_envd *ev, const char *path, bool recursive, json_object **ret, sp_error **err)
{
        _cleanup_json_ json_object *st = NULL, *snap = json_object_new_object();
        if (stat_path(ev, path, &st, err) < 0)
                return -1;
        const char *type = sp_json_member_str(st, "type");
        if (!type || strcmp(type, "dir") != 0)
                return sp_error_set(err, SP_E_INVALID, "path %s is not a directory", path);
        if (snapshot_into(ev, path, "", recursive ? E2B_REQUEST_MAX_DEPTH : 1, snap, err) < 0)
                return -1;
        *ret = TAKE_PTR(snap);
        return 0;
}

static void add_event(json_object *events, const char *name, const char *type, json_object *entry)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(name));
        json_object_object_add(o, "type", json_object_new_string(type));
        if (entry)
                json_object_object_add(o, "entry", json_object_get(entry));
        json_object_array_add(events, o);
}

static bool field_differs(json_object *a, json_object *b, const char *k)
{
        json_object *x = NULL, *y = NULL;
        bool hx = json_object_object_get_ex(a, k, &x), hy = json_object_object_get_ex(b, k, &y);
        return hx != hy || (hx && strcmp(json_object_get_string(x), json_object_get_string(y)) != 0);
}

/* Appends to events the FilesystemEvents that turn snapshot old into cur:
 * REMOVE for a name gone (or whose type changed), CREATE for a new one,
 * WRITE for a file whose size or mtime changed, CHMOD for a new mode. */
static void diff(json_object *old, json_object *cur, bool include_entry, json_object *events)
{
        {
                json_object_object_foreach (old, name, o) {
                        json_object *c = NULL;
                        if (!json_object_object_get_ex(cur, name, &c) || field_differs(o, c, "type"))
                                add_event(events, name, "EVENT_TYPE_REMOVE", NULL);
                }
        }
        json_object_object_foreach (cur, name, c) {
                json_object *o = NULL, *entry = include_entry ? c : NULL;
                if (!json_object_object_get_ex(old, name, &o) || field_differs(o, c, "type")) {
                        add_event(events, name, "EVENT_TYPE_CREATE", entry);
                        continue;
                }
                if (strcmp(sp_json_member_str(c, "type"), "FILE_TYPE_DIRECTORY") != 0 &&
                    (field_differs(o, c, "size") || field_differs(o, c, "modifiedTime")))
                        add_event(events, name, "EVENT_TYPE_WRITE", entry);
                if (field_differs(o, c, "mode"))
                        add_event(events, name, "EVENT_TYPE_CHMOD", entry);
        }
}

static int send_response(e2b_call *call, const char *kind, json_object *value)
{
        _cleanup_json_ json_object *msg = json_object_new_object();
        json_object_object_add(msg, kind, value);
        return e2b_connect_stream_send(call, msg);
}

static double now_s(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* WatchDir: start, then the events of each poll, a keepalive after
 * WATCH_KEEPALIVE_S of silence; stops when the client goes away, and ends
 * the stream with the error of a failed poll (e.g. not_found once the
 * directory is gone). */
static void fs_watch_dir(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *snap = NULL;
        const char *path = NULL;
        bool recursive = bool_field(req, "recursive"), include_entry = bool_field(req, "includeEntry");
        if (e2b_connect_stream_begin(call) < 0)
                return;
        if (e2b_request_path(req, "path", &path, &e) < 0 || snapshot(ev, path, recursive, &snap, &e) < 0) {
                e2b_connect_stream_end(call, e);
                return;
        }
        if (send_response(call, "start", json_object_new_object()) < 0)
                return;
        double last_sent = now_s();
        for (;;) {
                struct timespec pause = {0, WATCH_POLL_MS * 1000000L};
                nanosleep(&pause, NULL);
                if (!e2b_call_connected(call))
                        return;
                _cleanup_json_ json_object *cur = NULL, *events = json_object_new_array();
                if (snapshot(ev, path, recursive, &cur, &e) < 0) {
                        e2b_connect_stream_end(call, e);
                        return;
                }
                diff(snap, cur, include_entry, events);
                json_object_put(snap);
                snap = TAKE_PTR(cur);
                for (size_t i = 0; i < json_object_array_length(events); i++) {
                        if (send_response(call, "filesystem", json_object_get(json_object_array_get_idx(events, i))) <
                            0)
                                return;
                        last_sent = now_s();
                }
                if (now_s() - last_sent >= WATCH_KEEPALIVE_S) {
                        if (send_response(call, "keepalive", json_object_new_object()) < 0)
                                return;
                        last_sent = now_s();
                }
        }
}

/* A watcher of CreateWatcher. busy: a GetWatcherEvents polls it (others
 * wait); removed: RemoveWatcher took it out of the table while busy, and
 * the poller frees it. It holds a unit of caps for caller until freed. */
typedef struct watcher {
        char id[SP_ID_MAX];
        char *sandbox_id, *path;
        bool recursive, include_entry, busy, removed;
        json_object *snap;
        double used;
        e2b_caps *caps;
        char caller[E2B_CAPS_CALLER_LEN + 1];
} watcher;

/* The table: nwatchers slots, NULL where free; its size is bounded by the
 * watchers cap. */
static pthread_mutex_t watchers_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watchers_cv = PTHREAD_COND_INITIALIZER;
static watcher **watchers;
static size_t nwatchers;

static void watcher_free(watcher *w)
{
        if (w->caps)
                e2b_caps_give(w->caps, E2B_CAP_WATCHERS, w->caller);
        json_object_put(w->snap);
        free(w->sandbox_id);
        free(w->path);
        free(w);
}

/* The slot of the sandbox's watcher id, or -1. Under watchers_mu. */
static int watcher_find(const char *sandbox_id, const char *id)
{
        for (int i = 0; i < (int)nwatchers; i++)
                if (watchers[i] && strcmp(watchers[i]->id, id) == 0 && strcmp(watchers[i]->sandbox_id, sandbox_id) == 0)
                        return i;
        return -1;
}

/* Drops watchers not polled for WATCHER_IDLE_S. Under watchers_mu. */
static void watchers_expire_locked(double now)
{
        for (size_t i = 0; i < nwatchers; i++)
                if (watchers[i] && !watchers[i]->busy && now - watchers[i]->used > WATCHER_IDLE_S) {
                        watcher_free(watchers[i]);
                        watchers[i] = NULL;
                }
}

/* Puts w into a free slot, growing the table when there is none (its size
 * stays bounded: every watcher in it holds a unit of the cap). Under
 * watchers_mu. */
static void watchers_insert_locked(watcher *w)
{
        for (size_t i = 0; i < nwatchers; i++)
                if (!watchers[i]) {
                        watchers[i] = w;
                        return;
                }
        size_t n = nwatchers ? nwatchers * 2 : 16;
        watcher **t = realloc(watchers, n * sizeof(*t));
        if (!t)
                abort();
        memset(t + nwatchers, 0, (n - nwatchers) * sizeof(*t));
        t[nwatchers] = w;
        watchers = t;
        nwatchers = n;
}

static void fs_create_watcher(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *snap = NULL, *out = json_object_new_object();
        const char *path = NULL;
        bool recursive = bool_field(req, "recursive");
        const char *caller = e2b_call_req(call)->caller;
        if (e2b_request_path(req, "path", &path, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        pthread_mutex_lock(&watchers_mu);
        watchers_expire_locked(now_s());
        pthread_mutex_unlock(&watchers_mu);
        if (e2b_caps_take(ev->ctx->caps, E2B_CAP_WATCHERS, caller, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        watcher *w = calloc(1, sizeof(*w));
        if (!w || !(w->sandbox_id = strdup(ev->sandbox_id)) || !(w->path = strdup(path)))
                abort();
        w->caps = ev->ctx->caps; /* from here on, watcher_free() gives the unit back */
        snprintf(w->caller, sizeof(w->caller), "%s", caller);
        if (snapshot(ev, path, recursive, &snap, &e) < 0 || sp_id_new("wch", w->id, &e) < 0) {
                watcher_free(w);
                e2b_connect_error(call, e);
                return;
        }
        w->recursive = recursive;
        w->include_entry = bool_field(req, "includeEntry");
        w->snap = TAKE_PTR(snap);
        w->used = now_s();
        json_object_object_add(out, "watcherId", json_object_new_string(w->id));
        pthread_mutex_lock(&watchers_mu);
        watchers_insert_locked(w);
        pthread_mutex_unlock(&watchers_mu);
        e2b_connect_reply(call, out);
}

static int watcher_id(json_object *req, const char **ret, sp_error **err)
{
        *ret = sp_json_member_str(req, "watcherId");
        if (!*ret || !**ret || strlen(*ret) >= SP_ID_MAX)
                return sp_error_set(err, SP_E_INVALID, "missing or malformed watcherId");
        return 0;
}

/* Takes the sandbox's watcher id for polling (waiting while another call
 * polls it), or NULL with not_found. */
static watcher *watcher_take(const char *sandbox_id, const char *id, sp_error **err)
{
        pthread_mutex_lock(&watchers_mu);
        int i;
        while ((i = watcher_find(sandbox_id, id)) >= 0 && watchers[i]->busy)
                pthread_cond_wait(&watchers_cv, &watchers_mu);
        watcher *w = i >= 0 ? watchers[i] : NULL;
        if (w)
                w->busy = true;
        pthread_mutex_unlock(&watchers_mu);
        if (!w)
                sp_error_set(err, SP_E_NOT_FOUND, "watcher with id %s not found", id);
        return w;
}

/* Gives back a taken watcher, with its new snapshot (taken) when non-NULL. */
static void watcher_give(watcher *w, json_object *snap)
{
        pthread_mutex_lock(&watchers_mu);
        if (snap) {
                json_object_put(w->snap);
                w->snap = snap;
        }
        w->busy = false;
        w->used = now_s();
        if (w->removed)
                watcher_free(w);
        pthread_cond_broadcast(&watchers_cv);
        pthread_mutex_unlock(&watchers_mu);
}

static void fs_get_watcher_events(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *cur = NULL, *events = json_object_new_array(), *out = json_object_new_object();
        const char *id = NULL;
        watcher *w = NULL;
        if (watcher_id(req, &id, &e) < 0 || !(w = watcher_take(ev->sandbox_id, id, &e))) {
                e2b_connect_error(call, e);
                return;
        }
        if (snapshot(ev, w->path, w->recursive, &cur, &e) < 0) {
                watcher_give(w, NULL);
                e2b_connect_error(call, e);
                return;
        }
        diff(w->snap, cur, w->include_entry, events);
        watcher_give(w, TAKE_PTR(cur));
        size_t n = json_object_array_length(events);
        if (n > MAX_WATCHER_EVENTS)
                json_object_array_del_idx(events, 0, n - MAX_WATCHER_EVENTS);
        json_object_object_add(out, "events", TAKE_PTR(events));
        e2b_connect_reply(call, out);
}

static void fs_remove_watcher(e2b_call *call, e2b_envd *ev, json_object *req)
{
        _cleanup_error_ sp_error *e = NULL;
        const char *id = NULL;
        if (watcher_id(req, &id, &e) < 0) {
                e2b_connect_error(call, e);
                return;
        }
        pthread_mutex_lock(&watchers_mu);
        int i = watcher_find(ev->sandbox_id, id);
        if (i >= 0) {
                if (watchers[i]->busy)
                        watchers[i]->removed = true;
                else
                        watcher_free(watchers[i]);
                watchers[i] = NULL;
        }
        pthread_mutex_unlock(&watchers_mu);
        if (i < 0) {
                sp_error_set(&e, SP_E_NOT_FOUND, "watcher with id %s not found", id);
                e2b_connect_error(call, e);
                return;
        }
        e2b_call_reply(call, 200, "application/json", NULL, "{}", 2);
}

/* ---- dispatch ---- */

typedef void (*fs_method)(e2b_call *call, e2b_envd *ev, json_object *req);

/* Authenticates and parses, then runs a unary method (stream false) or a
 * server stream (stream true: errors before the method go in the stream's
 * end). */
static void run(e2b_call *call, const e2b_ctx *ctx, bool stream, fs_method m)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *req = NULL;
        e2b_envd ev;
        if (e2b_envd_open(call, ctx, &ev, &e) < 0 || e2b_connect_request(call, stream, &req, &e) < 0) {
                if (stream && e2b_connect_stream_begin(call) == 0)
                        e2b_connect_stream_end(call, e);
                else if (!stream)
                        e2b_connect_error(call, e);
        } else {
                m(call, &ev, req);
        }
        e2b_envd_close(&ev);
}

#define METHOD(name, stream, fn) \
        static void name(e2b_call *call, void *userdata) \
        { \
                run(call, userdata, stream, fn); \
        }
METHOD(rpc_stat, false, fs_stat)
METHOD(rpc_list_dir, false, fs_list_dir)
METHOD(rpc_make_dir, false, fs_make_dir)
METHOD(rpc_move, false, fs_move)
METHOD(rpc_remove, false, fs_remove)
METHOD(rpc_watch_dir, true, fs_watch_dir)
METHOD(rpc_create_watcher, false, fs_create_watcher)
METHOD(rpc_get_watcher_events, false, fs_get_watcher_events)
METHOD(rpc_remove_watcher, false, fs_remove_watcher)

static const e2b_route routes[] = {
        {"POST", "/filesystem.Filesystem/Stat", rpc_stat, false, 0},
        {"POST", "/filesystem.Filesystem/ListDir", rpc_list_dir, false, 0},
        {"POST", "/filesystem.Filesystem/MakeDir", rpc_make_dir, false, 0},
        {"POST", "/filesystem.Filesystem/Move", rpc_move, false, 0},
        {"POST", "/filesystem.Filesystem/Remove", rpc_remove, false, 0},
        {"POST", "/filesystem.Filesystem/WatchDir", rpc_watch_dir, false, 0},
        {"POST", "/filesystem.Filesystem/CreateWatcher", rpc_create_watcher, false, 0},
        {"POST", "/filesystem.Filesystem/GetWatcherEvents", rpc_get_watcher_events, false, 0},
        {"POST", "/filesystem.Filesystem/RemoveWatcher", rpc_remove_watcher, false, 0},
};

int e2b_filesystem_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err)
{
        return e2b_routes_add(ctx, srv, routes, SP_ARRAY_SIZE(routes), false, err);
}
