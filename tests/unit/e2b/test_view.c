/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: E2B's view of the public API's answers (compat/e2b/view.h).
 * A template becomes E2B's Template (its name as id and alias, its state as
 * a build status, the API's default size); a sandbox's record and sessions
 * become its logs: created, each process started and exited (warn unless
 * it exited 0, with its signal) or failed (error), the sandbox's state when
 * it does not run; oldest first, from start (ms) on, at most limit; lines
 * are JSON objects the CLI reads, entries' fields strings; what lacks a
 * time is left out.
 */
#include <string.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "view.h"

static json_object *parse(const char *s)
{
        json_object *o = NULL;
        ck_assert_msg(sp_json_parse(s, strlen(s), &o, NULL) == 0, "%s", s);
        return o;
}

static const char *str(json_object *o)
{
        return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

START_TEST(templates)
{
        _cleanup_json_ json_object *t = parse("{\"id\":\"tpl_1\",\"name\":\"py\",\"state\":\"ready\",\"public\":false,"
                                              "\"created_at\":\"2026-12-03T12:00:00.000001Z\",\"warm\":2}");
        _cleanup_json_ json_object *o = e2b_view_template(t, "0.5.7");
        ck_assert_str_eq(str(o), "{\"templateID\":\"py\",\"buildID\":\"tpl_1\",\"aliases\":[\"py\"],\"names\":[\"py\"],"
                                 "\"buildStatus\":\"ready\",\"public\":false,\"cpuCount\":1,\"memoryMB\":512,"
                                 "\"diskSizeMB\":2048,\"createdAt\":\"2026-12-03T12:00:00.000001Z\","
                                 "\"updatedAt\":\"2026-12-03T12:00:00.000001Z\",\"createdBy\":null,"
                                 "\"lastSpawnedAt\":null,\"spawnCount\":0,\"buildCount\":1,\"envdVersion\":\"0.5.7\"}");
        static const struct {
                const char *state, *status;
        } states[] = {{"failed", "error"}, {"building", "building"}, {"uploading", "waiting"}, {"deleting", "waiting"}};
        for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
                json_object_object_add(t, "state", json_object_new_string(states[i].state));
                _cleanup_json_ json_object *v = e2b_view_template(t, "0.5.7");
                ck_assert_str_eq(json_object_get_string(json_object_object_get(v, "buildStatus")), states[i].status);
                ck_assert_int_eq(json_object_get_int(json_object_object_get(v, "buildCount")), 0);
        }
        _cleanup_json_ json_object *nameless = parse("{\"id\":\"tpl_1\"}"), *odd = parse("{\"name\":5}");
        ck_assert_ptr_null(e2b_view_template(nameless, "0.5.7"));
        ck_assert_ptr_null(e2b_view_template(odd, "0.5.7"));
}
END_TEST

#define SANDBOX \
        "{\"id\":\"sbx_1\",\"template\":\"base\",\"state\":\"suspended\",\"desired_state\":\"suspended\"," \
        "\"status_message\":null,\"created_at\":\"2026-12-03T12:00:00.000000Z\"," \
        "\"updated_at\":\"2026-12-03T12:00:09.000000Z\"}"

static const char *const sessions[] = {
        /* out of order, as pages may give them: the answer sorts */
        ("{\"id\":\"ses_2\",\"pid\":3,\"state\":\"exited\",\"argv\":[\"/bin/sh\",\"-c\",\"exit 7\"],"
         "\"exit\":{\"code\":7,\"signal\":0,\"oom\":false,\"killed\":false,\"reason\":null},"
         "\"created_at\":\"2026-12-03T12:00:03.000000Z\",\"started_at\":\"2026-12-03T12:00:03.100000Z\","
         "\"ended_at\":\"2026-12-03T12:00:04.000000Z\"}"),
        ("{\"id\":\"ses_1\",\"pid\":2,\"state\":\"exited\",\"argv\":[\"echo\",\"hi\"],\"user\":\"user\","
         "\"exit\":{\"code\":0,\"signal\":0,\"oom\":false,\"killed\":false,\"reason\":null},"
         "\"created_at\":\"2026-12-03T12:00:01.000000Z\",\"started_at\":\"2026-12-03T12:00:01.500000Z\","
         "\"ended_at\":\"2026-12-03T12:00:02.000000Z\"}"),
        ("{\"id\":\"ses_3\",\"pid\":4,\"state\":\"exited\",\"argv\":[\"sleep\",\"9\"],"
         "\"exit\":{\"code\":-1,\"signal\":9,\"oom\":true,\"killed\":true,\"reason\":\"memory\"},"
         "\"created_at\":\"2026-12-03T12:00:05.000000Z\",\"started_at\":null,"
         "\"ended_at\":\"2026-12-03T12:00:06.000000Z\"}"),
        ("{\"id\":\"ses_4\",\"pid\":null,\"state\":\"failed\",\"argv\":[\"x\"],\"error\":\"the worker lost it\","
         "\"created_at\":\"2026-12-03T12:00:07.000000Z\",\"started_at\":null,"
         "\"ended_at\":\"2026-12-03T12:00:08.000000Z\"}"),
        ("{\"id\":\"ses_5\",\"pid\":9,\"state\":\"running\",\"argv\":[\"top\"],"
         "\"created_at\":\"2026-12-03T12:00:08.500000Z\",\"started_at\":\"not a time\"}"),
};

START_TEST(logs_in_order)
{
        e2b_view_logs l;
        e2b_view_logs_init(&l);
        _cleanup_json_ json_object *sb = parse(SANDBOX);
        e2b_view_logs_sandbox(&l, sb);
        for (size_t i = 0; i < sizeof(sessions) / sizeof(sessions[0]); i++) {
                _cleanup_json_ json_object *s = parse(sessions[i]);
                e2b_view_logs_session(&l, s);
        }
        _cleanup_json_ json_object *all = e2b_view_logs_answer(&l, 0, 1000);
        json_object *logs = json_object_object_get(all, "logs"), *entries = json_object_object_get(all, "logEntries");
        static const char *const want[] = {
                ("{\"level\":\"info\",\"logger\":\"space.sandbox\",\"message\":\"sandbox "
                 "created\",\"template\":\"base\"}"),
                ("{\"level\":\"info\",\"logger\":\"space.process\",\"message\":\"process started\",\"pid\":2,"
                 "\"sessionID\":\"ses_1\",\"cmd\":\"echo hi\",\"user\":\"user\"}"),
                ("{\"level\":\"info\",\"logger\":\"space.process\",\"message\":\"process exited\",\"pid\":2,"
                 "\"sessionID\":\"ses_1\",\"exitCode\":0}"),
                ("{\"level\":\"info\",\"logger\":\"space.process\",\"message\":\"process started\",\"pid\":3,"
                 "\"sessionID\":\"ses_2\",\"cmd\":\"/bin/sh -c exit 7\"}"),
                ("{\"level\":\"warn\",\"logger\":\"space.process\",\"message\":\"process exited\",\"pid\":3,"
                 "\"sessionID\":\"ses_2\",\"exitCode\":7}"),
                ("{\"level\":\"info\",\"logger\":\"space.process\",\"message\":\"process started\",\"pid\":4,"
                 "\"sessionID\":\"ses_3\",\"cmd\":\"sleep 9\"}"),
                ("{\"level\":\"warn\",\"logger\":\"space.process\",\"message\":\"process exited\",\"pid\":4,"
                 "\"sessionID\":\"ses_3\",\"exitCode\":-1,\"signal\":9,\"reason\":\"memory\",\"oom\":true}"),
                ("{\"level\":\"info\",\"logger\":\"space.process\",\"message\":\"process started\",\"sessionID\":"
                 "\"ses_4\",\"cmd\":\"x\"}"),
                ("{\"level\":\"error\",\"logger\":\"space.process\",\"message\":\"process failed\",\"sessionID\":"
                 "\"ses_4\",\"error\":\"the worker lost it\"}"),
                ("{\"level\":\"info\",\"logger\":\"space.sandbox\",\"message\":\"sandbox suspended\",\"state\":"
                 "\"suspended\",\"desiredState\":\"suspended\"}"),
        };
        static const char *const times[] = {
                "2026-12-03T12:00:00.000Z", "2026-12-03T12:00:01.500Z", "2026-12-03T12:00:02.000Z",
                "2026-12-03T12:00:03.100Z", "2026-12-03T12:00:04.000Z", "2026-12-03T12:00:05.000Z",
                "2026-12-03T12:00:06.000Z", "2026-12-03T12:00:07.000Z", "2026-12-03T12:00:08.000Z",
                "2026-12-03T12:00:09.000Z",
        };
        ck_assert_uint_eq(json_object_array_length(logs), sizeof(want) / sizeof(want[0]));
        ck_assert_uint_eq(json_object_array_length(entries), sizeof(want) / sizeof(want[0]));
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
                json_object *log = json_object_array_get_idx(logs, i), *e = json_object_array_get_idx(entries, i);
                ck_assert_str_eq(json_object_get_string(json_object_object_get(log, "line")), want[i]);
                ck_assert_str_eq(json_object_get_string(json_object_object_get(log, "timestamp")), times[i]);
                ck_assert_str_eq(json_object_get_string(json_object_object_get(e, "timestamp")), times[i]);
        }
        /* Entries: level and message apart, every field a string. */
        ck_assert_str_eq(
                str(json_object_array_get_idx(entries, 6)),
                "{\"timestamp\":\"2026-12-03T12:00:06.000Z\",\"level\":\"warn\",\"message\":\"process exited\","
                "\"fields\":{\"pid\":\"4\",\"sessionID\":\"ses_3\",\"exitCode\":\"-1\",\"signal\":\"9\","
                "\"reason\":\"memory\",\"oom\":\"true\"}}");
        /* From start on (the entry at that very millisecond included), at most limit. */
        _cleanup_json_ json_object *later = e2b_view_logs_answer(&l, INT64_C(1796299206000), 1000);
        ck_assert_uint_eq(json_object_array_length(json_object_object_get(later, "logs")), 4);
        _cleanup_json_ json_object *two = e2b_view_logs_answer(&l, INT64_C(1796299206000), 2);
        json_object *first = json_object_array_get_idx(json_object_object_get(two, "logEntries"), 0);
        ck_assert_uint_eq(json_object_array_length(json_object_object_get(two, "logs")), 2);
        ck_assert_str_eq(json_object_get_string(json_object_object_get(first, "timestamp")),
                         "2026-12-03T12:00:06.000Z");
        e2b_view_logs_free(&l);
}
END_TEST

START_TEST(logs_of_a_running_sandbox_and_long_commands)
{
        e2b_view_logs l;
        e2b_view_logs_init(&l);
        _cleanup_json_ json_object *sb = parse("{\"state\":\"running\",\"created_at\":\"2026-12-03T12:00:00Z\","
                                               "\"updated_at\":\"2026-12-03T12:00:09Z\"}");
        e2b_view_logs_sandbox(&l, sb);
        /* A command cut at 256 bytes, not inside a character. */
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_buf_append_str(&b, "{\"argv\":[\"echo\",\"", NULL);
        for (int i = 0; i < 200; i++)
                sp_buf_append_str(&b, "\u00e9", NULL);
        sp_buf_append_str(&b, "\"],\"started_at\":\"2026-12-03T12:00:01Z\",\"state\":\"running\"}", NULL);
        _cleanup_json_ json_object *s = parse(b.data);
        e2b_view_logs_session(&l, s);
        _cleanup_json_ json_object *out = e2b_view_logs_answer(&l, 0, 1000);
        json_object *entries = json_object_object_get(out, "logEntries");
        ck_assert_uint_eq(json_object_array_length(entries), 2);
        json_object *fields = json_object_object_get(json_object_array_get_idx(entries, 1), "fields");
        const char *cmd = json_object_get_string(json_object_object_get(fields, "cmd"));
        ck_assert_uint_eq(strlen(cmd), 255 + strlen("\u2026"));
        ck_assert_str_eq(cmd + 255, "\u2026");
        ck_assert_int_eq(strncmp(cmd, "echo \u00e9\u00e9", 9), 0);
        e2b_view_logs_free(&l);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("e2b_view");
        TCase *tc = tcase_create("view");
        tcase_add_test(tc, templates);
        tcase_add_test(tc, logs_in_order);
        tcase_add_test(tc, logs_of_a_running_sandbox_and_long_commands);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
