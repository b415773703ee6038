/* SPDX-License-Identifier: Apache-2.0 */
/*
 * RPC server calls: the nghttp2 callbacks of a server session, request
 * checks (method, path, role, content type, deadline), handler dispatch,
 * frame delivery with consumer-driven flow control, and the call API.
 *
 * User code never runs inside an nghttp2 callback: those only record what
 * happened and schedule the connection's deferred work (sp__rpc_conn_kick),
 * which runs handlers, delivers frames and releases closed calls.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "rpc_server_internal.h"

#define NV(n, v) \
        { \
                (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE \
        }

static nghttp2_session *call_session(const sp_rpc_call *call)
{
        return call->conn ? call->conn->h2.session : NULL;
}

/* The stream is there and the handler may still act on it. */
static bool call_live(const sp_rpc_call *call)
{
        return !call->closed && !call->h2_closed && call_session(call);
}

/* ---- handle lifetime ------------------------------------------------------- */

static sp_rpc_call *call_new(sp__rpc_conn *c, int32_t stream_id)
{
        sp_rpc_call *call = calloc(1, sizeof(*call));
        if (!call)
                return NULL;
        if (sp__rpc_outq_init(&call->out) < 0) {
                free(call);
                return NULL;
        }
        call->refs = 1; /* the transport's, dropped in call_release() */
        call->conn = c;
        call->srv = c->srv;
        call->stream_id = stream_id;
        call->role = c->role;
        call->body.limit = SP_RPC_MAX_BODY;
        if (c->peer_name)
                call->peer_name = strdup(c->peer_name);
        memcpy(call->peer_serial, c->peer_serial, sizeof(call->peer_serial));
        call->next = c->calls;
        if (c->calls)
                c->calls->prev = call;
        c->calls = call;
        sp__rpc_server_call_born(c->srv, call);
        return call;
}

sp_rpc_call *sp_rpc_call_ref(sp_rpc_call *call)
{
        if (call)
                call->refs++;
        return call;
}

sp_rpc_call *sp_rpc_call_unref(sp_rpc_call *call)
{
        if (!call || --call->refs > 0)
                return NULL;
        if (call->srv)
                sp__rpc_server_call_gone(call->srv, call);
        free(call->peer_name);
        free(call);
        return NULL;
}

/* Fires on_close once; afterwards no callback fires. */
static void call_notify_close(sp_rpc_call *call, sp_errc code, const char *msg)
{
        if (call->closed)
                return;
        call->closed = true;
        sp_rpc_call_ops ops = call->ops;
        void *ud = call->ud;
        memset(&call->ops, 0, sizeof(call->ops));
        if (!ops.on_close)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (code != SP_OK)
                sp_error_set(&e, code, "%s", msg);
        ops.on_close(call, e, ud);
}

/* Frees everything but the handle and detaches it from the connection. Only
 * once the stream is closed or the session is gone. */
static void call_release(sp_rpc_call *call)
{
        sp__rpc_conn *c = call->conn;
        if (!c)
                return;
        if (call->deadline_ev)
                event_free(call->deadline_ev);
        call->deadline_ev = NULL;
        sp__rpc_inq_free(&call->in);
        sp__rpc_outq_free(&call->out);
        sp_buf_free(&call->body);
        if (call->prev)
                call->prev->next = call->next;
        else
                c->calls = call->next;
        if (call->next)
                call->next->prev = call->prev;
        call->prev = call->next = NULL;
        call->conn = NULL;
        sp_rpc_call_unref(call);
}

void sp__rpc_conn_close_calls(sp__rpc_conn *c)
{
        while (c->calls) {
                sp_rpc_call *call = sp_rpc_call_ref(c->calls);
                call->h2_closed = true;
                call_notify_close(call, SP_E_UNAVAILABLE, "connection lost");
                call_release(call);
                sp_rpc_call_unref(call);
        }
}

/* ---- responses -------------------------------------------------------------- */

static int submit_response(sp_rpc_call *call, int status, const char *content_type)
{
        char st[8];
        snprintf(st, sizeof(st), "%d", status);
        nghttp2_nv nv[] = {NV(":status", st), NV("content-type", content_type)};
        nghttp2_data_provider prd = sp__rpc_outq_provider(&call->out);
        int rv = nghttp2_submit_response(call_session(call), call->stream_id, nv, SP_ARRAY_SIZE(nv), &prd);
        if (rv != 0)
                return -1;
        call->responded = true;
        sp__rpc_conn_kick(call->conn);
        return 0;
}

/* Answers with the error shape: an error status before anything was sent,
 * else an END trailer. Marks the call finished. */
static void submit_error(sp_rpc_call *call, sp_errc code, const char *msg)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        call->finished = true;
        if (sp_error_shape_encode(&b, code, msg, NULL) < 0)
                return;
        if (!call->responded) {
                if (evbuffer_add(call->out.buf, b.data, b.len) < 0)
                        return;
                call->out.eof = true;
                submit_response(call, sp_errc_http_status(code), SP_RPC_CONTENT_TYPE_JSON);
                return;
        }
        if (!call->out.eof && sp__rpc_outq_end(&call->out, b.data, b.len, NULL) == 0) {
                sp__rpc_outq_wake(&call->out, call_session(call), call->stream_id);
                sp__rpc_conn_kick(call->conn);
        }
}

static void submit_errorf(sp_rpc_call *call, sp_errc code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void submit_errorf(sp_rpc_call *call, sp_errc code, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        submit_error(call, code, msg);
}

/* ---- deadline ----------------------------------------------------------------- */

static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
        sp_rpc_call *call = arg;
        if (!call_live(call) || call->finished)
                return;
        sp_rpc_call_ref(call);
        call_notify_close(call, SP_E_TIMEOUT, "deadline exceeded");
        /* on_close cannot end the connection, so the stream is still there. */
        if (!call->h2_closed && call_session(call)) {
                if (!call->responded)
                        submit_error(call, SP_E_TIMEOUT, "deadline exceeded");
                else
                        nghttp2_submit_rst_stream(call_session(call), NGHTTP2_FLAG_NONE, call->stream_id,
                                                  NGHTTP2_CANCEL);
                call->finished = true;
                sp__rpc_conn_kick(call->conn);
        }
        sp_rpc_call_unref(call);
}

/* ---- request headers ---------------------------------------------------------- */

static call_ct parse_content_type(const uint8_t *v, size_t len)
{
        size_t end = 0;
        while (end < len && v[end] != ';')
                end++;
        while (end > 0 && (v[end - 1] == ' ' || v[end - 1] == '\t'))
                end--;
        if (end == strlen(SP_RPC_CONTENT_TYPE_JSON) && strncasecmp((const char *)v, SP_RPC_CONTENT_TYPE_JSON, end) == 0)
                return CALL_CT_JSON;
        if (end == strlen(SP_RPC_CONTENT_TYPE_STREAM) &&
            strncasecmp((const char *)v, SP_RPC_CONTENT_TYPE_STREAM, end) == 0)
                return CALL_CT_STREAM;
        return CALL_CT_OTHER;
}

static int64_t parse_timeout(const uint8_t *v, size_t len)
{
        if (len == 0 || len > 12)
                return -1;
        int64_t ms = 0;
        for (size_t i = 0; i < len; i++) {
                if (v[i] < '0' || v[i] > '9')
                        return -1;
                ms = ms * 10 + (v[i] - '0');
        }
        if (ms < 1 || ms > SP_RPC_MAX_TIMEOUT_MS)
                return -1;
        return ms;
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
        sp__rpc_conn *c = user_data;
        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;
        sp_rpc_call *call = call_new(c, frame->hd.stream_id);
        if (!call)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
        return 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
        if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
                return 0;
        sp_rpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!call)
                return 0;
        /* As HTTP/2 counts a header list: names, values and 32 bytes each. */
        call->header_bytes += namelen + valuelen + 32;
        if (call->header_bytes > SP_RPC_MAX_HEADER_BYTES)
                return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
#define IS(lit) (namelen == sizeof(lit) - 1 && memcmp(name, lit, namelen) == 0)
        if (IS(":method")) {
                call->is_post = valuelen == 4 && memcmp(value, "POST", 4) == 0;
        } else if (IS(":path")) {
                size_t plen = strlen(SP_RPC_PATH_PREFIX);
                call->path_ok = valuelen > plen && memcmp(value, SP_RPC_PATH_PREFIX, plen) == 0 &&
                                sp__rpc_method_name_valid((const char *)value + plen, valuelen - plen);
                if (call->path_ok) {
                        memcpy(call->method_name, value + plen, valuelen - plen);
                        call->method_name[valuelen - plen] = '\0';
                }
        } else if (IS("content-type")) {
                call->ct = parse_content_type(value, valuelen);
        } else if (IS(SP_RPC_TIMEOUT_HEADER)) {
                call->timeout_ms = parse_timeout(value, valuelen);
        }
#undef IS
        return 0;
}

/* Checks the request line and headers; answers at once if they are wrong. */
static void dispatch_headers(sp_rpc_call *call)
{
        if (!call->is_post) {
                submit_error(call, SP_E_METHOD, "RPC methods are called with POST");
                return;
        }
        const sp__rpc_method *m =
                call->path_ok ? sp__rpc_server_find_method(call->srv, call->method_name, strlen(call->method_name))
                              : NULL;
        if (!m) {
                if (call->path_ok)
                        submit_errorf(call, SP_E_NOT_FOUND, "unknown method %s", call->method_name);
                else
                        submit_error(call, SP_E_NOT_FOUND, "not an RPC path");
                return;
        }
        call->method = m;
        bool allowed = call->role ? (m->roles & call->role) == call->role : (m->roles & SP_RPC_UNAUTHENTICATED) != 0;
        if (!allowed) {
                if (call->role)
                        submit_errorf(call, SP_E_PERMISSION, "role 0x%x may not call %s", call->role, m->name);
                else
                        submit_errorf(call, SP_E_PERMISSION, "%s needs an authenticated peer", m->name);
                return;
        }
        call_ct want = m->streaming ? CALL_CT_STREAM : CALL_CT_JSON;
        if (call->ct != want) {
                submit_errorf(call, SP_E_UNSUPPORTED, "%s takes content-type %s", m->name,
                              m->streaming ? SP_RPC_CONTENT_TYPE_STREAM : SP_RPC_CONTENT_TYPE_JSON);
                return;
        }
        if (call->timeout_ms < 0) {
                submit_error(call, SP_E_INVALID, "bad " SP_RPC_TIMEOUT_HEADER " header");
                return;
        }
        if (m->streaming && sp__rpc_inq_init(&call->in) < 0) {
                submit_error(call, SP_E_LIMIT, "out of memory");
                return;
        }
        if (call->timeout_ms > 0) {
                call->deadline_us = sp_now_mono_us() + call->timeout_ms * SP_USEC_PER_MSEC;
                call->deadline_ev = evtimer_new(sp__rpc_server_base(call->srv), deadline_cb, call);
                struct timeval tv = {call->timeout_ms / 1000, (call->timeout_ms % 1000) * 1000};
                if (!call->deadline_ev || evtimer_add(call->deadline_ev, &tv) < 0)
                        submit_error(call, SP_E_LIMIT, "out of memory");
        }
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
        sp__rpc_conn *c = user_data;
        if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
                return 0;
        sp_rpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!call)
                return 0;
        if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
                dispatch_headers(call);
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) {
                call->req_ended = true;
                call->in.eof = true;
        }
        sp__rpc_conn_kick(c);
        return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                         void *user_data)
{
        sp__rpc_conn *c = user_data;
        sp_rpc_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
        if (!call || call->finished || call->closed || !call->method) {
                nghttp2_session_consume(session, stream_id, len);
                return 0;
        }
        if (!call->method->streaming) {
                nghttp2_session_consume(session, stream_id, len);
                if (sp_buf_append(&call->body, data, len, NULL) < 0) {
                        sp_buf_free(&call->body);
                        submit_errorf(call, SP_E_TOO_LARGE, "request body exceeds %u bytes", SP_RPC_MAX_BODY);
                }
                return 0;
        }
        /* Streaming bytes open the stream's window only once delivered. */
        if (sp__rpc_inq_receive(&call->in, session, data, len) < 0)
                return NGHTTP2_ERR_CALLBACK_FAILURE;
        sp__rpc_conn_kick(c);
        return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
        if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
            !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
                return 0;
        sp_rpc_call *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
        if (!call)
                return 0;
        call->end_sent = true;
        /* The answer is complete: ask the client to stop sending (RFC 9113 §8.1). */
        if (!call->req_ended)
                nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
        return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data)
{
        sp__rpc_conn *c = user_data;
        sp_rpc_call *call = nghttp2_session_get_stream_user_data(session, stream_id);
        if (!call)
                return 0;
        call->h2_closed = true;
        sp__rpc_conn_kick(c);
        return 0;
}

void sp__rpc_server_set_callbacks(nghttp2_session_callbacks *cbs)
{
        sp__rpc_h2_set_io_callbacks(cbs);
        nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
        nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
        nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk);
        nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
        nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
}

/* ---- deferred work -------------------------------------------------------------- */

static int parse_request(sp_rpc_call *call, const void *p, size_t n, json_object **ret)
{
        _cleanup_error_ sp_error *e = NULL;
        if (sp_json_parse(p, n, ret, &e) < 0) {
                submit_errorf(call, SP_E_INVALID, "request: %s", e->message);
                return -1;
        }
        if (!json_object_is_type(*ret, json_type_object)) {
                sp_json_putp(ret);
                submit_error(call, SP_E_INVALID, "request: not a JSON object");
                return -1;
        }
        return 0;
}

static void invoke_handler(sp_rpc_call *call, json_object *req)
{
        call->dispatched = true;
        if (call->srv)
                sp__rpc_server_call_started(call->srv);
        call->method->handler(call, req, call->method->userdata);
}

static bool deliver_frame(void *userdata, const sp_rpc_frame *f)
{
        sp_rpc_call *call = userdata;
        if (call->closed || call->finished)
                return false;
        if (!call->dispatched) {
                _cleanup_json_ json_object *req = NULL;
                if (f->type != SP_RPC_FRAME_JSON) {
                        submit_error(call, SP_E_INVALID, "the first frame must be the JSON request");
                        return false;
                }
                if (parse_request(call, f->payload, f->len, &req) < 0)
                        return false;
                invoke_handler(call, req);
        } else if (f->type == SP_RPC_FRAME_END) {
                submit_error(call, SP_E_INVALID, "clients end their side by closing the stream");
                return false;
        } else {
                call->ops.on_frame(call, f->type, f->payload, f->len, call->ud);
        }
        return !call->closed && !call->finished && call->ops.on_frame;
}

static void process_streaming(sp_rpc_call *call)
{
        if (!call->dispatched || call->ops.on_frame) {
                _cleanup_error_ sp_error *e = NULL;
                int r = sp__rpc_inq_deliver(&call->in, call_session(call), call->stream_id, deliver_frame, call, &e);
                if (r < 0 && !call->closed && !call->finished) {
                        submit_error(call, e->code, e->message);
                        return;
                }
        }
        if (!call->in.eof || call->closed || call->finished || call->input_end_fired ||
            evbuffer_get_length(call->in.buf) > 0)
                return;
        if (!call->dispatched) {
                submit_error(call, SP_E_INVALID, "the stream ended before the request");
        } else if (sp_rpc_frame_decoder_partial(&call->in.dec)) {
                submit_error(call, SP_E_INVALID, "the stream ended inside a frame");
        } else {
                call->input_end_fired = true;
                if (call->ops.on_input_end)
                        call->ops.on_input_end(call, call->ud);
        }
}

static void process_call(sp_rpc_call *call)
{
        if (call->h2_closed) {
                if (call->end_sent)
                        call_notify_close(call, SP_OK, NULL);
                else
                        call_notify_close(call, SP_E_UNAVAILABLE, "stream reset by the client");
                call_release(call);
                return;
        }
        if (!call->method || call->closed || call->finished)
                return;
        if (!call->method->streaming) {
                if (call->req_ended && !call->dispatched) {
                        _cleanup_json_ json_object *req = NULL;
                        int r = parse_request(call, call->body.data, call->body.len, &req);
                        sp_buf_free(&call->body);
                        if (r == 0)
                                invoke_handler(call, req);
                }
        } else {
                process_streaming(call);
        }
        if (call->out.writable_due && !call->closed && !call->finished) {
                call->out.writable_due = false;
                if (call->ops.on_writable)
                        call->ops.on_writable(call, call->ud);
        }
}

void sp__rpc_conn_process_calls(sp__rpc_conn *c)
{
        sp_rpc_call *call = c->calls;
        while (call) {
                sp_rpc_call *next = call->next;
                sp_rpc_call_ref(call);
                process_call(call);
                sp_rpc_call_unref(call);
                call = next;
        }
}

/* ---- call API ----------------------------------------------------------------- */

void sp_rpc_call_set_ops(sp_rpc_call *call, const sp_rpc_call_ops *ops, void *userdata)
{
        if (call->closed)
                return;
        if (ops)
                call->ops = *ops;
        else
                memset(&call->ops, 0, sizeof(call->ops));
        call->ud = userdata;
        sp__rpc_conn_kick(call->conn);
}

const char *sp_rpc_call_method(const sp_rpc_call *call)
{
        return call->method_name;
}

unsigned sp_rpc_call_role(const sp_rpc_call *call)
{
        return call->role;
}

const char *sp_rpc_call_peer_serial(const sp_rpc_call *call)
{
        return call->peer_serial[0] ? call->peer_serial : NULL;
}

const char *sp_rpc_call_peer_name(const sp_rpc_call *call)
{
        return call->peer_name;
}

int64_t sp_rpc_call_deadline(const sp_rpc_call *call)
{
        return call->deadline_us;
}

bool sp_rpc_call_is_closed(const sp_rpc_call *call)
{
        return !call_live(call);
}

static int check_open(sp_rpc_call *call, sp_error **err)
{
        if (!call_live(call))
                return sp_error_set(err, SP_E_UNAVAILABLE, "the call is over");
        if (call->finished)
                return sp_error_set(err, SP_E_INVALID, "the call was already answered");
        return 0;
}

int sp_rpc_call_reply(sp_rpc_call *call, json_object *resp, sp_error **err)
{
        int r = check_open(call, err);
        if (r < 0)
                return r;
        if (call->method->streaming)
                return sp_error_set(err, SP_E_INVALID, "%s is a streaming method", call->method_name);
        const char *s = resp ? sp_json_str(resp) : "{}";
        if (evbuffer_add(call->out.buf, s, strlen(s)) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        call->out.eof = true;
        call->finished = true;
        if (submit_response(call, 200, SP_RPC_CONTENT_TYPE_JSON) < 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "the stream is gone");
        return 0;
}

int sp_rpc_call_fail(sp_rpc_call *call, const sp_error *e)
{
        int r = check_open(call, NULL);
        if (r < 0)
                return r;
        submit_error(call, e ? e->code : SP_E_INTERNAL, e ? e->message : "internal error");
        return 0;
}

int sp_rpc_call_failf(sp_rpc_call *call, sp_errc code, const char *fmt, ...)
{
        int r = check_open(call, NULL);
        if (r < 0)
                return r;
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        submit_error(call, code, msg);
        return 0;
}

static int start_stream(sp_rpc_call *call, sp_error **err)
{
        if (!call->method->streaming)
                return sp_error_set(err, SP_E_INVALID, "%s is a unary method", call->method_name);
        if (!call->responded && submit_response(call, 200, SP_RPC_CONTENT_TYPE_STREAM) < 0)
                return sp_error_set(err, SP_E_UNAVAILABLE, "the stream is gone");
        return 0;
}

int sp_rpc_call_send(sp_rpc_call *call, sp_rpc_frame_type type, const void *payload, size_t n, sp_error **err)
{
        int r = check_open(call, err);
        if (r < 0 || (r = start_stream(call, err)) < 0)
                return r;
        r = sp__rpc_outq_frame(&call->out, type, payload, n, err);
        if (r >= 0) {
                sp__rpc_outq_wake(&call->out, call_session(call), call->stream_id);
                sp__rpc_conn_kick(call->conn);
        }
        return r;
}

int sp_rpc_call_send_json(sp_rpc_call *call, json_object *msg, sp_error **err)
{
        const char *s = msg ? sp_json_str(msg) : "null";
        return sp_rpc_call_send(call, SP_RPC_FRAME_JSON, s, strlen(s), err);
}

int sp_rpc_call_end(sp_rpc_call *call, json_object *extra, sp_error **err)
{
        int r = check_open(call, err);
        if (r < 0 || (r = start_stream(call, err)) < 0)
                return r;
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if ((r = sp_rpc_trailer_encode(&b, NULL, extra, err)) < 0 ||
            (r = sp__rpc_outq_end(&call->out, b.data, b.len, err)) < 0)
                return r;
        call->finished = true;
        sp__rpc_outq_wake(&call->out, call_session(call), call->stream_id);
        sp__rpc_conn_kick(call->conn);
        return 0;
}

size_t sp_rpc_call_queued(const sp_rpc_call *call)
{
        return call->out.buf ? evbuffer_get_length(call->out.buf) : 0;
}

size_t sp_rpc_call_buffered(const sp_rpc_call *call)
{
        return (call->in.buf ? evbuffer_get_length(call->in.buf) : 0) + call->in.dec.payload.len;
}

void sp_rpc_call_pause(sp_rpc_call *call)
{
        call->in.paused = true;
}

void sp_rpc_call_resume(sp_rpc_call *call)
{
        if (!call->in.paused)
                return;
        call->in.paused = false;
        sp__rpc_conn_kick(call->conn);
}
