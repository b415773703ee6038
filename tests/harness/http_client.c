/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_client.h"
#include "space/buf.h"
#include "space/time.h"

int sp_test_http(int port, const char *method, const char *path, const char *const *headers, const char *body,
                 int64_t timeout_ms, sp_test_http_response *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "socket");
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int er = errno;
                close(fd);
                return sp_error_set_errno(err, SP_E_UNAVAILABLE, er, "connect to port %d", port);
        }
        sp_buf req = SP_BUF_INIT;
        sp_buf_appendf(&req, NULL, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n", method, path);
        for (size_t i = 0; headers && headers[i]; i++)
                sp_buf_appendf(&req, NULL, "%s\r\n", headers[i]);
        if (body)
                sp_buf_appendf(&req, NULL, "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                               strlen(body), body);
        else
                sp_buf_appendf(&req, NULL, "Content-Length: 0\r\n\r\n");
        size_t off = 0;
        while (off < req.len) {
                ssize_t n = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL);
                if (n <= 0) {
                        int er = errno;
                        sp_buf_free(&req);
                        close(fd);
                        return sp_error_set_errno(err, SP_E_IO, er, "send");
                }
                off += (size_t)n;
        }
        sp_buf_free(&req);
        sp_buf in = SP_BUF_INIT;
        int64_t deadline = sp_now_mono_us() + timeout_ms * 1000;
        for (;;) {
                int64_t left = (deadline - sp_now_mono_us()) / 1000;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
                        sp_buf_free(&in);
                        close(fd);
                        return sp_error_set(err, SP_E_TIMEOUT, "%s %s: no complete answer in %lld ms", method, path,
                                            (long long)timeout_ms);
                }
                char chunk[65536];
                ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                sp_buf_append(&in, chunk, (size_t)n, NULL);
        }
        close(fd);
        sp_buf_append(&in, "", 1, NULL);
        char *sep = in.data ? strstr(in.data, "\r\n\r\n") : NULL;
        if (!sep || sscanf(in.data, "HTTP/1.%*d %d", &ret->status) != 1) {
                sp_buf_free(&in);
                return sp_error_set(err, SP_E_INVALID, "%s %s: malformed answer", method, path);
        }
        *sep = '\0';
        ret->headers = strdup(in.data);
        ret->body = strdup(sep + 4);
        ret->body_len = strlen(ret->body);
        sp_buf_free(&in);
        return 0;
}

void sp_test_http_response_free(sp_test_http_response *r)
{
        free(r->headers);
        free(r->body);
        memset(r, 0, sizeof(*r));
}

json_object *sp_test_http_json(const sp_test_http_response *r)
{
        return r->body ? json_tokener_parse(r->body) : NULL;
}

int sp_test_dial(int port, sp_error **err)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "socket");
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;
                close(fd);
                return sp_error_set_errno(err, SP_E_UNAVAILABLE, e, "connect to 127.0.0.1:%d", port);
        }
        return fd;
}

int sp_test_read_answer(int fd, int64_t wait_ms, sp_buf *out)
{
        int64_t deadline = sp_now_mono_us() / 1000 + wait_ms;
        for (;;) {
                int64_t left = deadline - sp_now_mono_us() / 1000;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, (int)left) != 1)
                        break;
                char buf[4096];
                ssize_t r = read(fd, buf, sizeof(buf));
                if (r <= 0)
                        break;
                sp_buf_append(out, buf, (size_t)r, NULL);
                sp_buf_append(out, "", 0, NULL);
                out->len--;
                const char *body = strstr(out->data, "\r\n\r\n");
                if (body && (strchr(body, '}') || strstr(body, "event:")))
                        break;
        }
        int status = 0;
        if (out->len && sscanf(out->data, "HTTP/1.%*d %d", &status) != 1)
                status = -1;
        return status;
}
