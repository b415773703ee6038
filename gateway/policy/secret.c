/* SPDX-License-Identifier: Apache-2.0 */
/* Credential bindings (see secret.h). */
#include "policy/secret.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "space/json.h"
#include "wire/pattern.h"

struct gw_secrets {
        atomic_int refs;
        size_t n;
        gw_secret v[];
};

static bool is_tchar(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool printable(const char *s, size_t n, bool tab)
{
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (!((c >= 0x20 && c <= 0x7e) || (tab && c == '\t')))
                        return false;
        }
        return true;
}

/* Fields that frame, route or hop: a secret never goes in one of these. */
static bool header_forbidden(const char *h)
{
        static const char *const no[] = {
                "host",         "content-length",   "transfer-encoding", "connection", "upgrade",
                "te",           "trailer",          "keep-alive",        "expect",     "cookie2",
                "content-type", "content-encoding", "http2-settings",    NULL};
        for (size_t i = 0; no[i]; i++)
                if (strcasecmp(h, no[i]) == 0)
                        return true;
        return strncasecmp(h, "proxy-", 6) == 0;
}

static int hosts_parse(json_object *hosts, gw_secret *b, sp_error **err)
{
        if (!json_object_is_type(hosts, json_type_array))
                return sp_error_set(err, SP_E_INVALID, "field 'hosts' must be an array of host names");
        size_t n = json_object_array_length(hosts);
        if (n < 1 || n > GW_SECRET_HOSTS_MAX)
                return sp_error_set(err, SP_E_INVALID, "field 'hosts' must name 1 to %d hosts", GW_SECRET_HOSTS_MAX);
        char seen[GW_SECRET_HOSTS_MAX][GW_NAME_MAX + 1];
        for (size_t i = 0; i < n; i++) {
                json_object *v = json_object_array_get_idx(hosts, i);
                const char *reason = "must be a string";
                if (!json_object_is_type(v, json_type_string) ||
                    gw_pattern_normalize(json_object_get_string(v), (size_t)json_object_get_string_len(v), seen[i],
                                         &reason) < 0)
                        return sp_error_set(err, SP_E_INVALID, "field 'hosts[%zu]' %s", i, reason);
                for (size_t j = 0; j < i; j++)
                        if (strcmp(seen[j], seen[i]) == 0)
                                return sp_error_set(err, SP_E_INVALID, "field 'hosts[%zu]' repeats hosts[%zu]", i, j);
                if (b)
                        snprintf(b->hosts[b->nhosts++], sizeof(b->hosts[0]), "%s", seen[i]);
        }
        return 0;
}

static int inject_parse(json_object *inject, gw_secret *b, sp_error **err)
{
        static const char *const fields[] = {"header", "format", "basic", NULL};
        if (!json_object_is_type(inject, json_type_object))
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'inject' must be an object: {\"header\": ..., \"format\": ...} or "
                                    "{\"basic\": {...}}");
        if (sp_json_check_fields(inject, fields, err) < 0)
                return sp_error_wrap(err, "field 'inject'");
        json_object *basic = NULL;
        const char *header = NULL, *format = NULL;
        if (sp_json_get_string(inject, "header", false, GW_SECRET_HEADER_MAX, &header, err) < 0 ||
            sp_json_get_string(inject, "format", false, GW_SECRET_FORMAT_MAX, &format, err) < 0 ||
            sp_json_get_object(inject, "basic", false, &basic, err) < 0)
                return sp_error_wrap(err, "field 'inject'");
        if (!!header == !!basic)
                return sp_error_set(err, SP_E_INVALID, "field 'inject' needs exactly one of 'header' and 'basic'");
        if (basic) {
                static const char *const bf[] = {"username", NULL};
                const char *user = NULL;
                if (format)
                        return sp_error_set(err, SP_E_INVALID, "field 'inject.format' goes with 'header', not 'basic'");
                if (sp_json_check_fields(basic, bf, err) < 0 ||
                    sp_json_get_string(basic, "username", false, GW_SECRET_USERNAME_MAX, &user, err) < 0)
                        return sp_error_wrap(err, "field 'inject.basic'");
                if (user && (!printable(user, strlen(user), false) || strchr(user, ':')))
                        return sp_error_set(err, SP_E_INVALID,
                                            "field 'inject.basic.username' must be printable ASCII without ':'");
                if (b) {
                        b->kind = GW_INJECT_BASIC;
                        snprintf(b->header, sizeof(b->header), "Authorization");
                        snprintf(b->username, sizeof(b->username), "%s", user ? user : "");
                }
                return 0;
        }
        size_t hl = strlen(header);
        bool token = hl > 0;
        for (size_t i = 0; i < hl; i++)
                token = token && is_tchar(header[i]);
        if (!token)
                return sp_error_set(err, SP_E_INVALID, "field 'inject.header' must be a header field name (a token)");
        if (header_forbidden(header))
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'inject.header': '%s' frames or routes the request; a secret cannot go "
                                    "there",
                                    header);
        if (!format)
                format = "{{secret}}";
        const char *at = strstr(format, "{{secret}}");
        if (!printable(format, strlen(format), false) || !at || strstr(at + 1, "{{secret}}"))
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'inject.format' must be printable ASCII holding '{{secret}}' exactly once");
        if (b) {
                b->kind = GW_INJECT_HEADER;
                snprintf(b->header, sizeof(b->header), "%s", header);
                snprintf(b->format, sizeof(b->format), "%s", format);
        }
        return 0;
}

int gw_secret_check_spec(json_object *hosts, json_object *inject, sp_error **err)
{
        if (hosts_parse(hosts, NULL, err) < 0 || inject_parse(inject, NULL, err) < 0)
                return -SP_E_INVALID;
        return 0;
}

int gw_secret_check_value(const char *value, size_t len, sp_error **err)
{
        if (len < 1 || len > GW_SECRET_VALUE_MAX)
                return sp_error_set(err, SP_E_INVALID, "field 'value' must hold 1 to %d bytes", GW_SECRET_VALUE_MAX);
        if (!printable(value, len, true))
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'value' must be printable ASCII (it goes into a header field)");
        return 0;
}

bool gw_secret_is_placeholder(const char *s, size_t len)
{
        size_t pl = sizeof(GW_SECRET_PLACEHOLDER_PREFIX) - 1;
        if (len != GW_SECRET_PLACEHOLDER_LEN || memcmp(s, GW_SECRET_PLACEHOLDER_PREFIX, pl) != 0)
                return false;
        for (size_t i = pl; i < len; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

int gw_secret_placeholder_new(char out[GW_SECRET_PLACEHOLDER_LEN + 1], sp_error **err)
{
        uint8_t r[16];
        if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
                return sp_error_set_errno(err, SP_E_IO, errno, "getrandom");
        int n = snprintf(out, GW_SECRET_PLACEHOLDER_LEN + 1, "%s", GW_SECRET_PLACEHOLDER_PREFIX);
        for (size_t i = 0; i < sizeof(r); i++)
                n += snprintf(out + n, GW_SECRET_PLACEHOLDER_LEN + 1 - (size_t)n, "%02x", r[i]);
        return 0;
}

static int binding_parse(json_object *o, gw_secret *b, sp_error **err)
{
        static const char *const fields[] = {"id",    "name",         "placeholder", "hosts", "inject",
                                             "value", "rate_per_min", "expires_at",  NULL};
        if (!json_object_is_type(o, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "must be an object");
        const char *id, *name, *ph, *value = NULL;
        json_object *hosts = NULL, *inject = NULL;
        int64_t rate = 0, exp = 0;
        if (sp_json_check_fields(o, fields, err) < 0 ||
            sp_json_get_string(o, "id", true, GW_SECRET_NAME_MAX, &id, err) < 0 ||
            sp_json_get_string(o, "name", true, GW_SECRET_NAME_MAX, &name, err) < 0 ||
            sp_json_get_string(o, "placeholder", true, GW_SECRET_PLACEHOLDER_LEN, &ph, err) < 0 ||
            sp_json_get_array(o, "hosts", true, GW_SECRET_HOSTS_MAX, &hosts, err) < 0 ||
            sp_json_get_object(o, "inject", true, &inject, err) < 0 ||
            sp_json_get_string(o, "value", false, GW_SECRET_VALUE_MAX, &value, err) < 0 ||
            sp_json_get_int(o, "rate_per_min", false, 0, 1000000, &rate, err) < 0 ||
            sp_json_get_int(o, "expires_at", false, 0, INT64_MAX / 2, &exp, err) < 0)
                return -SP_E_INVALID;
        if (!gw_secret_is_placeholder(ph, strlen(ph)))
                return sp_error_set(err, SP_E_INVALID, "field 'placeholder' is not a placeholder");
        if (hosts_parse(hosts, b, err) < 0 || inject_parse(inject, b, err) < 0)
                return -SP_E_INVALID;
        if (value) {
                size_t vl = (size_t)json_object_get_string_len(json_object_object_get(o, "value"));
                if (gw_secret_check_value(value, vl, err) < 0)
                        return -SP_E_INVALID;
                if (!(b->value = malloc(vl + 1)))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                memcpy(b->value, value, vl + 1);
                b->value_len = vl;
        }
        snprintf(b->id, sizeof(b->id), "%s", id);
        snprintf(b->name, sizeof(b->name), "%s", name);
        snprintf(b->placeholder, sizeof(b->placeholder), "%s", ph);
        b->rate_per_min = (uint32_t)rate;
        b->expires_at = exp;
        return 0;
}

int gw_secrets_parse(json_object *arr, gw_secrets **ret, sp_error **err)
{
        *ret = NULL;
        if (!arr)
                return 0;
        if (!json_object_is_type(arr, json_type_array))
                return sp_error_set(err, SP_E_INVALID, "field 'secrets' must be an array");
        size_t n = json_object_array_length(arr);
        if (n == 0)
                return 0;
        if (n > GW_SECRETS_MAX)
                return sp_error_set(err, SP_E_INVALID, "field 'secrets': at most %d per sandbox", GW_SECRETS_MAX);
        gw_secrets *s = calloc(1, sizeof(*s) + n * sizeof(s->v[0]));
        if (!s)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        atomic_init(&s->refs, 1);
        for (size_t i = 0; i < n; i++) {
                s->n = i + 1; /* so that unref frees what was parsed */
                if (binding_parse(json_object_array_get_idx(arr, i), &s->v[i], err) < 0) {
                        gw_secrets_unref(s);
                        return sp_error_wrap(err, "field 'secrets[%zu]'", i);
                }
                for (size_t j = 0; j < i; j++)
                        if (strcmp(s->v[j].placeholder, s->v[i].placeholder) == 0) {
                                gw_secrets_unref(s);
                                return sp_error_set(err, SP_E_INVALID, "field 'secrets[%zu]': placeholder repeated", i);
                        }
        }
        *ret = s;
        return 0;
}

size_t gw_secrets_keep_values(gw_secrets *s, const gw_secrets *old)
{
        size_t missing = 0;
        for (size_t i = 0; s && i < s->n; i++) {
                gw_secret *b = &s->v[i];
                for (size_t j = 0; !b->value && old && j < old->n; j++) {
                        const gw_secret *o = &old->v[j];
                        if (o->value && strcmp(o->id, b->id) == 0 && strcmp(o->placeholder, b->placeholder) == 0 &&
                            (b->value = malloc(o->value_len + 1))) {
                                memcpy(b->value, o->value, o->value_len + 1);
                                b->value_len = o->value_len;
                        }
                }
                if (!b->value)
                        missing++;
        }
        return missing;
}

json_object *gw_secrets_strip_values(json_object *arr)
{
        if (!arr)
                return NULL;
        json_object *copy = NULL;
        if (json_object_deep_copy(arr, &copy, NULL) != 0)
                return NULL;
        for (size_t i = 0; json_object_is_type(copy, json_type_array) && i < json_object_array_length(copy); i++) {
                json_object *b = json_object_array_get_idx(copy, i);
                if (json_object_is_type(b, json_type_object))
                        json_object_object_del(b, "value");
        }
        return copy;
}

size_t gw_secrets_count(const gw_secrets *s)
{
        return s ? s->n : 0;
}

const gw_secret *gw_secrets_at(const gw_secrets *s, size_t i)
{
        return s && i < s->n ? &s->v[i] : NULL;
}

const gw_secret *gw_secrets_by_placeholder(const gw_secrets *s, const char *p, size_t len)
{
        for (size_t i = 0; s && i < s->n; i++)
                if (len == GW_SECRET_PLACEHOLDER_LEN && memcmp(s->v[i].placeholder, p, len) == 0)
                        return &s->v[i];
        return NULL;
}

bool gw_secret_bound(const gw_secret *b, const char *host)
{
        for (size_t j = 0; host && *host && j < b->nhosts; j++)
                if (gw_pattern_match(b->hosts[j], host))
                        return true;
        return false;
}

bool gw_secrets_bound(const gw_secrets *s, const char *host)
{
        for (size_t i = 0; s && i < s->n; i++)
                if (gw_secret_bound(&s->v[i], host))
                        return true;
        return false;
}

gw_secrets *gw_secrets_ref(gw_secrets *s)
{
        if (s)
                atomic_fetch_add(&s->refs, 1);
        return s;
}

void gw_secrets_unref(gw_secrets *s)
{
        if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
                return;
        for (size_t i = 0; i < s->n; i++)
                if (s->v[i].value) {
                        explicit_bzero(s->v[i].value, s->v[i].value_len);
                        free(s->v[i].value);
                }
        free(s);
}
