/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the HTTP/1.1 request parser. The input (after a two-byte
 * split point) is parsed as a stream of pipelined requests, once in one piece
 * and once split at the fuzzer-chosen point; both runs must see the same
 * events, the same body bytes and the same outcome. Accessors are exercised on
 * every parsed head. Small limits make the limit paths reachable.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/http_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_REQUESTS 8

typedef struct outcome {
        uint64_t hash; /* over events, statuses and body bytes */
        size_t consumed;
        int requests;
} outcome;

static void mix(uint64_t *h, const void *p, size_t n)
{
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++) {
                *h ^= b[i];
                *h *= 1099511628211ull;
        }
}

static void touch_head(const sp_http_parser *p, uint64_t *h)
{
        const char *s[] = {sp_http_parser_method(p), sp_http_parser_target(p), sp_http_parser_raw_path(p),
                           sp_http_parser_path(p)};
        for (size_t i = 0; i < 4; i++) {
                if (!s[i])
                        abort(); /* HEAD means these exist */
                mix(h, s[i], strlen(s[i]));
        }
        const char *n, *v;
        for (size_t i = 0; sp_http_parser_header_at(p, i, &n, &v); i++) {
                mix(h, n, strlen(n));
                mix(h, v, strlen(v));
                if (sp_http_parser_header(p, n) == NULL)
                        abort();
        }
        for (size_t i = 0; sp_http_parser_query_at(p, i, &n, &v); i++) {
                mix(h, n, strlen(n));
                mix(h, v, strlen(v));
                if (sp_http_parser_query(p, n) == NULL)
                        abort();
        }
        int64_t cl = sp_http_parser_content_length(p);
        bool flags[] = {sp_http_parser_chunked(p), sp_http_parser_keep_alive(p), sp_http_parser_expect_continue(p)};
        mix(h, &cl, sizeof(cl));
        mix(h, flags, sizeof(flags));
}

/* Parses data as pipelined requests, feeding at most `split` bytes in the
 * first call of each request and the rest afterwards. */
static outcome run(const uint8_t *data, size_t size, size_t split)
{
        static const sp_http_limits lim = {.max_head_bytes = 2048,
                                           .max_headers = 16,
                                           .max_uri = 512,
                                           .max_body = 4096,
                                           .max_chunk_line = 64,
                                           .max_query_params = 8};
        outcome o = {.hash = 14695981039346656037ull};
        size_t off = 0;
        while (o.requests < MAX_REQUESTS && off < size) {
                sp_http_parser *p = sp_http_parser_new(&lim);
                o.requests++;
                size_t limit = off + split < size ? off + split : size;
                int ev;
                for (int guard = 0;; guard++) {
                        if (guard > 100000)
                                abort(); /* no progress */
                        size_t used, blen;
                        const char *body;
                        ev = sp_http_parser_feed(p, data + off, limit - off, &used, &body, &blen);
                        if (used > limit - off)
                                abort();
                        off += used;
                        if (ev == SP_HTTP_PARSE_BODY) {
                                if (blen > used || body + blen != (const char *)data + off)
                                        abort();
                                mix(&o.hash, body, blen);
                                continue;
                        }
                        if (ev == SP_HTTP_PARSE_HEAD) {
                                mix(&o.hash, "H", 1);
                                touch_head(p, &o.hash);
                                continue;
                        }
                        if (ev == SP_HTTP_PARSE_AGAIN && limit < size) {
                                limit = size;
                                continue;
                        }
                        break;
                }
                int status = sp_http_parser_error(p, NULL, NULL);
                if ((ev == SP_HTTP_PARSE_ERROR) != (status != 0))
                        abort();
                mix(&o.hash, &ev, sizeof(ev));
                mix(&o.hash, &status, sizeof(status));
                sp_http_parser_free(p);
                if (ev != SP_HTTP_PARSE_DONE)
                        break;
        }
        o.consumed = off;
        return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 2)
                return 0;
        size_t split = (size_t)data[0] << 8 | data[1];
        data += 2;
        size -= 2;
        /* An exact-size copy, so that reads past the end are caught. */
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy)
                abort();
        memcpy(copy, data, size);
        outcome whole = run(copy, size, size);
        outcome parts = run(copy, size, split % (size + 1));
        free(copy);
        if (whole.hash != parts.hash || whole.consumed != parts.consumed || whole.requests != parts.requests)
                abort(); /* how the input is split must not matter */
        return 0;
}
