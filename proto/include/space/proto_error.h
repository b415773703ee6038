/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one error shape every HTTP surface of the project answers with:
 *   {"error":{"code":"not_found","message":"sandbox sbx_… not found"}}
 * (the RPC transport uses the same body). Codes are sp_errc_name() strings.
 */
#ifndef SPACE_PROTO_ERROR_H
#define SPACE_PROTO_ERROR_H

#include <stddef.h>

#include "space/buf.h"
#include "space/error.h"

/* Appends the error body for (code, message) to out. */
int pr_error_encode(sp_buf *out, sp_errc code, const char *message, sp_error **err);

/* Parses an error body. On success sets *ret_code (SP_E_INTERNAL for an
 * unknown code string) and *ret_message (malloc'd). Rejects anything that is
 * not exactly that shape. */
int pr_error_decode(const char *body, size_t len, sp_errc *ret_code, char **ret_message, sp_error **err);

/* The code whose sp_errc_name() is name, or SP_E__MAX if none. */
sp_errc pr_errc_from_name(const char *name);

#endif
