/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker fleet under the control plane, against the real daemons
 * (PostgreSQL, space-controlplane, space-worker with the jail backend):
 *
 *   drain        an empty worker reads "drained" at once; a worker whose
 *                sandboxes no other worker may take (all cordoned) is
 *                emptied of nothing: its running and paused sandboxes are
 *                suspended, wanted as they were, their wakes elsewhere wait
 *                saying why (its "drain" lists them), it stays "draining",
 *                nothing new lands on it, a delete cancels a waiting wake,
 *                and uncordon wakes the rest there (moves themselves:
 *                test_cp_move.c);
 *   unreachable  a worker SIGKILLed: it turns unreachable, its sandboxes stay
 *                recorded with worker_reachable:false, a pause waits (saying
 *                why) and completes once the worker is back, deletes of a
 *                sandbox and of a template complete at once, and the
 *                restarted worker re-adopts its sandboxes and drops the
 *                deleted sandbox and template;
 *   quarantine   a worker whose storage went read-only fails creates until it
 *                is quarantined; the creates land elsewhere, the scheduler
 *                avoids it, and an operator lifts the quarantine;
 *   templates    a template built from a directory through the API (by an
 *                admin, for a tenant, from the workers' import root) is ready
 *                on every worker, runs a sandbox on each, cannot be deleted
 *                while used, and leaves every worker once deleted.
 *
 * Each case has its own cluster (an unchecked fixture): they change workers'
 * states, kill them, and restart them from the forked test, where a
 * restarted worker dies with the test. Needs root, btrfs and PostgreSQL.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "harness.h"
#include "launcher.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;

/* Polls cond every 100 ms for at most secs seconds, then fails with the message. */
#define WAIT_UNTIL(cond, secs, ...) \
        do { \
                int64_t wait_deadline_ = sp_now_mono_us() + (int64_t)(secs)*1000000; \
                while (!(cond)) { \
                        ck_assert_msg(sp_now_mono_us() < wait_deadline_, __VA_ARGS__); \
                        usleep(100 * 1000); \
                } \
        } while (0)

static json_object *api(const char *key, const char *method, const char *path, int want_status, const char *body)
{
        return sp_test_api(&S, key, method, path, want_status, body, NULL);
}

static void copy_str(char *out, size_t n, const char *s)
{
        snprintf(out, n, "%s", s ? s : "");
}

/* ---- workers ---- */

/* The id of worker node-<i>. */
static void worker_id(int i, char id[static 64])
{
        char name[16];
        snprintf(name, sizeof(name), "node-%d", i);
        _cleanup_json_ json_object *ws = api(S.admin_key, "GET", "/v1/workers", 200, NULL);
        json_object *arr = sp_test_jarr(ws, "workers");
        for (size_t k = 0; k < json_object_array_length(arr); k++) {
                json_object *w = json_object_array_get_idx(arr, k);
                if (strcmp(sp_test_jstr(w, "name"), name) == 0) {
                        copy_str(id, 64, sp_test_jstr(w, "id"));
                        return;
                }
        }
        ck_abort_msg("no worker %s in %s", name, json_object_to_json_string(ws));
}

static json_object *worker_get(const char *wid)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/workers/%s", wid);
        return api(S.admin_key, "GET", path, 200, NULL);
}

/* A field of the worker (a dotted path) into out; "" when null. */
static const char *worker_field(const char *wid, const char *field, char *out, size_t n)
{
        _cleanup_json_ json_object *w = worker_get(wid);
        copy_str(out, n, sp_test_jstr(w, field));
        return out;
}

static bool worker_is(const char *wid, const char *field, const char *want)
{
        char v[128];
        return strcmp(worker_field(wid, field, v, sizeof(v)), want) == 0;
}

/* POSTs /v1/workers/{id}/<verb> and checks the answer's state. */
static void worker_verb(const char *wid, const char *verb, const char *want_state)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/workers/%s/%s", wid, verb);
        _cleanup_json_ json_object *w = api(S.admin_key, "POST", path, 200, NULL);
        ck_assert_msg(strcmp(sp_test_jstr(w, "state"), want_state) == 0, "%s %s: %s", verb, wid,
                      json_object_to_json_string(w));
}

/* Whether the worker's last heartbeat lists sandbox sbx (in state, or in any when NULL). */
static bool worker_holds(const char *wid, const char *sbx, const char *state)
{
        _cleanup_json_ json_object *w = worker_get(wid);
        json_object *obs = NULL, *arr = NULL;
        if (!json_object_object_get_ex(w, "observed", &obs) || !json_object_object_get_ex(obs, "sandboxes", &arr))
                return false;
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                json_object *s = json_object_array_get_idx(arr, i);
                if (strcmp(sp_test_jstr(s, "id"), sbx) == 0)
                        return !state || strcmp(sp_test_jstr(s, "state"), state) == 0;
        }
        return false;
}

/* How many sandboxes the worker's last heartbeat lists in one of the states
 * that hold resources (creating, running, paused). */
static int worker_live(const char *wid)
{
        _cleanup_json_ json_object *w = worker_get(wid);
        json_object *obs = NULL, *arr = NULL;
        if (!json_object_object_get_ex(w, "observed", &obs) || !json_object_object_get_ex(obs, "sandboxes", &arr))
                return 0;
        int n = 0;
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                const char *st = sp_test_jstr(json_object_array_get_idx(arr, i), "state");
                if (strcmp(st, "creating") == 0 || strcmp(st, "running") == 0 || strcmp(st, "paused") == 0)
                        n++;
        }
        return n;
}

/* Whether the worker's last heartbeat lists template tpl. */
static bool worker_has_template(const char *wid, const char *tpl)
{
        _cleanup_json_ json_object *w = worker_get(wid);
        json_object *obs = NULL, *arr = NULL;
        if (!json_object_object_get_ex(w, "observed", &obs) || !json_object_object_get_ex(obs, "templates", &arr))
                return false;
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                if (strcmp(json_object_get_string(json_object_array_get_idx(arr, i)), tpl) == 0)
                        return true;
        return false;
}

/* ---- sandboxes and operations ---- */

/* A field of the tenant's sandbox into out; "" when null. */
static const char *sandbox_field(const char *key, const char *id, const char *field, char *out, size_t n)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *s = api(key, "GET", path, 200, NULL);
        copy_str(out, n, sp_test_jstr(s, field));
        return out;
}

static bool sandbox_is(const char *key, const char *id, const char *field, const char *want)
{
        char v[512];
        return strcmp(sandbox_field(key, id, field, v, sizeof(v)), want) == 0;
}

/* Creates a sandbox of template tpl and waits until it runs; writes its id. */
static void create(const char *key, const char *tpl, char id[static 64])
{
        char body[200];
        snprintf(body, sizeof(body), "{\"template\":\"%s\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}", tpl);
        sp_test_create_sandbox(&S, key, body, id);
}

/* Starts a create without waiting: writes the sandbox's and operation's ids. */
static void create_async(const char *key, char id[static 64], char op[static 64])
{
        _cleanup_json_ json_object *r = api(key, "POST", "/v1/sandboxes", 202,
                                            "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,"
                                            "\"cpu_millis\":100}}");
        copy_str(id, 64, sp_test_jstr(r, "sandbox.id"));
        copy_str(op, 64, sp_test_jstr(r, "operation.id"));
}

/* POSTs a lifecycle verb and returns (without waiting) its operation id. */
static void verb_async(const char *key, const char *id, const char *verb, char op[static 64])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
        _cleanup_json_ json_object *r = api(key, "POST", path, 202, NULL);
        copy_str(op, 64, sp_test_jstr(r, "operation.id"));
}

static void delete_sandbox(const char *key, const char *id)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *r = api(key, "DELETE", path, 202, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(r, "operation.id"), true));
        json_object_put(api(key, "GET", path, 404, NULL));
}

/* A field of an operation (no long poll) into out; "" when null. */
static const char *op_field(const char *key, const char *op, const char *field, char *out, size_t n)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s", op);
        _cleanup_json_ json_object *o = api(key, "GET", path, 200, NULL);
        copy_str(out, n, sp_test_jstr(o, field));
        return out;
}

/* The tenant id of API key key. */
static void tenant_of(const char *key, char id[static 64])
{
        _cleanup_json_ json_object *ks = api(key, "GET", "/v1/keys", 200, NULL);
        json_object *arr = sp_test_jarr(ks, "keys");
        ck_assert_int_gt(json_object_array_length(arr), 0);
        copy_str(id, 64, sp_test_jstr(json_object_array_get_idx(arr, 0), "tenant_id"));
}

/* Builds template `name` for the tenant of key through the API (a directory
 * source is for admins, under the workers' import root) from a copy of
 * node-0's base template with a file of ours (/etc/marker: "hello"); waits
 * until it is ready and writes its id (its name on the workers). */
static void template_build(const char *key, const char *name, char tpl[static 64])
{
        char src[700], cmd[3000], body[1000], tenant[64];
        tenant_of(key, tenant);
        snprintf(src, sizeof(src), "%s/import/src-%s", S.dir, name);
        snprintf(cmd, sizeof(cmd),
                 "rm -rf %s && cp -a %s/w0/storage/templates/base/rootfs %s && echo hello > %s/etc/marker", src, S.dir,
                 src, src);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(body, sizeof(body), "{\"name\":\"%s\",\"source\":\"dir\",\"path\":\"%s\"}", name, src);
        /* A tenant may not name a host path. */
        json_object_put(api(key, "POST", "/v1/templates", 403, body));
        snprintf(body, sizeof(body), "{\"name\":\"%s\",\"source\":\"dir\",\"path\":\"%s\",\"tenant_id\":\"%s\"}", name,
                 src, tenant);
        _cleanup_json_ json_object *r = api(S.admin_key, "POST", "/v1/templates", 202, body);
        ck_assert_str_eq(sp_test_jstr(r, "template.state"), "building");
        ck_assert_str_eq(sp_test_jstr(r, "operation.kind"), "template_build");
        copy_str(tpl, 64, sp_test_jstr(r, "template.id"));
        json_object_put(sp_test_wait_op(&S, S.admin_key, sp_test_jstr(r, "operation.id"), true));
        char path[128];
        snprintf(path, sizeof(path), "/v1/templates/%s", name);
        _cleanup_json_ json_object *t = api(key, "GET", path, 200, NULL);
        ck_assert_str_eq(sp_test_jstr(t, "state"), "ready");
        ck_assert_str_eq(sp_test_jstr(t, "source"), "dir");
}

/* Deletes template `name` through the API and waits for the operation. */
static void template_delete(const char *key, const char *name)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/templates/%s", name);
        _cleanup_json_ json_object *del = api(key, "DELETE", path, 202, NULL);
        ck_assert_str_eq(sp_test_jstr(del, "operation.kind"), "template_delete");
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        json_object_put(api(key, "GET", path, 404, NULL));
}

static void cluster_up(int workers)
{
        sp_test_space_opts o = {.workers = workers};
        sp_test_space_up(&S, &o);
}

static void cluster_up3(void)
{
        cluster_up(3);
}

static void cluster_up2(void)
{
        cluster_up(2);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* ---- drain ---- */

/* The current operation of a sandbox left on a draining worker (its entry
 * in the worker's drain.left), field by field into out; "" when it has none. */
static const char *left_field(const char *wid, const char *sbx, const char *field, char *out, size_t n)
{
        _cleanup_json_ json_object *w = worker_get(wid);
        json_object *drain = NULL, *left = NULL;
        out[0] = '\0';
        if (!json_object_object_get_ex(w, "drain", &drain) || !drain ||
            !json_object_object_get_ex(drain, "left", &left))
                return out;
        for (size_t i = 0; i < json_object_array_length(left); i++) {
                json_object *e = json_object_array_get_idx(left, i);
                if (strcmp(sp_test_jstr(e, "id"), sbx) == 0)
                        copy_str(out, n, sp_test_jstr(e, field));
        }
        return out;
}

static bool waits_for_room(const char *wid, const char *sbx)
{
        char msg[1024];
        left_field(wid, sbx, "message", msg, sizeof(msg));
        return strstr(msg, "cannot move it yet") != NULL;
}

START_TEST(drain_without_room_keeps_sandboxes_and_says_why)
{
        char key[256], w[3][64];
        sp_test_new_tenant(&S, "drain", key);
        for (int i = 0; i < 3; i++)
                worker_id(i, w[i]);
        /* An empty worker drains at once; cordoned again, it stays so. */
        worker_verb(w[1], "drain", "drained");
        worker_verb(w[1], "cordon", "cordoned");
        /* Only node-0 takes sandboxes: a running and a paused one there. */
        worker_verb(w[2], "cordon", "cordoned");
        char run[64], paused[64], state[32], where[64];
        create(key, "base", run);
        create(key, "base", paused);
        sp_test_sandbox_action(&S, key, paused, "pause", state);
        ck_assert_str_eq(state, "paused");
        sp_test_sandbox_worker(&S, key, run, where);
        ck_assert_str_eq(where, w[0]);
        sp_test_sandbox_worker(&S, key, paused, where);
        ck_assert_str_eq(where, w[0]);

        /* Drain node-0 while no other worker may take anything: its sandboxes
         * are suspended, wanted as they were, and their wakes elsewhere wait,
         * saying why; it holds them, so it is not drained. */
        char path[128];
        snprintf(path, sizeof(path), "/v1/workers/%s/drain", w[0]);
        _cleanup_json_ json_object *d = api(S.admin_key, "POST", path, 200, NULL);
        ck_assert_str_eq(sp_test_jstr(d, "admin_state"), "draining");
        ck_assert_str_eq(sp_test_jstr(d, "state"), "draining");
        ck_assert_str_eq(sp_test_jstr(d, "sandboxes"), "2");
        WAIT_UNTIL(sandbox_is(key, run, "state", "suspended") && sandbox_is(key, paused, "state", "suspended"), 30,
                   "the draining worker's sandboxes were not suspended");
        WAIT_UNTIL(waits_for_room(w[0], run) && waits_for_room(w[0], paused), 30,
                   "the drained sandboxes' wakes do not wait for room");
        ck_assert(sandbox_is(key, run, "desired_state", "running"));
        ck_assert(sandbox_is(key, paused, "desired_state", "paused"));
        char msg[1024], kind[32], op[64];
        left_field(w[0], run, "message", msg, sizeof(msg));
        ck_assert_msg(strstr(msg, "no other worker with the jail backend can take it") &&
                              strstr(msg, "node-1: cordoned") && strstr(msg, "node-2: cordoned") &&
                              strstr(msg, "node-0: excluded"),
                      "why it stays: %s", msg);
        ck_assert_str_eq(left_field(w[0], run, "operation_kind", kind, sizeof(kind)), "restore");
        left_field(w[0], run, "operation_id", op, sizeof(op));
        ck_assert(strstr(op_field(key, op, "message", msg, sizeof(msg)), "cannot move it yet") != NULL);
        ck_assert_str_eq(op_field(key, op, "state", msg, sizeof(msg)), "pending");
        ck_assert(worker_is(w[0], "state", "draining"));
        ck_assert(worker_is(w[0], "sandboxes", "2"));
        WAIT_UNTIL(worker_live(w[0]) == 0, 30, "node-0 still runs sandboxes");

        /* Nothing new lands on it. */
        char id[64], cop[64];
        create_async(key, id, cop);
        WAIT_UNTIL(strstr(op_field(key, cop, "message", msg, sizeof(msg)), "node-0: draining") != NULL, 30,
                   "a create while every worker is cordoned or draining: %s", msg);
        delete_sandbox(key, id);

        /* A delete does not wait behind a wake waiting for room: it cancels it. */
        char pop[64];
        left_field(w[0], paused, "operation_id", pop, sizeof(pop));
        delete_sandbox(key, paused);
        ck_assert_str_eq(op_field(key, pop, "state", msg, sizeof(msg)), "failed");
        ck_assert_msg(strstr(op_field(key, pop, "error.message", msg, sizeof(msg)), "cancelled"), "%s", msg);
        WAIT_UNTIL(worker_is(w[0], "sandboxes", "1"), 30, "node-0 still counts the deleted sandbox");

        /* Uncordoned, node-0 wakes the one left itself; new sandboxes land there again. */
        worker_verb(w[0], "uncordon", "ready");
        json_object_put(sp_test_wait_op(&S, key, op, true));
        ck_assert(sandbox_is(key, run, "state", "running"));
        sp_test_sandbox_worker(&S, key, run, where);
        ck_assert_str_eq(where, w[0]);
        WAIT_UNTIL(worker_holds(w[0], run, "running"), 30, "node-0 does not report the woken sandbox running");
        char again[64];
        create(key, "base", again);
        sp_test_sandbox_worker(&S, key, again, where);
        ck_assert_str_eq(where, w[0]);
        worker_verb(w[1], "uncordon", "ready");
        worker_verb(w[2], "uncordon", "ready");
        delete_sandbox(key, again);
        delete_sandbox(key, run);
        WAIT_UNTIL(!worker_holds(w[0], run, NULL) && !worker_holds(w[0], paused, NULL), 30,
                   "node-0 still holds deleted sandboxes");
}
END_TEST

/* ---- a worker killed ---- */

START_TEST(killed_worker_is_unreachable_then_recovers)
{
        char key[256], w[2][64];
        sp_test_new_tenant(&S, "kill", key);
        worker_id(0, w[0]);
        worker_id(1, w[1]);
        worker_verb(w[1], "cordon", "cordoned");
        char keep[64], gone[64], where[64];
        create(key, "base", keep);
        create(key, "base", gone);
        sp_test_sandbox_worker(&S, key, keep, where);
        ck_assert_str_eq(where, w[0]);
        WAIT_UNTIL(worker_holds(w[0], keep, "running") && worker_holds(w[0], gone, "running"), 30,
                   "node-0 does not report its sandboxes");
        worker_verb(w[1], "uncordon", "ready");
        /* A template on both workers, to be deleted while node-0 is down. */
        char tpl[64];
        template_build(key, "gone-tpl", tpl);
        WAIT_UNTIL(worker_has_template(w[0], tpl) && worker_has_template(w[1], tpl), 30,
                   "the template is not on both workers");

        /* SIGKILL to the daemon's whole process group. */
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&S.workers[0], &e), &e);
        /* 3 heartbeats of 500 ms and a 200 ms tick: well within 15 s. */
        WAIT_UNTIL(worker_is(w[0], "state", "unreachable"), 15, "node-0 was not marked unreachable");
        ck_assert(worker_is(w[0], "health", "unreachable"));
        /* Its sandboxes are still there, as last seen, marked unreachable. */
        ck_assert(sandbox_is(key, keep, "state", "running"));
        ck_assert(sandbox_is(key, keep, "worker_reachable", "false"));
        ck_assert(sandbox_is(key, gone, "worker_reachable", "false"));
        _cleanup_json_ json_object *list = api(key, "GET", "/v1/sandboxes", 200, NULL);
        ck_assert_int_eq(json_object_array_length(sp_test_jarr(list, "sandboxes")), 2);

        /* A pause waits for the worker and says so. */
        char pause_op[64], buf[512];
        verb_async(key, keep, "pause", pause_op);
        WAIT_UNTIL(strstr(op_field(key, pause_op, "message", buf, sizeof(buf)), "unreachable"), 15,
                   "the pause does not say it waits for an unreachable worker: %s", buf);
        ck_assert_str_eq(op_field(key, pause_op, "state", buf, sizeof(buf)), "pending");
        /* A delete completes while the worker is down: one long poll sees it done. */
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", gone);
        _cleanup_json_ json_object *del = api(key, "DELETE", path, 202, NULL);
        char poll[128];
        snprintf(poll, sizeof(poll), "/v1/operations/%s?wait=30", sp_test_jstr(del, "operation.id"));
        _cleanup_json_ json_object *done = api(key, "GET", poll, 200, NULL);
        ck_assert_msg(strcmp(sp_test_jstr(done, "state"), "succeeded") == 0, "the delete waits: %s",
                      json_object_to_json_string(done));
        json_object_put(api(key, "GET", path, 404, NULL));
        ck_assert(worker_is(w[0], "state", "unreachable"));
        /* So does a template's delete: the reachable worker drops it now. */
        template_delete(key, "gone-tpl");
        WAIT_UNTIL(!worker_has_template(w[1], tpl), 30, "node-1 still lists the deleted template");
        ck_assert(worker_has_template(w[0], tpl)); /* its last heartbeat, from before it died */

        /* The worker restarts on its state: it re-adopts the sandbox, the pause
         * completes, and the deleted one is removed from it. */
        sp_test_ok(sp_test_space_start_worker(&S, 0, &e), &e);
        WAIT_UNTIL(worker_is(w[0], "state", "ready"), 30, "node-0 did not come back");
        _cleanup_json_ json_object *op = sp_test_wait_op(&S, key, pause_op, true);
        ck_assert_str_eq(sp_test_jstr(op, "result.state"), "paused");
        ck_assert(sandbox_is(key, keep, "worker_reachable", "true"));
        char state[32];
        sp_test_sandbox_action(&S, key, keep, "resume", state);
        ck_assert_str_eq(state, "running");
        WAIT_UNTIL(worker_holds(w[0], keep, "running"), 30, "node-0 does not report the re-adopted sandbox running");
        WAIT_UNTIL(!worker_holds(w[0], gone, NULL), 30, "node-0 still holds the sandbox deleted while it was down");
        WAIT_UNTIL(!worker_has_template(w[0], tpl), 30, "node-0 still holds the template deleted while it was down");
        ck_assert(sandbox_is(key, keep, "state", "running"));
        delete_sandbox(key, keep);
}
END_TEST

/* ---- quarantine ---- */

/* Remounts worker i's storage read-only (or read-write again). */
static void storage_readonly(int i, bool ro)
{
        char path[700];
        snprintf(path, sizeof(path), "%s/w%d/storage", S.dir, i);
        ck_assert_msg(mount(NULL, path, NULL, MS_REMOUNT | (ro ? MS_RDONLY : 0), NULL) == 0, "remount %s: %m", path);
}

START_TEST(failing_worker_is_quarantined_and_lifted)
{
        enum { N = 5 };
        char key[256], w[3][64];
        sp_test_new_tenant(&S, "quar", key);
        for (int i = 0; i < 3; i++)
                worker_id(i, w[i]);
        /* node-0's storage goes read-only: every create there fails. */
        worker_verb(w[1], "cordon", "cordoned");
        worker_verb(w[2], "cordon", "cordoned");
        storage_readonly(0, true);
        char ids[N][64], ops[N][64];
        for (int i = 0; i < N; i++)
                create_async(key, ids[i], ops[i]);
        WAIT_UNTIL(worker_is(w[0], "health", "quarantined"), 60, "node-0 was not quarantined");
        storage_readonly(0, false);
        char reason[512];
        worker_field(w[0], "quarantine_reason", reason, sizeof(reason));
        ck_assert_msg(strstr(reason, "ead-only"), "quarantine_reason: %s", reason);
        /* Visible in the list. */
        _cleanup_json_ json_object *ws = api(S.admin_key, "GET", "/v1/workers", 200, NULL);
        ck_assert_ptr_nonnull(strstr(json_object_to_json_string(ws), "\"quarantined\""));
        /* The creates wait, saying why no worker takes them. */
        char msg[1024];
        WAIT_UNTIL(strstr(op_field(key, ops[0], "message", msg, sizeof(msg)), "node-0: quarantined"), 30,
                   "the create does not say node-0 is quarantined: %s", msg);
        ck_assert(sandbox_is(key, ids[0], "state", "creating"));

        /* With the others back, every create runs elsewhere. */
        worker_verb(w[1], "uncordon", "ready");
        worker_verb(w[2], "uncordon", "ready");
        char where[64];
        for (int i = 0; i < N; i++) {
                _cleanup_json_ json_object *op = sp_test_wait_op(&S, key, ops[i], true);
                ck_assert_str_eq(sp_test_jstr(op, "result.state"), "running");
                sp_test_sandbox_worker(&S, key, ids[i], where);
                ck_assert_str_ne(where, w[0]);
        }
        /* The scheduler avoids it though it is healthy again and the emptiest. */
        for (int i = 0; i < 3; i++) {
                char id[64];
                create(key, "base", id);
                sp_test_sandbox_worker(&S, key, id, where);
                ck_assert_str_ne(where, w[0]);
                delete_sandbox(key, id);
        }
        ck_assert(worker_is(w[0], "state", "quarantined"));
        /* No orphans of the failed attempts on node-0. */
        ck_assert_int_eq(worker_live(w[0]), 0);

        /* Tenants cannot lift it; an operator can. */
        char path[128];
        snprintf(path, sizeof(path), "/v1/workers/%s/unquarantine", w[0]);
        json_object_put(api(key, "POST", path, 403, NULL));
        worker_verb(w[0], "unquarantine", "ready");
        ck_assert(worker_is(w[0], "failures", "0"));
        worker_verb(w[1], "cordon", "cordoned");
        worker_verb(w[2], "cordon", "cordoned");
        char back[64];
        create(key, "base", back);
        sp_test_sandbox_worker(&S, key, back, where);
        ck_assert_str_eq(where, w[0]);
        worker_verb(w[1], "uncordon", "ready");
        worker_verb(w[2], "uncordon", "ready");
        delete_sandbox(key, back);
        for (int i = 0; i < N; i++)
                delete_sandbox(key, ids[i]);
}
END_TEST

/* ---- templates ---- */

START_TEST(template_from_a_directory_on_every_worker)
{
        char key[256], w[3][64];
        sp_test_new_tenant(&S, "tpl", key);
        for (int i = 0; i < 3; i++)
                worker_id(i, w[i]);
        char tpl[64], cmd[1000];
        template_build(key, "mine", tpl);
        for (int i = 0; i < 3; i++)
                WAIT_UNTIL(worker_has_template(w[i], tpl), 30, "node-%d does not list template %s", i, tpl);
        /* Another tenant neither sees nor uses it. */
        char other[256];
        sp_test_new_tenant(&S, "tpl-other", other);
        json_object_put(api(other, "GET", "/v1/templates/mine", 404, NULL));
        json_object_put(api(other, "POST", "/v1/sandboxes", 404, "{\"template\":\"mine\"}"));

        /* A sandbox of it on each worker (the others cordoned). */
        char ids[3][64], where[64];
        for (int i = 0; i < 3; i++) {
                for (int j = 0; j < 3; j++)
                        if (j != i)
                                worker_verb(w[j], "cordon", "cordoned");
                create(key, "mine", ids[i]);
                sp_test_sandbox_worker(&S, key, ids[i], where);
                ck_assert_str_eq(where, w[i]);
                ck_assert(sandbox_is(key, ids[i], "template", "mine"));
                for (int j = 0; j < 3; j++)
                        if (j != i)
                                worker_verb(w[j], "uncordon", "ready");
        }
        /* Its sandboxes' root filesystems are the template's (the worker's storage). */
        for (int i = 0; i < 3; i++) {
                snprintf(cmd, sizeof(cmd), "grep -qx hello %s/w%d/storage/sandboxes/*/rootfs/etc/marker", S.dir, i);
                ck_assert_msg(system(cmd) == 0, "node-%d: no sandbox carries the template's file", i);
        }

        /* In use: refused, and it stays. */
        _cleanup_json_ json_object *busy = api(key, "DELETE", "/v1/templates/mine", 409, NULL);
        ck_assert_ptr_nonnull(strstr(sp_test_jstr(busy, "error.message"), "used by"));
        for (int i = 0; i < 3; i++)
                delete_sandbox(key, ids[i]);
        template_delete(key, "mine");
        json_object_put(api(key, "POST", "/v1/sandboxes", 404, "{\"template\":\"mine\"}"));
        for (int i = 0; i < 3; i++)
                WAIT_UNTIL(!worker_has_template(w[i], tpl), 30, "node-%d still lists template %s", i, tpl);
        snprintf(cmd, sizeof(cmd), "ls -d %s/w*/storage/templates/%s 2>/dev/null | grep -q .", S.dir, tpl);
        ck_assert_msg(system(cmd) != 0, "a worker's storage still holds template %s", tpl);
        /* The name is free again. */
        char again[64];
        template_build(key, "mine", again);
        ck_assert_str_ne(again, tpl);
}
END_TEST

static TCase *tcase(const char *name, void (*up)(void), const TTest *test)
{
        TCase *tc = tcase_create(name);
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, up, cluster_down);
        tcase_add_test(tc, test);
        return tc;
}

static Suite *suite(void)
{
        Suite *s = suite_create("cp_workers");
        suite_add_tcase(s, tcase("drain", cluster_up3, drain_without_room_keeps_sandboxes_and_says_why));
        suite_add_tcase(s, tcase("unreachable", cluster_up2, killed_worker_is_unreachable_then_recovers));
        suite_add_tcase(s, tcase("quarantine", cluster_up3, failing_worker_is_quarantined_and_lifted));
        suite_add_tcase(s, tcase("templates", cluster_up3, template_from_a_directory_on_every_worker));
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
