/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the ClientHello reader of the egress gateway (gateway/wire/
 * sni.h) over ClientHellos built here byte by byte — whole, split across
 * records, cut at every length, with ECH, ESNI, two names, bad names — and
 * over one that OpenSSL writes. */
#include <openssl/ssl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/sni.h"
#include "harness.h"
#include "space/cleanup.h"

#define BUF 40000

typedef struct hello_spec {
        const char *names[3]; /* entries of the server_name extension */
        size_t name_lens[3]; /* 0: strlen */
        uint8_t name_type;
        int sni_exts; /* server_name extensions: 1 by default (-1: none) */
        bool ech, esni, ech_first;
        bool no_extensions;
        size_t pad; /* bytes of a padding extension */
        uint16_t version;
} hello_spec;

static uint8_t *put16(uint8_t *p, size_t v)
{
        p[0] = (uint8_t)(v >> 8);
        p[1] = (uint8_t)v;
        return p + 2;
}

static uint8_t *put_ext(uint8_t *p, uint16_t type, const uint8_t *body, size_t n)
{
        p = put16(p, type);
        p = put16(p, n);
        if (n)
                memcpy(p, body, n);
        return p + n;
}

static uint8_t *put_sni(uint8_t *p, const hello_spec *s)
{
        uint8_t list[1024], *q = list;
        for (size_t i = 0; i < 3 && s->names[i]; i++) {
                size_t n = s->name_lens[i] ? s->name_lens[i] : strlen(s->names[i]);
                *q++ = s->name_type;
                q = put16(q, n);
                memcpy(q, s->names[i], n);
                q += n;
        }
        uint8_t body[1100];
        put16(body, (size_t)(q - list));
        memcpy(body + 2, list, (size_t)(q - list));
        return put_ext(p, 0x0000, body, (size_t)(q - list) + 2);
}

/* A handshake message: ClientHello with typical TLS 1.3 extensions. */
static size_t hello_msg(const hello_spec *s, uint8_t *out)
{
        static const uint8_t versions[] = {0x04, 0x03, 0x04, 0x03, 0x03};
        static const uint8_t groups[] = {0x00, 0x04, 0x00, 0x1d, 0x00, 0x17};
        static const uint8_t ech[] = {0x00, 0x00, 0x01, 0x00, 0x01, 0x42, 0x00, 0x00, 0x00};
        uint8_t *p = out + 4;
        p = put16(p, s->version ? s->version : 0x0303);
        memset(p, 0xab, 32);
        p += 32;
        *p++ = 32; /* legacy_session_id */
        memset(p, 0xcd, 32);
        p += 32;
        p = put16(p, 6);
        memcpy(p, "\x13\x01\x13\x02\xc0\x2f", 6);
        p += 6;
        *p++ = 1;
        *p++ = 0;
        if (!s->no_extensions) {
                uint8_t *ext_len = p;
                p += 2;
                p = put_ext(p, 0xdada, NULL, 0); /* GREASE */
                if (s->ech && s->ech_first)
                        p = put_ext(p, 0xfe0d, ech, sizeof(ech));
                int n = s->sni_exts ? s->sni_exts : 1;
                for (int i = 0; i < n && s->sni_exts >= 0; i++)
                        p = put_sni(p, s);
                p = put_ext(p, 0x002b, versions, sizeof(versions));
                p = put_ext(p, 0x000a, groups, sizeof(groups));
                if (s->ech && !s->ech_first)
                        p = put_ext(p, 0xfe0d, ech, sizeof(ech));
                if (s->esni)
                        p = put_ext(p, 0xffce, ech, sizeof(ech));
                if (s->pad) {
                        p = put16(p, 0x0015);
                        p = put16(p, s->pad);
                        memset(p, 0, s->pad);
                        p += s->pad;
                }
                put16(ext_len, (size_t)(p - ext_len - 2));
        }
        size_t body = (size_t)(p - out - 4);
        out[0] = 1;
        out[1] = (uint8_t)(body >> 16);
        out[2] = (uint8_t)(body >> 8);
        out[3] = (uint8_t)body;
        return body + 4;
}

/* The message in handshake records of at most frag bytes. */
static size_t records(const uint8_t *msg, size_t n, size_t frag, uint8_t *out)
{
        size_t o = 0;
        for (size_t i = 0; i < n; i += frag) {
                size_t k = n - i < frag ? n - i : frag;
                out[o++] = 0x16;
                out[o++] = 0x03;
                out[o++] = 0x01;
                put16(out + o, k);
                o += 2;
                memcpy(out + o, msg + i, k);
                o += k;
        }
        return o;
}

static size_t build(const hello_spec *s, size_t frag, uint8_t *out)
{
        static uint8_t msg[BUF];
        size_t n = hello_msg(s, msg);
        return records(msg, n, frag, out);
}

static gw_sni_result parse(const uint8_t *d, size_t n, gw_sni_info *info)
{
        /* An exact-size copy, so that a read past the end is caught. */
        uint8_t *copy = malloc(n ? n : 1);
        ck_assert_ptr_nonnull(copy);
        memcpy(copy, d, n);
        gw_sni_result r = gw_sni_parse(copy, n, info);
        free(copy);
        return r;
}

/* Every proper prefix asks for more; the whole gives want_name. */
static void check_prefixes(const uint8_t *d, size_t n, const char *want_name)
{
        gw_sni_info info;
        for (size_t i = 0; i < n; i++) {
                gw_sni_result r = parse(d, i, &info);
                if (r != GW_SNI_NEED_MORE)
                        ck_abort_msg("prefix of %zu of %zu bytes: %s (%s)", i, n, gw_sni_result_name(r),
                                     info.reason ? info.reason : "");
        }
        ck_assert_int_eq(parse(d, n, &info), GW_SNI_OK);
        ck_assert_str_eq(info.name, want_name);
        ck_assert_uint_eq(info.hello_end, n);
}

static gw_sni_result parse_spec(const hello_spec *s, gw_sni_info *info)
{
        static uint8_t buf[BUF];
        size_t n = build(s, 16384, buf);
        return parse(buf, n, info);
}

START_TEST(one_record)
{
        static uint8_t buf[BUF];
        hello_spec s = {.names = {"Api.Example.COM"}};
        size_t n = build(&s, 16384, buf);
        gw_sni_info info;
        ck_assert_int_eq(parse(buf, n, &info), GW_SNI_OK);
        ck_assert_str_eq(info.name, "api.example.com");
        ck_assert_uint_eq(info.record_version, 0x0301);
        ck_assert_uint_eq(info.hello_version, 0x0303);
        ck_assert_ptr_null(info.reason);
        check_prefixes(buf, n, "api.example.com");

        /* Bytes after the ClientHello's record (early data) are not read. */
        memcpy(buf + n, "\x17\x03\x03\x00\x02zz", 7);
        ck_assert_int_eq(parse(buf, n + 7, &info), GW_SNI_OK);
        ck_assert_uint_eq(info.hello_end, n);
}
END_TEST

START_TEST(split_records)
{
        static const size_t frags[] = {1, 2, 3, 4, 5, 7, 64, 100, 255};
        static uint8_t buf[BUF];
        hello_spec s = {.names = {"www.example.org"}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(frags); i++) {
                size_t n = build(&s, frags[i], buf);
                check_prefixes(buf, n, "www.example.org");
        }
}
END_TEST

START_TEST(no_sni)
{
        gw_sni_info info;
        hello_spec s = {.sni_exts = -1};
        ck_assert_int_eq(parse_spec(&s, &info), GW_SNI_NO_SNI);
        ck_assert_str_eq(info.name, "");
        hello_spec bare = {.no_extensions = true};
        ck_assert_int_eq(parse_spec(&bare, &info), GW_SNI_NO_SNI);
        ck_assert_uint_eq(info.hello_version, 0x0303);
}
END_TEST

START_TEST(refusals)
{
        gw_sni_info info;
        hello_spec ech = {.names = {"example.com"}, .ech = true};
        ck_assert_int_eq(parse_spec(&ech, &info), GW_SNI_REFUSED);
        ck_assert_str_eq(info.reason, "Encrypted Client Hello");
        ck_assert_str_eq(info.name, ""); /* not handed out after all */
        ech.ech_first = true;
        ck_assert_int_eq(parse_spec(&ech, &info), GW_SNI_REFUSED);
        hello_spec ech_only = {.sni_exts = -1, .ech = true};
        ck_assert_int_eq(parse_spec(&ech_only, &info), GW_SNI_REFUSED);
        hello_spec esni = {.names = {"example.com"}, .esni = true};
        ck_assert_int_eq(parse_spec(&esni, &info), GW_SNI_REFUSED);
        ck_assert_str_eq(info.reason, "encrypted server name (ESNI)");

        hello_spec two_names = {.names = {"allowed.com", "blocked.com"}};
        ck_assert_int_eq(parse_spec(&two_names, &info), GW_SNI_REFUSED);
        ck_assert_str_eq(info.reason, "more than one name in server_name");
        hello_spec two_exts = {.names = {"allowed.com"}, .sni_exts = 2};
        ck_assert_int_eq(parse_spec(&two_exts, &info), GW_SNI_REFUSED);
        ck_assert_str_eq(info.reason, "more than one server_name extension");
        hello_spec other_type = {.names = {"allowed.com"}, .name_type = 1};
        ck_assert_int_eq(parse_spec(&other_type, &info), GW_SNI_REFUSED);
}
END_TEST

START_TEST(bad_names)
{
        static const char *bad[] = {"10.0.0.1",       "127.1", "0x7f000001",      "2130706433", "example.com.",
                                    ".example.com",   "a..b",  "a_b.example.com", "a b.com",    "exa*mple.com",
                                    "ex\xc3\xa9.com", "::1",   "[::1]",           "a/b.com",    "a:443"};
        gw_sni_info info;
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                hello_spec s = {.names = {bad[i]}};
                if (parse_spec(&s, &info) != GW_SNI_REFUSED)
                        ck_abort_msg("%s was not refused", bad[i]);
                ck_assert_ptr_nonnull(info.reason);
        }
        hello_spec nul = {.names = {"allowed.com\0.evil.com"}, .name_lens = {21}};
        ck_assert_int_eq(parse_spec(&nul, &info), GW_SNI_REFUSED);
        ck_assert_str_eq(info.reason, "NUL in server name");

        char label[64], name[300];
        memset(label, 'a', 63);
        label[63] = '\0';
        snprintf(name, sizeof(name), "%s.%s.%s.%s", label, label, label, label); /* 255 bytes */
        hello_spec too_long = {.names = {name}};
        ck_assert_int_eq(parse_spec(&too_long, &info), GW_SNI_REFUSED);
        name[253] = '\0'; /* 253 bytes, ending in a 61-byte label */
        hello_spec longest = {.names = {name}};
        ck_assert_int_eq(parse_spec(&longest, &info), GW_SNI_OK);
        ck_assert_uint_eq(strlen(info.name), 253);
        snprintf(name, sizeof(name), "%sa.com", label); /* a 64-byte label */
        hello_spec long_label = {.names = {name}};
        ck_assert_int_eq(parse_spec(&long_label, &info), GW_SNI_REFUSED);
        hello_spec empty = {.names = {""}};
        ck_assert_int_eq(parse_spec(&empty, &info), GW_SNI_MALFORMED);
}
END_TEST

START_TEST(not_tls)
{
        gw_sni_info info;
        const uint8_t *get = (const uint8_t *)"GET / HTTP/1.1\r\n";
        ck_assert_int_eq(gw_sni_parse(get, 16, &info), GW_SNI_NOT_TLS);
        ck_assert_int_eq(gw_sni_parse(get, 1, &info), GW_SNI_NOT_TLS);
        ck_assert_int_eq(gw_sni_is_tls(get, 16), 0);
        ck_assert_int_eq(gw_sni_is_tls(get, 0), -1);
        ck_assert_int_eq(gw_sni_is_tls((const uint8_t *)"\x16", 1), 1);
        ck_assert_int_eq(gw_sni_parse(get, 0, &info), GW_SNI_NEED_MORE);
        ck_assert_int_eq(gw_sni_parse((const uint8_t *)"\x16\x03", 2, &info), GW_SNI_NEED_MORE);
        ck_assert_uint_eq(info.record_version, 0);
        ck_assert_int_eq(gw_sni_parse((const uint8_t *)"\x16\x03\x01", 3, &info), GW_SNI_NEED_MORE);
        ck_assert_uint_eq(info.record_version, 0x0301);
        /* An SSLv2-compatible hello is not TLS to this reader. */
        ck_assert_int_eq(gw_sni_parse((const uint8_t *)"\x80\x2e\x01\x03\x01", 5, &info), GW_SNI_NOT_TLS);
}
END_TEST

START_TEST(framing)
{
        static uint8_t buf[BUF];
        gw_sni_info info;
        hello_spec s = {.names = {"example.com"}};
        size_t n = build(&s, 100, buf);

        /* An alert between two of the ClientHello's records. */
        static uint8_t mixed[BUF];
        memcpy(mixed, buf, 105);
        memcpy(mixed + 105, "\x15\x03\x03\x00\x02\x01\x00", 7);
        memcpy(mixed + 112, buf + 105, n - 105);
        ck_assert_int_eq(parse(mixed, n + 7, &info), GW_SNI_REFUSED);
        ck_assert_int_eq(parse(mixed, 106, &info), GW_SNI_REFUSED); /* decided on its first byte */

        /* A record of length 0, or over 2^14. */
        ck_assert_int_eq(parse((const uint8_t *)"\x16\x03\x01\x00\x00", 5, &info), GW_SNI_MALFORMED);
        ck_assert_int_eq(parse((const uint8_t *)"\x16\x03\x01\x40\x01", 5, &info), GW_SNI_MALFORMED);
        /* Record version 2.x. */
        ck_assert_int_eq(parse((const uint8_t *)"\x16\x02\x00", 3, &info), GW_SNI_MALFORMED);

        /* A ServerHello first. */
        memcpy(mixed, buf, n);
        mixed[5] = 2;
        ck_assert_int_eq(parse(mixed, n, &info), GW_SNI_MALFORMED);

        /* Another handshake message after it in its last record. */
        size_t one = build(&s, 16384, buf);
        put16(buf + 3, ((size_t)buf[3] << 8 | buf[4]) + 4);
        memcpy(buf + one, "\x14\x00\x00\x00", 4);
        ck_assert_int_eq(parse(buf, one + 4, &info), GW_SNI_MALFORMED);

        /* Extensions whose length disagrees with the message's. */
        one = build(&s, 16384, buf);
        size_t ext_len_at = 5 + 4 + 2 + 32 + 1 + 32 + 2 + 6 + 2;
        size_t ext_len = (size_t)buf[ext_len_at] << 8 | buf[ext_len_at + 1];
        put16(buf + ext_len_at, ext_len + 1);
        ck_assert_int_eq(parse(buf, one, &info), GW_SNI_MALFORMED);
        put16(buf + ext_len_at, ext_len - 1);
        ck_assert_int_eq(parse(buf, one, &info), GW_SNI_MALFORMED);
}
END_TEST

START_TEST(size_bound)
{
        static uint8_t buf[BUF];
        gw_sni_info info;
        /* Just fits: one record ending at 16384 bytes. */
        hello_spec s = {.names = {"example.com"}};
        size_t base = build(&s, 16384, buf);
        s.pad = GW_SNI_MAX - base - 4;
        size_t n = build(&s, 16384, buf);
        ck_assert_uint_eq(n, GW_SNI_MAX);
        ck_assert_int_eq(parse(buf, n, &info), GW_SNI_OK);
        /* One byte more: refused as soon as the record header says so. */
        s.pad++;
        n = build(&s, 16384, buf);
        ck_assert_int_eq(parse(buf, 5, &info), GW_SNI_REFUSED);
        ck_assert_str_eq(info.reason, "ClientHello larger than 16384 bytes");
        /* Over two records: refused once the handshake header is in. */
        n = build(&s, 8000, buf);
        ck_assert_int_eq(parse(buf, 8005, &info), GW_SNI_REFUSED);
        /* A small ClientHello in so many records that they pass the bound. */
        hello_spec small = {.names = {"example.com"}, .pad = 3000};
        n = build(&small, 1, buf);
        ck_assert_uint_gt(n, GW_SNI_MAX);
        ck_assert_int_eq(parse(buf, n, &info), GW_SNI_REFUSED);
        /* Records of 6 bytes: the one ending at 16380 leaves no room for
         * another header within the bound. */
        ck_assert_int_eq(parse(buf, 16379, &info), GW_SNI_NEED_MORE);
        ck_assert_int_eq(parse(buf, 16380, &info), GW_SNI_REFUSED);
}
END_TEST

/* Every byte changed to a few values: whatever the answer, an OK name is in
 * normal form and no IP literal, and nothing reads past the input. */
START_TEST(mutations)
{
        static uint8_t buf[BUF];
        static const uint8_t values[] = {0x00, 0x01, 0x2e, 0x41, 0x7f, 0xff};
        hello_spec s = {.names = {"a.example.com"}};
        size_t n = build(&s, 50, buf);
        for (size_t i = 0; i < n; i++) {
                uint8_t keep = buf[i];
                for (size_t v = 0; v < SP_ARRAY_SIZE(values); v++) {
                        buf[i] = values[v];
                        gw_sni_info info;
                        gw_sni_result r = parse(buf, n, &info);
                        if (r == GW_SNI_OK) {
                                char again[GW_NAME_MAX + 1];
                                size_t len = strlen(info.name);
                                ck_assert_int_eq(gw_name_normalize(info.name, len, 0, again, NULL), (int)len);
                                ck_assert_str_eq(again, info.name);
                                ck_assert(!gw_name_is_ip_literal(info.name, len));
                        } else {
                                ck_assert_str_eq(info.name, "");
                        }
                }
                buf[i] = keep;
        }
}
END_TEST

/* The first flight of a real client: OpenSSL's ClientHello for a host. */
static size_t openssl_hello(const char *host, int max_version, uint8_t *out, size_t cap)
{
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        ck_assert_ptr_nonnull(ctx);
        if (max_version)
                SSL_CTX_set_max_proto_version(ctx, max_version);
        SSL *ssl = SSL_new(ctx);
        ck_assert_ptr_nonnull(ssl);
        BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
        SSL_set_bio(ssl, rb, wb);
        ck_assert_int_eq(SSL_set_tlsext_host_name(ssl, host), 1);
        SSL_set_connect_state(ssl);
        ck_assert_int_eq(SSL_do_handshake(ssl), -1); /* waits for the server */
        char *p;
        long n = BIO_get_mem_data(wb, &p);
        ck_assert_int_gt(n, 0);
        ck_assert_uint_le((size_t)n, cap);
        memcpy(out, p, (size_t)n);
        SSL_free(ssl);
        SSL_CTX_free(ctx);
        return (size_t)n;
}

START_TEST(openssl_client)
{
        static uint8_t buf[BUF];
        size_t n = openssl_hello("Download.Example.NET", 0, buf, sizeof(buf));
        check_prefixes(buf, n, "download.example.net");
        n = openssl_hello("tls12.example.net", TLS1_2_VERSION, buf, sizeof(buf));
        check_prefixes(buf, n, "tls12.example.net");

        /* The same bytes re-framed in small records still read the same. */
        static uint8_t msg[BUF], split[BUF];
        size_t body = (size_t)buf[3] << 8 | buf[4];
        ck_assert_uint_eq(body + 5, n);
        memcpy(msg, buf + 5, body);
        size_t m = records(msg, body, 37, split);
        check_prefixes(split, m, "tls12.example.net");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("gateway_sni");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, one_record);
        tcase_add_test(tc, split_records);
        tcase_add_test(tc, no_sni);
        tcase_add_test(tc, refusals);
        tcase_add_test(tc, bad_names);
        tcase_add_test(tc, not_tls);
        tcase_add_test(tc, framing);
        tcase_add_test(tc, size_bound);
        tcase_add_test(tc, mutations);
        tcase_add_test(tc, openssl_client);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
