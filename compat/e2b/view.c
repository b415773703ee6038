/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's view of the public API's templates and of a sandbox's history (see
 * view.h).
 */
#include "view.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define CMD_MAX 256 /* bytes of a command shown in a log entry */

/* ---- templates ---- */

/* E2B's build status for our template state. */
static const char *build_status(const char *state)
{
        if (!state)
                return "waiting";
        if (strcmp(state, "ready") == 0)
                return "ready";
        if (strcmp(state, "failed") == 0)
                return "error";
        if (strcmp(state, "building") == 0)
                return "building";
        return "waiting";
}

json_object *e2b_view_template(json_object *tpl, const char *envd_version)
{
        const char *name = sp_json_member_str(tpl, "name"), *id = sp_json_member_str(tpl, "id"),
                   *state = sp_json_member_str(tpl, "state");
        const char *created = sp_json_member_str(tpl, "created_at");
        if (!name)
                return NULL;
        json_object *o = json_object_new_object(), *aliases = json_object_new_array(), *names = json_object_new_array(),
                    *pub = NULL;
        json_object_array_add(aliases, json_object_new_string(name));
        json_object_array_add(names, json_object_new_string(name));
        json_object_object_add(o, "templateID", json_object_new_string(name));
        json_object_object_add(o, "buildID", json_object_new_string(id ? id : name));
        json_object_object_add(o, "aliases", aliases);
        json_object_object_add(o, "names", names);
        json_object_object_add(o, "buildStatus", json_object_new_string(build_status(state)));
        json_object_object_add(o, "public",
                               json_object_new_boolean(json_object_object_get_ex(tpl, "public", &pub) &&
                                                       json_object_is_type(pub, json_type_boolean) &&
                                                       json_object_get_boolean(pub)));
        json_object_object_add(o, "cpuCount", json_object_new_int(E2B_VIEW_TEMPLATE_CPUS));
        json_object_object_add(o, "memoryMB", json_object_new_int(E2B_VIEW_TEMPLATE_MEMORY_MB));
        json_object_object_add(o, "diskSizeMB", json_object_new_int(E2B_VIEW_TEMPLATE_DISK_MB));
        json_object_object_add(o, "createdAt", json_object_new_string(created ? created : ""));
        json_object_object_add(o, "updatedAt", json_object_new_string(created ? created : ""));
        json_object_object_add(o, "createdBy", NULL);
        json_object_object_add(o, "lastSpawnedAt", NULL);
        json_object_object_add(o, "spawnCount", json_object_new_int(0));
        json_object_object_add(o, "buildCount", json_object_new_int(state && strcmp(state, "ready") == 0 ? 1 : 0));
        json_object_object_add(o, "envdVersion", json_object_new_string(envd_version ? envd_version : ""));
        return o;
}

/* ---- logs ---- */

void e2b_view_logs_init(e2b_view_logs *l)
{
        l->entries = json_object_new_array();
}

void e2b_view_logs_free(e2b_view_logs *l)
{
        json_object_put(l->entries);
        l->entries = NULL;
}

/* Adds an entry at the time ts (RFC 3339; nothing when it is absent or
 * does not parse); fields is taken over (NULL: none). */
static void add(e2b_view_logs *l, const char *ts, const char *level, const char *logger, const char *message,
                json_object *fields)
{
        int64_t us = 0;
        if (!ts || sp_time_parse_rfc3339(ts, &us, NULL) < 0) {
                json_object_put(fields);
                return;
        }
        json_object *e = json_object_new_object();
        json_object_object_add(e, "ts_us", json_object_new_int64(us));
        json_object_object_add(e, "level", json_object_new_string(level));
        json_object_object_add(e, "logger", json_object_new_string(logger));
        json_object_object_add(e, "message", json_object_new_string(message));
        json_object_object_add(e, "fields", fields ? fields : json_object_new_object());
        json_object_array_add(l->entries, e);
}

/* Copies field k of from into to, when it is there and not null. */
static void copy(json_object *to, const char *as, json_object *from, const char *k)
{
        json_object *v = NULL;
        if (json_object_object_get_ex(from, k, &v) && v)
                json_object_object_add(to, as, json_object_get(v));
}

void e2b_view_logs_sandbox(e2b_view_logs *l, json_object *sandbox)
{
        json_object *f = json_object_new_object();
        copy(f, "template", sandbox, "template");
        add(l, sp_json_member_str(sandbox, "created_at"), "info", "space.sandbox", "sandbox created", f);
        const char *state = sp_json_member_str(sandbox, "state");
        if (!state || strcmp(state, "running") == 0)
                return;
        char msg[64];
        snprintf(msg, sizeof(msg), "sandbox %.40s", state);
        f = json_object_new_object();
        copy(f, "state", sandbox, "state");
        copy(f, "desiredState", sandbox, "desired_state");
        copy(f, "status", sandbox, "status_message");
        add(l, sp_json_member_str(sandbox, "updated_at"), strcmp(state, "failed") == 0 ? "error" : "info",
            "space.sandbox", msg, f);
}

/* The session's command, its argv joined by spaces, cut at CMD_MAX bytes. */
static json_object *command(json_object *session)
{
        json_object *argv = NULL;
        if (!json_object_object_get_ex(session, "argv", &argv) || !json_object_is_type(argv, json_type_array))
                return NULL;
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        for (size_t i = 0; i < json_object_array_length(argv) && b.len <= CMD_MAX; i++) {
                json_object *a = json_object_array_get_idx(argv, i);
                if (!json_object_is_type(a, json_type_string))
                        continue;
                if (b.len)
                        sp_buf_append_str(&b, " ", NULL);
                sp_buf_append(&b, json_object_get_string(a), (size_t)json_object_get_string_len(a), NULL);
        }
        if (b.len > CMD_MAX) {
                size_t n = CMD_MAX;
                while (n > 0 && ((unsigned char)b.data[n] & 0xC0) == 0x80) /* not into a UTF-8 character */
                        n--;
                b.len = n;
                sp_buf_append_str(&b, "…", NULL);
        }
        return json_object_new_string_len(b.data ? b.data : "", (int)b.len);
}

void e2b_view_logs_session(e2b_view_logs *l, json_object *session)
{
        const char *started = sp_json_member_str(session, "started_at");
        json_object *f = json_object_new_object(), *cmd = command(session);
        copy(f, "pid", session, "pid");
        copy(f, "sessionID", session, "id");
        if (cmd)
                json_object_object_add(f, "cmd", cmd);
        copy(f, "user", session, "user");
        add(l, started ? started : sp_json_member_str(session, "created_at"), "info", "space.process",
            "process started", f);

        const char *state = sp_json_member_str(session, "state"), *ended = sp_json_member_str(session, "ended_at");
        if (!state || !ended)
                return;
        json_object *ex = NULL, *code = NULL, *v = NULL;
        f = json_object_new_object();
        copy(f, "pid", session, "pid");
        copy(f, "sessionID", session, "id");
        if (strcmp(state, "failed") == 0) {
                copy(f, "error", session, "error");
                add(l, ended, "error", "space.process", "process failed", f);
                return;
        }
        bool ok = false;
        if (json_object_object_get_ex(session, "exit", &ex) && json_object_is_type(ex, json_type_object)) {
                if (json_object_object_get_ex(ex, "code", &code) && json_object_is_type(code, json_type_int)) {
                        json_object_object_add(f, "exitCode", json_object_get(code));
                        ok = json_object_get_int64(code) == 0;
                }
                if (json_object_object_get_ex(ex, "signal", &v) && json_object_is_type(v, json_type_int) &&
                    json_object_get_int64(v) != 0) {
                        json_object_object_add(f, "signal", json_object_get(v));
                        ok = false;
                }
                copy(f, "reason", ex, "reason");
                if (json_object_object_get_ex(ex, "oom", &v) && json_object_get_boolean(v))
                        json_object_object_add(f, "oom", json_object_new_boolean(true));
        }
        add(l, ended, ok ? "info" : "warn", "space.process", "process exited", f);
}

typedef struct sorted {
        json_object *e;
        int64_t us;
        size_t i; /* the order entries were added in: ties keep it */
} sorted;

static int by_time(const void *a, const void *b)
{
        const sorted *x = a, *y = b;
        if (x->us != y->us)
                return x->us < y->us ? -1 : 1;
        return x->i < y->i ? -1 : x->i > y->i;
}

/* fields with every value a string (SandboxLogEntry.fields). */
static json_object *string_fields(json_object *fields)
{
        json_object *o = json_object_new_object();
        json_object_object_foreach (fields, k, v) {
                const char *s = json_object_is_type(v, json_type_string)
                                        ? json_object_get_string(v)
                                        : json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
                json_object_object_add(o, k, json_object_new_string(s));
        }
        return o;
}

json_object *e2b_view_logs_answer(const e2b_view_logs *l, int64_t start_ms, size_t limit)
{
        size_t n = json_object_array_length(l->entries), m = 0;
        sorted *s = calloc(n ? n : 1, sizeof(*s));
        if (!s)
                abort();
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(l->entries, i), *ts = NULL;
                json_object_object_get_ex(e, "ts_us", &ts);
                int64_t us = json_object_get_int64(ts);
                if (start_ms > 0 && us < start_ms * SP_USEC_PER_MSEC)
                        continue;
                s[m++] = (sorted){e, us, i};
        }
        qsort(s, m, sizeof(*s), by_time);
        json_object *out = json_object_new_object(), *logs = json_object_new_array(),
                    *entries = json_object_new_array();
        for (size_t i = 0; i < m && i < limit; i++) {
                json_object *e = s[i].e, *fields = NULL;
                char ts[32];
                sp_time_format_rfc3339(s[i].us, ts);
                json_object_object_get_ex(e, "fields", &fields);
                const char *level = sp_json_member_str(e, "level"), *message = sp_json_member_str(e, "message");
                _cleanup_json_ json_object *line = json_object_new_object();
                json_object_object_add(line, "level", json_object_new_string(level));
                json_object_object_add(line, "logger", json_object_new_string(sp_json_member_str(e, "logger")));
                json_object_object_add(line, "message", json_object_new_string(message));
                json_object_object_foreach (fields, k, v)
                        json_object_object_add(line, k, json_object_get(v));
                json_object *log = json_object_new_object();
                json_object_object_add(log, "timestamp", json_object_new_string(ts));
                json_object_object_add(log, "line", json_object_new_string(sp_json_str(line)));
                json_object_array_add(logs, log);
                json_object *entry = json_object_new_object();
                json_object_object_add(entry, "timestamp", json_object_new_string(ts));
                json_object_object_add(entry, "level", json_object_new_string(level));
                json_object_object_add(entry, "message", json_object_new_string(message));
                json_object_object_add(entry, "fields", string_fields(fields));
                json_object_array_add(entries, entry);
        }
        free(s);
        json_object_object_add(out, "logs", logs);
        json_object_object_add(out, "logEntries", entries);
        return out;
}
