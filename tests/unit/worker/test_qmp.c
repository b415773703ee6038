/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the QMP client (worker/backend/qmp.h) — the line parser on
 * good and bad messages; a conversation with a fake QEMU in a thread (the
 * greeting, capabilities, an answer after an interleaved event and a stale
 * answer, an error answer, a command never answered, a late answer, events
 * kept and awaited, the connection lost); protocol violations; and, when the
 * host has qemu-system-x86_64, a real microvm QEMU stopped before boot. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/qmp.h"
#include "harness.h"
#include "proc.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

static char *dir;

static void setup(void)
{
        dir = sp_test_tmpdir("qmp");
}

static void teardown(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* Parses s (its strlen) and expects success of the given kind. */
static void parse_ok(const char *s, wk_qmp_kind kind, wk_qmp_msg *m)
{
        sp_error *e = NULL;
        int r = wk_qmp_parse_line(s, strlen(s), m, &e);
        ck_assert_msg(r == 0, "%s: %s", s, e ? e->message : "?");
        ck_assert_ptr_null(e);
        ck_assert_int_eq(m->kind, kind);
        ck_assert_ptr_nonnull(m->obj);
}

/* Parses n bytes and expects SP_E_INVALID whose message holds want. */
static void parse_bad(const char *s, size_t n, const char *want)
{
        wk_qmp_msg m;
        sp_error *e = NULL;
        ck_assert_int_eq(wk_qmp_parse_line(s, n, &m, &e), -SP_E_INVALID);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->code, SP_E_INVALID);
        ck_assert_msg(strstr(e->message, want), "'%.60s': message '%s' lacks '%s'", s, e->message, want);
        ck_assert_ptr_null(m.obj);
        ck_assert_int_eq(m.kind, 0);
        sp_error_free(e);
        /* the same without an error to fill */
        ck_assert_int_eq(wk_qmp_parse_line(s, n, &m, NULL), -SP_E_INVALID);
}

START_TEST(parse_greeting)
{
        wk_qmp_msg m;
        /* as QEMU 7.2 sends it, with its "\r" */
        parse_ok("{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 22, \"minor\": 2, \"major\": 7}, \"package\": "
                 "\"Debian\"}, \"capabilities\": [\"oob\"]}}\r",
                 WK_QMP_GREETING, &m);
        ck_assert(json_object_is_type(m.value, json_type_object));
        ck_assert_ptr_nonnull(json_object_object_get(m.value, "capabilities"));
        ck_assert(!m.has_id);
        wk_qmp_msg_clear(&m);
        ck_assert_ptr_null(m.obj);
        wk_qmp_msg_clear(&m); /* twice is harmless */
        parse_bad("{\"QMP\": []}", 11, "QMP is not an object");
}
END_TEST

START_TEST(parse_return)
{
        wk_qmp_msg m;
        parse_ok("{\"return\": {\"status\": \"running\", \"running\": true}, \"id\": 7}", WK_QMP_RETURN, &m);
        ck_assert(m.has_id);
        ck_assert_int_eq(m.id, 7);
        ck_assert_str_eq(sp_json_member_str(m.value, "status"), "running");
        wk_qmp_msg_clear(&m);

        parse_ok("{\"return\": [1, 2]}", WK_QMP_RETURN, &m);
        ck_assert(!m.has_id);
        ck_assert_int_eq(m.id, -1);
        ck_assert(json_object_is_type(m.value, json_type_array));
        wk_qmp_msg_clear(&m);

        parse_ok("{\"return\": null, \"id\": 0}", WK_QMP_RETURN, &m);
        ck_assert_ptr_null(m.value);
        ck_assert(m.has_id);
        ck_assert_int_eq(m.id, 0);
        wk_qmp_msg_clear(&m);

        /* ids that are not ours match nothing */
        const char *odd[] = {"{\"return\": {}, \"id\": \"7\"}", "{\"return\": {}, \"id\": -3}",
                             "{\"return\": {}, \"id\": 1.5}", "{\"return\": {}, \"id\": null}",
                             "{\"return\": {}, \"id\": {\"n\": 1}}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(odd); i++) {
                parse_ok(odd[i], WK_QMP_RETURN, &m);
                ck_assert(m.has_id);
                ck_assert_int_eq(m.id, -1);
                wk_qmp_msg_clear(&m);
        }
}
END_TEST

START_TEST(parse_error)
{
        wk_qmp_msg m;
        parse_ok("{\"id\": 3, \"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command nope has not been "
                 "found\"}}\r",
                 WK_QMP_ERROR, &m);
        ck_assert_int_eq(m.id, 3);
        ck_assert_str_eq(m.error_class, "CommandNotFound");
        ck_assert_str_eq(m.error_desc, "The command nope has not been found");
        wk_qmp_msg_clear(&m);

        const char *bad[] = {"{\"error\": \"oops\"}", "{\"error\": {\"class\": \"GenericError\"}}",
                             "{\"error\": {\"desc\": \"x\"}}", "{\"error\": {\"class\": 1, \"desc\": \"x\"}}"};
        parse_bad(bad[0], strlen(bad[0]), "error is not an object");
        for (size_t i = 1; i < SP_ARRAY_SIZE(bad); i++)
                parse_bad(bad[i], strlen(bad[i]), "error lacks the strings class and desc");
}
END_TEST

START_TEST(parse_event)
{
        wk_qmp_msg m;
        parse_ok("{\"timestamp\": {\"seconds\": 1796377467, \"microseconds\": 928249}, \"event\": \"SHUTDOWN\", "
                 "\"data\": {\"guest\": false, \"reason\": \"host-qmp-quit\"}}",
                 WK_QMP_EVENT, &m);
        ck_assert_str_eq(m.event, "SHUTDOWN");
        ck_assert_str_eq(sp_json_member_str(m.value, "reason"), "host-qmp-quit");
        ck_assert(!m.has_id);
        wk_qmp_msg_clear(&m);

        parse_ok("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}", WK_QMP_EVENT, &m);
        ck_assert_str_eq(m.event, "STOP");
        ck_assert_ptr_null(m.value);
        wk_qmp_msg_clear(&m);

        parse_ok("{\"event\": \"RESUME\", \"data\": null}", WK_QMP_EVENT, &m);
        ck_assert_ptr_null(m.value);
        wk_qmp_msg_clear(&m);

        const char *names[] = {"{\"event\": \"\"}", "{\"event\": 5}", "{\"event\": null}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(names); i++)
                parse_bad(names[i], strlen(names[i]), "event is not a name");
        const char *data = "{\"event\": \"STOP\", \"data\": [1]}";
        parse_bad(data, strlen(data), "data is not an object");
}
END_TEST

START_TEST(parse_garbage)
{
        parse_bad("", 0, "malformed JSON");
        parse_bad("\r", 1, "malformed JSON");
        parse_bad("hello", 5, "malformed JSON");
        parse_bad("{\"return\": {}", 13, "malformed JSON");
        parse_bad("{\"return\": {}}{}", 16, "malformed JSON");
        parse_bad("{\"return\": {}}\0", 15, "malformed JSON"); /* a NUL inside the line */
        parse_bad("{\"return\": {}, \"return\": 1}", 27, "duplicate key");

        /* not objects */
        parse_bad("[1, 2]", 6, "not an object");
        parse_bad("\"QMP\"", 5, "not an object");
        parse_bad("42", 2, "not an object");
        parse_bad("null", 4, "not an object");

        /* objects of no kind, or of two */
        parse_bad("{}", 2, "none of QMP, return, error, event");
        parse_bad("{\"id\": 1, \"result\": {}}", 23, "none of QMP, return, error, event");
        const char *two = "{\"return\": {}, \"event\": \"STOP\"}";
        parse_bad(two, strlen(two), "more than one");
        two = "{\"QMP\": {}, \"error\": {\"class\": \"a\", \"desc\": \"b\"}}";
        parse_bad(two, strlen(two), "more than one");
}
END_TEST

/* {"return":"xxx…"} of exactly n bytes. */
static char *line_of(size_t n)
{
        char *s = malloc(n + 2);
        ck_assert_ptr_nonnull(s);
        memcpy(s, "{\"return\":\"", 11);
        memset(s + 11, 'x', n - 13);
        memcpy(s + n - 2, "\"}", 2);
        s[n] = '\0';
        return s;
}

START_TEST(parse_long_lines)
{
        _cleanup_free_ char *s = line_of(WK_QMP_MAX_LINE);
        wk_qmp_msg m;
        parse_ok(s, WK_QMP_RETURN, &m);
        ck_assert_uint_eq(json_object_get_string_len(m.value), WK_QMP_MAX_LINE - 13);
        wk_qmp_msg_clear(&m);
        /* the "\r" is not counted */
        s[WK_QMP_MAX_LINE] = '\r';
        ck_assert_int_eq(wk_qmp_parse_line(s, WK_QMP_MAX_LINE + 1, &m, NULL), 0);
        wk_qmp_msg_clear(&m);

        _cleanup_free_ char *over = line_of(WK_QMP_MAX_LINE + 1);
        parse_bad(over, WK_QMP_MAX_LINE + 1, "over the limit");
}
END_TEST

/* The fake QEMU: a thread serving one connection on a unix socket, with a
 * script, recording what it was sent. */
typedef struct fake {
        char path[600];
        int listen_fd;
        int fd;
        sp_buf in; /* what the client sent, not yet taken as lines */
        char log[4096]; /* "execute(id) " per command received, in order */
        int hang_id;
} fake;

static void fake_send(fake *f, const char *s)
{
        size_t n = strlen(s);
        ck_assert_int_eq(send(f->fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads the next command; returns its id (the command's name into name), or
 * -1 at the end of the stream. */
static int fake_next(fake *f, char *name, size_t n)
{
        for (;;) {
                char *nl = f->in.len ? memchr(f->in.data, '\n', f->in.len) : NULL;
                if (nl) {
                        json_object *o = NULL;
                        ck_assert_int_eq(sp_json_parse(f->in.data, (size_t)(nl - f->in.data), &o, NULL), 0);
                        sp_buf_consume(&f->in, (size_t)(nl - f->in.data) + 1);
                        snprintf(name, n, "%s", sp_json_member_str(o, "execute"));
                        int id = json_object_get_int(json_object_object_get(o, "id"));
                        char entry[128];
                        snprintf(entry, sizeof(entry), "%s(%d)%s ", name, id,
                                 json_object_object_get(o, "arguments") ? "+args" : "");
                        strncat(f->log, entry, sizeof(f->log) - strlen(f->log) - 1);
                        json_object_put(o);
                        return id;
                }
                char b[4096];
                ssize_t got = recv(f->fd, b, sizeof(b), 0);
                if (got <= 0)
                        return -1;
                sp_buf_append(&f->in, b, (size_t)got, NULL);
        }
}

static void msleep(int ms)
{
        nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}, NULL);
}

static void *fake_run(void *arg)
{
        fake *f = arg;
        /* Late, as QEMU is: the client retries until the socket is there. */
        msleep(100);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        ck_assert_uint_lt(strlen(f->path), sizeof(sa.sun_path));
        memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
        ck_assert_int_eq(bind(f->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(f->listen_fd, 1), 0);
        f->fd = accept(f->listen_fd, NULL, NULL);
        ck_assert_int_ge(f->fd, 0);

        char name[64], reply[512];
        fake_send(f, "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": 7}}, "
                     "\"capabilities\": [\"oob\"]}}\r\n");
        int id = fake_next(f, name, sizeof(name)); /* qmp_capabilities */
        snprintf(reply, sizeof(reply), "{\"return\": {}, \"id\": %d}\r\n", id);
        fake_send(f, reply);

        /* query-status: an event, a stale answer, then the answer in two pieces */
        id = fake_next(f, name, sizeof(name));
        fake_send(f, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": \"STOP\", \"data\": "
                     "{\"n\": 1}}\r\n");
        fake_send(f, "{\"return\": {\"status\": \"stale\"}, \"id\": 9999}\r\n");
        snprintf(reply, sizeof(reply), "{\"return\": {\"status\": \"paused\", \"running\": false}, \"id\": %d}\r\n",
                 id);
        size_t half = strlen(reply) / 2;
        ck_assert_int_eq(send(f->fd, reply, half, MSG_NOSIGNAL), (ssize_t)half);
        msleep(30);
        fake_send(f, reply + half);

        /* nope: an error */
        id = fake_next(f, name, sizeof(name));
        snprintf(reply, sizeof(reply),
                 "{\"id\": %d, \"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command %s has not "
                 "been found\"}}\r\n",
                 id, name);
        fake_send(f, reply);

        /* hang: no answer until the next command comes; then its late
         * answer, followed by the next one's */
        f->hang_id = fake_next(f, name, sizeof(name));
        id = fake_next(f, name, sizeof(name));
        snprintf(reply, sizeof(reply), "{\"return\": {\"which\": \"hang\"}, \"id\": %d}\r\n", f->hang_id);
        fake_send(f, reply);
        snprintf(reply, sizeof(reply), "{\"return\": {\"which\": \"%s\"}, \"id\": %d}\r\n", name, id);
        fake_send(f, reply);

        /* a command answered with a bare return, and two events meanwhile */
        id = fake_next(f, name, sizeof(name));
        fake_send(f, "{\"event\": \"STOP\"}\r\n{\"event\": \"RESUME\", \"data\": {\"n\": 2}}\r\n");
        snprintf(reply, sizeof(reply), "{\"return\": null, \"id\": %d}\r\n", id);
        fake_send(f, reply);

        /* an event some time after, then the end */
        msleep(50);
        fake_send(f, "{\"event\": \"SHUTDOWN\", \"data\": {\"reason\": \"host-qmp-quit\"}}\r\n");
        fake_next(f, name, sizeof(name)); /* the client's last command, never answered */
        close(f->fd);
        return NULL;
}

START_TEST(conversation_with_a_fake_qemu)
{
        fake f = {.fd = -1};
        snprintf(f.path, sizeof(f.path), "%s/qmp.sock", dir);
        f.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(f.listen_fd, 0);
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, fake_run, &f), 0);

        wk_qmp *q = NULL;
        sp_error *e = NULL;
        ck_assert_msg(wk_qmp_connect(f.path, 5000, &q, &e) == 0, "%s", e ? e->message : "?");

        /* the answer after an event and a stale answer */
        char status[32];
        ck_assert_int_eq(wk_qmp_status(q, 5000, status, sizeof(status), NULL), 0);
        ck_assert_str_eq(status, "paused");

        /* an error answer: its class picks the code, the message says both */
        json_object *r = NULL;
        ck_assert_int_eq(wk_qmp_execute(q, "nope", NULL, 5000, &r, &e), -SP_E_UNSUPPORTED);
        ck_assert_ptr_null(r);
        ck_assert_str_eq(e->message, "QMP nope: The command nope has not been found (CommandNotFound)");
        e = sp_error_free(e);

        /* never answered: a timeout, and the connection stays usable */
        ck_assert_int_eq(wk_qmp_execute(q, "hang", NULL, 200, &r, &e), -SP_E_TIMEOUT);
        ck_assert_int_eq(e->code, SP_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(e->message, "hang"));
        ck_assert_ptr_null(r);
        e = sp_error_free(e);
        /* ... the late answer is not taken for the next command's */
        json_object *args = json_object_new_object();
        json_object_object_add(args, "k", json_object_new_int(1));
        ck_assert_int_eq(wk_qmp_execute(q, "after", args, 5000, &r, NULL), 0);
        json_object_put(args);
        ck_assert_str_eq(sp_json_member_str(r, "which"), "after");
        json_object_put(r);

        /* a null return reads as an empty object */
        ck_assert_int_eq(wk_qmp_execute(q, "cont", NULL, 5000, &r, NULL), 0);
        ck_assert(json_object_is_type(r, json_type_object));
        ck_assert_int_eq(json_object_object_length(r), 0);
        json_object_put(r);

        /* events kept on the way: the oldest STOP first, each taken once */
        json_object *d = NULL;
        ck_assert_int_eq(wk_qmp_wait_event(q, "STOP", 0, &d, NULL), 0);
        ck_assert_int_eq(json_object_get_int(json_object_object_get(d, "n")), 1);
        json_object_put(d);
        ck_assert_int_eq(wk_qmp_wait_event(q, "STOP", 0, &d, NULL), 0);
        ck_assert_int_eq(json_object_object_length(d), 0); /* it had no data */
        json_object_put(d);
        /* not the RESUME, once forgotten; the SHUTDOWN that comes after */
        wk_qmp_forget_events(q);
        ck_assert_int_eq(wk_qmp_wait_event(q, "RESUME", 0, NULL, &e), -SP_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(e->message, "no RESUME event"));
        e = sp_error_free(e);
        ck_assert_int_eq(wk_qmp_wait_event(q, "SHUTDOWN", 5000, &d, NULL), 0);
        ck_assert_str_eq(sp_json_member_str(d, "reason"), "host-qmp-quit");
        json_object_put(d);

        /* QEMU goes away: unavailable, now and after */
        ck_assert_int_eq(wk_qmp_execute(q, "quit", NULL, 5000, NULL, &e), -SP_E_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(e->message, "closed"));
        e = sp_error_free(e);
        ck_assert_int_eq(wk_qmp_status(q, 5000, status, sizeof(status), &e), -SP_E_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(e->message, "unusable"));
        e = sp_error_free(e);
        wk_qmp_close(q);

        ck_assert_int_eq(pthread_join(th, NULL), 0);
        ck_assert_str_eq(f.log, "qmp_capabilities(1) query-status(2) nope(3) hang(4) after(5)+args cont(6) quit(7) ");
        close(f.listen_fd);
        sp_buf_free(&f.in);
}
END_TEST

/* A client over one end of a socketpair whose other end already holds
 * script: the ids are 1 (capabilities), 2, 3 ... */
static int connect_scripted(const char *script, int64_t timeout_ms, int *peer, wk_qmp **q, sp_error **err)
{
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        size_t n = strlen(script);
        ck_assert_int_eq(write(sv[1], script, n), (ssize_t)n);
        *peer = sv[1];
        return wk_qmp_connect_fd(sv[0], timeout_ms, q, err);
}

#define GREETING "{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n"
#define CAPS_OK "{\"return\": {}, \"id\": 1}\r\n"

START_TEST(protocol_violations_kill_the_connection)
{
        static const struct {
                const char *script;
                const char *want;
        } cases[] = {
                {"{\"event\": \"STOP\"}\n", "the first message is not the greeting"},
                {"not json\n", "malformed JSON"},
                {GREETING "[]\n", "not an object"},
                {GREETING "{\"return\": {}, \"id\": 1, \"event\": \"X\"}\n", "more than one"},
                {GREETING GREETING, "greeting in the middle"},
                {GREETING "{\"error\": {\"class\": \"GenericError\"}, \"id\": 1}\n", "class and desc"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                int peer;
                wk_qmp *q = NULL;
                sp_error *e = NULL;
                ck_assert_int_eq(connect_scripted(cases[i].script, 2000, &peer, &q, &e), -SP_E_UNAVAILABLE);
                ck_assert_ptr_null(q);
                ck_assert_msg(strstr(e->message, cases[i].want), "case %zu: %s", i, e->message);
                sp_error_free(e);
                close(peer);
        }

        /* after the handshake: a bad line fails the command, and every later call at once */
        int peer;
        wk_qmp *q = NULL;
        sp_error *e = NULL;
        ck_assert_int_eq(
                connect_scripted(GREETING CAPS_OK "{\"return\": 1, \"id\": 2}\n{oops}\n", 2000, &peer, &q, NULL), 0);
        ck_assert_int_eq(wk_qmp_execute(q, "a", NULL, 2000, NULL, NULL), 0);
        ck_assert_int_eq(wk_qmp_execute(q, "b", NULL, 2000, NULL, &e), -SP_E_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(e->message, "malformed JSON"));
        e = sp_error_free(e);
        ck_assert_int_eq(write(peer, "{\"return\": {}, \"id\": 3}\n", 24), 24);
        ck_assert_int_eq(wk_qmp_execute(q, "c", NULL, 2000, NULL, &e), -SP_E_UNAVAILABLE);
        ck_assert_ptr_nonnull(strstr(e->message, "unusable"));
        e = sp_error_free(e);
        ck_assert_int_eq(wk_qmp_wait_event(q, "STOP", 2000, NULL, &e), -SP_E_UNAVAILABLE);
        e = sp_error_free(e);
        wk_qmp_close(q);
        close(peer);
}
END_TEST

/* Bytes for a peer to send from a thread: more than a socket's buffer holds. */
typedef struct sender {
        pthread_t th;
        int fd;
        const char *p;
        size_t n;
} sender;

static void *send_run(void *arg)
{
        sender *s = arg;
        /* the send fails once the client hangs up, which some cases expect */
        (void)send(s->fd, s->p, s->n, MSG_NOSIGNAL);
        return NULL;
}

static void send_start(sender *s, int fd, const char *p, size_t n)
{
        *s = (sender){.fd = fd, .p = p, .n = n};
        ck_assert_int_eq(pthread_create(&s->th, NULL, send_run, s), 0);
}

/* A client over a socketpair past the handshake; *peer is QEMU's end. */
static wk_qmp *connected(int *peer)
{
        wk_qmp *q = NULL;
        ck_assert_int_eq(connect_scripted(GREETING CAPS_OK, 2000, peer, &q, NULL), 0);
        return q;
}

START_TEST(an_endless_line_is_refused)
{
        int peer;
        wk_qmp *q = connected(&peer);
        /* 2 MiB without a newline */
        size_t n = 2u << 20;
        _cleanup_free_ char *junk = malloc(n);
        memset(junk, 'x', n);
        sender s;
        send_start(&s, peer, junk, n);
        sp_error *e = NULL;
        ck_assert_int_eq(wk_qmp_execute(q, "x", NULL, 10000, NULL, &e), -SP_E_UNAVAILABLE);
        ck_assert_msg(strstr(e->message, "a line longer than"), "%s", e->message);
        sp_error_free(e);
        wk_qmp_close(q);
        ck_assert_int_eq(pthread_join(s.th, NULL), 0);
        close(peer);
}
END_TEST

START_TEST(silence_times_out)
{
        /* no greeting */
        int peer;
        wk_qmp *q = NULL;
        sp_error *e = NULL;
        ck_assert_int_eq(connect_scripted("", 200, &peer, &q, &e), -SP_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(e->message, "no greeting"));
        e = sp_error_free(e);
        close(peer);
        /* a greeting, and no answer to the capabilities */
        ck_assert_int_eq(connect_scripted(GREETING, 200, &peer, &q, &e), -SP_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(e->message, "qmp_capabilities"));
        e = sp_error_free(e);
        close(peer);
        /* nobody listening at the path */
        char path[700];
        snprintf(path, sizeof(path), "%s/none.sock", dir);
        ck_assert_int_eq(wk_qmp_connect(path, 200, &q, &e), -SP_E_TIMEOUT);
        ck_assert_ptr_nonnull(strstr(e->message, path));
        e = sp_error_free(e);
        /* a path that cannot be a unix socket's */
        char longpath[200];
        memset(longpath, 'a', sizeof(longpath) - 1);
        longpath[sizeof(longpath) - 1] = '\0';
        ck_assert_int_eq(wk_qmp_connect(longpath, 200, &q, &e), -SP_E_INVALID);
        e = sp_error_free(e);
        /* bad arguments are refused before anything is sent */
        ck_assert_int_eq(connect_scripted(GREETING CAPS_OK, 2000, &peer, &q, NULL), 0);
        json_object *arr = json_object_new_array();
        ck_assert_int_eq(wk_qmp_execute(q, "x", arr, 2000, NULL, NULL), -SP_E_INVALID);
        json_object_put(arr);
        ck_assert_int_eq(wk_qmp_execute(q, "", NULL, 2000, NULL, NULL), -SP_E_INVALID);
        wk_qmp_close(q);
        close(peer);
}
END_TEST

/* Only the newest events are kept, within the bounds. */
START_TEST(kept_events_are_bounded)
{
        _cleanup_buf_ sp_buf script = SP_BUF_INIT;
        for (int i = 0; i < WK_QMP_EVENTS_MAX + 10; i++)
                sp_buf_appendf(&script, NULL, "{\"event\": \"E%d\"}\r\n", i);
        sp_buf_append_str(&script, "{\"return\": {}, \"id\": 2}\r\n", NULL);
        int peer;
        wk_qmp *q = connected(&peer);
        ck_assert_int_eq(write(peer, script.data, script.len), (ssize_t)script.len);
        ck_assert_int_eq(wk_qmp_execute(q, "x", NULL, 2000, NULL, NULL), 0);
        /* E0 .. E9 were dropped, E10 .. the last kept */
        ck_assert_int_eq(wk_qmp_wait_event(q, "E9", 0, NULL, NULL), -SP_E_TIMEOUT);
        ck_assert_int_eq(wk_qmp_wait_event(q, "E10", 0, NULL, NULL), 0);
        char last[16];
        snprintf(last, sizeof(last), "E%d", WK_QMP_EVENTS_MAX + 9);
        ck_assert_int_eq(wk_qmp_wait_event(q, last, 0, NULL, NULL), 0);
        wk_qmp_close(q);
        close(peer);

        /* big events: fewer are kept, within WK_QMP_EVENTS_MAX_BYTES (a
         * quarter of it each: the newest three) */
        q = connected(&peer);
        size_t pad = WK_QMP_EVENTS_MAX_BYTES / 4;
        _cleanup_free_ char *big = malloc(pad + 1);
        memset(big, 'y', pad);
        big[pad] = '\0';
        sp_buf_clear(&script);
        for (int i = 0; i < 6; i++)
                sp_buf_appendf(&script, NULL, "{\"event\": \"B%d\", \"data\": {\"pad\": \"%s\"}}\n", i, big);
        sp_buf_append_str(&script, "{\"return\": {}, \"id\": 2}\n", NULL);
        sender s;
        send_start(&s, peer, script.data, script.len);
        ck_assert_int_eq(wk_qmp_execute(q, "x", NULL, 10000, NULL, NULL), 0);
        ck_assert_int_eq(pthread_join(s.th, NULL), 0);
        ck_assert_int_eq(wk_qmp_wait_event(q, "B2", 0, NULL, NULL), -SP_E_TIMEOUT);
        json_object *d = NULL;
        ck_assert_int_eq(wk_qmp_wait_event(q, "B3", 0, &d, NULL), 0);
        ck_assert_uint_eq(strlen(sp_json_member_str(d, "pad")), pad);
        json_object_put(d);
        ck_assert_int_eq(wk_qmp_wait_event(q, "B5", 0, NULL, NULL), 0);
        wk_qmp_close(q);
        close(peer);
}
END_TEST

/* The full path of prog on PATH into out, or false. */
static bool find_program(const char *prog, char *out, size_t n)
{
        const char *path = getenv("PATH");
        _cleanup_free_ char *copy = strdup(path && *path ? path : "/usr/bin:/bin");
        char *save = NULL;
        for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
                snprintf(out, n, "%s/%s", d, prog);
                if (access(out, X_OK) == 0)
                        return true;
        }
        return false;
}

/* Stops QEMU if it is still running (the test's early returns). A failed
 * assertion ends the test's process, and QEMU with it (its parent-death
 * signal). */
static void qemu_stop(pid_t *pid)
{
        if (*pid > 0)
                (void)sp_test_child_stop(*pid, true, SIGKILL, 0, NULL, NULL);
        *pid = 0;
}

START_TEST(real_qemu_microvm)
{
        char qemu[600];
        if (!find_program("qemu-system-x86_64", qemu, sizeof(qemu))) {
                fprintf(stderr, "SKIP real_qemu_microvm: no qemu-system-x86_64 on PATH\n");
                return;
        }
        char sock[700], log[700], qmparg[800];
        snprintf(sock, sizeof(sock), "%s/qmp.sock", dir);
        snprintf(log, sizeof(log), "%s/qemu.log", dir);
        snprintf(qmparg, sizeof(qmparg), "unix:%s,server=on,wait=off", sock);
        const char *argv[] = {qemu,       "-M",   "microvm", "-accel", "tcg",  "-nodefaults", "-no-user-config",
                              "-display", "none", "-S",      "-qmp",   qmparg, NULL};
        sp_test_spawn_opts opts = {.log_path = log, .new_pgroup = true, .pdeathsig = SIGKILL};
        _cleanup_(qemu_stop) pid_t pid = 0;
        sp_error *e = NULL;
        sp_test_ok(sp_test_spawn(argv, &opts, &pid, &e), &e);

        wk_qmp *q = NULL;
        if (wk_qmp_connect(sock, 30000, &q, &e) < 0) {
                _cleanup_free_ char *tail = sp_test_file_tail(log, 20);
                int status;
                if (sp_test_child_wait(pid, 0, &status, NULL) == 0) {
                        pid = 0;
                        if (strstr(tail, "kernel")) {
                                fprintf(stderr,
                                        "SKIP real_qemu_microvm: this QEMU's microvm does not start "
                                        "without a kernel:\n%s\n",
                                        tail);
                                sp_error_free(e);
                                return;
                        }
                }
                ck_abort_msg("QMP of a real QEMU: %s; its log:\n%s", e->message, tail);
        }

        /* -S: not started yet */
        char status[32];
        sp_test_ok(wk_qmp_status(q, 10000, status, sizeof(status), &e), &e);
        ck_assert_msg(strcmp(status, "prelaunch") == 0 || strcmp(status, "paused") == 0, "status %s", status);

        /* QEMU's own error answer */
        ck_assert_int_eq(wk_qmp_execute(q, "no-such-command", NULL, 10000, NULL, &e), -SP_E_UNSUPPORTED);
        ck_assert_msg(strstr(e->message, "(CommandNotFound)"), "%s", e->message);
        e = sp_error_free(e);

        /* quit: answered, with its SHUTDOWN event, and QEMU exits */
        sp_test_ok(wk_qmp_execute(q, "quit", NULL, 10000, NULL, &e), &e);
        json_object *d = NULL;
        sp_test_ok(wk_qmp_wait_event(q, "SHUTDOWN", 10000, &d, &e), &e);
        ck_assert_str_eq(sp_json_member_str(d, "reason"), "host-qmp-quit");
        json_object_put(d);
        wk_qmp_close(q);
        int st;
        sp_test_ok(sp_test_child_wait(pid, 10000, &st, &e), &e);
        pid = 0;
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "QEMU ended with status %d", st);
}
END_TEST

int main(void)
{
        Suite *s = suite_create("qmp");
        TCase *tc = tcase_create("parse");
        tcase_add_test(tc, parse_greeting);
        tcase_add_test(tc, parse_return);
        tcase_add_test(tc, parse_error);
        tcase_add_test(tc, parse_event);
        tcase_add_test(tc, parse_garbage);
        tcase_add_test(tc, parse_long_lines);
        suite_add_tcase(s, tc);

        tc = tcase_create("client");
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, conversation_with_a_fake_qemu);
        tcase_add_test(tc, protocol_violations_kill_the_connection);
        tcase_add_test(tc, an_endless_line_is_refused);
        tcase_add_test(tc, silence_times_out);
        tcase_add_test(tc, kept_events_are_bounded);
        tcase_add_test(tc, real_qemu_microvm);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
