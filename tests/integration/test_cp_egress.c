/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Egress through the public API of a real cluster (PostgreSQL,
 * space-controlplane, a space-worker whose sandboxes have a network and whose
 * gateway connects out only into this test's own internet, inet.h):
 *
 * - egress profiles are a tenant's: created, listed (with the built-in none
 *   and public), read, changed and deleted; a malformed one is a 400 naming
 *   the field and changes nothing; private addresses need an admin; a
 *   profile in use cannot be deleted; another tenant sees none of them;
 * - a sandbox created with a profile reaches what it allows and nothing
 *   else; PUT /v1/sandboxes/{id}/egress changes it and the new rules hold
 *   when the API answers (none, a profile of its own, back to the named one);
 * - changing a profile reaches the running sandboxes that use it (the
 *   controller sends it; egress_applied says when);
 * - GET /v1/sandboxes/{id}/egress/log shows the decisions, filtered by
 *   decision and kind, paged with before;
 * - create with a profile that does not exist is a 404 and makes nothing;
 * - a relayed connection with no bytes either way is closed by the gateway
 *   after its idle timeout (2 s here), and the server sees it end; one that
 *   keeps talking is cut when the sandbox's profile stops allowing it;
 * - spacectl egress create/ls/get/update/rm, sandbox create --egress,
 *   sandbox egress and sandbox egress-log (--decision, --json, --follow).
 *
 * Needs root (the worker, namespaces, nftables), btrfs and PostgreSQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard.h"
#include "harness.h"
#include "inet.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "test_spacectl_util.h"

static sp_test_space S;
static sp_test_inet in;
static char *dir;
static int ns_guard;

static const sp_test_inet_record records[] = {
        {"allowed.test", "10.213.200.1"},
        {"evil.test", "10.213.200.3"},
        {"api.test", "10.213.200.4"},
};

static void cluster_up(void)
{
        sp_error *e = NULL;
        dir = sp_test_tmpdir("cpegress");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/spacectl.json", dir);
        sp_test_ok(sp_test_inet_start(&in, dir, records, SP_ARRAY_SIZE(records), &e), &e);
        const char *del_ns[] = {"ip", "netns", "delete", in.ns.name, NULL};
        ns_guard = sp_test_guard_run(del_ns, &e);
        sp_test_ok(ns_guard, &e);
        /* The gateway closes relayed connections idle for 2 s here (its default is 15 minutes). */
        setenv("SPACE_GATEWAY_IDLE_TIMEOUT_S", "2", 1);
        /* Hosts a secret is injected for are checked against the internet's CA. */
        static char ca_arg[400];
        snprintf(ca_arg, sizeof(ca_arg), "--gateway-upstream-ca-file=%s", in.ca_path);
        static const char *worker_args[] = {ca_arg, NULL};
        sp_test_space_opts o = {.workers = 1, .net_upstream = in.ns.path, .worker_args = worker_args};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/controlplane0.log", S.dir);
        sp_test_dump_file_tail("control plane", logp, 15);
        snprintf(logp, sizeof(logp), "%s/w0/worker.log", S.dir);
        sp_test_dump_file_tail("worker", logp, 15);
        sp_test_space_down(&S);
        sp_test_inet_stop(&in);
        sp_test_guard_done(ns_guard);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

#define API(key, method, path, status, body) sp_test_api(&S, (key), (method), (path), (status), (body), NULL)

typedef struct tenant {
        char key[256];
} tenant;

static const char *path_of(const char *fmt, const char *a)
{
        static char bufs[4][512];
        static int n;
        char *p = bufs[n++ % 4];
        snprintf(p, 512, fmt, a);
        return p;
}

/* Expects status and an error message containing want. */
static void expect_error(const char *key, const char *method, const char *path, const char *body, int status,
                         const char *want)
{
        _cleanup_json_ json_object *r = API(key, method, path, status, body);
        const char *msg = sp_test_jstr(r, "error.message");
        ck_assert_msg(msg && strstr(msg, want), "%s %s %s: '%s' lacks '%s'", method, path, body ? body : "",
                      msg ? msg : "(none)", want);
}

/* Runs command in sbx through a session and returns its exit code. */
static int run(const tenant *t, const char *sbx, const char *command)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "command", json_object_new_string(command));
        _cleanup_json_ json_object *r =
                API(t->key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201, json_object_to_json_string(body));
        const char *sid = sp_test_jstr(r, "session.id");
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *s = API(t->key, "GET", path_of("/v1/sessions/%s", sid), 200, NULL);
                if (strcmp(sp_test_jstr(s, "state"), "exited") == 0)
                        return atoi(sp_test_jstr(s, "exit.code"));
                ck_assert_msg(sp_now_mono_us() < deadline, "session %s did not end", sid);
                usleep(100 * 1000);
        }
}

#define GET_ALLOWED "timeout 10 wget -q -O /tmp/o http://allowed.test/ && grep -q 'http allowed.test' /tmp/o"
#define GET_EVIL "timeout 10 wget -q -O /tmp/o http://evil.test/ && grep -q 'http evil.test' /tmp/o"

static size_t count_profiles(const tenant *t)
{
        _cleanup_json_ json_object *l = API(t->key, "GET", "/v1/egress-profiles", 200, NULL);
        return json_object_array_length(sp_test_jarr(l, "egress_profiles"));
}

START_TEST(profiles_are_a_tenants_and_checked)
{
        tenant a, b;
        sp_test_new_tenant(&S, "egress-a", a.key);
        sp_test_new_tenant(&S, "egress-b", b.key);
        /* The built-ins are there for everyone. */
        ck_assert_uint_eq(count_profiles(&a), 2);
        _cleanup_json_ json_object *pub = API(a.key, "GET", "/v1/egress-profiles/public", 200, NULL);
        ck_assert_str_eq(sp_test_jstr(pub, "builtin"), "true");

        /* Malformed: 400 naming the field, and nothing made. */
        const char *const bad[][2] = {
                {"{\"name\":\"p\",\"domains\":[\"exa mple.com\"]}", "domains[0]"},
                {"{\"name\":\"p\",\"domains\":[\"*.*.com\"]}", "domains[0]"},
                {"{\"name\":\"p\",\"cidrs\":[\"10.0.0.0/33\"]}", "cidrs[0]"},
                {"{\"name\":\"p\",\"cidrs\":[\"not-a-cidr\"]}", "cidrs[0]"},
                {"{\"name\":\"p\",\"ports\":[0]}", "ports[0]"},
                {"{\"name\":\"p\",\"mode\":\"sometimes\"}", "mode"},
                {"{\"name\":\"p\",\"domain\":[\"a.com\"]}", "domain"},
                {"{\"name\":\"P!\"}", "name"},
                {"{\"name\":\"public\"}", "built-in"},
                {"{\"domains\":[\"a.com\"]}", "name"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++)
                expect_error(a.key, "POST", "/v1/egress-profiles", bad[i][0], 400, bad[i][1]);
        /* Private addresses are an admin's to allow. */
        expect_error(a.key, "POST", "/v1/egress-profiles",
                     "{\"name\":\"lan\",\"cidrs\":[\"192.168.0.0/16\"],\"allow_private\":true}", 403, "admin");
        expect_error(a.key, "POST", "/v1/egress-profiles", "{\"name\":\"lan\",\"cidrs\":[\"192.168.0.0/16\"]}", 403,
                     "allow_private");
        ck_assert_uint_eq(count_profiles(&a), 2);

        /* Made, read, changed; a name is taken once. */
        _cleanup_json_ json_object *made =
                API(a.key, "POST", "/v1/egress-profiles", 201,
                    "{\"name\":\"ci\",\"domains\":[\"PyPI.org\",\"*.pythonhosted.org\"],\"ports\":[443,80,443]}");
        ck_assert_str_eq(sp_test_jstr(made, "name"), "ci");
        ck_assert_str_eq(sp_test_jstr(made, "mode"), "enforce");
        ck_assert_str_eq(json_object_to_json_string(sp_test_jarr(made, "domains")),
                         "[ \"pypi.org\", \"*.pythonhosted.org\" ]");
        ck_assert_str_eq(json_object_to_json_string(sp_test_jarr(made, "ports")), "[ 80, 443 ]");
        expect_error(a.key, "POST", "/v1/egress-profiles", "{\"name\":\"ci\"}", 409, "exists");
        ck_assert_uint_eq(count_profiles(&a), 3);
        expect_error(a.key, "PUT", "/v1/egress-profiles/ci", "{\"name\":\"other\"}", 400, "name");
        expect_error(a.key, "PUT", "/v1/egress-profiles/ci", "{\"domains\":[\"..\"]}", 400, "domains[0]");
        expect_error(a.key, "PUT", "/v1/egress-profiles/none", "{}", 400, "built in");
        expect_error(a.key, "PUT", "/v1/egress-profiles/nope", "{}", 404, "not found");
        _cleanup_json_ json_object *changed =
                API(a.key, "PUT", "/v1/egress-profiles/ci", 200, "{\"mode\":\"audit\",\"domains\":[\"pypi.org\"]}");
        ck_assert_str_eq(sp_test_jstr(changed, "mode"), "audit");
        _cleanup_json_ json_object *got = API(a.key, "GET", "/v1/egress-profiles/ci", 200, NULL);
        ck_assert_str_eq(json_object_to_json_string(sp_test_jarr(got, "domains")), "[ \"pypi.org\" ]");

        /* Another tenant sees none of it, and may use the same name. */
        ck_assert_uint_eq(count_profiles(&b), 2);
        expect_error(b.key, "GET", "/v1/egress-profiles/ci", NULL, 404, "not found");
        expect_error(b.key, "DELETE", "/v1/egress-profiles/ci", NULL, 404, "not found");
        expect_error(b.key, "PUT", "/v1/egress-profiles/ci", "{}", 404, "not found");
        json_object_put(API(b.key, "POST", "/v1/egress-profiles", 201, "{\"name\":\"ci\"}"));

        /* An admin may allow private addresses. */
        json_object_put(API(S.admin_key, "POST", "/v1/egress-profiles", 201,
                            "{\"name\":\"lan\",\"cidrs\":[\"192.168.0.0/16\"],\"allow_private\":true}"));

        /* A sandbox with a profile that does not exist: 404, nothing made. */
        expect_error(a.key, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"egress\":\"nope\"}", 404,
                     "egress profile 'nope' not found");
        expect_error(a.key, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"egress\":\"Bad Name\"}", 400, "egress");
        expect_error(a.key, "POST", "/v1/sandboxes", "{\"template\":\"base\",\"egress\":{\"ports\":[70000]}}", 400,
                     "ports[0]");
        _cleanup_json_ json_object *l = API(a.key, "GET", "/v1/sandboxes", 200, NULL);
        ck_assert_uint_eq(json_object_array_length(sp_test_jarr(l, "sandboxes")), 0);

        /* Deleted once unused; built-ins never. */
        expect_error(a.key, "DELETE", "/v1/egress-profiles/public", NULL, 400, "built in");
        json_object_put(API(a.key, "DELETE", "/v1/egress-profiles/ci", 204, NULL));
        expect_error(a.key, "DELETE", "/v1/egress-profiles/ci", NULL, 404, "not found");
        ck_assert_uint_eq(count_profiles(&a), 2);
        ck_assert_uint_eq(count_profiles(&b), 3);
}
END_TEST

/* Whether the sandbox's egress log (through the API, query appended) has a
 * record with every (key, value) of pairs, NULL-ended; waits a little for
 * the firewall's batch. */
static bool logged(const tenant *t, const char *sbx, const char *query, const char *const *pairs)
{
        char path[300];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/egress/log?limit=1000%s", sbx, query);
        for (int tries = 0; tries < 30; tries++) {
                _cleanup_json_ json_object *r = API(t->key, "GET", path, 200, NULL);
                json_object *recs = sp_test_jarr(r, "records");
                for (size_t i = 0; i < json_object_array_length(recs); i++) {
                        json_object *rec = json_object_array_get_idx(recs, i);
                        bool all = true;
                        for (size_t k = 0; pairs[k] && all; k += 2) {
                                json_object *v = NULL;
                                all = json_object_object_get_ex(rec, pairs[k], &v) &&
                                      strcmp(json_object_get_string(v), pairs[k + 1]) == 0;
                        }
                        if (all)
                                return true;
                }
                usleep(100 * 1000);
        }
        return false;
}
#define LOGGED(t, sbx, query, ...) logged((t), (sbx), (query), (const char *const[]){__VA_ARGS__, NULL})

START_TEST(a_sandbox_reaches_what_its_profile_allows)
{
        tenant t;
        sp_test_new_tenant(&S, "egress-run", t.key);
        json_object_put(API(t.key, "POST", "/v1/egress-profiles", 201,
                            "{\"name\":\"web\",\"domains\":[\"allowed.test\"],\"ports\":[80,443]}"));
        char sbx[64];
        sp_test_create_sandbox(&S, t.key, "{\"template\":\"base\",\"egress\":\"web\"}", sbx);
        _cleanup_json_ json_object *got = API(t.key, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(got, "egress"), "web");
        ck_assert_str_eq(sp_test_jstr(got, "egress_applied"), "true");

        ck_assert_int_eq(run(&t, sbx, GET_ALLOWED), 0);
        ck_assert_int_ne(run(&t, sbx, GET_EVIL), 0);
        ck_assert_int_ne(run(&t, sbx, "timeout 10 wget -q -O /tmp/o http://10.213.200.3/"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, "host=evil.test"), 0);

        /* In use: not deleted. */
        expect_error(t.key, "DELETE", "/v1/egress-profiles/web", NULL, 409, "used by 1 sandboxes");

        /* The log, filtered and paged. */
        ck_assert(LOGGED(&t, sbx, "", "kind", "tcp", "name", "allowed.test", "decision", "allowed"));
        ck_assert(LOGGED(&t, sbx, "&decision=refused", "kind", "dns", "name", "evil.test", "rule", "name"));
        ck_assert(!LOGGED(&t, sbx, "&decision=refused", "decision", "allowed"));
        ck_assert(LOGGED(&t, sbx, "&kind=tcp", "destination", "10.213.200.3", "rule", "address"));
        ck_assert(!LOGGED(&t, sbx, "&kind=tcp", "kind", "dns"));
        {
                _cleanup_json_ json_object *p1 =
                        API(t.key, "GET", path_of("/v1/sandboxes/%s/egress/log?limit=1", sbx), 200, NULL);
                json_object *r1 = sp_test_jarr(p1, "records");
                ck_assert_uint_eq(json_object_array_length(r1), 1);
                ck_assert_str_eq(sp_test_jstr(p1, "more"), "true");
                const char *t1 = sp_test_jstr(json_object_array_get_idx(r1, 0), "time_us");
                char path[300];
                snprintf(path, sizeof(path), "/v1/sandboxes/%s/egress/log?limit=1&before=%s", sbx, t1);
                _cleanup_json_ json_object *p2 = API(t.key, "GET", path, 200, NULL);
                json_object *r2 = sp_test_jarr(p2, "records");
                ck_assert_uint_eq(json_object_array_length(r2), 1);
                ck_assert(strtoll(sp_test_jstr(json_object_array_get_idx(r2, 0), "time_us"), NULL, 10) <
                          strtoll(t1, NULL, 10));
                expect_error(t.key, "GET", path_of("/v1/sandboxes/%s/egress/log?decision=maybe", sbx), NULL, 400,
                             "decision");
                expect_error(t.key, "GET", path_of("/v1/sandboxes/%s/egress/log?limit=0", sbx), NULL, 400, "limit");
                expect_error(t.key, "GET", path_of("/v1/sandboxes/%s/egress/log?before=1&after=1", sbx), NULL, 400,
                             "together");
        }

        /* Changed on the running sandbox: the new rules hold when the API answers. */
        expect_error(t.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), "{\"egress\":\"nope\"}", 404, "not found");
        expect_error(t.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), "{\"egress\":{\"domains\":[\"a b\"]}}", 400,
                     "domains[0]");
        expect_error(t.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), "{\"profile\":\"none\"}", 400, "profile");
        ck_assert_int_eq(run(&t, sbx, GET_ALLOWED), 0); /* nothing changed */
        _cleanup_json_ json_object *none =
                API(t.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), 200, "{\"egress\":\"none\"}");
        ck_assert_str_eq(sp_test_jstr(none, "egress"), "none");
        ck_assert_str_eq(sp_test_jstr(none, "egress_applied"), "true");
        ck_assert_int_ne(run(&t, sbx, GET_ALLOWED), 0);
        json_object_put(API(t.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), 200,
                            "{\"egress\":{\"name\":\"mine\",\"domains\":[\"evil.test\"]}}"));
        ck_assert_int_eq(run(&t, sbx, GET_EVIL), 0);
        ck_assert_int_ne(run(&t, sbx, GET_ALLOWED), 0);
        /* No longer using "web": it may go now, and come back. */
        json_object_put(API(t.key, "DELETE", "/v1/egress-profiles/web", 204, NULL));
        json_object_put(
                API(t.key, "POST", "/v1/egress-profiles", 201, "{\"name\":\"web\",\"domains\":[\"allowed.test\"]}"));
        json_object_put(API(t.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), 200, "{\"egress\":\"web\"}"));
        ck_assert_int_eq(run(&t, sbx, GET_ALLOWED), 0);
        ck_assert_int_ne(run(&t, sbx, GET_EVIL), 0);

        /* The profile changed: its running sandboxes get it from the controller. */
        _cleanup_json_ json_object *upd =
                API(t.key, "PUT", "/v1/egress-profiles/web", 200, "{\"domains\":[\"allowed.test\",\"evil.test\"]}");
        ck_assert_str_eq(sp_test_jstr(upd, "sandboxes_updating"), "1");
        int64_t deadline = sp_now_mono_us() + 30 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *s = API(t.key, "GET", path_of("/v1/sandboxes/%s", sbx), 200, NULL);
                if (strcmp(sp_test_jstr(s, "egress_applied"), "true") == 0)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "the profile's change never reached the sandbox");
                usleep(200 * 1000);
        }
        ck_assert_int_eq(run(&t, sbx, GET_EVIL), 0);

        /* Another tenant can neither read its log nor change its egress. */
        tenant o;
        sp_test_new_tenant(&S, "egress-other", o.key);
        expect_error(o.key, "GET", path_of("/v1/sandboxes/%s/egress/log", sbx), NULL, 404, "not found");
        expect_error(o.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), "{\"egress\":\"public\"}", 404,
                     "not found");

        _cleanup_json_ json_object *del = API(t.key, "DELETE", path_of("/v1/sandboxes/%s", sbx), 202, NULL);
        json_object_put(sp_test_wait_op(&S, t.key, sp_test_jstr(del, "operation.id"), true));
        json_object_put(API(t.key, "DELETE", "/v1/egress-profiles/web", 204, NULL));
}
END_TEST

START_TEST(idle_connections_are_closed)
{
        tenant t;
        sp_test_new_tenant(&S, "egress-idle", t.key);
        char sbx[64];
        sp_test_create_sandbox(
                &S, t.key, "{\"template\":\"base\",\"egress\":{\"domains\":[\"allowed.test\"],\"ports\":[7000]}}", sbx);
        /* The server answers a head and holds the connection; the client keeps its side open (its
         * input lasts 12 s) and waits for a body that never comes. The gateway ends it after 2 s
         * without bytes (nc: 0 or 1); were it kept, timeout(1) would end nc after 9 s (143). */
        ck_assert_int_eq(run(&t, sbx,
                             "{ printf 'GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n'; sleep 12; } | "
                             "{ timeout 9 nc allowed.test 7000 >/tmp/out; echo $? >/tmp/rc; }; "
                             "grep -q '^HTTP/1.1 200' /tmp/out"),
                         0);
        ck_assert_int_eq(run(&t, sbx, "grep -qx '[01]' /tmp/rc"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, "10.213.200.1:7000 held until the other side closed"), 1);

        /* A connection that keeps talking (never idle) is cut once the sandbox's profile no longer
         * allows it: nc ends (0 or 1) instead of running until timeout(1) ends it (143). */
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(
                body, "command",
                json_object_new_string("{ printf 'GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n'; "
                                       "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18; do "
                                       "sleep 0.5; echo x; done; } | "
                                       "{ timeout 9 nc allowed.test 7000 >/dev/null; echo $? >/tmp/rc2; }"));
        _cleanup_json_ json_object *ses =
                API(t.key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201, json_object_to_json_string(body));
        for (int i = 0; i < 50 && sp_test_inet_seen(&in, "accept tcp 10.213.200.1:7000") < 2; i++)
                usleep(100 * 1000);
        sleep(1);
        json_object_put(API(t.key, "PUT", path_of("/v1/sandboxes/%s/egress", sbx), 200, "{\"egress\":\"none\"}"));
        const char *sid = sp_test_jstr(ses, "session.id");
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *st = API(t.key, "GET", path_of("/v1/sessions/%s", sid), 200, NULL);
                if (strcmp(sp_test_jstr(st, "state"), "exited") == 0)
                        break;
                ck_assert_msg(sp_now_mono_us() < deadline, "session %s did not end", sid);
                usleep(100 * 1000);
        }
        ck_assert_int_eq(run(&t, sbx, "grep -qx '[01]' /tmp/rc2"), 0);
        ck_assert(LOGGED(&t, sbx, "", "kind", "tcp", "phase", "close", "port", "7000", "decision", "refused"));
        _cleanup_json_ json_object *del = API(t.key, "DELETE", path_of("/v1/sandboxes/%s", sbx), 202, NULL);
        json_object_put(sp_test_wait_op(&S, t.key, sp_test_jstr(del, "operation.id"), true));
}
END_TEST

START_TEST(spacectl_drives_egress)
{
        tenant t;
        sp_test_new_tenant(&S, "egress-ctl", t.key);
        char ep[80], key[300];
        snprintf(ep, sizeof(ep), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api);
        snprintf(key, sizeof(key), "SPACE_API_KEY=%s", t.key);
        const char *env[] = {ep, key, NULL};
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "egress", "create", "only-allowed", "--domain",
                                                            "allowed.test", "--port", "80", NULL);
                ctl_assert_code(r, 0);
                ck_assert_str_eq(ctl_line(&r), "only-allowed");
        }
        {
                /* Bad input: the API's message naming the field, exit 1; a bad port never leaves. */
                _cleanup_ctl_result_ ctl_result r =
                        ctl_run(env, NULL, "egress", "create", "bad", "--cidr", "10.0.0.0/99", NULL);
                ctl_assert_code(r, 1);
                ck_assert_ptr_nonnull(strstr(r.err.data, "cidrs[0]"));
                _cleanup_ctl_result_ ctl_result p =
                        ctl_run(env, NULL, "egress", "create", "bad", "--port", "99999", NULL);
                ctl_assert_code(p, 2);
        }
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "egress", "ls", NULL);
                ctl_assert_code(r, 0);
                ck_assert_msg(strstr(r.out.data, "none") && strstr(r.out.data, "public") &&
                                      strstr(r.out.data, "only-allowed") && strstr(r.out.data, "allowed.test"),
                              "%s", r.out.data);
        }
        char sbx[64];
        {
                _cleanup_ctl_result_ ctl_result r =
                        ctl_run(env, NULL, "sandbox", "create", "--template", "base", "--egress", "only-allowed", NULL);
                ctl_assert_code(r, 0);
                snprintf(sbx, sizeof(sbx), "%s", ctl_line(&r));
        }
        ck_assert_int_eq(run(&t, sbx, GET_ALLOWED), 0);
        ck_assert_int_ne(run(&t, sbx, GET_EVIL), 0);
        {
                _cleanup_ctl_result_ ctl_result r =
                        ctl_run(env, NULL, "sandbox", "egress-log", sbx, "--decision", "refused", NULL);
                ctl_assert_code(r, 0);
                ck_assert_msg(strstr(r.out.data, "evil.test") && !strstr(r.out.data, " allowed "), "%s", r.out.data);
                _cleanup_ctl_result_ ctl_result j =
                        ctl_run(env, NULL, "--json", "sandbox", "egress-log", sbx, "--kind", "tcp", NULL);
                ctl_assert_code(j, 0);
                _cleanup_json_ json_object *o = ctl_json(&j);
                ck_assert_uint_gt(json_object_array_length(sp_test_jarr(o, "records")), 0);
        }
        {
                /* Its own profile from a file, in force when the command returns. */
                char file[700];
                snprintf(file, sizeof(file), "%s/evil.json", dir);
                FILE *f = fopen(file, "w");
                ck_assert_ptr_nonnull(f);
                fputs("{\"name\":\"evil-only\",\"domains\":[\"evil.test\"],\"ports\":[80]}", f);
                fclose(f);
                char at[710];
                snprintf(at, sizeof(at), "@%s", file);
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "sandbox", "egress", sbx, at, NULL);
                ctl_assert_code(r, 0);
                ck_assert_ptr_nonnull(strstr(r.out.data, "egress evil-only"));
        }
        ck_assert_int_eq(run(&t, sbx, GET_EVIL), 0);
        {
                /* Following: a record made while it follows is printed. */
                char cmd[200];
                snprintf(cmd, sizeof(cmd), "sleep 2; %s", GET_ALLOWED);
                _cleanup_json_ json_object *body = json_object_new_object();
                json_object_object_add(body, "command", json_object_new_string(cmd));
                json_object_put(API(t.key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), 201,
                                    json_object_to_json_string(body)));
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "--json", "sandbox", "egress-log", sbx,
                                                            "--follow", "--for", "6s", "--limit", "1", NULL);
                ctl_assert_code(r, 0);
                ck_assert_msg(strstr(r.out.data, "\"name\":\"allowed.test\",\"decision\":\"refused\""), "%s",
                              r.out.data);
        }
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "sandbox", "egress", sbx, "only-allowed", NULL);
                ctl_assert_code(r, 0);
                _cleanup_ctl_result_ ctl_result u = ctl_run(env, NULL, "egress", "update", "only-allowed", "--domain",
                                                            "allowed.test", "--domain", "evil.test", NULL);
                ctl_assert_code(u, 0);
                ck_assert_str_eq(ctl_line(&u), "only-allowed updated (1 sandboxes get it)");
                _cleanup_ctl_result_ ctl_result busy = ctl_run(env, NULL, "egress", "rm", "only-allowed", NULL);
                ctl_assert_code(busy, 1);
                ck_assert_ptr_nonnull(strstr(busy.err.data, "used by 1 sandboxes"));
                _cleanup_ctl_result_ ctl_result rm = ctl_run(env, NULL, "sandbox", "rm", sbx, NULL);
                ctl_assert_code(rm, 0);
                _cleanup_ctl_result_ ctl_result gone = ctl_run(env, NULL, "egress", "rm", "only-allowed", NULL);
                ctl_assert_code(gone, 0);
        }
}
END_TEST

/* The credential broker end to end (docs/secrets.md): a secret made through
 * the API, granted by a profile, given to a sandbox as a placeholder; a
 * command run through the API sends it to the bound host, which receives
 * the value; its use is in the sandbox's egress log and the secret's usage;
 * revoked, the next request carries the placeholder only. */
START_TEST(a_secret_reaches_its_host_through_the_api)
{
        tenant t;
        sp_test_new_tenant(&S, "egress-secret", t.key);
        char value[64], body[512], sbx[64], needle[128];
        snprintf(value, sizeof(value), "sk-wire-%d-%lld", (int)getpid(), (long long)(sp_now_real_us() % 1000000007));
        snprintf(body, sizeof(body),
                 "{\"name\":\"openai\",\"value\":\"%s\",\"hosts\":[\"api.test\"],\"inject\":{\"header\":"
                 "\"Authorization\",\"format\":\"Bearer {{secret}}\"},\"env\":\"OPENAI_API_KEY\"}",
                 value);
        json_object_put(API(t.key, "POST", "/v1/secrets", 201, body));
        json_object_put(API(t.key, "POST", "/v1/egress-profiles", 201,
                            "{\"name\":\"ai\",\"domains\":[\"api.test\"],\"secrets\":[\"openai\"]}"));
        sp_test_create_sandbox(&S, t.key, "{\"template\":\"base\",\"egress\":\"ai\",\"secrets\":[\"openai\"]}", sbx);
#define CALL_API \
        "timeout 10 wget -q -O /tmp/o --no-check-certificate --header \"Authorization: Bearer $OPENAI_API_KEY\" " \
        "https://api.test/v1/models && grep -q 'tls api.test' /tmp/o"
        ck_assert_int_eq(run(&t, sbx, "case \"$OPENAI_API_KEY\" in space-secret-*) exit 0;; esac; exit 1"), 0);
        ck_assert_int_eq(run(&t, sbx, CALL_API), 0);
        snprintf(needle, sizeof(needle), "hdr authorization Bearer %s", value);
        ck_assert_int_eq(sp_test_inet_seen(&in, needle), 1);
        /* Not in the sandbox: its environment, its files. */
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "env | grep -q -e %s || grep -rqs -e %s /etc /tmp /root", value, value);
        ck_assert_int_ne(run(&t, sbx, cmd), 0);
        /* Its use: in the sandbox's egress log, and in the secret's usage. */
        _cleanup_json_ json_object *log =
                API(t.key, "GET", path_of("/v1/sandboxes/%s/egress/log?kind=secret", sbx), 200, NULL);
        const char *text = json_object_to_json_string(log);
        ck_assert_msg(strstr(text, "\"injected\"") && !strstr(text, value), "%s", text);
        _cleanup_json_ json_object *u = API(t.key, "GET", "/v1/secrets/openai/usage", 200, NULL);
        ck_assert_msg(strstr(json_object_to_json_string(u), "injected"), "%s", json_object_to_json_string(u));
        /* Revoked: the next request carries the placeholder only. */
        json_object_put(API(t.key, "DELETE", "/v1/secrets/openai", 200, NULL));
        ck_assert_int_eq(run(&t, sbx, CALL_API), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, needle), 1);
        ck_assert_int_eq(sp_test_inet_seen(&in, "hdr authorization Bearer space-secret-"), 1);
        _cleanup_json_ json_object *d = API(t.key, "DELETE", path_of("/v1/sandboxes/%s", sbx), 202, NULL);
        json_object_put(sp_test_wait_op(&S, t.key, sp_test_jstr(d, "operation.id"), true));
#undef CALL_API
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_egress");
        TCase *tc = tcase_create("egress");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, profiles_are_a_tenants_and_checked);
        tcase_add_test(tc, a_sandbox_reaches_what_its_profile_allows);
        tcase_add_test(tc, spacectl_drives_egress);
        tcase_add_test(tc, idle_connections_are_closed);
        tcase_add_test(tc, a_secret_reaches_its_host_through_the_api);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups, btrfs and nftables");
        sp_test_pg_require();
        return sp_test_main(suite());
}
