/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small blocking client of the agent protocol (proto/spec/agent.md), for
 * tests: connect to an agent's unix socket, open channels, run a command to
 * its exit, do file operations. Failures abort the test (ck_assert).
 */
#ifndef SPACE_TEST_AGENT_CLIENT_H
#define SPACE_TEST_AGENT_CLIENT_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/agent_proto.h"
#include "space/buf.h"

typedef struct sp_test_agent sp_test_agent;

typedef struct sp_test_frame {
        uint8_t type, stream;
        uint32_t channel;
        sp_buf payload;
} sp_test_frame;

typedef struct sp_test_result {
        sp_buf out, err;
        json_object *exit; /* the EXIT payload */
        bool started;
} sp_test_result;

/* Connects (retrying up to timeout_ms while the socket is not there yet) and exchanges HELLO. */
sp_test_agent *sp_test_agent_connect(const char *socket_path, int timeout_ms);
void sp_test_agent_close(sp_test_agent *a);

void sp_test_agent_open(sp_test_agent *a, uint32_t channel, const char *json);
void sp_test_agent_send(sp_test_agent *a, uint8_t type, uint8_t stream, uint32_t channel, const void *p, size_t n);
void sp_test_agent_ack(sp_test_agent *a, uint32_t channel, uint8_t stream, uint32_t n);
/* The next frame (blocks up to 30 s); the caller frees payload. */
sp_test_frame sp_test_agent_next(sp_test_agent *a);
/* Reads channel to its EXIT, collecting output (acknowledged if auto_ack). */
void sp_test_agent_run_to_exit(sp_test_agent *a, uint32_t channel, sp_test_result *r, bool auto_ack);
void sp_test_result_free(sp_test_result *r);
/* The EXIT's integer field (asserts it exists), or the error code string (NULL if none). */
int64_t sp_test_result_int(const sp_test_result *r, const char *field);
const char *sp_test_result_error(const sp_test_result *r);

/* Runs argv (a JSON array text, e.g. "[\"id\",\"-u\"]") as a new session and returns the result. */
void sp_test_agent_exec(sp_test_agent *a, uint32_t channel, const char *argv_json, sp_test_result *r);

#endif
