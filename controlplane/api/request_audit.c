/* SPDX-License-Identifier: Apache-2.0 */
/* The audit log's query and cursor, and the actions of mutating routes (request_audit.h). */
#include "api/request_audit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/request.h"
#include "space/buf.h"
#include "space/cleanup.h"

#define CURSOR_VERSION "a1"

/* A decimal without sign or leading zeros, 1..INT64_MAX, consuming s exactly (n bytes). */
static bool positive_decimal(const char *s, size_t n, uint64_t *ret)
{
        if (n == 0 || n > 19 || s[0] == '0')
                return false;
        uint64_t v = 0;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                v = v * 10 + (uint64_t)(s[i] - '0');
        }
        if (v > (uint64_t)INT64_MAX)
                return false;
        *ret = v;
        return true;
}

int cp_audit_cursor_encode(const cp_audit_pos *pos, char *out, size_t outlen, sp_error **err)
{
        if (outlen)
                out[0] = '\0';
        if (pos->xid < 1 || pos->xid > (uint64_t)INT64_MAX || pos->id < 1)
                return sp_error_set(err, SP_E_INVALID, "audit cursor position out of range");
        char raw[64];
        snprintf(raw, sizeof(raw), CURSOR_VERSION ".%" PRIu64 ".%" PRId64, pos->xid, pos->id);
        _cleanup_buf_ sp_buf enc = SP_BUF_INIT;
        if (sp_base64_encode(&enc, raw, strlen(raw), 1, err) < 0)
                return -SP_E_INVALID;
        if (enc.len >= outlen)
                return sp_error_set(err, SP_E_INVALID, "cursor buffer of %zu bytes is too small", outlen);
        memcpy(out, enc.data, enc.len + 1);
        return 0;
}

int cp_audit_cursor_decode(const char *cursor, cp_audit_pos *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        size_t n = cursor ? strnlen(cursor, CP_AUDIT_CURSOR_MAX + 1) : 0;
        if (n == 0 || n > CP_AUDIT_CURSOR_MAX || memchr(cursor, '=', n))
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT;
        if (sp_base64_decode(&raw, cursor, n, 1, NULL) < 0 || raw.len < 6 || memchr(raw.data, '\0', raw.len) ||
            sp_buf_append(&raw, "", 1, NULL) < 0)
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        const char *s = raw.data;
        const char *dot = strchr(s + 3, '.');
        uint64_t xid = 0, id = 0;
        if (strncmp(s, CURSOR_VERSION ".", 3) != 0 || !dot || !positive_decimal(s + 3, (size_t)(dot - s - 3), &xid) ||
            !positive_decimal(dot + 1, strlen(dot + 1), &id))
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        /* One spelling per position: the decoder accepts what the encoder writes, and only that. */
        cp_audit_pos pos = {xid, (int64_t)id};
        char again[CP_AUDIT_CURSOR_MAX + 1];
        if (cp_audit_cursor_encode(&pos, again, sizeof(again), NULL) < 0 || strcmp(again, cursor) != 0)
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        *ret = pos;
        return 0;
}

static bool present(const char *s)
{
        return s && s[0];
}

static bool charset(const char *s, const char *allowed)
{
        return strspn(s, allowed) == strlen(s);
}

/* An id of prefix (the system tenant's "ten_system" too, for "ten"). */
static bool id_ok(const char *s, const char *prefix)
{
        return sp_id_valid(s, prefix) || (strcmp(prefix, "ten") == 0 && strcmp(s, "ten_system") == 0);
}

static bool printable(const char *s)
{
        for (; *s; s++)
                if ((unsigned char)*s < 0x21 || (unsigned char)*s > 0x7e)
                        return false;
        return true;
}

int cp_req_audit_query(const cp_audit_params *p, cp_audit_query *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        cp_audit_query q = {0};
        if (present(p->tenant_id)) {
                if (strlen(p->tenant_id) >= SP_ID_MAX || !id_ok(p->tenant_id, "ten"))
                        return sp_error_set(err, SP_E_INVALID, "tenant_id is not a tenant id");
                snprintf(q.tenant_id, sizeof(q.tenant_id), "%s", p->tenant_id);
        }
        if (present(p->key_id)) {
                if (strlen(p->key_id) >= SP_ID_MAX || !id_ok(p->key_id, "key"))
                        return sp_error_set(err, SP_E_INVALID, "key_id is not an API key id");
                snprintf(q.key_id, sizeof(q.key_id), "%s", p->key_id);
        }
        if (present(p->object_type)) {
                if (strlen(p->object_type) >= sizeof(q.object_type) ||
                    !charset(p->object_type, "abcdefghijklmnopqrstuvwxyz_"))
                        return sp_error_set(err, SP_E_INVALID, "object_type must be 1-32 of [a-z_]");
                snprintf(q.object_type, sizeof(q.object_type), "%s", p->object_type);
        }
        if (present(p->object_id)) {
                if (strlen(p->object_id) > CP_AUDIT_OBJECT_MAX || !printable(p->object_id))
                        return sp_error_set(err, SP_E_INVALID, "object_id must be 1-%d printable characters",
                                            CP_AUDIT_OBJECT_MAX);
                snprintf(q.object_id, sizeof(q.object_id), "%s", p->object_id);
        }
        if (present(p->action)) {
                size_t n = strlen(p->action);
                if (n > CP_AUDIT_ACTION_MAX || !charset(p->action, "abcdefghijklmnopqrstuvwxyz_.") ||
                    p->action[0] == '.' || strstr(p->action, ".."))
                        return sp_error_set(err, SP_E_INVALID,
                                            "action must be an action (sandbox.create) or a prefix ending in '.' "
                                            "(sandbox.), at most %d of [a-z_.]",
                                            CP_AUDIT_ACTION_MAX);
                snprintf(q.action, sizeof(q.action), "%s", p->action);
                q.action_prefix = p->action[n - 1] == '.';
        }
        if (present(p->outcome)) {
                if (strcmp(p->outcome, "ok") != 0 && strcmp(p->outcome, "denied") != 0 &&
                    strcmp(p->outcome, "failed") != 0)
                        return sp_error_set(err, SP_E_INVALID, "outcome must be ok, denied or failed");
                snprintf(q.outcome, sizeof(q.outcome), "%s", p->outcome);
        }
        if (present(p->since)) {
                if (!cp_req_timestamp_valid(p->since))
                        return sp_error_set(err, SP_E_INVALID,
                                            "since must be an RFC 3339 timestamp with its zone (2026-01-02T03:04:05Z)");
                snprintf(q.since, sizeof(q.since), "%s", p->since);
        }
        if (present(p->until)) {
                if (!cp_req_timestamp_valid(p->until))
                        return sp_error_set(err, SP_E_INVALID,
                                            "until must be an RFC 3339 timestamp with its zone (2026-01-02T03:04:05Z)");
                snprintf(q.until, sizeof(q.until), "%s", p->until);
        }
        if (cp_req_count("limit", p->limit, CP_AUDIT_LIMIT_DEFAULT, CP_AUDIT_LIMIT_MAX, &q.limit, err) < 0)
                return -SP_E_INVALID;
        if (present(p->cursor)) {
                if (cp_audit_cursor_decode(p->cursor, &q.cursor, err) < 0)
                        return -SP_E_INVALID;
                q.has_cursor = true;
        }
        *ret = q;
        return 0;
}

/* What each mutating route is audited as: the action its handler records on success. */
static const struct {
        const char *method, *pattern, *action;
} route_actions[] = {
        {"POST", "/v1/sandboxes", "sandbox.create"},
        {"DELETE", "/v1/sandboxes/{id}", "sandbox.delete"},
        {"POST", "/v1/sandboxes/{id}/pause", "sandbox.pause"},
        {"POST", "/v1/sandboxes/{id}/resume", "sandbox.resume"},
        {"POST", "/v1/sandboxes/{id}/suspend", "sandbox.suspend"},
        {"POST", "/v1/sandboxes/{id}/restore", "sandbox.restore"},
        {"POST", "/v1/sandboxes/{id}/wake", "sandbox.wake"},
        {"POST", "/v1/sandboxes/{id}/stop", "sandbox.stop"},
        {"POST", "/v1/sandboxes/{id}/start", "sandbox.start"},
        {"POST", "/v1/sandboxes/{id}/timeout", "sandbox.timeout"},
        {"PUT", "/v1/sandboxes/{id}/egress", "sandbox.egress"},
        {"PUT", "/v1/sandboxes/{id}/ingress", "sandbox.ingress"},
        {"POST", "/v1/sandboxes/{id}/ingress/tokens", "sandbox.ingress_token"},
        {"POST", "/v1/sandboxes/{id}/sessions", "session.create"},
        {"POST", "/v1/sessions/{id}/signal", "session.signal"},
        {"POST", "/v1/sessions/{id}/kill", "session.kill"},
        {"POST", "/v1/sessions/{id}/token", "session.token"},
        {"POST", "/v1/sandboxes/{id}/files/mkdir", "files.mkdir"},
        {"POST", "/v1/sandboxes/{id}/files/move", "files.move"},
        {"POST", "/v1/sandboxes/{id}/files/remove", "files.remove"},
        {"POST", "/v1/sandboxes/{id}/files/token", "files.token"},
        {"POST", "/v1/templates", "template.create"},
        {"DELETE", "/v1/templates/{name}", "template.delete"},
        {"POST", "/v1/templates/{name}/warm", "template.warm"},
        {"POST", "/v1/templates/{name}/upload", "template.upload_token"},
        {"POST", "/v1/egress-profiles", "egress_profile.create"},
        {"PUT", "/v1/egress-profiles/{name}", "egress_profile.update"},
        {"DELETE", "/v1/egress-profiles/{name}", "egress_profile.delete"},
        {"POST", "/v1/secrets", "secret.create"},
        {"DELETE", "/v1/secrets/{name}", "secret.delete"},
        {"POST", "/v1/admin/secrets/rewrap", "secret.rewrap"},
        {"POST", "/v1/workers/{id}/cordon", "worker.cordon"},
        {"POST", "/v1/workers/{id}/uncordon", "worker.uncordon"},
        {"POST", "/v1/workers/{id}/drain", "worker.drain"},
        {"POST", "/v1/workers/{id}/unquarantine", "worker.unquarantine"},
        {"POST", "/v1/workers/{id}/allow-rejoin", "worker.allow_rejoin"},
        {"POST", "/v1/join-tokens", "join_token.create"},
        {"DELETE", "/v1/join-tokens/{id}", "join_token.revoke"},
        {"POST", "/v1/token-keys/rotate", "token_key.rotate"},
        {"POST", "/v1/tenants", "tenant.create"},
        {"DELETE", "/v1/tenants/{id}", "tenant.delete"},
        {"PUT", "/v1/tenants/{id}/quotas", "tenant.quotas"},
        {"POST", "/v1/keys", "key.create"},
        {"DELETE", "/v1/keys/{id}", "key.revoke"},
};

const char *cp_audit_route_action(const char *method, const char *pattern)
{
        for (size_t i = 0; i < sizeof(route_actions) / sizeof(route_actions[0]); i++)
                if (strcmp(route_actions[i].method, method) == 0 && strcmp(route_actions[i].pattern, pattern) == 0)
                        return route_actions[i].action;
        return NULL;
}
