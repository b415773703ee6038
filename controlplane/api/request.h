/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decoding and validation of public API request bodies and query parameters.
 *
 * Pure functions over untrusted bytes (a fuzz target drives each): strict
 * JSON (space/json.h), unknown fields refused, every size, count and number
 * bounded, defaults filled in. On failure they return < 0 with an
 * SP_E_INVALID error whose message names the offending field (e.g.
 * "resources.memory_mb must be between 16 and 262144", "unknown field
 * 'resources.gpus'", "template is required") and leave *ret zeroed; on
 * success the caller frees *ret with the matching _free() (types without one
 * own nothing). Thread-safe.
 *
 * Bodies: a JSON object; an empty body (0 bytes) counts as {}; a JSON null
 * counts as an absent field; integers must be JSON integers (not 1.0 or
 * 1e3); a body over 1 MiB fails with SP_E_TOO_LARGE. A key repeated in one
 * object keeps its last value (json-c). Names (template, tenant, key):
 * 1..CP_NAME_LEN of [A-Za-z0-9._-] starting with a letter or digit. Map keys:
 * env [A-Za-z_][A-Za-z0-9_]*; metadata and labels [A-Za-z0-9._:/-] starting
 * with a letter or digit; 1..CP_MAX_MAP_KEY bytes; values any string of at
 * most CP_MAX_MAP_VALUE bytes without NUL.
 */
#ifndef CP_API_REQUEST_H
#define CP_API_REQUEST_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy/profile.h"
#include "policy/secret.h"
#include "space/error.h"
#include "store/quotas.h"
#include "space/worker_rpc.h"

#define CP_NAME_LEN 128 /* template, tenant, key and label names */
#define CP_MAX_MAP_ITEMS 64 /* env, metadata, labels */
#define CP_MAX_MAP_KEY 128
#define CP_MAX_MAP_VALUE 4096
#define CP_MAX_TIMEOUT_S (30 * 86400) /* 30 days */
#define CP_DEFAULT_IDLE_TIMEOUT_S (6 * 3600)

/* The body as a JSON object (a new reference in *ret): at most 1 MiB
 * (SP_E_TOO_LARGE), strict JSON, an object; an empty body is {}. */
int cp_req_body_object(const char *body, size_t len, json_object **ret, sp_error **err);
/* The same with a bound of max bytes instead of 1 MiB (a route that takes
 * more, as its HTTP route allows). */
int cp_req_body_object_max(const char *body, size_t len, size_t max, json_object **ret, sp_error **err);

/* Resources of a sandbox; zero fields of a request are given the defaults. */
typedef struct cp_resources {
        int64_t cpu_millis; /* [1000], 10..64000 */
        int64_t memory_mb; /* [512], 16..262144 */
        int64_t disk_mb; /* [2048], 16..1048576 */
        int64_t pids; /* [1024], 16..65536 */
} cp_resources;

#define CP_SECRET_NAME_MAX 63

/* A secret the sandbox is given: its name, and the environment variable
 * that holds its placeholder ("": the secret's own env). */
typedef struct cp_sandbox_secret_ref {
        char name[CP_SECRET_NAME_MAX + 1];
        char env[CP_MAX_MAP_KEY + 1];
} cp_sandbox_secret_ref;

/* POST /v1/sandboxes
 * {"template":"base", "resources":{...}, "env":{}, "metadata":{}, "labels":{},
 *  "backend":"jail", "timeout_s":3600, "end_action":"kill"|"suspend",
 *  "idle_timeout_s":21600, "egress":"none", "secrets":["openai"],
 *  "ingress":"token"|"public", "auto_resume":false} — only "template" is
 * required. auto_resume: a request for one of its ports wakes the sandbox
 * when it is paused or suspended (docs/ingress.md).
 * egress names a profile (a built-in or the tenant's), or is a whole profile
 * of this sandbox's own (an object, gateway/policy/profile.h; its name
 * defaults to "inline"). secrets names the tenant's secrets the sandbox is
 * given (docs/secrets.md): an array of names (each in the variable the
 * secret names), or an object from environment variable to name; at most
 * GW_SECRETS_MAX, each once, and no variable twice or also in env. */
typedef struct cp_sandbox_create_req {
        char template_name[CP_NAME_LEN + 1]; /* [A-Za-z0-9._-], 1..128 */
        cp_resources resources;
        json_object *env; /* string map, never NULL (empty object) */
        json_object *metadata; /* string map, never NULL */
        json_object *labels; /* placement selector, string map, never NULL */
        char backend[16]; /* "" (any), "jail", "qemu", "firecracker" */
        int64_t timeout_s; /* 0: none; else 1..CP_MAX_TIMEOUT_S, sets end_at */
        char end_action[16]; /* "kill" (default) or "suspend" */
        int64_t idle_timeout_s; /* -1: cluster default (field absent); 0: never; else 60..CP_MAX_TIMEOUT_S */
        char egress[64]; /* "" (the default: none) or a profile name [a-z0-9-] */
        gw_profile *egress_inline; /* or a profile of its own (private addresses allowed: the handler checks) */
        cp_sandbox_secret_ref secrets[GW_SECRETS_MAX];
        size_t nsecrets;
        char ingress[8]; /* "token" (the default) or "public" */
        bool auto_resume; /* false unless given */
} cp_sandbox_create_req;
int cp_req_sandbox_create(const char *body, size_t len, cp_sandbox_create_req *ret, sp_error **err);
void cp_sandbox_create_req_free(cp_sandbox_create_req *r);

/* POST /v1/egress-profiles and PUT /v1/egress-profiles/{name}: a profile
 * (gateway/policy/profile.h), private addresses allowed (the handler checks
 * who may). With path_name (PUT), "name" may be left out and must be it when
 * given. Errors name the field (SP_E_INVALID). */
int cp_req_egress_profile(const char *body, size_t len, const char *path_name, gw_profile **ret, sp_error **err);

/* A secret's name: 1..CP_SECRET_NAME_MAX of a-z, 0-9, '-' and '_', starting
 * with a letter (the names egress profiles grant). */
bool cp_req_secret_name_valid(const char *s);

/* POST /v1/secrets
 * {"name":"openai", "value":"...", "hosts":["api.openai.com"],
 *  "inject":{"header":"Authorization","format":"Bearer {{secret}}"} | {"basic":{"username":"x"}},
 *  "env":"OPENAI_API_KEY", "rate_per_min":60, "expires_at":"2030-01-01T00:00:00Z"}
 * name, value, hosts and inject are required; hosts and inject are checked
 * by the gateway's parser (gw_secret_check_spec), the value by
 * gw_secret_check_value (no message ever quotes it). env defaults to the
 * name uppercased with '-' as '_'; rate_per_min 0 (no limit) to 1000000;
 * expires_at RFC 3339 with a zone (Z or an offset), absent for never (the
 * handler refuses one in the past). The value is a copy the request owns:
 * _free wipes it, and the decoder wipes its JSON text. */
typedef struct cp_secret_create_req {
        char name[CP_SECRET_NAME_MAX + 1];
        char env[CP_MAX_MAP_KEY + 1];
        json_object *hosts; /* in normal form (lowercase, no trailing dot) */
        json_object *inject; /* as given */
        int64_t rate_per_min;
        char expires_at[40]; /* "" for never */
        char *value; /* NUL-terminated */
        size_t value_len;
} cp_secret_create_req;
int cp_req_secret_create(const char *body, size_t len, cp_secret_create_req *ret, sp_error **err);
void cp_secret_create_req_free(cp_secret_create_req *r);

/* POST /v1/admin/secrets/rewrap {"max": N}: at most N data keys (1..1000000
 * [10000]) rewrapped by this call. */
int cp_req_secrets_rewrap(const char *body, size_t len, int64_t *ret_max, sp_error **err);

/* PUT /v1/sandboxes/{id}/egress {"egress": NAME | PROFILE}: a name (into
 * name) or a profile of the sandbox's own (*ret_inline). */
int cp_req_sandbox_egress(const char *body, size_t len, char name[static 64], gw_profile **ret_inline, sp_error **err);

/* GET /v1/sandboxes/{id}/egress/log ?limit=1..1000 [100] &decision=allowed|
 * refused|would-refuse &kind=dns|tcp|packet|secret &before=TIME_US &after=TIME_US
 * (not both): the worker's GetEgressLog, but for its id. */
int cp_req_egress_log_query(const char *limit, const char *decision, const char *kind, const char *before,
                            const char *after, pr_wk_get_egress_log *ret, sp_error **err);

/* PUT /v1/sandboxes/{id}/ingress {"mode":"token"|"public", "auto_resume":bool}
 * (at least one): who may reach the sandbox's ports through the data plane,
 * and whether such a request wakes it. What is left out stays as it is.
 * On an error, *ret is all zeros. */
typedef struct cp_sandbox_ingress_req {
        char mode[8]; /* "" when absent */
        int auto_resume; /* -1 when absent, else 0 or 1 */
} cp_sandbox_ingress_req;
int cp_req_sandbox_ingress(const char *body, size_t len, cp_sandbox_ingress_req *ret, sp_error **err);

/* POST /v1/sandboxes/{id}/ingress/tokens {"ttl_s":N}: the token's lifetime,
 * CP_INGRESS_TOKEN_TTL_MIN_S..CP_INGRESS_TOKEN_TTL_MAX_S, or
 * CP_INGRESS_TOKEN_TTL_DEFAULT_S when absent. */
#define CP_INGRESS_TOKEN_TTL_MIN_S 60
#define CP_INGRESS_TOKEN_TTL_MAX_S 86400
#define CP_INGRESS_TOKEN_TTL_DEFAULT_S 3600
int cp_req_ingress_token(const char *body, size_t len, int64_t *ret_ttl_s, sp_error **err);

/* POST /v1/sandboxes/{id}/timeout {"timeout_s":N, "end_action":"kill"|"suspend"}
 * timeout_s 0 clears the timeout; end_action keeps the current one when absent (""). */
typedef struct cp_timeout_req {
        int64_t timeout_s;
        char end_action[16];
} cp_timeout_req;
int cp_req_timeout(const char *body, size_t len, cp_timeout_req *ret, sp_error **err);

/* POST /v1/templates {"name":"py", "source":"dir"|"tar"|"oci"|"debootstrap"|"upload",
 *  "path":"/srv/images/py.tar.zst", "suite":"bookworm", "mirror":"http://...", "warm":2,
 *  "tenant_id":"ten_..."}
 * path is required for dir/tar/oci (absolute, on the worker hosts, at most
 * 4095 bytes, no "." or ".." or empty segments, no control characters), suite
 * ([a-z0-9.-], 1..64) for debootstrap, mirror (http:// or https://, at most
 * 1024 bytes) optional for debootstrap, and with it "packages" (1..128 Debian
 * package names, installed with the base system) and "user" (a login user the
 * build makes: [a-z_][a-z0-9_-]*, at most 32, not root); a field of the other kind of source is
 * refused. Source upload (the archive comes later, through the data plane)
 * takes "format" ("tar" or "oci", required) and no path, suite or mirror;
 * format is refused with the other sources. warm is the warm-pool size per worker (0..64) [0]. tenant_id
 * (admins only: the handler checks) makes the template that tenant's; ""
 * when absent. cp_req_template_host_path() says whether the source names a
 * location on the workers' hosts (admins only, too). */
typedef struct cp_template_create_req {
        char name[CP_NAME_LEN + 1];
        char source[16];
        char format[8]; /* upload: "tar" or "oci"; "" otherwise */
        char tenant_id[32];
        char *path; /* NULL when absent */
        char *suite;
        char *mirror;
        char *packages; /* debootstrap: the names, joined with ',' */
        char *user; /* debootstrap: a login user the build makes */
        int64_t warm;
} cp_template_create_req;
int cp_req_template_create(const char *body, size_t len, cp_template_create_req *ret, sp_error **err);
void cp_template_create_req_free(cp_template_create_req *r);
/* Whether r's source reads a path on the workers' hosts (dir, tar, oci). */
bool cp_req_template_host_path(const cp_template_create_req *r);
/* Whether s is a debootstrap mirror the workers accept: http:// or https://,
 * a host, printable ASCII without spaces. */
bool cp_req_mirror_valid(const char *s);

/* POST /v1/templates/{name}/warm {"warm":N} (0..64, required) */
int cp_req_warm(const char *body, size_t len, int64_t *ret, sp_error **err);

/* POST /v1/tenants {"name":"acme"} and POST /v1/keys {"name":"ci", "admin":false, "tenant_id":"ten_..."}
 * (tenant_id only for admins creating a key in another tenant; "" when absent). */
typedef struct cp_named_req {
        char name[CP_NAME_LEN + 1];
        bool admin;
        char tenant_id[32];
} cp_named_req;
int cp_req_tenant_create(const char *body, size_t len, cp_named_req *ret, sp_error **err);
int cp_req_key_create(const char *body, size_t len, cp_named_req *ret, sp_error **err);

/* POST /v1/join-tokens {"role":"worker", "description":"...", "ttl_s":3600, "uses":1}
 * role "worker" or "dataplane" ["worker"]: who may join with it;
 * description [""] up to CP_NAME_LEN bytes without control characters;
 * ttl_s 60..30 days [3600]; uses 0 (unlimited until expiry) or 1..1000 [1]. */
typedef struct cp_join_token_req {
        const char *role; /* static */
        char description[CP_NAME_LEN + 1];
        int64_t ttl_s;
        int64_t uses;
} cp_join_token_req;
int cp_req_join_token(const char *body, size_t len, cp_join_token_req *ret, sp_error **err);

/* PUT /v1/tenants/{id}/quotas: {"<quota>": limit, ...} for one or more of
 * cp_quota_names (store/quotas.h), each limit an integer 0..CP_QUOTA_MAX,
 * -1 (no limit) or null (the cluster's default again). For each quota i
 * given, set[i] is true and limit[i] its limit, or CP_QUOTA_DEFAULT for null. */
#define CP_QUOTA_DEFAULT (-2)
typedef struct cp_quotas_req {
        bool set[CP_QUOTA_COUNT];
        int64_t limit[CP_QUOTA_COUNT];
} cp_quotas_req;
int cp_req_quotas(const char *body, size_t len, cp_quotas_req *ret, sp_error **err);

/* Query of GET /v1/sandboxes: ?state=running&template=base&metadata.k=v&limit=50&cursor=...
 * Give the raw values (NULL when absent; an empty value counts as absent).
 * The ?metadata.KEY=VALUE filters are not decoded here: the caller gathers
 * them (at most 8; keys as for metadata maps, values at most
 * CP_MAX_MAP_VALUE bytes). */
typedef struct cp_list_query {
        char state[16]; /* "" or one of the sandbox states */
        char template_name[CP_NAME_LEN + 1];
        int64_t limit; /* 1..1000 [100] */
        bool has_cursor;
        char cursor_created_at[40]; /* decoded cursor: RFC 3339 timestamp with microseconds */
        char cursor_id[32];
} cp_list_query;
int cp_req_list_query(const char *state, const char *template_name, const char *limit, const char *cursor,
                      cp_list_query *ret, sp_error **err);

/* Cursors are opaque to clients: base64url (no padding) of "<created_at>|<id>",
 * at most 128 characters. created_at looks like a timestamp
 * ("YYYY-MM-DD[T ]HH:MM:SS[.frac][Z|+HH[:MM]]", under 40 bytes) and id is a
 * sandbox id ("sbx_..."); encode refuses other values, decode refuses
 * anything else ("cursor is malformed"). The system tenant's id
 * "ten_system" is also accepted for the prefix "ten". Output buffers that are too small
 * fail with SP_E_INVALID; on failure the outputs are empty strings. */
int cp_cursor_encode(const char *created_at, const char *id, char *out, size_t outlen, sp_error **err);
int cp_cursor_decode(const char *cursor, char *ret_created_at, size_t created_len, char *ret_id, size_t id_len,
                     sp_error **err);
/* The same for lists of other objects: the id has `prefix` ("ses" for sessions)
 * instead of "sbx", and the messages name that kind of id. */
int cp_cursor_encode_for(const char *prefix, const char *created_at, const char *id, char *out, size_t outlen,
                         sp_error **err);
int cp_cursor_decode_for(const char *prefix, const char *cursor, char *ret_created_at, size_t created_len, char *ret_id,
                         size_t id_len, sp_error **err);

/* A count in a query parameter (?limit=N): decimal digits, 1..max; absent
 * or empty → def. The message names the parameter. */
int cp_req_count(const char *name, const char *value, int64_t def, int64_t max, int64_t *ret, sp_error **err);

/* ?wait=SECONDS on GET /v1/operations/{id}: 0..60, fractional allowed ("0.5",
 * at most 6 decimals, truncated to milliseconds); no sign, exponent or
 * spaces; NULL or "" → 0. */
int cp_req_wait(const char *wait, int64_t *ret_ms, sp_error **err);

/* The Idempotency-Key header: 1..255 printable ASCII characters (0x20-0x7e),
 * not starting or ending with a space. */
bool cp_req_idempotency_key_valid(const char *key);

/* Whether s is an RFC 3339 timestamp that says its zone
 * ("2026-01-02T03:04:05[.frac](Z|+HH:MM|-HH:MM)", under 40 bytes). */
bool cp_req_timestamp_valid(const char *s);

/* Sandbox states (docs/api.md) and whether s is one. */
bool cp_sandbox_state_valid(const char *s);

#endif
