/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Credential bindings (docs/secrets.md): a tenant's secret, bound to hosts
 * and to the place in a request where it goes, as one sandbox uses it. The
 * sandbox holds only the placeholder; the gateway, terminating TLS for a
 * bound host, puts the value in the bound header of requests to that host
 * and nowhere else.
 *
 * What a tenant gives (the control plane checks it with
 * gw_secret_check_spec(), the same code the gateway parses with):
 *
 *   "hosts":  ["api.openai.com", "*.githubusercontent.com"]
 *             exact names or "*.suffix" (wire/pattern.h; never "*"), 1..16
 *   "inject": {"header": "Authorization", "format": "Bearer {{secret}}"}
 *             a header field (a token; not one that frames or routes the
 *             request: Host, Content-Length, Transfer-Encoding, Connection,
 *             Upgrade, TE, Trailer, Keep-Alive, Expect, Content-Type,
 *             Content-Encoding, HTTP2-Settings, Cookie2, Proxy-*) whose whole value
 *             becomes format with {{secret}} (once, exactly) replaced by the
 *             value; format defaults to "{{secret}}"
 *          or {"basic": {"username": "x-access-token"}}
 *             Authorization: Basic, the value as the password (username:
 *             the one given, else the one the sandbox sent)
 *   the value: 1..GW_SECRET_VALUE_MAX bytes of printable ASCII (tab and
 *   0x20-0x7e), so that no value can end a header line
 *
 * What the control plane sends for each sandbox (CreateSandbox and
 * SetEgress "secrets"; the worker passes it on, keeping every value in
 * memory only):
 *
 *   {"id": "sec_...", "name": "openai", "placeholder": "space-secret-<32 hex>",
 *    "hosts": [...], "inject": {...}, "value": "...",
 *    "rate_per_min": 0, "expires_at": 0}
 *
 * rate_per_min: injections per minute on this gateway (0: no limit);
 * expires_at: unix seconds after which it is not injected (0: never). A
 * binding without "value" is one whose value the sender does not hold (a
 * worker that restarted): gw_secrets_keep_values() takes it from the set
 * the gateway had.
 *
 * A set is immutable once parsed and reference-counted, like a profile;
 * values are wiped when it is freed.
 */
#ifndef SPACE_GATEWAY_SECRET_H
#define SPACE_GATEWAY_SECRET_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/error.h"
#include "wire/name.h"

#define GW_SECRETS_MAX 32 /* per sandbox */
#define GW_SECRET_HOSTS_MAX 16
#define GW_SECRET_VALUE_MAX 8192
#define GW_SECRET_NAME_MAX 63
#define GW_SECRET_HEADER_MAX 64
#define GW_SECRET_FORMAT_MAX 256
#define GW_SECRET_USERNAME_MAX 128
#define GW_SECRET_PLACEHOLDER_PREFIX "space-secret-"
/* The prefix and 32 lowercase hex digits. */
#define GW_SECRET_PLACEHOLDER_LEN (sizeof(GW_SECRET_PLACEHOLDER_PREFIX) - 1 + 32)

typedef enum gw_inject_kind {
        GW_INJECT_HEADER,
        GW_INJECT_BASIC,
} gw_inject_kind;

typedef struct gw_secret {
        char id[GW_SECRET_NAME_MAX + 1];
        char name[GW_SECRET_NAME_MAX + 1];
        char placeholder[GW_SECRET_PLACEHOLDER_LEN + 1];
        size_t nhosts;
        char hosts[GW_SECRET_HOSTS_MAX][GW_NAME_MAX + 1];
        gw_inject_kind kind;
        char header[GW_SECRET_HEADER_MAX + 1]; /* HEADER: the field; BASIC: "Authorization" */
        char format[GW_SECRET_FORMAT_MAX + 1]; /* HEADER */
        char username[GW_SECRET_USERNAME_MAX + 1]; /* BASIC; empty: the sandbox's */
        char *value; /* NULL: not held */
        size_t value_len;
        uint32_t rate_per_min;
        int64_t expires_at; /* unix seconds; 0: never */
} gw_secret;

typedef struct gw_secrets gw_secrets;

/* Checks what a tenant gives: hosts (an array) and inject (an object).
 * SP_E_INVALID naming the field. */
int gw_secret_check_spec(json_object *hosts, json_object *inject, sp_error **err);
/* Checks a value (SP_E_INVALID, never quoting it). */
int gw_secret_check_value(const char *value, size_t len, sp_error **err);
/* Whether s is a placeholder's form. */
bool gw_secret_is_placeholder(const char *s, size_t len);
/* Writes a new random placeholder to out. */
int gw_secret_placeholder_new(char out[GW_SECRET_PLACEHOLDER_LEN + 1], sp_error **err);

/* Parses a sandbox's bindings (an array; NULL or empty: none -> *ret NULL). */
int gw_secrets_parse(json_object *arr, gw_secrets **ret, sp_error **err);
/* Fills the values missing from s with those of old for the same id and
 * placeholder. Returns how many are still missing. */
size_t gw_secrets_keep_values(gw_secrets *s, const gw_secrets *old);
/* A copy of a bindings array without the values (for what is written to
 * disk). New reference; NULL for NULL. */
json_object *gw_secrets_strip_values(json_object *arr);

size_t gw_secrets_count(const gw_secrets *s);
const gw_secret *gw_secrets_at(const gw_secrets *s, size_t i);
/* The binding whose placeholder is p[0..len), or NULL. */
const gw_secret *gw_secrets_by_placeholder(const gw_secrets *s, const char *p, size_t len);
/* Whether any binding is bound to host (normal form). */
bool gw_secrets_bound(const gw_secrets *s, const char *host);
bool gw_secret_bound(const gw_secret *b, const char *host);

gw_secrets *gw_secrets_ref(gw_secrets *s);
void gw_secrets_unref(gw_secrets *s);
static inline void gw_secrets_unrefp(gw_secrets **s)
{
        gw_secrets_unref(*s);
}

#endif
