/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The worker's side of its node's egress gateway (space-gateway,
 * docs/networking.md): it starts the gateway when none answers on the
 * control socket and starts it again when it dies, tells it every
 * sandbox's address, ids and egress profile (again, whole, after each
 * reconnect: sync_begin, set..., sync_end), and hands the gateway's audit
 * records to a callback.
 *
 * The gateway is the worker's child but does not die with it: a restarted
 * worker finds it answering and resyncs it, so sandboxes keep their egress
 * across worker restarts. Runs on the worker's event loop; not thread-safe.
 */
#ifndef SPACE_WORKER_NET_GATEWAY_H
#define SPACE_WORKER_NET_GATEWAY_H

#include <json-c/json.h>
#include <stdbool.h>
#include <sys/types.h>

#include "space/error.h"

struct event_base;
typedef struct wk_gw wk_gw;

typedef struct wk_gw_config {
        const char *program; /* the space-gateway binary; NULL: connect only (the gateway is run by others) */
        const char *socket_path; /* its control socket */
        const char *const *args; /* more arguments for it (NULL-terminated; may be NULL) */
        const char *pid_path; /* where the running gateway's pid is kept (for purge); may be NULL */
        /* Each audit record (borrowed for the call). */
        void (*on_audit)(json_object *rec, void *ud);
        void *ud;
} wk_gw_config;

int wk_gw_new(struct event_base *base, const wk_gw_config *cfg, wk_gw **ret, sp_error **err);
/* Disconnects; the gateway keeps running. */
void wk_gw_free(wk_gw *g);

/* The answer to a set: NULL error when the gateway has the sandbox's rules. */
typedef void (*wk_gw_done)(const sp_error *err, void *ud);

/* Tells the gateway the sandbox at addr (dotted IPv4), its profile and its
 * secrets ({"secrets":[…],"ca_cert":…,"ca_key":…}, docs/secrets.md; NULL:
 * none) (both borrowed; copied, and the secrets kept in memory only to be
 * sent again after a reconnect). done (may be NULL) is called once: when the gateway
 * confirmed, or with an error (the gateway is not reachable, or refused the
 * profile); the sandbox is kept and sent again on the next connection
 * either way. */
void wk_gw_set(wk_gw *g, const char *addr, const char *sandbox_id, const char *tenant_id, json_object *profile,
               json_object *secrets, wk_gw_done done, void *ud);
/* How many of the sandbox's secrets the gateway has no value of, as it last
 * said (-1: it has not said). */
int wk_gw_secrets_missing(wk_gw *g, const char *addr);
/* Forgets the sandbox at addr; its connections through the gateway end. */
void wk_gw_del(wk_gw *g, const char *addr);
bool wk_gw_connected(const wk_gw *g);
/* How often the gateway was (re)started by this worker. */
unsigned wk_gw_starts(const wk_gw *g);

/* Stops the gateway named by pid_path (purge): SIGKILL, then removes the file. */
int wk_gw_kill(const char *pid_path, sp_error **err);

#endif
