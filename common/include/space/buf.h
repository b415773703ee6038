/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Growable byte buffers.
 *
 * An sp_buf is a caller-owned struct holding a heap block; data is always
 * NUL-terminated past len, so text can be used as a C string. A zeroed
 * struct (SP_BUF_INIT) is an empty buffer. Allocation failure aborts
 * (the daemons cannot do anything useful without memory); growth past
 * `limit` (if non-zero) fails with SP_E_TOO_LARGE instead.
 * Not thread-safe.
 */
#ifndef SPACE_BUF_H
#define SPACE_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "space/error.h"

typedef struct sp_buf {
        char *data;
        size_t len;
        size_t cap;
        size_t limit; /* 0 = unbounded */
} sp_buf;

#define SP_BUF_INIT \
        { \
                0 \
        }

/* Ensures room for `extra` more bytes (plus the NUL). */
int sp_buf_reserve(sp_buf *b, size_t extra, sp_error **err);
int sp_buf_append(sp_buf *b, const void *p, size_t n, sp_error **err);
int sp_buf_append_str(sp_buf *b, const char *s, sp_error **err);
int sp_buf_appendf(sp_buf *b, sp_error **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int sp_buf_appendv(sp_buf *b, sp_error **err, const char *fmt, va_list ap) __attribute__((format(printf, 3, 0)));
/* Drops the first n bytes (n <= len). */
void sp_buf_consume(sp_buf *b, size_t n);
void sp_buf_clear(sp_buf *b);
/* Returns the data (NUL-terminated, possibly NULL if never grown) and resets b. */
char *sp_buf_steal(sp_buf *b);
void sp_buf_free(sp_buf *b);
#define _cleanup_buf_ __attribute__((cleanup(sp_buf_free)))

/* Base64 (standard and URL-safe without padding). Output appended to out. */
int sp_base64_encode(sp_buf *out, const void *p, size_t n, int url, sp_error **err);
/* Accepts padded or unpadded input of the chosen alphabet; rejects anything else. */
int sp_base64_decode(sp_buf *out, const char *s, size_t n, int url, sp_error **err);
/* Lower-case hex. */
int sp_hex_encode(sp_buf *out, const void *p, size_t n, sp_error **err);

#endif
