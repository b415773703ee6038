/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingress, the relay (ingress.h): one client request to one ConnectPort call.
 *
 *   resolve   the sandbox's tenant, state, worker and mode (cluster/resolve.h)
 *   access    public, or an ingress token of this sandbox (its tenant's)
 *   connect   ConnectPort on the sandbox's worker; "connected" or an error
 *   request   the head (ingress_request_head) and the body, streamed, paused
 *             while the call's send queue is full
 *   response  the server's bytes through a response parser: its head becomes
 *             the client's (this server's own framing), its body is written
 *             as it comes, paused while the client's connection is full;
 *             a 101 switches both sides to raw bytes (a WebSocket)
 *
 * The server in the sandbox gets "Connection: close": one call per request,
 * ended when the response is; the client's connection stays open for its
 * next request. Nothing is held but one frame or chunk in each direction.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cluster/resolve.h"
#include "dp.h"
#include "ingress/ingress.h"
#include "route/routes.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/http_client.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define CHUNK 65536
#define WAKE_POLL_MS 200
/* The path form serves every sandbox from the data plane's own origin: its
 * pages run as an opaque origin (no cookies, storage or service workers of
 * the data plane's, none of another sandbox's). The host form, an origin per
 * sandbox and port, is the one for browsers. */
#define PATH_FORM_CSP "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"

typedef struct relay {
        dp *d;
        sp_http_request *req;
        dp_ingress_target t;
        dp_claims claims; /* tenant and worker: for the stream slot and the log */
        dp_resolve *lookup;
        char *token;
        dp_ingress_token_src token_src;
        char token_tenant[DP_CLAIM_ID_MAX + 1]; /* the verified token's tenant */
        char token_akey[DP_CLAIM_ID_MAX + 1]; /* and the API key that minted it ("" if none) */
        bool admitted;
        sp_rpc_stream *rpc; /* NULL once ended or cancelled */
        bool connected, upgrade_asked;
        bool own_origin; /* the answer goes to an origin of the sandbox's own: the host form, or a forwarder */
        /* request */
        bool chunked_up, body_reading, body_done, body_paused;
        /* Toward the server: what the call could not take yet (at most one
         * body chunk or raw read and its framing: the source is paused). */
        sp_buf up_pending;
        bool up_blocked; /* the call's queue is at its watermark: until on_writable */
        /* response */
        sp_http_response_parser *rp;
        sp_buf in; /* the server's bytes not yet fed to the parser */
        sp_buf out; /* body bytes parsed, not yet taken by the client's connection */
        bool head_sent, resp_done, server_eof, rpc_paused;
        bool upgraded, client_eof_sent, client_eof_due;
        int status;
        bool finished; /* answered and counted */
        /* Until the server's head: every second, whether the client is still
         * there and whether the request moved (or was answered) within
         * --ingress-answer-ms; last_progress_us is the last byte sent up. */
        struct event *watchdog;
        int64_t last_progress_us;
        /* Waking the sandbox (auto_resume): asked once, then looked up each
         * WAKE_POLL_MS until it runs or --ingress-wake-ms passed. */
        bool wake_asked, looked_again;
        bool wait_share; /* holds one of the tenant's streams while it waits */
        int64_t wake_deadline_us;
        struct event *wake_timer;
} relay;

static void relay_free(relay *r)
{
        if (r->watchdog)
                event_free(r->watchdog);
        if (r->wake_timer)
                event_free(r->wake_timer);
        if (r->lookup)
                dp_resolve_cancel(r->lookup);
        if (r->rpc)
                sp_rpc_stream_cancel(r->rpc);
        if (r->admitted)
                dp__stream_release(r->d, &r->claims);
        if (r->wait_share)
                sp_shares_give(r->d->streams, r->claims.tenant);
        if (!r->upgraded) {
                sp_http_request_on_close(r->req, NULL, NULL);
                sp_http_stream_on_writable(r->req, NULL, NULL);
        }
        sp_http_request_unref(r->req);
        sp_http_response_parser_free(r->rp);
        sp_buf_free(&r->in);
        sp_buf_free(&r->out);
        sp_buf_free(&r->up_pending);
        free(r->token);
        free(r);
}

static bool wants_html(const sp_http_request *req)
{
        const char *a = sp_http_request_header(req, "Accept");
        return a && strstr(a, "text/html");
}

static void html_escaped(sp_buf *page, const char *s)
{
        for (const char *p = s; *p; p++) {
                switch (*p) {
                case '<':
                        sp_buf_append(page, "&lt;", 4, NULL);
                        break;
                case '>':
                        sp_buf_append(page, "&gt;", 4, NULL);
                        break;
                case '&':
                        sp_buf_append(page, "&amp;", 5, NULL);
                        break;
                case '"':
                        sp_buf_append(page, "&quot;", 6, NULL);
                        break;
                default:
                        sp_buf_append(page, p, 1, NULL);
                }
        }
}

/* An answer before the response started, with a status of a gateway's own
 * (502, 504: code bad_gateway, gateway_timeout) or the error's: a page for a
 * browser (hint: a second paragraph, may be NULL), else the one error shape. */
static void fail_status(relay *r, const sp_error *e, int status, const char *code, const char *hint)
{
        if (!status)
                status = sp_errc_http_status(e->code);
        if (wants_html(r->req)) {
                _cleanup_buf_ sp_buf page = SP_BUF_INIT;
                sp_buf_appendf(&page, NULL,
                               "<!doctype html><html><head><meta charset=\"utf-8\"><title>%d</title></head>"
                               "<body><h1>%d</h1><p>",
                               status, status);
                html_escaped(&page, e->message);
                sp_buf_append(&page, "</p>", 4, NULL);
                if (hint) {
                        sp_buf_append(&page, "<p>", 3, NULL);
                        html_escaped(&page, hint);
                        sp_buf_append(&page, "</p>", 4, NULL);
                }
                sp_buf_append(&page, "</body></html>\n", 15, NULL);
                sp_http_reply(r->req, status, "text/html; charset=utf-8", page.data, page.len);
        } else if (code) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object *eo = json_object_new_object();
                json_object_object_add(eo, "code", json_object_new_string(code));
                json_object_object_add(eo, "message", json_object_new_string(e->message));
                json_object_object_add(o, "error", eo);
                sp_http_reply_json(r->req, status, o);
        } else {
                sp_http_reply_error(r->req, e);
        }
        dp__answered(r->d, r->req, DP_ROUTE_INGRESS, &r->claims, status, e->message);
        r->finished = true;
        relay_free(r);
}

static void fail_early(relay *r, const sp_error *e)
{
        fail_status(r, e, 0, NULL, NULL);
}

static void fail_earlyf(relay *r, sp_errc code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail_earlyf(relay *r, sp_errc code, const char *fmt, ...)
{
        _cleanup_error_ sp_error *e = NULL;
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        sp_error_set(&e, code, "%s", msg);
        fail_early(r, e);
}

/* The response started and cannot be finished: ending short closes the
 * connection, which the client sees as a truncated answer. */
static void abort_started(relay *r, const char *why)
{
        if (r->upgraded) {
                sp_http_raw_close(r->req); /* on_close frees */
                return;
        }
        dp__answered(r->d, r->req, DP_ROUTE_INGRESS, &r->claims, r->status, why);
        r->finished = true;
        sp_http_stream_end(r->req);
        relay_free(r);
}

/* The server's answer is complete. */
static void finish(relay *r)
{
        dp__answered(r->d, r->req, DP_ROUTE_INGRESS, &r->claims, r->status, "relayed");
        r->finished = true;
        sp_http_stream_end(r->req);
        relay_free(r);
}

/* ---- response: the server's bytes to the client ---- */

static bool flush_out(relay *r)
{
        if (!r->out.len)
                return true;
        int w = sp_http_stream_write(r->req, r->out.data, r->out.len);
        if (w == SP_HTTP_WOULD_BLOCK)
                return false;
        r->d->metrics.ingress_bytes_out += r->out.len;
        sp_buf_clear(&r->out);
        return true;
}

static void raw_data(sp_http_request *req, const void *data, size_t len, void *ud);
static void raw_eof(sp_http_request *req, void *ud);
static void raw_writable(sp_http_request *req, void *ud);
static void raw_close(sp_http_request *req, void *ud);

/* The server answered 101 to an upgrade: both sides become raw bytes. */
static void start_raw(relay *r)
{
        size_t n = sp_http_response_parser_header_count(r->rp);
        const char **h = calloc(2 * n + 1, sizeof(char *));
        if (!h) {
                fail_earlyf(r, SP_E_LIMIT, "out of memory");
                return;
        }
        size_t k = 0;
        /* Rewritten cookies are kept until the answer is written. */
        sp_buf *kept = calloc(n ? n : 1, sizeof(sp_buf));
        if (!kept) {
                free(h);
                fail_earlyf(r, SP_E_LIMIT, "out of memory");
                return;
        }
        for (size_t i = 0; i < n; i++) {
                const char *name, *value;
                if (!sp_http_response_parser_header_at(r->rp, i, &name, &value))
                        continue;
                /* Connection and Upgrade are the switch itself: passed. */
                if (sp_http_strcaseeq(name, "Connection") || sp_http_strcaseeq(name, "Upgrade")) {
                        h[k++] = name;
                        h[k++] = value;
                        continue;
                }
                const char *v = dp_ingress_response_header(name, value, r->own_origin, &kept[i]);
                if (!v)
                        continue;
                h[k++] = name;
                h[k++] = v;
        }
        h[k] = NULL;
        static const sp_http_raw_ops ops = {
                .on_data = raw_data, .on_eof = raw_eof, .on_writable = raw_writable, .on_close = raw_close};
        _cleanup_error_ sp_error *e = NULL;
        if (!r->own_origin)
                (void)sp_http_response_header(r->req, "Content-Security-Policy", PATH_FORM_CSP);
        int rc = sp_http_upgrade(r->req, 101, h, &ops, r, &e);
        for (size_t i = 0; i < n; i++)
                sp_buf_free(&kept[i]);
        free(kept);
        free(h);
        if (rc < 0) {
                fail_early(r, e);
                return;
        }
        r->upgraded = true;
        r->head_sent = true;
        r->status = 101; /* the watchdog now checks access each second (on_watchdog) */
        r->d->metrics.ingress_upgrades++;
        dp__answered(r->d, r->req, DP_ROUTE_INGRESS, &r->claims, 101, "upgraded");
        r->finished = true;
}

/* Starts the client's response from the server's head. */
static int start_response(relay *r)
{
        r->status = sp_http_response_parser_status(r->rp);
        if (r->status < 200 || r->status > 599) {
                /* (before any of its headers is added to the answer) */
                _cleanup_error_ sp_error *e = NULL;
                sp_error_set(&e, SP_E_UNAVAILABLE, "the server in the sandbox answered status %d", r->status);
                fail_early(r, e);
                return -1;
        }
        const char *ctype = NULL;
        size_t n = sp_http_response_parser_header_count(r->rp);
        for (size_t i = 0; i < n; i++) {
                const char *name, *value;
                if (!sp_http_response_parser_header_at(r->rp, i, &name, &value))
                        continue;
                if (sp_http_strcaseeq(name, "Content-Type")) {
                        ctype = value;
                        continue;
                }
                _cleanup_buf_ sp_buf buf = SP_BUF_INIT;
                const char *v = dp_ingress_response_header(name, value, r->own_origin, &buf);
                if (v)
                        (void)sp_http_response_header(r->req, name, v); /* over 8 KiB: left out */
        }
        if (r->token_src == DP_INGRESS_TOKEN_QUERY && r->t.by_host) {
                /* A browser given a link with the token keeps it for the
                 * page's other requests (this sandbox's host only). */
                char cookie[4200];
                snprintf(cookie, sizeof(cookie), "%s=%s; Path=/; HttpOnly; SameSite=Lax", DP_INGRESS_TOKEN_COOKIE,
                         r->token);
                (void)sp_http_response_header(r->req, "Set-Cookie", cookie);
        }
        if (!r->own_origin)
                (void)sp_http_response_header(r->req, "Content-Security-Policy", PATH_FORM_CSP);
        int64_t len = sp_http_response_parser_content_length(r->rp);
        bool no_body = strcmp(sp_http_request_method(r->req), "HEAD") == 0 || r->status == 204 || r->status == 304;
        if (sp_http_response_parser_chunked(r->rp) || len < 0)
                len = -1;
        if (no_body)
                len = 0;
        sp_http_stream_start(r->req, r->status, ctype, no_body ? 0 : len);
        r->head_sent = true;
        if (r->watchdog)
                event_del(r->watchdog);
        return 0;
}

/* Feeds the server's bytes to the parser while the client takes the body.
 * Returns false when r was freed. */
static bool pump_response(relay *r)
{
        while (!r->resp_done) {
                if (!flush_out(r)) {
                        if (r->rpc && !r->rpc_paused) {
                                sp_rpc_stream_pause(r->rpc);
                                r->rpc_paused = true;
                        }
                        return true;
                }
                if (!r->in.len && !r->server_eof)
                        break;
                size_t used = 0;
                const char *body = NULL;
                size_t body_len = 0;
                sp_http_parse_event ev;
                if (r->in.len)
                        ev = sp_http_response_parser_feed(r->rp, r->in.data, r->in.len, &used, &body, &body_len);
                else
                        ev = sp_http_response_parser_eof(r->rp);
                if (ev == SP_HTTP_PARSE_ERROR) {
                        const char *why = sp_http_response_parser_error(r->rp);
                        if (!r->head_sent) {
                                fail_earlyf(r, SP_E_UNAVAILABLE, "the server in the sandbox sent a bad answer: %s",
                                            why ? why : "malformed");
                                return false;
                        }
                        abort_started(r, "the server's answer broke off");
                        return false;
                }
                if (ev == SP_HTTP_PARSE_BODY && body_len)
                        sp_buf_append(&r->out, body, body_len, NULL);
                sp_buf_consume(&r->in, used);
                if (ev == SP_HTTP_PARSE_HEAD) {
                        int status = sp_http_response_parser_status(r->rp);
                        if (status == 101 && r->upgrade_asked) {
                                start_raw(r);
                                if (!r->upgraded)
                                        return false; /* freed */
                                /* What came after the head is already the new protocol's. */
                                if (r->in.len) {
                                        r->d->metrics.ingress_bytes_out += r->in.len;
                                        if (sp_http_raw_write(r->req, r->in.data, r->in.len) == SP_HTTP_WOULD_BLOCK &&
                                            r->rpc) {
                                                sp_rpc_stream_pause(r->rpc);
                                                r->rpc_paused = true;
                                        }
                                        sp_buf_clear(&r->in);
                                }
                                return true;
                        }
                        if (start_response(r) < 0)
                                return false;
                } else if (ev == SP_HTTP_PARSE_DONE) {
                        r->resp_done = true;
                } else if (ev == SP_HTTP_PARSE_AGAIN && r->server_eof && !r->in.len) {
                        break; /* the parser wants more and there is none: eof said what it had to */
                }
        }
        if (r->resp_done && flush_out(r)) {
                finish(r);
                return false;
        }
        if (r->rpc && r->rpc_paused && !r->out.len) {
                sp_rpc_stream_resume(r->rpc);
                r->rpc_paused = false;
        }
        return true;
}

static void client_writable(sp_http_request *req, void *ud)
{
        (void)req;
        pump_response(ud);
}

/* ---- request: the client's body to the server ---- */

/* Sends what the call takes now, in frames of at most CHUNK; keeps the rest
 * in up_pending once its queue is full (a send past the watermark would be
 * refused: nothing is ever dropped). */
static void send_frames(relay *r, const uint8_t *p, size_t n, size_t *ret_sent)
{
        size_t sent = 0;
        while (sent < n && r->rpc && !r->up_blocked) {
                size_t k = n - sent > CHUNK ? CHUNK : n - sent;
                int w = sp_rpc_stream_send(r->rpc, SP_RPC_FRAME_DATA, p + sent, k, NULL);
                if (w < 0) {
                        /* at the watermark already, or the call ended (its end says why) */
                        r->up_blocked = r->rpc != NULL;
                        break;
                }
                sent += k;
                r->d->metrics.ingress_bytes_in += k;
                r->last_progress_us = sp_now_mono_us();
                if (w == 1)
                        r->up_blocked = true;
        }
        *ret_sent = sent;
}

static void send_up(relay *r, const void *p, size_t n)
{
        size_t sent = 0;
        if (!r->up_pending.len)
                send_frames(r, p, n, &sent);
        if (sent < n && r->rpc)
                sp_buf_append(&r->up_pending, (const char *)p + sent, n - sent, NULL);
}

/* The call took what was queued: what waits goes now. True when nothing waits. */
static bool flush_up(relay *r)
{
        r->up_blocked = false;
        size_t sent = 0;
        send_frames(r, (const uint8_t *)r->up_pending.data, r->up_pending.len, &sent);
        sp_buf_consume(&r->up_pending, sent);
        return r->up_pending.len == 0 && !r->up_blocked;
}

static void on_body(sp_http_request *req, const void *data, size_t len, void *ud)
{
        relay *r = ud;
        if (!r->rpc)
                return;
        if (len == 0) {
                if (r->chunked_up)
                        send_up(r, "0\r\n\r\n", 5);
                r->body_done = true;
                return;
        }
        if (r->chunked_up) {
                char size[24];
                int k = snprintf(size, sizeof(size), "%zx\r\n", len);
                send_up(r, size, (size_t)k);
                send_up(r, data, len);
                send_up(r, "\r\n", 2);
        } else {
                send_up(r, data, len);
        }
        if (r->up_blocked || r->up_pending.len) {
                sp_http_request_pause_body(req);
                r->body_paused = true;
        }
}

static void rpc_writable(sp_rpc_stream *s, void *ud)
{
        (void)s;
        relay *r = ud;
        if (!flush_up(r))
                return; /* still full: on_writable again */
        if (r->upgraded) {
                if (r->client_eof_due && !r->client_eof_sent && r->rpc) {
                        sp_rpc_stream_close_send(r->rpc, NULL);
                        r->client_eof_sent = true;
                        return;
                }
                sp_http_raw_resume(r->req);
                return;
        }
        if (r->body_paused) {
                r->body_paused = false;
                sp_http_request_resume_body(r->req);
        }
}

static void client_closed(sp_http_request *req, void *ud);

/* An upgraded connection (a WebSocket) whose access ended: closed both ways. */
static void access_ended(relay *r, const char *why)
{
        r->d->metrics.ingress_upgrades_ended++;
        sp_log_info_kv(
                SP_KV("request_id", sp_http_request_id(r->req), "sandbox_id", r->t.sandbox, "key_id", r->claims.kid),
                "ingress: closing an upgraded connection to port %u: %s", r->t.port, why);
        sp_http_raw_close(r->req); /* on_close frees */
}

static void rechecked(const dp_sandbox_info *info, const sp_error *err, void *ud)
{
        relay *r = ud;
        r->lookup = NULL;
        if (err && err->code == SP_E_NOT_FOUND)
                access_ended(r, "the sandbox is gone");
        else if (!err && !info->public_ && !r->token)
                access_ended(r, "the sandbox's ingress is token now, and this connection came without one");
}

/* Access is checked when a request comes, and for an upgraded connection
 * again each second while it lasts: a token whose API key was revoked, or a
 * public sandbox switched to token (seen within the resolver's cache time),
 * ends it. A token that expires does not: it was good when the connection
 * was made. */
static void recheck_access(relay *r)
{
        if (r->token) {
                if (r->token_akey[0] && r->d->revoked && dp_revoked_has(r->d->revoked, r->token_akey))
                        access_ended(r, "the API key that minted its token was revoked");
                return;
        }
        if (r->lookup)
                return;
        _cleanup_error_ sp_error *e = NULL;
        r->lookup = dp_resolver_lookup(r->d->resolver, r->t.sandbox, rechecked, r, &e);
}

/* The client went away (or half-closed) before its answer: counted as 499
 * and answered all the same, since only an answer written (or failing to
 * be) ends the connection — freed without one, it would stay open for
 * good, holding one of the data plane's connections. */
static void client_gone(relay *r)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_UNAVAILABLE, "the client went away");
        sp_http_reply_error(r->req, e);
        dp__answered(r->d, r->req, DP_ROUTE_INGRESS, &r->claims, 499, "the client went away");
        r->finished = true;
        relay_free(r);
}

/* Each second from the request's start until its answer starts: a client
 * that has gone (or half-closed: the two look the same until an answer is
 * written, and proxies take both for gone) is not waited for — also while
 * the sandbox is looked up or wakes; once the server was asked, a request
 * that has not moved for --ingress-answer-ms (a server that does not read
 * the body, or has it all and does not answer) is answered 504. After a
 * 101, the connection's access is checked again (recheck_access). */
static void on_watchdog(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        relay *r = ud;
        if (r->upgraded) {
                recheck_access(r);
                return;
        }
        if (r->head_sent)
                return;
        if (sp_http_request_peer_closed(r->req)) {
                client_gone(r);
                return;
        }
        if (!r->rpc)
                return; /* not asked yet: being looked up, or waking (its own deadline) */
        int64_t ms = r->d->limits.ingress_answer_ms;
        if (ms <= 0 || sp_now_mono_us() - r->last_progress_us < ms * SP_USEC_PER_MSEC)
                return;
        _cleanup_error_ sp_error *e = NULL;
        sp_error_set(&e, SP_E_TIMEOUT, "the server on port %u in sandbox %s did not answer within %lld ms", r->t.port,
                     r->t.sandbox, (long long)ms);
        fail_status(r, e, 504, "gateway_timeout", NULL);
}

/* The server in the sandbox is connected: the head, then the body. */
static void send_request(relay *r)
{
        const sp_http_parser *p = sp_http_request_parser(r->req);
        _cleanup_buf_ sp_buf head = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        const char *path = "/";
        if (r->t.by_host) {
                path = sp_http_parser_raw_path(p);
        } else {
                /* The path form: what follows the five segments the route
                 * matched (/v1/sandboxes/{id}/ports/{port}) in the raw path —
                 * segments split on raw '/' as the router splits them. */
                const char *after = sp_http_parser_raw_path(p);
                for (int i = 0; i < 5 && after; i++)
                        after = strchr(after + 1, '/');
                path = after ? after : "/";
        }
        /* The client's address without its port ("1.2.3.4:5", "[::1]:5"). */
        char ip[64];
        const char *remote = sp_http_request_remote(r->req);
        snprintf(ip, sizeof(ip), "%s", remote ? remote : "");
        char *colon = strrchr(ip, ':');
        if (ip[0] == '[' && strchr(ip, ']')) {
                *strchr(ip, ']') = '\0';
                memmove(ip, ip + 1, strlen(ip));
        } else if (colon && strchr(ip, ':') == colon) {
                *colon = '\0';
        }
        dp_ingress_head h = {.path = path, .client_addr = ip, .proto = "http", .upgrade = r->upgrade_asked};
        if (dp_ingress_request_head(p, &h, &head, &e) < 0) {
                fail_early(r, e);
                return;
        }
        send_up(r, head.data, head.len);
        r->chunked_up = sp_http_parser_chunked(p);
        if (sp_http_parser_chunked(p) || sp_http_parser_content_length(p) > 0) {
                if (sp_http_request_read_body(r->req, on_body, r, &e) < 0) {
                        fail_early(r, e);
                        return;
                }
                r->body_reading = true;
        } else {
                r->body_done = true;
        }
}

/* ---- the call ---- */

static void rpc_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)s;
        relay *r = ud;
        if (type == SP_RPC_FRAME_JSON) {
                _cleanup_json_ json_object *o = NULL;
                const char *ev = NULL;
                if (sp_json_parse((const char *)p, n, &o, NULL) < 0 ||
                    sp_json_get_string(o, "event", true, 32, &ev, NULL) < 0)
                        return;
                if (strcmp(ev, "connected") == 0 && !r->connected) {
                        r->connected = true;
                        send_request(r);
                } else if (strcmp(ev, "eof") == 0) {
                        r->server_eof = true;
                        if (r->upgraded)
                                sp_http_raw_shutdown_write(r->req);
                        else
                                pump_response(r);
                }
                return;
        }
        if (type != SP_RPC_FRAME_DATA || !n)
                return;
        if (r->upgraded) {
                r->d->metrics.ingress_bytes_out += n;
                if (sp_http_raw_write(r->req, p, n) == SP_HTTP_WOULD_BLOCK && r->rpc) {
                        sp_rpc_stream_pause(r->rpc);
                        r->rpc_paused = true;
                }
                return;
        }
        sp_buf_append(&r->in, p, n, NULL);
        pump_response(r);
}

static void resolved(const dp_sandbox_info *info, const sp_error *err, void *ud);

/* The worker did not have the sandbox running: back to before connect_port,
 * and the control plane asked where it is now. */
static void look_again(relay *r)
{
        _cleanup_error_ sp_error *e = NULL;
        r->looked_again = true;
        if (r->admitted) {
                dp__stream_release(r->d, &r->claims);
                r->admitted = false;
        }
        sp_http_stream_on_writable(r->req, NULL, NULL);
        r->lookup = dp_resolver_lookup(r->d->resolver, r->t.sandbox, resolved, r, &e);
        if (!r->lookup)
                fail_early(r, e);
}

static void rpc_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        (void)trailer;
        relay *r = ud;
        r->rpc = NULL;
        if (r->upgraded) {
                sp_http_raw_shutdown_write(r->req);
                if (err)
                        sp_http_raw_close(r->req);
                return;
        }
        if (!r->connected || !r->head_sent) {
                _cleanup_error_ sp_error *e = NULL;
                if (!err) {
                        sp_error_set(&e, SP_E_UNAVAILABLE, "the server on port %u closed without answering", r->t.port);
                } else if (err->code == SP_E_NOT_FOUND || err->code == SP_E_CONFLICT) {
                        /* The sandbox moved or changed since it was looked up
                         * (paused, suspended, gone from that worker): ask again,
                         * once, before anything of the request was sent — a
                         * sandbox with auto_resume is then woken. */
                        dp_resolver_forget(r->d->resolver, r->t.sandbox);
                        if (!r->connected && !r->looked_again) {
                                look_again(r);
                                return;
                        }
                        sp_error_set(&e, err->code, "%s", err->message);
                } else if (err->code == SP_E_UNAVAILABLE && strstr(err->message, "nothing listens")) {
                        /* 502: the sandbox is there, its server is not. */
                        r->d->metrics.ingress_no_listener++;
                        char hint[200];
                        snprintf(hint, sizeof(hint),
                                 "Start a server there on 0.0.0.0 or 127.0.0.1 port %u, and reload this page.",
                                 r->t.port);
                        fail_status(r, err, 502, "bad_gateway", hint);
                        return;
                } else {
                        e = dp__worker_error(r->d, &r->claims, "ConnectPort", err);
                }
                fail_early(r, e);
                return;
        }
        /* The call ended after the head: the server's bytes are all in. */
        r->server_eof = true;
        if (!pump_response(r))
                return;
        if (!r->resp_done)
                abort_started(r, err ? err->message : "the server's answer broke off");
}

/* ---- upgraded: raw bytes both ways ---- */

static void raw_data(sp_http_request *req, const void *data, size_t len, void *ud)
{
        relay *r = ud;
        if (!r->rpc)
                return;
        send_up(r, data, len);
        if (r->up_blocked || r->up_pending.len)
                sp_http_raw_pause(req);
}

static void raw_eof(sp_http_request *req, void *ud)
{
        (void)req;
        relay *r = ud;
        r->client_eof_due = true;
        if (r->rpc && !r->client_eof_sent && !r->up_pending.len) {
                sp_rpc_stream_close_send(r->rpc, NULL);
                r->client_eof_sent = true;
        }
}

static void raw_writable(sp_http_request *req, void *ud)
{
        (void)req;
        relay *r = ud;
        if (r->rpc && r->rpc_paused) {
                sp_rpc_stream_resume(r->rpc);
                r->rpc_paused = false;
        }
}

static void raw_close(sp_http_request *req, void *ud)
{
        (void)req;
        relay *r = ud;
        r->d->metrics.ingress_upgrades_closed++;
        relay_free(r);
}

/* ---- start ---- */

static void client_closed(sp_http_request *req, void *ud)
{
        relay *r = ud;
        if (!r->finished)
                dp__answered(r->d, req, DP_ROUTE_INGRESS, &r->claims, 499, "the client went away");
        r->finished = true;
        relay_free(r);
}

/* Whether the request asks to switch protocols (Connection: upgrade). */
static bool asks_upgrade(const sp_http_request *req)
{
        const char *c = sp_http_request_header(req, "Connection");
        if (!c || !sp_http_request_header(req, "Upgrade"))
                return false;
        for (const char *p = c; *p;) {
                while (*p == ' ' || *p == ',')
                        p++;
                size_t n = strcspn(p, ", ");
                if (n == 7 && strncasecmp(p, "upgrade", 7) == 0)
                        return true;
                p += n;
        }
        return false;
}

static void connect_port(relay *r)
{
        _cleanup_error_ sp_error *e = NULL;
        if (r->wait_share) { /* the wait is over: the relay takes its own */
                sp_shares_give(r->d->streams, r->claims.tenant);
                r->wait_share = false;
        }
        if (!dp__stream_admit(r->d, r->req, DP_ROUTE_INGRESS, &r->claims)) {
                r->finished = true;
                relay_free(r);
                return;
        }
        r->admitted = true;
        _cleanup_json_ json_object *q = json_object_new_object();
        json_object_object_add(q, "sandbox_id", json_object_new_string(r->t.sandbox));
        json_object_object_add(q, "port", json_object_new_int(r->t.port));
        static const sp_rpc_stream_ops ops = {.on_frame = rpc_frame, .on_writable = rpc_writable, .on_end = rpc_end};
        sp_rpc_client *cli = dp_pool_get(r->d->pool, r->claims.worker, r->claims.worker_name, &e);
        if (cli)
                r->rpc = sp_rpc_client_stream(cli, "ConnectPort", q, 0, &ops, r, &e);
        if (!r->rpc) {
                fail_early(r, e);
                return;
        }
        sp_http_stream_on_writable(r->req, client_writable, r);
        r->last_progress_us = sp_now_mono_us();
}

static int need_token(relay *r, sp_error **err)
{
        r->d->metrics.refusals[DP_REFUSE_MISSING]++;
        return sp_error_set(err, SP_E_UNAUTHENTICATED,
                            "sandbox %s's ports need an ingress token (header %s, or ?%s= once in a browser)",
                            r->t.sandbox, DP_INGRESS_TOKEN_HEADER, DP_INGRESS_TOKEN_PARAM);
}

/* The request's token, checked before anything is asked of the control
 * plane (so that a bad token answers the same for every sandbox, there or
 * not): verified, an ingress token, for this sandbox, its key not revoked.
 * Its tenant is matched against the sandbox's once that is known. */
static int verify_token(relay *r, sp_error **err)
{
        _cleanup_json_ json_object *claims =
                dp_keys_verify(r->d->keys, r->token, sp_now_real_us() / SP_USEC_PER_SEC, err);
        if (!claims) {
                dp_refusal why = dp_token_refusal(*err);
                r->d->metrics.refusals[why]++;
                if (why == DP_REFUSE_UNKNOWN_KEY && r->d->unknown_key)
                        r->d->unknown_key(r->d->unknown_key_userdata);
                return -SP_E_UNAUTHENTICATED;
        }
        dp_claims c;
        if (dp_claims_decode(claims, &c, err) < 0) {
                r->d->metrics.refusals[DP_REFUSE_CLAIMS]++;
                return -SP_E_UNAUTHENTICATED;
        }
        if (c.kind != DP_KIND_INGRESS) {
                r->d->metrics.refusals[DP_REFUSE_ROUTE]++;
                return sp_error_set(err, SP_E_PERMISSION, "token does not grant this route");
        }
        if (strcmp(c.sandbox, r->t.sandbox) != 0) {
                r->d->metrics.refusals[DP_REFUSE_SANDBOX]++;
                return sp_error_set(err, SP_E_PERMISSION, "token does not grant this sandbox");
        }
        sp_error *rev = dp__revoked(r->d, &c);
        if (rev) {
                r->d->metrics.refusals[DP_REFUSE_REVOKED]++;
                *err = rev;
                return -SP_E_UNAUTHENTICATED;
        }
        snprintf(r->claims.kid, sizeof(r->claims.kid), "%s", c.kid);
        snprintf(r->token_tenant, sizeof(r->token_tenant), "%s", c.tenant);
        snprintf(r->token_akey, sizeof(r->token_akey), "%s", c.akey);
        return 0;
}

static bool wait_for_wake(relay *r, const dp_sandbox_info *info);

static void resolved(const dp_sandbox_info *info, const sp_error *err, void *ud)
{
        relay *r = ud;
        r->lookup = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (err && err->code != SP_E_NOT_FOUND) {
                sp_error_set(&e, SP_E_UNAVAILABLE, "cannot find sandbox %s now: %s", r->t.sandbox, err->message);
                fail_early(r, e);
                return;
        }
        /* Without a token, a sandbox that is not there answers as one that
         * needs a token: nobody learns which ids exist (public sandboxes
         * aside, which answer anyone). With another tenant's token, as one
         * that is not there. */
        bool foreign = !err && r->token && strcmp(r->token_tenant, info->tenant) != 0;
        if (err || foreign) {
                if (!r->token)
                        need_token(r, &e);
                else
                        sp_error_set(&e, SP_E_NOT_FOUND, "sandbox %s not found", r->t.sandbox);
                if (foreign)
                        r->d->metrics.refusals[DP_REFUSE_SANDBOX]++;
                fail_early(r, e);
                return;
        }
        if (!info->public_ && !r->token) {
                need_token(r, &e);
                fail_early(r, e);
                return;
        }
        /* Ingress takes the tenant's streams under a key of its own: visitors
         * of a public sandbox must not use up its owner's attach and files. */
        snprintf(r->claims.tenant, sizeof(r->claims.tenant), "%.50s/ingress", info->tenant);
        snprintf(r->claims.worker, sizeof(r->claims.worker), "%s", info->worker);
        snprintf(r->claims.worker_name, sizeof(r->claims.worker_name), "%s", info->worker_name);
        if (strcmp(info->state, "running") != 0 || !info->worker[0]) {
                if (info->auto_resume && wait_for_wake(r, info))
                        return;
                fail_earlyf(r, SP_E_CONFLICT, "sandbox %s is %s: its ports answer once it runs", r->t.sandbox,
                            info->state);
                return;
        }
        connect_port(r);
}

static void on_wake_poll(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        relay *r = ud;
        _cleanup_error_ sp_error *e = NULL;
        r->lookup = dp_resolver_lookup_fresh(r->d->resolver, r->t.sandbox, WAKE_POLL_MS, resolved, r, &e);
        if (!r->lookup)
                fail_early(r, e);
}

/* A sandbox with auto_resume that does not run: the first time, the control
 * plane is asked to wake it (only now, once the request was let through:
 * a token for the sandbox, or public mode); then, while it is on its way,
 * asked again each WAKE_POLL_MS until it runs or --ingress-wake-ms passed
 * (504). False when there is nothing to wait for (the 409 stands): a
 * sandbox stopped, failed, or not asked back to running after the wake. */
static bool wait_for_wake(relay *r, const dp_sandbox_info *info)
{
        _cleanup_error_ sp_error *e = NULL;
        if (!r->wake_asked) {
                /* Only what a wake can bring back (and what is on its way):
                 * a stopped or failed sandbox is answered 409 without asking. */
                static const char *const wakeable[] = {"paused", "pausing", "suspended", "suspending", NULL};
                bool can = info->waking;
                for (size_t i = 0; !can && wakeable[i]; i++)
                        can = strcmp(info->state, wakeable[i]) == 0;
                if (!can)
                        return false;
                /* A waiting request holds one of the tenant's ingress streams,
                 * as a relayed one does: waiters are bounded per tenant. */
                if (sp_shares_take(r->d->streams, r->claims.tenant, "streams", &e) < 0) {
                        fail_early(r, e);
                        return true;
                }
                r->wait_share = true;
                r->wake_asked = true;
                r->wake_deadline_us = sp_now_mono_us() + r->d->limits.ingress_wake_ms * SP_USEC_PER_MSEC;
                r->d->metrics.ingress_wakes++;
                r->lookup = dp_resolver_wake(r->d->resolver, r->t.sandbox, !r->token, r->token_akey, resolved, r, &e);
                if (!r->lookup)
                        fail_early(r, e);
                return true;
        }
        if (!info->waking)
                return false;
        if (sp_now_mono_us() >= r->wake_deadline_us) {
                r->d->metrics.ingress_wake_timeouts++;
                sp_error_set(&e, SP_E_TIMEOUT, "sandbox %s did not wake within %lld ms (it is %s)", r->t.sandbox,
                             (long long)r->d->limits.ingress_wake_ms, info->state);
                fail_status(r, e, 504, "gateway_timeout", "Reload this page in a moment.");
                return true;
        }
        if (!r->wake_timer && !(r->wake_timer = evtimer_new(r->d->base, on_wake_poll, r))) {
                fail_earlyf(r, SP_E_LIMIT, "out of memory");
                return true;
        }
        static const struct timeval poll = {0, WAKE_POLL_MS * 1000};
        event_add(r->wake_timer, &poll);
        return true;
}

void dp_ingress_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        _cleanup_error_ sp_error *e = NULL;
        relay *r = calloc(1, sizeof(*r));
        if (!r) {
                sp_http_reply_errorf(req, SP_E_LIMIT, "out of memory");
                return;
        }
        r->d = d;
        r->req = sp_http_request_ref(req);
        r->claims.kind = DP_KIND_INGRESS;
        int rc;
        const char *sbx = sp_http_request_param(req, "id");
        if (sbx)
                rc = dp_ingress_path_parse(sbx, sp_http_request_param(req, "port"), &r->t, &e);
        else
                rc = dp_ingress_host_parse(sp_http_request_header(req, "Host"), d->ingress_domain, &r->t, &e);
        if (rc == 0)
                snprintf(r->claims.sandbox, sizeof(r->claims.sandbox), "%s", r->t.sandbox);
        if (rc == 0)
                rc = dp_ingress_token_find(sp_http_request_parser(req), &r->token, &r->token_src, &e);
        if (rc == 0 && !r->t.by_host && r->token_src == DP_INGRESS_TOKEN_COOKIE_SRC) {
                /* The data plane sets its cookie on sandbox hosts only: one on
                 * its own origin was planted by someone else. */
                free(r->token);
                r->token = NULL;
                r->token_src = DP_INGRESS_TOKEN_NONE;
        }
        const char *acrh = sp_http_request_header(req, "Access-Control-Request-Headers");
        if (rc == 0 && strcmp(sp_http_request_method(req), "OPTIONS") == 0 && acrh &&
            strcasestr(acrh, DP_INGRESS_CLIENT_HEADER))
                rc = sp_error_set(&e, SP_E_PERMISSION, "a page may not send %s", DP_INGRESS_CLIENT_HEADER);
        if (rc == 0 && r->token)
                rc = verify_token(r, &e);
        if (rc == 0 && !d->resolver)
                rc = sp_error_set(&e, SP_E_UNAVAILABLE,
                                  "ingress needs the control plane (this data plane was started without one)");
        if (rc < 0) {
                fail_early(r, e);
                return;
        }
        r->upgrade_asked = asks_upgrade(req);
        const char *client = sp_http_request_header(req, DP_INGRESS_CLIENT_HEADER);
        r->own_origin = r->t.by_host || (client && strcmp(client, "forward") == 0);
        r->rp = sp_http_response_parser_new(sp_http_request_method(req), NULL);
        if (r->upgrade_asked)
                sp_http_response_parser_allow_upgrade(r->rp);
        sp_http_request_on_close(req, client_closed, r);
        static const struct timeval second = {1, 0};
        if (!(r->watchdog = event_new(d->base, -1, EV_PERSIST, on_watchdog, r)) ||
            event_add(r->watchdog, &second) < 0) {
                fail_earlyf(r, SP_E_LIMIT, "out of memory");
                return;
        }
        r->lookup = dp_resolver_lookup(d->resolver, r->t.sandbox, resolved, r, &e);
        if (!r->lookup)
                fail_early(r, e);
}
