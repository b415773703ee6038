/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A minimal blocking HTTP/1.1 client for tests: one request per connection
 * (Connection: close), the whole response read into memory.
 */
#ifndef SPACE_TEST_HTTP_CLIENT_H
#define SPACE_TEST_HTTP_CLIENT_H

#include <json-c/json.h>
#include <stdint.h>

#include "space/error.h"

struct sp_buf;

typedef struct sp_test_http_response {
        int status;
        char *headers; /* the raw header section */
        char *body; /* NUL-terminated */
        size_t body_len;
} sp_test_http_response;

/* Sends method path to 127.0.0.1:port with the extra headers ("Name: value",
 * NULL-terminated, may be NULL) and body (may be NULL), waits at most
 * timeout_ms for the whole answer. */
int sp_test_http(int port, const char *method, const char *path, const char *const *headers, const char *body,
                 int64_t timeout_ms, sp_test_http_response *ret, sp_error **err);
void sp_test_http_response_free(sp_test_http_response *r);

/* The body parsed as JSON (a new reference), or NULL. */
json_object *sp_test_http_json(const sp_test_http_response *r);

/* For tests that hold requests open by hand: a blocking TCP connection to
 * 127.0.0.1:port (close-on-exec), or <0 with err set. */
int sp_test_dial(int port, sp_error **err);

/* Appends what arrives on fd to out (kept NUL-terminated) for at most
 * wait_ms, stopping early once the response head and the start of its first
 * message (a '}' or an SSE "event:" after the head) are in. Returns the
 * status, 0 when nothing came, -1 when what came is no HTTP/1.x answer. */
int sp_test_read_answer(int fd, int64_t wait_ms, struct sp_buf *out);

#endif
