/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: egress profiles (gateway/policy/profile.h) and the gateway's
 * decisions (gateway/policy/table.h): what a profile accepts and refuses,
 * naming the field; which names, ports and addresses it allows; pins and
 * their expiry; the limits; and which refusals audit mode turns into
 * "would refuse" and which hold in every mode.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "ctl/msg.h"
#include "harness.h"
#include "policy/profile.h"
#include "policy/table.h"
#include "space/json.h"

static uint32_t ip(const char *s)
{
        struct in_addr a;
        ck_assert_int_eq(inet_pton(AF_INET, s, &a), 1);
        return ntohl(a.s_addr);
}

static gw_profile *parse(const char *json, bool admin, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse(json, strlen(json), &o, NULL), 0);
        gw_profile *p = NULL;
        if (gw_profile_parse(o, NULL, admin, &p, err) < 0)
                return NULL;
        return p;
}

static void refused(const char *json, bool admin, sp_errc code, const char *says)
{
        sp_error *e = NULL;
        gw_profile *p = parse(json, admin, &e);
        ck_assert_msg(!p, "took %s", json);
        ck_assert_msg(e && e->code == code, "%s: code %d (%s)", json, e ? (int)e->code : 0, e ? e->message : "");
        ck_assert_msg(strstr(e->message, says), "%s: '%s' does not say '%s'", json, e->message, says);
        sp_error_free(e);
}

START_TEST(profiles_are_checked_field_by_field)
{
        sp_error *e = NULL;
        gw_profile *p = parse("{\"name\":\"ci\",\"domains\":[\"PyPI.org\",\"*.pythonhosted.org\",\"pypi.org\"],"
                              "\"ports\":[443,80,443],\"cidrs\":[\"151.101.0.0/16\"]}",
                              false, &e);
        ck_assert_msg(p, "%s", e ? e->message : "");
        _cleanup_json_ json_object *j = gw_profile_to_json(p);
        ck_assert_str_eq(json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
                         "{\"name\":\"ci\",\"mode\":\"enforce\",\"domains\":[\"pypi.org\",\"*.pythonhosted.org\"],"
                         "\"ports\":[80,443],\"cidrs\":[\"151.101.0.0/16\"],\"allow_private\":false,\"secrets\":[]}");
        ck_assert(gw_profile_allows_name(p, "pypi.org"));
        ck_assert(gw_profile_allows_name(p, "files.pythonhosted.org"));
        ck_assert(!gw_profile_allows_name(p, "pythonhosted.org"));
        ck_assert(!gw_profile_allows_name(p, "evil.org"));
        ck_assert(gw_profile_allows_port(p, 443) && gw_profile_allows_port(p, 80) && !gw_profile_allows_port(p, 22));
        ck_assert(gw_profile_allows_addr(p, ip("151.101.3.4"), gw_addr_classify(ip("151.101.3.4"))));
        ck_assert(!gw_profile_allows_addr(p, ip("151.102.3.4"), gw_addr_classify(ip("151.102.3.4"))));
        gw_profile_unref(p);

        refused("{\"domains\":[]}", false, SP_E_INVALID, "'name'");
        refused("{\"name\":\"public\"}", false, SP_E_INVALID, "built-in");
        refused("{\"name\":\"Bad Name\"}", false, SP_E_INVALID, "'name'");
        refused("{\"name\":\"a\",\"mode\":\"loose\"}", false, SP_E_INVALID, "'mode'");
        refused("{\"name\":\"a\",\"domains\":[\"ok.com\",\"*.com\"]}", false, SP_E_INVALID, "'domains[1]'");
        refused("{\"name\":\"a\",\"domains\":[\"a..b\"]}", false, SP_E_INVALID, "'domains[0]'");
        refused("{\"name\":\"a\",\"domains\":[\"1.2.3.4\"]}", false, SP_E_INVALID, "'domains[0]'");
        refused("{\"name\":\"a\",\"domains\":[7]}", false, SP_E_INVALID, "'domains[0]'");
        refused("{\"name\":\"a\",\"ports\":[443,0]}", false, SP_E_INVALID, "'ports[1]'");
        refused("{\"name\":\"a\",\"ports\":[65536]}", false, SP_E_INVALID, "'ports[0]'");
        refused("{\"name\":\"a\",\"ports\":[\"443\"]}", false, SP_E_INVALID, "'ports[0]'");
        refused("{\"name\":\"a\",\"cidrs\":[\"10.0.0.0\"]}", false, SP_E_INVALID, "'cidrs[0]'");
        refused("{\"name\":\"a\",\"cidrs\":[\"151.101.0.1/16\"]}", false, SP_E_INVALID, "host bits");
        refused("{\"name\":\"a\",\"cidrs\":[\"10.0.0.0/8\"]}", false, SP_E_PERMISSION, "private");
        refused("{\"name\":\"a\",\"cidrs\":[\"0.0.0.0/0\"]}", true, SP_E_INVALID, "loopback");
        refused("{\"name\":\"a\",\"cidrs\":[\"169.254.169.254/32\"],\"allow_private\":true}", true, SP_E_INVALID,
                "link-local");
        refused("{\"name\":\"a\",\"cidrs\":[\"127.0.0.1/32\"]}", true, SP_E_INVALID, "loopback");
        refused("{\"name\":\"a\",\"cidrs\":[\"8.0.0.0/5\"]}", false, SP_E_PERMISSION, "private"); /* holds 10/8 */
        refused("{\"name\":\"a\",\"allow_private\":true}", false, SP_E_PERMISSION, "admin");
        refused("{\"name\":\"a\",\"extra\":1}", false, SP_E_INVALID, "unknown field 'extra'");

        /* An admin may open private ranges, with allow_private. */
        p = parse("{\"name\":\"lab\",\"cidrs\":[\"10.1.0.0/16\"],\"allow_private\":true,\"mode\":\"audit\"}", true, &e);
        ck_assert_msg(p, "%s", e ? e->message : "");
        ck_assert_int_eq(gw_profile_mode(p), GW_MODE_AUDIT);
        ck_assert(gw_profile_allows_addr(p, ip("10.1.2.3"), GW_ADDR_PRIVATE));
        ck_assert(!gw_profile_allows_addr(p, ip("10.2.2.3"), GW_ADDR_PRIVATE));
        gw_profile_unref(p);

        /* The built-ins. */
        gw_profile *none = gw_profile_builtin("none"), *pub = gw_profile_builtin("public");
        ck_assert(!gw_profile_allows_name(none, "example.com"));
        ck_assert(gw_profile_allows_name(pub, "example.com"));
        ck_assert(gw_profile_allows_addr(pub, ip("93.184.216.34"), GW_ADDR_PUBLIC));
        ck_assert(!gw_profile_allows_addr(pub, ip("192.168.1.1"), GW_ADDR_PRIVATE));
        ck_assert(!gw_profile_allows_addr(pub, ip("169.254.169.254"), GW_ADDR_FORBIDDEN));
        ck_assert(!gw_profile_allows_port(pub, 22));
}
END_TEST

START_TEST(addresses_are_classed)
{
        ck_assert_int_eq(gw_addr_classify(ip("8.8.8.8")), GW_ADDR_PUBLIC);
        ck_assert_int_eq(gw_addr_classify(ip("10.9.8.7")), GW_ADDR_PRIVATE);
        ck_assert_int_eq(gw_addr_classify(ip("172.31.255.255")), GW_ADDR_PRIVATE);
        ck_assert_int_eq(gw_addr_classify(ip("172.32.0.0")), GW_ADDR_PUBLIC);
        ck_assert_int_eq(gw_addr_classify(ip("100.64.0.1")), GW_ADDR_PRIVATE);
        ck_assert_int_eq(gw_addr_classify(ip("127.0.0.1")), GW_ADDR_FORBIDDEN);
        ck_assert_int_eq(gw_addr_classify(ip("169.254.169.254")), GW_ADDR_FORBIDDEN);
        ck_assert_int_eq(gw_addr_classify(ip("0.0.0.0")), GW_ADDR_FORBIDDEN);
        ck_assert_int_eq(gw_addr_classify(ip("224.0.0.1")), GW_ADDR_FORBIDDEN);
        ck_assert_int_eq(gw_addr_classify(ip("255.255.255.255")), GW_ADDR_FORBIDDEN);
}
END_TEST

static gw_profile *profile(const char *json)
{
        sp_error *e = NULL;
        gw_profile *p = parse(json, true, &e);
        ck_assert_msg(p, "%s", e ? e->message : "");
        return p;
}

START_TEST(decisions_follow_the_profile_and_the_pins)
{
        gw_limits lim = GW_LIMITS_DEFAULT;
        gw_table *t = gw_table_new(&lim);
        gw_profile *p = profile("{\"name\":\"p\",\"domains\":[\"allowed.test\"],\"ports\":[443]}");
        gw_sandbox *sb = gw_table_set(t, ip("10.250.0.1"), "sbx_a", "ten_a", p);
        gw_profile_unref(p);
        int64_t now = 1000000;
        uint32_t good = ip("93.184.216.34"), other = ip("93.184.216.35");

        ck_assert(gw_decide_dns(t, sb, "allowed.test", 12, now).allow);
        gw_decision d = gw_decide_dns(t, sb, "evil.test", 9, now);
        ck_assert(!d.allow);
        ck_assert_str_eq(d.rule, "name");

        /* Not resolved through the gateway: refused; resolved: allowed, and counted. */
        d = gw_decide_tcp(t, sb, good, 443, GW_ADDR_PUBLIC, "allowed.test", now);
        ck_assert(!d.allow);
        ck_assert_str_eq(d.rule, "not-resolved");
        gw_pin_add(t, sb, "allowed.test", good, 60, now);
        d = gw_decide_tcp(t, sb, good, 443, GW_ADDR_PUBLIC, "allowed.test", now);
        ck_assert_msg(d.allow, "%s", d.rule);
        ck_assert_uint_eq(sb->conns, 1);
        gw_conn_done(sb);
        /* An allowed name to another address (SNI spoofing), a disallowed name to the pinned one, a port. */
        ck_assert_str_eq(gw_decide_tcp(t, sb, other, 443, GW_ADDR_PUBLIC, "allowed.test", now).rule, "not-resolved");
        ck_assert_str_eq(gw_decide_tcp(t, sb, good, 443, GW_ADDR_PUBLIC, "evil.test", now).rule, "name");
        ck_assert_str_eq(gw_decide_tcp(t, sb, good, 22, GW_ADDR_PUBLIC, "allowed.test", now).rule, "port");
        ck_assert_str_eq(gw_decide_tcp(t, sb, good, 443, GW_ADDR_PUBLIC, NULL, now).rule, "address");
        /* The pin ends (the minimum TTL is 30 s whatever the answer said). */
        ck_assert(gw_pin_has(sb, "allowed.test", good, now + 59 * 1000000));
        ck_assert(!gw_pin_has(sb, "allowed.test", good, now + 61 * 1000000));
        gw_pin_add(t, sb, "allowed.test", other, 1, now);
        ck_assert(gw_pin_has(sb, "allowed.test", other, now + 29 * 1000000));
        ck_assert(!gw_pin_has(sb, "allowed.test", other, now + 31 * 1000000));
        /* Forbidden addresses, whatever the name. */
        gw_pin_add(t, sb, "allowed.test", ip("127.0.0.1"), 60, now);
        d = gw_decide_tcp(t, sb, ip("127.0.0.1"), 443, GW_ADDR_FORBIDDEN, "allowed.test", now);
        ck_assert(!d.allow);
        ck_assert_str_eq(d.rule, "forbidden-address");
        ck_assert(!gw_answer_pinnable(sb, GW_ADDR_PRIVATE));
        ck_assert(!gw_answer_pinnable(sb, GW_ADDR_FORBIDDEN));
        ck_assert(gw_answer_pinnable(sb, GW_ADDR_PUBLIC));

        /* Audit: the profile's refusals go ahead and say so; the platform's boundaries hold. */
        p = profile("{\"name\":\"p\",\"domains\":[\"allowed.test\"],\"ports\":[443],\"mode\":\"audit\"}");
        gw_table_set(t, ip("10.250.0.1"), "sbx_a", "ten_a", p);
        gw_profile_unref(p);
        d = gw_decide_dns(t, sb, "evil.test", 9, now);
        ck_assert(d.allow && d.would_refuse);
        ck_assert_str_eq(d.rule, "name");
        d = gw_decide_tcp(t, sb, other, 22, GW_ADDR_PUBLIC, "evil.test", now);
        ck_assert(d.allow && d.would_refuse);
        gw_conn_done(sb);
        d = gw_decide_tcp(t, sb, ip("169.254.169.254"), 80, GW_ADDR_FORBIDDEN, NULL, now);
        ck_assert(!d.allow && !d.would_refuse);
        /* Private networks need allow_private, which audit mode does not stand in for; a pin of one neither. */
        gw_pin_add(t, sb, "allowed.test", ip("10.1.2.3"), 60, now);
        d = gw_decide_tcp(t, sb, ip("10.1.2.3"), 443, GW_ADDR_PRIVATE, "allowed.test", now);
        ck_assert(!d.allow && !d.would_refuse);
        ck_assert_str_eq(d.rule, "private-address");

        /* An open connection against a changed profile: what the new one says, with no effect on the limits. */
        p = profile("{\"name\":\"q\",\"domains\":[\"other.test\"],\"ports\":[443]}");
        gw_table_set(t, ip("10.250.0.1"), "sbx_a", "ten_a", p);
        gw_profile_unref(p);
        uint32_t conns = sb->conns;
        d = gw_decide_tcp_profile(sb, good, 443, GW_ADDR_PUBLIC, "allowed.test", now);
        ck_assert(!d.allow);
        ck_assert_str_eq(d.rule, "name");
        ck_assert_uint_eq(sb->conns, conns);
        p = profile("{\"name\":\"none2\",\"domains\":[\"allowed.test\"],\"ports\":[443]}");
        gw_table_set(t, ip("10.250.0.1"), "sbx_a", "ten_a", p);
        gw_profile_unref(p);
        gw_pin_add(t, sb, "allowed.test", good, 60, now);
        ck_assert(gw_decide_tcp_profile(sb, good, 443, GW_ADDR_PUBLIC, "allowed.test", now).allow);
        ck_assert(!gw_decide_tcp_profile(sb, good, 80, GW_ADDR_PUBLIC, "allowed.test", now).allow);
        gw_table_free(t);
}
END_TEST

START_TEST(limits_refuse_floods_and_long_names)
{
        gw_limits lim = GW_LIMITS_DEFAULT;
        lim.max_conns = 3;
        lim.conn_rate = 10;
        lim.conn_burst = 5;
        lim.dns_rate = 10;
        lim.dns_burst = 4;
        lim.dns_name_max = 40;
        gw_table *t = gw_table_new(&lim);
        gw_sandbox *sb = gw_table_set(t, ip("10.250.0.3"), "sbx_b", "ten_b", gw_profile_builtin("public"));
        int64_t now = 5000000;
        uint32_t dst = ip("93.184.216.34");
        for (int i = 0; i < 3; i++)
                ck_assert(gw_decide_tcp(t, sb, dst, 443, GW_ADDR_PUBLIC, NULL, now).allow);
        ck_assert_str_eq(gw_decide_tcp(t, sb, dst, 443, GW_ADDR_PUBLIC, NULL, now).rule, "conn-limit");
        gw_conn_done(sb);
        gw_conn_done(sb);
        gw_conn_done(sb);
        /* Five were in the burst: three taken, two left, then the rate. */
        ck_assert(gw_decide_tcp(t, sb, dst, 443, GW_ADDR_PUBLIC, NULL, now).allow);
        ck_assert(gw_decide_tcp(t, sb, dst, 443, GW_ADDR_PUBLIC, NULL, now).allow);
        gw_conn_done(sb);
        gw_conn_done(sb);
        ck_assert_str_eq(gw_decide_tcp(t, sb, dst, 443, GW_ADDR_PUBLIC, NULL, now).rule, "conn-rate");
        ck_assert(gw_decide_tcp(t, sb, dst, 443, GW_ADDR_PUBLIC, NULL, now + 100000).allow);
        gw_conn_done(sb);

        for (int i = 0; i < 4; i++)
                ck_assert(gw_decide_dns(t, sb, "a.example.com", 13, now).allow);
        ck_assert_str_eq(gw_decide_dns(t, sb, "a.example.com", 13, now).rule, "dns-rate");
        const char *longname = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example.com";
        ck_assert_str_eq(gw_decide_dns(t, sb, longname, strlen(longname), now + 1000000).rule, "dns-name-length");
        gw_table_free(t);
}
END_TEST

START_TEST(the_table_forgets_and_resyncs)
{
        gw_limits lim = GW_LIMITS_DEFAULT;
        lim.max_pins = 2;
        gw_table *t = gw_table_new(&lim);
        for (int i = 20; i > 0; i--) {
                char a[32];
                snprintf(a, sizeof(a), "10.250.0.%d", i);
                ck_assert_ptr_nonnull(gw_table_set(t, ip(a), "sbx", "ten", gw_profile_builtin("none")));
        }
        ck_assert_uint_eq(gw_table_count(t), 20);
        gw_sandbox *sb = gw_table_find(t, ip("10.250.0.7"));
        ck_assert_ptr_nonnull(sb);
        ck_assert_uint_eq(sb->addr, ip("10.250.0.7"));
        /* At the bound, the pin that ends first goes. */
        gw_pin_add(t, sb, "a.test", 1, 100, 0);
        gw_pin_add(t, sb, "b.test", 2, 50, 0);
        gw_pin_add(t, sb, "c.test", 3, 200, 0);
        ck_assert_uint_eq(sb->npins, 2);
        ck_assert(!gw_pin_has(sb, "b.test", 2, 1));
        ck_assert(gw_pin_has(sb, "a.test", 1, 1) && gw_pin_has(sb, "c.test", 3, 1));
        ck_assert(gw_table_del(t, ip("10.250.0.7")));
        ck_assert(!gw_table_del(t, ip("10.250.0.7")));
        ck_assert_ptr_null(gw_table_find(t, ip("10.250.0.7")));
        /* A resync: all stale, two set again, the rest swept. */
        for (int i = 1; i <= 20; i++) {
                char a[32];
                snprintf(a, sizeof(a), "10.250.0.%d", i);
                gw_sandbox *s = gw_table_find(t, ip(a));
                if (s)
                        s->stale = true;
        }
        gw_table_set(t, ip("10.250.0.3"), "sbx", "ten", gw_profile_builtin("public"));
        gw_table_set(t, ip("10.250.0.9"), "sbx", "ten", gw_profile_builtin("public"));
        gw_table_sweep(t, NULL, NULL);
        ck_assert_uint_eq(gw_table_count(t), 2);
        ck_assert_ptr_nonnull(gw_table_find(t, ip("10.250.0.3")));
        ck_assert_ptr_nonnull(gw_table_find(t, ip("10.250.0.9")));
        gw_table_free(t);
}
END_TEST

START_TEST(control_messages_are_checked)
{
        static const char *const bad[] = {
                "{\"op\":\"set\",\"address\":\"10.0.0.1\"}",
                "{\"op\":\"set\",\"address\":\"10.0.0.1\",\"sandbox_id\":\"s\"}",
                "{\"op\":\"del\"}",
                "{\"op\":\"reboot\"}",
                "{\"seq\":1}",
                "{\"op\":\"ping\",\"extra\":true}",
                "{\"op\":\"ping\",\"seq\":-1}",
                NULL,
        };
        for (size_t i = 0; bad[i]; i++) {
                _cleanup_json_ json_object *o = NULL;
                ck_assert_int_eq(sp_json_parse(bad[i], strlen(bad[i]), &o, NULL), 0);
                gw_ctl_req r;
                sp_error *e = NULL;
                ck_assert_msg(gw_ctl_req_decode(o, &r, &e) < 0, "took %s", bad[i]);
                sp_error_free(e);
        }
        const char *good = "{\"op\":\"set\",\"seq\":4,\"address\":\"10.0.0.1\",\"sandbox_id\":\"s\",\"profile\":{"
                           "\"name\":\"public\"}}";
        _cleanup_json_ json_object *o = NULL;
        ck_assert_int_eq(sp_json_parse(good, strlen(good), &o, NULL), 0);
        gw_ctl_req r;
        ck_assert_int_eq(gw_ctl_req_decode(o, &r, NULL), 0);
        gw_profile *p = NULL;
        ck_assert_int_eq(gw_profile_resolve(r.profile, false, &p, NULL), 0);
        ck_assert_ptr_eq(p, gw_profile_builtin("public"));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("gateway_policy");
        TCase *tc = tcase_create("policy");
        tcase_add_test(tc, profiles_are_checked_field_by_field);
        tcase_add_test(tc, addresses_are_classed);
        tcase_add_test(tc, decisions_follow_the_profile_and_the_pins);
        tcase_add_test(tc, limits_refuse_floods_and_long_names);
        tcase_add_test(tc, the_table_forgets_and_resyncs);
        tcase_add_test(tc, control_messages_are_checked);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
