/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker's side of the agent protocol (proto/spec/agent.md): one
 * connection to a sandbox's agent on the daemon's libevent loop, carrying
 * many channels. The link decodes frames and hands each channel's events to
 * the channel's owner; flow control is the owner's: it acknowledges output
 * with wk_agent_ack() once stored, and sends only within the credit the agent
 * granted (on_window). The link counts the credit the worker granted on each
 * of a channel's streams (the request's window, then every wk_agent_ack) and
 * never hands an owner DATA beyond it: the agent is under the sandbox's
 * control, and an owner that holds what it has not acknowledged (a slow
 * caller's) so holds at most its window. An agent that sends more has that
 * channel closed (CANCEL, on_lost); the connection and its other channels
 * go on.
 *
 * Ownership: the link owns its channels' bookkeeping; owners keep their own
 * state and are told exactly once, through on_exit or on_lost, that a channel
 * ended. Not thread-safe (one event loop).
 */
#ifndef WK_AGENT_LINK_H
#define WK_AGENT_LINK_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/agent_proto.h"
#include "space/error.h"

struct event_base;
typedef struct wk_agent_link wk_agent_link;

typedef struct wk_agent_channel_ops {
        /* REPLY: an intermediate answer, e.g. {"pid":42,"running":true}. */
        void (*on_reply)(json_object *reply, void *userdata);
        /* DATA from the agent (stdout 1, stderr 2, file 3). */
        void (*on_data)(uint8_t stream, const void *p, size_t n, void *userdata);
        void (*on_eof)(uint8_t stream, void *userdata);
        /* Credit to send on stream (stdin 0, file 3). */
        void (*on_window)(uint8_t stream, uint32_t credit, void *userdata);
        /* EXIT: the final result (an error in the one error shape, or the op's result). */
        void (*on_exit)(json_object *result, void *userdata);
        /* The connection was lost before EXIT. */
        void (*on_lost)(const sp_error *e, void *userdata);
} wk_agent_channel_ops;

typedef struct wk_agent_link_ops {
        /* HELLO received: the link is ready for channels. */
        void (*on_ready)(wk_agent_link *link, void *userdata);
        /* The connection closed (after every channel got on_lost). */
        void (*on_closed)(wk_agent_link *link, const sp_error *e, void *userdata);
        /* The agent sent DATA beyond the credit granted: the channel is being
         * closed (its owner's on_lost follows, with e). For the owner's log. */
        void (*on_overrun)(wk_agent_link *link, const sp_error *e, void *userdata);
} wk_agent_link_ops;

/* Connects to the agent's unix socket. Calls ops->on_ready once HELLO arrives. */
wk_agent_link *wk_agent_link_new(struct event_base *base, const char *socket_path, const wk_agent_link_ops *ops,
                                 void *userdata, sp_error **err);
/* Wraps an already connected socket (ownership passes to the link). Channels
 * may be opened at once: frames are queued behind the worker's HELLO. */
wk_agent_link *wk_agent_link_new_fd(struct event_base *base, int fd, const wk_agent_link_ops *ops, void *userdata,
                                    sp_error **err);
/* The same for a connection on which HELLO already went both ways (a VM's
 * port after the backend's probe, wk_backend_ops.agent_connect). */
wk_agent_link *wk_agent_link_new_greeted(struct event_base *base, int fd, const wk_agent_link_ops *ops, void *userdata,
                                         sp_error **err);
/* Appends the worker's HELLO frame to out. */
void wk_agent_hello_append(sp_buf *out);
/* Closes the connection; pending channels get on_lost. Accepts NULL. */
void wk_agent_link_free(wk_agent_link *link);
/* True once connected (channels may be opened). */
bool wk_agent_link_ready(const wk_agent_link *link);

/* Opens a channel with the request; returns the channel id, 0 on error. */
uint32_t wk_agent_open(wk_agent_link *link, json_object *request, const wk_agent_channel_ops *ops, void *userdata,
                       sp_error **err);
int wk_agent_send(wk_agent_link *link, uint32_t channel, uint8_t type, uint8_t stream, const void *p, size_t n,
                  sp_error **err);
int wk_agent_ack(wk_agent_link *link, uint32_t channel, uint8_t stream, uint32_t n, sp_error **err);
int wk_agent_control(wk_agent_link *link, uint32_t channel, json_object *control, sp_error **err);
/* Drops the channel (the agent keeps a command running); no further callbacks. */
void wk_agent_cancel(wk_agent_link *link, uint32_t channel);
/* Bytes queued toward the agent. */
size_t wk_agent_link_queued(const wk_agent_link *link);

#endif
