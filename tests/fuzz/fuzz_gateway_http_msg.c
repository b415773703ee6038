/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the egress gateway's request framing (gateway/wire/
 * http_msg.h). The first two bytes choose where the body is split and how
 * long a needle to search for; the rest is the client's bytes. When
 * gw_http_host_parse() accepts their head, its fields, request line and
 * framing are read; what follows the head (or, when the head is not
 * accepted, all of the bytes) is read as a chunked body. Beyond not crashing
 * or reading past the input: every field lies within its line within the
 * head, trimmed; the framing agrees with a plain count of the framing fields
 * (a refusal has a reason, an answer none); the chunked reader gives the
 * same answer fed whole, in two pieces and byte by byte, and a body it ends
 * ends with CRLF CRLF; the search finds what a naive one finds, split or not.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/http_host.h"
#include "wire/http_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An exact-size copy, so that reads past the end are caught. */
static uint8_t *copy_of(const uint8_t *p, size_t n)
{
        uint8_t *copy = malloc(n ? n : 1);
        if (!copy)
                abort();
        memcpy(copy, p, n);
        return copy;
}

static bool caseeq(const char *s, size_t n, const char *lit)
{
        if (strlen(lit) != n)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] + ('a' - 'A')) : s[i];
                if (c != lit[i])
                        return false;
        }
        return true;
}

typedef struct seen {
        const char *head;
        size_t head_len;
        unsigned lengths, encodings;
} seen;

static int check_field(const gw_http_field *f, void *ud)
{
        seen *s = ud;
        const char *end = s->head + s->head_len;
        if (f->line < s->head || f->line_len < 4 || f->line_len > (size_t)(end - f->line) || f->name != f->line ||
            f->name_len == 0 || f->name_len >= f->line_len || f->name[f->name_len] != ':' ||
            memcmp(f->line + f->line_len - 2, "\r\n", 2) != 0)
                abort();
        if (f->value < f->name + f->name_len + 1 || f->value + f->value_len > f->line + f->line_len - 2)
                abort();
        if (f->value_len && (f->value[0] == ' ' || f->value[0] == '\t' || f->value[f->value_len - 1] == ' ' ||
                             f->value[f->value_len - 1] == '\t'))
                abort();
        if (caseeq(f->name, f->name_len, "content-length"))
                s->lengths++;
        if (caseeq(f->name, f->name_len, "transfer-encoding"))
                s->encodings++;
        return 0;
}

static void check_head(const uint8_t *data, const gw_http_request *req)
{
        uint8_t *head = copy_of(data, req->head_len);
        seen s = {.head = (const char *)head, .head_len = req->head_len};
        if (gw_http_fields_each(head, req->head_len, check_field, &s) != 0)
                abort();
        const char *target;
        size_t target_len;
        if (gw_http_request_line(head, req->head_len, &target, &target_len) != 0 || target_len == 0 ||
            target <= (const char *)head || target + target_len >= (const char *)head + req->head_len)
                abort();
        gw_http_framing fr;
        int r = gw_http_framing_of(head, req->head_len, req->minor_version, &fr);
        if (r == -1) {
                if (!fr.reason || fr.kind != GW_HTTP_BODY_NONE || fr.length != 0)
                        abort();
        } else if (r == 0) {
                if (fr.reason || fr.kind > GW_HTTP_BODY_TUNNEL || s.lengths > 1 || s.encodings > 1 ||
                    (s.lengths && s.encodings))
                        abort();
                if (s.encodings && (fr.kind != GW_HTTP_BODY_CHUNKED || req->minor_version == 0))
                        abort();
                if (fr.kind == GW_HTTP_BODY_CHUNKED && !s.encodings)
                        abort();
                if (fr.kind == GW_HTTP_BODY_LENGTH ? !s.lengths || fr.length > 999999999999999999ull : fr.length != 0)
                        abort();
                if (fr.kind == GW_HTTP_BODY_NONE && s.lengths)
                        abort();
        } else {
                abort();
        }
        free(head);
}

typedef struct outcome {
        int r;
        size_t used;
        const char *reason;
} outcome;

/* Feeds p[0..n): first bytes, then the rest in pieces of at most step bytes
 * (0: in one), until the reader decides. */
static outcome feed(const uint8_t *p, size_t n, size_t first, size_t step)
{
        gw_http_chunked c;
        gw_http_chunked_init(&c);
        outcome o = {0};
        size_t at = 0;
        for (bool started = false;; started = true) {
                size_t len = started ? n - at : first;
                if (step && len > step)
                        len = step;
                uint8_t *piece = copy_of(p + at, len);
                size_t used = SIZE_MAX;
                o.reason = NULL;
                o.r = gw_http_chunked_feed(&c, piece, len, &used, &o.reason);
                free(piece);
                if (used > len || (o.r == 0 && used != len) || (o.r < 0) != (o.reason != NULL) || o.r < -1 || o.r > 1)
                        abort();
                o.used = at + used;
                at += len;
                if (o.r != 0 || at == n)
                        return o;
        }
}

static void check_chunked(const uint8_t *p, size_t n, size_t cut)
{
        outcome whole = feed(p, n, n, 0);
        outcome two = feed(p, n, cut, 0);
        outcome bytes = feed(p, n, n ? 1 : 0, 1);
        if (two.r != whole.r || two.used != whole.used || bytes.r != whole.r || bytes.used != whole.used)
                abort();
        if (whole.r < 0 && (strcmp(two.reason, whole.reason) != 0 || strcmp(bytes.reason, whole.reason) != 0))
                abort();
        if (whole.r == 1 && (whole.used < 5 || memcmp(p + whole.used - 4, "\r\n\r\n", 4) != 0))
                abort();
        if (whole.r == -1 && whole.used >= n)
                abort();
}

/* The end of the first occurrence, or 0. */
static size_t naive_find(const uint8_t *needle, size_t m, const uint8_t *p, size_t n)
{
        for (size_t i = 0; i + m <= n; i++)
                if (memcmp(p + i, needle, m) == 0)
                        return i + m;
        return 0;
}

static void check_scan(const uint8_t *p, size_t n, size_t m, size_t cut)
{
        if (m > n)
                return;
        const uint8_t *needle = p + n - m;
        size_t want = naive_find(needle, m, p, n);
        gw_http_scan s = {0};
        size_t end = 0;
        if (!gw_http_scan_feed(&s, (const char *)needle, m, p, n, &end) || end != want)
                abort();
        memset(&s, 0, sizeof(s));
        bool first = gw_http_scan_feed(&s, (const char *)needle, m, p, cut, &end);
        if (first != (want <= cut) || (first && end != want))
                abort();
        if (!first && (!gw_http_scan_feed(&s, (const char *)needle, m, p + cut, n - cut, &end) || cut + end != want))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 2)
                return 0;
        unsigned seed = (unsigned)data[0] << 8 | data[1];
        data += 2;
        size -= 2;
        gw_http_request req;
        const uint8_t *body = data;
        size_t body_len = size;
        uint8_t *copy = copy_of(data, size);
        if (gw_http_host_parse(copy, size, 0, &req) == GW_HTTP_OK) {
                check_head(data, &req);
                body += req.head_len;
                body_len -= req.head_len;
        }
        free(copy);
        check_chunked(body, body_len, seed % (body_len + 1));
        check_scan(body, body_len, 1 + (seed >> 8) % 16, (seed * 7) % (body_len + 1));
        return 0;
}
