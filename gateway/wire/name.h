/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host names as the egress gateway reads them from sandboxes (TLS SNI, the
 * HTTP Host header, DNS questions, profile patterns): one strict syntax, one
 * normal form, and the test for IP literals that must not pass for names.
 *
 * The normal form is lowercase ASCII, labels of 1 to 63 bytes joined by
 * single dots, at most GW_NAME_MAX bytes, no trailing dot. Labels hold
 * letters, digits and hyphens (anywhere in the label, as names in the wild
 * do), and underscores only where a caller allows them (DNS questions such
 * as _dmarc.example.com, and the patterns that match them).
 *
 * Pure functions over caller memory: no allocation, no global state,
 * thread-safe. Reasons are static strings.
 */
#ifndef SPACE_GATEWAY_WIRE_NAME_H
#define SPACE_GATEWAY_WIRE_NAME_H

#include <stdbool.h>
#include <stddef.h>

/* The longest name in text form (RFC 1035: 255 bytes of wire form). */
#define GW_NAME_MAX 253
/* The longest label. */
#define GW_NAME_LABEL_MAX 63

enum {
        GW_NAME_UNDERSCORE = 1u << 0, /* labels may hold '_' */
        GW_NAME_TRAILING_DOT = 1u << 1, /* one trailing dot is accepted and dropped */
};

/* Checks in[0..len) (not NUL-terminated; a NUL byte in it is refused) and
 * writes its normal form to out. flags: GW_NAME_*. Returns the length of
 * the name written, or -1 with *ret_reason (if not NULL) set and out left
 * as an empty string. */
int gw_name_normalize(const char *in, size_t len, unsigned flags, char out[GW_NAME_MAX + 1], const char **ret_reason);

/* Whether s[0..len) is an IP address literal, or would be taken for one:
 * an IPv6 address (optionally in brackets), or a name whose last label (one
 * trailing dot ignored) is a number — all digits, or "0x" and hex digits —
 * which URL parsers and inet_aton() read as IPv4 ("1.2.3.4", "127.1",
 * "0x7f000001", "2130706433"). No top-level domain is numeric, so no real
 * host name is lost. */
bool gw_name_is_ip_literal(const char *s, size_t len);

#endif
