/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenant quotas through the public API of a real cluster (a real PostgreSQL,
 * two space-controlplane replicas and a space-worker running jail
 * sandboxes), the cluster's default for running sandboxes set with
 * --quota-running-sandboxes:
 *
 * - GET /v1/tenants/{id}/usage shows each quota's limit, use and source to
 *   an admin and to the tenant itself (another tenant gets 404); only an
 *   admin sets quotas, bad bodies are 400 naming the problem, null gives the
 *   cluster's default back, and a change applies to the next request;
 * - each quota — running sandboxes, CPU, memory, disk, suspended storage,
 *   sessions per sandbox, templates, template bytes — refuses what would go
 *   past it with 429 resource_exhausted naming the quota, its limit, its use
 *   and what was asked, records nothing (no sandbox, operation, session,
 *   template or audit row), counts the refusal in /metrics, and serves what
 *   fits;
 * - wake, restore and start of a suspended or stopped sandbox are refused
 *   over the quota and leave it as it was; a paused sandbox resumes at the
 *   limit (it counts as running already);
 * - a create over the sessions the record counts asks the worker which
 *   ended, and is served when one did;
 * - creates racing for the last slots on both replicas at once never take
 *   more than the limit, nor do sessions racing for a sandbox's last ones;
 * - spacectl tenant quota sets them (a number, none, default) and spacectl
 *   tenant usage shows them, to the tenant as a table and with --json.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "test_spacectl_util.h"

#define CLUSTER_RUNNING 50
#define SMALL "\"resources\":{\"memory_mb\":32,\"cpu_millis\":100,\"disk_mb\":64}"
#define SANDBOX "{\"template\":\"base\"," SMALL "}"

/* Audit records of what was done: where records carry an outcome (refused
 * calls are recorded too), those that succeeded. */
#define DONE "coalesce(to_jsonb(a)->>'outcome', 'ok') = 'ok'"

static sp_test_space S;
static char *dir;
static const char *cp_args[] = {"--quota-running-sandboxes=50", NULL};

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        dir = sp_test_tmpdir("quotas");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/spacectl.json", dir);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* ---- helpers ---- */

#define API(key, method, path, status, body) sp_test_api(&S, (key), (method), (path), (status), (body), NULL)

typedef struct tenant {
        char id[64];
        char key[256];
} tenant;

static void new_tenant(const char *name, tenant *t)
{
        char body[200];
        snprintf(body, sizeof(body), "{\"name\":\"%s-%d\"}", name, (int)getpid());
        _cleanup_json_ json_object *r = API(S.admin_key, "POST", "/v1/tenants", 201, body);
        snprintf(t->id, sizeof(t->id), "%s", sp_test_jstr(r, "id"));
        snprintf(body, sizeof(body), "{\"name\":\"k\",\"tenant_id\":\"%s\"}", t->id);
        _cleanup_json_ json_object *k = API(S.admin_key, "POST", "/v1/keys", 201, body);
        snprintf(t->key, sizeof(t->key), "%s", sp_test_jstr(k, "secret"));
}

static const char *path_of(const char *fmt, const char *a)
{
        static char bufs[4][512];
        static int n;
        char *p = bufs[n++ % 4];
        snprintf(p, 512, fmt, a);
        return p;
}

static int64_t jint(json_object *o, const char *path)
{
        const char *s = sp_test_jstr(o, path);
        ck_assert_msg(s, "no %s in %s", path, json_object_to_json_string(o));
        return strtoll(s, NULL, 10);
}

/* Sets the tenant's quotas (body: a JSON object) as the admin; returns the usage answer. */
static json_object *set_quotas(const tenant *t, const char *body)
{
        return API(S.admin_key, "PUT", path_of("/v1/tenants/%s/quotas", t->id), 200, body);
}

/* The first value of sql with the tenant's id as $1, as a number. */
static int64_t count(const tenant *t, const char *sql)
{
        const char *p[] = {t->id};
        _cleanup_free_ char *v = sp_test_space_sql(&S, sql, 1, p);
        return strtoll(v, NULL, 10);
}

/* What the tenant has recorded: sandboxes not deleted, operations, sessions, templates, audit rows. */
typedef struct records {
        int64_t sandboxes, operations, sessions, templates, audits;
} records;

static records records_of(const tenant *t)
{
        return (records){
                count(t, "SELECT count(*) FROM sandboxes WHERE tenant_id = $1 AND deleted_at IS NULL"),
                count(t, "SELECT count(*) FROM operations WHERE tenant_id = $1"),
                count(t, "SELECT count(*) FROM sessions WHERE tenant_id = $1"),
                count(t, "SELECT count(*) FROM templates WHERE tenant_id = $1 AND deleted_at IS NULL"),
                count(t, "SELECT count(*) FROM audit_log a WHERE tenant_id = $1 AND " DONE),
        };
}

static void same_records(const records *a, const records *b)
{
        ck_assert_int_eq(a->sandboxes, b->sandboxes);
        ck_assert_int_eq(a->operations, b->operations);
        ck_assert_int_eq(a->sessions, b->sessions);
        ck_assert_int_eq(a->templates, b->templates);
        ck_assert_int_eq(a->audits, b->audits);
}

/* The value of the counter line `name{label="value"}` in replica 0's /metrics. */
static int64_t metric(const char *line_prefix)
{
        _cleanup_(sp_test_http_response_free) sp_test_http_response r = {0};
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api_port[0], "GET", "/metrics", NULL, NULL, 10000, &r, &e), &e);
        ck_assert_int_eq(r.status, 200);
        const char *p = strstr(r.body, line_prefix);
        ck_assert_msg(p, "no %s in /metrics", line_prefix);
        return strtoll(p + strlen(line_prefix), NULL, 10);
}

static int64_t refusals(const char *quota)
{
        char prefix[128];
        snprintf(prefix, sizeof(prefix), "space_api_quota_refusals_total{quota=\"%s\"} ", quota);
        return metric(prefix);
}

/* Calls method path as the tenant and asserts 429 resource_exhausted naming
 * quota, limit, use and what was asked (unless asked is -1), with nothing
 * recorded and the refusal counted. */
static void refused(const tenant *t, const char *method, const char *path, const char *body, const char *quota,
                    int64_t limit, int64_t used, int64_t asked)
{
        records before = records_of(t);
        int64_t n = refusals(quota);
        _cleanup_json_ json_object *r = API(t->key, method, path, 429, body);
        ck_assert_str_eq(sp_test_jstr(r, "error.code"), "resource_exhausted");
        char want[200];
        int w = snprintf(want, sizeof(want), "tenant quota exceeded: %s limit %lld, in use %lld", quota,
                         (long long)limit, (long long)used);
        if (asked >= 0)
                snprintf(want + w, sizeof(want) - (size_t)w, ", requested %lld", (long long)asked);
        const char *msg = sp_test_jstr(r, "error.message");
        ck_assert_msg(strstr(msg, want), "want \"%s\" in \"%s\"", want, msg);
        records after = records_of(t);
        same_records(&before, &after);
        ck_assert_int_eq(refusals(quota), n + 1);
}

static json_object *create(const tenant *t, const char *body)
{
        return API(t->key, "POST", "/v1/sandboxes", 202, body);
}

/* Creates a sandbox and waits until it runs; writes its id. */
static void create_running(const tenant *t, const char *body, char id[static 64])
{
        sp_test_create_sandbox(&S, t->key, body, id);
}

static void action(const tenant *t, const char *id, const char *verb, const char *want)
{
        char state[32];
        sp_test_sandbox_action(&S, t->key, id, verb, state);
        ck_assert_str_eq(state, want);
}

/* ---- usage and setting quotas ---- */

START_TEST(usage_shows_limits_use_and_source)
{
        tenant t, other;
        new_tenant("q-usage", &t);
        new_tenant("q-other", &other);
        _cleanup_json_ json_object *u = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(u, "tenant_id"), t.id);
        ck_assert_int_eq(jint(u, "quotas.running_sandboxes.limit"), CLUSTER_RUNNING);
        ck_assert_str_eq(sp_test_jstr(u, "quotas.running_sandboxes.source"), "cluster");
        ck_assert_int_eq(jint(u, "quotas.running_sandboxes.used"), 0);
        static const char *const unlimited[] = {"cpu_millis",           "memory_mb", "disk_mb", "suspended_mb",
                                                "sessions_per_sandbox", "templates"};
        for (size_t i = 0; i < sizeof(unlimited) / sizeof(unlimited[0]); i++) {
                json_object *q = NULL, *l = NULL;
                ck_assert(json_object_object_get_ex(json_object_object_get(u, "quotas"), unlimited[i], &q));
                ck_assert_msg(json_object_object_get_ex(q, "limit", &l) && l == NULL, "%s: %s", unlimited[i],
                              json_object_to_json_string(q));
        }
        ck_assert_ptr_nonnull(sp_test_jstr(u, "quotas.template_bytes.limit")); /* --tenant-template-bytes */
        ck_assert_str_eq(sp_test_jstr(u, "rate_limits.scope"), "replica");

        /* An admin sees any tenant's; another tenant's id is missing to a tenant. */
        _cleanup_json_ json_object *a = API(S.admin_key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(a, "tenant_id"), t.id);
        _cleanup_json_ json_object *nf = API(other.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 404, NULL);
        ck_assert_str_eq(sp_test_jstr(nf, "error.code"), "not_found");
        json_object_put(API(S.admin_key, "GET", "/v1/tenants/ten_0000000000000000000/usage", 404, NULL));

        /* Only an admin sets quotas. */
        json_object_put(API(t.key, "PUT", path_of("/v1/tenants/%s/quotas", t.id), 403, "{\"running_sandboxes\":100}"));
        /* Bad bodies are named and change nothing. */
        static const struct {
                const char *body, *says;
        } bad[] = {
                {"{}", "at least one quota"},
                {"{\"sandboxes\":1}", "unknown field 'sandboxes'"},
                {"{\"cpu_millis\":-2}", "cpu_millis must be a limit"},
                {"{\"cpu_millis\":\"10\"}", "cpu_millis must be a limit"},
                {"{\"cpu_millis\":1.5}", "cpu_millis must be a limit"},
                {"{\"cpu_millis\":9007199254740993}", "cpu_millis must be a limit"},
                {"[1]", "JSON object"},
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                _cleanup_json_ json_object *r =
                        API(S.admin_key, "PUT", path_of("/v1/tenants/%s/quotas", t.id), 400, bad[i].body);
                ck_assert_msg(strstr(sp_test_jstr(r, "error.message"), bad[i].says), "%s: %s", bad[i].body,
                              sp_test_jstr(r, "error.message"));
        }
        json_object_put(
                API(S.admin_key, "PUT", "/v1/tenants/ten_0000000000000000000/quotas", 404, "{\"templates\":1}"));

        /* Set: the tenant's own limit; -1 none; null the cluster's default again. */
        _cleanup_json_ json_object *s1 = set_quotas(&t, "{\"running_sandboxes\":2,\"cpu_millis\":-1,\"templates\":0}");
        ck_assert_int_eq(jint(s1, "quotas.running_sandboxes.limit"), 2);
        ck_assert_str_eq(sp_test_jstr(s1, "quotas.running_sandboxes.source"), "tenant");
        ck_assert_ptr_null(sp_test_jstr(s1, "quotas.cpu_millis.limit"));
        ck_assert_str_eq(sp_test_jstr(s1, "quotas.cpu_millis.source"), "tenant");
        ck_assert_int_eq(jint(s1, "quotas.templates.limit"), 0);
        _cleanup_json_ json_object *u2 = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_int_eq(jint(u2, "quotas.running_sandboxes.limit"), 2);
        _cleanup_json_ json_object *s2 = set_quotas(&t, "{\"running_sandboxes\":null}");
        ck_assert_int_eq(jint(s2, "quotas.running_sandboxes.limit"), CLUSTER_RUNNING);
        ck_assert_str_eq(sp_test_jstr(s2, "quotas.running_sandboxes.source"), "cluster");
        ck_assert_int_eq(jint(s2, "quotas.templates.limit"), 0); /* untouched */
        ck_assert_int_eq(
                count(&t, "SELECT count(*) FROM audit_log a WHERE action = 'tenant.quotas' AND target = $1 AND " DONE),
                2);
}
END_TEST

/* ---- sandboxes ---- */

START_TEST(running_sandboxes_over_the_limit_are_refused)
{
        tenant t;
        new_tenant("q-running", &t);
        json_object_put(set_quotas(&t, "{\"running_sandboxes\":2}"));
        _cleanup_json_ json_object *a = create(&t, SANDBOX);
        _cleanup_json_ json_object *b =
                sp_test_api(&S, t.key, "POST", "/v1/sandboxes", 202, SANDBOX, "Idempotency-Key: q-running-b");
        refused(&t, "POST", "/v1/sandboxes", SANDBOX, "running_sandboxes", 2, 2, 1);
        /* A retry of an accepted create (its Idempotency-Key) is answered, not refused. */
        _cleanup_json_ json_object *b2 =
                sp_test_api(&S, t.key, "POST", "/v1/sandboxes", 202, SANDBOX, "Idempotency-Key: q-running-b");
        ck_assert_str_eq(sp_test_jstr(b2, "sandbox.id"), sp_test_jstr(b, "sandbox.id"));
        /* Raised: applies to the next request. */
        json_object_put(set_quotas(&t, "{\"running_sandboxes\":3}"));
        json_object_put(create(&t, SANDBOX));
        _cleanup_json_ json_object *u = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_int_eq(jint(u, "quotas.running_sandboxes.used"), 3);
        ck_assert_int_eq(jint(u, "quotas.cpu_millis.used"), 300);
        ck_assert_int_eq(jint(u, "quotas.memory_mb.used"), 96);
        ck_assert_int_eq(jint(u, "quotas.disk_mb.used"), 192);
        /* A deleted sandbox frees its room at once. */
        _cleanup_json_ json_object *del =
                API(t.key, "DELETE", path_of("/v1/sandboxes/%s", sp_test_jstr(a, "sandbox.id")), 202, NULL);
        json_object_put(create(&t, SANDBOX));
        /* (Once the delete is done, so that the records stay still while compared.) */
        json_object_put(sp_test_wait_op(&S, t.key, sp_test_jstr(del, "operation.id"), true));
        refused(&t, "POST", "/v1/sandboxes", SANDBOX, "running_sandboxes", 3, 3, 1);
}
END_TEST

START_TEST(cpu_memory_and_disk_over_the_limit_are_refused)
{
        tenant t;
        new_tenant("q-resources", &t);
        json_object_put(set_quotas(&t, "{\"cpu_millis\":300,\"memory_mb\":200,\"disk_mb\":300}"));
#define BODY(cpu, mem, disk) \
        "{\"template\":\"base\",\"resources\":{\"cpu_millis\":" #cpu ",\"memory_mb\":" #mem ",\"disk_mb\":" #disk "}}"
        json_object_put(create(&t, BODY(200, 64, 100)));
        refused(&t, "POST", "/v1/sandboxes", BODY(200, 16, 16), "cpu_millis", 300, 200, 200);
        refused(&t, "POST", "/v1/sandboxes", BODY(100, 160, 16), "memory_mb", 200, 64, 160);
        refused(&t, "POST", "/v1/sandboxes", BODY(100, 64, 250), "disk_mb", 300, 100, 250);
        /* Exactly up to each limit is served. */
        json_object_put(create(&t, BODY(100, 136, 200)));
        _cleanup_json_ json_object *u = API(S.admin_key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_int_eq(jint(u, "quotas.cpu_millis.used"), 300);
        ck_assert_int_eq(jint(u, "quotas.memory_mb.used"), 200);
        ck_assert_int_eq(jint(u, "quotas.disk_mb.used"), 300);
        /* A limit lowered below the use takes nothing away and refuses more. */
        json_object_put(set_quotas(&t, "{\"cpu_millis\":100}"));
        refused(&t, "POST", "/v1/sandboxes", BODY(10, 16, 16), "cpu_millis", 100, 300, 10);
        ck_assert_int_eq(count(&t, "SELECT count(*) FROM sandboxes WHERE tenant_id = $1 AND deleted_at IS NULL"), 2);
#undef BODY
}
END_TEST

START_TEST(wake_restore_and_start_count_like_a_create)
{
        tenant t;
        new_tenant("q-wake", &t);
        json_object_put(set_quotas(&t, "{\"running_sandboxes\":1}"));
        char a[64], b[64];
        create_running(&t, SANDBOX, a);
        action(&t, a, "suspend", "suspended");
        create_running(&t, SANDBOX, b);
        /* A suspended sandbox cannot come back while the other takes the only slot. */
        refused(&t, "POST", path_of("/v1/sandboxes/%s/wake", a), NULL, "running_sandboxes", 1, 1, 1);
        refused(&t, "POST", path_of("/v1/sandboxes/%s/restore", a), NULL, "running_sandboxes", 1, 1, 1);
        _cleanup_json_ json_object *still = API(t.key, "GET", path_of("/v1/sandboxes/%s", a), 200, NULL);
        ck_assert_str_eq(sp_test_jstr(still, "desired_state"), "suspended");
        ck_assert_str_eq(sp_test_jstr(still, "state"), "suspended");

        /* A paused sandbox counts as running: it resumes at the limit. */
        action(&t, b, "pause", "paused");
        action(&t, b, "resume", "running");

        /* Stopped, it keeps counting against suspended_mb only; start is checked like wake. */
        action(&t, b, "stop", "stopped");
        action(&t, a, "wake", "running");
        refused(&t, "POST", path_of("/v1/sandboxes/%s/start", b), NULL, "running_sandboxes", 1, 1, 1);

        /* suspended_mb: b (stopped) keeps its disk_mb 64; a suspended would keep 64 + 32 more. */
        _cleanup_json_ json_object *u = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_int_eq(jint(u, "quotas.suspended_mb.used"), 64);
        json_object_put(set_quotas(&t, "{\"suspended_mb\":100}"));
        refused(&t, "POST", path_of("/v1/sandboxes/%s/suspend", a), NULL, "suspended_mb", 100, 64, 96);
        json_object_put(set_quotas(&t, "{\"suspended_mb\":160}"));
        action(&t, a, "suspend", "suspended");
        _cleanup_json_ json_object *u2 = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_int_eq(jint(u2, "quotas.suspended_mb.used"), 160);
        ck_assert_int_eq(jint(u2, "quotas.running_sandboxes.used"), 0);
        action(&t, b, "start", "running");
}
END_TEST

/* ---- sessions ---- */

static json_object *session(const tenant *t, const char *sbx, const char *command, int status)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "command", json_object_new_string(command));
        return API(t->key, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), status, json_object_to_json_string(body));
}

static void wait_ended(const tenant *t, const char *id)
{
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (;;) {
                _cleanup_json_ json_object *s = API(t->key, "GET", path_of("/v1/sessions/%s", id), 200, NULL);
                const char *st = sp_test_jstr(s, "state");
                if (strcmp(st, "exited") == 0 || strcmp(st, "failed") == 0)
                        return;
                ck_assert_msg(sp_now_mono_us() < deadline, "session %s never ended", id);
                usleep(100 * 1000);
        }
}

START_TEST(sessions_per_sandbox_over_the_limit_are_refused)
{
        tenant t;
        new_tenant("q-sessions", &t);
        json_object_put(set_quotas(&t, "{\"sessions_per_sandbox\":2}"));
        char sbx[64], other[64];
        create_running(&t, SANDBOX, sbx);
        create_running(&t, SANDBOX, other);
        _cleanup_json_ json_object *a = session(&t, sbx, "sleep 300", 201), *b = session(&t, sbx, "sleep 300", 201);
        refused(&t, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), "{\"argv\":[\"true\"]}", "sessions_per_sandbox",
                2, 2, 1);
        /* The limit is per sandbox. */
        json_object_put(session(&t, other, "sleep 300", 201));
        _cleanup_json_ json_object *u = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_int_eq(jint(u, "quotas.sessions_per_sandbox.used"), 2);

        /* One ends: the next is served. */
        json_object_put(API(t.key, "POST", path_of("/v1/sessions/%s/kill", sp_test_jstr(a, "session.id")), 200, NULL));
        wait_ended(&t, sp_test_jstr(a, "session.id"));
        json_object_put(session(&t, sbx, "sleep 300", 201));

        /* One that ends with nobody asking: its record still says it runs,
         * and a create over the count asks the worker, which knows. */
        json_object_put(API(t.key, "POST", path_of("/v1/sessions/%s/kill", sp_test_jstr(b, "session.id")), 200, NULL));
        wait_ended(&t, sp_test_jstr(b, "session.id"));
        _cleanup_json_ json_object *quick = session(&t, sbx, "exit 0", 201);
        const char *qid = sp_test_jstr(quick, "session.id");
        int64_t deadline = sp_now_mono_us() + 60 * SP_USEC_PER_SEC;
        for (int status = 0; status != 201;) {
                _cleanup_(sp_test_http_response_free) sp_test_http_response r = {0};
                char auth[300];
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", t.key);
                const char *h[] = {auth, NULL};
                sp_error *e = NULL;
                sp_test_ok(sp_test_http(S.api, "POST", path_of("/v1/sandboxes/%s/sessions", sbx), h,
                                        "{\"argv\":[\"sleep\",\"300\"]}", 30000, &r, &e),
                           &e);
                status = r.status;
                ck_assert_msg(status == 201 || status == 429, "%d %s", status, r.body);
                ck_assert_msg(status == 201 || sp_now_mono_us() < deadline, "never served: %s", r.body);
                if (status == 429)
                        usleep(200 * 1000);
        }
        const char *qp[] = {qid};
        _cleanup_free_ char *st = sp_test_space_sql(&S, "SELECT state FROM sessions WHERE id = $1", 1, qp);
        ck_assert_str_eq(st, "exited");
}
END_TEST

/* ---- templates ---- */

START_TEST(templates_over_the_limit_are_refused)
{
        tenant t;
        new_tenant("q-templates", &t);
        json_object_put(set_quotas(&t, "{\"templates\":1}"));
        json_object_put(
                API(t.key, "POST", "/v1/templates", 201, "{\"name\":\"qa\",\"source\":\"upload\",\"format\":\"tar\"}"));
        refused(&t, "POST", "/v1/templates", "{\"name\":\"qb\",\"source\":\"upload\",\"format\":\"tar\"}", "templates",
                1, 1, 1);
        _cleanup_json_ json_object *u = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        ck_assert_int_eq(jint(u, "quotas.templates.used"), 1);

        /* template_bytes: qa's upload reserved its room (what the default left,
         * at most --template-upload-max-bytes); lowered below that, the next
         * upload finds none. */
        _cleanup_json_ json_object *u1 = API(t.key, "GET", path_of("/v1/tenants/%s/usage", t.id), 200, NULL);
        int64_t used = jint(u1, "quotas.template_bytes.used");
        ck_assert_int_gt(used, 0);
        char body[128];
        snprintf(body, sizeof(body), "{\"templates\":-1,\"template_bytes\":%lld}", (long long)used);
        json_object_put(set_quotas(&t, body));
        refused(&t, "POST", "/v1/templates", "{\"name\":\"qc\",\"source\":\"upload\",\"format\":\"tar\"}",
                "template_bytes", used, used, -1);
        /* Without a limit it is served (up to --template-upload-max-bytes). */
        json_object_put(set_quotas(&t, "{\"template_bytes\":-1}"));
        json_object_put(
                API(t.key, "POST", "/v1/templates", 201, "{\"name\":\"qc\",\"source\":\"upload\",\"format\":\"tar\"}"));
}
END_TEST

/* ---- creates racing for the last slots ---- */

#define RACERS 8
#define LIMIT 3

typedef struct racer {
        int port;
        const char *key, *path, *body;
        pthread_barrier_t *start;
        int status;
} racer;

static void *race(void *arg)
{
        racer *r = arg;
        char auth[300];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", r->key);
        const char *h[] = {auth, NULL};
        sp_test_http_response resp = {0};
        pthread_barrier_wait(r->start);
        if (sp_test_http(r->port, "POST", r->path, h, r->body, 60000, &resp, NULL) == 0)
                r->status = resp.status;
        sp_test_http_response_free(&resp);
        return NULL;
}

/* RACERS threads, half on each replica, POST body to path as key at the
 * same moment; how many got want, and how many 429. */
static void race_all(const char *key, const char *path, const char *body, int want, int *ret_served, int *ret_over)
{
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, RACERS);
        racer rs[RACERS];
        pthread_t th[RACERS];
        for (int i = 0; i < RACERS; i++) {
                rs[i] = (racer){.port = S.api_port[i % 2], .key = key, .path = path, .body = body, .start = &start};
                ck_assert_int_eq(pthread_create(&th[i], NULL, race, &rs[i]), 0);
        }
        *ret_served = *ret_over = 0;
        for (int i = 0; i < RACERS; i++) {
                pthread_join(th[i], NULL);
                *ret_served += rs[i].status == want;
                *ret_over += rs[i].status == 429;
        }
        pthread_barrier_destroy(&start);
}

START_TEST(racing_creates_never_take_more_than_the_limit)
{
        sp_error *e = NULL;
        sp_test_ok(sp_test_space_start_cp(&S, 1, &e), &e);
        for (int round = 0; round < 3; round++) {
                tenant t;
                char name[32];
                snprintf(name, sizeof(name), "q-race%d", round);
                new_tenant(name, &t);
                json_object_put(set_quotas(&t, "{\"running_sandboxes\":3}"));
                int served = 0, over = 0;
                race_all(t.key, "/v1/sandboxes", SANDBOX, 202, &served, &over);
                ck_assert_msg(served == LIMIT && over == RACERS - LIMIT, "round %d: %d served, %d refused", round,
                              served, over);
                ck_assert_int_eq(
                        count(&t, "SELECT count(*) FROM sandboxes WHERE tenant_id = $1 AND deleted_at IS NULL"), LIMIT);
                ck_assert_int_eq(count(&t, "SELECT count(*) FROM operations WHERE tenant_id = $1"), LIMIT);
                /* Free the worker for the next round. */
                _cleanup_json_ json_object *l = API(t.key, "GET", "/v1/sandboxes", 200, NULL);
                json_object *arr = sp_test_jarr(l, "sandboxes");
                for (size_t i = 0; i < json_object_array_length(arr); i++) {
                        json_object_put(
                                API(t.key, "DELETE",
                                    path_of("/v1/sandboxes/%s", sp_test_jstr(json_object_array_get_idx(arr, i), "id")),
                                    202, NULL));
                }
        }
        /* Sessions racing for the last two of a sandbox's. */
        tenant t;
        new_tenant("q-race-ses", &t);
        json_object_put(set_quotas(&t, "{\"sessions_per_sandbox\":2}"));
        char sbx[64];
        create_running(&t, SANDBOX, sbx);
        int served = 0, over = 0;
        race_all(t.key, path_of("/v1/sandboxes/%s/sessions", sbx), "{\"argv\":[\"sleep\",\"300\"]}", 201, &served,
                 &over);
        ck_assert_msg(served == 2 && over == RACERS - 2, "sessions: %d served, %d refused", served, over);
        ck_assert_int_eq(count(&t, "SELECT count(*) FROM sessions WHERE tenant_id = $1"), 2);
}
END_TEST

/* ---- spacectl ---- */

START_TEST(spacectl_sets_quotas_and_shows_usage)
{
        tenant t;
        new_tenant("q-ctl", &t);
        char endpoint[128], admin[300], key[300];
        snprintf(endpoint, sizeof(endpoint), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api_port[0]);
        snprintf(admin, sizeof(admin), "SPACE_API_KEY=%s", S.admin_key);
        snprintf(key, sizeof(key), "SPACE_API_KEY=%s", t.key);
        const char *as_admin[] = {endpoint, admin, NULL}, *as_tenant[] = {endpoint, key, NULL};

        _cleanup_ctl_result_ ctl_result set =
                ctl_run(as_admin, NULL, "tenant", "quota", t.id, "--running-sandboxes", "7", "--cpu-millis", "none",
                        "--template-bytes", "1G", "--json", NULL);
        ck_assert_msg(set.code == 0, "%d %s", set.code, set.err.data);
        _cleanup_json_ json_object *u = NULL;
        sp_error *e = NULL;
        sp_test_ok(sp_json_parse(set.out.data, set.out.len, &u, &e), &e);
        ck_assert_int_eq(jint(u, "quotas.running_sandboxes.limit"), 7);
        ck_assert_ptr_null(sp_test_jstr(u, "quotas.cpu_millis.limit"));
        ck_assert_int_eq(jint(u, "quotas.template_bytes.limit"), 1 << 30);

        /* The tenant reads its own, as a table. */
        _cleanup_ctl_result_ ctl_result own = ctl_run(as_tenant, NULL, "tenant", "usage", NULL);
        ck_assert_msg(own.code == 0, "%d %s", own.code, own.err.data);
        ck_assert_msg(strstr(own.out.data, t.id), "%s", own.out.data);
        ck_assert_msg(strstr(own.out.data, "QUOTA") && strstr(own.out.data, "SOURCE"), "%s", own.out.data);
        const char *row = strstr(own.out.data, "running_sandboxes");
        ck_assert_msg(row && strstr(row, "7") && strstr(row, "tenant"), "%s", own.out.data);
        ck_assert_msg(strstr(own.out.data, "rate limits"), "%s", own.out.data);

        /* default: the cluster's again. */
        _cleanup_ctl_result_ ctl_result back =
                ctl_run(as_admin, NULL, "tenant", "quota", t.id, "--running-sandboxes", "default", "--json", NULL);
        ck_assert_int_eq(back.code, 0);
        _cleanup_json_ json_object *u2 = NULL;
        sp_test_ok(sp_json_parse(back.out.data, back.out.len, &u2, &e), &e);
        ck_assert_int_eq(jint(u2, "quotas.running_sandboxes.limit"), CLUSTER_RUNNING);
        ck_assert_str_eq(sp_test_jstr(u2, "quotas.running_sandboxes.source"), "cluster");

        /* Mistakes: a bad value is a usage error; a tenant key may not set quotas. */
        _cleanup_ctl_result_ ctl_result bad =
                ctl_run(as_admin, NULL, "tenant", "quota", t.id, "--templates", "-3", NULL);
        ck_assert_int_eq(bad.code, 2);
        _cleanup_ctl_result_ ctl_result none = ctl_run(as_admin, NULL, "tenant", "quota", t.id, NULL);
        ck_assert_int_eq(none.code, 2);
        _cleanup_ctl_result_ ctl_result denied =
                ctl_run(as_tenant, NULL, "tenant", "quota", t.id, "--templates", "9", NULL);
        ck_assert_int_eq(denied.code, 1);
        ck_assert_msg(strstr(denied.err.data, "permission_denied"), "%s", denied.err.data);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_quotas");
        TCase *tc = tcase_create("quotas");
        tcase_set_timeout(tc, 900);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, usage_shows_limits_use_and_source);
        tcase_add_test(tc, running_sandboxes_over_the_limit_are_refused);
        tcase_add_test(tc, cpu_memory_and_disk_over_the_limit_are_refused);
        tcase_add_test(tc, wake_restore_and_start_count_like_a_create);
        tcase_add_test(tc, sessions_per_sandbox_over_the_limit_are_refused);
        tcase_add_test(tc, templates_over_the_limit_are_refused);
        tcase_add_test(tc, spacectl_sets_quotas_and_shows_usage);
        tcase_add_test(tc, racing_creates_never_take_more_than_the_limit);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker needs namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
