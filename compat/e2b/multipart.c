/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The streaming multipart/form-data reader (see multipart.h).
 */
#include "multipart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"

/* Pulls more of the body into m->buf; 0 at its end. */
static int fill(e2b_mp *m, sp_error **err)
{
        char tmp[E2B_MP_CHUNK];
        ssize_t n = m->source(tmp, sizeof(tmp), m->userdata, err);
        if (n < 0)
                return -1;
        if (n == 0) {
                m->in_eof = true;
                return 0;
        }
        sp_buf_append(&m->buf, tmp, (size_t)n, NULL);
        return 1;
}

static const char *find(const char *hay, size_t n, const char *needle, size_t nl)
{
        return nl <= n ? memmem(hay, n, needle, nl) : NULL;
}

ssize_t e2b_mp_read(void *out, size_t cap, void *userdata, sp_error **err)
{
        e2b_mp *m = userdata;
        for (;;) {
                if (m->part_done)
                        return 0;
                const char *d = find(m->buf.data ? m->buf.data : "", m->buf.len, m->delim, m->dlen);
                /* Without a delimiter, hold back what could be the start of one. */
                size_t avail = d ? (size_t)(d - m->buf.data) : m->buf.len >= m->dlen ? m->buf.len - m->dlen + 1 : 0;
                if (d && avail == 0) {
                        sp_buf_consume(&m->buf, m->dlen);
                        m->part_done = true;
                        return 0;
                }
                if (avail > 0) {
                        size_t n = avail < cap ? avail : cap;
                        memcpy(out, m->buf.data, n);
                        sp_buf_consume(&m->buf, n);
                        return (ssize_t)n;
                }
                int r = fill(m, err);
                if (r < 0)
                        return -1;
                if (r == 0)
                        return sp_error_set(err, SP_E_INVALID, "the multipart body ends inside a part");
        }
}

int e2b_mp_next(e2b_mp *m, char **ret_name, sp_error **err)
{
        *ret_name = NULL;
        while (m->buf.len < 2)
                if (fill(m, err) <= 0)
                        return m->in_eof ? sp_error_set(err, SP_E_INVALID, "truncated multipart body") : -1;
        if (m->buf.data[0] == '-' && m->buf.data[1] == '-')
                return 0;
        /* The headers' end is looked for only where it keeps them within
         * the bound, so that how the body arrives cannot change the answer. */
        const char *end;
        while (!(end = find(m->buf.data, m->buf.len < E2B_MP_MAX_HEAD + 4 ? m->buf.len : E2B_MP_MAX_HEAD + 4,
                            "\r\n\r\n", 4))) {
                if (m->buf.len >= E2B_MP_MAX_HEAD + 4)
                        return sp_error_set(err, SP_E_TOO_LARGE, "multipart headers too large");
                if (fill(m, err) <= 0)
                        return m->in_eof ? sp_error_set(err, SP_E_INVALID, "truncated multipart headers") : -1;
        }
        size_t hl = (size_t)(end - m->buf.data);
        _cleanup_free_ char *head = strndup(m->buf.data, hl);
        if (!head)
                abort();
        sp_buf_consume(&m->buf, hl + 4);
        m->part_done = false;
        const char *fn = strstr(head, "filename=\"");
        if (fn) {
                fn += 10;
                const char *q = strchr(fn, '"');
                if (!q)
                        return sp_error_set(err, SP_E_INVALID, "malformed multipart filename");
                if (!(*ret_name = strndup(fn, (size_t)(q - fn))))
                        abort();
        }
        return 1;
}

int e2b_mp_init(e2b_mp *m, const char *content_type, e2b_mp_source source, void *userdata, sp_error **err)
{
        memset(m, 0, sizeof(*m));
        m->source = source;
        m->userdata = userdata;
        const char *b = strcasestr(content_type, "boundary=");
        if (!b)
                return sp_error_set(err, SP_E_INVALID, "multipart body without a boundary");
        b += 9;
        bool quoted = *b == '"';
        b += quoted;
        size_t n = strcspn(b, quoted ? "\"" : "; \t");
        if (n == 0 || n > E2B_MP_MAX_BOUNDARY)
                return sp_error_set(err, SP_E_INVALID, "malformed multipart boundary");
        m->dlen = (size_t)snprintf(m->delim, sizeof(m->delim), "\r\n--%.*s", (int)n, b);
        /* The first delimiter has no CRLF before it. */
        sp_buf_append(&m->buf, "\r\n", 2, NULL);
        return 0;
}

void e2b_mp_free(e2b_mp *m)
{
        sp_buf_free(&m->buf);
}
