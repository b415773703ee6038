/* SPDX-License-Identifier: Apache-2.0 */
#include "api/api_internal.h"
#include "api/request_session.h"
#include "api/routes.h"

#define SMALL (64 * 1024)

const cp_route cp_api_routes[] = {
        {"GET", "/healthz", cp__h_healthz, CP_AUTH_NONE, 0},
        {"GET", "/readyz", cp__h_readyz, CP_AUTH_NONE, 0},
        {"GET", "/metrics", cp__h_metrics, CP_AUTH_NONE, 0},
        {"GET", "/v1/openapi.json", cp__h_openapi, CP_AUTH_NONE, 0},

        {"POST", "/v1/sandboxes", cp__h_sandbox_create, CP_AUTH_TENANT, 0},
        {"GET", "/v1/sandboxes", cp__h_sandbox_list, CP_AUTH_TENANT, 0},
        {"GET", "/v1/sandboxes/{id}", cp__h_sandbox_get, CP_AUTH_TENANT, 0},
        {"GET", "/v1/sandboxes/{id}/stats", cp__h_sandbox_stats, CP_AUTH_TENANT, 0},
        {"DELETE", "/v1/sandboxes/{id}", cp__h_sandbox_delete, CP_AUTH_TENANT, 0},
        {"POST", "/v1/sandboxes/{id}/pause", cp__h_sandbox_pause, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/resume", cp__h_sandbox_resume, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/suspend", cp__h_sandbox_suspend, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/restore", cp__h_sandbox_restore, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/wake", cp__h_sandbox_wake, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/stop", cp__h_sandbox_stop, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/start", cp__h_sandbox_start, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/timeout", cp__h_sandbox_timeout, CP_AUTH_TENANT, SMALL},
        {"PUT", "/v1/sandboxes/{id}/egress", cp__h_sandbox_egress, CP_AUTH_TENANT, 0},
        {"GET", "/v1/sandboxes/{id}/egress/log", cp__h_sandbox_egress_log, CP_AUTH_TENANT, 0},
        {"PUT", "/v1/sandboxes/{id}/ingress", cp__h_sandbox_ingress, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/ingress/tokens", cp__h_sandbox_ingress_token, CP_AUTH_TENANT, SMALL},

        {"POST", "/v1/sandboxes/{id}/sessions", cp__h_session_create, CP_AUTH_TENANT, CP_SESSION_MAX_BODY},
        {"GET", "/v1/sandboxes/{id}/sessions", cp__h_session_list, CP_AUTH_TENANT, 0},
        {"GET", "/v1/sessions/{id}", cp__h_session_get, CP_AUTH_TENANT, 0},
        {"POST", "/v1/sessions/{id}/signal", cp__h_session_signal, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sessions/{id}/kill", cp__h_session_kill, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sessions/{id}/token", cp__h_session_token, CP_AUTH_TENANT, SMALL},

        {"GET", "/v1/sandboxes/{id}/files/stat", cp__h_files_stat, CP_AUTH_TENANT, 0},
        {"GET", "/v1/sandboxes/{id}/files/list", cp__h_files_list, CP_AUTH_TENANT, 0},
        {"POST", "/v1/sandboxes/{id}/files/mkdir", cp__h_files_mkdir, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/files/move", cp__h_files_move, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/files/remove", cp__h_files_remove, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/sandboxes/{id}/files/token", cp__h_files_token, CP_AUTH_TENANT, SMALL},

        {"GET", "/v1/operations/{id}", cp__h_operation_get, CP_AUTH_TENANT, 0},

        {"POST", "/v1/templates", cp__h_template_create, CP_AUTH_TENANT, SMALL},
        {"GET", "/v1/templates", cp__h_template_list, CP_AUTH_TENANT, 0},
        {"GET", "/v1/templates/{name}", cp__h_template_get, CP_AUTH_TENANT, 0},
        {"DELETE", "/v1/templates/{name}", cp__h_template_delete, CP_AUTH_TENANT, 0},
        {"POST", "/v1/templates/{name}/warm", cp__h_template_warm, CP_AUTH_TENANT, SMALL},
        {"POST", "/v1/templates/{name}/upload", cp__h_template_upload, CP_AUTH_TENANT, SMALL},

        {"POST", "/v1/egress-profiles", cp__h_egress_profile_create, CP_AUTH_TENANT, 0},
        {"GET", "/v1/egress-profiles", cp__h_egress_profile_list, CP_AUTH_TENANT, 0},
        {"GET", "/v1/egress-profiles/{name}", cp__h_egress_profile_get, CP_AUTH_TENANT, 0},
        {"PUT", "/v1/egress-profiles/{name}", cp__h_egress_profile_update, CP_AUTH_TENANT, 0},
        {"DELETE", "/v1/egress-profiles/{name}", cp__h_egress_profile_delete, CP_AUTH_TENANT, 0},

        {"POST", "/v1/secrets", cp__h_secret_create, CP_AUTH_TENANT, SMALL},
        {"GET", "/v1/secrets", cp__h_secret_list, CP_AUTH_TENANT, 0},
        {"GET", "/v1/secrets/{name}", cp__h_secret_get, CP_AUTH_TENANT, 0},
        {"DELETE", "/v1/secrets/{name}", cp__h_secret_delete, CP_AUTH_TENANT, 0},
        {"GET", "/v1/secrets/{name}/usage", cp__h_secret_usage, CP_AUTH_TENANT, 0},
        {"POST", "/v1/admin/secrets/rewrap", cp__h_secrets_rewrap, CP_AUTH_ADMIN, SMALL},

        {"GET", "/v1/workers", cp__h_worker_list, CP_AUTH_ADMIN, 0},
        {"GET", "/v1/workers/{id}", cp__h_worker_get, CP_AUTH_ADMIN, 0},
        {"POST", "/v1/workers/{id}/cordon", cp__h_worker_cordon, CP_AUTH_ADMIN, SMALL},
        {"POST", "/v1/workers/{id}/uncordon", cp__h_worker_uncordon, CP_AUTH_ADMIN, SMALL},
        {"POST", "/v1/workers/{id}/drain", cp__h_worker_drain, CP_AUTH_ADMIN, SMALL},
        {"POST", "/v1/workers/{id}/unquarantine", cp__h_worker_unquarantine, CP_AUTH_ADMIN, SMALL},
        {"POST", "/v1/workers/{id}/allow-rejoin", cp__h_worker_allow_rejoin, CP_AUTH_ADMIN, SMALL},
        {"POST", "/v1/join-tokens", cp__h_join_token_create, CP_AUTH_ADMIN, SMALL},
        {"GET", "/v1/join-tokens", cp__h_join_token_list, CP_AUTH_ADMIN, 0},
        {"DELETE", "/v1/join-tokens/{id}", cp__h_join_token_delete, CP_AUTH_ADMIN, 0},
        {"GET", "/v1/token-keys", cp__h_token_keys_list, CP_AUTH_ADMIN, 0},
        {"POST", "/v1/token-keys/rotate", cp__h_token_keys_rotate, CP_AUTH_ADMIN, SMALL},

        {"POST", "/v1/tenants", cp__h_tenant_create, CP_AUTH_ADMIN, SMALL},
        {"GET", "/v1/tenants", cp__h_tenant_list, CP_AUTH_ADMIN, 0},
        {"DELETE", "/v1/tenants/{id}", cp__h_tenant_delete, CP_AUTH_ADMIN, 0},
        {"GET", "/v1/tenants/{id}/usage", cp__h_tenant_usage, CP_AUTH_TENANT, 0},
        {"PUT", "/v1/tenants/{id}/quotas", cp__h_tenant_quotas, CP_AUTH_ADMIN, SMALL},
        {"POST", "/v1/keys", cp__h_key_create, CP_AUTH_TENANT, SMALL},
        {"GET", "/v1/keys", cp__h_key_list, CP_AUTH_TENANT, 0},
        {"DELETE", "/v1/keys/{id}", cp__h_key_delete, CP_AUTH_TENANT, 0},
        {"GET", "/v1/audit", cp__h_audit_list, CP_AUTH_TENANT, 0},
        {NULL, NULL, NULL, CP_AUTH_NONE, 0},
};
