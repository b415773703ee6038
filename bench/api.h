/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A benchmark's client of the public API and the data plane, on the shared
 * blocking HTTP client (keep-alive connections): JSON calls with an API key,
 * operations waited for, sandboxes created and deleted, and command sessions
 * run to their exit with the moments that matter recorded.
 *
 * Errors: every call returns < 0 with *err set when the request fails or
 * the answer is not the status it expects (the message names the call and
 * carries the server's answer). Not thread-safe: a client belongs to one
 * thread (after fork, each process makes its own).
 */
#ifndef SPACE_BENCH_API_H
#define SPACE_BENCH_API_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"
#include "space/http_client.h"

/* Longest id, operation id or token the benchmark keeps. */
#define BN_ID_MAX 64

typedef struct bn_api {
        sp_http_client *api; /* the control plane's public API */
        sp_http_client *dp; /* the data plane, from the first attach URL on */
        char dp_origin[256]; /* "http://host:port" of dp */
        char auth[320]; /* "Authorization: Bearer <key>" */
        bool sse; /* attach as server-sent events (base64) instead of raw frames (?format=raw) */
} bn_api;

/* Connects nothing yet: a client of the API at url with the given key. */
int bn_api_init(bn_api *a, const char *url, const char *key, sp_error **err);
/* Closes the connections; the struct may be initialised again. */
void bn_api_done(bn_api *a);

/* One call: method and path (with query), an optional JSON body. 0 when the
 * answer has status want, with its parsed body in *ret (when ret is not
 * NULL; the caller puts it). */
int bn_api_call(bn_api *a, const char *method, const char *path, const char *body, int want, json_object **ret,
                sp_error **err);

/* Long-polls GET /v1/operations/{op}?wait= until the operation has
 * finished, for at most timeout_s; 0 when it succeeded. */
int bn_api_wait_op(bn_api *a, const char *op, int timeout_s, sp_error **err);

/* POST /v1/sandboxes with body: the new sandbox's id and its operation's. */
int bn_api_create(bn_api *a, const char *body, char id[static BN_ID_MAX], char op[static BN_ID_MAX], sp_error **err);

/* DELETE /v1/sandboxes/{id}: its operation's id (not waited for). */
int bn_api_delete(bn_api *a, const char *id, char op[static BN_ID_MAX], sp_error **err);

/* What a command session did, in sp_now_mono_us() readings (0: did not
 * happen). */
typedef struct bn_session {
        int64_t created; /* the API answered the session's creation (it has started) */
        int64_t first_byte; /* the first output event was decoded */
        int64_t exit_seen; /* the exit event arrived */
        uint64_t bytes; /* output bytes received (stdout and stderr), decoded */
        int exit_code;
} bn_session;

/* Runs a command in a running sandbox (argv_json a JSON array of strings)
 * and reads its output through the data plane until its exit event, as raw
 * frames (or events, a->sse). Output bytes are decoded and counted, not kept. An error event, or a stream that
 * ends without an exit, is an error. */
int bn_api_run(bn_api *a, const char *sandbox, const char *argv_json, bn_session *ret, sp_error **err);

#endif
