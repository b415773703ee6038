/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the worker's agent link (worker/backend/agent_link.h) against a
 * hostile agent. The agent runs in the sandbox, whose root can replace it,
 * so the worker counts the credit it grants: a peer on a socketpair speaks
 * the agent protocol and sends a file's content, a port connection's bytes
 * and a command's output within and beyond that credit. Within it every byte
 * is handed on (and acknowledgements grant more); beyond it the channel is
 * closed (CANCEL to the agent, on_lost with the reason to its owner, the
 * link's on_overrun for the log) and nothing past the credit reaches the
 * owner, while the connection and its other channels go on. A real agent
 * never overruns, which is why this peer is a fake. */
#include <errno.h>
#include <event2/event.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/agent_link.h"
#include "harness.h"
#include "space/agent_proto.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

static struct event_base *base;
static wk_agent_link *link_;
static int peer = -1; /* the fake agent's end */
static pr_agent_decoder peer_dec;
static int overruns;
static char overrun_msg[512];

/* What one channel's owner was told. */
typedef struct {
        size_t data[PR_STREAM__MAX];
        bool exited, lost;
        char lost_msg[512];
} owner;

static void o_data(uint8_t stream, const void *p, size_t n, void *ud)
{
        (void)p;
        owner *who = ud;
        ck_assert_uint_lt(stream, PR_STREAM__MAX);
        who->data[stream] += n;
}

static void o_exit(json_object *result, void *ud)
{
        (void)result;
        ((owner *)ud)->exited = true;
}

static void o_lost(const sp_error *e, void *ud)
{
        owner *who = ud;
        who->lost = true;
        snprintf(who->lost_msg, sizeof(who->lost_msg), "%s", e ? e->message : "");
}

/* The owners (the link tells those still open on_lost when it is freed). */
static owner o, o2, o3;

static const wk_agent_channel_ops owner_ops = {.on_data = o_data, .on_exit = o_exit, .on_lost = o_lost};

static void on_overrun(wk_agent_link *l, const sp_error *e, void *ud)
{
        (void)l;
        (void)ud;
        overruns++;
        snprintf(overrun_msg, sizeof(overrun_msg), "%s", e->message);
}

static const wk_agent_link_ops link_ops = {.on_overrun = on_overrun};

/* Runs the loop until nothing is left to do at once (the link's writes, its
 * reads of what the peer sent). */
static void spin(void)
{
        for (int i = 0; i < 20; i++)
                event_base_loop(base, EVLOOP_NONBLOCK);
}

static void peer_send(uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n)
{
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        sp_error *e = NULL;
        sp_test_ok(pr_agent_frame_append(&out, type, stream, channel, p, n, &e), &e);
        size_t off = 0;
        while (off < out.len) {
                /* The link reads as we write: let it drain the socket when full. */
                ssize_t w = write(peer, out.data + off, out.len - off);
                if (w < 0 && errno == EAGAIN) {
                        spin();
                        continue;
                }
                ck_assert_msg(w > 0, "write to the link: %s", strerror(errno));
                off += (size_t)w;
        }
        spin();
}

static void peer_data(uint32_t channel, uint8_t stream, size_t n)
{
        _cleanup_free_ uint8_t *p = calloc(1, n ? n : 1);
        ck_assert_ptr_nonnull(p);
        peer_send(PR_AGENT_DATA, stream, channel, p, n);
}

/* What the peer received: the frames of one kind on one channel. */
typedef struct {
        uint8_t type;
        uint32_t channel;
        int count;
        uint64_t credit; /* sum of WINDOW credits */
} peer_want;

static int peer_frame(const pr_agent_frame *f, void *ud, sp_error **err)
{
        peer_want *w = ud;
        if (f->type != w->type || f->channel != w->channel)
                return 0;
        w->count++;
        uint32_t c;
        if (f->type == PR_AGENT_WINDOW && pr_agent_window_decode(f, &c, err) == 0)
                w->credit += c;
        return 0;
}

/* Reads what the link has sent the peer so far and counts the frames of
 * type on channel. */
static peer_want peer_read(uint8_t type, uint32_t channel)
{
        spin();
        peer_want w = {.type = type, .channel = channel};
        uint8_t buf[65536];
        for (;;) {
                ssize_t n = read(peer, buf, sizeof(buf));
                if (n <= 0)
                        break;
                sp_error *e = NULL;
                sp_test_ok(pr_agent_decoder_feed(&peer_dec, buf, (size_t)n, peer_frame, &w, &e), &e);
        }
        return w;
}

static uint32_t open_channel(const char *request, owner *who)
{
        _cleanup_json_ json_object *req = NULL;
        sp_error *e = NULL;
        sp_test_ok(sp_json_parse(request, strlen(request), &req, &e), &e);
        uint32_t ch = wk_agent_open(link_, req, &owner_ops, who, &e);
        ck_assert_msg(ch, "open: %s", e ? e->message : "?");
        ck_assert_int_eq(peer_read(PR_AGENT_OPEN, ch).count, 1);
        return ch;
}

static void setup(void)
{
        int sv[2];
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
        peer = sv[1];
        base = event_base_new();
        sp_error *e = NULL;
        link_ = wk_agent_link_new_fd(base, sv[0], &link_ops, NULL, &e);
        ck_assert_msg(link_, "link: %s", e ? e->message : "?");
        ck_assert_int_eq(peer_read(PR_AGENT_HELLO, 0).count, 1);
        const char *h = "{\"version\":1,\"agent\":\"hostile/1\"}";
        peer_send(PR_AGENT_HELLO, 0, 0, h, strlen(h));
        overruns = 0;
        o = o2 = o3 = (owner){0};
}

static void teardown(void)
{
        wk_agent_link_free(link_);
        link_ = NULL;
        event_base_free(base);
        close(peer);
        peer = -1;
        pr_agent_decoder_free(&peer_dec);
        peer_dec = (pr_agent_decoder){0};
}

/* A file read: its window, then what the owner acknowledges, is what the
 * agent may send; an agent that keeps to it is served in full. */
START_TEST(a_read_within_its_credit_is_handed_on)
{
        uint32_t ch = open_channel("{\"op\":\"read\",\"path\":\"/f\",\"window\":8192}", &o);
        peer_data(ch, PR_STREAM_FILE, 4096);
        peer_data(ch, PR_STREAM_FILE, 4096);
        ck_assert_uint_eq(o.data[PR_STREAM_FILE], 8192);
        sp_error *e = NULL;
        sp_test_ok(wk_agent_ack(link_, ch, PR_STREAM_FILE, 8192, &e), &e);
        peer_want w = peer_read(PR_AGENT_WINDOW, ch);
        ck_assert_uint_eq(w.credit, 8192);
        peer_data(ch, PR_STREAM_FILE, 8192);
        ck_assert_uint_eq(o.data[PR_STREAM_FILE], 16384);
        peer_send(PR_AGENT_EXIT, 0, ch, "{\"size\":16384}", 14);
        ck_assert(o.exited);
        ck_assert(!o.lost);
        ck_assert_int_eq(overruns, 0);
}
END_TEST

/* One byte past the credit closes the read: the owner holds only what was
 * granted, is told why, the agent is told CANCEL, and the connection serves
 * another channel. */
START_TEST(a_read_beyond_its_credit_closes_the_channel)
{
        uint32_t ch = open_channel("{\"op\":\"read\",\"path\":\"/f\",\"window\":8192}", &o);
        uint32_t ch2 = open_channel("{\"op\":\"read\",\"path\":\"/g\",\"window\":8192}", &o2);
        peer_data(ch, PR_STREAM_FILE, 8192);
        peer_data(ch, PR_STREAM_FILE, 1);
        ck_assert_uint_eq(o.data[PR_STREAM_FILE], 8192);
        ck_assert_msg(o.lost, "an overrun was accepted");
        ck_assert_msg(strstr(o.lost_msg, "granted"), "message: %s", o.lost_msg);
        ck_assert_int_eq(overruns, 1);
        ck_assert_str_eq(overrun_msg, o.lost_msg);
        ck_assert_int_eq(peer_read(PR_AGENT_CANCEL, ch).count, 1);
        /* What it sends after is dropped; the other channel is served. */
        peer_data(ch, PR_STREAM_FILE, 65536);
        ck_assert_uint_eq(o.data[PR_STREAM_FILE], 8192);
        peer_data(ch2, PR_STREAM_FILE, 8192);
        ck_assert_uint_eq(o2.data[PR_STREAM_FILE], 8192);
        ck_assert(!o2.lost);
        ck_assert(wk_agent_link_ready(link_));
        ck_assert_int_eq(overruns, 1);
}
END_TEST

/* A port connection without a window gets the default one (256 KiB); a
 * frame larger than what is left of it is refused whole. */
START_TEST(a_port_connection_beyond_its_credit_is_closed)
{
        uint32_t ch = open_channel("{\"op\":\"connect\",\"port\":80}", &o);
        peer_data(ch, PR_STREAM_PORT, PR_AGENT_DEFAULT_WINDOW - 100);
        ck_assert(!o.lost);
        sp_error *e = NULL;
        sp_test_ok(wk_agent_ack(link_, ch, PR_STREAM_PORT, 50, &e), &e);
        peer_data(ch, PR_STREAM_PORT, 151);
        ck_assert_msg(o.lost, "an overrun was accepted");
        ck_assert_uint_eq(o.data[PR_STREAM_PORT], PR_AGENT_DEFAULT_WINDOW - 100);
        ck_assert_int_eq(peer_read(PR_AGENT_CANCEL, ch).count, 1);
        ck_assert_int_eq(overruns, 1);
}
END_TEST

/* A command's stdout and stderr have a credit each; a stream the request
 * does not read from the agent (stdin, a file) has none. */
START_TEST(streams_have_their_own_credit)
{
        uint32_t ch = open_channel("{\"op\":\"exec\",\"session\":\"s1\",\"argv\":[\"x\"],\"window\":4096}", &o);
        peer_data(ch, PR_STREAM_STDOUT, 4096);
        peer_data(ch, PR_STREAM_STDERR, 4096);
        ck_assert(!o.lost);
        peer_data(ch, PR_STREAM_STDERR, 1);
        ck_assert(o.lost);
        ck_assert_uint_eq(o.data[PR_STREAM_STDOUT] + o.data[PR_STREAM_STDERR], 8192);

        uint32_t ch2 = open_channel("{\"op\":\"exec\",\"session\":\"s2\",\"argv\":[\"x\"]}", &o2);
        peer_data(ch2, PR_STREAM_STDIN, 1);
        ck_assert(o2.lost);
        ck_assert_uint_eq(o2.data[PR_STREAM_STDIN], 0);

        uint32_t ch3 = open_channel("{\"op\":\"stat\",\"path\":\"/\"}", &o3);
        peer_data(ch3, PR_STREAM_FILE, 1);
        ck_assert(o3.lost);
        ck_assert_int_eq(overruns, 3);
        ck_assert(wk_agent_link_ready(link_));
}
END_TEST

int main(void)
{
        Suite *s = suite_create("agent_link");
        TCase *tc = tcase_create("credit");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, a_read_within_its_credit_is_handed_on);
        tcase_add_test(tc, a_read_beyond_its_credit_closes_the_channel);
        tcase_add_test(tc, a_port_connection_beyond_its_credit_is_closed);
        tcase_add_test(tc, streams_have_their_own_credit);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
