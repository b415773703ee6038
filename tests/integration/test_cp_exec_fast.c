/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A session's POST answers once its worker accepted the Exec (issue #18),
 * through a real cluster (PostgreSQL, space-controlplane, a space-worker
 * running jail sandboxes, a space-dataplane):
 *
 * - the answer says `starting` without a pid; attaching right after it
 *   gives the start (pid), every byte of the output and the exit, and the
 *   record then holds the same pid and the exit;
 * - a program the sandbox lacks: the answer is 201 and the session ends
 *   `failed` with the agent's message, which the attach stream's `error`
 *   event carries too; a retry with its Idempotency-Key answers the same
 *   failed session and runs nothing;
 * - a worker that refuses the Exec (it does not have the sandbox the
 *   record names) gives the client the error and leaves no session;
 * - a control plane that stops after answering, before it recorded the
 *   start: once it is back, the session is found on its worker and
 *   recorded (pid, exit), and its output is whole.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "pg.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "store/db.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define HANG_GUARD_MS 60000 /* only against a hang: no test asserts a duration */

static sp_test_space S;
static sp_test_proc dp;
static int dp_port;
static char dp_url_arg[128];
static const char *cp_args[] = {dp_url_arg, "--worker-call-timeout-ms=5000", NULL};

static void cluster_up(void)
{
        sp_error *err = NULL;
        dp_port = sp_test_free_port(&err);
        sp_test_ok(dp_port, &err);
        snprintf(dp_url_arg, sizeof(dp_url_arg), "--dataplane-url=http://127.0.0.1:%d", dp_port);
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        sp_test_space_start_dataplane(&S, &dp, dp_port, "dp-fast", NULL);
}

static void cluster_down(void)
{
        if (dp.argv) {
                sp_test_proc_stop(&dp, 10000, NULL);
                sp_test_proc_free(&dp);
        }
        sp_test_space_down(&S);
}

/* ---- helpers ---- */

#define API(key, method, path, status, body) sp_test_api(&S, key, method, path, status, body, NULL)

static const char *path_of(const char *fmt, const char *a)
{
        static char p[4][512];
        static int i;
        i = (i + 1) % 4;
        snprintf(p[i], sizeof(p[i]), fmt, a);
        return p[i];
}

static int64_t jint(json_object *o, const char *path)
{
        const char *s = sp_test_jstr(o, path);
        ck_assert_msg(s, "no %s in %s", path, json_object_to_json_string(o));
        return strtoll(s, NULL, 10);
}

static cp_db *db_open(void)
{
        cp_db *db = NULL;
        sp_error *e = NULL;
        sp_test_ok(cp_db_open(S.conninfo, &db, &e), &e);
        return db;
}

static void sql(const char *q, int n, const char *const *params)
{
        cp_db *db = db_open();
        sp_error *e = NULL;
        sp_test_ok(cp_db_exec(db, q, n, params, NULL, &e), &e);
        cp_db_close(db);
}

static int64_t sql_count(const char *q, int n, const char *const *params)
{
        cp_db *db = db_open();
        sp_error *e = NULL;
        _cleanup_pgresult_ PGresult *r = NULL;
        sp_test_ok(cp_db_exec(db, q, n, params, &r, &e), &e);
        int64_t v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        cp_db_close(db);
        return v;
}

/* What an attach stream said, read to its end. */
typedef struct attached {
        int status;
        int64_t pid; /* the start event's; 0 without one */
        sp_buf out; /* stdout and stderr, decoded, in order */
        bool exited;
        int64_t code;
        char error[1024]; /* the error event's data, "" without one */
} attached;

static void attached_free(attached *a)
{
        sp_buf_free(&a->out);
}

/* One event: its name and data. */
static void on_sse(attached *a, const char *event, const char *data)
{
        sp_error *e = NULL;
        if (strcmp(event, "start") == 0) {
                _cleanup_json_ json_object *o = json_tokener_parse(data);
                ck_assert_ptr_nonnull(o);
                a->pid = jint(o, "pid");
        } else if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
                sp_test_ok(sp_base64_decode(&a->out, data, strlen(data), 0, &e), &e);
        } else if (strcmp(event, "exit") == 0) {
                _cleanup_json_ json_object *o = json_tokener_parse(data);
                ck_assert_ptr_nonnull(o);
                a->exited = true;
                a->code = jint(o, "code");
        } else if (strcmp(event, "error") == 0) {
                snprintf(a->error, sizeof(a->error), "%s", data);
        }
}

/* Attaches to url (the data plane's, from an answer) with token and reads
 * the stream to its end (HTTP/1.0: the end of the stream closes the
 * connection). */
static void attach(const char *url, const char *token, attached *a)
{
        memset(a, 0, sizeof(*a));
        const char *path = strstr(url, "/v1/");
        ck_assert_ptr_nonnull(path);
        sp_error *e = NULL;
        int fd = sp_test_dial(dp_port, &e);
        sp_test_ok(fd, &e);
        _cleanup_buf_ sp_buf req = SP_BUF_INIT, in = SP_BUF_INIT;
        sp_buf_appendf(&req, NULL, "GET %s HTTP/1.0\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n",
                       path, token);
        ck_assert_int_eq(write(fd, req.data, req.len), (ssize_t)req.len);
        int64_t guard = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;
        for (;;) {
                ck_assert_msg(sp_now_mono_us() < guard, "the attach stream did not end: %.*s", (int)in.len, in.data);
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 200) != 1)
                        continue;
                char buf[65536];
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n <= 0)
                        break;
                sp_buf_append(&in, buf, (size_t)n, NULL);
        }
        close(fd);
        sp_buf_append(&in, "", 1, NULL);
        ck_assert_int_eq(sscanf(in.data, "HTTP/1.%*d %d", &a->status), 1);
        char *body = strstr(in.data, "\r\n\r\n");
        ck_assert_ptr_nonnull(body);
        ck_assert_ptr_null(strcasestr(in.data, "transfer-encoding: chunked"));
        body += 4;
        /* Events: "field: value" lines, a blank line ends one. */
        char event[32] = "";
        _cleanup_buf_ sp_buf data = SP_BUF_INIT;
        for (char *line = body, *next; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                size_t n = strlen(line);
                if (n && line[n - 1] == '\r')
                        line[--n] = '\0';
                if (n == 0) {
                        if (event[0]) {
                                sp_buf_append(&data, "", 1, NULL);
                                on_sse(a, event, data.data);
                        }
                        event[0] = '\0';
                        sp_buf_clear(&data);
                } else if (strncmp(line, "event: ", 7) == 0) {
                        snprintf(event, sizeof(event), "%s", line + 7);
                } else if (strncmp(line, "data: ", 6) == 0) {
                        sp_buf_append_str(&data, line + 6, NULL);
                }
        }
}

/* GETs session id until its state is want; returns it. */
static json_object *wait_state(const char *key, const char *id, const char *want)
{
        int64_t guard = sp_now_mono_us() + HANG_GUARD_MS * 1000LL;
        for (;;) {
                json_object *s = API(key, "GET", path_of("/v1/sessions/%s", id), 200, NULL);
                if (strcmp(sp_test_jstr(s, "state"), want) == 0)
                        return s;
                ck_assert_msg(sp_now_mono_us() < guard, "session %s never %s: %s", id, want,
                              json_object_to_json_string(s));
                json_object_put(s);
                usleep(50 * 1000);
        }
}

/* The output of `seq 1 n` with "done" on stderr after it. */
static void expected_output(int n, sp_buf *out)
{
        for (int i = 1; i <= n; i++)
                sp_buf_appendf(out, NULL, "%d\n", i);
        sp_buf_appendf(out, NULL, "done\n");
}

/* ---- tests ---- */

START_TEST(the_answer_comes_before_the_start_and_attach_gets_everything)
{
        char key[256], sbx[64];
        sp_test_new_tenant(&S, "fast", key);
        sp_test_create_sandbox(&S, key, SANDBOX, sbx);
        _cleanup_json_ json_object *r = API(key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201,
                                            "{\"command\":\"seq 1 20000; echo done >&2; exit 4\"}");
        const char *id = sp_test_jstr(r, "session.id");
        ck_assert_ptr_nonnull(id);
        /* Answered at the worker's acceptance: the start is not known yet, and the answer does not claim it. */
        ck_assert_str_eq(sp_test_jstr(r, "session.state"), "starting");
        ck_assert_ptr_null(sp_test_jstr(r, "session.pid"));
        ck_assert_ptr_null(sp_test_jstr(r, "session.started_at"));
        /* The record was there before the answer, with its audit row. */
        const char *p[] = {id};
        ck_assert_int_eq(sql_count("SELECT count(*) FROM sessions WHERE id = $1", 1, p), 1);
        ck_assert_int_eq(sql_count("SELECT count(*) FROM audit_log WHERE action = 'session.create' AND target = $1 AND "
                                   "outcome = 'ok'",
                                   1, p),
                         1);

        /* The token of the answer attaches at once, and the stream holds all of it. */
        attached a;
        attach(sp_test_jstr(r, "attach_url"), sp_test_jstr(r, "attach_token"), &a);
        ck_assert_int_eq(a.status, 200);
        ck_assert_msg(a.pid > 0, "no start event");
        ck_assert_msg(a.exited, "no exit event (error: %s)", a.error);
        ck_assert_int_eq(a.code, 4);
        _cleanup_buf_ sp_buf want = SP_BUF_INIT;
        expected_output(20000, &want);
        ck_assert_uint_eq(a.out.len, want.len);
        ck_assert_int_eq(memcmp(a.out.data, want.data, want.len), 0);

        /* The start report was recorded: the record has the same pid, and the exit. */
        _cleanup_json_ json_object *done = wait_state(key, id, "exited");
        ck_assert_int_eq(jint(done, "pid"), a.pid);
        ck_assert_ptr_nonnull(sp_test_jstr(done, "started_at"));
        ck_assert_int_eq(jint(done, "exit.code"), 4);
        attached_free(&a);
}
END_TEST

START_TEST(a_program_the_sandbox_lacks_fails_after_the_answer)
{
        char key[256], sbx[64];
        sp_test_new_tenant(&S, "noprog", key);
        sp_test_create_sandbox(&S, key, SANDBOX, sbx);
        const char *sp = path_of("/v1/sandboxes/%s/sessions", sbx);
        _cleanup_json_ json_object *r =
                sp_test_api(&S, key, "POST", sp, 201, "{\"argv\":[\"/no/such/program\"]}", "Idempotency-Key: np-1");
        const char *id = sp_test_jstr(r, "session.id");
        ck_assert_str_eq(sp_test_jstr(r, "session.state"), "starting");
        attached a;
        attach(sp_test_jstr(r, "attach_url"), sp_test_jstr(r, "attach_token"), &a);
        ck_assert_int_eq(a.status, 200);
        ck_assert_msg(strstr(a.error, "/no/such/program"), "error event: '%s'", a.error);
        ck_assert(!a.exited);
        ck_assert_int_eq(a.pid, 0);
        ck_assert_uint_eq(a.out.len, 0);
        attached_free(&a);
        _cleanup_json_ json_object *f = wait_state(key, id, "failed");
        ck_assert_msg(strstr(sp_test_jstr(f, "error"), "/no/such/program"), "%s", json_object_to_json_string(f));
        ck_assert_ptr_null(sp_test_jstr(f, "pid"));
        /* A retry answers the same failed session, and runs nothing new. */
        _cleanup_json_ json_object *again =
                sp_test_api(&S, key, "POST", sp, 201, "{\"argv\":[\"/no/such/program\"]}", "Idempotency-Key: np-1");
        ck_assert_str_eq(sp_test_jstr(again, "session.id"), id);
        ck_assert_str_eq(sp_test_jstr(again, "session.state"), "failed");
        _cleanup_json_ json_object *l = API(key, "GET", path_of("/v1/sandboxes/%s/sessions", sbx), 200, NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(l, "sessions")), 1);
}
END_TEST

START_TEST(a_worker_that_refuses_gives_the_error_and_leaves_nothing)
{
        char key[256], sbx[64];
        sp_test_new_tenant(&S, "refuse", key);
        sp_test_create_sandbox(&S, key, SANDBOX, sbx);
        /* A record the worker knows nothing of: a copy of the running sandbox under another id. */
        const char *ghost = "sbx_ghost0000000000000001";
        const char *p[] = {sbx, ghost};
        sql("INSERT INTO sandboxes SELECT (jsonb_populate_record(s, jsonb_build_object('id', $2::text))).* "
            "FROM sandboxes s WHERE s.id = $1",
            2, p);
        _cleanup_json_ json_object *e =
                API(key, "POST", path_of("/v1/sandboxes/%s/sessions", ghost), 409, "{\"argv\":[\"true\"]}");
        const char *msg = sp_test_jstr(e, "error.message");
        ck_assert_msg(msg && strstr(msg, "not running on its worker"), "%s", json_object_to_json_string(e));
        const char *g[] = {ghost};
        ck_assert_int_eq(sql_count("SELECT count(*) FROM sessions WHERE sandbox_id = $1", 1, g), 0);
        sql("DELETE FROM sandboxes WHERE id = $1", 1, g);
}
END_TEST

START_TEST(a_control_plane_that_stops_after_answering_loses_nothing)
{
        char key[256], sbx[64];
        sp_test_new_tenant(&S, "cpdies", key);
        sp_test_create_sandbox(&S, key, SANDBOX, sbx);
        _cleanup_json_ json_object *r = API(key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201,
                                            "{\"command\":\"seq 1 5000; echo done >&2; exit 7\"}");
        const char *id = sp_test_jstr(r, "session.id");
        /* The replica dies; what it may have recorded of the start is taken back, as if the report never came. */
        sp_error *err = NULL;
        sp_test_ok(sp_test_proc_kill(&S.cp[0], &err), &err);
        const char *p[] = {id};
        sql("UPDATE sessions SET state = 'starting', pid = NULL, started_at = NULL, ended_at = NULL, exit = NULL "
            "WHERE id = $1",
            1, p);
        sp_test_ok(sp_test_space_start_cp(&S, 0, &err), &err);
        /* Its worker has it: a read records it, and its output is whole. */
        _cleanup_json_ json_object *done = wait_state(key, id, "exited");
        ck_assert_int_gt(jint(done, "pid"), 0);
        ck_assert_int_eq(jint(done, "exit.code"), 7);
        attached a;
        attach(sp_test_jstr(r, "attach_url"), sp_test_jstr(r, "attach_token"), &a);
        ck_assert_int_eq(a.status, 200);
        ck_assert_int_eq(a.pid, jint(done, "pid"));
        ck_assert(a.exited);
        _cleanup_buf_ sp_buf want = SP_BUF_INIT;
        expected_output(5000, &want);
        ck_assert_uint_eq(a.out.len, want.len);
        ck_assert_int_eq(memcmp(a.out.data, want.data, want.len), 0);
        attached_free(&a);
        ck_assert_int_eq(sql_count("SELECT count(*) FROM sessions WHERE id = $1", 1, p), 1);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_exec_fast");
        TCase *tc = tcase_create("sessions");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, the_answer_comes_before_the_start_and_attach_gets_everything);
        tcase_add_test(tc, a_program_the_sandbox_lacks_fails_after_the_answer);
        tcase_add_test(tc, a_worker_that_refuses_gives_the_error_and_leaves_nothing);
        tcase_add_test(tc,
                       a_control_plane_that_stops_after_answering_loses_nothing); /* last: it restarts the replica */
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
