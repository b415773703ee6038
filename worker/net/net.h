/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A worker's sandbox network (docs/networking.md): the pool its sandboxes'
 * links take their addresses from and what each sandbox is given when it
 * starts. The backends call it: the jail when its init exists and before it
 * runs anything (wk_net_sandbox_up with the init's pid), after a restart for
 * the sandboxes it adopts, and when a sandbox stops.
 *
 * A sandbox's slot (its wk_box_spec.id_slot) picks its link: host end
 * <ifprefix><slot>, addresses from --sandbox-cidr (link.h). Not thread-safe:
 * the worker's event loop calls it.
 */
#ifndef SPACE_WORKER_NET_NET_H
#define SPACE_WORKER_NET_NET_H

#include <stdint.h>
#include <sys/types.h>

#include "net/link.h"
#include "space/error.h"

typedef struct wk_net wk_net;

typedef struct wk_net_config {
        const char *cidr; /* the sandboxes' network; NULL: WK_NET_DEFAULT_CIDR */
        const char *ifprefix; /* host ends' prefix; NULL: WK_NET_HOST_PREFIX */
} wk_net_config;

int wk_net_new(const wk_net_config *cfg, wk_net **ret, sp_error **err);
void wk_net_free(wk_net *n);
static inline void wk_net_freep(wk_net **n)
{
        wk_net_free(*n);
}

/* The pool (for the worker's report and its checks of slots). */
const wk_net_pool *wk_net_pool_of(const wk_net *n);

/* Gives the sandbox whose init is pid (in its own network namespace) its
 * link. On failure nothing is left. */
int wk_net_sandbox_up(wk_net *n, uint32_t slot, pid_t pid, sp_error **err);
/* After a worker restart: the sandbox keeps its link, which is made again if
 * it went missing; saved_if, when it names another host end (the worker's
 * network changed), is removed. */
int wk_net_sandbox_adopt(wk_net *n, uint32_t slot, pid_t pid, const char *saved_if, sp_error **err);
/* The sandbox has stopped: takes its link away (a missing one is no error). */
void wk_net_sandbox_down(wk_net *n, uint32_t slot);

#endif
