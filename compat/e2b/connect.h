/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Connect protocol with JSON, as the E2B SDK speaks it to envd, and what
 * every envd call shares (authentication, the user).
 *
 * Unary calls: a JSON body in, 200 with a JSON message out, or an error
 * status with {"code": "<connect code>", "message"}. Server streams: one
 * envelope in (flag byte 0, 4-byte big-endian length, JSON), 200 with
 * envelopes out and a final end-stream envelope (flag 2) that carries an
 * error if the stream failed — a stream never fails with an HTTP status once
 * it has been accepted.
 *
 * All functions run on a call's thread.
 */
#ifndef E2B_CONNECT_H
#define E2B_CONNECT_H

#include <json-c/json.h>
#include <stdbool.h>

#include "api.h"
#include "call.h"
#include "e2b.h"

/* An authenticated envd call: the API on the caller's behalf, the sandbox,
 * the user from Authorization: Basic, else E2B's default user `user`. */
typedef struct e2b_envd {
        e2b_api api;
        const e2b_ctx *ctx; /* the daemon's settings (borrowed) */
        char *sandbox_id; /* never NULL once open */
        char *user; /* never NULL once open */
} e2b_envd;

/* Checks E2b-Sandbox-Id and X-Access-Token and opens the API with the key
 * the token seals; the token is remembered for signed file URLs (sign.h).
 * Errors: SP_E_UNAUTHENTICATED, SP_E_INVALID. */
int e2b_envd_open(e2b_call *call, const e2b_ctx *ctx, e2b_envd *ret, sp_error **err);

/* The same for a sandbox and token found otherwise (a signed file URL's),
 * acting as user (NULL or "": E2B's default user `user`). */
int e2b_envd_open_token(const e2b_ctx *ctx, const char *sandbox_id, const char *token, const char *user, e2b_envd *ret,
                        sp_error **err);
void e2b_envd_close(e2b_envd *e);

/* The Connect code name and HTTP status for an error code. */
const char *e2b_connect_code(sp_errc code, int *ret_status);

/* Parses a unary request (application/json) or a stream's single envelope
 * (application/connect+json) into *ret. */
int e2b_connect_request(e2b_call *call, bool stream, json_object **ret, sp_error **err);

/* Unary answers. msg is borrowed. */
void e2b_connect_reply(e2b_call *call, json_object *msg);
void e2b_connect_error(e2b_call *call, const sp_error *e);

/* Streams: begin (200), messages, then the end-stream envelope with e's
 * error, or none when e is NULL. send returns < 0 once the client has gone. */
int e2b_connect_stream_begin(e2b_call *call);
int e2b_connect_stream_send(e2b_call *call, json_object *msg);
void e2b_connect_stream_end(e2b_call *call, const sp_error *e);

#endif
