/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: space-e2b's streaming multipart/form-data reader (compat/e2b/
 * multipart.h). Parts, their filenames and bytes are read the same however
 * the body arrives (whole, in pieces, byte by byte); the boundary is 1 to
 * 70 bytes, quoted or not; a part's headers are at most E2B_MP_MAX_HEAD
 * bytes whatever the pieces; truncated bodies, unterminated headers and
 * filenames, missing or bad boundaries are refused; a failing source's
 * error comes through.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "multipart.h"
#include "space/buf.h"
#include "space/cleanup.h"

typedef struct source {
        const char *p;
        size_t n, off, piece;
        bool fail; /* at the end of the bytes: an error instead of EOF */
} source;

static ssize_t pull(void *buf, size_t cap, void *userdata, sp_error **err)
{
        source *s = userdata;
        size_t n = s->n - s->off;
        if (n == 0 && s->fail)
                return sp_error_set(err, SP_E_IO, "the client went away");
        if (s->piece && n > s->piece)
                n = s->piece;
        if (n > cap)
                n = cap;
        memcpy(buf, s->p + s->off, n);
        s->off += n;
        return (ssize_t)n;
}

/* Reads body as files.c does into log ("name|bytes\n" per part, "-" for a
 * part without a filename). Returns 0 at the closing delimiter, else the
 * error's code with its message in *msg (malloc'd). */
static int read_all(const char *ctype, const char *body, size_t n, size_t piece, bool fail, sp_buf *log, char **msg)
{
        source s = {.p = body, .n = n, .piece = piece, .fail = fail};
        e2b_mp m;
        _cleanup_error_ sp_error *e = NULL;
        *msg = NULL;
        if (e2b_mp_init(&m, ctype, pull, &s, &e) < 0) {
                *msg = strdup(e->message);
                return e->code;
        }
        char buf[7]; /* small, so parts come in several reads */
        ssize_t r;
        while ((r = e2b_mp_read(buf, sizeof(buf), &m, &e)) > 0)
                ;
        while (r == 0) {
                _cleanup_free_ char *name = NULL;
                int more = e2b_mp_next(&m, &name, &e);
                if (more <= 0) {
                        r = more;
                        break;
                }
                sp_buf_appendf(log, NULL, "%s|", name ? name : "-");
                while ((r = e2b_mp_read(buf, sizeof(buf), &m, &e)) > 0)
                        sp_buf_append(log, buf, (size_t)r, NULL);
                sp_buf_append(log, "\n", 1, NULL);
        }
        e2b_mp_free(&m);
        if (r == 0)
                return 0;
        ck_assert_ptr_nonnull(e);
        *msg = strdup(e->message);
        return e->code;
}

/* Reads body whole, in pieces of 1, 2, 3 and 5 bytes: the same each time. */
static int read_every_way(const char *ctype, const char *body, size_t n, sp_buf *log, char **msg)
{
        int code = read_all(ctype, body, n, 0, false, log, msg);
        static const size_t pieces[] = {1, 2, 3, 5};
        for (size_t i = 0; i < SP_ARRAY_SIZE(pieces); i++) {
                _cleanup_buf_ sp_buf other = SP_BUF_INIT;
                _cleanup_free_ char *m = NULL;
                ck_assert_int_eq(read_all(ctype, body, n, pieces[i], false, &other, &m), code);
                ck_assert_str_eq(other.data ? other.data : "", log->data ? log->data : "");
                ck_assert_str_eq(m ? m : "", *msg ? *msg : "");
        }
        return code;
}

static void expect_parts(const char *ctype, const char *body, const char *want)
{
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        _cleanup_free_ char *msg = NULL;
        int code = read_every_way(ctype, body, strlen(body), &log, &msg);
        ck_assert_msg(code == 0, "%s: %s", body, msg);
        ck_assert_str_eq(log.data ? log.data : "", want);
}

static void expect_refused(const char *ctype, const char *body, size_t n, int code, const char *message)
{
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        _cleanup_free_ char *msg = NULL;
        ck_assert_int_eq(read_every_way(ctype, body, n, &log, &msg), code);
        ck_assert_msg(strstr(msg, message), "%s: %s", body, msg);
}

START_TEST(parts)
{
        const char *ct = "multipart/form-data; boundary=XyZ";
        expect_parts(ct,
                     "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/tmp/a.txt\"\r\n"
                     "\r\nhello\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b\"\r\n"
                     "Content-Type: application/octet-stream\r\n\r\nwor\r\nld\r\n--XyZ--\r\nepilogue",
                     "/tmp/a.txt|hello\nb|wor\r\nld\n");
        /* No preamble; a part without a filename; an empty part; no headers at all. */
        expect_parts(ct,
                     "--XyZ\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n--XyZ\r\n"
                     "Content-Disposition: form-data; filename=\"e\"\r\n\r\n\r\n--XyZ\r\n\r\nbare\r\n--XyZ--",
                     "-|x\ne|\n-|bare\n");
        /* Bytes that start like the delimiter but are not it stay in the part. */
        expect_parts(ct,
                     "--XyZ\r\nContent-Disposition: form-data; filename=\"d\"\r\n\r\n\r\n--XyY \r\n--Xy\r\n-\r\r\n"
                     "--XyZ--",
                     "d|\r\n--XyY \r\n--Xy\r\n-\r\n");
        /* Only the closing delimiter: no part. */
        expect_parts(ct, "--XyZ--\r\n", "");
}
END_TEST

START_TEST(boundaries)
{
        expect_parts("multipart/form-data; boundary=\"a b;c\"",
                     "--a b;c\r\nContent-Disposition: form-data; filename=\"q\"\r\n\r\n1\r\n--a b;c--", "q|1\n");
        expect_parts("multipart/form-data; charset=utf-8; BOUNDARY=zz; x=y",
                     "--zz\r\nContent-Disposition: form-data; filename=\"u\"\r\n\r\n2\r\n--zz--", "u|2\n");
        char ct[200], body[400];
        char b70[71];
        memset(b70, 'b', 70);
        b70[70] = '\0';
        snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%s", b70);
        snprintf(body, sizeof(body), "--%s\r\nContent-Disposition: form-data; filename=\"l\"\r\n\r\n3\r\n--%s--", b70,
                 b70);
        expect_parts(ct, body, "l|3\n");
        snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%sb", b70);
        expect_refused(ct, body, strlen(body), SP_E_INVALID, "malformed multipart boundary");
        expect_refused("multipart/form-data", "", 0, SP_E_INVALID, "without a boundary");
        expect_refused("multipart/form-data; boundary=", "", 0, SP_E_INVALID, "malformed multipart boundary");
        expect_refused("multipart/form-data; boundary=;x", "", 0, SP_E_INVALID, "malformed multipart boundary");
        expect_refused("multipart/form-data; boundary=\"\"", "", 0, SP_E_INVALID, "malformed multipart boundary");
        /* A body delimited by another boundary never reaches a part. */
        const char *other = "--abc\r\nContent-Disposition: form-data; filename=\"x\"\r\n\r\n1\r\n--abc--";
        expect_refused("multipart/form-data; boundary=abd", other, strlen(other), SP_E_INVALID, "ends inside a part");
}
END_TEST

START_TEST(truncated)
{
        const char *ct = "multipart/form-data; boundary=q";
        const char *cases[][2] = {
                {"", "ends inside a part"},
                {"preamble only", "ends inside a part"},
                {"--q", "truncated multipart body"},
                {"--q\r", "truncated multipart body"},
                {"--q\r\n", "truncated multipart headers"},
                {"--q\r\nContent-Disposition: form-data; filename=\"x\"\r\n", "truncated multipart headers"},
                {"--q\r\nContent-Disposition: form-data; filename=\"x\"\r\n\r\nno end", "ends inside a part"},
                {"--q\r\nContent-Disposition: form-data; filename=\"x\"\r\n\r\nalmost\r\n--", "ends inside a part"},
                {"--q\r\nContent-Disposition: form-data; filename=\"x\"\r\n\r\n1\r\n--q", "truncated multipart body"},
                {"--q\r\nContent-Disposition: form-data; filename=\"x\r\n\r\n1\r\n--q--",
                 "malformed multipart filename"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++)
                expect_refused(ct, cases[i][0], strlen(cases[i][0]), SP_E_INVALID, cases[i][1]);
}
END_TEST

/* A part whose headers end (their blank line begins) hl bytes after its
 * delimiter, counting the CRLF that ends the delimiter's line. */
static char *with_headers(size_t hl)
{
        const char *pre = "--q\r\nContent-Disposition: form-data; filename=\"h\"\r\nX-Pad: ";
        const char *post = "\r\n\r\nbody\r\n--q--";
        size_t pad = hl - (strlen(pre) - 3);
        char *s = malloc(strlen(pre) + pad + strlen(post) + 1);
        strcpy(s, pre);
        memset(s + strlen(pre), 'p', pad);
        strcpy(s + strlen(pre) + pad, post);
        return s;
}

START_TEST(header_bound)
{
        const char *ct = "multipart/form-data; boundary=q";
        _cleanup_free_ char *fits = with_headers(E2B_MP_MAX_HEAD);
        expect_parts(ct, fits, "h|body\n");
        _cleanup_free_ char *over = with_headers(E2B_MP_MAX_HEAD + 1);
        expect_refused(ct, over, strlen(over), SP_E_TOO_LARGE, "multipart headers too large");
        /* Unterminated headers stop at the bound too, not at the body's end. */
        _cleanup_free_ char *endless = malloc(3 * E2B_MP_MAX_HEAD);
        memset(endless, 'h', 3 * E2B_MP_MAX_HEAD);
        memcpy(endless, "--q\r\n", 5);
        expect_refused(ct, endless, 3 * E2B_MP_MAX_HEAD, SP_E_TOO_LARGE, "multipart headers too large");
}
END_TEST

START_TEST(source_error)
{
        const char *ct = "multipart/form-data; boundary=q";
        const char *body = "--q\r\nContent-Disposition: form-data; filename=\"x\"\r\n\r\npart";
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        _cleanup_free_ char *msg = NULL;
        ck_assert_int_eq(read_all(ct, body, strlen(body), 3, true, &log, &msg), SP_E_IO);
        ck_assert_str_eq(msg, "the client went away");
        /* The last bytes, which could begin a delimiter, were held back. */
        ck_assert_str_eq(log.data, "x|\n");
}
END_TEST

START_TEST(large_part)
{
        /* Several source reads of a part: every byte once, in order. */
        size_t n = 3 * E2B_MP_CHUNK + 17;
        const char *head = "--q\r\nContent-Disposition: form-data; filename=\"big\"\r\n\r\n";
        const char *tail = "\r\n--q--";
        size_t hl = strlen(head), tl = strlen(tail);
        _cleanup_free_ char *body = malloc(hl + n + tl);
        memcpy(body, head, hl);
        for (size_t i = 0; i < n; i++)
                body[hl + i] = (char)('a' + i % 26);
        memcpy(body + hl + n, tail, tl);
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        _cleanup_free_ char *msg = NULL;
        ck_assert_int_eq(read_all("multipart/form-data; boundary=q", body, hl + n + tl, 0, false, &log, &msg), 0);
        ck_assert_uint_eq(log.len, 4 + n + 1);
        ck_assert_int_eq(memcmp(log.data + 4, body + hl, n), 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_multipart");
        TCase *tc = tcase_create("multipart");
        tcase_add_test(tc, parts);
        tcase_add_test(tc, boundaries);
        tcase_add_test(tc, truncated);
        tcase_add_test(tc, header_bound);
        tcase_add_test(tc, source_error);
        tcase_add_test(tc, large_part);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
