/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Blocking calls to the public API and the data plane, on behalf of one
 * E2B request (one thread; see call.h).
 *
 * An e2b_api holds a connection to the public API authenticated with the
 * caller's API key. Errors from the API come back as sp_error with the
 * API's code and message, so each translation decides what E2B sees.
 * Not thread-safe: one per call.
 */
#ifndef E2B_API_H
#define E2B_API_H

#include <json-c/json.h>
#include <stdbool.h>

#include "e2b.h"
#include "space/buf.h"
#include "space/error.h"
#include "space/http_client.h"

typedef struct e2b_api {
        const e2b_ctx *ctx;
        sp_http_client *client;
        char *auth; /* "Authorization: Bearer <key>" */
} e2b_api;

/* Connects nothing yet; key is the caller's API key (copied). */
int e2b_api_open(e2b_api *a, const e2b_ctx *ctx, const char *key, sp_error **err);
void e2b_api_close(e2b_api *a);

/* One JSON call: body (borrowed) is sent when non-NULL. On a 2xx answer
 * returns its status with *ret the parsed body (NULL when empty; ret may be
 * NULL); otherwise < 0 with err carrying the API's error code and message
 * (SP_E_UNAVAILABLE when the API cannot be reached). */
int e2b_api_json(e2b_api *a, const char *method, const char *target, json_object *body, json_object **ret,
                 sp_error **err);

/* Waits (up to timeout_s) until the operation in an OperationEnvelope has
 * finished; a failed operation is the error. */
int e2b_api_wait(e2b_api *a, json_object *envelope, int timeout_s, sp_error **err);

/* Appends s percent-encoded for a query value or a path segment. */
void e2b_url_escape(sp_buf *out, const char *s);

/* Splits a data-plane url (absolute, from the API's answers) into the origin
 * to dial and the request target: the url's own scheme://host[:port], or
 * override (ctx->dataplane_url: the data plane as this replica reaches it,
 * e.g. a Kubernetes Service, while clients use the public URL) when it is
 * set. *ret_origin is malloc'd (the caller frees it); *ret_target points
 * into url. Fails (SP_E_INTERNAL) on a url with no scheme or path. */
int e2b_dp_origin(const char *url, const char *override, char **ret_origin, const char **ret_target, sp_error **err);

/* A data-plane request: url is absolute (from the API's attach_url or file
 * url) with the query already on it. Opens a client for its origin (see
 * e2b_dp_origin) and sends the request with the bearer token; returns the
 * status or < 0. The caller reads the body with sp_http_client_read() and
 * frees *ret_client. */
int e2b_dp_send(const e2b_ctx *ctx, const char *url, const char *method, const char *token, const char *const *headers,
                const void *body, size_t body_len, sp_http_body_source source, void *source_userdata,
                sp_http_client **ret_client, sp_error **err);

/* Reads a whole (small) error body from a data-plane answer into err. */
int e2b_dp_error(sp_http_client *c, int status, sp_error **err);

#endif
