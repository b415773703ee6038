/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public API server (DESIGN §2): JSON over HTTP(S) on common/http,
 * authenticated by API keys, every query scoped to the caller's tenant, every
 * mutation recorded (with its audit record and, if asked, its idempotency
 * record) in one transaction before it is acknowledged. Lifecycle changes
 * only record intent and an operation; the controllers (ctrl/) carry them out.
 *
 * Threading: one loop; the database connections are used with blocking calls.
 */
#ifndef CP_API_H
#define CP_API_H

#include <stdint.h>

#include "space/error.h"
#include "space/http.h"
#include "store/db.h"

struct event_base;

typedef struct cp_api_config {
        const char *conninfo; /* PostgreSQL: the API opens its own two connections */
        int64_t default_idle_timeout_s; /* the cluster's idle auto-suspend [6 h] */
        int64_t operation_deadline_s; /* how long an operation may wait before it fails [600] */
        const char *dataplane_url; /* reported to clients (later: sessions) */
} cp_api_config;

typedef struct cp_api cp_api;

/* An API on base, with its routes registered on srv (borrowed; both outlive the API). */
cp_api *cp_api_new(struct event_base *base, sp_http_server *srv, const cp_api_config *cfg, sp_error **err);
/* Answers every long-polling request with the operation as it stands and frees the API. */
cp_api *cp_api_free(cp_api *api);

#endif
