/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The raw attach format (GET /v1/sessions/{id}/attach?format=raw, Content-Type
 * application/vnd.space.frames): a session's output as length-prefixed binary
 * frames instead of base64 server-sent events. The data plane encodes it
 * (dataplane/attach/frames.c); spacectl and the benchmark decode it with the
 * decoder here (fuzzed by tests/fuzz/fuzz_attach_frames.c).
 *
 * A frame is 1 type byte, a 4-byte big-endian payload length, the payload:
 *
 *   0 start      JSON {"session_id","pid","offset"}: offset is where the
 *                output that follows starts
 *   1 stdout     output bytes, raw
 *   2 stderr     output bytes, raw
 *   3 exit       JSON {"code","signal","oom","killed","reason","offset"}; last
 *   4 error      JSON {"code","message"}; last
 *   5 keepalive  empty, after a silence
 *
 * Output offsets are implicit: the start frame's offset plus every output
 * byte since, stdout and stderr together (the ids of the event stream).
 *
 * Pure and incremental: no I/O, no global state. Not thread-safe; a decoder
 * belongs to one stream at a time.
 */
#ifndef SPACE_ATTACH_FRAMES_H
#define SPACE_ATTACH_FRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

#define SP_ATTACH_FRAMES_CONTENT_TYPE "application/vnd.space.frames"
#define SP_ATTACH_FRAME_HEADER_SIZE 5
/* The most a non-output frame may hold unless the decoder is told otherwise. */
#define SP_ATTACH_FRAME_JSON_MAX (64u * 1024)

typedef enum sp_attach_frame_type {
        SP_ATTACH_FRAME_START = 0,
        SP_ATTACH_FRAME_STDOUT = 1,
        SP_ATTACH_FRAME_STDERR = 2,
        SP_ATTACH_FRAME_EXIT = 3,
        SP_ATTACH_FRAME_ERROR = 4,
        SP_ATTACH_FRAME_KEEPALIVE = 5,
} sp_attach_frame_type;

/* Writes the header of a frame of type carrying len payload bytes. */
void sp_attach_frame_header(uint8_t out[SP_ATTACH_FRAME_HEADER_SIZE], uint8_t type, uint32_t len);

/* What the decoder hands out. Output frames (stdout, stderr) come in pieces as
 * their bytes arrive, never buffered: each piece has len > 0, and last says
 * it ends its frame (an empty output frame yields nothing). Every other frame
 * (any type but 1 and 2, unknown ones included: clients skip types they do
 * not know) comes whole, once, with last set. data points into the input or
 * into the decoder and stays valid until the next call. */
typedef struct sp_attach_chunk {
        uint8_t type;
        const uint8_t *data;
        size_t len;
        bool last;
} sp_attach_chunk;

/* Caller-allocated; init before use, free after. A decoder that failed keeps
 * failing. */
typedef struct sp_attach_frames {
        uint8_t header[SP_ATTACH_FRAME_HEADER_SIZE];
        size_t header_len; /* header bytes held */
        uint32_t left; /* payload bytes of the current frame still to come */
        bool in_payload;
        size_t max_json; /* the bound on a non-output frame */
        sp_buf payload; /* a non-output frame split across inputs */
        bool failed;
} sp_attach_frames;

/* max_json 0 means SP_ATTACH_FRAME_JSON_MAX. */
void sp_attach_frames_init(sp_attach_frames *d, size_t max_json);
void sp_attach_frames_free(sp_attach_frames *d);
/* Forgets any partial frame, for a new stream (keeps the bound). */
void sp_attach_frames_reset(sp_attach_frames *d);

/* Consumes input up to the next chunk. Returns 1 with *ret filled, 0 when all
 * of p was consumed without completing one, < 0 for a non-output frame longer
 * than the bound (SP_E_TOO_LARGE). *ret_used is always set to the bytes taken
 * from p; call again with the rest. Splitting a stream differently changes
 * how output is cut into pieces, never the bytes nor the other frames. */
int sp_attach_frames_next(sp_attach_frames *d, const uint8_t *p, size_t n, size_t *ret_used, sp_attach_chunk *ret,
                          sp_error **err);

/* True if part of a frame is held (so an end of stream here is a truncation). */
bool sp_attach_frames_partial(const sp_attach_frames *d);

#endif
