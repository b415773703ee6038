/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A request body streamed into a worker stream (stdin: WriteStdin; files:
 * WriteFile), with backpressure both ways: body bytes go out as DATA frames
 * as they arrive, and the body is paused while the worker stream's send
 * queue is full (so a slow sandbox slows the client down through TCP, and
 * the data plane holds at most one body chunk per upload). The answer is
 * 200 with one field of the worker's trailer, or the worker's error.
 */
#ifndef DP_ROUTE_UPLOAD_H
#define DP_ROUTE_UPLOAD_H

#include <json-c/json.h>
#include <stdint.h>

#include "route/routes.h"

typedef struct dp_upload_spec {
        dp_route route;
        const char *method; /* the worker's streaming method */
        json_object *request; /* its first frame (borrowed) */
        const char *result; /* the trailer field answered as {"<result>":N} */
        uint64_t *bytes; /* counter the body bytes are added to (in d->metrics) */
} dp_upload_spec;

/* Starts the upload for req, which must be a streamed-body route whose
 * token (claims, copied) was checked and whose stream slot was taken: the
 * slot is released when the upload ends. Always answers req (now or later). */
void dp__upload_start(dp *d, sp_http_request *req, const dp_claims *claims, const dp_upload_spec *spec);

#endif
