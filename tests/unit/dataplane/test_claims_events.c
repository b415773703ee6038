/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: what a verified token's claims must hold and what they grant
 * (auth/token.h; session, files and template tokens), the key set's sources
 * (auth/keys.h), and the worker's AttachSession frames turned into events
 * (attach/attach.h): ids are the offset after each event's bytes, output is
 * cut at 48 KiB (at 256 KiB for raw frames), a frame out of order is refused
 * and leaves the queue as it was; and events as raw frames (start and exit
 * carry their offset, output its bytes as they are).
 */
#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "auth/keys.h"
#include "auth/token.h"
#include "harness.h"
#include "space/attach_frames.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/time.h"

static json_object *claims(const char *text)
{
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(text, strlen(text), &o, NULL) == 0, "bad test JSON %s", text);
        return o;
}

#define BASE "\"kid\":\"0123456789abcdef\",\"iat\":1,\"exp\":2,\"sbx\":\"sbx_1\",\"wkr\":\"10.0.0.5:7071\""

START_TEST(claims_decode)
{
        _cleanup_json_ json_object *s = claims("{" BASE ",\"typ\":\"session\",\"ses\":\"ses_1\",\"scope\":\"write\","
                                               "\"ten\":\"ten_1\",\"future\":[1]}");
        dp_claims c;
        ck_assert_int_eq(dp_claims_decode(s, &c, NULL), 0);
        ck_assert_int_eq(c.kind, DP_KIND_SESSION);
        ck_assert(c.write);
        ck_assert_str_eq(c.session, "ses_1");
        ck_assert_str_eq(c.sandbox, "sbx_1");
        ck_assert_str_eq(c.worker, "10.0.0.5:7071");
        ck_assert_str_eq(c.tenant, "ten_1");
        ck_assert_str_eq(c.kid, "0123456789abcdef");
        _cleanup_json_ json_object *f =
                claims("{" BASE ",\"typ\":\"files\",\"scope\":\"read\",\"path\":\"/home/user/a b\"}");
        ck_assert_int_eq(dp_claims_decode(f, &c, NULL), 0);
        ck_assert(c.kind == DP_KIND_FILES && !c.write && c.has_path);
        ck_assert_str_eq(c.path, "/home/user/a b");

        const char *bad[] = {
                "{" BASE ",\"typ\":\"session\",\"scope\":\"read\"}", /* no ses */
                "{" BASE ",\"typ\":\"files\",\"ses\":\"ses_1\",\"scope\":\"read\"}",
                "{" BASE ",\"typ\":\"session\",\"ses\":\"ses_1\",\"scope\":\"read\",\"path\":\"/x\"}",
                "{" BASE ",\"typ\":\"console\",\"ses\":\"ses_1\",\"scope\":\"read\"}",
                "{" BASE ",\"typ\":\"session\",\"ses\":\"ses_1\",\"scope\":\"admin\"}",
                "{" BASE ",\"typ\":\"session\",\"ses\":\"\",\"scope\":\"read\"}",
                "{" BASE ",\"typ\":\"session\",\"ses\":1,\"scope\":\"read\"}",
                "{" BASE ",\"typ\":\"files\",\"scope\":\"read\",\"path\":\"\"}",
                "{\"kid\":\"0123456789abcdef\",\"sbx\":\"sbx_1\",\"typ\":\"files\",\"scope\":\"read\"}", /* no wkr */
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *o = claims(bad[i]);
                _cleanup_error_ sp_error *e = NULL;
                dp_claims before = {.tenant = "unchanged"};
                ck_assert_msg(dp_claims_decode(o, &before, &e) < 0, "accepted %s", bad[i]);
                ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);
                ck_assert_msg(strncmp(e->message, "malformed token claims", 22) == 0, "%s", e->message);
                ck_assert_str_eq(before.tenant, "unchanged");
        }
        const char *workers[] = {"h:1", "[::1]:7071", "a.b-c.example:65535", "10.0.0.1:80"};
        const char *not_workers[] = {"h",     "h:",     ":80",     "h:0",    "h:65536", "h:08",  "[::1:80",
                                     "-h:80", "h h:80", "unix:/x", "h:80/x", "[]:80",   "h:+80", "h:1:2x"};
        char text[512];
        for (size_t i = 0; i < SP_ARRAY_SIZE(workers) + SP_ARRAY_SIZE(not_workers); i++) {
                bool ok = i < SP_ARRAY_SIZE(workers);
                const char *w = ok ? workers[i] : not_workers[i - SP_ARRAY_SIZE(workers)];
                snprintf(text, sizeof(text),
                         "{\"kid\":\"0123456789abcdef\",\"sbx\":\"sbx_1\",\"typ\":\"files\",\"scope\":\"read\","
                         "\"wkr\":\"%s\"}",
                         w);
                _cleanup_json_ json_object *o = claims(text);
                ck_assert_msg((dp_claims_decode(o, &c, NULL) == 0) == ok, "wkr %s: %s", w, ok ? "refused" : "accepted");
        }
}
END_TEST

START_TEST(claims_grant)
{
        dp_claims ses = {.write = false, .session = "ses_1", .sandbox = "sbx_1"};
        dp_claims files = {.kind = DP_KIND_FILES, .write = true, .sandbox = "sbx_1", .has_path = true, .path = "/a"};
        struct {
                const dp_claims *c;
                dp_want want;
                dp_refusal reason; /* DP_REFUSE__MAX: granted */
                const char *message;
        } cases[] = {
                {&ses, {.session = "ses_1"}, DP_REFUSE__MAX, NULL},
                {&ses, {.session = "ses_2"}, DP_REFUSE_SESSION, "token does not grant this session"},
                {&ses, {.session = NULL}, DP_REFUSE_SESSION, "token does not grant this session"},
                {&ses, {.session = "ses_1", .write = true}, DP_REFUSE_READ_ONLY, "token is read-only"},
                {&ses, {.kind = DP_KIND_FILES, .sandbox = "sbx_1"}, DP_REFUSE_ROUTE, "token does not grant this route"},
                {&ses, {.session = "ses_2", .write = true}, DP_REFUSE_SESSION, "session"}, /* the object first */
                {&files,
                 {.kind = DP_KIND_FILES, .sandbox = "sbx_1", .path = "/a", .write = true},
                 DP_REFUSE__MAX,
                 NULL},
                {&files,
                 {.kind = DP_KIND_FILES, .sandbox = "sbx_2", .path = "/a"},
                 DP_REFUSE_SANDBOX,
                 "token does not grant this sandbox"},
                {&files,
                 {.kind = DP_KIND_FILES, .sandbox = "sbx_1", .path = "/b"},
                 DP_REFUSE_PATH,
                 "token does not grant this path"},
                {&files, {.kind = DP_KIND_FILES, .sandbox = "sbx_1", .path = NULL}, DP_REFUSE_PATH, "path"},
                {&files, {.session = "ses_1"}, DP_REFUSE_ROUTE, "route"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                dp_refusal reason = DP_REFUSE__MAX;
                _cleanup_error_ sp_error *e = NULL;
                int r = dp_claims_check(cases[i].c, &cases[i].want, &reason, &e);
                if (cases[i].reason == DP_REFUSE__MAX) {
                        ck_assert_msg(r == 0, "case %zu: %s", i, e ? e->message : "");
                } else {
                        ck_assert_msg(r < 0, "case %zu granted", i);
                        ck_assert_int_eq(reason, cases[i].reason);
                        ck_assert_int_eq(e->code, SP_E_PERMISSION);
                        ck_assert_msg(strstr(e->message, cases[i].message), "case %zu: %s", i, e->message);
                }
        }
}
END_TEST

#define TPL "\"kid\":\"0123456789abcdef\",\"iat\":1,\"exp\":2,\"wkr\":\"10.0.0.5:7071\",\"typ\":\"template\""

START_TEST(template_claims)
{
        _cleanup_json_ json_object *t = claims("{" TPL ",\"scope\":\"write\",\"ten\":\"ten_1\",\"tpl\":\"tpl_1\","
                                               "\"fmt\":\"oci\",\"max\":1125899906842624}");
        dp_claims c;
        ck_assert_int_eq(dp_claims_decode(t, &c, NULL), 0);
        ck_assert_int_eq(c.kind, DP_KIND_TEMPLATE);
        ck_assert(c.write);
        ck_assert_str_eq(c.template_id, "tpl_1");
        ck_assert_str_eq(c.format, "oci");
        ck_assert_uint_eq(c.max_bytes, DP_CLAIM_UPLOAD_MAX);
        ck_assert_str_eq(c.sandbox, "");
        ck_assert_str_eq(c.session, "");
        ck_assert_str_eq(c.tenant, "ten_1");
        ck_assert_str_eq(c.worker, "10.0.0.5:7071");
        _cleanup_json_ json_object *small = claims("{" TPL ",\"scope\":\"read\",\"tpl\":\"a.b-c_D\",\"fmt\":\"tar\","
                                                   "\"max\":1}");
        ck_assert_int_eq(dp_claims_decode(small, &c, NULL), 0);
        ck_assert_str_eq(c.format, "tar");
        ck_assert_uint_eq(c.max_bytes, 1);

        const struct {
                const char *json, *names;
        } bad[] = {
                {"{" TPL ",\"scope\":\"write\",\"fmt\":\"tar\",\"max\":10}", "tpl"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"max\":10}", "fmt"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\"}", "max"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"\",\"fmt\":\"tar\",\"max\":10}", "tpl"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"zip\",\"max\":10}", "fmt"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"TAR\",\"max\":10}", "fmt"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":0}", "max"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":-1}", "max"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":1125899906842625}", "max"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":\"10\"}", "max"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":1.5}", "max"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":10,\"sbx\":\"sbx_1\"}", "sbx"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":10,\"ses\":\"ses_1\"}", "ses"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":10,\"path\":\"/a\"}", "path"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":10,\"usr\":\"root\"}", "usr"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"../x\",\"fmt\":\"tar\",\"max\":10}", "tpl"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\".hidden\",\"fmt\":\"tar\",\"max\":10}", "tpl"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"a b\",\"fmt\":\"tar\",\"max\":10}", "tpl"},
                {"{" TPL ",\"scope\":\"write\",\"tpl\":\"x12345678901234567890123456789012345678901234567890123456789"
                 "01234\",\"fmt\":\"tar\",\"max\":10}",
                 "tpl"}, /* 65 bytes */
                {"{" TPL ",\"scope\":\"admin\",\"tpl\":\"tpl_1\",\"fmt\":\"tar\",\"max\":10}", "scope"},
                /* sbx stays required on the other kinds */
                {"{\"kid\":\"0123456789abcdef\",\"wkr\":\"h:1\",\"typ\":\"files\",\"scope\":\"read\"}", "sbx"},
                {"{\"kid\":\"0123456789abcdef\",\"wkr\":\"h:1\",\"typ\":\"session\",\"ses\":\"s\",\"scope\":\"read\"}",
                 "sbx"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                _cleanup_json_ json_object *o = claims(bad[i].json);
                _cleanup_error_ sp_error *e = NULL;
                dp_claims before = {.tenant = "unchanged"};
                ck_assert_msg(dp_claims_decode(o, &before, &e) < 0, "accepted %s", bad[i].json);
                ck_assert_int_eq(e->code, SP_E_UNAUTHENTICATED);
                ck_assert_msg(strncmp(e->message, "malformed token claims", 22) == 0, "%s", e->message);
                ck_assert_msg(strstr(e->message, bad[i].names), "%s: %s does not name %s", bad[i].json, e->message,
                              bad[i].names);
                ck_assert_str_eq(before.tenant, "unchanged");
        }
        /* Template claims on a files token are claims it does not know: ignored. */
        _cleanup_json_ json_object *f = claims("{" BASE ",\"typ\":\"files\",\"scope\":\"read\",\"tpl\":\"tpl_1\","
                                               "\"fmt\":\"tar\",\"max\":10}");
        ck_assert_int_eq(dp_claims_decode(f, &c, NULL), 0);
        ck_assert_int_eq(c.kind, DP_KIND_FILES);
        ck_assert_str_eq(c.template_id, "");
        ck_assert_uint_eq(c.max_bytes, 0);
}
END_TEST

START_TEST(template_grant)
{
        dp_claims tpl = {.kind = DP_KIND_TEMPLATE, .write = true, .template_id = "tpl_1", .max_bytes = 10};
        dp_claims tpl_read = {.kind = DP_KIND_TEMPLATE, .template_id = "tpl_1", .max_bytes = 10};
        dp_claims files = {.kind = DP_KIND_FILES, .write = true, .sandbox = "tpl_1"};
        dp_claims ses = {.write = true, .session = "tpl_1", .sandbox = "sbx_1"};
        struct {
                const dp_claims *c;
                dp_want want;
                dp_refusal reason; /* DP_REFUSE__MAX: granted */
                const char *message;
        } cases[] = {
                {&tpl, {.kind = DP_KIND_TEMPLATE, .write = true, .template_id = "tpl_1"}, DP_REFUSE__MAX, NULL},
                {&tpl,
                 {.kind = DP_KIND_TEMPLATE, .write = true, .template_id = "tpl_2"},
                 DP_REFUSE_TEMPLATE,
                 "token does not grant this template"},
                {&tpl, {.kind = DP_KIND_TEMPLATE, .write = true}, DP_REFUSE_TEMPLATE, "template"},
                {&tpl_read,
                 {.kind = DP_KIND_TEMPLATE, .write = true, .template_id = "tpl_1"},
                 DP_REFUSE_READ_ONLY,
                 "token is read-only"},
                /* the same id in another kind of route is still another route */
                {&tpl,
                 {.kind = DP_KIND_FILES, .write = true, .sandbox = "tpl_1"},
                 DP_REFUSE_ROUTE,
                 "token does not grant this route"},
                {&tpl, {.kind = DP_KIND_SESSION, .session = "tpl_1"}, DP_REFUSE_ROUTE, "route"},
                {&files, {.kind = DP_KIND_TEMPLATE, .write = true, .template_id = "tpl_1"}, DP_REFUSE_ROUTE, "route"},
                {&ses, {.kind = DP_KIND_TEMPLATE, .write = true, .template_id = "tpl_1"}, DP_REFUSE_ROUTE, "route"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                dp_refusal reason = DP_REFUSE__MAX;
                _cleanup_error_ sp_error *e = NULL;
                int r = dp_claims_check(cases[i].c, &cases[i].want, &reason, &e);
                if (cases[i].reason == DP_REFUSE__MAX) {
                        ck_assert_msg(r == 0, "case %zu: %s", i, e ? e->message : "");
                        ck_assert_int_eq(reason, DP_REFUSE__MAX); /* untouched */
                } else {
                        ck_assert_msg(r < 0, "case %zu granted", i);
                        ck_assert_int_eq(reason, cases[i].reason);
                        ck_assert_int_eq(e->code, SP_E_PERMISSION);
                        ck_assert_msg(strstr(e->message, cases[i].message), "case %zu: %s", i, e->message);
                }
        }
        ck_assert_str_eq(dp_refusal_name(DP_REFUSE_TEMPLATE), "template");
        ck_assert_str_eq(dp_route_name(DP_ROUTE_TEMPLATE_PUT), "template_put");
}
END_TEST

START_TEST(key_set_sources)
{
        _cleanup_free_ char *p1 = NULL, *k1 = NULL, *p2 = NULL, *k2 = NULL;
        ck_assert_int_eq(sp_token_keygen(&p1, &k1, NULL), 0);
        ck_assert_int_eq(sp_token_keygen(&p2, &k2, NULL), 0);
        _cleanup_token_signer_ sp_token_signer *s1 = NULL, *s2 = NULL;
        ck_assert_int_eq(sp_token_signer_new(p1, &s1, NULL), 0);
        ck_assert_int_eq(sp_token_signer_new(p2, &s2, NULL), 0);
        _cleanup_json_ json_object *c = json_object_new_object();
        json_object_object_add(c, "typ", json_object_new_string("session"));
        _cleanup_free_ char *t1 = sp_token_sign(s1, c, 60, NULL);
        _cleanup_free_ char *t2 = sp_token_sign(s2, c, 60, NULL);
        int64_t now = sp_now_real_us() / SP_USEC_PER_SEC;

        dp_keys *k = dp_keys_new();
        const char *files[] = {k1};
        const char *cp[] = {k2};
        ck_assert_int_eq(dp_keys_set(k, DP_KEYS_FILES, files, 1, NULL), 0);
        ck_assert_int_eq(dp_keys_set(k, DP_KEYS_CONTROL_PLANE, cp, 1, NULL), 0);
        ck_assert_uint_eq(dp_keys_count(k), 2);
        json_object *v1 = dp_keys_verify(k, t1, now, NULL), *v2 = dp_keys_verify(k, t2, now, NULL);
        ck_assert(v1 && v2);
        json_object_put(v1);
        json_object_put(v2);
        /* The control plane retires its key: only its source changes. */
        ck_assert_int_eq(dp_keys_set(k, DP_KEYS_CONTROL_PLANE, NULL, 0, NULL), 0);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_ptr_null(dp_keys_verify(k, t2, now, &e));
        ck_assert_str_eq(e->message, "unknown signing key");
        json_object *again = dp_keys_verify(k, t1, now, NULL);
        ck_assert_ptr_nonnull(again);
        json_object_put(again);
        /* A bad PEM changes nothing and says which one. */
        const char *bad[] = {k2, "not a key"};
        sp_error *e2 = NULL;
        ck_assert_int_lt(dp_keys_set(k, DP_KEYS_CONTROL_PLANE, bad, 2, &e2), 0);
        ck_assert_msg(strstr(e2->message, "token key 2"), "%s", e2->message);
        sp_error_free(e2);
        ck_assert_uint_eq(dp_keys_count(k), 1);
        dp_keys_free(k);
}
END_TEST

/* A DATA frame: stream, offset, n bytes of fill. */
static size_t data_frame(uint8_t *out, int stream, uint64_t offset, size_t n, char fill)
{
        out[0] = (uint8_t)stream;
        for (int i = 0; i < 8; i++)
                out[1 + i] = (uint8_t)(offset >> (56 - 8 * i));
        memset(out + 9, fill, n);
        return 9 + n;
}

START_TEST(frames_to_events)
{
        static uint8_t f[9 + 100000];
        dp_attach_queue q = {0};
        uint64_t off = 10;
        ck_assert_int_eq(dp_attach_decode(SP_RPC_FRAME_JSON, (const uint8_t *)"{\"event\":\"start\",\"pid\":42}", 26,
                                          "ses_1", 10, &off, &q, NULL),
                         0);
        size_t n = data_frame(f, 1, 10, 100000, 'x'); /* 48 KiB + 48 KiB + the rest */
        ck_assert_int_eq(dp_attach_decode(SP_RPC_FRAME_DATA, f, n, "ses_1", 10, &off, &q, NULL), 0);
        n = data_frame(f, 2, 100010, 3, 'e');
        ck_assert_int_eq(dp_attach_decode(SP_RPC_FRAME_DATA, f, n, "ses_1", 10, &off, &q, NULL), 0);
        const char *exit = "{\"event\":\"exit\",\"code\":3,\"signal\":0,\"oom\":false,\"killed\":false}";
        ck_assert_int_eq(
                dp_attach_decode(SP_RPC_FRAME_JSON, (const uint8_t *)exit, strlen(exit), "ses_1", 10, &off, &q, NULL),
                1);
        ck_assert_uint_eq(off, 100013);
        struct {
                const char *name, *id;
                size_t raw;
        } want[] = {{"start", "10", 0},         {"stdout", "49162", 49152}, {"stdout", "98314", 49152},
                    {"stdout", "100010", 1696}, {"stderr", "100013", 3},    {"exit", "100013", 0}};
        dp_attach_event *ev = q.head;
        for (size_t i = 0; i < SP_ARRAY_SIZE(want); i++, ev = ev->next) {
                ck_assert_ptr_nonnull(ev);
                ck_assert_str_eq(ev->name, want[i].name);
                ck_assert_uint_eq(ev->id, strtoull(want[i].id, NULL, 10));
                ck_assert(ev->has_id);
                ck_assert_uint_eq(ev->stream ? ev->data.len : 0, want[i].raw);
        }
        ck_assert_ptr_null(ev);
        ck_assert_str_eq(q.head->data.data, "{\"session_id\":\"ses_1\",\"pid\":42}");
        ck_assert_str_eq(q.tail->data.data, "{\"code\":3,\"signal\":0,\"oom\":false,\"killed\":false,\"reason\":\"\"}");
        ck_assert_str_eq(q.head->next->next->next->next->data.data, "eee");

        /* Out of order, a bad stream byte, a short frame, garbage JSON: refused, the queue unchanged. */
        size_t bytes = q.bytes;
        const struct {
                int type;
                size_t n;
                uint64_t at;
                int stream;
        } bad[] = {{SP_RPC_FRAME_DATA, 10, 5, 1}, {SP_RPC_FRAME_DATA, 10, 100013, 3}, {SP_RPC_FRAME_DATA, 0, 0, 0}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                n = bad[i].n ? data_frame(f, bad[i].stream, bad[i].at, bad[i].n, 'z') : 5;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_lt(dp_attach_decode(bad[i].type, f, n, "ses_1", 10, &off, &q, &e), 0);
                ck_assert_int_eq(e->code, SP_E_INTERNAL);
        }
        ck_assert_int_lt(dp_attach_decode(SP_RPC_FRAME_JSON, (const uint8_t *)"{]", 2, "ses_1", 10, &off, &q, NULL), 0);
        ck_assert_int_lt(dp_attach_decode(SP_RPC_FRAME_END, (const uint8_t *)"{}", 2, "ses_1", 10, &off, &q, NULL), 0);
        ck_assert_uint_eq(q.bytes, bytes);
        ck_assert_uint_eq(off, 100013);
        /* Events the worker may add later are ignored; its error event ends the stream. */
        ck_assert_int_eq(dp_attach_decode(SP_RPC_FRAME_JSON, (const uint8_t *)"{\"event\":\"later\"}", 17, "ses_1", 10,
                                          &off, &q, NULL),
                         0);
        const char *err = "{\"event\":\"error\",\"message\":\"agent lost\"}";
        ck_assert_int_eq(
                dp_attach_decode(SP_RPC_FRAME_JSON, (const uint8_t *)err, strlen(err), "ses_1", 10, &off, &q, NULL), 1);
        ck_assert_str_eq(q.tail->name, "error");
        ck_assert(!q.tail->has_id);
        ck_assert_str_eq(q.tail->data.data, "{\"code\":\"internal\",\"message\":\"agent lost\"}");
        dp_attach_queue_clear(&q);
        ck_assert_ptr_null(q.head);
        ck_assert_uint_eq(q.bytes, 0);
}
END_TEST

START_TEST(events_to_raw_frames)
{
        static uint8_t f[9 + 300000];
        dp_attach_queue q = {.event_max = DP_ATTACH_FRAME_MAX};
        uint64_t off = 7;
        ck_assert_int_eq(dp_attach_decode(SP_RPC_FRAME_JSON, (const uint8_t *)"{\"event\":\"start\",\"pid\":42}", 26,
                                          "ses_1", 7, &off, &q, NULL),
                         0);
        size_t n = data_frame(f, 1, 7, 300000, 'x'); /* 256 KiB + the rest */
        ck_assert_int_eq(dp_attach_decode(SP_RPC_FRAME_DATA, f, n, "ses_1", 7, &off, &q, NULL), 0);
        const char *exit = "{\"event\":\"exit\",\"code\":0}";
        ck_assert_int_eq(
                dp_attach_decode(SP_RPC_FRAME_JSON, (const uint8_t *)exit, strlen(exit), "ses_1", 7, &off, &q, NULL),
                1);
        ck_assert_uint_eq(q.head->next->data.len, DP_ATTACH_FRAME_MAX);
        ck_assert_uint_eq(q.head->next->next->data.len, 300000 - DP_ATTACH_FRAME_MAX);
        dp_attach_error_event(&q, SP_E_UNAVAILABLE, "gone");

        struct evbuffer *out = evbuffer_new();
        for (dp_attach_event *ev = q.head; ev; ev = ev->next)
                dp_attach_raw_encode(ev, out);
        size_t len = evbuffer_get_length(out);
        const uint8_t *p = evbuffer_pullup(out, -1);
        const char *start = "{\"session_id\":\"ses_1\",\"pid\":42,\"offset\":7}";
        ck_assert_uint_eq(p[0], SP_ATTACH_FRAME_START);
        ck_assert_uint_eq((size_t)p[3] << 8 | p[4], strlen(start));
        ck_assert(memcmp(p + 5, start, strlen(start)) == 0);

        /* Decoded in one go and a byte at a time: the same frames, the same bytes. */
        for (size_t step = len; step >= 1; step = step == len ? 1 : 0) {
                sp_attach_frames d;
                sp_attach_frames_init(&d, 0);
                size_t at = 0, out_bytes = 0, jsons = 0;
                int last_type = -1;
                char exit_json[256] = "", err_json[256] = "";
                while (at < len) {
                        size_t used = 0, k = len - at < step ? len - at : step;
                        sp_attach_chunk c;
                        int r = sp_attach_frames_next(&d, p + at, k, &used, &c, NULL);
                        ck_assert_int_ge(r, 0);
                        at += used;
                        if (r == 0)
                                continue;
                        if (c.type == SP_ATTACH_FRAME_STDOUT) {
                                for (size_t i = 0; i < c.len; i++)
                                        ck_assert_int_eq(c.data[i], 'x');
                                out_bytes += c.len;
                                continue;
                        }
                        jsons++;
                        last_type = c.type;
                        if (c.type == SP_ATTACH_FRAME_EXIT)
                                snprintf(exit_json, sizeof(exit_json), "%.*s", (int)c.len, c.data);
                        if (c.type == SP_ATTACH_FRAME_ERROR)
                                snprintf(err_json, sizeof(err_json), "%.*s", (int)c.len, c.data);
                }
                ck_assert(!sp_attach_frames_partial(&d));
                ck_assert_uint_eq(out_bytes, 300000);
                ck_assert_uint_eq(jsons, 3);
                ck_assert_int_eq(last_type, SP_ATTACH_FRAME_ERROR);
                ck_assert_str_eq(exit_json, "{\"code\":0,\"signal\":0,\"oom\":false,\"killed\":false,\"reason\":\"\","
                                            "\"offset\":300007}");
                ck_assert_str_eq(err_json, "{\"code\":\"unavailable\",\"message\":\"gone\"}");
                sp_attach_frames_free(&d);
        }
        evbuffer_free(out);
        dp_attach_queue_clear(&q);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("dp_claims_events");
        TCase *tc = tcase_create("claims_events");
        tcase_add_test(tc, claims_decode);
        tcase_add_test(tc, claims_grant);
        tcase_add_test(tc, template_claims);
        tcase_add_test(tc, template_grant);
        tcase_add_test(tc, key_set_sources);
        tcase_add_test(tc, frames_to_events);
        tcase_add_test(tc, events_to_raw_frames);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
