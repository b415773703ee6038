/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "backend/agent_link.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

#define MAX_CHANNELS 4096
/* One read of the agent's connection. libevent's socket bufferevents read at
 * most 4 KiB per call (each with an ioctl and a trip through the loop): a
 * session's output came in 16 pieces per 64 KiB frame. The link reads itself,
 * into this much, and the decoder takes whole frames from it without a copy. */
#define READ_BYTES (256u << 10)

typedef struct link_channel {
        uint32_t id;
        const wk_agent_channel_ops *ops;
        void *userdata;
        /* Per stream the agent sends on: credit the worker granted (the
         * request's window, then every acknowledgement) and the agent has not
         * used. The agent is the sandbox's (root in a VM can replace it), so
         * the link counts it rather than trusting it: DATA beyond it closes the
         * channel, and what an owner holds of a stream stays within its window. */
        uint64_t credit[PR_STREAM__MAX];
        struct link_channel *next;
} link_channel;

struct wk_agent_link {
        struct bufferevent *bev; /* connects and writes; its fd is read by rd */
        struct event *rd; /* readable: on_readable */
        uint8_t *rbuf; /* READ_BYTES */
        pr_agent_decoder dec;
        const wk_agent_link_ops *ops;
        void *userdata;
        bool ready; /* channels may be opened */
        bool hello; /* the agent's HELLO arrived */
        bool dispatching;
        bool dead; /* freed while dispatching: finish after the callback returns */
        uint32_t next_id;
        link_channel *channels;
        size_t nchannels;
};

static int write_frame(wk_agent_link *l, uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n,
                       sp_error **err);

static link_channel *find(wk_agent_link *l, uint32_t id)
{
        for (link_channel *c = l->channels; c; c = c->next)
                if (c->id == id)
                        return c;
        return NULL;
}

static void remove_channel(wk_agent_link *l, uint32_t id)
{
        for (link_channel **p = &l->channels; *p; p = &(*p)->next)
                if ((*p)->id == id) {
                        link_channel *c = *p;
                        *p = c->next;
                        free(c);
                        l->nchannels--;
                        return;
                }
}

/* The agent sent n bytes on stream of channel c beyond the credit it held.
 * Only that channel is closed (CANCEL, its owner told through on_lost), not
 * the connection: the frame was well formed, so the connection is still in
 * step and every other channel keeps its own count; closing the connection
 * would end every port connection of the sandbox and detach its sessions
 * for a reconnection on a job thread, which an agent could then provoke at
 * will. Its late frames on the channel are dropped as a cancelled one's. */
static void overrun(wk_agent_link *l, link_channel *c, uint8_t stream, uint32_t n)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_UNAVAILABLE,
                     "the sandbox's agent sent %u bytes on stream %u of channel %u where the worker had granted it "
                     "%llu: the transfer was closed",
                     n, stream, c->id, stream < PR_STREAM__MAX ? (unsigned long long)c->credit[stream] : 0ull);
        const wk_agent_channel_ops *ops = c->ops;
        void *cud = c->userdata;
        uint32_t id = c->id;
        remove_channel(l, id);
        (void)write_frame(l, PR_AGENT_CANCEL, 0, id, NULL, 0, NULL);
        if (l->ops && l->ops->on_overrun)
                l->ops->on_overrun(l, e, l->userdata);
        if (ops->on_lost)
                ops->on_lost(e, cud);
}

static void fail_all(wk_agent_link *l, const sp_error *e)
{
        while (l->channels) {
                link_channel *c = l->channels;
                l->channels = c->next;
                l->nchannels--;
                if (c->ops->on_lost)
                        c->ops->on_lost(e, c->userdata);
                free(c);
        }
}

/* Stops reading and writing (the read event is freed with the link: this may
 * run inside its callback). */
static void release_socket(wk_agent_link *l)
{
        if (l->rd)
                event_del(l->rd);
        if (l->bev) {
                bufferevent_free(l->bev);
                l->bev = NULL;
        }
}

static void link_destroy(wk_agent_link *l)
{
        release_socket(l);
        if (l->rd)
                event_free(l->rd);
        free(l->rbuf);
        pr_agent_decoder_free(&l->dec);
        free(l);
}

static void close_link(wk_agent_link *l, const sp_error *e)
{
        release_socket(l);
        l->ready = false;
        fail_all(l, e);
        if (l->ops && l->ops->on_closed)
                l->ops->on_closed(l, e, l->userdata);
}

static int parse_json(const pr_agent_frame *f, json_object **ret, sp_error **err)
{
        return sp_json_parse((const char *)f->payload, f->length, ret, err);
}

static int on_frame(const pr_agent_frame *f, void *ud, sp_error **err)
{
        wk_agent_link *l = ud;
        if (f->type == PR_AGENT_HELLO) {
                if (l->hello)
                        return sp_error_set(err, SP_E_INVALID, "agent sent HELLO twice");
                l->hello = true;
                l->ready = true;
                if (l->ops && l->ops->on_ready)
                        l->ops->on_ready(l, l->userdata);
                return 0;
        }
        if (!l->hello)
                return sp_error_set(err, SP_E_INVALID, "agent did not start with HELLO");
        link_channel *c = find(l, f->channel);
        if (!c)
                return 0; /* a cancelled channel's late frames */
        switch (f->type) {
        case PR_AGENT_REPLY: {
                _cleanup_json_ json_object *o = NULL;
                if (parse_json(f, &o, err) < 0)
                        return -SP_E_INVALID;
                if (c->ops->on_reply)
                        c->ops->on_reply(o, c->userdata);
                return 0;
        }
        case PR_AGENT_DATA:
                if (f->stream >= PR_STREAM__MAX || f->length > c->credit[f->stream]) {
                        overrun(l, c, f->stream, f->length);
                        return 0;
                }
                c->credit[f->stream] -= f->length;
                if (c->ops->on_data)
                        c->ops->on_data(f->stream, f->payload, f->length, c->userdata);
                return 0;
        case PR_AGENT_EOF:
                if (c->ops->on_eof)
                        c->ops->on_eof(f->stream, c->userdata);
                return 0;
        case PR_AGENT_WINDOW: {
                uint32_t credit;
                if (pr_agent_window_decode(f, &credit, err) < 0)
                        return -SP_E_INVALID;
                if (c->ops->on_window)
                        c->ops->on_window(f->stream, credit, c->userdata);
                return 0;
        }
        case PR_AGENT_EXIT: {
                _cleanup_json_ json_object *o = NULL;
                if (parse_json(f, &o, err) < 0)
                        return -SP_E_INVALID;
                const wk_agent_channel_ops *ops = c->ops;
                void *cud = c->userdata;
                remove_channel(l, f->channel);
                if (ops->on_exit)
                        ops->on_exit(o, cud);
                return 0;
        }
        default:
                return sp_error_set(err, SP_E_INVALID, "unexpected frame type %u from the agent", f->type);
        }
}

static void on_readable(evutil_socket_t fd, short what, void *ud)
{
        (void)what;
        wk_agent_link *l = ud;
        if (!l->bev)
                return;
        ssize_t n = read(fd, l->rbuf, READ_BYTES);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                return;
        _cleanup_error_ sp_error *e = NULL;
        l->dispatching = true;
        if (n == 0) {
                sp_error_set(&e, SP_E_UNAVAILABLE, "the agent closed the connection");
                close_link(l, e);
        } else if (n < 0) {
                sp_error_set_errno(&e, SP_E_UNAVAILABLE, errno, "agent connection");
                close_link(l, e);
        } else if (pr_agent_decoder_feed(&l->dec, l->rbuf, (size_t)n, on_frame, l, &e) < 0 && !l->dead && l->bev) {
                sp_error_wrap(&e, "agent protocol");
                close_link(l, e);
        }
        l->dispatching = false;
        if (l->dead)
                link_destroy(l);
}

/* Starts reading the connection (once it is connected). */
static int start_reading(wk_agent_link *l, sp_error **err)
{
        if (l->rd)
                return 0;
        l->rd = event_new(bufferevent_get_base(l->bev), bufferevent_getfd(l->bev), EV_READ | EV_PERSIST, on_readable,
                          l);
        if (!l->rd || event_add(l->rd, NULL) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

static void on_event(struct bufferevent *bev, short what, void *ud)
{
        wk_agent_link *l = ud;
        (void)bev;
        _cleanup_error_ sp_error *e = NULL;
        if (what & BEV_EVENT_CONNECTED) {
                if (start_reading(l, &e) == 0)
                        return;
        } else if (what & BEV_EVENT_EOF) {
                sp_error_set(&e, SP_E_UNAVAILABLE, "the agent closed the connection");
        } else {
                sp_error_set_errno(&e, SP_E_UNAVAILABLE, EVUTIL_SOCKET_ERROR(), "agent connection");
        }
        l->dispatching = true;
        close_link(l, e);
        l->dispatching = false;
        if (l->dead)
                link_destroy(l);
}

void wk_agent_hello_append(sp_buf *out)
{
        const char *h = "{\"version\":1,\"worker\":\"space-worker\"}";
        pr_agent_frame_append(out, PR_AGENT_HELLO, 0, 0, h, strlen(h), NULL);
}

static void send_hello(wk_agent_link *l)
{
        _cleanup_buf_ sp_buf hello = SP_BUF_INIT;
        wk_agent_hello_append(&hello);
        bufferevent_write(l->bev, hello.data, hello.len);
}

static wk_agent_link *link_new_fd(struct event_base *base, int fd, bool greeted, const wk_agent_link_ops *ops,
                                  void *userdata, sp_error **err)
{
        wk_agent_link *l = calloc(1, sizeof(*l));
        if (!l) {
                sp_close(fd);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        l->ops = ops;
        l->userdata = userdata;
        l->next_id = 1;
        evutil_make_socket_nonblocking(fd);
        l->rbuf = malloc(READ_BYTES);
        l->bev = l->rbuf ? bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
        if (!l->bev) {
                sp_close(fd);
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                link_destroy(l);
                return NULL;
        }
        bufferevent_setcb(l->bev, NULL, NULL, on_event, l);
        bufferevent_enable(l->bev, EV_WRITE);
        if (start_reading(l, err) < 0) {
                link_destroy(l);
                return NULL;
        }
        if (greeted)
                l->hello = true;
        else
                send_hello(l);
        l->ready = true;
        return l;
}

wk_agent_link *wk_agent_link_new_fd(struct event_base *base, int fd, const wk_agent_link_ops *ops, void *userdata,
                                    sp_error **err)
{
        return link_new_fd(base, fd, false, ops, userdata, err);
}

wk_agent_link *wk_agent_link_new_greeted(struct event_base *base, int fd, const wk_agent_link_ops *ops, void *userdata,
                                         sp_error **err)
{
        return link_new_fd(base, fd, true, ops, userdata, err);
}

wk_agent_link *wk_agent_link_new(struct event_base *base, const char *socket_path, const wk_agent_link_ops *ops,
                                 void *userdata, sp_error **err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(socket_path) >= sizeof(sa.sun_path)) {
                sp_error_set(err, SP_E_INVALID, "agent socket path too long: %s", socket_path);
                return NULL;
        }
        strcpy(sa.sun_path, socket_path);
        wk_agent_link *l = calloc(1, sizeof(*l));
        if (!l) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        l->ops = ops;
        l->userdata = userdata;
        l->next_id = 1;
        l->rbuf = malloc(READ_BYTES);
        l->bev = l->rbuf ? bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE) : NULL;
        if (!l->bev || bufferevent_socket_connect(l->bev, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                sp_error_set_errno(err, SP_E_UNAVAILABLE, EVUTIL_SOCKET_ERROR(), "connect to the agent at %s",
                                   socket_path);
                link_destroy(l);
                return NULL;
        }
        evutil_make_socket_closeonexec(bufferevent_getfd(l->bev)); /* libevent's socket is inherited otherwise */
        bufferevent_setcb(l->bev, NULL, NULL, on_event, l); /* reading starts once connected */
        bufferevent_enable(l->bev, EV_WRITE);
        send_hello(l);
        return l;
}

void wk_agent_link_free(wk_agent_link *l)
{
        if (!l)
                return;
        l->ops = NULL; /* no on_closed for a deliberate close */
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_UNAVAILABLE, "agent connection closed");
        release_socket(l);
        fail_all(l, e);
        if (l->dispatching)
                l->dead = true;
        else
                link_destroy(l);
}

bool wk_agent_link_ready(const wk_agent_link *l)
{
        return l && l->ready && l->bev;
}

static int write_frame(wk_agent_link *l, uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n,
                       sp_error **err)
{
        if (!l->bev)
                return sp_error_set(err, SP_E_UNAVAILABLE, "agent connection closed");
        uint8_t h[PR_AGENT_HEADER_SIZE];
        if (pr_agent_header_encode(h, type, stream, channel, n, err) < 0)
                return -SP_E_TOO_LARGE;
        struct evbuffer *out = bufferevent_get_output(l->bev);
        if (evbuffer_add(out, h, sizeof(h)) < 0 || (n && evbuffer_add(out, p, n) < 0))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

/* The credit a request grants the agent before any WINDOW: its window
 * (proto/spec/agent.md: default 256 KiB) on each stream its op sends on. */
static void grant_initial(link_channel *c, json_object *request)
{
        json_object *v = NULL;
        const char *op = json_object_object_get_ex(request, "op", &v) ? json_object_get_string(v) : "";
        uint64_t window = PR_AGENT_DEFAULT_WINDOW;
        if (json_object_object_get_ex(request, "window", &v)) {
                int64_t w = json_object_get_int64(v);
                window = w > 0 && w <= PR_AGENT_MAX_CREDIT ? (uint64_t)w : 0; /* the agent refuses it */
        }
        if (strcmp(op, "exec") == 0 || strcmp(op, "attach") == 0) {
                c->credit[PR_STREAM_STDOUT] = window;
                c->credit[PR_STREAM_STDERR] = window;
        } else if (strcmp(op, "read") == 0) {
                c->credit[PR_STREAM_FILE] = window;
        } else if (strcmp(op, "connect") == 0) {
                c->credit[PR_STREAM_PORT] = window;
        }
}

uint32_t wk_agent_open(wk_agent_link *l, json_object *request, const wk_agent_channel_ops *ops, void *userdata,
                       sp_error **err)
{
        if (!wk_agent_link_ready(l)) {
                sp_error_set(err, SP_E_UNAVAILABLE, "the agent is not connected");
                return 0;
        }
        if (l->nchannels >= MAX_CHANNELS) {
                sp_error_set(err, SP_E_LIMIT, "too many open agent channels");
                return 0;
        }
        link_channel *c = calloc(1, sizeof(*c));
        if (!c) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return 0;
        }
        do {
                c->id = l->next_id++;
                if (l->next_id == 0)
                        l->next_id = 1;
        } while (c->id == 0 || find(l, c->id));
        c->ops = ops;
        c->userdata = userdata;
        grant_initial(c, request);
        const char *s = sp_json_str(request);
        if (write_frame(l, PR_AGENT_OPEN, 0, c->id, s, strlen(s), err) < 0) {
                free(c);
                return 0;
        }
        c->next = l->channels;
        l->channels = c;
        l->nchannels++;
        return c->id;
}

int wk_agent_send(wk_agent_link *l, uint32_t channel, uint8_t type, uint8_t stream, const void *p, size_t n,
                  sp_error **err)
{
        return write_frame(l, type, stream, channel, p, n, err);
}

int wk_agent_ack(wk_agent_link *l, uint32_t channel, uint8_t stream, uint32_t n, sp_error **err)
{
        uint8_t p[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
        if (!n)
                return 0;
        int r = write_frame(l, PR_AGENT_WINDOW, stream, channel, p, 4, err);
        if (r < 0)
                return r;
        link_channel *c = find(l, channel);
        if (c && stream < PR_STREAM__MAX)
                c->credit[stream] += n;
        return 0;
}

int wk_agent_control(wk_agent_link *l, uint32_t channel, json_object *control, sp_error **err)
{
        const char *s = sp_json_str(control);
        return write_frame(l, PR_AGENT_CONTROL, 0, channel, s, strlen(s), err);
}

void wk_agent_cancel(wk_agent_link *l, uint32_t channel)
{
        if (!l || !find(l, channel))
                return;
        remove_channel(l, channel);
        (void)write_frame(l, PR_AGENT_CANCEL, 0, channel, NULL, 0, NULL);
}

size_t wk_agent_link_queued(const wk_agent_link *l)
{
        return l && l->bev ? evbuffer_get_length(bufferevent_get_output(l->bev)) : 0;
}
