/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data plane's attach stream, read as envd's ProcessEvents
 * (proto/spec/dataplane.md; process.c relays it).
 *
 * e2b_attach_feed() splits the server-sent events as their bytes arrive, in
 * pieces of any size: lines end in LF or CRLF, "event" and "data" fields
 * build an event (several data lines are joined by LF), a blank line
 * dispatches it, a comment line (":…") is reported at once (the data plane's
 * keep-alive), other fields are ignored. e2b_attach_event() says what envd
 * sends for each: data for stdout and stderr (the base64 passes through),
 * end for exit, keepalive for a comment, nothing for start and unknown
 * events; an error event, or an exit event that is not JSON, ends the
 * stream with an error.
 *
 * No I/O. Not thread-safe (one reader per stream).
 */
#ifndef E2B_ATTACH_H
#define E2B_ATTACH_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

/* The longest line, and the most data one event may join (the data plane
 * sends at most 48 KiB of output, base64, per event). */
#define E2B_ATTACH_MAX_LINE (1024 * 1024)
#define E2B_ATTACH_MAX_DATA (1024 * 1024)
#define E2B_ATTACH_MAX_NAME 31 /* longer event names are cut */

typedef struct e2b_attach {
        sp_buf line;
        char event[E2B_ATTACH_MAX_NAME + 1];
        sp_buf data;
} e2b_attach;

#define E2B_ATTACH_INIT \
        { \
                .line = SP_BUF_INIT \
        }

/* An event: its name ("" when the event had none) and data (NUL-terminated
 * at len), or a comment line: event NULL, data the comment after ':'.
 * Borrowed until the callback returns. Returns 0 to go on, > 0 to stop
 * reading (the stream is over), < 0 to stop on an error of the callback's
 * own. */
typedef int (*e2b_attach_fn)(const char *event, const char *data, size_t len, void *userdata);

/* Reads n more bytes of the stream, calling fn for each event or comment
 * they complete. Returns 0 when all were read, the callback's first
 * non-zero result (the rest of the bytes are not read), or < 0 with
 * SP_E_TOO_LARGE in *err (a line over E2B_ATTACH_MAX_LINE, an event's data
 * over E2B_ATTACH_MAX_DATA); the reader is not to be fed again after a
 * non-zero result. */
int e2b_attach_feed(e2b_attach *a, const char *buf, size_t n, e2b_attach_fn fn, void *userdata, sp_error **err);

/* Frees what the reader holds; it can then be fed anew. */
void e2b_attach_free(e2b_attach *a);

/* envd's ProcessEvent for an event (event NULL: a comment) of a session
 * with a PTY (pty: output is "pty" data) or without. Returns 0 with *ret the
 * new event object ({"data": …}, {"end": …}, {"keepalive": {}}) or NULL when
 * envd has nothing to say; *ret_end is set when the event ends the stream
 * (exit). Returns -1 when the event ends the stream with an error: *err is
 * SP_E_UNAVAILABLE with the data plane's message (an error event) or
 * SP_E_INTERNAL (an exit event whose data is not JSON). */
int e2b_attach_event(const char *event, const char *data, size_t len, bool pty, json_object **ret, bool *ret_end,
                     sp_error **err);

/* Whether the event is the data plane's start event ({"session_id","pid"})
 * with a positive integer pid, which goes to *ret_pid. The session's POST
 * answers before the command has started, so envd's start{pid} is sent from
 * this event, once. */
bool e2b_attach_start_pid(const char *event, const char *data, size_t len, int64_t *ret_pid);

/* Whether the event is an error event saying the session failed (code
 * "internal", proto/spec/dataplane.md) rather than that the stream broke
 * off ("unavailable"). */
bool e2b_attach_session_failed(const char *event, const char *data, size_t len);

#endif
