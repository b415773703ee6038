/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "session/log.h"
#include "space/cleanup.h"
#include "space/buf.h"
#include "space/fileio.h"

#define HDR 8
#define INDEX_STRIDE (64u << 10)
#define MAX_SEGMENTS 4096

typedef struct {
        uint64_t offset; /* output offset of the record's first byte */
        uint64_t pos; /* file position of its header */
} index_entry;

typedef struct {
        uint64_t start; /* output offset of the first byte */
        uint64_t bytes; /* output bytes held */
        uint64_t file_size;
        uint64_t stream_bytes[3]; /* per stream, for the totals of dropped segments */
        int fd;
        index_entry *index;
        size_t nindex, capindex;
} segment;

/* Where a record starts (its output offset and position in its segment), as
 * a read left it: the next read from where one ended starts there instead of
 * walking up to 64 KiB of short records from the index again — which made
 * reading a log of short lines quadratic. A few, for readers side by side. */
typedef struct {
        uint64_t seg_start, rec_off, pos;
        bool used;
} read_hint;

#define READ_HINTS 8

/* The newest records are kept in memory as well while a reader keeps within
 * TAIL_NEAR bytes of the end: a reader right behind the writer (an attached
 * stream of a command's output as it comes) is served from them instead of
 * two preads of the file. A reader that falls further behind (the process
 * writes faster than the client takes) reads the file, and the copies stop
 * until one comes near again. The file stays the record; the copies only
 * answer reads. */
#define TAIL_SLOTS 4
#define TAIL_NEAR (256u << 10)

/* Reads of every log in the process, by where they were served from. */
static uint64_t reads_from_memory, reads_from_file;

typedef struct {
        uint64_t offset; /* output offset of the record's first byte */
        uint8_t *data;
        size_t len, cap; /* len 0: empty */
        uint8_t stream;
} tail_slot;

struct wk_log {
        char *dir;
        uint64_t capacity;
        uint64_t segment_bytes; /* a quarter of the capacity, within [64 KiB, WK_LOG_SEGMENT_BYTES] */
        segment *seg;
        size_t nseg;
        uint64_t read_mark;
        uint64_t totals[3];
        read_hint hints[READ_HINTS];
        unsigned next_hint;
        bool tail_on; /* appends are copied into tail */
        tail_slot tail[TAIL_SLOTS];
        unsigned tail_next;
};

static void seg_close(segment *s)
{
        sp_close(s->fd);
        free(s->index);
}

static void index_add(segment *s, uint64_t offset, uint64_t pos)
{
        if (s->nindex && offset - s->index[s->nindex - 1].offset < INDEX_STRIDE)
                return;
        if (s->nindex == s->capindex) {
                size_t cap = s->capindex ? s->capindex * 2 : 16;
                index_entry *p = realloc(s->index, cap * sizeof(*p));
                if (!p)
                        return; /* the index is an optimisation: reads scan further without it */
                s->index = p;
                s->capindex = cap;
        }
        s->index[s->nindex++] = (index_entry){offset, pos};
}

static uint32_t get32(const uint8_t *p)
{
        return (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
}

/* Scans a segment to rebuild its index and totals; truncates a torn tail. */
static int seg_recover(wk_log *l, segment *s, const char *path, sp_error **err)
{
        struct stat st;
        if (fstat(s->fd, &st) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "stat %s", path);
        uint64_t pos = 0, size = (uint64_t)st.st_size;
        s->bytes = 0;
        while (pos + HDR <= size) {
                uint8_t h[HDR];
                if (pread(s->fd, h, HDR, (off_t)pos) != HDR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read %s", path);
                uint32_t len = get32(h);
                if ((h[0] != 1 && h[0] != 2) || h[1] || h[2] || h[3] || len == 0 || len > WK_LOG_RECORD_MAX ||
                    pos + HDR + len > size)
                        break;
                index_add(s, s->start + s->bytes, pos);
                l->totals[h[0]] += len;
                s->stream_bytes[h[0]] += len;
                s->bytes += len;
                pos += HDR + len;
        }
        if (pos != size && ftruncate(s->fd, (off_t)pos) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "truncate %s", path);
        s->file_size = pos;
        return 0;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static void seg_path(const wk_log *l, uint64_t start, char *out, size_t n)
{
        snprintf(out, n, "%s/%020" PRIu64 ".seg", l->dir, start);
}

/* What dropped segments held, per stream, is kept in a small file. */
static void read_dropped(wk_log *l, bool empty)
{
        char base[4096];
        snprintf(base, sizeof(base), "%s/dropped", l->dir);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        if (sp_file_read(base, 256, &text, NULL) < 0)
                return;
        unsigned long long o = 0, e = 0;
        if (sscanf(text.data, "%llu %llu", &o, &e) == 2) {
                l->totals[1] += o;
                l->totals[2] += e;
                if (empty)
                        l->read_mark = o + e;
        }
}

int wk_log_open(const char *dir, uint64_t capacity, bool create, wk_log **ret, sp_error **err)
{
        if (create && sp_mkdir_p(dir, 0700, err) < 0)
                return -SP_E_IO;
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open log %s", dir);
        uint64_t starts[MAX_SEGMENTS];
        size_t n = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
                char *end;
                uint64_t v = strtoull(de->d_name, &end, 10);
                if (strcmp(end, ".seg") != 0 || end - de->d_name != 20)
                        continue;
                if (n == MAX_SEGMENTS)
                        return sp_error_set(err, SP_E_LIMIT, "log %s has too many segments", dir);
                starts[n++] = v;
        }
        qsort(starts, n, sizeof(uint64_t), cmp_u64);

        wk_log *l = calloc(1, sizeof(*l));
        if (!l || !(l->dir = strdup(dir)) || !(l->seg = calloc(n ? n : 1, sizeof(segment)))) {
                if (l)
                        free(l->dir);
                free(l);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        l->capacity = capacity;
        l->segment_bytes = capacity / 4;
        if (l->segment_bytes < (64u << 10))
                l->segment_bytes = 64u << 10;
        if (l->segment_bytes > WK_LOG_SEGMENT_BYTES)
                l->segment_bytes = WK_LOG_SEGMENT_BYTES;
        for (size_t i = 0; i < n; i++) {
                char path[4096];
                seg_path(l, starts[i], path, sizeof(path));
                segment *s = &l->seg[l->nseg];
                *s = (segment){.start = starts[i], .fd = open(path, O_RDWR | O_CLOEXEC)};
                if (s->fd < 0) {
                        sp_error_set_errno(err, SP_E_IO, errno, "open %s", path);
                        goto fail;
                }
                l->nseg++;
                if (seg_recover(l, s, path, err) < 0)
                        goto fail;
                /* Segments must be contiguous; a gap means damage we cannot repair. */
                if (i > 0 && l->seg[i - 1].start + l->seg[i - 1].bytes != s->start) {
                        sp_error_set(err, SP_E_IO, "log %s: segments are not contiguous", dir);
                        goto fail;
                }
        }
        if (n)
                l->read_mark = l->seg[0].start;
        read_dropped(l, n == 0);
        *ret = l;
        return 0;
fail:
        wk_log_close(l);
        return -SP_E_IO;
}

void wk_log_close(wk_log *l)
{
        if (!l)
                return;
        for (size_t i = 0; i < l->nseg; i++)
                seg_close(&l->seg[i]);
        wk_log_release_tail(l);
        free(l->seg);
        free(l->dir);
        free(l);
}

void wk_log_release_tail(wk_log *l)
{
        for (size_t i = 0; i < TAIL_SLOTS; i++) {
                free(l->tail[i].data);
                l->tail[i] = (tail_slot){0};
        }
        l->tail_on = false;
        l->tail_next = 0;
}

/* Keeps a copy of the record just appended (best effort: without memory it is only in the file). */
static void tail_add(wk_log *l, uint64_t offset, uint8_t stream, const void *p, size_t n)
{
        tail_slot *t = &l->tail[l->tail_next];
        l->tail_next = (l->tail_next + 1) % TAIL_SLOTS;
        t->len = 0;
        if (t->cap < n) {
                uint8_t *grown = realloc(t->data, n);
                if (!grown)
                        return;
                t->data = grown;
                t->cap = n;
        }
        memcpy(t->data, p, n);
        t->offset = offset;
        t->len = n;
        t->stream = stream;
}

/* Serves a read from the copies if one holds offset. */
static bool tail_read(wk_log *l, uint64_t offset, void *buf, size_t cap, uint8_t *ret_stream, size_t *ret_n)
{
        for (size_t i = 0; i < TAIL_SLOTS; i++) {
                const tail_slot *t = &l->tail[i];
                if (t->len && t->offset <= offset && offset < t->offset + t->len) {
                        size_t skip = (size_t)(offset - t->offset), n = t->len - skip < cap ? t->len - skip : cap;
                        memcpy(buf, t->data + skip, n);
                        *ret_stream = t->stream;
                        *ret_n = n;
                        return true;
                }
        }
        return false;
}

void wk_log_read_counts(uint64_t *ret_memory, uint64_t *ret_file)
{
        *ret_memory = reads_from_memory;
        *ret_file = reads_from_file;
}

int wk_log_remove(const char *dir, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return errno == ENOENT ? 0 : sp_error_set_errno(err, SP_E_IO, errno, "open %s", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char p[4096];
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                if (unlink(p) < 0 && errno != ENOENT)
                        return sp_error_set_errno(err, SP_E_IO, errno, "remove %s", p);
        }
        if (rmdir(dir) < 0 && errno != ENOENT)
                return sp_error_set_errno(err, SP_E_IO, errno, "remove %s", dir);
        return 0;
}

uint64_t wk_log_start(const wk_log *l)
{
        return l->nseg ? l->seg[0].start : l->read_mark;
}

uint64_t wk_log_end(const wk_log *l)
{
        if (!l->nseg)
                return l->read_mark;
        const segment *s = &l->seg[l->nseg - 1];
        return s->start + s->bytes;
}

uint64_t wk_log_stream_total(const wk_log *l, uint8_t stream)
{
        return stream <= 2 ? l->totals[stream] : 0;
}

static uint64_t held(const wk_log *l)
{
        return wk_log_end(l) - wk_log_start(l);
}

uint64_t wk_log_room(const wk_log *l)
{
        uint64_t droppable = 0;
        /* Whole segments already read, except the one being appended to. */
        for (size_t i = 0; i + 1 < l->nseg; i++) {
                if (l->seg[i].start + l->seg[i].bytes > l->read_mark)
                        break;
                droppable += l->seg[i].bytes;
        }
        uint64_t used = held(l) - droppable;
        return used >= l->capacity ? 0 : l->capacity - used;
}

static void drop_first(wk_log *l)
{
        /* Record the dropped bytes per stream before the segment goes. */
        uint64_t dropped[3] = {0};
        char base[4096], text[64];
        for (size_t i = 0; i < 3; i++)
                dropped[i] = l->totals[i];
        for (size_t k = 1; k < l->nseg; k++)
                for (size_t i = 1; i < 3; i++)
                        dropped[i] -= l->seg[k].stream_bytes[i];
        snprintf(base, sizeof(base), "%s/dropped", l->dir);
        int n = snprintf(text, sizeof(text), "%" PRIu64 " %" PRIu64 "\n", dropped[1], dropped[2]);
        /* Not synced: the segment's unlink is not either, and this runs on the loop every segment. */
        (void)sp_file_replace(base, text, (size_t)n, 0600, NULL);
        char path[4096];
        seg_path(l, l->seg[0].start, path, sizeof(path));
        unlink(path);
        seg_close(&l->seg[0]);
        memmove(l->seg, l->seg + 1, (l->nseg - 1) * sizeof(segment));
        l->nseg--;
        memset(l->hints, 0, sizeof(l->hints));
}

uint64_t wk_log_disk_bytes(const wk_log *l)
{
        uint64_t n = 0;
        for (size_t i = 0; i < l->nseg; i++)
                n += l->seg[i].file_size;
        return n;
}

void wk_log_trim(wk_log *l)
{
        while (l->nseg > 1 && l->seg[0].start + l->seg[0].bytes <= l->read_mark)
                drop_first(l);
}

void wk_log_discard(wk_log *l)
{
        l->read_mark = wk_log_end(l);
        while (l->nseg > 0)
                drop_first(l);
        wk_log_release_tail(l);
}

void wk_log_mark_read(wk_log *l, uint64_t offset)
{
        if (offset > l->read_mark && offset <= wk_log_end(l))
                l->read_mark = offset;
}

uint64_t wk_log_resume_window(const wk_log *l)
{
        return l->capacity / 2 < WK_LOG_RESUME_WINDOW ? l->capacity / 2 : WK_LOG_RESUME_WINDOW;
}

void wk_log_mark_sent(wk_log *l, uint64_t offset)
{
        uint64_t w = wk_log_resume_window(l);
        if (offset > w)
                wk_log_mark_read(l, offset - w);
}

static int new_segment(wk_log *l, sp_error **err)
{
        if (l->nseg >= MAX_SEGMENTS)
                return sp_error_set(err, SP_E_LIMIT, "log has too many segments");
        segment *grown = realloc(l->seg, (l->nseg + 1) * sizeof(segment));
        if (!grown)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        l->seg = grown;
        uint64_t start = wk_log_end(l);
        char path[4096];
        seg_path(l, start, path, sizeof(path));
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create %s", path);
        l->seg[l->nseg++] = (segment){.start = start, .fd = fd};
        return 0;
}

int wk_log_append(wk_log *l, uint8_t stream, const void *p, size_t n, sp_error **err)
{
        if ((stream != 1 && stream != 2) || n == 0 || n > WK_LOG_RECORD_MAX)
                return sp_error_set(err, SP_E_INVALID, "invalid log record (stream %u, %zu bytes)", stream, n);
        if (wk_log_room(l) < n)
                return sp_error_set(err, SP_E_LIMIT, "session output log is full");
        /* Make room by dropping whole segments that readers have passed. */
        while (l->nseg > 1 && held(l) + n > l->capacity && l->seg[0].start + l->seg[0].bytes <= l->read_mark)
                drop_first(l);
        if (!l->nseg || l->seg[l->nseg - 1].bytes >= l->segment_bytes) {
                if (new_segment(l, err) < 0)
                        return -SP_E_IO;
        }
        segment *s = &l->seg[l->nseg - 1];
        uint8_t h[HDR] = {stream, 0, 0, 0, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
        struct iovec iov[2] = {{h, HDR}, {(void *)p, n}};
        ssize_t w = pwritev(s->fd, iov, 2, (off_t)s->file_size);
        if (w != (ssize_t)(HDR + n)) {
                int e = w < 0 ? errno : ENOSPC;
                /* Cut what a short write left, so the log stays well-formed. */
                (void)!ftruncate(s->fd, (off_t)s->file_size);
                return sp_error_set_errno(err, e == ENOSPC || e == EDQUOT ? SP_E_LIMIT : SP_E_IO, e,
                                          "append to the session log");
        }
        index_add(s, s->start + s->bytes, s->file_size);
        if (l->tail_on)
                tail_add(l, s->start + s->bytes, stream, p, n);
        s->file_size += HDR + n;
        s->bytes += n;
        s->stream_bytes[stream] += n;
        l->totals[stream] += n;
        return 0;
}

int wk_log_read(wk_log *l, uint64_t offset, void *buf, size_t cap, uint8_t *ret_stream, size_t *ret_n, sp_error **err)
{
        if (offset < wk_log_start(l))
                return sp_error_set(err, SP_E_NOT_FOUND,
                                    "offset %" PRIu64 " is no longer retained (log starts at %" PRIu64 ")", offset,
                                    wk_log_start(l));
        if (offset > wk_log_end(l))
                return sp_error_set(err, SP_E_INVALID, "offset %" PRIu64 " is past the end (%" PRIu64 ")", offset,
                                    wk_log_end(l));
        if (offset == wk_log_end(l) || cap == 0) {
                *ret_n = 0;
                return 0;
        }
        if (l->tail_on && tail_read(l, offset, buf, cap, ret_stream, ret_n)) {
                reads_from_memory++;
                return 0;
        }
        reads_from_file++;
        l->tail_on = wk_log_end(l) - offset <= TAIL_NEAR;
        size_t i = 0;
        while (i + 1 < l->nseg && l->seg[i + 1].start <= offset)
                i++;
        segment *s = &l->seg[i];
        /* Start from the last index entry at or before offset, then walk records. */
        uint64_t rec_off = s->start, pos = 0;
        size_t lo = 0, hi = s->nindex;
        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (s->index[mid].offset <= offset)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (lo > 0) {
                rec_off = s->index[lo - 1].offset;
                pos = s->index[lo - 1].pos;
        }
        /* A read that ended nearer to offset in this segment starts closer. */
        for (size_t k = 0; k < READ_HINTS; k++) {
                const read_hint *h = &l->hints[k];
                if (h->used && h->seg_start == s->start && h->rec_off <= offset && h->rec_off > rec_off &&
                    h->pos < s->file_size) {
                        rec_off = h->rec_off;
                        pos = h->pos;
                }
        }
        for (;;) {
                uint8_t h[HDR];
                if (pread(s->fd, h, HDR, (off_t)pos) != HDR)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read the session log");
                uint32_t len = get32(h);
                if (offset < rec_off + len) {
                        uint64_t skip = offset - rec_off;
                        size_t n = (size_t)(len - skip) < cap ? (size_t)(len - skip) : cap;
                        ssize_t r = pread(s->fd, buf, n, (off_t)(pos + HDR + skip));
                        if (r != (ssize_t)n)
                                return sp_error_set_errno(err, SP_E_IO, errno, "read the session log");
                        *ret_stream = h[0];
                        *ret_n = n;
                        /* Where the next read (from offset + n) starts: this record
                         * again, or the one after it. */
                        bool whole = skip + n == len;
                        l->hints[l->next_hint] = (read_hint){.seg_start = s->start,
                                                             .rec_off = whole ? rec_off + len : rec_off,
                                                             .pos = whole ? pos + HDR + len : pos,
                                                             .used = true};
                        l->next_hint = (l->next_hint + 1) % READ_HINTS;
                        return 0;
                }
                rec_off += len;
                pos += HDR + len;
        }
}
