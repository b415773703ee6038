/* SPDX-License-Identifier: Apache-2.0 */
/* Command sessions of the node's sandboxes: start with the sandbox's env and
 * a timeout, find, list, reload and re-attach after a restart. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/linkhash.h>

#include "node/node_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"

static void on_timeout(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_exec_slot *x = ud;
        sp_log_info_kv(SP_KV("sandbox_id", x->sb->id, "session_id", wk_session_id(x->session)),
                       "session timed out: killing its process tree");
        wk_session_kill(x->session, "time", NULL);
}

/* Why did it end? The agent knows the status; what encloses the sandbox knows
 * whether memory or disk ran out. */
static void explain_exit(wk_exec_slot *x, wk_session *s)
{
        const wk_session_exit *ex = wk_session_get_exit(s);
        wk_sandbox *sb = x->sb;
        wk_node *n = sb->node;
        if (!ex || ex->reason[0] || !sb->box)
                return;
        wk_box_stats st = {0};
        if ((ex->signal == 9 || ex->code == 137) && sb->backend->ops->stats(sb->box, &st, NULL) == 0 &&
            st.oom_kills > x->oom_kills_before) {
                wk_session_set_exit_reason(s, "memory", true, NULL);
                return;
        }
        if (ex->code != 0 && sb->disk_bytes > 0) {
                _cleanup_free_ char *rootfs = wk_storage_sandbox_rootfs(n->storage, sb->key, NULL);
                wk_quota_usage q = {0};
                if (rootfs && wk_subvol_sync(rootfs, NULL) == 0 && wk_quota_get(rootfs, &q, NULL) == 0 &&
                    q.max_exclusive && q.exclusive + (256u << 10) >= q.max_exclusive)
                        wk_session_set_exit_reason(s, "disk", false, NULL);
        }
}

static void on_state(wk_session *s, void *ud)
{
        wk_exec_slot *x = ud;
        if (wk_session_get_state(s) < WK_SESSION_EXITED)
                return;
        if (x->timeout)
                event_del(x->timeout);
        if (wk_session_get_state(s) == WK_SESSION_EXITED)
                explain_exit(x, s);
}

/* ---- the sandbox's budget for its sessions' logs ---- */

static void budget_reclaim(wk_session_budget *b, uint64_t need, wk_session *except, void *ud)
{
        wk_sandbox *sb = ud;
        uint64_t goal = b->used > need ? b->used - need : 0;
        /* Oldest first: execs are in the order the sessions were created. */
        for (size_t i = 0; i < sb->nexecs && b->used > goal; i++) {
                wk_session *s = sb->execs[i]->session;
                if (s == except || !wk_session_output_complete(s) || wk_session_reclaimed(s) ||
                    wk_session_charge(s) == 0)
                        continue;
                _cleanup_error_ sp_error *e = NULL;
                if (wk_session_reclaim(s, &e) < 0)
                        sp_log_warn_kv(SP_KV("sandbox_id", sb->id, "session_id", wk_session_id(s)),
                                       "reclaiming the session's output: %s", e->message);
                else
                        sp_log_info_kv(SP_KV("sandbox_id", sb->id, "session_id", wk_session_id(s)),
                                       "reclaimed the ended session's output log: the sandbox's session logs "
                                       "reached their budget");
        }
}

static void budget_kick(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_sandbox *sb = ud;
        for (size_t i = 0; i < sb->nexecs; i++)
                wk_session_kick(sb->execs[i]->session);
}

static void budget_freed(wk_session_budget *b, void *ud)
{
        (void)b;
        wk_sandbox *sb = ud;
        /* Later, on the loop: the session that freed bytes is in the middle of its own work. */
        if (sb->log_budget_kick)
                event_active(sb->log_budget_kick, 0, 0);
}

/* The sandbox's budget, set up on first use. */
static wk_session_budget *budget_of(wk_sandbox *sb)
{
        if (!sb->log_budget.userdata) {
                sb->log_budget = (wk_session_budget){.limit = (uint64_t)sb->node->cfg.session_log_budget,
                                                     .reclaim = budget_reclaim,
                                                     .freed = budget_freed,
                                                     .userdata = sb};
                sb->log_budget_kick = event_new(sb->node->base, -1, 0, budget_kick, sb);
        }
        return &sb->log_budget;
}

/* Sessions by id, over every sandbox: a lookup walked every kept session
 * (up to WK_MAX_SESSIONS_KEPT per sandbox) with strcmp on each exec, read
 * and attach. Keys are the sessions' own ids, which live as long as their
 * slots. */
static struct lh_table *session_index(wk_node *n)
{
        if (!n->session_index)
                n->session_index = lh_kchar_table_new(1024, NULL);
        return n->session_index;
}

void wk__session_unindex(wk_exec_slot *x)
{
        wk_node *n = x->sb->node;
        void *v = NULL;
        if (n->session_index && lh_table_lookup_ex(n->session_index, wk_session_id(x->session), &v) && v == x)
                lh_table_delete(n->session_index, wk_session_id(x->session));
}

static int add_slot(wk_sandbox *sb, wk_session *s, int64_t timeout_ms)
{
        struct lh_table *index = session_index(sb->node);
        if (!index)
                return -1;
        if (sb->nexecs == sb->cap_execs) {
                size_t cap = sb->cap_execs ? 2 * sb->cap_execs : 16;
                wk_exec_slot **grown = realloc(sb->execs, cap * sizeof(*grown));
                if (!grown)
                        return -1;
                sb->execs = grown;
                sb->cap_execs = cap;
        }
        /* An id is in the index once (an exec of a known id is refused before this). */
        if (lh_table_lookup_entry(index, wk_session_id(s)))
                return -1;
        wk_exec_slot *x = calloc(1, sizeof(*x));
        if (!x || lh_table_insert(index, wk_session_id(s), x) != 0) {
                free(x);
                return -1;
        }
        x->session = s;
        x->sb = sb;
        x->watch.on_state = on_state;
        x->watch.userdata = x;
        wk_session_watch_add(s, &x->watch);
        if (timeout_ms > 0) {
                x->timeout = evtimer_new(sb->node->base, on_timeout, x);
                struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
                evtimer_add(x->timeout, &tv);
        }
        sb->execs[sb->nexecs++] = x;
        return 0;
}

/* Ended, and its output given up: only its record (and exit) is kept. */
static bool retired(wk_session *s)
{
        return wk_session_get_state(s) >= WK_SESSION_EXITED && wk_session_output_complete(s) && wk_session_reclaimed(s);
}

/* Ended, its output all in, and nobody but the sandbox watches it (no attached reader, no call waiting). */
static bool idle_ended(wk_session *s)
{
        return wk_session_get_state(s) >= WK_SESSION_EXITED && wk_session_output_complete(s) &&
               wk_session_watch_count(s) == 1;
}

static void remove_slot(wk_sandbox *sb, size_t i)
{
        wk_exec_slot *x = sb->execs[i];
        wk__session_unindex(x);
        if (x->timeout)
                event_free(x->timeout);
        wk_session_watch_remove(x->session, &x->watch);
        _cleanup_error_ sp_error *e = NULL;
        if (wk_session_remove(x->session, &e) < 0)
                sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "removing a forgotten session's files: %s", e->message);
        free(x);
        memmove(&sb->execs[i], &sb->execs[i + 1], (sb->nexecs - i - 1) * sizeof(*sb->execs));
        sb->nexecs--;
}

/* Room for one more session (see WK_MAX_SESSIONS_PER_SANDBOX): retires the
 * oldest idle ended session with its output when the live ones are at their
 * limit, forgets the oldest idle retired one when all are. */
static int make_room(wk_sandbox *sb, sp_error **err)
{
        size_t live = 0;
        for (size_t i = 0; i < sb->nexecs; i++)
                live += !retired(sb->execs[i]->session);
        for (size_t i = 0; live >= WK_MAX_SESSIONS_PER_SANDBOX && i < sb->nexecs; i++) {
                wk_session *s = sb->execs[i]->session;
                if (retired(s) || !idle_ended(s) || wk_session_reclaim(s, NULL) < 0)
                        continue;
                live--;
                sp_log_info_kv(SP_KV("sandbox_id", sb->id, "session_id", wk_session_id(s)),
                               "retired the oldest ended session: its output is given up (its exit is kept) to "
                               "make room for a new one");
        }
        if (live >= WK_MAX_SESSIONS_PER_SANDBOX)
                return sp_error_set(err, SP_E_LIMIT,
                                    "sandbox %s has %d sessions running or being read; wait for some to end", sb->id,
                                    WK_MAX_SESSIONS_PER_SANDBOX);
        for (size_t i = 0; sb->nexecs >= WK_MAX_SESSIONS_KEPT && i < sb->nexecs; i++)
                if (retired(sb->execs[i]->session) && idle_ended(sb->execs[i]->session)) {
                        sp_log_info_kv(SP_KV("sandbox_id", sb->id, "session_id", wk_session_id(sb->execs[i]->session)),
                                       "forgot the oldest retired session: the sandbox keeps %d", WK_MAX_SESSIONS_KEPT);
                        remove_slot(sb, i);
                        break;
                }
        if (sb->nexecs >= WK_MAX_SESSIONS_KEPT)
                return sp_error_set(err, SP_E_LIMIT, "sandbox %s keeps %d sessions and none can be forgotten now",
                                    sb->id, WK_MAX_SESSIONS_KEPT);
        return 0;
}

static wk_exec_slot *find_slot(wk_node *n, const char *session_id, wk_sandbox **ret_sb)
{
        void *v = NULL;
        if (!n->session_index || !lh_table_lookup_ex(n->session_index, session_id, &v))
                return NULL;
        wk_exec_slot *x = v;
        if (ret_sb)
                *ret_sb = x->sb;
        return x;
}

wk_session *wk_node_session_find(wk_node *n, const char *session_id)
{
        wk_exec_slot *x = find_slot(n, session_id, NULL);
        return x && !x->sb->warm ? x->session : NULL;
}

/* A session's directory and its empty record, made ahead in the sandbox's
 * sessions/ as .spare and renamed into place by the next exec: making a
 * directory and a file is an inode allocation each, which on ext4 searches
 * past recently deleted inodes and was the worker's largest step between a
 * session's request and its acceptance (docs/performance.md). Made on the
 * loop a moment after an exec was answered; an exec that finds none makes
 * its own. Dot names are not sessions: the reload skips them. */
#define SPARE_DELAY_US 1000

static void spare_path(const wk_sandbox *sb, const char *name, char *out, size_t n)
{
        wk__path(out, n, "%s/sandboxes/%s/sessions/%s", sb->node->state_dir, sb->key, name);
}

static void spare_remove(const wk_sandbox *sb, const char *name)
{
        char dir[PATH_MAX], file[PATH_MAX];
        spare_path(sb, name, dir, sizeof(dir));
        wk__path(file, sizeof(file), "%s/session.json", dir);
        unlink(file);
        rmdir(dir);
}

static void make_spare(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_sandbox *sb = ud;
        char dir[PATH_MAX], tmp[PATH_MAX], file[PATH_MAX];
        spare_path(sb, WK_SESSION_SPARE, dir, sizeof(dir));
        if (access(dir, F_OK) == 0)
                return;
        spare_path(sb, WK_SESSION_SPARE_TMP, tmp, sizeof(tmp));
        wk__path(file, sizeof(file), "%s/session.json", tmp);
        int f = -1;
        if ((mkdir(tmp, 0700) < 0 && errno != EEXIST) || (f = open(file, O_WRONLY | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
            close(f) < 0 || rename(tmp, dir) < 0)
                spare_remove(sb, WK_SESSION_SPARE_TMP);
}

/* Takes the spare as dir, when there is one; then asks for the next. */
static void take_spare(wk_sandbox *sb, const char *dir)
{
        char spare[PATH_MAX];
        spare_path(sb, WK_SESSION_SPARE, spare, sizeof(spare));
        (void)rename(spare, dir);
        if (!sb->spare_timer)
                sb->spare_timer = evtimer_new(sb->node->base, make_spare, sb);
        struct timeval tv = {0, SPARE_DELAY_US};
        if (sb->spare_timer)
                evtimer_add(sb->spare_timer, &tv);
}

int wk_node_exec(wk_node *n, const char *sandbox_id, const char *session_id, json_object *req, int64_t timeout_ms,
                 wk_session **ret, sp_error **err)
{
        if (!sp_id_valid(session_id, NULL) || strlen(session_id) > WK_NAME_MAX)
                return sp_error_set(err, SP_E_INVALID, "invalid session id '%.64s'", session_id);
        if (find_slot(n, session_id, NULL))
                return sp_error_set(err, SP_E_CONFLICT, "session %s already exists", session_id);
        wk_agent_link *link = wk_node_agent(n, sandbox_id, err);
        if (!link)
                return sp_error_wrap(err, "exec");
        wk_sandbox *sb = wk_node_sandbox_find(n, sandbox_id);
        if (make_room(sb, err) < 0)
                return -SP_E_LIMIT;
        /* The sandbox's env, then the template's, under the request's own. */
        _cleanup_json_ json_object *exec = json_object_new_object();
        json_object_object_foreach (req, k, v)
                json_object_object_add(exec, k, json_object_get(v));
        json_object *env = json_object_new_object();
        wk_template *t = wk__template_find(n, sb->template_name);
        for (char **e = t ? t->meta->env : NULL; e && *e; e++) {
                char *eq = strchr(*e, '=');
                if (!eq)
                        continue;
                char key[256];
                snprintf(key, sizeof(key), "%.*s", (int)(eq - *e), *e);
                json_object_object_add(env, key, json_object_new_string(eq + 1));
        }
        if (sb->env) {
                json_object_object_foreach (sb->env, k2, v2)
                        json_object_object_add(env, k2, json_object_get(v2));
        }
        json_object *own = NULL;
        if (json_object_object_get_ex(req, "env", &own) && json_object_is_type(own, json_type_object)) {
                json_object_object_foreach (own, k3, v3)
                        json_object_object_add(env, k3, json_object_get(v3));
        }
        json_object_object_add(exec, "env", env);
        if (t && !json_object_object_get_ex(exec, "cwd", NULL) && t->meta->workdir[0])
                json_object_object_add(exec, "cwd", json_object_new_string(t->meta->workdir));

        char dir[PATH_MAX];
        wk__path(dir, sizeof(dir), "%s/sandboxes/%s/sessions/%s", n->state_dir, sb->key, session_id);
        take_spare(sb, dir);
        wk_session *s;
        if (wk_session_start(link, dir, session_id, sb->id, exec, (uint64_t)n->cfg.session_log_bytes, budget_of(sb), &s,
                             err) < 0)
                return sp_error_wrap(err, "exec in %s", sandbox_id);
        if (add_slot(sb, s, timeout_ms) < 0) {
                wk_session_remove(s, NULL);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        wk_box_stats st = {0};
        if (sb->box && sb->backend->ops->stats(sb->box, &st, NULL) == 0)
                sb->execs[sb->nexecs - 1]->oom_kills_before = st.oom_kills;
        *ret = s;
        return 0;
}

json_object *wk_node_sessions_json(wk_node *n, const char *sandbox_id)
{
        json_object *arr = json_object_new_array();
        wk_sandbox *sb = wk_node_sandbox_find(n, sandbox_id);
        for (size_t i = 0; sb && i < sb->nexecs; i++)
                json_object_array_add(arr, wk_session_to_json(sb->execs[i]->session));
        json_object *o = json_object_new_object();
        json_object_object_add(o, "sessions", arr);
        return o;
}

void wk__sessions_load(wk_sandbox *sb)
{
        char dir[PATH_MAX];
        wk__path(dir, sizeof(dir), "%s/sandboxes/%s/sessions", sb->node->state_dir, sb->key);
        _cleanup_closedir_ DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char sdir[PATH_MAX];
                wk__path(sdir, sizeof(sdir), "%s/%s", dir, de->d_name);
                wk_session *s;
                _cleanup_error_ sp_error *e = NULL;
                if (wk_session_load(sdir, (uint64_t)sb->node->cfg.session_log_bytes, budget_of(sb), &s, &e) < 0) {
                        sp_log_error_kv(SP_KV("sandbox_id", sb->id), "cannot load session %s: %s", de->d_name,
                                        e->message);
                        continue;
                }
                if (add_slot(sb, s, 0) < 0)
                        wk_session_free(s);
        }
}

void wk__sessions_attach(wk_sandbox *sb)
{
        for (size_t i = 0; i < sb->nexecs; i++) {
                wk_session *s = sb->execs[i]->session;
                if (wk_session_output_complete(s))
                        continue;
                _cleanup_error_ sp_error *e = NULL;
                if (wk_session_attach_agent(s, sb->link, &e) < 0)
                        sp_log_warn_kv(SP_KV("session_id", wk_session_id(s)), "re-attach: %s", e->message);
        }
}

void wk__sessions_detach(wk_sandbox *sb)
{
        for (size_t i = 0; i < sb->nexecs; i++)
                wk_session_detach_agent(sb->execs[i]->session);
}

void wk__sessions_lose(wk_sandbox *sb, const char *why)
{
        for (size_t i = 0; i < sb->nexecs; i++)
                wk_session_lose(sb->execs[i]->session, why);
}

void wk__sessions_remove_all(wk_sandbox *sb)
{
        for (size_t i = 0; i < sb->nexecs; i++) {
                wk_exec_slot *x = sb->execs[i];
                wk__session_unindex(x);
                if (x->timeout)
                        event_free(x->timeout);
                wk_session_watch_remove(x->session, &x->watch);
                wk_session_remove(x->session, NULL);
                free(x);
        }
        free(sb->execs);
        sb->execs = NULL;
        sb->nexecs = 0;
        sb->cap_execs = 0;
        /* No spare is made any more; the sandbox's files go with the spare (release_files). */
        if (sb->spare_timer)
                evtimer_del(sb->spare_timer);
}
