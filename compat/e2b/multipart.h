/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A multipart/form-data reader that streams: the body is pulled from a
 * source as the parts are read, and a part's bytes are handed on without
 * ever holding a whole part. Besides the parts' bytes it keeps at most one
 * part's headers (E2B_MP_MAX_HEAD) and one read of the source.
 *
 *   e2b_mp m;
 *   e2b_mp_init(&m, content_type, source, userdata, &err);
 *   while (e2b_mp_read(buf, sizeof(buf), &m, &err) > 0)   // the preamble
 *           ;
 *   while (e2b_mp_next(&m, &name, &err) > 0)
 *           while ((n = e2b_mp_read(buf, sizeof(buf), &m, &err)) > 0)
 *                   ... n bytes of the part ...
 *   e2b_mp_free(&m);
 *
 * No I/O of its own: the source decides where the bytes come from. Not
 * thread-safe (one reader per body).
 */
#ifndef E2B_MULTIPART_H
#define E2B_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "space/buf.h"
#include "space/error.h"

#define E2B_MP_MAX_BOUNDARY 70 /* RFC 2046 */
#define E2B_MP_MAX_HEAD (16 * 1024)
#define E2B_MP_CHUNK (64 * 1024) /* what one pull from the source asks for */

/* Where the body comes from: up to cap bytes into buf; the count, 0 at the
 * body's end, or < 0 with *err set. */
typedef ssize_t (*e2b_mp_source)(void *buf, size_t cap, void *userdata, sp_error **err);

typedef struct e2b_mp {
        e2b_mp_source source;
        void *userdata;
        char delim[96]; /* "\r\n--" boundary */
        size_t dlen;
        sp_buf buf;
        bool in_eof, part_done;
} e2b_mp;

/* Starts reading a body of the given Content-Type (its boundary parameter,
 * quoted or not, 1 to 70 bytes). Errors: SP_E_INVALID (no or a malformed
 * boundary). The reader is usable (and must be freed) only on success. */
int e2b_mp_init(e2b_mp *m, const char *content_type, e2b_mp_source source, void *userdata, sp_error **err);

/* Reads the current part's bytes (first the preamble) up to the next
 * delimiter: up to cap into out, 0 at the delimiter. A sp_http_body_source
 * with the reader as userdata. Errors: SP_E_INVALID (the body ends inside
 * the part), or the source's. */
ssize_t e2b_mp_read(void *out, size_t cap, void *userdata, sp_error **err);

/* After a delimiter: reads the next part's headers; 1 when there is a part
 * (*ret_name its filename="…", malloc'd, or NULL without one), 0 at the
 * closing delimiter. Errors: SP_E_INVALID (truncated body or headers, a
 * filename without its closing quote), SP_E_TOO_LARGE (headers longer than
 * E2B_MP_MAX_HEAD), or the source's. */
int e2b_mp_next(e2b_mp *m, char **ret_name, sp_error **err);

void e2b_mp_free(e2b_mp *m);

#endif
