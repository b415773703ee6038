/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Calls: one HTTP request handed from the event loop to a thread of its own.
 *
 * space-e2b translates each E2B request into blocking calls to the public API
 * and the data plane (space/http_client.h). A call copies what the thread
 * needs from the request (method, route parameter, query, the headers E2B
 * sends, a buffered body), runs the translation on a new thread, and carries
 * the answer back to the loop: a whole reply, or a streamed one whose bytes
 * pass through a bounded buffer (the thread blocks while the client is slow,
 * so memory stays flat). Streamed request bodies (uploads) come the other
 * way, through a bounded buffer too, the client paused while it is full.
 *
 * Threading: e2b_call_start() and the loop side run on the loop's thread;
 * every other function here is for the call's own thread. The loop frees a
 * call once both the thread has finished and the request is done.
 */
#ifndef E2B_CALL_H
#define E2B_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "caps.h"
#include "metrics.h"
#include "space/error.h"
#include "space/http.h"

struct event_base;
typedef struct e2b_call e2b_call;

/* What a thread may read of its request: copies, NUL-terminated, NULL when
 * absent. */
typedef struct e2b_req {
        char *method, *path, *id; /* id: the {id} route parameter */
        char *api_key; /* X-API-KEY */
        char *sandbox_id; /* E2b-Sandbox-Id, or the sandbox its Host names (e2b_host_sandbox) */
        char *access_token; /* X-Access-Token */
        char *authorization; /* Authorization */
        char *connect_timeout_ms; /* Connect-Timeout-Ms */
        char *content_type, *content_encoding;
        char *q_path, *q_username, *q_metadata, *q_state, *q_limit, *q_next_token, *q_start; /* query parameters */
        char *q_signature, *q_signature_expiration; /* a signed file URL's (sign.h) */
        char *body; /* buffered body (routes without a streamed body); "" when empty */
        size_t body_len;
        char caller[E2B_CAPS_CALLER_LEN + 1]; /* whose share the call holds (caps.h); "" anonymous */
} e2b_req;

/* The thread's work: answer the call (e2b_call_reply() or e2b_call_begin() ...
 * e2b_call_end()). Returning without an answer answers 500. */
typedef void (*e2b_call_fn)(e2b_call *call, void *userdata);

/* How a call is counted: the route it came by, in metrics (metrics.h; NULL
 * or route < 0: not counted). */
typedef struct e2b_call_count {
        e2b_metrics *metrics;
        int route;
} e2b_call_count;

/* Starts fn(call, userdata) on a new thread for req, holding one unit of
 * caps' E2B_CAP_CALLS for caller (caps.h) until the call is freed. With
 * stream_body the route's body is read through e2b_call_read(). When the
 * call is freed, the status it was answered with (E2B_METRICS_CLIENT_GONE
 * when the client left before any answer) is counted as count says. Errors
 * (the caller answers): SP_E_LIMIT (caller at its share), SP_E_UNAVAILABLE
 * (the total reached), SP_E_IO. */
int e2b_call_start(struct event_base *base, sp_http_request *req, e2b_caps *caps, const char *caller, bool stream_body,
                   e2b_call_count count, e2b_call_fn fn, void *userdata, sp_error **err);

/* ---- the call's thread ---- */

/* The request's copied fields; valid until the call ends. */
const e2b_req *e2b_call_req(const e2b_call *call);
/* The sandbox an envd request's Host names ("49983-sbx_….<domain>", E2B's
 * sandbox host), malloc'd; NULL when it names none. */
char *e2b_host_sandbox(const char *host);

/* Answers with a whole body (copied). headers: "Name: value" strings,
 * NULL-terminated, or NULL. Returns 0, or < 0 if the client has gone. */
int e2b_call_reply(e2b_call *call, int status, const char *content_type, const char *const *headers, const void *body,
                   size_t len);

/* Starts a streamed answer (content_length -1: chunked). */
int e2b_call_begin(e2b_call *call, int status, const char *content_type, const char *const *headers,
                   int64_t content_length);
/* Queues body bytes of a streamed answer, blocking while 1 MiB is already
 * waiting for the client. Returns 0, or < 0 once the client has gone. */
int e2b_call_write(e2b_call *call, const void *data, size_t len);
/* Completes the streamed answer. */
int e2b_call_end(e2b_call *call);

/* Whether the client is still connected. */
bool e2b_call_connected(e2b_call *call);

/* Reads streamed request-body bytes (stream_body calls): up to cap into buf,
 * blocking until some arrive. Returns the count, 0 at the end of the body,
 * or < 0 (with *err) when the client has gone. */
ssize_t e2b_call_read(e2b_call *call, void *buf, size_t cap, sp_error **err);

#endif
