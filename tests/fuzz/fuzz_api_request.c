/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: every decoder of controlplane/api/request.h over arbitrary
 * bytes. The first byte selects the decoder (modulo their number), the rest
 * is its input. Failures must set an error and leave the output zeroed;
 * successes must hold within every documented bound, and a decoded cursor
 * must encode back to the same text; a decoded secret passes the gateway's
 * own checks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"
#include "space/cleanup.h"
#include "space/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum {
        SEL_SANDBOX_CREATE,
        SEL_TIMEOUT,
        SEL_TEMPLATE_CREATE,
        SEL_WARM,
        SEL_TENANT_CREATE,
        SEL_KEY_CREATE,
        SEL_JOIN_TOKEN,
        SEL_LIST_QUERY, /* state \n template \n limit \n cursor; missing parts are NULL */
        SEL_CURSOR,
        SEL_WAIT,
        SEL_IDEMPOTENCY_AND_STATE,
        SEL_EGRESS_PROFILE, /* the first byte of the rest: odd → with a path name "p" */
        SEL_SANDBOX_EGRESS,
        SEL_EGRESS_LOG_QUERY, /* limit \n decision \n kind \n before \n after */
        SEL_SECRET_CREATE,
        SEL_SECRETS_REWRAP,
        SEL_SANDBOX_INGRESS,
        SEL_INGRESS_TOKEN,
        SEL_QUOTAS,
        SEL__MAX,
};

static void check(bool ok)
{
        if (!ok)
                abort();
}

static bool zeroed(const void *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (((const unsigned char *)p)[i])
                        return false;
        return true;
}

/* The outcome of a decoder: an error exactly on failure, of a body-decoding code. */
static void check_outcome(int r, sp_error *e)
{
        check((r < 0) == (e != NULL));
        if (r < 0)
                check(r == -(int)e->code && (e->code == SP_E_INVALID || e->code == SP_E_TOO_LARGE) && e->message);
        else
                check(r == 0);
}

static bool is_map(json_object *m)
{
        return m && json_object_is_type(m, json_type_object) && json_object_object_length(m) <= CP_MAX_MAP_ITEMS;
}

static void sandbox_create(const char *b, size_t n)
{
        cp_sandbox_create_req r;
        sp_error *e = NULL;
        int ret = cp_req_sandbox_create(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&r, sizeof(r)));
        } else {
                check(r.template_name[0] && strlen(r.template_name) <= CP_NAME_LEN);
                check(r.resources.cpu_millis >= 10 && r.resources.cpu_millis <= 64000);
                check(r.resources.memory_mb >= 16 && r.resources.memory_mb <= 262144);
                check(r.resources.disk_mb >= 16 && r.resources.disk_mb <= 1048576);
                check(r.resources.pids >= 16 && r.resources.pids <= 65536);
                check(is_map(r.env) && is_map(r.metadata) && is_map(r.labels));
                check(r.timeout_s >= 0 && r.timeout_s <= CP_MAX_TIMEOUT_S);
                check(strcmp(r.end_action, "kill") == 0 || strcmp(r.end_action, "suspend") == 0);
                check(r.idle_timeout_s == -1 || r.idle_timeout_s == 0 ||
                      (r.idle_timeout_s >= 60 && r.idle_timeout_s <= CP_MAX_TIMEOUT_S));
                check(strcmp(r.ingress, "token") == 0 || strcmp(r.ingress, "public") == 0);
                check(r.nsecrets <= GW_SECRETS_MAX);
                for (size_t i = 0; i < r.nsecrets; i++) {
                        check(cp_req_secret_name_valid(r.secrets[i].name));
                        check(!r.secrets[i].env[0] || !json_object_object_get_ex(r.env, r.secrets[i].env, NULL));
                        for (size_t j = 0; j < i; j++)
                                check(strcmp(r.secrets[i].name, r.secrets[j].name) != 0);
                }
                cp_sandbox_create_req_free(&r);
        }
        sp_error_free(e);
}

static void timeout_body(const char *b, size_t n)
{
        cp_timeout_req r;
        sp_error *e = NULL;
        int ret = cp_req_timeout(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret < 0)
                check(zeroed(&r, sizeof(r)));
        else
                check(r.timeout_s >= 0 && r.timeout_s <= CP_MAX_TIMEOUT_S);
        sp_error_free(e);
}

static void template_create(const char *b, size_t n)
{
        cp_template_create_req r;
        sp_error *e = NULL;
        int ret = cp_req_template_create(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&r, sizeof(r)));
        } else {
                check(r.name[0] && r.warm >= 0 && r.warm <= 64);
                bool deb = strcmp(r.source, "debootstrap") == 0;
                check(deb ? (r.suite && !r.path) : (r.path && r.path[0] == '/' && !r.suite && !r.mirror));
                check(deb || (!r.packages && !r.user));
                /* names the workers take as they are: no separator but ',', none empty, no root */
                check(!r.packages ||
                      (r.packages[0] && !strstr(r.packages, ",,") && !strpbrk(r.packages, " ;$`'\"\\\n") &&
                       r.packages[strlen(r.packages) - 1] != ','));
                check(!r.user || (r.user[0] && strcmp(r.user, "root") != 0 && !strpbrk(r.user, " ;$`'\"\\\n,:")));
                cp_template_create_req_free(&r);
        }
        sp_error_free(e);
}

static void quotas(const char *b, size_t n)
{
        cp_quotas_req q;
        sp_error *e = NULL;
        int r = cp_req_quotas(b, n, &q, &e);
        check_outcome(r, e);
        sp_error_free(e);
        if (r < 0) {
                check(zeroed(&q, sizeof(q)));
                return;
        }
        bool any = false;
        for (int i = 0; i < CP_QUOTA_COUNT; i++) {
                any |= q.set[i];
                check(q.set[i] ? (q.limit[i] == CP_QUOTA_DEFAULT ||
                                  (q.limit[i] >= CP_QUOTA_NONE && q.limit[i] <= CP_QUOTA_MAX))
                               : q.limit[i] == 0);
        }
        check(any);
}

static void warm(const char *b, size_t n)
{
        int64_t w = -1;
        sp_error *e = NULL;
        int ret = cp_req_warm(b, n, &w, &e);
        check_outcome(ret, e);
        check(ret < 0 ? w == 0 : (w >= 0 && w <= 64));
        sp_error_free(e);
}

static void named(const char *b, size_t n, bool key)
{
        cp_named_req r;
        sp_error *e = NULL;
        int ret = key ? cp_req_key_create(b, n, &r, &e) : cp_req_tenant_create(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret < 0)
                check(zeroed(&r, sizeof(r)));
        else
                check(r.name[0] && (key || (!r.admin && !r.tenant_id[0])));
        sp_error_free(e);
}

static void join_token(const char *b, size_t n)
{
        cp_join_token_req r;
        sp_error *e = NULL;
        int ret = cp_req_join_token(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret < 0)
                check(zeroed(&r, sizeof(r)));
        else
                check(r.ttl_s >= 60 && r.ttl_s <= CP_MAX_TIMEOUT_S && r.uses >= 0 && r.uses <= 1000);
        sp_error_free(e);
}

/* A decoded cursor encodes back to the same text. */
static void check_cursor_canonical(const char *cursor, const char *ts, const char *id)
{
        char again[256];
        check(cp_cursor_encode(ts, id, again, sizeof(again), NULL) == 0);
        check(strcmp(again, cursor) == 0);
}

static void list_query(char *s)
{
        char *parts[4] = {NULL, NULL, NULL, NULL};
        for (size_t i = 0; i < 4 && s; i++) {
                parts[i] = s;
                s = strchr(s, '\n');
                if (s)
                        *s++ = '\0';
        }
        cp_list_query q;
        sp_error *e = NULL;
        int ret = cp_req_list_query(parts[0], parts[1], parts[2], parts[3], &q, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&q, sizeof(q)));
        } else {
                check(q.limit >= 1 && q.limit <= 1000);
                check(!q.state[0] || cp_sandbox_state_valid(q.state));
                if (q.has_cursor)
                        check_cursor_canonical(parts[3], q.cursor_created_at, q.cursor_id);
        }
        sp_error_free(e);
}

static void cursor(const char *s)
{
        char ts[40], id[32];
        sp_error *e = NULL;
        int ret = cp_cursor_decode(s, ts, sizeof(ts), id, sizeof(id), &e);
        check_outcome(ret, e);
        if (ret < 0)
                check(!ts[0] && !id[0]);
        else
                check_cursor_canonical(s, ts, id);
        sp_error_free(e);
}

static void wait_param(const char *s)
{
        int64_t ms = -1;
        sp_error *e = NULL;
        int ret = cp_req_wait(s, &ms, &e);
        check_outcome(ret, e);
        check(ret < 0 ? ms == 0 : (ms >= 0 && ms <= 60000));
        sp_error_free(e);
}

static void egress_profile(const char *b, size_t n)
{
        if (n == 0)
                return;
        gw_profile *p = NULL;
        sp_error *e = NULL;
        const char *path_name = (b[0] & 1) ? "p" : NULL;
        int ret = cp_req_egress_profile(b + 1, n - 1, path_name, &p, &e);
        check((ret < 0) == (e != NULL) && (ret < 0) == (p == NULL));
        if (ret == 0) {
                check(!path_name || strcmp(gw_profile_name(p), "p") == 0);
                /* Its normal form parses back to the same. */
                _cleanup_json_ json_object *j = gw_profile_to_json(p), *j2 = NULL;
                gw_profile *again = NULL;
                check(gw_profile_parse(j, NULL, true, &again, NULL) == 0);
                j2 = gw_profile_to_json(again);
                check(json_object_equal(j, j2));
                gw_profile_unref(again);
        }
        gw_profile_unref(p);
        sp_error_free(e);
}

static void sandbox_egress(const char *b, size_t n)
{
        char name[64];
        gw_profile *p = NULL;
        sp_error *e = NULL;
        int ret = cp_req_sandbox_egress(b, n, name, &p, &e);
        check_outcome(ret, e);
        if (ret < 0)
                check(!p && !name[0]);
        else
                check((p != NULL) != (name[0] != '\0') && strlen(name) <= 63);
        gw_profile_unref(p);
        sp_error_free(e);
}

static void egress_log_query(char *s)
{
        char *parts[5] = {NULL, NULL, NULL, NULL, NULL};
        for (size_t i = 0; i < 5 && s; i++) {
                parts[i] = s;
                s = strchr(s, '\n');
                if (s)
                        *s++ = '\0';
        }
        pr_wk_get_egress_log q;
        sp_error *e = NULL;
        int ret = cp_req_egress_log_query(parts[0], parts[1], parts[2], parts[3], parts[4], &q, &e);
        check_outcome(ret, e);
        if (ret < 0)
                check(zeroed(&q, sizeof(q)));
        else
                check(q.limit >= 1 && q.limit <= 1000 && q.before_us >= 0 && q.after_us >= 0 &&
                      !(q.before_us && q.after_us));
        sp_error_free(e);
}

static void secret_create(const char *b, size_t n)
{
        cp_secret_create_req r;
        sp_error *e = NULL;
        int ret = cp_req_secret_create(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret < 0) {
                check(zeroed(&r, sizeof(r)));
        } else {
                check(cp_req_secret_name_valid(r.name) && r.env[0]);
                check(gw_secret_check_spec(r.hosts, r.inject, NULL) == 0);
                check(r.value && r.value_len == strlen(r.value) &&
                      gw_secret_check_value(r.value, r.value_len, NULL) == 0);
                check(r.rate_per_min >= 0 && r.rate_per_min <= 1000000);
                cp_secret_create_req_free(&r);
        }
        sp_error_free(e);
}

static void secrets_rewrap(const char *b, size_t n)
{
        int64_t max = -1;
        sp_error *e = NULL;
        int ret = cp_req_secrets_rewrap(b, n, &max, &e);
        check_outcome(ret, e);
        check(ret < 0 ? max == 0 : (max >= 1 && max <= 1000000));
        sp_error_free(e);
}

static void sandbox_ingress(const char *b, size_t n)
{
        cp_sandbox_ingress_req r;
        sp_error *e = NULL;
        int ret = cp_req_sandbox_ingress(b, n, &r, &e);
        check_outcome(ret, e);
        if (ret == 0) {
                check(r.mode[0] == '\0' || strcmp(r.mode, "token") == 0 || strcmp(r.mode, "public") == 0);
                check(r.auto_resume >= -1 && r.auto_resume <= 1);
                check(r.mode[0] != '\0' || r.auto_resume >= 0); /* one of them at least */
        }
        sp_error_free(e);
}

static void ingress_token(const char *b, size_t n)
{
        int64_t ttl = 0;
        sp_error *e = NULL;
        int ret = cp_req_ingress_token(b, n, &ttl, &e);
        check_outcome(ret, e);
        if (ret == 0)
                check(ttl >= CP_INGRESS_TOKEN_TTL_MIN_S && ttl <= CP_INGRESS_TOKEN_TTL_MAX_S);
        sp_error_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size == 0)
                return 0;
        unsigned sel = data[0] % SEL__MAX;
        const char *body = (const char *)data + 1;
        size_t n = size - 1;
        /* The string decoders take C strings: the input up to its first NUL. */
        _cleanup_free_ char *s = strndup(body, n);
        if (!s)
                return 0;
        switch (sel) {
        case SEL_SANDBOX_CREATE:
                sandbox_create(body, n);
                break;
        case SEL_TIMEOUT:
                timeout_body(body, n);
                break;
        case SEL_TEMPLATE_CREATE:
                template_create(body, n);
                break;
        case SEL_WARM:
                warm(body, n);
                break;
        case SEL_TENANT_CREATE:
                named(body, n, false);
                break;
        case SEL_KEY_CREATE:
                named(body, n, true);
                break;
        case SEL_JOIN_TOKEN:
                join_token(body, n);
                break;
        case SEL_LIST_QUERY:
                list_query(s);
                break;
        case SEL_CURSOR:
                cursor(s);
                break;
        case SEL_WAIT:
                wait_param(s);
                break;
        case SEL_EGRESS_PROFILE:
                egress_profile(body, n);
                break;
        case SEL_SANDBOX_EGRESS:
                sandbox_egress(body, n);
                break;
        case SEL_EGRESS_LOG_QUERY:
                egress_log_query(s);
                break;
        case SEL_SECRET_CREATE:
                secret_create(body, n);
                break;
        case SEL_SECRETS_REWRAP:
                secrets_rewrap(body, n);
                break;
        case SEL_SANDBOX_INGRESS:
                sandbox_ingress(body, n);
                break;
        case SEL_INGRESS_TOKEN:
                ingress_token(body, n);
                break;
        case SEL_QUOTAS:
                quotas(body, n);
                break;
        default:
                (void)cp_req_idempotency_key_valid(s);
                (void)cp_sandbox_state_valid(s);
                break;
        }
        return 0;
}
