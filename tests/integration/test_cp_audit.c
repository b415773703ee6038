/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The audit log through the API (GET /v1/audit, docs/api.md "Audit log") on
 * a real cluster (PostgreSQL, space-controlplane, one space-worker):
 *
 * - every mutating call of a scripted session of a tenant's key — sandbox
 *   create, exec, file token and mkdir, pause, resume, timeout, egress
 *   profile, secret, template, key create and revoke, delete — is in the log
 *   with that key, its tenant, its object and outcome ok; refused calls (a
 *   missing sandbox, an admin route) and an Idempotency-Key replay are there
 *   too, with their outcome and status;
 * - another tenant's key never reads any of it (its own records only; 403
 *   for the first tenant's id; nothing for the first tenant's objects), an
 *   admin key reads both;
 * - filters (key, object type and id, action and action prefix, outcome,
 *   since/until split the records at a record's own time) and cursor pages
 *   (small pages add up to the whole, in the same order, no record twice;
 *   a malformed cursor is a 400);
 * - login failures (no key, malformed, unknown, revoked) are recorded with
 *   their reason, a revoked key's under its tenant; past the rate bound
 *   (--audit-login-failure-rate) they are counted, not recorded, and the
 *   counts in /metrics add up to the records;
 * - retention: records older than --audit-retention are deleted by the
 *   leader when it takes the lead, younger ones stay;
 * - join tokens: ?purge=true deletes one whatever its state (gone from the
 *   list, 404 the second time, audited), a bad purge value is a 400;
 * - spacectl audit prints the records (--json lines), stops at --limit and
 *   goes on with the cursor it printed, and --follow shows a record made
 *   after it started; spacectl worker join-token rm deletes a token.
 *
 * Needs root (the worker), btrfs and PostgreSQL.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "test_spacectl_util.h"

#define SANDBOX "{\"template\":\"base\",\"resources\":{\"memory_mb\":64,\"cpu_millis\":100}}"
#define LOGIN_RATE 2 /* --audit-login-failure-rate: records per second, bursts of ten times that */

static sp_test_space S;

static void cluster_up(void)
{
        static const char *const cp_args[] = {"--audit-retention=1d", "--audit-login-failure-rate=2", NULL};
        sp_test_space_opts o = {.workers = 1, .no_network = true, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        snprintf(ctl_home, sizeof(ctl_home), "%s", S.dir);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/spacectl.json", S.dir);
}

static void cluster_down(void)
{
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/controlplane0.log", S.dir);
        sp_test_dump_file_tail("control plane", logp, 40);
        sp_test_space_down(&S);
}

#define API(key, method, path, status, body) sp_test_api(&S, (key), (method), (path), (status), (body), NULL)

static const char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static const char *fmt(const char *f, ...)
{
        static char bufs[8][1024];
        static int n;
        char *p = bufs[n++ % 8];
        va_list ap;
        va_start(ap, f);
        vsnprintf(p, 1024, f, ap);
        va_end(ap);
        return p;
}

/* The key id a secret names: "spk_<key id>_...". */
static void key_id_of(const char *secret, char out[static 64])
{
        ck_assert(strncmp(secret, "spk_key_", 8) == 0);
        snprintf(out, 64, "%.24s", secret + 4);
}

static void tenant_of(const char *key, char out[static 64])
{
        _cleanup_json_ json_object *l = API(key, "GET", "/v1/keys", 200, NULL);
        json_object *k = json_object_array_get_idx(sp_test_jarr(l, "keys"), 0);
        ck_assert_ptr_nonnull(k);
        snprintf(out, 64, "%s", sp_test_jstr(k, "tenant_id"));
}

/* Every record key may read with query q ("" or "&a=b..."), through pages of
 * page_size, in order: a new array. Asserts that no record comes twice. */
static json_object *all_records(const char *key, const char *q, int page_size)
{
        json_object *all = json_object_new_array();
        char cursor[128] = "";
        for (int pages = 0;; pages++) {
                ck_assert_int_lt(pages, 10000);
                _cleanup_buf_ sp_buf path = SP_BUF_INIT;
                sp_buf_appendf(&path, NULL, "/v1/audit?limit=%d%s", page_size, q);
                if (cursor[0])
                        sp_buf_appendf(&path, NULL, "&cursor=%s", cursor);
                _cleanup_json_ json_object *page = API(key, "GET", path.data, 200, NULL);
                json_object *recs = sp_test_jarr(page, "records");
                for (size_t i = 0; i < json_object_array_length(recs); i++)
                        json_object_array_add(all, json_object_get(json_object_array_get_idx(recs, i)));
                const char *nc = sp_test_jstr(page, "next_cursor");
                json_object *more = json_object_object_get(page, "has_more");
                if (json_object_array_length(recs) > 0)
                        ck_assert_msg(nc, "a page with records has no next_cursor");
                if (!json_object_get_boolean(more))
                        break;
                snprintf(cursor, sizeof(cursor), "%s", nc);
        }
        /* Ids are unique. */
        size_t n = json_object_array_length(all);
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        ck_assert_msg(json_object_get_int64(
                                              json_object_object_get(json_object_array_get_idx(all, i), "id")) !=
                                              json_object_get_int64(
                                                      json_object_object_get(json_object_array_get_idx(all, j), "id")),
                                      "record %zu and %zu are the same", i, j);
        return all;
}

/* The first record of recs with action and object (NULL: any) and outcome, or NULL. */
static json_object *find(json_object *recs, const char *action, const char *object, const char *outcome)
{
        for (size_t i = 0; i < json_object_array_length(recs); i++) {
                json_object *r = json_object_array_get_idx(recs, i);
                const char *o = sp_test_jstr(r, "object_id");
                if (strcmp(sp_test_jstr(r, "action"), action) == 0 && (!object || (o && strcmp(o, object) == 0)) &&
                    strcmp(sp_test_jstr(r, "outcome"), outcome) == 0)
                        return r;
        }
        return NULL;
}

static void expect(json_object *recs, const char *action, const char *object, const char *outcome, const char *key_id,
                   const char *tenant_id)
{
        json_object *r = find(recs, action, object, outcome);
        ck_assert_msg(r, "no %s record of %s %s among %zu", outcome, action, object ? object : "",
                      json_object_array_length(recs));
        ck_assert_str_eq(sp_test_jstr(r, "key_id"), key_id);
        ck_assert_str_eq(sp_test_jstr(r, "tenant_id"), tenant_id);
        ck_assert_msg(sp_test_jstr(r, "request_id") && sp_test_jstr(r, "request_id")[0], "%s without a request id",
                      action);
}

/* Every record's field equals want (NULL: is null). */
static void all_have(json_object *recs, const char *field, const char *want)
{
        for (size_t i = 0; i < json_object_array_length(recs); i++) {
                const char *v = sp_test_jstr(json_object_array_get_idx(recs, i), field);
                if (!want)
                        ck_assert_msg(!v, "record %zu has %s %s", i, field, v);
                else
                        ck_assert_msg(v && strcmp(v, want) == 0, "record %zu has %s %s, not %s", i, field,
                                      v ? v : "null", want);
        }
}

static char *secret_body(const char *name)
{
        return strdup(fmt("{\"name\":\"%s\",\"value\":\"sk-audit-test\",\"hosts\":[\"api.example.test\"],"
                          "\"inject\":{\"header\":\"Authorization\",\"format\":\"Bearer {{secret}}\"}}",
                          name));
}

START_TEST(every_mutating_call_is_recorded_with_its_actor)
{
        char a[256], b[256], a_key[64], b_key[64], a_ten[64], b_ten[64];
        sp_test_new_tenant(&S, "audit-a", a);
        sp_test_new_tenant(&S, "audit-b", b);
        key_id_of(a, a_key);
        key_id_of(b, b_key);
        tenant_of(a, a_ten);
        tenant_of(b, b_ten);

        /* Tenant a's scripted session. */
        char sbx[64];
        sp_test_create_sandbox(&S, a, SANDBOX, sbx);
        ck_assert_int_eq(sp_test_sandbox_run(&S, a, sbx, "echo hi > /tmp/x", 60), 0);
        _cleanup_json_ json_object *ses = API(a, "GET", fmt("/v1/sandboxes/%s/sessions", sbx), 200, NULL);
        const char *ses_id = sp_test_jstr(json_object_array_get_idx(sp_test_jarr(ses, "sessions"), 0), "id");
        ck_assert_ptr_nonnull(ses_id);
        json_object_put(API(a, "POST", fmt("/v1/sandboxes/%s/files/token", sbx), 200,
                            "{\"path\":\"/tmp/notes.txt\",\"scope\":\"write\"}"));
        json_object_put(API(a, "POST", fmt("/v1/sandboxes/%s/files/mkdir", sbx), 200, "{\"path\":\"/tmp/d\"}"));
        char state[32];
        sp_test_sandbox_action(&S, a, sbx, "pause", state);
        sp_test_sandbox_action(&S, a, sbx, "resume", state);
        json_object_put(API(a, "POST", fmt("/v1/sandboxes/%s/timeout", sbx), 200, "{\"timeout_s\":600}"));
        json_object_put(API(a, "POST", "/v1/egress-profiles", 201, "{\"name\":\"audit-p\"}"));
        json_object_put(API(a, "DELETE", "/v1/egress-profiles/audit-p", 204, NULL));
        _cleanup_free_ char *sb = secret_body("audit-s");
        json_object_put(API(a, "POST", "/v1/secrets", 201, sb));
        json_object_put(API(a, "DELETE", "/v1/secrets/audit-s", 200, NULL));
        json_object_put(API(a, "POST", "/v1/templates", 201,
                            "{\"name\":\"audit-t\",\"source\":\"upload\",\"format\":\"tar\"}"));
        _cleanup_json_ json_object *td = API(a, "DELETE", "/v1/templates/audit-t", 202, NULL);
        json_object_put(sp_test_wait_op(&S, a, sp_test_jstr(td, "operation.id"), true));
        _cleanup_json_ json_object *k2 = API(a, "POST", "/v1/keys", 201, "{\"name\":\"second\"}");
        char k2_id[64];
        snprintf(k2_id, sizeof(k2_id), "%s", sp_test_jstr(k2, "id"));
        json_object_put(API(a, "DELETE", fmt("/v1/keys/%s", k2_id), 204, NULL));
        /* Refusals: a missing sandbox, an admin route. */
        json_object_put(API(a, "DELETE", "/v1/sandboxes/sbx_k3v9w0q8e2m5t7z1c4h6", 404, NULL));
        json_object_put(API(a, "POST", "/v1/tenants", 403, "{\"name\":\"nope\"}"));
        /* A replay of an Idempotency-Key. */
        for (int i = 0; i < 2; i++)
                json_object_put(sp_test_api(&S, a, "POST", fmt("/v1/sandboxes/%s/timeout", sbx), 200,
                                            "{\"timeout_s\":700}", "Idempotency-Key: audit-replay"));
        _cleanup_json_ json_object *del = API(a, "DELETE", fmt("/v1/sandboxes/%s", sbx), 202, NULL);
        json_object_put(sp_test_wait_op(&S, a, sp_test_jstr(del, "operation.id"), true));
        /* Tenant b does something of its own. */
        json_object_put(API(b, "POST", "/v1/egress-profiles", 201, "{\"name\":\"audit-b\"}"));

        _cleanup_json_ json_object *ra = all_records(a, "", 1000);
        static const struct {
                const char *action, *object;
        } done[] = {
                {"sandbox.create", NULL},
                {"session.create", NULL},
                {"files.token", NULL},
                {"files.mkdir", NULL},
                {"sandbox.pause", NULL},
                {"sandbox.resume", NULL},
                {"sandbox.timeout", NULL},
                {"egress_profile.create", "audit-p"},
                {"egress_profile.delete", "audit-p"},
                {"secret.create", NULL},
                {"secret.delete", NULL},
                {"template.create", NULL},
                {"template.delete", NULL},
                {"key.create", NULL},
                {"key.revoke", NULL},
                {"sandbox.delete", NULL},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(done); i++)
                expect(ra, done[i].action, done[i].object, "ok", a_key, a_ten);
        /* The objects are the ones acted on. */
        expect(ra, "sandbox.create", sbx, "ok", a_key, a_ten);
        expect(ra, "session.create", ses_id, "ok", a_key, a_ten);
        expect(ra, "files.mkdir", sbx, "ok", a_key, a_ten);
        expect(ra, "key.revoke", k2_id, "ok", a_key, a_ten);
        ck_assert_str_eq(sp_test_jstr(find(ra, "files.mkdir", sbx, "ok"), "object_type"), "sandbox");
        ck_assert_str_eq(sp_test_jstr(find(ra, "session.create", ses_id, "ok"), "object_type"), "session");
        /* Refused calls, with their status and error. */
        json_object *nf = find(ra, "sandbox.delete", "sbx_k3v9w0q8e2m5t7z1c4h6", "failed");
        ck_assert_ptr_nonnull(nf);
        ck_assert_str_eq(sp_test_jstr(nf, "status"), "404");
        ck_assert_str_eq(sp_test_jstr(nf, "error"), "not_found");
        ck_assert_str_eq(sp_test_jstr(nf, "key_id"), a_key);
        json_object *den = find(ra, "tenant.create", NULL, "denied");
        ck_assert_ptr_nonnull(den);
        ck_assert_str_eq(sp_test_jstr(den, "status"), "403");
        ck_assert_str_eq(sp_test_jstr(den, "key_id"), a_key);
        /* The replay: the first call's record, and one of the replay. */
        size_t timeouts = 0;
        bool replayed = false;
        for (size_t i = 0; i < json_object_array_length(ra); i++) {
                json_object *r = json_object_array_get_idx(ra, i);
                if (strcmp(sp_test_jstr(r, "action"), "sandbox.timeout") == 0)
                        timeouts++;
                if (sp_test_jstr(r, "detail.replayed"))
                        replayed = true;
        }
        ck_assert_uint_eq(timeouts, 3);
        ck_assert(replayed);
        /* Nothing of b's in a's view; every record a reads is a's tenant's. */
        all_have(ra, "tenant_id", a_ten);
        ck_assert_ptr_null(find(ra, "egress_profile.create", "audit-b", "ok"));

        /* b reads its own only, never a's: not by asking, not by a's objects. */
        _cleanup_json_ json_object *rb = all_records(b, "", 1000);
        all_have(rb, "tenant_id", b_ten);
        expect(rb, "egress_profile.create", "audit-b", "ok", b_key, b_ten);
        _cleanup_json_ json_object *forbidden = API(b, "GET", fmt("/v1/audit?tenant_id=%s", a_ten), 403, NULL);
        ck_assert_str_eq(sp_test_jstr(forbidden, "error.code"), "permission_denied");
        _cleanup_json_ json_object *by_obj = all_records(b, fmt("&object_id=%s", sbx), 10);
        ck_assert_uint_eq(json_object_array_length(by_obj), 0);
        _cleanup_json_ json_object *by_key = all_records(b, fmt("&key_id=%s", a_key), 10);
        ck_assert_uint_eq(json_object_array_length(by_key), 0);

        /* An admin reads both, and one tenant's when it asks. */
        _cleanup_json_ json_object *adm = all_records(S.admin_key, fmt("&tenant_id=%s", a_ten), 1000);
        ck_assert_uint_eq(json_object_array_length(adm), json_object_array_length(ra));
        all_have(adm, "tenant_id", a_ten);
        _cleanup_json_ json_object *adm_all = all_records(S.admin_key, "", 1000);
        ck_assert_ptr_nonnull(find(adm_all, "egress_profile.create", "audit-b", "ok"));
        ck_assert_ptr_nonnull(find(adm_all, "sandbox.create", sbx, "ok"));
        ck_assert_ptr_nonnull(find(adm_all, "tenant.create", NULL, "ok")); /* the admin's own */

        /* Filters. */
        _cleanup_json_ json_object *f_key = all_records(S.admin_key, fmt("&key_id=%s", a_key), 1000);
        all_have(f_key, "key_id", a_key);
        ck_assert_uint_eq(json_object_array_length(f_key), json_object_array_length(ra));
        _cleanup_json_ json_object *f_obj = all_records(a, fmt("&object_type=sandbox&object_id=%s", sbx), 1000);
        all_have(f_obj, "object_id", sbx);
        all_have(f_obj, "object_type", "sandbox");
        ck_assert_ptr_nonnull(find(f_obj, "sandbox.pause", sbx, "ok"));
        _cleanup_json_ json_object *f_act = all_records(a, "&action=sandbox.pause", 1000);
        all_have(f_act, "action", "sandbox.pause");
        ck_assert_uint_eq(json_object_array_length(f_act), 1);
        _cleanup_json_ json_object *f_pre = all_records(a, "&action=sandbox.", 1000);
        ck_assert_uint_ge(json_object_array_length(f_pre), 6);
        for (size_t i = 0; i < json_object_array_length(f_pre); i++)
                ck_assert(strncmp(sp_test_jstr(json_object_array_get_idx(f_pre, i), "action"), "sandbox.", 8) == 0);
        _cleanup_json_ json_object *f_out = all_records(a, "&outcome=denied", 1000);
        all_have(f_out, "outcome", "denied");
        ck_assert_uint_ge(json_object_array_length(f_out), 1);
        /* since/until at a record's own time split the log in two. */
        const char *mid = sp_test_jstr(json_object_array_get_idx(ra, json_object_array_length(ra) / 2), "at");
        _cleanup_buf_ sp_buf esc = SP_BUF_INIT;
        for (const char *p = mid; *p; p++)
                sp_buf_appendf(&esc, NULL, *p == '+' ? "%%2B" : "%c", *p);
        _cleanup_json_ json_object *since = all_records(a, fmt("&since=%s", esc.data), 1000);
        _cleanup_json_ json_object *until = all_records(a, fmt("&until=%s", esc.data), 1000);
        ck_assert_uint_ge(json_object_array_length(since), 1);
        ck_assert_uint_eq(json_object_array_length(since) + json_object_array_length(until),
                          json_object_array_length(ra));

        /* Pages of 3 add up to the whole, in the same order. */
        _cleanup_json_ json_object *paged = all_records(a, "", 3);
        ck_assert_uint_eq(json_object_array_length(paged), json_object_array_length(ra));
        for (size_t i = 0; i < json_object_array_length(ra); i++)
                ck_assert_int_eq(
                        json_object_get_int64(json_object_object_get(json_object_array_get_idx(ra, i), "id")),
                        json_object_get_int64(json_object_object_get(json_object_array_get_idx(paged, i), "id")));
        /* Bad queries. */
        json_object_put(API(a, "GET", "/v1/audit?cursor=bm90LWEtY3Vyc29y", 400, NULL));
        json_object_put(API(a, "GET", "/v1/audit?limit=1001", 400, NULL));
        json_object_put(API(a, "GET", "/v1/audit?since=yesterday", 400, NULL));
        json_object_put(API(a, "GET", "/v1/audit?outcome=maybe", 400, NULL));
        /* No route of this session answered without a record of its handler's own (the
         * control plane warns when one does). */
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/controlplane0.log", S.dir);
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        sp_error *le = NULL;
        sp_test_ok(sp_file_read(logp, 256 << 20, &log, &le), &le);
        sp_buf_append(&log, "", 1, NULL);
        ck_assert_msg(!strstr(log.data, "without an audit record of its own"), "%s",
                      strstr(log.data, "without an audit record of its own"));
}
END_TEST

/* The /metrics counter name's value. */
static long long metric(const char *name)
{
        sp_test_http_response r = {0};
        sp_error *e = NULL;
        sp_test_ok(sp_test_http(S.api, "GET", "/metrics", NULL, NULL, 30000, &r, &e), &e);
        ck_assert_int_eq(r.status, 200);
        char needle[160];
        snprintf(needle, sizeof(needle), "\n%s ", name);
        const char *p = strstr(r.body, needle);
        ck_assert_msg(p, "%s is not in /metrics", name);
        long long v = atoll(p + strlen(needle));
        sp_test_http_response_free(&r);
        return v;
}

START_TEST(login_failures_are_recorded_within_a_bound)
{
        char a[256], a_key[64], a_ten[64];
        sp_test_new_tenant(&S, "audit-login", a);
        key_id_of(a, a_key);
        tenant_of(a, a_ten);
        _cleanup_json_ json_object *k = API(a, "POST", "/v1/keys", 201, "{\"name\":\"to-revoke\"}");
        char revoked[256], revoked_id[64];
        snprintf(revoked, sizeof(revoked), "%s", sp_test_jstr(k, "secret"));
        key_id_of(revoked, revoked_id);
        json_object_put(API(a, "DELETE", fmt("/v1/keys/%s", revoked_id), 204, NULL));
        /* One of each reason, while the bucket is full (the cluster is new to bad keys). */
        json_object_put(API(NULL, "POST", "/v1/sandboxes", 401, SANDBOX));
        json_object_put(API("not-a-key", "GET", "/v1/sandboxes", 401, NULL));
        json_object_put(API("spk_key_k3v9w0q8e2m5t7z1c4h6_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "GET",
                            "/v1/sandboxes", 401, NULL));
        json_object_put(API(revoked, "GET", "/v1/sandboxes", 401, NULL));
        _cleanup_json_ json_object *fails = all_records(S.admin_key, "&action=key.login_failed", 1000);
        all_have(fails, "outcome", "denied");
        all_have(fails, "status", "401");
        static const char *const reasons[] = {"missing", "malformed", "unknown_key", "revoked"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(reasons); i++) {
                bool seen = false;
                for (size_t j = 0; j < json_object_array_length(fails); j++)
                        if (strcmp(sp_test_jstr(json_object_array_get_idx(fails, j), "detail.reason"), reasons[i]) == 0)
                                seen = true;
                ck_assert_msg(seen, "no login failure of reason %s", reasons[i]);
        }
        /* The revoked key's failure is its tenant's to read. */
        _cleanup_json_ json_object *mine = all_records(a, "&action=key.login_failed", 1000);
        ck_assert_uint_eq(json_object_array_length(mine), 1);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(mine, 0), "key_id"), revoked_id);
        ck_assert_str_eq(sp_test_jstr(json_object_array_get_idx(mine, 0), "detail.reason"), "revoked");

        /* A flood: at most the burst plus the rate over the time it took is recorded. */
        long long total0 = metric("space_api_login_failures_total");
        long long unrec0 = metric("space_api_login_failures_unrecorded_total");
        _cleanup_json_ json_object *before = all_records(S.admin_key, "&action=key.login_failed", 1000);
        const int flood = LOGIN_RATE * 10 * 4;
        int64_t t0 = sp_now_mono_us();
        for (int i = 0; i < flood; i++)
                json_object_put(API("spk_flood", "GET", "/v1/sandboxes", 401, NULL));
        double took_s = (double)(sp_now_mono_us() - t0) / 1e6;
        long long total1 = metric("space_api_login_failures_total");
        long long unrec1 = metric("space_api_login_failures_unrecorded_total");
        _cleanup_json_ json_object *after = all_records(S.admin_key, "&action=key.login_failed", 1000);
        long long recorded = (long long)(json_object_array_length(after) - json_object_array_length(before));
        ck_assert_int_eq(total1 - total0, flood);
        ck_assert_int_eq(recorded + (unrec1 - unrec0), flood);
        ck_assert_int_ge(recorded, 1);
        ck_assert_msg(recorded <= LOGIN_RATE * 10 + (long long)(took_s * LOGIN_RATE) + 1,
                      "%lld of %d failures recorded in %.1f s at %d/s", recorded, flood, took_s, LOGIN_RATE);
}
END_TEST

START_TEST(retention_deletes_old_records)
{
        char tag[64];
        snprintf(tag, sizeof(tag), "retention-%d", (int)getpid());
        const char *p[] = {tag};
        free(sp_test_space_sql(&S,
                               "INSERT INTO audit_log (action, target, at) VALUES ('test.old', $1, now() - "
                               "interval '3 days'), ('test.old', $1, now() - interval '25 hours'), "
                               "('test.young', $1, now() - interval '23 hours') RETURNING 1",
                               1, p));
        /* The leader deletes what is past --audit-retention=1d when it takes the lead: restart it. */
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_stop(&S.cp[0], 10000, &e), &e);
        sp_test_ok(sp_test_space_start_cp(&S, 0, &e), &e);
        char *left = NULL;
        for (int i = 0; i < 600; i++) {
                free(left);
                left = sp_test_space_sql(&S, "SELECT count(*) FROM audit_log WHERE target = $1 AND action = 'test.old'",
                                         1, p);
                if (strcmp(left, "0") == 0)
                        break;
                usleep(100 * 1000);
        }
        ck_assert_str_eq(left, "0");
        free(left);
        char *young = sp_test_space_sql(
                &S, "SELECT count(*) FROM audit_log WHERE target = $1 AND action = 'test.young'", 1, p);
        ck_assert_str_eq(young, "1");
        free(young);
}
END_TEST

START_TEST(join_tokens_are_deleted)
{
        _cleanup_json_ json_object *t1 = API(S.admin_key, "POST", "/v1/join-tokens", 201, "{\"description\":\"a\"}");
        _cleanup_json_ json_object *t2 = API(S.admin_key, "POST", "/v1/join-tokens", 201, "{\"description\":\"b\"}");
        char id1[64], id2[64];
        snprintf(id1, sizeof(id1), "%s", sp_test_jstr(t1, "id"));
        snprintf(id2, sizeof(id2), "%s", sp_test_jstr(t2, "id"));
        json_object_put(API(S.admin_key, "DELETE", fmt("/v1/join-tokens/%s?purge=maybe", id1), 400, NULL));
        /* An active token, deleted at once. */
        json_object_put(API(S.admin_key, "DELETE", fmt("/v1/join-tokens/%s?purge=true", id1), 204, NULL));
        json_object_put(API(S.admin_key, "DELETE", fmt("/v1/join-tokens/%s?purge=true", id1), 404, NULL));
        json_object_put(API(S.admin_key, "DELETE", fmt("/v1/join-tokens/%s", id1), 404, NULL));
        /* A revoked one stays listed until it is deleted. */
        json_object_put(API(S.admin_key, "DELETE", fmt("/v1/join-tokens/%s", id2), 204, NULL));
        _cleanup_json_ json_object *l1 = API(S.admin_key, "GET", "/v1/join-tokens", 200, NULL);
        ck_assert_msg(strstr(json_object_to_json_string(l1), id2), "a revoked token left the list");
        ck_assert_msg(!strstr(json_object_to_json_string(l1), id1), "a deleted token is listed");
        char a[256];
        sp_test_new_tenant(&S, "audit-jt", a);
        json_object_put(API(a, "DELETE", fmt("/v1/join-tokens/%s?purge=true", id2), 403, NULL));
        /* spacectl worker join-token rm. */
        char ep[80], key[300];
        snprintf(ep, sizeof(ep), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api);
        snprintf(key, sizeof(key), "SPACE_API_KEY=%s", S.admin_key);
        const char *env[] = {ep, key, NULL};
        _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "worker", "join-token", "rm", id2, NULL);
        ctl_assert_code(r, 0);
        _cleanup_json_ json_object *l2 = API(S.admin_key, "GET", "/v1/join-tokens", 200, NULL);
        ck_assert_msg(!strstr(json_object_to_json_string(l2), id2), "a deleted token is listed");
        _cleanup_json_ json_object *recs = all_records(S.admin_key, "&action=join_token.", 1000);
        ck_assert_ptr_nonnull(find(recs, "join_token.delete", id1, "ok"));
        ck_assert_ptr_nonnull(find(recs, "join_token.revoke", id2, "ok"));
        ck_assert_ptr_nonnull(find(recs, "join_token.delete", id2, "ok"));

        /* A rejoin under a worker's name needs an admin's consent: a tenant cannot give it, an admin
         * can (spacectl worker allow-rejoin), and it is audited. */
        _cleanup_json_ json_object *ws = API(S.admin_key, "GET", "/v1/workers", 200, NULL);
        json_object *wl = sp_test_jarr(ws, "workers");
        ck_assert_uint_ge(json_object_array_length(wl), 1);
        char wid[64], wname[80];
        snprintf(wid, sizeof(wid), "%s", sp_test_jstr(json_object_array_get_idx(wl, 0), "id"));
        snprintf(wname, sizeof(wname), "%s", sp_test_jstr(json_object_array_get_idx(wl, 0), "name"));
        json_object_put(API(a, "POST", fmt("/v1/workers/%s/allow-rejoin", wid), 403, NULL));
        json_object_put(API(S.admin_key, "POST", "/v1/workers/wkr_00000000000000000000/allow-rejoin", 404, NULL));
        _cleanup_ctl_result_ ctl_result ar = ctl_run(env, NULL, "worker", "allow-rejoin", wname, NULL);
        ctl_assert_code(ar, 0);
        _cleanup_json_ json_object *wrecs = all_records(S.admin_key, "&action=worker.allow_rejoin", 1000);
        ck_assert_ptr_nonnull(find(wrecs, "worker.allow_rejoin", wid, "ok"));
        ck_assert_ptr_nonnull(find(wrecs, "worker.allow_rejoin", wid, "denied"));
        ck_assert_ptr_nonnull(find(recs, "join_token.delete", id1, "failed"));
}
END_TEST

/* Reads what fd has within timeout_ms into b (appending); false once it is closed. */
static bool read_some(int fd, sp_buf *b, int timeout_ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
                return true;
        char buf[4096];
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
                return false;
        sp_buf_append(b, buf, (size_t)n, NULL);
        return true;
}

START_TEST(spacectl_reads_and_follows_the_log)
{
        char a[256];
        sp_test_new_tenant(&S, "audit-ctl", a);
        for (int i = 0; i < 5; i++)
                json_object_put(API(a, "POST", "/v1/egress-profiles", 201, fmt("{\"name\":\"ctl-%d\"}", i)));
        char ep[80], key[300];
        snprintf(ep, sizeof(ep), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api);
        snprintf(key, sizeof(key), "SPACE_API_KEY=%s", a);
        const char *env[] = {ep, key, NULL};
        _cleanup_json_ json_object *all = all_records(a, "", 1000);
        size_t total = json_object_array_length(all);
        ck_assert_uint_ge(total, 5);
        {
                /* Everything, one JSON object per line, in the API's order. */
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "--json", "audit", NULL);
                ctl_assert_code(r, 0);
                size_t lines = 0;
                for (const char *p = r.out.data; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
                        json_object *o = NULL;
                        size_t len = strcspn(p, "\n");
                        if (!len)
                                break;
                        ck_assert_int_eq(sp_json_parse(p, len, &o, NULL), 0);
                        ck_assert_int_eq(json_object_get_int64(json_object_object_get(o, "id")),
                                         json_object_get_int64(
                                                 json_object_object_get(json_object_array_get_idx(all, lines), "id")));
                        json_object_put(o);
                        lines++;
                }
                ck_assert_uint_eq(lines, total);
        }
        char cursor[128] = "";
        {
                /* --limit stops and says how to go on; the rest comes with that cursor. */
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "audit", "--limit", "2", NULL);
                ctl_assert_code(r, 0);
                const char *c = strstr(r.err.data, "--cursor ");
                ck_assert_msg(c, "no cursor in: %s", r.err.data);
                snprintf(cursor, sizeof(cursor), "%.*s", (int)strcspn(c + 9, " \n"), c + 9);
                ck_assert_msg(strstr(r.out.data, "egress_profile.create") || total > 5, "%s", r.out.data);
        }
        {
                _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "--json", "audit", "--cursor", cursor, NULL);
                ctl_assert_code(r, 0);
                size_t lines = 0;
                for (const char *p = r.out.data; p && *p; p++)
                        lines += *p == '\n';
                ck_assert_uint_eq(lines, total - 2);
        }
        /* --follow shows what happens after it started. */
        const char *argv[] = {
                "--json", "audit", "--follow", "--since", "1h", "--interval", "1s", "--action", "egress_profile.create",
                NULL};
        int out = -1;
        pid_t pid = ctl_spawn(env, argv, &out);
        _cleanup_buf_ sp_buf seen = SP_BUF_INIT;
        /* It prints the five first, then the new one. */
        for (int i = 0; i < 600 && !(seen.data && strstr(seen.data, "ctl-4")); i++)
                ck_assert(read_some(out, &seen, 100));
        json_object_put(API(a, "POST", "/v1/egress-profiles", 201, "{\"name\":\"ctl-late\"}"));
        for (int i = 0; i < 600 && !strstr(seen.data, "ctl-late"); i++)
                ck_assert(read_some(out, &seen, 100));
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
        close(out);
        ck_assert_msg(strstr(seen.data, "ctl-late"), "--follow did not show the new record: %s", seen.data);
}
END_TEST

/* A tenant chooses the id in the path of its own refused calls: spacectl prints it with its control
 * bytes escaped (no forged line on an admin's terminal), and a long one is recorded cut. */
START_TEST(ids_a_tenant_chooses_are_kept_harmless)
{
        char a[256], t[64];
        sp_test_new_tenant(&S, "audit-ids", a);
        tenant_of(a, t);
        /* An admin route refused to a tenant (403): its {id} is the caller's. */
        json_object_put(API(a, "DELETE", "/v1/tenants/ten_x%0D%1B%5B2Kforged%0Aline", 403, NULL));
        _cleanup_buf_ sp_buf long_id = SP_BUF_INIT;
        sp_buf_append_str(&long_id, "sbx_", NULL);
        for (int i = 0; i < 3000; i++)
                sp_buf_append(&long_id, &"abcdefghijklmnopqrstuvwxyz0123456789"[(i * 7 + i / 13) % 36], 1, NULL);
        json_object_put(API(a, "DELETE", fmt("/v1/sandboxes/%s", long_id.data), 404, NULL));
        _cleanup_json_ json_object *recs = all_records(S.admin_key, fmt("&tenant_id=%s", t), 100);
        bool cut = false;
        for (size_t i = 0; i < json_object_array_length(recs); i++) {
                json_object *r = json_object_array_get_idx(recs, i);
                const char *id = sp_test_jstr(r, "object_id");
                if (id && strncmp(id, long_id.data, 16) == 0) {
                        ck_assert_uint_eq(strlen(id), 256);
                        json_object *d = json_object_object_get(r, "detail");
                        /* What the route took of it (its parameters are bounded too), over the cut. */
                        ck_assert_int_gt(json_object_get_int64(json_object_object_get(d, "object_id_bytes")), 256);
                        cut = true;
                }
        }
        ck_assert_msg(cut, "the refused call with a long id has no record");
        char ep[80], key[300];
        snprintf(ep, sizeof(ep), "SPACE_ENDPOINT=http://127.0.0.1:%d", S.api);
        snprintf(key, sizeof(key), "SPACE_API_KEY=%s", S.admin_key);
        const char *env[] = {ep, key, NULL};
        _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "audit", "--tenant", t, NULL);
        ctl_assert_code(r, 0);
        ck_assert_msg(strstr(r.out.data, "ten_x\\x0d\\x1b[2Kforged\\x0aline"), "%s", r.out.data);
        ck_assert_msg(!strchr(r.out.data, '\r') && !strchr(r.out.data, '\x1b'), "control bytes printed: %s",
                      r.out.data);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_audit");
        TCase *tc = tcase_create("audit");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, every_mutating_call_is_recorded_with_its_actor);
        tcase_add_test(tc, login_failures_are_recorded_within_a_bound);
        tcase_add_test(tc, join_tokens_are_deleted);
        tcase_add_test(tc, spacectl_reads_and_follows_the_log);
        tcase_add_test(tc, ids_a_tenant_chooses_are_kept_harmless);
        tcase_add_test(tc, retention_deletes_old_records);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("the worker runs sandboxes");
        sp_test_pg_require();
        return sp_test_main(suite());
}
