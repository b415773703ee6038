/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The artifact store (docs/backends.md "The artifact store"; worker/node/
 * store.c, ctrl/move.c), against the real daemons: PostgreSQL,
 * space-controlplane (heartbeats every 500 ms, so that a killed worker is
 * unreachable within seconds) and two space-worker daemons with the jail
 * backend that share one store directory (--artifact-store), as workers on
 * one NFS export would:
 *
 *   wake     a suspended sandbox with a file of ours is copied into the store
 *            (the API says it is stored; the copy names node-0 its holder);
 *            node-0 is killed and stays dead; the wake moves it from the
 *            store to node-1 ("moved from node-0 to node-1 (…, from the
 *            artifact store)"), where it runs with the file, and its copy is
 *            removed once it runs (it is no longer stored);
 *   delete   deleting a stored sandbox of a dead worker removes its copy
 *            (through node-1: DeleteStoredSandbox);
 *   drain    draining the dead node-0 moves its stored suspended sandbox to
 *            node-1, which takes the copy as its own (it stays stored);
 *   corrupt  a copy with a file altered in the store is refused by node-1
 *            (its digest: io_error, retried), which installs nothing; the
 *            sandbox stays node-0's, suspended.
 *
 * Each case has its own cluster and store (an unchecked fixture). Needs root,
 * btrfs and PostgreSQL.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define STORE_SECS 120 /* a copy packs a filesystem: generous, against a hang only */

static sp_test_space S;
static char *store_dir;
static char store_arg[600];

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

static void worker_id(int i, char id[static 64])
{
        char name[16];
        snprintf(name, sizeof(name), "node-%d", i);
        _cleanup_json_ json_object *ws = api(S.admin_key, "GET", "/v1/workers", 200, NULL);
        json_object *arr = sp_test_jarr(ws, "workers");
        for (size_t k = 0; k < json_object_array_length(arr); k++) {
                json_object *w = json_object_array_get_idx(arr, k);
                if (strcmp(sp_test_jstr(w, "name"), name) == 0) {
                        snprintf(id, 64, "%s", sp_test_jstr(w, "id"));
                        return;
                }
        }
        ck_abort_msg("no worker %s in %s", name, json_object_to_json_string(ws));
}

static bool worker_is(const char *wid, const char *field, const char *want)
{
        _cleanup_json_ json_object *w = api(S.admin_key, "GET", path_of("/v1/workers/%s", wid), 200, NULL);
        const char *v = sp_test_jstr(w, field);
        return v && strcmp(v, want) == 0;
}

static void worker_verb(const char *wid, const char *verb)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/workers/%s/%s", wid, verb);
        json_object_put(api(S.admin_key, "POST", path, 200, NULL));
}

static bool sandbox_is(const char *key, const char *id, const char *field, const char *want)
{
        _cleanup_json_ json_object *s = api(key, "GET", path_of("/v1/sandboxes/%s", id), 200, NULL);
        const char *v = sp_test_jstr(s, field);
        return v && strcmp(v, want) == 0;
}

/* The store's copy of sandbox id: <store>/sandboxes/<id>[/<rel>]. */
static const char *store_path(const char *id, const char *rel)
{
        static char p[1024];
        snprintf(p, sizeof(p), "%s/sandboxes/%s%s%s", store_dir, id, rel ? "/" : "", rel ? rel : "");
        return p;
}

static bool copy_exists(const char *id)
{
        return access(store_path(id, NULL), F_OK) == 0;
}

/* A sandbox on node-0 with a file of ours (its content: its id), suspended,
 * and stored: the control plane says so, and the store holds a whole copy
 * that node-0 holds. */
static void stored_on_node0(const char *key, const char *w1, char id[static 64])
{
        worker_verb(w1, "cordon");
        sp_test_create_sandbox(&S, key, SANDBOX, id);
        worker_verb(w1, "uncordon");
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "mkdir -p /data && echo %s > /data/marker && sync", id);
        ck_assert_int_eq(sp_test_sandbox_run(&S, key, id, cmd, 60), 0);
        char state[32];
        sp_test_sandbox_action(&S, key, id, "suspend", state);
        ck_assert_str_eq(state, "suspended");
        WAIT_UNTIL(sandbox_is(key, id, "stored", "true"), STORE_SECS, "%s was never stored", id);
        ck_assert_msg(access(store_path(id, "manifest.json"), R_OK) == 0, "no manifest in the store");
        ck_assert_msg(access(store_path(id, "storage/rootfs.tar"), R_OK) == 0, "no packed root filesystem");
        _cleanup_buf_ sp_buf holder = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(store_path(id, "holder"), 256, &holder, &e), &e);
        ck_assert_str_eq(holder.data, "node-0\n");
        struct stat st;
        ck_assert_int_eq(stat(store_path(id, "manifest.json"), &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        ck_assert_int_eq(stat(store_path(id, NULL), &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0700);
}

/* node-0 dies for good (SIGKILL, never started again); the control plane
 * marks it unreachable after three missed heartbeats. */
static void node0_dies(const char *w0)
{
        sp_error *e = NULL;
        ck_assert_int_ge(sp_test_proc_kill(&S.workers[0], &e), 0);
        WAIT_UNTIL(worker_is(w0, "health", "unreachable") || worker_is(w0, "state", "unreachable"), 30,
                   "node-0 never read unreachable");
}

static void cluster_up(void)
{
        store_dir = sp_test_tmpdir("store");
        snprintf(store_arg, sizeof(store_arg), "--artifact-store=%s", store_dir);
        static const char *const cp_args[] = {"--heartbeat-ms=500", NULL};
        static const char *worker_args[] = {store_arg, NULL};
        sp_test_space_opts o = {.workers = 2, .cp_args = cp_args, .worker_args = worker_args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        for (int i = 0; i < 2; i++) {
                char logp[700], what[32];
                snprintf(logp, sizeof(logp), "%s/w%d/worker.log", S.dir, i);
                snprintf(what, sizeof(what), "worker %d", i);
                sp_test_dump_file_tail(what, logp, 25);
        }
        sp_test_space_down(&S);
        sp_test_tmpdir_remove(store_dir);
        free(store_dir);
        store_dir = NULL;
}

START_TEST(wake_from_the_store_when_its_worker_is_gone)
{
        char key[256], w0[64], w1[64], id[64];
        sp_test_new_tenant(&S, "storewake", key);
        worker_id(0, w0);
        worker_id(1, w1);
        stored_on_node0(key, w1, id);
        node0_dies(w0);

        _cleanup_json_ json_object *r = api(key, "POST", path_of("/v1/sandboxes/%s/wake", id), 202, NULL);
        _cleanup_json_ json_object *op = sp_test_wait_op(&S, key, sp_test_jstr(r, "operation.id"), true);
        ck_assert_str_eq(sp_test_jstr(op, "result.state"), "running");
        ck_assert_str_eq(sp_test_jstr(op, "result.worker_id"), w1);
        ck_assert_str_eq(sp_test_jstr(op, "result.moved.from"), "node-0");
        ck_assert_str_eq(sp_test_jstr(op, "result.moved.to"), "node-1");
        const char *msg = sp_test_jstr(op, "message");
        ck_assert_msg(msg && strncmp(msg, "moved from node-0 to node-1 (", 29) == 0 &&
                              strstr(msg, "from the artifact store"),
                      "message: %s", msg ? msg : "(none)");
        ck_assert(sandbox_is(key, id, "worker_id", w1));
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "grep -qx %s /data/marker", id);
        ck_assert_msg(sp_test_sandbox_run(&S, key, id, cmd, 60) == 0, "%s lost /data/marker", id);
        /* It runs: its copy is stale, and goes. */
        WAIT_UNTIL(!copy_exists(id), 30, "the store still holds %s's copy", id);
        WAIT_UNTIL(sandbox_is(key, id, "stored", "false"), 30, "%s still reads stored", id);
        const char *p[] = {id};
        _cleanup_free_ char *moves =
                sp_test_space_sql(&S, "SELECT count(*) FROM sandbox_moves WHERE sandbox_id = $1", 1, p);
        ck_assert_str_eq(moves, "1");
}
END_TEST

START_TEST(delete_removes_a_gone_workers_copy)
{
        char key[256], w0[64], w1[64], id[64];
        sp_test_new_tenant(&S, "storedel", key);
        worker_id(0, w0);
        worker_id(1, w1);
        stored_on_node0(key, w1, id);
        node0_dies(w0);

        _cleanup_json_ json_object *r = api(key, "DELETE", path_of("/v1/sandboxes/%s", id), 202, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(r, "operation.id"), true));
        ck_assert_msg(!copy_exists(id), "the store still holds the deleted %s's copy", id);
}
END_TEST

START_TEST(drain_of_a_dead_worker_moves_its_stored_sandboxes)
{
        char key[256], w0[64], w1[64], id[64];
        sp_test_new_tenant(&S, "storedrain", key);
        worker_id(0, w0);
        worker_id(1, w1);
        stored_on_node0(key, w1, id);
        node0_dies(w0);

        worker_verb(w0, "drain");
        WAIT_UNTIL(sandbox_is(key, id, "worker_id", w1), STORE_SECS, "the drain never moved %s to node-1", id);
        ck_assert(sandbox_is(key, id, "state", "suspended"));
        /* Still stored: node-1 took the copy as its own. */
        WAIT_UNTIL(sandbox_is(key, id, "stored", "true"), 30, "%s is not stored on node-1", id);
        _cleanup_buf_ sp_buf holder = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(sp_file_read(store_path(id, "holder"), 256, &holder, &e), &e);
        ck_assert_str_eq(holder.data, "node-1\n");
}
END_TEST

START_TEST(a_corrupt_copy_is_refused)
{
        char key[256], w0[64], w1[64], id[64];
        sp_test_new_tenant(&S, "storebad", key);
        worker_id(0, w0);
        worker_id(1, w1);
        stored_on_node0(key, w1, id);
        /* One byte of the packed root filesystem's first block (a tar header) changes. */
        int fd = open(store_path(id, "storage/rootfs.tar"), O_WRONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pwrite(fd, "#", 1, 7), 1);
        close(fd);
        node0_dies(w0);

        _cleanup_json_ json_object *r = api(key, "POST", path_of("/v1/sandboxes/%s/wake", id), 202, NULL);
        char op_path[128];
        snprintf(op_path, sizeof(op_path), "/v1/operations/%s", sp_test_jstr(r, "operation.id"));
        /* Retried (io_error may pass), saying why; node-1 installs nothing meanwhile. */
        bool said = false;
        for (int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC; !said && sp_now_mono_us() < deadline;) {
                _cleanup_json_ json_object *o = api(key, "GET", op_path, 200, NULL);
                const char *m = sp_test_jstr(o, "message");
                said = m && strstr(m, "does not match its digest");
                if (!said)
                        usleep(200 * 1000);
        }
        ck_assert_msg(said, "the wake never said the copy does not match its digest");
        char installed[1024];
        snprintf(installed, sizeof(installed), "%s/w1/state/sandboxes/%s", S.dir, id);
        ck_assert_msg(access(installed, F_OK) < 0, "node-1 installed the corrupt copy");
        ck_assert(sandbox_is(key, id, "worker_id", w0));
        ck_assert(sandbox_is(key, id, "state", "suspended"));
        /* The copy stays node-0's, as it was. */
        ck_assert(copy_exists(id));
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
        Suite *s = suite_create("cp_artifact_store");
        suite_add_tcase(s, tcase("wake", wake_from_the_store_when_its_worker_is_gone));
        suite_add_tcase(s, tcase("delete", delete_removes_a_gone_workers_copy));
        suite_add_tcase(s, tcase("drain", drain_of_a_dead_worker_moves_its_stored_sandboxes));
        suite_add_tcase(s, tcase("corrupt", a_corrupt_copy_is_refused));
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
