/* SPDX-License-Identifier: Apache-2.0 */
/* Flow-controlled output streams with a resend buffer (spec: "Flow control"). */
#include <errno.h>
#include <unistd.h>

#include "agent.h"
#include "space/cleanup.h"

#define READ_CHUNK (64u << 10)
#define FRAME_CHUNK (64u << 10)

void ag_outstream_init(ag_outstream *s, int fd, uint32_t window)
{
        *s = (ag_outstream){.fd = fd, .window = window, .credit = window};
        s->watch.fd = fd;
}

void ag_outstream_close_fd(ag_outstream *s)
{
        if (s->fd >= 0) {
                ag_loop_del(&s->watch);
                close(s->fd);
        }
        s->fd = -1;
        s->watch.fd = -1;
}

void ag_outstream_free(ag_outstream *s)
{
        ag_outstream_close_fd(s);
        sp_buf_free(&s->buf);
}

bool ag_outstream_wants_input(const ag_outstream *s)
{
        /* Keep at most window bytes unacknowledged plus one read in hand. */
        return s->fd >= 0 && !s->eof && s->buf.len < (size_t)s->window + READ_CHUNK &&
               s->buf.len - s->sent < READ_CHUNK;
}

ssize_t ag_outstream_fill(ag_outstream *s)
{
        if (!ag_outstream_wants_input(s))
                return -1;
        sp_buf_reserve(&s->buf, READ_CHUNK, NULL);
        ssize_t n;
        do
                n = read(s->fd, s->buf.data + s->buf.len, READ_CHUNK);
        while (n < 0 && errno == EINTR);
        if (n > 0) {
                s->buf.len += (size_t)n;
                return n;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                /* EOF, or EIO from a PTY whose slave side closed: the end. */
                s->eof = true;
                ag_outstream_close_fd(s);
                return 0;
        }
        return -1;
}

bool ag_outstream_flush(ag_outstream *s, ag_conn *c, uint32_t channel, uint8_t stream)
{
        bool any = false;
        if (!c)
                return false;
        while (s->sent < s->buf.len && s->credit > 0 && ag_conn_can_send(c)) {
                size_t n = s->buf.len - s->sent;
                if (n > s->credit)
                        n = (size_t)s->credit;
                if (n > FRAME_CHUNK)
                        n = FRAME_CHUNK;
                ag_conn_send(c, PR_AGENT_DATA, stream, channel, s->buf.data + s->sent, n);
                s->sent += n;
                s->credit -= n;
                any = true;
        }
        if (s->eof && !s->eof_sent && s->sent == s->buf.len) {
                ag_conn_send(c, PR_AGENT_EOF, stream, channel, NULL, 0);
                s->eof_sent = true;
                any = true;
        }
        return any;
}

int ag_outstream_ack(ag_outstream *s, uint32_t n, sp_error **err)
{
        if (n > s->sent)
                return sp_error_set(err, SP_E_INVALID, "WINDOW acknowledges %u bytes but only %zu are unacknowledged",
                                    n, s->sent);
        sp_buf_consume(&s->buf, n);
        s->sent -= n;
        s->acked += n;
        s->credit += n;
        return 0;
}

int ag_outstream_rewind(ag_outstream *s, int64_t offset, uint32_t window, sp_error **err)
{
        int64_t produced = s->acked + (int64_t)s->buf.len;
        if (offset < s->acked || offset > produced)
                return sp_error_set(err, SP_E_CONFLICT, "offset %lld is outside the retained range [%lld, %lld]",
                                    (long long)offset, (long long)s->acked, (long long)produced);
        sp_buf_consume(&s->buf, (size_t)(offset - s->acked));
        s->acked = offset;
        s->sent = 0;
        s->credit = window;
        s->window = window;
        s->eof_sent = false;
        return 0;
}

bool ag_outstream_done(const ag_outstream *s)
{
        return s->eof && s->eof_sent && s->sent == s->buf.len;
}
