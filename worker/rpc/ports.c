/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ConnectPort (proto/spec/worker-rpc.md, "Ports"): one RPC call bound to one
 * agent channel holding a TCP connection to a port inside the sandbox, bytes
 * relayed both ways with flow control on both sides — the call's HTTP/2
 * window toward the caller, the agent's credit toward the sandbox — so that
 * neither a slow caller nor a slow server makes the worker hold more than a
 * window of either direction.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/agent_link.h"
#include "rpc/service.h"
#include "rpc/service_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/id.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"

#define CHUNK 65536

typedef struct {
        sp_rpc_call *call;
        wk_agent_link *link;
        char sandbox[SP_ID_MAX]; /* for its counters */
        int64_t bytes_in, bytes_out; /* to the sandbox's port, from it */
        uint32_t channel;
        bool call_over, channel_over;
        bool connected;
        /* port → call: held until the call takes them, acknowledged to the agent
         * then; at most the credit granted (down.limit, the window) */
        sp_buf down;
        uint32_t unacked;
        bool blocked, eof_pending, eof_sent_down;
        json_object *exit_result; /* the agent's EXIT, held until down is sent */
        /* call → port: within the credit the agent granted */
        sp_buf up;
        uint64_t credit;
        bool input_ended, eof_sent_up;
} port_bridge;

static int64_t open_now;

static void bridge_maybe_free(port_bridge *b)
{
        if (b->call_over && b->channel_over) {
                wk_node_sandbox_count_ports(wk__svc.node, b->sandbox, 0, b->bytes_in, b->bytes_out);
                json_object_put(b->exit_result);
                sp_buf_free(&b->down);
                sp_buf_free(&b->up);
                sp_rpc_call_unref(b->call);
                open_now--;
                free(b);
        }
}

/* The agent's EXIT: an error in the one shape, or the counts for the trailer. */
static void finish(port_bridge *b, json_object *result)
{
        wk__call_finish_from_exit(b->call, result, true);
}

/* Hands the call what the port sent, as far as the call takes it; then the
 * "eof" event and the trailer once everything before them is out. Returns
 * false while the call is full. */
static bool down_flush(port_bridge *b)
{
        while (b->down.len) {
                size_t n = b->down.len > CHUNK ? CHUNK : b->down.len;
                int r = sp_rpc_call_send(b->call, SP_RPC_FRAME_DATA, b->down.data, n, NULL);
                if (r < 0)
                        return false;
                sp_buf_consume(&b->down, n);
                b->unacked += (uint32_t)n;
                b->bytes_out += (int64_t)n;
                if (r == 1)
                        return false;
        }
        if (b->unacked && !b->channel_over)
                wk_agent_ack(b->link, b->channel, PR_STREAM_PORT, b->unacked, NULL);
        b->unacked = 0;
        if (b->eof_pending && !b->eof_sent_down) {
                _cleanup_json_ json_object *ev = json_object_new_object();
                json_object_object_add(ev, "event", json_object_new_string("eof"));
                if (sp_rpc_call_send_json(b->call, ev, NULL) < 0)
                        return false;
                b->eof_sent_down = true;
        }
        if (b->exit_result) {
                _cleanup_json_ json_object *r = TAKE_PTR(b->exit_result);
                finish(b, r);
        }
        return true;
}

static void up_flush(port_bridge *b)
{
        if (b->channel_over || b->call_over)
                return;
        while (b->up.len && b->credit) {
                size_t n = b->up.len;
                if (n > b->credit)
                        n = (size_t)b->credit;
                if (n > CHUNK)
                        n = CHUNK;
                if (wk_agent_send(b->link, b->channel, PR_AGENT_DATA, PR_STREAM_PORT, b->up.data, n, NULL) < 0)
                        return;
                sp_buf_consume(&b->up, n);
                b->credit -= n;
                b->bytes_in += (int64_t)n;
        }
        if (b->up.len == 0) {
                sp_rpc_call_resume(b->call);
                if (b->input_ended && !b->eof_sent_up) {
                        wk_agent_send(b->link, b->channel, PR_AGENT_EOF, PR_STREAM_PORT, NULL, 0, NULL);
                        b->eof_sent_up = true;
                }
        } else {
                sp_rpc_call_pause(b->call);
        }
}

/* --- the agent's side --- */

static void ch_reply(json_object *reply, void *ud)
{
        port_bridge *b = ud;
        bool yes = false;
        if (b->connected || b->call_over || sp_json_get_bool(reply, "connected", false, &yes, NULL) < 0 || !yes)
                return;
        b->connected = true;
        _cleanup_json_ json_object *ev = json_object_new_object();
        json_object_object_add(ev, "event", json_object_new_string("connected"));
        sp_rpc_call_send_json(b->call, ev, NULL);
}

static void ch_data(uint8_t stream, const void *p, size_t n, void *ud)
{
        port_bridge *b = ud;
        if (stream != PR_STREAM_PORT || b->call_over)
                return;
        /* Within the window: the link closes a channel whose agent sends more
         * than we granted, so down has room; only memory may fail, and then the
         * connection ends rather than lose bytes. */
        _cleanup_error_ sp_error *e = NULL;
        if (sp_buf_append(&b->down, p, n, &e) < 0) {
                sp_error_wrap(&e, "bytes from the sandbox's port");
                wk_agent_cancel(b->link, b->channel);
                b->channel_over = true;
                sp_rpc_call_fail(b->call, e);
                bridge_maybe_free(b);
                return;
        }
        if (!b->blocked)
                b->blocked = !down_flush(b);
}

static void ch_eof(uint8_t stream, void *ud)
{
        port_bridge *b = ud;
        if (stream != PR_STREAM_PORT || b->call_over)
                return;
        b->eof_pending = true;
        if (!b->blocked)
                b->blocked = !down_flush(b);
}

static void ch_window(uint8_t stream, uint32_t credit, void *ud)
{
        port_bridge *b = ud;
        if (stream == PR_STREAM_PORT) {
                b->credit += credit;
                up_flush(b);
        }
}

static void ch_exit(json_object *result, void *ud)
{
        port_bridge *b = ud;
        b->channel_over = true;
        if (!b->call_over) {
                if (b->down.len || (b->eof_pending && !b->eof_sent_down) || b->blocked)
                        b->exit_result = json_object_get(result); /* after what waits for the caller */
                else
                        finish(b, result);
        }
        bridge_maybe_free(b);
}

static void ch_lost(const sp_error *e, void *ud)
{
        port_bridge *b = ud;
        b->channel_over = true;
        sp_rpc_call_fail(b->call, e);
        bridge_maybe_free(b);
}

/* --- the caller's side --- */

static void call_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)call;
        port_bridge *b = ud;
        if (type != SP_RPC_FRAME_DATA || b->input_ended)
                return;
        if (sp_buf_append(&b->up, p, n, NULL) < 0) {
                sp_rpc_call_failf(b->call, SP_E_INVALID, "the client sent more than it was allowed to");
                return;
        }
        up_flush(b);
}

static void call_input_end(sp_rpc_call *call, void *ud)
{
        (void)call;
        port_bridge *b = ud;
        b->input_ended = true;
        up_flush(b);
}

static void call_writable(sp_rpc_call *call, void *ud)
{
        (void)call;
        port_bridge *b = ud;
        b->blocked = !down_flush(b);
}

static void call_closed(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        port_bridge *b = ud;
        b->call_over = true;
        if (!b->channel_over) {
                /* The caller left: close the connection in the sandbox. */
                wk_agent_cancel(b->link, b->channel);
                b->channel_over = true;
        }
        bridge_maybe_free(b);
}

void wk__h_connect_port(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_connect_port q = {0};
        if (pr_msg_decode(&pr_wk_connect_port_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        if (open_now >= wk__svc.max_port_connections) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "the worker has %lld connections to sandbox ports open: no more",
                                  (long long)open_now);
                return;
        }
        wk_agent_link *link = wk_node_agent(wk__svc.node, q.sandbox_id, &e);
        if (!link) {
                wk__fail(call, e);
                return;
        }
        port_bridge *b = calloc(1, sizeof(*b));
        if (!b) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        b->link = link;
        snprintf(b->sandbox, sizeof(b->sandbox), "%s", q.sandbox_id);
        /* The caller's HTTP/2 window bounds what it sends past the agent's credit. */
        b->up.limit = 8u << 20;
        b->down.limit = q.window ? (size_t)q.window : PR_AGENT_DEFAULT_WINDOW;
        _cleanup_json_ json_object *ar = json_object_new_object();
        json_object_object_add(ar, "op", json_object_new_string("connect"));
        json_object_object_add(ar, "port", json_object_new_int((int)q.port));
        if (q.window)
                json_object_object_add(ar, "window", json_object_new_int64(q.window));
        static const wk_agent_channel_ops ch = {.on_reply = ch_reply,
                                                .on_data = ch_data,
                                                .on_eof = ch_eof,
                                                .on_window = ch_window,
                                                .on_exit = ch_exit,
                                                .on_lost = ch_lost};
        b->channel = wk_agent_open(link, ar, &ch, b, &e);
        if (!b->channel) {
                free(b);
                wk__fail(call, e);
                return;
        }
        open_now++;
        wk_node_sandbox_count_ports(wk__svc.node, b->sandbox, 1, 0, 0);
        b->call = sp_rpc_call_ref(call);
        static const sp_rpc_call_ops co = {.on_frame = call_frame,
                                           .on_input_end = call_input_end,
                                           .on_writable = call_writable,
                                           .on_close = call_closed};
        sp_rpc_call_set_ops(call, &co, b);
        sp_rpc_call_pause(call); /* until the agent grants credit */
}

int64_t wk_service_port_connections(void)
{
        return open_now;
}
