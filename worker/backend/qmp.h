/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small synchronous client of QEMU's machine protocol (QMP), for the qemu
 * backend's job threads: stop, cont, migrate, query-status, quit.
 *
 * QMP is newline-delimited JSON objects over a stream socket: a greeting
 * {"QMP":{...}}, then answers {"return":...} or {"error":{"class","desc"}}
 * to commands, which carry our "id" back, and events {"event":"STOP",...}
 * at any time. Every byte is untrusted: QEMU runs unprivileged and a guest
 * may have taken it over. So a line is capped at WK_QMP_MAX_LINE, the events
 * kept for wk_qmp_wait_event() are bounded in number and bytes, and each
 * call blocks at most its timeout. wk_qmp_parse_line() is the pure part —
 * one line to one message, no socket — which the fuzz target drives.
 *
 * Errors: SP_E_TIMEOUT when a call's time ran out (the connection stays
 * usable: a late answer is recognised by its id and dropped);
 * SP_E_UNAVAILABLE when QEMU is gone or broke the protocol (the connection
 * is then dead and every later call fails at once); an "error" answer maps
 * its class to a code (CommandNotFound: SP_E_UNSUPPORTED, DeviceNotFound:
 * SP_E_NOT_FOUND, DeviceNotActive: SP_E_PRECONDITION, else SP_E_INTERNAL)
 * with "QMP <command>: <desc> (<class>)" as the message.
 *
 * A wk_qmp is used by one thread at a time.
 */
#ifndef SPACE_WORKER_BACKEND_QMP_H
#define SPACE_WORKER_BACKEND_QMP_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

/* The longest line accepted (bytes, without its "\r\n"). */
#define WK_QMP_MAX_LINE (1u << 20)
/* Events kept for wk_qmp_wait_event(): the newest this many, of at most
 * WK_QMP_EVENTS_MAX_BYTES of JSON together; older ones are dropped. */
#define WK_QMP_EVENTS_MAX 64
#define WK_QMP_EVENTS_MAX_BYTES (1u << 20)

typedef enum wk_qmp_kind {
        WK_QMP_GREETING = 1,
        WK_QMP_RETURN,
        WK_QMP_ERROR,
        WK_QMP_EVENT,
} wk_qmp_kind;

/* One message. obj owns the parsed line; the other pointers are borrowed
 * from it. Release with wk_qmp_msg_clear(). */
typedef struct wk_qmp_msg {
        wk_qmp_kind kind;
        bool has_id; /* RETURN, ERROR: it carries an "id" */
        int64_t id; /* that "id" when it is an integer >= 0, else -1 (ours are >= 1) */
        json_object *value; /* GREETING: the "QMP" object; RETURN: the value; EVENT: "data"; may be NULL */
        const char *event; /* EVENT: its name */
        const char *error_class; /* ERROR */
        const char *error_desc; /* ERROR */
        json_object *obj; /* the whole message */
} wk_qmp_msg;

/* Parses one line (n bytes, without its "\n"; a trailing "\r" is allowed,
 * as QEMU ends its lines with "\r\n") into *ret. SP_E_INVALID for anything
 * but a JSON object with exactly one of "QMP", "return", "error", "event"
 * of the right shape, and for a line over WK_QMP_MAX_LINE; *ret is then
 * zeroed (nothing to clear). Pure: no system call. */
int wk_qmp_parse_line(const char *line, size_t n, wk_qmp_msg *ret, sp_error **err);
/* Drops obj and zeroes the message; accepts a zeroed one. */
void wk_qmp_msg_clear(wk_qmp_msg *m);

typedef struct wk_qmp wk_qmp;

/* Connects to QEMU's QMP unix socket at path, retrying while it is missing
 * or refuses (QEMU makes it shortly after it starts) until timeout_ms has
 * passed; then reads the greeting and negotiates capabilities, all within
 * the same timeout_ms. On success *ret is the new client. */
int wk_qmp_connect(const char *path, int64_t timeout_ms, wk_qmp **ret, sp_error **err);
/* As wk_qmp_connect(), over a connected stream socket (a socketpair whose
 * other end QEMU was given with -chardev socket,fd=N). Takes fd, also on
 * failure. */
int wk_qmp_connect_fd(int fd, int64_t timeout_ms, wk_qmp **ret, sp_error **err);
/* Closes the socket and frees the client; accepts NULL. */
void wk_qmp_close(wk_qmp *q);
static inline void wk_qmp_closep(wk_qmp **q)
{
        wk_qmp_close(*q);
        *q = NULL;
}
#define _cleanup_qmp_ __attribute__((cleanup(wk_qmp_closep)))

/* Runs command with args (an object, or NULL for none; borrowed) and waits
 * at most timeout_ms for its answer. On success *ret (may be NULL) is a new
 * reference to the "return" value, an empty object when it had none. Events
 * that arrive meanwhile are kept. */
int wk_qmp_execute(wk_qmp *q, const char *command, json_object *args, int64_t timeout_ms, json_object **ret,
                   sp_error **err);

/* As wk_qmp_execute, passing fd (borrowed) with the command as SCM_RIGHTS:
 * for getfd, whose descriptor a later command names (migrate to "fd:NAME"). */
int wk_qmp_execute_fd(wk_qmp *q, const char *command, json_object *args, int fd, int64_t timeout_ms, json_object **ret,
                      sp_error **err);

/* Waits at most timeout_ms for an event called name ("STOP", "RESUME",
 * "SHUTDOWN", "MIGRATION" ...), taking the oldest one kept if there is one.
 * The event is consumed: it is not kept for a second wait. On success
 * *ret_data (may be NULL) is a new reference to its "data", an empty object
 * when it had none. */
int wk_qmp_wait_event(wk_qmp *q, const char *name, int64_t timeout_ms, json_object **ret_data, sp_error **err);
/* Drops the events kept so far, so that a wait after the next command sees
 * only what came after it (a STOP from an earlier stop is not this one's). */
void wk_qmp_forget_events(wk_qmp *q);

/* query-status: its "status" ("prelaunch", "running", "paused", "inmigrate",
 * "postmigrate", "finish-migrate" ...) into buf of n bytes. SP_E_UNAVAILABLE
 * when the answer has no status string or it does not fit. */
int wk_qmp_status(wk_qmp *q, int64_t timeout_ms, char *buf, size_t n, sp_error **err);

#endif
