/* SPDX-License-Identifier: Apache-2.0 */
/* Test harness: a worker with its network in a test's own internet (see netenv.h). */
#include "netenv.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_client.h"
#include "guard.h"
#include "harness.h"
#include "space/agent_proto.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"

void sp_test_netenv_up(sp_test_netenv *env, const char *tag, const sp_test_inet_record *records, size_t n,
                       const char *const *extra)
{
        env->top = sp_test_tmpdir(tag);
        snprintf(env->cgparent, sizeof(env->cgparent), "space-test-%d", (int)getpid());
        sp_error *e = NULL;
        sp_test_ok(sp_test_inet_start(&env->in, env->top, records, n, &e), &e);
        const char *del_ns[] = {"ip", "netns", "delete", env->in.ns.name, NULL};
        env->ns_guard = sp_test_guard_run(del_ns, &e);
        sp_test_ok(env->ns_guard, &e);
        sp_test_ok((env->rpc_port = sp_test_free_port(&e)), &e);
        sp_test_ok((env->http_port = sp_test_free_port(&e)), &e);
        snprintf(env->rpc_addr, sizeof(env->rpc_addr), "127.0.0.1:%d", env->rpc_port);
        /* Every upstream connection of the gateway is made in the test's internet. */
        sp_test_ok(sp_test_worker_net_args(env->rpc_port, env->in.ns.path, &env->net, &e), &e);

        char(*b)[700] = env->bufs;
        snprintf(b[0], sizeof(b[0]), "%s/bin/space-worker", sp_test_binary_dir());
        snprintf(b[1], sizeof(b[1]), "--state-dir=%s/state", env->top);
        snprintf(b[2], sizeof(b[2]), "--storage-dir=%s/storage", env->top);
        snprintf(b[3], sizeof(b[3]), "--storage-image=%s/storage.img", env->top);
        snprintf(b[4], sizeof(b[4]), "--listen=%s", env->rpc_addr);
        snprintf(b[5], sizeof(b[5]), "--http-listen=127.0.0.1:%d", env->http_port);
        snprintf(b[6], sizeof(b[6]), "--cgroup-parent=%s", env->cgparent);
        snprintf(b[7], sizeof(b[7]), "--gateway-upstream-ca-file=%s", env->in.ca_path);
        const char *argv[] = {b[0],
                              b[2],
                              b[3],
                              "--storage-size=2G",
                              b[4],
                              b[5],
                              "--insecure",
                              "--slots=8",
                              "--log-format=text",
                              b[6],
                              b[1],
                              b[7],
                              "--gateway-resolver=" SP_TEST_INET_RESOLVER,
                              "--gateway-public-cidrs=" SP_TEST_INET_CIDR};
        size_t k = 0;
        for (; k < SP_ARRAY_SIZE(argv); k++)
                env->argv[k] = argv[k];
        for (size_t i = 0; env->net.argv[i]; i++)
                env->argv[k++] = env->net.argv[i];
        for (size_t i = 0; extra && extra[i] && k < SP_ARRAY_SIZE(env->argv) - 1; i++)
                env->argv[k++] = extra[i];
        env->argv[k] = NULL;
        char logp[800];
        snprintf(logp, sizeof(logp), "%s/worker.log", env->top);
        sp_test_proc_opts opts = {.log_path = logp};
        env->purge_guard = sp_test_worker_purge_guard(env->argv, &e);
        sp_test_ok(env->purge_guard, &e);
        sp_test_ok(sp_test_proc_start(&env->worker, "worker", env->argv, &opts, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&env->worker, "worker ready", 120000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&env->worker, "egress gateway connected", 30000, &e), &e);
}

void sp_test_netenv_down(sp_test_netenv *env, sp_test_netbox *const *boxes, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                json_object *req = json_object_new_object(), *resp = NULL;
                json_object_object_add(req, "id", json_object_new_string(boxes[i]->id));
                if (sp_rpc_call_sync(env->rpc_addr, NULL, "DeleteSandbox", req, 60000, &resp, NULL) == 0)
                        json_object_put(resp);
                json_object_put(req);
        }
        sp_test_proc_stop(&env->worker, 5000, NULL);
        sp_test_proc_free(&env->worker);
        sp_error *e = NULL;
        if (env->argv[0] && sp_test_worker_purge(env->argv, &e) < 0) {
                fprintf(stderr, "purge: %s\n", e->message);
                sp_error_free(e);
        }
        sp_test_guard_done(env->purge_guard);
        sp_test_inet_stop(&env->in);
        sp_test_guard_done(env->ns_guard);
        sp_test_tmpdir_remove(env->top);
        free(env->top);
        env->top = NULL;
}

sp_error *sp_test_netenv_try(sp_test_netenv *env, const char *method, const char *json, json_object **resp)
{
        _cleanup_json_ json_object *req = NULL;
        ck_assert_msg(sp_json_parse(json, strlen(json), &req, NULL) == 0, "bad test JSON: %s", json);
        json_object *r = NULL;
        sp_error *e = NULL;
        if (sp_rpc_call_sync(env->rpc_addr, NULL, method, req, 60000, &r, &e) < 0)
                return e;
        if (resp)
                *resp = r;
        else
                json_object_put(r);
        return NULL;
}

json_object *sp_test_netenv_call(sp_test_netenv *env, const char *method, const char *fmt, ...)
{
        char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        ck_assert_int_ge(vasprintf(&text, fmt, ap), 0);
        va_end(ap);
        json_object *resp = NULL;
        sp_error *e = sp_test_netenv_try(env, method, text, &resp);
        ck_assert_msg(!e, "%s: %s", method, e ? e->message : "?");
        free(text);
        return resp;
}

void sp_test_netbox_new(sp_test_netenv *env, sp_test_netbox *b, const char *fields)
{
        json_object_put(sp_test_netenv_call(env, "CreateSandbox", "{\"id\":\"%s\",\"template\":\"base\"%s%s}", b->id,
                                            fields && *fields ? "," : "", fields ? fields : ""));
        snprintf(b->sock, sizeof(b->sock), "%s/state/sandboxes/%s/run/agent.sock", env->top, b->id);
        char *view = sp_test_netbox_sh(b, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1; "
                                          "ip route | awk '/^default/ {print $3}'");
        ck_assert_msg(sscanf(view, "%15s %15s", b->ip, b->host) == 2, "sandbox %s: no network: %s", b->id, view);
        free(view);
}

char *sp_test_netbox_sh(const sp_test_netbox *b, const char *script)
{
        static uint32_t n; /* sessions are named after channels: unique per process */
        uint32_t ch = ((uint32_t)getpid() << 10) + ++n;
        _cleanup_json_ json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string(script));
        sp_test_agent *a = sp_test_agent_connect(b->sock, 5000);
        sp_test_result r;
        sp_test_agent_exec(a, ch, json_object_to_json_string_ext(argv, JSON_C_TO_STRING_PLAIN), &r);
        ck_assert_msg(!sp_test_result_error(&r), "%s: %s", script, json_object_to_json_string(r.exit));
        char *out = strndup(r.out.data ? r.out.data : "", r.out.len);
        sp_test_result_free(&r);
        sp_test_agent_close(a);
        return out;
}

void sp_test_netbox_put(const sp_test_netbox *b, const char *src, const char *dst, int mode)
{
        _cleanup_close_ int fd = open(src, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s", src);
        sp_test_agent *a = sp_test_agent_connect(b->sock, 5000);
        char open_msg[800];
        snprintf(open_msg, sizeof(open_msg), "{\"op\":\"write\",\"path\":\"%s\",\"mode\":%d}", dst, mode);
        sp_test_agent_open(a, 1, open_msg);
        sp_test_frame f = sp_test_agent_next(a);
        ck_assert_int_eq(f.type, PR_AGENT_WINDOW);
        sp_buf_free(&f.payload);
        static char chunk[65536];
        for (ssize_t k; (k = read(fd, chunk, sizeof(chunk))) > 0;)
                sp_test_agent_send(a, PR_AGENT_DATA, PR_STREAM_FILE, 1, chunk, (size_t)k);
        sp_test_agent_send(a, PR_AGENT_EOF, PR_STREAM_FILE, 1, NULL, 0);
        for (uint8_t t = 0; t != PR_AGENT_EXIT;) {
                f = sp_test_agent_next(a);
                t = f.type;
                sp_buf_free(&f.payload);
        }
        sp_test_agent_close(a);
}

bool sp_test_netbox_logged(sp_test_netenv *env, const sp_test_netbox *b, const char *const *pairs)
{
        /* Filtered by decision and kind when the pairs name them: floods push older records past the last 1000. */
        char filter[96] = "";
        for (size_t k = 0; pairs[k]; k += 2)
                if (strcmp(pairs[k], "decision") == 0 || strcmp(pairs[k], "kind") == 0) {
                        size_t l = strlen(filter);
                        snprintf(filter + l, sizeof(filter) - l, ",\"%s\":\"%s\"", pairs[k], pairs[k + 1]);
                }
        for (int tries = 0; tries < 30; tries++) {
                _cleanup_json_ json_object *r =
                        sp_test_netenv_call(env, "GetEgressLog", "{\"id\":\"%s\",\"limit\":1000%s}", b->id, filter);
                json_object *recs = NULL;
                ck_assert(json_object_object_get_ex(r, "records", &recs));
                for (size_t i = 0; i < json_object_array_length(recs); i++) {
                        json_object *rec = json_object_array_get_idx(recs, i), *v = NULL;
                        bool all = true;
                        for (size_t k = 0; pairs[k] && all; k += 2)
                                all = json_object_object_get_ex(rec, pairs[k], &v) &&
                                      strcmp(json_object_get_string(v), pairs[k + 1]) == 0;
                        if (all)
                                return true;
                }
                usleep(100000);
        }
        return false;
}

void sp_test_netbox_dump(sp_test_netenv *env, const sp_test_netbox *b)
{
        char p[800];
        snprintf(p, sizeof(p), "%s/state/sandboxes/%s/egress.log", env->top, b->id);
        sp_test_dump_file_tail("egress log", p, 12);
        sp_test_dump_file_tail("internet", env->in.log_path, 12);
        snprintf(p, sizeof(p), "%s/worker.log", env->top);
        sp_test_dump_file_tail("worker", p, 20);
}

int sp_test_netbox_pid(sp_test_netenv *env, const sp_test_netbox *b)
{
        char path[800];
        snprintf(path, sizeof(path), "%s/state/sandboxes/%s/sandbox.json", env->top, b->id);
        _cleanup_json_ json_object *o = json_object_from_file(path);
        json_object *bx = NULL, *pid = NULL;
        ck_assert(o && json_object_object_get_ex(o, "box", &bx) && json_object_object_get_ex(bx, "pid", &pid));
        return json_object_get_int(pid);
}
