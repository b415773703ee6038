/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host a plain HTTP/1.x client asks for, read from the head of the first
 * request on a connection before anything is relayed.
 *
 * Stateless: pass every byte the client has sent so far, from the first,
 * each time more arrive; the answer is NEED_MORE until the head (request
 * line, header fields, empty line) is complete or something in it decides.
 * The head must end within GW_HTTP_MAX_HEAD bytes.
 *
 * Stricter than RFC 9112 where leniency could let a request mean one host
 * to the gateway and another to the server: lines end in CRLF (no bare LF
 * or CR), nothing before the request line, single spaces in it, a version
 * "HTTP/1.<digit>", field names that are tokens directly followed by ':'
 * ("Host :" and obs-fold are MALFORMED), field values without NUL, CR, LF
 * or other control bytes. REFUSED (well-formed, but not relayed): HTTP/0.9
 * and versions other than 1.x, CONNECT (in any case), a missing, empty or
 * repeated Host, an absolute-form target whose scheme is not http, which
 * carries userinfo or whose authority (host and port) differs from Host, a
 * head too large, and an IP literal Host when GW_HTTP_REFUSE_IP is set.
 *
 * Only the first request is read: what follows on a kept-alive connection
 * (a second request with another Host) is the caller's business.
 *
 * Pure: no allocation, no global state, thread-safe.
 */
#ifndef SPACE_GATEWAY_WIRE_HTTP_HOST_H
#define SPACE_GATEWAY_WIRE_HTTP_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wire/name.h"

/* The head of the first request must end within this many bytes. */
#define GW_HTTP_MAX_HEAD 16384
/* The longest method accepted. */
#define GW_HTTP_METHOD_MAX 32

enum {
        GW_HTTP_REFUSE_IP = 1u << 0, /* an IP literal Host (or authority) is REFUSED */
};

typedef enum gw_http_result {
        GW_HTTP_NEED_MORE = 0, /* not decided yet: call again with more bytes */
        GW_HTTP_OK, /* the head is complete and acceptable: see gw_http_request */
        GW_HTTP_MALFORMED, /* not HTTP/1.x as this parser accepts it: reason */
        GW_HTTP_REFUSED, /* HTTP, but the gateway must not relay it: reason */
} gw_http_result;

typedef struct gw_http_request {
        /* With OK: */
        char method[GW_HTTP_METHOD_MAX + 1];
        /* The Host's name in normal form (name.h) without port and trailing
         * dot; for an IP literal (host_is_ip) its text as sent (IPv6 without
         * brackets, lowercased). */
        char host[GW_NAME_MAX + 1];
        uint16_t port; /* from Host, 80 when it names none */
        bool host_is_ip;
        bool absolute_form; /* the request-target was "http://authority..." */
        int minor_version; /* HTTP/1.<minor_version> */
        size_t head_len; /* bytes of the head, its final empty line included */
        /* With MALFORMED and REFUSED: why, a static string; else NULL. */
        const char *reason;
} gw_http_request;

/* Reads the head of the request at the start of data[0..len) into *ret
 * (always written). flags: GW_HTTP_*. */
gw_http_result gw_http_host_parse(const uint8_t *data, size_t len, unsigned flags, gw_http_request *ret);

/* The result's name: "ok", "need_more", "malformed", "refused". */
const char *gw_http_result_name(gw_http_result r);

#endif
