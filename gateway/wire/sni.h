/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The server name a TLS client asks for, read from its ClientHello (RFC 8446
 * §4.1.2, server_name from RFC 6066 §3) before anything is relayed.
 *
 * Stateless: pass every byte the client has sent so far, from the first,
 * each time more arrive; the answer is NEED_MORE until it can be decided.
 * The ClientHello may span several TLS records; it is reassembled as long as
 * its records end within the first GW_SNI_MAX bytes of the stream (a larger
 * one is REFUSED). Bytes after the record that ends the ClientHello (early
 * data, the client's next records) are not looked at.
 *
 * Refused (the gateway must not relay): records other than handshake before
 * the ClientHello ends, Encrypted Client Hello (0xfe0d: ECH, and GREASE ECH
 * which cannot be told apart from it) and the draft ESNI (0xffce), more
 * than one server_name extension or more than one name in it, a name of a
 * type other than host_name, a name that is not a host name (NUL, non-LDH
 * characters, empty labels, a trailing dot, longer than 253 bytes) or that
 * is an IP literal (name.h).
 *
 * Pure: no allocation (up to GW_SNI_MAX bytes of stack to reassemble),
 * no global state, thread-safe.
 */
#ifndef SPACE_GATEWAY_WIRE_SNI_H
#define SPACE_GATEWAY_WIRE_SNI_H

#include <stddef.h>
#include <stdint.h>

#include "wire/name.h"

/* The ClientHello's records must end within this many bytes of the stream. */
#define GW_SNI_MAX 16384

typedef enum gw_sni_result {
        GW_SNI_NEED_MORE = 0, /* not decided yet: call again with more bytes */
        GW_SNI_OK, /* a ClientHello with one acceptable host name: name */
        GW_SNI_NO_SNI, /* a well-formed ClientHello without server_name */
        GW_SNI_NOT_TLS, /* the first byte is not a TLS handshake record (0x16): try HTTP */
        GW_SNI_MALFORMED, /* TLS framing or a ClientHello that breaks the RFC: reason */
        GW_SNI_REFUSED, /* well-formed, but the gateway must not relay it: reason */
} gw_sni_result;

typedef struct gw_sni_info {
        /* With OK: the name in normal form (name.h), else empty. */
        char name[GW_NAME_MAX + 1];
        /* legacy_record_version of the first record once 3 bytes are in
         * (0x0301 from most clients), else 0. */
        uint16_t record_version;
        /* legacy_version of the ClientHello once parsed (0x0303 for TLS 1.2
         * and 1.3), else 0. */
        uint16_t hello_version;
        /* Bytes of the stream up to the end of the record that ends the
         * ClientHello, once it is reassembled (whatever the result), else 0. */
        size_t hello_end;
        /* With MALFORMED, REFUSED and NOT_TLS: why, a static string; else NULL. */
        const char *reason;
} gw_sni_info;

/* Reads the ClientHello at the start of data[0..len) into *ret (always
 * written). */
gw_sni_result gw_sni_parse(const uint8_t *data, size_t len, gw_sni_info *ret);

/* The quick test: 1 when data starts like a TLS handshake record (0x16), 0
 * when it cannot be TLS (the caller may try HTTP), -1 when len is 0. */
int gw_sni_is_tls(const uint8_t *data, size_t len);

/* The result's name: "ok", "need_more", "refused", ... */
const char *gw_sni_result_name(gw_sni_result r);

#endif
