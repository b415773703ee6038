/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Worker sessions against a real agent: output stored byte-exact, a full log
 * stops the command instead of dropping output, and a session survives the
 * loss of the worker's state in memory (reloaded from disk, re-attached).
 */
#include <dirent.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/agent_link.h"
#include "harness.h"
#include "session/session.h"
#include "space/buf.h"
#include "space/fileio.h"
#include "space/cleanup.h"
#include "space/json.h"

static char *dir;
static char sock_path[100];
static pid_t agent_pid;
static struct event_base *base;

static void setup(void)
{
        dir = sp_test_tmpdir("session");
        snprintf(sock_path, sizeof(sock_path), "%s/a.sock", dir);
        char bin[1024];
        snprintf(bin, sizeof(bin), "%s/bin/space-agent", sp_test_binary_dir());
        agent_pid = fork();
        if (agent_pid == 0) {
                for (int sig = 1; sig < NSIG; sig++)
                        signal(sig, SIG_DFL);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                execl(bin, bin, "--listen", sock_path, "--log-level", "warn", (char *)NULL);
                _exit(127);
        }
        for (int i = 0; i < 500 && access(sock_path, F_OK) < 0; i++)
                usleep(10000);
        base = event_base_new();
}

static void teardown(void)
{
        kill(agent_pid, SIGTERM);
        for (int i = 0; i < 300 && waitpid(agent_pid, NULL, WNOHANG) == 0; i++)
                usleep(10000);
        kill(agent_pid, SIGKILL);
        waitpid(agent_pid, NULL, 0);
        event_base_free(base);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

static void on_ready(wk_agent_link *l, void *ud)
{
        (void)l;
        *(bool *)ud = true;
        event_base_loopbreak(base);
}

static const wk_agent_link_ops link_ops = {.on_ready = on_ready};

static wk_agent_link *connect_link(void)
{
        static bool ready;
        ready = false;
        _cleanup_error_ sp_error *e = NULL;
        wk_agent_link *l = wk_agent_link_new(base, sock_path, &link_ops, &ready, &e);
        ck_assert_msg(l, "link: %s", e ? e->message : "?");
        struct timeval tv = {10, 0};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
        ck_assert(ready);
        return l;
}

typedef struct {
        bool ended;
} watch_state;

static void on_state(wk_session *s, void *ud)
{
        watch_state *w = ud;
        if (wk_session_get_state(s) >= WK_SESSION_EXITED) {
                w->ended = true;
                event_base_loopbreak(base);
        }
}

/* Runs the loop for up to ms, or until a callback breaks it. */
static void spin(int ms)
{
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
}

static json_object *exec_req(const char *script)
{
        json_object *o = json_object_new_object();
        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string(script));
        json_object_object_add(o, "argv", argv);
        return o;
}

static void read_all(wk_session *s, sp_buf *out, bool mark)
{
        char buf[65536];
        uint64_t off = out->len;
        while (off < wk_session_output_end(s)) {
                uint8_t st;
                size_t n;
                ck_assert_int_eq(wk_session_read(s, off, buf, sizeof(buf), &st, &n, NULL), 0);
                sp_buf_append(out, buf, n, NULL);
                off += n;
        }
        if (mark)
                wk_session_mark_read(s, off);
}

static void expected(sp_buf *b, int lines)
{
        for (int i = 0; i < lines; i++)
                sp_buf_appendf(b, NULL, "line %d\n", i);
}

#define SCRIPT(n) "i=0; while [ $i -lt " #n " ]; do echo line $i; i=$((i+1)); done"

START_TEST(output_is_stored_exactly)
{
        wk_agent_link *l = connect_link();
        char sdir[600];
        snprintf(sdir, sizeof(sdir), "%s/ses_1", dir);
        _cleanup_json_ json_object *req = exec_req(SCRIPT(30000) "; echo bye >&2; exit 7");
        wk_session *s;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(wk_session_start(l, sdir, "ses_1", "sbx_1", req, 64 << 20, NULL, &s, &e) == 0, "%s",
                      e ? e->message : "");
        watch_state ws = {0};
        wk_session_watch w = {.on_state = on_state, .userdata = &ws};
        wk_session_watch_add(s, &w);
        /* Ended is not complete: the process may end while the agent still
         * holds output (REPLY "ended"); the rest follows, then EXIT. */
        for (int i = 0; i < 100 && !wk_session_output_complete(s); i++)
                spin(300);
        ck_assert(ws.ended);
        ck_assert(wk_session_output_complete(s));
        ck_assert_int_eq(wk_session_get_state(s), WK_SESSION_EXITED);
        ck_assert_int_eq(wk_session_get_exit(s)->code, 7);
        _cleanup_buf_ sp_buf got = SP_BUF_INIT, want = SP_BUF_INIT;
        read_all(s, &got, false);
        expected(&want, 30000);
        sp_buf_append_str(&want, "bye\n", NULL);
        ck_assert_uint_eq(got.len, want.len);
        ck_assert(memcmp(got.data, want.data, want.len) == 0);
        wk_session_watch_remove(s, &w);
        ck_assert_int_eq(wk_session_remove(s, NULL), 0);
        ck_assert_int_lt(access(sdir, F_OK), 0);
        wk_agent_link_free(l);
}
END_TEST

START_TEST(full_log_blocks_the_command)
{
        wk_agent_link *l = connect_link();
        char sdir[600];
        snprintf(sdir, sizeof(sdir), "%s/ses_2", dir);
        /* ~3.3 MB of output into a 2 MiB log that nobody reads yet */
        _cleanup_json_ json_object *req = exec_req(SCRIPT(300000));
        wk_session *s;
        ck_assert_int_eq(wk_session_start(l, sdir, "ses_2", "sbx_1", req, 2 << 20, NULL, &s, NULL), 0);
        watch_state ws = {0};
        wk_session_watch w = {.on_state = on_state, .userdata = &ws};
        wk_session_watch_add(s, &w);
        spin(1500);
        /* It is stuck, not finished, and the log holds no more than its capacity. */
        ck_assert(!ws.ended);
        ck_assert_int_eq(wk_session_get_state(s), WK_SESSION_RUNNING);
        ck_assert_uint_le(wk_session_output_end(s), 2 << 20);
        ck_assert_uint_eq(wk_session_output_start(s), 0);

        /* A reader drains it as it comes; the command then finishes and nothing is missing. */
        _cleanup_buf_ sp_buf got = SP_BUF_INIT, want = SP_BUF_INIT;
        for (int i = 0; i < 2000 && !wk_session_output_complete(s); i++) {
                read_all(s, &got, true);
                spin(20);
        }
        read_all(s, &got, true);
        ck_assert(ws.ended);
        ck_assert(wk_session_output_complete(s));
        expected(&want, 300000);
        ck_assert_uint_eq(got.len, want.len);
        ck_assert(memcmp(got.data, want.data, want.len) == 0);
        wk_session_watch_remove(s, &w);
        wk_session_remove(s, NULL);
        wk_agent_link_free(l);
}
END_TEST

START_TEST(survives_losing_the_worker_state)
{
        wk_agent_link *l = connect_link();
        char sdir[600];
        snprintf(sdir, sizeof(sdir), "%s/ses_3", dir);
        _cleanup_json_ json_object *req = exec_req(SCRIPT(200000));
        wk_session *s;
        ck_assert_int_eq(wk_session_start(l, sdir, "ses_3", "sbx_1", req, 64 << 20, NULL, &s, NULL), 0);
        spin(200);
        uint64_t before = wk_session_output_end(s);
        /* The worker "dies": its memory and connection are gone, the files remain. */
        wk_agent_link_free(l);
        wk_session_free(s);
        spin(300);

        l = connect_link();
        ck_assert_int_eq(wk_session_load(sdir, 64 << 20, NULL, &s, NULL), 0);
        ck_assert_uint_ge(wk_session_output_end(s), before);
        ck_assert_int_eq(wk_session_attach_agent(s, l, NULL), 0);
        watch_state ws = {0};
        wk_session_watch w = {.on_state = on_state, .userdata = &ws};
        wk_session_watch_add(s, &w);
        /* The command may have ended while the worker was gone: the agent then
         * says so at once (REPLY "ended") and resends what was not stored. */
        for (int i = 0; i < 100 && !wk_session_output_complete(s); i++)
                spin(300);
        ck_assert(ws.ended);
        ck_assert(wk_session_output_complete(s));
        _cleanup_buf_ sp_buf got = SP_BUF_INIT, want = SP_BUF_INIT;
        read_all(s, &got, false);
        expected(&want, 200000);
        ck_assert_uint_eq(got.len, want.len);
        ck_assert(memcmp(got.data, want.data, want.len) == 0);
        ck_assert_int_eq(wk_session_get_exit(s)->code, 0);
        wk_session_watch_remove(s, &w);
        wk_session_remove(s, NULL);
        wk_agent_link_free(l);
}
END_TEST

/* session.json is a journal of records: a reload takes the last whole one
 * (a torn last line is skipped), with the first line's request; a session
 * stored the earlier way (one record, its log in log/) loads too; removing a
 * session leaves nothing of it. */
START_TEST(record_journal_reloads_the_last_state)
{
        wk_agent_link *l = connect_link();
        char sdir[600], path[1024];
        snprintf(sdir, sizeof(sdir), "%s/ses_4", dir);
        _cleanup_json_ json_object *req = exec_req("echo hello; exit 7");
        wk_session *s;
        ck_assert_int_eq(wk_session_start(l, sdir, "ses_4", "sbx_1", req, 64 << 20, NULL, &s, NULL), 0);
        watch_state ws = {0};
        wk_session_watch w = {.on_state = on_state, .userdata = &ws};
        wk_session_watch_add(s, &w);
        for (int i = 0; i < 100 && !wk_session_output_complete(s); i++)
                spin(100);
        ck_assert(wk_session_output_complete(s));
        wk_session_watch_remove(s, &w);
        wk_session_free(s);

        /* Several records, one per change; the last says it exited 7. */
        snprintf(path, sizeof(path), "%s/session.json", sdir);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(path, 1 << 20, &text, NULL), 0);
        int lines = 0;
        for (size_t i = 0; i < text.len; i++)
                lines += text.data[i] == '\n';
        ck_assert_int_ge(lines, 3); /* started, running, exited */
        ck_assert_ptr_nonnull(memmem(text.data, text.len, "\"request\"", 9));

        /* A torn record at the end (a write cut short) is skipped. */
        FILE *f = fopen(path, "a");
        ck_assert_ptr_nonnull(f);
        fputs("{\"id\":\"ses_4\",\"state\":\"runn", f);
        fclose(f);
        ck_assert_int_eq(wk_session_load(sdir, 64 << 20, NULL, &s, NULL), 0);
        ck_assert_int_eq(wk_session_get_state(s), WK_SESSION_EXITED);
        ck_assert_int_eq(wk_session_get_exit(s)->code, 7);
        _cleanup_buf_ sp_buf got = SP_BUF_INIT;
        read_all(s, &got, false);
        ck_assert_uint_eq(got.len, 6);
        ck_assert(memcmp(got.data, "hello\n", 6) == 0);
        wk_session_free(s);

        /* The earlier layout: one record without a newline, the log's segments in log/. */
        char old[700], seg[1400];
        snprintf(old, sizeof(old), "%s/ses_5", dir);
        snprintf(path, sizeof(path), "%s/log", old);
        ck_assert_int_eq(mkdir(old, 0700), 0);
        ck_assert_int_eq(mkdir(path, 0700), 0);
        DIR *d = opendir(sdir);
        ck_assert_ptr_nonnull(d);
        struct dirent *de;
        while ((de = readdir(d)))
                if (strstr(de->d_name, ".seg")) {
                        char from[1024];
                        snprintf(from, sizeof(from), "%s/%s", sdir, de->d_name);
                        snprintf(seg, sizeof(seg), "%s/%s", path, de->d_name);
                        ck_assert_int_eq(link(from, seg), 0);
                }
        closedir(d);
        snprintf(path, sizeof(path), "%s/session.json", old);
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs("{\"id\":\"ses_5\",\"sandbox_id\":\"sbx_1\",\"state\":\"exited\",\"request\":{\"op\":\"exec\"},"
              "\"exit\":{\"code\":9}}",
              f);
        fclose(f);
        ck_assert_int_eq(wk_session_load(old, 64 << 20, NULL, &s, NULL), 0);
        ck_assert_int_eq(wk_session_get_state(s), WK_SESSION_EXITED);
        ck_assert_int_eq(wk_session_get_exit(s)->code, 9);
        sp_buf_clear(&got);
        read_all(s, &got, false);
        ck_assert_uint_eq(got.len, 6);
        ck_assert_int_eq(wk_session_remove(s, NULL), 0);
        ck_assert_int_eq(access(old, F_OK), -1);

        ck_assert_int_eq(wk_session_load(sdir, 64 << 20, NULL, &s, NULL), 0);
        ck_assert_int_eq(wk_session_remove(s, NULL), 0);
        ck_assert_int_eq(access(sdir, F_OK), -1);
        wk_agent_link_free(l);
}
END_TEST

int main(void)
{
        Suite *su = suite_create("worker_session");
        TCase *tc = tcase_create("session");
        tcase_set_timeout(tc, 300); /* shared CI machines: line-at-a-time output under ASan is slow */
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, output_is_stored_exactly);
        tcase_add_test(tc, full_log_blocks_the_command);
        tcase_add_test(tc, survives_losing_the_worker_state);
        tcase_add_test(tc, record_journal_reloads_the_last_state);
        suite_add_tcase(su, tc);
        return sp_test_main(su);
}
