/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenant quotas (docs/controlplane.md, "Quotas and rate limits"): the
 * cluster's defaults as the JSON the store's functions take, and the check
 * every change that adds to a tenant's use runs in its transaction.
 *
 * The use is counted by PostgreSQL from the records themselves
 * (migrations/0015_tenant_quotas.sql: quota_charge(), tenant_usage(),
 * quota_refusal()), never cached: a quota an admin changes applies to the
 * next request, on every replica.
 *
 * Threading: as the cp_db given.
 */
#ifndef CP_STORE_QUOTAS_H
#define CP_STORE_QUOTAS_H

#include <stddef.h>
#include <stdint.h>

#include "store/db.h"

/* The quotas, in the order of cp_quota_names[]. */
enum {
        CP_QUOTA_RUNNING_SANDBOXES,
        CP_QUOTA_CPU_MILLIS,
        CP_QUOTA_MEMORY_MB,
        CP_QUOTA_DISK_MB,
        CP_QUOTA_SUSPENDED_MB,
        CP_QUOTA_SESSIONS_PER_SANDBOX,
        CP_QUOTA_TEMPLATES,
        CP_QUOTA_TEMPLATE_BYTES,
        CP_QUOTA_COUNT,
};

/* "running_sandboxes", ...: the keys of a tenant's quotas and of the API's
 * answers; NULL-terminated. */
extern const char *const cp_quota_names[CP_QUOTA_COUNT + 1];

/* The index of name in cp_quota_names, or -1. */
int cp_quota_index(const char *name);

/* A limit: >= 0, or CP_QUOTA_NONE. */
#define CP_QUOTA_NONE (-1)
/* The largest limit (JSON numbers are exact up to 2^53). */
#define CP_QUOTA_MAX (INT64_C(1) << 53)

/* The cluster's defaults, one limit per quota (CP_QUOTA_NONE: none), as the
 * JSON object the store's functions take, into out (a NUL-terminated string
 * of at most outlen bytes; 512 is always enough). */
#define CP_QUOTA_DEFAULTS_MAX 512
void cp_quota_defaults_json(const int64_t limits[CP_QUOTA_COUNT], char out[static CP_QUOTA_DEFAULTS_MAX]);

/* Inside a transaction: locks tenant's row against every other quota check
 * of the tenant (FOR NO KEY UPDATE: rows that merely reference the tenant
 * are still inserted meanwhile) until the transaction ends. Take it before
 * any lock on one of the tenant's sandboxes. SP_E_UNAVAILABLE for database
 * trouble; a missing tenant is not an error (nothing is locked). */
int cp_quota_lock(cp_db *db, const char *tenant, sp_error **err);

/* Inside a transaction, under cp_quota_lock(): whether delta (a JSON object
 * quota -> amount the change adds; amounts <= 0 are not checked) fits in
 * tenant's quotas, with defaults (cp_quota_defaults_json()). SP_E_LIMIT when
 * it does not, worded "tenant quota exceeded: <quota> limit L, in use U,
 * requested N …", with the quota's index in *ret_quota (may be NULL; -1
 * otherwise). */
int cp_quota_check(cp_db *db, const char *tenant, const char *defaults, const char *delta, int *ret_quota,
                   sp_error **err);

#endif
