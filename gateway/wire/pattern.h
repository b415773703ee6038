/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Egress profile domain patterns: which names a sandbox may reach.
 *
 * A pattern is either exact ("example.com": that name only) or a wildcard
 * ("*.example.com": every name strictly below example.com, at any depth —
 * a.example.com and a.b.example.com, never example.com itself, which needs
 * a pattern of its own). The '*' is only ever a whole leading label, and a
 * wildcard needs at least two labels after "*.": "*.com" and "*" are
 * refused, so no pattern opens a whole top-level domain. Public suffixes
 * of two labels ("*.co.uk") are not known here and are accepted. Labels
 * follow name.h with underscores allowed (so that "_dmarc.example.com" can
 * be named); IP literals are refused, as the gateway pins names, not
 * addresses.
 *
 * Pure functions, no allocation, thread-safe.
 */
#ifndef SPACE_GATEWAY_WIRE_PATTERN_H
#define SPACE_GATEWAY_WIRE_PATTERN_H

#include <stdbool.h>
#include <stddef.h>

#include "wire/name.h"

/* Checks the pattern in[0..len) and writes its normal form (lowercase, one
 * trailing dot dropped) to out. Returns its length, or -1 with *ret_reason
 * (static; if not NULL) and out empty. */
int gw_pattern_normalize(const char *in, size_t len, char out[GW_NAME_MAX + 1], const char **ret_reason);

/* Whether name matches pattern. pattern must be in normal form (from
 * gw_pattern_normalize()); name is compared ASCII case-insensitively and a
 * single trailing dot on it is ignored. An empty name matches nothing. The
 * name is not validated here: pass one in normal form (name.h). */
bool gw_pattern_match(const char *pattern, const char *name);

#endif
