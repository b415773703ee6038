/* SPDX-License-Identifier: Apache-2.0 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"

int sp_buf_reserve(sp_buf *b, size_t extra, sp_error **err)
{
        if (extra > SIZE_MAX / 2 - b->len)
                return sp_error_set(err, SP_E_TOO_LARGE, "buffer size overflow");
        size_t need = b->len + extra + 1;
        if (b->limit && b->len + extra > b->limit)
                return sp_error_set(err, SP_E_TOO_LARGE, "more than %zu bytes", b->limit);
        if (need <= b->cap)
                return 0;
        size_t cap = b->cap ? b->cap : 64;
        while (cap < need)
                cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p)
                abort();
        b->data = p;
        b->cap = cap;
        return 0;
}

int sp_buf_append(sp_buf *b, const void *p, size_t n, sp_error **err)
{
        if (sp_buf_reserve(b, n, err) < 0)
                return -SP_E_TOO_LARGE;
        if (n)
                memcpy(b->data + b->len, p, n);
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
}

int sp_buf_append_str(sp_buf *b, const char *s, sp_error **err)
{
        return sp_buf_append(b, s, strlen(s), err);
}

int sp_buf_appendv(sp_buf *b, sp_error **err, const char *fmt, va_list ap)
{
        va_list aq;
        va_copy(aq, ap);
        int n = vsnprintf(NULL, 0, fmt, aq);
        va_end(aq);
        if (n < 0)
                return sp_error_set(err, SP_E_INVALID, "bad format");
        if (sp_buf_reserve(b, (size_t)n, err) < 0)
                return -SP_E_TOO_LARGE;
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        b->len += (size_t)n;
        return 0;
}

int sp_buf_appendf(sp_buf *b, sp_error **err, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = sp_buf_appendv(b, err, fmt, ap);
        va_end(ap);
        return r;
}

void sp_buf_consume(sp_buf *b, size_t n)
{
        if (n >= b->len) {
                sp_buf_clear(b);
                return;
        }
        memmove(b->data, b->data + n, b->len - n);
        b->len -= n;
        b->data[b->len] = '\0';
}

void sp_buf_clear(sp_buf *b)
{
        b->len = 0;
        if (b->data)
                b->data[0] = '\0';
}

char *sp_buf_steal(sp_buf *b)
{
        char *p = b->data;
        b->data = NULL;
        b->len = b->cap = 0;
        return p;
}

void sp_buf_free(sp_buf *b)
{
        free(b->data);
        b->data = NULL;
        b->len = b->cap = 0;
}

static const char b64_std[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static const char b64_url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

int sp_base64_encode(sp_buf *out, const void *p, size_t n, int url, sp_error **err)
{
        const char *alpha = url ? b64_url : b64_std;
        const unsigned char *s = p;
        if (sp_buf_reserve(out, (n + 2) / 3 * 4, err) < 0)
                return -SP_E_TOO_LARGE;
        char *o = out->data + out->len;
        size_t i = 0;
        for (; i + 3 <= n; i += 3) {
                unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
                *o++ = alpha[v >> 18 & 63];
                *o++ = alpha[v >> 12 & 63];
                *o++ = alpha[v >> 6 & 63];
                *o++ = alpha[v & 63];
        }
        if (i < n) {
                unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0);
                *o++ = alpha[v >> 18 & 63];
                *o++ = alpha[v >> 12 & 63];
                if (i + 1 < n)
                        *o++ = alpha[v >> 6 & 63];
                else if (!url)
                        *o++ = '=';
                if (!url)
                        *o++ = '=';
        }
        out->len = (size_t)(o - out->data);
        out->data[out->len] = '\0';
        return 0;
}

static int b64_value(char c, int url)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == (url ? '-' : '+'))
                return 62;
        if (c == (url ? '_' : '/'))
                return 63;
        return -1;
}

int sp_base64_decode(sp_buf *out, const char *s, size_t n, int url, sp_error **err)
{
        /* Strip up to two '=' of padding; the rest must be alphabet only. */
        size_t pad = 0;
        while (n > 0 && s[n - 1] == '=' && pad < 2) {
                n--;
                pad++;
        }
        if (n % 4 == 1 || (pad && (n + pad) % 4 != 0))
                return sp_error_set(err, SP_E_INVALID, "invalid base64 length");
        size_t start = out->len;
        if (sp_buf_reserve(out, n / 4 * 3 + 3, err) < 0)
                return -SP_E_TOO_LARGE;
        unsigned acc = 0;
        int bits = 0;
        for (size_t i = 0; i < n; i++) {
                int v = b64_value(s[i], url);
                if (v < 0) {
                        out->len = start;
                        out->data[start] = '\0';
                        return sp_error_set(err, SP_E_INVALID, "invalid base64 character at %zu", i);
                }
                acc = acc << 6 | (unsigned)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out->data[out->len++] = (char)(acc >> bits & 0xff);
                }
        }
        /* Non-canonical trailing bits would let two strings decode alike. */
        if (bits && (acc & ((1u << bits) - 1))) {
                out->len = start;
                out->data[start] = '\0';
                return sp_error_set(err, SP_E_INVALID, "invalid base64 trailing bits");
        }
        out->data[out->len] = '\0';
        return 0;
}

int sp_hex_encode(sp_buf *out, const void *p, size_t n, sp_error **err)
{
        static const char hex[] = "0123456789abcdef";
        const unsigned char *s = p;
        if (sp_buf_reserve(out, n * 2, err) < 0)
                return -SP_E_TOO_LARGE;
        for (size_t i = 0; i < n; i++) {
                out->data[out->len++] = hex[s[i] >> 4];
                out->data[out->len++] = hex[s[i] & 15];
        }
        out->data[out->len] = '\0';
        return 0;
}
