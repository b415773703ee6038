/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Worker connections (conn.c), above the loop: accepts them, sends HELLO and
 * expects HELLO first, decodes and queues frames. It knows nothing of what
 * the frames mean: every frame after HELLO, the connection's end and the
 * draining of its queue go to handlers set once by ag_conn_listen_add().
 */
#ifndef SPACE_AGENT_CONN_H
#define SPACE_AGENT_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"
#include "space/agent_proto.h"
#include "space/error.h"

typedef struct ag_conn ag_conn;

typedef struct ag_conn_handlers {
        /* A frame from the worker after its HELLO. < 0 with *err set closes
         * the connection. */
        int (*frame)(ag_conn *c, const pr_agent_frame *f, sp_error **err);
        /* c is being freed: nothing may use it after this returns. */
        void (*closed)(ag_conn *c);
        /* c's output queue went below half its bound: produce into it again. */
        void (*drained)(ag_conn *c);
} ag_conn_handlers;

/* Accepts worker connections on listen_fd, handing them to h (kept). */
int ag_conn_listen_add(int listen_fd, const ag_conn_handlers *h);
/* Serves the agent protocol over a VM's serial port (fd, non-blocking, kept
 * open for the agent's life): one connection at a time, each started with
 * PR_AGENT_SYNC_MAGIC both ways, a new one whenever the host reconnects. */
int ag_conn_serial_add(int fd, const ag_conn_handlers *h);
/* Queues a frame; the connection flushes when writable. */
void ag_conn_send(ag_conn *c, uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n);
void ag_conn_send_json(ag_conn *c, uint8_t type, uint32_t channel, json_object *obj);
void ag_conn_send_error(ag_conn *c, uint32_t channel, const sp_error *e);
/* Queues a WINDOW frame granting (and acknowledging) n bytes on stream. */
void ag_conn_send_window(ag_conn *c, uint8_t stream, uint32_t channel, uint32_t n);
/* True while the connection's output queue is small enough to produce into. */
bool ag_conn_can_send(const ag_conn *c);
void ag_conn_kick(ag_conn *c);

#endif
