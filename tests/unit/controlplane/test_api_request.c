/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: decoding and validation of the public API's request bodies and
 * query parameters (controlplane/api/request.h) — defaults, every bound on
 * both sides, wrong types, unknown fields, malformed and huge input, cursors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/request.h"
#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"

/* ---- every body decoder behind one shape, to check the common contract ---- */

static int dec_create(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_sandbox_create(b, n, ret, err);
}
static void free_create(void *r)
{
        cp_sandbox_create_req_free(r);
}
static int dec_timeout(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_timeout(b, n, ret, err);
}
static int dec_template(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_template_create(b, n, ret, err);
}
static void free_template(void *r)
{
        cp_template_create_req_free(r);
}
static int dec_warm(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_warm(b, n, ret, err);
}
static int dec_tenant(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_tenant_create(b, n, ret, err);
}
static int dec_key(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_key_create(b, n, ret, err);
}
static int dec_join(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_join_token(b, n, ret, err);
}
static int dec_secret(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_secret_create(b, n, ret, err);
}
static void free_secret(void *r)
{
        cp_secret_create_req_free(r);
}
static int dec_ingress(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_sandbox_ingress(b, n, ret, err);
}
static int dec_rewrap(const char *b, size_t n, void *ret, sp_error **err)
{
        return cp_req_secrets_rewrap(b, n, ret, err);
}

typedef struct decoder {
        const char *name;
        int (*decode)(const char *body, size_t len, void *ret, sp_error **err);
        void (*free)(void *ret);
        size_t size;
        const char *valid; /* a valid body */
} decoder;

static const decoder D_CREATE = {"sandbox_create", dec_create, free_create, sizeof(cp_sandbox_create_req),
                                 "{\"template\":\"base\"}"};
static const decoder D_TIMEOUT = {"timeout", dec_timeout, NULL, sizeof(cp_timeout_req), "{\"timeout_s\":60}"};
static const decoder D_TEMPLATE = {"template_create", dec_template, free_template, sizeof(cp_template_create_req),
                                   "{\"name\":\"py\",\"source\":\"tar\",\"path\":\"/srv/py.tar\"}"};
static const decoder D_WARM = {"warm", dec_warm, NULL, sizeof(int64_t), "{\"warm\":2}"};
static const decoder D_TENANT = {"tenant_create", dec_tenant, NULL, sizeof(cp_named_req), "{\"name\":\"acme\"}"};
static const decoder D_KEY = {"key_create", dec_key, NULL, sizeof(cp_named_req), "{\"name\":\"ci\"}"};
static const decoder D_JOIN = {"join_token", dec_join, NULL, sizeof(cp_join_token_req), "{\"ttl_s\":600}"};
#define SECRET_BODY \
        "{\"name\":\"openai\",\"value\":\"sk-1\",\"hosts\":[\"api.openai.com\"],\"inject\":{\"header\":\"X-Key\"}}"
static const decoder D_SECRET = {"secret_create", dec_secret, free_secret, sizeof(cp_secret_create_req), SECRET_BODY};
static const decoder D_REWRAP = {"secrets_rewrap", dec_rewrap, NULL, sizeof(int64_t), "{\"max\":5}"};
static const decoder D_INGRESS = {"sandbox_ingress", dec_ingress, NULL, sizeof(cp_sandbox_ingress_req),
                                  "{\"mode\":\"public\"}"};
static const decoder *const decoders[] = {&D_CREATE, &D_TENANT, &D_TIMEOUT, &D_TEMPLATE, &D_WARM,
                                          &D_KEY,    &D_JOIN,   &D_SECRET,  &D_REWRAP,   &D_INGRESS};

static bool all_zero(const void *p, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (((const unsigned char *)p)[i])
                        return false;
        return true;
}

/* Decodes len bytes of body and expects failure with code and a message
 * containing want; the output must come back zeroed. */
static void expect_fail_len(const decoder *d, const char *body, size_t len, sp_errc code, const char *want, int line)
{
        _cleanup_free_ void *ret = malloc(d->size);
        memset(ret, 0xa5, d->size);
        _cleanup_error_ sp_error *e = NULL;
        int r = d->decode(body, len, ret, &e);
        ck_assert_msg(r == -(int)code, "line %d: %s(%.200s) returned %d, want %d (%s)", line, d->name, body, r,
                      -(int)code, e ? e->message : "no error");
        ck_assert_msg(e && e->code == code, "line %d: %s: no error or wrong code", line, d->name);
        ck_assert_msg(strstr(e->message, want), "line %d: %s(%.200s): message '%s' lacks '%s'", line, d->name, body,
                      e->message, want);
        ck_assert_msg(all_zero(ret, d->size), "line %d: %s: output not zeroed on failure", line, d->name);
}
#define expect_fail(d, body, want) expect_fail_len((d), (body), strlen(body), SP_E_INVALID, (want), __LINE__)

/* Decodes body and expects success (the caller frees ret). */
static void expect_ok_at(const decoder *d, const char *body, void *ret, int line)
{
        _cleanup_error_ sp_error *e = NULL;
        int r = d->decode(body, strlen(body), ret, &e);
        ck_assert_msg(r == 0, "line %d: %s(%.200s) failed: %s", line, d->name, body, e ? e->message : "?");
        ck_assert_ptr_null(e);
}
#define expect_ok(d, body, ret) expect_ok_at((d), (body), (ret), __LINE__)

/* A JSON object {"<field>": <value>} merged into a base object text "{...}"
 * (base without its closing brace is extended). */
static char *with(const char *base, const char *field, const char *value)
{
        sp_buf b = SP_BUF_INIT;
        size_t n = strlen(base);
        ck_assert(n >= 2 && base[n - 1] == '}');
        sp_buf_append(&b, base, n - 1, NULL);
        sp_buf_appendf(&b, NULL, "%s\"%s\":%s}", n > 2 ? "," : "", field, value);
        return sp_buf_steal(&b);
}

static char *repeat(char c, size_t n)
{
        char *s = malloc(n + 1);
        memset(s, c, n);
        s[n] = '\0';
        return s;
}

/* ---- the contract every decoder shares ---- */

START_TEST(every_decoder_common_contract)
{
        for (size_t i = 0; i < SP_ARRAY_SIZE(decoders); i++) {
                const decoder *d = decoders[i];
                /* The valid body decodes. */
                _cleanup_free_ void *ret = calloc(1, d->size);
                expect_ok(d, d->valid, ret);
                if (d->free)
                        d->free(ret);

                /* Unknown fields are refused by name, also next to valid ones. */
                _cleanup_free_ char *unknown = with(d->valid, "surprise", "1");
                expect_fail(d, unknown, "unknown field 'surprise'");

                /* Not an object, malformed JSON, lax JSON json-c would take. */
                const char *not_obj[] = {"[]", "null", "1", "\"x\"", "true", "[{\"name\":\"a\"}]"};
                for (size_t k = 0; k < SP_ARRAY_SIZE(not_obj); k++)
                        expect_fail(d, not_obj[k], "request body must be a JSON object");
                const char *bad[] = {"{",
                                     "{\"a\":}",
                                     "{'name':'a'}",
                                     "{\"name\":\"a\",}",
                                     "{} {}",
                                     "{}x",
                                     "{\"warm\":1.}",
                                     "{\"warm\":NaN}",
                                     "/* c */ {}",
                                     "{\"a\":\"\x01\"}",
                                     "\xef\xbb\xbf{}",
                                     " ",
                                     "{\"a\":\"\xff\"}"};
                for (size_t k = 0; k < SP_ARRAY_SIZE(bad); k++)
                        expect_fail(d, bad[k], "request body: malformed JSON");

                /* Nesting past the JSON depth limit. */
                _cleanup_buf_ sp_buf deep = SP_BUF_INIT;
                sp_buf_append_str(&deep, "{\"x\":", NULL);
                for (int k = 0; k < 100; k++)
                        sp_buf_append_str(&deep, "[", NULL);
                for (int k = 0; k < 100; k++)
                        sp_buf_append_str(&deep, "]", NULL);
                sp_buf_append_str(&deep, "}", NULL);
                expect_fail(d, deep.data, "malformed JSON");

                /* Over 1 MiB: too large, whatever it holds. */
                size_t big = 1024 * 1024 + 1;
                _cleanup_free_ char *huge = repeat(' ', big);
                huge[0] = '{';
                huge[big - 1] = '}';
                expect_fail_len(d, huge, big, SP_E_TOO_LARGE, "larger than 1048576 bytes", __LINE__);
                /* Just under: parsed, and judged on its fields. */
                huge[big - 2] = '}';
                huge[big - 1] = '\0';
                _cleanup_error_ sp_error *e = NULL;
                int r = d->decode(huge, big - 1, ret, &e);
                if (r == 0 && d->free)
                        d->free(ret);
                ck_assert_msg(r == 0 || (r == -SP_E_INVALID && strstr(e->message, "is required")), "%s: %s", d->name,
                              e ? e->message : "ok");
        }
}
END_TEST

/* ---- POST /v1/sandboxes ---- */

START_TEST(sandbox_create_minimal_gets_defaults)
{
        cp_sandbox_create_req r;
        expect_ok(&D_CREATE, "{\"template\":\"base\"}", &r);
        ck_assert_str_eq(r.template_name, "base");
        ck_assert_int_eq(r.resources.cpu_millis, 1000);
        ck_assert_int_eq(r.resources.memory_mb, 512);
        ck_assert_int_eq(r.resources.disk_mb, 2048);
        ck_assert_int_eq(r.resources.pids, 1024);
        ck_assert(r.env && json_object_is_type(r.env, json_type_object) && json_object_object_length(r.env) == 0);
        ck_assert(r.metadata && json_object_object_length(r.metadata) == 0);
        ck_assert(r.labels && json_object_object_length(r.labels) == 0);
        ck_assert_str_eq(r.backend, "");
        ck_assert_int_eq(r.timeout_s, 0);
        ck_assert_str_eq(r.end_action, "kill");
        ck_assert_int_eq(r.idle_timeout_s, -1);
        ck_assert_str_eq(r.egress, "");
        cp_sandbox_create_req_free(&r);
        ck_assert_ptr_null(r.env);
        cp_sandbox_create_req_free(&r); /* twice is harmless */
        cp_sandbox_create_req_free(NULL);

        /* JSON null counts as absent: defaults again. */
        expect_ok(&D_CREATE,
                  "{\"template\":\"base\",\"resources\":null,\"env\":null,\"backend\":null,\"timeout_s\":null,"
                  "\"end_action\":null,\"idle_timeout_s\":null,\"egress\":null,\"metadata\":null,\"labels\":null}",
                  &r);
        ck_assert_int_eq(r.resources.memory_mb, 512);
        ck_assert_int_eq(r.idle_timeout_s, -1);
        ck_assert_str_eq(r.end_action, "kill");
        ck_assert(r.env && r.metadata && r.labels);
        cp_sandbox_create_req_free(&r);

        /* A partial resources object keeps the defaults of the rest. */
        expect_ok(&D_CREATE, "{\"template\":\"base\",\"resources\":{\"memory_mb\":1024}}", &r);
        ck_assert_int_eq(r.resources.memory_mb, 1024);
        ck_assert_int_eq(r.resources.cpu_millis, 1000);
        ck_assert_int_eq(r.resources.pids, 1024);
        cp_sandbox_create_req_free(&r);
}
END_TEST

START_TEST(sandbox_create_full)
{
        cp_sandbox_create_req r;
        expect_ok(&D_CREATE,
                  "{\"template\":\"py-3.12_slim.v2\",\"resources\":{\"cpu_millis\":2500,\"memory_mb\":4096,"
                  "\"disk_mb\":10240,\"pids\":4096},\"env\":{\"PATH\":\"/usr/bin\",\"_X1\":\"\",\"LANG\":\"C.UTF-8\"},"
                  "\"metadata\":{\"owner\":\"ana\",\"team/app:v\":\"x=y&z\",\"k.1-_\":\"\\u00e9t\\u00e9\"},"
                  "\"labels\":{\"zone\":\"a\"},\"backend\":\"qemu\",\"timeout_s\":3600,\"end_action\":\"suspend\","
                  "\"idle_timeout_s\":0,\"egress\":\"no-egress-2\"}",
                  &r);
        ck_assert_str_eq(r.template_name, "py-3.12_slim.v2");
        ck_assert_int_eq(r.resources.cpu_millis, 2500);
        ck_assert_int_eq(r.resources.memory_mb, 4096);
        ck_assert_int_eq(r.resources.disk_mb, 10240);
        ck_assert_int_eq(r.resources.pids, 4096);
        ck_assert_int_eq(json_object_object_length(r.env), 3);
        json_object *v = NULL;
        ck_assert(json_object_object_get_ex(r.env, "PATH", &v));
        ck_assert_str_eq(json_object_get_string(v), "/usr/bin");
        ck_assert(json_object_object_get_ex(r.metadata, "team/app:v", &v));
        ck_assert_str_eq(json_object_get_string(v), "x=y&z");
        ck_assert(json_object_object_get_ex(r.metadata, "k.1-_", &v));
        ck_assert_str_eq(json_object_get_string(v), "\xc3\xa9t\xc3\xa9");
        ck_assert(json_object_object_get_ex(r.labels, "zone", &v));
        ck_assert_str_eq(r.backend, "qemu");
        ck_assert_int_eq(r.timeout_s, 3600);
        ck_assert_str_eq(r.end_action, "suspend");
        ck_assert_int_eq(r.idle_timeout_s, 0);
        ck_assert_str_eq(r.egress, "no-egress-2");
        cp_sandbox_create_req_free(&r);

        const char *backends[] = {"jail", "qemu", "firecracker", ""};
        for (size_t i = 0; i < SP_ARRAY_SIZE(backends); i++) {
                char body[128];
                snprintf(body, sizeof(body), "{\"template\":\"b\",\"backend\":\"%s\"}", backends[i]);
                expect_ok(&D_CREATE, body, &r);
                ck_assert_str_eq(r.backend, backends[i]);
                cp_sandbox_create_req_free(&r);
        }
}
END_TEST

START_TEST(sandbox_create_resource_bounds)
{
        static const struct {
                const char *name;
                long long min, max;
        } rs[] = {{"cpu_millis", 10, 64000}, {"memory_mb", 16, 262144}, {"disk_mb", 16, 1048576}, {"pids", 16, 65536}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(rs); i++) {
                char body[256], want[128];
                cp_sandbox_create_req r;
                long long good[] = {rs[i].min, rs[i].max};
                for (size_t k = 0; k < 2; k++) {
                        snprintf(body, sizeof(body), "{\"template\":\"b\",\"resources\":{\"%s\":%lld}}", rs[i].name,
                                 good[k]);
                        expect_ok(&D_CREATE, body, &r);
                        int64_t got = i == 0   ? r.resources.cpu_millis
                                      : i == 1 ? r.resources.memory_mb
                                      : i == 2 ? r.resources.disk_mb
                                               : r.resources.pids;
                        ck_assert_int_eq(got, good[k]);
                        cp_sandbox_create_req_free(&r);
                }
                snprintf(want, sizeof(want), "resources.%s must be between %lld and %lld", rs[i].name, rs[i].min,
                         rs[i].max);
                const char *bad_values[] = {"-1",
                                            "0",
                                            "99999999999",
                                            "9223372036854775807",
                                            "9223372036854775808",
                                            "18446744073709551616",
                                            "-9223372036854775809",
                                            "100000000000000000000000000000"};
                char below[32], above[32];
                snprintf(below, sizeof(below), "%lld", rs[i].min - 1);
                snprintf(above, sizeof(above), "%lld", rs[i].max + 1);
                const char *edge[] = {below, above};
                for (size_t k = 0; k < 2; k++) {
                        snprintf(body, sizeof(body), "{\"template\":\"b\",\"resources\":{\"%s\":%s}}", rs[i].name,
                                 edge[k]);
                        expect_fail(&D_CREATE, body, want);
                }
                for (size_t k = 0; k < SP_ARRAY_SIZE(bad_values); k++) {
                        snprintf(body, sizeof(body), "{\"template\":\"b\",\"resources\":{\"%s\":%s}}", rs[i].name,
                                 bad_values[k]);
                        expect_fail(&D_CREATE, body, want);
                }
                snprintf(want, sizeof(want), "resources.%s must be an integer", rs[i].name);
                const char *wrong[] = {"\"512\"", "512.0", "5.12e2", "true", "{}", "[512]"};
                for (size_t k = 0; k < SP_ARRAY_SIZE(wrong); k++) {
                        snprintf(body, sizeof(body), "{\"template\":\"b\",\"resources\":{\"%s\":%s}}", rs[i].name,
                                 wrong[k]);
                        expect_fail(&D_CREATE, body, want);
                }
        }
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"resources\":{\"gpus\":1}}", "unknown field 'resources.gpus'");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"resources\":[]}", "resources must be an object");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"resources\":512}", "resources must be an object");
}
END_TEST

START_TEST(sandbox_create_timeouts_and_enums)
{
        cp_sandbox_create_req r;
        const char *ok_timeout[] = {"0", "1", "2592000"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok_timeout); i++) {
                _cleanup_free_ char *b = with("{\"template\":\"b\"}", "timeout_s", ok_timeout[i]);
                expect_ok(&D_CREATE, b, &r);
                ck_assert_int_eq(r.timeout_s, atoll(ok_timeout[i]));
                cp_sandbox_create_req_free(&r);
        }
        const char *bad_timeout[] = {"-1", "2592001", "1e3", "\"60\""};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_timeout); i++) {
                _cleanup_free_ char *b = with("{\"template\":\"b\"}", "timeout_s", bad_timeout[i]);
                expect_fail(&D_CREATE, b, "timeout_s must be");
        }

        const char *ok_idle[] = {"0", "60", "21600", "2592000"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok_idle); i++) {
                _cleanup_free_ char *b = with("{\"template\":\"b\"}", "idle_timeout_s", ok_idle[i]);
                expect_ok(&D_CREATE, b, &r);
                ck_assert_int_eq(r.idle_timeout_s, atoll(ok_idle[i]));
                cp_sandbox_create_req_free(&r);
        }
        const char *bad_idle[] = {"-1", "1", "59", "2592001"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_idle); i++) {
                _cleanup_free_ char *b = with("{\"template\":\"b\"}", "idle_timeout_s", bad_idle[i]);
                expect_fail(&D_CREATE, b, "idle_timeout_s must be 0 or between 60 and 2592000");
        }
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"idle_timeout_s\":60.5}", "idle_timeout_s must be an integer");

        expect_fail(&D_CREATE, "{\"template\":\"b\",\"end_action\":\"explode\"}", "end_action must be kill or suspend");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"end_action\":\"\"}", "end_action must be kill or suspend");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"end_action\":1}", "end_action must be a string");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"backend\":\"vmware\"}",
                    "backend must be jail, qemu or firecracker");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"backend\":\"JAIL\"}", "backend must be");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"backend\":\"jail\\u0000x\"}", "backend must not contain NUL");
        _cleanup_free_ char *long_backend = repeat('j', 5000);
        char body[5100];
        snprintf(body, sizeof(body), "{\"template\":\"b\",\"backend\":\"%s\"}", long_backend);
        expect_fail(&D_CREATE, body, "backend must be at most");

        expect_fail(&D_CREATE, "{\"template\":\"b\",\"egress\":\"Open\"}", "field 'egress' must be a profile's name");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"egress\":\"a b\"}", "field 'egress' must be a profile's name");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"egress\":\"\"}", "field 'egress' must be a profile's name");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"egress\":5}", "field 'egress' must be a profile's name");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"egress\":{\"domains\":[\"a b\"]}}",
                    "field 'egress': field 'domains[0]'");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"egress\":{\"name\":\"none\"}}", "built-in");
        expect_ok(&D_CREATE, "{\"template\":\"b\",\"egress\":{\"domains\":[\"A.example\"]}}", &r);
        ck_assert_str_eq(r.egress, "");
        ck_assert_ptr_nonnull(r.egress_inline);
        ck_assert_str_eq(gw_profile_name(r.egress_inline), "inline");
        ck_assert(gw_profile_allows_name(r.egress_inline, "a.example"));
        cp_sandbox_create_req_free(&r);
        _cleanup_free_ char *e63 = repeat('e', 63), *e64 = repeat('e', 64);
        snprintf(body, sizeof(body), "{\"template\":\"b\",\"egress\":\"%s\"}", e63);
        expect_ok(&D_CREATE, body, &r);
        ck_assert_str_eq(r.egress, e63);
        cp_sandbox_create_req_free(&r);
        snprintf(body, sizeof(body), "{\"template\":\"b\",\"egress\":\"%s\"}", e64);
        expect_fail(&D_CREATE, body, "field 'egress' must be a profile's name (1 to 63");
}
END_TEST

START_TEST(sandbox_create_template_name)
{
        cp_sandbox_create_req r;
        expect_fail(&D_CREATE, "{}", "template is required");
        expect_fail_len(&D_CREATE, "", 0, SP_E_INVALID, "template is required", __LINE__);
        expect_fail(&D_CREATE, "{\"template\":null}", "template is required");
        expect_fail(&D_CREATE, "{\"template\":7}", "template must be a string");
        expect_fail(&D_CREATE, "{\"template\":[\"a\"]}", "template must be a string");
        const char *bad[] = {"",    ".",   "..",       "-x",   "_x",        ".hidden",
                             "a/b", "a b", "a\\u00e9", "a\\n", "a\\u0000b", "a:b"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                char body[64];
                snprintf(body, sizeof(body), "{\"template\":\"%s\"}", bad[i]);
                expect_fail(&D_CREATE, body, "template must");
        }
        _cleanup_free_ char *n128 = repeat('n', 128), *n129 = repeat('n', 129);
        char body[300];
        snprintf(body, sizeof(body), "{\"template\":\"%s\"}", n128);
        expect_ok(&D_CREATE, body, &r);
        ck_assert_str_eq(r.template_name, n128);
        cp_sandbox_create_req_free(&r);
        snprintf(body, sizeof(body), "{\"template\":\"%s\"}", n129);
        expect_fail(&D_CREATE, body, "template must be at most 128 bytes");
}
END_TEST

/* A map field with n entries "<prefix><i>":"<value>". */
static char *map_body(const char *field, size_t n, const char *key_prefix, const char *value)
{
        sp_buf b = SP_BUF_INIT;
        sp_buf_appendf(&b, NULL, "{\"template\":\"b\",\"%s\":{", field);
        for (size_t i = 0; i < n; i++)
                sp_buf_appendf(&b, NULL, "%s\"%s%zu\":\"%s\"", i ? "," : "", key_prefix, i, value);
        sp_buf_append_str(&b, "}}", NULL);
        return sp_buf_steal(&b);
}

START_TEST(sandbox_create_maps)
{
        const char *maps[] = {"env", "metadata", "labels"};
        _cleanup_free_ char *v4096 = repeat('v', 4096), *v4097 = repeat('v', 4097);
        _cleanup_free_ char *k128 = repeat('K', 128), *k129 = repeat('K', 129);
        for (size_t m = 0; m < SP_ARRAY_SIZE(maps); m++) {
                cp_sandbox_create_req r;
                char want[128];
                json_object *const *got = m == 0 ? &r.env : m == 1 ? &r.metadata : &r.labels;

                _cleanup_free_ char *full = map_body(maps[m], 64, "K", v4096);
                expect_ok(&D_CREATE, full, &r);
                ck_assert_int_eq(json_object_object_length(*got), 64);
                cp_sandbox_create_req_free(&r);

                _cleanup_free_ char *over = map_body(maps[m], 65, "K", "v");
                snprintf(want, sizeof(want), "%s must have at most 64 entries", maps[m]);
                expect_fail(&D_CREATE, over, want);

                _cleanup_free_ char *long_value = map_body(maps[m], 1, "K", v4097);
                snprintf(want, sizeof(want), "%s.K0 must be at most 4096 bytes long", maps[m]);
                expect_fail(&D_CREATE, long_value, want);

                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                sp_buf_appendf(&b, NULL, "{\"template\":\"b\",\"%s\":{\"%s\":\"x\"}}", maps[m], k128);
                expect_ok(&D_CREATE, b.data, &r);
                cp_sandbox_create_req_free(&r);
                sp_buf_clear(&b);
                sp_buf_appendf(&b, NULL, "{\"template\":\"b\",\"%s\":{\"%s\":\"x\"}}", maps[m], k129);
                snprintf(want, sizeof(want), "%s key '", maps[m]);
                expect_fail(&D_CREATE, b.data, want);

                const char *bad_keys[] = {"", "a b", "a=b", "a\\nb", "\\u00e9", "-a"};
                for (size_t k = 0; k < SP_ARRAY_SIZE(bad_keys); k++) {
                        sp_buf_clear(&b);
                        sp_buf_appendf(&b, NULL, "{\"template\":\"b\",\"%s\":{\"%s\":\"x\"}}", maps[m], bad_keys[k]);
                        expect_fail(&D_CREATE, b.data, want);
                }
                const char *bad_values[] = {"1", "null", "true", "{}", "[\"x\"]"};
                for (size_t k = 0; k < SP_ARRAY_SIZE(bad_values); k++) {
                        sp_buf_clear(&b);
                        sp_buf_appendf(&b, NULL, "{\"template\":\"b\",\"%s\":{\"K\":%s}}", maps[m], bad_values[k]);
                        snprintf(want, sizeof(want), "%s.K must be a string", maps[m]);
                        expect_fail(&D_CREATE, b.data, want);
                }
                sp_buf_clear(&b);
                sp_buf_appendf(&b, NULL, "{\"template\":\"b\",\"%s\":{\"K\":\"a\\u0000b\"}}", maps[m]);
                snprintf(want, sizeof(want), "%s.K must not contain NUL", maps[m]);
                expect_fail(&D_CREATE, b.data, want);
                const char *not_maps[] = {"[]", "\"a=b\"", "1"};
                for (size_t k = 0; k < SP_ARRAY_SIZE(not_maps); k++) {
                        sp_buf_clear(&b);
                        sp_buf_appendf(&b, NULL, "{\"template\":\"b\",\"%s\":%s}", maps[m], not_maps[k]);
                        snprintf(want, sizeof(want), "%s must be an object of strings", maps[m]);
                        expect_fail(&D_CREATE, b.data, want);
                }
        }
        /* Keys that only some maps take. */
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"env\":{\"1X\":\"v\"}}", "env key '1X'");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"env\":{\"a.b\":\"v\"}}", "env key 'a.b'");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"metadata\":{\"_x\":\"v\"}}", "metadata key '_x'");
        cp_sandbox_create_req r;
        expect_ok(&D_CREATE, "{\"template\":\"b\",\"env\":{\"_x\":\"v\"},\"metadata\":{\"1x/y:z\":\"v\"}}", &r);
        cp_sandbox_create_req_free(&r);
}
END_TEST

START_TEST(duplicate_keys_and_nul_keys_are_refused)
{
        /* json-c would keep the last of repeated keys and cut a key at a NUL:
         * both are refused, naming the field. */
        expect_fail(&D_CREATE, "{\"template\":\"first\",\"template\":\"second\"}", "duplicate key \"template\"");
        expect_fail(&D_CREATE, "{\"template\":\"ok\",\"resources\":{\"pids\":100,\"pids\":1}}",
                    "duplicate key \"pids\" in resources");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"metadata\":{\"x\":\"1\",\"x\":\"2\"}}",
                    "duplicate key \"x\" in metadata");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"env\":{\"PATH\\u0000X\":\"/evil\"}}",
                    "NUL character (\\u0000) in a key in env");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"metadata\":{\"owner\\u0000\":\"v\"}}",
                    "NUL character (\\u0000) in a key in metadata");
}
END_TEST

/* ---- POST /v1/sandboxes/{id}/timeout ---- */

START_TEST(timeout_request)
{
        cp_timeout_req t;
        expect_ok(&D_TIMEOUT, "{\"timeout_s\":0}", &t);
        ck_assert_int_eq(t.timeout_s, 0);
        ck_assert_str_eq(t.end_action, "");
        expect_ok(&D_TIMEOUT, "{\"timeout_s\":2592000,\"end_action\":\"suspend\"}", &t);
        ck_assert_int_eq(t.timeout_s, 2592000);
        ck_assert_str_eq(t.end_action, "suspend");
        expect_ok(&D_TIMEOUT, "{\"timeout_s\":1,\"end_action\":\"kill\"}", &t);
        ck_assert_str_eq(t.end_action, "kill");
        expect_fail(&D_TIMEOUT, "{}", "timeout_s is required");
        expect_fail(&D_TIMEOUT, "{\"end_action\":\"kill\"}", "timeout_s is required");
        expect_fail(&D_TIMEOUT, "{\"timeout_s\":-1}", "timeout_s must be between 0 and 2592000");
        expect_fail(&D_TIMEOUT, "{\"timeout_s\":2592001}", "timeout_s must be between 0 and 2592000");
        expect_fail(&D_TIMEOUT, "{\"timeout_s\":\"60\"}", "timeout_s must be an integer");
        expect_fail(&D_TIMEOUT, "{\"timeout_s\":60,\"end_action\":\"pause\"}", "end_action must be kill or suspend");
}
END_TEST

/* ---- PUT /v1/sandboxes/{id}/ingress ---- */

START_TEST(sandbox_ingress_request)
{
        cp_sandbox_ingress_req r;
        expect_ok(&D_INGRESS, "{\"mode\":\"public\"}", &r);
        ck_assert_str_eq(r.mode, "public");
        ck_assert_int_eq(r.auto_resume, -1); /* left as it is */
        expect_ok(&D_INGRESS, "{\"auto_resume\":true}", &r);
        ck_assert_str_eq(r.mode, "");
        ck_assert_int_eq(r.auto_resume, 1);
        expect_ok(&D_INGRESS, "{\"mode\":\"token\",\"auto_resume\":false}", &r);
        ck_assert_str_eq(r.mode, "token");
        ck_assert_int_eq(r.auto_resume, 0);
        expect_fail(&D_INGRESS, "{}", "mode or auto_resume is required");
        expect_fail(&D_INGRESS, "{\"mode\":null,\"auto_resume\":null}", "mode or auto_resume is required");
        expect_fail(&D_INGRESS, "{\"auto_resume\":\"yes\"}", "auto_resume must be true or false");
        expect_fail(&D_INGRESS, "{\"mode\":\"open\"}", "mode must be token or public");

        cp_sandbox_create_req c;
        expect_ok(&D_CREATE, "{\"template\":\"base\"}", &c);
        ck_assert(!c.auto_resume);
        cp_sandbox_create_req_free(&c);
        expect_ok(&D_CREATE, "{\"template\":\"base\",\"auto_resume\":true,\"ingress\":\"public\"}", &c);
        ck_assert(c.auto_resume);
        ck_assert_str_eq(c.ingress, "public");
        cp_sandbox_create_req_free(&c);
        expect_fail(&D_CREATE, "{\"template\":\"base\",\"auto_resume\":1}", "auto_resume must be true or false");
}
END_TEST

/* ---- POST /v1/templates, /warm ---- */

START_TEST(template_create_sources)
{
        cp_template_create_req t;
        expect_ok(&D_TEMPLATE, "{\"name\":\"py\",\"source\":\"dir\",\"path\":\"/srv/images/py\"}", &t);
        ck_assert_str_eq(t.name, "py");
        ck_assert_str_eq(t.source, "dir");
        ck_assert_str_eq(t.path, "/srv/images/py");
        ck_assert_ptr_null(t.suite);
        ck_assert_ptr_null(t.mirror);
        ck_assert_int_eq(t.warm, 0);
        cp_template_create_req_free(&t);
        ck_assert_ptr_null(t.path);
        cp_template_create_req_free(NULL);

        expect_ok(&D_TEMPLATE, "{\"name\":\"py\",\"source\":\"oci\",\"path\":\"/srv/oci/py\",\"warm\":64}", &t);
        ck_assert_int_eq(t.warm, 64);
        cp_template_create_req_free(&t);
        expect_ok(&D_TEMPLATE,
                  "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\","
                  "\"mirror\":\"http://127.0.0.1:3142/debian\",\"warm\":0}",
                  &t);
        ck_assert_str_eq(t.suite, "bookworm");
        ck_assert_str_eq(t.mirror, "http://127.0.0.1:3142/debian");
        ck_assert_ptr_null(t.path);
        cp_template_create_req_free(&t);
        expect_ok(&D_TEMPLATE, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"stable\"}", &t);
        ck_assert_ptr_null(t.mirror);
        cp_template_create_req_free(&t);
        /* Packages and a user: debootstrap only, each name checked as the workers do. */
        expect_ok(&D_TEMPLATE,
                  "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"bookworm\","
                  "\"packages\":[\"python3\",\"python3-pip\",\"g++\",\"libc6.1-dev\"],\"user\":\"user\"}",
                  &t);
        ck_assert_str_eq(t.packages, "python3,python3-pip,g++,libc6.1-dev");
        ck_assert_str_eq(t.user, "user");
        cp_template_create_req_free(&t);
        ck_assert_ptr_null(t.packages);
        ck_assert_ptr_null(t.user);
        static const char *const bad_packages[] = {
                "[]",       "\"git\"",   "[1]",        "[\"Git\"]", "[\"a\"]", "[\"git,curl\"]", "[\"git curl\"]",
                "[\"-x\"]", "[\"a_b\"]", "[\"$(id)\"]"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_packages); i++) {
                char body[200];
                snprintf(body, sizeof(body),
                         "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"sid\",\"packages\":%s}",
                         bad_packages[i]);
                expect_fail(&D_TEMPLATE, body, "packages");
        }
        static const char *const bad_users[] = {
                "\"\"", "\"root\"", "\"User\"", "\"1u\"", "\"u;id\"", "1", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\""};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_users); i++) {
                char body[200];
                snprintf(body, sizeof(body),
                         "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"sid\",\"user\":%s}", bad_users[i]);
                expect_fail(&D_TEMPLATE, body, "user");
        }
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"/a\",\"packages\":[\"git\"]}",
                    "packages is only used with source debootstrap");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"upload\",\"format\":\"tar\",\"user\":\"u\"}",
                    "user is not used with source upload");
        /* 129 names */
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        sp_buf_appendf(&many, NULL, "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"sid\",\"packages\":[");
        for (int i = 0; i < 129; i++)
                sp_buf_appendf(&many, NULL, "%s\"p%d\"", i ? "," : "", i);
        sp_buf_appendf(&many, NULL, "]}");
        expect_fail(&D_TEMPLATE, many.data, "packages must be an array of 1 to 128");

        expect_fail(&D_TEMPLATE, "{\"source\":\"dir\",\"path\":\"/a\"}", "name is required");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"path\":\"/a\"}", "source is required");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"git\",\"path\":\"/a\"}",
                    "source must be dir, tar, oci, debootstrap or upload");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"tar\"}", "path is required with source tar");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"debootstrap\"}",
                    "suite is required with source debootstrap");
        /* As the workers take it: no '.', so no "..", and nothing the API takes that they refuse. */
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"bookworm.1\"}",
                    "suite must be a suite name of a-z, 0-9 and '-'");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"sid\",\"path\":\"/a\"}",
                    "path is not used with source debootstrap");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"/a\",\"suite\":\"sid\"}",
                    "suite is only used with source debootstrap");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"/a\",\"mirror\":\"http://m\"}",
                    "mirror is only used with source debootstrap");
        expect_fail(&D_TEMPLATE, "{\"name\":\"../x\",\"source\":\"dir\",\"path\":\"/a\"}", "name must be 1 to 128");

        /* Host-path sources (the handler keeps them for admins), and an admin's tenant_id. */
        expect_ok(&D_TEMPLATE,
                  "{\"name\":\"py\",\"source\":\"tar\",\"path\":\"/a\",\"tenant_id\":\"ten_k3v9w0q8e2m5t7z1c4h6\"}",
                  &t);
        ck_assert_str_eq(t.tenant_id, "ten_k3v9w0q8e2m5t7z1c4h6");
        ck_assert(cp_req_template_host_path(&t));
        cp_template_create_req_free(&t);
        expect_ok(&D_TEMPLATE, "{\"name\":\"deb\",\"source\":\"debootstrap\",\"suite\":\"stable\"}", &t);
        ck_assert_str_eq(t.tenant_id, "");
        ck_assert(!cp_req_template_host_path(&t));
        cp_template_create_req_free(&t);
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"/a\",\"tenant_id\":\"key_x\"}",
                    "tenant_id must be a tenant id");

        /* Uploads: a format, nothing on the hosts. */
        expect_ok(&D_TEMPLATE, "{\"name\":\"py\",\"source\":\"upload\",\"format\":\"oci\",\"warm\":1}", &t);
        ck_assert_str_eq(t.source, "upload");
        ck_assert_str_eq(t.format, "oci");
        ck_assert(!cp_req_template_host_path(&t));
        cp_template_create_req_free(&t);
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"upload\"}", "format is required with source upload");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"upload\",\"format\":\"zip\"}",
                    "format must be tar or oci");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"upload\",\"format\":\"tar\",\"path\":\"/a\"}",
                    "path is not used with source upload");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"tar\",\"path\":\"/a\",\"format\":\"tar\"}",
                    "format is only used with source upload");
}
END_TEST

START_TEST(template_create_fields)
{
        const char *bad_paths[] = {"relative/p", "",       "/a/../b",   "/a/./b",    "/..",
                                   "/a//b",      "/a\\nb", "/a\\u0001", "/a\\u007f", "/a\\u0000b"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_paths); i++) {
                char body[128];
                snprintf(body, sizeof(body), "{\"name\":\"x\",\"source\":\"tar\",\"path\":\"%s\"}", bad_paths[i]);
                expect_fail(&D_TEMPLATE, body, "path must");
        }
        cp_template_create_req t;
        const char *ok_paths[] = {"/", "/a", "/a/b/", "/srv/i m\\u00e4ges/py.tar.zst", "/a/.hidden/..b"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok_paths); i++) {
                char body[128];
                snprintf(body, sizeof(body), "{\"name\":\"x\",\"source\":\"tar\",\"path\":\"%s\"}", ok_paths[i]);
                expect_ok(&D_TEMPLATE, body, &t);
                cp_template_create_req_free(&t);
        }
        _cleanup_free_ char *p4095 = repeat('p', 4095), *p4096 = repeat('p', 4096);
        p4095[0] = p4096[0] = '/';
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_buf_appendf(&b, NULL, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"%s\"}", p4095);
        expect_ok(&D_TEMPLATE, b.data, &t);
        ck_assert_uint_eq(strlen(t.path), 4095);
        cp_template_create_req_free(&t);
        sp_buf_clear(&b);
        sp_buf_appendf(&b, NULL, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"%s\"}", p4096);
        expect_fail(&D_TEMPLATE, b.data, "path must be at most 4095 bytes");

        const char *bad_suites[] = {"", "Bookworm", "-x", "a b", "a/b"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_suites); i++) {
                char body[128];
                snprintf(body, sizeof(body), "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"%s\"}",
                         bad_suites[i]);
                expect_fail(&D_TEMPLATE, body, "suite must be a suite name");
        }
        const char *bad_mirrors[] = {"ftp://m", "http://", "https:///x", "http://a b", "m", "http://a\\u00e9"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_mirrors); i++) {
                char body[160];
                snprintf(body, sizeof(body),
                         "{\"name\":\"x\",\"source\":\"debootstrap\",\"suite\":\"sid\",\"mirror\":\"%s\"}",
                         bad_mirrors[i]);
                expect_fail(&D_TEMPLATE, body, "mirror must be an http:// or https:// URL");
        }
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"/a\",\"warm\":65}",
                    "warm must be between 0 and 64");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"dir\",\"path\":\"/a\",\"warm\":-1}",
                    "warm must be between 0 and 64");
        expect_fail(&D_TEMPLATE, "{\"name\":\"x\",\"source\":\"dir\",\"path\":7}", "path must be a string");
}
END_TEST

START_TEST(warm_request)
{
        int64_t w = -1;
        expect_ok(&D_WARM, "{\"warm\":0}", &w);
        ck_assert_int_eq(w, 0);
        expect_ok(&D_WARM, "{\"warm\":64}", &w);
        ck_assert_int_eq(w, 64);
        expect_fail(&D_WARM, "{}", "warm is required");
        expect_fail(&D_WARM, "{\"warm\":null}", "warm is required");
        expect_fail(&D_WARM, "{\"warm\":-1}", "warm must be between 0 and 64");
        expect_fail(&D_WARM, "{\"warm\":65}", "warm must be between 0 and 64");
        expect_fail(&D_WARM, "{\"warm\":1.5}", "warm must be an integer");
        expect_fail(&D_WARM, "{\"warm\":\"2\"}", "warm must be an integer");
}
END_TEST

/* ---- tenants, keys, join tokens ---- */

START_TEST(tenant_and_key_requests)
{
        cp_named_req n;
        expect_ok(&D_TENANT, "{\"name\":\"acme\"}", &n);
        ck_assert_str_eq(n.name, "acme");
        ck_assert(!n.admin);
        ck_assert_str_eq(n.tenant_id, "");
        expect_fail(&D_TENANT, "{}", "name is required");
        expect_fail(&D_TENANT, "{\"name\":\"acme corp\"}", "name must be 1 to 128");
        expect_fail(&D_TENANT, "{\"name\":\"acme\",\"admin\":true}", "unknown field 'admin'");

        expect_ok(&D_KEY, "{\"name\":\"ci\"}", &n);
        ck_assert_str_eq(n.name, "ci");
        ck_assert(!n.admin);
        ck_assert_str_eq(n.tenant_id, "");
        char tenant[SP_ID_MAX], body[160];
        sp_test_ok(sp_id_new("ten", tenant, NULL), NULL);
        snprintf(body, sizeof(body), "{\"name\":\"ops\",\"admin\":true,\"tenant_id\":\"%s\"}", tenant);
        expect_ok(&D_KEY, body, &n);
        ck_assert(n.admin);
        ck_assert_str_eq(n.tenant_id, tenant);
        expect_ok(&D_KEY, "{\"name\":\"ops\",\"admin\":false,\"tenant_id\":null}", &n);
        ck_assert(!n.admin);

        char sbx[SP_ID_MAX];
        sp_test_ok(sp_id_new("sbx", sbx, NULL), NULL);
        snprintf(body, sizeof(body), "{\"name\":\"ops\",\"tenant_id\":\"%s\"}", sbx);
        expect_fail(&D_KEY, body, "tenant_id must be a tenant id");
        const char *bad_tenants[] = {"\"\"", "\"ten_\"", "\"ten_x\"", "\"ten_k3v9w0q8e2m5t7z1c4h6x\"", "7"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_tenants); i++) {
                snprintf(body, sizeof(body), "{\"name\":\"ops\",\"tenant_id\":%s}", bad_tenants[i]);
                expect_fail(&D_KEY, body, "tenant_id must be");
        }
        expect_fail(&D_KEY, "{\"name\":\"ops\",\"admin\":\"yes\"}", "admin must be true or false");
        expect_fail(&D_KEY, "{\"name\":\"ops\",\"admin\":1}", "admin must be true or false");
        expect_fail(&D_KEY, "{\"admin\":true}", "name is required");
}
END_TEST

START_TEST(join_token_request)
{
        cp_join_token_req j;
        expect_ok(&D_JOIN, "{}", &j);
        ck_assert_str_eq(j.description, "");
        ck_assert_int_eq(j.ttl_s, 3600);
        ck_assert_int_eq(j.uses, 1);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(cp_req_join_token("", 0, &j, &e), 0); /* an empty body is {} */
        ck_assert_int_eq(j.ttl_s, 3600);

        expect_ok(&D_JOIN, "{\"description\":\"rack 4 \\u2014 n\\u00f8de\",\"ttl_s\":60,\"uses\":0}", &j);
        ck_assert_str_eq(j.description, "rack 4 \xe2\x80\x94 n\xc3\xb8"
                                        "de");
        ck_assert_int_eq(j.ttl_s, 60);
        ck_assert_int_eq(j.uses, 0);
        expect_ok(&D_JOIN, "{\"ttl_s\":2592000,\"uses\":1000}", &j);
        ck_assert_int_eq(j.ttl_s, 2592000);
        ck_assert_int_eq(j.uses, 1000);

        expect_fail(&D_JOIN, "{\"ttl_s\":59}", "ttl_s must be between 60 and 2592000");
        expect_fail(&D_JOIN, "{\"ttl_s\":2592001}", "ttl_s must be between 60 and 2592000");
        expect_fail(&D_JOIN, "{\"uses\":-1}", "uses must be between 0 and 1000");
        expect_fail(&D_JOIN, "{\"uses\":1001}", "uses must be between 0 and 1000");
        expect_fail(&D_JOIN, "{\"description\":\"a\\nb\"}", "description must not contain control characters");
        expect_fail(&D_JOIN, "{\"description\":\"a\\u007f\"}", "description must not contain control characters");
        expect_fail(&D_JOIN, "{\"description\":false}", "description must be a string");
        _cleanup_free_ char *d128 = repeat('d', 128), *d129 = repeat('d', 129);
        char body[200];
        snprintf(body, sizeof(body), "{\"description\":\"%s\"}", d128);
        expect_ok(&D_JOIN, body, &j);
        ck_assert_str_eq(j.description, d128);
        snprintf(body, sizeof(body), "{\"description\":\"%s\"}", d129);
        expect_fail(&D_JOIN, body, "description must be at most 128 bytes");
}
END_TEST

/* ---- cursors ---- */

static char *cursor_of(const char *raw)
{
        sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(sp_base64_encode(&b, raw, strlen(raw), 1, NULL), 0);
        return sp_buf_steal(&b);
}

static void expect_bad_cursor(const char *cursor)
{
        char ts[40] = "x", id[32] = "x";
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(cp_cursor_decode(cursor, ts, sizeof(ts), id, sizeof(id), &e) == -SP_E_INVALID, "'%s' accepted",
                      cursor ? cursor : "(null)");
        ck_assert_str_eq(e->message, "cursor is malformed");
        ck_assert_str_eq(ts, "");
        ck_assert_str_eq(id, "");
}

START_TEST(cursor_round_trip)
{
        const char *stamps[] = {
                "2024-05-01T12:00:00.123456Z",        "2024-05-01 12:00:00.123456+00", "1999-12-31T23:59:60Z",
                "2024-02-29T00:00:00+05:30",          "2024-02-29T00:00:00-08",        "2024-02-29T00:00:00",
                "2024-02-29T00:00:00.123456789+14:00"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(stamps); i++) {
                char id[SP_ID_MAX], cursor[128], ts[40], got_id[32];
                sp_test_ok(sp_id_new("sbx", id, NULL), NULL);
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(cp_cursor_encode(stamps[i], id, cursor, sizeof(cursor), &e) == 0, "%s: %s", stamps[i],
                              e ? e->message : "");
                ck_assert_msg(strspn(cursor, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
                                      strlen(cursor),
                              "not unpadded base64url: %s", cursor);
                ck_assert_int_eq(cp_cursor_decode(cursor, ts, sizeof(ts), got_id, sizeof(got_id), &e), 0);
                ck_assert_str_eq(ts, stamps[i]);
                ck_assert_str_eq(got_id, id);

                /* The list query decodes it the same way. */
                cp_list_query q;
                ck_assert_int_eq(cp_req_list_query(NULL, NULL, NULL, cursor, &q, &e), 0);
                ck_assert(q.has_cursor);
                ck_assert_str_eq(q.cursor_created_at, stamps[i]);
                ck_assert_str_eq(q.cursor_id, id);

                /* Buffers one byte too small fail and come back empty. */
                size_t need = strlen(cursor) + 1;
                char small[128] = "x";
                ck_assert_int_eq(cp_cursor_encode(stamps[i], id, small, need - 1, &e), -SP_E_INVALID);
                ck_assert_str_eq(small, "");
                sp_error_freep(&e);
                ck_assert_int_eq(cp_cursor_encode(stamps[i], id, small, need, &e), 0);
                ck_assert_int_eq(cp_cursor_decode(cursor, ts, strlen(stamps[i]), got_id, sizeof(got_id), &e),
                                 -SP_E_INVALID);
                ck_assert_str_eq(ts, "");
                sp_error_freep(&e);
                ck_assert_int_eq(cp_cursor_decode(cursor, ts, sizeof(ts), got_id, strlen(id), &e), -SP_E_INVALID);
                ck_assert_str_eq(got_id, "");
        }
}
END_TEST

START_TEST(cursor_encode_refuses_bad_values)
{
        char id[SP_ID_MAX], out[128];
        sp_test_ok(sp_id_new("sbx", id, NULL), NULL);
        const char *bad_ts[] = {"",
                                "yesterday",
                                "2024-05-01",
                                "2024-13-01T00:00:00Z",
                                "2024-00-01T00:00:00Z",
                                "2024-05-32T00:00:00Z",
                                "2024-05-01T24:00:00Z",
                                "2024-05-01T12:60:00Z",
                                "2024-05-01T12:00:61Z",
                                "2024-05-01T12:00:00.Z",
                                "2024-05-01T12:00:00.1234567890Z",
                                "2024-05-01T12:00:00Z ",
                                "2024-05-01T12:00:00+5",
                                "2024-05-01T12:00:00+05:3",
                                "2024-05-01T12:00:00+25:00",
                                "2024-05-01T12:00:00|x",
                                "2024-05-01x12:00:00Z",
                                "2024-05-01T12:00:00.123456+00:00:00",
                                "+024-05-01T12:00:00Z"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_ts); i++) {
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(cp_cursor_encode(bad_ts[i], id, out, sizeof(out), &e) == -SP_E_INVALID, "'%s' accepted",
                              bad_ts[i]);
                ck_assert(strstr(e->message, "timestamp"));
        }
        char ten[SP_ID_MAX];
        sp_test_ok(sp_id_new("ten", ten, NULL), NULL);
        const char *bad_ids[] = {"", "sbx_", ten, "sbx_k3v9w0q8e2m5t7z1c4h6|x", "SBX_K3V9W0Q8E2M5T7Z1C4H6"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_ids); i++) {
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(cp_cursor_encode("2024-05-01T12:00:00Z", bad_ids[i], out, sizeof(out), &e) ==
                                      -SP_E_INVALID,
                              "'%s' accepted", bad_ids[i]);
                ck_assert(strstr(e->message, "sandbox id"));
        }
        ck_assert_int_eq(cp_cursor_encode(NULL, id, out, sizeof(out), NULL), -SP_E_INVALID);
        ck_assert_int_eq(cp_cursor_encode("2024-05-01T12:00:00Z", NULL, out, sizeof(out), NULL), -SP_E_INVALID);
}
END_TEST

START_TEST(cursor_decode_refuses_garbage)
{
        char id[SP_ID_MAX];
        sp_test_ok(sp_id_new("sbx", id, NULL), NULL);
        expect_bad_cursor(NULL);
        expect_bad_cursor("");
        expect_bad_cursor("!!!!");
        expect_bad_cursor("A");
        expect_bad_cursor("a+b/"); /* standard alphabet, not URL-safe */
        char raw[256];
        const char *bad_raw[] = {"no bar at all",
                                 "|",
                                 "2024-05-01T12:00:00Z|",
                                 "|sbx_k3v9w0q8e2m5t7z1c4h6",
                                 "2024-05-01T12:00:00Z|ten_k3v9w0q8e2m5t7z1c4h6",
                                 "2024-13-01T12:00:00Z|%s",
                                 "2024-05-01T12:00:00Z|%s|x",
                                 "2024-05-01T12:00:00Z||%s",
                                 "x|%s"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_raw); i++) {
                snprintf(raw, sizeof(raw), bad_raw[i], id);
                _cleanup_free_ char *c = cursor_of(raw);
                expect_bad_cursor(c);
        }
        /* A NUL inside the decoded bytes. */
        {
                char with_nul[64];
                int n = snprintf(with_nul, sizeof(with_nul), "2024-05-01T12:00:00Z|%s", id);
                with_nul[5] = '\0';
                _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                ck_assert_int_eq(sp_base64_encode(&b, with_nul, (size_t)n, 1, NULL), 0);
                expect_bad_cursor(b.data);
        }
        /* Padded, or with non-canonical trailing bits: there is one spelling per cursor. */
        const char *stamps[] = {"2024-05-01T12:00:00Z", "2024-05-01T12:00:00.1Z", "2024-05-01T12:00:00.123Z"};
        size_t padded_tried = 0;
        for (size_t i = 0; i < SP_ARRAY_SIZE(stamps); i++) {
                snprintf(raw, sizeof(raw), "%s|%s", stamps[i], id);
                _cleanup_free_ char *c = cursor_of(raw);
                size_t n = strlen(c);
                if (n % 4) {
                        _cleanup_free_ char *padded = malloc(n + 4);
                        snprintf(padded, n + 4, "%s%.*s", c, (int)(4 - n % 4), "===");
                        expect_bad_cursor(padded);
                        padded_tried++;
                }
                _cleanup_free_ char *twisted = strdup(c);
                twisted[n - 1] = twisted[n - 1] == 'A' ? 'B' : 'A';
                char ts[40], got[32];
                int r = cp_cursor_decode(twisted, ts, sizeof(ts), got, sizeof(got), NULL);
                ck_assert_msg(r < 0 || strcmp(got, id) != 0, "changed cursor decoded to the same id");
        }
        ck_assert_uint_eq(padded_tried, 2);
        /* Longer than any cursor we hand out. */
        _cleanup_free_ char *long_cursor = repeat('A', 129);
        expect_bad_cursor(long_cursor);
        _cleanup_free_ char *huge = repeat('A', 1 << 20);
        expect_bad_cursor(huge);

        /* Random strings over the cursor alphabet never decode to something
         * that does not encode back to the same cursor. */
        unsigned seed = 12345;
        const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_=|+/ ";
        size_t alen = strlen(alphabet);
        for (int i = 0; i < 20000; i++) {
                char c[100];
                seed = seed * 1103515245u + 12345u;
                size_t n = 1 + (seed >> 16) % (sizeof(c) - 1);
                for (size_t k = 0; k < n; k++) {
                        seed = seed * 1103515245u + 12345u;
                        c[k] = alphabet[(seed >> 16) % alen];
                }
                c[n] = '\0';
                char ts[40], got[32], again[128];
                if (cp_cursor_decode(c, ts, sizeof(ts), got, sizeof(got), NULL) == 0) {
                        ck_assert_int_eq(cp_cursor_encode(ts, got, again, sizeof(again), NULL), 0);
                        ck_assert_str_eq(again, c);
                }
        }
}
END_TEST

/* ---- query parameters ---- */

START_TEST(list_query)
{
        cp_list_query q;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(cp_req_list_query(NULL, NULL, NULL, NULL, &q, &e), 0);
        ck_assert_str_eq(q.state, "");
        ck_assert_str_eq(q.template_name, "");
        ck_assert_int_eq(q.limit, 100);
        ck_assert(!q.has_cursor);
        ck_assert_int_eq(cp_req_list_query("", "", "", "", &q, &e), 0); /* empty values: absent */
        ck_assert_int_eq(q.limit, 100);
        ck_assert(!q.has_cursor);

        ck_assert_int_eq(cp_req_list_query("suspended", "py-3.12", "1", NULL, &q, &e), 0);
        ck_assert_str_eq(q.state, "suspended");
        ck_assert_str_eq(q.template_name, "py-3.12");
        ck_assert_int_eq(q.limit, 1);
        ck_assert_int_eq(cp_req_list_query(NULL, NULL, "1000", NULL, &q, &e), 0);
        ck_assert_int_eq(q.limit, 1000);
        ck_assert_int_eq(cp_req_list_query(NULL, NULL, "0050", NULL, &q, &e), 0);
        ck_assert_int_eq(q.limit, 50);

        const char *bad_limits[] = {
                "0", "1001", "-1", "+5", "1e2", " 5", "5 ", "abc", "10000", "99999999999999999999", "5.0", "0x10"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_limits); i++) {
                sp_error_freep(&e);
                memset(&q, 0xa5, sizeof(q));
                ck_assert_msg(cp_req_list_query(NULL, NULL, bad_limits[i], NULL, &q, &e) == -SP_E_INVALID, "%s",
                              bad_limits[i]);
                ck_assert_str_eq(e->message, "limit must be between 1 and 1000");
                ck_assert(all_zero(&q, sizeof(q)));
        }
        sp_error_freep(&e);
        ck_assert_int_eq(cp_req_list_query("Running", NULL, NULL, NULL, &q, &e), -SP_E_INVALID);
        ck_assert_str_eq(e->message, "state must be creating, running, paused, suspending, suspended, restoring, "
                                     "stopped, deleting, deleted or failed");
        sp_error_freep(&e);
        ck_assert_int_eq(cp_req_list_query(NULL, "../etc", NULL, NULL, &q, &e), -SP_E_INVALID);
        ck_assert(strstr(e->message, "template must be"));
        sp_error_freep(&e);
        _cleanup_free_ char *n129 = repeat('n', 129);
        ck_assert_int_eq(cp_req_list_query(NULL, n129, NULL, NULL, &q, &e), -SP_E_INVALID);
        sp_error_freep(&e);
        ck_assert_int_eq(cp_req_list_query(NULL, NULL, NULL, "garbage!", &q, &e), -SP_E_INVALID);
        ck_assert_str_eq(e->message, "cursor is malformed");
        ck_assert(all_zero(&q, sizeof(q)));
}
END_TEST

START_TEST(wait_parameter)
{
        static const struct {
                const char *in;
                int64_t ms;
        } ok[] = {{NULL, 0},        {"", 0},
                  {"0", 0},         {"0.5", 500},
                  {"1", 1000},      {"60", 60000},
                  {"60.0", 60000},  {"60.000000", 60000},
                  {"1.2345", 1234}, {"59.999999", 59999},
                  {"05", 5000},     {"0.001", 1},
                  {"0.0009", 0}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ok); i++) {
                int64_t ms = -1;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(cp_req_wait(ok[i].in, &ms, &e) == 0, "%s: %s", ok[i].in, e ? e->message : "");
                ck_assert_int_eq(ms, ok[i].ms);
        }
        const char *bad[] = {"-1",  "+1",   "1e1", " 1",        "1 ",  "1.",  ".5",  "abc", "0.1234567",
                             "100", "60.5", "61",  "60.000001", "inf", "nan", "0x1", "1,5", "1..2"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                int64_t ms = -1;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_msg(cp_req_wait(bad[i], &ms, &e) == -SP_E_INVALID, "'%s' accepted", bad[i]);
                ck_assert_str_eq(e->message, "wait must be a number of seconds between 0 and 60");
                ck_assert_int_eq(ms, 0);
        }
}
END_TEST

START_TEST(idempotency_key_and_states)
{
        ck_assert(cp_req_idempotency_key_valid("a"));
        ck_assert(cp_req_idempotency_key_valid("retry 1: create/py~!@#$%^&*()"));
        _cleanup_free_ char *k255 = repeat('k', 255), *k256 = repeat('k', 256);
        ck_assert(cp_req_idempotency_key_valid(k255));
        ck_assert(!cp_req_idempotency_key_valid(k256));
        const char *bad[] = {"", " a", "a ", "a\tb", "a\nb", "a\x7f", "\xc3\xa9", "a\x01"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++)
                ck_assert_msg(!cp_req_idempotency_key_valid(bad[i]), "'%s' accepted", bad[i]);
        ck_assert(!cp_req_idempotency_key_valid(NULL));

        const char *states[] = {"creating",  "running", "paused",   "suspending", "suspended",
                                "restoring", "stopped", "deleting", "deleted",    "failed"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(states); i++)
                ck_assert(cp_sandbox_state_valid(states[i]));
        const char *not_states[] = {"", "Running", "run", "running ", "pending"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(not_states); i++)
                ck_assert(!cp_sandbox_state_valid(not_states[i]));
        ck_assert(!cp_sandbox_state_valid(NULL));
}
END_TEST

/* ---- secrets ---- */

START_TEST(secret_create_request)
{
        cp_secret_create_req r;
        expect_ok(&D_SECRET,
                  "{\"name\":\"open-ai_2\",\"value\":\"sk-live\\t1\",\"hosts\":[\"API.OpenAI.com.\",\"*.Example.org\"],"
                  "\"inject\":{\"header\":\"Authorization\",\"format\":\"Bearer {{secret}}\"},\"rate_per_min\":60,"
                  "\"expires_at\":\"2030-01-31T12:00:00.5+02:00\"}",
                  &r);
        ck_assert_str_eq(r.name, "open-ai_2");
        ck_assert_str_eq(r.env, "OPEN_AI_2");
        ck_assert_str_eq(json_object_to_json_string_ext(r.hosts, JSON_C_TO_STRING_PLAIN),
                         "[\"api.openai.com\",\"*.example.org\"]");
        ck_assert_str_eq(json_object_to_json_string_ext(r.inject, JSON_C_TO_STRING_PLAIN),
                         "{\"header\":\"Authorization\",\"format\":\"Bearer {{secret}}\"}");
        ck_assert_uint_eq(r.value_len, 9);
        ck_assert_str_eq(r.value, "sk-live\t1");
        ck_assert_int_eq(r.rate_per_min, 60);
        ck_assert_str_eq(r.expires_at, "2030-01-31T12:00:00.5+02:00");
        cp_secret_create_req_free(&r);
        ck_assert_ptr_null(r.value);

        expect_ok(&D_SECRET,
                  "{\"name\":\"gh\",\"value\":\"ghp_x\",\"hosts\":[\"github.com\"],\"inject\":{\"basic\":{}},"
                  "\"env\":\"GH_TOKEN\",\"expires_at\":null}",
                  &r);
        ck_assert_str_eq(r.env, "GH_TOKEN");
        ck_assert_str_eq(r.expires_at, "");
        ck_assert_int_eq(r.rate_per_min, 0);
        cp_secret_create_req_free(&r);

        /* What is missing or wrong is named. */
        expect_fail(&D_SECRET, "{\"value\":\"x\",\"hosts\":[\"a.com\"],\"inject\":{\"header\":\"X\"}}",
                    "name is required");
        expect_fail(&D_SECRET, "{\"name\":\"a\",\"hosts\":[\"a.com\"],\"inject\":{\"header\":\"X\"}}",
                    "value is required");
        expect_fail(&D_SECRET, "{\"name\":\"a\",\"value\":\"x\",\"inject\":{\"header\":\"X\"}}", "hosts is required");
        expect_fail(&D_SECRET, "{\"name\":\"a\",\"value\":\"x\",\"hosts\":[\"a.com\"]}", "inject is required");
        const char *const bad[][3] = {
                {"name", "\"Open\"", "name must be a secret's name"},
                {"name", "\"1a\"", "name must be a secret's name"},
                {"name", "\"a.b\"", "name must be a secret's name"},
                {"name", "\"\"", "name must be a secret's name"},
                {"name", "\"a123456789012345678901234567890123456789012345678901234567890123\"", "name"},
                {"hosts", "[]", "field 'hosts' must name 1 to 16 hosts"},
                {"hosts", "\"a.com\"", "field 'hosts' must be an array"},
                {"hosts", "[\"a b.com\"]", "field 'hosts[0]'"},
                {"hosts", "[\"a.com\",\"*\"]", "field 'hosts[1]'"},
                {"hosts", "[\"*.com\"]", "field 'hosts[0]'"},
                {"hosts", "[\"10.0.0.1\"]", "field 'hosts[0]'"},
                {"hosts", "[1]", "field 'hosts[0]'"},
                {"inject", "{}", "field 'inject' needs exactly one of 'header' and 'basic'"},
                {"inject", "{\"header\":\"X\",\"basic\":{}}", "field 'inject' needs exactly one"},
                {"inject", "{\"header\":\"Host\"}", "field 'inject.header'"},
                {"inject", "{\"header\":\"Proxy-Authorization\"}", "field 'inject.header'"},
                {"inject", "{\"header\":\"A B\"}", "field 'inject.header'"},
                {"inject", "{\"header\":\"X\",\"format\":\"Bearer\"}", "field 'inject.format'"},
                {"inject", "{\"header\":\"X\",\"format\":\"{{secret}}{{secret}}\"}", "field 'inject.format'"},
                {"inject", "{\"header\":\"X\",\"where\":1}", "unknown field 'where'"},
                {"inject", "{\"basic\":{\"username\":\"a:b\"}}", "field 'inject.basic.username'"},
                {"inject", "\"Authorization\"", "field 'inject' must be an object"},
                {"env", "\"1X\"", "env must be 1 to 128 characters"},
                {"env", "\"\"", "env must be 1 to 128 characters"},
                {"env", "\"A-B\"", "env must be"},
                {"rate_per_min", "-1", "rate_per_min must be between 0 and 1000000"},
                {"rate_per_min", "1000001", "rate_per_min"},
                {"expires_at", "\"2030-01-31T12:00:00\"", "expires_at must be an RFC 3339 time with its zone"},
                {"expires_at", "\"2030-01-31 12:00:00Z\"", "expires_at must be"},
                {"expires_at", "\"tomorrow\"", "expires_at must be"},
                /* Days the calendar does not have (the database would answer in its own words). */
                {"expires_at", "\"2031-02-30T00:00:00Z\"", "expires_at must be"},
                {"expires_at", "\"2031-02-29T00:00:00Z\"", "expires_at must be"},
                {"expires_at", "\"2031-04-31T00:00:00Z\"", "expires_at must be"},
                {"expires_at", "\"0000-01-01T00:00:00Z\"", "expires_at must be"},
                {"expires_at", "1", "expires_at must be a string"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                /* Each field replaced in a body otherwise valid. */
                _cleanup_json_ json_object *o = json_tokener_parse(SECRET_BODY);
                json_object_object_add(o, bad[i][0], json_tokener_parse(bad[i][1]));
                expect_fail(&D_SECRET, json_object_to_json_string(o), bad[i][2]);
        }
}
END_TEST

/* A bad value is refused without ever being quoted. */
START_TEST(secret_value_is_never_quoted)
{
        static const char *const bad[][2] = {
                {"\"\"", "field 'value' must hold 1 to 8192 bytes"},
                {"\"sk-SECRET\\nX-Other: 1\"", "field 'value' must be printable ASCII"},
                {"\"sk-SECRET\\r\"", "printable ASCII"},
                {"\"sk-SECRET\\u0000\"", "printable ASCII"},
                {"\"sk-SECRET\\u00e9\"", "printable ASCII"},
                {"\"sk-SECRET\\u0001\"", "printable ASCII"},
                {"5", "field 'value' must be a string"},
                {"[\"sk-SECRET\"]", "field 'value' must be a string"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *o = json_tokener_parse(SECRET_BODY);
                json_object_object_add(o, "value", json_tokener_parse(bad[i][0]));
                const char *body = json_object_to_json_string(o);
                cp_secret_create_req r;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_eq(cp_req_secret_create(body, strlen(body), &r, &e), -SP_E_INVALID);
                ck_assert_msg(strstr(e->message, bad[i][1]), "%zu: '%s'", i, e->message);
                ck_assert_msg(!strstr(e->message, "SECRET"), "%zu: the value in '%s'", i, e->message);
                ck_assert_ptr_null(r.value);
        }
        /* Too long, and the longest. */
        _cleanup_free_ char *v8193 = repeat('v', 8193), *v8192 = repeat('v', 8192);
        _cleanup_free_ char *too_long = NULL, *longest = NULL;
        _cleanup_buf_ sp_buf b1 = SP_BUF_INIT, b2 = SP_BUF_INIT;
        sp_buf_appendf(&b1, NULL, "\"%s\"", v8193);
        sp_buf_appendf(&b2, NULL, "\"%s\"", v8192);
        too_long = with("{\"name\":\"a\",\"hosts\":[\"a.com\"],\"inject\":{\"header\":\"X\"}}", "value", b1.data);
        longest = with("{\"name\":\"a\",\"hosts\":[\"a.com\"],\"inject\":{\"header\":\"X\"}}", "value", b2.data);
        expect_fail(&D_SECRET, too_long, "field 'value' must hold 1 to 8192 bytes");
        cp_secret_create_req r;
        expect_ok(&D_SECRET, longest, &r);
        ck_assert_uint_eq(r.value_len, 8192);
        cp_secret_create_req_free(&r);
        /* A value next to another field's error: still not quoted. */
        _cleanup_error_ sp_error *e = NULL;
        const char *body =
                "{\"name\":\"Bad\",\"value\":\"sk-SECRET\",\"hosts\":[\"a.com\"],\"inject\":{\"header\":\"X\"}}";
        ck_assert_int_eq(cp_req_secret_create(body, strlen(body), &r, &e), -SP_E_INVALID);
        ck_assert_ptr_null(strstr(e->message, "SECRET"));
}
END_TEST

START_TEST(secrets_rewrap_request)
{
        int64_t max = -1;
        expect_ok(&D_REWRAP, "", &max);
        ck_assert_int_eq(max, 10000);
        expect_ok(&D_REWRAP, "{\"max\":1}", &max);
        ck_assert_int_eq(max, 1);
        expect_fail(&D_REWRAP, "{\"max\":0}", "max must be between 1 and 1000000");
        expect_fail(&D_REWRAP, "{\"max\":\"all\"}", "max must be an integer");
}
END_TEST

START_TEST(sandbox_create_secrets)
{
        cp_sandbox_create_req r;
        expect_ok(&D_CREATE, "{\"template\":\"b\",\"secrets\":[\"openai\",\"gh-token\"]}", &r);
        ck_assert_uint_eq(r.nsecrets, 2);
        ck_assert_str_eq(r.secrets[0].name, "openai");
        ck_assert_str_eq(r.secrets[0].env, "");
        ck_assert_str_eq(r.secrets[1].name, "gh-token");
        cp_sandbox_create_req_free(&r);
        expect_ok(&D_CREATE,
                  "{\"template\":\"b\",\"env\":{\"A\":\"1\"},\"secrets\":{\"MY_KEY\":\"openai\",\"_X\":\"gh\"}}", &r);
        ck_assert_uint_eq(r.nsecrets, 2);
        ck_assert_str_eq(r.secrets[0].name, "openai");
        ck_assert_str_eq(r.secrets[0].env, "MY_KEY");
        ck_assert_str_eq(r.secrets[1].env, "_X");
        cp_sandbox_create_req_free(&r);
        expect_ok(&D_CREATE, "{\"template\":\"b\",\"secrets\":[]}", &r);
        ck_assert_uint_eq(r.nsecrets, 0);
        cp_sandbox_create_req_free(&r);

        expect_fail(&D_CREATE, "{\"template\":\"b\",\"secrets\":\"openai\"}", "secrets must be an array");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"secrets\":[\"OpenAI\"]}", "secrets[0] must be a secret's name");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"secrets\":[\"a\",5]}", "secrets[1] must be a secret's name");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"secrets\":[\"a\",\"a\"]}", "secret 'a' is named twice");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"secrets\":{\"X\":\"a\",\"Y\":\"a\"}}",
                    "secret 'a' is named twice");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"secrets\":{\"1X\":\"a\"}}", "secrets key '1X'");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"secrets\":{\"X\":5}}", "secrets.X must be a secret's name");
        expect_fail(&D_CREATE, "{\"template\":\"b\",\"env\":{\"X\":\"1\"},\"secrets\":{\"X\":\"a\"}}",
                    "secrets.X: the variable is also in env");
        _cleanup_buf_ sp_buf many = SP_BUF_INIT;
        sp_buf_append_str(&many, "{\"template\":\"b\",\"secrets\":[", NULL);
        for (int i = 0; i <= GW_SECRETS_MAX; i++)
                sp_buf_appendf(&many, NULL, "%s\"s%d\"", i ? "," : "", i);
        sp_buf_append_str(&many, "]}", NULL);
        expect_fail(&D_CREATE, many.data, "secrets must name at most 32 secrets");

        /* The egress log's kinds take secret. */
        pr_wk_get_egress_log q;
        ck_assert_int_eq(cp_req_egress_log_query(NULL, NULL, "secret", NULL, NULL, &q, NULL), 0);
        ck_assert_str_eq(q.kind, "secret");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("api_request");
        TCase *tc = tcase_create("request");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, every_decoder_common_contract);
        tcase_add_test(tc, sandbox_create_minimal_gets_defaults);
        tcase_add_test(tc, sandbox_create_full);
        tcase_add_test(tc, sandbox_create_resource_bounds);
        tcase_add_test(tc, sandbox_create_timeouts_and_enums);
        tcase_add_test(tc, sandbox_create_template_name);
        tcase_add_test(tc, sandbox_create_maps);
        tcase_add_test(tc, duplicate_keys_and_nul_keys_are_refused);
        tcase_add_test(tc, timeout_request);
        tcase_add_test(tc, sandbox_ingress_request);
        tcase_add_test(tc, template_create_sources);
        tcase_add_test(tc, template_create_fields);
        tcase_add_test(tc, warm_request);
        tcase_add_test(tc, tenant_and_key_requests);
        tcase_add_test(tc, join_token_request);
        tcase_add_test(tc, cursor_round_trip);
        tcase_add_test(tc, cursor_encode_refuses_bad_values);
        tcase_add_test(tc, cursor_decode_refuses_garbage);
        tcase_add_test(tc, list_query);
        tcase_add_test(tc, wait_parameter);
        tcase_add_test(tc, idempotency_key_and_states);
        tcase_add_test(tc, secret_create_request);
        tcase_add_test(tc, secret_value_is_never_quoted);
        tcase_add_test(tc, secrets_rewrap_request);
        tcase_add_test(tc, sandbox_create_secrets);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
