/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public API server (docs/api.md, proto/openapi.yaml): JSON over HTTP(S) on common/http,
 * authenticated by API keys, every query scoped to the caller's tenant, every
 * mutation recorded (with its audit record and, if asked, its idempotency
 * record) in one transaction before it is acknowledged. Lifecycle changes
 * only record intent and an operation; the controllers (ctrl/) carry them out.
 * Command sessions and file operations call the sandbox's worker from the
 * request (an RPC on the loop, answered from its callback), so every replica
 * serves them; the API mints the attachment tokens clients take to the data
 * plane (store/tokenkeys.h).
 *
 * Threading: one loop; the database connections are used with blocking calls.
 */
#ifndef CP_API_H
#define CP_API_H

#include <stdbool.h>
#include <stdint.h>

#include "space/buf.h"
#include "space/error.h"
#include "space/http.h"
#include "store/db.h"
#include "store/keyring.h"

struct event_base;
typedef struct ssl_ctx_st SSL_CTX;

typedef struct cp_api_config {
        const char *conninfo; /* PostgreSQL: the API opens its own two connections */
        int64_t default_idle_timeout_s; /* the cluster's idle auto-suspend [6 h] */
        int64_t operation_deadline_s; /* how long an operation may wait before it fails [600] */
        const char *dataplane_url; /* base of attach, file and ingress URLs [http://127.0.0.1:7071]; copied */
        /* The domain of sandboxes' host-form ingress URLs,
         * {port}-{id}.<domain> [localhost]: a wildcard DNS name (or *.localhost)
         * that reaches the data plane. Copied. */
        const char *ingress_domain;
        int64_t attach_token_ttl_s; /* attachment tokens' lifetime unless a request sets one [3600] */
        int64_t worker_timeout_ms; /* deadline of a call to a worker [15000] */
        int64_t template_upload_max_bytes; /* the most one tenant template may hold, archive and files [16 GiB] */
        int64_t tenant_template_bytes; /* the most a tenant's templates may hold together [64 GiB] */
        int64_t tenant_template_builds; /* the most a tenant's templates uploading or building at once [4] */
        int64_t max_waiters; /* long-polls held at once [1024], a quarter of them per tenant */
        /* Login failures (401s) recorded in the audit log per second [10],
         * in bursts of up to ten seconds' worth, and as many calls answered
         * 429; the rest are counted only (docs/operations.md, "Reading the
         * audit trail"). */
        int64_t audit_login_failures_per_s;
        /* The Debian mirror tenants' debootstrap builds fetch from (copied): each
         * such build carries it to the workers. NULL or "": tenants may not
         * build from debootstrap (the workers' default is the internet). */
        const char *debootstrap_mirror;
        SSL_CTX *worker_tls; /* client context for calling workers (referenced); NULL: cleartext (tests) */
        /* The cluster key ring that seals secrets' values (borrowed; outlives
         * the API). NULL: the secrets routes answer 503 naming the flag. */
        cp_keyring *keyring;
        /* One-hop creates (docs/controlplane.md, "Creates"): a create that a
         * worker's warm pool can serve is placed there and sent by the
         * request itself, and answered running. false: every create goes
         * through the controller. */
        bool create_fast_path;
        /* Tenant quotas' cluster defaults (docs/controlplane.md, "Quotas and
         * rate limits"): one limit per quota in the order of cp_quota_names
         * (store/quotas.h), CP_QUOTA_NONE for none; the template_bytes entry
         * is ignored (tenant_template_bytes is its default). Copied. NULL:
         * none, but template_bytes. An admin overrides them per tenant. */
        const int64_t *quota_defaults;
        /* Rate limits, each a token bucket kept by this replica alone: API
         * requests a second per API key and per tenant, sandbox creates a
         * second per tenant, each with its burst (0: twice its rate). A rate
         * of 0: no limit. */
        int64_t rate_key_rps, rate_key_burst;
        int64_t rate_tenant_rps, rate_tenant_burst;
        int64_t rate_create_rps, rate_create_burst;
        /* Whether this replica holds the leader lock (the space_controlplane_leader
         * gauge in /metrics); NULL reports 0. Called on the loop with leader_arg. */
        bool (*is_leader)(const void *leader_arg);
        const void *leader_arg;
        /* Appends the controllers' metrics (moves of suspended sandboxes) to
         * /metrics; NULL: none. Called on the loop with leader_arg. */
        void (*ctrl_metrics)(const void *leader_arg, sp_buf *b);
} cp_api_config;

typedef struct cp_api cp_api;

/* Whether s may be the ingress domain: a DNS name of lowercase letters,
 * digits, '-' and '.' (labels of 1 to 63, not starting or ending with '-';
 * no empty label, no final dot), at most CP_INGRESS_DOMAIN_MAX bytes. */
#define CP_INGRESS_DOMAIN_MAX 200
bool cp_api_ingress_domain_valid(const char *s);

/* An API on base, with its routes registered on srv (borrowed; both outlive
 * the API). SP_E_INVALID for configuration values out of range
 * (attach_token_ttl_s 1..CP_TOKEN_MAX_TTL_S, worker_timeout_ms 100..600000,
 * dataplane_url not http:// or https://, ingress_domain not a valid one). */
cp_api *cp_api_new(struct event_base *base, sp_http_server *srv, const cp_api_config *cfg, sp_error **err);
/* Answers every long-polling request with the operation as it stands, fails
 * every worker call still open (SP_E_UNAVAILABLE) and frees the API. */
cp_api *cp_api_free(cp_api *api);

#endif
