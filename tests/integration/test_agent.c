/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration tests of space-agent over its real protocol on a unix socket:
 * exec with streams and exit codes, stdin, PTY, flow control (no byte beyond
 * the credit), resume after reconnection with nothing lost or repeated,
 * whole-tree kill, file operations, and clear errors.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_client.h"
#include "harness.h"
#include "space/agent_proto.h"
#include "space/cleanup.h"
#include "space/json.h"

static char *dir;
static char sock_path[100];
static pid_t agent_pid;

static void agent_start(void)
{
        dir = sp_test_tmpdir("agent");
        snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", dir);
        char bin[1024];
        snprintf(bin, sizeof(bin), "%s/bin/space-agent", sp_test_binary_dir());
        agent_pid = fork();
        ck_assert_int_ge(agent_pid, 0);
        if (agent_pid == 0) {
                /* Check's handlers would signal the test's process group from here. */
                for (int sig = 1; sig < NSIG; sig++)
                        signal(sig, SIG_DFL);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                /* As root the agent gets its own PID namespace, as in a sandbox: killing it
                 * then takes every command with it. */
                if (sp_test_is_root() && unshare(CLONE_NEWPID | CLONE_NEWNS) == 0) {
                        if (fork() != 0) {
                                int st;
                                wait(&st);
                                _exit(0);
                        }
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
                            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                                _exit(126);
                }
                execl(bin, bin, "--listen", sock_path, "--log-level", "warn", (char *)NULL);
                _exit(127);
        }
        for (int i = 0; i < 500 && access(sock_path, F_OK) < 0; i++)
                usleep(10000);
        ck_assert_msg(access(sock_path, F_OK) == 0, "agent did not create its socket");
}

static void agent_stop(void)
{
        if (agent_pid > 0) {
                /* The agent forwards SIGTERM to every command's tree and exits when they have. */
                kill(agent_pid, SIGTERM);
                for (int i = 0; i < 500 && waitpid(agent_pid, NULL, WNOHANG) == 0; i++)
                        usleep(10000);
                kill(agent_pid, SIGKILL);
                waitpid(agent_pid, NULL, 0);
        }
        sp_test_tmpdir_remove(dir);
        free(dir);
}

START_TEST(exec_streams_and_exit_code)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(c, 1,
                           "{\"op\":\"exec\",\"session\":\"s1\",\"argv\":[\"sh\",\"-c\",\"echo out; echo err >&2; "
                           "echo $GREETING; pwd; exit 3\"],\"env\":{\"GREETING\":\"hi there\"},\"cwd\":\"/tmp\"}");
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 1, &r, true);
        ck_assert(r.started);
        ck_assert_str_eq(r.out.data, "out\nhi there\n/tmp\n");
        ck_assert_str_eq(r.err.data, "err\n");
        ck_assert_int_eq(sp_test_result_int(&r, "code"), 3);
        ck_assert_int_eq(sp_test_result_int(&r, "signal"), 0);
        sp_test_result_free(&r);
        sp_test_agent_close(c);
}
END_TEST

START_TEST(exec_errors_are_clear)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(c, 1, "{\"op\":\"exec\",\"session\":\"s1\",\"argv\":[\"/no/such/program\"]}");
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 1, &r, true);
        ck_assert_str_eq(sp_test_result_error(&r), "not_found");
        sp_test_result_free(&r);

        sp_test_agent_open(c, 2, "{\"op\":\"exec\",\"session\":\"s2\",\"argv\":[\"true\"],\"cwd\":\"/no/such/dir\"}");
        sp_test_result r2 = {0};
        sp_test_agent_run_to_exit(c, 2, &r2, true);
        ck_assert_str_eq(sp_test_result_error(&r2), "not_found");
        sp_test_result_free(&r2);

        sp_test_agent_open(c, 3, "{\"op\":\"exec\",\"session\":\"s3\",\"argv\":[\"true\"],\"user\":\"no-such-user\"}");
        sp_test_result r3 = {0};
        sp_test_agent_run_to_exit(c, 3, &r3, true);
        ck_assert_str_eq(sp_test_result_error(&r3), "not_found");
        sp_test_result_free(&r3);

        /* a malformed request fails its channel, and the connection keeps working */
        sp_test_agent_open(c, 4, "{\"op\":\"exec\",\"argv\":\"sh\"}");
        sp_test_result r4 = {0};
        sp_test_agent_run_to_exit(c, 4, &r4, true);
        ck_assert_str_eq(sp_test_result_error(&r4), "invalid_argument");
        sp_test_result_free(&r4);
        sp_test_agent_open(c, 5, "{\"op\":\"exec\",\"session\":\"s5\",\"argv\":[\"true\"]}");
        sp_test_result r5 = {0};
        sp_test_agent_run_to_exit(c, 5, &r5, true);
        ck_assert_int_eq(sp_test_result_int(&r5, "code"), 0);
        sp_test_result_free(&r5);
        sp_test_agent_close(c);
}
END_TEST

static void write_text(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
}

/* Runs argv (a JSON list) on channel ch with PATH set to path, to its exit. */
static void exec_with_path(sp_test_agent *c, uint32_t ch, const char *argv, const char *path, sp_test_result *r)
{
        char req[4096];
        snprintf(req, sizeof(req), "{\"op\":\"exec\",\"session\":\"p%u\",\"argv\":%s,\"env\":{\"PATH\":\"%s\"}}",
                 (unsigned)ch, argv, path);
        sp_test_agent_open(c, ch, req);
        sp_test_agent_run_to_exit(c, ch, r, true);
}

/* A command is found as execvp finds it, with the command's PATH: each
 * directory in turn past ones where the file is not executable, a file
 * without "#!" runs under /bin/sh, and a file that is nowhere executable is
 * refused as such. */
START_TEST(exec_searches_the_commands_path)
{
        char d0[1100], d1[1100], f[1200];
        snprintf(d0, sizeof(d0), "%s/d0", dir);
        snprintf(d1, sizeof(d1), "%s/d1", dir);
        ck_assert_int_eq(mkdir(d0, 0755), 0);
        ck_assert_int_eq(mkdir(d1, 0755), 0);
        snprintf(f, sizeof(f), "%s/hello", d0);
        write_text(f, "echo not me\n");
        ck_assert_int_eq(chmod(f, 0644), 0);
        snprintf(f, sizeof(f), "%s/hello", d1);
        write_text(f, "echo from-script \"$1\" \"$2\"\n");
        ck_assert_int_eq(chmod(f, 0755), 0);
        snprintf(f, sizeof(f), "%s/only-readable", d1);
        write_text(f, "echo no\n");
        ck_assert_int_eq(chmod(f, 0644), 0);

        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        char path[2400];
        snprintf(path, sizeof(path), "/no/such/dir:%s:%s:/bin", d0, d1);
        sp_test_result r = {0};
        exec_with_path(c, 1, "[\"hello\",\"a b\",\"c\"]", path, &r);
        ck_assert_str_eq(r.out.data, "from-script a b c\n");
        ck_assert_int_eq(sp_test_result_int(&r, "code"), 0);
        sp_test_result_free(&r);

        sp_test_result r2 = {0};
        exec_with_path(c, 2, "[\"only-readable\"]", d1, &r2);
        ck_assert_str_eq(sp_test_result_error(&r2), "permission_denied");
        sp_test_result_free(&r2);

        /* By path, the search is not made. */
        char argv[1200];
        snprintf(argv, sizeof(argv), "[\"%s/hello\",\"x\"]", d1);
        sp_test_result r3 = {0};
        exec_with_path(c, 3, argv, "/no/such/dir", &r3);
        ck_assert_str_eq(r3.out.data, "from-script x \n");
        sp_test_result_free(&r3);
        sp_test_agent_close(c);
}
END_TEST

START_TEST(stdin_roundtrip)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(c, 7, "{\"op\":\"exec\",\"session\":\"cat\",\"argv\":[\"cat\"],\"stdin\":true}");
        sp_test_agent_send(c, PR_AGENT_DATA, PR_STREAM_STDIN, 7, "hello ", 6);
        sp_test_agent_send(c, PR_AGENT_DATA, PR_STREAM_STDIN, 7, "world\n", 6);
        sp_test_agent_send(c, PR_AGENT_EOF, PR_STREAM_STDIN, 7, NULL, 0);
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 7, &r, true);
        ck_assert_str_eq(r.out.data, "hello world\n");
        ck_assert_int_eq(sp_test_result_int(&r, "code"), 0);
        sp_test_result_free(&r);
        sp_test_agent_close(c);
}
END_TEST

START_TEST(pty_sees_window_size)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(
                c, 1,
                "{\"op\":\"exec\",\"session\":\"tty\",\"argv\":[\"sh\",\"-c\",\"stty size; test -t 0 && echo "
                "tty\"],\"pty\":{\"rows\":40,\"cols\":120}}");
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 1, &r, true);
        ck_assert_msg(strstr(r.out.data, "40 120") != NULL, "got %s", r.out.data);
        ck_assert_msg(strstr(r.out.data, "tty") != NULL, "got %s", r.out.data);
        ck_assert_uint_eq(r.err.len, 0);
        sp_test_result_free(&r);
        sp_test_agent_close(c);
}
END_TEST

START_TEST(flow_control_holds_at_credit)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        /* 1 MiB of output, 16 KiB of credit. */
        sp_test_agent_open(c, 1,
                           "{\"op\":\"exec\",\"session\":\"big\",\"argv\":[\"head\",\"-c\",\"1048576\",\"/dev/zero\"],"
                           "\"window\":16384}");
        size_t got = 0;
        while (got < 16384) {
                sp_test_frame f = sp_test_agent_next(c);
                if (f.type == PR_AGENT_DATA)
                        got += f.payload.len;
                sp_buf_free(&f.payload);
        }
        ck_assert_uint_eq(got, 16384);
        /* A ping answered in order proves nothing more was sent meanwhile. */
        sp_test_agent_open(c, 2, "{\"op\":\"ping\"}");
        for (;;) {
                sp_test_frame f = sp_test_agent_next(c);
                ck_assert_msg(f.type != PR_AGENT_DATA, "agent sent beyond its credit");
                sp_buf_free(&f.payload);
                if (f.type == PR_AGENT_EXIT && f.channel == 2)
                        break;
        }
        sp_test_agent_ack(c, 1, PR_STREAM_STDOUT, 16384);
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 1, &r, true);
        ck_assert_uint_eq(got + r.out.len, 1048576);
        ck_assert_int_eq(sp_test_result_int(&r, "code"), 0);
        sp_test_result_free(&r);
        sp_test_agent_close(c);
}
END_TEST

START_TEST(reconnect_resumes_exactly_once)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(
                c, 1,
                "{\"op\":\"exec\",\"session\":\"seq\",\"argv\":[\"sh\",\"-c\",\"i=0; while [ $i -lt 20000 ]; "
                "do echo line $i; i=$((i+1)); done\"],\"window\":8192}");
        /* Take some output, acknowledge only part of it ("stored"), then drop the connection. */
        _cleanup_buf_ sp_buf stored = SP_BUF_INIT;
        size_t received = 0;
        while (received < 8192) {
                sp_test_frame f = sp_test_agent_next(c);
                if (f.type == PR_AGENT_DATA) {
                        size_t keep = f.payload.len;
                        if (stored.len + keep > 5000)
                                keep = 5000 - stored.len;
                        sp_buf_append(&stored, f.payload.data, keep, NULL);
                        received += f.payload.len;
                }
                sp_buf_free(&f.payload);
        }
        sp_test_agent_ack(c, 1, PR_STREAM_STDOUT, 5000);
        sp_test_agent_close(c);

        c = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(c, 9, "{\"op\":\"attach\",\"session\":\"seq\",\"stdout_offset\":5000,\"stderr_offset\":0}");
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 9, &r, true);
        sp_buf_append(&stored, r.out.data, r.out.len, NULL);
        /* Exactly the sequence, once. */
        _cleanup_buf_ sp_buf want = SP_BUF_INIT;
        for (int i = 0; i < 20000; i++)
                sp_buf_appendf(&want, NULL, "line %d\n", i);
        ck_assert_uint_eq(stored.len, want.len);
        ck_assert(memcmp(stored.data, want.data, want.len) == 0);
        ck_assert_int_eq(sp_test_result_int(&r, "code"), 0);
        sp_test_result_free(&r);

        /* The exit stays until release; then the session is gone. */
        sp_test_agent_open(c, 10, "{\"op\":\"release\",\"session\":\"seq\"}");
        sp_test_result rel = {0};
        sp_test_agent_run_to_exit(c, 10, &rel, false);
        ck_assert_ptr_null(sp_test_result_error(&rel));
        sp_test_result_free(&rel);
        sp_test_agent_open(c, 11, "{\"op\":\"attach\",\"session\":\"seq\",\"stdout_offset\":0,\"stderr_offset\":0}");
        sp_test_result gone = {0};
        sp_test_agent_run_to_exit(c, 11, &gone, false);
        ck_assert_str_eq(sp_test_result_error(&gone), "not_found");
        sp_test_result_free(&gone);
        sp_test_agent_close(c);
}
END_TEST

static int count_processes_with_marker(const char *marker)
{
        int n = 0;
        _cleanup_closedir_ DIR *d = opendir("/proc");
        struct dirent *de;
        while ((de = readdir(d))) {
                char path[300], cmd[4096];
                snprintf(path, sizeof(path), "/proc/%s/cmdline", de->d_name);
                _cleanup_close_ int fd = open(path, O_RDONLY);
                if (fd < 0)
                        continue;
                ssize_t len = read(fd, cmd, sizeof(cmd) - 1);
                if (len <= 0)
                        continue;
                for (ssize_t i = 0; i < len; i++)
                        if (cmd[i] == '\0')
                                cmd[i] = ' ';
                cmd[len] = '\0';
                if (strncmp(cmd, marker, strlen(marker)) == 0)
                        n++;
        }
        return n;
}

START_TEST(kill_takes_the_whole_tree)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        /* Children in the background, one of which starts its own session. */
        sp_test_agent_open(c, 1,
                           "{\"op\":\"exec\",\"session\":\"tree\",\"argv\":[\"sh\",\"-c\",\"sleep 1001 & setsid sleep "
                           "1001 & (sleep 1001 &) ; echo started; wait\"]}");
        for (;;) {
                sp_test_frame f = sp_test_agent_next(c);
                bool started = f.type == PR_AGENT_DATA && strstr(f.payload.data ? f.payload.data : "", "started");
                if (f.type == PR_AGENT_DATA)
                        sp_test_agent_ack(c, 1, f.stream, (uint32_t)f.payload.len);
                sp_buf_free(&f.payload);
                if (started)
                        break;
        }
        for (int i = 0; i < 200 && count_processes_with_marker("sleep 1001") < 3; i++)
                usleep(10000);
        ck_assert_int_eq(count_processes_with_marker("sleep 1001"), 3);
        sp_test_agent_send(c, PR_AGENT_CONTROL, 0, 1, "{\"kill\":true}", 13);
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 1, &r, true);
        ck_assert_int_eq(sp_test_result_int(&r, "signal"), 9);
        json_object *killed;
        ck_assert(json_object_object_get_ex(r.exit, "killed", &killed) && json_object_get_boolean(killed));
        for (int i = 0; i < 200 && count_processes_with_marker("sleep 1001") > 0; i++)
                usleep(10000);
        ck_assert_int_eq(count_processes_with_marker("sleep 1001"), 0);
        sp_test_result_free(&r);
        sp_test_agent_close(c);
}
END_TEST

static json_object *simple(sp_test_agent *c, uint32_t ch, const char *json)
{
        sp_test_agent_open(c, ch, json);
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, ch, &r, false);
        json_object *e = json_object_get(r.exit);
        sp_test_result_free(&r);
        return e;
}

static const char *err_code(json_object *o)
{
        json_object *e, *code;
        if (!json_object_object_get_ex(o, "error", &e) || !json_object_object_get_ex(e, "code", &code))
                return NULL;
        return json_object_get_string(code);
}

/* A write of data: the request json on channel ch, the bytes once the agent
 * grants credit, then EOF. Returns the EXIT payload (an error when the write
 * was refused before any credit). */
static json_object *write_small(sp_test_agent *c, uint32_t ch, const char *json, const char *data)
{
        sp_test_agent_open(c, ch, json);
        bool sent = false;
        for (;;) {
                sp_test_frame f = sp_test_agent_next(c);
                ck_assert_uint_eq(f.channel, ch);
                if (f.type == PR_AGENT_EXIT) {
                        json_object *o = NULL;
                        ck_assert_int_eq(sp_json_parse(f.payload.data, f.payload.len, &o, NULL), 0);
                        sp_buf_free(&f.payload);
                        return o;
                }
                if (f.type == PR_AGENT_WINDOW && !sent) {
                        sp_test_agent_send(c, PR_AGENT_DATA, PR_STREAM_FILE, ch, data, strlen(data));
                        sp_test_agent_send(c, PR_AGENT_EOF, PR_STREAM_FILE, ch, NULL, 0);
                        sent = true;
                }
                sp_buf_free(&f.payload);
        }
}

static const char *str_of(json_object *o, const char *k)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : NULL;
}

/* write with parents: the missing directories made (mode 0755), existing
 * ones fine, a file in the way refused; the answer names the path written. */
START_TEST(write_makes_parents)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        char json[1024], want[600];
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/p/q/r.txt\"}", dir);
        json_object *o = simple(c, 1, json);
        ck_assert_str_eq(err_code(o), "not_found"); /* no parents without asking */
        json_object_put(o);

        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/p/q/r.txt\",\"parents\":true}", dir);
        o = write_small(c, 2, json, "made");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        snprintf(want, sizeof(want), "%s/p/q/r.txt", dir);
        ck_assert_str_eq(str_of(o, "path"), want);
        ck_assert_str_eq(str_of(o, "size"), "4");
        json_object_put(o);
        struct stat st;
        snprintf(want, sizeof(want), "%s/p/q", dir);
        ck_assert_int_eq(stat(want, &st), 0);
        ck_assert(S_ISDIR(st.st_mode));
        ck_assert_int_eq(st.st_mode & 07777, 0755);

        /* again beside it: the parents exist */
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/p/q/s.txt\",\"parents\":true}", dir);
        o = write_small(c, 3, json, "x");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);

        /* a file where a directory should be: refused, naming it */
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/p/q/r.txt/t.txt\",\"parents\":true}", dir);
        o = simple(c, 4, json);
        ck_assert_str_eq(err_code(o), "invalid_argument");
        json_object *e = NULL;
        ck_assert(json_object_object_get_ex(o, "error", &e));
        ck_assert_msg(strstr(str_of(e, "message"), "r.txt"), "%s", json_object_to_json_string(o));
        json_object_put(o);
        sp_test_agent_close(c);
}
END_TEST

START_TEST(files)
{
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        char path[512], json[1024];
        snprintf(path, sizeof(path), "%s/a/b/c", dir);
        snprintf(json, sizeof(json), "{\"op\":\"mkdir\",\"path\":\"%s\",\"parents\":true}", path);
        json_object *o = simple(c, 1, json);
        ck_assert_ptr_null(err_code(o));
        json_object_put(o);

        /* write 3 MiB in chunks under the agent's credit, then read it back */
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/file.bin\",\"mode\":384}", path);
        sp_test_agent_open(c, 2, json);
        sp_test_frame w = sp_test_agent_next(c);
        ck_assert_int_eq(w.type, PR_AGENT_WINDOW);
        sp_buf_free(&w.payload);
        static unsigned char chunk[65536];
        uint64_t sum = 0;
        for (int i = 0; i < 48; i++) {
                for (size_t j = 0; j < sizeof(chunk); j++)
                        chunk[j] = (unsigned char)(i * 31 + j * 7);
                for (size_t j = 0; j < sizeof(chunk); j++)
                        sum = sum * 131 + chunk[j];
                sp_test_agent_send(c, PR_AGENT_DATA, PR_STREAM_FILE, 2, chunk, sizeof(chunk));
        }
        sp_test_agent_send(c, PR_AGENT_EOF, PR_STREAM_FILE, 2, NULL, 0);
        sp_test_result wr = {0};
        for (;;) { /* skip WINDOW acks until EXIT */
                sp_test_frame f = sp_test_agent_next(c);
                if (f.type == PR_AGENT_EXIT) {
                        sp_json_parse(f.payload.data, f.payload.len, &wr.exit, NULL);
                        sp_buf_free(&f.payload);
                        break;
                }
                sp_buf_free(&f.payload);
        }
        ck_assert_int_eq(sp_test_result_int(&wr, "size"), 48 * 65536);
        sp_test_result_free(&wr);

        char file[600];
        snprintf(file, sizeof(file), "%s/file.bin", path);
        struct stat st;
        ck_assert_int_eq(stat(file, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);

        snprintf(json, sizeof(json), "{\"op\":\"read\",\"path\":\"%s\",\"window\":65536}", file);
        sp_test_agent_open(c, 3, json);
        sp_test_result rd = {0};
        sp_test_agent_run_to_exit(c, 3, &rd, true);
        ck_assert_msg(rd.out.len == 48 * 65536, "read %zu bytes: %s", rd.out.len, json_object_to_json_string(rd.exit));
        uint64_t sum2 = 0;
        for (size_t j = 0; j < rd.out.len; j++)
                sum2 = sum2 * 131 + (unsigned char)rd.out.data[j];
        ck_assert(sum == sum2);
        sp_test_result_free(&rd);

        snprintf(json, sizeof(json), "{\"op\":\"read\",\"path\":\"%s\",\"offset\":10,\"length\":5}", file);
        sp_test_agent_open(c, 4, json);
        sp_test_result part = {0};
        sp_test_agent_run_to_exit(c, 4, &part, true);
        ck_assert_uint_eq(part.out.len, 5);
        ck_assert_int_eq(sp_test_result_int(&part, "size"), 5);
        sp_test_result_free(&part);

        snprintf(json, sizeof(json), "{\"op\":\"stat\",\"path\":\"%s\"}", file);
        o = simple(c, 5, json);
        json_object *v;
        ck_assert(json_object_object_get_ex(o, "size", &v) && json_object_get_int64(v) == 48 * 65536);
        ck_assert(json_object_object_get_ex(o, "type", &v) && strcmp(json_object_get_string(v), "file") == 0);
        if (sp_test_is_root()) /* the ids' names, from /etc/passwd and /etc/group */
                ck_assert_str_eq(str_of(o, "owner"), "root");
        json_object_put(o);

        snprintf(json, sizeof(json), "{\"op\":\"move\",\"from\":\"%s\",\"to\":\"%s/moved\"}", file, dir);
        o = simple(c, 6, json);
        ck_assert_ptr_null(err_code(o));
        json_object_put(o);

        snprintf(json, sizeof(json), "{\"op\":\"list\",\"path\":\"%s\"}", dir);
        o = simple(c, 7, json);
        json_object *entries;
        ck_assert(json_object_object_get_ex(o, "entries", &entries));
        ck_assert_int_eq(json_object_array_length(entries), 3); /* a, agent.sock, moved */
        json_object_put(o);

        snprintf(json, sizeof(json), "{\"op\":\"chmod\",\"path\":\"%s/moved\",\"mode\":420}", dir);
        o = simple(c, 8, json);
        ck_assert_ptr_null(err_code(o));
        json_object_put(o);
        snprintf(file, sizeof(file), "%s/moved", dir);
        ck_assert_int_eq(stat(file, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0644);

        snprintf(json, sizeof(json), "{\"op\":\"remove\",\"path\":\"%s/a\"}", dir);
        o = simple(c, 9, json);
        ck_assert_str_eq(err_code(o), "conflict"); /* not empty without recursive */
        json_object_put(o);
        snprintf(json, sizeof(json), "{\"op\":\"remove\",\"path\":\"%s/a\",\"recursive\":true}", dir);
        o = simple(c, 10, json);
        ck_assert_ptr_null(err_code(o));
        json_object_put(o);
        snprintf(file, sizeof(file), "%s/a", dir);
        ck_assert_int_lt(stat(file, &st), 0);

        snprintf(json, sizeof(json), "{\"op\":\"stat\",\"path\":\"%s/missing\"}", dir);
        o = simple(c, 11, json);
        ck_assert_str_eq(err_code(o), "not_found");
        json_object_put(o);
        sp_test_agent_close(c);
}
END_TEST

START_TEST(runs_as_user)
{
        if (!sp_test_is_root())
                return; /* reported by main() as a skip of this case */
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(c, 1,
                           "{\"op\":\"exec\",\"session\":\"u\",\"argv\":[\"sh\",\"-c\",\"id -u; echo $HOME\"],"
                           "\"user\":\"nobody\"}");
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(c, 1, &r, true);
        ck_assert_msg(strncmp(r.out.data, "65534\n", 6) == 0, "got %s", r.out.data);
        sp_test_result_free(&r);
        /* a file written as nobody into a root-only directory is refused, and
         * so are the parents it would need there: nothing is made */
        char json[1024], path[600];
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/x\",\"user\":\"nobody\"}", dir);
        chmod(dir, 0755);
        json_object *o = simple(c, 2, json);
        ck_assert_str_eq(err_code(o), "permission_denied");
        json_object_put(o);
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/n/x\",\"user\":\"nobody\",\"parents\":true}",
                 dir);
        o = simple(c, 3, json);
        ck_assert_str_eq(err_code(o), "permission_denied");
        json_object_put(o);
        snprintf(path, sizeof(path), "%s/n", dir);
        struct stat st;
        ck_assert_int_lt(stat(path, &st), 0);

        /* where nobody may write, what it makes is its own: the file and its parents */
        snprintf(path, sizeof(path), "%s/open", dir);
        ck_assert_int_eq(mkdir(path, 0777), 0);
        ck_assert_int_eq(chmod(path, 0777), 0);
        snprintf(json, sizeof(json),
                 "{\"op\":\"write\",\"path\":\"%s/open/a/b/f\",\"user\":\"nobody\",\"parents\":true}", dir);
        o = write_small(c, 4, json, "mine");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        snprintf(path, sizeof(path), "%s/open/a", dir);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_uid, 65534);
        snprintf(path, sizeof(path), "%s/open/a/b/f", dir);
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_uid, 65534);
        snprintf(json, sizeof(json), "{\"op\":\"stat\",\"path\":\"%s\"}", path);
        o = simple(c, 7, json);
        ck_assert_str_eq(str_of(o, "owner"), "nobody");
        json_object_put(o);

        /* a symlink planted toward a root-only place gives nobody nothing */
        snprintf(path, sizeof(path), "%s/open/link", dir);
        ck_assert_int_eq(symlink(dir, path), 0);
        snprintf(json, sizeof(json),
                 "{\"op\":\"write\",\"path\":\"%s/open/link/via-link\",\"user\":\"nobody\",\"parents\":true}", dir);
        o = simple(c, 5, json);
        ck_assert_str_eq(err_code(o), "permission_denied");
        json_object_put(o);
        snprintf(path, sizeof(path), "%s/via-link", dir);
        ck_assert_int_lt(stat(path, &st), 0);

        /* a cwd of ~ is the user's home (nobody's, /nonexistent, is missing:
         * the error names the resolved directory) */
        sp_test_agent_open(c, 6,
                           "{\"op\":\"exec\",\"session\":\"h\",\"argv\":[\"true\"],\"cwd\":\"~\",\"user\":\"nobody\"}");
        sp_test_result h = {0};
        sp_test_agent_run_to_exit(c, 6, &h, true);
        ck_assert_str_eq(sp_test_result_error(&h), "not_found");
        json_object *e = NULL;
        ck_assert(json_object_object_get_ex(h.exit, "error", &e));
        ck_assert_msg(strstr(str_of(e, "message"), "'/nonexistent'"), "%s", json_object_to_json_string(h.exit));
        sp_test_result_free(&h);
        sp_test_agent_close(c);
}
END_TEST

/* uid and gid of path (lstat: a link's own), -1 when missing. */
static void owner_of(const char *path, long *uid, long *gid)
{
        struct stat st;
        *uid = *gid = -1;
        if (lstat(path, &st) == 0) {
                *uid = st.st_uid;
                *gid = st.st_gid;
        }
}

#define CK_OWNER(path, u, g) \
        do { \
                long ou_, og_; \
                owner_of(path, &ou_, &og_); \
                ck_assert_msg(ou_ == (long)(u) && og_ == (long)(g), "%s is %ld:%ld, not %ld:%ld", path, ou_, og_, \
                              (long)(u), (long)(g)); \
        } while (0)

/* owner: root's rights, and what the call makes is the owner's (envd's
 * semantics) — never through a symlink a process of the sandbox planted. */
START_TEST(owner_gets_what_the_call_makes)
{
        if (!sp_test_is_root())
                return; /* reported by main() as a skip of this case */
        struct passwd *pw = getpwnam("nobody");
        ck_assert_ptr_nonnull(pw);
        uid_t nu = pw->pw_uid;
        gid_t ng = pw->pw_gid;
        sp_test_agent *c = sp_test_agent_connect(sock_path, 5000);
        char json[1024], path[600], other[700];
        chmod(dir, 0755);

        /* with user: refused */
        snprintf(json, sizeof(json), "{\"op\":\"stat\",\"path\":\"%s\",\"user\":\"nobody\",\"owner\":\"nobody\"}", dir);
        json_object *o = simple(c, 1, json);
        ck_assert_str_eq(err_code(o), "invalid_argument");
        json_object_put(o);

        /* into a root-only directory (as user it would be refused): the file
         * and each directory made are the owner's, the existing one is not */
        snprintf(json, sizeof(json),
                 "{\"op\":\"write\",\"path\":\"%s/own/a/b/f\",\"owner\":\"nobody\",\"parents\":true}", dir);
        o = write_small(c, 2, json, "envd");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        CK_OWNER(dir, 0, 0);
        snprintf(path, sizeof(path), "%s/own", dir);
        CK_OWNER(path, nu, ng);
        snprintf(path, sizeof(path), "%s/own/a/b", dir);
        CK_OWNER(path, nu, ng);
        snprintf(path, sizeof(path), "%s/own/a/b/f", dir);
        CK_OWNER(path, nu, ng);

        /* an existing file of root's it overwrites is the owner's after (envd
         * chowns it too), with the mode asked */
        snprintf(path, sizeof(path), "%s/rootfile", dir);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s\",\"owner\":\"nobody\",\"mode\":416}", path);
        o = write_small(c, 3, json, "x");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        CK_OWNER(path, nu, ng);
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_int_eq(st.st_mode & 07777, 0640);

        /* mkdir, with and without parents */
        snprintf(json, sizeof(json), "{\"op\":\"mkdir\",\"path\":\"%s/m1/m2\",\"owner\":\"nobody\",\"parents\":true}",
                 dir);
        o = simple(c, 4, json);
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        snprintf(path, sizeof(path), "%s/m1", dir);
        CK_OWNER(path, nu, ng);
        snprintf(path, sizeof(path), "%s/m1/m2", dir);
        CK_OWNER(path, nu, ng);
        snprintf(json, sizeof(json), "{\"op\":\"mkdir\",\"path\":\"%s/m3\",\"owner\":\"nobody\"}", dir);
        o = simple(c, 5, json);
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        snprintf(path, sizeof(path), "%s/m3", dir);
        CK_OWNER(path, nu, ng);

        /* a move moves, it does not chown (envd's Move) */
        snprintf(path, sizeof(path), "%s/rootfile2", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        snprintf(json, sizeof(json), "{\"op\":\"move\",\"from\":\"%s\",\"to\":\"%s/m3/moved\",\"owner\":\"nobody\"}",
                 path, dir);
        o = simple(c, 6, json);
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        snprintf(path, sizeof(path), "%s/m3/moved", dir);
        CK_OWNER(path, 0, 0);

        /* an append chowns only a file it created */
        snprintf(path, sizeof(path), "%s/rootlog", dir);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ck_assert_int_ge(fd, 0);
        close(fd);
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s\",\"owner\":\"nobody\",\"append\":true}", path);
        o = write_small(c, 7, json, "a");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        CK_OWNER(path, 0, 0);
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/newlog\",\"owner\":\"nobody\",\"append\":true}",
                 dir);
        o = write_small(c, 8, json, "a");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        snprintf(path, sizeof(path), "%s/newlog", dir);
        CK_OWNER(path, nu, ng);

        /* Symlinks a process of the sandbox (nobody, in a directory it may
         * write) plants between calls toward root's things: a root-only
         * directory with a file. */
        char victim[600], secret[700];
        snprintf(victim, sizeof(victim), "%s/victim", dir);
        ck_assert_int_eq(mkdir(victim, 0755), 0);
        snprintf(secret, sizeof(secret), "%s/secret", victim);
        fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "root", 4), 4);
        close(fd);
        snprintf(path, sizeof(path), "%s/open", dir);
        ck_assert_int_eq(mkdir(path, 0777), 0);
        ck_assert_int_eq(chmod(path, 0777), 0);

        /* the file's own name a link to root's file: the link is replaced by
         * the new file, the file it named keeps its owner and bytes */
        snprintf(path, sizeof(path), "%s/open/f", dir);
        ck_assert_int_eq(symlink(secret, path), 0);
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s\",\"owner\":\"nobody\"}", path);
        o = write_small(c, 9, json, "new");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        CK_OWNER(path, nu, ng);
        ck_assert_int_eq(lstat(path, &st), 0);
        ck_assert(S_ISREG(st.st_mode));
        CK_OWNER(secret, 0, 0);
        ck_assert_int_eq(stat(secret, &st), 0);
        ck_assert_int_eq(st.st_size, 4);

        /* a parent that was the owner's directory, now a link to root's: the
         * directory the call makes in it is the owner's, the one it names is
         * not chowned */
        snprintf(path, sizeof(path), "%s/open/d", dir);
        ck_assert_int_eq(symlink(victim, path), 0);
        snprintf(json, sizeof(json),
                 "{\"op\":\"write\",\"path\":\"%s/open/d/sub/g\",\"owner\":\"nobody\",\"parents\":true}", dir);
        o = write_small(c, 10, json, "g");
        ck_assert_msg(!err_code(o), "%s", json_object_to_json_string(o));
        json_object_put(o);
        CK_OWNER(victim, 0, 0);
        CK_OWNER(secret, 0, 0);
        snprintf(other, sizeof(other), "%s/sub", victim);
        CK_OWNER(other, nu, ng);

        /* a dangling link where a directory is to be made: nothing is made
         * through it, nothing chowned */
        snprintf(path, sizeof(path), "%s/open/dl", dir);
        snprintf(other, sizeof(other), "%s/made-through-link", victim);
        ck_assert_int_eq(symlink(other, path), 0);
        snprintf(json, sizeof(json),
                 "{\"op\":\"write\",\"path\":\"%s/open/dl/h\",\"owner\":\"nobody\",\"parents\":true}", dir);
        o = simple(c, 11, json);
        ck_assert_ptr_nonnull(err_code(o));
        json_object_put(o);
        ck_assert_int_lt(lstat(other, &st), 0);
        CK_OWNER(path, 0, 0);
        CK_OWNER(victim, 0, 0);
        sp_test_agent_close(c);
}
END_TEST

int main(void)
{
        if (!sp_test_is_root())
                fprintf(stderr, "note: runs_as_user and owner_gets_what_the_call_makes need root and check nothing "
                                "without it\n");
        Suite *s = suite_create("agent");
        TCase *tc = tcase_create("agent");
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, agent_start, agent_stop);
        tcase_add_test(tc, exec_streams_and_exit_code);
        tcase_add_test(tc, exec_errors_are_clear);
        tcase_add_test(tc, exec_searches_the_commands_path);
        tcase_add_test(tc, stdin_roundtrip);
        tcase_add_test(tc, pty_sees_window_size);
        tcase_add_test(tc, flow_control_holds_at_credit);
        tcase_add_test(tc, reconnect_resumes_exactly_once);
        tcase_add_test(tc, kill_takes_the_whole_tree);
        tcase_add_test(tc, files);
        tcase_add_test(tc, write_makes_parents);
        if (sp_test_is_root()) {
                tcase_add_test(tc, runs_as_user);
                tcase_add_test(tc, owner_gets_what_the_call_makes);
        }
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
