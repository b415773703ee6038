/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The QMP client (qmp.h): one blocking socket read with poll() against each
 * call's deadline, lines assembled in a buffer and parsed one at a time, the
 * events met on the way kept in a bounded list. Owns its socket and buffer;
 * one thread at a time.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "backend/qmp.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define READ_BYTES (64u << 10)
#define CONNECT_RETRY_MS 20
/* Of QEMU's words quoted in our messages: an error's desc and class. */
#define DESC_MAX 512
#define CLASS_MAX 64

typedef struct kept_event {
        wk_qmp_msg msg;
        size_t bytes; /* of its line */
} kept_event;

struct wk_qmp {
        int fd; /* non-blocking */
        sp_buf rbuf; /* what was read; lines start at rpos */
        size_t rpos; /* the first byte not yet parsed */
        size_t scanned; /* bytes past rpos known to hold no newline */
        int64_t last_id;
        char *dead; /* why the connection cannot be used any more, or NULL */
        kept_event events[WK_QMP_EVENTS_MAX]; /* oldest first */
        size_t nevents;
        size_t event_bytes;
};

void wk_qmp_msg_clear(wk_qmp_msg *m)
{
        if (m->obj)
                json_object_put(m->obj);
        *m = (wk_qmp_msg){0};
}

static int invalid(sp_error **err, const char *what)
{
        return sp_error_set(err, SP_E_INVALID, "QMP message %s", what);
}

int wk_qmp_parse_line(const char *line, size_t n, wk_qmp_msg *ret, sp_error **err)
{
        static const struct {
                const char *key;
                wk_qmp_kind kind;
        } kinds[] = {
                {"QMP", WK_QMP_GREETING},
                {"return", WK_QMP_RETURN},
                {"error", WK_QMP_ERROR},
                {"event", WK_QMP_EVENT},
        };

        *ret = (wk_qmp_msg){0};
        if (n > 0 && line[n - 1] == '\r')
                n--;
        if (n > WK_QMP_MAX_LINE)
                return sp_error_set(err, SP_E_INVALID, "QMP line of %zu bytes, over the limit of %u", n,
                                    WK_QMP_MAX_LINE);
        _cleanup_json_ json_object *o = NULL;
        if (sp_json_parse(line, n, &o, err) < 0) {
                sp_error_wrap(err, "QMP message");
                return -SP_E_INVALID;
        }
        if (!json_object_is_type(o, json_type_object))
                return invalid(err, "is not an object");

        wk_qmp_msg m = {.id = -1};
        size_t found = 0;
        json_object *v = NULL;
        for (size_t i = 0; i < SP_ARRAY_SIZE(kinds); i++) {
                json_object *x;
                if (json_object_object_get_ex(o, kinds[i].key, &x)) {
                        found++;
                        m.kind = kinds[i].kind;
                        v = x;
                }
        }
        if (found == 0)
                return invalid(err, "has none of QMP, return, error, event");
        if (found > 1)
                return invalid(err, "has more than one of QMP, return, error, event");

        switch (m.kind) {
        case WK_QMP_GREETING:
                if (!json_object_is_type(v, json_type_object))
                        return invalid(err, "QMP is not an object");
                m.value = v;
                break;
        case WK_QMP_RETURN:
                m.value = v; /* any value; NULL for a JSON null */
                break;
        case WK_QMP_ERROR:
                if (!json_object_is_type(v, json_type_object))
                        return invalid(err, "error is not an object");
                m.error_class = sp_json_member_str(v, "class");
                m.error_desc = sp_json_member_str(v, "desc");
                if (!m.error_class || !m.error_desc)
                        return invalid(err, "error lacks the strings class and desc");
                break;
        case WK_QMP_EVENT: {
                if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0)
                        return invalid(err, "event is not a name");
                m.event = json_object_get_string(v);
                json_object *data = NULL;
                if (json_object_object_get_ex(o, "data", &data) && data && !json_object_is_type(data, json_type_object))
                        return invalid(err, "data is not an object");
                m.value = data;
                break;
        }
        }
        json_object *id;
        if ((m.kind == WK_QMP_RETURN || m.kind == WK_QMP_ERROR) && json_object_object_get_ex(o, "id", &id)) {
                m.has_id = true;
                /* Ours are small integers; anything else is nobody's and matches nothing. */
                if (json_object_is_type(id, json_type_int) && json_object_get_int64(id) >= 0)
                        m.id = json_object_get_int64(id);
        }
        m.obj = TAKE_PTR(o);
        *ret = m;
        return 0;
}

static int64_t deadline_after(int64_t timeout_ms)
{
        if (timeout_ms < 0)
                timeout_ms = 0;
        if (timeout_ms > INT64_C(1) << 40)
                timeout_ms = INT64_C(1) << 40;
        return sp_now_mono_us() + timeout_ms * SP_USEC_PER_MSEC;
}

/* Milliseconds left until deadline for poll(), rounded up; 0 once it passed. */
static int remaining_ms(int64_t deadline)
{
        int64_t left = deadline - sp_now_mono_us();
        if (left <= 0)
                return 0;
        int64_t ms = (left + SP_USEC_PER_MSEC - 1) / SP_USEC_PER_MSEC;
        return ms > 1 << 30 ? 1 << 30 : (int)ms;
}

/* Marks the connection dead (a protocol error or a lost socket: what follows
 * on the stream cannot be trusted to line up) and fails with why. */
__attribute__((format(printf, 3, 4))) static int broken(wk_qmp *q, sp_error **err, const char *fmt, ...)
{
        char why[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        if (!q->dead)
                q->dead = strdup(why);
        return sp_error_set(err, SP_E_UNAVAILABLE, "QMP: %s", why);
}

static int check_alive(wk_qmp *q, sp_error **err)
{
        if (q->dead)
                return sp_error_set(err, SP_E_UNAVAILABLE, "QMP connection unusable: %s", q->dead);
        return 0;
}

/* Reads the next message, waiting until deadline; *ret_len is its line's
 * length. A timeout fails with SP_E_TIMEOUT and the message timeout_msg and
 * leaves the connection usable; anything else kills it. */
static int read_message(wk_qmp *q, int64_t deadline, const char *timeout_msg, wk_qmp_msg *ret, size_t *ret_len,
                        sp_error **err)
{
        for (;;) {
                size_t avail = q->rbuf.len - q->rpos;
                const char *start = q->rbuf.data ? q->rbuf.data + q->rpos : NULL;
                const char *nl = avail > q->scanned ? memchr(start + q->scanned, '\n', avail - q->scanned) : NULL;
                if (nl) {
                        size_t n = (size_t)(nl - start);
                        _cleanup_error_ sp_error *e = NULL;
                        int r = wk_qmp_parse_line(start, n, ret, &e);
                        q->rpos += n + 1;
                        q->scanned = 0;
                        if (r < 0)
                                return broken(q, err, "%s", e ? e->message : "malformed message");
                        *ret_len = n;
                        return 0;
                }
                q->scanned = avail;
                /* One more byte for the "\r" QEMU puts before each "\n". */
                if (avail > WK_QMP_MAX_LINE + 1)
                        return broken(q, err, "a line longer than %u bytes", WK_QMP_MAX_LINE);

                int ms = remaining_ms(deadline);
                if (ms == 0)
                        return sp_error_set(err, SP_E_TIMEOUT, "%s", timeout_msg);
                struct pollfd p = {.fd = q->fd, .events = POLLIN};
                int r = poll(&p, 1, ms);
                if (r < 0 && errno != EINTR)
                        return broken(q, err, "poll: %s", strerror(errno));
                if (r <= 0)
                        continue;

                /* Parsed lines go only now, when there is room to make: the
                 * rest of the buffer moves once per read, not once per line. */
                if (q->rpos > 0) {
                        sp_buf_consume(&q->rbuf, q->rpos);
                        q->rpos = 0;
                }
                if (sp_buf_reserve(&q->rbuf, READ_BYTES, err) < 0)
                        return broken(q, err, "read buffer");
                ssize_t got = recv(q->fd, q->rbuf.data + q->rbuf.len, READ_BYTES, MSG_DONTWAIT);
                if (got < 0) {
                        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                                continue;
                        return broken(q, err, "read: %s", strerror(errno));
                }
                if (got == 0)
                        return broken(q, err, "QEMU closed the connection");
                q->rbuf.len += (size_t)got;
                q->rbuf.data[q->rbuf.len] = '\0';
        }
}

/* Writes p; pass_fd (>= 0) rides along the first bytes as SCM_RIGHTS. */
static int write_all(wk_qmp *q, const char *what, const char *p, size_t n, int pass_fd, int64_t deadline,
                     sp_error **err)
{
        size_t done = 0;
        while (done < n) {
                int ms = remaining_ms(deadline);
                if (ms == 0) {
                        /* Half a command on the stream would garble the next one. */
                        if (done > 0)
                                return broken(q, err, "%s: timed out half-way through sending it", what);
                        return sp_error_set(err, SP_E_TIMEOUT, "QMP %s: QEMU does not take the command", what);
                }
                struct pollfd pfd = {.fd = q->fd, .events = POLLOUT};
                int r = poll(&pfd, 1, ms);
                if (r < 0 && errno != EINTR)
                        return broken(q, err, "poll: %s", strerror(errno));
                if (r <= 0)
                        continue;
                ssize_t w;
                if (pass_fd >= 0) {
                        union {
                                char buf[CMSG_SPACE(sizeof(int))];
                                struct cmsghdr align;
                        } u;
                        memset(&u, 0, sizeof(u));
                        struct iovec iov = {.iov_base = (void *)(p + done), .iov_len = n - done};
                        struct msghdr msg = {.msg_iov = &iov,
                                             .msg_iovlen = 1,
                                             .msg_control = u.buf,
                                             .msg_controllen = sizeof(u.buf)};
                        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
                        cm->cmsg_level = SOL_SOCKET;
                        cm->cmsg_type = SCM_RIGHTS;
                        cm->cmsg_len = CMSG_LEN(sizeof(int));
                        memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
                        w = sendmsg(q->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (w > 0)
                                pass_fd = -1;
                } else {
                        w = send(q->fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
                }
                if (w < 0) {
                        if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                                continue;
                        return broken(q, err, "%s: write: %s", what, strerror(errno));
                }
                done += (size_t)w;
        }
        return 0;
}

static void drop_event(wk_qmp *q, size_t i)
{
        q->event_bytes -= q->events[i].bytes;
        wk_qmp_msg_clear(&q->events[i].msg);
        memmove(&q->events[i], &q->events[i + 1], (q->nevents - i - 1) * sizeof(q->events[0]));
        q->nevents--;
}

/* Keeps an event (taking m's reference), dropping the oldest past the bounds. */
static void keep_event(wk_qmp *q, wk_qmp_msg *m, size_t bytes)
{
        while (q->nevents > 0 && (q->nevents == WK_QMP_EVENTS_MAX || q->event_bytes + bytes > WK_QMP_EVENTS_MAX_BYTES))
                drop_event(q, 0);
        q->events[q->nevents++] = (kept_event){.msg = *m, .bytes = bytes};
        q->event_bytes += bytes;
        *m = (wk_qmp_msg){0};
}

/* A new reference to v, or an empty object for none. */
static json_object *value_or_empty(json_object *v)
{
        return v ? json_object_get(v) : json_object_new_object();
}

static bool take_event(wk_qmp *q, const char *name, json_object **ret_data)
{
        for (size_t i = 0; i < q->nevents; i++) {
                if (strcmp(q->events[i].msg.event, name) != 0)
                        continue;
                if (ret_data)
                        *ret_data = value_or_empty(q->events[i].msg.value);
                drop_event(q, i);
                return true;
        }
        return false;
}

void wk_qmp_forget_events(wk_qmp *q)
{
        while (q->nevents > 0)
                drop_event(q, q->nevents - 1);
}

static sp_errc code_of_class(const char *class)
{
        if (strcmp(class, "CommandNotFound") == 0)
                return SP_E_UNSUPPORTED;
        if (strcmp(class, "DeviceNotFound") == 0)
                return SP_E_NOT_FOUND;
        if (strcmp(class, "DeviceNotActive") == 0)
                return SP_E_PRECONDITION;
        return SP_E_INTERNAL;
}

static int execute_until(wk_qmp *q, const char *command, json_object *args, int pass_fd, int64_t deadline,
                         int64_t timeout_ms, json_object **ret, sp_error **err)
{
        if (check_alive(q, err) < 0)
                return -SP_E_UNAVAILABLE;
        if (!command || !command[0])
                return sp_error_set(err, SP_E_INVALID, "QMP: no command");
        if (args && !json_object_is_type(args, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "QMP %s: arguments must be an object", command);

        int64_t id = ++q->last_id;
        _cleanup_json_ json_object *cmd = json_object_new_object();
        json_object_object_add(cmd, "execute", json_object_new_string(command));
        if (args)
                json_object_object_add(cmd, "arguments", json_object_get(args));
        json_object_object_add(cmd, "id", json_object_new_int64(id));
        _cleanup_buf_ sp_buf line = SP_BUF_INIT;
        if (sp_buf_appendf(&line, err, "%s\n", sp_json_str(cmd)) < 0)
                return -SP_E_INTERNAL;
        int r = write_all(q, command, line.data, line.len, pass_fd, deadline, err);
        if (r < 0)
                return r;

        char timeout_msg[256];
        snprintf(timeout_msg, sizeof(timeout_msg), "QMP %.128s: no answer within %lld ms", command,
                 (long long)timeout_ms);
        for (;;) {
                wk_qmp_msg m;
                size_t bytes;
                r = read_message(q, deadline, timeout_msg, &m, &bytes, err);
                if (r < 0)
                        return r;
                switch (m.kind) {
                case WK_QMP_EVENT:
                        keep_event(q, &m, bytes);
                        continue;
                case WK_QMP_GREETING:
                        wk_qmp_msg_clear(&m);
                        return broken(q, err, "%s: a greeting in the middle of the conversation", command);
                case WK_QMP_RETURN:
                case WK_QMP_ERROR:
                        break;
                }
                /* Answers to commands that timed out come late and are not
                 * this one's. One without an id is this one's only when it
                 * is an error: QEMU drops the id of a command it could not
                 * read, and we send one command at a time. */
                bool ours = m.has_id ? m.id == id : m.kind == WK_QMP_ERROR;
                if (!ours) {
                        wk_qmp_msg_clear(&m);
                        continue;
                }
                r = 0;
                if (m.kind == WK_QMP_ERROR)
                        r = sp_error_set(err, code_of_class(m.error_class), "QMP %s: %.*s (%.*s)", command, DESC_MAX,
                                         m.error_desc, CLASS_MAX, m.error_class);
                else if (ret)
                        *ret = value_or_empty(m.value);
                wk_qmp_msg_clear(&m);
                return r;
        }
}

int wk_qmp_execute(wk_qmp *q, const char *command, json_object *args, int64_t timeout_ms, json_object **ret,
                   sp_error **err)
{
        return execute_until(q, command, args, -1, deadline_after(timeout_ms), timeout_ms, ret, err);
}

int wk_qmp_execute_fd(wk_qmp *q, const char *command, json_object *args, int fd, int64_t timeout_ms, json_object **ret,
                      sp_error **err)
{
        if (fd < 0)
                return sp_error_set(err, SP_E_INVALID, "QMP %s: no descriptor to pass", command ? command : "?");
        return execute_until(q, command, args, fd, deadline_after(timeout_ms), timeout_ms, ret, err);
}

int wk_qmp_wait_event(wk_qmp *q, const char *name, int64_t timeout_ms, json_object **ret_data, sp_error **err)
{
        if (take_event(q, name, ret_data))
                return 0;
        if (check_alive(q, err) < 0)
                return -SP_E_UNAVAILABLE;
        int64_t deadline = deadline_after(timeout_ms);
        char timeout_msg[256];
        snprintf(timeout_msg, sizeof(timeout_msg), "QMP: no %.128s event within %lld ms", name, (long long)timeout_ms);
        for (;;) {
                wk_qmp_msg m;
                size_t bytes;
                int r = read_message(q, deadline, timeout_msg, &m, &bytes, err);
                if (r < 0)
                        return r;
                if (m.kind == WK_QMP_GREETING) {
                        wk_qmp_msg_clear(&m);
                        return broken(q, err, "a greeting in the middle of the conversation");
                }
                if (m.kind != WK_QMP_EVENT) {
                        wk_qmp_msg_clear(&m); /* a late answer to a command that timed out */
                        continue;
                }
                keep_event(q, &m, bytes);
                if (take_event(q, name, ret_data))
                        return 0;
        }
}

int wk_qmp_status(wk_qmp *q, int64_t timeout_ms, char *buf, size_t n, sp_error **err)
{
        _cleanup_json_ json_object *st = NULL;
        int r = wk_qmp_execute(q, "query-status", NULL, timeout_ms, &st, err);
        if (r < 0)
                return r;
        const char *s = sp_json_member_str(st, "status");
        if (!s)
                return sp_error_set(err, SP_E_UNAVAILABLE, "QMP query-status: no status in the answer");
        if (strlen(s) >= n)
                return sp_error_set(err, SP_E_UNAVAILABLE, "QMP query-status: a status of %zu bytes", strlen(s));
        memcpy(buf, s, strlen(s) + 1);
        return 0;
}

void wk_qmp_close(wk_qmp *q)
{
        if (!q)
                return;
        sp_close(q->fd);
        sp_buf_free(&q->rbuf);
        wk_qmp_forget_events(q);
        free(q->dead);
        free(q);
}

/* The greeting, then capabilities negotiation (without "oob": one command
 * at a time is all we do). */
static int handshake(wk_qmp *q, int64_t deadline, int64_t timeout_ms, sp_error **err)
{
        char timeout_msg[128];
        snprintf(timeout_msg, sizeof(timeout_msg), "QMP: no greeting within %lld ms", (long long)timeout_ms);
        wk_qmp_msg m;
        size_t bytes;
        int r = read_message(q, deadline, timeout_msg, &m, &bytes, err);
        if (r < 0)
                return r;
        wk_qmp_kind kind = m.kind;
        wk_qmp_msg_clear(&m);
        if (kind != WK_QMP_GREETING)
                return broken(q, err, "the first message is not the greeting");
        return execute_until(q, "qmp_capabilities", NULL, -1, deadline, timeout_ms, NULL, err);
}

static int connect_fd_until(int fd, int64_t deadline, int64_t timeout_ms, wk_qmp **ret, sp_error **err)
{
        _cleanup_close_ int owned = fd;
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "QMP socket");
        wk_qmp *q = calloc(1, sizeof(*q));
        if (!q)
                return sp_error_set_errno(err, SP_E_INTERNAL, ENOMEM, "QMP client");
        q->fd = TAKE_FD(owned);
        int r = handshake(q, deadline, timeout_ms, err);
        if (r < 0) {
                wk_qmp_close(q);
                return r;
        }
        *ret = q;
        return 0;
}

int wk_qmp_connect_fd(int fd, int64_t timeout_ms, wk_qmp **ret, sp_error **err)
{
        return connect_fd_until(fd, deadline_after(timeout_ms), timeout_ms, ret, err);
}

int wk_qmp_connect(const char *path, int64_t timeout_ms, wk_qmp **ret, sp_error **err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path))
                return sp_error_set(err, SP_E_INVALID, "QMP socket path too long: %s", path);
        memcpy(sa.sun_path, path, strlen(path) + 1);
        int64_t deadline = deadline_after(timeout_ms);
        for (;;) {
                /* Non-blocking: a full listen backlog is one more retry, not a wait past the deadline. */
                _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "QMP socket");
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
                        int r = connect_fd_until(TAKE_FD(fd), deadline, timeout_ms, ret, err);
                        if (r < 0)
                                sp_error_wrap(err, "at %s", path);
                        return r;
                }
                int e = errno;
                /* Not there yet, or not listening yet: QEMU is still starting. */
                if (e != ENOENT && e != ECONNREFUSED && e != EAGAIN && e != EINTR)
                        return sp_error_set_errno(err, sp_errc_from_errno(e), e, "connect to QMP at %s", path);
                int ms = remaining_ms(deadline);
                if (ms == 0)
                        return sp_error_set_errno(err, SP_E_TIMEOUT, e, "connect to QMP at %s within %lld ms", path,
                                                  (long long)timeout_ms);
                if (ms > CONNECT_RETRY_MS)
                        ms = CONNECT_RETRY_MS;
                nanosleep(&(struct timespec){.tv_nsec = ms * 1000000L}, NULL);
        }
}
