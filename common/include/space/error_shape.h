/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one error shape every HTTP surface and RPC of the project answers with,
 * and the agent's EXIT carries:
 *   {"error":{"code":"not_found","message":"sandbox sbx_… not found"}}
 * Codes are sp_errc_name() strings; the HTTP status beside it comes from
 * sp_errc_http_status() (both in error.h, from one table). This is its only
 * encoder and its only decoder.
 *
 * Pure; thread-safe.
 */
#ifndef SPACE_ERROR_SHAPE_H
#define SPACE_ERROR_SHAPE_H

#include <json-c/json.h>
#include <stddef.h>

#include "space/buf.h"
#include "space/error.h"

/* Longest code and message a decoder accepts. */
#define SP_ERROR_SHAPE_MAX_CODE 64
#define SP_ERROR_SHAPE_MAX_MESSAGE (64 * 1024)

/* Appends the error body for (code, message) to out: compact JSON, "/" not
 * escaped; a NULL message is "". */
int sp_error_shape_encode(sp_buf *out, sp_errc code, const char *message, sp_error **err);

/* Reads the shape from a parsed object (anything else fails with
 * SP_E_INVALID, saying what is wrong): *ret_code is the code (SP_E_INTERNAL
 * for an unknown code string), *ret_message points into root. */
int sp_error_shape_get(json_object *root, sp_errc *ret_code, const char **ret_message, sp_error **err);

/* Parses an error body. On success sets *ret_code (SP_E_INTERNAL for an
 * unknown code string) and *ret_message (malloc'd). Rejects anything that is
 * not that shape, with the reason after "error body: ". */
int sp_error_shape_decode(const char *body, size_t len, sp_errc *ret_code, char **ret_message, sp_error **err);

/* Turns an error answer into an error in *err: its code and message when the
 * body (may be empty) is the shape, else the code for http_status
 * (sp_errc_from_http_status()) and "HTTP status N". Always returns the
 * negative code. */
int sp_error_from_answer(const void *body, size_t len, int http_status, sp_error **err);

#endif
