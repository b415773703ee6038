/* SPDX-License-Identifier: Apache-2.0 */
/* Server-sent events on top of streamed responses. */
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

#define SSE_EVENT_MAX (1024 * 1024)
#define SSE_FIELD_MAX 1024

struct sp_sse {
        sp_http_request *req;
        sp_sse_cb on_writable, on_close;
        void *writable_ud, *close_ud;
        sp_buf scratch;
};

static void writable_cb(sp_http_request *req, void *userdata)
{
        sp_sse *sse = userdata;
        if (sse->on_writable)
                sse->on_writable(sse, sse->writable_ud);
}

static void close_cb(sp_http_request *req, void *userdata)
{
        sp_sse *sse = userdata;
        if (sse->on_close)
                sse->on_close(sse, sse->close_ud);
}

sp_sse *sp_sse_start(sp_http_request *req, sp_error **err)
{
        if (!req->conn) {
                sp_error_set(err, SP_E_UNAVAILABLE, "the client has gone");
                return NULL;
        }
        if (req->resp != SP__RESP_NONE) {
                sp_error_set(err, SP_E_CONFLICT, "the request was already answered");
                return NULL;
        }
        sp_http_response_header(req, "Cache-Control", "no-store");
        if (sp_http_stream_start(req, 200, "text/event-stream", -1) < 0) {
                sp_error_set(err, SP_E_INTERNAL, "cannot start the event stream");
                return NULL;
        }
        sp_sse *sse = calloc(1, sizeof(*sse));
        if (!sse)
                abort();
        sse->req = sp_http_request_ref(req);
        sp_http_stream_on_writable(req, writable_cb, sse);
        sp_http_request_on_close(req, close_cb, sse);
        return sse;
}

static bool field_ok(const char *s)
{
        return !s || (strlen(s) <= SSE_FIELD_MAX && strpbrk(s, "\r\n") == NULL);
}

/* Writes the formatted event in scratch as one stream write. */
static int flush(sp_sse *sse)
{
        int r = sp_http_stream_write(sse->req, sse->scratch.data, sse->scratch.len);
        sp_buf_clear(&sse->scratch);
        return r;
}

int sp_sse_send(sp_sse *sse, const char *id, const char *event, const void *data, size_t len)
{
        if (!field_ok(id) || !field_ok(event) || len > SSE_EVENT_MAX || (len && !data))
                return -SP_E_INVALID;
        if (!sse->req->conn)
                return -SP_E_UNAVAILABLE;
        sp_buf *b = &sse->scratch;
        sp_buf_clear(b);
        if (id)
                sp_buf_appendf(b, NULL, "id: %s\n", id);
        if (event)
                sp_buf_appendf(b, NULL, "event: %s\n", event);
        const char *s = data ? data : "", *end = s + len;
        for (;;) {
                const char *e = s;
                while (e < end && *e != '\r' && *e != '\n')
                        e++;
                sp_buf_append_str(b, "data: ", NULL);
                sp_buf_append(b, s, (size_t)(e - s), NULL);
                sp_buf_append(b, "\n", 1, NULL);
                if (e == end)
                        break;
                s = e + 1;
                if (*e == '\r' && s < end && *s == '\n')
                        s++;
        }
        sp_buf_append(b, "\n", 1, NULL);
        return flush(sse);
}

int sp_sse_comment(sp_sse *sse, const char *text)
{
        if (!text || !field_ok(text))
                return -SP_E_INVALID;
        sp_buf_clear(&sse->scratch);
        sp_buf_appendf(&sse->scratch, NULL, ": %s\n\n", text);
        return flush(sse);
}

int sp_sse_retry(sp_sse *sse, unsigned ms)
{
        sp_buf_clear(&sse->scratch);
        sp_buf_appendf(&sse->scratch, NULL, "retry: %u\n\n", ms);
        return flush(sse);
}

void sp_sse_on_writable(sp_sse *sse, sp_sse_cb cb, void *userdata)
{
        sse->on_writable = cb;
        sse->writable_ud = userdata;
}

void sp_sse_on_close(sp_sse *sse, sp_sse_cb cb, void *userdata)
{
        sse->on_close = cb;
        sse->close_ud = userdata;
}

sp_http_request *sp_sse_request(sp_sse *sse)
{
        return sse->req;
}

sp_sse *sp_sse_free(sp_sse *sse)
{
        if (!sse)
                return NULL;
        sp_http_request *req = sse->req;
        sp_http_stream_on_writable(req, NULL, NULL);
        sp_http_request_on_close(req, NULL, NULL);
        if (req->resp == SP__RESP_STREAM)
                sp_http_stream_end(req);
        sp_http_request_unref(req);
        sp_buf_free(&sse->scratch);
        free(sse);
        return NULL;
}
