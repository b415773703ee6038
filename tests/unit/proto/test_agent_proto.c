/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: agent protocol frames (any split), limits, and request validation. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/agent_proto.h"
#include "space/cleanup.h"
#include "space/json.h"

typedef struct {
        int count;
        uint8_t types[64];
        uint32_t channels[64];
        sp_buf payloads;
} seen;

static int collect(const pr_agent_frame *f, void *ud, sp_error **err)
{
        seen *s = ud;
        s->types[s->count] = f->type;
        s->channels[s->count] = f->channel;
        s->count++;
        return sp_buf_append(&s->payloads, f->payload, f->length, err);
}

START_TEST(frames_roundtrip_any_split)
{
        _cleanup_buf_ sp_buf wire = SP_BUF_INIT;
        ck_assert_int_eq(pr_agent_frame_append(&wire, PR_AGENT_HELLO, 0, 0, "{\"version\":1}", 13, NULL), 0);
        ck_assert_int_eq(pr_agent_frame_append(&wire, PR_AGENT_DATA, PR_STREAM_STDOUT, 7, "hello", 5, NULL), 0);
        ck_assert_int_eq(pr_agent_frame_append(&wire, PR_AGENT_EOF, PR_STREAM_STDOUT, 7, NULL, 0, NULL), 0);
        ck_assert_int_eq(pr_agent_frame_append_window(&wire, PR_STREAM_STDOUT, 7, 65536, NULL), 0);
        /* every split point, and byte by byte */
        for (size_t cut = 0; cut <= wire.len; cut++) {
                seen s = {0};
                pr_agent_decoder d = {0};
                ck_assert_int_eq(pr_agent_decoder_feed(&d, wire.data, cut, collect, &s, NULL), 0);
                ck_assert_int_eq(pr_agent_decoder_feed(&d, wire.data + cut, wire.len - cut, collect, &s, NULL), 0);
                ck_assert_int_eq(s.count, 4);
                ck_assert_int_eq(s.types[1], PR_AGENT_DATA);
                ck_assert_int_eq(s.channels[1], 7);
                ck_assert_uint_eq(s.payloads.len, 13 + 5 + 4);
                ck_assert_uint_eq(d.buf.len, 0);
                pr_agent_decoder_free(&d);
                sp_buf_free(&s.payloads);
        }
        seen s = {0};
        pr_agent_decoder d = {0};
        for (size_t i = 0; i < wire.len; i++)
                ck_assert_int_eq(pr_agent_decoder_feed(&d, wire.data + i, 1, collect, &s, NULL), 0);
        ck_assert_int_eq(s.count, 4);
        pr_agent_decoder_free(&d);
        sp_buf_free(&s.payloads);
}
END_TEST

START_TEST(frames_rejected)
{
        uint8_t h[PR_AGENT_HEADER_SIZE];
        pr_agent_frame f;
        struct {
                uint8_t bytes[12];
                const char *want;
        } cases[] = {
                {{0, 0x50, 0, 0, 4, 1, 0, 0, 0, 0, 0, 1}, "payload of 5242880 bytes exceeds"},
                {{0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 1}, "unknown type 42"},
                {{0, 0, 0, 0, 4, 9, 0, 0, 0, 0, 0, 1}, "unknown stream 9"},
                {{0, 0, 0, 0, 4, 0, 1, 0, 0, 0, 0, 1}, "reserved bits set"},
                {{0, 0, 0, 3, 5, 1, 0, 0, 0, 0, 0, 1}, "bad length 3 for type 5"},
                {{0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1}, "HELLO on channel 1"},
                {{0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0}, "type 4 on channel 0"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                memcpy(h, cases[i].bytes, sizeof(h));
                sp_error *e = NULL;
                ck_assert_int_lt(pr_agent_header_decode(h, &f, &e), 0);
                ck_assert_msg(strstr(e->message, cases[i].want), "%s", e->message);
                sp_error_free(e);
        }
        _cleanup_error_ sp_error *e = NULL;
        static char big[PR_AGENT_MAX_PAYLOAD + 1];
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_lt(pr_agent_frame_append(&b, PR_AGENT_DATA, 1, 1, big, sizeof(big), &e), 0);
        ck_assert_uint_eq(b.len, 0);
}
END_TEST

static int parse(const char *s, pr_agent_request *r, sp_error **e)
{
        return pr_agent_request_parse(s, strlen(s), r, e);
}

START_TEST(requests)
{
        pr_agent_request r;
        ck_assert_int_eq(parse("{\"op\":\"exec\",\"session\":\"ses_1\",\"argv\":[\"sh\",\"-c\",\"echo hi\"],"
                               "\"env\":{\"A\":\"b=c\"},\"cwd\":\"/tmp\",\"pty\":{\"rows\":40},\"stdin\":true}",
                               &r, NULL),
                         0);
        ck_assert_int_eq(r.op, PR_OP_EXEC);
        ck_assert_str_eq(r.argv[2], "echo hi");
        ck_assert_str_eq(r.env[0], "A=b=c");
        ck_assert(r.pty && r.rows == 40 && r.cols == 80 && r.stdin_open);
        /* to_json and back gives the same request */
        _cleanup_json_ json_object *j = pr_agent_request_to_json(&r);
        pr_agent_request r2;
        const char *text = json_object_to_json_string(j);
        ck_assert_int_eq(pr_agent_request_parse(text, strlen(text), &r2, NULL), 0);
        ck_assert_str_eq(r2.env[0], "A=b=c");
        ck_assert_str_eq(r2.session, "ses_1");
        pr_agent_request_free(&r2);
        pr_agent_request_free(&r);

        struct {
                const char *json, *want;
        } bad[] = {
                {"{\"op\":\"exec\",\"session\":\"s\",\"argv\":[]}", "field 'argv' must name a program"},
                {"{\"op\":\"exec\",\"session\":\"S/../x\",\"argv\":[\"x\"]}", "field 'session' must be"},
                {"{\"op\":\"exec\",\"session\":\"s\",\"argv\":[\"x\"],\"env\":{\"A=B\":\"1\"}}", "contains '='"},
                {"{\"op\":\"exec\",\"session\":\"s\",\"argv\":[\"x\"],\"shell\":true}", "unknown field 'shell'"},
                {"{\"op\":\"format\"}", "unknown op 'format'"},
                {"{\"op\":\"stat\"}", "missing required field 'path'"},
                {"{\"op\":\"stat\",\"path\":\"\"}", "field 'path' must not be empty"},
                {"{\"op\":\"chmod\",\"path\":\"/x\"}", "missing required field 'mode'"},
                {"{\"op\":\"chmod\",\"path\":\"/x\",\"mode\":4096}",
                 "field 'mode' must be an integer between 0 and 4095"},
                {"{\"op\":\"exec\",\"session\":\"s\",\"argv\":[\"x\"],\"pty\":{\"rows\":0}}", "field 'pty'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                sp_error *e = NULL;
                pr_agent_request x;
                ck_assert_int_lt(parse(bad[i].json, &x, &e), 0);
                ck_assert_msg(strstr(e->message, bad[i].want), "case %zu: %s", i, e->message);
                sp_error_free(e);
        }

        /* connect: a port, and a window; back and forth the same */
        ck_assert_int_eq(parse("{\"op\":\"connect\",\"port\":8080,\"window\":65536}", &r, NULL), 0);
        ck_assert(r.op == PR_OP_CONNECT && r.port == 8080 && r.window == 65536);
        _cleanup_json_ json_object *cj = pr_agent_request_to_json(&r);
        ck_assert_str_eq(json_object_to_json_string_ext(cj, JSON_C_TO_STRING_PLAIN),
                         "{\"op\":\"connect\",\"window\":65536,\"port\":8080}");
        pr_agent_request_free(&r);
        static const struct {
                const char *json, *want;
        } bad_connect[] = {
                {"{\"op\":\"connect\"}", "missing required field 'port'"},
                {"{\"op\":\"connect\",\"port\":0}", "field 'port' must be an integer between 1 and 65535"},
                {"{\"op\":\"connect\",\"port\":65536}", "field 'port' must be an integer between 1 and 65535"},
                {"{\"op\":\"connect\",\"port\":80,\"host\":\"10.0.0.1\"}", "unknown field 'host'"},
                {"{\"op\":\"connect\",\"port\":\"80\"}", "field 'port'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_connect); i++) {
                sp_error *e = NULL;
                pr_agent_request x;
                ck_assert_int_lt(parse(bad_connect[i].json, &x, &e), 0);
                ck_assert_msg(strstr(e->message, bad_connect[i].want), "connect case %zu: %s", i, e->message);
                sp_error_free(e);
        }

        /* ping: a restored VM's refresh (time, host name, randomness); back and forth the same */
        static const char seed32[] = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
        char ping[256];
        snprintf(ping, sizeof(ping), "{\"op\":\"ping\",\"time_ns\":5,\"hostname\":\"sbx-1.a\",\"seed\":\"%s\"}",
                 seed32);
        ck_assert_int_eq(parse(ping, &r, NULL), 0);
        ck_assert(r.op == PR_OP_PING && r.time_ns == 5 && r.seed_len == 32 && r.seed[31] == 31);
        ck_assert_str_eq(r.hostname, "sbx-1.a");
        _cleanup_json_ json_object *pj = pr_agent_request_to_json(&r);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(pj, "seed")), seed32);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(pj, "hostname")), "sbx-1.a");
        pr_agent_request_free(&r);
        static const struct {
                const char *json, *want;
        } bad_ping[] = {
                {"{\"op\":\"ping\",\"hostname\":\"\"}", "not a host name"},
                {"{\"op\":\"ping\",\"hostname\":\"a b\"}", "not a host name"},
                {"{\"op\":\"ping\",\"hostname\":\"a/b\"}", "not a host name"},
                {"{\"op\":\"ping\",\"hostname\":"
                 "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
                 "field 'hostname'"},
                {"{\"op\":\"ping\",\"seed\":\"AAEC\"}", "field 'seed' must be 16 to 64 bytes"},
                {"{\"op\":\"ping\",\"seed\":\"not base64!\"}", "field 'seed'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad_ping); i++) {
                sp_error *e = NULL;
                pr_agent_request x;
                ck_assert_int_lt(parse(bad_ping[i].json, &x, &e), 0);
                ck_assert_msg(strstr(e->message, bad_ping[i].want), "ping case %zu: %s", i, e->message);
                sp_error_free(e);
        }

        pr_agent_control c;
        ck_assert_int_eq(pr_agent_control_parse("{\"resize\":{\"rows\":5,\"cols\":6}}", 30, &c, NULL), 0);
        ck_assert(c.rows == 5 && c.cols == 6 && !c.kill && c.signal == 0);
        ck_assert_int_lt(pr_agent_control_parse("{}", 2, &c, NULL), 0);
        ck_assert_int_lt(pr_agent_control_parse("{\"signal\":0}", 12, &c, NULL), 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("agent_proto");
        TCase *tc = tcase_create("all");
        tcase_add_test(tc, frames_roundtrip_any_split);
        tcase_add_test(tc, frames_rejected);
        tcase_add_test(tc, requests);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
