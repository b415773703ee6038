/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the audit log's cursor and query (api/request_audit.h) — a
 * cursor decodes to what was encoded and nothing else decodes; every filter
 * is bounded and named when refused — and every mutating route of the
 * server's table has the action it is audited as. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/request_audit.h"
#include "api/routes.h"
#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/error.h"

START_TEST(cursor_round_trip)
{
        const cp_audit_pos cases[] = {{1, 1}, {742, 13}, {UINT64_C(9223372036854775807), INT64_MAX}, {5, 1000000}};
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char cur[CP_AUDIT_CURSOR_MAX + 1];
                sp_error *e = NULL;
                sp_test_ok(cp_audit_cursor_encode(&cases[i], cur, sizeof(cur), &e), &e);
                ck_assert_uint_le(strlen(cur), CP_AUDIT_CURSOR_MAX);
                ck_assert_msg(strspn(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
                                      strlen(cur),
                              "cursor %s is not base64url", cur);
                cp_audit_pos back;
                sp_test_ok(cp_audit_cursor_decode(cur, &back, &e), &e);
                ck_assert_uint_eq(back.xid, cases[i].xid);
                ck_assert_int_eq(back.id, cases[i].id);
        }
        /* Out of range positions are refused, and leave "" behind. */
        const cp_audit_pos bad[] = {{0, 1}, {1, 0}, {1, -5}, {UINT64_C(9223372036854775808), 1}};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                char cur[CP_AUDIT_CURSOR_MAX + 1] = "x";
                sp_error *e = NULL;
                ck_assert_int_eq(cp_audit_cursor_encode(&bad[i], cur, sizeof(cur), &e), -SP_E_INVALID);
                ck_assert_str_eq(cur, "");
                sp_error_free(e);
        }
        char tiny[4];
        sp_error *e = NULL;
        ck_assert_int_eq(cp_audit_cursor_encode(&cases[0], tiny, sizeof(tiny), &e), -SP_E_INVALID);
        sp_error_free(e);
}
END_TEST

/* The base64url (unpadded) of raw, into out. */
static void b64(const char *raw, char *out, size_t n)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(sp_base64_encode(&b, raw, strlen(raw), 1, NULL), 0);
        snprintf(out, n, "%s", b.data ? b.data : "");
}

START_TEST(cursor_malformed)
{
        /* Raw texts that are not a cursor: other versions, leading zeros,
         * signs, spaces, overflow, extra parts, an id of another list. */
        static const char *const raws[] = {
                "a2.1.1",
                "a1.01.1",
                "a1.1.01",
                "a1.0.1",
                "a1.1.0",
                "a1.-1.1",
                "a1.+1.1",
                "a1. 1.1",
                "a1.1.1 ",
                "a1.1",
                "a1.1.1.",
                "a1.1.1.1",
                "a1..1",
                "a1.9223372036854775808.1",
                "a1.1.99999999999999999999",
                "A1.1.1",
                "a1.1.1\n",
                "2026-01-01T00:00:00Z|sbx_x",
                "",
        };
        for (size_t i = 0; i < sizeof(raws) / sizeof(raws[0]); i++) {
                char cur[256];
                b64(raws[i], cur, sizeof(cur));
                cp_audit_pos p = {7, 7};
                sp_error *e = NULL;
                ck_assert_msg(cp_audit_cursor_decode(cur, &p, &e) == -SP_E_INVALID, "raw '%s' decoded", raws[i]);
                ck_assert_str_eq(e->message, "cursor is malformed");
                ck_assert(p.xid == 0 && p.id == 0);
                sp_error_free(e);
        }
        /* Not base64url, padded, too long, NULL. */
        char good[CP_AUDIT_CURSOR_MAX + 1];
        cp_audit_pos pos = {12, 34};
        ck_assert_int_eq(cp_audit_cursor_encode(&pos, good, sizeof(good), NULL), 0);
        char padded[128], plus[128], longer[256];
        snprintf(padded, sizeof(padded), "%s=", good);
        snprintf(plus, sizeof(plus), "%s", good);
        plus[0] = '+';
        memset(longer, 'Q', sizeof(longer) - 1);
        longer[sizeof(longer) - 1] = '\0';
        const char *texts[] = {padded, plus, longer, "", "!!!!", NULL};
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
                cp_audit_pos p;
                sp_error *e = NULL;
                ck_assert_int_eq(cp_audit_cursor_decode(texts[i], &p, &e), -SP_E_INVALID);
                sp_error_free(e);
        }
}
END_TEST

static void refused(const cp_audit_params *p, const char *want)
{
        cp_audit_query q;
        memset(&q, 0xaa, sizeof(q));
        sp_error *e = NULL;
        ck_assert_int_eq(cp_req_audit_query(p, &q, &e), -SP_E_INVALID);
        ck_assert_msg(strstr(e->message, want), "'%s' lacks '%s'", e->message, want);
        const unsigned char *b = (const unsigned char *)&q;
        for (size_t i = 0; i < sizeof(q); i++)
                ck_assert_msg(b[i] == 0, "the query is not zeroed after a refusal");
        sp_error_free(e);
}

START_TEST(query_filters)
{
        sp_error *e = NULL;
        cp_audit_query q;
        cp_audit_params none = {0};
        sp_test_ok(cp_req_audit_query(&none, &q, &e), &e);
        ck_assert_int_eq(q.limit, CP_AUDIT_LIMIT_DEFAULT);
        ck_assert(!q.has_cursor && !q.tenant_id[0] && !q.action[0] && !q.since[0]);

        char cur[CP_AUDIT_CURSOR_MAX + 1];
        cp_audit_pos pos = {99, 3};
        ck_assert_int_eq(cp_audit_cursor_encode(&pos, cur, sizeof(cur), NULL), 0);
        cp_audit_params all = {
                .tenant_id = "ten_system",
                .key_id = "key_k3v9w0q8e2m5t7z1c4h6",
                .object_type = "egress_profile",
                .object_id = "my-profile.v2",
                .action = "sandbox.",
                .outcome = "denied",
                .since = "2026-01-02T03:04:05Z",
                .until = "2026-01-02T03:04:05.123456+02:00",
                .limit = "1000",
                .cursor = cur,
        };
        sp_test_ok(cp_req_audit_query(&all, &q, &e), &e);
        ck_assert_str_eq(q.tenant_id, "ten_system");
        ck_assert_str_eq(q.key_id, "key_k3v9w0q8e2m5t7z1c4h6");
        ck_assert_str_eq(q.object_type, "egress_profile");
        ck_assert_str_eq(q.object_id, "my-profile.v2");
        ck_assert_str_eq(q.action, "sandbox.");
        ck_assert(q.action_prefix);
        ck_assert_str_eq(q.outcome, "denied");
        ck_assert_int_eq(q.limit, 1000);
        ck_assert(q.has_cursor && q.cursor.xid == 99 && q.cursor.id == 3);
        all.action = "sandbox.create";
        sp_test_ok(cp_req_audit_query(&all, &q, &e), &e);
        ck_assert(!q.action_prefix);

        cp_audit_params p;
        p = (cp_audit_params){.tenant_id = "acme"};
        refused(&p, "tenant_id");
        p = (cp_audit_params){.key_id = "ten_k3v9w0q8e2m5t7z1c4h6"};
        refused(&p, "key_id");
        p = (cp_audit_params){.object_type = "Sandbox"};
        refused(&p, "object_type");
        p = (cp_audit_params){.object_type = "abcdefghijklmnopqrstuvwxyzabcdefg"};
        refused(&p, "object_type");
        p = (cp_audit_params){.object_id = "a b"};
        refused(&p, "object_id");
        char big[CP_AUDIT_OBJECT_MAX + 2];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        p = (cp_audit_params){.object_id = big};
        refused(&p, "object_id");
        static const char *const bad_actions[] = {".sandbox", "sandbox..create", "Sandbox.create", "sandbox create",
                                                  "sandbox%"};
        for (size_t i = 0; i < sizeof(bad_actions) / sizeof(bad_actions[0]); i++) {
                p = (cp_audit_params){.action = bad_actions[i]};
                refused(&p, "action");
        }
        p = (cp_audit_params){.outcome = "success"};
        refused(&p, "outcome");
        p = (cp_audit_params){.since = "yesterday"};
        refused(&p, "since");
        p = (cp_audit_params){.until = "2026-01-02T03:04:05"}; /* no zone */
        refused(&p, "until");
        p = (cp_audit_params){.limit = "0"};
        refused(&p, "limit");
        p = (cp_audit_params){.limit = "1001"};
        refused(&p, "limit");
        p = (cp_audit_params){.cursor = "bm90IGEgY3Vyc29y"};
        refused(&p, "cursor");
}
END_TEST

/* Every POST, PUT and DELETE route has its action, and the table names no
 * route the server does not have. */
START_TEST(every_mutating_route_has_an_action)
{
        size_t mutating = 0;
        for (size_t i = 0; cp_api_routes[i].method; i++) {
                const cp_route *r = &cp_api_routes[i];
                const char *a = cp_audit_route_action(r->method, r->pattern);
                if (strcmp(r->method, "GET") == 0) {
                        ck_assert_msg(!a, "GET %s has an audit action", r->pattern);
                        continue;
                }
                mutating++;
                ck_assert_msg(a, "%s %s has no audit action (api/request_audit.c)", r->method, r->pattern);
                const char *dot = strchr(a, '.');
                ck_assert_msg(dot && dot > a && dot[1], "action '%s' is not <object>.<verb>", a);
        }
        ck_assert_uint_gt(mutating, 30);
        ck_assert_ptr_null(cp_audit_route_action("POST", "/v1/nothing"));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("api_audit");
        TCase *tc = tcase_create("audit");
        tcase_add_test(tc, cursor_round_trip);
        tcase_add_test(tc, cursor_malformed);
        tcase_add_test(tc, query_filters);
        tcase_add_test(tc, every_mutating_route_has_an_action);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
