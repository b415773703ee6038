/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Command sessions on the worker: one command run by a sandbox's agent, its
 * output stored in an on-disk log (session/log.h) and served to any number
 * of readers from any retained offset.
 *
 * Flow control end to end: the agent sends output only within the credit the
 * session grants; the session grants (acknowledges) only what it stored and
 * only while the log has room. A full log that nobody reads therefore stops
 * the agent, whose pipes fill, and the command blocks — output is never
 * dropped. Readers advance the log's read mark, which frees room.
 *
 * A session lives in `<dir>` (session.json + log/), survives the daemon's
 * restart (wk_session_load + wk_session_attach_agent resume the stream from
 * the offsets stored), and is removed with wk_session_remove.
 * Not thread-safe (the daemon's event loop).
 */
#ifndef WK_SESSION_H
#define WK_SESSION_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/agent_link.h"
#include "space/error.h"

typedef enum wk_session_state {
        WK_SESSION_STARTING = 0,
        WK_SESSION_RUNNING,
        WK_SESSION_EXITED,
        WK_SESSION_FAILED, /* never started (bad program, cwd, user) or lost */
} wk_session_state;

typedef struct wk_session_exit {
        int code;
        int signal;
        bool oom;
        bool killed;
        char reason[16]; /* "", "memory", "time", "disk", "killed" */
} wk_session_exit;

typedef struct wk_session wk_session;

/* The error message (with the session id) for output reclaimed for the budget. */
#define WK_SESSION_RECLAIMED_FMT \
        "the output of session %s was reclaimed: its sandbox's session logs reached their budget " \
        "(--session-log-budget) and the oldest ended sessions' logs are removed first"

/* Notifications to the session's owner and readers. */
typedef struct wk_session_watch {
        void (*on_output)(wk_session *s, void *userdata); /* new bytes in the log */
        void (*on_state)(wk_session *s, void *userdata); /* started, exited, failed */
        void (*on_stdin_credit)(wk_session *s, void *userdata); /* more stdin may be written */
        /* The session is being freed: drop every pointer to it (the watch is already removed). */
        void (*on_gone)(wk_session *s, void *userdata);
        void *userdata;
        struct wk_session_watch *next;
} wk_session_watch;

/* The session logs of one sandbox share a budget of disk bytes. Each session
 * charges what its log holds on disk plus the output credit it granted the
 * agent and has not received yet (what may still arrive), so `used` never
 * passes `limit` (except by the credit re-granted after a restart). A session
 * grants more credit only within the budget; when it is short it asks
 * `reclaim`, which discards the logs of ended sessions (wk_session_reclaim),
 * and otherwise holds the agent back until bytes are freed — output is never
 * dropped. Owned by the caller (the sandbox); it must outlive its sessions. */
typedef struct wk_session_budget {
        uint64_t limit; /* bytes; 0: no budget */
        uint64_t used;
        /* Free at least need bytes if possible, never from session except (may be NULL). */
        void (*reclaim)(struct wk_session_budget *b, uint64_t need, wk_session *except, void *userdata);
        /* Bytes were freed: sessions held back may go on (call wk_session_kick later, not from here). */
        void (*freed)(struct wk_session_budget *b, void *userdata);
        void *userdata;
} wk_session_budget;

/* The request: an agent `exec` (proto/spec/agent.md) with "session" set to id.
 * Creates <dir>, persists the session and starts it on link. budget (may be
 * NULL) is charged; SP_E_LIMIT when it cannot take the session's first credit
 * even after reclaiming ended sessions' logs. */
int wk_session_start(wk_agent_link *link, const char *dir, const char *id, const char *sandbox_id,
                     json_object *exec_request, uint64_t log_capacity, wk_session_budget *budget, wk_session **ret,
                     sp_error **err);
/* Loads a persisted session (after a restart); it is detached until
 * wk_session_attach_agent. budget as for wk_session_start (charged, never refused). */
int wk_session_load(const char *dir, uint64_t log_capacity, wk_session_budget *budget, wk_session **ret,
                    sp_error **err);
/* Whether the session has ended and all its output is stored. A command may
 * have exited (state EXITED, with its exit status) while the agent still holds
 * output the log had no room for; that output follows as readers make room. */
bool wk_session_output_complete(const wk_session *s);
/* Re-attaches a loaded, unfinished session to the agent (resumes its output at the stored offsets). */
int wk_session_attach_agent(wk_session *s, wk_agent_link *link, sp_error **err);
/* The agent connection was lost: the session waits for wk_session_attach_agent. */
void wk_session_detach_agent(wk_session *s);
/* The sandbox's processes are gone (it was stopped, or its init died): the
 * session is detached and, unless it had already ended, failed with why. An
 * exited command keeps its exit status; output the agent still held is lost. */
void wk_session_lose(wk_session *s, const char *why);
void wk_session_free(wk_session *s);
/* Frees and deletes the session's directory (tells the agent to release it if attached). */
int wk_session_remove(wk_session *s, sp_error **err);

/* Watches are told in the order they were added. */
void wk_session_watch_add(wk_session *s, wk_session_watch *w);
/* Records why an exited command ended ("memory", "disk", ...), found by the
 * owner from what encloses it; call from the owner's on_state. */
int wk_session_set_exit_reason(wk_session *s, const char *reason, bool oom, sp_error **err);
void wk_session_watch_remove(wk_session *s, wk_session_watch *w);
/* How many watch it (its owner's included). */
size_t wk_session_watch_count(const wk_session *s);

const char *wk_session_id(const wk_session *s);
const char *wk_session_sandbox(const wk_session *s);
wk_session_state wk_session_get_state(const wk_session *s);
const char *wk_session_state_name(wk_session_state st);
const wk_session_exit *wk_session_get_exit(const wk_session *s); /* NULL until exited */
const char *wk_session_failure(const wk_session *s); /* message when FAILED */
int wk_session_pid(const wk_session *s);
/* JSON for APIs: id, sandbox, state, pid, exit, timestamps, offsets. New reference. */
json_object *wk_session_to_json(const wk_session *s);

/* Output. */
uint64_t wk_session_output_start(const wk_session *s);
uint64_t wk_session_output_end(const wk_session *s);
int wk_session_read(wk_session *s, uint64_t offset, void *buf, size_t cap, uint8_t *ret_stream, size_t *ret_n,
                    sp_error **err);
/* A reader has consumed everything before offset (frees log room, may resume the agent). */
void wk_session_mark_read(wk_session *s, uint64_t offset);
/* A reader was sent everything before offset (wk_log_mark_sent: the resume window behind it stays). */
void wk_session_mark_sent(wk_session *s, uint64_t offset);
/* Grants the agent the credit it was held back for if the log and the budget now have room. */
void wk_session_kick(wk_session *s);
/* Bytes the session charges to its budget now. */
uint64_t wk_session_charge(const wk_session *s);
/* Discards the log of an ended session whose output is complete (to free its
 * budget): later reads of it fail with SP_E_NOT_FOUND naming the reclaim.
 * SP_E_CONFLICT while the session is live. */
int wk_session_reclaim(wk_session *s, sp_error **err);
/* Whether the session's output was reclaimed. */
bool wk_session_reclaimed(const wk_session *s);

/* Input and control (only while running). */
/* Queues stdin bytes; returns how many were accepted within the agent's credit. */
size_t wk_session_write_stdin(wk_session *s, const void *p, size_t n);
size_t wk_session_stdin_credit(const wk_session *s);
int wk_session_close_stdin(wk_session *s, sp_error **err);
int wk_session_signal(wk_session *s, int sig, sp_error **err);
int wk_session_kill(wk_session *s, const char *reason, sp_error **err);
int wk_session_resize(wk_session *s, int rows, int cols, sp_error **err);

#endif
