/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Suspended sandboxes move between workers (DESIGN.md §5b; ctrl/move.c),
 * against the real daemons: PostgreSQL, space-controlplane and two
 * space-worker daemons with the jail backend (ExportSandbox on the worker
 * that holds a sandbox, ImportSandbox on the one that takes it, which
 * fetches the artifacts from the first):
 *
 *   wake      a suspended sandbox with a file of ours, on a worker that is
 *             then drained, is woken: the wake moves it (its operation says
 *             "moved from node-0 to node-1" and its result where it went),
 *             it runs on node-1 with the file, and node-0 reads "drained";
 *   drain     a drain empties node-0: a running and a paused sandbox run
 *             (are paused) again on node-1, a suspended and a stopped one are
 *             moved and stay so, each with its file and the state it was
 *             wanted in; node-0 reads "drained", holds none of them (its
 *             heartbeat) and its "drain" lists the moves; each move is
 *             recorded (sandbox_moves, the audit log, /metrics);
 *   spacectl  `spacectl worker drain node-0 --wait` prints where each
 *             sandbox went and that node-0 is drained; with --json, the
 *             summary.
 *
 * Each case has its own cluster (an unchecked fixture). Needs root, btrfs and
 * PostgreSQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "test_spacectl_util.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define MOVE_SECS 180 /* a move packs and copies a filesystem: generous, against a hang only */

static sp_test_space S;

/* Polls cond every 200 ms for at most secs seconds, then fails with the message. */
#define WAIT_UNTIL(cond, secs, ...) \
        do { \
                int64_t wait_deadline_ = sp_now_mono_us() + (int64_t)(secs)*1000000; \
                while (!(cond)) { \
                        ck_assert_msg(sp_now_mono_us() < wait_deadline_, __VA_ARGS__); \
                        usleep(200 * 1000); \
                } \
        } while (0)

static json_object *api(const char *key, const char *method, const char *path, int want_status, const char *body)
{
        return sp_test_api(&S, key, method, path, want_status, body, NULL);
}

static const char *path_of(const char *fmt, const char *a)
{
        static char bufs[4][512];
        static int n;
        char *b = bufs[n++ % 4];
        snprintf(b, 512, fmt, a);
        return b;
}

static void copy_str(char *out, size_t n, const char *s)
{
        snprintf(out, n, "%s", s ? s : "");
}

/* ---- workers ---- */

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
        return api(S.admin_key, "GET", path_of("/v1/workers/%s", wid), 200, NULL);
}

static bool worker_is(const char *wid, const char *field, const char *want)
{
        _cleanup_json_ json_object *w = worker_get(wid);
        const char *v = sp_test_jstr(w, field);
        return v && strcmp(v, want) == 0;
}

static void worker_verb(const char *wid, const char *verb)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/workers/%s/%s", wid, verb);
        json_object_put(api(S.admin_key, "POST", path, 200, NULL));
}

/* Whether the worker's last heartbeat lists sandbox sbx. */
static bool worker_holds(const char *wid, const char *sbx)
{
        _cleanup_json_ json_object *w = worker_get(wid);
        json_object *obs = NULL, *arr = NULL;
        if (!json_object_object_get_ex(w, "observed", &obs) || !json_object_object_get_ex(obs, "sandboxes", &arr))
                return false;
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                if (strcmp(sp_test_jstr(json_object_array_get_idx(arr, i), "id"), sbx) == 0)
                        return true;
        return false;
}

/* ---- sandboxes ---- */

static const char *sandbox_field(const char *key, const char *id, const char *field, char *out, size_t n)
{
        _cleanup_json_ json_object *s = api(key, "GET", path_of("/v1/sandboxes/%s", id), 200, NULL);
        copy_str(out, n, sp_test_jstr(s, field));
        return out;
}

static bool sandbox_is(const char *key, const char *id, const char *field, const char *want)
{
        char v[512];
        return strcmp(sandbox_field(key, id, field, v, sizeof(v)), want) == 0;
}

/* Runs command in sandbox id through the API and returns its exit code. */
static int run(const char *key, const char *id, const char *command)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "command", json_object_new_string(command));
        _cleanup_json_ json_object *r =
                api(key, "POST", path_of("/v1/sandboxes/%s/sessions", id), 201, json_object_to_json_string(body));
        char ses[64];
        copy_str(ses, sizeof(ses), sp_test_jstr(r, "session.id"));
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *s = api(key, "GET", path_of("/v1/sessions/%s", ses), 200, NULL);
                const char *st = sp_test_jstr(s, "state");
                if (strcmp(st, "exited") == 0)
                        return atoi(sp_test_jstr(s, "exit.code"));
                ck_assert_msg(strcmp(st, "failed") != 0, "%s in %s failed: %s", command, id,
                              json_object_to_json_string(s));
                ck_assert_msg(sp_now_mono_us() < deadline, "%s in %s never ended", command, id);
                usleep(100 * 1000);
        }
}

/* Writes a file of ours (its content: the sandbox's id) into sandbox id. */
static void write_marker(const char *key, const char *id)
{
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "mkdir -p /data && echo %s > /data/marker && sync", id);
        ck_assert_int_eq(run(key, id, cmd), 0);
}

/* Asserts that the file is there with its content, through a command and the files API. */
static void assert_marker(const char *key, const char *id)
{
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "grep -qx %s /data/marker", id);
        ck_assert_msg(run(key, id, cmd) == 0, "sandbox %s lost /data/marker", id);
        _cleanup_json_ json_object *st =
                api(key, "GET", path_of("/v1/sandboxes/%s/files/stat?path=/data/marker", id), 200, NULL);
        char size[24];
        snprintf(size, sizeof(size), "%zu", strlen(id) + 1); /* the id and a newline */
        ck_assert_str_eq(sp_test_jstr(st, "size"), size);
}

/* Processes the sandbox keeps across a suspend (a jail is checkpointed with
 * CRIU): a counter writing through a descriptor it opened once (/data/fd7)
 * and into /data/count, its numbers also over a TCP connection to a server
 * in the sandbox (/data/tcp), and a file in /dev/shm. */
static void start_kept_processes(const char *key, const char *id)
{
        ck_assert_int_eq(run(key, id,
                             "cat > /data/keep.sh <<'EOF'\n"
                             "echo kept > /dev/shm/mark\n"
                             "sleep 100000 | nc -l -p 5000 > /data/tcp &\n"
                             "sleep 0.3\n"
                             "exec 7>/data/fd7\n"
                             "echo $$ > /data/pid\n"
                             "i=0\n"
                             "while :; do i=$((i+1)); echo $i >&7; echo $i > /data/count; echo $i; sleep 0.1; done "
                             "| nc 127.0.0.1 5000\n"
                             "EOF\n"
                             "setsid sh /data/keep.sh >/dev/null 2>&1 </dev/null & sleep 1; test -s /data/count"),
                         0);
}

/* They went on: the same process (its pid), counting further, the connection still carrying its numbers, the
 * descriptor still at its place in its file, the file in /dev/shm there. */
static void assert_processes_kept(const char *key, const char *id)
{
        ck_assert_msg(run(key, id,
                          "p=$(cat /data/pid); a=$(cat /data/count); t=$(wc -l < /data/tcp); sleep 0.6; "
                          "b=$(cat /data/count); u=$(wc -l < /data/tcp); [ -d /proc/$p ] && [ $b -gt $a ] && "
                          "[ $u -gt $t ] && [ \"$(head -n1 /data/fd7)\" = 1 ] && [ $(wc -l < /data/fd7) -ge $a ] && "
                          "grep -qx kept /dev/shm/mark") == 0,
                      "sandbox %s lost its processes", id);
}

static void create_on_node0(const char *key, const char *w1, char id[static 64])
{
        worker_verb(w1, "cordon");
        sp_test_create_sandbox(&S, key, SANDBOX, id);
        worker_verb(w1, "uncordon");
}

static void action(const char *key, const char *id, const char *verb, const char *want)
{
        char state[32];
        sp_test_sandbox_action(&S, key, id, verb, state);
        ck_assert_str_eq(state, want);
}

/* Rows of sql (counting) for one parameter. */
static int count(const char *sql, const char *param)
{
        const char *p[] = {param};
        _cleanup_free_ char *n = sp_test_space_sql(&S, sql, 1, p);
        return atoi(n);
}

static int64_t metric(const char *needle)
{
        sp_test_http_response m;
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api, "GET", "/metrics", NULL, NULL, 10000, &m, &e), &e);
        ck_assert_int_eq(m.status, 200);
        /* The sample's line, not its HELP line, which names it too. */
        const char *at = m.body;
        while ((at = strstr(at, needle)) && at != m.body && at[-1] != '\n')
                at++;
        ck_assert_msg(at, "no %s in /metrics", needle);
        int64_t v = strtoll(at + strlen(needle), NULL, 10);
        sp_test_http_response_free(&m);
        return v;
}

static void cluster_up(void)
{
        /* Jails checkpointed with CRIU (opt-in: scripts/criu installs it, scripts/deps runs that). */
        static const char *const args[] = {"--criu=auto", NULL};
        sp_test_space_opts o = {.workers = 2, .worker_args = args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* A holder that lies (worker 0, its state altered while it was stopped, so
 * that it believes it): its record of sandbox id gives it an environment and
 * more CPU than the control plane did, which it would hand on with the
 * sandbox's artifacts. */
static void holder_lies(const char *id)
{
        sp_error *e = NULL;
        ck_assert_int_ge(sp_test_proc_stop(&S.workers[0], 10000, &e), 0);
        char path[1024];
        snprintf(path, sizeof(path), "%s/w0/state/sandboxes/%s/sandbox.json", S.dir, id);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        _cleanup_json_ json_object *o = NULL;
        sp_test_ok(sp_file_read(path, 1 << 20, &text, &e), &e);
        sp_test_ok(sp_json_parse(text.data, text.len, &o, &e), &e);
        json_object *env = json_object_new_object();
        json_object_object_add(env, "INJECTED", json_object_new_string("by-the-holder"));
        json_object_object_add(o, "env", env);
        json_object *res = NULL;
        ck_assert(json_object_object_get_ex(o, "resources", &res));
        json_object_object_add(res, "cpu_millis", json_object_new_int64(8000));
        const char *t = sp_json_str(o);
        sp_test_ok(sp_file_write_atomic(path, t, strlen(t), 0600, &e), &e);
        sp_test_ok(sp_test_space_start_worker(&S, 0, &e), &e);
}

/* ---- wake ---- */

START_TEST(wake_on_a_draining_worker_moves_it)
{
        char key[256], w0[64], w1[64], id[64];
        sp_test_new_tenant(&S, "movewake", key);
        worker_id(0, w0);
        worker_id(1, w1);
        create_on_node0(key, w1, id);
        write_marker(key, id);
        start_kept_processes(key, id);
        action(key, id, "suspend", "suspended");
        holder_lies(id);

        /* The drain would move it at once (a `move`): a failed drain
         * operation of a moment ago makes it leave the sandbox alone for a
         * minute, so that the wake is what moves it. */
        const char *p[] = {id};
        free(sp_test_space_sql(&S,
                               "INSERT INTO operations (id, tenant_id, kind, target_id, state, request, updated_at) "
                               "SELECT 'op_cooldowntest0000000001', tenant_id, 'move', id, 'failed', "
                               "'{\"drain\":true}', now() FROM sandboxes WHERE id = $1",
                               1, p));
        worker_verb(w0, "drain");
        usleep(1500 * 1000); /* a few ticks: the drain leaves it where it is */
        ck_assert(sandbox_is(key, id, "worker_id", w0));

        _cleanup_json_ json_object *r = api(key, "POST", path_of("/v1/sandboxes/%s/wake", id), 202, NULL);
        ck_assert_str_eq(sp_test_jstr(r, "operation.kind"), "restore");
        _cleanup_json_ json_object *op = sp_test_wait_op(&S, key, sp_test_jstr(r, "operation.id"), true);
        ck_assert_str_eq(sp_test_jstr(op, "result.state"), "running");
        ck_assert_str_eq(sp_test_jstr(op, "result.worker_id"), w1);
        ck_assert_str_eq(sp_test_jstr(op, "result.moved.from"), "node-0");
        ck_assert_str_eq(sp_test_jstr(op, "result.moved.to"), "node-1");
        ck_assert_str_eq(sp_test_jstr(op, "result.moved.to_worker_id"), w1);
        ck_assert_msg(strncmp(sp_test_jstr(op, "message"), "moved from node-0 to node-1 (", 29) == 0, "message: %s",
                      sp_test_jstr(op, "message"));
        ck_assert(sandbox_is(key, id, "state", "running"));
        ck_assert(sandbox_is(key, id, "worker_id", w1));
        char msg[256];
        ck_assert_str_eq(sandbox_field(key, id, "status_message", msg, sizeof(msg)), "moved from node-0 to node-1");
        assert_marker(key, id);
        /* Its processes came with it: checkpointed on node-0, restored on node-1 (another slot, cgroup parent). */
        assert_processes_kept(key, id);
        /* The importer took the control plane's word, not the holder's record. */
        ck_assert_msg(run(key, id, "test -z \"$INJECTED\"") == 0, "the holder's environment came with the sandbox");
        /* node-0 holds nothing now: drained, and its old copy is gone. */
        WAIT_UNTIL(worker_is(w0, "state", "drained"), 30, "node-0 never read drained");
        WAIT_UNTIL(!worker_holds(w0, id), 60, "node-0 still holds the moved sandbox");
        ck_assert_int_eq(count("SELECT count(*) FROM sandbox_moves WHERE sandbox_id = $1", id), 1);
}
END_TEST

/* ---- drain ---- */

START_TEST(drain_moves_every_sandbox)
{
        char key[256], w0[64], w1[64], running[64], paused[64], suspended[64], stopped[64];
        sp_test_new_tenant(&S, "movedrain", key);
        worker_id(0, w0);
        worker_id(1, w1);
        char *ids[] = {running, paused, suspended, stopped};
        for (int i = 0; i < 4; i++) {
                create_on_node0(key, w1, ids[i]);
                write_marker(key, ids[i]);
        }
        action(key, paused, "pause", "paused");
        action(key, suspended, "suspend", "suspended");
        action(key, stopped, "stop", "stopped");
        int64_t moved_before = metric("space_controlplane_sandbox_moves_total{result=\"moved\"} ");

        worker_verb(w0, "drain");
        WAIT_UNTIL(worker_is(w0, "state", "drained"), MOVE_SECS, "node-0 never read drained");
        ck_assert(worker_is(w0, "sandboxes", "0"));
        /* Each is on node-1, as it was wanted. */
        const char *want[] = {"running", "paused", "suspended", "stopped"};
        for (int i = 0; i < 4; i++) {
                WAIT_UNTIL(sandbox_is(key, ids[i], "state", want[i]), MOVE_SECS, "%s is not %s on node-1", ids[i],
                           want[i]);
                ck_assert(sandbox_is(key, ids[i], "worker_id", w1));
                ck_assert(sandbox_is(key, ids[i], "desired_state", want[i]));
                ck_assert_int_eq(count("SELECT count(*) FROM sandbox_moves WHERE sandbox_id = $1", ids[i]), 1);
                ck_assert_int_eq(
                        count("SELECT count(*) FROM audit_log WHERE action = 'sandbox.move' AND target = $1", ids[i]),
                        1);
        }
        char msg[256];
        sandbox_field(key, running, "status_message", msg, sizeof(msg));
        ck_assert_msg(strstr(msg, "moved from node-0 to node-1") && strstr(msg, "draining"), "status: %s", msg);
        /* node-0's drain lists the four moves; its heartbeat none of them. */
        _cleanup_json_ json_object *w = worker_get(w0);
        json_object *drain = json_object_object_get(w, "drain");
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(drain, "moved")), 4);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(drain, "left")), 0);
        for (int i = 0; i < 4; i++)
                WAIT_UNTIL(!worker_holds(w0, ids[i]), 60, "node-0 still holds %s", ids[i]);
        ck_assert_int_ge(metric("space_controlplane_sandbox_moves_total{result=\"moved\"} ") - moved_before, 4);
        ck_assert_int_gt(metric("space_controlplane_sandbox_move_bytes_total "), 0);

        /* Their files came with them. */
        assert_marker(key, running);
        action(key, paused, "resume", "running");
        assert_marker(key, paused);
        action(key, suspended, "wake", "running");
        assert_marker(key, suspended);
        action(key, stopped, "start", "running");
        assert_marker(key, stopped);
        for (int i = 0; i < 4; i++)
                ck_assert(sandbox_is(key, ids[i], "worker_id", w1));
}
END_TEST

/* ---- spacectl ---- */

START_TEST(spacectl_drain_wait_says_where_each_went)
{
        char key[256], w0[64], w1[64], running[64], suspended[64];
        sp_test_new_tenant(&S, "movectl", key);
        worker_id(0, w0);
        worker_id(1, w1);
        create_on_node0(key, w1, running);
        create_on_node0(key, w1, suspended);
        action(key, suspended, "suspend", "suspended");

        _cleanup_free_ char *dir = sp_test_tmpdir("movectl");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/config.json", dir);
        char endpoint[64], apikey[300];
        snprintf(endpoint, sizeof(endpoint), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api);
        snprintf(apikey, sizeof(apikey), "SPACE_API_KEY=%s", S.admin_key);
        const char *env[] = {endpoint, apikey, NULL};

        _cleanup_ctl_result_ ctl_result r =
                ctl_run(env, NULL, "worker", "drain", "node-0", "--wait", "--timeout", "4m", "--quiet", NULL);
        ctl_assert_code(r, 0);
        char line[200];
        snprintf(line, sizeof(line), "%s running on node-1\n", running);
        ck_assert_msg(strstr(r.out.data, line), "no \"%s\" in: %s", line, r.out.data);
        snprintf(line, sizeof(line), "%s moved to node-1 (suspended)\n", suspended);
        ck_assert_msg(strstr(r.out.data, line), "no \"%s\" in: %s", line, r.out.data);
        ck_assert_msg(strstr(r.out.data, "node-0 drained: 2 sandboxes moved\n"), "%s", r.out.data);
        ck_assert(worker_is(w0, "state", "drained"));
        ck_assert(sandbox_is(key, running, "worker_id", w1));

        /* Again, with --json: the drain is over; the summary names both. */
        _cleanup_ctl_result_ ctl_result j =
                ctl_run(env, NULL, "worker", "drain", "node-0", "--wait", "--json", "--quiet", NULL);
        ctl_assert_code(j, 0);
        _cleanup_json_ json_object *o = ctl_json(&j);
        ck_assert_str_eq(sp_test_jstr(o, "worker"), "node-0");
        ck_assert_str_eq(sp_test_jstr(o, "state"), "drained");
        json_object *moved = sp_test_jarr(o, "moved");
        ck_assert_uint_eq(json_object_array_length(moved), 2);
        for (size_t i = 0; i < 2; i++) {
                json_object *m = json_object_array_get_idx(moved, i);
                ck_assert_str_eq(sp_test_jstr(m, "to"), "node-1");
                const char *sbx = sp_test_jstr(m, "sandbox_id");
                ck_assert_str_eq(sp_test_jstr(m, "state"), strcmp(sbx, running) == 0 ? "running" : "suspended");
        }
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(o, "left")), 0);

        /* worker get shows the moves; worker ls how many each holds. */
        _cleanup_ctl_result_ ctl_result g = ctl_run(env, NULL, "worker", "get", "node-0", NULL);
        ctl_assert_code(g, 0);
        snprintf(line, sizeof(line), "drain.moved: %s to node-1 (running now)", running);
        ck_assert_msg(strstr(g.out.data, line), "no \"%s\" in: %s", line, g.out.data);
        sp_test_tmpdir_remove(dir);
}
END_TEST

static TCase *tcase(const char *name, const TTest *test)
{
        TCase *tc = tcase_create(name);
        tcase_set_timeout(tc, 420);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, test);
        return tc;
}

static Suite *suite(void)
{
        Suite *s = suite_create("cp_move");
        suite_add_tcase(s, tcase("wake", wake_on_a_draining_worker_moves_it));
        suite_add_tcase(s, tcase("drain", drain_moves_every_sandbox));
        suite_add_tcase(s, tcase("spacectl", spacectl_drain_wait_says_where_each_went));
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
