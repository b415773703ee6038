/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The controllers (docs/controlplane.md): on one leader at a time, chosen by a
 * PostgreSQL advisory lock held by a dedicated connection (it passes to
 * another replica when the leader's connection dies), they carry out the
 * operations the API records, reconcile what workers report against what the
 * database wants (orphans removed, missing sandboxes recreated, drift
 * recorded), enforce timeouts and idle suspension, size warm pools, build
 * templates on every worker, drain workers, expire operations that cannot
 * finish and collect deleted records. LISTEN space_work wakes them at once;
 * a periodic tick is the backstop.
 *
 * Every step is written so that a new leader can repeat it: worker calls are
 * idempotent or checked against the worker's state before they are retried.
 *
 * Threading: the caller's loop; blocking database calls.
 */
#ifndef CP_CTRL_H
#define CP_CTRL_H

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"
#include "store/keyring.h"

struct event_base;

typedef struct cp_ctrl_config {
        const char *conninfo;
        SSL_CTX *worker_tls; /* client context with the controlplane certificate (borrowed, referenced) */
        int64_t default_idle_timeout_s; /* [6 h]; 0 never */
        int64_t tick_ms; /* backstop period [1000] */
        /* Audit records older than this are deleted, when this replica takes
         * the lead and with the other collection (every 600 ticks); 0 keeps
         * them for ever. */
        int64_t audit_retention_s;
        int unreachable_factor; /* heartbeats missed before a worker is unreachable [3] */
        int quarantine_threshold; /* consecutive failed calls before quarantine [5] */
        const char *name; /* this replica, for logs */
        /* The cluster key ring that opens secrets' values for the bindings
         * creates and SetEgress send (borrowed; outlives the controllers).
         * NULL: sandboxes are sent without their secrets (logged). */
        cp_keyring *keyring;
} cp_ctrl_config;

typedef struct cp_ctrl cp_ctrl;

cp_ctrl *cp_ctrl_new(struct event_base *base, const cp_ctrl_config *cfg, sp_error **err);
/* True while this replica holds the leader lock. */
bool cp_ctrl_is_leader(const cp_ctrl *c);
/* Appends the controllers' counters in the Prometheus text format
 * (space_controlplane_sandbox_moves_total{result}, ..._move_bytes_total):
 * what this replica did while it led, since it started. c may be NULL (0s). */
void cp_ctrl_metrics(const cp_ctrl *c, sp_buf *b);
/* Releases leadership (closing the lock connection) and frees. */
cp_ctrl *cp_ctrl_free(cp_ctrl *c);

#endif
