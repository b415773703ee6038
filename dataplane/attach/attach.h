/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The attach stream (GET /v1/sessions/{id}/attach): a worker's AttachSession
 * frames turned into server-sent events (proto/spec/dataplane.md).
 *
 *   - GetSession first: a start offset the worker no longer retains is 404,
 *     one past the end 400, both before the stream starts; no offset means
 *     the start of what it retains.
 *   - Each event's id is the output offset after its bytes, so a client that
 *     reconnects with Last-Event-ID gets every byte after it exactly once;
 *     output frames are cut into events of at most DP_ATTACH_EVENT_MAX bytes,
 *     base64 encoded.
 *   - Backpressure: an event the client's connection cannot take waits, and
 *     while one waits the worker stream is paused, so HTTP/2 flow control
 *     stops the worker, whose session log then stops the command. Per attach
 *     the data plane holds at most one worker frame of events, one HTTP/2
 *     stream window and the HTTP output buffer.
 *   - An SSE comment after limits.keepalive_ms of silence.
 *
 * The event encoding is exposed for tests and fuzzing.
 */
#ifndef DP_ATTACH_ATTACH_H
#define DP_ATTACH_ATTACH_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

/* Output bytes in one stdout or stderr event. */
#define DP_ATTACH_EVENT_MAX (48u * 1024)

/* One server-sent event to send. */
typedef struct dp_sse_event {
        char id[24]; /* "" for none */
        const char *name; /* static string: start, stdout, stderr, exit, error */
        int stream; /* output events: 1 stdout, 2 stderr; else 0 */
        size_t raw; /* output events: the output bytes the data encodes */
        sp_buf data;
        struct dp_sse_event *next;
} dp_sse_event;

/* A FIFO of events. Zeroed is empty. */
typedef struct dp_sse_queue {
        dp_sse_event *head, *tail;
        size_t bytes; /* data bytes held */
} dp_sse_queue;

void dp_sse_queue_clear(dp_sse_queue *q);
/* Removes and frees the first event. */
void dp_sse_queue_pop(dp_sse_queue *q);

/* Decodes one AttachSession frame and appends its events to q:
 *   DATA  [stream 1|2][8-byte big-endian offset][bytes] → stdout/stderr
 *         events of at most DP_ATTACH_EVENT_MAX bytes each, id = offset
 *         after them; the frame's offset must equal *offset, which advances;
 *   JSON  {"event":"start","pid":N}  → start {"session_id","pid"}, id start;
 *         {"event":"exit",...}       → exit {"code","signal","oom","killed",
 *                                      "reason"}, id *offset;
 *         {"event":"error","message"} → error {"code":"internal","message"};
 *         other events are ignored.
 * Returns 1 after an exit or error event (the stream ends there), 0
 * otherwise, <0 (SP_E_INTERNAL, naming the problem) for a frame that breaks
 * the worker's contract; q is unchanged then. */
int dp_attach_decode(int frame_type, const uint8_t *p, size_t n, const char *session_id, uint64_t start,
                     uint64_t *offset, dp_sse_queue *q, sp_error **err);

/* Appends an error event {"code":..., "message":...} to q. */
void dp_attach_error_event(dp_sse_queue *q, sp_errc code, const char *message);

#endif
