/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inside the relay: a connection, and what relay.c (splicing) and
 * terminate.c (TLS ended here to inject a secret, docs/secrets.md) share.
 */
#ifndef SPACE_GATEWAY_RELAY_INTERNAL_H
#define SPACE_GATEWAY_RELAY_INTERNAL_H

#include <event2/util.h>
#include <stdbool.h>
#include <stdint.h>

#include "gw.h"

/* Beyond this much waiting in one direction, stop reading the other side.
 * It bounds what a sandbox can make the gateway hold: a server that sends
 * faster than the sandbox reads fills one connection's buffer to about this
 * plus RELAY_CHUNK, so a sandbox's --max-conns-per-sandbox connections hold
 * at most 2 x 256 x 384 KiB = 192 MiB (it was 640 MiB with 1 MiB). */
#define HIGH_WATER (256u << 10)
/* The most one read or write of a relayed socket moves (read_more()). */
#define RELAY_CHUNK (128u << 10)
/* The kernel's buffers of a relayed socket, each way (it doubles the number
 * for its bookkeeping): fixed, not grown by autotuning, so that what a
 * sandbox makes the kernel hold for it is bounded too (about 1 MiB per
 * connection at worst, both sockets' receive and send buffers full). */
#define SOCK_BUF (128 << 10)

typedef struct conn conn;
struct conn {
        gw_relay *r;
        conn *prev, *next;
        struct bufferevent *down, *up; /* the sandbox's side; the destination's */
        struct event *timer;
        struct event *idle; /* once relaying: closes it after idle_timeout_ms without bytes */
        int64_t last_us; /* the last bytes either way */
        uint32_t src, dst;
        uint16_t port;
        char name[GW_NAME_MAX + 1];
        const char *proto;
        bool counted; /* holds one of the sandbox's connections */
        bool pending; /* holds one of the sandbox's undecided connections */
        bool down_eof, up_eof; /* that side sent EOF */
        bool down_shut, up_shut; /* we shut that side's write half */
        uint64_t out, in;
        gw_decision d;
        /* Terminated (terminate.c): TLS ended here to inject a secret. down
         * and up are then TLS bufferevents; down_fd is the sandbox's socket. */
        struct term *term;
        int down_fd;
};

struct gw_relay {
        gw *g;
        struct evconnlistener *listener;
        conn *conns;
};

void gw__bound_buffers(int fd);
void gw__audit_conn(conn *c, gw_sandbox *sb, const char *phase, const char *detail);
/* Ends the connection (rst: with a reset); frees c. */
void gw__conn_close(conn *c, bool rst);
void gw__arm_idle(conn *c, int64_t after_us);
void gw__idle_check(evutil_socket_t fd, short what, void *ud);

/* ---- terminate.c ---- */
/* Whether the decided connection c of sb is one whose TLS the gateway ends:
 * TLS naming a host one of sb's secrets is bound to. */
bool gw__term_wanted(const conn *c, const gw_sandbox *sb);
/* Instead of dialling: ends the sandbox's TLS with a certificate of sb's CA,
 * dials the host with TLS, and relays requests, injecting secrets. */
void gw__term_start(conn *c, gw_sandbox *sb);
void gw__term_free(conn *c);

#endif
