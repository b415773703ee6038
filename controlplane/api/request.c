/* SPDX-License-Identifier: Apache-2.0 */
/* Decoding and validation of public API request bodies and query parameters. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/request.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"
#include "space/worker_rpc.h"
#include "wire/pattern.h"

/* Above what any valid body needs (three full maps are about 800 KiB). */
#define MAX_BODY (1024 * 1024)
#define MAX_PATH_LEN 4095
#define MAX_SUITE_LEN 64
#define MAX_PACKAGES 128 /* the worker's bound too (WK_DEBOOTSTRAP_PACKAGES_MAX for the joined list) */
#define MAX_PACKAGE_LEN 64
#define MAX_PACKAGES_LEN 2048
#define MAX_USER_NAME_LEN 32
#define MAX_MIRROR_LEN 1024
#define MAX_WARM 64
#define MAX_JOIN_USES 1000
#define MAX_CURSOR_LEN 128
#define MAX_LIMIT 1000
#define DEFAULT_LIMIT 100
#define MAX_WAIT_S 60

static const char *const sandbox_states[] = {"creating", "running",  "paused",  "suspending", "suspended", "restoring",
                                             "stopped",  "deleting", "deleted", "failed",     NULL};
static const char *const backends[] = {"jail", "qemu", "firecracker", NULL};
static const char *const end_actions[] = {"kill", "suspend", NULL};
static const char *const sources[] = {"dir", "tar", "oci", "debootstrap", "upload", NULL};
static const char *const ingress_modes[] = {"token", "public", NULL};

static bool timestamp_valid(const char *s);

/* ---- field helpers: every message names the field by its path ---- */

/* "name" or "prefix.name", for messages. */
typedef struct field_path {
        char s[CP_NAME_LEN + CP_MAX_MAP_KEY + 2];
} field_path;

static field_path path_of(const char *prefix, const char *name)
{
        field_path p;
        if (prefix)
                snprintf(p.s, sizeof(p.s), "%s.%.*s", prefix, CP_MAX_MAP_KEY, name);
        else
                snprintf(p.s, sizeof(p.s), "%.*s", CP_MAX_MAP_KEY, name);
        return p;
}

static bool in_list(const char *s, const char *const *list)
{
        for (size_t i = 0; list[i]; i++)
                if (strcmp(s, list[i]) == 0)
                        return true;
        return false;
}

/* "a, b or c" for messages. */
static void join_list(const char *const *list, char *out, size_t outlen)
{
        size_t n = 0, len = 0;
        while (list[n])
                n++;
        out[0] = '\0';
        for (size_t i = 0; i < n && len < outlen; i++) {
                const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";
                int w = snprintf(out + len, outlen - len, "%s%s", sep, list[i]);
                if (w < 0)
                        break;
                len += (size_t)w;
        }
}

static int refuse_not_in(const char *path, const char *const *list, sp_error **err)
{
        char opts[160];
        join_list(list, opts, sizeof(opts));
        return sp_error_set(err, SP_E_INVALID, "%s must be %s", path, opts);
}

int cp_req_body_object(const char *body, size_t len, json_object **ret, sp_error **err)
{
        return cp_req_body_object_max(body, len, MAX_BODY, ret, err);
}

int cp_req_body_object_max(const char *body, size_t len, size_t max, json_object **ret, sp_error **err)
{
        if (len > max)
                return sp_error_set(err, SP_E_TOO_LARGE, "request body is larger than %zu bytes", max);
        json_object *o = NULL;
        if (len == 0) {
                o = json_object_new_object();
                if (!o)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        } else {
                int r = sp_json_parse(body, len, &o, err);
                if (r < 0)
                        return sp_error_wrap(err, "request body");
        }
        if (!json_object_is_type(o, json_type_object)) {
                json_object_put(o);
                return sp_error_set(err, SP_E_INVALID, "request body must be a JSON object");
        }
        *ret = o;
        return 0;
}

static int check_fields(json_object *o, const char *prefix, const char *const *allowed, sp_error **err)
{
        json_object_object_foreach (o, key, val) {
                (void)val;
                if (!in_list(key, allowed)) {
                        if (prefix)
                                return sp_error_set(err, SP_E_INVALID, "unknown field '%s.%.100s'", prefix, key);
                        return sp_error_set(err, SP_E_INVALID, "unknown field '%.100s'", key);
                }
        }
        return 0;
}

/* The field's value; NULL when absent or JSON null (which counts as absent). */
static json_object *field(json_object *o, const char *name)
{
        json_object *v = NULL;
        if (!json_object_object_get_ex(o, name, &v))
                return NULL;
        return v;
}

static int missing(const char *name, sp_error **err)
{
        return sp_error_set(err, SP_E_INVALID, "%s is required", name);
}

/* An integer field within [min, max], or 0 as well when zero_ok. Returns 1
 * when set, 0 when absent. */
static int get_int_ex(json_object *o, const char *prefix, const char *name, bool zero_ok, int64_t min, int64_t max,
                      int64_t *ret, sp_error **err)
{
        json_object *v = field(o, name);
        if (!v)
                return 0;
        field_path p = path_of(prefix, name);
        if (!json_object_is_type(v, json_type_int))
                return sp_error_set(err, SP_E_INVALID, "%s must be an integer", p.s);
        errno = 0;
        int64_t n = json_object_get_int64(v);
        /* json-c saturates numbers out of the int64 range and says so in errno. */
        bool in_range = errno != ERANGE && json_object_get_uint64(v) <= (uint64_t)INT64_MAX &&
                        ((zero_ok && n == 0) || (n >= min && n <= max));
        if (!in_range)
                return sp_error_set(err, SP_E_INVALID, "%s must be %sbetween %lld and %lld", p.s,
                                    zero_ok ? "0 or " : "", (long long)min, (long long)max);
        *ret = n;
        return 1;
}

static int get_int(json_object *o, const char *prefix, const char *name, int64_t min, int64_t max, int64_t *ret,
                   sp_error **err)
{
        return get_int_ex(o, prefix, name, false, min, max, ret, err);
}

/* A string field of at most max bytes without NUL. Returns 1 when set, 0 when absent. */
static int get_str(json_object *o, const char *prefix, const char *name, size_t max, const char **ret, sp_error **err)
{
        json_object *v = field(o, name);
        if (!v)
                return 0;
        field_path p = path_of(prefix, name);
        if (!json_object_is_type(v, json_type_string))
                return sp_error_set(err, SP_E_INVALID, "%s must be a string", p.s);
        size_t n = (size_t)json_object_get_string_len(v);
        if (n > max)
                return sp_error_set(err, SP_E_INVALID, "%s must be at most %zu bytes long", p.s, max);
        const char *s = json_object_get_string(v);
        if (memchr(s, '\0', n))
                return sp_error_set(err, SP_E_INVALID, "%s must not contain NUL characters", p.s);
        *ret = s;
        return 1;
}

static int get_bool(json_object *o, const char *name, bool *ret, sp_error **err)
{
        json_object *v = field(o, name);
        if (!v)
                return 0;
        if (!json_object_is_type(v, json_type_boolean))
                return sp_error_set(err, SP_E_INVALID, "%s must be true or false", name);
        *ret = json_object_get_boolean(v);
        return 1;
}

/* A string field that must be one of list ("" allowed when empty_ok); every
 * entry of list fits in out. */
static int get_enum(json_object *o, const char *name, const char *const *list, bool empty_ok, char *out, size_t outlen,
                    sp_error **err)
{
        const char *s = NULL;
        int r = get_str(o, NULL, name, CP_MAX_MAP_VALUE, &s, err);
        if (r <= 0)
                return r < 0 ? -SP_E_INVALID : 0;
        if (!(empty_ok && s[0] == '\0') && !in_list(s, list))
                return refuse_not_in(name, list, err);
        snprintf(out, outlen, "%s", s);
        return 1;
}

static bool name_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
               c == '-';
}

static bool alnum(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Template, tenant and key names: 1..CP_NAME_LEN of [A-Za-z0-9._-], starting
 * with a letter or digit (so never "." or ".." where a name becomes a path). */
static bool name_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > CP_NAME_LEN || !alnum(s[0]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!name_char(s[i]))
                        return false;
        return true;
}

/* A required name field. */
static int get_name(json_object *o, const char *name, char out[CP_NAME_LEN + 1], sp_error **err)
{
        const char *s = NULL;
        int r = get_str(o, NULL, name, CP_NAME_LEN, &s, err);
        if (r < 0)
                return r;
        if (r == 0)
                return missing(name, err);
        if (!name_valid(s))
                return sp_error_set(err, SP_E_INVALID,
                                    "%s must be 1 to %d characters of A-Z, a-z, 0-9, '.', '_' and '-', "
                                    "starting with a letter or digit",
                                    name, CP_NAME_LEN);
        snprintf(out, CP_NAME_LEN + 1, "%s", s);
        return 1;
}

/* Text meant for people (descriptions): no control characters. */
static bool text_valid(const char *s)
{
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || *s == 0x7f)
                        return false;
        return true;
}

/* Environment variable names: [A-Za-z_][A-Za-z0-9_]*. */
static bool env_key_valid(const char *k)
{
        if (!(alnum(k[0]) || k[0] == '_') || (k[0] >= '0' && k[0] <= '9'))
                return false;
        for (const char *c = k; *c; c++)
                if (!(alnum(*c) || *c == '_'))
                        return false;
        return true;
}

/* Metadata and label keys: [A-Za-z0-9._:/-], starting with a letter or digit,
 * so that they fit in a ?metadata.KEY=VALUE filter unescaped. */
static bool meta_key_valid(const char *k)
{
        if (!alnum(k[0]))
                return false;
        for (const char *c = k; *c; c++)
                if (!(name_char(*c) || *c == ':' || *c == '/'))
                        return false;
        return true;
}

typedef struct map_rule {
        bool (*key_valid)(const char *key);
        const char *key_rule; /* for messages */
} map_rule;

static const map_rule env_rule = {env_key_valid, "letters, digits and '_', not starting with a digit"};
static const map_rule meta_rule = {meta_key_valid,
                                   "letters, digits, '.', '_', '-', ':' and '/', starting with a letter or digit"};

/* A string map (env, metadata, labels) as a new reference in *ret: an empty
 * object when absent. */
static int get_map(json_object *o, const char *name, const map_rule *rule, json_object **ret, sp_error **err)
{
        json_object *v = field(o, name);
        if (!v) {
                *ret = json_object_new_object();
                return *ret ? 0 : sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (!json_object_is_type(v, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "%s must be an object of strings", name);
        if (json_object_object_length(v) > CP_MAX_MAP_ITEMS)
                return sp_error_set(err, SP_E_INVALID, "%s must have at most %d entries", name, CP_MAX_MAP_ITEMS);
        json_object_object_foreach (v, key, val) {
                size_t kl = strlen(key);
                if (kl == 0 || kl > CP_MAX_MAP_KEY || !rule->key_valid(key))
                        return sp_error_set(err, SP_E_INVALID, "%s key '%.*s' must be 1 to %d characters of %s", name,
                                            CP_MAX_MAP_KEY, key, CP_MAX_MAP_KEY, rule->key_rule);
                const char *s;
                if (!val)
                        return sp_error_set(err, SP_E_INVALID, "%s must be a string", path_of(name, key).s);
                if (get_str(v, name, key, CP_MAX_MAP_VALUE, &s, err) < 0)
                        return -SP_E_INVALID;
        }
        *ret = json_object_get(v);
        return 0;
}

/* ---- POST /v1/sandboxes ---- */

typedef struct int_rule {
        const char *name;
        int64_t min, max, def;
} int_rule;

/* In the order of the fields of cp_resources. */
static const int_rule resource_rules[] = {
        {"cpu_millis", 10, 64000, PR_WK_DEFAULT_CPU_MILLIS},
        {"memory_mb", 16, 262144, PR_WK_DEFAULT_MEMORY_MB},
        {"disk_mb", 16, 1048576, PR_WK_DEFAULT_DISK_MB},
        {"pids", 16, 65536, PR_WK_DEFAULT_PIDS},
};

static int get_resources(json_object *o, cp_resources *ret, sp_error **err)
{
        int64_t *dst[] = {&ret->cpu_millis, &ret->memory_mb, &ret->disk_mb, &ret->pids};
        _Static_assert(SP_ARRAY_SIZE(dst) == SP_ARRAY_SIZE(resource_rules), "one rule per resource");
        for (size_t i = 0; i < SP_ARRAY_SIZE(resource_rules); i++)
                *dst[i] = resource_rules[i].def;
        json_object *v = field(o, "resources");
        if (!v)
                return 0;
        if (!json_object_is_type(v, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "resources must be an object");
        static const char *const allowed[] = {"cpu_millis", "memory_mb", "disk_mb", "pids", NULL};
        if (check_fields(v, "resources", allowed, err) < 0)
                return -SP_E_INVALID;
        for (size_t i = 0; i < SP_ARRAY_SIZE(resource_rules); i++) {
                const int_rule *rl = &resource_rules[i];
                if (get_int(v, "resources", rl->name, rl->min, rl->max, dst[i], err) < 0)
                        return -SP_E_INVALID;
        }
        return 0;
}

static bool egress_valid(const char *s)
{
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
                        return false;
        return true;
}

/* "egress": a profile's name (into name) or a whole profile (*ret_inline). */
static int get_egress(json_object *o, char name[static 64], gw_profile **ret_inline, sp_error **err)
{
        json_object *v = NULL;
        if (!json_object_object_get_ex(o, "egress", &v) || !v)
                return 0;
        if (json_object_is_type(v, json_type_object)) {
                _cleanup_error_ sp_error *e = NULL;
                if (gw_profile_parse(v, "inline", true, ret_inline, &e) < 0)
                        return sp_error_set(err, SP_E_INVALID, "field 'egress': %s", e->message);
                return 0;
        }
        const char *s = json_object_get_string(v);
        if (!json_object_is_type(v, json_type_string) || !egress_valid(s) || strlen(s) > 63 || !*s)
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'egress' must be a profile's name (1 to 63 of a-z, 0-9, '-' and '_') "
                                    "or a profile (an object)");
        snprintf(name, 64, "%s", s);
        return 0;
}

bool cp_req_secret_name_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > CP_SECRET_NAME_MAX || !(s[0] >= 'a' && s[0] <= 'z'))
                return false;
        return egress_valid(s);
}

#define SECRET_NAME_RULE "a secret's name (1 to 63 of a-z, 0-9, '-' and '_', starting with a letter)"

/* "secrets": ["name", ...] or {"ENV": "name", ...} into r (after env). */
static int get_secrets(json_object *o, cp_sandbox_create_req *r, sp_error **err)
{
        json_object *v = field(o, "secrets");
        if (!v)
                return 0;
        bool arr = json_object_is_type(v, json_type_array);
        if (!arr && !json_object_is_type(v, json_type_object))
                return sp_error_set(err, SP_E_INVALID,
                                    "secrets must be an array of secret names or an object from environment "
                                    "variable to secret name");
        size_t n = arr ? json_object_array_length(v) : (size_t)json_object_object_length(v);
        if (n > GW_SECRETS_MAX)
                return sp_error_set(err, SP_E_INVALID, "secrets must name at most %d secrets", GW_SECRETS_MAX);
        if (arr) {
                for (size_t i = 0; i < n; i++) {
                        json_object *e = json_object_array_get_idx(v, i);
                        if (!json_object_is_type(e, json_type_string) ||
                            !cp_req_secret_name_valid(json_object_get_string(e)))
                                return sp_error_set(err, SP_E_INVALID, "secrets[%zu] must be " SECRET_NAME_RULE, i);
                        snprintf(r->secrets[r->nsecrets++].name, sizeof(r->secrets[0].name), "%s",
                                 json_object_get_string(e));
                }
        } else {
                json_object_object_foreach (v, key, val) {
                        size_t kl = strlen(key);
                        if (kl == 0 || kl > CP_MAX_MAP_KEY || !env_key_valid(key))
                                return sp_error_set(err, SP_E_INVALID,
                                                    "secrets key '%.*s' must be 1 to %d characters of %s",
                                                    CP_MAX_MAP_KEY, key, CP_MAX_MAP_KEY, env_rule.key_rule);
                        if (!val || !json_object_is_type(val, json_type_string) ||
                            !cp_req_secret_name_valid(json_object_get_string(val)))
                                return sp_error_set(err, SP_E_INVALID, "secrets.%s must be " SECRET_NAME_RULE, key);
                        if (json_object_object_get_ex(r->env, key, NULL))
                                return sp_error_set(err, SP_E_INVALID,
                                                    "secrets.%s: the variable is also in env (a secret's variable "
                                                    "holds its placeholder)",
                                                    key);
                        cp_sandbox_secret_ref *ref = &r->secrets[r->nsecrets++];
                        snprintf(ref->name, sizeof(ref->name), "%s", json_object_get_string(val));
                        snprintf(ref->env, sizeof(ref->env), "%s", key);
                }
        }
        for (size_t i = 0; i < r->nsecrets; i++)
                for (size_t j = 0; j < i; j++)
                        if (strcmp(r->secrets[i].name, r->secrets[j].name) == 0)
                                return sp_error_set(err, SP_E_INVALID, "secrets: secret '%s' is named twice",
                                                    r->secrets[i].name);
        return 0;
}

void cp_sandbox_create_req_free(cp_sandbox_create_req *r)
{
        if (!r)
                return;
        sp_json_putp(&r->env);
        sp_json_putp(&r->metadata);
        sp_json_putp(&r->labels);
        gw_profile_unrefp(&r->egress_inline);
}

static int sandbox_create(json_object *o, cp_sandbox_create_req *r, sp_error **err)
{
        static const char *const allowed[] = {
                "template",   "resources",      "env",    "metadata", "labels",  "backend",     "timeout_s",
                "end_action", "idle_timeout_s", "egress", "secrets",  "ingress", "auto_resume", NULL};
        if (check_fields(o, NULL, allowed, err) < 0 || get_name(o, "template", r->template_name, err) < 0 ||
            get_resources(o, &r->resources, err) < 0 || get_map(o, "env", &env_rule, &r->env, err) < 0 ||
            get_map(o, "metadata", &meta_rule, &r->metadata, err) < 0 ||
            get_map(o, "labels", &meta_rule, &r->labels, err) < 0 ||
            get_enum(o, "backend", backends, true, r->backend, sizeof(r->backend), err) < 0 ||
            get_int(o, NULL, "timeout_s", 0, CP_MAX_TIMEOUT_S, &r->timeout_s, err) < 0)
                return -SP_E_INVALID;

        snprintf(r->end_action, sizeof(r->end_action), "kill");
        if (get_enum(o, "end_action", end_actions, false, r->end_action, sizeof(r->end_action), err) < 0)
                return -SP_E_INVALID;

        r->idle_timeout_s = -1;
        if (get_int_ex(o, NULL, "idle_timeout_s", true, 60, CP_MAX_TIMEOUT_S, &r->idle_timeout_s, err) < 0)
                return -SP_E_INVALID;

        snprintf(r->ingress, sizeof(r->ingress), "token");
        if (get_enum(o, "ingress", ingress_modes, false, r->ingress, sizeof(r->ingress), err) < 0 ||
            get_bool(o, "auto_resume", &r->auto_resume, err) < 0 || get_secrets(o, r, err) < 0)
                return -SP_E_INVALID;
        return get_egress(o, r->egress, &r->egress_inline, err);
}

int cp_req_sandbox_create(const char *body, size_t len, cp_sandbox_create_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        cp_sandbox_create_req req = {0};
        r = sandbox_create(o, &req, err);
        if (r < 0) {
                cp_sandbox_create_req_free(&req);
                return r;
        }
        *ret = req;
        return 0;
}

/* ---- egress profiles ---- */

int cp_req_egress_profile(const char *body, size_t len, const char *path_name, gw_profile **ret, sp_error **err)
{
        *ret = NULL;
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        json_object *n = NULL;
        if (path_name && json_object_object_get_ex(o, "name", &n) &&
            (!json_object_is_type(n, json_type_string) || strcmp(json_object_get_string(n), path_name) != 0))
                return sp_error_set(err, SP_E_INVALID, "field 'name' must be the profile's name in the path ('%s')",
                                    path_name);
        return gw_profile_parse(o, path_name, true, ret, err);
}

/* ---- secrets ---- */

void cp_secret_create_req_free(cp_secret_create_req *r)
{
        if (!r)
                return;
        sp_json_putp(&r->hosts);
        sp_json_putp(&r->inject);
        if (r->value) {
                sp_explicit_bzero(r->value, r->value_len);
                free(r->value);
        }
        r->value = NULL;
        r->value_len = 0;
}

/* An RFC 3339 timestamp that says its zone (Z or an offset). */
static bool timestamp_with_zone(const char *s)
{
        size_t n = strlen(s);
        return timestamp_valid(s) && s[10] == 'T' && (s[n - 1] == 'Z' || strchr(s + 19, '+') || strchr(s + 19, '-'));
}

bool cp_req_timestamp_valid(const char *s)
{
        return s && timestamp_with_zone(s);
}

/* The value: a string the gateway can put in a header (never quoted in a message). */
static int get_value(json_object *o, cp_secret_create_req *r, sp_error **err)
{
        json_object *v = field(o, "value");
        if (!v)
                return missing("value", err);
        if (!json_object_is_type(v, json_type_string))
                return sp_error_set(err, SP_E_INVALID, "field 'value' must be a string");
        size_t n = (size_t)json_object_get_string_len(v);
        /* The JSON text holds the value: wiped once copied (or refused). */
        char *text = (char *)json_object_get_string(v);
        int rc = gw_secret_check_value(text, n, err);
        if (rc == 0) {
                if (!(r->value = malloc(n + 1)))
                        rc = sp_error_set(err, SP_E_LIMIT, "out of memory");
                else {
                        memcpy(r->value, text, n + 1);
                        r->value_len = n;
                }
        }
        sp_explicit_bzero(text, n);
        return rc;
}

static int secret_create(json_object *o, cp_secret_create_req *r, sp_error **err)
{
        static const char *const allowed[] = {"name", "value",        "hosts",      "inject",
                                              "env",  "rate_per_min", "expires_at", NULL};
        const char *name = NULL, *env = NULL, *exp = NULL;
        json_object *hosts = field(o, "hosts"), *inject = field(o, "inject");
        /* The value first: whatever else is wrong, its text does not outlive this call. */
        if (get_value(o, r, err) < 0 || check_fields(o, NULL, allowed, err) < 0 ||
            get_str(o, NULL, "name", CP_SECRET_NAME_MAX + 1, &name, err) < 0)
                return -SP_E_INVALID;
        if (!name)
                return missing("name", err);
        if (!cp_req_secret_name_valid(name))
                return sp_error_set(err, SP_E_INVALID, "name must be " SECRET_NAME_RULE);
        snprintf(r->name, sizeof(r->name), "%s", name);
        if (!hosts)
                return missing("hosts", err);
        if (!inject)
                return missing("inject", err);
        if (gw_secret_check_spec(hosts, inject, err) < 0)
                return -SP_E_INVALID;
        /* hosts in normal form (the check above passed each one). */
        if (!(r->hosts = json_object_new_array()))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < json_object_array_length(hosts); i++) {
                json_object *h = json_object_array_get_idx(hosts, i);
                char out[GW_NAME_MAX + 1];
                if (gw_pattern_normalize(json_object_get_string(h), (size_t)json_object_get_string_len(h), out, NULL) <
                    0)
                        return sp_error_set(err, SP_E_INVALID, "field 'hosts[%zu]' is not a host name", i);
                json_object_array_add(r->hosts, json_object_new_string(out));
        }
        r->inject = json_object_get(inject);
        if (get_str(o, NULL, "env", CP_MAX_MAP_KEY, &env, err) < 0 ||
            get_int(o, NULL, "rate_per_min", 0, 1000000, &r->rate_per_min, err) < 0 ||
            get_str(o, NULL, "expires_at", 39, &exp, err) < 0)
                return -SP_E_INVALID;
        if (env && (!*env || !env_key_valid(env)))
                return sp_error_set(err, SP_E_INVALID, "env must be 1 to %d characters of %s", CP_MAX_MAP_KEY,
                                    env_rule.key_rule);
        if (env) {
                snprintf(r->env, sizeof(r->env), "%s", env);
        } else {
                size_t i = 0;
                for (; r->name[i]; i++) {
                        char ch = r->name[i];
                        r->env[i] = ch == '-' ? '_' : (ch >= 'a' && ch <= 'z') ? (char)(ch - 'a' + 'A') : ch;
                }
                r->env[i] = '\0';
        }
        if (exp && *exp) {
                if (!timestamp_with_zone(exp))
                        return sp_error_set(err, SP_E_INVALID,
                                            "expires_at must be an RFC 3339 time with its zone, like "
                                            "2030-01-31T12:00:00Z");
                snprintf(r->expires_at, sizeof(r->expires_at), "%s", exp);
        }
        return 0;
}

int cp_req_secret_create(const char *body, size_t len, cp_secret_create_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        cp_secret_create_req req = {0};
        r = secret_create(o, &req, err);
        if (r < 0) {
                cp_secret_create_req_free(&req);
                return r;
        }
        *ret = req;
        return 0;
}

int cp_req_secrets_rewrap(const char *body, size_t len, int64_t *ret_max, sp_error **err)
{
        *ret_max = 0;
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"max", NULL};
        int64_t max = 10000;
        if (check_fields(o, NULL, allowed, err) < 0 || get_int(o, NULL, "max", 1, 1000000, &max, err) < 0)
                return -SP_E_INVALID;
        *ret_max = max;
        return 0;
}

int cp_req_sandbox_egress(const char *body, size_t len, char name[static 64], gw_profile **ret_inline, sp_error **err)
{
        name[0] = '\0';
        *ret_inline = NULL;
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"egress", NULL};
        if (check_fields(o, NULL, allowed, err) < 0 || get_egress(o, name, ret_inline, err) < 0)
                return -SP_E_INVALID;
        if (!name[0] && !*ret_inline)
                return sp_error_set(err, SP_E_INVALID, "field 'egress' is required");
        return 0;
}

/* ---- POST /v1/sandboxes/{id}/timeout ---- */

int cp_req_timeout(const char *body, size_t len, cp_timeout_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"timeout_s", "end_action", NULL};
        cp_timeout_req req = {0};
        if (check_fields(o, NULL, allowed, err) < 0)
                return -SP_E_INVALID;
        r = get_int(o, NULL, "timeout_s", 0, CP_MAX_TIMEOUT_S, &req.timeout_s, err);
        if (r < 0)
                return r;
        if (r == 0)
                return missing("timeout_s", err);
        if (get_enum(o, "end_action", end_actions, false, req.end_action, sizeof(req.end_action), err) < 0)
                return -SP_E_INVALID;
        *ret = req;
        return 0;
}

/* ---- ingress ---- */

int cp_req_sandbox_ingress(const char *body, size_t len, cp_sandbox_ingress_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"mode", "auto_resume", NULL};
        cp_sandbox_ingress_req req = {.auto_resume = -1};
        bool ar = false;
        int has_mode, has_ar;
        if (check_fields(o, NULL, allowed, err) < 0 ||
            (has_mode = get_enum(o, "mode", ingress_modes, false, req.mode, sizeof(req.mode), err)) < 0 ||
            (has_ar = get_bool(o, "auto_resume", &ar, err)) < 0)
                return -SP_E_INVALID;
        if (has_mode == 0 && has_ar == 0)
                return sp_error_set(err, SP_E_INVALID, "mode or auto_resume is required");
        if (has_ar)
                req.auto_resume = ar;
        *ret = req;
        return 0;
}

int cp_req_ingress_token(const char *body, size_t len, int64_t *ret_ttl_s, sp_error **err)
{
        *ret_ttl_s = 0;
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"ttl_s", NULL};
        int64_t ttl = CP_INGRESS_TOKEN_TTL_DEFAULT_S;
        if (check_fields(o, NULL, allowed, err) < 0 ||
            get_int(o, NULL, "ttl_s", CP_INGRESS_TOKEN_TTL_MIN_S, CP_INGRESS_TOKEN_TTL_MAX_S, &ttl, err) < 0)
                return -SP_E_INVALID;
        *ret_ttl_s = ttl;
        return 0;
}

/* ---- POST /v1/templates ---- */

void cp_template_create_req_free(cp_template_create_req *r)
{
        if (!r)
                return;
        free(r->path);
        free(r->suite);
        free(r->mirror);
        free(r->packages);
        free(r->user);
        r->path = r->suite = r->mirror = r->packages = r->user = NULL;
}

/* Absolute, without "." or ".." segments, empty segments or control characters. */
static bool host_path_valid(const char *s)
{
        if (s[0] != '/' || !text_valid(s))
                return false;
        for (const char *seg = s + 1; *seg;) {
                const char *e = strchrnul(seg, '/');
                size_t n = (size_t)(e - seg);
                if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.') || (n == 0 && *e))
                        return false;
                seg = *e ? e + 1 : e;
        }
        return true;
}

static bool suite_valid(const char *s)
{
        if (!alnum(s[0]))
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-'))
                        return false;
        return true;
}

/* A Debian package name (policy 5.6.1). */
static bool package_valid(const char *s)
{
        if (strlen(s) < 2 || !alnum(s[0]) || (s[0] >= 'A' && s[0] <= 'Z'))
                return false;
        for (s++; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '+' || *s == '.' || *s == '-'))
                        return false;
        return true;
}

/* "packages": an array of 1..MAX_PACKAGES Debian package names, joined with ',' into *ret. */
static int get_packages(json_object *o, char **ret, sp_error **err)
{
        json_object *a = NULL;
        if (!json_object_object_get_ex(o, "packages", &a))
                return 0;
        size_t n = json_object_is_type(a, json_type_array) ? json_object_array_length(a) : 0;
        if (n == 0 || n > MAX_PACKAGES)
                return sp_error_set(err, SP_E_INVALID, "packages must be an array of 1 to %d package names",
                                    MAX_PACKAGES);
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        for (size_t i = 0; i < n; i++) {
                json_object *v = json_object_array_get_idx(a, i);
                const char *name = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
                if (!name || strlen(name) > MAX_PACKAGE_LEN || !package_valid(name))
                        return sp_error_set(err, SP_E_INVALID,
                                            "packages[%zu] must be a Debian package name ([a-z0-9][a-z0-9+.-]+, at "
                                            "most %d characters)",
                                            i, MAX_PACKAGE_LEN);
                if ((i && sp_buf_append(&b, ",", 1, err) < 0) || sp_buf_append(&b, name, strlen(name), err) < 0)
                        return -SP_E_LIMIT;
        }
        if (b.len > MAX_PACKAGES_LEN)
                return sp_error_set(err, SP_E_INVALID, "packages must name at most %d bytes together",
                                    MAX_PACKAGES_LEN);
        if (!(*ret = strndup(b.data, b.len)))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 1;
}

/* A login user's name: [a-z_][a-z0-9_-]*, not root. */
static bool user_name_valid(const char *s)
{
        if (!((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_') || strcmp(s, "root") == 0)
                return false;
        for (s++; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
                        return false;
        return true;
}

bool cp_req_mirror_valid(const char *s)
{
        const char *rest = NULL;
        if (strncmp(s, "http://", 7) == 0)
                rest = s + 7;
        else if (strncmp(s, "https://", 8) == 0)
                rest = s + 8;
        if (!rest || !*rest || *rest == '/')
                return false;
        for (; *s; s++)
                if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
                        return false;
        return true;
}

/* Copies an optional string field that passed valid() into *ret (malloc'd). */
static int get_dup(json_object *o, const char *name, size_t max, bool (*valid)(const char *), const char *rule,
                   char **ret, sp_error **err)
{
        const char *s = NULL;
        int r = get_str(o, NULL, name, max, &s, err);
        if (r <= 0)
                return r;
        if (!valid(s))
                return sp_error_set(err, SP_E_INVALID, "%s must be %s", name, rule);
        *ret = strdup(s);
        return *ret ? 1 : sp_error_set(err, SP_E_LIMIT, "out of memory");
}

static int template_create(json_object *o, cp_template_create_req *t, sp_error **err)
{
        static const char *const allowed[] = {"name", "source", "path",   "suite",     "mirror", "packages",
                                              "user", "warm",   "format", "tenant_id", NULL};
        static const char *const formats[] = {"tar", "oci", NULL};
        const char *tenant = NULL;
        if (check_fields(o, NULL, allowed, err) < 0 || get_name(o, "name", t->name, err) < 0 ||
            get_str(o, NULL, "tenant_id", sizeof(t->tenant_id) - 1, &tenant, err) < 0)
                return -SP_E_INVALID;
        if (tenant) {
                if (!sp_id_valid(tenant, "ten"))
                        return sp_error_set(err, SP_E_INVALID, "tenant_id must be a tenant id (ten_...)");
                snprintf(t->tenant_id, sizeof(t->tenant_id), "%s", tenant);
        }
        int r = get_enum(o, "source", sources, false, t->source, sizeof(t->source), err);
        if (r < 0)
                return r;
        if (r == 0)
                return missing("source", err);
        if (get_dup(o, "path", MAX_PATH_LEN, host_path_valid,
                    "an absolute path without '.' or '..' segments or control characters", &t->path, err) < 0 ||
            get_dup(o, "suite", MAX_SUITE_LEN, suite_valid, "a suite name of a-z, 0-9 and '-' (e.g. bookworm)",
                    &t->suite, err) < 0 ||
            get_dup(o, "mirror", MAX_MIRROR_LEN, cp_req_mirror_valid, "an http:// or https:// URL", &t->mirror, err) <
                    0 ||
            get_packages(o, &t->packages, err) < 0 ||
            get_dup(o, "user", MAX_USER_NAME_LEN, user_name_valid,
                    "a user name of a-z, 0-9, '_' and '-' starting with a letter or '_', other than root", &t->user,
                    err) < 0 ||
            get_int(o, NULL, "warm", 0, MAX_WARM, &t->warm, err) < 0)
                return -SP_E_INVALID;

        if ((r = get_enum(o, "format", formats, false, t->format, sizeof(t->format), err)) < 0)
                return r;
        bool debootstrap = strcmp(t->source, "debootstrap") == 0;
        if (strcmp(t->source, "upload") == 0) {
                if (!t->format[0])
                        return sp_error_set(err, SP_E_INVALID, "format is required with source upload (tar or oci)");
                if (t->path || t->suite || t->mirror || t->packages || t->user)
                        return sp_error_set(err, SP_E_INVALID, "%s is not used with source upload",
                                            t->path       ? "path"
                                            : t->suite    ? "suite"
                                            : t->mirror   ? "mirror"
                                            : t->packages ? "packages"
                                                          : "user");
                return 0;
        }
        if (t->format[0])
                return sp_error_set(err, SP_E_INVALID, "format is only used with source upload");
        if (debootstrap) {
                if (!t->suite)
                        return sp_error_set(err, SP_E_INVALID, "suite is required with source debootstrap");
                if (t->path)
                        return sp_error_set(err, SP_E_INVALID, "path is not used with source debootstrap");
        } else {
                if (!t->path)
                        return sp_error_set(err, SP_E_INVALID, "path is required with source %s", t->source);
                if (t->suite || t->mirror || t->packages || t->user)
                        return sp_error_set(err, SP_E_INVALID, "%s is only used with source debootstrap",
                                            t->suite      ? "suite"
                                            : t->mirror   ? "mirror"
                                            : t->packages ? "packages"
                                                          : "user");
        }
        return 0;
}

int cp_req_template_create(const char *body, size_t len, cp_template_create_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        cp_template_create_req t = {0};
        r = template_create(o, &t, err);
        if (r < 0) {
                cp_template_create_req_free(&t);
                return r;
        }
        *ret = t;
        return 0;
}

bool cp_req_template_host_path(const cp_template_create_req *r)
{
        return strcmp(r->source, "debootstrap") != 0 && strcmp(r->source, "upload") != 0;
}

/* ---- POST /v1/templates/{name}/warm ---- */

int cp_req_warm(const char *body, size_t len, int64_t *ret, sp_error **err)
{
        *ret = 0;
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"warm", NULL};
        int64_t warm = 0;
        if (check_fields(o, NULL, allowed, err) < 0)
                return -SP_E_INVALID;
        r = get_int(o, NULL, "warm", 0, MAX_WARM, &warm, err);
        if (r < 0)
                return r;
        if (r == 0)
                return missing("warm", err);
        *ret = warm;
        return 0;
}

/* ---- POST /v1/tenants, POST /v1/keys ---- */

int cp_req_tenant_create(const char *body, size_t len, cp_named_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"name", NULL};
        cp_named_req req = {0};
        if (check_fields(o, NULL, allowed, err) < 0 || get_name(o, "name", req.name, err) < 0)
                return -SP_E_INVALID;
        *ret = req;
        return 0;
}

int cp_req_key_create(const char *body, size_t len, cp_named_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"name", "admin", "tenant_id", NULL};
        cp_named_req req = {0};
        const char *tenant = NULL;
        if (check_fields(o, NULL, allowed, err) < 0 || get_name(o, "name", req.name, err) < 0 ||
            get_bool(o, "admin", &req.admin, err) < 0 ||
            get_str(o, NULL, "tenant_id", sizeof(req.tenant_id) - 1, &tenant, err) < 0)
                return -SP_E_INVALID;
        if (tenant) {
                if (!sp_id_valid(tenant, "ten"))
                        return sp_error_set(err, SP_E_INVALID, "tenant_id must be a tenant id (ten_...)");
                snprintf(req.tenant_id, sizeof(req.tenant_id), "%s", tenant);
        }
        *ret = req;
        return 0;
}

/* ---- POST /v1/join-tokens ---- */

int cp_req_join_token(const char *body, size_t len, cp_join_token_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        static const char *const allowed[] = {"role", "description", "ttl_s", "uses", NULL};
        cp_join_token_req req = {.role = "worker", .ttl_s = 3600, .uses = 1};
        const char *desc = NULL, *role = NULL;
        if (check_fields(o, NULL, allowed, err) < 0 || get_str(o, NULL, "role", 16, &role, err) < 0 ||
            get_str(o, NULL, "description", CP_NAME_LEN, &desc, err) < 0 ||
            get_int(o, NULL, "ttl_s", 60, CP_MAX_TIMEOUT_S, &req.ttl_s, err) < 0 ||
            get_int(o, NULL, "uses", 0, MAX_JOIN_USES, &req.uses, err) < 0)
                return -SP_E_INVALID;
        if (role && strcmp(role, "worker") != 0 && strcmp(role, "dataplane") != 0)
                return sp_error_set(err, SP_E_INVALID, "role must be worker or dataplane");
        if (role)
                req.role = strcmp(role, "worker") == 0 ? "worker" : "dataplane";
        if (desc) {
                if (!text_valid(desc))
                        return sp_error_set(err, SP_E_INVALID, "description must not contain control characters");
                snprintf(req.description, sizeof(req.description), "%s", desc);
        }
        *ret = req;
        return 0;
}

/* ---- PUT /v1/tenants/{id}/quotas ---- */

int cp_req_quotas(const char *body, size_t len, cp_quotas_req *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        _cleanup_json_ json_object *o = NULL;
        int r = cp_req_body_object(body, len, &o, err);
        if (r < 0)
                return r;
        if (check_fields(o, NULL, cp_quota_names, err) < 0)
                return -SP_E_INVALID;
        cp_quotas_req q = {0};
        size_t n = 0;
        for (int i = 0; i < CP_QUOTA_COUNT; i++) {
                json_object *v = NULL;
                if (!json_object_object_get_ex(o, cp_quota_names[i], &v))
                        continue;
                q.set[i] = true;
                n++;
                if (!v) {
                        q.limit[i] = CP_QUOTA_DEFAULT;
                        continue;
                }
                errno = 0;
                int64_t x = json_object_get_int64(v);
                if (!json_object_is_type(v, json_type_int) || errno == ERANGE ||
                    json_object_get_uint64(v) > (uint64_t)INT64_MAX || x < CP_QUOTA_NONE || x > CP_QUOTA_MAX)
                        return sp_error_set(err, SP_E_INVALID,
                                            "%s must be a limit from 0 to %lld, -1 for none, or null for the "
                                            "cluster's default",
                                            cp_quota_names[i], (long long)CP_QUOTA_MAX);
                q.limit[i] = x;
        }
        if (n == 0) {
                char names[256];
                join_list(cp_quota_names, names, sizeof(names));
                return sp_error_set(err, SP_E_INVALID, "give at least one quota: %s", names);
        }
        *ret = q;
        return 0;
}

/* ---- cursors ---- */

static bool digits(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (s[i] < '0' || s[i] > '9')
                        return false;
        return true;
}

static int num2(const char *s)
{
        return (s[0] - '0') * 10 + (s[1] - '0');
}

/* "YYYY-MM-DD[T ]HH:MM:SS[.fraction][Z|±HH[:MM]]": RFC 3339 and PostgreSQL's
 * ISO output both pass. Plausible field ranges, not a calendar check: the
 * database compares it, and a nonsense date only finds nothing. */
static bool timestamp_valid(const char *s)
{
        size_t n = strlen(s);
        if (n < 19 || n >= 40)
                return false;
        if (!digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2) ||
            (s[10] != 'T' && s[10] != ' ') || !digits(s + 11, 2) || s[13] != ':' || !digits(s + 14, 2) ||
            s[16] != ':' || !digits(s + 17, 2))
                return false;
        int year = num2(s) * 100 + num2(s + 2), mon = num2(s + 5), day = num2(s + 8), hour = num2(s + 11),
            min = num2(s + 14), sec = num2(s + 17);
        static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        /* A day the calendar has (the database refuses the others with its own words). */
        if (year < 1 || mon < 1 || mon > 12 || day < 1 || day > mdays[mon - 1] || (mon == 2 && day == 29 && !leap) ||
            hour > 23 || min > 59 || sec > 60)
                return false;
        const char *p = s + 19;
        if (*p == '.') {
                size_t f = 0;
                while (p[1 + f] >= '0' && p[1 + f] <= '9')
                        f++;
                if (f == 0 || f > 9)
                        return false;
                p += 1 + f;
        }
        if (*p == 'Z')
                return p[1] == '\0';
        if (*p == '+' || *p == '-') {
                size_t z = strlen(p + 1);
                if (z == 2)
                        return digits(p + 1, 2) && num2(p + 1) <= 23;
                if (z == 5)
                        return digits(p + 1, 2) && num2(p + 1) <= 23 && p[3] == ':' && digits(p + 4, 2) &&
                               num2(p + 4) <= 59;
                return false;
        }
        return *p == '\0';
}

/* What the ids of a prefix name, for messages. */
/* An id a cursor may carry: a generated one with the prefix, or the built-in
 * system tenant (the one tenant id not made by sp_id_new()). */
static bool cursor_id_valid(const char *id, const char *prefix)
{
        return sp_id_valid(id, prefix) || (strcmp(prefix, "ten") == 0 && strcmp(id, "ten_system") == 0);
}

static const char *id_kind(const char *prefix)
{
        return strcmp(prefix, "sbx") == 0 ? "sandbox" : strcmp(prefix, "ses") == 0 ? "session" : prefix;
}

int cp_cursor_encode_for(const char *prefix, const char *created_at, const char *id, char *out, size_t outlen,
                         sp_error **err)
{
        if (outlen)
                out[0] = '\0';
        if (!created_at || !timestamp_valid(created_at))
                return sp_error_set(err, SP_E_INVALID, "cursor timestamp is not a timestamp");
        if (!id || !cursor_id_valid(id, prefix))
                return sp_error_set(err, SP_E_INVALID, "cursor id is not a %s id", id_kind(prefix));
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT, enc = SP_BUF_INIT;
        if (sp_buf_appendf(&raw, err, "%s|%s", created_at, id) < 0 ||
            sp_base64_encode(&enc, raw.data, raw.len, 1, err) < 0)
                return -SP_E_INVALID;
        if (enc.len >= outlen)
                return sp_error_set(err, SP_E_INVALID, "cursor buffer of %zu bytes is too small", outlen);
        memcpy(out, enc.data, enc.len + 1);
        return 0;
}

int cp_cursor_encode(const char *created_at, const char *id, char *out, size_t outlen, sp_error **err)
{
        return cp_cursor_encode_for("sbx", created_at, id, out, outlen, err);
}

static int cursor_decode(const char *prefix, const char *cursor, char *ret_created_at, size_t created_len, char *ret_id,
                         size_t id_len, sp_error **err)
{
        /* Unpadded only, so that every cursor has one spelling. */
        size_t n = strnlen(cursor, MAX_CURSOR_LEN + 1);
        if (n == 0 || n > MAX_CURSOR_LEN || memchr(cursor, '=', n))
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        _cleanup_buf_ sp_buf raw = SP_BUF_INIT;
        if (sp_base64_decode(&raw, cursor, n, 1, NULL) < 0 || raw.len == 0 || memchr(raw.data, '\0', raw.len))
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        char *bar = strchr(raw.data, '|');
        if (!bar)
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        *bar = '\0';
        const char *id = bar + 1;
        if (!timestamp_valid(raw.data) || !cursor_id_valid(id, prefix))
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        if (strlen(raw.data) >= created_len || strlen(id) >= id_len)
                return sp_error_set(err, SP_E_INVALID, "cursor buffers are too small");
        memcpy(ret_created_at, raw.data, strlen(raw.data) + 1);
        memcpy(ret_id, id, strlen(id) + 1);
        return 0;
}

int cp_cursor_decode_for(const char *prefix, const char *cursor, char *ret_created_at, size_t created_len, char *ret_id,
                         size_t id_len, sp_error **err)
{
        if (created_len)
                ret_created_at[0] = '\0';
        if (id_len)
                ret_id[0] = '\0';
        if (!cursor)
                return sp_error_set(err, SP_E_INVALID, "cursor is malformed");
        return cursor_decode(prefix, cursor, ret_created_at, created_len, ret_id, id_len, err);
}

int cp_cursor_decode(const char *cursor, char *ret_created_at, size_t created_len, char *ret_id, size_t id_len,
                     sp_error **err)
{
        return cp_cursor_decode_for("sbx", cursor, ret_created_at, created_len, ret_id, id_len, err);
}

/* ---- query parameters ---- */

/* Absent and empty query values mean the same: no filter, the default. */
static bool given(const char *s)
{
        return s && s[0];
}

int cp_req_count(const char *name, const char *value, int64_t def, int64_t max, int64_t *ret, sp_error **err)
{
        *ret = def;
        if (!given(value))
                return 0;
        size_t n = strlen(value);
        int64_t v = 0;
        if (n <= 18 && digits(value, n))
                v = strtoll(value, NULL, 10);
        if (v < 1 || v > max)
                return sp_error_set(err, SP_E_INVALID, "%s must be between 1 and %lld", name, (long long)max);
        *ret = v;
        return 0;
}

int cp_req_list_query(const char *state, const char *template_name, const char *limit, const char *cursor,
                      cp_list_query *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        cp_list_query q = {.limit = DEFAULT_LIMIT};
        if (given(state)) {
                if (!cp_sandbox_state_valid(state))
                        return refuse_not_in("state", sandbox_states, err);
                snprintf(q.state, sizeof(q.state), "%s", state);
        }
        if (given(template_name)) {
                if (!name_valid(template_name))
                        return sp_error_set(err, SP_E_INVALID, "template must be a template name");
                snprintf(q.template_name, sizeof(q.template_name), "%s", template_name);
        }
        if (cp_req_count("limit", limit, DEFAULT_LIMIT, MAX_LIMIT, &q.limit, err) < 0)
                return -SP_E_INVALID;
        if (given(cursor)) {
                if (cp_cursor_decode(cursor, q.cursor_created_at, sizeof(q.cursor_created_at), q.cursor_id,
                                     sizeof(q.cursor_id), err) < 0)
                        return -SP_E_INVALID;
                q.has_cursor = true;
        }
        *ret = q;
        return 0;
}

int cp_req_wait(const char *wait, int64_t *ret_ms, sp_error **err)
{
        *ret_ms = 0;
        if (!given(wait))
                return 0;
        /* digits[.digits], at most 2 + 1 + 6 characters: no sign, exponent or spaces. */
        const char *dot = strchr(wait, '.');
        size_t ni = dot ? (size_t)(dot - wait) : strlen(wait);
        size_t nf = dot ? strlen(dot + 1) : 0;
        bool ok = ni >= 1 && ni <= 2 && digits(wait, ni) && (!dot || (nf >= 1 && nf <= 6 && digits(dot + 1, nf)));
        int64_t ms = 0;
        if (ok) {
                ms = strtoll(wait, NULL, 10) * 1000;
                /* Milliseconds from the first three fractional digits; finer ones count only against the limit. */
                int64_t scale = 100;
                for (size_t i = 0; i < nf && i < 3; i++, scale /= 10)
                        ms += (dot[1 + i] - '0') * scale;
                bool finer = nf > 3 && strspn(dot + 4, "0") != nf - 3;
                ok = ms < MAX_WAIT_S * 1000 || (ms == MAX_WAIT_S * 1000 && !finer);
        }
        if (!ok)
                return sp_error_set(err, SP_E_INVALID, "wait must be a number of seconds between 0 and %d", MAX_WAIT_S);
        *ret_ms = ms;
        return 0;
}

bool cp_req_idempotency_key_valid(const char *key)
{
        if (!key)
                return false;
        size_t n = strlen(key);
        if (n == 0 || n > 255 || key[0] == ' ' || key[n - 1] == ' ')
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)key[i] < 0x20 || (unsigned char)key[i] > 0x7e)
                        return false;
        return true;
}

bool cp_sandbox_state_valid(const char *s)
{
        return s && in_list(s, sandbox_states);
}

static int one_of(const char *name, const char *value, const char *const *list, const char **ret, sp_error **err)
{
        *ret = NULL;
        if (!given(value))
                return 0;
        for (size_t i = 0; list[i]; i++)
                if (strcmp(value, list[i]) == 0) {
                        *ret = list[i];
                        return 0;
                }
        return refuse_not_in(name, list, err);
}

int cp_req_egress_log_query(const char *limit, const char *decision, const char *kind, const char *before,
                            const char *after, pr_wk_get_egress_log *ret, sp_error **err)
{
        static const char *const decisions[] = {"allowed", "refused", "would-refuse", NULL};
        static const char *const kinds[] = {"dns", "tcp", "packet", "secret", NULL};
        memset(ret, 0, sizeof(*ret));
        pr_wk_get_egress_log q = {0};
        if (cp_req_count("limit", limit, 100, 1000, &q.limit, err) < 0 ||
            one_of("decision", decision, decisions, &q.decision, err) < 0 ||
            one_of("kind", kind, kinds, &q.kind, err) < 0 ||
            cp_req_count("before", before, 0, INT64_MAX / 2, &q.before_us, err) < 0 ||
            cp_req_count("after", after, 0, INT64_MAX / 2, &q.after_us, err) < 0)
                return -SP_E_INVALID;
        if (q.before_us && q.after_us)
                return sp_error_set(err, SP_E_INVALID, "before and after cannot be given together");
        *ret = q;
        return 0;
}
