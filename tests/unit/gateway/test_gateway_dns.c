/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: DNS messages of the egress gateway (gateway/wire/dns_msg.h):
 * queries from sandboxes (one built by libresolv among them) and what is
 * refused in them, the answers built to them, upstream queries, and upstream
 * answers with CNAME chains, loops, compression pointers that loop, point
 * forwards or chain too far, and oversize labels. */
#include <arpa/nameser.h>
#include <netinet/in.h>
#include <resolv.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/dns_msg.h"
#include "harness.h"
#include "space/cleanup.h"

typedef struct msg {
        uint8_t b[8192];
        size_t n;
} msg;

static void m_u8(msg *m, unsigned v)
{
        m->b[m->n++] = (uint8_t)v;
}

static void m_u16(msg *m, unsigned v)
{
        m_u8(m, v >> 8);
        m_u8(m, v);
}

static void m_u32(msg *m, uint32_t v)
{
        m_u16(m, v >> 16);
        m_u16(m, v & 0xffff);
}

static void m_bytes(msg *m, const void *p, size_t n)
{
        if (n == 0)
                return;
        memcpy(m->b + m->n, p, n);
        m->n += n;
}

/* Labels of a dotted name, without the root label. */
static void m_labels(msg *m, const char *name)
{
        while (*name) {
                const char *dot = strchr(name, '.');
                size_t l = dot ? (size_t)(dot - name) : strlen(name);
                m_u8(m, (unsigned)l);
                m_bytes(m, name, l);
                name += l + (dot ? 1 : 0);
        }
}

static void m_name(msg *m, const char *name)
{
        m_labels(m, name);
        m_u8(m, 0);
}

static void m_ptr(msg *m, size_t off)
{
        m_u16(m, 0xc000 | (unsigned)off);
}

static void m_header(msg *m, unsigned id, unsigned flags, unsigned qd, unsigned an, unsigned ns, unsigned ar)
{
        m->n = 0;
        m_u16(m, id);
        m_u16(m, flags);
        m_u16(m, qd);
        m_u16(m, an);
        m_u16(m, ns);
        m_u16(m, ar);
}

static void m_question(msg *m, const char *name, unsigned type)
{
        m_name(m, name);
        m_u16(m, type);
        m_u16(m, 1);
}

static void m_rr(msg *m, unsigned type, uint32_t ttl, unsigned rdlen)
{
        m_u16(m, type);
        m_u16(m, 1);
        m_u32(m, ttl);
        m_u16(m, rdlen);
}

static void m_a(msg *m, size_t owner, uint32_t ttl, uint8_t last)
{
        m_ptr(m, owner);
        m_rr(m, 1, ttl, 4);
        m_bytes(m, (uint8_t[]){192, 0, 2, last}, 4);
}

/* A CNAME from the name at owner to target, written out. Returns the offset
 * of the target. */
static size_t m_cname(msg *m, size_t owner, uint32_t ttl, const char *target)
{
        m_ptr(m, owner);
        m_rr(m, 5, ttl, (unsigned)strlen(target) + 2);
        size_t at = m->n;
        m_name(m, target);
        return at;
}

static void set_counts(msg *m, unsigned an, unsigned ns, unsigned ar)
{
        m->b[6] = (uint8_t)(an >> 8);
        m->b[7] = (uint8_t)an;
        m->b[8] = (uint8_t)(ns >> 8);
        m->b[9] = (uint8_t)ns;
        m->b[10] = (uint8_t)(ar >> 8);
        m->b[11] = (uint8_t)ar;
}

/* Parsers over exact-size copies, so that reads past the end are caught. */
static int qparse(const msg *m, gw_dns_query *q)
{
        uint8_t *copy = malloc(m->n ? m->n : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, m->b, m->n);
        int r = gw_dns_query_parse(copy, m->n, q);
        free(copy);
        return r;
}

static int rparse(const msg *m, unsigned id, const char *name, unsigned qtype, gw_dns_answer *a)
{
        uint8_t *copy = malloc(m->n ? m->n : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, m->b, m->n);
        int r = gw_dns_response_parse(copy, m->n, (uint16_t)id, name, (uint16_t)qtype, a);
        free(copy);
        return r;
}

static void check_query_fail(const msg *m, int rcode, const char *reason)
{
        gw_dns_query q;
        int r = qparse(m, &q);
        if (r != rcode)
                ck_abort_msg("got %d (%s), wanted %d", r, q.reason ? q.reason : "", rcode);
        if (reason)
                ck_assert_str_eq(q.reason, reason);
}

START_TEST(query_from_libresolv)
{
        msg m;
        ck_assert_int_eq(res_init(), 0);
        int n = res_mkquery(QUERY, "Api.Example.COM", C_IN, T_A, NULL, 0, NULL, m.b, sizeof(m.b));
        ck_assert_int_gt(n, 0);
        m.n = (size_t)n;
        gw_dns_query q;
        ck_assert_int_eq(qparse(&m, &q), 0);
        ck_assert_str_eq(q.name, "api.example.com");
        ck_assert_uint_eq(q.qtype, GW_DNS_TYPE_A);
        ck_assert_uint_eq(q.qclass, GW_DNS_CLASS_IN);
        ck_assert_uint_eq(q.id, (unsigned)(m.b[0] << 8 | m.b[1]));
        ck_assert(q.has_question);
        ck_assert_ptr_null(q.reason);
        /* The question as sent, case kept, for the echo. */
        ck_assert_uint_eq(q.qname_wire_len, 17);
        ck_assert_int_eq(memcmp(q.qname_wire,
                                "\x03"
                                "Api\x07"
                                "Example\x03"
                                "COM",
                                17),
                         0);

        n = res_mkquery(QUERY, "_dmarc.example.com.", C_IN, T_TXT, NULL, 0, NULL, m.b, sizeof(m.b));
        m.n = (size_t)n;
        ck_assert_int_eq(qparse(&m, &q), 0);
        ck_assert_str_eq(q.name, "_dmarc.example.com");
        ck_assert_uint_eq(q.qtype, 16);
        n = res_mkquery(QUERY, "v6.example.com", C_IN, T_AAAA, NULL, 0, NULL, m.b, sizeof(m.b));
        m.n = (size_t)n;
        ck_assert_int_eq(qparse(&m, &q), 0);
        ck_assert_uint_eq(q.qtype, GW_DNS_TYPE_AAAA);
        ck_assert(!q.edns);
        ck_assert_uint_eq(gw_dns_query_udp_limit(&q), 512);
}
END_TEST

START_TEST(query_header)
{
        msg m;
        gw_dns_query q;
        m.n = 11;
        memset(m.b, 0, 11);
        check_query_fail(&m, -1, "shorter than a DNS header");
        m_header(&m, 1, 0x8000, 1, 0, 0, 0);
        m_question(&m, "a.com", 1);
        check_query_fail(&m, -1, "a response, not a query");
        m_header(&m, 1, 2u << 11, 1, 0, 0, 0);
        m_question(&m, "a.com", 1);
        check_query_fail(&m, GW_DNS_NOTIMP, NULL);
        m_header(&m, 1, 0x0100, 0, 0, 0, 0);
        check_query_fail(&m, GW_DNS_FORMERR, "not exactly one question");
        ck_assert_int_eq(qparse(&m, &q), GW_DNS_FORMERR);
        ck_assert(!q.has_question);
        m_header(&m, 1, 0x0100, 2, 0, 0, 0);
        m_question(&m, "a.com", 1);
        m_question(&m, "b.com", 1);
        check_query_fail(&m, GW_DNS_FORMERR, "not exactly one question");
        m_header(&m, 1, 0x0300, 1, 0, 0, 0);
        m_question(&m, "a.com", 1);
        check_query_fail(&m, GW_DNS_FORMERR, "truncated query");
        m_header(&m, 1, 0x0100, 1, 1, 0, 0);
        m_question(&m, "a.com", 1);
        m_ptr(&m, 12);
        m_rr(&m, 1, 60, 4);
        m_u32(&m, 0x01020304);
        ck_assert_int_eq(qparse(&m, &q), GW_DNS_FORMERR);
        ck_assert(q.has_question); /* the error answer echoes it */
        m_header(&m, 1, 0x0100, 1, 0, 0, 0);
        m_question(&m, "a.com", 1);
        m_u8(&m, 0);
        check_query_fail(&m, GW_DNS_FORMERR, "bytes after the last record");
}
END_TEST

START_TEST(query_names)
{
        msg m;
        gw_dns_query q;
        /* A compression pointer, even a good one, has no place in a query. */
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        m_labels(&m, "a");
        m_ptr(&m, 12);
        m_u16(&m, 1);
        m_u16(&m, 1);
        check_query_fail(&m, GW_DNS_FORMERR, "compression pointer in a query");
        /* Label types 01 and 10. */
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        m_u8(&m, 0x41);
        m_bytes(&m, "x", 1);
        m_u8(&m, 0);
        m_u32(&m, 0x00010001);
        check_query_fail(&m, GW_DNS_FORMERR, "unknown label type");
        m.b[12] = 0x81;
        check_query_fail(&m, GW_DNS_FORMERR, "unknown label type");
        /* Over 255 bytes of wire form: four labels of 63. */
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        for (int i = 0; i < 4; i++) {
                m_u8(&m, 63);
                memset(m.b + m.n, 'a', 63);
                m.n += 63;
        }
        m_u8(&m, 0);
        m_u32(&m, 0x00010001);
        check_query_fail(&m, GW_DNS_FORMERR, "name longer than 255 bytes");
        /* 255 bytes exactly: 253 of text. */
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        for (int i = 0; i < 3; i++) {
                m_u8(&m, 63);
                memset(m.b + m.n, 'a', 63);
                m.n += 63;
        }
        m_u8(&m, 61);
        memset(m.b + m.n, 'b', 61);
        m.n += 61;
        m_u8(&m, 0);
        m_u32(&m, 0x00010001);
        ck_assert_int_eq(qparse(&m, &q), 0);
        ck_assert_uint_eq(strlen(q.name), 253);
        /* Cut in the name, in the type. */
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        m_labels(&m, "example");
        check_query_fail(&m, GW_DNS_FORMERR, "name runs past the message");
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        m_name(&m, "example");
        m_u16(&m, 1);
        check_query_fail(&m, GW_DNS_FORMERR, "question runs past the message");

        /* Well-formed, but not a name the gateway answers for. */
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        m_u8(&m, 0);
        m_u32(&m, 0x00020001);
        check_query_fail(&m, GW_DNS_REFUSED, "query for the root");
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        m_u8(&m, 11);
        m_bytes(&m, "allowed.com", 11); /* one label holding a dot */
        m_u8(&m, 0);
        m_u32(&m, 0x00010001);
        check_query_fail(&m, GW_DNS_REFUSED, "name with characters other than LDH and '_'");
        m.b[20] = 0;
        check_query_fail(&m, GW_DNS_REFUSED, "name with characters other than LDH and '_'");
        m_header(&m, 7, 0x0100, 1, 0, 0, 0);
        m_question(&m, "version.bind", 16);
        m.b[m.n - 1] = 3; /* CHAOS */
        check_query_fail(&m, GW_DNS_REFUSED, "class other than IN");
        ck_assert_int_eq(qparse(&m, &q), GW_DNS_REFUSED);
        ck_assert(q.has_question);
}
END_TEST

static void m_opt(msg *m, unsigned size, const uint8_t *opts, size_t n)
{
        m_u8(m, 0);
        m_u16(m, 41);
        m_u16(m, size);
        m_u32(m, 0);
        m_u16(m, (unsigned)n);
        m_bytes(m, opts, n);
}

START_TEST(query_edns)
{
        msg m;
        gw_dns_query q;
        static const uint8_t cookie[] = {0x00, 0x0a, 0x00, 0x08, 1, 2, 3, 4, 5, 6, 7, 8};
        m_header(&m, 9, 0x0100, 1, 0, 0, 1);
        m_question(&m, "example.com", 1);
        m_opt(&m, 4096, cookie, sizeof(cookie));
        ck_assert_int_eq(qparse(&m, &q), 0);
        ck_assert(q.edns);
        ck_assert_uint_eq(q.edns_udp_size, 4096);
        ck_assert_uint_eq(gw_dns_query_udp_limit(&q), GW_DNS_UDP_MAX);
        m.b[m.n - sizeof(cookie) - 8] = 0x02; /* UDP size 0x0200 + ... */
        m.b[m.n - sizeof(cookie) - 7] = 0x00;
        ck_assert_int_eq(qparse(&m, &q), 0);
        ck_assert_uint_eq(gw_dns_query_udp_limit(&q), 512);

        /* An option that runs past its record. */
        m_header(&m, 9, 0x0100, 1, 0, 0, 1);
        m_question(&m, "example.com", 1);
        m_opt(&m, 1232, cookie, 6);
        check_query_fail(&m, GW_DNS_FORMERR, "malformed EDNS option");
        /* OPT with a name, another record type, two records. */
        m_header(&m, 9, 0x0100, 1, 0, 0, 1);
        m_question(&m, "example.com", 1);
        m_labels(&m, "x");
        m_opt(&m, 1232, NULL, 0);
        check_query_fail(&m, GW_DNS_FORMERR, "additional record other than an OPT");
        m_header(&m, 9, 0x0100, 1, 0, 0, 1);
        m_question(&m, "example.com", 1);
        m_u8(&m, 0);
        m_rr(&m, 16, 0, 4);
        m_bytes(&m,
                "\x03"
                "abc",
                4);
        check_query_fail(&m, GW_DNS_FORMERR, "additional record other than an OPT");
        m_header(&m, 9, 0x0100, 1, 0, 0, 2);
        m_question(&m, "example.com", 1);
        m_opt(&m, 1232, NULL, 0);
        m_opt(&m, 1232, NULL, 0);
        check_query_fail(&m, GW_DNS_FORMERR, "more than one additional record");
        /* An OPT whose RDATA runs past the message. */
        m_header(&m, 9, 0x0100, 1, 0, 0, 1);
        m_question(&m, "example.com", 1);
        m_opt(&m, 1232, NULL, 0);
        m.b[m.n - 1] = 4;
        check_query_fail(&m, GW_DNS_FORMERR, "record runs past the message");
}
END_TEST

START_TEST(answers_built)
{
        msg m;
        gw_dns_query q;
        uint8_t out[2048];
        m_header(&m, 0xbeef, 0x0110, 1, 0, 0, 0); /* RD and CD */
        m_question(&m, "WWW.example.com", 1);
        ck_assert_int_eq(qparse(&m, &q), 0);

        ssize_t n = gw_dns_build_error(&q, GW_DNS_NXDOMAIN, out, sizeof(out));
        ck_assert_int_eq(n, (ssize_t)m.n);
        ck_assert_uint_eq(out[0] << 8 | out[1], 0xbeef);
        ck_assert_uint_eq(out[2] << 8 | out[3], 0x8000 | 0x0100 | 0x0080 | 0x0010 | 3);
        ck_assert_int_eq(memcmp(out + 4, "\x00\x01\x00\x00\x00\x00\x00\x00", 8), 0);
        ck_assert_int_eq(memcmp(out + 12, m.b + 12, m.n - 12), 0); /* the question as sent */
        ck_assert_int_eq(gw_dns_build_error(&q, GW_DNS_NXDOMAIN, out, (size_t)n - 1), -1);

        gw_dns_answer a;
        msg r;
        gw_dns_addr addrs[3] = {{.type = 1, .addr = {192, 0, 2, 1}, .ttl = 300},
                                {.type = 1, .addr = {192, 0, 2, 2}, .ttl = 30},
                                {.type = 1, .addr = {192, 0, 2, 1}, .ttl = 10}};
        n = gw_dns_build_answer(&q, addrs, 3, r.b, sizeof(r.b));
        ck_assert_int_eq(n, (ssize_t)m.n + 3 * 16);
        r.n = (size_t)n;
        ck_assert_int_eq(rparse(&r, 0xbeef, "www.example.com", 1, &a), 0);
        ck_assert_uint_eq(a.rcode, 0);
        ck_assert_uint_eq(a.naddrs, 2); /* the duplicate folded, with the smaller TTL */
        ck_assert_uint_eq(a.addrs[0].ttl, 10);
        ck_assert_uint_eq(a.addrs[1].ttl, 30);
        ck_assert_uint_eq(a.min_ttl, 10);
        ck_assert_uint_eq(a.cname_links, 0);

        /* Records that do not fit are left out, the count says so. */
        n = gw_dns_build_answer(&q, addrs, 3, r.b, m.n + 2 * 16 + 15);
        ck_assert_int_eq(n, (ssize_t)m.n + 2 * 16);
        ck_assert_uint_eq(r.b[7], 2);
        ck_assert_int_eq(gw_dns_build_answer(&q, addrs, 3, r.b, m.n - 1), -1);
        /* NODATA. */
        n = gw_dns_build_answer(&q, NULL, 0, r.b, sizeof(r.b));
        ck_assert_int_eq(n, (ssize_t)m.n);
        ck_assert_uint_eq(r.b[3] & 0xf, 0);
        /* Addresses of another type than asked. */
        gw_dns_addr v6 = {.type = GW_DNS_TYPE_AAAA, .addr = {0x20, 0x01, 0x0d, 0xb8}, .ttl = 5};
        ck_assert_int_eq(gw_dns_build_answer(&q, &v6, 1, r.b, sizeof(r.b)), -1);

        /* AAAA, with EDNS: the OPT comes back. */
        m_header(&m, 0x0102, 0x0100, 1, 0, 0, 1);
        m_question(&m, "v6.example.com", GW_DNS_TYPE_AAAA);
        m_opt(&m, 4096, NULL, 0);
        ck_assert_int_eq(qparse(&m, &q), 0);
        n = gw_dns_build_answer(&q, &v6, 1, r.b, sizeof(r.b));
        ck_assert_int_eq(n, (ssize_t)m.n + 2 + 10 + 16);
        ck_assert_uint_eq(r.b[11], 1);
        r.n = (size_t)n;
        ck_assert_int_eq(rparse(&r, 0x0102, "v6.example.com", GW_DNS_TYPE_AAAA, &a), 0);
        ck_assert_uint_eq(a.naddrs, 1);
        ck_assert_int_eq(memcmp(a.addrs[0].addr, v6.addr, 16), 0);
        n = gw_dns_build_error(&q, GW_DNS_REFUSED, r.b, sizeof(r.b));
        ck_assert_int_eq(n, (ssize_t)m.n);

        /* No question to echo. */
        m_header(&m, 0x0103, 0x0100, 0, 0, 0, 0);
        ck_assert_int_eq(qparse(&m, &q), GW_DNS_FORMERR);
        ck_assert_int_eq(gw_dns_build_error(&q, GW_DNS_FORMERR, out, sizeof(out)), 12);
        ck_assert_uint_eq(out[5], 0);
        ck_assert_int_eq(gw_dns_build_answer(&q, NULL, 0, out, sizeof(out)), -1);
}
END_TEST

START_TEST(upstream_query)
{
        msg m;
        gw_dns_query q;
        ssize_t n = gw_dns_build_query(0x4242, "Cdn.Example.NET.", GW_DNS_TYPE_A, m.b, sizeof(m.b));
        ck_assert_int_gt(n, 0);
        m.n = (size_t)n;
        ck_assert_int_eq(qparse(&m, &q), 0);
        ck_assert_uint_eq(q.id, 0x4242);
        ck_assert_str_eq(q.name, "cdn.example.net");
        ck_assert(q.flags & 0x0100);
        ck_assert(q.edns);
        ck_assert_uint_eq(q.edns_udp_size, GW_DNS_UDP_MAX);
        ck_assert_int_gt(gw_dns_build_query(1, "a.example", GW_DNS_TYPE_AAAA, m.b, sizeof(m.b)), 0);
        ck_assert_int_eq(gw_dns_build_query(1, "a.example", 16, m.b, sizeof(m.b)), -1);
        ck_assert_int_eq(gw_dns_build_query(1, "a..example", 1, m.b, sizeof(m.b)), -1);
        ck_assert_int_eq(gw_dns_build_query(1, "", 1, m.b, sizeof(m.b)), -1);
        ck_assert_int_eq(gw_dns_build_query(1, "a.example", 1, m.b, 20), -1);
}
END_TEST

START_TEST(upstream_checks)
{
        msg m;
        gw_dns_answer a;
        m_header(&m, 5, 0x8180, 1, 1, 0, 0);
        m_question(&m, "www.example.com", 1);
        m_a(&m, 12, 60, 1);
        ck_assert_int_eq(rparse(&m, 5, "WWW.example.com.", 1, &a), 0);
        ck_assert_uint_eq(a.naddrs, 1);
        ck_assert_int_eq(rparse(&m, 6, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "id does not match the query");
        ck_assert_int_eq(rparse(&m, 5, "ww.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "question does not match the query");
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 28, &a), -1);
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 16, &a), -1);
        m.b[2] = 0x01; /* not a response */
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), -1);
        m.b[2] = 0x83; /* TC */
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), -1);
        ck_assert(a.truncated);
        ck_assert_uint_eq(a.naddrs, 0);
        m.b[2] = 0x81;
        /* The record cut short, its RDATA too long. */
        m.n--;
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "record runs past the message");
        m_header(&m, 5, 0x8180, 1, 1, 0, 0);
        m_question(&m, "www.example.com", 1);
        m_ptr(&m, 12);
        m_rr(&m, 1, 60, 5);
        m_bytes(&m, "\1\2\3\4\5", 5);
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "address record of a bad length");
        /* An oversize label in an owner name. */
        m_header(&m, 5, 0x8180, 1, 1, 0, 0);
        m_question(&m, "www.example.com", 1);
        m_u8(&m, 64);
        memset(m.b + m.n, 'a', 64);
        m.n += 64;
        m_u8(&m, 0);
        m_rr(&m, 1, 60, 4);
        m_u32(&m, 1);
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "unknown label type");

        /* Error answers, with and without the question. */
        m_header(&m, 5, 0x8183, 1, 0, 0, 0);
        m_question(&m, "www.example.com", 1);
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), 0);
        ck_assert_uint_eq(a.rcode, GW_DNS_NXDOMAIN);
        ck_assert_uint_eq(a.naddrs, 0);
        m_header(&m, 5, 0x8182, 0, 0, 0, 0);
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), 0);
        ck_assert_uint_eq(a.rcode, GW_DNS_SERVFAIL);
        m_header(&m, 5, 0x8180, 0, 0, 0, 0);
        ck_assert_int_eq(rparse(&m, 5, "www.example.com", 1, &a), -1);
}
END_TEST

START_TEST(cname_chains)
{
        msg m;
        gw_dns_answer a;
        /* www -> cdn -> edge, the records out of order, others ignored. */
        m_header(&m, 1, 0x8180, 1, 0, 0, 0);
        m_question(&m, "www.example.com", 1);
        size_t edge_at = m.n;
        m_name(&m, "edge.example.net");
        m_rr(&m, 1, 20, 4);
        m_bytes(&m, (uint8_t[]){198, 51, 100, 7}, 4);
        size_t cdn_at = m_cname(&m, 12, 300, "cdn.example.net");
        m_ptr(&m, cdn_at);
        m_rr(&m, 5, 50, 2);
        m_ptr(&m, edge_at);
        m_name(&m, "other.example.org"); /* not on the chain */
        m_rr(&m, 1, 1, 4);
        m_bytes(&m, (uint8_t[]){203, 0, 113, 9}, 4);
        m_a(&m, edge_at, 600, 8);
        set_counts(&m, 5, 0, 0);
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), 0);
        ck_assert_uint_eq(a.cname_links, 2);
        ck_assert_uint_eq(a.naddrs, 2);
        ck_assert_uint_eq(a.addrs[0].addr[0], 198);
        ck_assert_uint_eq(a.addrs[0].ttl, 20);
        ck_assert_uint_eq(a.addrs[1].addr[3], 8);
        ck_assert_uint_eq(a.addrs[1].ttl, 50); /* held by the shorter CNAME */
        ck_assert_uint_eq(a.min_ttl, 20);

        /* A loop: www -> x -> www. */
        m_header(&m, 1, 0x8180, 1, 2, 0, 0);
        m_question(&m, "www.example.com", 1);
        size_t x_at = m_cname(&m, 12, 60, "x.example.com");
        m_ptr(&m, x_at);
        m_rr(&m, 5, 60, 2);
        m_ptr(&m, 12);
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "CNAME chain too long or looping");

        /* GW_DNS_MAX_CNAME links are followed, one more is not. */
        for (int links = GW_DNS_MAX_CNAME; links <= GW_DNS_MAX_CNAME + 1; links++) {
                m_header(&m, 1, 0x8180, 1, (unsigned)links + 1, 0, 0);
                m_question(&m, "c0.example.com", 1);
                size_t owner = 12;
                for (int i = 1; i <= links; i++) {
                        char t[32];
                        snprintf(t, sizeof(t), "c%d.example.com", i);
                        owner = m_cname(&m, owner, 60, t);
                }
                m_a(&m, owner, 60, 1);
                int r = rparse(&m, 1, "c0.example.com", 1, &a);
                ck_assert_int_eq(r, links <= GW_DNS_MAX_CNAME ? 0 : -1);
                if (r == 0)
                        ck_assert_uint_eq(a.naddrs, 1);
        }

        /* Two CNAMEs for one name; a CNAME beside an address. */
        m_header(&m, 1, 0x8180, 1, 2, 0, 0);
        m_question(&m, "www.example.com", 1);
        m_cname(&m, 12, 60, "a.example.com");
        m_cname(&m, 12, 60, "b.example.com");
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "two CNAME records for one name");
        m_header(&m, 1, 0x8180, 1, 2, 0, 0);
        m_question(&m, "www.example.com", 1);
        m_cname(&m, 12, 60, "a.example.com");
        m_a(&m, 12, 60, 1);
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "a CNAME and addresses for one name");
        /* A CNAME whose RDLENGTH is longer than its name. */
        m_header(&m, 1, 0x8180, 1, 1, 0, 0);
        m_question(&m, "www.example.com", 1);
        m_ptr(&m, 12);
        m_rr(&m, 5, 60, 4);
        m_ptr(&m, 12);
        m_u16(&m, 0);
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "CNAME target does not fill its record");
}
END_TEST

START_TEST(compression)
{
        msg m;
        gw_dns_answer a;
        /* A pointer to itself, forwards, into the header. */
        static const struct {
                int target; /* -1: the pointer's own offset, -2: past it */
                const char *reason;
        } bad[] = {{-1, "compression pointer not pointing backwards"},
                   {-2, "compression pointer not pointing backwards"},
                   {4, "compression pointer into the header"}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                m_header(&m, 1, 0x8180, 1, 1, 0, 0);
                m_question(&m, "www.example.com", 1);
                size_t at = m.n;
                m_ptr(&m, bad[i].target == -1 ? at : bad[i].target == -2 ? at + 2 : (size_t)bad[i].target);
                m_rr(&m, 1, 60, 4);
                m_u32(&m, 1);
                ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), -1);
                ck_assert_str_eq(a.reason, bad[i].reason);
        }
        /* Two pointers to each other: the loop is cut at the one that
         * points forwards. */
        m_header(&m, 1, 0x8180, 1, 1, 0, 0);
        m_question(&m, "www.example.com", 1);
        size_t p = m.n;
        m_u8(&m, 1);
        m_bytes(&m, "a", 1);
        m_ptr(&m, p + 4);
        m_ptr(&m, p);
        m_rr(&m, 1, 60, 4);
        m_u32(&m, 1);
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "compression pointer not pointing backwards");

        /* A chain of pointers, each to the one before: GW_DNS_MAX_JUMPS are
         * followed, one more is not. */
        for (int jumps = GW_DNS_MAX_JUMPS; jumps <= GW_DNS_MAX_JUMPS + 1; jumps++) {
                m_header(&m, 1, 0x8180, 1, 2, 0, 0);
                m_question(&m, "www.example.com", 1);
                /* A record of an unknown type whose RDATA is the chain. */
                m_ptr(&m, 12);
                m_rr(&m, 99, 60, (unsigned)(2 * jumps - 2));
                size_t prev = 12;
                for (int i = 0; i < jumps - 1; i++) {
                        size_t here = m.n;
                        m_ptr(&m, prev);
                        prev = here;
                }
                m_ptr(&m, prev);
                m_rr(&m, 1, 60, 4);
                m_u32(&m, 1);
                int r = rparse(&m, 1, "www.example.com", 1, &a);
                if (jumps <= GW_DNS_MAX_JUMPS) {
                        ck_assert_int_eq(r, 0);
                        ck_assert_uint_eq(a.naddrs, 1);
                } else {
                        ck_assert_int_eq(r, -1);
                        ck_assert_str_eq(a.reason, "too many compression pointers in a name");
                }
        }

        /* A name of more than 255 bytes made of pointers to labels. */
        m_header(&m, 1, 0x8180, 1, 2, 0, 0);
        m_question(&m, "www.example.com", 1);
        m_ptr(&m, 12);
        m_rr(&m, 99, 60, 4 * 64);
        size_t prev = 12;
        for (int i = 0; i < 4; i++) {
                size_t here = m.n;
                m_u8(&m, 61);
                memset(m.b + m.n, 'z', 61);
                m.n += 61;
                m_ptr(&m, prev);
                prev = here;
        }
        m_ptr(&m, prev);
        m_rr(&m, 1, 60, 4);
        m_u32(&m, 1);
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), -1);
        ck_assert_str_eq(a.reason, "name longer than 255 bytes");
}
END_TEST

START_TEST(many_addresses)
{
        msg m;
        gw_dns_answer a;
        m_header(&m, 1, 0x8180, 1, 40, 0, 0);
        m_question(&m, "www.example.com", 1);
        for (int i = 0; i < 40; i++)
                m_a(&m, 12, i == 3 ? 0x80000000u : 100u + (uint32_t)i, (uint8_t)i);
        ck_assert_int_eq(rparse(&m, 1, "www.example.com", 1, &a), 0);
        ck_assert_uint_eq(a.naddrs, GW_DNS_MAX_ADDRS);
        ck_assert_uint_eq(a.addrs[3].ttl, 0); /* the top bit set reads as 0 */
        ck_assert_uint_eq(a.min_ttl, 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("gateway_dns");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, query_from_libresolv);
        tcase_add_test(tc, query_header);
        tcase_add_test(tc, query_names);
        tcase_add_test(tc, query_edns);
        tcase_add_test(tc, answers_built);
        tcase_add_test(tc, upstream_query);
        tcase_add_test(tc, upstream_checks);
        tcase_add_test(tc, cname_chains);
        tcase_add_test(tc, compression);
        tcase_add_test(tc, many_addresses);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
