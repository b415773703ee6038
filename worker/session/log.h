/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A command session's output log on disk.
 *
 * Output is addressed by *offset*: the number of output bytes (stdout and
 * stderr together, in the order they were produced) before a byte. The log
 * keeps the range [start, end) in segment files of records
 * (`<dir>/<start offset, 20 digits>.seg`, each record an 8-byte header —
 * stream, 3 zero bytes, big-endian length — and the bytes), so readers can
 * resume from any retained offset, several at once.
 *
 * The log is bounded by `capacity` bytes of output. A segment is dropped only
 * when the log needs room *and* a reader has read past the segment's end;
 * otherwise appends fail with SP_E_LIMIT and the caller stops draining the
 * process (backpressure) — output is never dropped unread.
 *
 * Appends are write(2)s: they survive the daemon's crash (the page cache
 * holds them); wk_log_open() recovers a log after a restart, cutting a torn
 * final record. Not thread-safe.
 */
#ifndef WK_SESSION_LOG_H
#define WK_SESSION_LOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

#define WK_LOG_SEGMENT_BYTES (4u << 20) /* at most; a quarter of the capacity if less */
#define WK_LOG_RECORD_MAX (1u << 20)

typedef struct wk_log wk_log;

/* Opens the log in dir (created if create is true), recovering existing segments. */
int wk_log_open(const char *dir, uint64_t capacity, bool create, wk_log **ret, sp_error **err);
void wk_log_close(wk_log *l);
/* Removes the log's directory and everything in it. */
int wk_log_remove(const char *dir, sp_error **err);

/* Appends n bytes of stream (1 stdout, 2 stderr). Fails with SP_E_LIMIT when
 * there is no room (see wk_log_room). */
int wk_log_append(wk_log *l, uint8_t stream, const void *p, size_t n, sp_error **err);
/* Bytes that can be appended now, counting segments that may be dropped. */
uint64_t wk_log_room(const wk_log *l);

uint64_t wk_log_start(const wk_log *l);
uint64_t wk_log_end(const wk_log *l);
/* Total bytes ever appended to stream (1 or 2), including dropped ones. */
uint64_t wk_log_stream_total(const wk_log *l, uint8_t stream);

/* Bytes the log's segment files hold on disk (output and record headers). */
uint64_t wk_log_disk_bytes(const wk_log *l);
/* Drops now the whole segments every reader has passed (except the last). */
void wk_log_trim(wk_log *l);
/* Drops every segment, read or not: the output is gone and the log starts at
 * its end (offsets stay valid; totals are kept). For reclaiming an ended
 * session's log. */
void wk_log_discard(wk_log *l);

/* A reader has everything before offset: earlier segments may be dropped when room is needed. */
void wk_log_mark_read(wk_log *l, uint64_t offset);
/* At most how far behind what a reader was sent the log keeps what it holds: min(WK_LOG_RESUME_WINDOW,
 * half the capacity), so that the window never stalls the command (it leaves the other half to run in). */
#define WK_LOG_RESUME_WINDOW (32u << 20)
uint64_t wk_log_resume_window(const wk_log *l);
/* A reader was sent everything before offset, some of which may still be in transit (the data plane's
 * buffers, both ends' sockets: a client's receive buffer alone may grow to several MiB) and lost if it
 * hangs up: the log marks read only what is a resume window behind offset, so that a client reconnecting
 * from the last byte it received finds it. */
void wk_log_mark_sent(wk_log *l, uint64_t offset);

/* Reads up to cap bytes of one record starting at offset (which may fall inside
 * a record). Sets *ret_stream and *ret_n; *ret_n == 0 at the end. Fails with
 * SP_E_NOT_FOUND if offset was dropped (before start) and SP_E_INVALID past end.
 * While a reader keeps within 256 KiB of the end, the log keeps copies of its
 * newest records (up to 4) in memory and serves reads from them: an attached
 * stream right behind the process reads no file. */
int wk_log_read(wk_log *l, uint64_t offset, void *buf, size_t cap, uint8_t *ret_stream, size_t *ret_n, sp_error **err);

/* Frees the in-memory copies of the newest records (the output has ended;
 * a later read near the end keeps copies again). */
void wk_log_release_tail(wk_log *l);
/* Reads of every log of the process served from the in-memory copies, and
 * from the files (one thread: the worker's loop). */
void wk_log_read_counts(uint64_t *ret_memory, uint64_t *ret_file);

#endif
