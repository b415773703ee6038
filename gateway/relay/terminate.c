/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Credential injection (docs/secrets.md). A sandbox's TLS connection to a
 * host one of its secrets is bound to ends here: the gateway answers with a
 * certificate for that name from the sandbox's own CA, dials the host with
 * a verifying TLS client, and reads the requests the sandbox sends, one
 * after another on the connection (wire/http_host.h for each head,
 * wire/http_msg.h for its body's framing):
 *
 * - every request's Host must be the name of the TLS connection (421);
 * - in a header field a secret is bound to (for this host), the sandbox's
 *   placeholder of that secret becomes the value as the secret's format
 *   says (expired: 403; over its rate: 429; its value not held: 503);
 * - a placeholder anywhere else — another field, the target, the body, a
 *   placeholder of no secret of this sandbox — is left as it is and is an
 *   audit record; so is every injection;
 * - bodies pass unchanged; after an Upgrade, bytes pass both ways opaque;
 *   responses pass unchanged (they are not the gateway's to scrub).
 *
 * The gateway's own answers end the connection (Connection: close).
 */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "relay/relay_internal.h"
#include "space/buf.h"
#include "space/log.h"
#include "space/time.h"
#include "tls/tls.h"
#include "wire/http_host.h"
#include "wire/http_msg.h"

/* The most of a body looked at per step (for placeholders). */
#define BODY_STEP (64u << 10)
/* How long the gateway's own last words may take to leave. */
#define DRAIN_MS 2000

typedef enum rq_state {
        RQ_HEAD,
        RQ_LENGTH,
        RQ_CHUNKED,
        RQ_UPGRADING, /* asked to switch protocols: the sandbox's next bytes wait for the answer */
        RQ_TUNNEL, /* switched (101): opaque both ways, nothing injected */
} rq_state;

struct term {
        rq_state st;
        uint64_t left; /* RQ_LENGTH */
        gw_http_chunked ch;
        gw_http_scan scan; /* placeholders in the body */
        bool body_seen; /* one record per body */
        bool up_ready; /* the upstream's TLS is up */
        unsigned requests; /* heads taken */
        size_t head_scanned; /* bytes of a head looked through for its end */
        struct event *deadline; /* the upstream's TLS must be up by then */
        bool closing; /* the last bytes are leaving; then the end */
        int64_t closing_until_us;
        struct bufferevent *down_raw; /* the sandbox's socket, under the TLS filter */
};

/* Only to an address the gateway resolved for the name, for this sandbox:
 * an address the profile allows directly (cidrs, public, audit mode) may be
 * anyone's, and would get the bound request — its length, its timing. Such
 * a connection is relayed as any other, its TLS untouched. */
bool gw__term_wanted(const conn *c, const gw_sandbox *sb)
{
        return c->proto && strcmp(c->proto, "tls") == 0 && c->name[0] && sb->secrets && sb->ca && c->r->g->tls &&
               gw_secrets_bound(sb->secrets, c->name) && gw_pin_has(sb, c->name, c->dst, sp_now_mono_us());
}

void gw__term_free(conn *c)
{
        if (c->term && c->term->deadline)
                event_free(c->term->deadline);
        free(c->term);
        c->term = NULL;
}

static void secret_audit(conn *c, gw_sandbox *sb, const gw_secret *b, bool allow, const char *rule, const char *detail)
{
        gw_audit(c->r->g, &(gw_audit_rec){.kind = "secret",
                                          .sb = sb,
                                          .src = c->src,
                                          .name = c->name,
                                          .proto = "https",
                                          .dst = c->dst,
                                          .port = c->port,
                                          .secret_id = b ? b->id : NULL,
                                          .secret = b ? b->name : NULL,
                                          .d = {.allow = allow, .rule = rule},
                                          .detail = detail});
}

/* ---- ending ---- */

static void drain_check(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        conn *c = ud;
        size_t left = evbuffer_get_length(bufferevent_get_output(c->down)) +
                      evbuffer_get_length(bufferevent_get_output(c->term->down_raw));
        if (left == 0 || sp_now_mono_us() >= c->term->closing_until_us) {
                gw__conn_close(c, left > 0);
                return;
        }
        struct timeval tv = {.tv_usec = 10000};
        evtimer_add(c->timer, &tv);
}

/* Stops reading both sides; once what is written to the sandbox has left
 * (or DRAIN_MS passed), the end. */
static void finish(conn *c)
{
        if (c->term->closing)
                return;
        c->term->closing = true;
        c->term->closing_until_us = sp_now_mono_us() + DRAIN_MS * 1000;
        bufferevent_disable(c->down, EV_READ);
        if (c->up)
                bufferevent_disable(c->up, EV_READ);
        if (!c->timer)
                c->timer = evtimer_new(c->r->g->base, drain_check, c);
        if (!c->timer) {
                gw__conn_close(c, true);
                return;
        }
        drain_check(-1, 0, c);
}

/* The gateway's own answer to the sandbox, and the end of the connection. */
static void answer(conn *c, int status, const char *phrase, const char *detail)
{
        char body[512];
        int n = snprintf(body, sizeof(body), "space-gateway: %s\n", detail);
        if (n < 0 || (size_t)n >= sizeof(body))
                n = (int)sizeof(body) - 1;
        evbuffer_add_printf(bufferevent_get_output(c->down),
                            "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                            "Connection: close\r\n\r\n%.*s",
                            status, phrase, n, n, body);
        sp_log_debug("relay: %s: answered %d: %s", c->name, status, detail);
        finish(c);
}

/* ---- requests ---- */

typedef struct head_ctx {
        conn *c;
        gw_sandbox *sb;
        struct evbuffer *out; /* the head as it goes upstream */
        int status; /* an answer of the gateway's instead (0: none) */
        const char *phrase, *why;
} head_ctx;

static bool hex32(const char *p, size_t n)
{
        if (n < 32)
                return false;
        for (size_t i = 0; i < 32; i++)
                if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
                        return false;
        return true;
}

/* Records each placeholder in p[0..n) that is not injected (where says where it was). */
static void placeholders_elsewhere(head_ctx *h, const char *p, size_t n, const char *where, const gw_secret *injected)
{
        static const char prefix[] = GW_SECRET_PLACEHOLDER_PREFIX;
        size_t pl = sizeof(prefix) - 1;
        for (size_t i = 0; i + pl <= n; i++) {
                if (memcmp(p + i, prefix, pl) != 0 || !hex32(p + i + pl, n - i - pl))
                        continue;
                const gw_secret *b = gw_secrets_by_placeholder(h->sb->secrets, p + i, GW_SECRET_PLACEHOLDER_LEN);
                if (b && b == injected)
                        continue;
                char detail[96];
                snprintf(detail, sizeof(detail), "in %s; not replaced", where);
                secret_audit(h->c, h->sb, b, false, b ? "placeholder-elsewhere" : "placeholder-unknown", detail);
                i += GW_SECRET_PLACEHOLDER_LEN - 1;
        }
}

/* Whether the secret may be used now; if not, the answer is set. */
static bool usable(head_ctx *h, const gw_secret *b)
{
        size_t idx = 0;
        while (idx < gw_secrets_count(h->sb->secrets) && gw_secrets_at(h->sb->secrets, idx) != b)
                idx++;
        if (!b->value) {
                secret_audit(h->c, h->sb, b, false, "not-loaded", "its value is not here yet (a worker restarted)");
                h->status = 503;
                h->phrase = "Service Unavailable";
                h->why = "the secret's value is not loaded yet; retry shortly";
                return false;
        }
        if (b->expires_at && (int64_t)time(NULL) >= b->expires_at) {
                secret_audit(h->c, h->sb, b, false, "expired", NULL);
                h->status = 403;
                h->phrase = "Forbidden";
                h->why = "the secret has expired";
                return false;
        }
        if (b->rate_per_min) {
                gw_bucket *k = &h->sb->secret_rate[idx];
                int64_t now = sp_now_mono_us();
                double cap = b->rate_per_min;
                if (k->at_us == 0)
                        k->tokens = cap;
                else
                        k->tokens += (double)(now - k->at_us) * cap / 60e6;
                if (k->tokens > cap)
                        k->tokens = cap;
                k->at_us = now;
                if (k->tokens < 1) {
                        secret_audit(h->c, h->sb, b, false, "rate-limit", NULL);
                        h->status = 429;
                        h->phrase = "Too Many Requests";
                        h->why = "the secret's rate limit is reached";
                        return false;
                }
                k->tokens -= 1;
        }
        return true;
}

/* The binding whose placeholder the field carries and which goes in this
 * field for this host; NULL if none. For basic auth, *user gets the
 * username the sandbox sent. */
static const gw_secret *binding_of(head_ctx *h, const gw_http_field *f, sp_buf *user)
{
        for (size_t i = 0; i < gw_secrets_count(h->sb->secrets); i++) {
                const gw_secret *b = gw_secrets_at(h->sb->secrets, i);
                if (strlen(b->header) != f->name_len || strncasecmp(b->header, f->name, f->name_len) != 0 ||
                    !gw_secret_bound(b, h->c->name))
                        continue;
                if (b->kind == GW_INJECT_HEADER) {
                        if (memmem(f->value, f->value_len, b->placeholder, GW_SECRET_PLACEHOLDER_LEN))
                                return b;
                        continue;
                }
                /* Basic: "Basic base64(user:placeholder)". */
                if (f->value_len < 7 || strncasecmp(f->value, "Basic ", 6) != 0)
                        continue;
                sp_buf dec = SP_BUF_INIT;
                const char *v = f->value + 6;
                size_t vl = f->value_len - 6;
                while (vl && *v == ' ')
                        v++, vl--;
                bool ok = sp_base64_decode(&dec, v, vl, 0, NULL) == 0 && dec.len > GW_SECRET_PLACEHOLDER_LEN &&
                          memcmp(dec.data + dec.len - GW_SECRET_PLACEHOLDER_LEN, b->placeholder,
                                 GW_SECRET_PLACEHOLDER_LEN) == 0 &&
                          dec.data[dec.len - GW_SECRET_PLACEHOLDER_LEN - 1] == ':';
                if (ok) {
                        sp_buf_clear(user);
                        sp_buf_append(user, dec.data, dec.len - GW_SECRET_PLACEHOLDER_LEN - 1, NULL);
                }
                sp_buf_free(&dec);
                if (ok)
                        return b;
        }
        return NULL;
}

static int rewrite_field(const gw_http_field *f, void *ud)
{
        head_ctx *h = ud;
        _cleanup_buf_ sp_buf user = SP_BUF_INIT;
        const gw_secret *b = binding_of(h, f, &user);
        char where[GW_SECRET_HEADER_MAX + 16];
        snprintf(where, sizeof(where), "header %.*s", (int)(f->name_len < 64 ? f->name_len : 64), f->name);
        placeholders_elsewhere(h, f->line, f->line_len, where, b);
        /* A placeholder in basic credentials is base64: looked for decoded too. */
        if ((!b || b->kind != GW_INJECT_BASIC) && f->value_len > 6 && strncasecmp(f->value, "Basic ", 6) == 0) {
                _cleanup_buf_ sp_buf dec = SP_BUF_INIT;
                const char *v = f->value + 6;
                size_t vl = f->value_len - 6;
                while (vl && *v == ' ')
                        v++, vl--;
                if (sp_base64_decode(&dec, v, vl, 0, NULL) == 0 && dec.len)
                        placeholders_elsewhere(h, dec.data, dec.len, where, NULL);
        }
        if (!b) {
                evbuffer_add(h->out, f->line, f->line_len);
                return 0;
        }
        if (!usable(h, b))
                return 1;
        evbuffer_add(h->out, f->name, f->name_len);
        evbuffer_add(h->out, ": ", 2);
        if (b->kind == GW_INJECT_HEADER) {
                const char *at = strstr(b->format, "{{secret}}");
                evbuffer_add(h->out, b->format, (size_t)(at - b->format));
                evbuffer_add(h->out, b->value, b->value_len);
                evbuffer_add(h->out, at + 10, strlen(at + 10));
        } else {
                _cleanup_buf_ sp_buf plain = SP_BUF_INIT, enc = SP_BUF_INIT;
                if (b->username[0])
                        sp_buf_append(&plain, b->username, strlen(b->username), NULL);
                else
                        sp_buf_append(&plain, user.data, user.len, NULL);
                sp_buf_append(&plain, ":", 1, NULL);
                sp_buf_append(&plain, b->value, b->value_len, NULL);
                sp_base64_encode(&enc, plain.data, plain.len, 0, NULL);
                explicit_bzero(plain.data, plain.len);
                evbuffer_add(h->out, "Basic ", 6);
                evbuffer_add(h->out, enc.data, enc.len);
                explicit_bzero(enc.data, enc.len);
        }
        evbuffer_add(h->out, "\r\n", 2);
        secret_audit(h->c, h->sb, b, true, "injected", NULL);
        return 0;
}

/* One request's head, complete at the start of in: checked, rewritten into
 * the upstream's output, drained. false: the gateway answered instead. */
static bool take_head(conn *c, gw_sandbox *sb, const uint8_t *p, const gw_http_request *hr)
{
        struct term *t = c->term;
        if (strcasecmp(hr->host, c->name) != 0) {
                secret_audit(c, sb, NULL, false, "host-mismatch",
                             "the request's Host is not the TLS connection's name");
                answer(c, 421, "Misdirected Request",
                       "the request's Host is not the name this connection was opened for");
                return false;
        }
        gw_http_framing f;
        if (gw_http_framing_of(p, hr->head_len, hr->minor_version, &f) < 0) {
                answer(c, 400, "Bad Request", f.reason);
                return false;
        }
        /* Whether the protocol switches is the response's to say; with no
         * earlier response still to come, its first bytes are that answer. */
        if (f.kind == GW_HTTP_BODY_TUNNEL && t->requests > 0) {
                answer(c, 400, "Bad Request", "a request to switch protocols must be the first on its connection");
                return false;
        }
        t->requests++;
        head_ctx h = {.c = c, .sb = sb, .out = evbuffer_new()};
        if (!h.out) {
                gw__conn_close(c, true);
                return false;
        }
        const char *target = NULL;
        size_t target_len = 0;
        const uint8_t *eol = memmem(p, hr->head_len, "\r\n", 2);
        size_t line_len = (size_t)(eol - p) + 2;
        if (gw_http_request_line(p, hr->head_len, &target, &target_len) == 0)
                placeholders_elsewhere(&h, target, target_len, "the request target", NULL);
        evbuffer_add(h.out, p, line_len);
        gw_http_fields_each(p, hr->head_len, rewrite_field, &h);
        if (h.status) {
                evbuffer_free(h.out);
                answer(c, h.status, h.phrase, h.why);
                return false;
        }
        evbuffer_add(h.out, "\r\n", 2);
        evbuffer_add_buffer(bufferevent_get_output(c->up), h.out);
        evbuffer_free(h.out);
        evbuffer_drain(bufferevent_get_input(c->down), hr->head_len);
        c->out += hr->head_len;
        memset(&t->scan, 0, sizeof(t->scan));
        t->body_seen = false;
        switch (f.kind) {
        case GW_HTTP_BODY_LENGTH:
                t->st = f.length ? RQ_LENGTH : RQ_HEAD;
                t->left = f.length;
                break;
        case GW_HTTP_BODY_CHUNKED:
                t->st = RQ_CHUNKED;
                gw_http_chunked_init(&t->ch);
                break;
        case GW_HTTP_BODY_TUNNEL:
                t->st = RQ_UPGRADING;
                break;
        default:
                t->st = RQ_HEAD;
        }
        return true;
}

/* Moves n bytes of body from the sandbox upstream, looking for placeholders. */
static void pass_body(conn *c, gw_sandbox *sb, const uint8_t *p, size_t n)
{
        struct term *t = c->term;
        static const char prefix[] = GW_SECRET_PLACEHOLDER_PREFIX;
        if (p && !t->body_seen && gw_http_scan_feed(&t->scan, prefix, sizeof(prefix) - 1, p, n, NULL)) {
                t->body_seen = true;
                secret_audit(c, sb, NULL, false, "placeholder-elsewhere", "in a request body; not replaced");
        }
        evbuffer_remove_buffer(bufferevent_get_input(c->down), bufferevent_get_output(c->up), n);
        c->out += n;
        c->r->g->counters.bytes_out += n;
}

static void down_read(struct bufferevent *b, void *ud)
{
        (void)b;
        conn *c = ud;
        struct term *t = c->term;
        gw *g = c->r->g;
        gw_sandbox *sb = gw_table_find(g->table, c->src);
        if (!sb) {
                gw__conn_close(c, true);
                return;
        }
        c->last_us = sp_now_mono_us();
        struct evbuffer *in = bufferevent_get_input(c->down);
        while (!t->closing && evbuffer_get_length(in) > 0) {
                if (evbuffer_get_length(bufferevent_get_output(c->up)) >= HIGH_WATER) {
                        bufferevent_disable(c->down, EV_READ);
                        return;
                }
                size_t n = evbuffer_get_length(in);
                if (t->st == RQ_UPGRADING) {
                        /* Held until the host answers the switch (up_read). */
                        bufferevent_disable(c->down, EV_READ);
                        return;
                }
                if (t->st == RQ_HEAD) {
                        size_t look = n < GW_HTTP_MAX_HEAD ? n : GW_HTTP_MAX_HEAD;
                        /* Parsed once its end is there (not again for every byte that comes). */
                        struct evbuffer_ptr from;
                        evbuffer_ptr_set(in, &from, t->head_scanned > 3 ? t->head_scanned - 3 : 0, EVBUFFER_PTR_SET);
                        if (evbuffer_search(in, "\r\n\r\n", 4, &from).pos < 0 && look < GW_HTTP_MAX_HEAD) {
                                t->head_scanned = n;
                                return;
                        }
                        t->head_scanned = 0;
                        const uint8_t *p = evbuffer_pullup(in, (ev_ssize_t)look);
                        gw_http_request hr;
                        gw_http_result r = gw_http_host_parse(p, look, 0, &hr);
                        if (r == GW_HTTP_NEED_MORE) {
                                if (look >= GW_HTTP_MAX_HEAD)
                                        answer(c, 431, "Request Header Fields Too Large",
                                               "the request head is too large");
                                return;
                        }
                        if (r != GW_HTTP_OK) {
                                answer(c, 400, "Bad Request", hr.reason ? hr.reason : "not HTTP/1.1");
                                return;
                        }
                        if (!take_head(c, sb, p, &hr))
                                return;
                } else if (t->st == RQ_LENGTH) {
                        size_t m = n < t->left ? n : (size_t)t->left;
                        if (m > BODY_STEP)
                                m = BODY_STEP;
                        pass_body(c, sb, evbuffer_pullup(in, (ev_ssize_t)m), m);
                        if ((t->left -= m) == 0)
                                t->st = RQ_HEAD;
                } else if (t->st == RQ_CHUNKED) {
                        size_t look = n < BODY_STEP ? n : BODY_STEP, used = 0;
                        const uint8_t *p = evbuffer_pullup(in, (ev_ssize_t)look);
                        const char *reason = NULL;
                        int r = gw_http_chunked_feed(&t->ch, p, look, &used, &reason);
                        if (r < 0) {
                                answer(c, 400, "Bad Request", reason ? reason : "a malformed chunked body");
                                return;
                        }
                        pass_body(c, sb, p, used);
                        if (r == 1)
                                t->st = RQ_HEAD;
                } else {
                        pass_body(c, sb, NULL, n);
                }
        }
}

static void down_write(struct bufferevent *b, void *ud)
{
        (void)b;
        conn *c = ud;
        if (c->up && !c->up_eof && evbuffer_get_length(bufferevent_get_output(c->down)) < HIGH_WATER / 2)
                bufferevent_enable(c->up, EV_READ);
}

static void up_read(struct bufferevent *b, void *ud)
{
        (void)b;
        conn *c = ud;
        struct term *t = c->term;
        struct evbuffer *in = bufferevent_get_input(c->up);
        size_t n = evbuffer_get_length(in);
        if (t->st == RQ_UPGRADING) {
                if (n < 12)
                        return; /* "HTTP/1.1 101" is not all here yet */
                const uint8_t *s = evbuffer_pullup(in, 12);
                bool switched = (memcmp(s, "HTTP/1.1 101", 12) == 0 || memcmp(s, "HTTP/1.0 101", 12) == 0);
                t->st = switched ? RQ_TUNNEL : RQ_HEAD;
                if (!c->down_eof)
                        bufferevent_enable(c->down, EV_READ);
                /* What the sandbox sent meanwhile: read on the next turn of the loop
                 * (reading it now could end c under this call). */
                bufferevent_trigger(c->down, EV_READ, BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
        }
        c->last_us = sp_now_mono_us();
        evbuffer_add_buffer(bufferevent_get_output(c->down), in);
        c->in += n;
        c->r->g->counters.bytes_in += n;
        if (evbuffer_get_length(bufferevent_get_output(c->down)) >= HIGH_WATER)
                bufferevent_disable(c->up, EV_READ);
}

static void up_write(struct bufferevent *b, void *ud)
{
        (void)b;
        conn *c = ud;
        if (!c->term->closing && !c->down_eof && evbuffer_get_length(bufferevent_get_output(c->up)) < HIGH_WATER / 2) {
                bufferevent_enable(c->down, EV_READ);
                if (evbuffer_get_length(bufferevent_get_input(c->down)) > 0)
                        down_read(c->down, c);
        }
}

static void down_event(struct bufferevent *b, short what, void *ud)
{
        (void)b;
        conn *c = ud;
        if (what & BEV_EVENT_CONNECTED)
                return; /* the sandbox took the certificate */
        if (what & BEV_EVENT_EOF) {
                /* The sandbox is done sending: what it asked for may still come back. */
                c->down_eof = true;
                bufferevent_disable(c->down, EV_READ);
                if (c->up_eof || !c->term->up_ready)
                        finish(c);
                return;
        }
        unsigned long e = bufferevent_get_openssl_error(c->down);
        char why[160] = "";
        if (e)
                ERR_error_string_n(e, why, sizeof(why));
        sp_log_debug("relay: %s: the sandbox's TLS ended: %s", c->name, why[0] ? why : "connection error");
        gw__conn_close(c, true);
}

static void up_event(struct bufferevent *b, short what, void *ud)
{
        conn *c = ud;
        if (what & BEV_EVENT_CONNECTED) {
                c->term->up_ready = true;
                if (c->term->deadline)
                        evtimer_del(c->term->deadline);
                bufferevent_set_timeouts(b, NULL, NULL);
                c->last_us = sp_now_mono_us();
                return;
        }
        if ((what & BEV_EVENT_EOF) && c->term->up_ready) {
                c->up_eof = true;
                up_read(b, c);
                finish(c);
                return;
        }
        /* Could not connect, or the host's certificate is not right for the name. */
        char why[200] = "cannot connect";
        SSL *ssl = bufferevent_openssl_get_ssl(b);
        long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
        unsigned long e = bufferevent_get_openssl_error(b);
        if (vr != X509_V_OK)
                snprintf(why, sizeof(why), "the host's certificate: %s", X509_verify_cert_error_string(vr));
        else if (e)
                ERR_error_string_n(e, why, sizeof(why));
        else if (what & BEV_EVENT_TIMEOUT)
                snprintf(why, sizeof(why), "connect timed out");
        c->r->g->counters.tcp_upstream_errors++;
        sp_log_info("relay: %s:%u: %s", c->name, (unsigned)c->port, why);
        if (c->term->up_ready) {
                gw__conn_close(c, true);
                return;
        }
        bufferevent_free(c->up);
        c->up = NULL;
        answer(c, 502, "Bad Gateway", why);
}

/* The host's TLS is not up within the connect timeout (a server that
 * accepts and says nothing would hold the connection for ever). */
static void deadline_passed(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        conn *c = ud;
        if (c->term->up_ready || c->term->closing)
                return;
        c->r->g->counters.tcp_upstream_errors++;
        sp_log_info("relay: %s:%u: TLS not up in time", c->name, (unsigned)c->port);
        if (c->up) {
                bufferevent_free(c->up);
                c->up = NULL;
        }
        answer(c, 504, "Gateway Timeout", "the host did not complete TLS in time");
}

void gw__term_start(conn *c, gw_sandbox *sb)
{
        gw *g = c->r->g;
        _cleanup_error_ sp_error *e = NULL;
        struct term *t = calloc(1, sizeof(*t));
        if (!t) {
                gw__conn_close(c, true);
                return;
        }
        c->term = t;
        struct timeval ct = {.tv_sec = g->cfg.connect_timeout_ms / 1000,
                             .tv_usec = (g->cfg.connect_timeout_ms % 1000) * 1000};
        c->last_us = sp_now_mono_us();
        if (!(t->deadline = evtimer_new(g->base, deadline_passed, c)) || evtimer_add(t->deadline, &ct) < 0 ||
            (g->cfg.idle_timeout_ms > 0 && !(c->idle = evtimer_new(g->base, gw__idle_check, c)))) {
                gw__conn_close(c, true);
                return;
        }
        if (c->idle)
                gw__arm_idle(c, (int64_t)g->cfg.idle_timeout_ms * 1000);
        SSL *ds = gw_tls_server_ssl(g->tls, sb->ca, c->name, &e);
        SSL *us = ds ? gw_tls_client_ssl(g->tls, c->name, &e) : NULL;
        if (!ds || !us) {
                SSL_free(ds);
                sp_log_warn("relay: %s: cannot terminate TLS: %s", c->name, e ? e->message : "");
                gw__conn_close(c, true);
                return;
        }
        /* The sandbox's side: the ClientHello already read stays in the
         * socket's bufferevent, where the filter reads it from. */
        t->down_raw = c->down;
        struct bufferevent *f =
                bufferevent_openssl_filter_new(g->base, c->down, ds, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
        if (!f) {
                SSL_free(ds);
                SSL_free(us);
                gw__conn_close(c, true);
                return;
        }
        c->down = f;
        bufferevent_openssl_set_allow_dirty_shutdown(f, 1);
        bufferevent_setcb(f, down_read, down_write, down_event, c);
        bufferevent_enable(t->down_raw, EV_READ | EV_WRITE);
        bufferevent_enable(f, EV_READ | EV_WRITE);
        /* Start the handshake on what is there already. */
        bufferevent_trigger(t->down_raw, EV_READ, BEV_TRIG_IGNORE_WATERMARKS);

        /* The host's side. */
        c->up = bufferevent_openssl_socket_new(g->base, -1, us, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
        if (!c->up) {
                SSL_free(us);
                gw__conn_close(c, true);
                return;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(c->up, 1);
        bufferevent_setcb(c->up, up_read, up_write, up_event, c);
        struct timeval tv = {.tv_sec = g->cfg.connect_timeout_ms / 1000,
                             .tv_usec = (g->cfg.connect_timeout_ms % 1000) * 1000};
        bufferevent_set_timeouts(c->up, NULL, &tv);
        bufferevent_enable(c->up, EV_READ | EV_WRITE);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(c->port), .sin_addr.s_addr = htonl(c->dst)};
        if (bufferevent_socket_connect(c->up, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                g->counters.tcp_upstream_errors++;
                gw__conn_close(c, true);
                return;
        }
        int ufd = bufferevent_getfd(c->up);
        if (ufd >= 0)
                gw__bound_buffers(ufd);
}
