/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A parser of server-sent events (text/event-stream), for spacectl's attach
 * to the data plane: pure and incremental (no I/O, no global state; fuzzed
 * by tests/fuzz/fuzz_ctl_sse.c).
 *
 * It follows the WHATWG event-stream format: lines end with CRLF, LF or CR
 * (a CRLF split between two feeds counts once); a line starting with ':' is
 * a comment; "field: value" (one space after the colon dropped) or "field"
 * alone; "data" lines join with '\n'; a blank line dispatches the event when
 * it had data (an event of only "event" or "id" lines is dropped); unknown
 * fields are ignored; a leading byte-order mark is skipped. One difference
 * from a browser: an event's id is its own "id" field (NULL without one),
 * not the last id seen on the stream, so that an event without an id (the
 * data plane's "error") never seems to move the stream's offset.
 *
 * Bounds: a line of at most CTL_SSE_MAX_LINE bytes, an event's data of at
 * most CTL_SSE_MAX_DATA bytes (SP_E_TOO_LARGE past either), an event type or
 * id of at most CTL_SSE_MAX_NAME bytes without NUL (SP_E_INVALID). After an
 * error the parser must be reset before it is fed again.
 *
 * Not thread-safe; a parser belongs to one stream at a time.
 */
#ifndef SPACECTL_SSE_H
#define SPACECTL_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "space/buf.h"
#include "space/error.h"

#define CTL_SSE_MAX_LINE (256 * 1024)
#define CTL_SSE_MAX_DATA (1024 * 1024)
#define CTL_SSE_MAX_NAME 64

/* A dispatched event; its strings are the parser's, valid during the callback. */
typedef struct ctl_sse_event {
        const char *type; /* the "event" field, or "message" without one */
        const char *id; /* the "id" field, or NULL without one */
        const char *data; /* the data lines joined by '\n' (NUL-terminated; may hold NUL bytes) */
        size_t data_len;
} ctl_sse_event;

/* Receives each event; a negative return (with *err set) stops the feed,
 * which then returns it. */
typedef int (*ctl_sse_cb)(const ctl_sse_event *ev, void *userdata, sp_error **err);

typedef struct ctl_sse_parser {
        sp_buf line; /* the unfinished line */
        sp_buf data; /* the event's data so far */
        char type[CTL_SSE_MAX_NAME + 1];
        char id[CTL_SSE_MAX_NAME + 1];
        bool has_type, has_id, has_data;
        bool skip_lf; /* the last line ended with CR: an LF next is part of that line end */
        bool started; /* past the optional byte-order mark */
} ctl_sse_parser;

/* Initialises an empty parser (for the start of a stream). */
void ctl_sse_init(ctl_sse_parser *p);
/* Forgets everything fed so far, for a new stream (keeps its memory). */
void ctl_sse_reset(ctl_sse_parser *p);
/* Frees the parser's memory; it may be initialised again. */
void ctl_sse_free(ctl_sse_parser *p);

/* Consumes data[0..len), calling cb for each event completed in it (in
 * order). Returns 0, or < 0 with *err set: a bound above, or the callback's
 * failure. Splitting a stream differently never changes the events. */
int ctl_sse_feed(ctl_sse_parser *p, const void *data, size_t len, ctl_sse_cb cb, void *userdata, sp_error **err);

#endif
