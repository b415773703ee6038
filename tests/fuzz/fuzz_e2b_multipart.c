/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: space-e2b's multipart/form-data reader (compat/e2b/
 * multipart.h). The input's first line is the Content-Type, the rest the
 * body. The body is read as files.c reads an upload (the preamble, then
 * each part's name and bytes) three times: handed over whole, in pieces
 * whose sizes come from the input, and byte by byte. The three must read
 * the same parts and end the same way, and the reader must never hold more
 * than one part's headers and one read of the body.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct source {
        const uint8_t *p;
        size_t n, off, piece;
} source;

static ssize_t pull(void *buf, size_t cap, void *userdata, sp_error **err)
{
        source *s = userdata;
        size_t n = s->n - s->off;
        if (s->piece && n > s->piece)
                n = s->piece;
        if (n > cap)
                n = cap;
        memcpy(buf, s->p + s->off, n);
        s->off += n;
        return (ssize_t)n;
}

static void bounded(const e2b_mp *m)
{
        if (m->buf.len > E2B_MP_MAX_HEAD + 4 + E2B_MP_CHUNK + m->dlen)
                abort();
}

/* Reads the whole body into log ("name|bytes" per part); returns the
 * error code, or 0 when it ended at the closing delimiter. */
static int run(const char *ctype, const uint8_t *body, size_t n, size_t piece, sp_buf *log)
{
        source s = {.p = body, .n = n, .piece = piece};
        e2b_mp m;
        sp_error *e = NULL;
        if (e2b_mp_init(&m, ctype, pull, &s, &e) < 0) {
                if (!e || e->code != SP_E_INVALID)
                        abort();
                int code = e->code;
                sp_error_free(e);
                return code;
        }
        if (m.dlen < 5 || m.dlen > 4 + E2B_MP_MAX_BOUNDARY || strlen(m.delim) != m.dlen)
                abort();
        char buf[512];
        ssize_t r;
        while ((r = e2b_mp_read(buf, sizeof(buf), &m, &e)) > 0)
                bounded(&m);
        for (int parts = 0; r == 0 && parts < 1000; parts++) {
                char *name = NULL;
                int more = e2b_mp_next(&m, &name, &e);
                bounded(&m);
                if (more <= 0) {
                        if (name)
                                abort();
                        r = more;
                        break;
                }
                sp_buf_append_str(log, name ? name : "-", NULL);
                sp_buf_append(log, "|", 1, NULL);
                free(name);
                while ((r = e2b_mp_read(buf, sizeof(buf), &m, &e)) > 0) {
                        if ((size_t)r > sizeof(buf))
                                abort();
                        sp_buf_append(log, buf, (size_t)r, NULL);
                        bounded(&m);
                }
                sp_buf_append(log, "\n", 1, NULL);
        }
        e2b_mp_free(&m);
        if ((r < 0) != (e != NULL))
                abort();
        int code = e ? e->code : 0;
        if (e && code != SP_E_INVALID && code != SP_E_TOO_LARGE)
                abort();
        sp_error_free(e);
        return code;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const uint8_t *nl = memchr(data, '\n', size);
        size_t cl = nl ? (size_t)(nl - data) : size;
        char *ctype = malloc(cl + 1);
        if (!ctype)
                return 0;
        memcpy(ctype, data, cl);
        ctype[cl] = '\0';
        const uint8_t *body = nl ? nl + 1 : data + size;
        size_t n = (size_t)(data + size - body);
        sp_buf whole = SP_BUF_INIT, pieces = SP_BUF_INIT, bytes = SP_BUF_INIT;
        int r1 = run(ctype, body, n, 0, &whole);
        int r2 = run(ctype, body, n, size ? (size_t)data[size - 1] % 13 + 1 : 1, &pieces);
        int r3 = run(ctype, body, n, 1, &bytes);
        if (r1 != r2 || r1 != r3 || whole.len != pieces.len || whole.len != bytes.len ||
            (whole.len &&
             (memcmp(whole.data, pieces.data, whole.len) != 0 || memcmp(whole.data, bytes.data, whole.len) != 0)))
                abort();
        sp_buf_free(&whole);
        sp_buf_free(&pieces);
        sp_buf_free(&bytes);
        free(ctype);
        return 0;
}
