/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-dataplane with a real worker, real sandboxes and real sockets (needs
 * root: the worker's btrfs, namespaces and cgroups). Command sessions are
 * started with the worker's Exec (as the control plane would), and clients
 * use only the data plane:
 *   - 100 MB of known output arrives byte-exact (SHA-256) through a client
 *     that disconnects and resumes with Last-Event-ID several times, and
 *     through a slow reader while the data plane's memory stays flat and the
 *     command is held back by the worker's bounded log;
 *   - the data plane SIGKILLed mid-stream and restarted: the client resumes
 *     and gets every byte exactly once;
 *   - two data-plane replicas serve one session at once;
 *   - events, ids, offsets (header and query), keep-alive comments, the
 *     refusals of offsets before and past the output, curl as a client;
 *   - the same as raw frames (?format=raw): byte-exact through reconnects,
 *     a slow reader and a data plane SIGKILLed mid-frame; frames, offsets,
 *     keepalive frames, curl over chunked HTTP/1.1, and the refusals of the
 *     event stream with the same statuses;
 *   - stdin through cat (whole bodies and chunked ones, close and
 *     close-stdin), a PTY that sees its resize, signals by name and number.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dataplane/env.h"
#include "harness.h"
#include "launcher.h"
#include "proc.h"
#include "space/buf.h"
#include "space/attach_frames.h"
#include "space/cleanup.h"
#include "space/json.h"

#define SBX "sbx_dpt00000000000000001"
#define MiB (1024 * 1024)
/* `seq 1 SEQ_N` prints 99,999,999 bytes. */
#define SEQ_N 12345678

static dpt_env env;
static sp_test_proc dp_a, dp_b;
static int port_a, port_b;

static void case_setup(void)
{
        dpt_env_up(&env, true, 4);
        static const char *const extra[] = {"--keepalive-ms=1000", NULL};
        port_a = dpt_dataplane_start(&env, &dp_a, "dataplane-a", extra);
        port_b = dpt_dataplane_start(&env, &dp_b, "dataplane-b", extra);
        dpt_sandbox(&env, SBX, 0);
}

static void case_teardown(void)
{
        bool clean = dpt_dataplane_stop(&dp_a);
        clean = dpt_dataplane_stop(&dp_b) && clean;
        dpt_env_down(&env);
        ck_assert_msg(clean, "a data plane did not stop cleanly");
}

/* ---- sessions ---- */

/* Starts argv (JSON array text) as session ses; extra is more Exec fields ("" or ",\"stdin\":true"...). */
static void exec(const char *ses, const char *argv, const char *extra)
{
        json_object_put(dpt_rpcf(&env, "Exec", "{\"sandbox_id\":\"%s\",\"session_id\":\"%s\",\"argv\":%s%s}", SBX, ses,
                                 argv, extra));
}

static char *token(const char *ses, const char *scope)
{
        return dpt_token(env.signer, "session", SBX, ses, env.worker_addr, scope, NULL, 3600);
}

/* The SHA-256 and length of `seq 1 n`. */
static void seq_digest(uint64_t n, unsigned char out[32], uint64_t *ret_len)
{
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(md, EVP_sha256(), NULL);
        char buf[1 << 16];
        size_t used = 0;
        uint64_t len = 0;
        for (uint64_t i = 1; i <= n; i++) {
                if (used > sizeof(buf) - 32) {
                        EVP_DigestUpdate(md, buf, used);
                        len += used;
                        used = 0;
                }
                used += (size_t)snprintf(buf + used, sizeof(buf) - used, "%llu\n", (unsigned long long)i);
        }
        EVP_DigestUpdate(md, buf, used);
        len += used;
        unsigned int dl = 32;
        EVP_DigestFinal_ex(md, out, &dl);
        EVP_MD_CTX_free(md);
        *ret_len = len;
}

/* ---- an SSE client over raw sockets ---- */

/* What one client has received, across its connections. */
typedef struct consumer {
        uint64_t offset; /* the id of the last output event: where a reconnect resumes */
        uint64_t bytes[2]; /* stdout, stderr */
        EVP_MD_CTX *sha; /* over stdout and stderr in offset order */
        sp_buf text; /* the output, while shorter than keep */
        size_t keep;
        int starts, comments;
        bool exited;
        json_object *exit;
        char error[512]; /* the data of an error event */
        uint64_t start_id; /* the id of the last start event */
        bool raw; /* attaches with ?format=raw and reads frames */
        size_t frame; /* raw: output bytes of the frame being read */
        size_t max_frame; /* raw: the largest output frame */
} consumer;

typedef struct conn {
        int fd;
        int status;
        bool head_done, eof;
        sp_buf in;
        char id[32], event[32];
        bool has_id;
        sp_buf data;
        consumer *c;
        sp_attach_frames frames; /* raw */
} conn;

static void consumer_init(consumer *c, size_t keep)
{
        memset(c, 0, sizeof(*c));
        c->sha = EVP_MD_CTX_new();
        EVP_DigestInit_ex(c->sha, EVP_sha256(), NULL);
        c->keep = keep;
}

static void consumer_free(consumer *c)
{
        EVP_MD_CTX_free(c->sha);
        sp_buf_free(&c->text);
        if (c->exit)
                json_object_put(c->exit);
}

static void consumer_digest(consumer *c, unsigned char out[32])
{
        unsigned int dl = 32;
        EVP_DigestFinal_ex(c->sha, out, &dl);
}

static int exit_field(const consumer *c, const char *name)
{
        json_object *v = NULL;
        ck_assert_msg(c->exit && json_object_object_get_ex(c->exit, name, &v), "no exit %s", name);
        return json_object_get_int(v);
}

/* Output bytes at the consumer's offset (either format). */
static void output(consumer *c, int stream, const void *p, size_t n)
{
        c->offset += n;
        c->bytes[stream] += n;
        EVP_DigestUpdate(c->sha, p, n);
        if (c->text.len + n <= c->keep)
                sp_buf_append(&c->text, p, n, NULL);
}

/* Handles one raw chunk: output counts as it arrives (its offset is known
 * without a frame's end), start and exit must be at the offset reached. */
static void raw_chunk(consumer *c, const sp_attach_chunk *ch)
{
        _cleanup_json_ json_object *o = NULL;
        int64_t at = -1;
        switch (ch->type) {
        case SP_ATTACH_FRAME_STDOUT:
        case SP_ATTACH_FRAME_STDERR:
                ck_assert_msg(!c->exited, "output after the exit frame");
                output(c, ch->type - 1, ch->data, ch->len);
                c->frame += ch->len;
                if (ch->last) {
                        ck_assert_msg(c->frame <= 256 * 1024, "a frame of %zu bytes", c->frame);
                        if (c->frame > c->max_frame)
                                c->max_frame = c->frame;
                        c->frame = 0;
                }
                return;
        case SP_ATTACH_FRAME_START:
        case SP_ATTACH_FRAME_EXIT:
                ck_assert_msg(sp_json_parse((const char *)ch->data, ch->len, &o, NULL) == 0, "frame %u: %.*s", ch->type,
                              (int)ch->len, ch->data);
                ck_assert_int_eq(sp_json_get_int(o, "offset", true, 0, INT64_MAX, &at, NULL), 0);
                ck_assert_msg((uint64_t)at == c->offset, "frame %u at offset %lld, the output at %llu", ch->type,
                              (long long)at, (unsigned long long)c->offset);
                if (ch->type == SP_ATTACH_FRAME_START) {
                        c->starts++;
                        c->start_id = (uint64_t)at;
                        ck_assert_msg(json_object_object_get_ex(o, "session_id", NULL) &&
                                              json_object_object_get_ex(o, "pid", NULL),
                                      "start: %.*s", (int)ch->len, ch->data);
                } else {
                        c->exit = TAKE_PTR(o);
                        c->exited = true;
                }
                return;
        case SP_ATTACH_FRAME_ERROR:
                snprintf(c->error, sizeof(c->error), "%.*s", (int)ch->len, ch->data);
                return;
        case SP_ATTACH_FRAME_KEEPALIVE:
                c->comments++;
                return;
        default:
                ck_abort_msg("unexpected frame type %u", ch->type);
        }
}

/* Handles one complete event. */
static void dispatch(conn *k)
{
        consumer *c = k->c;
        const char *ev = k->event[0] ? k->event : "message";
        uint64_t id = k->has_id ? strtoull(k->id, NULL, 10) : 0;
        if (strcmp(ev, "stdout") == 0 || strcmp(ev, "stderr") == 0) {
                _cleanup_buf_ sp_buf raw = SP_BUF_INIT;
                ck_assert_msg(sp_base64_decode(&raw, k->data.data ? k->data.data : "", k->data.len, 0, NULL) == 0,
                              "bad base64 in an event");
                ck_assert_msg(raw.len > 0 && raw.len <= 48 * 1024, "an event of %zu bytes", raw.len);
                ck_assert_msg(k->has_id && id == c->offset + raw.len, "event id %llu after offset %llu + %zu bytes",
                              (unsigned long long)id, (unsigned long long)c->offset, raw.len);
                output(c, ev[3] == 'o' ? 0 : 1, raw.data, raw.len);
        } else if (strcmp(ev, "start") == 0) {
                c->starts++;
                c->start_id = id;
                ck_assert_msg(k->has_id && id == c->offset, "start id %llu at offset %llu", (unsigned long long)id,
                              (unsigned long long)c->offset);
                ck_assert_msg(strstr(k->data.data, "\"session_id\":\"ses_") && strstr(k->data.data, "\"pid\":"),
                              "start: %s", k->data.data);
        } else if (strcmp(ev, "exit") == 0) {
                ck_assert_msg(k->has_id && id == c->offset, "exit id %llu at offset %llu", (unsigned long long)id,
                              (unsigned long long)c->offset);
                ck_assert_int_eq(sp_json_parse(k->data.data, k->data.len, &c->exit, NULL), 0);
                c->exited = true;
        } else if (strcmp(ev, "error") == 0) {
                snprintf(c->error, sizeof(c->error), "%s", k->data.data);
        } else {
                ck_abort_msg("unexpected event '%s'", ev);
        }
        k->id[0] = k->event[0] = '\0';
        k->has_id = false;
        sp_buf_clear(&k->data);
}

/* Parses the complete lines in k->in. */
static void parse(conn *k)
{
        if (!k->head_done) {
                const char *end = k->in.data ? strstr(k->in.data, "\r\n\r\n") : NULL;
                if (!end)
                        return;
                ck_assert_int_eq(sscanf(k->in.data, "HTTP/1.%*d %d", &k->status), 1);
                k->head_done = true;
                sp_buf_consume(&k->in, (size_t)(end + 4 - k->in.data));
                if (k->status != 200)
                        return;
        }
        if (k->status != 200)
                return;
        if (k->c->raw) {
                size_t at = 0;
                while (at < k->in.len) {
                        size_t used = 0;
                        sp_attach_chunk ch;
                        _cleanup_error_ sp_error *e = NULL;
                        int r = sp_attach_frames_next(&k->frames, (const uint8_t *)k->in.data + at, k->in.len - at,
                                                      &used, &ch, &e);
                        ck_assert_msg(r >= 0, "bad frames: %s", e ? e->message : "");
                        at += used;
                        if (r == 1)
                                raw_chunk(k->c, &ch);
                }
                sp_buf_clear(&k->in);
                return;
        }
        for (;;) {
                char *nl = k->in.len ? memchr(k->in.data, '\n', k->in.len) : NULL;
                if (!nl)
                        return;
                size_t n = (size_t)(nl - k->in.data);
                *nl = '\0';
                const char *line = k->in.data;
                if (n == 0) {
                        if (k->has_id || k->event[0] || k->data.len)
                                dispatch(k);
                } else if (line[0] == ':') {
                        k->c->comments++;
                } else if (strncmp(line, "id: ", 4) == 0) {
                        snprintf(k->id, sizeof(k->id), "%s", line + 4);
                        k->has_id = true;
                } else if (strncmp(line, "event: ", 7) == 0) {
                        snprintf(k->event, sizeof(k->event), "%s", line + 7);
                } else if (strncmp(line, "data: ", 6) == 0) {
                        if (k->data.len)
                                sp_buf_append(&k->data, "\n", 1, NULL);
                        sp_buf_append_str(&k->data, line + 6, NULL);
                } else {
                        ck_abort_msg("unexpected line '%.80s'", line);
                }
                sp_buf_consume(&k->in, n + 1);
        }
}

/* Connects to the data plane on port and asks for the session's events from
 * last_event_id (< 0: none given), over HTTP/1.0 (the stream ends with the
 * connection). rcvbuf > 0 makes the socket's receive buffer that small. */
static void conn_open(conn *k, consumer *c, int port, const char *ses, const char *tok, int64_t last_event_id,
                      int rcvbuf)
{
        memset(k, 0, sizeof(*k));
        k->c = c;
        sp_attach_frames_init(&k->frames, 0);
        c->frame = 0;
        k->fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(k->fd, 0);
        if (rcvbuf > 0)
                setsockopt(k->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_msg(connect(k->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s", strerror(errno));
        char req[8192], lei[64] = "";
        if (last_event_id >= 0)
                snprintf(lei, sizeof(lei), "Last-Event-ID: %lld\r\n", (long long)last_event_id);
        int n = snprintf(req, sizeof(req),
                         "GET /v1/sessions/%s/attach%s HTTP/1.0\r\nAuthorization: Bearer %s\r\n%s"
                         "Accept: %s\r\n\r\n",
                         ses, c->raw ? "?format=raw" : "", tok, lei,
                         c->raw ? SP_ATTACH_FRAMES_CONTENT_TYPE : "text/event-stream");
        ck_assert_int_eq(write(k->fd, req, (size_t)n), n);
}

/* One read of at most max bytes (waiting up to 60 s), then parsing. Returns the bytes read. */
static size_t conn_read(conn *k, size_t max)
{
        struct pollfd p = {.fd = k->fd, .events = POLLIN};
        ck_assert_msg(poll(&p, 1, 60000) == 1, "no data for 60 s");
        char buf[1 << 16];
        ssize_t r = read(k->fd, buf, max < sizeof(buf) ? max : sizeof(buf));
        if (r <= 0) {
                k->eof = true;
                return 0;
        }
        sp_buf_append(&k->in, buf, (size_t)r, NULL);
        parse(k);
        return (size_t)r;
}

static void conn_close(conn *k)
{
        if (k->fd >= 0)
                close(k->fd);
        k->fd = -1;
        sp_buf_free(&k->in);
        sp_buf_free(&k->data);
        sp_attach_frames_free(&k->frames);
}

/* Reads until the stream ends (exit, error, or the connection closing). */
static void conn_drain(conn *k)
{
        while (!k->eof && !k->c->exited)
                conn_read(k, 1 << 16);
}

/* A whole attach from offset (< 0: none given) to the end; status returned, body in c. */
static int attach_all(int port, const char *ses, const char *tok, int64_t offset, consumer *c)
{
        conn k;
        conn_open(&k, c, port, ses, tok, offset, 0);
        conn_drain(&k);
        int status = k.status;
        if (status != 200 && !k.head_done)
                status = -1;
        conn_close(&k);
        return status;
}

/* Reads the session (`seq 1 SEQ_N`, digest want) through a slow reader with a small socket buffer: the data
 * plane's memory stays flat, and the command is held back by the worker's bounded log instead of running ahead. */
static void slow_reader(const char *ses, bool raw, const unsigned char want[32])
{
        _cleanup_free_ char *t = token(ses, "read");
        consumer s;
        consumer_init(&s, 0);
        s.raw = raw;
        conn k;
        conn_open(&k, &s, port_b, ses, t, -1, 64 * 1024);
        int64_t base_rss = -1, max_rss = 0;
        uint64_t max_ahead = 0, next_sample = 4 * MiB;
        while (!k.eof && !s.exited) {
                conn_read(&k, 16 * 1024);
                usleep(700);
                if (s.offset < next_sample)
                        continue;
                next_sample += 4 * MiB;
                int64_t rss = dpt_rss(dp_b.pid);
                ck_assert_int_gt(rss, 0);
                if (base_rss < 0)
                        base_rss = rss;
                if (rss > max_rss)
                        max_rss = rss;
                _cleanup_json_ json_object *g = dpt_rpcf(&env, "GetSession", "{\"session_id\":\"%s\"}", ses);
                int64_t end = 0;
                ck_assert_int_eq(sp_json_get_int(g, "output_end", true, 0, INT64_MAX, &end, NULL), 0);
                if ((uint64_t)end - s.offset > max_ahead)
                        max_ahead = (uint64_t)end - s.offset;
        }
        conn_close(&k);
        const char *what = raw ? "raw" : "events";
        ck_assert_msg(s.exited, "the slow stream (%s) ended early: %s", what, s.error);
        unsigned char got[32];
        consumer_digest(&s, got);
        ck_assert_msg(memcmp(got, want, 32) == 0, "the slow reader's output (%s) differs from seq's", what);
        ck_assert_msg(max_rss - base_rss < 64 * MiB, "the data plane grew by %lld bytes (%s)",
                      (long long)(max_rss - base_rss), what);
        /* The log's half beyond the resume window (16 MiB), a segment, and what is in flight; without
         * backpressure seq would be ~80 MB ahead */
        ck_assert_msg(max_ahead < 28 * MiB, "the command ran %llu bytes ahead of the reader (%s)",
                      (unsigned long long)max_ahead, what);
        consumer_free(&s);
}

/* ---- tests ---- */

START_TEST(output_100mb_exact_through_reconnects_and_a_slow_reader)
{
        unsigned char want[32];
        uint64_t want_len = 0;
        seq_digest(SEQ_N, want, &want_len);
        char argv[64];
        snprintf(argv, sizeof(argv), "[\"seq\",\"1\",\"%d\"]", SEQ_N);
        exec("ses_dpt00000000000000a01", argv, "");
        exec("ses_dpt00000000000000a02", argv, "");
        exec("ses_dpt00000000000000a03", argv, "");
        _cleanup_free_ char *t1 = token("ses_dpt00000000000000a01", "read");

        /* A client that hangs up every ~20 MB and resumes where its last event left it. */
        consumer c;
        consumer_init(&c, 0);
        int connects = 0;
        while (!c.exited) {
                conn k;
                conn_open(&k, &c, port_a, "ses_dpt00000000000000a01", t1, connects ? (int64_t)c.offset : -1, 0);
                connects++;
                uint64_t stop_at = c.offset + 20 * MiB + (uint64_t)connects * 1234567;
                while (!k.eof && !c.exited && c.offset < stop_at)
                        conn_read(&k, 1 << 16);
                ck_assert_int_eq(k.status, 200);
                conn_close(&k); /* abruptly, mid-event most of the time */
                ck_assert_int_lt(connects, 20);
        }
        ck_assert_int_ge(connects, 5);
        ck_assert_int_eq(c.starts, connects);
        ck_assert_uint_eq(c.bytes[0], want_len);
        ck_assert_uint_eq(c.offset, want_len);
        unsigned char got[32];
        consumer_digest(&c, got);
        ck_assert_msg(memcmp(got, want, 32) == 0, "the output differs from seq's");
        ck_assert_int_eq(exit_field(&c, "code"), 0);
        consumer_free(&c);

        /* The same through a slow reader with a small socket buffer, as events and as raw frames. */
        slow_reader("ses_dpt00000000000000a02", false, want);
        slow_reader("ses_dpt00000000000000a03", true, want);

        /* What the log no longer holds is 404 before the stream starts; past the end is 400. */
        char h[4200];
        snprintf(h, sizeof(h), "Authorization: Bearer %s", t1);
        const char *gone[] = {h, "Last-Event-ID: 0", NULL};
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(dpt_http(port_a, "GET", "/v1/sessions/ses_dpt00000000000000a01/attach", gone, NULL, 0, &b),
                         404);
        ck_assert_msg(strstr(b.data, "\"not_found\"") && strstr(b.data, "no longer retained"), "%s", b.data);
        sp_buf_clear(&b);
        char past[64];
        snprintf(past, sizeof(past), "Last-Event-ID: %llu", (unsigned long long)want_len + 1);
        const char *after[] = {h, past, NULL};
        ck_assert_int_eq(dpt_http(port_a, "GET", "/v1/sessions/ses_dpt00000000000000a01/attach", after, NULL, 0, &b),
                         400);
        ck_assert_msg(strstr(b.data, "past the end"), "%s", b.data);
}
END_TEST

/* A client stops reading while the command runs on, then hangs up: what was in flight toward it then (its
 * own receive buffer, the data plane's queue and socket, the worker's stream) was sent but never received.
 * It reconnects from the last byte it has, after the command has filled the log past it: the log kept a
 * resume window behind what was sent (half of this worker's 32M log), so nothing is missing. */
START_TEST(a_client_that_hangs_up_with_output_in_flight_resumes_from_what_it_received)
{
        const uint64_t n = 7000000; /* 54,888,897 bytes: more than the log holds */
        unsigned char want[32];
        uint64_t want_len = 0;
        seq_digest(n, want, &want_len);
        char argv[64];
        snprintf(argv, sizeof(argv), "[\"seq\",\"1\",\"%llu\"]", (unsigned long long)n);
        exec("ses_dpt00000000000000a04", argv, "");
        _cleanup_free_ char *t = token("ses_dpt00000000000000a04", "read");
        consumer c;
        consumer_init(&c, 0);
        conn k;
        /* 2 MiB asked (the kernel doubles it): a common client's buffer, smaller than a grown one */
        conn_open(&k, &c, port_a, "ses_dpt00000000000000a04", t, -1, 2 * (int)MiB);
        while (!k.eof && c.offset < 1 * MiB)
                conn_read(&k, 1 << 16);
        ck_assert_int_eq(k.status, 200);
        /* Everything between fills up while the client reads nothing; then it hangs up. */
        sleep(2);
        conn_close(&k);
        _cleanup_json_ json_object *g = dpt_rpcf(&env, "GetSession", "{\"session_id\":\"ses_dpt00000000000000a04\"}");
        int64_t end = 0;
        ck_assert_int_eq(sp_json_get_int(g, "output_end", true, 0, INT64_MAX, &end, NULL), 0);
        fprintf(stderr, "hung up at %llu with the log's end at %llu\n", (unsigned long long)c.offset,
                (unsigned long long)end);
        ck_assert_uint_lt(c.offset, 2 * MiB);
        /* The command goes on into the room the log has (its segments behind the read mark are dropped). */
        sleep(1);
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000a04", t, (int64_t)c.offset, &c), 200);
        ck_assert_msg(c.exited, "no exit: %s", c.error);
        ck_assert_int_eq(c.starts, 2);
        ck_assert_uint_eq(c.offset, want_len);
        unsigned char got[32];
        consumer_digest(&c, got);
        ck_assert_msg(memcmp(got, want, 32) == 0, "the output differs from seq's");
        consumer_free(&c);
}
END_TEST

START_TEST(dataplane_sigkill_mid_stream_loses_nothing)
{
        sp_test_proc mine = {0};
        static const char *const extra[] = {"--keepalive-ms=1000", NULL};
        int port = dpt_dataplane_start(&env, &mine, "dataplane-killed", extra);
        unsigned char want[32];
        uint64_t want_len = 0;
        seq_digest(SEQ_N, want, &want_len);
        char argv[64];
        snprintf(argv, sizeof(argv), "[\"seq\",\"1\",\"%d\"]", SEQ_N);
        exec("ses_dpt00000000000000b01", argv, "");
        _cleanup_free_ char *t = token("ses_dpt00000000000000b01", "read");

        consumer c;
        consumer_init(&c, 0);
        conn k;
        conn_open(&k, &c, port, "ses_dpt00000000000000b01", t, -1, 0);
        while (!k.eof && c.offset < 30 * MiB)
                conn_read(&k, 1 << 16);
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&mine, &e), &e);
        /* What the kernel already had for us still arrives; the last partial event does not count. */
        while (!k.eof)
                conn_read(&k, 1 << 16);
        conn_close(&k);
        ck_assert(!c.exited);
        uint64_t at_kill = c.offset;
        sp_test_ok(sp_test_proc_restart(&mine, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&mine, "127.0.0.1", port, "/healthz", 20000, &e), &e);
        ck_assert_int_eq(attach_all(port, "ses_dpt00000000000000b01", t, (int64_t)c.offset, &c), 200);
        ck_assert_msg(c.exited, "no exit after the restart: %s", c.error);
        ck_assert_uint_gt(at_kill, 0);
        ck_assert_uint_eq(c.bytes[0], want_len);
        unsigned char got[32];
        consumer_digest(&c, got);
        ck_assert_msg(memcmp(got, want, 32) == 0, "bytes were lost or repeated across the restart");
        consumer_free(&c);
        ck_assert(dpt_dataplane_stop(&mine));
}
END_TEST

START_TEST(two_replicas_serve_one_session_at_once)
{
        const uint64_t n = 3000000;
        unsigned char want[32];
        uint64_t want_len = 0;
        seq_digest(n, want, &want_len);
        exec("ses_dpt00000000000000c01", "[\"seq\",\"1\",\"3000000\"]", "");
        _cleanup_free_ char *t = token("ses_dpt00000000000000c01", "read");
        consumer ca, cb;
        consumer_init(&ca, 0);
        consumer_init(&cb, 0);
        conn ka, kb;
        conn_open(&ka, &ca, port_a, "ses_dpt00000000000000c01", t, -1, 0);
        conn_open(&kb, &cb, port_b, "ses_dpt00000000000000c01", t, -1, 0);
        /* Interleaved: each replica streams while the other one is behind or ahead. */
        while ((!ka.eof && !ca.exited) || (!kb.eof && !cb.exited)) {
                if (!ka.eof && !ca.exited && (ca.offset <= cb.offset + MiB || kb.eof || cb.exited))
                        conn_read(&ka, 1 << 16);
                if (!kb.eof && !cb.exited && (cb.offset <= ca.offset + MiB || ka.eof || ca.exited))
                        conn_read(&kb, 1 << 16);
        }
        conn_close(&ka);
        conn_close(&kb);
        unsigned char got[32];
        consumer *cs[] = {&ca, &cb};
        for (int i = 0; i < 2; i++) {
                ck_assert_msg(cs[i]->exited, "replica %d: %s", i, cs[i]->error);
                ck_assert_uint_eq(cs[i]->bytes[0], want_len);
                consumer_digest(cs[i], got);
                ck_assert_msg(memcmp(got, want, 32) == 0, "replica %d sent other bytes", i);
                consumer_free(cs[i]);
        }
}
END_TEST

START_TEST(events_ids_offsets_and_keepalive)
{
        exec("ses_dpt00000000000000d01", "[\"sh\",\"-c\",\"echo out; sleep 0.2; echo err >&2; exit 3\"]", "");
        _cleanup_free_ char *t = token("ses_dpt00000000000000d01", "read");
        /* From the start: start (id 0), stdout "out\n" (id 4), stderr "err\n" (id 8), exit (id 8). */
        consumer c;
        consumer_init(&c, 1024);
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000d01", t, -1, &c), 200);
        ck_assert_int_eq(c.starts, 1);
        ck_assert_uint_eq(c.start_id, 0);
        ck_assert_uint_eq(c.bytes[0], 4);
        ck_assert_uint_eq(c.bytes[1], 4);
        ck_assert_str_eq(c.text.data, "out\nerr\n");
        ck_assert_int_eq(exit_field(&c, "code"), 3);
        ck_assert_int_eq(exit_field(&c, "signal"), 0);
        json_object *v = NULL;
        ck_assert(json_object_object_get_ex(c.exit, "oom", &v) && !json_object_get_boolean(v));
        ck_assert(json_object_object_get_ex(c.exit, "killed", &v) && !json_object_get_boolean(v));
        ck_assert(json_object_object_get_ex(c.exit, "reason", &v));
        consumer_free(&c);

        /* Resuming after the stdout event gives only the stderr one; after everything, only start and exit. */
        consumer r;
        consumer_init(&r, 1024);
        r.offset = 4;
        ck_assert_int_eq(attach_all(port_b, "ses_dpt00000000000000d01", t, 4, &r), 200);
        ck_assert_uint_eq(r.start_id, 4);
        ck_assert_str_eq(r.text.data, "err\n");
        ck_assert_int_eq(exit_field(&r, "code"), 3);
        consumer_free(&r);
        consumer_init(&r, 1024);
        r.offset = 8;
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000d01", t, 8, &r), 200);
        ck_assert_uint_eq(r.bytes[0] + r.bytes[1], 0);
        ck_assert(r.exited);
        consumer_free(&r);

        /* ?offset= does the same, and Last-Event-ID wins over it. */
        char h[4200];
        snprintf(h, sizeof(h), "Authorization: Bearer %s", t);
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        const char *hs[] = {h, NULL};
        ck_assert_int_eq(
                dpt_http(port_a, "GET", "/v1/sessions/ses_dpt00000000000000d01/attach?offset=4", hs, NULL, 0, &b), 200);
        ck_assert_msg(strstr(b.data, "event: stderr\n") && !strstr(b.data, "event: stdout\n") &&
                              strstr(b.data, "id: 8\nevent: exit\n"),
                      "%s", b.data);
        sp_buf_clear(&b);
        const char *both[] = {h, "Last-Event-ID: 8", NULL};
        ck_assert_int_eq(
                dpt_http(port_a, "GET", "/v1/sessions/ses_dpt00000000000000d01/attach?offset=0", both, NULL, 0, &b),
                200);
        ck_assert_msg(!strstr(b.data, "event: stdout") && !strstr(b.data, "event: stderr"), "%s", b.data);
        ck_assert_msg(strstr(b.data, "id: 8\nevent: exit\n"), "%s", b.data);

        /* HEAD answers the stream's headers and does not follow it. */
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port_b, "HEAD", "/v1/sessions/ses_dpt00000000000000d01/attach", hs, NULL, 0, &b),
                         200);
        ck_assert_uint_eq(b.len, 0);

        /* curl, as docs/dataplane.md shows it: HTTP/1.1, chunked, the token as a header. */
        char cmd[8192];
        snprintf(cmd, sizeof(cmd),
                 "curl -sS -N --max-time 20 -H 'Authorization: Bearer %s' -H 'Last-Event-ID: 4' "
                 "http://127.0.0.1:%d/v1/sessions/ses_dpt00000000000000d01/attach",
                 t, port_b);
        FILE *f = popen(cmd, "r");
        ck_assert_ptr_nonnull(f);
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        char line[4096];
        while (fgets(line, sizeof(line), f))
                sp_buf_append_str(&out, line, NULL);
        ck_assert_int_eq(pclose(f), 0);
        ck_assert_msg(strstr(out.data, "id: 4\nevent: start\ndata: {\"session_id\":\"ses_dpt00000000000000d01\""), "%s",
                      out.data);
        ck_assert_msg(strstr(out.data, "id: 8\nevent: stderr\ndata: ZXJyCg==\n\n"), "%s", out.data);
        ck_assert_msg(strstr(out.data, "id: 8\nevent: exit\ndata: {\"code\":3,"), "%s", out.data);

        /* A silent command: keep-alive comments (every second here) keep the stream open. */
        exec("ses_dpt00000000000000d02", "[\"sleep\",\"3\"]", "");
        _cleanup_free_ char *t2 = token("ses_dpt00000000000000d02", "read");
        consumer q;
        consumer_init(&q, 0);
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000d02", t2, -1, &q), 200);
        ck_assert_int_ge(q.comments, 1);
        ck_assert_int_eq(exit_field(&q, "code"), 0);
        consumer_free(&q);

        /* A session the worker does not have. */
        _cleanup_free_ char *t3 = token("ses_dpt00000000000000d99", "read");
        snprintf(h, sizeof(h), "Authorization: Bearer %s", t3);
        sp_buf_clear(&b);
        ck_assert_int_eq(dpt_http(port_a, "GET", "/v1/sessions/ses_dpt00000000000000d99/attach", hs, NULL, 0, &b), 404);
        ck_assert_msg(strstr(b.data, "ses_dpt00000000000000d99"), "%s", b.data);
}
END_TEST

/* Reads what curl (HTTP/1.1, chunked) gets from target as raw frames into c. */
static void curl_raw(int port, const char *target, const char *tok, consumer *c)
{
        char cmd[8192];
        snprintf(cmd, sizeof(cmd), "curl -sS -N --max-time 20 -H 'Authorization: Bearer %s' 'http://127.0.0.1:%d%s'",
                 tok, port, target);
        FILE *f = popen(cmd, "r");
        ck_assert_ptr_nonnull(f);
        sp_attach_frames d;
        sp_attach_frames_init(&d, 0);
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
                for (size_t at = 0; at < n;) {
                        size_t used = 0;
                        sp_attach_chunk ch;
                        int r = sp_attach_frames_next(&d, (const uint8_t *)buf + at, n - at, &used, &ch, NULL);
                        ck_assert_int_ge(r, 0);
                        at += used;
                        if (r == 1)
                                raw_chunk(c, &ch);
                }
        }
        ck_assert_int_eq(pclose(f), 0);
        ck_assert(!sp_attach_frames_partial(&d));
        sp_attach_frames_free(&d);
}

START_TEST(raw_frames_exact_resumable_and_refused_like_events)
{
        /* ~20 MB through raw frames, a client that hangs up every ~3 MB (mid-frame) and resumes from the bytes it
         * has: every output byte counts as it arrives, so a partial frame is not lost nor repeated. */
        const uint64_t n = 3000000;
        unsigned char want[32], got[32];
        uint64_t want_len = 0;
        seq_digest(n, want, &want_len);
        exec("ses_dpt00000000000000g01", "[\"seq\",\"1\",\"3000000\"]", "");
        exec("ses_dpt00000000000000g02", "[\"seq\",\"1\",\"3000000\"]", "");
        _cleanup_free_ char *t1 = token("ses_dpt00000000000000g01", "read");
        _cleanup_free_ char *t2 = token("ses_dpt00000000000000g02", "read");
        consumer c;
        consumer_init(&c, 0);
        c.raw = true;
        int connects = 0;
        while (!c.exited) {
                conn k;
                conn_open(&k, &c, port_a, "ses_dpt00000000000000g01", t1, connects ? (int64_t)c.offset : -1, 0);
                connects++;
                uint64_t stop_at = c.offset + 3 * MiB + (uint64_t)connects * 123457;
                while (!k.eof && !c.exited && c.offset < stop_at)
                        conn_read(&k, 1 << 16);
                ck_assert_int_eq(k.status, 200);
                conn_close(&k);
                ck_assert_int_lt(connects, 30);
        }
        ck_assert_int_ge(connects, 4);
        ck_assert_int_eq(c.starts, connects);
        ck_assert_uint_eq(c.bytes[0], want_len);
        ck_assert_uint_eq(c.offset, want_len);
        consumer_digest(&c, got);
        ck_assert_msg(memcmp(got, want, 32) == 0, "the raw output differs from seq's");
        ck_assert_int_eq(exit_field(&c, "code"), 0);
        consumer_free(&c);

        /* The data plane SIGKILLed mid-stream and restarted: the client resumes from what it has. */
        sp_test_proc mine = {0};
        static const char *const extra[] = {"--keepalive-ms=1000", NULL};
        int port = dpt_dataplane_start(&env, &mine, "dataplane-killed-raw", extra);
        consumer_init(&c, 0);
        c.raw = true;
        conn k;
        conn_open(&k, &c, port, "ses_dpt00000000000000g02", t2, -1, 0);
        while (!k.eof && c.offset < 8 * MiB)
                conn_read(&k, 1 << 16);
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&mine, &e), &e);
        while (!k.eof)
                conn_read(&k, 1 << 16);
        conn_close(&k);
        ck_assert(!c.exited);
        ck_assert_uint_gt(c.offset, 0);
        sp_test_ok(sp_test_proc_restart(&mine, 1000, &e), &e);
        sp_test_ok(sp_test_proc_wait_http(&mine, "127.0.0.1", port, "/healthz", 20000, &e), &e);
        ck_assert_int_eq(attach_all(port, "ses_dpt00000000000000g02", t2, (int64_t)c.offset, &c), 200);
        ck_assert_msg(c.exited, "no exit after the restart: %s", c.error);
        ck_assert_uint_eq(c.bytes[0], want_len);
        consumer_digest(&c, got);
        ck_assert_msg(memcmp(got, want, 32) == 0, "bytes were lost or repeated across the restart");
        consumer_free(&c);
        ck_assert(dpt_dataplane_stop(&mine));

        /* Frames and offsets: start (offset 0), stdout "out\n", stderr "err\n", exit (offset 8). */
        exec("ses_dpt00000000000000g03", "[\"sh\",\"-c\",\"echo out; sleep 0.2; echo err >&2; exit 3\"]", "");
        _cleanup_free_ char *t3 = token("ses_dpt00000000000000g03", "read");
        consumer_init(&c, 1024);
        c.raw = true;
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000g03", t3, -1, &c), 200);
        ck_assert_int_eq(c.starts, 1);
        ck_assert_uint_eq(c.start_id, 0);
        ck_assert_uint_eq(c.bytes[0], 4);
        ck_assert_uint_eq(c.bytes[1], 4);
        ck_assert_str_eq(c.text.data, "out\nerr\n");
        ck_assert_int_eq(exit_field(&c, "code"), 3);
        ck_assert_int_eq(exit_field(&c, "offset"), 8);
        consumer_free(&c);

        /* curl over HTTP/1.1 (chunked), ?offset= and the format in the query: only what follows offset 4. */
        consumer_init(&c, 1024);
        c.raw = true;
        c.offset = 4;
        curl_raw(port_b, "/v1/sessions/ses_dpt00000000000000g03/attach?format=raw&offset=4", t3, &c);
        ck_assert_uint_eq(c.start_id, 4);
        ck_assert_str_eq(c.text.data, "err\n");
        ck_assert(c.exited);
        ck_assert_int_eq(exit_field(&c, "code"), 3);
        consumer_free(&c);

        /* A silent command: keepalive frames (every second here). */
        exec("ses_dpt00000000000000g04", "[\"sleep\",\"3\"]", "");
        _cleanup_free_ char *t4 = token("ses_dpt00000000000000g04", "read");
        consumer_init(&c, 0);
        c.raw = true;
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000g04", t4, -1, &c), 200);
        ck_assert_int_ge(c.comments, 1);
        ck_assert_int_eq(exit_field(&c, "code"), 0);
        consumer_free(&c);

        /* Refused as the event stream is, before anything streams: the same statuses and error codes. */
        _cleanup_free_ char *t99 = token("ses_dpt00000000000000g99", "read");
        char good[4200], unknown[4200];
        snprintf(good, sizeof(good), "Authorization: Bearer %s", t3);
        snprintf(unknown, sizeof(unknown), "Authorization: Bearer %s", t99);
        const struct {
                const char *ses, *auth, *query;
                int status;
                const char *code;
        } cases[] = {
                {"ses_dpt00000000000000g03", "Authorization: Bearer v1.not-a-token", "", 401, "unauthenticated"},
                {"ses_dpt00000000000000g03", NULL, "", 401, "unauthenticated"},
                {"ses_dpt00000000000000g99", unknown, "", 404, "not_found"},
                {"ses_dpt00000000000000g99", good, "", 403, "permission_denied"},
                {"ses_dpt00000000000000g03", good, "offset=9", 400, "invalid_argument"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                int status[2];
                for (int raw = 0; raw < 2; raw++) {
                        char target[256];
                        const char *q = cases[i].query;
                        snprintf(target, sizeof(target), "/v1/sessions/%s/attach%s%s%s%s", cases[i].ses,
                                 raw || *q ? "?" : "", raw ? "format=raw" : "", raw && *q ? "&" : "", q);
                        const char *hs[] = {cases[i].auth, NULL};
                        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
                        status[raw] = dpt_http(port_a, "GET", target, hs, NULL, 0, &b);
                        char want_code[64];
                        snprintf(want_code, sizeof(want_code), "\"code\":\"%s\"", cases[i].code);
                        ck_assert_msg(b.data && strstr(b.data, want_code), "case %zu (%s): %s", i, target,
                                      b.data ? b.data : "");
                }
                ck_assert_int_eq(status[0], cases[i].status);
                ck_assert_int_eq(status[1], cases[i].status);
        }
        const char *hs[] = {good, NULL};
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(
                dpt_http(port_a, "GET", "/v1/sessions/ses_dpt00000000000000g03/attach?format=base64", hs, NULL, 0, &b),
                400);
        ck_assert_msg(strstr(b.data, "'format' must be sse or raw"), "%s", b.data);
}
END_TEST

/* POSTs len bytes of body to a session route (with a write token); returns the status and the answer in out. */
static int post_n(int port, const char *ses, const char *what, const char *tok, const char *body, size_t len,
                  sp_buf *out)
{
        char h[4200], target[256];
        snprintf(h, sizeof(h), "Authorization: Bearer %s", tok);
        snprintf(target, sizeof(target), "/v1/sessions/%s/%s", ses, what);
        const char *hs[] = {h, NULL};
        return dpt_http(port, "POST", target, hs, body, len, out);
}

/* As post_n() with a text body. */
static int post(int port, const char *ses, const char *what, const char *tok, const char *body, sp_buf *out)
{
        return post_n(port, ses, what, tok, body, strlen(body), out);
}

START_TEST(stdin_through_cat)
{
        /* 10 MB in one body, stdin closed after it: cat gives it all back. */
        const size_t n = 10 * MiB;
        _cleanup_free_ char *data = malloc(n);
        for (size_t i = 0; i < n; i++)
                data[i] = (char)((i * 2654435761u) >> 24);
        exec("ses_dpt00000000000000e01", "[\"cat\"]", ",\"stdin\":true");
        _cleanup_free_ char *t = token("ses_dpt00000000000000e01", "write");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(post_n(port_a, "ses_dpt00000000000000e01", "stdin?close=true", t, data, n, &b), 200);
        char want[64];
        snprintf(want, sizeof(want), "{\"written\":%zu}", n);
        ck_assert_str_eq(b.data, want);
        consumer c;
        consumer_init(&c, n);
        ck_assert_int_eq(attach_all(port_b, "ses_dpt00000000000000e01", t, -1, &c), 200);
        ck_assert_uint_eq(c.text.len, n);
        ck_assert(memcmp(c.text.data, data, n) == 0);
        ck_assert_int_eq(exit_field(&c, "code"), 0);
        consumer_free(&c);

        /* A chunked body through one replica, close-stdin through the other. */
        exec("ses_dpt00000000000000e02", "[\"cat\"]", ",\"stdin\":true");
        _cleanup_free_ char *t2 = token("ses_dpt00000000000000e02", "write");
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_a)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        char req[8192];
        int len = snprintf(req, sizeof(req),
                           "POST /v1/sessions/ses_dpt00000000000000e02/stdin HTTP/1.1\r\nHost: x\r\n"
                           "Authorization: Bearer %s\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                           "6\r\nhello \r\n",
                           t2);
        ck_assert_int_eq(write(fd, req, (size_t)len), len);
        usleep(100000);
        ck_assert_int_eq(write(fd, "6\r\nworld\n\r\n0\r\n\r\n", 16), 16);
        char ans[4096];
        ssize_t got = 0, r;
        while ((r = read(fd, ans + got, sizeof(ans) - 1 - (size_t)got)) > 0)
                got += r;
        close(fd);
        ans[got] = '\0';
        ck_assert_msg(strstr(ans, "HTTP/1.1 200") && strstr(ans, "{\"written\":12}"), "%s", ans);
        sp_buf_clear(&b);
        ck_assert_int_eq(post(port_b, "ses_dpt00000000000000e02", "close-stdin", t2, "", &b), 200);
        ck_assert_str_eq(b.data, "{}");
        consumer_init(&c, 1024);
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000e02", t2, -1, &c), 200);
        ck_assert_str_eq(c.text.data, "hello world\n");
        ck_assert_int_eq(exit_field(&c, "code"), 0);
        consumer_free(&c);

        /* stdin to a session that has ended is refused by the worker, and says so */
        sp_buf_clear(&b);
        int st = post(port_a, "ses_dpt00000000000000e02", "stdin", t2, "late", &b);
        ck_assert_msg(st >= 400 && st < 500, "status %d: %s", st, b.data);
}
END_TEST

START_TEST(pty_resize_and_signals)
{
        /* A PTY sees the size it was resized to. */
        exec("ses_dpt00000000000000f01", "[\"sh\",\"-c\",\"read x; stty size\"]",
             ",\"stdin\":true,\"pty\":{\"rows\":24,\"cols\":80}");
        _cleanup_free_ char *t = token("ses_dpt00000000000000f01", "write");
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        ck_assert_int_eq(post(port_a, "ses_dpt00000000000000f01", "resize", t, "{\"rows\":33,\"cols\":101}", &b), 200);
        sp_buf_clear(&b);
        ck_assert_int_eq(post(port_b, "ses_dpt00000000000000f01", "stdin", t, "go\n", &b), 200);
        ck_assert_str_eq(b.data, "{\"written\":3}");
        consumer c;
        consumer_init(&c, 4096);
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000f01", t, -1, &c), 200);
        ck_assert_msg(strstr(c.text.data, "33 101"), "stty said: %s", c.text.data);
        consumer_free(&c);

        /* TERM by name reaches the command's trap while a client watches. */
        exec("ses_dpt00000000000000f02",
             "[\"sh\",\"-c\",\"trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.1; done\"]", "");
        _cleanup_free_ char *t2 = token("ses_dpt00000000000000f02", "write");
        consumer w;
        consumer_init(&w, 4096);
        conn k;
        conn_open(&k, &w, port_b, "ses_dpt00000000000000f02", t2, -1, 0);
        while (!k.eof && !(w.text.data && strstr(w.text.data, "ready")))
                conn_read(&k, 4096);
        sp_buf_clear(&b);
        ck_assert_int_eq(post(port_a, "ses_dpt00000000000000f02", "signal", t2, "{\"signal\":\"SIGTERM\"}", &b), 200);
        conn_drain(&k);
        conn_close(&k);
        ck_assert_msg(strstr(w.text.data, "got TERM"), "%s", w.text.data);
        ck_assert_int_eq(exit_field(&w, "code"), 7);
        consumer_free(&w);

        /* KILL by number. */
        exec("ses_dpt00000000000000f03", "[\"sleep\",\"60\"]", "");
        _cleanup_free_ char *t3 = token("ses_dpt00000000000000f03", "write");
        sp_buf_clear(&b);
        ck_assert_int_eq(post(port_b, "ses_dpt00000000000000f03", "signal", t3, "{\"signal\":9}", &b), 200);
        consumer_init(&c, 0);
        ck_assert_int_eq(attach_all(port_a, "ses_dpt00000000000000f03", t3, -1, &c), 200);
        ck_assert_int_eq(exit_field(&c, "signal"), 9);
        consumer_free(&c);

        /* Control requests for a session the worker does not have pass its answer on. */
        _cleanup_free_ char *t4 = token("ses_dpt00000000000000f99", "write");
        sp_buf_clear(&b);
        ck_assert_int_eq(post(port_a, "ses_dpt00000000000000f99", "signal", t4, "{\"signal\":\"INT\"}", &b), 404);
        ck_assert_msg(strstr(b.data, "\"not_found\"") && strstr(b.data, "ses_dpt00000000000000f99"), "%s", b.data);
        sp_buf_clear(&b);
        ck_assert_int_eq(post(port_b, "ses_dpt00000000000000f99", "resize", t4, "{\"rows\":5,\"cols\":5}", &b), 404);
}
END_TEST

int main(void)
{
        sp_test_require_root("the worker needs btrfs, namespaces and cgroups");
        sp_test_require_program("curl", "the attach example of docs/dataplane.md uses curl");
        Suite *s = suite_create("dataplane_sessions");
        TCase *tc = tcase_create("sessions");
        tcase_set_timeout(tc, 180);
        tcase_add_unchecked_fixture(tc, case_setup, case_teardown);
        tcase_add_test(tc, output_100mb_exact_through_reconnects_and_a_slow_reader);
        tcase_add_test(tc, a_client_that_hangs_up_with_output_in_flight_resumes_from_what_it_received);
        tcase_add_test(tc, dataplane_sigkill_mid_stream_loses_nothing);
        tcase_add_test(tc, two_replicas_serve_one_session_at_once);
        tcase_add_test(tc, events_ids_offsets_and_keepalive);
        tcase_add_test(tc, raw_frames_exact_resumable_and_refused_like_events);
        tcase_add_test(tc, stdin_through_cat);
        tcase_add_test(tc, pty_resize_and_signals);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
