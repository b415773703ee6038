/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Placement against the store: reads the fleet (every worker with what its
 * placed sandboxes hold and its last heartbeat's templates, warm pools and
 * storage) and asks the scheduler (sched/sched.h) for a worker. Used by the
 * controller's create and by the API's one-hop create, so both place by the
 * same rules. Blocking (libpq); call from the thread that owns db.
 */
#ifndef CP_SCHED_PLACEMENT_H
#define CP_SCHED_PLACEMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "space/error.h"
#include "space/id.h"
#include "store/db.h"

/* The worker chosen. */
typedef struct cp_placement {
        char worker_id[SP_ID_MAX];
        char name[72]; /* its name (its certificate's), or its id when it has none */
        char address[272]; /* its RPC address ("" when it has none yet) */
        int64_t warm; /* warm sandboxes of the template its last heartbeat reported */
} cp_placement;

/* Places a sandbox of template_id whose spec (JSON text, api/sandboxes.c:
 * resources and labels are read from it) asks for backend (NULL or "": any),
 * on another worker than avoid (NULL: any) if one fits, else on any. 0 and
 * *ret; else cp_sched_place()'s errors (SP_E_LIMIT: no room now,
 * SP_E_UNAVAILABLE: none can) explaining each worker, or SP_E_UNAVAILABLE
 * when the store does not answer. *ret is left alone on failure. */
int cp_placement_choose(cp_db *db, const char *template_id, const char *spec, const char *backend, const char *avoid,
                        cp_placement *ret, sp_error **err);

/* Places a suspended sandbox that is to move (ctrl/move.c) as
 * cp_placement_choose() does, but never on one of exclude[0..nexclude) (the
 * worker it leaves and those that refused it) and with no fallback to them;
 * prefer (NULL: none), the worker an earlier attempt chose (it may already
 * hold part of the artifacts), is taken whenever it fits; need_store: only
 * a worker with the artifact store (a wake from the store). Errors as
 * cp_placement_choose()'s, the excluded workers explained as such. */
int cp_placement_choose_other(cp_db *db, const char *template_id, const char *spec, const char *backend,
                              const char *const *exclude, size_t nexclude, const char *prefer, bool need_store,
                              cp_placement *ret, sp_error **err);

#endif
