/* SPDX-License-Identifier: Apache-2.0 */
/* File methods: one-shot operations, and ReadFile / WriteFile streamed
 * between the RPC call and an agent channel with flow control on both sides
 * (a multi-gigabyte file never sits in memory). */
#include <stdlib.h>
#include <string.h>

#include "backend/agent_link.h"
#include "rpc/service_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/worker_rpc.h"

/* One call bound to one agent channel. Freed when both have ended. */
typedef struct {
        sp_rpc_call *call;
        wk_agent_link *link;
        uint32_t channel;
        bool call_over, channel_over;
        /* read: bytes forwarded but not yet acknowledged to the agent (the call was full) */
        uint32_t unacked;
        uint32_t window; /* read: the credit granted the agent, and so what pending may hold */
        bool blocked;
        /* write: credit the agent granted for stream 3 */
        uint64_t credit;
        sp_buf pending;
        bool input_ended, eof_sent;
        json_object *exit_result; /* read: the agent's EXIT, held until pending is sent */
} bridge;

static void bridge_maybe_free(bridge *b)
{
        if (b->call_over && b->channel_over) {
                if (b->exit_result)
                        json_object_put(b->exit_result);
                sp_buf_free(&b->pending);
                sp_rpc_call_unref(b->call);
                free(b);
        }
}

/* The agent's EXIT: an error in the one shape, or the operation's result. */
static void finish_from_exit(bridge *b, json_object *result, bool streaming)
{
        wk__call_finish_from_exit(b->call, result, streaming);
}

static void ch_exit_unary(json_object *result, void *ud)
{
        bridge *b = ud;
        b->channel_over = true;
        finish_from_exit(b, result, false);
        bridge_maybe_free(b);
}

static void ch_lost(const sp_error *e, void *ud)
{
        bridge *b = ud;
        b->channel_over = true;
        sp_rpc_call_fail(b->call, e);
        bridge_maybe_free(b);
}

static void call_closed(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        bridge *b = ud;
        b->call_over = true;
        if (!b->channel_over) {
                /* The caller left: stop the transfer in the sandbox too. */
                wk_agent_cancel(b->link, b->channel);
                b->channel_over = true;
        }
        bridge_maybe_free(b);
}

/* The request schema of each agent operation's method. */
static const pr_schema *op_schema(const char *op)
{
        static const struct {
                const char *op;
                const pr_schema *schema;
        } ops[] = {
                {"stat", &pr_wk_stat_file_schema},     {"list", &pr_wk_list_dir_schema},
                {"mkdir", &pr_wk_make_dir_schema},     {"move", &pr_wk_move_path_schema},
                {"remove", &pr_wk_remove_path_schema}, {"chmod", &pr_wk_chmod_path_schema},
                {"read", &pr_wk_read_file_schema},     {"write", &pr_wk_write_file_schema},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(ops); i++)
                if (strcmp(ops[i].op, op) == 0)
                        return ops[i].schema;
        return NULL;
}

/* Builds the agent request: op plus the request's fields but the sandbox
 * (the agent validates them again). */
static json_object *agent_request(const pr_schema *schema, const pr_wk_file *q, const char *op)
{
        json_object *o = pr_msg_encode(schema, q);
        json_object_object_del(o, "sandbox_id");
        json_object_object_add(o, "op", json_object_new_string(op));
        return o;
}

static bridge *start(sp_rpc_call *call, json_object *req, const char *op, const wk_agent_channel_ops *ch_ops,
                     const sp_rpc_call_ops *call_ops)
{
        sp_error *e = NULL;
        const pr_schema *schema = op_schema(op);
        pr_wk_file q = PR_WK_FILE_INIT;
        if (!schema) {
                sp_rpc_call_failf(call, SP_E_INTERNAL, "no request schema for file operation %s", op);
                return NULL;
        }
        if (pr_wk_file_decode(schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return NULL;
        }
        wk_agent_link *link = wk_node_agent(wk__svc.node, q.sandbox_id, &e);
        if (!link) {
                wk__fail(call, e);
                return NULL;
        }
        bridge *b = calloc(1, sizeof(*b));
        if (!b) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        b->link = link;
        b->window = q.window ? (uint32_t)q.window : PR_AGENT_DEFAULT_WINDOW;
        b->pending.limit = 8u << 20;
        _cleanup_json_ json_object *ar = agent_request(schema, &q, op);
        b->channel = wk_agent_open(link, ar, ch_ops, b, &e);
        if (!b->channel) {
                free(b);
                wk__fail(call, e);
                return NULL;
        }
        b->call = sp_rpc_call_ref(call);
        sp_rpc_call_set_ops(call, call_ops, b);
        return b;
}

void wk__h_file_simple(sp_rpc_call *call, json_object *req, void *ud)
{
        static const wk_agent_channel_ops ch = {.on_exit = ch_exit_unary, .on_lost = ch_lost};
        static const sp_rpc_call_ops co = {.on_close = call_closed};
        start(call, req, ud, &ch, &co);
}

/* --- ReadFile: agent → call --- */

/* Sends what is pending; returns false while the call is full. */
static bool rd_flush(bridge *b)
{
        while (b->pending.len) {
                size_t n = b->pending.len > 65536 ? 65536 : b->pending.len;
                int r = sp_rpc_call_send(b->call, SP_RPC_FRAME_DATA, b->pending.data, n, NULL);
                if (r < 0)
                        return false; /* at the watermark (or over): wait for on_writable */
                sp_buf_consume(&b->pending, n);
                b->unacked += (uint32_t)n;
                if (r == 1)
                        return false;
        }
        return true;
}

static void rd_ack(bridge *b)
{
        if (b->unacked && !b->channel_over)
                wk_agent_ack(b->link, b->channel, PR_STREAM_FILE, b->unacked, NULL);
        b->unacked = 0;
}

static void rd_data(uint8_t stream, const void *p, size_t n, void *ud)
{
        bridge *b = ud;
        if (stream != PR_STREAM_FILE || b->call_over)
                return;
        /* Within the window: the link closes a channel whose agent sends more
         * than we granted, so pending (limited to the window) has room; only
         * memory may fail, and then the transfer ends rather than lose bytes. */
        _cleanup_error_ sp_error *e = NULL;
        if (sp_buf_append(&b->pending, p, n, &e) < 0) {
                sp_error_wrap(&e, "file content from the sandbox");
                wk_agent_cancel(b->link, b->channel);
                b->channel_over = true;
                sp_rpc_call_fail(b->call, e);
                bridge_maybe_free(b);
                return;
        }
        if (!b->blocked && rd_flush(b))
                rd_ack(b);
        else
                b->blocked = true;
}

static void rd_writable(sp_rpc_call *call, void *ud)
{
        (void)call;
        bridge *b = ud;
        b->blocked = !rd_flush(b);
        if (!b->blocked) {
                rd_ack(b);
                if (b->exit_result) {
                        finish_from_exit(b, b->exit_result, true);
                        json_object_put(b->exit_result);
                        b->exit_result = NULL;
                }
        }
}

static void rd_exit(json_object *result, void *ud)
{
        bridge *b = ud;
        b->channel_over = true;
        if (b->pending.len) {
                /* Data still waits for the client: end after it. */
                b->exit_result = json_object_get(result);
                return;
        }
        finish_from_exit(b, result, true);
        bridge_maybe_free(b);
}

void wk__h_read_file(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        static const wk_agent_channel_ops ch = {.on_data = rd_data, .on_exit = rd_exit, .on_lost = ch_lost};
        static const sp_rpc_call_ops co = {.on_writable = rd_writable, .on_close = call_closed};
        bridge *b = start(call, req, "read", &ch, &co);
        if (b)
                b->pending.limit = b->window;
}

/* --- WriteFile: call → agent --- */

static void wr_flush(bridge *b)
{
        if (b->channel_over || b->call_over)
                return;
        while (b->pending.len && b->credit) {
                size_t n = b->pending.len;
                if (n > b->credit)
                        n = (size_t)b->credit;
                if (n > 65536)
                        n = 65536;
                if (wk_agent_send(b->link, b->channel, PR_AGENT_DATA, PR_STREAM_FILE, b->pending.data, n, NULL) < 0)
                        return;
                sp_buf_consume(&b->pending, n);
                b->credit -= n;
        }
        if (b->pending.len == 0) {
                sp_rpc_call_resume(b->call);
                if (b->input_ended && !b->eof_sent) {
                        wk_agent_send(b->link, b->channel, PR_AGENT_EOF, PR_STREAM_FILE, NULL, 0, NULL);
                        b->eof_sent = true;
                }
        } else {
                sp_rpc_call_pause(b->call);
        }
}

static void wr_window(uint8_t stream, uint32_t credit, void *ud)
{
        bridge *b = ud;
        if (stream == PR_STREAM_FILE) {
                b->credit += credit;
                wr_flush(b);
        }
}

static void wr_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)call;
        bridge *b = ud;
        if (type != SP_RPC_FRAME_DATA)
                return;
        if (sp_buf_append(&b->pending, p, n, NULL) < 0) {
                sp_rpc_call_failf(b->call, SP_E_INVALID, "the client sent more than it was allowed to");
                return;
        }
        wr_flush(b);
}

static void wr_input_end(sp_rpc_call *call, void *ud)
{
        (void)call;
        bridge *b = ud;
        b->input_ended = true;
        wr_flush(b);
}

void wk__h_write_file(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        static const wk_agent_channel_ops ch = {.on_window = wr_window, .on_exit = rd_exit, .on_lost = ch_lost};
        static const sp_rpc_call_ops co = {.on_frame = wr_frame, .on_input_end = wr_input_end, .on_close = call_closed};
        bridge *b = start(call, req, "write", &ch, &co);
        if (b)
                sp_rpc_call_pause(call); /* until the agent grants credit */
}
