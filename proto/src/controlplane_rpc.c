/* SPDX-License-Identifier: Apache-2.0 */
/* Control-plane RPC requests and answers: one schema per message (controlplane_rpc.h). */
#include <string.h>

#include "space/controlplane_rpc.h"

const pr_schema pr_cp_empty_schema = {.name = "Empty", .fields = NULL, .nfields = 0};

/* ---- Join ---- */

#define R pr_cp_join
#define F_TOKEN PR_F_STRING(R, "token", token, true, PR_CP_TOKEN_FIELD_MAX)
#define F_NAME PR_F_STRING(R, "name", name, true, PR_CP_NAME_MAX)
#define F_CSR PR_F_STRING(R, "csr", csr, true, PR_CP_PEM_MAX)
static const pr_field join_worker_fields[] = {
        PR_F_STRING(R, "role", role, false, PR_CP_ROLE_MAX),
        F_TOKEN,
        F_NAME,
        F_CSR,
        PR_F_STRING(R, "address", address, true, PR_CP_ADDRESS_MAX),
        PR_F_STRING(R, "backend", backend, true, PR_CP_BACKEND_MAX),
        PR_F_STRING_MAP(R, "labels", labels, PR_CP_LABELS_MAX, PR_CP_LABEL_KEY_MAX, PR_CP_LABEL_VALUE_MAX),
};
static const pr_field join_dataplane_fields[] = {
        PR_F_STRING(R, "role", role, true, PR_CP_ROLE_MAX),
        F_TOKEN,
        F_NAME,
        F_CSR,
};
#undef F_TOKEN
#undef F_NAME
#undef F_CSR
#undef R
const pr_schema pr_cp_join_worker_schema = PR_SCHEMA("Join", join_worker_fields);
const pr_schema pr_cp_join_dataplane_schema = PR_SCHEMA("Join (dataplane)", join_dataplane_fields);

#define R pr_cp_join_worker_resp
static const pr_field join_worker_resp_fields[] = {
        PR_F_STRING(R, "worker_id", worker_id, true, PR_CP_ID_MAX),
        PR_F_STRING(R, "certificate", certificate, true, PR_CP_PEM_MAX),
        PR_F_STRING(R, "ca", ca, true, PR_CP_PEM_MAX),
        PR_F_INT(R, "heartbeat_ms", heartbeat_ms, true, PR_CP_HEARTBEAT_MS_MIN, PR_CP_HEARTBEAT_MS_MAX, 0),
};
#undef R
const pr_schema pr_cp_join_worker_resp_schema = PR_SCHEMA_OPEN("Join answer", join_worker_resp_fields);

#define R pr_cp_join_dataplane_resp
static const pr_field join_dataplane_resp_fields[] = {
        PR_F_STRING(R, "certificate", certificate, true, PR_CP_PEM_MAX),
        PR_F_STRING(R, "ca", ca, true, PR_CP_PEM_MAX),
        PR_F_STRING_ARRAY(R, "token_keys", token_keys, true, PR_CP_TOKEN_KEYS_MAX, PR_CP_PEM_MAX),
};
#undef R
const pr_schema pr_cp_join_dataplane_resp_schema =
        PR_SCHEMA_OPEN("Join answer (dataplane)", join_dataplane_resp_fields);

/* ---- Heartbeat ---- */

#define R pr_cp_resources
static const pr_field resources_fields[] = {
        PR_F_INT(R, "cpu_millis", cpu_millis, true, 0, PR_CP_RESOURCE_MAX, 0),
        PR_F_INT(R, "memory_mb", memory_mb, true, 0, PR_CP_RESOURCE_MAX, 0),
        PR_F_INT(R, "slots", slots, true, 0, PR_CP_RESOURCE_MAX, 0),
        /* optional: a worker that does not report its storage pool is not checked for disk */
        PR_F_INT(R, "disk_mb", disk_mb, false, 0, PR_CP_RESOURCE_MAX, -1),
};
#undef R
const pr_schema pr_cp_resources_schema = PR_SCHEMA("Resources", resources_fields);

#define R pr_cp_sandbox
static const pr_field sandbox_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_CP_OBJECT_NAME_MAX),
        PR_F_STRING(R, "state", state, true, PR_CP_STATE_MAX),
        PR_F_STRING(R, "template", template_name, true, PR_CP_OBJECT_NAME_MAX),
        PR_F_BOOL(R, "secrets_missing", secrets_missing, false),
        PR_F_JSON(R, "busy", busy, false),
        PR_F_INT(R, "stored_bytes", stored_bytes, false, 0, PR_CP_BYTES_MAX, 0),
};
#undef R
const pr_schema pr_cp_sandbox_schema = PR_SCHEMA("Sandbox", sandbox_fields);

#define R pr_cp_jobs
static const pr_field jobs_fields[] = {
        PR_F_INT(R, "threads", threads, true, 0, PR_CP_JOBS_MAX, 0),
        PR_F_INT(R, "running", running, true, 0, PR_CP_JOBS_MAX, 0),
        PR_F_INT(R, "queued", queued, true, 0, PR_CP_JOBS_MAX, 0),
};
#undef R
const pr_schema pr_cp_jobs_schema = PR_SCHEMA("Jobs", jobs_fields);

#define R pr_cp_heartbeat
static const pr_field heartbeat_fields[] = {
        PR_F_STRING(R, "address", address, true, PR_CP_ADDRESS_MAX),
        PR_F_STRING(R, "backend", backend, true, PR_CP_BACKEND_MAX),
        PR_F_STRING_MAP(R, "labels", labels, PR_CP_LABELS_MAX, PR_CP_LABEL_KEY_MAX, PR_CP_LABEL_VALUE_MAX),
        PR_F_OBJECT_REQ(R, "capacity", capacity, &pr_cp_resources_schema),
        PR_F_OBJECT_REQ(R, "used", used, &pr_cp_resources_schema),
        PR_F_OBJECT_OPT(R, "jobs", jobs, has_jobs, &pr_cp_jobs_schema),
        PR_F_STRING_ARRAY(R, "templates", templates, false, PR_CP_TEMPLATES_MAX, PR_CP_OBJECT_NAME_MAX),
        PR_F_INT_MAP(R, "artifacts", artifacts, false, PR_CP_TEMPLATES_MAX, PR_CP_OBJECT_NAME_MAX, 0, PR_CP_BYTES_MAX),
        PR_F_INT_MAP(R, "template_bytes", template_bytes, false, PR_CP_TEMPLATES_MAX, PR_CP_OBJECT_NAME_MAX, 0,
                     PR_CP_BYTES_MAX),
        PR_F_INT_MAP(R, "warm", warm, false, PR_CP_TEMPLATES_MAX, PR_CP_OBJECT_NAME_MAX, 0, PR_CP_WARM_MAX),
        PR_F_ARRAY(R, "sandboxes", sandboxes, false, PR_CP_SANDBOXES_MAX, &pr_cp_sandbox_schema),
        PR_F_BOOL(R, "artifact_store", artifact_store, false),
        PR_F_STRING_ARRAY(R, "backends", backends, false, 4, PR_CP_BACKEND_MAX),
};
#undef R
const pr_schema pr_cp_heartbeat_schema = PR_SCHEMA("Heartbeat", heartbeat_fields);

#define R pr_cp_heartbeat_resp
static const pr_field heartbeat_resp_fields[] = {
        PR_F_STRING(R, "worker_id", worker_id, true, PR_CP_ID_MAX),
        PR_F_STRING(R, "state", state, true, PR_CP_STATE_MAX),
        PR_F_STRING(R, "admin_state", admin_state, true, PR_CP_STATE_MAX),
        PR_F_INT(R, "heartbeat_ms", heartbeat_ms, true, PR_CP_HEARTBEAT_MS_MIN, PR_CP_HEARTBEAT_MS_MAX, 0),
};
#undef R
const pr_schema pr_cp_heartbeat_resp_schema = PR_SCHEMA_OPEN("Heartbeat answer", heartbeat_resp_fields);

/* ---- TokenKeys ---- */

static const pr_field token_keys_resp_fields[] = {
        PR_F_STRING_ARRAY(pr_cp_token_keys_resp, "token_keys", token_keys, true, PR_CP_TOKEN_KEYS_MAX, PR_CP_PEM_MAX),
};
const pr_schema pr_cp_token_keys_resp_schema = PR_SCHEMA_OPEN("TokenKeys answer", token_keys_resp_fields);

/* ---- RevokedKeys: strict both ways (the spec's compatibility rule) ---- */

static const pr_field revoked_req_fields[] = {
        PR_F_INT(pr_cp_revoked_req, "since_us", since_us, false, 0, INT64_MAX, 0),
        PR_F_BOOL(pr_cp_revoked_req, "templates", templates, false),
};
const pr_schema pr_cp_revoked_req_schema = PR_SCHEMA("RevokedKeys", revoked_req_fields);

static const pr_field revoked_entry_fields[] = {
        PR_F_STRING(pr_cp_revoked_entry, "id", id, true, PR_CP_REVOKED_ID_MAX),
        PR_F_INT(pr_cp_revoked_entry, "revoked_at_us", revoked_at_us, true, 0, INT64_MAX, 0),
};
const pr_schema pr_cp_revoked_entry_schema = PR_SCHEMA("Revoked", revoked_entry_fields);

#define R pr_cp_revoked_resp
static const pr_field revoked_resp_fields[] = {
        PR_F_ARRAY(R, "keys", keys, true, PR_CP_REVOKED_MAX, &pr_cp_revoked_entry_schema),
        PR_F_INT(R, "cursor_us", cursor_us, true, 0, INT64_MAX, 0),
        PR_F_BOOL_REQ(R, "more", more),
        PR_F_ARRAY(R, "templates", templates, false, PR_CP_REVOKED_MAX, &pr_cp_revoked_entry_schema),
};
#undef R
const pr_schema pr_cp_revoked_resp_schema = PR_SCHEMA("RevokedKeys answer", revoked_resp_fields);

/* ---- ResolveSandbox ---- */

static const pr_field resolve_sandbox_fields[] = {
        PR_F_STRING(pr_cp_resolve_sandbox, "sandbox_id", sandbox_id, true, PR_CP_SANDBOX_ID_MAX),
        PR_F_BOOL(pr_cp_resolve_sandbox, "wake", wake, false),
        PR_F_BOOL(pr_cp_resolve_sandbox, "anonymous", anonymous, false),
        PR_F_STRING(pr_cp_resolve_sandbox, "key_id", key_id, false, PR_CP_SANDBOX_ID_MAX),
};
const pr_schema pr_cp_resolve_sandbox_schema = PR_SCHEMA("ResolveSandbox", resolve_sandbox_fields);

#define R pr_cp_resolve_sandbox_resp
static const pr_field resolve_sandbox_resp_fields[] = {
        PR_F_STRING(R, "sandbox_id", sandbox_id, true, PR_CP_SANDBOX_ID_MAX),
        PR_F_STRING(R, "tenant_id", tenant_id, true, PR_CP_SANDBOX_ID_MAX),
        PR_F_STRING(R, "state", state, true, PR_CP_STATE_MAX),
        PR_F_STRING(R, "ingress", ingress, true, PR_CP_INGRESS_MAX),
        /* only while the sandbox is on a worker */
        PR_F_STRING(R, "worker", worker, false, PR_CP_ADDRESS_MAX),
        PR_F_STRING(R, "worker_name", worker_name, false, 63),
        PR_F_BOOL(R, "auto_resume", auto_resume, false),
        PR_F_BOOL(R, "waking", waking, false),
};
#undef R
const pr_schema pr_cp_resolve_sandbox_resp_schema =
        PR_SCHEMA_OPEN("ResolveSandbox answer", resolve_sandbox_resp_fields);

/* ---- DrainSelf ---- */

static const pr_field drain_self_fields[] = {
        PR_F_STRING(pr_cp_drain_self, "action", action, true, 16),
};
const pr_schema pr_cp_drain_self_schema = PR_SCHEMA("DrainSelf", drain_self_fields);

#define R pr_cp_drain_self_resp
static const pr_field drain_self_resp_fields[] = {
        PR_F_STRING(R, "worker_id", worker_id, true, PR_CP_SANDBOX_ID_MAX),
        PR_F_STRING(R, "state", state, true, PR_CP_STATE_MAX),
        PR_F_STRING(R, "admin_state", admin_state, true, PR_CP_STATE_MAX),
        PR_F_BOOL(R, "by_self", by_self, false),
        PR_F_INT(R, "sandboxes", sandboxes, true, 0, INT64_C(1) << 40, 0),
};
#undef R
const pr_schema pr_cp_drain_self_resp_schema = PR_SCHEMA_OPEN("DrainSelf answer", drain_self_resp_fields);

#define M(name, variant, req, reqtype, resp, resptype) \
        { \
                name, variant, &req, sizeof(reqtype), &resp, sizeof(resptype) \
        }
const pr_cp_method pr_controlplane_methods[] = {
        M("Join", NULL, pr_cp_join_worker_schema, pr_cp_join, pr_cp_join_worker_resp_schema, pr_cp_join_worker_resp),
        M("Join", "dataplane", pr_cp_join_dataplane_schema, pr_cp_join, pr_cp_join_dataplane_resp_schema,
          pr_cp_join_dataplane_resp),
        M("Heartbeat", NULL, pr_cp_heartbeat_schema, pr_cp_heartbeat, pr_cp_heartbeat_resp_schema,
          pr_cp_heartbeat_resp),
        M("TokenKeys", NULL, pr_cp_empty_schema, pr_cp_empty, pr_cp_token_keys_resp_schema, pr_cp_token_keys_resp),
        M("RevokedKeys", NULL, pr_cp_revoked_req_schema, pr_cp_revoked_req, pr_cp_revoked_resp_schema,
          pr_cp_revoked_resp),
        M("ResolveSandbox", NULL, pr_cp_resolve_sandbox_schema, pr_cp_resolve_sandbox,
          pr_cp_resolve_sandbox_resp_schema, pr_cp_resolve_sandbox_resp),
        M("DrainSelf", NULL, pr_cp_drain_self_schema, pr_cp_drain_self, pr_cp_drain_self_resp_schema,
          pr_cp_drain_self_resp),
};
#undef M
const size_t pr_controlplane_nmethods = sizeof(pr_controlplane_methods) / sizeof(pr_controlplane_methods[0]);

const pr_cp_method *pr_controlplane_method(const char *name, const char *variant)
{
        for (size_t i = 0; i < pr_controlplane_nmethods; i++) {
                const pr_cp_method *m = &pr_controlplane_methods[i];
                if (strcmp(m->name, name) != 0)
                        continue;
                if (variant ? m->variant && strcmp(m->variant, variant) == 0 : !m->variant)
                        return m;
        }
        return NULL;
}
