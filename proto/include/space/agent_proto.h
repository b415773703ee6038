/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent protocol (proto/spec/agent.md): frames between the worker and
 * space-agent over one byte stream, and the validated requests they carry.
 * Pure codecs: no I/O, no logging; safe on any input (fuzzed).
 */
#ifndef SPACE_AGENT_PROTO_H
#define SPACE_AGENT_PROTO_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

#define PR_AGENT_VERSION 1
#define PR_AGENT_HEADER_SIZE 12
#define PR_AGENT_MAX_PAYLOAD (4u << 20) /* an exec with 2 MiB of argv and env, escaped */
#define PR_AGENT_MAX_CREDIT (16u << 20)
#define PR_AGENT_DEFAULT_WINDOW (256u << 10)
#define PR_AGENT_MAX_ARGV 4096
#define PR_AGENT_MAX_ENV 1024
#define PR_AGENT_MAX_STRING 65536
#define PR_AGENT_MAX_PATH 4096

typedef enum pr_agent_type {
        PR_AGENT_HELLO = 1,
        PR_AGENT_OPEN = 2,
        PR_AGENT_REPLY = 3,
        PR_AGENT_DATA = 4,
        PR_AGENT_WINDOW = 5,
        PR_AGENT_EOF = 6,
        PR_AGENT_CONTROL = 7,
        PR_AGENT_EXIT = 8,
        PR_AGENT_CANCEL = 9,
} pr_agent_type;

typedef enum pr_agent_stream {
        PR_STREAM_STDIN = 0,
        PR_STREAM_STDOUT = 1,
        PR_STREAM_STDERR = 2,
        PR_STREAM_FILE = 3,
        PR_STREAM_PORT = 4, /* a connection to a port in the sandbox: both directions */
        PR_STREAM__MAX,
} pr_agent_stream;

typedef struct pr_agent_frame {
        uint8_t type;
        uint8_t stream;
        uint32_t channel;
        uint32_t length;
        const uint8_t *payload; /* borrowed: valid during the callback only */
} pr_agent_frame;

/* Appends one frame (header and payload) to out. */
int pr_agent_frame_append(sp_buf *out, uint8_t type, uint8_t stream, uint32_t channel, const void *payload, size_t len,
                          sp_error **err);
/* Writes the 12-byte header of a frame with a payload of len bytes. */
int pr_agent_header_encode(uint8_t *out, uint8_t type, uint8_t stream, uint32_t channel, size_t len, sp_error **err);
/* Appends a frame whose payload is the compact JSON of obj. */
int pr_agent_frame_append_json(sp_buf *out, uint8_t type, uint32_t channel, json_object *obj, sp_error **err);
/* Appends a WINDOW frame granting credit bytes on stream. */
int pr_agent_frame_append_window(sp_buf *out, uint8_t stream, uint32_t channel, uint32_t credit, sp_error **err);

/* Validates a 12-byte header. */
int pr_agent_header_decode(const uint8_t *p, pr_agent_frame *ret, sp_error **err);

/* Incremental decoder: feed any split of the byte stream; each whole frame is
 * handed to cb (return <0 from cb to stop with that error). Holds at most one
 * frame's worth of bytes. */
typedef struct pr_agent_decoder {
        sp_buf buf;
} pr_agent_decoder;

typedef int (*pr_agent_frame_cb)(const pr_agent_frame *f, void *userdata, sp_error **err);
int pr_agent_decoder_feed(pr_agent_decoder *d, const void *data, size_t len, pr_agent_frame_cb cb, void *userdata,
                          sp_error **err);
void pr_agent_decoder_free(pr_agent_decoder *d);

/* A byte stream that outlives its connections (a VM's virtio-serial port:
 * the guest's side stays open while the host's side reconnects) may hold the
 * tail of an earlier connection's frames. Over such a transport each side
 * starts a connection by sending PR_AGENT_SYNC_MAGIC, and the receiving side
 * discards everything up to and including the first magic before it decodes
 * frames. The magic's first byte occurs nowhere else in it, so a scan needs
 * no backtracking. */
#define PR_AGENT_SYNC_MAGIC "\xf5SPACE-AGENT-SYNC1"
#define PR_AGENT_SYNC_LEN 18

typedef struct pr_agent_sync {
        size_t matched; /* bytes of the magic seen so far */
        bool done;
} pr_agent_sync;

/* Scans n bytes for the magic: returns how many bytes it consumed (all of
 * them, or up to and including the magic, which sets s->done). Once done it
 * consumes nothing. */
size_t pr_agent_sync_feed(pr_agent_sync *s, const void *data, size_t n);

/* The 4-byte credit of a WINDOW frame. */
int pr_agent_window_decode(const pr_agent_frame *f, uint32_t *ret, sp_error **err);

typedef enum pr_agent_op {
        PR_OP_EXEC = 1,
        PR_OP_ATTACH,
        PR_OP_RELEASE,
        PR_OP_STAT,
        PR_OP_LIST,
        PR_OP_READ,
        PR_OP_WRITE,
        PR_OP_MKDIR,
        PR_OP_MOVE,
        PR_OP_REMOVE,
        PR_OP_CHMOD,
        PR_OP_PING,
        PR_OP_CONNECT,
        PR_OP__MAX,
} pr_agent_op;

/* A validated OPEN request. Strings are owned; free with pr_agent_request_free(). */
/* ping's seed: bytes the worker draws from its own generator for a VM whose
 * memory is a copy of another's (a base snapshot's), base64 on the wire. */
#define PR_AGENT_SEED_MIN 16
#define PR_AGENT_SEED_MAX 64

typedef struct pr_agent_request {
        pr_agent_op op;
        char *session;
        char **argv; /* NULL-terminated */
        char **env; /* NULL-terminated "KEY=VALUE" */
        char *cwd;
        char *user;
        char *owner; /* file ops: act as root, give what is created to this user (excludes user) */
        bool pty;
        uint16_t rows, cols;
        bool stdin_open;
        int64_t stdout_offset, stderr_offset;
        uint32_t window; /* exec, attach, read, connect: initial credit for the agent's streams */
        char *path;
        char *to; /* move: destination (path is the source) */
        int64_t offset, length, limit;
        uint32_t mode;
        bool has_mode;
        bool append, parents, recursive;
        bool follow; /* stat: of a symlink's target, not the link */
        uint16_t port; /* connect: 1-65535 */
        bool sync; /* ping: flush every filesystem first (before a VM's suspend) */
        int64_t time_ns; /* ping: set the clock to this (Unix ns; a VM's, after a restore); 0: leave it */
        char *hostname; /* ping: set the host name to this (a VM restored from a template's base snapshot) */
        uint8_t seed[PR_AGENT_SEED_MAX]; /* ping: fresh randomness for the kernel's generator, and reseed it */
        size_t seed_len; /* 0: none; else PR_AGENT_SEED_MIN..MAX bytes */
} pr_agent_request;

int pr_agent_request_parse(const void *json, size_t len, pr_agent_request *ret, sp_error **err);
void pr_agent_request_free(pr_agent_request *r);
const char *pr_agent_op_name(pr_agent_op op);

/* Builds the JSON of a request (worker side). Returns a new reference. */
json_object *pr_agent_request_to_json(const pr_agent_request *r);

/* A CONTROL message. */
typedef struct pr_agent_control {
        int signal; /* 0 if none */
        bool kill; /* kill the whole process tree */
        uint16_t rows, cols; /* resize if rows && cols */
} pr_agent_control;

int pr_agent_control_parse(const void *json, size_t len, pr_agent_control *ret, sp_error **err);

#endif
