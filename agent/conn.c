/* SPDX-License-Identifier: Apache-2.0 */
/* Worker connections: accept, HELLO, frame decoding, buffered writes. What a
 * frame means is for the handlers (conn.h); this file only reads and writes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
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
        ag_conn *next;
};

static ag_watch listen_watch;
static const ag_conn_handlers *handlers;
static ag_conn *conns;
static size_t nconns;

static void conn_free(ag_conn *c)
{
        handlers->closed(c);
        ag_loop_del(&c->watch);
        close(c->watch.fd);
        pr_agent_decoder_free(&c->dec);
        sp_buf_free(&c->out);
        for (ag_conn **p = &conns; *p; p = &(*p)->next)
                if (*p == c) {
                        *p = c->next;
                        break;
                }
        nconns--;
        ag_loop_free_later(c);
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

static void on_accept(ag_watch *w, uint32_t events)
{
        (void)events;
        for (;;) {
                int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                        return;
                if (nconns >= MAX_CONNS) {
                        close(fd);
                        continue;
                }
                ag_conn *c = calloc(1, sizeof(*c));
                if (!c) {
                        close(fd);
                        continue;
                }
                c->watch.fd = fd;
                c->watch.fn = conn_io;
                c->next = conns;
                conns = c;
                nconns++;
                _cleanup_json_ json_object *hello = json_object_new_object();
                json_object_object_add(hello, "version", json_object_new_int(PR_AGENT_VERSION));
                json_object_object_add(hello, "agent", json_object_new_string("space-agent/" SPACE_VERSION));
                const char *s = sp_json_str(hello);
                pr_agent_frame_append(&c->out, PR_AGENT_HELLO, 0, 0, s, strlen(s), NULL);
                if (ag_loop_add(&c->watch, EPOLLIN | EPOLLOUT) < 0)
                        conn_free(c);
        }
}

int ag_conn_listen_add(int listen_fd, const ag_conn_handlers *h)
{
        handlers = h;
        listen_watch.fd = listen_fd;
        listen_watch.fn = on_accept;
        return ag_loop_add(&listen_watch, EPOLLIN);
}
