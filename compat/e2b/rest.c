/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The E2B control-plane REST API (spec/openapi.yml of e2b-dev/E2B, as the
 * SDK calls it) translated onto the public API. An E2B sandbox id is our
 * sandbox id; E2B's "paused" is our suspended (or paused) sandbox.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "e2b.h"
#include "request.h"
#include "view.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "user.h"

#define CREATE_WAIT_S 300
#define SESSION_PAGES 20 /* pages of 1000 sessions read for a sandbox's logs */
#define OP_WAIT_S 120
/* The public API's bounds on an ingress token's lifetime. */
#define TRAFFIC_TOKEN_MIN_S 60
#define TRAFFIC_TOKEN_MAX_S 86400

void e2b_rest_error(e2b_call *call, int status, const char *msg)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "code", json_object_new_int(status));
        json_object_object_add(o, "message", json_object_new_string(msg));
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        e2b_call_reply(call, status, "application/json", NULL, s, strlen(s));
}

void e2b_rest_fail(e2b_call *call, const sp_error *e, int unavailable_status)
{
        /* The platform's own table (space/error.h), but a deadline missed
         * behind the wrapper is a gateway's timeout, not the client's. */
        int status = e->code == SP_E_TIMEOUT       ? 504
                     : e->code == SP_E_UNAVAILABLE ? unavailable_status
                                                   : sp_errc_http_status(e->code);
        e2b_rest_error(call, status, e->message);
}

static void fail(e2b_call *call, const sp_error *e)
{
        e2b_rest_fail(call, e, 503);
}

static void reply_json(e2b_call *call, int status, json_object *o, const char *const *headers)
{
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        e2b_call_reply(call, status, "application/json", headers, s, strlen(s));
}

static int64_t int_field(json_object *o, const char *k, int64_t def)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_int) ? json_object_get_int64(v)
                                                                                            : def;
}

/* E2B's state for ours: running, or paused for what can be woken; NULL for
 * states E2B does not list (being deleted, failed, deleted). */
static const char *e2b_state(const char *state)
{
        if (!state)
                return NULL;
        if (strcmp(state, "running") == 0 || strcmp(state, "creating") == 0 || strcmp(state, "restoring") == 0)
                return "running";
        if (strcmp(state, "paused") == 0 || strcmp(state, "suspended") == 0 || strcmp(state, "suspending") == 0 ||
            strcmp(state, "stopped") == 0)
                return "paused";
        return NULL;
}

/* Our ingress mode of sandbox sb ("token" or "public"), or NULL when the
 * public API did not answer one. */
static const char *ingress_mode(json_object *sb)
{
        json_object *ing = NULL;
        return json_object_object_get_ex(sb, "ingress", &ing) ? sp_json_member_str(ing, "mode") : NULL;
}

/* The E2B view of our sandbox sb: Sandbox, ListedSandbox and SandboxDetail in one. */
static json_object *sandbox_json(const e2b_ctx *ctx, json_object *sb, const char *api_key, sp_error **err)
{
        const char *id = sp_json_member_str(sb, "id");
        if (!id) {
                sp_error_set(err, SP_E_INTERNAL, "the public API answered a sandbox without an id");
                return NULL;
        }
        _cleanup_free_ char *token = e2b_token_seal(&ctx->key, id, api_key, err);
        if (!token)
                return NULL;
        json_object *o = json_object_new_object();
        json_object_object_add(o, "sandboxID", json_object_new_string(id));
        const char *tpl = sp_json_member_str(sb, "template");
        json_object_object_add(o, "templateID", json_object_new_string(tpl ? tpl : ""));
        json_object_object_add(o, "alias", json_object_new_string(tpl ? tpl : ""));
        json_object_object_add(o, "clientID", json_object_new_string("space"));
        json_object_object_add(o, "envdVersion", json_object_new_string(ctx->envd_version));
        json_object_object_add(o, "envdAccessToken", json_object_new_string(token));
        /* getHost(port) is "{port}-{id}.{domain}": the data plane's ingress
         * host (the sandbox's ingress URL template from the API). */
        json_object *ing = NULL;
        char domain[E2B_DOMAIN_MAX];
        if (json_object_object_get_ex(sb, "ingress", &ing) &&
            e2b_ingress_domain(sp_json_member_str(ing, "url"), domain, sizeof(domain)))
                json_object_object_add(o, "domain", json_object_new_string(domain));
        else
                json_object_object_add(o, "domain", NULL);
        const char *mode = ingress_mode(sb);
        if (mode) {
                json_object *net = json_object_new_object();
                json_object_object_add(net, "allowPublicTraffic", json_object_new_boolean(strcmp(mode, "public") == 0));
                json_object_object_add(o, "network", net);
        }
        const char *created = sp_json_member_str(sb, "created_at"), *end = sp_json_member_str(sb, "end_at");
        json_object_object_add(o, "startedAt", json_object_new_string(created ? created : ""));
        /* No timeout: E2B always has an end; report the far future. */
        json_object_object_add(o, "endAt", json_object_new_string(end ? end : "9999-12-31T23:59:59Z"));
        const char *st = e2b_state(sp_json_member_str(sb, "state"));
        json_object_object_add(o, "state", json_object_new_string(st ? st : "paused"));
        json_object *res = NULL, *md = NULL;
        int64_t cpu = 1000, mem = 0, disk = 0;
        if (json_object_object_get_ex(sb, "resources", &res)) {
                cpu = int_field(res, "cpu_millis", 1000);
                mem = int_field(res, "memory_mb", 0);
                disk = int_field(res, "disk_mb", 0);
        }
        json_object_object_add(o, "cpuCount", json_object_new_int64(cpu < 1000 ? 1 : (cpu + 999) / 1000));
        json_object_object_add(o, "memoryMB", json_object_new_int64(mem));
        json_object_object_add(o, "diskSizeMB", json_object_new_int64(disk));
        json_object_object_add(o, "metadata",
                               json_object_object_get_ex(sb, "metadata", &md) ? json_object_get(md)
                                                                              : json_object_new_object());
        const char *action = sp_json_member_str(sb, "end_action");
        json_object *lc = json_object_new_object();
        json_object_object_add(lc, "onTimeout",
                               json_object_new_string(action && strcmp(action, "suspend") == 0 ? "pause" : "kill"));
        json_object *ar = NULL;
        json_object_object_add(lc, "autoResume",
                               json_object_new_boolean(ing && json_object_object_get_ex(ing, "auto_resume", &ar) &&
                                                       json_object_get_boolean(ar)));
        json_object_object_add(o, "lifecycle", lc);
        return o;
}

/* Opens the API with the request's X-API-KEY, or answers 401. */
static int open_api(e2b_call *call, const e2b_ctx *ctx, e2b_api *a)
{
        _cleanup_error_ sp_error *e = NULL;
        const e2b_req *r = e2b_call_req(call);
        if (!r->api_key) {
                e2b_rest_error(call, 401, "missing X-API-KEY header");
                return -1;
        }
        if (e2b_api_open(a, ctx, r->api_key, &e) < 0) {
                fail(call, e);
                return -1;
        }
        return 0;
}

static int parse_body(e2b_call *call, json_object **ret)
{
        const e2b_req *r = e2b_call_req(call);
        _cleanup_error_ sp_error *e = NULL;
        if (e2b_request_body(r->body, r->body_len, ret, &e) < 0) {
                e2b_rest_error(call, 400, e->message);
                return -1;
        }
        return 0;
}

static void sandbox_target(char *out, size_t n, const char *id, const char *suffix)
{
        sp_buf b = SP_BUF_INIT;
        sp_buf_append_str(&b, "/v1/sandboxes/", NULL);
        e2b_url_escape(&b, id);
        snprintf(out, n, "%s%s", b.data, suffix);
        sp_buf_free(&b);
}

/* E2B's trafficAccessToken for sandbox id: an ingress token of ours living
 * ttl_s (0: as long as the API allows), within the API's bounds. *ret is
 * malloc'd. */
static int traffic_token(e2b_api *a, const char *id, int64_t ttl_s, char **ret, sp_error **err)
{
        if (ttl_s <= 0 || ttl_s > TRAFFIC_TOKEN_MAX_S)
                ttl_s = TRAFFIC_TOKEN_MAX_S;
        else if (ttl_s < TRAFFIC_TOKEN_MIN_S)
                ttl_s = TRAFFIC_TOKEN_MIN_S;
        char target[512];
        sandbox_target(target, sizeof(target), id, "/ingress/tokens");
        _cleanup_json_ json_object *body = json_object_new_object(), *out = NULL;
        json_object_object_add(body, "ttl_s", json_object_new_int64(ttl_s));
        if (e2b_api_json(a, "POST", target, body, &out, err) < 0)
                return -1;
        const char *tok = sp_json_member_str(out, "token");
        if (!tok)
                return sp_error_set(err, SP_E_INTERNAL, "the public API answered no ingress token");
        *ret = strdup(tok);
        if (!*ret)
                abort();
        return 0;
}

/* How long a token minted now should live for sandbox sb: until its end_at
 * (0, the most there is, when it has none or it has passed). */
static int64_t lifetime_left_s(json_object *sb)
{
        const char *end = sp_json_member_str(sb, "end_at");
        int64_t end_us = 0;
        if (!end || sp_time_parse_rfc3339(end, &end_us, NULL) < 0)
                return 0;
        int64_t left = (end_us - sp_now_real_us()) / SP_USEC_PER_SEC;
        return left > 0 ? left : 0;
}

/* Answers the sandbox (after an action) as E2B sees it; < 0 when it answered
 * an error instead. With mint and the sandbox's ingress by token, the answer
 * carries a trafficAccessToken living ttl_s (0: a day, the most there is;
 * < 0: until the sandbox's end). */
static int reply_sandbox(e2b_call *call, const e2b_ctx *ctx, e2b_api *a, const char *id, int status, bool mint,
                         int64_t ttl_s)
{
        _cleanup_error_ sp_error *e = NULL;
        char target[512];
        sandbox_target(target, sizeof(target), id, "");
        _cleanup_json_ json_object *sb = NULL, *out = NULL;
        _cleanup_free_ char *traffic = NULL;
        if (e2b_api_json(a, "GET", target, NULL, &sb, &e) < 0 ||
            !(out = sandbox_json(ctx, sb, e2b_call_req(call)->api_key, &e))) {
                fail(call, e);
                return -1;
        }
        /* The SDK signs file URLs with the token create and connect answer:
         * remember it to check them (sign.h). */
        if (mint)
                e2b_signers_remember(ctx->signers, id, sp_json_member_str(out, "envdAccessToken"),
                                     e2b_call_req(call)->api_key);
        const char *mode = ingress_mode(sb);
        if (mint && mode && strcmp(mode, "token") == 0) {
                if (traffic_token(a, id, ttl_s < 0 ? lifetime_left_s(sb) : ttl_s, &traffic, &e) < 0) {
                        fail(call, e);
                        return -1;
                }
                json_object_object_add(out, "trafficAccessToken", json_object_new_string(traffic));
        }
        reply_json(call, status, out, NULL);
        return 0;
}

/* Makes sure the sandbox has E2B's default user (user.h). A sandbox where
 * it cannot be made (no shell, a read-only /etc) is still answered: the
 * calls that name no user then fail with "user 'user' not found", and
 * those as root work. So the failure is logged, not answered. */
static void ensure_user(e2b_api *a, const char *id)
{
        _cleanup_error_ sp_error *e = NULL;
        if (e2b_user_ensure(a, id, &e) < 0)
                sp_log_warn_kv(SP_KV("sandbox_id", id), "E2B's default user is missing: %s", e->message);
}

/* POST /sandboxes and /v2/sandboxes. */
static void create(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        _cleanup_json_ json_object *in = NULL;
        if (parse_body(call, &in) < 0)
                return;
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *body = NULL;
        const char *ingress = NULL;
        if (e2b_request_create(in, ctx->template_default, &body, &e) < 0 || e2b_request_ingress(in, &ingress, &e) < 0) {
                e2b_api_close(&a);
                e2b_rest_error(call, 400, e->message);
                return;
        }
        json_object_object_add(body, "ingress", json_object_new_string(ingress));
        json_object *tv = NULL;
        int64_t timeout = json_object_object_get_ex(body, "timeout_s", &tv) ? json_object_get_int64(tv) : 0;
        _cleanup_json_ json_object *env = NULL;
        json_object *sb = NULL;
        /* E2B's default: the first of our list that the key may use and that is ready (a cluster that
         * has built the Debian template uses it; one that has not, base). */
        const char *asked = sp_json_member_str(in, "templateID");
        const char *next = !asked || !*asked || strcmp(asked, "base") == 0 ? strchr(ctx->template_default, ',') : NULL;
        int r;
        while ((r = e2b_api_json(&a, "POST", "/v1/sandboxes", body, &env, &e)) < 0 && next && e &&
               (e->code == SP_E_NOT_FOUND || e->code == SP_E_CONFLICT) && strncmp(e->message, "template '", 10) == 0) {
                const char *name = next + 1;
                size_t n = strcspn(name, ",");
                next = name[n] ? name + n : NULL;
                json_object_object_add(body, "template", json_object_new_string_len(name, (int)n));
                sp_error_free(e);
                e = NULL;
                json_object_put(env);
                env = NULL;
        }
        if (r < 0 || e2b_api_wait(&a, env, CREATE_WAIT_S, &e) < 0 || !json_object_object_get_ex(env, "sandbox", &sb) ||
            !sp_json_member_str(sb, "id")) {
                if (!e)
                        sp_error_set(&e, SP_E_INTERNAL, "the public API answered no sandbox");
                fail(call, e);
                e2b_api_close(&a);
                return;
        }
        ensure_user(&a, sp_json_member_str(sb, "id"));
        if (reply_sandbox(call, ctx, &a, sp_json_member_str(sb, "id"), 201, true, timeout) < 0) {
                /* The caller was told the create failed: do not leave the
                 * sandbox running (best effort, not waited for). */
                char target[512];
                _cleanup_json_ json_object *gone = NULL;
                _cleanup_error_ sp_error *de = NULL;
                sandbox_target(target, sizeof(target), sp_json_member_str(sb, "id"), "");
                (void)e2b_api_json(&a, "DELETE", target, NULL, &gone, &de);
        }
        e2b_api_close(&a);
}

/* GET /sandboxes/{id} */
static void get(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        (void)reply_sandbox(call, ctx, &a, e2b_call_req(call)->id, 200, false, 0);
        e2b_api_close(&a);
}

/* DELETE /sandboxes/{id}: 204 once it is gone. */
static void kill_sandbox(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        char target[512];
        sandbox_target(target, sizeof(target), e2b_call_req(call)->id, "");
        _cleanup_json_ json_object *env = NULL;
        if (e2b_api_json(&a, "DELETE", target, NULL, &env, &e) < 0 || e2b_api_wait(&a, env, OP_WAIT_S, &e) < 0)
                fail(call, e);
        else
                e2b_call_reply(call, 204, NULL, NULL, "", 0);
        e2b_api_close(&a);
}

/* POST /sandboxes/{id}/timeout {"timeout": seconds} */
static void set_timeout(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        _cleanup_json_ json_object *in = NULL;
        if (parse_body(call, &in) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        int64_t t = -1;
        if (e2b_request_timeout(in, true, &t, &e) < 0) {
                e2b_rest_error(call, 400, e->message);
                return;
        }
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        char target[512];
        sandbox_target(target, sizeof(target), e2b_call_req(call)->id, "/timeout");
        _cleanup_json_ json_object *body = json_object_new_object(), *out = NULL;
        json_object_object_add(body, "timeout_s", json_object_new_int64(t));
        if (e2b_api_json(&a, "POST", target, body, &out, &e) < 0)
                fail(call, e);
        else
                e2b_call_reply(call, 204, NULL, NULL, "", 0);
        e2b_api_close(&a);
}

/* PUT /sandboxes/{id}/network {allowOut, denyOut, allow_internet_access}:
 * our PUT /v1/sandboxes/{id}/egress (e2b_request_egress). */
static void set_network(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        _cleanup_json_ json_object *in = NULL;
        if (parse_body(call, &in) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *body = json_object_new_object(), *out = NULL;
        json_object *egress = NULL;
        if (e2b_request_egress(in, true, &egress, &e) < 0) {
                e2b_rest_error(call, 400, e->message);
                return;
        }
        json_object_object_add(body, "egress", egress);
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        char target[512];
        sandbox_target(target, sizeof(target), e2b_call_req(call)->id, "/egress");
        if (e2b_api_json(&a, "PUT", target, body, &out, &e) < 0)
                fail(call, e);
        else
                e2b_call_reply(call, 204, NULL, NULL, "", 0);
        e2b_api_close(&a);
}

/* POST /sandboxes/{id}/pause: our suspend; 409 when it is not running. */
static void pause_sandbox(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        char target[512];
        const char *id = e2b_call_req(call)->id;
        sandbox_target(target, sizeof(target), id, "");
        _cleanup_json_ json_object *sb = NULL, *env = NULL;
        if (e2b_api_json(&a, "GET", target, NULL, &sb, &e) < 0) {
                fail(call, e);
        } else if (!sp_json_member_str(sb, "state") || strcmp(sp_json_member_str(sb, "state"), "running") != 0) {
                e2b_rest_error(call, 409, "the sandbox is already paused");
        } else {
                sandbox_target(target, sizeof(target), id, "/suspend");
                if (e2b_api_json(&a, "POST", target, NULL, &env, &e) < 0 || e2b_api_wait(&a, env, OP_WAIT_S, &e) < 0)
                        fail(call, e);
                else
                        e2b_call_reply(call, 204, NULL, NULL, "", 0);
        }
        e2b_api_close(&a);
}

/* POST /sandboxes/{id}/connect and /v2/…: wake it when it is not running,
 * apply the timeout, answer the sandbox (201 when it was woken). */
static void connect_sandbox(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        _cleanup_json_ json_object *in = NULL;
        if (parse_body(call, &in) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        int64_t t = -1;
        if (e2b_request_timeout(in, false, &t, &e) < 0) {
                e2b_rest_error(call, 400, e->message);
                return;
        }
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        const char *id = e2b_call_req(call)->id;
        char target[512];
        sandbox_target(target, sizeof(target), id, "");
        _cleanup_json_ json_object *sb = NULL, *env = NULL, *out = NULL, *body = json_object_new_object();
        int status = 200;
        if (e2b_api_json(&a, "GET", target, NULL, &sb, &e) < 0)
                goto failed;
        if (!e2b_state(sp_json_member_str(sb, "state"))) {
                sp_error_set(&e, SP_E_NOT_FOUND, "sandbox %s is %s", id, sp_json_member_str(sb, "state"));
                goto failed;
        }
        if (strcmp(sp_json_member_str(sb, "state"), "running") != 0) {
                status = 201;
                sandbox_target(target, sizeof(target), id, "/wake");
                if (e2b_api_json(&a, "POST", target, NULL, &env, &e) < 0 || e2b_api_wait(&a, env, OP_WAIT_S, &e) < 0)
                        goto failed;
        }
        if (t >= 0) {
                json_object_object_add(body, "timeout_s", json_object_new_int64(t));
                sandbox_target(target, sizeof(target), id, "/timeout");
                if (e2b_api_json(&a, "POST", target, body, &out, &e) < 0)
                        goto failed;
        }
        /* A sandbox made through the public API may lack E2B's user. */
        ensure_user(&a, id);
        /* A fresh trafficAccessToken, as E2B answers one on connect. */
        (void)reply_sandbox(call, ctx, &a, id, status, true, t);
        e2b_api_close(&a);
        return;
failed:
        fail(call, e);
        e2b_api_close(&a);
}

/* GET /sandboxes/{id}/metrics: one SandboxMetric from our
 * GET /v1/sandboxes/{id}/stats, or an empty series when the sandbox is not
 * on a worker (409: suspended, stopped, ...). cpuUsedPct is the average since
 * the sandbox was created (one sample has no interval of its own). */
static void metrics(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        char target[512];
        sandbox_target(target, sizeof(target), e2b_call_req(call)->id, "");
        _cleanup_json_ json_object *sb = NULL, *st = NULL;
        if (e2b_api_json(&a, "GET", target, NULL, &sb, &e) < 0) {
                fail(call, e);
                e2b_api_close(&a);
                return;
        }
        sandbox_target(target, sizeof(target), e2b_call_req(call)->id, "/stats");
        int r = e2b_api_json(&a, "GET", target, NULL, &st, &e);
        e2b_api_close(&a);
        if (r < 0) {
                if (e->code == SP_E_CONFLICT)
                        e2b_call_reply(call, 200, "application/json", NULL, "[]", 2);
                else
                        fail(call, e);
                return;
        }
        json_object *res = NULL;
        json_object_object_get_ex(st, "resources", &res);
        const int64_t mib = 1024 * 1024;
        int64_t cpus = (int_field(res, "cpu_millis", 1000) + 999) / 1000;
        int64_t sampled = 0, created = 0;
        const char *sampled_at = sp_json_member_str(st, "sampled_at");
        double pct = 0;
        if (sampled_at && sp_time_parse_rfc3339(sampled_at, &sampled, NULL) == 0 &&
            sp_json_member_str(sb, "created_at") &&
            sp_time_parse_rfc3339(sp_json_member_str(sb, "created_at"), &created, NULL) == 0 && sampled > created &&
            cpus > 0) {
                /* cpu_ns / (wall µs * 1000 * cpus) * 100 */
                pct = (double)int_field(st, "cpu_ns", 0) / ((double)(sampled - created) * 10.0 * (double)cpus);
                if (pct > 100)
                        pct = 100;
        }
        _cleanup_json_ json_object *arr = json_object_new_array();
        json_object *m = json_object_new_object();
        json_object_array_add(arr, m);
        json_object_object_add(m, "timestamp", json_object_new_string(sampled_at ? sampled_at : ""));
        json_object_object_add(m, "timestampUnix", json_object_new_int64(sampled / SP_USEC_PER_SEC));
        json_object_object_add(m, "cpuCount", json_object_new_int64(cpus));
        json_object_object_add(m, "cpuUsedPct", json_object_new_double(pct));
        json_object_object_add(m, "memUsed", json_object_new_int64(int_field(st, "memory_bytes", 0)));
        json_object_object_add(m, "memTotal", json_object_new_int64(int_field(res, "memory_mb", 0) * mib));
        json_object_object_add(m, "diskUsed", json_object_new_int64(int_field(st, "disk_bytes", 0)));
        json_object_object_add(m, "diskTotal", json_object_new_int64(int_field(res, "disk_mb", 0) * mib));
        reply_json(call, 200, arr, NULL);
}

/* GET /v2/sandboxes: filters by metadata and state; our cursor is E2B's
 * X-Next-Token. A page may hold fewer than limit (states E2B does not ask
 * for are left out of it). */
static void list(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        const e2b_req *r = e2b_call_req(call);
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_buf_ sp_buf target = SP_BUF_INIT;
        bool want_running = true, want_paused = true;
        if (e2b_request_list(r->q_limit, r->q_next_token, r->q_metadata, r->q_state, &target, &want_running,
                             &want_paused, &e) < 0) {
                e2b_rest_error(call, 400, e->message);
                return;
        }
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        _cleanup_json_ json_object *page = NULL, *out = json_object_new_array();
        json_object *items = NULL, *next = NULL;
        if (e2b_api_json(&a, "GET", target.data, NULL, &page, &e) < 0 ||
            !json_object_object_get_ex(page, "sandboxes", &items)) {
                if (!e)
                        sp_error_set(&e, SP_E_INTERNAL, "the public API answered no list");
                fail(call, e);
                e2b_api_close(&a);
                return;
        }
        for (size_t i = 0; i < json_object_array_length(items); i++) {
                json_object *sb = json_object_array_get_idx(items, i);
                const char *st = e2b_state(sp_json_member_str(sb, "state"));
                if (!st || (strcmp(st, "running") == 0 && !want_running) || (strcmp(st, "paused") == 0 && !want_paused))
                        continue;
                json_object *o = sandbox_json(ctx, sb, r->api_key, &e);
                if (!o) {
                        fail(call, e);
                        e2b_api_close(&a);
                        return;
                }
                json_object_object_del(o, "envdAccessToken");
                json_object_array_add(out, o);
        }
        _cleanup_free_ char *hdr = NULL;
        if (json_object_object_get_ex(page, "next_cursor", &next) && json_object_is_type(next, json_type_string) &&
            asprintf(&hdr, "X-Next-Token: %s", json_object_get_string(next)) < 0)
                abort();
        const char *headers[] = {hdr, NULL};
        reply_json(call, 200, out, headers);
        e2b_api_close(&a);
}

/* GET /sandboxes/{id}/logs?start=&limit=: the sandbox's history as the
 * public API tells it — its record (created; its state when it does not
 * run) and its sessions (each process started, exited or failed). The API
 * keeps no log of a sandbox's pauses and wakes that it lists. */
static void logs(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        const e2b_req *r = e2b_call_req(call);
        _cleanup_error_ sp_error *e = NULL;
        int64_t start = 0;
        size_t limit = 0;
        if (e2b_request_logs(r->q_start, r->q_limit, E2B_VIEW_LOGS_MAX, &start, &limit, &e) < 0) {
                e2b_rest_error(call, 400, e->message);
                return;
        }
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        e2b_view_logs l;
        e2b_view_logs_init(&l);
        char target[512];
        sandbox_target(target, sizeof(target), r->id, "");
        _cleanup_json_ json_object *sb = NULL, *out = NULL;
        _cleanup_free_ char *cursor = NULL;
        if (e2b_api_json(&a, "GET", target, NULL, &sb, &e) < 0)
                goto failed;
        e2b_view_logs_sandbox(&l, sb);
        for (int page = 0; page < SESSION_PAGES; page++) {
                _cleanup_buf_ sp_buf t = SP_BUF_INIT;
                sandbox_target(target, sizeof(target), r->id, "/sessions?limit=1000");
                sp_buf_append_str(&t, target, NULL);
                if (cursor) {
                        sp_buf_append_str(&t, "&cursor=", NULL);
                        e2b_url_escape(&t, cursor);
                }
                _cleanup_json_ json_object *list = NULL;
                json_object *items = NULL, *next = NULL;
                if (e2b_api_json(&a, "GET", t.data, NULL, &list, &e) < 0)
                        goto failed;
                if (json_object_object_get_ex(list, "sessions", &items) && json_object_is_type(items, json_type_array))
                        for (size_t i = 0; i < json_object_array_length(items); i++)
                                e2b_view_logs_session(&l, json_object_array_get_idx(items, i));
                free(cursor);
                cursor = NULL;
                if (!json_object_object_get_ex(list, "next_cursor", &next) ||
                    !json_object_is_type(next, json_type_string))
                        break;
                if (!(cursor = strdup(json_object_get_string(next))))
                        abort();
        }
        out = e2b_view_logs_answer(&l, start, limit);
        reply_json(call, 200, out, NULL);
        e2b_view_logs_free(&l);
        e2b_api_close(&a);
        return;
failed:
        fail(call, e);
        e2b_view_logs_free(&l);
        e2b_api_close(&a);
}

/* GET /templates (?teamID= is ignored: a key belongs to one tenant): the
 * tenant's templates and the public ones, as E2B's Template list. */
static void templates(e2b_call *call, void *userdata)
{
        const e2b_ctx *ctx = userdata;
        e2b_api a;
        if (open_api(call, ctx, &a) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *list = NULL, *out = json_object_new_array();
        json_object *items = NULL;
        if (e2b_api_json(&a, "GET", "/v1/templates", NULL, &list, &e) < 0 ||
            !json_object_object_get_ex(list, "templates", &items) || !json_object_is_type(items, json_type_array)) {
                if (!e)
                        sp_error_set(&e, SP_E_INTERNAL, "the public API answered no template list");
                fail(call, e);
                e2b_api_close(&a);
                return;
        }
        for (size_t i = 0; i < json_object_array_length(items); i++) {
                json_object *t = e2b_view_template(json_object_array_get_idx(items, i), ctx->envd_version);
                if (t)
                        json_object_array_add(out, t);
        }
        reply_json(call, 200, out, NULL);
        e2b_api_close(&a);
}

static const e2b_route routes[] = {
        {"POST", "/sandboxes", create, false, 0},
        {"POST", "/v2/sandboxes", create, false, 0},
        {"GET", "/v2/sandboxes", list, false, 0},
        {"GET", "/sandboxes/{id}", get, false, 0},
        {"DELETE", "/sandboxes/{id}", kill_sandbox, false, 0},
        {"POST", "/sandboxes/{id}/timeout", set_timeout, false, 0},
        {"PUT", "/sandboxes/{id}/network", set_network, false, 0},
        {"POST", "/sandboxes/{id}/pause", pause_sandbox, false, 0},
        {"POST", "/sandboxes/{id}/connect", connect_sandbox, false, 0},
        {"POST", "/v2/sandboxes/{id}/connect", connect_sandbox, false, 0},
        {"GET", "/sandboxes/{id}/metrics", metrics, false, 0},
        {"GET", "/sandboxes/{id}/logs", logs, false, 0},
        {"GET", "/templates", templates, false, 0},
};

int e2b_rest_register(e2b_ctx *ctx, sp_http_server *srv, sp_error **err)
{
        return e2b_routes_add(ctx, srv, routes, SP_ARRAY_SIZE(routes), true, err);
}
