/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Port connections (spec: "Port connections"): a TCP connection from inside
 * the sandbox to a port on its loopback, relayed on one channel with flow
 * control both ways — the way in for ingress, the same for every backend.
 *
 * The socket is held twice: a duplicate is the output stream's (read, and
 * closed at the server's end of writing) and the original is written to
 * (closed once shut down toward the server). Each has its own epoll watch.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"
#include "space/cleanup.h"
#include "space/json.h"

/* The worker's credit for bytes toward the server: what may wait here unwritten. */
#define PORT_WINDOW (1u << 20)
/* Connections open at once, in the whole sandbox. */
#define PORT_MAX 1024

struct ag_port {
        ag_conn *conn;
        uint32_t channel;
        uint16_t port;
        bool v6; /* trying, or connected to, [::1] */
        bool connecting;
        int wfd; /* the socket, written to; -1 once shut down or failed */
        ag_watch wwatch;
        ag_outstream out; /* a duplicate of the socket, read from */
        uint32_t window; /* the request's: the first credit of out */
        sp_buf in; /* from the worker, not yet written */
        uint64_t granted; /* credit the worker holds for stream 4 */
        bool in_eof; /* the worker sent EOF */
        bool in_done; /* shut down toward the server, or writing failed */
        int64_t received, sent;
        ag_port *next;
};

static ag_port *ports;
static size_t nports;

static void port_free(ag_port *p)
{
        for (ag_port **pp = &ports; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        break;
                }
        nports--;
        ag_outstream_free(&p->out);
        if (p->wfd >= 0) {
                ag_loop_del(&p->wwatch);
                close(p->wfd);
        }
        sp_buf_free(&p->in);
        ag_loop_free_later(p);
}

static ag_port *find(ag_conn *c, uint32_t channel)
{
        for (ag_port *p = ports; p; p = p->next)
                if (p->conn == c && p->channel == channel)
                        return p;
        return NULL;
}

static void close_writing(ag_port *p)
{
        if (p->wfd >= 0) {
                ag_loop_del(&p->wwatch);
                close(p->wfd);
                p->wfd = -1;
        }
        p->in_done = true;
        sp_buf_free(&p->in);
}

/* Ends the channel once both directions have: EXIT with the counts. Returns
 * true if p was freed. */
static bool maybe_exit(ag_port *p)
{
        if (p->connecting || !p->in_done || !ag_outstream_done(&p->out))
                return false;
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "received", json_object_new_int64(p->received));
        json_object_object_add(o, "sent", json_object_new_int64(p->sent));
        ag_conn_send_json(p->conn, PR_AGENT_EXIT, p->channel, o);
        port_free(p);
        return true;
}

/* Whether the connection can still carry bytes to the server: not after a
 * reset (or once closed both ways); a server that only shut down its own
 * sending side (CLOSE_WAIT here) may still read. */
static bool socket_open(int fd)
{
        struct tcp_info ti;
        socklen_t l = sizeof(ti);
        if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) < 0)
                return false;
        return ti.tcpi_state != TCP_CLOSE;
}

/* Writes what the worker sent; grants credit again for what went out; shuts
 * the socket down toward the server after the worker's EOF. */
static void in_pump(ag_port *p)
{
        while (p->wfd >= 0 && p->in.len > 0) {
                ssize_t n = send(p->wfd, p->in.data, p->in.len, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                        ag_loop_add(&p->wwatch, EPOLLOUT);
                        return;
                }
                if (n < 0) {
                        /* Reset, or the server closed: what it will never read is dropped. */
                        close_writing(p);
                        return;
                }
                sp_buf_consume(&p->in, (size_t)n);
                p->received += n;
                p->granted += (uint64_t)n;
                ag_conn_send_window(p->conn, PR_STREAM_PORT, p->channel, (uint32_t)n);
        }
        if (p->wfd >= 0)
                ag_loop_del(&p->wwatch);
        if (p->in_eof && p->in.len == 0 && !p->in_done) {
                if (p->wfd >= 0)
                        shutdown(p->wfd, SHUT_WR);
                close_writing(p);
        }
}

/* Reads from the server what credit allows and sends it; ends the channel
 * when both directions are done. Returns true if p was freed. */
static bool out_pump(ag_port *p)
{
        ssize_t n;
        while (ag_outstream_wants_input(&p->out) && (n = ag_outstream_fill(&p->out)) > 0)
                p->sent += n;
        if (p->out.eof && !p->in_done && p->wfd >= 0 && !socket_open(p->wfd))
                close_writing(p); /* reset, or closed both ways: nothing will read what the worker sends */
        ag_outstream_flush(&p->out, p->conn, p->channel, PR_STREAM_PORT);
        if (p->out.fd >= 0) {
                if (ag_outstream_wants_input(&p->out))
                        ag_loop_add(&p->out.watch, EPOLLIN);
                else
                        ag_loop_del(&p->out.watch);
        }
        return maybe_exit(p);
}

static void on_readable(ag_watch *w, uint32_t events)
{
        (void)events;
        ag_port *p = (ag_port *)((char *)w - offsetof(ag_port, out.watch));
        out_pump(p);
}

/* Starts connecting to the port on p->v6's loopback. 0: connected or in
 * progress; <0 with errno. */
static int dial(ag_port *p)
{
        int fd = socket(p->v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -1;
        int r;
        if (p->v6) {
                struct sockaddr_in6 a = {
                        .sin6_family = AF_INET6, .sin6_port = htons(p->port), .sin6_addr = IN6ADDR_LOOPBACK_INIT};
                r = connect(fd, (struct sockaddr *)&a, sizeof(a));
        } else {
                struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p->port)};
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                r = connect(fd, (struct sockaddr *)&a, sizeof(a));
        }
        if (r < 0 && errno != EINPROGRESS) {
                int e = errno;
                close(fd);
                errno = e;
                return -1;
        }
        p->wfd = fd;
        p->wwatch.fd = fd;
        p->connecting = r < 0;
        return 0;
}

static void on_connected(ag_port *p)
{
        p->connecting = false;
        int rfd = fcntl(p->wfd, F_DUPFD_CLOEXEC, 3);
        if (rfd < 0) {
                _cleanup_error_ sp_error *e = NULL;
                sp_error_set_errno(&e, SP_E_LIMIT, errno, "port %u: cannot hold the connection", p->port);
                ag_conn_send_error(p->conn, p->channel, e);
                port_free(p);
                return;
        }
        ag_outstream_init(&p->out, rfd, p->window);
        p->out.watch.fn = on_readable;
        ag_loop_del(&p->wwatch);
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "connected", json_object_new_boolean(true));
        json_object_object_add(o, "address", json_object_new_string(p->v6 ? "::1" : "127.0.0.1"));
        ag_conn_send_json(p->conn, PR_AGENT_REPLY, p->channel, o);
        p->granted = PORT_WINDOW;
        ag_conn_send_window(p->conn, PR_STREAM_PORT, p->channel, PORT_WINDOW);
        if (p->in_eof)
                in_pump(p); /* the worker had nothing to send */
        out_pump(p);
}

/* A failed connection: [::1] next if 127.0.0.1 refused, else the error. */
static void on_dial_failed(ag_port *p, int e)
{
        if (p->wfd >= 0) {
                ag_loop_del(&p->wwatch);
                close(p->wfd);
                p->wfd = -1;
        }
        if (!p->v6 && e == ECONNREFUSED) {
                p->v6 = true;
                if (dial(p) == 0) {
                        if (p->connecting)
                                ag_loop_add(&p->wwatch, EPOLLOUT);
                        else
                                on_connected(p);
                        return;
                }
                e = errno;
        }
        _cleanup_error_ sp_error *err = NULL;
        if (e == ECONNREFUSED || e == EADDRNOTAVAIL || e == ENETUNREACH || e == EAFNOSUPPORT)
                sp_error_set(&err, SP_E_UNAVAILABLE, "nothing listens on port %u in the sandbox", p->port);
        else
                sp_error_set_errno(&err, SP_E_UNAVAILABLE, e, "cannot connect to port %u in the sandbox", p->port);
        ag_conn_send_error(p->conn, p->channel, err);
        p->connecting = false;
        port_free(p);
}

static void on_writable(ag_watch *w, uint32_t events)
{
        (void)events;
        ag_port *p = (ag_port *)((char *)w - offsetof(ag_port, wwatch));
        if (p->connecting) {
                int e = 0;
                socklen_t l = sizeof(e);
                if (getsockopt(p->wfd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
                        e = errno;
                if (e == EINPROGRESS || e == EALREADY)
                        return;
                if (e)
                        on_dial_failed(p, e);
                else
                        on_connected(p);
                return;
        }
        in_pump(p);
        maybe_exit(p);
}

int ag_port_connect(ag_conn *c, uint32_t channel, const pr_agent_request *req, sp_error **err)
{
        if (find(c, channel))
                return sp_error_set(err, SP_E_CONFLICT, "channel %u is in use", channel);
        if (nports >= PORT_MAX)
                return sp_error_set(err, SP_E_LIMIT, "%d connections to ports are open in the sandbox: no more",
                                    PORT_MAX);
        ag_port *p = calloc(1, sizeof(*p));
        if (!p)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *p = (ag_port){.conn = c, .channel = channel, .port = req->port, .wfd = -1, .window = req->window};
        p->out.fd = p->out.watch.fd = -1;
        p->wwatch.fn = on_writable;
        p->next = ports;
        ports = p;
        nports++;
        if (dial(p) < 0) {
                on_dial_failed(p, errno);
                return 0;
        }
        if (p->connecting)
                ag_loop_add(&p->wwatch, EPOLLOUT);
        else
                on_connected(p);
        return 0;
}

bool ag_port_frame(ag_conn *c, const pr_agent_frame *f, sp_error **err)
{
        ag_port *p = find(c, f->channel);
        if (!p)
                return false;
        switch (f->type) {
        case PR_AGENT_WINDOW: {
                uint32_t n;
                if (f->stream != PR_STREAM_PORT || p->connecting) {
                        sp_error_set(err, SP_E_INVALID, "unexpected WINDOW on port channel %u", f->channel);
                        return true;
                }
                if (pr_agent_window_decode(f, &n, err) < 0 || ag_outstream_ack(&p->out, n, err) < 0)
                        return true;
                out_pump(p);
                return true;
        }
        case PR_AGENT_DATA:
                if (f->stream != PR_STREAM_PORT || p->in_eof || f->length > p->granted) {
                        sp_error_set(err, SP_E_INVALID, "DATA on port channel %u beyond its credit or after EOF",
                                     f->channel);
                        return true;
                }
                p->granted -= f->length;
                if (p->in_done)
                        return true; /* writing failed: the server will never read it */
                sp_buf_append(&p->in, f->payload, f->length, NULL);
                in_pump(p);
                maybe_exit(p);
                return true;
        case PR_AGENT_EOF:
                if (f->stream != PR_STREAM_PORT || p->in_eof) {
                        sp_error_set(err, SP_E_INVALID, "unexpected EOF on port channel %u", f->channel);
                        return true;
                }
                p->in_eof = true;
                if (!p->connecting) {
                        in_pump(p);
                        maybe_exit(p);
                }
                return true;
        case PR_AGENT_CANCEL:
                port_free(p);
                return true;
        default:
                sp_error_set(err, SP_E_INVALID, "unexpected frame type %u on a port channel", f->type);
                return true;
        }
}

void ag_port_conn_closed(ag_conn *c)
{
        for (ag_port *p = ports, *next; p; p = next) {
                next = p->next;
                if (p->conn == c)
                        port_free(p);
        }
}

void ag_port_pump_all(ag_conn *c)
{
        for (ag_port *p = ports, *next; p; p = next) {
                next = p->next;
                if (p->conn == c && !p->connecting)
                        out_pump(p);
        }
}
