/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl against a real cluster: PostgreSQL, the control plane and one
 * worker (tests/harness/space_cluster.h), driven by the real spacectl binary
 * with a temporary configuration. Profiles; the sandbox lifecycle (create
 * --wait prints the id, ls as a table and as JSON with filters, get, pause,
 * resume, suspend, wake, a --no-wait operation waited for, timeout, rm), each
 * checked through the API as well; tenants and keys, a new key used through
 * the environment, revoked; workers listed, cordoned and uncordoned, join
 * tokens; a wrong key; and the API over HTTPS from a second control-plane
 * replica, trusted through --ca or a profile, refused without it. Needs
 * root (the worker), btrfs and PostgreSQL.
 */
#include <sys/stat.h>

#include "launcher.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/id.h"
#include "space/pki.h"
#include "space_cluster.h"
#include "test_spacectl_util.h"

static sp_test_space S;
static char *dir;

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1};
        sp_test_space_up(&S, &o);
        dir = sp_test_tmpdir("spacectl");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* Each test has its own configuration file. */
static void use_config(const char *name)
{
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/%s.json", dir, name);
}

static const char *api_url(void)
{
        static char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", S.api);
        return url;
}

/* A profile "local" for the cluster with key, made current. */
static void profile_local(const char *key)
{
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "profile", "set", "local", "--endpoint", api_url(),
                                                    "--api-key", key, "--use", NULL);
        ctl_assert_code(r, 0);
}

/* The sandbox through the API (asserting 200). */
static json_object *api_sandbox(const char *key, const char *id)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        return sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
}

/* Runs a lifecycle verb through spacectl and checks the state it prints and the API's. */
static void lifecycle(const char *id, const char *verb, const char *want)
{
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "sandbox", verb, id, NULL);
        ctl_assert_code(r, 0);
        char line[160];
        snprintf(line, sizeof(line), "%s %s\n", id, want);
        ck_assert_str_eq(r.out.data, line);
        _cleanup_json_ json_object *s = api_sandbox(S.admin_key, id);
        ck_assert_str_eq(sp_test_jstr(s, "state"), want);
}

/* Whether the sandbox list in a --json result holds id. */
static bool listed(const ctl_result *r, const char *id)
{
        _cleanup_json_ json_object *o = ctl_json(r);
        json_object *arr = sp_test_jarr(o, "sandboxes");
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                if (strcmp(sp_test_jstr(json_object_array_get_idx(arr, i), "id"), id) == 0)
                        return true;
        return false;
}

START_TEST(profiles_and_the_sandbox_lifecycle)
{
        use_config("lifecycle");
        profile_local(S.admin_key);
        struct stat st;
        ck_assert_int_eq(stat(ctl_config_path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        _cleanup_ctl_result_ ctl_result ls = ctl_run(NULL, NULL, "profile", "ls", NULL);
        ctl_assert_code(ls, 0);
        ck_assert_ptr_nonnull(strstr(ls.out.data, api_url()));
        ck_assert_ptr_null(strstr(ls.out.data, S.admin_key));

        /* create --wait (the default) prints the id once the sandbox runs. */
        _cleanup_ctl_result_ ctl_result c =
                ctl_run(NULL, NULL, "sandbox", "create", "--template", "base", "--memory", "64M", "--cpu", "0.5",
                        "--metadata", "owner=ctl", "--env", "GREETING=hi", "--progress", NULL);
        ctl_assert_code(c, 0);
        char id[64];
        snprintf(id, sizeof(id), "%s", ctl_line(&c));
        ck_assert_msg(sp_id_valid(id, "sbx"), "not a sandbox id: '%s'", c.out.data);
        _cleanup_json_ json_object *s = api_sandbox(S.admin_key, id);
        ck_assert_str_eq(sp_test_jstr(s, "state"), "running");
        ck_assert_str_eq(sp_test_jstr(s, "metadata.owner"), "ctl");
        json_object *res = NULL;
        json_object_object_get_ex(s, "resources", &res);
        ck_assert_int_eq(json_object_get_int(json_object_object_get(res, "memory_mb")), 64);
        ck_assert_int_eq(json_object_get_int(json_object_object_get(res, "cpu_millis")), 500);

        /* stats: one sample from the worker, a table and JSON. */
        _cleanup_ctl_result_ ctl_result stt = ctl_run(NULL, NULL, "sandbox", "stats", id, NULL);
        ctl_assert_code(stt, 0);
        ck_assert_msg(strncmp(stt.out.data, "ID ", 3) == 0 && strstr(stt.out.data, "CPU TIME") &&
                              strstr(stt.out.data, id) && strstr(stt.out.data, "/64Mi"),
                      "%s", stt.out.data);
        _cleanup_ctl_result_ ctl_result stj = ctl_run(NULL, NULL, "sandbox", "stats", id, "--json", NULL);
        ctl_assert_code(stj, 0);
        _cleanup_json_ json_object *sto = ctl_json(&stj);
        ck_assert_str_eq(sp_test_jstr(sto, "sandbox_id"), id);
        ck_assert_int_gt(atoll(sp_test_jstr(sto, "memory_bytes")), 0);

        /* ls: a table, and JSON, with filters. */
        _cleanup_ctl_result_ ctl_result t = ctl_run(NULL, NULL, "sandbox", "ls", NULL);
        ctl_assert_code(t, 0);
        ck_assert_msg(strncmp(t.out.data, "ID ", 3) == 0 && strstr(t.out.data, "STATE"), "%s", t.out.data);
        const char *row = strstr(t.out.data, id);
        ck_assert_ptr_nonnull(row);
        char line[512];
        snprintf(line, sizeof(line), "%.*s", (int)strcspn(row, "\n"), row);
        ck_assert_msg(strstr(line, " base ") && strstr(line, " running ") && strstr(line, " 500m ") &&
                              strstr(line, " 64Mi "),
                      "%s", t.out.data);
        _cleanup_ctl_result_ ctl_result j = ctl_run(NULL, NULL, "sandbox", "ls", "--json", NULL);
        ctl_assert_code(j, 0);
        ck_assert(listed(&j, id));
        _cleanup_ctl_result_ ctl_result f1 = ctl_run(NULL, NULL, "sandbox", "ls", "--json", "--metadata", "owner=ctl",
                                                     "--state", "running", "--template", "base", NULL);
        ck_assert(listed(&f1, id));
        _cleanup_ctl_result_ ctl_result f2 =
                ctl_run(NULL, NULL, "sandbox", "ls", "--json", "--metadata", "owner=nobody", NULL);
        ck_assert(!listed(&f2, id));
        _cleanup_ctl_result_ ctl_result f3 =
                ctl_run(NULL, NULL, "sandbox", "ls", "--all", "--json", "--state", "paused", NULL);
        ck_assert(!listed(&f3, id));

        /* get, as key/value lines and as the API's JSON. */
        _cleanup_ctl_result_ ctl_result g = ctl_run(NULL, NULL, "sandbox", "get", id, NULL);
        ctl_assert_code(g, 0);
        ck_assert_ptr_nonnull(strstr(g.out.data, "state: running\n"));
        ck_assert_ptr_nonnull(strstr(g.out.data, "metadata.owner: ctl\n"));
        _cleanup_ctl_result_ ctl_result gj = ctl_run(NULL, NULL, "sandbox", "get", id, "--json", NULL);
        _cleanup_json_ json_object *go = ctl_json(&gj);
        ck_assert_str_eq(sp_test_jstr(go, "id"), id);
        ck_assert_str_eq(sp_test_jstr(go, "state"), "running");

        lifecycle(id, "pause", "paused");
        lifecycle(id, "resume", "running");
        lifecycle(id, "suspend", "suspended");
        lifecycle(id, "wake", "running");

        /* --no-wait: the operation, then operation wait. */
        _cleanup_ctl_result_ ctl_result nw = ctl_run(NULL, NULL, "sandbox", "pause", id, "--no-wait", "--json", NULL);
        ctl_assert_code(nw, 0);
        _cleanup_json_ json_object *env = ctl_json(&nw);
        char op[64];
        snprintf(op, sizeof(op), "%s", sp_test_jstr(env, "operation.id"));
        ck_assert(sp_id_valid(op, "op"));
        _cleanup_ctl_result_ ctl_result ow = ctl_run(NULL, NULL, "operation", "wait", op, NULL);
        ctl_assert_code(ow, 0);
        char want[128];
        snprintf(want, sizeof(want), "%s succeeded\n", op);
        ck_assert_str_eq(ow.out.data, want);
        _cleanup_ctl_result_ ctl_result og = ctl_run(NULL, NULL, "operation", "get", op, "--json", NULL);
        _cleanup_json_ json_object *ogo = ctl_json(&og);
        ck_assert_str_eq(sp_test_jstr(ogo, "kind"), "pause");
        ck_assert_str_eq(sp_test_jstr(ogo, "target_id"), id);
        /* --json with --wait: the final operation and the sandbox. */
        _cleanup_ctl_result_ ctl_result rj = ctl_run(NULL, NULL, "sandbox", "resume", id, "--json", NULL);
        ctl_assert_code(rj, 0);
        _cleanup_json_ json_object *rjo = ctl_json(&rj);
        ck_assert_str_eq(sp_test_jstr(rjo, "operation.state"), "succeeded");
        ck_assert_str_eq(sp_test_jstr(rjo, "sandbox.state"), "running");
        /* A state that does not allow it: the API's conflict, exit 1. */
        _cleanup_ctl_result_ ctl_result bad = ctl_run(NULL, NULL, "sandbox", "resume", id, NULL);
        ctl_assert_code(bad, 1);
        ck_assert_msg(strstr(bad.err.data, "(conflict)"), "%s", bad.err.data);

        /* timeout: set and clear. */
        _cleanup_ctl_result_ ctl_result to =
                ctl_run(NULL, NULL, "sandbox", "timeout", id, "1h", "--end-action", "suspend", NULL);
        ctl_assert_code(to, 0);
        ck_assert_ptr_nonnull(strstr(to.out.data, ": suspend at "));
        _cleanup_json_ json_object *s2 = api_sandbox(S.admin_key, id);
        ck_assert_str_ne(sp_test_jstr(s2, "end_at") ? sp_test_jstr(s2, "end_at") : "", "");
        _cleanup_ctl_result_ ctl_result to0 = ctl_run(NULL, NULL, "sandbox", "timeout", id, "0", NULL);
        ctl_assert_code(to0, 0);
        ck_assert_ptr_nonnull(strstr(to0.out.data, "has no timeout"));

        /* rm, and it is gone. */
        _cleanup_ctl_result_ ctl_result rm = ctl_run(NULL, NULL, "sandbox", "rm", id, NULL);
        ctl_assert_code(rm, 0);
        snprintf(want, sizeof(want), "%s deleted\n", id);
        ck_assert_str_eq(rm.out.data, want);
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        json_object_put(sp_test_api(&S, S.admin_key, "GET", path, 404, NULL, NULL));
        _cleanup_ctl_result_ ctl_result gone = ctl_run(NULL, NULL, "sandbox", "get", id, NULL);
        ctl_assert_code(gone, 1);
        ck_assert_msg(strncmp(gone.err.data, "spacectl: ", 10) == 0 && strstr(gone.err.data, "(not_found)"), "%s",
                      gone.err.data);
}
END_TEST

START_TEST(tenants_and_keys)
{
        use_config("tenants");
        profile_local(S.admin_key);
        char name[64];
        snprintf(name, sizeof(name), "ctl-%d", (int)getpid());
        _cleanup_ctl_result_ ctl_result t = ctl_run(NULL, NULL, "tenant", "create", name, NULL);
        ctl_assert_code(t, 0);
        char tenant[64];
        snprintf(tenant, sizeof(tenant), "%s", ctl_line(&t));
        ck_assert_msg(sp_id_valid(tenant, "ten"), "%s", t.out.data);
        _cleanup_ctl_result_ ctl_result k = ctl_run(NULL, NULL, "key", "create", "k1", "--tenant", tenant, NULL);
        ctl_assert_code(k, 0);
        char secret[256];
        snprintf(secret, sizeof(secret), "%s", ctl_line(&k));
        ck_assert_uint_gt(strlen(secret), 16);
        ck_assert_ptr_nonnull(strstr(k.err.data, "shown only now"));
        /* ls: the tenant in a table and in JSON; its key without the secret. */
        _cleanup_ctl_result_ ctl_result tl = ctl_run(NULL, NULL, "tenant", "ls", NULL);
        ctl_assert_code(tl, 0);
        const char *trow = strstr(tl.out.data, tenant);
        ck_assert_msg(strncmp(tl.out.data, "ID ", 3) == 0 && trow && strstr(trow, name), "%s", tl.out.data);
        _cleanup_ctl_result_ ctl_result tlj = ctl_run(NULL, NULL, "tenant", "ls", "--json", NULL);
        ctl_assert_code(tlj, 0);
        ck_assert_ptr_nonnull(strstr(tlj.out.data, tenant));
        _cleanup_json_ json_object *tlo = ctl_json(&tlj);
        ck_assert_uint_ge(json_object_array_length(sp_test_jarr(tlo, "tenants")), 2);
        _cleanup_ctl_result_ ctl_result kl = ctl_run(NULL, NULL, "key", "ls", "--tenant", tenant, "--json", NULL);
        ctl_assert_code(kl, 0);
        ck_assert_ptr_null(strstr(kl.out.data, secret));
        _cleanup_json_ json_object *klo = ctl_json(&kl);
        json_object *kls = sp_test_jarr(klo, "keys");
        ck_assert_uint_eq(json_object_array_length(kls), 1);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(kls, 0), "name"), "k1");
        ck_assert_ptr_null(sp_test_jstr(json_object_array_get_idx(kls, 0), "secret"));

        /* The new key through the environment, over the profile's admin key. */
        char env_key[300];
        snprintf(env_key, sizeof(env_key), "SPACE_API_KEY=%s", secret);
        const char *env[] = {env_key, NULL};
        _cleanup_ctl_result_ ctl_result c =
                ctl_run(env, NULL, "sandbox", "create", "--template", "base", "--memory", "64M", NULL);
        ctl_assert_code(c, 0);
        char id[64];
        snprintf(id, sizeof(id), "%s", ctl_line(&c));
        _cleanup_ctl_result_ ctl_result mine = ctl_run(env, NULL, "sandbox", "ls", "--json", NULL);
        ck_assert(listed(&mine, id));
        _cleanup_json_ json_object *mo = ctl_json(&mine);
        ck_assert_int_eq(json_object_array_length(sp_test_jarr(mo, "sandboxes")), 1);
        /* The admin's tenant does not see it. */
        _cleanup_ctl_result_ ctl_result theirs = ctl_run(NULL, NULL, "sandbox", "ls", "--all", "--json", NULL);
        ctl_assert_code(theirs, 0);
        ck_assert(!listed(&theirs, id));
        /* A tenant key is no admin key. */
        _cleanup_ctl_result_ ctl_result w = ctl_run(env, NULL, "worker", "ls", NULL);
        ctl_assert_code(w, 1);
        ck_assert_msg(strstr(w.err.data, "(permission_denied)"), "%s", w.err.data);
        /* A flag beats the environment. */
        _cleanup_ctl_result_ ctl_result fl = ctl_run(env, NULL, "--api-key", S.admin_key, "worker", "ls", NULL);
        ctl_assert_code(fl, 0);
        _cleanup_ctl_result_ ctl_result rm = ctl_run(env, NULL, "sandbox", "rm", id, NULL);
        ctl_assert_code(rm, 0);

        /* The tenant makes a key of its own and revokes it: it stops working. */
        _cleanup_ctl_result_ ctl_result k2 = ctl_run(env, NULL, "key", "create", "k2", "--json", NULL);
        ctl_assert_code(k2, 0);
        _cleanup_json_ json_object *k2o = ctl_json(&k2);
        ck_assert_str_eq(sp_test_jstr(k2o, "tenant_id"), tenant);
        char env_key2[300];
        snprintf(env_key2, sizeof(env_key2), "SPACE_API_KEY=%s", sp_test_jstr(k2o, "secret"));
        const char *env2[] = {env_key2, NULL};
        _cleanup_ctl_result_ ctl_result ok = ctl_run(env2, NULL, "sandbox", "ls", NULL);
        ctl_assert_code(ok, 0);
        _cleanup_ctl_result_ ctl_result rv = ctl_run(env, NULL, "key", "revoke", sp_test_jstr(k2o, "id"), NULL);
        ctl_assert_code(rv, 0);
        ck_assert_ptr_nonnull(strstr(rv.out.data, "revoked"));
        _cleanup_ctl_result_ ctl_result after = ctl_run(env2, NULL, "sandbox", "ls", NULL);
        ctl_assert_code(after, 1);
        ck_assert_msg(strstr(after.err.data, "(unauthenticated)"), "%s", after.err.data);
        /* A tenant may not make admin keys. */
        _cleanup_ctl_result_ ctl_result adm = ctl_run(env, NULL, "key", "create", "k3", "--admin", NULL);
        ctl_assert_code(adm, 1);
        /* It lists its own keys only, the revoked one marked; tenants are the admins' to list. */
        _cleanup_ctl_result_ ctl_result own = ctl_run(env, NULL, "key", "ls", NULL);
        ctl_assert_code(own, 0);
        const char *krow = strstr(own.out.data, sp_test_jstr(k2o, "id"));
        ck_assert_msg(strncmp(own.out.data, "ID ", 3) == 0 && krow && strstr(krow, "revoked"), "%s", own.out.data);
        _cleanup_ctl_result_ ctl_result ownj = ctl_run(env, NULL, "key", "ls", "--json", NULL);
        _cleanup_json_ json_object *ojo = ctl_json(&ownj);
        json_object *oks = sp_test_jarr(ojo, "keys");
        ck_assert_uint_eq(json_object_array_length(oks), 2);
        for (size_t i = 0; i < 2; i++)
                ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(oks, i), "tenant_id"), tenant);
        _cleanup_ctl_result_ ctl_result tls = ctl_run(env, NULL, "tenant", "ls", NULL);
        ctl_assert_code(tls, 1);
        ck_assert_msg(strstr(tls.err.data, "(permission_denied)"), "%s", tls.err.data);
}
END_TEST

START_TEST(workers_and_join_tokens)
{
        use_config("workers");
        profile_local(S.admin_key);
        _cleanup_ctl_result_ ctl_result ls = ctl_run(NULL, NULL, "worker", "ls", NULL);
        ctl_assert_code(ls, 0);
        ck_assert_msg(strncmp(ls.out.data, "NAME ", 5) == 0, "%s", ls.out.data);
        const char *row = strstr(ls.out.data, "node-0");
        ck_assert_msg(row && strstr(row, "ready"), "%s", ls.out.data);
        _cleanup_ctl_result_ ctl_result lj = ctl_run(NULL, NULL, "worker", "ls", "--json", NULL);
        _cleanup_json_ json_object *lo = ctl_json(&lj);
        json_object *w0 = json_object_array_get_idx(sp_test_jarr(lo, "workers"), 0);
        ck_assert_str_eq(sp_test_jstr(w0, "name"), "node-0");
        /* Its job queue, as its heartbeats say (the column JOBS). */
        ck_assert_msg(strstr(ls.out.data, " JOBS "), "%s", ls.out.data);
        json_object *obs = NULL, *jobs = NULL, *threads = NULL;
        ck_assert(json_object_object_get_ex(w0, "observed", &obs) && json_object_object_get_ex(obs, "jobs", &jobs) &&
                  json_object_object_get_ex(jobs, "threads", &threads));
        ck_assert_int_gt(json_object_get_int(threads), 0);
        char wid[64], path[128];
        snprintf(wid, sizeof(wid), "%s", sp_test_jstr(w0, "id"));
        snprintf(path, sizeof(path), "/v1/workers/%s", wid);

        /* By name or by id. */
        _cleanup_ctl_result_ ctl_result c = ctl_run(NULL, NULL, "worker", "cordon", "node-0", NULL);
        ctl_assert_code(c, 0);
        ck_assert_str_eq(c.out.data, "node-0 cordoned\n");
        _cleanup_json_ json_object *wc = sp_test_api(&S, S.admin_key, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(wc, "state"), "cordoned");
        _cleanup_ctl_result_ ctl_result g = ctl_run(NULL, NULL, "worker", "get", wid, "--json", NULL);
        _cleanup_json_ json_object *go = ctl_json(&g);
        ck_assert_str_eq(sp_test_jstr(go, "admin_state"), "cordoned");
        _cleanup_ctl_result_ ctl_result u = ctl_run(NULL, NULL, "worker", "uncordon", wid, NULL);
        ctl_assert_code(u, 0);
        ck_assert_str_eq(u.out.data, "node-0 ready\n");
        _cleanup_json_ json_object *wu = sp_test_api(&S, S.admin_key, "GET", path, 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(wu, "state"), "ready");
        _cleanup_ctl_result_ ctl_result nf = ctl_run(NULL, NULL, "worker", "cordon", "node-9", NULL);
        ctl_assert_code(nf, 1);

        /* Join tokens: the token on stdout, revoked by id. */
        _cleanup_ctl_result_ ctl_result t = ctl_run(NULL, NULL, "worker", "join-token", "create", "--ttl", "10m",
                                                    "--uses", "2", "--description", "spare node", NULL);
        ctl_assert_code(t, 0);
        ck_assert_uint_gt(strlen(ctl_line(&t)), 16);
        ck_assert_ptr_nonnull(strstr(t.err.data, "2 uses"));
        _cleanup_ctl_result_ ctl_result tj = ctl_run(NULL, NULL, "worker", "join-token", "create", "--json", NULL);
        _cleanup_json_ json_object *to = ctl_json(&tj);
        _cleanup_ctl_result_ ctl_result rv =
                ctl_run(NULL, NULL, "worker", "join-token", "revoke", sp_test_jstr(to, "id"), "--json", NULL);
        ctl_assert_code(rv, 0);
        _cleanup_json_ json_object *rvo = ctl_json(&rv);
        ck_assert_str_eq(sp_test_jstr(rvo, "revoked"), "true");
        _cleanup_ctl_result_ ctl_result again =
                ctl_run(NULL, NULL, "worker", "join-token", "revoke", sp_test_jstr(to, "id"), NULL);
        ck_assert_int_ne(again.code, 0);
        /* ls: both tokens with their states, never their secrets. */
        _cleanup_ctl_result_ ctl_result jl = ctl_run(NULL, NULL, "worker", "join-token", "ls", NULL);
        ctl_assert_code(jl, 0);
        const char *jrow = strstr(jl.out.data, sp_test_jstr(to, "id"));
        ck_assert_msg(strncmp(jl.out.data, "ID ", 3) == 0 && jrow && strstr(jrow, "revoked") &&
                              strstr(jl.out.data, "spare node"),
                      "%s", jl.out.data);
        ck_assert_ptr_null(strstr(jl.out.data, ctl_line(&t)));
        _cleanup_ctl_result_ ctl_result jlj = ctl_run(NULL, NULL, "worker", "join-token", "ls", "--json", NULL);
        ctl_assert_code(jlj, 0);
        ck_assert_ptr_null(strstr(jlj.out.data, sp_test_jstr(to, "token")));
        _cleanup_json_ json_object *jlo = ctl_json(&jlj);
        ck_assert_uint_ge(json_object_array_length(sp_test_jarr(jlo, "join_tokens")), 2);
}
END_TEST

START_TEST(wrong_key_and_bad_input)
{
        use_config("errors");
        profile_local("not-a-key");
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "sandbox", "ls", NULL);
        ctl_assert_code(r, 1);
        ck_assert_msg(strncmp(r.err.data, "spacectl: ", 10) == 0 && strstr(r.err.data, "(unauthenticated)"), "%s",
                      r.err.data);
        ck_assert_ptr_null(strstr(r.err.data, "not-a-key"));
        /* The API's own validation comes back in its words. */
        _cleanup_ctl_result_ ctl_result v = ctl_run(NULL, NULL, "--api-key", S.admin_key, "sandbox", "create",
                                                    "--template", "base", "--memory", "1M", NULL);
        ctl_assert_code(v, 1);
        ck_assert_msg(strstr(v.err.data, "memory_mb") && strstr(v.err.data, "(invalid_argument)"), "%s", v.err.data);
        _cleanup_ctl_result_ ctl_result nt = ctl_run(NULL, NULL, "--api-key", S.admin_key, "sandbox", "create",
                                                     "--template", "no-such-template", NULL);
        ctl_assert_code(nt, 1);
}
END_TEST

/* ---- HTTPS ---- */

START_TEST(https_with_a_ca)
{
        use_config("tls");
        /* A certificate for the API's names, from a CA of the test's. */
        _cleanup_pki_ca_ sp_pki_ca *ca = NULL;
        ck_assert_int_eq(sp_pki_ca_create("spacectl test", 1, &ca, NULL), 0);
        _cleanup_free_ char *ca_pem = sp_pki_ca_cert_pem(ca, NULL), *cert = NULL, *key = NULL;
        const char *sans[] = {"127.0.0.1", "localhost", NULL};
        ck_assert_int_eq(sp_pki_issue(ca, SP_ROLE_CONTROLPLANE, "api", sans, 1, &cert, &key, NULL), 0);
        char ca_path[600], cert_path[600], key_path[600];
        snprintf(ca_path, sizeof(ca_path), "%s/tls-ca.pem", dir);
        snprintf(cert_path, sizeof(cert_path), "%s/tls-cert.pem", dir);
        snprintf(key_path, sizeof(key_path), "%s/tls-key.pem", dir);
        ck_assert_int_eq(sp_pki_pem_save(ca_path, ca_pem, false, NULL), 0);
        ck_assert_int_eq(sp_pki_pem_save(cert_path, cert, false, NULL), 0);
        ck_assert_int_eq(sp_pki_pem_save(key_path, key, true, NULL), 0);

        /* A second control-plane replica on the same database, its API over HTTPS. */
        _cleanup_error_ sp_error *e = NULL;
        int port = sp_test_free_port(&e), rpc = sp_test_free_port(&e);
        ck_assert_int_gt(port, 0);
        ck_assert_int_gt(rpc, 0);
        char bin[1024], db[1200], listen[80], rpcl[80], tc[700], tk[700], logp[700];
        snprintf(bin, sizeof(bin), "%s/bin/space-controlplane", sp_test_binary_dir());
        snprintf(db, sizeof(db), "--database=%s", S.conninfo);
        snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%d", port);
        snprintf(rpcl, sizeof(rpcl), "--rpc-listen=127.0.0.1:%d", rpc);
        snprintf(tc, sizeof(tc), "--tls-cert=%s", cert_path);
        snprintf(tk, sizeof(tk), "--tls-key=%s", key_path);
        snprintf(logp, sizeof(logp), "%s/controlplane-tls.log", dir);
        const char *argv[] = {bin, db, listen, rpcl, tc, tk, "--name=cp-tls", "--log-format=text", NULL};
        sp_test_proc cp = {0};
        sp_test_proc_opts po = {.log_path = logp};
        sp_test_ok(sp_test_proc_start(&cp, "controlplane-tls", argv, &po, &e), &e);
        sp_test_ok(sp_test_proc_wait_port(&cp, "127.0.0.1", port, 30000, &e), &e);

        char url[64];
        snprintf(url, sizeof(url), "https://127.0.0.1:%d", port);
        _cleanup_ctl_result_ ctl_result ok =
                ctl_run(NULL, NULL, "--endpoint", url, "--ca", ca_path, "--api-key", S.admin_key, "worker", "ls", NULL);
        ctl_assert_code(ok, 0);
        ck_assert_ptr_nonnull(strstr(ok.out.data, "node-0"));
        /* Without the CA the server is not trusted: exit 3, and why. */
        _cleanup_ctl_result_ ctl_result no =
                ctl_run(NULL, NULL, "--endpoint", url, "--api-key", S.admin_key, "worker", "ls", NULL);
        ctl_assert_code(no, 3);
        ck_assert_msg(strstr(no.err.data, "certificate verify failed"), "%s", no.err.data);
        /* A profile by host name, with its CA. */
        snprintf(url, sizeof(url), "https://localhost:%d", port);
        _cleanup_ctl_result_ ctl_result p = ctl_run(NULL, NULL, "profile", "set", "secure", "--endpoint", url, "--ca",
                                                    ca_path, "--api-key", S.admin_key, NULL);
        ctl_assert_code(p, 0);
        _cleanup_ctl_result_ ctl_result viaprofile = ctl_run(NULL, NULL, "sandbox", "ls", "--json", NULL);
        ctl_assert_code(viaprofile, 0);
        _cleanup_json_ json_object *o = ctl_json(&viaprofile);
        sp_test_jarr(o, "sandboxes");
        /* Plain HTTP to the HTTPS port is a connection failure, not an answer. */
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
        _cleanup_ctl_result_ ctl_result plain = ctl_run(NULL, NULL, "--endpoint", url, "sandbox", "ls", NULL);
        ctl_assert_code(plain, 3);
        sp_test_proc_stop(&cp, 10000, NULL);
        sp_test_proc_free(&cp);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("spacectl");
        TCase *tc = tcase_create("cluster");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, profiles_and_the_sandbox_lifecycle);
        tcase_add_test(tc, tenants_and_keys);
        tcase_add_test(tc, workers_and_join_tokens);
        tcase_add_test(tc, wrong_key_and_bad_input);
        tcase_add_test(tc, https_with_a_ca);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
