/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Control-plane RPC (proto/spec/controlplane-rpc.md): the request and the
 * answer of every method as a C struct and its schema (msg.h). The control
 * plane (controlplane/fleet/) decodes the requests and encodes the answers;
 * workers and data planes encode the requests and decode the answers.
 *
 * Requests are closed (an unknown field is refused). Answers are open, so
 * that a newer control plane may add a field, except RevokedKeys's, which
 * the spec keeps strict both ways (revoked_proto.h, whose codec is built on
 * the schemas here). What a schema cannot say stays with the handlers, after
 * decoding: the name's pattern, HOST:PORT addresses, the backend's and a
 * sandbox state's values, the CSR's PEM, the characters of ids and names.
 *
 * Join has two requests and two answers, by "role": pr_controlplane_method
 * finds the worker's by default and the data plane's as variant "dataplane".
 * tests/unit/proto/test_controlplane_rpc.c checks the table against the spec.
 */
#ifndef SPACE_CONTROLPLANE_RPC_H
#define SPACE_CONTROLPLANE_RPC_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/msg.h"

#define PR_CP_TOKEN_FIELD_MAX 4096 /* longer than any join token, so that an over-long one gets the token answer */
#define PR_CP_NAME_MAX 63
#define PR_CP_PEM_MAX (64 * 1024) /* SP_PKI_MAX_PEM */
#define PR_CP_ADDRESS_MAX 262 /* "[" + 253 + "]:" + 5 */
#define PR_CP_BACKEND_MAX 32
#define PR_CP_ROLE_MAX 16
#define PR_CP_LABELS_MAX 64
#define PR_CP_LABEL_KEY_MAX 128
#define PR_CP_LABEL_VALUE_MAX 256
#define PR_CP_TEMPLATES_MAX 10000
#define PR_CP_SANDBOXES_MAX 100000
#define PR_CP_OBJECT_NAME_MAX 128 /* sandbox ids and template names as the worker knows them */
#define PR_CP_STATE_MAX 16
#define PR_CP_ID_MAX 64 /* worker ids */
#define PR_CP_RESOURCE_MAX (INT64_C(1) << 40)
#define PR_CP_BYTES_MAX (INT64_C(1) << 50)
#define PR_CP_WARM_MAX 100000
#define PR_CP_JOBS_MAX 1000000 /* a job count or a number of job threads */
#define PR_CP_HEARTBEAT_MS_MIN 100
#define PR_CP_HEARTBEAT_MS_MAX 600000
#define PR_CP_TOKEN_KEYS_MAX 16 /* SP_TOKEN_MAX_KEYS */
#define PR_CP_REVOKED_MAX 10000 /* keys (and templates) in one RevokedKeys answer */
#define PR_CP_REVOKED_ID_MAX 64
#define PR_CP_SANDBOX_ID_MAX 64 /* ResolveSandbox's ids (sandbox, tenant) */
#define PR_CP_INGRESS_MAX 16

/* TokenKeys: no fields. */
typedef struct pr_cp_empty {
        char unused;
} pr_cp_empty;

/* Join. role: NULL (worker) or "worker" with the worker's schema,
 * "dataplane" with the data plane's (which has no address, backend, labels). */
typedef struct pr_cp_join {
        const char *role, *token, *name, *csr, *address, *backend;
        json_object *labels; /* string map */
} pr_cp_join;

typedef struct pr_cp_join_worker_resp {
        const char *worker_id, *certificate, *ca;
        int64_t heartbeat_ms;
} pr_cp_join_worker_resp;

typedef struct pr_cp_join_dataplane_resp {
        const char *certificate, *ca;
        json_object *token_keys; /* strings, PEM */
} pr_cp_join_dataplane_resp;

/* Heartbeat */
typedef struct pr_cp_resources {
        int64_t cpu_millis, memory_mb, slots;
        int64_t disk_mb; /* -1 when absent */
} pr_cp_resources;

/* An element of Heartbeat's "sandboxes". */
typedef struct pr_cp_sandbox {
        const char *id, *state, *template_name; /* "template" */
        /* The worker holds bindings of this sandbox without their values (it
         * restarted: values live in its memory only); the control plane sends
         * SetEgress with them again. */
        bool secrets_missing;
        /* Why it is busy now (strings: "session", "attached", "ingress", "cpu");
         * NULL or empty: idle. The control plane's idle timeout counts from the
         * last heartbeat that said it was busy. */
        json_object *busy;
        /* Its copy in the worker's artifact store is whole: the copy's bytes
         * (its manifest's); 0 and left out: not stored. */
        int64_t stored_bytes;
} pr_cp_sandbox;

/* Heartbeat's "jobs": the worker's job threads and the jobs under way and
 * waiting for one (creates, deletes, suspends, restores, warm refills). */
typedef struct pr_cp_jobs {
        int64_t threads, running, queued;
} pr_cp_jobs;

typedef struct pr_cp_heartbeat {
        const char *address, *backend;
        json_object *labels; /* string map */
        pr_cp_resources capacity, used;
        bool has_jobs;
        pr_cp_jobs jobs;
        json_object *templates; /* strings */
        json_object *artifacts, *template_bytes, *warm; /* integer maps by template name */
        json_object *sandboxes; /* pr_cp_sandbox_schema messages */
        /* The worker has an artifact store (--artifact-store): it can take a
         * sandbox from it (ImportSandbox from.store) whose holder is gone. */
        bool artifact_store;
        /* Every backend it runs, `backend` (its default) first; absent: `backend` alone. */
        json_object *backends; /* strings */
} pr_cp_heartbeat;

typedef struct pr_cp_heartbeat_resp {
        const char *worker_id, *state, *admin_state;
        int64_t heartbeat_ms;
} pr_cp_heartbeat_resp;

/* TokenKeys's answer (also the data plane's saved copy of it) */
typedef struct pr_cp_token_keys_resp {
        json_object *token_keys; /* strings, PEM, the current key first */
} pr_cp_token_keys_resp;

/* RevokedKeys (revoked_proto.h reads and writes these for its callers) */
typedef struct pr_cp_revoked_req {
        int64_t since_us;
        bool templates;
} pr_cp_revoked_req;

/* An element of RevokedKeys's "keys" and "templates". */
typedef struct pr_cp_revoked_entry {
        const char *id;
        int64_t revoked_at_us;
} pr_cp_revoked_entry;

typedef struct pr_cp_revoked_resp {
        json_object *keys; /* pr_cp_revoked_entry_schema messages */
        int64_t cursor_us;
        bool more;
        json_object *templates; /* as keys; NULL unless asked for */
} pr_cp_revoked_resp;

/* ResolveSandbox (role dataplane): where a sandbox is and who may reach it.
 * The handler checks the id's syntax (sbx_…). With wake, a paused or
 * suspended sandbox whose auto_resume is set is woken first (the caller has
 * let a request for it through). */
typedef struct pr_cp_resolve_sandbox {
        const char *sandbox_id;
        bool wake;
        bool anonymous; /* with wake: the request had no token (only a public sandbox is woken) */
        const char *key_id; /* with wake: its token's API key (for the audit record); may be NULL */
} pr_cp_resolve_sandbox;

typedef struct pr_cp_resolve_sandbox_resp {
        const char *sandbox_id, *tenant_id;
        const char *state; /* the public state: running, paused, suspended, ... */
        const char *ingress; /* "token" or "public" */
        const char *worker; /* HOST:PORT of its worker's RPC; NULL when it has none */
        const char *worker_name; /* that worker's name (its certificate's); NULL when it has none */
        bool auto_resume; /* a request for one of its ports wakes it */
        bool waking; /* on its way back to running (asked to, not there yet) */
} pr_cp_resolve_sandbox_resp;

/* DrainSelf (role worker): the worker named by the certificate asks for its
 * own drain ("drain"), undoes a drain of its own ("uncordon"), or reads
 * where it stands ("status"). */
typedef struct pr_cp_drain_self {
        const char *action;
} pr_cp_drain_self;

typedef struct pr_cp_drain_self_resp {
        const char *worker_id;
        const char *state; /* the operators' word: ready, cordoned, draining, drained, unreachable, quarantined */
        const char *admin_state; /* active, cordoned, draining */
        bool by_self; /* the admin state in force is the worker's own drain */
        int64_t sandboxes; /* the sandboxes still on the worker */
} pr_cp_drain_self_resp;

extern const pr_schema pr_cp_empty_schema;
extern const pr_schema pr_cp_join_worker_schema;
extern const pr_schema pr_cp_join_dataplane_schema;
extern const pr_schema pr_cp_join_worker_resp_schema;
extern const pr_schema pr_cp_join_dataplane_resp_schema;
extern const pr_schema pr_cp_resources_schema;
extern const pr_schema pr_cp_sandbox_schema;
extern const pr_schema pr_cp_heartbeat_schema;
extern const pr_schema pr_cp_jobs_schema;
extern const pr_schema pr_cp_heartbeat_resp_schema;
extern const pr_schema pr_cp_token_keys_resp_schema;
extern const pr_schema pr_cp_revoked_req_schema;
extern const pr_schema pr_cp_revoked_entry_schema;
extern const pr_schema pr_cp_revoked_resp_schema;
extern const pr_schema pr_cp_resolve_sandbox_schema;
extern const pr_schema pr_cp_resolve_sandbox_resp_schema;
extern const pr_schema pr_cp_drain_self_schema;
extern const pr_schema pr_cp_drain_self_resp_schema;

typedef struct pr_cp_method {
        const char *name;
        const char *variant; /* Join's "dataplane"; NULL for the others and the worker's Join */
        const pr_schema *request;
        size_t request_size; /* of the request's struct */
        const pr_schema *response;
        size_t response_size;
} pr_cp_method;

extern const pr_cp_method pr_controlplane_methods[];
extern const size_t pr_controlplane_nmethods;

/* The method named name with that variant (NULL: the default one), or NULL. */
const pr_cp_method *pr_controlplane_method(const char *name, const char *variant);

#endif
