/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker's job threads: the blocking steps of making, starting and
 * removing sandboxes (snapshots, cgroups, namespaces, links, firewall
 * elements, agent start) run here, off the event loop, so that the loop
 * keeps serving execs, streams and heartbeats while they run.
 *
 * A job's run() happens on one of a fixed number of threads and touches
 * nothing the loop owns (it gets copies of what it needs); its done() then
 * happens on the loop. User jobs go first, in the order they came; background
 * jobs (warm-pool refills) start only when no user job waits and never on the
 * last free thread, so a refill never holds up a request.
 */
#ifndef WK_JOBS_H
#define WK_JOBS_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"

typedef struct wk_jobs wk_jobs;
typedef struct wk_job wk_job;

struct wk_job {
        const char *kind; /* for metrics: "create", "delete", ... (static) */
        void (*run)(wk_job *j); /* on a job thread */
        void (*done)(wk_job *j); /* on the loop, once run returned; or with cancelled set, run never ran */
        bool background;
        bool cancelled; /* the pool was freed before the job started */
        /* the pool's own */
        int64_t queued_us;
        wk_job *next;
};

/* threads >= 1. */
int wk_jobs_new(struct event_base *base, unsigned threads, wk_jobs **ret, sp_error **err);
/* Queues j (its fields above `the pool's own` set); done() follows on the loop. */
void wk_jobs_submit(wk_jobs *js, wk_job *j);
/* The threads, the jobs waiting for one (user, background) and those running. */
void wk_jobs_counts(wk_jobs *js, unsigned *ret_threads, unsigned *ret_user, unsigned *ret_background,
                    unsigned *ret_running);
/* Prometheus lines (space_worker_jobs_*). */
void wk_jobs_metrics(wk_jobs *js, sp_buf *out);
/* Waits for the running jobs and calls every done() left: finished jobs as
 * usual, jobs never started with cancelled set. Then frees the pool. From the
 * loop's thread; accepts NULL. */
void wk_jobs_free(wk_jobs *js);

#endif
