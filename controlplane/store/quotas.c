/* SPDX-License-Identifier: Apache-2.0 */
/* Tenant quotas (see quotas.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "store/quotas.h"

const char *const cp_quota_names[CP_QUOTA_COUNT + 1] = {
        [CP_QUOTA_RUNNING_SANDBOXES] = "running_sandboxes",
        [CP_QUOTA_CPU_MILLIS] = "cpu_millis",
        [CP_QUOTA_MEMORY_MB] = "memory_mb",
        [CP_QUOTA_DISK_MB] = "disk_mb",
        [CP_QUOTA_SUSPENDED_MB] = "suspended_mb",
        [CP_QUOTA_SESSIONS_PER_SANDBOX] = "sessions_per_sandbox",
        [CP_QUOTA_TEMPLATES] = "templates",
        [CP_QUOTA_TEMPLATE_BYTES] = "template_bytes",
        [CP_QUOTA_COUNT] = NULL,
};

int cp_quota_index(const char *name)
{
        for (int i = 0; name && i < CP_QUOTA_COUNT; i++)
                if (strcmp(name, cp_quota_names[i]) == 0)
                        return i;
        return -1;
}

void cp_quota_defaults_json(const int64_t limits[CP_QUOTA_COUNT], char out[static CP_QUOTA_DEFAULTS_MAX])
{
        size_t len = 0;
        out[0] = '\0';
        for (int i = 0; i < CP_QUOTA_COUNT; i++) {
                int64_t v = limits[i] < 0 ? CP_QUOTA_NONE : limits[i] > CP_QUOTA_MAX ? CP_QUOTA_MAX : limits[i];
                int w = snprintf(out + len, CP_QUOTA_DEFAULTS_MAX - len, "%s\"%s\":%" PRId64, i ? "," : "{",
                                 cp_quota_names[i], v);
                if (w < 0 || (size_t)w >= CP_QUOTA_DEFAULTS_MAX - len)
                        break;
                len += (size_t)w;
        }
        snprintf(out + len, CP_QUOTA_DEFAULTS_MAX - len, "}");
}

int cp_quota_lock(cp_db *db, const char *tenant, sp_error **err)
{
        const char *p[] = {tenant};
        return cp_db_exec(db, "SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE", 1, p, NULL, err);
}

int cp_quota_check(cp_db *db, const char *tenant, const char *defaults, const char *delta, int *ret_quota,
                   sp_error **err)
{
        if (ret_quota)
                *ret_quota = -1;
        const char *p[] = {tenant, defaults, delta};
        _cleanup_pgresult_ PGresult *res = NULL;
        int r = cp_db_exec(db,
                           "SELECT r->>'quota', r->>'limit', r->>'used', r->>'asked' "
                           "FROM quota_refusal($1, $2::jsonb, $3::jsonb) r WHERE r IS NOT NULL",
                           3, p, &res, err);
        if (r < 0)
                return r;
        if (PQntuples(res) == 0)
                return 0;
        const char *quota = PQgetvalue(res, 0, 0);
        if (ret_quota)
                *ret_quota = cp_quota_index(quota);
        return sp_error_set(err, SP_E_LIMIT,
                            "tenant quota exceeded: %s limit %s, in use %s, requested %s (an admin sets it with "
                            "PUT /v1/tenants/%s/quotas; GET /v1/tenants/%s/usage shows every quota)",
                            quota, PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3), tenant, tenant);
}
