/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the session output log — offsets, segments, backpressure when
 * full, dropping only what was read, recovery after a crash. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "session/log.h"
#include "space/buf.h"
#include "space/cleanup.h"

static char *dir;
static char logdir[600];

static void setup(void)
{
        dir = sp_test_tmpdir("log");
        snprintf(logdir, sizeof(logdir), "%s/log", dir);
}

static void teardown(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* Reads everything from offset to the end into out, as the data plane would. */
static void read_all(wk_log *l, uint64_t offset, sp_buf *out, sp_buf *streams)
{
        char buf[7000];
        while (offset < wk_log_end(l)) {
                uint8_t stream;
                size_t n;
                ck_assert_int_eq(wk_log_read(l, offset, buf, sizeof(buf), &stream, &n, NULL), 0);
                ck_assert_uint_gt(n, 0);
                sp_buf_append(out, buf, n, NULL);
                for (size_t i = 0; streams && i < n; i++)
                        sp_buf_append(streams, &(char){(char)('0' + stream)}, 1, NULL);
                offset += n;
        }
}

static void pattern(unsigned char *p, size_t n, uint64_t at)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (unsigned char)((at + i) * 2654435761u >> 13);
}

START_TEST(offsets_across_segments)
{
        wk_log *l;
        ck_assert_int_eq(wk_log_open(logdir, 64 << 20, true, &l, NULL), 0);
        static unsigned char chunk[100000];
        uint64_t at = 0;
        /* ~12 MB in records of varying sizes and both streams: several segments */
        for (int i = 0; at < 12000000; i++) {
                size_t n = 1 + (size_t)(i * 7919) % sizeof(chunk);
                pattern(chunk, n, at);
                ck_assert_int_eq(wk_log_append(l, (uint8_t)(1 + i % 2), chunk, n, NULL), 0);
                at += n;
        }
        ck_assert_uint_eq(wk_log_end(l), at);
        ck_assert_uint_eq(wk_log_stream_total(l, 1) + wk_log_stream_total(l, 2), at);

        /* from several offsets, including inside records */
        uint64_t starts[] = {0, 1, 4194303, 4194304, 5000001, at - 1, at};
        for (size_t k = 0; k < SP_ARRAY_SIZE(starts); k++) {
                _cleanup_buf_ sp_buf got = SP_BUF_INIT;
                read_all(l, starts[k], &got, NULL);
                ck_assert_uint_eq(got.len, at - starts[k]);
                _cleanup_free_ unsigned char *want = malloc(got.len + 1);
                pattern(want, got.len, starts[k]);
                ck_assert(got.len == 0 || memcmp(got.data, want, got.len) == 0);
        }
        _cleanup_error_ sp_error *e = NULL;
        char b[10];
        uint8_t s;
        size_t n;
        ck_assert_int_lt(wk_log_read(l, at + 1, b, sizeof(b), &s, &n, &e), 0);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        wk_log_close(l);
}
END_TEST

/* Short records (lines of output) read by readers side by side, each in
 * small pieces and resuming inside records: every byte in order, with its
 * stream (the reads start from where the previous one of a reader ended). */
START_TEST(short_records_read_by_interleaved_readers)
{
        wk_log *l;
        ck_assert_int_eq(wk_log_open(logdir, 64 << 20, true, &l, NULL), 0);
        unsigned char rec[16];
        uint64_t at = 0;
        for (int i = 0; i < 200000; i++) {
                size_t n = 1 + (size_t)i % 11;
                pattern(rec, n, at);
                ck_assert_int_eq(wk_log_append(l, (uint8_t)(1 + (i / 3) % 2), rec, n, NULL), 0);
                at += n;
        }
        /* Three readers: from the start in 4-byte pieces, from the start in whole
         * records, and from inside a record in 7-byte pieces; interleaved. */
        uint64_t off[3] = {0, 0, 123457};
        size_t caps[3] = {4, 64, 7};
        _cleanup_buf_ sp_buf got0 = SP_BUF_INIT, got1 = SP_BUF_INIT, got2 = SP_BUF_INIT;
        sp_buf *got[3] = {&got0, &got1, &got2};
        for (bool more = true; more;) {
                more = false;
                for (int r = 0; r < 3; r++) {
                        if (off[r] >= at)
                                continue;
                        more = true;
                        char buf[64];
                        uint8_t stream;
                        size_t n;
                        ck_assert_int_eq(wk_log_read(l, off[r], buf, caps[r], &stream, &n, NULL), 0);
                        ck_assert_uint_gt(n, 0);
                        ck_assert(stream == 1 || stream == 2);
                        sp_buf_append(got[r], buf, n, NULL);
                        off[r] += n;
                }
        }
        uint64_t starts[3] = {0, 0, 123457};
        for (int r = 0; r < 3; r++) {
                ck_assert_uint_eq(got[r]->len, at - starts[r]);
                _cleanup_free_ unsigned char *want = malloc(got[r]->len);
                pattern(want, got[r]->len, starts[r]);
                ck_assert(memcmp(got[r]->data, want, got[r]->len) == 0);
        }
        /* And a reader that goes back to the start after all that. */
        _cleanup_buf_ sp_buf again = SP_BUF_INIT;
        read_all(l, 0, &again, NULL);
        ck_assert_uint_eq(again.len, at);
        ck_assert(memcmp(again.data, got0.data, at) == 0);
        wk_log_close(l);
}
END_TEST

/* A reader that keeps up with the writer marks what it was sent: the log keeps the resume window behind
 * that (for a client that hangs up with bytes in flight), and the writer never stalls on it, at any size. */
START_TEST(a_sending_reader_keeps_a_resume_window_and_never_stalls_the_writer)
{
        const uint64_t caps[] = {1u << 20, 16u << 20, 72u << 20};
        static unsigned char chunk[65536];
        for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
                wk_log *l;
                ck_assert_int_eq(wk_log_open(logdir, caps[i], true, &l, NULL), 0);
                uint64_t w = wk_log_resume_window(l);
                ck_assert_uint_eq(w, caps[i] / 2 < WK_LOG_RESUME_WINDOW ? caps[i] / 2 : WK_LOG_RESUME_WINDOW);
                uint64_t at = 0;
                while (at < 2 * caps[i] + w) {
                        pattern(chunk, sizeof(chunk), at);
                        ck_assert_msg(wk_log_append(l, 1, chunk, sizeof(chunk), NULL) == 0,
                                      "the writer stalled at %llu with a %llu-byte log", (unsigned long long)at,
                                      (unsigned long long)caps[i]);
                        at += sizeof(chunk);
                        wk_log_mark_sent(l, at);
                        if (at >= w)
                                ck_assert_uint_le(wk_log_start(l), at - w);
                }
                ck_assert_uint_gt(wk_log_start(l), 0); /* segments were dropped all the same */
                wk_log_close(l);
                ck_assert_int_eq(wk_log_remove(logdir, NULL), 0);
        }
}
END_TEST

START_TEST(full_log_applies_backpressure_and_drops_only_read_data)
{
        wk_log *l;
        uint64_t cap = 10 << 20;
        ck_assert_int_eq(wk_log_open(logdir, cap, true, &l, NULL), 0);
        static unsigned char chunk[65536];
        uint64_t at = 0;
        while (wk_log_room(l) >= sizeof(chunk)) {
                pattern(chunk, sizeof(chunk), at);
                ck_assert_int_eq(wk_log_append(l, 1, chunk, sizeof(chunk), NULL), 0);
                at += sizeof(chunk);
        }
        /* Full and unread: the append is refused, nothing is dropped. */
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(wk_log_append(l, 1, chunk, sizeof(chunk), &e), 0);
        ck_assert_int_eq(e->code, SP_E_LIMIT);
        ck_assert_uint_eq(wk_log_start(l), 0);

        /* A reader passes the first segment: room appears, and appending drops it. */
        wk_log_mark_read(l, WK_LOG_SEGMENT_BYTES + 10);
        ck_assert_uint_ge(wk_log_room(l), sizeof(chunk));
        pattern(chunk, sizeof(chunk), at);
        ck_assert_int_eq(wk_log_append(l, 2, chunk, sizeof(chunk), NULL), 0);
        at += sizeof(chunk);
        ck_assert_uint_gt(wk_log_start(l), 0);
        ck_assert_uint_le(wk_log_start(l), WK_LOG_SEGMENT_BYTES + 10);

        sp_error *gone = NULL;
        char b[10];
        uint8_t s;
        size_t n;
        ck_assert_int_lt(wk_log_read(l, 0, b, sizeof(b), &s, &n, &gone), 0);
        ck_assert_int_eq(gone->code, SP_E_NOT_FOUND);
        sp_error_free(gone);

        uint64_t start = wk_log_start(l);
        _cleanup_buf_ sp_buf got = SP_BUF_INIT;
        read_all(l, start, &got, NULL);
        _cleanup_free_ unsigned char *want = malloc(got.len);
        pattern(want, got.len, start);
        ck_assert(memcmp(got.data, want, got.len) == 0);
        wk_log_close(l);

        /* Totals survive a reopen even for dropped segments. */
        ck_assert_int_eq(wk_log_open(logdir, cap, false, &l, NULL), 0);
        ck_assert_uint_eq(wk_log_start(l), start);
        ck_assert_uint_eq(wk_log_end(l), at);
        ck_assert_uint_eq(wk_log_stream_total(l, 1), at - sizeof(chunk));
        ck_assert_uint_eq(wk_log_stream_total(l, 2), sizeof(chunk));
        wk_log_close(l);
}
END_TEST

/* The log reads served from memory (hits) and from the files (misses) since the test began. */
static uint64_t base_hits, base_misses;
static void reads_since(uint64_t *ret_hits, uint64_t *ret_misses)
{
        wk_log_read_counts(ret_hits, ret_misses);
        *ret_hits -= base_hits;
        *ret_misses -= base_misses;
}

/* A reader right behind the writer (an attached stream) is served from the
 * in-memory copies of the newest records: no file read once it is near the
 * end; what it gets is what the file holds, with each record's stream, also
 * from inside a record and after the copies are released. */
START_TEST(a_reader_behind_the_writer_is_served_from_memory)
{
        wk_log *l;
        ck_assert_int_eq(wk_log_open(logdir, 64 << 20, true, &l, NULL), 0);
        static unsigned char chunk[70000];
        static char buf[70000];
        uint64_t at = 0, off = 0, hits = 0, misses = 0;
        wk_log_read_counts(&base_hits, &base_misses);
        _cleanup_buf_ sp_buf got = SP_BUF_INIT, streams = SP_BUF_INIT;
        for (int i = 0; i < 400; i++) {
                size_t n = 1 + (size_t)(i * 7919) % sizeof(chunk);
                pattern(chunk, n, at);
                ck_assert_int_eq(wk_log_append(l, (uint8_t)(1 + i % 2), chunk, n, NULL), 0);
                at += n;
                /* The reader takes what came, in pieces of up to 50,000 bytes (some records in two). */
                while (off < at) {
                        uint8_t stream;
                        size_t got_n;
                        ck_assert_int_eq(wk_log_read(l, off, buf, 50000, &stream, &got_n, NULL), 0);
                        ck_assert_uint_gt(got_n, 0);
                        sp_buf_append(&got, buf, got_n, NULL);
                        for (size_t k = 0; k < got_n; k++)
                                sp_buf_append(&streams, &(char){(char)('0' + stream)}, 1, NULL);
                        off += got_n;
                }
        }
        reads_since(&hits, &misses);
        ck_assert_msg(misses == 1, "%llu reads went to the file", (unsigned long long)misses);
        ck_assert_uint_gt(hits, 400);
        ck_assert_uint_eq(got.len, at);
        _cleanup_free_ unsigned char *want = malloc(at);
        pattern(want, at, 0);
        ck_assert(memcmp(got.data, want, at) == 0);
        /* The same bytes and streams from the file, by a reader from the start. */
        _cleanup_buf_ sp_buf again = SP_BUF_INIT, again_streams = SP_BUF_INIT;
        read_all(l, 0, &again, &again_streams);
        ck_assert(again.len == at && memcmp(again.data, got.data, at) == 0);
        ck_assert(again_streams.len == at && memcmp(again_streams.data, streams.data, at) == 0);
        /* A read far behind the end: appends are no longer copied (the next read of a new record
         * goes to the file) until a reader comes near the end again (then it is). */
        {
                uint8_t st;
                size_t k;
                ck_assert_int_eq(wk_log_read(l, 0, buf, 100, &st, &k, NULL), 0);
                ck_assert(k >= 1 && memcmp(buf, want, k) == 0);
        }
        reads_since(&hits, &misses);
        for (int i = 0; i < 2; i++) {
                pattern(chunk, 1000, at);
                ck_assert_int_eq(wk_log_append(l, 1, chunk, 1000, NULL), 0);
                uint64_t h0 = hits, m0 = misses;
                uint8_t st;
                size_t k;
                ck_assert_int_eq(wk_log_read(l, at, buf, sizeof(buf), &st, &k, NULL), 0);
                ck_assert(k == 1000 && st == 1 && memcmp(buf, chunk, 1000) == 0);
                at += 1000;
                reads_since(&hits, &misses);
                ck_assert_msg(i == 0 ? misses == m0 + 1 : hits == h0 + 1, "read %d after a far reader", i);
        }
        free(want);
        want = malloc(at);
        pattern(want, at, 0);
        /* Released (the output ended): reads go to the file again, and still answer. */
        wk_log_release_tail(l);
        uint64_t hits_before = 0, misses_before = 0;
        reads_since(&hits_before, &misses_before);
        uint8_t stream;
        size_t n;
        ck_assert_int_eq(wk_log_read(l, at - 10, buf, sizeof(buf), &stream, &n, NULL), 0);
        ck_assert(n == 10 && memcmp(buf, want + at - 10, 10) == 0);
        reads_since(&hits, &misses);
        ck_assert_uint_eq(hits, hits_before);
        ck_assert_uint_eq(misses, misses_before + 1);
        wk_log_close(l);
}
END_TEST

START_TEST(recovery_cuts_a_torn_record)
{
        wk_log *l;
        ck_assert_int_eq(wk_log_open(logdir, 1 << 20, true, &l, NULL), 0);
        ck_assert_int_eq(wk_log_append(l, 1, "hello ", 6, NULL), 0);
        ck_assert_int_eq(wk_log_append(l, 2, "world", 5, NULL), 0);
        wk_log_close(l);
        /* A crash in the middle of an append leaves a partial record. */
        char seg[700];
        snprintf(seg, sizeof(seg), "%s/%020d.seg", logdir, 0);
        int fd = open(seg, O_WRONLY | O_APPEND);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "\x01\0\0\0\0\0\0\x50partial", 15), 15);
        close(fd);

        ck_assert_int_eq(wk_log_open(logdir, 1 << 20, false, &l, NULL), 0);
        ck_assert_uint_eq(wk_log_end(l), 11);
        ck_assert_uint_eq(wk_log_stream_total(l, 1), 6);
        ck_assert_uint_eq(wk_log_stream_total(l, 2), 5);
        ck_assert_int_eq(wk_log_append(l, 1, "!", 1, NULL), 0);
        _cleanup_buf_ sp_buf got = SP_BUF_INIT, streams = SP_BUF_INIT;
        read_all(l, 0, &got, &streams);
        ck_assert_str_eq(got.data, "hello world!");
        ck_assert_str_eq(streams.data, "111111222221");
        wk_log_close(l);
        ck_assert_int_eq(wk_log_remove(logdir, NULL), 0);
        ck_assert_int_lt(access(logdir, F_OK), 0);
}
END_TEST

START_TEST(bad_records_refused)
{
        wk_log *l;
        ck_assert_int_eq(wk_log_open(logdir, 1 << 20, true, &l, NULL), 0);
        ck_assert_int_lt(wk_log_append(l, 3, "x", 1, NULL), 0);
        ck_assert_int_lt(wk_log_append(l, 1, "x", 0, NULL), 0);
        ck_assert_uint_eq(wk_log_end(l), 0);
        wk_log_close(l);
        sp_error *e = NULL;
        ck_assert_int_lt(wk_log_open("/nonexistent/log", 1, false, &l, &e), 0);
        ck_assert_int_eq(e->code, SP_E_NOT_FOUND);
        sp_error_free(e);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("session_log");
        TCase *tc = tcase_create("log");
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, offsets_across_segments);
        tcase_add_test(tc, short_records_read_by_interleaved_readers);
        tcase_add_test(tc, full_log_applies_backpressure_and_drops_only_read_data);
        tcase_add_test(tc, a_reader_behind_the_writer_is_served_from_memory);
        tcase_add_test(tc, recovery_cuts_a_torn_record);
        tcase_add_test(tc, a_sending_reader_keeps_a_resume_window_and_never_stalls_the_writer);
        tcase_add_test(tc, bad_records_refused);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
