/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: raw bytes after the HTTP/2 client preface into an RPC server
 * connection (served over a socketpair through sp_rpc_server_adopt_fd) with a
 * unary, a streaming and a never-answering method registered. The server
 * must not crash, leak or hang: once the peer is gone its connection and
 * calls are freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "space/rpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct event_base *base;
static sp_rpc_server *srv;

static void echo(sp_rpc_call *call, json_object *req, void *ud)
{
        sp_rpc_call_reply(call, req, NULL);
}

static void never(sp_rpc_call *call, json_object *req, void *ud) {}

static void stream_on_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        if (sp_rpc_call_send(call, type, p, n, NULL) != 0)
                sp_rpc_call_pause(call);
}

static void stream_on_writable(sp_rpc_call *call, void *ud)
{
        sp_rpc_call_resume(call);
}

static void stream_on_input_end(sp_rpc_call *call, void *ud)
{
        sp_rpc_call_end(call, NULL, NULL);
}

static void stream(sp_rpc_call *call, json_object *req, void *ud)
{
        static const sp_rpc_call_ops ops = {
                .on_frame = stream_on_frame,
                .on_writable = stream_on_writable,
                .on_input_end = stream_on_input_end,
        };
        sp_rpc_call_set_ops(call, &ops, NULL);
        sp_rpc_call_send_json(call, req, NULL);
}

static void setup(void)
{
        base = event_base_new();
        srv = sp_rpc_server_new(base, NULL, NULL);
        if (!base || !srv)
                abort();
        const sp_rpc_method methods[] = {
                {.name = "Echo", .roles = SP_RPC_UNAUTHENTICATED, .handler = echo},
                {.name = "Never", .roles = SP_RPC_UNAUTHENTICATED, .handler = never},
                {.name = "Stream", .roles = SP_RPC_UNAUTHENTICATED, .streaming = true, .handler = stream},
                {.name = "Worker", .roles = 2, .handler = echo},
        };
        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
                if (sp_rpc_server_register(srv, &methods[i], NULL) < 0)
                        abort();
}

static void drain(int fd)
{
        char buf[65536];
        while (read(fd, buf, sizeof(buf)) > 0)
                ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        if (!base)
                setup();
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        if (sp_rpc_server_adopt_fd(srv, sv[0], NULL) < 0)
                abort();
        if (write(sv[1], preface, sizeof(preface) - 1) < 0)
                abort();
        size_t off = 0;
        for (int i = 0; i < 64; i++) {
                if (off < size) {
                        ssize_t w = write(sv[1], data + off, size - off);
                        if (w > 0)
                                off += (size_t)w;
                }
                event_base_loop(base, EVLOOP_NONBLOCK);
                drain(sv[1]);
        }
        /* The peer goes away: everything of its connection must be freed. */
        close(sv[1]);
        sp_rpc_server_stats st;
        for (int i = 0; i < 1000; i++) {
                sp_rpc_server_get_stats(srv, &st);
                if (st.connections_open == 0 && st.calls_open == 0)
                        break;
                event_base_loop(base, EVLOOP_NONBLOCK);
        }
        if (st.connections_open != 0 || st.calls_open != 0)
                abort();
        return 0;
}
