/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: spacectl's server-sent events parser (cli/sse.h) — the data
 * plane's attach stream, line ends of every kind split anywhere, the fields
 * and what is ignored, the bounds, a callback that stops the feed, reset. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "sse.h"

/* Every event as "type|id|data" lines (id "-" when absent). */
static int record(const ctl_sse_event *ev, void *userdata, sp_error **err)
{
        sp_buf *log = userdata;
        sp_buf_appendf(log, NULL, "%s|%s|", ev->type, ev->id ? ev->id : "-");
        sp_buf_append(log, ev->data, ev->data_len, NULL);
        sp_buf_append(log, "\n", 1, NULL);
        return 0;
}

/* Feeds s in pieces of n bytes (0: whole) to a fresh parser; returns the log. */
static char *parse_in_pieces(const char *s, size_t len, size_t n, int *ret)
{
        ctl_sse_parser p;
        ctl_sse_init(&p);
        sp_buf log = SP_BUF_INIT;
        sp_buf_append(&log, "", 0, NULL);
        int r = 0;
        for (size_t off = 0; off < len && r == 0;) {
                size_t k = n && n < len - off ? n : len - off;
                _cleanup_error_ sp_error *e = NULL;
                r = ctl_sse_feed(&p, s + off, k, record, &log, &e);
                if (r < 0)
                        ck_assert_ptr_nonnull(e);
                off += k;
        }
        ctl_sse_free(&p);
        if (ret)
                *ret = r;
        return sp_buf_steal(&log);
}

/* Parses s whole, in pieces of 1, 2, 3 and 5 bytes: all the same. */
static char *parse(const char *s)
{
        char *whole = parse_in_pieces(s, strlen(s), 0, NULL);
        for (size_t n = 1; n <= 5; n++) {
                _cleanup_free_ char *split = parse_in_pieces(s, strlen(s), n, NULL);
                ck_assert_str_eq(split, whole);
        }
        return whole;
}

START_TEST(the_data_planes_attach_stream)
{
        _cleanup_free_ char *log = parse(
                "id: 0\nevent: start\ndata: {\"session_id\":\"ses_x\",\"pid\":2}\n\n"
                "id: 6\nevent: stdout\ndata: aGVsbG8K\n\n: keep-alive\n\nid: 10\nevent: stderr\ndata: ZXJyCg==\n\n"
                "id: 10\nevent: exit\ndata: {\"code\":3}\n\n");
        ck_assert_str_eq(log, "start|0|{\"session_id\":\"ses_x\",\"pid\":2}\nstdout|6|aGVsbG8K\nstderr|10|ZXJyCg==\n"
                              "exit|10|{\"code\":3}\n");
}
END_TEST

START_TEST(line_ends_of_every_kind)
{
        _cleanup_free_ char *lf = parse("event: a\ndata: 1\n\n");
        _cleanup_free_ char *crlf = parse("event: a\r\ndata: 1\r\n\r\n");
        _cleanup_free_ char *cr = parse("event: a\rdata: 1\r\r");
        ck_assert_str_eq(lf, "a|-|1\n");
        ck_assert_str_eq(crlf, lf);
        ck_assert_str_eq(cr, lf);
        /* CR then LF in the next feed is one line end, not a blank line. */
        int r;
        static const char crlf_split[] = "data: 1\r\ndata: 2\r\n\r\n";
        _cleanup_free_ char *split = parse_in_pieces(crlf_split, sizeof(crlf_split) - 1, 8, &r);
        ck_assert_int_eq(r, 0);
        ck_assert_str_eq(split, "message|-|1\n2\n");
}
END_TEST

START_TEST(fields_and_what_is_ignored)
{
        /* Joined data lines, one space dropped (not two), "data" alone is an empty line. */
        _cleanup_free_ char *joined = parse("data: a\ndata:  b\ndata\ndata:c\n\n");
        ck_assert_str_eq(joined, "message|-|a\n b\n\nc\n");
        /* Comments, retry, unknown fields; an event without data is not dispatched. */
        _cleanup_free_ char *quiet = parse(":x\nretry: 5\nfoo: bar\nevent: e\nid: 1\n\ndata: z\n\n");
        ck_assert_str_eq(quiet, "message|-|z\n");
        /* An empty event name is "message"; an empty id is an id. */
        _cleanup_free_ char *empty = parse("event:\nid:\ndata: q\n\n");
        ck_assert_str_eq(empty, "message||q\n");
        /* The id is the event's own, not the last one seen. */
        _cleanup_free_ char *ids = parse("id: 7\ndata: a\n\ndata: b\n\n");
        ck_assert_str_eq(ids, "message|7|a\nmessage|-|b\n");
        /* A byte-order mark at the start only. */
        _cleanup_free_ char *bom = parse("\xef\xbb\xbf"
                                         "data: a\n\n\xef\xbb\xbf"
                                         "data: b\n\n");
        ck_assert_str_eq(bom, "message|-|a\n");
        /* No blank line yet: nothing. */
        _cleanup_free_ char *unfinished = parse("data: a\n");
        ck_assert_str_eq(unfinished, "");
}
END_TEST

START_TEST(bounds)
{
        int r;
        /* One line too long. */
        size_t n = CTL_SSE_MAX_LINE + 16;
        _cleanup_free_ char *longline = malloc(n + 3);
        memcpy(longline, "data: ", 6);
        memset(longline + 6, 'x', n - 6);
        memcpy(longline + n, "\n\n", 3);
        _cleanup_free_ char *log = parse_in_pieces(longline, n + 2, 4096, &r);
        ck_assert_int_eq(r, -SP_E_TOO_LARGE);
        ck_assert_str_eq(log, "");
        /* Data too long, over many lines. */
        sp_buf many = SP_BUF_INIT;
        for (size_t total = 0; total <= CTL_SSE_MAX_DATA; total += 1001) {
                sp_buf_append_str(&many, "data: ", NULL);
                for (int i = 0; i < 1000; i++)
                        sp_buf_append(&many, "y", 1, NULL);
                sp_buf_append(&many, "\n", 1, NULL);
        }
        sp_buf_append(&many, "\n", 1, NULL);
        _cleanup_free_ char *log2 = parse_in_pieces(many.data, many.len, 0, &r);
        ck_assert_int_eq(r, -SP_E_TOO_LARGE);
        ck_assert_str_eq(log2, "");
        sp_buf_free(&many);
        /* Data of exactly the bound is fine, a byte more is not: 1024 lines of 1023 bytes, joined by '\n', are
         * one byte short of it. */
        for (int extra = 1; extra <= 2; extra++) {
                sp_buf exact = SP_BUF_INIT;
                for (int line = 0; line < 1024; line++) {
                        sp_buf_append_str(&exact, "data: ", NULL);
                        for (int i = 0; i < 1023 + (line == 1023 ? extra : 0); i++)
                                sp_buf_append(&exact, "z", 1, NULL);
                        sp_buf_append(&exact, "\n", 1, NULL);
                }
                sp_buf_append_str(&exact, "\n", NULL);
                _cleanup_free_ char *log3 = parse_in_pieces(exact.data, exact.len, 0, &r);
                sp_buf_free(&exact);
                if (extra == 2) {
                        ck_assert_int_eq(r, -SP_E_TOO_LARGE);
                        continue;
                }
                ck_assert_int_eq(r, 0);
                ck_assert_uint_eq(strlen(log3), strlen("message|-|\n") + CTL_SSE_MAX_DATA);
        }
        /* A long event name, an id with a NUL. */
        char name[CTL_SSE_MAX_NAME + 32];
        snprintf(name, sizeof(name), "event: %0*d\ndata: x\n\n", CTL_SSE_MAX_NAME + 1, 0);
        _cleanup_free_ char *log4 = parse_in_pieces(name, strlen(name), 0, &r);
        ck_assert_int_eq(r, -SP_E_INVALID);
        ck_assert_str_eq(log4, "");
        static const char nul_id[] = "data: a\n\nid: 1\0\ndata: b\n\n";
        _cleanup_free_ char *log5 = parse_in_pieces(nul_id, sizeof(nul_id) - 1, 0, &r);
        ck_assert_int_eq(r, -SP_E_INVALID);
        ck_assert_str_eq(log5, "message|-|a\n");
}
END_TEST

static int stop_at_second(const ctl_sse_event *ev, void *userdata, sp_error **err)
{
        int *seen = userdata;
        if (++*seen == 2)
                return sp_error_set(err, SP_E_CONFLICT, "enough");
        return 0;
}

START_TEST(a_callback_stops_the_feed_and_reset_forgets)
{
        ctl_sse_parser p;
        ctl_sse_init(&p);
        int seen = 0;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_eq(ctl_sse_feed(&p, "data: 1\n\ndata: 2\n\ndata: 3\n\n", 27, stop_at_second, &seen, &e),
                         -SP_E_CONFLICT);
        ck_assert_int_eq(seen, 2);
        ck_assert_str_eq(e->message, "enough");
        /* A new stream: the half-read event of the old one is gone. */
        ctl_sse_reset(&p);
        sp_buf log = SP_BUF_INIT;
        ck_assert_int_eq(ctl_sse_feed(&p, "event: x\ndata: half", 19, record, &log, NULL), 0);
        ctl_sse_reset(&p);
        ck_assert_int_eq(ctl_sse_feed(&p, "data: new\n\n", 11, record, &log, NULL), 0);
        ck_assert_str_eq(log.data, "message|-|new\n");
        sp_buf_free(&log);
        ctl_sse_free(&p);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("ctl_sse");
        TCase *tc = tcase_create("sse");
        tcase_add_test(tc, the_data_planes_attach_stream);
        tcase_add_test(tc, line_ends_of_every_kind);
        tcase_add_test(tc, fields_and_what_is_ignored);
        tcase_add_test(tc, bounds);
        tcase_add_test(tc, a_callback_stops_the_feed_and_reset_forgets);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
