/* SPDX-License-Identifier: Apache-2.0 */
/* Worker connections: accept, HELLO, frame decoding, buffered writes. What a
 * frame means is for the handlers (conn.h); this file only reads and writes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "conn.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/log.h"

/* Above this many queued bytes, producers wait for the socket to drain. */
#define OUT_HIGH (1u << 20)
#define MAX_CONNS 16

struct ag_conn {
        ag_watch watch;
        pr_agent_decoder dec;
        sp_buf out;
        bool hello;
        bool closing;
        bool serial; /* over the serial port: the port stays open when this ends */
        bool synced; /* serial: a worker's magic was seen, frames follow */
        bool fresh; /* serial: nothing of a worker's taken yet (the greeting queued is for the next) */
        pr_agent_sync scan; /* serial, not synced: looks for a magic anywhere */
        /* serial, synced: where the stream stands between frames (a magic is
         * looked for only where a frame would start, never in a payload) */
        uint8_t hdr[PR_AGENT_HEADER_SIZE];
        size_t hdr_have, magic_have;
        uint64_t body_left;
        ag_conn *next;
};

/* A VM's agent port (virtio-serial): one byte stream that the host's side
 * connects to and disconnects from while the guest's side stays open. A
 * disconnected host shows as POLLHUP; the port is then polled on a timer
 * until the host is back. Bytes of an earlier connection may still be in the
 * port either way: each connection starts with PR_AGENT_SYNC_MAGIC. */
static struct {
        int fd;
        ag_watch timer; /* timerfd: polls the port while the host is away */
} serial = {.fd = -1, .timer = {.fd = -1}};

static void serial_wait(void);

static ag_watch listen_watch;
static const ag_conn_handlers *handlers;
static ag_conn *conns;
static size_t nconns;

static void conn_free(ag_conn *c)
{
        handlers->closed(c);
        ag_loop_del(&c->watch);
        if (!c->serial)
                close(c->watch.fd);
        pr_agent_decoder_free(&c->dec);
        sp_buf_free(&c->out);
        for (ag_conn **p = &conns; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        nconns--;
        bool was_serial = c->serial;
        ag_loop_free_later(c);
        if (was_serial)
                serial_wait();
}

bool ag_conn_can_send(const ag_conn *c)
{
        return c && !c->closing && c->out.len < OUT_HIGH;
}

void ag_conn_kick(ag_conn *c)
{
        if (c && c->out.len > 0)
                ag_loop_mod(&c->watch, EPOLLIN | EPOLLOUT);
}

void ag_conn_send(ag_conn *c, uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n)
{
        if (!c || c->closing)
                return;
        if (pr_agent_frame_append(&c->out, type, stream, channel, p, n, NULL) == 0)
                ag_conn_kick(c);
}

void ag_conn_send_json(ag_conn *c, uint8_t type, uint32_t channel, json_object *obj)
{
        const char *s = sp_json_str(obj);
        ag_conn_send(c, type, 0, channel, s, strlen(s));
}

void ag_conn_send_window(ag_conn *c, uint8_t stream, uint32_t channel, uint32_t n)
{
        if (c && !c->closing && n && pr_agent_frame_append_window(&c->out, stream, channel, n, NULL) == 0)
                ag_conn_kick(c);
}

void ag_conn_send_error(ag_conn *c, uint32_t channel, const sp_error *e)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        sp_error_shape_encode(&b, e ? e->code : SP_E_INTERNAL, e ? e->message : "unknown error", NULL);
        ag_conn_send(c, PR_AGENT_EXIT, 0, channel, b.data, b.len);
}

static int on_frame(const pr_agent_frame *f, void *ud, sp_error **err)
{
        ag_conn *c = ud;
        if (!c->hello) {
                if (f->type != PR_AGENT_HELLO)
                        return sp_error_set(err, SP_E_INVALID, "expected HELLO first");
                c->hello = true;
                return 0;
        }
        return handlers->frame(c, f, err);
}

/* Queues what a connection starts with: the magic on the serial port, HELLO. */
static void conn_greet(ag_conn *c)
{
        if (c->serial)
                sp_buf_append(&c->out, PR_AGENT_SYNC_MAGIC, PR_AGENT_SYNC_LEN, NULL);
        _cleanup_json_ json_object *hello = json_object_new_object();
        json_object_object_add(hello, "version", json_object_new_int(PR_AGENT_VERSION));
        json_object_object_add(hello, "agent", json_object_new_string("space-agent/" SPACE_VERSION));
        const char *s = sp_json_str(hello);
        pr_agent_frame_append(&c->out, PR_AGENT_HELLO, 0, 0, s, strlen(s), NULL);
}

/* A worker's magic in the middle of a connection on the serial port: the host
 * went away and came back before the port showed it. Everything of the old
 * connection ends (as if it had closed) and a new one starts in its place. */
static void serial_restart(ag_conn *c)
{
        handlers->closed(c);
        pr_agent_decoder_free(&c->dec);
        c->dec = (pr_agent_decoder){0};
        sp_buf_clear(&c->out);
        c->hello = false;
        conn_greet(c);
        ag_conn_kick(c);
}

/* Bytes from the serial port. Until a worker's magic is seen, everything is
 * an earlier connection's and dropped. Then frames follow, and a magic is
 * recognised only where a frame would start: a frame's first byte is the top
 * byte of a length of at most 4 MiB (0x00), the magic's is 0xf5 — so nothing
 * in a payload (a file, stdin, a port's bytes: what outsiders may send) can
 * pass for one. A magic there is a worker that reconnected before the port
 * showed the hang-up: a new connection starts. A frame that does not decode
 * drops the connection's bytes until the next magic, looked for anywhere
 * again (the worker's next attempt sends one). */
static void serial_input(ag_conn *c, const char *p, size_t n)
{
        static const uint8_t magic[] = PR_AGENT_SYNC_MAGIC;
        while (n > 0) {
                if (!c->synced) {
                        size_t used = pr_agent_sync_feed(&c->scan, p, n);
                        if (!c->scan.done)
                                return;
                        c->scan = (pr_agent_sync){0};
                        if (!c->fresh)
                                serial_restart(c);
                        c->fresh = false;
                        c->synced = true;
                        c->hdr_have = c->magic_have = 0;
                        c->body_left = 0;
                        p += used;
                        n -= used;
                        continue;
                }
                size_t take;
                if (c->body_left > 0) {
                        take = n < c->body_left ? n : (size_t)c->body_left;
                        c->body_left -= take;
                } else if (c->magic_have > 0 || (c->hdr_have == 0 && (uint8_t)p[0] == magic[0])) {
                        if ((uint8_t)p[0] != magic[c->magic_have]) {
                                sp_log_warn("worker connection on the serial port: a broken magic; waiting for the "
                                            "next one");
                                c->synced = false;
                                c->magic_have = 0;
                                continue;
                        }
                        p++;
                        n--;
                        if (++c->magic_have == PR_AGENT_SYNC_LEN) {
                                c->magic_have = 0;
                                serial_restart(c);
                        }
                        continue;
                } else {
                        take = PR_AGENT_HEADER_SIZE - c->hdr_have;
                        if (take > n)
                                take = n;
                        memcpy(c->hdr + c->hdr_have, p, take);
                        c->hdr_have += take;
                        if (c->hdr_have == PR_AGENT_HEADER_SIZE) {
                                c->body_left = (uint64_t)c->hdr[0] << 24 | (uint64_t)c->hdr[1] << 16 |
                                               (uint64_t)c->hdr[2] << 8 | c->hdr[3];
                                c->hdr_have = 0;
                        }
                }
                _cleanup_error_ sp_error *e = NULL;
                if (pr_agent_decoder_feed(&c->dec, p, take, on_frame, c, &e) < 0) {
                        sp_log_warn("worker connection on the serial port: %s; waiting for the next one",
                                    e ? e->message : "protocol error");
                        c->synced = false;
                        c->scan = (pr_agent_sync){0};
                }
                p += take;
                n -= take;
        }
}

static void conn_io(ag_watch *w, uint32_t events)
{
        ag_conn *c = (ag_conn *)w;
        if (events & EPOLLIN) {
                char buf[64 << 10];
                for (int rounds = 0; rounds < 16; rounds++) {
                        ssize_t n = read(c->watch.fd, buf, sizeof(buf));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                                break;
                        if (n <= 0) {
                                conn_free(c);
                                return;
                        }
                        if (c->serial) {
                                serial_input(c, buf, (size_t)n);
                                continue;
                        }
                        _cleanup_error_ sp_error *e = NULL;
                        if (pr_agent_decoder_feed(&c->dec, buf, (size_t)n, on_frame, c, &e) < 0) {
                                sp_log_warn("closing worker connection: %s", e ? e->message : "protocol error");
                                conn_free(c);
                                return;
                        }
                }
        }
        if (events & (EPOLLHUP | EPOLLERR) && !(events & EPOLLIN)) {
                conn_free(c);
                return;
        }
        if (c->out.len > 0) {
                ssize_t n = write(c->watch.fd, c->out.data, c->out.len);
                if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                        conn_free(c);
                        return;
                }
                if (n > 0)
                        sp_buf_consume(&c->out, (size_t)n);
        }
        if (c->out.len < OUT_HIGH / 2) {
                handlers->drained(c);
        }
        ag_loop_mod(&c->watch, EPOLLIN | (c->out.len ? EPOLLOUT : 0));
}

/* Takes fd as a new connection and queues HELLO (and the magic first, on the serial port). */
static int conn_new(int fd, bool is_serial)
{
        ag_conn *c = calloc(1, sizeof(*c));
        if (!c) {
                if (!is_serial)
                        close(fd);
                return -1;
        }
        c->watch.fd = fd;
        c->watch.fn = conn_io;
        c->serial = is_serial;
        c->fresh = is_serial;
        c->next = conns;
        conns = c;
        nconns++;
        conn_greet(c);
        if (ag_loop_add(&c->watch, EPOLLIN | EPOLLOUT) < 0) {
                conn_free(c);
                return -1;
        }
        return 0;
}

static void on_accept(ag_watch *w, uint32_t events)
{
        (void)events;
        for (;;) {
                int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                        return;
                if (nconns >= MAX_CONNS)
                        close(fd);
                else
                        (void)conn_new(fd, false); /* closes fd if it fails */
        }
}

/* The host is connected to the port when it does not show POLLHUP. */
static bool serial_host_connected(void)
{
        struct pollfd p = {.fd = serial.fd, .events = POLLIN};
        return poll(&p, 1, 0) >= 0 && !(p.revents & (POLLHUP | POLLERR));
}

static void serial_arm(int ms)
{
        struct itimerspec t = {.it_interval = {0, ms * 1000000L}, .it_value = {0, ms * 1000000L}};
        timerfd_settime(serial.timer.fd, 0, &t, NULL);
}

static void serial_check(ag_watch *w, uint32_t events)
{
        (void)events;
        uint64_t ticks;
        (void)!read(w->fd, &ticks, sizeof(ticks));
        if (!serial_host_connected())
                return;
        serial_arm(0);
        if (conn_new(serial.fd, true) < 0) {
                sp_log_warn("cannot take the host's connection on the agent port: out of memory");
                serial_wait();
        }
}

/* Polls the port every 10 ms until the host connects. */
static void serial_wait(void)
{
        serial_arm(10);
}

int ag_conn_serial_add(int fd, const ag_conn_handlers *h)
{
        handlers = h;
        serial.fd = fd;
        serial.timer.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        serial.timer.fn = serial_check;
        if (serial.timer.fd < 0 || ag_loop_add(&serial.timer, EPOLLIN) < 0)
                return -1;
        if (serial_host_connected())
                return conn_new(fd, true);
        serial_wait();
        return 0;
}

int ag_conn_listen_add(int listen_fd, const ag_conn_handlers *h)
{
        handlers = h;
        listen_watch.fd = listen_fd;
        listen_watch.fn = on_accept;
        return ag_loop_add(&listen_watch, EPOLLIN);
}
