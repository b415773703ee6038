/* SPDX-License-Identifier: Apache-2.0 */
/* Requests: lifetime, accessors and streamed request bodies. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

sp_http_request *sp__http_request_new(sp__http_conn *conn)
{
        sp_http_request *req = calloc(1, sizeof(*req));
        if (!req)
                abort();
        req->refs = 1;
        req->internal_refs = 1;
        req->conn = conn;
        req->parser = sp_http_parser_new(&conn->srv->cfg.limits);
        memcpy(req->remote, conn->remote, sizeof(req->remote));
        req->keep_alive = true;
        req->extra.limit = SP_HTTP_EXTRA_HEADERS_MAX;
        return req;
}

sp_http_request *sp_http_request_ref(sp_http_request *req)
{
        req->refs++;
        return req;
}

void sp_http_request_unref(sp_http_request *req)
{
        if (!req || --req->refs > 0)
                return;
        sp_http_parser_free(req->parser);
        for (size_t i = 0; i < req->nparams; i++) {
                free(req->params[i].name);
                free(req->params[i].value);
        }
        free(req->params);
        sp_buf_free(&req->body);
        sp_buf_free(&req->extra);
        free(req);
}

void sp__http_request_detach(sp_http_request *req)
{
        if (!req->conn)
                return;
        req->conn = NULL;
        req->want_writable = false;
        if (req->resp != SP__RESP_DONE && req->on_close) {
                sp_http_close_cb cb = req->on_close;
                req->on_close = NULL;
                sp__http_request_hold(req);
                cb(req, req->on_close_ud);
                sp__http_request_release(req);
        }
}

static bool id_sane(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n >= SP_HTTP_REQUEST_ID_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("._:-", c)))
                        return false;
        }
        return true;
}

const char *sp_http_request_id(const sp_http_request *req)
{
        /* Decided on first use: the request exists before its headers do. */
        sp_http_request *r = (sp_http_request *)req;
        if (!r->id[0]) {
                const char *given = sp_http_parser_header(r->parser, "x-request-id");
                if (given && id_sane(given)) {
                        memcpy(r->id, given, strlen(given) + 1);
                } else if (sp_id_new("req", r->id, NULL) < 0) {
                        memcpy(r->id, "req_unknown", sizeof("req_unknown"));
                }
        }
        return r->id;
}

const char *sp_http_request_method(const sp_http_request *req)
{
        return sp_http_parser_method(req->parser);
}

const char *sp_http_request_path(const sp_http_request *req)
{
        return sp_http_parser_path(req->parser);
}

const char *sp_http_request_param(const sp_http_request *req, const char *name)
{
        for (size_t i = 0; i < req->nparams; i++)
                if (strcmp(req->params[i].name, name) == 0)
                        return req->params[i].value;
        return NULL;
}

const char *sp_http_request_query(const sp_http_request *req, const char *name)
{
        return sp_http_parser_query(req->parser, name);
}

const char *sp_http_request_header(const sp_http_request *req, const char *name)
{
        return sp_http_parser_header(req->parser, name);
}

const char *sp_http_request_body(const sp_http_request *req, size_t *ret_len)
{
        if (ret_len)
                *ret_len = req->body.len;
        return req->body.data ? req->body.data : "";
}

const char *sp_http_request_remote(const sp_http_request *req)
{
        return req->remote;
}

const sp_http_parser *sp_http_request_parser(const sp_http_request *req)
{
        return req->parser;
}

bool sp_http_request_connected(const sp_http_request *req)
{
        return req->conn != NULL;
}

bool sp_http_request_peer_closed(const sp_http_request *req)
{
        return !req->conn || req->conn->peer_eof;
}

size_t sp_http_request_output_pending(const sp_http_request *req)
{
        return req->conn ? evbuffer_get_length(sp__http_conn_output(req->conn)) : 0;
}

void sp_http_request_on_close(sp_http_request *req, sp_http_close_cb cb, void *userdata)
{
        req->on_close = cb;
        req->on_close_ud = userdata;
}

int sp_http_request_read_body(sp_http_request *req, sp_http_body_cb cb, void *userdata, sp_error **err)
{
        if (!req->streamed || req->on_body || !cb)
                return sp_error_set(err, SP_E_INVALID, "request body is not streamed, or already being read");
        req->on_body = cb;
        req->on_body_ud = userdata;
        if (req->conn && req->resp == SP__RESP_NONE) {
                sp__http_send_continue(req);
                sp__http_conn_body_progress(req->conn);
                sp__http_conn_kick(req->conn);
        }
        return 0;
}

void sp_http_request_pause_body(sp_http_request *req)
{
        if (req->paused || req->body_done)
                return;
        req->paused = true;
        if (req->conn)
                sp__http_conn_timer_stop(req->conn);
}

void sp_http_request_resume_body(sp_http_request *req)
{
        if (!req->paused)
                return;
        req->paused = false;
        if (req->conn && req->on_body && !req->body_done) {
                sp__http_conn_body_progress(req->conn);
                sp__http_conn_kick(req->conn);
        }
}
