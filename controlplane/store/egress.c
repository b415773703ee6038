/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>

#include "store/egress.h"

void cp_sandbox_egress_applied(cp_db *db, const char *id, int64_t generation)
{
        char gen[24];
        snprintf(gen, sizeof(gen), "%lld", (long long)generation);
        const char *p[] = {id, gen};
        (void)cp_db_exec(db, "UPDATE sandboxes SET egress_applied = greatest(egress_applied, $2::bigint) WHERE id = $1",
                         2, p, NULL, NULL);
}

void cp_sandbox_secrets_sent(cp_db *db, const char *id)
{
        const char *p[] = {id};
        (void)cp_db_exec(db, "UPDATE sandboxes SET secrets_sent_at = now() WHERE id = $1", 1, p, NULL, NULL);
}
