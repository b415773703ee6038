/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The blocking HTTP/1.1 client (see space/http_client.h): endpoint URLs,
 * requests, and the response read through the pure parser. The connection
 * itself (TCP, TLS, bounded waits) is in http_client_conn.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "http_client_internal.h"
#include "space/cleanup.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 10000
#define DEFAULT_IO_TIMEOUT_MS 60000
#define MAX_URL 2048
#define MAX_HOST 253
#define READ_CHUNK (64 * 1024)

/* ---- URLs ---- */

static bool host_char_ok(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
               c == '_';
}

static bool path_char_ok(unsigned char c)
{
        return c > 0x20 && c < 0x7f && c != '?' && c != '#';
}

static int parse_url(sp_http_client *c, const char *url, sp_error **err)
{
        size_t len = strlen(url);
        if (len > MAX_URL)
                return sp_error_set(err, SP_E_INVALID, "URL longer than %d bytes", MAX_URL);
        const char *s;
        if (strncasecmp(url, "http://", 7) == 0) {
                s = url + 7;
        } else if (strncasecmp(url, "https://", 8) == 0) {
                c->tls = true;
                s = url + 8;
        } else {
                return sp_error_set(err, SP_E_INVALID, "URL '%s' must start with http:// or https://", url);
        }
        const char *auth_end = s + strcspn(s, "/");
        const char *port = NULL;
        char host[MAX_HOST + 1];
        size_t hlen;
        if (memchr(s, '@', (size_t)(auth_end - s)))
                return sp_error_set(err, SP_E_INVALID, "URL '%s': user information is not supported", url);
        if (*s == '[') {
                const char *close = memchr(s, ']', (size_t)(auth_end - s));
                if (!close)
                        return sp_error_set(err, SP_E_INVALID, "URL '%s': missing ']'", url);
                hlen = (size_t)(close - s - 1);
                if (hlen == 0 || hlen > MAX_HOST)
                        return sp_error_set(err, SP_E_INVALID, "URL '%s': bad IPv6 address", url);
                memcpy(host, s + 1, hlen);
                host[hlen] = '\0';
                struct in6_addr a6;
                if (inet_pton(AF_INET6, host, &a6) != 1)
                        return sp_error_set(err, SP_E_INVALID, "URL '%s': bad IPv6 address", url);
                c->host_is_ip = true;
                if (close + 1 < auth_end) {
                        if (close[1] != ':')
                                return sp_error_set(err, SP_E_INVALID, "URL '%s': bad authority", url);
                        port = close + 2;
                }
        } else {
                const char *colon = memchr(s, ':', (size_t)(auth_end - s));
                const char *hend = colon ? colon : auth_end;
                hlen = (size_t)(hend - s);
                if (hlen == 0 || hlen > MAX_HOST)
                        return sp_error_set(err, SP_E_INVALID, "URL '%s': missing or overlong host", url);
                for (size_t i = 0; i < hlen; i++)
                        if (!host_char_ok(s[i]))
                                return sp_error_set(err, SP_E_INVALID, "URL '%s': bad host name", url);
                memcpy(host, s, hlen);
                host[hlen] = '\0';
                struct in_addr a4;
                c->host_is_ip = inet_pton(AF_INET, host, &a4) == 1;
                if (colon)
                        port = colon + 1;
        }
        unsigned long pnum = c->tls ? 443 : 80;
        if (port) {
                size_t plen = (size_t)(auth_end - port);
                if (plen == 0 || plen > 5 || strspn(port, "0123456789") < plen)
                        return sp_error_set(err, SP_E_INVALID, "URL '%s': bad port", url);
                pnum = strtoul(port, NULL, 10);
                if (pnum == 0 || pnum > 65535)
                        return sp_error_set(err, SP_E_INVALID, "URL '%s': bad port", url);
        }
        snprintf(c->port, sizeof(c->port), "%lu", pnum);
        c->host = strdup(host);
        bool default_port = pnum == (c->tls ? 443u : 80u);
        bool v6 = *s == '[';
        if (asprintf(&c->host_header, "%s%s%s%s%s", v6 ? "[" : "", host, v6 ? "]" : "", default_port ? "" : ":",
                     default_port ? "" : c->port) < 0)
                c->host_header = NULL;
        /* The path prefix, without trailing slashes. */
        size_t plen = strlen(auth_end);
        for (size_t i = 0; i < plen; i++)
                if (!path_char_ok((unsigned char)auth_end[i]))
                        return sp_error_set(err, SP_E_INVALID, "URL '%s': query, fragment or bad character in path",
                                            url);
        while (plen > 0 && auth_end[plen - 1] == '/')
                plen--;
        c->prefix = strndup(auth_end, plen);
        if (!c->host || !c->host_header || !c->prefix)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

/* ---- the client ---- */

sp_http_client *sp_http_client_new(const char *url, const sp_http_client_config *cfg, sp_error **err)
{
        sp_http_client *c = calloc(1, sizeof(*c));
        if (!c) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        c->fd = -1;
        sp_http_client_config def = {0};
        if (!cfg)
                cfg = &def;
        c->connect_timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
        c->io_timeout_ms = cfg->io_timeout_ms ? cfg->io_timeout_ms : DEFAULT_IO_TIMEOUT_MS;
        c->limits = cfg->limits;
        if (cfg->user_agent) {
                if (strpbrk(cfg->user_agent, "\r\n") || strlen(cfg->user_agent) > 256) {
                        sp_error_set(err, SP_E_INVALID, "bad User-Agent");
                        return sp_http_client_free(c);
                }
                c->user_agent = strdup(cfg->user_agent);
        }
        if (parse_url(c, url, err) < 0 || (c->tls && sp__http_client_tls_init(c, cfg->ca_file, err) < 0))
                return sp_http_client_free(c);
        return c;
}

sp_http_client *sp_http_client_free(sp_http_client *c)
{
        if (!c)
                return NULL;
        sp__http_client_disconnect(c);
        c->resp = sp_http_response_parser_free(c->resp);
        sp_buf_free(&c->in);
        if (c->ssl_ctx)
                SSL_CTX_free(c->ssl_ctx);
        free(c->host);
        free(c->host_header);
        free(c->prefix);
        free(c->user_agent);
        free(c);
        return NULL;
}

void sp_http_client_close(sp_http_client *c)
{
        sp__http_client_disconnect(c);
        c->reading = false;
}

/* ---- requests ---- */

static bool header_named(const char *line, const char *name)
{
        size_t n = strlen(name);
        return strncasecmp(line, name, n) == 0 && line[n] == ':';
}

static bool value_ok(const char *v)
{
        for (; *v; v++)
                if ((unsigned char)*v < 0x20 ? *v != '\t' : (unsigned char)*v == 0x7f)
                        return false;
        return true;
}

/* Checks the request and writes its head (request line and headers). */
static int build_head(sp_http_client *c, const sp_http_client_request *req, sp_buf *head, sp_error **err)
{
        if (!req->method || !sp_http_token_valid(req->method, strlen(req->method)) ||
            strlen(req->method) > SP_HTTP_METHOD_MAX)
                return sp_error_set(err, SP_E_INVALID, "bad request method");
        const char *t = req->target;
        if (!t || t[0] != '/' || strlen(t) + strlen(c->prefix) > SP_HTTP_CLIENT_MAX_TARGET)
                return sp_error_set(err, SP_E_INVALID, "request target must start with '/' and be at most %d bytes",
                                    SP_HTTP_CLIENT_MAX_TARGET);
        for (const char *p = t; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == '#')
                        return sp_error_set(err, SP_E_INVALID, "request target has a byte that must be encoded");
        if (req->body && req->body_source)
                return sp_error_set(err, SP_E_INVALID, "a request has a body in memory or a streamed one, not both");
        sp_buf_appendf(head, NULL, "%s %s%s HTTP/1.1\r\nHost: %s\r\n", req->method, c->prefix, t, c->host_header);
        if (c->user_agent)
                sp_buf_appendf(head, NULL, "User-Agent: %s\r\n", c->user_agent);
        static const char *const owned[] = {"host", "content-length", "transfer-encoding", "connection"};
        size_t n = 0;
        for (const char *const *h = req->headers; h && *h; h++) {
                if (++n > SP_HTTP_CLIENT_MAX_HEADERS)
                        return sp_error_set(err, SP_E_INVALID, "more than %d request headers",
                                            SP_HTTP_CLIENT_MAX_HEADERS);
                const char *colon = strchr(*h, ':');
                if (!colon || !sp_http_token_valid(*h, (size_t)(colon - *h)) || !value_ok(colon + 1))
                        return sp_error_set(err, SP_E_INVALID, "bad request header line");
                for (size_t i = 0; i < SP_ARRAY_SIZE(owned); i++)
                        if (header_named(*h, owned[i]))
                                return sp_error_set(err, SP_E_INVALID, "the client sets the %s header itself",
                                                    owned[i]);
                sp_buf_appendf(head, NULL, "%s\r\n", *h);
        }
        if (req->body_source)
                sp_buf_append_str(head, "Transfer-Encoding: chunked\r\n", NULL);
        else if (req->body || (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0))
                sp_buf_appendf(head, NULL, "Content-Length: %zu\r\n", req->body ? req->body_len : 0);
        sp_buf_append_str(head, "\r\n", NULL);
        return 0;
}

/* Whether sending the request twice is harmless. */
static bool replayable(const sp_http_client_request *req)
{
        if (req->body_source)
                return false;
        static const char *const idempotent[] = {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(idempotent); i++)
                if (strcmp(req->method, idempotent[i]) == 0)
                        return true;
        for (const char *const *h = req->headers; h && *h; h++)
                if (header_named(*h, "idempotency-key"))
                        return true;
        return false;
}

/* Streams the body from the source, one chunk per read. */
static int write_chunked(sp_http_client *c, const sp_http_client_request *req, int64_t deadline, sp_error **err)
{
        enum { FRAME = 24 };
        _cleanup_free_ char *buf = malloc(FRAME + READ_CHUNK + 2);
        if (!buf)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (;;) {
                ssize_t n = req->body_source(buf + FRAME, READ_CHUNK, req->body_userdata, err);
                if (n < 0)
                        return sp_error_wrap(err, "request body");
                if (n > READ_CHUNK)
                        return sp_error_set(err, SP_E_INVALID, "request body: the source returned too much");
                if (n == 0)
                        return sp__http_client_write(c, "0\r\n\r\n", 5, deadline, err);
                char size[FRAME];
                int sl = snprintf(size, sizeof(size), "%zx\r\n", (size_t)n);
                char *start = buf + FRAME - sl;
                memcpy(start, size, (size_t)sl);
                memcpy(buf + FRAME + n, "\r\n", 2);
                deadline = sp__http_client_deadline(c->io_timeout_ms);
                int r = sp__http_client_write(c, start, (size_t)sl + (size_t)n + 2, deadline, err);
                if (r < 0)
                        return r;
        }
}

static int write_request(sp_http_client *c, const sp_http_client_request *req, const sp_buf *head, sp_error **err)
{
        int64_t deadline = sp__http_client_deadline(c->io_timeout_ms);
        if (req->body && req->body_len > 0 && req->body_len <= 64 * 1024) {
                /* One write for a small request. */
                _cleanup_buf_ sp_buf all = SP_BUF_INIT;
                sp_buf_append(&all, head->data, head->len, NULL);
                sp_buf_append(&all, req->body, req->body_len, NULL);
                return sp__http_client_write(c, all.data, all.len, deadline, err);
        }
        int r = sp__http_client_write(c, head->data, head->len, deadline, err);
        if (r < 0)
                return r;
        if (req->body && req->body_len > 0)
                return sp__http_client_write(c, req->body, req->body_len, deadline, err);
        if (req->body_source)
                return write_chunked(c, req, deadline, err);
        return 0;
}

/* Reads until the head of the final response is parsed. */
static int read_head(sp_http_client *c, sp_error **err)
{
        int64_t deadline = sp__http_client_deadline(c->io_timeout_ms);
        for (;;) {
                size_t used;
                const char *body;
                size_t blen;
                sp_http_parse_event ev =
                        sp_http_response_parser_feed(c->resp, c->in.data, c->in.len, &used, &body, &blen);
                sp_buf_consume(&c->in, used);
                if (ev == SP_HTTP_PARSE_HEAD)
                        return sp_http_response_parser_status(c->resp);
                if (ev == SP_HTTP_PARSE_ERROR)
                        return sp_error_set(err, SP_E_INVALID, "malformed response from %s: %s", c->host_header,
                                            sp_http_response_parser_error(c->resp));
                ssize_t n = sp__http_client_fill(c, deadline, err);
                if (n < 0)
                        return (int)n;
                if (n == 0) {
                        sp_http_response_parser_eof(c->resp);
                        return sp_error_set(err, SP_E_UNAVAILABLE, "%s: %s", c->host_header,
                                            sp_http_response_parser_error(c->resp));
                }
        }
}

int sp_http_client_send(sp_http_client *c, const sp_http_client_request *req, sp_error **err)
{
        _cleanup_buf_ sp_buf head = SP_BUF_INIT;
        int r = build_head(c, req, &head, err);
        if (r < 0)
                return r;
        if (c->reading) {
                /* The previous response was not read to its end: its rest is still on the wire. */
                sp__http_client_disconnect(c);
                c->reading = false;
        }
        bool retry_ok = replayable(req);
        for (int attempt = 0;; attempt++) {
                if (c->fd >= 0 && !sp__http_client_idle_ok(c))
                        sp__http_client_disconnect(c);
                bool reused = c->fd >= 0;
                if (!reused && (r = sp__http_client_connect(c, err)) < 0)
                        return r;
                c->resp = sp_http_response_parser_free(c->resp);
                c->resp = sp_http_response_parser_new(req->method, &c->limits);
                sp_buf_clear(&c->in);
                sp_error *e = NULL;
                r = write_request(c, req, &head, &e);
                if (r >= 0)
                        r = read_head(c, &e);
                if (r >= 0) {
                        c->reading = true;
                        return r;
                }
                sp__http_client_disconnect(c);
                /* A kept-alive connection the server had closed: nothing of the answer came back. */
                bool stale = reused && e->code == SP_E_UNAVAILABLE && sp_http_response_parser_bytes_seen(c->resp) == 0;
                if (attempt > 0 || !stale || !retry_ok) {
                        sp_error_move(err, &e);
                        return r;
                }
                sp_error_free(e);
        }
}

int sp_http_client_status(const sp_http_client *c)
{
        return c->resp ? sp_http_response_parser_status(c->resp) : 0;
}

const char *sp_http_client_header(const sp_http_client *c, const char *name)
{
        return c->resp ? sp_http_response_parser_header(c->resp, name) : NULL;
}

/* The response is complete: keep the connection for the next request if the
 * server allows and nothing else arrived. */
static void finish_response(sp_http_client *c)
{
        c->reading = false;
        if (!sp_http_response_parser_keep_alive(c->resp) || c->in.len > 0 || c->peer_closed)
                sp__http_client_disconnect(c);
}

ssize_t sp_http_client_read(sp_http_client *c, void *buf, size_t cap, int timeout_ms, sp_error **err)
{
        if (!c->resp)
                return sp_error_set(err, SP_E_INVALID, "no response to read");
        if (!c->reading)
                return sp_http_response_parser_done(c->resp)
                               ? 0
                               : sp_error_set(err, SP_E_UNAVAILABLE, "the response was abandoned");
        if (cap == 0)
                return sp_error_set(err, SP_E_INVALID, "no room to read into");
        int64_t deadline = sp__http_client_deadline(timeout_ms < 0 ? c->io_timeout_ms : (unsigned)timeout_ms);
        for (;;) {
                size_t used, blen;
                const char *body;
                size_t give = c->in.len < cap ? c->in.len : cap;
                sp_http_parse_event ev = sp_http_response_parser_feed(c->resp, c->in.data, give, &used, &body, &blen);
                if (ev == SP_HTTP_PARSE_BODY && blen > 0) {
                        memcpy(buf, body, blen);
                        sp_buf_consume(&c->in, used);
                        return (ssize_t)blen;
                }
                sp_buf_consume(&c->in, used);
                if (ev == SP_HTTP_PARSE_DONE) {
                        finish_response(c);
                        return 0;
                }
                if (ev == SP_HTTP_PARSE_ERROR) {
                        sp_http_client_close(c);
                        return sp_error_set(err, SP_E_INVALID, "malformed response from %s: %s", c->host_header,
                                            sp_http_response_parser_error(c->resp));
                }
                if (c->in.len > 0 || ev == SP_HTTP_PARSE_BODY)
                        continue;
                ssize_t n = sp__http_client_fill(c, deadline, err);
                if (n < 0) {
                        if (n != -SP_E_TIMEOUT || timeout_ms < 0)
                                sp_http_client_close(c);
                        return n;
                }
                if (n == 0) {
                        if (c->unclean_eof && !sp_http_response_parser_done(c->resp) &&
                            sp_http_response_parser_content_length(c->resp) < 0 &&
                            !sp_http_response_parser_chunked(c->resp)) {
                                sp_http_client_close(c);
                                return sp_error_set(err, SP_E_UNAVAILABLE,
                                                    "%s closed the connection without TLS close_notify: the body "
                                                    "may be truncated",
                                                    c->host_header);
                        }
                        if (sp_http_response_parser_eof(c->resp) == SP_HTTP_PARSE_ERROR) {
                                sp_http_client_close(c);
                                return sp_error_set(err, SP_E_UNAVAILABLE, "%s: %s", c->host_header,
                                                    sp_http_response_parser_error(c->resp));
                        }
                }
        }
}

int sp_http_client_fd(const sp_http_client *c)
{
        return c->reading ? c->fd : -1;
}

bool sp_http_client_buffered(const sp_http_client *c)
{
        return c->reading && (c->in.len > 0 || sp__http_client_tls_buffered(c));
}

int sp_http_client_stream(sp_http_client *c, const sp_http_client_request *req, sp_http_body_sink sink, void *userdata,
                          sp_error **err)
{
        int status = sp_http_client_send(c, req, err);
        if (status < 0)
                return status;
        _cleanup_free_ char *buf = malloc(READ_CHUNK);
        if (!buf) {
                sp_http_client_close(c);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        for (;;) {
                ssize_t n = sp_http_client_read(c, buf, READ_CHUNK, -1, err);
                if (n < 0)
                        return (int)n;
                if (n == 0)
                        return status;
                int r = sink(buf, (size_t)n, userdata, err);
                if (r < 0) {
                        sp_http_client_close(c);
                        return r;
                }
        }
}

int sp_http_client_do(sp_http_client *c, const sp_http_client_request *req, size_t max_body, sp_buf *body,
                      sp_error **err)
{
        int status = sp_http_client_send(c, req, err);
        if (status < 0)
                return status;
        size_t got = 0;
        char buf[16 * 1024];
        for (;;) {
                ssize_t n = sp_http_client_read(c, buf, sizeof(buf), -1, err);
                if (n < 0)
                        return (int)n;
                if (n == 0)
                        return status;
                if ((size_t)n > max_body - got) {
                        sp_http_client_close(c);
                        return sp_error_set(err, SP_E_TOO_LARGE, "response body from %s larger than %zu bytes",
                                            c->host_header, max_body);
                }
                got += (size_t)n;
                int r = sp_buf_append(body, buf, (size_t)n, err);
                if (r < 0) {
                        sp_http_client_close(c);
                        return r;
                }
        }
}

ssize_t sp_http_body_source_fd(void *buf, size_t cap, void *userdata, sp_error **err)
{
        int fd = *(const int *)userdata;
        for (;;) {
                ssize_t n = read(fd, buf, cap);
                if (n >= 0)
                        return n;
                if (errno != EINTR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read");
        }
}
