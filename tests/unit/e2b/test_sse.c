/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: space-e2b's reading of the data plane's attach stream
 * (compat/e2b/attach.h). Server-sent events split the same way whatever
 * pieces the bytes come in (LF or CRLF, several data lines, comments,
 * unknown fields, long names cut); each becomes the ProcessEvent envd sends
 * (data with the base64 untouched, "pty" for a PTY, end with exit code,
 * status and kill reason, keepalive), reading stops at the end; an error
 * event or a malformed exit ends the stream with the right error; lines
 * and events beyond their bounds are refused.
 */
#include <stdlib.h>
#include <string.h>

#include "attach.h"
#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"

typedef struct relay {
        bool pty, ended;
        sp_error *stream_error;
        sp_buf log; /* one ProcessEvent (JSON) per line */
        int stop_after; /* > 0: the callback fails on this event */
        int events;
} relay;

static int on_event(const char *event, const char *data, size_t len, void *userdata)
{
        relay *r = userdata;
        if (r->stop_after && ++r->events == r->stop_after)
                return -1;
        json_object *ev = NULL;
        if (e2b_attach_event(event, data, len, r->pty, &ev, &r->ended, &r->stream_error) < 0)
                return -1;
        if (ev) {
                sp_buf_append_str(&r->log, json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN), NULL);
                sp_buf_append(&r->log, "\n", 1, NULL);
                json_object_put(ev);
        }
        return r->ended;
}

/* Feeds s in pieces (0: whole); returns the feed's result, *used the bytes
 * handed over before it stopped. */
static int feed(relay *r, const char *s, size_t n, size_t piece, size_t *used, sp_error **err)
{
        e2b_attach a = E2B_ATTACH_INIT;
        int rc = 0;
        size_t off = 0;
        while (off < n && rc == 0) {
                size_t k = piece && piece < n - off ? piece : n - off;
                rc = e2b_attach_feed(&a, s + off, k, on_event, r, err);
                off += k;
        }
        if (used)
                *used = off;
        e2b_attach_free(&a);
        return rc;
}

/* Relays s whole and in pieces of 1, 2 and 7 bytes; each must give want
 * (the events, one per line) and end with rc; returns the whole run's
 * stream error (or NULL), to be freed. */
static sp_error *relay_every_way(const char *s, bool pty, int rc, const char *want)
{
        sp_error *first = NULL;
        static const size_t pieces[] = {0, 1, 2, 7};
        for (size_t i = 0; i < SP_ARRAY_SIZE(pieces); i++) {
                relay r = {.pty = pty};
                _cleanup_error_ sp_error *e = NULL;
                int got = feed(&r, s, strlen(s), pieces[i], NULL, &e);
                ck_assert_msg(got == rc, "piece %zu: %d, not %d", pieces[i], got, rc);
                ck_assert_ptr_null(e);
                ck_assert_str_eq(r.log.data ? r.log.data : "", want);
                if (i == 0)
                        first = TAKE_PTR(r.stream_error);
                else
                        ck_assert_str_eq(r.stream_error ? r.stream_error->message : "", first ? first->message : "");
                sp_error_free(r.stream_error);
                sp_buf_free(&r.log);
        }
        return first;
}

START_TEST(a_session)
{
        const char *s = "event: start\nid: 0\ndata: {\"pid\":42}\n\n"
                        ": keep-alive\n\n"
                        "id: 6\nevent: stdout\ndata: aGVsbG8K\n\n"
                        "event: stderr\r\ndata: ZXJy\r\n\r\n"
                        "event: stdout\ndata: YQ==\ndata: Yg==\n\n"
                        "retry: 10\nunknown line\nevent:stdout\ndata:Yw==\n\n"
                        "event: exit\ndata: {\"code\":3,\"signal\":0}\n\n"
                        "event: stdout\ndata: bm90IHJlYWQ=\n\n";
        sp_error *e = relay_every_way(s, false, 1,
                                      "{\"keepalive\":{}}\n"
                                      "{\"data\":{\"stdout\":\"aGVsbG8K\"}}\n"
                                      "{\"data\":{\"stderr\":\"ZXJy\"}}\n"
                                      "{\"data\":{\"stdout\":\"YQ==\\nYg==\"}}\n"
                                      "{\"data\":{\"stdout\":\"Yw==\"}}\n"
                                      "{\"end\":{\"exitCode\":3,\"exited\":true,\"status\":\"exit status 3\"}}\n");
        ck_assert_ptr_null(e);
        /* Reading stops at the end: the bytes after it are not handed over. */
        relay r = {0};
        size_t used = 0;
        ck_assert_int_eq(feed(&r, s, strlen(s), 1, &used, NULL), 1);
        ck_assert_uint_eq(used, strstr(s, "event: stdout\ndata: bm90") - s);
        sp_buf_free(&r.log);
}
END_TEST

START_TEST(pty_and_kills)
{
        sp_error *e = relay_every_way("event: stdout\ndata: eA==\n\nevent: stderr\ndata: eQ==\n\n"
                                      "event: exit\ndata: {\"code\":-1,\"signal\":9,\"reason\":\"memory\"}\n\n",
                                      true, 1,
                                      "{\"data\":{\"pty\":\"eA==\"}}\n{\"data\":{\"pty\":\"eQ==\"}}\n"
                                      "{\"end\":{\"exitCode\":-1,\"exited\":false,\"status\":\"signal: killed\","
                                      "\"error\":\"killed (memory)\"}}\n");
        ck_assert_ptr_null(e);
        e = relay_every_way("event: exit\ndata: {\"signal\":15,\"reason\":\"\"}\n\n", false, 1,
                            "{\"end\":{\"exitCode\":-1,\"exited\":false,\"status\":\"signal: terminated\"}}\n");
        ck_assert_ptr_null(e);
        /* An exit without a code is -1. */
        e = relay_every_way("event: exit\ndata: {}\n\n", false, 1,
                            "{\"end\":{\"exitCode\":-1,\"exited\":true,\"status\":\"exit status -1\"}}\n");
        ck_assert_ptr_null(e);
}
END_TEST

START_TEST(stream_errors)
{
        struct {
                const char *stream;
                int code;
                const char *message;
        } cases[] = {
                {"event: error\ndata: {\"error\":{\"code\":\"unavailable\",\"message\":\"worker gone\"}}\n\n",
                 SP_E_UNAVAILABLE, "worker gone"},
                {"event: error\ndata: {\"message\":\"plain\"}\n\n", SP_E_UNAVAILABLE, "plain"},
                {"event: error\ndata: not json\n\n", SP_E_UNAVAILABLE, "the output stream broke off"},
                {"event: error\ndata: {\"error\":\"text\"}\n\n", SP_E_UNAVAILABLE, "the output stream broke off"},
                {"event: exit\ndata: not json\n\n", SP_E_INTERNAL, "malformed exit event"},
                {"event: exit\n\n", SP_E_INTERNAL, "malformed exit event"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_error_ sp_error *e = relay_every_way(cases[i].stream, false, -1, "");
                ck_assert_ptr_nonnull(e);
                ck_assert_int_eq(e->code, cases[i].code);
                ck_assert_str_eq(e->message, cases[i].message);
        }
        /* A callback's own failure stops the reading too. */
        relay r = {.stop_after = 2};
        const char *s = "event: stdout\ndata: YQ==\n\nevent: stdout\ndata: Yg==\n\nevent: stdout\ndata: Yw==\n\n";
        ck_assert_int_eq(feed(&r, s, strlen(s), 0, NULL, NULL), -1);
        ck_assert_str_eq(r.log.data, "{\"data\":{\"stdout\":\"YQ==\"}}\n");
        sp_buf_free(&r.log);
}
END_TEST

static int record(const char *event, const char *data, size_t len, void *userdata)
{
        sp_buf *log = userdata;
        ck_assert_int_eq(data[len], '\0');
        sp_buf_appendf(log, NULL, "%s|%zu|", event ? event : "(comment)", len);
        sp_buf_append(log, data, len < 40 ? len : 40, NULL);
        sp_buf_append(log, "\n", 1, NULL);
        return 0;
}

/* Feeds s to a recording reader in pieces; returns the result. */
static int record_all(const char *s, size_t n, size_t piece, sp_buf *log, sp_error **err)
{
        e2b_attach a = E2B_ATTACH_INIT;
        int rc = 0;
        for (size_t off = 0; off < n && rc == 0;) {
                size_t k = piece && piece < n - off ? piece : n - off;
                rc = e2b_attach_feed(&a, s + off, k, record, log, err);
                off += k;
        }
        e2b_attach_free(&a);
        return rc;
}

START_TEST(fields)
{
        /* Events without a name, or only a start, say nothing; names are cut at 31 bytes. */
        _cleanup_error_ sp_error *e =
                relay_every_way("data: orphan\n\nevent: start\n\nevent: stdoutXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX\n"
                                "data: x\n\nevent\ndata\n\n:\n\n\n\n",
                                false, 0, "{\"keepalive\":{}}\n");
        ck_assert_ptr_null(e);
        /* What the callback sees: the name, the data (one leading space
         * dropped), a comment's text. */
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        const char *s = "event: 0123456789012345678901234567890123\ndata:  two spaces\n\n:comment text\r\n"
                        "data\nevent: x\n\nevent: y\ndata:\ndata: 1\n\n";
        ck_assert_int_eq(record_all(s, strlen(s), 0, &log, NULL), 0);
        ck_assert_str_eq(log.data, "0123456789012345678901234567890|11| two spaces\n"
                                   "(comment)|12|comment text\n"
                                   "x|0|\n"
                                   "y|1|1\n");
}
END_TEST

/* The start event's pid: what envd's start{pid} is sent from. */
START_TEST(start_pid)
{
        int64_t pid = -1;
        const char *ok = "{\"session_id\":\"ses_x\",\"pid\":42}";
        ck_assert(e2b_attach_start_pid("start", ok, strlen(ok), &pid));
        ck_assert_int_eq(pid, 42);
        const char *bad[] = {"{\"pid\":0}", "{\"pid\":-3}", "{\"pid\":\"42\"}", "{}", "[42]", "not json", ""};
        for (size_t i = 0; i < SP_ARRAY_SIZE(bad); i++) {
                ck_assert_msg(!e2b_attach_start_pid("start", bad[i], strlen(bad[i]), &pid), "%s", bad[i]);
                ck_assert_int_eq(pid, 0);
        }
        ck_assert(!e2b_attach_start_pid("stdout", ok, strlen(ok), &pid));
        ck_assert(!e2b_attach_start_pid(NULL, ok, strlen(ok), &pid));
        /* An error event: the session failed ("internal"), or the stream broke off. */
        const char *failed = "{\"code\":\"internal\",\"message\":\"user 'user' not found\"}";
        const char *nested = "{\"error\":{\"code\":\"internal\",\"message\":\"x\"}}";
        const char *broke = "{\"code\":\"unavailable\",\"message\":\"worker gone\"}";
        ck_assert(e2b_attach_session_failed("error", failed, strlen(failed)));
        ck_assert(e2b_attach_session_failed("error", nested, strlen(nested)));
        ck_assert(!e2b_attach_session_failed("error", broke, strlen(broke)));
        ck_assert(!e2b_attach_session_failed("error", "not json", 8));
        ck_assert(!e2b_attach_session_failed("exit", failed, strlen(failed)));
}
END_TEST

START_TEST(bounds)
{
        size_t n = E2B_ATTACH_MAX_LINE + 3 * E2B_ATTACH_MAX_DATA;
        _cleanup_free_ char *s = malloc(n);
        static const size_t pieces[] = {0, 4093};
        for (size_t i = 0; i < SP_ARRAY_SIZE(pieces); i++) {
                /* A line of E2B_ATTACH_MAX_LINE bytes (its CR included) is read; one more is not. */
                s[0] = ':';
                memset(s + 1, 'c', E2B_ATTACH_MAX_LINE - 2);
                memcpy(s + E2B_ATTACH_MAX_LINE - 1, "\r\n", 2);
                _cleanup_buf_ sp_buf log = SP_BUF_INIT;
                _cleanup_error_ sp_error *e = NULL;
                ck_assert_int_eq(record_all(s, E2B_ATTACH_MAX_LINE + 1, pieces[i], &log, &e), 0);
                ck_assert_uint_eq(strtoul(log.data + strlen("(comment)|"), NULL, 10), E2B_ATTACH_MAX_LINE - 2);
                memcpy(s + E2B_ATTACH_MAX_LINE - 1, "cc\n", 3);
                ck_assert_int_lt(record_all(s, E2B_ATTACH_MAX_LINE + 2, pieces[i], &log, &e), 0);
                ck_assert_int_eq(e->code, SP_E_TOO_LARGE);
                sp_error_free(TAKE_PTR(e));
                /* Without its line end: refused as soon as it is too long. */
                ck_assert_int_eq(record_all(s, E2B_ATTACH_MAX_LINE, pieces[i], &log, &e), 0);
                ck_assert_int_lt(record_all(s, E2B_ATTACH_MAX_LINE + 1, pieces[i], &log, &e), 0);
                ck_assert_int_eq(e->code, SP_E_TOO_LARGE);
                sp_error_free(TAKE_PTR(e));
                ck_assert_uint_eq(log.len, strlen("(comment)|") + 7 + 1 + 40 + 1);
                sp_buf_clear(&log);

                /* An event's data lines join up to E2B_ATTACH_MAX_DATA bytes. */
                size_t half = E2B_ATTACH_MAX_DATA / 2, off = 0;
                memcpy(s, "data:", 5);
                off = 5;
                memset(s + off, 'a', half);
                off += half;
                memcpy(s + off, "\ndata:", 6);
                off += 6;
                memset(s + off, 'b', half - 1); /* + the LF between them */
                off += half - 1;
                memcpy(s + off, "\n\n", 2);
                ck_assert_int_eq(record_all(s, off + 2, pieces[i], &log, &e), 0);
                ck_assert_uint_eq(strtoul(log.data + 1, NULL, 10), E2B_ATTACH_MAX_DATA); /* "|len|…" */
                sp_buf_clear(&log);
                memcpy(s + off, "b\n\n", 3);
                ck_assert_int_lt(record_all(s, off + 3, pieces[i], &log, &e), 0);
                ck_assert_int_eq(e->code, SP_E_TOO_LARGE);
                ck_assert_str_eq(e->message, "an output event is too large");
                sp_error_free(TAKE_PTR(e));
                ck_assert_uint_eq(log.len, 0);
        }
        /* Many short data lines without a blank line: bounded all the same. */
        size_t off = 0;
        while (off + 1024 < n) {
                memcpy(s + off, "data: ", 6);
                memset(s + off + 6, 'd', 1017);
                s[off + 1023] = '\n';
                off += 1024;
        }
        _cleanup_buf_ sp_buf log = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_int_lt(record_all(s, off, 0, &log, &e), 0);
        ck_assert_int_eq(e->code, SP_E_TOO_LARGE);
        ck_assert_uint_eq(log.len, 0);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_sse");
        TCase *tc = tcase_create("sse");
        tcase_add_test(tc, a_session);
        tcase_add_test(tc, pty_and_kills);
        tcase_add_test(tc, stream_errors);
        tcase_add_test(tc, fields);
        tcase_add_test(tc, bounds);
        tcase_add_test(tc, start_pid);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
