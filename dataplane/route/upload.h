/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A request body streamed into a worker stream (stdin: WriteStdin; files:
 * WriteFile), with backpressure both ways: body bytes go out as DATA frames
 * as they arrive, and the body is paused while the worker stream's send
 * queue is full (so a slow sandbox slows the client down through TCP, and
 * the data plane holds at most one body chunk per upload). The answer is
 * 200 with fields of the worker's trailer, or the worker's error.
 */
#ifndef DP_ROUTE_UPLOAD_H
#define DP_ROUTE_UPLOAD_H

#include <json-c/json.h>
#include <stdint.h>

#include "route/routes.h"

#define DP_UPLOAD_MAX_STRING 4096

/* A field of the worker's trailer that the answer carries. */
typedef struct dp_upload_result {
        const char *name; /* NULL ends a list */
        /* json_type_int: a count, 0..INT64_MAX, required; json_type_object:
         * required, passed on as the worker sent it; json_type_string:
         * optional (an older worker may not send it), at most
         * DP_UPLOAD_MAX_STRING bytes */
        json_type type;
} dp_upload_result;

typedef struct dp_upload_spec {
        dp_route route;
        const char *method; /* the worker's streaming method */
        json_object *request; /* its first frame (borrowed) */
        /* The trailer fields answered, in order, as {"<name>":…, …}; ends
         * with {NULL}. Static storage: the upload keeps the pointer. */
        const dp_upload_result *results;
        uint64_t *bytes; /* counter the body bytes are added to (in d->metrics) */
} dp_upload_spec;

/* Starts the upload for req, which must be a streamed-body route whose
 * token (claims, copied) was checked and whose stream slot was taken: the
 * slot is released when the upload ends. Always answers req (now or later). */
void dp__upload_start(dp *d, sp_http_request *req, const dp_claims *claims, const dp_upload_spec *spec);

#endif
