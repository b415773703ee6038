/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the HTTP/1.1 response parser of the client. The first byte
 * picks the request method (bit 0: HEAD), the next two a split point; the
 * rest is parsed as a stream of responses on one connection, once in one
 * piece and once split at the chosen point, and ended with the end of the
 * stream. Both runs must see the same events, the same body bytes and the
 * same outcome; body bytes must lie within the input. Accessors are exercised
 * on every parsed head, and so is the Retry-After parser of clients. Small limits make the limit paths reachable.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/http_client.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_RESPONSES 8

typedef struct outcome {
        uint64_t hash; /* over events, outcomes and body bytes */
        size_t consumed;
        int responses;
} outcome;

static void mix(uint64_t *h, const void *p, size_t n)
{
        const unsigned char *b = p;
        for (size_t i = 0; i < n; i++) {
                *h ^= b[i];
                *h *= 1099511628211ull;
        }
}

static void touch_head(const sp_http_response_parser *p, bool upgrade, uint64_t *h)
{
        int status = sp_http_response_parser_status(p);
        const char *reason = sp_http_response_parser_reason(p);
        if ((status < 200 && !(upgrade && status == 101)) || status > 599 || !reason)
                abort(); /* HEAD means a final status (101 only when allowed) */
        if (status == 101 && (sp_http_response_parser_content_length(p) != 0 || sp_http_response_parser_keep_alive(p)))
                abort(); /* a switch of protocols has no body and ends HTTP */
        /* What clients make of a Retry-After (spacectl, the E2B wrapper). */
        int64_t after = sp_http_retry_after_parse(sp_http_response_parser_header(p, "Retry-After"), 60);
        if (after < -1 || after > 60)
                abort();
        mix(h, &status, sizeof(status));
        mix(h, reason, strlen(reason));
        const char *n, *v;
        for (size_t i = 0; sp_http_response_parser_header_at(p, i, &n, &v); i++) {
                mix(h, n, strlen(n));
                mix(h, v, strlen(v));
                if (sp_http_response_parser_header(p, n) == NULL)
                        abort();
        }
        int64_t cl = sp_http_response_parser_content_length(p);
        bool flags[] = {sp_http_response_parser_chunked(p), sp_http_response_parser_keep_alive(p)};
        int minor = sp_http_response_parser_version_minor(p);
        mix(h, &cl, sizeof(cl));
        mix(h, flags, sizeof(flags));
        mix(h, &minor, sizeof(minor));
}

/* Parses data as consecutive responses, feeding at most `split` bytes in the
 * first call of each response and the rest afterwards. */
static outcome run(const char *method, bool upgrade, const uint8_t *data, size_t size, size_t split)
{
        static const sp_http_response_limits lim = {.max_head_bytes = 2048, .max_headers = 16, .max_chunk_line = 64};
        outcome o = {.hash = 14695981039346656037ull};
        size_t off = 0;
        while (o.responses < MAX_RESPONSES) {
                sp_http_response_parser *p = sp_http_response_parser_new(method, &lim);
                if (upgrade)
                        sp_http_response_parser_allow_upgrade(p); /* a relay's: 101 is final */
                o.responses++;
                size_t limit = off + split < size ? off + split : size;
                int ev;
                uint64_t body = 0;
                for (int guard = 0;; guard++) {
                        if (guard > 100000)
                                abort(); /* no progress */
                        size_t used, blen;
                        const char *b;
                        ev = sp_http_response_parser_feed(p, data + off, limit - off, &used, &b, &blen);
                        if (used > limit - off)
                                abort();
                        off += used;
                        if (ev == SP_HTTP_PARSE_BODY) {
                                if (blen == 0 || blen > used || b + blen != (const char *)data + off)
                                        abort();
                                body += blen;
                                mix(&o.hash, b, blen);
                                continue;
                        }
                        if (ev == SP_HTTP_PARSE_HEAD) {
                                mix(&o.hash, "H", 1);
                                touch_head(p, upgrade, &o.hash);
                                continue;
                        }
                        if (ev == SP_HTTP_PARSE_AGAIN && limit < size) {
                                limit = size;
                                continue;
                        }
                        break;
                }
                if (ev == SP_HTTP_PARSE_AGAIN)
                        ev = sp_http_response_parser_eof(p); /* the end of the input ends the stream */
                if ((ev == SP_HTTP_PARSE_ERROR) != (sp_http_response_parser_error(p) != NULL))
                        abort();
                if (ev == SP_HTTP_PARSE_DONE &&
                    (!sp_http_response_parser_done(p) || sp_http_response_parser_body_received(p) != body))
                        abort();
                mix(&o.hash, &ev, sizeof(ev));
                sp_http_response_parser_free(p);
                if (ev != SP_HTTP_PARSE_DONE || off == size)
                        break;
        }
        o.consumed = off;
        return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 3)
                return 0;
        const char *method = data[0] & 1 ? "HEAD" : "GET";
        bool upgrade = data[0] & 2;
        size_t split = (size_t)data[1] << 8 | data[2];
        data += 3;
        size -= 3;
        /* An exact-size copy, so that reads past the end are caught. */
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy)
                abort();
        memcpy(copy, data, size);
        outcome whole = run(method, upgrade, copy, size, size);
        outcome parts = run(method, upgrade, copy, size, split % (size + 1));
        free(copy);
        if (whole.hash != parts.hash || whole.consumed != parts.consumed || whole.responses != parts.responses)
                abort(); /* how the input is split must not matter */
        return 0;
}
