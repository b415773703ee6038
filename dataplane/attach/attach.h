/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The attach stream (GET /v1/sessions/{id}/attach): a worker's AttachSession
 * frames turned into server-sent events, or with ?format=raw into the
 * length-prefixed frames of space/attach_frames.h (proto/spec/dataplane.md).
 * One state machine serves both; only the encoder at the end differs.
 *
 *   - GetSession first: a start offset the worker no longer retains is 404,
 *     one past the end 400, both before the stream starts; no offset means
 *     the start of what it retains.
 *   - Each event's id is the output offset after its bytes, so a client that
 *     reconnects with Last-Event-ID (or ?offset=) gets every byte after it
 *     exactly once. Output frames are cut into events of at most
 *     DP_ATTACH_EVENT_MAX bytes, base64 encoded; raw frames carry up to
 *     DP_ATTACH_FRAME_MAX bytes, what is queued coalesced into one frame.
 *   - Backpressure: an event the client's connection cannot take waits, and
 *     while one waits the worker stream is paused, so HTTP/2 flow control
 *     stops the worker, whose session log then stops the command. Per attach
 *     the data plane holds at most DP_ATTACH_FRAME_MAX plus one worker frame
 *     of events, one HTTP/2 stream window and the HTTP output buffer.
 *   - An SSE comment (a keepalive frame) after limits.keepalive_ms of silence.
 *
 * The event decoding and the encoders are exposed for tests and fuzzing.
 */
#ifndef DP_ATTACH_ATTACH_H
#define DP_ATTACH_ATTACH_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"
#include "space/http.h"

struct evbuffer;

/* Output bytes in one stdout or stderr event of the event stream. */
#define DP_ATTACH_EVENT_MAX (48u * 1024)
/* Output bytes in one raw frame: queued output is coalesced up to this. */
#define DP_ATTACH_FRAME_MAX (256u * 1024)

typedef enum dp_attach_format { DP_ATTACH_SSE, DP_ATTACH_RAW } dp_attach_format;

/* One event to send, in neither format yet. */
typedef struct dp_attach_event {
        uint64_t id; /* the offset it ends at */
        bool has_id; /* error events have none */
        const char *name; /* static string: start, stdout, stderr, exit, error */
        int stream; /* output events: 1 stdout, 2 stderr; else 0 */
        sp_buf data; /* output events: the bytes; others: a JSON object */
        struct dp_attach_event *next;
} dp_attach_event;

/* A FIFO of events. Zeroed is empty, with events of at most
 * DP_ATTACH_EVENT_MAX output bytes. */
typedef struct dp_attach_queue {
        dp_attach_event *head, *tail;
        size_t bytes; /* data bytes held */
        size_t event_max; /* output bytes per event; 0: DP_ATTACH_EVENT_MAX */
} dp_attach_queue;

void dp_attach_queue_clear(dp_attach_queue *q);
/* Removes and frees the first event. */
void dp_attach_queue_pop(dp_attach_queue *q);

/* Decodes one AttachSession frame and appends its events to q:
 *   DATA  [stream 1|2][8-byte big-endian offset][bytes] → stdout/stderr
 *         events of at most q->event_max bytes each, id = offset after
 *         them; the frame's offset must equal *offset, which advances;
 *   JSON  {"event":"start","pid":N}  → start {"session_id","pid"}, id start;
 *         {"event":"exit",...}       → exit {"code","signal","oom","killed",
 *                                      "reason"}, id *offset;
 *         {"event":"error","message"} → error {"code":"internal","message"};
 *         other events are ignored.
 * Returns 1 after an exit or error event (the stream ends there), 0
 * otherwise, <0 (SP_E_INTERNAL, naming the problem) for a frame that breaks
 * the worker's contract; q is unchanged then. */
int dp_attach_decode(int frame_type, const uint8_t *p, size_t n, const char *session_id, uint64_t start,
                     uint64_t *offset, dp_attach_queue *q, sp_error **err);

/* Appends an error event {"code":..., "message":...} to q. */
void dp_attach_error_event(dp_attach_queue *q, sp_errc code, const char *message);

/* ---- encoders (frames.c) ---- */

/* The client's side of an attach stream in one format. */
typedef struct dp_attach_out dp_attach_out;
typedef void (*dp_attach_out_cb)(void *userdata);

/* Answers req with 200 and the stream's headers (text/event-stream, or
 * application/vnd.space.frames for raw; Cache-Control: no-store), and
 * returns the stream, which holds a reference on req until freed. on_writable
 * follows a send that would block, once the output has drained; on_close the
 * client's going away. Errors: SP_E_UNAVAILABLE (the client left),
 * SP_E_CONFLICT. */
dp_attach_out *dp_attach_out_start(sp_http_request *req, dp_attach_format format, dp_attach_out_cb on_writable,
                                   dp_attach_out_cb on_close, void *userdata, sp_error **err);
/* Sends what it can of q, popping what went out and adding the output bytes
 * sent to sent[0] (stdout) and sent[1] (stderr). Returns 0 once q is empty,
 * SP_HTTP_WOULD_BLOCK when the client's connection is full (wait for
 * on_writable), < 0 once the client has gone. */
int dp_attach_out_send(dp_attach_out *o, dp_attach_queue *q, uint64_t sent[2]);
/* Sends a keep-alive (an SSE comment, a keepalive frame). < 0: the client has gone. */
int dp_attach_out_keepalive(dp_attach_out *o);
/* Ends the stream (if the client is still there) and frees it. Accepts NULL;
 * returns NULL. */
dp_attach_out *dp_attach_out_free(dp_attach_out *o);

/* Formats one event as a raw frame (header and payload) into out: output
 * bytes as they are, start and exit as their JSON with "offset" (the id)
 * added, error as its JSON. Exposed for tests; the stream itself sends output
 * by reference. */
void dp_attach_raw_encode(const dp_attach_event *ev, struct evbuffer *out);

#endif
