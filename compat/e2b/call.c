/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Calls (see call.h): a request's translation on a thread of its own, its
 * answer carried back to the loop through a bounded buffer.
 */
#include "call.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/id.h"
#include "space/log.h"

#define OUT_HIGH (1024 * 1024) /* a writing thread blocks above this */
#define IN_HIGH (1024 * 1024) /* the client's body is paused above this */
#define IN_LOW (256 * 1024) /* ... and resumed below this */
#define WRITE_SLICE (256 * 1024)
#define THREAD_STACK (512 * 1024)

struct e2b_call {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        struct event *ev; /* activated by the thread: something to do on the loop */
        sp_http_request *req; /* the loop's reference; NULL once the request is done */
        e2b_req r;
        e2b_call_fn fn;
        void *userdata;
        bool stream_body;
        /* the answer */
        bool head_ready, head_sent, whole, out_end, finished;
        int status;
        char *content_type;
        char **headers;
        int64_t content_length;
        sp_buf out;
        /* the request body */
        sp_buf in;
        bool in_eof, in_paused;
        /* lifetime */
        bool gone, thread_done;
        int answered; /* the status sent to the client; 0: none yet */
        e2b_caps *caps; /* gives back the call's unit when it is freed */
        e2b_call_count count;
};

static void req_free(e2b_req *r)
{
        char **fields[] = {&r->method,
                           &r->path,
                           &r->id,
                           &r->api_key,
                           &r->sandbox_id,
                           &r->access_token,
                           &r->authorization,
                           &r->connect_timeout_ms,
                           &r->content_type,
                           &r->content_encoding,
                           &r->q_path,
                           &r->q_username,
                           &r->q_metadata,
                           &r->q_state,
                           &r->q_limit,
                           &r->q_next_token,
                           &r->q_start,
                           &r->q_signature,
                           &r->q_signature_expiration,
                           &r->body};
        for (size_t i = 0; i < SP_ARRAY_SIZE(fields); i++) {
                free(*fields[i]);
                *fields[i] = NULL;
        }
}

static void strv_free(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

static char **strv_dup(const char *const *v)
{
        if (!v)
                return NULL;
        size_t n = 0;
        while (v[n])
                n++;
        char **d = calloc(n + 1, sizeof(*d));
        if (!d)
                abort();
        for (size_t i = 0; i < n; i++)
                if (!(d[i] = strdup(v[i])))
                        abort();
        return d;
}

static void call_free(e2b_call *c)
{
        if (c->ev)
                event_free(c->ev);
        if (c->req) {
                sp_http_request_on_close(c->req, NULL, NULL);
                sp_http_request_unref(c->req);
        }
        req_free(&c->r);
        free(c->content_type);
        strv_free(c->headers);
        sp_buf_free(&c->out);
        sp_buf_free(&c->in);
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        e2b_caps_give(c->caps, E2B_CAP_CALLS, c->r.caller);
        e2b_metrics_request(c->count.metrics, c->count.route, c->answered ? c->answered : E2B_METRICS_CLIENT_GONE);
        free(c);
}

/* Drops the loop's hold on the request once its answer is complete or the
 * client has gone. Called with the lock held. */
static void finish_locked(e2b_call *c)
{
        c->finished = true;
        if (c->req && c->stream_body && !c->in_eof)
                sp_http_request_pause_body(c->req); /* no body callback may reach a freed call */
        if (c->req) {
                sp_http_request_on_close(c->req, NULL, NULL);
                sp_http_request_unref(c->req);
                c->req = NULL;
        }
        pthread_cond_broadcast(&c->cv);
}

static void on_writable(sp_http_request *req, void *userdata);

/* Moves what the thread produced onto the connection. Lock held. */
static void pump_locked(e2b_call *c)
{
        if (c->finished || c->gone)
                return;
        if (c->head_ready && !c->head_sent) {
                c->head_sent = true;
                for (size_t i = 0; c->headers && c->headers[i]; i++) {
                        char *colon = strchr(c->headers[i], ':');
                        if (!colon)
                                continue;
                        *colon = '\0';
                        const char *v = colon + 1;
                        while (*v == ' ')
                                v++;
                        sp_http_response_header(c->req, c->headers[i], v);
                        *colon = ':';
                }
                c->answered = c->status;
                if (c->whole) {
                        sp_http_reply(c->req, c->status, c->content_type, c->out.data ? c->out.data : "", c->out.len);
                        sp_buf_clear(&c->out);
                        finish_locked(c);
                        return;
                }
                if (sp_http_stream_start(c->req, c->status, c->content_type, c->content_length) < 0) {
                        c->gone = true;
                        finish_locked(c);
                        return;
                }
        }
        if (!c->head_sent)
                return;
        while (c->out.len > 0) {
                size_t n = c->out.len < WRITE_SLICE ? c->out.len : WRITE_SLICE;
                int r = sp_http_stream_write(c->req, c->out.data, n);
                if (r == SP_HTTP_WOULD_BLOCK) {
                        sp_http_stream_on_writable(c->req, on_writable, c);
                        return;
                }
                if (r < 0) {
                        c->gone = true;
                        finish_locked(c);
                        return;
                }
                sp_buf_consume(&c->out, n);
                pthread_cond_broadcast(&c->cv);
        }
        if (c->out_end) {
                sp_http_stream_end(c->req);
                finish_locked(c);
        }
}

/* Runs on the loop after each activation, writable or close: does what is
 * due and frees the call once nobody needs it. */
static void service(e2b_call *c)
{
        pthread_mutex_lock(&c->mu);
        pump_locked(c);
        if (c->req && c->in_paused && c->in.len < IN_LOW && !c->gone) {
                c->in_paused = false;
                sp_http_request_resume_body(c->req);
        }
        if (c->thread_done && !c->finished && !c->head_ready && !c->gone) {
                c->answered = 500;
                sp_http_reply_errorf(c->req, SP_E_INTERNAL, "the request was not answered");
                finish_locked(c);
        }
        if (c->thread_done && c->head_sent && !c->whole && !c->out_end && !c->finished && c->out.len == 0) {
                /* The thread ended a stream without completing it: cut the connection. */
                c->gone = true;
                finish_locked(c);
        }
        bool release = c->thread_done && (c->finished || c->gone);
        if (release && !c->finished)
                finish_locked(c);
        pthread_mutex_unlock(&c->mu);
        if (release)
                call_free(c);
}

static void on_event(evutil_socket_t fd, short what, void *userdata)
{
        (void)fd;
        (void)what;
        service(userdata);
}

static void on_writable(sp_http_request *req, void *userdata)
{
        (void)req;
        service(userdata);
}

static void on_close(sp_http_request *req, void *userdata)
{
        (void)req;
        e2b_call *c = userdata;
        pthread_mutex_lock(&c->mu);
        c->gone = true;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        service(c);
}

static void on_body(sp_http_request *req, const void *data, size_t len, void *userdata)
{
        e2b_call *c = userdata;
        pthread_mutex_lock(&c->mu);
        if (len == 0)
                c->in_eof = true;
        else
                sp_buf_append(&c->in, data, len, NULL);
        if (c->in.len > IN_HIGH && !c->in_paused) {
                c->in_paused = true;
                sp_http_request_pause_body(req);
        }
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
}

/* Wakes the loop for this call. Lock held (the loop frees the call only
 * under the lock, after the thread is done). */
static void notify_locked(e2b_call *c)
{
        event_active(c->ev, EV_READ, 0);
}

static void *thread_main(void *userdata)
{
        e2b_call *c = userdata;
        c->fn(c, c->userdata);
        pthread_mutex_lock(&c->mu);
        c->thread_done = true;
        notify_locked(c);
        pthread_mutex_unlock(&c->mu);
        return NULL;
}

static char *dup_or_null(const char *s)
{
        if (!s)
                return NULL;
        char *d = strdup(s);
        if (!d)
                abort();
        return d;
}

/* The sandbox an envd host names: E2B's "<port>-<sandbox id>.<domain>" (what
 * the SDK dials without E2B_SANDBOX_URL), or NULL. */
char *e2b_host_sandbox(const char *host)
{
        if (!host)
                return NULL;
        size_t digits = strspn(host, "0123456789");
        if (digits == 0 || digits > 5 || host[digits] != '-')
                return NULL;
        const char *id = host + digits + 1;
        size_t n = strcspn(id, ".:");
        if (id[n] != '.' || n == 0 || n >= SP_ID_MAX)
                return NULL;
        char buf[SP_ID_MAX];
        memcpy(buf, id, n);
        buf[n] = '\0';
        return sp_id_valid(buf, "sbx") ? dup_or_null(buf) : NULL;
}

static void req_copy(e2b_req *r, sp_http_request *req)
{
        r->method = dup_or_null(sp_http_request_method(req));
        r->path = dup_or_null(sp_http_request_path(req));
        r->id = dup_or_null(sp_http_request_param(req, "id"));
        r->api_key = dup_or_null(sp_http_request_header(req, "X-API-KEY"));
        r->sandbox_id = dup_or_null(sp_http_request_header(req, "E2b-Sandbox-Id"));
        if (!r->sandbox_id) /* SDKs that dial the sandbox's own host send no header */
                r->sandbox_id = e2b_host_sandbox(sp_http_request_header(req, "Host"));
        r->access_token = dup_or_null(sp_http_request_header(req, "X-Access-Token"));
        r->authorization = dup_or_null(sp_http_request_header(req, "Authorization"));
        r->connect_timeout_ms = dup_or_null(sp_http_request_header(req, "Connect-Timeout-Ms"));
        r->content_type = dup_or_null(sp_http_request_header(req, "Content-Type"));
        r->content_encoding = dup_or_null(sp_http_request_header(req, "Content-Encoding"));
        r->q_path = dup_or_null(sp_http_request_query(req, "path"));
        r->q_username = dup_or_null(sp_http_request_query(req, "username"));
        r->q_metadata = dup_or_null(sp_http_request_query(req, "metadata"));
        r->q_state = dup_or_null(sp_http_request_query(req, "state"));
        r->q_limit = dup_or_null(sp_http_request_query(req, "limit"));
        r->q_next_token = dup_or_null(sp_http_request_query(req, "nextToken"));
        r->q_start = dup_or_null(sp_http_request_query(req, "start"));
        r->q_signature = dup_or_null(sp_http_request_query(req, "signature"));
        r->q_signature_expiration = dup_or_null(sp_http_request_query(req, "signature_expiration"));
        size_t len = 0;
        const char *body = sp_http_request_body(req, &len);
        r->body = malloc(len + 1);
        if (!r->body)
                abort();
        memcpy(r->body, body, len);
        r->body[len] = '\0';
        r->body_len = len;
}

int e2b_call_start(struct event_base *base, sp_http_request *req, e2b_caps *caps, const char *caller, bool stream_body,
                   e2b_call_count count, e2b_call_fn fn, void *userdata, sp_error **err)
{
        if (e2b_caps_take(caps, E2B_CAP_CALLS, caller, err) < 0)
                return -1;
        e2b_call *c = calloc(1, sizeof(*c));
        if (!c)
                abort();
        c->caps = caps;
        snprintf(c->r.caller, sizeof(c->r.caller), "%s", caller);
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cv, NULL);
        c->fn = fn;
        c->userdata = userdata;
        c->stream_body = stream_body;
        c->content_length = -1;
        c->ev = event_new(base, -1, 0, on_event, c);
        if (!c->ev) {
                c->thread_done = true;
                call_free(c);
                return sp_error_set(err, SP_E_IO, "event_new failed");
        }
        req_copy(&c->r, req);
        c->req = sp_http_request_ref(req);
        sp_http_request_on_close(req, on_close, c);
        if (stream_body && sp_http_request_read_body(req, on_body, c, err) < 0) {
                c->thread_done = true;
                call_free(c);
                return -SP_E_INVALID;
        }
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, THREAD_STACK);
        pthread_t t;
        int r = pthread_create(&t, &attr, thread_main, c);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                c->thread_done = true;
                call_free(c);
                return sp_error_set_errno(err, SP_E_LIMIT, r, "cannot start a thread");
        }
        /* Only a call that started is counted here (the caller counts a
         * refusal); the loop frees it, so no one reads this before we return. */
        c->count = count;
        return 0;
}

const e2b_req *e2b_call_req(const e2b_call *call)
{
        return &call->r;
}

int e2b_call_reply(e2b_call *c, int status, const char *content_type, const char *const *headers, const void *body,
                   size_t len)
{
        pthread_mutex_lock(&c->mu);
        int r = -1;
        if (!c->gone && !c->head_ready) {
                c->head_ready = true;
                c->whole = true;
                c->status = status;
                c->content_type = dup_or_null(content_type);
                c->headers = strv_dup(headers);
                sp_buf_append(&c->out, body, len, NULL);
                notify_locked(c);
                r = 0;
        }
        pthread_mutex_unlock(&c->mu);
        return r;
}

int e2b_call_begin(e2b_call *c, int status, const char *content_type, const char *const *headers,
                   int64_t content_length)
{
        pthread_mutex_lock(&c->mu);
        int r = -1;
        if (!c->gone && !c->head_ready) {
                c->head_ready = true;
                c->status = status;
                c->content_type = dup_or_null(content_type);
                c->headers = strv_dup(headers);
                c->content_length = content_length;
                notify_locked(c);
                r = 0;
        }
        pthread_mutex_unlock(&c->mu);
        return r;
}

int e2b_call_write(e2b_call *c, const void *data, size_t len)
{
        pthread_mutex_lock(&c->mu);
        while (!c->gone && !c->finished && c->out.len >= OUT_HIGH)
                pthread_cond_wait(&c->cv, &c->mu);
        int r = -1;
        if (!c->gone && !c->finished && c->head_ready && !c->whole && !c->out_end) {
                sp_buf_append(&c->out, data, len, NULL);
                notify_locked(c);
                r = 0;
        }
        pthread_mutex_unlock(&c->mu);
        return r;
}

int e2b_call_end(e2b_call *c)
{
        pthread_mutex_lock(&c->mu);
        int r = -1;
        if (!c->gone && c->head_ready && !c->whole && !c->out_end) {
                c->out_end = true;
                notify_locked(c);
                r = 0;
        }
        pthread_mutex_unlock(&c->mu);
        return r;
}

bool e2b_call_connected(e2b_call *c)
{
        pthread_mutex_lock(&c->mu);
        bool ok = !c->gone;
        pthread_mutex_unlock(&c->mu);
        return ok;
}

ssize_t e2b_call_read(e2b_call *c, void *buf, size_t cap, sp_error **err)
{
        pthread_mutex_lock(&c->mu);
        while (!c->gone && c->in.len == 0 && !c->in_eof)
                pthread_cond_wait(&c->cv, &c->mu);
        ssize_t r;
        if (c->in.len > 0) {
                size_t n = c->in.len < cap ? c->in.len : cap;
                memcpy(buf, c->in.data, n);
                sp_buf_consume(&c->in, n);
                if (c->in_paused && c->in.len < IN_LOW)
                        notify_locked(c);
                r = (ssize_t)n;
        } else if (c->in_eof) {
                r = 0;
        } else {
                r = sp_error_set(err, SP_E_UNAVAILABLE, "the client went away during the upload");
        }
        pthread_mutex_unlock(&c->mu);
        return r;
}
