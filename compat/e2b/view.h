/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B's view of what the public API answers, for the routes the E2B CLI
 * uses: `e2b template list` (GET /templates) and `e2b sandbox logs`
 * (GET /sandboxes/{id}/logs). Pure: JSON in, JSON out, no I/O; the
 * answers come from our own API, but nothing here trusts their shape (a
 * field missing or of another type is left out). Thread-safe.
 */
#ifndef E2B_VIEW_H
#define E2B_VIEW_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"

/* What a template created without a size gets from the public API's
 * defaults (controlplane/api/request.c): our templates have no size of
 * their own, and the wrapper's creates ask for none. */
#define E2B_VIEW_TEMPLATE_CPUS 1
#define E2B_VIEW_TEMPLATE_MEMORY_MB 512
#define E2B_VIEW_TEMPLATE_DISK_MB 2048

#define E2B_VIEW_LOGS_MAX 1000 /* entries in one answer, and the default limit */

/* E2B's Template for one of ours (GET /v1/templates' items): templateID,
 * aliases and names are its name, buildID its id, buildStatus from its
 * state (ready, error for failed, building, waiting for the rest: an upload
 * not yet finished), public, createdAt (and updatedAt) its created_at,
 * buildCount 1 once built, spawnCount 0 and lastSpawnedAt null (not
 * counted here), envdVersion the wrapper's. NULL when tpl has no name. */
json_object *e2b_view_template(json_object *tpl, const char *envd_version);

/* A sandbox's log, gathered from its record and its sessions, then
 * answered as E2B's SandboxLogs. */
typedef struct e2b_view_logs {
        json_object *entries; /* [{ts_us, level, logger, message, fields{}}], unsorted */
} e2b_view_logs;

void e2b_view_logs_init(e2b_view_logs *l);
void e2b_view_logs_free(e2b_view_logs *l);

/* The sandbox's record (GET /v1/sandboxes/{id}): "sandbox created" at its
 * created_at and, unless it runs, "sandbox <state>" at its updated_at (the
 * record's last change) with its desired state and status message. */
void e2b_view_logs_sandbox(e2b_view_logs *l, json_object *sandbox);

/* One session (GET /v1/sandboxes/{id}/sessions' items): "process started"
 * at its started_at (else created_at) with its pid and command, then
 * "process exited" at its ended_at with the exit (warn unless code 0), or
 * "process failed" with its error. */
void e2b_view_logs_session(e2b_view_logs *l, json_object *session);

/* E2B's SandboxLogs: {"logs": [{timestamp, line}], "logEntries":
 * [{timestamp, level, message, fields}]}, oldest first, the entries at or
 * after start_ms (milliseconds since the epoch; 0: all), at most limit of
 * them (the oldest). line is a JSON object with level, logger, message and
 * the fields, as the CLI prints it. A new object. */
json_object *e2b_view_logs_answer(const e2b_view_logs *l, int64_t start_ms, size_t limit);

#endif
