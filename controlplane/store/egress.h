/* SPDX-License-Identifier: Apache-2.0 */
/* A sandbox's egress profile and secrets as its worker has them (api/egress.c). */
#ifndef CP_STORE_EGRESS_H
#define CP_STORE_EGRESS_H

#include <stdint.h>

#include "store/db.h"

/* Records that sandbox id's worker confirmed its egress profile of
 * generation (egress_applied never goes back). Best effort: a failure
 * leaves the controller to send it again. */
void cp_sandbox_egress_applied(cp_db *db, const char *id, int64_t generation);

/* Records that sandbox id's worker took its bindings again after it said it
 * had lost their values (reconcile: secrets_missing). Best effort. */
void cp_sandbox_secrets_sent(cp_db *db, const char *id);

#endif
