/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration tests of space-agent over its real protocol on a unix socket:
 * exec with streams and exit codes, stdin, PTY, flow control (no byte beyond
 * the credit), resume after reconnection with nothing lost or repeated,
 * whole-tree kill, file operations, and clear errors.
 */
#include <errno.h>
#include <fcntl.h>
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

/* --- a small blocking client --- */
typedef struct {
        int fd;
        pr_agent_decoder dec;
        /* frames decoded but not yet consumed */
        struct frame {
                uint8_t type, stream;
                uint32_t channel;
                sp_buf payload;
        } q[4096];
        size_t head, tail;
} client;

static int queue_frame(const pr_agent_frame *f, void *ud, sp_error **err)
{
        client *c = ud;
        (void)err;
        ck_assert_uint_lt(c->tail - c->head, 4096);
        struct frame *fr = &c->q[c->tail++ % 4096];
        fr->type = f->type;
        fr->stream = f->stream;
        fr->channel = f->channel;
        fr->payload = (sp_buf)SP_BUF_INIT;
        sp_buf_append(&fr->payload, f->payload, f->length, NULL);
        return 0;
}

static void send_raw(client *c, sp_buf *b)
{
        size_t off = 0;
        while (off < b->len) {
                ssize_t n = write(c->fd, b->data + off, b->len - off);
                ck_assert_int_gt(n, 0);
                off += (size_t)n;
        }
        sp_buf_clear(b);
}

static struct frame next(client *c)
{
        while (c->head == c->tail) {
                char buf[65536];
                ssize_t n = read(c->fd, buf, sizeof(buf));
                ck_assert_msg(n > 0, "agent closed the connection");
                ck_assert_int_eq(pr_agent_decoder_feed(&c->dec, buf, (size_t)n, queue_frame, c, NULL), 0);
        }
        return c->q[c->head++ % 4096];
}

static client *connect_agent(void)
{
        client *c = calloc(1, sizeof(*c));
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
        ck_assert_int_eq(connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        struct timeval tv = {.tv_sec = 30};
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        struct frame h = next(c);
        ck_assert_int_eq(h.type, PR_AGENT_HELLO);
        sp_buf_free(&h.payload);
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        pr_agent_frame_append(&b, PR_AGENT_HELLO, 0, 0, "{\"version\":1}", 13, NULL);
        send_raw(c, &b);
        return c;
}

static void client_close(client *c)
{
        close(c->fd);
        while (c->head != c->tail)
                sp_buf_free(&c->q[c->head++ % 4096].payload);
        pr_agent_decoder_free(&c->dec);
        free(c);
}

static void open_channel(client *c, uint32_t ch, const char *json)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(pr_agent_frame_append(&b, PR_AGENT_OPEN, 0, ch, json, strlen(json), NULL), 0);
        send_raw(c, &b);
}

static void send_frame(client *c, uint8_t type, uint8_t stream, uint32_t ch, const void *p, size_t n)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(pr_agent_frame_append(&b, type, stream, ch, p, n, NULL), 0);
        send_raw(c, &b);
}

static void ack(client *c, uint32_t ch, uint8_t stream, uint32_t n)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        pr_agent_frame_append_window(&b, stream, ch, n, NULL);
        send_raw(c, &b);
}

typedef struct {
        sp_buf out, err;
        json_object *exit;
        bool started;
} result;

/* Reads one channel to its EXIT, acknowledging output as it arrives. */
static void run_to_exit(client *c, uint32_t ch, result *r, bool auto_ack)
{
        for (;;) {
                struct frame f = next(c);
                ck_assert_int_eq(f.channel, ch);
                if (f.type == PR_AGENT_DATA) {
                        sp_buf_append(f.stream == PR_STREAM_STDERR ? &r->err : &r->out, f.payload.data, f.payload.len,
                                      NULL);
                        if (auto_ack && f.payload.len)
                                ack(c, ch, f.stream, (uint32_t)f.payload.len);
                } else if (f.type == PR_AGENT_REPLY) {
                        r->started = true;
                } else if (f.type == PR_AGENT_EXIT) {
                        ck_assert_int_eq(sp_json_parse(f.payload.data, f.payload.len, &r->exit, NULL), 0);
                        sp_buf_free(&f.payload);
                        return;
                }
                sp_buf_free(&f.payload);
        }
}

static void result_free(result *r)
{
        sp_buf_free(&r->out);
        sp_buf_free(&r->err);
        if (r->exit)
                json_object_put(r->exit);
}

static int64_t exit_int(result *r, const char *field)
{
        json_object *v;
        ck_assert_msg(json_object_object_get_ex(r->exit, field, &v), "EXIT lacks %s: %s", field,
                      json_object_to_json_string(r->exit));
        return json_object_get_int64(v);
}

static const char *exit_error_code(result *r)
{
        json_object *e, *code;
        if (!json_object_object_get_ex(r->exit, "error", &e) || !json_object_object_get_ex(e, "code", &code))
                return NULL;
        return json_object_get_string(code);
}

START_TEST(exec_streams_and_exit_code)
{
        client *c = connect_agent();
        open_channel(c, 1,
                     "{\"op\":\"exec\",\"session\":\"s1\",\"argv\":[\"sh\",\"-c\",\"echo out; echo err >&2; "
                     "echo $GREETING; pwd; exit 3\"],\"env\":{\"GREETING\":\"hi there\"},\"cwd\":\"/tmp\"}");
        result r = {0};
        run_to_exit(c, 1, &r, true);
        ck_assert(r.started);
        ck_assert_str_eq(r.out.data, "out\nhi there\n/tmp\n");
        ck_assert_str_eq(r.err.data, "err\n");
        ck_assert_int_eq(exit_int(&r, "code"), 3);
        ck_assert_int_eq(exit_int(&r, "signal"), 0);
        result_free(&r);
        client_close(c);
}
END_TEST

START_TEST(exec_errors_are_clear)
{
        client *c = connect_agent();
        open_channel(c, 1, "{\"op\":\"exec\",\"session\":\"s1\",\"argv\":[\"/no/such/program\"]}");
        result r = {0};
        run_to_exit(c, 1, &r, true);
        ck_assert_str_eq(exit_error_code(&r), "not_found");
        result_free(&r);

        open_channel(c, 2, "{\"op\":\"exec\",\"session\":\"s2\",\"argv\":[\"true\"],\"cwd\":\"/no/such/dir\"}");
        result r2 = {0};
        run_to_exit(c, 2, &r2, true);
        ck_assert_str_eq(exit_error_code(&r2), "not_found");
        result_free(&r2);

        open_channel(c, 3, "{\"op\":\"exec\",\"session\":\"s3\",\"argv\":[\"true\"],\"user\":\"no-such-user\"}");
        result r3 = {0};
        run_to_exit(c, 3, &r3, true);
        ck_assert_str_eq(exit_error_code(&r3), "not_found");
        result_free(&r3);

        /* a malformed request fails its channel, and the connection keeps working */
        open_channel(c, 4, "{\"op\":\"exec\",\"argv\":\"sh\"}");
        result r4 = {0};
        run_to_exit(c, 4, &r4, true);
        ck_assert_str_eq(exit_error_code(&r4), "invalid_argument");
        result_free(&r4);
        open_channel(c, 5, "{\"op\":\"exec\",\"session\":\"s5\",\"argv\":[\"true\"]}");
        result r5 = {0};
        run_to_exit(c, 5, &r5, true);
        ck_assert_int_eq(exit_int(&r5, "code"), 0);
        result_free(&r5);
        client_close(c);
}
END_TEST

START_TEST(stdin_roundtrip)
{
        client *c = connect_agent();
        open_channel(c, 7, "{\"op\":\"exec\",\"session\":\"cat\",\"argv\":[\"cat\"],\"stdin\":true}");
        send_frame(c, PR_AGENT_DATA, PR_STREAM_STDIN, 7, "hello ", 6);
        send_frame(c, PR_AGENT_DATA, PR_STREAM_STDIN, 7, "world\n", 6);
        send_frame(c, PR_AGENT_EOF, PR_STREAM_STDIN, 7, NULL, 0);
        result r = {0};
        run_to_exit(c, 7, &r, true);
        ck_assert_str_eq(r.out.data, "hello world\n");
        ck_assert_int_eq(exit_int(&r, "code"), 0);
        result_free(&r);
        client_close(c);
}
END_TEST

START_TEST(pty_sees_window_size)
{
        client *c = connect_agent();
        open_channel(c, 1,
                     "{\"op\":\"exec\",\"session\":\"tty\",\"argv\":[\"sh\",\"-c\",\"stty size; test -t 0 && echo "
                     "tty\"],\"pty\":{\"rows\":40,\"cols\":120}}");
        result r = {0};
        run_to_exit(c, 1, &r, true);
        ck_assert_msg(strstr(r.out.data, "40 120") != NULL, "got %s", r.out.data);
        ck_assert_msg(strstr(r.out.data, "tty") != NULL, "got %s", r.out.data);
        ck_assert_uint_eq(r.err.len, 0);
        result_free(&r);
        client_close(c);
}
END_TEST

START_TEST(flow_control_holds_at_credit)
{
        client *c = connect_agent();
        /* 1 MiB of output, 16 KiB of credit. */
        open_channel(c, 1,
                     "{\"op\":\"exec\",\"session\":\"big\",\"argv\":[\"head\",\"-c\",\"1048576\",\"/dev/zero\"],"
                     "\"window\":16384}");
        size_t got = 0;
        while (got < 16384) {
                struct frame f = next(c);
                if (f.type == PR_AGENT_DATA)
                        got += f.payload.len;
                sp_buf_free(&f.payload);
        }
        ck_assert_uint_eq(got, 16384);
        /* A ping answered in order proves nothing more was sent meanwhile. */
        open_channel(c, 2, "{\"op\":\"ping\"}");
        for (;;) {
                struct frame f = next(c);
                ck_assert_msg(f.type != PR_AGENT_DATA, "agent sent beyond its credit");
                sp_buf_free(&f.payload);
                if (f.type == PR_AGENT_EXIT && f.channel == 2)
                        break;
        }
        ack(c, 1, PR_STREAM_STDOUT, 16384);
        result r = {0};
        run_to_exit(c, 1, &r, true);
        ck_assert_uint_eq(got + r.out.len, 1048576);
        ck_assert_int_eq(exit_int(&r, "code"), 0);
        result_free(&r);
        client_close(c);
}
END_TEST

START_TEST(reconnect_resumes_exactly_once)
{
        client *c = connect_agent();
        open_channel(c, 1,
                     "{\"op\":\"exec\",\"session\":\"seq\",\"argv\":[\"sh\",\"-c\",\"i=0; while [ $i -lt 20000 ]; "
                     "do echo line $i; i=$((i+1)); done\"],\"window\":8192}");
        /* Take some output, acknowledge only part of it ("stored"), then drop the connection. */
        _cleanup_buf_ sp_buf stored = SP_BUF_INIT;
        size_t received = 0;
        while (received < 8192) {
                struct frame f = next(c);
                if (f.type == PR_AGENT_DATA) {
                        size_t keep = f.payload.len;
                        if (stored.len + keep > 5000)
                                keep = 5000 - stored.len;
                        sp_buf_append(&stored, f.payload.data, keep, NULL);
                        received += f.payload.len;
                }
                sp_buf_free(&f.payload);
        }
        ack(c, 1, PR_STREAM_STDOUT, 5000);
        client_close(c);

        c = connect_agent();
        open_channel(c, 9, "{\"op\":\"attach\",\"session\":\"seq\",\"stdout_offset\":5000,\"stderr_offset\":0}");
        result r = {0};
        run_to_exit(c, 9, &r, true);
        sp_buf_append(&stored, r.out.data, r.out.len, NULL);
        /* Exactly the sequence, once. */
        _cleanup_buf_ sp_buf want = SP_BUF_INIT;
        for (int i = 0; i < 20000; i++)
                sp_buf_appendf(&want, NULL, "line %d\n", i);
        ck_assert_uint_eq(stored.len, want.len);
        ck_assert(memcmp(stored.data, want.data, want.len) == 0);
        ck_assert_int_eq(exit_int(&r, "code"), 0);
        result_free(&r);

        /* The exit stays until release; then the session is gone. */
        open_channel(c, 10, "{\"op\":\"release\",\"session\":\"seq\"}");
        result rel = {0};
        run_to_exit(c, 10, &rel, false);
        ck_assert_ptr_null(exit_error_code(&rel));
        result_free(&rel);
        open_channel(c, 11, "{\"op\":\"attach\",\"session\":\"seq\",\"stdout_offset\":0,\"stderr_offset\":0}");
        result gone = {0};
        run_to_exit(c, 11, &gone, false);
        ck_assert_str_eq(exit_error_code(&gone), "not_found");
        result_free(&gone);
        client_close(c);
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
        client *c = connect_agent();
        /* Children in the background, one of which starts its own session. */
        open_channel(c, 1,
                     "{\"op\":\"exec\",\"session\":\"tree\",\"argv\":[\"sh\",\"-c\",\"sleep 1001 & setsid sleep "
                     "1001 & (sleep 1001 &) ; echo started; wait\"]}");
        for (;;) {
                struct frame f = next(c);
                bool started = f.type == PR_AGENT_DATA && strstr(f.payload.data ? f.payload.data : "", "started");
                if (f.type == PR_AGENT_DATA)
                        ack(c, 1, f.stream, (uint32_t)f.payload.len);
                sp_buf_free(&f.payload);
                if (started)
                        break;
        }
        for (int i = 0; i < 200 && count_processes_with_marker("sleep 1001") < 3; i++)
                usleep(10000);
        ck_assert_int_eq(count_processes_with_marker("sleep 1001"), 3);
        send_frame(c, PR_AGENT_CONTROL, 0, 1, "{\"kill\":true}", 13);
        result r = {0};
        run_to_exit(c, 1, &r, true);
        ck_assert_int_eq(exit_int(&r, "signal"), 9);
        json_object *killed;
        ck_assert(json_object_object_get_ex(r.exit, "killed", &killed) && json_object_get_boolean(killed));
        for (int i = 0; i < 200 && count_processes_with_marker("sleep 1001") > 0; i++)
                usleep(10000);
        ck_assert_int_eq(count_processes_with_marker("sleep 1001"), 0);
        result_free(&r);
        client_close(c);
}
END_TEST

static json_object *simple(client *c, uint32_t ch, const char *json)
{
        open_channel(c, ch, json);
        result r = {0};
        run_to_exit(c, ch, &r, false);
        json_object *e = json_object_get(r.exit);
        result_free(&r);
        return e;
}

static const char *err_code(json_object *o)
{
        json_object *e, *code;
        if (!json_object_object_get_ex(o, "error", &e) || !json_object_object_get_ex(e, "code", &code))
                return NULL;
        return json_object_get_string(code);
}

START_TEST(files)
{
        client *c = connect_agent();
        char path[512], json[1024];
        snprintf(path, sizeof(path), "%s/a/b/c", dir);
        snprintf(json, sizeof(json), "{\"op\":\"mkdir\",\"path\":\"%s\",\"parents\":true}", path);
        json_object *o = simple(c, 1, json);
        ck_assert_ptr_null(err_code(o));
        json_object_put(o);

        /* write 3 MiB in chunks under the agent's credit, then read it back */
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/file.bin\",\"mode\":384}", path);
        open_channel(c, 2, json);
        struct frame w = next(c);
        ck_assert_int_eq(w.type, PR_AGENT_WINDOW);
        sp_buf_free(&w.payload);
        static unsigned char chunk[65536];
        uint64_t sum = 0;
        for (int i = 0; i < 48; i++) {
                for (size_t j = 0; j < sizeof(chunk); j++)
                        chunk[j] = (unsigned char)(i * 31 + j * 7);
                for (size_t j = 0; j < sizeof(chunk); j++)
                        sum = sum * 131 + chunk[j];
                send_frame(c, PR_AGENT_DATA, PR_STREAM_FILE, 2, chunk, sizeof(chunk));
        }
        send_frame(c, PR_AGENT_EOF, PR_STREAM_FILE, 2, NULL, 0);
        result wr = {0};
        for (;;) { /* skip WINDOW acks until EXIT */
                struct frame f = next(c);
                if (f.type == PR_AGENT_EXIT) {
                        sp_json_parse(f.payload.data, f.payload.len, &wr.exit, NULL);
                        sp_buf_free(&f.payload);
                        break;
                }
                sp_buf_free(&f.payload);
        }
        ck_assert_int_eq(exit_int(&wr, "size"), 48 * 65536);
        result_free(&wr);

        char file[600];
        snprintf(file, sizeof(file), "%s/file.bin", path);
        struct stat st;
        ck_assert_int_eq(stat(file, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);

        snprintf(json, sizeof(json), "{\"op\":\"read\",\"path\":\"%s\",\"window\":65536}", file);
        open_channel(c, 3, json);
        result rd = {0};
        run_to_exit(c, 3, &rd, true);
        ck_assert_msg(rd.out.len == 48 * 65536, "read %zu bytes: %s", rd.out.len, json_object_to_json_string(rd.exit));
        uint64_t sum2 = 0;
        for (size_t j = 0; j < rd.out.len; j++)
                sum2 = sum2 * 131 + (unsigned char)rd.out.data[j];
        ck_assert(sum == sum2);
        result_free(&rd);

        snprintf(json, sizeof(json), "{\"op\":\"read\",\"path\":\"%s\",\"offset\":10,\"length\":5}", file);
        open_channel(c, 4, json);
        result part = {0};
        run_to_exit(c, 4, &part, true);
        ck_assert_uint_eq(part.out.len, 5);
        ck_assert_int_eq(exit_int(&part, "size"), 5);
        result_free(&part);

        snprintf(json, sizeof(json), "{\"op\":\"stat\",\"path\":\"%s\"}", file);
        o = simple(c, 5, json);
        json_object *v;
        ck_assert(json_object_object_get_ex(o, "size", &v) && json_object_get_int64(v) == 48 * 65536);
        ck_assert(json_object_object_get_ex(o, "type", &v) && strcmp(json_object_get_string(v), "file") == 0);
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
        client_close(c);
}
END_TEST

START_TEST(runs_as_user)
{
        if (!sp_test_is_root())
                return; /* reported by main() as a skip of this case */
        client *c = connect_agent();
        open_channel(c, 1,
                     "{\"op\":\"exec\",\"session\":\"u\",\"argv\":[\"sh\",\"-c\",\"id -u; echo $HOME\"],"
                     "\"user\":\"nobody\"}");
        result r = {0};
        run_to_exit(c, 1, &r, true);
        ck_assert_msg(strncmp(r.out.data, "65534\n", 6) == 0, "got %s", r.out.data);
        result_free(&r);
        /* a file written as nobody into a root-only directory is refused */
        char json[600];
        snprintf(json, sizeof(json), "{\"op\":\"write\",\"path\":\"%s/x\",\"user\":\"nobody\"}", dir);
        chmod(dir, 0755);
        json_object *o = simple(c, 2, json);
        ck_assert_str_eq(err_code(o), "permission_denied");
        json_object_put(o);
        client_close(c);
}
END_TEST

int main(void)
{
        if (!sp_test_is_root())
                fprintf(stderr, "note: runs_as_user needs root and checks nothing without it\n");
        Suite *s = suite_create("agent");
        TCase *tc = tcase_create("agent");
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, agent_start, agent_stop);
        tcase_add_test(tc, exec_streams_and_exit_code);
        tcase_add_test(tc, exec_errors_are_clear);
        tcase_add_test(tc, stdin_roundtrip);
        tcase_add_test(tc, pty_sees_window_size);
        tcase_add_test(tc, flow_control_holds_at_credit);
        tcase_add_test(tc, reconnect_resumes_exactly_once);
        tcase_add_test(tc, kill_takes_the_whole_tree);
        tcase_add_test(tc, files);
        if (sp_test_is_root())
                tcase_add_test(tc, runs_as_user);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
