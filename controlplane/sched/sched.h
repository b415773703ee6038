/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The scheduler: picks the worker a sandbox runs on.
 *
 * A pure function over a snapshot of the fleet (the caller reads it from the
 * store): no I/O, no globals, deterministic for a given input, so it is
 * tested exhaustively as a unit. A worker is eligible when it is healthy
 * ("ready"), not cordoned or draining, runs the requested backend, carries
 * every requested label, holds the template, and has the free CPU, memory and
 * slots the sandbox asks for (a sandbox takes one slot; free = capacity -
 * used, negative values counting as 0). Among eligible workers it prefers one
 * with a warm sandbox of the template, then the one left with the most free
 * room (spreading load: the largest of the smallest free fraction of CPU,
 * memory and slots once the sandbox is placed, compared exactly), then the
 * smaller name, then the smaller id. Thread-safe: it touches only its
 * arguments.
 */
#ifndef CP_SCHED_H
#define CP_SCHED_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

/* One worker as the scheduler sees it. Strings and labels are borrowed. */
typedef struct cp_sched_worker {
        const char *id; /* "wkr_..." */
        const char *name; /* the node's name, used in explanations */
        const char *backend; /* what it runs: "jail", "qemu", "firecracker", or several, comma-separated */
        const char *health; /* "ready", "unreachable", "quarantined" */
        const char *admin_state; /* "active", "cordoned", "draining" */
        json_object *labels; /* object of string values, or NULL */
        int64_t cpu_millis_capacity, memory_mb_capacity, slots_capacity;
        int64_t cpu_millis_used, memory_mb_used, slots_used; /* what is placed there now */
        /* Its storage pool's size and what is in use there, as the worker last
         * reported (capacity 0: not reported, not checked). Disk quotas
         * overcommit (snapshots share their template's blocks): a sandbox's quota
         * must fit the pool, and the pool must have a margin free (the quota or
         * a twentieth of the pool, whichever is less); quotas are not summed. */
        int64_t disk_mb_capacity, disk_mb_used;
        bool has_template; /* the requested template is imported on it */
        int64_t warm; /* warm sandboxes of the requested template ready on it */
        /* Its job threads as it last reported them (0: not reported), and the
         * jobs it has to do: the larger of what it reported running and
         * waiting, and the creates placed there and not yet running. A
         * worker with no thread free is chosen only when every other that
         * fits has none either (then the shortest queue): a create there
         * would wait behind the others. */
        int64_t job_threads, jobs_pending;
        bool artifact_store; /* it has the cluster's artifact store (its heartbeat says so) */
} cp_sched_worker;

/* What a sandbox needs. Strings and labels are borrowed. */
typedef struct cp_sched_request {
        const char *template_id;
        const char *backend; /* NULL or "": any backend */
        json_object *labels; /* every key must be on the worker with the same value; NULL: none */
        int64_t cpu_millis, memory_mb;
        int64_t disk_mb; /* its disk quota */
        const char *exclude_worker; /* NULL, or a worker id never to choose (one that just failed the sandbox) */
        /* More worker ids never to choose (a move: the worker it leaves and
         * those that refused it); borrowed, may be NULL when n is 0. */
        const char *const *exclude_workers;
        size_t nexclude_workers;
        /* Only a worker with the artifact store (a wake from the store: the
         * sandbox's worker is gone). */
        bool need_store;
} cp_sched_request;

/* Chooses a worker among ws[0..n). On success returns 0 and sets *ret_index.
 * When no worker is eligible it returns -SP_E_LIMIT (some worker could run it
 * once room frees up: it was refused only for lack of free room) or
 * -SP_E_UNAVAILABLE (none could: no worker, all unhealthy, cordoned, excluded,
 * wrong backend or labels, no template, or too small in all), with *err's
 * message explaining, per worker in input order, the first reason each was
 * refused, e.g.
 *   "no worker can place it: node-a: cordoned; node-b: needs 512 MiB of memory, 128 MiB free"
 * (at most 20 workers named, then "and N more"; names and label parts are cut
 * at 64 characters); with n == 0: "no workers have joined the cluster".
 * -SP_E_INVALID when req, ret_index or ws (with n > 0) is NULL, the template
 * id is missing, cpu_millis or memory_mb is negative, or req->labels is not
 * an object of strings. *ret_index is left alone on failure. Never allocates
 * besides *err. */
int cp_sched_place(const cp_sched_request *req, const cp_sched_worker *ws, size_t n, size_t *ret_index, sp_error **err);

#endif
