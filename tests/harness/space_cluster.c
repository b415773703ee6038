/* SPDX-License-Identifier: Apache-2.0 */
#include "space_cluster.h"

#include <check.h>
#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "guard.h"
#include "http_client.h"
#include "inet.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"

/* ---- processes ---- */

int sp_test_secrets_key_write(const char *path, const char *key_id, const char *keep, sp_error **err)
{
        unsigned char key[32];
        FILE *r = fopen("/dev/urandom", "r");
        size_t got = r ? fread(key, 1, sizeof(key), r) : 0;
        if (r)
                fclose(r);
        if (got != sizeof(key))
                return sp_error_set(err, SP_E_IO, "no random bytes for a secrets key");
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        if (sp_buf_appendf(&text, err, "%s ", key_id) < 0 || sp_base64_encode(&text, key, sizeof(key), 0, err) < 0 ||
            sp_buf_appendf(&text, err, "\n%s", keep ? keep : "") < 0)
                return -1;
        return sp_file_write_atomic(path, text.data, text.len, 0600, err);
}

int sp_test_space_start_cp(sp_test_space *s, int i, sp_error **err)
{
        if (i < 0 || i >= SP_TEST_SPACE_MAX_CP)
                return sp_error_set(err, SP_E_INVALID, "no control-plane replica %d", i);
        sp_test_proc *p = &s->cp[i];
        if (p->argv) {
                if (sp_test_proc_running(p))
                        return sp_error_set(err, SP_E_INVALID, "replica %d is running", i);
                if (sp_test_proc_restart(p, 1000, err) < 0)
                        return -1;
        } else {
                char bin[1024], db[1200], listen[80], rpc[80], keyf[700], caf[700], logp[700];
                snprintf(bin, sizeof(bin), "%s/bin/space-controlplane", sp_test_binary_dir());
                snprintf(db, sizeof(db), "--database=%s", s->conninfo);
                snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", s->api_port[i]);
                snprintf(rpc, sizeof(rpc), "--rpc-listen=127.0.0.1:%d", s->rpc_port[i]);
                snprintf(keyf, sizeof(keyf), "--admin-key-file=%s/admin.key", s->dir);
                snprintf(caf, sizeof(caf), "--ca-out=%s/ca.pem", s->dir);
                snprintf(logp, sizeof(logp), "%s/controlplane%d.log", s->dir, i);
                char name[32];
                snprintf(name, sizeof(name), "--name=cp%d", i);
                char secrets[720];
                snprintf(secrets, sizeof(secrets), "--secrets-key-file=%s", s->secrets_key_file);
                const char *argv[64] = {bin,
                                        db,
                                        listen,
                                        rpc,
                                        keyf,
                                        caf,
                                        name,
                                        "--heartbeat-ms=500",
                                        "--tick-ms=200",
                                        "--log-format=text"};
                size_t n = 10;
                if (s->secrets_key_file[0])
                        argv[n++] = secrets;
                for (size_t j = 0; s->opts.cp_args && s->opts.cp_args[j] && n < 63; j++)
                        argv[n++] = s->opts.cp_args[j];
                argv[n] = NULL;
                sp_test_proc_opts o = {.log_path = logp};
                if (sp_test_proc_start(p, "controlplane", argv, &o, err) < 0)
                        return -1;
        }
        return sp_test_proc_wait_http(p, "127.0.0.1", s->api_port[i], "/healthz", 30000, err);
}

int sp_test_space_start_worker(sp_test_space *s, int i, sp_error **err)
{
        if (i < 0 || i >= SP_TEST_SPACE_MAX_WORKERS)
                return sp_error_set(err, SP_E_INVALID, "no worker %d", i);
        sp_test_proc *p = &s->workers[i];
        if (p->argv) {
                if (sp_test_proc_running(p))
                        return sp_error_set(err, SP_E_INVALID, "worker %d is running", i);
                if (sp_test_proc_restart(p, 1000, err) < 0)
                        return -1;
                return sp_test_proc_wait_log(p, "worker ready", 180000, err);
        }
        char bin[1024], d[600], state[700], storage[700], image[700], logp[700], ca[700], listen[80], http[80], cg[128],
                cpaddr[80], tok[300], uid[64], node[64], import[700];
        snprintf(d, sizeof(d), "%s/w%d", s->dir, i);
        snprintf(import, sizeof(import), "%s/import", s->dir);
        if (mkdir(import, 0700) < 0 && errno != EEXIST)
                return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", import);
        snprintf(import, sizeof(import), "--template-import-root=%s/import", s->dir);
        if (mkdir(d, 0700) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", d);
        snprintf(bin, sizeof(bin), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(state, sizeof(state), "--state-dir=%s/state", d);
        snprintf(storage, sizeof(storage), "--storage-dir=%s/storage", d);
        snprintf(image, sizeof(image), "--storage-image=%s/storage.img", d);
        snprintf(logp, sizeof(logp), "%s/worker.log", d);
        snprintf(ca, sizeof(ca), "--tls-ca=%s/ca.pem", s->dir);
        int port = sp_test_free_port(err);
        if (port < 0)
                return -1;
        int hport = sp_test_free_port(err);
        if (hport < 0)
                return -1;
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(http, sizeof(http), "--http-listen=127.0.0.1:%d", hport);
        snprintf(cg, sizeof(cg), "--cgroup-parent=%s-w%d", s->cgparent, i);
        snprintf(cpaddr, sizeof(cpaddr), "--control-plane=127.0.0.1:%d", s->rpc_port[0]);
        snprintf(tok, sizeof(tok), "--join-token=%s", s->join_token);
        snprintf(uid, sizeof(uid), "--uid-base=%d", 0x10000000 + i * 0x02000000);
        snprintf(node, sizeof(node), "--node-id=node-%d", i);
        const char *argv[64] = {bin,
                                state,
                                storage,
                                image,
                                "--storage-size=2G",
                                listen,
                                http,
                                ca,
                                cpaddr,
                                tok,
                                "--slots=16",
                                "--memory=2G",
                                "--cpu-millis=8000",
                                "--log-format=text",
                                cg,
                                uid,
                                node,
                                import};
        size_t n = 18;
        if (!s->opts.no_network) {
                sp_test_worker_net *net = &s->net[i];
                if (sp_test_worker_net_args(port, s->opts.net_upstream, net, err) < 0)
                        return -1;
                for (size_t j = 0; net->argv[j] && n < 50; j++)
                        argv[n++] = net->argv[j];
                if (s->opts.net_upstream) {
                        argv[n++] = "--gateway-resolver=" SP_TEST_INET_RESOLVER;
                        argv[n++] = "--gateway-public-cidrs=" SP_TEST_INET_CIDR;
                }
        }
        for (size_t j = 0; s->opts.worker_args && s->opts.worker_args[j] && n < 63; j++)
                argv[n++] = s->opts.worker_args[j];
        argv[n] = NULL;
        if (!s->opts.no_network && (s->purge_guard[i] = sp_test_worker_purge_guard(argv, err)) < 0)
                return -1;
        sp_test_proc_opts o = {.log_path = logp};
        if (sp_test_proc_start(p, "worker", argv, &o, err) < 0)
                return -1;
        if (i >= s->nworkers)
                s->nworkers = i + 1;
        return sp_test_proc_wait_log(p, "worker ready", 180000, err);
}

void sp_test_space_wait_workers(sp_test_space *s, int n, int64_t timeout_ms)
{
        int64_t deadline = sp_now_mono_us() + timeout_ms * 1000;
        for (;;) {
                _cleanup_json_ json_object *ws = sp_test_api(s, s->admin_key, "GET", "/v1/workers", 200, NULL, NULL);
                json_object *arr = sp_test_jarr(ws, "workers");
                int ready = 0;
                for (size_t i = 0; i < json_object_array_length(arr); i++) {
                        json_object *w = json_object_array_get_idx(arr, i);
                        if (strcmp(sp_test_jstr(w, "state"), "ready") == 0 &&
                            strstr(json_object_to_json_string(w), "\"base\""))
                                ready++;
                }
                if (ready >= n)
                        return;
                ck_assert_msg(sp_now_mono_us() < deadline, "workers did not become ready: %s",
                              json_object_to_json_string(ws));
                usleep(200 * 1000);
        }
}

void sp_test_space_up(sp_test_space *s, const sp_test_space_opts *opts)
{
        sp_error *e = NULL;
        memset(s, 0, sizeof(*s));
        s->opts = *opts;
        ck_assert_msg(opts->workers >= 0 && opts->workers <= SP_TEST_SPACE_MAX_WORKERS, "too many workers");
        s->dir = sp_test_tmpdir("space");
        snprintf(s->cgparent, sizeof(s->cgparent), "space-cl-%d", (int)getpid());
        sp_test_ok(sp_test_pg_start(&s->pg, &e), &e);
        sp_test_ok(sp_test_pg_create_database(&s->pg, &s->conninfo, &e), &e);
        for (int i = 0; i < SP_TEST_SPACE_MAX_CP; i++) {
                s->api_port[i] = sp_test_free_port(&e);
                sp_test_ok(s->api_port[i], &e);
                s->rpc_port[i] = sp_test_free_port(&e);
                sp_test_ok(s->rpc_port[i], &e);
        }
        s->api = s->api_port[0];
        if (!opts->no_secrets_key) {
                snprintf(s->secrets_key_file, sizeof(s->secrets_key_file), "%s/secrets.keys", s->dir);
                sp_test_ok(sp_test_secrets_key_write(s->secrets_key_file, "k1", NULL, &e), &e);
        }
        sp_test_ok(sp_test_space_start_cp(s, 0, &e), &e);
        char path[700];
        snprintf(path, sizeof(path), "%s/admin.key", s->dir);
        FILE *f = fopen(path, "r");
        ck_assert_msg(f && fgets(s->admin_key, sizeof(s->admin_key), f), "no admin key file");
        fclose(f);
        s->admin_key[strcspn(s->admin_key, "\n")] = '\0';
        _cleanup_json_ json_object *tok = sp_test_api(s, s->admin_key, "POST", "/v1/join-tokens", 201,
                                                      "{\"description\":\"test\",\"uses\":0}", NULL);
        snprintf(s->join_token, sizeof(s->join_token), "%s", sp_test_jstr(tok, "token"));
        for (int i = 0; i < opts->workers; i++)
                sp_test_ok(sp_test_space_start_worker(s, i, &e), &e);
        sp_test_space_wait_workers(s, opts->workers, 60000);
}

static void cleanup_sandboxes(const sp_test_space *s)
{
        char cmd[4096];
        snprintf(cmd, sizeof(cmd),
                 "for d in /sys/fs/cgroup/*/%s-w* /sys/fs/cgroup/%s-w*; do [ -d \"$d\" ] || continue; "
                 "for f in $d/*/freezer.state; do [ -f \"$f\" ] && echo THAWED > $f; done; "
                 "for f in $d/*/cgroup.freeze; do [ -f \"$f\" ] && echo 0 > $f; done; "
                 "for p in $(cat $d/*/cgroup.procs 2>/dev/null); do kill -9 $p 2>/dev/null; done; done; "
                 "sleep 0.3; for d in /sys/fs/cgroup/*/%s-w* /sys/fs/cgroup/%s-w*; do [ -d \"$d\" ] && "
                 "rmdir $d/* $d 2>/dev/null; done; for m in $(awk '$5 ~ \"^%s/\" {print $5}' /proc/self/mountinfo "
                 "| sort -r); do umount -l $m; done; true",
                 s->cgparent, s->cgparent, s->cgparent, s->cgparent, s->dir);
        if (system(cmd) != 0)
                fprintf(stderr, "cleanup script failed\n");
}

void sp_test_space_down(sp_test_space *s)
{
        if (!s->dir)
                return;
        /* A control plane a test started in a replica's place (even if the test failed). */
        for (int i = 0; i < SP_TEST_SPACE_MAX_CP; i++) {
                char cmd[200];
                snprintf(cmd, sizeof(cmd), "pkill -KILL -f -- '[-]-listen=127.0.0.1:%d' ; true", s->api_port[i]);
                if (system(cmd) != 0)
                        fprintf(stderr, "pkill failed\n");
        }
        for (int i = 0; i < SP_TEST_SPACE_MAX_CP; i++) {
                sp_test_proc_stop(&s->cp[i], 10000, NULL);
                sp_test_proc_free(&s->cp[i]);
        }
        for (int i = 0; i < SP_TEST_SPACE_MAX_WORKERS; i++) {
                sp_test_proc_stop(&s->workers[i], 10000, NULL);
                if (s->purge_guard[i] > 0) {
                        /* The worker's table, gateway and links (and its sandboxes). */
                        sp_error *e = NULL;
                        if (sp_test_worker_purge((const char *const *)s->workers[i].argv, &e) < 0)
                                fprintf(stderr, "purging worker %d: %s\n", i, e->message);
                        else
                                sp_test_guard_done(s->purge_guard[i]);
                        sp_error_free(e);
                }
                sp_test_proc_free(&s->workers[i]);
        }
        cleanup_sandboxes(s);
        sp_test_pg_stop(&s->pg);
        sp_test_tmpdir_remove(s->dir);
        free(s->dir);
        free(s->conninfo);
        memset(s, 0, sizeof(*s));
}

/* ---- the API ---- */

json_object *sp_test_api(sp_test_space *s, const char *key, const char *method, const char *path, int want_status,
                         const char *body, const char *extra_header)
{
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key ? key : "");
        const char *headers[] = {key ? auth : extra_header, key ? extra_header : NULL, NULL};
        sp_test_http_response r;
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(s->api, method, path, headers, body, 60000, &r, &e), &e);
        ck_assert_msg(r.status == want_status, "%s %s: status %d, wanted %d: %s", method, path, r.status, want_status,
                      r.body);
        json_object *o = r.body_len ? sp_test_http_json(&r) : NULL;
        sp_test_http_response_free(&r);
        return o;
}

const char *sp_test_jstr(json_object *o, const char *path)
{
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", path);
        json_object *cur = o;
        for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok; tok = strtok_r(NULL, ".", &save))
                if (!cur || !json_object_object_get_ex(cur, tok, &cur))
                        return NULL;
        return cur ? json_object_get_string(cur) : NULL;
}

json_object *sp_test_jarr(json_object *o, const char *key)
{
        json_object *a = NULL;
        ck_assert_msg(o && json_object_object_get_ex(o, key, &a) && json_object_is_type(a, json_type_array),
                      "no array \"%s\" in %s", key, o ? json_object_to_json_string(o) : "(null)");
        return a;
}

json_object *sp_test_wait_op(sp_test_space *s, const char *key, const char *op_id, bool want_success)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/operations/%s?wait=30", op_id);
        for (int i = 0; i < 8; i++) {
                json_object *op = sp_test_api(s, key, "GET", path, 200, NULL, NULL);
                const char *st = sp_test_jstr(op, "state");
                if (strcmp(st, "succeeded") == 0 || strcmp(st, "failed") == 0) {
                        ck_assert_msg(strcmp(st, want_success ? "succeeded" : "failed") == 0, "operation %s: %s", op_id,
                                      json_object_to_json_string(op));
                        return op;
                }
                json_object_put(op);
        }
        ck_abort_msg("operation %s did not finish", op_id);
        return NULL;
}

void sp_test_create_sandbox(sp_test_space *s, const char *key, const char *body, char id[static 64])
{
        _cleanup_json_ json_object *r = sp_test_api(s, key, "POST", "/v1/sandboxes", 202, body, NULL);
        ck_assert_str_eq(sp_test_jstr(r, "operation.kind"), "create");
        /* "running" at once: a warm sandbox claimed in one round trip (docs/controlplane.md "Creates"). */
        const char *st = sp_test_jstr(r, "sandbox.state");
        ck_assert_msg(strcmp(st, "creating") == 0 || strcmp(st, "running") == 0, "a new sandbox is %s", st);
        _cleanup_json_ json_object *op = sp_test_wait_op(s, key, sp_test_jstr(r, "operation.id"), true);
        ck_assert_str_eq(sp_test_jstr(op, "result.state"), "running");
        snprintf(id, 64, "%s", sp_test_jstr(r, "sandbox.id"));
}

void sp_test_sandbox_action(sp_test_space *s, const char *key, const char *id, const char *verb, char state[static 32])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, verb);
        _cleanup_json_ json_object *r = sp_test_api(s, key, "POST", path, 202, NULL, NULL);
        _cleanup_json_ json_object *op = sp_test_wait_op(s, key, sp_test_jstr(r, "operation.id"), true);
        snprintf(state, 32, "%s", sp_test_jstr(op, "result.state"));
}

void sp_test_new_tenant(sp_test_space *s, const char *name, char key[static 256])
{
        char body[200];
        snprintf(body, sizeof(body), "{\"name\":\"%s-%d\"}", name, (int)getpid());
        _cleanup_json_ json_object *t = sp_test_api(s, s->admin_key, "POST", "/v1/tenants", 201, body, NULL);
        snprintf(body, sizeof(body), "{\"name\":\"k\",\"tenant_id\":\"%s\"}", sp_test_jstr(t, "id"));
        _cleanup_json_ json_object *k = sp_test_api(s, s->admin_key, "POST", "/v1/keys", 201, body, NULL);
        snprintf(key, 256, "%s", sp_test_jstr(k, "secret"));
}

void sp_test_sandbox_worker(sp_test_space *s, const char *key, const char *id, char worker_id[static 64])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *sb = sp_test_api(s, key, "GET", path, 200, NULL, NULL);
        const char *w = sp_test_jstr(sb, "worker_id");
        ck_assert_msg(w != NULL, "sandbox %s has no worker: %s", id, json_object_to_json_string(sb));
        snprintf(worker_id, 64, "%s", w);
}

int sp_test_sandbox_run(sp_test_space *s, const char *key, const char *id, const char *cmd, int timeout_s)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string(cmd));
        json_object_object_add(body, "argv", argv);
        char path[160];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", id);
        _cleanup_json_ json_object *r = sp_test_api(s, key, "POST", path, 201, json_object_to_json_string(body), NULL);
        snprintf(path, sizeof(path), "/v1/sessions/%s", sp_test_jstr(r, "session.id"));
        int64_t deadline = sp_now_mono_us() + (int64_t)timeout_s * 1000000;
        while (sp_now_mono_us() < deadline) {
                _cleanup_json_ json_object *ses = sp_test_api(s, key, "GET", path, 200, NULL, NULL);
                const char *st = sp_test_jstr(ses, "state");
                if (st && strcmp(st, "failed") == 0)
                        ck_abort_msg("%s failed: %s", cmd, json_object_to_json_string(ses));
                json_object *ex = NULL, *code = NULL;
                if (st && strcmp(st, "exited") == 0 && json_object_object_get_ex(ses, "exit", &ex) &&
                    json_object_object_get_ex(ex, "code", &code))
                        return json_object_get_int(code);
                usleep(200000);
        }
        ck_abort_msg("%s did not end in %d s", cmd, timeout_s);
        return -1;
}

void sp_test_space_start_dataplane(sp_test_space *s, sp_test_proc *dp, int port, const char *name,
                                   const char *const *extra)
{
        sp_error *err = NULL;
        _cleanup_json_ json_object *tok = sp_test_api(s, s->admin_key, "POST", "/v1/join-tokens", 201,
                                                      "{\"role\":\"dataplane\",\"description\":\"dp\"}", NULL);
        char bin[1024], listen[80], cpa[80], ca[700], jt[400], state[700], logp[700], nm[160];
        snprintf(bin, sizeof(bin), "%s/bin/space-dataplane", sp_test_binary_dir());
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(cpa, sizeof(cpa), "--control-plane=127.0.0.1:%d", s->rpc_port[0]);
        snprintf(ca, sizeof(ca), "--rpc-ca=%s/ca.pem", s->dir);
        snprintf(jt, sizeof(jt), "--join-token=%s", sp_test_jstr(tok, "token"));
        snprintf(state, sizeof(state), "--state-dir=%s/dataplane", s->dir);
        snprintf(logp, sizeof(logp), "%s/dataplane.log", s->dir);
        snprintf(nm, sizeof(nm), "--name=%s", name);
        const char *argv[24] = {bin, listen, cpa, ca, jt, state, nm, "--log-format=text"};
        size_t n = 8;
        for (size_t i = 0; extra && extra[i] && n + 1 < sizeof(argv) / sizeof(argv[0]); i++)
                argv[n++] = extra[i];
        argv[n] = NULL;
        sp_test_proc_opts po = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(dp, "dataplane", argv, &po, &err), &err);
        sp_test_ok(sp_test_proc_wait_http(dp, "127.0.0.1", port, "/readyz", 30000, &err), &err);
}

char *sp_test_space_sql(sp_test_space *s, const char *sql, int nparams, const char *const *params)
{
        PGconn *c = PQconnectdb(s->conninfo);
        ck_assert_msg(PQstatus(c) == CONNECTION_OK, "connect to the cluster's database: %s", PQerrorMessage(c));
        PGresult *r = PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
        ExecStatusType st = PQresultStatus(r);
        ck_assert_msg(st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK, "%s: %s", sql, PQerrorMessage(c));
        char *v = strdup(PQntuples(r) ? PQgetvalue(r, 0, 0) : "");
        PQclear(r);
        PQfinish(c);
        ck_assert_ptr_nonnull(v);
        return v;
}
