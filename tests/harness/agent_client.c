/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent_client.h"
#include "harness.h"
#include "space/json.h"

#define QUEUE 4096

struct sp_test_agent {
        int fd;
        pr_agent_decoder dec;
        sp_test_frame q[QUEUE];
        size_t head, tail;
};

static int queue_frame(const pr_agent_frame *f, void *ud, sp_error **err)
{
        sp_test_agent *a = ud;
        (void)err;
        ck_assert_uint_lt(a->tail - a->head, QUEUE);
        sp_test_frame *fr = &a->q[a->tail++ % QUEUE];
        fr->type = f->type;
        fr->stream = f->stream;
        fr->channel = f->channel;
        fr->payload = (sp_buf)SP_BUF_INIT;
        sp_buf_append(&fr->payload, f->payload, f->length, NULL);
        return 0;
}

static void send_buf(sp_test_agent *a, sp_buf *b)
{
        size_t off = 0;
        while (off < b->len) {
                ssize_t n = write(a->fd, b->data + off, b->len - off);
                ck_assert_msg(n > 0, "write to agent: %s", strerror(errno));
                off += (size_t)n;
        }
        sp_buf_free(b);
}

sp_test_frame sp_test_agent_next(sp_test_agent *a)
{
        while (a->head == a->tail) {
                char buf[65536];
                ssize_t n = read(a->fd, buf, sizeof(buf));
                ck_assert_msg(n > 0, "agent closed the connection (%s)", n < 0 ? strerror(errno) : "EOF");
                ck_assert_int_eq(pr_agent_decoder_feed(&a->dec, buf, (size_t)n, queue_frame, a, NULL), 0);
        }
        return a->q[a->head++ % QUEUE];
}

sp_test_agent *sp_test_agent_connect(const char *path, int timeout_ms)
{
        sp_test_agent *a = calloc(1, sizeof(*a));
        ck_assert_ptr_nonnull(a);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
        strcpy(sa.sun_path, path);
        for (int waited = 0;; waited += 10) {
                a->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (connect(a->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
                        break;
                close(a->fd);
                ck_assert_msg(waited < timeout_ms, "cannot connect to the agent at %s: %s", path, strerror(errno));
                usleep(10000);
        }
        struct timeval tv = {.tv_sec = 30};
        setsockopt(a->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        sp_test_frame h = sp_test_agent_next(a);
        ck_assert_int_eq(h.type, PR_AGENT_HELLO);
        sp_buf_free(&h.payload);
        sp_buf b = SP_BUF_INIT;
        pr_agent_frame_append(&b, PR_AGENT_HELLO, 0, 0, "{\"version\":1}", 13, NULL);
        send_buf(a, &b);
        return a;
}

void sp_test_agent_close(sp_test_agent *a)
{
        if (!a)
                return;
        close(a->fd);
        while (a->head != a->tail)
                sp_buf_free(&a->q[a->head++ % QUEUE].payload);
        pr_agent_decoder_free(&a->dec);
        free(a);
}

void sp_test_agent_send(sp_test_agent *a, uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n)
{
        sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(pr_agent_frame_append(&b, type, stream, channel, p, n, NULL), 0);
        send_buf(a, &b);
}

void sp_test_agent_open(sp_test_agent *a, uint32_t channel, const char *json)
{
        sp_test_agent_send(a, PR_AGENT_OPEN, 0, channel, json, strlen(json));
}

void sp_test_agent_ack(sp_test_agent *a, uint32_t channel, uint8_t stream, uint32_t n)
{
        sp_buf b = SP_BUF_INIT;
        pr_agent_frame_append_window(&b, stream, channel, n, NULL);
        send_buf(a, &b);
}

void sp_test_agent_run_to_exit(sp_test_agent *a, uint32_t channel, sp_test_result *r, bool auto_ack)
{
        for (;;) {
                sp_test_frame f = sp_test_agent_next(a);
                ck_assert_int_eq(f.channel, channel);
                if (f.type == PR_AGENT_DATA) {
                        sp_buf_append(f.stream == PR_STREAM_STDERR ? &r->err : &r->out, f.payload.data, f.payload.len,
                                      NULL);
                        if (auto_ack && f.payload.len)
                                sp_test_agent_ack(a, channel, f.stream, (uint32_t)f.payload.len);
                } else if (f.type == PR_AGENT_REPLY) {
                        r->started = true;
                } else if (f.type == PR_AGENT_EXIT) {
                        ck_assert_int_eq(sp_json_parse(f.payload.data, f.payload.len, &r->exit, NULL), 0);
                        sp_buf_free(&f.payload);
                        if (!r->out.data)
                                sp_buf_append(&r->out, "", 0, NULL);
                        if (!r->err.data)
                                sp_buf_append(&r->err, "", 0, NULL);
                        return;
                }
                sp_buf_free(&f.payload);
        }
}

void sp_test_result_free(sp_test_result *r)
{
        sp_buf_free(&r->out);
        sp_buf_free(&r->err);
        if (r->exit)
                json_object_put(r->exit);
        r->exit = NULL;
}

int64_t sp_test_result_int(const sp_test_result *r, const char *field)
{
        json_object *v;
        ck_assert_msg(json_object_object_get_ex(r->exit, field, &v), "EXIT lacks %s: %s", field,
                      json_object_to_json_string(r->exit));
        return json_object_get_int64(v);
}

const char *sp_test_result_error(const sp_test_result *r)
{
        json_object *e, *code;
        if (!json_object_object_get_ex(r->exit, "error", &e) || !json_object_object_get_ex(e, "code", &code))
                return NULL;
        return json_object_get_string(code);
}

void sp_test_agent_exec(sp_test_agent *a, uint32_t channel, const char *argv_json, sp_test_result *r)
{
        char json[8192];
        snprintf(json, sizeof(json), "{\"op\":\"exec\",\"session\":\"t%u\",\"argv\":%s}", channel, argv_json);
        sp_test_agent_open(a, channel, json);
        memset(r, 0, sizeof(*r));
        sp_test_agent_run_to_exit(a, channel, r, true);
}
