/* SPDX-License-Identifier: Apache-2.0 */
/* Responses: status line and headers, whole replies, the error shape, and
 * streamed bodies with backpressure. */
#include <event2/buffer.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "http_internal.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"

static const char *reason(int status)
{
        switch (status) {
        case 100:
                return "Continue";
        case 200:
                return "OK";
        case 201:
                return "Created";
        case 202:
                return "Accepted";
        case 204:
                return "No Content";
        case 206:
                return "Partial Content";
        case 301:
                return "Moved Permanently";
        case 302:
                return "Found";
        case 303:
                return "See Other";
        case 304:
                return "Not Modified";
        case 307:
                return "Temporary Redirect";
        case 308:
                return "Permanent Redirect";
        case 400:
                return "Bad Request";
        case 401:
                return "Unauthorized";
        case 403:
                return "Forbidden";
        case 404:
                return "Not Found";
        case 405:
                return "Method Not Allowed";
        case 406:
                return "Not Acceptable";
        case 408:
                return "Request Timeout";
        case 409:
                return "Conflict";
        case 410:
                return "Gone";
        case 411:
                return "Length Required";
        case 412:
                return "Precondition Failed";
        case 413:
                return "Content Too Large";
        case 414:
                return "URI Too Long";
        case 415:
                return "Unsupported Media Type";
        case 416:
                return "Range Not Satisfiable";
        case 417:
                return "Expectation Failed";
        case 422:
                return "Unprocessable Content";
        case 428:
                return "Precondition Required";
        case 429:
                return "Too Many Requests";
        case 431:
                return "Request Header Fields Too Large";
        case 500:
                return "Internal Server Error";
        case 501:
                return "Not Implemented";
        case 502:
                return "Bad Gateway";
        case 503:
                return "Service Unavailable";
        case 504:
                return "Gateway Timeout";
        case 505:
                return "HTTP Version Not Supported";
        default:
                return "";
        }
}

static void http_date(char out[static 64])
{
        static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
        static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        snprintf(out, 64, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
                 months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

bool sp__http_header_value_ok(const char *v)
{
        for (; *v; v++) {
                unsigned char c = (unsigned char)*v;
                if ((c < 0x20 && c != '\t') || c == 0x7f)
                        return false;
        }
        return true;
}

int sp_http_response_header(sp_http_request *req, const char *name, const char *value)
{
        static const char *const reserved[] = {"content-length", "transfer-encoding", "connection", "date",
                                               "x-request-id"};
        if (req->resp != SP__RESP_NONE)
                return -SP_E_CONFLICT;
        if (!name || !value || !sp_http_token_valid(name, strlen(name)) || !sp__http_header_value_ok(value))
                return -SP_E_INVALID;
        for (size_t i = 0; i < SP_ARRAY_SIZE(reserved); i++)
                if (sp_http_strcaseeq(name, reserved[i]))
                        return -SP_E_INVALID;
        if (sp_buf_appendf(&req->extra, NULL, "%s: %s\r\n", name, value) < 0)
                return -SP_E_INVALID;
        return 0;
}

/* Whether a reply may be sent now: 0, or the no-op code. */
static int can_answer(const sp_http_request *req)
{
        if (req->resp != SP__RESP_NONE)
                return -SP_E_CONFLICT;
        if (!req->conn)
                return -SP_E_UNAVAILABLE;
        return 0;
}

/* Writes the status line and headers. length: >= 0 Content-Length; -1
 * chunked (HTTP/1.1) or close-delimited (HTTP/1.0). */
static void write_head(sp_http_request *req, int status, const char *content_type, int64_t length)
{
        struct evbuffer *out = sp__http_conn_output(req->conn);
        bool http10 = sp_http_parser_version_minor(req->parser) == 0;
        if (!req->body_done || !sp_http_parser_keep_alive(req->parser) || req->conn->peer_eof)
                req->keep_alive = false;
        /* 1xx, 204 and 304 have no body; HEAD gets the headers of a GET. */
        bool bodyless_status = status == 204 || status == 304;
        req->no_body = bodyless_status || req->is_head;
        req->chunked = false;
        req->until_close = false;
        req->has_length = false;
        if (length < 0 && !bodyless_status) {
                if (http10) {
                        req->until_close = true;
                        req->keep_alive = false;
                } else {
                        req->chunked = true;
                }
        } else if (length >= 0) {
                req->has_length = true;
                req->length_left = (uint64_t)length;
        }

        char date[64];
        http_date(date);
        evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nDate: %s\r\nX-Request-Id: %s\r\n", status, reason(status), date,
                            sp_http_request_id(req));
        if (content_type && *content_type)
                evbuffer_add_printf(out, "Content-Type: %s\r\n", content_type);
        if (req->chunked)
                evbuffer_add_printf(out, "Transfer-Encoding: chunked\r\n");
        else if (req->has_length && status != 204)
                evbuffer_add_printf(out, "Content-Length: %" PRIu64 "\r\n", (uint64_t)length);
        if (!req->keep_alive)
                evbuffer_add_printf(out, "Connection: close\r\n");
        else if (http10)
                evbuffer_add_printf(out, "Connection: keep-alive\r\n");
        if (req->extra.len)
                evbuffer_add(out, req->extra.data, req->extra.len);
        evbuffer_add(out, "\r\n", 2);
        /* HEAD and bodiless statuses send no body bytes whatever was declared. */
        if (req->no_body) {
                req->chunked = false;
                req->has_length = false;
        }
}

static void finish(sp_http_request *req)
{
        req->resp = SP__RESP_DONE;
        req->want_writable = false;
        sp__http_conn_response_done(req->conn);
}

int sp_http_reply(sp_http_request *req, int status, const char *content_type, const void *body, size_t len)
{
        int r = can_answer(req);
        if (r < 0)
                return r;
        if (status < 200 || status > 599 || (content_type && !sp__http_header_value_ok(content_type)) || (len && !body))
                return -SP_E_INVALID;
        sp__http_conn *c = req->conn;
        sp__http_conn_api_enter(c);
        write_head(req, status, content_type, (int64_t)len);
        if (!req->no_body && len)
                evbuffer_add(sp__http_conn_output(c), body, len);
        finish(req); /* may drop the last reference to req */
        sp__http_conn_api_leave(c);
        return 0;
}

int sp_http_reply_json(sp_http_request *req, int status, json_object *obj)
{
        const char *text = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        return sp_http_reply(req, status, "application/json", text, strlen(text));
}

/* Answers status with the error shape for (code, message). */
static int reply_error(sp_http_request *req, int status, sp_errc code, const char *message)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_error_shape_encode(&b, code, message, NULL) < 0)
                abort();
        return sp_http_reply(req, status, "application/json", b.data, b.len);
}

int sp__http_reply_status_error(sp_http_request *req, int status, sp_errc code, const char *message, const char *allow,
                                bool close)
{
        int r = can_answer(req);
        if (r < 0)
                return r;
        if (close)
                req->keep_alive = false;
        if (allow)
                sp_http_response_header(req, "Allow", allow);
        return reply_error(req, status, code, message);
}

int sp_http_reply_error(sp_http_request *req, const sp_error *e)
{
        sp_errc code = e ? e->code : SP_E_INTERNAL;
        return reply_error(req, sp_errc_http_status(code), code, e ? e->message : "internal error");
}

int sp_http_reply_errorf(sp_http_request *req, sp_errc code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        va_end(ap);
        return reply_error(req, sp_errc_http_status(code), code, msg ? msg : sp_errc_name(code));
}

void sp__http_error_response(sp_buf *out, int status, sp_errc code, const char *message)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_error_shape_encode(&b, code, message, NULL) < 0)
                abort();
        sp_buf_appendf(out, NULL,
                       "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                       "Connection: close\r\n\r\n%s",
                       status, reason(status), b.len, b.data);
}

void sp__http_send_continue(sp_http_request *req)
{
        if (req->continue_sent || !req->conn || req->resp != SP__RESP_NONE ||
            !sp_http_parser_expect_continue(req->parser))
                return;
        req->continue_sent = true;
        sp__http_conn *c = req->conn;
        sp__http_conn_api_enter(c);
        evbuffer_add_printf(sp__http_conn_output(c), "HTTP/1.1 100 Continue\r\n\r\n");
        sp__http_conn_api_leave(c);
}

/* ---- streaming ---- */

int sp_http_stream_start(sp_http_request *req, int status, const char *content_type, int64_t content_length)
{
        int r = can_answer(req);
        if (r < 0)
                return r;
        if (status < 200 || status > 599 || content_length < -1 ||
            (content_type && !sp__http_header_value_ok(content_type)))
                return -SP_E_INVALID;
        sp__http_conn *c = req->conn;
        sp__http_conn_api_enter(c);
        write_head(req, status, content_type, content_length);
        req->resp = SP__RESP_STREAM;
        sp__http_conn_api_leave(c);
        return 0;
}

void sp_http_stream_on_writable(sp_http_request *req, sp_http_writable_cb cb, void *userdata)
{
        req->on_writable = cb;
        req->on_writable_ud = userdata;
}

int sp_http_stream_write(sp_http_request *req, const void *data, size_t len)
{
        if (req->resp != SP__RESP_STREAM)
                return req->resp == SP__RESP_DONE ? -SP_E_CONFLICT : -SP_E_INVALID;
        if (!req->conn)
                return -SP_E_UNAVAILABLE;
        if (len > SP_HTTP_WRITE_MAX || (len && !data))
                return -SP_E_INVALID;
        if (req->has_length && len > req->length_left)
                return -SP_E_INVALID;
        sp__http_conn *c = req->conn;
        struct evbuffer *out = sp__http_conn_output(c);
        if (evbuffer_get_length(out) >= c->srv->cfg.high_watermark) {
                req->want_writable = true;
                return SP_HTTP_WOULD_BLOCK;
        }
        if (len == 0 || req->no_body)
                return 0;
        sp__http_conn_api_enter(c);
        if (req->chunked)
                evbuffer_add_printf(out, "%zx\r\n", len);
        evbuffer_add(out, data, len);
        if (req->chunked)
                evbuffer_add(out, "\r\n", 2);
        if (req->has_length)
                req->length_left -= len;
        sp__http_conn_api_leave(c);
        return 0;
}

int sp_http_stream_write_buffer(sp_http_request *req, struct evbuffer *buf)
{
        if (req->resp != SP__RESP_STREAM)
                return req->resp == SP__RESP_DONE ? -SP_E_CONFLICT : -SP_E_INVALID;
        if (!req->conn)
                return -SP_E_UNAVAILABLE;
        size_t len = buf ? evbuffer_get_length(buf) : 0;
        if (len > SP_HTTP_WRITE_MAX || (req->has_length && len > req->length_left))
                return -SP_E_INVALID;
        sp__http_conn *c = req->conn;
        struct evbuffer *out = sp__http_conn_output(c);
        if (evbuffer_get_length(out) >= c->srv->cfg.high_watermark) {
                req->want_writable = true;
                return SP_HTTP_WOULD_BLOCK;
        }
        if (len == 0)
                return 0;
        if (req->no_body) {
                evbuffer_drain(buf, len);
                return 0;
        }
        sp__http_conn_api_enter(c);
        if (req->chunked)
                evbuffer_add_printf(out, "%zx\r\n", len);
        evbuffer_add_buffer(out, buf);
        if (req->chunked)
                evbuffer_add(out, "\r\n", 2);
        if (req->has_length)
                req->length_left -= len;
        sp__http_conn_api_leave(c);
        return 0;
}

int sp_http_stream_end(sp_http_request *req)
{
        if (req->resp != SP__RESP_STREAM)
                return req->resp == SP__RESP_DONE ? -SP_E_CONFLICT : -SP_E_INVALID;
        if (!req->conn) {
                req->resp = SP__RESP_DONE;
                return -SP_E_UNAVAILABLE;
        }
        sp__http_conn *c = req->conn;
        sp__http_conn_api_enter(c);
        if (req->chunked)
                evbuffer_add(sp__http_conn_output(c), "0\r\n\r\n", 5);
        if ((req->has_length && req->length_left > 0) || req->until_close)
                req->keep_alive = false; /* the client cannot tell where the body ends otherwise */
        finish(req);
        sp__http_conn_api_leave(c);
        return 0;
}
