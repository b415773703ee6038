/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The OpenAPI document of the public API (proto/openapi.yaml), converted to
 * compact JSON with sorted keys at build time (cmake/openapi_to_c.py) and
 * compiled in, so that the server answers /v1/openapi.json from memory and a
 * test can hold the document and the route table equal.
 */
#ifndef CP_API_OPENAPI_DOC_H
#define CP_API_OPENAPI_DOC_H

#include <stddef.h>

/* The JSON text, NUL-terminated; cp_openapi_json_len bytes without the NUL.
 * Read-only, static: thread-safe. */
extern const char cp_openapi_json[];
extern const size_t cp_openapi_json_len;

#endif
